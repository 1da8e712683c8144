/*
 * Cumulative sums and rotary position embedding against tests/ref/ref.h in double, beyond what
 * test_op_table's small cases (which check their gradients by central differences) reach:
 *
 *   cumsum: every axis (negative ones too) of 1-D to 4-D shapes with 1, 7, 1023, 65537 along
 *     the scanned axis, forward and reverse, on whole numbers (every partial sum exact in f32,
 *     so any error is a wrong index, block or carry: the result must be exact) and on real
 *     data (|error| within f32 rounding of the running sums); i32 with wrap-around; strided
 *     inputs; the split into blocks forced by a small loop limit, and a limit too small for
 *     any split refused; the gradient of a long scan is the reverse scan.
 *   rope: [2,3,7,8], [1,1,1,64], [1,2,130,128] (and heads wide enough for several launches)
 *     at offsets 0 and 37, bases 10000 and 500000, both pairings, against the exact rotation
 *     (the error is the f32 angle's rounding, ~ position x 2^-24 of the row's scale) and,
 *     far out at 100000, against the rotation by HF's f32 angle (the kernel's own error
 *     only); a query at offset k equals row t + k of the longer sequence, bit for bit (a KV
 *     cache); the inverse gets x back; the gradient of a large case is the inverse rotation;
 *     odd D, 1-D, i32, bad bases and positions are refused with clear statuses.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "harness.h"

/* ---------------------------------------------------------------- cumsum */

/* every shape is scanned along each of its axes */
static const struct { int nd; int64_t s[4]; } scan_shapes[] = {
    {1, {1}}, {1, {7}}, {1, {1023}}, {1, {65537}},
    {2, {3, 1023}}, {2, {1023, 7}}, {2, {65537, 2}}, {2, {300, 2000}}, {2, {2, 65537}},
    {3, {2, 7, 1023}}, {3, {3, 65537, 2}}, {3, {1, 1, 7}},
    {4, {2, 3, 7, 65}}, {4, {1, 2, 1023, 3}}, {4, {1, 1, 1, 65537}},
};

/* cumsum of x (shape nd, sh) along axis, both directions, against the reference: exact when
   `whole` (x holds small whole numbers), else within f32 rounding of the running sums */
static void scan_case(wgml_context *ctx, int nd, const int64_t *sh, int axis, bool whole)
{
    int64_t n = test_numel(nd, sh);
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    double *xd = malloc((size_t)n * sizeof *xd), *want = malloc((size_t)n * sizeof *want);
    double *abs_x = malloc((size_t)n * sizeof *abs_x), *abs_run = malloc((size_t)n * sizeof *abs_run);
    for (int64_t i = 0; i < n; i++) {
        x[i] = whole ? (float)((int)(test_rand_u64() % 17) - 8) : (float)test_uniform(-1, 1);
        xd[i] = x[i];
        abs_x[i] = fabs(xd[i]);
    }
    char ss[64], what[128];
    test_shape_str(ss, sizeof ss, nd, sh);
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, nd, sh, x);
    int ax = axis < 0 ? axis + nd : axis;
    for (int rev = 0; rev < 2; rev++) {
        snprintf(what, sizeof what, "cumsum %s axis %d%s (%s data)", ss, axis, rev ? " reverse" : "", whole ? "whole" : "real");
        wgml_tensor *y = wgml_cumsum(ctx, t, axis, rev);
        wgml_status st = wgml_tensor_read(y, got, (size_t)n);
        if (st) {
            fprintf(stderr, "FAIL %s: %s: read gave %s: %s\n", test_current, what, wgml_status_name(st), wgml_error_message(ctx));
            test_failures++;
            continue;
        }
        wgml_ref_cumsum(nd, sh, xd, ax, rev, want);
        if (whole) {
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if ((double)got[i] != want[i] && bad++ == 0) first = i;
            if (bad) {
                fprintf(stderr, "FAIL %s: %s: %lld elements not exact, first [%lld]: got %.9g want %.9g\n", test_current, what,
                        (long long)bad, (long long)first, (double)got[first], want[first]);
                test_failures++;
            }
        } else {
            /* |error| <= 1e-6 x (the running sum of |x|, and at least 1): f32 rounding of a
               blocked scan grows with the magnitudes summed, well under this */
            wgml_ref_cumsum(nd, sh, abs_x, ax, rev, abs_run);
            double worst = 0;
            int64_t at = 0;
            for (int64_t i = 0; i < n; i++) {
                double e = fabs((double)got[i] - want[i]) / fmax(abs_run[i], 1.0);
                if (!(e <= worst)) worst = e, at = i;
            }
            if (!(worst <= 1e-6)) {
                fprintf(stderr, "FAIL %s: %s: error %.3g of the running |x| sum at [%lld]: got %.9g want %.9g\n", test_current, what,
                        worst, (long long)at, (double)got[at], want[at]);
                test_failures++;
            }
        }
    }
    wgml_scope_end(ctx);
    free(x);
    free(got);
    free(xd);
    free(want);
    free(abs_x);
    free(abs_run);
}

