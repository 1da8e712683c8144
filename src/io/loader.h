/* What the file loaders (idx.c, safetensors.c) share: errors go into the caller's buffer. */
#ifndef WGML_IO_LOADER_H
#define WGML_IO_LOADER_H

#include <stddef.h>

#include "wgml.h"

void wgml_io_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The start of every loader: err cleared, *out (out_size bytes) zeroed. INVALID_ARGUMENT,
   with a message naming `fn`, when out is NULL or when `null_arg` names an argument that
   is NULL (pass NULL when none is). */
wgml_status wgml_io_begin(const char *fn, void *out, size_t out_size, const char *null_arg, char *err,
                          size_t errlen);

#endif
