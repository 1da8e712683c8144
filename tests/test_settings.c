/*
 * A context's settings (src/runtime/settings.c): a knob set through wgml_context_desc takes
 * effect and wins over its environment variable; a field left zero takes the variable; the
 * environment is read while the context is made and never after (the library's calls of
 * getenv are counted here, by a getenv of this program's own, which the statically linked
 * library calls); fields out of range are refused.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

extern char **environ;

static int wgml_lookups; /* getenv("WGML_...") calls so far */

/* getenv as the C library's, over environ, counting the lookups of wgml's variables. */
char *getenv(const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, "WGML_", 5) == 0) wgml_lookups++;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

/* Files in dir (-1: no such folder). */
static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A cached matmul of x [m, K] and a K x N weight against the double reference; *dispatches
   gets the dispatches it took. */
static int cached_matmul_ok(wgml_context *ctx, int64_t m, int64_t K, int64_t N, uint64_t *dispatches)
{
    float *W = malloc((size_t)(K * N) * sizeof *W), *x = malloc((size_t)(m * K) * sizeof *x);
    float *out = malloc((size_t)(m * N) * sizeof *out);
    double *want = malloc((size_t)(m * N) * sizeof *want);
    test_fill_uniform(W, (size_t)(K * N), -1, 1);
    test_fill_uniform(x, (size_t)(m * K), -1, 1);
    test_ref_matmul(1, m, N, K, x, 1, 0, W, 1, 0, 1.0, NULL, 0, want);
    wgml_stats s0, s1;
    int ok = wgml_stats_get(ctx, &s0) == WGML_OK && wgml_weight_upload(ctx, "w", W, K, N) == WGML_OK &&
             wgml_matmul_cached(ctx, "w", x, (size_t)(m * K), out, (size_t)(m * N), m) == WGML_OK &&
             wgml_stats_get(ctx, &s1) == WGML_OK;
    if (!ok) fprintf(stderr, "  cached matmul: %s\n", wgml_error_message(ctx));
    ok = ok && test_close("cached matmul", out, want, (size_t)(m * N), 1e-5, sqrt((double)K / 9.0));
    *dispatches = ok ? s1.dispatches - s0.dispatches : 0;
    wgml_weight_remove(ctx, "w");
    free(W), free(x), free(out), free(want);
    return ok;
}

/* A few kernels of several kinds, read back. */
static void run_kernels(wgml_context *ctx)
{
    const int64_t s[2] = {5, 7};
    float a[35], b[35], out[35];
    test_fill_uniform(a, 35, -2, 2);
    test_fill_uniform(b, 35, -2, 2);
    wgml_tensor *x = test_tensor(ctx, 2, s, a), *y = test_tensor(ctx, 2, s, b);
    wgml_tensor *z = wgml_softmax(ctx, wgml_add(ctx, wgml_tanh(ctx, x), y)); /* along the last dimension */
    CHECK_OK(ctx, wgml_tensor_read(z, out, 35));
    double want[35];
    for (int r = 0; r < 5; r++) { /* the softmax of tanh(a) + b along rows, in double */
        double max = -INFINITY, sum = 0;
        for (int c = 0; c < 7; c++) max = fmax(max, tanh((double)a[7 * r + c]) + b[7 * r + c]);
        for (int c = 0; c < 7; c++) sum += want[7 * r + c] = exp(tanh((double)a[7 * r + c]) + b[7 * r + c] - max);
        for (int c = 0; c < 7; c++) want[7 * r + c] /= sum;
    }
    CHECK(test_close("softmax(tanh(a) + b)", out, want, 35, 1e-5, 1e-6));
    wgml_tensor_free(z), wgml_tensor_free(x), wgml_tensor_free(y);
}

/* binding_limit through the desc: a weight bigger than it is bound in chunks of rows (more
   than one dispatch) and still right; the environment's variable, set after the context was
   made, reaches neither it nor the variable-free context made before. */
