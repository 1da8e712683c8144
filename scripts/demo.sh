#!/usr/bin/env bash
# The main job: show the adapter, train an MLP on Fashion-MNIST and print the test
# accuracy, then train a small character-level GPT on the fortunes text and print a sample
# of it; each run's metrics drawn beside its checkpoint (metrics.png). On a machine without a
# GPU this runs on lavapipe (about four minutes in all).
set -euo pipefail
BUILD=${1:-build}
OUT=${OUT_DIR:-out/demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}  # matplotlib (make deps)
plot() { "$PYTHON" "$ROOT/scripts/plot_metrics.py" "$@" >/dev/null; }
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}  # Mesa's WSI complains without one
"$BUILD/wgml" info
"$BUILD/wgml" train --epochs "${EPOCHS:-3}" --out "$OUT" --overwrite  # (a demo run replaces the last one)
plot "$OUT/metrics.csv" --title "wgml train: an MLP on Fashion-MNIST"
# The GPT: GPT-2 style, 2 layers of width 64, a context of 32 bytes; on a GPU, GPT_STEPS
# can be raised (and the model with the flags of `wgml gpt train --help`).
"$BUILD/wgml" gpt train --steps "${GPT_STEPS:-600}" --layers 2 --heads 4 --width 64 --block 32 --batch 8 \
  --lr 3e-3 --eval-every 100 --eval-batches 4 --out "$OUT/gpt" --overwrite
plot "$OUT/gpt/metrics.csv" --title "wgml gpt train: a character-level GPT on fortunes"
echo "--- a sample from the GPT (temperature 0.8, top-k 20):"
"$BUILD/wgml" gpt sample --checkpoint "$OUT/gpt/gpt.safetensors" --prompt "The " --tokens 200 --temperature 0.8 --top-k 20 --seed 1
echo "--- pictures of training: $OUT/metrics.png (the MLP), $OUT/gpt/metrics.png (the GPT)"
