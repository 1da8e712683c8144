/*
 * wgml bench gpt: the GPT of `wgml gpt train` (src/models/gpt.h), timed.
 *   - a training step (forward, backward, AdamW with clipping, the loss read back): median
 *     ms and tokens/s, and the GPU memory the step holds at its peak; in f32, then in mixed
 *     precision (`_mixed` rows: f16 matmuls with f32 sums, dynamic loss scaling);
 *   - generation at batch 1 with the KV cache (one submit and a 4-byte read per token),
 *     tokens/s.
 * `wgml bench train`: the training steps alone, of the nanoGPT setup and at GPT-2 small's shape
 * (12 layers, 12 heads, width 768, block 1024, batch 8).
 * On a discrete GPU the nanoGPT character-level setup (6 layers, 6 heads, width 384, block
 * 256, batch 64); elsewhere (lavapipe) or with --quick a small one. Batches are windows of
 * the fortunes text where it is installed, else random tokens over a vocabulary of its size.
 * bench/torch_gpt.py --bench measures PyTorch on the same model.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/timing.h"
#include "io/text.h"
#include "models/gpt.h"
#include "tools/cli.h"

static void fail(wgml_context *ctx, const char *what)
{
    fprintf(stderr, "wgml bench gpt: %s: %s\n", what, wgml_error_message(ctx));
}

/* Training steps at one precision: warm-up (compiles, and the buffers' first seconds), then
   rounds of ROUND steps submitted without waiting (as wgml gpt train runs them) and their
   losses read at the end of the round: the median round over ROUND. Rows named with suffix. */
static int bench_training(wgml_context *ctx, wgml_gpt *g, wgml_text *text, int have_text, int64_t B, int small,
                          const char *prefix, wgml_precision precision, const char *suffix)
{
    const wgml_gpt_config cfg = g->cfg;
    int64_t T = cfg.block, n = B * T;
    char err[256], name[64];
    wgml_optimizer *opt = NULL;
    wgml_gpt_train_desc d = {.lr = 1e-3f, .weight_decay = 0.1f, .max_grad_norm = 1.0f, .precision = precision};
    /* the pool's peak of this precision alone: another precision's buffers of other sizes
       (an earlier run in this process) would otherwise sit in it */
    wgml_release_cached(ctx, NULL);
    if (wgml_gpt_optimizer(g, &d, &opt)) {
        fail(ctx, "optimizer");
        return 0;
    }
    int32_t *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    wgml_tensor *ids = NULL, *targets = NULL;
    int64_t bt[2] = {B, T};
    int ok = x && y;
    enum { ROUND = 10 };
    int warm = small ? 2 : 10, rounds = small ? 2 : 5;
    double t[16], gpu[16];
    wgml_stats s1, sa, sb;
    for (int r = -warm; ok && r < rounds * ROUND; r++) {
        int64_t step = r + warm;
        if (have_text) wgml_text_batch(text, 0, 1, step, (int)B, (int)T, x, y, err, sizeof err);
        else
            for (int64_t i = 0; i < n; i++)
                x[i] = (int32_t)(wgml_text_mix((uint64_t)(step * n + i)) % (uint64_t)cfg.vocab), y[i] = x[i];
        if (r == 0) { /* the peaks of the timed steps only */
            wgml_synchronize(ctx);
            wgml_stats_reset_peaks(ctx);
        }
        if (r >= 0 && r % ROUND == 0) wgml_stats_get(ctx, &sa), t[r / ROUND] = bench_now();
        wgml_status st = ids ? wgml_tensor_write_i32(ids, x, (size_t)n) : wgml_tensor_from_i32(ctx, 2, bt, x, (size_t)n, &ids);
        if (!st) st = targets ? wgml_tensor_write_i32(targets, y, (size_t)n) : wgml_tensor_from_i32(ctx, 2, bt, y, (size_t)n, &targets);
        wgml_tensor *l = NULL;
        if (!st) st = wgml_gpt_train_step_submit(g, opt, ids, targets, &l);
        float loss;
        if (!st && (r < 0 || r % ROUND == ROUND - 1)) st = wgml_tensor_read(l, &loss, 1);
        wgml_tensor_free(l);
        if (st) {
            fail(ctx, "training step");
            ok = 0;
        } else if (r >= 0 && r % ROUND == ROUND - 1) {
            t[r / ROUND] = (bench_now() - t[r / ROUND]) / ROUND;
            wgml_stats_get(ctx, &sb);
            gpu[r / ROUND] = (sb.gpu_seconds_total - sa.gpu_seconds_total) / ROUND;
            if (r == rounds * ROUND - 1)
                fprintf(stderr, "  per step%s: %.1f evaluations, %.1f submits, %.0f dispatches\n", *suffix ? " (mixed)" : "",
                        (double)(sb.evals - sa.evals) / ROUND, (double)(sb.submits - sa.submits) / ROUND,
                        (double)(sb.dispatches - sa.dispatches) / ROUND);
        }
    }
    if (ok) {
        wgml_stats_get(ctx, &s1);
        double sec = bench_median(t, rounds);
        snprintf(name, sizeof name, "%s_train_step%s", prefix, suffix);
        bench_report(name, sec, (double)n / sec, "tokens/s");
        snprintf(name, sizeof name, "%s_train_step%s_gpu", prefix, suffix);
        if (s1.gpu_seconds_total > 0) bench_report(name, bench_median(gpu, rounds), 0, "(GPU timestamps)");
        snprintf(name, sizeof name, "%s_train%s_peak_in_use", prefix, suffix);
        bench_report(name, 0, (double)s1.bytes_in_use_peak / 1048576.0, "MiB");
        snprintf(name, sizeof name, "%s_train%s_peak_pool", prefix, suffix);
        bench_report(name, 0, (double)s1.bytes_peak / 1048576.0, "MiB");
        wgml_loss_scale_state sc;
        if (wgml_optimizer_scales_loss(opt) && !wgml_optimizer_loss_scale_state(opt, &sc))
            fprintf(stderr, "  loss scale %g, %lld skipped steps\n", (double)sc.scale, (long long)sc.skipped_steps);
    }
    free(x), free(y);
    wgml_tensor_free(ids), wgml_tensor_free(targets);
    wgml_optimizer_free(opt);
    return ok;
}

