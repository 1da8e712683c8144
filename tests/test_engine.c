/* The lazy engine's claims, proven by wgml_stats: nothing runs until a result is needed, one
   submit per evaluation, elementwise chains fuse into one dispatch, unfused chains run in
   bounded memory, DAGs evaluate correctly, kernels are compiled once, scopes free what they
   made. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/ref.h"
#include "engine/tuning.h"
#include "harness.h"

#define N 65537

static wgml_stats stats(wgml_context *ctx)
{
    wgml_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ctx, wgml_stats_get(ctx, &s));
    return s;
}

static wgml_tensor *mk1(wgml_context *ctx, int64_t n, const float *data)
{
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, data, (size_t)n, &t));
    return t;
}

static int read_close(wgml_context *ctx, const char *what, wgml_tensor *t, const double *want, size_t n,
                      double tol, double floor)
{
    float *got = malloc(n * sizeof *got);
    wgml_status st = test_read(t, got, n);
    int ok = st == WGML_OK;
    if (!ok)
        fprintf(stderr, "  %s: read gave %s: %s\n", what, wgml_status_name(st), wgml_error_message(ctx));
    else
        ok = test_close(what, got, want, n, tol, floor);
    free(got);
    return ok;
}

#define CHECK_CLOSE(ctx, what, t, want, n, tol, floor) CHECK(read_close(ctx, what, t, want, n, tol, floor))

/* ---------------------------------------------------------------- a chain of elementwise ops */

enum { S_TANH, S_MULS, S_ADDB, S_SUBB, S_SIGMOID, S_RSUBS, S_MUL4, S_MAXS, S_SILU, S_MUL2, S_ADDS, S_NEG, S_EXP, S_LOG, S_SHIFT };

/* Chains of 10 steps repeated, built so that every step matters: a chain of squashing ops
   (tanh, sigmoid) forgets its beginning, and then a wrong early op (or scalar) would go
   unnoticed. Values stay small (|x| < 1) where each group of ops is close to the identity:
   tanh(x) ~ x, then x * 1.1; -4 (0.5 - sigmoid(x)) ~ x; 2 silu(x) ~ x + x^2/2; +b then -b;
   exp then log; neg. The last op adds 2 so the result is away from zero. run_chain checks
   this sensitivity on the reference itself.
   main: 5 scalar ops of 10 (50 scalars in 100 ops), b read by 20 ops; maximum(x, -0.45...)
   clips a few elements. */
static const int pattern_main[10] = {S_TANH, S_MULS, S_ADDB, S_SIGMOID, S_RSUBS, S_MUL4, S_SUBB, S_MAXS, S_SILU, S_MUL2};
/* 3 scalar ops of 10 (31 scalars in 100 ops), b read by 20 ops */
static const int pattern_few_scalars[10] = {S_TANH, S_MULS, S_ADDB, S_SIGMOID, S_RSUBS, S_MUL4, S_SUBB, S_NEG, S_EXP, S_LOG};
/* one input only, 5 scalar ops of 10 (50 scalars in 100 ops) */
static const int pattern_one_input[10] = {S_TANH, S_MULS, S_SIGMOID, S_RSUBS, S_MUL4, S_ADDS, S_NEG, S_SILU, S_MUL2, S_NEG};

/* the scalar of step i (exact floats, different from step to step) */
static float step_scalar(int kind, int i)
{
    float s = 0.0078125f * (float)(i % 17);
    switch (kind) {
    case S_MULS: return 1.1f + s / 8;
    case S_RSUBS: return 0.5f + s / 64;
    case S_MUL4: return -4.0f - s / 16;
    case S_MAXS: return -(0.45f + s);
    case S_MUL2: return 2.0f + s / 16;
    case S_ADDS: return -0.03f + s / 16;
    default: return 2.0f; /* S_SHIFT */
    }
}

static int step_kind(const int *pattern, int len, int i)
{
    return i == len - 1 ? S_SHIFT : pattern[i % 10];
}

static wgml_tensor *gpu_step(wgml_context *ctx, int kind, int i, wgml_tensor *x, wgml_tensor *b)
{
    float s = step_scalar(kind, i);
    switch (kind) {
    case S_TANH: return wgml_tanh(ctx, x);
    case S_MULS: case S_MUL4: case S_MUL2: return wgml_binary_scalar(ctx, WGML_MUL, x, s);
    case S_ADDB: return wgml_add(ctx, x, b);
    case S_SUBB: return wgml_sub(ctx, x, b);
    case S_SIGMOID: return wgml_sigmoid(ctx, x);
    case S_RSUBS: return wgml_scalar_binary(ctx, WGML_SUB, s, x);
    case S_MAXS: return wgml_binary_scalar(ctx, WGML_MAXIMUM, x, s);
    case S_SILU: return wgml_silu(ctx, x);
    case S_NEG: return wgml_neg(ctx, x);
    case S_EXP: return wgml_exp(ctx, x);
    case S_LOG: return wgml_log(ctx, x);
    default: return wgml_binary_scalar(ctx, WGML_ADD, x, s); /* S_ADDS, S_SHIFT */
    }
}

static double cpu_step(int kind, int i, double x, double b)
{
    double s = step_scalar(kind, i);
    switch (kind) {
    case S_TANH: return wgml_ref_tanh(x);
    case S_MULS: case S_MUL4: case S_MUL2: return wgml_ref_mul(x, s);
    case S_ADDB: return wgml_ref_add(x, b);
    case S_SUBB: return wgml_ref_sub(x, b);
    case S_SIGMOID: return wgml_ref_sigmoid(x);
    case S_RSUBS: return wgml_ref_sub(s, x);
    case S_MAXS: return wgml_ref_maximum(x, s);
    case S_SILU: return wgml_ref_silu(x);
    case S_NEG: return wgml_ref_neg(x);
    case S_EXP: return wgml_ref_exp(x);
    case S_LOG: return wgml_ref_log(x);
    default: return wgml_ref_add(x, s);
    }
}

