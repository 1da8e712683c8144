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
#include "models/model.h"

#define FORMAT "wgml-gpt-1"

/* The numeric metadata: key, where it lives (0: the config, 1: the run), its kind and range.
   Saving and reading both walk this table. */
#define CFG(k, m, t, lo, hi) {k, 0, offsetof(wgml_gpt_config, m), WGML_META_##t, lo, hi, 0}
#define RUN(k, m, t, lo, hi) {k, 1, offsetof(wgml_gpt_run, m), WGML_META_##t, lo, hi, 0}
static const wgml_meta_field fields[] = {
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
    /* absent in older files: 0 (head_dim then C / H; no QK-norm) */
    {"head_dim", 0, offsetof(wgml_gpt_config, head_dim), WGML_META_I64, 0, 128, 1},
    {"qk_norm", 0, offsetof(wgml_gpt_config, qk_norm), WGML_META_I64, 0, 1, 1},
    /* absent in older files: 1 */
    {"ranks", 1, offsetof(wgml_gpt_run, ranks), WGML_META_I64, 1, 1 << 20, 1},
    /* absent in older files: 0 (f32, no loss scaling) */
    {"precision", 1, offsetof(wgml_gpt_run, precision), WGML_META_I64, 0, 2, 1},
    {"loss_scale", 1, offsetof(wgml_gpt_run, loss_scale), WGML_META_F32, 0, FLT_MAX, 1},
    {"loss_scale_good", 1, offsetof(wgml_gpt_run, loss_scale_good), WGML_META_I64, 0, 1 << 24, 1},
    {"loss_scale_skipped", 1, offsetof(wgml_gpt_run, loss_scale_skipped), WGML_META_I64, 0, 1 << 24, 1},
    {"loss_scale_updates", 1, offsetof(wgml_gpt_run, loss_scale_updates), WGML_META_I64, 0, 1 << 24, 1},
    /* absent in older files: 0 (the text not recorded) */
    {"data_tokens", 1, offsetof(wgml_gpt_run, data_tokens), WGML_META_I64, 0, 0x1p63, 1}, /* (any int64) */
    {"data_checksum", 1, offsetof(wgml_gpt_run, data_checksum), WGML_META_U64, 0, 0, 1},
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))
#define N_META (N_FIELDS + 4) /* + format, arch, step, data */

static const char *const extras[1] = {"vocab"};

/* The parameter table of a resolved config (n = wgml_gpt_param_count). */
static wgml_param_spec *specs_of(const wgml_gpt_config *c)
{
    int n = wgml_gpt_param_count(c);
    wgml_param_spec *spec = calloc((size_t)(n > 0 ? n : 1), sizeof *spec);
    for (int i = 0; spec && i < n; i++) wgml_gpt_param_spec(c, i, &spec[i]);
    return spec;
}

