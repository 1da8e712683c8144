/* Training checkpoints (see checkpoint.h). */
#include "train/checkpoint.h"

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "io/loader.h"

static const char *const moment_suffix[2] = {".m", ".v"};

/* Parameter i in wgml_mlp_params order: W0, b0, W1, b1, ... */
static void param_name(char *buf, size_t len, int i, const char *suffix)
{
    snprintf(buf, len, "%s%d%s", i % 2 ? "b" : "W", i / 2, suffix);
}

static int param_shape(const int64_t *sizes, int i, int64_t *shape)
{
    int l = i / 2;
    if (i % 2) {
        shape[0] = sizes[l + 1];
        return 1;
    }
    shape[0] = sizes[l];
    shape[1] = sizes[l + 1];
    return 2;
}

static void sizes_text(char *buf, size_t len, int nlayers, const int64_t *sizes)
{
    buf[0] = '\0';
    for (int l = 0; l <= nlayers; l++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%lld", l ? "," : "", (long long)sizes[l]);
    }
}

/* ---------------------------------------------------------------- saving */

wgml_status wgml_checkpoint_save(const char *path, wgml_mlp *m, wgml_optimizer *opt, int epoch,
                                 const wgml_train_settings *s)
{
    if (!m || !m->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = m->ctx;
    if (!path || !opt || !s || epoch < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_save: path, optimizer and settings must be given, epoch >= 0");
    wgml_tensor *params[2 * WGML_MLP_MAX_LAYERS];
    int np = wgml_mlp_params(m, params);
    wgml_st_tensor *t = calloc((size_t)np * 3, sizeof *t);
    if (!t) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "checkpoint_save: out of host memory");
    int count = 0;
    wgml_status st = WGML_OK;
    for (int i = 0; i < np && !st; i++) {
        wgml_tensor *src[3] = {params[i], NULL, NULL};
        st = wgml_optimizer_state(opt, i, &src[1], &src[2]);
        const char *suffix[3] = {"", moment_suffix[0], moment_suffix[1]};
        for (int k = 0; k < 3 && !st; k++) {
            wgml_st_tensor *e = &t[count++];
            param_name(e->name, sizeof e->name, i, suffix[k]);
            e->ndim = wgml_tensor_ndim(src[k]);
            for (int d = 0; d < e->ndim; d++) e->shape[d] = wgml_tensor_dim(src[k], d);
            size_t n = (size_t)wgml_tensor_numel(src[k]);
            e->data = malloc((n ? n : 1) * sizeof(float));
            if (!e->data) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "checkpoint_save: out of host memory for %s", e->name);
            else st = wgml_tensor_read(src[k], e->data, n);
        }
        wgml_tensor_free(src[1]);
        wgml_tensor_free(src[2]);
    }

    char step[32], ep[32], sizes[160], seed[32], lr[32], wd[32], clip[32], batch[32], ranks[32];
    snprintf(step, sizeof step, "%" PRId64, wgml_optimizer_steps(opt));
    snprintf(ep, sizeof ep, "%d", epoch);
    sizes_text(sizes, sizeof sizes, m->nlayers, m->sizes);
    snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
    wgml_float_text(lr, sizeof lr, s->lr);
    wgml_float_text(wd, sizeof wd, s->weight_decay);
    wgml_float_text(clip, sizeof clip, s->max_grad_norm);
    snprintf(batch, sizeof batch, "%d", s->batch);
    snprintf(ranks, sizeof ranks, "%d", s->ranks > 0 ? s->ranks : 1);
    const char *keys[] = {"step", "epoch", "sizes", "seed", "lr", "weight_decay", "max_grad_norm", "batch", "ranks"};
    const char *vals[] = {step, ep, sizes, seed, lr, wd, clip, batch, ranks};
    if (!st) {
        char err[512];
        st = wgml_safetensors_write(path, t, count, keys, vals, (int)(sizeof keys / sizeof keys[0]), err, sizeof err);
        if (st) wgml_fail(ctx, st, "%s", err);
    }
    for (int i = 0; i < count; i++) free(t[i].data);
    free(t);
    return st;
}

