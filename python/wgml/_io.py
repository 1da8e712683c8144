"""Saving and loading named tensors (safetensors files) through wgml_save and wgml_load."""
import os

from ._context import default_context
from ._ffi import ffi, lib
from ._tensor import Tensor, _ctx_of, _upload, _wrap


def save(path, tensors, metadata=None, ctx=None):
    """Writes {name: tensor or array} to a safetensors file, atomically, with string
    metadata {key: value} (values not str are written as str(value))."""
    if not isinstance(tensors, dict):
        raise TypeError("save takes a dict of {name: tensor}, not %s" % type(tensors).__name__)
    like = next((t for t in tensors.values() if isinstance(t, Tensor)), None)
    if ctx is None:
        ctx = like._ctx if like is not None else default_context()
    ctx = _ctx_of(ctx)
    names, handles, keep = [], [], []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError("tensor names are str, not %s" % type(name).__name__)
        t = _upload_host(t, ctx)
        keep.append(t)
        names.append(ffi.new("char[]", name.encode()))
        handles.append(t._handle())
    meta = dict(metadata or {})
    keys = [ffi.new("char[]", str(k).encode()) for k in meta]
    vals = [ffi.new("char[]", (v if isinstance(v, str) else str(v)).encode()) for v in meta.values()]
    st = lib.wgml_save(ctx._handle(), os.fsencode(path), len(handles),
                       ffi.new("const char *[]", names) if names else ffi.NULL,
                       ffi.new("wgml_tensor *[]", handles) if handles else ffi.NULL,
                       len(keys), ffi.new("const char *[]", keys) if keys else ffi.NULL,
                       ffi.new("const char *[]", vals) if vals else ffi.NULL)
    ctx._check(st)


def _upload_host(t, ctx):
    return t if isinstance(t, Tensor) else _upload(t, None, ctx)


def load(path, numpy=False, ctx=None):
    """(tensors, metadata) of a safetensors file: {name: Tensor} (or NumPy arrays with
    numpy=True) and {key: str}."""
    ctx = _ctx_of(ctx)
    out = ffi.new("wgml_file **")
    ctx._check(lib.wgml_load(ctx._handle(), os.fsencode(path), out))
    f = out[0]
    try:
        tensors = {}
        for i in range(lib.wgml_file_count(f)):
            name = ffi.string(lib.wgml_file_name(f, i)).decode()
            t = _wrap(ctx, lib.wgml_file_tensor(f, i))
            tensors[name] = t.numpy() if numpy else t
        metadata = {}
        for i in range(lib.wgml_file_meta_count(f)):
            k = lib.wgml_file_meta_key(f, i)
            metadata[ffi.string(k).decode()] = ffi.string(lib.wgml_file_meta(f, k)).decode()
        return tensors, metadata
    finally:
        lib.wgml_file_free(f)

