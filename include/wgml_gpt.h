/*
 * wgml_gpt.h — decoder-only transformers (GPT-2 and Llama/Qwen) on wgml, the model that
 * `wgml gpt` trains and samples: make one from a config or load a checkpoint, train it, evaluate
 * it, sample from it, save it. Written over wgml.h, which it includes; the same conventions
 * (statuses and wgml_error_message of the model's context, lazy tensors, zero = default).
 *
 * The architectures:
 *   GPT-2 (WGML_GPT_GPT2): learned positions, pre-norm layernorm blocks, exact-GELU MLP,
 *     biases, the output head tied to the token embedding.
 *   Llama/Qwen (WGML_GPT_LLAMA): RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no
 *     biases, the head tied to the embedding.
 * Tokens are bytes: a model of vocab V reads and writes token ids 0..V-1, and its vocabulary
 * (wgml_gpt_vocab) gives the byte of each, as `wgml gpt train` builds it from a text (the
 * bytes that occur, in increasing order).
 *
 * Checkpoints are safetensors files: the parameters under their names (wgml_gpt_param_info),
 * optionally the AdamW moments, the vocabulary, and metadata (format "wgml-gpt-1", the config,
 * the step, the training settings). Reading checks everything before use.
 */
#ifndef WGML_GPT_H
#define WGML_GPT_H

#include "wgml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wgml_gpt_arch { WGML_GPT_GPT2 = 0, WGML_GPT_LLAMA = 1 } wgml_gpt_arch;

typedef struct wgml_gpt_config {
    wgml_gpt_arch arch;
    int64_t vocab;    /* V, tokens (at most 256 for a checkpoint: one byte each) */
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
    int64_t head_dim; /* D, each head's size; 0 means C / H. Llama may set another (Qwen3-0.6B:
                         128 at width 1024 with 16 heads): attn.wo is then [H D, C] */
    int64_t qk_norm;  /* Llama: 1 = an RMSNorm (weights [D], eps norm_eps) on each query and key
                         head before RoPE (Qwen3); 0 none */
} wgml_gpt_config;

#define WGML_GPT_MAX_LAYERS 256
#define WGML_GPT_NAME 48 /* room for a parameter's name */

/* The config with its zeros replaced by the defaults; checks every field (err gets a message
   naming the one out of range, e.g. "heads = 5 does not divide width = 32"). */
WGML_API wgml_status wgml_gpt_config_resolve(const wgml_gpt_config *in, wgml_gpt_config *out, char *err, size_t errlen);
/* The parameter count of a resolved config, parameter i's name, dims and shape, and the
   number of all parameters' elements (a NULL config: 0 and an empty name; sizes an unresolved
   config leaves 0 count 0; NULL outputs are skipped). */
WGML_API int wgml_gpt_param_count(const wgml_gpt_config *cfg);
WGML_API void wgml_gpt_param_info(const wgml_gpt_config *cfg, int i, char name[WGML_GPT_NAME], int *ndim, int64_t shape[2]);
WGML_API int64_t wgml_gpt_numel(const wgml_gpt_config *cfg);

/* ---------------------------------------------------------------- the model */

typedef struct wgml_gpt wgml_gpt;

/* A new model of cfg, its weights initialised on the GPU from seed (GPT-2's scheme: normal(0,
   0.02), the residual projections scaled by 1/sqrt(2 layers), biases 0, norm weights 1); the
   context's generator is left at (seed, after the draws). Its vocabulary is bytes 0..V-1
   until wgml_gpt_set_vocab. A bad config is WGML_ERROR_INVALID_ARGUMENT naming the field. */
WGML_API wgml_status wgml_gpt_new(wgml_context *ctx, const wgml_gpt_config *cfg, uint64_t seed, wgml_gpt **out);
/* The model of a checkpoint (`wgml gpt train`'s or wgml_gpt_save's): its config, weights,
   vocabulary and step; the optimiser moments stay in the file (wgml_gpt_load_optimizer).
   WGML_ERROR_IO if the file cannot be read, WGML_ERROR_FORMAT (or _SHAPE) naming what is wrong
   with it otherwise. */
WGML_API wgml_status wgml_gpt_load(wgml_context *ctx, const char *path, wgml_gpt **out);
/* Writes g to path atomically (a crash leaves the old file or the new one): with opt (made by
   wgml_gpt_optimizer on g) its moments and step, so training can go on from the file; NULL
   writes the weights only, with wgml_gpt_step(g). */
