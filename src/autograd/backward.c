/*
 * Reverse-mode autograd over the lazy graph. wgml_backward(loss) walks the graph from the
 * loss, then applies each node's vector-Jacobian rule in reverse order; the rules build more
 * lazy nodes (matmul backward is the transposed-operand GEMM, never the host). Gradients
 * accumulate into each trainable tensor's grad, still lazy: they are computed with whatever
 * evaluates next (an optimiser step runs forward, backward and update in one submit).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ptrmap.h"
#include "graph/build.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- helpers */

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

/* ---------------------------------------------------------------- the rules */

/* Fills gin[i] with the gradient for t->src[i] (NULL: none). Returns a status for ops
   without a rule. */
static wgml_status vjp(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0], *b = t->nsrc > 1 ? t->src[1] : NULL;
    bool scalar = wgml_op_table[t->op].kind == WGML_KIND_BINARY && t->nsrc == 1;
    int side = t->iparam[0];
    float s = t->fparam[0];
    switch (t->op) {
    case WGML_OP_COPY: gin[0] = g; return WGML_OK;
    case WGML_OP_NEG: gin[0] = wgml_neg(c, g); return WGML_OK;
    case WGML_OP_ABS: gin[0] = wgml_sub(c, relu_grad(c, a, g), relu_grad(c, wgml_neg(c, a), g)); return WGML_OK;
    case WGML_OP_EXP: gin[0] = wgml_mul(c, g, t); return WGML_OK;
    case WGML_OP_LOG: gin[0] = wgml_div(c, g, a); return WGML_OK;
    case WGML_OP_SQRT: gin[0] = wgml_div(c, scal(c, WGML_MUL, g, 0.5f), t); return WGML_OK;
    case WGML_OP_RSQRT: gin[0] = wgml_mul(c, g, scal(c, WGML_MUL, wgml_mul(c, t, wgml_mul(c, t, t)), -0.5f)); return WGML_OK;
    case WGML_OP_TANH: gin[0] = wgml_mul(c, g, tanh_grad_factor(c, t)); return WGML_OK;
    case WGML_OP_SIGMOID: gin[0] = wgml_mul(c, g, wgml_mul(c, t, wgml_scalar_binary(c, WGML_SUB, 1.0f, t))); return WGML_OK;
    case WGML_OP_RELU: gin[0] = relu_grad(c, a, g); return WGML_OK;
    case WGML_OP_GELU: gin[0] = gelu_grad(c, a, g); return WGML_OK;
    case WGML_OP_SILU: gin[0] = silu_grad(c, a, g); return WGML_OK;
    case WGML_OP_CLAMP: /* pass where lo < a < hi */
        gin[0] = relu_grad(c, scal(c, WGML_SUB, a, t->fparam[0]), relu_grad(c, wgml_scalar_binary(c, WGML_SUB, t->fparam[1], a), g));
        return WGML_OK;
    case WGML_OP_ADD:
        if (scalar) { gin[0] = g; return WGML_OK; }
        gin[0] = unbroadcast(c, g, a);
        gin[1] = unbroadcast(c, g, b);
        return WGML_OK;
    case WGML_OP_SUB:
        if (scalar) { gin[0] = side == 1 ? g : wgml_neg(c, g); return WGML_OK; }
        gin[0] = unbroadcast(c, g, a);
        gin[1] = unbroadcast(c, wgml_neg(c, g), b);
        return WGML_OK;
    case WGML_OP_MUL:
        if (scalar) { gin[0] = scal(c, WGML_MUL, g, s); return WGML_OK; }
        gin[0] = unbroadcast(c, wgml_mul(c, g, b), a);
        gin[1] = unbroadcast(c, wgml_mul(c, g, a), b);
        return WGML_OK;
    case WGML_OP_DIV:
        if (scalar) {
            gin[0] = side == 1 ? scal(c, WGML_DIV, g, s)                                       /* a / s */
                               : wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), a));              /* s / a: -g s/a^2 = -g t / a */
            return WGML_OK;
        }
        gin[0] = unbroadcast(c, wgml_div(c, g, b), a);
        gin[1] = unbroadcast(c, wgml_neg(c, wgml_div(c, wgml_mul(c, g, t), b)), b);
        return WGML_OK;
    case WGML_OP_POW:
        if (scalar) {
            gin[0] = side == 1 ? wgml_mul(c, g, scal(c, WGML_MUL, scal(c, WGML_POW, a, s - 1.0f), s)) /* a^s */
                               : wgml_mul(c, g, scal(c, WGML_MUL, t, logf(s)));                      /* s^a */
            return WGML_OK;
        }
        /* d/da = b a^(b-1) = b t / a; d/db = t log a */
        gin[0] = unbroadcast(c, wgml_mul(c, g, wgml_mul(c, b, wgml_pow(c, a, scal(c, WGML_SUB, b, 1.0f)))), a);
        gin[1] = unbroadcast(c, wgml_mul(c, g, wgml_mul(c, t, wgml_log(c, a))), b);
        return WGML_OK;
    case WGML_OP_MAXIMUM:
    case WGML_OP_MINIMUM: {
        /* the gradient goes to the winner; ties to b */
        if (scalar) {
            T *d = t->op == WGML_OP_MAXIMUM ? scal(c, WGML_SUB, a, s) : wgml_scalar_binary(c, WGML_SUB, s, a);
            gin[0] = relu_grad(c, d, g);
            return WGML_OK;
        }
        T *d = t->op == WGML_OP_MAXIMUM ? wgml_sub(c, a, b) : wgml_sub(c, b, a);
        T *ga = relu_grad(c, d, g);
        gin[0] = unbroadcast(c, ga, a);
        gin[1] = unbroadcast(c, wgml_sub(c, g, ga), b);
        return WGML_OK;
    }
    case WGML_OP_SUM:
    case WGML_OP_MEAN: {
        int ax = t->iparam[0];
        T *e = expand_reduced(c, g, a, ax);
        gin[0] = t->op == WGML_OP_MEAN ? scal(c, WGML_DIV, e, (float)a->shape[ax]) : e;
        return WGML_OK;
    }
    case WGML_OP_MAX: { /* to the maxima, split equally among ties (as torch.amax); a row
                           holding NaN shares it over every element */
        int ax = t->iparam[0];
        T *top = wgml_scalar_binary(c, WGML_SUB, 1.0f, positive(c, wgml_sub(c, expand_reduced(c, t, a, ax), a)));
        T *share = wgml_div(c, expand_reduced(c, g, a, ax), wgml_sum(c, top, ax, 1));
        gin[0] = relu_grad(c, top, share);
        return WGML_OK;
    }
    case WGML_OP_LAYERNORM:
    case WGML_OP_RMSNORM: {
        /* y = xh w + b with xh = xc r, r = rsqrt(mean(xc^2) + eps), xc = x - mean(x) (layernorm)
           or x (rmsnorm); gh = g w: dx = r (gh - xh mean(gh xh) [- mean(gh) for layernorm]) */
        bool centred = t->op == WGML_OP_LAYERNORM, weight = t->iparam[0], bias = t->iparam[1];
        T *xc = centred ? wgml_sub(c, a, wgml_mean(c, a, -1, 1)) : a;
        T *r = wgml_rsqrt(c, scal(c, WGML_ADD, wgml_mean(c, wgml_mul(c, xc, xc), -1, 1), t->fparam[0]));
        T *xh = wgml_mul(c, xc, r);
        T *gh = weight ? wgml_mul(c, g, b) : g;
        T *d = wgml_sub(c, gh, wgml_mul(c, xh, wgml_mean(c, wgml_mul(c, gh, xh), -1, 1)));
        if (centred) d = wgml_sub(c, d, wgml_mean(c, gh, -1, 1));
        gin[0] = wgml_mul(c, r, d);
        if (weight) gin[1] = sum_rows(c, wgml_mul(c, g, xh));
        if (bias) gin[1 + weight] = sum_rows(c, g);
        return WGML_OK;
    }
    case WGML_OP_SOFTMAX: { /* y (g - sum(g y)) */
        T *gy = wgml_mul(c, g, t);
        T *sum = wgml_sum(c, gy, -1, 1);
        gin[0] = wgml_mul(c, t, wgml_sub(c, g, sum));
        return WGML_OK;
    }
    case WGML_OP_LOG_SOFTMAX: /* g - softmax * sum(g) */
        gin[0] = wgml_sub(c, g, wgml_mul(c, wgml_exp(c, t), wgml_sum(c, g, -1, 1)));
        return WGML_OK;
    case WGML_OP_CROSS_ENTROPY:
        gin[0] = wgml_cross_entropy_grad(c, a, b, g);
        return WGML_OK;
    case WGML_OP_MATMUL: {
        bool ta = t->iparam[5], tb = t->iparam[6]; /* as the caller gave them */
        int act = t->iparam[2];
        float alpha = t->fparam[0];
        T *gz = g;
        if (act == WGML_ACT_RELU) gz = relu_grad(c, t, g); /* relu'(z) = (out > 0) */
        else if (act != WGML_ACT_NONE) {
            wgml_matmul_desc pre = {.trans_a = ta, .trans_b = tb, .alpha = alpha, .bias = t->iparam[3] ? t->src[2] : NULL};
            T *z = wgml_matmul_ex(c, a, b, &pre); /* recompute the pre-activation */
            gz = act == WGML_ACT_GELU ? gelu_grad(c, z, g) : silu_grad(c, z, g);
        }
        if (t->iparam[3]) gin[2] = sum_rows(c, gz);
        T *gzs = alpha != 1.0f ? scal(c, WGML_MUL, gz, alpha) : gz;
        /* gA = gZ op(B)^T, stored as A is; gB = op(A)^T gZ, stored as B is */
        wgml_matmul_desc da = ta ? (wgml_matmul_desc){.trans_a = tb, .trans_b = 1} : (wgml_matmul_desc){.trans_b = !tb};
        gin[0] = ta ? wgml_matmul_ex(c, b, gzs, &da) : wgml_matmul_ex(c, gzs, b, &da);
        wgml_matmul_desc db = tb ? (wgml_matmul_desc){.trans_a = 1, .trans_b = ta} : (wgml_matmul_desc){.trans_a = !ta};
        gin[1] = tb ? wgml_matmul_ex(c, gzs, a, &db) : wgml_matmul_ex(c, a, gzs, &db);
        /* an operand shared by the whole batch gets the batch's sum */
        if (a->ndim == 2 && gin[0]->ndim == 3) gin[0] = wgml_sum(c, gin[0], 0, 0);
        if (b->ndim == 2 && gin[1]->ndim == 3) gin[1] = wgml_sum(c, gin[1], 0, 0);
        return WGML_OK;
    }
    case WGML_OP_VIEW: {
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
        default: break;
        }
        break;
    }
    default: break;
    }
    return wgml_fail(c, WGML_ERROR_UNSUPPORTED, "backward: no gradient rule for %s", wgml_op_table[t->op].name);
}

