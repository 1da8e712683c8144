/*
 * wgml.h — the public header of wgml, a GPU tensor library over WebGPU (wgml_gpt.h, beside
 * it, adds the GPT models).
 *
 * Shape of the API:
 *   - Opaque handles (wgml_context, wgml_tensor, wgml_optimizer).
 *   - Functions that can fail return wgml_status; wgml_error_message(ctx) gives the most
 *     recent failure in words (what was wrong, the shapes, values or limits involved). Calls
 *     that succeed leave it as it was (check the status first); wgml_clear_error clears it.
 *   - Ops are lazy: they record a node and return a tensor at once. Nothing runs until a
 *     result is needed (wgml_tensor_read, wgml_eval); then the whole pending graph is
 *     encoded into one command buffer and submitted once.
 *   - A lazy result means what it meant when it was built. A call that overwrites data in
 *     place (wgml_tensor_write, wgml_optimizer_step, wgml_dist_allreduce and _broadcast)
 *     first evaluates the pending results still held (by a handle, a scope, a gradient)
 *     that read what it overwrites, in the same submit where it can. Views are not results
 *     but aliases: a view of a tensor (a parameter's transpose, say) shows its new data.
 *   - An op given bad input still returns a tensor, in an error state: it carries the
 *     status and message, ops built on it inherit them, and reading it returns the status.
 *     Only a NULL context makes an op return NULL.
 *   - Tensors are owned by their context. wgml_tensor_free releases one early (its GPU
 *     memory goes back to the pool once no pending op needs it); scopes release every
 *     tensor made inside them, for loops that build a graph per step.
 *   - Handles are plain pointers, checked for NULL only. Using a tensor after it was freed
 *     (by wgml_tensor_free, the end of its scope or wgml_context_free), or an optimiser or
 *     context after its free, is undefined behaviour, like using memory after free(): it is
 *     not detected, and freeing twice may free another, live tensor. Whatever is made on a
 *     context (an optimiser, a wgml_file, a GPT model) is freed before it: their calls,
 *     their frees included, take the context's lock.
 *   - Descriptor structs: a field left zero means "the default".
 *   - Threads: a context may be used from several threads. Every call on a context (or on a
 *     tensor, optimiser or file of it) holds the context's lock for its duration, so calls
 *     from two threads run one after the other, never at once: a thread calling while another
 *     is inside waits. What a context keeps is the context's, not the thread's: the last
 *     error and its message, the scopes, the random generator's state. A thread that needs
 *     several calls together (a call and its error message, a scope, a seed and the random op
 *     it is for) holds the context across them with wgml_context_lock. Different contexts run
 *     in parallel.
 *   - fork(): a context belongs to the process that made it. In a child made by fork(), a
 *     call on a context of the parent returns at once with WGML_ERROR_CONTEXT (an op returns
 *     an error tensor; frees and other void calls do nothing), never touching the parent's
 *     device. A context of the child's own may be refused (NVIDIA's Vulkan driver makes no
 *     device in the child of a process that has one, as CUDA does not; lavapipe does), and a
 *     child that used a GPU leaves by _exit(): a driver's exit handlers may wait on threads
 *     fork() did not copy (lavapipe's crash or hang in exit()). Work that needs the GPU in
 *     another process starts a new program (exec, posix_spawn, Python's "spawn").
 */
#ifndef WGML_H
#define WGML_H

#include <stddef.h>
#include <stdint.h>

/* WGML_API marks the library's interface: only these symbols leave libwgml.so (the rest is
   built with hidden visibility). */
#ifndef WGML_API /* the library's own sources define it away (scripts/gen_api_locks.py) */
#if defined(__GNUC__) || defined(__clang__)
#define WGML_API __attribute__((visibility("default")))
#else
#define WGML_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define WGML_MAX_DIMS 4

/* ---------------------------------------------------------------- version */

/* The one place the version is written: CMake, the command and the Python package read it
   from here. wgml_version() is the library's own, which may differ from these macros when a
   program runs against another build than the header it was compiled with. */
#define WGML_VERSION_MAJOR 0
#define WGML_VERSION_MINOR 8
#define WGML_VERSION_PATCH 0
WGML_API const char *wgml_version(void); /* "MAJOR.MINOR.PATCH" */

/* ---------------------------------------------------------------- statuses */

typedef enum wgml_status {
    WGML_OK = 0,
    WGML_ERROR_INVALID_ARGUMENT, /* NULL, bad dimension, bad axis, wrong host length */
    WGML_ERROR_SHAPE,            /* shapes that do not fit the op */
    WGML_ERROR_OVERFLOW,         /* an element count or byte size that overflows */
    WGML_ERROR_LIMIT,            /* past an adapter limit (buffer size, binding size) */
    WGML_ERROR_NO_ADAPTER,       /* no WebGPU adapter found */
    WGML_ERROR_DEVICE,           /* the device could not be created */
    WGML_ERROR_DEVICE_LOST,      /* the device was lost; the context is unusable */
    WGML_ERROR_OUT_OF_MEMORY,    /* host or GPU allocation failed */
    WGML_ERROR_VALIDATION,       /* WebGPU rejected a command (a bug in wgml; please report) */
    WGML_ERROR_CONTEXT,          /* a tensor from another context; a context used after fork() */
    WGML_ERROR_NOT_FOUND,        /* unknown name (cached weights) */
    WGML_ERROR_EXISTS,           /* duplicate name (cached weights) */
    WGML_ERROR_IO,               /* a file could not be opened, read or written */
    WGML_ERROR_FORMAT,           /* a file is corrupt, truncated or of the wrong kind */
    WGML_ERROR_UNSUPPORTED,      /* the adapter or build lacks what was asked */
    WGML_STATUS_COUNT
} wgml_status;

/* The enum's identifier, e.g. "WGML_ERROR_SHAPE" (for logs and bindings; what went wrong in
   words is wgml_error_message's); "WGML_STATUS_UNKNOWN" for a number that is no status. */
WGML_API const char *wgml_status_name(wgml_status status);

/* ---------------------------------------------------------------- context */

typedef struct wgml_context wgml_context;

typedef enum wgml_backend {
    WGML_BACKEND_DEFAULT = 0, /* Vulkan, or the WGML_BACKEND environment variable */
    WGML_BACKEND_VULKAN,
    WGML_BACKEND_METAL,
    WGML_BACKEND_DX12,
    WGML_BACKEND_GL,
    WGML_BACKEND_ALL
} wgml_backend;

/* The WebGPU implementation a context runs on, loaded at run time (one libwgml runs on
   either). AUTO: the WGML_RUNTIME environment variable ("auto", "wgpu-native", "dawn"), else
   Dawn where it is installed and the adapter offers subgroup matrices (the GPU's matrix units,
   which wgpu-native cannot enable), else wgpu-native. A process runs one implementation at a
   time: a context asking for the other while one is open gets WGML_ERROR_UNSUPPORTED, as does
   one whose library cannot be loaded (WGML_DAWN_LIBRARY and WGML_WGPU_NATIVE_LIBRARY name the
   files; by default they are found beside libwgml). */
typedef enum wgml_runtime_kind {
    WGML_RUNTIME_AUTO = 0,
    WGML_RUNTIME_WGPU_NATIVE,
    WGML_RUNTIME_DAWN
} wgml_runtime_kind;

