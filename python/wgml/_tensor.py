"""wgml.Tensor and the ops: thin calls into libwgml, which does all the work.

Every op is lazy as in C: it records a node and returns at once; reading a result (numpy(),
np.asarray, item(), print) evaluates the pending graph in one submit. Reading a loss before
backward() works (the library keeps the graph of a result that trainable tensors feed); the
optimiser step then recomputes the forward values the gradients need, so reading the loss
after step() is the cheaper order.
"""
from __future__ import annotations

import builtins
import collections
import contextlib
import functools
import math
import numbers
import threading
import warnings
import weakref
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from ._context import Context, default_context
from ._errors import AxisError, ContextError, DTypeError, InvalidArgumentError, ShapeError, error_for
from ._ffi import ffi, lib

float32 = np.dtype(np.float32)
int32 = np.dtype(np.int32)
float16 = np.dtype(np.float16)
_NP_OF = {lib.WGML_F32: float32, lib.WGML_I32: int32, lib.WGML_F16: float16}
# "gelu" is the exact form, as PyTorch's; the tanh form is named
_ACTIVATIONS = {None: lib.WGML_ACT_NONE, "none": lib.WGML_ACT_NONE, "relu": lib.WGML_ACT_RELU,
                "gelu": lib.WGML_ACT_GELU_EXACT, "gelu_tanh": lib.WGML_ACT_GELU, "silu": lib.WGML_ACT_SILU,
                "gelu_exact": lib.WGML_ACT_GELU_EXACT}
_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1


Shape = Union[int, Sequence[int]]
DType = Union[str, type, np.dtype, None]

_DTYPE_NAMES = {"f32": lib.WGML_F32, "float32": lib.WGML_F32, "i32": lib.WGML_I32, "int32": lib.WGML_I32,
                "f16": lib.WGML_F16, "float16": lib.WGML_F16}


def _dtype_code(dtype):
    """A wgml_dtype from "f32"/"float32"/np.float32/float or "i32"/"int32"/np.int32/int."""
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    if dtype is float or dtype is int:
        return lib.WGML_F32 if dtype is float else lib.WGML_I32
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d == float32:
        return lib.WGML_F32
    if d == int32:
        return lib.WGML_I32
    if d == float16:
        return lib.WGML_F16
    raise DTypeError("wgml tensors are float32, int32 or float16, not %r" % (dtype,), lib.WGML_ERROR_INVALID_ARGUMENT)


def _is_scalar(x):
    return isinstance(x, numbers.Number) and not isinstance(x, complex) or \
        isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf"


def _ctx_of(ctx):
    if ctx is None:
        return default_context()
    if not isinstance(ctx, Context):
        raise TypeError("ctx must be a wgml.Context, not %s" % type(ctx).__name__)
    return ctx


