/*
 * The decode plan (src/models/decode.h): greedy tokens from the replayed plan against the
 * graph path (wgml_gpt_generate_step, a graph per token) and against the CPU reference
 * (tests/gpt_ref.c) with the same sliding window, past the block, for GPT-2 and for Llama with
 * a head size of its own and QK-norm, weights in f32 and in f16; several prompts of
 * different lengths in one batch; the dispatches per token (a structural count). Also the
 * config fields head_dim and qk_norm through the graph's forward against the reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_ref.h"
#include "harness.h"
#include "core/pipeline.h"
#include "models/decode.h"
#include "models/decode_wgsl.h"

typedef struct params {
    int n;
    float **p;
} params;

/* Random parameters: matrices U(-s, s), biases U(-0.2, 0.2), norm weights U(0.7, 1.3); with
   f16, every value rounded to a half first, so that the plan's f16 copy is exact and the
   reference sees the same model. */
static void params_random(const wgml_gpt_config *c, double s, int f16, params *out)
{
    out->n = wgml_gpt_param_count(c);
    out->p = calloc((size_t)out->n, sizeof *out->p);
    for (int i = 0; out->p && i < out->n; i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t sh[2];
        wgml_gpt_param_info(c, i, name, &nd, sh);
        const int64_t n = sh[0] * (nd == 2 ? sh[1] : 1);
        out->p[i] = malloc((size_t)n * sizeof(float));
        if (!out->p[i]) continue;
        const int is_w = nd == 1 && name[strlen(name) - 1] == 'w';
        if (nd == 2) test_fill_uniform(out->p[i], (size_t)n, -s, s);
        else if (is_w) test_fill_uniform(out->p[i], (size_t)n, 0.7, 1.3);
        else test_fill_uniform(out->p[i], (size_t)n, -0.2, 0.2);
        if (f16 && nd == 2) /* (f16 has 11 significant bits: keep those of the float) */
            for (int64_t k = 0; k < n; k++) {
                int e;
                double m = frexp((double)out->p[i][k], &e);
                out->p[i][k] = (float)ldexp(nearbyint(m * 2048.0) / 2048.0, e);
            }
    }
}

static void params_free(params *p)
{
    for (int i = 0; p->p && i < p->n; i++) free(p->p[i]);
    free(p->p);
}

/* A model on random parameters (params_random, scale 0.5), on the GPU and in the reference. */
typedef struct model {
    wgml_gpt_config cfg; /* resolved */
    params p;
    gpt_ref *r;
    wgml_gpt g;
} model;

static void model_make(wgml_context *ctx, const wgml_gpt_config *cfg_in, int f16, model *m)
{
    memset(m, 0, sizeof *m);
    CHECK_OK(ctx, wgml_gpt_config_resolve(cfg_in, &m->cfg, NULL, 0));
    params_random(&m->cfg, 0.5, f16, &m->p);
    m->r = gpt_ref_create(&m->cfg, (const float *const *)m->p.p);
    CHECK_OK(ctx, wgml_gpt_create(ctx, &m->cfg, (const float *const *)m->p.p, &m->g));
}

static void model_free(model *m)
{
    wgml_gpt_free(&m->g);
    gpt_ref_free(m->r);
    params_free(&m->p);
}

/* Greedy tokens of the reference with the graph path's window: the cache restarts from the
   last block / 2 tokens when the next would pass the block (wgml_gpt_generate_step). Returns
   the smallest margin of a chosen token's logit over the next best. */
static double reference_greedy(gpt_ref *r, const int32_t *prompt, int n_prompt, int n_new, int32_t *out)
{
    const wgml_gpt_config *c = gpt_ref_config(r);
    const int64_t block = c->block, V = c->vocab;
    int32_t *hist = malloc((size_t)(n_prompt + n_new) * sizeof *hist);
    double *logits = malloc((size_t)(block * V) * sizeof *logits);
    double margin = INFINITY;
    if (!hist || !logits) {
        free(hist), free(logits);
        return margin;
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int64_t have = n_prompt, fresh = n_prompt, len = 0;
    for (int k = 0; k < n_new; k++) {
        int64_t feed = fresh;
        if (len + fresh > block) {
            len = 0;
            feed = fresh > block / 2 ? block : block / 2 > 0 ? block / 2 : 1;
            if (feed > have) feed = have;
        }
        const int T = (int)(len + feed);
        gpt_ref_logits(r, hist + have - T, T, logits);
        const double *last = logits + (int64_t)(T - 1) * V;
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (last[v] > last[best]) best = (int32_t)v;
        len += feed;
        for (int64_t v = 0; v < V; v++)
            if (v != best && last[best] - last[v] < margin) margin = last[best] - last[v];
        out[k] = hist[have++] = best;
        fresh = 1;
    }
    free(hist), free(logits);
    return margin;
}

/* The graph path: one wgml_gpt_generate_step per token. */
static wgml_status graph_greedy(wgml_gpt *g, const int32_t *prompt, int n_prompt, int n_new, int32_t *out)
{
    int32_t *hist = malloc((size_t)(n_prompt + n_new) * sizeof *hist);
    wgml_gpt_cache cache;
    wgml_status st = hist ? wgml_gpt_cache_init(g, &cache) : WGML_ERROR_OUT_OF_MEMORY;
    if (st) return free(hist), st;
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int64_t have = n_prompt, fresh = n_prompt;
    for (int k = 0; k < n_new && !st; k++) {
        st = wgml_gpt_generate_step(g, &cache, hist, have, fresh, 0.0f, 0, &out[k]);
        hist[have++] = out[k], fresh = 1;
    }
    wgml_gpt_cache_free(&cache, g->cfg.layers);
    free(hist);
    return st;
}

static int same_tokens(const char *what, const int32_t *got, const int32_t *want, int n)
{
    for (int k = 0; k < n; k++)
        if (got[k] != want[k]) {
            FAILF("%s: token %d is %d, want %d", what, k, got[k], want[k]);
            return 0;
        }
    return 1;
}

/* Each of the S started slots drew first[s] then got[s * (nn - 1) ..]: want[s * nn ..]. */
static void same_slots(const char *what, int S, int nn, const int32_t *first, const int32_t *got, const int32_t *want)
{
    for (int s = 0; s < S; s++) {
        CHECK(first[s] == want[s * nn]);
        same_tokens(what, got + s * (nn - 1), want + s * nn + 1, nn - 1);
    }
}

static const wgml_gpt_config gpt2_cfg = {.arch = WGML_GPT_GPT2, .vocab = 29, .block = 12, .layers = 2, .heads = 3, .width = 24, .ffn = 40};
/* head size 8: the attention's vec4 path (with RoPE inside it) */
static const wgml_gpt_config llama8_cfg = {.arch = WGML_GPT_LLAMA, .vocab = 23, .block = 10, .layers = 1, .heads = 4, .kv_heads = 2,
                                           .width = 12, .head_dim = 8, .qk_norm = 1, .ffn = 20, .rope_base = 30.0f};
static const wgml_gpt_config wide_cfg = {.arch = WGML_GPT_LLAMA, .vocab = 23, .block = 10, .layers = 1, .heads = 4, .kv_heads = 2,
                                         .width = 1030, .head_dim = 8, .qk_norm = 1, .ffn = 1027, .rope_base = 30.0f};
static const wgml_gpt_config wide_ffn_cfg = {.arch = WGML_GPT_LLAMA, .vocab = 23, .block = 10, .layers = 1, .heads = 4,
                                             .kv_heads = 2, .width = 20, .head_dim = 6, .qk_norm = 1, .ffn = 4103, .rope_base = 50.0f};
static const wgml_gpt_config llama_cfg = {.arch = WGML_GPT_LLAMA, .vocab = 31, .block = 11, .layers = 2, .heads = 4, .kv_heads = 2,
                                          .width = 20, .head_dim = 6, .qk_norm = 1, .ffn = 36, .rope_base = 50.0f};

static int x_chunk;   /* the GEMVs' inputs staged at a time (0: the plan's choice) */
static int mlp_block; /* GPT-2's fused MLP's hidden units a workgroup (0: the plan's choice) */
static int plan_only; /* check_single skips the graph path */
static int graph_prefill; /* prefills of at least this many positions through the model's graph (0: the plan's choice) */
static int attn_cols;     /* GPT-2's fused projection in this many column blocks (0: the plan's choice) */
static int attn_late;      /* the split attention's cache loads after its prologue */
static int attn_wgs;       /* its workgroup's threads (0: the plan's choice) */
static int f16_cache;      /* the K/V cache in halves */
static int head_lanes;     /* the LM head's lanes an output (0: the plan's choice) */
static int combine_launch; /* the split attention's combine a launch of its own even on wgpu-native */
static int subgroups;      /* the GEMVs' sums by subgroup shuffles: 1 on, -1 off (0: the plan's choice) */
static int head_wgs;       /* the LM head's workgroups in its grid-stride form (-1 off, 0: the plan's choice) */
static int grid_block = -1; /* the MLP block's workgroups in one launch (-1: the launches apart, as the counts below) */
static int grid_counters;  /* its barrier's counters (0: the plan's choice) */
static int grid_wait;      /* how its phases wait for the one before (wgml_decode_desc's; 0: the plan's choice) */
static int lanes_all;      /* check_batch's GEMV lanes an output (0: the plan's choice) */
static int gemv_wgs;       /* check_batch's normed GEMVs' workgroups in grid stride (-1 off, 0: the plan's choice) */
static int gemv_rows;      /* check_batch's GEMVs' rows a lane group (0: the plan's choice) */
static int gemv_planes;    /* check_batch's x staged in planes for f16 weights (1 on, 0: the plan's choice) */
static int batch_f16;      /* check_batch's weights in f16 */
static int row_groups;     /* check_batch's GEMVs without a norm: their rows in this many groups (0: the plan's choice) */

/* The split attention's combine is a launch of its own (one more a layer) unless the runtime is
   wgpu-native, where the last chunk to finish does it (decode.h) */
static int combine_launches(wgml_context *ctx)
{
    wgml_adapter_info info;
    if (!ctx || wgml_adapter_info_get(ctx, &info)) return 1;
    return combine_launch || !info.runtime || strcmp(info.runtime, "wgpu-native") != 0;
}
/* One prompt, past the block: plan = graph path = reference (chunk: the decode attention's
   positions a workgroup, -1 unsplit). */
static void check_single_chunk(const wgml_gpt_config *cfg_in, int f16, int unfused, int lanes, int parts, int chunk,
                               int64_t expect_dispatches)
{
    wgml_context *ctx = test_context();
    model m;
    enum { NP = 4, NN = 30 };
    const int32_t prompt[NP] = {3, 17, 5, 11};
    int32_t want[NN], graph[NN], got[NN], first = -1;
    /* (with the cache in halves, a model whose greedy choices include a near tie is drawn again:
       the keys' and values' rounding, which the reference does not make, may pick the other) */
    for (int tries = 0;; tries++) {
        model_make(ctx, cfg_in, f16, &m);
        if (reference_greedy(m.r, prompt, NP, NN, want) >= (f16_cache ? 1e-2 : 0) || tries == 7) break;
        model_free(&m);
    }
    if (!plan_only) { /* (the variants of the plan's choices check the plan alone: the graph path is the same) */
        CHECK_OK(ctx, graph_greedy(&m.g, prompt, NP, NN, graph));
        same_tokens("graph path vs reference", graph, want, NN);
    }
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = 1, .f16_weights = f16, .steps_per_submit = 5, .max_prefill = 3, .unfused = unfused, .lanes = lanes,
                                .attn_parts = parts, .attn_chunk = chunk, .x_chunk = x_chunk,
                                .mlp_block = mlp_block, .graph_prefill = graph_prefill, .attn_cols = attn_cols,
                                .combine_launch = combine_launch, .head_lanes = head_lanes,
                                .attn_late = attn_late, .attn_wgs = attn_wgs, .subgroups = subgroups, .head_wgs = head_wgs,
                                .f16_cache = f16_cache, .grid_block = grid_block, .grid_counters = grid_counters, .grid_wait = grid_wait};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    if (plan) {
        CHECK(wgml_decode_dispatches_per_step(plan) == expect_dispatches);
        const int32_t *pp = prompt;
        const int64_t np = NP;
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, &first));
        got[0] = first;
        /* the dispatches of the steps before the window slides (cache 4 + 1 .. block): the structural count */
        wgml_stats a, b;
        wgml_stats_get(ctx, &a);
        CHECK_OK(ctx, wgml_decode_generate(plan, 5, got + 1));
        wgml_stats_get(ctx, &b);
        CHECK(b.dispatches - a.dispatches == (uint64_t)(5 * expect_dispatches));
        CHECK(b.submits - a.submits == 3); /* the first chunks short: 1, 2, then the 2 left (of 5 a submit) */
        CHECK_OK(ctx, wgml_decode_generate(plan, NN - 6, got + 6));
        same_tokens("plan vs reference", got, want, NN);
        /* a restart forgets the old sequence */
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, &first));
        CHECK(first == want[0]);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

