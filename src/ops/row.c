/*
 * What the row ops (softmax, the norms, cross-entropy: along the last axis, a team of threads
 * per row) share: the constructor's checks and the launch of a row kernel, which is the
 * shared ops/row.wgsl followed by the op family's own bindings and main.
 */
#include "ops/row.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/build.h"
#include "kernels/wgsl_sources.h"

wgml_tensor *wgml_row_node(wgml_context *ctx, wgml_op op, wgml_tensor *a, wgml_tensor *weight,
                           wgml_tensor *bias, float eps)
{
    const char *name = wgml_op_table[op]->name;
    CHECK_INPUT(ctx, a, name, "a");
    if (weight) CHECK_INPUT(ctx, weight, name, "weight");
    if (bias) CHECK_INPUT(ctx, bias, name, "bias");
    if (!(eps >= 0)) /* NaN fails too */
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: eps = %g must be >= 0", name, eps);
    int64_t n = a->shape[a->ndim - 1];
    wgml_tensor *params[2] = {weight, bias};
    for (int i = 0; i < 2; i++)
        if (params[i] && (params[i]->ndim != 1 || params[i]->shape[0] != n)) {
            char s1[128], s2[128];
            wgml_shape_str(s1, sizeof s1, a);
            wgml_shape_str(s2, sizeof s2, params[i]);
            return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "%s: %s %s must be [%lld] for input %s", name,
                                     i ? "bias" : "weight", s2, (long long)n, s1);
        }
    wgml_tensor *src[3];
    int nsrc = 0;
    src[nsrc++] = wgml_as_contiguous(ctx, a);
    if (weight) src[nsrc++] = wgml_as_contiguous(ctx, weight);
    if (bias) src[nsrc++] = wgml_as_contiguous(ctx, bias);
    for (int i = 0; i < nsrc; i++)
        if (!src[i]) {
            for (int j = 0; j < nsrc; j++) wgml_tensor_unref(src[j]);
            return NULL;
        }
    wgml_tensor *t = wgml_node_consuming(ctx, op, a->ndim, a->shape, nsrc, src);
    if (t) {
        wgml_row_params_of_set(t, (wgml_row_params){.weight = weight != NULL, .bias = bias != NULL, .eps = eps});
    }
    return t;
}

static void put_u32(wgml_launch *l, int i, uint32_t v) { memcpy(l->params + 4 * i, &v, 4); }
static void put_f32(wgml_launch *l, int i, float v) { memcpy(l->params + 4 * i, &v, 4); }

/* Row units kept in registers per thread, in floats: rows of up to 256 * 32 = 8192 floats are
   read from memory once; longer ones are read again by each pass. */
#define ROW_CACHE_FLOATS 32

/* The row kernel specialised by its header (ops/row.wgsl says what it expects): its unit
   width (vec4 or f32), op, weight/bias flags, team size and register cache, which are its
   variant key with the op (each kernel serves its own ops). */
