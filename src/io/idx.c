/* IDX reader (see idx.h): magic 00 00 08 ndim, ndim big-endian uint32 dims, then the
   bytes. Read through zlib so gzip and plain files take the same path. */
#define _POSIX_C_SOURCE 200809L

#include "io/loader.h"
#include "io/idx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_TYPE_UBYTE 0x08
#define IDX_MAX_BYTES ((uint64_t)1 << 30)
/* The buffer grows as data arrives, so a tiny file whose header claims 1 GiB costs
   only what it really holds. */
#define IDX_FIRST_CHUNK ((size_t)16 << 20)
#define MNIST_SIDE 28
#define MNIST_CLASSES 10

static uint32_t read_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* "60000x28x28" */
static void format_dims(char *buf, size_t len, int ndim, const uint32_t *dims)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < len; i++) {
        int w = snprintf(buf + used, len - used, i ? "x%u" : "%u", (unsigned)dims[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Reads up to want bytes; returns how many were read (< want at end of file) or -1 on a
   zlib error, with *zerr set to zlib's error number (Z_OK when none). */
static long long gz_read_full(gzFile f, uint8_t *dst, size_t want, int *zerr)
{
    size_t got = 0;
    *zerr = Z_OK;
    while (got < want) {
        size_t chunk = want - got;
        if (chunk > (size_t)1 << 30) chunk = (size_t)1 << 30; /* gzread takes an int */
        int n = gzread(f, dst + got, (unsigned)chunk);
        if (n < 0) {
            gzerror(f, zerr);
            return -1;
        }
        if (n == 0) break;
        got += (size_t)n;
    }
    if (got < want) {
        /* A short read at a truncated gzip stream leaves Z_BUF_ERROR behind. */
        gzerror(f, zerr);
    }
    return (long long)got;
}

/* The message for a zlib error; errno's text for Z_ERRNO. */
static const char *gz_message(gzFile f, int zerr, const char *path)
{
    if (zerr == Z_ERRNO) return strerror(errno);
    int dummy;
    const char *m = gzerror(f, &dummy);
    if (!m || !*m) return "unknown zlib error";
    /* zlib's message is "<path>: <what>"; the callers name the file already. */
    size_t path_len = strlen(path);
    if (strncmp(m, path, path_len) == 0 && m[path_len] == ':' && m[path_len + 1] == ' ')
        return m + path_len + 2;
    return m;
}

static wgml_status read_header(gzFile f, const char *path, wgml_idx *out, char *err,
                               size_t errlen)
{
    uint8_t magic[4];
    int zerr;
    long long n = gz_read_full(f, magic, sizeof magic, &zerr);
    if (n < 0 && zerr == Z_ERRNO) {
        wgml_io_err(err, errlen, "%s: read failed: %s", path, gz_message(f, zerr, path));
        return WGML_ERROR_IO;
    }
    if (n < 0) {
        wgml_io_err(err, errlen, "%s: corrupt gzip stream: %s", path, gz_message(f, zerr, path));
        return WGML_ERROR_FORMAT;
    }
    if (n < (long long)sizeof magic) {
        wgml_io_err(err, errlen, "%s: truncated: %lld bytes, shorter than the 4-byte IDX magic",
                path, n);
        return WGML_ERROR_FORMAT;
    }
    if (magic[0] != 0 || magic[1] != 0) {
        wgml_io_err(err, errlen,
                "%s: not an IDX file: magic starts %02x %02x, want 00 00", path,
                (unsigned)magic[0], (unsigned)magic[1]);
        return WGML_ERROR_FORMAT;
    }
    if (magic[2] != IDX_TYPE_UBYTE) {
        wgml_io_err(err, errlen,
                "%s: IDX element type 0x%02x is not supported (only 0x08, unsigned byte)",
                path, (unsigned)magic[2]);
        return WGML_ERROR_FORMAT;
    }
    int ndim = magic[3];
    if (ndim < 1 || ndim > 4) {
        wgml_io_err(err, errlen, "%s: IDX ndim %d is out of range (1..4)", path, ndim);
        return WGML_ERROR_FORMAT;
    }

    uint8_t raw_dims[16];
    size_t dims_bytes = 4 * (size_t)ndim;
    n = gz_read_full(f, raw_dims, dims_bytes, &zerr);
    if (n < 0) {
        wgml_io_err(err, errlen, "%s: %s: %s", path,
                zerr == Z_ERRNO ? "read failed" : "corrupt gzip stream", gz_message(f, zerr, path));
        return zerr == Z_ERRNO ? WGML_ERROR_IO : WGML_ERROR_FORMAT;
    }
    if ((size_t)n < dims_bytes) {
        wgml_io_err(err, errlen, "%s: truncated header: %d dims need %zu bytes, file has %lld",
                path, ndim, dims_bytes, n);
        return WGML_ERROR_FORMAT;
    }

    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->dims[i] = read_be32(raw_dims + 4 * i);
    char dims_text[64];
    format_dims(dims_text, sizeof dims_text, ndim, out->dims);
    uint64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        if (out->dims[i] == 0) {
            wgml_io_err(err, errlen, "%s: dims are %s: dim %d is 0", path, dims_text, i);
            return WGML_ERROR_FORMAT;
        }
    }
    for (int i = 0; i < ndim; i++) {
        /* Checking the bound at every step keeps the product far from overflowing:
           at most 2^30 * (2^32 - 1). */
        total *= out->dims[i];
        if (total > IDX_MAX_BYTES) {
            wgml_io_err(err, errlen, "%s: header says %s bytes, more than the 1 GiB limit", path,
                    dims_text);
            return WGML_ERROR_FORMAT;
        }
    }
    out->size = (size_t)total;
    return WGML_OK;
}

static wgml_status read_data(gzFile f, const char *path, wgml_idx *out, char *err,
                             size_t errlen)
{
    char dims_text[64], size_text[96];
    format_dims(dims_text, sizeof dims_text, out->ndim, out->dims);
    if (out->ndim == 1) snprintf(size_text, sizeof size_text, "%zu bytes", out->size);
    else snprintf(size_text, sizeof size_text, "%s = %zu bytes", dims_text, out->size);

    size_t cap = out->size < IDX_FIRST_CHUNK ? out->size : IDX_FIRST_CHUNK;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        wgml_io_err(err, errlen, "%s: out of memory for %zu bytes", path, cap);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    size_t got = 0;
    int zerr = Z_OK;
    for (;;) {
        long long n = gz_read_full(f, buf + got, cap - got, &zerr);
        if (n < 0) break;
        got += (size_t)n;
        if (got < cap || cap == out->size) break; /* end of file, or all of it */
        size_t grown = cap > out->size / 2 ? out->size : cap * 2;
        uint8_t *bigger = realloc(buf, grown);
        if (!bigger) {
            free(buf);
            wgml_io_err(err, errlen, "%s: out of memory for %zu bytes", path, grown);
            return WGML_ERROR_OUT_OF_MEMORY;
        }
        buf = bigger;
        cap = grown;
    }
    if (zerr == Z_ERRNO) {
        free(buf);
        wgml_io_err(err, errlen, "%s: read failed: %s", path, gz_message(f, zerr, path));
        return WGML_ERROR_IO;
    }
    if (got < out->size) {
        free(buf);
        /* A truncated gzip stream also leaves a zlib message; name it when present. */
        wgml_io_err(err, errlen, "%s: truncated: header says %s, file has %zu%s%s",
                path, size_text, got, zerr != Z_OK ? "; zlib: " : "",
                zerr != Z_OK ? gz_message(f, zerr, path) : "");
        return WGML_ERROR_FORMAT;
    }
    if (zerr != Z_OK) {
        free(buf);
        wgml_io_err(err, errlen, "%s: corrupt gzip stream: %s", path, gz_message(f, zerr, path));
        return WGML_ERROR_FORMAT;
    }

    /* Reading past the end also makes zlib check the gzip trailer (CRC and length). */
    uint8_t extra[64];
    long long more = gz_read_full(f, extra, sizeof extra, &zerr);
    if (more < 0 || zerr != Z_OK) {
        free(buf);
        if (zerr == Z_ERRNO) {
            wgml_io_err(err, errlen, "%s: read failed: %s", path, gz_message(f, zerr, path));
            return WGML_ERROR_IO;
        }
        wgml_io_err(err, errlen, "%s: corrupt gzip stream after the data: %s", path,
                gz_message(f, zerr, path));
        return WGML_ERROR_FORMAT;
    }
    if (more > 0) {
        free(buf);
        wgml_io_err(err, errlen, "%s: trailing bytes after the %s of data the header says",
                path, size_text);
        return WGML_ERROR_FORMAT;
    }
    out->data = buf;
    return WGML_OK;
}

wgml_status wgml_idx_load(const char *path, wgml_idx *out, char *err, size_t errlen)
{
    wgml_status st = wgml_io_begin("wgml_idx_load", out, sizeof *out, !path ? "path" : NULL, err, errlen);
    if (st) return st;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        wgml_io_err(err, errlen, "%s: cannot open: %s", path,
                errno ? strerror(errno) : "out of memory");
        return errno ? WGML_ERROR_IO : WGML_ERROR_OUT_OF_MEMORY;
    }
    gzbuffer(f, 1u << 17); /* fewer, larger reads for the 47 MB MNIST images */

    st = read_header(f, path, out, err, errlen);
    if (st == WGML_OK) st = read_data(f, path, out, err, errlen);
    gzclose(f);
    if (st != WGML_OK) memset(out, 0, sizeof *out);
    return st;
}

void wgml_idx_free(wgml_idx *idx)
{
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* <dir>/<base>.gz, or <dir>/<base> where only the plain file exists. */
static char *mnist_path(const char *dir, const char *base)
{
    size_t len = strlen(dir) + strlen(base) + 8;
    char *path = malloc(len);
    if (!path) return NULL;
    snprintf(path, len, "%s/%s.gz", dir, base);
    if (access(path, F_OK) != 0) {
        snprintf(path, len, "%s/%s", dir, base);
        if (access(path, F_OK) != 0) snprintf(path, len, "%s/%s.gz", dir, base);
    }
    return path;
}

wgml_status wgml_mnist_load(const char *dir, int train, wgml_mnist *out, char *err,
                            size_t errlen)
{
    wgml_status st = wgml_io_begin("wgml_mnist_load", out, sizeof *out, !dir ? "dir" : NULL, err, errlen);
    if (st) return st;
    const char *prefix = train ? "train" : "t10k";
    char images_base[64], labels_base[64];
    snprintf(images_base, sizeof images_base, "%s-images-idx3-ubyte", prefix);
    snprintf(labels_base, sizeof labels_base, "%s-labels-idx1-ubyte", prefix);
    char *images_path = mnist_path(dir, images_base);
    char *labels_path = mnist_path(dir, labels_base);
    wgml_idx images = {0}, labels = {0};

    if (!images_path || !labels_path) {
        wgml_io_err(err, errlen, "%s: out of memory for a path", dir);
        st = WGML_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    st = wgml_idx_load(images_path, &images, err, errlen);
    if (st != WGML_OK) goto done;
    st = wgml_idx_load(labels_path, &labels, err, errlen);
    if (st != WGML_OK) goto done;

    if (images.ndim != 3 || images.dims[1] != MNIST_SIDE || images.dims[2] != MNIST_SIDE) {
        char dims_text[64];
        format_dims(dims_text, sizeof dims_text, images.ndim, images.dims);
        wgml_io_err(err, errlen, "%s: images are %s, want N x 28 x 28", images_path, dims_text);
        st = WGML_ERROR_FORMAT;
        goto done;
    }
    if (labels.ndim != 1) {
        wgml_io_err(err, errlen, "%s: labels have %d dims, want 1", labels_path, labels.ndim);
        st = WGML_ERROR_FORMAT;
        goto done;
    }
    if (labels.dims[0] != images.dims[0]) {
        wgml_io_err(err, errlen, "%s has %u labels but %s has %u images", labels_path,
                (unsigned)labels.dims[0], images_path, (unsigned)images.dims[0]);
        st = WGML_ERROR_FORMAT;
        goto done;
    }
    for (size_t i = 0; i < labels.size; i++) {
        if (labels.data[i] >= MNIST_CLASSES) {
            wgml_io_err(err, errlen, "%s: label %zu is %u, want < 10", labels_path, i,
                    (unsigned)labels.data[i]);
            st = WGML_ERROR_FORMAT;
            goto done;
        }
    }

    /* images.size <= 1 GiB, so size * sizeof(float) fits any 64-bit size_t; check
       anyway for 32-bit hosts. */
    if (images.size > SIZE_MAX / sizeof(float)) {
        wgml_io_err(err, errlen, "%s: %zu pixels as floats overflow size_t", images_path,
                images.size);
        st = WGML_ERROR_OVERFLOW;
        goto done;
    }
    out->images = malloc(images.size * sizeof(float));
    if (!out->images) {
        wgml_io_err(err, errlen, "%s: out of memory for %zu floats", images_path, images.size);
        st = WGML_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < images.size; i++) out->images[i] = (float)images.data[i] / 255.0f;
    /* The label bytes are already what the caller wants: hand the buffer over. */
    out->labels = labels.data;
    labels.data = NULL;
    out->n = (int64_t)images.dims[0];

done:
    wgml_idx_free(&images);
    wgml_idx_free(&labels);
    free(images_path);
    free(labels_path);
    if (st != WGML_OK) wgml_mnist_free(out);
    return st;
}

void wgml_mnist_free(wgml_mnist *m)
{
    if (!m) return;
    free(m->images);
    free(m->labels);
    memset(m, 0, sizeof *m);
}
