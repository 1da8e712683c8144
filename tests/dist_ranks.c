/*
 * The collectives across real ranks (run by tests/test_dist_train.sh under mpirun -np 2 and 3,
 * linked with MPI): all-reduce SUM and MEAN of tensors of awkward sizes (1, 7, 1023, 65537:
 * slices that do not split evenly over 3 ranks) in buckets smaller than a tensor
 * (WGML_DIST_BUCKET_MB), through wgml's shared-memory reduction and through MPI_Allreduce,
 * against the sums of every rank's random values in double; data parallel's gradients
 * travelling as f16 (dist_f16), within f16's rounding of each rank's values, and an f16
 * overflow arriving as inf on every rank; a step of 40 buckets;
 * broadcast from rank 0; and a broadcast whose sizes differ on one rank, which every rank
 * must refuse; and dropout under wgml_dist_data_parallel, where each rank must draw its own
 * masks (the Philox reference's with its rank as the stream), so that two ranks' masks differ
 * and are the same on every run. Prints "dist_ranks: ok" on rank 0 and exits 0 when every check held.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgml.h"
#include "cpu/philox.h"

static int failures;
#define EXPECT(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "dist_ranks: rank %d: ", wgml_dist_rank());                     \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            failures++;                                                                     \
        }                                                                                   \
    } while (0)

/* rank r's value i of tensor t: random in (-2, 2) (any rank can compute any other's), never zero */
static float value(int r, int t, int64_t i)
{
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ (uint64_t)(r * 131 + t + 1) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    float u = (float)(h >> 40) / (float)(1 << 24); /* [0, 1) */
    return (u - 0.5f) * 4.0f + (u < 0.5f ? -1e-3f : 1e-3f);
}

static const int64_t sizes[4] = {1, 7, 1023, 65537};
enum { NT = 4 };

/* SUM and MEAN of tensors of every size, then broadcast, on ctx (whose desc picks the path) */
static void allreduce_and_broadcast(wgml_context *ctx, int R, int me, const char *path)
{
    for (int mean = 0; mean < 2; mean++) {
        wgml_tensor *ts[NT];
        float *host[NT];
        for (int t = 0; t < NT; t++) {
            host[t] = malloc((size_t)sizes[t] * sizeof(float));
            for (int64_t i = 0; i < sizes[t]; i++) host[t][i] = value(me, t, i);
            wgml_tensor_from_data(ctx, 1, &sizes[t], host[t], (size_t)sizes[t], &ts[t]);
        }
        wgml_status st = wgml_dist_allreduce(ctx, NT, ts, mean ? WGML_REDUCE_MEAN : WGML_REDUCE_SUM);
        EXPECT(st == WGML_OK, "%s: allreduce: %s", path, wgml_error_message(ctx));
        for (int t = 0; t < NT && st == WGML_OK; t++) {
            wgml_tensor_read(ts[t], host[t], (size_t)sizes[t]);
            for (int64_t i = 0; i < sizes[t]; i++) {
                double want = 0, mag = 0;
                for (int r = 0; r < R; r++) want += value(r, t, i), mag += fabs(value(r, t, i));
                if (mean) want /= R, mag /= R;
                /* f32 sums of R terms: R roundings of at most 2^-24 of the magnitudes' sum */
                if (fabs(host[t][i] - want) > (R + 1) * 0x1p-24 * mag) {
                    EXPECT(0, "%s: %s: tensor %d [%lld] = %.9g, want %.9g", path, mean ? "mean" : "sum", t, (long long)i,
                           host[t][i], want);
                    break;
                }
            }
        }
        /* broadcast: rank 0's values everywhere */
        for (int t = 0; t < NT; t++) {
            for (int64_t i = 0; i < sizes[t]; i++) host[t][i] = value(me, t, i);
            wgml_tensor_write(ts[t], host[t], (size_t)sizes[t]);
        }
        EXPECT(wgml_dist_broadcast(ctx, NT, ts) == WGML_OK, "%s: broadcast: %s", path, wgml_error_message(ctx));
        for (int t = 0; t < NT; t++) {
            wgml_tensor_read(ts[t], host[t], (size_t)sizes[t]);
            for (int64_t i = 0; i < sizes[t]; i++)
                if (host[t][i] != value(0, t, i)) {
                    EXPECT(0, "%s: broadcast: tensor %d [%lld] = %g, rank 0 has %g", path, t, (long long)i, host[t][i],
                           value(0, t, i));
                    break;
                }
            free(host[t]);
            wgml_tensor_free(ts[t]);
        }
    }
}

