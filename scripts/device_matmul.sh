#!/usr/bin/env bash
# The matmul measurements of the performance issue on the GPU machine (device tool), in one
# command: wgml bench matmul and the PyTorch peer (bench/torch_peer.py --matmul), the cached
# round trip's timeline by step (WGML_TIMELINE) with and without spinning, the f16 cached
# weights under the small-M kernel's variants, and a sweep of GEMM tile configs.
# Usage: device_matmul.sh WGML_BINARY   (with .gl and .devlibs carried, as device_bench.sh)
set -u
W=${1:-build/wgml}
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== wgml bench matmul"; timeout 240 "$W" bench matmul --json > "$OUT/wgml_matmul.json" 2> "$OUT/wgml_matmul.log"; cat "$OUT/wgml_matmul.log"
echo "== torch"; timeout 200 python3 bench/torch_peer.py --matmul > "$OUT/torch_matmul.json" 2> "$OUT/torch.log"; cat "$OUT/torch.log"
if [ "${SWEEP:-1}" != 0 ]; then  # SWEEP=0: the bench and the peer only
  echo "== round trip timeline (spinning 10 ms, the default)"
  WGML_TIMELINE=1 WGML_BENCH_ONLY=cached_roundtrip "$W" bench matmul 2>&1 | tail -12
  echo "== round trip timeline, no spinning"
  WGML_POLL_SPIN_US=0 WGML_TIMELINE=1 WGML_BENCH_ONLY=cached_roundtrip "$W" bench matmul 2>&1 | tail -12
  echo "== f16 variants"
  for v in "" WGML_GEMV_ROWS=0 WGML_GEMV_COLS=16 WGML_GEMV_COLS=32; do
    echo "-- $v"; env $v WGML_BENCH_ONLY=cached_M "$W" bench matmul 2>&1 | grep cached_
  done
  echo "== GEMM tiles"
  for v in "" WGML_GEMM_WARP=8x4 WGML_GEMM_TILE=8,8,8,1 WGML_GEMM_TILE=8,8,16,2 WGML_GEMM_TILE=8,8,8,2 WGML_GEMM_TILE=8,8,16,3 \
           WGML_GEMM_TILE=8,8,16,4 WGML_GEMM_TILE=8,16,8,1 WGML_GEMM_TILE=16,8,8,1 WGML_GEMM_TILE=8,8,32,1; do
    echo "-- $v"; env $v WGML_BENCH_ONLY=gemm_2048^3,gemm_4096 "$W" bench matmul 2>&1 | grep gemm_
  done
fi
