/*
 * The overlapped all-reduce of data parallelism (wgml_dist_data_parallel, train/dist.c).
 *
 * The optimiser hands over each bucket of gradients as soon as its kernels are submitted
 * (train/grad_buckets.h), from the last layer back. A bucket is copied on the GPU into a
 * mappable buffer of its own (under dist_f16 packed to f16 on the way: half the bytes) and
 * mapped without waiting; once mapped, a thread of ours sums it over the ranks straight from
 * the mapped memory into one host array (f32 sums; the mean): through wgml's shared-memory
 * segment where the ranks share a machine (dist_shm.h), else MPI_Allreduce; the main thread
 * then writes it back into the gradient buffer through a mapped upload buffer of the bucket's
 * and a copy on the GPU, which the update's submit follows. So the reduction runs beside the
 * remaining backward kernels and only its part after the last bucket is exposed; the GPU's
 * copies are not hidden (WebGPU's one queue runs them apart from the kernels: measured on
 * H200s, docs/MEASUREMENTS.md).
 *
 * Where the runtime makes buffers over host memory (Dawn's host-mapped pointers) and the ranks
 * share a machine, the gradients skip the staging: a segment holds a slot of the whole
 * gradient buffer per rank and one for the sums, each rank's GPU copies a bucket into its own
 * slot, the ranks' threads sum the bucket's floats there in chunks once every copy has landed
 * (wgml_shm_reduce_slots), and each GPU copies the sums straight back (dist_hostmap).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/context.h"
#include "engine/executor.h"
#include "runtime/settings.h"
#include "train/dist_shm.h"
#include "train/dist_state.h"
#include "train/grad_buckets.h"
#include "train/mpi_abi.h"

#ifdef WGML_HAVE_MPI
enum { B_IDLE, B_MAPPING, B_REDUCING, B_DONE };

typedef struct bucket {
    WGPUBuffer staging; /* MapRead | CopyDst */
    uint64_t staging_size;
    /* MapWrite | CopySrc: the reduced floats go back through it (mapped again for the next
       step once its copy is submitted). On Dawn the queue writes of the buckets took 60-88 ms a
       step on 2 H200s (4 MB writes, or 1 MiB pieces), where wgpu-native's took 5.5. */
    WGPUBuffer upload;
    uint64_t upload_size;
    wgml_map_async upload_map;
    bool upload_pending; /* upload_map begun, not yet ended */
    int64_t from, count; /* floats of the gradient buffer */
    wgml_map_async map;
    int state;
    int job;  /* its reducer job's number (B_REDUCING) */
    bool f16; /* it travels as f16 */
} bucket;

/* The bytes a bucket crosses to the host in: f16 pairs (grad_f16.wgsl's words), or f32 */
static uint64_t wire_bytes(const bucket *b)
{
    return b->f16 ? ((uint64_t)b->count + 1) / 2 * 4 : (uint64_t)b->count * 4;
}

/* A context's buckets (an extension of it: the staging buffers are its device's) */
typedef struct bucket_set {
    /* each bucket allocated alone and kept: a pending map writes into its `map` until it ends,
       so a bucket never moves (a grown array of them did, past 16 buckets a step: the maps in
       flight then completed into freed memory and the step waited forever) */
    bucket **v;
    int n, cap; /* n: this step's so far; cap: made so far */
    int handed, written; /* buckets given to the reducer, and written back, in order */
    float *host;         /* the reduced gradients, at their offsets in the gradient buffer */
    int64_t host_cap;
    bool f16;           /* this step's buckets travel as f16 */
    bool in_slots;      /* through the host-mapped segment: a bucket's `map` is its copy's work-done, no staging */
    double last_mapped; /* when the last bucket reached host memory */
    double finished;    /* when the last step's buckets were all written back (0: none yet) */
    /* the segment the GPU copies into and out of itself (dist_hostmap), for a gradient buffer
       of slots_floats; state 0 not tried, 1 in use, -1 not available */
    wgml_shm *slots;
    int slots_state;
    int64_t slots_floats;
    WGPUBuffer mine, sums; /* this rank's slot, the sums' slot */
    struct slot_memory *memory;
} bucket_set;