static void check_single(const wgml_gpt_config *cfg_in, int f16, int unfused, int lanes, int parts, int64_t expect_dispatches)
{
    check_single_chunk(cfg_in, f16, unfused, lanes, parts, -1, expect_dispatches);
}

/* GPT-2: 3 launches a layer fused (the embedding in layer 0's), 5 apart plus the embedding;
   then the head and the sampler. Llama: the embedding, 5 a layer, the head, the sampler.
   (The GEMVs' lanes an output: by size, 128 at these shapes; 32 and 64 forced. The attention's
   threads an output: as many as fit, or 2, so that its 4-position rounds run at these lengths.) */
static void gpt2_plan_equals_graph_and_reference(void) { check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2); }
static void gpt2_plan_f16_weights(void) { check_single(&gpt2_cfg, 1, 0, 64, 2, 3 * 2 + 2); }
static void gpt2_plan_unfused(void) { check_single(&gpt2_cfg, 0, 1, 32, 2, 1 + 5 * 2 + 2); }
static void llama_plan_equals_graph_and_reference(void) { check_single(&llama_cfg, 0, 0, 32, 0, 1 + 5 * 2 + 2); }
static void llama_plan_f16_weights(void) { check_single(&llama_cfg, 1, 0, 0, 2, 1 + 5 * 2 + 2); }
static void llama_plan_head_size_8(void) { check_single(&llama8_cfg, 0, 0, 0, 2, 1 + 5 * 1 + 2); }

/* The decode attention split over chunks of positions, combined by the last chunk to finish
   (wgpu-native) or by one launch more a layer (Dawn, or forced): chunks of 3 over a block of 11
   (contexts 5 .. 11 and, past the block, 6 .. again: chunks partly filled, a context on a
   chunk's edge), of 1 (every chunk a position, f16, head size 8), and of 4 on GPT-2's unfused
   form; with 16 lanes a GEMV output. */
static void llama_split_attention(void)
{
    plan_only = 1;
    for (combine_launch = 0; combine_launch < 2; combine_launch++) {
        const int c = combine_launches(test_context());
        check_single_chunk(&llama_cfg, 0, 0, 16, 2, 3, 1 + (5 + c) * 2 + 2);
        check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 1, 1 + (5 + c) * 1 + 2);
        check_single_chunk(&gpt2_cfg, 0, 1, 0, 0, 4, 1 + (5 + c) * 2 + 2);
    }
    /* head size 8 (the cases above with their cache's loads issued before the prologue): chunks
       of 4 in f16 (at 512 threads where the adapter takes 1,024), and of 3 with the loads after
       the prologue (the old order) */
    combine_launch = 0;
    const int c = combine_launches(test_context());
    wgml_adapter_info info;
    attn_wgs = wgml_adapter_info_get(test_context(), &info) == WGML_OK && info.max_compute_invocations_per_workgroup >= 1024 &&
                       info.max_compute_workgroup_size_x >= 1024 ? 512 : 0;
    check_single_chunk(&llama8_cfg, 1, 0, 0, 2, 4, 1 + (5 + c) * 1 + 2);
    attn_wgs = 0;
    /* chunks of 16 over a block of 40 (more positions a chunk than lavapipe's subgroup has
       lanes: the softmax adds several subgroups' parts), the QK-norm's and softmax's sums by
       subgroups where the adapter has them, and by trees */
    wgml_gpt_config long8 = llama8_cfg;
    long8.block = 40;
    for (subgroups = -1; subgroups <= 0; subgroups++) check_single_chunk(&long8, 0, 0, 0, 0, 16, 1 + (5 + c) * 1 + 2);
    subgroups = 0;
    attn_late = 1;
    check_single_chunk(&llama8_cfg, 0, 0, 0, 0, 3, 1 + (5 + c) * 1 + 2);
    attn_late = 0, plan_only = 0;
}

/* GPT-2's fused MLP with 24 hidden units a workgroup (three rounds of 8, W1 loaded each
   round) and 64 (two rounds of 32, the last workgroup partly past the 40 units), not the one
   round of 32 that it takes by default here */
static void gpt2_fused_mlp_blocks(void)
{
    mlp_block = 24, plan_only = 1;
    check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2);
    mlp_block = 64;
    check_single(&gpt2_cfg, 1, 0, 0, 0, 3 * 2 + 2);
    mlp_block = 0, plan_only = 0;
}

/* GPT-2's fused attention + projection with the projection's 24 columns in 2 blocks of 12 and
   in 5 of 5 (the last one 4), a workgroup each: f32 and f16 weights, 2 threads an output */
static void gpt2_attention_column_blocks(void)
{
    plan_only = 1;
    attn_cols = 2;
    check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2);
    attn_cols = 5;
    check_single(&gpt2_cfg, 1, 0, 0, 2, 3 * 2 + 2);
    attn_cols = 0, plan_only = 0;
}

/* The LM head at 8 lanes an output (32 outputs a workgroup: the vocabulary of 31 in one, its
   last output past the end) and at 64, greedy, against the reference */
static void lm_head_lanes(void)
{
    plan_only = 1;
    head_lanes = 8;
    check_single(&llama_cfg, 1, 0, 0, 0, 1 + 5 * 2 + 2);
    head_lanes = 64;
    check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2);
    head_lanes = 0, plan_only = 0;
}

/* x staged in chunks of 8 inputs (the norm's statistics over the whole row first, then each
   chunk normed as it is staged), not in one: Llama in f16 and GPT-2's unfused form */
static void gemv_x_in_chunks(void)
{
    x_chunk = 8, plan_only = 1;
    check_single(&llama_cfg, 1, 0, 0, 0, 1 + 5 * 2 + 2);
    check_single(&gpt2_cfg, 0, 1, 0, 0, 1 + 5 * 2 + 2);
    x_chunk = 0, plan_only = 0;
}

/* A long context at a vocabulary past the sampler's rounds of four (4 x 1024 logits): prompts
   of 1, 7 and 512 tokens in one batch, the attention split by default in chunks of 128 (32
   times the batch, rounded up to a power of two): contexts 1 and 513 each start a chunk, 7
   sits inside one; greedy tokens against the reference. */
