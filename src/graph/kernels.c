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
#include "graph/executor.h"
#include "kernels/wgsl_sources.h"

/* A built-in kernel is named by its place in the table of embedded sources. */
wgml_status wgml_kernel_pipeline(wgml_context *ctx, const char *name, wgml_launch *l)
{
    const char *src = wgml_wgsl_find(name);
    if (!src) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel %s is not built in", name);
    uint32_t key[2] = {WGML_KEY_NAMED, 0};
    while (wgml_wgsl_sources[key[1]].text != src) key[1]++;
    l->pipeline = wgml_pipeline_find(ctx, key, 2);
    if (!l->pipeline) l->pipeline = wgml_pipeline_add(ctx, key, 2, src, true);
    return l->pipeline ? WGML_OK : ctx->status;
}

static void put_u32(wgml_launch *l, int i, uint32_t v) { memcpy(l->params + 4 * i, &v, 4); }
static void put_f32(wgml_launch *l, int i, float v) { memcpy(l->params + 4 * i, &v, 4); }

/* x [outer, len, inner] -> y [outer, inner] */
wgml_status wgml_build_reduce(wgml_context *ctx, wgml_tensor *t, wgml_launch *l)
{
    wgml_status st = wgml_kernel_pipeline(ctx, "reduce", l);
    if (st) return st;
    wgml_tensor *x = t->src[0];
    int ax = t->iparam[0];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++) outer *= x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) inner *= x->shape[d];
    static const uint32_t codes[] = {[WGML_OP_SUM] = 0, [WGML_OP_MEAN] = 1, [WGML_OP_MAX] = 2, [WGML_OP_ARGMAX] = 3};
    uint32_t gx = wgml_grid(ctx, (uint64_t)(outer * inner), l->groups);
    put_u32(l, 0, (uint32_t)outer);
    put_u32(l, 1, (uint32_t)x->shape[ax]);
    put_u32(l, 2, (uint32_t)inner);
    put_u32(l, 3, codes[t->op]);
    put_u32(l, 4, (uint32_t)x->offset);
    put_u32(l, 5, gx);
    put_f32(l, 6, -INFINITY);
    l->params_size = 32;
    l->buffers[0] = wgml_tensor_base(x);
    l->buffers[1] = t;
    l->nbuffers = 2;
    return WGML_OK;
}

/* Row units kept in registers per thread, in floats: rows of up to 256 * 32 = 8192 floats are
   read from memory once; longer ones are read again by each pass. */
#define ROW_CACHE_FLOATS 32

/* The row kernel specialised by the header that src/kernels/row.wgsl expects: its unit
   width (vec4 or f32), op, weight/bias flags and register cache; those are its variant key. */
static wgml_status row_pipeline(wgml_context *ctx, uint32_t op, uint32_t flags, bool v4,
                                uint32_t k, bool cached, wgml_launch *l)
{
    uint32_t key[6] = {WGML_KEY_ROW, op, flags, v4, k, cached};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 6))) return WGML_OK;
    const char *body = wgml_wgsl_find("row");
    if (!body) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel row is not built in");
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b,
                  "alias V = %s;\nalias U = %s;\nconst VW = %uu;\nconst LANES = %s;\n"
                  "alias WV = %s;\nconst OP = %uu;\nconst FLAGS = %uu;\n"
                  "const CACHED = %s;\nconst K = %uu;\n%s",
                  v4 ? "vec4<f32>" : "f32", v4 ? "vec4<u32>" : "u32", v4 ? 4u : 1u,
                  v4 ? "vec4<u32>(0u, 1u, 2u, 3u)" : "0u",
                  v4 && op < 4 ? "vec4<f32>" : "f32", /* losses: one label, gradient per row */
                  op, flags, cached ? "true" : "false", k, body);
    char *src = wgml_sbuf_take(&b);
    if (!src) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    l->pipeline = wgml_pipeline_add(ctx, key, 6, src, true);
    free(src);
    return l->pipeline ? WGML_OK : ctx->status;
}

/* x [rows, n], weight [n], bias [n] -> y [rows, n] */
wgml_status wgml_build_row(wgml_context *ctx, wgml_tensor *t, wgml_launch *l)
{
    wgml_tensor *x = t->src[0];
    bool loss = t->op == WGML_OP_CROSS_ENTROPY || t->op == WGML_OP_CROSS_ENTROPY_GRAD;
    int has_w = !loss && t->iparam[0], has_b = !loss && t->iparam[1];
    /* losses: labels take the weight's binding, row gradients the bias's */
    wgml_tensor *w = loss ? t->src[1] : has_w ? t->src[1] : x;
    wgml_tensor *b = t->op == WGML_OP_CROSS_ENTROPY_GRAD ? t->src[2] : has_b ? t->src[1 + has_w] : x;
    int64_t n = x->shape[x->ndim - 1], rows = x->numel / n;
    static const uint32_t codes[] = {[WGML_OP_SOFTMAX] = 0, [WGML_OP_LOG_SOFTMAX] = 1,
                                     [WGML_OP_LAYERNORM] = 2, [WGML_OP_RMSNORM] = 3,
                                     [WGML_OP_CROSS_ENTROPY] = 4, [WGML_OP_CROSS_ENTROPY_GRAD] = 5};
    uint32_t op = codes[t->op], flags = (uint32_t)(has_w | (has_b << 1));
    /* vec4 loads and stores when every row, the weight and the bias start on a multiple of 4
       floats (losses read w and b per row, as f32); op 4 writes one f32 per row */
    bool v4 = n % 4 == 0 && x->offset % 4 == 0 && op != 4 &&
              (loss || (w->offset % 4 == 0 && b->offset % 4 == 0));
    int64_t vw = v4 ? 4 : 1, per = (n / vw + 255) / 256; /* units per thread */
    bool cached = per * vw <= ROW_CACHE_FLOATS;
    uint32_t k = 1;
    while (cached && k < per) k *= 2; /* powers of two: few variants */
    wgml_status st = row_pipeline(ctx, op, flags, v4, k, cached, l);
    if (st) return st;
    uint32_t gx = wgml_grid(ctx, (uint64_t)rows, l->groups);
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
    return WGML_OK;
}