/* Builds the chain on a (and b), keeping every intermediate in steps[] (the caller frees). */
static wgml_tensor *build_chain(wgml_context *ctx, const int *pattern, int len, wgml_tensor *a, wgml_tensor *b,
                                wgml_tensor **steps)
{
    wgml_tensor *x = a;
    for (int i = 0; i < len; i++) {
        x = gpu_step(ctx, step_kind(pattern, len, i), i, x, b);
        steps[i] = x;
    }
    return x;
}

/* The reference, step by step in double; `nudge_step` >= 0 adds `nudge` to that step's
   result (to measure how much the end result depends on it). */
static void chain_reference_nudged(const int *pattern, int len, const float *a, const float *b, double *out,
                                   int nudge_step, double nudge)
{
    for (size_t k = 0; k < N; k++) {
        double x = a[k];
        for (int i = 0; i < len; i++) {
            x = cpu_step(step_kind(pattern, len, i), i, x, b[k]);
            if (i == nudge_step) x += nudge;
        }
        out[k] = x;
    }
}

static void chain_reference(const int *pattern, int len, const float *a, const float *b, double *out)
{
    chain_reference_nudged(pattern, len, a, b, out, -1, 0);
}

/* Inputs of the chains: small values (see above) */
static void chain_inputs(float *x, float *y)
{
    test_fill_uniform(x, N, -0.5, 0.5);
    test_fill_uniform(y, N, -0.25, 0.25);
}

/* The test is only as good as the chain's memory: changing the result of step 1 (the first
   op with a scalar, the last scalar of the fused kernel's parameters) by 0.1 must change the
   end result by far more than the tolerance, somewhere. */
static int chain_remembers_its_start(const int *pattern, int len, const float *x, const float *y, const double *want)
{
    double *moved = malloc(N * sizeof *moved);
    chain_reference_nudged(pattern, len, x, y, moved, 1, 0.1);
    double most = 0;
    for (size_t k = 0; k < N; k++) most = fmax(most, fabs(moved[k] - want[k]) / fabs(want[k]));
    free(moved);
    if (most < 1e-2) fprintf(stderr, "  the chain forgets its first steps: %.3g relative change\n", most);
    return most >= 1e-2;
}

static void free_steps(wgml_tensor **steps, int len)
{
    for (int i = 0; i < len; i++) wgml_tensor_free(steps[i]);
}

/* ---------------------------------------------------------------- tests */