static void long_context_split(void)
{
    wgml_context *ctx = test_context();
    const wgml_gpt_config cin = {.arch = WGML_GPT_LLAMA, .vocab = 4500, .block = 560, .layers = 1, .heads = 2, .kv_heads = 1,
                                 .width = 16, .head_dim = 8, .qk_norm = 1, .ffn = 24, .rope_base = 1000.0f};
    model m;
    model_make(ctx, &cin, 0, &m);
    enum { S = 3, NN = 4, LONG = 512 };
    int32_t a[1] = {4321}, b[7], c[LONG];
    for (int i = 0; i < 7; i++) b[i] = (int32_t)((i * 611 + 5) % 4500);
    for (int i = 0; i < LONG; i++) c[i] = (int32_t)((i * 2654435761u + 17) % 4500u);
    const int32_t *prompts[S] = {a, b, c};
    const int64_t lens[S] = {1, 7, LONG};
    int32_t want[S * NN], got[S * NN], first[S];
    for (int s = 0; s < S; s++) reference_greedy(m.r, prompts[s], (int)lens[s], NN, want + s * NN);
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = S, .steps_per_submit = 2, .max_prefill = 256};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    if (plan) {
        /* split by default: the block is >= 512 */
        CHECK(wgml_decode_dispatches_per_step(plan) == 1 + 5 + combine_launches(ctx) + 2);
        CHECK_OK(ctx, wgml_decode_start(plan, S, prompts, lens, first));
        CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got));
        same_slots("long context slot vs reference", S, NN, first, got, want);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

/* wgml_decode_profile: a row per kind of launch in the step's order, their launches adding up
   to the step's dispatches, GPU times > 0; the steps without each kind timed where the block
   has room for them (block 40: 2 + 11 x 2 positions), else left 0 (block 11); the slots must
   start again after, and then draw the reference's tokens. (Where the adapter has no timestamp
   queries: UNSUPPORTED.) */
static void profile_by_kind(int64_t block)
{
    wgml_context *ctx = test_context();
    model m;
    wgml_gpt_config cfg = llama_cfg;
    cfg.block = block;
    const int room = block >= 2 + 11 * 2;
    model_make(ctx, &cfg, 0, &m);
    enum { NN = 6 };
    const int32_t prompt[2] = {9, 4};
    const int32_t *pp = prompt;
    const int64_t np = 2;
    int32_t want[NN], got[NN];
    reference_greedy(m.r, prompt, 2, NN, want);
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 3, .attn_chunk = 4, .combine_launch = 1};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    wgml_adapter_info info;
    wgml_adapter_info_get(ctx, &info);
    if (plan) {
        wgml_decode_profile_row rows[16];
        int nr = 0;
        double step = 0;
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
        wgml_stats a, b;
        wgml_stats_get(ctx, &a);
        wgml_status st = wgml_decode_profile(plan, 2, rows, 16, &nr, &step);
        wgml_stats_get(ctx, &b);
        if (!info.has_timestamp_query) CHECK(st == WGML_ERROR_UNSUPPORTED);
        else {
            CHECK_OK(ctx, st);
            static const char *const kinds[] = {"embedding", "norm+qkv gemv", "attention (split)", "attention combine", "wo gemv+residual",
                                                "norm+mlp up gemv", "mlp down gemv+residual", "norm+lm head gemv", "sampler"};
            CHECK(nr == (int)N_OF(kinds));
            int64_t launches = 0;
            for (int i = 0; i < nr && i < (int)N_OF(kinds); i++) {
                CHECK(strcmp(rows[i].what, kinds[i]) == 0 && rows[i].seconds > 0);
                CHECK(room ? rows[i].without_seconds > 0 : rows[i].without_seconds == 0);
                launches += rows[i].launches;
            }
            CHECK(launches == wgml_decode_dispatches_per_step(plan) && launches == 1 + 6 * 2 + 2);
            /* each of the 2 steps: its n launches alone, in one pass, and (with room) the pass
               without each kind, n - that kind's launches: n (1 + kinds) in all */
            const int64_t n = launches;
            CHECK((int64_t)(b.dispatches - a.dispatches) == 2 * (room ? n * (1 + nr) : 2 * n));
            CHECK(step > 0);
            CHECK(wgml_decode_generate(plan, 1, got + 1) == WGML_ERROR_INVALID_ARGUMENT); /* not started again */
            /* past the block: refused */
            CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
            CHECK(wgml_decode_profile(plan, (block - np) / 2 + 1, rows, 16, &nr, &step) == WGML_ERROR_INVALID_ARGUMENT);
        }
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
        CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got + 1));
        same_tokens("after the profile vs reference", got, want, NN);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

/* The K/V cache in halves (f16_cache, where the adapter has shader-f16): half the bytes, and
   the reference's tokens past the block (check_single_chunk): single elements (head size 6),
   packed words (head size 8: chunks of 1 and 4, loads before and after the prologue, unsplit),
   GPT-2's (its QKV launch appends); f16_cache out of range refused. */
static void cache_in_halves(void)
{
    wgml_context *ctx = test_context();
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    {
        model m;
        model_make(ctx, &llama8_cfg, 1, &m);
        for (int v = 0; v < 2; v++) {
            wgml_decode_plan *plan = NULL;
            const wgml_decode_desc d = {.batch = 3, .f16_weights = 1, .f16_cache = v};
            CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
            const int64_t f32_bytes = 2 * m.cfg.layers * 3 * m.cfg.block * m.cfg.kv_heads * m.cfg.head_dim * 4;
            if (plan) CHECK(wgml_decode_cache_bytes(plan) == (v && info.has_shader_f16 ? f32_bytes / 2 : f32_bytes));
            wgml_decode_plan_free(plan);
        }
        wgml_decode_plan *bad = NULL;
        const wgml_decode_desc d = {.batch = 1, .f16_weights = 1, .f16_cache = 2};
        CHECK(wgml_decode_plan_create(&m.g, &d, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
        model_free(&m);
    }
    f16_cache = 1, plan_only = 1;
    const int c = combine_launches(ctx);
    check_single_chunk(&llama_cfg, 1, 0, 0, 0, 3, 1 + (5 + c) * 2 + 2);
    check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 1, 1 + (5 + c) * 1 + 2);
    check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 4, 1 + (5 + c) * 1 + 2);
    attn_late = 1;
    check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 4, 1 + (5 + c) * 1 + 2);
    attn_late = 0;
    check_single(&llama8_cfg, 1, 0, 0, 0, 1 + 5 * 1 + 2);
    check_single(&gpt2_cfg, 1, 0, 0, 0, 3 * 2 + 2);
    check_single_chunk(&gpt2_cfg, 1, 1, 0, 0, 4, 1 + (5 + c) * 2 + 2);
    graph_prefill = 2; /* (the graph's keys and values cast to halves into the cache) */
    check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 4, 1 + (5 + c) * 1 + 2);
    check_single(&gpt2_cfg, 1, 0, 0, 0, 3 * 2 + 2);
    graph_prefill = 0;
    f16_cache = 0, plan_only = 0;
}

/* The MLP block in one launch (grid_block, wgpu-native at batch 1): the reference's tokens past
   the block (check_single_chunk), f32 and f16 weights, the attention whole and split, head
   sizes 6 and 8 (lavapipe: one workgroup, whose barriers pass at once, its tiles over every row;
   a GPU: the policy's grid, forced); 3 launches a layer fewer (the block works out the next layer's QKV), 2 layers and
   3. The policy's grid on a GPU, none on lavapipe; more workgroups than are resident refused
   (4,096 on a GPU: its trial's waits give up), and more than one on lavapipe; elsewhere the
   launches apart; grid_block past -1 or not a power of two refused. */
