/* GPT-2 (WGML_GPT_GPT2): learned positions, pre-norm layernorm blocks, exact-GELU MLP,
   biases (the formulas: gpt.h). Its parameter table and its block. */
#include <stdio.h>

#include "models/gpt.h"

/* The rows of each table and the names its code reads them by, from one list (gpt.h makes
   the enums and tables). */
#define EMBED(X) X(WTE, "wte", 'V', 'C', 'n') X(WPE, "wpe", 'B', 'C', 'n')
#define LAYER(X)                                                                                                                   \
    X(LN1_W, "ln1.w", 'C', 0, '1')                                                                                                  \
    X(LN1_B, "ln1.b", 'C', 0, '0')                                                                                                  \
    X(WQKV, "attn.wqkv", 'C', '3', 'n')                                                                                             \
    X(BQKV, "attn.bqkv", '3', 0, '0')                                                                                               \
    X(WO, "attn.wo", 'C', 'C', 'r')                                                                                                 \
    X(BO, "attn.bo", 'C', 0, '0')                                                                                                   \
    X(LN2_W, "ln2.w", 'C', 0, '1')                                                                                                  \
    X(LN2_B, "ln2.b", 'C', 0, '0')                                                                                                  \
    X(W1, "mlp.w1", 'C', 'F', 'n')                                                                                                  \
    X(B1, "mlp.b1", 'F', 0, '0')                                                                                                    \
    X(W2, "mlp.w2", 'F', 'C', 'r')                                                                                                  \
    X(B2, "mlp.b2", 'C', 0, '0')
#define FINAL(X) X(LNF_W, "lnf.w", 'C', 0, '1') X(LNF_B, "lnf.b", 'C', 0, '0')

WGML_GPT_PARAM_TABLES(EMBED, LAYER, FINAL);

static int64_t default_ffn(int64_t width) { return 4 * width; }

static int check(const wgml_gpt_config *c, char *err, size_t errlen)
{
    if (c->kv_heads != c->heads)
        snprintf(err, errlen, "gpt config: kv_heads = %lld; GPT-2 has as many K/V heads as heads (%lld)", (long long)c->kv_heads,
                 (long long)c->heads);
    else if (c->head_dim * c->heads != c->width)
        snprintf(err, errlen, "gpt config: head_dim = %lld; GPT-2's heads split the width (%lld / %lld)", (long long)c->head_dim,
                 (long long)c->width, (long long)c->heads);
    else if (c->qk_norm) snprintf(err, errlen, "gpt config: qk_norm = %lld; GPT-2 has no QK-norm", (long long)c->qk_norm);
    else return 0;
    return 1;
}

static wgml_tensor *embed_ids(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *ids, const wgml_gpt_pass *s)
{
    wgml_context *ctx = g->ctx;
    return wgml_add(ctx, wgml_embedding(ctx, p[WTE], ids), wgml_slice(ctx, p[WPE], 0, s->pos, s->pos + s->T, 1));
}

static wgml_tensor *block(wgml_gpt *g, wgml_tensor *const *params, int64_t l, wgml_tensor *x, const wgml_gpt_pass *s)
{
    wgml_context *ctx = g->ctx;
    const wgml_gpt_config *c = &g->cfg;
    /* mixed precision, training: the matmuls' weights as halves, cast once a step, which the
       forward GEMMs and the input gradients' read instead of converting f32 as they stage it (the
       same values; reading f32 there was slower: docs/MEASUREMENTS.md);
       decoding reads the f32 weights (its GEMVs) */
    wgml_tensor *p[N_LAYER];
    for (int i = 0; i < N_LAYER; i++)
        p[i] = !s->cache && (i == WQKV || i == WO || i == W1 || i == W2) ? wgml_gpt_matmul_operand(ctx, params[i]) : params[i];
    /* (mixed precision: the norms' outputs and the GELU's, which only matmuls read, as halves) */
    wgml_tensor *h = wgml_gpt_matmul_operand(ctx, wgml_layernorm(ctx, x, p[LN1_W], p[LN1_B], c->norm_eps));
    wgml_tensor *head[3] = {NULL, NULL, NULL}, *qkv = NULL; /* q, k, v */
    if (wgml_gpt_qkv(g, h, p[WQKV], p[BQKV], s, true, head, &qkv)) return wgml_reshape(ctx, NULL, 0, NULL);
    wgml_tensor *q = head[0], *k = head[1], *v = head[2];
    wgml_tensor *a = wgml_gpt_attend(g, l, q, k, v, qkv, s); /* the cache takes k|v as a view of qkv */
    x = wgml_add(ctx, x, wgml_gpt_dropout(ctx, wgml_matmul_ex(ctx, a, p[WO], &(wgml_matmul_desc){.bias = p[BO]}), s->dropout));

    h = wgml_gpt_matmul_operand(ctx, wgml_layernorm(ctx, x, p[LN2_W], p[LN2_B], c->norm_eps));
    /* decoding: the GELU in the matmul's epilogue (one launch fewer); training keeps them
       apart, since the fused form's gradient computes the pre-activation again (under mixed
       precision the GELU's gradient goes into the epilogue of the GEMM that makes dU instead:
       wgml_rule_matmul_act_grad) */
    wgml_tensor *u = s->cache ? wgml_matmul_ex(ctx, h, p[W1], &(wgml_matmul_desc){.bias = p[B1], .activation = WGML_ACT_GELU_EXACT})
                              : wgml_gpt_matmul_operand(ctx, wgml_gelu_exact(ctx, wgml_gpt_half_if_free(ctx, wgml_matmul_ex(ctx, h, p[W1], &(wgml_matmul_desc){.bias = p[B1]}))));
    wgml_tensor *f = wgml_matmul_ex(ctx, u, p[W2], &(wgml_matmul_desc){.bias = p[B2]});
    return wgml_add(ctx, x, wgml_gpt_dropout(ctx, f, s->dropout));
}

static wgml_tensor *final_norm(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *x)
{
    return wgml_layernorm(g->ctx, x, p[LNF_W], p[LNF_B], g->cfg.norm_eps);
}

const wgml_gpt_arch_ops wgml_gpt2_arch = {
    .name = "gpt2",
    .embed = embed_rows, .layer = layer_rows, .final = final_rows,
    .n_embed = N_EMBED, .n_layer = N_LAYER, .n_final = N_FINAL,
    .default_ffn = default_ffn, .check = check,
    .embed_ids = embed_ids, .block = block, .final_norm = final_norm,
};
