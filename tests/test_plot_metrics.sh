#!/usr/bin/env bash
# scripts/plot_metrics.py on the metrics of real (tiny) runs of `wgml train` (128 steps, so
# the trailing mean is drawn) and `wgml gpt train` (6 steps, 2 validation losses):
#   - the PNG is written (beside the csv by default, or to -o), decodes, has exactly the
#     pixels asked for, and is not blank: many colours, and the lines' own colours (the
#     training series' blue, the test/validation series' red) are in it;
#   - bad input (a missing or empty file, a header alone, an unknown header, a row that is not
#     numbers, a size out of range) is exit 2 with a message naming it, never a traceback.
# Usage: test_plot_metrics.sh WGML_BINARY PYTHON (the project's .venv python: matplotlib, PIL)
set -u
wgml=$1
py=$2
script="$(cd "$(dirname "$0")/.." && pwd)/scripts/plot_metrics.py"
[ -x "$wgml" ] || { echo "test_plot_metrics: $wgml is not an executable" >&2; exit 2; }
if ! "$py" -c "import matplotlib, PIL" 2>/dev/null; then
  echo "test_plot_metrics: $py cannot import matplotlib and PIL (make deps creates .venv; or -DWGML_VENV_PYTHON=...)" >&2
  exit 1
fi
. "$(dirname "$0")/cli_checks.sh"  # $work, fail, checks_done, run_wgml
export MPLCONFIGDIR=$work/mpl  # matplotlib's cache in the test's folder, not $HOME

fake_fmnist "$py" "$work/data" 256 64 5  # random pixels and labels
run_wgml train --data "$work/data" --hidden 16 --batch 4 --epochs 2 --out "$work/mlp" >"$work/log" 2>&1 ||
  fail "wgml train failed: $(tail -c 600 "$work/log")"
mkdir -p "$work/text"
fake_text "$work/text/a" 100
run_wgml gpt train --data "$work/text" --layers 1 --heads 2 --width 16 --block 8 --batch 2 --steps 6 --eval-every 3 \
  --eval-batches 1 --out "$work/gpt" >"$work/log" 2>&1 || fail "wgml gpt train failed: $(tail -c 600 "$work/log")"

# looks_drawn PNG WIDTH HEIGHT PANELS: the checks of a picture
cat >"$work/check.py" <<'PY'
import sys
from PIL import Image
path, w, h, panels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def why(msg):
    sys.exit(msg)
try:
    im = Image.open(path)
    im.load()
except Exception as e:
    why(f"does not decode: {e}")
if im.size != (w, h):
    why(f"is {im.size[0]} x {im.size[1]} pixels, want {w} x {h}")
rgb = im.convert("RGB")
colours = rgb.getcolors(maxcolors=w * h)
if len(colours) <= 8:
    why(f"is blank: {len(colours)} colours")
count = dict((c, n) for n, c in colours)
# matplotlib's tab:blue and tab:red, where the lines are solid; in each panel's half for two
for name, rgb_ in (("blue (training)", (31, 119, 180)), ("red (held out)", (214, 39, 40))):
    if count.get(rgb_, 0) < 20:
        why(f"has {count.get(rgb_, 0)} pixels of {name}: the series were not drawn")
    if panels == 2:
        for half, box in (("top", (0, 0, w, h // 2)), ("bottom", (0, h // 2, w, h))):
            if rgb_ not in [c for _, c in rgb.crop(box).getcolors(maxcolors=w * h)]:
                why(f"has no {name} in its {half} panel")
PY
looks_drawn() {
  local why
  why=$("$py" "$work/check.py" "$@" 2>&1) || fail "$1: $why"
}
ok() { # ok WHAT ARGS...: the script must succeed
  local what=$1
  shift
  "$py" "$script" "$@" >"$work/out" 2>"$work/err" || fail "$what: exit $?: $(cat "$work/err")"
}

# the MLP's: default name and size, two panels
ok "the MLP's metrics" "$work/mlp/metrics.csv"
[ -f "$work/mlp/metrics.png" ] || fail "no metrics.png beside the MLP's metrics.csv"
grep -qF "$work/mlp/metrics.png" "$work/out" || fail "the script does not say where the PNG is: $(cat "$work/out")"
looks_drawn "$work/mlp/metrics.png" 1200 800 2
# the GPT's: -o, a title, and a size whose inches x dpi falls just short of the pixels in
# floating point (4.02 x 100 = 401.99999999999994: truncated, it would be 401)
ok "the GPT's metrics" "$work/gpt/metrics.csv" -o "$work/gpt.png" --width 402 --height 829 --title "a tiny GPT"
looks_drawn "$work/gpt.png" 402 829 1
# the smallest size taken, two panels in it
ok "the MLP's metrics at 300 x 201" "$work/mlp/metrics.csv" -o "$work/small.png" --width 300 --height 201
looks_drawn "$work/small.png" 300 201 2

# bad input: exit 2, a message naming the problem, no traceback
bad() { # bad WHAT NEEDLE ARGS...
  local what=$1 needle=$2 rc=0
  shift 2
  "$py" "$script" "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" = 2 ] || fail "$what: exit $rc, want 2: $(cat "$work/err")"
  grep -qF -- "$needle" "$work/err" || fail "$what: the message lacks '$needle': $(cat "$work/err")"
  ! grep -q "Traceback" "$work/err" || fail "$what: a traceback: $(cat "$work/err")"
  echo "  $what -> $(head -n 1 "$work/err")"
}
bad "a missing file" "no such file" "$work/none.csv"
: >"$work/empty.csv"
bad "an empty file" "is empty" "$work/empty.csv"
head -n 1 "$work/mlp/metrics.csv" >"$work/header.csv"
bad "a header alone" "no rows" "$work/header.csv"
printf 'epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s,epoch_seconds\n1,468,0.5,0.8,0.4,0.8,1000,60\n' \
  >"$work/old.csv"
bad "an unknown header" "unknown header 'epoch,step,train_loss" "$work/old.csv"
{ head -n 3 "$work/gpt/metrics.csv"; echo "4,abc,0.1,,,,,,"; } >"$work/junk.csv"
bad "a row that is not numbers" "line 4: loss is 'abc'" "$work/junk.csv"
{ head -n 3 "$work/gpt/metrics.csv"; echo "4,2.5"; } >"$work/short.csv"
bad "a row cut short" "line 4: 2 fields, want 9" "$work/short.csv"
bad "a width of 5 pixels" "--width is 5" "$work/gpt/metrics.csv" --width 5
bad "no csv" "required: csv"
for f in empty header old junk short; do
  [ ! -e "$work/$f.png" ] || fail "$f.png was written for bad input"
done

checks_done