def _shape_arg(shape):
    if isinstance(shape, (numbers.Integral, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _is_int(x):
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, bool)


def _split_size(args, name):
    """(shape, the other positional arguments) of a constructor: torch's randn(3, 4) and
    randn((3, 4)), and this package's older randn((3, 4), mean, std)."""
    if not args:
        raise TypeError("%s() needs a size: %s(3, 4) or %s((3, 4))" % (name, name, name))
    if not _is_int(args[0]):
        return _shape_arg(args[0]), args[1:]
    n = 0
    while n < len(args) and _is_int(args[n]):
        n += 1
    return tuple(int(a) for a in args[:n]), args[n:]


def _c_shape(shape):
    """The library's shape for a Python one (a 0-d shape () is [1])."""
    return shape if shape else (1,)


def _finish(t, shape, requires_grad):
    """A constructor's result: 0-d when shape is (), evaluated and trainable if asked."""
    if shape == ():
        t._0d = True
    if requires_grad:
        t._ctx.eval(t)
        t.requires_grad = True
    return t


def _axis(axis, ndim, what):
    """axis as a non-negative int, or NumPy's AxisError naming it."""
    if not _is_int(axis):
        raise TypeError("%s: an axis is an int, not %s" % (what, type(axis).__name__))
    a = int(axis)
    if not -ndim <= a < ndim:
        raise AxisError(a, ndim, what)
    return a + ndim if a < 0 else a


def _pick(axis, dim, keepdims, keepdim, what):
    """NumPy's axis=/keepdims= or PyTorch's dim=/keepdim=, not both."""
    if dim is not None:
        if axis is not None:
            raise TypeError("%s: pass axis= or dim=, not both" % what)
        axis = dim
    if keepdim is not None:
        if keepdims:
            raise TypeError("%s: pass keepdims= or keepdim=, not both" % what)
        keepdims = keepdim
    return axis, bool(keepdims)


def _i64(values):
    values = list(values)
    return ffi.new("int64_t[]", values if values else [0])


# ---------------------------------------------------------------- no_grad

_grad_state = threading.local()  # per thread, as PyTorch's


def is_grad_enabled() -> bool:
    """False inside `with wgml.no_grad():` (in this thread)."""
    return getattr(_grad_state, "enabled", True)


class _GradMode(contextlib.ContextDecorator):
    _enabled = True

    def __enter__(self):
        self._prev = is_grad_enabled()
        _grad_state.enabled = self._enabled
        return self

    def __exit__(self, *exc):
        _grad_state.enabled = self._prev
        return False


class no_grad(_GradMode):
    """`with wgml.no_grad():` (or as a decorator): results made inside carry no gradient
    (each is detached), and in-place updates of trainable tensors are allowed
    (`w -= lr * w.grad`), as in PyTorch."""

    _enabled = False


class enable_grad(_GradMode):
    """Turns gradients back on inside a no_grad block."""

    _enabled = True


def _wrap(ctx, ptr, storage=False):
    """A Tensor owning the handle an op returned, or the op's error raised (and the error
    tensor freed). Under no_grad a lazy result (storage=False) is detached."""
    if ptr == ffi.NULL:
        ctx._raise(lib.wgml_last_status(ctx._ptr) or lib.WGML_ERROR_INVALID_ARGUMENT)
    st = lib.wgml_tensor_status(ptr)
    if st != lib.WGML_OK:
        message = ffi.string(lib.wgml_error_message(ctx._ptr)).decode("utf-8", "replace")
        lib.wgml_tensor_free(ptr)
        if "wgml_cast converts" in message:
            message += "; from Python: t.float() (wgml's int32 tensors hold indices and labels, arithmetic is float32)"
        raise error_for(st, message)
    if not storage and not is_grad_enabled():
        d = lib.wgml_detach(ctx._ptr, ptr)
        lib.wgml_tensor_free(ptr)
        return _wrap(ctx, d, storage=True)
    t = Tensor.__new__(Tensor)
    t._ptr = ptr
    t._ctx = ctx
    t._shape = None
    t._rg = False
    t._0d = False
    return t


def _scalar_result(t, *operands):
    """t marked 0-d when every tensor or array operand is (Python numbers are)."""
    if t._cshape == (1,) and builtins.all(
            (o._0d if isinstance(o, Tensor) else np.ndim(o) == 0) for o in operands):
        t._0d = True
    return t


def _integral_or_raise(arr):
    """Data going into an int32 tensor must hold integers in its range: no silent truncation
    or wrapping."""
    if arr.dtype.kind in "iu" and arr.size and (arr.min() < _I32_MIN or arr.max() > _I32_MAX):
        raise OverflowError("values outside int32's range cannot be an i32 tensor")
    if arr.dtype.kind == "f" and arr.size:
        bad = ~np.isfinite(arr) | (arr != np.trunc(arr))
        if bad.any():
            v = arr[bad].flat[0]
            raise ValueError("an int32 tensor takes integral values; the data holds %r (round it first, e.g. "
                             "np.round)" % (v.item(),))
        if arr.min() < _I32_MIN or arr.max() > _I32_MAX:
            raise OverflowError("values outside int32's range cannot be an i32 tensor")


def _upload(data, dtype, ctx):
    arr = np.asarray(data)
    if dtype is None:
        if arr.dtype.kind in "iu":
            code = lib.WGML_I32
        elif arr.dtype.kind in "fb":
            code = lib.WGML_F32  # masks are f32 in wgml, so booleans are too
        else:
            raise DTypeError("cannot make a wgml tensor of %s data (float32 or int32)" % arr.dtype,
                             lib.WGML_ERROR_INVALID_ARGUMENT)
    else:
        code = _dtype_code(dtype)
        if arr.dtype.kind not in "biuf":
            raise DTypeError("cannot make a wgml tensor of %s data" % arr.dtype, lib.WGML_ERROR_INVALID_ARGUMENT)
    if code == lib.WGML_I32 and arr.dtype.kind in "iu" and arr.size and (arr.min() < _I32_MIN or arr.max() > _I32_MAX):
        raise OverflowError("values outside int32's range cannot be an i32 tensor")
    if code == lib.WGML_I32:
        _integral_or_raise(arr)
    # f16: uploaded as floats and cast on the device (rounded to nearest even, as numpy's float16)
    halves = code == lib.WGML_F16
    if halves:
        code = lib.WGML_F32
    # a copy in row-major order: transposed and strided arrays arrive in their logical order
    host = np.ascontiguousarray(arr, dtype=_NP_OF[code])
    shape = host.shape if host.ndim else (1,)
    out = ffi.new("wgml_tensor **")
    h = ctx._handle()
    if code == lib.WGML_F32:
        st = lib.wgml_tensor_from_data(h, len(shape), _i64(shape), ffi.from_buffer("float[]", host), host.size, out)
    else:
        st = lib.wgml_tensor_from_i32(h, len(shape), _i64(shape), ffi.from_buffer("int32_t[]", host), host.size, out)
    ctx._check(st)
    t = _wrap(ctx, out[0], storage=True)
    t._0d = arr.ndim == 0
    if halves:
        t = cast(t, "f16")
        t._0d = arr.ndim == 0
    return t


class Tensor:
    """A wgml tensor (float32 or int32, 0 to 4 dimensions), lazy until read.

    Made by wgml.tensor, the constructors (zeros, randn, ...) or ops; holds a reference to
    its Context. A 0-d tensor (a full reduction, a loss, tensor(3.0)) is one element of shape
    () on the Python side (the library stores it as [1])."""

    __slots__ = ("_ptr", "_ctx", "_shape", "_rg", "_0d", "__weakref__")
    # NumPy must not turn `array + tensor` into an array op: it defers to our __radd__
    __array_ufunc__ = None
    __hash__ = object.__hash__  # __eq__ is elementwise; tensors still key dicts by identity

    def __init__(self, data: Any, dtype: DType = None, ctx: Optional[Context] = None, requires_grad: bool = False):
        """The same as wgml.tensor(data, dtype, ctx, requires_grad)."""
        t = _upload(data, dtype, _ctx_of(ctx))
        self._ptr, self._ctx, self._shape, self._rg, self._0d = t._ptr, t._ctx, None, False, t._0d
        t._ptr = None  # ownership moved here
        if requires_grad:
            self.requires_grad = True

    def __del__(self, _free=lib.wgml_tensor_free):
        # _free is bound now: at interpreter exit the module's globals may already be gone
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and self._ctx._ptr is not None:
            _free(ptr)
        self._ptr = None

    def _handle(self):
        if self._ptr is None or self._ctx._ptr is None:
            raise ContextError("the tensor's context was closed")
        return self._ptr

    # ------------------------------------------------------------ attributes

    @property
    def context(self) -> Context:
        """The Context the tensor lives in."""
        return self._ctx

    @property
    def _cshape(self) -> Tuple[int, ...]:
        """The library's shape ([1] for a 0-d tensor)."""
        if self._shape is None:
            p = self._handle()
            self._shape = tuple(int(lib.wgml_tensor_dim(p, i)) for i in range(lib.wgml_tensor_ndim(p)))
        return self._shape

    @property
    def shape(self) -> Tuple[int, ...]:
        """The dimensions, as a tuple (() for a 0-d tensor)."""
        return () if self._0d else self._cshape

    @property
    def size(self) -> "_Size":
        """Both habits: t.size is the element count (NumPy), t.size() the shape and
        t.size(d) one dimension (PyTorch)."""
        return _Size(lib.wgml_tensor_numel(self._handle()), self.shape)

    @property
    def ndim(self) -> int:
        """The number of dimensions (0 to 4)."""
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions (PyTorch's dim())."""
        return self.ndim

    def numel(self) -> int:
        """The number of elements."""
        return int(lib.wgml_tensor_numel(self._handle()))

    @property
    def dtype(self) -> np.dtype:
        """wgml.float32, wgml.int32 or float16 (NumPy dtypes; f16 tensors come from cast)."""
        return _NP_OF[lib.wgml_tensor_dtype(self._handle())]

    def __len__(self) -> int:
        if self._0d:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        # reading evaluates; it keeps a later backward() working (the library keeps the graph)
        if self._ptr is None or self._ctx._ptr is None:
            return "wgml.Tensor(<freed>)"
        extra = ", requires_grad=True" if self._rg else ""
        try:
            values = np.array2string(self.numpy(), threshold=20, edgeitems=3, precision=4, separator=", ",
                                     prefix="wgml.tensor(")
        except Exception as e:  # a tensor in an error state still prints
            values = "<%s>" % e
        return "wgml.tensor(%s, shape=%s, dtype=%s%s)" % (values, self.shape, self.dtype.name, extra)

    __str__ = __repr__

    # ------------------------------------------------------------ host data

    def numpy(self) -> np.ndarray:
        """Evaluates the tensor if needed and returns its values as a new NumPy array."""
        p = self._handle()
        out = np.empty(self._cshape, dtype=self.dtype)
        if out.dtype == float16:  # the library widens halves to floats: exact, so back to float16 is too
            wide = np.empty(self._cshape, dtype=float32)
            st = lib.wgml_tensor_read(p, ffi.from_buffer("float[]", wide, require_writable=True), wide.size)
            out[...] = wide
        elif out.dtype == float32:
            st = lib.wgml_tensor_read(p, ffi.from_buffer("float[]", out, require_writable=True), out.size)
        else:
            st = lib.wgml_tensor_read_i32(p, ffi.from_buffer("int32_t[]", out, require_writable=True), out.size)
        self._ctx._check(st)
        return out.reshape(()) if self._0d else out

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a wgml tensor's values live on the device: reading them always copies")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self) -> Union[float, int]:
        """The value of a one-element tensor as a Python number (evaluates it; a later
        backward() still works)."""
        if self.numel() != 1:
            raise ValueError("item() needs a tensor of one element, not shape %s" % (self.shape,))
        return self.numpy().reshape(-1)[0].item()

    def tolist(self) -> Any:
        """The values as nested Python lists (a number for a 0-d tensor)."""
        return self.numpy().tolist()

    def write(self, data: Any) -> None:
        """Overwrites a realized, contiguous tensor's values from the host (all of them)."""
        p = self._handle()
        host = np.asarray(data)
        if self.dtype == int32:
            _integral_or_raise(host)
        host = np.ascontiguousarray(host, dtype=self.dtype)
        if host.dtype == float32:
            st = lib.wgml_tensor_write(p, ffi.from_buffer("float[]", host), host.size)
        else:
            st = lib.wgml_tensor_write_i32(p, ffi.from_buffer("int32_t[]", host), host.size)
        self._ctx._check(st)

    def __float__(self) -> float:
        return float(self.item())

    def __format__(self, spec: str) -> str:
        """f"{loss:.4f}": a one-element tensor formats as its number; others only as str()."""
        if self.numel() == 1:
            return format(self.item(), spec)
        if spec:
            raise TypeError("a format spec (%r) needs a one-element tensor; this one has shape %s" % (spec, self.shape))
        return str(self)

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype != int32 or self.numel() != 1:
            raise TypeError("only one-element int32 tensors can be used as an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError("the truth value of a wgml tensor of more than one element is ambiguous")
        return bool(self.item())

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    # ------------------------------------------------------------ copies and conversions

    def clone(self) -> "Tensor":
        """A copy in its own buffer (evaluated now, so later writes to self do not reach it);
        gradients flow through it, as PyTorch's."""
        if self.dtype == int32:
            return tensor(self.numpy(), ctx=self._ctx)
        c = _scalar_result(_wrap(self._ctx, lib.wgml_binary_scalar(self._ctx._ptr, lib.WGML_MUL, self._handle(), 1.0)),
                           self)  # x * 1 is exact for every float, -0 and NaN included
        self._ctx.eval(c)
        return c

    def float(self) -> "Tensor":
        """As float32 (a copy when int32)."""
        return self if self.dtype == float32 else cast(self, "f32")

    def int(self) -> "Tensor":
        """As int32 (values truncated toward zero)."""
        return self if self.dtype == int32 else cast(self, "i32")

    def long(self) -> "Tensor":
        """As int32: wgml has no int64 (PyTorch's long is 64-bit)."""
        return self.int()

    def to(self, dtype: DType) -> "Tensor":
        """As dtype ("f32"/"i32", np.float32, float, ...). Devices are contexts in wgml: a
        tensor moves to another one through numpy()."""
        if isinstance(dtype, Context) or isinstance(dtype, str) and dtype.split(":")[0] in ("cpu", "cuda", "mps"):
            raise TypeError("wgml tensors live in one context; to(device) has no meaning here: "
                            "wgml.tensor(t.numpy(), ctx=other) copies to another")
        return cast(self, dtype) if _NP_OF[_dtype_code(dtype)] != self.dtype else self

    # ------------------------------------------------------------ in place

    def _assign(self, value, what):
        """Writes value (a tensor or host data, broadcast to self's shape) into self's buffer."""
        if self._rg and is_grad_enabled():
            raise RuntimeError("%s on a tensor that requires grad: autograd would lose the old value. "
                               "Inside `with wgml.no_grad():` it updates the values in place (as PyTorch); "
                               "or write `x = x - y` for a new tensor" % what)
        host = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if self.dtype == int32:
            _integral_or_raise(host)
        try:
            host = np.broadcast_to(host, self.shape)
        except ValueError:
            raise ValueError("%s: a value of shape %s does not fit a tensor of shape %s"
                             % (what, host.shape, self.shape)) from None
        self._ctx.eval(self)  # a pending result gets its buffer first (views stay refused)
        self.write(host)
        return self

    def _inplace(self, fn, other, what):
        if self._rg and is_grad_enabled():
            self._assign(None, what)  # raises, naming the operator
        r = fn(self, other)
        if r.dtype != self.dtype:
            raise TypeError("%s: the result is %s, the tensor %s (in place keeps the dtype)"
                            % (what, r.dtype.name, self.dtype.name))
        if r.shape != self.shape and r._cshape != self._cshape:
            raise ValueError("%s: the result's shape %s is not the tensor's %s" % (what, r.shape, self.shape))
        return self._assign(r, what)

    def __iadd__(self, o): return self._inplace(add, o, "+=")
    def __isub__(self, o): return self._inplace(sub, o, "-=")
    def __imul__(self, o): return self._inplace(mul, o, "*=")
    def __itruediv__(self, o): return self._inplace(div, o, "/=")
    def __ipow__(self, o): return self._inplace(pow, o, "**=")

    def __imatmul__(self, o):
        raise TypeError("@= is not supported in place: write a = a @ b")

    def add_(self, o: Any) -> "Tensor":
        """self += o, in place."""
        return self._inplace(add, o, "add_")

    def sub_(self, o: Any) -> "Tensor":
        """self -= o, in place."""
        return self._inplace(sub, o, "sub_")

    def mul_(self, o: Any) -> "Tensor":
        """self *= o, in place."""
        return self._inplace(mul, o, "mul_")

    def div_(self, o: Any) -> "Tensor":
        """self /= o, in place."""
        return self._inplace(div, o, "div_")

    def zero_(self) -> "Tensor":
        """Sets every element to 0, in place."""
        return self._assign(np.zeros(self.shape, self.dtype), "zero_")

    def fill_(self, value: float) -> "Tensor":
        """Sets every element to value, in place."""
        return self._assign(np.full(self.shape, value), "fill_")

    def copy_(self, src: Any) -> "Tensor":
        """Copies src's values (broadcast to self's shape) into self, in place."""
        return self._assign(src, "copy_")

    def __setitem__(self, key, value):
        """t[key] = value for NumPy basic indices (ints, slices, ..., None): the tensor must be
        evaluated storage (a leaf: made from data, a constructor, or read once); the write goes
        through the host."""
        if isinstance(key, Tensor):
            raise IndexError("assignment through an index tensor is not supported; use index_add")
        host = self.numpy()
        v = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
        if self.dtype == int32:
            _integral_or_raise(v)
        host[key] = v
        self._assign(host, "t[...] = value")

    # ------------------------------------------------------------ autograd

    @property
    def requires_grad(self) -> bool:
        """Whether backward() gives this (leaf) tensor a gradient."""
        return self._rg

    @requires_grad.setter
    def requires_grad(self, on):
        """A pending result no trainable tensor lies upstream of (wgml.randn(3, 4) * 0.02) is
        evaluated first; one computed from trainable tensors is not a leaf and is refused."""
        if on and self.dtype != float32:
            raise DTypeError("only float32 tensors can require gradients, not %s (t.float() converts)"
                             % self.dtype.name, lib.WGML_ERROR_INVALID_ARGUMENT)
        self._ctx._check(lib.wgml_requires_grad(self._handle(), 1 if on else 0))
        self._rg = bool(on)

    def requires_grad_(self, on: bool = True) -> "Tensor":
        """Sets requires_grad; returns self."""
        self.requires_grad = on
        return self

    @property
    def grad(self) -> Optional["Tensor"]:
        """The accumulated gradient (lazy), or None. A new handle on it each time: it stays
        valid after zero_grad or an optimiser step (which consume the tensor's own)."""
        g = lib.wgml_grad(self._handle())
        if g == ffi.NULL:
            return None
        shape = self._cshape
        r = _wrap(self._ctx, lib.wgml_reshape(self._ctx._ptr, g, len(shape), _i64(shape)), storage=True)
        r._0d = self._0d
        return r

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise ValueError("grad can only be set to None (which clears it)")
        lib.wgml_zero_grad(self._handle())

    def zero_grad(self) -> None:
        """Clears the gradient (grad becomes None)."""
        lib.wgml_zero_grad(self._handle())

    def backward(self) -> None:
        """Reverse mode from this one-element loss: adds to each trainable tensor's grad
        (lazy: computed by the next evaluation, usually the optimiser's step). The loss may
        have been read before."""
        self._ctx._check(lib.wgml_backward(self._handle()))
        # the next optimiser step evaluates the loss with the gradients, so reading it
        # afterwards gives the value the step used rather than a recomputation
        losses = self._ctx._losses
        losses[:] = [r for r in losses if r() is not None]
        losses.append(weakref.ref(self))

    # ------------------------------------------------------------ operators

    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return neg(self)
    def __pos__(self): return self
    def __abs__(self): return abs(self)
    def __lt__(self, o): return lt(self, o)
    def __le__(self, o): return le(self, o)
    def __gt__(self, o): return gt(self, o)
    def __ge__(self, o): return ge(self, o)

    def __eq__(self, o):
        return eq(self, o) if _operand_ok(o) else NotImplemented

    def __ne__(self, o):
        return ne(self, o) if _operand_ok(o) else NotImplemented

    # ------------------------------------------------------------ views

    def reshape(self, *shape: Any) -> "Tensor":
        """t.reshape(2, 3) or t.reshape((2, 3)): see wgml.reshape."""
        return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape)

    def view(self, *shape: Any) -> "Tensor":
        """The same as reshape (PyTorch's name)."""
        return self.reshape(*shape)

    def flatten(self) -> "Tensor":
        """All elements in one axis."""
        return reshape(self, (-1,))

    def permute(self, *axes: Any) -> "Tensor":
        """t.permute(2, 0, 1) or t.permute((2, 0, 1)): axes reordered (a view)."""
        return permute(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], numbers.Integral) else axes)

    def transpose(self, *axes: Any) -> "Tensor":
        """No axes: all reversed (NumPy); two integers: those two swapped (PyTorch's
        transpose(0, 1), on a 2-D tensor too); one tuple: a permutation (NumPy's
        transpose((1, 0)))."""
        if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
            return permute(self, tuple(axes[0]))
        if not axes:
            return permute(self, tuple(range(self.ndim))[::-1])
        if len(axes) == 2:
            return transpose(self, axes[0], axes[1])
        return permute(self, axes)

    @property
    def T(self) -> "Tensor":
        """All axes reversed (a view)."""
        return permute(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self) -> "Tensor":
        """The last two axes swapped (a view)."""
        return transpose(self, -2, -1)

    def broadcast_to(self, shape: Shape) -> "Tensor":
        """See wgml.broadcast_to."""
        return broadcast_to(self, shape)

    def contiguous(self) -> "Tensor":
        """See wgml.contiguous."""
        return contiguous(self)

    def detach(self) -> "Tensor":
        """The value, with no gradient flowing through it (as PyTorch's detach)."""
        return detach(self)

    def astype(self, dtype: DType) -> "Tensor":
        """As dtype (NumPy's name; see wgml.cast)."""
        return cast(self, dtype)

    def unsqueeze(self, axis: Optional[int] = None, *, dim: Optional[int] = None) -> "Tensor":
        """A new axis of size 1 at position axis (or dim=)."""
        axis, _ = _pick(axis, dim, False, None, "unsqueeze")
        shape = list(self.shape)
        shape.insert(_axis(axis, len(shape) + 1, "unsqueeze"), 1)
        return reshape(self, shape)

    def squeeze(self, axis: Optional[int] = None, *, dim: Optional[int] = None) -> "Tensor":
        """Without axes of size 1 (all of them, or the one given; NumPy refuses one of
        another size, and so does this)."""
        axis, _ = _pick(axis, dim, False, None, "squeeze")
        shape = self.shape
        if axis is None:
            keep = [d for d in shape if d != 1]
        else:
            axis = _axis(axis, len(shape), "squeeze")
            if shape[axis] != 1:
                raise ValueError("squeeze: axis %d has size %d, not 1" % (axis, shape[axis]))
            keep = [d for i, d in enumerate(shape) if i != axis]
        return reshape(self, keep)

    def __getitem__(self, key):
        return _getitem(self, key)


