/*
 * The GPT of src/models/gpt.h end to end on the GPU against the CPU reference in double
 * (tests/gpt_ref.c): 30 AdamW steps (warm-up, cosine decay, weight decay on the matrices,
 * clipping) from the same weights on the same batches give the same loss at every step
 * within 1e-3 relative, for GPT-2 and for Llama with grouped K/V heads; greedy generation
 * through the KV cache gives the reference's tokens; a checkpoint written and resumed gives
 * bit-identical losses (dropout on, so the generator's state must travel too); the sampler
 * draws from softmax(logits / temperature) restricted to the top k; bad checkpoints, configs
 * and text are refused with messages; a GPT-2 step's launches besides GEMMs stay within
 * bounds (counted from the profile, f32 and mixed).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpt_ref.h"
#include "harness.h"
#include "io/text.h"
#include "models/gpt.h"
#include "models/gpt_checkpoint.h"

enum { B = 4, T = 16, STEPS = 30 };

/* A text of English-like words from a fixed list, so the vocabulary and batches are real. */
static void make_text(wgml_text *text)
{
    static const char *const words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "Why ", "not? ", "GPUs ", "run ",
                                        "fast, ", "and ", "we ", "test ", "them!\n", "Quiet; ", "zebra ", "jumps "};
    char buf[6000];
    size_t len = 0;
    uint64_t s = 99;
    while (len < sizeof buf - 16) {
        s = wgml_text_mix(s);
        const char *w = words[s % (sizeof words / sizeof words[0])];
        memcpy(buf + len, w, strlen(w));
        len += strlen(w);
    }
    char err[128];
    CHECK(wgml_text_from_bytes((const uint8_t *)buf, len, text, err, sizeof err) == WGML_OK);
}

/* Host weights: matrices uniform +-0.15, biases +-0.05, norm weights 1 +-0.1. */
static float **make_weights(const wgml_gpt_config *c)
{
    int np = wgml_gpt_param_count(c);
    float **p = calloc((size_t)np, sizeof *p);
    for (int i = 0; i < np; i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t s[2];
        wgml_gpt_param_info(c, i, name, &nd, s);
        size_t n = (size_t)(s[0] * (nd == 2 ? s[1] : 1));
        p[i] = malloc(n * sizeof(float));
        int norm = nd == 1 && strstr(name, ".w");
        test_fill_uniform(p[i], n, nd == 2 ? -0.15f : norm ? 0.9f : -0.05f, nd == 2 ? 0.15f : norm ? 1.1f : 0.05f);
    }
    return p;
}

static void free_weights(const wgml_gpt_config *c, float **p)
{
    for (int i = 0; i < wgml_gpt_param_count(c); i++) free(p[i]);
    free(p);
}

static wgml_gpt_train_desc train_desc(void)
{
    return (wgml_gpt_train_desc){.lr = 1e-2f, .weight_decay = 0.1f, .max_grad_norm = 0.5f,
                                 .schedule = {.warmup_steps = 3, .total_steps = STEPS, .min_lr_ratio = 0.1f,
                                              .decay = WGML_LR_DECAY_COSINE}};
}

/* Uploads batch i of the training split into ids and targets (created on first use). */
static void batch(wgml_context *ctx, const wgml_text *text, int64_t i, int32_t *x, int32_t *y, wgml_tensor **ids,
                  wgml_tensor **targets)
{
    char err[128];
    CHECK(wgml_text_batch(text, 0, 7, i, B, T, x, y, err, sizeof err) == WGML_OK);
    int64_t bt[2] = {B, T};
    if (!*ids) {
        CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 2, bt, x, B * T, ids));
        CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 2, bt, y, B * T, targets));
    } else {
        CHECK_OK(ctx, wgml_tensor_write_i32(*ids, x, B * T));
        CHECK_OK(ctx, wgml_tensor_write_i32(*targets, y, B * T));
    }
}

