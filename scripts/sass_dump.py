#!/usr/bin/env python3
"""The machine code NVIDIA's driver made of wgml's kernels, from its shader disk cache.

On the GPU machine, run the kernels with the driver's disk cache in a folder of its own and
bring that folder back (the device tool's $OUT):

    export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
           __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache
    wgml bench attention ...; cp -r /tmp/nvcache $OUT/

Here: python3 scripts/sass_dump.py CACHE_DIR OUT_DIR writes each kernel's SASS to OUT_DIR and
prints a line a kernel: its registers and how many of each instruction kind it has (shared
memory loads and stores by width, matrix products, barriers, local-memory spills).

What the cache holds (read off driver 580 on an H200, not documented by NVIDIA): each .bin
file is a run of zstd frames; the larger ones decompress to an "NVuc" container whose section
table (32-byte entries from byte 32: type, size, offset from the container's start) has the
registers (type 3: a u32 count) and the code (type 1: raw SASS, which `nvdisasm -b SM90`
reads). Needs `zstd` (Debian's package) and nvdisasm (the CUDA toolkit's, or PyPI's
nvidia-cuda-nvdisasm: scripts/requirements-sass.txt). The architecture: --arch (SM90: Hopper).
"""
import argparse
import collections
import os
import re
import shutil
import struct
import subprocess
import sys

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
KINDS = ["HMMA", "LDSM", "LDS", "LDS.64", "LDS.128", "STS", "STS.U16", "STS.64", "STS.128",
         "LDG", "STG", "BAR.SYNC", "SHFL", "MUFU", "LDL", "STL"]


def frames(blob):
    """The zstd frames of a cache file, each decompressed (a frame runs to the next magic;
    zstd writes what it decoded and then complains of the bytes after the frame)."""
    at = [m.start() for m in re.finditer(re.escape(ZSTD_MAGIC), blob)]
    for i, start in enumerate(at):
        end = at[i + 1] if i + 1 < len(at) else len(blob)
        r = subprocess.run(["zstd", "-d", "-c", "-q"], input=blob[start:end], capture_output=True)
        if r.stdout:
            yield r.stdout


def kernel_of(container):
    """(registers, code) of an NVuc container, or None"""
    if container[8:12] != b"NVuc":
        return None
    c = container[8:]
    regs, code = None, None
    for at in range(32, min(len(c), 32 + 32 * 32), 32):
        kind, size, off = struct.unpack_from("<3I", c, at)
        if kind == 3 and size >= 4 and off + 4 <= len(c):
            regs = struct.unpack_from("<I", c, off)[0]
        elif kind == 1 and size >= 16 and off + size <= len(c):
            code = c[off:off + size]
    return (regs, code) if code else None


def counts(sass):
    ops = collections.Counter()
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", sass):
        op = m.group(1)
        base = op.split(".")[0]
        ops[base] += 1
        for k in KINDS:
            if "." in k and op.startswith(k):
                ops[k] += 1
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache")
    ap.add_argument("out")
    ap.add_argument("--arch", default="SM90")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "/usr/local/cuda/bin/nvdisasm")
    a = ap.parse_args()
    if not shutil.which("zstd"):
        sys.exit("sass_dump: needs zstd (apt-get install zstd)")
    if not os.access(a.nvdisasm, os.X_OK):
        sys.exit("sass_dump: no nvdisasm at %s (--nvdisasm; PyPI's nvidia-cuda-nvdisasm has one)" % a.nvdisasm)
    os.makedirs(a.out, exist_ok=True)
    n = 0
    for d, _, files in os.walk(a.cache):
        for f in sorted(files):
            if not f.endswith(".bin"):
                continue
            for frame in frames(open(os.path.join(d, f), "rb").read()):
                k = kernel_of(frame)
                if not k:
                    continue
                regs, code = k
                name = "k%03d" % n
                n += 1
                raw = os.path.join(a.out, name + ".code")
                open(raw, "wb").write(code)
                r = subprocess.run([a.nvdisasm, "-b", a.arch, raw], capture_output=True, text=True)
                open(os.path.join(a.out, name + ".sass"), "w").write(r.stdout)
                ops = counts(r.stdout)
                line = " ".join("%s=%d" % (k, ops[k]) for k in KINDS if ops[k])
                print("%s  %6d bytes  registers %s  %s" % (name, len(code), regs, line))
    if not n:
        sys.exit("sass_dump: no kernels found under %s" % a.cache)


if __name__ == "__main__":
    main()
