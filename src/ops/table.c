/*
 * The op table (see ops.h): each op's entry, with the gradient rules and reference adapters
 * it points at written above it, a section per kind.
 *
 * A gradient rule builds lazy nodes from the node t, its inputs and the gradient g of its
 * output (matmul backward is the transposed-operand GEMM, never the host); shapes are t's.
 */
#include "engine/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "cpu/ref.h"
#include "ops/attention/attention.h"
#include "engine/build.h"
#include "engine/executor.h"
#include "ops/random.h"
#include "ops/gather.h"
#include "ops/join.h"
#include "ops/scan.h"
#include "ops/reduce.h"
#include "ops/matmul/matmul.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- helpers of the rules */

static T *scal(wgml_context *c, wgml_binary_op op, T *a, float s) { return wgml_binary_scalar(c, op, a, s); }

/* Sums g down to the shape of `like` (undoing NumPy broadcasting). */
static T *unbroadcast(wgml_context *c, T *g, const T *like)
{
    while (g->ndim > like->ndim) g = wgml_sum(c, g, 0, 0);
    for (int d = 0; d < like->ndim; d++)
        if (like->shape[d] == 1 && g->shape[d] != 1) g = wgml_sum(c, g, d, 1);
    return g;
}

/* g reshaped to x's shape with the reduced axis kept (size 1), then broadcast to x */
static T *expand_reduced(wgml_context *c, T *g, const T *x, int axis)
{
    int64_t shape[WGML_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = 1;
    return wgml_broadcast_to(c, wgml_reshape(c, g, x->ndim, shape), x->ndim, x->shape);
}

/* mask(x > 0) * g */
static T *relu_grad(wgml_context *c, T *x, T *g) { return wgml_binary_node(c, WGML_OP_RELU_GRAD, x, g); }

/* 1 where x > 0, else 0: relu_grad with the constant 1 for g (a scalar operand, as in
   wgml_binary_scalar), so no mask is ever multiplied into a NaN or an infinity */
static T *positive(wgml_context *c, T *x)
{
    if (!x || x->status) return x;
    T *t = wgml_node(c, WGML_OP_RELU_GRAD, x->ndim, x->shape, 1, &x);
    if (t) t->iparam[0] = 1, t->fparam[0] = 1.0f;
    return t;
}

/* g [..., n] summed over every row to [n] (a bias's or a norm weight's gradient) */
static T *sum_rows(wgml_context *c, T *g)
{
    int64_t n = g->shape[g->ndim - 1], shape2[2] = {g->numel / n, n};
    return wgml_sum(c, wgml_reshape(c, g, 2, shape2), 0, 0);
}

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
    return wgml_reshape(c, relu_grad(c, h, wgml_reshape(c, g, 4, gs)), 3, flat);
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
    T *u = scal(c, WGML_MUL, wgml_add(c, x, scal(c, WGML_MUL, wgml_mul(c, x2, x), 0.044715f)), k);
    T *t = wgml_tanh(c, u);
    T *left = scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, t), 0.5f);
    T *du = scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, scal(c, WGML_MUL, x2, 3 * 0.044715f)), k);
    T *right = wgml_mul(c, scal(c, WGML_MUL, x, 0.5f), wgml_mul(c, tanh_grad_factor(c, t), du));
    return wgml_mul(c, g, wgml_add(c, left, right));
}

static T *silu_grad(wgml_context *c, T *x, T *g)
{
    /* s (1 + x (1 - s)) */
    T *s = wgml_sigmoid(c, x);
    return wgml_mul(c, g, wgml_mul(c, s, wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_mul(c, x, wgml_scalar_binary(c, WGML_SUB, 1.0f, s)))));
}


/* A binary node given a number instead of its second operand: side 1 is a op s, else s op a */
static bool with_scalar(const T *t) { return wgml_op_table[t->op].kind == WGML_KIND_BINARY && t->nsrc == 1; }

/* ---------------------------------------------------------------- elementwise, unary */

#define REF1(f) static double ref_##f(const double *in) { return wgml_ref_##f(in[0]); }
REF1(neg) REF1(abs) REF1(exp) REF1(log) REF1(sqrt) REF1(rsqrt) REF1(tanh) REF1(sigmoid) REF1(relu) REF1(gelu) REF1(silu)
#define REF2(f) static double ref_##f(const double *in) { return wgml_ref_##f(in[0], in[1]); }
REF2(add) REF2(sub) REF2(mul) REF2(div) REF2(pow) REF2(maximum) REF2(minimum)
static double ref_copy(const double *in) { return in[0]; }
static double ref_clamp(const double *in) { return wgml_ref_clamp(in[0], in[1], in[2]); }
static double ref_relu_grad(const double *in) { return in[0] > 0 ? in[1] : 0.0; }
/* i32 -> f32 rounds to nearest past 2^24; f32 -> i32 truncates, saturates, NaN gives 0 */
static double ref_cast_f32(const double *in) { return (double)(float)in[0]; }
static double ref_cast_i32(const double *in)
{
    double x = in[0];
    return isnan(x) ? 0.0 : x <= -2147483648.0 ? -2147483648.0 : x >= 2147483520.0 ? 2147483520.0 : trunc(x);
}