static void training_matches_reference(wgml_gpt_arch arch)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_text text;
    make_text(&text);
    wgml_gpt_config c = {.arch = arch, .vocab = text.vocab_size, .block = T, .layers = 2, .heads = 2, .width = 32,
                         .kv_heads = arch == WGML_GPT_LLAMA ? 1 : 0};
    char err[256];
    CHECK(wgml_gpt_config_resolve(&c, &c, err, sizeof err) == WGML_OK);
    float **w = make_weights(&c);
    wgml_gpt g;
    CHECK_OK(ctx, wgml_gpt_create(ctx, &c, (const float *const *)w, &g));
    gpt_ref *ref = gpt_ref_create(&c, (const float *const *)w);
    wgml_optimizer *opt = NULL;
    wgml_gpt_train_desc d = train_desc();
    CHECK_OK(ctx, wgml_gpt_optimizer(&g, &d, &opt));
    int32_t x[B * T], y[B * T];
    wgml_tensor *ids = NULL, *targets = NULL;
    double worst = 0, first = 0, last = 0;
    for (int s = 0; s < STEPS && opt; s++) {
        batch(ctx, &text, s, x, y, &ids, &targets);
        float loss = NAN;
        CHECK_OK(ctx, wgml_gpt_train_step(&g, opt, ids, targets, &loss));
        double want = gpt_ref_loss(ref, x, y, B, T, 1);
        gpt_ref_adamw_step(ref, &d, s);
        double rel = fabs(loss - want) / fabs(want);
        if (rel > worst) worst = rel;
        if (!(rel <= 1e-3)) FAILF("%s step %d: loss %.7g, reference %.7g (relative %.2g)", arch ? "llama" : "gpt2", s + 1, (double)loss, want, rel);
        if (s == 0) first = want;
        last = want;
    }
    fprintf(stderr, "  %s: 30 steps, loss %.4f -> %.4f, worst relative difference %.2g\n", arch ? "llama" : "gpt2", first, last, worst);
    CHECK(last < first - 0.3); /* it learnt something: the check compares a moving target */

    /* greedy generation through the KV cache, from the initial weights on both sides */
    wgml_gpt g0;
    CHECK_OK(ctx, wgml_gpt_create(ctx, &c, (const float *const *)w, &g0));
    gpt_ref *ref0 = gpt_ref_create(&c, (const float *const *)w);
    enum { PROMPT = 3, NEW = 12 };
    int32_t hist[2][PROMPT + NEW], want[PROMPT + NEW];
    for (int run = 0; run < 2; run++) {
        memcpy(hist[run], x, PROMPT * sizeof(int32_t));
        wgml_gpt_cache cache;
        CHECK_OK(ctx, wgml_gpt_cache_init(&g0, &cache));
        int64_t have = PROMPT, fresh = PROMPT;
        for (int k = 0; k < NEW; k++) {
            int32_t tok = -1;
            CHECK_OK(ctx, wgml_gpt_generate_step(&g0, &cache, hist[run], have, fresh, 0.0f, 0, &tok));
            hist[run][have++] = tok;
            fresh = 1;
        }
        CHECK(cache.len == PROMPT + NEW - 1);
        wgml_gpt_cache_free(&cache, c.layers);
    }
    gpt_ref_greedy(ref0, x, PROMPT, NEW, want);
    CHECK(memcmp(hist[0], hist[1], sizeof hist[0]) == 0); /* deterministic */
    int same = 0;
    for (int k = 0; k < NEW; k++) same += hist[0][PROMPT + k] == want[PROMPT + k];
    if (same != NEW) {
        FAILF("greedy tokens differ from the reference's in %d of %d places", NEW - same, NEW);
        for (int k = 0; k < NEW; k++) fprintf(stderr, "    %d: %d vs %d\n", k, hist[0][PROMPT + k], want[PROMPT + k]);
    }
    /* past the block the window slides (the cache restarts from the last block / 2 tokens):
       each token is still the reference's argmax over the context the cache holds, the
       positions of a restarted window included */
    int32_t longer[3 * T];
    memcpy(longer, x, PROMPT * sizeof(int32_t));
    wgml_gpt_cache cache;
    CHECK_OK(ctx, wgml_gpt_cache_init(&g0, &cache));
    int64_t have = PROMPT, fresh = PROMPT;
    int slides = 0, wrong = 0;
    double *logits = malloc((size_t)(T * c.vocab) * sizeof *logits);
    while (have < 3 * T) {
        int32_t tok = -1;
        int64_t before = cache.len;
        CHECK_OK(ctx, wgml_gpt_generate_step(&g0, &cache, longer, have, fresh, 0.0f, 0, &tok));
        CHECK(tok >= 0 && tok < c.vocab && cache.len <= T);
        slides += cache.len < before;
        int n = (int)cache.len; /* the context the step saw: the last n tokens */
        gpt_ref_logits(ref0, longer + have - n, n, logits);
        const double *last = logits + (size_t)(n - 1) * (size_t)c.vocab;
        int best = 0;
        for (int v = 1; v < c.vocab; v++) best = last[v] > last[best] ? v : best;
        wrong += tok != best;
        longer[have++] = tok, fresh = 1;
    }
    free(logits);
    if (wrong) FAILF("%d of %d tokens past the block differ from the reference's argmax", wrong, 3 * T - PROMPT);
    CHECK(slides >= 2);
    wgml_gpt_cache_free(&cache, c.layers);

    gpt_ref_free(ref0), gpt_ref_free(ref);
    wgml_gpt_free(&g0), wgml_gpt_free(&g);
    wgml_tensor_free(ids), wgml_tensor_free(targets);
    wgml_optimizer_free(opt);
    free_weights(&c, w);
    wgml_text_free(&text);
}

