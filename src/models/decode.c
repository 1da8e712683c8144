/* The decode plan (see decode.h): buffers, pipelines and bind groups made once; a token is a
   fixed list of dispatches recorded again and again with the same bind groups. */
#include "models/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/half.h"
#include "core/pipeline.h"
#include "core/tensor.h"
#include "models/decode_wgsl.h"
#include "runtime/runtime.h"

enum { GRID_FIXED, GRID_ROWS, GRID_ROW_ELEMS, GRID_PICKS };

typedef struct launch {
    WGPUComputePipeline pipe; /* borrowed from the context's pipeline cache */
    WGPUBindGroup bg;         /* owned */
    int grid;                 /* GRID_*: how gx follows the pass's rows */
    uint32_t gx, gy;          /* fixed gx; per row; elements per row (256 a workgroup) */
    int is_head;              /* the head and the sampler run only when something is picked */
    const char *what;         /* its kind, for wgml_decode_profile (a string constant) */
} launch;

typedef struct pass {
    launch *l;
    int n, cap;
    unsigned chunk; /* a decode step's: its attention's positions a workgroup (0: whole) */
    int grid_at;    /* 1 + the index of its first MLP block launch across a grid (0: none) */
} pass;

typedef struct layer_bufs {
    WGPUBuffer wqkv, wo, w1, w2, vecs, kc, vc;
} layer_bufs;

struct wgml_decode_plan {
    wgml_context *ctx;
    wgml_gpt *g; /* the model: long prompts are prefilled through its graph */
    wgml_gpt_config cfg;
    wgml_decode_desc d;
    int llama;
    int64_t C, D, H, Hkv, A, Q, F, V, block, B, P, rmax;
    uint32_t cap; /* tokens each slot's ring holds */
    layer_bufs *L;
    WGPUBuffer wte, wpe, fvecs, freq;
    WGPUBuffer x, qkv, att, h, logits;
    WGPUBuffer cand;            /* the head's candidates for the sampler, ncand a picked row (0: it reads the logits) */
    int64_t ncand;
    int fused;                  /* GPT-2 in 3 launches a layer (decode.h) */
    unsigned attn_chunk;        /* positions a workgroup of the decode step's attention (0: unsplit) */
    unsigned pre_chunk;         /* the prefill's (0: unsplit; split where a whole block's scores do not fit) */
    WGPUBuffer asums, aml;      /* the split attention's per-chunk sums and (max, sum) */
    WGPUBuffer acount;          /* its counters of finished chunks, one per (row, K/V head) */
    WGPUBuffer gbar;            /* the MLP block's grid barrier: its arrivals, a word set where a wait gave up, the waits' bound */
    unsigned grid_w;            /* the MLP block's workgroups where one launch takes it (choose_grid; 0: its launches apart) */
    unsigned grid_k;            /* its barrier's counters (wgml_decode_desc's grid_counters) */
    wgml_grid_wait grid_wait;   /* how its phases wait for the one before (wgml_decode_desc's grid_wait) */
    unsigned wide_wgs;          /* the widest workgroup the adapter takes (1024, else 256): the attention's and the sampler's */
    int sg;                     /* the GEMVs' sums by subgroup shuffles (wgml_decode_gemv's sg) */
    int f16c;                   /* the K/V caches hold halves (wgml_decode_desc's f16_cache) */
    int gpu_layout;             /* the matrices laid out by a graph on the GPU (not host_layout) */
    int64_t mlp_block, nmlp;    /* the fused MLP's hidden units a workgroup, and its partial sums */
    WGPUBuffer xb, attn_parts, mlp_parts;
    WGPUBuffer drows, prows, dpass, ppass, dpicks, ppicks, toks;
    WGPUBuffer staging[2]; /* the token rings' copies: one read while the next submit runs */
    pass dec, pre; /* the launches of a decode step and of a prefill pass */
    /* decode steps whose attention takes longer chunks (twice attn_chunk, four times...: at
       most a sixteenth of the block each), for long contexts: submit picks by the positions */
    pass longer[4];
    int nlonger;
    int64_t weight_bytes;
    /* host state per slot */
    int64_t active;   /* slots started */
    int64_t *len;     /* cache positions held */
    int64_t *count;   /* tokens its sampler has written (its ring's next index) */
    int32_t **hist;   /* every token so far (prompt, then drawn) */
    int64_t *n_hist, *hist_cap;
    double host_per_token;
    double host_acc; /* encoding and submitting, summed */
    /* wgml_decode_generate_each's: each token passed on as its chunk is read, until it says stop */
    wgml_decode_token_fn each;
    void *each_user;
    int stopped;
};

/* ---------------------------------------------------------------- buffers */

static WGPUBuffer make_buffer(wgml_decode_plan *p, uint64_t bytes, WGPUBufferUsage usage, const char *what, wgml_status *st)
{
    if (*st) return NULL;
    /* a storage buffer in whole 4 KiB (where the limits allow), so that the plan's small ones
       (x and h, which every workgroup reads and writes as atomics, the grid barrier's words, the
       rows...) share no 4 KiB: a process's first Qwen3-0.6B plan ran its step 2.5% slower without,
       on an H200, and as fast with its buffers under 2 MiB so rounded (which of them matters was
       not measured apart: docs/MEASUREMENTS.md) */
    const WGPULimits *lim = &p->ctx->rt.limits;
    const uint64_t grain = (usage & WGPUBufferUsage_Storage) ? 4096 : 16, whole = (bytes + grain - 1) / grain * grain;
    bytes = whole <= lim->maxStorageBufferBindingSize && whole <= lim->maxBufferSize ? whole : (bytes + 15) / 16 * 16;
    if (bytes < 16) bytes = 16;
    if ((*st = wgml_check_buffer_size(p->ctx, bytes, what))) return NULL;
    WGPUBufferDescriptor bd = {.label = wgml_sv(what), .size = bytes, .usage = usage};
    WGPUBuffer b = wgpuDeviceCreateBuffer(p->ctx->rt.device, &bd);
    if (!b) *st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: could not make the %s buffer (%llu bytes)", what,
                            (unsigned long long)bytes);
    return b;
}

static const WGPUBufferUsage STORAGE = WGPUBufferUsage_Storage | WGPUBufferUsage_CopyDst | WGPUBufferUsage_CopySrc;

static void write_buffer(wgml_decode_plan *p, WGPUBuffer b, uint64_t offset, const void *data, size_t bytes)
{
    wgpuQueueWriteBuffer(p->ctx->rt.queue, b, offset, data, (bytes + 3) / 4 * 4);
}

static int64_t round8(int64_t k) { return (k + 7) / 8 * 8; }

/* A matrix of N rows of K (row n = output n's weights, from get(n, k)) as the GEMV reads it:
   rows padded to KP = round8(K) with zeros, f32 or f16. */
typedef float (*elem_fn)(const float *src, int64_t n, int64_t k, const int64_t *dims);

static float elem_rows(const float *src, int64_t n, int64_t k, const int64_t *dims) { return src[n * dims[0] + k]; }
/* src [K, N] (y = x src): output n's weights are column n */
static float elem_cols(const float *src, int64_t n, int64_t k, const int64_t *dims) { return src[k * dims[1] + n]; }
/* src [K, 2F] gate | up: output 2f is gate column f, 2f + 1 up column f */
static float elem_swiglu(const float *src, int64_t n, int64_t k, const int64_t *dims)
{
    return src[k * dims[1] + (n & 1 ? dims[1] / 2 : 0) + n / 2];
}

static WGPUBuffer upload_matrix(wgml_decode_plan *p, const float *src, int64_t N, int64_t K, elem_fn get, const int64_t *dims,
                                const char *what, wgml_status *st)
{
    const int64_t KP = round8(K);
    const int f16 = p->d.f16_weights;
    uint64_t bytes = (uint64_t)(N * KP) * (f16 ? 2u : 4u);
    WGPUBuffer b = make_buffer(p, bytes, STORAGE, what, st);
    if (*st) return b;
    /* in slices of rows, so the host copy stays small */
    const int64_t rows = 4096;
    void *tmp = malloc((size_t)(rows * KP) * (f16 ? 2u : 4u));
    if (!tmp) {
        *st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
        return b;
    }
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
        for (int64_t n = 0; n < nr; n++)
            for (int64_t k = 0; k < KP; k++) {
                float v = k < K ? get(src, n0 + n, k, dims) : 0.0f;
                if (f16) ((uint16_t *)tmp)[n * KP + k] = wgml_f32_to_half(v);
                else ((float *)tmp)[n * KP + k] = v;
            }
        write_buffer(p, b, (uint64_t)(n0 * KP) * (f16 ? 2u : 4u), tmp, (size_t)(nr * KP) * (f16 ? 2u : 4u));
    }
    free(tmp);
    p->weight_bytes += (int64_t)bytes;
    return b;
}

/* A parameter's values on the host (malloc'ed). */
static float *read_param(wgml_decode_plan *p, wgml_tensor *t, wgml_status *st)
{
    if (*st) return NULL;
    size_t n = (size_t)wgml_tensor_numel(t);
    float *h = malloc(n * sizeof *h);
    if (!h) *st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
    else if ((*st = wgml_tensor_read(t, h, n))) free(h), h = NULL;
    return h;
}

/* How a matrix of the model becomes the GEMV's [N, K] rows: as it is ([N, K]), transposed
   ([K, N]), or SwiGLU's [K, 2F] gate | up interleaved (row 2f gate column f, 2f + 1 up's). */
enum { LAYOUT_ROWS, LAYOUT_COLS, LAYOUT_SWIGLU };

typedef struct gpu_matrix {
    wgml_tensor *src;
    int layout;
    int64_t N, K;
    const char *what;
    WGPUBuffer *out;
} gpu_matrix;

/* A copy of evaluated tensor t's bytes into dst at dst_off, recorded in enc (a node's own buffer
   starts at 0, and copies move whole words: offsets and sizes are kept multiples of 4). */
static wgml_status copy_out(wgml_context *ctx, WGPUCommandEncoder enc, wgml_tensor *t, WGPUBuffer dst, uint64_t dst_off,
                            uint64_t bytes, const char *what)
{
    const uint64_t from = (uint64_t)t->offset * (uint64_t)wgml_dtype_bytes(t->dtype);
    if (from % 4 || dst_off % 4 || bytes % 4)
        return wgml_fail(ctx, WGML_ERROR_VALIDATION, "%s: a copy at byte %llu of %llu bytes", what, (unsigned long long)from,
                         (unsigned long long)bytes);
    wgpuCommandEncoderCopyBufferToBuffer(enc, wgml_tensor_base(t)->buf->handle, from, dst, dst_off, bytes);
    return WGML_OK;
}

/* Submits enc's copies, or drops them where st is an error already. */
static wgml_status submit_copies(wgml_context *ctx, WGPUCommandEncoder enc, wgml_status st)
{
    if (!enc) return st;
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if (!st) return wgml_submit(&ctx->rt, cb);
    wgpuCommandBufferRelease(cb);
    return st;
}

/* Whether the matrices can be laid out on the GPU: rows need no padding (K a multiple of 8)
   and each fits a binding. */
static int gpu_layout_fits(const wgml_decode_plan *p, const gpu_matrix *m, int n)
{
    for (int i = 0; i < n; i++)
        if (m[i].K % 8 || (uint64_t)(m[i].N * m[i].K) * 4 > p->ctx->rt.limits.maxStorageBufferBindingSize) return 0;
    return 1;
}

/* The matrices laid out as upload_matrix would (the same values: transposed, interleaved,
   rounded to halves as wgml_cast rounds) by one graph on the GPU and copied into buffers of
   their own, with no trip through the host (Qwen3-0.6B's plan on an H200: 8.7-10.2 s through
   the host, 0.08-0.15 s so; docs/MEASUREMENTS.md). */
static wgml_status gpu_matrices(wgml_decode_plan *p, gpu_matrix *m, int n)
{
    wgml_context *ctx = p->ctx;
    wgml_tensor *t[4];
    wgml_status st = WGML_OK;
    if (n > 4) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: %d matrices at once", n);
    wgml_scope_begin(ctx);
    for (int i = 0; i < n; i++) {
        wgml_tensor *s = m[i].src, *r;
        if (m[i].layout == LAYOUT_ROWS) r = s;
        else if (m[i].layout == LAYOUT_COLS) r = wgml_transpose(ctx, s, 0, 1);
        else { /* [K, 2F] gate | up -> rows gate 0, up 0, gate 1, ... */
            const int64_t F = m[i].N / 2;
            wgml_tensor *gu[2] = {wgml_transpose(ctx, wgml_slice(ctx, s, 1, 0, F, 1), 0, 1),
                                  wgml_transpose(ctx, wgml_slice(ctx, s, 1, F, 2 * F, 1), 0, 1)};
            r = wgml_reshape(ctx, wgml_stack(ctx, 2, gu, 1), 2, (int64_t[2]){m[i].N, m[i].K});
        }
        t[i] = p->d.f16_weights ? wgml_cast(ctx, r, WGML_F16) : wgml_contiguous(ctx, r);
        if (!t[i]) st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: %s: %s", m[i].what, wgml_error_message(ctx));
    }
    if (!st) st = wgml_eval(ctx, n, t);
    WGPUCommandEncoder enc = st ? NULL : wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    if (!st && !enc) st = wgml_fail(ctx, WGML_ERROR_DEVICE, "decode plan: no command encoder");
    for (int i = 0; !st && i < n; i++) {
        const uint64_t bytes = (uint64_t)(m[i].N * m[i].K) * (uint64_t)wgml_dtype_bytes(t[i]->dtype);
        *m[i].out = make_buffer(p, bytes, STORAGE, m[i].what, &st);
        if (!st) st = copy_out(ctx, enc, t[i], *m[i].out, 0, bytes, m[i].what);
        if (!st) p->weight_bytes += (int64_t)bytes;
    }
    st = submit_copies(ctx, enc, st);
    wgml_scope_end(ctx);
    return st;
}

