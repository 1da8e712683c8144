/*
 * Data parallelism over MPI (wgml.h, "distributed"). WebGPU buffers cannot be handed to MPI,
 * so tensors travel through host memory: a bucket is read from the GPU, its MPI_Iallreduce
 * started, and the next bucket read while it runs; results are written back with the queue's
 * writes, which the next submit orders before its kernels.
 *
 * Built without MPI (WGML_HAVE_MPI undefined), or in a process no launcher started, the
 * process is rank 0 of 1: the collectives check their arguments and leave the data as it is.
 *
 * The library does not link MPI. It reaches MPI through pointers (mpi_load): found in the
 * process when a program links MPI itself, else, in a process an MPI launcher started, in the
 * MPI library that wgml was built against, opened then. So libwgml.so and the wgml command
 * load, and Python imports them, on machines without MPI, and one process never loads it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WGML_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
/* The MPI functions used here, and Open MPI's predefined handles (data symbols behind
   MPI_COMM_WORLD, MPI_SUM, ...; MPICH's are constants) */
#define MPI_FUNCTIONS(X)                                                                                   \
    X(Abort) X(Allreduce) X(Barrier) X(Bcast) X(Comm_free) X(Comm_rank) X(Comm_set_errhandler) X(Comm_size) \
        X(Comm_split_type) X(Error_string) X(Finalize) X(Iallreduce) X(Init) X(Initialized) X(Wait)
#ifdef OPEN_MPI
#define MPI_HANDLES(X)                                                                                     \
    X(ompi_mpi_comm_world) X(ompi_mpi_op_sum) X(ompi_mpi_byte) X(ompi_mpi_int) X(ompi_mpi_int64_t)        \
        X(ompi_mpi_float) X(ompi_mpi_double) X(ompi_mpi_errors_return) X(ompi_mpi_info_null) X(ompi_request_null)
#else
#define MPI_HANDLES(X)
#endif
static struct {
#define FUNCTION_FIELD(f) __typeof__(&MPI_##f) f;
#define HANDLE_FIELD(h) __typeof__(h) *h;
    MPI_FUNCTIONS(FUNCTION_FIELD) MPI_HANDLES(HANDLE_FIELD)
#undef FUNCTION_FIELD
#undef HANDLE_FIELD
    int tried, ok;
    char error[256];
} mpi;

/* Finds MPI: in the process, else (only called under a launcher) in the library named by
   WGML_MPI_LIBRARY, else the one wgml was built against (WGML_MPI_SONAME, then its file
   WGML_MPI_PATH). 1 when every symbol was found. */
static int mpi_load(const char *lib)
{
    if (mpi.tried) return mpi.ok;
    mpi.tried = 1;
    void *h = dlopen(NULL, RTLD_NOW); /* the process's global symbols */
    if (!h || !dlsym(h, "MPI_Init")) {
        if (*lib) {
            h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
        } else if (!(h = dlopen(WGML_MPI_SONAME, RTLD_NOW | RTLD_GLOBAL))) {
            h = dlopen(WGML_MPI_PATH, RTLD_NOW | RTLD_GLOBAL);
        }
        if (!h) {
            const char *e = dlerror();
            snprintf(mpi.error, sizeof mpi.error, "%s", e ? e : "no MPI library");
            return 0;
        }
    }
    /* (the POSIX way to store dlsym's object pointer in a function pointer) */
#define FIND(name, field)                                                                \
    if (!(*(void **)&mpi.field = dlsym(h, name))) {                                      \
        snprintf(mpi.error, sizeof mpi.error, "%s has no %s", WGML_MPI_SONAME, name);   \
        return 0;                                                                        \
    }
#define FIND_FUNCTION(f) FIND("MPI_" #f, f)
#define FIND_HANDLE(x) FIND(#x, x)
    MPI_FUNCTIONS(FIND_FUNCTION)
    MPI_HANDLES(FIND_HANDLE)
#undef FIND
#undef FIND_FUNCTION
#undef FIND_HANDLE
    return mpi.ok = 1;
}

