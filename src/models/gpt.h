/*
 * Decoder-only transformers written against the public API (wgml.h) alone: the proof that
 * wgml.h carries a transformer. Two architectures:
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

#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

typedef enum wgml_gpt_arch { WGML_GPT_GPT2 = 0, WGML_GPT_LLAMA = 1 } wgml_gpt_arch;

typedef struct wgml_gpt_config {
    wgml_gpt_arch arch;
    int64_t vocab;    /* V, tokens */
    int64_t block;    /* the longest context (GPT-2's position table) */
    int64_t layers;
    int64_t heads;    /* H */
    int64_t kv_heads; /* Hkv, divides H (Llama; GPT-2: = H); 0 means H */
    int64_t width;    /* C = H * D */
    int64_t ffn;      /* F, the MLP's hidden width; 0 means 4C (GPT-2) or 8C/3 rounded up to a
                         multiple of 32 (Llama) */
    float dropout;    /* in [0, 1) */
    float rope_base;  /* 0 means 10000 */
    float norm_eps;   /* 0 means 1e-5 */
} wgml_gpt_config;

#define WGML_GPT_MAX_LAYERS 256
#define WGML_GPT_NAME 48

/* The config with its zeros replaced by the defaults; checks every field (a message names
   the one out of range, e.g. "heads = 5 does not divide width = 32"). */
wgml_status wgml_gpt_config_resolve(const wgml_gpt_config *in, wgml_gpt_config *out, char *err, size_t errlen);

/* The parameter count of a resolved config, and parameter i's name, dims and shape. */
int wgml_gpt_param_count(const wgml_gpt_config *cfg);
void wgml_gpt_param_info(const wgml_gpt_config *cfg, int i, char name[WGML_GPT_NAME], int *ndim, int64_t shape[2]);
int64_t wgml_gpt_numel(const wgml_gpt_config *cfg); /* all parameters' elements */

typedef struct wgml_gpt {
    wgml_context *ctx;
    wgml_gpt_config cfg; /* resolved */
    int n_params;
    wgml_tensor **params; /* in the order above */
    int *slot_param;      /* the parameter of each optimiser slot (wgml_gpt_optimizer_param) */
} wgml_gpt;

/* A model with parameters from host data (params[i] has parameter i's elements), or
   initialised on the GPU from seed (wgml_manual_seed(seed) first: the context's generator
   moves on). A config that wgml_gpt_config_resolve refuses is WGML_ERROR_INVALID_ARGUMENT:
   resolve it first for the message. */
wgml_status wgml_gpt_create(wgml_context *ctx, const wgml_gpt_config *cfg, const float *const *params, wgml_gpt *out);
wgml_status wgml_gpt_init(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt *out);
void wgml_gpt_free(wgml_gpt *g); /* safe on a zeroed or freed struct */

/* Lazy: logits [B*T, V] for ids [B,T] (i32), T <= block; dropout p (0 in evaluation). */
wgml_tensor *wgml_gpt_logits(wgml_gpt *g, wgml_tensor *ids, float dropout);
/* Lazy: the mean cross-entropy of targets [B,T] (i32) given ids [B,T]. */
wgml_tensor *wgml_gpt_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float dropout);

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

/* Lazy: the next token's logits [1,V] after ids [1,T] (i32) at positions c->len ..
   c->len + T - 1 (at most block in all; NULL otherwise). */
wgml_tensor *wgml_gpt_decode_logits(wgml_gpt *g, wgml_gpt_cache *c, wgml_tensor *ids);

/* Lazy: a token drawn from logits [1,V] (i32 [1]), on the GPU: temperature 0 (or below 1e-4,
   or NaN) takes the argmax; otherwise the top_k largest logits (top_k 0 or >= V: all; ties at the k-th value
   are all kept) divided by temperature, sampled by the Gumbel-max trick from the context's
   generator (wgml_rand). */
wgml_tensor *wgml_gpt_sample_logits(wgml_context *ctx, wgml_tensor *logits, float temperature, int64_t top_k);

/* One generation step in one submit: feeds ids (n >= 1 tokens) to the cache, draws the next
   token and reads back only its id. When the cache would pass the block, it restarts from
   the last block / 2 tokens of `history` (n_history of them, the ids so far, the new ones
   included), as a sliding window. */
wgml_status wgml_gpt_generate_step(wgml_gpt *g, wgml_gpt_cache *c, const int32_t *history, int64_t n_history,
                                   int64_t n_new, float temperature, int64_t top_k, int32_t *token);

/* AdamW over the model's parameters (above). */
typedef struct wgml_gpt_train_desc {
    float lr, weight_decay, max_grad_norm;
    float beta1, beta2; /* 0 means 0.9, 0.99 */
    wgml_lr_schedule schedule;
} wgml_gpt_train_desc;
wgml_status wgml_gpt_optimizer(wgml_gpt *g, const wgml_gpt_train_desc *d, wgml_optimizer **out);
/* The model's parameter index of optimiser slot i. */
int wgml_gpt_optimizer_param(const wgml_gpt *g, int slot);

/* One training step, one submit: the loss of targets given ids with the config's dropout,
   its gradients, the optimiser's update; *loss is the batch's loss before the update. */
wgml_status wgml_gpt_train_step(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets, float *loss);
/* The same, submitted without waiting: *loss is the loss tensor (evaluated with the step;
   the caller reads and frees it). Steps submitted one after another queue on the GPU while
   the host builds the next, so a trainer that reads the losses every few steps keeps the
   GPU busy through the host's work. */
wgml_status wgml_gpt_train_step_submit(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets,
                                       wgml_tensor **loss);
/* The loss without dropout or gradients. */
wgml_status wgml_gpt_eval_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float *loss);

#endif
