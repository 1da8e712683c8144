/*
 * The buffer pool: GPU buffers in size classes, reused after free, so a long run of ops
 * allocates a bounded set of buffers instead of one per tensor.
 *
 * Classes: 256 B, then powers of two up to 1 MiB, then 8 steps per power of two (at most
 * 12.5% waste on big tensors). A freed buffer goes on its class's free heap, taken again in
 * the order buffers were made (buffer.h says why).
 */
#include <stdlib.h>

#include "core/context.h"

static int size_class(uint64_t bytes, uint64_t *class_bytes)
{
    uint64_t size = 256;
    int cls = 0;
    while (size < bytes && size < (1u << 20)) { size <<= 1; cls++; }
    if (size >= bytes) { *class_bytes = size; return cls; }
    /* above 1 MiB: power of two p, steps of p/8 */
    uint64_t p = 1u << 20;
    cls++;
    while (p * 2 < bytes) { p <<= 1; cls += 8; }
    uint64_t step = p / 8, k = (bytes - p + step - 1) / step; /* 1..8 */
    *class_bytes = p + k * step;
    return cls + (int)k - 1;
}

wgml_status wgml_check_buffer_size(wgml_context *ctx, uint64_t bytes, const char *what)
{
    if (bytes > ctx->rt.limits.maxBufferSize)
        return wgml_fail(ctx, WGML_ERROR_LIMIT,
                         "%s needs a buffer of %llu bytes, past the adapter's maxBufferSize of %llu bytes",
                         what, (unsigned long long)bytes, (unsigned long long)ctx->rt.limits.maxBufferSize);
    if (bytes > ctx->rt.limits.maxStorageBufferBindingSize)
        return wgml_fail(ctx, WGML_ERROR_LIMIT,
                         "%s needs %llu bytes, past the adapter's maxStorageBufferBindingSize of %llu bytes",
                         what, (unsigned long long)bytes,
                         (unsigned long long)ctx->rt.limits.maxStorageBufferBindingSize);
    return WGML_OK;
}

static void note_live(wgml_context *ctx)
{
    wgml_stats *s = &ctx->rt.stats;
    if (s->buffers_live > s->buffers_peak) s->buffers_peak = s->buffers_live;
    if (s->bytes_live > s->bytes_peak) s->bytes_peak = s->bytes_live;
    if (s->bytes_in_use > s->bytes_in_use_peak) s->bytes_in_use_peak = s->bytes_in_use;
}

static void heap_swap(wgml_buffer **h, int i, int j)
{
    wgml_buffer *t = h[i];
    h[i] = h[j], h[j] = t;
}

static void sift_up(wgml_buffer **h, int i)
{
    for (; i > 0 && h[i]->serial < h[(i - 1) / 2]->serial; i = (i - 1) / 2) heap_swap(h, i, (i - 1) / 2);
}

static void sift_down(wgml_buffer **h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l]->serial < h[m]->serial) m = l;
        if (r < n && h[r]->serial < h[m]->serial) m = r;
        if (m == i) return;
        heap_swap(h, i, m);
        i = m;
    }
}

/* Removes and returns entry i of the heap */
static wgml_buffer *heap_take(wgml_free_heap *f, int i)
{
    wgml_buffer *b = f->b[i];
    f->b[i] = f->b[--f->n];
    if (i < f->n) {
        sift_down(f->b, f->n, i);
        sift_up(f->b, i);
    }
    return b;
}

static void destroy(wgml_context *ctx, wgml_buffer *b)
{
    ctx->rt.stats.buffers_live--;
    ctx->rt.stats.bytes_live -= b->size;
    wgpuBufferRelease(b->handle);
    free(b);
}