static void cumsum_along_every_axis_matches_double(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int cases = 0;
    for (size_t s = 0; s < sizeof scan_shapes / sizeof scan_shapes[0]; s++)
        for (int ax = 0; ax < scan_shapes[s].nd; ax++) {
            /* negative axes for the last one */
            int axis = ax == scan_shapes[s].nd - 1 ? -1 : ax;
            scan_case(ctx, scan_shapes[s].nd, scan_shapes[s].s, axis, true);
            scan_case(ctx, scan_shapes[s].nd, scan_shapes[s].s, axis, false);
            cases += 4;
        }
    fprintf(stderr, "  %d scans\n", cases);
}

/* i32: exact, and wrapping as two's complement */
static void cumsum_of_integers(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { R = 3, N = 1023 };
    static int32_t v[R * N], got[R * N];
    for (int i = 0; i < R * N; i++) v[i] = (int32_t)(test_rand_u64() % 2000001) - 1000000;
    int64_t sh[2] = {R, N};
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 2, sh, v, R * N, &t));
    for (int rev = 0; rev < 2; rev++) {
        wgml_tensor *y = wgml_cumsum(ctx, t, 1, rev);
        CHECK(wgml_tensor_dtype(y) == WGML_I32);
        CHECK_OK(ctx, wgml_tensor_read_i32(y, got, R * N));
        int bad = 0;
        for (int r = 0; r < R; r++) {
            int64_t s = 0;
            for (int q = 0; q < N; q++) {
                int k = rev ? N - 1 - q : q;
                s += v[r * N + k];
                bad += got[r * N + k] != (int32_t)s;
            }
        }
        CHECK(bad == 0);
    }
    /* along axis 0 (columns) */
    wgml_tensor *y0 = wgml_cumsum(ctx, t, 0, 0);
    CHECK_OK(ctx, wgml_tensor_read_i32(y0, got, R * N));
    int bad = 0;
    for (int j = 0; j < N; j++) {
        int64_t s = 0;
        for (int r = 0; r < R; r++) bad += got[r * N + j] != (int32_t)(s += v[r * N + j]);
    }
    CHECK(bad == 0);
    const int32_t w[3] = {INT32_MAX, 1, 5};
    int32_t wg[3];
    int64_t n3 = 3;
    wgml_tensor *tw = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 1, &n3, w, 3, &tw));
    CHECK_OK(ctx, wgml_tensor_read_i32(wgml_cumsum(ctx, tw, 0, 0), wg, 3));
    CHECK(wg[0] == INT32_MAX && wg[1] == INT32_MIN && wg[2] == INT32_MIN + 5);
    wgml_scope_end(ctx);
}

