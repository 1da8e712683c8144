#!/usr/bin/env bash
# Mixed precision on the GPU machine (issue 31), one command (the device tool): wgml bench gpt
# (f32 and mixed rows), the first 50 steps of the nanoGPT setup in f32 and in mixed precision
# from the same initial weights, and PyTorch on the same model and weights (f32, fp16 AMP with
# a GradScaler, bf16 AMP; and its fp16 AMP losses against wgml's mixed ones). Expects BUNDLE
# (a tar.xz of bin/wgml and lib/: libwgpu_native.so, libwebgpu_dawn.so*, libjansson.so.4),
# TEXT (a folder of the fortunes text) and the carried .gl. Logs and JSON go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
mkdir -p /usr/share/games && rm -rf /usr/share/games/fortunes && cp -r "${TEXT:?}" /usr/share/games/fortunes  # bench gpt's default text
export WGML_RUNTIME=${WGML_RUNTIME:-dawn}
W=$D/bin/wgml
$W info > "$OUT/info.txt" 2>&1
timeout 150 $W bench gpt --json > "$OUT/bench_gpt.json" 2> "$OUT/bench_gpt.log"; grep -v "^$" "$OUT/bench_gpt.log"
NANO=(--layers 6 --heads 6 --width 384 --block 256 --batch 64 --lr 1e-3 --warmup 10 --eval-every 50 --eval-batches 4)
for p in f32 mixed; do
  timeout 90 $W gpt train "${NANO[@]}" --steps 50 --precision $p --save-init --out /tmp/run_$p > /dev/null 2> "$OUT/train_$p.log"
  tail -n 1 "$OUT/train_$p.log"; cp /tmp/run_$p/metrics.csv "$OUT/metrics_$p.csv"
done
python3 - /tmp/run_f32/metrics.csv /tmp/run_mixed/metrics.csv <<'PY' | tee "$OUT/parity.txt"
import csv, sys
a, b = ([float(r["loss"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"first {len(a)} steps, mixed against f32: worst relative loss difference {worst:.3e}")
PY
timeout 150 python3 bench/torch_gpt.py --init /tmp/run_f32/init.safetensors --data /usr/share/games/fortunes --bench \
  --bench-amp fp16,bf16 --gen-tokens 8 --json "$OUT/torch_bench.json" > "$OUT/torch_bench.log" 2>&1; grep -E "train|torch" "$OUT/torch_bench.log"
timeout 90 python3 bench/torch_gpt.py --init /tmp/run_f32/init.safetensors --data /usr/share/games/fortunes --steps 50 \
  --amp fp16 --compare /tmp/run_mixed/metrics.csv --tol 1e-2 > "$OUT/torch_amp_parity.log" 2>&1; tail -n 3 "$OUT/torch_amp_parity.log"
