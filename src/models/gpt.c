/* The decoder every architecture shares, through wgml.h (and the core's errors and tensor
   fields for its checks): the config, the parameter
   table made from the architecture's rows, the embedding, the layers in turn, the final norm
   and the tied head, the KV cache and generation, training (see gpt.h; the architectures:
   gpt2.c, llama.c). */
#include "core/context.h"
#include "models/gpt.h"
#include "ops/elementwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- configuration and layout */

const wgml_gpt_arch_ops *wgml_gpt_arch_of(wgml_gpt_arch arch)
{
    return arch == WGML_GPT_GPT2 ? &wgml_gpt2_arch : arch == WGML_GPT_LLAMA ? &wgml_llama_arch : NULL;
}

wgml_status wgml_gpt_config_resolve(const wgml_gpt_config *in, wgml_gpt_config *out, char *err, size_t errlen)
{
    if (!in || !out) {
        snprintf(err, errlen, "gpt config: NULL");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    wgml_gpt_config c = *in;
    const wgml_gpt_arch_ops *arch = wgml_gpt_arch_of(c.arch);
#define BAD(...) return snprintf(err, errlen, __VA_ARGS__), WGML_ERROR_INVALID_ARGUMENT
    if (!arch) BAD("gpt config: arch = %d is not gpt2 (0) or llama (1)", (int)c.arch);
    if (!c.kv_heads) c.kv_heads = c.heads;
    if (!c.ffn) c.ffn = arch->default_ffn(c.width);
    if (c.rope_base == 0.0f) c.rope_base = 10000.0f;
    if (c.norm_eps == 0.0f) c.norm_eps = 1e-5f;
    if (!c.head_dim && c.heads > 0) c.head_dim = c.width / c.heads;
    if (c.vocab < 1 || c.vocab > (1 << 20)) BAD("gpt config: vocab = %lld, want 1 to %d", (long long)c.vocab, 1 << 20);
    if (c.block < 1 || c.block > (1 << 16)) BAD("gpt config: block = %lld, want 1 to %d", (long long)c.block, 1 << 16);
    if (c.layers < 1 || c.layers > WGML_GPT_MAX_LAYERS)
        BAD("gpt config: layers = %lld, want 1 to %d", (long long)c.layers, WGML_GPT_MAX_LAYERS);
    if (c.width < 1 || c.width > (1 << 16)) BAD("gpt config: width = %lld, want 1 to %d", (long long)c.width, 1 << 16);
    /* the head size: C / H unless head_dim says otherwise (Llama: Qwen3's 128 at width 1024, 16 heads) */
    if (c.heads < 1 || (c.head_dim == c.width / c.heads && c.width % c.heads))
        BAD("gpt config: heads = %lld does not divide width = %lld", (long long)c.heads, (long long)c.width);
    if (c.head_dim < 1 || c.head_dim > 128) BAD("gpt config: head size = %lld; attention takes 1 to 128", (long long)c.head_dim);
    if (c.qk_norm != 0 && c.qk_norm != 1) BAD("gpt config: qk_norm = %lld; want 0 or 1", (long long)c.qk_norm);
    if (c.kv_heads < 1 || c.heads % c.kv_heads)
        BAD("gpt config: kv_heads = %lld does not divide heads = %lld", (long long)c.kv_heads, (long long)c.heads);
    if (arch->check(&c, err, errlen)) return WGML_ERROR_INVALID_ARGUMENT;
    if (c.ffn < 1 || c.ffn > (1 << 18)) BAD("gpt config: ffn = %lld, want 1 to %d", (long long)c.ffn, 1 << 18);
    if (!(c.dropout >= 0.0f && c.dropout < 1.0f)) BAD("gpt config: dropout = %g, want [0, 1)", (double)c.dropout);
    if (!(c.rope_base > 1.0f && isfinite(c.rope_base))) BAD("gpt config: rope_base = %g, want > 1", (double)c.rope_base);
    if (!(c.norm_eps > 0.0f && c.norm_eps < 1.0f)) BAD("gpt config: norm_eps = %g, want (0, 1)", (double)c.norm_eps);
#undef BAD
    *out = c;
    return WGML_OK;
}

/* A config that wgml_gpt_config_resolve accepted has an architecture; the queries below
   still answer for one it did not (0 parameters) rather than read past a table. */
int wgml_gpt_param_count(const wgml_gpt_config *c)
{
    const wgml_gpt_arch_ops *a = c ? wgml_gpt_arch_of(c->arch) : NULL;
    return a ? a->n_embed + (int)c->layers * wgml_gpt_layer_params(c) + a->n_final : 0;
}

int wgml_gpt_layer_params(const wgml_gpt_config *c)
{
    const wgml_gpt_arch_ops *a = wgml_gpt_arch_of(c->arch);
    return a ? a->n_layer - (a->n_optional && !c->qk_norm ? a->n_optional : 0) : 0;
}

static int64_t size_of(const wgml_gpt_config *c, char k)
{
    int64_t d = c->head_dim ? c->head_dim : c->heads > 0 ? c->width / c->heads : 0; /* (unresolved: heads 0) */
    switch (k) {
    case 'A': return c->heads * d;
    case 'D': return d;
    case 'V': return c->vocab;
    case 'B': return c->block;
    case 'C': return c->width;
    case 'F': return c->ffn;
    case 'G': return 2 * c->ffn;
    case '3': return 3 * c->width;
    case 'Q': return (c->heads + 2 * c->kv_heads) * d;
    default: return 0;
    }
}

void wgml_gpt_param_spec(const wgml_gpt_config *c, int i, wgml_param_spec *p)
{
    const wgml_gpt_arch_ops *a = c ? wgml_gpt_arch_of(c->arch) : NULL;
    memset(p, 0, sizeof *p);
    if (!a || i < 0 || i >= wgml_gpt_param_count(c)) return; /* (not a parameter: an empty spec) */
    const int per = wgml_gpt_layer_params(c), body = (int)c->layers * per;
    const wgml_gpt_param_row *row;
    if (i < a->n_embed) {
        row = &a->embed[i];
        snprintf(p->name, sizeof p->name, "%s", row->name);
    } else if (i < a->n_embed + body) {
        int l = (i - a->n_embed) / per;
        row = &a->layer[(i - a->n_embed) % per];
        snprintf(p->name, sizeof p->name, "h.%d.%s", l, row->name);
        p->group = 1 + l;
    } else {
        row = &a->final[i - a->n_embed - body];
        snprintf(p->name, sizeof p->name, "%s", row->name);
        p->group = 1 + (int)c->layers;
    }
    p->ndim = row->cols ? 2 : 1;
    p->shape[0] = size_of(c, row->rows);
    p->shape[1] = row->cols ? size_of(c, row->cols) : 0;
    p->init = row->init == '1' ? WGML_INIT_ONES : row->init == '0' ? WGML_INIT_ZEROS : WGML_INIT_NORMAL;
    /* (the residual deviation computed in float, as it always was) */
    p->scale = row->init == 'r' ? (double)(0.02f / sqrtf(2.0f * (float)c->layers)) : row->init == 'n' ? (double)0.02f : 0.0;
}

void wgml_gpt_param_info(const wgml_gpt_config *c, int i, char name[WGML_GPT_NAME], int *ndim, int64_t shape[2])
{
    wgml_param_spec p;
    wgml_gpt_param_spec(c, i, &p);
    if (name) snprintf(name, WGML_GPT_NAME, "%s", p.name);
    if (ndim) *ndim = p.ndim;
    if (shape) shape[0] = p.shape[0], shape[1] = p.shape[1];
}

int64_t wgml_gpt_numel(const wgml_gpt_config *c)
{
    int64_t n = 0;
    for (int i = 0; i < wgml_gpt_param_count(c); i++) {
        wgml_param_spec p;
        wgml_gpt_param_spec(c, i, &p);
        n += wgml_param_numel(&p);
    }
    return n;
}

/* ---------------------------------------------------------------- creation */

void wgml_gpt_free(wgml_gpt *g)
{
    if (!g) return;
    wgml_model_free(&g->m);
    free(g->slot_param);
    memset(g, 0, sizeof *g);
}

static void order_slots(const wgml_gpt *g, int *slot_param); /* (training, below) */

/* The model of cfg: parameter i from params[i] when params is given, else from its rule
   (seed: the context's generator). */
static wgml_status make(wgml_context *ctx, const wgml_gpt_config *cfg, const float *const *params, uint64_t seed, wgml_gpt *out)
{
    memset(out, 0, sizeof *out);
    char err[256];
    wgml_gpt_config c;
    if (wgml_gpt_config_resolve(cfg, &c, err, sizeof err)) return WGML_ERROR_INVALID_ARGUMENT;
    out->ctx = ctx;
    out->cfg = c;
    out->arch = wgml_gpt_arch_of(c.arch);
    int n = wgml_gpt_param_count(&c);
    wgml_param_spec *spec = malloc((size_t)n * sizeof *spec);
    if (!spec) return WGML_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < n; i++) wgml_gpt_param_spec(&c, i, &spec[i]);
    wgml_status st = wgml_model_create(ctx, n, spec, params, seed, &out->m);
    free(spec);
    out->slot_param = st ? NULL : malloc((size_t)n * sizeof *out->slot_param);
    if (!st && !out->slot_param) st = WGML_ERROR_OUT_OF_MEMORY;
    if (!st) order_slots(out, out->slot_param);
    if (st) wgml_gpt_free(out);
    return st;
}

