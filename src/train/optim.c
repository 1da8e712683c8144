/*
 * Optimisers (AdamW, SGD with momentum) with clipping by global gradient norm, all on the GPU.
 *
 * At creation the parameters move into one flat buffer (each tensor becomes a slice of it,
 * 256-byte aligned), next to flat gradient and moment buffers. A step then:
 *   1. evaluates each parameter's pending gradient straight into its slice of the flat
 *      gradient buffer, and the squared global norm in two launches over that whole buffer;
 *   2. runs one dispatch that clips and updates every parameter and both moments;
 * all in the same submit as the forward and backward passes that produced the gradients.
 *
 * Parameter groups lie one after another in the flat buffers, so each group is a range of
 * them; a small table of (range end, lr scale, weight decay) per group, written once at
 * creation, lets the one dispatch find an element's group by binary search. The scheduled
 * lr is computed on the host each step and goes into the step's parameter block: no kernel
 * is compiled for a new lr.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api_lock.h"
#include "core/ptrmap.h"
#include "engine/build.h"
#include "engine/executor.h"
#include "ops/table.h"
#include "train/grad_buckets.h"

#define SLOT_ALIGN 64 /* floats: 256 bytes, enough for any storage-offset alignment */

/* One row of the kernel's group table (kernels/optim.wgsl, struct Group). */
typedef struct group_row {
    uint32_t end; /* the group's range in the flat buffers ends here (floats, exclusive) */
    float lr_scale, weight_decay;
    uint32_t pad;
} group_row;

struct wgml_optimizer {
    wgml_custom_op step_op; /* first: a step node's op_data points here */
    wgml_custom_op sumsq_op; /* the squared norm's first stage (build_sumsq) */
    wgml_context *ctx;
    wgml_optim_desc desc;
    wgml_lr_schedule schedule; /* zeroed: a constant lr */
    int n_groups;
    wgml_buffer *groups;  /* n_groups group_rows */
    group_row one_group;  /* the row when n_groups is 1 */
    int n;
    wgml_tensor **params;
    int64_t *slot;  /* offset of each parameter in the flat buffers (floats) */
    int64_t total;  /* floats in each flat buffer */
    wgml_buffer *P, *G, *M, *V;
    wgml_tensor *norm2; /* squared gradient norm of the last step (storage) */
    int64_t steps;
    wgml_grad_hook hook; /* runs between the gradients and the update (e.g. an all-reduce) */
    void *hook_user;
    /* dynamic loss scaling: the state lives on the GPU in two halves of SCALER_WORDS floats
       (scaler_layout); a step reads half `scaler_half` and writes the other, so every
       invocation reads the old state while one writes the new, and no step reads it back */
    bool scaling;
    wgml_loss_scaling scaler_desc;
    wgml_buffer *scaler;
    int scaler_half;
    wgml_grad_buckets buckets; /* instead of the hook when .ready is set */
    /* buckets.defer: a step whose buckets are in flight, its gradients (one reference each);
       the norm and the update wait until something needs them (complete_step) */
    bool deferred;
    wgml_tensor **deferred_grads;
};

/* One half of the scaler's state (floats; counts are exact in f32 up to 2^24). */
enum scaler_layout { SC_SCALE, SC_GOOD, SC_SKIPPED, SC_LAST_SKIPPED, SC_NORM2, SC_UPDATES, SCALER_WORDS = 8 };

static wgml_status build_step(wgml_context *ctx, wgml_tensor *t, wgml_launch *l);
static wgml_status build_sumsq(wgml_context *ctx, wgml_tensor *t, wgml_launch *l);

wgml_context *wgml_optimizer_owner(const wgml_optimizer *o) { return o ? o->ctx : NULL; }

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

static wgml_status complete_step(wgml_optimizer *opt);

void wgml_optimizer_free(wgml_optimizer *opt)
{
    if (!opt) return;
    wgml_context *ctx = opt->ctx;
    complete_step(opt); /* (waits for the all-reduce in flight; a failure has its message) */
    free(opt->deferred_grads);
    for (int i = 0; i < opt->n; i++) {
        if (opt->params[i] && opt->params[i]->optimizer == opt) opt->params[i]->optimizer = NULL;
        wgml_tensor_unref(opt->params[i]);
    }
    wgml_buffer *bufs[6] = {opt->P, opt->G, opt->M, opt->V, opt->groups, opt->scaler};
    for (int i = 0; i < 6; i++)
        if (bufs[i]) wgml_buffer_release(ctx, bufs[i]);
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
static wgml_status check_desc(wgml_context *ctx, const char *fn, const wgml_optim_desc *d)
{
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

/* Names parameter k (k-th of group g, i-th overall) in a message: the caller's own words. */
static const char *param_name(char *buf, size_t cap, bool grouped, int g, int k, int i)
{
    if (grouped) snprintf(buf, cap, "groups[%d].params[%d]", g, k);
    else snprintf(buf, cap, "parameter %d", i);
    return buf;
}

/* The groups' numbers in range (lr_scale's default filled into *scale), their sizes and
   parameters usable, no tensor twice; else INVALID_ARGUMENT naming the field. */
static wgml_status check_groups(wgml_context *ctx, const char *fn, bool grouped, int n_groups,
                                const wgml_param_group *groups, float *scale, int *total)
{
    int64_t count = 0;
    for (int g = 0; g < n_groups; g++) {
        const wgml_param_group *gr = &groups[g];
        if (gr->n <= 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: groups[%d].n = %d must be > 0", fn, g, gr->n);
        if (!gr->params) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: groups[%d].params is NULL", fn, g);
        scale[g] = gr->lr_scale == 0 ? 1.0f : gr->lr_scale;
        if (!(scale[g] > 0) || isinf(scale[g]))
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: groups[%d].lr_scale = %g must be a finite number > 0 (0 means 1)",
                             fn, g, gr->lr_scale);
        if (!(gr->weight_decay >= 0) || isinf(gr->weight_decay))
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: groups[%d].weight_decay = %g must be a finite number >= 0", fn,
                             g, gr->weight_decay);
        count += gr->n;
        if (count > INT_MAX)
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: more than %d parameters over the groups", fn, INT_MAX);
    }
    char name[64], other[64];
    for (int g = 0, i = 0; g < n_groups; g++) {
        for (int k = 0; k < groups[g].n; k++, i++) {
            const wgml_tensor *p = groups[g].params[k];
            if (!wgml_tensor_valid(p))
                return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is not a tensor", fn,
                                 param_name(name, sizeof name, grouped, g, k, i));
            if (p->ctx != ctx) /* (as every op answers a tensor of another context) */
                return wgml_fail(ctx, WGML_ERROR_CONTEXT, "%s: %s is a tensor of another context", fn,
                                 param_name(name, sizeof name, grouped, g, k, i));
            if (p->status)
                return wgml_fail(ctx, p->status, "%s: %s holds an error: %s", fn, param_name(name, sizeof name, grouped, g, k, i),
                                 p->error);
            if (p->op != WGML_OP_NONE || !wgml_is_contiguous(p))
                return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s must be an evaluated, contiguous tensor", fn,
                                 param_name(name, sizeof name, grouped, g, k, i));
            /* the update kernel reads 4-byte floats: f16 is storage for activations (train f32
               masters and cast them), i32 holds indices and labels */
            if (p->dtype != WGML_F32)
                return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is %s; parameters are f32%s", fn,
                                 param_name(name, sizeof name, grouped, g, k, i), wgml_dtype_name(p->dtype),
                                 p->dtype == WGML_F16 ? " (cast an f32 master to f16)" : "");
            /* quadratic, but a model has hundreds of parameter tensors, not millions */
            for (int h = 0, j = 0; h <= g; h++)
                for (int q = 0; q < groups[h].n && j < i; q++, j++)
                    if (groups[h].params[q] == p)
                        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is also %s (a tensor may be given once)", fn,
                                         param_name(name, sizeof name, grouped, g, k, i),
                                         param_name(other, sizeof other, grouped, h, q, j));
        }
    }
    *total = (int)count;
    return WGML_OK;
}

