/*
 * The GPT's public API (include/wgml_gpt.h), through that header alone: a model saved with
 * its optimiser and loaded back has the same config, step, vocabulary and bit-identical
 * weights, and training goes on from the file exactly as from memory (the moments restored);
 * greedy generation gives the argmax of the full forward's last logits at each step, a
 * callback sees (and can stop) the tokens, and generation runs on past the block; nucleus
 * (top-p) sampling draws the token the rule gives for the forward's logits and the generator's
 * number; a dropout set on a loaded model is saved and changes its training steps; bad files,
 * configs, vocabularies, prompts and sampling settings are refused with messages; a step whose
 * submit failed leaves no gradients or counted step behind, and a generation whose submit failed
 * nothing that changes the next one's tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "wgml_gpt.h"

enum { V = 23, B = 3, T = 10 };

static wgml_gpt_config small_config(wgml_gpt_arch arch)
{
    return (wgml_gpt_config){.arch = arch, .vocab = V, .block = T, .layers = 2, .heads = 2, .width = 16,
                             .kv_heads = arch == WGML_GPT_LLAMA ? 1 : 0};
}

static wgml_tensor *random_ids(wgml_context *ctx, int64_t rows, int64_t cols)
{
    int32_t *x = malloc((size_t)(rows * cols) * sizeof *x);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (int32_t)(test_rand_u64() % V);
    int64_t shape[2] = {rows, cols};
    wgml_tensor *t = test_tensor_i32(ctx, 2, shape, x);
    free(x);
    return t;
}

static void scratch_path(char *path, size_t n, const char *name)
{
    snprintf(path, n, "/tmp/wgml_test_gpt_api_%ld_%s.safetensors", (long)getpid(), name);
}

/* Every parameter of a and b equal, bit for bit */
static int same_weights(wgml_context *ctx, wgml_gpt *a, wgml_gpt *b)
{
    int na, nb, same = 1;
    wgml_tensor *const *pa = wgml_gpt_params(a, &na), *const *pb = wgml_gpt_params(b, &nb);
    if (na != nb || na < 1) return 0;
    for (int i = 0; i < na && same; i++) {
        int64_t n = wgml_tensor_numel(pa[i]);
        float *x = test_read_new(ctx, "a", pa[i], n), *y = test_read_new(ctx, "b", pb[i], n);
        same = x && y && wgml_tensor_numel(pb[i]) == n && memcmp(x, y, (size_t)n * sizeof *x) == 0;
        free(x), free(y);
    }
    return same;
}

