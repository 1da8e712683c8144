#!/usr/bin/env bash
# Bandwidth probe on the H100 (device tool; carry .gl .devlibs build): plain WGSL add
# variants outside the executor (build/ew_probe), PyTorch's add in the same run, and
# wgml bench ops. Arguments go to `wgml bench` (default: ops).
set -u
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit --format=csv
timeout 200 build/ew_probe
timeout 60 python3 - <<'PY'
import torch, time
n = 1 << 26
a = torch.rand(n, device="cuda"); b = torch.rand(n, device="cuda"); c = torch.empty_like(a)
for mode in ["single", "chain20"]:
    ts = []
    k = 1 if mode == "single" else 20
    for r in range(16):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(k): torch.add(a, b, out=c)
        torch.cuda.synchronize(); ts.append((time.perf_counter() - t0) / k)
    ts = sorted(ts[1:]); s = ts[len(ts) // 2]
    print(f"torch add {mode:8s} {s*1e6:9.1f} us {12*n/s/1e9:8.0f} GB/s")
PY
timeout 200 build/wgml bench ${1:-ops} 2>&1 | grep --line-buffered -v "^$"
