/*
 * Decoder-only transformers written against the public API (wgml.h) alone: the proof that
 * wgml.h carries a transformer. gpt.c holds what every architecture shares (the config, the
 * embedding, the layers in turn, the tied head, the KV cache, generation, training); each
 * architecture is one file with its parameter table and its block (wgml_gpt_arch_ops):
 * gpt2.c and llama.c. The parameters and checkpoints are models/model.h's. Two architectures:
 *
 * GPT-2 (WGML_GPT_GPT2), pre-norm:
 *   x = wte[ids] + wpe[0:T];  x = dropout(x)
 *   per layer:  h = layernorm(x; ln1.w, ln1.b)            (biased variance, eps inside sqrt)
 *               q|k|v = h @ attn.wqkv + attn.bqkv         (split of the last dim into C each)
 *               heads: [B,T,C] -> [B,T,H,D] -> [B,H,T,D]  (D = C/H, head h = columns hD..hD+D)
 *               a = softmax(q k^T / sqrt(D) + causal) v, merged back to [B,T,C]
 *               x = x + dropout(a @ attn.wo + attn.bo)
 *               h = layernorm(x; ln2.w, ln2.b)
 *               x = x + dropout(gelu_exact(h @ mlp.w1 + mlp.b1) @ mlp.w2 + mlp.b2)
 *   x = layernorm(x; lnf.w, lnf.b);  logits = x @ wte^T  (head tied to the embedding)
 *
 * Llama/Qwen (WGML_GPT_LLAMA), no biases, no position table:
 *   x = wte[ids];  x = dropout(x)
 *   per layer:  h = rmsnorm(x; norm1.w)                   (x / sqrt(mean(x^2) + eps) * w)
 *               q|k|v = h @ attn.wqkv                     (q: H*D columns, k and v: Hkv*D each)
 *               heads as above; q and k rotated by RoPE (rotate-half, position t, rope_base)
 *               a = attention with grouped K/V (query head h reads K/V head h / (H / Hkv))
 *               x = x + dropout(a @ attn.wo)
 *               h = rmsnorm(x; norm2.w);  g|u = h @ mlp.wgu  (F columns each)
 *               x = x + dropout((silu(g) * u) @ mlp.wd)
 *   x = rmsnorm(x; normf.w);  logits = x @ wte^T
 *
 * The loss is the mean cross-entropy of predicting targets [B,T] over all B*T positions.
 * Matrices are [in, out] (y = x @ W). Parameters in this order (the checkpoint's names; the
 * reference and the PyTorch peer use the same):
 *   GPT-2: wte [V,C], wpe [block,C], then per layer l, named "h.<l>.<name>":
 *          ln1.w [C], ln1.b [C], attn.wqkv [C,3C], attn.bqkv [3C], attn.wo [C,C], attn.bo [C],
 *          ln2.w [C], ln2.b [C], mlp.w1 [C,F], mlp.b1 [F], mlp.w2 [F,C], mlp.b2 [C];
 *          then lnf.w [C], lnf.b [C]
 *   Llama: wte [V,C], then per layer: norm1.w [C], attn.wqkv [C,(H+2Hkv)D], attn.wo [C,C],
 *          norm2.w [C], mlp.wgu [C,2F], mlp.wd [F,C]; then normf.w [C]
 * Initialisation (wgml_gpt_init, on the GPU from a seed, in this order): 2-D parameters
 * normal(0, 0.02), except the projections into the residual stream (attn.wo, mlp.w2,
 * mlp.wd) normal(0, 0.02 / sqrt(2 layers)); biases 0; norm weights 1.
 * Training (wgml_gpt_optimizer): AdamW, betas (0.9, 0.99), eps 1e-8; the 2-D parameters
 * with weight decay, the 1-D ones without; in the optimiser the parameters go block by block
 * (embeddings, each layer, the final norm), in each the 2-D ones then the 1-D ones
 * (wgml_gpt_optimizer_param; checkpoints name their moments, so the order is the code's).
 */
#ifndef WGML_MODELS_GPT_H
#define WGML_MODELS_GPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "wgml_gpt.h"

/* The config, its queries and the functions the public API offers: wgml_gpt.h. What follows
   is the library's own: the model as a value (tests, the benchmark), its KV cache, one
   generation step. */

/* The settings of the run that trained a model (checkpoint metadata, gpt_checkpoint.h). */
typedef struct wgml_gpt_run {
    uint64_t seed; /* initial weights and the batches */
    float lr, min_lr_ratio, weight_decay, max_grad_norm, beta1, beta2;
    int64_t warmup, total_steps, batch, eval_every, eval_batches;
    uint64_t rng_seed, rng_offset; /* the GPU generator after the checkpoint's step */
    int64_t ranks;                 /* data-parallel processes of the run (0 is 1); a resume needs as many */
    int64_t precision;             /* wgml_precision of the training steps */
    /* the loss scaler's state at the checkpoint (mixed precision; loss_scale 0: none) */
    float loss_scale;
    int64_t loss_scale_good, loss_scale_skipped, loss_scale_updates;
    char data[256];                /* the text folder */
    /* the text's tokens and a checksum of them, so that a resume reads the same text (0: not
       recorded, older files) */
    int64_t data_tokens;
    uint64_t data_checksum;
} wgml_gpt_run;

