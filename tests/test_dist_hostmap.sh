#!/usr/bin/env bash
# Data parallelism through buffers over the shared-memory segment (Dawn's host-mapped
# pointers: each rank's GPU copies its gradients into its slot and the sums back itself),
# on Dawn's lavapipe, 2 ranks of `wgml train` in small buckets:
#   - the log says the gradients went through the segment mapped by the GPU, and with
#     WGML_DIST_HOSTMAP=0 through the staging buffers;
#   - both end with the same checkpoint byte for byte (the same sums in the same order), as f32
#     and as f16 (WGML_DIST_F16=1), each rank summing with 3 threads (its helpers too);
#   - no segment is left in /dev/shm.
# Usage: test_dist_hostmap.sh WGML_BINARY MPIEXEC PYTHON DAWN_ICD
set -u

wgml=$1
mpiexec=$2
py=$3
icd=$4
shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^wgml-dist-')
. "$(dirname "$0")/cli_checks.sh" # $work, fail, checks_done

mpi=("$mpiexec" --oversubscribe --bind-to none -x WGML_RUNTIME=dawn -x "VK_DRIVER_FILES=$icd" -x XDG_RUNTIME_DIR
     -x WGML_DIST_BUCKET_MB=0.001 -x WGML_DIST_THREADS=3)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)

fake_fmnist "$py" "$work/data" 640 64 7 1
args=(train --data "$work/data" --hidden 31 --batch 64 --lr 3e-3 --epochs 1)
for wire in f32 f16; do
  f16=0
  [ "$wire" = f16 ] && f16=1
  for hostmap in 1 0; do
    name=$wire-$hostmap
    timeout 280 "${mpi[@]}" -x WGML_DIST_F16=$f16 -x WGML_DIST_HOSTMAP=$hostmap -np 2 "$wgml" "${args[@]}" --out "$work/$name" \
      >"$work/$name.log" 2>&1 || fail "$name: exit $? ($(tail -3 "$work/$name.log"))"
  done
  grep -q "overlapped: .*shared memory mapped by the GPU (3 threads a rank).* MB a step as $wire" "$work/$wire-1.log" ||
    fail "$wire: not through the segment mapped by the GPU: $(grep -A1 all-reduce "$work/$wire-1.log")"
  grep -q "overlapped: .*shared memory (.* MB a step as $wire" "$work/$wire-0.log" ||
    fail "$wire, WGML_DIST_HOSTMAP=0: not through the staging buffers: $(grep all-reduce "$work/$wire-0.log")"
  grep -q "replicas: parameters identical on 2 ranks" "$work/$wire-1.log" || fail "$wire: no replica check: $(tail -3 "$work/$wire-1.log")"
  cmp -s "$work/$wire-1/checkpoint.safetensors" "$work/$wire-0/checkpoint.safetensors" ||
    fail "$wire: the GPU-mapped segment ends elsewhere than the staging buffers"
done
[ "$(ls /dev/shm 2>/dev/null | grep -c '^wgml-dist-')" = "$shm_before" ] || fail "a segment was left in /dev/shm"
checks_done
