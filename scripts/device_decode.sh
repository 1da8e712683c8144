#!/usr/bin/env bash
# The decode plan on the GPU machine (device tool): test_decode on both runtimes (greedy tokens
# of the plan = the graph path = the CPU reference, on the GPU), then `wgml bench decode` on
# wgpu-native and on Dawn, and the PyTorch eager peer (bench/torch_decode.py) in the same
# command. Expects .gl (the Vulkan loader debs) and BUNDLE, a tar.xz of bin/ (wgml,
# test_decode), lib/ (libwgpu_native.so, libwebgpu_dawn.so, libjansson.so.4) and
# torch_decode.py, made on the CPU machine:
#   tar cJf B.tar.xz -C STAGE bin lib torch_decode.py
# Usage: [RUNTIMES="wgpu-native dawn"] device_decode.sh BUNDLE   (writes logs and JSON into $OUT)
set -u
BUNDLE=${1:?}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
export WGML_TEST_SEED=12345
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for rt in wgpu-native dawn; do
  echo "== test_decode on $rt"; WGML_RUNTIME=$rt timeout 120 "$D/bin/test_decode" 2>&1 | grep -v "^Warning" | tail -12
done
for rt in ${RUNTIMES:-wgpu-native dawn}; do
  echo "== wgml bench decode on $rt"
  WGML_RUNTIME=$rt timeout 240 "$D/bin/wgml" bench decode --json > "$OUT/bench_$rt.json" 2> "$OUT/bench_$rt.log"
  grep -v "^Warning" "$OUT/bench_$rt.log"
done
echo "== PyTorch eager"; timeout 240 python3 "$D/torch_decode.py" 2>&1 | tee "$OUT/torch.json"
