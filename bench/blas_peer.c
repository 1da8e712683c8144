/*
 * The CPU peer of `wgml bench matmul` on a CPU adapter (lavapipe): the same GEMM and GEMV
 * shapes through OpenBLAS's cblas_sgemm, measured in the same run (scripts/cpu_bench.sh), so a
 * user without a GPU sees how wgml on lavapipe compares with a tuned BLAS on the same cores.
 * Prints the results as JSON on stdout, under the names wgml bench uses, medians of repeats.
 * Usage: blas_peer NAME...   NAME: gemm_S^3, gemm_S^3_At_B, gemm_S^3_A_Bt, llm_MM_KK_NN
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/timing.h"

static int parse(const char *name, long *m, long *n, long *k, int *ta, int *tb)
{
    char tail[16] = "";
    *ta = *tb = 0;
    if (sscanf(name, "gemm_%ld^3%15s", m, tail) >= 1) {
        *n = *k = *m;
        if (!strcmp(tail, "_At_B")) *ta = 1;
        else if (!strcmp(tail, "_A_Bt")) *tb = 1;
        else if (*tail) return -1;
        return 0;
    }
    return sscanf(name, "llm_M%ld_K%ld_N%ld", m, k, n) == 3 ? 0 : -1;
}

int main(int argc, char **argv)
{
    printf("{\"device\": \"%s\", \"results\": {", openblas_get_config());
    for (int i = 1; i < argc; i++) {
        long M, N, K;
        int ta, tb;
        if (parse(argv[i], &M, &N, &K, &ta, &tb) || M < 1 || N < 1 || K < 1) {
            fprintf(stderr, "blas_peer: cannot read the shape of '%s'\n", argv[i]);
            return 2;
        }
        float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
        float *c = malloc(sizeof(float) * (size_t)(M * N));
        if (!a || !b || !c) {
            fprintf(stderr, "blas_peer: out of memory for %s\n", argv[i]);
            return 1;
        }
        for (long j = 0; j < M * K; j++) a[j] = (float)((j * 7919) % 1000) / 1000.0f - 0.5f;
        for (long j = 0; j < K * N; j++) b[j] = (float)((j * 104729) % 1000) / 1000.0f - 0.5f;
        /* repeats until at least 1 s has passed (and at least 3), after one to warm up */
        double t[64];
        int reps = 0;
        double start = bench_now();
        for (int r = -1; r < 64 && (reps < 3 || bench_now() - start < 1.0); r++) {
            double t0 = bench_now();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                        (int)K, 1.0f, a, ta ? (int)M : (int)K, b, tb ? (int)K : (int)N, 0.0f, c, (int)N);
            if (r >= 0) t[reps++] = bench_now() - t0;
        }
        double s = bench_median(t, reps);
        int gemv = M == 1;
        double value = gemv ? 4.0 * (double)K * (double)N / s / 1e9 : 2.0 * (double)M * (double)N * (double)K / s / 1e12;
        printf("%s\"%s\": {\"ms\": %.6f, \"value\": %.6f, \"unit\": \"%s\"}", i > 1 ? ", " : "", argv[i], s * 1e3, value,
               gemv ? "GB/s (weight read)" : "TFLOP/s");
        fprintf(stderr, "  %-34s %10.3f ms  %10.4f %s\n", argv[i], s * 1e3, value, gemv ? "GB/s (weight read)" : "TFLOP/s");
        free(a);
        free(b);
        free(c);
    }
    printf("}}\n");
    return 0;
}
