"""Gradients from backward() against central finite differences of the float64 NumPy
reference: loss = sum(op(inputs) * r) with random r, so every output element counts.

What this checks is the binding: one op of each kind through Python (its arguments, keywords
and operators reaching the library), and the gradients of what Python composes itself (var,
std, tuple axes, softmax along other axes, indexing, stack, split, embedding, where). Each
op's own gradient, on many shapes, is checked once, in tests/test_op_table.c."""

import numpy as np
import pytest

import wgml
from conftest import nonzero
from test_ops import UNARY, np_attention, np_layernorm, np_rope, np_softmax


def fd_grad(f, xs, i, h=1e-6):
    """d f(xs) / d xs[i] by central differences in float64."""
    x = xs[i]
    g = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        orig = x[j]
        x[j] = orig + h
        fp = f(xs)
        x[j] = orig - h
        fm = f(xs)
        x[j] = orig
        g[j] = (fp - fm) / (2 * h)
    return g


def check_grad(lib_fn, np_fn, xs, rng, wrt=None, rtol=2e-3, atol=2e-4):
    """The library's gradients of sum(lib_fn(*ts) * r) for the inputs in wrt (default all)."""
    wrt = range(len(xs)) if wrt is None else wrt
    out_shape = np.shape(np_fn(*xs))
    r = nonzero(rng, out_shape) if out_shape else 1.0
    ts = [wgml.tensor(x, requires_grad=i in wrt) if isinstance(x, np.ndarray) and x.dtype == np.float64
          else x for i, x in enumerate(xs)]
    loss = wgml.sum(lib_fn(*ts) * wgml.tensor(np.asarray(r)).reshape(out_shape))
    loss.backward()
    grads = [ts[i].grad for i in wrt]
    wgml.eval(*grads)
    for i, g in zip(wrt, grads):
        want = fd_grad(lambda v: float(np.sum(np_fn(*v) * r)), [np.array(x) for x in xs], i)
        scale = np.abs(want).max() + 1e-12
        np.testing.assert_allclose(g.numpy(), want, rtol=rtol, atol=atol * scale,
                                   err_msg="gradient of input %d" % i)


def test_unary_grad(rng):
    # the unary functions Python makes from the op table (wgml_op_get_info): one of them
    ref, positive, _, _ = UNARY["tanh"]
    check_grad(wgml.tanh, ref, [nonzero(rng, (3, 5), positive=positive)], rng)


@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 1, 4), (3, 4)), ((7,), (1,))])
def test_binary_grad(sa, sb, rng):
    # a binary function of the table, its operands broadcast by Python's shapes
    check_grad(wgml.mul, np.multiply, [nonzero(rng, sa), nonzero(rng, sb)], rng)


def test_scalar_forms_grad(rng):
    x = nonzero(rng, (4, 3), positive=True)
    check_grad(lambda t: (2.5 / t + t * 1.5 - 0.25) ** 3 + 2 ** t, lambda v: (2.5 / v + v * 1.5 - 0.25) ** 3 + 2 ** v,
               [x], rng)


def test_detach_stops_the_gradient(rng):
    # d/dx sum(x * detach(x)) is x, not 2x; the detached value is x's
    xv = nonzero(rng, (7, 5))
    x = wgml.tensor(xv, requires_grad=True)
    d = x.detach()
    loss = (x * d).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), xv, rtol=1e-6)
    np.testing.assert_array_equal(wgml.detach(wgml.tensor(xv)).numpy(), xv.astype(np.float32))


@pytest.mark.parametrize("case", ["sum1", "min_all", "mean_keep", "max_tuple", "var1", "std0", "var_all"])
def test_reduction_grad(case, rng):
    x = nonzero(rng, (3, 4, 5))
    fns = {
        "sum1": (lambda t: wgml.sum(t, 1), lambda v: v.sum(1)),
        "min_all": (lambda t: wgml.min(t), lambda v: v.min()),
        "mean_keep": (lambda t: wgml.mean(t, 2, keepdims=True), lambda v: v.mean(2, keepdims=True)),
        "max_tuple": (lambda t: wgml.max(t, (0, 2)), lambda v: v.max((0, 2))),
        "var1": (lambda t: wgml.var(t, 1, correction=1), lambda v: v.var(1, ddof=1)),
        "std0": (lambda t: wgml.std(t, 0), lambda v: v.std(0)),
        "var_all": (lambda t: wgml.var(t), lambda v: v.var()),
    }
    lib_fn, np_fn = fns[case]
    check_grad(lib_fn, lambda v: np.asarray(np_fn(v)), [x], rng)


def test_softmax_grads(rng):
    x = nonzero(rng, (3, 6))
    check_grad(wgml.softmax, np_softmax, [x], rng)
    check_grad(lambda t: wgml.softmax(t, axis=0), lambda v: np_softmax(v, 0), [x], rng)


def test_norm_grads(rng):
    x, w, b = nonzero(rng, (4, 6)), nonzero(rng, (6,)), nonzero(rng, (6,))  # every argument
    check_grad(lambda t, u, c: wgml.layernorm(t, u, c), np_layernorm, [x, w, b], rng)


def test_cumsum_and_rope_grads(rng):
    x = nonzero(rng, (3, 5))
    check_grad(lambda t: wgml.cumsum(t, 0, reverse=True), lambda v: np.flip(np.cumsum(np.flip(v, 0), 0), 0), [x], rng)
    y = nonzero(rng, (2, 3, 4))
    check_grad(lambda t: wgml.rope(t, pos_offset=2), lambda v: np_rope(v, 2), [y], rng)


