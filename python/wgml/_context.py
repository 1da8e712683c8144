"""Contexts: one WebGPU device each, owning its tensors and optimisers.

Threads: a context may be used from several threads (the default one included); the library
serialises the calls on a context with a lock, so a thread waits while another is inside a
call (the binding releases the GIL during calls, so other Python threads go on meanwhile).
The last error message is the context's, not the thread's. Contexts are not shared across
processes: in a child made by fork() (multiprocessing's "fork" start method) every use of a
context the parent made raises ContextError at once; use the "spawn" or "forkserver" start
method for GPU work in other processes (a GPU driver may refuse a device to a fork's child:
NVIDIA's does once the parent has one).

Lifetime: every Tensor and Optimizer holds a reference to its Context, so a context is
freed only after them. A context closed early (close(), the end of a `with` block, the
interpreter's exit) marks itself closed first; wrappers then skip their own free (the
library has already released everything the context owned) and refuse further use, so
nothing reaches freed memory.
"""
import atexit
import threading
import weakref

from ._errors import ContextError, error_for
from ._ffi import ffi, lib

_BACKENDS = {
    None: lib.WGML_BACKEND_DEFAULT, "default": lib.WGML_BACKEND_DEFAULT,
    "vulkan": lib.WGML_BACKEND_VULKAN, "metal": lib.WGML_BACKEND_METAL,
    "dx12": lib.WGML_BACKEND_DX12, "gl": lib.WGML_BACKEND_GL, "all": lib.WGML_BACKEND_ALL,
}

_RUNTIMES = {
    None: lib.WGML_RUNTIME_AUTO, "auto": lib.WGML_RUNTIME_AUTO,
    "wgpu-native": lib.WGML_RUNTIME_WGPU_NATIVE, "dawn": lib.WGML_RUNTIME_DAWN,
}

# The kernel choices of wgml_context_desc (text in their WGML_* variable's syntax)
_KERNEL_CHOICES = ("gemm_tile", "gemm_warp", "gemm_cpu", "gemm_cpu_subgroups", "gemv_cols", "gemv_rows",
                   "subgroups", "ew_unroll", "attn_tiles", "attn_pre", "attn_matrix")

_live = weakref.WeakSet()  # every open context, closed at exit before the interpreter unloads
_default = None
_default_lock = threading.Lock()
_current = []  # contexts entered with `with`, innermost last


def _string(p):
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None


