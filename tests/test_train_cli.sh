#!/usr/bin/env bash
# End-to-end tests of `wgml train --resume` and `wgml eval`, on a synthetic data set of 256
# training images (each run takes about a second on lavapipe):
#   - a resume takes the seed, batch, lr, wd and clip stored in the checkpoint, and ends
#     byte for byte where the uninterrupted run ends, with the same metrics (a row per step;
#     rows written after the checkpoint by a run that died are dropped); flags given override
#     them;
#   - checkpoints that are wrong are refused with a message naming what is wrong, never
#     trained on or evaluated: a moment or a weight of the wrong shape, a missing moment, a
#     header length one byte short, bytes appended, bad metadata values; bad flags too;
#   - no error message is empty.
# Usage: test_train_cli.sh WGML_BINARY [PYTHON]
set -u

wgml=$1
py=${2:-python3}
if [ ! -x "$wgml" ]; then
  echo "test_train_cli: $wgml is not an executable" >&2
  exit 2
fi
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done, run_wgml

# Synthetic data and checkpoint surgery. The edited checkpoint is rewritten as a valid
# safetensors file (data contiguous, header padded with spaces as wgml does), so that only
# the one change is wrong.
cat >"$work/ck.py" <<'PY'
import json, os, struct, sys

def read(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return meta, [(k, v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in tensors]

def write(path, meta, tensors):
    header, data = {"__metadata__": meta}, b""
    for name, shape, blob in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    pad = -len(text) % 8
    text += b" " * pad
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
    return pad

def numel(dims):
    n = 1
    for d in dims:
        n *= d
    return n

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "meta":  # PATH KEY: print a metadata value
    print(read(args[0])[0].get(args[1], "(absent)"))
elif cmd == "set_meta":  # IN OUT KEY VALUE
    meta, tensors = read(args[0])
    meta[args[2]] = args[3]
    write(args[1], meta, tensors)
elif cmd == "reshape":  # IN OUT NAME DIMS: the tensor replaced by zeros of shape DIMS ("1", "16,784")
    meta, tensors = read(args[0])
    shape = [int(d) for d in args[3].split(",")]
    write(args[1], meta, [(k, shape, bytes(4 * numel(shape))) if k == args[2] else (k, s, b) for k, s, b in tensors])
elif cmd == "add":  # IN OUT NAME DIMS: one more tensor, of zeros
    meta, tensors = read(args[0])
    shape = [int(d) for d in args[3].split(",")]
    write(args[1], meta, tensors + [(args[2], shape, bytes(4 * numel(shape)))])
elif cmd == "drop":  # IN OUT NAME
    meta, tensors = read(args[0])
    write(args[1], meta, [t for t in tensors if t[0] != args[2]])
elif cmd == "header_len":  # IN OUT DELTA: the 8-byte header length changed by DELTA
    # The header must end in padding for a length one short to leave valid JSON: where it
    # would have none, a metadata pair makes some.
    meta, tensors = read(args[0])
    if write(args[1], meta, tensors) == 0:
        meta["padding"] = "x"
        write(args[1], meta, tensors)
    blob = open(args[1], "rb").read()
    n = struct.unpack("<Q", blob[:8])[0] + int(args[2])
    open(args[1], "wb").write(struct.pack("<Q", n) + blob[8:])
elif cmd == "append":  # IN OUT N: N zero bytes after the data
    open(args[1], "wb").write(open(args[0], "rb").read() + bytes(int(args[2])))
PY
ck() { "$py" "$work/ck.py" "$@"; }

# refused WHAT NEEDLES COMMAND...: COMMAND must exit with an error (not 0, not a signal)
# whose message contains each of NEEDLES ('|'-separated); no line of it may end in ": ".
refused() {
  local what=$1 needles=$2 rc=0
  shift 2
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ "$rc" -eq 0 ]; then
    fail "$what: exit 0, want an error; it printed: $(tail -n 2 "$work/out" | tr '\r\n' '  ')"
    return
  fi
  [ "$rc" -lt 128 ] || fail "$what: killed by signal $((rc - 128))"
  local list n
  IFS='|' read -ra list <<<"$needles"
  for n in "${list[@]}"; do
    grep -qF -- "$n" "$work/err" || fail "$what: the message lacks '$n': $(head -c 600 "$work/err")"
  done
  if grep -qE ':[[:space:]]*$' "$work/err"; then fail "$what: an empty message: $(cat "$work/err")"; fi
  echo "  $what -> $(head -n 1 "$work/err")"
}

# ran WHAT COMMAND...: COMMAND must succeed; its output is kept in $work/out.
ran() {
  local what=$1
  shift
  "$@" >"$work/out" 2>"$work/err" || fail "$what: exit $?: $(tail -c 600 "$work/err")"
}

data=$work/data
fake_fmnist "$py" "$data" 256 64 3  # random pixels and labels
common=(--data "$data" --hidden 16)
settings=(--seed 7 --lr 0.01 --wd 0.001 --clip 0.5 --batch 32)

# An uninterrupted run of 2 epochs, and a run of 1 epoch resumed for the second with no
# settings on the command line: the checkpoint stores them, so both end in the same file.
ran "2 epochs" run_wgml train "${common[@]}" "${settings[@]}" --epochs 2 --out "$work/full"
# a run whose loss stops being a number ends there, saying so, and writes no checkpoint of it
rc=0
run_wgml train "${common[@]}" --lr 1e30 --batch 32 --epochs 1 --out "$work/diverged" >/dev/null 2>"$work/err" || rc=$?
[ "$rc" = 1 ] && grep -q "training diverged" "$work/err" || fail "a diverging run exited $rc: $(tail -c 600 "$work/err")"
[ ! -e "$work/diverged/checkpoint.safetensors" ] || fail "a diverging run wrote a checkpoint"
ran "1 epoch" run_wgml train "${common[@]}" "${settings[@]}" --epochs 1 --out "$work/half"
cp -r "$work/half" "$work/override"
one_epoch=$work/one_epoch.safetensors
cp "$work/half/checkpoint.safetensors" "$one_epoch"
# (as if the run had gone on into epoch 2 and died there, the last row cut short: dropped on resume)
printf '9,2,9.9,0.5,0.01,,,100.0,1.000\n10,2,9.9,0.5,0.01,,,100.0,1.0' >>"$work/half/metrics.csv"
ran "resume" run_wgml train --data "$data" --epochs 2 --out "$work/half" --resume "$work/half/checkpoint.safetensors"
banner="batch 32, AdamW lr 0.01, wd 0.001, clip 0.5, seed 7, epochs 2..2"
grep -qF "$banner" "$work/out" || fail "resume: the run does not say '$banner': $(head -n 1 "$work/out")"
cmp -s "$work/full/checkpoint.safetensors" "$work/half/checkpoint.safetensors" ||
  fail "resume: the resumed run's checkpoint differs from the uninterrupted run's"
for kv in seed=7 lr=0.01 weight_decay=0.001 max_grad_norm=0.5 batch=32 epoch=2 step=16; do
  got=$(ck meta "$work/half/checkpoint.safetensors" "${kv%%=*}")
  [ "$got" = "${kv#*=}" ] || fail "resume: metadata ${kv%%=*} is '$got', want '${kv#*=}'"
done
# The metrics: a row per step (256 / 32 = 8 a epoch), the test set's numbers on each epoch's
# last step only, and at the end those of the final checkpoint (as wgml eval reads them).
ran "eval of the final checkpoint" run_wgml eval "$work/full/checkpoint.safetensors" --data "$data"
"$py" - "$work/full/metrics.csv" "$(cat "$work/out")" <<'PY' || fail "the metrics CSV is not a row per step: $(head -n 3 "$work/full/metrics.csv")"
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert list(rows[0]) == "step,epoch,loss,accuracy,lr,test_loss,test_accuracy,samples_per_s,elapsed_s".split(","), list(rows[0])
assert [int(r["step"]) for r in rows] == list(range(1, 17)), [r["step"] for r in rows]
assert [int(r["epoch"]) for r in rows] == [1] * 8 + [2] * 8
for r in rows:
    assert 0 < float(r["loss"]) < 20 and float(r["accuracy"]) * 32 in range(33), r
    assert abs(float(r["lr"]) - 0.01) < 1e-9 and float(r["samples_per_s"]) > 0 and float(r["elapsed_s"]) > 0, r
    assert bool(r["test_loss"]) == bool(r["test_accuracy"]) == (r["step"] in ("8", "16")), r
assert [float(r["elapsed_s"]) for r in rows] == sorted(float(r["elapsed_s"]) for r in rows)
loss, acc = map(float, re.search(r"test loss (\S+) accuracy (\S+)", sys.argv[2]).groups())
assert abs(float(rows[-1]["test_loss"]) - loss) < 6e-5 and abs(float(rows[-1]["test_accuracy"]) - acc) < 6e-5, (rows[-1], loss, acc)
PY
# The resumed file equals the uninterrupted run's but for the timings (the last two columns).
cut -d, -f1-7 "$work/full/metrics.csv" >"$work/full.cut"
cut -d, -f1-7 "$work/half/metrics.csv" >"$work/half.cut"
cmp -s "$work/full.cut" "$work/half.cut" ||
  { fail "resume: the resumed run's metrics differ from the uninterrupted run's"; diff "$work/full.cut" "$work/half.cut" >&2; }

# Flags given on resume override what the checkpoint stores, and are stored in turn.
ran "resume with flags" run_wgml train --data "$data" --epochs 2 --out "$work/override" --lr 0.02 --batch 64 \
  --resume "$work/override/checkpoint.safetensors"
banner="batch 64, AdamW lr 0.02, wd 0.001, clip 0.5, seed 7"
grep -qF "$banner" "$work/out" || fail "resume with flags: the run does not say '$banner': $(head -n 1 "$work/out")"
for kv in lr=0.02 batch=64 seed=7 step=12; do
  got=$(ck meta "$work/override/checkpoint.safetensors" "${kv%%=*}")
  [ "$got" = "${kv#*=}" ] || fail "resume with flags: metadata ${kv%%=*} is '$got', want '${kv#*=}'"
done
got=$(awk -F, 'NR == 2 || NR == 9 || NR == 10 || NR == 13 {printf "%s,%s,%g ", $1, $2, $5}' "$work/override/metrics.csv")
[ "$got" = "1,1,0.01 8,1,0.01 9,2,0.02 12,2,0.02 " ] ||
  fail "resume with flags: the metrics' steps, epochs and lr are '$got', want steps 1-8 at lr 0.01 and 9-12 at 0.02"

# Checkpoints that must be refused, by train --resume and, where it reads the part, by eval.
bad=$work/bad.safetensors
resume=(run_wgml train --data "$data" --epochs 2 --out "$work/bad_run" --resume "$bad")
ck reshape "$one_epoch" "$bad" W0.v 1
refused "moment W0.v of shape [1]" "W0.v|[1]|[784, 16]" "${resume[@]}"
ck reshape "$one_epoch" "$bad" b1.m 3
refused "moment b1.m of shape [3]" "b1.m|[3]|[10]" "${resume[@]}"
ck drop "$one_epoch" "$bad" b1.m
refused "moment b1.m missing" "b1.m|missing" "${resume[@]}"
ck reshape "$one_epoch" "$bad" W0 16,784
refused "weight W0 transposed (train)" "W0|[16, 784]|[784, 16]" "${resume[@]}"
refused "weight W0 transposed (eval)" "W0|[16, 784]|[784, 16]" run_wgml eval "$bad" --data "$data"
ck add "$one_epoch" "$bad" extra 2
refused "a tensor that is not the model's" "extra" "${resume[@]}"

ck header_len "$one_epoch" "$bad" -1
refused "header length one byte short (eval)" "cover|data bytes" run_wgml eval "$bad" --data "$data"
refused "header length one byte short (train)" "cover|data bytes" "${resume[@]}"
ck append "$one_epoch" "$bad" 4
refused "4 bytes appended (eval)" "cover|data bytes" run_wgml eval "$bad" --data "$data"

while IFS=' ' read -r key value; do
  [ "$value" = '""' ] && value=
  ck set_meta "$one_epoch" "$bad" "$key" "$value"
  refused "metadata $key '$value'" "$key|'$value'" "${resume[@]}"
done <<'CASES'
epoch -3
epoch 99999999999
epoch abc
epoch ""
epoch 1.5
step -1
step 99999999999999999999
seed -1
seed 18446744073709551616
lr nan
lr -0.01
lr 1e99
weight_decay x
max_grad_norm inf
batch 0
batch 99999999999
sizes 784,16,abc
sizes 784,0,10
sizes 784
CASES
ck set_meta "$one_epoch" "$bad" sizes 784,16,12
refused "sizes that do not match the tensors" "sizes 784,16,12|W1" "${resume[@]}"

# Flags are parsed as strictly as metadata.
refused "--lr abc" "--lr|'abc'" run_wgml train "${common[@]}" --lr abc --out "$work/bad_run"
refused "--epochs -1" "--epochs|'-1'" run_wgml train "${common[@]}" --epochs -1 --out "$work/bad_run"
refused "--seed -1" "--seed|'-1'" run_wgml train "${common[@]}" --seed -1 --out "$work/bad_run"
refused "--batch larger than the data" "batch 512|256" run_wgml train "${common[@]}" --batch 512 --out "$work/bad_run"
refused "--hidden unlike the checkpoint's" "--hidden 32|784-16-10" run_wgml train --data "$data" --hidden 32 --epochs 2 \
  --out "$work/bad_run" --resume "$one_epoch"
refused "an unknown option" "unknown option '--nope'" run_wgml train "${common[@]}" --nope
refused "a missing value" "'--epochs' needs a value" run_wgml train "${common[@]}" --epochs
refused "trailing junk" "unexpected argument 'junk'" run_wgml train "${common[@]}" junk
refused "--epochs 2abc" "--epochs|'2abc'" run_wgml train "${common[@]}" --epochs 2abc
# --epoch 1 (the issue's typo) is GNU's unambiguous abbreviation of --epochs: one epoch, not the default ten
ran "--epoch 1" run_wgml train "${common[@]}" --epoch 1 --out "$work/abbrev"
[ "$(awk -F, 'NR > 1 { print $2 }' "$work/abbrev/metrics.csv" | sort -u)" = 1 ] || fail "--epoch 1 did not train exactly one epoch"
refused "resuming a finished run" "nothing to train" run_wgml train --data "$data" --epochs 1 --out "$work/bad_run" \
  --resume "$one_epoch"
refused "an unknown command" "unknown command 'frobnicate'" run_wgml frobnicate
refused "an unknown bench target" "unknown target 'foo'" run_wgml bench foo
refused "eval without a checkpoint" "CHECKPOINT is required" run_wgml eval --data "$data"
refused "--version with an argument" "unexpected argument 'extra'" run_wgml --version extra
refused "help of a command" "wgml gpt --help" run_wgml help gpt
# help and version: exit 0, usage on stdout, nothing run
for args in "--help" "-h" "--version" "train --help" "train -h" "eval --help" "bench --help" "info --help" "gpt --help"; do
  # shellcheck disable=SC2086
  run_wgml $args >"$work/out" 2>"$work/err" || fail "wgml $args: exit $?"
  grep -q "usage\|^wgml [0-9]" "$work/out" || fail "wgml $args printed no usage or version: $(head -c 200 "$work/out")"
  ! grep -q "training\|epoch" "$work/err" || fail "wgml $args started something"
done
# bench: JSON that parsers read (a failed measurement is null, and the exit status says so);
# without XDG_RUNTIME_DIR no warning from Mesa
WGML_LOOP_LIMIT=3 run_wgml bench gather --quick --json >"$work/bench.json" 2>"$work/bench.err"
[ $? = 1 ] || fail "a bench with failed measurements exited 0"
"$py" -c "import json,sys; json.load(open(sys.argv[1]))" "$work/bench.json" || fail "bench --json is not JSON: $(head -c 300 "$work/bench.json")"
env -u XDG_RUNTIME_DIR "$wgml" info >/dev/null 2>"$work/err"
! grep -q "XDG_RUNTIME_DIR" "$work/err" || fail "wgml info warns about XDG_RUNTIME_DIR"

# a metrics file is written with its header even by a resumed run that starts it
rm -f "$work/half2/metrics.csv"; mkdir -p "$work/half2"
ran "resume into a new folder" run_wgml train --data "$data" --epochs 2 --out "$work/half2" --resume "$one_epoch"
head -n 1 "$work/half2/metrics.csv" | grep -q "^step,epoch," || fail "a resumed run's new metrics file has no header"
[ "$(cut -d, -f1 "$work/half2/metrics.csv" | tr '\n' ' ')" = "step 9 10 11 12 13 14 15 16 " ] ||
  fail "a resumed run's new metrics file does not hold steps 9-16: $(cut -d, -f1 "$work/half2/metrics.csv" | tr '\n' ' ')"
# a metrics file of another format is not overwritten by a resumed run
mkdir -p "$work/other"
echo "epoch,step,train_loss" >"$work/other/metrics.csv"
# (a header alone is no run: the resume refuses the metrics of another format instead)
refused "resuming into a folder holding another run" "$work/other/metrics.csv does not begin with the header|another --out" \
  run_wgml train --data "$data" \
  --epochs 2 --out "$work/other" --resume "$one_epoch"
cp "$one_epoch" "$work/other/checkpoint.safetensors"
refused "resuming into another command's metrics" "metrics.csv|header" run_wgml train --data "$data" --epochs 2 \
  --resume "$work/other/checkpoint.safetensors" --out "$work/other"
[ "$(cat "$work/other/metrics.csv")" = "epoch,step,train_loss" ] || fail "a metrics file of another format was changed"
! grep -q $'\r' "$work/out" || fail "the progress bar wrote carriage returns into a file"

checks_done
