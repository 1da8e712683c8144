/* GPT-2 and Llama/Qwen decoders through wgml.h alone (see gpt.h for the architecture and
   the parameter layout). */
#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- configuration and layout */

wgml_status wgml_gpt_config_resolve(const wgml_gpt_config *in, wgml_gpt_config *out, char *err, size_t errlen)
{
    if (!in || !out) {
        snprintf(err, errlen, "gpt config: NULL");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    wgml_gpt_config c = *in;
    if (!c.kv_heads) c.kv_heads = c.heads;
    if (!c.ffn)
        c.ffn = c.arch == WGML_GPT_LLAMA ? (8 * c.width / 3 + 31) / 32 * 32 : 4 * c.width;
    if (c.rope_base == 0.0f) c.rope_base = 10000.0f;
    if (c.norm_eps == 0.0f) c.norm_eps = 1e-5f;
#define BAD(...) return snprintf(err, errlen, __VA_ARGS__), WGML_ERROR_INVALID_ARGUMENT
    if (c.arch != WGML_GPT_GPT2 && c.arch != WGML_GPT_LLAMA) BAD("gpt config: arch = %d is not gpt2 (0) or llama (1)", (int)c.arch);
    if (c.vocab < 1 || c.vocab > (1 << 20)) BAD("gpt config: vocab = %lld, want 1 to %d", (long long)c.vocab, 1 << 20);
    if (c.block < 1 || c.block > (1 << 16)) BAD("gpt config: block = %lld, want 1 to %d", (long long)c.block, 1 << 16);
    if (c.layers < 1 || c.layers > WGML_GPT_MAX_LAYERS)
        BAD("gpt config: layers = %lld, want 1 to %d", (long long)c.layers, WGML_GPT_MAX_LAYERS);
    if (c.width < 1 || c.width > (1 << 16)) BAD("gpt config: width = %lld, want 1 to %d", (long long)c.width, 1 << 16);
    if (c.heads < 1 || c.width % c.heads) BAD("gpt config: heads = %lld does not divide width = %lld", (long long)c.heads, (long long)c.width);
    if (c.width / c.heads > 128) BAD("gpt config: head size width / heads = %lld; attention takes at most 128", (long long)(c.width / c.heads));
    if (c.arch == WGML_GPT_LLAMA && (c.width / c.heads) % 2)
        BAD("gpt config: head size width / heads = %lld must be even for RoPE", (long long)(c.width / c.heads));
    if (c.kv_heads < 1 || c.heads % c.kv_heads)
        BAD("gpt config: kv_heads = %lld does not divide heads = %lld", (long long)c.kv_heads, (long long)c.heads);
    if (c.arch == WGML_GPT_GPT2 && c.kv_heads != c.heads)
        BAD("gpt config: kv_heads = %lld; GPT-2 has as many K/V heads as heads (%lld)", (long long)c.kv_heads, (long long)c.heads);
    if (c.ffn < 1 || c.ffn > (1 << 18)) BAD("gpt config: ffn = %lld, want 1 to %d", (long long)c.ffn, 1 << 18);
    if (!(c.dropout >= 0.0f && c.dropout < 1.0f)) BAD("gpt config: dropout = %g, want [0, 1)", (double)c.dropout);
    if (!(c.rope_base > 1.0f && isfinite(c.rope_base))) BAD("gpt config: rope_base = %g, want > 1", (double)c.rope_base);
    if (!(c.norm_eps > 0.0f && c.norm_eps < 1.0f)) BAD("gpt config: norm_eps = %g, want (0, 1)", (double)c.norm_eps);
#undef BAD
    *out = c;
    return WGML_OK;
}

/* Per-layer parameters: name, and shape as multiples of the sizes below. */
typedef struct layer_param {
    const char *name;
    int ndim;
    char rows, cols; /* 'C' width, 'F' ffn, 'Q' qkv columns, 'G' 2F, '3' 3C */
} layer_param;

static const layer_param gpt2_layer[] = {
    {"ln1.w", 1, 'C', 0},       {"ln1.b", 1, 'C', 0},   {"attn.wqkv", 2, 'C', '3'}, {"attn.bqkv", 1, '3', 0},
    {"attn.wo", 2, 'C', 'C'},   {"attn.bo", 1, 'C', 0}, {"ln2.w", 1, 'C', 0},       {"ln2.b", 1, 'C', 0},
    {"mlp.w1", 2, 'C', 'F'},    {"mlp.b1", 1, 'F', 0},  {"mlp.w2", 2, 'F', 'C'},    {"mlp.b2", 1, 'C', 0},
};
static const layer_param llama_layer[] = {
    {"norm1.w", 1, 'C', 0}, {"attn.wqkv", 2, 'C', 'Q'}, {"attn.wo", 2, 'C', 'C'},
    {"norm2.w", 1, 'C', 0}, {"mlp.wgu", 2, 'C', 'G'},   {"mlp.wd", 2, 'F', 'C'},
};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int per_layer(const wgml_gpt_config *c) { return c->arch == WGML_GPT_LLAMA ? N_OF(llama_layer) : N_OF(gpt2_layer); }
static int n_head_params(const wgml_gpt_config *c) { return c->arch == WGML_GPT_LLAMA ? 1 : 2; }  /* wte (wpe) */
static int n_tail_params(const wgml_gpt_config *c) { return c->arch == WGML_GPT_LLAMA ? 1 : 2; }  /* final norm */

int wgml_gpt_param_count(const wgml_gpt_config *c)
{
    return n_head_params(c) + (int)c->layers * per_layer(c) + n_tail_params(c);
}

static int64_t size_of(const wgml_gpt_config *c, char k)
{
    int64_t d = c->width / c->heads;
    switch (k) {
    case 'C': return c->width;
    case 'F': return c->ffn;
    case 'G': return 2 * c->ffn;
    case '3': return 3 * c->width;
    case 'Q': return (c->heads + 2 * c->kv_heads) * d;
    default: return 0;
    }
}

void wgml_gpt_param_info(const wgml_gpt_config *c, int i, char name[WGML_GPT_NAME], int *ndim, int64_t shape[2])
{
    int head = n_head_params(c), body = (int)c->layers * per_layer(c);
    shape[1] = 0;
    if (i < head) {
        snprintf(name, WGML_GPT_NAME, "%s", i == 0 ? "wte" : "wpe");
        *ndim = 2;
        shape[0] = i == 0 ? c->vocab : c->block;
        shape[1] = c->width;
    } else if (i < head + body) {
        int l = (i - head) / per_layer(c), k = (i - head) % per_layer(c);
        const layer_param *p = c->arch == WGML_GPT_LLAMA ? &llama_layer[k] : &gpt2_layer[k];
        snprintf(name, WGML_GPT_NAME, "h.%d.%s", l, p->name);
        *ndim = p->ndim;
        shape[0] = size_of(c, p->rows);
        if (p->ndim == 2) shape[1] = size_of(c, p->cols);
    } else {
        int k = i - head - body;
        snprintf(name, WGML_GPT_NAME, "%s", c->arch == WGML_GPT_LLAMA ? "normf.w" : k == 0 ? "lnf.w" : "lnf.b");
        *ndim = 1;
        shape[0] = c->width;
    }
}

int64_t wgml_gpt_numel(const wgml_gpt_config *c)
{
    int64_t n = 0;
    for (int i = 0; i < wgml_gpt_param_count(c); i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t s[2];
        wgml_gpt_param_info(c, i, name, &nd, s);
        n += s[0] * (nd == 2 ? s[1] : 1);
    }
    return n;
}

/* ---------------------------------------------------------------- creation */

void wgml_gpt_free(wgml_gpt *g)
{
    if (!g) return;
    for (int i = 0; g->params && i < g->n_params; i++) wgml_tensor_free(g->params[i]);
    free(g->params);
    free(g->slot_param);
    memset(g, 0, sizeof *g);
}

static void order_slots(const wgml_gpt_config *c, int n, int *slot_param); /* (training, below) */

static wgml_status start(wgml_context *ctx, const wgml_gpt_config *cfg, wgml_gpt *out)
{
    memset(out, 0, sizeof *out);
    char err[256];
    wgml_gpt_config c;
    if (wgml_gpt_config_resolve(cfg, &c, err, sizeof err)) return WGML_ERROR_INVALID_ARGUMENT;
    out->ctx = ctx;
    out->cfg = c;
    out->n_params = wgml_gpt_param_count(&c);
    out->params = calloc((size_t)out->n_params, sizeof *out->params);
    out->slot_param = malloc((size_t)out->n_params * sizeof *out->slot_param);
    if (!out->params || !out->slot_param) return WGML_ERROR_OUT_OF_MEMORY;
    order_slots(&c, out->n_params, out->slot_param);
    return WGML_OK;
}

/* Is parameter i a norm weight (initialised to 1)? */
static int is_norm_weight(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && strcmp(dot, ".w") == 0 && (strstr(name, "ln") || strstr(name, "norm"));
}

static int is_residual_projection(const char *name)
{
    return strstr(name, "attn.wo") || strstr(name, "mlp.w2") || strstr(name, "mlp.wd");
}

wgml_status wgml_gpt_create(wgml_context *ctx, const wgml_gpt_config *cfg, const float *const *params, wgml_gpt *out)
{
    if (!ctx || !cfg || !params || !out) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status st = start(ctx, cfg, out);
    for (int i = 0; !st && i < out->n_params; i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t s[2];
        wgml_gpt_param_info(&out->cfg, i, name, &nd, s);
        st = wgml_tensor_from_data(ctx, nd, s, params[i], (size_t)(s[0] * (nd == 2 ? s[1] : 1)), &out->params[i]);
    }
    if (st) wgml_gpt_free(out);
    return st;
}

wgml_status wgml_gpt_init(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt *out)
{
    if (!ctx || !cfg || !out) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_status st = start(ctx, cfg, out);
    if (!st) st = wgml_manual_seed(ctx, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)out->cfg.layers);
    for (int i = 0; !st && i < out->n_params; i++) {
        char name[WGML_GPT_NAME];
        int nd;
        int64_t s[2];
        wgml_gpt_param_info(&out->cfg, i, name, &nd, s);
        wgml_tensor *t;
        if (nd == 2) {
            t = wgml_randn(ctx, 2, s, 0.0f, is_residual_projection(name) ? resid_std : 0.02f);
        } else {
            wgml_tensor *z = NULL;
            st = wgml_tensor_zeros(ctx, 1, s, &z);
            if (st) break;
            t = is_norm_weight(name) ? wgml_binary_scalar(ctx, WGML_ADD, z, 1.0f) : z;
            if (t != z) wgml_tensor_free(z);
        }
        if (!st) st = wgml_eval(ctx, 1, &t);
        out->params[i] = t;
    }
    if (st) wgml_gpt_free(out);
    return st;
}

