/*
 * The elementwise family: unary and binary ops over broadcast operands, fused by the engine
 * into one kernel per chain (engine/fusion.c) from each entry's WGSL expression over the
 * functions of ops/elementwise.wgsl. Its constructors, gradient rules and entries (the double
 * references are the tests', tests/ref/elementwise.c, by op name).
 *
 * Adding an op: its line in ops/elementwise.h (UNARY or BINARY there makes its public
 * constructor wgml_<name> here; the others are written by hand), its entry below with
 * its gradient rule above it, a WGSL function in ops/elementwise.wgsl only when one expression
 * is not enough, its declaration in wgml.h and its reference in tests/ref/elementwise.c (the
 * op-table test fails without one). The tests and Python walk the table (wgml_op_info).
 */
#include "ops/elementwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/build.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- constructors */

wgml_tensor *wgml_detach(wgml_context *ctx, wgml_tensor *a)
{
    CHECK_INPUT(ctx, a, "detach", "a");
    return wgml_node(ctx, WGML_OP_DETACH, a->ndim, a->shape, 1, &a);
}

/* (ops/elementwise.h) If a is read too, it is computed twice, as a matmul's gradient
   recomputes an operand. */
wgml_tensor *wgml_retyped_f16(wgml_context *ctx, wgml_tensor *a)
{
    wgml_tensor *base = wgml_tensor_base(a);
    if (a->op == WGML_OP_VIEW && base != a && a->offset == 0 && a->numel == base->numel && wgml_is_contiguous(a) &&
        wgml_is_contiguous(base)) {
        /* a reshape of such a node (the GPT's d(qkv), the attention's gradient seen as [B, T, 3C]): the
           same reshape of the node storing halves */
        wgml_tensor *b = wgml_retyped_f16(ctx, base);
        if (!b || b->status) return b;
        b->user_held = false; /* only the view's reference keeps it */
        wgml_tensor *t = wgml_view_node(ctx, b, a->ndim, a->shape, a->stride, 0, a->view_kind);
        wgml_tensor_unref(b);
        return t;
    }
    const wgml_op_def *d = wgml_op_table[a->op];
    if (a->op == WGML_OP_NONE || a->op == WGML_OP_VIEW || a->buf || a->dest || a->tape || !d->f16_out ||
        (d->f16_out_if && !d->f16_out_if(ctx, a)))
        return NULL;
    wgml_tensor *t = wgml_node(ctx, (wgml_op)a->op, a->ndim, a->shape, a->nsrc, a->src);
    if (t && !t->status) {
        memcpy(t->params, a->params, sizeof a->params);
        t->op_data = a->op_data;
        t->dtype = WGML_F16;
    }
    return t;
}

wgml_tensor *wgml_cast(wgml_context *ctx, wgml_tensor *a, wgml_dtype dtype)
{
    CHECK_INPUT(ctx, a, "cast", "a");
    if (dtype != WGML_F32 && dtype != WGML_I32 && dtype != WGML_F16)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "cast: dtype %d is not a wgml_dtype", (int)dtype);
    if (a->dtype == (int)dtype) return wgml_view_node(ctx, a, a->ndim, a->shape, a->stride, a->offset, WGML_VIEW_RESHAPE);
    if (dtype == WGML_F16) {
        if (!ctx->rt.info.has_shader_f16)
            return wgml_tensor_error(ctx, WGML_ERROR_UNSUPPORTED, "cast: f16 tensors need the adapter's shader-f16 feature, which %s lacks",
                                     ctx->rt.info.name);
        if (a->dtype == WGML_I32) { /* through f32 (one fused kernel) */
            wgml_tensor *f = wgml_node(ctx, WGML_OP_CAST_F32, a->ndim, a->shape, 1, &a);
            if (!f || f->status) return f;
            f->user_held = false; /* only the cast's reference keeps it */
            wgml_tensor *t = wgml_node(ctx, WGML_OP_CAST_F16, a->ndim, a->shape, 1, &f);
            wgml_tensor_unref(f);
            return t;
        }
        wgml_tensor *t = wgml_retyped_f16(ctx, a);
        return t ? t : wgml_node(ctx, WGML_OP_CAST_F16, a->ndim, a->shape, 1, &a);
    }
    /* from f16: widened to f32; to i32, the f32 -> i32 cast below (its fused kernel reads the
       halves as f32) */
    if (a->dtype == WGML_F16 && dtype == WGML_F32) return wgml_node(ctx, WGML_OP_CAST_F16_TO_F32, a->ndim, a->shape, 1, &a);
    return wgml_node(ctx, dtype == WGML_F32 ? WGML_OP_CAST_F32 : WGML_OP_CAST_I32, a->ndim, a->shape, 1, &a);
}

