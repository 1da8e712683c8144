/*
 * The data-parallel state that train/dist.c (the process's ranks and the collectives of
 * wgml.h) and train/dist_overlap.c (the overlapped all-reduce of a training step's gradient
 * buckets) share, and the helpers each gives the other. Private to the library.
 */
#ifndef WGML_TRAIN_DIST_STATE_H
#define WGML_TRAIN_DIST_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wgml.h"
#include "runtime/settings.h"
#include "train/dist_shm.h"

typedef struct wgml_dist_state {
    int started;     /* wgml_dist_init ran */
    int mpi;         /* collectives go through MPI (more than one rank) */
    int owns_mpi;    /* we called MPI_Init, so we call MPI_Finalize */
    int mpi_thread;  /* MPI may be called from a thread other than the main one */
    int inline_mpi;  /* data parallel's MPI calls on the calling thread (settings: dist_inline) */
    int rank, size, local_rank, local_size;
    float *stage[2]; /* host buckets, alternating between copy-out and reduction */
    size_t stage_cap;
    wgml_dist_stats stats;
    char error[512];
    wgml_launch_settings launch; /* the launcher's variables, read at each wgml_dist_init */
    /* the shared-memory reduction (dist_shm.h), set up at the first reduction that wants it */
    wgml_shm *shm;
    int shm_state; /* 0 not tried, 1 ready, -1 not available (ranks on several machines, no room) */
    int shm_threads; /* the dist_threads of the last context checked (agree_settings) before the segment is made (0: by the cores) */
    const wgml_context *agreed; /* the context whose settings every rank was found to share */
    char shm_error[256];
    /* the context whose step has buckets in flight (a deferred step: train/grad_buckets.h) */
    wgml_context *inflight;
} wgml_dist_state;

extern wgml_dist_state wgml_dist;

/* (train/dist.c) A failure of a call that has a context: its message there and in the
   state's error; MPI's words for an error code after what we were doing */
wgml_status wgml_dist_ctx_fail(wgml_context *ctx, wgml_status st, const char *msg);
#ifdef WGML_HAVE_MPI
wgml_status wgml_dist_mpi_fail(wgml_context *ctx, int code, const char *what);
/* A shared-memory segment of every rank, slots of slot_bytes (0: the chunks of
   wgml_shm_allreduce), made by all ranks together (collective); false on every rank where any
   fails or does not want it (*out NULL, why in err). */
bool wgml_dist_shm_open_all(size_t slot_bytes, bool want, wgml_shm **out, char *err, size_t errlen);
/* Whether the chunked shared-memory reduction is ready, set up at its first call (collective) */
bool wgml_dist_shm_ready(void);
/* MPI's sums divided by the ranks, for the mean */
void wgml_dist_mean_over_ranks(float *v, int64_t n);

/* (train/dist_overlap.c) Makes opt's steps hand their gradients over in buckets of
   bucket_floats, reduced over the ranks while the backward pass goes on (train/grad_buckets.h) */
wgml_status wgml_dist_overlap(wgml_optimizer *opt, int64_t bucket_floats, bool defer);
/* Ends the overlapped all-reduce's thread (at wgml_dist_finalize) */
void wgml_dist_overlap_stop(void);
#endif

#endif
