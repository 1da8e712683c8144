/*
 * The context (core/context.c): the runtime (runtime/runtime.h) plus what core keeps per
 * device: the buffer pool, the compiled kernels and bind groups, the live tensors. Layers
 * above keep their own state beside it as extensions (below), which the context frees
 * through the hook each registers, so core never reaches up.
 */
#ifndef WGML_CORE_CONTEXT_H
#define WGML_CORE_CONTEXT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wgml.h"
#include "runtime/runtime.h"
#include "core/buffer.h"
#include "core/pipeline.h"
#include "core/tensor.h"

#define WGML_MAX_EXTENSIONS 8

/* Releases what an extension's state holds (GPU buffers, allocations it points to); the
   context frees the state's own block after. */
typedef void (*wgml_extension_release)(wgml_context *ctx, void *state);

struct wgml_context {
    /* held by every public call on the context (core/api_lock.h), recursive */
    pthread_mutex_t lock;
    unsigned fork_generation; /* the process's fork count when it was made: a child sees more */
    long pid;                 /* the process that made it (for the child's message) */
    wgml_runtime rt;
    wgml_context_desc desc;  /* as given at creation (adapter_name not kept) */
    bool trusted_kernels;    /* compile hand-written kernels without runtime bounds checks */
    int compute_precision;   /* wgml_precision: what matmuls built now run in (ops/matmul/matmul.c) */

    wgml_pool pool;
    struct wgml_pipeline *pipelines[WGML_PIPELINE_BUCKETS];
    struct bind_cache *bind_cache; /* core/bind_cache.c */

    /* live tensors and scopes */
    wgml_tensor *tensors;
    int scope_depth;
    /* Evaluates the pending results that read one of bufs[0..n), before core overwrites them in
       place (wgml_tensor_write), so a result keeps the value it had when built. Set by engine/
       with the first lazy node (none before: nothing can be pending). */
    wgml_status (*settle_readers)(wgml_context *ctx, int n, struct wgml_buffer *const *bufs);
    /* A step left in flight (train/optim.c: data parallel's update waits for the all-reduce):
       graph/ runs it, once, before an evaluation that reads, or a write into, one of the
       buffers it writes, so nothing sees them before it. */
    wgml_status (*pending_step)(wgml_context *ctx, void *arg);
    void *pending_step_arg;
    struct wgml_buffer *pending_step_bufs[5];

    /* the layers above: state by key, freed in reverse order of registration */
    struct {
        const void *key;
        void *state;
        wgml_extension_release release;
    } ext[WGML_MAX_EXTENSIONS];
    int n_ext;
};

/* A higher layer's state on this context: key is the address of a static object of the
   file that owns it. NULL when it has none yet. */
void *wgml_extension_get(wgml_context *ctx, const void *key);
/* The state under key, made on first use: `size` zeroed bytes, which the context frees (after
   release(ctx, state), if given) when it is freed, after the tensors and before the pool.
   NULL, with the error recorded, when out of host memory or out of slots. */
void *wgml_extension_make(wgml_context *ctx, const void *key, size_t size, wgml_extension_release release);

/* ---------------------------------------------------------------- errors (core/error.c) */

/* Records status and message on ctx and returns status. */
wgml_status wgml_fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void wgml_format_shape(char *out, size_t n, int ndim, const int64_t *shape);

/* The adapter's f16 -> f32 subgroup-matrix shape (16x16x16 where offered) in m, n, k and its
   subgroup size; false when it has none (or several subgroup sizes). The GEMM and the
   attention on the matrix units both take it. */
bool wgml_sgmat_adapter_shape(const wgml_context *ctx, int *m, int *n, int *k, int *subgroup_size);

#endif
