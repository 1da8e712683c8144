/*
 * Launch builders for the hand-written kernels of src/kernels/: reductions along an axis and
 * row ops along the last axis. Each fills the kernel's parameter block (the Params struct at
 * the top of its .wgsl file) and its buffers in binding order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/executor.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce.h"
#include "kernels/wgsl_sources.h"

/* reduce.wgsl switches on the op's code, P.op: the codes of the reductions it knows */
wgml_status wgml_reduce_pipeline(wgml_context *ctx, wgml_launch *l)
{
    char header[256];
    snprintf(header, sizeof header,
             "const OP_SUM = %du;\nconst OP_MEAN = %du;\nconst OP_MAX = %du;\nconst OP_ARGMAX = %du;\n"
             "const OP_MIN = %du;\nconst OP_ARGMIN = %du;\n",
             WGML_OP_SUM, WGML_OP_MEAN, WGML_OP_MAX, WGML_OP_ARGMAX, WGML_OP_MIN, WGML_OP_ARGMIN);
    return wgml_kernel_pipeline_variant(ctx, "reduce", 0, header, l);
}

static void put_u32(wgml_launch *l, int i, uint32_t v) { memcpy(l->params + 4 * i, &v, 4); }
static void put_f32(wgml_launch *l, int i, float v) { memcpy(l->params + 4 * i, &v, 4); }

/* Axis elements each thread folds, at most, before a long axis is split over workgroups: a
   GPU wants more than one workgroup per output when there are few outputs, and lavapipe's
   loop limit needs it for very long axes. */
#define REDUCE_TRIPS 64
#define REDUCE_TREE_TRIPS 9 /* the tree over 256 partials */

void wgml_reduce_columns(wgml_context *ctx, wgml_launch *l, uint64_t outer, uint64_t len, uint64_t inner, uint32_t in_off,
                         bool last)
{
    /* a thread per output folding the axis (stage 3), or where the outputs are too few to
       fill a GPU, a workgroup per output and a tree (stage 0); not on a CPU adapter, where a
       workgroup's barriers cost more than the whole fold (lavapipe: 70 ms for 1024 outputs
       of 16) */
    bool tree = last && outer * inner < 65536 && len >= 16 && strcmp(ctx->rt.info.adapter_type, "CPU") != 0;
    uint32_t p[12] = {(uint32_t)outer, (uint32_t)len, (uint32_t)inner, (uint32_t)WGML_OP_SUM, in_off, 0, 0, tree ? 0 : 3, 0, 1, 0, 0};
    p[5] = wgml_grid(ctx, tree ? outer * inner : (outer * inner + 255) / 256, l->groups);
    memcpy(l->params, p, sizeof p);
    l->params_size = sizeof p;
    l->loop_trips = tree ? (len + 255) / 256 + REDUCE_TREE_TRIPS : len;
    snprintf(l->what, sizeof l->what, "sum over %llu of [%llu, %llu, %llu]", (unsigned long long)len, (unsigned long long)outer,
             (unsigned long long)len, (unsigned long long)inner);
}

/* x [outer, len, inner] -> y [outer, inner]; one launch, or two through partial results when
   the axis is long (see ops/reduce.wgsl) */
