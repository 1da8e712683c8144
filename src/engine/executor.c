/* The one-submit graph executor; see executor.h for the stages. */
#include "engine/executor.h"
#include "engine/build.h"
#include "engine/profile.h"

#include "core/half.h"
#include "core/ptrmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the executor's state */

/* What the scheduler notes about one lazy node during an evaluation */
enum { SCHED_NONE = 0, SCHED_KERNEL, SCHED_FUSED };
typedef struct sched_node {
    int uses;    /* readers inside this evaluation */
    int kind;    /* SCHED_* */
    bool pinned; /* must get its own buffer (target, read through a view...) */
    bool target;
    bool grad_path; /* a trainable tensor lies upstream: a target keeps its graph (tape) */
} sched_node;

/* The executor's extension of a context: buffers kept between evaluations, and the
   schedule of the one under way (nodes found by tensor through index). */
typedef struct wgml_executor {
    WGPUBuffer params_buffer; /* the dispatches' parameters: one uniform buffer, one write per submit */
    uint64_t params_capacity;
    uint8_t *params_host;
    uint64_t params_host_capacity;
    WGPUBuffer staging; /* for reads, grow-only */
    uint64_t staging_size;
    /* GPU-side error flags: kernels that check data (labels, indices) record the first
       problem here; the next read-back copies them out and reports it */
    WGPUBuffer gpu_errors;
    bool gpu_errors_pending; /* a submitted kernel may have written them */
    wgml_ptrmap index;
    wgml_tensor *unrun; /* collect's: a stored input in error (a result never computed) */
    sched_node *nodes, none;
    size_t nnodes, cap;
    uint32_t walk_epoch; /* the last pending-readers walk (wgml_pending_readers) */
} wgml_executor;

/* The scheduler's note on lazy node t in this evaluation; a zeroed note for other tensors. */
static sched_node *node_of(wgml_executor *ex, const wgml_tensor *t)
{
    uint32_t i = wgml_ptrmap_get(&ex->index, t);
    return i == WGML_PTRMAP_NONE ? &ex->none : &ex->nodes[i];
}

static const char executor_key; /* names the executor's extension of a context */

static void executor_release(wgml_context *ctx, void *state)
{
    wgml_executor *ex = state;
    if (ex->params_buffer) wgpuBufferRelease(ex->params_buffer);
    if (ex->staging) wgpuBufferRelease(ex->staging);
    if (ex->gpu_errors) wgpuBufferRelease(ex->gpu_errors);
    free(ex->params_host);
    wgml_ptrmap_free(&ex->index);
    free(ex->nodes);
}

/* The context's executor, made on first use; NULL (error recorded) when out of memory. */
static wgml_executor *executor_of(wgml_context *ctx)
{
    return wgml_extension_make(ctx, &executor_key, sizeof(wgml_executor), executor_release);
}

bool wgml_sched_fused(wgml_context *ctx, const wgml_tensor *t)
{
    wgml_executor *ex = executor_of(ctx);
    return ex && node_of(ex, t)->kind == SCHED_FUSED;
}

#define MAX_FUSED_LEAVES WGML_FUSED_MAX_LEAVES
#define MAX_FUSED_SCALARS WGML_FUSED_MAX_SCALARS

void wgml_node_move(wgml_tensor *to, wgml_tensor *from)
{
    to->op = from->op;
    to->nsrc = from->nsrc;
    memcpy(to->src, from->src, sizeof to->src);
    memcpy(to->params, from->params, sizeof to->params);
    to->op_data = from->op_data;
    to->view_kind = from->view_kind;
    to->range_known = from->range_known;
    to->range_lo = from->range_lo;
    to->range_hi = from->range_hi;
    from->nsrc = 0;
}

bool wgml_tensor_list_push(wgml_tensor_list *l, wgml_tensor *t)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        wgml_tensor **g = realloc(l->items, nc * sizeof *g);
        if (!g) return false;
        l->items = g;
        l->cap = nc;
    }
    l->items[l->n++] = t;
    return true;
}

/* ---------------------------------------------------------------- collect */

/* Post-order walk of the lazy nodes `t` needs, each given a fresh note; returns false when
   out of host memory. */
static bool collect(wgml_executor *ex, wgml_tensor *t, wgml_tensor_list *order)
{
    t = wgml_tensor_base(t);
    if (t->op == WGML_OP_NONE && t->status && !ex->unrun) ex->unrun = t; /* (read: the graph fails with its error) */
    if (t->op == WGML_OP_NONE || wgml_ptrmap_get(&ex->index, t) != WGML_PTRMAP_NONE) return true;
    if (ex->nnodes == ex->cap) {
        size_t cap = ex->cap ? ex->cap * 2 : 256;
        sched_node *g = realloc(ex->nodes, cap * sizeof *g);
        if (!g) return false;
        ex->nodes = g;
        ex->cap = cap;
    }
    if (!wgml_ptrmap_put(&ex->index, t, (uint32_t)ex->nnodes)) return false;
    ex->nodes[ex->nnodes++] = (sched_node){.kind = SCHED_NONE};
    t->buf = NULL;
    for (int i = 0; i < t->nsrc; i++)
        if (!collect(ex, t->src[i], order)) return false;
    return wgml_tensor_list_push(order, t);
}

/* ---------------------------------------------------------------- fuse */

