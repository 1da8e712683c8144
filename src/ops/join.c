/*
 * Joining and splitting along an axis: concat (one KERNEL node, a copy launch per input),
 * stack (a new axis of size 1 on each input, then concat), split and chunk (slices: views, no
 * copy). Any dtype; the inputs of a concat share theirs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "engine/executor.h"
#include "ops/join.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

/* the output's shape, or an error tensor naming the first input that does not fit */
static wgml_tensor *check_join(wgml_context *ctx, const char *name, int n, wgml_tensor *const *ts, int axis, int *ax_out,
                               int64_t *shape)
{
    if (n < 1 || !ts)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %d tensors%s (want at least 1)", name, n, ts ? "" : " in a NULL list");
    for (int i = 0; i < n; i++) {
        wgml_tensor *t = ts[i];
        if (!wgml_tensor_valid(t)) return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: tensor %d is NULL", name, i);
        if (t->ctx != ctx) return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "%s: tensor %d belongs to another context", name, i);
        if (t->status) return wgml_tensor_error(ctx, t->status, "%s", t->error ? t->error : "error in an input");
    }
    wgml_tensor *a = ts[0];
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: axis %d is out of range for %d dimensions", name, axis, a->ndim);
    memcpy(shape, a->shape, sizeof a->shape);
    shape[ax] = 0;
    for (int i = 0; i < n; i++) {
        wgml_tensor *t = ts[i];
        if (t->dtype != a->dtype)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: tensor %d is %s, tensor 0 %s: one dtype (wgml_cast converts)",
                                     name, i, wgml_dtype_name(t->dtype), wgml_dtype_name(a->dtype));
        bool fits = t->ndim == a->ndim;
        for (int d = 0; d < a->ndim && fits; d++) fits = d == ax || t->shape[d] == a->shape[d];
        if (!fits) {
            char s0[128], si[128];
            wgml_format_shape(s0, sizeof s0, a->ndim, a->shape);
            wgml_format_shape(si, sizeof si, t->ndim, t->shape);
            return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: tensor %d (%s %s) does not match tensor 0 (%s %s) off axis %d",
                                     name, i, si, wgml_dtype_name(t->dtype), s0, wgml_dtype_name(a->dtype), ax);
        }
        shape[ax] += t->shape[ax];
    }
    *ax_out = ax;
    return NULL;
}

wgml_tensor *wgml_concat(wgml_context *ctx, int n, wgml_tensor *const *ts, int axis)
{
    if (!ctx) return NULL;
    int64_t shape[WGML_MAX_DIMS];
    int ax = 0;
    wgml_tensor *bad = check_join(ctx, "concat", n, ts, axis, &ax, shape);
    if (bad) return bad;
    if (n == 1) return wgml_contiguous(ctx, ts[0]);
    if (n > WGML_MAX_SRC) { /* a node joins up to WGML_MAX_SRC: the first ones, then the rest with them */
        wgml_scope_begin(ctx);
        wgml_tensor *rest[WGML_MAX_SRC];
        rest[0] = wgml_concat(ctx, WGML_MAX_SRC, ts, ax);
        int k = 1;
        wgml_tensor *t = NULL;
        for (int i = WGML_MAX_SRC; i <= n; i++) {
            if (i < n) rest[k++] = ts[i];
            if (k == WGML_MAX_SRC || i == n) {
                t = wgml_concat(ctx, k, rest, ax);
                rest[0] = t;
                k = 1;
            }
        }
        wgml_keep(t);
        wgml_scope_end(ctx);
        return t;
    }
    int64_t numel;
    if (wgml_shape_check(ctx, ts[0]->ndim, shape, &numel))
        return wgml_tensor_error(ctx, ctx->rt.status, "concat: %s", ctx->rt.message);
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CONCAT, ts[0]->ndim, shape, n, ts);
    if (t && !t->status) wgml_concat_params_of_set(t, (wgml_concat_params){.axis = ax});
    return t;
}

