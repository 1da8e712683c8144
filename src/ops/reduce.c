/*
 * Reductions along an axis (sum, mean, max, argmax, min, argmin; var and std composed of
 * them): constructors, gradient rules, entries and the launch builder of ops/reduce.wgsl,
 * which fills the kernel's parameter block (the Params struct at the top of the .wgsl file)
 * and its buffers in binding order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/executor.h"
#include "ops/reduce.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"
#include "engine/build.h"
#include "kernels/wgsl_sources.h"

/* reduce.wgsl switches on the op's code, P.op: the codes of the reductions it knows */
static wgml_status reduce_pipeline(wgml_context *ctx, wgml_launch *l)
{
    char header[256];
    snprintf(header, sizeof header,
             "const OP_SUM = %du;\nconst OP_MEAN = %du;\nconst OP_MAX = %du;\nconst OP_ARGMAX = %du;\n"
             "const OP_MIN = %du;\nconst OP_ARGMIN = %du;\n",
             WGML_OP_SUM, WGML_OP_MEAN, WGML_OP_MAX, WGML_OP_ARGMAX, WGML_OP_MIN, WGML_OP_ARGMIN);
    return wgml_kernel_pipeline_variant(ctx, "reduce", 0, header, l);
}

/* Axis elements each thread folds, at most, before a long axis is split over workgroups: a
   GPU wants more than one workgroup per output when there are few outputs, and lavapipe's
   loop limit needs it for very long axes. */
#define REDUCE_TRIPS 64
#define REDUCE_TREE_TRIPS 9 /* the tree over 256 partials */

/* rows that ops/colsum_few.wgsl sums a thread a column group (split K's partials: S <= 16) */
#define COLSUM_FEW_ROWS 16

int wgml_colsum_launches(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint64_t in_off,
                         bool in_half, bool one_launch, wgml_status *st)
{
    *st = WGML_OK;
    /* four columns a thread where the rows and x's start allow 16-byte (8-byte: halves) reads */
    int wide = inner % 4 == 0 && in_off % 4 == 0;
    uint64_t W = wide ? 4 : 1;
    if (len < 2 || outer * len * inner / W > UINT32_MAX) return 0;
    /* 256 rows a workgroup (32 a lane), more where that would leave over 256 partials */
    uint64_t chunk = 256;
    while ((len + chunk - 1) / chunk > 256) chunk *= 2;
    if (one_launch) chunk = len;
    uint64_t parts = (len + chunk - 1) / chunk, cols = inner / W, col_groups = (cols + 31) / 32;
    if (chunk / 8 + 2 >= ctx->rt.loop_limit || (parts > 1 && outer * parts * inner * 4 > wgml_binding_limit(ctx))) return 0;
    /* the header per width and storage: [wide][half] (partials are f32) */
    static const char *const header[2][2] = {
        {"const W = 1u;\nalias V = f32;\n@group(0) @binding(1) var<storage, read> x: array<f32>;\n"
         "fn load(i: u32) -> V { return x[i]; }\n",
         "const W = 1u;\nalias V = f32;\n@group(0) @binding(1) var<storage, read> x: array<u32>;\n"
         "fn load(i: u32) -> V { let h = unpack2x16float(x[i >> 1u]); return select(h.x, h.y, (i & 1u) == 1u); }\n"},
        {"const W = 4u;\nalias V = vec4<f32>;\n@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;\n"
         "fn load(i: u32) -> V { return x[i]; }\n",
         "const W = 4u;\nalias V = vec4<f32>;\n@group(0) @binding(1) var<storage, read> x: array<vec2<u32>>;\n"
         "fn load(i: u32) -> V { let v = x[i]; return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)); }\n"}};
    int n = parts > 1 ? 2 : 1;
    for (int k = 0; k < n; k++) {
        bool first = k == 0, half = first && in_half;
        wgml_launch *lk = &l[k];
        if (k) *lk = l[0];
        uint64_t rows = first ? len : parts, per = first ? chunk : parts, p = first ? parts : 1;
        /* a few rows (split K's partials, a second launch's few parts): a thread folds all of
           them for its columns (ops/colsum_few.wgsl) */
        bool few = rows <= COLSUM_FEW_ROWS && p == 1;
        if ((*st = wgml_kernel_pipeline_variant(ctx, few ? "colsum_few" : "colsum", (uint32_t)half | (uint32_t)wide << 1,
                                                header[wide][half], lk)))
            return 0;
        uint32_t q[8] = {(uint32_t)outer, (uint32_t)rows, (uint32_t)inner, (uint32_t)per, (uint32_t)p,
                         first ? (uint32_t)(in_off / W) : 0, 0, 0};
        q[6] = wgml_grid(ctx, few ? (outer * cols + 255) / 256 : outer * p * col_groups, lk->groups);
        memcpy(lk->params, q, sizeof q);
        lk->params_size = sizeof q;
        lk->loop_trips = few ? (uint32_t)(rows / 4 + 4) : (uint32_t)((per + 7) / 8 + 8);
        snprintf(lk->what, sizeof lk->what, "column sums %llu of [%llu, %llu, %llu]", (unsigned long long)rows,
                 (unsigned long long)outer, (unsigned long long)rows, (unsigned long long)inner);
    }
    if (n == 2) { /* the partials [outer, parts, inner] in the node's scratch buffer */
        l[0].scratch_bytes = outer * parts * inner * 4;
        l[0].scratch_mask = 1u << 1;
        l[1].scratch_mask = 1u << 0;
    }
    return n;
}

