/*
 * Views: reshape, permute, transpose, broadcast_to and slice record no work; they share their
 * input's buffer through new strides and an offset (engine/build.h's wgml_view_node), and
 * their gradient goes back by the movement that made them. The storage and view entries.
 */
#include "ops/views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- constructors */

wgml_tensor *wgml_reshape(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape)
{
    CHECK_INPUT(ctx, a, "reshape", "a");
    int64_t numel;
    if (wgml_shape_check(ctx, ndim, shape, &numel) != WGML_OK)
        return wgml_tensor_error(ctx, ctx->rt.status, "reshape: %s", ctx->rt.message);
    if (numel != a->numel) {
        char s1[128], s2[128];
        wgml_shape_str(s1, sizeof s1, a);
        wgml_format_shape(s2, sizeof s2, ndim, shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "reshape: %s has %lld elements, %s has %lld",
                                 s1, (long long)a->numel, s2, (long long)numel);
    }
    wgml_tensor *c = wgml_as_contiguous(ctx, a);
    if (!c) return NULL;
    int64_t stride[WGML_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) { stride[i] = s; s *= shape[i]; }
    wgml_tensor *t = wgml_view_node(ctx, c, ndim, shape, stride, c->offset, WGML_VIEW_RESHAPE);
    wgml_tensor_unref(c);
    return t;
}

wgml_tensor *wgml_permute(wgml_context *ctx, wgml_tensor *a, const int *axes)
{
    CHECK_INPUT(ctx, a, "permute", "a");
    if (!axes) return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "permute: axes is NULL");
    int seen[WGML_MAX_DIMS] = {0};
    int64_t shape[WGML_MAX_DIMS], stride[WGML_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
        int ax = axes[i];
        if (ax < 0 || ax >= a->ndim || seen[ax]++)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                     "permute: axes are not a permutation of 0..%d", a->ndim - 1);
        shape[i] = a->shape[ax];
        stride[i] = a->stride[ax];
    }
    wgml_tensor *t = wgml_view_node(ctx, a, a->ndim, shape, stride, a->offset, WGML_VIEW_PERMUTE);
    if (t) {
        wgml_view_params p = {.axis = 0};
        for (int i = 0; i < a->ndim; i++) p.axes[i] = axes[i];
        wgml_view_params_of_set(t, p);
    }
    return t;
}

wgml_tensor *wgml_transpose(wgml_context *ctx, wgml_tensor *a, int axis0, int axis1)
{
    CHECK_INPUT(ctx, a, "transpose", "a");
    int i = wgml_axis(axis0, a->ndim), j = wgml_axis(axis1, a->ndim);
    if (i < 0 || i >= a->ndim || j < 0 || j >= a->ndim) {
        char s[128];
        wgml_shape_str(s, sizeof s, a);
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "transpose: axes %d and %d are out of range for shape %s", axis0, axis1, s);
    }
    int axes[WGML_MAX_DIMS] = {0, 1, 2, 3};
    axes[i] = j;
    axes[j] = i;
    return wgml_permute(ctx, a, axes);
}

wgml_tensor *wgml_broadcast_to(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape)
{
    CHECK_INPUT(ctx, a, "broadcast_to", "a");
    int64_t numel;
    if (wgml_shape_check(ctx, ndim, shape, &numel) != WGML_OK)
        return wgml_tensor_error(ctx, ctx->rt.status, "broadcast_to: %s", ctx->rt.message);
    int64_t stride[WGML_MAX_DIMS];
    int pad = ndim - a->ndim;
    for (int d = 0; d < ndim; d++) {
        int sd = d - pad;
        if (sd >= 0 && a->shape[sd] != shape[d] && a->shape[sd] != 1) pad = -1;
        if (pad < 0) break;
        stride[d] = (sd < 0 || a->shape[sd] == 1) ? 0 : a->stride[sd];
    }
    if (pad < 0) {
        char s1[128], s2[128];
        wgml_shape_str(s1, sizeof s1, a);
        wgml_format_shape(s2, sizeof s2, ndim, shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "broadcast_to: %s does not broadcast to %s", s1, s2);
    }
    return wgml_view_node(ctx, a, ndim, shape, stride, a->offset, WGML_VIEW_BROADCAST);
}