class _Size(int):
    """The element count (an int, NumPy's t.size) that, called, gives PyTorch's t.size()."""

    def __new__(cls, n, shape):
        self = super().__new__(cls, n)
        self._dims = shape
        return self

    def __call__(self, dim: Optional[int] = None):
        if dim is None:
            return self._dims
        return self._dims[_axis(dim, len(self._dims), "size")]


def _operand_ok(o):
    return isinstance(o, (Tensor, np.ndarray, list, tuple)) or _is_scalar(o)


# ---------------------------------------------------------------- creation

def tensor(data: Any, dtype: DType = None, ctx: Optional[Context] = None, requires_grad: bool = False) -> Tensor:
    """A tensor from host data (a copy). wgml holds float32 and int32 only: float data
    (float64 included, rounded) and Python floats become float32, integer data int32
    (PyTorch would make int64; values must fit); dtype= forces one ("f32"/"i32", np.float32,
    float, int). Float data given dtype="i32" must hold integers (no silent truncation, no
    NaN). A scalar gives a 0-d tensor, shape (). requires_grad=True makes it trainable
    (float32 only)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    t = _upload(data, dtype, _ctx_of(ctx))
    if requires_grad:
        t.requires_grad = True
    return t


def from_numpy(array: np.ndarray, ctx: Optional[Context] = None) -> Tensor:
    """A tensor of a NumPy array's values. Unlike torch.from_numpy it copies (the values
    live on the device), and float64 becomes float32, int64 int32 (as wgml.tensor)."""
    if not isinstance(array, np.ndarray):
        raise TypeError("from_numpy takes a numpy.ndarray, not %s" % type(array).__name__)
    return tensor(array, ctx=ctx)


as_tensor = tensor


def zeros(*size: Any, dtype: DType = None, ctx: Optional[Context] = None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: zeros(3, 4) or zeros((3, 4)) (float32, or dtype=)."""
    shape, rest = _split_size(size, "zeros")
    if rest:  # the older zeros(shape, dtype, ctx)
        dtype = rest[0]
        ctx = rest[1] if len(rest) > 1 else ctx
    ctx = _ctx_of(ctx)
    cs = _c_shape(shape)
    out = ffi.new("wgml_tensor **")
    ctx._check(lib.wgml_tensor_zeros(ctx._handle(), len(cs), _i64(cs), out))
    t = _wrap(ctx, out[0], storage=True)
    if dtype is not None and _dtype_code(dtype) != lib.WGML_F32:
        t = cast(t, dtype)
    return _finish(t, shape, requires_grad)


