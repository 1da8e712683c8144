/*
 * Nodes: what every op's constructor (src/ops/) records the lazy graph with. A constructor
 * checks its inputs and shapes, then records a node; bad input gives a tensor in the error
 * state (its message names the op and the shapes); ops on it inherit the error, and reading
 * it returns the status. A view records no work: it shares its input's buffer through new
 * strides and an offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "engine/executor.h"

/* ---------------------------------------------------------------- input checks */

wgml_tensor *wgml_check_input(wgml_context *ctx, wgml_tensor *t, const char *name, const char *role)
{
    if (!t) return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: input %s is NULL", name, role);
    /* only a tag check: a freed handle is undefined behaviour (wgml.h), not something we detect */
    if (!wgml_tensor_valid(t))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: input %s is not a wgml tensor", name, role);
    if (t->ctx != ctx)
        return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "%s: input %s belongs to another context", name, role);
    if (t->status != WGML_OK)
        return wgml_tensor_error(ctx, t->status, "%s", t->error ? t->error : "error in an input");
    return NULL;
}

wgml_tensor *wgml_node(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc,
                       wgml_tensor *const *src)
{
    /* the dtypes the entry takes (ops.h) */
    const wgml_op_def *d = wgml_op_table[op];
    for (int i = 0; i < nsrc; i++) {
        int want = d->i32_only >> i & 1 ? WGML_I32 : WGML_F32, got = src[i]->dtype;
        bool halves_ok = wgml_op_is_elementwise(op) || op == WGML_OP_VIEW || (d->f16_in >> i & 1);
        if (got == WGML_F16 && !halves_ok)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: operand %d is f16, which %s does not take%s", d->name,
                                     i, d->name, " (wgml_cast converts)");
        if (got == WGML_F16 && want == WGML_F32) continue;
        if (!(d->any_dtype >> i & 1) && got != want)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: operand %d is %s; %s takes %s there%s", d->name, i,
                                     wgml_dtype_name(src[i]->dtype), d->name, wgml_dtype_name(want),
                                     " (wgml_cast converts)");
    }
    wgml_tensor *t = wgml_tensor_new(ctx, ndim, shape);
    if (!t) return NULL;
    ctx->settle_readers = wgml_settle_readers; /* pending results exist from now on */
    t->dtype = d->out == WGML_OUT_I32 ? WGML_I32 : d->out == WGML_OUT_F16 ? WGML_F16
             : d->out == WGML_OUT_SAME && nsrc ? src[0]->dtype : WGML_F32;
    t->op = op;
    t->nsrc = nsrc;
    for (int i = 0; i < nsrc; i++) {
        t->src[i] = src[i];
        wgml_tensor_retain(src[i]);
    }
    return t;
}

int wgml_axis(int axis, int ndim)
{
    int ax = axis < 0 ? axis + ndim : axis;
    return ax >= 0 && ax < ndim ? ax : -1;
}

/* (build.h) An upload viewed whole carries its range: a value outside [0, len) is refused
   here. A view that leaves elements out may leave the bad ones out, so it is left to the GPU. */
wgml_tensor *wgml_check_indices(wgml_context *ctx, const char *name, wgml_tensor *idx, int64_t len, const char *what)
{
    if (idx->dtype != WGML_I32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the indices are %s; they must be i32 (wgml_cast converts)",
                                 name, wgml_dtype_name(idx->dtype));
    if (len > INT32_MAX || idx->numel > INT32_MAX)
        return wgml_tensor_error(ctx, WGML_ERROR_LIMIT, "%s: %lld indices into %lld entries: past the 2^31 that i32 indices address",
                                 name, (long long)idx->numel, (long long)len);
    wgml_tensor *b = wgml_tensor_base(idx);
    if (b->op != WGML_OP_NONE || !b->range_known || (b->range_lo >= 0 && b->range_hi < len)) return NULL;
    if (!wgml_is_contiguous(idx) || idx->offset != b->offset || idx->numel != b->numel) return NULL;
    return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: index %d is out of range for %s (valid: 0 to %lld)", name,
                             b->range_lo < 0 ? b->range_lo : b->range_hi, what, (long long)len - 1);
}

/* ---------------------------------------------------------------- views */

/* src[0] is the tensor owning the buffer; src[1] the view's input (for its gradient). */
wgml_tensor *wgml_view_node(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape,
                              const int64_t *stride, int64_t offset, int kind)
{
    wgml_tensor *src[2] = {wgml_tensor_base(a), a};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_VIEW, ndim, shape, 2, src);
    if (!t) return NULL;
    t->view_kind = kind;
    memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
    t->offset = offset;
    return t;
}

wgml_tensor *wgml_contiguous(wgml_context *ctx, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, "contiguous", "a");
    if (wgml_is_contiguous(a)) return wgml_view_node(ctx, a, a->ndim, a->shape, a->stride, a->offset, WGML_VIEW_RESHAPE);
    return wgml_node(ctx, WGML_OP_COPY, a->ndim, a->shape, 1, &a);
}

/* `a` if contiguous, else a new contiguous copy; the caller owns one reference either way. */
wgml_tensor *wgml_as_contiguous(wgml_context *ctx, wgml_tensor *a)
{
    if (wgml_is_contiguous(a)) {
        wgml_tensor_retain(a);
        return a;
    }
    wgml_tensor *c = wgml_node(ctx, WGML_OP_COPY, a->ndim, a->shape, 1, &a);
    if (c) c->user_held = false; /* only the consumer's reference keeps it */
    return c;
}

/* A node whose inputs went through wgml_as_contiguous: it holds its own references. */
wgml_tensor *wgml_node_consuming(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc,
                                 wgml_tensor **src)
{
    wgml_tensor *t = wgml_node(ctx, op, ndim, shape, nsrc, src);
    for (int i = 0; i < nsrc; i++) wgml_tensor_unref(src[i]);
    return t;
}

/* ---------------------------------------------------------------- elementwise */

int wgml_broadcast_shapes(const wgml_tensor *a, const wgml_tensor *b, int64_t *out)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        int da = d - (n - a->ndim), db = d - (n - b->ndim);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) return -1;
        out[d] = x == 1 ? y : x;
    }
    return n;
}

wgml_tensor *wgml_unary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, wgml_op_table[op]->name, "a");
    return wgml_node(ctx, op, a->ndim, a->shape, 1, &a);
}
