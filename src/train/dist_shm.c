/* The shared-memory reduction of the ranks on one machine (dist_shm.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "train/dist_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

#define MAGIC 0x77676d6c73686d32ull /* "wgmlshm2" */
#define HEADER_BYTES 4096           /* the control words; keeps the slots page-aligned */

/* The segment's first page. Its words on cache lines of their own: the ranks' callers meet on
   `met` and `met_generation` (a phase's number); the last to arrive sets `claim` and `done`
   to the phase's number and no chunk before it lets the others on, so that any thread of any
   rank then takes the phase's chunks off `claim` and counts them in `done` (high 32 bits: the
   phase's number, which a late thread's old phase does not match). */
typedef struct shm_header {
    uint64_t magic;
    int32_t ranks;
    int32_t threads; /* a rank's threads in the reduction (rank 0's choice, every rank's count) */
    uint64_t slot_bytes;
    char pad1[64 - 24];
    _Atomic uint32_t met;
    char pad2[60];
    _Atomic uint64_t met_generation;
    char pad3[56];
    _Atomic uint64_t claim; /* the phase's number << 32 | the next chunk */
    char pad4[56];
    _Atomic uint64_t done;  /* the phase's number << 32 | the chunks summed */
} shm_header;

_Static_assert(sizeof(shm_header) <= HEADER_BYTES, "the control words fit the segment's first page");

/* floats a thread takes at a time: a piece of a copy, a chunk of the sums */
#define CLAIM_FLOATS 16384

/* A phase, as every thread of a rank sees it */
typedef struct shm_job {
    const void *send;
    bool f16, mean;
    float *recv;
    size_t from, count;
    /* what a thread takes: SUM the slots' chunks [from, from + count) (the segment's counters),
       or this rank's COPY_IN of send's [from, from + count) into its slot, COPY_OUT of the
       result's into recv's (the rank's own counters) */
    int phase;
    uint32_t number; /* the phase's number, which its counters carry */
} shm_job;

enum { SUM, COPY_IN, COPY_OUT };

struct wgml_shm {
    unsigned char *base;
    size_t bytes;
    int ranks, rank;
    int threads; /* this rank's, the caller's included */
    shm_header *head;
    unsigned char *slot0; /* rank r's slot at slot0 + r * slot_bytes; the result after the last */
    size_t slot_bytes;
    /* the helper threads (threads - 1), woken by a new generation with the phase in `job`:
       they take what is left of it (the caller takes pieces too and never waits for them) */
    pthread_t helper[WGML_SHM_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go;
    unsigned generation;
    bool stop;
    shm_job job;
    /* the copies' counters, as the segment's claim and done are the sums' (this process's) */
    _Atomic uint64_t copy_claim, copy_done;
    uint32_t copies; /* the caller's count of copy phases */
};

static void take(wgml_shm *s, const shm_job *j);

static void *helper_main(void *arg)
{
    wgml_shm *s = arg;
    pthread_mutex_lock(&s->mu);
    unsigned seen = 0; /* (no job before every helper starts: the generations count from 0) */
    for (;;) {
        while (!s->stop && s->generation == seen) pthread_cond_wait(&s->go, &s->mu);
        if (s->stop) break;
        seen = s->generation;
        shm_job j = s->job;
        pthread_mutex_unlock(&s->mu);
        take(s, &j); /* (a late helper finds its phase over: nothing left to take) */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void stop_helpers(wgml_shm *s, int started)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < started; i++) pthread_join(s->helper[i], NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->go);
}

/* The helpers of a rank of `threads`: false with why in err (then none runs) */
static bool start_helpers(wgml_shm *s, int threads, char *err, size_t errlen)
{
    s->threads = threads;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->go, NULL);
    for (int i = 0; i < threads - 1; i++) {
        int rc = pthread_create(&s->helper[i], NULL, helper_main, s);
        if (rc) {
            stop_helpers(s, i);
            s->threads = 0;
            return snprintf(err, errlen, "a thread of the reduction: %s", strerror(rc)), false;
        }
    }
    return true;
}

