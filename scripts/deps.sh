#!/usr/bin/env bash
# Installs what wgml needs on a fresh Debian bookworm machine. Idempotent.
# Usage: scripts/deps.sh          the library, the wgml command and `make demo` (`make deps`)
#        scripts/deps.sh --test   that and the tools of the tests (`make test` runs it)
#  - apt: Vulkan loader + Mesa's lavapipe (the adapter on machines with no GPU),
#    zlib and jansson (IDX datasets, safetensors headers), the Fashion-MNIST data set, the
#    fortunes text (about 2.6 MB of English for the GPT), CMake;
#    with --test also: Open MPI (data-parallel training over several processes, wgml_dist_*:
#    a build finds it and then opens it under mpirun; test_dist_train) and MPICH beside it
#    (the same build under MPICH's mpiexec.mpich; Open MPI stays mpirun), clang and its
#    compiler-rt (libFuzzer, ASan, UBSan) for the fuzz run of `make test`, OpenBLAS (the CPU
#    peer of `wgml bench matmul`, scripts/cpu_bench.sh), Vulkan's headers and SPIR-V tools
#    (bench/vk_capture.c, the kernels' SPIR-V and driver statistics).
#  - PyPI: the pinned `wgpu` wheel, hash-checked; its wgpu-native library and headers
#    are extracted into third_party/wgpu-native (ignored by git); and a virtual environment
#    .venv (ignored by git) with scripts/requirements.txt's pinned packages (plots, the
#    Python package's tests) and scripts/requirements-wheel.txt's (the wheel's build tools,
#    hash-checked), rebuilt when either file changes.
# Set WGPU_NATIVE_DIR to an official wgpu-native release folder to skip the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEEL=wgpu-0.32.0-py3-none-manylinux_2_28_x86_64.whl
WHEEL_SHA256=6499a31b5a29a10b4f1089fea4a0806411f42605fa86b6c0b543a07ca0de8568
DEST=third_party/wgpu-native
APT_PACKAGES="mesa-vulkan-drivers libvulkan1 zlib1g-dev libjansson-dev dataset-fashion-mnist fortunes cmake"
TEST_APT_PACKAGES="libopenmpi-dev openmpi-bin mpich libmpich12 clang libclang-rt-14-dev libopenblas-dev libvulkan-dev spirv-tools"
case "${1:-}" in
  "") ;;
  --test) APT_PACKAGES="$APT_PACKAGES $TEST_APT_PACKAGES" ;;
  *) echo "usage: scripts/deps.sh [--test]" >&2; exit 2 ;;
esac

missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "deps: installing apt packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The Python environment: remade when a requirements file changes.
REQ_SHA=$(cat scripts/requirements.txt scripts/requirements-wheel.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.requirements.sha256 2>/dev/null)" != "$REQ_SHA" ]; then
  echo "deps: creating .venv from scripts/requirements.txt"
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check --only-binary=:all: --no-deps -r scripts/requirements.txt
  # the Python wheel's build tools (scripts/build_wheel.sh), hash-checked
  .venv/bin/python -m pip install -q --disable-pip-version-check --only-binary=:all: --no-deps --require-hashes \
    -r scripts/requirements-wheel.txt
  echo "$REQ_SHA" > .venv/.requirements.sha256
fi

./scripts/deps_dawn.sh  # Dawn, the second runtime, and the Mesa 25 lavapipe it needs (third_party/dawn)

if [ -n "${WGPU_NATIVE_DIR:-}" ]; then
  echo "deps: using wgpu-native from WGPU_NATIVE_DIR=$WGPU_NATIVE_DIR"
  exit 0
fi
if [ -f "$DEST/.sha256" ] && [ "$(cat "$DEST/.sha256")" = "$WHEEL_SHA256" ]; then
  exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "deps: downloading $WHEEL from PyPI"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 "wgpu==0.32.0" -d "$tmp"
echo "$WHEEL_SHA256  $tmp/$WHEEL" | sha256sum -c --quiet -
mkdir -p "$DEST/include/webgpu" "$DEST/lib"
python3 - "$tmp/$WHEEL" "$DEST" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for src, dst in [("wgpu/resources/webgpu.h", "include/webgpu/webgpu.h"),
                     ("wgpu/resources/wgpu.h", "include/webgpu/wgpu.h"),
                     ("wgpu/resources/libwgpu_native-release.so", "lib/libwgpu_native.so")]:
        with z.open(src) as f, open(f"{dest}/{dst}", "wb") as o:
            o.write(f.read())
PY
echo "$WHEEL_SHA256" > "$DEST/.sha256"
echo "deps: wgpu-native 29.0.1.1 ready in $DEST"
