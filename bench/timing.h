/* Clock and median for the benchmark programs (tools/bench.c, bench/ew_probe.c). */
#ifndef WGML_BENCH_TIMING_H
#define WGML_BENCH_TIMING_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of t[0..n) (sorts t). */
static inline double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], bench_cmp_double);
    return t[n / 2];
}

#endif
