"""wgml.Tensor and the ops: thin calls into libwgml, which does all the work.

Every op is lazy as in C: it records a node and returns at once; reading a result (numpy(),
np.asarray, item()) evaluates the pending graph in one submit. A read keeps only the value:
call backward() on a loss before reading it (optimizers read it for you in step()).
"""
import builtins
import math
import numbers
import weakref

import numpy as np

from ._context import Context, default_context
from ._errors import ContextError, DTypeError, error_for
from ._ffi import ffi, lib

float32 = np.dtype(np.float32)
int32 = np.dtype(np.int32)
_NP_OF = {lib.WGML_F32: float32, lib.WGML_I32: int32}
_ACTIVATIONS = {None: lib.WGML_ACT_NONE, "none": lib.WGML_ACT_NONE, "relu": lib.WGML_ACT_RELU,
                "gelu": lib.WGML_ACT_GELU, "silu": lib.WGML_ACT_SILU, "gelu_exact": lib.WGML_ACT_GELU_EXACT}
_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1


_DTYPE_NAMES = {"f32": lib.WGML_F32, "float32": lib.WGML_F32, "i32": lib.WGML_I32, "int32": lib.WGML_I32}


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
    raise DTypeError("wgml tensors are float32 or int32, not %r" % (dtype,), lib.WGML_ERROR_INVALID_ARGUMENT)


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


def _i64(values):
    values = list(values)
    return ffi.new("int64_t[]", values if values else [0])


def _wrap(ctx, ptr):
    """A Tensor owning the handle an op returned, or the op's error raised (and the error
    tensor freed)."""
    if ptr == ffi.NULL:
        ctx._raise(lib.wgml_last_status(ctx._ptr) or lib.WGML_ERROR_INVALID_ARGUMENT)
    st = lib.wgml_tensor_status(ptr)
    if st != lib.WGML_OK:
        message = ffi.string(lib.wgml_error_message(ctx._ptr)).decode("utf-8", "replace")
        lib.wgml_tensor_free(ptr)
        raise error_for(st, message)
    t = Tensor.__new__(Tensor)
    t._ptr = ptr
    t._ctx = ctx
    t._shape = None
    t._rg = False
    return t


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
    return _wrap(ctx, out[0])