/* The same on the host, element by element (rows needing padding, or past a binding). */
static wgml_status host_matrices(wgml_decode_plan *p, gpu_matrix *m, int n)
{
    static const elem_fn get[] = {[LAYOUT_ROWS] = elem_rows, [LAYOUT_COLS] = elem_cols, [LAYOUT_SWIGLU] = elem_swiglu};
    wgml_status st = WGML_OK;
    for (int i = 0; !st && i < n; i++) {
        float *h = read_param(p, m[i].src, &st);
        *m[i].out = upload_matrix(p, h, m[i].N, m[i].K, get[m[i].layout], (int64_t[2]){m[i].K, m[i].N}, m[i].what, &st);
        free(h);
    }
    return st;
}

/* The matrices in the GEMVs' layout, by the GPU where they fit (host_layout 0), else the host. */
static wgml_status lay_out(wgml_decode_plan *p, gpu_matrix *m, int n)
{
    return p->gpu_layout && gpu_layout_fits(p, m, n) ? gpu_matrices(p, m, n) : host_matrices(p, m, n);
}

/* ---------------------------------------------------------------- launches */

typedef struct bind {
    uint32_t binding;
    WGPUBuffer buf;
} bind;

static wgml_status add_launch(wgml_decode_plan *p, pass *ps, char *wgsl, uint32_t used, const bind *b, int nb, int grid,
                              uint32_t gx, uint32_t gy, int is_head, const char *what)
{
    if (!wgsl) /* (or a built-in source it splices in is missing: test_decode then fails) */
        return wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: a kernel's WGSL could not be made (out of host memory)");
    wgml_pipeline *pl = wgml_pipeline_get(p->ctx, wgsl, true);
    free(wgsl);
    if (!pl) return p->ctx->rt.status ? p->ctx->rt.status : WGML_ERROR_VALIDATION;
    WGPUBindGroupEntry e[16];
    size_t ne = 0;
    for (int i = 0; i < nb; i++)
        if (used & (1u << b[i].binding)) e[ne++] = (WGPUBindGroupEntry){.binding = b[i].binding, .buffer = b[i].buf, .size = WGPU_WHOLE_SIZE};
    WGPUBindGroupDescriptor bd = {.layout = pl->layout, .entryCount = ne, .entries = e};
    WGPUBindGroup bg = wgpuDeviceCreateBindGroup(p->ctx->rt.device, &bd);
    if (!bg) return wgml_fail(p->ctx, WGML_ERROR_VALIDATION, "decode plan: a bind group could not be made");
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        launch *l = realloc(ps->l, (size_t)cap * sizeof *l);
        if (!l) {
            wgpuBindGroupRelease(bg);
            return wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
        }
        ps->l = l, ps->cap = cap;
    }
    ps->l[ps->n++] = (launch){.pipe = pl->pipeline, .bg = bg, .grid = grid, .gx = gx, .gy = gy, .is_head = is_head, .what = what};
    return WGML_OK;
}

/* Lanes an output: enough workgroups (256 threads each) to fill a large GPU, fewer lanes (more
   outputs a workgroup) where there are outputs enough. */
static unsigned lanes_by_size(int64_t N, int forced)
{
    return forced ? (unsigned)forced : N >= 256 * 8 ? 32 : N >= 256 * 4 ? 64 : 128;
}
#define lanes_for(N) lanes_by_size(N, p->d.lanes)
/* Rows a lane group of a GEMV sums (wgml_decode_gemv.nr) where RB > 1 rows share each weight:
   gemv_rows, else 2 for the GEMVs without a norm (H200, Qwen3-0.6B b8: wo 21.8 -> 19.6 us, down
   25.5 -> 22.0; the normed ones lost, QKV 21.2 -> 26.1, gate/up 26.0 -> 36.7, and the head gained
   nothing: docs/MEASUREMENTS.md) */
static unsigned gemv_rows_of(const wgml_decode_desc *d, unsigned RB, int normed)
{
    if (RB < 2 || d->gemv_rows < 0) return 1;
    return d->gemv_rows > 0 ? (unsigned)d->gemv_rows : normed ? 1u : 2u;
}
/* the LM head's lanes an output (wgml_decode_desc's head_lanes, else as the other GEMVs'), but over
   a large vocabulary 16 past batch 1 (half the workgroups of 32, each prologue - the final norm's
   statistics and staging x - shared by twice the rows) and 32 at batch 1 (its grid-stride form's
   registers: head_workgroups) */
static unsigned head_lanes(const wgml_decode_desc *d, int64_t V)
{
    if (d->head_lanes) return (unsigned)d->head_lanes;
    return !d->lanes && V >= 65536 ? (d->batch == 1 ? 32u : 16u) : lanes_by_size(V, d->lanes);
}

/* The LM head's workgroups in its grid-stride form (wgml_decode_desc's head_wgs; 0: a workgroup a
   tile of rows, as the other GEMVs), at most its tiles. 512 where the tiles are many (Qwen3's
   9,496 on an H200: the head alone 94.3 us at 512, 97.7 at 1,024, 103.6 at 2,048, 103.9 a tile
   each; docs/MEASUREMENTS.md). At 32 lanes (batch 1) 528: the kernel takes 63 registers a thread
   on an H200 (123 at 16 lanes), so 4 of its workgroups fit a multiprocessor and 528 are one wave
   on 132 of them (H200, H100 SXM); Qwen3's head alone 81.3 us against 92.5 at 16 lanes and 512
   workgroups, which ran in two waves of 2 a multiprocessor. */
static uint32_t head_workgroups(const wgml_decode_desc *d, unsigned lanes, uint32_t tiles)
{
    const int64_t want = d->head_wgs < 0 ? 0 : d->head_wgs > 0 ? d->head_wgs : tiles >= 4096 ? (lanes == 32 ? 528 : 512) : 0;
    return (uint32_t)(want < tiles ? want : tiles);
}

/* Whether the split attention's chunks may be combined by its launch's last workgroup:
   wgpu-native only (decode_wgsl.c: the memory model), unless combine_launch. */
static int combine_possible(const wgml_decode_plan *p)
{
    /* (naga's SPIR-V: its Metal and HLSL barriers order the threadgroup only) */
    const char *rt = p->ctx->rt.info.runtime, *be = p->ctx->rt.info.backend;
    return !p->d.combine_launch && rt && strcmp(rt, "wgpu-native") == 0 && be && strcmp(be, "Vulkan") == 0;
}

/* The split attention's threads: 256, more where its G + 1 heads' RoPE needs 64 each. */
static unsigned split_wgs_of(const wgml_decode_plan *p)
{
    unsigned w = 256;
    while (w < p->wide_wgs && (unsigned)(p->H / p->Hkv + 1) * 64 > w) w *= 2;
    return w;
}

/* Whether the attention's late form (unsplit: chunk 0) fits the workgroup memory: the
   prefill's, or the decode step's (RoPE inside for Llama; combined where combine asks) (the
   early form is taken only where it fits too: wgml_decode_attn_early_fits). */
static int attn_fits(const wgml_decode_plan *p, unsigned chunk, int prefill, int combine)
{
    wgml_decode_attn a = {.D = (unsigned)p->D, .G = (unsigned)(p->H / p->Hkv), .kvd = (unsigned)(p->Hkv * p->D),
                          .block = (unsigned)p->block, .chunk = chunk, .wgs = chunk ? split_wgs_of(p) : p->wide_wgs,
                          .rope = p->llama && !prefill, .combine = combine, .f16c = p->f16c,
                          .wo_fused = !chunk && !p->llama}; /* (whole: GPT-2's fused form, the larger) */
    const uint64_t lim = p->ctx->rt.limits.maxComputeWorkgroupStorageSize;
    if (wgml_decode_attn_late_bytes(&a) > lim) return 0;
    /* GPT-2's decode step appends k and v where it takes the grid block (not known yet), without
       it not: both forms must fit (the append's unit of the cache is a vec4 only where D % 8 == 0,
       so for D % 8 == 4 its form is the smaller, not the larger) */
    a.append = !p->llama && !prefill;
    return wgml_decode_attn_late_bytes(&a) <= lim;
}

/* The chunks combined inside the split attention's launch, where that is possible and its
   (max, sum) per chunk fit the workgroup memory too. */
static int combine_fits(const wgml_decode_plan *p, unsigned chunk) { return combine_possible(p) && attn_fits(p, chunk, 0, 1); }

/* Whether the split attention at this chunk (the prefill's, or the decode step's with its
   combine where it fits) fits the workgroup memory. */
static int split_fits(const wgml_decode_plan *p, unsigned chunk, int prefill)
{
    return attn_fits(p, chunk, prefill, !prefill && combine_fits(p, chunk));
}

/* How a GEMV that stages and norms x (QKV, the MLP's up; N outputs) is launched: its lanes an
   output, the workgroups going over its tiles (0: a workgroup a tile) and the launch's grid. In
   the decode step past batch 1 (lanes not forced) 16 lanes: each workgroup's prologue (RB rows
   of x staged, their statistics) serves more outputs (on an H200 Qwen3-0.6B's b8 2,110-2,135
   tokens/s against 1,937-1,948, the character GPT's 26,779 against 24,708; 8 lanes, and 16 for
   the GEMVs without a norm, were slower: docs/MEASUREMENTS.md); and where its tiles are 256 or
   more, 132 workgroups going over them, x staged once each (one wave on an H100's or H200's 132
   multiprocessors: Qwen3-0.6B's b8 2,285-2,287 against 2,192-2,193 a workgroup a tile, 264 and
   528 no faster), or gemv_wgs's; grid stride needs x in one chunk (x_whole). */
typedef struct normed_launch {
    unsigned lanes;
    uint32_t wgs, groups;
} normed_launch;

static normed_launch normed_launch_of(const wgml_decode_plan *p, int prefill, int64_t N, int x_whole, unsigned nr)
{
    const int batched = !prefill && p->B > 1 && !p->d.lanes;
    normed_launch g = {.lanes = batched ? 16u : lanes_for(N)};
    const uint32_t tiles = wgml_decode_gemv_tiles((uint64_t)N, g.lanes, nr);
    const uint32_t want = p->d.gemv_wgs < 0 ? 0u : p->d.gemv_wgs > 0 ? (uint32_t)p->d.gemv_wgs : tiles >= 256 ? 132u : 0u;
    g.wgs = batched && x_whole && want < tiles ? want : 0u;
    g.groups = g.wgs ? g.wgs : tiles;
    return g;
}

/* One pass's launches: the embedding, every layer, the final norm and head, the sampler; a
   decode step's attention in chunks of dec_chunk positions (0: whole), into ps_. */
