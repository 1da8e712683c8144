"""The package's own PEP 517 build backend: `pip install ./python` then needs nothing from
the network (a backend like setuptools would be fetched into pip's isolated build
environment). The package is pure Python, so a wheel is a zip of its files, wgml.h and,
when WGML_WHEEL_LIBDIR names a folder with libwgml.so.0 (scripts/build_wheel.sh), the
library and libwgpu_native.so under wgml/_lib.
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

NAME = "wgml"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
LIBS = ("libwgml.so.0", "libwgpu_native.so")
SUMMARY = "GPU tensors over WebGPU: Python bindings of the wgml C library"


def _version():
    """MAJOR.MINOR.PATCH from wgml.h's WGML_VERSION_* (the one place it is written)."""
    with open(_header(), encoding="utf-8") as f:
        text = f.read()
    return ".".join(re.search(r"^#define WGML_VERSION_%s (\d+)$" % part, text, re.M).group(1)
                    for part in ("MAJOR", "MINOR", "PATCH"))


def _header():
    """wgml.h to ship: the source tree's, or the copy an sdist carries."""
    for p in (os.path.join(os.path.dirname(ROOT), "include", "wgml.h"),
              os.path.join(ROOT, NAME, "_include", "wgml.h")):
        if os.path.isfile(p):
            return p
    raise RuntimeError("wgml build: wgml.h not found next to the package (include/wgml.h)")


def _package_files():
    """(archive name, path) of the package's modules."""
    out = []
    pkg = os.path.join(ROOT, NAME)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "_lib", "_include"))
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _libs():
    libdir = os.environ.get("WGML_WHEEL_LIBDIR")
    if not libdir:
        return []
    found = []
    for lib in LIBS:
        p = os.path.join(libdir, lib)
        if not os.path.isfile(p):
            raise RuntimeError("wgml build: WGML_WHEEL_LIBDIR=%s has no %s" % (libdir, lib))
        found.append(("%s/_lib/%s" % (NAME, lib), p))
    return found


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nLicense: MIT\nRequires-Python: >=3.8\n"
            "Requires-Dist: cffi>=1.15\nRequires-Dist: numpy>=1.22\n" % (NAME, _version(), SUMMARY))


def _tag(with_libs):
    if not with_libs:
        return "py3-none-any"
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, dist_info):
        self.record.append("%s/RECORD,," % dist_info)
        info = zipfile.ZipInfo("%s/RECORD" % dist_info, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _build(wheel_directory, editable):
    libs = [] if editable else _libs()
    tag = _tag(bool(libs))
    dist = "%s-%s" % (NAME, _version())
    dist_info = dist + ".dist-info"
    filename = "%s-%s.whl" % (dist, tag)
    w = _Wheel(os.path.join(wheel_directory, filename))
    if editable:
        # the source folder on sys.path: edits show without reinstalling
        w.add("_wgml_editable.pth", (ROOT + "\n").encode())
    else:
        for arc, path in _package_files():
            w.add(arc, _read(path))
        w.add("%s/_include/wgml.h" % NAME, _read(_header()))
        for arc, path in libs:
            w.add(arc, _read(path), 0o755)
    w.add(dist_info + "/METADATA", _metadata().encode())
    w.add(dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: wgml_backend\nRoot-Is-Purelib: %s\nTag: %s\n"
                                 % ("false" if libs else "true", tag)).encode())
    w.add(dist_info + "/top_level.txt", (NAME + "\n").encode())
    w.close(dist_info)
    return filename


# ---------------------------------------------------------------- PEP 517 / 660 hooks

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    dist = "%s-%s" % (NAME, _version())
    filename = dist + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(arcname, data):
            info = tarfile.TarInfo("%s/%s" % (dist, arcname))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        add("pyproject.toml", _read(os.path.join(ROOT, "pyproject.toml")))
        add("_build/wgml_backend.py", _read(os.path.abspath(__file__)))
        for arc, path in _package_files():
            add(arc, _read(path))
        add("%s/_include/wgml.h" % NAME, _read(_header()))
        add("PKG-INFO", _metadata().encode())
    return filename