static void mlp_block_in_one_launch(void)
{
    wgml_context *ctx = test_context();
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    /* (3 launches a layer fewer, less layer 0's QKV) */
    const int one = info.runtime && strcmp(info.runtime, "wgpu-native") == 0, c = combine_launches(ctx);
#define SAVED(L) (one ? 3 * (L) - 1 : 0)
    /* (a GPU: the policy's grid, whose barriers are waited on; none resident: nothing to check) */
    const int cpu = info.adapter_type && strcmp(info.adapter_type, "CPU") == 0;
    grid_block = 1;
    if (!cpu) {
        model pm;
        model_make(ctx, &llama_cfg, 0, &pm);
        wgml_decode_plan *pp = NULL;
        const wgml_decode_desc d = {.batch = 1};
        CHECK_OK(ctx, wgml_decode_plan_create(&pm.g, &d, &pp));
        grid_block = (int)wgml_decode_grid_workgroups(pp);
        wgml_decode_plan_free(pp);
        model_free(&pm);
    }
    plan_only = 1;
    if (grid_block > 0 || !one) {
        check_single_chunk(&llama_cfg, 0, 0, 0, 0, -1, 1 + 5 * 2 + 2 - SAVED(2));
        check_single_chunk(&llama_cfg, 1, 0, 0, 0, 3, 1 + (5 + c) * 2 + 2 - SAVED(2));
        check_single_chunk(&llama8_cfg, 1, 0, 0, 0, 4, 1 + (5 + c) * 1 + 2 - SAVED(1));
        check_single_chunk(&llama8_cfg, 0, 0, 0, 0, -1, 1 + 5 * 1 + 2 - SAVED(1));
        {
            wgml_gpt_config l3 = llama_cfg;
            l3.layers = 3;
            check_single_chunk(&l3, 1, 0, 0, 0, 4, 1 + (5 + c) * 3 + 2 - SAVED(3));
            subgroups = -1; /* (the lanes' sums by trees in workgroup memory) */
            check_single_chunk(&l3, 0, 0, 0, 0, -1, 1 + 5 * 3 + 2 - SAVED(3));
            subgroups = 0;
        }
        /* (a width past 1,024 and not a multiple of 4, an odd hidden size: the stagings over
           more than 256 threads' vec4s, the last ones partly past the row) */
        check_single_chunk(&wide_cfg, 1, 0, 0, 0, -1, 1 + 5 * 1 + 2 - SAVED(1));
        /* (a hidden size past 4,096: h staged in rounds of 4 vec4s a thread) */
        check_single_chunk(&wide_ffn_cfg, 0, 0, 0, 0, -1, 1 + 5 * 1 + 2 - SAVED(1));
        /* (on a GPU, the barrier's arrivals over 4 counters, and over as many as the
           workgroups: one a counter; a CPU adapter's one workgroup takes one counter, so there
           the form is only compiled, below) */
        for (int k = 4; !cpu && k <= 16; k *= 4) {
            grid_counters = k;
            check_single_chunk(&llama_cfg, 1, 0, 0, 0, 3, 1 + (5 + c) * 2 + 2 - SAVED(2));
            const int saved = grid_block;
            grid_block = 16;
            check_single_chunk(&llama_cfg, 0, 0, 0, 0, -1, 1 + 5 * 2 + 2 - SAVED(2));
            grid_block = saved;
        }
        grid_counters = 0;
        if (!cpu) { /* (Qwen3-0.6B's form on a GPU: 256 workgroups, the policy's 8 counters) */
            const int saved = grid_block;
            grid_block = 256;
            check_single_chunk(&llama_cfg, 1, 0, 0, 0, 3, 1 + (5 + c) * 2 + 2 - SAVED(2));
            grid_block = saved;
        }
        /* (each way of waiting, the policy's above: the barrier, tagged, probed; on a GPU also
           at 256 workgroups, each over 8 counters, and at 128 over one, as the character GPT,
           at a width where every workgroup has rows in each phase, as probed needs) */
        for (grid_wait = 1; grid_wait <= 3; grid_wait++) {
            /* (these widths leave a GPU's grid workgroups without rows: probed there below only) */
            if (cpu || grid_wait != 3) {
                check_single_chunk(&llama_cfg, 1, 0, 0, 0, 3, 1 + (5 + c) * 2 + 2 - SAVED(2));
                check_single_chunk(&wide_ffn_cfg, 0, 0, 0, 0, -1, 1 + 5 * 1 + 2 - SAVED(1));
                if (one) check_single_chunk(&gpt2_cfg, 1, 0, 0, 0, -1, 4 + 2 * 2); /* (GPT-2's block) */
            }
            for (int w = 128; !cpu && w <= 256; w *= 2) {
                const int saved = grid_block;
                grid_block = w;
                check_single_chunk(&wide_cfg, 1, 0, 0, 0, -1, 1 + 5 * 1 + 2 - SAVED(1));
                grid_block = saved;
            }
        }
        grid_wait = 0;
        if (one && !cpu) { /* (probed where some workgroups would have no rows: refused, saying so) */
            model pm;
            model_make(ctx, &llama_cfg, 0, &pm);
            wgml_decode_plan *bad = NULL;
            const wgml_decode_desc d = {.batch = 1, .grid_block = 128, .grid_wait = 3};
            CHECK(wgml_decode_plan_create(&pm.g, &d, &bad) == WGML_ERROR_UNSUPPORTED && !bad &&
                  strstr(wgml_error_message(ctx), "rows in every phase"));
            model_free(&pm);
        }
    }
    { /* (probed's condition: Qwen3-0.6B at 256 and the character GPT at 128 workgroups have rows
         everywhere; a width of 20 at 128 has not, any shape at one workgroup has) */
        const wgml_decode_block qwen = {.C = 1024, .F = 3072, .W = 256}, chr = {.C = 384, .F = 1536, .W = 128, .ln = 1},
                                small = {.C = 20, .F = 36, .W = 128}, one_wg = {.C = 20, .F = 36, .W = 1};
        CHECK(wgml_decode_block_rows_everywhere(&qwen) && wgml_decode_block_rows_everywhere(&chr) &&
              !wgml_decode_block_rows_everywhere(&small) && wgml_decode_block_rows_everywhere(&one_wg));
    }
    /* (a CPU adapter runs one workgroup: there the 4 counters' barrier is compiled only, here at
       256 workgroups with each form of waiting, which ran above at one; a GPU runs them all above) */
    for (int ln = 0; ln <= 1; ln++)
        for (int wait = WGML_GRID_WAIT_BARRIER; wait <= WGML_GRID_WAIT_PROBED; wait++) {
            const wgml_decode_block bk = {.A = 40, .C = 36, .F = 50, .W = 256, .norm_w = 36, .Q = 60, .f16 = 1, .eps = 1e-5f, .ln = ln,
                                          .norm_b = 72, .bo = 108, .b1 = 144, .b2 = 194, .bq = 72, .K = 4, .wait = (wgml_grid_wait)wait};
            char *w = wgml_decode_block_wgsl(&bk);
            CHECK(w && wgml_pipeline_get(ctx, w, true) != NULL);
            /* (each of the 3 barriers arrives at a counter, none at word 0 alone; probed: none;
               the barrier's fences only in its form; the outputs' tags but in the barrier's) */
            int arrivals = 0;
            for (const char *q = w; q && (q = strstr(q, "grid_arrive(wg);")); q++) arrivals++;
            CHECK(arrivals == (wait == WGML_GRID_WAIT_PROBED ? 0 : 3) && w && !strstr(w, "grid_wait()") && !strstr(w, "grid_wait();"));
            CHECK(w && !strstr(w, "storageBarrier();\n    storageBarrier();") == (wait != WGML_GRID_WAIT_BARRIER));
            CHECK(w && !strstr(w, "& ~1u) | t") == (wait == WGML_GRID_WAIT_BARRIER) && !strstr(w, "fn gave_up") == (wait == WGML_GRID_WAIT_BARRIER));
            free(w);
        }
    if (one && grid_block > 0) {
        /* GPT-2: its LayerNorms, biases and GELU in the block, the attention appending k and v
           (the embedding, layer 0's QKV, 2 a layer, the head and the sampler) */
#define GPT2(L) (4 + 2 * (L))
        check_single_chunk(&gpt2_cfg, 0, 0, 0, 0, -1, GPT2(2));
        check_single_chunk(&gpt2_cfg, 1, 0, 0, 0, 4, GPT2(2)); /* (f16 weights; chunks of 4 positions where not fused) */
        f16_cache = 1;
        check_single_chunk(&gpt2_cfg, 0, 0, 0, 0, -1, GPT2(2)); /* (the appended k and v as halves) */
        f16_cache = 0;
        {
            wgml_gpt_config g3 = gpt2_cfg;
            g3.layers = 3;
            subgroups = -1;
            check_single_chunk(&g3, 0, 0, 0, 0, -1, GPT2(3));
            subgroups = 0;
            /* (a width past 1,024 and not a multiple of 4, an odd hidden size; a hidden size past 4,096) */
            const wgml_gpt_config gw = {.arch = WGML_GPT_GPT2, .vocab = 23, .block = 10, .layers = 1, .heads = 11, .width = 1034, .ffn = 1027},
                                  gf = {.arch = WGML_GPT_GPT2, .vocab = 23, .block = 10, .layers = 1, .heads = 2, .width = 20, .ffn = 4103};
            check_single_chunk(&gw, 1, 0, 0, 0, -1, GPT2(1));
            check_single_chunk(&gf, 0, 0, 0, 0, -1, GPT2(1));
            /* (an odd head size: the attention appends pairs, so no block: the fused form) */
            const wgml_gpt_config godd = {.arch = WGML_GPT_GPT2, .vocab = 23, .block = 10, .layers = 2, .heads = 3, .width = 21, .ffn = 30};
            check_single_chunk(&godd, 0, 0, 0, 0, -1, 3 * 2 + 2);
        }
#undef GPT2
    }
#undef SAVED
    grid_block = -1, plan_only = 0;
    model m;
    model_make(ctx, &llama_cfg, 0, &m);
    for (int k = -2; k <= 3; k += 5) {
        wgml_decode_plan *bad = NULL;
        const wgml_decode_desc d = {.batch = 1, .grid_block = k}, dk = {.batch = 1, .grid_counters = k == 3 ? 32 : k};
        CHECK(wgml_decode_plan_create(&m.g, &d, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
        CHECK(wgml_decode_plan_create(&m.g, &dk, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
    }
    {
        wgml_decode_plan *bad = NULL;
        const wgml_decode_desc d3 = {.batch = 1, .grid_counters = 3}, dw = {.batch = 1, .grid_wait = 4}, dn = {.batch = 1, .grid_wait = -1};
        CHECK(wgml_decode_plan_create(&m.g, &d3, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
        CHECK(wgml_decode_plan_create(&m.g, &dw, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
        CHECK(wgml_decode_plan_create(&m.g, &dn, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
    }
    if (one && cpu) { /* (no policy's grid there; more than one refused) */
        wgml_decode_plan *plan = NULL;
        const wgml_decode_desc d = {.batch = 1};
        CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
        if (plan) CHECK(wgml_decode_dispatches_per_step(plan) == 1 + 5 * 2 + 2 && wgml_decode_grid_workgroups(plan) == 0);
        wgml_decode_plan_free(plan);
        const wgml_decode_desc d2 = {.batch = 1, .grid_block = 2};
        CHECK(wgml_decode_plan_create(&m.g, &d2, &plan) == WGML_ERROR_UNSUPPORTED && !plan);
    } else if (one) { /* (a GPU: the policy's grid, and one past any GPU's residency refused) */
        wgml_decode_plan *plan = NULL;
        const wgml_decode_desc d = {.batch = 1};
        CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
        if (plan) CHECK(wgml_decode_dispatches_per_step(plan) == 1 + 5 * 2 + 2 - 5 && wgml_decode_grid_workgroups(plan) >= 128);
        wgml_decode_plan_free(plan);
        const wgml_decode_desc d2 = {.batch = 1, .grid_block = 4096};
        CHECK(wgml_decode_plan_create(&m.g, &d2, &plan) == WGML_ERROR_UNSUPPORTED && !plan);
    }
    /* (the barrier's count about to wrap past 2^32 within a step: the reference's tokens; then a
       wait that gave up: the tokens refused, and a fresh start right again) */
    for (int gk = 1; one && gk <= (cpu ? 1 : 4); gk += 3) { /* (one counter, then on a GPU 4: each wraps at the same barrier) */
        wgml_decode_plan *plan = NULL;
        const int gb = cpu ? 1 : 0;
        const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 5, .grid_block = gb, .grid_counters = gk};
        CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
        const unsigned w = plan ? wgml_decode_grid_workgroups(plan) : 0;
        if (w) {
            enum { NP = 4, NN = 16 };
            const int32_t prompt[NP] = {3, 17, 5, 11}, *pp = prompt;
            const int64_t np = NP;
            int32_t want[NN], got[NN];
            reference_greedy(m.r, prompt, NP, NN, want);
            CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
            CHECK(wgml_decode_grid_words(plan, 3u, 0) == (w > 1 ? WGML_ERROR_INVALID_ARGUMENT : WGML_OK));
            CHECK_OK(ctx, wgml_decode_grid_words(plan, 0u - 3u * w, 0));
            CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got + 1));
            same_tokens("grid count past 2^32 vs reference", got, want, NN);
            CHECK_OK(ctx, wgml_decode_grid_words(plan, 0, 1));
            CHECK(wgml_decode_generate(plan, 3, got) == WGML_ERROR_DEVICE);
            CHECK(strstr(wgml_error_message(ctx), "gave up") != NULL);
            CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
            CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got + 1));
            same_tokens("a fresh start after a wait gave up vs reference", got, want, NN);
        }
        wgml_decode_plan_free(plan);
        const wgml_decode_desc d0 = {.batch = 1, .grid_block = -1};
        CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d0, &plan));
        if (plan) CHECK(wgml_decode_grid_words(plan, 0, 0) == WGML_ERROR_UNSUPPORTED);
        wgml_decode_plan_free(plan);
    }
    /* (batch 2: the three launches) */
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = 2, .grid_block = 4};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    if (plan) CHECK(wgml_decode_dispatches_per_step(plan) == 1 + 5 * 2 + 2);
    wgml_decode_plan_free(plan);
    model_free(&m);
}

/* The barrier over K counters as the block's WGSL runs it, modelled on the host: workgroup g
   adds to counter g % K, its goal (old & ~(W / K - 1)) + W / K. From the hook's starting counts
   (wgml_decode_grid_counter_start), in random orders of arrival: every workgroup of a barrier
   gets the same goal, which every counter reaches exactly when the last has arrived (not
   before: the waits' condition), and a count 3 W short of 2^32 wraps every counter at the third
   barrier, as one counter would. */
static void grid_counters_model(void)
{
    const unsigned Ws[3] = {1, 16, 256};
    for (int wi = 0; wi < 3; wi++)
        for (unsigned K = 1; K <= 16 && K <= Ws[wi]; K *= 2) {
            const unsigned W = Ws[wi], per = W / K;
            const uint32_t starts[4] = {0, W, 0u - W, 0u - 3u * W};
            for (int si = 0; si < 4; si++) {
                uint32_t c[16];
                for (unsigned j = 0; j < K; j++) c[j] = wgml_decode_grid_counter_start(starts[si], K);
                int ok = 1;
                for (int bar = 1; bar <= 5 && ok; bar++) {
                    unsigned order[256];
                    for (unsigned g = 0; g < W; g++) order[g] = g;
                    for (unsigned g = W; g > 1; g--) { /* (a random order of arrival) */
                        const unsigned r = (unsigned)(test_rand_u64() % g), t = order[g - 1];
                        order[g - 1] = order[r], order[r] = t;
                    }
                    uint32_t goal0 = 0;
                    for (unsigned a = 0; a < W && ok; a++) {
                        const unsigned g = order[a];
                        const uint32_t goal = (c[g % K]++ & ~(per - 1u)) + per;
                        if (a == 0) goal0 = goal;
                        ok = goal == goal0;
                        /* (before the last arrival some counter is short of the goal) */
                        int all = 1;
                        for (unsigned j = 0; j < K; j++) all &= (int32_t)(c[j] - goal0) >= 0;
                        if (a + 1 < W) ok &= !all;
                    }
                    for (unsigned j = 0; j < K && ok; j++) ok = c[j] == goal0;
                    if (ok && si == 3 && bar == 3) /* (the wrap: one counter is back at 0 here) */
                        for (unsigned j = 0; j < K; j++) ok &= c[j] == 0;
                }
                if (!ok) fprintf(stderr, "grid counters: W %u, K %u, start %u\n", W, K, starts[si]);
                CHECK(ok);
            }
        }
}

/* A submit refused (wgml_debug_fail_submits) in the prefill or in the middle of generation,
   where the chunk before is still in flight: the call fails with WGML_ERROR_DEVICE, and a
   fresh start of the same plan gives the reference's tokens again */
static void a_refused_submit_then_a_fresh_start(void)
{
    wgml_context *ctx = test_context();
    model m;
    model_make(ctx, &llama_cfg, 0, &m);
    enum { NP = 4, NN = 24 };
    const int32_t prompt[NP] = {3, 17, 5, 11}, *pp = prompt;
    const int64_t np = NP;
    int32_t want[NN], got[NN];
    reference_greedy(m.r, prompt, NP, NN, want);
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 5};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    for (int skip = 0; plan && skip <= 3; skip++) {
        memset(got, 0, sizeof got);
        wgml_debug_fail_submits(ctx, skip, 1);
        wgml_status st = wgml_decode_start(plan, 1, &pp, &np, got);
        if (!st) st = wgml_decode_generate(plan, NN - 1, got + 1);
        CHECK(st == WGML_ERROR_DEVICE && strstr(wgml_error_message(ctx), "on purpose") != NULL);
        wgml_debug_fail_submits(ctx, 0, 0);
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, got));
        CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got + 1));
        same_tokens("a fresh start after a refused submit vs reference", got, want, NN);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

