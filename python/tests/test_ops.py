"""Every wrapped op against NumPy in float64, on random non-zero data of awkward sizes."""
import math

import numpy as np
import pytest

import wgml
from conftest import SIZES, close, nonzero

ERF = np.vectorize(math.erf)

# name: (float64 reference, domain is positive, rtol, atol)
UNARY = {
    "neg": (lambda x: -x, False, 0, 0),
    "abs": (np.abs, False, 0, 0),
    "exp": (np.exp, False, 1e-5, 1e-6),
    "log": (np.log, True, 1e-5, 1e-6),
    "sqrt": (np.sqrt, True, 1e-5, 1e-6),
    "rsqrt": (lambda x: 1 / np.sqrt(x), True, 1e-5, 1e-6),
    "tanh": (np.tanh, False, 1e-5, 1e-6),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), False, 1e-5, 1e-6),
    "relu": (lambda x: np.maximum(x, 0), False, 0, 0),
    # "gelu" is exact, as PyTorch's; the tanh form is gelu_tanh
    "gelu": (lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))), False, 1e-5, 1e-6),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), False, 1e-5, 1e-6),
    "gelu_exact": (lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))), False, 1e-5, 1e-6),
    "erf": (ERF, False, 1e-5, 1e-6),
    "sin": (np.sin, False, 1e-5, 1e-6),
    "cos": (np.cos, False, 1e-5, 1e-6),
    "silu": (lambda x: x / (1 + np.exp(-x)), False, 1e-5, 1e-6),
    "softplus": (lambda x: np.log1p(np.exp(x)), False, 1e-5, 1e-6),
    "softsign": (lambda x: x / (1 + np.abs(x)), False, 1e-5, 1e-6),
}


def test_every_unary_op_has_a_reference():
    assert set(UNARY) == set(wgml.UNARY_OPS)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, n, rng):
    ref, positive, rtol, atol = UNARY[name]
    x = nonzero(rng, (n,), positive=positive)
    t = wgml.tensor(x)
    close(getattr(wgml, name)(t).numpy(), ref(x), rtol, atol)
    close(getattr(t, name)().numpy(), ref(x), rtol, atol)  # the method form


def test_unary_on_4d_views(rng):
    x = nonzero(rng, (2, 3, 5, 7))
    t = wgml.tensor(x).permute(3, 1, 0, 2)
    close(wgml.tanh(t).numpy(), np.tanh(x.transpose(3, 1, 0, 2)), 1e-5, 1e-6)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
SHAPE_PAIRS = [((1,), (1,)), ((7,), (7,)), ((1023,), (1,)), ((65537,), (65537,)),
               ((3, 1, 5), (4, 5)), ((2, 3, 4, 5), (3, 1, 5)), ((1, 7), (7, 1))]


def _binary_inputs(rng, name, sa, sb):
    if name == "pow":  # a positive base
        return nonzero(rng, sa, positive=True), nonzero(rng, sb)
    a, b = nonzero(rng, sa), nonzero(rng, sb)
    if name in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum"):
        # few distinct values, so ties happen
        a, b = np.round(a * 2) / 2 + 0.25, np.round(b * 2) / 2 + 0.25
    return a, b


def test_every_binary_op_has_a_reference():
    assert set(BINARY) == set(wgml.BINARY_OPS)


