/*
 * The context and tensor structs, shared by every layer inside the library.
 *
 * A tensor is one of three things:
 *   - storage: op == WGML_OP_NONE, buf holds its data (a pool buffer);
 *   - a view:  op == WGML_OP_VIEW, src[0] is the storage-or-lazy tensor whose buffer it reads,
 *              through its own shape, strides and offset (elements);
 *   - lazy:    any other op, src[] are its inputs; evaluation gives it a buffer and turns it
 *              into storage (it then drops its inputs).
 * Every lazy result is laid out contiguously, so a view's strides are known when it is made.
 */
#ifndef WGML_CORE_CONTEXT_H
#define WGML_CORE_CONTEXT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include <webgpu/webgpu.h>
#include <webgpu/wgpu.h>

#include "wgml.h"
#include "graph/ops.h"

#define WGML_TENSOR_MAGIC 0x7767746eu /* "wgtn" */
#define WGML_MAX_SRC 4
#define WGML_MAX_PARAMS 8

enum { WGML_VIEW_OTHER = 0, WGML_VIEW_RESHAPE, WGML_VIEW_PERMUTE, WGML_VIEW_BROADCAST, WGML_VIEW_SLICE };

/* ---------------------------------------------------------------- buffers */

typedef struct wgml_buffer {
    WGPUBuffer handle;
    uint64_t size;   /* bytes, the size class */
    int size_class;
    int refs;        /* storage tensors and views sharing it */
    struct wgml_buffer *next_free;
} wgml_buffer;

#define WGML_POOL_CLASSES 256

typedef struct wgml_pool {
    wgml_buffer *free_list[WGML_POOL_CLASSES];
} wgml_pool;

/* ---------------------------------------------------------------- tensors */

struct wgml_tensor {
    uint32_t magic;
    wgml_context *ctx;
    int ndim;
    int64_t shape[WGML_MAX_DIMS];
    int64_t stride[WGML_MAX_DIMS]; /* elements; 0 for broadcast dims */
    int64_t offset;                /* elements into the buffer */
    int64_t numel;

    wgml_buffer *buf; /* storage tensors only */
    /* when set, evaluation writes this node's result into dest at dest_offset (elements,
       aligned for binding) instead of a pool buffer: gradients land in an optimiser's
       flat buffer this way */
    wgml_buffer *dest;
    int64_t dest_offset;

    wgml_op op;
    int nsrc;
    wgml_tensor *src[WGML_MAX_SRC];
    float fparam[WGML_MAX_PARAMS]; /* scalars, eps, alpha, clamp bounds... */
    int32_t iparam[WGML_MAX_PARAMS]; /* axis, flags, scalar side... */

    wgml_status status; /* an error state from building the op */
    char *error;        /* its message (owned) */

    int refs;        /* 1 while the user holds it + 1 per lazy consumer */
    bool user_held;  /* not yet released by the user (free or scope end) */
    int scope;       /* scope depth it was made in */
    wgml_tensor *all_prev, *all_next; /* the context's list of live tensors */

    /* autograd */
    bool requires_grad;
    wgml_tensor *grad;    /* accumulated gradient (lazy until evaluated), same shape */
    wgml_tensor *bw_grad; /* scratch of one backward pass */
    bool bw_needs;        /* scratch: some trainable tensor is upstream */
    /* views: which movement made it (for its gradient) */
    int view_kind; /* WGML_VIEW_* */

    /* scratch for the scheduler of one evaluation */
    uint32_t sched_mark;  /* the evaluation that last visited it */
    int sched_uses;       /* readers inside this evaluation */
    int sched_kind;       /* WGML_SCHED_* */
    bool sched_pinned;    /* must get its own buffer (target, read through a view...) */
    bool sched_target;
    wgml_tensor *sched_consumer; /* its reader, when it has exactly one */
};

/* ---------------------------------------------------------------- pipelines */

typedef struct wgml_pipeline {
    uint64_t hash;
    uint8_t *key; /* what names the kernel: its WGSL source, or a generator's variant key */
    size_t key_len;
    WGPUComputePipeline pipeline;
    WGPUBindGroupLayout layout;
    struct wgml_pipeline *next;
} wgml_pipeline;

#define WGML_PIPELINE_BUCKETS 256

/* ---------------------------------------------------------------- cached weights */

