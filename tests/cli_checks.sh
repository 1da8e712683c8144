# Sourced by the command-line tests (test_*_cli.sh, test_plot_metrics.sh, test_dist_train.sh)
# after they set $wgml. Gives them the checks' bookkeeping: $work, a scratch folder removed
# at exit; fail MESSAGE, which counts a failed check; checks_done, which reports and makes
# the exit status. And run_wgml, which runs $wgml. Under ASan (WGML_SANITIZE, gcc), LeakSanitizer
# reports lavapipe's own leaks from frames it cannot name once the driver is unloaded at exit;
# preloading the driver keeps it mapped, so tests/lsan.supp matches them (tests/harness.c does
# the same for the C tests). The ASan runtime must come first. Only the wgml runs get this,
# not python or the shell tools. fake_fmnist and fake_text (at the end) make their data.
preload=
asan_rt=$(ldd "$wgml" 2>/dev/null | awk '/libasan/ {print $3; exit}')
lvp=$(ldconfig -p 2>/dev/null | awk '/libvulkan_lvp\.so/ {print $NF; exit}')
if [ -n "$asan_rt" ] && [ -n "$lvp" ]; then preload="$asan_rt $lvp"; fi
run_wgml() { LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" "$wgml" "$@"; }

checks_name=$(basename "$0" .sh)
work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_$checks_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
checks_done() {
  if [ "$failures" -ne 0 ]; then
    echo "$checks_name: $failures check(s) failed" >&2
    exit 1
  fi
  echo "$checks_name: all checks passed"
}

# fake_fmnist PYTHON DIR NTRAIN NTEST SEED [SIGNAL]: Fashion-MNIST's four IDX files in DIR with
# random labels 0..9 and random pixels; SIGNAL=1 lifts the pixels p with p % 10 == label, so
# that a model learns something (the loss moves).
fake_fmnist() {
  "$1" - "$2" "$3" "$4" "$5" "${6:-0}" <<'PY'
import os, random, struct, sys
out, ntrain, ntest, seed, signal = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
os.makedirs(out, exist_ok=True)
rng = random.Random(seed)
for prefix, n in (("train", ntrain), ("t10k", ntest)):
    labels = [rng.randrange(10) for _ in range(n)]
    pixels = bytes(min(255, rng.randrange(128) + (96 if p % 10 == label else 0)) if signal else rng.randrange(256)
                   for label in labels for p in range(784))
    for kind, dims, data in (("images-idx3", [n, 28, 28], pixels), ("labels-idx1", [n], bytes(labels))):
        with open(f"{out}/{prefix}-{kind}-ubyte", "wb") as f:
            f.write(bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data)
PY
}

# fake_text FILE LINES: LINES lines of English-like text
fake_text() {
  local i
  for i in $(seq 1 "$2"); do echo "Line $i: the quick brown fox jumps over the lazy dog, $((i * 7 % 13)) times."; done >"$1"
}
