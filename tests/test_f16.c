/* f16 tensors (WGML_F16): storage for activations, f32 math.
   - wgml_cast f32 -> f16 against a double reference of IEEE rounding (tests/ref: ties to even,
     subnormal halves, +-inf from 65520 on, NaN), f16 -> f32 exact, round trips; reading and
     writing f16 tensors from the host;
   - elementwise chains reading f16 operands (contiguous, strided, broadcast) and storing f16
     results: a cast to f16 after a producer is the producer's own kernel (one dispatch);
   - a norm cast to f16 is the norm's kernel storing halves;
   - matmul with f16 A and/or B in each form (transposes, views, batches), under f32
     arithmetic and each f16_math mode, against the double reference of the halves;
   - gradients through casts (straight through, cast back) and through a matmul of an f16 A;
   - ops that do not take f16 refuse it with a message;
   - the GPT's mixed-precision step stores the norms' and activations' outputs as halves.
   Bounds: an f16 store of an f32 value is within half a step of f16 (2^-11 relative, 2^-25
   absolute below 2^-14) of the value; f32 arithmetic on the halves adds f32 rounding. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "wgml_gpt.h"
#include "ref/ref.h"

static const int64_t sizes[] = {1, 7, 1023, 1024, 65537}; /* 1024: the vec4 path */

static bool has_f16(wgml_context *ctx)
{
    wgml_adapter_info info;
    if (!ctx || wgml_adapter_info_get(ctx, &info) != WGML_OK) return false;
    if (!info.has_shader_f16) fprintf(stderr, "  SKIP %s: adapter %s has no shader-f16\n", test_current, info.name);
    return info.has_shader_f16;
}

/* got, a half, within half an f16 step of the exact value (plus slack, absolute or relative,
   for f32 arithmetic before the rounding) */
static bool within_half_step_abs(double got, double exact, double slack)
{
    if (isnan(exact) || isinf(exact)) return isnan(exact) ? isnan(got) : got == exact;
    double step = fabs(exact) < 0x1p-14 ? 0x1p-24 : ldexp(1.0, ilogb(exact) - 10);
    return fabs(got - exact) <= 0.5 * step + slack + 1e-30;
}

static bool within_half_step(double got, double exact, double slack)
{
    return within_half_step_abs(got, exact, slack * fabs(exact));
}

/* values that exercise the rounding: ties (to even, up and down), the largest half and just
   past it, overflow, subnormal halves and ties among them, zeros of both signs, NaN, inf */
static const float edge_values[] = {
    1.0f + 0x1p-11f,          /* tie between 1 and 1 + 2^-10: to 1 (even) */
    1.0f + 3 * 0x1p-11f,      /* tie between 1 + 2^-10 and 1 + 2^-9: to 1 + 2^-9 (even) */
    1.0f + 0x1p-11f + 0x1p-20f, /* just past the tie: up */
    -(2.0f + 0x1p-10f),       /* tie at 2: to -2 */
    2047.5f, 2048.5f, 4097.0f, /* ties at integers where the step is 1, 2, 4 */
    65504.0f, 65519.0f, 65519.99f, 65520.0f, -65520.0f, 70000.0f, 1e30f, -1e30f,
    0x1p-14f, 0x1p-14f - 0x1p-25f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 1.5f * 0x1p-24f, 0x1p-26f, -5 * 0x1p-25f, 0x1p-30f,
    6.1e-5f, 0.0f, -0.0f, 0.1f, -0.3333333f, 3.14159265f,
};

/* x (f32 host values) cast to f16 on the GPU, read back two ways: widened on the host
   (wgml_tensor_read) and cast to f32 on the GPU */
static void check_cast(wgml_context *ctx, const float *x, int64_t n, const char *what)
{
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, 1, &n, x);
    wgml_tensor *h = wgml_cast(ctx, t, WGML_F16);
    CHECK(wgml_tensor_dtype(h) == WGML_F16);
    wgml_tensor *back = wgml_cast(ctx, h, WGML_F32);
    float *got = test_read_new(ctx, what, h, n), *wide = test_read_new(ctx, what, back, n);
    int64_t bad = 0;
    for (int64_t i = 0; got && wide && i < n; i++) {
        double want = wgml_ref_round_half(x[i]);
        bool same = isnan(want) ? isnan(got[i]) && isnan(wide[i])
                                : (double)got[i] == want && (double)wide[i] == want && !signbit(got[i]) == !signbit(want);
        if (!same && bad++ < 5)
            FAILF("%s: cast_f16(%.9g) read %.9g, widened on the GPU %.9g; want %.9g", what, x[i], got[i], wide[i], want);
    }
    free(got);
    free(wide);
    wgml_scope_end(ctx);
}

