/*
 * GPU buffers (core/pool.c): the pool of size-classed buffers that tensors hold, grow-only
 * buffers outside it, and the size checks against the adapter's limits.
 */
#ifndef WGML_CORE_BUFFER_H
#define WGML_CORE_BUFFER_H

#include <stdbool.h>
#include <stdint.h>

#include <webgpu/webgpu.h>

#include "wgml.h"

typedef struct wgml_buffer {
    WGPUBuffer handle;
    uint64_t size;   /* bytes, the size class */
    int size_class;
    int refs;        /* storage tensors and views sharing it */
    uint64_t serial; /* the order of making: a class's free buffers are taken in it */
} wgml_buffer;

#define WGML_POOL_CLASSES 256

/* A class's free buffers, a min-heap on their serials: the one made first is taken first, so
   an evaluation that repeats from the same free buffers (a training step's graph) gets the same
   buffers each time, whatever order the last one freed them in, and its cached bind groups
   (core/bind_cache.c) match again; a free and a take cost O(log n) in any order (a take scans
   the class only where its top is an exact-size buffer past the binding limit, too small). */
typedef struct wgml_free_heap {
    wgml_buffer **b;
    int n, cap;
} wgml_free_heap;

typedef struct wgml_pool {
    wgml_free_heap free[WGML_POOL_CLASSES];
    uint64_t made; /* buffers made so far: the next serial */
} wgml_pool;

/* A buffer of at least `bytes` bytes from the pool; NULL with the error recorded. */
wgml_buffer *wgml_pool_acquire(wgml_context *ctx, uint64_t bytes);
void wgml_buffer_retain(wgml_buffer *b);
void wgml_buffer_release(wgml_context *ctx, wgml_buffer *b);
void wgml_pool_destroy(wgml_context *ctx);

/* A GPU buffer outside the pool that only grows (parameters, staging, cached-matmul I/O): when
   *buf is NULL or *size < need, it is released and made again, `first` bytes doubled until
   need fits (its contents are not kept). *replaced (if given) says whether that happened;
   on failure *buf is NULL and *size 0. */
wgml_status wgml_grow_buffer(wgml_context *ctx, WGPUBuffer *buf, uint64_t *size, uint64_t need, uint64_t first,
                             WGPUBufferUsage usage, const char *what, bool *replaced);

/* Checks a byte size against the adapter's buffer and binding limits. */
wgml_status wgml_check_buffer_size(wgml_context *ctx, uint64_t bytes, const char *what);

#endif
