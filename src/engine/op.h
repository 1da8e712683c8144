/*
 * The op type: what the engine knows of an op, its entry (name, kind, arity, the dtypes it
 * takes, its launch builder, gradient rule, test domain; the double references are the
 * tests', tests/ref/, found by the op's name). The entries live with their
 * families (src/ops/, one file per family, its kernel beside it); ops/table.c lists them by
 * code. The engine reads entries and calls an op only through their pointers: it never
 * includes a family's header or names an op besides its own three below.
 */
#ifndef WGML_ENGINE_OP_H
#define WGML_ENGINE_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "core/tensor.h"

/* The kinds of op, X(KIND, name) (name: wgml_op_get_info's):
   STORAGE  data on the GPU;                VIEW    a strided view of another tensor's buffer;
   UNARY    elementwise, one operand;       BINARY  elementwise, two (one may be a number);
   REDUCE   along one axis;                 ROW     along the last axis, a team of threads per row;
   MATMUL;  CUSTOM  its launch supplied by its creator (engine/executor.h: the optimiser step);
   KERNEL   a hand-written or generated kernel of its own. */
#define WGML_OP_KINDS(X)                                                                        \
    X(STORAGE, storage) X(VIEW, view) X(UNARY, unary) X(BINARY, binary) X(REDUCE, reduce) X(ROW, row) \
    X(MATMUL, matmul) X(CUSTOM, custom) X(KERNEL, kernel)
typedef enum wgml_op_kind {
#define WGML_KIND_ENUM(k, name) WGML_KIND_##k,
    WGML_OP_KINDS(WGML_KIND_ENUM)
#undef WGML_KIND_ENUM
    WGML_KIND_COUNT
} wgml_op_kind;

/* The ops the engine itself names: storage and views (core's two) and the contiguous copy that
   materialises a view. Every other op's code comes from its family's list (ops/table.h); the
   engine reaches it only through its entry. */
enum { WGML_OP_NONE = WGML_TENSOR_STORAGE, WGML_OP_VIEW = WGML_TENSOR_VIEW, WGML_OP_COPY, WGML_OP_ENGINE_COUNT };
typedef int wgml_op; /* an op's code: its index in wgml_op_table */

/* Fills the launches of node t (engine/launch.h: l points at WGML_MAX_NODE_LAUNCHES of them,
   l[0] zeroed, *count 1 on entry; a builder that fills more sets each one whole, copying l[0]
   say, and *count says how many), its inputs already planned: every entry but the elementwise
   ones (the engine fuses those) and custom nodes. */
struct wgml_launch;
typedef wgml_status (*wgml_build_fn)(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);

/* Which dtypes an entry's operands take, and its result's: operands take f32 unless their
   bit is set in `any_dtype` (f32 or i32) or in `i32_only`; the result is f32 unless `out`
   says otherwise. f16 (storage only: the math is f32) is taken where f32 is by the
   elementwise ops (fusion reads halves), views, and the operands whose bit is set in
   `f16_in` (their kernels read halves). engine/build.c's wgml_node enforces this for every
   node. */