static wgml_status build_pass(wgml_decode_plan *p, int prefill, unsigned dec_chunk, pass *ps_)
{
    ps_->chunk = dec_chunk;
    WGPUBuffer rows = prefill ? p->prows : p->drows, pas = prefill ? p->ppass : p->dpass, picks = prefill ? p->ppicks : p->dpicks;
    const unsigned RB = prefill ? 8 : (unsigned)(p->B < 8 ? p->B : 8);
    /* x staged in planes for f16 weights (wgml_decode_gemv.planes) */
    const int planes = p->d.gemv_planes >= 0;
    const unsigned nr = gemv_rows_of(&p->d, RB, 0), nrn = gemv_rows_of(&p->d, RB, 1);
    /* the GEMVs without a norm: their rows in rg groups over the grid (gemv_row_groups; 2 rows a
       group: Qwen3-0.6B b8 on an H200, wo 19.3 -> 11.7 us, down 21.9 -> 13.6 with 4 groups, 13.2
       and 14.8 with 2, 14.2 with 8; the normed ones so, QKV and up, lost in the pass although
       faster alone: docs/MEASUREMENTS.md) */
    const unsigned rg = p->d.gemv_row_groups < 0 ? 1u : p->d.gemv_row_groups > 0 ? (unsigned)p->d.gemv_row_groups : (RB + 1) / 2;
    const float eps = p->cfg.norm_eps;
    const int64_t C = p->C, F = p->F;
    wgml_status st;
    /* inputs staged at a time: RB rows of kch floats and the 256 RB sums fit the workgroup memory */
    const uint32_t wg_mem = p->ctx->rt.limits.maxComputeWorkgroupStorageSize;
    unsigned kch_max = 4096; /* (at batch 1 a whole row of x: one chunk, all its weights loaded at once) */
    while (kch_max > 64 && (RB * kch_max + (RB * 256 > 512 ? RB * 256 : 512) + 2 * RB) * 4 > wg_mem) kch_max /= 2;
    if (p->d.x_chunk && (unsigned)p->d.x_chunk < kch_max) kch_max = (unsigned)p->d.x_chunk;
#define KCH(K) ((unsigned)(round8(K) < kch_max ? round8(K) : kch_max))
    const int x_whole = KCH(C) >= round8(C);
    if (!p->fused) {
        wgml_decode_embed e = {.C = (unsigned)C, .KP = (unsigned)round8(C), .f16 = p->d.f16_weights, .positions = !p->llama,
                               .tag = !prefill && p->grid_w && p->grid_wait != WGML_GRID_WAIT_BARRIER};
        bind b[] = {{0, pas}, {1, rows}, {2, p->wte}, {3, p->wpe}, {4, p->x}};
        uint32_t used = 1u << 0 | 1u << 1 | 1u << 2 | 1u << 4 | (p->llama ? 0 : 1u << 3);
        if ((st = add_launch(p, ps_, wgml_decode_embed_wgsl(&e), used, b, 5, GRID_ROW_ELEMS, 0, (uint32_t)C, 0, "embedding"))) return st;
    }
    const unsigned ps = (unsigned)(p->rmax * C), CP = (unsigned)round8(C);
    for (int64_t l = 0; p->fused && l < p->cfg.layers; l++) {
        layer_bufs *lb = &p->L[l];
        uint32_t used;
        /* norm + QKV + bias + cache append, its input the residual stream: the embedding (layer
           0) or the last layer's x + its MLP's partial sums, which workgroup 0 writes to x */
        const normed_launch nq = normed_launch_of(p, prefill, p->Q, x_whole, nrn);
        wgml_decode_gemv qkv = {.K = (unsigned)C, .KP = CP, .N = (unsigned)p->Q, .lpo = nq.lanes, .hwg = nq.wgs, .planes = planes, .nr = nrn, .RB = RB, .kch = KCH(C), .xs = (unsigned)C,
                                .os = (unsigned)p->Q, .f16 = p->d.f16_weights, .norm = DECODE_NORM_LN, .norm_w = 0,
                                .norm_b = (unsigned)C, .eps = eps, .bias = (int)(2 * C), .epilogue = DECODE_OUT_QKV,
                                .qd = (unsigned)p->A, .kvd = (unsigned)(p->Hkv * p->D), .block = (unsigned)p->block,
                                .xsrc = l == 0 ? DECODE_X_EMBED : DECODE_X_SUM, .np = (unsigned)p->nmlp, .ps = ps, .ekp = CP,
                                .e_f16 = p->d.f16_weights, .positions = 1, .persist = 1, .sg = p->sg, .f16c = p->f16c};
        bind bq[] = {{0, pas}, {2, p->xb}, {3, lb->wqkv}, {4, lb->vecs}, {5, p->qkv}, {6, rows}, {7, lb->kc}, {8, lb->vc},
                     {9, p->mlp_parts}, {10, p->x}, {11, p->wpe}, {12, p->wte}};
        char *w = wgml_decode_gemv_wgsl(&qkv, &used);
        if ((st = add_launch(p, ps_, w, used, bq, 12, GRID_FIXED, nq.groups, 1, 0, "norm+qkv+append (fused)"))) return st;
        /* attention + the output projection (and its bias), a partial sum per K/V head */
        wgml_decode_attn at = {.D = (unsigned)p->D, .G = (unsigned)(p->H / p->Hkv), .kvd = (unsigned)(p->Hkv * p->D),
                               .block = (unsigned)p->block, .qs = (unsigned)p->Q, .as = (unsigned)p->A,
                               .scale = (float)(1.0 / sqrt((double)p->D)), .wo_fused = 1, .f16 = p->d.f16_weights,
                               .bias = (int)(5 * C), .C = (unsigned)C, .cp = CP, .ps = ps, .wgs = p->wide_wgs, .max_parts = (unsigned)p->d.attn_parts,
                               .cols = (unsigned)p->d.attn_cols, .f16c = p->f16c};
        bind ba[] = {{0, rows}, {1, p->qkv}, {2, lb->kc}, {3, lb->vc}, {5, lb->wo}, {6, lb->vecs}, {7, p->attn_parts}};
        used = 0xefu;
        if ((st = add_launch(p, ps_, wgml_decode_attention_wgsl(&at), used, ba, 7, GRID_ROWS, 0, (uint32_t)(p->Hkv * p->d.attn_cols), 0,
                             "attention+wo (fused)")))
            return st;
        /* norm + MLP, its input x + those partial sums (workgroup 0 writes the sum to xb) */
        wgml_decode_mlp mlp = {.C = (unsigned)C, .CP = CP, .F = (unsigned)F, .FB = (unsigned)p->mlp_block, .RB = RB, .np = (unsigned)p->Hkv,
                               .ps = ps, .f16 = p->d.f16_weights, .eps = eps, .norm_w = (unsigned)(6 * C),
                               .norm_b = (unsigned)(7 * C), .b1 = (unsigned)(8 * C), .b2 = (unsigned)(8 * C + F)};
        bind bm[] = {{0, pas}, {2, p->x}, {3, lb->w1}, {4, lb->vecs}, {9, p->attn_parts}, {10, p->xb}, {13, lb->w2},
                     {14, p->mlp_parts}};
        used = 1u << 0 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 9 | 1u << 10 | 1u << 13 | 1u << 14;
        if ((st = add_launch(p, ps_, wgml_decode_mlp_wgsl(&mlp), used, bm, 8, GRID_FIXED, (uint32_t)p->nmlp, 1, 0, "norm+mlp (fused)"))) return st;
    }
    /* GPT-2's decode step with the grid block: each layer's QKV worked out by the last layer's
       block (layer 0's by its GEMV, plain), the attention appending k and v as Llama's does */
    const int append = !p->llama && !prefill && p->grid_w;
    for (int64_t l = 0; !p->fused && l < p->cfg.layers; l++) {
        layer_bufs *lb = &p->L[l];
        uint32_t used;
        char *w;
        /* vecs: GPT-2 [ln1w C][ln1b C][bqkv 3C][bo C][ln2w C][ln2b C][b1 F][b2 C]; Llama [n1w C][n2w C][qn D][kn D] */
        const normed_launch nq = normed_launch_of(p, prefill, p->Q, x_whole, nrn), nu = normed_launch_of(p, prefill, p->llama ? 2 * F : F, x_whole, nrn);
        wgml_decode_gemv qkv = {.K = (unsigned)C, .KP = (unsigned)round8(C), .N = (unsigned)p->Q, .lpo = nq.lanes, .hwg = nq.wgs, .planes = planes, .nr = nrn, .RB = RB,
                                .kch = KCH(C),
                                .xs = (unsigned)C, .os = (unsigned)p->Q, .f16 = p->d.f16_weights,
                                .norm = p->llama ? DECODE_NORM_RMS : DECODE_NORM_LN, .norm_w = 0, .norm_b = (unsigned)C, .eps = eps,
                                .bias = p->llama ? -1 : (int)(2 * C), .epilogue = p->llama || append ? DECODE_OUT_PLAIN : DECODE_OUT_QKV,
                                .qd = (unsigned)p->A, .kvd = (unsigned)(p->Hkv * p->D), .block = (unsigned)p->block, .sg = p->sg,
                                .f16c = p->f16c};
        bind bq[] = {{0, pas}, {2, p->x}, {3, lb->wqkv}, {4, lb->vecs}, {5, p->qkv}, {6, rows}, {7, lb->kc}, {8, lb->vc}};
        /* (a decode step's MLP block in one launch works out the next layer's QKV itself) */
        if (l == 0 || prefill || !p->grid_w) {
            w = wgml_decode_gemv_wgsl(&qkv, &used);
            if ((st = add_launch(p, ps_, w, used, bq, 8, GRID_FIXED, nq.groups, 1, 0, "norm+qkv gemv"))) return st;
        }
        /* Llama decoding: RoPE (and QK-norm) in the attention's launch, each row its own slot;
           a prefill's rows of one slot need every row's keys first: a launch of its own */
        const int rope_in_attention = p->llama && !prefill;
        if (p->llama && !rope_in_attention) {
            wgml_decode_rope r = {.D = (unsigned)p->D, .H = (unsigned)p->H, .Hkv = (unsigned)p->Hkv, .qs = (unsigned)p->Q,
                                  .block = (unsigned)p->block, .qk_norm = (int)p->cfg.qk_norm, .qnorm = (unsigned)(2 * C),
                                  .knorm = (unsigned)(2 * C + p->D), .eps = eps, .f16c = p->f16c};
            bind br[] = {{0, rows}, {1, p->qkv}, {2, p->freq}, {3, lb->kc}, {4, lb->vc}, {5, lb->vecs}};
            used = 0x1fu | (p->cfg.qk_norm ? 1u << 5 : 0);
            if ((st = add_launch(p, ps_, wgml_decode_rope_wgsl(&r), used, br, 6, GRID_ROWS, 0, (uint32_t)(p->H + p->Hkv), 0, "qk-norm+rope"))) return st;
        }
        /* decoding over a long block: split over chunks of positions (more workgroups than
           K/V heads), then a launch combining the chunks */
        const unsigned chunk = prefill ? p->pre_chunk : dec_chunk;
        const uint32_t nsplit = chunk ? (uint32_t)((p->block + chunk - 1) / chunk) : 1;
        /* (a chunk's workgroup: 256 threads, more where its G + 1 heads' RoPE needs 64 each) */
        const unsigned split_wgs = split_wgs_of(p);
        /* its cache loads issued first (wgml_decode_attn's early) where the workgroup memory
           allows; then 8 threads a position where the adapter allows (chunks over 32: more
           loads in flight, fewer a thread) */
        unsigned early_wgs = split_wgs;
        while (early_wgs < p->wide_wgs && early_wgs < 8 * chunk) early_wgs *= 2;
        if (p->d.attn_wgs && (unsigned)p->d.attn_wgs >= split_wgs) early_wgs = (unsigned)p->d.attn_wgs;
        wgml_decode_attn at = {.D = (unsigned)p->D, .G = (unsigned)(p->H / p->Hkv), .kvd = (unsigned)(p->Hkv * p->D),
                               .block = (unsigned)p->block, .qs = (unsigned)p->Q, .as = (unsigned)p->A,
                               .scale = (float)(1.0 / sqrt((double)p->D)), .wgs = chunk ? split_wgs : p->wide_wgs,
                               .max_parts = (unsigned)p->d.attn_parts, .rope = rope_in_attention,
                               .qk_norm = (int)p->cfg.qk_norm, .hq = (unsigned)p->H, .qnorm = (unsigned)(2 * C),
                               .knorm = (unsigned)(2 * C + p->D), .eps = eps, .chunk = chunk,
                               .combine = chunk && !prefill && combine_fits(p, chunk),
                               .early = chunk && !p->d.attn_late, .sg = p->sg, .f16c = p->f16c, .append = append};
        if (at.early) { /* the wider workgroup only where the early form takes it */
            const unsigned late_wgs = at.wgs;
            at.wgs = early_wgs;
            if (!wgml_decode_attn_early_fits(&at, p->ctx->rt.limits.maxComputeWorkgroupStorageSize)) at.early = 0, at.wgs = late_wgs;
        }
        bind ba[] = {{0, rows}, {1, p->qkv}, {2, lb->kc}, {3, lb->vc}, {4, chunk ? p->asums : p->att}, {6, lb->vecs}, {8, p->freq},
                     {9, p->aml}, {10, p->att}, {11, p->acount}};
        used = 0x1fu | (rope_in_attention ? 1u << 8 : 0) | (rope_in_attention && p->cfg.qk_norm ? 1u << 6 : 0) | (chunk ? 1u << 9 : 0) |
               (at.combine ? 1u << 10 | 1u << 11 : 0);
        if ((st = add_launch(p, ps_, wgml_decode_attention_wgsl(&at), used, ba, 10, GRID_ROWS, 0, (uint32_t)p->Hkv * nsplit, 0,
                             chunk ? at.combine ? "attention (split+combine)" : "attention (split)" : "attention")))
            return st;
        if (chunk && !at.combine &&
            (st = add_launch(p, ps_, wgml_decode_attn_combine_wgsl(&at), 1u << 0 | 1u << 4 | 1u << 9 | 1u << 10, ba, 10, GRID_ROWS, 0,
                             (uint32_t)p->H, 0, "attention combine")))
            return st;
        if (!prefill && p->grid_w) { /* the projection, norm + gate/up and down in one launch */
            const int next = l + 1 < p->cfg.layers;
            /* (vecs as above; GPT-2's next QKV bias at 2 C of the next layer's) */
            const wgml_decode_block bk = {.A = (unsigned)p->A, .C = (unsigned)C, .F = (unsigned)F, .W = p->grid_w,
                                          .norm_w = (unsigned)(p->llama ? C : 6 * C), .Q = next ? (unsigned)p->Q : 0,
                                          .f16 = p->d.f16_weights, .sg = p->sg, .eps = eps, .ln = !p->llama,
                                          .norm_b = (unsigned)(7 * C), .bo = (unsigned)(5 * C), .b1 = (unsigned)(8 * C),
                                          .b2 = (unsigned)(8 * C + F), .bq = (unsigned)(2 * C), .planes = planes, .K = p->grid_k,
                                          .wait = p->grid_wait};
            bind bb[] = {{1, p->att}, {2, p->x}, {3, lb->wo}, {4, lb->w1}, {5, lb->w2}, {6, lb->vecs}, {7, p->h}, {8, p->gbar},
                         {9, next ? p->L[l + 1].wqkv : NULL}, {10, next ? p->L[l + 1].vecs : NULL}, {11, p->qkv}};
            if ((st = add_launch(p, ps_, wgml_decode_block_wgsl(&bk), next ? 0xffeu : 0x1feu, bb, 11, GRID_FIXED, bk.W, 1, 0,
                                 next ? "mlp block + next qkv (grid)" : "mlp block (grid)")))
                return st;
            if (!ps_->grid_at) ps_->grid_at = ps_->n;
            continue;
        }
        wgml_decode_gemv wo = {.K = (unsigned)p->A, .KP = (unsigned)round8(p->A), .N = (unsigned)C, .lpo = lanes_for(C), .planes = planes, .nr = nr,
                               .RB = (RB + rg - 1) / rg, .rgroups = rg, .kch = KCH(p->A),
                               .xs = (unsigned)p->A, .os = (unsigned)C, .f16 = p->d.f16_weights, .norm = DECODE_NORM_NONE,
                               .bias = p->llama ? -1 : (int)(5 * C), .epilogue = DECODE_OUT_RESID, .sg = p->sg};
        bind bo[] = {{0, pas}, {2, p->att}, {3, lb->wo}, {4, lb->vecs}, {5, p->x}};
        w = wgml_decode_gemv_wgsl(&wo, &used);
        if ((st = add_launch(p, ps_, w, used, bo, 5, GRID_FIXED, wgml_decode_gemv_tiles(wo.N, wo.lpo, wo.nr), rg, 0, "wo gemv+residual"))) return st;
        wgml_decode_gemv up = {.K = (unsigned)C, .KP = (unsigned)round8(C), .N = (unsigned)(p->llama ? 2 * F : F), .planes = planes, .nr = nrn, .RB = RB, .lpo = nu.lanes,
                               .hwg = nu.wgs,
                               .kch = KCH(C), .xs = (unsigned)C, .os = (unsigned)F, .f16 = p->d.f16_weights,
                               .norm = p->llama ? DECODE_NORM_RMS : DECODE_NORM_LN, .norm_w = (unsigned)(p->llama ? C : 6 * C),
                               .norm_b = (unsigned)(7 * C), .eps = eps, .bias = p->llama ? -1 : (int)(8 * C),
                               .epilogue = p->llama ? DECODE_OUT_SWIGLU : DECODE_OUT_GELU, .sg = p->sg};
        bind bu[] = {{0, pas}, {2, p->x}, {3, lb->w1}, {4, lb->vecs}, {5, p->h}};
        w = wgml_decode_gemv_wgsl(&up, &used);
        if ((st = add_launch(p, ps_, w, used, bu, 5, GRID_FIXED, nu.groups, 1, 0, "norm+mlp up gemv"))) return st;
        wgml_decode_gemv down = {.K = (unsigned)F, .KP = (unsigned)round8(F), .N = (unsigned)C, .lpo = lanes_for(C), .planes = planes, .nr = nr,
                                 .RB = (RB + rg - 1) / rg, .rgroups = rg, .kch = KCH(F),
                                 .xs = (unsigned)F, .os = (unsigned)C, .f16 = p->d.f16_weights, .norm = DECODE_NORM_NONE,
                                 .bias = p->llama ? -1 : (int)(8 * C + F), .epilogue = DECODE_OUT_RESID, .sg = p->sg};
        bind bd[] = {{0, pas}, {2, p->h}, {3, lb->w2}, {4, lb->vecs}, {5, p->x}};
        w = wgml_decode_gemv_wgsl(&down, &used);
        if ((st = add_launch(p, ps_, w, used, bd, 5, GRID_FIXED, wgml_decode_gemv_tiles(down.N, down.lpo, down.nr), rg, 0, "mlp down gemv+residual"))) return st;
    }
    uint32_t used;
    const unsigned RBH = (unsigned)(p->B < 8 ? p->B : 8);
    const unsigned hl = head_lanes(&p->d, p->V);
    /* the head's workgroups going over its tiles (grid stride; the generator's condition: x in one chunk) */
    const unsigned nrh = gemv_rows_of(&p->d, RBH, 1);
    const uint32_t tiles = wgml_decode_gemv_tiles((uint64_t)p->V, hl, nrh);
    const uint32_t hwg = KCH(C) >= round8(C) ? head_workgroups(&p->d, hl, tiles) : 0;
    wgml_decode_gemv hd = {.K = (unsigned)C, .KP = (unsigned)round8(C), .N = (unsigned)p->V, .lpo = hl, .planes = planes, .nr = nrh, .RB = RBH, .kch = KCH(C),
                           .xs = (unsigned)C, .os = (unsigned)p->V, .f16 = p->d.f16_weights,
                           .norm = p->llama ? DECODE_NORM_RMS : DECODE_NORM_LN, .norm_w = 0, .norm_b = (unsigned)C, .eps = eps,
                           .bias = -1, .epilogue = DECODE_OUT_PLAIN, .head = 1,
                           .xsrc = p->fused ? DECODE_X_SUM : DECODE_X_PLAIN, .np = (unsigned)p->nmlp, .ps = ps, .cand = p->ncand > 0,
                           .sg = p->sg, .hwg = hwg};
    bind bh[] = {{0, pas}, {1, picks}, {2, p->fused ? p->xb : p->x}, {3, p->wte}, {4, p->fvecs}, {5, p->logits}, {6, rows}, {9, p->mlp_parts},
                 {14, p->cand}};
    char *w = wgml_decode_gemv_wgsl(&hd, &used);
    if ((st = add_launch(p, ps_, w, used, bh, 9, GRID_FIXED, hwg ? hwg : tiles, 1, 1, "norm+lm head gemv")))
        return st;
    /* the sampler draws from the head's candidates (a best noised logit a workgroup), not from every logit */
    wgml_decode_sample sm = {.V = (unsigned)p->V, .cap = p->cap, .prefill = prefill, .wgs = p->wide_wgs,
                             .cands = p->ncand ? hwg ? hwg : (unsigned)p->ncand : 0};
    bind bs[] = {{0, pas}, {1, picks}, {2, p->ncand ? p->cand : p->logits}, {3, p->drows}, {4, p->toks}, {5, p->prows}};
    return add_launch(p, ps_, wgml_decode_sample_wgsl(&sm), prefill ? 0x3fu : 0x1fu, bs, 6, GRID_PICKS, 0, 1, 1, "sampler");
#undef KCH
}