/* The segment's memory, which the runtime's buffers over it hold after their release until it
   disposes of them (the GPU done with it): unmapped when the last holder lets go */
typedef struct slot_memory {
    wgml_shm_map map;
    _Atomic int holders; /* the bucket set, and each buffer made over it */
} slot_memory;

static const char bucket_key;

/* A holder of the slots' memory lets go (the runtime's disposal of a buffer over it, or the
   bucket set's end); the last one unmaps it */
static void slot_memory_drop(void *userdata)
{
    slot_memory *m = userdata;
    if (atomic_fetch_sub(&m->holders, 1) == 1) {
        wgml_shm_unmap(m->map);
        free(m);
    }
}

/* The buffers over the slots released and the segment's threads stopped; its memory goes once
   the runtime has disposed of both buffers (Dawn: when its device has let go of them, at the
   latest when the device goes) */
static void release_slots(bucket_set *bs)
{
    if (bs->mine) wgpuBufferRelease(bs->mine);
    if (bs->sums) wgpuBufferRelease(bs->sums);
    bs->mine = bs->sums = NULL;
    wgml_shm_leave(bs->slots);
    bs->slots = NULL;
    slot_memory_drop(bs->memory);
    bs->memory = NULL;
}

static void bucket_set_release(wgml_context *ctx, void *state)
{
    bucket_set *bs = state;
    if (wgml_dist.inflight == ctx) wgml_dist.inflight = NULL;
    for (int i = 0; i < bs->cap; i++) {
        if (bs->v[i]->staging) wgpuBufferRelease(bs->v[i]->staging);
        if (bs->v[i]->upload_pending) wgml_map_end(&ctx->rt, &bs->v[i]->upload_map); /* (it writes into the bucket) */
        if (bs->v[i]->upload) wgpuBufferRelease(bs->v[i]->upload);
        free(bs->v[i]);
    }
    free(bs->v);
    free(bs->host);
    if (bs->slots) release_slots(bs);
}

/* The reducer: one thread, jobs in order (MPI_THREAD_SERIALIZED: the main thread makes no
   MPI call while a step's buckets are in flight). Without such MPI, jobs run inline. */
typedef struct reduce_job {
    const void *send; /* count f32, or f16 (binary16 bits) */
    float *recv;      /* host memory for MPI's sums */
    float *out;       /* where the means go: the bucket's mapped upload buffer */
    int count;
    bool f16, shm; /* shm: through the shared-memory segment where it can be */
    wgml_shm *slots; /* else: the floats [from, from + count) of these slots, in place */
    int64_t from;
} reduce_job;

static struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int started, stop;
    reduce_job *jobs;
    int jobs_cap;
    int posted, done; /* this step's */
    int rc;           /* the first MPI error */
    double mpi_seconds, wait_seconds;
} reducer = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* (*waited: the seconds it waited for the other ranks, where it can tell) */
static int run_job(const reduce_job *j, double *waited)
{
    if (j->slots) {
        *waited = wgml_shm_reduce_slots(j->slots, (size_t)j->from, (size_t)j->count, j->f16, true);
        return WGML_MPI_SUCCESS;
    }
    if (j->shm && wgml_dist_shm_ready()) {
        *waited = wgml_shm_allreduce(wgml_dist.shm, j->send, j->f16, j->out, (size_t)j->count, true);
        return WGML_MPI_SUCCESS;
    }
    const void *send = j->send;
    if (j->f16) { /* MPI sums no f16: widened first (no fewer bytes through MPI then) */
        wgml_f16_to_f32(j->send, j->recv, (size_t)j->count);
        send = NULL; /* in place */
    }
    /* (into host memory first: MPI would read the upload buffer's memory, slow to read) */
    int rc = wgml_mpi_allreduce_sum(send, j->recv, j->count, WGML_MPI_FLOAT, wgml_mpi_world());
    if (rc == WGML_MPI_SUCCESS) {
        wgml_dist_mean_over_ranks(j->recv, j->count);
        memcpy(j->out, j->recv, (size_t)j->count * sizeof *j->out);
    }
    return rc;
}

