/*
 * Tensors: creation from host data, read-back, lifetime (reference counts and scopes).
 *
 * Lifetime: a tensor holds one reference for the user (until wgml_tensor_free or the end of
 * its scope) and one for each lazy op that reads it. When the count reaches zero its buffer
 * goes back to the pool and the struct is freed.
 *
 * Handles are plain pointers, so a freed one cannot be told from a live one without reading
 * freed memory (and its block may already hold another tensor): wgml.h documents such use as
 * undefined behaviour. The checks here are for NULL; the tag is a cheap guard against pointers
 * that never were tensors, not a promise about freed ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api_lock.h"
#include "core/context.h"
#include "core/half.h"

bool wgml_tensor_valid(const wgml_tensor *t)
{
    return t && t->magic == WGML_TENSOR_MAGIC;
}

wgml_context *wgml_tensor_owner(const wgml_tensor *t) { return wgml_tensor_valid(t) ? t->ctx : NULL; }

wgml_status wgml_shape_check(wgml_context *ctx, int ndim, const int64_t *shape, int64_t *numel)
{
    if (ndim < 1 || ndim > WGML_MAX_DIMS)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "a tensor has 1 to %d dimensions, not %d", WGML_MAX_DIMS, ndim);
    if (!shape) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "shape is NULL");
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            char s[128];
            wgml_format_shape(s, sizeof s, ndim, shape);
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "dimension %d of shape %s is %lld; dimensions must be >= 1", i, s,
                             (long long)shape[i]);
        }
        if (n > INT64_MAX / 4 / shape[i]) {
            char s[128];
            wgml_format_shape(s, sizeof s, ndim, shape);
            return wgml_fail(ctx, WGML_ERROR_OVERFLOW,
                             "shape %s has more elements than a byte size can count", s);
        }
        n *= shape[i];
    }
    *numel = n;
    return WGML_OK;
}

void wgml_set_contiguous_strides(wgml_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
    t->offset = 0;
}

bool wgml_is_contiguous(const wgml_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

bool wgml_tensor_realized(wgml_tensor *t)
{
    return wgml_tensor_base(t)->op == WGML_TENSOR_STORAGE;
}

static void list_insert(wgml_context *ctx, wgml_tensor *t)
{
    t->all_next = ctx->tensors;
    if (ctx->tensors) ctx->tensors->all_prev = t;
    ctx->tensors = t;
}

static void list_remove(wgml_context *ctx, wgml_tensor *t)
{
    if (t->all_prev) t->all_prev->all_next = t->all_next;
    else ctx->tensors = t->all_next;
    if (t->all_next) t->all_next->all_prev = t->all_prev;
}

wgml_tensor *wgml_tensor_new(wgml_context *ctx, int ndim, const int64_t *shape)
{
    wgml_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    t->magic = WGML_TENSOR_MAGIC;
    t->ctx = ctx;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    wgml_set_contiguous_strides(t);
    t->refs = 1;
    t->user_held = true;
    t->scope = ctx->scope_depth;
    list_insert(ctx, t);
    return t;
}

wgml_tensor *wgml_tensor_over(wgml_context *ctx, int ndim, const int64_t *shape, wgml_buffer *buf, int64_t offset)
{
    wgml_tensor *t = wgml_tensor_new(ctx, ndim, shape);
    if (!t) return NULL;
    t->buf = buf;
    wgml_buffer_retain(buf);
    t->offset = offset;
    return t;
}

wgml_tensor *wgml_tensor_error(wgml_context *ctx, wgml_status status, const char *fmt, ...)
{
    static const int64_t one = 1;
    wgml_tensor *t = wgml_tensor_new(ctx, 1, &one);
    if (!t) return NULL;
    va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->status = status;
    t->error = strdup(msg);
    wgml_fail(ctx, status, "%s", msg);
    return t;
}

void wgml_tensor_retain(wgml_tensor *t)
{
    t->refs++;
}

static void tensor_destroy(wgml_tensor *t)
{
    wgml_context *ctx = t->ctx;
    for (int i = 0; i < t->nsrc; i++) wgml_tensor_unref(t->src[i]);
    if (t->buf) wgml_buffer_release(ctx, t->buf);
    if (t->grad) wgml_tensor_unref(t->grad);
    if (t->tape) wgml_tensor_unref(t->tape);
    if (t->dest) wgml_buffer_release(ctx, t->dest);
    free(t->error);
    list_remove(ctx, t);
    t->magic = 0;
    free(t);
}

void wgml_tensor_unref(wgml_tensor *t)
{
    if (t && --t->refs == 0) tensor_destroy(t);
}

void wgml_tensor_free(wgml_tensor *t)
{
    if (!wgml_tensor_valid(t) || !t->user_held) return;
    t->user_held = false;
    wgml_tensor_unref(t);
}

void wgml_tensors_free_all(wgml_context *ctx)
{
    /* Drop every reference at once: each tensor is freed exactly once. */
    wgml_tensor *t = ctx->tensors;
    while (t) {
        wgml_tensor *next = t->all_next;
        if (t->buf) wgml_buffer_release(ctx, t->buf);
        /* (a node still alive here, say in a cycle of a parameter and the gradient a failed
           step left it, holds its destination too) */
        if (t->dest) wgml_buffer_release(ctx, t->dest);
        free(t->error);
        t->magic = 0;
        free(t);
        t = next;
    }
    ctx->tensors = NULL;
}

