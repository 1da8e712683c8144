/* The GPT's public handle (wgml_gpt.h): the model of gpt.c on the heap, with what a
   checkpoint holds beside the weights (vocabulary, step, run settings), and generation over
   the KV cache. */
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "models/gpt_checkpoint.h"

/* The settings recorded for a model no optimiser has touched: the command's defaults, so
   the file reads back (a checkpoint must hold every setting). */
static void default_run(wgml_gpt_run *r, uint64_t seed)
{
    *r = (wgml_gpt_run){.seed = seed, .lr = 1e-3f, .min_lr_ratio = 1.0f, .beta1 = 0.9f, .beta2 = 0.99f,
                        .batch = 1, .eval_batches = 1};
}

wgml_status wgml_gpt_new(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!cfg || !out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_new: cfg and out must be given");
    *out = NULL;
    char err[256];
    wgml_gpt_config c;
    if (wgml_gpt_config_resolve(cfg, &c, err, sizeof err))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_new: %s", err);
    wgml_gpt *g = calloc(1, sizeof *g);
    if (!g) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_gpt_new: out of host memory");
    wgml_status st = wgml_gpt_init(ctx, &c, seed, g);
    if (st) {
        free(g);
        return wgml_last_status(ctx) == st ? st : wgml_fail(ctx, st, "wgml_gpt_new: the parameters could not be made");
    }
    default_run(&g->run, seed);
    *out = g;
    return WGML_OK;
}

wgml_status wgml_gpt_from_checkpoint(wgml_context *ctx, const wgml_gpt_checkpoint *ck, wgml_gpt **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!ck || !out) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt checkpoint: a checkpoint and out must be given");
    *out = NULL;
    wgml_gpt *g = calloc(1, sizeof *g);
    if (!g) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "gpt checkpoint: out of host memory");
    wgml_status st = wgml_gpt_checkpoint_model(ctx, ck, g);
    if (st) return free(g), st;
    g->step = ck->step;
    g->run = ck->run;
    g->vocab_size = ck->vocab_size;
    memcpy(g->vocab, ck->vocab, sizeof g->vocab);
    *out = g;
    return WGML_OK;
}

wgml_status wgml_gpt_load(wgml_context *ctx, const char *path, wgml_gpt **out)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (out) *out = NULL;
    wgml_gpt_checkpoint ck;
    wgml_status st = wgml_gpt_checkpoint_read(ctx, path, &ck);
    if (st) return st;
    st = wgml_gpt_from_checkpoint(ctx, &ck, out);
    wgml_gpt_checkpoint_free(&ck);
    return st;
}

int wgml_gpt_vocab(const wgml_gpt *g, const uint8_t **bytes)
{
    static const uint8_t identity[256] = {
#define ROW(r) r, r + 1, r + 2, r + 3, r + 4, r + 5, r + 6, r + 7, r + 8, r + 9, r + 10, r + 11, r + 12, r + 13, r + 14, r + 15
        ROW(0),   ROW(16),  ROW(32),  ROW(48),  ROW(64),  ROW(80),  ROW(96),  ROW(112),
        ROW(128), ROW(144), ROW(160), ROW(176), ROW(192), ROW(208), ROW(224), ROW(240)
#undef ROW
    };
    if (!g) {
        if (bytes) *bytes = NULL;
        return 0;
    }
    if (bytes) *bytes = g->vocab_size ? g->vocab : identity;
    return (int)g->cfg.vocab;
}

wgml_status wgml_gpt_set_vocab(wgml_gpt *g, const uint8_t *bytes, int n)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!bytes || n != g->cfg.vocab)
        return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_set_vocab: %d bytes given, the model has %lld tokens",
                         n, (long long)g->cfg.vocab);
    for (int k = 1; k < n; k++)
        if (bytes[k] <= bytes[k - 1])
            return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "wgml_gpt_set_vocab: bytes[%d] = %u after %u; the bytes must increase", k, bytes[k],
                             bytes[k - 1]);
    memcpy(g->vocab, bytes, (size_t)n);
    g->vocab_size = n;
    return WGML_OK;
}