/* Distinct inputs and scalars of the fused tree rooted at t (a repeated input counts once). */
typedef struct fused_cost {
    wgml_tensor *leaves[MAX_FUSED_LEAVES + 1];
    int nleaves, nscalars;
} fused_cost;

static void fused_count(wgml_executor *ex, wgml_tensor *t, fused_cost *c)
{
    c->nscalars += wgml_op_scalars(t);
    for (int i = 0; i < t->nsrc; i++) {
        wgml_tensor *s = t->src[i];
        if (node_of(ex, s)->kind == SCHED_FUSED && s == wgml_tensor_base(s)) {
            fused_count(ex, s, c);
            continue;
        }
        bool seen = false;
        for (int k = 0; k < c->nleaves; k++) seen |= c->leaves[k] == s;
        if (!seen && c->nleaves <= MAX_FUSED_LEAVES) c->leaves[c->nleaves++] = s;
    }
}

static bool fused_too_big(wgml_executor *ex, wgml_tensor *t)
{
    fused_cost c = {.nleaves = 0};
    fused_count(ex, t, &c);
    return c.nleaves > MAX_FUSED_LEAVES || c.nscalars > MAX_FUSED_SCALARS;
}

static int fused_size(wgml_executor *ex, wgml_tensor *t)
{
    int n = 1;
    for (int i = 0; i < t->nsrc; i++)
        if (node_of(ex, t->src[i])->kind == SCHED_FUSED && t->src[i] == wgml_tensor_base(t->src[i])) n += fused_size(ex, t->src[i]);
    return n;
}

static void decide_fusion(wgml_context *ctx, wgml_executor *ex, wgml_tensor_list *order)
{
    /* readers of each node, and whether one reads it through a view or is not elementwise */
    for (size_t k = 0; k < order->n; k++) {
        wgml_tensor *t = order->items[k];
        for (int i = 0; i < t->nsrc; i++) {
            wgml_tensor *s = t->src[i], *b = wgml_tensor_base(s);
            if (b->op == WGML_OP_NONE) continue;
            node_of(ex, b)->uses++;
            if (s != b || !wgml_op_is_elementwise(t->op)) node_of(ex, b)->pinned = true;
        }
    }
    for (size_t k = 0; k < order->n; k++) {
        wgml_tensor *t = order->items[k];
        bool fusable = wgml_op_is_elementwise(t->op) && !ctx->desc.no_fusion && !node_of(ex, t)->pinned &&
                       !node_of(ex, t)->target && node_of(ex, t)->uses == 1;
        node_of(ex, t)->kind = fusable ? SCHED_FUSED : SCHED_KERNEL;
    }
    /* keep a kernel's inputs within the bindings an adapter has: cut big trees, from each
       kernel's root down (a cut child becomes a root, checked when the walk reaches it), so
       a chain is walked once rather than once per node */
    for (size_t k = order->n; k-- > 0;) {
        wgml_tensor *t = order->items[k];
        if (node_of(ex, t)->kind != SCHED_KERNEL || !wgml_op_is_elementwise(t->op)) continue;
        while (fused_too_big(ex, t)) {
            wgml_tensor *biggest = NULL;
            int most = 0;
            for (int i = 0; i < t->nsrc; i++) {
                wgml_tensor *s = t->src[i];
                if (node_of(ex, s)->kind != SCHED_FUSED || s != wgml_tensor_base(s)) continue;
                int c = fused_size(ex, s);
                if (c > most) { most = c; biggest = s; }
            }
            if (!biggest) break;
            node_of(ex, biggest)->kind = SCHED_KERNEL;
        }
    }
}

/* ---------------------------------------------------------------- plan and encode */

/* Fills l[0..*count) for node t: the engine fuses the elementwise kinds itself; every other
   op builds through its entry (a custom node through the builder its creator gave). */
static wgml_status build_launch(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    *count = 1;
    const wgml_op_def *d = wgml_op_table[t->op];
    if (d->kind == WGML_KIND_UNARY || d->kind == WGML_KIND_BINARY) return wgml_build_fused(ctx, t, l);
    if (d->kind == WGML_KIND_CUSTOM) return ((const wgml_custom_op *)t->op_data)->build(ctx, t, l);
    if (d->build) return d->build(ctx, t, l, count);
    return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "op %s cannot be scheduled", d->name);
}

WGPUBuffer wgml_gpu_errors_buffer(wgml_context *ctx)
{
    wgml_executor *ex = executor_of(ctx);
    if (!ex || ex->gpu_errors) return ex ? ex->gpu_errors : NULL;
    WGPUBufferDescriptor d = {.label = wgml_sv("wgml gpu errors"), .size = 16,
                              .usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst};
    ex->gpu_errors = wgpuDeviceCreateBuffer(ctx->rt.device, &d); /* zeroed, as WebGPU makes every buffer */
    return ex->gpu_errors;
}

/* The message of the GPU error flags read back (words w[0], w[1]); clears them on the GPU. */
static wgml_status report_gpu_errors(wgml_context *ctx, wgml_executor *ex, const uint32_t *w)
{
    ex->gpu_errors_pending = false;
    if (!w[0]) return WGML_OK;
    static const uint32_t zero[4] = {0};
    wgpuQueueWriteBuffer(ctx->rt.queue, ex->gpu_errors, 0, zero, sizeof zero);
    uint32_t at = UINT32_MAX - w[1];
    if (w[0] & WGML_GPU_ERROR_INDEX)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "an index computed on the GPU was out of range (first at element %u of its index tensor): "
                         "nothing was read or written outside a tensor; that index's rows read as 0 or were skipped", at);
    if (w[0] & WGML_GPU_ERROR_LABEL)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "cross_entropy: the label of row %u is not a class index (a whole number from 0 to the "
                         "number of classes - 1); that row's loss is NaN", at);
    return wgml_fail(ctx, WGML_ERROR_DEVICE, "a kernel reported GPU error flags 0x%x", w[0]);
}

