/* What the file loaders (idx.c, safetensors.c) share: errors go into the caller's buffer. */
#ifndef WGML_IO_LOADER_H
#define WGML_IO_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

void wgml_io_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The start of every loader: err cleared, *out (out_size bytes) zeroed. INVALID_ARGUMENT,
   with a message naming `fn`, when out is NULL or when `null_arg` names an argument that
   is NULL (pass NULL when none is). */
wgml_status wgml_io_begin(const char *fn, void *out, size_t out_size, const char *null_arg, char *err,
                          size_t errlen);

/* Numbers written as text (safetensors metadata, command-line flags), read strictly: the
   whole of s must be the number, with no blanks or sign where none belongs, and it must lie
   in [lo, hi]. Anything else is WGML_ERROR_FORMAT with a message naming `what` and the text:
   "-3" for a count, "99999999999" for an int, "1e9x", "" or "nan" are refused, not wrapped
   or cut short. */
wgml_status wgml_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err,
                           size_t errlen);
wgml_status wgml_parse_u64(const char *what, const char *s, uint64_t *out, char *err, size_t errlen);
/* A finite float (parsed as a float, so its printed %.9g form reads back exactly). */
wgml_status wgml_parse_f32(const char *what, const char *s, float lo, float hi, float *out, char *err,
                           size_t errlen);

/* The shortest %g text of v that reads back as the same float ("0.01", not
   "0.00999999978"): how checkpoints write their float metadata. */
void wgml_float_text(char *buf, size_t len, float v);

#endif
