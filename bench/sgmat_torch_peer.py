#!/usr/bin/env python3
"""cuBLAS's f16 GEMM (torch.matmul on halves, f32 accumulation as cuBLAS does by default) at
the shapes of bench/sgmat_gemm.c, in the same command as it, as its peer. Times as that
program does: the best of 5 runs of 10 back-to-back GEMMs. Usage: sgmat_torch_peer.py
[M N K ta tb]...  PEER_DTYPE=f32 times f32 GEMMs instead (cuBLAS SGEMM, TF32 off), tf32 with
TF32 on: the peers of sgmat_gemm's SGMAT_HILO=1 configs."""
import os
import sys
import torch

DTYPE = os.environ.get("PEER_DTYPE", "f16")

def shapes():
    a = [int(x) for x in sys.argv[1:]]
    if a:
        return [tuple(a[i:i + 5]) for i in range(0, len(a) - 4, 5)]
    return [(4096, 4096, 4096, 0, 0), (4096, 4096, 4096, 0, 1), (4096, 4096, 4096, 1, 0),
            (16384, 1152, 384, 0, 0), (16384, 1536, 384, 0, 0), (16384, 384, 1536, 0, 0),
            (16384, 384, 1152, 0, 1), (384, 1152, 16384, 1, 0)]

torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_tf32 = DTYPE == "tf32"
dt = torch.half if DTYPE == "f16" else torch.float32
for M, N, K, ta, tb in shapes():
    a = torch.rand((K, M) if ta else (M, K), device="cuda", dtype=dt) - 0.5
    b = torch.rand((N, K) if tb else (K, N), device="cuda", dtype=dt) - 0.5
    A = a.t() if ta else a
    B = b.t() if tb else b
    for _ in range(5):
        torch.matmul(A, B)
    torch.cuda.synchronize()
    best = None
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            torch.matmul(A, B)
        e.record()
        torch.cuda.synchronize()
        t = s.elapsed_time(e) / 10 / 1e3
        best = t if best is None or t < best else best
    print(f"TORCH {M}x{N}x{K} A{'^T' if ta else ''} B{'^T' if tb else ''}: {best * 1e3:.3f} ms "
          f"{2 * M * N * K / best / 1e12:.1f} TFLOP/s (cuBLAS {DTYPE}, torch {torch.__version__})", flush=True)
