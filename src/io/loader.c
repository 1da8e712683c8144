#include "io/loader.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* strto* skip leading blanks and take a sign; a number written by wgml has neither, so
   a text that starts otherwise is refused before strto* can read it leniently. */
static int starts_like_number(const char *s, int sign_ok)
{
    return isdigit((unsigned char)s[0]) || (sign_ok && (s[0] == '-' || s[0] == '+' || s[0] == '.'));
}

wgml_status wgml_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err,
                           size_t errlen)
{
    if (!s) s = "";
    char *end = NULL;
    errno = 0;
    long long v = starts_like_number(s, lo < 0) ? strtoll(s, &end, 10) : 0;
    if (!end || end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        wgml_io_err(err, errlen, "%s is '%.64s': want an integer in %" PRId64 "..%" PRId64, what, s, lo, hi);
        return WGML_ERROR_FORMAT;
    }
    *out = (int64_t)v;
    return WGML_OK;
}

wgml_status wgml_parse_u64(const char *what, const char *s, uint64_t *out, char *err, size_t errlen)
{
    if (!s) s = "";
    char *end = NULL;
    errno = 0;
    /* strtoull takes "-1" as 2^64 - 1: only digits may start the text. */
    unsigned long long v = starts_like_number(s, 0) ? strtoull(s, &end, 10) : 0;
    if (!end || end == s || *end != '\0' || errno == ERANGE) {
        wgml_io_err(err, errlen, "%s is '%.64s': want an integer in 0..%" PRIu64, what, s, UINT64_MAX);
        return WGML_ERROR_FORMAT;
    }
    *out = (uint64_t)v;
    return WGML_OK;
}

wgml_status wgml_parse_f32(const char *what, const char *s, float lo, float hi, float *out, char *err,
                           size_t errlen)
{
    if (!s) s = "";
    char *end = NULL;
    errno = 0;
    float v = starts_like_number(s, 1) ? strtof(s, &end) : 0.0f;
    /* ERANGE also flags an underflow to a subnormal or zero; only overflow (inf) and
       values outside [lo, hi] matter here, and isfinite catches the first. */
    if (!end || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        wgml_io_err(err, errlen, "%s is '%.64s': want a number in %g..%g", what, s, (double)lo, (double)hi);
        return WGML_ERROR_FORMAT;
    }
    *out = v;
    return WGML_OK;
}

void wgml_float_text(char *buf, size_t len, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}
