#!/usr/bin/env bash
# CTest's test_python: the package as a user gets it from a wheel.
#  1. scripts/build_wheel.sh: `pip wheel ./python` compiles libwgml from this source tree
#     (scikit-build-core, CMake; its build folder BUILD_DIR/python-wheel is kept, so a rebuild
#     is incremental) and auditwheel repairs it into a manylinux wheel bundling wgpu-native
#     and jansson;
#  2. a fresh venv in an empty folder gets the wheel (and sees .venv's pinned numpy, cffi and
#     pytest through a .pth file); the tests and examples are copied there and run with no
#     WGML_LIBRARY and no build tree in sight: the bundled library must be the one loaded,
#     with the bundled jansson.
# Usage: run_ctest.sh BUILD_DIR [WGML_CLI]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
py=$root/.venv/bin/python
[ -x "$py" ] || { echo "run_ctest.sh: no $py; run 'make deps' (scripts/deps.sh) first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_python.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PYTHONDONTWRITEBYTECODE=1
unset WGML_LIBRARY WGML_HEADER

# the wheel's library by this build's compiler (make test-clang tests a clang-built one)
cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
[ -z "$cc" ] || export CC=$cc
started=$(date +%s)
"$root/scripts/build_wheel.sh" "$work/dist" "$build/python-wheel" >/dev/null
wheel=$(ls "$work"/dist/wgml-*manylinux*.whl)
echo "wheel: $(basename "$wheel") in $(( $(date +%s) - started )) s"

parent_site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir "$work/empty"
cd "$work/empty"
"$py" -m venv --without-pip venv
venv_site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$parent_site" > "$venv_site/_wgml_parent.pth"
venv/bin/python -m pip install -q --no-deps "$wheel"
cp -r "$root/python/tests" "$root/python/examples" .
rm -f tests/run_ctest.sh
venv/bin/python - "$work/empty/venv" <<'PY'
import sys
import numpy as np
import wgml
venv = sys.argv[1]
assert wgml.__file__.startswith(venv), wgml.__file__
assert wgml.library_path.startswith(venv) and "/_lib/" in wgml.library_path, wgml.library_path
import wgml.gpt  # the bundled wgml_gpt.h, beside the bundled wgml.h
assert wgml.gpt.gpt_header_path == wgml.header_path.replace("wgml.h", "wgml_gpt.h") and "/_include/" in wgml.header_path
maps = open("/proc/self/maps").read()
jansson = {l.split()[-1] for l in maps.splitlines() if "libjansson" in l}
assert jansson and all(p.startswith(venv) for p in jansson), jansson  # the wheel's, not the system's
x = wgml.tensor(np.arange(6.0).reshape(2, 3))
assert (x @ x.T).numpy().tolist() == [[5.0, 14.0], [14.0, 50.0]]
print("wheel %s: %s, jansson %s, on %s" % (wgml.__version__, wgml.library_path, jansson.pop(), wgml.info()["name"]))
PY
# Dawn travels in the wheel too, and runs there (on lavapipe it needs the newer Mesa deps.sh unpacks)
dawn_icd=$root/third_party/dawn/mesa/lvp_icd.json
if [ -f "$root/third_party/dawn/lib/libwebgpu_dawn.so" ] && [ -f "$dawn_icd" ]; then
  VK_DRIVER_FILES=$dawn_icd venv/bin/python - "$work/empty/venv" <<'PY'
import sys
import numpy as np
import wgml
ctx = wgml.Context(runtime="dawn")
info = ctx.info()
assert info["runtime"] == "dawn" and info["runtime_library"].startswith(sys.argv[1]), info
x = wgml.tensor(np.arange(6.0).reshape(2, 3), ctx=ctx)
assert (x @ x.T).numpy().tolist() == [[5.0, 14.0], [14.0, 50.0]]
print("wheel on Dawn: %s" % info["runtime_library"])
PY
fi
WGML_CLI=${2:-} venv/bin/python -m pytest -q -p no:cacheprovider --rootdir "$work/empty" tests