/* ---------------------------------------------------------------- creation */

static void release(WGPUBuffer *b)
{
    if (*b) wgpuBufferRelease(*b);
    *b = NULL;
}

static void pass_free(pass *ps)
{
    for (int i = 0; i < ps->n; i++) wgpuBindGroupRelease(ps->l[i].bg);
    free(ps->l);
    *ps = (pass){0};
}

void wgml_decode_plan_free(wgml_decode_plan *p)
{
    if (!p) return;
    pass *ps[6] = {&p->dec, &p->pre, &p->longer[0], &p->longer[1], &p->longer[2], &p->longer[3]};
    for (int k = 0; k < 6; k++) pass_free(ps[k]);
    for (int64_t l = 0; p->L && l < p->cfg.layers; l++) {
        layer_bufs *b = &p->L[l];
        release(&b->wqkv), release(&b->wo), release(&b->w1), release(&b->w2), release(&b->vecs), release(&b->kc), release(&b->vc);
    }
    free(p->L);
    WGPUBuffer *bufs[] = {&p->asums, &p->aml, &p->acount, &p->gbar, &p->xb, &p->attn_parts, &p->mlp_parts, &p->wte, &p->wpe, &p->fvecs, &p->freq, &p->x, &p->qkv, &p->att, &p->h, &p->logits, &p->cand,
                          &p->drows, &p->prows, &p->dpass, &p->ppass, &p->dpicks, &p->ppicks, &p->toks, &p->staging[0], &p->staging[1]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) release(bufs[i]);
    for (int64_t s = 0; p->hist && s < p->B; s++) free(p->hist[s]);
    free(p->hist), free(p->n_hist), free(p->hist_cap), free(p->len), free(p->count);
    free(p);
}

typedef struct pass_header {
    uint32_t R, S;
    float temperature;
    uint32_t seed;
} pass_header;

/* The parameters of layer l (gpt.h's order) on the host, uploaded in the GEMV layout. */
static wgml_status upload_layer(wgml_decode_plan *p, wgml_gpt *g, int64_t l)
{
    /* (gpt.h's order: the embeddings, then each layer's table rows) */
    const int first = (p->llama ? 1 : 2) + (int)l * wgml_gpt_layer_params(&p->cfg);
    wgml_tensor **P = g->m.params + first;
    layer_bufs *lb = &p->L[l];
    const int64_t C = p->C, F = p->F;
    /* the matrices, [in, out] in the model: transposed (the fused GPT-2's wo and w2 read as they are) */
    const int iq = p->llama ? 1 : 2, io = p->llama ? 2 : 4, i1 = p->llama ? 4 : 8, i2 = p->llama ? 5 : 10;
    gpu_matrix gm[4] = {{P[iq], LAYOUT_COLS, p->Q, C, "decode wqkv", &lb->wqkv},
                        {P[io], p->fused ? LAYOUT_ROWS : LAYOUT_COLS, p->fused ? p->A : C, p->fused ? C : p->A, "decode wo", &lb->wo},
                        {P[i1], p->llama ? LAYOUT_SWIGLU : LAYOUT_COLS, p->llama ? 2 * F : F, C, "decode w1", &lb->w1},
                        {P[i2], p->fused ? LAYOUT_ROWS : LAYOUT_COLS, p->fused ? F : C, p->fused ? C : F, "decode w2", &lb->w2}};
    wgml_status st = lay_out(p, gm, 4);
    /* the vectors, one buffer */
    static const int gpt2_vecs[] = {0, 1, 3, 5, 6, 7, 9, 11}, llama_vecs[] = {0, 3, 6, 7};
    const int *which = p->llama ? llama_vecs : gpt2_vecs;
    const int nv = p->llama ? (p->cfg.qk_norm ? 4 : 2) : 8;
    int64_t total = 0;
    for (int i = 0; i < nv; i++) total += wgml_tensor_numel(P[which[i]]);
    float *v = st ? NULL : malloc((size_t)total * sizeof *v);
    if (!st && !v) st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
    for (int i = 0, at = 0; !st && i < nv; i++) {
        int64_t n = wgml_tensor_numel(P[which[i]]);
        st = wgml_tensor_read(P[which[i]], v + at, (size_t)n);
        at += (int)n;
    }
    lb->vecs = make_buffer(p, (uint64_t)total * 4, STORAGE, "decode vectors", &st);
    if (!st) write_buffer(p, lb->vecs, 0, v, (size_t)total * 4);
    free(v);
    const uint64_t cache = (uint64_t)(p->B * p->block * p->Hkv * p->D) * (p->f16c ? 2 : 4);
    lb->kc = make_buffer(p, cache, STORAGE, "decode K cache", &st);
    lb->vc = make_buffer(p, cache, STORAGE, "decode V cache", &st);
    return st;
}

static void encode_launch(wgml_decode_plan *p, WGPUComputePassEncoder cp, const launch *l, uint32_t R, uint32_t S);

/* The MLP block's barrier words (gbar): the arrivals' count, a word set where a wait gave up,
   the waits' bound (reads of the count: short for the trial, long enough for any real wait after
   it); BAR_BYTES in all, copied after the tokens. With grid_k counters the others lie at words
   BAR_STRIDE j (256 bytes apart). */
enum { BAR_COUNT, BAR_GAVE_UP, BAR_SPIN, BAR_BYTES = 16, BAR_STRIDE = 64, BAR_MAX_COUNTERS = 16 };
enum { GRID_TRIAL_SPIN = 1 << 16, GRID_RUN_SPIN = 1 << 24 };

/* count: as if that many arrivals had come (a multiple of the grid); with k counters each is
   set 1/k of count's distance to 2^32 short of it, so that all wrap at the barrier one counter
   would (each takes 1/k of a barrier's arrivals) */
uint32_t wgml_decode_grid_counter_start(uint32_t count, unsigned k) { return k > 1 ? 0u - (0u - count) / k : count; }

static void grid_set(wgml_decode_plan *p, uint32_t count, uint32_t gave_up, uint32_t spin)
{
    uint32_t w[BAR_STRIDE * BAR_MAX_COUNTERS];
    const unsigned k = p->grid_k > 1 ? p->grid_k : 1;
    const uint32_t each = wgml_decode_grid_counter_start(count, k);
    memset(w, 0, sizeof w);
    for (unsigned j = 0; j < k; j++) w[BAR_STRIDE * j] = each;
    w[BAR_GAVE_UP] = gave_up, w[BAR_SPIN] = spin;
    write_buffer(p, p->gbar, 0, w, k > 1 ? (size_t)BAR_STRIDE * 4 * k : BAR_BYTES);
}

/* Whether the decode pass's MLP block launch (grid_w workgroups) had them all resident at once:
   its first launch alone with short waits, then the word a wait sets where it gave up. */
static int grid_trial(wgml_decode_plan *p, wgml_status *st)
{
    if (!p->dec.grid_at) return 0;
    const launch *l = &p->dec.l[p->dec.grid_at - 1];
    /* (a wait over several counters reads one word a round, not three: more rounds for about
       the same time; probed has no counters) */
    grid_set(p, 0, 0, p->grid_k > 1 && p->grid_wait != WGML_GRID_WAIT_PROBED ? 4 * GRID_TRIAL_SPIN : GRID_TRIAL_SPIN);
    if (p->grid_wait != WGML_GRID_WAIT_BARRIER) {
        /* (x and h as no phase of the launch has written them: tag 1; h also where a workgroup
           that would set it never runs) */
        const size_t n = (size_t)(p->C > p->F ? p->C : p->F);
        uint32_t *ones = malloc(n * 4);
        if (!ones) {
            *st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
            return 0;
        }
        for (size_t i = 0; i < n; i++) ones[i] = 1;
        write_buffer(p, p->x, 0, ones, (size_t)p->C * 4);
        write_buffer(p, p->h, 0, ones, (size_t)p->F * 4);
        free(ones);
    }
    wgml_runtime *rt = &p->ctx->rt;
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(rt->device, NULL);
    if (!enc) {
        *st = wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode plan: no command encoder");
        return 0;
    }
    WGPUComputePassEncoder cp = wgpuCommandEncoderBeginComputePass(enc, NULL);
    encode_launch(p, cp, l, 1, 0);
    wgpuComputePassEncoderEnd(cp);
    wgpuComputePassEncoderRelease(cp);
    wgpuCommandEncoderCopyBufferToBuffer(enc, p->gbar, 0, p->staging[0], 0, BAR_BYTES);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if ((*st = wgml_submit(rt, cb)) || (*st = wgml_map_read(rt, p->staging[0], BAR_BYTES))) return 0;
    const uint32_t *w = wgpuBufferGetConstMappedRange(p->staging[0], 0, BAR_BYTES);
    const int ok = w && w[BAR_GAVE_UP] == 0;
    wgpuBufferUnmap(p->staging[0]);
    return ok;
}

/* Whether the plan tries the MLP block in one launch (below): at batch 1 where storageBarrier is a
   device-scope fence, on a GPU unless forced; GPT-2 then takes five launches a layer, not the
   three of its fused form (unfused asks for the five without the block), where its head size is
   even (its attention appends k and v in pairs, as RoPE's) */
static int grid_wanted(const wgml_decode_plan *p)
{
    const int cpu = strcmp(p->ctx->rt.info.adapter_type, "CPU") == 0;
    return p->d.grid_block >= 0 && (p->llama || (!p->d.unfused && p->D % 2 == 0)) && p->B == 1 && combine_possible(p) &&
           (!cpu || p->d.grid_block > 0);
}

/* The MLP block in one launch (wgml_decode_desc's grid_block): Llama or GPT-2 at batch 1 where
   storageBarrier is a device-scope fence (combine_possible), on a GPU (lavapipe's loops stop
   after 65,535 rounds without saying so: one workgroup only, whose waits end at once); forced,
   or the policy's count (below), else half that (each faster than the launches apart for
   Qwen3's b1 step on an H200: docs/MEASUREMENTS.md), each kept where a
   trial launch (twice, if the first gives up) finds its workgroups all resident at once. Builds
   the decode pass where it takes the block. */
