/*
 * The cached-matmul API (the seed's interface): weights uploaded once by name; per call
 * only the input write, the dispatch(es), the copy to staging and the map, encoded and
 * submitted through the executor (wgml_exec_submit, the graph's own path; its staging buffer).
 * Input and output buffers persist and only grow. Each weight keeps the launches (kernels,
 * parameter block, bind groups) of its last call, rebuilt only when m or the I/O buffers
 * change.
 *
 * A weight larger than the adapter's storage-binding limit (but within its buffer limit) is
 * kept in one buffer and bound in row chunks at offsets: C = sum over chunks of
 * A[:, rows] W[rows, :], the later chunks accumulating into C on the GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ops/matmul/matmul.h"

#define MAX_CHUNKS 16

typedef struct wgml_weight {
    char *name;
    int64_t rows, cols;
    WGPUBuffer buffer;
    uint64_t bytes;
    struct wgml_weight *next;
} wgml_weight;

typedef struct wgml_cached_io {
    WGPUBuffer input, output;
    uint64_t input_size, output_size;
    uint32_t generation; /* bumps when input/output are reallocated */
} wgml_cached_io;

/* The cached matmul's extension of a context: the resident weights and the I/O buffers. */
typedef struct cached_state {
    wgml_weight *weights;
    wgml_cached_io io;
} cached_state;

typedef struct cached_weight {
    wgml_weight w;
    bool f16; /* stored as halves */
    int nchunks;
    int64_t chunk_rows;
    /* the last call's plan, valid while m and the I/O buffers' generation are unchanged */
    int64_t last_m;
    uint32_t bind_generation;
    WGPUBuffer params; /* one parameter block per chunk, `params_stride` bytes apart */
    uint32_t params_stride;
    wgml_launch *launch; /* nchunks of them, each with its own bind group */
} cached_weight;

static const char cached_key; /* names the extension */

static void cached_state_release(wgml_context *ctx, void *state);

/* The context's cached-matmul state; made on first use when `make` (NULL, error recorded,
   when that fails), else NULL until then. */
static cached_state *state_of(const wgml_context *cctx, bool make)
{
    wgml_context *ctx = (wgml_context *)cctx; /* looking up never changes it */
    return make ? wgml_extension_make(ctx, &cached_key, sizeof(cached_state), cached_state_release)
                : wgml_extension_get(ctx, &cached_key);
}

static cached_weight *find(const wgml_context *ctx, const char *name)
{
    cached_state *cs = state_of(ctx, false);
    for (wgml_weight *w = cs ? cs->weights : NULL; w; w = w->next)
        if (strcmp(w->name, name) == 0) return (cached_weight *)w;
    return NULL;
}

static void drop_binds(cached_weight *cw)
{
    for (int i = 0; cw->launch && i < cw->nchunks; i++)
        if (cw->launch[i].bind) {
            wgpuBindGroupRelease(cw->launch[i].bind);
            cw->launch[i].bind = NULL;
        }
    cw->last_m = -1;
}

static void free_weight(cached_weight *cw)
{
    drop_binds(cw);
    free(cw->launch);
    if (cw->params) wgpuBufferRelease(cw->params);
    if (cw->w.buffer) wgpuBufferRelease(cw->w.buffer);
    free(cw->w.name);
    free(cw);
}

wgml_status wgml_weight_upload(wgml_context *ctx, const char *name, const float *data, int64_t rows, int64_t cols)
{
    return wgml_weight_upload_ex(ctx, name, data, rows, cols, NULL);
}

