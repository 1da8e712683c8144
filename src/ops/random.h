/* Random ops (ops/random.c): the kernel builder that the op table's RAND, RANDN and
   DROPOUT entries point at, and dropout's mask applied again (its gradient). */
#ifndef WGML_OPS_RANDOM_H
#define WGML_OPS_RANDOM_H

#include "core/context.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_RANDOM_OPS(X) X(RAND) X(RANDN) X(DROPOUT)

struct wgml_launch;
/* t [n] -> one launch of ops/random.wgsl, a thread per Philox block of 4 elements */
wgml_status wgml_build_random(wgml_context *ctx, wgml_tensor *t, struct wgml_launch *l, int *count);
/* g (dropout node t's shape) through t's mask and scale: the same counters as t, none new */
wgml_tensor *wgml_dropout_like(wgml_context *ctx, wgml_tensor *g, const wgml_tensor *t);

#endif