/* A plan of d over m from prompt: its first nn tokens are the reference's greedy ones (and, where
   chunk > 0, the attention's chunk its first step takes after the prompt is that). */
static void plan_vs_reference(model *m, const wgml_decode_desc *d, const int32_t *prompt, int64_t np, int nn, unsigned chunk,
                              const char *what)
{
    wgml_context *ctx = test_context();
    int32_t want[32], got[32];
    if (nn > 32) nn = 32;
    reference_greedy(m->r, prompt, (int)np, nn, want);
    wgml_decode_plan *plan = NULL;
    CHECK_OK(ctx, wgml_decode_plan_create(&m->g, d, &plan));
    if (plan) {
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &prompt, &np, got));
        if (chunk) CHECK(wgml_decode_step_chunk(plan, 1) == chunk);
        CHECK_OK(ctx, wgml_decode_generate(plan, nn - 1, got + 1));
        same_tokens(what, got, want, nn);
    }
    wgml_decode_plan_free(plan);
}

/* The GEMVs' matrices laid out by a graph on the GPU (where the widths are multiples of 8: here
   every matrix, the SwiGLU's interleaved gate and up among them) give the tokens of the host's
   layout and of the reference: f32 and f16 weights, Llama and GPT-2 (fused and not). */
static void matrices_laid_out_on_the_gpu(void)
{
    wgml_context *ctx = test_context();
    const wgml_gpt_config llama16 = {.arch = WGML_GPT_LLAMA, .vocab = 37, .block = 12, .layers = 2, .heads = 4, .kv_heads = 2,
                                     .width = 16, .head_dim = 8, .qk_norm = 1, .ffn = 24, .rope_base = 100.0f};
    const wgml_gpt_config *cfgs[] = {&llama16, &gpt2_cfg};
    const int32_t prompt[3] = {5, 1, 19};
    for (int ci = 0; ci < 2; ci++)
        for (int f16 = 0; f16 < 2; f16++) {
            model m;
            model_make(ctx, cfgs[ci], f16, &m);
            for (int host = 0; host < 2; host++)
                for (int unfused = 0; unfused < (ci == 1 ? 2 : 1); unfused++) {
                    const wgml_decode_desc d = {.batch = 1, .f16_weights = f16, .steps_per_submit = 4, .host_layout = host,
                                                .unfused = unfused};
                    plan_vs_reference(&m, &d, prompt, 3, 20, 0, host ? "host layout vs reference" : "GPU layout vs reference");
                }
            model_free(&m);
        }
    wgml_decode_plan *bad = NULL;
    model m;
    model_make(ctx, &gpt2_cfg, 0, &m);
    const wgml_decode_desc d = {.batch = 1, .host_layout = 2};
    CHECK(wgml_decode_plan_create(&m.g, &d, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
    model_free(&m);
}

/* wgml_gpt_generate's sampler through the decode plan (wgml_decode_sample_tokens with on_cpu:
   lavapipe too): the reference's greedy tokens past the block in one call, each passed to
   on_token in order; a callback that stops at the 7th gets 7 and out holds those 7 only; one
   token alone. */
typedef struct seen {
    int32_t tok[64];
    int n, stop_at;
} seen;

static int see_token(int32_t token, void *user)
{
    seen *s = user;
    if (s->n < 64) s->tok[s->n] = token;
    s->n++;
    return s->stop_at && s->n == s->stop_at;
}

/* A stop met while the window restarts: no chunk is submitted after it (block 10, a prompt of
   4: chunks of 1, 2 and 3 steps fill the block; the 4th token, in the third, stops: 6 tokens
   written, none after). */
static int stop_at_4th(int64_t slot, int32_t token, void *user)
{
    (void)slot, (void)token;
    return ++*(int *)user == 4;
}

static void stop_at_the_restart(void)
{
    wgml_context *ctx = test_context();
    model m;
    model_make(ctx, &llama8_cfg, 0, &m);
    const int32_t prompt[4] = {3, 9, 1, 7};
    const int32_t *pp = prompt;
    const int64_t np = 4;
    int32_t first = 0, out[20];
    for (int i = 0; i < 20; i++) out[i] = -1;
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 4, .graph_prefill = -1};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    if (plan) {
        int n = 0;
        CHECK_OK(ctx, wgml_decode_start(plan, 1, &pp, &np, &first));
        CHECK_OK(ctx, wgml_decode_generate_each(plan, 20, out, stop_at_4th, &n));
        CHECK(n == 4 && out[5] >= 0 && out[6] == -1 && out[19] == -1);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

static void generate_through_the_plan(void)
{
    wgml_context *ctx = test_context();
    const wgml_gpt_config *cfgs[] = {&llama8_cfg, &gpt2_cfg};
    enum { NP = 4, NN = 45 };
    const int32_t prompt[NP] = {3, 9, 1, 7};
    for (int ci = 0; ci < 2; ci++) {
        model m;
        model_make(ctx, cfgs[ci], 0, &m);
        int32_t want[NN], got[NN + 1];
        reference_greedy(m.r, prompt, NP, NN, want);
        seen sn = {.n = 0};
        got[NN] = -7;
        int used = 0;
        CHECK_OK(ctx, wgml_decode_sample_tokens(&m.g, prompt, NP, NN, 0.0f, 0, got, see_token, &sn, 1, &used));
        CHECK(used == 1);
        same_tokens("generate through the plan vs reference", got, want, NN);
        CHECK(sn.n == NN && got[NN] == -7 && memcmp(sn.tok, want, sizeof want) == 0);
        seen st = {.stop_at = 7};
        for (int i = 0; i < NN; i++) got[i] = -1;
        CHECK_OK(ctx, wgml_decode_sample_tokens(&m.g, prompt, NP, NN, 0.0f, 0, got, see_token, &st, 1, &used));
        CHECK(st.n == 7 && memcmp(got, want, 7 * sizeof *got) == 0 && got[7] == -1 && got[NN - 1] == -1);
        int32_t one = -1;
        CHECK_OK(ctx, wgml_decode_sample_tokens(&m.g, prompt, NP, 1, 0.0f, 0, &one, NULL, NULL, 1, &used));
        CHECK(one == want[0]);
        model_free(&m);
        /* f16 weights (wgml_gpt_sample_desc.f16_weights): a model whose weights f16 holds
           exactly, so the plan's sums are the reference's */
        model_make(ctx, cfgs[ci], 1, &m);
        reference_greedy(m.r, prompt, NP, NN, want);
        CHECK_OK(ctx, wgml_decode_sample_tokens(&m.g, prompt, NP, NN, 0.0f, 1, got, NULL, NULL, 1, &used));
        CHECK(used == 1);
        same_tokens("generate with f16 weights vs reference", got, want, NN);
        model_free(&m);
    }
}

/* wgml_gpt_generate_batch: 11 prompts of 1-15 tokens (some past the block), greedy, GPT-2 and
   Llama, f32 and f16 weights (f16 holds them exactly): each its reference's tokens, through the
   public call (on a CPU adapter prompt by prompt) and through the plan itself
   (wgml_decode_sample_batch with on_cpu: 8 slots in two turns); the plan at a temperature draws
   the same tokens again from a seed, and 11 copies of a prompt do not all draw alike (each turn
   its own noise); where 8 slots' caches pass the adapter's binding limit the plan takes fewer
   (lavapipe: 128 MiB; a GPU's may hold them); top_k at a temperature goes prompt by prompt; bad
   arguments refused. */
static void generate_batch_api(void)
{
    wgml_context *ctx = test_context();
    enum { S = 11, NN = 17, MAXP = 15 };
    int32_t pbuf[S][MAXP], got[S * NN], again[S * NN], want[NN];
    int64_t lens[S], same_lens[S];
    const int32_t *prompts[S], *same[S];
    for (int s = 0; s < S; s++) {
        lens[s] = 1 + (s * 5) % MAXP;
        for (int i = 0; i < MAXP; i++) pbuf[s][i] = (s * 7 + i * 3 + 1) % 23;
        prompts[s] = pbuf[s], same[s] = pbuf[3];
    }
    for (int s = 0; s < S; s++) same_lens[s] = lens[3];
    const wgml_gpt_config *cfgs[] = {&llama_cfg, &gpt2_cfg};
    int used = 0;
    for (int ci = 0; ci < 2; ci++)
        for (int f16 = 0; f16 <= 1; f16++) {
            model m;
            model_make(ctx, cfgs[ci], f16, &m);
            const wgml_gpt_sample_desc d = {.f16_weights = f16, .top_k = 3}; /* (top_k at temperature 0: greedy) */
            CHECK_OK(ctx, wgml_gpt_generate_batch(&m.g, S, prompts, lens, NN, &d, got));
            CHECK_OK(ctx, wgml_decode_sample_batch(&m.g, S, prompts, lens, NN, 0.0f, f16, again, 1, &used));
            CHECK(used == 1);
            for (int s = 0; s < S; s++) {
                reference_greedy(m.r, prompts[s], (int)lens[s], NN, want);
                same_tokens("generate_batch vs reference", got + s * NN, want, NN);
                same_tokens("the batch's plan vs reference", again + s * NN, want, NN);
            }
            model_free(&m);
        }
    model m;
    model_make(ctx, &llama_cfg, 0, &m);
    CHECK_OK(ctx, wgml_manual_seed(ctx, 5));
    CHECK_OK(ctx, wgml_decode_sample_batch(&m.g, S, same, same_lens, NN, 1.5f, 0, got, 1, &used));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 5));
    CHECK_OK(ctx, wgml_decode_sample_batch(&m.g, S, same, same_lens, NN, 1.5f, 0, again, 1, &used));
    CHECK(memcmp(got, again, sizeof got) == 0);
    CHECK(memcmp(got, got + 8 * NN, NN * sizeof *got) != 0); /* (slot 0 of the first turn and of the second) */
    const wgml_gpt_sample_desc topk = {.temperature = 1.0f, .top_k = 3};
    for (int i = 0; i < S * NN; i++) got[i] = -1;
    CHECK_OK(ctx, wgml_gpt_generate_batch(&m.g, 3, prompts, lens, NN, &topk, got));
    int ok = 1;
    for (int i = 0; i < 3 * NN; i++) ok &= got[i] >= 0 && got[i] < 31;
    CHECK(ok);
    /* refused: no sequences, no prompts, an empty prompt, a token past the vocabulary, no out */
    CHECK(wgml_gpt_generate_batch(&m.g, 0, prompts, lens, NN, NULL, got) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_gpt_generate_batch(&m.g, S, NULL, lens, NN, NULL, got) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_gpt_generate_batch(&m.g, S, prompts, lens, NN, NULL, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    lens[2] = 0;
    CHECK(wgml_gpt_generate_batch(&m.g, S, prompts, lens, NN, NULL, got) == WGML_ERROR_INVALID_ARGUMENT &&
          strstr(wgml_error_message(ctx), "prompt 2"));
    lens[2] = 3, pbuf[2][1] = 31;
    CHECK(wgml_gpt_generate_batch(&m.g, S, prompts, lens, NN, NULL, got) == WGML_ERROR_INVALID_ARGUMENT &&
          strstr(wgml_error_message(ctx), "prompt 2"));
    CHECK(wgml_gpt_generate_batch(NULL, S, prompts, lens, NN, NULL, got) == WGML_ERROR_INVALID_ARGUMENT);
    model_free(&m);
    /* a block of 60,000 at width 80: 8 slots' K cache 154 MB, past lavapipe's 128 MiB binding */
    const wgml_gpt_config longc = {.arch = WGML_GPT_GPT2, .vocab = 29, .block = 60000, .layers = 1, .heads = 2, .width = 80, .ffn = 64};
    pbuf[2][1] = 1;
    model_make(ctx, &longc, 0, &m);
    CHECK_OK(ctx, wgml_decode_sample_batch(&m.g, 8, prompts, lens, 5, 0.0f, 0, got, 1, &used));
    CHECK(used == 1);
    for (int s = 0; s < 8; s++) {
        reference_greedy(m.r, prompts[s], (int)lens[s], 5, want);
        same_tokens("generate_batch at fewer slots vs reference", got + s * 5, want, 5);
    }
    model_free(&m);
}

/* A block whose scores do not fit the workgroup memory whole (8,192 positions: 64 KiB of them
   at two query heads a K/V head): the plan splits its prefill's attention too (chunks of 128,
   combined by a launch) and its decode step's; the reference's tokens after a prompt fed by the
   model's graph, by rows of 16 a pass, and a short one, and with the decode step's longer
   chunks taken (attn_target: chunks of 64 to position 64, then 128; or 512 throughout); GPT-2
   (unfused there) alike. attn_target below 0 refused. */
static void long_block(void)
{
    wgml_context *ctx = test_context();
    wgml_gpt_config l = llama8_cfg, gp = gpt2_cfg;
    l.block = 8192, gp.block = 8192;
    const wgml_gpt_config *cfgs[] = {&l, &gp};
    enum { NP = 70, NN = 12 };
    int32_t prompt[NP];
    for (int ci = 0; ci < 2; ci++) {
        model m;
        model_make(ctx, cfgs[ci], 0, &m);
        for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 11 + 3) % m.cfg.vocab);
        for (int v = 0; v < 5; v++) { /* (3, 4: the decode step's longer chunks, 128 from position 65 on, and 512) */
            const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 4, .max_prefill = 16, .graph_prefill = v == 1 ? -1 : 0,
                                        .attn_target = v == 3 ? (int)m.cfg.kv_heads : v == 4 ? 1 : 0};
            static const char *const what[] = {"long block, graph prefill", "long block, rows prefill", "long block, short prompt",
                                               "long block, longer chunks", "long block, longest chunks"};
            plan_vs_reference(&m, &d, prompt, v == 2 ? 5 : v == 3 ? 58 : NP, NN, 0, what[v]);
        }
        /* kept whole, as attn_chunk -1 asks: refused */
        wgml_decode_plan *bad = NULL;
        const wgml_decode_desc d = {.batch = 1, .attn_chunk = -1};
        CHECK(wgml_decode_plan_create(&m.g, &d, &bad) == WGML_ERROR_UNSUPPORTED && !bad);
        const wgml_decode_desc d2 = {.batch = 1, .attn_target = -1};
        CHECK(wgml_decode_plan_create(&m.g, &d2, &bad) == WGML_ERROR_INVALID_ARGUMENT && !bad);
        model_free(&m);
    }
    /* a prompt of 300 by rows of 64 (the prefill's chunks of 128: three combined), then chunks
       of 256 two at a time (attn_target twice the K/V heads), the chunk asked of the plan; and
       8 query heads a K/V head at a block of 16,384 (its chunks held to what fits: 64 a decode
       step, 256 a prefill; longer ones not built where they would not fit) */
    {
        model m;
        model_make(ctx, &l, 0, &m);
        enum { LP = 300 };
        int32_t lp[LP];
        for (int i = 0; i < LP; i++) lp[i] = (int32_t)((i * 7 + 1) % m.cfg.vocab);
        const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 4, .max_prefill = 64, .graph_prefill = -1,
                                    .attn_target = 2 * (int)m.cfg.kv_heads};
        plan_vs_reference(&m, &d, lp, LP, NN, 256, "long block, 300 positions");
        model_free(&m);
    }
    {
        wgml_gpt_config g8 = llama8_cfg;
        g8.block = 16384, g8.heads = 8, g8.kv_heads = 1, g8.width = 16;
        model m;
        model_make(ctx, &g8, 0, &m);
        const int32_t sp[6] = {4, 8, 15, 16, 2, 4};
        for (int t = 0; t < 2; t++) { /* the policy's chunk, and the longest that fits (attn_target 1) */
            const wgml_decode_desc d = {.batch = 1, .steps_per_submit = 4, .attn_target = t};
            plan_vs_reference(&m, &d, sp, 6, NN, 0, "long block, 8 query heads a K/V head");
        }
        model_free(&m);
    }
}

