"""Optimisers over libwgml's (AdamW, SGD with momentum), PyTorch-style:

    opt = wgml.optim.AdamW(params, lr=1e-3, weight_decay=0.01, max_grad_norm=1.0)
    loss = ...; opt.zero_grad(); loss.backward(); opt.step(); print(loss.item())

The library moves the parameters into one flat GPU buffer and updates them all in one
dispatch; clipping by the global gradient norm happens on the GPU too. Differences from
PyTorch, all the C API's: step() consumes the gradients (p.grad is None after it); a group
takes `lr_scale` (times the optimiser's lr) rather than its own lr.

state_dict() / load_state_dict() carry what a resume needs (the moments as NumPy arrays,
the step count, the base lr and the schedule), as PyTorch's; see examples/save_resume.py.
"""
import math
import numbers
import typing as _t

import numpy as np

from ._errors import ContextError
from ._ffi import ffi, lib
from ._tensor import Tensor, _wrap

__all__ = ["Optimizer", "AdamW", "SGD", "lr_at"]

_DECAYS = {"none": lib.WGML_LR_DECAY_NONE, None: lib.WGML_LR_DECAY_NONE,
           "cosine": lib.WGML_LR_DECAY_COSINE, "linear": lib.WGML_LR_DECAY_LINEAR}


def _schedule(warmup_steps, total_steps, min_lr_ratio, decay):
    if decay not in _DECAYS:
        raise ValueError("decay is 'none', 'cosine' or 'linear', not %r" % (decay,))
    s = ffi.new("wgml_lr_schedule *")
    s.warmup_steps = int(warmup_steps)
    s.total_steps = int(total_steps)
    s.min_lr_ratio = min_lr_ratio
    s.decay = _DECAYS[decay]
    return s


def lr_at(base_lr: float, step: int, warmup_steps: int = 0, total_steps: int = 0, min_lr_ratio: float = 0.0,
          decay: _t.Optional[str] = "none") -> float:
    """The lr a schedule gives at `step` (wgml_lr_at): NaN for a schedule the library refuses."""
    return lib.wgml_lr_at(_schedule(warmup_steps, total_steps, min_lr_ratio, decay), base_lr, int(step))


class _Group(dict):
    """A parameter group, fixed when the optimiser is made (the library lays its range, weight
    decay and lr_scale out on the GPU then): an edit raises rather than being ignored."""

    def _fixed(self, *args, **kwargs):
        raise TypeError("param_groups are fixed when the optimiser is made (their range, weight_decay and "
                        "lr_scale live on the GPU): to change the lr set opt.lr or opt.set_schedule(...) (every "
                        "group's lr is that times its lr_scale); for other weight_decay or lr_scale make a new "
                        "optimiser")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _fixed


