/*
 * Cumulative sums along an axis and rotary position embedding: their public constructors
 * (which check the inputs and record a node) and the launches of their KERNEL entries
 * (ops/cumsum.wgsl, ops/rope.wgsl). Their gradient rules and entries are at the end.
 */
#include "ops/scan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/build.h"
#include "engine/executor.h"
#include "kernels/wgsl_sources.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

/* ---------------------------------------------------------------- cumsum */

wgml_tensor *wgml_cumsum(wgml_context *ctx, wgml_tensor *a, int axis, int reverse)
{
    if (!ctx) return NULL;
    wgml_tensor *bad = wgml_check_input(ctx, a, "cumsum", "a");
    if (bad) return bad;
    int ax = wgml_axis(axis, a->ndim);
    if (ax < 0) {
        char s[128];
        wgml_format_shape(s, sizeof s, a->ndim, a->shape);
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "cumsum: axis %d is out of range for shape %s", axis, s);
    }
    wgml_tensor *c = wgml_as_contiguous(ctx, a);
    if (!c) return NULL;
    wgml_tensor *t = wgml_node_consuming(ctx, WGML_OP_CUMSUM, a->ndim, a->shape, 1, &c);
    if (t && t->op == WGML_OP_CUMSUM) {
        wgml_cumsum_params_of_set(t, (wgml_cumsum_params){.axis = ax, .reverse = reverse != 0});
    }
    return t;
}

/* A workgroup scans a row a tile of 1024 elements at a time; each tile runs 25 loop
   iterations per thread (4 loads, 4 sums, 8 steps of the workgroup scan, 4 rescans, 4
   stores, the tile loop's own). */
#define SCAN_TILE 1024
#define SCAN_TILE_TRIPS 25
/* rows at least this long (inner == 1) get a workgroup each; shorter ones a thread */
#define SCAN_ROW_MIN 64
/* with fewer rows than this, long rows are cut into blocks of at least 4 tiles, one
   workgroup each, so that a GPU has this many workgroups to run (then 2 more launches add
   the blocks' totals) */
#define SCAN_WORKGROUPS 256
#define SCAN_MIN_TILES 4
/* with fewer columns (threads) than this, a long axis is cut into blocks the same way */
#define SCAN_COLUMNS 4096
#define SCAN_COLUMN_MIN 64

/* x [outer, len, inner] -> y of the same shape, in scan order (reverse: from the end). One
   launch when the axis is one block, else three sharing the node's scratch buffer of block
   totals [outer, nblocks, inner] (see ops/cumsum.wgsl). */
wgml_status wgml_build_cumsum(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "cumsum", l);
    if (st) return st;
    wgml_tensor *x = t->src[0];
    wgml_cumsum_params cp = wgml_cumsum_params_of(t);
    int ax = cp.axis;
    uint64_t outer = 1, inner = 1, len = (uint64_t)x->shape[ax], budget = ctx->rt.loop_limit;
    for (int d = 0; d < ax; d++) outer *= (uint64_t)x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= (uint64_t)x->shape[d];
    bool rows = inner == 1 && len >= SCAN_ROW_MIN;
    uint64_t block = len;
    if (rows) {
        uint64_t tiles = (len + SCAN_TILE - 1) / SCAN_TILE, max_tiles = (budget - 1) / SCAN_TILE_TRIPS;
        uint64_t want = outer >= SCAN_WORKGROUPS ? 1 : (SCAN_WORKGROUPS + outer - 1) / outer; /* blocks per row */
        uint64_t per = (tiles + want - 1) / want; /* tiles per block */
        if (per < SCAN_MIN_TILES) per = SCAN_MIN_TILES;
        if (per > max_tiles) per = max_tiles;
        block = per * SCAN_TILE;
    } else if (len > SCAN_COLUMN_MIN && (outer * inner < SCAN_COLUMNS || len + 1 > budget)) {
        block = (uint64_t)ceil(sqrt((double)len)); /* as many blocks as each block has elements */
        if (block < SCAN_COLUMN_MIN) block = SCAN_COLUMN_MIN;
    }
    if (block > len) block = len;
    uint64_t nblocks = block ? (len + block - 1) / block : 0;
    uint64_t trips = rows ? (block + SCAN_TILE - 1) / SCAN_TILE * SCAN_TILE_TRIPS + 1 : block + 1;
    if (block == 0 || trips > budget || nblocks + 1 > budget)
        return wgml_fail(ctx, WGML_ERROR_LIMIT, "cumsum over %llu elements: no split of it stays under this adapter's loop limit of %llu",
                         (unsigned long long)len, (unsigned long long)budget);
    uint32_t p[12] = {(uint32_t)outer, (uint32_t)len, (uint32_t)inner, rows ? 0u : 1u,
                      (uint32_t)x->offset, (uint32_t)cp.reverse, (uint32_t)block, (uint32_t)nblocks,
                      0, t->dtype == WGML_I32, 0, 0};
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = t;
    l->buffers[2] = NULL; /* the block totals */
    l->scratch_mask = 1u << 2;
    l->scratch_bytes = nblocks > 1 ? outer * nblocks * inner * 4 : 4;
    l->nbuffers = 3;
    l->params_size = sizeof p;
    l->loop_trips = trips;
    snprintf(l->what, sizeof l->what, "cumsum over %llu elements", (unsigned long long)len);
    /* the scan: a workgroup per (row, block), or a thread per (outer, block, inner) */
    p[8] = wgml_grid(ctx, rows ? outer * nblocks : (outer * nblocks * inner + 255) / 256, l->groups);
    memcpy(l->params, p, sizeof p);
    *count = 1;
    if (nblocks == 1) return WGML_OK;
    /* the totals' exclusive prefix sums, a thread per (outer, inner); then a thread per
       element adds its block's */
    l[1] = l[0];
    l[1].scratch_bytes = 0;
    l[1].loop_trips = nblocks + 1;
    p[3] = 2;
    p[8] = wgml_grid(ctx, (outer * inner + 255) / 256, l[1].groups);
    memcpy(l[1].params, p, sizeof p);
    l[2] = l[0];
    l[2].scratch_bytes = 0;
    l[2].loop_trips = 0;
    p[3] = 3;
    p[8] = wgml_grid(ctx, (outer * len * inner + 255) / 256, l[2].groups);
    memcpy(l[2].params, p, sizeof p);
    *count = 3;
    return WGML_OK;
}

