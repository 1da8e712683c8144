/* The two WebGPU runtimes (src/runtime/): the one asked for is the one run, bad choices and a
   missing library are refused with a message that says what to do, one process runs one at a
   time, and both give the same numbers. CTest runs this twice, as every GPU test: with
   WGML_RUNTIME=wgpu-native, and (test_runtimes_dawn, where Dawn is installed) with
   WGML_RUNTIME=dawn; the second also computes on wgpu-native in the same process. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static wgml_runtime_kind env_kind(void)
{
    const char *e = getenv("WGML_RUNTIME");
    return e && !strcmp(e, "dawn") ? WGML_RUNTIME_DAWN : WGML_RUNTIME_WGPU_NATIVE;
}

static const char *kind_name(wgml_runtime_kind k) { return k == WGML_RUNTIME_DAWN ? "dawn" : "wgpu-native"; }

static wgml_context *open_on(wgml_runtime_kind kind)
{
    wgml_context_desc d = {.runtime = kind};
    wgml_context *ctx = NULL;
    wgml_status st = wgml_context_create(&d, &ctx);
    if (st) FAILF("no context on %s: %s: %s", kind_name(kind), wgml_status_name(st), wgml_last_create_error());
    return ctx;
}

static void the_runtime_asked_for_is_the_one_run(void)
{
    wgml_runtime_kind want = env_kind();
    wgml_context *ctx = open_on(want);
    if (!ctx) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    CHECK(info.runtime && !strcmp(info.runtime, kind_name(want)));
    CHECK(info.runtime_version[0] != 0);
    CHECK(strstr(info.runtime_library, want == WGML_RUNTIME_DAWN ? "libwebgpu_dawn" : "libwgpu_native") != NULL);
    /* configurations are listed only with the feature; each is a real shape */
    CHECK(info.subgroup_matrix_count >= 0 && info.subgroup_matrix_count <= WGML_MAX_SUBGROUP_MATRIX_CONFIGS);
    for (int i = 0; i < info.subgroup_matrix_count; i++)
        CHECK(info.subgroup_matrix[i].component && info.subgroup_matrix[i].result && info.subgroup_matrix[i].m &&
              info.subgroup_matrix[i].n && info.subgroup_matrix[i].k);
    if (want == WGML_RUNTIME_WGPU_NATIVE) CHECK(!info.has_subgroup_matrix && info.subgroup_matrix_count == 0);
    /* the environment's choice, with no desc */
    wgml_context_free(ctx);
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    CHECK(info.runtime && !strcmp(info.runtime, kind_name(want)));
    wgml_context_free(ctx);
}

static void bad_choices_are_refused(void)
{
    wgml_context *ctx = NULL;
    wgml_context_desc d = {.runtime = (wgml_runtime_kind)7};
    CHECK(wgml_context_create(&d, &ctx) == WGML_ERROR_INVALID_ARGUMENT && !ctx);
    CHECK(strstr(wgml_last_create_error(), "runtime 7") != NULL);
    char *saved = getenv("WGML_RUNTIME") ? strdup(getenv("WGML_RUNTIME")) : NULL;
    setenv("WGML_RUNTIME", "webgpu-9000", 1);
    CHECK(wgml_context_create(NULL, &ctx) == WGML_ERROR_INVALID_ARGUMENT && !ctx);
    CHECK(strstr(wgml_last_create_error(), "WGML_RUNTIME='webgpu-9000'") != NULL);
    if (saved) setenv("WGML_RUNTIME", saved, 1);
    else unsetenv("WGML_RUNTIME");
    free(saved);
}

/* Before anything loads Dawn in this process (the wgpu-native run): a missing library is
   WGML_ERROR_UNSUPPORTED naming the path tried and the variable that changes it. */
static void a_missing_dawn_is_unsupported(void)
{
    const char *path = "/nonexistent/wgml-test/libwebgpu_dawn.so";
    setenv("WGML_DAWN_LIBRARY", path, 1);
    wgml_context_desc d = {.runtime = WGML_RUNTIME_DAWN};
    wgml_context *ctx = NULL;
    CHECK(wgml_context_create(&d, &ctx) == WGML_ERROR_UNSUPPORTED && !ctx);
    CHECK(strstr(wgml_last_create_error(), path) != NULL);
    CHECK(strstr(wgml_last_create_error(), "WGML_DAWN_LIBRARY") != NULL);
    /* automatic falls back to wgpu-native when Dawn is missing */
    d.runtime = WGML_RUNTIME_AUTO;
    char *saved = strdup(getenv("WGML_RUNTIME") ? getenv("WGML_RUNTIME") : "");
    unsetenv("WGML_RUNTIME");
    CHECK_OK(NULL, wgml_context_create(&d, &ctx));
    if (*saved) setenv("WGML_RUNTIME", saved, 1);
    free(saved);
    unsetenv("WGML_DAWN_LIBRARY");
    if (!ctx) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    CHECK(!strcmp(info.runtime, "wgpu-native"));
    wgml_context_free(ctx);
}