static void casts_round_to_nearest_even(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    float edges[N_OF(edge_values) + 2];
    memcpy(edges, edge_values, sizeof edge_values);
    edges[N_OF(edge_values)] = NAN;
    edges[N_OF(edge_values) + 1] = -INFINITY;
    check_cast(ctx, edges, N_OF(edges), "edge values");
    /* random values over f16's whole range (and past it), every size */
    for (int s = 0; s < N_OF(sizes); s++) {
        int64_t n = sizes[s];
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++) {
            double mag = ldexp(1.0, (int)test_uniform(-27, 17)) * test_uniform(1, 2);
            x[i] = (float)(test_uniform(-1, 1) < 0 ? -mag : mag);
        }
        char what[64];
        snprintf(what, sizeof what, "random values, n = %lld", (long long)n);
        check_cast(ctx, x, n, what);
        free(x);
    }
}

/* halves survive f16 -> f32 -> f16 unchanged; the host's write rounds as the GPU's cast */
static void round_trips_and_host_writes(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    for (int s = 0; s < N_OF(sizes); s++) {
        int64_t n = sizes[s];
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        test_fill_uniform(x, (size_t)n, -300, 300);
        test_fill_uniform(y, (size_t)n, -2, 2);
        wgml_scope_begin(ctx);
        wgml_tensor *h = wgml_cast(ctx, test_tensor(ctx, 1, &n, x), WGML_F16);
        wgml_tensor *again = wgml_cast(ctx, wgml_cast(ctx, h, WGML_F32), WGML_F16);
        float *a = test_read_new(ctx, "h", h, n), *b = test_read_new(ctx, "again", again, n);
        for (int64_t i = 0; a && b && i < n; i++)
            if (a[i] != b[i] || (double)a[i] != wgml_ref_round_half(x[i])) {
                FAILF("n = %lld: element %lld: %.9g after a round trip %.9g (x %.9g)", (long long)n, (long long)i, a[i], b[i], x[i]);
                break;
            }
        /* the evaluated f16 tensor takes f32 values from the host, rounded */
        CHECK_OK(ctx, wgml_tensor_write(h, y, (size_t)n));
        float *c = test_read_new(ctx, "written", h, n);
        for (int64_t i = 0; c && i < n; i++)
            if ((double)c[i] != wgml_ref_round_half(y[i])) {
                FAILF("n = %lld: wrote %.9g, read %.9g, want %.9g", (long long)n, y[i], c[i], wgml_ref_round_half(y[i]));
                break;
            }
        /* an i32 tensor through f16 and back */
        int32_t iv[3] = {-2049, 7, 65519};
        int64_t three = 3;
        wgml_tensor *ih = wgml_cast(ctx, test_tensor_i32(ctx, 1, &three, iv), WGML_F16);
        int32_t io[3] = {0, 0, 0};
        CHECK(wgml_tensor_dtype(ih) == WGML_F16);
        CHECK_OK(ctx, wgml_tensor_read_i32(wgml_cast(ctx, ih, WGML_I32), io, 3));
        CHECK(io[0] == -2048 && io[1] == 7 && io[2] == 65504);
        free(a);
        free(b);
        free(c);
        wgml_scope_end(ctx);
        free(x);
        free(y);
    }
}

/* y = cast_f16(a16 * b + 1.5) with a16 f16 and b f32 (full, a transposed view, a broadcast
   row, a single element): one fused kernel reads halves and stores halves */
static void fused_chains_read_and_store_halves(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    for (int s = 0; s < N_OF(sizes); s++)
        for (int form = 0; form < 4; form++) {
            int64_t n = sizes[s], rows = form == 1 ? 3 : 1, cols = n, sh[2] = {rows, cols};
            int64_t na = form == 1 ? rows * cols : form == 3 ? 1 : cols;
            float *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)(rows * cols) * sizeof *b);
            test_fill_uniform(a, (size_t)na, -50, 50);
            test_fill_uniform(b, (size_t)(rows * cols), -3, 3);
            wgml_scope_begin(ctx);
            wgml_tensor *ta;
            if (form == 1) { /* stored [cols, rows], read through a transposed view */
                int64_t st[2] = {cols, rows};
                ta = wgml_transpose(ctx, wgml_cast(ctx, test_tensor(ctx, 2, st, a), WGML_F16), 0, 1);
            } else if (form == 2) { /* one row broadcast over rows (here 1) ... */
                ta = wgml_cast(ctx, test_tensor(ctx, 1, &cols, a), WGML_F16);
            } else if (form == 3) { /* ... one element over all */
                int64_t one = 1;
                ta = wgml_cast(ctx, test_tensor(ctx, 1, &one, a), WGML_F16);
            } else {
                ta = wgml_cast(ctx, test_tensor(ctx, 2, sh, a), WGML_F16);
            }
            CHECK_OK(ctx, wgml_eval(ctx, 1, &ta));
            wgml_tensor *tb = test_tensor(ctx, 2, sh, b);
            wgml_tensor *y = wgml_cast(ctx, wgml_binary_scalar(ctx, WGML_ADD, wgml_mul(ctx, ta, tb), 1.5f), WGML_F16);
            CHECK(wgml_tensor_dtype(y) == WGML_F16);
            wgml_stats before, after;
            wgml_stats_get(ctx, &before);
            CHECK_OK(ctx, wgml_eval(ctx, 1, &y));
            wgml_stats_get(ctx, &after);
            if (after.dispatches - before.dispatches != 1)
                FAILF("n = %lld, form %d: %llu dispatches for the chain and its cast, want 1", (long long)n, form,
                      (unsigned long long)(after.dispatches - before.dispatches));
            float *got = test_read_new(ctx, "y", y, rows * cols);
            int64_t bad = 0;
            for (int64_t r = 0; got && r < rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    double av = wgml_ref_round_half(form == 1 ? a[c * rows + r] : form == 3 ? a[0] : a[form == 0 ? r * cols + c : c]);
                    double want = av * b[r * cols + c] + 1.5;
                    /* f32's product and sum before the rounding: 2^-23 of each term */
                    if (!within_half_step_abs(got[r * cols + c], want, 0x1p-22 * (fabs(want - 1.5) + 1.5)) && bad++ < 3)
                        FAILF("n = %lld, form %d: y[%lld,%lld] = %.9g, want %.9g", (long long)n, form, (long long)r,
                              (long long)c, got[r * cols + c], want);
                }
            free(got);
            wgml_scope_end(ctx);
            free(a);
            free(b);
        }
}

