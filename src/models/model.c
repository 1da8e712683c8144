/* Models as parameter tables, and their checkpoints (see model.h). */
#include "models/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "io/loader.h"

static const char *const moment_suffix[2] = {".m", ".v"};

uint64_t wgml_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double wgml_rng_uniform(uint64_t *state) { return (double)(wgml_rng_next(state) >> 11) / 9007199254740992.0; }

/* ---------------------------------------------------------------- the tensors */

void wgml_model_free(wgml_model *m)
{
    if (!m) return;
    for (int i = 0; m->params && i < m->n; i++) wgml_tensor_free(m->params[i]);
    free(m->params);
    free(m->spec);
    memset(m, 0, sizeof *m);
}

/* Parameter p's initial values on the host (ZEROS, ONES, UNIFORM from *rng). */
static void host_init(const wgml_param_spec *p, float *v, int64_t n, uint64_t *rng)
{
    for (int64_t k = 0; k < n; k++)
        v[k] = p->init == WGML_INIT_ONES      ? 1.0f
               : p->init == WGML_INIT_UNIFORM ? (float)((2 * wgml_rng_uniform(rng) - 1) * p->scale)
                                              : 0.0f;
}

wgml_status wgml_model_create(wgml_context *ctx, int n, const wgml_param_spec *spec, const float *const *data, uint64_t seed,
                              wgml_model *out)
{
    if (!ctx || !out || n < 1 || !spec) return WGML_ERROR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->ctx = ctx;
    out->spec = malloc((size_t)n * sizeof *out->spec);
    out->params = calloc((size_t)n, sizeof *out->params);
    if (!out->spec || !out->params) {
        wgml_model_free(out);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    out->n = n;
    memcpy(out->spec, spec, (size_t)n * sizeof *spec);
    wgml_status st = WGML_OK;
    int drawn_on_gpu = 0;
    for (int i = 0; i < n; i++) drawn_on_gpu |= spec[i].init == WGML_INIT_NORMAL && !(data && data[i]);
    if (drawn_on_gpu) st = wgml_manual_seed(ctx, seed);
    uint64_t rng = seed;
    for (int i = 0; i < n && !st; i++) {
        const wgml_param_spec *p = &spec[i];
        int64_t count = wgml_param_numel(p);
        if (!(data && data[i]) && p->init == WGML_INIT_NORMAL) {
            /* evaluated one by one, in order: the generator's draws are the table's */
            wgml_tensor *t = wgml_randn(ctx, p->ndim, p->shape, 0.0f, (float)p->scale);
            st = t ? wgml_eval(ctx, 1, &t) : wgml_last_status(ctx);
            if (!t && !st) st = WGML_ERROR_OUT_OF_MEMORY;
            out->params[i] = t;
            continue;
        }
        const float *values = data ? data[i] : NULL;
        float *made = NULL;
        if (!values) {
            made = malloc((size_t)(count ? count : 1) * sizeof *made);
            if (!made) {
                st = WGML_ERROR_OUT_OF_MEMORY;
                break;
            }
            host_init(p, made, count, &rng);
            values = made;
        }
        st = wgml_tensor_from_data(ctx, p->ndim, p->shape, values, (size_t)count, &out->params[i]);
        free(made);
    }
    if (st) wgml_model_free(out);
    return st;
}

/* ---------------------------------------------------------------- metadata */

void wgml_meta_write(const wgml_meta_field *fields, int n, void *const *bases, char (*text)[WGML_META_TEXT], const char **keys,
                     const char **vals, int *count)
{
    for (int k = 0; k < n; k++) {
        const wgml_meta_field *f = &fields[k];
        const char *p = (const char *)bases[f->base] + f->offset;
        char *t = text[k];
        switch (f->kind) {
        case WGML_META_I64: snprintf(t, WGML_META_TEXT, "%" PRId64, *(const int64_t *)p); break;
        case WGML_META_I32: snprintf(t, WGML_META_TEXT, "%d", *(const int *)p); break;
        case WGML_META_U64: snprintf(t, WGML_META_TEXT, "%" PRIu64, *(const uint64_t *)p); break;
        case WGML_META_F32: wgml_float_text(t, WGML_META_TEXT, *(const float *)p); break;
        }
        keys[*count] = f->key, vals[*count] = t, ++*count;
    }
}

wgml_status wgml_meta_read(wgml_context *ctx, const char *path, const wgml_st_file *file, const wgml_meta_field *fields, int n,
                           void *const *bases, unsigned *stored)
{
    char err[512], what[96];
    for (int k = 0; k < n; k++) {
        const wgml_meta_field *f = &fields[k];
        const char *text = wgml_st_meta(file, f->key);
        if (!text) {
            if (f->optional) continue;
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata '%s' is missing", path, f->key);
        }
        snprintf(what, sizeof what, "metadata '%s'", f->key);
        char *p = (char *)bases[f->base] + f->offset;
        int64_t v = 0, lo = (int64_t)f->lo, hi = f->hi >= 0x1p63 ? INT64_MAX : (int64_t)f->hi; /* (2^63 is past int64) */
        wgml_status st;
        switch (f->kind) {
        case WGML_META_I64: st = wgml_parse_i64(what, text, lo, hi, (int64_t *)p, err, sizeof err); break;
        case WGML_META_I32:
            st = wgml_parse_i64(what, text, lo, hi, &v, err, sizeof err);
            if (!st) *(int *)p = (int)v; /* the range is within int's */
            break;
        case WGML_META_U64: st = wgml_parse_u64(what, text, (uint64_t *)p, err, sizeof err); break;
        default: st = wgml_parse_f32(what, text, (float)f->lo, (float)f->hi, (float *)p, err, sizeof err); break;
        }
        if (st) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: %s", path, err);
        if (stored) *stored |= f->optional;
    }
    return WGML_OK;
}

/* ---------------------------------------------------------------- saving */

/* Host copy of a GPU tensor into a safetensors entry. */
static wgml_status take(wgml_context *ctx, wgml_tensor *t, const char *name, const char *suffix, wgml_st_tensor *e)
{
    snprintf(e->name, sizeof e->name, "%s%s", name, suffix);
    e->ndim = wgml_tensor_ndim(t);
    for (int d = 0; d < e->ndim; d++) e->shape[d] = wgml_tensor_dim(t, d);
    size_t n = (size_t)wgml_tensor_numel(t);
    e->data = malloc((n ? n : 1) * sizeof(float));
    if (!e->data) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "checkpoint: out of host memory for %s", e->name);
    return wgml_tensor_read(t, e->data, n);
}