def full(size: Shape, fill_value: float, dtype: DType = None, ctx: Optional[Context] = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of shape size (a tuple, or an int) filled with fill_value: float32, zeros plus
    the value (one elementwise kernel on the GPU); int32 (dtype="i32") from the host, where
    every int32 value is exact."""
    shape = _shape_arg(size)
    if dtype is not None and _dtype_code(dtype) != lib.WGML_F32:
        if not float(fill_value).is_integer():
            raise ValueError("an int32 tensor takes integral values, not %r" % (fill_value,))
        t = tensor(np.full(_c_shape(shape), int(fill_value), np.int32), dtype, ctx)
    else:
        t = add(zeros(_c_shape(shape), ctx=ctx), float(fill_value))
    return _finish(t, shape, requires_grad)


def ones(*size: Any, dtype: DType = None, ctx: Optional[Context] = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones: ones(3, 4) or ones((3, 4))."""
    shape, rest = _split_size(size, "ones")
    if rest:  # the older ones(shape, dtype, ctx)
        dtype = rest[0]
        ctx = rest[1] if len(rest) > 1 else ctx
    return full(shape, 1.0, dtype, ctx, requires_grad)


def zeros_like(t: Tensor, dtype: DType = None, requires_grad: bool = False) -> Tensor:
    """Zeros of t's shape (and dtype, unless given), in t's context."""
    return zeros(t.shape, dtype=dtype if dtype is not None else t.dtype, ctx=t._ctx, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype: DType = None, requires_grad: bool = False) -> Tensor:
    """Ones of t's shape (and dtype, unless given), in t's context."""
    return full(t.shape, 1.0, dtype if dtype is not None else t.dtype, t._ctx, requires_grad)


def full_like(t: Tensor, fill_value: float, dtype: DType = None, requires_grad: bool = False) -> Tensor:
    """fill_value in t's shape (and dtype, unless given), in t's context."""
    return full(t.shape, fill_value, dtype if dtype is not None else t.dtype, t._ctx, requires_grad)


def arange(start: int, stop: Optional[int] = None, step: int = 1, dtype: DType = "i32",
           ctx: Optional[Context] = None) -> Tensor:
    """[start, stop) in steps of step (NumPy's and PyTorch's order), int32 (default) or float32
    (dtype="f32"); integer arguments."""
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, numbers.Real) or isinstance(v, bool) or not float(v).is_integer():
            raise ValueError("arange takes integer start, stop and step; %s is %r" % (name, v))
    if step == 0:
        raise ValueError("arange: step must not be 0")
    ctx = _ctx_of(ctx)
    if step == 1:
        return _wrap(ctx, lib.wgml_arange(ctx._handle(), int(start), int(stop), _dtype_code(dtype)))
    return tensor(np.arange(int(start), int(stop), int(step)), dtype=dtype, ctx=ctx)  # (made on the host)


def causal_mask(t: int, s: Optional[int] = None, ctx: Optional[Context] = None) -> Tensor:
    """[t, s] mask: 1 where key j lies in query i's future (j > i + s - t)."""
    ctx = _ctx_of(ctx)
    return _wrap(ctx, lib.wgml_causal_mask(ctx._handle(), int(t), int(t if s is None else s)))


