/*
 * Gather and scatter along an axis with i32 indices.
 *
 *   index_select(a, axis, idx)       y = a with the axis replaced by a[.., idx[j], ..]
 *   embedding(table [V, C], ids)     index_select(table, 0, ids flattened), shaped [ids..., C]
 *   index_add(a, axis, idx, src)     y = a; y[.., idx[i], ..] += src[.., i, ..]
 *
 * index_select is a plain gather (ops/gather.wgsl): a thread per output element, or per
 * four when rows allow vec4, reading a through its strides (a view is not copied). Its
 * gradient is index_add into zeros, and index_add's gradients are g (to a) and
 * index_select(g) (to src).
 *
 * index_add gives the same bits on every run: no float atomics, every sum in a fixed order.
 *   1. INDEX_SORT node(s) (ops/index_sort.wgsl): a stable LSD radix sort of the
 *      positions by index, 8 bits a pass, each pass three launches (per-tile digit counts by
 *      integer atomics, whose totals do not depend on order; one workgroup's scan of them;
 *      a stable placement, 256 positions a round, each ranked among the round's equal digits
 *      by popcounts of a per-digit bit mask of the round's threads). Keys are
 *      0..V, V standing for a bad index, so ceil(bits(V) / 8) passes: two per node (six
 *      launches), a second node for V >= 65536. O(n) work and memory, never O(V n).
 *   2. INDEX_ADD node (ops/index_add.wgsl): each index's run of sorted positions by
 *      binary search; runs cut at fixed chunks of L sorted positions (L a power of two near
 *      sqrt(n)): the part of a run that enters a chunk from an earlier one is summed there
 *      first ("heads"), then one thread per output element sums its run's first part
 *      position by position and adds the heads of the chunks the run goes on into, in order.
 *      So no thread loops more than L + n / L times (lavapipe ends loops past ~65000), and a
 *      run of any length is summed in an order fixed by n alone.
 *
 * Indices: an i32 tensor uploaded from the host knows its range, so an index out of range
 * is refused when the op is built (WGML_ERROR_INVALID_ARGUMENT naming the value). Indices
 * made on the GPU are checked there: a bad one reads nothing (its output is 0) and adds
 * nothing, and it sets the GPU error flags, which the next read reports.
 */
#include "ops/gather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/build.h"
#include "engine/executor.h"
#include "kernels/wgsl_sources.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

/* ---------------------------------------------------------------- checks */

static void shape_str(char *out, size_t n, const wgml_tensor *t) { wgml_format_shape(out, n, t->ndim, t->shape); }


/* ---------------------------------------------------------------- the public constructors */

/* the node, idx made contiguous (it is small) */
static wgml_tensor *select_node(wgml_context *ctx, wgml_tensor *a, int ax, wgml_tensor *idx)
{
    int64_t shape[WGML_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[ax] = idx->numel;
    wgml_tensor *ic = wgml_contiguous(ctx, idx);
    if (!ic || ic->status) return ic;
    wgml_tensor *src[2] = {a, ic};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_INDEX_SELECT, a->ndim, shape, 2, src);
    wgml_tensor_free(ic);
    if (t && !t->status) wgml_gather_params_of_set(t, (wgml_gather_params){.axis = ax});
    return t;
}

wgml_tensor *wgml_index_select(wgml_context *ctx, wgml_tensor *a, int axis, wgml_tensor *idx)
{
    if (!ctx) return NULL;
    CHECK_INPUT(ctx, a, "index_select", "a");
    CHECK_INPUT(ctx, idx, "index_select", "idx");
    char s[128], what[160];
    shape_str(s, sizeof s, a);
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "index_select: axis %d is out of range for shape %s", axis, s);
    if (idx->ndim != 1) {
        char si[128];
        shape_str(si, sizeof si, idx);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "index_select: idx %s must be 1-D", si);
    }
    snprintf(what, sizeof what, "axis %d of %s", ax, s);
    wgml_tensor *bad = wgml_check_indices(ctx, "index_select", idx, a->shape[ax], what);
    return bad ? bad : select_node(ctx, a, ax, idx);
}

