/*
 * Data parallelism over MPI (wgml.h, "distributed"). WebGPU buffers cannot be handed to MPI,
 * so tensors travel through host memory: a bucket is read from the GPU, its MPI_Iallreduce
 * started, and the next bucket read while it runs; results are written back with the queue's
 * writes, which the next submit orders before its kernels.
 *
 * Built without MPI (WGML_HAVE_MPI undefined), or in a process no launcher started, the
 * process is rank 0 of 1: the collectives check their arguments and leave the data as it is.
 *
 * The library does not link MPI, nor include its header: it reaches MPI through its own seam
 * (train/mpi_abi.h), which finds the MPI in the process when a program links one, else, in a
 * process an MPI launcher started, the library of that launcher's family (Open MPI's or
 * MPICH's), opened then, and speaks that family's binary interface. So one build runs under
 * either launcher; libwgml.so and the wgml command load, and Python imports them, on machines
 * without MPI, and one process never loads it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/api_lock.h"
#include "core/buffer.h"
#include "core/context.h"
#include "engine/executor.h"
#include "runtime/settings.h"
#include "train/dist_shm.h"
#include "train/grad_buckets.h"
#include "train/mpi_abi.h"

#define DEFAULT_BUCKET_FLOATS (4u << 20)
/* overlapped: about half a nanoGPT block (4 MB), so the first all-reduce starts early */
#define DEFAULT_OVERLAP_BUCKET_FLOATS (1u << 20)

static struct {
    int started;     /* wgml_dist_init ran */
    int mpi;         /* collectives go through MPI (more than one rank) */
    int owns_mpi;    /* we called MPI_Init, so we call MPI_Finalize */
    int mpi_thread;  /* MPI may be called from a thread other than the main one */
    int defer;       /* data parallel defers each step's end (settings: dist_defer) */
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
} dist = {.size = 1, .local_size = 1};

static wgml_status dist_fail(wgml_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static wgml_status dist_fail(wgml_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dist.error, sizeof dist.error, fmt, ap);
    va_end(ap);
    return st;
}

/* A failure of a call that has a context: its message there and in dist.error. */
static wgml_status ctx_fail(wgml_context *ctx, wgml_status st, const char *msg)
{
    snprintf(dist.error, sizeof dist.error, "%s", msg);
    return ctx ? wgml_fail(ctx, st, "%s", msg) : st;
}

#ifdef WGML_HAVE_MPI
/* Set by the launchers we know (Open MPI, MPICH/Hydra, PMIx, Slurm's PMI): without one, a
   process is a lone rank and MPI is not touched (a singleton MPI_Init would be slow). */
static int launched(void) { return dist.launch.launched; }
#endif

/* The launcher's count of ranks, as it gave it (Open MPI's, else MPICH/Hydra's), or NULL */
static const char *launcher_size(void) { return *dist.launch.size ? dist.launch.size : NULL; }

const char *wgml_dist_error_message(void) { return dist.error; }
int wgml_dist_rank(void) { return dist.rank; }
int wgml_dist_size(void) { return dist.size; }
int wgml_dist_local_rank(void) { return dist.local_rank; }
int wgml_dist_local_size(void) { return dist.local_size; }

void wgml_dist_stats_get(wgml_dist_stats *stats)
{
    if (stats) *stats = dist.stats;
}

void wgml_dist_stats_reset(void) { memset(&dist.stats, 0, sizeof dist.stats); }

#ifdef WGML_HAVE_MPI
/* MPI's words for an error code, after what we were doing. */
static wgml_status mpi_fail(wgml_context *ctx, int code, const char *what)
{
    char text[256];
    wgml_mpi_error_string(code, text, sizeof text);
    char msg[512];
    snprintf(msg, sizeof msg, "%s: MPI error on rank %d of %d: %s", what, dist.rank, dist.size, text);
    return ctx_fail(ctx, WGML_ERROR_IO, msg);
}
#endif