def rand(*size: Any, low: float = 0.0, high: float = 1.0, ctx: Optional[Context] = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform in [low, high): rand(3, 4) or rand((3, 4)) (also rand((3, 4), low, high)),
    from the context's Philox generator (wgml.manual_seed)."""
    shape, rest = _split_size(size, "rand")
    if rest:
        low, high = (tuple(rest) + (high,))[:2]
    ctx = _ctx_of(ctx)
    cs = _c_shape(shape)
    return _finish(_wrap(ctx, lib.wgml_rand(ctx._handle(), len(cs), _i64(cs), low, high)), shape, requires_grad)


def randn(*size: Any, mean: float = 0.0, std: float = 1.0, ctx: Optional[Context] = None,
          requires_grad: bool = False) -> Tensor:
    """Normal(mean, std): randn(3, 4) or randn((3, 4)) (also randn((3, 4), mean, std)),
    from the context's Philox generator (wgml.manual_seed)."""
    shape, rest = _split_size(size, "randn")
    if rest:
        mean, std = (tuple(rest) + (std,))[:2]
    ctx = _ctx_of(ctx)
    cs = _c_shape(shape)
    return _finish(_wrap(ctx, lib.wgml_randn(ctx._handle(), len(cs), _i64(cs), mean, std)), shape, requires_grad)


def _fan(mode):
    modes = {"fan_in": lib.WGML_FAN_IN, "fan_out": lib.WGML_FAN_OUT}
    if mode not in modes:
        raise ValueError("mode is 'fan_in' or 'fan_out', not %r" % (mode,))
    return modes[mode]


def xavier_uniform(shape: Shape, gain: float = 1.0, ctx: Optional[Context] = None, requires_grad: bool = False) -> Tensor:
    """Xavier/Glorot uniform initialisation of a weight of this shape (fan in, fan out: its
    last two dimensions)."""
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _finish(_wrap(ctx, lib.wgml_xavier_uniform(ctx._handle(), len(shape), _i64(shape), gain)), shape, requires_grad)


def xavier_normal(shape: Shape, gain: float = 1.0, ctx: Optional[Context] = None, requires_grad: bool = False) -> Tensor:
    """Xavier/Glorot normal initialisation of a weight of this shape (fan in, fan out: its
    last two dimensions)."""
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _finish(_wrap(ctx, lib.wgml_xavier_normal(ctx._handle(), len(shape), _i64(shape), gain)), shape, requires_grad)


def kaiming_uniform(shape: Shape, gain: float = math.sqrt(2.0), mode: str = "fan_in", ctx: Optional[Context] = None,
        requires_grad: bool = False) -> Tensor:
    """Kaiming/He uniform initialisation (gain sqrt(2) suits ReLU; mode "fan_in" or "fan_out")."""
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _finish(_wrap(ctx, lib.wgml_kaiming_uniform(ctx._handle(), len(shape), _i64(shape), gain, _fan(mode))), shape,
                   requires_grad)


def kaiming_normal(shape: Shape, gain: float = math.sqrt(2.0), mode: str = "fan_in", ctx: Optional[Context] = None,
        requires_grad: bool = False) -> Tensor:
    """Kaiming/He normal initialisation (gain sqrt(2) suits ReLU; mode "fan_in" or "fan_out")."""
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _finish(_wrap(ctx, lib.wgml_kaiming_normal(ctx._handle(), len(shape), _i64(shape), gain, _fan(mode))), shape,
                   requires_grad)


def manual_seed(seed: int, ctx: Optional[Context] = None) -> None:
    """Seeds the context's random generator (rand, randn, dropout, initialisers)."""
    _ctx_of(ctx).manual_seed(seed)


# ---------------------------------------------------------------- operands

def _as_tensor(x, like=None, dtype=None):
    """x itself if a Tensor, else x uploaded (to like's context, in like's dtype)."""
    if isinstance(x, Tensor):
        x._handle()
        return x
    if x is None:
        raise TypeError("expected a wgml.Tensor or array, got None")
    if like is not None:
        return _upload(x, like.dtype if dtype is None else dtype, like._ctx)
    return _upload(x, dtype, default_context())


def _opt(t):
    """An optional operand's handle: NULL for None."""
    return ffi.NULL if t is None else t._handle()


def _first_tensor(*xs):
    for x in xs:
        if isinstance(x, Tensor):
            return x
    return None


# ---------------------------------------------------------------- elementwise

def _binary_fn(name, code):
    def op(a: Any, b: Any) -> Tensor:
        if isinstance(a, Tensor) and _is_scalar(b):
            return _scalar_result(_wrap(a._ctx, lib.wgml_binary_scalar(a._ctx._ptr, code, a._handle(), float(b))), a)
        if isinstance(b, Tensor) and _is_scalar(a):
            return _scalar_result(_wrap(b._ctx, lib.wgml_scalar_binary(b._ctx._ptr, code, float(a), b._handle())), b)
        like = _first_tensor(a, b)
        ta, tb = _as_tensor(a, like), _as_tensor(b, like)
        return _scalar_result(_wrap(ta._ctx, lib.wgml_binary(ta._ctx._ptr, code, ta._handle(), tb._handle())), a, b)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = ("%s(a, b), elementwise with NumPy broadcasting; either side may be a scalar or an array "
                  "(float32; comparisons give 1.0/0.0)." % name)
    return op


def _unary_fn(name, public=None):
    cfn = getattr(lib, "wgml_" + name)

    def op(a: Any) -> Tensor:
        a = _as_tensor(a)
        return _scalar_result(_wrap(a._ctx, cfn(a._ctx._ptr, a._handle())), a)
    op.__name__ = op.__qualname__ = public or name
    op.__doc__ = "%s(a), elementwise (wgml_%s)." % (public or name, name)
    return op


# ---------------------------------------------------------------- the library's elementwise ops

def _library_ops():
    """(name, kind, wgml_binary_op) of every op wgml.h gives a generated constructor
    wgml_<name> (wgml_op_get_info): a new op reaches Python with no edit here."""
    info = ffi.new("wgml_op_info *")
    out = []
    for i in range(lib.wgml_op_count()):
        if lib.wgml_op_get_info(i, info) == lib.WGML_OK and info.public_fn:
            out.append((ffi.string(info.name).decode(), ffi.string(info.kind).decode(), info.binary_op))
    return out


# C names given another name here (wgml_gelu is the tanh form; gelu below is PyTorch's)
_RENAMED = {"gelu": "gelu_tanh"}
_binary_names, _unary_names = [], []
for _name, _kind, _code in _library_ops():
    if _kind == "binary":
        globals()[_name] = _binary_fn(_name, _code)
        _binary_names.append(_name)
    elif _kind == "unary":
        globals()[_RENAMED.get(_name, _name)] = _unary_fn(_name, _RENAMED.get(_name))
        _unary_names.append(_RENAMED.get(_name, _name))
BINARY_OPS = tuple(_binary_names)

gelu_tanh.__doc__ = "GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's)."
gelu_exact.__doc__ = "GELU, exact: 0.5 x (1 + erf(x / sqrt(2))) (the same as gelu)."


def gelu(a: Any, approximate: str = "none") -> Tensor:
    """GELU as PyTorch's: exact, x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), by default;
    approximate="tanh" is the tanh form (gelu_tanh)."""
    if approximate == "none":
        return gelu_exact(a)
    if approximate == "tanh":
        return gelu_tanh(a)
    raise ValueError("approximate is 'none' or 'tanh', not %r" % (approximate,))

UNARY_OPS = tuple(_unary_names) + ("gelu",)  # gelu: the exact form by default, as PyTorch's
for _name in UNARY_OPS:
    setattr(Tensor, _name, globals()[_name])
for _name in BINARY_OPS:
    setattr(Tensor, _name, globals()[_name])


def clamp(a: Any, lo: Optional[float] = None, hi: Optional[float] = None, *, min: Optional[float] = None,
          max: Optional[float] = None) -> Tensor:
    """a limited to [lo, hi] (min=/max= as PyTorch's; a missing bound is unbounded)."""
    lo = min if lo is None else lo
    hi = max if hi is None else hi
    a = _as_tensor(a)
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    return _scalar_result(_wrap(a._ctx, lib.wgml_clamp(a._ctx._ptr, a._handle(), lo, hi)), a)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """a where cond != 0, else b (broadcasting)."""
    like = _first_tensor(cond, a, b)
    cond, a, b = _as_tensor(cond, like, "f32"), _as_tensor(a, like), _as_tensor(b, like)
    return _scalar_result(_wrap(a._ctx, lib.wgml_where(a._ctx._ptr, cond._handle(), a._handle(), b._handle())), cond, a, b)


def masked_fill(a: Any, mask: Any, value: float) -> Tensor:
    """value where mask != 0, else a."""
    a = _as_tensor(a)
    mask = _as_tensor(mask, a, "f32")
    return _scalar_result(_wrap(a._ctx, lib.wgml_masked_fill(a._ctx._ptr, a._handle(), mask._handle(), value)), a, mask)


def dropout(a: Any, p: float) -> Tensor:
    """Zeros each element with probability p and scales the others by 1 / (1 - p) (always:
    there is no train/eval mode; skip the call to evaluate)."""
    a = _as_tensor(a)
    return _scalar_result(_wrap(a._ctx, lib.wgml_dropout(a._ctx._ptr, a._handle(), p)), a)


# ---------------------------------------------------------------- reductions

def _axes(axis, ndim, what):
    """The axes of a reduction, checked as NumPy does, highest first."""
    axes = (axis,) if _is_int(axis) else tuple(axis)
    got = [_axis(a, ndim, what) for a in axes]
    if len(set(got)) != len(got):
        raise InvalidArgumentError("%s: duplicate value in 'axis' (%s)" % (what, ", ".join(str(a) for a in axes)),
                                   lib.WGML_ERROR_INVALID_ARGUMENT)
    return sorted(got, reverse=True)


ValuesIndices = collections.namedtuple("ValuesIndices", ["values", "indices"])
ValuesIndices.__doc__ = "max(dim=d) / min(dim=d) as PyTorch's: the values and their int32 indices."


def _reduce_fn(name):
    c_axis, c_all = getattr(lib, "wgml_" + name), getattr(lib, "wgml_%s_all" % name)

    def op(a: Any, axis: Union[int, Sequence[int], None] = None, keepdims: bool = False, *,
           dim: Union[int, Sequence[int], None] = None, keepdim: Optional[bool] = None) -> Tensor:
        if name in ("max", "min") and _is_int(dim):
            # PyTorch's max(dim=d) / min(dim=d): the values and where they are
            if axis is not None:
                raise TypeError("%s: pass axis= or dim=, not both" % name)
            a = _as_tensor(a)
            kd = bool(keepdim if keepdim is not None else keepdims)
            return ValuesIndices(op(a, dim, kd), (argmax if name == "max" else argmin)(a, dim, kd))
        axis, keepdims = _pick(axis, dim, keepdims, keepdim, name)
        a = _as_tensor(a)
        ctx = a._ctx
        nd = a.ndim
        if axis is None or nd == 0 and axis == ():
            r = _wrap(ctx, c_all(ctx._ptr, a._handle()))
            return reshape(r, (1,) * nd) if keepdims else _scalar_result(r)
        axes = _axes(axis, nd, name)
        # several axes: one after another, the highest first so the others keep their place
        for ax in axes:
            a = _wrap(ctx, c_axis(ctx._ptr, a._handle(), ax, 1 if keepdims else 0))
        if not keepdims and len(axes) == nd:
            a._0d = True
        return a
    op.__name__ = op.__qualname__ = name
    op.__doc__ = ("%s over axis (an int, a tuple, or None: all elements, a 0-d result); dim=/keepdim= "
                  "(PyTorch's names) work too. An axis out of range is NumPy's AxisError." % name)
    if name in ("max", "min"):
        op.__doc__ += (" As PyTorch's, %s(dim=d) with one int d gives (values, indices) (a namedtuple); "
                       "axis=d gives the values alone, as NumPy's." % name)
    return op


sum = _reduce_fn("sum")
mean = _reduce_fn("mean")
max = _reduce_fn("max")
min = _reduce_fn("min")
for _name in ("sum", "mean", "max", "min"):
    setattr(Tensor, _name, globals()[_name])


def _arg_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a: Any, axis: Optional[int] = None, keepdims: bool = False, *, dim: Optional[int] = None,
           keepdim: Optional[bool] = None) -> Tensor:
        axis, keepdims = _pick(axis, dim, keepdims, keepdim, name)
        a = _as_tensor(a)  # axis None: NumPy's index into the flattened tensor
        return _along_axis(a, axis, keepdims, lambda h, ax, kd: cfn(a._ctx._ptr, h, ax, kd), name)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s along axis (int32 indices)." % name
    return op