/* a transposed view and a slice (an offset into its buffer) scan as their contiguous copies */
static void cumsum_of_strided_views(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { A = 70, B = 130 };
    static float x[A * B], got[A * B];
    static double xt[A * B], want[A * B];
    for (int i = 0; i < A * B; i++) x[i] = (float)((int)(test_rand_u64() % 9) - 4);
    int64_t sh[2] = {A, B}, sht[2] = {B, A};
    wgml_tensor *t = test_tensor(ctx, 2, sh, x);
    wgml_tensor *tt = wgml_transpose(ctx, t, 0, 1); /* [B, A] */
    for (int i = 0; i < B; i++)
        for (int j = 0; j < A; j++) xt[i * A + j] = x[j * B + i];
    for (int axis = 0; axis < 2; axis++) {
        CHECK_OK(ctx, wgml_tensor_read(wgml_cumsum(ctx, tt, axis, axis), got, A * B));
        wgml_ref_cumsum(2, sht, xt, axis, axis, want);
        int bad = 0;
        for (int i = 0; i < A * B; i++) bad += (double)got[i] != want[i];
        CHECK(bad == 0);
    }
    /* rows 5..69 of t, columns 3..129: offset 5 B + 3 */
    wgml_tensor *s = wgml_slice(ctx, wgml_slice(ctx, t, 0, 5, A, 1), 1, 3, B, 1);
    int64_t shs[2] = {A - 5, B - 3};
    for (int i = 0; i < A - 5; i++)
        for (int j = 0; j < B - 3; j++) xt[i * (B - 3) + j] = x[(i + 5) * B + j + 3];
    CHECK_OK(ctx, wgml_tensor_read(wgml_cumsum(ctx, s, -1, 1), got, (size_t)((A - 5) * (B - 3))));
    wgml_ref_cumsum(2, shs, xt, 1, 1, want);
    int bad = 0;
    for (int i = 0; i < (A - 5) * (B - 3); i++) bad += (double)got[i] != want[i];
    CHECK(bad == 0);
    wgml_scope_end(ctx);
}

/* A context whose loop limit (WGML_LOOP_LIMIT) makes the scans split where lavapipe's own
   would not: results stay exact; a limit below one tile's loops is refused, not wrong. */
static void cumsum_splits_under_a_small_loop_limit(void)
{
    const char *old = getenv("WGML_LOOP_LIMIT");
    char *saved = old ? strdup(old) : NULL;
    setenv("WGML_LOOP_LIMIT", "300", 1);
    wgml_context *ctx = NULL;
    wgml_status st = wgml_context_create(NULL, &ctx);
    CHECK(st == WGML_OK);
    if (ctx) {
        /* rows: 300 rows of 20 tiles (past the 12 that 300 loops allow: two blocks each);
           columns: 70000 > 300 along the axis */
        const struct { int nd; int64_t s[2]; int axis; } cases[] = {{2, {300, 20000}, 1}, {2, {70000, 3}, 0}, {1, {65537}, 0}};
        for (int c = 0; c < 3; c++) scan_case(ctx, cases[c].nd, cases[c].s, cases[c].axis, true);
        wgml_context_free(ctx);
    }
    setenv("WGML_LOOP_LIMIT", "20", 1);
    ctx = NULL;
    CHECK(wgml_context_create(NULL, &ctx) == WGML_OK);
    if (ctx) {
        static float x[4096];
        int64_t n = 4096;
        wgml_tensor *t = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 4096, &t));
        CHECK_STATUS(ctx, wgml_tensor_read(wgml_cumsum(ctx, t, 0, 0), x, 4096), WGML_ERROR_LIMIT);
        CHECK(strstr(wgml_error_message(ctx), "cumsum") != NULL);
        wgml_context_free(ctx);
    }
    if (saved) setenv("WGML_LOOP_LIMIT", saved, 1);
    else unsetenv("WGML_LOOP_LIMIT");
    free(saved);
}

