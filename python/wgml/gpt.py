"""The C library's GPT (wgml_gpt.h) from Python: the model `wgml gpt train` trains and
`wgml gpt sample` samples, GPT-2 or Llama/Qwen, with byte tokens.

    from wgml.gpt import GPT
    model = GPT.load("out/gpt/gpt.safetensors")
    print(model.generate("The ", max_new_tokens=100, temperature=0))   # the KV-cache decode path
    print(model.evaluate(open("valid.txt").read()))                    # a validation loss
    opt = model.optimizer(lr=1e-3, weight_decay=0.1)
    ids, targets = model.batch(text, batch=16, seed=step)              # or your own [B, T] int arrays
    loss = model.train_step(opt, ids, targets)                         # forward, backward, AdamW: one submit
    model.save("more.safetensors", optimizer=opt)                      # `wgml gpt train --resume` takes it

Everything runs in the C library (one submit per training step, one per generated token);
this module converts text and arrays and raises the package's errors (wgml.FileError for a
missing checkpoint, wgml.FormatError for a corrupt one, ...) with the library's message.

Tokens are bytes: a model's vocabulary (`vocab`) lists the byte of each token id, the distinct
bytes of the training text in increasing order. Text is encoded as UTF-8 and decoded back
with errors="replace" (a byte-level model may cut a character in two).
"""
import dataclasses
import os
import typing as _t
import weakref

import numpy as np

from ._context import Context, default_context
from ._errors import ContextError, error_for
from ._ffi import ffi, gpt_header_path, header_path, lib
from ._tensor import _wrap, tensor
from .optim import _schedule

if gpt_header_path is None:
    raise ImportError("wgml.gpt: the library's header %s has no wgml_gpt.h beside it (an install older than the "
                      "public GPT API); reinstall the package, or set WGML_HEADER to a wgml.h that has one"
                      % header_path)

__all__ = ["GPT", "GPTConfig", "GPTOptimizer"]