/* wgml.h's wgml_binary_op names each public binary op as the op list does (WGML_ADD for ADD) */
static const wgml_op binary_ops[] = {
#define WGML_BINARY_OP_OF(e, fn, api) WGML_BINARY_OP_OF_##api(e)
#define WGML_BINARY_OP_OF_BINARY(e) [WGML_##e] = WGML_OP_##e,
#define WGML_BINARY_OP_OF_UNARY(e)
#define WGML_BINARY_OP_OF_NONE(e)
    WGML_ELEMENTWISE_OPS(WGML_BINARY_OP_OF)
#undef WGML_BINARY_OP_OF
};
/* every public code has its op (a line missing from the list would leave a 0, storage) */
_Static_assert(sizeof binary_ops / sizeof *binary_ops == WGML_BINARY_OP_COUNT, "the BINARY ops of WGML_ELEMENTWISE_OPS are the wgml_binary_ops");

wgml_op wgml_binary_api_op(wgml_binary_op op)
{
    return (int)op >= 0 && op < WGML_BINARY_OP_COUNT ? binary_ops[op] : WGML_OP_NONE;
}

static wgml_tensor *compared(wgml_context *ctx, wgml_op op, wgml_tensor *t)
{
    return wgml_op_table[op]->compares && t->dtype == WGML_I32 ? wgml_cast(ctx, t, WGML_F32) : t;
}

wgml_tensor *wgml_binary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *b)
{
    const char *name = wgml_op_table[op]->name;
    CHECK_INPUT(ctx, a, name, "a");
    CHECK_INPUT(ctx, b, name, "b");
    if (wgml_op_table[op]->compares && (a->dtype == WGML_I32 || b->dtype == WGML_I32)) {
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
        wgml_shape_str(s1, sizeof s1, a);
        wgml_shape_str(s2, sizeof s2, b);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: shapes %s and %s do not broadcast", name, s1, s2);
    }
    /* a sum of two tensors of one shape: in the kernel of either operand's op where it can (the
       op table's add_in: a GEMM adds a residual in its epilogue) */
    if (op == WGML_OP_ADD && a->ndim == b->ndim && n == a->ndim && !memcmp(a->shape, b->shape, (size_t)n * sizeof *shape)) {
        wgml_tensor *t = wgml_op_table[b->op]->add_in ? wgml_op_table[b->op]->add_in(ctx, b, a, false) : NULL;
        if (!t && wgml_op_table[a->op]->add_in) t = wgml_op_table[a->op]->add_in(ctx, a, b, false);
        if (t) return t;
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
    CHECK_INPUT(ctx, a, wgml_op_table[o]->name, "a");
    if (wgml_op_table[o]->compares && a->dtype == WGML_I32) {
        wgml_tensor *ca = compared(ctx, o, a), *t = scalar_node(ctx, op, ca, s, side);
        wgml_tensor_free(ca);
        return t;
    }
    wgml_tensor *t = wgml_node(ctx, o, a->ndim, a->shape, 1, &a);
    if (!t) return NULL;
    wgml_elementwise_params_of_set(t, (wgml_elementwise_params){.side = side, .scalar = {s}});
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
#define WGML_PUBLIC_FN(e, fn, api) WGML_PUBLIC_FN_##api(e, fn)
#define WGML_PUBLIC_FN_BINARY(e, fn) \
    wgml_tensor *wgml_##fn(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b) { return wgml_binary_node(ctx, WGML_OP_##e, a, b); }
#define WGML_PUBLIC_FN_UNARY(e, fn) \
    wgml_tensor *wgml_##fn(wgml_context *ctx, wgml_tensor *a) { return wgml_unary_node(ctx, WGML_OP_##e, a); }
#define WGML_PUBLIC_FN_NONE(e, fn)
WGML_ELEMENTWISE_OPS(WGML_PUBLIC_FN)
#undef WGML_PUBLIC_FN

wgml_tensor *wgml_clamp(wgml_context *ctx, wgml_tensor *a, float lo, float hi)
{
    CHECK_INPUT(ctx, a, "clamp", "a");
    if (!(lo <= hi)) /* also false when either bound is NaN */
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "clamp: bounds lo = %g, hi = %g must be numbers with lo <= hi", lo, hi);
    wgml_tensor *t = wgml_unary_node(ctx, WGML_OP_CLAMP, a);
    if (t && t->status == WGML_OK) {
        wgml_elementwise_params_of_set(t, (wgml_elementwise_params){.scalar = {lo, hi}});
    }
    return t;
}

wgml_tensor *wgml_masked_fill(wgml_context *ctx, wgml_tensor *a, wgml_tensor *mask, float value)
{
    wgml_tensor *t = wgml_binary_node(ctx, WGML_OP_MASKED_FILL, a, mask);
    if (t && t->op == WGML_OP_MASKED_FILL) wgml_elementwise_params_of_set(t, (wgml_elementwise_params){.scalar = {value}});
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
        wgml_shape_str(sc, sizeof sc, cond);
        wgml_shape_str(sa, sizeof sa, a);
        wgml_shape_str(sb, sizeof sb, b);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "where: shapes %s, %s and %s do not broadcast", sc, sa, sb);
    }
    if (a->dtype == WGML_I32 || b->dtype == WGML_I32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "where: a is %s and b is %s; where takes f32 or f16 values (wgml_cast converts)",
                                 wgml_dtype_name(a->dtype), wgml_dtype_name(b->dtype));
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

