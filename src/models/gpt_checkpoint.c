/* GPT checkpoints: see gpt_checkpoint.h for the file's contents. */
#include "models/gpt_checkpoint.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "io/loader.h"
#include "train/checkpoint.h"

#define FORMAT "wgml-gpt-1"

/* The numeric metadata: key, where it lives (in the config or the run), its kind and range.
   Saving and reading both walk this table. */
typedef enum { I64, U64, F32 } kind;
typedef struct field {
    const char *key;
    int in_run; /* 0: wgml_gpt_config, 1: wgml_gpt_run */
    size_t offset;
    kind kind;
    double lo, hi;
} field;

#define CFG(k, m, t, lo, hi) {k, 0, offsetof(wgml_gpt_config, m), t, lo, hi}
#define RUN(k, m, t, lo, hi) {k, 1, offsetof(wgml_gpt_run, m), t, lo, hi}
static const field fields[] = {
    CFG("vocab", vocab, I64, 1, 256),
    CFG("block", block, I64, 1, 1 << 16),
    CFG("layers", layers, I64, 1, WGML_GPT_MAX_LAYERS),
    CFG("heads", heads, I64, 1, 1 << 16),
    CFG("kv_heads", kv_heads, I64, 1, 1 << 16),
    CFG("width", width, I64, 1, 1 << 16),
    CFG("ffn", ffn, I64, 1, 1 << 18),
    CFG("rope_base", rope_base, F32, 1, FLT_MAX),
    CFG("norm_eps", norm_eps, F32, 0, 1),
    CFG("dropout", dropout, F32, 0, 1),
    RUN("seed", seed, U64, 0, 0),
    RUN("lr", lr, F32, FLT_MIN, 10),
    RUN("min_lr_ratio", min_lr_ratio, F32, 0, 1),
    RUN("warmup", warmup, I64, 0, 1e15),
    RUN("total_steps", total_steps, I64, 0, 1e15),
    RUN("weight_decay", weight_decay, F32, 0, FLT_MAX),
    RUN("max_grad_norm", max_grad_norm, F32, 0, FLT_MAX),
    RUN("beta1", beta1, F32, 0, 1),
    RUN("beta2", beta2, F32, 0, 1),
    RUN("batch", batch, I64, 1, 1 << 24),
    RUN("eval_every", eval_every, I64, 0, 1e15),
    RUN("eval_batches", eval_batches, I64, 1, 1 << 20),
    RUN("rng_seed", rng_seed, U64, 0, 0),
    RUN("rng_offset", rng_offset, U64, 0, 0),
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))
#define N_META (N_FIELDS + 8) /* + format, arch, step, data, ranks, head_dim, qk_norm, and room */

static void *field_ptr(const field *f, wgml_gpt_config *c, wgml_gpt_run *r)
{
    return (char *)(f->in_run ? (void *)r : (void *)c) + f->offset;
}

/* Host copy of a GPU tensor into a safetensors entry. */
static wgml_status take(wgml_context *ctx, wgml_tensor *t, const char *name, const char *suffix, wgml_st_tensor *e)
{
    snprintf(e->name, sizeof e->name, "%s%s", name, suffix);
    e->ndim = wgml_tensor_ndim(t);
    for (int d = 0; d < e->ndim; d++) e->shape[d] = wgml_tensor_dim(t, d);
    size_t n = (size_t)wgml_tensor_numel(t);
    e->data = malloc((n ? n : 1) * sizeof(float));
    if (!e->data) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory for %s", e->name);
    return wgml_tensor_read(t, e->data, n);
}