wgml_status wgml_dist_init(void)
{
    if (dist.started) return WGML_OK;
    wgml_launch_settings_read(&dist.launch);
#ifdef WGML_HAVE_MPI
    wgml_mpi_family launcher = dist.launch.family == WGML_LAUNCHER_OPEN_MPI ? WGML_MPI_OPEN_MPI
                               : dist.launch.family == WGML_LAUNCHER_MPICH  ? WGML_MPI_MPICH
                                                                             : WGML_MPI_UNKNOWN;
    if (launched() && !wgml_mpi_load(dist.launch.mpi_library, launcher)) {
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
                return mpi_fail(NULL, rc, "dist_init: MPI_Init_thread");
            dist.owns_mpi = 1;
        } else {
            wgml_mpi_query_thread(&threads);
        }
        dist.mpi_thread = threads >= WGML_MPI_THREAD_SERIALIZED;
        /* errors come back as codes, which become statuses, instead of ending the process */
        wgml_mpi_comm world = wgml_mpi_world(), local;
        wgml_mpi_errors_return(world);
        wgml_mpi_comm_rank(world, &dist.rank);
        wgml_mpi_comm_size(world, &dist.size);
        if (wgml_mpi_comm_split_shared(world, dist.rank, &local) == WGML_MPI_SUCCESS) {
            wgml_mpi_comm_rank(local, &dist.local_rank);
            wgml_mpi_comm_size(local, &dist.local_size);
            wgml_mpi_comm_free(&local);
        }
        dist.mpi = dist.size > 1;
        /* another MPI's launcher (MPICH's mpiexec for a program that links Open MPI, or
           WGML_MPI_LIBRARY naming the other family's): every process would be a lone rank,
           training the whole batch into the same files */
        const char *n = launcher_size();
        if (n && atoi(n) > 1 && dist.size == 1)
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
    dist.started = 1;
    return WGML_OK;
}

#ifdef WGML_HAVE_MPI
static void reducer_stop(void); /* ends the overlapped all-reduce's thread */
#endif

/* The context whose step has buckets in flight (a deferred step: train/grad_buckets.h) */
static wgml_context *inflight;

/* A collective of the calling thread first ends the step in flight: every rank must call its
   collectives in one order (the step's buckets, then this), and MPI from one thread at a
   time. */
