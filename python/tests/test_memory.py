"""No growth over many iterations: the library's own accounting (GPU buffers and bytes in
use), Python's allocations (tracemalloc) and the process' resident size."""
import ctypes
import gc
import tracemalloc

import numpy as np

import wgml

ITERS = 2000


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_in_use():
    """Bytes the C heap has handed out (glibc's mallinfo2): the library's structs included,
    which neither tracemalloc nor the resident size (freed chunks get reused) would show."""
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    f.restype = _Mallinfo2
    m = f()
    return m.uordblks + m.hblkhd


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def one_iteration(x, w, opt, i):
    """Host upload, ops, views, a read, an error, a backward, an optimiser step every 10th
    (every other one with the loss read before backward)."""
    t = wgml.tensor(x)
    y = (t @ w).relu().T[1:, ::2]
    if i % 10 == 0:
        loss = ((t @ w) ** 2).mean()
        if i % 20 == 0:
            loss.item()  # read before backward: the loss keeps its graph until it goes
        loss.backward()
        opt.step()
        loss.item()
    else:
        wgml.sum(y * 2.0 + 1.0).numpy()
    lazy = wgml.exp(t) - t  # built and dropped without evaluating
    del lazy
    try:
        t + wgml.tensor(np.ones(3))
    except wgml.ShapeError:
        pass


def test_no_growth(rng):
    ctx = wgml.Context()
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = wgml.tensor(rng.standard_normal((16, 6)), ctx=ctx)
    opt = wgml.optim.SGD([w], lr=1e-3)
    with ctx:
        for i in range(200):  # warm-up: kernels compiled, pool sized, caches filled
            one_iteration(x, w, opt, i)
        gc.collect()
        before = ctx.stats()
        rss0, heap0 = rss_bytes(), malloc_in_use()
        tracemalloc.start()
        snap0 = tracemalloc.take_snapshot()
        for i in range(ITERS):
            one_iteration(x, w, opt, i)
        gc.collect()
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
        after = ctx.stats()
        rss1, heap1 = rss_bytes(), malloc_in_use()
    assert after["evals"] - before["evals"] >= ITERS  # the loop did run on the device
    assert after["bytes_in_use"] == before["bytes_in_use"], (before, after)
    assert after["buffers_live"] == before["buffers_live"], (before, after)
    assert after["bytes_live"] == before["bytes_live"], (before, after)
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename") if s.size_diff > 0)
    assert grown < 64 * 1024, "Python allocations grew by %d bytes over %d iterations" % (grown, ITERS)
    # a leak of one small C struct (a tensor, an error message) per iteration passes
    # tracemalloc; the C heap shows it (2000 x a few hundred bytes is over 500 kB)
    if heap0 is not None:
        assert heap1 - heap0 < 200 * 1024, "the C heap grew by %d bytes" % (heap1 - heap0)
    assert rss1 - rss0 < 4 * 1024 * 1024, "resident size grew by %d bytes" % (rss1 - rss0)


def test_tensors_free_their_buffers():
    ctx = wgml.Context()
    base = ctx.stats()["bytes_in_use"]
    ts = [wgml.tensor(np.ones(65537), ctx=ctx) for _ in range(10)]
    assert ctx.stats()["bytes_in_use"] >= base + 10 * 65537 * 4
    views = [t[1:] for t in ts]
    del ts  # the views keep their buffers
    gc.collect()
    assert ctx.stats()["bytes_in_use"] >= base + 10 * 65536 * 4
    assert all(v.numpy()[0] == 1 for v in views)
    del views
    gc.collect()
    assert ctx.stats()["bytes_in_use"] == base
    ctx.close()


def test_release_cached_hands_back_free_buffers(rng):
    ctx = wgml.Context()
    a = rng.standard_normal(1023).astype(np.float32)
    kept = wgml.tensor(a, ctx=ctx)
    ts = [wgml.tensor(rng.standard_normal(65537), ctx=ctx) for _ in range(4)]
    del ts
    gc.collect()
    s0 = ctx.stats()
    assert s0["bytes_live"] >= s0["bytes_in_use"] + 4 * 65537 * 4  # freed into the pool
    released = ctx.release_cached()
    s1 = ctx.stats()
    assert released == s0["bytes_live"] - s0["bytes_in_use"]
    assert s1["bytes_live"] == s1["bytes_in_use"] == s0["bytes_in_use"]
    assert ctx.release_cached() == 0
    np.testing.assert_allclose((kept * 2.0).numpy(), a.astype(np.float64) * 2, rtol=1e-6)
    ctx.close()


def test_context_outlives_its_tensors():
    ctx = wgml.Context()
    t = wgml.tensor(np.arange(5.0), ctx=ctx)
    del ctx  # the tensor holds it
    gc.collect()
    assert t.numpy().tolist() == [0, 1, 2, 3, 4]
    assert not t.context.closed
