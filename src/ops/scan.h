/* Cumulative sums and rotary position embedding (ops/scan.c): the build functions
   of their KERNEL entries in the op table. The public constructors are in wgml.h. */
#ifndef WGML_OPS_SCAN_H
#define WGML_OPS_SCAN_H

#include "core/context.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_SCAN_OPS(X) X(CUMSUM) X(ROPE)

/* a cumsum node's parameters: its axis (not negative), and whether it sums from the end */
typedef struct wgml_cumsum_params {
    int32_t axis;
    bool reverse;
} wgml_cumsum_params;
WGML_OP_PARAMS(wgml_cumsum_params, wgml_cumsum_params_of)
/* a rope node's parameters: wgml_rope_desc's (the position of row 0, the base, the pairing,
   the direction), base resolved */
typedef struct wgml_rope_params {
    int32_t pos_offset;
    bool interleaved, inverse;
    float base;
} wgml_rope_params;
WGML_OP_PARAMS(wgml_rope_params, wgml_rope_params_of)

struct wgml_launch;
wgml_status wgml_build_cumsum(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
wgml_status wgml_build_rope(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);

#endif