/* From here on, MPI's names in this file are the pointers found */
#define MPI_Abort (*mpi.Abort)
#define MPI_Allreduce (*mpi.Allreduce)
#define MPI_Barrier (*mpi.Barrier)
#define MPI_Bcast (*mpi.Bcast)
#define MPI_Comm_free (*mpi.Comm_free)
#define MPI_Comm_rank (*mpi.Comm_rank)
#define MPI_Comm_set_errhandler (*mpi.Comm_set_errhandler)
#define MPI_Comm_size (*mpi.Comm_size)
#define MPI_Comm_split_type (*mpi.Comm_split_type)
#define MPI_Error_string (*mpi.Error_string)
#define MPI_Finalize (*mpi.Finalize)
#define MPI_Iallreduce (*mpi.Iallreduce)
#define MPI_Init (*mpi.Init)
#define MPI_Initialized (*mpi.Initialized)
#define MPI_Wait (*mpi.Wait)
#ifdef OPEN_MPI
#define ompi_mpi_comm_world (*mpi.ompi_mpi_comm_world)
#define ompi_mpi_op_sum (*mpi.ompi_mpi_op_sum)
#define ompi_mpi_byte (*mpi.ompi_mpi_byte)
#define ompi_mpi_int (*mpi.ompi_mpi_int)
#define ompi_mpi_int64_t (*mpi.ompi_mpi_int64_t)
#define ompi_mpi_float (*mpi.ompi_mpi_float)
#define ompi_mpi_double (*mpi.ompi_mpi_double)
#define ompi_mpi_errors_return (*mpi.ompi_mpi_errors_return)
#define ompi_mpi_info_null (*mpi.ompi_mpi_info_null)
#define ompi_request_null (*mpi.ompi_request_null)
#endif
#endif

#include "core/api_lock.h"
#include "engine/executor.h"
#include "runtime/settings.h"

#define DEFAULT_BUCKET_FLOATS (4u << 20)

static struct {
    int started;     /* wgml_dist_init ran */
    int mpi;         /* collectives go through MPI (more than one rank) */
    int owns_mpi;    /* we called MPI_Init, so we call MPI_Finalize */
    int rank, size, local_rank, local_size;
    float *stage[2]; /* host buckets, alternating between copy-out and reduction */
    size_t stage_cap;
    wgml_dist_stats stats;
    char error[512];
    wgml_launch_settings launch; /* the launcher's variables, read at each wgml_dist_init */
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
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(code, text, &len);
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
    if (launched() && !mpi_load(dist.launch.mpi_library)) {
        const char *n = launcher_size();
        if (n && strcmp(n, "1") != 0)
            return dist_fail(WGML_ERROR_UNSUPPORTED, "dist_init: started by mpirun with %s ranks, but MPI could not be loaded: %s",
                             n, mpi.error);
    } else if (launched()) {
        int inited = 0, rc;
        MPI_Initialized(&inited);
        if (!inited) {
            if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_init: MPI_Init");
            dist.owns_mpi = 1;
        }
        /* errors come back as codes, which become statuses, instead of ending the process */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &dist.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &dist.size);
        MPI_Comm local;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, dist.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
            MPI_Comm_rank(local, &dist.local_rank);
            MPI_Comm_size(local, &dist.local_size);
            MPI_Comm_free(&local);
        }
        dist.mpi = dist.size > 1;
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

