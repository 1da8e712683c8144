#!/usr/bin/env bash
# wgml's matmuls on a CPU adapter (lavapipe) against OpenBLAS's sgemm on the same cores, in one
# run: `wgml bench matmul` at the shapes below and bench/blas_peer.c at the same, then a table
# of both and their ratio. Usage: cpu_bench.sh [BUILD_DIR]   (SHAPES="name ..." to change them)
set -euo pipefail
BUILD=${1:-build}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
SHAPES=${SHAPES:-"gemm_512^3 gemm_1024^3 llm_M1_K1536_N1536 llm_M16_K1536_N1536 llm_M128_K1536_N1536 llm_M1_K4096_N4096 llm_M128_K4096_N4096"}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
WGML_BENCH_ONLY=$(echo $SHAPES | tr ' ' ',') "$BUILD/wgml" bench matmul --json > "$work/wgml.json"
# shellcheck disable=SC2086
"$BUILD/blas_peer" $SHAPES > "$work/blas.json"
python3 - "$work/wgml.json" "$work/blas.json" <<'PY'
import json, sys
w, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"wgml on {w['device']} against {b['device']}")
print(f"{'shape':28s} {'wgml':>12s} {'OpenBLAS':>12s} {'ratio':>7s}  unit")
for name, peer in b["results"].items():
    mine = w["results"].get(name, {}).get("value")
    ratio = f"{mine / peer['value']:.3f}" if mine else "-"
    print(f"{name:28s} {mine if mine is not None else float('nan'):12.4f} {peer['value']:12.4f} {ratio:>7s}  {peer['unit']}")
PY