/* ---------------------------------------------------------------- gradient rules */

static T *tanh_grad_factor(wgml_context *c, T *y) /* 1 - y^2 */
{
    return wgml_scalar_binary(c, WGML_SUB, 1.0f, wgml_mul(c, y, y));
}

static T *gelu_grad(wgml_context *c, T *x, T *g)
{
    /* d/dx 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3):
       0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2) */
    const float k = 0.7978845608028654f;
    T *x2 = wgml_mul(c, x, x);
    T *u = wgml_rule_scal(c, WGML_MUL, wgml_add(c, x, wgml_rule_scal(c, WGML_MUL, wgml_mul(c, x2, x), 0.044715f)), k);
    T *t = wgml_tanh(c, u);
    T *left = wgml_rule_scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, t), 0.5f);
    T *du = wgml_rule_scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_rule_scal(c, WGML_MUL, x2, 3 * 0.044715f)), k);
    T *right = wgml_mul(c, wgml_rule_scal(c, WGML_MUL, x, 0.5f), wgml_mul(c, tanh_grad_factor(c, t), du));
    return wgml_mul(c, g, wgml_add(c, left, right));
}

static T *silu_grad(wgml_context *c, T *x, T *g)
{
    /* s (1 + x (1 - s)) */
    T *s = wgml_sigmoid(c, x);
    return wgml_mul(c, g, wgml_mul(c, s, wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_mul(c, x, wgml_scalar_binary(c, WGML_SUB, 1.0f, s)))));
}

static wgml_status vjp_copy(wgml_context *c, T *t, T *g, T **gin) { gin[0] = g; return WGML_OK; }

/* a cast between f32 and f16 passes the gradient through, cast back to the input's dtype (a
   view where it already is: gradients are f32) */
static wgml_status vjp_cast_float(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_cast(c, g, (wgml_dtype)t->src[0]->dtype);
    return WGML_OK;
}

static wgml_status vjp_neg(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_neg(c, g); return WGML_OK; }

static wgml_status vjp_abs(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    gin[0] = wgml_sub(c, wgml_rule_relu_grad(c, a, g), wgml_rule_relu_grad(c, wgml_neg(c, a), g));
    return WGML_OK;
}