/* Both creators: `grouped` says which one the caller used, for the messages. */
static wgml_status create(wgml_context *ctx, const char *fn, bool grouped, const wgml_optim_desc *desc, int n_groups,
                          const wgml_param_group *groups, wgml_optimizer **out)
{
    *out = NULL;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (desc->kind != WGML_OPTIM_ADAMW && desc->kind != WGML_OPTIM_SGD)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: unknown kind %d", fn, (int)desc->kind);
    wgml_optim_desc d = *desc;
    if (d.beta1 == 0 && d.kind == WGML_OPTIM_ADAMW) d.beta1 = 0.9f;
    if (d.beta2 == 0) d.beta2 = 0.999f;
    if (d.eps == 0) d.eps = 1e-8f;
    if ((st = check_desc(ctx, fn, &d))) return st;
    if (grouped && d.weight_decay != 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "%s: desc.weight_decay = %g must be 0 with parameter groups (give each group its own weight_decay)",
                         fn, d.weight_decay);
    float *scale = calloc((size_t)n_groups, sizeof *scale);
    if (!scale) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    int n = 0;
    if ((st = check_groups(ctx, fn, grouped, n_groups, groups, scale, &n))) {
        free(scale);
        return st;
    }
    wgml_optimizer *opt = calloc(1, sizeof *opt);
    group_row *rows = calloc((size_t)n_groups, sizeof *rows);
    if (opt) {
        opt->params = calloc((size_t)n, sizeof *opt->params);
        opt->slot = calloc((size_t)n, sizeof *opt->slot);
    }
    if (!opt || !rows || !opt->params || !opt->slot) {
        wgml_optimizer_free(opt);
        free(rows);
        free(scale);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    opt->ctx = ctx;
    opt->step_op.build = build_step;
    opt->sumsq_op.build = build_sumsq;
    opt->desc = d;
    opt->n_groups = n_groups;
    /* the groups one after another: each is a range of the flat buffers */
    for (int g = 0, i = 0; g < n_groups; g++) {
        for (int k = 0; k < groups[g].n; k++, i++) {
            opt->slot[i] = opt->total;
            opt->total += (groups[g].params[k]->numel + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
        }
        rows[g] = (group_row){.end = (uint32_t)opt->total, .lr_scale = scale[g], .weight_decay = groups[g].weight_decay};
    }
    free(scale);
    opt->one_group = rows[0];
    opt->n = n; /* opt->params stays NULLs until the move succeeded */
    /* the kernel indexes elements and group ends with u32 */
    if (opt->total > (int64_t)UINT32_MAX)
        st = wgml_fail(ctx, WGML_ERROR_LIMIT, "%s: %lld floats of parameters, past the optimizer's 2^32 - 1", fn,
                       (long long)opt->total);
    if (st || (st = wgml_check_buffer_size(ctx, (uint64_t)opt->total * 4, "the optimizer's flat parameter buffer")) ||
        !(opt->P = flat_zeros(ctx, opt->total)) || !(opt->G = flat_zeros(ctx, opt->total)) ||
        !(opt->M = flat_zeros(ctx, opt->total)) || !(opt->V = flat_zeros(ctx, opt->total)) ||
        !(opt->groups = wgml_pool_acquire(ctx, (uint64_t)n_groups * sizeof *rows)) ||
        !(opt->scaler = flat_zeros(ctx, 2 * SCALER_WORDS))) {
        if (!st) st = ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY;
        wgml_optimizer_free(opt);
        free(rows);
        return st;
    }
    wgpuQueueWriteBuffer(ctx->rt.queue, opt->groups->handle, 0, rows, (size_t)n_groups * sizeof *rows);
    free(rows);
    /* move each parameter into its slot: a GPU copy, then the tensor points at the slot */
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    for (int g = 0, i = 0; g < n_groups; g++)
        for (int k = 0; k < groups[g].n; k++, i++) {
            wgml_tensor *p = groups[g].params[k];
            wgpuCommandEncoderCopyBufferToBuffer(enc, p->buf->handle, (uint64_t)p->offset * 4, opt->P->handle,
                                                 (uint64_t)opt->slot[i] * 4, (uint64_t)p->numel * 4);
        }
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if ((st = wgml_submit(&ctx->rt, cb))) {
        wgml_optimizer_free(opt);
        return st;
    }
    for (int g = 0, i = 0; g < n_groups; g++)
        for (int k = 0; k < groups[g].n; k++, i++) {
            wgml_tensor *p = groups[g].params[k];
            wgml_buffer_release(ctx, p->buf);
            p->buf = opt->P;
            wgml_buffer_retain(opt->P);
            p->offset = opt->slot[i];
            p->requires_grad = true;
            p->optimizer = opt;
            wgml_tensor_retain(p);
            opt->params[i] = p;
        }
    *out = opt;
    return WGML_OK;
}

wgml_status wgml_optimizer_create(wgml_context *ctx, const wgml_optim_desc *desc, int n,
                                  wgml_tensor *const *params, wgml_optimizer **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !desc || n <= 0 || !params)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_create: desc, params and out must be given, n > 0");
    *out = NULL;
    /* one group with the desc's weight decay; check_desc has vetted it before the group is read */
    wgml_param_group all = {.n = n, .params = params, .lr_scale = 1, .weight_decay = desc->weight_decay};
    return create(ctx, "optimizer_create", false, desc, 1, &all, out);
}

wgml_status wgml_optimizer_create_groups(wgml_context *ctx, const wgml_optim_desc *desc, int n_groups,
                                         const wgml_param_group *groups, wgml_optimizer **out)
{
    const char *fn = "optimizer_create_groups";
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!desc) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
    if (n_groups <= 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: n_groups = %d must be > 0", fn, n_groups);
    if (!groups) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: groups is NULL", fn);
    return create(ctx, fn, true, desc, n_groups, groups, out);
}

/* The launch of a step node: one dispatch over the flat buffers (kernels/optim.wgsl). */
static wgml_status build_step(wgml_context *ctx, wgml_tensor *t, wgml_launch *l)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "optim", l);
    if (st) return st;
    const wgml_optimizer *opt = (const wgml_optimizer *)t->op_data;
    const wgml_optim_desc *d = &opt->desc;
    double step = (double)(opt->steps + 1);
    /* one group: its scale and decay go in the block, and the kernel skips the table */
    float lr = wgml_optimizer_lr(opt), wd = 0;
    if (opt->n_groups == 1) lr *= opt->one_group.lr_scale, wd = opt->one_group.weight_decay;
    uint32_t p[16];
    float f[8] = {lr, d->kind == WGML_OPTIM_ADAMW ? d->beta1 : d->momentum, d->beta2, d->eps,
                  (float)(1.0 - pow(d->beta1, step)), (float)(1.0 - pow(d->beta2, step)), d->max_grad_norm, wd};
    p[0] = (uint32_t)opt->total;
    p[1] = d->kind == WGML_OPTIM_ADAMW ? 0 : 1;
    p[2] = wgml_grid(ctx, ((uint64_t)opt->total + 255) / 256, l->groups);
    p[3] = (uint32_t)opt->n_groups;
    memcpy(&p[4], f, sizeof f);
    /* the loss scaler: 0 off, else 1 + the half of its state to read */
    const wgml_loss_scaling *sc = &opt->scaler_desc;
    float sf[2] = {sc->backoff, sc->growth};
    p[12] = opt->scaling ? 1u + (uint32_t)opt->scaler_half : 0u;
    p[13] = (uint32_t)sc->growth_interval;
    memcpy(&p[14], sf, sizeof sf);
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    /* the binary search over the group table: ceil(log2(n_groups)) halvings (none for one) */
    for (int64_t span = 1; span < opt->n_groups; span *= 2) l->loop_trips++;
    snprintf(l->what, sizeof l->what, "the optimizer step over %d groups", opt->n_groups);
    l->buffers[0] = wgml_tensor_base(t->src[0]);
    l->raw[1] = opt->G->handle;
    l->raw[2] = opt->P->handle;
    l->raw[3] = opt->M->handle;
    l->raw[4] = opt->V->handle;
    l->raw[6] = opt->groups->handle;
    l->buffers[5] = t;
    l->raw[7] = opt->scaler->handle; /* bound, unread, when scaling is off: one kernel for both */
    l->nbuffers = 8;
    return WGML_OK;
}

