/* Sizes past the thresholds where kernels used to give wrong answers with status OK:
   - lavapipe ends every loop of a shader once they have run 65535 times between them, so a
     thread that folds 2^24 / 256 elements stopped early (sums of 2^24 ones gave 131070);
   - more than 65535 workgroups take the 2-D grid;
   - millions of short rows once took a workgroup each (minutes on lavapipe).
   Full sizes run here on lavapipe (a few seconds each); the same mechanisms are also walked
   at small sizes under a small loop limit (WGML_LOOP_LIMIT), which forces the split paths.
   Every result is checked against a double-precision reference, or must be a clear
   WGML_ERROR_LIMIT: never a wrong answer with status OK. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define BIG ((int64_t)(1 << 24) + 3) /* past 65535 x 256 and past 2^24 */

static float read1(wgml_context *ctx, wgml_tensor *t, wgml_status *st)
{
    float v = NAN;
    *st = wgml_tensor_read(t, &v, 1);
    if (*st) fprintf(stderr, "  read: %s: %s\n", wgml_status_name(*st), wgml_error_message(ctx));
    return v;
}

static void check_scalar(wgml_context *ctx, const char *what, wgml_tensor *t, double want, double tol)
{
    wgml_status st;
    float got = read1(ctx, t, &st);
    CHECK(st == WGML_OK);
    double err = fabs(got - want) / fmax(fabs(want), 1e-30);
    if (!(err <= tol)) fprintf(stderr, "  %s: got %.9g want %.9g (rel %.3g)\n", what, got, want, err);
    CHECK(err <= tol);
    wgml_tensor_free(t);
}

/* Whole-tensor reductions at sizes around the old threshold, on data in [0.5, 1.5] with the
   maximum placed in the last few elements (a loop cut short would miss it). */
static void whole_tensor_reductions(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float *x = malloc((size_t)BIG * sizeof *x);
    test_fill_uniform(x, (size_t)BIG, 0.5, 1.5);
    const int64_t sizes[] = {16774656, 16774657, (1 << 24) - 3, BIG};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int64_t n = sizes[k];
        float saved = x[n - 2];
        x[n - 2] = 2.5f;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) sum += x[i];
        for (int64_t i = 0; i < n; i++) sq += ((double)x[i] - 1.0) * ((double)x[i] - 1.0);
        wgml_tensor *t = test_tensor(ctx, 1, &n, x);
        int64_t half[2] = {2, 0};
        fprintf(stderr, "  n = %lld\n", (long long)n);
        check_scalar(ctx, "sum_all", wgml_sum_all(ctx, t), sum, 1e-5);
        check_scalar(ctx, "mean_all", wgml_mean_all(ctx, t), sum / (double)n, 1e-5);
        check_scalar(ctx, "max_all", wgml_max_all(ctx, t), 2.5, 0);
        /* argmax results are i32: exact past 2^24 too */
        {
            wgml_tensor *am = wgml_argmax(ctx, t, 0, 0);
            int32_t at = -1;
            CHECK_OK(ctx, wgml_tensor_read_i32(am, &at, 1));
            CHECK(at == (int32_t)(n - 2));
            wgml_tensor_free(am);
        }
        check_scalar(ctx, "sum axis 0", wgml_sum(ctx, t, 0, 0), sum, 1e-5);
        /* mse against ones: mean((x - 1)^2) */
        float one = 1.0f;
        int64_t s1 = 1;
        wgml_tensor *ones = test_tensor(ctx, 1, &s1, &one);
        check_scalar(ctx, "mse", wgml_mse(ctx, t, ones), sq / (double)n, 1e-5);
        wgml_tensor_free(ones);
        /* the same data as [2, n/2]: sum over axis 1 splits both rows */
        if (n % 2 == 0) {
            half[1] = n / 2;
            wgml_tensor *m = test_tensor(ctx, 2, half, x);
            float got[2];
            CHECK_OK(ctx, wgml_tensor_read(wgml_sum(ctx, m, 1, 0), got, 2));
            double w0 = 0, w1 = 0;
            for (int64_t i = 0; i < n / 2; i++) w0 += x[i];
            for (int64_t i = n / 2; i < n; i++) w1 += x[i];
            CHECK(fabs(got[0] - w0) <= 1e-5 * w0 && fabs(got[1] - w1) <= 1e-5 * w1);
            wgml_tensor_free(m);
        }
        wgml_tensor_free(t);
        x[n - 2] = saved;
    }
    free(x);
}