static void profile_by_kind_short_block(void) { profile_by_kind(11); }
static void profile_by_kind_with_room(void) { profile_by_kind(40); }

/* Three prompts of different lengths (one past the block) in one batch: each slot's tokens are
   its prompt's alone. */
static void check_batch(const wgml_gpt_config *cfg_in)
{
    wgml_context *ctx = test_context();
    model m;
    model_make(ctx, cfg_in, batch_f16, &m);
    enum { S = 3, NN = 20 };
    const int32_t a[] = {7}, b[] = {1, 2, 3, 4, 5, 6, 7}, c[] = {28, 0, 12, 19, 8, 8, 2, 9, 14, 22, 5, 1, 27};
    const int32_t *prompts[S] = {a, b, c};
    const int64_t lens[S] = {N_OF(a), N_OF(b), N_OF(c)};
    int32_t want[S * NN], got[S * NN], first[S];
    for (int s = 0; s < S; s++) reference_greedy(m.r, prompts[s], (int)lens[s], NN, want + s * NN);
    wgml_decode_plan *plan = NULL;
    const wgml_decode_desc d = {.batch = S, .steps_per_submit = 4, .max_prefill = 5, .graph_prefill = graph_prefill,
                                .subgroups = subgroups, .head_wgs = head_wgs, .lanes = lanes_all, .head_lanes = head_lanes,
                                .gemv_wgs = gemv_wgs, .gemv_rows = gemv_rows, .gemv_planes = gemv_planes, .f16_weights = batch_f16,
                                .x_chunk = x_chunk, .gemv_row_groups = row_groups};
    CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
    if (plan) {
        /* the prompts through the graph (an evaluation of it) only where asked */
        wgml_stats a, b;
        wgml_stats_get(ctx, &a);
        CHECK_OK(ctx, wgml_decode_start(plan, S, prompts, lens, first));
        wgml_stats_get(ctx, &b);
        CHECK(graph_prefill > 0 ? b.evals > a.evals : b.evals == a.evals);
        CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, got));
        same_slots("batch slot vs reference", S, NN, first, got, want);
    }
    wgml_decode_plan_free(plan);
    model_free(&m);
}

