"""PyTorch habits (issue 34) and the axis / dtype traps of issue 27: each is either supported
with PyTorch's meaning or refused with a clear error, never silently different. References
are NumPy in float64 on random data."""
import math
import re
import warnings

import numpy as np
import pytest

import wgml
from conftest import close, nonzero


# ---------------------------------------------------------------- reading before backward

def _mlp_grads(x, w1, w2, read):
    """Gradients of mean(tanh(x w1) w2)^2 with wgml, the loss (or the hidden layer) read
    before backward() when `read` says so."""
    tw1, tw2 = wgml.tensor(w1, requires_grad=True), wgml.tensor(w2, requires_grad=True)
    h = (wgml.tensor(x) @ tw1).tanh()
    if read == "hidden":
        h.numpy()
    loss = ((h @ tw2) ** 2).mean()
    value = loss.item() if read == "loss" else None
    loss.backward()
    return value, tw1.grad.numpy(), tw2.grad.numpy(), loss.item()


@pytest.mark.parametrize("read", ["loss", "hidden"])
def test_reading_before_backward_keeps_the_graph(read, rng):
    x, w1, w2 = nonzero(rng, (9, 5)), nonzero(rng, (5, 7)), nonzero(rng, (7, 3))
    h = np.tanh(x @ w1)
    out = h @ w2
    want_loss = (out ** 2).mean()
    d_out = 2 * out / out.size
    want_w2 = h.T @ d_out
    want_w1 = x.T @ ((d_out @ w2.T) * (1 - h ** 2))
    value, g1, g2, after = _mlp_grads(x, w1, w2, read)
    close(g1, want_w1, 1e-4, 1e-6)
    close(g2, want_w2, 1e-4, 1e-6)
    close(after, want_loss, 1e-5)
    if value is not None:
        assert value == after  # the value read first is the value


def test_training_loop_that_prints_its_loss(rng):
    # the usual loop: print(loss.item()), then backward, then step; the same run as reading after
    x, y = nonzero(rng, (16, 4)), nonzero(rng, (16, 1))
    w0 = nonzero(rng, (4, 1))
    runs = []
    for read_first in (True, False):
        w = wgml.tensor(w0)
        opt = wgml.optim.SGD([w], lr=0.05)
        losses = []
        for _ in range(4):
            loss = wgml.mse(wgml.tensor(x) @ w, y)
            if read_first:
                losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            opt.step()
            if not read_first:
                losses.append(loss.item())
        runs.append((losses, w.numpy()))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][0][-1] < runs[0][0][0]


# ---------------------------------------------------------------- constructors

