#!/usr/bin/env bash
# The GEMMs of the mixed-precision GPT step, before and after (GPU machine, device tool, one
# command): test_matmul_f16 on Dawn, then for main's build and the branch's, each alternated
# twice: 60 steps of `wgml gpt train --precision mixed` at the nanoGPT setup (ms a step between
# the rows of steps 20 and 50 of metrics.csv; losses against main's), the profile of 30 mixed
# steps (matmul launches), and `wgml bench matmul`'s GPT rows. Expects BUNDLE (a tar.xz of bin/
# with wgml, wgml_main (main's build) and test_matmul_f16, and lib/ as device_env.sh takes it),
# TEXT (a folder of the fortunes text) and the carried .gl. Logs go to $OUT/log.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
mkdir -p /usr/share/games && rm -rf /usr/share/games/fortunes && cp -r "${TEXT:?}" /usr/share/games/fortunes
export WGML_RUNTIME=dawn WGML_BENCH_WARMUP=0.5
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
declare -A BIN=([main]=$D/bin/wgml_main [new]=$D/bin/wgml)
M=(--layers 6 --heads 6 --width 384 --block 256 --batch 64 --eval-every 0 --eval-batches 1 --seed 1 --precision mixed)
(cd "$D/bin" && timeout 90 ./test_matmul_f16) > "$OUT/test.log" 2>&1; echo "test_matmul_f16 rc=$?" | tee -a "$L"
grep -E "^FAIL" "$OUT/test.log" | head -10 | tee -a "$L"
for v in main new; do
  WGML_PROFILE=$OUT/prof_$v.txt timeout 40 ${BIN[$v]} gpt train "${M[@]}" --steps 30 --out /tmp/p_$v > /dev/null 2>&1
  echo "== profile $v" >> "$L"; grep -E "total_ms|matmul|cast_f16" "$OUT/prof_$v.txt" | head -16 >> "$L"
done
for r in 1 2; do for v in main new; do
  timeout 40 ${BIN[$v]} gpt train "${M[@]}" --steps 60 --out /tmp/t_$v > /dev/null 2>&1
  python3 - /tmp/t_$v/metrics.csv /tmp/t_main/metrics.csv "$v run $r" <<'PY' | tee -a "$L"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at = {int(x["step"]): float(x["elapsed_s"]) for x in rows if x["elapsed_s"]}
base = [float(x["loss"]) for x in csv.DictReader(open(sys.argv[2]))]
worst = max(abs(float(x["loss"]) - b) / abs(b) for x, b in zip(rows, base))
print(f"{sys.argv[3]}: {(at[50] - at[20]) / 30 * 1e3:.2f} ms a step (steps 20-50), last loss {rows[-1]['loss']}, "
      f"worst relative loss difference to main {worst:.2e}")
PY
done; done
WGML_BENCH_ONLY=gptstep,gpt_M timeout 60 ${BIN[new]} bench matmul 2>&1 | grep -E "gpt" | sed 's/^/new /' | tee -a "$L"
WGML_BENCH_ONLY=gpt_M timeout 20 ${BIN[main]} bench matmul 2>&1 | grep -E "gpt" | sed 's/^/main /' | tee -a "$L"
echo "total ${SECONDS}s" | tee -a "$L"
