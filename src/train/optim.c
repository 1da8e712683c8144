/*
 * Optimisers (AdamW, SGD with momentum) with clipping by global gradient norm, all on the GPU.
 *
 * At creation the parameters move into one flat buffer (each tensor becomes a slice of it,
 * 256-byte aligned), next to flat gradient and moment buffers. A step then:
 *   1. evaluates each parameter's pending gradient straight into its slice of the flat
 *      gradient buffer, and the squared global norm as a sum of per-gradient reductions;
 *   2. runs one dispatch that clips and updates every parameter and both moments;
 * all in the same submit as the forward and backward passes that produced the gradients.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/build.h"
#include "graph/executor.h"

#define SLOT_ALIGN 64 /* floats: 256 bytes, enough for any storage-offset alignment */

struct wgml_optimizer {
    wgml_custom_op step_op; /* first: a step node's op_data points here */
    wgml_context *ctx;
    wgml_optim_desc desc;
    int n;
    wgml_tensor **params;
    int64_t *slot;  /* offset of each parameter in the flat buffers (floats) */
    int64_t total;  /* floats in each flat buffer */
    wgml_buffer *P, *G, *M, *V;
    wgml_tensor *norm2; /* squared gradient norm of the last step (storage) */
    int64_t steps;
};

static wgml_status build_step(wgml_context *ctx, wgml_tensor *t, wgml_launch *l);

static wgml_buffer *flat_zeros(wgml_context *ctx, int64_t n)
{
    wgml_buffer *b = wgml_pool_acquire(ctx, (uint64_t)n * 4);
    if (!b) return NULL;
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    wgpuCommandEncoderClearBuffer(enc, b->handle, 0, b->size);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if (wgml_submit(&ctx->rt, cb)) {
        wgml_buffer_release(ctx, b);
        return NULL;
    }
    return b;
}

void wgml_optimizer_free(wgml_optimizer *opt)
{
    if (!opt) return;
    wgml_context *ctx = opt->ctx;
    for (int i = 0; i < opt->n; i++) wgml_tensor_unref(opt->params[i]);
    wgml_buffer *bufs[4] = {opt->P, opt->G, opt->M, opt->V};
    for (int i = 0; i < 4; i++) wgml_buffer_release(ctx, bufs[i]);
    if (opt->norm2) wgml_tensor_unref(opt->norm2);
    free(opt->params);
    free(opt->slot);
    free(opt);
}

/* A usable lr: finite and >= 0 (0 freezes the parameters). */
static wgml_status check_lr(wgml_context *ctx, const char *fn, float lr)
{
    if (!(lr >= 0) || isinf(lr))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: lr = %g must be a finite number >= 0", fn, lr);
    return WGML_OK;
}

/* d with its defaults filled in: every number in its range, else INVALID_ARGUMENT naming it.
   The forms !(x >= lo) reject NaN too. */
static wgml_status check_desc(wgml_context *ctx, const wgml_optim_desc *d)
{
    const char *fn = "optimizer_create";
    wgml_status st = check_lr(ctx, fn, d->lr);
    if (st) return st;
    const struct { const char *name; float v; } unit[] = {
        {"beta1", d->beta1}, {"beta2", d->beta2}, {"momentum", d->momentum}};
    for (size_t i = 0; i < sizeof unit / sizeof unit[0]; i++)
        if (!(unit[i].v >= 0 && unit[i].v < 1))
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s = %g must be in [0, 1)", fn, unit[i].name,
                             unit[i].v);
    if (!(d->eps > 0))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: eps = %g must be > 0 (0 means 1e-8)", fn, d->eps);
    if (!(d->weight_decay >= 0) || isinf(d->weight_decay))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: weight_decay = %g must be a finite number >= 0", fn,
                         d->weight_decay);
    if (!(d->max_grad_norm >= 0))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: max_grad_norm = %g must be >= 0 (0: no clipping)", fn,
                         d->max_grad_norm);
    return WGML_OK;
}