def test_torch_style_constructors():
    assert wgml.randn(3, 4).shape == (3, 4)
    assert wgml.randn((3, 4)).shape == (3, 4)
    assert wgml.rand(2, 3, 5).shape == (2, 3, 5)
    assert wgml.zeros(3, 4).shape == (3, 4) and not wgml.zeros(3, 4).numpy().any()
    np.testing.assert_array_equal(wgml.ones(2, 3).numpy(), np.ones((2, 3)))
    assert wgml.zeros(2, 2, dtype="i32").dtype == np.int32
    g = wgml.randn(257, 129).numpy()
    assert abs(g.mean()) < 0.02 and abs(g.std() - 1) < 0.02  # not mean 4 / shape (257,) as before
    for t in (wgml.randn(3, 4, requires_grad=True), wgml.zeros(5, requires_grad=True),
              wgml.ones(2, 2, requires_grad=True), wgml.rand(3, requires_grad=True),
              wgml.full((2, 3), 0.5, requires_grad=True), wgml.kaiming_uniform((4, 3), requires_grad=True),
              wgml.tensor([1.0, 2.0], requires_grad=True)):
        assert t.requires_grad
        (t * t).sum().backward()
        close(t.grad.numpy(), 2 * t.numpy())
    # the older forms still mean what they meant
    u = wgml.rand((4001,), -2.0, 3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and u.max() > 2.5


def test_requires_grad_needs_float32():
    with pytest.raises(wgml.DTypeError, match="float32"):
        wgml.tensor([1, 2, 3], requires_grad=True)
    with pytest.raises(wgml.DTypeError):
        wgml.arange(4).requires_grad = True


# ---------------------------------------------------------------- dim= / keepdim=

def test_dim_and_keepdim(rng):
    x = nonzero(rng, (3, 5, 7))
    t = wgml.tensor(x)
    close(t.sum(dim=1).numpy(), x.sum(axis=1))
    close(wgml.mean(t, dim=(0, 2), keepdim=True).numpy(), x.mean(axis=(0, 2), keepdims=True))
    close(t.max(axis=-1, keepdims=True).numpy(), x.max(axis=-1, keepdims=True))
    values, indices = t.max(dim=-1, keepdim=True)  # PyTorch's pair
    close(values.numpy(), x.max(axis=-1, keepdims=True))
    np.testing.assert_array_equal(indices.numpy(), x.argmax(axis=-1)[..., None])
    r = wgml.min(t, dim=1)
    close(r.values.numpy(), x.min(axis=1))
    np.testing.assert_array_equal(r.indices.numpy(), x.argmin(axis=1))
    np.testing.assert_array_equal(t.argmax(dim=1).numpy(), x.argmax(axis=1))
    close(t.var(dim=2, unbiased=True).numpy(), x.var(axis=2, ddof=1), 1e-4)
    e = np.exp(x - x.max(axis=0, keepdims=True))
    close(t.softmax(dim=0).numpy(), e / e.sum(axis=0, keepdims=True), 1e-5)
    close(wgml.cat([t, t], dim=2).numpy(), np.concatenate([x, x], axis=2))
    close(wgml.stack([t, t], dim=1).numpy(), np.stack([x, x], axis=1))
    close(t[:, :1].squeeze(dim=1).numpy(), x[:, 0])
    close(t.unsqueeze(dim=0).numpy(), x[None])
    with pytest.raises(TypeError, match="not both"):
        t.sum(axis=0, dim=0)


# ---------------------------------------------------------------- axes as NumPy (issue 27 row 8)

def test_axis_out_of_range_is_numpys_error(rng):
    t = wgml.tensor(nonzero(rng, (3, 4)))
    for call in (lambda: t.softmax(2), lambda: t.log_softmax(-3), lambda: wgml.softmax(t, axis=5),
                 lambda: t.sum(axis=-3), lambda: t.mean(axis=-3), lambda: t.max(axis=-3),
                 lambda: t.min(axis=-3), lambda: t.sum(axis=2), lambda: t.argmax(axis=2),
                 lambda: t.cumsum(2), lambda: t.var(axis=-3)):
        with pytest.raises(IndexError, match="axis -?[0-9]+ is out of bounds for a tensor of dimension 2") as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, wgml.AxisError)
        assert isinstance(e.value, np.exceptions.AxisError if hasattr(np, "exceptions") else np.AxisError)
    with pytest.raises(ValueError, match="duplicate"):
        t.sum(axis=(0, 0))
    with pytest.raises(ValueError, match="duplicate"):
        t.sum(axis=(1, -1))
    # in range, negative axes still work
    x = t.numpy().astype(np.float64)
    close(t.sum(axis=-2).numpy(), x.sum(axis=0))


# ---------------------------------------------------------------- in place

def test_inplace_on_a_trainable_tensor_is_refused_outside_no_grad(rng):
    w0 = nonzero(rng, (4, 3))
    w = wgml.tensor(w0, requires_grad=True)
    for op in ("+=", "-=", "*=", "/="):
        with pytest.raises(RuntimeError, match="no_grad"):
            exec("w %s 2.0" % op, {"w": w})
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 1.0
    np.testing.assert_array_equal(w.numpy(), w0.astype(np.float32))  # untouched


def test_manual_sgd_in_no_grad_updates_in_place(rng):
    x0, w0 = nonzero(rng, (6, 4)), nonzero(rng, (4, 1))
    w = wgml.tensor(w0, requires_grad=True)
    same = w
    loss = ((wgml.tensor(x0) @ w) ** 2).sum()
    loss.backward()
    grad = 2 * x0.T @ (x0 @ w0)
    with wgml.no_grad():
        w -= 0.01 * w.grad
    assert w is same and w.requires_grad  # the same trainable tensor, not a new one
    close(w.numpy(), w0 - 0.01 * grad, 1e-5)
    w.grad = None
    ((wgml.tensor(x0) @ w) ** 2).sum().backward()  # still trainable after the update
    assert w.grad is not None