static void save_load_and_resume(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt_config cfg = small_config(WGML_GPT_GPT2);
    wgml_gpt *g = NULL, *h = NULL;
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 5, &g));
    if (!g) return;
    uint8_t vocab[V];
    for (int k = 0; k < V; k++) vocab[k] = (uint8_t)(40 + 3 * k);
    CHECK_OK(ctx, wgml_gpt_set_vocab(g, vocab, V));
    wgml_gpt_train_desc d = {.lr = 3e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    wgml_optimizer *opt = NULL, *opt2 = NULL;
    CHECK_OK(ctx, wgml_gpt_optimizer(g, &d, &opt));
    wgml_tensor *ids = random_ids(ctx, B, T), *targets = random_ids(ctx, B, T);
    float loss[4];
    for (int s = 0; s < 3; s++) CHECK_OK(ctx, wgml_gpt_train_step(g, opt, ids, targets, &loss[s]));
    CHECK(loss[2] < loss[0]); /* it learns the one batch */

    char path[256];
    scratch_path(path, sizeof path, "full");
    CHECK_OK(ctx, wgml_gpt_save(g, path, opt));
    CHECK_OK(ctx, wgml_gpt_load(ctx, path, &h));
    if (h) {
        wgml_gpt_config a, b;
        CHECK_OK(ctx, wgml_gpt_get_config(g, &a));
        CHECK_OK(ctx, wgml_gpt_get_config(h, &b));
        CHECK(a.arch == b.arch && a.vocab == b.vocab && a.block == b.block && a.layers == b.layers && a.heads == b.heads &&
              a.kv_heads == b.kv_heads && a.width == b.width && a.ffn == b.ffn && a.dropout == b.dropout &&
              a.rope_base == b.rope_base && a.norm_eps == b.norm_eps && b.ffn == 4 * 16);
        CHECK(wgml_gpt_step(h) == 3 && wgml_gpt_step(g) == 0);
        const uint8_t *hv = NULL;
        CHECK(wgml_gpt_vocab(h, &hv) == V && hv && memcmp(hv, vocab, V) == 0);
        CHECK(wgml_gpt_context(h) == ctx);
        CHECK(same_weights(ctx, g, h));
        float lg, lh;
        CHECK_OK(ctx, wgml_gpt_eval_loss(g, ids, targets, &lg));
        CHECK_OK(ctx, wgml_gpt_eval_loss(h, ids, targets, &lh));
        CHECK(lg == lh);
        /* one more step from memory and from the file: the same loss and weights, which a
           fresh optimiser (zero moments, step 0) would not give */
        CHECK_OK(ctx, wgml_gpt_optimizer(h, &d, &opt2));
        CHECK_OK(ctx, wgml_gpt_load_optimizer(h, path, opt2));
        CHECK(wgml_optimizer_steps(opt2) == 3);
        float l2;
        CHECK_OK(ctx, wgml_gpt_train_step(g, opt, ids, targets, &loss[3]));
        CHECK_OK(ctx, wgml_gpt_train_step(h, opt2, ids, targets, &l2));
        CHECK(loss[3] == l2);
        CHECK(same_weights(ctx, g, h));
    }
    /* weights only: loads, but cannot resume training */
    char bare[256];
    scratch_path(bare, sizeof bare, "bare");
    CHECK_OK(ctx, wgml_gpt_save(g, bare, NULL));
    CHECK_STATUS(ctx, wgml_gpt_load_optimizer(h, bare, opt2), WGML_ERROR_FORMAT);
    CHECK(test_message_has(ctx, "no optimiser moments"));
    /* another model's file does not fit */
    wgml_gpt_config other = cfg;
    other.width = 24;
    wgml_gpt *o = NULL;
    wgml_optimizer *oopt = NULL;
    CHECK_OK(ctx, wgml_gpt_new(ctx, &other, 1, &o));
    CHECK_OK(ctx, wgml_gpt_optimizer(o, &d, &oopt));
    CHECK_STATUS(ctx, wgml_gpt_load_optimizer(o, path, oopt), WGML_ERROR_SHAPE);
    CHECK(test_message_has(ctx, "width 16") && test_message_has(ctx, "width 24"));
    wgml_optimizer_free(oopt), wgml_optimizer_free(opt), wgml_optimizer_free(opt2);
    wgml_gpt_delete(o), wgml_gpt_delete(g), wgml_gpt_delete(h);
    wgml_tensor_free(ids), wgml_tensor_free(targets);
    unlink(path), unlink(bare);
}

typedef struct seen {
    int n, stop_after;
    int32_t tokens[64];
} seen;

static int note_token(int32_t tok, void *user)
{
    seen *s = user;
    if (s->n < 64) s->tokens[s->n] = tok;
    return ++s->n >= s->stop_after;
}

