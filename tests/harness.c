/* See harness.h. */
#define _GNU_SOURCE /* RTLD_NODELETE */
#include "harness.h"

#include <dlfcn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/ref.h"

/* Keep Mesa's lavapipe loaded until exit, so LeakSanitizer can name the driver's own
   allocations (tests/lsan.supp suppresses those, and only those). */
__attribute__((constructor)) static void keep_vulkan_driver_loaded(void)
{
    dlopen("libvulkan_lvp.so", RTLD_NOW | RTLD_NODELETE);
}

int test_failures = 0;
const char *test_current = "";
static uint64_t rng_state = 12345;
static wgml_context *shared_ctx = NULL;

int test_summary(void)
{
    test_context_release();
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    return test_failures ? 1 : 0;
}

void test_seed(uint64_t seed) { rng_state = seed ? seed : 1; }

uint64_t test_rand_u64(void)
{
    static int seeded = 0;
    if (!seeded) {
        seeded = 1;
        const char *s = getenv("WGML_TEST_SEED");
        if (s && rng_state == 12345) rng_state = strtoull(s, NULL, 10) | 1;
    }
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double test_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(test_rand_u64() >> 11) / 9007199254740992.0);
}

void test_fill_uniform(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)test_uniform(lo, hi);
}

wgml_status test_read(wgml_tensor *t, float *out, size_t n)
{
    if (wgml_tensor_dtype(t) != WGML_I32) return wgml_tensor_read(t, out, n);
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return WGML_ERROR_OUT_OF_MEMORY;
    wgml_status st = wgml_tensor_read_i32(t, v, n);
    for (size_t i = 0; i < n && !st; i++) out[i] = (float)v[i];
    free(v);
    return st;
}

float *test_read_new(wgml_context *ctx, const char *what, wgml_tensor *t, int64_t n)
{
    float *got = malloc((size_t)(n > 0 ? n : 1) * sizeof *got);
    wgml_status st = got ? test_read(t, got, (size_t)n) : WGML_ERROR_OUT_OF_MEMORY;
    if (st) {
        fprintf(stderr, "FAIL %s: %s: read gave %s: %s\n", test_current, what, wgml_status_name(st), wgml_error_message(ctx));
        test_failures++;
        free(got);
        return NULL;
    }
    return got;
}

int test_message_has(wgml_context *ctx, const char *s)
{
    const char *m = wgml_error_message(ctx);
    if (strstr(m, s)) return 1;
    fprintf(stderr, "  message \"%s\" does not name \"%s\"\n", m, s);
    return 0;
}

int64_t test_numel(int nd, const int64_t *sh)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= sh[i];
    return n;
}

void test_shape_str(char *out, size_t cap, int nd, const int64_t *sh)
{
    size_t u = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < nd && u < cap; i++) u += (size_t)snprintf(out + u, cap - u, "%s%lld", i ? "," : "", (long long)sh[i]);
    if (u < cap) snprintf(out + u, cap - u, "]");
}

double *test_to_double(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    if (y)
        for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

void test_ref_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A, int64_t batch_a,
                     int trans_a, const float *B, int64_t batch_b, int trans_b, double alpha,
                     const float *bias, int act, double *C)
{
    double *a = test_to_double(A, (size_t)(batch_a * M * K)), *b = test_to_double(B, (size_t)(batch_b * K * N));
    double *d = bias ? test_to_double(bias, (size_t)N) : NULL;
    if (a && b && (d || !bias))
        wgml_ref_matmul(batch, M, N, K, a, batch_a, trans_a, b, batch_b, trans_b, alpha, d, act, C);
    else {
        fprintf(stderr, "FAIL %s: test_ref_matmul: out of memory\n", test_current);
        test_failures++;
    }
    free(a);
    free(b);
    free(d);
}

double test_max_gap(int64_t outer, int64_t len, int64_t inner, const double *x)
{
    double gap = INFINITY;
    for (int64_t o = 0; o < outer && len > 1; o++)
        for (int64_t i = 0; i < inner; i++) {
            double top = -INFINITY, second = -INFINITY;
            for (int64_t k = 0; k < len; k++) {
                double v = x[(o * len + k) * inner + i];
                if (v > top) second = top, top = v;
                else if (v > second) second = v;
            }
            gap = fmin(gap, top - second);
        }
    return gap;
}