static void gpt2_training_matches_reference(void) { training_matches_reference(WGML_GPT_GPT2); }
static void llama_training_matches_reference(void) { training_matches_reference(WGML_GPT_LLAMA); }

/* Trains steps [from, to) of a run, recording the losses. */
static void train_steps(wgml_context *ctx, wgml_gpt *g, wgml_optimizer *opt, const wgml_text *text, int from, int to, float *losses)
{
    int32_t x[B * T], y[B * T];
    wgml_tensor *ids = NULL, *targets = NULL;
    for (int s = from; s < to; s++) {
        batch(ctx, text, s, x, y, &ids, &targets);
        CHECK_OK(ctx, wgml_gpt_train_step(g, opt, ids, targets, &losses[s]));
    }
    wgml_tensor_free(ids), wgml_tensor_free(targets);
}

static void resume_gives_identical_losses(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_text text;
    make_text(&text);
    wgml_gpt_config c = {.arch = WGML_GPT_LLAMA, .vocab = text.vocab_size, .block = T, .layers = 2, .heads = 2, .width = 32,
                         .dropout = 0.1f};
    wgml_gpt_train_desc d = train_desc();
    enum { N = 10, HALF = 4 };
    float straight[N], resumed[N];
    char path[] = "/tmp/wgml_test_gpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    wgml_gpt_run run = {.seed = 7, .lr = d.lr, .weight_decay = d.weight_decay, .max_grad_norm = d.max_grad_norm, .beta1 = 0.9f,
                        .beta2 = 0.99f, .batch = B, .eval_batches = 1, .total_steps = STEPS, .warmup = 3, .min_lr_ratio = 0.1f};
    for (int pass = 0; pass < 2; pass++) {
        wgml_gpt g;
        wgml_optimizer *opt = NULL;
        CHECK_OK(ctx, wgml_gpt_init(ctx, &c, 5, &g));
        CHECK_OK(ctx, wgml_gpt_optimizer(&g, &d, &opt));
        float *losses = pass ? resumed : straight;
        if (!pass) {
            train_steps(ctx, &g, opt, &text, 0, N, losses);
        } else {
            train_steps(ctx, &g, opt, &text, 0, HALF, losses);
            CHECK_OK(ctx, wgml_rng_get_state(ctx, &run.rng_seed, &run.rng_offset));
            CHECK_OK(ctx, wgml_gpt_checkpoint_save(path, &g, opt, HALF, &run, text.vocab, text.vocab_size));
            wgml_optimizer_free(opt), wgml_gpt_free(&g);
            CHECK_OK(ctx, wgml_manual_seed(ctx, 12345)); /* the generator elsewhere: the file must bring it back */
            wgml_gpt_checkpoint ck;
            CHECK_OK(ctx, wgml_gpt_checkpoint_read(ctx, path, &ck));
            CHECK(ck.step == HALF && ck.has_moments && ck.vocab_size == text.vocab_size && ck.cfg.dropout == c.dropout &&
                  ck.cfg.kv_heads == 2 && ck.run.rng_offset == run.rng_offset);
            CHECK_OK(ctx, wgml_gpt_checkpoint_model(ctx, &ck, &g));
            CHECK_OK(ctx, wgml_gpt_optimizer(&g, &d, &opt));
            CHECK_OK(ctx, wgml_gpt_checkpoint_restore_optimizer(&ck, &g, opt));
            CHECK_OK(ctx, wgml_rng_set_state(ctx, ck.run.rng_seed, ck.run.rng_offset));
            wgml_gpt_checkpoint_free(&ck);
            train_steps(ctx, &g, opt, &text, HALF, N, losses);
        }
        wgml_optimizer_free(opt), wgml_gpt_free(&g);
    }
    int differ = 0;
    for (int s = 0; s < N; s++) differ += memcmp(&straight[s], &resumed[s], sizeof(float)) != 0;
    if (differ) {
        FAILF("%d of %d losses differ after resuming at step %d", differ, N, HALF);
        for (int s = 0; s < N; s++) fprintf(stderr, "    step %d: %.9g vs %.9g\n", s + 1, (double)straight[s], (double)resumed[s]);
    }

    /* a weight that is not finite: refused, naming it */
    {
        wgml_st_file f0;
        char e0[256];
        CHECK(wgml_safetensors_read(path, &f0, e0, sizeof e0) == WGML_OK);
        const char **mk = malloc((size_t)f0.meta_count * sizeof *mk), **mv = malloc((size_t)f0.meta_count * sizeof *mv);
        for (int i = 0; i < f0.meta_count; i++) mk[i] = f0.meta_keys[i], mv[i] = f0.meta_values[i];
        wgml_st_tensor *w0 = (wgml_st_tensor *)wgml_st_find(&f0, "h.1.mlp.wd");
        CHECK(w0 != NULL);
        if (w0) w0->data[5] = NAN;
        char bad[512];
        snprintf(bad, sizeof bad, "%s.nan", path);
        CHECK(wgml_safetensors_write(bad, f0.tensors, f0.count, mk, mv, f0.meta_count, e0, sizeof e0) == WGML_OK);
        wgml_gpt_checkpoint ckn;
        CHECK(wgml_gpt_checkpoint_read(ctx, bad, &ckn) == WGML_ERROR_FORMAT);
        CHECK(test_message_has(ctx, "h.1.mlp.wd") && test_message_has(ctx, "element 5"));
        remove(bad);
        free(mk), free(mv);
        wgml_st_file_free(&f0);
    }
    /* bad files: truncated, another format, a tensor of the wrong shape */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)len);
    CHECK(fread(bytes, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    f = fopen(path, "wb");
    fwrite(bytes, 1, (size_t)len - 100, f);
    fclose(f);
    wgml_gpt_checkpoint ck;
    CHECK(wgml_gpt_checkpoint_read(ctx, path, &ck) == WGML_ERROR_FORMAT);
    CHECK(test_message_has(ctx, path));
    free(bytes);
    /* an MLP-like file that is not ours */
    wgml_st_tensor one = {.name = "W0", .ndim = 1, .shape = {1}, .data = (float[1]){1.0f}};
    const char *k[1] = {"step"}, *v[1] = {"0"};
    char err[256];
    CHECK(wgml_safetensors_write(path, &one, 1, k, v, 1, err, sizeof err) == WGML_OK);
    CHECK(wgml_gpt_checkpoint_read(ctx, path, &ck) == WGML_ERROR_FORMAT);
    CHECK(test_message_has(ctx, "not a wgml GPT checkpoint"));
    CHECK(wgml_gpt_checkpoint_read(ctx, "/nonexistent/x.safetensors", &ck) == WGML_ERROR_IO);
    remove(path);
    wgml_text_free(&text);
    wgml_clear_error(ctx);
}

/* Draws from softmax(logits / temperature) over the top k, on the GPU. */
static void sampler_draws_from_softmax(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { V = 7, DRAWS = 3000 };
    const float logits[V] = {1.0f, 2.0f, 0.5f, 2.5f, -1.0f, 1.5f, 0.0f};
    int64_t s[2] = {1, V};
    wgml_tensor *l = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, s, logits, V, &l));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 3));
    const float temps[2] = {1.0f, 0.5f};
    const int ks[2] = {0, 3};
    for (int c = 0; c < 2; c++) {
        int count[V] = {0};
        for (int i = 0; i < DRAWS; i++) {
            wgml_scope_begin(ctx);
            int32_t tok = -1;
            CHECK_OK(ctx, wgml_tensor_read_i32(wgml_gpt_sample_logits(ctx, l, temps[c], ks[c]), &tok, 1));
            if (tok >= 0 && tok < V) count[tok]++;
            wgml_scope_end(ctx);
        }
        /* expected: softmax over the allowed (top k: indices 3, 1, 5) */
        double p[V], z = 0;
        for (int j = 0; j < V; j++) {
            int allowed = !ks[c] || j == 3 || j == 1 || j == 5;
            p[j] = allowed ? exp(logits[j] / temps[c]) : 0;
            z += p[j];
        }
        double chi2 = 0;
        for (int j = 0; j < V; j++) {
            p[j] /= z;
            if (p[j] == 0) {
                if (count[j]) FAILF("token %d drawn %d times outside the top %d", j, count[j], ks[c]);
                continue;
            }
            double e = p[j] * DRAWS;
            chi2 += (count[j] - e) * (count[j] - e) / e;
        }
        /* chi-square with at most 6 degrees of freedom: 22.5 is its 0.999 quantile */
        if (!(chi2 < 22.5)) FAILF("temperature %g, top-k %d: chi-square %.1f against softmax", (double)temps[c], ks[c], chi2);
    }
    /* temperature 0: the argmax; top-k 1 at any temperature: the argmax too */
    for (int i = 0; i < 5; i++) {
        wgml_scope_begin(ctx);
        int32_t a = -1, b = -1;
        CHECK_OK(ctx, wgml_tensor_read_i32(wgml_gpt_sample_logits(ctx, l, 0.0f, 0), &a, 1));
        CHECK_OK(ctx, wgml_tensor_read_i32(wgml_gpt_sample_logits(ctx, l, 2.0f, 1), &b, 1));
        CHECK(a == 3 && b == 3);
        wgml_scope_end(ctx);
    }
    wgml_tensor_free(l);
}