wgml_status wgml_optimizer_set_grad_hook(wgml_optimizer *opt, wgml_grad_hook hook, void *user)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    opt->hook = hook;
    opt->hook_user = hook ? user : NULL;
    return WGML_OK;
}

/* ---------------------------------------------------------------- loss scaling */

/* The half of the scaler's state the next step reads (the last one written). */
static wgml_status read_scaler(wgml_optimizer *opt, float half[SCALER_WORDS])
{
    wgml_status done = complete_step(opt); /* a step in flight writes the half read next */
    if (done) return done;
    int64_t n = SCALER_WORDS;
    wgml_tensor *v = wgml_tensor_over(opt->ctx, 1, &n, opt->scaler, (int64_t)opt->scaler_half * SCALER_WORDS);
    if (!v) return opt->ctx->rt.status;
    wgml_status st = wgml_tensor_read(v, half, SCALER_WORDS);
    wgml_tensor_free(v);
    return st;
}

static wgml_status write_scaler(wgml_optimizer *opt, const float half[SCALER_WORDS])
{
    wgml_context *ctx = opt->ctx;
    wgml_status st = complete_step(opt);
    if (st) return st;
    /* pending results that read the state (a scaled loss not yet evaluated) keep its old value */
    st = wgml_settle_readers(ctx, 1, &opt->scaler);
    if (st) return st;
    wgpuQueueWriteBuffer(ctx->rt.queue, opt->scaler->handle, (uint64_t)opt->scaler_half * SCALER_WORDS * 4, half,
                         SCALER_WORDS * 4);
    return WGML_OK;
}

static bool finite_positive(float x) { return x > 0 && !isinf(x); }

wgml_status wgml_optimizer_set_loss_scaling(wgml_optimizer *opt, const wgml_loss_scaling *s)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = opt->ctx;
    if (!s) {
        opt->scaling = false;
        return WGML_OK;
    }
    wgml_loss_scaling d = *s;
    if (d.init_scale == 0) d.init_scale = 65536.0f;
    if (d.growth_interval == 0) d.growth_interval = 2000;
    if (d.backoff == 0) d.backoff = 0.5f;
    if (d.growth == 0) d.growth = 2.0f;
    if (!finite_positive(d.init_scale))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scaling: init_scale = %g must be finite and > 0",
                         d.init_scale);
    if (d.growth_interval < 1 || d.growth_interval > (1 << 24))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scaling: growth_interval = %d must be in [1, 2^24]",
                         d.growth_interval);
    if (!(d.backoff > 0 && d.backoff < 1))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scaling: backoff = %g must be in (0, 1)", d.backoff);
    if (!(d.growth >= 1) || isinf(d.growth))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scaling: growth = %g must be finite and >= 1",
                         d.growth);
    float half[SCALER_WORDS] = {0};
    half[SC_SCALE] = d.init_scale;
    half[SC_UPDATES] = (float)opt->steps; /* Adam's bias correction goes on from the steps taken */
    /* (the settings taken only where the state was written: a refused call changes nothing) */
    wgml_status st = write_scaler(opt, half);
    if (st) return st;
    opt->scaler_desc = d;
    opt->scaling = true;
    return WGML_OK;
}

int wgml_optimizer_scales_loss(const wgml_optimizer *opt) { return opt && opt->scaling; }

