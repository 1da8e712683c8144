/*
 * The GPT models' CPU reference (gpt_ref.h) checked on its own, no GPU: the parameter
 * layout against gpt.h; its loss and logits against the same model composed from
 * tests/ref/ref.h's separate functions (layernorm, rmsnorm, matmul, RoPE, grouped causal
 * attention, cross-entropy); its hand-written gradients against central differences of its
 * own loss, for both architectures at awkward sizes; causality; greedy decoding past the
 * block; and two AdamW steps (clipping, warm-up, cosine decay) against a hand computation.
 */
#include <math.h>
#include <string.h>

#include "ref/ref.h"
#include "gpt_ref.h"
#include "harness.h"

/* ---------------------------------------------------------------- set-up */

/* The parameters of a resolved config, random: 2-D U(-s, s), biases U(-0.2, 0.2), norm
   weights 1 + U(-0.3, 0.3) (not at their initial values, so every path carries a gradient). */
typedef struct params {
    int n;
    float *p[4 * WGML_GPT_MAX_LAYERS];
    int64_t numel[4 * WGML_GPT_MAX_LAYERS];
} params;

static void params_random(const wgml_gpt_config *c, double s, params *out)
{
    out->n = wgml_gpt_param_count(c);
    for (int i = 0; i < out->n; i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t sh[2];
        wgml_gpt_param_info(c, i, name, &nd, sh);
        out->numel[i] = sh[0] * (nd == 2 ? sh[1] : 1);
        out->p[i] = malloc((size_t)out->numel[i] * sizeof(float));
        const int is_w = nd == 1 && name[strlen(name) - 1] == 'w'; /* a norm's weight */
        if (nd == 2) test_fill_uniform(out->p[i], (size_t)out->numel[i], -s, s);
        else if (is_w) test_fill_uniform(out->p[i], (size_t)out->numel[i], 0.7, 1.3);
        else test_fill_uniform(out->p[i], (size_t)out->numel[i], -0.2, 0.2);
    }
}

static void params_free(params *p)
{
    for (int i = 0; i < p->n; i++) free(p->p[i]);
}

static gpt_ref *make(const wgml_gpt_config *in, params *p, wgml_gpt_config *resolved)
{
    char err[200];
    wgml_status st = wgml_gpt_config_resolve(in, resolved, err, sizeof err);
    if (st != WGML_OK) {
        FAILF("resolve: %s", err);
        return NULL;
    }
    params_random(resolved, 0.4, p);
    gpt_ref *r = gpt_ref_create(resolved, (const float *const *)p->p);
    CHECK(r != NULL);
    return r;
}

static void random_tokens(int32_t *x, int n, int64_t V)
{
    for (int i = 0; i < n; i++) x[i] = (int32_t)(test_rand_u64() % (uint64_t)V);
}

/* awkward sizes: vocab 13, width 12 in 3 heads of 4, ffn 19 or 17 */
static const wgml_gpt_config gpt2_cfg = {
    .arch = WGML_GPT_GPT2, .vocab = 13, .block = 7, .layers = 2, .heads = 3, .width = 12, .ffn = 19};
static const wgml_gpt_config llama_cfg = {
    .arch = WGML_GPT_LLAMA, .vocab = 13, .block = 7, .layers = 2, .heads = 3, .kv_heads = 1, .width = 12,
    .ffn = 17, .rope_base = 100.0f};
/* two groups of two query heads, a non-default eps */
static const wgml_gpt_config llama2_cfg = {
    .arch = WGML_GPT_LLAMA, .vocab = 11, .block = 6, .layers = 1, .heads = 4, .kv_heads = 2, .width = 16,
    .ffn = 23, .norm_eps = 1e-3f};

/* ---------------------------------------------------------------- layout */

static void expect_param(const wgml_gpt_config *c, int i, const char *want_name, int want_nd, int64_t r, int64_t k)
{
    char name[WGML_GPT_NAME];
    int nd;
    int64_t sh[2];
    wgml_gpt_param_info(c, i, name, &nd, sh);
    if (strcmp(name, want_name) || nd != want_nd || sh[0] != r || (nd == 2 && sh[1] != k))
        FAILF("param %d is %s (%d dims, %lld x %lld), want %s (%d dims, %lld x %lld)", i, name, nd,
              (long long)sh[0], (long long)sh[1], want_name, want_nd, (long long)r, (long long)k);
}

