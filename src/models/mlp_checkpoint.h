/*
 * Training checkpoints, as `wgml train` writes and `wgml train --resume` and `wgml eval` read
 * them: one safetensors file holding an MLP's parameters, its AdamW moments, and in the
 * metadata the step, the epoch, the layer sizes and the settings a resume needs to continue
 * exactly where the run stopped.
 *
 * Tensors, for each layer l: W<l> [sizes[l], sizes[l+1]] and b<l> [sizes[l+1]]; for each
 * parameter X of them, X.m and X.v (first and second moments, the shape of X).
 * Metadata (text): step, epoch, sizes ("784,256,10"), seed, lr, weight_decay,
 * max_grad_norm, batch, ranks (absent in older files: 1).
 *
 * Written, read and checked by models/model.h with the MLP's parameter table: everything
 * read from a file is checked before use (each tensor against the shape the reader expects,
 * weights and moments finite, each metadata value by strict parsing and a range). Errors are
 * statuses with the context's message naming the file, the tensor or key, and what was wrong.
 */
#ifndef WGML_MODELS_MLP_CHECKPOINT_H
#define WGML_MODELS_MLP_CHECKPOINT_H

#include <stddef.h>

#include "io/safetensors.h"
#include "models/mlp.h"
#include "models/model.h"

/* What a training run is started with, beyond the model's shape. */
typedef struct wgml_train_settings {
    uint64_t seed;       /* initial weights and the per-epoch shuffle */
    float lr;            /* > 0 */
    float weight_decay;  /* >= 0 */
    float max_grad_norm; /* >= 0; 0: no clipping */
    int batch;           /* >= 1 */
    int ranks;           /* data-parallel processes of the run (0 is 1); a resume needs as many */
} wgml_train_settings;

/* Bits of wgml_checkpoint.stored: which settings the file holds. Files written before the
   settings were stored hold only the seed, or nothing. */
enum {
    WGML_CK_SEED = 1 << 0,
    WGML_CK_LR = 1 << 1,
    WGML_CK_WEIGHT_DECAY = 1 << 2,
    WGML_CK_MAX_GRAD_NORM = 1 << 3,
    WGML_CK_BATCH = 1 << 4,
};

/* The float settings: metadata key, `wgml train` flag, bit, and place in wgml_train_settings.
   The checkpoint reader and the command line both walk this. */
typedef struct wgml_float_setting {
    const char *key, *flag;
    unsigned bit;
    size_t offset;
} wgml_float_setting;
#define WGML_FLOAT_SETTINGS 3
extern const wgml_float_setting wgml_float_settings[WGML_FLOAT_SETTINGS];
static inline float *wgml_setting_f32(wgml_train_settings *s, const wgml_float_setting *f)
{
    return (float *)((char *)s + f->offset);
}

#define WGML_CK_MAX_EPOCH 1000000000 /* and at most this many epochs */
#define WGML_CK_MAX_BATCH (1 << 24)
#define WGML_CK_MAX_WIDTH (1 << 20) /* a layer's width, as wgml_mlp_create allows */

typedef struct wgml_checkpoint {
    int epoch;      /* epochs completed */
    int64_t step;   /* optimiser steps taken */
    int nlayers;
    int64_t sizes[WGML_MLP_MAX_LAYERS + 1];
    wgml_train_settings settings; /* fields not in `stored` are 0 */
    unsigned stored;              /* WGML_CK_* */
    int has_moments;              /* every X.m and X.v is present */
    wgml_st_file file;            /* the tensors, already checked */
} wgml_checkpoint;

/* Writes m's parameters, opt's moments and step, `epoch` and `settings` to path (atomically:
   see wgml_safetensors_write). m->ctx holds the message on failure. */
wgml_status wgml_checkpoint_save(const char *path, wgml_mlp *m, wgml_optimizer *opt, int epoch,
                                 const wgml_train_settings *settings);

/* Reads and checks path: its metadata (sizes, epoch, step and whichever settings it has),
   and every tensor: W<l>/b<l> must be present with the shapes the sizes give; moments, where
   present, must have their parameter's shape, and must come as a whole set or not at all;
   no other tensor may be there. WGML_ERROR_IO or WGML_ERROR_FORMAT (a corrupt file),
   WGML_ERROR_SHAPE (a tensor of the wrong shape), WGML_ERROR_INVALID_ARGUMENT. On failure
   *out is zeroed. */
wgml_status wgml_checkpoint_read(wgml_context *ctx, const char *path, wgml_checkpoint *out);

/* The MLP the checkpoint's parameters describe. */
wgml_status wgml_checkpoint_mlp(wgml_context *ctx, const wgml_checkpoint *ck, wgml_mlp *out);

/* Copies the moments and the step into opt, an AdamW optimiser over the parameters of
   wgml_checkpoint_mlp's model, in wgml_mlp_params order. Each moment is checked once more
   against the slot it goes to (WGML_ERROR_SHAPE); a checkpoint without moments is
   WGML_ERROR_FORMAT (it cannot resume a run). */
wgml_status wgml_checkpoint_restore_optimizer(wgml_context *ctx, const wgml_checkpoint *ck, wgml_optimizer *opt);

void wgml_checkpoint_free(wgml_checkpoint *ck); /* safe on a zeroed or freed struct */

/* (wgml_check_moment, the moments' check: model.h) */

#endif