wgml_status wgml_weight_upload_ex(wgml_context *ctx, const char *name, const float *data, int64_t rows, int64_t cols,
                                  const wgml_weight_desc *desc)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    bool f16 = desc && desc->f16;
    uint64_t esize = f16 ? 2 : 4;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (!name || !*name || !data)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "weight_upload: name and data must be given");
    if (find(ctx, name)) return wgml_fail(ctx, WGML_ERROR_EXISTS, "weight_upload: a weight named '%s' exists", name);
    cached_state *cs = state_of(ctx, true);
    if (!cs) return ctx->rt.status;
    if (f16 && !ctx->rt.info.has_shader_f16)
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED,
                         "weight_upload: '%s' as f16 needs the adapter's shader-f16 feature, which %s lacks", name,
                         ctx->rt.info.name);
    int64_t shape[2] = {rows, cols}, numel;
    if ((st = wgml_shape_check(ctx, 2, shape, &numel))) return st;
    uint64_t bytes = (uint64_t)numel * esize;
    if (bytes > ctx->rt.limits.maxBufferSize)
        return wgml_fail(ctx, WGML_ERROR_LIMIT,
                         "weight '%s' [%lld, %lld] needs %llu bytes, past the adapter's maxBufferSize of %llu",
                         name, (long long)rows, (long long)cols, (unsigned long long)bytes,
                         (unsigned long long)ctx->rt.limits.maxBufferSize);
    /* rows per chunk: within the binding limit, chunk offsets aligned for binding */
    uint64_t lim = wgml_binding_limit(ctx), align = ctx->rt.limits.minStorageBufferOffsetAlignment;
    int64_t chunk_rows = (int64_t)(lim / ((uint64_t)cols * esize));
    while (chunk_rows > 1 && ((uint64_t)chunk_rows * (uint64_t)cols * esize) % align) chunk_rows--;
    if (chunk_rows < 1 || ((uint64_t)chunk_rows * (uint64_t)cols * esize) % align)
        return wgml_fail(ctx, WGML_ERROR_LIMIT,
                         "weight '%s': one row of %lld floats cannot be bound within the adapter's binding limit of %llu bytes",
                         name, (long long)cols, (unsigned long long)lim);
    if (chunk_rows > rows) chunk_rows = rows;
    int nchunks = (int)((rows + chunk_rows - 1) / chunk_rows);
    if (nchunks > MAX_CHUNKS)
        return wgml_fail(ctx, WGML_ERROR_LIMIT, "weight '%s' would need %d binding chunks (at most %d)", name,
                         nchunks, MAX_CHUNKS);

    cached_weight *cw = calloc(1, sizeof *cw);
    if (!cw || !(cw->w.name = strdup(name)) || !(cw->launch = calloc((size_t)nchunks, sizeof *cw->launch))) {
        if (cw) free(cw->w.name);
        free(cw);
        return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    WGPUBufferDescriptor d = {.label = wgml_sv("wgml weight"),
                              .usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst, .size = (bytes + 3) & ~3ull};
    /* one GEMM parameter block per chunk, at offsets the adapter can bind */
    uint32_t pa = ctx->rt.limits.minUniformBufferOffsetAlignment ? ctx->rt.limits.minUniformBufferOffsetAlignment : 256;
    uint32_t stride = (WGML_GEMM_PARAMS_BYTES + pa - 1) / pa * pa;
    WGPUBufferDescriptor pd = {.label = wgml_sv("wgml weight params"),
                               .usage = WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst,
                               .size = (uint64_t)stride * (uint64_t)nchunks};
    wgml_scope_push(&ctx->rt);
    cw->w.buffer = wgpuDeviceCreateBuffer(ctx->rt.device, &d);
    cw->params = wgpuDeviceCreateBuffer(ctx->rt.device, &pd);
    cw->params_stride = stride;
    if (cw->w.buffer && f16) {
        uint16_t *h = malloc((size_t)((bytes + 3) & ~3ull));
        if (h) {
            for (int64_t i = 0; i < numel; i++) h[i] = wgml_f32_to_half(data[i]);
            if (numel % 2) h[numel] = 0;
            wgpuQueueWriteBuffer(ctx->rt.queue, cw->w.buffer, 0, h, (size_t)((bytes + 3) & ~3ull));
            free(h);
        } else {
            wgpuBufferRelease(cw->w.buffer); /* reported as out of memory below */
            cw->w.buffer = NULL;
        }
    } else if (cw->w.buffer) {
        wgpuQueueWriteBuffer(ctx->rt.queue, cw->w.buffer, 0, data, bytes);
    }
    if ((st = wgml_scope_pop(&ctx->rt, "uploading a weight")) || !cw->w.buffer || !cw->params) {
        free_weight(cw);
        return st ? st : wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "allocating weight '%s'", name);
    }
    cw->f16 = f16;
    cw->w.rows = rows;
    cw->w.cols = cols;
    cw->w.bytes = bytes;
    cw->nchunks = nchunks;
    cw->chunk_rows = chunk_rows;
    cw->last_m = -1;
    cw->w.next = cs->weights;
    cs->weights = &cw->w;
    ctx->rt.stats.bytes_uploaded += bytes;
    return WGML_OK;
}

