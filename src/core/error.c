/* Statuses and messages: the library never prints; it keeps the most recent failure on the
   context until wgml_clear_error (successes leave it alone, see wgml.h). */
#include <stdio.h>
#include <string.h>

#include "core/context.h"

/* The enum's identifiers; the words are the messages' */
#define NAME(s) [s] = #s
static const char *const status_names[WGML_STATUS_COUNT] = {
    NAME(WGML_OK),
    NAME(WGML_ERROR_INVALID_ARGUMENT),
    NAME(WGML_ERROR_SHAPE),
    NAME(WGML_ERROR_OVERFLOW),
    NAME(WGML_ERROR_LIMIT),
    NAME(WGML_ERROR_NO_ADAPTER),
    NAME(WGML_ERROR_DEVICE),
    NAME(WGML_ERROR_DEVICE_LOST),
    NAME(WGML_ERROR_OUT_OF_MEMORY),
    NAME(WGML_ERROR_VALIDATION),
    NAME(WGML_ERROR_CONTEXT),
    NAME(WGML_ERROR_NOT_FOUND),
    NAME(WGML_ERROR_EXISTS),
    NAME(WGML_ERROR_IO),
    NAME(WGML_ERROR_FORMAT),
    NAME(WGML_ERROR_UNSUPPORTED),
};
#undef NAME

#define STR_(x) #x
#define STR(x) STR_(x)
const char *wgml_version(void)
{
    return STR(WGML_VERSION_MAJOR) "." STR(WGML_VERSION_MINOR) "." STR(WGML_VERSION_PATCH);
}

const char *wgml_status_name(wgml_status status)
{
    if ((int)status < 0 || status >= WGML_STATUS_COUNT) return "WGML_STATUS_UNKNOWN";
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
