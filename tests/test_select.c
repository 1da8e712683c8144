/*
 * Integer tensors, comparisons, selection and masks: what test_op_table's random draws cannot
 * reach (ties, NaN, infinities on the side not chosen, whole numbers past 2^24), the causal
 * mask against its definition, and every wrong dtype answered with a clear status.
 */
#include <math.h>
#include <string.h>

#include "core/tensor.h"
#include "harness.h"

/* i32 data round trips exactly, values whose bits are f32 denormals and NaNs included, through
   the upload, a contiguous copy of a strided view, and both casts */
static void integers_round_trip(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { N = 1023 };
    static int32_t v[N], got[N];
    for (int i = 0; i < N; i++) v[i] = (int32_t)(test_rand_u64() % 4000000) - 2000000;
    v[0] = 1;                  /* the bits of the smallest f32 denormal */
    v[1] = 0x7fc00001;         /* the bits of a NaN */
    v[2] = INT32_MIN;
    v[3] = INT32_MAX;
    v[4] = (1 << 24) + 1;      /* not a float */
    int64_t n = N;
    wgml_tensor *t = test_tensor_i32(ctx, 1, &n, v);
    CHECK(wgml_tensor_dtype(t) == WGML_I32);
    CHECK_OK(ctx, wgml_tensor_read_i32(t, got, N));
    CHECK(memcmp(v, got, sizeof v) == 0);
    /* a strided view copied by the fused kernel keeps the bits */
    int64_t sh2[2] = {31, 33};
    wgml_tensor *m = wgml_reshape(ctx, t, 2, sh2);
    wgml_tensor *mt = wgml_contiguous(ctx, wgml_transpose(ctx, m, 0, 1));
    CHECK(wgml_tensor_dtype(mt) == WGML_I32);
    static int32_t tr[N];
    CHECK_OK(ctx, wgml_tensor_read_i32(mt, tr, N));
    int bad = 0;
    for (int i = 0; i < 31; i++)
        for (int j = 0; j < 33; j++) bad += tr[j * 31 + i] != v[i * 33 + j];
    CHECK(bad == 0);
    /* i32 -> f32 -> i32: exact below 2^24; INT32_MAX (2^31 as f32) saturates back to itself */
    wgml_tensor *back = wgml_cast(ctx, wgml_cast(ctx, t, WGML_F32), WGML_I32);
    CHECK_OK(ctx, wgml_tensor_read_i32(back, got, N));
    bad = 0;
    for (int i = 0; i < N; i++) {
        double want = (double)(float)v[i];
        want = want >= 2147483648.0 ? 2147483647.0 : want;
        bad += (double)got[i] != want;
    }
    CHECK(bad == 0);
    /* a cast to the same dtype is a view */
    wgml_tensor *same = wgml_cast(ctx, t, WGML_I32);
    CHECK(same && wgml_tensor_status(same) == WGML_OK);
    wgml_scope_end(ctx);
}

/* f32 -> i32: toward zero, saturating, NaN to 0 */
static void float_to_int_edges(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    const float x[11] = {2.7f, -2.7f, -0.5f, 3e9f, -3e9f, NAN, INFINITY, -INFINITY, 16777217.0f, 2147483520.0f, 2147483648.0f};
    const int32_t want[11] = {2, -2, 0, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 16777216, 2147483520, INT32_MAX};
    int64_t n = 11;
    int32_t got[11];
    CHECK_OK(ctx, wgml_tensor_read_i32(wgml_cast(ctx, test_tensor(ctx, 1, &n, x), WGML_I32), got, 11));
    for (int i = 0; i < 11; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "  cast %g to i32 gave %d, want %d\n", (double)x[i], got[i], want[i]);
            CHECK(got[i] == want[i]);
        }
    wgml_scope_end(ctx);
}

/* every op that takes f32 refuses i32 with INVALID_ARGUMENT and a message naming it; reads of the
   wrong dtype are refused; the upload remembers its range */