def test_inplace_on_plain_tensors_changes_every_reference(rng):
    x0 = nonzero(rng, (5,))
    a = wgml.tensor(x0)
    b = a
    a += 1.0
    a *= wgml.tensor(x0)
    close(b.numpy(), (x0 + 1) * x0)
    i = wgml.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="i32|dtype"):
        i += wgml.tensor([0.5, 0.5, 0.5])  # an int32 tensor takes no float arithmetic, in place or not
    with pytest.raises(ValueError, match="shape"):
        a += wgml.tensor(nonzero(rng, (3, 5)))  # would need a bigger tensor
    a.zero_()
    assert not a.numpy().any()
    a.fill_(2.5)
    assert (b.numpy() == 2.5).all()


def test_setitem_writes_slices(rng):
    x = nonzero(rng, (4, 6))
    t = wgml.tensor(x)
    want = x.copy()
    for key, value in ((np.s_[1:3], 7.0), (np.s_[:, 0], np.arange(4.0)), (np.s_[0, 2:5], [1.0, 2.0, 3.0]),
                       (np.s_[...], want * 0 + 1.5), (np.s_[-1], wgml.tensor(np.arange(6.0)))):
        t[key] = value
        want[key] = np.asarray(value) if not isinstance(value, wgml.Tensor) else value.numpy()
        close(t.numpy(), want)
    with pytest.raises(ValueError):
        t[0] = np.ones(5)  # does not fit


# ---------------------------------------------------------------- no_grad

def test_no_grad_results_carry_no_gradient(rng):
    w0 = nonzero(rng, (5,))
    w = wgml.tensor(w0, requires_grad=True)
    assert wgml.is_grad_enabled()
    with wgml.no_grad():
        assert not wgml.is_grad_enabled()
        y = w * 3.0
        with wgml.enable_grad():
            assert wgml.is_grad_enabled()
    assert wgml.is_grad_enabled()
    (y * w).sum().backward()
    close(w.grad.numpy(), 3 * w0)  # y counts as a constant: 3w, not 6w

    @wgml.no_grad()
    def frozen(v):
        return v * v
    w.grad = None
    with pytest.raises(wgml.InvalidArgumentError, match="no trainable"):
        frozen(w).sum().backward()


# ---------------------------------------------------------------- integers

def test_integer_tensors_hold_indices_and_refuse_arithmetic():
    i = wgml.tensor([1, 2, 3])
    assert i.dtype == np.int32  # indices and labels; PyTorch's would be int64
    for call in (lambda: i + 1, lambda: i * i, lambda: i.sum(), lambda: -i):
        with pytest.raises(wgml.DTypeError, match=r"t\.float\(\)"):
            call()
    np.testing.assert_array_equal((i.float() + 1).numpy(), [2.0, 3.0, 4.0])
    assert i.long().dtype == np.int32 and wgml.tensor([1.0, 2.0]).int().dtype == np.int32


def test_float_data_into_int32_must_be_integral():
    np.testing.assert_array_equal(wgml.tensor([3.0, -7.0], dtype="i32").numpy(), [3, -7])
    for bad in ([1.5], [np.nan], [-np.inf], [1.0, 2.5]):
        with pytest.raises(ValueError, match="integral"):
            wgml.tensor(bad, dtype="i32")
    with pytest.raises(ValueError, match="integral"):
        wgml.full((2,), 2.5, dtype="i32")
    t = wgml.tensor([1, 2])
    with pytest.raises(ValueError, match="integral"):
        t.write([0.5, 1.0])


# ---------------------------------------------------------------- optimiser state