static wgml_status choose_grid(wgml_decode_plan *p)
{
    const int forced = p->d.grid_block > 0, cpu = strcmp(p->ctx->rt.info.adapter_type, "CPU") == 0;
    const wgml_decode_block shape = {.A = (unsigned)p->A, .C = (unsigned)p->C, .F = (unsigned)p->F, .ln = !p->llama};
    const uint64_t wg_bytes = wgml_decode_block_bytes(&shape);
    if (!grid_wanted(p)) return WGML_OK;
    if (p->ctx->rt.info.max_storage_buffers_per_shader_stage < 11) /* (its bindings) */
        return forced ? wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode plan: grid_block: the MLP block binds 11 storage buffers, "
                                  "past this adapter's %u", p->ctx->rt.info.max_storage_buffers_per_shader_stage)
                      : WGML_OK;
    if (wg_bytes > p->ctx->rt.limits.maxComputeWorkgroupStorageSize)
        return forced ? wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode plan: grid_block: the MLP block declares %llu bytes of "
                                  "workgroup memory, past this adapter's %u", (unsigned long long)wg_bytes,
                                  p->ctx->rt.limits.maxComputeWorkgroupStorageSize)
                      : WGML_OK;
    if (cpu && p->d.grid_block > 1)
        return wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode plan: grid_block = %d: a CPU adapter's barriers across workgroups take "
                         "one workgroup only", p->d.grid_block);
    wgml_status st = WGML_OK;
    p->gbar = make_buffer(p, (uint64_t)BAR_STRIDE * 4 * BAR_MAX_COUNTERS, STORAGE, "decode grid barrier", &st);
    /* (the policy's first try: 256 where a phase has 4,096 rows or more, as Qwen3-0.6B's
       gate/up; else 128, as the character GPT's widest, 1,536: on an H200 6,320-6,350 tokens/s
       against 5,980-6,020 with 256 and 6,050-6,070 with 64, docs/MEASUREMENTS.md) */
    const int64_t rows = p->llama ? 2 * p->F : p->F > p->Q ? p->F : p->Q;
    const unsigned first = rows >= 4096 ? 256u : 128u;
    const unsigned tries[2] = {forced ? (unsigned)p->d.grid_block : first, forced ? 0u : first / 2};
    for (int k = 0; k < 2 && tries[k] && !st; k++) {
        p->grid_w = tries[k];
        /* (the policy's: 8 at 256 workgroups, Qwen3-0.6B's b1 step on an H200 1.1% faster than
           with one, as with 2 to 16; one at 128, the character GPT's f16 step 2% slower with 8:
           docs/MEASUREMENTS.md; never more than the arrivals) */
        p->grid_k = p->d.grid_counters > 0 ? (unsigned)p->d.grid_counters : p->grid_w >= 256 ? 8u : 1u;
        /* (the policy's: tagged at 256, probed below where every workgroup has rows in each phase:
           Qwen3-0.6B's b1 step on an H200 3.1-3.9% faster than with the barrier, probed 4-6% slower;
           the character GPT's f16 step probed 9% faster, tagged 3.5%: docs/MEASUREMENTS.md) */
        wgml_decode_block at_w = shape;
        at_w.W = p->grid_w;
        const int probes = wgml_decode_block_rows_everywhere(&at_w);
        p->grid_wait = p->d.grid_wait ? (wgml_grid_wait)(p->d.grid_wait - 1)
                       : p->grid_w >= 256 || !probes ? WGML_GRID_WAIT_TAGGED : WGML_GRID_WAIT_PROBED;
        if (p->grid_wait == WGML_GRID_WAIT_PROBED && !probes) {
            st = wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode plan: grid_wait 3 (probed) needs each of the MLP block's %u "
                           "workgroups to have rows in every phase (width %lld, hidden size %lld have fewer); ask for 2 or 0",
                           p->grid_w, (long long)p->C, (long long)p->F);
            break;
        }
        if (p->grid_k > p->grid_w) p->grid_k = p->grid_w;
        /* (twice: a fresh pipeline's first launch may start its workgroups late) */
        if (!(st = build_pass(p, 0, p->attn_chunk, &p->dec)) && (grid_trial(p, &st) || (!st && grid_trial(p, &st)))) break;
        pass_free(&p->dec);
        p->grid_w = 0;
    }
    if (!st && forced && !p->grid_w)
        st = wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode plan: the MLP block's %d workgroups are not all resident at once on "
                       "this adapter (a barrier across them gave up); ask for fewer, or 0 for the policy", p->d.grid_block);
    if (!st && p->grid_w) grid_set(p, 0, 0, GRID_RUN_SPIN);
    if (!p->grid_w) release(&p->gbar); /* (no block: no word for the token reads to check) */
    return st;
}