static wgml_status vjp_copy(wgml_context *c, T *t, T *g, T **gin) { gin[0] = g; return WGML_OK; }
static wgml_status vjp_neg(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_neg(c, g); return WGML_OK; }
static wgml_status vjp_abs(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    gin[0] = wgml_sub(c, relu_grad(c, a, g), relu_grad(c, wgml_neg(c, a), g));
    return WGML_OK;
}
static wgml_status vjp_exp(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, t); return WGML_OK; }
static wgml_status vjp_log(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_div(c, g, t->src[0]); return WGML_OK; }
static wgml_status vjp_sqrt(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_div(c, scal(c, WGML_MUL, g, 0.5f), t); return WGML_OK; }
static wgml_status vjp_rsqrt(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_mul(c, g, scal(c, WGML_MUL, wgml_mul(c, t, wgml_mul(c, t, t)), -0.5f));
    return WGML_OK;
}
static wgml_status vjp_tanh(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, tanh_grad_factor(c, t)); return WGML_OK; }
static wgml_status vjp_sigmoid(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_mul(c, g, wgml_mul(c, t, wgml_scalar_binary(c, WGML_SUB, 1.0f, t)));
    return WGML_OK;
}
static wgml_status vjp_relu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = relu_grad(c, t->src[0], g); return WGML_OK; }
static wgml_status vjp_gelu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = gelu_grad(c, t->src[0], g); return WGML_OK; }
static wgml_status vjp_silu(wgml_context *c, T *t, T *g, T **gin) { gin[0] = silu_grad(c, t->src[0], g); return WGML_OK; }
static wgml_status vjp_clamp(wgml_context *c, T *t, T *g, T **gin) /* passes where lo < a < hi */
{
    T *a = t->src[0];
    gin[0] = relu_grad(c, scal(c, WGML_SUB, a, t->fparam[0]), relu_grad(c, wgml_scalar_binary(c, WGML_SUB, t->fparam[1], a), g));
    return WGML_OK;
}

/* softplus(x) = log(1 + e^x), computed as max(x, 0) + log(1 + e^-|x|) so that it neither
   overflows nor loses x for large |x|; its derivative is sigmoid(x) */
static double ref_softplus(const double *in)
{
    double x = in[0];
    if (isnan(x)) return x;
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}
static wgml_status vjp_softplus(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, wgml_sigmoid(c, t->src[0])); return WGML_OK; }

/* erf and the exact GELU: C's erf and erfc in double */
static double ref_erf(const double *in) { return erf(in[0]); }
static double ref_gelu_exact(const double *in) { return isinf(in[0]) && in[0] < 0 ? 0.0 : 0.5 * in[0] * erfc(-in[0] / sqrt(2.0)); }
static double ref_sin(const double *in) { return sin(in[0]); }
static double ref_cos(const double *in) { return cos(in[0]); }
static wgml_status vjp_erf(wgml_context *c, T *t, T *g, T **gin) /* 2/sqrt(pi) e^(-x^2) */
{
    T *x = t->src[0];
    gin[0] = wgml_mul(c, g, scal(c, WGML_MUL, wgml_exp(c, wgml_neg(c, wgml_mul(c, x, x))), 1.1283791670955126f));
    return WGML_OK;
}
static T *gelu_exact_grad(wgml_context *c, T *x, T *g) /* g (Phi(x) + x phi(x)) */
{
    T *Phi = scal(c, WGML_MUL, wgml_scalar_binary(c, WGML_ADD, 1.0f, wgml_erf(c, scal(c, WGML_MUL, x, 0.7071067811865476f))), 0.5f);
    T *phi = scal(c, WGML_MUL, wgml_exp(c, scal(c, WGML_MUL, wgml_mul(c, x, x), -0.5f)), 0.3989422804014327f);
    return wgml_mul(c, g, wgml_add(c, Phi, wgml_mul(c, x, phi)));
}
static wgml_status vjp_gelu_exact(wgml_context *c, T *t, T *g, T **gin) { gin[0] = gelu_exact_grad(c, t->src[0], g); return WGML_OK; }
static wgml_status vjp_sin(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_mul(c, g, wgml_cos(c, t->src[0])); return WGML_OK; }
static wgml_status vjp_cos(wgml_context *c, T *t, T *g, T **gin) { gin[0] = wgml_neg(c, wgml_mul(c, g, wgml_sin(c, t->src[0]))); return WGML_OK; }

/* ---------------------------------------------------------------- elementwise, binary */

