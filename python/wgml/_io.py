"""Saving and loading named tensors (safetensors files) through wgml_save and wgml_load."""
import os
import warnings
from typing import Any, Dict, Optional, Tuple, Union

from ._context import Context, default_context
from ._ffi import ffi, lib
from ._tensor import Tensor, _ctx_of, _upload, _wrap


def save(tensors: Dict[str, Any], path: Union[str, "os.PathLike[str]"], metadata: Optional[Dict[str, Any]] = None,
         ctx: Optional[Context] = None) -> None:
    """Writes {name: tensor or array} to a safetensors file, atomically, with string
    metadata {key: value} (values not str are written as str(value)). The order of
    safetensors.save_file and torch.save: save(tensors, path); the older save(path, tensors)
    still works, with a DeprecationWarning."""
    if not isinstance(tensors, dict) and isinstance(path, dict):
        warnings.warn("wgml.save(path, tensors) is deprecated: write wgml.save(tensors, path) "
                      "(the order of safetensors.save_file and torch.save)", DeprecationWarning, stacklevel=2)
        tensors, path = path, tensors
    if not isinstance(tensors, dict):
        raise TypeError("save takes a dict of {name: tensor}, not %s" % type(tensors).__name__)
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError("save: the path is a str or os.PathLike, not %s" % type(path).__name__)
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
    """t itself, or host data uploaded into ctx."""
    return t if isinstance(t, Tensor) else _upload(t, None, ctx)


def load(path: Union[str, "os.PathLike[str]"], numpy: bool = False,
         ctx: Optional[Context] = None) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """(tensors, metadata) of a safetensors file: {name: Tensor} (or NumPy arrays with
    numpy=True) and {key: str}. (safetensors' load_file returns the dict alone: here
    `tensors, meta = wgml.load(path)`.)"""
    ctx = _ctx_of(ctx)
    out = ffi.new("wgml_file **")
    ctx._check(lib.wgml_load(ctx._handle(), os.fsencode(path), out))
    f = out[0]
    try:
        tensors = {}
        for i in range(lib.wgml_file_count(f)):
            name = ffi.string(lib.wgml_file_name(f, i)).decode()
            t = _wrap(ctx, lib.wgml_file_tensor(f, i), storage=True)
            tensors[name] = t.numpy() if numpy else t
        metadata = {}
        for i in range(lib.wgml_file_meta_count(f)):
            k = lib.wgml_file_meta_key(f, i)
            metadata[ffi.string(k).decode()] = ffi.string(lib.wgml_file_meta(f, k)).decode()
        return tensors, metadata
    finally:
        lib.wgml_file_free(f)



def save_file(tensors: Dict[str, Any], filename: Union[str, "os.PathLike[str]"],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """safetensors.save_file's call: save(tensors, filename, metadata)."""
    save(tensors, filename, metadata)


def load_file(filename: Union[str, "os.PathLike[str]"], ctx: Optional[Context] = None) -> Dict[str, Tensor]:
    """safetensors.load_file's call: the {name: Tensor} dict alone (load() also gives the
    metadata)."""
    return load(filename, ctx=ctx)[0]
