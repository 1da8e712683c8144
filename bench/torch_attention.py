"""PyTorch's scaled_dot_product_attention at the shapes of `wgml bench attention` (causal,
forward then forward + backward), in f16 and f32, timed as bench/torch_peer.py times: the peer
of wgml's f32 and mixed-precision (matrix-unit) attention. Run in the same command as the
bench, on the same GPU. --json: one JSON object of the results on stdout."""
import json, sys, time
import torch

dev = "cuda"
res = {}
F = torch.nn.functional


def timed(fn, reps=15, inner=8):
    t_end = time.perf_counter() + 2.0  # warm-up as in `wgml bench`: at least 2 s
    fn(); torch.cuda.synchronize()
    while time.perf_counter() < t_end: fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(inner): fn()
        torch.cuda.synchronize(); ts.append((time.perf_counter() - t0) / inner)
    return sorted(ts)[len(ts) // 2]


def report(name, s, value, unit):
    res[name] = {"ms": s * 1e3, "value": value, "unit": unit}
    print(f"  {name:44s} {s*1e3:10.3f} ms  {value:10.2f} {unit}", file=sys.stderr)


print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr)
for dtype, tag in [(torch.float16, "f16"), (torch.float32, "f32")]:
    for B, H, T, D in [(64, 6, 256, 64), (8, 12, 1024, 64)]:
        q, k, v, do = (torch.randn(B, H, T, D, device=dev, dtype=dtype, requires_grad=i < 3) for i in range(4))
        flops = 4 * B * H * T * T * D / 2
        with torch.no_grad():
            s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        report(f"torch_attention_fwd_B{B}_H{H}_T{T}_D{D}_{tag}", s, flops / s / 1e12, "TFLOP/s")

        def fwdbwd():
            q.grad = k.grad = v.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)
        s = timed(fwdbwd)
        report(f"torch_attention_fwdbwd_B{B}_H{H}_T{T}_D{D}_{tag}", s, 3.5 * flops / s / 1e12, "TFLOP/s")
        del q, k, v, do
if "--json" in sys.argv:
    print(json.dumps(res))
