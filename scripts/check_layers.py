#!/usr/bin/env python3
"""Fails when src/ reaches up a layer: by an #include, or (given a build folder) by a
reference from one object file to a symbol another defines.

Usage: check_layers.py [project root [build folder [nm]]]
       (default root: the folder above scripts/; without a build folder only the includes
       are checked)

src/ is layered, bottom first:
  0  runtime, cpu
  1  kernels, core
  2  engine      the op type, nodes, launches, fusion, the plan and submit
  3  ops         the op families, each reached by the engine only through its table entry
  4  autograd, io
  5  train
  6  models, nn
A file may include headers of its own layer or a lower one, and its object may reference
only symbols defined by objects of its own layer or a lower one. A folder of src/ that is
not in this list is an error too, so that a new folder has to be given its place.

Link level: every object of the library (CMakeFiles/wgml_obj.dir/src/...) is read with nm;
an undefined symbol is charged to the folder whose object defines it. A public function
(wgml.h) is defined by the generated locking entry point, which forwards to the library's
own definition, NAME__impl: a call through the public header is charged to the folder that
defines NAME__impl, so calling wgml_softmax from engine/ fails as an include would. SEAMS
lists the only references allowed up a layer, each with why.

Also fails a call of getenv (or secure_getenv) in src/ outside src/runtime/settings.c: the
library reads the environment there alone, once per context, into the settings every other
file reads (include/wgml.h lists the variables).

Also fails a call in src/ that prints to the terminal or ends the process (printf, puts,
perror, fprintf/fputs/fwrite to stderr or stdout, abort, exit, _Exit, quick_exit): the library
returns a status and keeps the message (a debugging print once landed unnoticed).

Also fails an object of the library that defines a wgml_ref_ symbol: the double-precision
references are the tests' (tests/ref/), compiled into their support library only.

An include is resolved as the compiler does (a quoted one next to the including file
first, then under src/, which is on the include path); one that names no file of src/ (the
public wgml.h, webgpu, the C library) is not checked. Prints each violation as file:line and
exits 1; otherwise prints one line and exits 0.
"""
import os
import re
import sys

import subprocess

LAYERS = {"runtime": 0, "cpu": 0, "kernels": 1, "core": 1, "engine": 2, "ops": 3,
          "autograd": 4, "io": 4, "train": 5, "models": 6, "nn": 6}
# Within ops/, each family (a file X.c / X.h / X.wgsl, or a folder X/) includes only engine/,
# core/ and the headers every family shares (the op list, the entry macros, the rules' helpers,
# the row launch), never another family's header; the exceptions, each with why:
OPS_SHARED = {"table", "entry", "rules", "row"}
OPS_FAMILY_EXCEPTIONS = {
    ("matmul", "reduce"): "split K sums its partial products with the reduce kernel",
}


def ops_family(rel):
    """The family of a path under src/ops/ (its first component without extension)."""
    return os.path.splitext(rel.split("/")[1])[0] if rel.startswith("ops/") and "/" in rel else None


# symbol -> (the folder allowed to reference it, why): data the lower layer declares and the
# higher one defines, never a function
SEAMS = {
    "wgml_op_table": ("engine", "the op table: engine/op.h declares it, ops/table.c defines it "
                                "(the engine reads entries; it calls an op only through their pointers)"),
}
INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^>"]+)[>"]')
GETENV = re.compile(r'\b(secure_)?getenv\s*\(')
PRINTS_OR_ENDS = re.compile(r'\b(printf|puts|perror|abort|exit|_Exit|quick_exit)\s*\(|\bf(printf|puts|putc|write)\s*\(\s*(stderr|stdout)\b')
ENV_READER = "src/runtime/settings.c"  # the one file that reads the environment


def target_folder(src, including_dir, quote, name):
    """The folder of src/ that an include names, or None if it names nothing in src/."""
    candidates = [os.path.join(including_dir, name)] if quote == '"' else []
    candidates.append(os.path.join(src, name))
    folders = [os.path.relpath(os.path.normpath(p), src).split(os.sep)[0] for p in candidates]
    for path, folder in zip(candidates, folders):
        if os.path.isfile(path) and folder != "..":
            return folder
    # Not there (yet): still judge a path that names a folder of src/ ("models/x.h" under
    # src/ first, then "../train/x.h" next to the including file).
    return next((folder for folder in reversed(folders) if folder in LAYERS), None)