static void batch_of_prompts(void) { check_batch(&llama_cfg); }

/* The GEMVs' sums (lanes of an output, the norm's statistics) by subgroup shuffles and by trees
   in workgroup memory, where the adapter has subgroups (lavapipe's are narrower than 32 lanes,
   so 64 and 128 lanes an output add the parts of several subgroups; 16 may fit one); and the
   LM head over its tiles in few workgroups (grid stride: 1 workgroup for all 8 tiles of 4 rows,
   3 for them, each going over 2 or 3, and 3 for 4 tiles of 8 rows; the next tile's loads before
   this one's sums), and so past batch 1 the GEMVs that norm x: greedy
   tokens against the reference, batch 1 and 3, f32 and f16. */
static void gemv_subgroups_and_head_stride(void)
{
    wgml_adapter_info info;
    const int has_sg = wgml_adapter_info_get(test_context(), &info) == WGML_OK && info.has_subgroups;
    plan_only = 1;
    for (int on = has_sg ? 1 : -1; on >= -1; on -= 2) {
        subgroups = on;
        check_single(&llama_cfg, 1, 0, 128, 0, 1 + 5 * 2 + 2);
        check_single(&llama_cfg, 0, 0, 16, 0, 1 + 5 * 2 + 2);
        check_single(&gpt2_cfg, 0, 1, 64, 0, 1 + 5 * 2 + 2);
        check_single(&gpt2_cfg, 0, 0, 32, 0, 3 * 2 + 2);
        head_lanes = 64; /* 4 rows a tile: the vocabulary of 31 in 8 tiles */
        for (head_wgs = 1; head_wgs <= 3; head_wgs += 2) {
            check_single(&llama_cfg, on > 0, 0, 0, 0, 1 + 5 * 2 + 2);
            check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2);
            check_batch(&llama_cfg);
        }
        head_lanes = 32, head_wgs = 3; /* 8 rows a tile (the batch-1 head's lanes): 4 tiles, the last short, in 3 workgroups */
        check_single(&llama_cfg, on > 0, 0, 0, 0, 1 + 5 * 2 + 2);
        check_batch(&llama_cfg);
        head_lanes = 64;
        lanes_all = 128, head_wgs = 5; /* (5 workgroups for the 8 tiles) */
        check_batch(&gpt2_cfg);
        lanes_all = 8, head_wgs = 0; /* (the fewest lanes an output the knob takes) */
        check_batch(&llama_cfg);
        lanes_all = 0, head_lanes = 0;
        /* past batch 1 the normed GEMVs (16 lanes: Llama's QKV 3 tiles, gate/up 5; GPT-2's fused
           QKV 5) in grid stride over 1 and 2 workgroups */
        for (gemv_wgs = 1; gemv_wgs <= 2; gemv_wgs++) {
            check_batch(&llama_cfg);
            check_batch(&gpt2_cfg);
        }
        gemv_wgs = 0;
    }
    subgroups = 0, plan_only = 0;
}
/* Past batch 1, each lane group of a GEMV summing 2 or 4 rows (tiles of 2-4x the rows, the last
   short: Llama's vocabulary of 31 in 1-2 tiles, its QKV and gate/up in 1-3), with x staged in
   planes or not, f32 and f16 weights, the head a workgroup a tile and in grid stride over 1
   and 2 workgroups, the prefill's rows (5 a pass) too, and x in chunks of 8 inputs: greedy
   tokens against the reference.
   And at a temperature, the candidates of such a head draw as every logit does. */