wgml_status wgml_build_concat(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    /* four elements a thread where every input's rows are contiguous runs of a multiple of 4
       words (its last stride 1): they stay contiguous in the output whatever the axis */
    bool four = true, half = t->dtype == WGML_F16; /* the inputs are 4-byte words; halves out: a cast's */
    for (int k = 0; k < t->nsrc; k++) {
        const wgml_tensor *x = t->src[k];
        four &= x->shape[x->ndim - 1] % 4 == 0 && x->stride[x->ndim - 1] == 1;
    }
    uint32_t per = four ? 4 : 1;
    char header[160];
    snprintf(header, sizeof header, "%sconst PER = %uu;\n%s", half ? "enable f16;\n" : "", per,
             half ? "alias Y = f16;\nfn out(v: u32) -> Y { return Y(bitcast<f32>(v)); } // the adapter's rounding, as a norm's\n"
                  : "alias Y = u32;\nfn out(v: u32) -> Y { return v; }\n");
    wgml_status st = wgml_kernel_pipeline_variant(ctx, "concat", per | (uint32_t)half << 3, header, l);
    if (st) return st;
    int ax = wgml_concat_params_of(t).axis, pad = 4 - t->ndim;
    uint32_t out4[4];
    for (int d = 0; d < 4; d++) out4[d] = d < pad ? 1u : (uint32_t)t->shape[d - pad];
    int64_t start = 0;
    wgml_launch first = *l;
    for (int k = 0; k < t->nsrc; k++) {
        wgml_tensor *x = t->src[k];
        wgml_launch *lk = &l[k];
        *lk = first;
        uint32_t p[20] = {0};
        p[0] = (uint32_t)x->numel;
        p[1] = wgml_grid(ctx, ((uint64_t)x->numel / per + 255) / 256, lk->groups);
        p[2] = (uint32_t)(ax + pad);
        p[3] = (uint32_t)start;
        for (int d = 0; d < 4; d++) {
            p[4 + d] = d < pad ? 1u : (uint32_t)x->shape[d - pad];
            p[8 + d] = d < pad ? 0u : (uint32_t)x->stride[d - pad];
            p[12 + d] = out4[d];
        }
        p[16] = (uint32_t)x->offset;
        memcpy(lk->params, p, sizeof p);
        lk->params_size = sizeof p;
        lk->buffers[0] = wgml_tensor_base(x);
        lk->buffers[1] = t;
        lk->nbuffers = 2;
        snprintf(lk->what, sizeof lk->what, "concat of %d tensors", t->nsrc);
        start += x->shape[ax];
    }
    *count = t->nsrc;
    return WGML_OK;
}

wgml_tensor *wgml_stack(wgml_context *ctx, int n, wgml_tensor *const *ts, int axis)
{
    if (!ctx) return NULL;
    if (n < 1 || !ts || !wgml_tensor_valid(ts[0]))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "stack: %d tensors, or tensor 0 is NULL", n);
    int nd = ts[0]->ndim, ax = wgml_axis(axis, nd + 1); /* a new axis: 0..nd */
    if (ax < 0 || nd + 1 > WGML_MAX_DIMS)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "stack: a new axis %d for %d-D tensors is out of range (at most %d-D)",
                                 axis, nd, WGML_MAX_DIMS);
    wgml_scope_begin(ctx);
    wgml_tensor *one[64], *t = NULL;
    wgml_tensor **each = n <= 64 ? one : malloc((size_t)n * sizeof *each);
    if (!each) t = wgml_tensor_error(ctx, WGML_ERROR_OUT_OF_MEMORY, "stack: out of host memory");
    for (int i = 0; i < n && each; i++) {
        wgml_tensor *x = ts[i];
        if (!wgml_tensor_valid(x) || x->status || x->ctx != ctx) { /* concat names it */
            each[i] = x;
            continue;
        }
        if (x->ndim != nd || memcmp(x->shape, ts[0]->shape, (size_t)nd * sizeof *x->shape)) {
            char s0[128], si[128];
            wgml_format_shape(s0, sizeof s0, ts[0]->ndim, ts[0]->shape);
            wgml_format_shape(si, sizeof si, x->ndim, x->shape);
            t = wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "stack: tensor %d is %s, tensor 0 %s (stacked tensors share a shape)", i, si, s0);
            break;
        }
        int64_t shape[WGML_MAX_DIMS];
        for (int d = 0, s = 0; d <= nd; d++) shape[d] = d == ax ? 1 : x->shape[s++];
        each[i] = wgml_reshape(ctx, x, nd + 1, shape);
    }
    if (each && !t) t = wgml_concat(ctx, n, each, ax);
    if (each != one) free(each);
    wgml_keep(t);
    wgml_scope_end(ctx);
    return t;
}