argmax = _arg_fn("argmax")
argmin = _arg_fn("argmin")
Tensor.argmax = argmax
Tensor.argmin = argmin


def _along_axis(a, axis, keepdims, call, what):
    """call(handle, axis, keepdims) along one axis, or with axis None over the flattened tensor."""
    if axis is None:
        flat = reshape(a, (-1,))  # held in a name: a temporary would be freed before the call
        r = _wrap(a._ctx, call(flat._handle(), 0, 0))
        return reshape(r, (1,) * a.ndim) if keepdims else _scalar_result(r)
    ax = _axis(axis, a.ndim, what)
    r = _wrap(a._ctx, call(a._handle(), ax, 1 if keepdims else 0))
    if not keepdims and a.ndim == 1:
        r._0d = True
    return r


def _moment_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a: Any, axis: Optional[int] = None, correction: int = 0, keepdims: bool = False, ddof: Optional[int] = None,
           *, dim: Optional[int] = None, keepdim: Optional[bool] = None, unbiased: Optional[bool] = None) -> Tensor:
        axis, keepdims = _pick(axis, dim, keepdims, keepdim, name)
        a = _as_tensor(a)
        if ddof is not None:
            correction = ddof
        if unbiased is not None:
            correction = 1 if unbiased else 0
        return _along_axis(a, axis, keepdims, lambda h, ax, kd: cfn(a._ctx._ptr, h, ax, int(correction), kd), name)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = ("%s along axis (or of all elements): sum((a - mean)^2) / (n - correction); "
                  "correction 0 is NumPy's default, 1 PyTorch's (which a PyTorch habit must ask for: "
                  "correction=1 or unbiased=True)." % name)
    return op


var = _moment_fn("var")
std = _moment_fn("std")
Tensor.var = var
Tensor.std = std


def _last_axis_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a: Any, axis: Optional[int] = None, *, dim: Optional[int] = None) -> Tensor:
        axis, _ = _pick(axis, dim, False, None, name)
        a = _as_tensor(a)
        nd = a.ndim
        ax = _axis(-1 if axis is None else axis, builtins.max(nd, 1), name)
        if ax == nd - 1 or nd == 0:
            return _scalar_result(_wrap(a._ctx, cfn(a._ctx._ptr, a._handle())), a)
        # the library works along the last axis: move the axis there and back
        return transpose(op(transpose(a, ax, -1)), ax, -1)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s along axis (or dim=; default the last). An axis out of range is NumPy's AxisError." % name
    return op


softmax = _last_axis_fn("softmax")
log_softmax = _last_axis_fn("log_softmax")
Tensor.softmax = softmax
Tensor.log_softmax = log_softmax