wgml_status wgml_model_save(const wgml_model *m, const char *path, wgml_optimizer *opt, const int *slot_param,
                            const wgml_st_tensor *extra, int n_extra, const char *const *keys, const char *const *vals,
                            int n_meta)
{
    if (!m || !m->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = m->ctx;
    if (!path || n_extra < 0 || (n_extra && !extra))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint: a path must be given");
    int np = m->n, count = 0;
    wgml_st_tensor *t = calloc((size_t)(np * 3 + n_extra + 1), sizeof *t);
    if (!t) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "checkpoint: out of host memory");
    wgml_status st = WGML_OK;
    for (int i = 0; i < np && !st; i++) st = take(ctx, m->params[i], m->spec[i].name, "", &t[count++]);
    for (int s = 0; opt && s < np && !st; s++) {
        wgml_tensor *mv[2] = {NULL, NULL};
        const char *name = m->spec[slot_param ? slot_param[s] : s].name;
        st = wgml_optimizer_state(opt, s, &mv[0], &mv[1]);
        for (int k = 0; k < 2 && !st; k++) st = take(ctx, mv[k], name, moment_suffix[k], &t[count++]);
        wgml_tensor_free(mv[0]), wgml_tensor_free(mv[1]);
    }
    if (!st) {
        char err[512];
        /* the extra tensors are the caller's: written from its data, not freed here */
        for (int e = 0; e < n_extra; e++) t[count + e] = extra[e];
        st = wgml_safetensors_write(path, t, count + n_extra, keys, vals, n_meta, err, sizeof err);
        if (st) wgml_fail(ctx, st, "%s", err);
    }
    for (int i = 0; i < count; i++) free(t[i].data);
    free(t);
    return st;
}