static wgml_status vjp_add(wgml_context *c, T *t, T *g, T **gin)
{
    if (with_scalar(t)) { gin[0] = g; return WGML_OK; }
    gin[0] = unbroadcast(c, g, t->src[0]);
    gin[1] = unbroadcast(c, g, t->src[1]);
    return WGML_OK;
}
static wgml_status vjp_sub(wgml_context *c, T *t, T *g, T **gin)
{
    if (with_scalar(t)) { gin[0] = t->iparam[0] == 1 ? g : wgml_neg(c, g); return WGML_OK; }
    gin[0] = unbroadcast(c, g, t->src[0]);
    gin[1] = unbroadcast(c, wgml_neg(c, g), t->src[1]);
    return WGML_OK;
}
static wgml_status vjp_mul(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    if (with_scalar(t)) { gin[0] = scal(c, WGML_MUL, g, t->fparam[0]); return WGML_OK; }
    gin[0] = unbroadcast(c, wgml_mul(c, g, b), a);
    gin[1] = unbroadcast(c, wgml_mul(c, g, a), b);
    return WGML_OK;
}
static wgml_status vjp_div(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    if (with_scalar(t)) {
        gin[0] = t->iparam[0] == 1 ? scal(c, WGML_DIV, g, t->fparam[0])              /* a / s */
                                   : wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), a)); /* s / a: -g s/a^2 = -g t / a */
        return WGML_OK;
    }
    gin[0] = unbroadcast(c, wgml_div(c, g, b), a);
    gin[1] = unbroadcast(c, wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), b)), b);
    return WGML_OK;
}
static wgml_status vjp_pow(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    float s = t->fparam[0];
    if (with_scalar(t)) {
        gin[0] = t->iparam[0] == 1 ? wgml_mul(c, g, scal(c, WGML_MUL, scal(c, WGML_POW, a, s - 1.0f), s)) /* a^s */
                                   : wgml_mul(c, g, scal(c, WGML_MUL, t, logf(s)));                     /* s^a */
        return WGML_OK;
    }
    /* d/da = b a^(b-1); d/db = t log a */
    gin[0] = unbroadcast(c, wgml_mul(c, g, wgml_mul(c, b, wgml_pow(c, a, scal(c, WGML_SUB, b, 1.0f)))), a);
    gin[1] = unbroadcast(c, wgml_mul(c, g, wgml_mul(c, t, wgml_log(c, a))), b);
    return WGML_OK;
}
/* maximum and minimum: the gradient goes to the winner; ties to b */
static wgml_status vjp_extremum(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    bool max = t->op == WGML_OP_MAXIMUM;
    if (with_scalar(t)) {
        float s = t->fparam[0];
        gin[0] = relu_grad(c, max ? scal(c, WGML_SUB, a, s) : wgml_scalar_binary(c, WGML_SUB, s, a), g);
        return WGML_OK;
    }
    T *ga = relu_grad(c, max ? wgml_sub(c, a, b) : wgml_sub(c, b, a), g);
    gin[0] = unbroadcast(c, ga, a);
    gin[1] = unbroadcast(c, wgml_sub(c, g, ga), b);
    return WGML_OK;
}

/* comparisons: 0/1 masks, false when either side is NaN (ne: true) */
#define ORDERED(in) (!isnan(in[0]) && !isnan(in[1]))
static double ref_eq(const double *in) { return ORDERED(in) && in[0] == in[1]; }
static double ref_ne(const double *in) { return !ref_eq(in); }
static double ref_lt(const double *in) { return ORDERED(in) && in[0] < in[1]; }
static double ref_le(const double *in) { return ORDERED(in) && in[0] <= in[1]; }
static double ref_gt(const double *in) { return ORDERED(in) && in[0] > in[1]; }
static double ref_ge(const double *in) { return ORDERED(in) && in[0] >= in[1]; }
#undef ORDERED

/* masked_fill(a, mask, value): value where mask != 0 (NaN included); a's gradient passes where
   it is kept */
static double ref_masked_fill(const double *in) { return in[1] != 0 ? in[2] : in[0]; }
static wgml_status vjp_masked_fill(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = unbroadcast(c, wgml_masked_fill(c, g, t->src[1], 0.0f), t->src[0]);
    return WGML_OK;
}

/* ---------------------------------------------------------------- reductions */

static wgml_status vjp_sum(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    int ax = t->iparam[0];
    T *e = expand_reduced(c, g, a, ax);
    gin[0] = t->op == WGML_OP_MEAN ? scal(c, WGML_DIV, e, (float)a->shape[ax]) : e;
    return WGML_OK;
}
/* to the maxima (minima), split equally among ties (as torch.amax); a row holding NaN shares it
   over every element */
static wgml_status vjp_max(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    int ax = t->iparam[0];
    T *te = expand_reduced(c, t, a, ax); /* top: 1 where a equals the extremum */
    T *top = wgml_scalar_binary(c, WGML_SUB, 1.0f, positive(c, t->op == WGML_OP_MIN ? wgml_sub(c, a, te) : wgml_sub(c, te, a)));
    T *share = wgml_div(c, expand_reduced(c, g, a, ax), wgml_sum(c, top, ax, 1));
    gin[0] = relu_grad(c, top, share);
    return WGML_OK;
}

/* ---------------------------------------------------------------- rows */

/* y = xh w + b with xh = xc r, r = rsqrt(mean(xc^2) + eps), xc = x - mean(x) (layernorm) or x
   (rmsnorm); gh = g w: dx = r (gh - xh mean(gh xh) [- mean(gh) for layernorm]), one row kernel
   (the norm's _grad op); dw = sum over rows of g xh, xh from the norm without weight and bias,
   db = sum over rows of g */
