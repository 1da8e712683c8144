/*
 * The buffer pool: GPU buffers in size classes, reused after free, so a long run of ops
 * allocates a bounded set of buffers instead of one per tensor.
 *
 * Classes: 256 B, then powers of two up to 1 MiB, then 8 steps per power of two (at most
 * 12.5% waste on big tensors). A freed buffer goes on its class's free list, in the order
 * buffers were made (buffer.h says why).
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

    wgml_buffer *b = ctx->pool.free_list[cls];
    while (b && b->size < class_bytes) b = b->next_free; /* exact-size fallbacks may differ */
    if (b) {
        wgml_buffer **pp = &ctx->pool.free_list[cls];
        while (*pp != b) pp = &(*pp)->next_free;
        *pp = b->next_free;
        b->next_free = NULL;
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
    wgml_buffer **pp = &ctx->pool.free_list[b->size_class];
    while (*pp && (*pp)->serial < b->serial) pp = &(*pp)->next_free;
    b->next_free = *pp;
    *pp = b;
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
        wgml_buffer *b = ctx->pool.free_list[c];
        while (b) {
            wgml_buffer *next = b->next_free;
            bytes += b->size;
            ctx->rt.stats.buffers_live--;
            ctx->rt.stats.bytes_live -= b->size;
            wgpuBufferRelease(b->handle);
            free(b);
            b = next;
        }
        ctx->pool.free_list[c] = NULL;
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
