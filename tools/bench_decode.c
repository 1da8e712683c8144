#define _POSIX_C_SOURCE 200809L
/*
 * wgml bench gpt (and `wgml bench decode`): generation through the decode plan
 * (src/models/decode.h), one plan per row:
 *   - the character GPT of bench_gpt at batch 1 and 8, f32 and f16 weights, and in the
 *     unfused five launches a layer: block - 1 tokens from a 1-token prompt (as the graph
 *     path's gpt_generate_kv_cache row);
 *   - a Llama/Qwen model at the shape of Qwen3-0.6B (28 layers, width 1024, 16 query heads and
 *     8 K/V heads of 128, QK-norm, SwiGLU 3072, tied 151,936-token embedding, RoPE base 1e6),
 *     random weights held in f16: prompts of 512 random tokens prefilled, then 64 tokens each
 *     (the context 512 to 576), batch 1 and 8. On lavapipe or --quick a small model of the
 *     same structure.
 * Each row prints tokens/s (all slots together), dispatches per token step, the host's
 * encoding time per token step, and the weights' bytes read per second.
 * bench/torch_decode.py measures PyTorch eager on the same shapes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/timing.h"
#include "models/decode.h"
#include "tools/cli.h"

/* Where a step's GPU time goes (the plan's launches each timed alone, after the slots start
   again; skipped without timestamp queries): a line per kind of launch. */
static void profile(wgml_decode_plan *plan, int64_t B, const int32_t **pp, const int64_t *lens, int32_t *first, int64_t ntok)
{
    enum { MAXR = 24 };
    wgml_decode_profile_row rows[MAXR];
    int nr = 0;
    double step = 0;
    const int64_t steps = ntok / 2 < 4 ? ntok / 2 : 4;
    if (steps < 1 || wgml_decode_start(plan, B, pp, lens, first) || wgml_decode_profile(plan, steps, rows, MAXR, &nr, &step)) return;
    double sum = 0;
    for (int r = 0; r < nr; r++) sum += rows[r].seconds;
    fprintf(stderr, "    GPU profile (%lld steps): a step %.1f us in one pass; its launches each in a pass of its own add up to %.1f us;\n"
            "    \"in the pass\": the step less the step without that kind\n",
            (long long)steps, step * 1e6, sum * 1e6);
    for (int r = 0; r < nr; r++) {
        const double in_pass = rows[r].without_seconds > 0 ? step - rows[r].without_seconds : 0;
        fprintf(stderr, "      %-26s %4lld x %8.2f us = %8.1f us  %5.1f%%; in the pass %8.1f us (%.2f us a launch)\n", rows[r].what,
                (long long)rows[r].launches, rows[r].seconds * 1e6 / (double)rows[r].launches, rows[r].seconds * 1e6,
                100 * rows[r].seconds / sum, in_pass * 1e6, in_pass * 1e6 / (double)rows[r].launches);
    }
}

/* Rows whose name holds WGML_BENCH_DECODE_ONLY (comparisons on the GPU machine), or all. */
static int wanted(const char *name)
{
    const char *only = getenv("WGML_BENCH_DECODE_ONLY");
    return !only || !*only || strstr(name, only) != NULL;
}

/* One row: a plan of batch B over g; prompts of n_prompt tokens; ntok steps timed (best of
   reps after one warm-up round). */