/* d/dx sum(w cumsum(x)) = cumsum(w) the other way, on scans long enough to split */
static void cumsum_gradient_is_the_reverse_scan(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const struct { int nd; int64_t s[2]; int axis; } cases[] = {{2, {3, 65537}, 1}, {2, {65537, 2}, 0}};
    for (int c = 0; c < 2; c++)
        for (int rev = 0; rev < 2; rev++) {
            int64_t n = test_numel(cases[c].nd, cases[c].s);
            float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w), *got = malloc((size_t)n * sizeof *got);
            double *wd = malloc((size_t)n * sizeof *wd), *want = malloc((size_t)n * sizeof *want);
            for (int64_t i = 0; i < n; i++) {
                x[i] = (float)test_uniform(-1, 1);
                w[i] = (float)((int)(test_rand_u64() % 9) - 4);
                wd[i] = w[i];
            }
            wgml_scope_begin(ctx);
            wgml_tensor *t = test_tensor(ctx, cases[c].nd, cases[c].s, x);
            CHECK_OK(ctx, wgml_requires_grad(t, 1));
            wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_cumsum(ctx, t, cases[c].axis, rev), test_tensor(ctx, cases[c].nd, cases[c].s, w)));
            CHECK_OK(ctx, wgml_backward(L));
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(t), got, (size_t)n));
            wgml_ref_cumsum(cases[c].nd, cases[c].s, wd, cases[c].axis, !rev, want);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) bad += (double)got[i] != want[i];
            if (bad) fprintf(stderr, "  gradient case %d reverse %d: %lld elements off\n", c, rev, (long long)bad);
            CHECK(bad == 0);
            wgml_scope_end(ctx);
            free(x);
            free(w);
            free(got);
            free(wd);
            free(want);
        }
}

static void cumsum_bad_inputs(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    const float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3};
    wgml_tensor *t = test_tensor(ctx, 2, sh, v);
    CHECK(wgml_tensor_status(wgml_cumsum(ctx, t, 2, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "cumsum: axis 2") != NULL);
    CHECK(wgml_tensor_status(wgml_cumsum(ctx, t, -3, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_cumsum(ctx, NULL, 0, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_cumsum(NULL, t, 0, 0) == NULL);
    /* an input in error passes its status on */
    wgml_tensor *e = wgml_reshape(ctx, t, 1, (int64_t[]){5});
    CHECK(wgml_tensor_status(wgml_cumsum(ctx, e, 0, 0)) == WGML_ERROR_SHAPE);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* ---------------------------------------------------------------- rope */

/* The worst |got - want| over the row's largest |x|, per element. */
static double rope_err(const float *got, const double *want, const float *x, int64_t rows, int64_t D, int64_t *at)
{
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        double scale = 1e-30;
        for (int64_t j = 0; j < D; j++) scale = fmax(scale, fabs((double)x[r * D + j]));
        for (int64_t j = 0; j < D; j++) {
            double e = fabs((double)got[r * D + j] - want[r * D + j]) / scale;
            if (!(e <= worst)) worst = e, *at = r * D + j;
        }
    }
    return worst;
}

/* the rotation by HF's angle: the f32 product of the f32 position and the frequency computed
   in f32 as HF does, then cos and sin in double */
static void rope_f32_angles(int64_t batch, int64_t T, int64_t D, const float *x, int64_t pos_offset, float base, double *out)
{
    int64_t half = D / 2;
    for (int64_t r = 0; r < batch * T; r++) {
        float pos = (float)(r % T + pos_offset);
        for (int64_t j = 0; j < half; j++) {
            float inv = 1.0f / powf(base, (float)(2 * j) / (float)D);
            float a = pos * inv;
            double c = cos((double)a), s = sin((double)a), x1 = x[r * D + j], x2 = x[r * D + j + half];
            out[r * D + j] = x1 * c - x2 * s;
            out[r * D + j + half] = x2 * c + x1 * s;
        }
    }
}

/* rope of x [..., T, D] against the exact rotation: the angle's f32 rounding (the product's
   half ulp, the frequency's) moves it by ~ angle x 2^-23 at most, and the result by as much
   times the row's scale; a wrong angle, pairing or sign is off by O(1) */
static void rope_case(wgml_context *ctx, int nd, const int64_t *sh, int64_t pos_offset, float base, int interleaved)
{
    int64_t n = test_numel(nd, sh), D = sh[nd - 1], T = sh[nd - 2];
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    double *xd = malloc((size_t)n * sizeof *xd), *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) xd[i] = x[i] = (float)test_uniform(-2, 2);
    char ss[64], what[160];
    test_shape_str(ss, sizeof ss, nd, sh);
    snprintf(what, sizeof what, "rope %s offset %lld base %g%s", ss, (long long)pos_offset, base, interleaved ? " interleaved" : "");
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, nd, sh, x);
    wgml_tensor *y = interleaved ? wgml_rope_ex(ctx, t, &(wgml_rope_desc){.pos_offset = pos_offset, .base = base, .interleaved = 1})
                                 : wgml_rope(ctx, t, pos_offset, base);
    wgml_status st = wgml_tensor_read(y, got, (size_t)n);
    if (st) {
        fprintf(stderr, "FAIL %s: %s: read gave %s: %s\n", test_current, what, wgml_status_name(st), wgml_error_message(ctx));
        test_failures++;
    } else {
        wgml_ref_rope(n / (T * D), T, D, xd, (double)pos_offset, base, interleaved, 0, want);
        double max_angle = (double)(pos_offset + T - 1), tol = 2e-6 + max_angle * 2.4e-7; /* 2 x 2^-23 per radian */
        int64_t at = 0;
        double err = rope_err(got, want, x, n / D, D, &at);
        if (!(err <= tol)) {
            fprintf(stderr, "FAIL %s: %s: error %.3g of the row's scale > %.3g at [%lld]: got %.9g want %.9g\n", test_current, what,
                    err, tol, (long long)at, (double)got[at], want[at]);
            test_failures++;
        }
    }
    wgml_scope_end(ctx);
    free(x);
    free(got);
    free(xd);
    free(want);
}

static void rope_matches_the_exact_rotation(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* [B,H,T,D]; 600 and 3904 wide heads take 2 and 8 launches (244 pairs each); a 2-D [T, D]
       and a 3-D input too */
    static const struct { int nd; int64_t s[4]; } shapes[] = {
        {4, {2, 3, 7, 8}}, {4, {1, 1, 1, 64}}, {4, {1, 2, 130, 128}}, {4, {1, 1, 3, 600}}, {4, {1, 1, 2, 3904}},
        {2, {5, 2}}, {3, {3, 9, 6}},
    };
    static const int64_t offsets[] = {0, 37};
    static const float bases[] = {10000.0f, 500000.0f};
    int cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int o = 0; o < 2; o++)
            for (int b = 0; b < 2; b++)
                for (int il = 0; il < 2; il++, cases++) rope_case(ctx, shapes[s].nd, shapes[s].s, offsets[o], bases[b], il);
    /* a long way out: angles to ~1e3 */
    rope_case(ctx, 4, (int64_t[]){1, 1, 4, 64}, 1000, 10000.0f, 0);
    fprintf(stderr, "  %d cases\n", cases + 1);
}