WGML_API wgml_status wgml_gpt_save(wgml_gpt *g, const char *path, wgml_optimizer *opt);
/* The moments and step of the checkpoint at path into opt (made by wgml_gpt_optimizer on g,
   a model of the same config): resuming training. A file without moments is
   WGML_ERROR_FORMAT; another config WGML_ERROR_SHAPE. */
WGML_API wgml_status wgml_gpt_load_optimizer(wgml_gpt *g, const char *path, wgml_optimizer *opt);
WGML_API void wgml_gpt_delete(wgml_gpt *g); /* NULL is ignored; its tensors are freed; before its context */

WGML_API wgml_context *wgml_gpt_context(const wgml_gpt *g);
WGML_API wgml_status wgml_gpt_get_config(const wgml_gpt *g, wgml_gpt_config *cfg); /* resolved */
/* The step of the checkpoint g was loaded from (0 for a new model); wgml_gpt_save with an
   optimiser records the optimiser's. */
WGML_API int64_t wgml_gpt_step(const wgml_gpt *g);
/* The parameters (borrowed: freed with g), in wgml_gpt_param_info's order; *n gets their count. */
WGML_API wgml_tensor *const *wgml_gpt_params(const wgml_gpt *g, int *n);
/* The vocabulary: *bytes (valid while g lives) gets the byte of each token; returns V. A model
   of more than 256 tokens has no byte vocabulary (its tokens are ids): *bytes is NULL. */
WGML_API int wgml_gpt_vocab(const wgml_gpt *g, const uint8_t **bytes);
/* Sets it: n = V distinct bytes in increasing order (what a checkpoint holds). */
WGML_API wgml_status wgml_gpt_set_vocab(wgml_gpt *g, const uint8_t *bytes, int n);
/* Sets the config's dropout, p in [0, 1), which training steps use from then on (fine-tuning
   a loaded model with another rate); saved with the model. */
WGML_API wgml_status wgml_gpt_set_dropout(wgml_gpt *g, float p);

/* ---------------------------------------------------------------- computing */

/* Lazy: logits [B*T, V] for ids [B,T] (i32), T <= block; dropout p (0 in evaluation). */
WGML_API wgml_tensor *wgml_gpt_logits(wgml_gpt *g, wgml_tensor *ids, float dropout);
/* Lazy: the mean cross-entropy of targets [B,T] (i32) given ids [B,T]. */
WGML_API wgml_tensor *wgml_gpt_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float dropout);
/* Evaluation: the loss without dropout or gradients (one submit, waits for it). exp(loss) is
   the perplexity. */
WGML_API wgml_status wgml_gpt_eval_loss(wgml_gpt *g, wgml_tensor *ids, wgml_tensor *targets, float *loss);

/* ---------------------------------------------------------------- training */

/* AdamW over the model's parameters: the 2-D ones with weight decay, the 1-D ones without;
   betas 0 mean 0.9 and 0.99. The schedule as wgml_optimizer_set_schedule's (zeroed: constant). */
typedef struct wgml_gpt_train_desc {
    float lr, weight_decay, max_grad_norm;
    float beta1, beta2;
    wgml_lr_schedule schedule;
    /* WGML_PRECISION_MIXED: the training steps' matmuls (forward and backward) take f16
       operands with f32 sums (wgml_set_compute_precision), the activations that only matmuls
       read (the norms' outputs, the GELU's or SwiGLU's) are stored as f16, everything else, the
       weights and the optimiser stay f32, and the loss is scaled dynamically (loss_scaling;
       zeroed: GradScaler's defaults). Needs shader-f16. F32 (0): as before. */
    wgml_precision precision;
    wgml_loss_scaling loss_scaling;
} wgml_gpt_train_desc;
/* The optimiser for g (free it with wgml_optimizer_free before g). */
WGML_API wgml_status wgml_gpt_optimizer(wgml_gpt *g, const wgml_gpt_train_desc *d, wgml_optimizer **out);
/* One training step, one submit: the loss of targets [B,T] given ids [B,T] with the config's
   dropout, its gradients, the optimiser's update; *loss is the batch's loss before the update.
   A failure leaves the model and optimiser as they were (no gradients kept, no step counted),
   except where the step was taken and only its loss could not be read back (the message says
   so, and wgml_optimizer_steps has counted it), and with data parallelism's deferred steps,
   where ending the previous step may fail and lose its update (the message says so too). */