wgml_tensor *wgml_embedding(wgml_context *ctx, wgml_tensor *table, wgml_tensor *ids)
{
    if (!ctx) return NULL;
    CHECK_INPUT(ctx, table, "embedding", "table");
    CHECK_INPUT(ctx, ids, "embedding", "ids");
    char s[128], si[128], what[160];
    shape_str(s, sizeof s, table);
    shape_str(si, sizeof si, ids);
    if (table->ndim != 2 || ids->ndim > 3)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "embedding: table %s must be [V, C] and ids %s of 1 to 3 dimensions", s, si);
    snprintf(what, sizeof what, "the rows of table %s", s);
    wgml_tensor *bad = wgml_check_indices(ctx, "embedding", ids, table->shape[0], what);
    if (bad) return bad;
    wgml_tensor *flat = wgml_reshape(ctx, ids, 1, &ids->numel);
    if (!flat || flat->status) return flat;
    wgml_tensor *rows = select_node(ctx, table, 0, flat);
    wgml_tensor_free(flat);
    if (!rows || rows->status) return rows;
    int64_t shape[WGML_MAX_DIMS];
    memcpy(shape, ids->shape, (size_t)ids->ndim * sizeof *shape);
    shape[ids->ndim] = table->shape[1];
    wgml_tensor *t = wgml_reshape(ctx, rows, ids->ndim + 1, shape);
    wgml_tensor_free(rows);
    return t;
}

/* INDEX_SORT nodes: two radix passes (16 bits of the keys 0..len) each */
wgml_tensor *wgml_index_sort(wgml_context *ctx, wgml_tensor *idx, int64_t len)
{
    int bits = 0;
    while (bits < 63 && (len >> bits) != 0) bits++;
    int passes = (bits + 7) / 8;
    int64_t shape[2] = {2, idx->numel};
    wgml_tensor *t = idx, *prev = NULL;
    for (int done = 0; done < passes; done += 2) {
        t = wgml_node(ctx, WGML_OP_INDEX_SORT, 2, shape, 1, &t);
        wgml_tensor_free(prev); /* the next node holds it */
        if (!t || t->status) return t;
        wgml_index_sort_params_of_set(t, (wgml_index_sort_params){.len = (int32_t)len, .first_bit = 8 * done,
                                                                  .passes = passes - done < 2 ? passes - done : 2,
                                                                  .raw = done == 0});
        prev = t;
    }
    return t;
}

/* the INDEX_ADD node: operands src, idx, its sort, and a unless the base is zeros */
static wgml_tensor *add_node(wgml_context *ctx, wgml_tensor *a, int ndim, const int64_t *shape, int ax, wgml_tensor *idx,
                             wgml_tensor *src)
{
    wgml_tensor *ic = wgml_contiguous(ctx, idx), *sorted = NULL, *sc = NULL, *ac = NULL, *t = NULL;
    if (!ic || ic->status) return ic;
    sorted = wgml_index_sort(ctx, ic, shape[ax]);
    sc = wgml_contiguous(ctx, src);
    ac = a ? wgml_contiguous(ctx, a) : NULL;
    wgml_tensor *in[4] = {sc, ic, sorted, ac};
    for (int i = 0; i < 4; i++)
        if ((i < 3 || a) && (!in[i] || in[i]->status)) {
            t = in[i];
            in[i] = NULL; /* returned: not freed */
            goto out;
        }
    t = wgml_node(ctx, WGML_OP_INDEX_ADD, ndim, shape, a ? 4 : 3, in);
    if (t && !t->status) wgml_gather_params_of_set(t, (wgml_gather_params){.axis = ax});
out:
    for (int i = 0; i < 4; i++) wgml_tensor_free(in[i]);
    return t;
}