static void decode_row(wgml_gpt *g, const char *name, int64_t B, int f16, int unfused, int64_t n_prompt, int64_t ntok, int reps)
{
    wgml_context *ctx = g->ctx;
    wgml_decode_plan *plan = NULL;
    /* comparisons on the GPU machine: the plan's choices forced (WGML_DECODE_ATTN_CHUNK, _LANES, _MLP_BLOCK, _GRAPH_PREFILL,
       _SAMPLE_LOGITS, _ATTN_COLS, _COMBINE_LAUNCH, _HEAD_LANES, _ATTN_LATE, _ATTN_WGS, _SUBGROUPS, _HEAD_WGS, _F16_CACHE, _HOST_LAYOUT, _ATTN_TARGET,
       _GRID_BLOCK, _GEMV_WGS, _GEMV_PLANES, _GEMV_ROWS, _GEMV_ROW_GROUPS, _GRID_COUNTERS, _GRID_WAIT:
       wgml_decode_desc) */
    if (!wanted(name)) return;
    const char *chunk = getenv("WGML_DECODE_ATTN_CHUNK"), *lanes = getenv("WGML_DECODE_LANES"), *mb = getenv("WGML_DECODE_MLP_BLOCK");
    const char *gp = getenv("WGML_DECODE_GRAPH_PREFILL"), *sl = getenv("WGML_DECODE_SAMPLE_LOGITS"), *ac = getenv("WGML_DECODE_ATTN_COLS");
    const char *cl = getenv("WGML_DECODE_COMBINE_LAUNCH"), *hl = getenv("WGML_DECODE_HEAD_LANES"), *al = getenv("WGML_DECODE_ATTN_LATE");
    const char *aw = getenv("WGML_DECODE_ATTN_WGS"), *sg = getenv("WGML_DECODE_SUBGROUPS"), *hw = getenv("WGML_DECODE_HEAD_WGS");
    const char *fc = getenv("WGML_DECODE_F16_CACHE"), *hl2 = getenv("WGML_DECODE_HOST_LAYOUT"), *at = getenv("WGML_DECODE_ATTN_TARGET");
    const char *gb = getenv("WGML_DECODE_GRID_BLOCK"), *gw = getenv("WGML_DECODE_GEMV_WGS");
    const char *xp = getenv("WGML_DECODE_GEMV_PLANES"), *gr = getenv("WGML_DECODE_GEMV_ROWS"),
               *rgs = getenv("WGML_DECODE_GEMV_ROW_GROUPS"), *gk = getenv("WGML_DECODE_GRID_COUNTERS"),
               *gt = getenv("WGML_DECODE_GRID_WAIT");
    const wgml_decode_desc d = {.batch = B, .f16_weights = f16, .steps_per_submit = 32, .max_prefill = 512, .unfused = unfused,
                                .attn_chunk = chunk ? atoi(chunk) : 0, .lanes = lanes ? atoi(lanes) : 0, .mlp_block = mb ? atoi(mb) : 0,
                                .graph_prefill = gp ? atoi(gp) : 0, .sample_logits = sl ? atoi(sl) : 0,
                                .attn_cols = ac ? atoi(ac) : 0, .combine_launch = cl ? atoi(cl) : 0,
                                .head_lanes = hl ? atoi(hl) : 0, .attn_late = al ? atoi(al) : 0,
                                .attn_wgs = aw ? atoi(aw) : 0, .subgroups = sg ? atoi(sg) : 0, .head_wgs = hw ? atoi(hw) : 0,
                                .f16_cache = fc ? atoi(fc) : 0, .host_layout = hl2 ? atoi(hl2) : 0,
                                .attn_target = at ? atoi(at) : 0, .grid_block = gb ? atoi(gb) : 0,
                                .gemv_wgs = gw ? atoi(gw) : 0, .gemv_planes = xp ? atoi(xp) : 0,
                                .gemv_rows = gr ? atoi(gr) : 0, .gemv_row_groups = rgs ? atoi(rgs) : 0,
                                .grid_counters = gk ? atoi(gk) : 0, .grid_wait = gt ? atoi(gt) : 0};
    double t0 = bench_now();
    if (wgml_decode_plan_create(g, &d, &plan)) {
        fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(ctx));
        bench_report(name, NAN, NAN, "tokens/s");
        return;
    }
    const double setup = bench_now() - t0;
    int32_t *prompt = malloc((size_t)(B * n_prompt) * sizeof *prompt), *out = malloc((size_t)(B * ntok) * sizeof *out);
    const int32_t **pp = malloc((size_t)B * sizeof *pp);
    int64_t *lens = malloc((size_t)B * sizeof *lens);
    int32_t *first = malloc((size_t)B * sizeof *first);
    int ok = prompt && out && pp && lens && first;
    for (int64_t i = 0; ok && i < B * n_prompt; i++) prompt[i] = (int32_t)((i * 2654435761u + 7) % (uint64_t)g->cfg.vocab);
    for (int64_t s = 0; ok && s < B; s++) pp[s] = prompt + s * n_prompt, lens[s] = n_prompt;
    double best = INFINITY, prefill_best = INFINITY;
    wgml_stats a, b;
    for (int r = -1; ok && r < reps; r++) {
        double tp = bench_now();
        if (wgml_decode_start(plan, B, pp, lens, first)) ok = 0;
        tp = bench_now() - tp;
        wgml_stats_get(ctx, &a);
        double t = bench_now();
        if (ok && wgml_decode_generate(plan, ntok, out)) ok = 0;
        t = bench_now() - t;
        wgml_stats_get(ctx, &b);
        if (r >= 0 && t < best) best = t;
        if (r >= 0 && tp < prefill_best) prefill_best = tp;
    }
    if (!ok) {
        fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(ctx));
        bench_report(name, NAN, NAN, "tokens/s");
    } else {
        const double steps = (double)ntok, wbytes = (double)wgml_decode_weight_bytes(plan);
        fprintf(stderr, "  %s: batch %lld, %s weights (%.1f MB), K/V cache %.1f MB, prompt %lld: %lld dispatches (grid %u) and %.2f submits per token step; "
                "host %.1f us per step; %.0f GB/s of weights; plan made in %.2f s; prefill %.1f ms (%.0f tokens/s)\n",
                name, (long long)B, f16 ? "f16" : "f32", wbytes / 1e6, (double)wgml_decode_cache_bytes(plan) / 1e6, (long long)n_prompt,
                (long long)wgml_decode_dispatches_per_step(plan), wgml_decode_grid_workgroups(plan), (double)(b.submits - a.submits) / steps,
                wgml_decode_host_seconds_per_token(plan) * 1e6, wbytes * steps / best / 1e9, setup, prefill_best * 1e3,
                (double)(B * n_prompt) / prefill_best);
        bench_report(name, best / steps, (double)(B * ntok) / best, "tokens/s");
        profile(plan, B, pp, lens, first, ntok);
    }
    free(prompt), free(out), free(pp), free(lens), free(first);
    wgml_decode_plan_free(plan);
}