static void generation_is_the_forward_argmax(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt_config cfg = small_config(WGML_GPT_LLAMA);
    wgml_gpt *g = NULL;
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 11, &g));
    if (!g) return;
    enum { P = 3, N = T - P };
    int32_t seq[T] = {4, 17, 9}, out[N] = {0};
    seen s = {.stop_after = 1000};
    CHECK_OK(ctx, wgml_gpt_generate(g, seq, P, N, NULL, out, note_token, &s));
    CHECK(s.n == N && memcmp(s.tokens, out, sizeof out) == 0);
    /* a submit refused on the way (the first, ..., the fourth): the call fails, and the next
       gives the same tokens */
    for (int skip = 0; skip <= 3; skip++) {
        int32_t again[N] = {0};
        wgml_debug_fail_submits(ctx, skip, 1);
        CHECK_STATUS(ctx, wgml_gpt_generate(g, seq, P, N, NULL, again, NULL, NULL), WGML_ERROR_DEVICE);
        wgml_debug_fail_submits(ctx, 0, 0);
        CHECK_OK(ctx, wgml_gpt_generate(g, seq, P, N, NULL, again, NULL, NULL));
        CHECK(memcmp(again, out, sizeof out) == 0);
    }
    /* each token is the argmax of the full forward's last row over the tokens before it */
    for (int k = 0; k < N; k++) {
        int len = P + k;
        wgml_tensor *ids = test_tensor_i32(ctx, 2, (int64_t[2]){1, len}, seq);
        float *logits = test_read_new(ctx, "logits", wgml_gpt_logits(g, ids, 0), (int64_t)len * V);
        if (!logits) break;
        const float *last = logits + (size_t)(len - 1) * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        /* the cache's sums may round apart from the full forward's: a different token only
           where the two logits are within rounding of each other */
        if (out[k] != best && !(out[k] >= 0 && out[k] < V && last[best] - last[out[k]] < 1e-5f)) {
            fprintf(stderr, "  token %d: generated %d, the forward's argmax is %d (%g vs %g)\n", k, out[k], best,
                    (double)(out[k] >= 0 && out[k] < V ? last[out[k]] : 0), (double)last[best]);
            CHECK(0);
        }
        seq[len] = out[k];
        free(logits);
        wgml_tensor_free(ids);
    }
    /* the callback stops it */
    seen two = {.stop_after = 2};
    CHECK_OK(ctx, wgml_gpt_generate(g, seq, P, N, NULL, NULL, note_token, &two));
    CHECK(two.n == 2 && two.tokens[0] == out[0] && two.tokens[1] == out[1]);
    /* past the block (a sliding window), sampled with a temperature: tokens in range */
    int32_t many[40];
    wgml_gpt_sample_desc d = {.temperature = 0.9f, .top_k = 5};
    CHECK_OK(ctx, wgml_manual_seed(ctx, 3));
    CHECK_OK(ctx, wgml_gpt_generate(g, seq, P, 40, &d, many, NULL, NULL));
    for (int k = 0; k < 40; k++) CHECK(many[k] >= 0 && many[k] < V);
    wgml_gpt_delete(g);
}

/* The nucleus rule in double: softmax(logits / temp) sorted, the fewest likeliest tokens
   whose probabilities reach top_p, u in [0, 1) scaled to their mass picks one. */
static int nucleus_reference(const float *logits, double temp, double top_p, double u)
{
    int order[V];
    double p[V], sum = 0, kept = 0;
    for (int v = 0; v < V; v++) order[v] = v;
    for (int a = 0; a < V; a++)
        for (int b = a + 1; b < V; b++)
            if (logits[order[b]] > logits[order[a]]) {
                int x = order[a];
                order[a] = order[b], order[b] = x;
            }
    for (int k = 0; k < V; k++) sum += p[k] = exp(((double)logits[order[k]] - (double)logits[order[0]]) / temp);
    int m = 0;
    while (m < V && (m == 0 || kept < top_p * sum)) kept += p[m++];
    u *= kept;
    for (int k = 0; k < m; k++)
        if ((u -= p[k]) < 0) return order[k];
    return order[m - 1];
}

static void nucleus_sampling(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt_config cfg = small_config(WGML_GPT_GPT2);
    wgml_gpt *g = NULL;
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 21, &g));
    if (!g) return;
    enum { P = 4 };
    int32_t prompt[P] = {2, 19, 7, 11};
    wgml_tensor *ids = test_tensor_i32(ctx, 2, (int64_t[2]){1, P}, prompt);
    float *logits = test_read_new(ctx, "logits", wgml_gpt_logits(g, ids, 0), (int64_t)P * V);
    if (!logits) return;
    const float *last = logits + (size_t)(P - 1) * V;
    /* several seeds, so that more than the likeliest token is drawn */
    int distinct = 0, first = -1;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        const wgml_gpt_sample_desc d = {.temperature = 1.5f, .top_p = 0.7f};
        int32_t tok = -1;
        CHECK_OK(ctx, wgml_manual_seed(ctx, seed));
        CHECK_OK(ctx, wgml_gpt_generate(g, prompt, P, 1, &d, &tok, NULL, NULL));
        uint64_t s, offset = 99;
        CHECK_OK(ctx, wgml_rng_get_state(ctx, &s, &offset));
        CHECK(s == seed && offset == 1); /* one block a token */
        CHECK_OK(ctx, wgml_manual_seed(ctx, seed));
        float *u = test_read_new(ctx, "u", wgml_rand(ctx, 1, (int64_t[1]){1}, 0, 1), 1);
        if (!u) break;
        int want = nucleus_reference(last, 1.5, 0.7, (double)*u);
        if (tok != want) fprintf(stderr, "  seed %llu: drew %d, the rule gives %d (u = %g)\n", (unsigned long long)seed, tok, want,
                                 (double)*u);
        CHECK(tok == want);
        if (first < 0) first = tok;
        distinct += tok != first;
        free(u);
    }
    CHECK(distinct > 0);
    /* a tiny top_p keeps the likeliest token alone: greedy */
    int32_t greedy[6], tiny[6];
    const wgml_gpt_sample_desc one = {.temperature = 1.0f, .top_p = 1e-6f};
    CHECK_OK(ctx, wgml_gpt_generate(g, prompt, P, 6, NULL, greedy, NULL, NULL));
    CHECK_OK(ctx, wgml_gpt_generate(g, prompt, P, 6, &one, tiny, NULL, NULL));
    CHECK(memcmp(greedy, tiny, sizeof greedy) == 0);
    const wgml_gpt_sample_desc over = {.temperature = 1.0f, .top_p = 1.5f}, nan_p = {.temperature = 1.0f, .top_p = NAN};
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, P, 2, &over, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "top_p"));
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, P, 2, &nan_p, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    free(logits);
    wgml_tensor_free(ids);
    wgml_gpt_delete(g);
}