@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_optimizer_state_dict_resumes_the_same_run(kind, rng):
    x, y = nonzero(rng, (12, 5)), nonzero(rng, (12, 2))
    w0 = nonzero(rng, (5, 2))

    def make(w):
        if kind == "adamw":
            opt = wgml.optim.AdamW([w], lr=0.05, weight_decay=0.01)
            opt.set_schedule(warmup_steps=2, total_steps=10, min_lr_ratio=0.1)
        else:
            opt = wgml.optim.SGD([w], lr=0.05, momentum=0.9)
        return opt

    def steps(w, opt, n):
        for _ in range(n):
            wgml.mse(wgml.tensor(x) @ w, y).backward()
            opt.step()

    w = wgml.tensor(w0)
    opt = make(w)
    steps(w, opt, 6)
    straight = w.numpy()

    w = wgml.tensor(w0)
    opt = make(w)
    steps(w, opt, 3)
    sd = opt.state_dict()
    assert sd["step"] == 3 and set(sd["state"]) == {0}
    saved_w = w.numpy()
    w2 = wgml.tensor(saved_w)
    opt2 = make(w2)
    opt2.load_state_dict(sd)
    assert opt2.steps == 3 and opt2.lr == opt.lr
    for a, b in zip(opt2.state(0), opt.state(0)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    steps(w2, opt2, 3)
    np.testing.assert_array_equal(w2.numpy(), straight)

    other = wgml.optim.SGD([wgml.tensor(w0)]) if kind == "adamw" else wgml.optim.AdamW([wgml.tensor(w0)])
    with pytest.raises(ValueError, match="optimiser"):
        other.load_state_dict(sd)
    with pytest.raises(ValueError, match="shape"):
        make(wgml.tensor(w0.T.copy())).load_state_dict(sd)


# ---------------------------------------------------------------- files

def test_save_takes_tensors_then_path(tmp_path, rng):
    x = nonzero(rng, (3, 4))
    wgml.save({"x": wgml.tensor(x)}, tmp_path / "new.safetensors")
    got, _ = wgml.load(tmp_path / "new.safetensors", numpy=True)
    close(got["x"], x)
    with pytest.warns(DeprecationWarning, match="save\\(tensors, path\\)"):
        wgml.save(str(tmp_path / "old.safetensors"), {"x": x})
    got, _ = wgml.load(tmp_path / "old.safetensors", numpy=True)
    close(got["x"], x)
    with pytest.raises(TypeError):
        wgml.save([x], tmp_path / "bad.safetensors")
    wgml.save_file({"y": x}, tmp_path / "st.safetensors")  # safetensors' names
    got = wgml.load_file(tmp_path / "st.safetensors")
    assert list(got) == ["y"]
    close(got["y"].numpy(), x)


# ---------------------------------------------------------------- small conveniences

def test_repr_shows_values():
    t = wgml.tensor([[1.5, -2.0], [3.25, 4.0]], requires_grad=True)
    r = repr(t)
    assert "1.5" in r and "3.25" in r and "shape=(2, 2)" in r and "requires_grad=True" in r
    (t * t).sum().backward()  # printing did not get in the way
    big = repr(wgml.zeros(1000))
    assert "..." in big and len(big) < 200
    assert str(wgml.tensor(2.5)).startswith("wgml.tensor(2.5")


def test_numel_dim_size_clone_from_numpy(rng):
    x = nonzero(rng, (2, 3, 5))
    t = wgml.from_numpy(x)
    assert t.numel() == 30 and t.size == 30 and t.dim() == 3 and t.size() == (2, 3, 5) and t.size(-1) == 5
    c = t.clone()
    t += 1.0  # in place on the original: the clone keeps its values
    close(c.numpy(), x)
    close(t.numpy(), x + 1)
    w = wgml.tensor(x, requires_grad=True)
    (w.clone() * 2).sum().backward()  # gradients flow through a clone
    close(w.grad.numpy(), np.full(x.shape, 2.0))
    with pytest.raises(TypeError):
        wgml.from_numpy([1.0, 2.0])


def test_zero_dim_results(rng):
    x = nonzero(rng, (4, 3))
    t = wgml.tensor(x)
    for r in (t.sum(), t.mean(), t.max(), wgml.mse(t, t * 2), t[1, 2], t[0].sum(dim=0), t.argmax(),
              wgml.tensor(3.0), wgml.tensor(3.0) * 2 + 1, wgml.tensor(x[0]) @ wgml.tensor(x[1])):
        assert r.shape == () and r.ndim == 0 and r.numpy().shape == ()
    assert t.sum(dim=(0, 1)).shape == ()
    assert t.sum(keepdim=True).shape == (1, 1)
    assert float(t.sum()) == pytest.approx(x.sum(), rel=1e-5)
    with pytest.raises(TypeError):
        len(t.sum())
    assert (t.sum() + t[0]).shape == (3,)  # broadcasting with a 0-d tensor as NumPy


def test_gelu_is_exact_by_default(rng):
    x = nonzero(rng, (1023,), 0.01, 4.0)
    exact = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    t = wgml.tensor(x)
    close(wgml.gelu(t).numpy(), exact, 1e-5, 1e-6)
    close(t.gelu().numpy(), exact, 1e-5, 1e-6)
    close(wgml.gelu(t, approximate="tanh").numpy(), tanh_form, 1e-5, 1e-6)
    close(wgml.gelu_tanh(t).numpy(), tanh_form, 1e-5, 1e-6)
    w = nonzero(rng, (1023, 1))
    close(wgml.matmul(t.reshape(1, -1), wgml.tensor(w), activation="gelu").numpy(),
          0.5 * (x @ w) * (1 + np.vectorize(math.erf)((x @ w) / math.sqrt(2))).reshape(1, 1), 1e-4, 1e-5)
    with pytest.raises(ValueError):
        wgml.gelu(t, approximate="fast")


def test_version_comes_from_the_library():
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", wgml.__version__)
    assert wgml.__version__ == wgml.library_version()


def test_public_names_have_docstrings():
    missing = []
    for name in dir(wgml):
        if name.startswith("_"):
            continue
        obj = getattr(wgml, name)
        if callable(obj) and not isinstance(obj, np.dtype) and not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
    for cls in (wgml.Tensor, wgml.Context, wgml.optim.Optimizer, wgml.optim.AdamW, wgml.optim.SGD):
        for name in dir(cls):
            if not name.startswith("_") and not (getattr(cls, name).__doc__ or "").strip():
                missing.append("%s.%s" % (cls.__name__, name))
    assert not missing, "no docstring: %s" % ", ".join(missing)


def test_public_functions_have_type_hints():
    # the package's own functions and the Tensor and optimiser methods (Context's are the
    # thread-safety work's file, left to it)
    import inspect
    missing = []
    for prefix, owner in (("wgml.", wgml), ("Tensor.", wgml.Tensor), ("optim.", wgml.optim),
                          ("Optimizer.", wgml.optim.Optimizer)):
        for name in dir(owner):
            f = getattr(owner, name)
            if name.startswith("_") or isinstance(f, property) or not callable(f) or inspect.isclass(f) \
                    or getattr(f, "__module__", "").split(".")[0] != "wgml" or name in ("default_context",
                                                                                      "set_default_context"):
                continue
            sig = inspect.signature(f)
            bad = [p.name for p in sig.parameters.values() if p.name != "self" and p.annotation is inspect.Parameter.empty]
            if bad or sig.return_annotation is inspect.Signature.empty:
                missing.append("%s%s %s" % (prefix, name, bad or "return"))
    assert not missing, "no type hints: %s" % "; ".join(missing)


# ---------------------------------------------------------------- a user's review (2026-11-29)

def test_transpose_two_axes_swaps_on_2d(rng):
    a = rng.standard_normal((7, 7)).astype(np.float32)
    t = wgml.tensor(a)
    np.testing.assert_array_equal(t.transpose(0, 1).numpy(), a.T)  # PyTorch's: swapped, also when square
    np.testing.assert_array_equal(t.transpose(-2, -1).numpy(), a.T)
    np.testing.assert_array_equal(t.transpose((0, 1)).numpy(), a)  # NumPy's permutation
    np.testing.assert_array_equal(t.transpose((1, 0)).numpy(), a.T)
    b = rng.standard_normal((2, 3, 5)).astype(np.float32)
    np.testing.assert_array_equal(wgml.tensor(b).transpose(0, 2).numpy(), np.swapaxes(b, 0, 2))


def test_int32_writes_refuse_values_past_int32():
    y = wgml.tensor(np.arange(7))
    for write in (lambda: y.__setitem__(1, 2 ** 40), lambda: y.fill_(2 ** 40), lambda: y.copy_(np.full(7, -2 ** 33)),
                  lambda: y.write(np.full(7, 2 ** 31))):
        with pytest.raises(OverflowError, match="int32's range"):
            write()
    np.testing.assert_array_equal(y.numpy(), np.arange(7))  # nothing wrapped in
    y[2] = 2 ** 31 - 1
    assert int(y[2]) == 2 ** 31 - 1


def test_pending_results_can_be_made_trainable(rng):
    w = wgml.randn(3, 4).requires_grad_()
    z = wgml.randn(7) * 0.2
    z.requires_grad = True
    assert w.requires_grad and z.requires_grad
    (z * z).sum().backward()
    close(z.grad.numpy(), 2.0 * z.numpy().astype(np.float64))


def test_zero_d_stays_zero_d(rng):
    v = float(rng.uniform(0.5, 2))
    x = wgml.tensor(np.float32(v))
    for name, t in [("detach", x.detach()), ("int", x.int()), ("float", x.int().float()), ("to", x.to("i32")),
                    ("where", wgml.where(x, x, 1.0)), ("masked_fill", wgml.masked_fill(x, x * 0, 3.0)),
                    ("dropout", wgml.dropout(x, 0.0)), ("contiguous", x.contiguous())]:
        assert t.shape == (), name
    s = wgml.stack([x, x * 2])
    assert s.shape == (2,)
    close(s.numpy(), np.array([v, 2 * v]))
    r = wgml.zeros(())
    r += x.detach()
    assert abs(float(r) - v) <= 1e-6 * v


def test_arange_steps_and_format(rng):
    np.testing.assert_array_equal(wgml.arange(1, 70, 3).numpy(), np.arange(1, 70, 3))
    np.testing.assert_array_equal(wgml.arange(9, -5, -2, dtype="f32").numpy(), np.arange(9, -5, -2, dtype=np.float32))
    with pytest.raises(ValueError, match="step"):
        wgml.arange(0, 5, 0.5)
    v = float(rng.uniform(1, 2))
    loss = wgml.tensor(np.float32(v))
    assert f"{loss:.4f}" == f"{np.float32(v):.4f}"
    with pytest.raises(TypeError, match="one-element"):
        f"{wgml.ones(3):.2f}"


def test_indices_lists_arrays_and_refusals(rng):
    a = rng.standard_normal((7, 5)).astype(np.float32)
    t = wgml.tensor(a)
    np.testing.assert_array_equal(t[[0, 6, 2]].numpy(), a[[0, 6, 2]])
    np.testing.assert_array_equal(t[np.array([4, 1])].numpy(), a[[4, 1]])
    np.testing.assert_array_equal(t[..., 1:3].numpy(), a[..., 1:3])
    for key, match in (((wgml.arange(5), wgml.arange(5)), "advanced indexing"), ((slice(None), [1, 2]), "advanced indexing"),
                       (True, "boolean"), (np.array([True] * 7), "masks")):
        with pytest.raises(IndexError, match=match):
            t[key]
    with pytest.raises(wgml.DTypeError, match="is i32; parameters are f32"):
        wgml.optim.SGD([wgml.arange(4)], lr=0.1)


def test_cat_dtypes_and_reshape_sizes_named():
    with pytest.raises(wgml.DTypeError, match="tensor 1 is i32, tensor 0 f32"):
        wgml.cat([wgml.ones(3), wgml.arange(3)])
    with pytest.raises(wgml.ShapeError, match=r"6 elements into shape \(4, -1\)"):
        wgml.ones(6).reshape(4, -1)
    assert wgml.ones(6).reshape(3, -1).shape == (3, 2)


def test_zero_d_int_tensor_indexes_as_an_int(rng):
    a = rng.standard_normal((7, 3)).astype(np.float32)
    t = wgml.tensor(a)
    np.testing.assert_array_equal(t[wgml.tensor(np.int32(5))].numpy(), a[5])
    assert t[wgml.tensor(np.int32(5))].shape == (3,)
    assert t[wgml.tensor([5])].shape == (1, 3)  # a 1-D index keeps its axis
