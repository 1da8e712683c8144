/* wgml_save and wgml_load (wgml.h): named tensors to and from safetensors files, through the
   checked reader and the atomic writer of io/safetensors.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api_lock.h"
#include "core/context.h"
#include "io/safetensors.h"

struct wgml_file {
    wgml_context *ctx;
    wgml_st_file st;
};

wgml_context *wgml_file_owner(const wgml_file *f) { return f ? f->ctx : NULL; }

wgml_status wgml_save(wgml_context *ctx, const char *path, int n, const char *const *names, wgml_tensor *const *tensors,
                      int n_meta, const char *const *meta_keys, const char *const *meta_values)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!path || n < 0 || (n && (!names || !tensors)) || n_meta < 0 || (n_meta && (!meta_keys || !meta_values)))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_save: path, names and tensors (and metadata when n_meta > 0) must be given");
    wgml_st_tensor *st = calloc((size_t)(n ? n : 1), sizeof *st);
    if (!st) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_save: out of host memory");
    wgml_status status = WGML_OK;
    for (int i = 0; i < n && !status; i++) {
        wgml_tensor *t = tensors[i];
        if (!names[i] || !t || wgml_tensor_context(t) != ctx) {
            status = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_save: tensor %d (%s) is NULL or of another context", i,
                               names[i] ? names[i] : "no name");
            break;
        }
        if (strlen(names[i]) > WGML_ST_MAX_NAME) {
            status = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_save: name %d is %zu bytes, more than %d", i, strlen(names[i]),
                               WGML_ST_MAX_NAME);
            break;
        }
        snprintf(st[i].name, sizeof st[i].name, "%s", names[i]);
        st[i].ndim = wgml_tensor_ndim(t);
        st[i].dtype = wgml_tensor_dtype(t);
        for (int d = 0; d < st[i].ndim && d < 4; d++) st[i].shape[d] = wgml_tensor_dim(t, d);
        if (st[i].ndim > 4) {
            status = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_save: tensor '%s' has %d dims; safetensors files here hold up to 4",
                               names[i], st[i].ndim);
            break;
        }
        size_t count = (size_t)wgml_tensor_numel(t);
        st[i].data = malloc((count ? count : 1) * 4);
        if (!st[i].data) {
            status = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_save: out of host memory for '%s'", names[i]);
            break;
        }
        if (count) /* evaluates a lazy tensor; reads a view in its logical order */
            status = st[i].dtype == WGML_I32 ? wgml_tensor_read_i32(t, (int32_t *)(void *)st[i].data, count)
                                             : wgml_tensor_read(t, st[i].data, count);
    }
    if (!status) {
        char err[512];
        status = wgml_safetensors_write(path, st, n, meta_keys, meta_values, n_meta, err, sizeof err);
        if (status) wgml_fail(ctx, status, "wgml_save: %s", err);
    }
    for (int i = 0; i < n; i++) free(st[i].data);
    free(st);
    return status;
}

wgml_status wgml_load(wgml_context *ctx, const char *path, wgml_file **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_load: out is NULL");
    *out = NULL;
    if (!path) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_load: path is NULL");
    wgml_file *f = calloc(1, sizeof *f);
    if (!f) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_load: out of host memory");
    char err[512];
    wgml_status st = wgml_safetensors_read(path, &f->st, err, sizeof err);
    if (st) {
        free(f);
        return wgml_fail(ctx, st, "wgml_load: %s", err);
    }
    f->ctx = ctx;
    *out = f;
    return WGML_OK;
}

int wgml_file_count(const wgml_file *f) { return f ? f->st.count : 0; }

const char *wgml_file_name(const wgml_file *f, int i)
{
    return f && i >= 0 && i < f->st.count ? f->st.tensors[i].name : NULL;
}

int wgml_file_find(const wgml_file *f, const char *name)
{
    for (int i = 0; f && name && i < f->st.count; i++)
        if (strcmp(f->st.tensors[i].name, name) == 0) return i;
    return -1;
}

const char *wgml_file_meta(const wgml_file *f, const char *key) { return f && key ? wgml_st_meta(&f->st, key) : NULL; }

int wgml_file_meta_count(const wgml_file *f) { return f ? f->st.meta_count : 0; }

const char *wgml_file_meta_key(const wgml_file *f, int i)
{
    return f && i >= 0 && i < f->st.meta_count ? f->st.meta_keys[i] : NULL;
}

wgml_tensor *wgml_file_tensor(wgml_file *f, int i)
{
    if (!f) return NULL;
    wgml_context *ctx = f->ctx;
    if (i < 0 || i >= f->st.count) {
        wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_file_tensor: index %d, the file holds %d tensors", i, f->st.count);
        return NULL;
    }
    const wgml_st_tensor *t = &f->st.tensors[i];
    int64_t shape[4] = {1, 0, 0, 0};
    int ndim = t->ndim ? t->ndim : 1; /* a scalar as one element */
    int64_t count = 1;
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d], count *= t->shape[d];
    if (count == 0) {
        wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_file_tensor: '%s' has no elements", t->name);
        return NULL;
    }
    wgml_tensor *out = NULL;
    wgml_status st = t->dtype == WGML_I32 ? wgml_tensor_from_i32(ctx, ndim, shape, (const int32_t *)(const void *)t->data, (size_t)count, &out)
                                          : wgml_tensor_from_data(ctx, ndim, shape, t->data, (size_t)count, &out);
    return st ? NULL : out;
}

void wgml_file_free(wgml_file *f)
{
    if (!f) return;
    wgml_st_file_free(&f->st);
    free(f);
}