WGML_API wgml_status wgml_gpt_train_step(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets, float *loss);
/* The same, submitted without waiting: *loss is the loss tensor (evaluated with the step; the
   caller reads and frees it). Steps submitted back to back queue on the GPU while the host
   builds the next, so a loop that reads the losses every few steps keeps the GPU busy. */
WGML_API wgml_status wgml_gpt_train_step_submit(wgml_gpt *g, wgml_optimizer *opt, wgml_tensor *ids, wgml_tensor *targets,
                                                wgml_tensor **loss);

/* ---------------------------------------------------------------- sampling */

/* How tokens are drawn. Zeroed: greedy (the argmax). */
typedef struct wgml_gpt_sample_desc {
    float temperature; /* 0 (or below 1e-4): the argmax; else logits / temperature */
    int64_t top_k;     /* 0: every token; else only the top_k largest logits (ties kept) */
    float top_p;       /* 0 or 1: every token (of top_k); else nucleus sampling: only the fewest
                          likeliest tokens whose probabilities reach top_p (at temperature >=
                          1e-4), drawn on the host (each token's logits read back) by u, the
                          number a 1-element wgml_rand would draw at the context's generator
                          state, which then moves on by one block */
    int f16_weights;   /* 1: the decode plan (below) keeps its matrices as f16, half the bytes a
                          token reads (f32 sums; the logits within f16's rounding of the weights):
                          Qwen3-0.6B's shape 0.995-1.018 ms a token against 1.188-1.301 on an H200
                          (docs/MEASUREMENTS.md, 2026-11-29); 0: f32 */
} wgml_gpt_sample_desc;

/* Lazy: a token drawn from logits [1,V] (i32 [1]) on the GPU, by the Gumbel-max trick from the
   context's generator (wgml_manual_seed makes it repeatable). */
WGML_API wgml_tensor *wgml_gpt_sample_logits(wgml_context *ctx, wgml_tensor *logits, float temperature, int64_t top_k);

/* Called with each new token; a nonzero return stops the generation (with WGML_OK). */
typedef int (*wgml_gpt_token_fn)(int32_t token, void *user);

/* Continues prompt (n_prompt >= 1 token ids) by n_new tokens: a KV cache on the GPU. Greedy or
   plain temperature sampling on a GPU runs the decode plan (no graph per token; up to 16 tokens
   a submit, two submits in flight, only the ids read back); top-k, top-p and CPU adapters a
   graph per token. Past the block the cache restarts from the last block / 2 tokens (a sliding
   window). out (room for n_new, or NULL) gets the tokens, on_token (or NULL) sees each as it
   comes (a stop drops the tokens the GPU had drawn past it). */
WGML_API wgml_status wgml_gpt_generate(wgml_gpt *g, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                                       const wgml_gpt_sample_desc *desc, int32_t *out, wgml_gpt_token_fn on_token,
                                       void *user);

/* Continues n_seq prompts together by n_new tokens each: prompts[s] holds n_prompts[s] >= 1
   token ids, and out (room for n_seq x n_new) gets sequence s's tokens at out[s * n_new]. On a
   GPU one decode plan steps 8 sequences at once (a KV cache each, at its own length; past the
   block each slides as wgml_gpt_generate's; fewer where 8 caches pass the adapter's limits or
   memory), the rest in turns on the same plan: on an H200, Qwen3-0.6B's shape made 3,269 tokens
   a second so against 982 one prompt at a time (docs/MEASUREMENTS.md). Greedy tokens are each
   prompt's own wgml_gpt_generate's up to rounding (the batch's sums go in another order, so a
   near-tie between two logits may go the other way); at a temperature they are a draw from the
   context's generator (wgml_manual_seed repeats it), another than wgml_gpt_generate's. With
   top_k or top_p at a temperature, on a CPU adapter (where one prompt at a time is the faster),
   or where the plan does not take the model even at one slot, each prompt goes through
   wgml_gpt_generate in turn. */
WGML_API wgml_status wgml_gpt_generate_batch(wgml_gpt *g, int64_t n_seq, const int32_t *const *prompts, const int64_t *n_prompts,
                                             int64_t n_new, const wgml_gpt_sample_desc *desc, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* WGML_GPT_H */
