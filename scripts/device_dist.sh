#!/usr/bin/env bash
# Data parallelism on the GPU machine (device tool): Open MPI is not installed there, so its
# Debian packages are carried (OMPI_DEBS, a folder of .deb files: apt-get download of
# openmpi-bin, libopenmpi3 and their dependencies) and unpacked, as the Vulkan loader is.
# One GPU shared by 2 ranks against 1 rank with the same global batch: the MLP (wgml train)
# and the nanoGPT-size GPT (wgml gpt train); each 2-rank run prints its all-reduce time.
# Usage: device_dist.sh WGML_BINARY OMPI_DEBS
set -u
W=$1
EXTRA_DEBS=$2 . "$(dirname "$0")/device_env.sh"  # the driver, the carried libraries, Open MPI
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_RUNTIME_DIR"
mpirun --version | head -1
echo "== MLP, 1 rank, batch 128"; "$W" train --epochs 3 --data .devlibs/fmnist --out /tmp/m1 2>&1 | tail -4
echo "== MLP, 2 ranks x 64"; $MPI -np 2 "$W" train --epochs 3 --data .devlibs/fmnist --out /tmp/m2 2>&1 | tail -5
GPT="gpt train --layers 6 --heads 6 --width 384 --block 256 --batch 64 --steps 60 --warmup 10 --eval-every 0 --eval-batches 2"
echo "== GPT, 1 rank, batch 64"; "$W" $GPT --out /tmp/g1 2>&1 | tail -3
echo "== GPT, 2 ranks x 32"; $MPI -np 2 "$W" $GPT --out /tmp/g2 2>&1 | tail -4
