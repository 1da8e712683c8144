/* Statuses and messages: the library never prints; it keeps the most recent failure on the
   context until wgml_clear_error (successes leave it alone, see wgml.h). */
#include <stdio.h>
#include <string.h>

#include "core/context.h"

static const char *const status_names[WGML_STATUS_COUNT] = {
    [WGML_OK] = "ok",
    [WGML_ERROR_INVALID_ARGUMENT] = "invalid argument",
    [WGML_ERROR_SHAPE] = "shape mismatch",
    [WGML_ERROR_OVERFLOW] = "size overflow",
    [WGML_ERROR_LIMIT] = "adapter limit exceeded",
    [WGML_ERROR_NO_ADAPTER] = "no WebGPU adapter",
    [WGML_ERROR_DEVICE] = "device creation failed",
    [WGML_ERROR_DEVICE_LOST] = "device lost",
    [WGML_ERROR_OUT_OF_MEMORY] = "out of memory",
    [WGML_ERROR_VALIDATION] = "WebGPU validation error",
    [WGML_ERROR_CONTEXT] = "tensor of another context",
    [WGML_ERROR_NOT_FOUND] = "not found",
    [WGML_ERROR_EXISTS] = "already exists",
    [WGML_ERROR_IO] = "I/O error",
    [WGML_ERROR_FORMAT] = "bad file format",
    [WGML_ERROR_UNSUPPORTED] = "unsupported",
};

const char *wgml_status_name(wgml_status status)
{
    if ((int)status < 0 || status >= WGML_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

wgml_status wgml_fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
{
    if (!ctx) return status;
    va_list ap;
    va_start(ap, fmt);
    wgml_rt_failv(&ctx->rt, status, fmt, ap);
    va_end(ap);
    return status;
}

const char *wgml_error_message(const wgml_context *ctx)
{
    return ctx ? ctx->rt.message : "no context";
}

wgml_status wgml_last_status(const wgml_context *ctx)
{
    return ctx ? ctx->rt.status : WGML_ERROR_INVALID_ARGUMENT;
}

void wgml_clear_error(wgml_context *ctx)
{
    if (!ctx) return;
    ctx->rt.status = WGML_OK;
    ctx->rt.message[0] = 0;
}

void wgml_format_shape(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(out + used, n - used, "]");
}
