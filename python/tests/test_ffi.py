"""The declarations filtered from wgml.h, and how the library is found."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from cffi import FFI

import wgml
from wgml import _ffi


def header_text():
    with open(wgml.header_path, encoding="utf-8") as f:
        return f.read()


def test_filter_on_a_synthetic_header():
    text = """
    #ifndef G
    #define G
    #define LIMIT 4u   /* a constant */
    #define NOT_A_NUMBER (1 << 2)
    #if defined(__GNUC__)
    #define API __attribute__((visibility("default")))
    #else
    #define API
    #endif
    #ifdef __cplusplus
    extern "C" {
    #endif
    /* a comment
       over lines */
    typedef struct s s; // a line comment
    WGML_API int wgml_f(const s *p, int64_t n) __attribute__((pure));
    #ifndef __cplusplus
    WGML_API int wgml_c_only(void);
    #else
    int cpp_only(void);
    #endif
    #ifdef __cplusplus
    }
    #endif
    #endif
    """
    cdef = _ffi.header_to_cdef(text)
    assert "extern" not in cdef and "cpp_only" not in cdef and "WGML_API" not in cdef
    assert "__attribute__" not in cdef and "#define LIMIT 4" in cdef and "NOT_A_NUMBER" not in cdef
    ffi = FFI()
    ffi.cdef(cdef)
    assert _ffi.exported_names(text) == ["wgml_f", "wgml_c_only"]


def test_every_public_function_is_declared_and_loaded():
    text = header_text()
    names = _ffi.exported_names(text)
    # the header's own count: lines that begin a declaration with WGML_API
    begun = re.findall(r"^WGML_API\b", text, re.M)
    assert len(names) == len(set(names)) == len(begun)
    assert len(names) >= 146
    for name in names:
        assert callable(getattr(_ffi.lib, name)), name


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to compare with")
def test_filter_agrees_with_the_preprocessor():
    """The functions cffi sees are those the C preprocessor leaves with WGML_API empty."""
    r = subprocess.run(["cc", "-E", "-P", "-DWGML_API=", "-"], input=header_text(), capture_output=True,
                       text=True, check=True)
    # a name before "(" is a function, unless "(*" begins a function pointer (the hook's type)
    from_cpp = set(re.findall(r"\b(wgml_\w+)\s*\((?!\s*\*)", r.stdout))
    ffi = FFI()
    ffi.cdef(_ffi.header_to_cdef(header_text()))
    declared = {n for n in dir(ffi.dlopen(wgml.library_path)) if n.startswith("wgml_")}
    assert declared == from_cpp


def run_import(env_changes):
    env = dict(os.environ)
    env.update(env_changes)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(wgml.__file__)), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", "import wgml; print(wgml.library_path)"], capture_output=True,
                          text=True, env=env, timeout=60)


def test_wgml_library_is_used_and_checked(tmp_path):
    r = run_import({"WGML_LIBRARY": wgml.library_path})
    assert r.returncode == 0 and r.stdout.strip() == wgml.library_path
    bad = str(tmp_path / "libwgml.so.0")
    r = run_import({"WGML_LIBRARY": bad})
    assert r.returncode != 0 and "ImportError" in r.stderr and bad in r.stderr and "WGML_LIBRARY" in r.stderr
    (tmp_path / "libwgml.so.0").write_bytes(b"not a library")
    r = run_import({"WGML_LIBRARY": bad})
    assert r.returncode != 0 and "ImportError" in r.stderr and bad in r.stderr


def test_without_wgml_library_the_lookup_says_what_it_tried():
    r = run_import({"WGML_LIBRARY": None})
    bundled = os.path.join(os.path.dirname(wgml.__file__), "_lib", "libwgml.so.0")
    if r.returncode == 0:  # a bundled copy (a wheel) or a system install was found
        assert r.stdout.strip() == bundled or "_lib" not in r.stdout
    else:
        assert "ImportError" in r.stderr and "bundled: " + bundled in r.stderr
