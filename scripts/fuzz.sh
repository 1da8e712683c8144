#!/usr/bin/env bash
# Fuzzes the file readers: scripts/fuzz.sh BUILD_DIR runs BUILD_DIR/fuzz_safetensors (the
# safetensors parser) and BUILD_DIR/fuzz_idx (the IDX reader, plain and gzip), both built
# with -DWGML_FUZZ=ON (clang), one after the other, splitting FUZZ_SECONDS (default 60)
# between them, each over a seed corpus of small valid files made here. Exits non-zero if a
# fuzzer finds a crash, a leak or a sanitizer error; the input that did it is kept in
# BUILD_DIR/fuzz-artifacts/.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$1
targets=(safetensors idx)
for t in "${targets[@]}"; do
  if [ ! -x "$build_dir/fuzz_$t" ]; then
    echo "fuzz: $build_dir/fuzz_$t not found (configure with -DCMAKE_C_COMPILER=clang -DWGML_FUZZ=ON)" >&2
    exit 2
  fi
done
seconds=${FUZZ_SECONDS:-60}
each=$((seconds / ${#targets[@]}))
[ "$each" -ge 1 ] || each=1

work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/safetensors" "$work/idx" "$build_dir/fuzz-artifacts"

# safetensors seeds: valid files in the layout wgml writes (header padded to 8 bytes, data
# tight), plus the corner cases: no tensors, a scalar, an empty tensor, metadata.
python3 - "$work/safetensors" <<'PY'
import json, os, struct, sys

def safetensors(tensors, meta=None):
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        blob = struct.pack("<%df" % n, *[0.5 * i - 1.0 for i in range(n)])
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data

seeds = {
    "empty": safetensors([]),
    "meta_only": safetensors([], {"format": "wgml"}),
    "scalar": safetensors([("s", [])]),
    "vector": safetensors([("bias", [7])]),
    "matrix_meta": safetensors([("w", [3, 5]), ("b", [5])], {"format": "wgml", "step": "10"}),
    "four_d": safetensors([("x", [2, 3, 2, 1]), ("zero", [2, 0])]),
    "many": safetensors([("t%d" % i, [i % 3 + 1]) for i in range(12)]),
}
for name, blob in seeds.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(blob)
PY

# Tokens of the format, so mutations reach past the JSON syntax.
cat > "$work/safetensors.dict" <<'DICT'
"\"dtype\""
"\"F32\""
"\"F16\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"[0,4]"
"[]"
"4294967296"
"9223372036854775807"
"-1"
DICT

# IDX seeds: plain and gzip files of 1 to 4 dims, MNIST-shaped images and labels.
python3 - "$work/idx" <<'PY'
import gzip, os, struct, sys

def idx(dims, data=None):
    n = 1
    for d in dims:
        n *= d
    if data is None:
        data = bytes((37 * i + 11) % 256 for i in range(n))
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data

seeds = {
    "vector": idx([5]),
    "labels": idx([12], bytes(i % 10 for i in range(12))),
    "matrix": idx([6, 20]),
    "three_d": idx([2, 3, 4]),
    "four_d": idx([1, 2, 3, 4]),
    "mnist_images": idx([2, 28, 28]),
}
for name, blob in list(seeds.items()):
    seeds[name + ".gz"] = gzip.compress(blob, mtime=0)
for name, blob in seeds.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(blob)
PY

# The IDX magic and types, dims near the limits, a gzip header.
cat > "$work/idx.dict" <<'DICT'
"\x00\x00\x08\x01"
"\x00\x00\x08\x03"
"\x00\x00\x08\x04"
"\x00\x00\x0d\x01"
"\x00\x00\x00\x1c"
"\x00\x00\xea\x60"
"\x40\x00\x00\x00"
"\xff\xff\xff\xff"
"\x1f\x8b\x08\x00"
DICT

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for t in "${targets[@]}"; do
  fuzzer="$build_dir/fuzz_$t"
  echo "fuzz: running $fuzzer for ${each}s"
  status=0
  "$fuzzer" -max_total_time="$each" -max_len=4096 -timeout=10 -print_final_stats=1 \
    -dict="$work/$t.dict" -artifact_prefix="$build_dir/fuzz-artifacts/$t-" \
    "$work/$t" > "$work/$t.log" 2>&1 || status=$?
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::|Done|INFO: Seed|==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)" \
    "$work/$t.log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$work/$t.log" >&2
    echo "fuzz: fuzz_$t FAILED (exit $status); inputs kept in $build_dir/fuzz-artifacts/" >&2
    failed=1
  fi
done
[ "$failed" -eq 0 ] || exit 1
echo "fuzz: no crashes"
