/*
 * The collectives across real ranks (run by tests/test_dist_train.sh under mpirun -np 2,
 * linked with MPI): all-reduce SUM and MEAN of tensors of awkward sizes in buckets smaller
 * than a tensor (WGML_DIST_BUCKET_MB), against the sums of every rank's values in double;
 * broadcast from rank 0; and a broadcast whose sizes differ on one rank, which every rank
 * must refuse; and dropout under wgml_dist_data_parallel, where each rank must draw its own
 * masks (the Philox reference's with its rank as the stream), so that two ranks' masks differ
 * and are the same on every run. Prints "dist_ranks: ok" on rank 0 and exits 0 when every check held.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* rank r's value i of tensor t: distinct per rank, never zero */
static float value(int r, int t, int64_t i) { return (float)(1 + r) * 0.5f + (float)((i * 7 + t * 13) % 101) / 37.0f; }

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
    const int64_t sizes[3] = {1, 7, 1023};
    for (int mean = 0; mean < 2; mean++) {
        wgml_tensor *ts[3];
        float *host[3];
        for (int t = 0; t < 3; t++) {
            host[t] = malloc((size_t)sizes[t] * sizeof(float));
            for (int64_t i = 0; i < sizes[t]; i++) host[t][i] = value(me, t, i);
            wgml_tensor_from_data(ctx, 1, &sizes[t], host[t], (size_t)sizes[t], &ts[t]);
        }
        wgml_status st = wgml_dist_allreduce(ctx, 3, ts, mean ? WGML_REDUCE_MEAN : WGML_REDUCE_SUM);
        EXPECT(st == WGML_OK, "allreduce: %s", wgml_error_message(ctx));
        for (int t = 0; t < 3 && st == WGML_OK; t++) {
            wgml_tensor_read(ts[t], host[t], (size_t)sizes[t]);
            for (int64_t i = 0; i < sizes[t]; i++) {
                double want = 0;
                for (int r = 0; r < R; r++) want += value(r, t, i);
                if (mean) want /= R;
                if (fabs(host[t][i] - want) > 1e-5 * fabs(want)) {
                    EXPECT(0, "%s: tensor %d [%lld] = %g, want %g", mean ? "mean" : "sum", t, (long long)i, host[t][i], want);
                    break;
                }
            }
        }
        /* broadcast: rank 0's values everywhere */
        for (int t = 0; t < 3; t++) {
            for (int64_t i = 0; i < sizes[t]; i++) host[t][i] = value(me, t, i);
            wgml_tensor_write(ts[t], host[t], (size_t)sizes[t]);
        }
        EXPECT(wgml_dist_broadcast(ctx, 3, ts) == WGML_OK, "broadcast: %s", wgml_error_message(ctx));
        for (int t = 0; t < 3; t++) {
            wgml_tensor_read(ts[t], host[t], (size_t)sizes[t]);
            for (int64_t i = 0; i < sizes[t]; i++)
                if (host[t][i] != value(0, t, i)) {
                    EXPECT(0, "broadcast: tensor %d [%lld] = %g, rank 0 has %g", t, (long long)i, host[t][i], value(0, t, i));
                    break;
                }
            free(host[t]);
            wgml_tensor_free(ts[t]);
        }
    }
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