static void nothing_runs_until_a_result_is_needed(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[1023], y[1023];
    test_fill_uniform(x, 1023, -1, 1);
    test_fill_uniform(y, 1023, -1, 1);
    wgml_tensor *a = mk1(ctx, 1023, x), *b = mk1(ctx, 1023, y);
    int64_t s3[2] = {3, 341};
    wgml_stats s0 = stats(ctx);
    wgml_tensor *e = wgml_exp(ctx, a);
    wgml_tensor *f = wgml_add(ctx, e, b);
    wgml_tensor *g = wgml_sum(ctx, f, 0, 0);
    wgml_tensor *r = wgml_reshape(ctx, f, 2, s3);
    wgml_tensor *h = wgml_softmax(ctx, r);
    wgml_tensor *m = wgml_matmul(ctx, r, wgml_transpose(ctx, r, 0, 1));
    wgml_tensor *l = wgml_layernorm(ctx, h, NULL, NULL, 1e-5f);
    wgml_stats s1 = stats(ctx);
    CHECK(s1.submits == s0.submits);
    CHECK(s1.dispatches == s0.dispatches);
    CHECK(s1.evals == s0.evals);
    CHECK(s1.pipelines_compiled == s0.pipelines_compiled); /* not even compiled yet */
    CHECK(s1.bytes_downloaded == s0.bytes_downloaded);
    /* reading one result runs what it needs, in one submit */
    double want;
    double ev[1023];
    for (int i = 0; i < 1023; i++) ev[i] = wgml_ref_exp(x[i]) + y[i];
    want = 0;
    for (int i = 0; i < 1023; i++) want += ev[i];
    CHECK_CLOSE(ctx, "sum(exp(a) + b)", g, &want, 1, 1e-5, 1e-30);
    wgml_stats s2 = stats(ctx);
    CHECK(s2.submits == s1.submits + 1);
    CHECK(s2.evals == s1.evals + 1);
    CHECK(s2.dispatches > s1.dispatches);
    /* the others were not run by that read */
    wgml_stats s3s = stats(ctx);
    CHECK(s3s.dispatches == s2.dispatches);
    wgml_tensor *all[3] = {h, m, l};
    CHECK_OK(ctx, wgml_eval(ctx, 3, all));
    wgml_tensor_free(l);
    wgml_tensor_free(m);
    wgml_tensor_free(h);
    wgml_tensor_free(r);
    wgml_tensor_free(g);
    wgml_tensor_free(f);
    wgml_tensor_free(e);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

static void one_submit_per_evaluation(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[4100], y[4100];
    test_fill_uniform(x, 4100, -1, 1);
    test_fill_uniform(y, 4100, 0.5, 1.5);
    wgml_tensor *a = mk1(ctx, 4100, x), *b = mk1(ctx, 4100, y);
    int64_t s2[2] = {41, 100};
    /* four independent results of different kinds */
    wgml_tensor *t[4];
    t[0] = wgml_tanh(ctx, wgml_mul(ctx, a, b));
    t[1] = wgml_sum_all(ctx, b);
    t[2] = wgml_softmax(ctx, wgml_reshape(ctx, a, 2, s2));
    t[3] = wgml_max(ctx, wgml_reshape(ctx, b, 2, s2), 1, 0);
    wgml_stats s0 = stats(ctx);
    CHECK_OK(ctx, wgml_eval(ctx, 4, t));
    wgml_stats s1 = stats(ctx);
    CHECK(s1.submits == s0.submits + 1);
    CHECK(s1.evals == s0.evals + 1);
    CHECK(s1.dispatches - s0.dispatches >= 4);
    /* evaluating them again runs nothing: they are storage now */
    CHECK_OK(ctx, wgml_eval(ctx, 4, t));
    wgml_stats s2s = stats(ctx);
    CHECK(s2s.dispatches == s1.dispatches);
    /* the results are right, and reading them dispatches no kernel */
    double w0[4100], w1, w2[4100], w3[41];
    for (int i = 0; i < 4100; i++) w0[i] = wgml_ref_tanh((double)x[i] * y[i]);
    double *xd = test_to_double(x, 4100), *yd = test_to_double(y, 4100);
    w1 = wgml_ref_sum_all(4100, yd);
    wgml_ref_softmax(41, 100, xd, w2);
    wgml_ref_max(2, s2, yd, 1, w3);
    free(xd);
    free(yd);
    CHECK_CLOSE(ctx, "tanh(a*b)", t[0], w0, 4100, 1e-4, 1e-3); /* tanh floor: see test_ops */
    CHECK_CLOSE(ctx, "sum_all(b)", t[1], &w1, 1, 1e-5, 1e-30);
    CHECK_CLOSE(ctx, "softmax", t[2], w2, 4100, 1e-5, 1e-30);
    CHECK_CLOSE(ctx, "max", t[3], w3, 41, 0, 1e-30);
    wgml_stats s3 = stats(ctx);
    CHECK(s3.dispatches == s1.dispatches);
    CHECK(s3.submits == s2s.submits + 4); /* one per read: the copy to host */
    for (int i = 0; i < 4; i++) wgml_tensor_free(t[i]);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

/* a chain of `len` ops; `dispatches_want`: 1 when fused, len when not */
static void run_chain(wgml_context *ctx, const char *what, const int *pattern, int len, uint64_t dispatches_want,
                      const float *x, const float *y, const double *want)
{
    wgml_tensor *a = mk1(ctx, N, x), *b = mk1(ctx, N, y);
    wgml_tensor **steps = calloc((size_t)len, sizeof *steps);
    wgml_stats s0 = stats(ctx);
    wgml_tensor *r = build_chain(ctx, pattern, len, a, b, steps);
    wgml_stats s1 = stats(ctx);
    CHECK(s1.dispatches == s0.dispatches && s1.submits == s0.submits);
    CHECK(chain_remembers_its_start(pattern, len, x, y, want));
    /* 100 f32 steps of ~1e-7 absolute rounding each on values below 1, with the end result
       in (1.5, 3.5): ~1e-5 relative at most; transcendental tolerance */
    CHECK_CLOSE(ctx, what, r, want, N, 1e-4, 1e-30);
    wgml_stats s2 = stats(ctx);
    if (s2.dispatches - s1.dispatches != dispatches_want)
        fprintf(stderr, "  %s: %llu dispatches, want %llu\n", what,
                (unsigned long long)(s2.dispatches - s1.dispatches), (unsigned long long)dispatches_want);
    CHECK(s2.dispatches - s1.dispatches == dispatches_want);
    CHECK(s2.submits - s1.submits == 1);
    free_steps(steps, len);
    free(steps);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

static void chain_of_100_ops_is_one_dispatch(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    double *want = malloc(N * sizeof *want);
    chain_inputs(x, y);
    /* 50 ops with a scalar, 20 with the second tensor, 30 unary */
    chain_reference(pattern_main, 100, x, y, want);
    run_chain(ctx, "fused chain of 100 (50 scalars, b 20 times)", pattern_main, 100, 1, x, y, want);
    free(x);
    free(y);
    free(want);
}

/* The two limits of one fused kernel, one at a time: the same second input read by many ops
   of the chain (it is one leaf of the kernel: 2 distinct inputs in all), and many scalars. */
static void chain_reading_one_input_many_times_is_one_dispatch(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    double *want = malloc(N * sizeof *want);
    chain_inputs(x, y);
    /* 31 ops with a scalar, b read by 20 ops */
    chain_reference(pattern_few_scalars, 100, x, y, want);
    run_chain(ctx, "fused chain of 100 (31 scalars, b 20 times)", pattern_few_scalars, 100, 1, x, y, want);
    free(x);
    free(y);
    free(want);
}

/* In a fresh context, so the result cannot depend on what earlier evaluations left in the
   parameter buffer: 50 scalars make a 272-byte parameter block. */
static void chain_with_50_scalars_is_one_dispatch(void)
{
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    double *want = malloc(N * sizeof *want);
    chain_inputs(x, y); /* y is not read by this pattern */
    /* one input, 50 ops with a scalar, 50 unary */
    chain_reference(pattern_one_input, 100, x, y, want);
    run_chain(ctx, "fused chain of 100 on one input (50 scalars)", pattern_one_input, 100, 1, x, y, want);
    wgml_context_free(ctx);
    free(x);
    free(y);
    free(want);
}

/* bytes_in_use of one N-float tensor (the pool's size class for it) */
static uint64_t class_bytes(wgml_context *ctx, int64_t n)
{
    float *z = calloc((size_t)n, 4);
    wgml_stats s0 = stats(ctx);
    wgml_tensor *t = mk1(ctx, n, z);
    wgml_stats s1 = stats(ctx);
    wgml_tensor_free(t);
    free(z);
    return s1.bytes_in_use - s0.bytes_in_use;
}

static void unfused_chain_runs_in_bounded_memory(void)
{
    wgml_context *ctx = NULL;
    wgml_context_desc d = {.no_fusion = 1};
    CHECK_OK(NULL, wgml_context_create(&d, &ctx));
    if (!ctx) return;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    double *want = malloc(N * sizeof *want);
    chain_inputs(x, y);
    uint64_t cls = class_bytes(ctx, N);
    CHECK(cls >= (uint64_t)N * 4);
    const int lens[2] = {100, 200};
    for (int k = 0; k < 2; k++) {
        int len = lens[k];
        chain_reference(pattern_main, len, x, y, want);
        wgml_tensor *a = mk1(ctx, N, x), *b = mk1(ctx, N, y);
        wgml_tensor **steps = calloc((size_t)len, sizeof *steps);
        wgml_stats s0 = stats(ctx);
        wgml_stats_reset_peaks(ctx);
        wgml_tensor *r = build_chain(ctx, pattern_main, len, a, b, steps);
        char what[64];
        snprintf(what, sizeof what, "unfused chain of %d", len);
        CHECK(chain_remembers_its_start(pattern_main, len, x, y, want));
        CHECK_CLOSE(ctx, what, r, want, N, 1e-4, 1e-30);
        wgml_stats s1 = stats(ctx);
        CHECK(s1.dispatches - s0.dispatches == (uint64_t)len);
        CHECK(s1.submits - s0.submits == 1);
        /* at most two intermediates live at once (an op's input and its output), however
           long the chain */
        uint64_t peak = s1.bytes_in_use_peak - s0.bytes_in_use;
        if (peak > 2 * cls)
            fprintf(stderr, "  %s: peak %llu bytes beyond the inputs, want <= %llu\n", what,
                    (unsigned long long)peak, (unsigned long long)(2 * cls));
        CHECK(peak <= 2 * cls);
        /* afterwards only the result holds memory */
        CHECK(s1.bytes_in_use - s0.bytes_in_use == cls);
        free_steps(steps, len);
        free(steps);
        wgml_tensor_free(a);
        wgml_tensor_free(b);
        wgml_stats s2 = stats(ctx);
        CHECK(s2.bytes_in_use == s0.bytes_in_use - 2 * cls);
    }
    wgml_context_free(ctx);
    free(x);
    free(y);
    free(want);
}

/* wgml_release_cached hands the free buffers back, keeps what tensors hold, and the same
   graph afterwards (on new buffers, its bind groups made again) is still right */
static void release_cached_returns_free_buffers(void)
{
    wgml_context *ctx = NULL;
    wgml_context_desc d = {.no_fusion = 1};
    CHECK_OK(NULL, wgml_context_create(&d, &ctx));
    if (!ctx) return;
    CHECK(wgml_release_cached(NULL, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    float *x = malloc(N * 4), *y = malloc(N * 4);
    double *want = malloc(N * sizeof *want);
    chain_inputs(x, y);
    chain_reference(pattern_main, 30, x, y, want);
    wgml_tensor *kept = NULL;
    for (int round = 0; round < 3; round++) {
        wgml_tensor *a = mk1(ctx, N, x), *b = mk1(ctx, N, y), *steps[30];
        wgml_tensor *r = build_chain(ctx, pattern_main, 30, a, b, steps);
        CHECK_CLOSE(ctx, "chain before release", r, want, N, 1e-4, 1e-30);
        free_steps(steps, 29); /* steps[29] is r */
        wgml_tensor_free(a), wgml_tensor_free(b);
        wgml_stats s0 = stats(ctx);
        CHECK(s0.bytes_live > s0.bytes_in_use); /* the chain's intermediates wait in the pool */
        uint64_t released = 0;
        CHECK_OK(ctx, wgml_release_cached(ctx, &released));
        wgml_stats s1 = stats(ctx);
        CHECK(released == s0.bytes_live - s0.bytes_in_use);
        CHECK(s1.bytes_live == s1.bytes_in_use && s1.bytes_in_use == s0.bytes_in_use);
        CHECK(s1.buffers_live < s0.buffers_live);
        CHECK_OK(ctx, wgml_release_cached(ctx, &released)); /* nothing left to hand back */
        CHECK(released == 0);
        CHECK_CLOSE(ctx, "a result kept over the release", kept ? kept : r, want, N, 1e-4, 1e-30);
        if (kept) wgml_tensor_free(r);
        else kept = r;
    }
    wgml_tensor_free(kept);
    wgml_context_free(ctx);
    free(x), free(y), free(want);
}

/* the fused chain also holds only its result: no buffer per step */
static void fused_chain_allocates_only_its_result(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float *x = malloc(N * 4), *y = malloc(N * 4);
    chain_inputs(x, y);
    uint64_t cls = class_bytes(ctx, N);
    wgml_tensor *a = mk1(ctx, N, x), *b = mk1(ctx, N, y);
    wgml_tensor *steps[100];
    wgml_stats s0 = stats(ctx);
    wgml_stats_reset_peaks(ctx);
    wgml_tensor *r = build_chain(ctx, pattern_main, 100, a, b, steps);
    CHECK_OK(ctx, wgml_eval(ctx, 1, &r));
    wgml_stats s1 = stats(ctx);
    if (s1.bytes_in_use_peak - s0.bytes_in_use > cls)
        fprintf(stderr, "  fused chain: peak %llu bytes beyond the inputs, want <= %llu (its result)\n",
                (unsigned long long)(s1.bytes_in_use_peak - s0.bytes_in_use), (unsigned long long)cls);
    CHECK(s1.bytes_in_use_peak - s0.bytes_in_use <= cls);
    free_steps(steps, 100);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    free(x);
    free(y);
}

/* One fused kernel with eight inputs and twenty scalars: its parameter block (header, eight
   strides, offsets, scalars) is 272 bytes, more than 256. Evaluated alone (so it is the last
   dispatch of its submit), in a fresh context. */
static void fused_kernel_with_many_inputs_and_scalars(void)
{
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    enum { M = 1023, K = 8 };
    float x[K][M];
    wgml_tensor *in[K];
    for (int k = 0; k < K; k++) {
        test_fill_uniform(x[k], M, 0.5, 1.5); /* positive: no cancellation anywhere */
        in[k] = mk1(ctx, M, x[k]);
    }
    /* acc = (((x0 * s1 + x1) * s2 + x2) ... ) then 13 more scalar steps */
    wgml_tensor *keep[64];
    int nk = 0;
    wgml_tensor *acc = in[0];
    for (int k = 1; k < K; k++) {
        acc = keep[nk++] = wgml_binary_scalar(ctx, WGML_MUL, acc, 0.5f + 0.0625f * (float)k);
        acc = keep[nk++] = wgml_add(ctx, acc, in[k]);
    }
    for (int j = 0; j < 13; j++)
        acc = keep[nk++] = j % 2 ? wgml_binary_scalar(ctx, WGML_MUL, acc, 1.0f + 0.125f * (float)j)
                                 : wgml_binary_scalar(ctx, WGML_ADD, acc, 0.25f * (float)(j + 1));
    double want[M];
    for (int i = 0; i < M; i++) {
        double v = x[0][i];
        for (int k = 1; k < K; k++) v = v * (0.5 + 0.0625 * k) + x[k][i];
        for (int j = 0; j < 13; j++) v = j % 2 ? v * (1.0 + 0.125 * j) : v + 0.25 * (j + 1);
        want[i] = v;
    }
    wgml_stats s0 = stats(ctx);
    CHECK_CLOSE(ctx, "8 inputs, 20 scalars", acc, want, M, 1e-5, 1e-30);
    wgml_stats s1 = stats(ctx);
    CHECK(s1.dispatches - s0.dispatches == 1);
    for (int i = 0; i < nk; i++) wgml_tensor_free(keep[i]);
    for (int k = 0; k < K; k++) wgml_tensor_free(in[k]);
    wgml_context_free(ctx);
}

/* a value with several consumers (a DAG) */
static void dag_evaluates_correctly(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { M = 4100 };
    float xa[M], xb[M];
    test_fill_uniform(xa, M, -1, 1);
    test_fill_uniform(xb, M, 0.5, 1.5);
    wgml_tensor *a = mk1(ctx, M, xa), *b = mk1(ctx, M, xb);
    wgml_tensor *x = wgml_exp(ctx, a);                               /* 4 consumers */
    wgml_tensor *xx = wgml_mul(ctx, x, x);                           /* x twice in one op */
    wgml_tensor *y = wgml_binary_scalar(ctx, WGML_ADD, xx, 1.0f);     /* x^2 + 1 */
    wgml_tensor *z = wgml_sum_all(ctx, x);                           /* [1] */
    wgml_tensor *w = wgml_div(ctx, y, z);                            /* broadcast [M] / [1] */
    wgml_tensor *u = wgml_add(ctx, wgml_sub(ctx, w, x), wgml_mul(ctx, x, b)); /* w - x + x*b */
    wgml_tensor *v = wgml_max(ctx, wgml_reshape(ctx, u, 2, (int64_t[]){41, 100}), 1, 0);
    double wx[M], wy[M], wz = 0, ww[M], wu[M], wv[41];
    for (int i = 0; i < M; i++) {
        wx[i] = wgml_ref_exp(xa[i]);
        wy[i] = wx[i] * wx[i] + 1.0;
        wz += wx[i];
    }
    for (int i = 0; i < M; i++) {
        ww[i] = wy[i] / wz;
        wu[i] = ww[i] - wx[i] + wx[i] * xb[i];
    }
    for (int r = 0; r < 41; r++) {
        wv[r] = -INFINITY;
        for (int c = 0; c < 100; c++) wv[r] = fmax(wv[r], wu[r * 100 + c]);
    }
    wgml_stats s0 = stats(ctx);
    wgml_tensor *targets[2] = {v, u};
    CHECK_OK(ctx, wgml_eval(ctx, 2, targets));
    wgml_stats s1 = stats(ctx);
    CHECK(s1.submits == s0.submits + 1);
    /* u = w - x + x*b, with w ~ 1e-3: x and x*b are O(1) (up to 4) and cancel where b ~ 1;
       their f32 rounding and exp's error (~1e-6 relative) give ~1e-6 absolute, so results
       below 0.1 are held to 1e-5 absolute (floor 0.1 with the exp tolerance 1e-4) */
    CHECK_CLOSE(ctx, "u", u, wu, M, 1e-4, 0.1);
    CHECK_CLOSE(ctx, "v = max(u)", v, wv, 41, 1e-4, 0.1);
    /* the intermediates, read afterwards (recomputed or kept), are right too */
    CHECK_CLOSE(ctx, "x", x, wx, M, 1e-4, 1e-30);
    CHECK_CLOSE(ctx, "y", y, wy, M, 1e-4, 1e-30);
    CHECK_CLOSE(ctx, "z", z, &wz, 1, 1e-4, 1e-30);
    CHECK_CLOSE(ctx, "w", w, ww, M, 1e-4, 1e-30);
    wgml_tensor_free(v);
    wgml_tensor_free(u);
    wgml_tensor_free(w);
    wgml_tensor_free(z);
    wgml_tensor_free(y);
    wgml_tensor_free(xx);
    wgml_tensor_free(x);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

/* Fused kernels are found again by a key made of their structure, not their source: graphs
   that differ only in which side a scalar is on, in the shape of the tree, or in how an
   input is read must each get their own kernel, in one context, run twice in turn. */
static void fused_kernels_differing_in_structure_stay_apart(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { M = 1023, V = 6 };
    float xa[M], xb[M], xs[1];
    test_fill_uniform(xa, M, -1, 1);
    test_fill_uniform(xb, M, 0.5, 1.5);
    xs[0] = 0.75f;
    wgml_tensor *a = mk1(ctx, M, xa), *b = mk1(ctx, M, xb), *s = mk1(ctx, 1, xs);
    double want[V][M];
    for (int i = 0; i < M; i++) {
        want[0][i] = (double)xa[i] - 3.0;                 /* a - 3 */
        want[1][i] = 3.0 - (double)xa[i];                 /* 3 - a */
        want[2][i] = (double)xa[i] * xb[i] + xa[i];       /* (a * b) + a */
        want[3][i] = (double)xa[i] * ((double)xb[i] + xa[i]); /* a * (b + a) */
        want[4][i] = (double)xa[i] * xb[i];               /* a * b */
        want[5][i] = (double)xa[i] * xs[0];               /* a * s, s broadcast from [1] */
    }
    uint64_t compiled = 0;
    for (int run = 0; run < 2; run++)
        for (int v = 0; v < V; v++) {
            wgml_scope_begin(ctx);
            wgml_tensor *r = NULL;
            switch (v) {
            case 0: r = wgml_binary_scalar(ctx, WGML_SUB, a, 3.0f); break;
            case 1: r = wgml_scalar_binary(ctx, WGML_SUB, 3.0f, a); break;
            case 2: r = wgml_add(ctx, wgml_mul(ctx, a, b), a); break;
            case 3: r = wgml_mul(ctx, a, wgml_add(ctx, b, a)); break;
            case 4: r = wgml_mul(ctx, a, b); break;
            default: r = wgml_mul(ctx, a, s); break;
            }
            char what[32];
            snprintf(what, sizeof what, "variant %d, run %d", v, run);
            CHECK_CLOSE(ctx, what, r, want[v], M, 1e-6, 1e-30);
            wgml_scope_end(ctx);
            if (run == 0 && v == V - 1) compiled = stats(ctx).pipelines_compiled;
        }
    CHECK(stats(ctx).pipelines_compiled == compiled); /* the second run compiled nothing */
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    wgml_tensor_free(s);
}

/* Bind groups are kept for evaluations that repeat: after the first runs, running the same
   graph again makes none. Results stay right when the parameter buffer is replaced between
   two runs of a kernel with other scalars: 2100 kernels of at least 80 bytes of parameters
   each are more than its first 64 KiB. */
static void repeated_runs_reuse_bind_groups(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { M = 7, MANY = 2100 };
    float xa[M], xb[M];
    test_fill_uniform(xa, M, -1, 1);
    test_fill_uniform(xb, M, 0.5, 1.5);
    wgml_tensor *a = mk1(ctx, M, xa), *b = mk1(ctx, M, xb);
    uint64_t made[6];
    for (int run = 0; run < 6; run++) {
        wgml_scope_begin(ctx);
        wgml_tensor *t[2] = {wgml_add(ctx, a, b), wgml_exp(ctx, wgml_mul(ctx, a, b))};
        double want[2][M];
        for (int i = 0; i < M; i++) {
            want[0][i] = (double)xa[i] + xb[i];
            want[1][i] = wgml_ref_exp((float)((double)xa[i] * xb[i]));
        }
        CHECK_OK(ctx, wgml_eval(ctx, 2, t));
        CHECK_CLOSE(ctx, "a + b", t[0], want[0], M, 1e-6, 1e-30);
        CHECK_CLOSE(ctx, "exp(a * b)", t[1], want[1], M, 1e-4, 1e-30);
        wgml_scope_end(ctx);
        made[run] = stats(ctx).bind_groups_created;
    }
    CHECK(made[5] == made[3]); /* pool buffers come back in a fixed order: nothing new */
    CHECK(made[0] > 0);
    for (int run = 0; run < 3; run++) {
        float k = run == 1 ? 0.0f : 2.0f + (float)run; /* run 1: the big graph */
        wgml_scope_begin(ctx);
        if (run == 1) {
            static wgml_tensor *many[MANY];
            for (int i = 0; i < MANY; i++) many[i] = wgml_binary_scalar(ctx, WGML_MUL, a, (float)i);
            CHECK_OK(ctx, wgml_eval(ctx, MANY, many));
            double want[M];
            for (int i = 0; i < M; i++) want[i] = (double)xa[i] * (MANY - 1);
            CHECK_CLOSE(ctx, "the last of many", many[MANY - 1], want, M, 1e-6, 1e-30);
        } else {
            wgml_tensor *r = wgml_binary_scalar(ctx, WGML_MUL, a, k);
            double want[M];
            for (int i = 0; i < M; i++) want[i] = (double)xa[i] * k;
            CHECK_CLOSE(ctx, "a * k", r, want, M, 1e-6, 1e-30);
        }
        wgml_scope_end(ctx);
    }
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

/* wgml_stats.host_seconds_last: each evaluation's host work up to its submit, more than
   nothing and less than the evaluation took on the clock around it. */
static void host_time_of_an_evaluation(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { M = 1023 };
    float x[M];
    test_fill_uniform(x, M, -1, 1);
    wgml_tensor *a = mk1(ctx, M, x);
    for (int run = 0; run < 3; run++) {
        wgml_scope_begin(ctx);
        wgml_tensor *r = wgml_exp(ctx, wgml_binary_scalar(ctx, WGML_MUL, a, 0.5f));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK_OK(ctx, wgml_eval(ctx, 1, &r));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double host = stats(ctx).host_seconds_last;
        CHECK(host > 0 && host <= wall);
        wgml_scope_end(ctx);
    }
    wgml_tensor_free(a);
}

/* a graph mixing every kind of kernel */
static wgml_tensor *mixed_graph(wgml_context *ctx, wgml_tensor *a, wgml_tensor *w, wgml_tensor *bias, float s)
{
    wgml_matmul_desc md = {.bias = bias, .activation = WGML_ACT_GELU};
    wgml_tensor *h = wgml_matmul_ex(ctx, a, w, &md);                    /* [33, 20] */
    wgml_tensor *g = wgml_binary_scalar(ctx, WGML_MUL, wgml_tanh(ctx, h), s);
    wgml_tensor *n = wgml_layernorm(ctx, g, NULL, NULL, 1e-5f);
    wgml_tensor *p = wgml_softmax(ctx, n);
    return wgml_sum(ctx, p, 0, 0); /* [20] */
}

static void mixed_reference(const float *a, const float *w, const float *bias, float s, double *out)
{
    double h[33 * 20], n[33 * 20], p[33 * 20];
    test_ref_matmul(1, 33, 20, 17, a, 1, 0, w, 1, 0, 1.0, bias, 2, h);
    for (int i = 0; i < 33 * 20; i++) h[i] = wgml_ref_tanh(h[i]) * s;
    wgml_ref_layernorm(33, 20, h, NULL, NULL, 1e-5, n);
    wgml_ref_softmax(33, 20, n, p);
    int64_t shp[2] = {33, 20};
    wgml_ref_sum(2, shp, p, 0, out);
}

static void repeated_runs_compile_nothing_new(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float xa[33 * 17], xw[17 * 20], xb[20];
    test_fill_uniform(xa, 33 * 17, -1, 1);
    test_fill_uniform(xw, 17 * 20, -1, 1);
    test_fill_uniform(xb, 20, -0.5, 0.5);
    wgml_tensor *a = NULL, *w = NULL, *bias = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){33, 17}, xa, 33 * 17, &a));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){17, 20}, xw, 17 * 20, &w));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, (int64_t[]){20}, xb, 20, &bias));
    uint64_t compiled = 0, hits = 0;
    for (int run = 0; run < 4; run++) {
        float s = 1.5f + 0.25f * (float)run; /* another scalar each run: data, not source */
        double want[20];
        mixed_reference(xa, xw, xb, s, want);
        wgml_scope_begin(ctx);
        wgml_tensor *r = mixed_graph(ctx, a, w, bias, s);
        /* sums of 33 softmax probabilities (>0): no cancellation; the chain through
           layernorm amplifies f32 rounding a little */
        CHECK_CLOSE(ctx, "mixed graph", r, want, 20, 1e-4, 1e-30);
        wgml_scope_end(ctx);
        wgml_stats st = stats(ctx);
        if (run > 0) {
            CHECK(st.pipelines_compiled == compiled);
            CHECK(st.pipeline_cache_hits > hits);
        }
        compiled = st.pipelines_compiled;
        hits = st.pipeline_cache_hits;
    }
    wgml_tensor_free(a);
    wgml_tensor_free(w);
    wgml_tensor_free(bias);
}

