/*
 * Building the lazy graph: each op checks its inputs and shapes, then records a node. Bad
 * input gives a tensor in the error state (its message names the op and the shapes); ops on
 * it inherit the error, and reading it returns the status.
 *
 * Views (reshape, permute, broadcast_to, slice) record no work: they share their input's
 * buffer through new strides and an offset.
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

static void shape_str(char *out, size_t n, const wgml_tensor *t)
{
    wgml_format_shape(out, n, t->ndim, t->shape);
}

wgml_tensor *wgml_node(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc,
                       wgml_tensor *const *src)
{
    /* the dtypes the entry takes (ops.h) */
    const wgml_op_def *d = &wgml_op_table[op];
    for (int i = 0; i < nsrc; i++) {
        int want = d->i32_only >> i & 1 ? WGML_I32 : WGML_F32;
        if (!(d->any_dtype >> i & 1) && src[i]->dtype != want)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: operand %d is %s; %s takes %s there%s", d->name, i,
                                     wgml_dtype_name(src[i]->dtype), d->name, wgml_dtype_name(want),
                                     " (wgml_cast converts)");
    }
    wgml_tensor *t = wgml_tensor_new(ctx, ndim, shape);
    if (!t) return NULL;
    ctx->settle_readers = wgml_settle_readers; /* pending results exist from now on */
    t->dtype = d->out == WGML_OUT_I32 ? WGML_I32 : d->out == WGML_OUT_SAME && nsrc ? src[0]->dtype : WGML_F32;
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
static wgml_tensor *make_view(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape,
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
    if (wgml_is_contiguous(a)) return make_view(ctx, a, a->ndim, a->shape, a->stride, a->offset, WGML_VIEW_RESHAPE);
    return wgml_node(ctx, WGML_OP_COPY, a->ndim, a->shape, 1, &a);
}

wgml_tensor *wgml_detach(wgml_context *ctx, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, "detach", "a");
    return wgml_node(ctx, WGML_OP_DETACH, a->ndim, a->shape, 1, &a);
}

