/*
 * Tensors (core/tensor.c): the struct every layer shares, its lifetime (reference counts and
 * scopes) and its layout.
 *
 * A tensor is one of three things:
 *   - storage: op == WGML_TENSOR_STORAGE, buf holds its data (a pool buffer);
 *   - a view:  op == WGML_TENSOR_VIEW, src[0] is the storage-or-lazy tensor whose buffer it
 *              reads, through its own shape, strides and offset (elements);
 *   - lazy:    any other op (a row of engine/op.h's table), src[] are its inputs; evaluation
 *              gives it a buffer and turns it into storage (it then drops its inputs).
 * Every lazy result is laid out contiguously, so a view's strides are known when it is made.
 */
#ifndef WGML_CORE_TENSOR_H
#define WGML_CORE_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "wgml.h"

#define WGML_TENSOR_MAGIC 0x7767746eu /* "wgtn" */
#define WGML_MAX_SRC 8 /* concat joins up to 8; attention's gradient reads five (q, k, v, the forward's output, dO) */
#define WGML_OP_PARAMS_BYTES 32 /* a node's typed parameters (the largest: matmul's, random's) */

/* The two ops core knows; engine/op.h numbers its table from these. */
enum { WGML_TENSOR_STORAGE = 0, WGML_TENSOR_VIEW = 1 };

enum { WGML_VIEW_OTHER = 0, WGML_VIEW_RESHAPE, WGML_VIEW_PERMUTE, WGML_VIEW_BROADCAST, WGML_VIEW_SLICE };

struct wgml_buffer;

struct wgml_tensor {
    uint32_t magic;
    wgml_context *ctx;
    int ndim;
    int64_t shape[WGML_MAX_DIMS];
    int64_t stride[WGML_MAX_DIMS]; /* elements; 0 for broadcast dims */
    int64_t offset;                /* elements into the buffer */
    int64_t numel;
    /* elements kept after the data in a node's buffer: an op's side result that its gradient
       reads (attention's row logsumexps); evaluation allocates numel + tail */
    int64_t tail;
    int dtype; /* wgml_dtype: f32 and i32 elements are 4 bytes (i32 data sits in the same buffers), f16 2 */
    /* i32 storage from the host: its smallest and largest value, so that an op indexing with
       it checks the range when built (indices made on the GPU are checked there) */
    bool range_known;
    int32_t range_lo, range_hi;

    struct wgml_buffer *buf; /* storage tensors only */
    /* when set, evaluation writes this node's result into dest at dest_offset (elements,
       aligned for binding) instead of a pool buffer: gradients land in an optimiser's
       flat buffer this way */
    struct wgml_buffer *dest;
    int64_t dest_offset;

    int op; /* a wgml_op of engine/op.h */
    int nsrc;
    wgml_tensor *src[WGML_MAX_SRC];
    /* the op's parameters: a struct its family defines (WGML_OP_PARAMS, engine/op.h) */
    _Alignas(8) unsigned char params[WGML_OP_PARAMS_BYTES];
    const void *op_data; /* what an op's creator attaches (a custom node's launch builder) */

    wgml_status status; /* an error state from building the op */
    char *error;        /* its message (owned) */

    int refs;        /* 1 while the user holds it + 1 per lazy consumer */
    bool user_held;  /* not yet released by the user (free or scope end) */
    int scope;       /* scope depth it was made in */
    wgml_tensor *all_prev, *all_next; /* the context's list of live tensors */

    /* scratch of the walk that finds a buffer's pending readers (engine/executor.c), valid
       while walk_epoch is that walk's */
    uint32_t walk_epoch;
    int walk_users;    /* live lazy nodes and views that take it as an input */
    int8_t walk_reads; /* -1 not yet known, 0 no, 1 it reads one of the walk's buffers */

    /* autograd */
    bool requires_grad;
    const void *optimizer; /* the optimizer whose flat buffer holds it (train/optim.c), or NULL */
    wgml_tensor *grad; /* accumulated gradient (lazy until evaluated), same shape */
    int view_kind;     /* views: which movement made it (for its gradient), WGML_VIEW_* */
    /* an evaluated tensor that a trainable tensor lies upstream of: the lazy node it was,
       kept so that a read before wgml_backward (printing a loss) does not cut the graph;
       backward passes its gradient through to it (owned: one reference) */
    wgml_tensor *tape;
};

/* Bytes an element of dtype takes (offsets and strides count elements of the tensor's dtype). */
static inline int wgml_dtype_bytes(int dtype) { return dtype == WGML_F16 ? 2 : 4; }
/* Bytes a node's result buffer needs: its elements, rounded up to whole 4-byte words (WGSL
   binds and copies words), then its tail (4-byte elements). */
static inline uint64_t wgml_result_bytes(int dtype, int64_t numel, int64_t tail)
{
    return ((uint64_t)numel * (uint64_t)wgml_dtype_bytes(dtype) + 3) / 4 * 4 + (uint64_t)tail * 4;
}

wgml_tensor *wgml_tensor_new(wgml_context *ctx, int ndim, const int64_t *shape);
/* A storage tensor of this shape over `buf` from element `offset` on (it holds a reference to
   buf): a view of a slice of a buffer the caller manages. NULL when out of host memory (the
   context's status says so). */
wgml_tensor *wgml_tensor_over(wgml_context *ctx, int ndim, const int64_t *shape, struct wgml_buffer *buf, int64_t offset);
/* A tensor in the error state (status and message), registered like any other. */
wgml_tensor *wgml_tensor_error(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool wgml_tensor_valid(const wgml_tensor *t);
void wgml_tensor_retain(wgml_tensor *t);
void wgml_tensor_unref(wgml_tensor *t);
void wgml_set_contiguous_strides(wgml_tensor *t);
bool wgml_is_contiguous(const wgml_tensor *t);
/* The storage-or-lazy tensor whose buffer t reads (t itself unless a view). */
static inline wgml_tensor *wgml_tensor_base(wgml_tensor *t)
{
    return t->op == WGML_TENSOR_VIEW ? t->src[0] : t;
}
/* The tensor holding t's error: t, or the base a view of it reads (a result left in error), or
   NULL where neither has one. */
static inline wgml_tensor *wgml_tensor_in_error(wgml_tensor *t)
{
    return t->status ? t : wgml_tensor_base(t)->status ? wgml_tensor_base(t) : NULL;
}
bool wgml_tensor_realized(wgml_tensor *t);
/* Computes the element count of a shape with overflow and validity checks. */
wgml_status wgml_shape_check(wgml_context *ctx, int ndim, const int64_t *shape, int64_t *numel);
void wgml_tensors_free_all(wgml_context *ctx);

#endif
