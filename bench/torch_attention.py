"""PyTorch's scaled_dot_product_attention at the shapes of `wgml bench attention` (causal,
forward then forward + backward), in f16 and f32, timed as bench/torch_peer.py times (bench/torch_timing.py): the peer
of wgml's f32 and mixed-precision (matrix-unit) attention. Run in the same command as the
bench, on the same GPU. --json: one JSON object of the results on stdout."""
import json, sys
import torch

from torch_timing import reporter, timed

dev = "cuda"
res = {}
F = torch.nn.functional
report = reporter(res, 44)

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
