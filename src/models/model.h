/*
 * A model as a table of named parameters, and its checkpoints: what the GPT (gpt.c over
 * gpt2.c / llama.c) and the MLP (mlp.c) share.
 *
 * A model file gives its parameter table (wgml_param_spec: name, shape, initial values) and
 * its forward pass; this module makes the tensors, writes and reads checkpoints and checks
 * them. A checkpoint is one safetensors file (written atomically) holding
 *   - every parameter under its name (F32, its shape);
 *   - optionally the AdamW moments "<name>.m" and "<name>.v" (the parameter's shape), all or
 *     none: those of optimiser slot s belong to parameter slot_param[s];
 *   - the extra tensors the model names (the GPT's "vocab");
 *   - metadata (text), written and read through a table of fields (wgml_meta_field).
 * Reading checks everything before use: each tensor F32 and of the table's shape, each
 * weight finite, each moment finite and each second moment not negative, nothing missing,
 * nothing that is not the model's; each metadata value strictly parsed and in range.
 */
#ifndef WGML_MODELS_MODEL_H
#define WGML_MODELS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "wgml.h"

#define WGML_PARAM_NAME 48 /* room for a parameter's name (= WGML_GPT_NAME) */

typedef enum wgml_init_rule {
    WGML_INIT_ZEROS,
    WGML_INIT_ONES,
    WGML_INIT_NORMAL,  /* normal(0, scale), drawn on the GPU from the context's generator,
                          which wgml_model_create seeds with `seed` first */
    WGML_INIT_UNIFORM, /* uniform(-scale, scale), drawn on the host from one splitmix64
                          stream seeded with `seed`, the parameters in table order */
} wgml_init_rule;

typedef struct wgml_param_spec {
    char name[WGML_PARAM_NAME];
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* shape[1] is 0 for 1-D */
    wgml_init_rule init;
    double scale; /* NORMAL: the deviation; UNIFORM: the bound */
    int group;    /* the model's own grouping (the GPT: its optimiser block) */
} wgml_param_spec;

static inline int64_t wgml_param_numel(const wgml_param_spec *p) { return p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1); }

typedef struct wgml_model {
    wgml_context *ctx;
    int n;
    wgml_param_spec *spec; /* n entries, owned */
    wgml_tensor **params;  /* n entries, owned */
} wgml_model;

/* The tensors of the table spec[0..n-1]: parameter i from data[i] (host values) where data
   and data[i] are given, else by its init rule. spec is copied. */
wgml_status wgml_model_create(wgml_context *ctx, int n, const wgml_param_spec *spec, const float *const *data, uint64_t seed,
                              wgml_model *out);
void wgml_model_free(wgml_model *m); /* safe on a zeroed or freed struct */

/* ---------------------------------------------------------------- metadata */

typedef enum wgml_meta_kind { WGML_META_I64, WGML_META_I32, WGML_META_U64, WGML_META_F32 } wgml_meta_kind;

/* A metadata value: its key, where it lives (bases[base] + offset), its kind and range (U64:
   any), and whether it may be absent: 0 required, else the bit a reader sets in *stored. */
typedef struct wgml_meta_field {
    const char *key;
    int base;
    size_t offset;
    wgml_meta_kind kind;
    double lo, hi;
    unsigned optional;
} wgml_meta_field;

#define WGML_META_TEXT 64 /* room for one value's text */

/* Appends each field's key and text (text[k], WGML_META_TEXT each) at keys/vals[*count]. */
void wgml_meta_write(const wgml_meta_field *fields, int n, void *const *bases, char (*text)[WGML_META_TEXT], const char **keys,
                     const char **vals, int *count);
/* Parses each field from f's metadata into its place; a missing required one, or a value that
   does not parse or is out of range, is WGML_ERROR_FORMAT naming path, the key and the text.
   stored (may be NULL) gets the bits of the optional fields present. */
wgml_status wgml_meta_read(wgml_context *ctx, const char *path, const wgml_st_file *f, const wgml_meta_field *fields, int n,
                           void *const *bases, unsigned *stored);

/* ---------------------------------------------------------------- checkpoints */

/* Writes m's parameters, opt's moments (when opt is given; slot s is parameter slot_param[s],
   or s when slot_param is NULL), the extra tensors and the metadata to path. Errors leave
   m->ctx's message. */
wgml_status wgml_model_save(const wgml_model *m, const char *path, wgml_optimizer *opt, const int *slot_param,
                            const wgml_st_tensor *extra, int n_extra, const char *const *keys, const char *const *vals,
                            int n_meta);

/* The safetensors file at path into f (a checkpoint's first step); a file that cannot be read
   leaves the reader's message in ctx. */
wgml_status wgml_model_read_file(wgml_context *ctx, const char *path, wgml_st_file *f);

/* Checks f (read from path) against the table: see the top of this file. why says where the
   shapes come from (in the message of a tensor of another shape); extra names the tensors the
   caller checks itself. *has_moments: whether the moments are there. */
wgml_status wgml_model_check_file(wgml_context *ctx, const char *path, const wgml_st_file *f, int n, const wgml_param_spec *spec,
                                  const char *why, const char *const *extra, int n_extra, int *has_moments);

/* The model of a file that passed wgml_model_check_file. */
wgml_status wgml_model_from_file(wgml_context *ctx, const wgml_st_file *f, int n, const wgml_param_spec *spec, wgml_model *out);

/* The moments of a checked file into opt (slot s: parameter slot_param[s], or s), each
   checked against its slot's shape once more (WGML_ERROR_SHAPE), and the step. A file
   without moments is WGML_ERROR_FORMAT: it cannot resume a run. */
wgml_status wgml_model_restore_optimizer(wgml_context *ctx, const wgml_st_file *f, int has_moments, int n,
                                         const wgml_param_spec *spec, const int *slot_param, wgml_optimizer *opt, int64_t step);

/* AdamW moments read from path: every value finite, and a second moment (second != 0) never
   negative; else WGML_ERROR_FORMAT naming the tensor and element, so that a corrupt file is
   refused when read rather than at the first step. */
wgml_status wgml_check_moment(wgml_context *ctx, const char *path, const wgml_st_tensor *t, int second);

/* splitmix64, for reproducible initialisation and shuffling */
uint64_t wgml_rng_next(uint64_t *state);
double wgml_rng_uniform(uint64_t *state); /* [0, 1) */

#endif