class Tensor:
    """A wgml tensor (float32 or int32, 1 to 4 dimensions), lazy until read."""

    __slots__ = ("_ptr", "_ctx", "_shape", "_rg", "__weakref__")
    # NumPy must not turn `array + tensor` into an array op: it defers to our __radd__
    __array_ufunc__ = None
    __hash__ = object.__hash__  # __eq__ is elementwise; tensors still key dicts by identity

    def __init__(self, data, dtype=None, ctx=None, requires_grad=False):
        t = _upload(data, dtype, _ctx_of(ctx))
        self._ptr, self._ctx, self._shape, self._rg = t._ptr, t._ctx, None, False
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
    def context(self):
        return self._ctx

    @property
    def shape(self):
        if self._shape is None:
            p = self._handle()
            self._shape = tuple(int(lib.wgml_tensor_dim(p, i)) for i in range(lib.wgml_tensor_ndim(p)))
        return self._shape

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(lib.wgml_tensor_numel(self._handle()))

    @property
    def dtype(self):
        return _NP_OF[lib.wgml_tensor_dtype(self._handle())]

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        # no values: reading would evaluate, and evaluation drops the graph backward needs
        if self._ptr is None or self._ctx._ptr is None:
            return "wgml.Tensor(<freed>)"
        return "wgml.Tensor(shape=%s, dtype=%s)" % (self.shape, self.dtype.name)

    # ------------------------------------------------------------ host data

    def numpy(self):
        """Evaluates the tensor if needed and returns its values as a new NumPy array."""
        p = self._handle()
        out = np.empty(self.shape, dtype=self.dtype)
        if out.dtype == float32:
            st = lib.wgml_tensor_read(p, ffi.from_buffer("float[]", out, require_writable=True), out.size)
        else:
            st = lib.wgml_tensor_read_i32(p, ffi.from_buffer("int32_t[]", out, require_writable=True), out.size)
        self._ctx._check(st)
        return out

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a wgml tensor's values live on the device: reading them always copies")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        if self.size != 1:
            raise ValueError("item() needs a tensor of one element, not shape %s" % (self.shape,))
        return self.numpy().reshape(-1)[0].item()

    def tolist(self):
        return self.numpy().tolist()

    def write(self, data):
        """Overwrites a realized, contiguous tensor's values from the host."""
        p = self._handle()
        host = np.ascontiguousarray(data, dtype=self.dtype)
        if host.dtype == float32:
            st = lib.wgml_tensor_write(p, ffi.from_buffer("float[]", host), host.size)
        else:
            st = lib.wgml_tensor_write_i32(p, ffi.from_buffer("int32_t[]", host), host.size)
        self._ctx._check(st)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of a wgml tensor of more than one element is ambiguous")
        return bool(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ------------------------------------------------------------ autograd

    @property
    def requires_grad(self):
        return self._rg

    @requires_grad.setter
    def requires_grad(self, on):
        self._ctx._check(lib.wgml_requires_grad(self._handle(), 1 if on else 0))
        self._rg = bool(on)

    def requires_grad_(self, on=True):
        self.requires_grad = on
        return self

    @property
    def grad(self):
        """The accumulated gradient (lazy), or None. A new handle on it each time: it stays
        valid after zero_grad or an optimiser step (which consume the tensor's own)."""
        g = lib.wgml_grad(self._handle())
        if g == ffi.NULL:
            return None
        shape = self.shape
        return _wrap(self._ctx, lib.wgml_reshape(self._ctx._ptr, g, len(shape), _i64(shape)))

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise ValueError("grad can only be set to None (which clears it)")
        lib.wgml_zero_grad(self._handle())

    def zero_grad(self):
        lib.wgml_zero_grad(self._handle())

    def backward(self):
        """Reverse mode from this one-element loss: adds to each trainable tensor's grad. Call
        it before reading the loss (a read keeps only the value)."""
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

    def reshape(self, *shape):
        return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape)

    def view(self, *shape):
        return self.reshape(*shape)

    def flatten(self):
        return reshape(self, (-1,))

    def permute(self, *axes):
        return permute(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], numbers.Integral) else axes)

    def transpose(self, *axes):
        """No axes: all reversed (NumPy); two: those swapped (PyTorch); ndim: a permutation."""
        if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
            axes = tuple(axes[0])
        if not axes:
            return permute(self, tuple(range(self.ndim))[::-1])
        if len(axes) == 2 and self.ndim != 2:
            return transpose(self, axes[0], axes[1])
        return permute(self, axes)

    @property
    def T(self):
        return permute(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self):
        return transpose(self, -2, -1)

    def broadcast_to(self, shape):
        return broadcast_to(self, shape)

    def contiguous(self):
        return contiguous(self)

    def detach(self):
        """The value, with no gradient flowing through it (as PyTorch's detach)."""
        return detach(self)

    def astype(self, dtype):
        return cast(self, dtype)

    def unsqueeze(self, axis):
        shape = list(self.shape)
        axis = axis + len(shape) + 1 if axis < 0 else axis
        shape.insert(axis, 1)
        return reshape(self, shape)

    def squeeze(self, axis=None):
        shape = self.shape
        if axis is None:
            keep = [d for d in shape if d != 1] or [1]
        else:
            axis = axis + len(shape) if axis < 0 else axis
            if shape[axis] != 1:
                raise ValueError("squeeze: axis %d has size %d, not 1" % (axis, shape[axis]))
            keep = [d for i, d in enumerate(shape) if i != axis] or [1]
        return reshape(self, keep)

    def __getitem__(self, key):
        return _getitem(self, key)


def _operand_ok(o):
    return isinstance(o, (Tensor, np.ndarray, list, tuple)) or _is_scalar(o)