/* ---------------------------------------------------------------- forward */

#define P(l, k) g->params[n_head_params(&g->cfg) + (int)(l) * per_layer(&g->cfg) + (k)]

static wgml_tensor *maybe_dropout(wgml_context *ctx, wgml_tensor *x, float p)
{
    return p > 0.0f ? wgml_dropout(ctx, x, p) : x;
}

/* [B,T,n*D] -> [B,n,T,D] (a view) */
static wgml_tensor *to_heads(wgml_context *ctx, wgml_tensor *x, int64_t B, int64_t T, int64_t n, int64_t d)
{
    const int64_t s[4] = {B, T, n, d};
    static const int bhtd[4] = {0, 2, 1, 3};
    return wgml_permute(ctx, wgml_reshape(ctx, x, 4, s), bhtd);
}

static wgml_tensor *norm(wgml_gpt *g, wgml_tensor *x, wgml_tensor *w, wgml_tensor *b)
{
    return g->cfg.arch == WGML_GPT_LLAMA ? wgml_rmsnorm(g->ctx, x, w, g->cfg.norm_eps)
                                         : wgml_layernorm(g->ctx, x, w, b, g->cfg.norm_eps);
}

/* x @ w[:, from : from + n] (+ b[from : from + n]): a window of a fused weight's columns,
   read through strides */