wgml_status wgml_decode_plan_create(wgml_gpt *g, const wgml_decode_desc *desc, wgml_decode_plan **out)
{
    if (!g || !g->ctx || !out) return WGML_ERROR_INVALID_ARGUMENT;
    *out = NULL;
    wgml_context *ctx = g->ctx;
    wgml_decode_desc d = desc ? *desc : (wgml_decode_desc){0};
    if (d.batch < 0 || d.max_prefill < 0 || d.steps_per_submit < 0 || d.batch > 256 || !(d.temperature >= 0))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: batch %lld (1 to 256), max_prefill %lld, steps %lld and "
                         "temperature %g must be >= 0", (long long)d.batch, (long long)d.max_prefill,
                         (long long)d.steps_per_submit, (double)d.temperature);
    const wgml_gpt_config *c = &g->cfg;
    if (!d.batch) d.batch = 1;
    if (!d.max_prefill) d.max_prefill = c->block < 256 ? c->block : 256;
    if (!d.steps_per_submit) d.steps_per_submit = 16;
    if (d.temperature < 1e-4f) d.temperature = 0;
    if (d.steps_per_submit > 4096) d.steps_per_submit = 4096;
    if (d.x_chunk < 0 || d.x_chunk % 8)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: x_chunk = %d; want a multiple of 8", d.x_chunk);
    if (d.mlp_block < 0 || d.mlp_block % 8)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: mlp_block = %d; want a multiple of 8", d.mlp_block);
    if (d.attn_parts < 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: attn_parts = %d", d.attn_parts);
    if (d.graph_prefill < -1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: graph_prefill = %d; want -1, 0 or a length", d.graph_prefill);
    if (!d.graph_prefill) d.graph_prefill = 64;
    if (d.lanes != 0 && d.lanes != 8 && d.lanes != 16 && d.lanes != 32 && d.lanes != 64 && d.lanes != 128)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: lanes = %d; want 0, 8, 16, 32, 64 or 128", d.lanes);
    if (d.head_lanes != 0 && d.head_lanes != 8 && d.head_lanes != 16 && d.head_lanes != 32 && d.head_lanes != 64 && d.head_lanes != 128)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: head_lanes = %d; want 0, 8, 16, 32, 64 or 128", d.head_lanes);
    if (d.subgroups < -1 || d.subgroups > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: subgroups = %d; want -1, 0 or 1", d.subgroups);
    if (d.subgroups > 0 && !ctx->rt.info.has_subgroups)
        return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "decode plan: subgroups asked for, and the adapter has none");
    if (d.head_wgs < -1) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: head_wgs = %d; want -1, 0 or a count", d.head_wgs);
    if (d.gemv_wgs < -1) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: gemv_wgs = %d; want -1, 0 or a count", d.gemv_wgs);
    if (d.attn_cols < 0 || d.attn_cols > c->width)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: attn_cols = %d; want 0 to the width", d.attn_cols);
    /* (4: the character GPT at batch 1 on an H200, 5,480 tokens/s against 5,081 with 1, one
       run each; Qwen3's shape does not use this form) */
    if (!d.attn_cols) d.attn_cols = c->width >= 4 ? 4 : 1;
    if (d.attn_late < 0 || d.attn_late > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: attn_late = %d; want 0 or 1", d.attn_late);
    if (d.combine_launch < 0 || d.combine_launch > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: combine_launch = %d; want 0 or 1", d.combine_launch);
    if (d.sample_logits < 0 || d.sample_logits > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: sample_logits = %d; want 0 or 1", d.sample_logits);
    if (d.grid_block < -1 || d.grid_block > 4096 || (d.grid_block > 0 && (d.grid_block & (d.grid_block - 1))))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: grid_block = %d; want -1, 0 or a power of two up to 4096",
                         d.grid_block);
    if (d.grid_wait < 0 || d.grid_wait > WGML_GRID_WAIT_PROBED + 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: grid_wait = %d; want 0 to %d", d.grid_wait,
                         WGML_GRID_WAIT_PROBED + 1);
    if (d.grid_counters < 0 || d.grid_counters > BAR_MAX_COUNTERS || (d.grid_counters & (d.grid_counters - 1)))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: grid_counters = %d; want 0 or a power of two up to %d",
                         d.grid_counters, BAR_MAX_COUNTERS);
    if (d.attn_target < 0) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: attn_target = %d; want 0 or more", d.attn_target);
    if (d.host_layout < 0 || d.host_layout > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: host_layout = %d; want 0 or 1", d.host_layout);
    if (d.f16_cache < 0 || d.f16_cache > 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: f16_cache = %d; want 0 or 1", d.f16_cache);
    const int64_t G = c->heads / c->kv_heads;
    const uint32_t wg_mem = ctx->rt.limits.maxComputeWorkgroupStorageSize;
    /* the attention: 1024 threads where the adapter allows (more of the cache's loads in flight) */
    const WGPULimits *lim = &ctx->rt.limits;
    const unsigned wide_wgs = lim->maxComputeInvocationsPerWorkgroup >= 1024 && lim->maxComputeWorkgroupSizeX >= 1024 ? 1024 : 256;
    if (d.attn_wgs != 0 && d.attn_wgs != 256 && !(d.attn_wgs == 512 && wide_wgs >= 512) && !(d.attn_wgs == 1024 && wide_wgs >= 1024))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode plan: attn_wgs = %d; want 0, 256, 512 or 1024, at most %u", d.attn_wgs, wide_wgs);
    /* (f16 weights need no shader-f16: unpack2x16float is core WGSL, the sums stay f32) */
    wgml_decode_plan *p = calloc(1, sizeof *p);
    if (!p) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
    p->ctx = ctx, p->g = g, p->cfg = *c, p->d = d, p->llama = c->arch == WGML_GPT_LLAMA, p->wide_wgs = wide_wgs;
    p->sg = d.subgroups > 0 || (d.subgroups == 0 && ctx->rt.info.has_subgroups);
    p->gpu_layout = !d.host_layout;
    p->f16c = d.f16_cache && ctx->rt.info.has_shader_f16 && c->kv_heads * c->head_dim % 2 == 0;
    p->C = c->width, p->D = c->head_dim, p->H = c->heads, p->Hkv = c->kv_heads, p->A = p->H * p->D;
    p->Q = (p->H + 2 * p->Hkv) * p->D, p->F = c->ffn, p->V = c->vocab, p->block = c->block, p->B = d.batch;
    p->P = d.max_prefill, p->rmax = p->P > p->B ? p->P : p->B, p->cap = (uint32_t)d.steps_per_submit;
    /* The attention over a whole block keeps its scores (G a position) in workgroup memory;
       past that the prefill's attention splits too (below) and GPT-2 is not fused */
    const int whole_fits = attn_fits(p, 0, 0, 0);
    if (!whole_fits && d.attn_chunk < 0) {
        wgml_status e = wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "decode plan: the attention keeps %lld scores a row in workgroup memory "
                                  "(%u bytes here): block %lld is too long to keep whole (attn_chunk -1)", (long long)(G * c->block),
                                  wg_mem, (long long)c->block);
        free(p);
        return e;
    }
    /* 32 hidden units a workgroup where the partial sums stay few (the character GPT's MLP: 48
       workgroups, 4,604 tokens/s against 3,778 with 64 on the H200, docs/MEASUREMENTS.md) */
    p->mlp_block = d.mlp_block ? d.mlp_block : (p->F + 31) / 32 <= 64 ? 32 : 64;
    p->nmlp = (p->F + p->mlp_block - 1) / p->mlp_block;
    /* GPT-2 in three launches a layer where the MLP's staged rows (whole, RB of them: 8 in a
       prefill), its hidden block and sums fit the workgroup memory and the partial sums are few */
    const int64_t mlp_mem = (8 * round8(p->C) + 8 * 256 + 8 * p->mlp_block + 16) * 4;
    const int gpt2_grid = !p->llama && grid_wanted(p); /* (the fused form given up for the grid block) */
    p->fused = !p->llama && !d.unfused && mlp_mem <= (int64_t)wg_mem && p->nmlp <= 64 && p->Hkv <= 64 && whole_fits && !gpt2_grid;

    /* the decode step's attention split over chunks of positions where the block is long
       (one workgroup a K/V head would read a long cache on a few of the GPU's cores); the
       fused GPT-2 attention (its projection inside) stays whole. 64 a row at batch 1 (Qwen3's
       shape on the H200 with the cache's loads issued first: 854 tokens/s against 829 with 32
       and 707 with 128, docs/MEASUREMENTS.md); 16 times the rows with more rows (at batch 8
       chunks of 128: 2,156-2,167 tokens/s against 2,094-2,099 with 256, 2,023-2,028 with 64) */
    unsigned auto_chunk = 64;
    while (auto_chunk < 16 * (unsigned)d.batch && auto_chunk < (unsigned)c->block) auto_chunk *= 2;
    p->attn_chunk = p->fused || d.attn_chunk < 0 ? 0 : d.attn_chunk > 0 ? (unsigned)d.attn_chunk : c->block >= 512 || !whole_fits ? auto_chunk : 0u;
    if (p->attn_chunk >= (unsigned)c->block && whole_fits) p->attn_chunk = 0;
    /* Where the whole block's scores do not fit: the prefill's attention in at most 64 chunks of
       a power of two positions, combined by a launch; the decode step's chunks halved until
       they fit */
    if (!whole_fits) {
        unsigned pc = 64;
        while ((c->block + pc - 1) / pc > 64) pc *= 2;
        while (p->attn_chunk > 1 && !split_fits(p, p->attn_chunk, 0)) p->attn_chunk /= 2;
        if (!split_fits(p, pc, 1) || !p->attn_chunk || !split_fits(p, p->attn_chunk, 0)) {
            wgml_status e = wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "decode plan: the attention's chunks of a block of %lld positions "
                                      "do not fit %u bytes of workgroup memory (%lld query heads a K/V head)",
                                      (long long)c->block, wg_mem, (long long)G);
            free(p);
            return e;
        }
        p->pre_chunk = pc;
    }
    /* the chunks combined inside the attention's launch: wgpu-native only (decode_wgsl.c: the
       memory model), and where its (max, sum) per chunk fit the workgroup memory too */
    p->L = calloc((size_t)c->layers, sizeof *p->L);
    p->len = calloc((size_t)p->B, sizeof *p->len), p->count = calloc((size_t)p->B, sizeof *p->count);
    p->hist = calloc((size_t)p->B, sizeof *p->hist), p->n_hist = calloc((size_t)p->B, sizeof *p->n_hist);
    p->hist_cap = calloc((size_t)p->B, sizeof *p->hist_cap);
    wgml_status st = WGML_OK;
    if (!p->L || !p->len || !p->count || !p->hist || !p->n_hist || !p->hist_cap)
        st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
    wgml_scope_push(&ctx->rt);
    for (int64_t l = 0; !st && l < c->layers; l++) st = upload_layer(p, g, l);
    gpu_matrix ge = {g->m.params[0], LAYOUT_ROWS, p->V, p->C, "decode embedding", &p->wte};
    if (!st) st = lay_out(p, &ge, 1);
    if (!p->llama) {
        float *m = read_param(p, g->m.params[1], &st);
        p->wpe = make_buffer(p, (uint64_t)(p->block * p->C) * 4, STORAGE, "decode positions", &st);
        if (!st) write_buffer(p, p->wpe, 0, m, (size_t)(p->block * p->C) * 4);
        free(m);
    }
    {
        const int tail = g->m.n - (p->llama ? 1 : 2);
        float *v = st ? NULL : malloc((size_t)(2 * p->C) * sizeof *v);
        if (!st && !v) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
        if (!st) st = wgml_tensor_read(g->m.params[tail], v, (size_t)p->C);
        if (!st && !p->llama) st = wgml_tensor_read(g->m.params[tail + 1], v + p->C, (size_t)p->C);
        p->fvecs = make_buffer(p, (uint64_t)(2 * p->C) * 4, STORAGE, "decode final norm", &st);
        if (!st) write_buffer(p, p->fvecs, 0, v, (size_t)(p->llama ? 1 : 2) * (size_t)p->C * 4);
        free(v);
    }
    if (p->llama) { /* RoPE's frequencies as ops/scan.c computes them */
        const int64_t half = p->D / 2;
        float *f = malloc((size_t)(half > 0 ? half : 1) * sizeof *f);
        if (!f && !st) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
        for (int64_t j = 0; f && j < half; j++) f[j] = 1.0f / powf(c->rope_base, (float)(2 * j) / (float)p->D);
        p->freq = make_buffer(p, (uint64_t)half * 4, STORAGE, "decode RoPE frequencies", &st);
        if (!st) write_buffer(p, p->freq, 0, f, (size_t)half * 4);
        free(f);
    }
    p->x = make_buffer(p, (uint64_t)(p->rmax * p->C) * 4, STORAGE, "decode x", &st);
    if (p->fused) {
        p->xb = make_buffer(p, (uint64_t)(p->rmax * p->C) * 4, STORAGE, "decode x (second)", &st);
        p->attn_parts = make_buffer(p, (uint64_t)(p->Hkv * p->rmax * p->C) * 4, STORAGE, "decode attention sums", &st);
        p->mlp_parts = make_buffer(p, (uint64_t)(p->nmlp * p->rmax * p->C) * 4, STORAGE, "decode MLP sums", &st);
    }
    if (p->attn_chunk || p->pre_chunk) { /* (the decode step's rows and chunks, or the prefill's) */
        const uint64_t ns = p->attn_chunk ? (uint64_t)((p->block + p->attn_chunk - 1) / p->attn_chunk) : 0;
        const uint64_t nsp = p->pre_chunk ? (uint64_t)((p->block + p->pre_chunk - 1) / p->pre_chunk) : 0;
        const uint64_t rows_ns = (uint64_t)p->B * ns > (uint64_t)p->P * nsp ? (uint64_t)p->B * ns : (uint64_t)p->P * nsp;
        p->asums = make_buffer(p, (uint64_t)p->A * rows_ns * 4, STORAGE, "decode attention chunks", &st);
        p->aml = make_buffer(p, (uint64_t)p->H * rows_ns * 2 * 4, STORAGE, "decode attention chunk maxima", &st);
        /* (zeroed, as WebGPU makes every buffer; each launch leaves them at zero again) */
        /* (for every chunk size whose combine_fits) */
        if (p->attn_chunk && combine_possible(p))
            p->acount = make_buffer(p, (uint64_t)(p->B * p->Hkv) * 4, STORAGE, "decode attention chunk counters", &st);
    }
    p->qkv = make_buffer(p, (uint64_t)(p->rmax * p->Q) * 4, STORAGE, "decode qkv", &st);
    p->att = make_buffer(p, (uint64_t)(p->rmax * p->A) * 4, STORAGE, "decode attention", &st);
    p->h = make_buffer(p, (uint64_t)(p->rmax * p->F) * 4, STORAGE, "decode hidden", &st);
    p->logits = make_buffer(p, (uint64_t)(p->B * p->V) * 4, STORAGE, "decode logits", &st);
    if (!d.sample_logits) { /* the head's workgroups a tile each (build_pass's tiles) */
        p->ncand = wgml_decode_gemv_tiles((uint64_t)p->V, head_lanes(&d, p->V), gemv_rows_of(&d, (unsigned)(p->B < 8 ? p->B : 8), 1));
        p->cand = make_buffer(p, (uint64_t)(p->B * p->ncand) * 8, STORAGE, "decode candidates", &st);
    }
    p->drows = make_buffer(p, (uint64_t)p->B * 16, STORAGE, "decode rows", &st);
    p->prows = make_buffer(p, (uint64_t)p->P * 16, STORAGE, "prefill rows", &st);
    p->dpass = make_buffer(p, 16, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, "decode pass", &st);
    p->ppass = make_buffer(p, 16, WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, "prefill pass", &st);
    p->dpicks = make_buffer(p, (uint64_t)p->B * 4, STORAGE, "decode picks", &st);
    p->ppicks = make_buffer(p, (uint64_t)p->B * 4, STORAGE, "prefill picks", &st);
    p->toks = make_buffer(p, (uint64_t)p->B * p->cap * 4, STORAGE, "decode tokens", &st);
    for (int i = 0; i < 2; i++)
        p->staging[i] = make_buffer(p, (uint64_t)p->B * p->cap * 4 + BAR_BYTES, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst,
                                    "decode staging", &st);
    if (!st) {
        uint32_t *id = malloc((size_t)p->B * 4);
        if (!id) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode plan: out of host memory");
        for (int64_t s = 0; id && s < p->B; s++) id[s] = (uint32_t)s;
        if (!st) write_buffer(p, p->dpicks, 0, id, (size_t)p->B * 4);
        free(id);
        int32_t *zero = calloc((size_t)p->B, 16);
        if (zero) write_buffer(p, p->drows, 0, zero, (size_t)p->B * 16);
        free(zero);
    }
    if (!st) st = choose_grid(p);
    if (!st && !p->dec.n) st = build_pass(p, 0, p->attn_chunk, &p->dec);
    if (!st) st = build_pass(p, 1, 0, &p->pre);
    for (unsigned ch = 2 * p->attn_chunk; !st && p->attn_chunk && ch <= (unsigned)p->block / 16 && p->nlonger < 4 && split_fits(p, ch, 0);
         ch *= 2)
        st = build_pass(p, 0, ch, &p->longer[p->nlonger++]);
    wgml_status sst = wgml_scope_pop(&ctx->rt, "decode plan");
    if (!st) st = sst;
    if (st) {
        wgml_decode_plan_free(p);
        return st;
    }
    if (gpt2_grid && !p->grid_w) {
        /* GPT-2 gave up its fused form for a grid block it did not get (the policy's trial found
           the workgroups not all resident, or the adapter's limits refused it): made again
           without the block, so that the fused form is taken where it fits, as before */
        wgml_decode_plan_free(p);
        d.grid_block = -1;
        return wgml_decode_plan_create(g, &d, out);
    }
    *out = p;
    return WGML_OK;
}

/* ---------------------------------------------------------------- running */

/* A prefill of n positions goes through the model's graph rather than the plan's rows
   (wgml_decode_desc's graph_prefill; -1 never). */
static int by_graph(const wgml_decode_plan *p, int64_t n) { return p->d.graph_prefill > 0 && n >= p->d.graph_prefill; }

static void encode_launch(wgml_decode_plan *p, WGPUComputePassEncoder cp, const launch *l, uint32_t R, uint32_t S)
{
    if (l->is_head && S == 0) return;
    uint32_t gx = l->grid == GRID_FIXED ? l->gx : l->grid == GRID_ROWS ? R : l->grid == GRID_PICKS ? S : (R * l->gy + 255) / 256;
    uint32_t gy = l->grid == GRID_ROWS || l->grid == GRID_FIXED ? l->gy : 1;
    wgpuComputePassEncoderSetPipeline(cp, l->pipe);
    wgpuComputePassEncoderSetBindGroup(cp, 0, l->bg, 0, NULL);
    wgpuComputePassEncoderDispatchWorkgroups(cp, gx, gy, 1);
    p->ctx->rt.stats.dispatches++;
}

static void encode_pass(wgml_decode_plan *p, WGPUComputePassEncoder cp, const pass *ps, uint32_t R, uint32_t S)
{
    for (int i = 0; i < ps->n; i++) encode_launch(p, cp, &ps->l[i], R, S);
}

/* The decode step's pass for `steps` steps from the slots' positions now: the attention's
   shortest chunk whose workgroups at the longest position reached stay within attn_target.
   192 takes chunks of 256 (128 workgroups) for Qwen3's shape at 4,096 positions, the best of
   an H200's sweep there (chunks of 64: 460 tokens/s, 128: 557, 256: 604, 512: 477), and keeps
   the policy's 64 at 512 positions (64 workgroups); docs/MEASUREMENTS.md. */
static const pass *decode_pass(const wgml_decode_plan *p, int64_t steps, uint32_t R)
{
    int64_t t = 0;
    for (int64_t s = 0; s < p->active; s++)
        if (p->len[s] + steps > t) t = p->len[s] + steps;
    const int64_t target = p->d.attn_target > 0 ? p->d.attn_target : 192;
    const pass *ps = &p->dec;
    for (int i = 0; i < p->nlonger && (int64_t)R * p->Hkv * ((t + ps->chunk - 1) / ps->chunk) > target; i++) ps = &p->longer[i];
    return ps;
}

unsigned wgml_decode_step_chunk(const wgml_decode_plan *p, int64_t steps)
{
    return !p ? 0 : p->active ? decode_pass(p, steps, (uint32_t)p->active)->chunk : p->attn_chunk;
}

/* Submits `steps` decode steps (or, steps = 0, one prefill pass of R rows, S picked), and
   with staging >= 0 a copy of the token rings into that staging buffer, without waiting. */
static wgml_status submit(wgml_decode_plan *p, int64_t steps, uint32_t R, uint32_t S, int staging)
{
    wgml_runtime *rt = &p->ctx->rt;
    const double t0 = wgml_host_seconds();
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(rt->device, NULL);
    if (!enc) return wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode: no command encoder");
    WGPUComputePassEncoder cp = wgpuCommandEncoderBeginComputePass(enc, NULL);
    if (steps == 0 && R > 0) encode_pass(p, cp, &p->pre, R, S);
    const pass *dec = steps ? decode_pass(p, steps, R) : &p->dec;
    for (int64_t k = 0; k < steps; k++) encode_pass(p, cp, dec, R, S);
    wgpuComputePassEncoderEnd(cp);
    wgpuComputePassEncoderRelease(cp);
    const uint64_t bytes = (uint64_t)p->B * p->cap * 4;
    if (staging >= 0) wgpuCommandEncoderCopyBufferToBuffer(enc, p->toks, 0, p->staging[staging], 0, bytes);
    /* (the grid barrier's words after the tokens: read_rings sees a wait that gave up) */
    if (staging >= 0 && p->gbar) wgpuCommandEncoderCopyBufferToBuffer(enc, p->gbar, 0, p->staging[staging], bytes, BAR_BYTES);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    wgml_status st = wgml_submit(rt, cb);
    p->host_acc += wgml_host_seconds() - t0;
    return st;
}

/* Waits for staging buffer i and copies the token rings out of it. */
static wgml_status read_rings(wgml_decode_plan *p, int i, int32_t *ring)
{
    const uint64_t bytes = (uint64_t)p->B * p->cap * 4, all = bytes + (p->gbar ? BAR_BYTES : 0);
    wgml_status st = wgml_map_read(&p->ctx->rt, p->staging[i], all);
    if (st) return st;
    const char *m = wgpuBufferGetConstMappedRange(p->staging[i], 0, all);
    uint32_t gave_up = 0;
    if (m) memcpy(ring, m, bytes);
    if (m && p->gbar) memcpy(&gave_up, m + bytes + 4 * BAR_GAVE_UP, 4);
    wgpuBufferUnmap(p->staging[i]);
    if (!m) return wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode: the tokens could not be mapped");
    if (gave_up)
        return wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode: a wait across the MLP block's %u workgroups gave up (they were not all "
                         "resident at once, or a phase's outputs never came), so these tokens are wrong; make the plan with "
                         "grid_block -1 or fewer workgroups", p->grid_w);
    return WGML_OK;
}

/* submit, then read_rings: one pass waited for */
static wgml_status run(wgml_decode_plan *p, int64_t steps, uint32_t R, uint32_t S, int read, int32_t *ring)
{
    wgml_status st = submit(p, steps, R, S, read ? 0 : -1);
    return st || !read ? st : read_rings(p, 0, ring);
}

static wgml_status push_token(wgml_decode_plan *p, int64_t s, int32_t t)
{
    if (p->n_hist[s] == p->hist_cap[s]) {
        int64_t cap = p->hist_cap[s] ? 2 * p->hist_cap[s] : 256;
        int32_t *h = realloc(p->hist[s], (size_t)cap * sizeof *h);
        if (!h) return wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode: out of host memory");
        p->hist[s] = h, p->hist_cap[s] = cap;
    }
    p->hist[s][p->n_hist[s]++] = t;
    return WGML_OK;
}

/* Positions 0..n-1 of slot's cache from tokens toks[0..n) through the model's graph: one
   forward pass of GEMMs over the whole prompt (the plan's own prefill reads every weight again
   for each few rows), its keys and values laid out as the plan's cache ([position][K/V head][D])
   and copied into the slot's part of every layer's cache. The graph's cache holds the same
   values the plan's append writes (after QK-norm and RoPE), from the model's f32 weights. */
static wgml_status graph_fill(wgml_decode_plan *p, int64_t slot, const int32_t *toks, int64_t n)
{
    wgml_context *ctx = p->ctx;
    const int64_t L = p->cfg.layers, kvd = p->Hkv * p->D;
    wgml_gpt_cache c;
    wgml_status st = wgml_gpt_cache_init(p->g, &c);
    if (st) return wgml_fail(ctx, st, "decode prefill: out of host memory");
    wgml_tensor **kv = calloc((size_t)(2 * L), sizeof *kv);
    wgml_scope_begin(ctx);
    wgml_tensor *ids = NULL;
    if (!kv) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "decode prefill: out of host memory");
    if (!st) st = wgml_tensor_from_i32(ctx, 2, (int64_t[2]){1, n}, toks, (size_t)n, &ids);
    /* the head's logits are built but never evaluated: only the caches are */
    if (!st && !wgml_gpt_decode_logits(p->g, &c, ids)) st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "decode prefill: the model's graph");
    for (int64_t l = 0; !st && l < L; l++)
        for (int64_t h = 0; h < 2; h++) { /* [2, Hkv, n, D] -> [n, Hkv, D] */
            wgml_tensor *one = wgml_reshape(ctx, wgml_slice(ctx, c.next_kv[l], 0, h, h + 1, 1), 3, (int64_t[3]){p->Hkv, n, p->D});
            kv[2 * l + h] = wgml_contiguous(ctx, wgml_transpose(ctx, one, 0, 1));
            if (p->f16c) kv[2 * l + h] = wgml_cast(ctx, kv[2 * l + h], WGML_F16);
        }
    if (!st) st = wgml_eval(ctx, (int)(2 * L), kv);
    if (!st) {
        WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
        if (!enc) st = wgml_fail(ctx, WGML_ERROR_DEVICE, "decode prefill: no command encoder");
        for (int64_t i = 0; !st && i < 2 * L; i++) { /* (kvd is even where the cache holds halves) */
            const uint64_t es = (uint64_t)wgml_dtype_bytes(kv[i]->dtype);
            st = copy_out(ctx, enc, kv[i], i % 2 ? p->L[i / 2].vc : p->L[i / 2].kc, (uint64_t)(slot * p->block * kvd) * es,
                          (uint64_t)(n * kvd) * es, "decode prefill: the graph's cache");
        }
        st = submit_copies(ctx, enc, st);
    }
    wgml_scope_end(ctx);
    wgml_gpt_cache_free(&c, L);
    free(kv);
    return st;
}