# ---------------------------------------------------------------- creation

def tensor(data, dtype=None, ctx=None, requires_grad=False):
    """A tensor from host data (a copy): float arrays and Python floats become float32,
    integer ones int32 (dtype= forces one); a 0-d value becomes shape (1,)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    t = _upload(data, dtype, _ctx_of(ctx))
    if requires_grad:
        t.requires_grad = True
    return t


def zeros(shape, dtype=None, ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    out = ffi.new("wgml_tensor **")
    ctx._check(lib.wgml_tensor_zeros(ctx._handle(), len(shape), _i64(shape), out))
    t = _wrap(ctx, out[0])
    return t if dtype is None or _dtype_code(dtype) == lib.WGML_F32 else cast(t, dtype)


def full(shape, fill_value, dtype=None, ctx=None):
    """A tensor of shape filled with fill_value: float32, zeros plus the value (one
    elementwise kernel on the GPU); int32 from the host, where every int32 value is exact."""
    if dtype is not None and _dtype_code(dtype) != lib.WGML_F32:
        return tensor(np.full(_shape_arg(shape), int(fill_value), np.int32), dtype, ctx)
    return add(zeros(shape, ctx=ctx), float(fill_value))


def ones(shape, dtype=None, ctx=None):
    return full(shape, 1.0, dtype, ctx)


def zeros_like(t, dtype=None):
    return zeros(t.shape, dtype if dtype is not None else t.dtype, t._ctx)


def ones_like(t, dtype=None):
    return full(t.shape, 1.0, dtype if dtype is not None else t.dtype, t._ctx)


def full_like(t, fill_value, dtype=None):
    return full(t.shape, fill_value, dtype if dtype is not None else t.dtype, t._ctx)


def arange(start, stop=None, dtype="i32", ctx=None):
    """[start, stop) in steps of 1, float32 or int32."""
    if stop is None:
        start, stop = 0, start
    ctx = _ctx_of(ctx)
    return _wrap(ctx, lib.wgml_arange(ctx._handle(), int(start), int(stop), _dtype_code(dtype)))


def causal_mask(t, s=None, ctx=None):
    """[t, s] mask: 1 where key j lies in query i's future (j > i + s - t)."""
    ctx = _ctx_of(ctx)
    return _wrap(ctx, lib.wgml_causal_mask(ctx._handle(), int(t), int(t if s is None else s)))


def rand(shape, low=0.0, high=1.0, ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_rand(ctx._handle(), len(shape), _i64(shape), low, high))


def randn(shape, mean=0.0, std=1.0, ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_randn(ctx._handle(), len(shape), _i64(shape), mean, std))


def _fan(mode):
    modes = {"fan_in": lib.WGML_FAN_IN, "fan_out": lib.WGML_FAN_OUT}
    if mode not in modes:
        raise ValueError("mode is 'fan_in' or 'fan_out', not %r" % (mode,))
    return modes[mode]


def xavier_uniform(shape, gain=1.0, ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_xavier_uniform(ctx._handle(), len(shape), _i64(shape), gain))


def xavier_normal(shape, gain=1.0, ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_xavier_normal(ctx._handle(), len(shape), _i64(shape), gain))


def kaiming_uniform(shape, gain=math.sqrt(2.0), mode="fan_in", ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_kaiming_uniform(ctx._handle(), len(shape), _i64(shape), gain, _fan(mode)))


def kaiming_normal(shape, gain=math.sqrt(2.0), mode="fan_in", ctx=None):
    ctx = _ctx_of(ctx)
    shape = _shape_arg(shape)
    return _wrap(ctx, lib.wgml_kaiming_normal(ctx._handle(), len(shape), _i64(shape), gain, _fan(mode)))