/* a cast to f16 in the middle of a chain rounds there: cast_f32(cast_f16(x)) - x is x's
   rounding error, exactly */
static void inner_casts_round(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    int64_t n = 1023;
    float *x = malloc((size_t)n * sizeof *x);
    test_fill_uniform(x, (size_t)n, -10, 10);
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, 1, &n, x);
    wgml_tensor *e = wgml_sub(ctx, wgml_cast(ctx, wgml_cast(ctx, t, WGML_F16), WGML_F32), t);
    float *got = test_read_new(ctx, "e", e, n);
    for (int64_t i = 0; got && i < n; i++)
        if ((double)got[i] != wgml_ref_round_half(x[i]) - (double)x[i]) {
            FAILF("x = %.9g: rounding error %.9g, want %.9g", x[i], got[i], wgml_ref_round_half(x[i]) - (double)x[i]);
            break;
        }
    free(got);
    wgml_scope_end(ctx);
    free(x);
}

/* layernorm and rmsnorm cast to f16: the norm's own kernel stores halves (one dispatch), within
   half a step of the double reference's norm */
static void norms_store_halves(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    static const int64_t shapes[][2] = {{1, 7}, {5, 33}, {3, 1024}, {2, 1023}};
    for (int s = 0; s < N_OF(shapes); s++)
        for (int rms = 0; rms < 2; rms++) {
            int64_t rows = shapes[s][0], n = shapes[s][1], sh[2] = {rows, n};
            float *x = malloc((size_t)(rows * n) * sizeof *x), *w = malloc((size_t)n * sizeof *w), *b = malloc((size_t)n * sizeof *b);
            test_fill_uniform(x, (size_t)(rows * n), -3, 5);
            test_fill_uniform(w, (size_t)n, 0.5, 2);
            test_fill_uniform(b, (size_t)n, -1, 1);
            wgml_scope_begin(ctx);
            wgml_tensor *tx = test_tensor(ctx, 2, sh, x), *tw = test_tensor(ctx, 1, &n, w), *tb = test_tensor(ctx, 1, &n, b);
            wgml_tensor *norm = rms ? wgml_rmsnorm(ctx, tx, tw, 1e-5f) : wgml_layernorm(ctx, tx, tw, tb, 1e-5f);
            wgml_tensor *h = wgml_cast(ctx, norm, WGML_F16);
            CHECK(wgml_tensor_dtype(h) == WGML_F16);
            wgml_stats before, after;
            wgml_stats_get(ctx, &before);
            CHECK_OK(ctx, wgml_eval(ctx, 1, &h));
            wgml_stats_get(ctx, &after);
            CHECK(after.dispatches - before.dispatches == 1);
            float *got = test_read_new(ctx, "norm f16", h, rows * n);
            double *xd = test_to_double(x, (size_t)(rows * n)), *wd = test_to_double(w, (size_t)n), *bd = test_to_double(b, (size_t)n);
            double *ref = malloc((size_t)(rows * n) * sizeof *ref);
            if (rms) wgml_ref_rmsnorm(rows, n, xd, wd, 1e-5, ref);
            else wgml_ref_layernorm(rows, n, xd, wd, bd, 1e-5, ref);
            int64_t bad = 0;
            for (int64_t i = 0; got && i < rows * n; i++)
                /* the norm's f32 error (~1e-6 of its O(1) terms, x^ w and b: an output near 0 is
                   their cancelling) before the rounding */
                if (!within_half_step_abs(got[i], ref[i], 4e-6 * (fabs(ref[i] - (rms ? 0 : bd[i % n])) + (rms ? 0 : fabs(bd[i % n])))) &&
                    bad++ < 3)
                    FAILF("%s of rows of %lld: y[%lld] = %.9g, reference %.9g", rms ? "rmsnorm" : "layernorm", (long long)n,
                          (long long)i, got[i], ref[i]);
            free(got);
            free(xd);
            free(wd);
            free(bd);
            free(ref);
            wgml_scope_end(ctx);
            free(x);
            free(w);
            free(b);
        }
}