/* The text, a small GPT-2 (dropout 0.1) and its optimiser at precision (NULL on failure) */
static wgml_optimizer *small_gpt(wgml_context *ctx, wgml_text *text, int layers, wgml_precision precision, wgml_gpt *g)
{
    make_text(text);
    wgml_gpt_config c = {.arch = WGML_GPT_GPT2, .vocab = text->vocab_size, .block = T, .layers = layers, .heads = 2,
                         .width = 32, .dropout = 0.1f};
    wgml_optimizer *opt = NULL;
    wgml_gpt_train_desc d = train_desc();
    d.precision = precision;
    CHECK_OK(ctx, wgml_gpt_init(ctx, &c, 5, g));
    CHECK_OK(ctx, wgml_gpt_optimizer(g, &d, &opt));
    return opt;
}

/* Launches of one GPT-2 training step by kind, from the profile (WGML_PROFILE's file) of two
   steps of a context of its own. The step's non-GEMM launches are what a step costs past
   its matrix work at the nanoGPT size (a launch costs >= ~13 us on the H200 however small):
   the gradients' squared norm is one pass over the optimiser's flat buffer plus one sum;
   the QKV projection is one GEMM whose output's windows are the heads, so its gradient is
   one tensor, which the attention's gradient kernels write in place (no copies), with no
   zero-padded spreads (relu_grad); the weights' gradients land in their slots
   without a copy; a norm weight's gradient is summed from its _grad kernel's second output,
   with no norm computed again and no product; the attention writes [B,T,H,D], so neither its
   output nor its gradient is copied between head layouts. Counts past the bounds below mean
   one of those came undone. */
