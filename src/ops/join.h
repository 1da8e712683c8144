/* Joins (ops/join.c): concat as a copy launch per input; stack, split and chunk over it. */
#ifndef WGML_OPS_JOIN_H
#define WGML_OPS_JOIN_H

#include "engine/executor.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_JOIN_OPS(X) X(CONCAT)

/* a concat node's parameters: the axis it joins along (not negative) */
typedef struct wgml_concat_params {
    int32_t axis;
} wgml_concat_params;
WGML_OP_PARAMS(wgml_concat_params, wgml_concat_params_of)

wgml_status wgml_build_concat(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);

#endif
