/* Joins (ops/join.c): concat as a copy launch per input; stack, split and chunk over it. */
#ifndef WGML_OPS_JOIN_H
#define WGML_OPS_JOIN_H

#include "engine/executor.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_JOIN_OPS(X) X(CONCAT)

wgml_status wgml_build_concat(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);

#endif