wgml_tensor *wgml_cast(wgml_context *ctx, wgml_tensor *a, wgml_dtype dtype)
{
    CHECK_INPUT(ctx, a, "cast", "a");
    if (dtype != WGML_F32 && dtype != WGML_I32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "cast: dtype %d is not a wgml_dtype", (int)dtype);
    if (a->dtype == (int)dtype) return make_view(ctx, a, a->ndim, a->shape, a->stride, a->offset, WGML_VIEW_RESHAPE);
    return wgml_node(ctx, dtype == WGML_F32 ? WGML_OP_CAST_F32 : WGML_OP_CAST_I32, a->ndim, a->shape, 1, &a);
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

wgml_tensor *wgml_reshape(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape)
{
    CHECK_INPUT(ctx, a, "reshape", "a");
    int64_t numel;
    if (wgml_shape_check(ctx, ndim, shape, &numel) != WGML_OK)
        return wgml_tensor_error(ctx, ctx->rt.status, "reshape: %s", ctx->rt.message);
    if (numel != a->numel) {
        char s1[128], s2[128];
        shape_str(s1, sizeof s1, a);
        wgml_format_shape(s2, sizeof s2, ndim, shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "reshape: %s has %lld elements, %s has %lld",
                                 s1, (long long)a->numel, s2, (long long)numel);
    }
    wgml_tensor *c = wgml_as_contiguous(ctx, a);
    if (!c) return NULL;
    int64_t stride[WGML_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) { stride[i] = s; s *= shape[i]; }
    wgml_tensor *t = make_view(ctx, c, ndim, shape, stride, c->offset, WGML_VIEW_RESHAPE);
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
    wgml_tensor *t = make_view(ctx, a, a->ndim, shape, stride, a->offset, WGML_VIEW_PERMUTE);
    if (t) memcpy(t->iparam, axes, (size_t)a->ndim * sizeof *axes);
    return t;
}

wgml_tensor *wgml_transpose(wgml_context *ctx, wgml_tensor *a, int axis0, int axis1)
{
    CHECK_INPUT(ctx, a, "transpose", "a");
    int i = wgml_axis(axis0, a->ndim), j = wgml_axis(axis1, a->ndim);
    if (i < 0 || i >= a->ndim || j < 0 || j >= a->ndim) {
        char s[128];
        shape_str(s, sizeof s, a);
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
        shape_str(s1, sizeof s1, a);
        wgml_format_shape(s2, sizeof s2, ndim, shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "broadcast_to: %s does not broadcast to %s", s1, s2);
    }
    return make_view(ctx, a, ndim, shape, stride, a->offset, WGML_VIEW_BROADCAST);
}

wgml_tensor *wgml_slice(wgml_context *ctx, wgml_tensor *a, int axis, int64_t start, int64_t stop,
                        int64_t step)
{
    CHECK_INPUT(ctx, a, "slice", "a");
    int ax = wgml_axis(axis, a->ndim);
    char s[128];
    shape_str(s, sizeof s, a);
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
    wgml_tensor *t = make_view(ctx, a, a->ndim, shape, stride, a->offset + start * a->stride[ax], WGML_VIEW_SLICE);
    if (t) { /* for the gradient: strides cannot tell them where a is broadcast. They fit int32
                (kernels address elements with u32); a step matters only between two elements */
        t->iparam[0] = ax;
        t->iparam[1] = (int32_t)start;
        t->iparam[2] = (int32_t)step;
    }
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

/* wgml.h's wgml_binary_op names each public binary op as the op list does (WGML_ADD for ADD) */
static const wgml_op binary_ops[] = {
#define WGML_BINARY_OP_OF(e, fn) [WGML_##e] = WGML_OP_##e,
    WGML_BINARY_API(WGML_BINARY_OP_OF)
#undef WGML_BINARY_OP_OF
};

wgml_op wgml_binary_api_op(wgml_binary_op op)
{
    return (int)op >= 0 && op < WGML_BINARY_OP_COUNT ? binary_ops[op] : WGML_OP_NONE;
}

/* comparisons take i32 operands too, as their f32 values (exact below 2^24): argmax against
   labels is the usual accuracy check. t itself when it needs no cast; the caller frees a cast */
static bool is_comparison(wgml_op op) { return op >= WGML_OP_EQ && op <= WGML_OP_GE; }
static wgml_tensor *compared(wgml_context *ctx, wgml_op op, wgml_tensor *t)
{
    return is_comparison(op) && t->dtype == WGML_I32 ? wgml_cast(ctx, t, WGML_F32) : t;
}

wgml_tensor *wgml_binary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *b)
{
    const char *name = wgml_op_table[op].name;
    CHECK_INPUT(ctx, a, name, "a");
    CHECK_INPUT(ctx, b, name, "b");
    if (is_comparison(op) && (a->dtype == WGML_I32 || b->dtype == WGML_I32)) {
        wgml_tensor *ca = compared(ctx, op, a), *cb = compared(ctx, op, b);
        wgml_tensor *t = wgml_binary_node(ctx, op, ca, cb);
        if (ca != a) wgml_tensor_free(ca);
        if (cb != b) wgml_tensor_free(cb);
        return t;
    }
    int64_t shape[WGML_MAX_DIMS];
    int n = wgml_broadcast_shapes(a, b, shape);
    if (n < 0) {
        char s1[128], s2[128];
        shape_str(s1, sizeof s1, a);
        shape_str(s2, sizeof s2, b);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: shapes %s and %s do not broadcast", name, s1, s2);
    }
    wgml_tensor *src[2] = {a, b};
    return wgml_node(ctx, op, n, shape, 2, src);
}

wgml_tensor *wgml_binary(wgml_context *ctx, wgml_binary_op op, wgml_tensor *a, wgml_tensor *b)
{
    if ((int)op < 0 || op >= WGML_BINARY_OP_COUNT)
        return ctx ? wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "binary: unknown op %d", (int)op) : NULL;
    return wgml_binary_node(ctx, binary_ops[op], a, b);
}

