/* The GPT's public handle (wgml_gpt.h): the model of gpt.c on the heap, with what a
   checkpoint holds beside the weights (vocabulary, step, run settings), and generation over
   the KV cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "cpu/philox.h"
#include "models/decode.h"
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
    if (bytes) *bytes = g->cfg.vocab > 256 ? NULL : g->vocab_size ? g->vocab : identity; /* (tokens past 256 are not bytes) */
    return (int)g->cfg.vocab;
}

wgml_status wgml_gpt_set_vocab(wgml_gpt *g, const uint8_t *bytes, int n)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!bytes) return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_set_vocab: bytes is NULL");
    if (g->cfg.vocab > 256)
        return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_set_vocab: the model's %lld tokens are ids, not bytes",
                         (long long)g->cfg.vocab);
    if (n != g->cfg.vocab)
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

wgml_status wgml_gpt_set_dropout(wgml_gpt *g, float p)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!(p >= 0.0f && p < 1.0f))
        return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_set_dropout: p = %g; want 0 <= p < 1", (double)p);
    g->cfg.dropout = p;
    return WGML_OK;
}

wgml_status wgml_gpt_save(wgml_gpt *g, const char *path, wgml_optimizer *opt)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (g->cfg.vocab > 256)
        return wgml_fail(g->ctx, WGML_ERROR_UNSUPPORTED, "wgml_gpt_save: a checkpoint's tokens are bytes; the model has %lld",
                         (long long)g->cfg.vocab);
    wgml_status st = opt ? wgml_gpt_check_optimizer(g, opt, "wgml_gpt_save") : WGML_OK;
    if (st) return st;
    const uint8_t *vocab;
    int n = wgml_gpt_vocab(g, &vocab);
    wgml_gpt_run run = g->run;
    st = wgml_rng_get_state(g->ctx, &run.rng_seed, &run.rng_offset);
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
        a->heads != b->heads || a->kv_heads != b->kv_heads || a->width != b->width || a->ffn != b->ffn ||
        a->head_dim != b->head_dim || a->qk_norm != b->qk_norm)
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
    if (n) *n = g ? g->m.n : 0;
    return g ? g->m.params : NULL;
}

/* A uniform in [0, 1) from the context's generator: wgml_rand's first element at its state
   (word 0 of the block there, top 24 bits), the state then moved on by that one block. */