/* Job j (skipped after an error: the step fails anyway), the seconds it took and those of
   them it waited for the other ranks */
static int run_timed(const reduce_job *j, double *seconds, double *waited)
{
    double t0 = wgml_host_seconds();
    *waited = 0;
    int rc = reducer.rc == WGML_MPI_SUCCESS ? run_job(j, waited) : WGML_MPI_SUCCESS;
    *seconds = wgml_host_seconds() - t0;
    return rc;
}

/* A job's end in the reducer's counts (under its lock where the thread runs the jobs) */
static void job_done(int rc, double seconds, double waited)
{
    reducer.mpi_seconds += seconds;
    reducer.wait_seconds += waited;
    if (rc != WGML_MPI_SUCCESS && reducer.rc == WGML_MPI_SUCCESS) reducer.rc = rc;
    reducer.done++;
}

static void *reducer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reducer.mu);
    for (;;) {
        while (!reducer.stop && reducer.done == reducer.posted) pthread_cond_wait(&reducer.wake, &reducer.mu);
        if (reducer.stop) break;
        reduce_job j = reducer.jobs[reducer.done];
        pthread_mutex_unlock(&reducer.mu);
        double seconds, waited;
        int rc = run_timed(&j, &seconds, &waited);
        pthread_mutex_lock(&reducer.mu);
        job_done(rc, seconds, waited);
    }
    pthread_mutex_unlock(&reducer.mu);
    return NULL;
}

void wgml_dist_overlap_stop(void)
{
    if (!reducer.started) return;
    pthread_mutex_lock(&reducer.mu);
    reducer.stop = 1;
    pthread_cond_signal(&reducer.wake);
    pthread_mutex_unlock(&reducer.mu);
    pthread_join(reducer.thread, NULL);
    reducer.started = reducer.stop = 0;
    free(reducer.jobs);
    reducer.jobs = NULL;
    reducer.jobs_cap = 0;
}

/* Queues a job (or runs it here without a thread); false when out of memory. */
static bool reducer_post(const reduce_job *j)
{
    if (!wgml_dist.mpi_thread || wgml_dist.inline_mpi) {
        double seconds, waited;
        int rc = run_timed(j, &seconds, &waited);
        reducer.posted++;
        job_done(rc, seconds, waited);
        return true;
    }
    if (!reducer.started) {
        if (pthread_create(&reducer.thread, NULL, reducer_main, NULL) != 0) return false;
        reducer.started = 1;
    }
    pthread_mutex_lock(&reducer.mu);
    bool ok = true;
    if (reducer.posted == reducer.jobs_cap) {
        int cap = reducer.jobs_cap ? reducer.jobs_cap * 2 : 64;
        reduce_job *v = realloc(reducer.jobs, (size_t)cap * sizeof *v);
        if (v) reducer.jobs = v, reducer.jobs_cap = cap;
        else ok = false;
    }
    if (ok) {
        reducer.jobs[reducer.posted++] = *j;
        pthread_cond_signal(&reducer.wake);
    }
    pthread_mutex_unlock(&reducer.mu);
    return ok;
}

/* The jobs done so far, and the first MPI error (*rc) */
static int reducer_done(int *rc)
{
    pthread_mutex_lock(&reducer.mu);
    int d = reducer.done;
    *rc = reducer.rc;
    pthread_mutex_unlock(&reducer.mu);
    return d;
}

/* Where bucket b's means go: its upload buffer's memory, mapped since the last step's copy
   (or made now), which the reducer fills; NULL after a failure (in the context's message) */