def test_matmul_grads(rng):
    a, b, bias = nonzero(rng, (3, 4)), nonzero(rng, (4, 5)), nonzero(rng, (5,))
    check_grad(lambda p, q: p @ q, lambda p, q: p @ q, [a, b], rng)
    gelu = UNARY["gelu"][0]
    check_grad(lambda p, q, c: wgml.matmul(p, q, alpha=0.5, bias=c, activation="gelu"),
               lambda p, q, c: gelu(0.5 * (p @ q) + c), [a, b, bias], rng)
    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    check_grad(lambda p, q: wgml.matmul(p, q, trans_a=True, trans_b=True), lambda p, q: p.T @ q.T, [at, bt], rng)


def test_attention_grad(rng):
    q, k, v = nonzero(rng, (1, 2, 3, 4)), nonzero(rng, (1, 1, 4, 4)), nonzero(rng, (1, 1, 4, 4))
    check_grad(lambda a, b, c: wgml.attention(a, b, c, causal=True),
               lambda a, b, c: np_attention(a, b, c, causal=True), [q, k, v], rng)


def test_loss_grads(rng):
    logits = nonzero(rng, (4, 5))
    labels = np.array([0, 4, 2, 2], dtype=np.int32)

    def np_ce(z):
        s = z - z.max(-1, keepdims=True)
        s = s - np.log(np.exp(s).sum(-1, keepdims=True))
        return np.asarray(-s[np.arange(4), labels].mean())
    check_grad(lambda z: wgml.cross_entropy(z, labels), np_ce, [logits], rng)
    p, t = nonzero(rng, (4, 5)), nonzero(rng, (5,))
    check_grad(wgml.mse, lambda a, b: np.asarray(((a - b) ** 2).mean()), [p, t], rng)


def test_view_grads(rng):
    x = nonzero(rng, (2, 3, 4))
    check_grad(lambda t: t.permute(2, 0, 1)[1:4:2, :, 1:].reshape(2, -1) * 3,
               lambda v: v.transpose(2, 0, 1)[1:4:2, :, 1:].reshape(2, -1) * 3, [x], rng)
    check_grad(lambda t: t[1, ..., None, 2], lambda v: v[1, ..., None, 2], [x], rng)
    y = nonzero(rng, (4,))
    check_grad(lambda t: wgml.broadcast_to(t, (3, 4)) * 1.0, lambda v: np.broadcast_to(v, (3, 4)) * 1.0, [y], rng)
    check_grad(lambda t, u: wgml.concat([t, u, t], 1), lambda v, w: np.concatenate([v, w, v], 1),
               [nonzero(rng, (2, 3)), nonzero(rng, (2, 2))], rng)
    check_grad(lambda t, u: wgml.stack([t, u], 1), lambda v, w: np.stack([v, w], 1),
               [nonzero(rng, (2, 3)), nonzero(rng, (2, 3))], rng)
    check_grad(lambda t: wgml.split(t, [1, 3], 1)[1] * 2.0, lambda v: v[:, 1:] * 2.0, [nonzero(rng, (2, 4))], rng)


def test_gather_grads(rng):
    table = nonzero(rng, (5, 3))
    ids = np.array([[0, 4, 4], [2, 0, 1]], dtype=np.int32)
    check_grad(lambda t: wgml.embedding(t, ids), lambda v: v[ids], [table], rng)
    idx = np.array([3, 1, 1], dtype=np.int32)

    def np_index_add(a, s):
        out = a.copy()
        np.add.at(out, (slice(None), idx), s)
        return out
    check_grad(lambda a, s: wgml.index_add(a, 1, idx, s), np_index_add,
               [nonzero(rng, (2, 4)), nonzero(rng, (2, 3))], rng)


def test_selection_grads(rng):
    a, b = nonzero(rng, (3, 4)), nonzero(rng, (4,))
    cond = (rng.uniform(size=(3, 4)) > 0.5).astype(np.float32)
    check_grad(lambda x, y: wgml.where(cond, x, y), lambda x, y: np.where(cond != 0, x, y), [a, b], rng)
    check_grad(lambda x: wgml.clamp(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), [a], rng)


# ---------------------------------------------------------------- autograd behaviour

def test_accumulation_and_zero_grad(rng):
    x = nonzero(rng, (5,))
    t = wgml.tensor(x, requires_grad=True)
    assert t.requires_grad and t.grad is None
    (t * 2).sum().backward()
    (t * t).sum().backward()  # adds to the first
    np.testing.assert_allclose(t.grad.numpy(), 2 + 2 * x, rtol=1e-6)
    g = t.grad
    t.zero_grad()
    assert t.grad is None
    np.testing.assert_allclose(g.numpy(), 2 + 2 * x, rtol=1e-6)  # a handle taken before stays valid
    (t * 3).sum().backward()
    t.grad = None
    assert t.grad is None
    with pytest.raises(ValueError):
        t.grad = wgml.tensor(x)


def test_backward_errors(rng):
    t = wgml.tensor(nonzero(rng, (3,)), requires_grad=True)
    with pytest.raises(wgml.ShapeError, match="one element"):
        (t * 2).backward()
    loss = (t * 2).sum()
    loss.item()  # reading first keeps the graph (test_pytorch.py checks the values)
    loss.backward()
    with pytest.raises(wgml.InvalidArgumentError, match="no trainable tensor"):
        wgml.tensor([1.0, 2.0]).sum().backward()
    with pytest.raises(wgml.InvalidArgumentError, match="leaf"):
        (t * 2).requires_grad = True
    t.requires_grad_(False)
    assert not t.requires_grad
