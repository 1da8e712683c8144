/* Nodes: what the op constructors (src/ops/), autograd and training record the graph with. */
#ifndef WGML_ENGINE_BUILD_H
#define WGML_ENGINE_BUILD_H

#include "core/context.h"
#include "engine/op.h"

/* Records a lazy node of `op` with the given output shape and inputs (retained). */
wgml_tensor *wgml_node(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc,
                       wgml_tensor *const *src);
/* NULL if t is a usable input (role, e.g. "a") of op `name`; else the error tensor to return
   (t NULL, not a tensor, of another context, or in an error state). */
wgml_tensor *wgml_check_input(wgml_context *ctx, wgml_tensor *t, const char *name, const char *role);
/* NULL if idx (i32) can index an axis of `len` entries (`what` names it in the message); else
   the error tensor. Host uploads carry their range and are checked here; indices made on the
   GPU are checked by the kernels that read them. */
wgml_tensor *wgml_check_indices(wgml_context *ctx, const char *name, wgml_tensor *idx, int64_t len, const char *what);
/* t's shape as text ("[2, 3]") into out, for messages */
static inline void wgml_shape_str(char *out, size_t n, const wgml_tensor *t)
{
    wgml_format_shape(out, n, t->ndim, t->shape);
}
/* axis counted from the end when negative; -1 when out of range for ndim dimensions */
int wgml_axis(int axis, int ndim);
/* a itself when contiguous, else a contiguous copy; the caller owns one reference either way
   and passes it to wgml_node_consuming, which records the node and drops it */
wgml_tensor *wgml_as_contiguous(wgml_context *ctx, wgml_tensor *a);
wgml_tensor *wgml_node_consuming(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc,
                                 wgml_tensor **src);
/* returns from an op's constructor: NULL for a NULL context, else the error tensor of a bad input */
#define CHECK_INPUT(ctx, t, name, role)                                    \
    do {                                                                   \
        if (!(ctx)) return NULL;                                           \
        wgml_tensor *bad_ = wgml_check_input((ctx), (t), (name), (role));  \
        if (bad_) return bad_;                                             \
    } while (0)
/* a node of op over a, of a's shape */
wgml_tensor *wgml_unary_node(wgml_context *ctx, wgml_op op, wgml_tensor *a);
/* A view of a (WGML_OP_VIEW): shape, strides and offset into the buffer a reads; `kind`
   (WGML_VIEW_*) says which movement made it, for its gradient. */
wgml_tensor *wgml_view_node(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape, const int64_t *stride,
                            int64_t offset, int kind);
/* NumPy broadcast of two shapes into out; returns its rank or -1. */
int wgml_broadcast_shapes(const wgml_tensor *a, const wgml_tensor *b, int64_t *out);

#endif