/* ---------------------------------------------------------------- scopes */

void wgml_scope_begin(wgml_context *ctx)
{
    if (ctx) ctx->scope_depth++;
}

void wgml_scope_end(wgml_context *ctx)
{
    if (!ctx || ctx->scope_depth == 0) return;
    int depth = ctx->scope_depth--;
    /* Pass 1: drop the user reference of every tensor made in this scope. Pass 2: destroy
       those left with no reference; each may release inputs, which can only be tensors
       still referenced before, so none is in the list twice. */
    size_t n = 0, cap = 0;
    wgml_tensor **dead = NULL;
    for (wgml_tensor *t = ctx->tensors; t; t = t->all_next) {
        if (t->scope < depth || !t->user_held) continue;
        t->user_held = false;
        if (--t->refs == 0) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                wgml_tensor **g = realloc(dead, nc * sizeof *g);
                if (!g) { t->refs++; t->user_held = true; continue; } /* freed at context end */
                dead = g;
                cap = nc;
            }
            dead[n++] = t;
        }
    }
    for (size_t i = 0; i < n; i++) tensor_destroy(dead[i]);
    free(dead);
}

void wgml_keep(wgml_tensor *t)
{
    if (wgml_tensor_valid(t) && t->scope > 0 && t->scope >= t->ctx->scope_depth)
        t->scope = t->ctx->scope_depth - 1;
}

/* ---------------------------------------------------------------- creation */

static wgml_status make_storage(wgml_context *ctx, int ndim, const int64_t *shape, size_t n,
                                bool check_n, wgml_tensor **out)
{
    if (!out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    int64_t numel;
    if ((st = wgml_shape_check(ctx, ndim, shape, &numel))) return st;
    if (check_n && (uint64_t)n != (uint64_t)numel) {
        char s[128];
        wgml_format_shape(s, sizeof s, ndim, shape);
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                         "host data has %zu elements but shape %s needs %lld", n, s, (long long)numel);
    }
    char what[160];
    char s[128];
    wgml_format_shape(s, sizeof s, ndim, shape);
    snprintf(what, sizeof what, "a tensor of shape %s", s);
    if ((st = wgml_check_buffer_size(ctx, (uint64_t)numel * 4, what))) return st;
    wgml_buffer *b = wgml_pool_acquire(ctx, (uint64_t)numel * 4);
    if (!b) return ctx->rt.status;
    wgml_tensor *t = wgml_tensor_new(ctx, ndim, shape);
    if (!t) {
        wgml_buffer_release(ctx, b);
        return ctx->rt.status;
    }
    t->buf = b;
    *out = t;
    return WGML_OK;
}

wgml_status wgml_tensor_from_data(wgml_context *ctx, int ndim, const int64_t *shape,
                                  const float *data, size_t n, wgml_tensor **out)
{
    if (out) *out = NULL;
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!data) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_tensor_from_data: data is NULL");
    wgml_status st = make_storage(ctx, ndim, shape, n, true, out);
    if (st) return st;
    wgpuQueueWriteBuffer(ctx->rt.queue, (*out)->buf->handle, 0, data, n * sizeof(float));
    ctx->rt.stats.bytes_uploaded += n * sizeof(float);
    return WGML_OK;
}

wgml_status wgml_tensor_from_i32(wgml_context *ctx, int ndim, const int64_t *shape,
                                 const int32_t *data, size_t n, wgml_tensor **out)
{
    if (out) *out = NULL;
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!data) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_tensor_from_i32: data is NULL");
    wgml_status st = make_storage(ctx, ndim, shape, n, true, out);
    if (st) return st;
    (*out)->dtype = WGML_I32;
    return wgml_tensor_write_i32(*out, data, n);
}

