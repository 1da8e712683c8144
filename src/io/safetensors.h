/* The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
   ({"name": {"dtype", "shape", "data_offsets"}, ..., "__metadata__": {str: str}}), then the
   tensor bytes, offsets relative to the start of the data. wgml writes F32 and I32 and reads
   those and F16 and BF16 (converted to f32).
   Host only; nothing here prints or exits: every function returns a status and writes a
   message into err. Assumes a little-endian host, like the format. */
#ifndef WGML_IO_SAFETENSORS_H
#define WGML_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

#define WGML_ST_MAX_NAME 127        /* bytes in a tensor name */
#define WGML_ST_MAX_META_KEY 63     /* bytes in a metadata key */
#define WGML_ST_MAX_META_VALUE 255  /* bytes in a metadata value */
#define WGML_ST_MAX_TENSORS 100000
#define WGML_ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes of JSON header */

typedef struct wgml_st_tensor {
    char name[128];
    int ndim;         /* 0 (a scalar) to 4 */
    int64_t shape[4]; /* unused ones are 0 */
    float *data;      /* owned when read; NULL when the tensor has no elements. 4 bytes an
                         element: f32 values, or with dtype WGML_I32 the int32 bits */
    int dtype;        /* WGML_F32 (read from F32, F16 or BF16, converted) or WGML_I32 */
} wgml_st_tensor;

typedef struct wgml_st_file {
    int count;               /* tensors, in the order of their data in the file */
    wgml_st_tensor *tensors;
    int meta_count;
    char (*meta_keys)[64];
    char (*meta_values)[256];
} wgml_st_file;

/* Writes the tensors, in the given order, data contiguous and offsets tight, with the
   metadata pairs (meta_count may be 0 with NULL arrays). Writes "<path>.tmp.<pid>",
   flushes and fsyncs it, then renames it over path, so a crash leaves either the old file
   or the new one; on any error the temp file is removed. Errors:
   WGML_ERROR_INVALID_ARGUMENT (NULLs, ndim out of 0..4, a negative dim, an empty, too long,
   duplicate or non-UTF-8 name, the name "__metadata__", too long or duplicate metadata),
   WGML_ERROR_OVERFLOW (an element count or byte size that overflows), WGML_ERROR_IO,
   WGML_ERROR_OUT_OF_MEMORY. */
wgml_status wgml_safetensors_write(const char *path, const wgml_st_tensor *tensors, int count,
                                   const char *const *meta_keys,
                                   const char *const *meta_values, int meta_count, char *err,
                                   size_t errlen);

/* Parses a whole file held in memory; the tensor data is copied out, so bytes may be
   freed afterwards. Anything malformed is WGML_ERROR_FORMAT with a message (never a crash,
   never an allocation larger than the input justifies), including data the tensors do not
   cover exactly (a gap, an overlap, bytes after the last tensor: the signs of a header
   length that is off); also WGML_ERROR_OUT_OF_MEMORY and WGML_ERROR_INVALID_ARGUMENT. On
   failure *out is zeroed. Metadata values are kept as text: read numbers from them with
   wgml_parse_i64 and its kin (io/loader.h). */
wgml_status wgml_safetensors_parse(const uint8_t *bytes, size_t len, wgml_st_file *out,
                                   char *err, size_t errlen);
/* Reads path into memory and parses it; WGML_ERROR_IO when it cannot be read. */
wgml_status wgml_safetensors_read(const char *path, wgml_st_file *out, char *err,
                                  size_t errlen);

/* NULL when absent. */
const wgml_st_tensor *wgml_st_find(const wgml_st_file *f, const char *name);
const char *wgml_st_meta(const wgml_st_file *f, const char *key);
void wgml_st_file_free(wgml_st_file *f); /* safe on a zeroed or freed struct */

#endif