/* The optimiser's global norm sums the squares of every gradient: one parameter of 2^24 + 3
   elements, gradient c, so the norm is |c| (clipping then scales by max_norm / |c|). */
static void grad_norm_of_a_big_parameter(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = BIG;
    float *c = malloc((size_t)n * sizeof *c);
    test_fill_uniform(c, (size_t)n, 0.5, 1.5);
    double sq = 0;
    for (int64_t i = 0; i < n; i++) sq += (double)c[i] * c[i];
    wgml_tensor *p = NULL, *ct = test_tensor(ctx, 1, &n, c);
    CHECK_OK(ctx, wgml_tensor_zeros(ctx, 1, &n, &p));
    wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 1.0f, .max_grad_norm = 1.0f};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 1, &p, &opt));
    wgml_tensor *loss = wgml_sum_all(ctx, wgml_mul(ctx, p, ct));
    CHECK_OK(ctx, wgml_backward(loss));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    float norm = 0;
    CHECK_OK(ctx, wgml_optimizer_grad_norm(opt, &norm));
    fprintf(stderr, "  norm %.7g want %.7g\n", norm, sqrt(sq));
    CHECK(fabs(norm - sqrt(sq)) <= 1e-5 * sqrt(sq));
    /* clipped to norm 1: p = -c / |c|, so p's last element is -c[n-1] / |c| */
    float last;
    wgml_tensor *tail = wgml_slice(ctx, p, 0, n - 1, n, 1);
    CHECK_OK(ctx, wgml_tensor_read(tail, &last, 1));
    CHECK(fabs(last + c[n - 1] / sqrt(sq)) <= 1e-4 * c[n - 1] / sqrt(sq));
    wgml_tensor_free(tail);
    wgml_tensor_free(loss);
    wgml_optimizer_free(opt);
    wgml_tensor_free(p);
    wgml_tensor_free(ct);
    free(c);
}

/* GEMV along a long K: [M, K] x [K, 1] of values near 1, for M = 1 (the GEMV) and M = 4 (the
   small-M path, or the swapped dot product). Either the right answer or a clear LIMIT. */
static void matmul_long_k(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t ks[] = {(1 << 21) + 5, BIG};
    const int64_t ms[] = {1, 4};
    for (size_t ki = 0; ki < 2; ki++)
        for (size_t mi = 0; mi < 2 - ki; mi++) { /* (not [4, 2^24]: past the binding size) */
            int64_t K = ks[ki], M = ms[mi];
            float *a = malloc((size_t)(M * K) * sizeof *a), *b = malloc((size_t)K * sizeof *b);
            test_fill_uniform(a, (size_t)(M * K), 0.5, 1.5);
            test_fill_uniform(b, (size_t)K, 0.5, 1.5);
            int64_t sa[2] = {M, K}, sb[2] = {K, 1};
            wgml_tensor *ta = test_tensor(ctx, 2, sa, a), *tb = test_tensor(ctx, 2, sb, b);
            float got[4];
            wgml_status st = wgml_tensor_read(wgml_matmul(ctx, ta, tb), got, (size_t)M);
            fprintf(stderr, "  [%lld, %lld] x [%lld, 1]: %s%s%s\n", (long long)M, (long long)K, (long long)K,
                    wgml_status_name(st), st ? ": " : "", st ? wgml_error_message(ctx) : "");
            CHECK(st == WGML_OK || st == WGML_ERROR_LIMIT);
            if (st == WGML_ERROR_LIMIT) CHECK(strstr(wgml_error_message(ctx), "loop iterations") != NULL);
            /* K = 2^21 + 5 fits every adapter's limit: it must be computed */
            if (ki == 0) CHECK(st == WGML_OK);
            for (int64_t m = 0; m < M && st == WGML_OK; m++) {
                double want = 0;
                for (int64_t k = 0; k < K; k++) want += (double)a[m * K + k] * b[k];
                if (!(fabs(got[m] - want) <= 1e-4 * want))
                    fprintf(stderr, "  row %lld: got %.9g want %.9g\n", (long long)m, got[m], want);
                CHECK(fabs(got[m] - want) <= 1e-4 * want);
            }
            wgml_tensor_free(ta);
            wgml_tensor_free(tb);
            free(a);
            free(b);
        }
}