wgml_tensor *wgml_optimizer_scale_loss(wgml_optimizer *opt, wgml_tensor *loss)
{
    if (!opt) return NULL;
    wgml_context *ctx = opt->ctx;
    if (!wgml_tensor_valid(loss) || loss->ctx != ctx)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_scale_loss: loss is not a tensor of the optimizer's context");
    if (loss->numel != 1)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_scale_loss: loss has %lld elements, not 1",
                                 (long long)loss->numel);
    if (!opt->scaling) return wgml_binary_scalar(ctx, WGML_MUL, loss, 1.0f);
    int64_t one = 1;
    /* a step in flight writes the half read next: the view names that half, and evaluating
       it (the scaler is among the buffers that step writes) ends that step first. So the
       next step's graph is built, and its first bucket planned, while that step runs */
    int half = opt->scaler_half ^ (opt->deferred ? 1 : 0);
    wgml_tensor *scale = wgml_tensor_over(ctx, 1, &one, opt->scaler, (int64_t)half * SCALER_WORDS + SC_SCALE);
    if (!scale) return wgml_tensor_error(ctx, ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    wgml_tensor *out = wgml_mul(ctx, loss, scale);
    wgml_tensor_free(scale);
    return out;
}

wgml_status wgml_optimizer_loss_scale_state(wgml_optimizer *opt, wgml_loss_scale_state *out)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_loss_scale_state: out is NULL");
    if (!opt->scaling) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_loss_scale_state: loss scaling is off");
    float half[SCALER_WORDS];
    wgml_status st = read_scaler(opt, half);
    if (st) return st;
    *out = (wgml_loss_scale_state){.scale = half[SC_SCALE],
                                   .good_steps = (int64_t)half[SC_GOOD],
                                   .skipped_steps = (int64_t)half[SC_SKIPPED],
                                   .last_skipped = half[SC_LAST_SKIPPED] != 0,
                                   .updates = (int64_t)half[SC_UPDATES]};
    return WGML_OK;
}

wgml_status wgml_optimizer_set_loss_scale_state(wgml_optimizer *opt, const wgml_loss_scale_state *s)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = opt->ctx;
    if (!s) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scale_state: state is NULL");
    if (!opt->scaling) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_loss_scale_state: loss scaling is off");
    const int64_t exact = (int64_t)1 << 24;
    if (!finite_positive(s->scale) || s->good_steps < 0 || s->good_steps >= opt->scaler_desc.growth_interval ||
        s->skipped_steps < 0 || s->skipped_steps > exact || s->updates < 0 || s->updates > exact)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "optimizer_set_loss_scale_state: scale %g, good steps %lld (interval %d), skipped %lld, updates %lld: "
                         "out of range", s->scale, (long long)s->good_steps, opt->scaler_desc.growth_interval,
                         (long long)s->skipped_steps, (long long)s->updates);
    float half[SCALER_WORDS] = {0};
    half[SC_SCALE] = s->scale;
    half[SC_GOOD] = (float)s->good_steps;
    half[SC_SKIPPED] = (float)s->skipped_steps;
    half[SC_LAST_SKIPPED] = s->last_skipped ? 1.0f : 0.0f;
    half[SC_UPDATES] = (float)s->updates;
    return write_scaler(opt, half);
}

wgml_status wgml_optimizer_set_grad_buckets(wgml_optimizer *opt, const wgml_grad_buckets *buckets)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    if (buckets && (!buckets->ready || !buckets->finish || buckets->bucket_floats <= 0))
        return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer: grad buckets need ready, finish and a size > 0");
    opt->buckets = buckets ? *buckets : (wgml_grad_buckets){0};
    return WGML_OK;
}

/* The lazy nodes t needs (up to evaluated tensors), into set: what an evaluation of t runs. */
static bool reach(wgml_ptrmap *set, wgml_tensor *t)
{
    t = wgml_tensor_base(t);
    if (t->op == WGML_OP_NONE || wgml_ptrmap_get(set, t) != WGML_PTRMAP_NONE) return true;
    if (!wgml_ptrmap_put(set, t, 0)) return false;
    for (int i = 0; i < t->nsrc; i++)
        if (!reach(set, t->src[i])) return false;
    return true;
}

/* Walks the lazy nodes t needs that are not in `now`, and adds to keep each node of `now`
   where the walk enters it: a result this evaluation computes that a later one reads (an
   evaluation frees, and leaves lazy, every result that is not one of its targets). */
static bool meet(const wgml_ptrmap *now, wgml_ptrmap *seen, wgml_tensor *t, wgml_tensor_list *keep)
{
    t = wgml_tensor_base(t);
    if (t->op == WGML_OP_NONE || wgml_ptrmap_get(seen, t) != WGML_PTRMAP_NONE) return true;
    if (!wgml_ptrmap_put(seen, t, 0)) return false;
    if (wgml_ptrmap_get(now, t) != WGML_PTRMAP_NONE) return wgml_tensor_list_push(keep, t);
    for (int i = 0; i < t->nsrc; i++)
        if (!meet(now, seen, t->src[i], keep)) return false;
    return true;
}

/* A result that a bucket kept for later ones (meet), made the lazy node it was again once
   every bucket has run, its buffer back in the pool: a tape that holds it (the loss's, kept
   for a later backward) would otherwise hold the buffer for as long as the loss lives, a
   step's activations for every loss not yet read. Only results that nothing but the graph
   holds, with their node kept (executor.c's keep_tape). */
static void unkeep(wgml_context *ctx, wgml_tensor *t)
{
    wgml_tensor *s = t->tape;
    if (t->op != WGML_OP_NONE || !s || !t->buf || t->user_held || t->requires_grad || t->grad) return;
    wgml_node_move(t, s); /* its inputs' references are t's again */
    t->tape = NULL;
    wgml_tensor_unref(s);
    wgml_buffer_release(ctx, t->buf);
    t->buf = NULL;
    t->offset = 0;
    /* (lazy again: an error left on its stored result, never computed, no longer holds) */
    t->status = WGML_OK;
    free(t->error);
    t->error = NULL;
}

/* The deferred step in flight ends inside this step's first bucket (run_buckets, `carried`):
   its update and this step's first bucket (the forward pass, the last layers' backward) are
   planned and encoded first, while the GPU still runs that step's backward and its buckets
   are reduced; then its buckets are waited for and written back, and the two submitted in
   that order, so that the GPU goes from the update to the forward with nothing to wait for.
   The update is planned first: the first bucket may take the buffers it gives back, never the
   other way round (the update runs first). The step in flight is ended after a failure too. */
static wgml_tensor *update_node(wgml_optimizer *opt, wgml_tensor **norm2);
static void step_taken(wgml_optimizer *opt, wgml_tensor *norm2);
static void drop_deferred_grads(wgml_optimizer *opt);