/* ---------------------------------------------------------------- the pass */

/* Every op has a rule but those that backward and the optimisers build (no loss reaches
   them through the public API). */
static bool has_rule(const T *t)
{
    switch (t->op) {
    case WGML_OP_RELU_GRAD: case WGML_OP_CROSS_ENTROPY_GRAD: case WGML_OP_OPTIM_STEP:
        return false;
    case WGML_OP_VIEW:
        return t->view_kind != WGML_VIEW_OTHER;
    default:
        return true;
    }
}

/* Inputs that carry gradients: for a view, its input (src[1]), not the buffer's owner; none
   for argmax, whose indices are constant almost everywhere (as in PyTorch, it passes none). */
static int grad_inputs(T *t, T **out)
{
    if (t->op == WGML_OP_ARGMAX) return 0;
    if (t->op == WGML_OP_VIEW) { out[0] = NULL; out[1] = t->src[1]; return 2; }
    for (int i = 0; i < t->nsrc; i++) out[i] = t->src[i];
    return t->nsrc;
}

/* The pass's notes, one per node it visits (found through index): the gradient reaching the
   node so far, and whether a trainable tensor lies upstream of it. v is in post-order. */
typedef struct order {
    T **v;
    T **grad;
    bool *needs;
    size_t n, cap;
    wgml_ptrmap index;
} order;