enum { WGML_OUT_F32 = 0, WGML_OUT_I32, WGML_OUT_SAME /* as operand 0 */, WGML_OUT_F16 };

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
    wgml_build_fn build; /* its launches (not elementwise entries: the engine fuses them) */
    unsigned any_dtype, i32_only; /* bit k: operand k (see WGML_OUT_* above) */
    unsigned f16_in;              /* bit k: operand k may be f16 where it takes f32 */
    int out;
    /* its kernel stores halves when the node's dtype is f16 (the elementwise ops' fused
       kernels always can): a cast to f16 of such a node, not yet evaluated, is the node again
       with dtype f16 (ops/elementwise.c's wgml_cast), so no pass of its own */
    bool f16_out;
    /* with f16_out: whether this node's kernel can (a matmul: only on the matrix units); NULL:
       always */
    bool (*f16_out_if)(wgml_context *ctx, const struct wgml_tensor *t);
    wgml_vjp_fn vjp;     /* its gradient rule */
    /* t + r as one node whose kernel adds r (t's shape) to its result: a sum with no launch or
       pass over memory of its own (wgml_add asks it of either operand, autograd of a gradient
       it sums). `own`: t was made for this sum alone (autograd's fresh gradient), so the op may
       take r into t itself; else t may be read elsewhere and stays as it is. NULL where the op
       cannot (the caller builds an add) */
    struct wgml_tensor *(*add_in)(wgml_context *ctx, struct wgml_tensor *t, struct wgml_tensor *r, bool own);
    const char *no_grad; /* or why it has none (autograd reports it; the tests require one of the two) */
    bool constant;       /* with no_grad: constant almost everywhere (argmax, comparisons, casts to
                            i32), so backward passes nothing through it, as PyTorch, instead of failing */
    bool compares;       /* a comparison: i32 operands are compared as their f32 values (exact below 2^24) */
    bool recompute;      /* cheap to compute again from inputs a backward keeps anyway (an activation,
                            a norm): a matmul's gradient recomputes such an operand rather than
                            holding it from the forward */
    struct {
        double lo[2], hi[2]; /* operand k of a test is drawn from [lo[k], hi[k]] */
    } test;
    double tol;   /* the tests' bound on |gpu - ref| / max(|ref|, floor) */
    double floor; /* 0, or where results near 0 carry the rounding of larger terms (each entry says why) */
} wgml_op_def;

/* Every op's entry by code (wgml_op_count() of them): declared here, defined by the ops layer
   (ops/table.c, from the families' lists). The one thing the engine takes from above it
   (scripts/check_layers.py's SEAMS). */
extern const wgml_op_def *const wgml_op_table[];

static inline bool wgml_op_is_elementwise(int op)
{
    return wgml_op_table[op]->kind == WGML_KIND_UNARY || wgml_op_table[op]->kind == WGML_KIND_BINARY;
}

/* The scalars node t passes to its kernel (clamp's bounds, a binary op's number). */
static inline int wgml_op_scalars(const wgml_tensor *t)
{
    const wgml_op_def *d = wgml_op_table[t->op];
    return d->nscalars + (d->kind == WGML_KIND_BINARY && t->nsrc == 1);
}

/* A family's typed node parameters: WGML_OP_PARAMS(wgml_norm_params, norm_params) defines
   norm_params(t), which reads them from node t, and norm_params_set(t, p), which stores them
   (in the tensor's params bytes; copied with the node wherever the engine copies one). */
#define WGML_OP_PARAMS(type, fn)                                                                    \
    _Static_assert(sizeof(type) <= WGML_OP_PARAMS_BYTES, #type " fits a node's parameters");       \
    static inline type fn(const wgml_tensor *t)                                                    \
    {                                                                                               \
        type p;                                                                                     \
        memcpy(&p, t->params, sizeof p);                                                            \
        return p;                                                                                   \
    }                                                                                               \
    static inline void fn##_set(wgml_tensor *t, type p) { memcpy(t->params, &p, sizeof p); }

/* An elementwise node's numbers, which the engine's fusion passes to the kernel: a binary op
   given a number for an operand (side 1: a op s, 2: s op a; 0: two tensors) takes it as its
   scalar[0]; clamp's bounds, masked_fill's value are scalar[0], scalar[1] (#0, #1 of its WGSL). */
typedef struct wgml_elementwise_params {
    int32_t side;
    float scalar[2];
} wgml_elementwise_params;
WGML_OP_PARAMS(wgml_elementwise_params, wgml_elementwise_params_of)

struct wgml_sbuf;
/* Appends op's WGSL expression to b, %k replaced by operands[k] and #k by scalars[k] (WGSL
   expressions). The fused kernels and the matmul epilogue both write their ops through here. */
void wgml_op_expand(struct wgml_sbuf *b, int op, const char *const *operands, const char *const *scalars);

#endif