static size_t segment_bytes(int ranks, size_t slot_bytes) { return HEADER_BYTES + (size_t)(ranks + 1) * slot_bytes; }

static bool map_segment(int fd, int ranks, int rank, size_t slot_bytes, wgml_shm **out, char *err, size_t errlen)
{
    size_t bytes = segment_bytes(ranks, slot_bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return snprintf(err, errlen, "mmap of %zu bytes: %s", bytes, strerror(errno)), false;
    wgml_shm *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(p, bytes);
        return snprintf(err, errlen, "out of host memory"), false;
    }
    *s = (wgml_shm){.base = p, .bytes = bytes, .ranks = ranks, .rank = rank, .head = p,
                    .slot0 = (unsigned char *)p + HEADER_BYTES, .slot_bytes = slot_bytes};
    *out = s;
    return true;
}

bool wgml_shm_create(int ranks, int threads, size_t slot_bytes, char *name, wgml_shm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!slot_bytes) slot_bytes = WGML_SHM_CHUNK_FLOATS * 4;
    if (slot_bytes % WGML_SHM_PAGE || slot_bytes > ((size_t)1 << 40) / (size_t)(ranks + 1))
        return snprintf(err, errlen, "slots of %zu bytes", slot_bytes), false;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, WGML_SHM_NAME, "/wgml-dist-%ld-%lx", (long)getpid(), (unsigned long)now.tv_nsec);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return snprintf(err, errlen, "shm_open %s: %s", name, strerror(errno)), false;
    size_t bytes = segment_bytes(ranks, slot_bytes);
    /* the pages reserved now: touching a page a full tmpfs cannot give is SIGBUS */
    int rc = ftruncate(fd, (off_t)bytes) ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    bool ok = rc == 0;
    if (!ok) snprintf(err, errlen, "%zu bytes of shared memory (%s): %s", bytes, name, strerror(rc));
    if (ok && (ok = map_segment(fd, ranks, 0, slot_bytes, out, err, errlen))) {
        shm_header *h = (*out)->head;
        h->ranks = ranks;
        h->threads = threads < 1 ? 1 : threads > WGML_SHM_MAX_THREADS ? WGML_SHM_MAX_THREADS : threads;
        h->slot_bytes = slot_bytes;
        atomic_store(&h->met, 0);
        atomic_store(&h->met_generation, 0);
        atomic_store(&h->claim, 0);
        atomic_store(&h->done, 0);
        atomic_thread_fence(memory_order_seq_cst);
        h->magic = MAGIC;
        if (!(ok = start_helpers(*out, h->threads, err, errlen))) {
            wgml_shm_close(*out); /* (no helper runs) */
            *out = NULL;
        }
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
    /* the slots' size from the header (rank 0 wrote it before sending the name) */
    struct stat st;
    uint64_t slot_bytes = 0;
    bool ok = fstat(fd, &st) == 0 && (size_t)st.st_size > HEADER_BYTES &&
              pread(fd, &slot_bytes, sizeof slot_bytes, offsetof(shm_header, slot_bytes)) == (ssize_t)sizeof slot_bytes &&
              slot_bytes && slot_bytes % WGML_SHM_PAGE == 0 && (size_t)st.st_size == segment_bytes(ranks, slot_bytes);
    if (!ok) snprintf(err, errlen, "%s is not the segment of %d ranks", name, ranks);
    if (ok) ok = map_segment(fd, ranks, rank, slot_bytes, out, err, errlen);
    close(fd);
    const shm_header *h = ok ? (*out)->head : NULL;
    if (ok && (h->magic != MAGIC || h->ranks != ranks || h->threads < 1 || h->threads > WGML_SHM_MAX_THREADS)) {
        snprintf(err, errlen, "%s is not wgml's segment of %d ranks", name, ranks);
        ok = false;
    }
    if (ok) ok = start_helpers(*out, h->threads, err, errlen);
    if (!ok && *out) {
        wgml_shm_close(*out); /* (no helper runs) */
        *out = NULL;
    }
    return ok;
}

