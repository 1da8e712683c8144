#!/usr/bin/env bash
# The GPT training step, one build against another (GPU machine, device tool, one command):
# for main's build (bin/wgml_main) and the change's (bin/wgml), the profile of 30 mixed-precision
# steps at the nanoGPT setup (launches by kind), then 60 steps of `wgml gpt train` in each of
# PRECISIONS (default "f32 mixed"), ROUNDS times alternated (default 1): ms a step between the
# rows of steps 20 and 50 of metrics.csv, and the losses against main's. With bin/test_matmul_f16
# in the bundle it runs first; BENCH_ONLY (e.g. gptstep,gpt_M) adds those `wgml bench matmul`
# rows of both builds. Expects BUNDLE (a tar.xz of bin/ and lib/ as device_env.sh takes it),
# TEXT (a folder of the fortunes text) and the carried .gl. The log goes to $OUT/log.txt, the
# profiles to $OUT/prof_*.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BUNDLE:?}"
source "$(dirname "$0")/device_env.sh"  # .gl, the driver, the bundle into $D
mkdir -p /usr/share/games && rm -rf /usr/share/games/fortunes && cp -r "${TEXT:?}" /usr/share/games/fortunes
export WGML_RUNTIME=dawn WGML_BENCH_WARMUP=0.5
L=$OUT/log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
declare -A BIN=([main]=$D/bin/wgml_main [new]=$D/bin/wgml)
M=(--layers 6 --heads 6 --width 384 --block 256 --batch 64 --eval-every 0 --eval-batches 1 --seed 1)
if [ -x "$D/bin/test_matmul_f16" ]; then
  (cd "$D/bin" && timeout 90 ./test_matmul_f16) > "$OUT/test.log" 2>&1; echo "test_matmul_f16 rc=$?" | tee -a "$L"
  grep -E "^FAIL" "$OUT/test.log" | head -10 | tee -a "$L"
fi
for v in main new; do
  WGML_PROFILE=$OUT/prof_$v.txt timeout 60 ${BIN[$v]} gpt train "${M[@]}" --precision mixed --steps 30 --out /tmp/p_$v \
    > /dev/null 2>&1; echo "profile $v rc=$?" | tee -a "$L"
done
for r in $(seq "${ROUNDS:-1}"); do for p in ${PRECISIONS:-f32 mixed}; do for v in main new; do
  timeout 60 ${BIN[$v]} gpt train "${M[@]}" --precision "$p" --steps 60 --out /tmp/t_${p}_$v > "$OUT/run.log" 2>&1 ||
    tail -3 "$OUT/run.log" >> "$L"
  python3 - /tmp/t_${p}_$v/metrics.csv /tmp/t_${p}_main/metrics.csv "$p $v round $r" <<'PY' | tee -a "$L"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
at = {int(x["step"]): float(x["elapsed_s"]) for x in rows if x["elapsed_s"]}
base = [float(x["loss"]) for x in csv.DictReader(open(sys.argv[2]))]
worst = max(abs(float(x["loss"]) - b) / abs(b) for x, b in zip(rows, base))
print(f"{sys.argv[3]}: {(at[50] - at[20]) / 30 * 1e3:.2f} ms a step (steps 20-50), last loss {rows[-1]['loss']}, "
      f"worst relative loss difference to main {worst:.2e}")
PY
done; done; done
if [ -n "${BENCH_ONLY:-}" ]; then
  for v in new main; do
    WGML_BENCH_ONLY=$BENCH_ONLY timeout 60 ${BIN[$v]} bench matmul 2>&1 | grep -E "gpt" | sed "s/^/$v /" | tee -a "$L"
  done
fi
echo "total ${SECONDS}s" | tee -a "$L"
