#!/usr/bin/env bash
# Both WebGPU runtimes on the GPU machine, in one command (the device tool): wgml info on each,
# wgml bench (ops: add bandwidth, softmax, 100 unfused dispatches; matmul: f32 GEMM 4096^3 and
# the cached round trip; gpt: train step and generation) on wgpu-native then Dawn, then every
# GPU test on both. Expects BUNDLE, a tar.xz of bin/ (wgml, test_*) and lib/
# (libwgpu_native.so, libwebgpu_dawn.so and its .version), built on the CPU machine, and the
# carried .gl (Vulkan loader debs, shared/DEVICE.md). Logs and JSON go to $OUT. TESTS_ONLY=1: the
# tests alone; WGML_TEST_SEED: their random data's seed (12345, CTest's, unless set).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/tests"
for f in .gl/*.deb; do dpkg -x "$f" / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
D=/tmp/wgml_runtimes; mkdir -p "$D" && tar -xJf "${BUNDLE:?}" -C "$D"
export LD_LIBRARY_PATH=$D/lib WGML_BENCH_WARMUP=${WGML_BENCH_WARMUP:-1}
W=$D/bin/wgml
[ -n "${TESTS_ONLY:-}" ] || for rt in dawn wgpu-native; do $W info --runtime $rt > "$OUT/info_$rt.txt" 2>&1; done
[ -n "${TESTS_ONLY:-}" ] || $W info --json > "$OUT/info_auto.json" 2> "$OUT/info_auto.log"
for rt in wgpu-native dawn; do
  [ -z "${TESTS_ONLY:-}" ] || break
  t0=$(date +%s)
  timeout 60 $W bench ops --runtime $rt --json > "$OUT/bench_ops_$rt.json" 2> "$OUT/bench_ops_$rt.log"
  WGML_BENCH_ONLY="gemm_4096^3,cached_roundtrip" timeout 60 $W bench matmul --runtime $rt --json \
    > "$OUT/bench_matmul_$rt.json" 2> "$OUT/bench_matmul_$rt.log"
  timeout 60 $W bench gpt --runtime $rt --json > "$OUT/bench_gpt_$rt.json" 2> "$OUT/bench_gpt_$rt.log"
  echo "bench on $rt: $(( $(date +%s) - t0 )) s"
done
# every GPU test on both runtimes, four at a time (the GPU is shared; these are not timings);
# each test's bound (TEST_TIMEOUT) 300 s: test_matmul alone took 120 s (wgpu-native) and 140 s
# (Dawn) on an H200 machine, past the 90 s this had (docs/MEASUREMENTS.md, thirty-eighth session)
t0=$(date +%s)
for t in "$D"/bin/test_*; do for rt in wgpu-native dawn; do echo "$t $rt"; done; done |
  timeout ${TESTS_TIMEOUT:-500} xargs -P 4 -L 1 sh -c 'WGML_TEST_SEED=${WGML_TEST_SEED:-12345} WGML_RUNTIME=$1 timeout ${TEST_TIMEOUT:-300} "$0" > "'"$OUT"'/tests/$(basename "$0")_$1.log" 2>&1; echo "$? $(basename "$0") $1" >> "'"$OUT"'/tests/results.txt"'
echo "tests: $(( $(date +%s) - t0 )) s, $(wc -l < "$OUT/tests/results.txt") runs; failed (status, test, runtime):"
sort -k2 "$OUT/tests/results.txt" | grep -v "^0 " || echo "none"