static wgml_tensor *linear_cols(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w, wgml_tensor *b, int64_t from, int64_t n)
{
    wgml_matmul_desc d = {.bias = b ? wgml_slice(ctx, b, 0, from, from + n, 1) : NULL};
    return wgml_matmul_ex(ctx, x, wgml_slice(ctx, w, 1, from, from + n, 1), &d);
}

/* One block on x [B,T,C] whose first position is `pos`. With a cache, the layer's keys and
   values so far are prepended, and the joined ones replace them (kept). */
static wgml_tensor *block(wgml_gpt *g, int64_t l, wgml_tensor *x, int64_t B, int64_t T, int64_t pos,
                          wgml_gpt_cache *cache, float dropout)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    int llama = c->arch == WGML_GPT_LLAMA;
    int64_t H = c->heads, Hkv = c->kv_heads, D = c->width / c->heads, C = c->width;
    const int64_t btc[3] = {B, T, C};
    static const int bthd[4] = {0, 2, 1, 3};

    wgml_tensor *h = llama ? norm(g, x, P(l, 0), NULL) : norm(g, x, P(l, 0), P(l, 1));
    wgml_tensor *wqkv = llama ? P(l, 1) : P(l, 2), *bqkv = llama ? NULL : P(l, 3);
    wgml_tensor *part[3] = {NULL, NULL, NULL}, *qkv = NULL;
    const int64_t sizes[3] = {H * D, Hkv * D, Hkv * D};
    if (cache) { /* decoding: one matmul (a GEMV), its columns split */
        qkv = wgml_matmul_ex(ctx, h, wqkv, &(wgml_matmul_desc){.bias = bqkv});
        if (wgml_split(ctx, qkv, -1, 3, sizes, part)) return wgml_reshape(ctx, NULL, 0, NULL);
    } else { /* training: the weight's columns split instead, so the gradients of the three parts
                are the weight's and bias's windows, not three zero-padded copies of qkv's */
        part[0] = linear_cols(ctx, h, wqkv, bqkv, 0, sizes[0]);
        part[1] = linear_cols(ctx, h, wqkv, bqkv, sizes[0], sizes[1]);
        part[2] = linear_cols(ctx, h, wqkv, bqkv, sizes[0] + sizes[1], sizes[2]);
    }
    wgml_tensor *q = to_heads(ctx, part[0], B, T, H, D);
    wgml_tensor *k = to_heads(ctx, part[1], B, T, Hkv, D);
    wgml_tensor *v = to_heads(ctx, part[2], B, T, Hkv, D);
    if (llama) {
        q = wgml_rope(ctx, q, pos, c->rope_base);
        k = wgml_rope(ctx, k, pos, c->rope_base);
    }
    if (cache) { /* B = 1: this step's keys and values as [2,Hkv,T,D], appended to the cache's */
        wgml_tensor *kv;
        if (llama) { /* the keys rotated: a copy of both */
            kv = wgml_concat(ctx, 2, (wgml_tensor *[2]){k, v}, 0);
        } else { /* GPT-2: keys and values are neighbours in qkv's columns: a view */
            static const int kv_first[4] = {1, 2, 0, 3};
            wgml_tensor *cols = wgml_slice(ctx, qkv, 2, H * D, (H + 2 * Hkv) * D, 1);
            kv = wgml_permute(ctx, wgml_reshape(ctx, cols, 4, (int64_t[4]){T, 2, Hkv, D}), kv_first);
        }
        if (cache->len > 0) kv = wgml_concat(ctx, 2, (wgml_tensor *[2]){cache->kv[l], kv}, 2);
        else kv = wgml_contiguous(ctx, kv);
        cache->next_kv[l] = kv;
        k = wgml_slice(ctx, kv, 0, 0, 1, 1);
        v = wgml_slice(ctx, kv, 0, 1, 2, 1);
    }
    wgml_tensor *a = wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.causal = 1});
    /* heads back to [B,T,C]; with one position the attention's [1,H,1,D] already is */
    a = cache && T == 1 ? wgml_reshape(ctx, a, 3, btc) : wgml_reshape(ctx, wgml_permute(ctx, a, bthd), 3, btc);
    wgml_tensor *proj = llama ? wgml_matmul(ctx, a, P(l, 2))
                              : wgml_matmul_ex(ctx, a, P(l, 4), &(wgml_matmul_desc){.bias = P(l, 5)});
    x = wgml_add(ctx, x, maybe_dropout(ctx, proj, dropout));

    wgml_tensor *f;
    if (llama) {
        h = norm(g, x, P(l, 3), NULL);
        wgml_tensor *gu[2] = {NULL, NULL};
        if (cache) {
            if (wgml_chunk(ctx, wgml_matmul(ctx, h, P(l, 4)), -1, 2, gu)) return wgml_reshape(ctx, NULL, 0, NULL);
        } else {
            gu[0] = linear_cols(ctx, h, P(l, 4), NULL, 0, c->ffn);
            gu[1] = linear_cols(ctx, h, P(l, 4), NULL, c->ffn, c->ffn);
        }
        f = wgml_matmul(ctx, wgml_mul(ctx, wgml_silu(ctx, gu[0]), gu[1]), P(l, 5));
    } else {
        h = norm(g, x, P(l, 6), P(l, 7));
        /* decoding: the GELU in the matmul's epilogue (one launch fewer); training keeps them
           apart, since the fused form's gradient computes the pre-activation again */
        wgml_tensor *u = cache ? wgml_matmul_ex(ctx, h, P(l, 8), &(wgml_matmul_desc){.bias = P(l, 9), .activation = WGML_ACT_GELU_EXACT})
                               : wgml_gelu_exact(ctx, wgml_matmul_ex(ctx, h, P(l, 8), &(wgml_matmul_desc){.bias = P(l, 9)}));
        f = wgml_matmul_ex(ctx, u, P(l, 10), &(wgml_matmul_desc){.bias = P(l, 11)});
    }
    return wgml_add(ctx, x, maybe_dropout(ctx, f, dropout));
}

