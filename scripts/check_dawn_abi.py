#!/usr/bin/env python3
"""Checks that wgml's calls mean the same to Dawn as to wgpu-native.

Usage: check_dawn_abi.py SOURCE_DIR WGPU_NATIVE_INCLUDE_DIR DAWN_HEADER

wgml compiles against wgpu-native's webgpu.h and calls Dawn through the same declarations
(src/runtime/loader.c). That is sound only where the two headers agree: for every wgpu*
function wgml's library, tests, tools and benchmarks call, its parameters; for every WGPU type
they name (and the structs those contain), its fields in order; for every enum or flag value
they name, its number. Names only wgpu-native has (wgpu.h's extras) must appear in
src/runtime/wgpu_native.c alone, and the Dawn-only numbers in src/runtime/dawn.c must be the
Dawn header's. Exit status 1, with each difference printed, where they are not.
"""
import os
import re
import sys

# wgpu-native's own: used only by src/runtime/wgpu_native.c (or loaded there by loader.c)
WGPU_NATIVE_ONLY_FILES = {"src/runtime/wgpu_native.c", "src/runtime/loader.c", "src/runtime/loader.h"}
SOURCE_DIRS = ("src", "tests", "tools", "bench")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse(text):
    """(enum and flag values, struct fields, function signatures) of a header."""
    text = strip_comments(text)
    text = re.sub(r"\bWGPU_(EXPORT|NULLABLE|FUNCTION_ATTRIBUTE|STRUCTURE_ATTRIBUTE|ENUM_ATTRIBUTE)\b", "", text)
    values, structs, funcs = {}, {}, {}

    def number(v):
        v = v.strip().rstrip("uUlL")
        try:
            return int(v, 0)
        except ValueError:
            m = re.fullmatch(r"(\d+)\s*<<\s*(\d+)", v)
            return int(m.group(1)) << int(m.group(2)) if m else v

    for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)", text, re.S):
        for item in m.group(1).split(","):
            if "=" in item:
                k, v = item.split("=", 1)
                values[k.strip()] = number(v)
    for m in re.finditer(r"static\s+const\s+\w+\s+(\w+)\s*=\s*([^;]+);", text):
        values[m.group(1)] = number(m.group(2))
    for m in re.finditer(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        structs[m.group(2)] = [re.sub(r"\s+", " ", f).strip() for f in m.group(1).split(";") if f.strip()]
    for m in re.finditer(r"([\w\s\*]+?)\b(wgpu[A-Z]\w*)\s*\(([^)]*)\)\s*;", text):
        sig = re.sub(r"\s+", " ", "%s(%s)" % (m.group(1).replace("typedef", ""), m.group(3))).strip()
        funcs[m.group(2)] = re.sub(r"\s*([*(),])\s*", r"\1", sig)
    return values, structs, funcs


def used_names(src_dir):
    """name -> files naming it, over wgml's C sources."""
    names = {}
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(src_dir, top)):
            for f in files:
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, src_dir)
                for n in set(re.findall(r"\b(?:WGPU|wgpu)[A-Z]\w*", strip_comments(open(path).read()))):
                    names.setdefault(n, set()).add(rel)
    return names


