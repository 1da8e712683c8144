#!/usr/bin/env python3
"""Fails unless a shared library exports exactly the functions its header declares.

Usage: check_exports.py LIBRARY HEADER [HEADER ...]

The headers' interface (wgml.h and wgml_gpt.h) is every declaration marked WGML_API; the library's is every defined
function symbol in its dynamic symbol table (nm -D). Also fails unless its SONAME is versioned (libwgml.so.MAJOR). Prints what is exported but not declared
(an internal function leaking) and what is declared but not exported, and exits 1 if either
is not empty.
"""
import re
import subprocess
import sys


def main():
    lib, headers = sys.argv[1], sys.argv[2:]
    header = " and ".join(headers)
    declared = set()
    for h in headers:
        text = open(h, encoding="utf-8").read()
        declared |= set(re.findall(r"^WGML_API[^(;]*?\b(wgml_\w+)\(", text, re.M))
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] == "T"}
    leaked, missing = sorted(exported - declared), sorted(declared - exported)
    for name in leaked:
        print(f"{lib}: exports {name}, which {header} does not declare")
    for name in missing:
        print(f"{lib}: does not export {name}, which {header} declares")
    # The versioned SONAME (libwgml.so.0) that lets a new major version live beside the old.
    dyn = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dyn)
    if not soname or not re.fullmatch(r"libwgml\.so\.\d+", soname.group(1)):
        print(f"{lib}: SONAME is {soname.group(1) if soname else 'missing'}, not libwgml.so.MAJOR")
        return 1
    if leaked or missing:
        return 1
    print(f"check_exports: {len(exported)} functions exported, each declared in {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