static void layout_follows_gpt_h(void)
{
    wgml_gpt_config c;
    char err[200];
    CHECK(wgml_gpt_config_resolve(&gpt2_cfg, &c, err, sizeof err) == WGML_OK);
    CHECK(c.kv_heads == 3 && c.ffn == 19 && c.rope_base == 10000.0f && c.norm_eps == 1e-5f);
    CHECK(wgml_gpt_param_count(&c) == 2 + 12 * 2 + 2);
    expect_param(&c, 0, "wte", 2, 13, 12);
    expect_param(&c, 1, "wpe", 2, 7, 12);
    expect_param(&c, 2, "h.0.ln1.w", 1, 12, 0);
    expect_param(&c, 4, "h.0.attn.wqkv", 2, 12, 36);
    expect_param(&c, 5, "h.0.attn.bqkv", 1, 36, 0);
    expect_param(&c, 12, "h.0.mlp.w2", 2, 19, 12);
    expect_param(&c, 14, "h.1.ln1.w", 1, 12, 0);
    expect_param(&c, 25, "h.1.mlp.b2", 1, 12, 0);
    expect_param(&c, 26, "lnf.w", 1, 12, 0);
    expect_param(&c, 27, "lnf.b", 1, 12, 0);

    CHECK(wgml_gpt_config_resolve(&llama_cfg, &c, err, sizeof err) == WGML_OK);
    CHECK(wgml_gpt_param_count(&c) == 1 + 6 * 2 + 1);
    expect_param(&c, 0, "wte", 2, 13, 12);
    expect_param(&c, 1, "h.0.norm1.w", 1, 12, 0);
    expect_param(&c, 2, "h.0.attn.wqkv", 2, 12, (3 + 2 * 1) * 4);
    expect_param(&c, 3, "h.0.attn.wo", 2, 12, 12);
    expect_param(&c, 5, "h.0.mlp.wgu", 2, 12, 34);
    expect_param(&c, 6, "h.0.mlp.wd", 2, 17, 12);
    expect_param(&c, 12, "h.1.mlp.wd", 2, 17, 12);
    expect_param(&c, 13, "normf.w", 1, 12, 0);

    /* defaults: 4C for GPT-2; 8C/3 rounded up to a multiple of 32 for Llama (32 -> 86 -> 96) */
    wgml_gpt_config d = {.arch = WGML_GPT_LLAMA, .vocab = 5, .block = 4, .layers = 1, .heads = 4, .width = 32};
    CHECK(wgml_gpt_config_resolve(&d, &c, err, sizeof err) == WGML_OK);
    CHECK(c.ffn == 96 && c.kv_heads == 4);
    d.arch = WGML_GPT_GPT2;
    CHECK(wgml_gpt_config_resolve(&d, &c, err, sizeof err) == WGML_OK);
    CHECK(c.ffn == 128);
    d.heads = 5;
    CHECK(wgml_gpt_config_resolve(&d, &c, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(err, "heads = 5 does not divide width = 32") != NULL);
    d = (wgml_gpt_config){.arch = WGML_GPT_LLAMA, .vocab = 5, .block = 4, .layers = 1, .heads = 4, .kv_heads = 3, .width = 32};
    CHECK(wgml_gpt_config_resolve(&d, &c, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(err, "kv_heads = 3") != NULL);
    CHECK(gpt_ref_create(&d, NULL) == NULL);
}

/* ---------------------------------------------------------------- the forward, composed */

/* x [R, n] -> columns lo..lo+w of each row, [R, w] */
static double *columns(const double *x, int64_t R, int64_t n, int64_t lo, int64_t w)
{
    double *out = malloc((size_t)(R * w) * sizeof *out);
    int64_t shape[2] = {R, n};
    wgml_ref_slice(2, shape, x, 1, lo, lo + w, 1, out);
    return out;
}

/* x [B,T,Hh,D] -> [B,Hh,T,D] (and back: the same swap) */
static double *swap12(const double *x, int64_t B, int64_t A1, int64_t A2, int64_t D)
{
    double *out = malloc((size_t)(B * A1 * A2 * D) * sizeof *out);
    int64_t shape[4] = {B, A1, A2, D};
    const int axes[4] = {0, 2, 1, 3};
    wgml_ref_permute(4, shape, x, axes, out);
    return out;
}

/* y [N,out] = x [N,in] W [in,out] + b */
static double *mm(const double *x, const double *W, const double *b, int64_t N, int64_t in, int64_t out)
{
    double *y = malloc((size_t)(N * out) * sizeof *y);
    wgml_ref_matmul(1, N, out, in, x, 1, 0, W, 1, 0, 1.0, b, 0, y);
    return y;
}

/* The model of gpt.h composed from tests/ref/ref.h (written apart from gpt_ref.c): the mean loss,
   and the logits [B*T, V] when logits is not NULL. */
static double composed_loss(const wgml_gpt_config *c, const params *pf, const int32_t *ids, const int32_t *tg,
                            int64_t B, int64_t T, double *logits_out)
{
    const int llama = c->arch == WGML_GPT_LLAMA;
    const int64_t N = B * T, C = c->width, H = c->heads, Hkv = c->kv_heads, D = C / H, F = c->ffn, V = c->vocab;
    double *P[4 * WGML_GPT_MAX_LAYERS];
    for (int i = 0; i < pf->n; i++) P[i] = test_to_double(pf->p[i], (size_t)pf->numel[i]);
    double *x = malloc((size_t)(N * C) * sizeof *x), *h = malloc((size_t)(N * C) * sizeof *h);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < C; k++) x[n * C + k] = P[0][ids[n] * C + k] + (llama ? 0 : P[1][(n % T) * C + k]);
    int at = llama ? 1 : 2;
    for (int l = 0; l < c->layers; l++) {
        double **w = P + at;
        at += llama ? 6 : 12;
        double *n1w = w[0], *n1b = llama ? NULL : w[1], *wqkv = w[llama ? 1 : 2], *bqkv = llama ? NULL : w[3];
        double *wo = w[llama ? 2 : 4], *bo = llama ? NULL : w[5], *n2w = w[llama ? 3 : 6], *n2b = llama ? NULL : w[7];
        if (llama) wgml_ref_rmsnorm(N, C, x, n1w, c->norm_eps, h);
        else wgml_ref_layernorm(N, C, x, n1w, n1b, c->norm_eps, h);
        const int64_t QKV = (H + 2 * Hkv) * D;
        double *qkv = mm(h, wqkv, bqkv, N, C, QKV);
        double *qc = columns(qkv, N, QKV, 0, H * D), *kc = columns(qkv, N, QKV, H * D, Hkv * D);
        double *vc = columns(qkv, N, QKV, (H + Hkv) * D, Hkv * D);
        double *q = swap12(qc, B, T, H, D), *k = swap12(kc, B, T, Hkv, D), *v = swap12(vc, B, T, Hkv, D);
        if (llama) {
            wgml_ref_rope(B * H, T, D, q, 0, c->rope_base, 0, 0, qc);
            wgml_ref_rope(B * Hkv, T, D, k, 0, c->rope_base, 0, 0, kc);
            memcpy(q, qc, (size_t)(N * H * D) * sizeof *q);
            memcpy(k, kc, (size_t)(N * Hkv * D) * sizeof *k);
        }
        double *o = malloc((size_t)(N * C) * sizeof *o);
        wgml_ref_attention(B, H, Hkv, T, T, D, q, k, v, 1, 1.0 / sqrt((double)D), o);
        double *om = swap12(o, B, H, T, D);
        double *y = mm(om, wo, bo, N, C, C);
        for (int64_t i = 0; i < N * C; i++) x[i] += y[i];
        free(qkv), free(qc), free(kc), free(vc), free(q), free(k), free(v), free(o), free(om), free(y);

        if (llama) wgml_ref_rmsnorm(N, C, x, n2w, c->norm_eps, h);
        else wgml_ref_layernorm(N, C, x, n2w, n2b, c->norm_eps, h);
        double *act;
        if (llama) {
            double *gu = mm(h, w[4], NULL, N, C, 2 * F), *g = columns(gu, N, 2 * F, 0, F), *u = columns(gu, N, 2 * F, F, F);
            act = malloc((size_t)(N * F) * sizeof *act);
            for (int64_t i = 0; i < N * F; i++) act[i] = wgml_ref_silu(g[i]) * u[i];
            free(gu), free(g), free(u);
        } else {
            act = mm(h, w[8], w[9], N, C, F);
            for (int64_t i = 0; i < N * F; i++) act[i] = 0.5 * act[i] * (1 + erf(act[i] / sqrt(2.0)));
        }
        y = mm(act, w[llama ? 5 : 10], llama ? NULL : w[11], N, F, C);
        for (int64_t i = 0; i < N * C; i++) x[i] += y[i];
        free(act), free(y);
    }
    if (llama) wgml_ref_rmsnorm(N, C, x, P[at], c->norm_eps, h);
    else wgml_ref_layernorm(N, C, x, P[at], P[at + 1], c->norm_eps, h);
    double *logits = malloc((size_t)(N * V) * sizeof *logits);
    wgml_ref_matmul(1, N, V, C, h, 1, 0, P[0], 1, 1, 1.0, NULL, 0, logits); /* h wte^T */
    const double loss = wgml_ref_cross_entropy(N, V, logits, tg);
    if (logits_out) memcpy(logits_out, logits, (size_t)(N * V) * sizeof *logits);
    free(logits), free(x), free(h);
    for (int i = 0; i < pf->n; i++) free(P[i]);
    return loss;
}

static void forward_case(const wgml_gpt_config *in, int B, int T)
{
    wgml_gpt_config c;
    params p;
    gpt_ref *r = make(in, &p, &c);
    if (!r) return;
    int32_t ids[64], tg[64];
    random_tokens(ids, B * T, c.vocab);
    random_tokens(tg, B * T, c.vocab);
    const double got = gpt_ref_loss(r, ids, tg, B, T, 0), want = composed_loss(&c, &p, ids, tg, B, T, NULL);
    if (!(fabs(got - want) <= 1e-12 * fabs(want)))
        FAILF("arch %d: loss %.17g, the composition gives %.17g", (int)c.arch, got, want);
    /* the logits of one sequence, every position */
    double *lg = malloc((size_t)(T * c.vocab) * sizeof *lg), *lw = malloc((size_t)(T * c.vocab) * sizeof *lw);
    gpt_ref_logits(r, ids, T, lg);
    composed_loss(&c, &p, ids, tg, 1, T, lw);
    double worst = 0;
    for (int64_t i = 0; i < T * c.vocab; i++) worst = fmax(worst, fabs(lg[i] - lw[i]) / fmax(fabs(lw[i]), 1e-3));
    if (!(worst <= 1e-12)) FAILF("arch %d: logits differ from the composition by %g (relative)", (int)c.arch, worst);
    /* a loss of log V when the embedding (hence the tied head) is zero */
    memset(gpt_ref_param(r, 0), 0, (size_t)gpt_ref_numel(r, 0) * sizeof(double));
    const double flat = gpt_ref_loss(r, ids, tg, B, T, 0);
    if (!(fabs(flat - log((double)c.vocab)) <= 1e-14)) FAILF("zero embedding: loss %.17g, want log V", flat);
    /* bad arguments give NaN */
    CHECK(isnan(gpt_ref_loss(r, ids, tg, B, (int)c.block + 1, 0)));
    ids[1] = (int32_t)c.vocab;
    CHECK(isnan(gpt_ref_loss(r, ids, tg, B, T, 0)));
    free(lg), free(lw);
    gpt_ref_free(r);
    params_free(&p);
}

static void forward_matches_the_composition_of_cpu_ref(void)
{
    forward_case(&gpt2_cfg, 2, 5);
    forward_case(&llama_cfg, 2, 5);
    forward_case(&llama2_cfg, 3, 6);
    forward_case(&gpt2_cfg, 1, 7); /* the whole block */
}

/* ---------------------------------------------------------------- gradients */

/* Every parameter's gradient at a few random elements (wpe: rows the batch reaches) against
   the five-point central difference of the reference's own loss (error O(h^4)). */
static void gradient_case(const wgml_gpt_config *in, int B, int T)
{
    wgml_gpt_config c;
    params p;
    gpt_ref *r = make(in, &p, &c);
    if (!r) return;
    int32_t ids[64], tg[64];
    random_tokens(ids, B * T, c.vocab);
    random_tokens(tg, B * T, c.vocab);
    const double loss = gpt_ref_loss(r, ids, tg, B, T, 1);
    const double again = gpt_ref_loss(r, ids, tg, B, T, 1); /* overwrites: not twice the gradient */
    CHECK(loss == again && isfinite(loss));
    const double h = 1e-4, floor = 1e-4, tol = 1e-6;
    double worst = 0;
    int checked = 0;
    for (int i = 0; i < gpt_ref_param_count(r); i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t sh[2];
        wgml_gpt_param_info(&c, i, name, &nd, sh);
        int64_t reach = gpt_ref_numel(r, i);
        if (!strcmp(name, "wpe")) reach = (int64_t)T * c.width;
        double *w = gpt_ref_param(r, i), *g = gpt_ref_grad(r, i);
        for (int s = 0; s < 4; s++) {
            const int64_t k = (int64_t)(test_rand_u64() % (uint64_t)reach);
            const double w0 = w[k];
            double f[4];
            const double off[4] = {-2 * h, -h, h, 2 * h};
            for (int j = 0; j < 4; j++) {
                w[k] = w0 + off[j];
                f[j] = gpt_ref_loss(r, ids, tg, B, T, 0);
            }
            w[k] = w0;
            const double fd = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
            const double err = fabs(g[k] - fd) / fmax(fabs(fd), floor);
            worst = fmax(worst, err);
            checked++;
            if (!(err <= tol))
                FAILF("arch %d: %s[%lld]: gradient %.12g, central difference %.12g (relative error %.3g)", (int)c.arch,
                      name, (long long)k, g[k], fd, err);
        }
    }
    /* wpe's rows past T carry no gradient */
    if (c.arch == WGML_GPT_GPT2 && T < c.block) CHECK(gpt_ref_grad(r, 1)[(int64_t)T * c.width] == 0.0);
    fprintf(stderr, "  arch %d: %d elements, worst relative error %.3g\n", (int)c.arch, checked, worst);
    gpt_ref_free(r);
    params_free(&p);
}

static void gradients_match_central_differences(void)
{
    gradient_case(&gpt2_cfg, 2, 5);
    gradient_case(&llama_cfg, 2, 5);
    gradient_case(&llama2_cfg, 3, 6);
}

/* ---------------------------------------------------------------- causality and greedy */

/* Changing token t changes the logits at t and leaves those before t as they were. */
static void causal_case(const wgml_gpt_config *in)
{
    wgml_gpt_config c;
    params p;
    gpt_ref *r = make(in, &p, &c);
    if (!r) return;
    const int T = (int)c.block, V = (int)c.vocab, t = 3;
    int32_t ids[16];
    random_tokens(ids, T, V);
    double *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
    gpt_ref_logits(r, ids, T, a);
    ids[t] = (ids[t] + 1) % V;
    gpt_ref_logits(r, ids, T, b);
    CHECK(memcmp(a, b, (size_t)(t * V) * sizeof *a) == 0);
    double moved = 0;
    for (int i = t * V; i < T * V; i++) moved = fmax(moved, fabs(a[i] - b[i]));
    CHECK(moved > 1e-6);
    free(a), free(b);
    gpt_ref_free(r);
    params_free(&p);
}

static void attention_is_causal(void)
{
    causal_case(&gpt2_cfg);
    causal_case(&llama_cfg);
}

/* Greedy decoding past the block: each new token the argmax of the last position given the
   last `block` tokens, as gpt_ref_logits computes them. */
static void greedy_case(const wgml_gpt_config *in)
{
    wgml_gpt_config c;
    params p;
    gpt_ref *r = make(in, &p, &c);
    if (!r) return;
    enum { PROMPT = 3, NEW = 9 };
    int32_t prompt[PROMPT], out[PROMPT + NEW];
    random_tokens(prompt, PROMPT, c.vocab);
    gpt_ref_greedy(r, prompt, PROMPT, NEW, out);
    CHECK(memcmp(out, prompt, sizeof prompt) == 0);
    double *lg = malloc((size_t)(c.block * c.vocab) * sizeof *lg);
    for (int len = PROMPT; len < PROMPT + NEW; len++) {
        const int ctx = len < c.block ? len : (int)c.block;
        gpt_ref_logits(r, out + len - ctx, ctx, lg);
        const double *last = lg + (int64_t)(ctx - 1) * c.vocab;
        for (int64_t v = 0; v < c.vocab; v++)
            if (last[v] > last[out[len]] || (last[v] == last[out[len]] && v < out[len])) {
                FAILF("arch %d: token %d is %d, but %lld scores higher or ties earlier", (int)c.arch, len, out[len],
                      (long long)v);
                break;
            }
    }
    free(lg);
    gpt_ref_free(r);
    params_free(&p);
}

static void greedy_takes_the_argmax_over_the_last_block(void)
{
    greedy_case(&gpt2_cfg);
    greedy_case(&llama_cfg);
}

/* ---------------------------------------------------------------- AdamW */

/* Two steps at two elements each of a 2-D parameter (decayed) and a 1-D one (not), by hand:
   the first at step 0 (warm-up: lr/4; bias-corrected, m/bc1 = g and sqrt(v/bc2) = |g|), the
   second at step 5 (cosine decay) with the same gradients; clipping active in both. */
static void adamw_matches_a_hand_computation(void)
{
    wgml_gpt_config c;
    params p;
    gpt_ref *r = make(&gpt2_cfg, &p, &c);
    if (!r) return;
    int32_t ids[10], tg[10];
    random_tokens(ids, 10, c.vocab);
    random_tokens(tg, 10, c.vocab);
    gpt_ref_loss(r, ids, tg, 2, 5, 1);
    double norm2 = 0;
    for (int i = 0; i < gpt_ref_param_count(r); i++)
        for (int64_t k = 0; k < gpt_ref_numel(r, i); k++) norm2 += gpt_ref_grad(r, i)[k] * gpt_ref_grad(r, i)[k];
    const double norm = sqrt(norm2);
    const wgml_gpt_train_desc d = {
        .lr = 0.01f, .weight_decay = 0.1f, .max_grad_norm = (float)(0.5 * norm),
        .schedule = {.warmup_steps = 3, .total_steps = 10, .min_lr_ratio = 0.1f, .decay = WGML_LR_DECAY_COSINE}};
    const double scale = (double)d.max_grad_norm / (norm + 1e-6);
    CHECK(scale < 0.6); /* clipping is on */
    /* parameters 4 (h.0.attn.wqkv, 2-D) and 3 (h.0.ln1.b, 1-D), two elements each */
    const int which[4] = {4, 4, 3, 3};
    const int64_t at[4] = {0, 12 * 36 - 1, 0, 11};
    double p0[4], g[4];
    for (int e = 0; e < 4; e++) {
        p0[e] = gpt_ref_param(r, which[e])[at[e]];
        g[e] = gpt_ref_grad(r, which[e])[at[e]] * scale;
    }
    const double b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd2 = 0.1f, lr0 = 0.01f;
    const double n1 = gpt_ref_adamw_step(r, &d, 0);
    CHECK(fabs(n1 - norm) <= 1e-12 * norm);
    const double lr_a = (double)(float)(lr0 * 1 / 4); /* warm-up: base (step + 1) / (warmup + 1) */
    double p1[4];
    for (int e = 0; e < 4; e++) {
        const double wd = which[e] == 4 ? wd2 : 0.0;
        p1[e] = p0[e] - lr_a * (g[e] / (fabs(g[e]) + eps) + wd * p0[e]);
        const double got = gpt_ref_param(r, which[e])[at[e]];
        if (!(fabs(got - p1[e]) <= 1e-13 * fabs(p1[e]) + 1e-16))
            FAILF("step 1, param %d[%lld]: %.17g, by hand %.17g", which[e], (long long)at[e], got, p1[e]);
    }
    /* the second step: the same gradients, but the norm is unchanged so the same scale */
    const double n2 = gpt_ref_adamw_step(r, &d, 5);
    CHECK(fabs(n2 - norm) <= 1e-12 * norm);
    const double pi = 3.14159265358979323846, base = lr0, mn = base * (double)0.1f;
    const double lr_b = (double)(float)(mn + (base - mn) * 0.5 * (1 + cos(pi * 2.0 / 7.0)));
    for (int e = 0; e < 4; e++) {
        const double wd = which[e] == 4 ? wd2 : 0.0;
        const double m1 = (1 - b1) * g[e], v1 = (1 - b2) * g[e] * g[e];
        const double m2 = b1 * m1 + (1 - b1) * g[e], v2 = b2 * v1 + (1 - b2) * g[e] * g[e];
        const double mhat = m2 / (1 - b1 * b1 * b1 * b1 * b1 * b1), vhat = v2 / (1 - pow(b2, 6));
        const double want = p1[e] - lr_b * (mhat / (sqrt(vhat) + eps) + wd * p1[e]);
        const double got = gpt_ref_param(r, which[e])[at[e]];
        if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-16))
            FAILF("step 2, param %d[%lld]: %.17g, by hand %.17g", which[e], (long long)at[e], got, want);
        if (!(fabs(gpt_ref_moment(r, which[e], 0)[at[e]] - m2) <= 1e-14 * fabs(m2)))
            FAILF("step 2, param %d[%lld]: m %.17g, by hand %.17g", which[e], (long long)at[e],
                  gpt_ref_moment(r, which[e], 0)[at[e]], m2);
    }
    gpt_ref_free(r);
    params_free(&p);
}

int main(void)
{
    TEST_RUN(layout_follows_gpt_h);
    TEST_RUN(forward_matches_the_composition_of_cpu_ref);
    TEST_RUN(gradients_match_central_differences);
    TEST_RUN(attention_is_causal);
    TEST_RUN(greedy_takes_the_argmax_over_the_last_block);
    TEST_RUN(adamw_matches_a_hand_computation);
    return test_summary();
}
