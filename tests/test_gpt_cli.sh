#!/usr/bin/env bash
# End-to-end tests of `wgml gpt train` and `wgml gpt sample` on a small text folder:
#   - a run stopped and resumed writes the same losses, byte for byte, as one that never
#     stopped (batches by step number, the generator's state in the checkpoint), with
#     dropout on, beside its checkpoint; rows written after the checkpoint before a crash are
#     dropped; the metrics CSV has its header and a loss per step; flags that would change a
#     resumed run's stored settings are refused;
#   - sampling at temperature 0 is deterministic, and with a seed too; a prompt outside the
#     vocabulary, a missing or corrupt checkpoint, and bad flags are refused with a message
#     naming the problem (exit 2 for usage, 1 for the rest); --help exits 0.
# Usage: test_gpt_cli.sh WGML_BINARY
set -u
wgml=$1
[ -x "$wgml" ] || { echo "test_gpt_cli: $wgml is not an executable" >&2; exit 2; }
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done, run_wgml

# a text folder: two files (and an index file and a link, which are skipped)
mkdir -p "$work/text"
fake_text "$work/text/a" 120
for i in $(seq 1 80); do echo "Why? Because GPUs are fast; tests ($i) keep them honest!"; done >"$work/text/b"
printf '\x00\x01\x02' >"$work/text/b.dat"
ln -s a "$work/text/a.u8"

small=(--data "$work/text" --layers 1 --heads 2 --width 16 --block 8 --batch 2 --dropout 0.1 --eval-every 3 --eval-batches 1)
run_wgml gpt train "${small[@]}" --steps 6 --out "$work/full" 2>"$work/full.log" || fail "the uninterrupted run failed: $(cat "$work/full.log")"
python3 - "$work/full/metrics.csv" <<'PY' || fail "the metrics CSV is malformed"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6], rows
assert all(float(r["loss"]) > 0 for r in rows)
assert rows[2]["val_loss"] and rows[5]["val_loss"] and not rows[0]["val_loss"]
PY

# stopped at step 3 of the same 6-step schedule, then resumed: the same losses, byte for byte
run_wgml gpt train "${small[@]}" --steps 6 --stop-at 3 --out "$work/c" 2>"$work/c.log" || fail "--stop-at failed: $(cat "$work/c.log")"
[ "$(wc -l <"$work/c/metrics.csv")" = 4 ] || fail "the stopped run's metrics do not hold 3 steps"
# (as if the run had gone on past its checkpoint and died: rows after step 3 are dropped)
echo "4,9.9,0.001,,,," >>"$work/c/metrics.csv"
echo "5,9.9,0.001,,,," >>"$work/c/metrics.csv"
run_wgml gpt train --resume "$work/c/gpt.safetensors" 2>"$work/c2.log" || fail "resuming failed: $(cat "$work/c2.log")"
cut -d, -f1-5 "$work/full/metrics.csv" >"$work/full.cut"
cut -d, -f1-5 "$work/c/metrics.csv" >"$work/c.cut"
cmp -s "$work/full.cut" "$work/c.cut" || { fail "stopped and resumed losses differ from the uninterrupted run's"; diff "$work/full.cut" "$work/c.cut" >&2; }
cmp -s "$work/full/gpt.safetensors" "$work/c/gpt.safetensors" || fail "the resumed run's final checkpoint differs from the uninterrupted run's"

# a resumed run keeps every stored setting: flags that would change one are refused
run_wgml gpt train --stop-at 3 "${small[@]}" --steps 6 --out "$work/d" 2>/dev/null
expect_resume() { # flag value
  run_wgml gpt train --resume "$work/d/gpt.safetensors" "$1" "$2" >/dev/null 2>"$work/err"
  local rc=$?
  [ $rc = 2 ] && grep -q -- "$1 cannot be given with --resume" "$work/err" || fail "--resume with $1 exited $rc: $(cat "$work/err")"
}
expect_resume --lr 0.5
expect_resume --dropout 0.5
expect_resume --eval-every 1

