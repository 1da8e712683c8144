/* What the gradient rules of several families share (ops/rules.c): lazy nodes built from
   public constructors and elementwise nodes. */
#ifndef WGML_OPS_RULES_H
#define WGML_OPS_RULES_H

#include "engine/op.h"

/* a op s (wgml_binary_scalar) */
wgml_tensor *wgml_rule_scal(wgml_context *c, wgml_binary_op op, wgml_tensor *a, float s);
/* g summed down to the shape of `like` (undoing NumPy broadcasting) */
wgml_tensor *wgml_rule_unbroadcast(wgml_context *c, wgml_tensor *g, const wgml_tensor *like);
/* g reshaped to x's shape with the reduced axis kept (size 1), then broadcast to x */
wgml_tensor *wgml_rule_expand_reduced(wgml_context *c, wgml_tensor *g, const wgml_tensor *x, int axis);
/* mask(x > 0) * g */
wgml_tensor *wgml_rule_relu_grad(wgml_context *c, wgml_tensor *x, wgml_tensor *g);
/* 1 where x > 0, else 0 (no mask multiplied into a NaN or an infinity) */
wgml_tensor *wgml_rule_positive(wgml_context *c, wgml_tensor *x);
/* g [..., n] summed over every row to [n] (a bias's or a norm weight's gradient) */
wgml_tensor *wgml_rule_sum_rows(wgml_context *c, wgml_tensor *g);
/* Under mixed precision, the gradient of act(x) from g, the gradient of its output, where g is a
   GEMM's result (or a reshape of it) that nothing else reads and x has its shape: that GEMM
   again with act's derivative at x in its epilogue (WGML_ACT_GRAD), which stores halves where
   it can (the MLP's second matmul's input gradient times the GELU's derivative: one kernel and
   no f32 gradient in memory); NULL where that does not apply (the caller builds the
   elementwise rule). The first GEMM, now unread, is never run. (The matmul family's,
   ops/matmul/matmul.c.) */
wgml_tensor *wgml_rule_matmul_act_grad(wgml_context *ctx, wgml_tensor *g, int act, wgml_tensor *x);
/* a binary node given a number instead of its second operand */
bool wgml_rule_with_scalar(const wgml_tensor *t);

#endif
