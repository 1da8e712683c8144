#include "core/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void wgml_sbuf_put(wgml_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    while (!b->failed) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) break;
        if (b->s && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 16384;
        while (cap <= b->n + (size_t)n) cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) break;
        b->s = g;
        b->cap = cap;
    }
    b->failed = true;
}

char *wgml_sbuf_take(wgml_sbuf *b)
{
    char *s = b->failed ? NULL : b->s;
    if (!s) free(b->s);
    *b = (wgml_sbuf){0};
    return s;
}