_ARCHS = {"gpt2": lib.WGML_GPT_GPT2, "llama": lib.WGML_GPT_LLAMA}
_ARCH_NAMES = {v: k for k, v in _ARCHS.items()}
TextOrIds = _t.Union[str, bytes, _t.Sequence[int], np.ndarray]


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """A model's shape (wgml_gpt_config). Zeros mean the library's defaults: kv_heads = heads,
    ffn = 4 width (GPT-2) or 8 width / 3 rounded up to 32 (Llama), rope_base 10000, norm_eps
    1e-5; a model's `config` has them resolved."""
    vocab: int
    block: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 128
    arch: str = "gpt2"  # "gpt2" or "llama"
    kv_heads: int = 0
    ffn: int = 0
    dropout: float = 0.0
    rope_base: float = 0.0
    norm_eps: float = 0.0

    def _c(self):
        if self.arch not in _ARCHS:
            raise ValueError("arch is 'gpt2' or 'llama', not %r" % (self.arch,))
        c = ffi.new("wgml_gpt_config *")
        c.arch = _ARCHS[self.arch]
        for f in ("vocab", "block", "layers", "heads", "kv_heads", "width", "ffn"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError("GPTConfig.%s is an int, not %r" % (f, v))
            if not -2 ** 63 <= v < 2 ** 63:
                raise OverflowError("GPTConfig.%s = %d does not fit int64" % (f, v))
            setattr(c, f, int(v))
        c.dropout, c.rope_base, c.norm_eps = float(self.dropout), float(self.rope_base), float(self.norm_eps)
        return c

    @staticmethod
    def _from_c(c) -> "GPTConfig":
        return GPTConfig(vocab=int(c.vocab), block=int(c.block), layers=int(c.layers), heads=int(c.heads),
                         width=int(c.width), arch=_ARCH_NAMES.get(int(c.arch), str(int(c.arch))),
                         kv_heads=int(c.kv_heads), ffn=int(c.ffn), dropout=float(c.dropout),
                         rope_base=float(c.rope_base), norm_eps=float(c.norm_eps))

    def resolved(self) -> "GPTConfig":
        """The config with its zeros replaced by the defaults, checked (wgml_gpt_config_resolve):
        a field out of range is a ValueError naming it."""
        out = ffi.new("wgml_gpt_config *")
        err = ffi.new("char[256]")
        st = lib.wgml_gpt_config_resolve(self._c(), out, err, 256)
        if st != lib.WGML_OK:
            raise error_for(st, ffi.string(err).decode("utf-8", "replace"))
        return GPTConfig._from_c(out)


class GPTOptimizer:
    """AdamW over a GPT's parameters (wgml_gpt_optimizer): weight decay on the matrices only,
    the gradients clipped to max_grad_norm (0: not), an optional warm-up and decay of the lr.
    Made by GPT.optimizer(); saved with GPT.save(path, optimizer=opt), restored with
    GPT.load_optimizer(path, opt)."""

    def __init__(self, model: "GPT", ptr):
        self._ptr = ptr
        self.model = model

    def _handle(self):
        if self._ptr is None or self.model._ptr is None:
            raise ContextError("the optimiser was closed (or its model, or their context)")
        return self._ptr

    def _release(self):
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            lib.wgml_optimizer_free(ptr)

    def close(self) -> None:
        """Frees the moments (the model stays)."""
        if self.model._ptr is not None:
            self._release()
        self._ptr = None

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self.model._ptr is not None:
            self._release()

    @property
    def steps(self) -> int:
        """Steps taken (a loaded optimiser state's included)."""
        return int(lib.wgml_optimizer_steps(self._handle()))

    @property
    def lr(self) -> float:
        """The lr the next step uses (the schedule's)."""
        return float(lib.wgml_optimizer_lr(self._handle()))

    @property
    def grad_norm(self) -> float:
        """The global gradient norm of the last step, before clipping."""
        n = ffi.new("float *")
        self.model.ctx._check(lib.wgml_optimizer_grad_norm(self._handle(), n))
        return float(n[0])

    def __repr__(self) -> str:
        if self._ptr is None:
            return "<wgml.gpt.GPTOptimizer closed>"
        return "<wgml.gpt.GPTOptimizer AdamW, steps=%d, lr=%g>" % (self.steps, self.lr)


class GPT:
    """A decoder-only transformer of the C library (wgml_gpt), owned by a Context.

    Make one with GPT.load(checkpoint) or GPT.new(config); free it with close() (or a `with`
    block; the context's close frees it too). Arrays of token ids are [B, T] or [T] (one row)
    of integers in 0..vocab_size-1, T at most config.block; where ids are taken, a str or
    bytes is encoded (one row).

    Attributes: ctx (its Context), config (the resolved GPTConfig), vocab (bytes: the byte of
    each token id; None for a model of more than 256 tokens, whose tokens are ids)."""

    def __init__(self, ctx: Context, ptr):
        """Internal: use GPT.load or GPT.new."""
        self.ctx = ctx
        self._ptr = ptr
        self._optimizers = weakref.WeakSet()  # those alive are freed before the model (the C API's order)
        ctx._optimizers.add(self)  # Context.close() releases what it holds before freeing itself
        c = ffi.new("wgml_gpt_config *")
        ctx._check(lib.wgml_gpt_get_config(ptr, c))
        self.config = GPTConfig._from_c(c)
        self._read_vocab()

    # ------------------------------------------------------------ making, saving, freeing

    @classmethod
    def load(cls, path: _t.Union[str, "os.PathLike[str]"], ctx: _t.Optional[Context] = None) -> "GPT":
        """The model of a checkpoint of `wgml gpt train` or GPT.save: config, weights,
        vocabulary and step (the optimiser's moments stay in the file: load_optimizer).
        A missing file raises wgml.FileError, a corrupt one wgml.FormatError (or ShapeError),
        each naming the file and the problem."""
        ctx = ctx or default_context()
        out = ffi.new("wgml_gpt **")
        ctx._check(lib.wgml_gpt_load(ctx._handle(), os.fsencode(path), out))
        return cls(ctx, out[0])

    @classmethod
    def new(cls, config: _t.Optional[GPTConfig] = None, *, seed: int = 0, vocabulary: _t.Union[str, bytes, None] = None,
            ctx: _t.Optional[Context] = None, **fields: _t.Any) -> "GPT":
        """A new model, initialised on the GPU from seed (GPT-2's scheme). The shape is a
        GPTConfig or its fields as keywords (GPT.new(vocab=65, layers=2, heads=4, width=64)).
        vocabulary: the bytes the tokens stand for (the distinct bytes of a str or bytes, in
        increasing order, as `wgml gpt train` takes them from its text); vocab defaults to
        their number. Without one, token k is byte k."""
        vocab_bytes = None
        if vocabulary is not None:
            data = vocabulary.encode("utf-8") if isinstance(vocabulary, str) else bytes(vocabulary)
            vocab_bytes = bytes(sorted(set(data)))
            if config is None:
                fields.setdefault("vocab", len(vocab_bytes))
        if config is None:
            if "vocab" not in fields:
                raise TypeError("GPT.new needs a GPTConfig, vocab=, or a vocabulary=")
            config = GPTConfig(**fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 64:
            raise ValueError("seed is an integer in [0, 2^64), not %r" % (seed,))
        ctx = ctx or default_context()
        out = ffi.new("wgml_gpt **")
        ctx._check(lib.wgml_gpt_new(ctx._handle(), config._c(), int(seed), out))
        model = cls(ctx, out[0])
        if vocab_bytes is not None:
            model.ctx._check(lib.wgml_gpt_set_vocab(model._ptr, ffi.from_buffer("uint8_t[]", vocab_bytes),
                                                    len(vocab_bytes)))
            model._read_vocab()
        return model

    def save(self, path: _t.Union[str, "os.PathLike[str]"], optimizer: _t.Optional[GPTOptimizer] = None) -> None:
        """Writes a checkpoint (atomically: a crash leaves the old file or the new one) that
        GPT.load and `wgml gpt sample` read; with the optimiser, its moments and step too, so
        training goes on from the file (load_optimizer, `wgml gpt train --resume`)."""
        opt = self._own(optimizer)._handle() if optimizer is not None else ffi.NULL
        self.ctx._check(lib.wgml_gpt_save(self._handle(), os.fsencode(path), opt))

    def load_optimizer(self, path: _t.Union[str, "os.PathLike[str]"], optimizer: GPTOptimizer) -> None:
        """The moments and step saved in a checkpoint into optimizer (made by this model's
        optimizer()): resuming. A checkpoint without moments is a FormatError, one of
        another shape a ShapeError."""
        self.ctx._check(lib.wgml_gpt_load_optimizer(self._handle(), os.fsencode(path),
                                                     self._own(optimizer)._handle()))

    def _release(self, ptr_alive: bool = True) -> None:
        ptr, self._ptr = self._ptr, None
        if ptr is None:
            return
        for opt in list(self._optimizers):
            opt._release()
        if ptr_alive:
            lib.wgml_gpt_delete(ptr)

    def close(self) -> None:
        """Frees the model, its tensors and its optimisers."""
        self._release(self.ctx._ptr is not None)

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and self.ctx._ptr is not None:
            self._release(True)

    def __enter__(self) -> "GPT":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def _handle(self):
        if self._ptr is None or self.ctx._ptr is None:
            raise ContextError("the model was closed (or its context)")
        return self._ptr

    def __repr__(self) -> str:
        c = self.config
        return "<wgml.gpt.GPT %s: %d layers, %d heads, width %d, block %d, vocab %d, %d parameters%s>" % (
            c.arch, c.layers, c.heads, c.width, c.block, c.vocab, self.num_parameters(),
            "" if self._ptr is not None else ", closed")

    # ------------------------------------------------------------ what the model is

    def _read_vocab(self):
        p = ffi.new("uint8_t **")
        n = lib.wgml_gpt_vocab(self._handle(), p)
        self._token_of = np.full(256, -1, dtype=np.int32)
        if p[0] == ffi.NULL:  # more than 256 tokens: ids, not bytes
            self.vocab = None
            return
        self.vocab = bytes(ffi.buffer(p[0], n))  # the byte of each token id
        self._token_of[np.frombuffer(self.vocab, dtype=np.uint8)] = np.arange(n, dtype=np.int32)

    def _need_bytes(self, what):
        if self.vocab is None:
            raise ValueError("%s: the model's %d tokens are ids, not bytes (a vocabulary of bytes has at most 256); "
                             "give token ids" % (what, self.config.vocab))

    @property
    def vocab_size(self) -> int:
        """The number of tokens, config.vocab."""
        return self.config.vocab

    @property
    def step(self) -> int:
        """The training step of the checkpoint the model was loaded from (0 for a new model)."""
        return int(lib.wgml_gpt_step(self._handle()))

    def num_parameters(self) -> int:
        """The number of weights."""
        return int(lib.wgml_gpt_numel(self.config._c()))

    def state_dict(self) -> _t.Dict[str, np.ndarray]:
        """The weights as NumPy float32 arrays under the checkpoint's names ("wte", "h.0.ln1.w",
        ...), in the library's order (copies)."""
        n = ffi.new("int *")
        params = lib.wgml_gpt_params(self._handle(), n)
        cfg = self.config._c()
        name, ndim, shape = ffi.new("char[%d]" % lib.WGML_GPT_NAME), ffi.new("int *"), ffi.new("int64_t[2]")
        out = {}
        for i in range(n[0]):
            lib.wgml_gpt_param_info(cfg, i, name, ndim, shape)
            a = np.empty(tuple(shape[k] for k in range(ndim[0])), dtype=np.float32)
            host = ffi.from_buffer("float[]", a, require_writable=True)
            self.ctx._check(lib.wgml_tensor_read(params[i], host, a.size))
            out[ffi.string(name).decode()] = a
        return out

    # ------------------------------------------------------------ text

    def encode(self, text: _t.Union[str, bytes]) -> np.ndarray:
        """The token ids (int32) of a text (a str is encoded as UTF-8). A byte outside the
        vocabulary is a ValueError naming it and its position."""
        self._need_bytes("encode")
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids = self._token_of[np.frombuffer(data, dtype=np.uint8)]
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            i = int(bad[0])
            raise ValueError("byte %d of the text (%r) is not in the model's vocabulary (%d bytes: %r)"
                             % (i, data[i:i + 1], len(self.vocab), self.vocab))
        return ids

    def decode_bytes(self, ids: _t.Iterable[int]) -> bytes:
        """The bytes of token ids."""
        self._need_bytes("decode")
        a = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids).reshape(-1)
        if a.size and (a.dtype.kind not in "iu" or a.min() < 0 or a.max() >= len(self.vocab)):
            raise ValueError("token ids are integers in 0..%d" % (len(self.vocab) - 1))
        return np.frombuffer(self.vocab, dtype=np.uint8)[a.astype(np.int64)].tobytes()

    def decode(self, ids: _t.Iterable[int], errors: str = "replace") -> str:
        """The text of token ids (UTF-8; errors as bytes.decode's)."""
        return self.decode_bytes(ids).decode("utf-8", errors)

    def _ids(self, x: TextOrIds, what: str) -> np.ndarray:
        """Token ids as a [B, T] int32 array (a text is one row)."""
        if isinstance(x, (str, bytes)):
            a = self.encode(x)
        else:
            a = np.asarray(x)
            if a.size and a.dtype.kind not in "iu":
                raise TypeError("%s: token ids are integers, not %s" % (what, a.dtype))
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] == 0 or a.shape[0] == 0:
            raise ValueError("%s: token ids are [B, T] or [T] with B, T >= 1, not shape %s" % (what, a.shape))
        if a.min() < 0 or a.max() >= self.vocab_size:
            raise ValueError("%s: token ids are in 0..%d; got %d..%d"
                             % (what, self.vocab_size - 1, a.min(), a.max()))
        return a.astype(np.int32)

    def _pair(self, ids: TextOrIds, targets: TextOrIds, what: str):
        i, t = self._ids(ids, what), self._ids(targets, what)
        if i.shape != t.shape:
            raise ValueError("%s: ids %s and targets %s differ in shape" % (what, i.shape, t.shape))
        return tensor(i, dtype="i32", ctx=self.ctx), tensor(t, dtype="i32", ctx=self.ctx)

    # ------------------------------------------------------------ computing

    def logits(self, ids: TextOrIds) -> np.ndarray:
        """The next-token logits [B, T, vocab] for ids [B, T] ([T, vocab] for one row), in
        evaluation (no dropout)."""
        a = self._ids(ids, "logits")
        t = tensor(a, dtype="i32", ctx=self.ctx)
        out = _wrap(self.ctx, lib.wgml_gpt_logits(self._handle(), t._handle(), 0.0)).numpy()
        out = out.reshape(a.shape[0], a.shape[1], self.vocab_size)
        return out[0] if np.ndim(ids) == 1 or isinstance(ids, (str, bytes)) else out

    def eval_loss(self, ids: TextOrIds, targets: TextOrIds) -> float:
        """The mean cross-entropy of targets given ids (both [B, T] or [T]), without dropout
        or gradients; exp() of it is the perplexity."""
        i, t = self._pair(ids, targets, "eval_loss")
        loss = ffi.new("float *")
        self.ctx._check(lib.wgml_gpt_eval_loss(self._handle(), i._handle(), t._handle(), loss))
        return float(loss[0])

    def evaluate(self, text: _t.Union[str, bytes, _t.Sequence[int], np.ndarray], batch: int = 32) -> float:
        """The validation loss of a text (or token ids): the mean over its tokens (the first
        excepted) of the cross-entropy of each given those before it, in windows of
        config.block tokens that do not overlap (a short last window included)."""
        ids = self._ids(text, "evaluate").reshape(-1)
        n = ids.size - 1
        if n < 1:
            raise ValueError("evaluate: the text needs at least 2 tokens")
        T = min(self.config.block, n)
        rows = n // T
        total, count = 0.0, 0
        for r0 in range(0, rows, batch):
            r1 = min(rows, r0 + batch)
            x = np.stack([ids[r * T:r * T + T] for r in range(r0, r1)])
            y = np.stack([ids[r * T + 1:r * T + T + 1] for r in range(r0, r1)])
            total += self.eval_loss(x, y) * x.size
            count += x.size
        tail = n - rows * T
        if tail:
            total += self.eval_loss(ids[rows * T:n], ids[rows * T + 1:]) * tail
            count += tail
        return total / count

    def batch(self, text: _t.Union[str, bytes, _t.Sequence[int], np.ndarray], batch: int, seed: int,
              block: _t.Optional[int] = None) -> _t.Tuple[np.ndarray, np.ndarray]:
        """A training batch of a text: `batch` windows of `block` (config.block) tokens at
        random places (NumPy's generator from seed), and the same shifted by one: (ids,
        targets), each [batch, block] int32."""
        ids = self._ids(text, "batch").reshape(-1)
        T = int(block or self.config.block)
        if ids.size < T + 1:
            raise ValueError("batch: the text has %d tokens; a window needs %d" % (ids.size, T + 1))
        starts = np.random.default_rng(seed).integers(0, ids.size - T, size=int(batch))
        idx = starts[:, None] + np.arange(T)
        return ids[idx], ids[idx + 1]

    # ------------------------------------------------------------ training

    def optimizer(self, lr: float = 1e-3, weight_decay: float = 0.0, max_grad_norm: float = 0.0,
                  betas: _t.Tuple[float, float] = (0.9, 0.99), warmup_steps: int = 0, total_steps: int = 0,
                  min_lr_ratio: float = 0.0, decay: _t.Optional[str] = "none",
                  precision: str = "f32") -> GPTOptimizer:
        """AdamW for this model (wgml_gpt_optimizer): weight decay on the 2-D weights, none on
        the 1-D ones; gradients clipped to max_grad_norm (0: no clipping). The lr schedule:
        warmup_steps of linear warm-up, then decay ("cosine", "linear" or "none") to
        min_lr_ratio x lr at total_steps. precision "mixed": the training steps' matmuls
        with f16 operands and f32 sums, dynamic loss scaling (PyTorch AMP with a GradScaler);
        "f32": all f32; "f32split": f32 matmuls on the matrix units as hi and lo halves (error
        near f32's, no loss scaling). Save its state with save(path, optimizer=)."""
        modes = {"f32": lib.WGML_PRECISION_F32, "mixed": lib.WGML_PRECISION_MIXED, "f32split": lib.WGML_PRECISION_F32_SPLIT}
        if precision not in modes:
            raise ValueError("precision is 'f32', 'mixed' or 'f32split', not %r" % (precision,))
        d = ffi.new("wgml_gpt_train_desc *")
        d.precision = modes[precision]
        d.lr, d.weight_decay, d.max_grad_norm = lr, weight_decay, max_grad_norm
        d.beta1, d.beta2 = betas
        d.schedule = _schedule(warmup_steps, total_steps, min_lr_ratio, decay)[0]
        out = ffi.new("wgml_optimizer **")
        self.ctx._check(lib.wgml_gpt_optimizer(self._handle(), d, out))
        opt = GPTOptimizer(self, out[0])
        self._optimizers.add(opt)
        return opt

    def _own(self, optimizer: GPTOptimizer) -> GPTOptimizer:
        if not isinstance(optimizer, GPTOptimizer):
            raise TypeError("an optimiser of GPT.optimizer(), not %s" % type(optimizer).__name__)
        if optimizer.model is not self:
            raise ValueError("the optimiser was made for another model")
        return optimizer

    def train_step(self, optimizer: GPTOptimizer, ids: TextOrIds, targets: TextOrIds) -> float:
        """One AdamW step on the batch (ids, targets [B, T] or [T]) with the config's dropout,
        in one submit; returns the batch's loss before the update."""
        opt = self._own(optimizer)._handle()
        i, t = self._pair(ids, targets, "train_step")
        loss = ffi.new("float *")
        self.ctx._check(lib.wgml_gpt_train_step(self._handle(), opt, i._handle(), t._handle(), loss))
        return float(loss[0])

    # ------------------------------------------------------------ sampling

    def _sampling(self, what, max_new_tokens, temperature, top_k, seed, f16_weights):
        """generate's and generate_batch's checks: the tokens to draw and the C sample desc
        (the context's generator reset first where seed is given)"""
        n = int(max_new_tokens)
        if n < 0:
            raise ValueError("%s: max_new_tokens is >= 0, not %d" % (what, n))
        if not temperature >= 0 or int(top_k) < 0:
            raise ValueError("%s: temperature %r and top_k %r must be >= 0" % (what, temperature, top_k))
        if seed is not None:
            self.ctx.manual_seed(seed)
        desc = ffi.new("wgml_gpt_sample_desc *")
        desc.temperature, desc.top_k, desc.f16_weights = float(temperature), int(top_k), 1 if f16_weights else 0
        return n, desc

    def generate(self, prompt: TextOrIds = "", max_new_tokens: int = 200, temperature: float = 0.8, top_k: int = 0,
                 seed: _t.Optional[int] = None,
                 on_token: _t.Optional[_t.Callable[[int], _t.Optional[bool]]] = None,
                 f16_weights: bool = False) -> _t.Union[str, bytes, np.ndarray]:
        """Continues prompt by up to max_new_tokens tokens with a KV cache on the GPU (one
        submit per token; past config.block the cache slides), as `wgml gpt sample` does.

        Returns the continuation alone, of the prompt's kind: str for a str, bytes for bytes,
        an int32 array of ids for ids. An empty prompt starts from "\\n" (or token 0 if the
        vocabulary has no newline), as the command does, and that start is not returned.
        temperature 0 is greedy (the argmax); top_k > 0 draws among the k largest logits only.
        seed resets the context's generator first (the command's --seed); None goes on from
        its state. on_token(id) is called with each token as it comes; a true return stops
        the generation there (what came so far is returned). An exception it raises stops it
        and propagates. f16_weights keeps the GPU decode plan's matrices as f16 (half the bytes
        read a token, f32 sums; faster for large models, logits within f16's rounding)."""
        if isinstance(prompt, (str, bytes)):
            ids = self.encode(prompt)
            if ids.size == 0:
                nl = int(self._token_of[ord("\n")])
                ids = np.array([nl if nl >= 0 else 0], dtype=np.int32)
        else:
            if not np.size(prompt):
                raise ValueError("generate: the prompt has no tokens")
            ids = self._ids(prompt, "generate")
            if ids.shape[0] > 1:
                raise ValueError("generate continues one prompt; ids of shape %s are %d (generate_batch takes several)"
                                 % (np.shape(prompt), ids.shape[0]))
            ids = ids.reshape(-1)
        n, desc = self._sampling("generate", max_new_tokens, temperature, top_k, seed, f16_weights)
        out = np.zeros(n, dtype=np.int32)
        got = [0]
        failure = []

        def each(tok, _user):
            got[0] += 1
            if on_token is None:
                return 0
            try:
                return 1 if on_token(int(tok)) else 0
            except BaseException as e:  # raised after the C call returns, not lost inside it
                failure.append(e)
                return 1

        cb = ffi.callback("int(int32_t, void *)", each)
        self.ctx._check(lib.wgml_gpt_generate(self._handle(), ffi.from_buffer("int32_t[]", ids), ids.size, n, desc,
                                              ffi.from_buffer("int32_t[]", out, require_writable=True), cb, ffi.NULL))
        if failure:
            raise failure[0]
        new = out[:got[0]]
        if isinstance(prompt, str):
            return self.decode(new)
        if isinstance(prompt, bytes):
            return self.decode_bytes(new)
        return new

    def generate_batch(self, prompts: _t.Sequence[TextOrIds], max_new_tokens: int = 200, temperature: float = 0.8,
                       top_k: int = 0, seed: _t.Optional[int] = None,
                       f16_weights: bool = False) -> _t.List[_t.Union[str, bytes, np.ndarray]]:
        """Continues several prompts together, max_new_tokens each (wgml_gpt_generate_batch: on a
        GPU one decode plan steps 8 of them at once, each with its own KV cache and length).
        prompts is a sequence of prompts, each str, bytes or token ids (at least one token: an
        empty prompt is refused, where generate starts from "\\n"). Returns a list with each
        prompt's continuation of its kind, as generate does. Greedy (temperature 0) gives each
        prompt's own generate tokens up to rounding (a near-tie between two logits may go the
        other way); at a temperature the tokens are a draw from the context's generator (seed
        resets it first), another than generate's. top_k > 0 at a temperature, or a CPU adapter,
        continues the prompts one by one."""
        if isinstance(prompts, (str, bytes)) or (isinstance(prompts, np.ndarray) and prompts.ndim < 2):
            raise TypeError("generate_batch: prompts is a sequence of prompts; for one, use generate")
        prompts = list(prompts)  # (a generator is read once)
        if prompts and all(isinstance(q, (int, np.integer)) for q in prompts):
            raise TypeError("generate_batch: prompts is a sequence of prompts, not one prompt's ids; for one, use generate")
        n, desc = self._sampling("generate_batch", max_new_tokens, temperature, top_k, seed, f16_weights)
        seqs = []
        for i, prompt in enumerate(prompts):
            what = "generate_batch: prompt %d" % i
            if isinstance(prompt, (str, bytes)):
                ids = self.encode(prompt)
            elif prompt is None:
                raise TypeError("%s is None" % what)
            else:
                ids = self._ids(prompt, what).reshape(-1) if np.size(prompt) else np.zeros(0, dtype=np.int32)
            if ids.size == 0:
                raise ValueError("%s has no tokens" % what)
            seqs.append(np.ascontiguousarray(ids, dtype=np.int32))
        if not seqs:
            return []
        out = np.zeros((len(seqs), max(n, 1)), dtype=np.int32)
        bufs = [ffi.from_buffer("int32_t[]", q) for q in seqs]
        ptrs = ffi.new("int32_t *[]", bufs)
        lens = ffi.new("int64_t[]", [q.size for q in seqs])
        self.ctx._check(lib.wgml_gpt_generate_batch(self._handle(), len(seqs), ffi.cast("const int32_t *const *", ptrs), lens,
                                                    n, desc, ffi.from_buffer("int32_t[]", out, require_writable=True)))
        res = []
        for prompt, row in zip(prompts, out):
            new = row[:n].copy()
            res.append(self.decode(new) if isinstance(prompt, str) else self.decode_bytes(new) if isinstance(prompt, bytes) else new)
        return res
