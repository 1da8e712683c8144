#!/usr/bin/env bash
# Attention on the matrix units (issue 30) on the GPU machine, one command (the device tool):
# `wgml bench attention` (f32 and mixed rows, with the error rows), a sweep of the matrix
# kernels' steps, PyTorch's SDPA in f16 and f32 (bench/torch_attention.py) at the same shapes,
# then test_attention_mixed with the long cases (T = 256, 1023, 4100) and test_attention (f32)
# on Dawn. Expects BUNDLE (a tar.xz of
# bin/wgml, bin/test_attention*, and lib/: libwebgpu_dawn.so*, libwgpu_native.so,
# libjansson.so.4) and the carried .gl. Logs and JSON go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
export WGML_RUNTIME=${WGML_RUNTIME:-dawn}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
"$D/bin/wgml" info > "$OUT/info.txt" 2>&1; grep -iE "adapter|matrix|storage_size" "$OUT/info.txt"
timeout "${BENCH_S:-90}" "$D/bin/wgml" bench attention --json > "$OUT/bench.json" 2> "$OUT/bench.log"; echo "bench rc=$?"; grep -vE "XDG|Warning" "$OUT/bench.log"
# the matrix kernels' steps and subgroups per workgroup (WGML_ATTN_MATRIX=cols,F,K,Q[,S]), mixed rows only
for v in ${SWEEP:-cols,32,32,32 cols,64,32,64,2 cols,32,16,32,8}; do
  echo "-- WGML_ATTN_MATRIX=$v"; WGML_ATTN_MATRIX=$v WGML_BENCH_ATTN_MIXED_ONLY=1 timeout 60 "$D/bin/wgml" bench attention 2>&1 | grep -E "mixed|bench:"
done
timeout 90 python3 "${TORCH_PEER:-bench/torch_attention.py}" --json > "$OUT/torch.json" 2> "$OUT/torch.log"; echo "torch rc=$?"; cat "$OUT/torch.log"
WGML_TEST_ATTN_LONG=${LONG:-1} timeout "${TEST_S:-150}" "$D/bin/test_attention_mixed" > "$OUT/test_mixed.log" 2>&1
echo "test_attention_mixed rc=$?"; grep -vE "XDG|Warning" "$OUT/test_mixed.log"
if [ "${F32_TEST:-1}" != 0 ]; then
  timeout 90 "$D/bin/test_attention" > "$OUT/test_attention.log" 2>&1; echo "test_attention (f32, Dawn) rc=$?"
  grep -E "^(ok|FAIL)" "$OUT/test_attention.log"
fi
