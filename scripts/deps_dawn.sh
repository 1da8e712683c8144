#!/usr/bin/env bash
# Installs Dawn, wgml's second WebGPU runtime (chosen at run time: WGML_RUNTIME, --runtime),
# into third_party/dawn (ignored by git). Idempotent; called by scripts/deps.sh.
#  - lib/libwebgpu_dawn.so: Dawn (October 2026) with its C API exported, from the pinned
#    rillfacet wheel on PyPI (the only file wgml takes from it), hash-checked.
#  - include/dawn_webgpu.h: Dawn's webgpu.h, generated from the cffi declarations in the pinned
#    wgpudawn wheel (Dawn v20261009): wgml compiles against wgpu-native's header and
#    scripts/check_dawn_abi.py checks that every struct, enum and function wgml uses means the
#    same in this one.
#  - mesa/: Mesa 25's lavapipe from Debian's bookworm-backports, unpacked here (not installed:
#    the system keeps bookworm's Mesa 22.3.6, which Dawn refuses and wgpu-native runs on).
#    apt checks the package against Debian's signed index; its hash is pinned here as well.
#    mesa/lvp_icd.json is the Vulkan driver file to name in VK_DRIVER_FILES (CTest does).
# Set WGML_NO_DAWN=1 to skip all of it (wgml then runs on wgpu-native only).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${WGML_NO_DAWN:-0}" = 1 ] && exit 0

DEST=third_party/dawn
DAWN_WHEEL=rillfacet-0.1.3-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
DAWN_WHEEL_SHA256=371c6c831aa43310d2112a7001ce94b36b8e5753af23ce44ef57c9ce97793b70
DECL_WHEEL=wgpudawn-0.32.0.4-cp311-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
DECL_WHEEL_SHA256=4b99a6f0a386778694c6a7ecde658e848d9b3d6c3a33215581200c9cd619958f
MESA_VERSION=25.0.7-2~bpo12+1
MESA_DEB=mesa-vulkan-drivers_25.0.7-2~bpo12+1_amd64.deb
MESA_DEB_SHA256=3899f1800424c60a05df5d6913076a526ca8fdbabec43672cd397563d1ca3263
STAMP="$DAWN_WHEEL_SHA256 $DECL_WHEEL_SHA256 $MESA_DEB_SHA256"

if [ "$(uname -m)" != x86_64 ]; then
  echo "deps: no pinned Dawn for $(uname -m); wgml runs on wgpu-native only"
  exit 0
fi
if [ -f "$DEST/.sha256" ] && [ "$(cat "$DEST/.sha256")" = "$STAMP" ]; then
  exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$DEST/lib" "$DEST/include" "$DEST/mesa"

echo "deps: downloading Dawn ($DAWN_WHEEL, $DECL_WHEEL) from PyPI"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 "rillfacet==0.1.3" "wgpudawn==0.32.0.4" -d "$tmp"
echo "$DAWN_WHEEL_SHA256  $tmp/$DAWN_WHEEL" | sha256sum -c --quiet -
echo "$DECL_WHEEL_SHA256  $tmp/$DECL_WHEEL" | sha256sum -c --quiet -
python3 - "$tmp/$DAWN_WHEEL" "$DEST/lib/libwebgpu_dawn.so" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as o:
    o.write(z.read("rillfacet/libwebgpu_dawn.so"))
PY
# Dawn's C API has no version call: wgml info reads this
echo "October 2026 (rillfacet 0.1.3; declarations v20261009)" > "$DEST/lib/libwebgpu_dawn.so.version"
python3 scripts/dawn_header.py "$tmp/$DECL_WHEEL" > "$DEST/include/dawn_webgpu.h"

# Mesa 25 lavapipe: apt's own download from bookworm-backports, through a private list folder
# (the machine's sources are left alone), then unpacked, not installed.
echo "deps: downloading $MESA_DEB (bookworm-backports) for Dawn on lavapipe"
mkdir -p "$tmp/apt/lists/partial" "$tmp/apt/cache"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" \
  > "$tmp/apt/sources.list"
APT_OPTS=(-o Dir::Etc::SourceList="$tmp/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$tmp/apt/lists" -o Dir::Cache="$tmp/apt/cache" -o APT::Sandbox::User=root)
apt-get -qq "${APT_OPTS[@]}" update
(cd "$tmp" && apt-get -qq "${APT_OPTS[@]}" download "mesa-vulkan-drivers=$MESA_VERSION")
echo "$MESA_DEB_SHA256  $tmp/$MESA_DEB" | sha256sum -c --quiet -
dpkg-deb -x "$tmp/$MESA_DEB" "$tmp/mesa"
cp "$tmp/mesa/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so" "$DEST/mesa/"
# The loader takes a library path relative to the json's own folder.
printf '{\n  "file_format_version": "1.0.0",\n  "ICD": {"library_path": "./libvulkan_lvp.so", "api_version": "1.4.305"}\n}\n' \
  > "$DEST/mesa/lvp_icd.json"
echo "$STAMP" > "$DEST/.sha256"
echo "deps: Dawn ready in $DEST (Mesa $MESA_VERSION lavapipe in $DEST/mesa)"