const wgml_float_setting wgml_float_settings[WGML_FLOAT_SETTINGS] = {
    {"lr", "--lr", WGML_CK_LR, offsetof(wgml_train_settings, lr)},
    {"weight_decay", "--wd", WGML_CK_WEIGHT_DECAY, offsetof(wgml_train_settings, weight_decay)},
    {"max_grad_norm", "--clip", WGML_CK_MAX_GRAD_NORM, offsetof(wgml_train_settings, max_grad_norm)},
};

/* ---------------------------------------------------------------- reading */

static wgml_status meta_error(wgml_context *ctx, const char *path, wgml_status st, const char *err)
{
    return wgml_fail(ctx, st, "%s: %s", path, err);
}

/* "784,256,10": 2 to WGML_MLP_MAX_LAYERS + 1 widths, each in 1..WGML_CK_MAX_WIDTH. */
static wgml_status read_sizes(wgml_context *ctx, const char *path, const char *text, wgml_checkpoint *ck)
{
    char err[512], what[64], item[WGML_ST_MAX_META_VALUE + 1];
    int n = 0;
    const char *s = text;
    for (;;) {
        size_t len = strcspn(s, ",");
        if (n == WGML_MLP_MAX_LAYERS + 1)
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata 'sizes' is '%s': more than %d layers", path, text,
                             WGML_MLP_MAX_LAYERS);
        memcpy(item, s, len); /* len <= strlen(text) <= WGML_ST_MAX_META_VALUE */
        item[len] = '\0';
        snprintf(what, sizeof what, "metadata 'sizes' entry %d", n);
        int64_t v;
        if (wgml_parse_i64(what, item, 1, WGML_CK_MAX_WIDTH, &v, err, sizeof err))
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: %s (sizes '%s')", path, err, text);
        ck->sizes[n++] = v;
        if (s[len] == '\0') break;
        s += len + 1;
    }
    if (n < 2) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata 'sizes' is '%s': want at least an input and an output width", path, text);
    ck->nlayers = n - 1;
    return WGML_OK;
}

static wgml_status read_metadata(wgml_context *ctx, const char *path, wgml_checkpoint *ck)
{
    const wgml_st_file *f = &ck->file;
    const char *sizes = wgml_st_meta(f, "sizes"), *epoch = wgml_st_meta(f, "epoch"), *step = wgml_st_meta(f, "step");
    if (!sizes || !epoch || !step)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: not a wgml checkpoint: the metadata has no '%s'", path,
                         !sizes ? "sizes" : !epoch ? "epoch" : "step");
    wgml_status st = read_sizes(ctx, path, sizes, ck);
    if (st) return st;
    char err[512];
    int64_t v;
    if (wgml_parse_i64("metadata 'epoch'", epoch, 0, WGML_CK_MAX_EPOCH, &v, err, sizeof err))
        return meta_error(ctx, path, WGML_ERROR_FORMAT, err);
    ck->epoch = (int)v;
    if (wgml_parse_i64("metadata 'step'", step, 0, INT64_MAX, &ck->step, err, sizeof err))
        return meta_error(ctx, path, WGML_ERROR_FORMAT, err);

    /* The settings are optional: older checkpoints lack some or all of them. */
    wgml_train_settings *s = &ck->settings;
    const char *text;
    if ((text = wgml_st_meta(f, "seed"))) {
        if (wgml_parse_u64("metadata 'seed'", text, &s->seed, err, sizeof err)) return meta_error(ctx, path, WGML_ERROR_FORMAT, err);
        ck->stored |= WGML_CK_SEED;
    }
    for (int i = 0; i < WGML_FLOAT_SETTINGS; i++) {
        const wgml_float_setting *fs = &wgml_float_settings[i];
        if (!(text = wgml_st_meta(f, fs->key))) continue;
        char what[64];
        snprintf(what, sizeof what, "metadata '%s'", fs->key);
        if (wgml_parse_f32(what, text, 0.0f, FLT_MAX, wgml_setting_f32(s, fs), err, sizeof err))
            return meta_error(ctx, path, WGML_ERROR_FORMAT, err);
        ck->stored |= fs->bit;
    }
    if ((text = wgml_st_meta(f, "batch"))) {
        if (wgml_parse_i64("metadata 'batch'", text, 1, WGML_CK_MAX_BATCH, &v, err, sizeof err))
            return meta_error(ctx, path, WGML_ERROR_FORMAT, err);
        s->batch = (int)v;
        ck->stored |= WGML_CK_BATCH;
    }
    s->ranks = 1;
    if ((text = wgml_st_meta(f, "ranks"))) {
        if (wgml_parse_i64("metadata 'ranks'", text, 1, 1 << 20, &v, err, sizeof err))
            return meta_error(ctx, path, WGML_ERROR_FORMAT, err);
        s->ranks = (int)v;
    }
    return WGML_OK;
}