static size_t at(const order *o, const T *t) { return wgml_ptrmap_get(&o->index, t); }

static void order_free(order *o)
{
    free(o->v);
    free(o->grad);
    free(o->needs);
    wgml_ptrmap_free(&o->index);
}

static bool visit(T *t, order *o)
{
    if (wgml_ptrmap_get(&o->index, t) != WGML_PTRMAP_NONE) return true;
    bool needs = t->op == WGML_OP_NONE && t->requires_grad;
    T *in[WGML_MAX_SRC];
    int n = grad_inputs(t, in);
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        if (!visit(in[i], o)) return false;
        needs |= o->needs[at(o, in[i])];
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        T **v = realloc(o->v, cap * sizeof *v);
        if (v) o->v = v;
        T **g = realloc(o->grad, cap * sizeof *g);
        if (g) o->grad = g;
        bool *nd = realloc(o->needs, cap * sizeof *nd);
        if (nd) o->needs = nd;
        if (!v || !g || !nd) return false;
        o->cap = cap;
    }
    if (!wgml_ptrmap_put(&o->index, t, (uint32_t)o->n)) return false;
    o->v[o->n] = t;
    o->grad[o->n] = NULL;
    o->needs[o->n++] = needs;
    return true;
}

wgml_status wgml_requires_grad(wgml_tensor *t, int on)
{
    if (!wgml_tensor_valid(t)) return WGML_ERROR_INVALID_ARGUMENT;
    if (t->op != WGML_OP_NONE)
        return wgml_fail(t->ctx, WGML_ERROR_INVALID_ARGUMENT, "requires_grad: only evaluated (leaf) tensors can be trainable");
    t->requires_grad = on != 0;
    return WGML_OK;
}