wgml_status wgml_split(wgml_context *ctx, wgml_tensor *a, int axis, int n, const int64_t *sizes, wgml_tensor **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !sizes || n < 1) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "split: %d parts, sizes or out NULL", n);
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!wgml_tensor_valid(a)) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "split: the tensor is NULL");
    if (a->status) return wgml_fail(ctx, a->status, "%s", a->error ? a->error : "error in the input");
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "split: axis %d is out of range for %d dimensions", axis, a->ndim);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 1 || sizes[i] > a->shape[ax]) total = -1;
        if (total < 0) break;
        total += sizes[i];
    }
    if (total != a->shape[ax])
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "split: %d sizes (each >= 1) must sum to axis %d's %lld", n, ax, (long long)a->shape[ax]);
    for (int64_t i = 0, at = 0; i < n; at += sizes[i++]) {
        out[i] = wgml_slice(ctx, a, ax, at, at + sizes[i], 1);
        if (!out[i] || out[i]->status) {
            wgml_status st = out[i] ? out[i]->status : ctx->rt.status;
            for (int64_t j = 0; j <= i; j++) wgml_tensor_free(out[j]), out[j] = NULL;
            return st;
        }
    }
    return WGML_OK;
}

wgml_status wgml_chunk(wgml_context *ctx, wgml_tensor *a, int axis, int n, wgml_tensor **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; out && i < n; i++) out[i] = NULL;
    if (!out || !wgml_tensor_valid(a) || n < 1) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "chunk: NULL tensor or out, or %d parts", n);
    if (a->status) return wgml_fail(ctx, a->status, "%s", a->error ? a->error : "error in the input");
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "chunk: axis %d is out of range for %d dimensions", axis, a->ndim);
    if (a->shape[ax] % n)
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "chunk: axis %d of size %lld does not split into %d equal parts", ax, (long long)a->shape[ax], n);
    int64_t *sizes = malloc((size_t)n * sizeof *sizes);
    if (!sizes) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "chunk: out of host memory");
    for (int i = 0; i < n; i++) sizes[i] = a->shape[ax] / n;
    wgml_status st = wgml_split(ctx, a, ax, n, sizes, out);
    free(sizes);
    return st;
}

/* ---------------------------------------------------------------- gradient rules and entries */

typedef wgml_tensor T;

/* each input gets its window of g along the axis */
static wgml_status vjp_concat(wgml_context *c, T *t, T *g, T **gin)
{
    int ax = wgml_concat_params_of(t).axis;
    int64_t at = 0;
    for (int k = 0; k < t->nsrc; at += t->src[k++]->shape[ax]) gin[k] = wgml_slice(c, g, ax, at, at + t->src[k]->shape[ax], 1);
    return WGML_OK;
}

WGML_OP_ENTRY(CONCAT) = {.name = "concat", .kind = WGML_KIND_KERNEL, .arity = WGML_MAX_SRC, .build = wgml_build_concat, .vjp = vjp_concat,
                    .any_dtype = 0xff, .out = WGML_OUT_SAME, .f16_out = true, DOMAIN(-10, 10, -10, 10), ARITH};