wgml_status wgml_weight_remove(wgml_context *ctx, const char *name)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!name) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "weight_remove: name is NULL");
    cached_state *cs = state_of(ctx, false);
    for (wgml_weight **pp = cs ? &cs->weights : NULL; pp && *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, name) == 0) {
            wgml_weight *w = *pp;
            *pp = w->next;
            free_weight((cached_weight *)w);
            return WGML_OK;
        }
    return wgml_fail(ctx, WGML_ERROR_NOT_FOUND, "weight_remove: no weight named '%s'", name);
}

wgml_status wgml_weights_resident(const wgml_context *ctx, size_t *count, uint64_t *bytes)
{
    if (!ctx || !count || !bytes) return WGML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    *bytes = 0;
    const cached_state *cs = state_of(ctx, false);
    for (const wgml_weight *w = cs ? cs->weights : NULL; w; w = w->next) {
        (*count)++;
        *bytes += w->bytes;
    }
    return WGML_OK;
}

static void cached_state_release(wgml_context *ctx, void *state)
{
    cached_state *cs = state;
    while (cs->weights) {
        wgml_weight *w = cs->weights;
        cs->weights = w->next;
        free_weight((cached_weight *)w);
    }
    wgml_cached_io *io = &cs->io;
    if (io->input) wgpuBufferRelease(io->input);
    if (io->output) wgpuBufferRelease(io->output);
}

/* An I/O buffer grown as needed; counted in the stats, and a new one bumps `generation` (the
   weights' bind groups name the old one) */
static wgml_status grow(wgml_context *ctx, WGPUBuffer *buf, uint64_t *size, uint64_t need, WGPUBufferUsage usage,
                        uint32_t *generation)
{
    uint64_t old = *buf ? *size : 0;
    bool replaced;
    wgml_status st = wgml_grow_buffer(ctx, buf, size, need, 4096, usage, "wgml cached io", &replaced);
    if (!replaced) return st;
    (*generation)++;
    wgml_stats *s = &ctx->rt.stats;
    if (old) s->buffers_live--, s->bytes_live -= old;
    if (*buf) s->buffers_live++, s->bytes_live += *size;
    if (s->bytes_live > s->bytes_peak) s->bytes_peak = s->bytes_live;
    return st;
}