/* Millions of short rows: softmax of [2^24 + 1, 1] (all ones), sum over axis 1 and softmax of
   [2^22 + 1, 2]; each past 65535 workgroups in the old layout and past it still for the
   first. */
static void many_short_rows(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t s1[2] = {(1 << 24) + 1, 1};
    float *x = malloc((size_t)s1[0] * 2 * sizeof *x), *y = malloc((size_t)s1[0] * 2 * sizeof *y);
    test_fill_uniform(x, (size_t)s1[0], -3, 3);
    wgml_tensor *t = test_tensor(ctx, 2, s1, x);
    wgml_tensor *sm = wgml_softmax(ctx, t);
    CHECK_OK(ctx, wgml_tensor_read(sm, y, (size_t)s1[0]));
    int64_t bad = 0;
    for (int64_t i = 0; i < s1[0]; i++) bad += y[i] != 1.0f;
    CHECK(bad == 0);
    wgml_tensor_free(sm);
    wgml_tensor *s = wgml_sum(ctx, t, 1, 0);
    CHECK_OK(ctx, wgml_tensor_read(s, y, (size_t)s1[0]));
    bad = 0;
    for (int64_t i = 0; i < s1[0]; i++) bad += y[i] != x[i];
    CHECK(bad == 0);
    wgml_tensor_free(s);
    wgml_tensor_free(t);

    int64_t s2[2] = {(1 << 22) + 1, 2};
    test_fill_uniform(x, (size_t)(s2[0] * 2), -3, 3);
    t = test_tensor(ctx, 2, s2, x);
    s = wgml_sum(ctx, t, 1, 0);
    CHECK_OK(ctx, wgml_tensor_read(s, y, (size_t)s2[0]));
    double worst = 0;
    for (int64_t i = 0; i < s2[0]; i++) worst = fmax(worst, fabs(y[i] - ((double)x[2 * i] + x[2 * i + 1])));
    CHECK(worst <= 1e-6);
    wgml_tensor_free(s);
    sm = wgml_softmax(ctx, t);
    CHECK_OK(ctx, wgml_tensor_read(sm, y, (size_t)(s2[0] * 2)));
    worst = 0;
    for (int64_t i = 0; i < s2[0]; i++) {
        double e0 = 1.0 / (1.0 + exp((double)x[2 * i + 1] - x[2 * i]));
        worst = fmax(worst, fabs(y[2 * i] - e0) + fabs(y[2 * i + 1] - (1.0 - e0)));
    }
    CHECK(worst <= 1e-6);
    wgml_tensor_free(sm);
    wgml_tensor_free(t);
    free(x);
    free(y);
}

/* A GEMV over 2^22 + 5 columns: 65537 workgroups of 64 columns. */
static void gemv_past_the_grid(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t N = (1 << 22) + 5, sa[2] = {1, 3}, sb[2] = {3, N};
    float a[3], *b = malloc((size_t)(3 * N) * sizeof *b), *y = malloc((size_t)N * sizeof *y);
    test_fill_uniform(a, 3, -1, 1);
    test_fill_uniform(b, (size_t)(3 * N), -1, 1);
    wgml_tensor *ta = test_tensor(ctx, 2, sa, a), *tb = test_tensor(ctx, 2, sb, b);
    wgml_tensor *r = wgml_matmul(ctx, ta, tb);
    CHECK_OK(ctx, wgml_tensor_read(r, y, (size_t)N));
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        worst = fmax(worst, fabs(y[n] - ((double)a[0] * b[n] + (double)a[1] * b[N + n] + (double)a[2] * b[2 * N + n])));
    CHECK(worst <= 1e-5);
    wgml_tensor_free(r);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    free(b);
    free(y);
}