static wgml_status vjp_exp(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, t); return WGML_OK; }

static wgml_status vjp_log(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_div(c, g, t->src[0]); return WGML_OK; }

static wgml_status vjp_sqrt(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_div(c, wgml_rule_scal(c, WGML_MUL, g, 0.5f), t); return WGML_OK; }

static wgml_status vjp_rsqrt(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_mul(c, g, wgml_rule_scal(c, WGML_MUL, wgml_mul(c, t, wgml_mul(c, t, t)), -0.5f));
    return WGML_OK;
}

static wgml_status vjp_tanh(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, tanh_grad_factor(c, t)); return WGML_OK; }

static wgml_status vjp_sigmoid(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_mul(c, g, wgml_mul(c, t, wgml_scalar_binary(c, WGML_SUB, 1.0f, t)));
    return WGML_OK;
}

static wgml_status vjp_relu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_rule_relu_grad(c, t->src[0], g); return WGML_OK; }

static wgml_status vjp_gelu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = gelu_grad(c, t->src[0], g); return WGML_OK; }

static wgml_status vjp_silu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = silu_grad(c, t->src[0], g); return WGML_OK; }

static wgml_status vjp_clamp(wgml_context *c, T *t, T *g, T **gin) /* passes where lo < a < hi */
{
    T *a = t->src[0];
    wgml_elementwise_params p = wgml_elementwise_params_of(t);
    gin[0] = wgml_rule_relu_grad(c, wgml_rule_scal(c, WGML_SUB, a, p.scalar[0]), wgml_rule_relu_grad(c, wgml_scalar_binary(c, WGML_SUB, p.scalar[1], a), g));
    return WGML_OK;
}

/* softplus(x) = log(1 + e^x): its derivative is sigmoid(x) */
static wgml_status vjp_softplus(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, wgml_sigmoid(c, t->src[0])); return WGML_OK; }

static wgml_status vjp_erf(wgml_context *c, T *t, T *g, T **gin) /* 2/sqrt(pi) e^(-x^2) */
{
    T *x = t->src[0];
    gin[0] = wgml_mul(c, g, wgml_rule_scal(c, WGML_MUL, wgml_exp(c, wgml_neg(c, wgml_mul(c, x, x))), 1.1283791670955126f));
    return WGML_OK;
}

static T *gelu_exact_grad(wgml_context *c, T *x, T *g) /* g (Phi(x) + x phi(x)) */
{
    T *Phi = wgml_rule_scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_erf(c, wgml_rule_scal(c, WGML_MUL, x, 0.7071067811865476f))), 0.5f);
    T *phi = wgml_rule_scal(c, WGML_MUL, wgml_exp(c, wgml_rule_scal(c, WGML_MUL, wgml_mul(c, x, x), -0.5f)), 0.3989422804014327f);
    return wgml_mul(c, g, wgml_add(c, Phi, wgml_mul(c, x, phi)));
}

/* under mixed precision, where g is a GEMM's result that only this rule reads, the derivative
   goes into that GEMM's epilogue (ops/rules.h) */
static wgml_status vjp_gelu_exact(wgml_context *c, T *t, T *g, T **gin)
{
    T *folded = wgml_rule_matmul_act_grad(c, g, WGML_ACT_GELU_EXACT, t->src[0]);
    gin[0] = folded ? folded : gelu_exact_grad(c, t->src[0], g);
    return WGML_OK;
}

static wgml_status vjp_sin(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, wgml_cos(c, t->src[0])); return WGML_OK; }

static wgml_status vjp_cos(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_neg(c, wgml_mul(c, g, wgml_sin(c, t->src[0]))); return WGML_OK; }

static wgml_status vjp_add(wgml_context *c, T *t, T *g, T **gin)
{
    if (wgml_rule_with_scalar(t)) { gin[0] = g; return WGML_OK; }
    gin[0] = wgml_rule_unbroadcast(c, g, t->src[0]);
    gin[1] = wgml_rule_unbroadcast(c, g, t->src[1]);
    return WGML_OK;
}