/* ---------------------------------------------------------------- reading */

wgml_status wgml_check_moment(wgml_context *ctx, const char *path, const wgml_st_tensor *t, int second)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    for (int64_t e = 0; e < n; e++) {
        float x = t->data[e];
        if (!isfinite(x) || (second && x < 0))
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: optimiser moment '%s' holds %g at element %lld (%s): the file is corrupt", path,
                             t->name, (double)x, (long long)e, second ? "a second moment is finite and never negative" : "a moment is finite");
    }
    return WGML_OK;
}

/* The tensor named `name`, if there, must be F32 with exactly this shape. */
static wgml_status check_shape(wgml_context *ctx, const char *path, const wgml_st_tensor *t, const char *name,
                               const wgml_param_spec *p, const char *why)
{
    if (t->dtype != WGML_F32) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is I32; a checkpoint holds floats", path, name);
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (same) return WGML_OK;
    char got[96], want[96];
    wgml_format_shape(got, sizeof got, t->ndim, t->shape);
    wgml_format_shape(want, sizeof want, p->ndim, p->shape);
    return wgml_fail(ctx, WGML_ERROR_SHAPE, "%s: tensor '%s' has shape %s, want %s (%s)", path, name, got, want, why);
}

/* Is `name` one of the table's parameters, their moments, or an extra? */
static int known_name(const char *name, int n, const wgml_param_spec *spec, const char *const *extra, int n_extra)
{
    for (int e = 0; e < n_extra; e++)
        if (strcmp(name, extra[e]) == 0) return 1;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(spec[i].name);
        if (strncmp(name, spec[i].name, len) == 0 &&
            (name[len] == '\0' || strcmp(name + len, moment_suffix[0]) == 0 || strcmp(name + len, moment_suffix[1]) == 0))
            return 1;
    }
    return 0;
}

wgml_status wgml_model_read_file(wgml_context *ctx, const char *path, wgml_st_file *f)
{
    char err[512];
    wgml_status st = wgml_safetensors_read(path, f, err, sizeof err);
    return st ? wgml_fail(ctx, st, "%s", err) : WGML_OK;
}

wgml_status wgml_model_check_file(wgml_context *ctx, const char *path, const wgml_st_file *f, int n, const wgml_param_spec *spec,
                                  const char *why, const char *const *extra, int n_extra, int *has_moments)
{
    char full[WGML_PARAM_NAME + 4], missing[WGML_PARAM_NAME + 4] = "", of_param[WGML_PARAM_NAME + 16];
    int moments = 0;
    for (int i = 0; i < n; i++) {
        const wgml_param_spec *p = &spec[i];
        const wgml_st_tensor *t = wgml_st_find(f, p->name);
        if (!t) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is missing", path, p->name);
        wgml_status st = check_shape(ctx, path, t, p->name, p, why);
        /* a weight that is not finite (a run that diverged) cannot be trained or sampled from */
        for (int64_t e = 0, count = wgml_param_numel(p); !st && e < count; e++)
            if (!isfinite(t->data[e]))
                st = wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' holds %g at element %lld", path, p->name, (double)t->data[e],
                               (long long)e);
        snprintf(of_param, sizeof of_param, "the shape of %s", p->name);
        for (int k = 0; k < 2 && !st; k++) {
            snprintf(full, sizeof full, "%s%s", p->name, moment_suffix[k]);
            const wgml_st_tensor *mt = wgml_st_find(f, full);
            if (!mt) {
                if (!missing[0]) snprintf(missing, sizeof missing, "%s", full);
                continue;
            }
            moments++;
            st = check_shape(ctx, path, mt, full, p, of_param);
            if (!st) st = wgml_check_moment(ctx, path, mt, k);
        }
        if (st) return st;
    }
    if (moments && moments != 2 * n)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is missing (the file has %d of the %d optimiser moments)", path,
                         missing, moments, 2 * n);
    *has_moments = moments > 0;
    /* each tensor checked above was found once by name; anything else is not the model's */
    for (int t = 0; t < f->count; t++)
        if (!known_name(f->tensors[t].name, n, spec, extra, n_extra))
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: unexpected tensor '%s' (the model's are %s..%s, their moments%s%s)", path,
                             f->tensors[t].name, spec[0].name, spec[n - 1].name, n_extra ? " and " : "", n_extra ? extra[0] : "");
    return WGML_OK;
}