/* The tensor named `name` must be there (when `required`) with exactly this shape. */
static wgml_status check_tensor(wgml_context *ctx, const char *path, const wgml_checkpoint *ck, const char *name, int ndim,
                                const int64_t *shape, const char *why, int required, int *found)
{
    const wgml_st_tensor *t = wgml_st_find(&ck->file, name);
    *found = t != NULL;
    if (!t)
        return required ? wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is missing", path, name) : WGML_OK;
    if (t->dtype != WGML_F32) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is I32; a checkpoint holds floats", path, name);
    int same = t->ndim == ndim;
    for (int d = 0; d < ndim && same; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char got[96], want[96];
        wgml_format_shape(got, sizeof got, t->ndim, t->shape);
        wgml_format_shape(want, sizeof want, ndim, shape);
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "%s: tensor '%s' has shape %s, want %s (%s)", path, name, got, want, why);
    }
    return WGML_OK;
}

static wgml_status check_tensors(wgml_context *ctx, const char *path, wgml_checkpoint *ck)
{
    char sizes[160], why[256], name[WGML_ST_MAX_NAME + 1];
    sizes_text(sizes, sizeof sizes, ck->nlayers, ck->sizes);
    int np = 2 * ck->nlayers, moments = 0, found;
    char missing[WGML_ST_MAX_NAME + 1] = "";
    for (int i = 0; i < np; i++) {
        int64_t shape[2];
        int ndim = param_shape(ck->sizes, i, shape);
        param_name(name, sizeof name, i, "");
        snprintf(why, sizeof why, "the metadata's sizes %s", sizes);
        wgml_status st = check_tensor(ctx, path, ck, name, ndim, shape, why, 1, &found);
        if (st) return st;
        char param[WGML_ST_MAX_NAME + 1];
        snprintf(param, sizeof param, "%s", name);
        for (int k = 0; k < 2; k++) {
            param_name(name, sizeof name, i, moment_suffix[k]);
            snprintf(why, sizeof why, "the shape of %s", param);
            st = check_tensor(ctx, path, ck, name, ndim, shape, why, 0, &found);
            if (!st && found) st = wgml_check_moment(ctx, path, wgml_st_find(&ck->file, name), k);
            if (st) return st;
            moments += found;
            if (!found && !missing[0]) snprintf(missing, sizeof missing, "%s", name);
        }
    }
    if (moments != 0 && moments != 2 * np)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is missing (the file has %d of the %d optimiser moments)", path,
                         missing, moments, 2 * np);
    ck->has_moments = moments != 0;
    /* Every tensor checked above was found once by name; anything else is not ours. */
    int expected = np + moments;
    if (ck->file.count != expected) {
        for (int t = 0; t < ck->file.count; t++) {
            const char *n = ck->file.tensors[t].name;
            int known = 0;
            for (int i = 0; i < np && !known; i++)
                for (int k = 0; k < 3 && !known; k++) {
                    param_name(name, sizeof name, i, k ? moment_suffix[k - 1] : "");
                    known = strcmp(n, name) == 0;
                }
            if (!known)
                return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: unexpected tensor '%s' (sizes %s give W0..b%d and their moments)", path,
                                 n, sizes, ck->nlayers - 1);
        }
    }
    return WGML_OK;
}

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

