#include "io/loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void wgml_io_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

wgml_status wgml_io_begin(const char *fn, void *out, size_t out_size, const char *null_arg, char *err,
                          size_t errlen)
{
    wgml_io_err(err, errlen, "%s", "");
    if (!out) {
        wgml_io_err(err, errlen, "%s: out is NULL", fn);
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, out_size);
    if (null_arg) {
        wgml_io_err(err, errlen, "%s: %s is NULL", fn, null_arg);
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    return WGML_OK;
}