wgml_status wgml_gpt_create(wgml_context *ctx, const wgml_gpt_config *cfg, const float *const *params, wgml_gpt *out)
{
    if (!ctx || !cfg || !params || !out) return WGML_ERROR_INVALID_ARGUMENT;
    return make(ctx, cfg, params, 0, out);
}

wgml_status wgml_gpt_init(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt *out)
{
    if (!ctx || !cfg || !out) return WGML_ERROR_INVALID_ARGUMENT;
    return make(ctx, cfg, NULL, seed, out);
}

/* ---------------------------------------------------------------- forward */

wgml_tensor *wgml_gpt_dropout(wgml_context *ctx, wgml_tensor *x, float p)
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

wgml_tensor *wgml_gpt_matmul_operand(wgml_context *ctx, wgml_tensor *x)
{
    return wgml_compute_precision(ctx) == WGML_PRECISION_MIXED ? wgml_cast(ctx, x, WGML_F16) : x;
}

wgml_tensor *wgml_gpt_half_if_free(wgml_context *ctx, wgml_tensor *x)
{
    if (wgml_compute_precision(ctx) != WGML_PRECISION_MIXED || x->status) return x;
    wgml_tensor *h = wgml_retyped_f16(ctx, x);
    return h ? h : x;
}

wgml_tensor *wgml_gpt_linear_cols(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w, wgml_tensor *b, int64_t from, int64_t n)
{
    wgml_matmul_desc d = {.bias = b ? wgml_slice(ctx, b, 0, from, from + n, 1) : NULL};
    return wgml_matmul_ex(ctx, x, wgml_slice(ctx, w, 1, from, from + n, 1), &d);
}

