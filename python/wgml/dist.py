"""Data parallelism over MPI, for a script that an MPI launcher starts (Open MPI's ``mpirun``,
MPICH's ``mpiexec``): the few calls of torch.distributed a training loop needs, over wgml.h's
``wgml_dist_*``. No mpi4py: the library opens the launcher's MPI itself. Started without a
launcher, the process is rank 0 of 1 and every call leaves the data as it is. ::

    import wgml.dist as dist
    from wgml.gpt import GPT
    dist.init()                         # first: each rank then opens its own GPU
    model = GPT.new(vocab=65, seed=1)
    dist.broadcast(model)               # every rank starts from rank 0's weights
    opt = model.optimizer(lr=1e-3)
    dist.data_parallel(opt)             # each step averages the gradients over the ranks
    for step in range(steps):
        ids, targets = model.batch(text, 64, seed=step)          # the global batch, on every rank
        r, n = dist.rank(), dist.size()
        loss = model.train_step(opt, ids[r::n], targets[r::n])  # this rank's share
        loss = dist.all_reduce_host([loss])[0]                    # the global batch's loss
    dist.finalize()

Run it with ``mpirun -np 2 --bind-to none python train.py``.
"""
import os
import typing as _t

import numpy as np

from ._errors import error_for
from ._ffi import ffi, lib
from ._tensor import Tensor
from .gpt import GPT

__all__ = ["init", "finalize", "rank", "size", "local_rank", "local_size", "barrier", "broadcast", "all_reduce",
           "all_reduce_host", "data_parallel", "stats", "reset_stats"]

_OPS = {"sum": lib.WGML_REDUCE_SUM, "mean": lib.WGML_REDUCE_MEAN}


def _check(status):
    """Raises a contextless call's failure (wgml_dist_error_message)."""
    if status != lib.WGML_OK:
        raise error_for(status, ffi.string(lib.wgml_dist_error_message()).decode("utf-8", "replace"))


def init() -> None:
    """Joins the launcher's ranks (MPI_Init where the process has not). Call it before the
    first context: with several ranks on a machine each rank's default context then opens
    the GPU of its local rank (WGML_ADAPTER_INDEX, as the wgml command sets it, unless given)."""
    _check(lib.wgml_dist_init())
    if lib.wgml_dist_size() > 1 and not os.environ.get("WGML_ADAPTER_INDEX"):
        os.environ["WGML_ADAPTER_INDEX"] = str(lib.wgml_dist_local_rank())


def finalize() -> None:
    """Leaves (MPI_Finalize where init called MPI_Init); every rank calls it."""
    _check(lib.wgml_dist_finalize())


def rank() -> int:
    """This process's rank (0 before init)."""
    return int(lib.wgml_dist_rank())


def size() -> int:
    """The number of ranks (1 before init)."""
    return int(lib.wgml_dist_size())


def local_rank() -> int:
    """This process's rank among those on its machine."""
    return int(lib.wgml_dist_local_rank())


def local_size() -> int:
    """The number of ranks on this machine."""
    return int(lib.wgml_dist_local_size())


def barrier() -> None:
    """Returns once every rank has called it."""
    _check(lib.wgml_dist_barrier())


def _tensors(x, what) -> _t.Tuple[_t.Any, list]:
    """(the context, the wgml_tensor pointers) of a GPT, a Tensor or an iterable of Tensors of one context."""
    if isinstance(x, GPT):  # its parameters
        n = ffi.new("int *")
        p = lib.wgml_gpt_params(x._handle(), n)
        return x.ctx, [p[i] for i in range(n[0])]
    ts = [x] if isinstance(x, Tensor) else list(x)
    if not ts:
        raise ValueError("%s: no tensors" % what)
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError("%s takes a GPT, a Tensor or Tensors, not %s" % (what, type(t).__name__))
        if t.context is not ts[0].context:
            raise ValueError("%s: the tensors belong to different contexts" % what)
    return ts[0].context, [t._handle() for t in ts]


def broadcast(x) -> None:
    """Rank 0's values of x (a GPT's parameters, a Tensor or Tensors: evaluated, contiguous
    f32) written into every rank's, in place. Every rank calls it."""
    ctx, ptrs = _tensors(x, "broadcast")
    ctx._check(lib.wgml_dist_broadcast(ctx._handle(), len(ptrs), ffi.new("wgml_tensor *[]", ptrs)))


def all_reduce(x, op: str = "mean") -> None:
    """x (a Tensor or Tensors, or a GPT's parameters) replaced in place by their sum or mean
    ("sum", "mean") over the ranks. Every rank calls it with tensors of the same sizes."""
    if op not in _OPS:
        raise ValueError("op is 'sum' or 'mean', not %r" % (op,))
    ctx, ptrs = _tensors(x, "all_reduce")
    ctx._check(lib.wgml_dist_allreduce(ctx._handle(), len(ptrs), ffi.new("wgml_tensor *[]", ptrs), _OPS[op]))


def all_reduce_host(values, op: str = "mean") -> np.ndarray:
    """Numbers on the host (a loss, counts) summed or averaged over the ranks, in float64: a
    new array. Every rank calls it with as many."""
    if op not in _OPS:
        raise ValueError("op is 'sum' or 'mean', not %r" % (op,))
    v = np.array(values, dtype=np.float64).reshape(-1)  # (a new, contiguous array)
    _check(lib.wgml_dist_allreduce_host(ffi.cast("double *", ffi.from_buffer(v)), v.size, _OPS[op]))
    return v


def data_parallel(optimizer) -> None:
    """Makes every step of optimizer (a GPT's, or one of wgml.optim) average the gradients over
    the ranks, overlapped with the backward pass, before the norm, the clipping and the update:
    each rank then takes the global batch's step from its share of the batch. It also gives each
    rank its own random stream (dropout). Every rank calls it, after broadcast."""
    handle = getattr(optimizer, "_handle", None)
    if handle is None:
        raise TypeError("data_parallel takes an optimiser, not %s" % type(optimizer).__name__)
    _check(lib.wgml_dist_data_parallel(handle()))


def stats() -> _t.Dict[str, _t.Any]:
    """The all-reduce's counts and seconds since the last reset_stats (wgml_dist_stats): per
    step divide by "calls"."""
    s = ffi.new("wgml_dist_stats *")
    lib.wgml_dist_stats_get(s)
    out = {name: getattr(s, name) for name, _ in ffi.typeof("wgml_dist_stats").fields}
    out["shared_memory"] = {0: "mpi", 1: "shared memory", 2: "shared memory mapped by the GPU"}.get(s.shared_memory, "mpi")
    return out


def reset_stats() -> None:
    lib.wgml_dist_stats_reset()