wgml_status wgml_gpt_checkpoint_save(const char *path, wgml_gpt *g, wgml_optimizer *opt, int64_t step,
                                     const wgml_gpt_run *run, const uint8_t *vocab, int vocab_size)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (!path || !run || !vocab || vocab_size != g->cfg.vocab || step < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: path, run settings and a vocabulary of %lld bytes must be given",
                         (long long)g->cfg.vocab);
    float bytes[256];
    for (int k = 0; k < vocab_size; k++) bytes[k] = (float)vocab[k];
    wgml_st_tensor v = {.ndim = 1, .shape = {vocab_size}, .data = bytes};
    snprintf(v.name, sizeof v.name, "%s", extras[0]);

    char text[N_META][WGML_META_TEXT];
    const char *keys[N_META], *vals[N_META];
    int nm = 0;
    wgml_gpt_config cfg = g->cfg;
    wgml_gpt_run r = *run;
    if (r.ranks < 1) r.ranks = 1;
    r.loss_scale = 0, r.loss_scale_good = r.loss_scale_skipped = r.loss_scale_updates = 0;
    if (opt && wgml_optimizer_scales_loss(opt)) { /* what a resume needs to go on bit for bit */
        wgml_loss_scale_state sc;
        wgml_status st = wgml_optimizer_loss_scale_state(opt, &sc);
        if (st) return st;
        r.loss_scale = sc.scale, r.loss_scale_good = sc.good_steps, r.loss_scale_skipped = sc.skipped_steps;
        r.loss_scale_updates = sc.updates;
    }
    keys[nm] = "format", vals[nm++] = FORMAT;
    keys[nm] = "arch", vals[nm++] = g->arch->name;
    snprintf(text[nm], sizeof text[nm], "%" PRId64, step);
    keys[nm] = "step", vals[nm] = text[nm], nm++;
    keys[nm] = "data", vals[nm++] = r.data;
    void *bases[2] = {&cfg, &r};
    wgml_meta_write(fields, N_FIELDS, bases, text + nm, keys, vals, &nm);
    return wgml_model_save(&g->m, path, opt, g->slot_param, &v, 1, keys, vals, nm);
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
    wgml_gpt_config c = {0};
    if (text && strcmp(text, wgml_llama_arch.name) == 0) c.arch = WGML_GPT_LLAMA;
    else if (!text || strcmp(text, wgml_gpt2_arch.name) != 0)
        return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: metadata 'arch' is %s, want gpt2 or llama", path, text ? text : "missing");
    wgml_gpt_run r = {.ranks = 1};
    void *bases[2] = {&c, &r};
    wgml_status st = wgml_meta_read(ctx, path, &ck->file, fields, N_FIELDS, bases, NULL);
    if (st) return st;
    text = wgml_st_meta(&ck->file, "step");
    snprintf(what, sizeof what, "%s: metadata 'step'", path);
    if (!text) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s is missing", what);
    if (wgml_parse_i64(what, text, 0, INT64_MAX, &ck->step, err, sizeof err)) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s", err);
    text = wgml_st_meta(&ck->file, "data");
    snprintf(r.data, sizeof r.data, "%s", text ? text : "");
    if (wgml_gpt_config_resolve(&c, &ck->cfg, err, sizeof err)) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: %s", path, err);
    ck->run = r;
    return WGML_OK;
}

static wgml_status check_tensors(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *ck)
{
    const wgml_gpt_config *c = &ck->cfg;
    wgml_param_spec *spec = specs_of(c);
    if (!spec) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory");
    wgml_status st = wgml_model_check_file(ctx, path, &ck->file, wgml_gpt_param_count(c), spec, "from the metadata's config", extras, 1,
                                           &ck->has_moments);
    free(spec);
    if (st) return st;
    const wgml_st_tensor *v = wgml_st_find(&ck->file, extras[0]);
    int64_t vs = c->vocab;
    if (!v) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor 'vocab' is missing", path);
    if (v->dtype != WGML_F32) return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: tensor 'vocab' is I32; a checkpoint holds floats", path);
    if (v->ndim != 1 || v->shape[0] != vs)
        return wgml_fail(ctx, WGML_ERROR_SHAPE, "%s: tensor 'vocab' is not of shape [%lld] (from the metadata's config)", path,
                         (long long)vs);
    for (int k = 0; k < vs; k++) {
        float b = v->data[k];
        if (!(b >= 0.0f && b <= 255.0f && b == (float)(int)b) || (k > 0 && !(b > v->data[k - 1])))
            return wgml_fail(ctx, WGML_ERROR_FORMAT, "%s: vocab[%d] = %g; the vocabulary is increasing bytes 0..255", path, k, (double)b);
        ck->vocab[k] = (uint8_t)b;
    }
    ck->vocab_size = (int)vs;
    return WGML_OK;
}

wgml_status wgml_gpt_checkpoint_read(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!out || !path) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: path and out must be given");
    memset(out, 0, sizeof *out);
    wgml_status st = wgml_model_read_file(ctx, path, &out->file);
    if (!st) st = read_metadata(ctx, path, out);
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
    if (!ck || !opt) return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: a checkpoint and an optimizer must be given");
    wgml_status st = wgml_model_restore_optimizer(g->ctx, &ck->file, ck->has_moments, g->m.n, g->m.spec, g->slot_param, opt, ck->step);
    const wgml_gpt_run *r = &ck->run;
    if (!st && r->loss_scale > 0 && wgml_optimizer_scales_loss(opt)) {
        wgml_loss_scale_state sc = {.scale = r->loss_scale, .good_steps = r->loss_scale_good,
                                    .skipped_steps = r->loss_scale_skipped, .updates = r->loss_scale_updates};
        st = wgml_optimizer_set_loss_scale_state(opt, &sc);
    }
    return st;
}