wgml_status wgml_optimizer_create(wgml_context *ctx, const wgml_optim_desc *desc, int n,
                                  wgml_tensor *const *params, wgml_optimizer **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !desc || n <= 0 || !params)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: desc, params and out must be given");
    *out = NULL;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (desc->kind != WGML_OPTIM_ADAMW && desc->kind != WGML_OPTIM_SGD)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: unknown kind %d", (int)desc->kind);
    wgml_optim_desc d = *desc;
    if (d.beta1 == 0 && d.kind == WGML_OPTIM_ADAMW) d.beta1 = 0.9f;
    if (d.beta2 == 0) d.beta2 = 0.999f;
    if (d.eps == 0) d.eps = 1e-8f;
    if ((st = check_desc(ctx, &d))) return st;
    for (int i = 0; i < n; i++) {
        wgml_tensor *p = params[i];
        if (!wgml_tensor_valid(p) || p->ctx != ctx)
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: parameter %d is not a tensor of this context", i);
        if (p->op != WGML_OP_NONE || !wgml_is_contiguous(p))
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: parameter %d must be an evaluated, contiguous tensor", i);
        for (int j = 0; j < i; j++)
            if (params[j] == p) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: parameter %d is given twice", i);
    }
    wgml_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    opt->ctx = ctx;
    opt->step_op.build = build_step;
    opt->desc = d;
    opt->n = n;
    opt->params = calloc((size_t)n, sizeof *opt->params);
    opt->slot = calloc((size_t)n, sizeof *opt->slot);
    if (!opt->params || !opt->slot) {
        wgml_optimizer_free(opt);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (int i = 0; i < n; i++) {
        opt->slot[i] = opt->total;
        opt->total += (params[i]->numel + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    }
    if ((st = wgml_check_buffer_size(ctx, (uint64_t)opt->total * 4, "the optimizer's flat parameter buffer")) ||
        !(opt->P = flat_zeros(ctx, opt->total)) || !(opt->G = flat_zeros(ctx, opt->total)) ||
        !(opt->M = flat_zeros(ctx, opt->total)) || !(opt->V = flat_zeros(ctx, opt->total))) {
        st = ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY;
        wgml_optimizer_free(opt);
        return st;
    }
    /* move each parameter into its slot: a GPU copy, then the tensor points at the slot */
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    for (int i = 0; i < n; i++) {
        wgml_tensor *p = params[i];
        wgpuCommandEncoderCopyBufferToBuffer(enc, p->buf->handle, (uint64_t)p->offset * 4, opt->P->handle,
                                             (uint64_t)opt->slot[i] * 4, (uint64_t)p->numel * 4);
    }
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if ((st = wgml_submit(&ctx->rt, cb))) {
        wgml_optimizer_free(opt);
        return st;
    }
    for (int i = 0; i < n; i++) {
        wgml_tensor *p = params[i];
        wgml_buffer_release(ctx, p->buf);
        p->buf = opt->P;
        wgml_buffer_retain(opt->P);
        p->offset = opt->slot[i];
        p->requires_grad = true;
        wgml_tensor_retain(p);
        opt->params[i] = p;
    }
    *out = opt;
    return WGML_OK;
}

/* The launch of a step node: one dispatch over the flat buffers (kernels/optim.wgsl). */
static wgml_status build_step(wgml_context *ctx, wgml_tensor *t, wgml_launch *l)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "optim", l);
    if (st) return st;
    const wgml_optimizer *opt = (const wgml_optimizer *)t->op_data;
    const wgml_optim_desc *d = &opt->desc;
    double step = (double)(opt->steps + 1);
    uint32_t p[12];
    float f[8] = {d->lr, d->kind == WGML_OPTIM_ADAMW ? d->beta1 : d->momentum, d->beta2, d->eps, d->weight_decay,
                  (float)(1.0 - pow(d->beta1, step)), (float)(1.0 - pow(d->beta2, step)), d->max_grad_norm};
    p[0] = (uint32_t)opt->total;
    p[1] = d->kind == WGML_OPTIM_ADAMW ? 0 : 1;
    p[2] = wgml_grid(ctx, ((uint64_t)opt->total + 255) / 256, l->groups);
    p[3] = 0;
    memcpy(&p[4], f, sizeof f);
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    l->buffers[0] = wgml_tensor_base(t->src[0]);
    l->raw[1] = opt->G->handle;
    l->raw[2] = opt->P->handle;
    l->raw[3] = opt->M->handle;
    l->raw[4] = opt->V->handle;
    l->buffers[5] = t;
    l->nbuffers = 6;
    return WGML_OK;
}

