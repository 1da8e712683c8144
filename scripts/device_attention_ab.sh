#!/usr/bin/env bash
# Attention on the matrix units, main's build against a branch's (GPU machine, device tool, one
# command): the branch's kernels on the GPU against the double reference (test_attention_mixed with
# the long cases), the GPT step at the nanoGPT setup (profile of 30 mixed steps, then 60 steps: ms a
# step between the metrics rows of steps 20 and 50) for main's build and the branch's, then
# `wgml bench attention`'s mixed rows of both under WGML_PROFILE (per-kernel GPU times), and
# PyTorch's SDPA where the GPU is no H200 (else take it from an earlier command on an H200).
# Compare kernels by the bench's profile rows, whose Delta (a kernel both builds share) shows
# whether both processes ran at one speed; the first process to compile a kernel skips the bench's
# warm-up (its rows come out 3-4 times slow), hence the GPT runs first. Expects BUNDLE (a tar.xz of
# bin/wgml, bin/wgml_main, bin/test_attention_mixed and lib/ as device_env.sh takes it), TEXT (a
# folder of the fortunes text) and the carried .gl. The log goes to $OUT/log.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BUNDLE:?}"; : "${TEXT:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
export WGML_RUNTIME=dawn WGML_BENCH_WARMUP=1
L=$OUT/log.txt
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); echo "$GPU" | tee "$L"
B=$D/bin
WGML_TEST_ATTN_LONG=1 timeout 150 $B/test_attention_mixed > $OUT/test_mixed.log 2>&1; echo "test_attention_mixed rc=$? (${SECONDS}s)" | tee -a $L
grep -E "FAIL|largest|T=256|T=1023|T=4100" $OUT/test_mixed.log | head -40 >> $L
mkdir -p /usr/share/games && rm -rf /usr/share/games/fortunes && cp -r "$TEXT" /usr/share/games/fortunes
M=(--layers 6 --heads 6 --width 384 --block 256 --batch 64 --eval-every 0 --eval-batches 1 --seed 1 --precision mixed)
for v in wgml_main wgml; do
  WGML_PROFILE=$OUT/prof_$v.txt timeout 60 $B/$v gpt train "${M[@]}" --steps 30 --out /tmp/p_$v > /dev/null 2>&1
  echo "== profile $v rc=$?" >> $L; head -14 $OUT/prof_$v.txt >> $L; grep -E "attention" $OUT/prof_$v.txt >> $L
done
for v in wgml_main wgml; do
  timeout 60 $B/$v gpt train "${M[@]}" --steps 60 --out /tmp/t_$v > /dev/null 2>&1
  python3 - /tmp/t_$v/metrics.csv /tmp/t_wgml_main/metrics.csv "$v" <<'PY' | tee -a $L
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at = {int(x["step"]): float(x["elapsed_s"]) for x in rows if x["elapsed_s"]}
base = [float(x["loss"]) for x in csv.DictReader(open(sys.argv[2]))]
worst = max(abs(float(x["loss"]) - b) / abs(b) for x, b in zip(rows, base))
print(f"{sys.argv[3]}: {(at[50] - at[20]) / 30 * 1e3:.2f} ms a step (steps 20-50), elapsed rows {sorted(at)}, last loss {rows[-1]['loss']}, worst rel loss diff to main {worst:.2e}")
PY
done
for v in wgml_main wgml; do
  echo "== bench $v" >> $L; rm -f $OUT/bp.txt
  WGML_PROFILE=$OUT/bp.txt WGML_BENCH_ATTN_MIXED_ONLY=1 timeout 60 $B/$v bench attention 2>&1 | grep -E "_mixed |bench:" | grep -v peak >> $L
  grep attention $OUT/bp.txt >> $L
done
case "$GPU" in *H200*) ;; *) timeout 90 python3 bench/torch_attention.py > /dev/null 2> $OUT/torch.log; cat $OUT/torch.log >> $L ;; esac
echo "total ${SECONDS}s" | tee -a $L