static wgml_status ensure_params_buffer(wgml_context *ctx, wgml_executor *ex, uint64_t bytes)
{
    bool replaced;
    wgml_status st = wgml_grow_buffer(ctx, &ex->params_buffer, &ex->params_capacity, bytes, 64 * 1024,
                                      WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, "wgml params", &replaced);
    if (replaced) wgml_bind_cache_clear(ctx); /* its bind groups name the old buffer */
    return st;
}

static wgml_status ensure_host_params(wgml_context *ctx, wgml_executor *ex, uint64_t bytes)
{
    if (bytes <= ex->params_host_capacity) return WGML_OK;
    uint64_t cap = ex->params_host_capacity ? ex->params_host_capacity : 64 * 1024;
    while (cap < bytes) cap *= 2;
    uint8_t *p = realloc(ex->params_host, cap);
    if (!p) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    ex->params_host = p;
    ex->params_host_capacity = cap;
    return WGML_OK;
}

static wgml_status ensure_staging(wgml_context *ctx, wgml_executor *ex, uint64_t bytes)
{
    return wgml_grow_buffer(ctx, &ex->staging, &ex->staging_size, bytes, 4096,
                            WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, "wgml staging", NULL);
}

/* ---------------------------------------------------------------- submit */

/* prep: encoded only, its parameters kept for wgml_prepared_submit (no read-back, nothing
   timed: wgml_graph_can_prepare) */