wgml_status wgml_optimizer_step(wgml_optimizer *opt, int n_extra, wgml_tensor *const *extra)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = opt->ctx;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (n_extra < 0 || (n_extra && !extra)) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_step: bad extra list");
    /* each gradient, written into its slot of G; the squared norm summed over them */
    wgml_tensor **targets = calloc((size_t)(opt->n + n_extra + 2), sizeof *targets);
    wgml_tensor **grads = calloc((size_t)opt->n, sizeof *grads);
    if (!targets || !grads) {
        free(targets);
        free(grads);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    int nt = 0;
    wgml_tensor *norm2 = NULL;
    wgml_scope_begin(ctx);
    for (int i = 0; i < opt->n && !st; i++) {
        wgml_tensor *p = opt->params[i];
        if (!p->grad) {
            st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_step: parameter %d has no gradient (call wgml_backward first)", i);
            break;
        }
        if (p->grad->status) {
            st = wgml_fail(ctx, p->grad->status, "%s", p->grad->error);
            break;
        }
        /* the gradient node itself writes into the slot when nothing else sees it; otherwise a
           copy does. Either way grads[i] holds one reference, dropped at the end. */
        bool own = p->grad->op != WGML_OP_NONE && p->grad->op != WGML_OP_VIEW && p->grad->refs == 1 && !p->grad->user_held;
        wgml_tensor *g = own ? p->grad : wgml_unary_node(ctx, WGML_OP_COPY, p->grad);
        wgml_tensor_retain(g);
        if (g->dest) wgml_buffer_release(ctx, g->dest);
        g->dest = opt->G;
        wgml_buffer_retain(opt->G);
        g->dest_offset = opt->slot[i];
        g->offset = opt->slot[i]; /* readers in this evaluation find it in its slot */
        grads[i] = g;
        targets[nt++] = g;
        wgml_tensor *sq = wgml_sum_all(ctx, wgml_mul(ctx, g, g));
        norm2 = norm2 ? wgml_add(ctx, norm2, sq) : sq;
    }
    if (!st) {
        wgml_tensor *src[1] = {norm2};
        int64_t one = 1;
        wgml_tensor *upd = wgml_node(ctx, WGML_OP_OPTIM_STEP, 1, &one, 1, src);
        upd->op_data = &opt->step_op;
        for (int i = 0; i < n_extra; i++) targets[nt++] = extra[i];
        targets[nt++] = norm2;
        targets[nt++] = upd; /* last: it runs after every reader of the old parameters */
        st = wgml_graph_eval(ctx, nt, targets);
        if (!st) {
            opt->steps++;
            if (opt->norm2) wgml_tensor_unref(opt->norm2);
            opt->norm2 = norm2;
            wgml_tensor_retain(norm2);
            for (int i = 0; i < opt->n; i++) { /* gradients are consumed by the step */
                wgml_tensor_unref(opt->params[i]->grad);
                opt->params[i]->grad = NULL;
            }
        }
    }
    for (int i = 0; i < opt->n; i++)
        if (grads[i]) wgml_tensor_unref(grads[i]);
    wgml_scope_end(ctx);
    free(targets);
    free(grads);
    return st;
}

wgml_status wgml_optimizer_grad_norm(wgml_optimizer *opt, float *norm)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    if (!norm) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_grad_norm: norm is NULL");
    if (!opt->norm2) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_grad_norm: no step yet");
    float n2;
    wgml_status st = wgml_tensor_read(opt->norm2, &n2, 1);
    if (!st) *norm = sqrtf(n2);
    return st;
}

int64_t wgml_optimizer_steps(const wgml_optimizer *opt) { return opt ? opt->steps : 0; }

wgml_status wgml_optimizer_set_steps(wgml_optimizer *opt, int64_t steps)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    if (steps < 0)
        return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_steps: steps = %lld must be >= 0",
                         (long long)steps);
    opt->steps = steps;
    return WGML_OK;
}

wgml_status wgml_optimizer_set_lr(wgml_optimizer *opt, float lr)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status st = check_lr(opt->ctx, "optimizer_set_lr", lr);
    if (st) return st;
    opt->desc.lr = lr;
    return WGML_OK;
}

/* A storage tensor viewing parameter i's slot of a moment buffer (for checkpoints). */
static wgml_status moment_view(wgml_optimizer *opt, int i, wgml_buffer *buf, wgml_tensor **out)
{
    wgml_context *ctx = opt->ctx;
    if (i < 0 || i >= opt->n || !out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_state: bad index %d", i);
    wgml_tensor *p = opt->params[i];
    wgml_tensor *t = wgml_tensor_new(ctx, p->ndim, p->shape);
    if (!t) return ctx->rt.status;
    t->buf = buf;
    wgml_buffer_retain(buf);
    t->offset = opt->slot[i];
    *out = t;
    return WGML_OK;
}

wgml_status wgml_optimizer_state(wgml_optimizer *opt, int i, wgml_tensor **m, wgml_tensor **v)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status st = moment_view(opt, i, opt->M, m);
    if (!st) st = moment_view(opt, i, opt->V, v);
    return st;
}
