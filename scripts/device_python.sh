#!/usr/bin/env bash
# The Python package's overhead on the GPU machine (device tool; carry .gl, .devlibs and
# build-bins with libwgml.so.0, the wgml command and wheels/ holding cffi and pycparser for the
# machine's Python): the Fashion-MNIST MLP example against `wgml train` with the same model
# (784-256-10, batch 128, AdamW), epoch times of both in one run.
# Usage: device_python.sh BIN_DIR (holding wgml and libwgml.so.0)
set -u
B=$(cd "${1:-build}" && pwd)
. "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries
python3 --version
python3 -m venv --system-site-packages /tmp/pyenv && /tmp/pyenv/bin/python -m pip install -q --no-index \
  --find-links build-bins/wheels numpy cffi pycparser 2>&1 | tail -2
export WGML_LIBRARY=$B/libwgml.so.0 PYTHONPATH=$PWD/python FASHION_MNIST=$PWD/.devlibs/fmnist
echo "== wgml train --hidden 256 --epochs 5"
"$B/wgml" train --hidden 256 --epochs 5 --data .devlibs/fmnist --out /tmp/mlp 2>&1 | tail -7
# each epoch's seconds (training and the test pass) from the per-step metrics
awk -F, 'NR > 1 && $6 != "" { printf "wgml train epoch %d: %.3f s\n", $2, $9 - last; last = $9 }' /tmp/mlp/metrics.csv
echo "== python/examples/mlp_fashion_mnist.py 5"
/tmp/pyenv/bin/python python/examples/mlp_fashion_mnist.py 5 2>&1 | tail -6
