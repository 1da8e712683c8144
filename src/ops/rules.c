/* Helpers the gradient rules of several families share, built from public constructors and
   elementwise nodes (ops/rules.h). */
#include "ops/rules.h"

#include <string.h>

#include "engine/build.h"
#include "ops/table.h"

typedef wgml_tensor T;

T *wgml_rule_scal(wgml_context *c, wgml_binary_op op, T *a, float s) { return wgml_binary_scalar(c, op, a, s); }

/* Sums g down to the shape of `like` (undoing NumPy broadcasting). */
T *wgml_rule_unbroadcast(wgml_context *c, T *g, const T *like)
{
    while (g->ndim > like->ndim) g = wgml_sum(c, g, 0, 0);
    for (int d = 0; d < like->ndim; d++)
        if (like->shape[d] == 1 && g->shape[d] != 1) g = wgml_sum(c, g, d, 1);
    return g;
}

/* g reshaped to x's shape with the reduced axis kept (size 1), then broadcast to x */
T *wgml_rule_expand_reduced(wgml_context *c, T *g, const T *x, int axis)
{
    int64_t shape[WGML_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = 1;
    return wgml_broadcast_to(c, wgml_reshape(c, g, x->ndim, shape), x->ndim, x->shape);
}

/* mask(x > 0) * g */
T *wgml_rule_relu_grad(wgml_context *c, T *x, T *g) { return wgml_binary_node(c, WGML_OP_RELU_GRAD, x, g); }

/* 1 where x > 0, else 0: relu_grad with the constant 1 for g (a scalar operand, as in
   wgml_binary_scalar), so no mask is ever multiplied into a NaN or an infinity */
T *wgml_rule_positive(wgml_context *c, T *x)
{
    if (!x || x->status) return x;
    T *t = wgml_node(c, WGML_OP_RELU_GRAD, x->ndim, x->shape, 1, &x);
    if (t) wgml_elementwise_params_of_set(t, (wgml_elementwise_params){.side = 1, .scalar = {1.0f}});
    return t;
}

/* g [..., n] summed over every row to [n] (a bias's or a norm weight's gradient) */
T *wgml_rule_sum_rows(wgml_context *c, T *g)
{
    int64_t n = g->shape[g->ndim - 1], shape2[2] = {g->numel / n, n};
    return wgml_sum(c, wgml_reshape(c, g, 2, shape2), 0, 0);
}

/* A binary node given a number instead of its second operand: side 1 is a op s, else s op a */
bool wgml_rule_with_scalar(const T *t) { return wgml_op_table[t->op]->kind == WGML_KIND_BINARY && t->nsrc == 1; }