def layernorm(a: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """(a - mean) / sqrt(var + eps) * weight + bias over the last axis."""
    a = _as_tensor(a)
    # uploads held in names until the call: a temporary's handle would be freed first
    w = _as_tensor(weight, a) if weight is not None else None
    b = _as_tensor(bias, a) if bias is not None else None
    return _wrap(a._ctx, lib.wgml_layernorm(a._ctx._ptr, a._handle(), _opt(w), _opt(b), eps))


def rmsnorm(a: Any, weight: Any = None, eps: float = 1e-5) -> Tensor:
    """a / sqrt(mean(a^2) + eps) * weight over the last axis."""
    a = _as_tensor(a)
    w = _as_tensor(weight, a) if weight is not None else None
    return _wrap(a._ctx, lib.wgml_rmsnorm(a._ctx._ptr, a._handle(), _opt(w), eps))


def cumsum(a: Any, axis: Optional[int] = None, reverse: bool = False, *, dim: Optional[int] = None) -> Tensor:
    """Running sums along axis (or dim=; default the last); reverse: from the end."""
    axis, _ = _pick(axis, dim, False, None, "cumsum")
    a = _as_tensor(a)
    ax = _axis(-1 if axis is None else axis, a.ndim, "cumsum")
    return _wrap(a._ctx, lib.wgml_cumsum(a._ctx._ptr, a._handle(), ax, 1 if reverse else 0))


def rope(x: Any, pos_offset: int = 0, base: float = 10000.0, interleaved: bool = False, inverse: bool = False) -> Tensor:
    """Rotary position embedding over x [..., T, D] (rotate-half pairs, or interleaved)."""
    x = _as_tensor(x)
    d = ffi.new("wgml_rope_desc *")
    d.pos_offset = int(pos_offset)
    d.base = base
    d.interleaved = 1 if interleaved else 0
    d.inverse = 1 if inverse else 0
    return _wrap(x._ctx, lib.wgml_rope_ex(x._ctx._ptr, x._handle(), d))


Tensor.clamp = clamp
Tensor.clip = clamp
Tensor.cumsum = cumsum
Tensor.masked_fill = masked_fill


# ---------------------------------------------------------------- views and movement

def reshape(a: Any, shape: Shape) -> Tensor:
    """a with a new shape of the same size (a view when a is contiguous); one -1 is inferred;
    () makes a one-element tensor 0-d."""
    a = _as_tensor(a)
    shape = list(_shape_arg(shape))
    if not shape:
        if a.numel() != 1:
            raise ValueError("cannot reshape a tensor of %d elements into shape ()" % a.numel())
        r = _wrap(a._ctx, lib.wgml_reshape(a._ctx._ptr, a._handle(), 1, _i64([1])))
        r._0d = True
        return r
    if shape.count(-1) == 1:  # the one size inferred, as NumPy does
        known = 1
        for s in shape:
            known *= s if s != -1 else 1
        if known > 0 and a.size % known == 0:
            shape[shape.index(-1)] = a.size // known
        else:  # (NumPy's words)
            raise ShapeError("cannot reshape a tensor of %d elements into shape %s" % (a.size, tuple(_shape_arg(shape))),
                             lib.WGML_ERROR_SHAPE)
    return _wrap(a._ctx, lib.wgml_reshape(a._ctx._ptr, a._handle(), len(shape), _i64(shape)))


def permute(a: Any, axes: Sequence[int]) -> Tensor:
    """a with its axes in the order given (a view; gradients flow)."""
    a = _as_tensor(a)
    axes = [int(x) + a.ndim if x < 0 else int(x) for x in axes]
    if len(axes) != a.ndim:
        raise ValueError("permute: %d axes for a %d-D tensor" % (len(axes), a.ndim))
    return _wrap(a._ctx, lib.wgml_permute(a._ctx._ptr, a._handle(), ffi.new("int[]", axes)))


def transpose(a: Any, axis0: int = -2, axis1: int = -1) -> Tensor:
    """a with two axes swapped (a view)."""
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_transpose(a._ctx._ptr, a._handle(), int(axis0), int(axis1)))


def broadcast_to(a: Any, shape: Shape) -> Tensor:
    """a repeated along axes of size 1 (and new leading axes) to shape (a view)."""
    a = _as_tensor(a)
    shape = _shape_arg(shape)
    return _wrap(a._ctx, lib.wgml_broadcast_to(a._ctx._ptr, a._handle(), len(shape), _i64(shape)))


def slice(a: Any, axis: int, start: int, stop: int, step: int = 1) -> Tensor:
    """[start, stop) with step >= 1 along one axis, indices as the library takes them
    (0 <= start < stop <= size); t[a:b] takes Python's negative and clamped ones."""
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_slice(a._ctx._ptr, a._handle(), int(axis), int(start), int(stop), int(step)))


def detach(a: Any) -> Tensor:
    """a's value with no gradient flowing through it (PyTorch's detach)."""
    a = _as_tensor(a)
    return _scalar_result(_wrap(a._ctx, lib.wgml_detach(a._ctx._ptr, a._handle())), a)


def contiguous(a: Any) -> Tensor:
    """a in row-major order: a itself (as a view) when it already is, else a copy."""
    a = _as_tensor(a)
    return _scalar_result(_wrap(a._ctx, lib.wgml_contiguous(a._ctx._ptr, a._handle())), a)


def cast(a: Any, dtype: DType) -> Tensor:
    """a converted to float32, int32 or float16 ("f32"/"i32"/"f16", np.float32, float, int,
    np.float16); to int32 truncates toward zero, to float16 rounds to nearest even."""
    a = _as_tensor(a)
    return _scalar_result(_wrap(a._ctx, lib.wgml_cast(a._ctx._ptr, a._handle(), _dtype_code(dtype))), a)


def _tensor_list(ts, what):
    ts = list(ts)
    if not ts:
        raise ValueError("%s: no tensors given" % what)
    like = _first_tensor(*ts)
    return [_as_tensor(t, like) for t in ts]


def concat(tensors: Sequence[Any], axis: Optional[int] = None, *, dim: Optional[int] = None) -> Tensor:
    """The tensors joined along an existing axis (or dim=; default 0)."""
    axis, _ = _pick(axis, dim, False, None, "concat")
    ts = _tensor_list(tensors, "concat")
    ax = _axis(0 if axis is None else axis, ts[0].ndim, "concat")
    arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts])
    return _wrap(ts[0]._ctx, lib.wgml_concat(ts[0]._ctx._ptr, len(ts), arr, ax))


def cat(tensors: Sequence[Any], dim: Optional[int] = None, *, axis: Optional[int] = None) -> Tensor:
    """PyTorch's name for concat: cat([a, b], dim=1)."""
    return concat(tensors, axis, dim=dim)


def stack(tensors: Sequence[Any], axis: Optional[int] = None, *, dim: Optional[int] = None) -> Tensor:
    """The tensors (of one shape) stacked along a new axis (or dim=; default 0)."""
    axis, _ = _pick(axis, dim, False, None, "stack")
    ts = _tensor_list(tensors, "stack")
    ax = _axis(0 if axis is None else axis, ts[0].ndim + 1, "stack")
    arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts])
    r = _wrap(ts[0]._ctx, lib.wgml_stack(ts[0]._ctx._ptr, len(ts), arr, ax))
    # 0-d tensors are [1] in C: their stack is [N, 1], PyTorch's and NumPy's [N]
    return reshape(r, (len(ts),)) if builtins.all(t._0d for t in ts) else r


def _views(ctx, n, out):
    return [_wrap(ctx, out[i]) for i in range(n)]


def split(a: Any, sizes: Sequence[int], axis: int = 0) -> list:
    """Views of consecutive parts of the given sizes along axis."""
    a = _as_tensor(a)
    sizes = [int(s) for s in sizes]
    out = ffi.new("wgml_tensor *[]", builtins.max(len(sizes), 1))
    a._ctx._check(lib.wgml_split(a._ctx._ptr, a._handle(), int(axis), len(sizes), _i64(sizes), out))
    return _views(a._ctx, len(sizes), out)


def chunk(a: Any, n: int, axis: int = 0) -> list:
    """n equal parts along axis, as views."""
    a = _as_tensor(a)
    n = int(n)
    if n < 1:
        raise ValueError("chunk: n must be >= 1, not %d" % n)
    out = ffi.new("wgml_tensor *[]", n)
    a._ctx._check(lib.wgml_chunk(a._ctx._ptr, a._handle(), int(axis), n, out))
    return _views(a._ctx, n, out)


