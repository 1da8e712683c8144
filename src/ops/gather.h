/* Gather and scatter with i32 indices (ops/gather.c): the internal nodes behind
   wgml_index_select, wgml_embedding and wgml_index_add, and their launch builders. */
#ifndef WGML_OPS_GATHER_H
#define WGML_OPS_GATHER_H

#include "core/context.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_GATHER_OPS(X) X(INDEX_SELECT) X(INDEX_SORT) X(INDEX_ADD)

/* index_select's and index_add's parameters: the axis they index (not negative) */
typedef struct wgml_gather_params {
    int32_t axis;
} wgml_gather_params;
WGML_OP_PARAMS(wgml_gather_params, wgml_gather_params_of)
/* an index_sort node's: the indexed axis' length, the first bit it sorts by, its 8-bit passes
   (1 or 2), whether it reads the raw indices (the first node) or a sort's pairs */
typedef struct wgml_index_sort_params {
    int32_t len, first_bit, passes;
    bool raw;
} wgml_index_sort_params;
WGML_OP_PARAMS(wgml_index_sort_params, wgml_index_sort_params_of)

struct wgml_launch;

/* index_add into zeros of `shape` (index_select's gradient): y[.., idx[i], ..] += src[.., i, ..]
   along `axis` (not negative), with src of shape `shape` but idx's length along the axis. */
wgml_tensor *wgml_index_add_zeros(wgml_context *ctx, int ndim, const int64_t *shape, int axis, wgml_tensor *idx,
                                  wgml_tensor *src);

/* idx (1-D, i32, contiguous) sorted stably by value: [2, n] i32, the sorted values (an index
   outside [0, len) as len) then their positions. index_add sums in this order. */
wgml_tensor *wgml_index_sort(wgml_context *ctx, wgml_tensor *idx, int64_t len);

/* the launches of the INDEX_SELECT, INDEX_SORT and INDEX_ADD entries (engine/op.h's wgml_build_fn) */
wgml_status wgml_build_index_select(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
wgml_status wgml_build_index_sort(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
wgml_status wgml_build_index_add(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);

#endif