static double elem_err(float g, double w, double floor)
{
    if (isnan(w) || isnan(g)) return (isnan(w) && isnan(g)) ? 0.0 : INFINITY;
    if (isinf(w) || isinf(g)) return ((double)g == w) ? 0.0 : INFINITY;
    double d = fabs((double)g - w), m = fabs(w);
    return d / (m > floor ? m : floor);
}

double test_max_rel_err(const float *got, const double *want, size_t n, double floor)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = elem_err(got[i], want[i], floor);
        if (e > worst || isnan(e)) worst = e;
    }
    return worst;
}

int test_close(const char *what, const float *got, const double *want, size_t n, double tol,
               double floor)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = elem_err(got[i], want[i], floor);
        if (e > worst) { worst = e; at = i; }
    }
    if (worst <= tol) return 1;
    fprintf(stderr, "  %s: max rel err %.3g > %.3g at [%zu]: got %.9g want %.9g (n=%zu)\n",
            what, worst, tol, at, (double)got[at], want[at], n);
    return 0;
}

wgml_context *test_context(void)
{
    if (shared_ctx) return shared_ctx;
    wgml_status st = wgml_context_create(NULL, &shared_ctx);
    if (st != WGML_OK) {
        fprintf(stderr, "FAIL %s: no context: %s\n", test_current, wgml_last_create_error());
        test_failures++;
        shared_ctx = NULL;
    }
    return shared_ctx;
}

void test_context_release(void)
{
    if (shared_ctx) wgml_context_free(shared_ctx);
    shared_ctx = NULL;
}

wgml_context *test_profiled_context(char *path)
{
    snprintf(path, TEST_PROFILE_PATH, "/tmp/wgml_test_profile_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "FAIL %s: no temporary file for the profile\n", test_current);
        test_failures++;
        return NULL;
    }
    close(fd);
    wgml_context *ctx = NULL;
    if (wgml_context_create(&(wgml_context_desc){.profile = path}, &ctx) != WGML_OK) {
        fprintf(stderr, "FAIL %s: no context: %s\n", test_current, wgml_last_create_error());
        test_failures++;
        return NULL;
    }
    return ctx;
}

long test_profile_count(const char *path, const char *part)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "FAIL %s: no profile at %s\n", test_current, path);
        test_failures++;
        return -1;
    }
    long n = 0;
    char line[256], name[200];
    while (fgets(line, sizeof line, f)) {
        double ms, share, avg;
        long count;
        if (sscanf(line, "%lf %lf%% %ld %lf %199[^\n]", &ms, &share, &count, &avg, name) == 5 && !strncmp(name, part, strlen(part))) n += count;
    }
    fclose(f);
    return n;
}

wgml_tensor *test_tensor(wgml_context *ctx, int ndim, const int64_t *shape, const float *data)
{
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, ndim, shape, data, (size_t)test_numel(ndim, shape), &t));
    return t;
}

wgml_tensor *test_tensor_i32(wgml_context *ctx, int ndim, const int64_t *shape, const int32_t *data)
{
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, ndim, shape, data, (size_t)test_numel(ndim, shape), &t));
    return t;
}

void test_with_other_gemm_kernel(void (*suite)(void))
{
    wgml_context *ctx = test_context();
    wgml_adapter_info info;
    if (!ctx || wgml_adapter_info_get(ctx, &info) != WGML_OK) return;
    test_context_release(); /* a context reads the knobs at its first kernel choice */
    setenv("WGML_GEMM_CPU", strcmp(info.adapter_type, "CPU") ? "1" : "0", 1);
    suite();
    test_context_release();
    unsetenv("WGML_GEMM_CPU");
}

int test_count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

uint32_t test_wgsl_workgroup_bytes(const char *s)
{
    uint32_t bytes = 0;
    for (const char *p = strstr(s, "var<workgroup>"); p; p = strstr(p + 1, "var<workgroup>")) {
        const char *a = strstr(p, "array<");
        unsigned n = 0;
        char type[8] = "";
        if (a && sscanf(a, "array<%3[^,], %u>", type, &n) == 2) bytes += n * (strncmp(type, "f16", 3) ? 4u : 2u);
    }
    return bytes;
}

bool test_balanced(const char *s)
{
    int depth = 0;
    for (; *s; s++) {
        depth += *s == '{' || *s == '(';
        depth -= *s == '}' || *s == ')';
        if (depth < 0) return false;
    }
    return depth == 0;
}