wgml_status wgml_gpt_qkv(wgml_gpt *g, wgml_tensor *h, wgml_tensor *wqkv, wgml_tensor *bqkv, const wgml_gpt_pass *s,
                         bool packed, wgml_tensor *part[3], wgml_tensor **qkv)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    int64_t D = c->head_dim;
    const int64_t sizes[3] = {c->heads * D, c->kv_heads * D, c->kv_heads * D};
    *qkv = NULL;
    if (s->cache) { /* decoding: one matmul (a GEMV), its columns split */
        *qkv = wgml_matmul_ex(ctx, h, wqkv, &(wgml_matmul_desc){.bias = bqkv});
        wgml_status st = wgml_split(ctx, *qkv, -1, 3, sizes, part);
        if (st) return st;
    } else if (packed) {
        /* one product; the heads are windows of [B,T,H+2Hkv,D] (views), and the attention hands
           their gradient back as one tensor: one GEMM for the weight's gradient, one for h's,
           one sum for the bias's */
        *qkv = wgml_matmul_ex(ctx, h, wqkv, &(wgml_matmul_desc){.bias = bqkv});
        const int64_t heads[4] = {s->B, s->T, c->heads + 2 * c->kv_heads, D};
        wgml_tensor *all = wgml_reshape(ctx, *qkv, 4, heads);
        static const int bhtd[4] = {0, 2, 1, 3};
        int64_t from = 0;
        for (int i = 0; i < 3; i++) {
            int64_t n = sizes[i] / D;
            part[i] = wgml_permute(ctx, wgml_slice(ctx, all, 2, from, from + n, 1), bhtd);
            from += n;
        }
        return WGML_OK;
    } else {
        /* q or k transformed before the attention (rotated, normed): the weight's columns split
           instead, so the gradients of the three parts are the weight's and bias's windows,
           not three zero-padded copies of qkv's */
        part[0] = wgml_gpt_linear_cols(ctx, h, wqkv, bqkv, 0, sizes[0]);
        part[1] = wgml_gpt_linear_cols(ctx, h, wqkv, bqkv, sizes[0], sizes[1]);
        part[2] = wgml_gpt_linear_cols(ctx, h, wqkv, bqkv, sizes[0] + sizes[1], sizes[2]);
    }
    for (int i = 0; i < 3; i++) part[i] = to_heads(ctx, part[i], s->B, s->T, i ? c->kv_heads : c->heads, D);
    return WGML_OK;
}