typedef struct wgml_context_desc {
    wgml_backend backend;     /* which WebGPU backends to try; a value that is not one of
                                 the enum's is WGML_ERROR_INVALID_ARGUMENT */
    const char *adapter_name; /* pick the first adapter whose name contains this (case-
                                 insensitive); NULL: the WGML_ADAPTER environment variable,
                                 else discrete GPU, then integrated, then CPU */
    int bounds_checks;        /* 1: compile every kernel with runtime bounds checks (slow,
                                 for debugging); 0: hand-written kernels run trusted */
    int no_fusion;            /* 1: one dispatch per elementwise op (for benchmarks) */
    int gpu_timing;           /* 1: time each evaluation's compute pass on the GPU with
                                 timestamp queries (stats.gpu_seconds_last); each eval then
                                 waits for its result. Needs the timestamp-query feature;
                                 the WGML_GPU_TIMING=1 environment variable also sets it */
    int adapter_index;        /* among several adapters of the chosen kind (the best type that
                                 matches the name), the one at this position, modulo their
                                 number: a process's local rank gives each rank of a machine
                                 its own GPU (more ranks than GPUs share them). 0: the
                                 WGML_ADAPTER_INDEX environment variable, else the first.
                                 Negative: WGML_ERROR_INVALID_ARGUMENT. Dawn offers one
                                 adapter: every index is that one */
    wgml_runtime_kind runtime; /* the WebGPU implementation (see wgml_runtime_kind); a value
                                 not of the enum is WGML_ERROR_INVALID_ARGUMENT */
    /* The rest mirror the environment variables listed at the end of this file (each field
       left zero or NULL takes its variable, read once, here; a field that is set wins).
       Strings are copied: the caller's may go once the context is made. Fields are only
       ever added at the end, so a zeroed desc of an older header means the same. */
    const char *dawn_library;        /* Dawn's libwebgpu_dawn.so to open instead of wgml's; */
    const char *wgpu_native_library; /* wgpu-native's: both only where the process has not
                                        loaded that runtime yet (it stays loaded) */
    const char *dawn_toggles;        /* more Dawn device toggles, "a,b,..." (experiments) */
    const char *dump_wgsl;           /* a folder: every kernel compiled is written there */
    const char *profile;             /* a file: every dispatch timed in a pass of its own, GPU
                                        time per kind of launch written when the context is
                                        freed (needs the timestamp-query feature) */
    int timeline;                    /* 1: the host clock at each step of a submit-and-read */
    double poll_spin_us;             /* how long a wait spins before blocking: > 0 that many
                                        microseconds, < 0 never; 0: the default (10000 on a
                                        GPU, 0 on a CPU adapter). NaN: INVALID_ARGUMENT */
    int64_t loop_limit;              /* > 0: pretend the adapter ends shader loops after this
                                        many iterations (as lavapipe does after 65535), which
                                        walks the split paths at small sizes; 0: the
                                        adapter's; < 0: INVALID_ARGUMENT */
    int64_t binding_limit;           /* > 0: a storage binding limit smaller than the
                                        adapter's (at least 256; tests of the split paths);
                                        0: the adapter's; below 256: INVALID_ARGUMENT */
    double dist_bucket_mb;           /* wgml_dist_allreduce's bucket size in MiB, in (0,
                                        1024]; 0: 16; other values: INVALID_ARGUMENT */
    int dist_overlap;                /* data parallel: 0 or 1 its all-reduce overlapped with the
                                        backward pass (the default), -1 after it (blocking) */
    int dist_defer;                  /* data parallel: 0 or 1 each step's end left in flight
                                        until the next step's first bucket (the default), -1 not */
    int dist_inline;                 /* 1: data parallel's MPI calls on the calling thread */
    /* Kernel choices, for benchmark sweeps and tests, as text in their variable's syntax (a
       value out of range is ignored): the large-M GEMM's tile "tm,tn,bk,stages" and warp
       layout "8x4"; the CPU-adapter GEMM "0" (off), "1" (forced) or "rows,cols,lanes"; "0":
       that GEMM without subgroup broadcasts; the GEMV's columns per workgroup "16"|"32"|"64";
       "0": no small-M GEMV; "1": GEMV partial sums meet by subgroup shuffles; elements per
       thread of fused elementwise kernels "1"|"2"|"4"|"8"; the attention kernels' tiles
       "r,c,t,r,c,t,r,c,t" (forward, dK/dV, dQ) and prefetch bits (a mask of 47); the
       attention under mixed precision: "0" the SIMT f32 kernels, "emulate[,MxNxK,lanes,cols]" the
       matrix-unit kernels with plain-WGSL stand-ins for the matrices (checks on a CPU adapter),
       "cols,F,K,Q[,S]" their steps (forward, dK/dV, dQ) and subgroups per workgroup */
    const char *gemm_tile, *gemm_warp, *gemm_cpu, *gemm_cpu_subgroups, *gemv_cols, *gemv_rows, *subgroups,
        *ew_unroll, *attn_tiles, *attn_pre;
    int dist_shm;                    /* data parallel and wgml_dist_allreduce, when every rank
                                        is on one machine: 0 or 1 the host reduction through
                                        a shared-memory segment of wgml's (the default), -1
                                        MPI_Allreduce; every rank must say the same */
    int dist_f16;                    /* data parallel's gradients through host memory as f16
                                        (summed in f32; half the bytes): 1 always; 0 (the
                                        default) or -1 never. f16's range is narrower than the
                                        scaled gradients': ranks then skip steps that one
                                        process would take. Every rank the same */
    const char *attn_matrix;         /* the attention under mixed precision (the list above) */
    int dist_threads;                /* the shared-memory reduction: threads each rank copies and
                                        sums with, 1 to 16 (rank 0's count holds for all); 0:
                                        the machine's cores over the ranks on it, halved, at
                                        most 8 */
} wgml_context_desc;

/* Creates a context on the chosen adapter. On failure *out is NULL and the status says why;
   wgml_last_create_error() gives the message (there is no context to hold it). */
WGML_API wgml_status wgml_context_create(const wgml_context_desc *desc, wgml_context **out);
WGML_API const char *wgml_last_create_error(void);
WGML_API void wgml_context_free(wgml_context *ctx);
/* Holds ctx for the calling thread until the matching wgml_context_unlock; other threads'
   calls on ctx wait meanwhile. Pairs nest (the lock is recursive, and every public call takes
   it the same way), so this is needed only to keep several calls together.
   WGML_ERROR_CONTEXT in a fork's child (then unlock does nothing). */
WGML_API wgml_status wgml_context_lock(wgml_context *ctx);
WGML_API void wgml_context_unlock(wgml_context *ctx);

/* The most recent failure on ctx in words, "" if none since its creation or the last
   wgml_clear_error; wgml_last_status gives its status (WGML_OK if none). Every call that fails
   on ctx (or on a tensor or optimiser of it) replaces both, an op that returns an error
   tensor included; calls that succeed never change them. Queries taking a const context
   (wgml_stats_get, wgml_weights_resident) only return their status. The string is valid
   until the next call on ctx, from any thread (see Threads above). */
WGML_API const char *wgml_error_message(const wgml_context *ctx);
WGML_API wgml_status wgml_last_status(const wgml_context *ctx);
WGML_API void wgml_clear_error(wgml_context *ctx);

/* Blocks until all submitted GPU work is done. */
WGML_API wgml_status wgml_synchronize(wgml_context *ctx);

#define WGML_MAX_SUBGROUP_MATRIX_CONFIGS 16
typedef struct wgml_subgroup_matrix_config {
    const char *component, *result;
    uint32_t m, n, k;
} wgml_subgroup_matrix_config;

typedef struct wgml_adapter_info {
    char name[256];
    char vendor[128];
    char architecture[128];
    char driver[256];
    const char *backend;      /* "Vulkan", "Metal", ... */
    const char *adapter_type; /* "discrete GPU", "integrated GPU", "CPU", "unknown" */
    uint32_t vendor_id, device_id;
    /* limits requested from the adapter (its real ones) */
    uint64_t max_buffer_size;
    uint64_t max_storage_buffer_binding_size;
    uint64_t max_uniform_buffer_binding_size;
    uint32_t max_compute_workgroup_storage_size;
    uint32_t max_compute_invocations_per_workgroup;
    uint32_t max_compute_workgroup_size_x, max_compute_workgroup_size_y,
        max_compute_workgroup_size_z;
    uint32_t max_compute_workgroups_per_dimension;
    uint32_t max_storage_buffers_per_shader_stage;
    uint32_t min_storage_buffer_offset_alignment;
    uint32_t min_uniform_buffer_offset_alignment;
    uint32_t subgroup_min_size, subgroup_max_size;
    /* features enabled on the device */
    int has_timestamp_query, has_subgroups, has_shader_f16, has_immediates,
        has_pipeline_cache, has_cooperative_matrix;
    /* every feature the adapter offers, by name */
    int feature_count;
    const char *features[64];
    /* the WebGPU implementation: "wgpu-native" or "dawn", its version, the file loaded */
    const char *runtime;
    char runtime_version[64];
    char runtime_library[512];
    /* Subgroup matrices (Dawn's chromium-experimental-subgroup-matrix, enabled on the device
       where offered, with shader-f16 and subgroups): a subgroup multiplies M x K `component`
       by K x N into M x N `result` ("f16", "f32", "i8", ...) in each configuration. */
    int has_subgroup_matrix;
    int subgroup_matrix_count;
    wgml_subgroup_matrix_config subgroup_matrix[WGML_MAX_SUBGROUP_MATRIX_CONFIGS];
} wgml_adapter_info;

WGML_API wgml_status wgml_adapter_info_get(wgml_context *ctx, wgml_adapter_info *info);

typedef struct wgml_stats {
    uint64_t buffers_live;        /* GPU buffers held by the pool (in use or free) */
    uint64_t bytes_live;          /* bytes of those buffers */
    uint64_t buffers_peak, bytes_peak;
    uint64_t bytes_in_use;        /* bytes of pool buffers handed out to tensors now */
    uint64_t bytes_in_use_peak;
    uint64_t bytes_uploaded, bytes_downloaded;
    uint64_t submits;             /* queue submits */
    uint64_t dispatches;          /* compute dispatches encoded */
    uint64_t pipelines_compiled;  /* distinct kernels compiled */
    uint64_t pipeline_cache_hits; /* kernel lookups served from the cache */
    uint64_t bind_groups_created; /* bind groups made (a repeated evaluation reuses its own) */
    uint64_t evals;               /* graph evaluations */
    double host_seconds_last;     /* the last evaluation's host work: from the call to its
                                     submit returning (planning, kernel lookup, encoding) */
    double gpu_seconds_last;      /* with gpu_timing: the last evaluation's compute pass */
    double gpu_seconds_total;     /* ... and the sum over all timed passes */
} wgml_stats;

WGML_API wgml_status wgml_stats_get(const wgml_context *ctx, wgml_stats *stats);
WGML_API void wgml_stats_reset_peaks(wgml_context *ctx); /* peaks := current values */
/* Hands the pool's free buffers (bytes_live - bytes_in_use) back to the device, as
   torch.cuda.empty_cache does: for another process, or before a phase that needs other sizes.
   Tensors alive keep their buffers; later work allocates again. bytes_released may be NULL. */
WGML_API wgml_status wgml_release_cached(wgml_context *ctx, uint64_t *bytes_released);

/* ---------------------------------------------------------------- tensors */

typedef struct wgml_tensor wgml_tensor;