def main():
    src_dir, wgpu_inc, dawn_header = sys.argv[1:4]
    native = parse(open(os.path.join(wgpu_inc, "webgpu", "webgpu.h")).read())
    extra = parse(open(os.path.join(wgpu_inc, "webgpu", "wgpu.h")).read())
    dawn = parse(open(dawn_header).read())
    used = used_names(src_dir)
    problems = []

    # the structs named, and the ones inside them
    types = {n for n in used if n in native[1]}
    todo = list(types)
    while todo:
        for t in re.findall(r"\bWGPU\w+", " ".join(native[1].get(todo.pop(), []))):
            if t in native[1] and t not in types:
                types.add(t)
                todo.append(t)

    for name, files in sorted(used.items()):
        if name in extra[0] or name in extra[1] or name in extra[2]:
            if not files <= WGPU_NATIVE_ONLY_FILES:
                problems.append("%s is wgpu-native's own (wgpu.h), named in %s: keep it in src/runtime/wgpu_native.c"
                                % (name, ", ".join(sorted(files - WGPU_NATIVE_ONLY_FILES))))
            continue
        if name in native[0] and native[0][name] != dawn[0].get(name):
            problems.append("%s is %r in wgpu-native, %r in Dawn" % (name, native[0][name], dawn[0].get(name)))
        if name in native[2] and native[2][name] != dawn[2].get(name):
            problems.append("%s takes %s in wgpu-native, %s in Dawn" % (name, native[2][name], dawn[2].get(name)))
    for t in sorted(types):
        if native[1][t] != dawn[1].get(t):
            problems.append("struct %s differs:\n  wgpu-native: %s\n  Dawn:        %s" % (t, native[1][t], dawn[1].get(t)))

    # the Dawn-only numbers dawn.c spells out
    dawn_c = open(os.path.join(src_dir, "src", "runtime", "dawn.c")).read()
    expect = {"DAWN_STYPE_TOGGLES": "WGPUSType_DawnTogglesDescriptor",
              "DAWN_STYPE_SUBGROUP_MATRIX_CONFIGS": "WGPUSType_AdapterPropertiesSubgroupMatrixConfigs",
              "DAWN_FEATURE_SUBGROUP_MATRIX": "WGPUFeatureName_ChromiumExperimentalSubgroupMatrix",
              "DAWN_FEATURE_TIMESTAMP_INSIDE_PASSES": "WGPUFeatureName_ChromiumExperimentalTimestampQueryInsidePasses",
              "DAWN_FEATURE_HOST_MAPPED_POINTER": "WGPUFeatureName_HostMappedPointer",
              "DAWN_STYPE_BUFFER_HOST_MAPPED_POINTER": "WGPUSType_BufferHostMappedPointer",
              "DAWN_STYPE_HOST_MAPPED_POINTER_LIMITS": "WGPUSType_DawnHostMappedPointerLimits"}
    for macro, name in expect.items():
        m = re.search(r"#define %s \(\(\w+\)(0x[0-9A-Fa-f]+)\)" % macro, dawn_c)
        if not m or int(m.group(1), 16) != dawn[0].get(name):
            problems.append("dawn.c's %s is %s, Dawn's %s is %r" % (macro, m.group(1) if m else "missing", name, dawn[0].get(name)))
    toggles = dawn[1].get("WGPUDawnTogglesDescriptor")
    if toggles != ["WGPUChainedStruct chain", "size_t enabledToggleCount", "const char* const * enabledToggles",
                   "size_t disabledToggleCount", "const char* const * disabledToggles"]:
        problems.append("WGPUDawnTogglesDescriptor is not wgml_toggles' layout (runtime/impl.h): %s" % toggles)
    # dawn.c's dawn_buffer_host_mapped_pointer and dawn_host_mapped_pointer_limits
    if dawn[1].get("WGPUBufferHostMappedPointer") != ["WGPUChainedStruct chain", "void * pointer", "WGPUCallback disposeCallback",
                                                       "void * userdata"]:
        problems.append("WGPUBufferHostMappedPointer is not dawn.c's layout: %s" % dawn[1].get("WGPUBufferHostMappedPointer"))
    if dawn[1].get("WGPUDawnHostMappedPointerLimits") != ["WGPUChainedStruct chain", "uint32_t hostMappedPointerAlignment"]:
        problems.append("WGPUDawnHostMappedPointerLimits is not dawn.c's layout: %s" % dawn[1].get("WGPUDawnHostMappedPointerLimits"))
    for c, v in (("F32", 1), ("F16", 2), ("U32", 3), ("I32", 4), ("U8", 5), ("I8", 6)):
        if dawn[0].get("WGPUSubgroupMatrixComponentType_" + c) != v:
            problems.append("WGPUSubgroupMatrixComponentType_%s is not %d (dawn.c's component_name)" % (c, v))

    for p in problems:
        print("check_dawn_abi:", p)
    checked = len([n for n in used if n in native[0] or n in native[2]]) + len(types)
    print("check_dawn_abi: %d names and %d structs checked, %d differences" % (checked, len(types), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