/* op(a, s) for side 1, op(s, a) for side 2 */
static wgml_tensor *scalar_node(wgml_context *ctx, wgml_binary_op op, wgml_tensor *a, float s, int side)
{
    if ((int)op < 0 || op >= WGML_BINARY_OP_COUNT)
        return ctx ? wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "binary: unknown op %d", (int)op) : NULL;
    wgml_op o = binary_ops[op];
    CHECK_INPUT(ctx, a, wgml_op_table[o].name, "a");
    if (is_comparison(o) && a->dtype == WGML_I32) {
        wgml_tensor *ca = compared(ctx, o, a), *t = scalar_node(ctx, op, ca, s, side);
        wgml_tensor_free(ca);
        return t;
    }
    wgml_tensor *t = wgml_node(ctx, o, a->ndim, a->shape, 1, &a);
    if (!t) return NULL;
    t->iparam[0] = side;
    t->fparam[0] = s;
    return t;
}

wgml_tensor *wgml_binary_scalar(wgml_context *ctx, wgml_binary_op op, wgml_tensor *a, float s)
{
    return scalar_node(ctx, op, a, s, 1);
}

wgml_tensor *wgml_scalar_binary(wgml_context *ctx, wgml_binary_op op, float s, wgml_tensor *a)
{
    return scalar_node(ctx, op, a, s, 2);
}


/* the public constructors of the elementwise ops: wgml_add(ctx, a, b), wgml_gelu(ctx, a)... */
#define WGML_BINARY_FN(e, fn) \
    wgml_tensor *wgml_##fn(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b) { return wgml_binary_node(ctx, WGML_OP_##e, a, b); }
WGML_BINARY_API(WGML_BINARY_FN)
#undef WGML_BINARY_FN

wgml_tensor *wgml_unary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, wgml_op_table[op].name, "a");
    return wgml_node(ctx, op, a->ndim, a->shape, 1, &a);
}


#define WGML_UNARY_FN(e, fn) \
    wgml_tensor *wgml_##fn(wgml_context *ctx, wgml_tensor *a) { return wgml_unary_node(ctx, WGML_OP_##e, a); }
WGML_UNARY_API(WGML_UNARY_FN)
#undef WGML_UNARY_FN

wgml_tensor *wgml_clamp(wgml_context *ctx, wgml_tensor *a, float lo, float hi)
{
    CHECK_INPUT(ctx, a, "clamp", "a");
    if (!(lo <= hi)) /* also false when either bound is NaN */
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "clamp: bounds lo = %g, hi = %g must be numbers with lo <= hi", lo, hi);
    wgml_tensor *t = wgml_unary_node(ctx, WGML_OP_CLAMP, a);
    if (t && t->status == WGML_OK) {
        t->fparam[0] = lo;
        t->fparam[1] = hi;
    }
    return t;
}

/* ---------------------------------------------------------------- selection and masks */

wgml_tensor *wgml_masked_fill(wgml_context *ctx, wgml_tensor *a, wgml_tensor *mask, float value)
{
    wgml_tensor *t = wgml_binary_node(ctx, WGML_OP_MASKED_FILL, a, mask);
    if (t && t->op == WGML_OP_MASKED_FILL) t->fparam[0] = value;
    return t;
}

/* a where cond, plus b where not: each side's other elements are replaced (not multiplied)
   by 0, so an inf or NaN on the side not chosen never reaches the result; four elementwise
   nodes that fuse into one kernel */
wgml_tensor *wgml_where(wgml_context *ctx, wgml_tensor *cond, wgml_tensor *a, wgml_tensor *b)
{
    CHECK_INPUT(ctx, cond, "where", "cond");
    CHECK_INPUT(ctx, a, "where", "a");
    CHECK_INPUT(ctx, b, "where", "b");
    int64_t s1[WGML_MAX_DIMS], s2[WGML_MAX_DIMS];
    if (wgml_broadcast_shapes(cond, a, s1) < 0 || wgml_broadcast_shapes(cond, b, s2) < 0 || wgml_broadcast_shapes(a, b, s1) < 0) {
        char sc[128], sa[128], sb[128];
        shape_str(sc, sizeof sc, cond);
        shape_str(sa, sizeof sa, a);
        shape_str(sb, sizeof sb, b);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "where: shapes %s, %s and %s do not broadcast", sc, sa, sb);
    }
    wgml_scope_begin(ctx);
    if (cond->dtype == WGML_I32) cond = wgml_cast(ctx, cond, WGML_F32); /* nonzero ints stay nonzero */
    wgml_tensor *not_cond = wgml_binary_scalar(ctx, WGML_EQ, cond, 0.0f);
    wgml_tensor *t = wgml_add(ctx, wgml_masked_fill(ctx, a, not_cond, 0.0f), wgml_masked_fill(ctx, b, cond, 0.0f));
    wgml_keep(t);
    wgml_scope_end(ctx);
    return t;
}