def manual_seed(seed, ctx=None):
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
    def op(a, b):
        if isinstance(a, Tensor) and _is_scalar(b):
            return _wrap(a._ctx, lib.wgml_binary_scalar(a._ctx._ptr, code, a._handle(), float(b)))
        if isinstance(b, Tensor) and _is_scalar(a):
            return _wrap(b._ctx, lib.wgml_scalar_binary(b._ctx._ptr, code, float(a), b._handle()))
        like = _first_tensor(a, b)
        a, b = _as_tensor(a, like), _as_tensor(b, like)
        return _wrap(a._ctx, lib.wgml_binary(a._ctx._ptr, code, a._handle(), b._handle()))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s(a, b), NumPy broadcasting; either side may be a scalar or an array." % name
    return op


add = _binary_fn("add", lib.WGML_ADD)
sub = _binary_fn("sub", lib.WGML_SUB)
mul = _binary_fn("mul", lib.WGML_MUL)
div = _binary_fn("div", lib.WGML_DIV)
pow = _binary_fn("pow", lib.WGML_POW)
maximum = _binary_fn("maximum", lib.WGML_MAXIMUM)
minimum = _binary_fn("minimum", lib.WGML_MINIMUM)
eq = _binary_fn("eq", lib.WGML_EQ)
ne = _binary_fn("ne", lib.WGML_NE)
lt = _binary_fn("lt", lib.WGML_LT)
le = _binary_fn("le", lib.WGML_LE)
gt = _binary_fn("gt", lib.WGML_GT)
ge = _binary_fn("ge", lib.WGML_GE)
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge")


def _unary_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a):
        a = _as_tensor(a)
        return _wrap(a._ctx, cfn(a._ctx._ptr, a._handle()))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s(a), elementwise (wgml_%s)." % (name, name)
    return op


neg = _unary_fn("neg")
abs = _unary_fn("abs")
exp = _unary_fn("exp")
log = _unary_fn("log")
sqrt = _unary_fn("sqrt")
rsqrt = _unary_fn("rsqrt")
tanh = _unary_fn("tanh")
sigmoid = _unary_fn("sigmoid")
relu = _unary_fn("relu")
gelu = _unary_fn("gelu")
gelu_exact = _unary_fn("gelu_exact")
erf = _unary_fn("erf")
sin = _unary_fn("sin")
cos = _unary_fn("cos")
silu = _unary_fn("silu")
softplus = _unary_fn("softplus")
UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_exact",
             "erf", "sin", "cos", "silu", "softplus")
for _name in UNARY_OPS:
    setattr(Tensor, _name, globals()[_name])
for _name in BINARY_OPS:
    setattr(Tensor, _name, globals()[_name])


def clamp(a, lo, hi):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_clamp(a._ctx._ptr, a._handle(), lo, hi))


def where(cond, a, b):
    """a where cond != 0, else b (broadcasting)."""
    like = _first_tensor(cond, a, b)
    cond, a, b = _as_tensor(cond, like, "f32"), _as_tensor(a, like), _as_tensor(b, like)
    return _wrap(a._ctx, lib.wgml_where(a._ctx._ptr, cond._handle(), a._handle(), b._handle()))


def masked_fill(a, mask, value):
    """value where mask != 0, else a."""
    a = _as_tensor(a)
    mask = _as_tensor(mask, a, "f32")
    return _wrap(a._ctx, lib.wgml_masked_fill(a._ctx._ptr, a._handle(), mask._handle(), value))


def dropout(a, p):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_dropout(a._ctx._ptr, a._handle(), p))


# ---------------------------------------------------------------- reductions

def _axes(axis, ndim):
    axes = (axis,) if isinstance(axis, (numbers.Integral, np.integer)) else tuple(axis)
    return sorted({int(a) + ndim if a < 0 else int(a) for a in axes}, reverse=True)


