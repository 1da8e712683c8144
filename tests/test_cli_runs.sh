#!/usr/bin/env bash
# The commands never lose a run, and the GPT commands' newer flags (issues 27 and 35), on tiny
# models and a small text folder:
#   - a folder holding a run is refused without --resume or --overwrite, naming the folder and
#     the way on; a second run into a folder in use is refused (its lock file); a lock or a
#     temporary file left by a dead process is cleaned up, one of a live process kept;
#   - SIGINT / SIGTERM during `gpt train` and `train`: the step in flight finishes (an evaluation
#     is cut short), a checkpoint is written,
#     the command says where and exits 128 + the signal; the resumed run ends where an unbroken
#     one does (the MLP's, stopped mid-epoch, byte for byte); a second signal stops at once;
#   - a progress line comes after the first step on a pipe; elapsed_s goes on across a resume;
#   - corrupt Adam moments and another rank count are refused when a checkpoint is read;
#   - --data FILE, --init-from, gpt eval (its loss against a float64 forward pass in Python),
#     --top-p, wgml eval on a GPT checkpoint, the sampler's statistics on their own line,
#     wgml info's compute features (--all: every one), bench's table in a readable unit;
#   - --precision mixed: its resume byte for byte, its metrics and checkpoint fields.
# Usage: test_cli_runs.sh WGML_BINARY [PYTHON]
set -u
wgml=$1
py=${2:-python3}
[ -x "$wgml" ] || { echo "test_cli_runs: $wgml is not an executable" >&2; exit 2; }
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done, run_wgml, fake_text, fake_fmnist

mkdir -p "$work/text"
fake_text "$work/text/a" 120
small=(--layers 1 --heads 2 --width 16 --block 8 --batch 2 --eval-batches 1)