class Context:
    """A wgml context on one adapter.

    adapter: the first adapter whose name contains this (case-insensitive); None: the
        WGML_ADAPTER environment variable, else discrete GPU, integrated, then CPU.
    backend: "vulkan", "metal", "dx12", "gl", "all" or None (Vulkan, or WGML_BACKEND).
    bounds_checks, no_fusion, gpu_timing: as wgml_context_desc.
    adapter_index: among several adapters of the chosen kind, the one at this position
        (modulo their number); 0: WGML_ADAPTER_INDEX, else the first.
    runtime: the WebGPU implementation, "wgpu-native", "dawn" or "auto"/None (WGML_RUNTIME,
        else Dawn where installed and the adapter has subgroup matrices, else wgpu-native).
    dump_wgsl, profile, timeline, poll_spin_us, loop_limit, binding_limit, dist_bucket_mb,
    dawn_library, wgpu_native_library, dawn_toggles: as wgml_context_desc's fields (each None,
        False or 0 takes its WGML_* environment variable, read once, here; one that is set
        wins over it).
    kernel_choices: a dict of the desc's kernel choices ("gemm_tile", "gemm_warp", "gemm_cpu",
        "gemm_cpu_subgroups", "gemv_cols", "gemv_rows", "subgroups", "ew_unroll", "attn_tiles",
        "attn_pre") to their text, e.g. {"gemm_tile": "8,8,16,1"}; benchmark sweeps.
    """

    def __init__(self, adapter=None, backend=None, bounds_checks=False, no_fusion=False, gpu_timing=False,
                 adapter_index=0, runtime=None, dump_wgsl=None, profile=None, timeline=False, poll_spin_us=0.0,
                 loop_limit=0, binding_limit=0, dist_bucket_mb=0.0, dawn_library=None, wgpu_native_library=None,
                 dawn_toggles=None, kernel_choices=None):
        self._ptr = None
        self._optimizers = weakref.WeakSet()
        self._losses = []  # losses given to backward() since the last optimiser step
        self._cached_shapes = {}  # cached weights' [rows, cols], by name (for matmul_cached)
        if isinstance(backend, str):
            backend = backend.lower()
        if backend not in _BACKENDS:
            raise ValueError("backend must be one of %s, not %r"
                             % (", ".join(repr(k) for k in _BACKENDS if k), backend))
        if runtime not in _RUNTIMES:
            raise ValueError("runtime must be one of %s, not %r"
                             % (", ".join(repr(k) for k in _RUNTIMES if k), runtime))
        desc = ffi.new("wgml_context_desc *")
        desc.runtime = _RUNTIMES[runtime]
        desc.backend = _BACKENDS[backend]
        name = ffi.new("char[]", adapter.encode()) if adapter is not None else ffi.NULL
        desc.adapter_name = name
        desc.bounds_checks = 1 if bounds_checks else 0
        desc.no_fusion = 1 if no_fusion else 0
        desc.gpu_timing = 1 if gpu_timing else 0
        desc.adapter_index = int(adapter_index)  # among several of the chosen kind (one GPU per rank)
        keep = []  # the strings given, alive until the library has copied them

        def text(value):
            if value is None:
                return ffi.NULL
            keep.append(ffi.new("char[]", str(value).encode()))
            return keep[-1]

        desc.dump_wgsl, desc.profile = text(dump_wgsl), text(profile)
        desc.dawn_library, desc.wgpu_native_library = text(dawn_library), text(wgpu_native_library)
        desc.dawn_toggles = text(dawn_toggles)
        desc.timeline = 1 if timeline else 0
        desc.poll_spin_us = float(poll_spin_us)
        desc.loop_limit, desc.binding_limit = int(loop_limit), int(binding_limit)
        desc.dist_bucket_mb = float(dist_bucket_mb)
        for name, value in (kernel_choices or {}).items():
            if name not in _KERNEL_CHOICES:
                raise ValueError("kernel_choices: %r is none of %s" % (name, ", ".join(_KERNEL_CHOICES)))
            setattr(desc, name, text(value))
        out = ffi.new("wgml_context **")
        st = lib.wgml_context_create(desc, out)
        if st != lib.WGML_OK:
            raise error_for(st, _string(lib.wgml_last_create_error()) or "")
        self._ptr = out[0]
        _live.add(self)

    # ------------------------------------------------------------ lifetime

    @property
    def closed(self):
        """Whether close() (or the end of its `with` block) has freed the context."""
        return self._ptr is None

    def close(self):
        """Frees the context, its tensors and optimisers (their wrappers become unusable)."""
        global _default
        ptr, self._ptr = self._ptr, None
        if ptr is None:
            return
        # optimisers hold buffers of the context: freed before it
        for opt in list(self._optimizers):
            opt._release(ptr_alive=True)
        self._losses = []
        lib.wgml_context_free(ptr)
        if _default is self:
            _default = None

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def __enter__(self):
        _current.append(self)
        return self

    def __exit__(self, *exc):
        if _current and _current[-1] is self:
            _current.pop()
        self.close()
        return False

    def _handle(self):
        if self._ptr is None:
            raise ContextError("the context was closed")
        return self._ptr

    # ------------------------------------------------------------ errors

    def _raise(self, status):
        """Raises the error of a failing call on this context."""
        raise error_for(status, _string(lib.wgml_error_message(self._ptr)) or "")

    def _check(self, status):
        if status != lib.WGML_OK:
            self._raise(status)

    @property
    def last_error(self):
        """The most recent failure's message ("" if none)."""
        return _string(lib.wgml_error_message(self._handle()))

    def clear_error(self):
        """Forgets the last failure's message."""
        lib.wgml_clear_error(self._handle())

    # ------------------------------------------------------------ queries

    def info(self):
        """The adapter: name, vendor, backend, type, ids, limits and features, as a dict."""
        info = ffi.new("wgml_adapter_info *")
        self._check(lib.wgml_adapter_info_get(self._handle(), info))
        d = {}
        for field, _ in ffi.typeof("wgml_adapter_info").fields:
            v = getattr(info, field)
            if field == "features":
                d[field] = [_string(info.features[i]) for i in range(info.feature_count)]
            elif field in ("feature_count", "subgroup_matrix_count"):
                continue
            elif field == "subgroup_matrix":  # a subgroup's M x K by K x N products
                d[field] = [{"component": _string(c.component), "result": _string(c.result),
                             "m": c.m, "n": c.n, "k": c.k}
                            for c in (info.subgroup_matrix[i] for i in range(info.subgroup_matrix_count))]
            elif isinstance(v, ffi.CData):  # char arrays and const char *
                d[field] = ffi.string(v).decode("utf-8", "replace") if v else None
            elif field.startswith("has_"):
                d[field] = bool(v)
            else:
                d[field] = v
        return d

    def stats(self):
        """The library's counters (wgml_stats): GPU buffers and bytes live and in use,
        uploads, submits, dispatches, kernels compiled, ... as a dict."""
        s = ffi.new("wgml_stats *")
        self._check(lib.wgml_stats_get(self._handle(), s))
        return {field: getattr(s, field) for field, _ in ffi.typeof("wgml_stats").fields}

    def reset_peaks(self):
        """Starts the peak counters of stats() over from the current values."""
        lib.wgml_stats_reset_peaks(self._handle())

    def release_cached(self):
        """Hands the buffer pool's free buffers back to the device (as torch.cuda.empty_cache);
        tensors alive keep theirs. Returns the bytes released."""
        n = ffi.new("uint64_t *")
        self._check(lib.wgml_release_cached(self._handle(), n))
        return int(n[0])

    def synchronize(self):
        """Waits for all submitted GPU work."""
        self._check(lib.wgml_synchronize(self._handle()))

    def eval(self, *tensors):
        """Evaluates the given tensors' pending graph in one submit."""
        from ._tensor import Tensor
        ts = [t for t in tensors if isinstance(t, Tensor)]
        if len(ts) != len(tensors):
            raise TypeError("eval takes wgml.Tensor arguments")
        arr = ffi.new("wgml_tensor *[]", [t._handle() for t in ts] or [ffi.NULL])
        self._check(lib.wgml_eval(self._handle(), len(ts), arr))

    # ------------------------------------------------------------ random numbers

    _PRECISIONS = {"f32": 0, "mixed": 1, "f32split": 2}

    @property
    def precision(self):
        """What matmuls built from now on compute in: "f32" (the default) or "mixed" (f16
        operands with f32 sums, on the matrix units where the adapter has them; their
        gradients too; everything else stays f32) or "f32split" (f32 matmuls on the matrix
        units as hi and lo halves, error near f32's; the f32 kernels without them):
        wgml_set_compute_precision."""
        v = int(lib.wgml_compute_precision(self._handle()))
        return {n: k for k, n in self._PRECISIONS.items()}.get(v, str(v))

    @precision.setter
    def precision(self, name):
        if name not in self._PRECISIONS:
            raise ValueError("precision is 'f32', 'mixed' or 'f32split', not %r" % (name,))
        self._check(lib.wgml_set_compute_precision(self._handle(), self._PRECISIONS[name]))

    def manual_seed(self, seed):
        """Sets the generator state to (seed, 0)."""
        self._check(lib.wgml_manual_seed(self._handle(), int(seed)))

    def get_rng_state(self):
        """(seed, offset) of the context's Philox generator."""
        seed, off = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        self._check(lib.wgml_rng_get_state(self._handle(), seed, off))
        return int(seed[0]), int(off[0])

    def set_rng_state(self, state):
        """Restores a (seed, offset) from get_rng_state()."""
        seed, off = state
        self._check(lib.wgml_rng_set_state(self._handle(), int(seed), int(off)))

    # ------------------------------------------------------------ cached weights

    def weight_upload(self, name, weight, f16=False):
        """Uploads a [rows, cols] weight once under `name` for matmul_cached (f16: stored as
        halves, needs the adapter's shader-f16)."""
        import numpy as np
        w = np.ascontiguousarray(weight, dtype=np.float32)
        if w.ndim != 2:
            raise ValueError("weight_upload: the weight must be 2-D, not %d-D" % w.ndim)
        desc = ffi.new("wgml_weight_desc *")
        desc.f16 = 1 if f16 else 0
        self._check(lib.wgml_weight_upload_ex(self._handle(), name.encode(), ffi.from_buffer("float[]", w),
                                              w.shape[0], w.shape[1], desc))
        self._cached_shapes[name] = w.shape

    def weight_remove(self, name):
        """Frees the cached weight `name`."""
        self._check(lib.wgml_weight_remove(self._handle(), name.encode()))
        self._cached_shapes.pop(name, None)

    def weights_resident(self):
        """(count, bytes) of the cached weights."""
        n, b = ffi.new("size_t *"), ffi.new("uint64_t *")
        self._check(lib.wgml_weights_resident(self._handle(), n, b))
        return int(n[0]), int(b[0])

    def matmul_cached(self, name, x):
        """x [m, rows] (host) times the cached weight [rows, cols]: a NumPy [m, cols]."""
        import numpy as np
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError("matmul_cached: the input must be 2-D, not %d-D" % x.ndim)
        shape = self._cached_shapes.get(name)
        if shape is None:
            # not uploaded through this wrapper: let the library name the problem
            self._check(lib.wgml_matmul_cached(self._handle(), name.encode(), ffi.from_buffer("float[]", x), x.size,
                                               ffi.NULL, 0, x.shape[0]))
            raise ValueError("matmul_cached: unknown weight %r" % name)
        out = np.empty((x.shape[0], shape[1]), dtype=np.float32)
        self._check(lib.wgml_matmul_cached(self._handle(), name.encode(), ffi.from_buffer("float[]", x), x.size,
                                           ffi.from_buffer("float[]", out, require_writable=True), out.size,
                                           x.shape[0]))
        return out

    def __repr__(self):
        if self._ptr is None:
            return "<wgml.Context closed>"
        return "<wgml.Context %s>" % self.info()["name"]