wgml_status wgml_gpt_checkpoint_save(const char *path, wgml_gpt *g, wgml_optimizer *opt, int64_t step,
                                     const wgml_gpt_run *run, const uint8_t *vocab, int vocab_size)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (!path || !run || !vocab || vocab_size != g->cfg.vocab || step < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: path, run settings and a vocabulary of %lld bytes must be given",
                         (long long)g->cfg.vocab);
    int np = g->n_params, count = 0;
    wgml_st_tensor *t = calloc((size_t)np * 3 + 1, sizeof *t);
    if (!t) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory");
    wgml_status st = WGML_OK;
    char name[WGML_GPT_NAME];
    int nd;
    int64_t shape[2];
    for (int i = 0; i < np && !st; i++) {
        wgml_gpt_param_info(&g->cfg, i, name, &nd, shape);
        st = take(ctx, g->params[i], name, "", &t[count++]);
    }
    for (int s = 0; opt && s < np && !st; s++) {
        wgml_tensor *m = NULL, *v = NULL;
        wgml_gpt_param_info(&g->cfg, wgml_gpt_optimizer_param(g, s), name, &nd, shape);
        st = wgml_optimizer_state(opt, s, &m, &v);
        if (!st) st = take(ctx, m, name, ".m", &t[count++]);
        if (!st) st = take(ctx, v, name, ".v", &t[count++]);
        wgml_tensor_free(m), wgml_tensor_free(v);
    }
    if (!st) {
        wgml_st_tensor *e = &t[count++];
        snprintf(e->name, sizeof e->name, "vocab");
        e->ndim = 1, e->shape[0] = vocab_size;
        e->data = malloc((size_t)vocab_size * sizeof(float));
        if (!e->data) st = wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory");
        for (int k = 0; e->data && k < vocab_size; k++) e->data[k] = (float)vocab[k];
    }

    char text[N_META][64];
    const char *keys[N_META], *vals[N_META];
    int nm = 0;
    wgml_gpt_config cfg = g->cfg;
    wgml_gpt_run r = *run;
    keys[nm] = "format", vals[nm++] = FORMAT;
    keys[nm] = "arch", vals[nm++] = cfg.arch == WGML_GPT_LLAMA ? "llama" : "gpt2";
    snprintf(text[nm], sizeof text[nm], "%" PRId64, step);
    keys[nm] = "step", vals[nm] = text[nm], nm++;
    keys[nm] = "data", vals[nm++] = r.data;
    snprintf(text[nm], sizeof text[nm], "%" PRId64, r.ranks > 0 ? r.ranks : 1);
    keys[nm] = "ranks", vals[nm] = text[nm], nm++;
    /* written where they differ from the defaults only, so older readers still read the rest */
    if (cfg.head_dim != cfg.width / cfg.heads || cfg.width % cfg.heads) {
        snprintf(text[nm], sizeof text[nm], "%" PRId64, cfg.head_dim);
        keys[nm] = "head_dim", vals[nm] = text[nm], nm++;
    }
    if (cfg.qk_norm) keys[nm] = "qk_norm", vals[nm++] = "1";
    for (int f = 0; f < N_FIELDS; f++, nm++) {
        void *p = field_ptr(&fields[f], &cfg, &r);
        if (fields[f].kind == I64) snprintf(text[nm], sizeof text[nm], "%" PRId64, *(int64_t *)p);
        else if (fields[f].kind == U64) snprintf(text[nm], sizeof text[nm], "%" PRIu64, *(uint64_t *)p);
        else wgml_float_text(text[nm], sizeof text[nm], *(float *)p);
        keys[nm] = fields[f].key, vals[nm] = text[nm];
    }
    if (!st) {
        char err[512];
        st = wgml_safetensors_write(path, t, count, keys, vals, nm, err, sizeof err);
        if (st) wgml_fail(ctx, st, "%s", err);
    }
    for (int i = 0; i < count; i++) free(t[i].data);
    free(t);
    return st;
}

void wgml_gpt_checkpoint_free(wgml_gpt_checkpoint *ck)
{
    if (!ck) return;
    wgml_st_file_free(&ck->file);
    memset(ck, 0, sizeof *ck);
}