wgml_tensor *wgml_gpt_attend(wgml_gpt *g, int64_t l, wgml_tensor *q, wgml_tensor *k, wgml_tensor *v, wgml_tensor *qkv,
                             const wgml_gpt_pass *s)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    int64_t H = c->heads, Hkv = c->kv_heads, D = c->head_dim, T = s->T;
    const int64_t btc[3] = {s->B, T, H * D};
    wgml_gpt_cache *cache = s->cache;
    if (cache) { /* B = 1: this step's keys and values as [2,Hkv,T,D], appended to the cache's */
        wgml_tensor *kv;
        if (!qkv) { /* keys rotated (or normed): a copy of both */
            kv = wgml_concat(ctx, 2, (wgml_tensor *[2]){k, v}, 0);
        } else { /* keys and values are neighbours in qkv's columns: a view */
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
    /* the attention writes [B,T,H,D]: [B,T,C] is a reshape, and its gradient reaches the
       attention's backward as is (no copy either way) */
    wgml_tensor *a = wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.causal = 1, .packed = cache ? NULL : qkv, .out_bthd = 1});
    a = wgml_reshape(ctx, a, 3, btc);
    /* training under mixed precision: the projection's GEMMs (forward and its weight's
       gradient) read halves, a cast launch cheaper than their staging f32 (H200: the nanoGPT
       step 2% faster; docs/MEASUREMENTS.md) */
    return cache ? a : wgml_gpt_matmul_operand(ctx, a);
}

/* The final hidden states [B,T,C] of ids [B,T] at positions pos.. */
static wgml_tensor *trunk(wgml_gpt *g, wgml_tensor *ids, int64_t pos, wgml_gpt_cache *cache, float dropout)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_arch_ops *a = g->arch;
    wgml_tensor *const *p = g->m.params;
    if (!wgml_tensor_valid(ids)) return wgml_embedding(ctx, p[0], NULL); /* (its message: ids is NULL) */
    if (wgml_tensor_ndim(ids) != 2)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "gpt: ids are [B, T] (2-D), not %d-D", wgml_tensor_ndim(ids));
    if (!cache && wgml_tensor_dim(ids, 1) > g->cfg.block) /* (a cache's positions are its own) */
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "gpt: ids [%lld, %lld] hold more positions than the model's block of %lld",
                                 (long long)wgml_tensor_dim(ids, 0), (long long)wgml_tensor_dim(ids, 1), (long long)g->cfg.block);
    wgml_gpt_pass s = {.B = wgml_tensor_dim(ids, 0), .T = wgml_tensor_dim(ids, 1), .pos = pos, .cache = cache, .dropout = dropout};
    wgml_tensor *x = wgml_gpt_dropout(ctx, a->embed_ids(g, p, ids, &s), dropout);
    const int per = wgml_gpt_layer_params(&g->cfg);
    for (int64_t l = 0; l < g->cfg.layers; l++) x = a->block(g, p + a->n_embed + l * per, l, x, &s);
    return a->final_norm(g, p + g->m.n - a->n_final, x);
}