wgml_status wgml_build_reduce(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_status st = wgml_reduce_pipeline(ctx, l);
    if (st) return st;
    wgml_tensor *x = t->src[0];
    int ax = t->iparam[0];
    uint64_t outer = 1, inner = 1, len = (uint64_t)x->shape[ax];
    for (int d = 0; d < ax; d++) outer *= (uint64_t)x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= (uint64_t)x->shape[d];
    uint64_t trips = (len + 255) / 256;
    /* the chunk one stage-1 thread folds: REDUCE_TRIPS elements, fewer under a small loop limit */
    uint64_t budget = ctx->rt.loop_limit > REDUCE_TREE_TRIPS + 1 ? ctx->rt.loop_limit - REDUCE_TREE_TRIPS : 1;
    if (budget > REDUCE_TRIPS) budget = REDUCE_TRIPS;
    bool split = trips > budget && (outer * inner < 1024 || trips + REDUCE_TREE_TRIPS > ctx->rt.loop_limit);
    uint64_t chunk = 256 * budget, parts = split ? (len + chunk - 1) / chunk : 1;
    uint32_t p[12] = {(uint32_t)outer, (uint32_t)len, (uint32_t)inner, (uint32_t)t->op, (uint32_t)x->offset, 0, 0, 0,
                      (uint32_t)chunk, (uint32_t)parts, 0, 0};
    float neg_inf = -INFINITY;
    memcpy(&p[6], &neg_inf, 4);
    l->params_size = sizeof p;
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = t;
    l->nbuffers = 2;
    snprintf(l->what, sizeof l->what, "%s over %llu elements", wgml_op_table[t->op].name, (unsigned long long)len);
    /* columns (a long axis of short rows: a bias's gradient sums [rows, N] over rows): one
       workgroup per output would read the axis inner elements apart, a sector per value;
       instead threads along inner fold chunks of the axis into partials, and then those */
    /* (chunks of 16 rows: enough threads, each with few dependent loads, to cover the memory's
       latency; 64 ran at a quarter of the H100's bandwidth) */
    uint64_t c = budget < 16 ? budget : 16;
    while (c > 8 && len % c) c--;
    if (t->op == WGML_OP_SUM && inner >= 32 && len > budget && len % c == 0 && c >= 8 &&
        len / c + 1 < ctx->rt.loop_limit && (uint64_t)(len / c) * outer * inner * 4 <= wgml_binding_limit(ctx)) {
        wgml_reduce_columns(ctx, l, outer * (len / c), c, inner, (uint32_t)x->offset, false);
        wgml_launch *l2 = l + 1;
        *l2 = *l;
        l->scratch_bytes = outer * (len / c) * inner * 4;
        l->buffers[1] = NULL;
        l->scratch_mask = 1u << 1;
        wgml_reduce_columns(ctx, l2, outer, len / c, inner, 0, true);
        l2->buffers[0] = NULL;
        l2->scratch_mask = 1u << 0;
        *count = 2;
        return WGML_OK;
    }
    if (len <= budget) { /* a short axis: a thread per output */
        l->loop_trips = len;
        p[7] = 3;
        p[5] = wgml_grid(ctx, (outer * inner + 255) / 256, l->groups);
        memcpy(l->params, p, sizeof p);
        return WGML_OK;
    }
    if (!split) {
        l->loop_trips = trips + REDUCE_TREE_TRIPS;
        p[5] = wgml_grid(ctx, outer * inner, l->groups);
        memcpy(l->params, p, sizeof p);
        return WGML_OK;
    }
    /* stage 1 writes [outer, parts, inner] partials (argmax: and their indices after them)
       into the node's scratch buffer; stage 2 reads them */
    uint64_t partials = outer * parts * inner;
    wgml_launch *l2 = l + 1;
    *l2 = *l;
    l->scratch_bytes = partials * 4 * (t->op == WGML_OP_ARGMAX || t->op == WGML_OP_ARGMIN ? 2 : 1);
    l->buffers[1] = NULL;
    l->scratch_mask = 1u << 1;
    l->loop_trips = budget + REDUCE_TREE_TRIPS;
    p[7] = 1;
    p[10] = (uint32_t)partials;
    p[5] = wgml_grid(ctx, partials, l->groups);
    memcpy(l->params, p, sizeof p);
    l2->buffers[0] = NULL;
    l2->scratch_mask = 1u << 0;
    l2->loop_trips = (parts + 255) / 256 + REDUCE_TREE_TRIPS;
    p[7] = 2;
    p[4] = 0;
    p[5] = wgml_grid(ctx, outer * inner, l2->groups);
    memcpy(l2->params, p, sizeof p);
    *count = 2;
    return WGML_OK;
}

/* Row units kept in registers per thread, in floats: rows of up to 256 * 32 = 8192 floats are
   read from memory once; longer ones are read again by each pass. */
#define ROW_CACHE_FLOATS 32

/* The row kernel specialised by the header that ops/row.wgsl expects: its unit
   width (vec4 or f32), op, weight/bias flags, team size and register cache; those are its
   variant key. The losses bind the GPU error flags after the output. */