/* A dropout set on a model is its config's (saved with it) and its training steps use it. */
static void dropout_set_on_a_model(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt_config cfg = small_config(WGML_GPT_LLAMA), got;
    wgml_gpt *g = NULL, *h = NULL;
    char path[256];
    scratch_path(path, sizeof path, "dropout");
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 8, &g));
    if (!g) return;
    CHECK_OK(ctx, wgml_gpt_save(g, path, NULL));
    CHECK_STATUS(ctx, wgml_gpt_set_dropout(g, 1.0f), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "wgml_gpt_set_dropout"));
    CHECK_STATUS(ctx, wgml_gpt_set_dropout(g, -0.1f), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_OK(ctx, wgml_gpt_set_dropout(g, 0.5f));
    CHECK_OK(ctx, wgml_gpt_get_config(g, &got));
    CHECK(got.dropout == 0.5f);
    CHECK_OK(ctx, wgml_gpt_load(ctx, path, &h)); /* the same weights, dropout 0 */
    if (!h) {
        wgml_gpt_delete(g);
        return;
    }
    wgml_tensor *ids = random_ids(ctx, B, T), *targets = random_ids(ctx, B, T);
    float eval = 0, plain = 0, dropped = 0;
    CHECK_OK(ctx, wgml_gpt_eval_loss(h, ids, targets, &eval));
    const wgml_gpt_train_desc d = {.lr = 1e-3f};
    wgml_optimizer *oh = NULL, *og = NULL;
    CHECK_OK(ctx, wgml_gpt_optimizer(h, &d, &oh));
    CHECK_OK(ctx, wgml_gpt_optimizer(g, &d, &og));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 4));
    CHECK_OK(ctx, wgml_gpt_train_step(h, oh, ids, targets, &plain));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 4));
    CHECK_OK(ctx, wgml_gpt_train_step(g, og, ids, targets, &dropped));
    CHECK(fabsf(plain - eval) <= 1e-5f * fabsf(eval)); /* no dropout: the evaluation's loss */
    /* half the activations dropped: a change far past rounding, though small (a new model's
       logits are near 0, its loss near log V whatever is dropped) */
    CHECK(fabsf(dropped - eval) > 1e-4f);
    /* saved with the model */
    CHECK_OK(ctx, wgml_gpt_save(g, path, NULL));
    wgml_gpt_delete(h), h = NULL;
    CHECK_OK(ctx, wgml_gpt_load(ctx, path, &h));
    CHECK_OK(ctx, wgml_gpt_get_config(h, &got));
    CHECK(got.dropout == 0.5f);
    unlink(path);
    wgml_optimizer_free(oh), wgml_optimizer_free(og);
    wgml_tensor_free(ids), wgml_tensor_free(targets);
    wgml_gpt_delete(g), wgml_gpt_delete(h);
}