static wgml_status row_pipeline(wgml_context *ctx, const wgml_row_kernel *rk, uint32_t flags, bool v4, uint32_t team,
                                uint32_t k, bool cached, bool y_f16, wgml_launch *l)
{
    uint32_t key[7] = {WGML_KEY_ROW, (uint32_t)rk->op | (uint32_t)y_f16 << 16 | (uint32_t)(rk->r != NULL) << 17, flags, v4, team, k, cached};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 7))) return WGML_OK;
    const char *shared = wgml_wgsl_find("row"), *body = wgml_wgsl_find(rk->kernel);
    if (!shared || !body) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel %s is not built in", rk->kernel);
    wgml_sbuf b = {0};
    /* Y: the element type of the result y, which a kernel that stores halves declares its y
       with (norm.wgsl: the entries with f16_out); f32 math either way */
    if (y_f16) wgml_sbuf_put(&b, "enable f16;\nalias Y = %s;\n", v4 ? "vec4<f16>" : "f16");
    else wgml_sbuf_put(&b, "alias Y = %s;\n", v4 ? "vec4<f32>" : "f32");
    for (int i = 0; i < WGML_ROW_MAX_OPS && rk->codes[i].name; i++)
        wgml_sbuf_put(&b, "const OP_%s = %du;\n", rk->codes[i].name, rk->codes[i].op);
    wgml_sbuf_put(&b,
                  "alias V = %s;\nalias U = %s;\nconst VW = %uu;\nconst LANES = %s;\n"
                  "alias WV = %s;\nconst OP = %uu;\nconst FLAGS = %uu;\nconst TEAM = %uu;\n"
                  "const CACHED = %s;\nconst K = %uu;\n",
                  v4 ? "vec4<f32>" : "f32", v4 ? "vec4<u32>" : "u32", v4 ? 4u : 1u,
                  v4 ? "vec4<u32>(0u, 1u, 2u, 3u)" : "0u",
                  v4 && !rk->per_row ? "vec4<f32>" : "f32", /* one value per row: f32 */
                  (unsigned)rk->op, flags, team, cached ? "true" : "false", k);
    /* add_r(i, v): v plus the addend's unit i of the result (the bindings' order: wgml_row_launch) */
    if (rk->r)
        wgml_sbuf_put(&b, "@group(0) @binding(%d) var<storage, read> addend: array<V>;\n"
                          "fn add_r(i: u32, v: V) -> V { return v + addend[P.r_off / VW + i]; }\n",
                      3 + (rk->w != NULL) + (rk->b != NULL));
    else
        wgml_sbuf_put(&b, "fn add_r(i: u32, v: V) -> V { return v; }\n");
    if (rk->errors)
        wgml_sbuf_put(&b, "@group(0) @binding(%d) var<storage, read_write> gpu_errors: array<atomic<u32>, 4>;\n"
                          "fn flag_label(row: u32) {\n"
                          "    atomicOr(&gpu_errors[0], %uu);\n"
                          "    atomicMax(&gpu_errors[1], 0xffffffffu - row);\n}\n",
                      3 + (rk->w != NULL) + (rk->b != NULL) + (rk->r != NULL), (unsigned)WGML_GPU_ERROR_LABEL);
    else
        wgml_sbuf_put(&b, "fn flag_label(row: u32) {}\n");
    wgml_sbuf_put(&b, "%s%s", shared, body);
    l->pipeline = wgml_pipeline_add(ctx, key, 7, wgml_sbuf_take(&b), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

wgml_status wgml_row_launch(wgml_context *ctx, wgml_tensor *t, const wgml_row_kernel *rk, wgml_launch *l)
{
    wgml_tensor *x = rk->x, *w = rk->w ? rk->w : x, *b = rk->b ? rk->b : x;
    int64_t n = x->shape[x->ndim - 1], rows = x->numel / n;
    /* vec4 loads and stores when every row, the weight and the bias start on a multiple of 4
       floats (w and b of one value per row are read as f32) */
    bool v4 = n % 4 == 0 && x->offset % 4 == 0 && !rk->scalar_out && (rk->per_row || (w->offset % 4 == 0 && b->offset % 4 == 0)) &&
              (!rk->r || rk->r->offset % 4 == 0);
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
    wgml_status st = row_pipeline(ctx, rk, rk->flags, v4, team, k, cached, t->dtype == WGML_F16, l);
    if (st) return st;
    uint32_t gx = wgml_grid(ctx, ((uint64_t)rows + 256 / team - 1) / (256 / team), l->groups);
    /* up to four passes over a row's units, the team reductions' loops, the cached loads */
    l->loop_trips = 4 * (uint64_t)(cached ? k : per) + 128;
    snprintf(l->what, sizeof l->what, "%s of rows of %lld", wgml_op_table[t->op]->name, (long long)n);
    put_u32(l, 0, (uint32_t)rows);
    put_u32(l, 1, (uint32_t)n);
    put_u32(l, 2, rk->r ? (uint32_t)rk->r->offset : 0);
    put_u32(l, 4, (uint32_t)x->offset);
    put_u32(l, 5, (uint32_t)w->offset);
    put_u32(l, 6, (uint32_t)b->offset);
    put_u32(l, 7, gx);
    put_f32(l, 8, rk->eps);
    put_f32(l, 9, -INFINITY);
    put_f32(l, 10, NAN);
    l->params_size = 48;
    /* the kernel's bindings: x, then w and b where it has them, y, the addend, the error flags */
    int nb = 0;
    l->buffers[nb++] = wgml_tensor_base(x);
    if (rk->w) l->buffers[nb++] = wgml_tensor_base(w);
    if (rk->b) l->buffers[nb++] = wgml_tensor_base(b);
    l->buffers[nb++] = t;
    if (rk->r) l->buffers[nb++] = wgml_tensor_base(rk->r);
    if (rk->errors && !(l->raw[nb++] = wgml_gpu_errors_buffer(ctx)))
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "no GPU memory for the error flags");
    l->nbuffers = nb;
    return WGML_OK;
}