def _reduce_fn(name):
    c_axis, c_all = getattr(lib, "wgml_" + name), getattr(lib, "wgml_%s_all" % name)

    def op(a, axis=None, keepdims=False):
        a = _as_tensor(a)
        ctx = a._ctx
        if axis is None:
            nd = a.ndim
            r = _wrap(ctx, c_all(ctx._ptr, a._handle()))
            return reshape(r, (1,) * nd) if keepdims else r
        # several axes: one after another, the highest first so the others keep their place
        for ax in _axes(axis, a.ndim):
            a = _wrap(ctx, c_axis(ctx._ptr, a._handle(), ax, 1 if keepdims else 0))
        return a
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s over axis (an int, a tuple, or None: all elements)." % name
    return op


sum = _reduce_fn("sum")
mean = _reduce_fn("mean")
max = _reduce_fn("max")
min = _reduce_fn("min")
for _name in ("sum", "mean", "max", "min"):
    setattr(Tensor, _name, globals()[_name])


def _arg_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a, axis=None, keepdims=False):
        a = _as_tensor(a)  # axis None: NumPy's index into the flattened tensor
        return _along_axis(a, axis, keepdims, lambda h, ax, kd: cfn(a._ctx._ptr, h, ax, kd))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s along axis (int32 indices)." % name
    return op


argmax = _arg_fn("argmax")
argmin = _arg_fn("argmin")
Tensor.argmax = argmax
Tensor.argmin = argmin


def _along_axis(a, axis, keepdims, call):
    """call(handle, axis, keepdims) along one axis, or with axis None over the flattened tensor."""
    if axis is None:
        flat = reshape(a, (-1,))  # held in a name: a temporary would be freed before the call
        r = _wrap(a._ctx, call(flat._handle(), 0, 0))
        return reshape(r, (1,) * a.ndim) if keepdims else r
    return _wrap(a._ctx, call(a._handle(), int(axis), 1 if keepdims else 0))


def _moment_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a, axis=None, correction=0, keepdims=False, ddof=None):
        a = _as_tensor(a)
        if ddof is not None:
            correction = ddof
        return _along_axis(a, axis, keepdims, lambda h, ax, kd: cfn(a._ctx._ptr, h, ax, int(correction), kd))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = ("%s along axis (or of all elements): sum((a - mean)^2) / (n - correction); "
                  "correction 0 is NumPy's default, 1 PyTorch's." % name)
    return op


var = _moment_fn("var")
std = _moment_fn("std")
Tensor.var = var
Tensor.std = std


def _last_axis_fn(name):
    cfn = getattr(lib, "wgml_" + name)

    def op(a, axis=-1):
        a = _as_tensor(a)
        nd = a.ndim
        ax = axis + nd if axis < 0 else axis
        if ax == nd - 1 or not 0 <= ax < nd:
            return _wrap(a._ctx, cfn(a._ctx._ptr, a._handle()))
        # the library works along the last axis: move the axis there and back
        return transpose(op(transpose(a, ax, -1)), ax, -1)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = "%s along axis (default the last)." % name
    return op


softmax = _last_axis_fn("softmax")
log_softmax = _last_axis_fn("log_softmax")
Tensor.softmax = softmax
Tensor.log_softmax = log_softmax


def layernorm(a, weight=None, bias=None, eps=1e-5):
    """(a - mean) / sqrt(var + eps) * weight + bias over the last axis."""
    a = _as_tensor(a)
    # uploads held in names until the call: a temporary's handle would be freed first
    w = _as_tensor(weight, a) if weight is not None else None
    b = _as_tensor(bias, a) if bias is not None else None
    return _wrap(a._ctx, lib.wgml_layernorm(a._ctx._ptr, a._handle(), _opt(w), _opt(b), eps))


def rmsnorm(a, weight=None, eps=1e-5):
    """a / sqrt(mean(a^2) + eps) * weight over the last axis."""
    a = _as_tensor(a)
    w = _as_tensor(weight, a) if weight is not None else None
    return _wrap(a._ctx, lib.wgml_rmsnorm(a._ctx._ptr, a._handle(), _opt(w), eps))


def cumsum(a, axis=-1, reverse=False):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_cumsum(a._ctx._ptr, a._handle(), int(axis), 1 if reverse else 0))