void wgml_shm_unlink(const char *name) { shm_unlink(name); }

wgml_shm_map wgml_shm_mapping(const wgml_shm *s) { return (wgml_shm_map){s->base, s->bytes}; }

void wgml_shm_leave(wgml_shm *s)
{
    if (!s) return;
    if (s->threads) stop_helpers(s, s->threads - 1);
    free(s);
}

void wgml_shm_unmap(wgml_shm_map m)
{
    if (m.base) munmap(m.base, m.bytes);
}

void wgml_shm_close(wgml_shm *s)
{
    if (!s) return;
    wgml_shm_map m = wgml_shm_mapping(s);
    wgml_shm_leave(s);
    wgml_shm_unmap(m);
}

int wgml_shm_threads(const wgml_shm *s) { return s ? s->threads : 0; }

void *wgml_shm_slot(wgml_shm *s, int r) { return s->slot0 + (size_t)r * s->slot_bytes; }

size_t wgml_shm_slot_bytes(const wgml_shm *s) { return s->slot_bytes; }

#ifdef __linux__
/* A cgroup's CPU quota in CPUs, rounded up (0: none): v2's cpu.max ("max" or "quota period"),
   else v1's cfs_quota_us and cfs_period_us */
static long cpu_quota(void)
{
    long quota = -1, period = 0;
    char q[32];
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        if (fscanf(f, "%31s %ld", q, &period) == 2 && strcmp(q, "max") != 0) quota = atol(q);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
        if (fscanf(f, "%ld", &quota) != 1) quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%ld", &period) != 1) period = 0;
            fclose(f);
        }
    }
    return quota > 0 && period > 0 ? (quota + period - 1) / period : 0;
}
#endif

int wgml_usable_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 && CPU_COUNT(&set) < n) n = CPU_COUNT(&set);
    long quota = cpu_quota();
    if (quota > 0 && quota < n) n = quota;
#endif
    return n > 0 ? (int)n : 1;
}

/* Spins a little (the ranks usually arrive close together), then yields, then naps: ranks
   that share cores with the GPU runtime's threads (lavapipe) must leave them the CPU. Returns
   the seconds it waited. */
static double wait_until(const _Atomic uint64_t *word, uint64_t want)
{
    double start = wgml_host_seconds();
    for (unsigned spins = 0; atomic_load_explicit(word, memory_order_acquire) != want; spins++) {
        if (spins < 256) continue;
        if (wgml_host_seconds() - start < 2e-4) {
            sched_yield();
        } else {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
    return wgml_host_seconds() - start;
}

/* A sum phase's meeting of the ranks' callers (each once its rank's values are in its slot):
   the last to arrive readies the phase's chunks. The phase's number in *number; returns the
   seconds it waited. */
static double meet(wgml_shm *s, uint32_t *number)
{
    shm_header *h = s->head;
    /* (no rank can meet again, and move the generation on, before every rank has met this once) */
    uint64_t gen = atomic_load_explicit(&h->met_generation, memory_order_acquire) + 1;
    *number = (uint32_t)gen;
    if (atomic_fetch_add_explicit(&h->met, 1, memory_order_acq_rel) == (uint32_t)s->ranks - 1) {
        uint64_t tag = (uint64_t)*number << 32;
        atomic_store_explicit(&h->met, 0, memory_order_relaxed);
        atomic_store_explicit(&h->done, tag, memory_order_relaxed);
        atomic_store_explicit(&h->claim, tag, memory_order_relaxed);
        atomic_store_explicit(&h->met_generation, gen, memory_order_release);
        return 0;
    }
    return wait_until(&h->met_generation, gen);
}

/* The sums' loops below are the reduction's cost: gcc's -O2 (RelWithDebInfo) does not
   vectorise loops of unknown length; clang's does */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize")
#endif

/* One value at a time, the conversion made f16 buckets reduce no faster than f32 ones of
   twice the bytes (4 H200s' ranks); x86's F16C converts eight an instruction, exactly
   (test_dist compares every f16 value with the scalar conversion), where the CPU has it */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1
/* (clang's __builtin_cpu_supports knows no "f16c": CPUID leaf 1, ECX bit 29, beside AVX's
   check, which includes the OS saving the registers) */
static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1) && __builtin_cpu_supports("avx");
}
__attribute__((target("avx,f16c"))) static size_t f16_to_f32_f16c(const uint16_t *in, float *out, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    return i;
}
#endif