static void scopes_free_what_they_made(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { M = 1023 };
    float x[M], y[M];
    test_fill_uniform(x, M, -1, 1);
    test_fill_uniform(y, M, 0.5, 1.5); /* exp(x) + y > 0: no cancellation */
    uint64_t cls = class_bytes(ctx, M);
    double want[M];
    for (int i = 0; i < M; i++) want[i] = (wgml_ref_exp(x[i]) + y[i]) * 2.0; /* exp: tolerance 1e-4 */

    /* 1: everything made inside is freed, evaluated or not */
    wgml_stats s0 = stats(ctx);
    wgml_scope_begin(ctx);
    {
        wgml_tensor *a = mk1(ctx, M, x), *b = mk1(ctx, M, y);
        wgml_tensor *e = wgml_exp(ctx, a);
        wgml_tensor *f = wgml_add(ctx, e, b);
        wgml_tensor *g = wgml_sum(ctx, f, 0, 1);
        wgml_tensor *h = wgml_binary_scalar(ctx, WGML_MUL, f, 2.0f);
        wgml_tensor *pair[2] = {g, e}; /* e evaluated and kept as storage */
        CHECK_OK(ctx, wgml_eval(ctx, 2, pair));
        CHECK_CLOSE(ctx, "inside the scope", h, want, M, 1e-4, 1e-30);
        wgml_stats in = stats(ctx);
        CHECK(in.bytes_in_use > s0.bytes_in_use);
        (void)wgml_neg(ctx, h); /* a lazy result never evaluated */
    }
    wgml_scope_end(ctx);
    wgml_stats s1 = stats(ctx);
    CHECK(s1.bytes_in_use == s0.bytes_in_use);

    /* 2: wgml_keep keeps one (lazy) result alive and readable; its inputs live while it does */
    wgml_tensor *kept = NULL;
    wgml_scope_begin(ctx);
    {
        wgml_tensor *a = mk1(ctx, M, x), *b = mk1(ctx, M, y);
        wgml_tensor *f = wgml_add(ctx, wgml_exp(ctx, a), b);
        kept = wgml_binary_scalar(ctx, WGML_MUL, f, 2.0f);
        wgml_keep(kept);
        (void)wgml_sum(ctx, f, 0, 0);
    }
    wgml_scope_end(ctx);
    CHECK(wgml_tensor_status(kept) == WGML_OK && wgml_tensor_numel(kept) == M);
    CHECK_CLOSE(ctx, "kept lazy result after scope end", kept, want, M, 1e-4, 1e-30);
    wgml_stats s2 = stats(ctx);
    CHECK(s2.bytes_in_use == s0.bytes_in_use + cls); /* evaluated: only its own buffer */
    CHECK_CLOSE(ctx, "kept result read again", kept, want, M, 1e-4, 1e-30);
    wgml_tensor_free(kept);
    wgml_stats s3 = stats(ctx);
    CHECK(s3.bytes_in_use == s0.bytes_in_use);

    /* 3: nested scopes: keep moves a tensor to the enclosing scope, which frees it */
    wgml_scope_begin(ctx);
    wgml_tensor *outer_kept = NULL;
    wgml_scope_begin(ctx);
    {
        wgml_tensor *a = mk1(ctx, M, x);
        outer_kept = wgml_exp(ctx, a);
        CHECK_OK(ctx, wgml_eval(ctx, 1, &outer_kept));
        wgml_keep(outer_kept);
    }
    wgml_scope_end(ctx);
    double we[M];
    for (int i = 0; i < M; i++) we[i] = wgml_ref_exp(x[i]);
    CHECK_CLOSE(ctx, "kept into the outer scope", outer_kept, we, M, 1e-4, 1e-30);
    wgml_stats s4 = stats(ctx);
    CHECK(s4.bytes_in_use == s0.bytes_in_use + cls);
    wgml_scope_end(ctx);
    wgml_stats s5 = stats(ctx);
    CHECK(s5.bytes_in_use == s0.bytes_in_use);

    /* 4: a loop of scopes reuses pool buffers: no growth after the first iteration */
    uint64_t live = 0;
    for (int it = 0; it < 10; it++) {
        wgml_scope_begin(ctx);
        wgml_tensor *a = mk1(ctx, M, x), *b = mk1(ctx, M, y);
        wgml_tensor *h = wgml_binary_scalar(ctx, WGML_MUL, wgml_add(ctx, wgml_exp(ctx, a), b), 2.0f);
        wgml_tensor *g = wgml_sum(ctx, h, 0, 0);
        wgml_tensor *both[2] = {h, g};
        CHECK_OK(ctx, wgml_eval(ctx, 2, both));
        wgml_scope_end(ctx);
        wgml_stats st = stats(ctx);
        if (it > 0) CHECK(st.buffers_live == live);
        live = st.buffers_live;
        CHECK(st.bytes_in_use == s0.bytes_in_use);
    }
}