wgml_tensor *wgml_index_add(wgml_context *ctx, wgml_tensor *a, int axis, wgml_tensor *idx, wgml_tensor *src)
{
    if (!ctx) return NULL;
    CHECK_INPUT(ctx, a, "index_add", "a");
    CHECK_INPUT(ctx, idx, "index_add", "idx");
    CHECK_INPUT(ctx, src, "index_add", "src");
    char s[128], si[128], ss[128], what[160];
    shape_str(s, sizeof s, a);
    shape_str(si, sizeof si, idx);
    shape_str(ss, sizeof ss, src);
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "index_add: axis %d is out of range for shape %s", axis, s);
    if (idx->ndim != 1) return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "index_add: idx %s must be 1-D", si);
    bool fits = src->ndim == a->ndim;
    for (int d = 0; fits && d < a->ndim; d++) fits = src->shape[d] == (d == ax ? idx->numel : a->shape[d]);
    if (!fits)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "index_add: src %s must be a's shape %s with axis %d of idx's length %lld",
                                 ss, s, ax, (long long)idx->numel);
    if (a->dtype != WGML_F32 || src->dtype != WGML_F32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "index_add: a is %s and src %s; both must be f32",
                                 wgml_dtype_name(a->dtype), wgml_dtype_name(src->dtype));
    snprintf(what, sizeof what, "axis %d of %s", ax, s);
    wgml_tensor *bad = wgml_check_indices(ctx, "index_add", idx, a->shape[ax], what);
    return bad ? bad : add_node(ctx, a, a->ndim, a->shape, ax, idx, src);
}

wgml_tensor *wgml_index_add_zeros(wgml_context *ctx, int ndim, const int64_t *shape, int axis, wgml_tensor *idx,
                                  wgml_tensor *src)
{
    CHECK_INPUT(ctx, idx, "index_add", "idx");
    CHECK_INPUT(ctx, src, "index_add", "src");
    return add_node(ctx, NULL, ndim, shape, axis, idx, src);
}

/* ---------------------------------------------------------------- launches */

static wgml_status bind_errors(wgml_context *ctx, wgml_launch *l, int b)
{
    if (!(l->raw[b] = wgml_gpu_errors_buffer(ctx))) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "no GPU memory for the error flags");
    return WGML_OK;
}

/* y [d0, d1, d2, d3] (t's shape padded at the front) from a through its strides */
wgml_status wgml_build_index_select(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *a = t->src[0], *idx = t->src[1];
    int pad = 4 - t->ndim, ax = wgml_gather_params_of(t).axis + pad;
    uint64_t d[4], s[4];
    for (int k = 0; k < 4; k++) {
        d[k] = k < pad ? 1 : (uint64_t)t->shape[k - pad];
        /* an axis of one entry is never stepped along: stride 0 keeps the vec4 test simple */
        s[k] = k < pad || a->shape[k - pad] == 1 ? 0 : (uint64_t)a->stride[k - pad];
    }
    bool v4 = ax != 3 && d[3] % 4 == 0 && s[3] == 1 && a->offset % 4 == 0 && s[0] % 4 == 0 && s[1] % 4 == 0 &&
              s[2] % 4 == 0;
    uint32_t vw = v4 ? 4 : 1;
    wgml_status st = wgml_kernel_pipeline_variant(ctx, "gather", vw, v4 ? "alias W = vec4<u32>;\nconst VW = 4u;\n" : "alias W = u32;\nconst VW = 1u;\n", l);
    if (st) return st;
    uint64_t units = (uint64_t)t->numel / vw;
    uint32_t p[16] = {(uint32_t)d[0], (uint32_t)d[1], (uint32_t)d[2], (uint32_t)(d[3] / vw),
                      (uint32_t)s[0], (uint32_t)s[1], (uint32_t)s[2], (uint32_t)s[3],
                      (uint32_t)ax, (uint32_t)a->shape[ax - pad], (uint32_t)a->offset, (uint32_t)idx->offset,
                      (uint32_t)units, 0, 0, 0};
    p[13] = wgml_grid(ctx, (units + 255) / 256, l->groups);
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    l->buffers[0] = wgml_tensor_base(a);
    l->buffers[1] = wgml_tensor_base(idx);
    l->buffers[2] = t;
    l->nbuffers = 4;
    snprintf(l->what, sizeof l->what, "index_select of %lld entries", (long long)idx->numel);
    *count = 1;
    return bind_errors(ctx, l, 3);
}