static wgml_status encode_submit(wgml_context *ctx, const wgml_launch *launches, int n, const wgml_exec_readback *rb,
                                 const char *what, double started, wgml_prepared *prep)
{
    wgml_executor *ex = executor_of(ctx);
    if (!ex) return ctx->rt.status;
    wgml_status st = WGML_OK;
    /* the parameter blocks of launches without their own bind group, at aligned offsets of
       the parameter buffer: one write */
    uint32_t align = ctx->rt.limits.minUniformBufferOffsetAlignment ? ctx->rt.limits.minUniformBufferOffsetAlignment : 256;
    uint64_t params_off = 0, params_bytes = 0;
    for (int i = 0; i < n; i++) {
        const wgml_launch *l = &launches[i];
        if (l->bind) continue;
        if ((st = ensure_host_params(ctx, ex, params_off + WGML_MAX_PARAMS_BYTES))) return st;
        memcpy(ex->params_host + params_off, l->params, l->params_size);
        params_bytes = params_off + ((l->params_size + 15) & ~15u);
        params_off += (l->params_size + align - 1) / align * align;
    }
    if (params_bytes) {
        if ((st = ensure_params_buffer(ctx, ex, params_bytes))) return st;
        if (prep) {
            if (!(prep->params_host = malloc(params_bytes))) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
            memcpy(prep->params_host, ex->params_host, params_bytes);
            prep->params_bytes = params_bytes;
            prep->params = ex->params_buffer;
            wgpuBufferAddRef(prep->params); /* (a later growth replaces the executor's) */
        } else {
            wgpuQueueWriteBuffer(ctx->rt.queue, ex->params_buffer, 0, ex->params_host, params_bytes);
        }
    }
    wgml_timeline_mark(&ctx->rt, "parameters");

    wgml_scope_push(&ctx->rt);
    wgml_timeline_mark(&ctx->rt, "error scope push");
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    wgml_profile *prof = n && !prep ? wgml_profile_of(ctx) : NULL;
    if (n) {
        WGPUPassTimestampWrites tw;
        WGPUComputePassDescriptor pd = {.timestampWrites = prof || prep ? NULL : wgml_timing_writes(&ctx->rt, &tw)};
        WGPUComputePassEncoder pass = prof ? NULL : wgpuCommandEncoderBeginComputePass(enc, &pd);
        params_off = 0;
        for (int i = 0; i < n; i++) {
            if (prof) { /* WGML_PROFILE: each dispatch in a pass of its own, timed */
                if (pass) wgpuComputePassEncoderEnd(pass), wgpuComputePassEncoderRelease(pass);
                WGPUComputePassDescriptor one = {.timestampWrites = wgml_profile_writes(prof, i, &tw)};
                pass = wgpuCommandEncoderBeginComputePass(enc, &one);
            }
            const wgml_launch *l = &launches[i];
            WGPUBindGroup bg = l->bind;
            if (!bg) {
                WGPUBindGroupEntry e[WGML_MAX_BINDINGS + 1];
                memset(e, 0, sizeof e);
                e[0].binding = 0;
                e[0].buffer = ex->params_buffer;
                e[0].offset = params_off;
                e[0].size = (l->params_size + 15) & ~15u;
                params_off += (l->params_size + align - 1) / align * align;
                for (int b = 0; b < l->nbuffers; b++) {
                    e[b + 1].binding = (uint32_t)b + 1;
                    e[b + 1].buffer = l->raw[b];
                    e[b + 1].offset = l->offsets[b];
                    e[b + 1].size = l->sizes[b] ? l->sizes[b] : WGPU_WHOLE_SIZE;
                }
                bg = wgml_bind_group(ctx, l->pipeline->layout, e, (size_t)l->nbuffers + 1);
            }
            if (!bg) {
                st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory for a bind group");
                break;
            }
            wgpuComputePassEncoderSetPipeline(pass, l->pipeline->pipeline);
            wgpuComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
            wgpuComputePassEncoderDispatchWorkgroups(pass, l->groups[0], l->groups[1], l->groups[2]);
        }
        wgpuComputePassEncoderEnd(pass);
        wgpuComputePassEncoderRelease(pass);
        if (st) {
            wgpuCommandEncoderRelease(enc);
            wgml_scope_pop(&ctx->rt, "encoding");
            return st;
        }
        if (pd.timestampWrites) wgml_timing_resolve(&ctx->rt, enc);
        if (prof) wgml_profile_resolve(prof, enc, n);
    }
    bool sets_flags = false; /* a launch binds the GPU error flags */
    for (int i = 0; i < n && ex->gpu_errors; i++)
        for (int b = 0; b < launches[i].nbuffers; b++) sets_flags |= launches[i].raw[b] == ex->gpu_errors;
    /* they come back after the data */
    bool flags = rb && (sets_flags || (rb->gpu_errors && ex->gpu_errors_pending));
    if (rb) {
        if ((st = ensure_staging(ctx, ex, rb->size + (flags ? 16 : 0)))) {
            wgpuCommandEncoderRelease(enc);
            wgml_scope_pop(&ctx->rt, "reading back");
            return st;
        }
        wgpuCommandEncoderCopyBufferToBuffer(enc, rb->buffer, rb->offset, ex->staging, 0, rb->size);
        if (flags) wgpuCommandEncoderCopyBufferToBuffer(enc, ex->gpu_errors, 0, ex->staging, rb->size, 16);
    }
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    wgml_timeline_mark(&ctx->rt, "encode");
    if (prep) {
        prep->cb = cb;
        prep->dispatches = (uint64_t)n;
        prep->sets_flags = sets_flags;
        return wgml_scope_pop(&ctx->rt, what);
    }
    if ((st = wgml_submit(&ctx->rt, cb))) {
        wgml_scope_pop(&ctx->rt, what);
        return st;
    }
    wgml_timeline_mark(&ctx->rt, "submit");
    ctx->rt.stats.dispatches += (uint64_t)n;
    ex->gpu_errors_pending |= sets_flags;
    ctx->rt.stats.host_seconds_last = wgml_host_seconds() - started;
    if ((st = wgml_scope_pop(&ctx->rt, what))) return st;
    wgml_timeline_mark(&ctx->rt, "error scopes");
    if (n && (st = wgml_timing_read(&ctx->rt))) return st;
    if (prof && (st = wgml_profile_collect(ctx, prof, launches, n))) return st;

    if (rb) {
        uint64_t map_bytes = rb->size + (flags ? 16 : 0);
        if ((st = wgml_map_read(&ctx->rt, ex->staging, map_bytes))) return st;
        wgml_timeline_mark(&ctx->rt, "map wait");
        const uint8_t *src = wgpuBufferGetConstMappedRange(ex->staging, 0, (size_t)map_bytes);
        if (!src) {
            wgpuBufferUnmap(ex->staging);
            return wgml_fail(ctx, WGML_ERROR_DEVICE, "reading back: no mapped range");
        }
        memcpy(rb->host, src, (size_t)rb->size);
        uint32_t w[4] = {0};
        if (flags) memcpy(w, src + rb->size, sizeof w);
        wgpuBufferUnmap(ex->staging);
        wgml_timeline_mark(&ctx->rt, "copy, unmap");
        ctx->rt.stats.bytes_downloaded += rb->size;
        if (flags) return report_gpu_errors(ctx, ex, w);
    }
    return WGML_OK;
}

wgml_status wgml_exec_submit(wgml_context *ctx, const wgml_launch *launches, int n, const wgml_exec_readback *rb,
                             const char *what, double started)
{
    return encode_submit(ctx, launches, n, rb, what, started, NULL);
}

bool wgml_graph_can_prepare(wgml_context *ctx) { return !ctx->rt.gpu_timing && !wgml_profile_of(ctx); }

/* Its results left in error: their work never ran (the buffers stay theirs until freed). */
static void prepared_unrun(wgml_prepared *p, const char *why)
{
    for (int i = 0; i < p->nmade; i++) {
        wgml_tensor *t = p->made[i];
        if (t->status) continue;
        t->status = WGML_ERROR_DEVICE;
        free(t->error);
        t->error = strdup(why);
    }
}

void wgml_prepared_discard(wgml_prepared *p)
{
    if (p->cb) {
        wgpuCommandBufferRelease(p->cb);
        prepared_unrun(p, "this result's work was prepared but never submitted (an earlier failure in its step)");
    }
    if (p->params) wgpuBufferRelease(p->params);
    free(p->params_host);
    for (int i = 0; i < p->nmade; i++) wgml_tensor_unref(p->made[i]);
    free(p->made);
    memset(p, 0, sizeof *p);
}