static void gemv_rows_and_planes(void)
{
    plan_only = 1;
    for (gemv_rows = 2; gemv_rows <= 4; gemv_rows += 2)
        for (batch_f16 = 0; batch_f16 <= 1; batch_f16++)
            for (gemv_planes = -1; gemv_planes <= 1; gemv_planes += 2) {
                check_batch(&llama_cfg);
                check_batch(&gpt2_cfg);
            }
    batch_f16 = 1, gemv_planes = 1;
    head_lanes = 64; /* (4 rows a group of lanes, 8 or 16 a tile) */
    for (head_wgs = 1; head_wgs <= 2; head_wgs++)
        for (gemv_rows = 2; gemv_rows <= 4; gemv_rows += 2) {
            gemv_wgs = head_wgs;
            check_batch(&llama_cfg);
            check_batch(&gpt2_cfg);
        }
    gemv_wgs = head_wgs = head_lanes = 0;
    /* x in chunks of 8 inputs (each chunk's weights loaded during the last one's sums) */
    x_chunk = 8;
    for (gemv_rows = 1; gemv_rows <= 2; gemv_rows++) {
        check_batch(&llama_cfg);
        check_batch(&gpt2_cfg);
    }
    x_chunk = 0;
    /* the GEMVs without a norm over one group of rows (-1), and over 2 and 3 (3 slots: 2 + 1
       rows, a row each) */
    for (row_groups = -1; row_groups <= 3; row_groups += row_groups == -1 ? 3 : 1) {
        check_batch(&llama_cfg);
        check_batch(&gpt2_cfg);
        gemv_wgs = 1; /* (the normed GEMVs in grid stride over 1 workgroup a group) */
        check_batch(&llama_cfg);
        gemv_wgs = 0;
    }
    row_groups = 0;
    gemv_rows = 0, gemv_planes = 0, batch_f16 = 0, plan_only = 0;
}

/* GPT-2 batch: the fused launches with rows of several slots */
static void gpt2_batch(void) { check_batch(&gpt2_cfg); }

/* Prompts and window restarts of 2 positions or more prefilled through the model's graph
   (GEMMs; its keys and values copied into the plan's cache), the rest by the plan's rows: the
   same tokens as the reference, f32 and f16 weights, GPT-2 and Llama (QK-norm and RoPE) */
static void prefill_through_the_graph(void)
{
    graph_prefill = 2;
    plan_only = 1;
    check_single(&gpt2_cfg, 0, 0, 0, 0, 3 * 2 + 2);
    check_single(&llama_cfg, 1, 0, 0, 2, 1 + 5 * 2 + 2);
    check_batch(&gpt2_cfg);
    check_batch(&llama_cfg);
    graph_prefill = -1; /* never: the rows alone */
    check_batch(&llama_cfg);
    graph_prefill = 0, plan_only = 0;
}

/* At a temperature, the sampler's draw from the head's candidates (each workgroup's best noised
   logit) equals its draw from all the logits, token for token: two slots, a vocabulary of
   4,500 (282 candidates at 16 lanes an output, 16 outputs a workgroup; and 7 from the grid-stride
   head, each over 40 or 41 tiles); and it is a draw (not the greedy tokens throughout). */
static void candidates_draw_as_logits(void)
{
    wgml_context *ctx = test_context();
    const wgml_gpt_config cin = {.arch = WGML_GPT_LLAMA, .vocab = 4500, .block = 16, .layers = 1, .heads = 2, .kv_heads = 1,
                                 .width = 16, .head_dim = 8, .qk_norm = 1, .ffn = 24, .rope_base = 1000.0f};
    enum { S = 2, NN = 24 };
    const int32_t a[] = {4321, 7, 99}, b[] = {12};
    const int32_t *prompts[S] = {a, b};
    const int64_t lens[S] = {N_OF(a), N_OF(b)};
    {
        model m;
        model_make(ctx, &cin, 0, &m);
        int32_t got[3][S * NN], first[3][S], greedy[S * NN];
        reference_greedy(m.r, a, (int)lens[0], NN, greedy);
        int32_t rows2[2][S * NN], first2[2][S];
        for (int all = 0; all < 5; all++) { /* (2: the candidates of 7 grid-stride workgroups; 3, 4: a tile a
                                               workgroup and grid stride, lane groups of 2 rows) */
            wgml_decode_plan *plan = NULL;
            const wgml_decode_desc d = {.batch = S, .steps_per_submit = 5, .temperature = 1.5f, .seed = 77, .sample_logits = all == 1,
                                        .lanes = 16, .head_wgs = all == 2 || all == 4 ? 7 : -1, .gemv_rows = all >= 3 ? 2 : 0};
            int32_t *g = all < 3 ? got[all] : rows2[all - 3], *f = all < 3 ? first[all] : first2[all - 3];
            CHECK_OK(ctx, wgml_decode_plan_create(&m.g, &d, &plan));
            if (plan) {
                CHECK_OK(ctx, wgml_decode_start(plan, S, prompts, lens, f));
                CHECK_OK(ctx, wgml_decode_generate(plan, NN - 1, g));
            }
            wgml_decode_plan_free(plan);
        }
        int differ = first[1][0] != greedy[0];
        for (int s = 0; s < S; s++) CHECK(first[0][s] == first[1][s] && first[2][s] == first[1][s]);
        same_tokens("candidates vs logits", got[0], got[1], S * (NN - 1));
        same_tokens("grid-stride candidates vs logits", got[2], got[1], S * (NN - 1));
        for (int v = 0; v < 2; v++) {
            for (int s = 0; s < S; s++) CHECK(first2[v][s] == first[1][s]);
            same_tokens("candidates of 2-row lane groups vs logits", rows2[v], got[1], S * (NN - 1));
        }
        for (int k = 1; k < NN; k++) differ |= got[1][k - 1] != greedy[k];
        CHECK(differ);
        model_free(&m);
    }
}

/* head_dim apart from width / heads, and QK-norm: the graph's forward against the reference. */
static void qk_norm_and_head_dim_forward(void)
{
    wgml_context *ctx = test_context();
    model m;
    model_make(ctx, &llama_cfg, 0, &m);
    const wgml_gpt_config cfg = m.cfg;
    CHECK(cfg.head_dim == 6 && wgml_gpt_param_count(&cfg) == 1 + 8 * 2 + 1);
    char name[WGML_GPT_NAME];
    int nd;
    int64_t sh[2];
    wgml_gpt_param_info(&cfg, 1 + 2, name, &nd, sh); /* attn.wo: [H D, C] */
    CHECK(strcmp(name, "h.0.attn.wo") == 0 && sh[0] == 24 && sh[1] == 20);
    wgml_gpt_param_info(&cfg, 1 + 7, name, &nd, sh);
    CHECK(strcmp(name, "h.0.attn.knorm.w") == 0 && nd == 1 && sh[0] == 6);
    enum { T = 9 };
    const int32_t ids[T] = {1, 30, 4, 4, 17, 0, 9, 22, 3};
    double want[T * 31];
    gpt_ref_logits(m.r, ids, T, want);
    wgml_tensor *t = test_tensor_i32(ctx, 2, (int64_t[2]){1, T}, ids);
    float *got = test_read_new(ctx, "logits", wgml_gpt_logits(&m.g, t, 0.0f), T * 31);
    if (got) test_close("qk_norm logits", got, want, T * 31, 1e-4, 1e-3);
    /* a bad head size or qk_norm on GPT-2 is refused with a message */
    char err[200];
    wgml_gpt_config bad = llama_cfg, resolved;
    bad.head_dim = 7;
    CHECK(wgml_gpt_config_resolve(&bad, &resolved, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "even"));
    bad = gpt2_cfg;
    bad.qk_norm = 1;
    CHECK(wgml_gpt_config_resolve(&bad, &resolved, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT && strstr(err, "qk_norm"));
    free(got);
    wgml_tensor_free(t);
    model_free(&m);
}

int main(void)
{
    test_seed(0xdec0de);
    TEST_RUN(qk_norm_and_head_dim_forward);
    TEST_RUN(gpt2_plan_equals_graph_and_reference);
    TEST_RUN(prefill_through_the_graph);
    TEST_RUN(gpt2_plan_f16_weights);
    TEST_RUN(gpt2_plan_unfused);
    TEST_RUN(llama_plan_equals_graph_and_reference);
    TEST_RUN(llama_plan_f16_weights);
    TEST_RUN(llama_plan_head_size_8);
    TEST_RUN(batch_of_prompts);
    TEST_RUN(gpt2_batch);
    TEST_RUN(llama_split_attention);
    TEST_RUN(long_context_split);
    TEST_RUN(gemv_x_in_chunks);
    TEST_RUN(lm_head_lanes);
    TEST_RUN(gemv_subgroups_and_head_stride);
    TEST_RUN(gemv_rows_and_planes);
    TEST_RUN(gpt2_fused_mlp_blocks);
    TEST_RUN(gpt2_attention_column_blocks);
    TEST_RUN(cache_in_halves);
    TEST_RUN(matrices_laid_out_on_the_gpu);
    TEST_RUN(generate_through_the_plan);
    TEST_RUN(generate_batch_api);
    TEST_RUN(stop_at_the_restart);
    TEST_RUN(long_block);
    TEST_RUN(profile_by_kind_short_block);
    TEST_RUN(profile_by_kind_with_room);
    TEST_RUN(candidates_draw_as_logits);
    TEST_RUN(mlp_block_in_one_launch); /* (last but the model below: the tests' random weights are drawn in order) */
    TEST_RUN(grid_counters_model);
    TEST_RUN(a_refused_submit_then_a_fresh_start);
    return test_summary();
}