static wgml_status vjp_norm(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *w = t->iparam[0] ? t->src[1] : NULL;
    bool centred = t->op == WGML_OP_LAYERNORM, bias = t->iparam[1];
    float eps = t->fparam[0];
    gin[0] = wgml_norm_grad(c, a, w, g, eps, centred);
    if (w) gin[1] = sum_rows(c, wgml_mul(c, g, centred ? wgml_layernorm(c, a, NULL, NULL, eps) : wgml_rmsnorm(c, a, NULL, eps)));
    if (bias) gin[1 + (w != NULL)] = sum_rows(c, g);
    return WGML_OK;
}
static wgml_status vjp_softmax(wgml_context *c, T *t, T *g, T **gin) /* y (g - sum(g y)) */
{
    gin[0] = wgml_mul(c, t, wgml_sub(c, g, wgml_sum(c, wgml_mul(c, g, t), -1, 1)));
    return WGML_OK;
}
static wgml_status vjp_log_softmax(wgml_context *c, T *t, T *g, T **gin) /* g - softmax * sum(g) */
{
    gin[0] = wgml_sub(c, g, wgml_mul(c, wgml_exp(c, t), wgml_sum(c, g, -1, 1)));
    return WGML_OK;
}
static wgml_status vjp_cross_entropy(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_cross_entropy_grad(c, t->src[0], t->src[1], g);
    return WGML_OK;
}

/* ---------------------------------------------------------------- gather and scatter */

/* index_select: each entry goes back where it came from, summed where an index repeats
   (index_add into zeros, deterministic); none to the indices (nor to an i32 table) */
static wgml_status vjp_index_select(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    if (a->dtype == WGML_F32) gin[0] = wgml_index_add_zeros(c, a->ndim, a->shape, t->iparam[0], t->src[1], g);
    return WGML_OK;
}
/* index_add's operands are src, idx, its sort, then a (absent: zeros): g itself to a, g's
   entries at the indices to src */
static wgml_status vjp_index_add(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_index_select(c, g, t->iparam[0], t->src[1]);
    if (t->nsrc > 3) gin[3] = g;
    return WGML_OK;
}

/* ---------------------------------------------------------------- scans and positions */

/* d/da_j of sum_i g_i cumsum(a)_i is the sum of g_i over i >= j: the cumsum of the other direction */
static wgml_status vjp_cumsum(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_cumsum(c, g, t->iparam[0], !t->iparam[1]);
    return WGML_OK;
}
/* a rotation's transpose is the rotation by the opposite angle */
static wgml_status vjp_rope(wgml_context *c, T *t, T *g, T **gin)
{
    wgml_rope_desc d = {.pos_offset = t->iparam[0], .base = t->fparam[0], .interleaved = t->iparam[1], .inverse = !t->iparam[2]};
    gin[0] = wgml_rope_ex(c, g, &d);
    return WGML_OK;
}

/* ---------------------------------------------------------------- matmul */

static wgml_status vjp_matmul(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->src[1];
    bool ta = t->iparam[5], tb = t->iparam[6]; /* as the caller gave them */
    int act = t->iparam[2];
    float alpha = t->fparam[0];
    T *gz = g;
    if (act == WGML_ACT_RELU) gz = relu_grad(c, t, g); /* relu'(z) = (out > 0) */
    else if (act != WGML_ACT_NONE) {
        wgml_matmul_desc pre = {.trans_a = ta, .trans_b = tb, .alpha = alpha, .bias = t->iparam[3] ? t->src[2] : NULL};
        T *z = wgml_matmul_ex(c, a, b, &pre); /* recompute the pre-activation */
        gz = act == WGML_ACT_GELU ? gelu_grad(c, z, g) : act == WGML_ACT_GELU_EXACT ? gelu_exact_grad(c, z, g) : silu_grad(c, z, g);
    }
    if (t->iparam[3]) gin[2] = sum_rows(c, gz);
    T *gzs = alpha != 1.0f ? scal(c, WGML_MUL, gz, alpha) : gz;
    /* gA = gZ op(B)^T, stored as A is; gB = op(A)^T gZ, stored as B is; over the batch's
       leading dims, each broadcast as the forward's were */
    wgml_matmul_desc da = ta ? (wgml_matmul_desc){.trans_a = tb, .trans_b = 1} : (wgml_matmul_desc){.trans_b = !tb};
    gin[0] = ta ? wgml_matmul_ex(c, b, gzs, &da) : wgml_matmul_ex(c, gzs, b, &da);
    wgml_matmul_desc db = tb ? (wgml_matmul_desc){.trans_a = 1, .trans_b = ta} : (wgml_matmul_desc){.trans_a = !ta};
    /* A the lazy output of a cheap op whose inputs the backward keeps anyway (an MLP's
       activation, whose own gradient reads its input; a norm, whose gradient reads its input):
       computed again for B's gradient rather than kept, so that A is freed after the forward
       matmul (the GELU's output and the norms' outputs of a GPT-2 block: the nanoGPT-sized
       step's peak went from 3,258 to 2,922 MiB, docs/MEASUREMENTS.md) */
    wgml_op_kind kind = wgml_op_table[a->op].kind;
    if ((kind == WGML_KIND_UNARY || a->op == WGML_OP_LAYERNORM || a->op == WGML_OP_RMSNORM) && a->nsrc >= 1 && !a->buf &&
        !a->dest) {
        T *again = wgml_node(c, (wgml_op)a->op, a->ndim, a->shape, a->nsrc, a->src);
        if (again) {
            memcpy(again->fparam, a->fparam, sizeof a->fparam);
            memcpy(again->iparam, a->iparam, sizeof a->iparam);
            a = again;
        }
    }
    int64_t K = t->iparam[4], N = t->shape[t->ndim - 1];
    if (t->ndim > 2 && b->numel == K * N && !ta && a->numel * N == t->numel * K && wgml_is_contiguous(a)) {
        /* B shared by the whole batch (a layer's weight) and A not broadcast: the batch's sum
           is the GEMM's own, A's and gZ's rows flattened into its K (views), rather than a
           gradient per matrix of the batch summed after */
        int64_t af[2] = {a->numel / K, K}, gf[2] = {t->numel / N, N};
        T *a2 = wgml_reshape(c, a, 2, af), *g2 = wgml_reshape(c, gzs, 2, gf);
        gin[1] = wgml_reshape(c, tb ? wgml_matmul_ex(c, g2, a2, &db) : wgml_matmul_ex(c, a2, g2, &db), b->ndim, b->shape);
    } else {
        gin[1] = tb ? wgml_matmul_ex(c, gzs, a, &db) : wgml_matmul_ex(c, a, gzs, &db);
    }
    /* an operand broadcast along a leading dim (missing or 1) gets the sum along it */
    if (gin[0]) gin[0] = unbroadcast(c, gin[0], a);
    if (gin[1]) gin[1] = unbroadcast(c, gin[1], b);
    return WGML_OK;
}