/* C = op(A) op(B) with A and/or B f16, every form, f32 arithmetic and each f16_math mode,
   against the double product of the halves. Bounds on |c - ref| / sum |a b|: f32 sums
   (K + 2) 2^-23; the f16 arithmetic modes as tests/test_matmul_f16.c states them (the
   operands are halves already, so their rounding there is slack): 19u for 16-deep f16 runs,
   (3 + sqrt K)u for the whole sum in f16 */
typedef struct mm_case {
    int64_t M, K, N, batch;
    int ta, tb, view_a, view_b;
} mm_case;

static void matmul_case(wgml_context *ctx, const mm_case *c, int which, int mode)
{
    int64_t M = c->M, K = c->K, N = c->N, nb = c->batch ? c->batch : 1;
    size_t na = (size_t)(nb * M * K), nbn = (size_t)(K * N);
    float *A = malloc(na * sizeof *A), *B = malloc(nbn * sizeof *B);
    test_fill_uniform(A, na, -1, 1);
    test_fill_uniform(B, nbn, -1, 1);
    bool a16 = which & 1, b16 = which & 2;
    bool sa = c->ta || c->view_a, sb = c->tb || c->view_b;
    int64_t sha[3] = {nb, sa ? K : M, sa ? M : K}, shb[2] = {sb ? N : K, sb ? K : N};
    wgml_scope_begin(ctx);
    wgml_tensor *ta = test_tensor(ctx, c->batch ? 3 : 2, c->batch ? sha : sha + 1, A), *tb = test_tensor(ctx, 2, shb, B);
    if (a16) ta = wgml_cast(ctx, ta, WGML_F16);
    if (b16) tb = wgml_cast(ctx, tb, WGML_F16);
    if (c->view_a) ta = wgml_transpose(ctx, ta, -1, -2);
    if (c->view_b) tb = wgml_transpose(ctx, tb, -1, -2);
    wgml_matmul_desc d = {.trans_a = c->ta, .trans_b = c->tb, .f16_math = mode};
    wgml_tensor *y = wgml_matmul_ex(ctx, ta, tb, &d);
    char what[160];
    snprintf(what, sizeof what, "%lldx%lldx%lld batch %lld%s%s%s%s, A %s B %s, f16_math %d", (long long)M, (long long)K,
             (long long)N, (long long)c->batch, c->ta ? " tA" : "", c->tb ? " tB" : "", c->view_a ? " A view" : "",
             c->view_b ? " B view" : "", a16 ? "f16" : "f32", b16 ? "f16" : "f32", mode);
    float *got = y && !wgml_tensor_status(y) ? test_read_new(ctx, what, y, nb * M * N) : NULL;
    if (!got) FAILF("%s: %s", what, wgml_error_message(ctx));
    double u = 0x1p-11, worst = 0;
    int64_t bad = 0;
    for (int64_t bt = 0; got && bt < nb; bt++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, sabs = 0;
                for (int64_t k = 0; k < K; k++) {
                    double x = sa ? A[bt * M * K + k * M + m] : A[bt * M * K + m * K + k];
                    double v = sb ? B[n * K + k] : B[k * N + n];
                    if (a16) x = wgml_ref_round_half(x);
                    if (b16) v = wgml_ref_round_half(v);
                    s += x * v;
                    sabs += fabs(x * v);
                }
                double rel = mode == 0 ? (double)(K + 2) * 0x1p-23
                           : mode == WGML_F16_MATH_F16_SUMS ? (3.0 + sqrt((double)K)) * u : 19.0 * u;
                /* subnormal halves of products under 2^-14 (f16 arithmetic): K 2^-23 absolute */
                double bound = rel * sabs + (mode ? (double)K * 0x1p-23 : 0x1p-30);
                double err = fabs(got[(bt * M + m) * N + n] - s);
                if (sabs > 0 && err / sabs > worst) worst = err / sabs;
                if (!(err <= bound) && bad++ < 3)
                    FAILF("%s: c[%lld,%lld,%lld] = %.9g, reference %.9g (bound %.3g)", what, (long long)bt, (long long)m,
                          (long long)n, got[(bt * M + m) * N + n], s, bound);
            }
    free(got);
    wgml_scope_end(ctx);
    free(A);
    free(B);
}

