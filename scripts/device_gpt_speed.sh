#!/usr/bin/env bash
# Training speed against PyTorch on the GPU machine (device tool), one command: `wgml bench
# train` (the nanoGPT setup and GPT-2 small's shape, each in f32 and mixed precision), then bench/torch_gpt.py --bench (f32, fp16 and bf16 autocast) on the same models
# (initial checkpoints from `wgml gpt train --save-init`), and the table of ratios. Expects
# BUNDLE (a tar.xz of bin/wgml and lib/), TEXT (a folder of the fortunes text) and the carried
# .gl. Logs and JSON go to $OUT; PROFILE=1 adds the GPU time by kind of launch (below).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# (bench train's default text)
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
mkdir -p /usr/share/games && rm -rf /usr/share/games/fortunes && cp -r "${TEXT:?}" /usr/share/games/fortunes
export WGML_RUNTIME=${WGML_RUNTIME:-dawn}
W=$D/bin/wgml
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
declare -A SHAPE=([gpt]="--layers 6 --heads 6 --width 384 --block 256 --batch 64"
                  [gpt2]="--layers 12 --heads 12 --width 768 --block 1024 --batch 8")
timeout 300 $W bench train --json > "$OUT/wgml_train.json" 2> "$OUT/wgml_train.log"; grep -E "train|per step" "$OUT/wgml_train.log"
for t in gpt gpt2; do
  read -ra M <<< "${SHAPE[$t]}"
  timeout 60 $W gpt train "${M[@]}" --steps 1 --eval-every 0 --eval-batches 1 --save-init --out /tmp/init_$t > /dev/null 2>&1
  timeout 200 python3 bench/torch_gpt.py --init /tmp/init_$t/init.safetensors --bench --bench-amp fp16,bf16 --gen-tokens 4 \
    --bench-steps 20 --json "$OUT/torch_$t.json" > "$OUT/torch_$t.log" 2>&1; grep -E "^train|^compile" "$OUT/torch_$t.log"
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
for t, prefix in (("gpt", "gpt"), ("gpt2", "gpt2_small")):
    try:
        w = json.load(open(f"{out}/wgml_train.json"))["results"]
        p = json.load(open(f"{out}/torch_{t}.json"))["bench"]
    except Exception as e:
        print(f"{t}: missing results ({e})"); continue
    ms = lambda k: (w.get(k) or {}).get("ms", float("nan"))
    f32, mixed = ms(f"{prefix}_train_step"), ms(f"{prefix}_train_step_mixed")
    pf = p.get("train_eager", {}).get("ms_per_step", float("nan"))
    amp = {a: p.get(f"train_amp_{a}", {}).get("ms_per_step", float("nan")) for a in ("fp16", "bf16")}
    print(f"{t}: wgml f32 {f32:.2f} ms, mixed {mixed:.2f} ms; PyTorch f32 {pf:.2f}, fp16 AMP {amp['fp16']:.2f}, "
          f"bf16 AMP {amp['bf16']:.2f} ms; wgml f32 / PyTorch f32 {pf / f32:.2f}x, mixed / fp16 AMP {amp['fp16'] / mixed:.2f}x, "
          f"mixed / bf16 AMP {amp['bf16'] / mixed:.2f}x")
PY
# PROFILE=1: where a mixed-precision step's GPU time goes at the nanoGPT shape, by kind of launch
# (30 steps of `wgml gpt train`, each dispatch timed in a pass of its own; the file is written
# when the context is freed)
if [ "${PROFILE:-0}" = 1 ]; then
  read -ra M <<< "${SHAPE[gpt]}"
  WGML_PROFILE="$OUT/profile.txt" timeout 300 $W gpt train "${M[@]}" --precision mixed --steps 30 --eval-every 0 \
    --eval-batches 1 --out /tmp/profile_run > "$OUT/profile_run.log" 2>&1
  head -40 "$OUT/profile.txt" 2>/dev/null
fi