static wgml_status vjp_sub(wgml_context *c, T *t, T *g, T **gin)
{
    if (wgml_rule_with_scalar(t)) { gin[0] = wgml_elementwise_params_of(t).side == 1 ? g : wgml_neg(c, g); return WGML_OK; }
    gin[0] = wgml_rule_unbroadcast(c, g, t->src[0]);
    gin[1] = wgml_rule_unbroadcast(c, wgml_neg(c, g), t->src[1]);
    return WGML_OK;
}

static wgml_status vjp_mul(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    if (wgml_rule_with_scalar(t)) { gin[0] = wgml_rule_scal(c, WGML_MUL, g, wgml_elementwise_params_of(t).scalar[0]); return WGML_OK; }
    gin[0] = wgml_rule_unbroadcast(c, wgml_mul(c, g, b), a);
    gin[1] = wgml_rule_unbroadcast(c, wgml_mul(c, g, a), b);
    return WGML_OK;
}

static wgml_status vjp_div(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    if (wgml_rule_with_scalar(t)) {
        wgml_elementwise_params p = wgml_elementwise_params_of(t);
        gin[0] = p.side == 1 ? wgml_rule_scal(c, WGML_DIV, g, p.scalar[0])                   /* a / s */
                                   : wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), a)); /* s / a: -g s/a^2 = -g t / a */
        return WGML_OK;
    }
    gin[0] = wgml_rule_unbroadcast(c, wgml_div(c, g, b), a);
    gin[1] = wgml_rule_unbroadcast(c, wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), b)), b);
    return WGML_OK;
}

static wgml_status vjp_pow(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    wgml_elementwise_params p = wgml_elementwise_params_of(t);
    float s = p.scalar[0];
    if (wgml_rule_with_scalar(t)) {
        gin[0] = p.side == 1 ? wgml_mul(c, g, wgml_rule_scal(c, WGML_MUL, wgml_rule_scal(c, WGML_POW, a, s - 1.0f), s)) /* a^s */
                                   : wgml_mul(c, g, wgml_rule_scal(c, WGML_MUL, t, logf(s)));                     /* s^a */
        return WGML_OK;
    }
    /* d/da = b a^(b-1); d/db = t log a */
    gin[0] = wgml_rule_unbroadcast(c, wgml_mul(c, g, wgml_mul(c, b, wgml_pow(c, a, wgml_rule_scal(c, WGML_SUB, b, 1.0f)))), a);
    gin[1] = wgml_rule_unbroadcast(c, wgml_mul(c, g, wgml_mul(c, t, wgml_log(c, a))), b);
    return WGML_OK;
}

/* maximum and minimum: the gradient goes to the winner; ties to b */
static wgml_status vjp_extremum(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    bool max = t->op == WGML_OP_MAXIMUM;
    if (wgml_rule_with_scalar(t)) {
        float s = wgml_elementwise_params_of(t).scalar[0];
        gin[0] = wgml_rule_relu_grad(c, max ? wgml_rule_scal(c, WGML_SUB, a, s) : wgml_scalar_binary(c, WGML_SUB, s, a), g);
        return WGML_OK;
    }
    T *ga = wgml_rule_relu_grad(c, max ? wgml_sub(c, a, b) : wgml_sub(c, b, a), g);
    gin[0] = wgml_rule_unbroadcast(c, ga, a);
    gin[1] = wgml_rule_unbroadcast(c, wgml_sub(c, g, ga), b);
    return WGML_OK;
}


/* masked_fill(a, mask, value): value where mask != 0 (NaN included); a's gradient passes where
   it is kept */
static wgml_status vjp_masked_fill(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_rule_unbroadcast(c, wgml_masked_fill(c, g, t->src[1], 0.0f), t->src[0]);
    return WGML_OK;
}

/* softsign(x) = x / (1 + |x|); its derivative 1 / (1 + |x|)^2 */
static wgml_status vjp_softsign(wgml_context *c, T *t, T *g, T **gin)
{
    T *d = wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_abs(c, t->src[0]));
    gin[0] = wgml_div(c, g, wgml_mul(c, d, d));
    return WGML_OK;
}

/* ---------------------------------------------------------------- entries */