wgml_status wgml_matmul_cached(wgml_context *ctx, const char *name, const float *input, size_t input_len,
                               float *output, size_t output_len, int64_t m)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    double started = wgml_host_seconds();
    wgml_timeline_start(&ctx->rt);
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (!name || !input || !output)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul_cached: name, input and output must be given");
    cached_weight *cw = find(ctx, name);
    if (!cw) return wgml_fail(ctx, WGML_ERROR_NOT_FOUND, "matmul_cached: no weight named '%s'", name);
    if (m <= 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul_cached: m must be >= 1, got %lld", (long long)m);
    int64_t K = cw->w.rows, N = cw->w.cols;
    if (m > INT64_MAX / K || m > INT64_MAX / N || (uint64_t)(m * K) > ctx->rt.limits.maxStorageBufferBindingSize / 4 ||
        (uint64_t)(m * N) > ctx->rt.limits.maxStorageBufferBindingSize / 4)
        return wgml_fail(ctx, WGML_ERROR_LIMIT, "matmul_cached: m = %lld is past the adapter's binding limit",
                         (long long)m);
    if ((uint64_t)input_len < (uint64_t)(m * K))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul_cached: input has %zu floats, [%lld, %lld] needs %lld",
                         input_len, (long long)m, (long long)K, (long long)(m * K));
    if ((uint64_t)output_len < (uint64_t)(m * N))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "matmul_cached: output has %zu floats, [%lld, %lld] needs %lld",
                         output_len, (long long)m, (long long)N, (long long)(m * N));
    cached_state *cs = state_of(ctx, true);
    if (!cs) return ctx->rt.status;
    wgml_cached_io *io = &cs->io;
    uint64_t in_bytes = (uint64_t)(m * K) * 4, out_bytes = (uint64_t)(m * N) * 4;
    if ((st = grow(ctx, &io->input, &io->input_size, in_bytes, WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst,
                   &io->generation)) ||
        (st = grow(ctx, &io->output, &io->output_size, out_bytes, WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc,
                   &io->generation)))
        return st;
    if (cw->last_m != m || cw->bind_generation != io->generation) {
        /* plan: one launch per chunk of weight rows; chunk c accumulates onto the earlier ones */
        drop_binds(cw);
        for (int c = 0; c < cw->nchunks; c++) {
            int64_t r0 = c * cw->chunk_rows, rows = K - r0 < cw->chunk_rows ? K - r0 : cw->chunk_rows;
            wgml_gemm_args g = {.M = m, .N = N, .K = rows, .batch = 1, .alpha = 1.0f, .lda = K, .ldb = N,
                                .a_off = r0, .accumulate = c > 0, .b_f16 = cw->f16};
            wgml_launch *l = &cw->launch[c];
            bool gemv = false;
            wgml_gemm_config cfg;
            memset(l, 0, sizeof *l);
            if ((st = wgml_gemm_pipeline(ctx, &g, l, &gemv, &cfg))) return st;
            wgml_gemm_params(ctx, l, &g, gemv, &cfg);
            if ((st = wgml_check_launch(ctx, l))) return st;
            uint64_t esize = cw->f16 ? 2 : 4;
            uint64_t off = (uint64_t)c * (uint64_t)cw->chunk_rows * (uint64_t)N * esize;
            uint64_t size = cw->w.bytes - off < wgml_binding_limit(ctx) ? cw->w.bytes - off : (uint64_t)cw->chunk_rows * N * esize;
            uint64_t poff = (uint64_t)c * cw->params_stride;
            wgpuQueueWriteBuffer(ctx->rt.queue, cw->params, poff, l->params, l->params_size);
            WGPUBuffer raw[4] = {io->input, cw->w.buffer, io->input /* no bias */, io->output};
            uint64_t offsets[4] = {0, off, 0, 0}, sizes[4] = {io->input_size, (size + 3) & ~3ull, io->input_size, io->output_size};
            WGPUBindGroupEntry e[5] = {{.binding = 0, .buffer = cw->params, .offset = poff, .size = WGML_GEMM_PARAMS_BYTES}};
            for (int b = 0; b < 4; b++) {
                e[b + 1] = (WGPUBindGroupEntry){.binding = (uint32_t)b + 1, .buffer = raw[b], .offset = offsets[b], .size = sizes[b]};
                l->raw[b] = raw[b];
                l->offsets[b] = offsets[b];
                l->sizes[b] = sizes[b];
            }
            l->nbuffers = 4;
            WGPUBindGroupDescriptor bd = {.layout = l->pipeline->layout, .entryCount = 5, .entries = e};
            l->bind = wgpuDeviceCreateBindGroup(ctx->rt.device, &bd);
            if (!l->bind) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "matmul_cached: no bind group");
        }
        cw->last_m = m;
        cw->bind_generation = io->generation;
    }
    wgml_timeline_mark(&ctx->rt, "checks");
    wgpuQueueWriteBuffer(ctx->rt.queue, io->input, 0, input, in_bytes);
    wgml_timeline_mark(&ctx->rt, "input write");
    wgml_exec_readback rb = {.buffer = io->output, .size = out_bytes, .host = output};
    if ((st = wgml_exec_submit(ctx, cw->launch, cw->nchunks, &rb, "matmul_cached", started))) return st;
    ctx->rt.stats.bytes_uploaded += in_bytes;
    return WGML_OK;
}