/* The nanoGPT setup (gpt2_small 0) or GPT-2 small's shape over bytes (about 86M parameters,
   batch 8 of 1024 tokens); toys of them on a CPU or with --quick. Over
   the fortunes text where it is installed, else random tokens; *B its batch. */
static int bench_model(wgml_context *ctx, int gpt2_small, int big, wgml_text *text, int *have_text, wgml_gpt *g, int64_t *B)
{
    char err[256];
    *have_text = wgml_text_load(WGML_TEXT_DEFAULT_DIR, text, err, sizeof err) == WGML_OK;
    *B = gpt2_small ? (big ? 8 : 2) : (big ? 64 : 4);
    wgml_gpt_config cfg = gpt2_small ? (wgml_gpt_config){.block = big ? 1024 : 64, .layers = big ? 12 : 2, .heads = big ? 12 : 2,
                                                         .width = big ? 768 : 64}
                                     : (wgml_gpt_config){.block = big ? 256 : 32, .layers = big ? 6 : 2, .heads = big ? 6 : 2,
                                                         .width = big ? 384 : 64};
    cfg.arch = WGML_GPT_GPT2;
    cfg.vocab = *have_text ? text->vocab_size : 114;
    if (wgml_gpt_init(ctx, &cfg, 1, g)) {
        fail(ctx, "model");
        return 0;
    }
    fprintf(stderr, "%s: %lld layers, %lld heads, width %lld, block %lld, batch %lld, %lld parameters, %s\n",
            gpt2_small ? "gpt2_small" : "gpt", (long long)cfg.layers, (long long)cfg.heads, (long long)cfg.width,
            (long long)cfg.block, (long long)*B, (long long)wgml_gpt_numel(&g->cfg), *have_text ? "fortunes text" : "random tokens");
    return 1;
}

/* WGML_BENCH_TRAIN_ONLY="mixed,f32split": only these precisions' training rows (A/B runs) */
static bool train_wanted(const char *precision) { return bench_listed("WGML_BENCH_TRAIN_ONLY", precision, false); }

/* The training rows in f32, then in mixed precision (f16 matmuls, loss scaling) where the
   adapter has shader-f16, then f32split where it has matrix units */
