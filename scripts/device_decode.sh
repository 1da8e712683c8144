#!/usr/bin/env bash
# The decode plan on the GPU machine (device tool): test_decode on both runtimes (greedy tokens
# of the plan = the graph path = the CPU reference, on the GPU), then `wgml bench decode` on
# wgpu-native and on Dawn, and the PyTorch eager peer (bench/torch_decode.py) in the same
# command. Expects .gl (the Vulkan loader debs) and BUNDLE, a tar.xz of bin/ (wgml,
# test_decode; optionally wgml_old, a build before), lib/ (libwgpu_native.so, libwebgpu_dawn.so,
# libjansson.so.4) and torch_decode.py, made on the CPU machine:
#   tar cJf B.tar.xz -C STAGE bin lib torch_decode.py
# Usage: [RUNTIMES="wgpu-native dawn"] [VARIANTS=...] device_decode.sh BUNDLE   (logs and JSON into $OUT)
set -u
BUNDLE=${1:?}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
export WGML_TEST_SEED=12345
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# both runtimes' tests at once (waited for by pid: a bare `wait` would wait for a process
# substitution of the caller's too)
pids=()
for rt in wgpu-native dawn; do
  WGML_RUNTIME=$rt timeout 120 "$D/bin/test_decode" > "$OUT/test_$rt.txt" 2>&1 & pids+=($!)
done
wait "${pids[@]}"
for rt in wgpu-native dawn; do echo "== test_decode on $rt"; grep -v "^Warning" "$OUT/test_$rt.txt" | tail -20; done
for rt in ${RUNTIMES:-wgpu-native dawn}; do
  echo "== wgml bench decode on $rt"
  WGML_RUNTIME=$rt timeout 240 "$D/bin/wgml" bench decode --json > "$OUT/bench_$rt.json" 2> "$OUT/bench_$rt.log"
  grep -v "^Warning" "$OUT/bench_$rt.log"
done
# A/B in the same command: bin/wgml_old's rows (a build before), if the bundle has one: the
# character GPT's batch-1 rows, or OLD_ONLY's (e.g. OLD_ONLY=qwen3_0.6b_decode_b1); then VARIANTS,
# rows with the plan's choices forced (WGML_DECODE_ATTN_CHUNK, _COMBINE_LAUNCH, _ATTN_LATE,
# _ATTN_WGS, _HEAD_LANES, ...: tools/bench_decode.c), e.g.
#   VARIANTS="WGML_BENCH_DECODE_ONLY=gpt_generate_plan_b1 WGML_DECODE_ATTN_COLS=4;WGML_BENCH_DECODE_ONLY=qwen3_0.6b_decode_b1 WGML_DECODE_SAMPLE_LOGITS=1"
if [ -x "$D/bin/wgml_old" ]; then
  echo "== the build before: ${OLD_ONLY:-gpt_generate_plan_b1}"
  WGML_RUNTIME=wgpu-native WGML_BENCH_DECODE_ONLY=${OLD_ONLY:-gpt_generate_plan_b1} timeout 90 "$D/bin/wgml_old" bench decode 2>&1 | grep -v "^Warning"
fi
IFS=';' read -ra variants <<< "${VARIANTS:-}"
for v in "${variants[@]}"; do
  echo "== forced: $v"; env WGML_RUNTIME=wgpu-native $v timeout 90 "$D/bin/wgml" bench decode 2>&1 | grep -v "^Warning"
done
echo "== PyTorch eager"; timeout 240 python3 "$D/torch_decode.py" 2>&1 | tee "$OUT/torch.json"
