#!/usr/bin/env python3
"""The PyTorch (CUDA) peer of `wgml bench` and `wgml train`, measured in the same run.
Prints one JSON object. TF32 is off: f32 against f32."""
import json, sys, time
import torch

from torch_timing import reporter, timed

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
res = {}

report = reporter(res)

# --matmul: only the GEMM, GEMV and round-trip measurements (the matmul issue's runs)
matmul_only = "--matmul" in sys.argv
n = 1 << 26
a = torch.rand(n, device=dev); b = torch.rand(n, device=dev)
s = timed(lambda: a + b); report(f"add_{n}", s, 12 * n / s / 1e9, "GB/s"); add_s = s
def chain():
    x = a
    for i in range(100):
        x = [lambda x: x * 0.999, lambda x: x + 0.001, lambda x: x + b, torch.relu][i % 4](x)
    return x
if not matmul_only:
    s = timed(chain, reps=5, inner=1); report("chain100_unfused", s, s / add_s, "x add")
    x = torch.rand(4096, 8192, device=dev); w = torch.rand(8192, device=dev); bb = torch.rand(8192, device=dev)
    s = timed(lambda: torch.softmax(x, -1)); report("softmax_4096x8192", s, 8 * x.numel() / s / 1e9, "GB/s")
    s = timed(lambda: torch.nn.functional.layer_norm(x, (8192,), w, bb, 1e-5)); report("layernorm_4096x8192", s, 8 * x.numel() / s / 1e9, "GB/s")
    del x
del a, b
for sz in [512, 1024, 2048, 4096, 8192]:
    A = torch.rand(sz, sz, device=dev); B = torch.rand(sz, sz, device=dev)
    s = timed(lambda: A @ B, reps=9, inner=3 if sz >= 4096 else 8); report(f"gemm_{sz}^3", s, 2 * sz**3 / s / 1e12, "TFLOP/s")
# the transposed forms of a backward pass, at wgml bench's 4096 size
A = torch.rand(4096, 4096, device=dev); B = torch.rand(4096, 4096, device=dev)
s = timed(lambda: A.t() @ B, reps=9, inner=3); report("gemm_4096^3_At_B", s, 2 * 4096**3 / s / 1e12, "TFLOP/s")
s = timed(lambda: A @ B.t(), reps=9, inner=3); report("gemm_4096^3_A_Bt", s, 2 * 4096**3 / s / 1e12, "TFLOP/s")
for M in [1, 16, 128]:
    for K in [1536, 4096, 8192]:
        A = torch.rand(M, K, device=dev); B = torch.rand(K, K, device=dev)
        s = timed(lambda: A @ B, reps=11)
        if M == 1: report(f"llm_M1_K{K}_N{K}", s, 4 * K * K / s / 1e9, "GB/s (weight read)")
        else: report(f"llm_M{M}_K{K}_N{K}", s, 2 * M * K * K / s / 1e12, "TFLOP/s")
W = torch.rand(1536, 1536, device=dev); xh = torch.rand(1, 1536).pin_memory()
ts = []
for r in range(205):
    t0 = time.perf_counter(); y = (xh.to(dev, non_blocking=True) @ W).cpu(); ts.append(time.perf_counter() - t0)
ts = sorted(ts[5:]); report("cached_roundtrip_M1_1536", ts[len(ts)//2], ts[len(ts)//2] * 1e6, "us median")

# causal attention at the shapes of `wgml bench attention` (--attention): forward, then
# forward + backward, f32 scaled_dot_product_attention; and its peak memory above the inputs
if "--attention" in sys.argv or "--transformer" in sys.argv:
    F = torch.nn.functional
    for B, H, T, D in [(64, 6, 256, 64), (8, 12, 1024, 64)]:
        q, k, v, do = (torch.randn(B, H, T, D, device=dev, requires_grad=i < 3) for i in range(4))
        flops = 4 * B * H * T * T * D / 2
        with torch.no_grad():
            s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        report(f"attention_fwd_B{B}_H{H}_T{T}_D{D}", s, flops / s / 1e12, "TFLOP/s")
        def fwdbwd():
            q.grad = k.grad = v.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)
        fwdbwd(); torch.cuda.synchronize(); q.grad = k.grad = v.grad = None
        torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
        s = timed(fwdbwd)
        report(f"attention_fwdbwd_B{B}_H{H}_T{T}_D{D}", s, 3.5 * flops / s / 1e12, "TFLOP/s")
        report(f"attention_fwdbwd_T{T}_peak_extra", 0, (torch.cuda.max_memory_allocated() - base) / 2**20, "MiB above inputs")
        del q, k, v, do

# an embedding's gather and scatter-add (index_add_ into zeros, as `wgml bench gather`), the exact GELU
if "--gather" in sys.argv or "--transformer" in sys.argv:
    V, C, N = 32768, 768, 16384
    table = torch.rand(V, C, device=dev); ids = torch.randint(0, V, (N,), device=dev); src = torch.rand(N, C, device=dev)
    zeros = torch.zeros(V, C, device=dev)
    s = timed(lambda: table.index_select(0, ids)); report(f"gather_V{V}_C{C}_N{N}", s, 8 * N * C / s / 1e9, "GB/s")
    s = timed(lambda: zeros.clone().index_add_(0, ids, src)); report(f"scatter_V{V}_C{C}_N{N}", s, 4 * (N * C + 2 * V * C) / s / 1e9, "GB/s")
    x = torch.rand(1 << 26, device=dev)
    s = timed(lambda: torch.nn.functional.gelu(x)); report(f"gelu_exact_{1 << 26}", s, 8 * (1 << 26) / s / 1e9, "GB/s")
    del table, ids, src, zeros, x

# one epoch of the default MLP (784-256-128-10, batch 128, AdamW lr 1e-3, clipping 1.0),
# data already on the GPU, shuffled per epoch: the same work as `wgml train`
if "--train" in sys.argv:
    import gzip, numpy as np
    def idx(p):
        with gzip.open(p) as f: d = f.read()
        nd = d[3]; dims = [int.from_bytes(d[4+4*i:8+4*i], "big") for i in range(nd)]
        return np.frombuffer(d, np.uint8, offset=4 + 4 * nd).reshape(dims)
    root = sys.argv[sys.argv.index("--train") + 1]
    X = torch.tensor(idx(root + "/train-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0, dtype=torch.float32, device=dev)
    Y = torch.tensor(idx(root + "/train-labels-idx1-ubyte.gz").astype(np.int64), device=dev)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    def epoch():
        perm = torch.randperm(X.shape[0], device=dev)
        for s in range(X.shape[0] // 128):
            i = perm[s*128:(s+1)*128]
            loss = torch.nn.functional.cross_entropy(model(X[i]), Y[i])
            opt.zero_grad(set_to_none=True); loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
            loss.item()  # wgml reads the loss every step too
    epoch(); torch.cuda.synchronize()
    ts = []
    for _ in range(3):
        t0 = time.perf_counter(); epoch(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    report("mlp_epoch_b128", sorted(ts)[1], 60000 / sorted(ts)[1], "samples/s")
print(json.dumps({"device": torch.cuda.get_device_name(), "results": res}))