/* Far out (positions ~1e5 and on to the last accepted, 2^24), the f32 angle itself is off the
   exact one by up to ~1: against the rotation by that same f32 angle, the kernel's own error
   (the reduction to [-pi, pi], sin and cos) stays ~1e-6. Base 0 means 10000, bit for bit. */
static void rope_follows_hf_f32_angles_far_out(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { B = 2, T = 5, D = 128, N = B * T * D };
    static float x[N], got[N], got0[N];
    static double want[N];
    for (int i = 0; i < N; i++) x[i] = (float)test_uniform(-2, 2);
    int64_t sh[3] = {B, T, D};
    wgml_tensor *t = test_tensor(ctx, 3, sh, x);
    const int64_t offsets[] = {0, 4097, 100000, 400000, 420000, 1000003, 1 << 22, 12345679, (1 << 24) + 1 - T};
    for (int k = 0; k < N_OF(offsets); k++) {
        CHECK_OK(ctx, wgml_tensor_read(wgml_rope(ctx, t, offsets[k], 10000.0f), got, N));
        rope_f32_angles(B, T, D, x, offsets[k], 10000.0f, want);
        int64_t at = 0;
        double err = rope_err(got, want, x, B * T, D, &at);
        if (!(err <= 3e-6)) {
            fprintf(stderr, "  offset %lld: error %.3g against the f32 angles at [%lld]: got %.9g want %.9g\n", (long long)offsets[k], err,
                    (long long)at, (double)got[at], want[at]);
            CHECK(err <= 3e-6);
        }
    }
    CHECK_OK(ctx, wgml_tensor_read(wgml_rope(ctx, t, 37, 0.0f), got0, N));
    CHECK_OK(ctx, wgml_tensor_read(wgml_rope(ctx, t, 37, 10000.0f), got, N));
    CHECK(memcmp(got0, got, sizeof got) == 0);
    wgml_scope_end(ctx);
}

