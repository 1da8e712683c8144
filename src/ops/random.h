/* Random ops (ops/random.c): the kernel builder that the op table's RAND, RANDN and
   DROPOUT entries point at, and dropout's mask applied again (its gradient). */
#ifndef WGML_OPS_RANDOM_H
#define WGML_OPS_RANDOM_H

#include "core/context.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_RANDOM_OPS(X) X(RAND) X(RANDN) X(DROPOUT)

/* a random node's parameters: the generator's seed, the block offset of its first element and
   its stream (dropout's gradient replays them), and two numbers: lo, hi (rand), mean, std
   (randn) or p (dropout) */
typedef struct wgml_random_params {
    uint64_t seed, offset;
    uint32_t stream;
    float a, b;
} wgml_random_params;
WGML_OP_PARAMS(wgml_random_params, wgml_random_params_of)

struct wgml_launch;
/* t [n] -> one launch of ops/random.wgsl, a thread per Philox block of 4 elements */
wgml_status wgml_build_random(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
/* g (dropout node t's shape) through t's mask and scale: the same counters as t, none new */
wgml_tensor *wgml_dropout_like(wgml_context *ctx, wgml_tensor *g, const wgml_tensor *t);

#endif
