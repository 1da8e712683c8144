/* WGML_DUMP_WGSL=dir: every kernel a context compiles is written to dir as <name>.wgsl,
   named by its variant key with a readable tag; a folder that cannot be written to changes
   nothing but the files. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The files of dir whose names begin with `prefix` and end in .wgsl, and how many of them
   hold WGSL (a compute entry point). */
static int count_dumped(const char *dir, const char *prefix, int *with_wgsl)
{
    int n = 0;
    *with_wgsl = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, strlen(prefix)) || len < 5 || strcmp(e->d_name + len - 5, ".wgsl")) continue;
        n++;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        static char text[1 << 20];
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
        if (strstr(text, "@compute") && strstr(text, "fn main")) (*with_wgsl)++;
    }
    closedir(d);
    return n;
}

/* a fused chain, a matmul, a reduction, a softmax and random numbers, evaluated and read */
static void run_kernels(wgml_context *ctx)
{
    int64_t shape[2] = {8, 8};
    float a[64], out[64];
    for (int i = 0; i < 64; i++) a[i] = (float)(i % 7) - 3.0f;
    wgml_tensor *x = test_tensor(ctx, 2, shape, a);
    wgml_tensor *y = wgml_relu(ctx, wgml_binary_scalar(ctx, WGML_MUL, wgml_exp(ctx, x), 0.5f));
    CHECK_OK(ctx, wgml_tensor_read(y, out, 64));
    CHECK(out[0] > 0.0f);
    wgml_tensor *m = wgml_matmul(ctx, x, x);
    CHECK_OK(ctx, wgml_tensor_read(m, out, 64));
    wgml_tensor *s = wgml_sum(ctx, x, 0, 0);
    CHECK_OK(ctx, wgml_tensor_read(s, out, 8));
    wgml_tensor_free(s);
    wgml_tensor *p = wgml_softmax(ctx, x);
    CHECK_OK(ctx, wgml_tensor_read(p, out, 64));
    wgml_tensor_free(p);
    wgml_tensor *r = wgml_rand(ctx, 2, shape, 0.0f, 1.0f);
    CHECK_OK(ctx, wgml_tensor_read(r, out, 64));
    wgml_tensor_free(r);
    wgml_tensor_free(m);
    wgml_tensor_free(y);
    wgml_tensor_free(x);
}

static void dumps_every_kernel(void)
{
    char dir[] = "/tmp/wgml_dump_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char sub[64];
    snprintf(sub, sizeof sub, "%s/kernels", dir); /* made by the library */
    setenv("WGML_DUMP_WGSL", sub, 1);
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    run_kernels(ctx);
    unsetenv("WGML_DUMP_WGSL"); /* read once, at the context's first kernel */
    int wgsl = 0;
    CHECK(count_dumped(sub, "fused-", &wgsl) >= 1 && wgsl >= 1);
    int gemm = count_dumped(sub, "gemm-", &wgsl), gemm_wgsl = wgsl;
    int gemv = count_dumped(sub, "gemv-", &wgsl);
    CHECK(gemm + gemv >= 1 && gemm_wgsl + wgsl == gemm + gemv);
    CHECK(count_dumped(sub, "reduce-", &wgsl) == 1 && wgsl == 1); /* a hand-written kernel, by its file name */
    /* generated kernels by their tag (random numbers were once written as attention-) */
    CHECK(count_dumped(sub, "row-", &wgsl) == 1 && wgsl == 1);
    CHECK(count_dumped(sub, "random-", &wgsl) == 1 && wgsl == 1);
    CHECK(count_dumped(sub, "attention-", &wgsl) == 0);
    int all = count_dumped(sub, "", &wgsl);
    CHECK(all >= 5 && wgsl == all);
    wgml_stats st;
    CHECK_OK(ctx, wgml_stats_get(ctx, &st));
    CHECK((uint64_t)all == st.pipelines_compiled); /* one file a kernel compiled */
    /* the setting stays with the context: later kernels are dumped too */
    uint64_t compiled = st.pipelines_compiled;
    wgml_tensor *x = NULL;
    int64_t n = 5;
    float v[5] = {1, 2, 3, 4, 5}, out[5];
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, v, 5, &x));
    wgml_tensor *t = wgml_tanh(ctx, x);
    CHECK_OK(ctx, wgml_tensor_read(t, out, 5));
    CHECK_OK(ctx, wgml_stats_get(ctx, &st));
    CHECK(st.pipelines_compiled > compiled);
    all = count_dumped(sub, "", &wgsl);
    CHECK((uint64_t)all == st.pipelines_compiled && wgsl == all);
    wgml_tensor_free(t);
    wgml_tensor_free(x);
    wgml_context_free(ctx);

    /* a context made without the variable writes nothing */
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (ctx) {
        run_kernels(ctx);
        wgml_context_free(ctx);
    }
    CHECK(count_dumped(sub, "", &wgsl) == all);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* a folder that cannot be made or written: the kernels still compile and run */
static void unwritable_folder_is_ignored(void)
{
    setenv("WGML_DUMP_WGSL", "/dev/null/not-a-folder", 1);
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (ctx) run_kernels(ctx);
    unsetenv("WGML_DUMP_WGSL");
    wgml_context_free(ctx);
}

int main(void)
{
    TEST_RUN(dumps_every_kernel);
    TEST_RUN(unwritable_folder_is_ignored);
    return test_summary();
}