/* x [outer, len, inner] -> y [outer, inner]; one launch, or two through partial results when
   the axis is long (see ops/reduce.wgsl) */
wgml_status wgml_build_reduce(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_status st = reduce_pipeline(ctx, l);
    if (st) return st;
    wgml_tensor *x = t->src[0];
    int ax = wgml_reduce_params_of(t).axis;
    uint64_t outer = 1, inner = 1, len = (uint64_t)x->shape[ax];
    for (int d = 0; d < ax; d++) outer *= (uint64_t)x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= (uint64_t)x->shape[d];
    uint64_t trips = (len + 255) / 256;
    /* the chunk one stage-1 thread folds: REDUCE_TRIPS elements, fewer under a small loop limit */
    uint64_t budget = ctx->rt.loop_limit > REDUCE_TREE_TRIPS + 1 ? ctx->rt.loop_limit - REDUCE_TREE_TRIPS : 1;
    if (budget > REDUCE_TRIPS) budget = REDUCE_TRIPS;
    bool split = trips > budget && (outer * inner < 1024 || trips + REDUCE_TREE_TRIPS > ctx->rt.loop_limit);
    uint64_t chunk = 256 * budget, parts = split ? (len + chunk - 1) / chunk : 1;
    bool half = x->dtype == WGML_F16; /* the input's launch reads halves; partials are f32 */
    uint32_t p[12] = {(uint32_t)outer, (uint32_t)len, (uint32_t)inner, (uint32_t)t->op, (uint32_t)x->offset, 0, 0, 0,
                      (uint32_t)chunk, (uint32_t)parts, 0, half};
    float neg_inf = -INFINITY;
    memcpy(&p[6], &neg_inf, 4);
    l->params_size = sizeof p;
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = t;
    l->nbuffers = 2;
    snprintf(l->what, sizeof l->what, "%s over %llu elements", wgml_op_table[t->op]->name, (unsigned long long)len);
    /* columns (a long axis of wide rows: a bias's gradient sums [rows, N] over rows): one
       workgroup per output would read the axis inner elements apart, a sector per value;
       instead the column-sum kernel's threads along inner fold chunks of the axis (on an
       H200 a bias's sum of [16384, 1536], both launches timed alone: 36.5 us, against 95.6
       with the earlier chunks of 16 rows a thread and this kernel's tree) */
    if (t->op == WGML_OP_SUM && inner >= 32 && len > budget) {
        wgml_launch first = *l;
        int n = wgml_colsum_launches(ctx, l, outer, len, inner, x->offset, half, false, &st);
        if (st) return st;
        if (n) {
            l[0].buffers[0] = wgml_tensor_base(x);
            l[0].buffers[1] = n == 2 ? NULL : t;
            l[0].nbuffers = 2;
            if (n == 2) {
                l[1].buffers[0] = NULL;
                l[1].buffers[1] = t;
                l[1].nbuffers = 2;
            }
            *count = n;
            return WGML_OK;
        }
        *l = first;
    }
    if (len <= budget) { /* a short axis: a thread per output */
        l->loop_trips = len;
        p[7] = 3;
        p[5] = wgml_grid(ctx, (outer * inner + 255) / 256, l->groups);
        memcpy(l->params, p, sizeof p);
        return WGML_OK;
    }
    if (!split) {
        l->loop_trips = trips + REDUCE_TREE_TRIPS;
        p[5] = wgml_grid(ctx, outer * inner, l->groups);
        memcpy(l->params, p, sizeof p);
        return WGML_OK;
    }
    /* stage 1 writes [outer, parts, inner] partials (argmax: and their indices after them)
       into the node's scratch buffer; stage 2 reads them */
    uint64_t partials = outer * parts * inner;
    wgml_launch *l2 = l + 1;
    *l2 = *l;
    l->scratch_bytes = partials * 4 * (t->op == WGML_OP_ARGMAX || t->op == WGML_OP_ARGMIN ? 2 : 1);
    l->buffers[1] = NULL;
    l->scratch_mask = 1u << 1;
    l->loop_trips = budget + REDUCE_TREE_TRIPS;
    p[7] = 1;
    p[10] = (uint32_t)partials;
    p[5] = wgml_grid(ctx, partials, l->groups);
    memcpy(l->params, p, sizeof p);
    l2->buffers[0] = NULL;
    l2->scratch_mask = 1u << 0;
    l2->loop_trips = (parts + 255) / 256 + REDUCE_TREE_TRIPS;
    p[7] = 2;
    p[4] = 0;
    p[11] = 0;
    p[5] = wgml_grid(ctx, outer * inner, l2->groups);
    memcpy(l2->params, p, sizeof p);
    *count = 2;
    return WGML_OK;
}

