# Sourced by the command-line tests (test_train_cli.sh, test_gpt_cli.sh) after they set
# $wgml: defines run_wgml, which runs it. Under ASan (WGML_SANITIZE, gcc), LeakSanitizer
# reports lavapipe's own leaks from frames it cannot name once the driver is unloaded at exit;
# preloading the driver keeps it mapped, so tests/lsan.supp matches them (tests/harness.c does
# the same for the C tests). The ASan runtime must come first. Only the wgml runs get this,
# not python or the shell tools.
preload=
asan_rt=$(ldd "$wgml" 2>/dev/null | awk '/libasan/ {print $3; exit}')
lvp=$(ldconfig -p 2>/dev/null | awk '/libvulkan_lvp\.so/ {print $NF; exit}')
if [ -n "$asan_rt" ] && [ -n "$lvp" ]; then preload="$asan_rt $lvp"; fi
run_wgml() { LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" "$wgml" "$@"; }