wgml_status wgml_prepared_submit(wgml_context *ctx, wgml_prepared *p)
{
    wgml_executor *ex = executor_of(ctx);
    if (!ex || !p->cb) {
        wgml_prepared_discard(p);
        return ex ? WGML_OK : ctx->rt.status;
    }
    double started = wgml_host_seconds();
    wgml_scope_push(&ctx->rt);
    /* (queue order: after every submit before this one, before this one's kernels) */
    if (p->params_bytes) wgpuQueueWriteBuffer(ctx->rt.queue, p->params, 0, p->params_host, p->params_bytes);
    WGPUCommandBuffer cb = p->cb;
    p->cb = NULL;
    wgml_status st = wgml_submit(&ctx->rt, cb); /* (it releases cb) */
    wgml_status popped = wgml_scope_pop(&ctx->rt, "running a prepared graph");
    if (st || popped) prepared_unrun(p, "this result's work was not submitted, or its submit failed");
    if (!st) {
        ctx->rt.stats.dispatches += p->dispatches;
        ex->gpu_errors_pending |= p->sets_flags;
        ctx->rt.stats.host_seconds_last = wgml_host_seconds() - started;
        st = popped;
    }
    wgml_prepared_discard(p);
    return st;
}

/* ---------------------------------------------------------------- tapes */

/* Whether gradients could flow from s back to a trainable tensor (s's node notes filled). */
static bool carries_grad(wgml_executor *ex, wgml_tensor *s)
{
    while (s->op == WGML_OP_VIEW) s = s->src[1] ? s->src[1] : s->src[0]; /* a view's gradient goes to its input */
    if (s->op == WGML_OP_NONE) return s->requires_grad || s->tape;
    return node_of(ex, s)->grad_path;
}

/* The lazy node t is (op, inputs, parameters) moved into a new node for t->tape, before t
   becomes storage. The inputs' references move with them. */
static wgml_status keep_tape(wgml_context *ctx, wgml_tensor *t)
{
    wgml_tensor *s = wgml_tensor_new(ctx, t->ndim, t->shape);
    if (!s) return ctx->rt.status;
    s->user_held = false; /* held only by t */
    s->dtype = t->dtype;
    s->tail = t->tail;
    wgml_node_move(s, t);
    if (t->tape) wgml_tensor_unref(t->tape);
    t->tape = s;
    return WGML_OK;
}

/* ---------------------------------------------------------------- the graph */

typedef struct readback {
    wgml_tensor *t; /* contiguous tensor whose data goes to host */
    void *host;
} readback;

/* A target that carries an error reports it. */
static wgml_status target_status(wgml_context *ctx, wgml_tensor *t)
{
    if (!wgml_tensor_valid(t)) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "eval: a tensor is NULL or not a wgml tensor");
    if (t->ctx != ctx) return wgml_fail(ctx, WGML_ERROR_CONTEXT, "eval: the tensor belongs to another context");
    const wgml_tensor *e = wgml_tensor_in_error(t);
    if (e) return wgml_fail(ctx, e->status, "%s", e->error ? e->error : "error");
    return WGML_OK;
}

/* The step left in flight, if any (cleared first: its own evaluations run plainly). */
static wgml_status complete_pending_step(wgml_context *ctx)
{
    wgml_status (*step)(wgml_context *, void *) = ctx->pending_step;
    if (!step) return WGML_OK;
    ctx->pending_step = NULL;
    return step(ctx, ctx->pending_step_arg);
}

static bool pending_step_writes(const wgml_context *ctx, const struct wgml_buffer *b)
{
    for (size_t i = 0; i < sizeof ctx->pending_step_bufs / sizeof ctx->pending_step_bufs[0]; i++)
        if (b && ctx->pending_step_bufs[i] == b) return true;
    return false;
}

/* Whether evaluating t reads a buffer the pending step writes (visited nodes in ex->index). */
static bool reads_pending(wgml_context *ctx, wgml_executor *ex, wgml_tensor *t)
{
    t = wgml_tensor_base(t);
    if (t->op == WGML_OP_NONE) return pending_step_writes(ctx, t->buf);
    if (t->dest && pending_step_writes(ctx, t->dest)) return true;
    if (wgml_ptrmap_get(&ex->index, t) != WGML_PTRMAP_NONE) return false;
    if (!wgml_ptrmap_put(&ex->index, t, 0)) return true; /* out of memory: complete it, to be safe */
    for (int i = 0; i < t->nsrc; i++)
        if (reads_pending(ctx, ex, t->src[i])) return true;
    return false;
}