/*     enum      name          WGSL                          rule          domain        tolerance */
UNARY(COPY,     "contiguous", "%0",                         vjp_copy,     -100, 100,    ARITH, .any_dtype = 1, .out = WGML_OUT_SAME);
/* the value, with no gradient through it (PyTorch's detach): constant to autograd */
UNARY(DETACH,   "detach",     "%0",                         NULL,         -100, 100,    ARITH, .any_dtype = 1,
      .out = WGML_OUT_SAME, .constant = true, .no_grad = "detached");
/* i32 data travels through the kernels as f32 bits: a cast reinterprets, then converts */
WGML_OP_ENTRY(CAST_F32) = {.name = "cast_f32", .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .wgsl = "wgml_i32_to_f32(%0)",
                      .i32_only = 1, .no_grad = "an integer input has no gradient", DOMAIN(-70000, 70000, 0, 0), ARITH};
WGML_OP_ENTRY(CAST_I32) = {.name = "cast_i32", .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .wgsl = "wgml_f32_to_i32(%0)",
                      .out = WGML_OUT_I32, .no_grad = "an integer result has no gradient", .constant = true, DOMAIN(-3e9, 3e9, 0, 0), ARITH};
/* f32 -> f16 (round to nearest even, +-inf from 65520 on: the fused kernel's wgml_round_f16),
   stored as halves; f16 -> f32 is the leaf's exact widening as the fused kernel reads it. The
   test domain stays inside f16's range (overflow and subnormals: tests/test_f16.c) */
WGML_OP_ENTRY(CAST_F16) = {.name = "cast_f16", .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .wgsl = "wgml_round_f16(%0)",
                      .out = WGML_OUT_F16, .vjp = vjp_cast_float, DOMAIN(-60000, 60000, 0, 0), ARITH};
WGML_OP_ENTRY(CAST_F16_TO_F32) = {.name = "cast_f16_to_f32", .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .wgsl = "%0",
                             .vjp = vjp_cast_float, DOMAIN(-60000, 60000, 0, 0), ARITH};
UNARY(NEG,      "neg",        "(-%0)",                      vjp_neg,      -100, 100,    ARITH);
UNARY(ABS,      "abs",        "abs(%0)",                    vjp_abs,      -100, 100,    ARITH);
UNARY(EXP,      "exp",        "exp(%0)",                    vjp_exp,      -20, 20,      TRANSC);
/* log near x = 1 is near 0 and carries the GPU's absolute error (the H100's log: ~2e-7) */
UNARY(LOG,      "log",        "log(%0)",                    vjp_log,      1e-3, 1e3,    TRANSC, FLOOR(1e-2));
UNARY(SQRT,     "sqrt",       "sqrt(%0)",                   vjp_sqrt,     1e-4, 1e4,    TRANSC);
UNARY(RSQRT,    "rsqrt",      "inverseSqrt(%0)",            vjp_rsqrt,    1e-4, 1e4,    TRANSC);
/* WGSL's tanh inherits sinh/cosh's accuracy: ~6e-8 absolute near 0 (3e-4 relative at |x| ~ 1e-4) */
UNARY(TANH,     "tanh",       "wgml_tanh(%0)",              vjp_tanh,     -6, 6,        TRANSC, FLOOR(1e-3));
UNARY(SIGMOID,  "sigmoid",    "wgml_sigmoid(%0)",           vjp_sigmoid,  -15, 15,      TRANSC);
UNARY(RELU,     "relu",       "wgml_relu(%0)",              vjp_relu,     -10, 10,      ARITH);
/* 0.5 x (1 + tanh(u)) cancels for negative x: tanh's ~1e-7 absolute error times 0.5 |x| <= 2.5 */
UNARY(GELU,     "gelu",       "wgml_gelu(%0)",              vjp_gelu,     -5, 5,        TRANSC, FLOOR(1e-2));
UNARY(SILU,     "silu",       "wgml_silu(%0)",              vjp_silu,     -15, 15,      TRANSC);
UNARY(SOFTPLUS, "softplus",   "wgml_softplus(%0)",          vjp_softplus, -30, 30,      TRANSC);
WGML_OP_ENTRY(CLAMP) = {.name = "clamp", .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .nscalars = 2, .wgsl = "wgml_clamp(%0, #0, #1)",
                   .vjp = vjp_clamp, DOMAIN(-3, 3, 0, 0), ARITH};