static void matmul_reads_f16_operands(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    static const mm_case cases[] = {
        {1, 7, 33, 0, 0, 0, 0, 0},   {1, 33, 7, 0, 0, 1, 0, 0},  {7, 33, 9, 0, 0, 0, 0, 0},  {7, 1, 5, 0, 1, 0, 0, 0},
        {33, 65, 17, 0, 0, 1, 0, 0}, {33, 40, 18, 0, 1, 1, 0, 0}, {20, 24, 36, 0, 0, 0, 1, 1}, {130, 40, 70, 0, 0, 0, 0, 0},
        {9, 16, 7, 1, 0, 0, 0, 0},   {17, 33, 20, 3, 0, 0, 0, 0}, {17, 32, 20, 2, 1, 0, 0, 0}, {18, 24, 3, 0, 0, 0, 0, 0},
    };
    static const int modes[] = {0, WGML_F16_MATH_F32_SUMS, WGML_F16_MATH_F16_SUMS, WGML_F16_MATH_MATRIX};
    for (int i = 0; i < N_OF(cases); i++)
        for (int which = 1; which <= 3; which++)
            for (int m = 0; m < N_OF(modes); m++) matmul_case(ctx, &cases[i], which, modes[m]);
}

/* A GEMM on the matrix units cast to f16 stores its halves itself (one launch, no cast pass):
   each value is the f32 result of the same GEMM rounded to half, with a bias, GELU, a batch
   and awkward sizes. Elsewhere (no matrix units, or split K) the cast stays a pass of its own
   and the values are the same. */
static void matmul_stores_halves(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    static const struct { int64_t batch, M, N, K; int bias, gelu; } cs[] = {
        {1, 33, 40, 18, 1, 0}, {1, 130, 72, 70, 1, 1}, {3, 64, 48, 16, 0, 0}, {1, 17, 33, 7, 1, 1}, {1, 64, 64, 4096, 0, 0},
        /* N a multiple of 8 over several tiles, rows cut by M's edge (the matrix units write
           halves 8 a lane) */
        {1, 1023, 1024, 130, 1, 0}, {2, 257, 392, 64, 1, 1},
    };
    for (int i = 0; i < N_OF(cs); i++) {
        int64_t B = cs[i].batch, M = cs[i].M, N = cs[i].N, K = cs[i].K;
        int64_t sa[3] = {B, M, K}, sb[2] = {K, N};
        float *a = malloc((size_t)(B * M * K) * sizeof *a), *w = malloc((size_t)(K * N) * sizeof *w), *bias = malloc((size_t)N * sizeof *bias);
        test_fill_uniform(a, (size_t)(B * M * K), -1, 1);
        test_fill_uniform(w, (size_t)(K * N), -1, 1);
        test_fill_uniform(bias, (size_t)N, -1, 1);
        wgml_scope_begin(ctx);
        wgml_tensor *ta = test_tensor(ctx, B > 1 ? 3 : 2, B > 1 ? sa : sa + 1, a), *tw = test_tensor(ctx, 2, sb, w);
        wgml_matmul_desc d = {.bias = cs[i].bias ? test_tensor(ctx, 1, &N, bias) : NULL,
                              .activation = cs[i].gelu ? WGML_ACT_GELU_EXACT : WGML_ACT_NONE, .f16_math = WGML_F16_MATH_MATRIX};
        wgml_tensor *y = wgml_matmul_ex(ctx, ta, tw, &d), *h = wgml_cast(ctx, wgml_matmul_ex(ctx, ta, tw, &d), WGML_F16);
        CHECK(wgml_tensor_dtype(h) == WGML_F16);
        CHECK_OK(ctx, wgml_eval(ctx, 1, &y));
        wgml_stats before, after;
        wgml_stats_get(ctx, &before);
        CHECK_OK(ctx, wgml_eval(ctx, 1, &h));
        wgml_stats_get(ctx, &after);
        /* the matrix units store the halves, unless split K takes the long K */
        uint64_t want = info.has_subgroup_matrix && K < 4096 ? 1 : 2, got_n = after.dispatches - before.dispatches;
        if (K < 4096 ? got_n != want : got_n < 2)
            FAILF("[%lld] %lld x %lld x %lld: %llu launches, want %llu", (long long)B, (long long)M, (long long)N, (long long)K,
                  (unsigned long long)got_n, (unsigned long long)want);
        float *yv = test_read_new(ctx, "f32 GEMM", y, B * M * N), *hv = test_read_new(ctx, "f16 GEMM", h, B * M * N);
        int bad = 0;
        for (int64_t j = 0; yv && hv && j < B * M * N; j++)
            if (!within_half_step(hv[j], yv[j], 0) && bad++ < 3)
                FAILF("[%lld] %lld x %lld x %lld: c[%lld] = %.9g as half, %.9g in f32", (long long)B, (long long)M, (long long)N,
                      (long long)K, (long long)j, hv[j], yv[j]);
        free(yv);
        free(hv);
        wgml_scope_end(ctx);
        free(a);
        free(w);
        free(bias);
    }
}

/* gradients: through casts, straight (cast back to the input's dtype); through a matmul of an
   f16 A: dW = half(x)^T G, dx = G W^T */