# wait_for FILE PATTERN SECONDS: whether PATTERN shows up in FILE in time
wait_for() {
  local i
  for i in $(seq 1 $((${3} * 10))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# bg_wgml ARGS...: wgml in the background, $! its own pid. Job control on, so that a background
# job's SIGINT is not ignored (as a script's jobs are otherwise, and wgml leaves it so).
set -m
bg_wgml() { LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" "$wgml" "$@" & }
# a process id that is no longer running
sh -c 'exit 0' & dead=$!
wait $dead

# checkpoint surgery: set a metadata key, or one element of a tensor
cat >"$work/edit.py" <<'PY'
import json, struct, sys
path, what = sys.argv[1], sys.argv[2]
blob = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
if what == "meta":  # KEY VALUE: the header rewritten, padded as wgml pads it
    header["__metadata__"][sys.argv[3]] = sys.argv[4]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    blob = struct.pack("<Q", len(text)) + text + blob[8 + n:]
else:  # TENSOR INDEX VALUE
    start = 8 + n + header[sys.argv[3]]["data_offsets"][0] + 4 * int(sys.argv[4])
    blob[start:start + 4] = struct.pack("<f", float(sys.argv[5]))
open(path, "wb").write(bytes(blob))
PY

# ---- a run stopped by SIGINT: a progress line early on a pipe, then a checkpoint
bg_wgml gpt train --data "$work/text" "${small[@]}" --eval-every 5 --steps 100000 --out "$work/a" >"$work/a.log" 2>&1
pid=$!
wait_for "$work/a.log" "^step 1/100000" 120 || fail "no progress line after the first step on a pipe: $(cat "$work/a.log")"
# the folder is in use: a second run is refused, --overwrite too
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 2 --out "$work/a" --overwrite >/dev/null 2>"$work/err"
rc=$?
[ $rc = 2 ] && grep -q "$work/a is in use by another run (process $pid" "$work/err" ||
  fail "a second run into a folder in use exited $rc: $(cat "$work/err")"
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || fail "gpt train stopped by SIGINT exited $rc, want 130: $(tail -n 3 "$work/a.log")"
grep -q "stopped by SIGINT after step [0-9]*: checkpoint $work/a/gpt.safetensors (continue with: wgml gpt train --resume" \
  "$work/a.log" || fail "the stop does not say where the checkpoint is: $(tail -n 2 "$work/a.log")"
stopped=$(sed -n 's/.*stopped by SIGINT after step \([0-9]*\):.*/\1/p' "$work/a.log")
[ "$(tail -n 1 "$work/a/metrics.csv" | cut -d, -f1)" = "$stopped" ] || fail "the metrics do not end at step $stopped"
[ ! -e "$work/a/.wgml.lock" ] || fail "the lock file outlived the run"

# ---- the folder holds a run: refused without --resume or --overwrite, the run untouched
cp "$work/a/gpt.safetensors" "$work/a.before"
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 2 --out "$work/a" >/dev/null 2>"$work/err"
rc=$?
[ $rc = 2 ] && grep -q "$work/a holds a run (gpt.safetensors, metrics.csv): continue it with --resume $work/a/gpt.safetensors" \
  "$work/err" && grep -q -- "--overwrite" "$work/err" || fail "a run into a folder holding one exited $rc: $(cat "$work/err")"
cmp -s "$work/a.before" "$work/a/gpt.safetensors" || fail "a refused run changed the checkpoint"
# a run that failed at its first step left the metrics' header alone: no run, the folder is free
mkdir -p "$work/hdr" && head -n 1 "$work/a/metrics.csv" >"$work/hdr/metrics.csv"
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 2 --out "$work/hdr" >/dev/null 2>"$work/err" ||
  fail "a folder holding a metrics header alone was refused: $(cat "$work/err")"
# a run that wrote metrics but no checkpoint (killed before it, as under mpirun): no --resume offered
mkdir -p "$work/nock" && cp "$work/a/metrics.csv" "$work/nock/"
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 2 --out "$work/nock" >/dev/null 2>"$work/err"
rc=$?
[ $rc = 2 ] && grep -q "$work/nock holds a run (metrics.csv) that wrote no checkpoint, so it cannot be continued" "$work/err" &&
  ! grep -q -- "--resume" "$work/err" || fail "a folder without a checkpoint: exit $rc: $(cat "$work/err")"

# ---- resumed after a stale lock and temporaries of a dead process: elapsed_s goes on
echo $dead >"$work/a/.wgml.lock"
: >"$work/a/gpt.safetensors.tmp.$dead"
: >"$work/a/gpt.safetensors.tmp.$$"  # a live process's: kept
# the stopped run's clock set far past what any resume takes, so that a restart at 0 shows
"$py" - "$work/a/metrics.csv" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head, last = lines[0].split(","), lines[-1].split(",")
last[head.index("elapsed_s")] = "1000.000"
open(sys.argv[1], "w").write("\n".join(lines[:-1] + [",".join(last)]) + "\n")
PY
last_elapsed=1000
run_wgml gpt train --resume "$work/a/gpt.safetensors" --steps $((stopped + 2)) >/dev/null 2>"$work/err" ||
  fail "resuming past a stale lock failed: $(cat "$work/err")"
[ ! -e "$work/a/gpt.safetensors.tmp.$dead" ] || fail "a dead process's temporary file was left"
[ -e "$work/a/gpt.safetensors.tmp.$$" ] || fail "a live process's temporary file was removed"
rm -f "$work/a/gpt.safetensors.tmp.$$"
"$py" - "$work/a/metrics.csv" "$stopped" "$last_elapsed" <<'PY' || fail "the resumed metrics are wrong"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
stopped, before = int(sys.argv[2]), float(sys.argv[3])
assert [int(r["step"]) for r in rows] == list(range(1, stopped + 3)), [r["step"] for r in rows]
assert all(float(r["elapsed_s"]) > before for r in rows[stopped:]), [r["elapsed_s"] for r in rows]  # not restarted at 0
PY

# --overwrite replaces the run
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 2 --out "$work/a" --overwrite >/dev/null 2>"$work/err" ||
  fail "--overwrite failed: $(cat "$work/err")"
[ "$(cut -d, -f1 "$work/a/metrics.csv" | tr '\n' ' ')" = "step 1 2 " ] || fail "--overwrite kept the old metrics"

# --init-from a checkpoint of the folder --overwrite would clear: refused before anything goes
cp "$work/a/gpt.safetensors" "$work/a.before"
rc=0
run_wgml gpt train --data "$work/text" --init-from "$work/a/gpt.safetensors" --steps 2 --out "$work/a" --overwrite \
  >/dev/null 2>"$work/err" || rc=$?
[ "$rc" = 2 ] && grep -q "removes from" "$work/err" || fail "--init-from inside the --overwrite folder exited $rc: $(cat "$work/err")"
cmp -s "$work/a/gpt.safetensors" "$work/a.before" || fail "--init-from with --overwrite removed the checkpoint it starts from"

# interrupted NAME DELAY SECOND [ARGS...]: gpt train ARGS into $work/NAME in the background; after
# its first step's line, SIGINT DELAY s later, and a second one SECOND s after that (0: none);
# its exit status in $rc
interrupted() {
  local name=$1 delay=$2 second=$3 pid
  shift 3
  bg_wgml gpt train --data "$work/text" "$@" --steps 1000 --out "$work/$name" >"$work/$name.log" 2>&1
  pid=$!
  wait_for "$work/$name.log" "^step 1/1000" 300 || fail "gpt train did not start: $(cat "$work/$name.log")"
  sleep "$delay"
  kill -INT $pid
  if [ "$second" != 0 ]; then sleep "$second"; kill -INT $pid; fi  # (two signals pending at once would be one)
  wait $pid
  rc=$?
}

# ---- a signal during a long evaluation stops it: the checkpoint at once, no validation loss
interrupted e 1 0 "${small[@]}" --eval-every 2 --eval-batches 200000
[ $rc = 130 ] && grep -q "stopped by SIGINT after step 2" "$work/e.log" && [ -e "$work/e/gpt.safetensors" ] ||
  fail "a SIGINT in the evaluation: exit $rc, $(tail -n 2 "$work/e.log")"
[ "$(sed -n 3p "$work/e/metrics.csv" | cut -d, -f1,5)" = "2," ] || fail "an interrupted evaluation wrote a loss: $(cat "$work/e/metrics.csv")"

# ---- a signal in a step of seconds stops after that step (not the next one), with its checkpoint
slow=(--layers 2 --heads 4 --width 128 --block 128 --batch 16 --eval-every 0)
interrupted s 0.5 0 "${slow[@]}"
[ $rc = 130 ] && grep -q "stopped by SIGINT after step 2:" "$work/s.log" && [ -e "$work/s/gpt.safetensors" ] ||
  fail "a SIGINT in step 2: exit $rc, $(tail -n 2 "$work/s.log")"

# ---- a second signal stops at once: in a step of seconds, before its checkpoint
interrupted b 0.5 1 "${slow[@]}"
[ $rc = 130 ] || fail "two SIGINTs: exit $rc, want 130"
! grep -q "stopped by" "$work/b.log" && [ ! -e "$work/b/gpt.safetensors" ] ||
  fail "the second SIGINT did not stop at once: $(tail -n 2 "$work/b.log")"
# its lock is stale now: --overwrite takes the folder
run_wgml gpt train --data "$work/text" "${small[@]}" --steps 1 --out "$work/b" --overwrite >/dev/null 2>"$work/err" ||
  fail "a stale lock blocked a run: $(cat "$work/err")"

# ---- wgml train (the MLP) stopped by SIGTERM mid-run, resumed: the unbroken run's checkpoint
fake_fmnist "$py" "$work/fm" 256 32 3
mlp=(--data "$work/fm" --hidden 8 --batch 4 --seed 3)
bg_wgml train "${mlp[@]}" --epochs 100000 --out "$work/m" >"$work/m.log" 2>&1
pid=$!
wait_for "$work/m.log" "^epoch  1/" 120 || fail "wgml train printed no epoch line on a pipe: $(cat "$work/m.log")"
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] || fail "wgml train stopped by SIGTERM exited $rc, want 143: $(tail -n 2 "$work/m.log")"
grep -q "stopped by SIGTERM after .*: checkpoint $work/m/checkpoint.safetensors (continue with: wgml train --resume" \
  "$work/m.log" || fail "wgml train's stop does not say where: $(tail -n 2 "$work/m.log")"
step=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\):.*/\1/p' "$work/m.log")
epoch=$(sed -n 's/.*stopped by SIGTERM after epoch \([0-9]*\):.*/\1/p' "$work/m.log")
epochs=$(( ${step:+step / 64 + 1}${epoch:+epoch + 1} ))  # 64 steps an epoch: the one it stopped in, or the next
run_wgml train --data "$work/fm" --resume "$work/m/checkpoint.safetensors" --epochs $epochs >/dev/null 2>"$work/err" ||
  fail "resuming the MLP failed: $(cat "$work/err")"
run_wgml train "${mlp[@]}" --epochs $epochs --out "$work/m_full" >/dev/null 2>"$work/err" || fail "the unbroken MLP run failed"
cmp -s "$work/m/checkpoint.safetensors" "$work/m_full/checkpoint.safetensors" ||
  fail "the MLP stopped (step '$step', epoch '$epoch') and resumed ends unlike the unbroken run"
[ "$(cut -d, -f1-7 "$work/m/metrics.csv")" = "$(cut -d, -f1-7 "$work/m_full/metrics.csv")" ] ||
  fail "the stopped and resumed MLP's metrics differ from the unbroken run's"

# ---- checkpoints refused on read: corrupt moments, another rank count
ck=$work/a/gpt.safetensors
expect() { # expect STATUS PATTERN -- ARGS...
  local want=$1 pat=$2; shift 3
  run_wgml "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc = "$want" ] && grep -q -- "$pat" "$work/err" || fail "wgml $* exited $rc (want $want), said: $(cat "$work/err") (want '$pat')"
}
cp "$ck" "$work/neg.safetensors"
"$py" "$work/edit.py" "$work/neg.safetensors" tensor h.0.mlp.w1.v 3 -0.5
expect 1 "optimiser moment 'h.0.mlp.w1.v' holds -0.5 at element 3" -- gpt train --resume "$work/neg.safetensors" --out "$work/n"
! grep -q "learning rate\|--lr" "$work/err" || fail "a corrupt moment is blamed on the learning rate"
cp "$ck" "$work/nan.safetensors"
"$py" "$work/edit.py" "$work/nan.safetensors" tensor wte.m 0 nan
expect 1 "optimiser moment 'wte.m' holds nan" -- gpt train --resume "$work/nan.safetensors" --out "$work/n"
cp "$ck" "$work/r2.safetensors"
"$py" "$work/edit.py" "$work/r2.safetensors" meta ranks 2
expect 1 "written by a run on 2 ranks and this one has 1: resume it on 2 (mpirun -np 2, or mpiexec -n 2)" -- \
  gpt train --resume "$work/r2.safetensors" --out "$work/n"
mck=$work/m/checkpoint.safetensors
cp "$mck" "$work/mneg.safetensors"
"$py" "$work/edit.py" "$work/mneg.safetensors" tensor b0.v 1 -2
expect 1 "optimiser moment 'b0.v' holds -2 at element 1" -- train --data "$work/fm" --resume "$work/mneg.safetensors" \
  --epochs 200000 --out "$work/n"
cp "$mck" "$work/mr.safetensors"
"$py" "$work/edit.py" "$work/mr.safetensors" meta ranks 3
expect 1 "run on 3 ranks and this one has 1" -- train --data "$work/fm" --resume "$work/mr.safetensors" --epochs 200000 \
  --out "$work/n"

# ---- --data FILE and --init-from: a new run (its own lr and steps) from a checkpoint's weights
fake_text "$work/one.txt" 40
run_wgml gpt train --init-from "$ck" --data "$work/one.txt" --steps 3 --lr 0.02 --save-init --out "$work/i" >/dev/null \
  2>"$work/err" || fail "--init-from with --data FILE failed: $(cat "$work/err")"
grep -q "from 1 file" "$work/err" || fail "--data FILE did not read the one file: $(head -n 1 "$work/err")"
"$py" - "$ck" "$work/i/init.safetensors" "$work/i/gpt.safetensors" "$work/one.txt" <<'PY' || fail "--init-from's run is wrong"
import json, os, struct, sys
def read(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = json.loads(blob[8:8 + n])
    meta = h.pop("__metadata__")
    return meta, {k: blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
_, src = read(sys.argv[1])
_, init = read(sys.argv[2])
meta, end = read(sys.argv[3])
assert all(init[k] == src[k] for k in init if k != "vocab"), "the initial weights are not the checkpoint's"
assert meta["step"] == "3" and meta["total_steps"] == "3" and abs(float(meta["lr"]) - 0.02) < 1e-9, meta
assert meta["data"] == os.path.realpath(sys.argv[4]), meta["data"]
PY
expect 2 "--layers cannot be given with --init-from" -- gpt train --init-from "$ck" --layers 2 --out "$work/n"
expect 2 "--resume and --init-from exclude each other" -- gpt train --init-from "$ck" --resume "$ck"
printf 'Zebras~%.0s' $(seq 1 40) >"$work/odd.txt"
expect 1 "holds the byte 0x5a ('Z'), which is not in the vocabulary" -- gpt train --init-from "$ck" --data "$work/odd.txt" --out "$work/n"

# ---- gpt eval: the loss of a file against a float64 forward pass of the checkpoint
head -c 45 "$work/one.txt" >"$work/five.txt"  # 44 predictions: 5 windows of 8 and one of 4
run_wgml gpt eval --checkpoint "$ck" --data "$work/five.txt" --batch 2 >"$work/out" 2>"$work/err" ||
  fail "gpt eval failed: $(cat "$work/err")"
"$py" - "$ck" "$work/five.txt" "$(cat "$work/out")" <<'PY' || fail "gpt eval's loss is wrong: $(cat "$work/out")"
import json, math, re, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n])
meta = h.pop("__metadata__")
def tensor(v):
    a, b = v["data_offsets"]
    flat = struct.unpack("<%df" % ((b - a) // 4), blob[8 + n + a:8 + n + b])
    if len(v["shape"]) == 1: return list(flat)
    r, c = v["shape"]
    return [list(flat[i * c:(i + 1) * c]) for i in range(r)]
p = {k: tensor(v) for k, v in h.items()}
C, H, L, T0, eps = int(meta["width"]), int(meta["heads"]), int(meta["layers"]), int(meta["block"]), float(meta["norm_eps"])
D = C // H
vocab = [int(b) for b in p["vocab"]]
ids = [vocab.index(b) for b in open(sys.argv[2], "rb").read()]
def ln(x, g, b):
    m = sum(x) / len(x); v = sum((t - m) ** 2 for t in x) / len(x)
    return [(t - m) / math.sqrt(v + eps) * gg + bb for t, gg, bb in zip(x, g, b)]
def mm(x, w, b=None):
    out = [sum(x[i] * w[i][j] for i in range(len(x))) for j in range(len(w[0]))]
    return [o + bb for o, bb in zip(out, b)] if b else out
total, count = 0.0, 0
for w0 in range(0, len(ids) - 1, T0):
    T = min(T0, len(ids) - 1 - w0)
    xs, ys = ids[w0:w0 + T], ids[w0 + 1:w0 + T + 1]
    x = [[a + b for a, b in zip(p["wte"][t], p["wpe"][i])] for i, t in enumerate(xs)]
    for l in range(L):
        g = lambda name: p["h.%d.%s" % (l, name)]
        qkv = [mm(ln(r, g("ln1.w"), g("ln1.b")), g("attn.wqkv"), g("attn.bqkv")) for r in x]
        att = []
        for i in range(T):
            row = []
            for hh in range(H):
                q = qkv[i][hh * D:(hh + 1) * D]
                s = [sum(a * b for a, b in zip(q, qkv[j][C + hh * D:C + (hh + 1) * D])) / math.sqrt(D) for j in range(i + 1)]
                mx = max(s); e = [math.exp(t - mx) for t in s]; z = sum(e)
                row += [sum(e[j] / z * qkv[j][2 * C + hh * D + d] for j in range(i + 1)) for d in range(D)]
            att.append(row)
        x = [[a + b for a, b in zip(x[i], mm(att[i], g("attn.wo"), g("attn.bo")))] for i in range(T)]
        for i in range(T):
            u = mm(ln(x[i], g("ln2.w"), g("ln2.b")), g("mlp.w1"), g("mlp.b1"))
            u = [0.5 * t * (1 + math.erf(t / math.sqrt(2))) for t in u]
            x[i] = [a + b for a, b in zip(x[i], mm(u, g("mlp.w2"), g("mlp.b2")))]
    for i in range(T):
        logits = mm(ln(x[i], p["lnf.w"], p["lnf.b"]), [list(c) for c in zip(*p["wte"])])
        mx = max(logits)
        total += mx + math.log(sum(math.exp(t - mx) for t in logits)) - logits[ys[i]]
        count += 1
want = total / count
m = re.search(r"loss ([0-9.]+)  perplexity ([0-9.]+)  ([0-9.]+) bits a byte  \((\d+) predicted tokens of " + re.escape(sys.argv[2]), sys.argv[3])
loss, ppl, bits, scored = float(m[1]), float(m[2]), float(m[3]), int(m[4])
assert scored == count == 44, (scored, count)
assert abs(loss - want) < 2e-4, (loss, want)
assert abs(ppl - math.exp(loss)) < 2e-3 * ppl and abs(bits - loss / math.log(2)) < 2e-3, (ppl, bits)
PY
# the validation split of the checkpoint's own text by default; --tokens N scores N predictions
run_wgml gpt eval --checkpoint "$ck" --tokens 100 >"$work/out" 2>"$work/err" && grep -q "(100 predicted tokens of the validation split of $work/text" "$work/out" ||
  fail "gpt eval on the validation split: $(cat "$work/out" "$work/err")"
# a run on one file: by default its validation split too, not the text it trained on
run_wgml gpt eval --checkpoint "$work/i/gpt.safetensors" >"$work/out" 2>"$work/err" &&
  grep -q "the validation split of $work/one.txt" "$work/out" ||
  fail "gpt eval of a file's run by default: $(cat "$work/out" "$work/err")"
expect 2 "--checkpoint FILE is required" -- gpt eval
expect 2 "ambiguous option '--st' (--steps, --stop-at" -- gpt train --st 10
expect 2 "is a GPT checkpoint (of wgml gpt train): score it with wgml gpt eval --checkpoint" -- eval "$ck"

# ---- sampling: --top-p, and the statistics on a line of their own on stderr
run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 0 >"$work/both" 2>&1
tail -n 1 "$work/both" | grep -q "^20 tokens in [0-9.]* s: [0-9]* tokens/s$" ||
  fail "the sampler's statistics are not on their own line: $(cat "$work/both")"
g=$(head -n -1 "$work/both")
p=$(run_wgml gpt sample --checkpoint "$ck" --prompt "Line" --tokens 20 --temperature 1 --top-p 1e-6 2>/dev/null)
[ -n "$g" ] && [ "$p" = "$g" ] || fail "--top-p 1e-6 (the likeliest token alone) is not greedy: '$p' vs '$g'"
a=$(run_wgml gpt sample --checkpoint "$ck" --tokens 40 --top-p 0.9 --seed 4 2>/dev/null)
b=$(run_wgml gpt sample --checkpoint "$ck" --tokens 40 --top-p 0.9 --seed 4 2>/dev/null)
c=$(run_wgml gpt sample --checkpoint "$ck" --tokens 40 --temperature 0 2>/dev/null)
[ ${#a} = 41 ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] || fail "--top-p 0.9 is not reproducible, or is greedy: '$a' '$b' '$c'"
expect 2 "--top-p" -- gpt sample --checkpoint "$ck" --top-p 0
expect 2 "--top-p" -- gpt sample --checkpoint "$ck" --top-p 1.5

# ---- wgml info: the features compute uses, every one with --all
run_wgml info >"$work/info" 2>/dev/null && run_wgml info --all >"$work/info_all" 2>/dev/null || fail "wgml info failed"
sed -n '/^features/,/^  (and/p' "$work/info" | grep "^  [a-z]" >"$work/f_compute"
sed -n '/^features/,$p' "$work/info_all" | grep "^  [a-z]" >"$work/f_all"
[ -s "$work/f_compute" ] && ! grep -q "texture-\|depth" "$work/f_compute" || fail "wgml info lists drawing features by default"
[ -z "$(comm -23 <(sort "$work/f_compute") <(sort "$work/f_all"))" ] || fail "wgml info --all lacks a feature of wgml info"
if [ "$(wc -l <"$work/f_all")" -gt "$(wc -l <"$work/f_compute")" ]; then
  grep -q "for drawing: wgml info --all" "$work/info" || fail "wgml info does not say what it left out"
fi
# which kernels the matrix modes run: the split mode on the matrix units exactly where the
# matrix mode is (both need shader-f16 there), else the f32 kernels; the JSON says the same
m=$(grep "^matmul f16_math=matrix " "$work/info") && sp=$(grep "^matmul f16_math=split " "$work/info") || fail "wgml info lacks the matmul modes"
case "$m" in *"no subgroup"* | *unsupported*) [[ "$sp" == *"f32 kernels"* ]] ;; *) [[ "$sp" == *"hi and lo halves"* ]] ;; esac ||
  fail "wgml info: '$m' but '$sp'"
run_wgml info --json >"$work/info_json" 2>/dev/null || fail "wgml info --json failed"
case "$sp" in *"hi and lo"*) want=subgroup_matrix_hilo ;; *) want=f32 ;; esac
grep -q "\"matmul_f16_math_split\": \"$want\"" "$work/info_json" || fail "wgml info --json: matmul_f16_math_split is not $want"

# ---- --precision mixed (issue 31): f16 matmuls with loss scaling; the scaler's state and the
# precision travel in the checkpoint, so a stopped and resumed run ends byte for byte where an
# unbroken one does; metrics.csv gains loss_scale and skipped_steps
mixed=("${small[@]}" --steps 8 --eval-every 4 --data "$work/text" --precision mixed)
run_wgml gpt train "${mixed[@]}" --out "$work/mx" >/dev/null 2>"$work/err" || fail "--precision mixed failed: $(cat "$work/err")"
run_wgml gpt train "${mixed[@]}" --stop-at 4 --out "$work/mr" >/dev/null 2>&1 || fail "--stop-at 4 failed"
# its metrics as an older version wrote them (without the last two columns): the resume adds them
"$py" - "$work/mr/metrics.csv" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
open(sys.argv[1], "w").write("\n".join(",".join(l.split(",")[:7]) for l in lines) + "\n")
PY
run_wgml gpt train --resume "$work/mr/gpt.safetensors" >/dev/null 2>"$work/err" || fail "mixed resume failed: $(cat "$work/err")"
"$py" - "$work/mr/metrics.csv" <<'PY' || fail "an older metrics file was not brought up to the new columns"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].endswith(",loss_scale,skipped_steps") and all(l.count(",") == 8 for l in lines), lines
PY
cmp -s "$work/mx/gpt.safetensors" "$work/mr/gpt.safetensors" || fail "a resumed mixed-precision run differs from an unbroken one"
"$py" - "$work/mx/metrics.csv" "$work/mx/gpt.safetensors" <<'PY' || fail "mixed precision's metrics or checkpoint are wrong"
import csv, json, struct, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert list(rows[0])[-2:] == ["loss_scale", "skipped_steps"], list(rows[0])
synced = [r for r in rows if r["loss_scale"]]
assert synced and all(float(r["loss_scale"]) == 65536 and r["skipped_steps"] == "0" for r in synced), synced
blob = open(sys.argv[2], "rb").read()
meta = json.loads(blob[8:8 + struct.unpack("<Q", blob[:8])[0]])["__metadata__"]
assert meta["precision"] == "1" and float(meta["loss_scale"]) == 65536 and meta["loss_scale_updates"] == "8", meta
PY
run_wgml gpt train "${small[@]}" --steps 1 --precision f16 --out "$work/bad" >/dev/null 2>"$work/err" && fail "--precision f16 was taken"
grep -q "want f32, mixed, f32split or auto" "$work/err" || fail "--precision f16's message: $(cat "$work/err")"
# f32split: the f32 kernels here (no matrix units), the run's precision in its checkpoint
run_wgml gpt train "${small[@]}" --steps 2 --precision f32split --out "$work/fs" >/dev/null 2>"$work/err" ||
  fail "--precision f32split failed: $(cat "$work/err")"