/* The final hidden states [B,T,C] of ids [B,T] at positions pos.. */
static wgml_tensor *trunk(wgml_gpt *g, wgml_tensor *ids, int64_t pos, wgml_gpt_cache *cache, float dropout)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    if (wgml_tensor_ndim(ids) != 2) return wgml_embedding(ctx, g->params[0], NULL);
    int64_t B = wgml_tensor_dim(ids, 0), T = wgml_tensor_dim(ids, 1);
    wgml_tensor *x = wgml_embedding(ctx, g->params[0], ids);
    if (c->arch == WGML_GPT_GPT2) x = wgml_add(ctx, x, wgml_slice(ctx, g->params[1], 0, pos, pos + T, 1));
    x = maybe_dropout(ctx, x, dropout);
    for (int64_t l = 0; l < c->layers; l++) x = block(g, l, x, B, T, pos, cache, dropout);
    int tail = g->n_params - n_tail_params(c);
    return c->arch == WGML_GPT_LLAMA ? norm(g, x, g->params[tail], NULL) : norm(g, x, g->params[tail], g->params[tail + 1]);
}

static wgml_tensor *head(wgml_gpt *g, wgml_tensor *x, int64_t rows)
{
    const int64_t s[2] = {rows, g->cfg.width};
    return wgml_matmul_ex(g->ctx, wgml_reshape(g->ctx, x, 2, s), g->params[0], &(wgml_matmul_desc){.trans_b = 1});
}