static void gradients_pass_through_casts(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    int64_t M = 7, K = 33, N = 9, sx[2] = {M, K}, sw[2] = {K, N}, sg[2] = {M, N};
    float *x = malloc((size_t)(M * K) * sizeof *x), *w = malloc((size_t)(K * N) * sizeof *w), *g = malloc((size_t)(M * N) * sizeof *g);
    test_fill_uniform(x, (size_t)(M * K), -2, 2);
    test_fill_uniform(w, (size_t)(K * N), -1, 1);
    test_fill_uniform(g, (size_t)(M * N), -1, 1);
    for (int mode = 0; mode < 2; mode++) {
        wgml_scope_begin(ctx);
        wgml_tensor *tx = test_tensor(ctx, 2, sx, x), *tw = test_tensor(ctx, 2, sw, w), *tg = test_tensor(ctx, 2, sg, g);
        CHECK_OK(ctx, wgml_requires_grad(tx, 1));
        CHECK_OK(ctx, wgml_requires_grad(tw, 1));
        /* L = sum(G * (x16 W)) + sum(cast_f32(x16) * x'): the second term's gradient is x', cast
           back to x16's dtype (rounded to a half) and on through x16's cast as it is */
        wgml_tensor *x16 = wgml_cast(ctx, tx, WGML_F16);
        wgml_matmul_desc d = {.f16_math = mode ? WGML_F16_MATH_F32_SUMS : 0};
        wgml_tensor *L = wgml_add(ctx, wgml_sum_all(ctx, wgml_mul(ctx, tg, wgml_matmul_ex(ctx, x16, tw, &d))),
                                  wgml_sum_all(ctx, wgml_mul(ctx, wgml_cast(ctx, x16, WGML_F32), test_tensor(ctx, 2, sx, x))));
        CHECK_OK(ctx, wgml_backward(L));
        float *gx = test_read_new(ctx, "dx", wgml_grad(tx), M * K), *gw = test_read_new(ctx, "dW", wgml_grad(tw), K * N);
        double rel = mode ? 19.0 * 0x1p-11 : 1e-5;
        for (int64_t m = 0; gx && m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                double s = wgml_ref_round_half(x[m * K + k]), sabs = fabs(s);
                for (int64_t n = 0; n < N; n++) {
                    s += (double)g[m * N + n] * w[k * N + n];
                    sabs += fabs((double)g[m * N + n] * w[k * N + n]);
                }
                if (!(fabs(gx[m * K + k] - s) <= rel * sabs + 1e-6)) {
                    FAILF("mode %d: dx[%lld,%lld] = %.9g, want %.9g", mode, (long long)m, (long long)k, gx[m * K + k], s);
                    m = M;
                    break;
                }
            }
        for (int64_t k = 0; gw && k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, sabs = 0;
                for (int64_t m = 0; m < M; m++) {
                    s += wgml_ref_round_half(x[m * K + k]) * g[m * N + n];
                    sabs += fabs(wgml_ref_round_half(x[m * K + k]) * g[m * N + n]);
                }
                if (!(fabs(gw[k * N + n] - s) <= rel * sabs + 1e-6)) {
                    FAILF("mode %d: dW[%lld,%lld] = %.9g, want %.9g", mode, (long long)k, (long long)n, gw[k * N + n], s);
                    k = K;
                    break;
                }
            }
        free(gx);
        free(gw);
        wgml_scope_end(ctx);
    }
    free(x);
    free(w);
    free(g);
}

/* ops whose kernels read only 4-byte elements refuse f16, naming it */
static void other_ops_refuse_f16(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3};
    wgml_scope_begin(ctx);
    wgml_tensor *h = wgml_cast(ctx, test_tensor(ctx, 2, sh, v), WGML_F16);
    wgml_tensor *parts[2] = {h, h};
    wgml_tensor *bad[3] = {wgml_concat(ctx, 2, parts, 0), wgml_softmax(ctx, h), wgml_max(ctx, h, 0, false)};
    for (int i = 0; i < 3; i++) {
        CHECK(wgml_tensor_status(bad[i]) == WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "f16"));
    }
    CHECK(wgml_eval_read(ctx, 1, &h, h, v, 6) == WGML_ERROR_INVALID_ARGUMENT);
    /* an optimiser's parameters are f32 (its update reads 4-byte floats) */
    CHECK_OK(ctx, wgml_eval(ctx, 1, &h));
    wgml_optimizer *opt = NULL;
    CHECK(wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 0.1f}, 1, &h, &opt) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "f16"));
    wgml_optimizer_free(opt);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* A concatenation cast to f16 is one concat storing halves (a launch per input, no cast
   pass), also through a reshape: along each axis, rows a multiple of 4 long (four a thread) or not, an input read
   through a transposed view, against each input's value rounded to half */
