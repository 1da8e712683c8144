#!/usr/bin/env bash
# What the H100's driver makes of the matmul kernels (device tool; carry .gl, .devlibs and a
# folder holding a wgml binary and build/vk_capture/libvulkan.so.1, bench/vk_capture.c): for each
# variant of VARIANTS (';'-separated lists of VAR=value, empty = defaults), `wgml bench matmul`
# restricted to ONLY, with every kernel's SPIR-V and the driver's statistics for it
# (VK_KHR_pipeline_executable_properties: on NVIDIA registers per thread, shared memory,
# binary size) written to $OUT/capture<i>/; it prints registers and shared memory per kernel. Usage: ONLY=gemm_4096 VARIANTS="; WGML_GEMM_TILE=8,8,16,2" device_capture.sh DIR
set -u
D=${1:-build-bins/cap}
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries
OUT=${OUT:-/tmp/out}
IFS=';' read -ra variants <<< "${VARIANTS:-}"
[ ${#variants[@]} -gt 0 ] || variants=("")
i=0
for v in "${variants[@]}"; do
  c=$OUT/capture$i; mkdir -p "$c/wgsl"; i=$((i + 1))
  echo "== ${v:-(defaults)} -> $c"
  echo "${v:-(defaults)}" > "$c/variant"
  # shellcheck disable=SC2086
  env $v WGML_VK_CAPTURE="$c" WGML_DUMP_WGSL="$c/wgsl" WGML_VK_REAL=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
    LD_LIBRARY_PATH="$PWD/$D:$PWD/.devlibs" WGML_BENCH_ONLY="${ONLY:-gemm_4096}" timeout 150 "$D/wgml" bench matmul 2>&1 | grep -v "^wgml bench on"
  # one line per kernel, in creation order: registers per thread and shared memory, and the
  # WGSL file dumped just before it (the dumps in the order they were written)
  mapfile -t wgsl < <(ls -tr "$c/wgsl")
  n=0
  for s in "$c"/shader_*.txt; do
    [ -f "$s" ] && echo "   $(basename "$s" .txt): $(awk '/Register Count/ {r=$3} /Shared Memory Size/ {m=$4} END {print r " registers, " m " B shared"}' "$s")  ${wgsl[$n]:-}"
    n=$((n + 1))
  done
done