typedef struct wgml_weight {
    char *name;
    int64_t rows, cols;
    WGPUBuffer buffer;
    uint64_t bytes;
    struct wgml_weight *next;
} wgml_weight;

/* ---------------------------------------------------------------- context */

struct wgml_context {
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPULimits limits;
    wgml_adapter_info info;
    int ew_unroll;        /* elements (of T) per thread of fused kernels: 1, or WGML_EW_UNROLL */
    bool trusted_kernels; /* compile hand-written kernels without runtime bounds checks */
    bool no_fusion;
    bool gpu_timing;          /* timestamp the compute pass of each eval (runtime/timing.c) */
    WGPUQuerySet timing_queries;
    WGPUBuffer timing_resolve, timing_readback;
    double poll_spin_seconds; /* how long a read-back spins before blocking (WGML_POLL_SPIN_US) */
    /* The most loop iterations one invocation of a kernel may run, all its loops together.
       Mesa's llvmpipe (lavapipe) ends every loop of a shader once they have run 65535 times
       between them (gallivm's loop limiter), silently: a longer loop gives a wrong answer.
       Kernels split work so they stay under it; a launch past it is refused (WGML_ERROR_LIMIT).
       UINT32_MAX where the driver has no such limit; WGML_LOOP_LIMIT overrides (tests). */
    uint32_t loop_limit;

    /* GPU-side error flags: kernels that check data (labels, indices) record the first
       problem here; the next read-back copies them out and reports it (graph/executor.c) */
    WGPUBuffer gpu_errors;
    bool gpu_errors_pending; /* a submitted kernel may have written them */

    /* errors */
    wgml_status status;
    char message[1024];
    volatile bool device_lost;
    char lost_message[512];
    wgml_status uncaptured_status; /* from the uncaptured-error callback */
    char uncaptured_message[512];

    wgml_stats stats;
    struct bind_slot *bind_cache; /* core/bind_cache.c */
    uint32_t eval_counter;
    wgml_pool pool;
    wgml_pipeline *pipelines[WGML_PIPELINE_BUCKETS];

    /* parameters of the dispatches of one evaluation: one uniform buffer, written once per
       submit; each dispatch binds its slice */
    WGPUBuffer params_buffer;
    uint64_t params_capacity;
    uint8_t *params_host;
    uint64_t params_host_capacity;

    /* staging for reads, grow-only */
    WGPUBuffer staging;
    uint64_t staging_size;

    /* live tensors and scopes */
    wgml_tensor *tensors;
    int scope_depth;

    /* cached matmul */
    wgml_weight *weights;
    struct wgml_cached_io *cached_io;

    /* autograd and optimisers add their state here */
    struct wgml_train_state *train;
};

/* ---------------------------------------------------------------- errors (core/error.c) */

/* Records status and message on ctx and returns status. */
wgml_status wgml_fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The status to return when the device is lost (records the message), else WGML_OK. */
wgml_status wgml_check_device(wgml_context *ctx);
/* Submits cb (and releases it), or reports a lost device without submitting. */
wgml_status wgml_submit(wgml_context *ctx, WGPUCommandBuffer cb);
void wgml_format_shape(char *out, size_t n, int ndim, const int64_t *shape);

/* ---------------------------------------------------------------- runtime (runtime/device.c) */

/* Error scopes around WebGPU calls: push both kinds, pop and turn a captured error into a
   status (WGML_ERROR_VALIDATION or WGML_ERROR_OUT_OF_MEMORY) with `what` in the message. */
void wgml_scope_push(wgml_context *ctx);
wgml_status wgml_scope_pop(wgml_context *ctx, const char *what);
/* Blocks until the queue is idle (wgpuDevicePoll with wait). */
wgml_status wgml_wait_idle(wgml_context *ctx);
/* Maps `buffer` for reading and blocks until done. */
wgml_status wgml_map_read(wgml_context *ctx, WGPUBuffer buffer, uint64_t size);
WGPUStringView wgml_sv(const char *s);

/* ---------------------------------------------------------------- pool (core/pool.c) */

/* A buffer of at least `bytes` bytes from the pool; NULL with the error recorded. */
wgml_buffer *wgml_pool_acquire(wgml_context *ctx, uint64_t bytes);
void wgml_buffer_retain(wgml_buffer *b);
void wgml_buffer_release(wgml_context *ctx, wgml_buffer *b);
/* A GPU buffer outside the pool that only grows (parameters, staging, cached-matmul I/O): when
   *buf is NULL or *size < need, it is released and made again, `first` bytes doubled until
   need fits (its contents are not kept). *replaced (if given) says whether that happened;
   on failure *buf is NULL and *size 0. */
