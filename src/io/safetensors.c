/* safetensors reader and writer (see safetensors.h). The JSON header goes through
   jansson; every number in it is checked before it sizes an allocation or an offset. */
#define _POSIX_C_SOURCE 200809L

#include "core/half.h"
#include "io/loader.h"
#include "io/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c copies little-endian file data as is: a little-endian host is needed"
#endif

#define META_KEY "__metadata__"
#define HEADER_LEN_BYTES 8

/* the byte size of shape at `elem` bytes an element, or -1 when it would pass INT64_MAX */
static int64_t checked_byte_size(int ndim, const int64_t *shape, int64_t elem)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] != 0 && numel > INT64_MAX / shape[i]) return -1;
        numel *= shape[i];
    }
    if (numel > INT64_MAX / elem) return -1;
    return numel * elem;
}

/* bfloat16 to f32 (exact; halves: core/half.h) */
static float bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* the dtypes read: F32 and I32 as they are, F16 and BF16 converted to f32 */
enum { SRC_F32, SRC_I32, SRC_F16, SRC_BF16 };

static void shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld",
                                 (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

/* ------------------------------------------------------------------ writing */

/* Checks the arguments and builds the JSON header; *root is NULL on error. */
static wgml_status build_header(const wgml_st_tensor *tensors, int count,
                                const char *const *meta_keys,
                                const char *const *meta_values, int meta_count,
                                json_t **root_out, const char *path, char *err,
                                size_t errlen)
{
    *root_out = NULL;
    json_t *root = json_object();
    if (!root) goto oom;

    if (meta_count > 0) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, META_KEY, meta) != 0) goto oom;
        for (int i = 0; i < meta_count; i++) {
            const char *key = meta_keys[i], *value = meta_values[i];
            if (!key || !value) {
                wgml_io_err(err, errlen, "%s: metadata pair %d has a NULL key or value", path, i);
                goto invalid;
            }
            /* The reader keeps keys and values in fixed arrays: refuse what it would. */
            if (strlen(key) > WGML_ST_MAX_META_KEY) {
                wgml_io_err(err, errlen, "%s: metadata key '%.40s...' is %zu bytes, more than %d",
                        path, key, strlen(key), WGML_ST_MAX_META_KEY);
                goto invalid;
            }
            if (strlen(value) > WGML_ST_MAX_META_VALUE) {
                wgml_io_err(err, errlen, "%s: metadata '%s' value is %zu bytes, more than %d",
                        path, key, strlen(value), WGML_ST_MAX_META_VALUE);
                goto invalid;
            }
            if (json_object_get(meta, key)) {
                wgml_io_err(err, errlen, "%s: metadata key '%s' appears twice", path, key);
                goto invalid;
            }
            /* json_string and json_object_set refuse what is not UTF-8. */
            json_t *jvalue = json_string(value);
            json_t *jkey = json_string(key);
            int utf8_ok = jvalue && jkey;
            json_decref(jkey);
            if (!utf8_ok) {
                json_decref(jvalue);
                wgml_io_err(err, errlen, "%s: metadata '%.40s' is not valid UTF-8", path, key);
                goto invalid;
            }
            if (json_object_set_new(meta, key, jvalue) != 0) goto oom;
        }
    }

    int64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const wgml_st_tensor *t = &tensors[i];
        if (!memchr(t->name, '\0', sizeof t->name)) {
            wgml_io_err(err, errlen, "%s: tensor %d: name is not NUL-terminated within %zu bytes",
                    path, i, sizeof t->name);
            goto invalid;
        }
        if (t->name[0] == '\0' || strcmp(t->name, META_KEY) == 0) {
            wgml_io_err(err, errlen, "%s: tensor %d: name '%s' is empty or reserved", path, i,
                    t->name);
            goto invalid;
        }
        if (json_object_get(root, t->name)) {
            wgml_io_err(err, errlen, "%s: tensor name '%s' appears twice", path, t->name);
            goto invalid;
        }
        if (t->ndim < 0 || t->ndim > 4) {
            wgml_io_err(err, errlen, "%s: tensor '%s': ndim %d is out of range (0..4)", path,
                    t->name, t->ndim);
            goto invalid;
        }
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) {
                wgml_io_err(err, errlen, "%s: tensor '%s': dim %d is %lld", path, t->name, d,
                        (long long)t->shape[d]);
                goto invalid;
            }
        }
        char shape_buf[128];
        shape_text(shape_buf, sizeof shape_buf, t->ndim, t->shape);
        int64_t bytes = checked_byte_size(t->ndim, t->shape, 4);
        if (bytes < 0 || offset > INT64_MAX - bytes) {
            wgml_io_err(err, errlen, "%s: tensor '%s': shape %s: byte size overflows", path,
                    t->name, shape_buf);
            json_decref(root);
            return WGML_ERROR_OVERFLOW;
        }
        if (bytes > 0 && !t->data) {
            wgml_io_err(err, errlen, "%s: tensor '%s' of shape %s has NULL data", path, t->name,
                    shape_buf);
            goto invalid;
        }

        json_t *name_check = json_string(t->name);
        if (!name_check) {
            wgml_io_err(err, errlen, "%s: tensor %d: name is not valid UTF-8", path, i);
            goto invalid;
        }
        json_decref(name_check);

        json_t *entry = json_object();
        json_t *shape = json_array();
        json_t *offsets = json_array();
        int failed = !entry || !shape || !offsets;
        for (int d = 0; d < t->ndim && !failed; d++)
            failed = json_array_append_new(shape, json_integer(t->shape[d])) != 0;
        if (!failed)
            failed = json_array_append_new(offsets, json_integer(offset)) != 0 ||
                     json_array_append_new(offsets, json_integer(offset + bytes)) != 0;
        if (failed) {
            json_decref(entry);
            json_decref(shape);
            json_decref(offsets);
            goto oom;
        }
        /* The _new setters take the reference even when they fail, so call every one
           (no short circuit) and nothing leaks. */
        int set_failed = json_object_set_new(entry, "dtype", json_string(t->dtype == WGML_I32 ? "I32" : "F32")) != 0;
        set_failed |= json_object_set_new(entry, "shape", shape) != 0;
        set_failed |= json_object_set_new(entry, "data_offsets", offsets) != 0;
        set_failed |= json_object_set_new(root, t->name, entry) != 0;
        if (set_failed) goto oom;
        offset += bytes;
    }
    *root_out = root;
    return WGML_OK;