wgml_status wgml_model_from_file(wgml_context *ctx, const wgml_st_file *f, int n, const wgml_param_spec *spec, wgml_model *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    const float **data = calloc((size_t)(n > 0 ? n : 1), sizeof *data);
    if (!data) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "checkpoint: out of host memory");
    wgml_status st = WGML_OK;
    for (int i = 0; i < n && !st; i++) {
        const wgml_st_tensor *t = wgml_st_find(f, spec[i].name);
        if (!t) st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint: tensor '%s' is missing (the file was not checked)", spec[i].name);
        else data[i] = t->data;
    }
    if (!st) st = wgml_model_create(ctx, n, spec, data, 0, out);
    free(data);
    return st;
}

wgml_status wgml_model_restore_optimizer(wgml_context *ctx, const wgml_st_file *f, int has_moments, int n,
                                         const wgml_param_spec *spec, const int *slot_param, wgml_optimizer *opt, int64_t step)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!f || !opt || n < 1 || !spec)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint: a checkpoint that was read and an optimizer must be given");
    if (!has_moments)
        return wgml_fail(ctx, WGML_ERROR_FORMAT,
                         "the checkpoint has no optimiser moments (%s.m, %s.v, ...): it holds weights only and cannot resume training",
                         spec[0].name, spec[0].name);
    wgml_status st = WGML_OK;
    char full[WGML_PARAM_NAME + 4];
    for (int s = 0; s < n && !st; s++) {
        wgml_tensor *slot[2] = {NULL, NULL};
        const char *name = spec[slot_param ? slot_param[s] : s].name;
        st = wgml_optimizer_state(opt, s, &slot[0], &slot[1]);
        for (int k = 0; k < 2 && !st; k++) {
            snprintf(full, sizeof full, "%s%s", name, moment_suffix[k]);
            const wgml_st_tensor *t = wgml_st_find(f, full);
            /* checked against the table when read; checked here against the optimiser's own
               slot too, so a model of another shape cannot be written past */
            int same = t && t->ndim == wgml_tensor_ndim(slot[k]);
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == wgml_tensor_dim(slot[k], d);
            if (!same) {
                char got[96] = "(missing)", want[96];
                int64_t shape[4] = {0};
                for (int d = 0; d < wgml_tensor_ndim(slot[k]) && d < 4; d++) shape[d] = wgml_tensor_dim(slot[k], d);
                if (t) wgml_format_shape(got, sizeof got, t->ndim, t->shape);
                wgml_format_shape(want, sizeof want, wgml_tensor_ndim(slot[k]), shape);
                st = wgml_fail(ctx, WGML_ERROR_SHAPE, "checkpoint moment '%s' has shape %s, but its optimizer slot has shape %s", full, got,
                               want);
                break;
            }
            st = wgml_tensor_write(slot[k], t->data, (size_t)wgml_tensor_numel(slot[k]));
        }
        wgml_tensor_free(slot[0]), wgml_tensor_free(slot[1]);
    }
    if (!st && wgml_optimizer_set_steps(opt, step))
        st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint: cannot set the optimizer's step to %" PRId64, step);
    return st;
}
