#!/usr/bin/env bash
# Issue 31's long check on the GPU machine (device tool), one command: 3000 steps of the nanoGPT
# setup (lr 1e-3, warm-up 100, cosine to 1e-4, dropout 0.2, weight decay 0.1, beta2 0.99) in
# wgml f32, wgml mixed precision and PyTorch fp16 AMP (with a GradScaler, its own dropout masks)
# from the same initial weights; prints the validation losses and their relative differences,
# and the first 50 steps of mixed against f32 (same weights, same dropout masks). Expects BUNDLE
# (a tar.xz of bin/wgml and lib/), TEXT (a folder of the fortunes text) and the carried .gl.
# STEPS (3000), EVAL (500), WARMUP (100) and MODEL (the model flags) change it. Logs and CSVs go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-3000} EVAL=${EVAL:-500}
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
export WGML_RUNTIME=${WGML_RUNTIME:-dawn}
W=$D/bin/wgml
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
read -ra MODEL <<< "${MODEL:---layers 6 --heads 6 --width 384 --block 256 --batch 64}"  # smaller for a smoke test
NANO=("${MODEL[@]}" --lr 1e-3 --warmup "${WARMUP:-100}" --min-lr-ratio 0.1
      --dropout 0.2 --weight-decay 0.1 --beta2 0.99 --steps "$STEPS" --eval-every "$EVAL" --eval-batches 16
      --data "${TEXT:?}" --seed 7)
for p in f32 mixed; do
  s=$(date +%s)
  timeout 280 $W gpt train "${NANO[@]}" --precision $p --save-init --out /tmp/run_$p > /dev/null 2> "$OUT/train_$p.log"
  echo "wgml $p: exit $? in $(( $(date +%s) - s )) s; $(tail -n 1 "$OUT/train_$p.log")"
  cp /tmp/run_$p/metrics.csv "$OUT/metrics_$p.csv"
done
s=$(date +%s)
timeout 200 python3 bench/torch_gpt.py --init /tmp/run_f32/init.safetensors --data "$TEXT" --steps "$STEPS" --amp fp16 \
  --dropout 0.2 --eval-every "$EVAL" --eval-batches 16 --json "$OUT/torch_amp.json" > "$OUT/torch_amp.log" 2>&1
echo "torch fp16 AMP: exit $? in $(( $(date +%s) - s )) s"; grep "validation" "$OUT/torch_amp.log" | tail -n 3
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import csv, json, sys
out = sys.argv[1]
def rows(p):
    return list(csv.DictReader(open(f"{out}/metrics_{p}.csv")))
f32, mixed = rows("f32"), rows("mixed")
val = lambda rs: {int(r["step"]): float(r["val_loss"]) for r in rs if r.get("val_loss", "").strip()}
vf, vm = val(f32), val(mixed)
try:
    vt = {e["step"]: e["val_loss"] for e in json.load(open(f"{out}/torch_amp.json"))["train"]["eval"]}
except Exception as e:
    vt = {}
    print(f"no PyTorch validation losses ({e})")
print("step   wgml f32   wgml mixed  torch fp16 AMP")
for s in sorted(vf):
    print(f"{s:5d} {vf[s]:10.5f} {vm.get(s, float('nan')):12.5f} {vt.get(s, float('nan')):14.5f}")
last = max(vf)
if last in vm:
    print(f"final val loss, mixed against wgml f32: {(vm[last] - vf[last]) / vf[last]:+.3%}")
    if last in vt:
        print(f"final val loss, mixed against PyTorch fp16 AMP: {(vm[last] - vt[last]) / vt[last]:+.3%}")
n = min(50, len(f32), len(mixed))
worst = max(abs(float(a["loss"]) - float(b["loss"])) / abs(float(a["loss"])) for a, b in zip(f32[:n], mixed[:n]))
print(f"first {n} steps, mixed against f32 (same weights and masks): worst relative loss difference {worst:.3e}")
skipped = mixed[-1].get("skipped_steps", ""); scale = mixed[-1].get("loss_scale", "")
print(f"mixed: skipped steps {skipped}, final loss scale {scale}")
PY