static void step_launches_stay_few(wgml_precision precision)
{
    char path[TEST_PROFILE_PATH];
    wgml_context *ctx = test_profiled_context(path);
    if (!ctx) return;
    if (precision == WGML_PRECISION_MIXED && wgml_set_compute_precision(ctx, precision) != WGML_OK) {
        fprintf(stderr, "  (no mixed precision on this adapter: %s)\n", wgml_error_message(ctx));
        wgml_context_free(ctx);
        unlink(path);
        return;
    }
    wgml_set_compute_precision(ctx, WGML_PRECISION_F32);
    wgml_text text;
    enum { LAYERS = 2, STEPS_HERE = 2 };
    wgml_gpt g;
    wgml_optimizer *opt = small_gpt(ctx, &text, LAYERS, precision, &g);
    float losses[STEPS_HERE];
    if (opt) train_steps(ctx, &g, opt, &text, 0, STEPS_HERE, losses);
    wgml_optimizer_free(opt);
    wgml_gpt_free(&g);
    wgml_text_free(&text);
    wgml_context_free(ctx); /* writes the profile */
    /* by name: the GEMMs and the initial weights apart */
    long other = test_profile_count(path, "") - test_profile_count(path, "matmul") - test_profile_count(path, "randn");
    long norm = test_profile_count(path, "the squared gradient norm"), relu_grad = test_profile_count(path, "relu_grad");
    long contiguous = test_profile_count(path, "contiguous"), concat = test_profile_count(path, "concat");
    long sums = test_profile_count(path, "sum over"), norms = test_profile_count(path, "layernorm of");
    long casts = test_profile_count(path, "cast_"), adds = test_profile_count(path, "add of");
    unlink(path);
    fprintf(stderr, "  %s, %d layers: a step launches %ld kernels besides GEMMs (%ld sums, %ld contiguous, %ld concat, %ld relu_grad, "
            "%ld casts, %ld adds, %ld norms)\n", precision == WGML_PRECISION_MIXED ? "mixed" : "f32", LAYERS, other / STEPS_HERE, sums / STEPS_HERE,
            contiguous / STEPS_HERE, concat / STEPS_HERE, relu_grad / STEPS_HERE, casts / STEPS_HERE, adds / STEPS_HERE, norms / STEPS_HERE);
    CHECK(norm == STEPS_HERE);
    CHECK(relu_grad <= STEPS_HERE);                   /* the positions' window of wpe only */
    CHECK(contiguous == 0); /* (2 a layer, the attention's output and its gradient, before out_bthd) */
    /* the forward's residual adds (kept by the dropout between each GEMM and its add), the
       embeddings' sum, the tied embedding's two gradients; the backward's sums of the
       residual's and a norm's gradient are in the norms' gradient kernels (2 a layer more
       before) */
    CHECK(adds <= (2 * LAYERS + 2) * STEPS_HERE);
    CHECK(concat == 0); /* (3 a layer, d(qkv)'s parts into place, before the kernels wrote it packed) */
    /* each layer's 8 biases and norm weights, the final norm's 2, wpe's, the loss's mean, the norm's */
    CHECK(sums <= (8 * LAYERS + 5) * STEPS_HERE);
    /* the forward's; f32 computes ln1's and ln2's outputs again for the weights' gradients,
       mixed precision keeps them as halves */
    CHECK(norms <= (2 * LAYERS + 1 + (precision == WGML_PRECISION_MIXED ? 0 : 2 * LAYERS)) * STEPS_HERE);
    /* 77 today besides casts (f32), 6 fewer since d(qkv) is written packed, 211 before these
       cuts */
    CHECK(other - casts <= 79 * STEPS_HERE);
    /* mixed precision: a layer's 4 matmul weights once a step, the gradient each of its matmuls'
       backward reads but the QKV GEMM's (the attention's gradient kernels store it as halves),
       the GELU's recomputed one, the attention's output; the LM head's and the final norm's few;
       f32 one */
    CHECK(casts <= (precision == WGML_PRECISION_MIXED ? 9 * LAYERS + 4 : 1) * STEPS_HERE);
}

