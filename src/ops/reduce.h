/* Reductions along an axis (ops/reduce.c). */
#ifndef WGML_OPS_REDUCE_H
#define WGML_OPS_REDUCE_H

#include "engine/executor.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_REDUCE_OPS(X) X(SUM) X(MEAN) X(MAX) X(ARGMAX) X(MIN) X(ARGMIN)

/* a reduction node's parameters: the axis it folds (not negative) */
typedef struct wgml_reduce_params {
    int32_t axis;
} wgml_reduce_params;
WGML_OP_PARAMS(wgml_reduce_params, wgml_reduce_params_of)

wgml_status wgml_build_reduce(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);
/* The "reduce" kernel's pipeline into l (split K's sum of partials takes it too). */
wgml_status wgml_reduce_pipeline(wgml_context *ctx, wgml_launch *l);
/* Fills l (whose pipeline is the "reduce" kernel's) to sum x [outer, len, inner] at element
   in_off over its middle axis, a thread per output folding the axis (or, for the `last` sum of
   partials on a GPU with few outputs, a workgroup per output): for partial results (split K,
   column sums). in_half: x holds halves. */
/* Fills l (and l + 1) to sum x [outer, len, inner] at element in_off over its middle axis
   through ops/colsum.wgsl, four columns a thread (inner and in_off multiples of 4), x of
   halves where in_half: returns the launches (the caller binds x to l[0]'s buffer 0 and the
   result to the last's buffer 1; two launches pass partials through the node's scratch
   buffer), or 0 where x's layout does not suit it or *st reports a failure. */
int wgml_colsum_launches(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint64_t in_off,
                         bool in_half, wgml_status *st);
void wgml_reduce_columns(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint32_t in_off,
                         bool in_half, bool last);

#endif