def rope(x, pos_offset=0, base=10000.0, interleaved=False, inverse=False):
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

def reshape(a, shape):
    a = _as_tensor(a)
    shape = list(_shape_arg(shape))
    if shape.count(-1) == 1:  # the one size inferred, as NumPy does
        known = 1
        for s in shape:
            known *= s if s != -1 else 1
        if known > 0 and a.size % known == 0:
            shape[shape.index(-1)] = a.size // known
    return _wrap(a._ctx, lib.wgml_reshape(a._ctx._ptr, a._handle(), len(shape), _i64(shape)))


def permute(a, axes):
    a = _as_tensor(a)
    axes = [int(x) + a.ndim if x < 0 else int(x) for x in axes]
    if len(axes) != a.ndim:
        raise ValueError("permute: %d axes for a %d-D tensor" % (len(axes), a.ndim))
    return _wrap(a._ctx, lib.wgml_permute(a._ctx._ptr, a._handle(), ffi.new("int[]", axes)))


def transpose(a, axis0=-2, axis1=-1):
    """a with two axes swapped (a view)."""
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_transpose(a._ctx._ptr, a._handle(), int(axis0), int(axis1)))


def broadcast_to(a, shape):
    a = _as_tensor(a)
    shape = _shape_arg(shape)
    return _wrap(a._ctx, lib.wgml_broadcast_to(a._ctx._ptr, a._handle(), len(shape), _i64(shape)))


def slice(a, axis, start, stop, step=1):
    """[start, stop) with step >= 1 along one axis, indices as the library takes them
    (0 <= start < stop <= size); t[a:b] takes Python's negative and clamped ones."""
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_slice(a._ctx._ptr, a._handle(), int(axis), int(start), int(stop), int(step)))


def detach(a):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_detach(a._ctx._ptr, a._handle()))


def contiguous(a):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_contiguous(a._ctx._ptr, a._handle()))


def cast(a, dtype):
    a = _as_tensor(a)
    return _wrap(a._ctx, lib.wgml_cast(a._ctx._ptr, a._handle(), _dtype_code(dtype)))


def _tensor_list(ts, what):
    ts = list(ts)
    if not ts:
        raise ValueError("%s: no tensors given" % what)
    like = _first_tensor(*ts)
    return [_as_tensor(t, like) for t in ts]


def concat(tensors, axis=0):
    ts = _tensor_list(tensors, "concat")
    arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts])
    return _wrap(ts[0]._ctx, lib.wgml_concat(ts[0]._ctx._ptr, len(ts), arr, int(axis)))


def stack(tensors, axis=0):
    ts = _tensor_list(tensors, "stack")
    arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts])
    return _wrap(ts[0]._ctx, lib.wgml_stack(ts[0]._ctx._ptr, len(ts), arr, int(axis)))


def _views(ctx, n, out):
    return [_wrap(ctx, out[i]) for i in range(n)]


def split(a, sizes, axis=0):
    """Views of consecutive parts of the given sizes along axis."""
    a = _as_tensor(a)
    sizes = [int(s) for s in sizes]
    out = ffi.new("wgml_tensor *[]", builtins.max(len(sizes), 1))
    a._ctx._check(lib.wgml_split(a._ctx._ptr, a._handle(), int(axis), len(sizes), _i64(sizes), out))
    return _views(a._ctx, len(sizes), out)


def chunk(a, n, axis=0):
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
    if isinstance(key, Tensor):
        return index_select(t, 0, key)
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
    if Ellipsis not in key:
        expanded.extend([builtins.slice(None)] * (nd - n_real))
    out_shape, axis, changed = [], 0, False
    for k in expanded:
        if k is None:
            out_shape.append(1)
            changed = True
            continue
        dim = t.shape[axis]
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
        else:
            raise IndexError("wgml tensors take ints, slices, ..., None and int32 tensors as indices, not %s"
                             % type(k).__name__)
        axis += 1
    if changed:
        t = reshape(t, out_shape or [1])
    return t