/* ---------------------------------------------------------------- GPU timing */

/* With gpu_timing, each evaluation's compute pass is timed by GPU timestamps: a bigger
   elementwise op takes longer than a tiny one, the total is the sum, and results are still
   right (unrolled kernels too: WGML_EW_UNROLL). */
static void gpu_timing_times_each_pass(void)
{
    for (int u = 0; u < 2; u++) {
        if (u) setenv("WGML_EW_UNROLL", "4", 1); /* read at the context's first kernel */
        wgml_context *ctx;
        wgml_context_desc d = {.gpu_timing = 1};
        CHECK_OK(NULL, wgml_context_create(&d, &ctx));
        if (!ctx) return;
        CHECK(wgml_tuning_of(ctx)->ew_unroll == (u ? 4 : 0));
        unsetenv("WGML_EW_UNROLL");
        wgml_adapter_info info;
        wgml_adapter_info_get(ctx, &info);
        if (!info.has_timestamp_query) {
            fprintf(stderr, "  (adapter has no timestamp queries: skipped)\n");
            wgml_context_free(ctx);
            return;
        }
        const int64_t sizes[2] = {7, 1 << 22};
        double seconds[2] = {0, 0}, total = 0;
        for (int i = 0; i < 2; i++) {
            int64_t n = sizes[i];
            float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *got = malloc((size_t)n * sizeof *got);
            for (int64_t j = 0; j < n; j++) a[j] = (float)test_uniform(-2, 2), b[j] = (float)test_uniform(-2, 2);
            wgml_tensor *ta = mk1(ctx, n, a), *tb = mk1(ctx, n, b);
            wgml_tensor *warm = wgml_mul(ctx, wgml_add(ctx, ta, tb), tb); /* drivers may compile at first use */
            CHECK_OK(ctx, wgml_eval(ctx, 1, &warm));
            wgml_tensor_free(warm);
            total += stats(ctx).gpu_seconds_last;
            wgml_tensor *c = wgml_mul(ctx, wgml_add(ctx, ta, tb), tb);
            CHECK_OK(ctx, wgml_eval(ctx, 1, &c));
            wgml_stats s = stats(ctx);
            seconds[i] = s.gpu_seconds_last;
            total += s.gpu_seconds_last;
            CHECK(fabs(s.gpu_seconds_total - total) <= 1e-12 + 1e-9 * total);
            CHECK_OK(ctx, wgml_tensor_read(c, got, (size_t)n));
            int bad = 0;
            for (int64_t j = 0; j < n; j++) {
                double want = ((double)a[j] + b[j]) * b[j];
                if (fabs(got[j] - want) > 1e-5 * (1 + fabs(want))) bad++;
            }
            CHECK(bad == 0);
            wgml_tensor_free(c);
            wgml_tensor_free(ta);
            wgml_tensor_free(tb);
            free(a);
            free(b);
            free(got);
        }
        fprintf(stderr, "  unroll %d: 7 elements %.1f us, 4M elements %.1f us (GPU)\n", u ? 4 : 1,
                seconds[0] * 1e6, seconds[1] * 1e6);
        CHECK(seconds[0] > 0 && seconds[1] > seconds[0] && seconds[1] < 10.0);
        wgml_context_free(ctx);
    }
}