wgml_buffer *wgml_pool_acquire(wgml_context *ctx, uint64_t bytes)
{
    if (bytes == 0) bytes = 4;
    uint64_t class_bytes;
    int cls = size_class(bytes, &class_bytes);
    if (cls >= WGML_POOL_CLASSES) {
        wgml_fail(ctx, WGML_ERROR_LIMIT, "a buffer of %llu bytes is past the pool's size classes",
                  (unsigned long long)bytes);
        return NULL;
    }
    /* A class may round past the limit while the exact size fits: then use the exact size. */
    if (class_bytes > ctx->rt.limits.maxStorageBufferBindingSize ||
        class_bytes > ctx->rt.limits.maxBufferSize)
        class_bytes = (bytes + 255) & ~(uint64_t)255;
    if (wgml_check_buffer_size(ctx, class_bytes, "a tensor") != WGML_OK) return NULL;

    /* the first made: the heap's top, unless it is an exact-size fallback (past the binding
       limit) smaller than this one; then the first made of those that fit */
    wgml_free_heap *f = &ctx->pool.free[cls];
    int pick = f->n && f->b[0]->size >= class_bytes ? 0 : -1;
    for (int j = 1; pick != 0 && j < f->n; j++)
        if (f->b[j]->size >= class_bytes && (pick < 0 || f->b[j]->serial < f->b[pick]->serial)) pick = j;
    wgml_buffer *b = pick >= 0 ? heap_take(f, pick) : NULL;
    if (b) {
        b->refs = 1;
        ctx->rt.stats.bytes_in_use += b->size;
        note_live(ctx);
        return b;
    }
    b = calloc(1, sizeof *b);
    if (!b) {
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    WGPUBufferDescriptor d = {
        .label = wgml_sv("wgml tensor"),
        .usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst,
        .size = class_bytes,
    };
    wgml_scope_push(&ctx->rt);
    b->handle = wgpuDeviceCreateBuffer(ctx->rt.device, &d);
    if (wgml_scope_pop(&ctx->rt, "allocating a GPU buffer") != WGML_OK || !b->handle) {
        if (b->handle) wgpuBufferRelease(b->handle);
        free(b);
        return NULL;
    }
    b->size = class_bytes;
    b->size_class = cls;
    b->refs = 1;
    b->serial = ctx->pool.made++;
    ctx->rt.stats.buffers_live++;
    ctx->rt.stats.bytes_live += class_bytes;
    ctx->rt.stats.bytes_in_use += class_bytes;
    note_live(ctx);
    return b;
}

void wgml_buffer_retain(wgml_buffer *b)
{
    if (b) b->refs++;
}

void wgml_buffer_release(wgml_context *ctx, wgml_buffer *b)
{
    if (!b || --b->refs > 0) return;
    ctx->rt.stats.bytes_in_use -= b->size;
    wgml_free_heap *f = &ctx->pool.free[b->size_class];
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        wgml_buffer **grown = realloc(f->b, (size_t)cap * sizeof *grown);
        if (!grown) { /* no room to keep it: back to the device, and the bind groups that name it go */
            destroy(ctx, b);
            wgml_bind_cache_clear(ctx);
            return;
        }
        f->b = grown, f->cap = cap;
    }
    f->b[f->n] = b;
    sift_up(f->b, f->n++);
}

wgml_status wgml_grow_buffer(wgml_context *ctx, WGPUBuffer *buf, uint64_t *size, uint64_t need, uint64_t first,
                             WGPUBufferUsage usage, const char *what, bool *replaced)
{
    if (replaced) *replaced = false;
    if (*buf && *size >= need) return WGML_OK;
    uint64_t s = *size ? *size : first;
    while (s < need) s *= 2;
    if (*buf) wgpuBufferRelease(*buf);
    WGPUBufferDescriptor d = {.label = wgml_sv(what), .usage = usage, .size = s};
    *buf = wgpuDeviceCreateBuffer(ctx->rt.device, &d);
    *size = *buf ? s : 0;
    if (replaced) *replaced = true;
    if (!*buf) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "allocating a %s buffer of %llu bytes", what,
                                (unsigned long long)s);
    return WGML_OK;
}

/* Every buffer on the free lists back to the device; returns their bytes. */
static uint64_t release_free(wgml_context *ctx)
{
    uint64_t bytes = 0;
    for (int c = 0; c < WGML_POOL_CLASSES; c++) {
        wgml_free_heap *f = &ctx->pool.free[c];
        for (int i = 0; i < f->n; i++) {
            bytes += f->b[i]->size;
            destroy(ctx, f->b[i]);
        }
        free(f->b);
        *f = (wgml_free_heap){0};
    }
    return bytes;
}

void wgml_pool_destroy(wgml_context *ctx) { release_free(ctx); }

wgml_status wgml_release_cached(wgml_context *ctx, uint64_t *bytes_released)
{
    if (bytes_released) *bytes_released = 0;
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    uint64_t bytes = release_free(ctx);
    /* cached bind groups hold references to the buffers they bind: the memory goes only
       with them. Work already submitted keeps what it binds alive (WebGPU's references). */
    if (bytes) wgml_bind_cache_clear(ctx);
    if (bytes_released) *bytes_released = bytes;
    return WGML_OK;
}