/* Feeds, for each slot s of n, tokens toks[s][0..lens[s]) at positions pos0[s].. of its cache
   in prefill passes; with sample[s] its last row draws the slot's next token. */
static wgml_status prefill(wgml_decode_plan *p, int64_t n, const int64_t *slots, const int32_t *const *toks, const int64_t *lens,
                           const int64_t *pos0, const int *sample, int *sampled)
{
    int32_t *rows = malloc((size_t)p->P * 16);
    uint32_t *picks = malloc((size_t)p->B * 4);
    if (!rows || !picks) {
        free(rows), free(picks);
        return wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode: out of host memory");
    }
    wgml_status st = WGML_OK;
    int64_t s = 0, i = 0; /* the next row to feed: slot s's token i */
    while (!st && s < n) {
        uint32_t R = 0, S = 0;
        while (s < n && R < (uint32_t)p->P) {
            const int64_t slot = slots[s];
            int32_t *row = rows + 4 * R;
            row[0] = (int32_t)slot, row[1] = (int32_t)(pos0[s] + i), row[2] = toks[s][i], row[3] = 0;
            if (i == lens[s] - 1 && sample[s]) picks[S++] = R;
            R++;
            if (++i == lens[s]) s++, i = 0;
        }
        pass_header h = {.R = R, .S = S, .temperature = p->d.temperature, .seed = (uint32_t)p->d.seed};
        write_buffer(p, p->ppass, 0, &h, sizeof h);
        write_buffer(p, p->prows, 0, rows, (size_t)R * 16);
        if (S) write_buffer(p, p->ppicks, 0, picks, (size_t)S * 4);
        st = run(p, 0, R, S, 0, NULL);
    }
    for (int64_t k = 0; sampled && k < n; k++) sampled[k] = sample[k];
    free(rows), free(picks);
    return st;
}

static void set_decode_row(wgml_decode_plan *p, int64_t slot, int64_t pos, int32_t tok, int64_t count)
{
    int32_t row[4] = {(int32_t)slot, (int32_t)pos, tok, (int32_t)count};
    write_buffer(p, p->drows, (uint64_t)slot * 16, row, 16);
}

wgml_status wgml_decode_start(wgml_decode_plan *p, int64_t count, const int32_t *const *prompts, const int64_t *lens,
                              int32_t *first)
{
    if (!p) return WGML_ERROR_INVALID_ARGUMENT;
    if (count < 1 || count > p->B || !prompts || !lens || !first)
        return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode start: %lld slots of %lld", (long long)count, (long long)p->B);
    for (int64_t s = 0; s < count; s++) {
        if (!prompts[s] || lens[s] < 1) return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode start: slot %lld has no prompt", (long long)s);
        for (int64_t i = 0; i < lens[s]; i++)
            if (prompts[s][i] < 0 || prompts[s][i] >= p->V)
                return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode start: token %d is not in the vocabulary (%lld)",
                                 prompts[s][i], (long long)p->V);
    }
    /* (a restart: the grid barrier's words afresh, a wait that gave up before forgotten) */
    if (p->gbar) grid_set(p, 0, 0, GRID_RUN_SPIN);
    int64_t *slots = malloc((size_t)count * sizeof *slots), *flen = malloc((size_t)count * sizeof *flen);
    int64_t *pos0 = calloc((size_t)count, sizeof *pos0);
    const int32_t **from = malloc((size_t)count * sizeof *from);
    int *sample = malloc((size_t)count * sizeof *sample);
    wgml_status st = slots && flen && pos0 && from && sample ? WGML_OK : wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode: out of host memory");
    for (int64_t s = 0; !st && s < count; s++) {
        p->n_hist[s] = 0;
        for (int64_t i = 0; !st && i < lens[s]; i++) st = push_token(p, s, prompts[s][i]);
        /* as wgml_gpt_generate_step's first step: a prompt past the block keeps its last block */
        flen[s] = lens[s] > p->block ? p->block : lens[s];
        from[s] = prompts[s] + lens[s] - flen[s];
        slots[s] = s, sample[s] = 1;
        p->len[s] = flen[s], p->count[s] = 0;
        set_decode_row(p, s, 0, 0, 0);
        /* a long prompt: all but its last token through the graph, the last by a prefill row
           that draws the first token */
        if (!st && by_graph(p, flen[s] - 1)) {
            st = graph_fill(p, s, from[s], flen[s] - 1);
            pos0[s] = flen[s] - 1, from[s] += flen[s] - 1, flen[s] = 1;
        }
    }
    if (!st) st = prefill(p, count, slots, from, flen, pos0, sample, NULL);
    int32_t *ring = st ? NULL : malloc((size_t)(p->B * p->cap) * 4);
    if (!st && !ring) st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode: out of host memory");
    if (!st) st = run(p, 0, 0, 0, 1, ring); /* (an empty pass: the copy and the read) */
    for (int64_t s = 0; !st && s < count; s++) {
        first[s] = ring[s * p->cap];
        p->count[s] = 1;
        st = push_token(p, s, first[s]);
    }
    if (!st) {
        p->active = count;
        pass_header h = {.R = (uint32_t)count, .S = (uint32_t)count, .temperature = p->d.temperature, .seed = (uint32_t)p->d.seed};
        write_buffer(p, p->dpass, 0, &h, sizeof h);
    }
    free(ring), free(slots), free(flen), free(pos0), free(from), free(sample);
    return st;
}

/* The tokens of a chunk of k steps, its rings in staging buffer i: each slot's next k into
   out (from step done0) and its history. */
static wgml_status collect(wgml_decode_plan *p, int i, int64_t k, int64_t done0, int64_t steps, int32_t *ring, int32_t *out)
{
    wgml_status st = read_rings(p, i, ring);
    for (int64_t s = 0; !st && s < p->active; s++) {
        for (int64_t j = 0; !st && j < k; j++) {
            int32_t t = ring[s * p->cap + (p->count[s] + j) % p->cap];
            out[s * steps + done0 + j] = t;
            st = push_token(p, s, t);
        }
        p->count[s] += k;
    }
    for (int64_t j = 0; !st && p->each && j < k; j++) /* (step by step, the slots in order) */
        for (int64_t s = 0; !p->stopped && s < p->active; s++) p->stopped = p->each(s, out[s * steps + done0 + j], p->each_user) != 0;
    if (p->stopped) p->each = NULL;
    return st;
}

wgml_status wgml_decode_generate_each(wgml_decode_plan *p, int64_t steps, int32_t *out, wgml_decode_token_fn each, void *user)
{
    if (!p) return WGML_ERROR_INVALID_ARGUMENT;
    p->each = each, p->each_user = user, p->stopped = 0;
    wgml_status st = wgml_decode_generate(p, steps, out);
    p->each = NULL, p->each_user = NULL;
    return st;
}

wgml_status wgml_decode_generate(wgml_decode_plan *p, int64_t steps, int32_t *out)
{
    if (!p) return WGML_ERROR_INVALID_ARGUMENT;
    if (!p->active || steps < 0 || (steps && !out))
        return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode generate: no slot started, or no room for the tokens");
    int32_t *ring = malloc((size_t)(p->B * p->cap) * 4);
    if (!ring) return wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode: out of host memory");
    wgml_status st = WGML_OK;
    p->host_acc = 0;
    /* two chunks in flight: chunk n + 1 is encoded and submitted before chunk n's tokens are
       waited for (each copies its rings into a staging buffer of its own, in queue order) */
    int pending = -1, cur = 0;
    int64_t pend_k = 0, pend_done = 0;
    /* the first chunks short (1, 2, 4, .. steps, up to steps_per_submit): the GPU waits for
       the first chunk's encoding alone (the Qwen3 shape's 32 steps took ~10 ms of host work
       before the GPU began), and each later one is encoded while the one before runs (a
       chunk's encoding is under half of its GPU time) */
    int64_t ramp = 1;
    for (int64_t done = 0; !st && done < steps && !p->stopped;) {
        /* slots whose cache is full restart from their last block / 2 tokens: all but the
           newest fed now (no sample), the newest by the next decode step, as one pass of
           wgml_gpt_generate_step would feed them; they need every token so far */
        int slide = 0;
        for (int64_t s = 0; s < p->active; s++) slide |= p->len[s] >= p->block;
        if (slide && pending >= 0) {
            st = collect(p, pending, pend_k, pend_done, steps, ring, out);
            pending = -1;
            if (p->stopped) break; /* (no restart, no chunk after a stop) */
        }
        for (int64_t s = 0; !st && slide && s < p->active; s++) {
            if (p->len[s] < p->block) continue;
            int64_t feed = p->block / 2 > 0 ? p->block / 2 : 1;
            if (feed > p->n_hist[s]) feed = p->n_hist[s];
            const int32_t *from = p->hist[s] + p->n_hist[s] - feed;
            int64_t n = feed - 1, zero = 0;
            int no = 0;
            if (by_graph(p, n)) st = graph_fill(p, s, from, n);
            else if (n > 0) st = prefill(p, 1, &s, &from, &n, &zero, &no, NULL);
            p->len[s] = n;
            set_decode_row(p, s, n, from[feed - 1], p->count[s]);
        }
        int64_t k = steps - done < ramp ? steps - done : ramp;
        ramp = 2 * ramp < (int64_t)p->cap ? 2 * ramp : (int64_t)p->cap;
        for (int64_t s = 0; s < p->active; s++)
            if (p->block - p->len[s] < k) k = p->block - p->len[s];
        if (!st) st = submit(p, k, (uint32_t)p->active, (uint32_t)p->active, cur);
        for (int64_t s = 0; s < p->active; s++) p->len[s] += k;
        if (!st && pending >= 0) st = collect(p, pending, pend_k, pend_done, steps, ring, out);
        pending = cur, pend_k = k, pend_done = done, cur ^= 1;
        done += k;
    }
    if (!st && pending >= 0) st = collect(p, pending, pend_k, pend_done, steps, ring, out);
    /* the host's part: encoding and submitting (the wait for the GPU is not host work) */
    p->host_per_token = steps ? p->host_acc / (double)steps : 0;
    free(ring);
    return st;
}

/* ---------------------------------------------------------------- profile */

/* the step's pass with the launches of kind `skip` left out (NULL: none) */
static void encode_pass_without(wgml_decode_plan *p, WGPUComputePassEncoder cp, const pass *ps, uint32_t R, const char *skip)
{
    for (int i = 0; i < ps->n; i++)
        if (!skip || strcmp(ps->l[i].what, skip)) encode_launch(p, cp, &ps->l[i], R, R);
}