/* Steps after the first few make no bind groups: the step's graph gets the same pool buffers
   each time (free buffers taken in the order they were made) and the bind-group cache holds them
   all (a direct-mapped one of 512 lost a third of them to collisions, LIFO free lists nearly
   all) */
static void repeated_steps_make_no_bind_groups(wgml_precision precision)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    if (precision == WGML_PRECISION_MIXED && wgml_set_compute_precision(ctx, precision) != WGML_OK) {
        fprintf(stderr, "  (no mixed precision on this adapter: %s)\n", wgml_error_message(ctx));
        wgml_clear_error(ctx);
        return;
    }
    wgml_set_compute_precision(ctx, WGML_PRECISION_F32);
    wgml_text text;
    enum { STEPS_HERE = 5 };
    wgml_gpt g;
    wgml_optimizer *opt = small_gpt(ctx, &text, 6, precision, &g);
    float losses[STEPS_HERE];
    uint64_t made[STEPS_HERE + 1], dispatched[STEPS_HERE + 1];
    wgml_stats st;
    CHECK_OK(ctx, wgml_stats_get(ctx, &st));
    made[0] = st.bind_groups_created, dispatched[0] = st.dispatches;
    for (int s = 0; opt && s < STEPS_HERE; s++) {
        train_steps(ctx, &g, opt, &text, s, s + 1, losses);
        CHECK_OK(ctx, wgml_stats_get(ctx, &st));
        made[s + 1] = st.bind_groups_created, dispatched[s + 1] = st.dispatches;
    }
    fprintf(stderr, "  %s: bind groups made a step %llu, %llu ... %llu of %llu dispatches\n",
            precision == WGML_PRECISION_MIXED ? "mixed" : "f32", (unsigned long long)(made[1] - made[0]),
            (unsigned long long)(made[2] - made[1]), (unsigned long long)(made[STEPS_HERE] - made[STEPS_HERE - 1]),
            (unsigned long long)(dispatched[STEPS_HERE] - dispatched[STEPS_HERE - 1]));
    CHECK(dispatched[STEPS_HERE] - dispatched[STEPS_HERE - 1] > 100);
    CHECK(made[STEPS_HERE] == made[STEPS_HERE - 2]);
    wgml_optimizer_free(opt);
    wgml_gpt_free(&g);
    wgml_text_free(&text);
}