void wgml_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    size_t i = 0;
#ifdef HAVE_F16C_PATH
    static atomic_int f16c = -1; /* (the reduction's threads may ask at once) */
    int has = atomic_load_explicit(&f16c, memory_order_relaxed);
    if (has < 0) atomic_store_explicit(&f16c, has = cpu_has_f16c(), memory_order_relaxed);
    if (has) i = f16_to_f32_f16c(in, out, n);
#endif
    for (; i < n; i++) out[i] = wgml_half_to_f32(in[i]);
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
    if (first) {
        wgml_f16_to_f32(in, out, n);
        return;
    }
    float wide[2048]; /* (the callers' blocks) */
    for (size_t b = 0; b < n; b += 2048) {
        size_t m = n - b < 2048 ? n - b : 2048;
        wgml_f16_to_f32(in + b, wide, m);
        add_f32(out + b, wide, m, false);
    }
}

/* The result's floats [lo, hi) summed over the ranks' slots in rank order (mean: / ranks),
   whoever sums them; f16 slots hold element i - at at byte 4 at (where the f32 one would be) */
static void sum_range(wgml_shm *s, size_t at, size_t lo, size_t hi, bool f16, bool mean)
{
    float *result = (float *)(s->slot0 + (size_t)s->ranks * s->slot_bytes);
    const float n_ranks = (float)s->ranks; /* the same division on every rank: the same bits */
    /* in blocks that stay in the L1 cache while every slot is added in */
    for (size_t b = lo; b < hi; b += 2048) {
        size_t n = hi - b < 2048 ? hi - b : 2048;
        for (int r = 0; r < s->ranks; r++) {
            const unsigned char *slot = s->slot0 + (size_t)r * s->slot_bytes;
            if (f16) add_f16(result + b, (const uint16_t *)(slot + 4 * at) + (b - at), n, r == 0);
            else add_f32(result + b, (const float *)slot + b, n, r == 0);
        }
        if (mean)
            for (size_t i = b; i < b + n; i++) result[i] /= n_ranks;
    }
}

static uint64_t pieces_of(const shm_job *j) { return (j->count + CLAIM_FLOATS - 1) / CLAIM_FLOATS; }

/* The pieces of phase j taken and done until none is left (or the phase is over: a late
   helper's). A piece is taken by a compare-and-swap of the whole word, so the phase's number
   must match; it is counted done after it is done. */