static wgml_status read_metadata(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *ck)
{
    char err[384], what[96];
    const char *text = wgml_st_meta(&ck->file, "format");
    if (!text || strcmp(text, FORMAT) != 0)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: not a wgml GPT checkpoint (metadata 'format' is %s%s%s, want \"%s\")", path,
                         text ? "\"" : "", text ? text : "missing", text ? "\"" : "", FORMAT);
    text = wgml_st_meta(&ck->file, "arch");
    if (!text || (strcmp(text, "gpt2") && strcmp(text, "llama")))
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata 'arch' is %s, want gpt2 or llama", path, text ? text : "missing");
    wgml_gpt_config c = {.arch = strcmp(text, "llama") == 0 ? WGML_GPT_LLAMA : WGML_GPT_GPT2};
    wgml_gpt_run r = {0};
    for (int f = 0; f < N_FIELDS; f++) {
        const field *fd = &fields[f];
        text = wgml_st_meta(&ck->file, fd->key);
        if (!text) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata '%s' is missing", path, fd->key);
        snprintf(what, sizeof what, "%s: metadata '%s'", path, fd->key);
        void *p = field_ptr(fd, &c, &r);
        wgml_status st = fd->kind == I64   ? wgml_parse_i64(what, text, (int64_t)fd->lo, (int64_t)fd->hi, p, err, sizeof err)
                         : fd->kind == U64 ? wgml_parse_u64(what, text, p, err, sizeof err)
                                           : wgml_parse_f32(what, text, (float)fd->lo, (float)fd->hi, p, err, sizeof err);
        if (st) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    }
    text = wgml_st_meta(&ck->file, "step");
    snprintf(what, sizeof what, "%s: metadata 'step'", path);
    if (!text) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s is missing", what);
    if (wgml_parse_i64(what, text, 0, INT64_MAX, &ck->step, err, sizeof err)) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    text = wgml_st_meta(&ck->file, "data");
    snprintf(r.data, sizeof r.data, "%s", text ? text : "");
    r.ranks = 1;
    snprintf(what, sizeof what, "%s: metadata 'ranks'", path);
    if ((text = wgml_st_meta(&ck->file, "ranks")) && wgml_parse_i64(what, text, 1, 1 << 20, &r.ranks, err, sizeof err))
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    /* optional (older files lack them: the defaults) */
    snprintf(what, sizeof what, "%s: metadata 'head_dim'", path);
    if ((text = wgml_st_meta(&ck->file, "head_dim")) && wgml_parse_i64(what, text, 1, 128, &c.head_dim, err, sizeof err))
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    snprintf(what, sizeof what, "%s: metadata 'qk_norm'", path);
    if ((text = wgml_st_meta(&ck->file, "qk_norm")) && wgml_parse_i64(what, text, 0, 1, &c.qk_norm, err, sizeof err))
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    if (wgml_gpt_config_resolve(&c, &ck->cfg, err, sizeof err)) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: %s", path, err);
    ck->run = r;
    return WGML_OK;
}

/* Present with exactly this shape (rows, and cols for 2-D). */
static wgml_status check_shape(wgml_context *ctx, const char *path, const wgml_st_tensor *t, const char *name, int nd,
                               const int64_t *shape)
{
    if (!t) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is missing", path, name);
    if (t->dtype != WGML_F32) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' is I32; a GPT checkpoint holds floats", path, name);
    int same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = t->shape[d] == shape[d];
    if (same) return WGML_OK;
    char got[96], want[96];
    wgml_format_shape(got, sizeof got, t->ndim, t->shape);
    wgml_format_shape(want, sizeof want, nd, shape);
    return wgml_fail(ctx, WGML_ERROR_SHAPE, "%s: tensor '%s' has shape %s, want %s (from the metadata's config)", path, name, got, want);
}