typedef struct wgml_gpt_arch_ops wgml_gpt_arch_ops;

struct wgml_gpt {
    wgml_context *ctx;
    wgml_gpt_config cfg; /* resolved */
    const wgml_gpt_arch_ops *arch;
    wgml_model m;    /* the parameters, in the order above (m.params, m.n) */
    int *slot_param; /* the parameter of each optimiser slot (wgml_gpt_optimizer_param) */
    /* the public handle's (models/gpt_api.c): what a checkpoint holds beside the weights */
    int64_t step;
    int vocab_size; /* 0: bytes 0..V-1 */
    uint8_t vocab[256];
    wgml_gpt_run run; /* written by wgml_gpt_save: the loaded one, or the last optimiser's */
};

/* A model with parameters from host data (params[i] has parameter i's elements), or
   initialised on the GPU from seed (wgml_manual_seed(seed) first: the context's generator
   moves on). A config that wgml_gpt_config_resolve refuses is WGML_ERROR_INVALID_ARGUMENT:
   resolve it first for the message. */
wgml_status wgml_gpt_create(wgml_context *ctx, const wgml_gpt_config *cfg, const float *const *params, wgml_gpt *out);
wgml_status wgml_gpt_init(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt *out);
void wgml_gpt_free(wgml_gpt *g); /* safe on a zeroed or freed struct */

/* Generation with a KV cache: each layer's keys and values of the positions so far stay on
   the GPU, so a step feeds only the new tokens. */
typedef struct wgml_gpt_cache {
    int64_t len;          /* positions held */
    wgml_tensor **kv;     /* per layer, [2,Hkv,len,D]: the keys, then the values; a step makes
                             a new one (the old copied, the new appended: one concat); NULL
                             while len = 0 */
    wgml_tensor **next_kv; /* built by a step, in place of kv once evaluated */
} wgml_gpt_cache;
wgml_status wgml_gpt_cache_init(const wgml_gpt *g, wgml_gpt_cache *c);
void wgml_gpt_cache_reset(wgml_gpt_cache *c, int64_t layers); /* back to no positions */
void wgml_gpt_cache_free(wgml_gpt_cache *c, int64_t layers);
/* After a step's evaluation: next_kv (kept) becomes kv, the cache `feed` positions longer. */
void wgml_gpt_cache_advance(wgml_gpt_cache *c, int64_t layers, int64_t feed);

/* Lazy: the next token's logits [1,V] after ids [1,T] (i32) at positions c->len ..
   c->len + T - 1 (at most block in all; NULL otherwise). */
wgml_tensor *wgml_gpt_decode_logits(wgml_gpt *g, wgml_gpt_cache *c, wgml_tensor *ids);

/* One generation step in one submit: feeds ids (n >= 1 tokens) to the cache, draws the next
   token and reads back only its id. When the cache would pass the block, it restarts from
   the last block / 2 tokens of `history` (n_history of them, the ids so far, the new ones
   included), as a sliding window. */
wgml_status wgml_gpt_generate_step(wgml_gpt *g, wgml_gpt_cache *c, const int32_t *history, int64_t n_history,
                                   int64_t n_new, float temperature, int64_t top_k, int32_t *token);

/* (the optimiser: wgml_gpt.h) The model's parameter index of optimiser slot i. */
int wgml_gpt_optimizer_param(const wgml_gpt *g, int slot);
/* OK when opt holds g's parameters (wgml_gpt_optimizer's), else INVALID_ARGUMENT naming fn */
wgml_status wgml_gpt_check_optimizer(const wgml_gpt *g, const wgml_optimizer *opt, const char *fn);

/* ---------------------------------------------------------------- the architectures */

/* One row of an architecture's parameter table. Sizes are letters: 'V' vocab, 'B' block,
   'C' width, 'F' ffn, 'G' 2F, '3' 3C, 'Q' (H + 2Hkv)D, 'A' H D, 'D' the head size; cols 0 for a vector. init: '0'
   zeros, '1' ones, 'n' normal(0, 0.02), 'r' normal(0, 0.02 / sqrt(2 layers)) (the
   projections into the residual stream). */
typedef struct wgml_gpt_param_row {
    const char *name;
    char rows, cols, init;
} wgml_gpt_param_row;

/* An architecture file's tables from its X-lists EMBED, LAYER and FINAL of
   X(id, name, rows, cols, init): the ids as enum constants, counted by N_EMBED, N_LAYER and
   N_FINAL, and the rows as embed_rows, layer_rows and final_rows. */