invalid:
    json_decref(root);
    return WGML_ERROR_INVALID_ARGUMENT;
oom:
    json_decref(root);
    wgml_io_err(err, errlen, "%s: out of memory building the header", path);
    return WGML_ERROR_OUT_OF_MEMORY;
}

static int write_all(FILE *fp, const void *data, size_t len)
{
    return len == 0 || fwrite(data, 1, len, fp) == len;
}

wgml_status wgml_safetensors_write(const char *path, const wgml_st_tensor *tensors, int count,
                                   const char *const *meta_keys,
                                   const char *const *meta_values, int meta_count, char *err,
                                   size_t errlen)
{
    wgml_io_err(err, errlen, "%s", "");
    if (!path || count < 0 || count > WGML_ST_MAX_TENSORS || (count > 0 && !tensors) ||
        meta_count < 0 || (meta_count > 0 && (!meta_keys || !meta_values))) {
        wgml_io_err(err, errlen,
                "wgml_safetensors_write(%s): bad arguments: count %d (0..%d), meta_count %d, "
                "or a NULL array", path ? path : "NULL", count, WGML_ST_MAX_TENSORS,
                meta_count);
        return WGML_ERROR_INVALID_ARGUMENT;
    }

    json_t *root;
    wgml_status st = build_header(tensors, count, meta_keys, meta_values, meta_count, &root,
                                  path, err, errlen);
    if (st != WGML_OK) return st;

    /* Pad the header with spaces so the data starts 8-byte aligned, as the reference
       writer does. */
    size_t json_len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    size_t header_len = (json_len + 7) & ~(size_t)7;
    char *header = json_len ? malloc(header_len) : NULL;
    if (!header) {
        json_decref(root);
        wgml_io_err(err, errlen, "%s: out of memory for a %zu-byte header", path, header_len);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    json_dumpb(root, header, json_len, JSON_COMPACT);
    json_decref(root);
    memset(header + json_len, ' ', header_len - json_len);

    size_t tmp_len = strlen(path) + 32;
    char *tmp_path = malloc(tmp_len);
    if (!tmp_path) {
        free(header);
        wgml_io_err(err, errlen, "%s: out of memory", path);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    snprintf(tmp_path, tmp_len, "%s.tmp.%ld", path, (long)getpid());

    FILE *fp = fopen(tmp_path, "wb");
    if (!fp) {
        wgml_io_err(err, errlen, "%s: cannot create %s: %s", path, tmp_path, strerror(errno));
        free(header);
        free(tmp_path);
        return WGML_ERROR_IO;
    }

    uint8_t len_bytes[HEADER_LEN_BYTES];
    for (int i = 0; i < HEADER_LEN_BYTES; i++)
        len_bytes[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    int ok = write_all(fp, len_bytes, sizeof len_bytes) && write_all(fp, header, header_len);
    for (int i = 0; i < count && ok; i++) {
        /* build_header checked every size, so this cannot overflow. */
        size_t bytes = (size_t)checked_byte_size(tensors[i].ndim, tensors[i].shape, 4);
        ok = write_all(fp, tensors[i].data, bytes);
    }
    free(header);
    const char *failed_step = NULL;
    if (!ok) failed_step = "write";
    else if (fflush(fp) != 0) failed_step = "flush";
    else if (fsync(fileno(fp)) != 0) failed_step = "fsync";
    int saved_errno = errno;
    if (fclose(fp) != 0 && !failed_step) {
        failed_step = "close";
        saved_errno = errno;
    }
    if (!failed_step && rename(tmp_path, path) != 0) {
        failed_step = "rename";
        saved_errno = errno;
    }
    if (failed_step) {
        remove(tmp_path);
        wgml_io_err(err, errlen, "%s: %s of %s failed: %s", path, failed_step, tmp_path,
                strerror(saved_errno));
        free(tmp_path);
        return WGML_ERROR_IO;
    }
    free(tmp_path);
    return WGML_OK;
}

/* ------------------------------------------------------------------ reading */

/* A tensor while parsing: its byte range in the data section. */
typedef struct parsed_tensor {
    wgml_st_tensor t;
    int64_t begin, end;
    int src; /* SRC_*: the file's dtype */
} parsed_tensor;

static int compare_by_offset(const void *pa, const void *pb)
{
    const parsed_tensor *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->t.name, b->t.name);
}

static const char *const other_dtypes[] = {
    "F64", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8",
    "U64", "U32", "U16", "U8", "BOOL", NULL};

/* Fills p from one header entry; data is not copied yet. */
static wgml_status parse_entry(const char *what, const char *name, json_t *entry,
                               int64_t data_len, parsed_tensor *p, char *err, size_t errlen)
{
    if (strlen(name) > WGML_ST_MAX_NAME) {
        wgml_io_err(err, errlen, "%s: tensor name '%.40s...' is %zu bytes, more than %d", what,
                name, strlen(name), WGML_ST_MAX_NAME);
        return WGML_ERROR_FORMAT;
    }
    memcpy(p->t.name, name, strlen(name) + 1);
    if (!json_is_object(entry)) {
        wgml_io_err(err, errlen, "%s: tensor '%s': entry is not a JSON object", what, name);
        return WGML_ERROR_FORMAT;
    }

    json_t *dtype = json_object_get(entry, "dtype");
    if (!json_is_string(dtype)) {
        wgml_io_err(err, errlen, "%s: tensor '%s': dtype is %s", what, name,
                dtype ? "not a string" : "missing");
        return WGML_ERROR_FORMAT;
    }
    const char *dtype_name = json_string_value(dtype);
    static const char *const read_dtypes[] = {"F32", "I32", "F16", "BF16"};
    p->src = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(dtype_name, read_dtypes[i]) == 0) p->src = i;
    if (p->src < 0) {
        int known = 0;
        for (int i = 0; other_dtypes[i]; i++) known |= strcmp(dtype_name, other_dtypes[i]) == 0;
        wgml_io_err(err, errlen, "%s: tensor '%s': dtype %s%.16s%s %s (wgml reads F32, F16, BF16 and I32)",
                what, name, known ? "" : "'", dtype_name, known ? "" : "'",
                known ? "is not supported" : "is unknown");
        return WGML_ERROR_FORMAT;
    }
    p->t.dtype = p->src == SRC_I32 ? WGML_I32 : WGML_F32;
    int64_t elem = p->src == SRC_F16 || p->src == SRC_BF16 ? 2 : 4;

    json_t *shape = json_object_get(entry, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > 4) {
        wgml_io_err(err, errlen, "%s: tensor '%s': shape is %s", what, name,
                !shape ? "missing" : !json_is_array(shape) ? "not an array"
                                                            : "more than 4 dims");
        return WGML_ERROR_FORMAT;
    }
    p->t.ndim = (int)json_array_size(shape);
    for (int d = 0; d < p->t.ndim; d++) {
        json_t *dim = json_array_get(shape, (size_t)d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0) {
            wgml_io_err(err, errlen, "%s: tensor '%s': shape dim %d is not a non-negative integer",
                    what, name, d);
            return WGML_ERROR_FORMAT;
        }
        p->t.shape[d] = (int64_t)json_integer_value(dim);
    }
    char shape_buf[128];
    shape_text(shape_buf, sizeof shape_buf, p->t.ndim, p->t.shape);
    int64_t bytes = checked_byte_size(p->t.ndim, p->t.shape, elem);
    if (bytes < 0) {
        wgml_io_err(err, errlen, "%s: tensor '%s': shape %s: byte size overflows", what, name,
                shape_buf);
        return WGML_ERROR_FORMAT;
    }

    json_t *offsets = json_object_get(entry, "data_offsets");
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
        !json_is_integer(json_array_get(offsets, 0)) ||
        !json_is_integer(json_array_get(offsets, 1))) {
        wgml_io_err(err, errlen, "%s: tensor '%s': data_offsets is %s", what, name,
                offsets ? "not an array of two integers" : "missing");
        return WGML_ERROR_FORMAT;
    }
    int64_t begin = (int64_t)json_integer_value(json_array_get(offsets, 0));
    int64_t end = (int64_t)json_integer_value(json_array_get(offsets, 1));
    if (begin < 0 || begin > end || end > data_len) {
        wgml_io_err(err, errlen,
                "%s: tensor '%s': data_offsets [%lld, %lld] are not an ordered range within "
                "the %lld data bytes", what, name, (long long)begin, (long long)end,
                (long long)data_len);
        return WGML_ERROR_FORMAT;
    }
    if (end - begin != bytes) {
        wgml_io_err(err, errlen,
                "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, but %s shape "
                "%s needs %lld", what, name, (long long)begin, (long long)end,
                (long long)(end - begin), dtype_name, shape_buf, (long long)bytes);
        return WGML_ERROR_FORMAT;
    }
    p->begin = begin;
    p->end = end;
    return WGML_OK;
}