/* ---------------------------------------------------------------- rope */

/* frequencies one launch's parameter block holds (ops/rope.wgsl: 61 vec4 after a
   48-byte header) */
#define ROPE_FREQS 244
#define ROPE_PARAMS_BYTES 1024
_Static_assert(48 + ROPE_FREQS * 4 == ROPE_PARAMS_BYTES && ROPE_PARAMS_BYTES <= WGML_MAX_PARAMS_BYTES, "rope's parameter block");

wgml_tensor *wgml_rope(wgml_context *ctx, wgml_tensor *x, int64_t pos_offset, float base)
{
    return wgml_rope_ex(ctx, x, &(wgml_rope_desc){.pos_offset = pos_offset, .base = base});
}

wgml_tensor *wgml_rope_ex(wgml_context *ctx, wgml_tensor *x, const wgml_rope_desc *desc)
{
    if (!ctx) return NULL;
    wgml_tensor *bad = wgml_check_input(ctx, x, "rope", "x");
    if (bad) return bad;
    wgml_rope_desc d = desc ? *desc : (wgml_rope_desc){0};
    float base = d.base == 0 ? 10000.0f : d.base;
    char s[128];
    wgml_format_shape(s, sizeof s, x->ndim, x->shape);
    int64_t D = x->shape[x->ndim - 1], T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 0;
    if (x->ndim < 2 || D % 2)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "rope: x %s must be [..., T, D] (at least 2-D) with D even", s);
    if (D / 2 > (int64_t)ROPE_FREQS * WGML_MAX_NODE_LAUNCHES)
        return wgml_tensor_error(ctx, WGML_ERROR_LIMIT, "rope: x %s: D = %lld is past the %d this kernel rotates", s,
                                 (long long)D, 2 * ROPE_FREQS * WGML_MAX_NODE_LAUNCHES);
    if (!(base > 0) || isinf(base))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "rope: base = %g must be a finite number > 0 (0 means 10000)", base);
    /* positions t + pos_offset are converted to f32 on the GPU: exactly, up to 2^24 */
    if (d.pos_offset < 0 || d.pos_offset > (INT64_C(1) << 24) + 1 - T)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "rope: pos_offset %lld with T = %lld (x %s): positions pos_offset .. pos_offset + T - 1 "
                                 "must lie in 0..2^24", (long long)d.pos_offset, (long long)T, s);
    /* the kernel reduces angles below 2^31 exactly (rope.wgsl); past that only a base below 1
       (frequencies above 1) reaches */
    int64_t last_pos = d.pos_offset + T - 1;
    double freq_max = fmax(1.0, 1.0 / pow(base, (double)(D - 2) / (double)D)) * (1 + 1e-6);
    if ((double)last_pos * freq_max >= 2147483648.0)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "rope: base = %g gives frequencies up to %g, and position %lld then an angle of %g, past "
                                 "the 2^31 this kernel reduces exactly",
                                 base, freq_max, (long long)last_pos, (double)last_pos * freq_max);
    wgml_tensor *c = wgml_as_contiguous(ctx, x);
    if (!c) return NULL;
    wgml_tensor *t = wgml_node_consuming(ctx, WGML_OP_ROPE, x->ndim, x->shape, 1, &c);
    if (t && t->op == WGML_OP_ROPE) {
        wgml_rope_params_of_set(t, (wgml_rope_params){.pos_offset = (int32_t)d.pos_offset, .interleaved = d.interleaved != 0,
                                                      .inverse = d.inverse != 0, .base = base});
    }
    return t;
}

