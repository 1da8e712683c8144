/*
 * Data parallelism over MPI (wgml.h, "distributed"). WebGPU buffers cannot be handed to MPI,
 * so tensors travel through host memory: a bucket is read from the GPU, its MPI_Iallreduce
 * started, and the next bucket read while it runs; results are written back with the queue's
 * writes, which the next submit orders before its kernels.
 *
 * Built without MPI (WGML_HAVE_MPI undefined), or in a process no launcher started, the
 * process is rank 0 of 1: the collectives check their arguments and leave the data as it is.
 *
 * The overlapped all-reduce of a training step's gradients (wgml_dist_data_parallel) is
 * train/dist_overlap.c's; the state both share is train/dist_state.h's.
 *
 * The library does not link MPI, nor include its header: it reaches MPI through its own seam
 * (train/mpi_abi.h), which finds the MPI in the process when a program links one, else, in a
 * process an MPI launcher started, the library of that launcher's family (Open MPI's or
 * MPICH's), opened then, and speaks that family's binary interface. So one build runs under
 * either launcher; libwgml.so and the wgml command load, and Python imports them, on machines
 * without MPI, and one process never loads it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api_lock.h"
#include "core/buffer.h"
#include "core/context.h"
#include "engine/executor.h"
#include "runtime/settings.h"
#include "train/dist_shm.h"
#include "train/dist_state.h"
#include "train/mpi_abi.h"

#define DEFAULT_BUCKET_FLOATS (4u << 20)
/* overlapped: about half a nanoGPT block (4 MB), so the first all-reduce starts early */
#define DEFAULT_OVERLAP_BUCKET_FLOATS (1u << 20)

wgml_dist_state wgml_dist = {.size = 1, .local_size = 1};

static wgml_status dist_fail(wgml_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static wgml_status dist_fail(wgml_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wgml_dist.error, sizeof wgml_dist.error, fmt, ap);
    va_end(ap);
    return st;
}

/* A failure of a call that has a context: its message there and in wgml_dist.error. */
wgml_status wgml_dist_ctx_fail(wgml_context *ctx, wgml_status st, const char *msg)
{
    snprintf(wgml_dist.error, sizeof wgml_dist.error, "%s", msg);
    return ctx ? wgml_fail(ctx, st, "%s", msg) : st;
}

#ifdef WGML_HAVE_MPI
/* Set by the launchers we know (Open MPI, MPICH/Hydra, PMIx, Slurm's PMI): without one, a
   process is a lone rank and MPI is not touched (a singleton MPI_Init would be slow). */
static int launched(void) { return wgml_dist.launch.launched; }
#endif

/* The launcher's count of ranks, as it gave it (Open MPI's, else MPICH/Hydra's), or NULL */
static const char *launcher_size(void) { return *wgml_dist.launch.size ? wgml_dist.launch.size : NULL; }

const char *wgml_dist_error_message(void) { return wgml_dist.error; }
int wgml_dist_rank(void) { return wgml_dist.rank; }
int wgml_dist_size(void) { return wgml_dist.size; }
int wgml_dist_local_rank(void) { return wgml_dist.local_rank; }
int wgml_dist_local_size(void) { return wgml_dist.local_size; }

void wgml_dist_stats_get(wgml_dist_stats *stats)
{
    if (stats) *stats = wgml_dist.stats;
}

void wgml_dist_stats_reset(void) { memset(&wgml_dist.stats, 0, sizeof wgml_dist.stats); }

#ifdef WGML_HAVE_MPI
/* MPI's words for an error code, after what we were doing. */
wgml_status wgml_dist_mpi_fail(wgml_context *ctx, int code, const char *what)
{
    char text[256];
    wgml_mpi_error_string(code, text, sizeof text);
    char msg[512];
    snprintf(msg, sizeof msg, "%s: MPI error on rank %d of %d: %s", what, wgml_dist.rank, wgml_dist.size, text);
    return wgml_dist_ctx_fail(ctx, WGML_ERROR_IO, msg);
}
#endif

