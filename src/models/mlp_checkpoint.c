/* The MLP's checkpoints (see mlp_checkpoint.h) over models/model.h. */
#include "models/mlp_checkpoint.h"

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

static void sizes_text(char *buf, size_t len, int nlayers, const int64_t *sizes)
{
    buf[0] = '\0';
    for (int l = 0; l <= nlayers; l++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%lld", l ? "," : "", (long long)sizes[l]);
    }
}

/* The metadata besides the sizes, in a wgml_checkpoint; the settings may be absent (older
   files lack some or all of them: their bits stay clear in `stored`). */
#define CK(k, m, t, lo, hi, bit) {k, 0, offsetof(wgml_checkpoint, m), WGML_META_##t, lo, hi, bit}
static const wgml_meta_field fields[] = {
    CK("step", step, I64, 0, (double)INT64_MAX, 0),
    CK("epoch", epoch, I32, 0, WGML_CK_MAX_EPOCH, 0),
    CK("seed", settings.seed, U64, 0, 0, WGML_CK_SEED),
    CK("lr", settings.lr, F32, 0, FLT_MAX, WGML_CK_LR),
    CK("weight_decay", settings.weight_decay, F32, 0, FLT_MAX, WGML_CK_WEIGHT_DECAY),
    CK("max_grad_norm", settings.max_grad_norm, F32, 0, FLT_MAX, WGML_CK_MAX_GRAD_NORM),
    CK("batch", settings.batch, I32, 1, WGML_CK_MAX_BATCH, WGML_CK_BATCH),
    CK("ranks", settings.ranks, I32, 1, 1 << 20, 1u << 31), /* absent in older files: 1 */
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

/* ---------------------------------------------------------------- saving */

wgml_status wgml_checkpoint_save(const char *path, wgml_mlp *m, wgml_optimizer *opt, int epoch,
                                 const wgml_train_settings *s)
{
    if (!m || !m->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = m->ctx;
    if (!path || !opt || !s || epoch < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_save: path, optimizer and settings must be given, epoch >= 0");
    wgml_checkpoint ck = {.epoch = epoch, .step = wgml_optimizer_steps(opt), .settings = *s};
    if (ck.settings.ranks < 1) ck.settings.ranks = 1;
    char text[N_FIELDS + 1][WGML_META_TEXT], sizes[160];
    const char *keys[N_FIELDS + 1], *vals[N_FIELDS + 1];
    int nm = 0;
    sizes_text(sizes, sizeof sizes, m->nlayers, m->sizes);
    keys[nm] = "sizes", vals[nm++] = sizes;
    void *bases[1] = {&ck};
    wgml_meta_write(fields, N_FIELDS, bases, text, keys, vals, &nm);
    return wgml_model_save(&m->m, path, opt, NULL, NULL, 0, keys, vals, nm);
}

const wgml_float_setting wgml_float_settings[WGML_FLOAT_SETTINGS] = {
    {"lr", "--lr", WGML_CK_LR, offsetof(wgml_train_settings, lr)},
    {"weight_decay", "--wd", WGML_CK_WEIGHT_DECAY, offsetof(wgml_train_settings, weight_decay)},
    {"max_grad_norm", "--clip", WGML_CK_MAX_GRAD_NORM, offsetof(wgml_train_settings, max_grad_norm)},
};

/* ---------------------------------------------------------------- reading */

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
    ck->settings.ranks = 1;
    void *bases[1] = {ck};
    st = wgml_meta_read(ctx, path, f, fields, N_FIELDS, bases, &ck->stored);
    ck->stored &= ~(1u << 31); /* (ranks: not a setting a resume takes from the file) */
    return st;
}

wgml_status wgml_checkpoint_read(wgml_context *ctx, const char *path, wgml_checkpoint *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !path) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_read: path and out must be given");
    memset(out, 0, sizeof *out);
    wgml_status st = wgml_model_read_file(ctx, path, &out->file);
    if (!st) st = read_metadata(ctx, path, out);
    wgml_param_spec spec[2 * WGML_MLP_MAX_LAYERS];
    if (!st && wgml_mlp_table(out->nlayers, out->sizes, spec))
        st = wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata 'sizes' out of range", path); /* (read_sizes checked them) */
    if (!st) {
        char sizes[160], why[192];
        sizes_text(sizes, sizeof sizes, out->nlayers, out->sizes);
        snprintf(why, sizeof why, "the metadata's sizes %s", sizes);
        st = wgml_model_check_file(ctx, path, &out->file, 2 * out->nlayers, spec, why, NULL, 0, &out->has_moments);
    }
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
    for (int l = 0; l < ck->nlayers; l++) { /* present and shaped: checked when read */
        snprintf(name, sizeof name, "W%d", l);
        W[l] = wgml_st_find(&ck->file, name)->data;
        snprintf(name, sizeof name, "b%d", l);
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
    wgml_param_spec spec[2 * WGML_MLP_MAX_LAYERS];
    if (wgml_mlp_table(ck->nlayers, ck->sizes, spec))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "checkpoint_restore_optimizer: the checkpoint's sizes are out of range");
    return wgml_model_restore_optimizer(ctx, &ck->file, ck->has_moments, 2 * ck->nlayers, spec, NULL, opt, ck->step);
}

void wgml_checkpoint_free(wgml_checkpoint *ck)
{
    if (!ck) return;
    wgml_st_file_free(&ck->file);
    memset(ck, 0, sizeof *ck);
}
