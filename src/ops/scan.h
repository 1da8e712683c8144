/* Cumulative sums and rotary position embedding (ops/scan.c): the build functions
   of their KERNEL entries in the op table. The public constructors are in wgml.h. */
#ifndef WGML_OPS_SCAN_H
#define WGML_OPS_SCAN_H

#include "core/context.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_SCAN_OPS(X) X(CUMSUM) X(ROPE)

struct wgml_launch;
wgml_status wgml_build_cumsum(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
wgml_status wgml_build_rope(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);

#endif
