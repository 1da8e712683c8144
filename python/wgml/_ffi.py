"""The C library, loaded through cffi in ABI mode (no compiler needed at install or import).

The declarations come from wgml.h itself, and from wgml_gpt.h (the GPT, wgml.gpt) found beside
it, filtered into what cffi's parser takes (`header_to_cdef`), so the Python side never holds
a hand-copied second description of the C API that could drift from the library.
"""
import ctypes.util
import os
import re
import shutil
import subprocess

from cffi import FFI

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBNAME = "libwgml.so.0"
GPT_HEADER = "wgml_gpt.h"  # the GPT's declarations, read from beside wgml.h


# ---------------------------------------------------------------- the header, filtered

def _strip_comments(text):
    # Block comments may span lines; keep their newlines so line-based steps still line up.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def header_to_cdef(text):
    """wgml.h as cffi cdef text: comments, C++ guards and preprocessor lines gone, WGML_API
    and attributes dropped, integer #defines kept (cffi turns them into constants)."""
    lines = _strip_comments(text).replace("\\\n", " ").split("\n")
    out = []
    # A stack of (skipped, tests __cplusplus) per open #if: only the C++ side of a
    # __cplusplus test is skipped; other conditionals (the include guard, the compiler test
    # for WGML_API) hold nothing but directives or declarations wanted either way.
    skip = []
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            d = s[1:].strip()
            word = d.split(None, 1)[0] if d else ""
            cpp = "__cplusplus" in d
            if word in ("if", "ifdef", "ifndef"):
                negated = word == "ifndef" or re.search(r"!\s*defined", d) is not None
                skip.append([cpp and not negated, cpp])
            elif word in ("else", "elif") and skip:
                skip[-1][0] = not skip[-1][0] if skip[-1][1] else False
            elif word == "endif" and skip:
                skip.pop()
            elif word == "define" and not any(k[0] for k in skip):
                m = re.match(r"define\s+([A-Za-z_]\w*)\s+(-?\d+)[uUlL]*\s*$", d)
                if m:
                    out.append("#define %s %s" % (m.group(1), m.group(2)))
            continue
        if any(k[0] for k in skip):
            continue
        out.append(line)
    body = "\n".join(out)
    body = re.sub(r"\bWGML_API\b", "", body)
    body = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", body)
    return body


def exported_names(text):
    """The functions wgml.h marks WGML_API (what the library must export)."""
    body = _strip_comments(text)
    return re.findall(r"\bWGML_API\b[^;(]*?\b(wgml_\w+)\s*\(", body)


# ---------------------------------------------------------------- finding the library

def _pkg_config(var):
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--variable=" + var, "wgml"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _candidates():
    """(how, path) pairs in the lookup order: WGML_LIBRARY, the copy inside the package,
    then the system (the dynamic loader's cache, pkg-config's libdir)."""
    env = os.environ.get("WGML_LIBRARY")
    if env:
        # An explicit choice is final: falling back past a wrong path would hide the mistake.
        return [("WGML_LIBRARY", env)]
    c = [("bundled", os.path.join(_HERE, "_lib", LIBNAME))]
    found = ctypes.util.find_library("wgml")
    if found:
        c.append(("find_library", found))
    libdir = _pkg_config("libdir")
    if libdir:
        c.append(("pkg-config", os.path.join(libdir, LIBNAME)))
    return c


def _header_candidates(libpath):
    """wgml.h for the library found: an override, the install tree beside it, the copy
    inside the package, the source tree this package sits in, pkg-config's includedir."""
    c = []
    if os.environ.get("WGML_HEADER"):
        return [os.environ["WGML_HEADER"]]
    if os.path.isabs(libpath):
        c.append(os.path.join(os.path.dirname(os.path.dirname(libpath)), "include", "wgml.h"))
    c.append(os.path.join(_HERE, "_include", "wgml.h"))
    c.append(os.path.join(os.path.dirname(os.path.dirname(_HERE)), "include", "wgml.h"))
    inc = _pkg_config("includedir")
    if inc:
        c.append(os.path.join(inc, "wgml.h"))
    return c


def _load():
    ffi = FFI()
    tried = []
    handle = None
    for how, path in _candidates():
        if os.path.isabs(path) and not os.path.exists(path):
            tried.append("%s: %s (no such file)" % (how, path))
            continue
        try:
            handle = ffi.dlopen(path)
        except OSError as e:
            tried.append("%s: %s (%s)" % (how, path, e))
            continue
        libpath = path
        break
    if handle is None:
        raise ImportError(
            "wgml: cannot find the C library %s. Tried:\n  %s\n"
            "Set WGML_LIBRARY to the path of libwgml.so.0 (a build folder's or an install's lib/), "
            "or install the package with `pip install ./python` (or a wheel of scripts/build_wheel.sh), which bundles it."
            % (LIBNAME, "\n  ".join(tried) if tried else "nothing"))
    if not os.path.isabs(libpath):
        libpath = _loaded_path(libpath) or libpath
    headers = _header_candidates(libpath)
    header = next((h for h in headers if os.path.isfile(h)), None)
    if header is None:
        raise ImportError("wgml: found %s but not wgml.h; tried:\n  %s\n(set WGML_HEADER)"
                          % (libpath, "\n  ".join(headers)))
    with open(header, encoding="utf-8") as f:
        text = f.read()
    # wgml_gpt.h includes wgml.h: read after it (its own #include is dropped with the other
    # directives). An install without it still gives the tensors; wgml.gpt then says why not.
    gpt_header = os.path.join(os.path.dirname(header), GPT_HEADER)
    if os.path.isfile(gpt_header):
        with open(gpt_header, encoding="utf-8") as f:
            text += "\n" + f.read()
    else:
        gpt_header = None
    ffi.cdef(header_to_cdef(text))
    lib = ffi.dlopen(libpath)
    missing = []
    for name in exported_names(text):
        try:
            getattr(lib, name)
        except AttributeError:
            missing.append(name)
    if missing:
        raise ImportError("wgml: %s does not match %s: it lacks %s"
                          % (libpath, " and ".join(h for h in (header, gpt_header) if h), ", ".join(missing)))
    return ffi, lib, libpath, header, gpt_header


def _loaded_path(name):
    """Where the loader found a bare library name (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)[-1].strip()
                if os.path.basename(p) == name or os.path.basename(p).startswith("libwgml.so"):
                    return p
    except OSError:
        pass
    return None


ffi, lib, library_path, header_path, gpt_header_path = _load()


def library_version() -> str:
    """The loaded library's version, the one place wgml.__version__ comes from: the
    library's own wgml_version() where it has one, else the version in its file name
    (libwgml.so.0 links to libwgml.so.X.Y.Z, CMake's VERSION), else the installed package's
    metadata (a wheel bundles a plain copy named libwgml.so.0, built from the same tree)."""
    if hasattr(lib, "wgml_version"):  # declared in wgml.h: cffi knows it
        v = lib.wgml_version()
        return ffi.string(v).decode() if isinstance(v, ffi.CData) else str(v)
    m = re.search(r"libwgml\.so\.(\d+\.\d+\.\d+)$", os.path.realpath(library_path))
    if m:
        return m.group(1)
    try:
        from importlib.metadata import version
        return version("wgml")
    except Exception:
        return "unknown"