wgml_status wgml_tensor_zeros(wgml_context *ctx, int ndim, const int64_t *shape, wgml_tensor **out)
{
    if (out) *out = NULL;
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status st = make_storage(ctx, ndim, shape, 0, false, out);
    if (st) return st;
    /* pool buffers are reused: clear explicitly */
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
    wgpuCommandEncoderClearBuffer(enc, (*out)->buf->handle, 0, (uint64_t)(*out)->numel * 4);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    if ((st = wgml_submit(&ctx->rt, cb))) {
        wgml_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------- write (reads evaluate: engine/executor.c) */

const char *wgml_dtype_name(wgml_dtype dtype)
{
    return dtype == WGML_F32 ? "f32" : dtype == WGML_I32 ? "i32" : dtype == WGML_F16 ? "f16" : "unknown";
}

/* host data of dtype into a realized, contiguous tensor of that dtype */
static wgml_status write_host(wgml_tensor *t, const void *host, size_t n, wgml_dtype dtype, const char *fn)
{
    if (!wgml_tensor_valid(t)) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = t->ctx;
    wgml_status st = wgml_check_device(&ctx->rt);
    if (st) return st;
    if (!host) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: host is NULL", fn);
    if (t->status) return wgml_fail(ctx, t->status, "%s: the tensor holds an error: %s", fn, t->error);
    if (t->op != WGML_TENSOR_STORAGE || !wgml_is_contiguous(t))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: only evaluated, contiguous tensors can be written", fn);
    bool halves = t->dtype == WGML_F16 && dtype == WGML_F32; /* f32 values rounded into an f16 tensor */
    if (t->dtype != (int)dtype && !halves)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the tensor is %s, the host data %s", fn,
                         wgml_dtype_name(t->dtype), wgml_dtype_name(dtype));
    /* the queue writes whole 4-byte words: halves start on one (a result's buffer always does) */
    if (halves && t->offset % 2)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: an f16 tensor at an odd element offset (%lld) cannot be written",
                         fn, (long long)t->offset);
    if ((uint64_t)n != (uint64_t)t->numel)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: host data has %zu elements, the tensor %lld", fn, n,
                         (long long)t->numel);
    if (dtype == WGML_I32) {
        const int32_t *v = host;
        t->range_known = true;
        t->range_lo = INT32_MAX;
        t->range_hi = INT32_MIN;
        for (size_t i = 0; i < n; i++) {
            if (v[i] < t->range_lo) t->range_lo = v[i];
            if (v[i] > t->range_hi) t->range_hi = v[i];
        }
    }
    /* results built on the old values get them: they are evaluated before the write */
    if (ctx->settle_readers && (st = ctx->settle_readers(ctx, 1, &t->buf))) return st;
    if (halves) {
        /* rounded on the host (core/half.h: nearest, ties to even, as the GPU's cast); an odd
           count's last word is padded with a zero half, past the tensor's elements */
        size_t words = (n + 1) / 2;
        uint16_t *h = calloc(words * 2, sizeof *h);
        if (!h) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        const float *f = host;
        for (size_t i = 0; i < n; i++) h[i] = wgml_f32_to_half(f[i]);
        wgpuQueueWriteBuffer(ctx->rt.queue, t->buf->handle, (uint64_t)t->offset * 2, h, words * 4);
        free(h);
        ctx->rt.stats.bytes_uploaded += words * 4;
    } else {
        wgpuQueueWriteBuffer(ctx->rt.queue, t->buf->handle, (uint64_t)t->offset * 4, host, n * 4);
        ctx->rt.stats.bytes_uploaded += n * 4;
    }
    if (t->tape) { /* every value is now the host's: constants to autograd, no graph behind them */
        wgml_tensor_unref(t->tape);
        t->tape = NULL;
    }
    return WGML_OK;
}

wgml_status wgml_tensor_write(wgml_tensor *t, const float *host, size_t n)
{
    return write_host(t, host, n, WGML_F32, "wgml_tensor_write");
}

wgml_status wgml_tensor_write_i32(wgml_tensor *t, const int32_t *host, size_t n)
{
    return write_host(t, host, n, WGML_I32, "wgml_tensor_write_i32");
}

/* ---------------------------------------------------------------- queries */

int wgml_tensor_ndim(const wgml_tensor *t) { return wgml_tensor_valid(t) ? t->ndim : 0; }

int64_t wgml_tensor_dim(const wgml_tensor *t, int axis)
{
    if (!wgml_tensor_valid(t)) return 0;
    if (axis < 0) axis += t->ndim;
    return axis >= 0 && axis < t->ndim ? t->shape[axis] : 0;
}

int64_t wgml_tensor_numel(const wgml_tensor *t) { return wgml_tensor_valid(t) ? t->numel : 0; }
wgml_dtype wgml_tensor_dtype(const wgml_tensor *t) { return wgml_tensor_valid(t) ? (wgml_dtype)t->dtype : WGML_F32; }

wgml_status wgml_tensor_status(const wgml_tensor *t)
{
    return wgml_tensor_valid(t) ? t->status : WGML_ERROR_INVALID_ARGUMENT;
}

wgml_context *wgml_tensor_context(const wgml_tensor *t) { return wgml_tensor_valid(t) ? t->ctx : NULL; }

wgml_status wgml_stats_get(const wgml_context *ctx, wgml_stats *stats)
{
    if (!ctx || !stats) return WGML_ERROR_INVALID_ARGUMENT;
    *stats = ctx->rt.stats;
    return WGML_OK;
}

void wgml_stats_reset_peaks(wgml_context *ctx)
{
    if (!ctx) return;
    ctx->rt.stats.buffers_peak = ctx->rt.stats.buffers_live;
    ctx->rt.stats.bytes_peak = ctx->rt.stats.bytes_live;
    ctx->rt.stats.bytes_in_use_peak = ctx->rt.stats.bytes_in_use;
}