/* Data parallel's overlapped path, gradients as f16 (dist_f16 = 1, small buckets: several a
   step): parameters of every size at 0, loss = sum_t sum(p_t * c_t) with c_t this rank's
   values, so the gradient is c_t and one SGD step of lr 1 leaves p_t = -mean over the ranks
   of c_t. Each rank's value is rounded to f16 once (within 2^-10 of it relative, or 2^-24
   absolute below f16's normal range, whatever the GPU's rounding), then summed in f32. The
   step must be the f16 one (some element off the f32 mean by more than f32 rounding) and say
   2 bytes a value. A second step where rank 1's gradient for element 0 of the largest tensor
   is 1e5, past f16's 65504: that element turns non-finite on every rank, the rest do not.
   dist_shm: through wgml's shared memory (1) or MPI (-1, the f16 widened first). */
static void f16_gradients(int R, int me, int dist_shm)
{
    wgml_context *ctx;
    wgml_context_desc desc = {.dist_f16 = 1, .dist_bucket_mb = 0.1, .dist_shm = dist_shm};
    if (wgml_context_create(&desc, &ctx) != WGML_OK) {
        EXPECT(0, "f16: %s", wgml_last_create_error());
        return;
    }
    wgml_tensor *p[NT], *c[NT];
    float *host[NT];
    for (int t = 0; t < NT; t++) {
        host[t] = calloc((size_t)sizes[t], sizeof(float));
        wgml_tensor_from_data(ctx, 1, &sizes[t], host[t], (size_t)sizes[t], &p[t]);
        wgml_requires_grad(p[t], 1);
    }
    wgml_optimizer *opt = NULL;
    EXPECT(wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 1}, NT, p, &opt) == WGML_OK,
           "f16: optimizer: %s", wgml_error_message(ctx));
    EXPECT(wgml_dist_data_parallel(opt) == WGML_OK, "f16: data parallel: %s", wgml_dist_error_message());
    for (int step = 0; step < 2 && opt; step++) {
        wgml_tensor *loss = NULL;
        for (int t = 0; t < NT; t++) {
            for (int64_t i = 0; i < sizes[t]; i++) host[t][i] = value(me, t, i);
            if (step == 1 && t == NT - 1 && me == 1) host[t][0] = 1e5f;
            wgml_tensor_from_data(ctx, 1, &sizes[t], host[t], (size_t)sizes[t], &c[t]);
            wgml_tensor *term = wgml_sum_all(ctx, wgml_mul(ctx, p[t], c[t]));
            loss = loss ? wgml_add(ctx, loss, term) : term;
        }
        EXPECT(wgml_backward(loss) == WGML_OK, "f16: backward: %s", wgml_error_message(ctx));
        wgml_dist_stats_reset();
        EXPECT(wgml_optimizer_step(opt, 0, NULL) == WGML_OK, "f16: step: %s", wgml_error_message(ctx));
        int off_f32 = 0;
        for (int t = 0; t < NT; t++) {
            wgml_tensor_read(p[t], host[t], (size_t)sizes[t]); /* (the first read ends the step: it is left in flight) */
            for (int64_t i = 0; i < sizes[t]; i++) {
                if (step == 1 && t == NT - 1 && i == 0) {
                    EXPECT(!isfinite(host[t][i]), "f16: an overflowing gradient gave %g, not inf", host[t][i]);
                    continue;
                }
                double want = 0, tol = 0;
                for (int r = 0; r < R; r++) {
                    double v = value(r, t, i);
                    want -= v * (step + 1) / R; /* p after step + 1 steps of the same gradients */
                    tol += (step + 1) * (0x1p-10 * fabs(v) + 0x1p-24) / R;
                }
                tol += 8 * 0x1p-24 * fabs(want);
                double f32_tol = (R + 2) * 0x1p-24 * fabs(want) * (step + 1);
                off_f32 += fabs(host[t][i] - want) > f32_tol;
                if (!(fabs(host[t][i] - want) <= tol)) {
                    EXPECT(0, "f16 step %d: tensor %d [%lld] = %.9g, want %.9g within %.3g", step, t, (long long)i,
                           host[t][i], want, tol);
                    break;
                }
            }
        }
        EXPECT(step == 1 || off_f32 > 100, "f16: only %d values off the f32 mean: not f16 on the way?", off_f32);
        wgml_dist_stats s; /* (the step's, now that it has ended) */
        wgml_dist_stats_get(&s);
        EXPECT(s.buckets >= 2 && s.bytes == 2 * s.values, "f16: %llu buckets, %llu bytes for %llu values (want 2 a value)",
               (unsigned long long)s.buckets, (unsigned long long)s.bytes, (unsigned long long)s.values);
        EXPECT(s.shared_memory == (dist_shm > 0), "f16: shared_memory %d with dist_shm %d", s.shared_memory, dist_shm);
        wgml_tensor_free(loss);
        for (int t = 0; t < NT; t++) wgml_tensor_free(c[t]);
    }
    wgml_optimizer_free(opt);
    for (int t = 0; t < NT; t++) {
        wgml_tensor_free(p[t]);
        free(host[t]);
    }
    wgml_context_free(ctx);
}

