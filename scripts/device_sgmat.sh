#!/usr/bin/env bash
# The subgroup-matrix GEMM outside wgml on the GPU machine (device tool; carry .gl and DIR):
# bench/sgmat_gemm's timing sweep of KNOBS (its knob numbers; default: the policy's two
# configs) over SHAPES ("M N K ta tb" groups; default: the bench's own list), cuBLAS's f16 GEMM
# at the same shapes (bench/sgmat_torch_peer.py) in the same command, then `sgmat_gemm check`
# for CHECK_S seconds (0: none). SGMAT_F32=1 and the bench's other variables pass through.
# DIR holds scripts/build_sgmat_bench.sh's sgmat_gemm and libwebgpu_dawn.so and a copy of
# bench/sgmat_torch_peer.py. Usage: KNOBS=17,23 SHAPES="4096 4096 4096 0 0" device_sgmat.sh DIR
set -u
DIR=${1:?usage: device_sgmat.sh DIR}
. "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# shellcheck disable=SC2086
SGMAT_FIRST_SHAPE=1 SGMAT_KNOBS=${KNOBS:-17,23} timeout "${BENCH_S:-300}" "$DIR/sgmat_gemm" bench ${SHAPES:-} 2>&1 |
  grep -v "^  subgroup matrix"
# shellcheck disable=SC2086
timeout 60 python3 "$DIR/sgmat_torch_peer.py" ${SHAPES:-}
if [ "${CHECK_S:-60}" -gt 0 ]; then
  SGMAT_FIRST_SHAPE=1 SGMAT_KNOBS=${KNOBS:-17,23} timeout "${CHECK_S:-60}" "$DIR/sgmat_gemm" check 2>&1 | grep -E "FAIL|check:"
fi