static wgml_status run(wgml_context *ctx, int ntargets, wgml_tensor *const *targets, const readback *rb, wgml_prepared *prep)
{
    double started = wgml_host_seconds();
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    for (int i = 0; i < ntargets; i++)
        if ((st = target_status(ctx, targets[i]))) return st;

    wgml_executor *ex = executor_of(ctx);
    if (!ex) return ctx->rt.status;
    if (ctx->pending_step) { /* it goes first if this reads what it writes */
        wgml_ptrmap_clear(&ex->index);
        bool reads = false;
        for (int i = 0; i < ntargets && !reads; i++) reads = reads_pending(ctx, ex, targets[i]);
        if (reads && (st = complete_pending_step(ctx))) return st;
    }
    wgml_ptrmap_clear(&ex->index);
    ex->nnodes = 0;
    ex->unrun = NULL;
    wgml_tensor_list order = {0};
    for (int i = 0; i < ntargets; i++)
        if (!collect(ex, targets[i], &order)) {
            free(order.items);
            return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
    if (ex->unrun) { /* (nothing was planned yet: the graph stays as it was) */
        free(order.items);
        return wgml_fail(ctx, ex->unrun->status, "%s", ex->unrun->error ? ex->unrun->error : "an input is in error");
    }
    for (int i = 0; i < ntargets; i++) {
        wgml_tensor *b = wgml_tensor_base(targets[i]);
        if (b->op != WGML_OP_NONE) node_of(ex, b)->pinned = node_of(ex, b)->target = true;
    }
    for (size_t k = 0; k < order.n; k++) /* a node with a destination is its own kernel's output */
        if (order.items[k]->dest) node_of(ex, order.items[k])->pinned = node_of(ex, order.items[k])->target = true;
    for (size_t k = 0; k < order.n; k++) { /* post-order: inputs are noted first */
        wgml_tensor *t = order.items[k];
        if (wgml_op_table[t->op]->constant) continue; /* passes no gradient (detach, argmax) */
        for (int i = 0; i < t->nsrc && !node_of(ex, t)->grad_path; i++)
            node_of(ex, t)->grad_path = carries_grad(ex, t->src[i]);
    }
    decide_fusion(ctx, ex, &order);

    /* launches per kernel node: one, or a few sharing a scratch buffer */
    size_t nk = 0;
    for (size_t k = 0; k < order.n; k++)
        if (node_of(ex, order.items[k])->kind == SCHED_KERNEL) nk++;
    /* room for one launch per kernel node, grown when a node takes more */
    size_t cap = nk;
    wgml_launch *plan = nk ? malloc(cap * sizeof *plan) : NULL;
    wgml_tensor **node = nk ? malloc(cap * sizeof *node) : NULL; /* what each computes */
    if (nk && (!plan || !node)) {
        free(plan);
        free(node);
        free(order.items);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (size_t k = 0; k < order.n; k++) node_of(ex, order.items[k])->uses = 0;

    /* plan: build each launch, give it an output buffer, free inputs after their last reader */
    size_t built = 0;
    /* first pass: build the launches and count kernel reads of each lazy base (a kernel may
       read a base twice) */
    for (size_t k = 0; k < order.n && !st; k++) {
        wgml_tensor *t = order.items[k];
        if (node_of(ex, t)->kind != SCHED_KERNEL) continue;
        int count = 0;
        wgml_launch ls[WGML_MAX_NODE_LAUNCHES];
        memset(ls, 0, sizeof ls[0]); /* a builder filling more launches sets them whole */
        if ((st = build_launch(ctx, t, ls, &count))) break;
        if (built + (size_t)count > cap) {
            cap = cap * 2 + (size_t)count;
            wgml_launch *p = realloc(plan, cap * sizeof *plan);
            if (p) plan = p;
            wgml_tensor **q = p ? realloc(node, cap * sizeof *node) : NULL;
            if (q) node = q;
            if (!p || !q) {
                st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
                break;
            }
        }
        for (int c = 0; c < count && !st; c++) {
            wgml_launch *l = &plan[built];
            *l = ls[c];
            node[built++] = t;
            /* (the size tells a profile's launches of one op apart: WGML_PROFILE) */
            if (!l->what[0]) snprintf(l->what, sizeof l->what, "%s of %lld", wgml_op_table[t->op]->name, (long long)t->numel);
            st = wgml_check_launch(ctx, l);
            for (int b = 0; b < l->nbuffers; b++)
                if (l->buffers[b] && l->buffers[b] != t && l->buffers[b]->op != WGML_OP_NONE) node_of(ex, l->buffers[b])->uses++;
        }
    }
    /* second pass, a node at a time: its output (and scratch) buffers, each launch's bindings,
       then its inputs' buffers back to the pool after their last reader */
    for (size_t first = 0, end; first < built && !st; first = end) {
        wgml_tensor *t = node[first];
        for (end = first + 1; end < built && node[end] == t;) end++;
        if (t->dest) { /* the result goes into a given slot */
            t->buf = t->dest;
            wgml_buffer_retain(t->buf);
        } else {
            t->buf = wgml_pool_acquire(ctx, wgml_result_bytes(t->dtype, t->numel, t->tail));
        }
        if (!t->buf) { st = ctx->rt.status; break; }
        wgml_buffer *scratch = NULL;
        if (plan[first].scratch_bytes && !(scratch = wgml_pool_acquire(ctx, plan[first].scratch_bytes))) {
            st = ctx->rt.status;
            break;
        }
        for (size_t i = first; i < end; i++) {
            wgml_launch *l = &plan[i];
            for (int b = 0; b < l->nbuffers; b++) {
                if (l->scratch_mask >> b & 1) {
                    l->raw[b] = scratch->handle;
                    l->sizes[b] = scratch->size;
                }
                if (l->raw[b]) continue; /* builder gave a raw buffer */
                wgml_tensor *bt = l->buffers[b];
                l->raw[b] = bt->buf->handle;
                l->sizes[b] = bt->buf->size;
                if (bt == t && t->dest) {
                    l->offsets[b] = (uint64_t)t->dest_offset * (uint64_t)wgml_dtype_bytes(t->dtype);
                    l->sizes[b] = wgml_result_bytes(t->dtype, t->numel, 0);
                }
            }
        }
        /* the scratch buffer and inputs whose last reader this was go back to the pool for
           later kernels (they run after this one: the pass keeps dispatch order) */
        if (scratch) wgml_buffer_release(ctx, scratch);
        for (size_t i = first; i < end; i++) {
            wgml_launch *l = &plan[i];
            for (int b = 0; b < l->nbuffers; b++) {
                wgml_tensor *in = l->buffers[b];
                if (!in || in == t || in->op == WGML_OP_NONE) continue;
                if (--node_of(ex, in)->uses == 0 && !node_of(ex, in)->target) {
                    wgml_buffer_release(ctx, in->buf);
                    in->buf = NULL;
                }
            }
        }
    }
    if (!st) {
        /* the read-back names the target's buffer, which the plan has just given it */
        wgml_exec_readback r;
        if (rb) r = (wgml_exec_readback){.buffer = wgml_tensor_base(rb->t)->buf->handle,
                                         .offset = (uint64_t)rb->t->offset * (uint64_t)wgml_dtype_bytes(rb->t->dtype),
                                         .size = wgml_result_bytes(rb->t->dtype, rb->t->numel, 0), .host = rb->host,
                                         .gpu_errors = true};
        st = encode_submit(ctx, plan, (int)built, rb ? &r : NULL, prep ? "encoding the graph" : "running the graph", started, prep);
    }
    ctx->rt.stats.evals++;

    /* (room for what a prepared evaluation makes) */
    if (!st && prep && order.n && !(prep->made = malloc(order.n * sizeof *prep->made)))
        st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    /* targets become storage; on failure every buffer of this evaluation is returned */
    for (size_t k = 0; k < order.n; k++) {
        wgml_tensor *t = order.items[k];
        if (!node_of(ex, t)->target || !t->buf) continue;
        if (st) {
            wgml_buffer_release(ctx, t->buf);
            t->buf = NULL;
            continue;
        }
        if (prep) { /* (its value comes with the prepared submit: room made below) */
            prep->made[prep->nmade++] = t;
            wgml_tensor_retain(t);
        }
        /* a result on the way from trainable tensors keeps its graph for a later backward
           (gradients landing in a destination are never differentiated again) */
        if (!(node_of(ex, t)->grad_path && !t->dest && keep_tape(ctx, t) == WGML_OK))
            for (int i = 0; i < t->nsrc; i++) wgml_tensor_unref(t->src[i]);
        t->nsrc = 0;
        t->op = WGML_OP_NONE;
        if (t->dest) {
            t->offset = t->dest_offset;
            wgml_buffer_release(ctx, t->dest);
            t->dest = NULL;
        }
    }
    if (st)
        for (size_t k = 0; k < order.n; k++) {
            wgml_tensor *t = order.items[k];
            if (t->buf && t->op != WGML_OP_NONE) {
                wgml_buffer_release(ctx, t->buf);
                t->buf = NULL;
            }
        }
    free(plan);
    free(node);
    free(order.items);
    return st;
}

wgml_status wgml_graph_eval(wgml_context *ctx, int n, wgml_tensor *const *targets)
{
    return run(ctx, n, targets, NULL, NULL);
}

wgml_status wgml_graph_prepare(wgml_context *ctx, int n, wgml_tensor *const *targets, wgml_prepared *out)
{
    memset(out, 0, sizeof *out);
    if (!wgml_graph_can_prepare(ctx))
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "graph_prepare: not while launches are timed (profile, GPU timing)");
    wgml_status st = run(ctx, n, targets, NULL, out);
    if (st) wgml_prepared_discard(out);
    return st;
}

/* An f16 tensor's halves, widened into host's floats: read from a contiguous copy where t is
   strided or starts mid-word (the copy to staging moves whole 4-byte words). */
static wgml_status read_halves(wgml_context *ctx, wgml_tensor *t, float *host)
{
    wgml_tensor *c = t;
    if (!wgml_is_contiguous(t) || t->offset % 2) {
        if (!(c = wgml_node(ctx, WGML_OP_COPY, t->ndim, t->shape, 1, &t))) return ctx->rt.status;
    }
    uint16_t *h = malloc(wgml_result_bytes(WGML_F16, t->numel, 0));
    wgml_status st = h ? WGML_OK : wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (!st) {
        readback rb = {c, h};
        st = run(ctx, 1, &c, &rb, NULL);
    }
    for (int64_t i = 0; !st && i < t->numel; i++) host[i] = wgml_half_to_f32(h[i]);
    free(h);
    if (c != t) wgml_tensor_free(c);
    return st;
}

wgml_status wgml_graph_read(wgml_context *ctx, wgml_tensor *t, void *host)
{
    wgml_status st = target_status(ctx, t);
    if (st) return st;
    if (t->dtype == WGML_F16) return read_halves(ctx, t, host);
    if (wgml_is_contiguous(t)) {
        readback rb = {t, host};
        return run(ctx, 1, &t, &rb, NULL);
    }
    /* a strided view: copy it into contiguous order first, in the same submit */
    wgml_tensor *c = wgml_contiguous(ctx, t);
    if (!c) return ctx->rt.status;
    readback rb = {c, host};
    st = run(ctx, 1, &c, &rb, NULL);
    wgml_tensor_free(c);
    return st;
}

wgml_status wgml_eval_read(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_tensor *read, void *host, size_t count)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (n < 1 || !tensors) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: bad tensor list");
    if (!host) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: host is NULL");
    int found = 0;
    for (int i = 0; i < n; i++) found |= tensors[i] == read;
    if (!found || !wgml_tensor_valid(read))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: the tensor to read must be one of those evaluated");
    wgml_status st = target_status(ctx, read);
    if (st) return st;
    if ((uint64_t)count != (uint64_t)read->numel)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: host has %zu elements, the tensor %lld", count,
                         (long long)read->numel);
    if (!wgml_is_contiguous(read))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: the tensor to read must be contiguous (wgml_contiguous)");
    if (read->dtype == WGML_F16)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval_read: the tensor to read is f16 (wgml_tensor_read widens it)");
    readback rb = {read, host};
    return run(ctx, n, tensors, &rb, NULL);
}

