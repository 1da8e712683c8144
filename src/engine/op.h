/*
 * The op table: one entry per op (ops/table.c), the single source of truth for the graph
 * builder, the fusion code generator, the matmul epilogue, the hand-written kernels' op codes,
 * autograd and the tests (which walk it).
 *
 * Adding an elementwise op: its line in WGML_OPS below, its entry in ops.c (WGSL, reference,
 * gradient rule, test domain), its declaration in wgml.h. Its public constructor is made from
 * its line (engine/build.c). A row or reduction op also adds its branch to its kernel, which
 * names it OP_<NAME> (the codes are generated from this list, never numbered by hand).
 */
#ifndef WGML_GRAPH_OPS_H
#define WGML_GRAPH_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tensor.h"

typedef enum wgml_op_kind {
    WGML_KIND_STORAGE,   /* data on the GPU */
    WGML_KIND_VIEW,      /* strided view of another tensor's buffer */
    WGML_KIND_UNARY,     /* elementwise, one operand */
    WGML_KIND_BINARY,    /* elementwise, two operands (one may be a scalar) */
    WGML_KIND_REDUCE,    /* along one axis */
    WGML_KIND_ROW,       /* along the last axis, one team of threads per row (norms, softmax, losses) */
    WGML_KIND_MATMUL,
    WGML_KIND_CUSTOM,    /* its launch supplied by its creator (engine/executor.h: the optimiser step) */
    WGML_KIND_KERNEL,    /* a hand-written kernel of its own: the entry's build function fills its launches */
    WGML_KIND_COUNT
} wgml_op_kind;

/* Every op, X(ENUM); its entry in ops.c says the rest. Unary and binary ops with public
   constructors are also listed by WGML_UNARY_API and WGML_BINARY_API (ENUM, function name),
   which build.c expands. */
#define WGML_OPS(X)                                                                   \
    X(NONE) X(VIEW)                                                                   \
    X(COPY) X(DETACH) X(CAST_F32) X(CAST_I32)                                                   \
    X(NEG) X(ABS) X(EXP) X(LOG) X(SQRT) X(RSQRT) X(TANH) X(SIGMOID) X(RELU)           \
    X(GELU) X(SILU) X(SOFTPLUS) X(CLAMP) X(ERF) X(GELU_EXACT) X(SIN) X(COS)           \
    X(RELU_GRAD) X(ADD) X(SUB) X(MUL) X(DIV) X(POW) X(MAXIMUM) X(MINIMUM)             \
    X(EQ) X(NE) X(LT) X(LE) X(GT) X(GE) X(MASKED_FILL)                                \
    X(SUM) X(MEAN) X(MAX) X(ARGMAX) X(MIN) X(ARGMIN)                                 \
    X(SOFTMAX) X(LOG_SOFTMAX) X(LAYERNORM) X(RMSNORM) X(LAYERNORM_GRAD) X(RMSNORM_GRAD) X(CROSS_ENTROPY) X(CROSS_ENTROPY_GRAD) \
    X(INDEX_SELECT) X(INDEX_SORT) X(INDEX_ADD) X(CUMSUM) X(ROPE)                      \
    X(MATMUL) X(CONCAT) X(ATTENTION) X(ATTENTION_GRAD) X(OPTIM_STEP)                  \
    X(RAND) X(RANDN) X(DROPOUT)

#define WGML_UNARY_API(X)                                                        \
    X(NEG, neg) X(ABS, abs) X(EXP, exp) X(LOG, log) X(SQRT, sqrt) X(RSQRT, rsqrt) \
    X(TANH, tanh) X(SIGMOID, sigmoid) X(RELU, relu) X(GELU, gelu) X(SILU, silu)  \
    X(SOFTPLUS, softplus) X(ERF, erf) X(GELU_EXACT, gelu_exact) X(SIN, sin) X(COS, cos)

#define WGML_BINARY_API(X)                                                       \
    X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div) X(POW, pow) X(MAXIMUM, maximum) \
    X(MINIMUM, minimum) X(EQ, eq) X(NE, ne) X(LT, lt) X(LE, le) X(GT, gt) X(GE, ge)

