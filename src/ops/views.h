/* Views (ops/views.c): no ops of their own besides the engine's storage and view, whose
   entries they hold. */
#ifndef WGML_OPS_VIEWS_H
#define WGML_OPS_VIEWS_H

#define WGML_VIEWS_OPS(X)

#include "engine/op.h"

/* a view node's parameters, for its gradient: a permutation's axes; a slice's axis, start and
   step (they fit int32: kernels address elements with u32; a step matters only between two
   elements) */
typedef struct wgml_view_params {
    int32_t axes[WGML_MAX_DIMS];
    int32_t axis, start, step;
} wgml_view_params;
WGML_OP_PARAMS(wgml_view_params, wgml_view_params_of)

#endif
