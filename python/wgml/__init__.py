"""wgml: GPU tensors over WebGPU, from Python.

A thin layer over the C library libwgml (through cffi, ABI mode): every op is the library's,
lazy as in C; reading a tensor (t.numpy(), np.asarray(t), t.item()) evaluates its pending
graph in one submit.

    import numpy as np, wgml
    x = wgml.tensor(np.random.rand(4, 3))
    w = wgml.tensor(np.random.rand(3, 2), requires_grad=True)
    loss = ((x @ w).relu() ** 2).mean()
    loss.backward()
    print(loss.item(), w.grad.numpy())

The library is found through WGML_LIBRARY (the path of libwgml.so.0), else the copy bundled
in the package (wgml/_lib: `pip install ./python` builds it), else the system (the loader's cache,
pkg-config). Failures raise wgml.Error subclasses carrying the library's message.
"""
import typing as _t

from ._ffi import header_path, library_path, library_version
from ._errors import (AxisError, ContextError, DeviceError, DeviceLostError, DTypeError, Error, ExistsError, FileError,
                      FormatError, InvalidArgumentError, LimitError, NoAdapterError, NotFoundError,
                      OutOfMemoryError, ShapeError, SizeOverflowError, UnsupportedError, ValidationError)
from ._context import Context, default_context, set_default_context
from ._tensor import (Tensor, float32, int32, tensor, from_numpy, as_tensor, no_grad, enable_grad, is_grad_enabled,
                      cat, gelu_tanh, zeros, ones, full, zeros_like, ones_like, full_like, arange, causal_mask, rand, randn,
                      xavier_uniform, xavier_normal, kaiming_uniform, kaiming_normal, manual_seed,
                      add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge,
                      neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu, gelu_exact, erf, sin, cos,
                      silu, softplus, clamp, where, masked_fill, dropout,
                      sum, mean, max, min, argmax, argmin, var, std, softmax, log_softmax, layernorm, rmsnorm,
                      cumsum, rope, reshape, permute, transpose, broadcast_to, slice, contiguous, detach, cast, concat,
                      stack, split, chunk, embedding, index_select, index_add, matmul, attention,
                      cross_entropy, mse, eval, UNARY_OPS, BINARY_OPS)
from ._io import save, load, save_file, load_file
from . import _tensor
# every elementwise op the library lists (wgml_op_get_info), those added after this file too
for _name in UNARY_OPS + BINARY_OPS:
    globals()[_name] = getattr(_tensor, _name)
del _name
from . import optim
from ._ffi import gpt_header_path
if gpt_header_path is not None:  # wgml_gpt.h found beside wgml.h (import wgml.gpt says why not otherwise)
    from . import gpt

__version__ = library_version()


def info(ctx: _t.Optional[Context] = None) -> _t.Dict[str, _t.Any]:
    """The adapter of ctx (default: the default context) as a dict: name, vendor, backend,
    adapter_type, limits, features."""
    return (ctx or default_context()).info()


def stats(ctx: _t.Optional[Context] = None) -> _t.Dict[str, _t.Any]:
    """The library's counters of ctx (default: the default context) as a dict."""
    return (ctx or default_context()).stats()


def status_name(status: int) -> str:
    """The name of a wgml_status number, e.g. "WGML_ERROR_SHAPE"."""
    from ._errors import _status_name
    return _status_name(status)
