#!/usr/bin/env bash
# The H100 measurement run (through the device tool): wgml info, wgml bench and the PyTorch
# peer in the same command, an epoch of training against PyTorch's, and a cold and a warm
# start. Expects the carried folders .gl (Vulkan loader debs), .devlibs (libwgpu_native,
# libjansson, fmnist/ data) and build/ (binaries built on the CPU machine).
set -u
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=build/wgml
$W info | tee "$OUT/info.txt"; $W info --json > "$OUT/info.json"
# cold start (driver shader cache emptied), then warm
export __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache; rm -rf /tmp/nvcache ~/.nv; mkdir -p /tmp/nvcache
echo "cold start:"; $W bench startup 2>&1 | tail -2
echo "warm start:"; $W bench startup 2>&1 | tail -2
timeout 300 $W bench ${BENCH:-all} --json > "$OUT/wgml_bench.json" 2> "$OUT/wgml_bench.log"; cat "$OUT/wgml_bench.log"
timeout 120 $W train --epochs 10 --data .devlibs/fmnist --out /tmp/train > "$OUT/train.log" 2>&1; tr '\r' '\n' < "$OUT/train.log" | grep -E "test|training" 
timeout 200 python3 bench/torch_peer.py --train .devlibs/fmnist > "$OUT/torch.json" 2> "$OUT/torch.log"; cat "$OUT/torch.log"