/* ---------------------------------------------------------------- constructors */

static wgml_tensor *reduce(wgml_context *ctx, wgml_op op, wgml_tensor *a, int axis, int keepdim)
{
    const char *name = wgml_op_table[op]->name;
    CHECK_INPUT(ctx, a, name, "a");
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0 || ax >= a->ndim) {
        char s[128];
        wgml_shape_str(s, sizeof s, a);
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: axis %d is out of range for shape %s",
                                 name, axis, s);
    }
    int64_t shape[WGML_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (d != ax) shape[n++] = a->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    if (n == 0) shape[n++] = 1;
    wgml_tensor *c = wgml_as_contiguous(ctx, a);
    if (!c) return NULL;
    wgml_tensor *t = wgml_node_consuming(ctx, op, n, shape, 1, &c);
    if (t) wgml_reduce_params_of_set(t, (wgml_reduce_params){.axis = ax});
    return t;
}

wgml_tensor *wgml_sum(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_SUM, a, axis, keepdim); }

wgml_tensor *wgml_mean(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_MEAN, a, axis, keepdim); }

wgml_tensor *wgml_max(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_MAX, a, axis, keepdim); }

wgml_tensor *wgml_argmax(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_ARGMAX, a, axis, keepdim); }

wgml_tensor *wgml_min(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_MIN, a, axis, keepdim); }

wgml_tensor *wgml_argmin(wgml_context *ctx, wgml_tensor *a, int axis, int keepdim) { return reduce(ctx, WGML_OP_ARGMIN, a, axis, keepdim); }

static wgml_tensor *reduce_all(wgml_context *ctx, wgml_op op, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, wgml_op_table[op]->name, "a");
    wgml_tensor *flat = wgml_reshape(ctx, a, 1, &a->numel);
    if (!flat || flat->status) return flat;
    flat->user_held = false; /* the reduction's reference keeps it */
    wgml_tensor *t = reduce(ctx, op, flat, 0, 0);
    wgml_tensor_unref(flat);
    return t;
}

wgml_tensor *wgml_sum_all(wgml_context *ctx, wgml_tensor *a) { return reduce_all(ctx, WGML_OP_SUM, a); }

wgml_tensor *wgml_mean_all(wgml_context *ctx, wgml_tensor *a) { return reduce_all(ctx, WGML_OP_MEAN, a); }