@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, sa, sb, rng):
    a, b = _binary_inputs(rng, name, sa, sb)
    got = getattr(wgml, name)(wgml.tensor(a), wgml.tensor(b)).numpy()
    close(got, BINARY[name](a, b).astype(np.float64), 2e-6 if name != "pow" else 1e-5, 1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_scalars_and_arrays(name, rng):
    a, b = _binary_inputs(rng, name, (3, 7), (3, 7))
    s = float(b[1, 2])
    t = wgml.tensor(a)
    f, ref = getattr(wgml, name), BINARY[name]
    tol = (2e-6 if name != "pow" else 1e-5, 1e-6)
    close(f(t, s).numpy(), ref(a, s).astype(np.float64), *tol)
    if name == "pow":
        close(f(abs(s), t).numpy(), ref(abs(s), a), *tol)
    else:
        close(f(s, t).numpy(), ref(s, a).astype(np.float64), *tol)
    close(f(t, b[0]).numpy(), ref(a, b[0]).astype(np.float64), *tol)  # a host array, broadcast
    close(f(a, wgml.tensor(b)).numpy(), ref(a, b).astype(np.float64), *tol)


def test_operators(rng):
    a, b = nonzero(rng, (4, 5)), nonzero(rng, (5,))
    ta, tb = wgml.tensor(a), wgml.tensor(b)
    cases = [
        (ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b),
        (ta + 2, a + 2), (2 - ta, 2 - a), (3 * ta, 3 * a), (1 / ta, 1 / a), (ta / 4, a / 4),
        (abs(ta) ** 1.5, np.abs(a) ** 1.5), (2 ** ta, 2 ** a), (-ta, -a), (+ta, a), (abs(ta), np.abs(a)),
        (ta < tb, a < b), (ta <= 0.5, a <= 0.5), (ta > tb, a > b), (ta >= tb, a >= b),
        (ta == ta, np.ones_like(a)), (ta != tb, a != b),
        (b + ta, b + a), (a - tb, a - b),  # NumPy arrays on the left defer to the tensor
        (ta @ wgml.tensor(a.T), a @ a.T),
    ]
    for got, want in cases:
        assert isinstance(got, wgml.Tensor)
        close(got.numpy(), np.asarray(want, dtype=np.float64), 1e-5, 1e-5)
    assert (ta == None) is False  # noqa: E711 -- not an operand: Python's identity fallback


def test_clamp_where_masked_fill(rng):
    x, y = nonzero(rng, (7, 9)), nonzero(rng, (9,))
    t = wgml.tensor(x)
    close(wgml.clamp(t, -0.5, 0.75).numpy(), np.clip(x, -0.5, 0.75))
    close(t.clip(-1, 1).numpy(), np.clip(x, -1, 1))
    cond = x > 0
    close(wgml.where(t > 0, t, wgml.tensor(y)).numpy(), np.where(cond, x, y))
    close(wgml.where(cond, t, y).numpy(), np.where(cond, x, y))  # host condition and operand
    close(wgml.masked_fill(t, t < 0, -7.0).numpy(), np.where(x < 0, -7.0, x))
    close(t.masked_fill(cond.astype(np.float32), 3.0).numpy(), np.where(cond, 3.0, x))


def test_causal_mask_and_arange():
    close(wgml.causal_mask(4).numpy(), np.triu(np.ones((4, 4)), 1))
    close(wgml.causal_mask(2, 5).numpy(), (np.arange(5)[None, :] > np.arange(2)[:, None] + 3).astype(float))
    a = wgml.arange(3, 70000)
    assert a.dtype == np.int32 and a.shape == (69997,)
    np.testing.assert_array_equal(a.numpy(), np.arange(3, 70000))
    np.testing.assert_array_equal(wgml.arange(5, dtype="f32").numpy(), np.arange(5.0))


# ---------------------------------------------------------------- reductions

RED = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
RED_SHAPES = [(1,), (7,), (1023,), (65537,), (3, 1023), (2, 3, 4, 5)]


@pytest.mark.parametrize("shape", RED_SHAPES)
@pytest.mark.parametrize("name", sorted(RED))
def test_reductions(name, shape, rng):
    x = nonzero(rng, shape)
    t = wgml.tensor(x)
    f, ref = getattr(wgml, name), RED[name]
    scale = np.abs(x).sum() * 1e-6 + 1e-6  # f32 sums: error relative to the sum of |x|
    close(f(t).numpy(), np.asarray(ref(x)), 1e-5, scale)
    for axis in {0, -1, len(shape) - 1}:
        close(f(t, axis=axis).numpy(), np.asarray(ref(x, axis=axis)), 1e-5, scale)
        close(f(t, axis=axis, keepdims=True).numpy(), ref(x, axis=axis, keepdims=True), 1e-5, scale)
    if len(shape) >= 3:
        close(f(t, axis=(0, 2)).numpy(), ref(x, axis=(0, 2)), 1e-5, scale)
        close(getattr(t, name)(axis=(-1, 1), keepdims=True).numpy(), ref(x, axis=(-1, 1), keepdims=True), 1e-5, scale)
    close(f(t, keepdims=True).numpy(), ref(x, keepdims=True), 1e-5, scale)


@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (65537,), (3, 1023), (2, 3, 4, 5)])
def test_arg_reductions(shape, rng):
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float64)  # no ties
    t = wgml.tensor(x)
    for f, ref in ((wgml.argmax, np.argmax), (wgml.argmin, np.argmin)):
        r = f(t)
        assert r.dtype == np.int32
        np.testing.assert_array_equal(r.numpy(), np.asarray(ref(x)))
        for axis in range(len(shape)):
            np.testing.assert_array_equal(f(t, axis=axis).numpy(), np.asarray(ref(x, axis=axis)))
        np.testing.assert_array_equal(f(t, axis=-1, keepdims=True).numpy(), ref(x, axis=-1, keepdims=True))