class Optimizer:
    """Base of AdamW and SGD. params: tensors, or groups as dicts {"params": [...],
    "weight_decay": w, "lr_scale": s} (PyTorch's param_groups, with lr_scale for lr)."""

    _kind = None
    _name = None

    def __init__(self, params, lr, weight_decay, max_grad_norm, **fields):
        self._ptr = None
        self._scaling = None
        self._base_lr = float(lr)
        self._schedule = None
        self._hyper = dict(fields, max_grad_norm=max_grad_norm)
        params = list(params)
        if not params:
            raise ValueError("the optimiser got no parameters")
        groups = params if isinstance(params[0], dict) else None
        desc = ffi.new("wgml_optim_desc *")
        desc.kind = self._kind
        desc.lr = lr
        desc.max_grad_norm = max_grad_norm
        for k, v in fields.items():
            setattr(desc, k, v)
        if groups is None:
            self.params = [self._param(p) for p in params]
            self.param_groups = [_Group(params=tuple(self.params), weight_decay=weight_decay, lr_scale=1.0)]
        else:
            self.param_groups = []
            for i, g in enumerate(groups):
                unknown = set(g) - {"params", "weight_decay", "lr_scale"}
                if not isinstance(g, dict) or "params" not in g or unknown:
                    raise ValueError("param group %d: a dict with 'params' and optionally 'weight_decay' and "
                                     "'lr_scale'%s" % (i, "; unknown keys %s" % sorted(unknown) if unknown else ""))
                scale = g.get("lr_scale", 1.0)
                if not (isinstance(scale, numbers.Real) and math.isfinite(scale) and scale > 0):
                    raise ValueError("param group %d: lr_scale = %r must be a finite number > 0 (to freeze "
                                     "parameters, leave them out of the optimiser)" % (i, scale))
                self.param_groups.append(_Group(params=tuple(self._param(p) for p in g["params"]),
                                                weight_decay=g.get("weight_decay", weight_decay), lr_scale=scale))
            self.params = [p for g in self.param_groups for p in g["params"]]
        self._ctx = self.params[0]._ctx
        # the library takes evaluated parameters: fresh initialisers (lazy) are run here
        self._ctx.eval(*self.params)
        handles = [p._handle() for p in self.params]
        out = ffi.new("wgml_optimizer **")
        if groups is None:
            desc.weight_decay = weight_decay
            st = lib.wgml_optimizer_create(self._ctx._handle(), desc, len(handles),
                                           ffi.new("wgml_tensor *[]", handles), out)
        else:
            keep = []  # the cdata arrays must live through the call
            cgroups = ffi.new("wgml_param_group[]", len(self.param_groups))
            for cg, g in zip(cgroups, self.param_groups):
                arr = ffi.new("wgml_tensor *[]", [p._handle() for p in g["params"]] or [ffi.NULL])
                keep.append(arr)
                cg.n = len(g["params"])
                cg.params = arr
                cg.lr_scale = g["lr_scale"]
                cg.weight_decay = g["weight_decay"]
            st = lib.wgml_optimizer_create_groups(self._ctx._handle(), desc, len(self.param_groups), cgroups, out)
        self._ctx._check(st)
        self._ptr = out[0]
        self._ctx._optimizers.add(self)
        for p in self.params:
            p._rg = True  # the library made them trainable
        # tensors read before backward keep their graph: the step evaluates these losses,
        # which then hold it no longer than the loss itself

    @staticmethod
    def _param(p):
        if not isinstance(p, Tensor):
            raise TypeError("optimiser parameters are wgml.Tensor, not %s" % type(p).__name__)
        return p

    def _handle(self):
        if self._ptr is None or self._ctx._ptr is None:
            raise ContextError("the optimiser was closed (or its context)")
        return self._ptr

    def __repr__(self) -> str:
        return "wgml.optim.%s(%d parameters, lr=%g, steps=%d)" % (type(self).__name__, len(self.params),
                                                                 self._base_lr, self.steps if self._ptr else -1)

    def _release(self, ptr_alive):
        ptr, self._ptr = self._ptr, None
        if ptr is not None and ptr_alive:
            lib.wgml_optimizer_free(ptr)

    def close(self) -> None:
        """Frees the optimiser's state (the parameters stay)."""
        self._release(self._ctx._ptr is not None)

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            self._release(self._ctx._ptr is not None)

    # ------------------------------------------------------------ stepping

    def step(self, *extra: Tensor) -> None:
        """Evaluates the pending gradients, the losses backward() was called on since the last
        step, and any `extra` tensors, and updates every parameter, in one submit."""
        h = self._handle()
        losses = [r() for r in self._ctx._losses]
        self._ctx._losses = []
        ts = [t for t in list(extra) + losses if t is not None and t._ptr is not None]
        arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts] or [ffi.NULL])
        self._ctx._check(lib.wgml_optimizer_step(h, len(ts), arr))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the parameters' gradients (after a step there are none: it consumed them)."""
        for p in self.params:
            p.zero_grad()

    @property
    def grad_norm(self):
        """The global gradient norm of the last step, before clipping."""
        n = ffi.new("float *")
        self._ctx._check(lib.wgml_optimizer_grad_norm(self._handle(), n))
        return float(n[0])

    @property
    def steps(self) -> int:
        """Steps taken (settable, e.g. when resuming; load_state_dict sets it)."""
        return int(lib.wgml_optimizer_steps(self._handle()))

    @steps.setter
    def steps(self, n):
        self._ctx._check(lib.wgml_optimizer_set_steps(self._handle(), int(n)))

    @property
    def lr(self):
        """The lr the next step uses (the schedule's), before the groups' lr_scale."""
        return float(lib.wgml_optimizer_lr(self._handle()))

    @lr.setter
    def lr(self, lr):
        """The base lr (the schedule's peak, if one is set)."""
        self._ctx._check(lib.wgml_optimizer_set_lr(self._handle(), lr))
        self._base_lr = float(lr)

    def set_schedule(self, warmup_steps: _t.Optional[int] = 0, total_steps: int = 0, min_lr_ratio: float = 0.0,
                     decay: _t.Optional[str] = "cosine") -> None:
        """Linear warm-up, then a cosine or linear decay to min_lr_ratio x the base lr
        (wgml_lr_schedule); set_schedule(None) removes it."""
        if warmup_steps is None:
            self._ctx._check(lib.wgml_optimizer_set_schedule(self._handle(), ffi.NULL))
            self._schedule = None
            return
        s = _schedule(warmup_steps, total_steps, min_lr_ratio, decay)
        self._ctx._check(lib.wgml_optimizer_set_schedule(self._handle(), s))
        self._schedule = {"warmup_steps": int(warmup_steps), "total_steps": int(total_steps),
                          "min_lr_ratio": float(min_lr_ratio), "decay": decay}

    def state(self, i: int) -> _t.Tuple[Tensor, Tensor]:
        """Views of parameter i's first and second moments (m, v)."""
        m, v = ffi.new("wgml_tensor **"), ffi.new("wgml_tensor **")
        self._ctx._check(lib.wgml_optimizer_state(self._handle(), int(i), m, v))
        return _wrap(self._ctx, m[0], storage=True), _wrap(self._ctx, v[0], storage=True)

    # ------------------------------------------------------------ loss scaling

    def set_loss_scaling(self, init_scale: _t.Optional[float] = 65536.0, growth_interval: int = 2000,
                         backoff: float = 0.5, growth: float = 2.0) -> None:
        """Dynamic loss scaling for mixed precision, on the GPU (torch.amp.GradScaler's rules
        and defaults): backward() on scale_loss(loss); step() unscales the gradients, skips a
        step whose gradients hold inf or NaN and halves the scale, doubles it after
        growth_interval good steps. set_loss_scaling(None) turns it off."""
        if init_scale is None:
            self._ctx._check(lib.wgml_optimizer_set_loss_scaling(self._handle(), ffi.NULL))
            self._scaling = None
            return
        s = ffi.new("wgml_loss_scaling *")
        s.init_scale, s.growth_interval, s.backoff, s.growth = init_scale, int(growth_interval), backoff, growth
        self._ctx._check(lib.wgml_optimizer_set_loss_scaling(self._handle(), s))
        self._scaling = {"init_scale": float(init_scale), "growth_interval": int(growth_interval),
                         "backoff": float(backoff), "growth": float(growth)}

    def scale_loss(self, loss: Tensor) -> Tensor:
        """loss x the current scale (a one-element tensor), for backward()."""
        if not isinstance(loss, Tensor):
            raise TypeError("scale_loss takes a wgml.Tensor, not %s" % type(loss).__name__)
        out = lib.wgml_optimizer_scale_loss(self._handle(), loss._handle())
        return _wrap(self._ctx, out)

    @property
    def loss_scale_state(self) -> _t.Dict[str, _t.Any]:
        """{"scale", "good_steps", "skipped_steps", "last_skipped", "updates"} after the last
        step (reads 32 bytes); the library's error when scaling is off."""
        st = ffi.new("wgml_loss_scale_state *")
        self._ctx._check(lib.wgml_optimizer_loss_scale_state(self._handle(), st))
        return {"scale": float(st.scale), "good_steps": int(st.good_steps), "skipped_steps": int(st.skipped_steps),
                "last_skipped": bool(st.last_skipped), "updates": int(st.updates)}

    def _set_loss_scale_state(self, d):
        st = ffi.new("wgml_loss_scale_state *")
        st.scale, st.good_steps, st.skipped_steps = d["scale"], int(d["good_steps"]), int(d["skipped_steps"])
        st.last_skipped, st.updates = int(bool(d["last_skipped"])), int(d["updates"])
        self._ctx._check(lib.wgml_optimizer_set_loss_scale_state(self._handle(), st))

    # ------------------------------------------------------------ checkpoints

    _MOMENTS = ("exp_avg", "exp_avg_sq")  # PyTorch's names for AdamW's m and v

    def state_dict(self) -> _t.Dict[str, _t.Any]:
        """What a resume needs, as PyTorch's optimiser state_dict: {"state": {i: {moment
        name: NumPy array}}, "param_groups": [{"params": [indices], "weight_decay",
        "lr_scale"}], "step", "lr" (the base lr), "schedule" (or None), "hyper" (the
        constructor's numbers), "kind"}. Parameters are numbered over the groups in order.
        Save it with the model's tensors (examples/save_resume.py) and give it to
        load_state_dict of an optimiser made the same way."""
        state = {}
        for i in range(len(self.params)):
            m, v = self.state(i)
            state[i] = {name: t.numpy() for name, t in zip(self._MOMENTS, (m, v))}
        return {"kind": self._name, "state": state, "param_groups": self._numbered_groups(), "step": self.steps,
                "lr": self._base_lr, "schedule": dict(self._schedule) if self._schedule else None,
                "hyper": dict(self._hyper),
                "loss_scaling": dict(self._scaling, state=self.loss_scale_state) if self._scaling else None}

    def load_state_dict(self, state_dict: _t.Dict[str, _t.Any]) -> None:
        """Restores a state_dict(): the moments, step count, base lr and schedule. The
        optimiser must have been made the same way (kind, parameter shapes, groups, the
        constructor's numbers); a difference is a ValueError naming it (PyTorch would take
        the saved group settings: here they are fixed when the optimiser is made)."""
        sd = state_dict
        if sd.get("kind") != self._name:
            raise ValueError("load_state_dict: the state is of a %s optimiser, this is %s" % (sd.get("kind"), self._name))
        if len(sd["state"]) != len(self.params):
            raise ValueError("load_state_dict: the state has %d parameters, this optimiser %d"
                             % (len(sd["state"]), len(self.params)))
        mine = self._numbered_groups()
        for i, (a, b) in enumerate(zip(mine, sd["param_groups"])):
            if len(a["params"]) != len(b["params"]) or float(a["weight_decay"]) != float(b["weight_decay"]) or \
                    float(a["lr_scale"]) != float(b["lr_scale"]):
                raise ValueError("load_state_dict: param group %d differs (%r here, %r saved)" % (i, a, b))
        if len(mine) != len(sd["param_groups"]):
            raise ValueError("load_state_dict: %d param groups here, %d saved" % (len(mine), len(sd["param_groups"])))
        for k, v in sd.get("hyper", {}).items():
            if k in self._hyper and float(self._hyper[k]) != float(v):
                raise ValueError("load_state_dict: %s is %r here, %r in the state" % (k, self._hyper[k], v))
        for i in range(len(self.params)):
            saved = sd["state"][i] if i in sd["state"] else sd["state"][str(i)]
            for name, t in zip(self._MOMENTS, self.state(i)):
                a = np.asarray(saved[name], dtype=np.float32)
                if a.shape != t.shape:
                    raise ValueError("load_state_dict: parameter %d's %s has shape %s, the parameter %s"
                                     % (i, name, a.shape, t.shape))
                t.write(a)
        self.steps = int(sd["step"])
        self.lr = float(sd["lr"])
        self.set_schedule(None) if not sd.get("schedule") else self.set_schedule(**sd["schedule"])
        scaling = sd.get("loss_scaling")
        if scaling:
            self.set_loss_scaling(**{k: v for k, v in scaling.items() if k != "state"})
            self._set_loss_scale_state(scaling["state"])
        elif self._scaling:
            self.set_loss_scaling(None)

    def _numbered_groups(self) -> _t.List[_t.Dict[str, _t.Any]]:
        """The parameter groups with their parameters as indices (state_dict's form)."""
        out, k = [], 0
        for g in self.param_groups:
            out.append({"params": list(range(k, k + len(g["params"]))), "weight_decay": g["weight_decay"],
                        "lr_scale": g["lr_scale"]})
            k += len(g["params"])
        return out


class AdamW(Optimizer):
    """AdamW with decoupled weight decay (PyTorch's defaults but weight_decay, which is 0
    here as in the C API: pass 0.01 for torch.optim.AdamW's)."""

    _kind = lib.WGML_OPTIM_ADAMW
    _name = "adamw"

    def __init__(self, params: _t.Iterable[_t.Any], lr: float = 1e-3, betas: _t.Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, max_grad_norm: float = 0.0):
        b1, b2 = betas
        super().__init__(params, lr, weight_decay, max_grad_norm, beta1=b1, beta2=b2, eps=eps)


class SGD(Optimizer):
    """SGD with momentum; weight decay is added to the gradient (L2), as PyTorch's."""

    _kind = lib.WGML_OPTIM_SGD
    _name = "sgd"
    _MOMENTS = ("momentum_buffer", "unused")  # the second moment is AdamW's only

    def __init__(self, params: _t.Iterable[_t.Any], lr: float = 1e-2, momentum: float = 0.0,
                 weight_decay: float = 0.0, max_grad_norm: float = 0.0):
        super().__init__(params, lr, weight_decay, max_grad_norm, momentum=momentum)

