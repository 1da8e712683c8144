/*
 * The host reduction of data parallelism for ranks on one machine (train/dist.c): a POSIX
 * shared-memory segment with a slot per rank. Each rank copies a chunk into its slot, the
 * ranks' callers meet, the chunk's floats are summed over all slots (f32 sums, in rank order)
 * in pieces that any thread of any rank takes off a counter in the segment, and each rank
 * copies the whole result out. A rank copies and sums with threads of its own (one core copies
 * a few GB/s: 43 MB in and out a step took a thread 20 ms on an H200 machine), which take
 * pieces as they wake and are never waited for, so a thread that comes late delays only a
 * piece it took. No MPI here: dist.c creates
 * the segment on rank 0, hands its name to the others over MPI and unlinks it once every rank
 * has it mapped, so no file outlives the ranks however they end.
 * Private to the library.
 */
#ifndef WGML_TRAIN_DIST_SHM_H
#define WGML_TRAIN_DIST_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* floats a chunk of wgml_shm_allreduce in a segment of the default slots: a slot holds this
   many f32 (or as many f16 in its first half) */
#define WGML_SHM_CHUNK_FLOATS ((size_t)1 << 20)
/* what a slot's size and place are multiples of */
#define WGML_SHM_PAGE 4096
#define WGML_SHM_NAME 64
/* most threads a rank copies and sums with */
#define WGML_SHM_MAX_THREADS 16

typedef struct wgml_shm wgml_shm;

/* Rank 0: makes and maps a segment for `ranks` ranks, its name into name[WGML_SHM_NAME], in
   which each rank reduces with `threads` threads (clamped to [1, WGML_SHM_MAX_THREADS]; the
   others take rank 0's count from the segment), with slots of slot_bytes (a multiple of
   WGML_SHM_PAGE; 0: a chunk, WGML_SHM_CHUNK_FLOATS f32). false with why in err (no
   /dev/shm, not enough room in it, no thread). */
bool wgml_shm_create(int ranks, int threads, size_t slot_bytes, char *name, wgml_shm **out, char *err, size_t errlen);
/* The other ranks: maps rank 0's segment as `rank` (its slots' size from the segment). */
bool wgml_shm_attach(const char *name, int ranks, int rank, wgml_shm **out, char *err, size_t errlen);
/* Removes the name (rank 0, once every rank has it mapped or failed to). */
void wgml_shm_unlink(const char *name);
void wgml_shm_close(wgml_shm *s);
/* The segment's mapping */
typedef struct wgml_shm_map {
    void *base;
    size_t bytes;
} wgml_shm_map;
wgml_shm_map wgml_shm_mapping(const wgml_shm *s);
/* As wgml_shm_close, but the mapping stays (the GPU may still hold it: a buffer over it not
   yet disposed of), for wgml_shm_unmap once nothing does */
void wgml_shm_leave(wgml_shm *s);
void wgml_shm_unmap(wgml_shm_map m);
/* The threads each rank reduces with */
int wgml_shm_threads(const wgml_shm *s);
/* The CPUs this process may use: the online ones, fewer where its affinity or a cgroup's CPU
   quota says so */
int wgml_usable_cpus(void);

/* Every rank calls it with the same count, in the same order: recv = the sum (mean: / ranks)
   over the ranks of send, count values that are f32, or f16 (IEEE binary16 bits) where f16;
   the sums are f32, in rank order, and every rank gets the same bits. send may be recv (f32).
   Returns the seconds this rank waited in it for the others (the rest is its own copying
   and summing). */
double wgml_shm_allreduce(wgml_shm *s, const void *send, bool f16, float *recv, size_t count, bool mean);

/* Where the GPU reads and writes itself (buffers over the segment, wgml_rt_host_buffer): rank
   r's slot, or with r = the ranks the result's; page-aligned, wgml_shm_slot_bytes long. */
void *wgml_shm_slot(wgml_shm *s, int r);
size_t wgml_shm_slot_bytes(const wgml_shm *s);
/* Every rank calls it with the same range, in the same order, once each rank's values
   [from, from + count) are in its slot (f32 at 4 * from, or as many f16 from the same byte):
   the result's floats [from, from + count) become their f32 sums (mean: / ranks) in rank
   order, the same bits on every rank, summed in chunks by whichever threads of the ranks take
   them (each rank's caller, and its helpers as they wake). Returns the seconds this rank
   waited: for the others to arrive, then for the last chunks. */
double wgml_shm_reduce_slots(wgml_shm *s, size_t from, size_t count, bool f16, bool mean);

/* IEEE binary16 bits to f32 (exact; infinities and NaN kept), n of them. */
void wgml_f16_to_f32(const uint16_t *in, float *out, size_t n);

#endif
