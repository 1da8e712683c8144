#!/usr/bin/env bash
# The main job: show the adapter, train an MLP on Fashion-MNIST and print the test
# accuracy, then train a small character-level GPT on the fortunes text and print a sample
# of it. On a machine without a GPU this runs on lavapipe (about four minutes in all).
set -euo pipefail
BUILD=${1:-build}
OUT=${OUT_DIR:-out/demo}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}  # Mesa's WSI complains without one
"$BUILD/wgml" info
"$BUILD/wgml" train --epochs "${EPOCHS:-3}" --out "$OUT"
# The GPT: GPT-2 style, 2 layers of width 64, a context of 32 bytes; on a GPU, GPT_STEPS
# can be raised (and the model with the flags of `wgml gpt train --help`).
"$BUILD/wgml" gpt train --steps "${GPT_STEPS:-600}" --layers 2 --heads 4 --width 64 --block 32 --batch 8 \
  --lr 3e-3 --eval-every 100 --eval-batches 4 --out "$OUT/gpt"
echo "--- a sample from the GPT (temperature 0.8, top-k 20):"
"$BUILD/wgml" gpt sample --checkpoint "$OUT/gpt/gpt.safetensors" --prompt "The " --tokens 200 --temperature 0.8 --top-k 20 --seed 1