wgml_tensor *wgml_grad(wgml_tensor *t) { return wgml_tensor_valid(t) ? t->grad : NULL; }

void wgml_zero_grad(wgml_tensor *t)
{
    if (!wgml_tensor_valid(t) || !t->grad) return;
    wgml_tensor_unref(t->grad);
    t->grad = NULL;
}

wgml_status wgml_backward(wgml_tensor *loss)
{
    if (!wgml_tensor_valid(loss)) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = loss->ctx;
    if (loss->status) return wgml_fail(ctx, loss->status, "%s", loss->error);
    if (loss->numel != 1)
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "backward: the loss must have one element, it has %lld", (long long)loss->numel);
    order o = {0};
    if (!visit(loss, &o)) {
        order_free(&o);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    if (!o.needs[at(&o, loss)]) {
        order_free(&o);
        if (loss->op == WGML_OP_NONE && !loss->requires_grad) /* evaluation dropped its graph */
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "backward: the loss was already evaluated (read or eval keeps only its value); "
                             "call wgml_backward before reading it, then read it after the step");
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "backward: no trainable tensor (wgml_requires_grad) reaches the loss");
    }
    /* every op on the way must have a rule before any gradient is touched */
    for (size_t k = 0; k < o.n; k++) {
        T *t = o.v[k];
        if (!o.needs[k] || t->op == WGML_OP_NONE || has_rule(t)) continue;
        order_free(&o);
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "backward: no gradient rule for %s", wgml_op_table[t->op].name);
    }
    wgml_status st = WGML_OK;
    wgml_scope_begin(ctx);
    float one = 1.0f;
    T *seed = NULL;
    st = wgml_tensor_from_data(ctx, loss->ndim, loss->shape, &one, 1, &seed);
    o.grad[at(&o, loss)] = seed;
    for (size_t k = o.n; k-- > 0 && !st;) {
        T *t = o.v[k];
        T *g = o.grad[k];
        if (!g || !o.needs[k]) continue;
        if (t->op == WGML_OP_NONE) {
            if (t->requires_grad) {
                T *acc = t->grad ? wgml_add(ctx, t->grad, g) : g;
                wgml_tensor_retain(acc);
                if (t->grad) wgml_tensor_unref(t->grad);
                t->grad = acc;
            }
            continue;
        }
        T *gin[WGML_MAX_SRC] = {0};
        if ((st = vjp(ctx, t, g, gin))) break;
        T *in[WGML_MAX_SRC];
        int n = grad_inputs(t, in);
        for (int i = 0; i < n; i++) {
            if (!in[i] || !gin[i]) continue;
            size_t j = at(&o, in[i]);
            if (!o.needs[j]) continue;
            if (gin[i]->status) { st = wgml_fail(ctx, gin[i]->status, "backward of %s: %s", wgml_op_table[t->op].name, gin[i]->error); break; }
            o.grad[j] = o.grad[j] ? wgml_add(ctx, o.grad[j], gin[i]) : gin[i];
        }
    }
    order_free(&o);
    wgml_scope_end(ctx); /* the pass's nodes live on only through the grads that use them */
    return st;
}