static void bad_input_is_refused(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt *g = NULL;
    wgml_gpt_config bad = {.vocab = V, .block = 8, .layers = 1, .heads = 5, .width = 32};
    CHECK_STATUS(ctx, wgml_gpt_new(ctx, &bad, 1, &g), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(g == NULL && test_message_has(ctx, "heads"));
    CHECK_STATUS(ctx, wgml_gpt_load(ctx, "/nonexistent/wgml.safetensors", &g), WGML_ERROR_IO);
    CHECK(g == NULL);
    /* a safetensors file that is not a GPT checkpoint */
    char path[256];
    scratch_path(path, sizeof path, "plain");
    float x[3] = {1, 2, 3};
    wgml_tensor *t = test_tensor(ctx, 1, (int64_t[1]){3}, x);
    const char *name = "x";
    CHECK_OK(ctx, wgml_save(ctx, path, 1, &name, &t, 0, NULL, NULL));
    CHECK_STATUS(ctx, wgml_gpt_load(ctx, path, &g), WGML_ERROR_FORMAT);
    CHECK(g == NULL && test_message_has(ctx, "not a wgml GPT checkpoint"));
    unlink(path);
    wgml_tensor_free(t);

    /* more than 256 tokens: ids, no byte vocabulary (a 256-byte table was handed out) */
    wgml_gpt_config ids_only = {.vocab = 300, .block = 8, .layers = 1, .heads = 2, .width = 16};
    CHECK_OK(ctx, wgml_gpt_new(ctx, &ids_only, 1, &g));
    const uint8_t *bytes = (const uint8_t *)"x";
    CHECK(g && wgml_gpt_vocab(g, &bytes) == 300 && bytes == NULL);
    wgml_gpt_delete(g);
    g = NULL;

    wgml_gpt_config cfg = small_config(WGML_GPT_GPT2);
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 2, &g));
    if (!g) return;
    CHECK(wgml_gpt_vocab(g, &bytes) == V && bytes && bytes[V - 1] == V - 1); /* bytes 0..V-1 until set */
    uint8_t down[V];
    for (int k = 0; k < V; k++) down[k] = (uint8_t)(100 - k);
    CHECK_STATUS(ctx, wgml_gpt_set_vocab(g, down, V), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "must increase"));
    CHECK_STATUS(ctx, wgml_gpt_set_vocab(g, down, V - 1), WGML_ERROR_INVALID_ARGUMENT);
    int32_t prompt[2] = {3, V};
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, 2, 4, NULL, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "prompt[1]"));
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, 0, 4, NULL, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    wgml_gpt_sample_desc neg = {.temperature = -1};
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, 1, 4, &neg, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    const wgml_gpt_sample_desc two = {.f16_weights = 2};
    CHECK_STATUS(ctx, wgml_gpt_generate(g, prompt, 1, 4, &two, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "f16_weights"));
    int n = -1;
    CHECK(wgml_gpt_params(NULL, &n) == NULL && n == 0);

    /* ids not [B, T], or past the block: refused by name */
    wgml_tensor *flat = random_ids(ctx, 1, 5), *ids1 = NULL, *long_ids = random_ids(ctx, 1, cfg.block + 1);
    if (flat) ids1 = wgml_reshape(ctx, flat, 1, (int64_t[1]){5});
    CHECK(wgml_tensor_status(wgml_gpt_logits(g, ids1, 0)) == WGML_ERROR_SHAPE && test_message_has(ctx, "not 1-D"));
    CHECK(wgml_tensor_status(wgml_gpt_logits(g, long_ids, 0)) == WGML_ERROR_SHAPE &&
          test_message_has(ctx, "more positions than the model's block"));
    /* a step with another model's optimiser is refused before its backward: no gradient is
       left behind for this model's next step, which matches a twin that took only that one */
    wgml_gpt *twin = NULL, *other = NULL;
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 2, &twin));
    CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 9, &other));
    wgml_gpt_train_desc d = {.lr = 1e-3f};
    wgml_optimizer *og = NULL, *ot = NULL, *oo = NULL;
    CHECK_OK(ctx, wgml_gpt_optimizer(g, &d, &og));
    CHECK_OK(ctx, wgml_gpt_optimizer(twin, &d, &ot));
    CHECK_OK(ctx, wgml_gpt_optimizer(other, &d, &oo));
    wgml_tensor *ids = random_ids(ctx, B, T), *targets = random_ids(ctx, B, T);
    float lg = 0, lt = 1;
    if (og && ot && oo) {
        CHECK_STATUS(ctx, wgml_gpt_train_step(g, oo, ids, targets, &lg), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "not this model's"));
        CHECK_STATUS(ctx, wgml_gpt_train_step(g, og, ids, targets, NULL), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "loss is NULL"));
        CHECK_OK(ctx, wgml_gpt_train_step(g, og, ids, targets, &lg));
        CHECK_OK(ctx, wgml_gpt_train_step(twin, ot, ids, targets, &lt));
        float ng = -1, nt = -2;
        CHECK_OK(ctx, wgml_optimizer_grad_norm(og, &ng));
        CHECK_OK(ctx, wgml_optimizer_grad_norm(ot, &nt));
        CHECK(lg == lt && ng == nt);
    }
    if (oo) {
        char spath[256];
        scratch_path(spath, sizeof spath, "foreign");
        CHECK_STATUS(ctx, wgml_gpt_save(g, spath, oo), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "wgml_gpt_save: the optimizer is not this model's"));
        wgml_tensor *m = NULL;
        CHECK_STATUS(ctx, wgml_optimizer_state(oo, 0, &m, NULL), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "m or v is NULL"));
        CHECK_STATUS(ctx, wgml_optimizer_state(oo, 99999, &m, &m), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "parameter 99999 is not one of its"));
        wgml_tensor_free(m);
    }
    CHECK_STATUS(ctx, wgml_gpt_eval_loss(g, ids, targets, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "loss is NULL"));
    CHECK_STATUS(ctx, wgml_gpt_optimizer(g, NULL, &og), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "desc is NULL"));
    wgml_clear_error(ctx);
    wgml_optimizer_free(og), wgml_optimizer_free(ot), wgml_optimizer_free(oo);
    wgml_gpt_delete(twin), wgml_gpt_delete(other);
    wgml_tensor_free(ids), wgml_tensor_free(targets), wgml_tensor_free(flat), wgml_tensor_free(ids1), wgml_tensor_free(long_ids);

    /* the parameter table of a config without heads, or of none: no division by 0, no crash */
    wgml_gpt_config unresolved = {.vocab = 16, .block = 8, .layers = 1, .width = 16};
    CHECK(wgml_gpt_numel(&unresolved) >= 0 && wgml_gpt_numel(NULL) == 0);
    char pname[WGML_GPT_NAME] = "x";
    int nd = -1;
    int64_t shp[2] = {-1, -1};
    wgml_gpt_param_info(NULL, 0, pname, &nd, shp);
    CHECK(pname[0] == 0 && nd == 0 && shp[0] == 0);
    wgml_gpt_param_info(&cfg, 0, NULL, NULL, NULL);
    wgml_gpt_delete(g);
    wgml_gpt_delete(NULL);
}

