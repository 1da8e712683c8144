/* A growable string for generated kernel source: printf-style appends; a failed allocation
   is remembered, and wgml_sbuf_take then gives NULL. */
#ifndef WGML_CORE_SBUF_H
#define WGML_CORE_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct wgml_sbuf {
    char *s;
    size_t n, cap;
    bool failed;
} wgml_sbuf;

void wgml_sbuf_put(wgml_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The string (the caller frees it), or NULL after a failed allocation. */
char *wgml_sbuf_take(wgml_sbuf *b);

#endif