@pytest.mark.parametrize("shape", [(7,), (1023,), (65537,), (3, 5, 7)])
def test_var_std(shape, rng):
    x = nonzero(rng, shape) + 0.5
    t = wgml.tensor(x)
    for f, ref in ((wgml.var, np.var), (wgml.std, np.std)):
        for correction in (0, 1):
            close(f(t, correction=correction).numpy(), np.asarray(ref(x, ddof=correction)), 1e-4, 1e-6)
            close(f(t, axis=-1, ddof=correction).numpy(), np.asarray(ref(x, axis=-1, ddof=correction)), 1e-4, 1e-6)
            close(f(t, axis=0, correction=correction, keepdims=True).numpy(),
                  ref(x, axis=0, ddof=correction, keepdims=True), 1e-4, 1e-6)


# ---------------------------------------------------------------- rows

def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layernorm(x, w=None, b=None, eps=1e-5):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rmsnorm(x, w=None, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 if w is None else w)


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1023), (65537,), (2, 3, 4, 5)])
def test_softmax(shape, rng):
    x = nonzero(rng, shape) * 3
    t = wgml.tensor(x)
    close(wgml.softmax(t).numpy(), np_softmax(x), 1e-5, 1e-7)
    lsm = x - x.max(-1, keepdims=True)
    close(wgml.log_softmax(t).numpy(), lsm - np.log(np.exp(lsm).sum(-1, keepdims=True)), 1e-5, 1e-5)
    close(t.softmax(axis=0).numpy(), np_softmax(x, axis=0), 1e-5, 1e-7)


@pytest.mark.parametrize("shape", [(1, 7), (5, 1023), (65537,), (2, 3, 4, 5)])
def test_norms(shape, rng):
    x = nonzero(rng, shape)
    n = shape[-1]
    w, b = nonzero(rng, (n,)), nonzero(rng, (n,))
    t = wgml.tensor(x)
    tol = (1e-4, 1e-5)
    close(wgml.layernorm(t).numpy(), np_layernorm(x), *tol)
    close(wgml.layernorm(t, wgml.tensor(w), wgml.tensor(b), eps=1e-3).numpy(), np_layernorm(x, w, b, 1e-3), *tol)
    close(wgml.layernorm(t, w, b).numpy(), np_layernorm(x, w, b), *tol)  # host arrays for weight and bias
    close(wgml.rmsnorm(t).numpy(), np_rmsnorm(x), *tol)
    close(wgml.rmsnorm(t, w, eps=1e-2).numpy(), np_rmsnorm(x, w, 1e-2), *tol)