/* A step whose work never ran (its submit refused) leaves nothing for the next: neither its
   gradients (batch A's, which the next step on batch B would add to its own) nor a counted
   step, so the model then trains as one that never tried: the same loss and weights */
static void a_failed_step_leaves_nothing(void)
{
    wgml_context *ctx = test_context();
    /* GPT-2, Llama, GPT-2 in mixed precision (its loss scaling) */
    for (int a = 0; a < 3; a++) {
        wgml_gpt_config cfg = small_config(a == 1 ? WGML_GPT_LLAMA : WGML_GPT_GPT2);
        wgml_gpt *g = NULL, *h = NULL;
        CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 7, &g));
        CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 7, &h));
        if (!g || !h) {
            wgml_gpt_delete(g), wgml_gpt_delete(h);
            return;
        }
        /* (a large rate: Adam's first update is about lr times the gradient's sign, so batch
           A's gradients left in would flip some of B's steps by 2 lr) */
        wgml_gpt_train_desc d = {.lr = 1e-2f, .max_grad_norm = 1.0f, .precision = a == 2 ? WGML_PRECISION_MIXED : WGML_PRECISION_F32};
        wgml_optimizer *og = NULL, *oh = NULL;
        const wgml_status made = wgml_gpt_optimizer(g, &d, &og);
        if (a == 2 && made == WGML_ERROR_UNSUPPORTED) { /* (an adapter without shader-f16) */
            wgml_clear_error(ctx);
            wgml_gpt_delete(g), wgml_gpt_delete(h);
            continue;
        }
        CHECK_OK(ctx, made);
        CHECK_OK(ctx, wgml_gpt_optimizer(h, &d, &oh));
        wgml_tensor *ia = random_ids(ctx, B, T), *ta = random_ids(ctx, B, T), *ib = random_ids(ctx, B, T),
                    *tb = random_ids(ctx, B, T);
        float la = 0, lg = 0, lh = 0;
        wgml_debug_fail_submits(ctx, 0, 1);
        CHECK_STATUS(ctx, wgml_gpt_train_step(g, og, ia, ta, &la), WGML_ERROR_DEVICE);
        CHECK(test_message_has(ctx, "on purpose"));
        CHECK(wgml_optimizer_steps(og) == 0);
        CHECK_OK(ctx, wgml_gpt_train_step(g, og, ib, tb, &lg));
        CHECK_OK(ctx, wgml_gpt_train_step(h, oh, ib, tb, &lh));
        CHECK(wgml_optimizer_steps(og) == 1 && wgml_optimizer_steps(oh) == 1);
        CHECK(lg == lh && isfinite(lg));
        CHECK(same_weights(ctx, g, h));
        /* and one more each: still the same */
        CHECK_OK(ctx, wgml_gpt_train_step(g, og, ia, ta, &lg));
        CHECK_OK(ctx, wgml_gpt_train_step(h, oh, ia, ta, &lh));
        CHECK(lg == lh);
        CHECK(same_weights(ctx, g, h));
        /* the step's submit through, its loss's read refused: said so, and the step counted */
        wgml_debug_fail_submits(ctx, 1, 1);
        CHECK_STATUS(ctx, wgml_gpt_train_step(g, og, ib, tb, &lg), WGML_ERROR_DEVICE);
        CHECK(test_message_has(ctx, "the step was taken (step 3)") && test_message_has(ctx, "on purpose"));
        CHECK(wgml_optimizer_steps(og) == 3);
        wgml_debug_fail_submits(ctx, 0, 0);
        wgml_optimizer_free(og), wgml_optimizer_free(oh);
        wgml_gpt_delete(g), wgml_gpt_delete(h);
        wgml_tensor_free(ia), wgml_tensor_free(ta), wgml_tensor_free(ib), wgml_tensor_free(tb);
    }
}