static void f32_steps_make_no_bind_groups(void) { repeated_steps_make_no_bind_groups(WGML_PRECISION_F32); }
static void mixed_steps_make_no_bind_groups(void) { repeated_steps_make_no_bind_groups(WGML_PRECISION_MIXED); }

static void f32_step_launches_stay_few(void) { step_launches_stay_few(WGML_PRECISION_F32); }
static void mixed_step_launches_stay_few(void) { step_launches_stay_few(WGML_PRECISION_MIXED); }

static void bad_configs_and_text_are_refused(void)
{
    char err[256];
    wgml_gpt_config c = {.arch = WGML_GPT_GPT2, .vocab = 10, .block = 8, .layers = 1, .heads = 3, .width = 32}, out;
    CHECK(wgml_gpt_config_resolve(&c, &out, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "heads = 3"));
    c.heads = 2, c.arch = WGML_GPT_LLAMA, c.kv_heads = 3;
    CHECK(wgml_gpt_config_resolve(&c, &out, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "kv_heads = 3"));
    c.kv_heads = 0, c.width = 2 * 129;
    CHECK(wgml_gpt_config_resolve(&c, &out, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "head size"));
    c.width = 32, c.dropout = 1.0f;
    CHECK(wgml_gpt_config_resolve(&c, &out, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "dropout"));
    c.dropout = 0;
    CHECK(wgml_gpt_config_resolve(&c, &out, err, sizeof err) == WGML_OK && out.ffn == 96 && out.kv_heads == 2);

    wgml_text t;
    CHECK(wgml_text_load("/nonexistent/folder", &t, err, sizeof err) == WGML_ERROR_IO && strstr(err, "/nonexistent/folder"));
    CHECK(wgml_text_from_bytes((const uint8_t *)"", 0, &t, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_text_from_bytes((const uint8_t *)"abcabcabcab", 11, &t, err, sizeof err) == WGML_OK);
    CHECK(t.vocab_size == 3 && t.n == 11 && t.n_train == 9 && t.tokens[3] == 0 && t.tokens[4] == 1);
    int32_t x[8], y[8];
    CHECK(wgml_text_batch(&t, 1, 1, 0, 1, 4, x, y, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "validation"));
    CHECK(wgml_text_batch(&t, 0, 1, 0, 2, 4, x, y, err, sizeof err) == WGML_OK);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 3; i++) CHECK(y[r * 4 + i] == x[r * 4 + i + 1]);
    /* the generator of text.h: batch row r of batch i depends on (seed, split, i, r) only */
    uint64_t u = wgml_text_mix(wgml_text_mix(1 + 0) + 0 * 2 + 1);
    CHECK(x[4] == t.tokens[u % (uint64_t)(t.n_train - 4)]);
    wgml_text_free(&t);
}