wgml_tensor *wgml_arange(wgml_context *ctx, int64_t start, int64_t stop, wgml_dtype dtype)
{
    if (!ctx) return NULL;
    if (!(start < stop) || start < INT32_MIN || stop - 1 > INT32_MAX || (dtype != WGML_F32 && dtype != WGML_I32))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "arange: [%lld, %lld) of dtype %d must be non-empty, within i32, of f32 or i32",
                                 (long long)start, (long long)stop, (int)dtype);
    int64_t n = stop - start;
    char what[96];
    snprintf(what, sizeof what, "arange of %lld values", (long long)n);
    if (wgml_check_buffer_size(ctx, (uint64_t)n * 4, what)) return wgml_tensor_error(ctx, ctx->rt.status, "%s", ctx->rt.message);
    void *v = malloc((size_t)n * 4);
    if (!v) return wgml_tensor_error(ctx, WGML_ERROR_OUT_OF_MEMORY, "arange: out of host memory for %lld values", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == WGML_I32) ((int32_t *)v)[i] = (int32_t)(start + i);
        else ((float *)v)[i] = (float)(start + i);
    }
    wgml_tensor *t = NULL;
    wgml_status st = dtype == WGML_I32 ? wgml_tensor_from_i32(ctx, 1, &n, v, (size_t)n, &t)
                                       : wgml_tensor_from_data(ctx, 1, &n, v, (size_t)n, &t);
    free(v);
    return st ? wgml_tensor_error(ctx, st, "arange: %s", wgml_error_message(ctx)) : t;
}

wgml_tensor *wgml_causal_mask(wgml_context *ctx, int64_t t, int64_t s)
{
    if (!ctx) return NULL;
    if (t < 1 || s < t || s > (1 << 24))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "causal_mask: %lld queries over %lld keys: want 1 <= queries <= keys <= 2^24",
                                 (long long)t, (long long)s);
    wgml_scope_begin(ctx);
    int64_t col[2] = {t, 1};
    wgml_tensor *query = wgml_reshape(ctx, wgml_arange(ctx, s - t, s, WGML_F32), 2, col); /* each query's position */
    wgml_tensor *m = wgml_gt(ctx, wgml_arange(ctx, 0, s, WGML_F32), query);
    wgml_keep(m);
    wgml_scope_end(ctx);
    return m;
}

/* ---------------------------------------------------------------- reductions */

static wgml_tensor *reduce(wgml_context *ctx, wgml_op op, wgml_tensor *a, int axis, int keepdim)
{
    const char *name = wgml_op_table[op].name;
    CHECK_INPUT(ctx, a, name, "a");
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0 || ax >= a->ndim) {
        char s[128];
        shape_str(s, sizeof s, a);
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
    if (t) t->iparam[0] = ax;
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
    CHECK_INPUT(ctx, a, wgml_op_table[op].name, "a");
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
        shape_str(s, sizeof s, a);
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

/* ---------------------------------------------------------------- along the last axis */

static wgml_tensor *row_op(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *weight,
                           wgml_tensor *bias, float eps)
{
    const char *name = wgml_op_table[op].name;
    CHECK_INPUT(ctx, a, name, "a");
    if (weight) CHECK_INPUT(ctx, weight, name, "weight");
    if (bias) CHECK_INPUT(ctx, bias, name, "bias");
    if (!(eps >= 0)) /* NaN fails too */
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: eps = %g must be >= 0", name, eps);
    int64_t n = a->shape[a->ndim - 1];
    wgml_tensor *params[2] = {weight, bias};
    for (int i = 0; i < 2; i++)
        if (params[i] && (params[i]->ndim != 1 || params[i]->shape[0] != n)) {
            char s1[128], s2[128];
            shape_str(s1, sizeof s1, a);
            shape_str(s2, sizeof s2, params[i]);
            return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: %s %s must be [%lld] for input %s", name,
                                     i ? "bias" : "weight", s2, (long long)n, s1);
        }
    wgml_tensor *src[3];
    int nsrc = 0;
    src[nsrc++] = wgml_as_contiguous(ctx, a);
    if (weight) src[nsrc++] = wgml_as_contiguous(ctx, weight);
    if (bias) src[nsrc++] = wgml_as_contiguous(ctx, bias);
    for (int i = 0; i < nsrc; i++)
        if (!src[i]) {
            for (int j = 0; j < nsrc; j++) wgml_tensor_unref(src[j]);
            return NULL;
        }
    wgml_tensor *t = wgml_node_consuming(ctx, op, a->ndim, a->shape, nsrc, src);
    if (t) {
        t->iparam[0] = weight != NULL;
        t->iparam[1] = bias != NULL;
        t->fparam[0] = eps;
    }
    return t;
}