/* Elementwise past 65535 workgroups of 256: a fused a * b + 1 on 2^24 + 3 elements. */
static void elementwise_past_the_grid(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = BIG;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *y = malloc((size_t)n * sizeof *y);
    test_fill_uniform(a, (size_t)n, -2, 2);
    test_fill_uniform(b, (size_t)n, -2, 2);
    wgml_tensor *ta = test_tensor(ctx, 1, &n, a), *tb = test_tensor(ctx, 1, &n, b);
    wgml_tensor *r = wgml_binary_scalar(ctx, WGML_ADD, wgml_mul(ctx, ta, tb), 1.0f);
    CHECK_OK(ctx, wgml_tensor_read(r, y, (size_t)n));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += y[i] != fmaf(a[i], b[i], 0.0f) + 1.0f && fabs(y[i] - ((double)a[i] * b[i] + 1)) > 1e-6;
    CHECK(bad == 0);
    wgml_tensor_free(r);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    free(a);
    free(b);
    free(y);
}

/* ---------------------------------------------------------------- under a small loop limit */

/* Reference reduction of x [outer, len, inner] along the middle axis. */
static void ref_reduce(int op, const float *x, int64_t outer, int64_t len, int64_t inner, double *out)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double acc = op >= 2 ? -INFINITY : 0;
            int64_t at = 0;
            for (int64_t j = 0; j < len; j++) {
                double v = x[(o * len + j) * inner + i];
                if (op < 2) acc += v;
                else if (v > acc) { acc = v; at = j; }
            }
            out[o * inner + i] = op == 1 ? acc / (double)len : op == 3 ? (double)at : acc;
        }
}

/* With WGML_LOOP_LIMIT=16 every reduction longer than 7 elements splits into two launches (a
   thread folds at most 7 elements, then the partials are folded): every kind, along every
   axis of awkward shapes, against the reference; the split shows in the dispatch count. A row
   op or matmul past the limit is refused with WGML_ERROR_LIMIT. */