/* What wgml_gpt_generate gives a caller: a plan made, the prompt fed, n tokens drawn (greedy),
   all timed, and a call for one token alone: their difference is the n - 1 tokens' own time
   (each the second of two calls: the first compiles the kernels). */
static void generate_row(wgml_gpt *g, const char *name, int64_t n_prompt, int64_t n, int f16)
{
    if (!wanted(name)) return;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt), *out = malloc((size_t)n * sizeof *out);
    double t[2] = {NAN, NAN};
    int ok = prompt && out;
    for (int64_t i = 0; ok && i < n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % g->cfg.vocab);
    for (int r = 0; ok && r < 4; r++) {
        double t0 = bench_now();
        const wgml_gpt_sample_desc d = {.f16_weights = f16};
        ok = wgml_gpt_generate(g, prompt, n_prompt, r & 1 ? 1 : n, &d, out, NULL, NULL) == WGML_OK;
        t[r & 1] = bench_now() - t0;
    }
    const double each = (t[0] - t[1]) / (double)(n - 1);
    if (!ok) fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(g->ctx));
    else fprintf(stderr, "  %s: wgml_gpt_generate, %s weights, prompt %lld: %lld tokens in %.1f ms, one in %.1f ms (the plan's making "
                 "and the prompt's feeding): %.3f ms a token after the first\n", name, f16 ? "f16" : "f32", (long long)n_prompt,
                 (long long)n, t[0] * 1e3, t[1] * 1e3, each * 1e3);
    bench_report(name, ok ? each : NAN, ok ? 1.0 / each : NAN, "tokens/s");
    free(prompt), free(out);
}

/* wgml_gpt_generate_batch as a caller sees it: n_seq prompts of n_prompt tokens continued by n
   tokens each, and by one: their difference is the n - 1 steps' own time (each the second of
   two calls), all the sequences' tokens a second */
static void generate_batch_row(wgml_gpt *g, const char *name, int64_t n_seq, int64_t n_prompt, int64_t n, int f16)
{
    if (!wanted(name)) return;
    int32_t *prompt = malloc((size_t)(n_seq * n_prompt) * sizeof *prompt), *out = malloc((size_t)(n_seq * n) * sizeof *out);
    const int32_t **pp = malloc((size_t)n_seq * sizeof *pp);
    int64_t *lens = malloc((size_t)n_seq * sizeof *lens);
    double t[2] = {NAN, NAN};
    int ok = prompt && out && pp && lens;
    for (int64_t i = 0; ok && i < n_seq * n_prompt; i++) prompt[i] = (int32_t)((i * 7919 + 13) % g->cfg.vocab);
    for (int64_t s = 0; ok && s < n_seq; s++) pp[s] = prompt + s * n_prompt, lens[s] = n_prompt;
    for (int r = 0; ok && r < 4; r++) {
        double t0 = bench_now();
        const wgml_gpt_sample_desc d = {.f16_weights = f16};
        ok = wgml_gpt_generate_batch(g, n_seq, pp, lens, r & 1 ? 1 : n, &d, out) == WGML_OK;
        t[r & 1] = bench_now() - t0;
    }
    const double each = (t[0] - t[1]) / (double)(n - 1);
    if (!ok) fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(g->ctx));
    else fprintf(stderr, "  %s: wgml_gpt_generate_batch, %lld prompts of %lld, %s weights: %lld tokens each in %.1f ms, one in %.1f ms: "
                 "%.3f ms a step after the first\n", name, (long long)n_seq, (long long)n_prompt, f16 ? "f16" : "f32", (long long)n,
                 t[0] * 1e3, t[1] * 1e3, each * 1e3);
    bench_report(name, ok ? each : NAN, ok ? (double)n_seq / each : NAN, "tokens/s");
    free(prompt), free(out), free(pp), free(lens);
}

