#!/usr/bin/env bash
# Fuzzes the safetensors parser: scripts/fuzz.sh BUILD_DIR runs BUILD_DIR/fuzz_safetensors
# (built with -DWGML_FUZZ=ON, clang) for FUZZ_SECONDS (default 60) over a seed corpus of
# small valid files made here. Exits non-zero if the fuzzer finds a crash, a leak or a
# sanitizer error; the input that did it is kept in BUILD_DIR/fuzz-artifacts/.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build_dir=$1
fuzzer="$build_dir/fuzz_safetensors"
if [ ! -x "$fuzzer" ]; then
  echo "fuzz: $fuzzer not found (configure with -DCMAKE_C_COMPILER=clang -DWGML_FUZZ=ON)" >&2
  exit 2
fi
seconds=${FUZZ_SECONDS:-60}

work=$(mktemp -d "${TMPDIR:-/tmp}/wgml_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build_dir/fuzz-artifacts"

# Seeds: valid files in the layout wgml writes (header padded to 8 bytes, data tight),
# plus the corner cases: no tensors, a scalar, an empty tensor, metadata.
python3 - "$work/corpus" <<'PY'
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

echo "fuzz: running $fuzzer for ${seconds}s"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
  -dict="$work/safetensors.dict" -artifact_prefix="$build_dir/fuzz-artifacts/" \
  "$work/corpus" > "$work/log" 2>&1 || status=$?
grep -E "^(#[0-9]+[[:space:]]+DONE|stat::|Done|INFO: Seed|==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)" \
  "$work/log" || true
if [ "$status" -ne 0 ]; then
  tail -n 60 "$work/log" >&2
  echo "fuzz: FAILED (exit $status); inputs kept in $build_dir/fuzz-artifacts/" >&2
  exit 1
fi
echo "fuzz: no crashes"
