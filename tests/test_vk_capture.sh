#!/usr/bin/env bash
# bench/vk_capture.c, the stand-in Vulkan loader of scripts/device_capture.sh: run under it,
# `wgml bench matmul` still works, and every kernel wgml compiles (one WGSL file each under
# WGML_DUMP_WGSL) arrives as one SPIR-V module that spirv-val accepts, with a compute entry
# point. Without the stand-in nothing is written (the folder stays empty).
# Usage: test_vk_capture.sh WGML_BINARY CAPTURE_DIR (the folder holding its libvulkan.so.1)
set -u
wgml=$1
shim=$2
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done, run_wgml
[ -f "$shim/libvulkan.so.1" ] || { echo "test_vk_capture: no $shim/libvulkan.so.1" >&2; exit 2; }
real=$(ldconfig -p | awk '/libvulkan\.so\.1 / {print $NF; exit}')
[ -n "$real" ] || { echo "test_vk_capture: no libvulkan.so.1 in ldconfig's cache" >&2; exit 2; }
mkdir -p "$work/cap/wgsl" "$work/none/wgsl"

# two shapes, two kernels at least (the M = 1 GEMV and the small-M one), fresh contexts
only="llm_M1_K1536_N1536,llm_M16_K1536_N1536"
if ! WGML_VK_CAPTURE=$work/cap WGML_VK_REAL=$real WGML_DUMP_WGSL=$work/cap/wgsl LD_LIBRARY_PATH="$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
     WGML_BENCH_ONLY=$only run_wgml bench matmul > "$work/cap.log" 2>&1; then
  fail "wgml bench matmul failed under the stand-in loader: $(tail -3 "$work/cap.log")"
fi
grep -q "llm_M16_K1536_N1536" "$work/cap.log" || fail "the bench printed no llm_M16 row under the stand-in: $(tail -3 "$work/cap.log")"
nwgsl=$(find "$work/cap/wgsl" -name '*.wgsl' | wc -l)
nspv=$(find "$work/cap" -maxdepth 1 -name 'shader_*.spv' | wc -l)
[ "$nwgsl" -ge 2 ] || fail "only $nwgsl kernels dumped as WGSL"
[ "$nspv" -eq "$nwgsl" ] || fail "$nspv SPIR-V modules captured for $nwgsl kernels compiled"
for f in "$work"/cap/shader_*.spv; do
  [ -f "$f" ] || continue
  if command -v spirv-val >/dev/null; then
    spirv-val --target-env vulkan1.3 "$f" 2> "$work/val.log" || fail "$(basename "$f") is not valid SPIR-V: $(head -2 "$work/val.log")"
  fi
  # the magic number, little-endian, and a compute entry point named main
  [ "$(od -An -tx4 -N4 "$f" | tr -d ' ')" = 07230203 ] || fail "$(basename "$f") does not start with SPIR-V's magic number"
  if command -v spirv-dis >/dev/null; then
    spirv-dis "$f" | grep -q 'OpEntryPoint GLCompute %[0-9a-z_]* "main"' || fail "$(basename "$f") has no compute entry point main"
  fi
done

# without the stand-in on the path, nothing is captured
WGML_VK_CAPTURE=$work/none WGML_DUMP_WGSL=$work/none/wgsl WGML_BENCH_ONLY=llm_M1_K1536_N1536 run_wgml bench matmul > /dev/null 2>&1 ||
  fail "wgml bench matmul failed without the stand-in"
[ "$(find "$work/none" -maxdepth 1 -name 'shader_*' | wc -l)" -eq 0 ] || fail "shaders captured without the stand-in loaded"
checks_done