static void take(wgml_shm *s, const shm_job *j)
{
    _Atomic uint64_t *claim = j->phase == SUM ? &s->head->claim : &s->copy_claim;
    _Atomic uint64_t *done = j->phase == SUM ? &s->head->done : &s->copy_done;
    const size_t esize = j->f16 ? 2 : 4;
    uint64_t pieces = pieces_of(j);
    for (;;) {
        uint64_t v = atomic_load_explicit(claim, memory_order_acquire);
        if ((uint32_t)(v >> 32) != j->number || (v & 0xffffffffu) >= pieces) return;
        if (!atomic_compare_exchange_weak_explicit(claim, &v, v + 1, memory_order_acq_rel, memory_order_relaxed)) continue;
        size_t lo = (size_t)(v & 0xffffffffu) * CLAIM_FLOATS;
        size_t hi = lo + CLAIM_FLOATS < j->count ? lo + CLAIM_FLOATS : j->count;
        if (j->phase == SUM) {
            sum_range(s, j->from, j->from + lo, j->from + hi, j->f16, j->mean);
        } else if (j->phase == COPY_IN) { /* (send's floats [from + lo, from + hi) to the slot's [lo, hi)) */
            memcpy(s->slot0 + (size_t)s->rank * s->slot_bytes + lo * esize,
                   (const unsigned char *)j->send + (j->from + lo) * esize, (hi - lo) * esize);
        } else {
            const float *result = (const float *)(s->slot0 + (size_t)s->ranks * s->slot_bytes);
            memcpy(j->recv + j->from + lo, result + lo, (hi - lo) * sizeof *j->recv);
        }
        atomic_fetch_add_explicit(done, 1, memory_order_release);
    }
}

/* Phase j on this rank's threads: the helpers told, the caller taking pieces too, then waiting
   for the last (taken by whoever took it). Returns the seconds it waited. */
static double run_phase(wgml_shm *s, const shm_job *j)
{
    if (s->threads > 1) { /* (not waited for: they take what is left when they wake) */
        pthread_mutex_lock(&s->mu);
        s->job = *j;
        s->generation++;
        pthread_cond_broadcast(&s->go);
        pthread_mutex_unlock(&s->mu);
    }
    take(s, j);
    return wait_until(j->phase == SUM ? &s->head->done : &s->copy_done, (uint64_t)j->number << 32 | pieces_of(j));
}

/* The slots' floats [from, from + count) summed (collective): the ranks' callers meet (every
   rank's values in its slot), then every thread of every rank that is awake takes chunks: one
   that comes late delays only a chunk it has taken, not every thread at a barrier (2 H200s'
   ranks with 8 threads each waited 7-12 ms a step that way on some lent machines, fewer
   threads less: docs/MEASUREMENTS.md). Returns the seconds this rank waited. */
static double sum_phase(wgml_shm *s, size_t from, size_t count, bool f16, bool mean)
{
    shm_job j = {.phase = SUM, .f16 = f16, .mean = mean, .from = from, .count = count};
    double waited = meet(s, &j.number);
    return waited + run_phase(s, &j);
}

/* This rank's copy of [from, from + count) into its slot (COPY_IN) or out of the result */
static void copy_phase(wgml_shm *s, int phase, const void *send, float *recv, size_t from, size_t count, bool f16)
{
    shm_job j = {.phase = phase, .send = send, .recv = recv, .from = from, .count = count, .f16 = f16, .number = ++s->copies};
    atomic_store_explicit(&s->copy_done, (uint64_t)j.number << 32, memory_order_relaxed);
    atomic_store_explicit(&s->copy_claim, (uint64_t)j.number << 32, memory_order_release);
    run_phase(s, &j);
}

double wgml_shm_allreduce(wgml_shm *s, const void *send, bool f16, float *recv, size_t count, bool mean)
{
    double waited = 0;
    const size_t chunk = s->slot_bytes / 4; /* floats a slot holds */
    for (size_t at = 0; at < count; at += chunk) {
        size_t c = count - at < chunk ? count - at : chunk;
        copy_phase(s, COPY_IN, send, NULL, at, c, f16);
        /* (the next round's meeting: every rank has copied this round's result out before any
           sums into it again) */
        waited += sum_phase(s, 0, c, f16, mean);
        copy_phase(s, COPY_OUT, NULL, recv, at, c, f16);
    }
    return waited;
}

double wgml_shm_reduce_slots(wgml_shm *s, size_t from, size_t count, bool f16, bool mean)
{
    return sum_phase(s, from, count, f16, mean);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