# a run whose text moved: --data says where it is now (the same losses), another text is refused
cp -r "$work/text" "$work/t2"
run_wgml gpt train "${small[@]}" --data "$work/t2" --steps 6 --stop-at 3 --out "$work/m" 2>/dev/null || fail "the run on a copy failed"
mv "$work/t2" "$work/t3"
run_wgml gpt train --resume "$work/m/gpt.safetensors" >/dev/null 2>"$work/err"
[ $? = 1 ] && grep -q "where it has moved, give --data" "$work/err" || fail "resuming a run whose text moved: $(cat "$work/err")"
cp -r "$work/t3" "$work/t4" && echo "one more line" >>"$work/t4/b"
run_wgml gpt train --resume "$work/m/gpt.safetensors" --data "$work/t4" >/dev/null 2>"$work/err"
[ $? = 1 ] && grep -q "is not the text .*gpt.safetensors trained on" "$work/err" || fail "resuming on another text: $(cat "$work/err")"
run_wgml gpt train --resume "$work/m/gpt.safetensors" --data "$work/t3" 2>"$work/err" || fail "resuming with --data: $(cat "$work/err")"
cut -d, -f1-5 "$work/m/metrics.csv" >"$work/m.cut"
cmp -s "$work/full.cut" "$work/m.cut" || fail "the run resumed with --data differs from the uninterrupted run"

# nothing left to train
run_wgml gpt train --resume "$work/full/gpt.safetensors" --out "$work/full" 2>"$work/e.log"
[ $? = 1 ] && grep -q "nothing to train" "$work/e.log" || fail "resuming a finished run: $(cat "$work/e.log")"
run_wgml gpt train --resume "$work/d/gpt.safetensors" --stop-at 2 2>"$work/e.log"
[ $? = 1 ] && grep -q "is at step 3, --stop-at 2: nothing to train" "$work/e.log" || fail "resuming past --stop-at: $(cat "$work/e.log")"

# sampling
ck="$work/full/gpt.safetensors"
a=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 0 2>/dev/null)
b=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 0 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "greedy sampling is not deterministic: '$a' vs '$b'"
[ "${a:0:4}" = "Line" ] && [ ${#a} = 24 ] || fail "the sample is not the prompt and 20 bytes: '$a'"
# several samples drawn together (wgml_gpt_generate_batch): greedy, each the one sample above
m=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 0 --samples 3 2>/dev/null)
[ "$m" = "$(printf '%s\n---\n%s\n---\n%s' "$a" "$a" "$a")" ] || fail "3 greedy samples are not 3 times the sample: '$m'"
a=$(run_wgml gpt sample --checkpoint "$ck" --tokens 30 --seed 5 --top-k 5 2>/dev/null)
b=$(run_wgml gpt sample --checkpoint "$ck" --tokens 30 --seed 5 --top-k 5 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "seeded sampling is not reproducible"

# errors: each with a message naming the problem
expect() { # expect STATUS PATTERN -- ARGS...
  local want=$1 pat=$2; shift 3
  run_wgml "$@" >/dev/null 2>"$work/err"
  local rc=$?
  [ $rc = "$want" ] && grep -q -- "$pat" "$work/err" || fail "wgml $* exited $rc (want $want), said: $(cat "$work/err") (want '$pat')"
}
expect 2 "unknown option '--nope'" -- gpt train --nope
expect 2 "needs a value" -- gpt train --steps
expect 2 "--steps" -- gpt train --steps 2abc
expect 2 "--lr" -- gpt train --lr abc
expect 2 "unexpected argument 'junk'" -- gpt train junk
expect 2 "heads = 3 does not divide width = 16" -- gpt train --data "$work/text" --heads 3 --width 16
expect 2 "--arch" -- gpt train --arch bert
expect 1 "cannot open the text folder" -- gpt train --data "$work/none"
expect 2 "--layers cannot be given with --resume" -- gpt train --resume "$ck" --layers 3
expect 2 "--checkpoint FILE is required" -- gpt sample
expect 2 "--samples" -- gpt sample --checkpoint "$ck" --samples 0
expect 1 "No such file" -- gpt sample --checkpoint "$work/none.safetensors"
expect 2 "not in the checkpoint's vocabulary" -- gpt sample --checkpoint "$ck" --prompt "ZZZ~"
head -c 200 "$ck" >"$work/cut.safetensors"
expect 1 "cut.safetensors" -- gpt sample --checkpoint "$work/cut.safetensors"
expect 2 "unknown command 'fly'" -- gpt fly
expect 2 "--steps" -- gpt train --data "$work/text" --steps 0
expect 2 "--warmup 10 is not shorter than --steps 10" -- gpt train --data "$work/text" --steps 10 --warmup 10
expect 2 "--tokens" -- gpt sample --checkpoint "$ck" --tokens 0
# a temperature too small to divide by is the argmax
c=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 1e-30 2>/dev/null)
g=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 0 2>/dev/null)
[ -n "$c" ] && [ "$c" = "$g" ] || fail "temperature 1e-30 is not greedy: '$c' vs '$g'"
run_wgml gpt train --help >/dev/null || fail "gpt train --help did not exit 0"
run_wgml gpt sample --help >/dev/null || fail "gpt sample --help did not exit 0"

checks_done