wgml_status wgml_gpt_save(wgml_gpt *g, const char *path, wgml_optimizer *opt)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (g->cfg.vocab > 256)
        return wgml_fail(g->ctx, WGML_ERROR_UNSUPPORTED, "wgml_gpt_save: a checkpoint's tokens are bytes; the model has %lld",
                         (long long)g->cfg.vocab);
    const uint8_t *vocab;
    int n = wgml_gpt_vocab(g, &vocab);
    wgml_gpt_run run = g->run;
    wgml_status st = wgml_rng_get_state(g->ctx, &run.rng_seed, &run.rng_offset);
    int64_t step = opt ? wgml_optimizer_steps(opt) : g->step;
    if (!st) st = wgml_gpt_checkpoint_save(path, g, opt, step, &run, vocab, n);
    return st;
}

wgml_status wgml_gpt_load_optimizer(wgml_gpt *g, const char *path, wgml_optimizer *opt)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_gpt_checkpoint ck;
    wgml_status st = wgml_gpt_checkpoint_read(g->ctx, path, &ck);
    if (st) return st;
    const wgml_gpt_config *a = &ck.cfg, *b = &g->cfg;
    if (a->arch != b->arch || a->vocab != b->vocab || a->block != b->block || a->layers != b->layers ||
        a->heads != b->heads || a->kv_heads != b->kv_heads || a->width != b->width || a->ffn != b->ffn)
        st = wgml_fail(g->ctx, WGML_ERROR_SHAPE, "%s: the checkpoint's model (%lld layers, width %lld, vocab %lld) is not this one "
                       "(%lld layers, width %lld, vocab %lld)", path, (long long)a->layers, (long long)a->width,
                       (long long)a->vocab, (long long)b->layers, (long long)b->width, (long long)b->vocab);
    if (!st) st = wgml_gpt_checkpoint_restore_optimizer(&ck, g, opt);
    wgml_gpt_checkpoint_free(&ck);
    return st;
}

void wgml_gpt_delete(wgml_gpt *g)
{
    if (!g) return;
    wgml_gpt_free(g);
    free(g);
}

wgml_context *wgml_gpt_context(const wgml_gpt *g) { return g ? g->ctx : NULL; }

wgml_status wgml_gpt_get_config(const wgml_gpt *g, wgml_gpt_config *cfg)
{
    if (!g || !cfg) return WGML_ERROR_INVALID_ARGUMENT;
    *cfg = g->cfg;
    return WGML_OK;
}

int64_t wgml_gpt_step(const wgml_gpt *g) { return g ? g->step : 0; }

wgml_tensor *const *wgml_gpt_params(const wgml_gpt *g, int *n)
{
    if (n) *n = g ? g->n_params : 0;
    return g ? g->params : NULL;
}

wgml_status wgml_gpt_generate(wgml_gpt *g, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                              const wgml_gpt_sample_desc *desc, int32_t *out, wgml_gpt_token_fn on_token, void *user)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (!prompt || n_prompt < 1 || n_new < 0 || n_prompt > INT64_MAX / 4 - n_new)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_generate: a prompt of at least one token and n_new >= 0 "
                         "must be given (n_prompt = %lld, n_new = %lld)", (long long)n_prompt, (long long)n_new);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= g->cfg.vocab)
            return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_generate: prompt[%lld] = %d is not a token id (vocab %lld)",
                             (long long)i, prompt[i], (long long)g->cfg.vocab);
    wgml_gpt_sample_desc d = desc ? *desc : (wgml_gpt_sample_desc){0};
    if (!(d.temperature >= 0) || d.top_k < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_generate: temperature %g and top_k %lld must be >= 0",
                         (double)d.temperature, (long long)d.top_k);
    /* the history the sliding window restarts from: the prompt, then the tokens drawn */
    int32_t *ids = malloc((size_t)(n_prompt + n_new) * sizeof *ids);
    if (!ids) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_gpt_generate: out of host memory");
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    wgml_gpt_cache cache;
    wgml_status st = wgml_gpt_cache_init(g, &cache);
    int64_t have = n_prompt, fresh = n_prompt;
    for (int64_t k = 0; k < n_new && !st; k++) {
        int32_t tok;
        st = wgml_gpt_generate_step(g, &cache, ids, have, fresh, d.temperature, d.top_k, &tok);
        if (st) break;
        ids[have++] = tok, fresh = 1;
        if (out) out[k] = tok;
        if (on_token && on_token(tok, user)) break;
    }
    wgml_gpt_cache_free(&cache, g->cfg.layers);
    free(ids);
    return st;
}