@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (65537,), (3, 5, 7)])
def test_cumsum(shape, rng):
    x = nonzero(rng, shape)
    t = wgml.tensor(x)
    scale = np.abs(x).sum() * 1e-6
    for axis in range(len(shape)):
        close(wgml.cumsum(t, axis).numpy(), np.cumsum(x, axis), 1e-5, scale)
        rev = np.flip(np.cumsum(np.flip(x, axis), axis), axis)
        close(t.cumsum(axis - len(shape), reverse=True).numpy(), rev, 1e-5, scale)
    ints = rng.integers(-1000, 1000, size=shape).astype(np.int32)
    got = wgml.cumsum(wgml.tensor(ints), 0)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), np.cumsum(ints, 0))


def np_rope(x, pos_offset=0, base=10000.0, interleaved=False, inverse=False):
    T, D = x.shape[-2], x.shape[-1]
    freq = (base ** (-2.0 * np.arange(D // 2) / D)).astype(np.float32).astype(np.float64)
    ang = (np.arange(T)[:, None] + pos_offset) * freq[None, :]
    if inverse:
        ang = -ang
    c, s = np.cos(ang), np.sin(ang)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : D // 2], x[..., D // 2:]
    ra, rb = a * c - b * s, b * c + a * s
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : D // 2], out[..., D // 2:] = ra, rb
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope(interleaved, rng):
    x = nonzero(rng, (2, 3, 5, 8))
    t = wgml.tensor(x)
    close(wgml.rope(t, interleaved=interleaved).numpy(), np_rope(x, interleaved=interleaved), 1e-4, 1e-5)
    got = wgml.rope(t, pos_offset=7, base=500.0, interleaved=interleaved)
    close(got.numpy(), np_rope(x, 7, 500.0, interleaved), 1e-4, 1e-5)
    back = wgml.rope(got, pos_offset=7, base=500.0, interleaved=interleaved, inverse=True)
    close(back.numpy(), x, 1e-4, 1e-5)


# ---------------------------------------------------------------- views and movement

def test_views(rng):
    x = nonzero(rng, (2, 3, 4, 5))
    t = wgml.tensor(x)
    close(t.reshape(6, 20).numpy(), x.reshape(6, 20))
    close(t.reshape((-1, 5)).numpy(), x.reshape(-1, 5))
    close(wgml.reshape(t, (4, -1)).numpy(), x.reshape(4, -1))
    close(t.flatten().numpy(), x.reshape(-1))
    close(t.permute(3, 1, 0, 2).numpy(), x.transpose(3, 1, 0, 2))
    close(wgml.permute(t, (0, -1, 1, 2)).numpy(), x.transpose(0, 3, 1, 2))
    close(t.transpose(1, 3).numpy(), np.swapaxes(x, 1, 3))
    close(t.T.numpy(), x.T)
    close(t.mT.numpy(), np.swapaxes(x, -1, -2))
    close(wgml.transpose(t).numpy(), np.swapaxes(x, -1, -2))
    close(t.transpose().numpy(), x.transpose())
    close(t.transpose(1, 0, 3, 2).numpy(), x.transpose(1, 0, 3, 2))
    close(wgml.tensor(x[0, 0]).transpose(1, 0).numpy(), x[0, 0].T)
    close(t[0].unsqueeze(1).numpy(), x[0][:, None])
    close(t[:, :1].squeeze(1).numpy(), x[:, 0])
    # views of views, then a copy
    v = t.permute(3, 2, 1, 0)[1:4, ::2].reshape(3, -1)
    close(v.numpy(), x.transpose(3, 2, 1, 0)[1:4, ::2].reshape(3, -1))
    close(wgml.contiguous(t.mT).numpy(), np.swapaxes(x, -1, -2))
    b = nonzero(rng, (5,))
    close(wgml.broadcast_to(wgml.tensor(b), (3, 4, 5)).numpy(), np.broadcast_to(b, (3, 4, 5)))
    close(wgml.tensor(b[:, None]).broadcast_to((5, 6)).numpy(), np.broadcast_to(b[:, None], (5, 6)))


def test_indexing(rng):
    x = nonzero(rng, (6, 7, 8))
    t = wgml.tensor(x)
    keys = [
        np.s_[2], np.s_[-1], np.s_[1:4], np.s_[-3:], np.s_[::2], np.s_[1:6:3], np.s_[:, 2],
        np.s_[:, -2:, 1::3], np.s_[..., 3], np.s_[2, ..., 1:2], np.s_[None, 1], np.s_[:, None, :, 0],
        np.s_[5, 6, 7], np.s_[0:100], np.s_[-100:2], np.s_[...],
    ]
    for k in keys:
        want = np.asarray(x[k])
        got = t[k].numpy()
        close(got, want)  # 0-d where NumPy's is
    idx = np.array([5, 0, 0, 3], dtype=np.int32)
    close(t[wgml.tensor(idx)].numpy(), x[idx])
    rows = [r.numpy() for r in wgml.tensor(x[:3, 0])]
    close(np.stack(rows), x[:3, 0])
    assert len(t) == 6


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 1023), 1), ((4, 5, 6), -2), ((2, 3, 4, 5), 3)])
def test_concat_stack_split_chunk(shape, axis, rng):
    xs = [nonzero(rng, shape) for _ in range(3)]
    ts = [wgml.tensor(x) for x in xs]
    close(wgml.concat(ts, axis).numpy(), np.concatenate(xs, axis))
    close(wgml.concat(ts + xs[:1], axis).numpy(), np.concatenate(xs + xs[:1], axis))  # a host array joins too
    if len(shape) < 4:
        close(wgml.stack(ts, 0).numpy(), np.stack(xs, 0))
        close(wgml.stack(ts, len(shape)).numpy(), np.stack(xs, len(shape)))
    n = shape[axis]
    sizes = [n] if n < 3 else [1, n - 3, 2]
    sizes = [s for s in sizes if s > 0]
    parts = wgml.split(ts[0], sizes, axis)
    want = np.split(xs[0], np.cumsum(sizes)[:-1], axis)
    assert len(parts) == len(want)
    for p, w in zip(parts, want):
        close(p.numpy(), w)
    for c, w in zip(wgml.chunk(ts[1], 1, axis), [xs[1]]):
        close(c.numpy(), w)
    if n % 3 == 0:
        for c, w in zip(wgml.chunk(ts[1], 3, axis), np.split(xs[1], 3, axis)):
            close(c.numpy(), w)