def default_context():
    """The context that tensors made without one use: the innermost `with` context, else one
    created on first use (adapter from WGML_ADAPTER / WGML_BACKEND, as in C)."""
    global _default
    if _current:
        return _current[-1]
    with _default_lock:
        if _default is None or _default.closed:
            _default = Context()
        return _default


def set_default_context(ctx):
    """Makes ctx the default context (None: a fresh one is made on next use)."""
    global _default
    if ctx is not None and not isinstance(ctx, Context):
        raise TypeError("set_default_context takes a wgml.Context or None")
    _default = ctx


@atexit.register
def _close_all():
    # Free the device while the interpreter is whole: wgpu-native's teardown must not race
    # module cleanup. Tensors still alive then find their context closed and skip their free.
    # Other threads still running (daemon threads) may be inside a call on a context or about
    # to make one, which freeing it would crash: then each context's lock is taken instead
    # (it waits for a call in progress) and held until the process ends, so their later calls
    # wait, inside the library, for an exit that frees everything at once.
    me = threading.current_thread()
    others = any(t is not me and t.is_alive() for t in threading.enumerate())
    for ctx in list(_live):
        try:
            if others:
                if ctx._ptr is not None:
                    lib.wgml_context_lock(ctx._ptr)
            else:
                ctx.close()
        except Exception:
            pass
