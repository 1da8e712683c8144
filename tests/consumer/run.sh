#!/usr/bin/env bash
# wgml used by an outside program (tests/consumer/main.c), three ways:
#  1. installed from BUILD_DIR into a fresh prefix, built with pkg-config;
#  2. the same install found by CMake's find_package(wgml) (shared and static);
#  3. wgml's source pulled into the outside project with FetchContent (add_subdirectory),
#     which must not bring wgml's tests, its command or its -Werror along;
#  4. examples/gpt_sample.c (the public GPT API, wgml_gpt.h) built with pkg-config, sampling
#     from a checkpoint that the installed wgml trains.
# Each program runs without LD_LIBRARY_PATH: libwgml and wgpu-native are found through the
# runpath. Usage: run.sh BUILD_DIR [SOURCE_DIR]
set -eu
build=$1
src=$(cd "$(dirname "$0")" && pwd)
wgml_src=${2:-$(cd "$src/../.." && pwd)}
work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "run.sh: $*" >&2; exit 1; }
run() { env -u LD_LIBRARY_PATH "$@" | grep -qx "consumer: ok" || fail "$* did not print 'consumer: ok'"; }

# The README's example is this program, word for word.
awk '/^```c$/ {c=1; next} c && /^```$/ {exit} c' "$wgml_src/README.md" > "$work/readme.c"
tail -n +4 "$src/main.c" | cmp -s - "$work/readme.c" || fail "README's first example differs from tests/consumer/main.c"

cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in include/wgml.h include/wgml_gpt.h share/doc/wgml/LICENSE lib/libwgml.so.0 lib/libwgml.a lib/wgml/libwgpu_native.so lib/pkgconfig/wgml.pc \
         lib/cmake/wgml/wgmlConfig.cmake lib/cmake/wgml/wgmlConfigVersion.cmake bin/wgml; do
  [ -e "$work/prefix/$f" ] || fail "the install has no $f"
done
env -u LD_LIBRARY_PATH "$work/prefix/bin/wgml" --version | grep -q "^wgml " || fail "installed wgml --version"
# The library and the command load where MPI is not installed: MPI is opened only under a
# launcher (src/train/dist.c)
! readelf -d "$work/prefix/lib/libwgml.so.0" | grep -q "NEEDED.*libmpi" || fail "libwgml.so.0 needs MPI"
! env -u LD_LIBRARY_PATH ldd "$work/prefix/bin/wgml" | grep -q "libmpi" || fail "the installed wgml needs MPI: $(ldd "$work/prefix/bin/wgml")"
# wgpu-native is wgml's private copy, not a libwgpu_native.so in lib/ to clash with another
[ ! -e "$work/prefix/lib/libwgpu_native.so" ] || fail "the install put libwgpu_native.so into lib/"
for bin in lib/libwgml.so.0 bin/wgml; do
  env -u LD_LIBRARY_PATH ldd "$work/prefix/$bin" | grep -q "libwgpu_native.so => $work/prefix/\(bin/\.\./\)\?lib/wgml/libwgpu_native.so" \
    || fail "$bin does not load lib/wgml/libwgpu_native.so: $(ldd "$work/prefix/$bin")"
done

echo "== pkg-config"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$src/main.c" -o "$work/consumer_pc" $(pkg-config --cflags --libs wgml)
run "$work/consumer_pc"

echo "== find_package"
cmake -S "$src" -B "$work/pkg" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_C_FLAGS="-Wall -Werror" >/dev/null
cmake --build "$work/pkg" >/dev/null
run "$work/pkg/consumer"
run "$work/pkg/consumer_static"
# The shared build really uses the installed libwgml.so.0 (not a copy of the objects).
env -u LD_LIBRARY_PATH ldd "$work/pkg/consumer" | grep -q "$work/prefix/lib/libwgml.so.0" || fail "consumer does not load the installed libwgml.so.0"

echo "== FetchContent"
cmake -S "$src" -B "$work/src" -DWGML_FROM=source -DWGML_SOURCE="$wgml_src" >/dev/null
cmake --build "$work/src" -j "${JOBS:-2}" >/dev/null
run "$work/src/consumer"
run "$work/src/consumer_static"
ntests=$(cd "$work/src" && ctest -N | sed -n 's/^Total Tests: //p')
[ "$ntests" = 0 ] || fail "wgml added $ntests tests to the outside project"
[ ! -e "$work/src/_deps/wgml-build/wgml" ] || fail "wgml built its command inside the outside project"
if grep -rqs -- "-Werror" "$work/src/_deps/wgml-build/CMakeFiles" --include=flags.make; then
  fail "wgml compiled with -Werror inside the outside project"
fi
echo "== the GPT API: a checkpoint trained by the installed wgml, sampled by examples/gpt_sample.c"
cc -std=c11 -Wall -Wextra -Werror "$wgml_src/examples/gpt_sample.c" -o "$work/gpt_sample" $(pkg-config --cflags --libs wgml)
mkdir -p "$work/text"
for i in $(seq 1 150); do echo "Line $i: the quick brown fox jumps over the lazy dog."; done >"$work/text/a"
env -u LD_LIBRARY_PATH "$work/prefix/bin/wgml" gpt train --data "$work/text" --layers 1 --heads 2 --width 16 --block 16 \
  --batch 2 --steps 3 --eval-every 0 --eval-batches 1 --out "$work/gpt" 2>"$work/gpt.log" \
  || fail "the installed wgml gpt train failed: $(cat "$work/gpt.log")"
env -u LD_LIBRARY_PATH "$work/gpt_sample" "$work/gpt/gpt.safetensors" "the quick" 40 0 >"$work/sample.txt" 2>"$work/sample.err" \
  || fail "gpt_sample failed: $(cat "$work/sample.err")"
# the prompt, then 40 tokens (one byte each, from the text's vocabulary), then the newline
[ "$(head -c 9 "$work/sample.txt")" = "the quick" ] || fail "gpt_sample did not print the prompt first: $(cat "$work/sample.txt")"
[ "$(wc -c <"$work/sample.txt")" -ge 50 ] || fail "gpt_sample printed fewer than 40 tokens: $(cat "$work/sample.txt")"
tr -d '\n' <"$work/sample.txt" | tr -d 'a-zA-Z0-9 .:' | grep -q . && fail "gpt_sample printed bytes outside the vocabulary"
# greedy sampling is the same twice, and the same as the command's own sampler
env -u LD_LIBRARY_PATH "$work/gpt_sample" "$work/gpt/gpt.safetensors" "the quick" 40 0 | cmp -s - "$work/sample.txt" \
  || fail "greedy gpt_sample differs between two runs"
env -u LD_LIBRARY_PATH "$work/prefix/bin/wgml" gpt sample --checkpoint "$work/gpt/gpt.safetensors" --prompt "the quick" \
  --tokens 40 --temperature 0 2>/dev/null | cmp -s - "$work/sample.txt" || fail "gpt_sample and wgml gpt sample differ at temperature 0"
! env -u LD_LIBRARY_PATH "$work/gpt_sample" "$work/missing.safetensors" 2>"$work/missing.err" >/dev/null \
  || fail "gpt_sample of a missing file succeeded"
grep -q "WGML_ERROR_IO" "$work/missing.err" || fail "gpt_sample of a missing file: $(cat "$work/missing.err")"
echo "consumer: all four ways ok"