/* x [rows, D] -> y [rows, D]; a launch per ROPE_FREQS pairs */
wgml_status wgml_build_rope(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    const char *mul_wide = wgml_wgsl_find("mul_wide"); /* rope.wgsl's 32x32 -> 64 multiply */
    if (!mul_wide) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel mul_wide is not built in");
    wgml_status st = wgml_kernel_pipeline_variant(ctx, "rope", 0, mul_wide, l);
    if (st) return st;
    wgml_tensor *x = t->src[0];
    int64_t D = x->shape[x->ndim - 1], T = x->shape[x->ndim - 2], half = D / 2, rows = x->numel / D;
    wgml_rope_params p = wgml_rope_params_of(t);
    float base = p.base;
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = t;
    l->nbuffers = 2;
    l->params_size = ROPE_PARAMS_BYTES;
    snprintf(l->what, sizeof l->what, "rope of rows of %lld", (long long)D);
    int n = 0;
    for (int64_t j0 = 0; j0 < half; j0 += ROPE_FREQS, n++) {
        if (n) l[n] = l[0];
        int64_t nj = half - j0 < ROPE_FREQS ? half - j0 : ROPE_FREQS;
        uint32_t h[12] = {(uint32_t)(rows * nj), (uint32_t)half, (uint32_t)T, (uint32_t)p.pos_offset,
                          (uint32_t)x->offset, (uint32_t)j0, (uint32_t)nj, 0,
                          (uint32_t)p.interleaved, (uint32_t)p.inverse, 0, 0};
        h[7] = wgml_grid(ctx, ((uint64_t)rows * (uint64_t)nj + 255) / 256, l[n].groups);
        /* as HF: 1 / base^(2j / D), each step in f32 */
        float freq[ROPE_FREQS] = {0};
        for (int64_t jj = 0; jj < nj; jj++) freq[jj] = 1.0f / powf(base, (float)(2 * (j0 + jj)) / (float)D);
        memcpy(l[n].params, h, sizeof h);
        memcpy(l[n].params + sizeof h, freq, sizeof freq);
    }
    *count = n;
    return WGML_OK;
}

/* ---------------------------------------------------------------- gradient rules and entries */

typedef wgml_tensor T;

/* d/da_j of sum_i g_i cumsum(a)_i is the sum of g_i over i >= j: the cumsum of the other direction */
static wgml_status vjp_cumsum(wgml_context *c, T *t, T *g, T **gin)
{
    wgml_cumsum_params p = wgml_cumsum_params_of(t);
    gin[0] = wgml_cumsum(c, g, p.axis, !p.reverse);
    return WGML_OK;
}

/* a rotation's transpose is the rotation by the opposite angle */
static wgml_status vjp_rope(wgml_context *c, T *t, T *g, T **gin)
{
    wgml_rope_params p = wgml_rope_params_of(t);
    wgml_rope_desc d = {.pos_offset = p.pos_offset, .base = p.base, .interleaved = p.interleaved, .inverse = !p.inverse};
    gin[0] = wgml_rope_ex(c, g, &d);
    return WGML_OK;
}

/* running sums cancel as sums do (floor as sum); i32 too, wrapping */
WGML_OP_ENTRY(CUMSUM) = {.name = "cumsum", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_cumsum, .vjp = vjp_cumsum,
                    .any_dtype = 1, .out = WGML_OUT_SAME, DOMAIN(-10, 10, 0, 0), ARITH, FLOOR(10)};
/* x1 cos - x2 sin cancels to near 0 on O(1) inputs; the angle's f32 rounding (~6e-8 of
   it) grows with the position (tests/test_rope_cumsum.c) */
WGML_OP_ENTRY(ROPE) = {.name = "rope", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_rope, .vjp = vjp_rope,
                  DOMAIN(-2, 2, 0, 0), TRANSC, FLOOR(1)};