static wgml_status settle_inflight(void)
{
    wgml_context *ctx = inflight;
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
    reducer_stop();
#endif
    wgml_shm_close(dist.shm);
    dist.shm = NULL;
    dist.shm_state = 0;
    dist.agreed = NULL;
    free(dist.stage[0]);
    free(dist.stage[1]);
    dist.stage[0] = dist.stage[1] = NULL;
    dist.stage_cap = 0;
#ifdef WGML_HAVE_MPI
    if (dist.owns_mpi) {
        int rc = wgml_mpi_finalize();
        dist.owns_mpi = 0;
        if (rc != WGML_MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_finalize");
    }
#endif
    dist.started = dist.mpi = 0;
    dist.rank = dist.local_rank = 0;
    dist.size = dist.local_size = 1;
    return settled;
}

wgml_status wgml_dist_barrier(void)
{
    wgml_status st = settle_inflight();
    if (st) return st;
#ifdef WGML_HAVE_MPI
    if (dist.mpi) {
        int rc = wgml_mpi_barrier(wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_barrier");
    }
#endif
    return WGML_OK;
}

void wgml_dist_abort(int code)
{
#ifdef WGML_HAVE_MPI
    if (dist.mpi) wgml_mpi_abort(wgml_mpi_world(), code ? code : 1);
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
    if (dist.mpi && n) {
        if (n > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_allreduce_host: %zu values, past MPI's int count", n);
        int rc = wgml_mpi_allreduce_sum(NULL, data, (int)n, WGML_MPI_DOUBLE, wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_allreduce_host");
        if (op == WGML_REDUCE_MEAN)
            for (size_t i = 0; i < n; i++) data[i] /= dist.size;
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
    if (dist.mpi && bytes) {
        if (bytes > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_broadcast_host: %zu bytes, past MPI's int count", bytes);
        int rc = wgml_mpi_bcast(data, (int)bytes, WGML_MPI_BYTE, 0, wgml_mpi_world());
        if (rc != WGML_MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_broadcast_host");
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
        return ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
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
            return ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
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
static bool shm_open_all(size_t slot_bytes, bool want, wgml_shm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (dist.local_size != dist.size) return snprintf(err, errlen, "the ranks are on more than one machine"), false;
    char name[WGML_SHM_NAME] = "";
    int threads = dist.shm_threads;
    if (!threads) { /* half the CPUs each rank may use, at most 8 (4 H200s, 16 cores a rank: 1
                       thread 27.8 ms a step, 4 22.3, 8 21.5) */
        int cpus = wgml_usable_cpus();
        threads = cpus / dist.local_size / 2;
        threads = threads < 1 ? 1 : threads > 8 ? 8 : threads;
    }
    int wanted = want, all = 0;
    if (wgml_mpi_allreduce_sum(&wanted, &all, 1, WGML_MPI_INT, wgml_mpi_world()) != WGML_MPI_SUCCESS || all != dist.size)
        return snprintf(err, errlen, "not every rank wants it"), false;
    int ok = dist.rank == 0 ? wgml_shm_create(dist.size, threads, slot_bytes, name, out, err, errlen) : 0;
    if (wgml_mpi_bcast(name, WGML_SHM_NAME, WGML_MPI_BYTE, 0, wgml_mpi_world()) != WGML_MPI_SUCCESS) ok = 0, name[0] = '\0';
    if (dist.rank != 0 && name[0]) ok = wgml_shm_attach(name, dist.size, dist.rank, out, err, errlen);
    else if (dist.rank != 0) snprintf(err, errlen, "rank 0 has no segment");
    int failed = !ok, any = 1;
    if (wgml_mpi_allreduce_sum(&failed, &any, 1, WGML_MPI_INT, wgml_mpi_world()) != WGML_MPI_SUCCESS) any = 1;
    if (dist.rank == 0 && name[0]) wgml_shm_unlink(name);
    if (any) {
        wgml_shm_close(*out);
        *out = NULL;
        return false;
    }
    return true;
}

/* Whether the shared-memory reduction is ready, setting it up on the first call (collective:
   every rank calls it at the same reduction). Any rank that fails: all of them use MPI. */
static bool shm_ready(void)
{
    if (dist.shm_state) return dist.shm_state > 0;
    dist.shm_state = -1;
    if (!shm_open_all(0, true, &dist.shm, dist.shm_error, sizeof dist.shm_error)) return false;
    dist.shm_state = 1;
    return true;
}

/* Both host buckets of at least cap floats. */
static wgml_status stage_reserve(wgml_context *ctx, size_t cap)
{
    if (dist.stage_cap >= cap) return WGML_OK;
    for (int i = 0; i < 2; i++) {
        float *p = realloc(dist.stage[i], cap * sizeof *p);
        if (!p) return ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory for the buckets");
        dist.stage[i] = p;
    }
    dist.stage_cap = cap;
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
static void mean_over_ranks(float *v, int64_t n)
{
    float size = (float)dist.size; /* the same division on every rank: the same bits */
    for (int64_t i = 0; i < n; i++) v[i] /= size;
}

/* Waits for bucket b's reduction and writes it back. */
static wgml_status finish_bucket(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_mpi_request *req, int64_t from,
                                 int64_t count, float *host, wgml_reduce_op op)
{
    double t0 = wgml_host_seconds();
    int rc = wgml_mpi_wait(req);
    double t1 = wgml_host_seconds();
    dist.stats.reduce_seconds += t1 - t0;
    if (rc != WGML_MPI_SUCCESS) return mpi_fail(ctx, rc, "dist_allreduce");
    if (op == WGML_REDUCE_MEAN) mean_over_ranks(host, count);
    wgml_status st = move_range(ctx, n, tensors, from, count, host, 0);
    dist.stats.copy_in_seconds += wgml_host_seconds() - t1;
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
    if (dist.agreed == ctx) dist.agreed = NULL;
}

static wgml_status agree_settings(wgml_context *ctx, const char *fn)
{
    const wgml_settings *s = &ctx->rt.settings;
    /* (the reduction's threads need no agreement: rank 0's count, in the segment, holds) */
    if (!dist.shm_state) dist.shm_threads = s->dist_threads;
    if (dist.agreed == ctx) return WGML_OK;
    int64_t mine[5] = {(int64_t)bucket_floats(ctx, DEFAULT_BUCKET_FLOATS), (int64_t)bucket_floats(ctx, DEFAULT_OVERLAP_BUCKET_FLOATS),
                       s->dist_shm, s->dist_f16, s->dist_overlap};
    int64_t root[5];
    memcpy(root, mine, sizeof root);
    int rc = wgml_mpi_bcast(root, 5, WGML_MPI_INT64, 0, wgml_mpi_world());
    if (rc != WGML_MPI_SUCCESS) return mpi_fail(ctx, rc, fn);
    int differs = memcmp(root, mine, sizeof mine) != 0, any = differs;
    if ((rc = wgml_mpi_allreduce_sum(&differs, &any, 1, WGML_MPI_INT, wgml_mpi_world())) != WGML_MPI_SUCCESS)
        return mpi_fail(ctx, rc, fn);
    if (any) {
        char msg[320];
        snprintf(msg, sizeof msg, "%s: %d rank(s) have other data-parallel settings than rank 0 (this one %s): "
                 "WGML_DIST_BUCKET_MB, WGML_DIST_SHM, WGML_DIST_F16 and WGML_DIST_OVERLAP (or their wgml_context_desc "
                 "fields) must be the same on every rank", fn, any, differs ? "among them" : "not");
        return ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
    if (!wgml_extension_make(ctx, &agreed_key, 1, agreed_release)) return ctx->rt.status;
    dist.agreed = ctx;
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
        return ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
#ifdef WGML_HAVE_MPI
    if (!dist.mpi || !total) return WGML_OK;
    if ((st = agree_settings(ctx, "dist_allreduce"))) return st;
    size_t bucket = bucket_floats(ctx, DEFAULT_BUCKET_FLOATS);
    if ((st = stage_reserve(ctx, bucket))) return st;
    dist.stats.calls++;
    dist.stats.bytes += (uint64_t)total * 4;
    dist.stats.values += (uint64_t)total;
    if (ctx->rt.settings.dist_shm && shm_ready()) { /* one bucket after the other, each in place */
        dist.stats.shared_memory = 1;
        dist.stats.shared_memory_threads = wgml_shm_threads(dist.shm);
        for (int64_t from = 0; from < total && !st; from += (int64_t)bucket) {
            int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
            double t0 = wgml_host_seconds();
            if ((st = move_range(ctx, n, tensors, from, count, dist.stage[0], 1))) break;
            double t1 = wgml_host_seconds();
            dist.stats.rank_wait_seconds +=
                wgml_shm_allreduce(dist.shm, dist.stage[0], false, dist.stage[0], (size_t)count, op == WGML_REDUCE_MEAN);
            double t2 = wgml_host_seconds();
            st = move_range(ctx, n, tensors, from, count, dist.stage[0], 0);
            dist.stats.copy_out_seconds += t1 - t0;
            dist.stats.reduce_seconds += t2 - t1;
            dist.stats.copy_in_seconds += wgml_host_seconds() - t2;
        }
        return st;
    }
    dist.stats.shared_memory = 0;
    /* bucket k is read while bucket k - 1 is being reduced; reads wait for the GPU */
    wgml_mpi_request req[2] = {{0, false}, {0, false}};
    int64_t start[2] = {0, 0}, len[2] = {0, 0};
    int k = 0;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket, k ^= 1) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        double t0 = wgml_host_seconds();
        st = move_range(ctx, n, tensors, from, count, dist.stage[k], 1);
        dist.stats.copy_out_seconds += wgml_host_seconds() - t0;
        if (st) break;
        int rc = wgml_mpi_iallreduce_sum(dist.stage[k], (int)count, WGML_MPI_FLOAT, wgml_mpi_world(), &req[k]);
        if (rc != WGML_MPI_SUCCESS) {
            st = mpi_fail(ctx, rc, "dist_allreduce");
            break;
        }
        start[k] = from;
        len[k] = count;
        if (req[k ^ 1].active)
            st = finish_bucket(ctx, n, tensors, &req[k ^ 1], start[k ^ 1], len[k ^ 1], dist.stage[k ^ 1], op);
    }
    /* the buckets still in flight: waited for even after a failure, so none outlives its buffer */
    for (int j = 0; j < 2; j++) {
        k ^= 1;
        if (!req[k].active) continue;
        if (st) wgml_mpi_wait(&req[k]);
        else st = finish_bucket(ctx, n, tensors, &req[k], start[k], len[k], dist.stage[k], op);
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
    if (!dist.mpi) return WGML_OK;
    if ((st = agree_settings(ctx, "dist_broadcast"))) return st;
    /* the sizes first, so that ranks whose models differ fail with words, not garbage */
    int64_t root_total = total;
    int rc = wgml_mpi_bcast(&root_total, 1, WGML_MPI_INT64, 0, wgml_mpi_world());
    if (rc != WGML_MPI_SUCCESS) return mpi_fail(ctx, rc, "dist_broadcast");
    /* every rank learns whether any differs, so all of them fail together (rank 0 too) */
    int differs = root_total != total, any = differs;
    if ((rc = wgml_mpi_allreduce_sum(&differs, &any, 1, WGML_MPI_INT, wgml_mpi_world())) != WGML_MPI_SUCCESS)
        return mpi_fail(ctx, rc, "dist_broadcast");
    if (any) {
        char msg[256];
        if (differs)
            snprintf(msg, sizeof msg, "dist_broadcast: rank %d has %lld floats in %d tensors, rank 0 %lld (not the same model)",
                     dist.rank, (long long)total, n, (long long)root_total);
        else
            snprintf(msg, sizeof msg, "dist_broadcast: %d rank(s) have tensors of another size than rank 0's %lld floats "
                     "(not the same model)", any, (long long)root_total);
        return ctx_fail(ctx, WGML_ERROR_SHAPE, msg);
    }
    size_t bucket = bucket_floats(ctx, DEFAULT_BUCKET_FLOATS);
    if ((st = stage_reserve(ctx, bucket))) return st;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        if (dist.rank == 0) st = move_range(ctx, n, tensors, from, count, dist.stage[0], 1);
        if (st) break;
        if ((rc = wgml_mpi_bcast(dist.stage[0], (int)count, WGML_MPI_FLOAT, 0, wgml_mpi_world())) != WGML_MPI_SUCCESS)
            return mpi_fail(ctx, rc, "dist_broadcast");
        if (dist.rank != 0) st = move_range(ctx, n, tensors, from, count, dist.stage[0], 0);
    }
    return st;
#else
    return WGML_OK;
#endif
}

/* ---------------------------------------------------------------- the overlapped all-reduce

   The optimiser hands over each bucket of gradients as soon as its kernels are submitted
   (train/grad_buckets.h), from the last layer back. A bucket is copied on the GPU into a
   mappable buffer of its own (under dist_f16 packed to f16 on the way: half the bytes) and
   mapped without waiting; once mapped, a thread of ours sums it over the ranks straight from
   the mapped memory into one host array (f32 sums; the mean): through wgml's shared-memory
   segment where the ranks share a machine (dist_shm.h), else MPI_Allreduce; the main thread
   then writes it back into the gradient buffer through a mapped upload buffer of the bucket's
   and a copy on the GPU, which the update's submit follows. So the reduction runs beside the
   remaining backward kernels and only its part after the last bucket is exposed; the GPU's
   copies are not hidden (WebGPU's one queue runs them apart from the kernels: measured on
   H200s, docs/MEASUREMENTS.md).

   Where the runtime makes buffers over host memory (Dawn's host-mapped pointers) and the ranks
   share a machine, the gradients skip the staging: a segment holds a slot of the whole
   gradient buffer per rank and one for the sums, each rank's GPU copies a bucket into its own
   slot, the ranks' threads sum the bucket's floats there once every copy has landed (each its
   1/N), and each GPU copies the sums straight back (dist_hostmap). */

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
    if (inflight == ctx) inflight = NULL;
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
    if (j->shm && shm_ready()) {
        *waited = wgml_shm_allreduce(dist.shm, j->send, j->f16, j->out, (size_t)j->count, true);
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
        mean_over_ranks(j->recv, j->count);
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

static void reducer_stop(void)
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
    if (!dist.mpi_thread || dist.inline_mpi) {
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
        if (!b->upload) return ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: no upload buffer for a bucket"), NULL;
    }
    float *dst = wgpuBufferGetMappedRange(b->upload, 0, (size_t)b->upload_size);
    if (!dst) ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: an upload buffer has no mapped range");
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
                    st = ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: a gradient bucket's copy into shared memory failed");
                if (!st && !failed) st = wgml_map_end(&ctx->rt, &b->map); /* its words */
                b->state = B_DONE; /* nothing mapped: nothing to reduce or unmap */
                continue;
            }
            if (bs->in_slots) { /* its copy has landed in this rank's slot */
                /* (Dawn may answer a lost device's work-done with Success: its slot holds no new gradients) */
                if (!failed && !st && ctx->rt.device_lost) st = wgml_check_device(&ctx->rt);
                reduce_job j = {.count = (int)b->count, .f16 = b->f16, .slots = bs->slots, .from = b->from};
                if (!failed && !st && (b->job = reducer.posted, !reducer_post(&j)))
                    st = ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
                b->state = failed || st ? B_DONE : B_REDUCING;
                if (bs->handed == bs->n) bs->last_mapped = wgml_host_seconds();
                continue;
            }
            const void *src = failed || st ? NULL : wgpuBufferGetConstMappedRange(b->staging, 0, (size_t)wire_bytes(b));
            if (!failed && !st && !src) st = ctx_fail(ctx, WGML_ERROR_DEVICE, "dist_allreduce: a mapped bucket has no range");
            float *out = src ? upload_target(ctx, b) : NULL;
            if (src && !out) {
                st = ctx->rt.status ? ctx->rt.status : WGML_ERROR_DEVICE;
                src = NULL;
            }
            reduce_job j = {.send = src, .recv = bs->host + b->from, .out = out, .count = (int)b->count, .f16 = b->f16,
                            .shm = ctx->rt.settings.dist_shm};
            if (src && (b->job = reducer.posted, !reducer_post(&j)))
                st = ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
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
                    dist.stats.copy_in_seconds += wgml_host_seconds() - t0;
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
    if (until != ONE_PASS) dist.stats.gpu_wait_seconds += wgml_host_seconds() - t_wait;
    reducer_done(&mpi_rc);
    if (!st && !failed && mpi_rc != WGML_MPI_SUCCESS) st = mpi_fail(ctx, mpi_rc, "dist_allreduce");
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
                slot <= rt->limits.maxBufferSize && (double)slot * (dist.size + 1) <= machine / 4;
    char err[256];
    if (!(bs->memory = calloc(1, sizeof *bs->memory))) want = false;
    if (!shm_open_all(slot, want, &bs->slots, err, sizeof err)) {
        free(bs->memory);
        bs->memory = NULL;
        return false;
    }
    bs->memory->map = wgml_shm_mapping(bs->slots);
    atomic_store(&bs->memory->holders, 3); /* (a buffer refused keeps its count: the memory stays, never goes early) */
    WGPUBufferUsage use = WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    bs->mine = wgml_rt_host_buffer(rt, wgml_shm_slot(bs->slots, dist.rank), slot, use, "wgml gradient slot", slot_memory_drop,
                                   bs->memory);
    bs->sums = wgml_rt_host_buffer(rt, wgml_shm_slot(bs->slots, dist.size), slot, use, "wgml gradient sums", slot_memory_drop,
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
    if (count > (int64_t)INT32_MAX) return ctx_fail(ctx, WGML_ERROR_LIMIT, "dist_allreduce: a bucket past MPI's int count");
    if (bs->n == 0) { /* the step's first bucket: G's whole size is known from it (it ends G) */
        inflight = ctx;
        bs->in_slots = slots_ready(ctx, bs, from + count);
        if (!bs->in_slots && from + count > bs->host_cap) { /* (the slots need no host copy) */
            float *h = realloc(bs->host, (size_t)(from + count) * sizeof *h);
            if (!h) return ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
            bs->host = h;
            bs->host_cap = from + count;
        }
        pthread_mutex_lock(&reducer.mu);
        reducer.posted = reducer.done = 0;
        reducer.rc = WGML_MPI_SUCCESS;
        pthread_mutex_unlock(&reducer.mu);
        bs->handed = bs->written = 0;
        bs->f16 = step_f16(ctx);
        dist.stats.calls++;
    }
    if (bs->n == bs->cap) {
        bucket **v = realloc(bs->v, (size_t)(bs->cap + 1) * sizeof *v);
        if (v) bs->v = v;
        if (!v || !(v[bs->cap] = calloc(1, sizeof **v)))
            return ctx_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "dist_allreduce: out of host memory");
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
    if (bs->n == 0 && bs->finished > 0) dist.stats.between_seconds += wgml_host_seconds() - bs->finished;
    bs->n++;
    dist.stats.bytes += (uint64_t)count * (b->f16 ? 2 : 4);
    dist.stats.values += (uint64_t)count;
    dist.stats.buckets++;
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
    if (bs->handed == bs->n && bs->last_mapped > 0) dist.stats.exposed_seconds += end - bs->last_mapped;
    bs->finished = st ? 0 : end;
    dist.stats.shared_memory = bs->in_slots ? 2 : ctx->rt.settings.dist_shm && dist.shm_state > 0; /* (set up by the first job) */
    dist.stats.shared_memory_threads = wgml_shm_threads(bs->in_slots ? bs->slots : dist.stats.shared_memory ? dist.shm : NULL);
    pthread_mutex_lock(&reducer.mu);
    dist.stats.reduce_seconds += reducer.mpi_seconds; /* (the step's jobs, all done now) */
    dist.stats.rank_wait_seconds += reducer.wait_seconds;
    reducer.mpi_seconds = reducer.wait_seconds = 0;
    pthread_mutex_unlock(&reducer.mu);
    bs->n = 0;
    bs->last_mapped = 0;
    inflight = NULL;
    return st;
}
#endif

static wgml_status average_gradients(wgml_optimizer *opt, wgml_tensor *grads, void *user)
{
    (void)opt;
    (void)user;
    wgml_context *ctx = wgml_tensor_context(grads);
#ifdef WGML_HAVE_MPI
    /* the step's compute ends here: timed apart from the copy-out that follows */
    double t0 = wgml_host_seconds();
    wgml_status st = wgml_synchronize(ctx);
    dist.stats.gpu_wait_seconds += wgml_host_seconds() - t0;
    if (st) return st;
#endif
    return wgml_dist_allreduce(ctx, 1, &grads, WGML_REDUCE_MEAN);
}

wgml_status wgml_dist_data_parallel(wgml_optimizer *opt)
{
    if (!opt) return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_data_parallel: opt is NULL");
    if (!dist.mpi) return WGML_OK;
    /* each rank its own random numbers (dropout), from the seed they share */
    wgml_status st = wgml_rng_set_stream(wgml_optimizer_owner(opt), (uint32_t)wgml_dist_rank());
    if (st) return st;
#ifdef WGML_HAVE_MPI
    /* dist_overlap -1 (WGML_DIST_OVERLAP=0): the blocking all-reduce after the whole backward
       pass (the reference the overlapped one is tested against) */
    const wgml_settings *set = &wgml_optimizer_owner(opt)->rt.settings;
    if ((st = agree_settings(wgml_optimizer_owner(opt), "dist_data_parallel"))) return st;
    dist.inline_mpi = set->dist_inline;
    if (set->dist_overlap) {
        /* dist_defer (the default; WGML_DIST_DEFER=0: off): the step's end waits for the next
           step's first bucket, whose host work is done meanwhile (optim.c, carry_step) */
        dist.defer = set->dist_defer;
        wgml_grad_buckets b = {.bucket_floats = (int64_t)bucket_floats(wgml_optimizer_owner(opt), DEFAULT_OVERLAP_BUCKET_FLOATS),
                               .ready = bucket_ready, .finish = buckets_finish, .defer = dist.defer, .user = opt};
        return wgml_optimizer_set_grad_buckets(opt, &b);
    }
#endif
    return wgml_optimizer_set_grad_hook(opt, average_gradients, NULL);
}