static float *upload_target(wgml_context *ctx, bucket *b)
{
    uint64_t bytes = (uint64_t)b->count * 4;
    if (b->upload_pending) {
        b->upload_pending = false;
        if (wgml_map_end(&ctx->rt, &b->upload_map)) return NULL;
    }
    if (!b->upload || b->upload_size < bytes) {
        if (b->upload) wgpuBufferRelease(b->upload);
        WGPUBufferDescriptor d = {.label = wgml_sv("wgml gradient bucket upload"), .size = bytes,
                                  .usage = WGPUBufferUsage_MapWrite | WGPUBufferUsage_CopySrc, .mappedAtCreation = true};
        b->upload = wgpuDeviceCreateBuffer(ctx->rt.device, &d);
        b->upload_size = b->upload ? bytes : 0;
        if (!b->upload) return wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: no upload buffer for a bucket"), NULL;
    }
    float *dst = wgpuBufferGetMappedRange(b->upload, 0, (size_t)b->upload_size);
    if (!dst) wgml_dist_ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: an upload buffer has no mapped range");
    return dst;
}

/* Bucket b's means (in its upload buffer, upload_target) into G: a copy on the GPU, ordered
   before the update's submit, as a queue write is. (On Dawn, queue writes of the buckets took
   60-88 ms a step on 2 H200s, where wgpu-native's took 5.5.) The buffer is mapped again for
   the next step. */
static wgml_status write_back(wgml_context *ctx, bucket *b, wgml_buffer *G)
{
    wgpuBufferUnmap(b->upload);
    wgml_status st = wgml_submit_copy(&ctx->rt, b->upload, 0, G->handle, (uint64_t)b->from * 4, (uint64_t)b->count * 4);
    if (st) return st;
    wgml_map_begin(&ctx->rt, b->upload, WGPUMapMode_Write, 0, b->upload_size, &b->upload_map);
    b->upload_pending = true;
    return WGML_OK;
}

/* How far advance goes */
enum { ONE_PASS, ALL_WRITTEN };

/* Moves the step's buckets on: mapped ones to the reducer, reduced ones back into G, both in
   order. ALL_WRITTEN: until every bucket is written back (after a failure: until none is in
   flight). */
