# Sourced by the command-line tests (test_*_cli.sh, test_plot_metrics.sh, test_dist_train.sh)
# after they set $wgml. Gives them the checks' bookkeeping: $work, a scratch folder removed
# at exit; fail MESSAGE, which counts a failed check; checks_done, which reports and makes
# the exit status. And run_wgml, which runs $wgml. Under ASan (WGML_SANITIZE, gcc), LeakSanitizer
# reports lavapipe's own leaks from frames it cannot name once the driver is unloaded at exit;
# preloading the driver keeps it mapped, so tests/lsan.supp matches them (tests/harness.c does
# the same for the C tests). The ASan runtime must come first. Only the wgml runs get this,
# not python or the shell tools.
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