static void concat_stores_halves(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    static const int64_t shapes[][2] = {{1, 7}, {3, 8}, {33, 1023}, {65, 1024}};
    for (int s = 0; s < N_OF(shapes); s++)
        for (int axis = 0; axis < 2; axis++) {
            int64_t r = shapes[s][0], n = shapes[s][1], sh[2] = {r, n}, tsh[2] = {n, r};
            float *a = malloc((size_t)(r * n) * sizeof *a), *b = malloc((size_t)(r * n) * sizeof *b);
            test_fill_uniform(a, (size_t)(r * n), -300, 300);
            test_fill_uniform(b, (size_t)(r * n), -2, 2);
            wgml_scope_begin(ctx);
            static const int perm[2] = {1, 0};
            /* b enters transposed, as a view: [n, r] stored, read as [r, n] */
            float *bt = malloc((size_t)(r * n) * sizeof *bt);
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < n; j++) bt[j * r + i] = b[i * n + j];
            wgml_tensor *parts[3] = {test_tensor(ctx, 2, sh, a), wgml_permute(ctx, test_tensor(ctx, 2, tsh, bt), perm),
                                     test_tensor(ctx, 2, sh, b)};
            /* axis 1: the cast of a reshape of it (a view: the same reshape of the concat) */
            wgml_tensor *cat = wgml_concat(ctx, 3, parts, axis);
            int64_t flat = 3 * r * n;
            wgml_tensor *h = wgml_cast(ctx, axis ? wgml_reshape(ctx, cat, 1, &flat) : cat, WGML_F16);
            CHECK(wgml_tensor_dtype(h) == WGML_F16);
            CHECK_OK(ctx, wgml_eval(ctx, 3, parts));
            wgml_stats before, after;
            wgml_stats_get(ctx, &before);
            CHECK_OK(ctx, wgml_eval(ctx, 1, &h));
            wgml_stats_get(ctx, &after);
            CHECK(after.dispatches - before.dispatches == 3);
            int64_t rows = axis ? r : 3 * r, cols = axis ? 3 * n : n;
            float *got = test_read_new(ctx, "concat f16", h, rows * cols);
            int bad = 0;
            for (int64_t i = 0; got && i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    int64_t k = axis ? j / n : i / r, ii = axis ? i : i % r, jj = axis ? j % n : j;
                    double want = (k == 0 ? a : b)[ii * n + jj];
                    if (!within_half_step(got[i * cols + j], want, 0) && bad++ < 3)
                        FAILF("[%lld, %lld] x 3 along %d: y[%lld, %lld] = %.9g, want %.9g rounded to half", (long long)r,
                              (long long)n, axis, (long long)i, (long long)j, got[i * cols + j], want);
                }
            free(got);
            wgml_scope_end(ctx);
            free(a);
            free(b);
            free(bt);
        }
}

/* sum and mean read halves (a bias's gradient under mixed precision): along each axis, on
   every path of the reduce kernel (a thread per output, a workgroup per output, the long
   axis in two launches, the columns of a long axis of wide rows), from an odd element offset
   too, against the double sum of the halves' values */
static void sums_read_halves(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    static const int64_t shapes[][2] = {{1, 7}, {7, 1}, {1023, 33}, {4096, 48}, {65537, 1}, {3, 65537}, {33, 1023}};
    for (int s = 0; s < N_OF(shapes); s++)
        for (int skip = 0; skip < 2; skip++)
            for (int axis = 0; axis < 2; axis++) {
                int64_t rows = shapes[s][0] + skip, n = shapes[s][1], sh[2] = {rows, n};
                float *x = malloc((size_t)(rows * n) * sizeof *x);
                test_fill_uniform(x, (size_t)(rows * n), -2, 3);
                wgml_scope_begin(ctx);
                /* skip = 1: from row 1, an odd element offset where n is odd */
                wgml_tensor *h = wgml_slice(ctx, wgml_cast(ctx, test_tensor(ctx, 2, sh, x), WGML_F16), 0, skip, rows, 1);
                int64_t r = rows - skip, outs = axis ? r : n, len = axis ? n : r;
                wgml_tensor *sum = wgml_sum(ctx, h, axis, 0), *mean = wgml_mean(ctx, h, axis, 0);
                CHECK(wgml_tensor_dtype(sum) == WGML_F32);
                float *hv = test_read_new(ctx, "halves", h, r * n);
                float *gs = test_read_new(ctx, "sum of halves", sum, outs), *gm = test_read_new(ctx, "mean of halves", mean, outs);
                int bad = 0;
                for (int64_t o = 0; hv && gs && gm && o < outs; o++) {
                    double ref = 0, mag = 0;
                    for (int64_t j = 0; j < len; j++) {
                        double v = hv[axis ? o * n + j : j * n + o];
                        ref += v;
                        mag += fabs(v);
                    }
                    double tol = (double)(len + 2) * 0x1p-23 * mag + 1e-30;
                    if ((fabs(gs[o] - ref) > tol || fabs(gm[o] - ref / (double)len) > tol / (double)len + 0x1p-23 * fabs(ref) / (double)len) &&
                        bad++ < 3)
                        FAILF("[%lld, %lld] from row %d, axis %d: output %lld sum %.9g mean %.9g, reference %.9g", (long long)r,
                              (long long)n, skip, axis, (long long)o, gs[o], gm[o], ref);
                }
                free(hv);
                free(gs);
                free(gm);
                wgml_scope_end(ctx);
                free(x);
            }
}