wgml_status wgml_checkpoint_read(wgml_context *ctx, const char *path, wgml_checkpoint *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !path) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_read: path and out must be given");
    memset(out, 0, sizeof *out);
    char err[512];
    wgml_status st = wgml_safetensors_read(path, &out->file, err, sizeof err);
    if (st) return wgml_fail(ctx, st, "%s", err);
    st = read_metadata(ctx, path, out);
    if (!st) st = check_tensors(ctx, path, out);
    if (st) wgml_checkpoint_free(out);
    return st;
}

wgml_status wgml_checkpoint_mlp(wgml_context *ctx, const wgml_checkpoint *ck, wgml_mlp *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!ck || !out || ck->nlayers < 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_mlp: a checkpoint that was read and out must be given");
    const float *W[WGML_MLP_MAX_LAYERS], *b[WGML_MLP_MAX_LAYERS];
    char name[32];
    for (int l = 0; l < ck->nlayers; l++) {
        param_name(name, sizeof name, 2 * l, "");
        W[l] = wgml_st_find(&ck->file, name)->data; /* present and shaped: checked when read */
        param_name(name, sizeof name, 2 * l + 1, "");
        b[l] = wgml_st_find(&ck->file, name)->data;
    }
    wgml_status st = wgml_mlp_create(ctx, ck->nlayers, ck->sizes, 0, W, b, out);
    /* wgml_mlp_create leaves no message for arguments it refuses. */
    if (st && !wgml_error_message(ctx)[0]) wgml_fail(ctx, st, "checkpoint_mlp: cannot build the model");
    return st;
}

wgml_status wgml_checkpoint_restore_optimizer(wgml_context *ctx, const wgml_checkpoint *ck, wgml_optimizer *opt)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!ck || !opt || ck->nlayers < 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_restore_optimizer: a checkpoint that was read and an optimizer must be given");
    if (!ck->has_moments)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "the checkpoint has no optimiser moments (W0.m, W0.v, ...): it holds weights only and cannot resume training");
    wgml_status st = WGML_OK;
    for (int i = 0; i < 2 * ck->nlayers && !st; i++) {
        wgml_tensor *slot[2] = {NULL, NULL};
        st = wgml_optimizer_state(opt, i, &slot[0], &slot[1]);
        for (int k = 0; k < 2 && !st; k++) {
            char name[32];
            param_name(name, sizeof name, i, moment_suffix[k]);
            const wgml_st_tensor *t = wgml_st_find(&ck->file, name);
            /* Checked against the sizes when read; checked here against the optimiser's own
               slot too, so a model built from other sizes cannot be written past. */
            int same = t && t->ndim == wgml_tensor_ndim(slot[k]);
            for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == wgml_tensor_dim(slot[k], d);
            if (!same) {
                char got[96] = "(missing)", want[96];
                int64_t shape[4] = {0};
                for (int d = 0; d < wgml_tensor_ndim(slot[k]) && d < 4; d++) shape[d] = wgml_tensor_dim(slot[k], d);
                if (t) wgml_format_shape(got, sizeof got, t->ndim, t->shape);
                wgml_format_shape(want, sizeof want, wgml_tensor_ndim(slot[k]), shape);
                st = wgml_fail(ctx, WGML_ERROR_SHAPE, "checkpoint moment '%s' has shape %s, but its optimizer slot has shape %s", name, got, want);
                break;
            }
            st = wgml_tensor_write(slot[k], t->data, (size_t)wgml_tensor_numel(slot[k]));
        }
        wgml_tensor_free(slot[0]);
        wgml_tensor_free(slot[1]);
    }
    if (!st && wgml_optimizer_set_steps(opt, ck->step))
        st = wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_restore_optimizer: cannot set the step to %" PRId64, ck->step);
    return st;
}

void wgml_checkpoint_free(wgml_checkpoint *ck)
{
    if (!ck) return;
    wgml_st_file_free(&ck->file);
    memset(ck, 0, sizeof *ck);
}