/* A deferred step that could not be ended: it had returned, and its update will not come */
static void lost_step_message(wgml_optimizer *opt, wgml_status st)
{
    wgml_context *ctx = opt->ctx;
    char why[512];
    snprintf(why, sizeof why, "%s", wgml_last_status(ctx) ? wgml_error_message(ctx) : wgml_status_name(st));
    wgml_fail(ctx, st, "optimizer_step: the step in flight (step %lld) could not be ended, its update is lost: %s",
              (long long)opt->steps + 1, why);
}

static wgml_status carry_step(wgml_optimizer *opt, int n, wgml_tensor *const *targets)
{
    wgml_context *ctx = opt->ctx;
    const wgml_grad_buckets *b = &opt->buckets;
    wgml_prepared upd_cb = {0}, first_cb = {0};
    opt->deferred = false; /* its update: the learning rate and bias correction of its own step */
    wgml_tensor *norm2 = NULL, *upd = update_node(opt, &norm2);
    wgml_tensor *u[2] = {norm2, upd};
    wgml_status st = upd ? wgml_graph_prepare(ctx, 2, u, &upd_cb) : ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY;
    if (!st) st = wgml_graph_prepare(ctx, n, targets, &first_cb);
    wgml_status fin = b->finish(ctx, opt->G, st, b->user);
    if (!st) st = fin;
    if (!st) st = wgml_prepared_submit(ctx, &upd_cb);
    if (!st) step_taken(opt, norm2);
    else lost_step_message(opt, st);
    drop_deferred_grads(opt);
    if (!st) st = wgml_prepared_submit(ctx, &first_cb);
    /* (what either made unsubmitted is left in error by the discard: never read as values) */
    wgml_prepared_discard(&upd_cb);
    wgml_prepared_discard(&first_cb);
    if (st && !wgml_last_status(ctx)) wgml_fail(ctx, st, "optimizer_step: the step in flight failed (%s)", wgml_status_name(st));
    return st;
}

/* The gradients (grads[i] for parameter i) evaluated a bucket at a time from the last
   parameter back, each bucket handed to opt->buckets.ready once submitted; the pending readers
   (first) and the extras go with the first bucket. */
static wgml_status run_buckets(wgml_optimizer *opt, int n_first, wgml_tensor *const *first, int n_extra,
                               wgml_tensor *const *extra, wgml_tensor *const *grads, bool defer, bool *carried)
{
    wgml_context *ctx = opt->ctx;
    const wgml_grad_buckets *b = &opt->buckets;
    wgml_status st = WGML_OK;
    wgml_ptrmap now = {0}, seen = {0};
    wgml_tensor_list targets = {0}, kept = {0}; /* kept: what meet added, one reference each */
    for (int hi = opt->n - 1, lo; hi >= 0 && !st; hi = lo - 1) {
        int64_t end = hi == opt->n - 1 ? opt->total : opt->slot[hi + 1];
        for (lo = hi; lo > 0 && end - opt->slot[lo] < b->bucket_floats;) lo--;
        targets.n = 0;
        bool ok = true;
        for (int i = 0; i < n_first && ok && hi == opt->n - 1; i++) ok = wgml_tensor_list_push(&targets, first[i]);
        for (int i = hi; i >= lo && ok; i--) ok = wgml_tensor_list_push(&targets, grads[i]);
        for (int i = 0; i < n_extra && ok && hi == opt->n - 1; i++) ok = wgml_tensor_list_push(&targets, extra[i]);
        wgml_ptrmap_clear(&now);
        wgml_ptrmap_clear(&seen);
        for (size_t i = 0; i < targets.n && ok; i++) ok = reach(&now, targets.items[i]);
        size_t before = targets.n;
        for (int i = lo - 1; i >= 0 && ok; i--) ok = meet(&now, &seen, grads[i], &targets);
        for (size_t i = before; i < targets.n && ok; i++)
            if ((ok = wgml_tensor_list_push(&kept, targets.items[i]))) wgml_tensor_retain(targets.items[i]);
        if (!ok) {
            st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
            break;
        }
        if (*carried) { /* (the step in flight's buckets end before this step's first is handed over) */
            *carried = false;
            st = carry_step(opt, (int)targets.n, targets.items);
        } else {
            st = wgml_graph_eval(ctx, (int)targets.n, targets.items);
        }
        if (!st) st = b->ready(ctx, opt->G, opt->slot[lo], end - opt->slot[lo], b->user);
    }
    for (size_t i = 0; i < kept.n; i++) {
        unkeep(ctx, kept.items[i]);
        wgml_tensor_unref(kept.items[i]);
    }
    free(kept.items);
    wgml_status fin = st || !defer ? b->finish(ctx, opt->G, st, b->user) : WGML_OK;
    if (!st && fin) st = fin;
    if (st && !wgml_last_status(ctx)) wgml_fail(ctx, st, "optimizer_step: the gradient buckets failed (%s)", wgml_status_name(st));
    wgml_ptrmap_free(&now);
    wgml_ptrmap_free(&seen);
    free(targets.items);
    return st;
}

/* Evaluates the gradients and extras (targets[0..nt)) and calls the hook with a view of the
   whole flat gradient buffer; the slots' padding is zero (the buffer starts cleared and the
   gradients write only their own elements), so the hook may treat it as one vector. */
static wgml_status run_hook(wgml_optimizer *opt, int nt, wgml_tensor *const *targets)
{
    wgml_context *ctx = opt->ctx;
    wgml_status st = wgml_graph_eval(ctx, nt, targets);
    if (st) return st;
    wgml_tensor *flat = wgml_tensor_over(ctx, 1, &opt->total, opt->G, 0); /* freed by the step's scope */
    if (!flat) return ctx->rt.status;
    st = opt->hook(opt, flat, opt->hook_user);
    if (st && !wgml_last_status(ctx)) /* a hook's own failure still gets words */
        wgml_fail(ctx, st, "optimizer_step: the gradient hook failed (%s)", wgml_status_name(st));
    return st;
}

/* The squared global norm of every gradient, read from the flat buffer G, and the update node
   that reads it (last among a step's targets: it runs after every reader of the old
   parameters). The norm's first node names no gradient as an input: it runs after them
   because it follows them among the evaluation's targets (the executor keeps their order),
   or in a later submit (a hook's, a deferred step's). */