wgml_status wgml_grow_buffer(wgml_context *ctx, WGPUBuffer *buf, uint64_t *size, uint64_t need, uint64_t first,
                             WGPUBufferUsage usage, const char *what, bool *replaced);
void wgml_pool_destroy(wgml_context *ctx);
/* GPU timing of compute passes (runtime/timing.c): the pass's timestamp writes (NULL when
   timing is off), the resolve encoded after the pass, and the read after the submit. */
const WGPUPassTimestampWrites *wgml_timing_writes(wgml_context *ctx, WGPUPassTimestampWrites *tw);
void wgml_timing_resolve(wgml_context *ctx, WGPUCommandEncoder enc);
wgml_status wgml_timing_read(wgml_context *ctx);
void wgml_timing_destroy(wgml_context *ctx);
/* A monotonic host clock, seconds. */
double wgml_host_seconds(void);

/* Checks a byte size against the adapter's buffer and binding limits. */
wgml_status wgml_check_buffer_size(wgml_context *ctx, uint64_t bytes, const char *what);

/* ---------------------------------------------------------------- pipelines (core/pipeline.c) */

/* The compute pipeline for this WGSL (entry point "main"), compiled once per context.
   trusted: compile without runtime bounds checks (hand-written, tested kernels). */
wgml_pipeline *wgml_pipeline_get(wgml_context *ctx, const char *wgsl, bool trusted);

/* Generated kernels are named by a variant key instead (the generator's inputs, a few
   words, beginning with one of the tags below), so an evaluation that reuses a kernel does
   not write and hash its source again: look the key up, and only when that gives NULL
   generate the source and file it under the key with wgml_pipeline_add. */
/* (a tag's low byte, a key's first, is 0: never the first byte of WGSL source) */
enum { WGML_KEY_NAMED = 0x100, WGML_KEY_FUSED = 0x200, WGML_KEY_ROW = 0x300, WGML_KEY_GEMM = 0x400, WGML_KEY_GEMV = 0x500 };
wgml_pipeline *wgml_pipeline_find(wgml_context *ctx, const uint32_t *key, size_t words);
wgml_pipeline *wgml_pipeline_add(wgml_context *ctx, const uint32_t *key, size_t words, const char *wgsl,
                                 bool trusted);
void wgml_pipelines_destroy(wgml_context *ctx);

/* ---------------------------------------------------------------- bind groups (core/bind_cache.c) */

/* A bind group for entries e[0..n) (n <= 16) of this layout, made once and kept while the
   same bindings recur; the cache owns it. NULL when it cannot be made. */
WGPUBindGroup wgml_bind_group(wgml_context *ctx, WGPUBindGroupLayout layout, const WGPUBindGroupEntry *e, size_t n);
/* Drops the cached bind groups: before a buffer they may name is released. */
void wgml_bind_cache_clear(wgml_context *ctx);

/* ---------------------------------------------------------------- teardown of later layers */

void wgml_weights_destroy(wgml_context *ctx); /* graph/matmul_cached.c */

/* ---------------------------------------------------------------- tensors (core/tensor.c) */

wgml_tensor *wgml_tensor_new(wgml_context *ctx, int ndim, const int64_t *shape);
/* A tensor in the error state (status and message), registered like any other. */
wgml_tensor *wgml_tensor_error(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool wgml_tensor_valid(const wgml_tensor *t);
void wgml_tensor_retain(wgml_tensor *t);
void wgml_tensor_unref(wgml_tensor *t);
void wgml_set_contiguous_strides(wgml_tensor *t);
bool wgml_is_contiguous(const wgml_tensor *t);
/* The storage-or-lazy tensor whose buffer t reads (t itself unless a view). */
static inline wgml_tensor *wgml_tensor_base(wgml_tensor *t)
{
    return t->op == WGML_OP_VIEW ? t->src[0] : t;
}
bool wgml_tensor_realized(wgml_tensor *t);
/* Computes the element count of a shape with overflow and validity checks. */
wgml_status wgml_shape_check(wgml_context *ctx, int ndim, const int64_t *shape, int64_t *numel);
void wgml_tensors_free_all(wgml_context *ctx);

#endif
