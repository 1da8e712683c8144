#!/usr/bin/env bash
# GEMM tile sweep and read-back polling on the device (through the device tool; carry .gl
# .devlibs build): the square GEMMs of `wgml bench matmul` once per WGML_GEMM_TILE config
# ("tm,tn,bk,stages", see wgml_gemm_choose), and the cached round trip with and without
# spinning before a blocking poll.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-}
W=build/wgml
export WGML_BENCH_WARMUP=${WGML_BENCH_WARMUP:-1}
for cfg in ${TILES:-default 8,8,16,4 8,16,16,1 16,8,16,1 8,16,16,4 16,8,16,4 8,8,8,4 8,16,8,4}; do
  echo "== tile $cfg"
  if [ "$cfg" = default ]; then WGML_BENCH_ONLY=${ONLY:-gemm_2048,gemm_4096^3,gemm_8192} timeout 90 $W bench matmul 2>&1 | grep --line-buffered -v "^wgml"
  else WGML_BENCH_ONLY=${ONLY:-gemm_2048,gemm_4096^3,gemm_8192} WGML_GEMM_TILE=$cfg timeout 60 $W bench matmul 2>&1 | grep --line-buffered -v "^wgml"; fi
done
if [ -n "${POLL:-}" ]; then echo "== blocking poll only"; WGML_BENCH_ONLY=cached WGML_POLL_SPIN_US=0 timeout 60 $W bench matmul 2>&1 | grep cached; fi
for c in ${GEMV_COLS:-}; do
  echo "== gemv cols $c"; WGML_GEMV_COLS=$c WGML_BENCH_ONLY=llm_M1_ timeout 60 $W bench matmul 2>&1 | grep --line-buffered -E "llm_M1_"
done