typedef enum wgml_op {
#define WGML_OP_ENUM(e) WGML_OP_##e,
    WGML_OPS(WGML_OP_ENUM)
#undef WGML_OP_ENUM
    WGML_OP_COUNT
} wgml_op;

_Static_assert((int)WGML_OP_NONE == (int)WGML_TENSOR_STORAGE && (int)WGML_OP_VIEW == (int)WGML_TENSOR_VIEW,
               "core's two ops come first");

/* Fills the launches of node t (engine/launch.h: l points at WGML_MAX_NODE_LAUNCHES of them,
   l[0] zeroed, *count 1 on entry; a builder that fills more sets each one whole, copying l[0]
   say, and *count says how many), its inputs already planned: every entry but the elementwise
   ones (the engine fuses those) and custom nodes. */
struct wgml_launch;
typedef wgml_status (*wgml_build_fn)(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);

/* Which dtypes an entry's operands take, and its result's: operands take f32 unless their
   bit is set in `any_dtype` (any dtype) or in `i32_only`; the result is f32 unless `out`
   says otherwise. engine/build.c's wgml_node enforces this for every node. */
enum { WGML_OUT_F32 = 0, WGML_OUT_I32, WGML_OUT_SAME /* as operand 0 */ };

/* A gradient rule: fills gin[i] with the gradient for t->src[i] (NULL: none reaches it),
   given g, the gradient of t's output. Builds lazy nodes only. */
typedef wgml_status (*wgml_vjp_fn)(wgml_context *ctx, wgml_tensor *t, wgml_tensor *g, wgml_tensor **gin);

typedef struct wgml_op_def {
    const char *name;
    wgml_op_kind kind;
    int arity;    /* tensor operands of the node */
    int nscalars; /* float parameters its WGSL reads as #0, #1 (a binary op given a number
                     instead of its second operand takes that one more) */
    /* elementwise: a WGSL expression in %0, %1 (operands) and #0, #1 (scalars), over the
       functions of ops/elementwise.wgsl; the fused kernels and the matmul epilogue both
       use it */
    const char *wgsl;
    /* the CPU reference in double of one element (unary and binary): in[] holds the operands,
       then the scalars; NULL for other kinds, whose references are cpu/ref.h's array
       functions */
    double (*ref)(const double *in);
    wgml_build_fn build; /* its launches (not elementwise entries: the engine fuses them) */
    unsigned any_dtype, i32_only; /* bit k: operand k (see WGML_OUT_* above) */
    int out;
    wgml_vjp_fn vjp;     /* its gradient rule */
    const char *no_grad; /* or why it has none (autograd reports it; the tests require one of the two) */
    bool constant;       /* with no_grad: constant almost everywhere (argmax, comparisons, casts to
                            i32), so backward passes nothing through it, as PyTorch, instead of failing */
    struct {
        double lo[2], hi[2]; /* operand k of a test is drawn from [lo[k], hi[k]] */
    } test;
    double tol;   /* the tests' bound on |gpu - ref| / max(|ref|, floor) */
    double floor; /* 0, or where results near 0 carry the rounding of larger terms (ops.c says why) */
} wgml_op_def;

extern const wgml_op_def wgml_op_table[WGML_OP_COUNT];

static inline bool wgml_op_is_elementwise(int op)
{
    return wgml_op_table[op].kind == WGML_KIND_UNARY || wgml_op_table[op].kind == WGML_KIND_BINARY;
}

/* The scalars node t passes to its kernel (clamp's bounds, a binary op's number). */
static inline int wgml_op_scalars(const wgml_tensor *t)
{
    const wgml_op_def *d = &wgml_op_table[t->op];
    return d->nscalars + (d->kind == WGML_KIND_BINARY && t->nsrc == 1);
}

/* Appends WGSL `const OP_<NAME> = <code>u;` for every op to b: the codes the hand-written
   kernels switch on (ops/reduce.c puts them before a kernel's source). */
struct wgml_sbuf;
void wgml_op_codes_put(struct wgml_sbuf *b);

/* Appends op's WGSL expression to b, %k replaced by operands[k] and #k by scalars[k] (WGSL
   expressions). The fused kernels and the matmul epilogue both write their ops through here. */
void wgml_op_expand(struct wgml_sbuf *b, int op, const char *const *operands, const char *const *scalars);

#endif