# ---------------------------------------------------------------- gather and scatter

def embedding(table, ids):
    """Rows of table [V, C] by int32 ids: [*ids.shape, C]."""
    table = _as_tensor(table)
    ids = _as_tensor(ids, table, "i32")
    return _wrap(table._ctx, lib.wgml_embedding(table._ctx._ptr, table._handle(), ids._handle()))


def index_select(a, axis, idx):
    a = _as_tensor(a)
    idx = _as_tensor(idx, a, "i32")
    return _wrap(a._ctx, lib.wgml_index_select(a._ctx._ptr, a._handle(), int(axis), idx._handle()))


def index_add(a, axis, idx, src):
    """A copy of a with src's slices added at positions idx along axis."""
    a = _as_tensor(a)
    idx = _as_tensor(idx, a, "i32")
    src = _as_tensor(src, a)
    return _wrap(a._ctx, lib.wgml_index_add(a._ctx._ptr, a._handle(), int(axis), idx._handle(), src._handle()))


# ---------------------------------------------------------------- matmul, attention, losses

def matmul(a, b, trans_a=False, trans_b=False, alpha=1.0, bias=None, activation=None, f16_math=False):
    """a [..., M, K] @ b [..., K, N] with NumPy-broadcast leading dims; optionally a^T, b^T
    (no copy), a scale alpha, a bias [N] and an activation ("relu", "gelu", "silu",
    "gelu_exact") fused in. A 1-D operand is a row (a) or column (b) vector, as in NumPy.
    f16_math: the products in f16 arithmetic (operands rounded to halves; see
    wgml_matmul_desc in wgml.h): True or "f32_sums", 16 k at a time summed in f16, then in
    f32; "f16_sums", the whole sum in f16 (faster, less exact); needs the adapter's
    shader-f16 feature."""
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
             "f16_sums": lib.WGML_F16_MATH_F16_SUMS}
    if not isinstance(f16_math, (bool, str)) or f16_math not in modes:
        raise ValueError("f16_math must be False, True, 'f32_sums' or 'f16_sums', not %r" % (f16_math,))
    d.f16_math = modes[f16_math]
    r = _wrap(a._ctx, lib.wgml_matmul_ex(a._ctx._ptr, a._handle(), b._handle(), d))
    if squeeze_a or squeeze_b:
        shape = list(r.shape)
        if squeeze_b:
            shape.pop(-1)
        if squeeze_a:
            shape.pop(-1 if squeeze_b else -2)
        r = reshape(r, shape or [1])
    return r


Tensor.matmul = matmul


def attention(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T [+ causal mask]) v, fused: q [B,H,T,D], k and v [B,Hkv,S,D]
    (or [N,T,D] heads); scale None is 1/sqrt(D)."""
    like = _first_tensor(q, k, v)
    q, k, v = _as_tensor(q, like), _as_tensor(k, like), _as_tensor(v, like)
    d = ffi.new("wgml_attention_desc *")
    d.causal = 1 if causal else 0
    d.scale = 0.0 if scale is None else scale
    return _wrap(q._ctx, lib.wgml_attention(q._ctx._ptr, q._handle(), k._handle(), v._handle(), d))


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of logits [B, C] against class indices [B] (int32)."""
    logits = _as_tensor(logits)
    labels = labels if isinstance(labels, Tensor) else _as_tensor(labels, logits, "i32")
    return _wrap(logits._ctx, lib.wgml_cross_entropy(logits._ctx._ptr, logits._handle(), labels._handle()))


def mse(pred, target):
    """mean((pred - target)^2), broadcasting."""
    pred = _as_tensor(pred)
    target = _as_tensor(target, pred)
    return _wrap(pred._ctx, lib.wgml_mse(pred._ctx._ptr, pred._handle(), target._handle()))


def eval(*tensors):
    """Evaluates the tensors' pending graph in one submit."""
    t = _first_tensor(*tensors)
    if t is None:
        return
    t._ctx.eval(*tensors)