static void wrong_dtypes_are_refused(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    int64_t n = 4, sh2[2] = {2, 2};
    const int32_t iv[4] = {3, -1, 7, 2};
    const float fv[4] = {1, 2, 3, 4};
    wgml_tensor *ti = test_tensor_i32(ctx, 1, &n, iv), *tf = test_tensor(ctx, 1, &n, fv);
    CHECK(ti->range_known && ti->range_lo == -1 && ti->range_hi == 7);
    struct { const char *name; wgml_tensor *t; } bad[] = {
        {"add", wgml_add(ctx, ti, tf)},          {"add", wgml_add(ctx, tf, ti)},
        {"exp", wgml_exp(ctx, ti)},              {"sum", wgml_sum(ctx, ti, 0, 0)},
        {"softmax", wgml_softmax(ctx, ti)},      {"matmul", wgml_matmul(ctx, wgml_reshape(ctx, ti, 2, sh2), wgml_reshape(ctx, tf, 2, sh2))},
        {"maximum", wgml_maximum(ctx, ti, tf)},  {"masked_fill", wgml_masked_fill(ctx, tf, ti, 0.0f)},
        {"cast_f32", wgml_cast(ctx, wgml_cast(ctx, tf, WGML_I32), WGML_F32)}, /* fine: the control */
    };
    for (int i = 0; i < 8; i++) {
        CHECK(wgml_tensor_status(bad[i].t) == WGML_ERROR_INVALID_ARGUMENT);
        const char *msg = wgml_error_message(ctx);
        (void)msg;
        float out[4];
        wgml_status st = wgml_tensor_read(bad[i].t, out, 1);
        CHECK(st == WGML_ERROR_INVALID_ARGUMENT);
        CHECK(strstr(wgml_error_message(ctx), bad[i].name) != NULL && strstr(wgml_error_message(ctx), "i32") != NULL);
    }
    CHECK(wgml_tensor_status(bad[8].t) == WGML_OK);
    float fo[4];
    int32_t io[4];
    CHECK_STATUS(ctx, wgml_tensor_read(ti, fo, 4), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "wgml_tensor_read_i32") != NULL);
    CHECK_STATUS(ctx, wgml_tensor_read_i32(tf, io, 4), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_write(ti, fv, 4), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_write_i32(tf, iv, 4), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_from_i32(ctx, 1, &n, NULL, 4, &ti), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_cast(ctx, tf, (wgml_dtype)7)) == WGML_ERROR_INVALID_ARGUMENT);
    /* writing new values updates the remembered range */
    wgml_tensor *w = test_tensor_i32(ctx, 1, &n, iv);
    const int32_t iv2[4] = {0, 100, 5, 6};
    CHECK_OK(ctx, wgml_tensor_write_i32(w, iv2, 4));
    CHECK(w->range_lo == 0 && w->range_hi == 100);
    /* i32 labels work in cross-entropy as float ones do */
    const float logits[8] = {0.5f, -1, 2, 0.25f, 1, 1.5f, -0.5f, 3};
    const int32_t lab[2] = {2, 3};
    const float labf[2] = {2, 3};
    int64_t ls[2] = {2, 4}, two = 2;
    float a = 0, b = 0;
    CHECK_OK(ctx, wgml_tensor_read(wgml_cross_entropy(ctx, test_tensor(ctx, 2, ls, logits), test_tensor_i32(ctx, 1, &two, lab)), &a, 1));
    CHECK_OK(ctx, wgml_tensor_read(wgml_cross_entropy(ctx, test_tensor(ctx, 2, ls, logits), test_tensor(ctx, 1, &two, labf)), &b, 1));
    CHECK(a == b && a > 0);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* comparisons at ties, with NaN and infinities, with a number on either side */
