/*
 * The executor: evaluates the pending graph that some tensors need, in one command encoder
 * and one submit.
 *
 *   collect   walk the lazy nodes the targets need (post-order = a valid kernel order)
 *   fuse      an elementwise node with one elementwise consumer joins its consumer's kernel
 *   plan      each kernel's output gets a pool buffer; an intermediate's buffer goes back to
 *             the pool after its last reader, so later kernels of the same submit reuse it
 *   encode    every kernel's parameters go into one uniform buffer (one write), then one
 *             compute pass with a dispatch per kernel, then the read-back copy if asked
 *   submit    once; targets become storage tensors
 */
#ifndef WGML_GRAPH_EXECUTOR_H
#define WGML_GRAPH_EXECUTOR_H

#include "core/context.h"
#include "graph/ops.h"

#define WGML_MAX_BINDINGS 10
#define WGML_MAX_PARAMS_BYTES 1024

/* One dispatch: binding 0 is the parameter block, 1..n the storage buffers in order. A node
   takes one launch, or up to WGML_MAX_NODE_LAUNCHES that run in order and share a scratch
   buffer (a reduction's partial results). */
typedef struct wgml_launch {
    wgml_pipeline *pipeline;
    int nbuffers;
    /* bases: the node itself is its output, other tensors its inputs; NULL where raw[] or the
       scratch buffer is bound instead */
    wgml_tensor *buffers[WGML_MAX_BINDINGS];
    WGPUBuffer raw[WGML_MAX_BINDINGS];       /* or raw buffers (cached matmul), if set */
    /* where raw[b] is bound, bytes (the executor fills them for tensors); size 0: the rest */
    uint64_t offsets[WGML_MAX_BINDINGS], sizes[WGML_MAX_BINDINGS];
    /* a bind group the caller keeps (parameter block at binding 0 included): bound as is,
       params and raw[] are then not read (wgml_exec_submit) */
    WGPUBindGroup bind;
    uint32_t scratch_mask;  /* bit b: binding b is the node's scratch buffer */
    uint64_t scratch_bytes; /* on a node's first launch: the size of that buffer */
    /* the most loop iterations one invocation runs, all loops together: the executor refuses
       a launch past the adapter's loop limit (wgml_runtime.loop_limit) */
    uint64_t loop_trips;
    char what[48];          /* names the launch in that error */
    uint8_t params[WGML_MAX_PARAMS_BYTES];
    uint32_t params_size;
    uint32_t groups[3];
} wgml_launch;

#define WGML_MAX_NODE_LAUNCHES 8

/* The context's GPU error flags, made on first use (NULL when they cannot be): a kernel that
   checks its data binds them and records a problem as WGML_GPU_ERROR_* bits in word 0 and
   the first offending position as UINT32_MAX - position, by atomicMax, in word 1. */
enum { WGML_GPU_ERROR_LABEL = 1u << 0, WGML_GPU_ERROR_INDEX = 1u << 1 };
WGPUBuffer wgml_gpu_errors_buffer(wgml_context *ctx);
/* Every launch passes here before it is encoded: WGML_ERROR_LIMIT when its grid is past the
   adapter's workgroups per dimension, or when it would loop past the adapter's loop limit
   (wgml_runtime.loop_limit), which on llvmpipe ends loops early and silently gives a wrong
   answer */
wgml_status wgml_check_launch(wgml_context *ctx, const wgml_launch *l);

/* Splits `groups` workgroups over x and y so neither passes the adapter's limit; returns the
   x count (threads = x * workgroup size per row of the grid). */
uint32_t wgml_grid(wgml_context *ctx, uint64_t groups, uint32_t out[3]);

/* ---------------------------------------------------------------- submitting launches */

/* A read-back after the launches: `size` bytes of `buffer` from `offset` (multiples of 4) go
   through the executor's staging buffer into host. */
typedef struct wgml_exec_readback {
    WGPUBuffer buffer;
    uint64_t offset, size;
    void *host;
    /* also collect the GPU error flags an earlier submit may have set, and report them
       (graph reads); flags that one of these launches binds are always collected */
    bool gpu_errors;
} wgml_exec_readback;