def test_cast(rng):
    x = np.array([1.7, -2.5, 0.0, 3e10, -3e10, np.nan, 16777217.0], dtype=np.float32)
    got = wgml.cast(wgml.tensor(x), "i32")
    assert got.dtype == np.int32
    # truncation toward zero, saturation to the range (2^31 - 1 from 2^31 on), NaN to 0
    np.testing.assert_array_equal(got.numpy(), [1, -2, 0, 2 ** 31 - 1, -2 ** 31, 0, 16777216])
    ints = rng.integers(-2 ** 24, 2 ** 24, size=1023).astype(np.int32)
    back = wgml.tensor(ints).astype(np.float32)
    assert back.dtype == np.float32
    close(back.numpy(), ints.astype(np.float64), 0, 0)
    assert wgml.tensor(ints).astype("i32").dtype == np.int32


# ---------------------------------------------------------------- gather and scatter

@pytest.mark.parametrize("n", [1, 7, 1023])
def test_embedding_index_select_index_add(n, rng):
    table = nonzero(rng, (11, 5))
    ids = rng.integers(0, 11, size=(3, n)).astype(np.int32)
    close(wgml.embedding(wgml.tensor(table), wgml.tensor(ids)).numpy(), table[ids])
    close(wgml.embedding(table, ids).numpy(), table[ids])
    a = nonzero(rng, (4, 11, 3))
    idx = rng.integers(0, 11, size=n).astype(np.int32)
    close(wgml.index_select(wgml.tensor(a), 1, wgml.tensor(idx)).numpy(), a[:, idx])
    src = nonzero(rng, (4, n, 3))
    want = a.copy()
    np.add.at(want, (slice(None), idx), src)
    close(wgml.index_add(wgml.tensor(a), 1, idx, wgml.tensor(src)).numpy(), want, 1e-5, 1e-5)