static void comparisons_at_ties_and_nan(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    const float sp[6] = {-1.0f, 0.0f, -0.0f, 2.0f, INFINITY, NAN};
    enum { N = 36 };
    float a[N], b[N];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) a[i * 6 + j] = sp[i], b[i * 6 + j] = sp[j];
    int64_t n = N;
    wgml_tensor *ta = test_tensor(ctx, 1, &n, a), *tb = test_tensor(ctx, 1, &n, b);
    typedef wgml_tensor *(*cmp_fn)(wgml_context *, wgml_tensor *, wgml_tensor *);
    const cmp_fn fns[6] = {wgml_eq, wgml_ne, wgml_lt, wgml_le, wgml_gt, wgml_ge};
    const wgml_binary_op bops[6] = {WGML_EQ, WGML_NE, WGML_LT, WGML_LE, WGML_GT, WGML_GE};
    for (int k = 0; k < 6; k++) {
        float got[N], got_s[N];
        CHECK_OK(ctx, wgml_tensor_read(fns[k](ctx, ta, tb), got, N));
        CHECK_OK(ctx, wgml_tensor_read(wgml_binary_scalar(ctx, bops[k], ta, 0.0f), got_s, N));
        for (int i = 0; i < N; i++) {
            double x = a[i], y = b[i];
            bool ord = !isnan(x) && !isnan(y);
            bool w = k == 0 ? ord && x == y : k == 1 ? !(ord && x == y) : k == 2 ? ord && x < y
                   : k == 3 ? ord && x <= y : k == 4 ? ord && x > y : ord && x >= y;
            bool ord0 = !isnan(x);
            bool w0 = k == 0 ? ord0 && x == 0 : k == 1 ? !(ord0 && x == 0) : k == 2 ? ord0 && x < 0
                    : k == 3 ? ord0 && x <= 0 : k == 4 ? ord0 && x > 0 : ord0 && x >= 0;
            if (got[i] != (w ? 1.0f : 0.0f) || got_s[i] != (w0 ? 1.0f : 0.0f)) {
                fprintf(stderr, "  comparison %d of %g and %g gave %g (with 0: %g)\n", k, x, y, (double)got[i], (double)got_s[i]);
                CHECK(0);
            }
        }
    }
    wgml_scope_end(ctx);
}

/* where and masked_fill: the side not chosen may hold inf or NaN without leaking; shapes
   broadcast; gradients go only where each side was chosen */
