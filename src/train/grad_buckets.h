/*
 * Gradients handed over in buckets as the backward pass finishes them (train/optim.c), for
 * data parallelism (train/dist.c) to reduce one bucket while the GPU computes the next.
 * Private to the library.
 */
#ifndef WGML_TRAIN_GRAD_BUCKETS_H
#define WGML_TRAIN_GRAD_BUCKETS_H

#include <stdbool.h>

#include "wgml.h"

struct wgml_buffer;

typedef struct wgml_grad_buckets {
    /* a bucket is whole parameters from the last one back, at least this many floats (one
       parameter larger than that is a bucket of its own) */
    int64_t bucket_floats;
    /* after the kernels of a bucket's gradients are submitted (not waited for): floats
       [from, from + count) of the flat gradient buffer G hold them once those kernels ran.
       Buckets come from the end of G to its start. */
    wgml_status (*ready)(wgml_context *ctx, struct wgml_buffer *G, int64_t from, int64_t count, void *user);
    /* after the last bucket: returns once G holds every bucket's result (queue writes, which
       the update's submit follows). Called after a failure too, with it in st, to wait for
       what is in flight. */
    wgml_status (*finish)(wgml_context *ctx, struct wgml_buffer *G, wgml_status st, void *user);
    void *user;
    /* finish, the norm and the update wait until something needs them (a read of the
       parameters or moments, a write into them), or until the next step's first bucket,
       which encodes the update and itself first, then calls finish and submits both (the GPU
       then waits for no host work between the steps). wgml_optimizer_steps and _lr count such
       a step as taken. */
    bool defer;
} wgml_grad_buckets;

/* Replaces the grad hook's one evaluation of every gradient with one per bucket; NULL goes
   back to the hook. Each bucket's evaluation also keeps the results that later buckets will
   read (the forward's activations, the gradient flowing back), so nothing runs twice. */
wgml_status wgml_optimizer_set_grad_buckets(wgml_optimizer *opt, const wgml_grad_buckets *buckets);

#endif
