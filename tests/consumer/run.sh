#!/usr/bin/env bash
# Installs wgml from a build folder into a fresh prefix, then builds tests/consumer/main.c
# against the installed tree only, with pkg-config, and runs it without LD_LIBRARY_PATH:
# the library and wgpu-native are found through the runpath.
# Usage: run.sh BUILD_DIR
set -eu
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in include/wgml.h lib/libwgml.so.0 lib/libwgml.a lib/pkgconfig/wgml.pc bin/wgml; do
  [ -e "$work/prefix/$f" ] || { echo "run.sh: the install has no $f" >&2; exit 1; }
done
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$src/main.c" -o "$work/consumer" $(pkg-config --cflags --libs wgml)
env -u LD_LIBRARY_PATH "$work/consumer"
env -u LD_LIBRARY_PATH "$work/prefix/bin/wgml" --version
