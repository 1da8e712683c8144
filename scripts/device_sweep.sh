#!/usr/bin/env bash
# GEMM tile sweep and read-back polling on the device (through the device tool; carry .gl
# .devlibs build): `wgml bench matmul` once per WGML_GEMM_TILE config ("tm,tn,bk,stages"),
# and the cached round trip with and without spinning before a blocking poll.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-}
W=build/wgml
for cfg in ${TILES:-default 8,8,8,1 8,8,16,2 8,8,16,1 8,8,4,2 4,8,16,2}; do
  echo "== tile $cfg"
  if [ "$cfg" = default ]; then timeout 90 $W bench matmul 2>&1 | grep --line-buffered -v "^wgml"
  else WGML_GEMM_TILE=$cfg timeout 60 $W bench matmul 2>&1 | grep --line-buffered -E "gemm_(2048|4096|8192)|M128_K8192"; fi
done
echo "== blocking poll only"; WGML_POLL_SPIN_US=0 timeout 60 $W bench matmul 2>&1 | grep cached
for c in ${GEMV_COLS:-}; do
  echo "== gemv cols $c"; WGML_GEMV_COLS=$c timeout 60 $W bench matmul 2>&1 | grep --line-buffered -E "llm_M1_"
done