static void desc_knob_takes_effect(void)
{
    unsetenv("WGML_DEBUG_BINDING_LIMIT");
    wgml_context *plain = NULL, *split = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &plain));
    CHECK_OK(NULL, wgml_context_create(&(wgml_context_desc){.binding_limit = 4096}, &split));
    if (!plain || !split) return;
    const int64_t m = 3, K = 67, N = 100; /* 26800 bytes, 400 a row */
    uint64_t d_plain = 0, d_split = 0;
    CHECK(cached_matmul_ok(plain, m, K, N, &d_plain) && d_plain == 1);
    CHECK(cached_matmul_ok(split, m, K, N, &d_split) && d_split > 1);
    setenv("WGML_DEBUG_BINDING_LIMIT", "4096", 1);
    CHECK(cached_matmul_ok(plain, m, K, N, &d_plain) && d_plain == 1); /* made before: unchanged */
    wgml_context *later = NULL; /* made after: takes the variable */
    CHECK_OK(NULL, wgml_context_create(NULL, &later));
    uint64_t d_later = 0;
    if (later) CHECK(cached_matmul_ok(later, m, K, N, &d_later) && d_later == d_split);
    unsetenv("WGML_DEBUG_BINDING_LIMIT");
    wgml_context_free(later);
    wgml_context_free(split);
    wgml_context_free(plain);
}

/* dump_wgsl: the desc's folder wins over the variable's; a variable set after the context
   was made is not seen. */
static void desc_wins_over_environment(void)
{
    char root[] = "/tmp/wgml_settings_XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(!"mkdtemp");
        return;
    }
    char by_desc[64], by_env[64], too_late[64];
    snprintf(by_desc, sizeof by_desc, "%s/desc", root);
    snprintf(by_env, sizeof by_env, "%s/env", root);
    snprintf(too_late, sizeof too_late, "%s/late", root);
    setenv("WGML_DUMP_WGSL", by_env, 1);
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(&(wgml_context_desc){.dump_wgsl = by_desc}, &ctx));
    wgml_stats st = {0};
    if (ctx) {
        run_kernels(ctx);
        CHECK_OK(ctx, wgml_stats_get(ctx, &st));
    }
    /* one file a kernel compiled, all in the desc's folder */
    CHECK(st.pipelines_compiled >= 2 && files_in(by_desc) == (int)st.pipelines_compiled && files_in(by_env) == -1);
    wgml_context_free(ctx);

    unsetenv("WGML_DUMP_WGSL");
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    setenv("WGML_DUMP_WGSL", too_late, 1);
    if (ctx) run_kernels(ctx);
    CHECK(files_in(too_late) == -1);
    wgml_context_free(ctx);
    unsetenv("WGML_DUMP_WGSL");
    remove_tree(by_desc);
    remove_tree(by_env);
    remove_tree(too_late);
    rmdir(root);
}

/* The library looks up its variables while it makes a context, and not once after: not at a
   kernel choice, a submit, a read, a cached matmul, nor when the context is freed. */
static void environment_read_only_at_creation(void)
{
    wgml_lookups = 0;
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    int at_creation = wgml_lookups;
    CHECK(at_creation >= 20); /* every knob, through this file's getenv */
    run_kernels(ctx);
    uint64_t dispatches;
    CHECK(cached_matmul_ok(ctx, 1, 33, 20, &dispatches));
    CHECK(cached_matmul_ok(ctx, 40, 65, 70, &dispatches));
    wgml_context_free(ctx);
    if (wgml_lookups != at_creation) FAILF("%d lookups of WGML_ variables after the context was made", wgml_lookups - at_creation);
}

/* Fields out of range are refused, naming the field. */
static void bad_fields_are_refused(void)
{
    static const struct {
        wgml_context_desc d;
        const char *field;
    } bad[] = {
        {{.binding_limit = 100}, "binding_limit"}, {{.loop_limit = -1}, "loop_limit"},
        {{.dist_bucket_mb = 2048}, "dist_bucket_mb"}, {{.dist_bucket_mb = -1}, "dist_bucket_mb"},
        {{.poll_spin_us = NAN}, "poll_spin_us"}, {{.adapter_index = -2}, "adapter_index"},
        {{.runtime = (wgml_runtime_kind)9}, "runtime"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wgml_context *ctx = NULL;
        wgml_status st = wgml_context_create(&bad[i].d, &ctx);
        if (st != WGML_ERROR_INVALID_ARGUMENT || ctx || !strstr(wgml_last_create_error(), bad[i].field))
            FAILF("%s: %s, '%s'", bad[i].field, wgml_status_name(st), wgml_last_create_error());
        wgml_context_free(ctx);
    }
    char long_path[600];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    wgml_context *ctx = NULL;
    CHECK(wgml_context_create(&(wgml_context_desc){.profile = long_path}, &ctx) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_last_create_error(), "profile") != NULL);
}

int main(void)
{
    TEST_RUN(desc_knob_takes_effect);
    TEST_RUN(desc_wins_over_environment);
    TEST_RUN(environment_read_only_at_creation);
    TEST_RUN(bad_fields_are_refused);
    return test_summary();
}