/* Dropout of p = 1/2 after wgml_dist_data_parallel, every rank from seed 1234: the mask must
   be the reference's for this rank's stream (so the same every run), and the masks of ranks 0
   and 1 must differ in about half their elements (identical masks would make the 2-rank run
   unlike one process's over the whole batch). */
static void dropout_masks_differ_by_rank(wgml_context *ctx, int R, int me)
{
    enum { N = 1024 };
    static float ones[N], got[N];
    for (int i = 0; i < N; i++) ones[i] = 1;
    int64_t one = 1, n = N;
    float w = 1;
    wgml_tensor *param = NULL, *x = NULL;
    wgml_optimizer *opt = NULL;
    wgml_tensor_from_data(ctx, 1, &one, &w, 1, &param);
    EXPECT(wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 0.1f}, 1, &param, &opt) == WGML_OK,
           "optimizer: %s", wgml_error_message(ctx));
    EXPECT(wgml_dist_data_parallel(opt) == WGML_OK, "data parallel: %s", wgml_dist_error_message());
    EXPECT(wgml_rng_stream(ctx) == (uint32_t)me, "stream %u on rank %d", wgml_rng_stream(ctx), me);
    wgml_manual_seed(ctx, 1234);
    wgml_tensor_from_data(ctx, 1, &n, ones, N, &x);
    wgml_tensor *d = wgml_dropout(ctx, x, 0.5f);
    EXPECT(wgml_tensor_read(d, got, N) == WGML_OK, "dropout: %s", wgml_error_message(ctx));
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), 0, (uint32_t)me, 0}, key[2] = {1234, 0}, out[4];
        wgml_philox4x32_10(ctr, key, out);
        int dropped = (out[i % 4] >> 8) < (1u << 23);
        wrong += dropped != (got[i] == 0);
    }
    EXPECT(wrong == 0, "dropout: %d of %d elements differ from the mask of stream %d", wrong, N, me);
    double *all = calloc((size_t)R * N, sizeof *all);
    for (int i = 0; i < N; i++) all[(size_t)me * N + i] = got[i] == 0;
    EXPECT(wgml_dist_allreduce_host(all, (size_t)R * N, WGML_REDUCE_SUM) == WGML_OK, "%s", wgml_dist_error_message());
    int differ = 0;
    for (int i = 0; i < N; i++) differ += all[i] != all[N + i];
    EXPECT(differ > N / 4, "ranks 0 and 1 drop the same elements but for %d of %d", differ, N);
    free(all);
    wgml_tensor_free(d);
    wgml_tensor_free(x);
    wgml_optimizer_free(opt);
    wgml_tensor_free(param);
}

/* Data parallel with more buckets a step than the first 16 the bucket list held (every one
   of 40 parameters a bucket of its own). A list that moved its buckets when it grew, while
   their maps were in flight, left the step waiting forever on an H200 (1 MB buckets on the
   nanoGPT model); here lavapipe usually ends each map before the next bucket, so this checks
   the sums of many buckets more than it provokes that hang. One SGD step of lr 1 from 0 with
   gradients c: p = -mean over the ranks of c. */
