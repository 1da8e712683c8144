#!/bin/sh
# Builds bench/sgmat_gemm (the subgroup-matrix GEMM on Dawn, outside wgml) into local/: Dawn's
# libwebgpu_dawn.so from the rillfacet wheel and its declarations from the wgpudawn wheel, both
# pinned by hash (DESIGN.md, "Two runtimes"). local/ is ignored by git. The program finds the
# library beside itself. CC=clang works too.
set -eu
cd "$(dirname "$0")/.."
DEST=local
RILLFACET=rillfacet-0.1.3-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
RILLFACET_SHA256=371c6c831aa43310d2112a7001ce94b36b8e5753af23ce44ef57c9ce97793b70
WGPUDAWN=wgpudawn-0.32.0.4-cp311-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
WGPUDAWN_SHA256=4b99a6f0a386778694c6a7ecde658e848d9b3d6c3a33215581200c9cd619958f
mkdir -p "$DEST"
fetch() { # wheel, sha256, requirement
  if ! echo "$2  $DEST/$1" | sha256sum -c --quiet - 2>/dev/null; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 "$3" -d "$DEST"
    echo "$2  $DEST/$1" | sha256sum -c --quiet -
  fi
}
fetch "$RILLFACET" "$RILLFACET_SHA256" rillfacet==0.1.3
fetch "$WGPUDAWN" "$WGPUDAWN_SHA256" wgpudawn==0.32.0.4
[ -f "$DEST/libwebgpu_dawn.so" ] || python3 -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('rillfacet/libwebgpu_dawn.so'))" \
  "$DEST/$RILLFACET" "$DEST/libwebgpu_dawn.so"
python3 scripts/dawn_header.py "$DEST/$WGPUDAWN" > "$DEST/dawn_webgpu.h"
${CC:-cc} -O2 -std=c11 -Wall -Wextra -Werror -I"$DEST" -Isrc bench/sgmat_gemm.c src/ops/matmul/gemm_sgmat_wgsl.c \
  src/core/sbuf.c -o "$DEST/sgmat_gemm" -L"$DEST" -lwebgpu_dawn -lm -Wl,-rpath,'$ORIGIN'
echo "built $DEST/sgmat_gemm"