static wgml_status host_uniform(wgml_context *ctx, double *u)
{
    uint64_t seed, offset;
    wgml_status st = wgml_rng_get_state(ctx, &seed, &offset);
    if (st) return st;
    uint32_t ctr[4] = {(uint32_t)offset, (uint32_t)(offset >> 32), wgml_rng_stream(ctx), 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
    wgml_philox4x32_10(ctr, key, w);
    *u = (double)(w[0] >> 8) * 0x1.0p-24;
    return wgml_rng_set_state(ctx, seed, offset + 1);
}

/* Nucleus (top-p) sampling from logits [V] on the host: the top_k largest (0: all; ties kept,
   as the GPU sampler keeps them) at the temperature, then the fewest most likely tokens whose
   probabilities reach top_p; u in [0, 1) picks one. */
static int32_t draw_top_p(const float *logits, int V, float temperature, int64_t top_k, float top_p, double u)
{
    int order[256];
    double p[256], sum = 0, max = -INFINITY;
    for (int k = 0; k < V; k++) order[k] = k;
    for (int a = 1; a < V; a++) /* by logit, largest first (V <= 256: insertion sort) */
        for (int b = a; b > 0 && logits[order[b]] > logits[order[b - 1]]; b--) {
            int x = order[b];
            order[b] = order[b - 1], order[b - 1] = x;
        }
    int n = top_k > 0 && top_k < V ? (int)top_k : V;
    while (n < V && logits[order[n]] == logits[order[n - 1]]) n++;
    for (int k = 0; k < n; k++) max = fmax(max, (double)logits[order[k]]);
    for (int k = 0; k < n; k++) sum += p[k] = exp(((double)logits[order[k]] - max) / (double)temperature);
    double kept = 0;
    int m = 0;
    while (m < n && (m == 0 || kept < (double)top_p * sum)) kept += p[m++];
    u *= kept;
    for (int k = 0; k < m; k++)
        if ((u -= p[k]) < 0) return order[k];
    return order[m - 1];
}

/* wgml_gpt_generate_step with nucleus sampling: the logits are read back (one submit, with
   the cache's new keys and values) and the token drawn on the host. */
static wgml_status generate_step_top_p(wgml_gpt *g, wgml_gpt_cache *c, const int32_t *history, int64_t n_history,
                                       int64_t n_new, const wgml_gpt_sample_desc *d, int32_t *token)
{
    wgml_context *ctx = g->ctx;
    int64_t L = g->cfg.layers, block = g->cfg.block, feed = n_new, V = g->cfg.vocab;
    if (V > 256) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_gpt_generate: top_p with %lld tokens (at most 256)", (long long)V);
    if (c->len + n_new > block) { /* the sliding window, as wgml_gpt_generate_step's */
        wgml_gpt_cache_reset(c, L);
        feed = n_new > block / 2 ? block : block / 2 > 0 ? block / 2 : 1;
        if (feed > n_history) feed = n_history;
    }
    float logits[256];
    wgml_tensor *out[1 + WGML_GPT_MAX_LAYERS];
    wgml_scope_begin(ctx);
    wgml_tensor *ids = NULL;
    wgml_status st = wgml_tensor_from_i32(ctx, 2, (int64_t[2]){1, feed}, history + n_history - feed, (size_t)feed, &ids);
    wgml_tensor *lg = st ? NULL : wgml_gpt_decode_logits(g, c, ids);
    if (!st && !lg) st = WGML_ERROR_INVALID_ARGUMENT;
    if (!st) {
        out[0] = lg;
        for (int64_t l = 0; l < L; l++) out[1 + l] = c->next_kv[l];
        st = wgml_eval_read(ctx, (int)(L + 1), out, lg, logits, (size_t)V);
    }
    double u = 0;
    if (!st) st = host_uniform(ctx, &u);
    if (!st) {
        wgml_gpt_cache_advance(c, L, feed);
        *token = draw_top_p(logits, (int)V, d->temperature, d->top_k, d->top_p, u);
    }
    wgml_scope_end(ctx);
    return st;
}

/* A prompt's checks (what names the caller), and the sampling's: the desc's fields in range */
static wgml_status check_prompt(wgml_gpt *g, const char *what, const int32_t *prompt, int64_t n_prompt, int64_t n_new)
{
    if (!prompt || n_prompt < 1 || n_new < 0 || n_prompt > INT64_MAX / 4 - n_new)
        return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: a prompt of at least one token and n_new >= 0, "
                         "n_prompt + n_new < 2^61, must be given (n_prompt = %lld, n_new = %lld)", what, (long long)n_prompt,
                         (long long)n_new);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= g->cfg.vocab)
            return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: prompt[%lld] = %d is not a token id (vocab %lld)", what,
                             (long long)i, prompt[i], (long long)g->cfg.vocab);
    return WGML_OK;
}

static wgml_status check_sampling(wgml_context *ctx, const char *what, const wgml_gpt_sample_desc *d)
{
    if (!(d->temperature >= 0) || d->top_k < 0)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: temperature %g and top_k %lld must be >= 0", what,
                         (double)d->temperature, (long long)d->top_k);
    if (!(d->top_p >= 0 && d->top_p <= 1))
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: top_p = %g; want 0 <= top_p <= 1 (0 or 1: all)", what,
                         (double)d->top_p);
    if (d->f16_weights != 0 && d->f16_weights != 1)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: f16_weights = %d; want 0 or 1", what, d->f16_weights);
    return WGML_OK;
}

/* Whether the decode plan draws as d asks: greedy, or at a temperature without top-k or top-p
   (top-p needs the distribution on the host; temperature 0 stays the GPU's argmax) */