def nm_symbols(nm, path):
    """(defined, undefined) global symbol names of an object file."""
    out = subprocess.run([nm, "-P", "-g", path], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        if parts[1] == "U":
            undefined.add(parts[0])
        elif parts[1] not in "wv":  # a weak undefined reference is no definition
            defined.add(parts[0])
    return defined, undefined


def check_links(src, build, nm, errors):
    """Link-level references up a layer; returns how many references within src/ were checked."""
    objdir = os.path.join(build, "CMakeFiles", "wgml_obj.dir", "src")
    if not os.path.isdir(objdir):
        errors.append(f"{objdir}: no object files (build the library first)")
        return 0
    objects = {}  # shown source path -> (folder, defined, undefined)
    for dirpath, _, files in os.walk(objdir):
        for f in sorted(files):
            if not f.endswith(".c.o"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f[:-2]), objdir)
            if not os.path.isfile(os.path.join(src, rel)):
                continue  # left from a source that has moved or gone
            folder = rel.split(os.sep)[0]
            objects["src/" + rel.replace(os.sep, "/")] = (folder,) + nm_symbols(nm, os.path.join(dirpath, f))
    owner = {}
    for shown, (folder, defined, _) in objects.items():
        for sym in defined:
            owner[sym] = (folder, shown)
            if sym.startswith("wgml_ref_"):  # the references are the tests' (tests/ref/)
                errors.append(f"{shown} defines {sym}: a CPU reference belongs in tests/ref/, not the library")
    refs = 0
    for shown, (folder, _, undefined) in sorted(objects.items()):
        if folder not in LAYERS:
            continue
        for sym in sorted(undefined):
            target = owner.get(sym + "__impl") or owner.get(sym)  # a public entry point: its definition
            if not target:
                continue
            refs += 1
            tfolder, tshown = target
            if tfolder not in LAYERS or LAYERS[tfolder] <= LAYERS[folder]:
                continue
            seam = SEAMS.get(sym)
            if seam and seam[0] == folder:
                continue
            errors.append(f"{shown}: {folder} (layer {LAYERS[folder]}) references {sym}, defined in "
                          f"{tshown} ({tfolder}, layer {LAYERS[tfolder]})")
    return refs


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    build = sys.argv[2] if len(sys.argv) > 2 else None
    nm = sys.argv[3] if len(sys.argv) > 3 else "nm"
    src = os.path.join(root, "src")
    errors, includes = [], 0
    for entry in sorted(os.listdir(src)):
        if entry not in LAYERS:
            kind = "folder" if os.path.isdir(os.path.join(src, entry)) else "file outside a layer folder"
            errors.append(f"src/{entry}: {kind} not in the layer order (give it a place in scripts/check_layers.py)")
            continue
        for dirpath, _, files in os.walk(os.path.join(src, entry)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                shown = "src/" + os.path.relpath(path, src).replace(os.sep, "/")
                with open(path, errors="replace") as fh:
                    for line_no, line in enumerate(fh, 1):
                        code = line.split("//")[0]
                        if PRINTS_OR_ENDS.search(code):
                            errors.append(f"{shown}:{line_no}: prints to the terminal or ends the process; the library "
                                          "returns a status and keeps the message (wgml_fail)")
                        if shown != ENV_READER and GETENV.search(code):
                            errors.append(f"{shown}:{line_no}: reads the environment; only {ENV_READER} does "
                                          "(add a wgml_context_desc field and a wgml_settings entry)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        folder = target_folder(src, dirpath, m.group(1), m.group(2))
                        if folder is None:
                            continue
                        includes += 1
                        if folder not in LAYERS:
                            errors.append(f"{shown}:{line_no}: includes {m.group(2)}, in src/{folder}/, a folder not in the layer order")
                        elif LAYERS[folder] > LAYERS[entry]:
                            errors.append(f"{shown}:{line_no}: {entry} (layer {LAYERS[entry]}) includes "
                                          f"{m.group(2)} ({folder}, layer {LAYERS[folder]})")
                        elif folder == "ops" and entry == "ops":
                            mine = ops_family(shown[len("src/"):])
                            theirs = ops_family(os.path.normpath(m.group(2)).replace(os.sep, "/"))
                            if (theirs and mine not in OPS_SHARED and theirs not in OPS_SHARED and mine != theirs
                                    and (mine, theirs) not in OPS_FAMILY_EXCEPTIONS):
                                errors.append(f"{shown}:{line_no}: the {mine} family includes {m.group(2)}, the {theirs} "
                                              f"family's (families reach each other through ops/table.h and public constructors)")
    refs = check_links(src, build, nm, errors) if build else None
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)")
        return 1
    linked = f"; {refs} link-level references between objects of src/, none up a layer" if build else ""
    print(f"check_layers: OK ({includes} includes within src/, none points up a layer{linked}; "
          f"the environment read in {ENV_READER} alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
