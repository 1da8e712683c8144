/*
 * The op table: one row per op, the single source of truth for the graph builder, the
 * fusion code generator, the tests (which walk it) and autograd.
 *
 * Elementwise rows carry a WGSL expression: %0 and %1 stand for the operands, #0 and #1
 * for scalar parameters (passed to the kernel as data, never baked into the source).
 */
#ifndef WGML_GRAPH_OPS_H
#define WGML_GRAPH_OPS_H

typedef enum wgml_op_kind {
    WGML_KIND_STORAGE,   /* data on the GPU */
    WGML_KIND_VIEW,      /* strided view of another tensor's buffer */
    WGML_KIND_UNARY,     /* elementwise, one operand */
    WGML_KIND_BINARY,    /* elementwise, two operands (one may be a scalar) */
    WGML_KIND_REDUCE,    /* along one axis */
    WGML_KIND_ROW,       /* along the last axis, one workgroup per row (norms, softmax, losses) */
    WGML_KIND_MATMUL,
    WGML_KIND_CUSTOM,    /* its launch supplied by its creator (graph/executor.h: the optimiser step) */
    WGML_KIND_COUNT
} wgml_op_kind;

/*   enum      name          kind                 WGSL expression */
#define WGML_OP_TABLE(X)                                                          \
    X(NONE,        "storage",     WGML_KIND_STORAGE, NULL)                        \
    X(VIEW,        "view",        WGML_KIND_VIEW,    NULL)                        \
    X(COPY,        "contiguous",  WGML_KIND_UNARY,   "%0")                        \
    X(NEG,         "neg",         WGML_KIND_UNARY,   "(-%0)")                     \
    X(ABS,         "abs",         WGML_KIND_UNARY,   "abs(%0)")                   \
    X(EXP,         "exp",         WGML_KIND_UNARY,   "exp(%0)")                   \
    X(LOG,         "log",         WGML_KIND_UNARY,   "log(%0)")                   \
    X(SQRT,        "sqrt",        WGML_KIND_UNARY,   "sqrt(%0)")                  \
    X(RSQRT,       "rsqrt",       WGML_KIND_UNARY,   "inverseSqrt(%0)")           \
    X(TANH,        "tanh",        WGML_KIND_UNARY,   "wgml_tanh(%0)")             \
    X(SIGMOID,     "sigmoid",     WGML_KIND_UNARY,   "wgml_sigmoid(%0)")          \
    X(RELU,        "relu",        WGML_KIND_UNARY,   "wgml_relu(%0)")             \
    X(GELU,        "gelu",        WGML_KIND_UNARY,   "wgml_gelu(%0)")             \
    X(SILU,        "silu",        WGML_KIND_UNARY,   "wgml_silu(%0)")             \
    X(CLAMP,       "clamp",       WGML_KIND_UNARY,   "wgml_clamp(%0, #0, #1)")    \
    X(RELU_GRAD,   "relu_grad",   WGML_KIND_BINARY,  "select(T(0.0), %1, %0 > T(0.0))") \
    X(ADD,         "add",         WGML_KIND_BINARY,  "(%0 + %1)")                 \
    X(SUB,         "sub",         WGML_KIND_BINARY,  "(%0 - %1)")                 \
    X(MUL,         "mul",         WGML_KIND_BINARY,  "(%0 * %1)")                 \
    X(DIV,         "div",         WGML_KIND_BINARY,  "(%0 / %1)")                 \
    X(POW,         "pow",         WGML_KIND_BINARY,  "wgml_pow(%0, %1)")          \
    X(MAXIMUM,     "maximum",     WGML_KIND_BINARY,  "wgml_maximum(%0, %1)")      \
    X(MINIMUM,     "minimum",     WGML_KIND_BINARY,  "wgml_minimum(%0, %1)")      \
    X(SUM,         "sum",         WGML_KIND_REDUCE,  NULL)                        \
    X(MEAN,        "mean",        WGML_KIND_REDUCE,  NULL)                        \
    X(MAX,         "max",         WGML_KIND_REDUCE,  NULL)                        \
    X(ARGMAX,      "argmax",      WGML_KIND_REDUCE,  NULL)                        \
    X(SOFTMAX,     "softmax",     WGML_KIND_ROW,     NULL)                        \
    X(LOG_SOFTMAX, "log_softmax", WGML_KIND_ROW,     NULL)                        \
    X(LAYERNORM,   "layernorm",   WGML_KIND_ROW,     NULL)                        \
    X(RMSNORM,     "rmsnorm",     WGML_KIND_ROW,     NULL)                        \
    X(MATMUL,      "matmul",      WGML_KIND_MATMUL,  NULL)                        \
    X(CROSS_ENTROPY, "cross_entropy", WGML_KIND_ROW, NULL)                       \
    X(CROSS_ENTROPY_GRAD, "cross_entropy_grad", WGML_KIND_ROW, NULL)           \
    X(OPTIM_STEP,  "optimizer_step", WGML_KIND_CUSTOM, NULL)

typedef enum wgml_op {
#define WGML_OP_ENUM(e, name, kind, wgsl) WGML_OP_##e,
    WGML_OP_TABLE(WGML_OP_ENUM)
#undef WGML_OP_ENUM
    WGML_OP_COUNT
} wgml_op;

typedef struct wgml_op_info {
    const char *name;
    wgml_op_kind kind;
    const char *wgsl; /* elementwise expression, or NULL */
} wgml_op_info;

extern const wgml_op_info wgml_op_table[WGML_OP_COUNT];

static inline int wgml_op_is_elementwise(int op)
{
    return wgml_op_table[op].kind == WGML_KIND_UNARY || wgml_op_table[op].kind == WGML_KIND_BINARY;
}

#endif