wgml_status wgml_dist_finalize(void)
{
    free(dist.stage[0]);
    free(dist.stage[1]);
    dist.stage[0] = dist.stage[1] = NULL;
    dist.stage_cap = 0;
#ifdef WGML_HAVE_MPI
    if (dist.owns_mpi) {
        int rc = MPI_Finalize();
        dist.owns_mpi = 0;
        if (rc != MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_finalize");
    }
#endif
    dist.started = dist.mpi = 0;
    dist.rank = dist.local_rank = 0;
    dist.size = dist.local_size = 1;
    return WGML_OK;
}

wgml_status wgml_dist_barrier(void)
{
#ifdef WGML_HAVE_MPI
    if (dist.mpi) {
        int rc = MPI_Barrier(MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_barrier");
    }
#endif
    return WGML_OK;
}

void wgml_dist_abort(int code)
{
#ifdef WGML_HAVE_MPI
    if (dist.mpi) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
#else
    (void)code;
#endif
}

wgml_status wgml_dist_allreduce_host(double *data, size_t n, wgml_reduce_op op)
{
    if ((!data && n) || (op != WGML_REDUCE_SUM && op != WGML_REDUCE_MEAN))
        return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_allreduce_host: data is NULL or op %d is not a wgml_reduce_op", (int)op);
#ifdef WGML_HAVE_MPI
    if (dist.mpi && n) {
        if (n > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_allreduce_host: %zu values, past MPI's int count", n);
        int rc = MPI_Allreduce(MPI_IN_PLACE, data, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_allreduce_host");
        if (op == WGML_REDUCE_MEAN)
            for (size_t i = 0; i < n; i++) data[i] /= dist.size;
    }
#endif
    return WGML_OK;
}

wgml_status wgml_dist_broadcast_host(void *data, size_t bytes)
{
    if (!data && bytes) return dist_fail(WGML_ERROR_INVALID_ARGUMENT, "dist_broadcast_host: data is NULL");
#ifdef WGML_HAVE_MPI
    if (dist.mpi && bytes) {
        if (bytes > (size_t)INT32_MAX) return dist_fail(WGML_ERROR_LIMIT, "dist_broadcast_host: %zu bytes, past MPI's int count", bytes);
        int rc = MPI_Bcast(data, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(NULL, rc, "dist_broadcast_host");
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
static size_t bucket_floats(const wgml_context *ctx)
{
    double mb = ctx->rt.settings.dist_bucket_mb; /* (0: unset; else in (0, 1024]) */
    if (!(mb > 0) || mb > 1024) return DEFAULT_BUCKET_FLOATS;
    size_t f = (size_t)(mb * 262144.0);
    return f ? f : 1;
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

/* Waits for bucket b's reduction and writes it back. */
static wgml_status finish_bucket(wgml_context *ctx, int n, wgml_tensor *const *tensors, MPI_Request *req, int64_t from,
                                 int64_t count, float *host, wgml_reduce_op op)
{
    double t0 = wgml_host_seconds();
    int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
    double t1 = wgml_host_seconds();
    dist.stats.reduce_seconds += t1 - t0;
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, "dist_allreduce");
    if (op == WGML_REDUCE_MEAN) {
        float size = (float)dist.size; /* the same division on every rank: the same bits */
        for (int64_t i = 0; i < count; i++) host[i] /= size;
    }
    wgml_status st = move_range(ctx, n, tensors, from, count, host, 0);
    dist.stats.copy_in_seconds += wgml_host_seconds() - t1;
    return st;
}
#endif

wgml_status wgml_dist_allreduce(wgml_context *ctx, int n, wgml_tensor *const *tensors, wgml_reduce_op op)
{
    int64_t total = 0;
    wgml_status st = check_tensors(ctx, "dist_allreduce", n, tensors, &total);
    if (st) return st;
    if (op != WGML_REDUCE_SUM && op != WGML_REDUCE_MEAN) {
        char msg[128];
        snprintf(msg, sizeof msg, "dist_allreduce: op %d is not a wgml_reduce_op", (int)op);
        return ctx_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, msg);
    }
#ifdef WGML_HAVE_MPI
    if (!dist.mpi || !total) return WGML_OK;
    size_t bucket = bucket_floats(ctx);
    if ((st = stage_reserve(ctx, bucket))) return st;
    dist.stats.calls++;
    dist.stats.bytes += (uint64_t)total * 4;
    /* bucket k is read while bucket k - 1 is being reduced; reads wait for the GPU */
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int64_t start[2] = {0, 0}, len[2] = {0, 0};
    int k = 0;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket, k ^= 1) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        double t0 = wgml_host_seconds();
        st = move_range(ctx, n, tensors, from, count, dist.stage[k], 1);
        dist.stats.copy_out_seconds += wgml_host_seconds() - t0;
        if (st) break;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, dist.stage[k], (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(ctx, rc, "dist_allreduce");
            break;
        }
        start[k] = from;
        len[k] = count;
        if (req[k ^ 1] != MPI_REQUEST_NULL)
            st = finish_bucket(ctx, n, tensors, &req[k ^ 1], start[k ^ 1], len[k ^ 1], dist.stage[k ^ 1], op);
    }
    /* the buckets still in flight: waited for even after a failure, so none outlives its buffer */
    for (int j = 0; j < 2; j++) {
        k ^= 1;
        if (req[k] == MPI_REQUEST_NULL) continue;
        if (st) MPI_Wait(&req[k], MPI_STATUS_IGNORE);
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
    if (st) return st;
#ifdef WGML_HAVE_MPI
    if (!dist.mpi) return WGML_OK;
    /* the sizes first, so that ranks whose models differ fail with words, not garbage */
    int64_t root_total = total;
    int rc = MPI_Bcast(&root_total, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(ctx, rc, "dist_broadcast");
    /* every rank learns whether any differs, so all of them fail together (rank 0 too) */
    int differs = root_total != total, any = differs;
    if ((rc = MPI_Allreduce(&differs, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD)) != MPI_SUCCESS)
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
    size_t bucket = bucket_floats(ctx);
    if ((st = stage_reserve(ctx, bucket))) return st;
    for (int64_t from = 0; from < total && !st; from += (int64_t)bucket) {
        int64_t count = total - from < (int64_t)bucket ? total - from : (int64_t)bucket;
        if (dist.rank == 0) st = move_range(ctx, n, tensors, from, count, dist.stage[0], 1);
        if (st) break;
        if ((rc = MPI_Bcast(dist.stage[0], (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
            return mpi_fail(ctx, rc, "dist_broadcast");
        if (dist.rank != 0) st = move_range(ctx, n, tensors, from, count, dist.stage[0], 0);
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
    return st ? st : wgml_optimizer_set_grad_hook(opt, average_gradients, NULL);
}