static wgml_tensor *update_node(wgml_optimizer *opt, wgml_tensor **norm2)
{
    wgml_context *ctx = opt->ctx;
    *norm2 = NULL;
    /* vec4s per workgroup part: enough workgroups to fill a big GPU, at most 1024 partial sums */
    int64_t n4 = opt->total / 4, parts = (n4 + 255) / 256;
    if (parts > 1024) parts = 1024;
    wgml_tensor *part = wgml_node(ctx, WGML_OP_GRAD_SUMSQ, 1, &parts, 0, NULL);
    if (!part || part->status) return part;
    part->op_data = &opt->sumsq_op;
    part->user_held = false; /* only the sum's reference keeps it */
    *norm2 = wgml_sum_all(ctx, part);
    wgml_tensor_unref(part);
    wgml_tensor *src[1] = {*norm2};
    int64_t one = 1;
    wgml_tensor *upd = wgml_node(ctx, WGML_OP_OPTIM_STEP, 1, &one, 1, src);
    if (upd) upd->op_data = &opt->step_op;
    return upd;
}

/* The launch of the norm's first node: partial sums of squares over G (kernels/grad_sumsq.wgsl). */
static wgml_status build_sumsq(wgml_context *ctx, wgml_tensor *t, wgml_launch *l)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "grad_sumsq", l);
    if (st) return st;
    const wgml_optimizer *opt = (const wgml_optimizer *)((const char *)t->op_data - offsetof(wgml_optimizer, sumsq_op));
    uint32_t n4 = (uint32_t)(opt->total / 4), parts = (uint32_t)t->numel; /* total: whole slots of 64 floats */
    uint32_t p[4] = {n4, parts, 0x7f800000u, 0};
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    l->groups[0] = parts, l->groups[1] = 1, l->groups[2] = 1;
    l->loop_trips = (n4 + parts * 256u - 1) / (parts * 256u) + 8; /* the stride loop, the tree's halvings */
    snprintf(l->what, sizeof l->what, "the squared gradient norm's %u parts", parts);
    l->raw[0] = opt->G->handle;
    l->buffers[1] = t;
    l->nbuffers = 2;
    return WGML_OK;
}

/* A step done: counted, the scaler's halves swapped, its norm kept for wgml_optimizer_grad_norm. */
static void step_taken(wgml_optimizer *opt, wgml_tensor *norm2)
{
    opt->steps++;
    if (opt->scaling) opt->scaler_half ^= 1;
    if (opt->norm2) wgml_tensor_unref(opt->norm2);
    opt->norm2 = norm2;
    wgml_tensor_retain(norm2);
}

static void drop_deferred_grads(wgml_optimizer *opt)
{
    for (int i = 0; i < opt->n; i++) {
        if (opt->deferred_grads[i]) wgml_tensor_unref(opt->deferred_grads[i]);
        opt->deferred_grads[i] = NULL;
    }
}

/* The context no longer ends this optimizer's step before an evaluation (it ends it itself). */
static void forget_pending_step(wgml_context *ctx)
{
    ctx->pending_step = NULL;
    ctx->pending_step_arg = NULL;
    memset(ctx->pending_step_bufs, 0, sizeof ctx->pending_step_bufs);
}

/* A deferred step's end: the buckets written back, then the norm and the update. */
static wgml_status complete_step(wgml_optimizer *opt)
{
    if (!opt->deferred) return WGML_OK;
    wgml_context *ctx = opt->ctx;
    opt->deferred = false;
    if (ctx->pending_step_arg == opt) forget_pending_step(ctx);
    wgml_status st = opt->buckets.finish(ctx, opt->G, WGML_OK, opt->buckets.user);
    wgml_tensor *norm2 = NULL;
    wgml_scope_begin(ctx);
    if (!st) {
        wgml_tensor *upd = update_node(opt, &norm2);
        wgml_tensor *targets[2] = {norm2, upd};
        st = upd ? wgml_graph_eval(ctx, 2, targets) : ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY;
    }
    if (!st) step_taken(opt, norm2);
    drop_deferred_grads(opt);
    wgml_scope_end(ctx);
    if (st) lost_step_message(opt, st);
    return st;
}

static wgml_status pending_step(wgml_context *ctx, void *arg)
{
    (void)ctx;
    return complete_step(arg);
}

/* The lazy node that can write gradient g into its slot itself: g, where nothing else holds
   it; or the node under g where g is a chain of views only one another hold that read all of
   that node's elements in order (a weight's gradient from a GEMM's batched or transposed
   output, reshaped): no copy then. NULL where a copy must. */
static wgml_tensor *slot_writer(wgml_tensor *g)
{
    wgml_tensor *b = wgml_tensor_base(g);
    if (b->op == WGML_OP_NONE || b->op == WGML_OP_VIEW || b->user_held || b->dest) return NULL;
    if (g == b) return g->refs == 1 ? g : NULL;
    if (g->offset != 0 || g->numel != b->numel || g->dtype != b->dtype || b->tail || !wgml_is_contiguous(g)) return NULL;
    int held = 0; /* b's references from the chain: each view holds its base and its input */
    for (wgml_tensor *v = g; v != b; v = v->src[1]) {
        if (v->op != WGML_OP_VIEW || v->refs != 1 || v->user_held) return NULL;
        held += 1 + (v->src[1] == b);
    }
    return b->refs == held ? b : NULL;
}

static wgml_status step(wgml_optimizer *opt, int n_extra, wgml_tensor *const *extra, bool *carried);

/* After a failed step: gradients that had already landed in their slots (a hook's evaluation
   went through) live in G, where a retry would copy each from G into G, or a next backward add
   to it there, in one dispatch (which wgpu-native aborts on). They keep this flat buffer and the
   optimizer takes a fresh one; where none can be had, or where the hook had run on them (hooked:
   they are its output), they are dropped (as wgml_zero_grad), and the message says so. */
static bool landed_in_G(const wgml_optimizer *opt, int i)
{
    wgml_tensor *g = opt->params[i]->grad;
    return g && wgml_tensor_base(g)->op == WGML_OP_NONE && wgml_tensor_base(g)->buf == opt->G;
}

static void detach_landed_grads(wgml_optimizer *opt, bool hooked)
{
    wgml_context *ctx = opt->ctx;
    bool landed = false;
    for (int i = 0; i < opt->n && !landed; i++) landed = landed_in_G(opt, i);
    if (!landed) return;
    /* (the failure's message stays: this is what it left) */
    char msg[sizeof ctx->rt.message];
    const wgml_status was = ctx->rt.status;
    memcpy(msg, ctx->rt.message, sizeof msg);
    if (hooked) { /* (the hook's output, not the backward's: a retry would run the hook on it again) */
        for (int i = 0; i < opt->n; i++) wgml_zero_grad(opt->params[i]);
        wgml_fail(ctx, was, "%s (after the gradient hook had run: the gradients were dropped, run the backward again)", msg);
        return;
    }
    wgml_buffer *fresh = flat_zeros(ctx, opt->total);
    ctx->rt.status = was;
    memcpy(ctx->rt.message, msg, sizeof msg);
    if (fresh) {
        wgml_buffer_release(ctx, opt->G);
        opt->G = fresh;
        return;
    }
    for (int i = 0; i < opt->n; i++)
        if (landed_in_G(opt, i)) wgml_zero_grad(opt->params[i]);
    wgml_fail(ctx, was, "%s (and its gradients were dropped: run the backward again)", msg);
}