void bench_decode_char(wgml_gpt *g, int quick)
{
    const int64_t n = g->cfg.block - 1;
    const int reps = quick ? 1 : 3;
    decode_row(g, "gpt_generate_plan_b1", 1, 0, 0, 1, n, reps);
    decode_row(g, "gpt_generate_plan_b1_f16", 1, 1, 0, 1, n, reps);
    decode_row(g, "gpt_generate_plan_b1_unfused", 1, 0, 1, 1, n, reps);
    decode_row(g, "gpt_generate_plan_b8", 8, 0, 0, 1, n, reps);
    generate_row(g, "gpt_generate_api", 1, 4 * n, 0);
}

void bench_decode_qwen(int quick)
{
    wgml_adapter_info info;
    int big;
    wgml_context *ctx = bench_context("decode", quick, &info, &big);
    if (!ctx) return;
    /* Qwen3-0.6B's shape, or a small one of the same structure */
    wgml_gpt_config cfg = {.arch = WGML_GPT_LLAMA, .vocab = big ? 151936 : 1000, .block = big ? 1024 : 64,
                           .layers = big ? 28 : 2, .heads = big ? 16 : 4, .kv_heads = big ? 8 : 2, .width = big ? 1024 : 64,
                           .head_dim = big ? 128 : 32, .qk_norm = 1, .ffn = big ? 3072 : 192, .rope_base = 1e6f, .norm_eps = 1e-6f};
    wgml_gpt g = {0};
    double t0 = bench_now();
    if (wgml_gpt_init(ctx, &cfg, 1, &g)) {
        fprintf(stderr, "wgml bench decode: the model: %s\n", wgml_error_message(ctx));
        wgml_context_free(ctx);
        return;
    }
    fprintf(stderr, "qwen3-0.6b shape%s: %lld layers, width %lld, %lld/%lld heads of %lld, ffn %lld, vocab %lld, %lld parameters "
            "(random, made in %.1f s)\n", big ? "" : " (small)", (long long)cfg.layers, (long long)cfg.width, (long long)cfg.heads,
            (long long)cfg.kv_heads, (long long)g.cfg.head_dim, (long long)cfg.ffn, (long long)cfg.vocab,
            (long long)wgml_gpt_numel(&g.cfg), bench_now() - t0);
    const int64_t prompt = big ? 512 : 24, ntok = big ? 64 : 16;
    decode_row(&g, "qwen3_0.6b_decode_b1_f16", 1, 1, 0, prompt, ntok, quick ? 1 : 3);
    generate_row(&g, "qwen3_0.6b_generate", prompt, big ? 256 : 8, 0);
    generate_row(&g, "qwen3_0.6b_generate_f16", prompt, big ? 256 : 8, 1);
    generate_batch_row(&g, "qwen3_0.6b_generate_batch8_f16", 8, prompt, big ? 128 : 8, 1);
    /* WGML_BENCH_DECODE_SWEEP="VAR=v VAR=v;...": the b1 row again for each entry with its variables
       set (the plan's knobs above), the model made once */
    const char *sweep = getenv("WGML_BENCH_DECODE_SWEEP");
    if (sweep && *sweep) {
        char *all = strdup(sweep);
        for (char *e = all ? strtok(all, ";") : NULL; e; e = strtok(NULL, ";")) {
            char entry[512], name[600], *vars[16];
            int nv = 0;
            snprintf(entry, sizeof entry, "%s", e);
            snprintf(name, sizeof name, "qwen3_0.6b_decode_b1_f16 [%s]", e);
            for (char *q = entry, *t; nv < 16 && q && *q;) {
                t = q;
                q = strchr(q, ' ');
                if (q) *q++ = 0;
                char *eq = strchr(t, '=');
                if (!eq) continue;
                *eq = 0;
                setenv(t, eq + 1, 1);
                vars[nv++] = t;
            }
            decode_row(&g, name, 1, 1, 0, prompt, ntok, quick ? 1 : 3);
            for (int i = 0; i < nv; i++) unsetenv(vars[i]);
        }
        free(all);
    }
    decode_row(&g, "qwen3_0.6b_decode_b8_f16", 8, 1, 0, prompt, ntok, quick ? 1 : 2);
    wgml_gpt_free(&g);
    /* a long context: block 8,192 (a whole block's scores past the workgroup memory: the
       prefill's attention splits too), 4,096 positions held (GPU only) */
    if (big && wanted("qwen3_0.6b_decode_b1_f16_ctx4096")) {
        cfg.block = 8192;
        if (wgml_gpt_init(ctx, &cfg, 1, &g)) fprintf(stderr, "wgml bench decode: the model: %s\n", wgml_error_message(ctx));
        else {
            decode_row(&g, "qwen3_0.6b_decode_b1_f16_ctx4096", 1, 1, 0, 4096, ntok, quick ? 1 : 3);
            wgml_gpt_free(&g);
        }
    }
    wgml_context_free(ctx);
}
