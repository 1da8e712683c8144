/*
 * The GPT models of src/models/gpt.h on the CPU in double precision: forward, backward by
 * hand, AdamW and greedy generation, for tests to check the GPU model step by step. No
 * dropout. Layers are plain functions (forward and backward side by side) in gpt_ref.c.
 */
#ifndef WGML_TESTS_GPT_REF_H
#define WGML_TESTS_GPT_REF_H

#include <stdint.h>

#include "models/gpt.h"

typedef struct gpt_ref gpt_ref;

/* A model of cfg (resolved here with wgml_gpt_config_resolve; NULL if that refuses it or
   memory runs out) whose parameter i starts as params[i] (its elements in gpt.h's order and
   shapes, wgml_gpt_param_info), widened to double. AdamW's moments start at zero. */
gpt_ref *gpt_ref_create(const wgml_gpt_config *cfg, const float *const *params);
void gpt_ref_free(gpt_ref *r); /* NULL is fine */

/* The mean cross-entropy over the B*T positions of targets given ids (both [B,T] row-major,
   T <= block, tokens in [0, vocab)); NaN on bad arguments. with_grad: also every parameter's
   gradient (overwriting the previous ones). */
double gpt_ref_loss(gpt_ref *r, const int32_t *ids, const int32_t *targets, int B, int T, int with_grad);

/* One AdamW step from the gradients of the last gpt_ref_loss(with_grad), as
   wgml_gpt_optimizer and kernels/optim.wgsl do it: returns the global gradient norm (over
   all parameters, before clipping); scale = min(1, max_grad_norm / (norm + 1e-6)) when
   max_grad_norm > 0; lr = wgml_lr_at(&d->schedule, d->lr, steps_taken); t = steps_taken + 1;
   betas (0 means 0.9, 0.99) and eps 1e-8 taken as the floats the GPU gets; weight decay for
   the 2-D parameters only:
     g = scale grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
   The gradients are left as they are. */
double gpt_ref_adamw_step(gpt_ref *r, const wgml_gpt_train_desc *d, int64_t steps_taken);

/* The logits of every position for ids [1, T] (T <= block): logits is [T, V]. */
void gpt_ref_logits(gpt_ref *r, const int32_t *ids, int T, double *logits);

/* Greedy decoding: out[0..n_prompt) = prompt, then n_new times the argmax (the first of
   equal maxima) of the last position's logits, the context being the last `block` tokens;
   out has n_prompt + n_new entries. n_prompt >= 1. */
void gpt_ref_greedy(gpt_ref *r, const int32_t *prompt, int n_prompt, int n_new, int32_t *out);

/* For tests: parameter i's values, gradient, and AdamW moments (which 0: m, 1: v), each with
   wgml_gpt_param_info's element count; NULL for a bad i. Writable. */
double *gpt_ref_param(gpt_ref *r, int i);
double *gpt_ref_grad(gpt_ref *r, int i);
double *gpt_ref_moment(gpt_ref *r, int i, int which);
/* The resolved config and the parameter count, and parameter i's element count. */
const wgml_gpt_config *gpt_ref_config(const gpt_ref *r);
int gpt_ref_param_count(const gpt_ref *r);
int64_t gpt_ref_numel(const gpt_ref *r, int i);

#endif