wgml_status wgml_optimizer_step(wgml_optimizer *opt, int n_extra, wgml_tensor *const *extra)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = opt->ctx;
    wgml_status st = wgml_check_device(&ctx->rt);
    /* a deferred step in flight ends inside this one's first bucket (carry_step), where it can */
    bool carried = opt->deferred && opt->buckets.ready && opt->buckets.defer && ctx->pending_step_arg == opt &&
                   wgml_graph_can_prepare(ctx);
    if (st || (!carried && (st = complete_step(opt)))) return st;
    if (carried) forget_pending_step(ctx); /* evaluations until then leave it alone: they read nothing it writes */
    st = step(opt, n_extra, extra, &carried);
    if (carried) { /* this step failed before its first bucket: the one in flight still ends */
        wgml_status done = complete_step(opt);
        if (!st) st = done;
    }
    return st;
}

static wgml_status step(wgml_optimizer *opt, int n_extra, wgml_tensor *const *extra, bool *carried)
{
    wgml_context *ctx = opt->ctx;
    wgml_status st = WGML_OK;
    if (n_extra < 0 || (n_extra && !extra)) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_step: bad extra list");
    /* a parameter another optimizer took since lives in that one's slot: this one's update
       would go to the slot it left */
    for (int i = 0; i < opt->n; i++)
        if (opt->params[i]->optimizer != opt)
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "optimizer_step: parameter %d was taken by an optimizer made later over it; this one no longer "
                             "reaches it (step that one, or free it and make this one again)", i);
    /* The step overwrites the parameters, both moments and the gradient slots in place:
       pending results that read them (logits the user still holds, a gradient taken before
       the step) are evaluated first, in the same submit, so they keep their values. */
    wgml_buffer *written[5] = {opt->P, opt->G, opt->M, opt->V, opt->scaler};
    wgml_tensor **readers = NULL;
    int n_readers = 0;
    if ((st = wgml_pending_readers(ctx, 5, written, &readers, &n_readers))) return st;
    /* each gradient, written into its slot of G; the squared norm summed over them */
    wgml_tensor **targets = calloc((size_t)(n_readers + opt->n + n_extra + 2), sizeof *targets);
    wgml_tensor **grads = calloc((size_t)opt->n, sizeof *grads);
    wgml_tensor **writers = calloc((size_t)opt->n, sizeof *writers); /* the nodes given a slot */
    if (!targets || !grads || !writers) {
        free(targets);
        free(grads);
        free(writers);
        free(readers);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    int nt = 0, n_first;
    bool hooked = false; /* the hook ran on the gradients (they are its output now) */
    /* first: their graphs run before any gradient lands in its slot. The parameters' own
       gradients and the extras are among them; they keep their places below (the order
       matters for memory), which are before the update too */
    for (int i = 0; i < n_readers; i++) {
        bool placed = false;
        for (int k = 0; k < opt->n && !placed; k++) placed = readers[i] == opt->params[k]->grad;
        for (int k = 0; k < n_extra && !placed; k++) placed = readers[i] == extra[k];
        if (!placed) targets[nt++] = readers[i];
    }
    free(readers);
    n_first = nt;
    wgml_tensor *norm2 = NULL;
    wgml_scope_begin(ctx);
    /* the last parameter's gradient first: the executor orders the graph depth first from
       its targets, and models list parameters from input to output, so that each layer's
       weight gradients are computed as soon as the backward reaches it, rather than all at
       the end with every layer's activations held until then */
    for (int r = opt->n - 1; r >= 0 && !st; r--) {
        int i = r;
        wgml_tensor *p = opt->params[i];
        if (!p->grad) {
            st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_step: parameter %d has no gradient (call wgml_backward first)", i);
            break;
        }
        const wgml_tensor *e = wgml_tensor_in_error(p->grad);
        if (e) {
            st = wgml_fail(ctx, e->status, "%s", e->error ? e->error : "error");
            break;
        }
        /* the gradient node itself writes into the slot when nothing else sees it (or the node
           under a plain reshape of it); otherwise a copy does. Either way grads[i] holds one
           reference, dropped at the end. */
        wgml_tensor *w = slot_writer(p->grad);
        wgml_tensor *g = w ? p->grad : wgml_unary_node(ctx, WGML_OP_COPY, p->grad);
        if (!w) w = g;
        wgml_tensor_retain(g);
        if (w->dest) wgml_buffer_release(ctx, w->dest);
        w->dest = opt->G;
        wgml_buffer_retain(opt->G);
        w->dest_offset = opt->slot[i];
        /* readers in this evaluation find it in its slot (the reshape's views start where it does) */
        for (wgml_tensor *v = g; v != w; v = v->src[1]) v->offset = opt->slot[i];
        w->offset = opt->slot[i];
        grads[i] = g;
        writers[i] = w;
        targets[nt++] = g;
    }
    if (!st) {
        for (int i = 0; i < n_extra; i++) targets[nt++] = extra[i];
        /* with a hook, the gradients (and extras) are evaluated first and handed to it; the
           norm and the update then read what it left in the flat buffer, in a second submit
           (so they are built after it: its writes would otherwise evaluate them first) */
        if (opt->buckets.ready) {
            bool defer = opt->buckets.defer;
            if (defer && !opt->deferred_grads && !(opt->deferred_grads = calloc((size_t)opt->n, sizeof *grads)))
                st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
            if (!st) st = run_buckets(opt, n_first, targets, n_extra, extra, grads, defer, carried);
            if (!st && defer) { /* the rest when something needs it */
                for (int i = 0; i < opt->n; i++) {
                    opt->deferred_grads[i] = grads[i];
                    grads[i] = NULL;
                    wgml_tensor_unref(opt->params[i]->grad);
                    opt->params[i]->grad = NULL;
                }
                opt->deferred = true;
                ctx->pending_step = pending_step;
                ctx->pending_step_arg = opt;
                /* what the step in flight writes: the same buffers as the readers' above */
                _Static_assert(sizeof ctx->pending_step_bufs == sizeof written, "the step's buffers");
                memcpy(ctx->pending_step_bufs, written, sizeof written);
                wgml_scope_end(ctx);
                free(targets);
                free(grads);
                free(writers);
                return WGML_OK;
            }
        } else if (opt->hook) {
            st = run_hook(opt, nt, targets);
            hooked = !st;
        }
    }
    if (!st) {
        wgml_tensor *upd = update_node(opt, &norm2);
        targets[nt++] = norm2;
        targets[nt++] = upd;
        st = upd ? wgml_graph_eval(ctx, nt, targets) : ctx->rt.status ? ctx->rt.status : WGML_ERROR_OUT_OF_MEMORY;
        if (!st) {
            step_taken(opt, norm2);
            for (int i = 0; i < opt->n; i++) { /* gradients are consumed by the step */
                wgml_tensor_unref(opt->params[i]->grad);
                opt->params[i]->grad = NULL;
            }
        }
    }
    for (int i = 0; i < opt->n; i++) {
        /* a failed step leaves the gradients as they were: a pending one keeps no slot, or the
           next backward's sum would read and write the flat buffer in one dispatch */
        wgml_tensor *w = writers[i];
        if (st && w && w->op != WGML_OP_NONE && w->dest == opt->G) {
            for (wgml_tensor *v = grads[i]; v != w; v = v->src[1]) v->offset = 0;
            wgml_buffer_release(ctx, w->dest);
            w->dest = NULL;
            w->dest_offset = w->offset = 0;
        }
        if (grads[i]) wgml_tensor_unref(grads[i]);
    }
    if (st) detach_landed_grads(opt, hooked);
    wgml_scope_end(ctx);
    free(targets);
    free(grads);
    free(writers);
    return st;
}