# ---------------------------------------------------------------- matmul, attention, losses

def np_act(y, act):
    if act == "relu":
        return np.maximum(y, 0)
    if act == "gelu_tanh":
        return UNARY["gelu_tanh"][0](y)
    if act == "gelu":
        return UNARY["gelu"][0](y)
    if act == "gelu_exact":
        return UNARY["gelu_exact"][0](y)
    if act == "silu":
        return y / (1 + np.exp(-y))
    return y


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 3), (1, 1023, 7), (33, 65, 17), (128, 64, 96)])
def test_matmul(m, k, n, rng):
    a, b = nonzero(rng, (m, k)), nonzero(rng, (k, n))
    tol = (1e-4, 1e-5 * k)
    close((wgml.tensor(a) @ wgml.tensor(b)).numpy(), a @ b, *tol)
    close(wgml.matmul(wgml.tensor(a.T), wgml.tensor(b.T), trans_a=True, trans_b=True).numpy(), a @ b, *tol)
    bias = nonzero(rng, (n,))
    for act in ("relu", "gelu", "gelu_tanh", "silu", "gelu_exact", None):
        got = wgml.matmul(a, wgml.tensor(b), alpha=0.5, bias=bias, activation=act)
        close(got.numpy(), np_act(0.5 * (a @ b) + bias, act), *tol)


def test_matmul_f16_math(rng):
    a, b = nonzero(rng, (33, 130)), nonzero(rng, (130, 7))
    t = wgml.tensor(a)
    if not t.context.info()["has_shader_f16"]:
        pytest.skip("the adapter has no shader-f16")
    got = wgml.matmul(t, wgml.tensor(b), f16_math=True).numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    err = np.abs(got - ref)
    assert np.all(err <= 19 * 2.0**-11 * scale + 130 * 2.0**-23)  # f16 rounding's bound
    assert np.mean(np.abs(got - (a @ b)) > 2.0**-20 * scale) > 0.9  # f16, not f32, arithmetic
    # the whole sum in f16: 1 + 2^-11 summed across two 16-k runs stays 1 (f32 sums: 1 + 2^-11)
    x = np.zeros((2, 32), np.float32)
    x[:, 0], x[0, 5], x[1, 21] = 1.0, 2.0**-11, 2.0**-11
    ones = wgml.tensor(np.ones((32, 1), np.float32))
    assert wgml.matmul(x, ones, f16_math="f32_sums").numpy().ravel().tolist() == [1.0, 1.0 + 2.0**-11]
    assert wgml.matmul(x, ones, f16_math="f16_sums").numpy().ravel().tolist() == [1.0, 1.0]
    got = wgml.matmul(t, wgml.tensor(b), f16_math="f16_sums").numpy()
    assert np.all(np.abs(got - ref) <= (3 + 130**0.5) * 2.0**-11 * scale + 130 * 2.0**-23)
    # the matrix units where the adapter has them, else the f32-sums kernel: its bound either way
    got = wgml.matmul(t, wgml.tensor(b), f16_math="matrix").numpy()
    assert np.all(np.abs(got - ref) <= 19 * 2.0**-11 * scale + 130 * 2.0**-23)
    assert np.mean(np.abs(got - (a @ b)) > 2.0**-20 * scale) > 0.9  # f16 operands, not f32
    # hi and lo halves on the matrix units, else the f32 kernels: f32-class either way
    got = wgml.matmul(t, wgml.tensor(b), f16_math="split").numpy()
    assert np.all(np.abs(got - ref) <= (2.0**-18 + (3 * 130 + 2) * 2.0**-23) * scale)
    assert np.max(np.abs(got - ref) / scale) < 2.0**-16  # no operand rounded to f16 (2^-12 of it)
    with pytest.raises(ValueError, match="f16_math must be"):
        wgml.matmul(t, wgml.tensor(b), f16_math="f8")