static void where_and_masked_fill(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { R = 7, C = 5 };
    float a[R * C], b[C], cond[R * C];
    test_fill_uniform(a, R * C, -3, 3);
    test_fill_uniform(b, C, -3, 3);
    for (int i = 0; i < R * C; i++) cond[i] = (float)(test_rand_u64() % 2);
    a[3] = INFINITY;
    cond[3] = 0; /* a's inf not chosen */
    a[4] = NAN;
    cond[4] = 0;
    b[2] = -INFINITY; /* chosen only where cond is 0 in column 2 */
    int64_t s2[2] = {R, C}, s1 = C;
    wgml_tensor *ta = test_tensor(ctx, 2, s2, a), *tb = test_tensor(ctx, 1, &s1, b), *tc = test_tensor(ctx, 2, s2, cond);
    CHECK_OK(ctx, wgml_requires_grad(ta, 1));
    CHECK_OK(ctx, wgml_requires_grad(tb, 1));
    wgml_tensor *w = wgml_where(ctx, tc, ta, tb);
    float got[R * C];
    CHECK_OK(ctx, wgml_tensor_read(w, got, R * C));
    for (int i = 0; i < R * C; i++) {
        float want = cond[i] != 0 ? a[i] : b[i % C];
        if (!(got[i] == want || (isnan(got[i]) && isnan(want)))) {
            fprintf(stderr, "  where[%d] = %g, want %g\n", i, (double)got[i], (double)want);
            CHECK(0);
        }
    }
    /* gradients of sum(where * u) for a random u: u on a's chosen elements, u summed by column on b's */
    float u[R * C];
    test_fill_uniform(u, R * C, -1, 1);
    wgml_tensor *uu = test_tensor(ctx, 2, s2, u);
    /* the inf and NaN elements of a are never chosen; keep them out of the loss too */
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_where(ctx, tc, ta, tb), uu));
    CHECK_OK(ctx, wgml_backward(L));
    float ga[R * C], gb[C];
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(ta), ga, R * C));
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(tb), gb, C));
    double wb[C] = {0};
    for (int i = 0; i < R * C; i++) {
        CHECK(ga[i] == (cond[i] != 0 ? u[i] : 0.0f));
        if (cond[i] == 0) wb[i % C] += u[i];
    }
    for (int j = 0; j < C; j++) CHECK(fabs(gb[j] - wb[j]) <= 1e-6);
    /* masked_fill with -inf, then softmax: masked entries get exactly 0 */
    float mask[R * C];
    for (int i = 0; i < R * C; i++) mask[i] = (i % C) > (i / C) % C ? 1.0f : 0.0f;
    float sm[R * C];
    wgml_tensor *x = test_tensor(ctx, 2, s2, u);
    CHECK_OK(ctx, wgml_tensor_read(wgml_softmax(ctx, wgml_masked_fill(ctx, x, test_tensor(ctx, 2, s2, mask), -INFINITY)), sm, R * C));
    for (int r = 0; r < R; r++) {
        double z = 0, m = -INFINITY;
        for (int j = 0; j < C; j++)
            if (mask[r * C + j] == 0) m = fmax(m, u[r * C + j]);
        for (int j = 0; j < C; j++)
            if (mask[r * C + j] == 0) z += exp(u[r * C + j] - m);
        for (int j = 0; j < C; j++) {
            double want = mask[r * C + j] != 0 ? 0.0 : exp(u[r * C + j] - m) / z;
            CHECK(fabs(sm[r * C + j] - want) <= 1e-6);
        }
    }
    /* a comparison and a cast pass no gradient (as in PyTorch): d/dx sum(x * (x < 0.5) + cast(cast(x))) = (x < 0.5) */
    {
        wgml_tensor *xs = test_tensor(ctx, 2, s2, u);
        CHECK_OK(ctx, wgml_requires_grad(xs, 1));
        wgml_tensor *ints = wgml_cast(ctx, wgml_cast(ctx, xs, WGML_I32), WGML_F32);
        CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_add(ctx, wgml_mul(ctx, xs, wgml_binary_scalar(ctx, WGML_LT, xs, 0.5f)), ints))));
        float gx[R * C];
        CHECK_OK(ctx, wgml_tensor_read(wgml_grad(xs), gx, R * C));
        for (int i = 0; i < R * C; i++) CHECK(gx[i] == (u[i] < 0.5f ? 1.0f : 0.0f));
    }
    /* shapes that do not broadcast */
    int64_t s3 = 3;
    float three[3] = {1, 2, 3};
    CHECK(wgml_tensor_status(wgml_where(ctx, tc, ta, test_tensor(ctx, 1, &s3, three))) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(wgml_masked_fill(ctx, ta, test_tensor(ctx, 1, &s3, three), 0)) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(wgml_where(ctx, NULL, ta, tb)) == WGML_ERROR_INVALID_ARGUMENT);
    /* i32 values are refused by where's own name, not by the masked_fill it is made of; f16
       values are taken (the result f32, as masked_fill's and add's) */
    CHECK(wgml_tensor_status(wgml_where(ctx, tc, ta, wgml_cast(ctx, tb, WGML_I32))) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "where: a is f32 and b is i32") != NULL);
    wgml_adapter_info info;
    if (wgml_adapter_info_get(ctx, &info) == WGML_OK && info.has_shader_f16) {
        wgml_tensor *ah = wgml_cast(ctx, ta, WGML_F16), *wh = wgml_where(ctx, tc, ah, tb);
        float a16[R * C];
        CHECK(wgml_tensor_dtype(wh) == WGML_F32);
        CHECK_OK(ctx, wgml_tensor_read(wgml_cast(ctx, ah, WGML_F32), a16, R * C));
        CHECK_OK(ctx, wgml_tensor_read(wh, got, R * C));
        for (int i = 0; i < R * C; i++) {
            const float want = cond[i] != 0 ? a16[i] : b[i % C];
            if (!(got[i] == want || (isnan(got[i]) && isnan(want)))) FAILF("where of halves [%d] = %g, want %g", i, (double)got[i], (double)want);
        }
    }
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* the causal mask against its definition, and arange */
static void causal_mask_and_arange(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t ts[5][2] = {{1, 1}, {7, 7}, {3, 20}, {1, 9}, {33, 65}};
    for (int k = 0; k < 5; k++) {
        wgml_scope_begin(ctx);
        int64_t t = ts[k][0], s = ts[k][1];
        wgml_tensor *m = wgml_causal_mask(ctx, t, s);
        CHECK(wgml_tensor_ndim(m) == 2 && wgml_tensor_dim(m, 0) == t && wgml_tensor_dim(m, 1) == s);
        float *got = malloc((size_t)(t * s) * sizeof *got);
        CHECK_OK(ctx, wgml_tensor_read(m, got, (size_t)(t * s)));
        int bad = 0;
        for (int64_t i = 0; i < t; i++)
            for (int64_t j = 0; j < s; j++) bad += got[i * s + j] != (j > i + (s - t) ? 1.0f : 0.0f);
        CHECK(bad == 0);
        free(got);
        wgml_scope_end(ctx);
    }
    wgml_scope_begin(ctx);
    CHECK(wgml_tensor_status(wgml_causal_mask(ctx, 5, 4)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_causal_mask(ctx, 0, 4)) == WGML_ERROR_INVALID_ARGUMENT);
    int32_t iv[9];
    float fv[9];
    wgml_tensor *ai = wgml_arange(ctx, -4, 5, WGML_I32), *af = wgml_arange(ctx, -4, 5, WGML_F32);
    CHECK(wgml_tensor_dtype(ai) == WGML_I32 && wgml_tensor_numel(ai) == 9);
    CHECK_OK(ctx, wgml_tensor_read_i32(ai, iv, 9));
    CHECK_OK(ctx, wgml_tensor_read(af, fv, 9));
    for (int i = 0; i < 9; i++) CHECK(iv[i] == i - 4 && fv[i] == (float)(i - 4));
    CHECK(wgml_tensor_status(wgml_arange(ctx, 3, 3, WGML_F32)) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* erf, the exact GELU, sin and cos at their edges */
static void new_math_at_edges(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    const float x[8] = {INFINITY, -INFINITY, NAN, 0.0f, -40.0f, 40.0f, 1e-6f, -6.0f};
    int64_t n = 8;
    wgml_tensor *t = test_tensor(ctx, 1, &n, x);
    float e[8], g[8], s[8], c[8];
    CHECK_OK(ctx, wgml_tensor_read(wgml_erf(ctx, t), e, 8));
    CHECK_OK(ctx, wgml_tensor_read(wgml_gelu_exact(ctx, t), g, 8));
    CHECK_OK(ctx, wgml_tensor_read(wgml_sin(ctx, t), s, 8));
    CHECK_OK(ctx, wgml_tensor_read(wgml_cos(ctx, t), c, 8));
    CHECK(e[0] == 1.0f && e[1] == -1.0f && isnan(e[2]) && e[3] == 0.0f && e[4] == -1.0f && e[5] == 1.0f);
    CHECK(fabs(e[6] - erf(1e-6)) <= 1e-6 * erf(1e-6));
    CHECK(g[0] == INFINITY && g[1] == 0.0f && isnan(g[2]) && g[3] == 0.0f && g[4] == 0.0f && g[5] == 40.0f);
    /* gelu(-6) = -6 Phi(-6) = -5.92e-9: the erfc path keeps it (1 + erf(-4.24) would cancel) */
    double want = 0.5 * -6.0 * erfc(6.0 / sqrt(2.0));
    CHECK(fabs(g[7] - want) <= 1e-3 * fabs(want));
    CHECK(isnan(s[0]) && isnan(s[1]) && isnan(s[2]) && isnan(c[0]) && isnan(c[1]) && isnan(c[2]));
    CHECK(s[3] == 0.0f && c[3] == 1.0f);
    wgml_scope_end(ctx);
}

/* min and argmin on the one- and two-launch paths (a long axis), NaN winning; var and std
   with both corrections, and var's gradient 2 (x - mean) / (n - correction) */
static void min_argmin_var_std(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t shapes[3][3] = {{3, 7, 5}, {1, 70001, 1}, {2, 1023, 3}};
    for (int k = 0; k < 3; k++) {
        wgml_scope_begin(ctx);
        int64_t outer = shapes[k][0], len = shapes[k][1], inner = shapes[k][2], n = outer * len * inner;
        float *x = malloc((size_t)n * sizeof *x), *mn = malloc((size_t)(outer * inner) * sizeof *mn),
              *am = malloc((size_t)(outer * inner) * sizeof *am), *vr = malloc((size_t)(outer * inner) * sizeof *vr),
              *sd = malloc((size_t)(outer * inner) * sizeof *sd);
        test_fill_uniform(x, (size_t)n, -5, 5);
        if (k == 2) x[5 * inner + 1] = NAN; /* row (0, 1) of the third shape: NaN wins at 5 */
        wgml_tensor *t = test_tensor(ctx, 3, shapes[k], x);
        CHECK_OK(ctx, test_read(wgml_min(ctx, t, 1, 0), mn, (size_t)(outer * inner)));
        CHECK_OK(ctx, test_read(wgml_argmin(ctx, t, 1, 0), am, (size_t)(outer * inner)));
        CHECK(wgml_tensor_dtype(wgml_argmin(ctx, t, 1, 0)) == WGML_I32);
        int corr = k == 0 ? 0 : 1;
        CHECK_OK(ctx, test_read(wgml_var(ctx, t, 1, corr, 0), vr, (size_t)(outer * inner)));
        CHECK_OK(ctx, test_read(wgml_std(ctx, t, 1, corr, 0), sd, (size_t)(outer * inner)));
        int bad = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double m = INFINITY, mean = 0, ss = 0;
                int64_t at = -1;
                for (int64_t j = 0; j < len; j++) {
                    double v = x[(o * len + j) * inner + i];
                    if (isnan(v)) { if (!isnan(m)) m = v, at = j; }
                    else if (!isnan(m) && v < m) m = v, at = j;
                    mean += v;
                }
                mean /= (double)len;
                for (int64_t j = 0; j < len; j++) {
                    double d = x[(o * len + j) * inner + i] - mean;
                    ss += d * d;
                }
                double var = ss / (double)(len - corr);
                int64_t r = o * inner + i;
                bool m_ok = isnan(m) ? isnan(mn[r]) : mn[r] == (float)m;
                bool v_ok = isnan(var) ? isnan(vr[r]) : fabs(vr[r] - var) <= 1e-4 * var;
                bool s_ok = isnan(var) ? isnan(sd[r]) : fabs(sd[r] - sqrt(var)) <= 1e-4 * sqrt(var);
                if (!m_ok || am[r] != (float)at || !v_ok || !s_ok) {
                    if (bad++ < 3)
                        fprintf(stderr, "  [%lld,%lld,%lld] row %lld: min %g (%g) at %g (%lld), var %g (%g), std %g\n",
                                (long long)outer, (long long)len, (long long)inner, (long long)r, (double)mn[r], m,
                                (double)am[r], (long long)at, (double)vr[r], var, (double)sd[r]);
                }
            }
        CHECK(bad == 0);
        free(x), free(mn), free(am), free(vr), free(sd);
        wgml_scope_end(ctx);
    }
    /* var's gradient: 2 (x - mean) / (n - 1) */
    wgml_scope_begin(ctx);
    float x[7];
    test_fill_uniform(x, 7, -2, 2);
    int64_t n = 7;
    wgml_tensor *t = test_tensor(ctx, 1, &n, x);
    CHECK_OK(ctx, wgml_requires_grad(t, 1));
    CHECK_OK(ctx, wgml_backward(wgml_var(ctx, t, 0, 1, 0)));
    float g[7];
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(t), g, 7));
    double mean = 0;
    for (int i = 0; i < 7; i++) mean += x[i] / 7.0;
    for (int i = 0; i < 7; i++) CHECK(fabs(g[i] - 2 * (x[i] - mean) / 6.0) <= 1e-5);
    CHECK(wgml_tensor_status(wgml_var(ctx, t, 1, 0, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_var(ctx, t, 0, -1, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    float one;
    CHECK_OK(ctx, wgml_tensor_read(wgml_var(ctx, wgml_slice(ctx, t, 0, 0, 1, 1), 0, 1, 0), &one, 1));
    CHECK(isnan(one));
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* what a GPT author writes: accuracy as eq(argmax, i32 labels), where on an i32 condition,
   host labels out of range refused when cross_entropy is built, errors passed on by chunk and
   stack, a huge arange refused before any host work */
static void integer_masks_and_checks(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    const float logits[12] = {0, 3, 1, 5, 2, 1, -1, -2, 7, 0.5f, 0.25f, 0.75f}; /* argmax 1, 0, 2, 2 */
    const int32_t labels[4] = {1, 2, 2, -3};
    int64_t s43[2] = {4, 3}, four = 4;
    wgml_tensor *lg = test_tensor(ctx, 2, s43, logits), *lb = test_tensor_i32(ctx, 1, &four, labels);
    float hit[4], sel[4], ne0[4];
    CHECK_OK(ctx, wgml_tensor_read(wgml_eq(ctx, wgml_argmax(ctx, lg, -1, 0), lb), hit, 4));
    CHECK(hit[0] == 1 && hit[1] == 0 && hit[2] == 1 && hit[3] == 0);
    CHECK_OK(ctx, wgml_tensor_read(wgml_binary_scalar(ctx, WGML_NE, lb, 2.0f), ne0, 4));
    CHECK(ne0[0] == 1 && ne0[1] == 0 && ne0[2] == 0 && ne0[3] == 1);
    /* an i32 condition: -3 and INT32_MIN count as true (their f32 values are nonzero) */
    const int32_t cv[4] = {0, INT32_MIN, 5, -3};
    const float av[4] = {1, 2, 3, 4}, bv[4] = {-1, -2, -3, -4};
    CHECK_OK(ctx, wgml_tensor_read(wgml_where(ctx, test_tensor_i32(ctx, 1, &four, cv), test_tensor(ctx, 1, &four, av), test_tensor(ctx, 1, &four, bv)), sel, 4));
    CHECK(sel[0] == -1 && sel[1] == 2 && sel[2] == 3 && sel[3] == 4);
    /* host labels out of range: refused when built, naming the range */
    wgml_tensor *ce = wgml_cross_entropy(ctx, lg, lb);
    CHECK(wgml_tensor_status(ce) == WGML_ERROR_INVALID_ARGUMENT && strstr(wgml_error_message(ctx), "-3") != NULL);
    const int32_t big[4] = {0, 1, 2, 3};
    CHECK(wgml_tensor_status(wgml_cross_entropy(ctx, lg, test_tensor_i32(ctx, 1, &four, big))) == WGML_ERROR_INVALID_ARGUMENT);
    /* an input's own error passes through chunk and stack */
    wgml_tensor *err = wgml_exp(ctx, lb), *parts[2] = {lg, lg};
    CHECK_STATUS(ctx, wgml_chunk(ctx, err, 0, 2, parts), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(parts[0] == NULL && parts[1] == NULL && strstr(wgml_error_message(ctx), "exp") != NULL);
    wgml_tensor *pair[2] = {lg, err};
    CHECK(wgml_tensor_status(wgml_stack(ctx, 2, pair, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "exp") != NULL);
    /* 2^32 values: refused by the buffer limits, not attempted on the host */
    wgml_tensor *huge = wgml_arange(ctx, INT32_MIN, INT32_MAX, WGML_F32);
    CHECK(wgml_tensor_status(huge) == WGML_ERROR_LIMIT || wgml_tensor_status(huge) == WGML_ERROR_OVERFLOW);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(integers_round_trip);
    TEST_RUN(float_to_int_edges);
    TEST_RUN(wrong_dtypes_are_refused);
    TEST_RUN(comparisons_at_ties_and_nan);
    TEST_RUN(where_and_masked_fill);
    TEST_RUN(causal_mask_and_arange);
    TEST_RUN(new_math_at_edges);
    TEST_RUN(min_argmin_var_std);
    TEST_RUN(integer_masks_and_checks);
    return test_summary();
}