static wgml_status check_tensors(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *ck)
{
    const wgml_gpt_config *c = &ck->cfg;
    int np = wgml_gpt_param_count(c), moments = 0;
    char name[WGML_GPT_NAME], full[WGML_GPT_NAME + 4];
    int nd;
    int64_t shape[2];
    for (int i = 0; i < np; i++) {
        wgml_gpt_param_info(c, i, name, &nd, shape);
        const wgml_st_tensor *pt = wgml_st_find(&ck->file, name);
        wgml_status st = check_shape(ctx, path, pt, name, nd, shape);
        /* a weight that is not finite (a run that diverged) cannot be trained or sampled from */
        int64_t n = shape[0] * (nd == 2 ? shape[1] : 1);
        for (int64_t e = 0; !st && e < n; e++)
            if (!isfinite(pt->data[e]))
                st = wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' holds %g at element %lld", path, name, (double)pt->data[e],
                               (long long)e);
        for (int k = 0; !st && k < 2; k++) {
            snprintf(full, sizeof full, "%s%s", name, k ? ".v" : ".m");
            const wgml_st_tensor *t = wgml_st_find(&ck->file, full);
            if (t) st = check_shape(ctx, path, t, full, nd, shape), moments++;
            if (t && !st) st = wgml_check_moment(ctx, path, t, k);
        }
        if (st) return st;
    }
    if (moments && moments != 2 * np)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: the file has %d of the %d optimiser moments", path, moments, 2 * np);
    ck->has_moments = moments > 0;
    const wgml_st_tensor *v = wgml_st_find(&ck->file, "vocab");
    int64_t vs = c->vocab;
    wgml_status st = check_shape(ctx, path, v, "vocab", 1, &vs);
    if (st) return st;
    for (int k = 0; k < vs; k++) {
        float b = v->data[k];
        if (!(b >= 0.0f && b <= 255.0f && b == (float)(int)b) || (k > 0 && !(b > v->data[k - 1])))
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: vocab[%d] = %g; the vocabulary is increasing bytes 0..255", path, k, (double)b);
        ck->vocab[k] = (uint8_t)b;
    }
    ck->vocab_size = (int)vs;
    if (ck->file.count != np + moments + 1)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: %d tensors, but the config gives %d parameters, %d moments and the vocabulary", path,
                         ck->file.count, np, moments);
    return WGML_OK;
}

wgml_status wgml_gpt_checkpoint_read(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !path) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: path and out must be given");
    memset(out, 0, sizeof *out);
    char err[512];
    wgml_status st = wgml_safetensors_read(path, &out->file, err, sizeof err);
    if (st) return wgml_fail(ctx, st, "%s", err);
    st = read_metadata(ctx, path, out);
    if (!st) st = check_tensors(ctx, path, out);
    if (st) wgml_gpt_checkpoint_free(out);
    return st;
}

wgml_status wgml_gpt_checkpoint_model(wgml_context *ctx, const wgml_gpt_checkpoint *ck, wgml_gpt *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!ck || !out || !ck->file.count)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: a checkpoint that was read and out must be given");
    int np = wgml_gpt_param_count(&ck->cfg);
    const float **data = calloc((size_t)np, sizeof *data);
    if (!data) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory");
    char name[WGML_GPT_NAME];
    int nd;
    int64_t shape[2];
    for (int i = 0; i < np; i++) {
        wgml_gpt_param_info(&ck->cfg, i, name, &nd, shape);
        data[i] = wgml_st_find(&ck->file, name)->data; /* present and shaped: checked when read */
    }
    wgml_status st = wgml_gpt_create(ctx, &ck->cfg, data, out);
    free(data);
    return st;
}

wgml_status wgml_gpt_checkpoint_restore_optimizer(const wgml_gpt_checkpoint *ck, wgml_gpt *g, wgml_optimizer *opt)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (!ck || !opt) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: a checkpoint and an optimizer must be given");
    if (!ck->has_moments)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "the checkpoint has no optimiser moments: it holds weights only and cannot resume training");
    wgml_status st = WGML_OK;
    char name[WGML_GPT_NAME], full[WGML_GPT_NAME + 4];
    int nd;
    int64_t shape[2];
    for (int s = 0; s < g->n_params && !st; s++) {
        wgml_tensor *slot[2] = {NULL, NULL};
        int i = wgml_gpt_optimizer_param(g, s);
        wgml_gpt_param_info(&g->cfg, i, name, &nd, shape);
        st = wgml_optimizer_state(opt, s, &slot[0], &slot[1]);
        for (int k = 0; k < 2 && !st; k++) {
            snprintf(full, sizeof full, "%s%s", name, k ? ".v" : ".m");
            const wgml_st_tensor *t = wgml_st_find(&ck->file, full);
            if (!t || wgml_tensor_numel(slot[k]) != wgml_tensor_numel(g->params[i]))
                st = wgml_fail(ctx, WGML_ERROR_SHAPE, "gpt checkpoint: moment '%s' does not fit the optimizer's slot %d", full, s);
            else st = wgml_tensor_write(slot[k], t->data, (size_t)wgml_tensor_numel(slot[k]));
        }
        wgml_tensor_free(slot[0]), wgml_tensor_free(slot[1]);
    }
    if (!st) st = wgml_optimizer_set_steps(opt, ck->step);
    return st;
}
