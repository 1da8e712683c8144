/* Llama/Qwen (WGML_GPT_LLAMA): RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no
   biases, no position table (the formulas: gpt.h). Its parameter table and its block. */
#include <stdio.h>

#include "models/gpt.h"

/* The rows of each table and the names its code reads them by, from one list (gpt.h makes
   the enums and tables). */
#define EMBED(X) X(WTE, "wte", 'V', 'C', 'n')
#define LAYER(X)                                                                                                                   \
    X(NORM1_W, "norm1.w", 'C', 0, '1')                                                                                              \
    X(WQKV, "attn.wqkv", 'C', 'Q', 'n')                                                                                             \
    X(WO, "attn.wo", 'A', 'C', 'r')                                                                                                 \
    X(NORM2_W, "norm2.w", 'C', 0, '1')                                                                                              \
    X(WGU, "mlp.wgu", 'C', 'G', 'n')                                                                                                \
    X(WD, "mlp.wd", 'F', 'C', 'r')                                                                                                  \
    X(QNORM_W, "attn.qnorm.w", 'D', 0, '1') /* qk_norm only (n_optional) */                                                        \
    X(KNORM_W, "attn.knorm.w", 'D', 0, '1')
#define FINAL(X) X(NORMF_W, "normf.w", 'C', 0, '1')

WGML_GPT_PARAM_TABLES(EMBED, LAYER, FINAL);

/* 8C/3 rounded up to a multiple of 32 */
static int64_t default_ffn(int64_t width) { return (8 * width / 3 + 31) / 32 * 32; }

static int check(const wgml_gpt_config *c, char *err, size_t errlen)
{
    if (c->head_dim % 2 == 0) return 0;
    snprintf(err, errlen, "gpt config: head size = %lld must be even for RoPE", (long long)c->head_dim);
    return 1;
}

static wgml_tensor *embed_ids(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *ids, const wgml_gpt_pass *s)
{
    (void)s;
    return wgml_embedding(g->ctx, p[WTE], ids);
}

static wgml_tensor *block(wgml_gpt *g, wgml_tensor *const *p, int64_t l, wgml_tensor *x, const wgml_gpt_pass *s)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    /* (mixed precision: the norms' outputs and the SwiGLU product, which only matmuls read, as halves) */
    wgml_tensor *h = wgml_gpt_matmul_operand(ctx, wgml_rmsnorm(ctx, x, p[NORM1_W], c->norm_eps));
    wgml_tensor *head[3] = {NULL, NULL, NULL}, *qkv = NULL; /* q, k, v */
    if (wgml_gpt_qkv(g, h, p[WQKV], NULL, s, false, head, &qkv)) return wgml_reshape(ctx, NULL, 0, NULL);
    wgml_tensor *q = head[0], *k = head[1], *v = head[2];
    if (c->qk_norm) { /* Qwen3: each head's RMSNorm, before RoPE */
        q = wgml_rmsnorm(ctx, q, p[QNORM_W], c->norm_eps);
        k = wgml_rmsnorm(ctx, k, p[KNORM_W], c->norm_eps);
    }
    q = wgml_rope(ctx, q, s->pos, c->rope_base);
    k = wgml_rope(ctx, k, s->pos, c->rope_base);
    wgml_tensor *a = wgml_gpt_attend(g, l, q, k, v, NULL, s); /* the keys rotated: the cache copies them */
    x = wgml_add(ctx, x, wgml_gpt_dropout(ctx, wgml_matmul(ctx, a, p[WO]), s->dropout));

    h = wgml_gpt_matmul_operand(ctx, wgml_rmsnorm(ctx, x, p[NORM2_W], c->norm_eps));
    wgml_tensor *gu[2] = {NULL, NULL};
    if (s->cache) {
        if (wgml_chunk(ctx, wgml_matmul(ctx, h, p[WGU]), -1, 2, gu)) return wgml_reshape(ctx, NULL, 0, NULL);
    } else {
        /* (mixed precision: kept for the backward pass as halves where the GEMMs store them) */
        gu[0] = wgml_gpt_half_if_free(ctx, wgml_gpt_linear_cols(ctx, h, p[WGU], NULL, 0, c->ffn));
        gu[1] = wgml_gpt_half_if_free(ctx, wgml_gpt_linear_cols(ctx, h, p[WGU], NULL, c->ffn, c->ffn));
    }
    wgml_tensor *f = wgml_matmul(ctx, wgml_gpt_matmul_operand(ctx, wgml_mul(ctx, wgml_silu(ctx, gu[0]), gu[1])), p[WD]);
    return wgml_add(ctx, x, wgml_gpt_dropout(ctx, f, s->dropout));
}

static wgml_tensor *final_norm(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *x)
{
    return wgml_rmsnorm(g->ctx, x, p[NORMF_W], g->cfg.norm_eps);
}

const wgml_gpt_arch_ops wgml_llama_arch = {
    .name = "llama",
    .embed = embed_rows, .layer = layer_rows, .final = final_rows,
    .n_embed = N_EMBED, .n_layer = N_LAYER, .n_final = N_FINAL, .n_optional = 2,
    .default_ffn = default_ffn, .check = check,
    .embed_ids = embed_ids, .block = block, .final_norm = final_norm,
};