wgml_tensor *wgml_max_all(wgml_context *ctx, wgml_tensor *a) { return reduce_all(ctx, WGML_OP_MAX, a); }

wgml_tensor *wgml_min_all(wgml_context *ctx, wgml_tensor *a) { return reduce_all(ctx, WGML_OP_MIN, a); }

/* sum((a - mean)^2) / (n - correction) along the axis: the table's ops, so its gradient is theirs */
wgml_tensor *wgml_var(wgml_context *ctx, wgml_tensor *a, int axis, int correction, int keepdim)
{
    CHECK_INPUT(ctx, a, "var", "a");
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0 || ax >= a->ndim || correction < 0) {
        char s[128];
        wgml_shape_str(s, sizeof s, a);
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "var: axis %d or correction %d is out of range for shape %s",
                                 axis, correction, s);
    }
    wgml_scope_begin(ctx);
    wgml_tensor *d = wgml_sub(ctx, a, wgml_mean(ctx, a, ax, 1));
    /* n <= correction: NaN, as NumPy and PyTorch give (a division by zero or less) */
    double n = (double)a->shape[ax] - correction;
    wgml_tensor *v = wgml_binary_scalar(ctx, WGML_MUL, wgml_sum(ctx, wgml_mul(ctx, d, d), ax, keepdim), n > 0 ? (float)(1.0 / n) : NAN);
    wgml_keep(v);
    wgml_scope_end(ctx);
    return v;
}

wgml_tensor *wgml_std(wgml_context *ctx, wgml_tensor *a, int axis, int correction, int keepdim)
{
    return wgml_sqrt(ctx, wgml_var(ctx, a, axis, correction, keepdim));
}

/* ---------------------------------------------------------------- gradient rules */

typedef wgml_tensor T;

static wgml_status vjp_sum(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    int ax = wgml_reduce_params_of(t).axis;
    T *e = wgml_rule_expand_reduced(c, g, a, ax);
    gin[0] = t->op == WGML_OP_MEAN ? wgml_rule_scal(c, WGML_DIV, e, (float)a->shape[ax]) : e;
    return WGML_OK;
}

/* to the maxima (minima), split equally among ties (as torch.amax); a row holding NaN shares it
   over every element */
static wgml_status vjp_max(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    int ax = wgml_reduce_params_of(t).axis;
    T *te = wgml_rule_expand_reduced(c, t, a, ax); /* top: 1 where a equals the extremum */
    T *top = wgml_scalar_binary(c, WGML_SUB, 1.0f, wgml_rule_positive(c, t->op == WGML_OP_MIN ? wgml_sub(c, a, te) : wgml_sub(c, te, a)));
    T *share = wgml_div(c, wgml_rule_expand_reduced(c, g, a, ax), wgml_sum(c, top, ax, 1));
    gin[0] = wgml_rule_relu_grad(c, top, share);
    return WGML_OK;
}

/* ---------------------------------------------------------------- entries */

/* sums of terms of both signs up to 10 cancel to near 0; the rounding scales with the terms (mean as sum) */
/* sum and mean read halves (a bias's gradient under mixed precision sums the halves its
   GEMMs read); their result is f32 */
WGML_OP_ENTRY(SUM) = {.name = "sum", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_sum, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10),
                      .f16_in = 1};
WGML_OP_ENTRY(MEAN) = {.name = "mean", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_sum, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10),
                       .f16_in = 1};
WGML_OP_ENTRY(MAX) = {.name = "max", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_max, DOMAIN(-10, 10, 0, 0), ARITH};
WGML_OP_ENTRY(ARGMAX) = {.name = "argmax", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, DOMAIN(-10, 10, 0, 0), .tol = 0, .out = WGML_OUT_I32,
                    .no_grad = "indices are constant almost everywhere (as in PyTorch, none passes)", .constant = true};
WGML_OP_ENTRY(MIN) = {.name = "min", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_max, DOMAIN(-10, 10, 0, 0), ARITH};
WGML_OP_ENTRY(ARGMIN) = {.name = "argmin", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, DOMAIN(-10, 10, 0, 0), .tol = 0, .out = WGML_OUT_I32,
                    .no_grad = "indices are constant almost everywhere (as in PyTorch, none passes)", .constant = true};
