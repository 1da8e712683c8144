#!/usr/bin/env python3
"""Fails when an #include in src/ points up a layer.

Usage: check_layers.py [project root]   (default: the folder above scripts/)

src/ is layered, bottom first:
  0  runtime, cpu
  1  kernels, core
  2  graph
  3  autograd, io
  4  train
  5  models, nn
A file may include headers of its own layer or a lower one. A folder of src/ that is not
in this list is an error too, so that a new folder has to be given its place.

Also fails a call of getenv (or secure_getenv) in src/ outside src/runtime/settings.c: the
library reads the environment there alone, once per context, into the settings every other
file reads (include/wgml.h lists the variables).

An include is resolved as the compiler does (a quoted one next to the including file
first, then under src/, which is on the include path); one that names no file of src/ (the
public wgml.h, webgpu, the C library) is not checked. Prints each violation as file:line and
exits 1; otherwise prints one line and exits 0.
"""
import os
import re
import sys

LAYERS = {"runtime": 0, "cpu": 0, "kernels": 1, "core": 1, "graph": 2,
          "autograd": 3, "io": 3, "train": 4, "models": 5, "nn": 5}
INCLUDE = re.compile(r'\s*#\s*include\s*([<"])([^>"]+)[>"]')
GETENV = re.compile(r'\b(secure_)?getenv\s*\(')
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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
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
                        if shown != ENV_READER and GETENV.search(line.split("//")[0]):
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
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s)")
        return 1
    print(f"check_layers: OK ({includes} includes within src/, none points up a layer; "
          f"the environment read in {ENV_READER} alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