/* A folder's texts: fortunes' index files (NAME.dat beside NAME) are skipped and a file of
   several names (links, a chain of them, hard links) is read once; another .dat file and a
   link to a file elsewhere are texts */
static void text_folder_skips_indexes_and_aliases_only(void)
{
    char dir[] = "/tmp/wgml_text_XXXXXX", outside[] = "/tmp/wgml_text_out_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    int fd = mkstemp(outside);
    CHECK(fd >= 0 && write(fd, "mn", 2) == 2);
    close(fd);
    const char *files[][2] = {{"a", "xy"}, {"a.dat", "INDEX"}, {"b.dat", "pq"}, {".hidden", "HIDDEN"}};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
        FILE *f = fopen(path, "wb");
        CHECK(f && fputs(files[i][1], f) >= 0);
        if (f) fclose(f);
    }
    snprintf(path, sizeof path, "%s/c.u8", dir);
    CHECK(symlink("a", path) == 0);
    snprintf(path, sizeof path, "%s/d", dir);
    CHECK(symlink(outside, path) == 0);
    snprintf(path, sizeof path, "%s/e", dir);
    CHECK(symlink("d", path) == 0);
    char first[256];
    snprintf(first, sizeof first, "%s/b.dat", dir);
    snprintf(path, sizeof path, "%s/f", dir);
    CHECK(link(first, path) == 0);
    wgml_text t;
    char err[256];
    CHECK(wgml_text_load(dir, &t, err, sizeof err) == WGML_OK);
    CHECK(t.files == 3 && t.n == 6); /* a, b.dat, d: "xypqmn" */
    wgml_text_free(&t);
    const char *names[] = {"a", "a.dat", "b.dat", ".hidden", "c.u8", "d", "e", "f"};
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    unlink(outside);
}

int main(void)
{
    TEST_RUN(bad_configs_and_text_are_refused);
    TEST_RUN(text_folder_skips_indexes_and_aliases_only);
    TEST_RUN(f32_steps_make_no_bind_groups);
    TEST_RUN(mixed_steps_make_no_bind_groups);
    TEST_RUN(gpt2_training_matches_reference);
    TEST_RUN(llama_training_matches_reference);
    TEST_RUN(resume_gives_identical_losses);
    TEST_RUN(sampler_draws_from_softmax);
    TEST_RUN(f32_step_launches_stay_few);
    TEST_RUN(mixed_step_launches_stay_few);
    return test_summary();
}