/* A query block at offset k is rotated exactly as rows k.. of the whole sequence: a KV cache
   can rotate each new token once. The query comes as a strided view (rows of [1,H,T,D]). */
static void rope_with_an_offset_continues_a_sequence(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { H = 3, T = 40, D = 32, N = H * T * D };
    static float x[N], whole[N], part[N];
    for (int i = 0; i < N; i++) x[i] = (float)test_uniform(-2, 2);
    int64_t sh[4] = {1, H, T, D};
    wgml_tensor *t = test_tensor(ctx, 4, sh, x);
    for (int base_off = 0; base_off <= 37; base_off += 37)
        for (int il = 0; il < 2; il++) {
            wgml_rope_desc d = {.pos_offset = base_off, .base = 500000.0f, .interleaved = il};
            CHECK_OK(ctx, wgml_tensor_read(wgml_rope_ex(ctx, t, &d), whole, N));
            const int64_t starts[] = {0, 1, 17, 39};
            for (int s = 0; s < 4; s++) {
                int64_t k = starts[s], m = T - k < 5 ? T - k : 5;
                wgml_tensor *q = wgml_slice(ctx, t, 2, k, k + m, 1); /* [1, H, m, D], strided */
                wgml_rope_desc dq = d;
                dq.pos_offset = base_off + k;
                CHECK_OK(ctx, wgml_tensor_read(wgml_rope_ex(ctx, q, &dq), part, (size_t)(H * m * D)));
                int bad = 0;
                for (int h = 0; h < H; h++)
                    for (int64_t r = 0; r < m; r++)
                        bad += memcmp(part + (h * m + r) * D, whole + (h * T + k + r) * D, D * sizeof(float)) != 0;
                if (bad) fprintf(stderr, "  offset %d + %lld (interleaved %d): %d rows differ from the whole sequence's\n", base_off,
                                 (long long)k, il, bad);
                CHECK(bad == 0);
            }
        }
    wgml_scope_end(ctx);
}

/* the inverse undoes the rotation (both ways round), and is the rotation by -angle */
static void rope_inverse_gets_x_back(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { B = 2, H = 2, T = 33, D = 64, N = B * H * T * D };
    static float x[N], got[N];
    static double xd[N], want[N];
    for (int i = 0; i < N; i++) xd[i] = x[i] = (float)test_uniform(-2, 2);
    int64_t sh[4] = {B, H, T, D};
    wgml_tensor *t = test_tensor(ctx, 4, sh, x);
    for (int il = 0; il < 2; il++) {
        wgml_rope_desc f = {.pos_offset = 37, .interleaved = il}, inv = f;
        inv.inverse = 1;
        int64_t at = 0;
        CHECK_OK(ctx, wgml_tensor_read(wgml_rope_ex(ctx, wgml_rope_ex(ctx, t, &f), &inv), got, N));
        double err = rope_err(got, xd, x, B * H * T, D, &at);
        CHECK(err <= 1e-6);
        CHECK_OK(ctx, wgml_tensor_read(wgml_rope_ex(ctx, wgml_rope_ex(ctx, t, &inv), &f), got, N));
        err = rope_err(got, xd, x, B * H * T, D, &at);
        CHECK(err <= 1e-6);
        CHECK_OK(ctx, wgml_tensor_read(wgml_rope_ex(ctx, t, &inv), got, N));
        wgml_ref_rope(B * H, T, D, xd, 37, 10000, il, 1, want);
        err = rope_err(got, want, x, B * H * T, D, &at);
        if (!(err <= 2e-5)) fprintf(stderr, "  inverse (interleaved %d) off the reference by %.3g\n", il, err);
        CHECK(err <= 2e-5);
    }
    wgml_scope_end(ctx);
}

