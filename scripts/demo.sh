#!/usr/bin/env bash
# The main job: show the adapter, then train an MLP on Fashion-MNIST and print the test
# accuracy. On a machine without a GPU this runs on lavapipe (a few minutes).
set -euo pipefail
BUILD=${1:-build}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}  # Mesa's WSI complains without one
"$BUILD/wgml" info
"$BUILD/wgml" train --epochs "${EPOCHS:-3}" --out "${OUT_DIR:-out/demo}"