static wgml_status row_pipeline(wgml_context *ctx, uint32_t op, uint32_t flags, bool v4, uint32_t team,
                                uint32_t k, bool cached, wgml_launch *l)
{
    bool loss = op == WGML_OP_CROSS_ENTROPY || op == WGML_OP_CROSS_ENTROPY_GRAD;
    uint32_t key[7] = {WGML_KEY_ROW, op, flags, v4, team, k, cached};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 7))) return WGML_OK;
    const char *body = wgml_wgsl_find("row");
    if (!body) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel row is not built in");
    wgml_sbuf b = {0};
    wgml_op_codes_put(&b);
    wgml_sbuf_put(&b,
                  "alias V = %s;\nalias U = %s;\nconst VW = %uu;\nconst LANES = %s;\n"
                  "alias WV = %s;\nconst OP = %uu;\nconst FLAGS = %uu;\nconst TEAM = %uu;\n"
                  "const CACHED = %s;\nconst K = %uu;\n",
                  v4 ? "vec4<f32>" : "f32", v4 ? "vec4<u32>" : "u32", v4 ? 4u : 1u,
                  v4 ? "vec4<u32>(0u, 1u, 2u, 3u)" : "0u",
                  v4 && !loss ? "vec4<f32>" : "f32", /* losses: one label, gradient per row */
                  op, flags, team, cached ? "true" : "false", k);
    if (loss)
        wgml_sbuf_put(&b, "@group(0) @binding(5) var<storage, read_write> gpu_errors: array<atomic<u32>, 4>;\n"
                          "fn flag_label(row: u32) {\n"
                          "    atomicOr(&gpu_errors[0], %uu);\n"
                          "    atomicMax(&gpu_errors[1], 0xffffffffu - row);\n}\n",
                      (unsigned)WGML_GPU_ERROR_LABEL);
    else
        wgml_sbuf_put(&b, "fn flag_label(row: u32) {}\n");
    wgml_sbuf_put(&b, "%s", body);
    l->pipeline = wgml_pipeline_add(ctx, key, 7, wgml_sbuf_take(&b), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

/* x [rows, n], weight [n], bias [n] -> y [rows, n] */
wgml_status wgml_build_row(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *x = t->src[0];
    bool loss = t->op == WGML_OP_CROSS_ENTROPY || t->op == WGML_OP_CROSS_ENTROPY_GRAD;
    bool grad = t->op == WGML_OP_LAYERNORM_GRAD || t->op == WGML_OP_RMSNORM_GRAD;
    int has_w = !loss && t->iparam[0], has_b = !loss && !grad && t->iparam[1];
    /* losses: labels take the weight's binding, row gradients the bias's; the norms' gradients:
       the upstream gradient [rows, n] takes the bias's */
    wgml_tensor *w = loss ? t->src[1] : has_w ? t->src[1] : x;
    wgml_tensor *b = t->op == WGML_OP_CROSS_ENTROPY_GRAD || grad ? t->src[2] : has_b ? t->src[1 + has_w] : x;
    int64_t n = x->shape[x->ndim - 1], rows = x->numel / n;
    uint32_t op = (uint32_t)t->op, flags = (uint32_t)(has_w | (has_b << 1));
    /* vec4 loads and stores when every row, the weight and the bias start on a multiple of 4
       floats (losses read w and b per row, as f32); cross-entropy writes one f32 per row */
    bool v4 = n % 4 == 0 && x->offset % 4 == 0 && t->op != WGML_OP_CROSS_ENTROPY &&
              (loss || (w->offset % 4 == 0 && b->offset % 4 == 0));
    int64_t vw = v4 ? 4 : 1, nu = n / vw;
    /* threads per row: the fewest powers of two that give each thread at most 4 units, so
       short rows share workgroups instead of leaving most of their threads idle (and, on a
       CPU adapter, waiting at every barrier: 128 rows of 32 took lavapipe 27 ms with 256) */
    uint32_t team = 1;
    while (team < 256 && (int64_t)team * 4 < nu) team *= 2;
    int64_t per = (nu + team - 1) / team; /* units per thread */
    bool cached = per * vw <= ROW_CACHE_FLOATS;
    uint32_t k = 1;
    while (cached && k < per) k *= 2; /* powers of two: few variants */
    wgml_status st = row_pipeline(ctx, op, flags, v4, team, k, cached, l);
    if (st) return st;
    uint32_t gx = wgml_grid(ctx, ((uint64_t)rows + 256 / team - 1) / (256 / team), l->groups);
    /* up to four passes over a row's units, the team reductions' loops, the cached loads */
    l->loop_trips = 4 * (uint64_t)(cached ? k : per) + 128;
    snprintf(l->what, sizeof l->what, "%s of rows of %lld", wgml_op_table[t->op].name, (long long)n);
    put_u32(l, 0, (uint32_t)rows);
    put_u32(l, 1, (uint32_t)n);
    put_u32(l, 4, (uint32_t)x->offset);
    put_u32(l, 5, (uint32_t)w->offset);
    put_u32(l, 6, (uint32_t)b->offset);
    put_u32(l, 7, gx);
    put_f32(l, 8, t->fparam[0]);
    put_f32(l, 9, -INFINITY);
    put_f32(l, 10, NAN);
    l->params_size = 48;
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = wgml_tensor_base(w);
    l->buffers[2] = wgml_tensor_base(b);
    l->buffers[3] = t;
    l->nbuffers = 4;
    if (loss) {
        if (!(l->raw[4] = wgml_gpu_errors_buffer(ctx)))
            return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "no GPU memory for the error flags");
        l->nbuffers = 5;
    }
    return WGML_OK;
}