static wgml_status parse_metadata(const char *what, json_t *meta, wgml_st_file *out,
                                  char *err, size_t errlen)
{
    if (!json_is_object(meta)) {
        wgml_io_err(err, errlen, "%s: __metadata__ is not a JSON object", what);
        return WGML_ERROR_FORMAT;
    }
    size_t n = json_object_size(meta);
    if (n == 0) return WGML_OK;
    out->meta_keys = calloc(n, sizeof *out->meta_keys);
    out->meta_values = calloc(n, sizeof *out->meta_values);
    if (!out->meta_keys || !out->meta_values) {
        wgml_io_err(err, errlen, "%s: out of memory for %zu metadata pairs", what, n);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    const char *key;
    json_t *value;
    json_object_foreach(meta, key, value) {
        if (!json_is_string(value)) {
            wgml_io_err(err, errlen, "%s: __metadata__ '%.64s' is not a string", what, key);
            return WGML_ERROR_FORMAT;
        }
        size_t key_len = strlen(key), value_len = json_string_length(value);
        if (key_len > WGML_ST_MAX_META_KEY) {
            wgml_io_err(err, errlen, "%s: __metadata__ key '%.40s...' is %zu bytes, more than %d",
                    what, key, key_len, WGML_ST_MAX_META_KEY);
            return WGML_ERROR_FORMAT;
        }
        if (value_len > WGML_ST_MAX_META_VALUE) {
            wgml_io_err(err, errlen, "%s: __metadata__ '%s' value is %zu bytes, more than %d",
                    what, key, value_len, WGML_ST_MAX_META_VALUE);
            return WGML_ERROR_FORMAT;
        }
        /* Jansson rejects \u0000 without JSON_ALLOW_NUL, so strlen is the whole string. */
        memcpy(out->meta_keys[out->meta_count], key, key_len + 1);
        memcpy(out->meta_values[out->meta_count], json_string_value(value), value_len + 1);
        out->meta_count++;
    }
    return WGML_OK;
}

static wgml_status parse_named(const char *what, const uint8_t *bytes, size_t len,
                               wgml_st_file *out, char *err, size_t errlen)
{
    if (len < HEADER_LEN_BYTES) {
        wgml_io_err(err, errlen, "%s: %zu bytes, shorter than the 8-byte header length", what,
                len);
        return WGML_ERROR_FORMAT;
    }
    uint64_t header_len = 0;
    for (int i = HEADER_LEN_BYTES - 1; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
    if (header_len > WGML_ST_MAX_HEADER || header_len > len - HEADER_LEN_BYTES) {
        wgml_io_err(err, errlen,
                "%s: header length %llu is more than the %zu bytes after it or the %u-byte "
                "limit", what, (unsigned long long)header_len, len - HEADER_LEN_BYTES,
                WGML_ST_MAX_HEADER);
        return WGML_ERROR_FORMAT;
    }
    const uint8_t *data = bytes + HEADER_LEN_BYTES + header_len;
    int64_t data_len = (int64_t)(len - HEADER_LEN_BYTES - header_len);

    json_error_t jerr;
    /* Duplicate names would make a lookup ambiguous: refuse them. */
    json_t *root = json_loadb((const char *)bytes + HEADER_LEN_BYTES, (size_t)header_len,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        wgml_io_err(err, errlen, "%s: header is not valid JSON: %s (at byte %d)", what, jerr.text,
                jerr.position);
        return WGML_ERROR_FORMAT;
    }
    wgml_status st = WGML_OK;
    parsed_tensor *parsed = NULL;
    if (!json_is_object(root)) {
        wgml_io_err(err, errlen, "%s: header is not a JSON object", what);
        st = WGML_ERROR_FORMAT;
        goto done;
    }

    json_t *meta = json_object_get(root, META_KEY);
    size_t count = json_object_size(root) - (meta ? 1 : 0);
    if (count > WGML_ST_MAX_TENSORS) {
        wgml_io_err(err, errlen, "%s: %zu tensors, more than the %d limit", what, count,
                WGML_ST_MAX_TENSORS);
        st = WGML_ERROR_FORMAT;
        goto done;
    }
    if (meta) {
        st = parse_metadata(what, meta, out, err, errlen);
        if (st != WGML_OK) goto done;
    }

    if (count > 0) {
        parsed = calloc(count, sizeof *parsed);
        if (!parsed) {
            wgml_io_err(err, errlen, "%s: out of memory for %zu tensors", what, count);
            st = WGML_ERROR_OUT_OF_MEMORY;
            goto done;
        }
    }
    size_t filled = 0;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, META_KEY) == 0) continue;
        st = parse_entry(what, key, value, data_len, &parsed[filled], err, errlen);
        if (st != WGML_OK) goto done;
        filled++;
    }

    /* The format wants the tensors to tile the data section exactly, as the reference
       reader checks: sorted by offset, each begins where the one before it ends, and the
       last ends at the end of the file. A gap or trailing bytes usually mean a header length
       that is off (every tensor would then be read shifted), so they are refused, not
       skipped. Sorting also gives the tensors back in the order they were written. */
    if (count > 1) qsort(parsed, count, sizeof *parsed, compare_by_offset);
    int64_t covered = 0;
    for (size_t i = 0; i < count; i++) {
        if (parsed[i].begin < covered) {
            wgml_io_err(err, errlen, "%s: tensors '%s' [%lld, %lld] and '%s' [%lld, %lld] overlap",
                    what, parsed[i - 1].t.name, (long long)parsed[i - 1].begin,
                    (long long)parsed[i - 1].end, parsed[i].t.name,
                    (long long)parsed[i].begin, (long long)parsed[i].end);
            st = WGML_ERROR_FORMAT;
            goto done;
        }
        if (parsed[i].begin > covered) {
            wgml_io_err(err, errlen,
                    "%s: tensor '%s' begins at data byte %lld, but the tensors before it end at "
                    "%lld: the data has a gap (data_offsets must be contiguous)", what,
                    parsed[i].t.name, (long long)parsed[i].begin, (long long)covered);
            st = WGML_ERROR_FORMAT;
            goto done;
        }
        covered = parsed[i].end;
    }
    if (covered != data_len) {
        wgml_io_err(err, errlen,
                "%s: the tensors cover %lld of the %lld data bytes after the %llu-byte header: "
                "the header length is wrong or bytes were added after the data", what,
                (long long)covered, (long long)data_len, (unsigned long long)header_len);
        st = WGML_ERROR_FORMAT;
        goto done;
    }

    if (count > 0) {
        out->tensors = calloc(count, sizeof *out->tensors);
        if (!out->tensors) {
            wgml_io_err(err, errlen, "%s: out of memory for %zu tensors", what, count);
            st = WGML_ERROR_OUT_OF_MEMORY;
            goto done;
        }
    }
    for (size_t i = 0; i < count; i++) {
        wgml_st_tensor *t = &out->tensors[i];
        *t = parsed[i].t;
        size_t nbytes = (size_t)(parsed[i].end - parsed[i].begin);
        int half = parsed[i].src == SRC_F16 || parsed[i].src == SRC_BF16;
        out->count = (int)i + 1; /* so that a failure below frees what was copied */
        if (nbytes == 0) continue;
        /* nbytes lies within the input (halves: twice it), so this allocation is bounded by it. */
        t->data = malloc(half ? 2 * nbytes : nbytes);
        if (!t->data) {
            wgml_io_err(err, errlen, "%s: out of memory for tensor '%s' (%zu bytes)", what,
                    t->name, nbytes);
            st = WGML_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        if (!half) {
            memcpy(t->data, data + parsed[i].begin, nbytes);
            continue;
        }
        for (size_t e = 0; e < nbytes / 2; e++) {
            uint16_t h;
            memcpy(&h, data + parsed[i].begin + 2 * e, 2); /* little-endian, as the host */
            t->data[e] = parsed[i].src == SRC_F16 ? wgml_half_to_f32(h) : bf16_to_f32(h);
        }
    }

done:
    free(parsed);
    json_decref(root);
    return st;
}