/* Tiles of the radix sort: 256 pairs a round, up to 64 rounds, about 128 tiles (the scan's
   work is 2 x tiles per thread, the placement's 25 x rounds). */
#define SORT_TILES 128
#define SORT_MAX_ROUNDS 64

/* [2, n] pairs, sorted by bits [shift, shift + 8 passes) of their keys; up to two passes of
   three launches (ops/index_sort.wgsl), the first pass's pairs in the scratch buffer
   when there are two */
wgml_status wgml_build_index_sort(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "index_sort", l);
    if (st) return st;
    if ((st = bind_errors(ctx, l, 3))) return st;
    wgml_tensor *in = t->src[0];
    uint64_t n = (uint64_t)t->shape[1];
    wgml_index_sort_params sp = wgml_index_sort_params_of(t);
    int passes = sp.passes;
    uint64_t rounds = (n + 256 * SORT_TILES - 1) / (256 * SORT_TILES);
    if (rounds > SORT_MAX_ROUNDS) rounds = SORT_MAX_ROUNDS;
    if (rounds < 1) rounds = 1;
    uint64_t nb = (n + 256 * rounds - 1) / (256 * rounds);
    l->buffers[0] = wgml_tensor_base(in);
    l->buffers[1] = t;
    l->scratch_mask = 1u << 2;
    l->nbuffers = 4;
    l->params_size = 48;
    wgml_launch proto = *l;
    l->scratch_bytes = 4 * (256 * nb + (passes == 2 ? 2 * n : 0));
    for (int q = 0; q < passes; q++)
        for (int stage = 0; stage < 3; stage++) {
            wgml_launch *c = &l[3 * q + stage];
            if (c != l) *c = proto;
            uint32_t p[12] = {(uint32_t)n, (uint32_t)nb, (uint32_t)rounds, (uint32_t)(sp.first_bit + 8 * q),
                              (uint32_t)stage, (uint32_t)(sp.raw && q == 0), (uint32_t)sp.len, (uint32_t)in->offset,
                              (uint32_t)(q == 1), (uint32_t)(q == 0 && passes == 2), (uint32_t)(256 * nb), 0};
            memcpy(c->params, p, sizeof p);
            c->groups[0] = stage == 1 ? 1 : (uint32_t)nb;
            c->groups[1] = c->groups[2] = 1;
            c->loop_trips = stage == 0 ? rounds : stage == 1 ? 2 * nb + 8 : 25 * rounds;
            snprintf(c->what, sizeof c->what, "index_sort of %llu indices (stage %d)", (unsigned long long)n, stage);
        }
    *count = 3 * passes;
    return WGML_OK;
}

/* y [outer, len, inner] = a + src's [outer, n, inner] rows summed by the sorted positions
   (ops/index_add.wgsl): run starts, chunk heads, rows */