def _getitem(t, key):
    """Basic indexing: ints, slices with step >= 1, Ellipsis and None; a 1-D int32 tensor
    on the first axis (index_select). A result with no axes left has shape (1,)."""
    if isinstance(key, Tensor) and key._0d and key.dtype == int32:
        key = int(key)  # a 0-d index is an int (its axis goes), as in PyTorch
    if isinstance(key, Tensor):
        return index_select(t, 0, key)
    if isinstance(key, (list, np.ndarray)):  # t[[0, 2]], t[np.array([0, 2])]: as an int32 tensor would
        idx = np.asarray(key)
        if idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise IndexError("a list or array index is a 1-D array of integers (t[[0, 2]]), not %s of shape %s: "
                             "boolean masks are where() / masked_fill()" % (idx.dtype, idx.shape))
        return index_select(t, 0, tensor(idx, dtype="i32", ctx=t._ctx))
    if not isinstance(key, tuple):
        key = (key,)
    nd = t.ndim
    n_real = len([k for k in key if k is not None and k is not Ellipsis])
    if [k is Ellipsis for k in key].count(True) > 1:
        raise IndexError("an index can only have a single ellipsis")
    if n_real > nd:
        raise IndexError("too many indices for a %d-D tensor" % nd)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([builtins.slice(None)] * (nd - n_real))
        else:
            expanded.append(k)
    if not builtins.any(k is Ellipsis for k in key):  # (not `in`: an array in key would compare)
        expanded.extend([builtins.slice(None)] * (nd - n_real))
    out_shape, axis, changed = [], 0, False
    for k in expanded:
        if k is None:
            out_shape.append(1)
            changed = True
            continue
        dim = t.shape[axis]
        if isinstance(k, (bool, np.bool_)):
            raise IndexError("boolean indices are not supported (t[True] is not t[1]); masks are where() / masked_fill()")
        if isinstance(k, (numbers.Integral, np.integer)):
            i = int(k)
            if not -dim <= i < dim:
                raise IndexError("index %d is out of bounds for axis %d of size %d" % (i, axis, dim))
            i %= dim
            t = slice(t, axis, i, i + 1, 1)
            changed = True
        elif isinstance(k, builtins.slice):
            start, stop, step = k.indices(dim)
            if step < 1:
                raise IndexError("wgml slices take steps >= 1, not %d" % step)
            if (start, stop, step) != (0, dim, 1):
                t = slice(t, axis, start, stop, step)
            out_shape.append(t.shape[axis])
        elif isinstance(k, (Tensor, list, np.ndarray)):
            raise IndexError("an index tensor or array is taken alone (t[idx]: rows of axis 0) or through "
                             "wgml.index_select(t, axis, idx); mixed with other indices in a tuple "
                             "(PyTorch's advanced indexing, t[rows, cols]) it is not supported")
        else:
            raise IndexError("wgml tensors take ints, slices, ..., None and int32 tensors as indices, not %s"
                             % type(k).__name__)
        axis += 1
    if changed:
        t = reshape(t, out_shape)  # () when no axis is left: 0-d, as NumPy and PyTorch
    return t


# ---------------------------------------------------------------- gather and scatter

def embedding(table: Any, ids: Any) -> Tensor:
    """Rows of table [V, C] by int32 ids: [*ids.shape, C]."""
    table = _as_tensor(table)
    ids = _as_tensor(ids, table, "i32")
    return _wrap(table._ctx, lib.wgml_embedding(table._ctx._ptr, table._handle(), ids._handle()))


def index_select(a: Any, axis: int, idx: Any) -> Tensor:
    """The slices of a at int32 positions idx (1-D) along axis; t[idx_tensor] on axis 0."""
    a = _as_tensor(a)
    idx = _as_tensor(idx, a, "i32")
    return _wrap(a._ctx, lib.wgml_index_select(a._ctx._ptr, a._handle(), int(axis), idx._handle()))


def index_add(a: Any, axis: int, idx: Any, src: Any) -> Tensor:
    """A copy of a with src's slices added at positions idx along axis."""
    a = _as_tensor(a)
    idx = _as_tensor(idx, a, "i32")
    src = _as_tensor(src, a)
    return _wrap(a._ctx, lib.wgml_index_add(a._ctx._ptr, a._handle(), int(axis), idx._handle(), src._handle()))


# ---------------------------------------------------------------- matmul, attention, losses

def matmul(a: Any, b: Any, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0, bias: Any = None,
           activation: Optional[str] = None, f16_math: Union[bool, str] = False) -> Tensor:
    """a [..., M, K] @ b [..., K, N] with NumPy-broadcast leading dims; optionally a^T, b^T
    (no copy), a scale alpha, a bias [N] and an activation ("relu", "gelu" (exact, as
    PyTorch's), "gelu_tanh", "silu"; "gelu_exact" is "gelu") fused in. A 1-D operand is a row (a) or column (b) vector, as in NumPy.
    f16_math: the products in f16 arithmetic (operands rounded to halves; see
    wgml_matmul_desc in wgml.h): True or "f32_sums", 16 k at a time summed in f16, then in
    f32; "f16_sums", the whole sum in f16 (faster, less exact); "matrix", f32 sums on the
    GPU's matrix units where the adapter has subgroup matrices (Dawn), else as "f32_sums";
    all need the adapter's shader-f16 feature. "split": f32 accuracy on the matrix units
    (each f32 operand as two halves, three products; error near f32's), else the f32 kernels."""
    like = _first_tensor(a, b)
    a, b = _as_tensor(a, like), _as_tensor(b, like)
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    if squeeze_a:
        a = reshape(a, (1, a.shape[0]))
    if squeeze_b:
        b = reshape(b, (b.shape[0], 1))
    if activation not in _ACTIVATIONS:
        raise ValueError("activation must be one of %s" % ", ".join(repr(k) for k in _ACTIVATIONS if k))
    d = ffi.new("wgml_matmul_desc *")
    d.trans_a = 1 if trans_a else 0
    d.trans_b = 1 if trans_b else 0
    d.alpha = alpha
    bias = _as_tensor(bias, a) if bias is not None else None  # held until the call
    d.bias = _opt(bias)
    d.activation = _ACTIVATIONS[activation]
    modes = {False: 0, True: lib.WGML_F16_MATH_F32_SUMS, "f32_sums": lib.WGML_F16_MATH_F32_SUMS,
             "f16_sums": lib.WGML_F16_MATH_F16_SUMS, "matrix": lib.WGML_F16_MATH_MATRIX,
             "split": lib.WGML_F16_MATH_MATRIX_SPLIT}
    if not isinstance(f16_math, (bool, str)) or f16_math not in modes:
        raise ValueError("f16_math must be False, True, 'f32_sums', 'f16_sums', 'matrix' or 'split', not %r" % (f16_math,))
    d.f16_math = modes[f16_math]
    r = _wrap(a._ctx, lib.wgml_matmul_ex(a._ctx._ptr, a._handle(), b._handle(), d))
    if squeeze_a or squeeze_b:
        shape = list(r.shape)
        if squeeze_b:
            shape.pop(-1)
        if squeeze_a:
            shape.pop(-1 if squeeze_b else -2)
        r = reshape(r, shape)  # vector @ vector: 0-d, as NumPy
    return r


Tensor.matmul = matmul


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: Optional[float] = None) -> Tensor:
    """softmax(scale q k^T [+ causal mask]) v, fused: q [B,H,T,D], k and v [B,Hkv,S,D]
    (or [N,T,D] heads); scale None is 1/sqrt(D)."""
    like = _first_tensor(q, k, v)
    q, k, v = _as_tensor(q, like), _as_tensor(k, like), _as_tensor(v, like)
    d = ffi.new("wgml_attention_desc *")
    d.causal = 1 if causal else 0
    d.scale = 0.0 if scale is None else scale
    return _wrap(q._ctx, lib.wgml_attention(q._ctx._ptr, q._handle(), k._handle(), v._handle(), d))


def cross_entropy(logits: Any, labels: Any) -> Tensor:
    """Mean softmax cross-entropy of logits [B, C] against class indices [B] (int32)."""
    logits = _as_tensor(logits)
    labels = labels if isinstance(labels, Tensor) else _as_tensor(labels, logits, "i32")
    return _scalar_result(_wrap(logits._ctx, lib.wgml_cross_entropy(logits._ctx._ptr, logits._handle(), labels._handle())))


def mse(pred: Any, target: Any) -> Tensor:
    """mean((pred - target)^2), broadcasting."""
    pred = _as_tensor(pred)
    target = _as_tensor(target, pred)
    return _scalar_result(_wrap(pred._ctx, lib.wgml_mse(pred._ctx._ptr, pred._handle(), target._handle())))


def eval(*tensors: Tensor) -> None:
    """Evaluates the tensors' pending graph in one submit."""
    t = _first_tensor(*tensors)
    if t is None:
        return
    t._ctx.eval(*tensors)
