/* Layer and RMS norms along the last axis, and their input gradients (one row kernel each): constructors, gradient rules, entries. */
#include "ops/norm.h"

#include <stdio.h>
#include <string.h>

#include "engine/build.h"
#include "ops/row.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- constructors */

wgml_tensor *wgml_layernorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight, wgml_tensor *bias, float eps)
{
    return wgml_row_node(ctx, WGML_OP_LAYERNORM, a, weight, bias, eps);
}

wgml_tensor *wgml_rmsnorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight, float eps)
{
    return wgml_row_node(ctx, WGML_OP_RMSNORM, a, weight, NULL, eps);
}

wgml_tensor *wgml_norm_grad(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w, wgml_tensor *g, float eps, bool centred)
{
    const char *name = centred ? "layernorm_grad" : "rmsnorm_grad";
    CHECK_INPUT(ctx, x, name, "x");
    CHECK_INPUT(ctx, g, name, "g");
    if (w) CHECK_INPUT(ctx, w, name, "weight");
    int64_t n = x->shape[x->ndim - 1];
    if (g->numel != x->numel || (w && (w->ndim != 1 || w->shape[0] != n)))
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: x, its weight and the gradient do not match", name);
    wgml_tensor *src[3] = {wgml_as_contiguous(ctx, x), w ? wgml_as_contiguous(ctx, w) : NULL, wgml_as_contiguous(ctx, g)};
    if (!src[0] || !src[2] || (w && !src[1])) {
        for (int i = 0; i < 3; i++) wgml_tensor_unref(src[i]);
        return NULL;
    }
    if (!w) src[1] = src[0], wgml_tensor_retain(src[0]); /* the weight's binding, unread */
    wgml_tensor *t = wgml_node_consuming(ctx, centred ? WGML_OP_LAYERNORM_GRAD : WGML_OP_RMSNORM_GRAD, x->ndim, x->shape, 3, src);
    if (t) {
        wgml_row_params_of_set(t, (wgml_row_params){.weight = w != NULL, .eps = eps});
    }
    return t;
}

/* ---------------------------------------------------------------- gradient rules */

/* y = xh w + b with xh = xc r, r = rsqrt(mean(xc^2) + eps), xc = x - mean(x) (layernorm) or x
   (rmsnorm); gh = g w: dx = r (gh - xh mean(gh xh) [- mean(gh) for layernorm]), one row kernel
   (the norm's _grad op); dw = sum over rows of g xh, db = sum over rows of g. The _grad kernel
   has xh and g at hand: with a weight it writes g xh too, after dx in its node's buffer (the
   node's tail), which dw sums through a view; no norm is computed again for it, and no product
   launched */
static wgml_status vjp_norm(wgml_context *c, T *t, T *g, T **gin)
{
    wgml_row_params p = wgml_row_params_of(t);
    T *a = t->src[0], *w = p.weight ? t->src[1] : NULL;
    bool centred = t->op == WGML_OP_LAYERNORM, bias = p.bias;
    float eps = p.eps;
    T *dx = wgml_norm_grad(c, a, w, g, eps, centred);
    gin[0] = dx;
    if (w && dx && !dx->status) {
        int64_t stride[WGML_MAX_DIMS], s = 1;
        for (int d = dx->ndim - 1; d >= 0; d--) stride[d] = s, s *= dx->shape[d];
        dx->tail = dx->numel; /* g xh [rows, n] after dx */
        gin[1] = wgml_rule_sum_rows(c, wgml_view_node(c, dx, dx->ndim, dx->shape, stride, dx->numel, WGML_VIEW_OTHER));
    }
    if (bias) gin[1 + (w != NULL)] = wgml_rule_sum_rows(c, g);
    return WGML_OK;
}

/* (the op table's add_in) dx + r in the gradient's kernel, r f32 of its shape, taken into t
   itself: only where t is its caller's own (backward, right after vjp_norm made it, when only
   the weight's gradient reads t, through a view of the tail, g xh after dx, which r leaves
   alone) */
static wgml_tensor *norm_grad_add_in(wgml_context *ctx, wgml_tensor *t, wgml_tensor *r, bool own)
{
    (void)ctx;
    if (!own || t->nsrc != 3 || t->buf || t->dest || t->dtype != WGML_F32 || r->dtype != WGML_F32 ||
        !wgml_is_contiguous(r) || r->ndim != t->ndim || memcmp(r->shape, t->shape, (size_t)t->ndim * sizeof *t->shape))
        return NULL;
    t->src[t->nsrc++] = r;
    wgml_tensor_retain(r);
    return t;
}

/* ---------------------------------------------------------------- launch */

/* ops/norm.wgsl: x [rows, n], weight [n] and bias [n] (x bound for a missing one), or for a
   gradient the weight and the upstream gradient [rows, n] (and, where the node has a tail,
   g xh into it: flag 4) */
static wgml_status build_norm(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *x = t->src[0];
    bool grad = t->op == WGML_OP_LAYERNORM_GRAD || t->op == WGML_OP_RMSNORM_GRAD;
    wgml_row_params p = wgml_row_params_of(t);
    int has_w = p.weight, has_b = !grad && p.bias;
    wgml_row_kernel rk = {.kernel = "norm",
                          .codes = {{"LAYERNORM", WGML_OP_LAYERNORM}, {"RMSNORM", WGML_OP_RMSNORM},
                                    {"LAYERNORM_GRAD", WGML_OP_LAYERNORM_GRAD}, {"RMSNORM_GRAD", WGML_OP_RMSNORM_GRAD}},
                          .op = t->op, .flags = (uint32_t)(has_w | (has_b << 1) | (grad && t->tail ? 4 : 0)), .x = x,
                          .w = has_w ? t->src[1] : x, .b = grad ? t->src[2] : has_b ? t->src[1 + has_w] : x,
                          .r = grad && t->nsrc > 3 ? t->src[3] : NULL, .eps = p.eps};
    return wgml_row_launch(ctx, t, &rk, l);
}

/* ---------------------------------------------------------------- entries */

/* O(1) outputs: (x - mean) r w + b may cancel to near 0 (~1e-6 absolute); rmsnorm as layernorm */
WGML_OP_ENTRY(LAYERNORM) = {.name = "layernorm", .kind = WGML_KIND_ROW, .build = build_norm, .arity = 3, .vjp = vjp_norm, .recompute = true, .f16_out = true, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2)};
WGML_OP_ENTRY(RMSNORM) = {.name = "rmsnorm", .kind = WGML_KIND_ROW, .build = build_norm, .arity = 2, .vjp = vjp_norm, .recompute = true, .f16_out = true, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2)};
/* one row kernel for a norm's input gradient: x, its weight, the upstream gradient (and an
   addend after them where backward folded another gradient of x into it) */
WGML_OP_ENTRY(LAYERNORM_GRAD) = {.name = "layernorm_grad", .kind = WGML_KIND_ROW, .build = build_norm, .arity = 3, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2),
                            .no_grad = "made by backward only (no second derivatives)", .add_in = norm_grad_add_in};
WGML_OP_ENTRY(RMSNORM_GRAD) = {.name = "rmsnorm_grad", .kind = WGML_KIND_ROW, .build = build_norm, .arity = 3, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2),
                          .no_grad = "made by backward only (no second derivatives)", .add_in = norm_grad_add_in};