wgml_status wgml_safetensors_parse(const uint8_t *bytes, size_t len, wgml_st_file *out,
                                   char *err, size_t errlen)
{
    wgml_status st = wgml_io_begin("wgml_safetensors_parse", out, sizeof *out, !bytes && len > 0 ? "bytes" : NULL, err, errlen);
    if (st) return st;
    st = parse_named("safetensors data", bytes, len, out, err, errlen);
    if (st != WGML_OK) wgml_st_file_free(out);
    return st;
}

wgml_status wgml_safetensors_read(const char *path, wgml_st_file *out, char *err,
                                  size_t errlen)
{
    wgml_status st = wgml_io_begin("wgml_safetensors_read", out, sizeof *out, !path ? "path" : NULL, err, errlen);
    if (st) return st;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        wgml_io_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return WGML_ERROR_IO;
    }
    struct stat info;
    if (fstat(fileno(fp), &info) != 0) {
        wgml_io_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        fclose(fp);
        return WGML_ERROR_IO;
    }
    if (!S_ISREG(info.st_mode)) {
        wgml_io_err(err, errlen, "%s: %s", path,
                S_ISDIR(info.st_mode) ? "is a directory" : "is not a regular file");
        fclose(fp);
        return WGML_ERROR_IO;
    }
    if ((uint64_t)info.st_size > (uint64_t)SIZE_MAX) {
        wgml_io_err(err, errlen, "%s: %lld bytes do not fit in memory", path,
                (long long)info.st_size);
        fclose(fp);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    size_t len = (size_t)info.st_size;
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes) {
        wgml_io_err(err, errlen, "%s: out of memory for %zu bytes", path, len);
        fclose(fp);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    size_t got = len ? fread(bytes, 1, len, fp) : 0;
    int read_failed = got != len || ferror(fp);
    int saved_errno = errno;
    fclose(fp);
    if (read_failed) {
        wgml_io_err(err, errlen, "%s: read %zu of %zu bytes: %s", path, got, len,
                got < len && saved_errno ? strerror(saved_errno) : "file changed while read");
        free(bytes);
        return WGML_ERROR_IO;
    }
    st = parse_named(path, bytes, len, out, err, errlen);
    free(bytes);
    if (st != WGML_OK) wgml_st_file_free(out);
    return st;
}

const wgml_st_tensor *wgml_st_find(const wgml_st_file *f, const char *name)
{
    if (!f || !name) return NULL;
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *wgml_st_meta(const wgml_st_file *f, const char *key)
{
    if (!f || !key) return NULL;
    for (int i = 0; i < f->meta_count; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

void wgml_st_file_free(wgml_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->count; i++) free(f->tensors[i].data);
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}
