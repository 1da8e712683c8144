/* The row ops' shared constructor and launch (ops/row.c). */
#ifndef WGML_OPS_ROW_H
#define WGML_OPS_ROW_H

#include "engine/executor.h"

/* A row node of op over a [..., n] with an optional weight and bias [n] and eps (>= 0). */
wgml_tensor *wgml_row_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *weight, wgml_tensor *bias, float eps);
wgml_status wgml_build_row(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);

#endif