wgml_status wgml_dist_init(void)
{
    if (wgml_dist.started) return WGML_OK;
    wgml_launch_settings_read(&wgml_dist.launch);
#ifdef WGML_HAVE_MPI
    wgml_mpi_family launcher = wgml_dist.launch.family == WGML_LAUNCHER_OPEN_MPI ? WGML_MPI_OPEN_MPI
                               : wgml_dist.launch.family == WGML_LAUNCHER_MPICH  ? WGML_MPI_MPICH
                                                                             : WGML_MPI_UNKNOWN;
    if (launched() && !wgml_mpi_load(wgml_dist.launch.mpi_library, launcher)) {
        /* a launcher of one rank may start a process that has no MPI: it is the only rank */
        const char *n = launcher_size();
        if (!n)
            return dist_fail(WGML_ERROR_UNSUPPORTED, "dist_init: started by an MPI launcher, but MPI could not be loaded: %s",
                             wgml_mpi_error());
        if (strcmp(n, "1") != 0)
            return dist_fail(WGML_ERROR_UNSUPPORTED, "dist_init: started by mpirun with %s ranks, but MPI could not be loaded: %s",
                             n, wgml_mpi_error());
    } else if (launched()) {
        int inited = 0, rc, threads = WGML_MPI_THREAD_SINGLE;
        wgml_mpi_initialized(&inited);
        if (!inited) {
            /* the overlapped all-reduce calls MPI from a thread of its own, never two at once */
            if ((rc = wgml_mpi_init_thread(WGML_MPI_THREAD_SERIALIZED, &threads)) != WGML_MPI_SUCCESS)
                return wgml_dist_mpi_fail(NULL, rc, "dist_init: MPI_Init_thread");
            wgml_dist.owns_mpi = 1;
        } else {
            wgml_mpi_query_thread(&threads);
        }
        wgml_dist.mpi_thread = threads >= WGML_MPI_THREAD_SERIALIZED;
        /* errors come back as codes, which become statuses, instead of ending the process */
        wgml_mpi_comm world = wgml_mpi_world(), local;
        wgml_mpi_errors_return(world);
        wgml_mpi_comm_rank(world, &wgml_dist.rank);
        wgml_mpi_comm_size(world, &wgml_dist.size);
        if (wgml_mpi_comm_split_shared(world, wgml_dist.rank, &local) == WGML_MPI_SUCCESS) {
            wgml_mpi_comm_rank(local, &wgml_dist.local_rank);
            wgml_mpi_comm_size(local, &wgml_dist.local_size);
            wgml_mpi_comm_free(&local);
        }
        wgml_dist.mpi = wgml_dist.size > 1;
        /* another MPI's launcher (MPICH's mpiexec for a program that links Open MPI, or
           WGML_MPI_LIBRARY naming the other family's): every process would be a lone rank,
           training the whole batch into the same files */
        const char *n = launcher_size();
        if (n && atoi(n) > 1 && wgml_dist.size == 1)
            return dist_fail(WGML_ERROR_UNSUPPORTED,
                             "dist_init: the launcher started %s ranks, but MPI (%s, %s) sees one: was it another MPI's "
                             "launcher (its variables are %s's)? Start wgml with the mpirun of that MPI, or set "
                             "WGML_MPI_LIBRARY to the launcher's MPI library",
                             n, wgml_mpi_family_name(wgml_mpi_loaded_family()), wgml_mpi_library(),
                             wgml_mpi_family_name(launcher));
    }
#else
    const char *n = launcher_size();
    if (n && strcmp(n, "1") != 0)
        return dist_fail(WGML_ERROR_UNSUPPORTED,
                         "dist_init: started by mpirun with %s ranks, but this wgml was built without MPI (-DWGML_MPI=OFF)", n);
#endif
    wgml_dist.started = 1;
    return WGML_OK;
}

/* A collective of the calling thread first ends the step in flight: every rank must call its
   collectives in one order (the step's buckets, then this), and MPI from one thread at a
   time. */
static wgml_status settle_inflight(void)
{
    wgml_context *ctx = wgml_dist.inflight;
    if (!ctx || !ctx->pending_step) return WGML_OK;
    wgml_status st = wgml_context_enter(ctx, "dist");
    if (st) return dist_fail(st, "dist: the context of the step in flight cannot be entered");
    wgml_status (*step)(wgml_context *, void *) = ctx->pending_step;
    ctx->pending_step = NULL;
    if (step && (st = step(ctx, ctx->pending_step_arg))) dist_fail(st, "%s", wgml_error_message(ctx));
    wgml_context_leave(ctx);
    return st;
}