wgml_tensor *wgml_softmax(wgml_context *ctx, wgml_tensor *a) { return row_op(ctx, WGML_OP_SOFTMAX, a, NULL, NULL, 0); }
wgml_tensor *wgml_log_softmax(wgml_context *ctx, wgml_tensor *a) { return row_op(ctx, WGML_OP_LOG_SOFTMAX, a, NULL, NULL, 0); }
wgml_tensor *wgml_layernorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight, wgml_tensor *bias, float eps)
{
    return row_op(ctx, WGML_OP_LAYERNORM, a, weight, bias, eps);
}
wgml_tensor *wgml_rmsnorm(wgml_context *ctx, wgml_tensor *a, wgml_tensor *weight, float eps)
{
    return row_op(ctx, WGML_OP_RMSNORM, a, weight, NULL, eps);
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
        t->iparam[0] = w != NULL;
        t->fparam[0] = eps;
    }
    return t;
}

/* ---------------------------------------------------------------- losses */

/* logits [B, C], labels [B] (class indices as floats) -> per-row losses [B] */
wgml_tensor *wgml_cross_entropy_rows(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels)
{
    if (!ctx) return NULL;
    if (!wgml_tensor_valid(logits) || !wgml_tensor_valid(labels))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "cross_entropy: logits and labels must be given");
    if (logits->status) return wgml_tensor_error(ctx, logits->status, "%s", logits->error);
    if (labels->status) return wgml_tensor_error(ctx, labels->status, "%s", labels->error);
    if (logits->ctx != ctx || labels->ctx != ctx)
        return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "cross_entropy: a tensor belongs to another context");
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        char s1[128], s2[128];
        wgml_format_shape(s1, sizeof s1, logits->ndim, logits->shape);
        wgml_format_shape(s2, sizeof s2, labels->ndim, labels->shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "cross_entropy: logits %s must be [B, C] and labels %s [B]", s1, s2);
    }
    if (labels->dtype == WGML_I32) { /* host labels are checked here, as gather's indices */
        wgml_tensor *bad = wgml_check_indices(ctx, "cross_entropy", labels, logits->shape[1], "the classes");
        if (bad) return bad;
    }
    /* class indices as i32, or as whole floats */
    wgml_tensor *src[2] = {wgml_contiguous(ctx, logits),
                           labels->dtype == WGML_I32 ? wgml_cast(ctx, labels, WGML_F32) : wgml_contiguous(ctx, labels)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY, 1, logits->shape, 2, src);
    wgml_tensor_free(src[0]);
    wgml_tensor_free(src[1]);
    return t;
}

/* d loss_rows / d logits, times the upstream gradient of each row g [B] */
wgml_tensor *wgml_cross_entropy_grad(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels, wgml_tensor *g)
{
    wgml_tensor *src[3] = {logits, labels, wgml_contiguous(ctx, g)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY_GRAD, 2, logits->shape, 3, src);
    wgml_tensor_free(src[2]);
    return t;
}
