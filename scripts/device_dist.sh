#!/usr/bin/env bash
# Data parallelism on the lent multi-GPU machines (device tool, kinds nvidia-h200-x2 / -x4 and the like):
# `wgml gpt train` in the nanoGPT setup (6 layers, 6 heads, width 384, block 256, global batch
# 128, no dropout) on 1, 2 and 4 ranks, one GPU each, started by the image's own Open MPI
# (/usr/bin/mpirun: unpacking Debian's Open MPI over it broke mpirun), then PyTorch DDP on 1, 2
# and 4 GPUs through torchrun with the same model (bench/torch_gpt_ddp.py), in one command.
# wgml was built elsewhere (no MPI at build time: it opens the launcher's MPI, src/train/mpi_abi.c).
#
# Usage: device_dist.sh DIR OUT
#   DIR holds bin/wgml, lib/ (libwgpu_native.so, libjansson.so.4), text/ (the corpus) and
#   bench/ (torch_gpt.py, torch_gpt_ddp.py); OUT gets the logs, metrics and a summary.
#   RUNS="name:ranks[:VAR=VALUE,...[:--arg,value,...]] ..." the wgml runs (default np1:1 np2:2
#   np4:4; the first is the checkpoint PyTorch starts from; each run's losses are compared with
#   those of the last 1-rank run before it, e.g. np1m:1::--precision,mixed for mixed ones),
#   TORCH_RANKS="1 2 4" ("" for none), TORCH_AMP="fp16 bf16" (PyTorch's autocast runs too).
#   MPICH=DIR: the runs of several ranks under MPICH's Hydra from DIR (bin/mpiexec.hydra,
#   lib/libmpich.so.12 and the libraries it needs: scripts/mpich_folder.sh makes it on a machine
#   with Debian's mpich) instead of the image's Open MPI; the same wgml binary.
# Each line of OUT/summary.txt: what ran, ms/step and tokens/s over the steps after the 20th.
set -u
D=$1
OUT=$2
shift 2
[ -n "${LOCAL_CHECK:-}" ] || . "$(dirname "$0")/device_env.sh" # the Vulkan loader, NVIDIA's driver file
export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0
# the image's libmpi (wgml opens it under a launcher: found by soname, or named here)
MPILIB=$(ldconfig -p | awk '/libmpi\.so\.40 /{print $NF; exit}')
[ -n "$MPILIB" ] || MPILIB=$(find /usr /opt -name 'libmpi.so.40' 2>/dev/null | head -1)
export WGML_MPI_LIBRARY=$MPILIB
# (each GPU's link: one on a slower bus makes every rank wait for it)
nvidia-smi --query-gpu=index,name,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null
[ -n "${MPICH:-}" ] || { mpirun --version | head -1; echo "libmpi: $MPILIB"; }
df -h /dev/shm | tail -1
# --bind-to none: a rank runs the runtime's threads and the all-reduce's beside its own
MPI=(mpirun --bind-to none -x LD_LIBRARY_PATH -x VK_DRIVER_FILES -x XDG_RUNTIME_DIR -x WGML_MPI_LIBRARY)
ENVFLAG=-x # a variable for the ranks: Open MPI's -x VAR=VALUE, Hydra's -genv VAR VALUE
if [ -n "${MPICH:-}" ]; then # (its libraries first for its runs only: the image's Open MPI stays as it was)
  MPI=(env "LD_LIBRARY_PATH=$MPICH/lib:$LD_LIBRARY_PATH" "UCX_MODULE_DIR=$MPICH/lib/ucx"
       "WGML_MPI_LIBRARY=$MPICH/lib/libmpich.so.12" "$MPICH/bin/mpiexec.hydra" -launcher fork -genvall)
  ENVFLAG=-genv
  echo "MPICH: $("$MPICH/bin/mpiexec.hydra" --version | grep -m1 Version), libmpich: $MPICH/lib/libmpich.so.12"
fi
W=$D/bin/wgml
RUN=/tmp/dist # checkpoints stay here; OUT gets the logs and metrics
mkdir -p "$RUN" "$OUT"
: >"$OUT/summary.txt" # (this command's runs only)
# (smaller MODEL, BATCH, STEPS for a check on a machine without GPUs)
STEPS=${STEPS:-60} BATCH=${BATCH:-128} BLOCK=${BLOCK:-256}
read -ra MODEL <<<"${MODEL:---layers 6 --heads 6 --width 384}"
GPT=(gpt train --data "$D/text" "${MODEL[@]}" --block "$BLOCK" --batch "$BATCH" --dropout 0 --steps "$STEPS" --warmup 10
     --eval-every 0 --eval-batches 2)
export TOKENS_PER_STEP=$((BATCH * BLOCK))

