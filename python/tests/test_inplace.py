"""A pending result keeps the value it had when built (wgml.h: "A lazy result means what it
meant when it was built"): a gradient handle or logits held over an optimiser step, and a
result held over Tensor.write, read the inputs as they were; float64 NumPy references."""
import numpy as np

import wgml
from conftest import close, nonzero


def test_gradient_handle_held_over_sgd_step(rng):
    p0 = nonzero(rng, (23,))
    c = nonzero(rng, (23,))
    p = wgml.tensor(p0, requires_grad=True)
    opt = wgml.optim.SGD([p], lr=0.25)
    loss = (p * p * wgml.tensor(c)).sum()  # d/dp = 2 p c: a recomputation would see the new p
    loss.backward()
    g = p.grad
    opt.step()
    close(g.numpy(), 2 * p0 * c)
    assert not np.allclose(p.numpy(), p0)  # the step did move p


def test_logits_held_over_adamw_step(rng):
    x = nonzero(rng, (9, 6))
    w0 = nonzero(rng, (6, 4))
    y = nonzero(rng, (9, 4))
    w = wgml.tensor(w0, requires_grad=True)
    opt = wgml.optim.AdamW([w], lr=0.1)
    logits = wgml.tensor(x) @ w
    wgml.mse(logits, wgml.tensor(y)).backward()
    opt.step()
    close(logits.numpy(), x @ w0)
    close((wgml.tensor(x) @ w).numpy(), x @ w.numpy().astype(np.float64))


def test_result_held_over_write(rng):
    x0 = nonzero(rng, (1023,))
    x1 = nonzero(rng, (1023,))
    x = wgml.tensor(x0)
    y = wgml.exp(x) * 2.0 + x
    x.write(x1)
    z = wgml.exp(x) * 2.0 + x
    close(y.numpy(), np.exp(x0) * 2 + x0)
    close(z.numpy(), np.exp(x1) * 2 + x1)
