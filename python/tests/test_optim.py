"""AdamW and SGD (the library's, on the GPU) against the same updates in float64 NumPy, with
clipping, weight decay, parameter groups and schedules."""
import math

import numpy as np
import pytest

import wgml
from conftest import close, nonzero


def problem(rng):
    x = rng.standard_normal((16, 5)).astype(np.float32).astype(np.float64)
    y = rng.standard_normal((16, 3)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((5, 3)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal((3,)).astype(np.float32).astype(np.float64)
    return x, y, w, b


def np_loss_grads(x, y, w, b):
    r = x @ w + b - y
    return (r ** 2).mean(), 2 * x.T @ r / r.size, 2 * r.sum(0) / r.size


def lib_loss(x, y, tw, tb):
    return wgml.mse(wgml.tensor(x) @ tw + tb, wgml.tensor(y))


def clip_scale(grads, max_norm):
    norm = math.sqrt(sum((g ** 2).sum() for g in grads))
    return norm, (min(1.0, max_norm / (norm + 1e-6)) if max_norm > 0 else 1.0)


@pytest.mark.parametrize("max_norm", [0.0, 0.05])
def test_adamw(max_norm, rng):
    x, y, w, b = problem(rng)
    tw, tb = wgml.tensor(w), wgml.tensor(b)
    lr, b1, b2, eps, wd = 0.01, 0.8, 0.95, 1e-6, 0.1
    opt = wgml.optim.AdamW([tw, tb], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, max_grad_norm=max_norm)
    assert tw.requires_grad and tb.requires_grad
    params, m, v = [w.copy(), b.copy()], [0 * w, 0 * b], [0 * w, 0 * b]
    for step in range(1, 4):
        loss = lib_loss(x, y, tw, tb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        want_loss, gw, gb = np_loss_grads(x, y, *params)
        norm, s = clip_scale([gw, gb], max_norm)
        for i, g in enumerate((gw * s, gb * s)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            params[i] = params[i] - lr * (m[i] / (1 - b1 ** step) / (np.sqrt(v[i] / (1 - b2 ** step)) + eps)
                                          + wd * params[i])
        # the loss the step evaluated (backward's loss goes along): the pre-update value
        np.testing.assert_allclose(loss.item(), want_loss, rtol=1e-5)
        np.testing.assert_allclose(opt.grad_norm, norm, rtol=1e-5)
        np.testing.assert_allclose(tw.numpy(), params[0], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(tb.numpy(), params[1], rtol=1e-4, atol=1e-6)
        assert tw.grad is None and opt.steps == step  # the step consumed the gradients
    mw, vw = opt.state(0)
    np.testing.assert_allclose(mw.numpy(), m[0], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(vw.numpy(), v[0], rtol=1e-4, atol=1e-9)


def test_sgd_momentum(rng):
    x, y, w, b = problem(rng)
    tw, tb = wgml.tensor(w), wgml.tensor(b)
    lr, mu, wd = 0.05, 0.9, 0.01
    opt = wgml.optim.SGD([tw, tb], lr=lr, momentum=mu, weight_decay=wd, max_grad_norm=0.5)
    params, bufs = [w.copy(), b.copy()], [0 * w, 0 * b]
    for _ in range(3):
        lib_loss(x, y, tw, tb).backward()
        opt.step()
        _, gw, gb = np_loss_grads(x, y, *params)
        _, s = clip_scale([gw, gb], 0.5)
        for i, g in enumerate((gw * s, gb * s)):
            bufs[i] = mu * bufs[i] + g + wd * params[i]
            params[i] = params[i] - lr * bufs[i]
    np.testing.assert_allclose(tw.numpy(), params[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tb.numpy(), params[1], rtol=1e-4, atol=1e-6)


def test_param_groups(rng):
    x, y, w, b = problem(rng)
    tw, tb = wgml.tensor(w), wgml.tensor(b)
    opt = wgml.optim.SGD([{"params": [tw], "weight_decay": 0.5}, {"params": [tb], "lr_scale": 0.25}], lr=0.1)
    assert [len(g["params"]) for g in opt.param_groups] == [1, 1]
    lib_loss(x, y, tw, tb).backward()
    opt.step()
    _, gw, gb = np_loss_grads(x, y, w, b)
    np.testing.assert_allclose(tw.numpy(), w - 0.1 * (gw + 0.5 * w), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tb.numpy(), b - 0.025 * gb, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="unknown keys"):
        wgml.optim.SGD([{"params": [wgml.tensor(w)], "lr": 0.1}])
    with pytest.raises(wgml.InvalidArgumentError, match="groups"):
        wgml.optim.SGD([{"params": [wgml.tensor(w)], "weight_decay": -1.0}])


def test_schedule_and_lr(rng):
    t = wgml.tensor(np.ones(4))
    opt = wgml.optim.AdamW([t], lr=1.0)
    assert opt.lr == 1.0
    opt.lr = 0.5
    opt.set_schedule(warmup_steps=2, total_steps=10, min_lr_ratio=0.1, decay="cosine")
    lrs = []
    for step in range(12):
        opt.steps = step
        lrs.append(opt.lr)
    want = []
    for step in range(12):
        if step < 2:
            want.append(0.5 * (step + 1) / 3)
        elif step <= 10:
            r = (step - 2) / 8
            want.append(0.05 + 0.45 * (1 + math.cos(math.pi * r)) / 2)
        else:
            want.append(0.05)
    np.testing.assert_allclose(lrs, want, rtol=1e-6)
    np.testing.assert_allclose([wgml.optim.lr_at(0.5, s, 2, 10, 0.1, "cosine") for s in range(12)], want, rtol=1e-6)
    assert math.isnan(wgml.optim.lr_at(-1.0, 0))
    opt.set_schedule(None)
    assert opt.lr == 0.5
    with pytest.raises(wgml.InvalidArgumentError):
        opt.set_schedule(warmup_steps=5, total_steps=3, decay="linear")
    with pytest.raises(ValueError):
        opt.set_schedule(decay="exp")


def test_optimizer_errors(rng):
    t = wgml.tensor(np.ones(3))
    with pytest.raises(wgml.InvalidArgumentError, match="lr"):
        wgml.optim.AdamW([t], lr=-1.0)
    with pytest.raises(wgml.InvalidArgumentError, match="beta"):
        wgml.optim.AdamW([t], betas=(0.9, 1.5))
    with pytest.raises(wgml.InvalidArgumentError, match="max_grad_norm"):
        wgml.optim.SGD([t], max_grad_norm=-1.0)
    with pytest.raises(ValueError):
        wgml.optim.SGD([])
    opt = wgml.optim.SGD([t], lr=0.1)
    with pytest.raises(wgml.InvalidArgumentError, match="gradient"):
        opt.step()
    with pytest.raises(wgml.InvalidArgumentError, match="no step"):
        opt.grad_norm
    with pytest.raises(wgml.InvalidArgumentError):
        opt.lr = float("nan")
    opt.close()
    with pytest.raises(wgml.ContextError):
        opt.step()
    opt.close()  # twice is harmless


def test_training_lowers_the_loss(rng):
    x, y, w, b = problem(rng)
    tw, tb = wgml.tensor(w), wgml.tensor(b)
    opt = wgml.optim.AdamW([tw, tb], lr=0.05)
    losses = []
    for _ in range(30):
        loss = lib_loss(x, y, tw, tb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_loss_scaling_skips_overflows_and_resumes(rng):
    """Steps whose loss is multiplied by 1e38 overflow: they leave the parameters alone and
    halve the scale; the others match unscaled AdamW; state_dict carries the scaler."""
    x, y, w, b = problem(rng)
    lr = 0.01
    tw, tb = wgml.tensor(w), wgml.tensor(b)
    opt = wgml.optim.AdamW([tw, tb], lr=lr)
    opt.set_loss_scaling(init_scale=256.0, growth_interval=2)
    params, m, v = [w.copy(), b.copy()], [0 * w, 0 * b], [0 * w, 0 * b]
    mults = [1.0, 1e38, 1.0, 1.0, 1e38]
    updates = 0
    for mult in mults:
        before = tw.numpy().copy()
        opt.scale_loss(lib_loss(x, y, tw, tb) * mult).backward()
        opt.step()
        if mult > 1:
            assert np.array_equal(tw.numpy(), before)
            continue
        updates += 1
        _, gw, gb = np_loss_grads(x, y, *params)
        for k, g in enumerate((gw, gb)):
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            params[k] -= lr * (m[k] / (1 - 0.9 ** updates) / (np.sqrt(v[k] / (1 - 0.999 ** updates)) + 1e-8))
        np.testing.assert_allclose(tw.numpy(), params[0], rtol=1e-4, atol=1e-5)
    st = opt.loss_scale_state
    # 256 -> 128 (skip) -> 256 (two good) -> 128 (skip)
    assert st == {"scale": 128.0, "good_steps": 0, "skipped_steps": 2, "last_skipped": True, "updates": 3}
    sd = opt.state_dict()
    assert sd["loss_scaling"]["state"] == st
    tw2, tb2 = wgml.tensor(tw.numpy()), wgml.tensor(tb.numpy())
    opt2 = wgml.optim.AdamW([tw2, tb2], lr=lr)
    opt2.load_state_dict(sd)
    assert opt2.loss_scale_state == st
    for o, (a, c) in ((opt, (tw, tb)), (opt2, (tw2, tb2))):
        o.scale_loss(lib_loss(x, y, a, c)).backward()
        o.step()
    assert np.array_equal(tw.numpy(), tw2.numpy())
    opt.set_loss_scaling(None)
    with pytest.raises(wgml.InvalidArgumentError):
        opt.loss_scale_state


def test_precision_policy():
    ctx = wgml.default_context()
    assert ctx.precision == "f32"
    if not wgml.info()["has_shader_f16"]:
        pytest.skip("no shader-f16")
    a = np.full((20, 40), 1.0 - 3 * 2.0 ** -13, np.float32)
    bm = np.full((40, 24), 1.0 + 3 * 2.0 ** -12, np.float32)
    try:
        ctx.precision = "mixed"
        mixed = (wgml.tensor(a) @ wgml.tensor(bm)).numpy()
    finally:
        ctx.precision = "f32"
    full = (wgml.tensor(a) @ wgml.tensor(bm)).numpy()
    assert mixed[0, 0] == 40.0  # f16 operands: each product rounds to 1
    assert abs(full[0, 0] - 40 * a[0, 0] * bm[0, 0]) < 1e-4
    with pytest.raises(ValueError):
        ctx.precision = "f16"


def test_groups_fixed_and_lr_scale_above_zero(rng):
    w = wgml.tensor(nonzero(rng, (7, 3)))
    b = wgml.tensor(nonzero(rng, (3,)))
    with pytest.raises(ValueError, match="lr_scale = 0.0 must be a finite number > 0"):
        wgml.optim.SGD([{"params": [w]}, {"params": [b], "lr_scale": 0.0}], lr=0.1)
    opt = wgml.optim.SGD([{"params": [w]}, {"params": [b], "lr_scale": 0.5}], lr=0.1)
    for key in ("lr", "lr_scale", "weight_decay"):
        with pytest.raises(TypeError, match="fixed when the optimiser is made"):
            opt.param_groups[1][key] = 0.01
    assert opt.param_groups[1]["lr_scale"] == 0.5 and "lr" not in opt.param_groups[1]


def test_a_parameter_moves_to_the_newest_optimizer(rng):
    x = nonzero(rng, (7,))
    w, b = wgml.tensor(x), wgml.tensor(nonzero(rng, (7,)))
    o1 = wgml.optim.SGD([w, b], lr=0.25)
    o2 = wgml.optim.SGD([w], lr=0.25)  # (a cell run again makes its optimiser again)
    (w * b).sum().backward()
    bx = b.numpy().astype(np.float64)
    with pytest.raises(wgml.InvalidArgumentError, match="taken by an optimizer made later"):
        o1.step()  # its update would no longer reach w
    np.testing.assert_array_equal(w.numpy(), x.astype(np.float32))
    o2.step()
    close(w.numpy(), x - 0.25 * bx)
    opt = wgml.optim.SGD([w], lr=0.25)
    opt = wgml.optim.SGD([w], lr=0.25)
    (w * 2.0).sum().backward()
    opt.step()
    close(w.numpy(), x - 0.25 * bx - 0.5)
