#!/usr/bin/env bash
# CTest's test_python: the package as a user gets it.
#  1. `pip install ./python` into a throwaway venv (offline: the package builds with its own
#     backend), which sees .venv's pinned numpy, cffi and pytest through a .pth file;
#  2. the pytest suite, run from outside the source tree so that it imports the installed
#     package, against this build's libwgml.so.0 (WGML_LIBRARY);
#  3. scripts/build_wheel.sh's wheel (the library and wgpu-native inside) into a second venv,
#     imported and used with no WGML_LIBRARY: the bundled copy is found.
# Usage: run_ctest.sh BUILD_DIR LIBWGML [WGML_CLI]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
lib=$(realpath "$2")
py=$root/.venv/bin/python
[ -x "$py" ] || { echo "run_ctest.sh: no $py; run 'make deps' (scripts/deps.sh) first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_python.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONDONTWRITEBYTECODE=1

parent_site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
make_venv() {
  "$py" -m venv --without-pip "$1"
  "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' | {
    read -r site; echo "$parent_site" > "$site/_wgml_parent.pth"; }
}

make_venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps "$root/python"
cd "$work"
export WGML_LIBRARY=$lib
"$work/venv/bin/python" -c "import wgml; assert wgml.__file__.startswith('$work/venv'), wgml.__file__"
WGML_CLI=${3:-} "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir "$root/python" "$root/python/tests"

"$root/scripts/build_wheel.sh" "$build" "$work/dist" >/dev/null
make_venv "$work/venv2"
"$work/venv2/bin/python" -m pip install -q --no-deps "$work"/dist/wgml-*.whl
env -u WGML_LIBRARY "$work/venv2/bin/python" - "$work/venv2" <<'PY'
import sys
import numpy as np
import wgml
assert wgml.library_path.startswith(sys.argv[1]) and "/_lib/" in wgml.library_path, wgml.library_path
x = wgml.tensor(np.arange(6.0).reshape(2, 3))
assert (x @ x.T).numpy().tolist() == [[5.0, 14.0], [14.0, 50.0]]
print("bundled wheel: %s on %s" % (wgml.library_path, wgml.info()["name"]))
PY