static wgml_tensor *head(wgml_gpt *g, wgml_tensor *x, int64_t rows)
{
    const int64_t s[2] = {rows, g->cfg.width};
    return wgml_matmul_ex(g->ctx, wgml_reshape(g->ctx, x, 2, s), g->m.params[0], &(wgml_matmul_desc){.trans_b = 1});
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

void wgml_gpt_cache_advance(wgml_gpt_cache *c, int64_t layers, int64_t feed)
{
    for (int64_t l = 0; l < layers; l++) {
        wgml_keep(c->next_kv[l]);
        wgml_tensor_free(c->kv[l]);
        c->kv[l] = c->next_kv[l];
    }
    c->len += feed;
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
    if (!st) wgml_gpt_cache_advance(c, L, feed);
    free(out);
    wgml_scope_end(ctx);
    return st;
}

/* ---------------------------------------------------------------- training */

/* Slot order: block by block (the spec's group: the embeddings, each layer, the final norm),
   in each the 2-D parameters (decayed) then the 1-D ones, each in layout order. Layer by
   layer, because the optimiser computes the gradients from the last parameter back: each
   layer's weight gradients then come as the backward reaches it, and its activations are
   freed there (every 1-D parameter after every 2-D one held about 30% more at the peak:
   docs/MEASUREMENTS.md). */
static void order_slots(const wgml_gpt *g, int *slot_param)
{
    int k = 0, n = g->m.n;
    for (int b = 0; b < 2 + (int)g->cfg.layers; b++)
        for (int pass = 2; pass >= 1; pass--)
            for (int i = 0; i < n; i++)
                if (g->m.spec[i].group == b && g->m.spec[i].ndim == pass) slot_param[k++] = i;
}

int wgml_gpt_optimizer_param(const wgml_gpt *g, int slot)
{
    return g && g->slot_param && slot >= 0 && slot < g->m.n ? g->slot_param[slot] : -1;
}

wgml_status wgml_gpt_check_optimizer(const wgml_gpt *g, const wgml_optimizer *opt, const char *fn)
{
    if (!g->m.n || g->m.params[0]->optimizer == opt) return WGML_OK;
    return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the optimizer is not this model's (wgml_gpt_optimizer(g, ...) makes one)",
                     fn);
}

wgml_status wgml_gpt_optimizer(wgml_gpt *g, const wgml_gpt_train_desc *d, wgml_optimizer **out)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!d || !out) return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt_optimizer: %s is NULL", d ? "out" : "desc");
    int blocks = 2 + (int)g->cfg.layers;
    wgml_tensor **order = malloc((size_t)g->m.n * sizeof *order);
    wgml_param_group *groups = calloc((size_t)(2 * blocks), sizeof *groups);
    if (!order || !groups) return free(order), free(groups), WGML_ERROR_OUT_OF_MEMORY;
    /* a group per run of slots with one block and one dimension: decay on the matrices */
    int ng = 0;
    for (int s = 0; s < g->m.n; s++) {
        int i = wgml_gpt_optimizer_param(g, s);
        order[s] = g->m.params[i];
        int prev = s ? wgml_gpt_optimizer_param(g, s - 1) : -1;
        if (s == 0 || g->m.spec[i].group != g->m.spec[prev].group || g->m.spec[i].ndim != g->m.spec[prev].ndim) {
            groups[ng].params = order + s;
            groups[ng].weight_decay = g->m.spec[i].ndim == 2 ? d->weight_decay : 0.0f;
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
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    wgml_context *ctx = g->ctx;
    if (!opt || !loss) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt_train_step: %s is NULL", opt ? "loss" : "opt");
    *loss = NULL;
    /* before the backward, whose gradients a refused step would leave for the next one */
    wgml_status st = wgml_gpt_check_optimizer(g, opt, "gpt_train_step");
    if (st) return st;
    /* the run's precision holds while the step's graph is built (the matmuls take it then) */
    wgml_precision was = wgml_compute_precision(ctx);
    if ((st = wgml_set_compute_precision(ctx, (wgml_precision)g->run.precision))) return st;
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
    else { /* a failed step's gradients are not the next step's */
        wgml_tensor_free(l);
        for (int i = 0; i < g->m.n; i++) wgml_zero_grad(g->m.params[i]);
    }
    return st;
}

wgml_status wgml_gpt_train_step(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets, float *loss)
{
    if (!loss) return g && g->ctx ? wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt_train_step: loss is NULL")
                                  : WGML_ERROR_INVALID_ARGUMENT;
    wgml_tensor *l = NULL;
    wgml_status st = wgml_gpt_train_step_submit(g, opt, ids, targets, &l);
    if (!st && (st = wgml_tensor_read(l, loss, 1))) { /* (the step itself was taken: a retry would take it twice) */
        char why[512];
        snprintf(why, sizeof why, "%s", wgml_error_message(g->ctx));
        wgml_fail(g->ctx, st, "gpt_train_step: the step was taken (step %lld), but its loss could not be read: %s",
                  (long long)wgml_optimizer_steps(opt), why);
    }
    wgml_tensor_free(l);
    return st;
}

wgml_status wgml_gpt_eval_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float *loss)
{
    if (!g || !g->ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!loss) return wgml_fail(g->ctx, WGML_ERROR_INVALID_ARGUMENT, "gpt_eval_loss: loss is NULL");
    wgml_scope_begin(g->ctx);
    wgml_status st = wgml_tensor_read(wgml_gpt_loss(g, ids, targets, 0.0f), loss, 1);
    wgml_scope_end(g->ctx);
    return st;
}
