/*
 * A multilayer perceptron for classification: hidden layers matmul + bias + relu (one fused
 * GEMM epilogue each), a linear last layer, softmax cross-entropy. Used by `wgml train`,
 * `wgml eval` and the parity gate. Its parameters are a models/model.h table (W<l>, b<l>);
 * its checkpoints: mlp_checkpoint.h.
 */
#ifndef WGML_MODELS_MLP_H
#define WGML_MODELS_MLP_H

#include "models/model.h"
#include "wgml.h"

#define WGML_MLP_MAX_LAYERS 7

typedef struct wgml_mlp {
    wgml_context *ctx;
    int nlayers;
    int64_t sizes[WGML_MLP_MAX_LAYERS + 1];
    wgml_model m;                        /* the parameters W0, b0, W1, ... (owned) */
    wgml_tensor *W[WGML_MLP_MAX_LAYERS]; /* [sizes[l], sizes[l+1]]: m.params[2l] (borrowed) */
    wgml_tensor *b[WGML_MLP_MAX_LAYERS]; /* [sizes[l+1]]: m.params[2l+1] (borrowed) */
} wgml_mlp;

/* The parameter table of these sizes (2 * nlayers rows: W0, b0, W1, ...; the initial values
   U(-1/sqrt(fan_in), 1/sqrt(fan_in))); 0, or -1 when a size is outside 1..2^20. */
int wgml_mlp_table(int nlayers, const int64_t *sizes, wgml_param_spec *spec);

/* Weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from `seed` (PyTorch's Linear
   default), or copied from W_init/b_init when given (host arrays per layer). */
wgml_status wgml_mlp_create(wgml_context *ctx, int nlayers, const int64_t *sizes, uint64_t seed,
                            const float *const *W_init, const float *const *b_init, wgml_mlp *out);
void wgml_mlp_free(wgml_mlp *m);
/* The parameters in order W0, b0, W1, b1, ...; returns their count. */
int wgml_mlp_params(wgml_mlp *m, wgml_tensor **params);
/* x [B, sizes[0]] -> logits [B, sizes[nlayers]] (lazy) */
wgml_tensor *wgml_mlp_forward(wgml_mlp *m, wgml_tensor *x);
/* Number of rows whose argmax equals the label, as a lazy [1] tensor. */
wgml_tensor *wgml_count_correct(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels);
/* One training step (forward, backward, clipping, update: one submit) and the batch's loss
   and correct count (one read). */
wgml_status wgml_mlp_train_step(wgml_mlp *m, wgml_optimizer *opt, wgml_tensor *x, wgml_tensor *labels,
                                float *loss, float *correct);

/* (splitmix64, wgml_rng_next, for the initialisation and the shuffle: model.h) */

#endif