static int train_rows(wgml_context *ctx, const wgml_adapter_info *info, wgml_gpt *g, wgml_text *text, int have_text,
                      int64_t B, int big, const char *prefix)
{
    const bool units = info->has_subgroup_matrix && info->has_shader_f16;
    if (!train_wanted("f32") && !train_wanted("mixed") && !train_wanted("f32split"))
        fprintf(stderr, "  %s: WGML_BENCH_TRAIN_ONLY=%s names none of f32, mixed, f32split: no training rows\n", prefix,
                getenv("WGML_BENCH_TRAIN_ONLY"));
    int ok = 1;
    if (train_wanted("f32")) ok = bench_training(ctx, g, text, have_text, B, !big, prefix, WGML_PRECISION_F32, "");
    if (ok && info->has_shader_f16 && train_wanted("mixed"))
        ok = bench_training(ctx, g, text, have_text, B, !big, prefix, WGML_PRECISION_MIXED, "_mixed");
    /* f32 matmuls as hi and lo halves, where there are matrix units to run them */
    if (ok && units && train_wanted("f32split"))
        ok = bench_training(ctx, g, text, have_text, B, !big, prefix, WGML_PRECISION_F32_SPLIT, "_f32split");
    return ok;
}

void bench_gpt(int quick, int decode_only)
{
    wgml_adapter_info info;
    int big, have_text, ok = 0;
    wgml_context *ctx = bench_context("gpt", quick, &info, &big);
    if (!ctx) return;
    wgml_text text = {0};
    wgml_gpt g = {0};
    int64_t B;
    if (bench_model(ctx, 0, big, &text, &have_text, &g, &B))
        ok = decode_only || train_rows(ctx, &info, &g, &text, have_text, B, big, "gpt");
    /* generation: block - 1 tokens from one, sampled at temperature 1 */
    const wgml_gpt_config cfg = g.cfg;
    int64_t T = cfg.block;
    wgml_stats sa, sb;
    int64_t ntok = T - 1;
    int32_t *hist = ok ? malloc((size_t)T * sizeof *hist) : NULL;
    wgml_gpt_cache cache = {0};
    if (ok && hist && !wgml_gpt_cache_init(&g, &cache)) {
        double best = INFINITY;
        for (int rep = 0; rep < 3 && ok; rep++) {
            wgml_gpt_cache_reset(&cache, cfg.layers);
            hist[0] = 0;
            int64_t have = 1;
            wgml_stats_get(ctx, &sa);
            double t0 = bench_now();
            for (int64_t k = 0; k < ntok && ok; k++) {
                int32_t tok;
                if (wgml_gpt_generate_step(&g, &cache, hist, have, 1, 1.0f, 0, &tok)) {
                    fail(ctx, "generation");
                    ok = 0;
                }
                hist[have++] = tok;
            }
            double el = bench_now() - t0;
            if (rep > 0 && el < best) best = el; /* the first compiles */
            wgml_stats_get(ctx, &sb);
            if (rep == 2) {
                fprintf(stderr, "  generation: %.1f dispatches and %.1f submits per token; host %.1f us per token's evaluation%s",
                        (double)(sb.dispatches - sa.dispatches) / (double)ntok, (double)(sb.submits - sa.submits) / (double)ntok,
                        sb.host_seconds_last * 1e6,
                        sb.gpu_seconds_last > 0 ? "" : "\n");
                if (sb.gpu_seconds_last > 0) fprintf(stderr, ", GPU %.1f us\n", sb.gpu_seconds_last * 1e6);
            }
        }
        if (ok) bench_report("gpt_generate_kv_cache", best / (double)ntok, (double)ntok / best, "tokens/s");
    }
    if (ok) bench_decode_char(&g, quick); /* the same model through the decode plan */
    wgml_gpt_cache_free(&cache, cfg.layers);
    free(hist);
    wgml_gpt_free(&g);
    wgml_text_free(&text);
    wgml_context_free(ctx);
    bench_decode_qwen(quick);
}

/* The training rows of one shape in a context of its own */
static void train_shape(int gpt2_small, int quick)
{
    wgml_adapter_info info;
    int big, have_text;
    wgml_context *ctx = bench_context("train", quick, &info, &big);
    if (!ctx) return;
    wgml_text text = {0};
    wgml_gpt g = {0};
    int64_t B;
    if (bench_model(ctx, gpt2_small, big, &text, &have_text, &g, &B))
        train_rows(ctx, &info, &g, &text, have_text, B, big, gpt2_small ? "gpt2_small" : "gpt");
    wgml_gpt_free(&g);
    wgml_text_free(&text);
    wgml_context_free(ctx);
}

void bench_train(int quick)
{
    train_shape(0, quick);
    train_shape(1, quick);
}