wgml_tensor *wgml_gpt_logits(wgml_gpt *g, wgml_tensor *ids, float dropout)
{
    if (!g || !g->ctx) return NULL;
    wgml_tensor *x = trunk(g, ids, 0, NULL, dropout);
    return head(g, x, wgml_tensor_numel(ids));
}

wgml_tensor *wgml_gpt_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float dropout)
{
    if (!g || !g->ctx) return NULL;
    int64_t n = wgml_tensor_numel(targets);
    return wgml_cross_entropy(g->ctx, wgml_gpt_logits(g, ids, dropout), wgml_reshape(g->ctx, targets, 1, &n));
}

/* ---------------------------------------------------------------- generation */

wgml_status wgml_gpt_cache_init(const wgml_gpt *g, wgml_gpt_cache *c)
{
    if (!g || !c) return WGML_ERROR_INVALID_ARGUMENT;
    memset(c, 0, sizeof *c);
    size_t n = (size_t)g->cfg.layers;
    c->kv = calloc(n, sizeof *c->kv), c->next_kv = calloc(n, sizeof *c->next_kv);
    if (c->kv && c->next_kv) return WGML_OK;
    wgml_gpt_cache_free(c, 0);
    return WGML_ERROR_OUT_OF_MEMORY;
}

void wgml_gpt_cache_reset(wgml_gpt_cache *c, int64_t layers)
{
    if (!c || !c->kv) return;
    for (int64_t l = 0; l < layers; l++) {
        wgml_tensor_free(c->kv[l]);
        c->kv[l] = NULL;
    }
    c->len = 0;
}