#define WGML_GPT_PARAM_ID(id, name, rows, cols, init) id,
#define WGML_GPT_PARAM_ROW(id, name, rows, cols, init) {name, rows, cols, init},
#define WGML_GPT_PARAM_TABLES(EMBED, LAYER, FINAL)                                                                              \
    enum { EMBED(WGML_GPT_PARAM_ID) N_EMBED };                                                                                   \
    enum { LAYER(WGML_GPT_PARAM_ID) N_LAYER };                                                                                   \
    enum { FINAL(WGML_GPT_PARAM_ID) N_FINAL };                                                                                   \
    static const wgml_gpt_param_row embed_rows[] = {EMBED(WGML_GPT_PARAM_ROW)}, layer_rows[] = {LAYER(WGML_GPT_PARAM_ROW)},        \
                                    final_rows[] = {FINAL(WGML_GPT_PARAM_ROW)}

/* One forward pass's settings, as a block sees them. */
typedef struct wgml_gpt_pass {
    int64_t B, T, pos;    /* x is [B,T,C] at positions pos.. */
    wgml_gpt_cache *cache; /* decoding (B = 1), or NULL */
    float dropout;
} wgml_gpt_pass;

struct wgml_gpt_arch_ops {
    const char *name; /* the checkpoint's metadata "arch" */
    /* the parameters: before the layers, of each layer ("h.<l>.<name>"), after them */
    const wgml_gpt_param_row *embed, *layer, *final;
    int n_embed, n_layer, n_final;
    int n_optional; /* the last rows of layer: only with qk_norm (wgml_gpt_layer_params) */
    int64_t (*default_ffn)(int64_t width);
    /* the architecture's own limits on a config (defaults filled): 0, or nonzero and err */
    int (*check)(const wgml_gpt_config *c, char *err, size_t errlen);
    /* ids [B,T] to x [B,T,C]; p: the embedding parameters (p[0] is the tied wte) */
    wgml_tensor *(*embed_ids)(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *ids, const wgml_gpt_pass *s);
    /* layer l on x; p: its parameters in table order */
    wgml_tensor *(*block)(wgml_gpt *g, wgml_tensor *const *p, int64_t l, wgml_tensor *x, const wgml_gpt_pass *s);
    /* the final norm; p: the parameters after the layers */
    wgml_tensor *(*final_norm)(wgml_gpt *g, wgml_tensor *const *p, wgml_tensor *x);
};

extern const wgml_gpt_arch_ops wgml_gpt2_arch, wgml_llama_arch;
/* Parameter i of a resolved config: its architecture's row made a spec (name, shape, init
   rule, and as group its optimiser block: 0 the embeddings, 1 + l layer l, 1 + layers the
   final norm). */
void wgml_gpt_param_spec(const wgml_gpt_config *c, int i, wgml_param_spec *p);
/* The parameters of each layer of a resolved config (the table's, less the QK-norm rows without qk_norm). */
int wgml_gpt_layer_params(const wgml_gpt_config *c);
const wgml_gpt_arch_ops *wgml_gpt_arch_of(wgml_gpt_arch arch); /* NULL: not an architecture */

/* What the blocks share (gpt.c). */
wgml_tensor *wgml_gpt_dropout(wgml_context *ctx, wgml_tensor *x, float p); /* x when p is 0 */
/* x as an activation that only matmuls read: under mixed precision (the context's, set while a
   training step's graph is built) stored as halves by a cast that runs inside x's own kernel
   (a norm's, a fused activation's), so the GEMMs read half the bytes and the saved or
   recomputed operand of a weight's gradient takes half the memory; else x itself */
wgml_tensor *wgml_gpt_matmul_operand(wgml_context *ctx, wgml_tensor *x);
/* Under mixed precision, x stored as halves where its own kernel can store them (a GEMM on
   the matrix units: the MLP's pre-activation, half the memory kept for the backward pass);
   else x */
wgml_tensor *wgml_gpt_half_if_free(wgml_context *ctx, wgml_tensor *x);
/* x @ w[:, from : from + n] (+ b[from : from + n]), read through strides */
wgml_tensor *wgml_gpt_linear_cols(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w, wgml_tensor *b, int64_t from, int64_t n);
/* h @ wqkv (+ bqkv) as the heads q [B,H,T,D], k, v [B,Hkv,T,D] (views); decoding, or with
   `packed` (q, k and v go into the attention as they are), *qkv gets the one joined product
   [B,T,(H+2Hkv)D] whose windows they are */
wgml_status wgml_gpt_qkv(wgml_gpt *g, wgml_tensor *h, wgml_tensor *wqkv, wgml_tensor *bqkv, const wgml_gpt_pass *s,
                         bool packed, wgml_tensor *part[3], wgml_tensor **qkv);
/* Causal attention of heads q [B,H,T,D], k, v [B,Hkv,T,D], merged back to [B,T,C]. Decoding,
   k and v join layer l's cache (from qkv's columns, a view, when qkv is given: keys that were
   not rotated); otherwise a qkv given is the tensor q, k and v are windows of, which then
   takes their gradient as one (wgml_attention_desc.packed). */
wgml_tensor *wgml_gpt_attend(wgml_gpt *g, int64_t l, wgml_tensor *q, wgml_tensor *k, wgml_tensor *v, wgml_tensor *qkv,
                             const wgml_gpt_pass *s);

#endif
