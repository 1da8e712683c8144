#!/usr/bin/env bash
# Sweeps of the matmul knobs on the GPU machine (device tool; carry .gl, .devlibs and the
# binaries): `wgml bench matmul` restricted to ONLY (WGML_BENCH_ONLY's list) once per variant
# of VARIANTS, variants separated by ';', each a list of VAR=value (empty: the defaults). With
# TESTS="bin ...", those test binaries run first on the GPU, under the first variant's
# settings too. Usage: ONLY=gemm_4096 VARIANTS="; WGML_GEMM_TILE=8,8,8,1" device_sweep.sh WGML_BINARY
set -u
W=${1:-build/wgml}
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries  # (EXTRA_DEBS: e.g. Open MPI's, for a build with MPI)
IFS=';' read -ra variants <<< "${VARIANTS:-}"
[ ${#variants[@]} -gt 0 ] || variants=("")
for t in ${TESTS:-}; do
  for v in "" "${variants[@]}"; do
    # shellcheck disable=SC2086
    echo "== test $t ${v:-(defaults)}: $(env $v timeout 120 "$t" 2>&1 | tail -1)"
  done
done
for v in "${variants[@]}"; do
  echo "== ${v:-(defaults)}"
  # shellcheck disable=SC2086
  env $v WGML_BENCH_ONLY="${ONLY:-gemm_}" timeout 150 "$W" bench matmul 2>&1 | grep -v "^wgml bench on"
done