void wgml_gpt_cache_free(wgml_gpt_cache *c, int64_t layers)
{
    if (!c) return;
    wgml_gpt_cache_reset(c, layers);
    free(c->kv), free(c->next_kv);
    memset(c, 0, sizeof *c);
}

wgml_tensor *wgml_gpt_decode_logits(wgml_gpt *g, wgml_gpt_cache *c, wgml_tensor *ids)
{
    if (!g || !g->ctx || !c || !c->kv) return NULL;
    int64_t T = wgml_tensor_dim(ids, -1);
    if (wgml_tensor_ndim(ids) != 2 || wgml_tensor_dim(ids, 0) != 1 || c->len + T > g->cfg.block) return NULL;
    wgml_tensor *x = trunk(g, ids, c->len, c, 0.0f);
    return head(g, wgml_slice(g->ctx, x, 1, T - 1, T, 1), 1);
}

wgml_tensor *wgml_gpt_sample_logits(wgml_context *ctx, wgml_tensor *logits, float temperature, int64_t top_k)
{
    /* (below 1e-4, logits / temperature could overflow to infinity: the argmax then too) */
    if (!(temperature >= 1e-4f)) return wgml_reshape(ctx, wgml_argmax(ctx, logits, -1, 0), 1, (int64_t[1]){1});
    int64_t V = wgml_tensor_dim(logits, -1);
    wgml_tensor *s = wgml_binary_scalar(ctx, WGML_MUL, logits, 1.0f / temperature);
    if (top_k > 0 && top_k < V) {
        /* rank_i = how many logits are larger than logit i; keep rank < k */
        wgml_tensor *col = wgml_reshape(ctx, s, 2, (int64_t[2]){V, 1});
        wgml_tensor *larger = wgml_sum(ctx, wgml_gt(ctx, s, col), 1, 0);
        wgml_tensor *drop = wgml_reshape(ctx, wgml_binary_scalar(ctx, WGML_GE, larger, (float)top_k), 2, (int64_t[2]){1, V});
        s = wgml_masked_fill(ctx, s, drop, -1e30f);
    }
    /* Gumbel-max: argmax(s - log(-log u)) is distributed as softmax(s) */
    wgml_tensor *u = wgml_rand(ctx, 2, (int64_t[2]){1, V}, 1e-7f, 1.0f);
    wgml_tensor *gumbel = wgml_neg(ctx, wgml_log(ctx, wgml_neg(ctx, wgml_log(ctx, u))));
    return wgml_reshape(ctx, wgml_argmax(ctx, wgml_add(ctx, s, gumbel), -1, 0), 1, (int64_t[1]){1});
}