/* wgml_eval_read: every tensor evaluated and one read back, in one submit; bad arguments
   refused with messages, nothing evaluated then */
static void eval_read_is_one_submit(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float a[7];
    test_fill_uniform(a, 7, -2, 2);
    int64_t n = 7;
    wgml_tensor *x = test_tensor(ctx, 1, &n, a);
    wgml_scope_begin(ctx);
    wgml_tensor *e = wgml_exp(ctx, x), *arg = wgml_argmax(ctx, x, 0, 0), *both[2] = {e, arg};
    wgml_stats s0, s1;
    wgml_stats_get(ctx, &s0);
    int32_t idx = -1;
    CHECK_OK(ctx, wgml_eval_read(ctx, 2, both, arg, &idx, 1));
    wgml_stats_get(ctx, &s1);
    CHECK(s1.submits - s0.submits == 1);
    int best = 0;
    for (int i = 1; i < 7; i++) best = a[i] > a[best] ? i : best;
    CHECK(idx == best);
    float got[7];
    CHECK_OK(ctx, wgml_tensor_read(e, got, 7)); /* evaluated with it: a copy only */
    for (int i = 0; i < 7; i++) CHECK(fabs(got[i] - exp((double)a[i])) <= 1e-5 * exp((double)a[i]));
    wgml_tensor *other = wgml_neg(ctx, x);
    CHECK(wgml_eval_read(ctx, 2, both, other, got, 7) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "one of those evaluated"));
    CHECK(wgml_eval_read(ctx, 2, both, e, got, 6) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "host has 6 elements"));
    CHECK(wgml_eval_read(ctx, 2, both, e, NULL, 7) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "host is NULL"));
    wgml_scope_end(ctx);
    wgml_tensor_free(x);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(eval_read_is_one_submit);
    TEST_RUN(nothing_runs_until_a_result_is_needed);
    TEST_RUN(one_submit_per_evaluation);
    TEST_RUN(chain_of_100_ops_is_one_dispatch);
    TEST_RUN(chain_reading_one_input_many_times_is_one_dispatch);
    TEST_RUN(chain_with_50_scalars_is_one_dispatch);
    TEST_RUN(unfused_chain_runs_in_bounded_memory);
    TEST_RUN(fused_chain_allocates_only_its_result);
    TEST_RUN(release_cached_returns_free_buffers);
    TEST_RUN(fused_kernel_with_many_inputs_and_scalars);
    TEST_RUN(dag_evaluates_correctly);
    TEST_RUN(fused_kernels_differing_in_structure_stay_apart);
    TEST_RUN(repeated_runs_reuse_bind_groups);
    TEST_RUN(host_time_of_an_evaluation);
    TEST_RUN(repeated_runs_compile_nothing_new);
    TEST_RUN(scopes_free_what_they_made);
    TEST_RUN(gpu_timing_times_each_pass);
    return test_summary();
}