static void small_loop_limit(void)
{
    setenv("WGML_LOOP_LIMIT", "16", 1);
    wgml_context *ctx = NULL;
    wgml_status cst = wgml_context_create(NULL, &ctx);
    unsetenv("WGML_LOOP_LIMIT");
    CHECK(cst == WGML_OK);
    if (cst) return;
    const int64_t shapes[][3] = {{1, 65537, 1}, {7, 1023, 3}, {3, 5000, 1}, {2, 7, 1031}, {1, 1, 1}, {4099, 3, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t outer = shapes[s][0], len = shapes[s][1], inner = shapes[s][2], n = outer * len * inner;
        float *x = malloc((size_t)n * sizeof *x);
        double *want = malloc((size_t)(outer * inner) * sizeof *want);
        float *got = malloc((size_t)(outer * inner) * sizeof *got);
        test_fill_uniform(x, (size_t)n, -1, 1);
        wgml_tensor *t = test_tensor(ctx, 3, shapes[s], x);
        for (int op = 0; op < 4; op++) {
            wgml_tensor *r = op == 0 ? wgml_sum(ctx, t, 1, 0)
                             : op == 1 ? wgml_mean(ctx, t, 1, 0)
                             : op == 2 ? wgml_max(ctx, t, 1, 0)
                                       : wgml_argmax(ctx, t, 1, 0);
            wgml_stats s0, s1;
            wgml_stats_get(ctx, &s0);
            wgml_status st = test_read(r, got, (size_t)(outer * inner));
            wgml_stats_get(ctx, &s1);
            CHECK_OK(ctx, st);
            ref_reduce(op, x, outer, len, inner, want);
            char what[96];
            snprintf(what, sizeof what, "op %d of [%lld, %lld, %lld] along axis 1", op, (long long)outer,
                     (long long)len, (long long)inner);
            CHECK(test_close(what, got, want, (size_t)(outer * inner), op == 3 ? 0 : 2e-5, 1.0));
            /* a long axis over few outputs takes the two launches */
            if (len > 7 * 256) CHECK(s1.dispatches - s0.dispatches == 2);
            wgml_tensor_free(r);
        }
        wgml_tensor_free(t);
        free(x);
        free(want);
        free(got);
    }
    /* a row of 4096 needs 4 * 16 + 128 trips: refused, clearly */
    int64_t rs[2] = {2, 4096};
    float *x = malloc(2 * 4096 * sizeof *x);
    test_fill_uniform(x, 2 * 4096, -1, 1);
    wgml_tensor *t = test_tensor(ctx, 2, rs, x);
    wgml_tensor *sm = wgml_softmax(ctx, t);
    CHECK_STATUS(ctx, wgml_tensor_read(sm, x, 2 * 4096), WGML_ERROR_LIMIT);
    CHECK(strstr(wgml_error_message(ctx), "softmax") && strstr(wgml_error_message(ctx), "limit of 16"));
    wgml_tensor_free(sm);
    wgml_tensor_free(t);
    free(x);
    wgml_context_free(ctx);
}

/* A label that is not a class index (out of range, negative, fractional, NaN) is reported at
   the next read, and its row's loss is NaN; no read outside the logits. */
static void cross_entropy_bad_labels(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t ls[2] = {3, 4}, lb = 3;
    float logits[12];
    test_fill_uniform(logits, 12, -1, 1);
    const float bad[] = {7.0f, -1.0f, 1.5f, NAN, 4.0f};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        float labels[3] = {0.0f, bad[k], 2.0f};
        wgml_tensor *x = test_tensor(ctx, 2, ls, logits), *y = test_tensor(ctx, 1, &lb, labels);
        wgml_tensor *loss = wgml_cross_entropy(ctx, x, y);
        float v = 0;
        CHECK_STATUS(ctx, wgml_tensor_read(loss, &v, 1), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(wgml_error_message(ctx), "row 1") != NULL);
        wgml_tensor_free(loss);
        /* reported once: a good read after it is OK */
        labels[1] = 3.0f;
        wgml_tensor *y2 = test_tensor(ctx, 1, &lb, labels);
        loss = wgml_cross_entropy(ctx, x, y2);
        CHECK_OK(ctx, wgml_tensor_read(loss, &v, 1));
        CHECK(isfinite(v));
        wgml_tensor_free(loss);
        wgml_tensor_free(x);
        wgml_tensor_free(y);
        wgml_tensor_free(y2);
    }
    /* evaluated without a read: the next read reports it */
    float labels[3] = {0.0f, 9.0f, 2.0f};
    wgml_tensor *x = test_tensor(ctx, 2, ls, logits), *y = test_tensor(ctx, 1, &lb, labels);
    wgml_tensor *loss = wgml_cross_entropy(ctx, x, y);
    CHECK_OK(ctx, wgml_eval(ctx, 1, &loss));
    float back[12];
    CHECK_STATUS(ctx, wgml_tensor_read(x, back, 12), WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(loss);
    wgml_tensor_free(x);
    wgml_tensor_free(y);
}

int main(void)
{
    TEST_RUN(small_loop_limit);
    TEST_RUN(cross_entropy_bad_labels);
    TEST_RUN(whole_tensor_reductions);
    TEST_RUN(grad_norm_of_a_big_parameter);
    TEST_RUN(matmul_long_k);
    TEST_RUN(many_short_rows);
    TEST_RUN(elementwise_past_the_grid);
    TEST_RUN(gemv_past_the_grid);
    test_context_release();
    return test_summary();
}