wgml_status wgml_optimizer_grad_norm(wgml_optimizer *opt, float *norm)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    if (!norm) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_grad_norm: norm is NULL");
    wgml_status done = complete_step(opt);
    if (done) return done;
    if (!opt->norm2) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_grad_norm: no step yet");
    float n2;
    wgml_status st;
    if (opt->scaling) { /* the kernel unscaled it (NaN or inf on a skipped step) */
        float half[SCALER_WORDS];
        st = read_scaler(opt, half);
        n2 = half[SC_NORM2];
    } else
        st = wgml_tensor_read(opt->norm2, &n2, 1);
    if (!st) *norm = sqrtf(n2);
    return st;
}

/* (a step in flight counts: it has been taken, its update waits) */
int64_t wgml_optimizer_steps(const wgml_optimizer *opt) { return opt ? opt->steps + opt->deferred : 0; }

wgml_status wgml_optimizer_set_steps(wgml_optimizer *opt, int64_t steps)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    if (steps < 0)
        return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_steps: steps = %lld must be >= 0",
                         (long long)steps);
    opt->steps = steps;
    return WGML_OK;
}

wgml_status wgml_optimizer_set_lr(wgml_optimizer *opt, float lr)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    wgml_status st = check_lr(opt->ctx, "optimizer_set_lr", lr);
    if (st) return st;
    opt->desc.lr = lr;
    return WGML_OK;
}

/* NULL if s is a usable schedule, else what is wrong with it (in why). */
static const char *schedule_problem(const wgml_lr_schedule *s, char *why, size_t cap)
{
    if (s->decay != WGML_LR_DECAY_NONE && s->decay != WGML_LR_DECAY_COSINE && s->decay != WGML_LR_DECAY_LINEAR)
        snprintf(why, cap, "decay = %d is not a wgml_lr_decay", (int)s->decay);
    else if (s->warmup_steps < 0)
        snprintf(why, cap, "warmup_steps = %lld must be >= 0", (long long)s->warmup_steps);
    else if (s->total_steps < 0)
        snprintf(why, cap, "total_steps = %lld must be >= 0", (long long)s->total_steps);
    else if (s->decay != WGML_LR_DECAY_NONE && s->total_steps <= s->warmup_steps)
        snprintf(why, cap, "total_steps = %lld must be > warmup_steps = %lld (the decay runs between them)",
                 (long long)s->total_steps, (long long)s->warmup_steps);
    else if (!(s->min_lr_ratio >= 0 && s->min_lr_ratio <= 1))
        snprintf(why, cap, "min_lr_ratio = %g must be in [0, 1]", s->min_lr_ratio);
    else
        return NULL;
    return why;
}

float wgml_lr_at(const wgml_lr_schedule *s, float base_lr, int64_t step)
{
    char why[160];
    if (!(base_lr >= 0) || isinf(base_lr) || step < 0 || (s && schedule_problem(s, why, sizeof why))) return NAN;
    if (!s) return base_lr;
    const double pi = 3.14159265358979323846;
    double base = base_lr;
    /* warm-up from base / (warmup + 1), so the first step already moves, up to base at step = warmup */
    if (step < s->warmup_steps) return (float)(base * ((double)step + 1) / ((double)s->warmup_steps + 1));
    if (s->decay == WGML_LR_DECAY_NONE) return base_lr;
    double min = base * s->min_lr_ratio;
    if (step >= s->total_steps) return (float)min;
    double r = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    double shape = s->decay == WGML_LR_DECAY_COSINE ? 0.5 * (1 + cos(pi * r)) : 1 - r;
    return (float)(min + (base - min) * shape);
}

wgml_status wgml_optimizer_set_schedule(wgml_optimizer *opt, const wgml_lr_schedule *s)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    char why[160];
    if (s && schedule_problem(s, why, sizeof why))
        return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_set_schedule: %s", why);
    opt->schedule = s ? *s : (wgml_lr_schedule){0};
    return WGML_OK;
}

float wgml_optimizer_lr(const wgml_optimizer *opt)
{
    return opt ? wgml_lr_at(&opt->schedule, opt->desc.lr, opt->steps + opt->deferred) : NAN;
}

/* A storage tensor viewing parameter i's slot of a moment buffer (for checkpoints). */
static wgml_status moment_view(wgml_optimizer *opt, int i, wgml_buffer *buf, wgml_tensor **out)
{
    wgml_context *ctx = opt->ctx;
    if (i < 0 || i >= opt->n)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_state: parameter %d is not one of its %d", i, opt->n);
    wgml_tensor *p = opt->params[i];
    *out = wgml_tensor_over(ctx, p->ndim, p->shape, buf, opt->slot[i]);
    return *out ? WGML_OK : ctx->rt.status;
}

wgml_status wgml_optimizer_state(wgml_optimizer *opt, int i, wgml_tensor **m, wgml_tensor **v)
{
    if (!opt) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status done = complete_step(opt); /* a step in flight first */
    if (done) return done;
    if (!m || !v) return wgml_fail(opt->ctx, WGML_ERROR_INVALID_ARGUMENT, "optimizer_state: m or v is NULL");
    wgml_status st = moment_view(opt, i, opt->M, m);
    if (!st && (st = moment_view(opt, i, opt->V, v))) { /* all or nothing */
        wgml_tensor_free(*m);
        *m = NULL;
    }
    return st;
}
