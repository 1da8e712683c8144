#!/usr/bin/env bash
# A folder holding MPICH's Hydra launcher and libmpich with the libraries they need beyond the C
# library, from Debian's packages installed here (scripts/deps.sh installs mpich for the tests),
# for scripts/device_dist.sh's MPICH=DIR on a machine whose image has Open MPI only (unpacking
# Debian's packages over it broke its mpirun; a folder of its own leaves it alone).
# Usage: mpich_folder.sh DIR
set -eu
OUTDIR=$1
mkdir -p "$OUTDIR/bin" "$OUTDIR/lib/ucx"
cp /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy "$OUTDIR/bin/"
MPICH_LIB=$(ldconfig -p | awk '/libmpich\.so\.12 /{print $NF; exit}')
[ -n "$MPICH_LIB" ] || { echo "mpich_folder.sh: no libmpich.so.12 here (apt-get install libmpich12)" >&2; exit 1; }
cp -L "$MPICH_LIB" "$OUTDIR/lib/"
# the libraries they link, but the C library's own (the GPU machine has those)
for f in /usr/bin/mpiexec.hydra /usr/bin/hydra_pmi_proxy "$MPICH_LIB"; do ldd "$f"; done |
  awk '/=>/ {print $3}' | sort -u | grep -v -E '/lib(c|m|dl|pthread|rt|resolv)\.so' |
  while read -r lib; do cp -L "$lib" "$OUTDIR/lib/"; done
# UCX's shared-memory transport (its InfiniBand ones need libraries a GPU machine may lack)
UCX=$(dirname "$MPICH_LIB")/ucx
[ ! -d "$UCX" ] || cp -L "$UCX"/libuct_cma.so.0 "$OUTDIR/lib/ucx/" 2>/dev/null || true
echo "$OUTDIR: $(find "$OUTDIR/lib" -name '*.so*' | wc -l) libraries, $(du -sh "$OUTDIR" | cut -f1)"