/* Element types. Every tensor carries one; constructors that name none make f32, so code
   written before integer tensors is unchanged. An op given a dtype it does not take returns
   an error tensor (WGML_ERROR_INVALID_ARGUMENT) naming the op, the operand and the dtype.
   Views, contiguous, concat/stack/split and gather take f32 and i32; the arithmetic takes f32
   (wgml_cast converts). Indices (gather, index_select, embedding) and argmax/argmin results
   are i32.
   WGML_F16 (IEEE half, 2 bytes an element) is storage for activations under mixed precision:
   only wgml_cast makes one (from f32; it fails with WGML_ERROR_UNSUPPORTED on an adapter
   without shader-f16). The elementwise ops, matmul (either operand) and the norms' outputs
   take it, reading halves and computing in f32 (the elementwise ops' results are f32 unless
   the op is a cast to f16, which runs inside the producer's kernel: a layernorm, a norm or a
   fused elementwise chain then stores halves); views and contiguous copies keep it; other
   ops refuse it. wgml_tensor_read and wgml_tensor_write take f32 values for an f16 tensor
   (widened exactly; rounded to nearest even, as wgml_cast). */
typedef enum wgml_dtype { WGML_F32 = 0, WGML_I32 = 1, WGML_F16 = 2, WGML_DTYPE_COUNT } wgml_dtype;
WGML_API const char *wgml_dtype_name(wgml_dtype dtype); /* "f32", "i32", "f16"; "unknown" otherwise */

/* f32 tensor of 1 to 4 dimensions, from host data (n must equal the element count). */
WGML_API wgml_status wgml_tensor_from_data(wgml_context *ctx, int ndim, const int64_t *shape,
                                  const float *data, size_t n, wgml_tensor **out);
WGML_API wgml_status wgml_tensor_zeros(wgml_context *ctx, int ndim, const int64_t *shape,
                              wgml_tensor **out);
/* Evaluates t if needed and copies it (row-major, contiguous) into host memory; n must
   equal its element count. */
WGML_API wgml_status wgml_tensor_read(wgml_tensor *t, float *host, size_t n);
/* Overwrites a realized, contiguous tensor's data from the host. Pending results that read
   its buffer are evaluated first (one submit), so they keep the old values. The values
   written are constants to autograd: a graph kept for a later wgml_backward (see there) is
   dropped. */
WGML_API wgml_status wgml_tensor_write(wgml_tensor *t, const float *host, size_t n);
/* The same for i32 tensors (token ids, labels, indices). An i32 tensor from the host
   remembers its smallest and largest value, so an op that indexes with it (gather) checks
   the range when it is built; indices computed on the GPU are checked there instead. */
WGML_API wgml_status wgml_tensor_from_i32(wgml_context *ctx, int ndim, const int64_t *shape,
                                 const int32_t *data, size_t n, wgml_tensor **out);
WGML_API wgml_status wgml_tensor_read_i32(wgml_tensor *t, int32_t *host, size_t n);
WGML_API wgml_status wgml_tensor_write_i32(wgml_tensor *t, const int32_t *host, size_t n);
/* Releases the user's hold on t (NULL is ignored). t is then a dangling pointer: passing it to
   any wgml function, wgml_tensor_free included, is undefined behaviour and is not detected. */
WGML_API void wgml_tensor_free(wgml_tensor *t);

WGML_API int wgml_tensor_ndim(const wgml_tensor *t);
WGML_API int64_t wgml_tensor_dim(const wgml_tensor *t, int axis); /* negative axes count from the end */
WGML_API int64_t wgml_tensor_numel(const wgml_tensor *t);
WGML_API wgml_dtype wgml_tensor_dtype(const wgml_tensor *t); /* WGML_F32 for NULL */
WGML_API wgml_status wgml_tensor_status(const wgml_tensor *t); /* error state of a lazy result */
WGML_API wgml_context *wgml_tensor_context(const wgml_tensor *t);

/* Scopes: every tensor created after wgml_scope_begin is freed by the matching
   wgml_scope_end, unless passed to wgml_keep; its handle is then dangling, as after
   wgml_tensor_free. Scopes nest. */
WGML_API void wgml_scope_begin(wgml_context *ctx);
WGML_API void wgml_scope_end(wgml_context *ctx);
WGML_API void wgml_keep(wgml_tensor *t); /* moves t to the enclosing scope */

/* Evaluates the pending graph that the given tensors need, in one submit. */
WGML_API wgml_status wgml_eval(wgml_context *ctx, int n, wgml_tensor *const *tensors);
/* The same, and reads `read` (one of the tensors, contiguous, with `count` elements of its
   dtype: f32 or i32) back into host in that same submit: one wait instead of two, for a loop
   that needs a small result of each step (a sampled token) and keeps the rest on the GPU. */
WGML_API wgml_status wgml_eval_read(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_tensor *read, void *host,
                           size_t count);

/* ---------------------------------------------------------------- ops (lazy) */