static void one_runtime_at_a_time(void)
{
    wgml_context *ctx = open_on(env_kind());
    if (!ctx) return;
    wgml_runtime_kind other = env_kind() == WGML_RUNTIME_DAWN ? WGML_RUNTIME_WGPU_NATIVE : WGML_RUNTIME_DAWN;
    wgml_context_desc d = {.runtime = other};
    wgml_context *second = NULL;
    CHECK(wgml_context_create(&d, &second) == WGML_ERROR_UNSUPPORTED && !second);
    CHECK(strstr(wgml_last_create_error(), "one WebGPU runtime at a time") != NULL);
    /* automatic joins the runtime already in use */
    d.runtime = WGML_RUNTIME_AUTO;
    char *saved = strdup(getenv("WGML_RUNTIME") ? getenv("WGML_RUNTIME") : "");
    unsetenv("WGML_RUNTIME");
    CHECK_OK(NULL, wgml_context_create(&d, &second));
    if (*saved) setenv("WGML_RUNTIME", saved, 1);
    free(saved);
    if (second) {
        wgml_adapter_info info;
        CHECK_OK(second, wgml_adapter_info_get(second, &info));
        CHECK(!strcmp(info.runtime, kind_name(env_kind())));
        wgml_context_free(second);
    }
    wgml_context_free(ctx);
}

/* A GEMM, a softmax, a sum along an axis and a fused chain on awkward sizes; results[4][...]. */
enum { M = 37, K = 129, N = 53 };
static void compute(wgml_runtime_kind kind, const float *a, const float *b, float *out_mm, float *out_sm,
                    float *out_sum, float *out_chain)
{
    wgml_context *ctx = open_on(kind);
    if (!ctx) return;
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    wgml_tensor *ta = test_tensor(ctx, 2, sa, a), *tb = test_tensor(ctx, 2, sb, b);
    wgml_tensor *mm = wgml_matmul(ctx, ta, tb);
    wgml_tensor *sm = wgml_softmax(ctx, mm);
    wgml_tensor *sum = wgml_sum(ctx, ta, 0, 0);
    wgml_tensor *chain = wgml_tanh(ctx, wgml_add(ctx, wgml_mul(ctx, ta, ta), wgml_exp(ctx, ta)));
    CHECK_OK(ctx, test_read(mm, out_mm, M * N));
    CHECK_OK(ctx, test_read(sm, out_sm, M * N));
    CHECK_OK(ctx, test_read(sum, out_sum, K));
    CHECK_OK(ctx, test_read(chain, out_chain, M * K));
    wgml_context_free(ctx); /* frees the tensors: the next runtime may be bound */
}

static void same_results_on_both_runtimes(void)
{
    float *a = malloc(M * K * 4), *b = malloc(K * N * 4);
    float *r[2][4];
    size_t n[4] = {M * N, M * N, K, M * K};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) r[i][j] = calloc(n[j], 4);
    test_fill_uniform(a, M * K, -1, 1);
    test_fill_uniform(b, K * N, -1, 1);
    compute(WGML_RUNTIME_WGPU_NATIVE, a, b, r[0][0], r[0][1], r[0][2], r[0][3]);
    compute(WGML_RUNTIME_DAWN, a, b, r[1][0], r[1][1], r[1][2], r[1][3]);
    /* each against the double-precision reference, within each op's tolerance */
    double *mm = malloc(M * N * sizeof *mm), *sm = malloc(M * N * sizeof *sm), *sum = calloc(K, sizeof *sum),
           *chain = malloc(M * K * sizeof *chain);
    test_ref_matmul(1, M, N, K, a, 1, 0, b, 1, 0, 1.0, NULL, 0, mm);
    for (int i = 0; i < M; i++) {
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < N; j++) mx = fmax(mx, mm[i * N + j]);
        for (int j = 0; j < N; j++) z += exp(mm[i * N + j] - mx);
        for (int j = 0; j < N; j++) sm[i * N + j] = exp(mm[i * N + j] - mx) / z;
    }
    for (int i = 0; i < M * K; i++) {
        sum[i % K] += a[i];
        chain[i] = tanh((double)a[i] * a[i] + exp((double)a[i]));
    }
    const char *what[4] = {"matmul", "softmax", "sum", "tanh(a*a + exp(a))"};
    const double *want[4] = {mm, sm, sum, chain};
    const double tol[4] = {1e-5, 1e-5, 1e-5, 1e-6}, floor[4] = {1, 1e-3, 1, 1e-3};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            char label[96];
            snprintf(label, sizeof label, "%s on %s", what[j], kind_name(i ? WGML_RUNTIME_DAWN : WGML_RUNTIME_WGPU_NATIVE));
            CHECK(test_close(label, r[i][j], want[j], n[j], tol[j], floor[j]));
        }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) free(r[i][j]);
    free(a), free(b), free(mm), free(sm), free(sum), free(chain);
}

int main(void)
{
    test_seed(0);
    TEST_RUN(bad_choices_are_refused);
    if (env_kind() == WGML_RUNTIME_WGPU_NATIVE) TEST_RUN(a_missing_dawn_is_unsupported);
    TEST_RUN(the_runtime_asked_for_is_the_one_run);
    TEST_RUN(one_runtime_at_a_time);
    if (env_kind() == WGML_RUNTIME_DAWN) TEST_RUN(same_results_on_both_runtimes);
    return test_summary();
}