"$py" - "$work/fs/gpt.safetensors" <<'PY' || fail "f32split's checkpoint does not record its precision"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
assert json.loads(blob[8:8 + struct.unpack("<Q", blob[:8])[0]])["__metadata__"]["precision"] == "2"
PY

# ---- bench: the table in a unit its value reads in (never "0.00 TFLOP/s"), --json as declared
WGML_BENCH_ONLY=gemm_128 run_wgml bench matmul --quick --json >"$work/bench.json" 2>"$work/bench.err" ||
  fail "wgml bench matmul failed: $(tail -n 3 "$work/bench.err")"
"$py" - "$work/bench.json" "$work/bench.err" <<'PY' || fail "bench's table unit is wrong: $(grep gemm_128 "$work/bench.err")"
import json, re, sys
found = [v for group in json.load(open(sys.argv[1])).values() if isinstance(group, dict)
         for k, v in group.items() if k == "gemm_128^3"]
assert found and found[0]["unit"] == "TFLOP/s", found
m = re.search(r"gemm_128\^3 +[0-9.]+ ms +([0-9.]+) ([TGMk])FLOP/s", open(sys.argv[2]).read())
shown, scale = float(m[1]), {"T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3}[m[2]]
assert shown >= 1 or m[2] == "k", shown  # 1.00 .. 999.99 of its unit
assert abs(shown * scale - found[0]["value"] * 1e12) <= 0.006 * scale, (shown, m[2], found[0]["value"])
PY

checks_done