/* binary, NumPy broadcasting */
WGML_API wgml_tensor *wgml_add(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_sub(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_mul(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_div(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_pow(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_maximum(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_minimum(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
/* comparisons, broadcasting: f32 masks, 1 where a op b holds, else 0 (false for NaN, except ne);
   no gradient passes through them. i32 operands compare as their f32 values (exact below
   2^24), so argmax against i32 labels works as it is */
WGML_API wgml_tensor *wgml_eq(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_ne(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_lt(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_le(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_gt(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_ge(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
/* selection, broadcasting: where(cond, a, b) is a where cond != 0, else b (the other side's
   inf or NaN never leaks in); masked_fill(a, mask, value) is value where mask != 0, else a.
   Gradients pass to a and b where each is chosen. */
WGML_API wgml_tensor *wgml_where(wgml_context *ctx, wgml_tensor *cond, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_masked_fill(wgml_context *ctx, wgml_tensor *a, wgml_tensor *mask, float value);
/* The causal mask of t queries over s keys, [t, s]: 1 where key j lies in query i's future,
   j > i + (s - t) (aligned bottom-right, so queries continuing a cache of s - t keys work),
   else 0. Built on the GPU from two uploaded ranges (t + s values), never as a t x s host array:
   pass it to
   wgml_masked_fill(scores, mask, -INFINITY). t <= s. */
WGML_API wgml_tensor *wgml_causal_mask(wgml_context *ctx, int64_t t, int64_t s);
/* [start, start + 1, ..., stop - 1] of dtype (f32 or i32), 1-D, made on the host and uploaded;
   start < stop, within i32 and the adapter's buffer limits. f32 values are exact up to 2^24. */
WGML_API wgml_tensor *wgml_arange(wgml_context *ctx, int64_t start, int64_t stop, wgml_dtype dtype);

/* the same with a scalar: op(a, s) and op(s, a); the scalar is passed as data */
typedef enum wgml_binary_op {
    WGML_ADD, WGML_SUB, WGML_MUL, WGML_DIV, WGML_POW, WGML_MAXIMUM, WGML_MINIMUM,
    WGML_EQ, WGML_NE, WGML_LT, WGML_LE, WGML_GT, WGML_GE, /* comparisons: masks of 0 and 1 */
    WGML_BINARY_OP_COUNT
} wgml_binary_op;
WGML_API wgml_tensor *wgml_binary_scalar(wgml_context *ctx, wgml_binary_op op, wgml_tensor *a, float s);
WGML_API wgml_tensor *wgml_scalar_binary(wgml_context *ctx, wgml_binary_op op, float s, wgml_tensor *a);
WGML_API wgml_tensor *wgml_binary(wgml_context *ctx, wgml_binary_op op, wgml_tensor *a, wgml_tensor *b);

/* unary */
WGML_API wgml_tensor *wgml_neg(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_abs(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_exp(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_log(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_sqrt(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_rsqrt(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_tanh(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_sigmoid(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_relu(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_gelu(wgml_context *ctx, wgml_tensor *a); /* tanh approximation */
WGML_API wgml_tensor *wgml_gelu_exact(wgml_context *ctx, wgml_tensor *a); /* x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) */
WGML_API wgml_tensor *wgml_erf(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_sin(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_cos(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_silu(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_softplus(wgml_context *ctx, wgml_tensor *a); /* log(1 + exp(a)), without overflow */
WGML_API wgml_tensor *wgml_softsign(wgml_context *ctx, wgml_tensor *a); /* a / (1 + |a|) */
/* min(max(a, lo), hi); lo > hi or a NaN bound is WGML_ERROR_INVALID_ARGUMENT */
WGML_API wgml_tensor *wgml_clamp(wgml_context *ctx, wgml_tensor *a, float lo, float hi);

/* The library's ops, for bindings that make their functions from the library rather than a
   list of their own (python/wgml makes its elementwise functions and methods this way):
   op index 0 .. wgml_op_count() - 1, in no promised order. */
typedef struct wgml_op_info {
    const char *name;   /* as in its constructor: "add", "softmax"; static storage */
    const char *kind;   /* "storage", "view", "unary", "binary", "reduce", "row", "matmul", "custom", "kernel" */
    int arity;          /* its tensor operands (a binary op given a number for one takes one) */
    int has_gradient;   /* 1: backward passes a gradient through it */
    int public_fn;      /* 1: wgml.h declares wgml_<name>(ctx, a) (unary) or wgml_<name>(ctx, a, b) (binary) */
    int binary_op;      /* a public binary op's wgml_binary_op (wgml_binary_scalar takes it), else -1 */
} wgml_op_info;
WGML_API int wgml_op_count(void);
/* WGML_ERROR_INVALID_ARGUMENT for an index out of range or a NULL info */
WGML_API wgml_status wgml_op_get_info(int index, wgml_op_info *info);

/* reductions along an axis (keepdim keeps it with size 1) and over all elements */
WGML_API wgml_tensor *wgml_sum(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim);
WGML_API wgml_tensor *wgml_mean(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim);
WGML_API wgml_tensor *wgml_max(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim);
WGML_API wgml_tensor *wgml_argmax(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim); /* i32 indices */
WGML_API wgml_tensor *wgml_min(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim);
WGML_API wgml_tensor *wgml_argmin(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim); /* i32 indices */
/* variance and standard deviation along an axis: sum((a - mean)^2) / (n - correction);
   correction 1 is the unbiased estimate (torch.var's default), 0 the population one (NumPy's
   default); n <= correction gives NaN */
WGML_API wgml_tensor *wgml_var(wgml_context *ctx, wgml_tensor *a, int axis, int correction, int keepdim);
WGML_API wgml_tensor *wgml_std(wgml_context *ctx, wgml_tensor *a, int axis, int correction, int keepdim);
WGML_API wgml_tensor *wgml_sum_all(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_mean_all(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_max_all(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_min_all(wgml_context *ctx, wgml_tensor *a);

/* along the last axis */
WGML_API wgml_tensor *wgml_softmax(wgml_context *ctx, wgml_tensor *a);
WGML_API wgml_tensor *wgml_log_softmax(wgml_context *ctx, wgml_tensor *a);
/* weight and bias are optional (NULL) 1-D tensors of the last axis' size; eps must be >= 0
   (negative or NaN: WGML_ERROR_INVALID_ARGUMENT) */
WGML_API wgml_tensor *wgml_layernorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight,
                            wgml_tensor *bias, float eps);
WGML_API wgml_tensor *wgml_rmsnorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight, float eps);
/* each row scaled to unit length, a / max(||a||_2, eps) along the last axis (PyTorch's
   normalize(a, dim=-1); eps >= 0, 1e-12 there) */
WGML_API wgml_tensor *wgml_normalize(wgml_context *ctx, wgml_tensor *a, float eps);

/* cumulative sum along axis (negative counts from the end): out[..., i, ...] = sum_{j <= i}
   a[..., j, ...]; reverse = 1 sums from the end (j >= i). f32, or i32 (whose sums wrap as
   two's complement). Its gradient is the cumsum of the other direction. */
WGML_API wgml_tensor *wgml_cumsum(wgml_context *ctx, wgml_tensor *a, int axis, int reverse);

/* rotary position embedding as in Llama/Qwen (HF's "rotate half" layout): x [..., T, D] (f32,
   at least 2-D, D even; T is the second-to-last axis, e.g. [B,H,T,D]); element (t, j) for
   j < D/2 pairs with j + D/2 and is rotated by angle (t + pos_offset) * base^(-2j/D):
   out[j] = x[j] cos - x[j + D/2] sin, out[j + D/2] = x[j + D/2] cos + x[j] sin. base 0 means
   10000. As in HF, the angle is the f32 product of the position and the f32 frequency, so a
   query at t with pos_offset k gets exactly the row t + k of a longer sequence (a KV cache).
   0 <= pos_offset and pos_offset + T - 1 <= 2^24 (positions exact in f32); D <= 3904. The
   angle is reduced to [-pi, pi] exactly (in integer arithmetic), so at every accepted position
   the result is the rotation by that f32 angle to f32 rounding. A base below 1 (frequencies
   above 1) whose angles would reach 2^31 is WGML_ERROR_INVALID_ARGUMENT. */
WGML_API wgml_tensor *wgml_rope(wgml_context *ctx, wgml_tensor *x, int64_t pos_offset, float base);
typedef struct wgml_rope_desc {
    int64_t pos_offset; /* the position of t = 0 */
    float base;         /* 0 means 10000 */
    int interleaved;    /* pairs (2j, 2j + 1), as GPT-J and Meta's original Llama code, instead of (j, j + D/2) */
    int inverse;        /* rotates by -angle: undoes the rotation (and is its gradient) */
} wgml_rope_desc;
WGML_API wgml_tensor *wgml_rope_ex(wgml_context *ctx, wgml_tensor *x, const wgml_rope_desc *desc); /* NULL desc: defaults */

/* views and movement: no copy where a strided view will do */
WGML_API wgml_tensor *wgml_reshape(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape);
WGML_API wgml_tensor *wgml_permute(wgml_context *ctx, wgml_tensor *a, const int *axes);
WGML_API wgml_tensor *wgml_transpose(wgml_context *ctx, wgml_tensor *a, int axis0, int axis1);
WGML_API wgml_tensor *wgml_broadcast_to(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape);
/* [start, stop) with a step >= 1 along one axis, 0 <= start < stop <= the axis' size (no
   negative or clamped indices); else WGML_ERROR_INVALID_ARGUMENT. The length is NumPy's,
   ceil((stop - start) / step), for any step up to INT64_MAX. */
WGML_API wgml_tensor *wgml_slice(wgml_context *ctx, wgml_tensor *a, int axis, int64_t start,
                        int64_t stop, int64_t step);
WGML_API wgml_tensor *wgml_contiguous(wgml_context *ctx, wgml_tensor *a);
/* a's value as a new tensor that gradients do not flow through (a copy) */
WGML_API wgml_tensor *wgml_detach(wgml_context *ctx, wgml_tensor *a);
/* Joins n >= 1 tensors of one dtype and the same shape off `axis` along it (a copy; more than
   8 are joined in steps). Another dtype is WGML_ERROR_INVALID_ARGUMENT, another shape
   WGML_ERROR_SHAPE. */
WGML_API wgml_tensor *wgml_concat(wgml_context *ctx, int n, wgml_tensor *const *ts, int axis);
/* Joins n tensors of one shape along a new axis at position `axis` (0..ndim; the result has
   ndim + 1 <= 4 dimensions). */
WGML_API wgml_tensor *wgml_stack(wgml_context *ctx, int n, wgml_tensor *const *ts, int axis);
/* Views of n consecutive parts of a along axis, sizes[i] >= 1 summing to its size, into
   out[0..n); on failure every out[i] is NULL. No copy. */
WGML_API wgml_status wgml_split(wgml_context *ctx, wgml_tensor *a, int axis, int n, const int64_t *sizes, wgml_tensor **out);
/* n equal parts (the axis' size must be a multiple of n, else WGML_ERROR_SHAPE), as views */
WGML_API wgml_status wgml_chunk(wgml_context *ctx, wgml_tensor *a, int axis, int n, wgml_tensor **out);
/* a converted to dtype: i32 -> f32 is exact up to 2^24 in magnitude (then rounds to nearest);
   f32 -> i32 truncates toward zero as C does, saturates to INT32_MIN..INT32_MAX, and gives 0 for
   NaN; f32 -> f16 rounds to nearest, ties to even, as IEEE (subnormal halves kept, +-inf from
   65520 on, NaN stays NaN); f16 -> f32 is exact; i32 <-> f16 goes through f32. Casting to a's
   own dtype gives a view of a. The gradient passes through a cast between f32 and f16 (cast
   back to the input's dtype); none passes through a cast to or from i32. */
WGML_API wgml_tensor *wgml_cast(wgml_context *ctx, wgml_tensor *a, wgml_dtype dtype);

/* ---------------------------------------------------------------- random numbers */

/* Counter-based random numbers (Philox4x32-10, Salmon et al. SC11), the same bits on every
   adapter for the same seed. Each context has a generator state (seed, offset), which starts
   at seed 67280421310721 (PyTorch's default), offset 0. A random op takes the state when it is
   built, so evaluating it later or again gives the same numbers, and advances offset by the
   Philox blocks it uses, ceil(n / 4) for n elements. Element i (row-major) of such an op comes
   from the block with key (seed mod 2^32, seed >> 32) and counter (b mod 2^32, b >> 32, stream, 0),
   b = offset + i / 4: its 32-bit word i % 4, w, whose top 24 bits give u = (w >> 8) 2^-24. */
WGML_API wgml_status wgml_manual_seed(wgml_context *ctx, uint64_t seed); /* state := (seed, 0) */
/* the state now (save it with a checkpoint), and setting it back */
WGML_API wgml_status wgml_rng_get_state(wgml_context *ctx, uint64_t *seed, uint64_t *offset);
WGML_API wgml_status wgml_rng_set_state(wgml_context *ctx, uint64_t seed, uint64_t offset);
/* The stream: the third word of every later random op's Philox counter, (b mod 2^32, b >> 32,
   stream, 0) in the mapping above; 0 unless set. Processes that share a seed but must draw
   different numbers (data-parallel ranks: wgml_dist_data_parallel sets each rank's to its
   rank) each take their own, and stay reproducible. Not part of the state above. */
WGML_API wgml_status wgml_rng_set_stream(wgml_context *ctx, uint32_t stream);
WGML_API uint32_t wgml_rng_stream(wgml_context *ctx); /* 0 for NULL */

/* Uniform in [lo, hi): lo + (hi - lo) u, each step rounded in f32 and the result held below
   hi; bit-identical on every adapter. lo < hi, both finite, hi - lo finite; else
   WGML_ERROR_INVALID_ARGUMENT. A bad shape is refused as by wgml_tensor_zeros; a random op of
   more than 2^32 - 4 elements is WGML_ERROR_LIMIT. */
WGML_API wgml_tensor *wgml_rand(wgml_context *ctx, int ndim, const int64_t *shape, float lo, float hi);
/* Normal(mean, std) by Box-Muller: words 2m, 2m + 1 of a block give elements 2m, 2m + 1 as
   mean + std r cos(t), mean + std r sin(t), r = sqrt(-2 ln u1), u1 = ((w_2m >> 8) + 1) 2^-24
   in (0, 1] (never ln 0), t = 2 pi u of w_2m+1. The kernel computes ln, cos and sin with its
   own f32 polynomials, so adapters agree to a few f32 roundings (~1e-6 of std). mean finite,
   std finite and >= 0; else WGML_ERROR_INVALID_ARGUMENT. */
WGML_API wgml_tensor *wgml_randn(wgml_context *ctx, int ndim, const int64_t *shape, float mean, float std);
/* PyTorch's training-mode dropout: element i of a is dropped (0, even if NaN) where u < p, the
   others are multiplied by 1 / (1 - p) rounded to f32 once. Its gradient drops the same
   elements of the incoming gradient (the node keeps its counters) and scales the rest alike.
   p = 0 gives a itself (a view; no counters used), p = 1 zeros; p outside [0, 1] or NaN is
   WGML_ERROR_INVALID_ARGUMENT. */
WGML_API wgml_tensor *wgml_dropout(wgml_context *ctx, wgml_tensor *a, float p);

/* Initialisers: rand and randn with bounds from a weight's shape. A weight is [in, out]
   (x [B, in] @ W [in, out]): fan_in = shape[ndim-2] * rf, fan_out = shape[ndim-1] * rf, where
   rf, the product of the dims before those two, is a receptive field ([kh, kw, in, out]) and
   1 for a 2-D weight. ndim >= 2, gain finite and > 0; else WGML_ERROR_INVALID_ARGUMENT.
   gain as PyTorch's calculate_gain: 1 (linear, sigmoid), 5/3 (tanh), sqrt(2) (relu, Kaiming's
   usual), sqrt(2 / (1 + a^2)) (leaky relu of slope a). */
typedef enum wgml_fan_mode { WGML_FAN_IN = 0, WGML_FAN_OUT } wgml_fan_mode;
/* U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)) */
WGML_API wgml_tensor *wgml_xavier_uniform(wgml_context *ctx, int ndim, const int64_t *shape, float gain);
/* N(0, std), std = gain sqrt(2 / (fan_in + fan_out)) */
WGML_API wgml_tensor *wgml_xavier_normal(wgml_context *ctx, int ndim, const int64_t *shape, float gain);
/* U(-b, b), b = gain sqrt(3 / fan), fan = fan_in or fan_out as mode says */
WGML_API wgml_tensor *wgml_kaiming_uniform(wgml_context *ctx, int ndim, const int64_t *shape, float gain,
                                  wgml_fan_mode mode);
/* N(0, std), std = gain / sqrt(fan) */
WGML_API wgml_tensor *wgml_kaiming_normal(wgml_context *ctx, int ndim, const int64_t *shape, float gain,
                                 wgml_fan_mode mode);

/* gather and scatter with i32 indices. Indices uploaded from the host (wgml_tensor_from_i32)
   are checked when the op is built: one out of range is WGML_ERROR_INVALID_ARGUMENT, naming it.
   Indices computed on the GPU are checked there: a bad one reads and writes nothing (its
   output entries are 0; index_add skips it) and the next read (of any tensor) returns
   WGML_ERROR_INVALID_ARGUMENT with a message naming the index's position; the tensors
   themselves keep no error state. No gradient passes to indices. */
/* rows of table [V, C] by ids (i32, any shape up to 3-D): result [ids..., C] */
WGML_API wgml_tensor *wgml_embedding(wgml_context *ctx, wgml_tensor *table, wgml_tensor *ids);
/* entries of a (any dtype) along axis picked by idx (1-D i32): result has a's shape with
   that axis of len(idx) */
WGML_API wgml_tensor *wgml_index_select(wgml_context *ctx, wgml_tensor *a, int axis, wgml_tensor *idx);
/* a copy of a with src's slices added at the positions idx (1-D i32) along axis:
   out[.., idx[i], ..] += src[.., i, ..]; src has a's shape with that axis of len(idx); repeated
   indices accumulate, in a fixed order (the same bits every run). a and src are f32. */
WGML_API wgml_tensor *wgml_index_add(wgml_context *ctx, wgml_tensor *a, int axis, wgml_tensor *idx, wgml_tensor *src);

/* ---------------------------------------------------------------- matmul */

typedef enum wgml_activation {
    WGML_ACT_NONE = 0, WGML_ACT_RELU, WGML_ACT_GELU, WGML_ACT_SILU,
    WGML_ACT_GELU_EXACT /* x Phi(x), as wgml_gelu_exact; WGML_ACT_GELU is the tanh form */
} wgml_activation;

/* wgml_matmul_desc's f16_math */
enum { WGML_F16_MATH_F32_SUMS = 1, WGML_F16_MATH_F16_SUMS = 2, WGML_F16_MATH_MATRIX = 3, WGML_F16_MATH_MATRIX_SPLIT = 4 };

typedef struct wgml_matmul_desc {
    int trans_a, trans_b; /* use a^T / b^T (no copy) */
    float alpha;          /* 0 means 1 */
    wgml_tensor *bias;    /* optional, [N] */
    wgml_activation activation;
    /* f16 arithmetic (opt in; 0: f32). Both operands are rounded to f16 as they are staged
       into workgroup memory (to nearest, ties to even: so on lavapipe, which the tests check,
       though WGSL lets an adapter take either neighbour; magnitudes past 65504 become
       infinities: from 65520 on under ties to even, from 65536 on on any adapter).
       WGML_F16_MATH_F32_SUMS (1): the products of each 16 k (16j .. 16j + 15; fewer where a
       tile's slice is shallower) are summed in f16 (vec4<f16> fma) and each such sum is added
       into f32 accumulators. Error: within about 18 * 2^-11 * sum_k |a_mk b_kn| (2^-11 for
       each operand's rounding, 16 for the f16 sum).
       WGML_F16_MATH_F16_SUMS (2): the whole sum over K in f16, as f16 hardware GEMMs without
       f32 accumulation do, with an error that grows with K (the worst case, (K + 2) *
       2^-11 * sum_k |a b| to first order, says nothing past K = 1024), and any partial sum
       past 65504 becomes an infinity. Both: alpha, bias, activation and the result are f32. Every shape
       runs the tiled GEMM kernel (never the GEMV or CPU-adapter kernels), so the result
       always carries f16 rounding. Needs the adapter's shader-f16 feature (wgml_adapter_info's
       has_shader_f16): without it wgml_matmul_ex fails with WGML_ERROR_UNSUPPORTED; another
       value is WGML_ERROR_INVALID_ARGUMENT. Gradients (autograd) are computed with f32
       arithmetic. Speeds and measured errors of both: docs/MEASUREMENTS.md.
       WGML_F16_MATH_MATRIX (3): f16 operands, f32 sums on the GPU's matrix units where the
       adapter has them (wgml_adapter_info's has_subgroup_matrix with an f16 -> f32 config and
       one subgroup size: Dawn), within about (2^-11 per operand + (K + 2) * 2^-23) *
       sum_k |a_mk b_kn|; elsewhere the WGML_F16_MATH_F32_SUMS kernel (the same bound class).
       Results of fewer than 16 rows (after batches that share B fold into rows) run the f32
       kernels (GEMV), which the matrix tiles would mostly waste. `wgml info` says which.
       WGML_F16_MATH_MATRIX_SPLIT (4): f32 accuracy at matrix-unit speed: each f32 operand,
       scaled by a power of two from its largest magnitude (a launch before the GEMM finds
       it), is split into two halves (its leading 11 bits and the rest) and three products
       of them are summed in f32 on the matrix units, within about (2^-18 + (3K + 2) * 2^-23)
       * sum_k |a_mk b_kn| (an H200 measured 0.6-1.8e-6 of sum |ab| at 4096^3 and the GPT's
       shapes, f32's kernel 1.8e-7, f32 operands rounded to halves 2e-5). Infinities and NaN
       set no scale and reach the results as in the f32 kernels. Where the adapter has no matrix
       units, either operand is stored as f16, or the result has fewer than 16 rows or
       columns, the f32 kernels run instead (the same bound holds), and shader-f16 is not
       needed. */
    int f16_math;
} wgml_matmul_desc;

/* The context's compute precision. WGML_PRECISION_MIXED: every matmul built while it is set
   whose desc leaves f16_math 0 (wgml_matmul, wgml_linear, the gradients autograd builds)
   runs as WGML_F16_MATH_MATRIX (f16 operands, f32 sums; on the matrix units where the adapter
   has them, else the SIMT f16 kernel), and every wgml_attention built or differentiated
   while it is set runs on the matrix units where the adapter has them (f16 Q, K, V, dO and P,
   f32 sums and softmax statistics; elsewhere its f32 kernels, the WGML_ATTN_MATRIX knob
   aside); everything else stays f32. Needs shader-f16
   (WGML_ERROR_UNSUPPORTED without it). Training under it wants loss scaling
   (wgml_optimizer_set_loss_scaling): small gradients underflow in f16. Default F32.
   WGML_PRECISION_F32_SPLIT: every such matmul runs as WGML_F16_MATH_MATRIX_SPLIT (f32
   operands as hi and lo halves on the matrix units, error near f32's; the f32 kernels where
   the adapter has none); everything else, attention included, stays f32, and no loss scaling
   is needed. */
typedef enum wgml_precision { WGML_PRECISION_F32 = 0, WGML_PRECISION_MIXED = 1, WGML_PRECISION_F32_SPLIT = 2 } wgml_precision;
WGML_API wgml_status wgml_set_compute_precision(wgml_context *ctx, wgml_precision p);
WGML_API wgml_precision wgml_compute_precision(const wgml_context *ctx);

/* a [..., M, K], b [..., K, N] (2 to 4 dims each), with the transposes as flagged (on the
   last two dims). The leading dims broadcast NumPy-style (a missing dim counts as 1, a dim of
   1 stretches): the result is broadcast(leading dims) + [M, N], e.g. [B,H,T,D] x [B,H,D,T],
   [B,T,C] x [C,N], [1,H,T,D] x [B,1,D,T]. Views (transposes, permutations, slices, broadcasts)
   are read through their strides, without a copy, wherever one of the two matrix dims has
   unit stride. Bias and activation apply to every matrix of the batch. */
WGML_API wgml_tensor *wgml_matmul(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b);
WGML_API wgml_tensor *wgml_matmul_ex(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b,
                            const wgml_matmul_desc *desc);

/* The cached-matmul API: weights uploaded once by name, host in and out.
   output[m, cols] = input[m, rows] x weight[rows, cols]. */
WGML_API wgml_status wgml_weight_upload(wgml_context *ctx, const char *name, const float *data,
                               int64_t rows, int64_t cols);
typedef struct wgml_weight_desc {
    /* store the weight as IEEE halves (round to nearest even; past +-65504: infinity): half
       the memory and the bandwidth of a matmul; the math stays f32. Needs the adapter's
       shader-f16 feature (WGML_ERROR_UNSUPPORTED without it). */
    int f16;
} wgml_weight_desc;
WGML_API wgml_status wgml_weight_upload_ex(wgml_context *ctx, const char *name, const float *data,
                                  int64_t rows, int64_t cols, const wgml_weight_desc *desc);
WGML_API wgml_status wgml_weight_remove(wgml_context *ctx, const char *name);
WGML_API wgml_status wgml_weights_resident(const wgml_context *ctx, size_t *count, uint64_t *bytes);
WGML_API wgml_status wgml_matmul_cached(wgml_context *ctx, const char *name, const float *input,
                               size_t input_len, float *output, size_t output_len,
                               int64_t m);

/* ---------------------------------------------------------------- attention */

typedef struct wgml_attention_desc {
    int causal;  /* 1: query i sees keys j <= i + (S - T), the mask aligned bottom-right, so a
                    block of queries that continues a cache of S keys works (the usual tril
                    when S == T); a query that sees no key (S < T) gives 0 */
    float scale; /* 0 means 1/sqrt(D); else any finite number */
    /* optional: the tensor q, k and v are windows of, [B,T,(H+2Hkv)D] contiguous, q's heads
       then k's then v's along its last axis (a fused QKV projection's output, each window
       split into heads by wgml_reshape to [B,T,H+2Hkv,D], wgml_slice and wgml_permute; S = T).
       The gradient then goes to it as one tensor, the three side by side, instead of to each
       window (three zero-padded copies of it, summed). Other q, k, v: WGML_ERROR_INVALID_ARGUMENT */
    wgml_tensor *packed;
    int out_bthd; /* 1: the result is [B,T,H,D] (heads side by side in each position, as a
                     reshape to [B,T,H*D] wants it, with no copy) instead of [B,H,T,D]; 3-D
                     operands: no change */
} wgml_attention_desc;

/* Fused scaled-dot-product attention: q [B,H,T,D], k and v [B,Hkv,S,D] with H a multiple of
   Hkv (grouped-query attention: query head h reads key/value head h / (H/Hkv)); returns
   [B,H,T,D] (with desc.out_bthd [B,T,H,D]) = softmax(scale q k^T [+ causal mask]) v,
   computed tile by tile without storing the T x S scores (also in its gradient, which reads
   the result's upstream gradient through its strides where its rows are contiguous). 3-D
   [N,T,D] operands are N independent heads (k and v [N,S,D]). D <= 128 (larger:
   WGML_ERROR_UNSUPPORTED). Inputs may be strided views (heads split by wgml_permute). desc
   may be NULL (not causal, default scale). */
WGML_API wgml_tensor *wgml_attention(wgml_context *ctx, wgml_tensor *q, wgml_tensor *k, wgml_tensor *v,
                            const wgml_attention_desc *desc);

/* ---------------------------------------------------------------- autograd */

/* Marks a leaf tensor as trainable: an evaluated one, or a pending result that no trainable
   tensor lies upstream of (evaluated here first: an initialiser's, w * 0.02). A pending result
   computed from trainable tensors is WGML_ERROR_INVALID_ARGUMENT (not a leaf: wgml_detach makes
   one), and so is a view. An evaluated tensor that was such a result becomes a leaf: gradients
   stop at it. */
WGML_API wgml_status wgml_requires_grad(wgml_tensor *t, int on);
/* Reverse mode from a one-element loss: each trainable tensor the loss depends on gets its
   gradient added to wgml_grad(t) (lazy: computed with the next evaluation). The loss (or any
   tensor on the way) may have been read or evaluated before: a result that a trainable tensor
   lies upstream of keeps its graph while it lives, and the evaluation that computes the
   gradients then recomputes the forward values they need. */
WGML_API wgml_status wgml_backward(wgml_tensor *loss);
WGML_API wgml_tensor *wgml_grad(wgml_tensor *t); /* borrowed; NULL if none */
WGML_API void wgml_zero_grad(wgml_tensor *t);

/* ---------------------------------------------------------------- files */

/* Writes tensors (lazy ones evaluated; views in their logical order; f32 or i32; up to 4
   dims) to a safetensors file under the given names, with string metadata (n_meta pairs, or
   0 and NULLs), atomically: a temporary file renamed over path, so a crash leaves the old
   file or the new one. Names: non-empty, unique, valid UTF-8, at most 127 bytes; metadata
   keys at most 63 bytes, values 255. Errors name the tensor or key. */
WGML_API wgml_status wgml_save(wgml_context *ctx, const char *path, int n, const char *const *names, wgml_tensor *const *tensors,
                      int n_meta, const char *const *meta_keys, const char *const *meta_values);

/* A safetensors file read and checked whole (wgml_load): F32, F16 and BF16 tensors (as f32)
   and I32 ones, up to 4 dims; any other dtype, and anything malformed or truncated, is
   WGML_ERROR_FORMAT naming what; a file that cannot be read WGML_ERROR_IO. */
typedef struct wgml_file wgml_file;
WGML_API wgml_status wgml_load(wgml_context *ctx, const char *path, wgml_file **out);
WGML_API int wgml_file_count(const wgml_file *f);
WGML_API const char *wgml_file_name(const wgml_file *f, int i);   /* NULL past the count */
WGML_API int wgml_file_find(const wgml_file *f, const char *name); /* its index, or -1 */
WGML_API const char *wgml_file_meta(const wgml_file *f, const char *key); /* NULL when absent */
WGML_API int wgml_file_meta_count(const wgml_file *f);                    /* metadata entries */
WGML_API const char *wgml_file_meta_key(const wgml_file *f, int i);       /* NULL past the count */
/* Tensor i uploaded (a new tensor of the file's shape and dtype, a scalar as [1]: free it);
   NULL, with the context's message, for an index out of range or an empty tensor. */
WGML_API wgml_tensor *wgml_file_tensor(wgml_file *f, int i);
WGML_API void wgml_file_free(wgml_file *f); /* the host copy; tensors made from it stay */

/* ---------------------------------------------------------------- losses */

/* Softmax cross-entropy with integer labels, averaged over rows: logits [B, C], labels [B]
   holding class indices (i32, or whole numbers as f32). Fused and numerically stable. i32
   labels uploaded from the host are checked when the op is built; others on the GPU, where a
   label that is not a class index makes the next read fail. */
WGML_API wgml_tensor *wgml_cross_entropy(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels);
/* mean((pred - target)^2), broadcasting */
WGML_API wgml_tensor *wgml_mse(wgml_context *ctx, wgml_tensor *pred, wgml_tensor *target);

/* ---------------------------------------------------------------- optimisers */

typedef struct wgml_optimizer wgml_optimizer;
typedef enum wgml_optim_kind { WGML_OPTIM_ADAMW = 0, WGML_OPTIM_SGD } wgml_optim_kind;

typedef struct wgml_optim_desc {
    wgml_optim_kind kind;
    float lr;                /* finite, >= 0; the peak when a schedule is set */
    float beta1, beta2, eps; /* AdamW; 0 means 0.9, 0.999, 1e-8; betas in [0, 1), eps > 0 */
    float momentum;          /* SGD; in [0, 1) */
    float weight_decay;      /* decoupled for AdamW, added to the gradient for SGD; finite,
                                >= 0. With parameter groups each group has its own, and this
                                one must be 0 */
    float max_grad_norm;     /* clip by global norm; 0: no clipping; >= 0 */
} wgml_optim_desc;
/* A number out of its range (NaN included) is WGML_ERROR_INVALID_ARGUMENT, with a message
   naming the field and its value; wgml_optimizer_set_lr checks lr the same way. */

/* The parameters (evaluated, contiguous) move into one flat GPU buffer owned by the
   optimiser; the tensors stay valid and become trainable. One group: every parameter has
   desc->weight_decay and desc->lr. A tensor that is already another optimiser's parameter
   moves into the new one, and the other's wgml_optimizer_step is WGML_ERROR_INVALID_ARGUMENT
   from then on (its update would go to the slot the tensor left). */
WGML_API wgml_status wgml_optimizer_create(wgml_context *ctx, const wgml_optim_desc *desc, int n,
                                  wgml_tensor *const *params, wgml_optimizer **out);

/* Parameter groups, as PyTorch's param_groups: typically the matrices with weight decay and
   the biases and norm weights without. A group's lr is the optimiser's lr (desc->lr, or
   wgml_optimizer_set_lr's, shaped by the schedule) times lr_scale, so one schedule drives
   every group. Clipping is by the global norm over all groups; the update stays one GPU
   dispatch whatever the groups. */
typedef struct wgml_param_group {
    int n;                       /* parameters in the group, > 0 */
    wgml_tensor *const *params;  /* n tensors, each in no other group */
    float lr_scale;              /* 0 means 1; else finite, > 0 */
    float weight_decay;          /* this group's; finite, >= 0; 0: none */
} wgml_param_group;

/* As wgml_optimizer_create, with n_groups > 0 groups; desc->weight_decay must be 0 (each
   group gives its own). Parameter indices (wgml_optimizer_state, checkpoints) run over the
   groups in order: groups[0]'s parameters first, then groups[1]'s, ... A bad group (NULL
   params, n <= 0, a number out of range, a tensor in two groups) is
   WGML_ERROR_INVALID_ARGUMENT naming it, e.g. "groups[1].weight_decay = -1". */
WGML_API wgml_status wgml_optimizer_create_groups(wgml_context *ctx, const wgml_optim_desc *desc, int n_groups,
                                         const wgml_param_group *groups, wgml_optimizer **out);

/* Evaluates the parameters' pending gradients (and `extra` tensors, e.g. the loss) and
   updates every parameter in one submit; gradients are consumed. Other pending results that
   read the parameters, their gradients or the moments (logits, a handle on a gradient) are
   evaluated in that submit too, before the update, and keep their values: end a scope's
   forward and backward tensors before the step (keeping the loss) when nothing reads them
   after it, or they are all kept as results. A failed step updates nothing and counts no
   step; its gradients are kept where they can be (then a retry takes them), or left in error,
   or dropped (after a gradient hook had run on them; the message says so): wgml_zero_grad
   the parameters and running the backward again always goes on. A deferred step (data
   parallelism's) that cannot be ended loses its update and its count, which the message says. */
WGML_API wgml_status wgml_optimizer_step(wgml_optimizer *opt, int n_extra, wgml_tensor *const *extra);
/* The global gradient norm of the last step, before clipping (reads 4 bytes). */
WGML_API wgml_status wgml_optimizer_grad_norm(wgml_optimizer *opt, float *norm);
/* Steps taken (or set by wgml_optimizer_set_steps, e.g. on resuming a checkpoint). */
WGML_API int64_t wgml_optimizer_steps(const wgml_optimizer *opt);
WGML_API wgml_status wgml_optimizer_set_steps(wgml_optimizer *opt, int64_t steps);
/* The base lr: the peak of the schedule, if one is set. */
WGML_API wgml_status wgml_optimizer_set_lr(wgml_optimizer *opt, float lr);

/* Learning-rate schedules: linear warm-up, then a decay to min_lr_ratio x the base lr. The
   step is counted from 0 and is the number of steps taken before the one the lr is for
   (wgml_optimizer_steps when wgml_optimizer_step is called), as nanoGPT's get_lr(it):
     step <  warmup_steps:                lr = base * (step + 1) / (warmup_steps + 1)
     warmup_steps <= step <= total_steps: r = (step - warmup_steps) / (total_steps - warmup_steps)
                                          COSINE: lr = min + (base - min) * (1 + cos(pi r)) / 2
                                          LINEAR: lr = min + (base - min) * (1 - r)
                                          NONE:   lr = base
     step > total_steps:                  lr = min (NONE: base)
   where min = base * min_lr_ratio. The warm-up never gives 0 and reaches base at
   step = warmup_steps. The zeroed schedule is a constant lr. */
typedef enum wgml_lr_decay {
    WGML_LR_DECAY_NONE = 0, WGML_LR_DECAY_COSINE, WGML_LR_DECAY_LINEAR
} wgml_lr_decay;
typedef struct wgml_lr_schedule {
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* where the decay ends; > warmup_steps with a decay; with NONE
                             not used (>= 0) */
    float min_lr_ratio;   /* the lr after the decay over the base lr, in [0, 1] */
    wgml_lr_decay decay;
} wgml_lr_schedule;

/* The lr of `step` under schedule s (NULL: no schedule, base_lr), computed on the host in
   double; NaN for a schedule that wgml_optimizer_set_schedule would refuse, a negative step
   or a base_lr that is negative or not finite. */
WGML_API float wgml_lr_at(const wgml_lr_schedule *s, float base_lr, int64_t step);
/* Each step then uses wgml_lr_at(s, base lr, wgml_optimizer_steps(opt)), times the group's
   lr_scale: a number in the step's parameter block, so no kernel is compiled for it. NULL
   removes the schedule. A bad field is WGML_ERROR_INVALID_ARGUMENT naming it. */
WGML_API wgml_status wgml_optimizer_set_schedule(wgml_optimizer *opt, const wgml_lr_schedule *s);
/* The lr the next step will use, before the groups' lr_scale (for logs); NaN if opt is NULL. */
WGML_API float wgml_optimizer_lr(const wgml_optimizer *opt);

/* Dynamic loss scaling for mixed precision, all on the GPU (no read in a step): the loss is
   multiplied by the scale before the backward pass (wgml_optimizer_scale_loss), the step
   divides the gradients by it before the norm, the clipping and the update, and a step whose
   gradients hold inf or NaN (their squared norm is not finite) changes no parameter or moment
   and multiplies the scale by backoff; growth_interval good steps in a row multiply it by
   growth. Adam's bias correction counts the updates taken, not the skipped steps; the lr
   schedule counts steps. Fields left 0 take PyTorch GradScaler's defaults. */
typedef struct wgml_loss_scaling {
    float init_scale;    /* 0 means 65536; else finite, > 0 */
    int growth_interval; /* 0 means 2000; else in [1, 2^24] */
    float backoff;       /* 0 means 0.5; else in (0, 1) */
    float growth;        /* 0 means 2; else finite, >= 1 */
} wgml_loss_scaling;
/* Turns scaling on (s: its settings; the state starts at init_scale) or off (NULL). */
WGML_API wgml_status wgml_optimizer_set_loss_scaling(wgml_optimizer *opt, const wgml_loss_scaling *s);
/* Whether scaling is on (0 for NULL). */
WGML_API int wgml_optimizer_scales_loss(const wgml_optimizer *opt);
/* loss (one element) times the current scale, for wgml_backward; loss x 1 with scaling off. */
WGML_API wgml_tensor *wgml_optimizer_scale_loss(wgml_optimizer *opt, wgml_tensor *loss);
typedef struct wgml_loss_scale_state {
    float scale;
    int64_t good_steps;    /* finite steps since the scale last changed (< growth_interval) */
    int64_t skipped_steps; /* steps skipped since scaling was turned on */
    int last_skipped;      /* whether the last step was skipped */
    int64_t updates;       /* updates taken (Adam's bias correction) */
} wgml_loss_scale_state;
/* The state after the last step (reads 32 bytes; for logs and checkpoints), and its
   restoration (a checkpoint's). Both need scaling on. */
WGML_API wgml_status wgml_optimizer_loss_scale_state(wgml_optimizer *opt, wgml_loss_scale_state *out);
WGML_API wgml_status wgml_optimizer_set_loss_scale_state(wgml_optimizer *opt, const wgml_loss_scale_state *s);
/* A function wgml_optimizer_step calls between computing the gradients and clipping them:
   grads is a 1-D tensor (borrowed, valid during the call) viewing every parameter's evaluated
   gradient in the optimiser's flat buffer, in parameter order with zeros between them. The
   hook may read it and overwrite it (wgml_tensor_read, wgml_tensor_write: e.g. average it
   across processes, wgml_dist_data_parallel); the norm, the clipping and the update use what
   it leaves. A failing status ends the step without an update and wgml_optimizer_step returns
   it. With a hook the step is two submits: the gradients (with the extra tensors), then the
   update. hook NULL removes it. */
typedef wgml_status (*wgml_grad_hook)(wgml_optimizer *opt, wgml_tensor *grads, void *user);
WGML_API wgml_status wgml_optimizer_set_grad_hook(wgml_optimizer *opt, wgml_grad_hook hook, void *user);

/* Tensors viewing parameter i's first and second moments (for checkpoints); free them. */
WGML_API wgml_status wgml_optimizer_state(wgml_optimizer *opt, int i, wgml_tensor **m, wgml_tensor **v);
WGML_API void wgml_optimizer_free(wgml_optimizer *opt);

/* ---------------------------------------------------------------- distributed (MPI) */

/* Data parallelism across processes started by mpirun, over MPI. The state is the process's,
   as MPI's is. In a build without MPI (CMake -DWGML_MPI=OFF), or in a process that no MPI
   launcher started, the process is rank 0 of 1 and the collectives leave data as it is.
   Nothing links MPI: wgml_dist_init uses the process's MPI if it has one, else opens the
   MPI library under a launcher only (WGML_MPI_LIBRARY, else the launcher's: Open MPI's or
   MPICH's, told by its variables); one build speaks either's binary interface.
   Functions without a context report failures through wgml_dist_error_message(). */
typedef enum wgml_reduce_op { WGML_REDUCE_SUM = 0, WGML_REDUCE_MEAN } wgml_reduce_op;

/* Joins the launcher's processes (MPI_Init, unless the program initialised MPI itself). A
   process started by mpirun in a build without MPI is WGML_ERROR_UNSUPPORTED. Calling it again
   does nothing. */
WGML_API wgml_status wgml_dist_init(void);
/* Leaves (MPI_Finalize if wgml_dist_init called MPI_Init); every rank must call it. */
WGML_API wgml_status wgml_dist_finalize(void);
WGML_API int wgml_dist_rank(void);       /* 0 before init */
WGML_API int wgml_dist_size(void);       /* 1 before init */
WGML_API int wgml_dist_local_rank(void); /* among the ranks on this machine: picks its GPU */
WGML_API int wgml_dist_local_size(void);
WGML_API const char *wgml_dist_error_message(void); /* the last failure of a wgml_dist_ call */
WGML_API wgml_status wgml_dist_barrier(void);
/* Ends every rank at once (MPI_Abort with code), for a rank that cannot go on while the others
   wait in a collective; on one rank, or without MPI, it returns and the caller exits. */
WGML_API void wgml_dist_abort(int code);

/* Sums (or averages) evaluated, contiguous f32 tensors elementwise across the ranks, in place:
   every rank passes the same number of tensors of the same sizes, and every rank ends with the
   same bits. The data goes through host memory in buckets (4M floats; WGML_DIST_BUCKET_MB sets
   the size): where every rank is on one machine, summed through a shared-memory segment of
   wgml's (each rank sums its slice; WGML_DIST_SHM=0 uses MPI_Allreduce), else by MPI with the
   reduction of one bucket overlapping the copy of the next. */
WGML_API wgml_status wgml_dist_allreduce(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_reduce_op op);
/* Rank 0's values of evaluated, contiguous f32 tensors copied to every rank (parameters at the
   start of training). A rank whose tensors differ in size from rank 0's fails, naming both. */
WGML_API wgml_status wgml_dist_broadcast(wgml_context *ctx, int n, wgml_tensor *const *tensors);
/* The same for host data: n doubles reduced in place; bytes of rank 0's copied to all. */
WGML_API wgml_status wgml_dist_allreduce_host(double *data, size_t n, wgml_reduce_op op);
WGML_API wgml_status wgml_dist_broadcast_host(void *data, size_t bytes);
/* Makes opt's steps average the gradients across the ranks before the norm, the clipping and
   the update, so that every rank takes the global batch's step. The average overlaps the
   backward pass: the gradients are computed in buckets from the last parameter back (1M
   floats; WGML_DIST_BUCKET_MB), and each bucket is copied to host memory (as f16 under
   dist_f16), summed in f32 over the ranks by a thread of wgml's
   (shared memory on one machine, else MPI_Allreduce: dist_shm) and written back while the
   GPU computes the next; WGML_DIST_OVERLAP=0 gives the blocking all-reduce after the whole backward pass (a
   gradient hook) instead. Both give the same bits on 2 ranks. Each rank
   then trains on its own share of the global batch; the parameters must start equal
   (wgml_dist_broadcast). It also sets the context's random stream to the rank
   (wgml_rng_set_stream), so ranks that share a seed draw different dropout masks, as the
   shares of one process's batch would, and the same ones run after run. Nothing is set on
   one rank. Every rank calls it (as it does wgml_dist_broadcast and _allreduce): the first
   of them on a context checks that the ranks' data-parallel settings (bucket sizes, dist_shm,
   dist_f16, dist_overlap) are the same, and fails on every rank with a message where not. */
WGML_API wgml_status wgml_dist_data_parallel(wgml_optimizer *opt);

/* Time the gradient all-reduces took since the start (or the last reset). */
typedef struct wgml_dist_stats {
    uint64_t calls;             /* wgml_dist_allreduce calls (one per step in data parallel) */
    uint64_t bytes;             /* bytes reduced per rank (through host memory) */
    double gpu_wait_seconds;    /* data parallel: waiting for the GPU to finish the gradients */
    double copy_out_seconds;    /* reading tensors to host */
    double reduce_seconds;      /* the reduction (MPI or the shared-memory segment), waiting
                                   for the other ranks included */
    double copy_in_seconds;     /* writing the results back */
    /* the overlapped all-reduce of data parallel (buckets reduced as the backward pass
       finishes them): gpu_wait_seconds is then the time the step waited after submitting
       the last bucket (GPU, copies and MPI together), and */
    uint64_t buckets;           /* buckets reduced */
    double exposed_seconds;     /* from the last bucket's arrival in host memory to every bucket written back */
    /* from every bucket written back to the next step's first bucket submitted (the update
       and that bucket's submits; where the step's end is not left in flight, dist_defer, or
       the trainer reads results in between, also their planning and the graph's build: the
       GPU has little to do meanwhile) */
    double between_seconds;
    uint64_t values;            /* values reduced: bytes / 4, or / 2 where they travelled as f16
                                   (data parallel under dist_f16) */
    int shared_memory;          /* 1: the last reduction went through wgml's shared-memory
                                   segment (dist_shm), 2: through it with the GPU copying the
                                   gradients into it and the sums out itself (Dawn), 0:
                                   through MPI_Allreduce */
    double rank_wait_seconds;   /* of reduce_seconds, waiting in the shared-memory segment for
                                   the other ranks (their gradients, or their share of the sums) */
    int shared_memory_threads;  /* the threads each rank reduced with there (dist_threads) */
} wgml_dist_stats;
WGML_API void wgml_dist_stats_get(wgml_dist_stats *stats);
WGML_API void wgml_dist_stats_reset(void);

/* ---------------------------------------------------------------- debugging only */

/* For testing programs' error paths; not for normal use. */

/* Forces device loss (wgpuDeviceDestroy): every later call on ctx that needs the GPU fails
   with WGML_ERROR_DEVICE_LOST, as after a real loss. */
WGML_API void wgml_debug_destroy_device(wgml_context *ctx);

/* After the next `skip` submits of GPU work on ctx, n submits fail with WGML_ERROR_DEVICE before
   reaching the queue (none of their work runs), as a submit the runtime refused would; the
   device stays usable. n <= 0: none (and a count set before forgotten). */
WGML_API void wgml_debug_fail_submits(wgml_context *ctx, int skip, int n);

/* ---------------------------------------------------------------- environment variables */

/* Every environment variable the library reads; none is needed in normal use. Each but
   WGML_DIST_HOSTMAP has its wgml_context_desc field, and each is read once per context, when
   wgml_context_create makes
   it (src/runtime/settings.c, the one place that reads the environment): a field that is set
   (nonzero, non-NULL) wins over its variable; one left zero takes the variable, else the
   default. A variable changed after a context is made does not reach it. The yes/no ones
   (bounds_checks, gpu_timing) are on when the field or the variable says 1; timeline when
   the field is set or the variable is set to anything but 0.
     WGML_RUNTIME=auto|wgpu-native|dawn     .runtime
     WGML_DAWN_LIBRARY=<file>               .dawn_library
     WGML_WGPU_NATIVE_LIBRARY=<file>        .wgpu_native_library
     WGML_DAWN_TOGGLES=a,b,...              .dawn_toggles
     WGML_BACKEND=vulkan|metal|dx12|gl|all  .backend
     WGML_ADAPTER=<part of a name>          .adapter_name
     WGML_ADAPTER_INDEX=N                   .adapter_index
     WGML_BOUNDS_CHECKS=1                   .bounds_checks
     WGML_GPU_TIMING=1                      .gpu_timing
   Diagnostics:
     WGML_DUMP_WGSL=<folder>                .dump_wgsl
     WGML_PROFILE=<file>                    .profile
     WGML_TIMELINE=1                        .timeline
   Runtime behaviour:
     WGML_POLL_SPIN_US=N                    .poll_spin_us (0 here: never spin)
     WGML_LOOP_LIMIT=N                      .loop_limit
     WGML_DEBUG_BINDING_LIMIT=bytes         .binding_limit
     WGML_DIST_BUCKET_MB=X                  .dist_bucket_mb
     WGML_DIST_OVERLAP=0                    .dist_overlap = -1 (data parallel's all-reduce after
                                            the whole backward pass, not overlapped with it)
     WGML_DIST_DEFER=0                      .dist_defer = -1 (each step's end, the last
                                            write-backs and the update, waited for in the step,
                                            not left in flight until the next step's first bucket)
     WGML_DIST_INLINE=1                     .dist_inline (data parallel's MPI calls on the
                                            calling thread, as without MPI_THREAD_SERIALIZED)
     WGML_DIST_SHM=0                        .dist_shm = -1 (MPI_Allreduce, not wgml's
                                            shared-memory reduction, on one machine)
     WGML_DIST_F16=0|1                      .dist_f16 = -1 | 1 (gradients through host memory
                                            as f16: never, always; unset: never)
     WGML_DIST_THREADS=N                    .dist_threads
     WGML_DIST_HOSTMAP=0                    (no field: the ranks agree on it at the first step) data
                                            parallel's buffers copied through the runtime's
                                            staging, not mapped over the shared segment
   Kernel choices (a value out of range is ignored, as it is in the field):
     WGML_GEMM_TILE=tm,tn,bk,stages         .gemm_tile
     WGML_GEMM_WARP=8x4                     .gemm_warp
     WGML_GEMM_CPU=0|1|rows,cols,lanes      .gemm_cpu
     WGML_GEMM_CPU_SUBGROUPS=0              .gemm_cpu_subgroups
     WGML_GEMV_COLS=16|32|64                .gemv_cols
     WGML_GEMV_ROWS=0                       .gemv_rows
     WGML_SUBGROUPS=1                       .subgroups
     WGML_EW_UNROLL=1|2|4|8                 .ew_unroll
     WGML_ATTN_TILES=r,c,t,r,c,t,r,c,t      .attn_tiles
     WGML_ATTN_PRE=N                        .attn_pre
     WGML_ATTN_MATRIX=0|emulate[,MxNxK,L,C[,X]]|cols,F,K,Q[,S,O,X]  .attn_matrix
   The process's, read by each wgml_dist_init (there is no context then):
     WGML_MPI_LIBRARY=<file>   the MPI library to open under a launcher when the process has
                               none loaded (default: the launcher's family's, libmpi.so.40
                               for Open MPI, libmpich.so.12 or libmpi.so.12 for MPICH's)
     OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, MPI_LOCALNRANKS  set by MPI launchers:
                               whether one started the process, and whose (OMPI_*: Open
                               MPI; PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS: MPICH's Hydra) */

#ifdef __cplusplus
}
#endif
#endif /* WGML_H */