wgml_status wgml_gpt_generate_step(wgml_gpt *g, wgml_gpt_cache *c, const int32_t *history, int64_t n_history,
                                   int64_t n_new, float temperature, int64_t top_k, int32_t *token)
{
    if (!g || !g->ctx || !c || !c->kv || !history || !token || n_new < 1 || n_new > n_history)
        return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    int64_t L = g->cfg.layers, block = g->cfg.block, feed = n_new;
    if (c->len + n_new > block) { /* slide the window */
        wgml_gpt_cache_reset(c, L);
        feed = n_new > block / 2 ? block : block / 2 > 0 ? block / 2 : 1;
        if (feed > n_history) feed = n_history;
    }
    wgml_scope_begin(ctx);
    wgml_tensor *ids = NULL;
    wgml_status st = wgml_tensor_from_i32(ctx, 2, (int64_t[2]){1, feed}, history + n_history - feed, (size_t)feed, &ids);
    wgml_tensor *tok = st ? NULL : wgml_gpt_sample_logits(ctx, wgml_gpt_decode_logits(g, c, ids), temperature, top_k);
    wgml_tensor **out = st ? NULL : malloc((size_t)(L + 1) * sizeof *out);
    if (!st && !out) st = WGML_ERROR_OUT_OF_MEMORY;
    if (!st) {
        out[0] = tok;
        for (int64_t l = 0; l < L; l++) out[1 + l] = c->next_kv[l];
        st = wgml_eval_read(ctx, (int)(L + 1), out, tok, token, 1); /* the one submit */
    }
    if (!st) {
        for (int64_t l = 0; l < L; l++) {
            wgml_keep(c->next_kv[l]);
            wgml_tensor_free(c->kv[l]);
            c->kv[l] = c->next_kv[l];
        }
        c->len += feed;
    }
    free(out);
    wgml_scope_end(ctx);
    return st;
}

/* ---------------------------------------------------------------- training */

/* Parameters by block: the embeddings, each layer, the final norm. */
static int block_of(const wgml_gpt_config *c, int i)
{
    int head = n_head_params(c), per = per_layer(c);
    if (i < head) return 0;
    int l = (i - head) / per;
    return l < c->layers ? 1 + l : 1 + (int)c->layers;
}

static int ndim_of(const wgml_gpt_config *c, int i)
{
    char name[WGML_GPT_NAME];
    int nd;
    int64_t shape[2];
    wgml_gpt_param_info(c, i, name, &nd, shape);
    return nd;
}

/* Slot order: block by block, in each the 2-D parameters (decayed) then the 1-D ones, each
   in layout order. Layer by layer, because the optimiser computes the gradients from the
   last parameter back: each layer's weight gradients then come as the backward reaches it,
   and its activations are freed there (with every 1-D parameter after every 2-D one, the
   nanoGPT-sized step's peak was 2,642 MiB; layer by layer, 2,052: docs/MEASUREMENTS.md). */
static void order_slots(const wgml_gpt_config *c, int n, int *slot_param)
{
    int k = 0;
    for (int b = 0; b < 2 + (int)c->layers; b++)
        for (int pass = 2; pass >= 1; pass--)
            for (int i = 0; i < n; i++)
                if (block_of(c, i) == b && ndim_of(c, i) == pass) slot_param[k++] = i;
}

int wgml_gpt_optimizer_param(const wgml_gpt *g, int slot)
{
    return g && g->slot_param && slot >= 0 && slot < g->n_params ? g->slot_param[slot] : -1;
}

