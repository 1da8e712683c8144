"""The timing the PyTorch peers share (bench/torch_peer.py, bench/torch_attention.py): a
function's median seconds after a warm-up as long as `wgml bench`'s, and the rows they print
and return as JSON."""
import sys, time
import torch


def timed(fn, reps=15, inner=8):
    """Median seconds of one call of fn over reps runs of `inner` calls, after at least 2 s of
    warm-up (as `wgml bench`)."""
    t_end = time.perf_counter() + 2.0
    fn(); torch.cuda.synchronize()
    while time.perf_counter() < t_end: fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(inner): fn()
        torch.cuda.synchronize(); ts.append((time.perf_counter() - t0) / inner)
    ts.sort()
    return ts[len(ts) // 2]


def reporter(res, width=34):
    """A report(name, seconds, value, unit) that stores the row in res and prints it."""
    def report(name, s, value, unit):
        res[name] = {"ms": s * 1e3, "value": value, "unit": unit}
        print(f"  {name:{width}s} {s*1e3:10.3f} ms  {value:10.2f} {unit}", file=sys.stderr)
    return report