static int plan_samples(const wgml_gpt_sample_desc *d)
{
    const int nucleus = d->top_p > 0 && d->top_p < 1 && d->temperature >= 1e-4f;
    return !nucleus && (d->top_k == 0 || d->temperature < 1e-4f);
}

wgml_status wgml_gpt_generate(wgml_gpt *g, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                              const wgml_gpt_sample_desc *desc, int32_t *out, wgml_gpt_token_fn on_token, void *user)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    wgml_gpt_sample_desc d = desc ? *desc : (wgml_gpt_sample_desc){0};
    wgml_status st0 = check_prompt(g, "wgml_gpt_generate", prompt, n_prompt, n_new);
    if (!st0) st0 = check_sampling(ctx, "wgml_gpt_generate", &d);
    if (st0) return st0;
    const int nucleus = d.top_p > 0 && d.top_p < 1 && d.temperature >= 1e-4f;
    /* the decode plan (models/decode.h) where it takes the model: no graph per token */
    if (plan_samples(&d)) {
        int used = 0;
        wgml_status st = wgml_decode_sample_tokens(g, prompt, n_prompt, n_new, d.temperature, d.f16_weights, out, on_token, user, 0,
                                                     &used);
        if (used || st) return st;
    }
    /* the history the sliding window restarts from: the prompt, then the tokens drawn */
    int32_t *ids = malloc((size_t)(n_prompt + n_new) * sizeof *ids);
    if (!ids) return wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_gpt_generate: out of host memory");
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    wgml_gpt_cache cache;
    wgml_status st = wgml_gpt_cache_init(g, &cache);
    int64_t have = n_prompt, fresh = n_prompt;
    for (int64_t k = 0; k < n_new && !st; k++) {
        int32_t tok;
        st = nucleus ? generate_step_top_p(g, &cache, ids, have, fresh, &d, &tok)
                     : wgml_gpt_generate_step(g, &cache, ids, have, fresh, d.temperature, d.top_k, &tok);
        if (st) break;
        ids[have++] = tok, fresh = 1;
        if (out) out[k] = tok;
        if (on_token && on_token(tok, user)) break;
    }
    wgml_gpt_cache_free(&cache, g->cfg.layers);
    free(ids);
    return st;
}

wgml_status wgml_gpt_generate_batch(wgml_gpt *g, int64_t n_seq, const int32_t *const *prompts, const int64_t *n_prompts, int64_t n_new,
                                    const wgml_gpt_sample_desc *desc, int32_t *out)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (n_seq < 1 || !prompts || !n_prompts || (!out && n_new > 0) || n_new < 0 || n_new > INT64_MAX / 4 / n_seq)
        return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_gpt_generate_batch: n_seq >= 1 prompts (%lld), their lengths, "
                         "0 <= n_new < 2^61 / n_seq (%lld) and out (n_seq x n_new) must be given", (long long)n_seq,
                         (long long)n_new);
    wgml_gpt_sample_desc d = desc ? *desc : (wgml_gpt_sample_desc){0};
    wgml_status st = check_sampling(ctx, "wgml_gpt_generate_batch", &d);
    for (int64_t s = 0; !st && s < n_seq; s++) {
        char what[64];
        snprintf(what, sizeof what, "wgml_gpt_generate_batch: prompt %lld", (long long)s);
        st = check_prompt(g, what, prompts[s], n_prompts[s], n_new);
    }
    if (st || n_new == 0) return st;
    if (plan_samples(&d)) {
        int used = 0;
        st = wgml_decode_sample_batch(g, n_seq, prompts, n_prompts, n_new, d.temperature, d.f16_weights, out, 0, &used);
        if (used || st) return st;
    }
    /* the plan does not draw this way, or does not take the model: each prompt in turn */
    for (int64_t s = 0; !st && s < n_seq; s++) st = wgml_gpt_generate(g, prompts[s], n_prompts[s], n_new, &d, out + s * n_new, NULL, NULL);
    return st;
}