/* Files of dir holding any of the strings in `what` (NULL-terminated). */
static int dumped_with(const char *dir, const char *const *what)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    static char text[1 << 20];
    for (struct dirent *e; (e = readdir(d));) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
        bool any = false;
        for (int i = 0; what[i]; i++) any |= strstr(text, what[i]) != NULL;
        n += any;
    }
    closedir(d);
    return n;
}

/* The GPT's mixed-precision step (both architectures) compiles kernels that store halves (a
   norm, a fused activation) and GEMMs that read an f16 A; its f32 step none; the first step's
   losses from the same weights agree to f16's rounding. */
static void gpt_mixed_step_stores_halves(void)
{
    wgml_context *probe = test_context();
    if (!has_f16(probe)) return;
    static const char *const norm_halves[] = {"alias Y = vec4<f16>", "alias Y = f16;", NULL};
    static const char *const fused_halves[] = {"out: array<vec4<f16>>", "out: array<f16>", NULL};
    static const char *const gemm_halves[] = {"var<storage, read> A: array<f16>", "var<storage, read> A: array<vec4<f16>>", NULL};
    for (int arch = 0; arch < 2; arch++) {
        float loss[2] = {NAN, NAN};
        for (int mixed = 0; mixed < 2; mixed++) {
            char dir[128];
            snprintf(dir, sizeof dir, "/tmp/wgml_test_f16_%d_%d_%d", (int)getpid(), arch, mixed);
            wgml_context *ctx = NULL;
            CHECK_OK(NULL, wgml_context_create(&(wgml_context_desc){.dump_wgsl = dir}, &ctx));
            if (!ctx) return;
            wgml_gpt_config cfg = {.arch = arch ? WGML_GPT_LLAMA : WGML_GPT_GPT2, .vocab = 23, .block = 8, .layers = 1, .heads = 2,
                                   .width = 16, .kv_heads = arch ? 1 : 0};
            wgml_gpt *g = NULL;
            wgml_optimizer *opt = NULL;
            CHECK_OK(ctx, wgml_gpt_new(ctx, &cfg, 7, &g));
            CHECK_OK(ctx, wgml_gpt_optimizer(g, &(wgml_gpt_train_desc){.lr = 1e-3f, .precision = mixed ? WGML_PRECISION_MIXED : 0},
                                             &opt));
            int32_t ids[16], targets[16];
            for (int i = 0; i < 16; i++) ids[i] = (i * 7 + 3) % 23, targets[i] = (i * 5 + 1) % 23;
            int64_t sh[2] = {2, 8};
            wgml_tensor *ti = test_tensor_i32(ctx, 2, sh, ids), *tt = test_tensor_i32(ctx, 2, sh, targets);
            if (g && opt) CHECK_OK(ctx, wgml_gpt_train_step(g, opt, ti, tt, &loss[mixed]));
            int norms = dumped_with(dir, norm_halves), fused = dumped_with(dir, fused_halves), gemms = dumped_with(dir, gemm_halves);
            if (mixed ? !(norms && fused && gemms) : norms + fused + gemms != 0)
                FAILF("%s, %s: %d norm, %d fused and %d GEMM kernels with halves", arch ? "llama" : "gpt2", mixed ? "mixed" : "f32",
                      norms, fused, gemms);
            wgml_tensor_free(ti);
            wgml_tensor_free(tt);
            wgml_optimizer_free(opt);
            wgml_gpt_delete(g);
            wgml_context_free(ctx);
            char cmd[160];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            CHECK(system(cmd) == 0);
        }
        if (!(fabs(loss[1] - loss[0]) <= 1e-2 * fabs(loss[0])))
            FAILF("%s: the first step's loss %.7g in mixed precision, %.7g in f32", arch ? "llama" : "gpt2", loss[1], loss[0]);
    }
}

int main(void)
{
    TEST_RUN(casts_round_to_nearest_even);
    TEST_RUN(round_trips_and_host_writes);
    TEST_RUN(fused_chains_read_and_store_halves);
    TEST_RUN(inner_casts_round);
    TEST_RUN(norms_store_halves);
    TEST_RUN(matmul_reads_f16_operands);
    TEST_RUN(matmul_stores_halves);
    TEST_RUN(gradients_pass_through_casts);
    TEST_RUN(other_ops_refuse_f16);
    TEST_RUN(sums_read_halves);
    TEST_RUN(concat_stores_halves);
    TEST_RUN(gpt_mixed_step_stores_halves);
    test_context_release();
    return test_summary();
}