# tokens/s and ms/step between the 20th step's row of metrics.csv and the last before the
# final evaluation (on Dawn its first use compiles kernels)
rate() {
  python3 - "$1" <<'PY'
import csv, os, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["elapsed_s"]]
a = next(r for r in rows if int(r["step"]) >= 20)
b = [r for r in rows if not r["val_loss"]][-1]  # (the last row's time has the final evaluation in it)
steps, secs = int(b["step"]) - int(a["step"]), float(b["elapsed_s"]) - float(a["elapsed_s"])
tokens = int(os.environ["TOKENS_PER_STEP"])
print(f"{secs / steps * 1e3:.2f} ms/step {steps * tokens / secs:.0f} tokens/s (steps {a['step']}-{b['step']})")
PY
}

wgml_run() { # NAME NP ARGS(comma-separated) [ENV=VALUE...]
  local name=$1 np=$2 args
  IFS=, read -ra args <<<"$3"
  shift 3
  local xs=() e
  for e in "$@"; do
    if [ "$ENVFLAG" = -x ]; then xs+=(-x "$e"); else xs+=(-genv "${e%%=*}" "${e#*=}"); fi
  done
  rm -rf "${RUN:?}/$name"
  if [ "$np" = 1 ]; then
    env "$@" timeout 150 "$W" "${GPT[@]}" "${args[@]}" --out "$RUN/$name" >"$OUT/$name.log" 2>&1
  else
    # which GPU each rank's process is on: sampled every half second while it runs
    (while :; do nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv,noheader; sleep 0.5; done \
      >"$OUT/$name.apps" 2>/dev/null) &
    local sampler=$!
    timeout 150 "${MPI[@]}" "${xs[@]}" -np "$np" "$W" "${GPT[@]}" "${args[@]}" --out "$RUN/$name" >"$OUT/$name.log" 2>&1
  fi
  local rc=$?
  [ "$np" = 1 ] || { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    sort -u -t, -k1,2 "$OUT/$name.apps" | awk -F, '{n[$2]++} END {for (g in n) printf "%s: %d process(es); ", g, n[g]; print ""}' >"$OUT/$name.gpus"; }
  cp "$RUN/$name/metrics.csv" "$OUT/$name.metrics.csv" 2>/dev/null
  echo "$name: rc $rc, $(rate "$OUT/$name.metrics.csv" 2>/dev/null || echo 'no rate')" | tee -a "$OUT/summary.txt"
  grep -E "all-reduce|replicas|per rank" "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || tail -5 "$OUT/$name.log"
  [ -f "$OUT/$name.gpus" ] && echo "    processes a GPU (by bus): $(cat "$OUT/$name.gpus")" | tee -a "$OUT/summary.txt"
}

first= base=
for r in ${RUNS:-np1:1 np2:2 np4:4}; do
  IFS=: read -r name np vars args <<<"$r"
  IFS=, read -ra vars <<<"$vars"
  wgml_run "wgml_$name" "$np" "${args:-}" "${vars[@]}"
  [ -n "$first" ] || first=wgml_$name
  [ "$np" != 1 ] || { base=wgml_$name; continue; }
  [ -n "$base" ] || continue # (no one-rank run to compare with)
  # the losses against the first run's over the same global batches (no dropout)
  python3 - "$OUT/$base.metrics.csv" "$OUT/wgml_$name.metrics.csv" <<'PY' | tee -a "$OUT/summary.txt"
import csv, sys
one, many = ([r for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
rel = [(int(a["step"]), abs(float(a["loss"]) - float(b["loss"])) / abs(float(a["loss"]))) for a, b in zip(one, many)]
worst = max(rel, key=lambda x: x[1])
# (under f16 gradients a rank count's own skipped steps part the curves for a while: the last step says where they end)
print(f"    losses against {sys.argv[1].split('/')[-1].split('.')[0]}: worst relative difference {worst[1]:.3g} (step {worst[0]}) "
      f"over {len(rel)} steps, {rel[-1][1]:.3g} at the last")
PY
done
echo "segments left in /dev/shm: $(ls /dev/shm | grep -c '^wgml-dist-')" | tee -a "$OUT/summary.txt"

# PyTorch DDP, the same model (from wgml's checkpoint of the first run), f32 and each autocast
# dtype of TORCH_AMP (e.g. "fp16 bf16")
for amp in f32 ${TORCH_AMP:-}; do
  for n in ${TORCH_RANKS-1 2 4}; do
    tag=torch_np$n${amp#f32} amp_arg=()
    [ "$amp" = f32 ] || amp_arg=(--amp "$amp")
    timeout 180 torchrun --standalone --nproc_per_node "$n" "$D/bench/torch_gpt_ddp.py" --init "$RUN/$first/gpt.safetensors" \
      --data "$D/text" --batch "$BATCH" "${amp_arg[@]}" --json "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1
    echo "$tag: rc $? $(grep 'torch DDP' "$OUT/$tag.log")" | tee -a "$OUT/summary.txt"
  done
done
exit 0