/* The one encode-and-submit path (graph evaluations and the cached matmul): launches[0..n)
   in one compute pass of one command buffer (timed with gpu_timing), then the read-back
   copy if rb, one submit, and the map-read of rb into host.
   A launch is bound through its own `bind` when set; else its parameter block goes into the
   executor's parameter buffer (one write for all of them) and its bind group, binding 0 that
   block and 1..nbuffers raw[b] at offsets[b] / sizes[b], comes from the context's bind
   cache: such raw buffers must stay alive as long as the context (the cache names buffers
   by handle), as pool buffers and the GPU error flags do. Launches are not checked here
   (wgml_check_launch). `what` names the work in an error; `started`, the host clock
   (wgml_host_seconds) when the caller's work began, gives wgml_stats.host_seconds_last. */
wgml_status wgml_exec_submit(wgml_context *ctx, const wgml_launch *launches, int n, const wgml_exec_readback *rb,
                             const char *what, double started);

wgml_status wgml_graph_eval(wgml_context *ctx, int n, wgml_tensor *const *targets);
/* Evaluates t (and what it needs) and copies it to host in the same submit. */
wgml_status wgml_graph_read(wgml_context *ctx, wgml_tensor *t, void *host);

/* Kernel builders, one per kind (graph/kernels.c, graph/fusion.c, graph/matmul.c): fill
   `launch` for node `t`, whose inputs are already planned. */
wgml_status wgml_build_fused(wgml_context *ctx, wgml_tensor *root, wgml_launch *launch);
/* (a node may take several launches: l points at WGML_MAX_NODE_LAUNCHES of them, l[0] zeroed;
   a builder that fills more sets each one whole (copying l[0], say), and *count says how many) */
wgml_status wgml_build_reduce(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);
wgml_status wgml_build_row(wgml_context *ctx, wgml_tensor *t, wgml_launch *launch);
wgml_status wgml_build_matmul(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);
/* Fills l (whose pipeline is the "reduce" kernel's) to sum x [outer, len, inner] at element
   in_off over its middle axis, a thread per output folding the axis (or, for the `last` sum of
   partials on a GPU with few outputs, a workgroup per output): for partial results (split K,
   column sums). */
void wgml_reduce_columns(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint32_t in_off,
                         bool last);
/* KERNEL entries' builders (the op table points at them) */
wgml_status wgml_build_concat(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count); /* graph/join.c */
/* The pipeline of a hand-written kernel of src/kernels/ by file name (graph/kernels.c). */
wgml_status wgml_kernel_pipeline(wgml_context *ctx, const char *name, wgml_launch *l);

/* A node whose launch its creator supplies (kind WGML_KIND_CUSTOM, the optimiser's step): t's
   op_data points at one of these, which must outlive the node. */
typedef struct wgml_custom_op {
    wgml_status (*build)(wgml_context *ctx, wgml_tensor *t, wgml_launch *launch);
} wgml_custom_op;

/* In-place writes. A pending result means what it meant when it was built, so before a
   buffer is overwritten in place (wgml_tensor_write, an optimiser step) the pending results
   that read it are evaluated. wgml_pending_readers finds them: the live lazy tensors (and
   views of lazy tensors) that read one of bufs[0..nbufs), directly or through other pending
   nodes, and that something other than pending nodes holds (a user's handle or scope, a
   parameter's gradient, an optimiser); nodes held only by other pending nodes are computed
   within their holders' evaluation. *out (malloc'd, free it; NULL when none) gets *n. */
wgml_status wgml_pending_readers(wgml_context *ctx, int nbufs, struct wgml_buffer *const *bufs, wgml_tensor ***out, int *n);
/* ... and evaluates them in one submit (the context's settle_readers hook). */
wgml_status wgml_settle_readers(wgml_context *ctx, int nbufs, struct wgml_buffer *const *bufs);

/* Whether t is computed inside its reader's fused kernel in the evaluation under way. */
bool wgml_sched_fused(wgml_context *ctx, const wgml_tensor *t);

#endif
