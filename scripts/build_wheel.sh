#!/usr/bin/env bash
# Builds the Python package's wheel with libwgml.so.0 and libwgpu_native.so inside it
# (wgml/_lib, found by the package before the system's), from a build folder (installed
# into a temporary prefix first, so the library carries the install's runpath, $ORIGIN) or
# from an install prefix (with lib/libwgml.so.0).
# Usage: scripts/build_wheel.sh BUILD_OR_PREFIX [OUT_DIR (default dist/)]
# Install the result with: pip install OUT_DIR/wgml-*.whl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: build_wheel.sh BUILD_OR_PREFIX [OUT_DIR]}
out=${2:-$root/dist}
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wgml_wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -f "$src/CMakeCache.txt" ]; then
  cmake --install "$src" --prefix "$tmp/prefix" >/dev/null
  prefix=$tmp/prefix
else
  prefix=$src
fi
libdir=""
for d in "$prefix/lib" "$prefix/lib64" "$prefix"/lib/*-linux-gnu; do
  if [ -f "$d/libwgml.so.0" ]; then libdir=$d; break; fi
done
[ -n "$libdir" ] || { echo "build_wheel.sh: no libwgml.so.0 under $prefix/lib" >&2; exit 1; }
# wgpu-native: the install's private copy (lib/wgml/), or beside the library; the wheel
# holds both side by side (libwgml.so.0's runpath names its own folder too)
wgpu=""
for f in "$libdir/wgml/libwgpu_native.so" "$libdir/libwgpu_native.so"; do
  if [ -f "$f" ]; then wgpu=$f; break; fi
done
[ -n "$wgpu" ] || { echo "build_wheel.sh: no libwgpu_native.so in $libdir/wgml or beside $libdir/libwgml.so.0" >&2; exit 1; }
mkdir -p "$tmp/libs"
cp "$libdir/libwgml.so.0" "$wgpu" "$tmp/libs/"
libdir=$tmp/libs

mkdir -p "$out"
# The package's own backend (python/_build) needs nothing from the network.
WGML_WHEEL_LIBDIR=$libdir "$python" -m pip wheel -q --no-index --no-deps --disable-pip-version-check \
  -w "$out" "$root/python"
ls "$out"/wgml-*.whl