wgml_status wgml_eval(wgml_context *ctx, int n, wgml_tensor *const *tensors)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (n < 0 || (n > 0 && !tensors)) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_eval: bad tensor list");
    return run(ctx, n, tensors, NULL, NULL);
}

/* ---------------------------------------------------------------- in-place writes */

/* Whether t reads one of bufs, through its inputs (memoised in the walk's scratch). */
static bool reads_any(wgml_tensor *t, int nbufs, struct wgml_buffer *const *bufs)
{
    if (t->walk_reads >= 0) return t->walk_reads;
    bool r = false;
    if (t->op == WGML_OP_NONE) {
        for (int i = 0; i < nbufs && t->buf; i++) r |= t->buf == bufs[i];
    } else {
        for (int i = 0; i < t->nsrc && !r; i++) r = reads_any(t->src[i], nbufs, bufs);
    }
    t->walk_reads = r;
    return r;
}

wgml_status wgml_pending_readers(wgml_context *ctx, int nbufs, struct wgml_buffer *const *bufs, wgml_tensor ***out, int *n)
{
    *out = NULL;
    *n = 0;
    wgml_executor *ex = executor_of(ctx);
    if (!ex) return ctx->rt.status;
    uint32_t epoch = ++ex->walk_epoch;
    for (wgml_tensor *t = ctx->tensors; t; t = t->all_next) {
        t->walk_epoch = epoch;
        t->walk_users = 0;
        t->walk_reads = -1;
    }
    /* inputs of live nodes are live, so each is stamped above */
    int lazy = 0;
    for (wgml_tensor *t = ctx->tensors; t; t = t->all_next) {
        if (t->op == WGML_OP_NONE) {
            /* a tape is the graph a result was, for a later backward: not a pending result.
               Counted as one, every loss still held had its forward computed again at each
               optimiser step (a trainer holds up to ten) */
            if (t->tape) t->tape->walk_users++;
            continue;
        }
        lazy++;
        for (int i = 0; i < t->nsrc; i++) t->src[i]->walk_users++;
    }
    if (!lazy) return WGML_OK;
    wgml_tensor_list found = {0};
    for (wgml_tensor *t = ctx->tensors; t; t = t->all_next) {
        /* a view of storage is an alias, not a pending result; error tensors never evaluate */
        if (t->op == WGML_OP_NONE || wgml_tensor_base(t)->op == WGML_OP_NONE || t->status) continue;
        if (t->refs <= t->walk_users || !reads_any(t, nbufs, bufs)) continue;
        if (!wgml_tensor_list_push(&found, t)) {
            free(found.items);
            return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
    }
    if (found.n > INT32_MAX) {
        free(found.items);
        return wgml_fail(ctx, WGML_ERROR_LIMIT, "more than 2^31 pending results");
    }
    *out = found.items;
    *n = (int)found.n;
    return WGML_OK;
}

wgml_status wgml_settle_readers(wgml_context *ctx, int nbufs, struct wgml_buffer *const *bufs)
{
    wgml_tensor **readers;
    int n;
    wgml_status st = WGML_OK;
    for (int i = 0; i < nbufs && ctx->pending_step && !st; i++)
        if (pending_step_writes(ctx, bufs[i])) st = complete_pending_step(ctx);
    if (st) return st;
    st = wgml_pending_readers(ctx, nbufs, bufs, &readers, &n);
    if (!st && n) st = run(ctx, n, readers, NULL, NULL);
    free(readers);
    return st;
}

/* ---------------------------------------------------------------- reads */

/* t's data into host, whose elements are of dtype */
static wgml_status read_host(wgml_tensor *t, void *host, size_t n, wgml_dtype dtype, const char *fn)
{
    if (!wgml_tensor_valid(t)) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = t->ctx;
    if (!host) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: host is NULL", fn);
    const wgml_tensor *e = wgml_tensor_in_error(t);
    if (e) return wgml_fail(ctx, e->status, "%s", e->error ? e->error : "error");
    if (t->dtype != (int)dtype && !(t->dtype == WGML_F16 && dtype == WGML_F32)) /* halves are read as floats */
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the tensor is %s; read it with %s", fn,
                         wgml_dtype_name(t->dtype), t->dtype == WGML_I32 ? "wgml_tensor_read_i32" : "wgml_tensor_read");
    if ((uint64_t)n != (uint64_t)t->numel) {
        char s[128];
        wgml_format_shape(s, sizeof s, t->ndim, t->shape);
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: host buffer has %zu elements, tensor %s has %lld", fn, n, s,
                         (long long)t->numel);
    }
    return wgml_graph_read(ctx, t, host);
}

wgml_status wgml_tensor_read(wgml_tensor *t, float *host, size_t n)
{
    return read_host(t, host, n, WGML_F32, "wgml_tensor_read");
}

wgml_status wgml_tensor_read_i32(wgml_tensor *t, int32_t *host, size_t n)
{
    return read_host(t, host, n, WGML_I32, "wgml_tensor_read_i32");
}