/* A tensor holding an error (a refused op's result) is no storage: writes, training and
   requires_grad refuse it with its message instead of reading a buffer it does not have */
static void error_tensors_are_refused(void)
{
    wgml_context *ctx = test_context();
    float x[3] = {1, 2, 3};
    wgml_tensor *w = test_tensor(ctx, 1, (int64_t[1]){3}, x);
    wgml_tensor *e = wgml_add(ctx, w, NULL), *c = wgml_contiguous(ctx, e);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_write(e, x, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "holds an error"));
    CHECK_STATUS(ctx, wgml_tensor_write(c, x, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_write_i32(e, (int32_t[1]){1}, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_requires_grad(e, 1), WGML_ERROR_INVALID_ARGUMENT);
    wgml_optimizer *o = NULL;
    const wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 0.1f};
    CHECK_STATUS(ctx, wgml_optimizer_create(ctx, &d, 1, &e, &o), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(o == NULL && test_message_has(ctx, "parameter 0 holds an error"));
    /* nor is an i32 tensor a parameter */
    wgml_tensor *i = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 1, (int64_t[1]){3}, (int32_t[3]){1, 2, 3}, 3, &i));
    CHECK_STATUS(ctx, wgml_optimizer_create(ctx, &d, 1, &i, &o), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(o == NULL && test_message_has(ctx, "is i32; parameters are f32"));
    wgml_clear_error(ctx);
    wgml_tensor_free(i), wgml_tensor_free(c), wgml_tensor_free(e), wgml_tensor_free(w);
}

int main(void)
{
    TEST_RUN(save_load_and_resume);
    TEST_RUN(generation_is_the_forward_argmax);
    TEST_RUN(nucleus_sampling);
    TEST_RUN(dropout_set_on_a_model);
    TEST_RUN(bad_input_is_refused);
    TEST_RUN(error_tensors_are_refused);
    TEST_RUN(a_failed_step_leaves_nothing);
    test_context_release();
    return test_summary();
}