static wgml_status advance(wgml_context *ctx, bucket_set *bs, wgml_buffer *G, int until, wgml_status failed)
{
    wgml_status st = WGML_OK;
    int mpi_rc = WGML_MPI_SUCCESS;
    double t_wait = wgml_host_seconds(), idle_since = t_wait;
    for (;;) {
        bool moved = false;
        while (bs->handed < bs->n && wgml_map_poll(&ctx->rt, &bs->v[bs->handed]->map)) {
            bucket *b = bs->v[bs->handed++];
            moved = true;
            if (b->map.status != WGPUMapAsyncStatus_Success) {
                if (!st && !failed && bs->in_slots)
                    st = wgml_dist_ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: a gradient bucket's copy into shared memory failed");
                if (!st && !failed) st = wgml_map_end(&ctx->rt, &b->map); /* its words */
                b->state = B_DONE; /* nothing mapped: nothing to reduce or unmap */
                continue;
            }
            if (bs->in_slots) { /* its copy has landed in this rank's slot */
                /* (Dawn may answer a lost device's work-done with Success: its slot holds no new gradients) */
                if (!failed && !st && ctx->rt.device_lost) st = wgml_check_device(&ctx->rt);
                reduce_job j = {.count = (int)b->count, .f16 = b->f16, .slots = bs->slots, .from = b->from};
                if (!failed && !st && (b->job = reducer.posted, !reducer_post(&j)))
                    st = wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
                b->state = failed || st ? B_DONE : B_REDUCING;
                if (bs->handed == bs->n) bs->last_mapped = wgml_host_seconds();
                continue;
            }
            const void *src = failed || st ? NULL : wgpuBufferGetConstMappedRange(b->staging, 0, (size_t)wire_bytes(b));
            if (!failed && !st && !src) st = wgml_dist_ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: a mapped bucket has no range");
            float *out = src ? upload_target(ctx, b) : NULL;
            if (src && !out) {
                st = ctx->rt.status ? ctx->rt.status : WGML_ERROR_DEVICE;
                src = NULL;
            }
            reduce_job j = {.send = src, .recv = bs->host + b->from, .out = out, .count = (int)b->count, .f16 = b->f16,
                            .shm = ctx->rt.settings.dist_shm};
            if (src && (b->job = reducer.posted, !reducer_post(&j)))
                st = wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
            if (failed || st) { /* reduce nothing more */
                wgpuBufferUnmap(b->staging);
                b->state = B_DONE;
                continue;
            }
            b->state = B_REDUCING;
            if (bs->handed == bs->n) bs->last_mapped = wgml_host_seconds();
        }
        int done = reducer_done(&mpi_rc);
        for (; bs->written < bs->handed; bs->written++) {
            bucket *b = bs->v[bs->written];
            if (b->state == B_REDUCING) {
                if (b->job >= done) break; /* still with the reducer */
                if (!bs->in_slots) wgpuBufferUnmap(b->staging);
                b->state = B_DONE;
                if (!st && !failed && mpi_rc == WGML_MPI_SUCCESS) {
                    double t0 = wgml_host_seconds();
                    /* (from the sums' slot, the same floats as in G) */
                    st = bs->in_slots ? wgml_submit_copy(&ctx->rt, bs->sums, (uint64_t)b->from * 4, G->handle, (uint64_t)b->from * 4,
                                                         (uint64_t)b->count * 4)
                                      : write_back(ctx, b, G);
                    wgml_dist.stats.copy_in_seconds += wgml_host_seconds() - t0;
                }
            }
            moved = true;
        }
        if (until == ONE_PASS || bs->written == bs->n) break;
        if (ctx->rt.device_lost) {
            st = wgml_check_device(&ctx->rt);
            failed = failed ? failed : st;
            if (bs->written == bs->handed) break; /* (maps of a lost device may never end) */
            continue; /* what the reducer holds is still waited for */
        }
        if (moved) {
            idle_since = wgml_host_seconds();
        } else if (wgml_host_seconds() - idle_since < 1e-3) {
            sched_yield();
        } else { /* a long wait (the GPU, or a slower rank): leave the cores to others */
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
    if (until != ONE_PASS) wgml_dist.stats.gpu_wait_seconds += wgml_host_seconds() - t_wait;
    reducer_done(&mpi_rc);
    if (!st && !failed && mpi_rc != WGML_MPI_SUCCESS) st = wgml_dist_mpi_fail(ctx, mpi_rc, "dist_allreduce");
    return st;
}

/* Floats [from, from + count) of G as f16 pairs into `out` (grad_f16.wgsl): one dispatch. */
static wgml_status pack_f16(wgml_context *ctx, wgml_buffer *G, int64_t from, int64_t count, wgml_buffer *out)
{
    wgml_launch l = {0};
    wgml_status st = wgml_kernel_pipeline(ctx, "grad_f16", &l);
    if (st) return st;
    uint64_t words = ((uint64_t)count + 1) / 2;
    uint32_t p[2] = {(uint32_t)count, wgml_grid(ctx, (words + 255) / 256, l.groups)};
    memcpy(l.params, p, sizeof p);
    l.params_size = sizeof p;
    l.raw[0] = G->handle; /* (a bucket starts a parameter's slot: 256-byte aligned) */
    l.offsets[0] = (uint64_t)from * 4;
    l.sizes[0] = (uint64_t)count * 4;
    l.raw[1] = out->handle;
    l.sizes[1] = words * 4;
    l.nbuffers = 2;
    snprintf(l.what, sizeof l.what, "a gradient bucket to f16");
    if ((st = wgml_check_launch(ctx, &l))) return st;
    return wgml_exec_submit(ctx, &l, 1, NULL, "dist_allreduce: gradients to f16", wgml_host_seconds());
}

/* Whether this step's gradients travel as f16: only when asked (dist_f16 1). Under loss
   scaling the scale keeps small gradients out of f16's underflow, and one that overflows f16
   arrives as inf, so every rank skips the step alike; but a scaled gradient past f16's range
   is finite in one process's f32, so ranks skipped steps one process took (nanoGPT on 4
   H200s: steps 9-10, a loss 0.9 apart at step 10), while f32 cost 1-2% of the step */
static bool step_f16(const wgml_context *ctx) { return ctx->rt.settings.dist_f16 > 0; }

/* Whether this step's buckets go through the host-mapped segment, setting it up for a
   gradient buffer of `floats` at the first step (collective: every rank's first step; all of
   them or none use it). A step with another size goes through the staging, on every rank. */
static bool slots_ready(wgml_context *ctx, bucket_set *bs, int64_t floats)
{
    if (bs->slots_state) return bs->slots_state > 0 && bs->slots_floats == floats;
    bs->slots_state = -1;
    wgml_runtime *rt = &ctx->rt;
    if (!rt->settings.dist_shm) return false; /* (the same on every rank: agree_settings) */
    size_t page = WGML_SHM_PAGE, slot = ((size_t)floats * 4 + page - 1) / page * page;
    /* the segment is (ranks + 1) slots of the whole gradient buffer: at most a quarter of the
       machine's memory (else the staging path's chunks) */
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    double machine = pages > 0 && page_size > 0 ? (double)pages * (double)page_size : 0;
    bool want = rt->settings.dist_hostmap && rt->host_mapped_alignment && page % rt->host_mapped_alignment == 0 &&
                slot <= rt->limits.maxBufferSize && (double)slot * (wgml_dist.size + 1) <= machine / 4;
    char err[256];
    if (!(bs->memory = calloc(1, sizeof *bs->memory))) want = false;
    if (!wgml_dist_shm_open_all(slot, want, &bs->slots, err, sizeof err)) {
        free(bs->memory);
        bs->memory = NULL;
        return false;
    }
    bs->memory->map = wgml_shm_mapping(bs->slots);
    atomic_store(&bs->memory->holders, 3); /* (a buffer refused keeps its count: the memory stays, never goes early) */
    WGPUBufferUsage use = WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    bs->mine = wgml_rt_host_buffer(rt, wgml_shm_slot(bs->slots, wgml_dist.rank), slot, use, "wgml gradient slot", slot_memory_drop,
                                   bs->memory);
    bs->sums = wgml_rt_host_buffer(rt, wgml_shm_slot(bs->slots, wgml_dist.size), slot, use, "wgml gradient sums", slot_memory_drop,
                                   bs->memory);
    int failed = !bs->mine || !bs->sums, any = 1;
    if (wgml_mpi_allreduce_sum(&failed, &any, 1, WGML_MPI_INT, wgml_mpi_world()) != WGML_MPI_SUCCESS) any = 1;
    if (any) {
        release_slots(bs);
        return false;
    }
    bs->slots_state = 1;
    bs->slots_floats = floats;
    return true;
}

static wgml_status bucket_ready(wgml_context *ctx, wgml_buffer *G, int64_t from, int64_t count, void *user)
{
    bucket_set *bs = wgml_extension_make(ctx, &bucket_key, sizeof(bucket_set), bucket_set_release);
    if (!bs) return ctx->rt.status;
    if (count > (int64_t)INT32_MAX) return wgml_dist_ctx_fail(ctx, WGML_ERROR_LIMIT, "dist_allreduce: a bucket past MPI's int count");
    if (bs->n == 0) { /* the step's first bucket: G's whole size is known from it (it ends G) */
        wgml_dist.inflight = ctx;
        bs->in_slots = slots_ready(ctx, bs, from + count);
        if (!bs->in_slots && from + count > bs->host_cap) { /* (the slots need no host copy) */
            float *h = realloc(bs->host, (size_t)(from + count) * sizeof *h);
            if (!h) return wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
            bs->host = h;
            bs->host_cap = from + count;
        }
        pthread_mutex_lock(&reducer.mu);
        reducer.posted = reducer.done = 0;
        reducer.rc = WGML_MPI_SUCCESS;
        pthread_mutex_unlock(&reducer.mu);
        bs->handed = bs->written = 0;
        bs->f16 = step_f16(ctx);
        wgml_dist.stats.calls++;
    }
    if (bs->n == bs->cap) {
        bucket **v = realloc(bs->v, (size_t)(bs->cap + 1) * sizeof *v);
        if (v) bs->v = v;
        if (!v || !(v[bs->cap] = calloc(1, sizeof **v)))
            return wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
        bs->cap++;
    }
    bucket *b = bs->v[bs->n];
    /* (a bucket past one storage binding, a parameter that large, goes as f32: every rank alike) */
    b->f16 = bs->f16 && (uint64_t)count * 4 <= wgml_binding_limit(ctx);
    b->from = from;
    b->count = count;
    uint64_t wire = wire_bytes(b);
    /* (in the slots an f16 bucket starts where its f32 would: (count + 1) / 2 words fit) */
    WGPUBuffer dst = bs->mine;
    uint64_t at = (uint64_t)from * 4;
    wgml_status st = WGML_OK;
    if (!bs->in_slots) {
        st = wgml_grow_buffer(ctx, &b->staging, &b->staging_size, wire, wire,
                              WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, "wgml gradient bucket", NULL);
        dst = b->staging;
        at = 0;
    }
    if (st) return st;
    wgml_buffer *packed = NULL;
    if (b->f16) {
        if (!(packed = wgml_pool_acquire(ctx, wire))) return ctx->rt.status;
        if ((st = pack_f16(ctx, G, from, count, packed))) {
            wgml_buffer_release(ctx, packed);
            return st;
        }
    }
    st = packed ? wgml_submit_copy(&ctx->rt, packed->handle, 0, dst, at, wire)
                : wgml_submit_copy(&ctx->rt, G->handle, (uint64_t)from * 4, dst, at, wire);
    if (packed) wgml_buffer_release(ctx, packed); /* (a later submit that reuses it runs after this copy) */
    if (st) return st;
    if (bs->in_slots) wgml_work_done_begin(&ctx->rt, &b->map);
    else wgml_map_begin(&ctx->rt, b->staging, WGPUMapMode_Read, 0, wire, &b->map);
    b->state = B_MAPPING;
    if (bs->n == 0 && bs->finished > 0) wgml_dist.stats.between_seconds += wgml_host_seconds() - bs->finished;
    bs->n++;
    wgml_dist.stats.bytes += (uint64_t)count * (b->f16 ? 2 : 4);
    wgml_dist.stats.values += (uint64_t)count;
    wgml_dist.stats.buckets++;
    /* earlier buckets that are ready move on now. With the step's end deferred, the last
       bucket does not wait either: the next step's graph is built and its first bucket
       encoded while the GPU still runs this step's backward (mapped buckets wait meanwhile),
       then this step's buckets are finished (train/optim.c, carry_step) */
    return advance(ctx, bs, G, ONE_PASS, WGML_OK);
}

static wgml_status buckets_finish(wgml_context *ctx, wgml_buffer *G, wgml_status failed, void *user)
{
    (void)user;
    bucket_set *bs = wgml_extension_get(ctx, &bucket_key);
    if (!bs || !bs->n) return WGML_OK;
    wgml_status st = advance(ctx, bs, G, ALL_WRITTEN, failed);
    double end = wgml_host_seconds();
    if (bs->handed == bs->n && bs->last_mapped > 0) wgml_dist.stats.exposed_seconds += end - bs->last_mapped;
    bs->finished = st ? 0 : end;
    wgml_dist.stats.shared_memory = bs->in_slots ? 2 : ctx->rt.settings.dist_shm && wgml_dist.shm_state > 0; /* (set up by the first job) */
    wgml_dist.stats.shared_memory_threads = wgml_shm_threads(bs->in_slots ? bs->slots : wgml_dist.stats.shared_memory ? wgml_dist.shm : NULL);
    pthread_mutex_lock(&reducer.mu);
    wgml_dist.stats.reduce_seconds += reducer.mpi_seconds; /* (the step's jobs, all done now) */
    wgml_dist.stats.rank_wait_seconds += reducer.wait_seconds;
    reducer.mpi_seconds = reducer.wait_seconds = 0;
    pthread_mutex_unlock(&reducer.mu);
    bs->n = 0;
    bs->last_mapped = 0;
    wgml_dist.inflight = NULL;
    return st;
}
wgml_status wgml_dist_overlap(wgml_optimizer *opt, int64_t bucket_floats, bool defer)
{
    wgml_grad_buckets b = {.bucket_floats = bucket_floats, .ready = bucket_ready, .finish = buckets_finish, .defer = defer, .user = opt};
    return wgml_optimizer_set_grad_buckets(opt, &b);
}
#endif