/* d/dx sum(w rope(x)) = rope^T(w): the inverse rotation of w, on [1,2,130,128] at offset 37 */
static void rope_gradient_is_the_inverse_rotation(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { H = 2, T = 130, D = 128, N = H * T * D };
    static float x[N], w[N], got[N];
    static double wd[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)test_uniform(-2, 2);
        wd[i] = w[i] = (float)test_uniform(-1, 1);
    }
    int64_t sh[4] = {1, H, T, D};
    for (int il = 0; il < 2; il++) {
        wgml_tensor *t = test_tensor(ctx, 4, sh, x);
        CHECK_OK(ctx, wgml_requires_grad(t, 1));
        wgml_rope_desc d = {.pos_offset = 37, .base = 500000.0f, .interleaved = il};
        wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_rope_ex(ctx, t, &d), test_tensor(ctx, 4, sh, w)));
        CHECK_OK(ctx, wgml_backward(L));
        CHECK_OK(ctx, wgml_tensor_read(wgml_grad(t), got, N));
        wgml_ref_rope(H, T, D, wd, 37, 500000.0, il, 1, want);
        int64_t at = 0;
        double err = rope_err(got, want, w, H * T, D, &at);
        if (!(err <= 6e-5)) fprintf(stderr, "  gradient (interleaved %d): error %.3g at [%lld]\n", il, err, (long long)at);
        CHECK(err <= 6e-5);
    }
    wgml_scope_end(ctx);
}

static void rope_bad_inputs(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    static float v[2 * 4000];
    int64_t s_odd[3] = {2, 3, 5}, s_1d[1] = {8}, s_ok[3] = {2, 2, 4}, s_wide[2] = {2, 4000};
    wgml_tensor *odd = test_tensor(ctx, 3, s_odd, v), *one = test_tensor(ctx, 1, s_1d, v), *ok = test_tensor(ctx, 3, s_ok, v);
    wgml_tensor *wide = test_tensor(ctx, 2, s_wide, v);
    int32_t iv[16] = {0};
    wgml_tensor *ti = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 3, s_ok, iv, 16, &ti));
    CHECK(wgml_tensor_status(wgml_rope(ctx, odd, 0, 0)) == WGML_ERROR_SHAPE);
    CHECK(strstr(wgml_error_message(ctx), "rope: x [2, 3, 5]") != NULL);
    CHECK(wgml_tensor_status(wgml_rope(ctx, one, 0, 0)) == WGML_ERROR_SHAPE);
    CHECK(strstr(wgml_error_message(ctx), "rope") != NULL);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ti, 0, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "rope") != NULL && strstr(wgml_error_message(ctx), "i32") != NULL);
    CHECK(wgml_tensor_status(wgml_rope(ctx, wide, 0, 0)) == WGML_ERROR_LIMIT);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 0, -1.0f)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "base") != NULL);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 0, NAN)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 0, INFINITY)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, -1, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "positions") != NULL);
    /* the last position, pos_offset + T - 1 = 2^24, is fine; one more is not */
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, (1 << 24) - 1, 0)) == WGML_OK);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 1 << 24, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    /* a base below 1 makes frequencies above 1: angles past 2^31 are refused, naming the base */
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 1000, 0.5f)) == WGML_OK);
    CHECK(wgml_tensor_status(wgml_rope(ctx, ok, 1 << 23, 1e-6f)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "base") != NULL && strstr(wgml_error_message(ctx), "2^31") != NULL);
    CHECK(wgml_tensor_status(wgml_rope(ctx, NULL, 0, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_rope(NULL, ok, 0, 0) == NULL);
    CHECK(wgml_tensor_status(wgml_rope_ex(ctx, ok, NULL)) == WGML_OK);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(cumsum_along_every_axis_matches_double);
    TEST_RUN(cumsum_of_integers);
    TEST_RUN(cumsum_of_strided_views);
    TEST_RUN(cumsum_splits_under_a_small_loop_limit);
    TEST_RUN(cumsum_gradient_is_the_reverse_scan);
    TEST_RUN(cumsum_bad_inputs);
    TEST_RUN(rope_matches_the_exact_rotation);
    TEST_RUN(rope_follows_hf_f32_angles_far_out);
    TEST_RUN(rope_with_an_offset_continues_a_sequence);
    TEST_RUN(rope_inverse_gets_x_back);
    TEST_RUN(rope_gradient_is_the_inverse_rotation);
    TEST_RUN(rope_bad_inputs);
    return test_summary();
}