wgml_tensor *wgml_slice(wgml_context *ctx, wgml_tensor *a, int axis, int64_t start, int64_t stop,
                        int64_t step)
{
    CHECK_INPUT(ctx, a, "slice", "a");
    int ax = wgml_axis(axis, a->ndim);
    char s[128];
    wgml_shape_str(s, sizeof s, a);
    if (ax < 0 || ax >= a->ndim)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "slice: axis %d is out of range for shape %s", axis, s);
    /* no arithmetic on the arguments before this check: any int64 start, stop, step is safe */
    if (step < 1 || start < 0 || stop > a->shape[ax] || start >= stop)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "slice: [%lld:%lld:%lld] on axis %d of shape %s is empty or out of range",
                                 (long long)start, (long long)stop, (long long)step, ax, s);
    int64_t shape[WGML_MAX_DIMS], stride[WGML_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    memcpy(stride, a->stride, sizeof stride);
    /* ceil((stop - start) / step) without forming stop - start + step - 1, which overflows for
       a huge step; 0 <= start < stop <= dim here */
    shape[ax] = (stop - start - 1) / step + 1;
    /* a step larger than the axis leaves one element, whose stride is never used: keep it from
       overflowing */
    if (shape[ax] == 1) step = 1;
    stride[ax] = a->stride[ax] * step;
    wgml_tensor *t = wgml_view_node(ctx, a, a->ndim, shape, stride, a->offset + start * a->stride[ax], WGML_VIEW_SLICE);
    if (t) { /* for the gradient: strides cannot tell them where a is broadcast. They fit int32
                (kernels address elements with u32); a step matters only between two elements */
        wgml_view_params_of_set(t, (wgml_view_params){.axis = ax, .start = (int32_t)start, .step = (int32_t)step});
    }
    return t;
}

/* ---------------------------------------------------------------- gradient rules */

/* g [outer, len, inner] into slot `slot` of a new axis of `size` right before (before) or
   after its middle axis, zeros in the other slots, flattened back to [outer, size * len, inner]
   (before) or [outer, len * size, inner]: one elementwise pass over the result, whose shape
   comes from the broadcast against an uploaded one-hot */
static T *spread(wgml_context *c, T *g, int64_t outer, int64_t len, int64_t inner, int64_t size, int64_t slot, bool before)
{
    float *hot = calloc((size_t)size, sizeof *hot);
    if (!hot) return wgml_tensor_error(c, WGML_ERROR_OUT_OF_MEMORY, "backward: out of host memory");
    hot[slot] = 1.0f;
    int64_t hs[3] = {size, 1, 1}, gs[4] = {outer, before ? 1 : len, before ? len : 1, inner};
    T *h = NULL;
    wgml_status st = wgml_tensor_from_data(c, before ? 3 : 2, hs, hot, (size_t)size, &h);
    free(hot);
    if (st) return wgml_tensor_error(c, st, "backward: %s", wgml_error_message(c));
    int64_t flat[3] = {outer, size * len, inner};
    return wgml_reshape(c, wgml_rule_relu_grad(c, h, wgml_reshape(c, g, 4, gs)), 3, flat);
}

/* The gradient of x[start : start + m * step : step] along `axis`, where g is [..., m, ...]:
   g's elements step apart (spread after), then whole blocks of zeros before and after (spread
   before), and a view of x's shape on that, its window along the axis placing g's first
   element at start. Linear in x's size, where a scatter through a selection matrix is not. */
static T *slice_grad(wgml_context *c, T *g, const T *x, int axis, int64_t start, int64_t step)
{
    int64_t outer = 1, inner = 1, len = g->shape[axis], shape[WGML_MAX_DIMS];
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
    if (step > 1) g = spread(c, g, outer, len, inner, step, 0, false), len *= step;
    int64_t first = (start + len - 1) / len, off = first * len - start, blocks = (off + x->shape[axis] + len - 1) / len;
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = blocks * len;
    T *z = wgml_reshape(c, spread(c, g, outer, len, inner, blocks, first, true), x->ndim, shape);
    return wgml_slice(c, z, axis, off, off + x->shape[axis], 1);
}

/* to the view's input (src[1]), by the movement that made it */
static wgml_status vjp_view(wgml_context *c, T *t, T *g, T **gin)
{
    T *in = t->src[1];
    switch (t->view_kind) {
    case WGML_VIEW_RESHAPE: gin[1] = wgml_reshape(c, g, in->ndim, in->shape); return WGML_OK;
    case WGML_VIEW_PERMUTE: {
        int inv[WGML_MAX_DIMS];
        wgml_view_params p = wgml_view_params_of(t);
        for (int i = 0; i < t->ndim; i++) inv[p.axes[i]] = i;
        gin[1] = wgml_permute(c, g, inv);
        return WGML_OK;
    }
    case WGML_VIEW_BROADCAST: gin[1] = wgml_rule_unbroadcast(c, g, in); return WGML_OK;
    case WGML_VIEW_SLICE: {
        wgml_view_params p = wgml_view_params_of(t);
        gin[1] = slice_grad(c, g, in, p.axis, p.start, p.step);
        return WGML_OK;
    }
    default:
        return wgml_fail(c, WGML_ERROR_UNSUPPORTED, "backward: no gradient rule for this view");
    }
}

/* ---------------------------------------------------------------- entries */

WGML_OP_ENTRY(NONE) = {.name = "storage", .kind = WGML_KIND_STORAGE, .no_grad = "a leaf"};
WGML_OP_ENTRY(VIEW) = {.name = "view", .kind = WGML_KIND_VIEW, .arity = 2, .vjp = vjp_view, .any_dtype = 3, .out = WGML_OUT_SAME};
