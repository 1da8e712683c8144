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
#ifndef WGML_ENGINE_EXECUTOR_H
#define WGML_ENGINE_EXECUTOR_H

#include "core/context.h"
#include "engine/launch.h"
#include "engine/op.h"

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

/* An evaluation planned and encoded now, submitted later (wgml_prepared_submit): the host's
   work on a graph done while the GPU is still busy with what must run before it. Its
   parameter blocks go into the parameter buffer right before its submit, so submits in
   between (which rewrite that buffer) are harmless; the buffers its plan gave out are its
   own, and those it gave back to the pool go to evaluations planned after it, which must
   also be submitted after it. Its targets are storage as soon as it is prepared (their
   data once it has run). */
typedef struct wgml_prepared {
    WGPUCommandBuffer cb;
    WGPUBuffer params;     /* the parameter buffer its bind groups name (a reference), or NULL */
    uint8_t *params_host;  /* what goes into it before the submit */
    uint64_t params_bytes;
    uint64_t dispatches;
    bool sets_flags; /* a launch binds the GPU error flags */
    /* the tensors it made results (one reference each): their values exist only once it is
       submitted, so one discarded unsubmitted, or whose submit failed, leaves them in error */
    struct wgml_tensor **made;
    int nmade;
} wgml_prepared;

/* Whether evaluations can be prepared here: not while every launch is timed (WGML_PROFILE,
   WGML_GPU_TIMING), whose read-backs follow each submit. */
bool wgml_graph_can_prepare(wgml_context *ctx);
wgml_status wgml_graph_prepare(wgml_context *ctx, int n, wgml_tensor *const *targets, wgml_prepared *out);
/* Submits it and releases what it holds (after a failure too); a zeroed one is a no-op. */
wgml_status wgml_prepared_submit(wgml_context *ctx, wgml_prepared *p);
/* Releases it unsubmitted (after a failure elsewhere). */
void wgml_prepared_discard(wgml_prepared *p);

/* A node's op, inputs (with their references), parameters and known range from `from` to `to`;
   `from` keeps none of the inputs (the tape's keeping and undoing, executor.c and train/optim.c). */
void wgml_node_move(wgml_tensor *to, wgml_tensor *from);

/* A growable list of tensors (the caller frees items). false: out of host memory. */
typedef struct wgml_tensor_list {
    wgml_tensor **items;
    size_t n, cap;
} wgml_tensor_list;
bool wgml_tensor_list_push(wgml_tensor_list *l, wgml_tensor *t);

wgml_status wgml_graph_eval(wgml_context *ctx, int n, wgml_tensor *const *targets);
/* Evaluates t (and what it needs) and copies it to host in the same submit. */
wgml_status wgml_graph_read(wgml_context *ctx, wgml_tensor *t, void *host);

/* A fused kernel's most distinct inputs and scalars: the plan cuts a bigger tree (executor.c)
   before the generator (fusion.c) would run out of room. */
#define WGML_FUSED_MAX_LEAVES 8
#define WGML_FUSED_MAX_SCALARS 128

/* The elementwise kinds' builder (engine/fusion.c): fills `launch` for the fused tree rooted
   at node `root`, whose inputs are already planned. Other kinds build through their entry. */
wgml_status wgml_build_fused(wgml_context *ctx, wgml_tensor *root, wgml_launch *launch);

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