/* a compute pass between timestamps q and q + 1 */
static WGPUComputePassEncoder timed_pass(WGPUCommandEncoder enc, WGPUQuerySet qs, uint32_t q)
{
    WGPUPassTimestampWrites tw = {.querySet = qs, .beginningOfPassWriteIndex = q, .endOfPassWriteIndex = q + 1};
    WGPUComputePassDescriptor pd = {.timestampWrites = &tw};
    return wgpuCommandEncoderBeginComputePass(enc, &pd);
}

wgml_status wgml_decode_profile(wgml_decode_plan *p, int64_t steps, wgml_decode_profile_row *rows, int max_rows, int *n_rows,
                                double *step_seconds)
{
    if (!p || !rows || !n_rows || !step_seconds || max_rows < 1) return WGML_ERROR_INVALID_ARGUMENT;
    *n_rows = 0, *step_seconds = 0;
    wgml_runtime *rt = &p->ctx->rt;
    if (!rt->info.has_timestamp_query) return wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode profile: no timestamp queries here");
    /* the pass generation would take from the slots' positions now */
    const pass *dec = p->active ? decode_pass(p, 1, (uint32_t)p->active) : &p->dec;
    const int n = dec->n;
    /* the kinds, in the step's order (at most max_rows) */
    for (int i = 0; i < n; i++) {
        int r = 0;
        while (r < *n_rows && strcmp(rows[r].what, dec->l[i].what)) r++;
        if (r == *n_rows) {
            if (r == max_rows) continue;
            rows[(*n_rows)++] = (wgml_decode_profile_row){.what = dec->l[i].what};
        }
        rows[r].launches++;
    }
    const int nk = *n_rows;
    if (!p->active || steps < 1 || n + 1 + nk > 2048) {
        *n_rows = 0;
        return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode profile: no slot started, no steps, or too many launches (%d)", n);
    }
    /* the passes without each kind where every slot's block has room for them too */
    int without = nk;
    for (int64_t s = 0; s < p->active; s++) {
        if (p->len[s] + 2 * steps > p->block) {
            *n_rows = 0;
            return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode profile: %lld steps pass the block", (long long)(2 * steps));
        }
        if (p->len[s] + (2 + nk) * steps > p->block) without = 0;
    }
    /* timestamps: each launch alone (2 n), the step in one pass (2), the step without each kind (2 nk) */
    const uint32_t nq = 2 * (uint32_t)n + 2 + 2 * (uint32_t)without, whole = 2 * (uint32_t)n;
    WGPUQuerySetDescriptor qd = {.label = wgml_sv("decode profile"), .type = WGPUQueryType_Timestamp, .count = nq};
    WGPUQuerySet qs = wgpuDeviceCreateQuerySet(rt->device, &qd);
    wgml_status st = WGML_OK;
    WGPUBuffer resolve = make_buffer(p, 8 * (uint64_t)nq, WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, "decode profile", &st);
    WGPUBuffer readback = make_buffer(p, 8 * (uint64_t)nq, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, "decode profile readback", &st);
    double *sec = calloc((size_t)n, sizeof *sec);
    if (!st && (!qs || !sec)) st = wgml_fail(p->ctx, WGML_ERROR_OUT_OF_MEMORY, "decode profile: no query set or host memory");
    const uint32_t R = (uint32_t)p->active;
    const double period = wgml_rt_timestamp_ns(rt) * 1e-9;
    for (int64_t k = 0; !st && k < steps; k++) {
        WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(rt->device, NULL);
        if (!enc) {
            st = wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode profile: no command encoder");
            break;
        }
        /* a step with each launch in a pass of its own, a step in one pass, then a step in one
           pass without each kind in turn (values then differ; the launches' work does not) */
        for (int i = 0; i < n; i++) {
            WGPUComputePassEncoder cp = timed_pass(enc, qs, 2 * (uint32_t)i);
            encode_launch(p, cp, &dec->l[i], R, R);
            wgpuComputePassEncoderEnd(cp);
            wgpuComputePassEncoderRelease(cp);
        }
        for (int r = -1; r < without; r++) {
            WGPUComputePassEncoder cp = timed_pass(enc, qs, whole + 2 * (uint32_t)(r + 1));
            encode_pass_without(p, cp, dec, R, r < 0 ? NULL : rows[r].what);
            wgpuComputePassEncoderEnd(cp);
            wgpuComputePassEncoderRelease(cp);
        }
        wgpuCommandEncoderResolveQuerySet(enc, qs, 0, nq, resolve, 0);
        wgpuCommandEncoderCopyBufferToBuffer(enc, resolve, 0, readback, 0, 8 * (uint64_t)nq);
        WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
        wgpuCommandEncoderRelease(enc);
        if ((st = wgml_submit(rt, cb)) || (st = wgml_map_read(rt, readback, 8 * (uint64_t)nq))) break;
        const uint64_t *t = wgpuBufferGetConstMappedRange(readback, 0, 8 * (size_t)nq);
        for (int i = 0; t && i < n; i++)
            if (t[2 * i + 1] >= t[2 * i]) sec[i] += (double)(t[2 * i + 1] - t[2 * i]) * period;
        if (t && t[whole + 1] >= t[whole]) *step_seconds += (double)(t[whole + 1] - t[whole]) * period;
        for (int r = 0; t && r < without; r++) {
            const uint32_t q = whole + 2 * (uint32_t)(r + 1);
            if (t[q + 1] >= t[q]) rows[r].without_seconds += (double)(t[q + 1] - t[q]) * period;
        }
        wgpuBufferUnmap(readback);
        if (!t) st = wgml_fail(p->ctx, WGML_ERROR_DEVICE, "decode profile: the timestamps could not be mapped");
    }
    for (int i = 0; !st && i < n; i++)
        for (int r = 0; r < nk; r++)
            if (!strcmp(rows[r].what, dec->l[i].what)) rows[r].seconds += sec[i] / (double)steps;
    for (int r = 0; r < nk; r++) rows[r].without_seconds /= (double)steps;
    *step_seconds /= (double)steps;
    if (st) *n_rows = 0;
    free(sec);
    release(&resolve), release(&readback);
    if (qs) wgpuQuerySetRelease(qs);
    p->active = 0; /* the GPU's rows moved on without the host's: start again */
    return st;
}

int64_t wgml_decode_dispatches_per_step(const wgml_decode_plan *p) { return p ? p->dec.n : 0; }
double wgml_decode_host_seconds_per_token(const wgml_decode_plan *p) { return p ? p->host_per_token : 0; }
int64_t wgml_decode_weight_bytes(const wgml_decode_plan *p) { return p ? p->weight_bytes : 0; }
unsigned wgml_decode_grid_workgroups(const wgml_decode_plan *p) { return p ? p->grid_w : 0; }

wgml_status wgml_decode_grid_words(wgml_decode_plan *p, uint32_t count, uint32_t gave_up)
{
    if (!p) return WGML_ERROR_INVALID_ARGUMENT;
    if (!p->gbar) return wgml_fail(p->ctx, WGML_ERROR_UNSUPPORTED, "decode: this plan has no grid barrier");
    if (count & (p->grid_w - 1))
        /* (the grid is a power of two: the barriers' goals are multiples of it) */
        return wgml_fail(p->ctx, WGML_ERROR_INVALID_ARGUMENT, "decode: a count of %u is not a multiple of the grid's %u workgroups",
                         count, p->grid_w);
    grid_set(p, count, gave_up, GRID_RUN_SPIN);
    return WGML_OK;
}

int64_t wgml_decode_cache_bytes(const wgml_decode_plan *p)
{
    return p ? 2 * p->cfg.layers * p->B * p->block * p->Hkv * p->D * (p->f16c ? 2 : 4) : 0;
}

/* The Gumbel noise's seed from the context's generator, which moves on by one block, so
   wgml_manual_seed makes a draw repeatable */
static wgml_status gumbel_seed(wgml_context *ctx, uint64_t *out)
{
    uint64_t seed = 0, offset = 0;
    wgml_status st = wgml_rng_get_state(ctx, &seed, &offset);
    if (!st) st = wgml_rng_set_state(ctx, seed, offset + 1);
    if (st) return st;
    uint64_t mixed = seed * 0x9e3779b97f4a7c15ull ^ (offset + 0x632be59bd9b4e019ull);
    mixed ^= mixed >> 29;
    *out = mixed ^ (mixed >> 32);
    return WGML_OK;
}

/* wgml_decode_sample_tokens' tokens to its caller: out[given] and on_token, which may stop */
typedef struct deliver {
    int32_t *out;
    int64_t given, n_new;
    int (*on_token)(int32_t, void *);
    void *user;
} deliver;

static int deliver_token(int64_t slot, int32_t token, void *user)
{
    (void)slot;
    deliver *d = user;
    if (d->out) d->out[d->given] = token;
    d->given++;
    if (d->on_token && d->on_token(token, d->user)) return 1; /* every token after is dropped */
    return d->given >= d->n_new;
}

wgml_status wgml_decode_sample_tokens(wgml_gpt *g, const int32_t *prompt, int64_t n_prompt, int64_t n_new, float temperature,
                               int f16_weights, int32_t *out, int (*on_token)(int32_t, void *), void *user, int on_cpu,
                               int *used)
{
    *used = 0;
    if (n_new < 1) return WGML_OK;
    wgml_context *ctx = g->ctx;
    /* on a CPU adapter (lavapipe) the graph path is the faster (bench decode --quick there:
       the character GPT's 2 layers at 134 tokens/s against the plan's 35), on a GPU the plan */
    if (strcmp(ctx->rt.info.adapter_type, "CPU") == 0 && !on_cpu) return WGML_OK;
    uint64_t seed;
    wgml_status st = gumbel_seed(ctx, &seed);
    if (st) return st;
    /* batch 1: GPT-2 in its five wide launches a layer, which ran 1.5x the three fused ones on
       the H100 (docs/MEASUREMENTS.md: 5,089 against 3,343 tokens/s on the character GPT) */
    const wgml_decode_desc d = {.batch = 1, .temperature = temperature, .seed = seed,
                                .steps_per_submit = n_new < 16 ? n_new : 16, .unfused = 1, .f16_weights = f16_weights};
    wgml_decode_plan *p = NULL;
    st = wgml_decode_plan_create(g, &d, &p);
    if (st == WGML_ERROR_UNSUPPORTED) return WGML_OK; /* the caller takes the graph path */
    if (st) return st;
    *used = 1;
    /* one generate call for every token after the first, each passed on as its chunk is read:
       the chunks stay in flight back to back (calls of 16 tokens each began with a chunk of
       one, the GPU waiting for its encoding, and ended with the GPU idle) */
    deliver dv = {.out = out, .n_new = n_new, .on_token = on_token, .user = user};
    int32_t first = 0;
    st = wgml_decode_start(p, 1, &prompt, &n_prompt, &first);
    int stop = st ? 1 : deliver_token(0, first, &dv);
    int32_t *scratch = !stop ? malloc((size_t)(n_new - 1) * sizeof *scratch) : NULL;
    if (!stop && !scratch) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_gpt_generate: out of host memory");
    if (scratch) st = wgml_decode_generate_each(p, n_new - 1, scratch, deliver_token, &dv);
    free(scratch);
    wgml_decode_plan_free(p);
    return st;
}

wgml_status wgml_decode_sample_batch(wgml_gpt *g, int64_t n_seq, const int32_t *const *prompts, const int64_t *lens, int64_t n_new,
                                     float temperature, int f16_weights, int32_t *out, int on_cpu, int *used)
{
    *used = 0;
    if (n_seq < 1 || n_new < 1) return WGML_OK;
    wgml_context *ctx = g->ctx;
    /* (a CPU adapter: the graph path prompt by prompt is the faster, as wgml_decode_sample_tokens says) */
    if (strcmp(ctx->rt.info.adapter_type, "CPU") == 0 && !on_cpu) return WGML_OK;
    /* one plan of up to WGML_DECODE_BATCH_SLOTS slots, the sequences through it in turns; the
       buffers first, so a failure leaves the context's generator where it was */
    int64_t B = n_seq < WGML_DECODE_BATCH_SLOTS ? n_seq : WGML_DECODE_BATCH_SLOTS;
    int32_t *first = malloc((size_t)B * sizeof *first), *rest = malloc((size_t)(B * (n_new - 1) + 1) * sizeof *rest);
    uint64_t seed = 0;
    wgml_status st = first && rest ? gumbel_seed(ctx, &seed) : wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_gpt_generate_batch: out of host memory");
    wgml_decode_plan *p = NULL;
    /* fewer slots where 8 slots' caches pass a limit of the adapter or its memory; none (the
       caller goes prompt by prompt) where even one slot's do, or the plan does not take the model */
    while (!st) {
        const wgml_decode_desc d = {.batch = B, .temperature = temperature, .seed = seed, .steps_per_submit = n_new < 16 ? n_new : 16,
                                    .unfused = B == 1, .f16_weights = f16_weights};
        st = wgml_decode_plan_create(g, &d, &p);
        if (st != WGML_ERROR_LIMIT && st != WGML_ERROR_OUT_OF_MEMORY && st != WGML_ERROR_UNSUPPORTED) break;
        if (st != WGML_ERROR_UNSUPPORTED && B > 1) B /= 2, st = WGML_OK;
        else {
            free(first), free(rest);
            return WGML_OK;
        }
    }
    if (!st) *used = 1;
    for (int64_t s0 = 0; !st && s0 < n_seq; s0 += B) {
        const int64_t count = n_seq - s0 < B ? n_seq - s0 : B;
        /* (each turn's own noise: a turn's slots and positions are the last turn's again) */
        p->d.seed = seed + (uint64_t)(s0 / B) * 0x9e3779b97f4a7c15ull;
        if ((st = wgml_decode_start(p, count, prompts + s0, lens + s0, first))) break;
        if (n_new > 1 && (st = wgml_decode_generate(p, n_new - 1, rest))) break;
        for (int64_t s = 0; s < count; s++) {
            out[(s0 + s) * n_new] = first[s];
            memcpy(out + (s0 + s) * n_new + 1, rest + s * (n_new - 1), (size_t)(n_new - 1) * sizeof *out);
        }
    }
    free(first), free(rest);
    wgml_decode_plan_free(p);
    return st;
}
