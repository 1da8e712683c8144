/* The shared-memory reduction of the ranks on one machine (dist_shm.h). */
#include "train/dist_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/half.h"
#include "runtime/runtime.h"

#define MAGIC 0x77676d6c73686d31ull /* "wgmlshm1" */
#define HEADER_BYTES 4096           /* the control words; keeps the slots page-aligned */

/* The segment's first page. The barrier's words on cache lines of their own: every rank
   spins on `generation` while they arrive on `arrived`. */
typedef struct shm_header {
    uint64_t magic;
    int32_t ranks;
    int32_t pad0;
    uint64_t chunk_floats;
    char pad1[64 - 24];
    _Atomic uint32_t arrived;
    char pad2[60];
    _Atomic uint32_t generation;
} shm_header;

struct wgml_shm {
    unsigned char *base;
    size_t bytes;
    int ranks, rank;
    shm_header *head;
    unsigned char *slot0; /* rank r's slot at slot0 + r * slot_bytes; the result after the last */
    size_t slot_bytes;
};

static size_t segment_bytes(int ranks) { return HEADER_BYTES + (size_t)(ranks + 1) * WGML_SHM_CHUNK_FLOATS * 4; }

static bool map_segment(int fd, int ranks, int rank, wgml_shm **out, char *err, size_t errlen)
{
    size_t bytes = segment_bytes(ranks);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return snprintf(err, errlen, "mmap of %zu bytes: %s", bytes, strerror(errno)), false;
    wgml_shm *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(p, bytes);
        return snprintf(err, errlen, "out of host memory"), false;
    }
    *s = (wgml_shm){.base = p, .bytes = bytes, .ranks = ranks, .rank = rank, .head = p,
                    .slot0 = (unsigned char *)p + HEADER_BYTES, .slot_bytes = WGML_SHM_CHUNK_FLOATS * 4};
    *out = s;
    return true;
}

bool wgml_shm_create(int ranks, char *name, wgml_shm **out, char *err, size_t errlen)
{
    *out = NULL;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, WGML_SHM_NAME, "/wgml-dist-%ld-%lx", (long)getpid(), (unsigned long)now.tv_nsec);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return snprintf(err, errlen, "shm_open %s: %s", name, strerror(errno)), false;
    size_t bytes = segment_bytes(ranks);
    /* the pages reserved now: touching a page a full tmpfs cannot give is SIGBUS */
    int rc = ftruncate(fd, (off_t)bytes) ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    bool ok = rc == 0;
    if (!ok) snprintf(err, errlen, "%zu bytes of shared memory (%s): %s", bytes, name, strerror(rc));
    if (ok && (ok = map_segment(fd, ranks, 0, out, err, errlen))) {
        shm_header *h = (*out)->head;
        h->ranks = ranks;
        h->chunk_floats = WGML_SHM_CHUNK_FLOATS;
        atomic_store(&h->arrived, 0);
        atomic_store(&h->generation, 0);
        atomic_thread_fence(memory_order_seq_cst);
        h->magic = MAGIC;
    }
    close(fd);
    if (!ok) shm_unlink(name);
    return ok;
}

bool wgml_shm_attach(const char *name, int ranks, int rank, wgml_shm **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return snprintf(err, errlen, "shm_open %s: %s", name, strerror(errno)), false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && (size_t)st.st_size == segment_bytes(ranks);
    if (!ok) snprintf(err, errlen, "%s is not the segment of %d ranks", name, ranks);
    if (ok) ok = map_segment(fd, ranks, rank, out, err, errlen);
    close(fd);
    if (ok && ((*out)->head->magic != MAGIC || (*out)->head->ranks != ranks)) {
        snprintf(err, errlen, "%s is not wgml's segment of %d ranks", name, ranks);
        wgml_shm_close(*out);
        *out = NULL;
        ok = false;
    }
    return ok;
}

void wgml_shm_unlink(const char *name) { shm_unlink(name); }

void wgml_shm_close(wgml_shm *s)
{
    if (!s) return;
    munmap(s->base, s->bytes);
    free(s);
}

/* Every rank's writes before it are seen by every rank after it. Spins a little (the ranks
   usually arrive close together), then yields, then naps: ranks that share cores with the
   GPU runtime's threads (lavapipe) must leave them the CPU. */
static void barrier(wgml_shm *s)
{
    shm_header *h = s->head;
    uint32_t gen = atomic_load_explicit(&h->generation, memory_order_acquire);
    if (atomic_fetch_add_explicit(&h->arrived, 1, memory_order_acq_rel) == (uint32_t)s->ranks - 1) {
        atomic_store_explicit(&h->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->generation, 1, memory_order_release);
        return;
    }
    double start = 0;
    for (unsigned spins = 0; atomic_load_explicit(&h->generation, memory_order_acquire) == gen; spins++) {
        if (spins < 256) continue;
        if (spins == 256) start = wgml_host_seconds();
        if (wgml_host_seconds() - start < 2e-4) {
            sched_yield();
        } else {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
}

/* The sums' loops below are the reduction's cost: gcc's -O2 (RelWithDebInfo) does not
   vectorise loops of unknown length; clang's does */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize")
#endif

void wgml_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = wgml_half_to_f32(in[i]);
}

/* out[i] (+)= the slot's value i, over [0, n) */
static void add_f32(float *restrict out, const float *restrict in, size_t n, bool first)
{
    if (first) memcpy(out, in, n * sizeof *out);
    else
        for (size_t i = 0; i < n; i++) out[i] += in[i];
}

static void add_f16(float *restrict out, const uint16_t *restrict in, size_t n, bool first)
{
    if (first)
        for (size_t i = 0; i < n; i++) out[i] = wgml_half_to_f32(in[i]);
    else
        for (size_t i = 0; i < n; i++) out[i] += wgml_half_to_f32(in[i]);
}

void wgml_shm_allreduce(wgml_shm *s, const void *send, bool f16, float *recv, size_t count, bool mean)
{
    const size_t esize = f16 ? 2 : 4, chunk = WGML_SHM_CHUNK_FLOATS;
    float *result = (float *)(s->slot0 + (size_t)s->ranks * s->slot_bytes);
    const float n_ranks = (float)s->ranks; /* the same division on every rank: the same bits */
    for (size_t at = 0; at < count; at += chunk) {
        size_t c = count - at < chunk ? count - at : chunk;
        memcpy(s->slot0 + (size_t)s->rank * s->slot_bytes, (const unsigned char *)send + at * esize, c * esize);
        barrier(s);
        /* this rank's slice, whole cache lines apart from the neighbours' */
        size_t per = ((c + (size_t)s->ranks - 1) / (size_t)s->ranks + 15) & ~(size_t)15;
        size_t lo = (size_t)s->rank * per < c ? (size_t)s->rank * per : c, hi = lo + per < c ? lo + per : c;
        /* in blocks that stay in the L1 cache while every slot is added in */
        for (size_t b = lo; b < hi; b += 2048) {
            size_t n = hi - b < 2048 ? hi - b : 2048;
            for (int r = 0; r < s->ranks; r++) {
                const unsigned char *slot = s->slot0 + (size_t)r * s->slot_bytes;
                if (f16) add_f16(result + b, (const uint16_t *)slot + b, n, r == 0);
                else add_f32(result + b, (const float *)slot + b, n, r == 0);
            }
            if (mean)
                for (size_t i = b; i < b + n; i++) result[i] /= n_ranks;
        }
        barrier(s);
        memcpy(recv + at, result, c * sizeof *recv);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
