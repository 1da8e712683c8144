/* The elementwise family (ops/elementwise.c): its op list, and the nodes other families'
   rules build from. */
#ifndef WGML_OPS_ELEMENTWISE_H
#define WGML_OPS_ELEMENTWISE_H

#include "engine/op.h"

/* Its ops, X(ENUM, fn, API): API UNARY or BINARY generates the public constructor wgml_<fn>
   (ops/elementwise.c), NONE has one written by hand or none. (COPY, the contiguous copy, is
   the engine's own code; its entry is here.) */
#define WGML_ELEMENTWISE_OPS(X)                                                                         \
    X(DETACH, detach, NONE) X(CAST_F32, cast_f32, NONE) X(CAST_I32, cast_i32, NONE)                      \
    X(CAST_F16, cast_f16, NONE) X(CAST_F16_TO_F32, cast_f16_to_f32, NONE)                                \
    X(NEG, neg, UNARY) X(ABS, abs, UNARY) X(EXP, exp, UNARY) X(LOG, log, UNARY) X(SQRT, sqrt, UNARY)     \
    X(RSQRT, rsqrt, UNARY) X(TANH, tanh, UNARY) X(SIGMOID, sigmoid, UNARY) X(RELU, relu, UNARY)          \
    X(GELU, gelu, UNARY) X(SILU, silu, UNARY) X(SOFTPLUS, softplus, UNARY) X(CLAMP, clamp, NONE)         \
    X(ERF, erf, UNARY) X(GELU_EXACT, gelu_exact, UNARY) X(SIN, sin, UNARY) X(COS, cos, UNARY) X(SOFTSIGN, softsign, UNARY) \
    X(RELU_GRAD, relu_grad, NONE)                                                                        \
    X(ADD, add, BINARY) X(SUB, sub, BINARY) X(MUL, mul, BINARY) X(DIV, div, BINARY) X(POW, pow, BINARY)  \
    X(MAXIMUM, maximum, BINARY) X(MINIMUM, minimum, BINARY) X(EQ, eq, BINARY) X(NE, ne, BINARY)          \
    X(LT, lt, BINARY) X(LE, le, BINARY) X(GT, gt, BINARY) X(GE, ge, BINARY) X(MASKED_FILL, masked_fill, NONE)
/* (wgml.h's wgml_binary_op numbers the BINARY ones in this order: WGML_ADD for ADD) */

/* A binary node of op over a and b (broadcast; a comparison takes i32 operands as f32). */
wgml_tensor *wgml_binary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *b);
/* The table's op of a public wgml_binary_op (WGML_OP_NONE when it is not one). */
wgml_op wgml_binary_api_op(wgml_binary_op op);
/* a's node again, storing halves, where a is a lazy result whose kernel can store them itself
   (a norm, a concatenation, a GEMM on the matrix units; or a reshape of one): what wgml_cast
   to f16 returns then. NULL where it is not (a cast would be a pass of its own). */
wgml_tensor *wgml_retyped_f16(wgml_context *ctx, wgml_tensor *a);

#endif