wgml_status wgml_build_index_add(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *src = t->src[0], *sorted = t->src[2], *a = t->nsrc > 3 ? t->src[3] : NULL;
    int ax = wgml_gather_params_of(t).axis;
    uint64_t outer = 1, inner = 1, len = (uint64_t)t->shape[ax], n = (uint64_t)sorted->shape[1];
    for (int d = 0; d < ax; d++) outer *= (uint64_t)t->shape[d];
    for (int d = ax + 1; d < t->ndim; d++) inner *= (uint64_t)t->shape[d];
    bool v4 = inner % 4 == 0 && src->offset % 4 == 0 && (!a || a->offset % 4 == 0);
    uint32_t vw = v4 ? 4 : 1;
    wgml_status st = wgml_kernel_pipeline_variant(ctx, "index_add", vw,
                                      v4 ? "alias V = vec4<f32>;\nconst VW = 4u;\n"
                                           "fn pack(v: V) -> vec4<f32> { return v; }\n"
                                           "fn unpack(v: vec4<f32>) -> V { return v; }\n"
                                         : "alias V = f32;\nconst VW = 1u;\n"
                                           "fn pack(v: V) -> vec4<f32> { return vec4<f32>(v, 0.0, 0.0, 0.0); }\n"
                                           "fn unpack(v: vec4<f32>) -> V { return v.x; }\n",
                                      l);
    if (st) return st;
    /* chunks of L sorted positions, L a power of two >= sqrt(n): a thread loops at most
       L + n / L times */
    uint64_t L = 64;
    while (L * L < n) L *= 2;
    uint64_t chunks = (n + L - 1) / L, iu = inner / vw;
    l->buffers[0] = wgml_tensor_base(sorted);
    l->buffers[1] = wgml_tensor_base(src);
    l->buffers[2] = wgml_tensor_base(a ? a : src);
    l->buffers[3] = t;
    l->scratch_mask = 1u << 4;
    l->nbuffers = 5;
    l->params_size = 48;
    wgml_launch proto = *l;
    l->scratch_bytes = 4 * ((len + 1) + outer * chunks * inner);
    const uint64_t threads[3] = {len + 1, outer * chunks * iu, outer * len * iu};
    const uint64_t trips[3] = {34, L + vw, L + chunks * (1 + vw)}; /* the heads' loads and stores loop over VW */
    static const char *const stage_name[3] = {"run starts", "chunk heads", "rows"};
    for (int stage = 0; stage < 3; stage++) {
        wgml_launch *c = &l[stage];
        if (stage) *c = proto;
        uint32_t p[12] = {(uint32_t)len, (uint32_t)n, (uint32_t)iu, (uint32_t)outer,
                          (uint32_t)L, (uint32_t)chunks, (uint32_t)(a ? a->offset : 0), (uint32_t)src->offset,
                          (uint32_t)stage, a != NULL, 0, (uint32_t)(len + 1)};
        p[10] = wgml_grid(ctx, (threads[stage] + 255) / 256, c->groups);
        memcpy(c->params, p, sizeof p);
        c->loop_trips = trips[stage];
        snprintf(c->what, sizeof c->what, "index_add of %llu rows (%s)", (unsigned long long)n, stage_name[stage]);
    }
    *count = 3;
    return WGML_OK;
}

/* ---------------------------------------------------------------- gradient rules and entries */

typedef wgml_tensor T;

/* index_select: each entry goes back where it came from, summed where an index repeats
   (index_add into zeros, deterministic); none to the indices (nor to an i32 table) */
static wgml_status vjp_index_select(wgml_context *c, T *t, T *g, T **gin)
{
    T *a = t->src[0];
    if (a->dtype == WGML_F32) gin[0] = wgml_index_add_zeros(c, a->ndim, a->shape, wgml_gather_params_of(t).axis, t->src[1], g);
    return WGML_OK;
}

/* index_add's operands are src, idx, its sort, then a (absent: zeros): g itself to a, g's
   entries at the indices to src */
static wgml_status vjp_index_add(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_index_select(c, g, wgml_gather_params_of(t).axis, t->src[1]);
    if (t->nsrc > 3) gin[3] = g;
    return WGML_OK;
}

/* gather and scatter (ops/gather.c): a gather copies bits; index_add's sums of terms up
   to 10 of both signs cancel (as sum's) */
WGML_OP_ENTRY(INDEX_SELECT) = {.name = "index_select", .kind = WGML_KIND_KERNEL, .arity = 2, .build = wgml_build_index_select,
                          .vjp = vjp_index_select, .any_dtype = 1, .i32_only = 2, .out = WGML_OUT_SAME, DOMAIN(-10, 10, 0, 0), .tol = 0};
WGML_OP_ENTRY(INDEX_SORT) = {.name = "index_sort", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_index_sort,
                        .i32_only = 1, .out = WGML_OUT_I32, .no_grad = "made by index_add only (integer positions)",
                        DOMAIN(0, 300, 0, 0), .tol = 0};
WGML_OP_ENTRY(INDEX_ADD) = {.name = "index_add", .kind = WGML_KIND_KERNEL, .arity = 4, .build = wgml_build_index_add,
                       .vjp = vjp_index_add, .i32_only = 6, DOMAIN(-10, 10, -10, 10), ARITH, FLOOR(10)};
