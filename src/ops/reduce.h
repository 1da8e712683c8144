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
/* Fills l (and l + 1) to sum x [outer, len, inner] at element in_off over its middle axis
   through ops/colsum.wgsl (four columns a thread where inner and in_off are multiples of 4,
   else one), x of halves where in_half: returns the launches (the caller binds x to l[0]'s
   buffer 0 and the result to the last's buffer 1; two launches pass partials through the
   node's scratch buffer, which one_launch forbids), or 0 where the adapter's loop or binding
   limit or 32-bit indices rule it out, or *st reports a failure. */
int wgml_colsum_launches(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint64_t in_off,
                         bool in_half, bool one_launch, wgml_status *st);

#endif
