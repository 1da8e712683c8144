/*
 * GPT checkpoints, as `wgml gpt train` writes them and `--resume`, `wgml gpt sample` and
 * bench/torch_gpt.py read them: one safetensors file (written atomically) holding
 *   - every parameter under its gpt.h name (F32, its shape);
 *   - the AdamW moments "<name>.m" and "<name>.v" (the shape of the parameter), all or none;
 *   - "vocab": F32 [V], the byte of each token;
 *   - metadata (text): format "wgml-gpt-1"; the config (arch "gpt2" or "llama", vocab,
 *     block, layers, heads, kv_heads, width, ffn, rope_base, norm_eps, dropout); the step;
 *     the run's settings (seed, lr, min_lr_ratio, warmup, total_steps, weight_decay,
 *     max_grad_norm, beta1, beta2, batch, eval_every, eval_batches, data) and the GPU
 *     generator's state after the step (rng_seed, rng_offset), so that a resumed run draws
 *     the dropout masks the uninterrupted one would; ranks (absent in older files: 1).
 * Written and checked by models/model.h (parameters, moments, metadata table) with the
 * architecture's parameter table: everything read is checked before use (each key strictly
 * parsed and in range, each tensor against the shape the config gives, nothing missing,
 * nothing extra; weights and moments finite, second moments not negative).
 */
#ifndef WGML_MODELS_GPT_CHECKPOINT_H
#define WGML_MODELS_GPT_CHECKPOINT_H

#include "io/safetensors.h"
#include "models/gpt.h"


typedef struct wgml_gpt_checkpoint {
    wgml_gpt_config cfg; /* resolved */
    int64_t step;
    wgml_gpt_run run;
    int vocab_size;
    uint8_t vocab[256];
    int has_moments;
    wgml_st_file file;
} wgml_gpt_checkpoint;

/* opt may be NULL (no moments written). Errors leave ctx's message. */
wgml_status wgml_gpt_checkpoint_save(const char *path, wgml_gpt *g, wgml_optimizer *opt, int64_t step,
                                     const wgml_gpt_run *run, const uint8_t *vocab, int vocab_size);
wgml_status wgml_gpt_checkpoint_read(wgml_context *ctx, const char *path, wgml_gpt_checkpoint *out);
/* The model of a checkpoint read, its parameters uploaded. */
wgml_status wgml_gpt_checkpoint_model(wgml_context *ctx, const wgml_gpt_checkpoint *ck, wgml_gpt *out);
/* Moments and step into opt (from wgml_gpt_optimizer on the checkpoint's model). */
wgml_status wgml_gpt_checkpoint_restore_optimizer(const wgml_gpt_checkpoint *ck, wgml_gpt *g, wgml_optimizer *opt);
void wgml_gpt_checkpoint_free(wgml_gpt_checkpoint *ck); /* safe on a zeroed or freed struct */
/* The public handle (wgml_gpt_load) of a checkpoint read: its model, vocabulary, step, run. */
wgml_status wgml_gpt_from_checkpoint(wgml_context *ctx, const wgml_gpt_checkpoint *ck, wgml_gpt **out);

#endif