/* ---------------------------------------------------------------- joins */

/* each input gets its window of g along the axis */
static wgml_status vjp_concat(wgml_context *c, T *t, T *g, T **gin)
{
    int ax = t->iparam[0];
    int64_t at = 0;
    for (int k = 0; k < t->nsrc; at += t->src[k++]->shape[ax]) gin[k] = wgml_slice(c, g, ax, at, at + t->src[k]->shape[ax], 1);
    return WGML_OK;
}

/* ---------------------------------------------------------------- random numbers */

/* the same mask and scale on g: a dropout node with t's counters */
static wgml_status vjp_dropout(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_dropout_like(c, g, t);
    return WGML_OK;
}

/* ---------------------------------------------------------------- views */

/* to the view's input (src[1]), by the movement that made it */
static wgml_status vjp_view(wgml_context *c, T *t, T *g, T **gin)
{
    T *in = t->src[1];
    switch (t->view_kind) {
    case WGML_VIEW_RESHAPE: gin[1] = wgml_reshape(c, g, in->ndim, in->shape); return WGML_OK;
    case WGML_VIEW_PERMUTE: {
        int inv[WGML_MAX_DIMS];
        for (int i = 0; i < t->ndim; i++) inv[t->iparam[i]] = i;
        gin[1] = wgml_permute(c, g, inv);
        return WGML_OK;
    }
    case WGML_VIEW_BROADCAST: gin[1] = unbroadcast(c, g, in); return WGML_OK;
    case WGML_VIEW_SLICE: gin[1] = slice_grad(c, g, in, t->iparam[0], t->iparam[1], t->iparam[2]); return WGML_OK;
    default:
        return wgml_fail(c, WGML_ERROR_UNSUPPORTED, "backward: no gradient rule for this view");
    }
}

/* ---------------------------------------------------------------- the table */

/* test domains and tolerances: arithmetic is exact to rounding, transcendental functions
   carry the WGSL accuracy of their builtins. FLOOR(f): |ref| is floored at f where a result
   near zero carries the absolute rounding of larger terms (each use says why). */
#define ARITH .tol = 1e-5
#define TRANSC .tol = 1e-4
#define FLOOR(f) .floor = f
#define DOMAIN(l0, h0, l1, h1) .test = {.lo = {l0, l1}, .hi = {h0, h1}}