static void many_buckets(int R, int me)
{
    enum { NP = 40, LEN = 1001 };
    wgml_context *ctx;
    if (wgml_context_create(&(wgml_context_desc){.dist_bucket_mb = 1e-6}, &ctx) != WGML_OK) {
        EXPECT(0, "many buckets: %s", wgml_last_create_error());
        return;
    }
    int64_t len = LEN;
    static float zero[LEN], c[LEN], got[LEN];
    wgml_tensor *p[NP], *loss = NULL;
    for (int t = 0; t < NP; t++) {
        wgml_tensor_from_data(ctx, 1, &len, zero, LEN, &p[t]);
        wgml_requires_grad(p[t], 1);
    }
    wgml_optimizer *opt = NULL;
    EXPECT(wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 1}, NP, p, &opt) == WGML_OK,
           "many buckets: optimizer: %s", wgml_error_message(ctx));
    EXPECT(wgml_dist_data_parallel(opt) == WGML_OK, "many buckets: data parallel: %s", wgml_dist_error_message());
    for (int t = 0; t < NP && opt; t++) {
        for (int i = 0; i < LEN; i++) c[i] = value(me, 10 + t, i);
        wgml_tensor *ct;
        wgml_tensor_from_data(ctx, 1, &len, c, LEN, &ct);
        wgml_tensor *term = wgml_sum_all(ctx, wgml_mul(ctx, p[t], ct));
        loss = loss ? wgml_add(ctx, loss, term) : term;
        wgml_tensor_free(ct);
    }
    wgml_dist_stats_reset();
    EXPECT(opt && wgml_backward(loss) == WGML_OK && wgml_optimizer_step(opt, 0, NULL) == WGML_OK, "many buckets: step: %s",
           wgml_error_message(ctx));
    wgml_dist_stats s;
    wgml_dist_stats_get(&s);
    EXPECT(s.buckets == NP, "many buckets: %llu buckets, want %d", (unsigned long long)s.buckets, NP);
    for (int t = 0; t < NP && opt; t++) {
        wgml_tensor_read(p[t], got, LEN);
        for (int i = 0; i < LEN; i++) {
            double want = 0, mag = 0;
            for (int r = 0; r < R; r++) want -= value(r, 10 + t, i) / R, mag += fabs(value(r, 10 + t, i)) / R;
            if (fabs(got[i] - want) > (R + 2) * 0x1p-24 * mag) {
                EXPECT(0, "many buckets: parameter %d [%d] = %.9g, want %.9g", t, i, got[i], want);
                break;
            }
        }
    }
    wgml_tensor_free(loss);
    wgml_optimizer_free(opt);
    for (int t = 0; t < NP; t++) wgml_tensor_free(p[t]);
    wgml_context_free(ctx);
}

int main(void)
{
    if (wgml_dist_init() != WGML_OK) {
        fprintf(stderr, "dist_ranks: %s\n", wgml_dist_error_message());
        return 1;
    }
    int R = wgml_dist_size(), me = wgml_dist_rank();
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "dist_ranks: %s\n", wgml_last_create_error());
        return 1;
    }
    EXPECT(R >= 2, "size %d: run under mpirun -np 2 or more", R);
    /* wgml's shared-memory reduction (the default, every rank on this machine), then MPI's */
    allreduce_and_broadcast(ctx, R, me, "shared memory");
    wgml_dist_stats s;
    wgml_dist_stats_get(&s);
    EXPECT(s.shared_memory == 1, "the ranks share this machine, but the reduction did not go through shared memory");
    wgml_context *mpi_ctx;
    if (wgml_context_create(&(wgml_context_desc){.dist_shm = -1}, &mpi_ctx) == WGML_OK) {
        allreduce_and_broadcast(mpi_ctx, R, me, "MPI");
        wgml_dist_stats_get(&s);
        EXPECT(s.shared_memory == 0, "dist_shm = -1, but the reduction went through shared memory");
        wgml_context_free(mpi_ctx);
    }
    f16_gradients(R, me, 1);
    f16_gradients(R, me, -1);
    many_buckets(R, me);
    /* a model of another size on the last rank: every rank refuses, none waits */
    int64_t n = me == R - 1 ? 8 : 7;
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    wgml_tensor *odd;
    wgml_tensor_from_data(ctx, 1, &n, v, (size_t)n, &odd);
    wgml_status st = wgml_dist_broadcast(ctx, 1, &odd);
    EXPECT(st == WGML_ERROR_SHAPE, "a broadcast of unequal sizes gave status %d, not WGML_ERROR_SHAPE", (int)st);
    dropout_masks_differ_by_rank(ctx, R, me);
    wgml_dist_barrier();
    wgml_context_free(ctx);
    int bad = failures;
    double total = bad;
    wgml_dist_allreduce_host(&total, 1, WGML_REDUCE_SUM);
    if (me == 0 && total == 0) printf("dist_ranks: ok\n");
    wgml_dist_finalize();
    return total != 0;
}