/* erf's series and A&S 7.1.26 are good to ~1.5e-7 absolute: relative 1e-4 needs a floor
   of 1e-3 near 0 (the GELUs as GELU) */
UNARY(ERF,      "erf",        "wgml_erf(%0)",               vjp_erf,      -4, 4,        TRANSC, FLOOR(1e-3));
UNARY(GELU_EXACT, "gelu_exact", "wgml_gelu_exact(%0)",      vjp_gelu_exact, -5, 5,     TRANSC, FLOOR(1e-2));
/* sin and cos near their zeros carry the argument's rounding and the driver's range
   reduction: 1.1e-6 absolute on the H100 for |x| <= 10 */
UNARY(SIN,      "sin",        "wgml_sin(%0)",               vjp_sin,      -10, 10,      TRANSC, FLOOR(5e-2));
UNARY(COS,      "cos",        "wgml_cos(%0)",               vjp_cos,      -10, 10,      TRANSC, FLOOR(5e-2));
UNARY(SOFTSIGN, "softsign",   "(%0 / (T(1.0) + abs(%0)))",  vjp_softsign, -20, 20,      ARITH);
WGML_OP_ENTRY(RELU_GRAD) = {.name = "relu_grad", .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = "select(T(0.0), %1, %0 > T(0.0))",
                       DOMAIN(-1, 1, -5, 5), ARITH,
                       .no_grad = "made by backward only (no second derivatives)"};
BINARY(ADD,     "add",        "(%0 + %1)",                  vjp_add,      -10, 10, -10, 10, ARITH);
BINARY(SUB,     "sub",        "(%0 - %1)",                  vjp_sub,      -10, 10, -10, 10, ARITH);
BINARY(MUL,     "mul",        "(%0 * %1)",                  vjp_mul,      -10, 10, -10, 10, ARITH);
BINARY(DIV,     "div",        "(%0 / %1)",                  vjp_div,      -10, 10, 0.5, 10, ARITH);
BINARY(POW,     "pow",        "wgml_pow(%0, %1)",           vjp_pow,      0.1, 10, -3, 3,   TRANSC);
BINARY(MAXIMUM, "maximum",    "wgml_maximum(%0, %1)",       vjp_extremum, -10, 10, -10, 10, ARITH);
BINARY(MINIMUM, "minimum",    "wgml_minimum(%0, %1)",       vjp_extremum, -10, 10, -10, 10, ARITH);
/* comparisons: ties and NaN are tested in test_select.c */
#define COMPARE(e, n, w) WGML_OP_ENTRY(e) = {.name = n, .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = w, \
.no_grad = "a mask is constant almost everywhere", .constant = true, .compares = true, DOMAIN(-3, 3, -3, 3), ARITH}
COMPARE(EQ, "eq", "wgml_mask((%0 == %1) & wgml_ordered(%0, %1))");
COMPARE(NE, "ne", "wgml_mask(!((%0 == %1) & wgml_ordered(%0, %1)))");
COMPARE(LT, "lt", "wgml_mask((%0 < %1) & wgml_ordered(%0, %1))");
COMPARE(LE, "le", "wgml_mask((%0 <= %1) & wgml_ordered(%0, %1))");
COMPARE(GT, "gt", "wgml_mask((%0 > %1) & wgml_ordered(%0, %1))");
COMPARE(GE, "ge", "wgml_mask((%0 >= %1) & wgml_ordered(%0, %1))");
/* a binary op of two tensors with one scalar, the value filled in (not in the public binary
   API, so its #0 is never a number operand) */
WGML_OP_ENTRY(MASKED_FILL) = {.name = "masked_fill", .kind = WGML_KIND_BINARY, .arity = 2, .nscalars = 1,
                         .wgsl = "select(%0, #0, wgml_nonzero(%1))", .vjp = vjp_masked_fill,
                         DOMAIN(-10, 10, -1, 1), ARITH};
#undef COMPARE