wgml_status wgml_gpt_optimizer(wgml_gpt *g, const wgml_gpt_train_desc *d, wgml_optimizer **out)
{
    if (!g || !g->ctx || !d || !out) return WGML_ERROR_INVALID_ARGUMENT;
    int blocks = 2 + (int)g->cfg.layers;
    wgml_tensor **order = malloc((size_t)g->n_params * sizeof *order);
    wgml_param_group *groups = calloc((size_t)(2 * blocks), sizeof *groups);
    if (!order || !groups) return free(order), free(groups), WGML_ERROR_OUT_OF_MEMORY;
    /* a group per run of slots with one block and one dimension: decay on the matrices */
    int ng = 0;
    for (int s = 0; s < g->n_params; s++) {
        int i = wgml_gpt_optimizer_param(g, s);
        order[s] = g->params[i];
        int prev = s ? wgml_gpt_optimizer_param(g, s - 1) : -1;
        if (s == 0 || block_of(&g->cfg, i) != block_of(&g->cfg, prev) ||
            wgml_tensor_ndim(g->params[i]) != wgml_tensor_ndim(g->params[prev])) {
            groups[ng].params = order + s;
            groups[ng].weight_decay = wgml_tensor_ndim(g->params[i]) == 2 ? d->weight_decay : 0.0f;
            ng++;
        }
        groups[ng - 1].n++;
    }
    wgml_optim_desc od = {.kind = WGML_OPTIM_ADAMW, .lr = d->lr, .beta1 = d->beta1 ? d->beta1 : 0.9f,
                          .beta2 = d->beta2 ? d->beta2 : 0.99f, .eps = 1e-8f, .max_grad_norm = d->max_grad_norm};
    wgml_status st = WGML_OK;
    if (d->precision != WGML_PRECISION_F32) { /* refused here, not at the first step */
        wgml_precision was = wgml_compute_precision(g->ctx);
        st = wgml_set_compute_precision(g->ctx, d->precision);
        wgml_set_compute_precision(g->ctx, was);
    }
    if (!st) st = wgml_optimizer_create_groups(g->ctx, &od, ng, groups, out);
    if (!st) st = wgml_optimizer_set_schedule(*out, &d->schedule);
    if (!st && d->precision == WGML_PRECISION_MIXED) st = wgml_optimizer_set_loss_scaling(*out, &d->loss_scaling);
    if (st && *out) wgml_optimizer_free(*out), *out = NULL;
    if (!st) { /* what wgml_gpt_save records of the run */
        wgml_gpt_run *r = &g->run;
        r->lr = d->lr, r->weight_decay = d->weight_decay, r->max_grad_norm = d->max_grad_norm;
        r->beta1 = d->beta1 > 0 ? d->beta1 : 0.9f, r->beta2 = d->beta2 > 0 ? d->beta2 : 0.99f;
        r->warmup = d->schedule.warmup_steps, r->total_steps = d->schedule.total_steps;
        r->min_lr_ratio = d->schedule.decay == WGML_LR_DECAY_NONE ? 1.0f : d->schedule.min_lr_ratio;
        r->precision = d->precision;
    }
    free(order);
    free(groups);
    return st;
}

wgml_status wgml_gpt_train_step_submit(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets,
                                       wgml_tensor **loss)
{
    if (!g || !g->ctx || !opt || !loss) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    *loss = NULL;
    /* the run's precision holds while the step's graph is built (the matmuls take it then) */
    wgml_precision was = wgml_compute_precision(ctx);
    wgml_status st = wgml_set_compute_precision(ctx, (wgml_precision)g->run.precision);
    if (st) return st;
    wgml_scope_begin(ctx);
    wgml_tensor *l = wgml_gpt_loss(g, ids, targets, g->cfg.dropout);
    st = wgml_backward(wgml_optimizer_scales_loss(opt) ? wgml_optimizer_scale_loss(opt, l) : l);
    wgml_set_compute_precision(ctx, was);
    wgml_keep(l);
    /* the forward's and backward's tensors end here, before the step: they live on only as
       the gradients' inputs, so the step, which first evaluates the results still held that
       read the parameters, finds none but the loss and computes the rest once, as before */
    wgml_scope_end(ctx);
    if (!st) st = wgml_optimizer_step(opt, 1, &l);
    if (!st) *loss = l;
    else wgml_tensor_free(l);
    return st;
}

wgml_status wgml_gpt_train_step(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets, float *loss)
{
    if (!loss) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_tensor *l = NULL;
    wgml_status st = wgml_gpt_train_step_submit(g, opt, ids, targets, &l);
    if (!st) st = wgml_tensor_read(l, loss, 1);
    wgml_tensor_free(l);
    return st;
}

wgml_status wgml_gpt_eval_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float *loss)
{
    if (!g || !g->ctx || !loss) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_scope_begin(g->ctx);
    wgml_status st = wgml_tensor_read(wgml_gpt_loss(g, ids, targets, 0.0f), loss, 1);
    wgml_scope_end(g->ctx);
    return st;
}