wgml_status wgml_dist_finalize(void)
{
    wgml_status settled = settle_inflight();
#ifdef WGML_HAVE_MPI
    wgml_dist_overlap_stop();
#endif
    wgml_shm_close(wgml_dist.shm);
    wgml_dist.shm = NULL;
    wgml_dist.shm_state = 0;
    wgml_dist.agreed = NULL;
    free(wgml_dist.stage[0]);
    free(wgml_dist.stage[1]);
    wgml_dist.stage[0] = wgml_dist.stage[1] = NULL;
    wgml_dist.stage_cap = 0;
#ifdef WGML_HAVE_MPI
    if (wgml_dist.owns_mpi) {
        int rc = wgml_mpi_finalize();
        wgml_dist.owns_mpi = 0;
        if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(NULL, rc, "dist_finalize");
    }
#endif
    wgml_dist.started = wgml_dist.mpi = 0;
    wgml_dist.rank = wgml_dist.local_rank = 0;
    wgml_dist.size = wgml_dist.local_size = 1;
    return settled;
}

wgml_status wgml_dist_barrier(void)
{
    wgml_status st = settle_inflight();
    if (st) return st;
#ifdef WGML_HAVE_MPI
    if (wgml_dist.mpi) {
        int rc = wgml_mpi_barrier(wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(NULL, rc, "dist_barrier");
    }
#endif
    return WGML_OK;
}

void wgml_dist_abort(int code)
{
#ifdef WGML_HAVE_MPI
    if (wgml_dist.mpi) wgml_mpi_abort(wgml_mpi_world(), code ? code : 1);
#else
    (void)code;
#endif
}

wgml_status wgml_dist_allreduce_host(double *data, size_t n, wgml_reduce_op op)
{
    wgml_status settled = settle_inflight();
    if (settled) return settled;
    if ((!data && n) || (op != WGML_REDUCE_SUM && op != WGML_REDUCE_MEAN))
        return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_allreduce_host: data is NULL or op %d is not a wgml_reduce_op", (int)op);
#ifdef WGML_HAVE_MPI
    if (wgml_dist.mpi && n) {
        if (n > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_allreduce_host: %zu values, past MPI's int count", n);
        int rc = wgml_mpi_allreduce_sum(NULL, data, (int)n, WGML_MPI_DOUBLE, wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(NULL, rc, "dist_allreduce_host");
        if (op == WGML_REDUCE_MEAN)
            for (size_t i = 0; i < n; i++) data[i] /= wgml_dist.size;
    }
#endif
    return WGML_OK;
}

wgml_status wgml_dist_broadcast_host(void *data, size_t bytes)
{
    wgml_status settled = settle_inflight();
    if (settled) return settled;
    if (!data && bytes) return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_broadcast_host: data is NULL");
#ifdef WGML_HAVE_MPI
    if (wgml_dist.mpi && bytes) {
        if (bytes > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_broadcast_host: %zu bytes, past MPI's int count", bytes);
        int rc = wgml_mpi_bcast(data, (int)bytes, WGML_MPI_BYTE, 0, wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(NULL, rc, "dist_broadcast_host");
    }
#endif
    return WGML_OK;
}

/* The tensors usable by a collective: evaluated, contiguous f32 of ctx; their total count. */
static wgml_status check_tensors(wgml_context *ctx, const char *fn, int n, wgml_tensor *const *tensors, int64_t *total)
{
    char msg[256];
    if (!ctx) return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    if (n < 0 || (n && !tensors)) {
        snprintf(msg, sizeof msg, "%s: bad tensor list (n = %d)", fn, n);
        return wgml_dist_ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
    *total = 0;
    for (int i = 0; i < n; i++) {
        const wgml_tensor *t = tensors[i];
        const char *why = NULL;
        if (!wgml_tensor_valid(t) || t->ctx != ctx) why = "is not a tensor of this context";
        else if (t->status) why = "is in an error state";
        else if (t->op != WGML_TENSOR_STORAGE || !t->buf || !wgml_is_contiguous(t)) why = "must be evaluated and contiguous";
        else if (t->dtype != WGML_F32) why = "must be f32";
        if (why) {
            snprintf(msg, sizeof msg, "%s: tensor %d %s", fn, i, why);
            return wgml_dist_ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
        }
        *total += t->numel;
    }
    return WGML_OK;
}

#ifdef WGML_HAVE_MPI
static size_t bucket_floats(const wgml_context *ctx, size_t default_floats)
{
    double mb = ctx->rt.settings.dist_bucket_mb; /* 0: unset; else in (0, 1024] (settings.c checks) */
    if (mb == 0) return default_floats;
    size_t f = (size_t)(mb * 262144.0);
    return f ? f : 1;
}

/* A shared-memory segment of every rank, slots of slot_bytes (0: the chunks of
   wgml_shm_allreduce), made by all ranks together (collective) where `want` on every rank and
   every rank is on this machine: rank 0 makes it, the others map it by the name it sends,
   then rank 0 unlinks it, so it leaves no file however the ranks end. false on every rank
   where any fails or does not want it (*out NULL, why in err). */
bool wgml_dist_shm_open_all(size_t slot_bytes, bool want, wgml_shm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (wgml_dist.local_size != wgml_dist.size) return snprintf(err, errlen, "the ranks are on more than one machine"), false;
    char name[WGML_SHM_NAME] = "";
    int threads = wgml_dist.shm_threads;
    if (!threads) { /* half the CPUs each rank may use, at most 8 (4 H200s, 16 cores a rank: 1
                       thread 27.8 ms a step, 4 22.3, 8 21.5) */
        int cpus = wgml_usable_cpus();
        threads = cpus / wgml_dist.local_size / 2;
        threads = threads < 1 ? 1 : threads > 8 ? 8 : threads;
    }
    int wanted = want, all = 0;
    if (wgml_mpi_allreduce_sum(&wanted, &all, 1, WGML_MPI_INT, wgml_mpi_world()) != WGML_MPI_SUCCESS || all != wgml_dist.size)
        return snprintf(err, errlen, "not every rank wants it"), false;
    int ok = wgml_dist.rank == 0 ? wgml_shm_create(wgml_dist.size, threads, slot_bytes, name, out, err, errlen) : 0;
    if (wgml_mpi_bcast(name, WGML_SHM_NAME, WGML_MPI_BYTE, 0, wgml_mpi_world()) != WGML_MPI_SUCCESS) ok = 0, name[0] = '\0';
    if (wgml_dist.rank != 0 && name[0]) ok = wgml_shm_attach(name, wgml_dist.size, wgml_dist.rank, out, err, errlen);
    else if (wgml_dist.rank != 0) snprintf(err, errlen, "rank 0 has no segment");
    int failed = !ok, any = 1;
    if (wgml_mpi_allreduce_sum(&failed, &any, 1, WGML_MPI_INT, wgml_mpi_world()) != WGML_MPI_SUCCESS) any = 1;
    if (wgml_dist.rank == 0 && name[0]) wgml_shm_unlink(name);
    if (any) {
        wgml_shm_close(*out);
        *out = NULL;
        return false;
    }
    return true;
}

/* Whether the shared-memory reduction is ready, setting it up on the first call (collective:
   every rank calls it at the same reduction). Any rank that fails: all of them use MPI. */
bool wgml_dist_shm_ready(void)
{
    if (wgml_dist.shm_state) return wgml_dist.shm_state > 0;
    wgml_dist.shm_state = -1;
    if (!wgml_dist_shm_open_all(0, true, &wgml_dist.shm, wgml_dist.shm_error, sizeof wgml_dist.shm_error)) return false;
    wgml_dist.shm_state = 1;
    return true;
}

/* Both host buckets of at least cap floats. */
static wgml_status stage_reserve(wgml_context *ctx, size_t cap)
{
    if (wgml_dist.stage_cap >= cap) return WGML_OK;
    for (int i = 0; i < 2; i++) {
        float *p = realloc(wgml_dist.stage[i], cap * sizeof *p);
        if (!p) return wgml_dist_ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory for the buckets");
        wgml_dist.stage[i] = p;
    }
    wgml_dist.stage_cap = cap;
    return WGML_OK;
}

/* Copies floats [from, from + count) of the tensors' concatenation between the GPU and host
   (to_host: GPU -> host), through storage tensors viewing each tensor's piece. */
static wgml_status move_range(wgml_context *ctx, int n, wgml_tensor *const *tensors, int64_t from, int64_t count,
                              float *host, int to_host)
{
    int64_t base = 0;
    wgml_status st = WGML_OK;
    for (int i = 0; i < n && count > 0 && !st; i++) {
        wgml_tensor *t = tensors[i];
        int64_t lo = from > base ? from - base : 0;
        if (lo >= t->numel) {
            base += t->numel;
            continue;
        }
        int64_t len = t->numel - lo < count ? t->numel - lo : count;
        wgml_tensor *piece = wgml_tensor_over(ctx, 1, &len, t->buf, t->offset + lo);
        if (!piece) return ctx->rt.status;
        st = to_host ? wgml_tensor_read(piece, host, (size_t)len) : wgml_tensor_write(piece, host, (size_t)len);
        wgml_tensor_free(piece);
        host += len;
        from += len;
        count -= len;
        base += t->numel;
    }
    return st;
}

/* MPI's sums divided by the ranks, for the mean (the shared-memory reduction divides its own) */
void wgml_dist_mean_over_ranks(float *v, int64_t n)
{
    float size = (float)wgml_dist.size; /* the same division on every rank: the same bits */
    for (int64_t i = 0; i < n; i++) v[i] /= size;
}

/* Waits for bucket b's reduction and writes it back. */
static wgml_status finish_bucket(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_mpi_request *req, int64_t from,
                                 int64_t count, float *host, wgml_reduce_op op)
{
    double t0 = wgml_host_seconds();
    int rc = wgml_mpi_wait(req);
    double t1 = wgml_host_seconds();
    wgml_dist.stats.reduce_seconds += t1 - t0;
    if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(ctx, rc, "dist_allreduce");
    if (op == WGML_REDUCE_MEAN) wgml_dist_mean_over_ranks(host, count);
    wgml_status st = move_range(ctx, n, tensors, from, count, host, 0);
    wgml_dist.stats.copy_in_seconds += wgml_host_seconds() - t1;
    return st;
}
#endif

#ifdef WGML_HAVE_MPI
/* The settings that shape the collectives (bucket sizes, which path) must be the same on
   every rank: ranks that differ would pair MPI calls of different sizes, which Open MPI may
   answer by writing past a buffer. Rank 0's values go to all, and every rank fails alike,
   with words, where any differs. Once a context (a collective the first time it is asked):
   the context's end forgets it (a later context at the same address is asked again, as it is
   on every other rank). */
static const char agreed_key;

static void agreed_release(wgml_context *ctx, void *state)
{
    (void)state;
    if (wgml_dist.agreed == ctx) wgml_dist.agreed = NULL;
}

static wgml_status agree_settings(wgml_context *ctx, const char *fn)
{
    const wgml_settings *s = &ctx->rt.settings;
    /* (the reduction's threads need no agreement: rank 0's count, in the segment, holds) */
    if (!wgml_dist.shm_state) wgml_dist.shm_threads = s->dist_threads;
    if (wgml_dist.agreed == ctx) return WGML_OK;
    int64_t mine[5] = {(int64_t)bucket_floats(ctx, DEFAULT_BUCKET_FLOATS), (int64_t)bucket_floats(ctx, DEFAULT_OVERLAP_BUCKET_FLOATS),
                       s->dist_shm, s->dist_f16, s->dist_overlap};
    int64_t root[5];
    memcpy(root, mine, sizeof root);
    int rc = wgml_mpi_bcast(root, 5, WGML_MPI_INT64, 0, wgml_mpi_world());
    if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(ctx, rc, fn);
    int differs = memcmp(root, mine, sizeof mine) != 0, any = differs;
    if ((rc = wgml_mpi_allreduce_sum(&differs, &any, 1, WGML_MPI_INT, wgml_mpi_world())) != WGML_MPI_SUCCESS)
        return wgml_dist_mpi_fail(ctx, rc, fn);
    if (any) {
        char msg[320];
        snprintf(msg, sizeof msg, "%s: %d rank(s) have other data-parallel settings than rank 0 (this one %s): "
                 "WGML_DIST_BUCKET_MB, WGML_DIST_SHM, WGML_DIST_F16 and WGML_DIST_OVERLAP (or their wgml_context_desc "
                 "fields) must be the same on every rank", fn, any, differs ? "among them" : "not");
        return wgml_dist_ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
    if (!wgml_extension_make(ctx, &agreed_key, 1, agreed_release)) return ctx->rt.status;
    wgml_dist.agreed = ctx;
    return WGML_OK;
}
#endif

wgml_status wgml_dist_allreduce(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_reduce_op op)
{
    int64_t total = 0;
    wgml_status st = check_tensors(ctx, "dist_allreduce", n, tensors, &total);
    if (st || (st = settle_inflight())) return st;
    if (op != WGML_REDUCE_SUM && op != WGML_REDUCE_MEAN) {
        char msg[128];
        snprintf(msg, sizeof msg, "dist_allreduce: op %d is not a wgml_reduce_op", (int)op);
        return wgml_dist_ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
#ifdef WGML_HAVE_MPI
    if (!wgml_dist.mpi || !total) return WGML_OK;
    if ((st = agree_settings(ctx, "dist_allreduce"))) return st;
    size_t bucket = bucket_floats(ctx, DEFAULT_BUCKET_FLOATS);
    if ((st = stage_reserve(ctx, bucket))) return st;
    wgml_dist.stats.calls++;
    wgml_dist.stats.bytes += (uint64_t)total * 4;
    wgml_dist.stats.values += (uint64_t)total;
    if (ctx->rt.settings.dist_shm && wgml_dist_shm_ready()) { /* one bucket after the other, each in place */
        wgml_dist.stats.shared_memory = 1;
        wgml_dist.stats.shared_memory_threads = wgml_shm_threads(wgml_dist.shm);
        for (int64_t from = 0; from < total && !st; from += (int64_t)bucket) {
            int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
            double t0 = wgml_host_seconds();
            if ((st = move_range(ctx, n, tensors, from, count, wgml_dist.stage[0], 1))) break;
            double t1 = wgml_host_seconds();
            wgml_dist.stats.rank_wait_seconds +=
                wgml_shm_allreduce(wgml_dist.shm, wgml_dist.stage[0], false, wgml_dist.stage[0], (size_t)count, op == WGML_REDUCE_MEAN);
            double t2 = wgml_host_seconds();
            st = move_range(ctx, n, tensors, from, count, wgml_dist.stage[0], 0);
            wgml_dist.stats.copy_out_seconds += t1 - t0;
            wgml_dist.stats.reduce_seconds += t2 - t1;
            wgml_dist.stats.copy_in_seconds += wgml_host_seconds() - t2;
        }
        return st;
    }
    wgml_dist.stats.shared_memory = 0;
    /* bucket k is read while bucket k - 1 is being reduced; reads wait for the GPU */
    wgml_mpi_request req[2] = {{0, false}, {0, false}};
    int64_t start[2] = {0, 0}, len[2] = {0, 0};
    int k = 0;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket, k ^= 1) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        double t0 = wgml_host_seconds();
        st = move_range(ctx, n, tensors, from, count, wgml_dist.stage[k], 1);
        wgml_dist.stats.copy_out_seconds += wgml_host_seconds() - t0;
        if (st) break;
        int rc = wgml_mpi_iallreduce_sum(wgml_dist.stage[k], (int)count, WGML_MPI_FLOAT, wgml_mpi_world(), &req[k]);
        if (rc != WGML_MPI_SUCCESS) {
            st = wgml_dist_mpi_fail(ctx, rc, "dist_allreduce");
            break;
        }
        start[k] = from;
        len[k] = count;
        if (req[k ^ 1].active)
            st = finish_bucket(ctx, n, tensors, &req[k ^ 1], start[k ^ 1], len[k ^ 1], wgml_dist.stage[k ^ 1], op);
    }
    /* the buckets still in flight: waited for even after a failure, so none outlives its buffer */
    for (int j = 0; j < 2; j++) {
        k ^= 1;
        if (!req[k].active) continue;
        if (st) wgml_mpi_wait(&req[k]);
        else st = finish_bucket(ctx, n, tensors, &req[k], start[k], len[k], wgml_dist.stage[k], op);
    }
    return st;
#else
    return WGML_OK;
#endif
}

wgml_status wgml_dist_broadcast(wgml_context *ctx, int n, wgml_tensor *const *tensors)
{
    int64_t total = 0;
    wgml_status st = check_tensors(ctx, "dist_broadcast", n, tensors, &total);
    if (st || (st = settle_inflight())) return st;
#ifdef WGML_HAVE_MPI
    if (!wgml_dist.mpi) return WGML_OK;
    if ((st = agree_settings(ctx, "dist_broadcast"))) return st;
    /* the sizes first, so that ranks whose models differ fail with words, not garbage */
    int64_t root_total = total;
    int rc = wgml_mpi_bcast(&root_total, 1, WGML_MPI_INT64, 0, wgml_mpi_world());
    if (rc != WGML_MPI_SUCCESS) return wgml_dist_mpi_fail(ctx, rc, "dist_broadcast");
    /* every rank learns whether any differs, so all of them fail together (rank 0 too) */
    int differs = root_total != total, any = differs;
    if ((rc = wgml_mpi_allreduce_sum(&differs, &any, 1, WGML_MPI_INT, wgml_mpi_world())) != WGML_MPI_SUCCESS)
        return wgml_dist_mpi_fail(ctx, rc, "dist_broadcast");
    if (any) {
        char msg[256];
        if (differs)
            snprintf(msg, sizeof msg, "dist_broadcast: rank %d has %lld floats in %d tensors, rank 0 %lld (not the same model)",
                     wgml_dist.rank, (long long)total, n, (long long)root_total);
        else
            snprintf(msg, sizeof msg, "dist_broadcast: %d rank(s) have tensors of another size than rank 0's %lld floats "
                     "(not the same model)", any, (long long)root_total);
        return wgml_dist_ctx_fail(ctx, WGML_ERROR_SHAPE, msg);
    }
    size_t bucket = bucket_floats(ctx, DEFAULT_BUCKET_FLOATS);
    if ((st = stage_reserve(ctx, bucket))) return st;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        if (wgml_dist.rank == 0) st = move_range(ctx, n, tensors, from, count, wgml_dist.stage[0], 1);
        if (st) break;
        if ((rc = wgml_mpi_bcast(wgml_dist.stage[0], (int)count, WGML_MPI_FLOAT, 0, wgml_mpi_world())) != WGML_MPI_SUCCESS)
            return wgml_dist_mpi_fail(ctx, rc, "dist_broadcast");
        if (wgml_dist.rank != 0) st = move_range(ctx, n, tensors, from, count, wgml_dist.stage[0], 0);
    }
    return st;
#else
    return WGML_OK;
#endif
}

static wgml_status average_gradients(wgml_optimizer *opt, wgml_tensor *grads, void *user)
{
    (void)opt;
    (void)user;
    wgml_context *ctx = wgml_tensor_context(grads);
#ifdef WGML_HAVE_MPI
    /* the step's compute ends here: timed apart from the copy-out that follows */
    double t0 = wgml_host_seconds();
    wgml_status st = wgml_synchronize(ctx);
    wgml_dist.stats.gpu_wait_seconds += wgml_host_seconds() - t0;
    if (st) return st;
#endif
    return wgml_dist_allreduce(ctx, 1, &grads, WGML_REDUCE_MEAN);
}

wgml_status wgml_dist_data_parallel(wgml_optimizer *opt)
{
    if (!opt) return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_data_parallel: opt is NULL");
    if (!wgml_dist.mpi) return WGML_OK;
    /* each rank its own random numbers (dropout), from the seed they share */
    wgml_status st = wgml_rng_set_stream(wgml_optimizer_owner(opt), (uint32_t)wgml_dist_rank());
    if (st) return st;
#ifdef WGML_HAVE_MPI
    /* dist_overlap -1 (WGML_DIST_OVERLAP=0): the blocking all-reduce after the whole backward
       pass (the reference the overlapped one is tested against) */
    const wgml_settings *set = &wgml_optimizer_owner(opt)->rt.settings;
    if ((st = agree_settings(wgml_optimizer_owner(opt), "dist_data_parallel"))) return st;
    wgml_dist.inline_mpi = set->dist_inline;
    if (set->dist_overlap) {
        /* dist_defer (the default; WGML_DIST_DEFER=0: off): the step's end waits for the next
           step's first bucket, whose host work is done meanwhile (optim.c, carry_step) */
        return wgml_dist_overlap(opt, (int64_t)bucket_floats(wgml_optimizer_owner(opt), DEFAULT_OVERLAP_BUCKET_FLOATS),
                                 set->dist_defer);
    }
#endif
    return wgml_optimizer_set_grad_hook(opt, average_gradients, NULL);
}
