/* What the row ops share (ops/row.c): the constructor's checks and the launch of a row kernel. */
#ifndef WGML_OPS_ROW_H
#define WGML_OPS_ROW_H

#include "engine/executor.h"

/* a row node's parameters: whether it has a weight and a bias (its operands after x), its eps */
typedef struct wgml_row_params {
    bool weight, bias;
    float eps;
} wgml_row_params;
WGML_OP_PARAMS(wgml_row_params, wgml_row_params_of)

/* A row node of op over a [..., n] with an optional weight and bias [n] and eps (>= 0). */
wgml_tensor *wgml_row_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *weight, wgml_tensor *bias, float eps);

#define WGML_ROW_MAX_OPS 4

/* What a row family's builder hands wgml_row_launch: its kernel and the operands it binds. */
typedef struct wgml_row_kernel {
    const char *kernel; /* its .wgsl file: its bindings and main, after ops/row.wgsl */
    struct {
        const char *name; /* the ops its kernel tells apart, as WGSL constants OP_<name> */
        int op;
    } codes[WGML_ROW_MAX_OPS];
    int op;               /* the node's op (the kernel's OP) */
    uint32_t flags;       /* the kernel's FLAGS */
    /* x [rows, n]; w and b the operands after it, bound where given (the kernel's
       bindings are x, w if given, b if given, y, the error flags if errors); a kernel that
       reads w or b under a flag gets x bound in place of a missing one, given as x */
    wgml_tensor *x, *w, *b;
    wgml_tensor *r;       /* bound after y where given: an addend of y's shape (the norms' gradients) */
    bool per_row;         /* w and b hold one value per row (read as f32) */
    bool scalar_out;      /* one output per row (f32 units) */
    bool errors;          /* binds the GPU error flags after y (flag_label) */
    float eps;
} wgml_row_kernel;

/* Fills l for row node t with kernel rk. */
wgml_status wgml_row_launch(wgml_context *ctx, wgml_tensor *t, const wgml_row_kernel *rk, wgml_launch *l);

#endif