#define UNARY(e, n, w, r, v, l, h, ...) \
    [WGML_OP_##e] = {.name = n, .kind = WGML_KIND_UNARY, .arity = 1, .wgsl = w, .ref = r, .vjp = v, DOMAIN(l, h, 0, 0), __VA_ARGS__}
#define BINARY(e, n, w, r, v, l0, h0, l1, h1, ...) \
    [WGML_OP_##e] = {.name = n, .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = w, .ref = r, .vjp = v, DOMAIN(l0, h0, l1, h1), __VA_ARGS__}

const wgml_op_def wgml_op_table[WGML_OP_COUNT] = {
    [WGML_OP_NONE] = {.name = "storage", .kind = WGML_KIND_STORAGE, .no_grad = "a leaf"},
    [WGML_OP_VIEW] = {.name = "view", .kind = WGML_KIND_VIEW, .arity = 2, .vjp = vjp_view, .any_dtype = 3, .out = WGML_OUT_SAME},
    /*     enum      name          WGSL                          reference      rule          domain        tolerance */
    UNARY(COPY,     "contiguous", "%0",                         ref_copy,      vjp_copy,     -100, 100,    ARITH, .any_dtype = 1, .out = WGML_OUT_SAME),
    /* the value, with no gradient through it (PyTorch's detach): constant to autograd */
    UNARY(DETACH,   "detach",     "%0",                         ref_copy,      NULL,         -100, 100,    ARITH, .any_dtype = 1,
          .out = WGML_OUT_SAME, .constant = true, .no_grad = "detached"),
    /* i32 data travels through the kernels as f32 bits: a cast reinterprets, then converts */
    [WGML_OP_CAST_F32] = {.name = "cast_f32", .kind = WGML_KIND_UNARY, .arity = 1, .wgsl = "wgml_i32_to_f32(%0)", .ref = ref_cast_f32,
                          .i32_only = 1, .no_grad = "an integer input has no gradient", DOMAIN(-70000, 70000, 0, 0), ARITH},
    [WGML_OP_CAST_I32] = {.name = "cast_i32", .kind = WGML_KIND_UNARY, .arity = 1, .wgsl = "wgml_f32_to_i32(%0)", .ref = ref_cast_i32,
                          .out = WGML_OUT_I32, .no_grad = "an integer result has no gradient", .constant = true, DOMAIN(-3e9, 3e9, 0, 0), ARITH},
    UNARY(NEG,      "neg",        "(-%0)",                      ref_neg,       vjp_neg,      -100, 100,    ARITH),
    UNARY(ABS,      "abs",        "abs(%0)",                    ref_abs,       vjp_abs,      -100, 100,    ARITH),
    UNARY(EXP,      "exp",        "exp(%0)",                    ref_exp,       vjp_exp,      -20, 20,      TRANSC),
    /* log near x = 1 is near 0 and carries the GPU's absolute error (the H100's log: ~2e-7) */
    UNARY(LOG,      "log",        "log(%0)",                    ref_log,       vjp_log,      1e-3, 1e3,    TRANSC, FLOOR(1e-2)),
    UNARY(SQRT,     "sqrt",       "sqrt(%0)",                   ref_sqrt,      vjp_sqrt,     1e-4, 1e4,    TRANSC),
    UNARY(RSQRT,    "rsqrt",      "inverseSqrt(%0)",            ref_rsqrt,     vjp_rsqrt,    1e-4, 1e4,    TRANSC),
    /* WGSL's tanh inherits sinh/cosh's accuracy: ~6e-8 absolute near 0 (3e-4 relative at |x| ~ 1e-4) */
    UNARY(TANH,     "tanh",       "wgml_tanh(%0)",              ref_tanh,      vjp_tanh,     -6, 6,        TRANSC, FLOOR(1e-3)),
    UNARY(SIGMOID,  "sigmoid",    "wgml_sigmoid(%0)",           ref_sigmoid,   vjp_sigmoid,  -15, 15,      TRANSC),
    UNARY(RELU,     "relu",       "wgml_relu(%0)",              ref_relu,      vjp_relu,     -10, 10,      ARITH),
    /* 0.5 x (1 + tanh(u)) cancels for negative x: tanh's ~1e-7 absolute error times 0.5 |x| <= 2.5 */
    UNARY(GELU,     "gelu",       "wgml_gelu(%0)",              ref_gelu,      vjp_gelu,     -5, 5,        TRANSC, FLOOR(1e-2)),
    UNARY(SILU,     "silu",       "wgml_silu(%0)",              ref_silu,      vjp_silu,     -15, 15,      TRANSC),
    UNARY(SOFTPLUS, "softplus",   "wgml_softplus(%0)",          ref_softplus,  vjp_softplus, -30, 30,      TRANSC),
    [WGML_OP_CLAMP] = {.name = "clamp", .kind = WGML_KIND_UNARY, .arity = 1, .nscalars = 2, .wgsl = "wgml_clamp(%0, #0, #1)",
                       .ref = ref_clamp, .vjp = vjp_clamp, DOMAIN(-3, 3, 0, 0), ARITH},
    /* erf's series and A&S 7.1.26 are good to ~1.5e-7 absolute: relative 1e-4 needs a floor
       of 1e-3 near 0 (the GELUs as GELU) */
    UNARY(ERF,      "erf",        "wgml_erf(%0)",               ref_erf,       vjp_erf,      -4, 4,        TRANSC, FLOOR(1e-3)),
    UNARY(GELU_EXACT, "gelu_exact", "wgml_gelu_exact(%0)",      ref_gelu_exact, vjp_gelu_exact, -5, 5,     TRANSC, FLOOR(1e-2)),
    /* sin and cos near their zeros carry the argument's rounding and the driver's range
       reduction: 1.1e-6 absolute on the H100 for |x| <= 10 */
    UNARY(SIN,      "sin",        "wgml_sin(%0)",               ref_sin,       vjp_sin,      -10, 10,      TRANSC, FLOOR(5e-2)),
    UNARY(COS,      "cos",        "wgml_cos(%0)",               ref_cos,       vjp_cos,      -10, 10,      TRANSC, FLOOR(5e-2)),
    [WGML_OP_RELU_GRAD] = {.name = "relu_grad", .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = "select(T(0.0), %1, %0 > T(0.0))",
                           .ref = ref_relu_grad, DOMAIN(-1, 1, -5, 5), ARITH,
                           .no_grad = "made by backward only (no second derivatives)"},
    BINARY(ADD,     "add",        "(%0 + %1)",                  ref_add,       vjp_add,      -10, 10, -10, 10, ARITH),
    BINARY(SUB,     "sub",        "(%0 - %1)",                  ref_sub,       vjp_sub,      -10, 10, -10, 10, ARITH),
    BINARY(MUL,     "mul",        "(%0 * %1)",                  ref_mul,       vjp_mul,      -10, 10, -10, 10, ARITH),
    BINARY(DIV,     "div",        "(%0 / %1)",                  ref_div,       vjp_div,      -10, 10, 0.5, 10, ARITH),
    BINARY(POW,     "pow",        "wgml_pow(%0, %1)",           ref_pow,       vjp_pow,      0.1, 10, -3, 3,   TRANSC),
    BINARY(MAXIMUM, "maximum",    "wgml_maximum(%0, %1)",       ref_maximum,   vjp_extremum, -10, 10, -10, 10, ARITH),
    BINARY(MINIMUM, "minimum",    "wgml_minimum(%0, %1)",       ref_minimum,   vjp_extremum, -10, 10, -10, 10, ARITH),
    /* comparisons: ties and NaN are tested in test_select.c */
#define COMPARE(e, n, w, r) [WGML_OP_##e] = {.name = n, .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = w, .ref = r, \
    .no_grad = "a mask is constant almost everywhere", .constant = true, DOMAIN(-3, 3, -3, 3), ARITH}
    COMPARE(EQ, "eq", "wgml_mask((%0 == %1) & wgml_ordered(%0, %1))", ref_eq),
    COMPARE(NE, "ne", "wgml_mask(!((%0 == %1) & wgml_ordered(%0, %1)))", ref_ne),
    COMPARE(LT, "lt", "wgml_mask((%0 < %1) & wgml_ordered(%0, %1))", ref_lt),
    COMPARE(LE, "le", "wgml_mask((%0 <= %1) & wgml_ordered(%0, %1))", ref_le),
    COMPARE(GT, "gt", "wgml_mask((%0 > %1) & wgml_ordered(%0, %1))", ref_gt),
    COMPARE(GE, "ge", "wgml_mask((%0 >= %1) & wgml_ordered(%0, %1))", ref_ge),
#undef COMPARE
    /* a binary op of two tensors with one scalar, the value filled in (not in the public binary
       API, so its #0 is never a number operand) */
    [WGML_OP_MASKED_FILL] = {.name = "masked_fill", .kind = WGML_KIND_BINARY, .arity = 2, .nscalars = 1,
                             .wgsl = "select(%0, #0, wgml_nonzero(%1))", .ref = ref_masked_fill, .vjp = vjp_masked_fill,
                             DOMAIN(-10, 10, -1, 1), ARITH},
    /* sums of terms of both signs up to 10 cancel to near 0; the rounding scales with the terms (mean as sum) */
    [WGML_OP_SUM] = {.name = "sum", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_sum, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10)},
    [WGML_OP_MEAN] = {.name = "mean", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_sum, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10)},
    [WGML_OP_MAX] = {.name = "max", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_max, DOMAIN(-10, 10, 0, 0), ARITH},
    [WGML_OP_ARGMAX] = {.name = "argmax", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, DOMAIN(-10, 10, 0, 0), .tol = 0, .out = WGML_OUT_I32,
                        .no_grad = "indices are constant almost everywhere (as in PyTorch, none passes)", .constant = true},
    [WGML_OP_MIN] = {.name = "min", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, .vjp = vjp_max, DOMAIN(-10, 10, 0, 0), ARITH},
    [WGML_OP_ARGMIN] = {.name = "argmin", .kind = WGML_KIND_REDUCE, .build = wgml_build_reduce, .arity = 1, DOMAIN(-10, 10, 0, 0), .tol = 0, .out = WGML_OUT_I32,
                        .no_grad = "indices are constant almost everywhere (as in PyTorch, none passes)", .constant = true},
    [WGML_OP_SOFTMAX] = {.name = "softmax", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 1, .vjp = vjp_softmax, DOMAIN(-20, 20, 0, 0), TRANSC},
    /* x - max - log(sum): the row's largest entry is near 0 after cancelling terms up to 40 */
    [WGML_OP_LOG_SOFTMAX] = {.name = "log_softmax", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 1, .vjp = vjp_log_softmax, DOMAIN(-20, 20, 0, 0), TRANSC, FLOOR(1)},
    /* O(1) outputs: (x - mean) r w + b may cancel to near 0 (~1e-6 absolute); rmsnorm as layernorm */
    [WGML_OP_LAYERNORM] = {.name = "layernorm", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 3, .vjp = vjp_norm, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2)},
    [WGML_OP_RMSNORM] = {.name = "rmsnorm", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 2, .vjp = vjp_norm, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2)},
    /* one row kernel for a norm's input gradient: x, its weight, the upstream gradient */
    [WGML_OP_LAYERNORM_GRAD] = {.name = "layernorm_grad", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 3, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2),
                                .no_grad = "made by backward only (no second derivatives)"},
    [WGML_OP_RMSNORM_GRAD] = {.name = "rmsnorm_grad", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 3, DOMAIN(-10, 10, -2, 2), TRANSC, FLOOR(1e-2),
                              .no_grad = "made by backward only (no second derivatives)"},
    [WGML_OP_CROSS_ENTROPY] = {.name = "cross_entropy", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 2, .vjp = vjp_cross_entropy,
                               DOMAIN(-20, 20, 0, 0), TRANSC},
    /* softmax - 1 cancels at the label where its probability is near 1 */
    [WGML_OP_CROSS_ENTROPY_GRAD] = {.name = "cross_entropy_grad", .kind = WGML_KIND_ROW, .build = wgml_build_row, .arity = 3, DOMAIN(-20, 20, -2, 2), TRANSC, FLOOR(1e-2),
                                    .no_grad = "made by backward only (no second derivatives)"},
    /* gather and scatter (ops/gather.c): a gather copies bits; index_add's sums of terms up
       to 10 of both signs cancel (as sum's) */
    [WGML_OP_INDEX_SELECT] = {.name = "index_select", .kind = WGML_KIND_KERNEL, .arity = 2, .build = wgml_build_index_select,
                              .vjp = vjp_index_select, .any_dtype = 1, .i32_only = 2, .out = WGML_OUT_SAME, DOMAIN(-10, 10, 0, 0), .tol = 0},
    [WGML_OP_INDEX_SORT] = {.name = "index_sort", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_index_sort,
                            .i32_only = 1, .out = WGML_OUT_I32, .no_grad = "made by index_add only (integer positions)",
                            DOMAIN(0, 300, 0, 0), .tol = 0},
    [WGML_OP_INDEX_ADD] = {.name = "index_add", .kind = WGML_KIND_KERNEL, .arity = 4, .build = wgml_build_index_add,
                           .vjp = vjp_index_add, .i32_only = 6, DOMAIN(-10, 10, -10, 10), ARITH, FLOOR(10)},
    /* running sums cancel as sums do (floor as sum); i32 too, wrapping */
    [WGML_OP_CUMSUM] = {.name = "cumsum", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_cumsum, .vjp = vjp_cumsum,
                        .any_dtype = 1, .out = WGML_OUT_SAME, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10)},
    /* x1 cos - x2 sin cancels to near 0 on O(1) inputs; the angle's f32 rounding (~6e-8 of
       it) grows with the position (tests/test_rope_cumsum.c) */
    [WGML_OP_ROPE] = {.name = "rope", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_rope, .vjp = vjp_rope,
                      DOMAIN(-2, 2, 0, 0), TRANSC, FLOOR(1)},
    /* a sum of K products of [-2, 2] values (typically ~3 for K = 7) may cancel to near 0 */
    [WGML_OP_MATMUL] = {.name = "matmul", .kind = WGML_KIND_MATMUL, .build = wgml_build_matmul, .arity = 3, .vjp = vjp_matmul, DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1)},
    [WGML_OP_CONCAT] = {.name = "concat", .kind = WGML_KIND_KERNEL, .arity = WGML_MAX_SRC, .build = wgml_build_concat, .vjp = vjp_concat,
                        .any_dtype = 0xff, .out = WGML_OUT_SAME, DOMAIN(-10, 10, -10, 10), ARITH},
    /* sums over S keys and D dims of products of [-2, 2] values, as matmul's */
    [WGML_OP_ATTENTION] = {.name = "attention", .kind = WGML_KIND_KERNEL, .arity = 3, .build = wgml_build_attention,
                           .vjp = wgml_vjp_attention, DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1)},
    [WGML_OP_ATTENTION_GRAD] = {.name = "attention_grad", .kind = WGML_KIND_KERNEL, .arity = 5, .build = wgml_build_attention_grad,
                                DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1), .no_grad = "made by backward only (no second derivatives)"},
    [WGML_OP_OPTIM_STEP] = {.name = "optimizer_step", .kind = WGML_KIND_CUSTOM, .arity = 1,
                            .no_grad = "an optimiser's update, not a function of the loss"},
    /* random numbers (ops/random.c): rand's values and dropout's products are exact; randn's
       r cos t near 0 carries the absolute rounding of r (up to 5.8) times a few 1e-7 */
    [WGML_OP_RAND] = {.name = "rand", .kind = WGML_KIND_KERNEL, .build = wgml_build_random, DOMAIN(-2, 2, 0, 0), ARITH,
                      .no_grad = "random numbers depend on no input"},
    [WGML_OP_RANDN] = {.name = "randn", .kind = WGML_KIND_KERNEL, .build = wgml_build_random, DOMAIN(-2, 2, 0, 0), ARITH, FLOOR(1),
                       .no_grad = "random numbers depend on no input"},
    [WGML_OP_DROPOUT] = {.name = "dropout", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_random, .vjp = vjp_dropout,
                         DOMAIN(-10, 10, 0, 0), ARITH},
};

void wgml_op_codes_put(wgml_sbuf *b)
{
    static const char *const names[] = {
#define WGML_OP_NAME(e) "OP_" #e,
        WGML_OPS(WGML_OP_NAME)
#undef WGML_OP_NAME
    };
    for (int i = 0; i < WGML_OP_COUNT; i++) wgml_sbuf_put(b, "const %s = %du;\n", names[i], i);
}