def test_matmul_batched_and_vectors(rng):
    a, b = nonzero(rng, (2, 3, 5, 4)), nonzero(rng, (3, 4, 6))
    close((wgml.tensor(a) @ wgml.tensor(b)).numpy(), a @ b, 1e-4, 1e-5)
    c = nonzero(rng, (1, 3, 6, 4))
    close(wgml.matmul(a, wgml.tensor(c), trans_b=True).numpy(), a @ np.swapaxes(c, -1, -2), 1e-4, 1e-5)
    v, m = nonzero(rng, (4,)), nonzero(rng, (4, 3))
    close((wgml.tensor(v) @ wgml.tensor(m)).numpy(), v @ m, 1e-5, 1e-5)
    close((wgml.tensor(m.T) @ wgml.tensor(v)).numpy(), m.T @ v, 1e-5, 1e-5)
    close((wgml.tensor(v) @ v).numpy(), np.asarray(v @ v), 1e-5, 1e-5)


def np_attention(q, k, v, causal=False, scale=None):
    D = q.shape[-1]
    H, Hkv = q.shape[-3], k.shape[-3]
    if H != Hkv:
        k = np.repeat(k, H // Hkv, axis=-3)
        v = np.repeat(v, H // Hkv, axis=-3)
    s = (q @ np.swapaxes(k, -1, -2)) * (1 / math.sqrt(D) if scale is None else scale)
    if causal:
        T, S = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(S)[None, :] > np.arange(T)[:, None] + (S - T), -np.inf, s)
    return np_softmax(s) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_attention(causal, rng):
    q, k, v = nonzero(rng, (2, 4, 7, 16)), nonzero(rng, (2, 2, 9, 16)), nonzero(rng, (2, 2, 9, 16))
    got = wgml.attention(wgml.tensor(q), wgml.tensor(k), wgml.tensor(v), causal=causal)
    close(got.numpy(), np_attention(q, k, v, causal), 1e-4, 1e-5)
    got = wgml.attention(q[0], k[0, :1].repeat(4, 0), v[0, :1].repeat(4, 0), causal=causal, scale=0.3)
    close(got.numpy(), np_attention(q[0], k[0, :1].repeat(4, 0), v[0, :1].repeat(4, 0), causal, 0.3), 1e-4, 1e-5)


@pytest.mark.parametrize("b,c", [(1, 2), (7, 10), (1023, 3), (5, 1023)])
def test_losses(b, c, rng):
    logits = nonzero(rng, (b, c)) * 2
    labels = rng.integers(0, c, size=b).astype(np.int32)
    lsm = logits - logits.max(-1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(-1, keepdims=True))
    want = -lsm[np.arange(b), labels].mean()
    close(wgml.cross_entropy(wgml.tensor(logits), wgml.tensor(labels)).numpy(), want, 1e-5, 1e-6)
    close(wgml.cross_entropy(logits, labels.astype(np.float32)).numpy(), want, 1e-5, 1e-6)
    target = nonzero(rng, (c,))
    close(wgml.mse(wgml.tensor(logits), target).numpy(), ((logits - target) ** 2).mean(), 1e-5, 1e-6)


# ---------------------------------------------------------------- random numbers

def test_random():
    ctx = wgml.default_context()
    wgml.manual_seed(1234)
    state = ctx.get_rng_state()
    assert state == (1234, 0)
    u = wgml.rand((65537,), -2.0, 3.0).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    assert ctx.get_rng_state() == (1234, (65537 + 3) // 4)
    ctx.set_rng_state(state)
    np.testing.assert_array_equal(wgml.rand((65537,), -2.0, 3.0).numpy(), u)  # the same bits again
    g = wgml.randn((1023, 64), mean=1.0, std=2.0).numpy()
    assert abs(g.mean() - 1) < 0.05 and abs(g.std() - 2) < 0.05
    x = wgml.tensor(np.ones(65537))
    d = wgml.dropout(x, 0.25).numpy()
    kept = d != 0
    assert abs(kept.mean() - 0.75) < 0.01
    close(d[kept], np.full(kept.sum(), np.float32(1 / 0.75)), 0, 0)
    close(wgml.dropout(x, 0.0).numpy(), np.ones(65537))
    fan_in, fan_out = 300, 200
    w = wgml.xavier_uniform((fan_in, fan_out)).numpy()
    bound = math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    w = wgml.kaiming_uniform((fan_in, fan_out), mode="fan_out").numpy()
    assert np.abs(w).max() <= math.sqrt(2) * math.sqrt(3 / fan_out) * (1 + 1e-6)
    assert abs(wgml.xavier_normal((fan_in, fan_out), gain=2.0).numpy().std() - 2 * math.sqrt(2 / 500)) < 0.01
    assert abs(wgml.kaiming_normal((fan_in, fan_out)).numpy().std() - math.sqrt(2 / fan_in)) < 0.005


def test_zeros_and_eval(rng):
    z = wgml.zeros((3, 4))
    np.testing.assert_array_equal(z.numpy(), np.zeros((3, 4)))
    zi = wgml.zeros(5, dtype="i32")
    assert zi.dtype == np.int32 and zi.numpy().tolist() == [0] * 5
    x = nonzero(rng, (7,))
    a, b = wgml.exp(x), wgml.tensor(x) * 2
    wgml.eval(a, b)  # one submit for both
    close(a.numpy(), np.exp(x), 1e-5, 1e-6)
    close(b.numpy(), 2 * x)


@pytest.mark.parametrize("shape", [1, (7,), (3, 1023)])
def test_ones_full_and_likes(rng, shape):
    ref = np.zeros(shape)
    np.testing.assert_array_equal(wgml.ones(shape).numpy(), np.ones_like(ref))
    np.testing.assert_array_equal(wgml.full(shape, -2.5).numpy(), np.full_like(ref, -2.5))
    fi = wgml.full(shape, 7, dtype="i32")
    assert fi.dtype == np.int32 and (fi.numpy() == 7).all() and fi.shape == np.shape(ref)
    big = 2**24 + 1  # not a float32: exact only if never one
    assert (wgml.full(shape, big, dtype="i32").numpy() == big).all()
    x = wgml.tensor(nonzero(rng, np.shape(ref)))
    for t, want in [(wgml.zeros_like(x), 0.0), (wgml.ones_like(x), 1.0), (wgml.full_like(x, 3.25), 3.25)]:
        assert t.shape == x.shape and t.dtype == np.float32
        np.testing.assert_array_equal(t.numpy(), np.full(np.shape(ref), want))
    assert wgml.ones_like(fi).dtype == np.int32 and wgml.zeros_like(x, dtype="i32").dtype == np.int32


def test_cached_matmul(rng):
    ctx = wgml.default_context()
    w, x = nonzero(rng, (65, 33)), nonzero(rng, (5, 65))
    ctx.weight_upload("pytest.w", w)
    try:
        count, nbytes = ctx.weights_resident()
        assert count >= 1 and nbytes >= 65 * 33 * 4
        close(ctx.matmul_cached("pytest.w", x), x @ w, 1e-4, 1e-5)
    finally:
        ctx.weight_remove("pytest.w")
    with pytest.raises(wgml.NotFoundError):
        ctx.weight_remove("pytest.w")


def test_info_and_stats():
    info = wgml.info()
    for key in ("name", "vendor", "backend", "adapter_type", "max_buffer_size", "features"):
        assert key in info
    assert isinstance(info["name"], str) and info["name"]
    assert isinstance(info["features"], list)
    s = wgml.stats()
    assert s["evals"] >= 0 and "bytes_in_use" in s
