/* Matmul with f16 arithmetic (wgml_matmul_desc f16_math): the error against a double
   reference of the f32 inputs stays within the bound that f16 rounding allows, and the
   result really is f16 arithmetic (it differs from the f32 kernel's by far more than f32
   rounding; exact values where the rounding is known: ties to even, infinities, the sum of a
   16-deep slice in f16, the slices' sums in f32); every shape (M = 1, N = 1, K = 1, batches,
   transposes, views, the epilogue) runs it; gradients are f32; the error without
   shader-f16. Then WGML_F16_MATH_MATRIX: without subgroup matrices (lavapipe) the same bits
   as the f32-sums kernel (the f32 kernels' under 16 rows); with them (WGML_RUNTIME=dawn on a
   GPU) the cases above and larger awkward sizes against the matrix units' bound (tol).

   The bound. An output is c = sum_k a_k b_k (K terms). The kernel rounds each operand to
   f16 (relative error <= u = 2^-11 each, to nearest), sums the 16 products of a slice by
   fma in f16 (the first product rounded, then 15 fmas: each term meets at most 16
   roundings, relative error <= gamma_16 = 16u / (1 - 16u)), and adds the slice sums in f32
   (at most K/16 + 1 roundings of 2^-24, under 0.01u for K <= 1100). So
       |c - ref| <= ((1 + u)^2 (1 + gamma_16) (1 + 0.01u) - 1) sum_k |a_k b_k| < 18.2u sum_k |a_k b_k|,
   held to 19u. Halves below 2^-14 are subnormal, with an absolute error up to 2^-25 per
   rounding instead: inputs in [-1, 1] add at most 3 * 2^-25 per term (each operand's
   rounding and the product's), held to K * 2^-23. The epilogue (alpha, bias) is f32: 2^-23
   of |alpha| sum |a b| + |bias| more. relu is 1-Lipschitz, so the bound holds after it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/pipeline.h"
#include "engine/executor.h"
#include "engine/launch.h"
#include "ops/matmul/gemm_sgmat_wgsl.h"
#include "harness.h"
#include "ops/matmul/matmul.h"
#include "ops/table.h"

#define U16 (1.0 / 2048.0) /* f16's unit roundoff, 2^-11 */

/* The mode under test: WGML_F16_MATH_F32_SUMS, then WGML_F16_MATH_F16_SUMS, then
   WGML_F16_MATH_MATRIX (main). */
static int f16_mode = WGML_F16_MATH_F32_SUMS;
/* WGML_F16_MATH_MATRIX runs on the matrix units here (main sets it from the adapter) */
static bool matrix_units = false;

/* The error bound relative to sum_k |a b| for K terms. F32 sums: 19u, from the header.
   F16 sums (the whole of K in f16): the worst case, (K + 2)u / (1 - Ku), says nothing past
   K = 1024, so this is what random data must meet instead: (3 + sqrt(K))u, 2 to 7 times the
   worst this suite meets at each K on lavapipe (4.0u of 8.7u at K = 33, 5.0u of 19u at
   K = 257, 5.4u of 36u at K = 1100; at K = 1 the subnormal slack below covers it); a sum in
   anything coarser than f16, or a misrounded operand, is far past it. */
static double tol(int64_t K, int64_t N)
{
    /* the matrix units (ops/matmul/gemm_sgmat_wgsl.h; docs/MEASUREMENTS.md): each operand rounded
       to f16, the products summed in f32 (K + 2 roundings of 2^-23 at most); rows under 16
       run the f32 kernels, well inside it. Their fallback, also for results narrower than 16
       columns (ops/matmul/matmul.c), is the f32-sums kernel. */
    if (f16_mode == WGML_F16_MATH_MATRIX && matrix_units && N >= 16) return 2 * U16 + (double)(K + 2) * 0x1p-23;
    /* hi and lo halves (wgml.h: WGML_F16_MATH_MATRIX_SPLIT), or the f32 kernels, well inside */
    if (f16_mode == WGML_F16_MATH_MATRIX_SPLIT) return 0x1p-18 + (double)(3 * K + 2) * 0x1p-23;
    return f16_mode == WGML_F16_MATH_F16_SUMS ? (3.0 + sqrt((double)K)) * U16 : 19.0 * U16;
}

/* GELU, tanh form (WGML_ACT_GELU), in double */
static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static float *rand_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    test_fill_uniform(x, n, -1, 1);
    return x;
}

static bool has_f16(wgml_context *ctx)
{
    wgml_adapter_info info;
    if (!ctx || wgml_adapter_info_get(ctx, &info) != WGML_OK) return false;
    if (!info.has_shader_f16) fprintf(stderr, "  SKIP %s: adapter %s has no shader-f16\n", test_current, info.name);
    return info.has_shader_f16;
}

/* c = matmul_ex(a, b, d) (plus r where given: the add folds into the GEMM's epilogue),
   evaluated and read into a new array of n floats (NULL: failed) */
static float *matmul_read(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const wgml_matmul_desc *d, wgml_tensor *r, int64_t n)
{
    wgml_tensor *c = wgml_matmul_ex(ctx, a, b, d), *sum = r && c ? wgml_add(ctx, c, r) : NULL;
    wgml_tensor *out_t = r ? sum : c;
    if (!out_t || wgml_tensor_status(out_t)) {
        FAILF("matmul_ex: %s", wgml_error_message(ctx));
        wgml_tensor_free(c);
        wgml_tensor_free(sum);
        return NULL;
    }
    wgml_stats s0;
    wgml_stats_get(ctx, &s0);
    float *out = test_read_new(ctx, "matmul", out_t, n);
    wgml_stats s1;
    wgml_stats_get(ctx, &s1);
    /* one launch, the add in the epilogue; the split mode on the matrix units adds its operand
       maxima's launch (the mode of this call: run_case's f32 comparison passes 0; every
       residual case is 16 x 16 or more, which the split path takes) */
    uint64_t launches = s1.dispatches - s0.dispatches, want = d->f16_math == WGML_F16_MATH_MATRIX_SPLIT && matrix_units ? 2 : 1;
    if (r && launches != want)
        FAILF("matmul + r: %llu dispatches, want %llu (the add in the epilogue)", (unsigned long long)launches,
              (unsigned long long)want);
    wgml_tensor_free(c);
    wgml_tensor_free(sum);
    return out;
}

/* One random case: A, B and the bias uniform in [-1, 1]. The logical A is [M, K], stored
   [K, M] when ta (the flag) or view_a (a transposed view of the stored matrix, flag off);
   B alike. batch > 0: A [batch, M, K] and B [K, N] shared (the flattened GEMM) or, with
   batch_b, B [batch, K, N] too. */
typedef struct f16_case {
    int64_t M, K, N, batch;
    int ta, tb, view_a, view_b, batch_b, bias;
    wgml_activation act;
    float alpha;
    int residual; /* the result plus R, uniform in [-1, 1], of its shape (a residual stream's add) */
} f16_case;

static void run_case(wgml_context *ctx, const f16_case *c)
{
    int64_t M = c->M, K = c->K, N = c->N, nb = c->batch ? c->batch : 1, bb = c->batch_b ? nb : 1;
    size_t na = (size_t)(nb * M * K), nbn = (size_t)(bb * K * N), nc = (size_t)(nb * M * N);
    float *A = rand_floats(na), *B = rand_floats(nbn), *bias = rand_floats((size_t)N);
    bool sa = c->ta || c->view_a, sb = c->tb || c->view_b; /* stored transposed */
    int64_t sha[3] = {nb, sa ? K : M, sa ? M : K}, shb[3] = {bb, sb ? N : K, sb ? K : N};
    wgml_tensor *ta = test_tensor(ctx, c->batch ? 3 : 2, c->batch ? sha : sha + 1, A);
    wgml_tensor *tb = test_tensor(ctx, c->batch_b ? 3 : 2, c->batch_b ? shb : shb + 1, B);
    wgml_tensor *tbias = test_tensor(ctx, 1, &N, bias);
    wgml_tensor *pa = c->view_a ? wgml_transpose(ctx, ta, -1, -2) : ta;
    wgml_tensor *pb = c->view_b ? wgml_transpose(ctx, tb, -1, -2) : tb;
    wgml_matmul_desc d = {.trans_a = c->ta, .trans_b = c->tb, .alpha = c->alpha, .bias = c->bias ? tbias : NULL,
                          .activation = c->act, .f16_math = f16_mode};
    float *R = rand_floats(nc);
    int64_t shr[3] = {nb, M, N};
    wgml_tensor *tr = c->residual ? test_tensor(ctx, c->batch ? 3 : 2, c->batch ? shr : shr + 1, R) : NULL;
    float *h = matmul_read(ctx, pa, pb, &d, tr, (int64_t)nc);
    d.f16_math = 0;
    float *f = matmul_read(ctx, pa, pb, &d, tr, (int64_t)nc);
    double alpha = c->alpha == 0.0f ? 1.0 : c->alpha, worst = 0, worst_f32 = 0;
    int64_t apart = 0, bad = 0, live = 0; /* live: outputs that relu does not zero */
    for (int64_t bt = 0; h && f && bt < nb; bt++) {
        const float *Ab = A + bt * M * K, *Bb = B + (c->batch_b ? bt : 0) * K * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0, sabs = 0;
                for (int64_t k = 0; k < K; k++) {
                    double x = sa ? Ab[k * M + m] : Ab[m * K + k], y = sb ? Bb[n * K + k] : Bb[k * N + n];
                    s += x * y;
                    sabs += fabs(x * y);
                }
                double pre = alpha * s + (c->bias ? bias[n] : 0.0), ref = c->act == WGML_ACT_RELU && pre < 0 ? 0 : pre;
                double scale = fabs(alpha) * sabs;
                double bound = tol(K, N) * scale + fabs(alpha) * (double)K * 0x1p-23 + 0x1p-23 * (scale + fabs(c->bias ? bias[n] : 0.0));
                /* GELU's slope is at most 1.13; its WGSL (a tanh approximation) within 2^-16 (1 + |v|) */
                if (c->act == WGML_ACT_GELU) ref = gelu_ref(pre), bound = 1.13 * bound + 0x1p-16 * (1 + fabs(pre));
                size_t i = (size_t)((bt * M + m) * N + n);
                /* the residual: added in f32 after the activation (one more rounding) */
                if (c->residual) ref += R[i], bound += 0x1p-24 * (fabs(ref) + 2);
                double err = fabs(h[i] - ref), rel = scale > 0 ? err / scale : err;
                if (!(err <= bound)) {
                    if (bad++ < 3)
                        FAILF("%lldx%lldx%lld: c[%lld,%lld,%lld] = %.9g, reference %.9g: error %.3g past the bound %.3g",
                              (long long)M, (long long)K, (long long)N, (long long)bt, (long long)m, (long long)n, h[i], ref,
                              err, bound);
                }
                if (rel > worst) worst = rel;
                double ef = fabs(f[i] - ref) / (scale > 0 ? scale : 1);
                if (ef > worst_f32) worst_f32 = ef;
                /* f16 arithmetic, not f32: apart by more than 16x f32's unit (relative to sum |a b|);
                   (the matrix mode runs rows under 16 in f32, so is not asked there) */
                if ((c->act == WGML_ACT_RELU && pre <= 0) || (f16_mode == WGML_F16_MATH_MATRIX && M < 16) ||
                    f16_mode == WGML_F16_MATH_MATRIX_SPLIT)
                    continue;
                live++;
                if (fabs((double)h[i] - f[i]) > 0x1p-20 * scale) apart++;
            }
    }
    if (h && f) {
        fprintf(stderr, "  %s%lldx%lldx%lld%s%s: max |c - ref| / sum|ab|: f16 math %.3g (bound %.3g), f32 %.3g; %lld of %lld apart\n",
                c->batch ? "batched " : "", (long long)M, (long long)K, (long long)N, c->ta || c->view_a ? " A^T" : "",
                c->tb || c->view_b ? " B^T" : "", worst, tol(K, N), worst_f32, (long long)apart, (long long)live);
        /* most outputs: all but a few rounding coincidences (K = 1 products, or one of a
           handful of outputs: the H100 met one in 7 at 7x130x1). On the matrix units only the
           operands are rounded (f32 sums): the H100 moved 80-87% of the outputs past 2^-20. */
        double most = f16_mode == WGML_F16_MATH_MATRIX ? 0.5 : 0.9;
        if (live && (double)apart < most * (double)live && apart < live - 1)
            FAILF("%lldx%lldx%lld: only %lld of %lld outputs differ from the f32 kernel's: is f16 arithmetic on?",
                  (long long)M, (long long)K, (long long)N, (long long)apart, (long long)live);
    }
    free(h);
    free(f);
    if (pa != ta) wgml_tensor_free(pa);
    if (pb != tb) wgml_tensor_free(pb);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    wgml_tensor_free(tbias);
    wgml_tensor_free(tr);
    free(A);
    free(B);
    free(bias);
    free(R);
}

/* The GEMM's result plus a tensor of its shape: one launch, the add in the epilogue after the
   bias and activation (on the matrix units, the X the epilogue reads), awkward sizes, batches,
   transposes */
static void residual_in_gemm_epilogue(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    const f16_case cases[] = {
        {.M = 33, .K = 384, .N = 65, .residual = 1},
        {.M = 1023, .K = 64, .N = 390, .bias = 1, .residual = 1},
        {.M = 17, .K = 7, .N = 16, .bias = 1, .act = WGML_ACT_RELU, .residual = 1},
        {.M = 257, .K = 64, .N = 384, .ta = 1, .bias = 1, .batch = 3, .residual = 1},
        {.M = 40, .K = 96, .N = 33, .tb = 1, .alpha = 0.5f, .batch = 2, .batch_b = 1, .residual = 1},
        /* N a multiple of 8: the residual's X read and the results written 8 a lane (matrix units) */
        {.M = 1023, .K = 64, .N = 392, .bias = 1, .residual = 1},
        {.M = 130, .K = 200, .N = 768, .tb = 1, .batch = 2, .residual = 1},
        /* 28 x 3 tiles of 128x256, enough for the form of N up to 768 on the matrix units
           (128x128 tiles, results in two rounds), each round's results 8 a lane */
        {.M = 3500, .K = 64, .N = 768, .bias = 1, .residual = 1},
    };
    for (int i = 0; i < N_OF(cases); i++) run_case(ctx, &cases[i]);
}

/* Every combination of M, K, N from awkward sizes, then K up to 1100 */
static void awkward_sizes(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    const int64_t sizes[] = {1, 7, 33, 130, 257};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            for (int l = 0; l < 5; l++) {
                f16_case c = {.M = sizes[i], .K = sizes[j], .N = sizes[l]};
                if (c.M * c.N > 130 * 257) continue; /* the largest products once, below */
                run_case(ctx, &c);
            }
    const f16_case more[] = {
        {.M = 257, .K = 257, .N = 257}, {.M = 33, .K = 1100, .N = 130}, {.M = 130, .K = 1024, .N = 128}, /* vec4 reads */
        {.M = 1, .K = 1100, .N = 257},  {.M = 257, .K = 1100, .N = 1},   {.M = 200, .K = 1100, .N = 300},
    };
    for (int i = 0; i < N_OF(more); i++) run_case(ctx, &more[i]);
}

/* Transposes by flag and by view, batches (B shared: the flattened GEMM; B batched too),
   the epilogue (alpha, bias, relu), a split K */
static void transposes_batches_epilogue(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    const f16_case cases[] = {
        {.M = 130, .K = 257, .N = 33, .ta = 1},
        {.M = 33, .K = 130, .N = 257, .tb = 1},
        {.M = 7, .K = 1100, .N = 130, .ta = 1, .tb = 1},
        {.M = 130, .K = 64, .N = 132, .view_a = 1, .view_b = 1},
        {.M = 1, .K = 257, .N = 7, .tb = 1},
        {.M = 33, .K = 130, .N = 65, .batch = 3},
        {.M = 1, .K = 130, .N = 65, .batch = 5},
        {.M = 33, .K = 257, .N = 7, .batch = 3, .batch_b = 1, .tb = 1},
        {.M = 130, .K = 257, .N = 33, .bias = 1, .act = WGML_ACT_RELU, .alpha = -1.5f},
        {.M = 7, .K = 33, .N = 130, .bias = 1, .act = WGML_ACT_RELU, .alpha = 0.25f, .batch = 2},
        {.M = 40, .K = 4096, .N = 36}, /* split K: 16 chunks of 256, partial results summed in f32 */
    };
    for (int i = 0; i < N_OF(cases); i++) run_case(ctx, &cases[i]);
}

/* Every tile config the generator emits for M > 64 (forced by WGML_GEMM_TILE on fresh
   contexts, as the benchmark sweeps do: tm,tn,bk,stages with stages 1 one buffer, 2 two
   with register prefetch, 3 two without, 4 one with prefetch): BK 32 still sums 16 k in
   f16, BK 8 and 4 sum a slice */
static void every_tile_config(void)
{
    wgml_context *probe = test_context();
    if (!has_f16(probe)) return;
    const char *configs[][2] = {{"8,8,16,1", "16x2"}, {"8,8,16,3", "8x4"}, {"4,8,4,1", "16x2"}, {"8,4,32,2", "8x4"},
                                {"8,8,16,4", "16x2"}, {"16,8,8,1", "16x2"}, {"8,16,8,4", "8x4"}, {"8,4,16,2", "16x2"}};
    const int64_t dims[][3] = {{65, 33, 130}, {132, 68, 132}};
    for (int t = 0; t < N_OF(configs); t++) {
        setenv("WGML_GEMM_TILE", configs[t][0], 1);
        setenv("WGML_GEMM_WARP", configs[t][1], 1);
        wgml_context *ctx = NULL;
        CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
        if (!ctx) break;
        fprintf(stderr, "  tile %s, warp %s:\n", configs[t][0], configs[t][1]);
        /* one case each (these kernels take seconds each to compile on lavapipe): the shapes
           and transposes in turn, so every transpose meets aligned and unaligned shapes */
        int d = t % 2, mode = (t / 2) % 4;
        f16_case c = {.M = dims[d][0], .K = dims[d][1], .N = dims[d][2], .ta = mode & 1, .tb = mode >> 1};
        run_case(ctx, &c);
        wgml_context_free(ctx);
    }
    unsetenv("WGML_GEMM_TILE");
    unsetenv("WGML_GEMM_WARP");
}

/* Two leading dims (a stride each, broadcast): [2, 1, M, K] x [1, 3, K, N] */
static void two_leading_dims(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    int64_t M = 33, K = 70, N = 17, sa[4] = {2, 1, M, K}, sb[4] = {1, 3, K, N};
    float *A = rand_floats((size_t)(2 * M * K)), *B = rand_floats((size_t)(3 * K * N));
    wgml_tensor *ta = test_tensor(ctx, 4, sa, A), *tb = test_tensor(ctx, 4, sb, B);
    wgml_matmul_desc d = {.f16_math = f16_mode};
    float *h = matmul_read(ctx, ta, tb, &d, NULL, 6 * M * N);
    for (int64_t i0 = 0; h && i0 < 2; i0++)
        for (int64_t i1 = 0; i1 < 3; i1++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double s = 0, sabs = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double x = A[(i0 * M + m) * K + k], y = B[(i1 * K + k) * N + n];
                        s += x * y;
                        sabs += fabs(x * y);
                    }
                    double got = h[((i0 * 3 + i1) * M + m) * N + n];
                    if (!(fabs(got - s) <= tol(K, N) * sabs + K * 0x1p-23)) {
                        FAILF("[%lld,%lld,%lld,%lld] = %.9g, reference %.9g", (long long)i0, (long long)i1, (long long)m,
                              (long long)n, got, s);
                        i0 = 2, i1 = 3, m = M, n = N;
                    }
                }
    free(h);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    free(A);
    free(B);
}

/* c[m] = a[m, :] . b for K values placed by hand, M outputs of one column, as f16_math */
static float *column(wgml_context *ctx, int64_t M, int64_t K, const float *a, const float *b)
{
    int64_t sa[2] = {M, K}, sb[2] = {K, 1};
    wgml_tensor *ta = test_tensor(ctx, 2, sa, a), *tb = test_tensor(ctx, 2, sb, b);
    wgml_matmul_desc d = {.f16_math = f16_mode};
    float *c = matmul_read(ctx, ta, tb, &d, NULL, M);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    return c;
}

/* Where the rounding is known exactly: operands rounded to the nearest half with ties to
   even, and infinities past the largest half; the sum of one 16-deep slice in f16, the
   slices' sums in f32. Each expected value differs from what f32 arithmetic gives. */
static void exact_roundings(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    /* K = 1, b = 1: c = the half nearest a */
    const float a1[] = {
        1.0f + 0x1p-11f,     /* a tie between 1 and 1 + 2^-10: to the even 1 */
        1.0f + 3 * 0x1p-11f, /* a tie between 1 + 2^-10 and 1 + 2^-9: to the even 1 + 2^-9 */
        1.0f + 0x1p-12f,     /* below the tie: 1 */
        65519.0f,            /* under 65520, the midpoint past the largest half: 65504 */
        65520.0f,            /* the midpoint: to the even, infinity */
        70000.0f,            /* past: infinity */
        -1e6f,               /* -infinity */
        0x1p-26f,            /* below half the smallest subnormal (2^-25): 0 */
    };
    const float want1[] = {1.0f, 1.0f + 0x1p-9f, 1.0f, 65504.0f, INFINITY, INFINITY, -INFINITY, 0.0f};
    const float one = 1.0f;
    float *c = column(ctx, N_OF(a1), 1, a1, &one);
    for (int i = 0; c && i < N_OF(a1); i++)
        if (!(c[i] == want1[i])) FAILF("a = %.9g, b = 1: got %.9g, want %.9g (the nearest half)", a1[i], c[i], want1[i]);
    free(c);
    /* K = 32, b = 1 (two slices of 16): row 0 sums 1 and 2^-11 in one slice (f16: a tie, to
       1); row 1 in two slices (f32 sums: 1 + 2^-11; f16 sums: 1); row 2 sums 60000 + 60000
       in one slice (f16: infinity); row 3 in two (f32 sums: 120000; f16 sums: infinity) */
    float a2[4 * 32] = {0}, b2[32];
    for (int k = 0; k < 32; k++) b2[k] = 1.0f;
    a2[0 * 32 + 0] = 1.0f, a2[0 * 32 + 5] = 0x1p-11f;
    a2[1 * 32 + 0] = 1.0f, a2[1 * 32 + 21] = 0x1p-11f;
    a2[2 * 32 + 3] = 60000.0f, a2[2 * 32 + 9] = 60000.0f;
    a2[3 * 32 + 3] = 60000.0f, a2[3 * 32 + 19] = 60000.0f;
    bool whole = f16_mode == WGML_F16_MATH_F16_SUMS;
    const float want2[] = {1.0f, whole ? 1.0f : 1.0f + 0x1p-11f, INFINITY, whole ? INFINITY : 120000.0f};
    c = column(ctx, 4, 32, a2, b2);
    for (int i = 0; c && i < 4; i++)
        if (!(c[i] == want2[i])) FAILF("slice sums, row %d: got %.9g, want %.9g", i, c[i], want2[i]);
    free(c);
}

/* The precision tests' operands, both trainable: a [M, K] of w = 1 - 3 * 2^-13 and b [K, N] of
   v = 1 + 3 * 2^-12 (M, K, N = 20, 40, 24), exact in f32 and not in f16, which rounds them to
   1 - 2^-11 and 1 + 2^-10. */
enum { TIE_M = 20, TIE_K = 40, TIE_N = 24 };
static const float tie_v = 1.0f + 3 * 0x1p-12f, tie_w = 1.0f - 3 * 0x1p-13f;
static void tie_operands(wgml_context *ctx, wgml_tensor **ta, wgml_tensor **tb)
{
    int64_t sa[2] = {TIE_M, TIE_K}, sb[2] = {TIE_K, TIE_N};
    float *A = malloc((size_t)(TIE_M * TIE_K) * sizeof *A), *B = malloc((size_t)(TIE_K * TIE_N) * sizeof *B);
    for (int64_t i = 0; i < TIE_M * TIE_K; i++) A[i] = tie_w;
    for (int64_t i = 0; i < TIE_K * TIE_N; i++) B[i] = tie_v;
    *ta = test_tensor(ctx, 2, sa, A), *tb = test_tensor(ctx, 2, sb, B);
    CHECK_OK(ctx, wgml_requires_grad(*ta, 1));
    CHECK_OK(ctx, wgml_requires_grad(*tb, 1));
    free(A), free(B);
}

/* The backward matmuls do not inherit f16_math. y = a b with every element of b
   v = 1 + 3 * 2^-12 (exact in f32, not in f16: 1 + 2^-10 is the nearest half), loss =
   sum(y): dL/da[m, k] = sum_n b[k, n] = N v, exact in f32 arithmetic and 2.4e-4 off in f16
   arithmetic. dL/db alike with a's elements w = 1 - 3 * 2^-13 (nearest half 1 - 2^-11).
   The forward is f16: each product rounds to 1, so y = K where f32 gives K v w. */
static void gradients_are_f32(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    const int64_t M = TIE_M, K = TIE_K, N = TIE_N;
    const float v = tie_v, w = tie_w;
    wgml_tensor *ta, *tb;
    tie_operands(ctx, &ta, &tb);
    wgml_matmul_desc d = {.f16_math = 1};
    wgml_tensor *y = wgml_matmul_ex(ctx, ta, tb, &d), *L = wgml_sum_all(ctx, y);
    CHECK_OK(ctx, wgml_backward(L));
    float *ga = test_read_new(ctx, "grad a", wgml_grad(ta), M * K), *gb = test_read_new(ctx, "grad b", wgml_grad(tb), K * N);
    float *fy = test_read_new(ctx, "y", y, M * N);
    for (int64_t i = 0; ga && i < M * K; i++)
        if (ga[i] != (float)((double)N * v)) {
            FAILF("dL/da[%lld] = %.9g, want %.9g (f32 arithmetic)", (long long)i, ga[i], (double)N * v);
            break;
        }
    for (int64_t i = 0; gb && i < K * N; i++)
        if (gb[i] != (float)((double)M * w)) {
            FAILF("dL/db[%lld] = %.9g, want %.9g (f32 arithmetic)", (long long)i, gb[i], (double)M * w);
            break;
        }
    /* the forward: (1 + 2^-10)(1 - 2^-11) is under 1 + 2^-11, the tie: each product is 1 */
    if (fy && fy[0] != (float)K) FAILF("y[0] = %.9g, want %lld (f16 arithmetic; f32: %.9g)", fy[0], (long long)K, (double)K * v * w);
    free(ga);
    free(gb);
    free(fy);
    wgml_tensor_free(L);
    wgml_tensor_free(y);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
}

/* wgml_set_compute_precision(MIXED): a matmul that leaves f16_math 0, and the gradient
   matmuls autograd builds for it, round their operands to f16 (values a tie or less away
   from f16 neighbours tell); back at F32, the same product is f32 again. */
static void precision_policy(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    const int64_t M = TIE_M, K = TIE_K, N = TIE_N;
    const float v = tie_v, w = tie_w;
    wgml_tensor *ta, *tb;
    tie_operands(ctx, &ta, &tb);
    CHECK(wgml_compute_precision(ctx) == WGML_PRECISION_F32);
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED));
    CHECK(wgml_compute_precision(ctx) == WGML_PRECISION_MIXED);
    wgml_tensor *y = wgml_matmul(ctx, ta, tb), *L = wgml_sum_all(ctx, y);
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_F32));
    wgml_tensor *y32 = wgml_matmul(ctx, ta, tb);
    float *ga = test_read_new(ctx, "grad a", wgml_grad(ta), M * K), *gb = test_read_new(ctx, "grad b", wgml_grad(tb), K * N);
    float *fy = test_read_new(ctx, "y", y, M * N), *fy32 = test_read_new(ctx, "y f32", y32, M * N);
    const float want_ga = (float)N * (1.0f + 0x1p-10f), want_gb = (float)M * (1.0f - 0x1p-11f);
    if (ga && ga[0] != want_ga) FAILF("dL/da[0] = %.9g, want %.9g (f16 operands)", ga[0], want_ga);
    if (gb && gb[0] != want_gb) FAILF("dL/db[0] = %.9g, want %.9g (f16 operands)", gb[0], want_gb);
    /* the matrix units (M, N >= 16 on an adapter with them) multiply the halves exactly and sum
       in f32: y is K (1 + 2^-10)(1 - 2^-11) there (the operands rounded, no tie in the products;
       unrounded operands would give K v w, 0.005 less) */
    wgml_adapter_info info;
    bool units = wgml_adapter_info_get(ctx, &info) == WGML_OK && info.has_subgroup_matrix &&
                 info.subgroup_min_size == info.subgroup_max_size;
    bool f16_to_f32 = false;
    for (int k = 0; units && k < info.subgroup_matrix_count; k++)
        f16_to_f32 |= !strcmp(info.subgroup_matrix[k].component, "f16") && !strcmp(info.subgroup_matrix[k].result, "f32");
    const double halves_product = (double)K * (1.0 + 0x1p-10) * (1.0 - 0x1p-11);
    if (fy && f16_to_f32 && !(fabs(fy[0] - halves_product) <= 0x1p-23 * K * K))
        FAILF("y[0] = %.9g, want %.9g (f16 operands on the matrix units)", fy[0], halves_product);
    if (fy && !f16_to_f32 && fy[0] != (float)K) FAILF("y[0] = %.9g, want %lld (f16 operands)", fy[0], (long long)K);
    if (fy32 && !(fabs(fy32[0] - (double)K * v * w) <= 1e-6 * K)) FAILF("y[0] at F32 = %.9g, want %.9g", fy32[0], (double)K * v * w);
    CHECK_STATUS(ctx, wgml_set_compute_precision(ctx, (wgml_precision)7), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_compute_precision(ctx) == WGML_PRECISION_F32);
    free(ga), free(gb), free(fy), free(fy32);
    wgml_tensor_free(L), wgml_tensor_free(y), wgml_tensor_free(y32), wgml_tensor_free(ta), wgml_tensor_free(tb);
    wgml_clear_error(ctx);
}

/* A [M, K] @ B [K, N] of host arrays in the split mode and with f16_math 0: *split and *f32,
   new arrays (NULL on failure) */
static void split_and_f32(wgml_context *ctx, const float *A, const float *B, int64_t M, int64_t K, int64_t N, float **split,
                          float **f32)
{
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    wgml_tensor *ta = test_tensor(ctx, 2, sa, A), *tb = test_tensor(ctx, 2, sb, B);
    wgml_matmul_desc d = {.f16_math = WGML_F16_MATH_MATRIX_SPLIT};
    *split = matmul_read(ctx, ta, tb, &d, NULL, M * N);
    d.f16_math = 0;
    *f32 = matmul_read(ctx, ta, tb, &d, NULL, M * N);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
}

/* Row m of A [M, K] times column n of B [K, N] in double, and sum_k |a b| into *sabs */
static double dot_ref(const float *A, const float *B, int64_t K, int64_t N, int64_t m, int64_t n, double *sabs)
{
    double ref = 0;
    *sabs = 0;
    for (int64_t k = 0; k < K; k++) ref += (double)A[m * K + k] * B[k * N + n], *sabs += fabs((double)A[m * K + k] * B[k * N + n]);
    return ref;
}

/* The split mode's maxima kernel on any adapter (plain WGSL: lavapipe runs it too): two
   operands' views, each read by its 256 workgroups into a word each; the largest word's low 31
   bits must be the largest finite |v| of that view exactly (and no word above it), bit 31 set in
   some word exactly where the view holds an infinity or NaN, and values outside the view
   (padding, other offsets) ignored. Sizes: one element, awkward strided batches, two leading
   dims, and runs past the 16-a-lane loop's end; the maximum placed at random, last, and in two
   of that loop's four groups of loads; the non-finite values scattered or one alone. */
typedef wgml_sgmat_max_abs_params maxima_view;

static uint64_t view_extent(const maxima_view *v)
{
    uint64_t L0 = v->batch / v->L1, last = (uint64_t)(L0 - 1) * v->bs0 + (uint64_t)(v->L1 - 1) * v->bs1;
    return v->off + last + (uint64_t)(v->rows - 1) * v->ld + v->cols;
}

static uint64_t view_count(const maxima_view *v) { return (uint64_t)v->batch * v->rows * v->cols; }

/* fills x[0..n) so that the view's largest finite magnitude is |top|, at its element `at` (in
   the view's order; the others below it), with larger finite values outside; bad 1: infinities
   and NaN scattered through it, 2: one infinity at its element bad_at (neither where the view
   has too few elements). Returns the expected bits, and whether it placed a non-finite value. */
static uint32_t fill_view(float *x, uint64_t n, const maxima_view *v, float top, uint64_t at, int bad, uint64_t bad_at,
                          bool *nonfinite)
{
    for (uint64_t i = 0; i < n; i++) x[i] = 4.0f * fabsf(top); /* outside the view: larger than its maximum */
    uint64_t count = view_count(v), k = 0;
    *nonfinite = (bad == 1 && count > 8) || (bad == 2 && bad_at != at);
    for (uint32_t b = 0; b < v->batch; b++)
        for (uint32_t r = 0; r < v->rows; r++)
            for (uint32_t c = 0; c < v->cols; c++, k++) {
                uint64_t i = v->off + (uint64_t)(b / v->L1) * v->bs0 + (uint64_t)(b % v->L1) * v->bs1 + (uint64_t)r * v->ld + c;
                float u;
                test_fill_uniform(&u, 1, -1, 1);
                x[i] = k == at ? top : u * 0.999f * top;
                if (*nonfinite && k != at && (bad == 1 ? k % 997 == 3 : k == bad_at))
                    x[i] = k % 3 ? INFINITY : k % 2 ? -INFINITY : NAN;
            }
    uint32_t bits;
    float t = fabsf(top);
    memcpy(&bits, &t, 4);
    return bits;
}

/* one launch of the maxima kernel over views[0..1] held in t[0..1], its words into got */
static bool run_maxima(wgml_context *ctx, const maxima_view views[2], wgml_tensor *const t[3], uint32_t *got)
{
    uint32_t key[1] = {WGML_KEY_GEMM_MAX_ABS};
    wgml_launch l;
    memset(&l, 0, sizeof l);
    if (!(l.pipeline = wgml_pipeline_find(ctx, key, 1)) &&
        !(l.pipeline = wgml_pipeline_add(ctx, key, 1, strdup(wgml_sgmat_max_abs_wgsl()), true)))
        return false;
    memcpy(l.params, views, 2 * sizeof *views);
    l.params_size = 2 * sizeof *views;
    l.groups[0] = 2 * WGML_SGMAT_MAX_ABS_GROUPS, l.groups[1] = l.groups[2] = 1;
    l.loop_trips = 1 << 20;
    WGPUBuffer raw[3] = {t[2]->buf->handle, t[0]->buf->handle, t[1]->buf->handle};
    memcpy(l.raw, raw, sizeof raw);
    l.nbuffers = 3;
    wgml_exec_readback rb = {.buffer = raw[0], .offset = 0, .size = 2 * WGML_SGMAT_MAX_ABS_GROUPS * 4, .host = got};
    return wgml_exec_submit(ctx, &l, 1, &rb, "the maxima kernel", wgml_host_seconds()) == WGML_OK;
}

static void split_maxima_kernel(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const maxima_view views[][2] = {
        /* a run past 16 x 65536 elements (the unrolled loop, then its tail) beside one element */
        {{3, 1023, 1093, 1023, 0, 0, 1, 1}, {0, 1, 1, 1, 0, 0, 1, 1}},
        /* rows ld apart (a column window), batches with gaps; a contiguous batch */
        {{5, 40, 7, 33, 7 * 40 + 5, 0, 1, 3}, {1, 130, 257, 130, 257 * 130, 0, 1, 2}},
        /* two leading dims, strided and contiguous */
        {{0, 9, 4, 7, 3 * (4 * 9 + 3) + 5, 4 * 9 + 3, 3, 6}, {2, 65, 3, 65, 2 * 3 * 65, 3 * 65, 2, 4}},
        /* a single row of 65537; a run ending 100 past the unrolled loop's 15 x 65536 */
        {{0, 65537, 1, 65537, 0, 0, 1, 1}, {7, 16, 1023, 7, 0, 0, 1, 1}},
        {{1, 100, 9831, 100, 0, 0, 1, 1}, {0, 983140, 1, 983140, 0, 0, 1, 1}},
    };
    const float tops[] = {-3.75f, 1.0e-30f, 2.5e30f, 1.5f, -7.0f, 0x1p-20f, 1.0f, -1.0f, 0.3f, -1.0e5f};
    float init[2 * WGML_SGMAT_MAX_ABS_GROUPS];
    for (int i = 0; i < N_OF(init); i++) init[i] = 1.0e38f; /* above every view's maximum */
    for (int v = 0; v < N_OF(views); v++)
        for (int p = 0; p < 4; p++) {
            wgml_tensor *t[3] = {NULL, NULL, NULL};
            uint32_t want[2], got[2 * WGML_SGMAT_MAX_ABS_GROUPS];
            bool nonfinite[2];
            float *x[2] = {NULL, NULL};
            for (int o = 0; o < 2; o++) {
                const maxima_view *w = &views[v][o];
                uint64_t n = view_extent(w) + 70000, count = view_count(w); /* a read past the view's end meets larger values */
                /* at random, last, and (in a long run) in the unrolled loop's last and second group of four loads */
                uint64_t places[4] = {test_rand_u64() % count, count - 1, 14 * 65536 + 3, 5 * 65536 + 5};
                uint64_t at = places[p] < count ? places[p] : count - 1, bad_at = (at + 7 * 65536 + 1) % count;
                x[o] = malloc((size_t)n * sizeof *x[o]);
                want[o] = fill_view(x[o], n, w, tops[2 * v + o], at, (v + o + p) % 3, bad_at, &nonfinite[o]);
                int64_t sh = (int64_t)n;
                t[o] = test_tensor(ctx, 1, &sh, x[o]);
            }
            int64_t nw = N_OF(init);
            t[2] = test_tensor(ctx, 1, &nw, init);
            if (t[0] && t[1] && t[2] && run_maxima(ctx, views[v], t, got))
                for (int o = 0; o < 2; o++) {
                    uint32_t best = 0, over = 0, flags = 0;
                    for (int g = 0; g < WGML_SGMAT_MAX_ABS_GROUPS; g++) {
                        uint32_t w = got[o * WGML_SGMAT_MAX_ABS_GROUPS + g], f = w & 0x7fffffffu;
                        best = f > best ? f : best;
                        over += f > want[o];
                        flags += w >> 31;
                    }
                    if (best != want[o] || over || (flags > 0) != nonfinite[o])
                        FAILF("view %d place %d operand %d: largest word 0x%08x, want 0x%08x (|%g|); %u words above it; "
                              "%u flagged, want %s", v, p, o, best, want[o], (double)tops[2 * v + o], over, flags,
                              nonfinite[o] ? "some" : "none");
                }
            else FAILF("maxima kernel: %s", wgml_error_message(ctx));
            for (int i = 0; i < 3; i++) wgml_tensor_free(t[i]);
            free(x[0]);
            free(x[1]);
        }
}

/* One product with a few infinities or NaN set in A (bad_a, count na) and B (bad_b): nonfinite
   outputs counted, each as the f32 kernel's, the finite ones within the bound */
static void non_finite_case(wgml_context *ctx, int64_t M, int64_t K, int64_t N, const int64_t *bad_a, int na,
                            const int64_t *bad_b, int nb, int64_t want_nonfinite)
{
    const float vals[3] = {INFINITY, -INFINITY, NAN};
    float *A = rand_floats((size_t)(M * K)), *B = rand_floats((size_t)(K * N)), *got, *f32;
    for (int i = 0; i < na; i++) A[bad_a[i]] = vals[i % 3];
    for (int i = 0; i < nb; i++) B[bad_b[i]] = vals[i % 3];
    split_and_f32(ctx, A, B, M, K, N, &got, &f32);
    int64_t nonfinite = 0;
    for (int64_t i = 0; got && f32 && i < M * N; i++) {
        int64_t m = i / N, n = i % N;
        if (!isfinite(f32[i])) {
            nonfinite++;
            if (isnan(f32[i]) != isnan(got[i]) || (isinf(f32[i]) && got[i] != f32[i]))
                FAILF("%lldx%lldx%lld: c[%lld,%lld] = %g, the f32 kernel's %g", (long long)M, (long long)K, (long long)N,
                      (long long)m, (long long)n, got[i], f32[i]);
            continue;
        }
        double sabs, ref = dot_ref(A, B, K, N, m, n, &sabs);
        if (!(fabs(got[i] - ref) <= tol(K, N) * sabs))
            FAILF("%lldx%lldx%lld: c[%lld,%lld] = %.9g, reference %.9g (finite)", (long long)M, (long long)K, (long long)N,
                  (long long)m, (long long)n, got[i], ref);
    }
    if (got && f32 && nonfinite != want_nonfinite)
        FAILF("%lldx%lldx%lld: %lld outputs not finite, want %lld", (long long)M, (long long)K, (long long)N,
              (long long)nonfinite, (long long)want_nonfinite);
    free(got), free(f32), free(A), free(B);
}

/* Infinities and NaN in the split mode's operands: they set no scale (the finite elements keep
   their accuracy) and reach the results as in the f32 kernel: the same outputs infinite (with
   the same sign) or NaN, the finite ones within the bound */
static void split_mode_non_finite(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* in A's rows 3, 7 and 20 */
    const int64_t K = 70, bad_a[3] = {3 * K + 5, 7 * K + 60, 20 * K + 1};
    non_finite_case(ctx, 40, K, 36, bad_a, 3, NULL, 0, 3 * 36);
    /* in B's columns 513 and 2, a run long enough for the maxima's 16-a-lane loop: one inside
       it (element 14 x 65536 + 9), one in its tail (past 16 x 65536) */
    const int64_t bad_b[2] = {14 * 65536 + 9, 1099 * 1000 + 2};
    non_finite_case(ctx, 33, 1100, 1000, NULL, 0, bad_b, 2, 2 * 33);
}

/* wgml_set_compute_precision(F32_SPLIT): a matmul that leaves f16_math 0, and the gradient
   matmuls backward builds, keep f32 accuracy (hi and lo halves on the matrix units, else the f32
   kernels): the tie operands' products are not rounded to halves, as under MIXED */
static void split_policy(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t M = TIE_M, K = TIE_K, N = TIE_N;
    const double v = tie_v, w = tie_w;
    wgml_tensor *ta, *tb;
    tie_operands(ctx, &ta, &tb);
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_F32_SPLIT));
    CHECK(wgml_compute_precision(ctx) == WGML_PRECISION_F32_SPLIT);
    wgml_tensor *y = wgml_matmul(ctx, ta, tb), *L = wgml_sum_all(ctx, y);
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_F32));
    float *ga = test_read_new(ctx, "grad a", wgml_grad(ta), M * K), *gb = test_read_new(ctx, "grad b", wgml_grad(tb), K * N);
    float *fy = test_read_new(ctx, "y", y, M * N);
    /* the halves' values would be 2^-12 (y) and 2^-13 (the gradients) of each product away */
    if (fy && !(fabs(fy[0] - K * v * w) <= 1e-6 * K)) FAILF("y[0] = %.9g, want %.9g (f32 accuracy)", fy[0], K * v * w);
    if (ga && !(fabs(ga[0] - N * v) <= 1e-6 * N)) FAILF("dL/da[0] = %.9g, want %.9g", ga[0], N * v);
    if (gb && !(fabs(gb[0] - M * w) <= 1e-6 * M)) FAILF("dL/db[0] = %.9g, want %.9g", gb[0], M * w);
    free(ga), free(gb), free(fy);
    wgml_tensor_free(L), wgml_tensor_free(y), wgml_tensor_free(ta), wgml_tensor_free(tb);
}

/* Without shader-f16 the op fails with WGML_ERROR_UNSUPPORTED naming the op, the operands
   and the adapter. lavapipe has the feature, so a fresh context is told it has not (the
   check reads the context's adapter info); f16_math = 0 still works there. */
static void unsupported_without_shader_f16(void)
{
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    ctx->rt.info.has_shader_f16 = 0;
    int64_t sa[2] = {3, 4}, sb[2] = {4, 5};
    float A[12] = {0}, B[20] = {0};
    wgml_tensor *ta = test_tensor(ctx, 2, sa, A), *tb = test_tensor(ctx, 2, sb, B);
    wgml_matmul_desc d = {.f16_math = 1};
    wgml_tensor *c = wgml_matmul_ex(ctx, ta, tb, &d);
    CHECK(c != NULL && wgml_tensor_status(c) == WGML_ERROR_UNSUPPORTED);
    if (c) {
        const char *msg = wgml_error_message(ctx);
        char want[320];
        snprintf(want, sizeof want, "which %s lacks", ctx->rt.info.name);
        if (!msg || !strstr(msg, "matmul: f16_math ([3, 4] x [4, 5])") || !strstr(msg, "shader-f16") || !strstr(msg, want))
            FAILF("message: %s", msg ? msg : "(none)");
        else fprintf(stderr, "  message: %s\n", msg);
    }
    wgml_tensor_free(c);
    d.f16_math = 0;
    c = wgml_matmul_ex(ctx, ta, tb, &d);
    CHECK(c != NULL && wgml_tensor_status(c) == WGML_OK);
    float out[15];
    if (c) CHECK_OK(ctx, wgml_tensor_read(c, out, 15));
    wgml_tensor_free(c);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    wgml_context_free(ctx);
}

/* f16_math values other than 0 to 4 are refused, naming the value */
static void bad_mode(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[4] = {1, 2, 3, 4};
    int64_t sh[2] = {2, 2};
    wgml_tensor *a = test_tensor(ctx, 2, sh, x);
    for (int v = -1; v <= 5; v += 6) {
        wgml_matmul_desc d = {.f16_math = v};
        wgml_tensor *c = wgml_matmul_ex(ctx, a, a, &d);
        CHECK(c && wgml_tensor_status(c) == WGML_ERROR_INVALID_ARGUMENT);
        const char *msg = wgml_error_message(ctx);
        char want[48];
        snprintf(want, sizeof want, "f16_math %d is not", v);
        if (!msg || !strstr(msg, want)) FAILF("f16_math = %d: message '%s'", v, msg ? msg : "(none)");
        wgml_tensor_free(c);
    }
    wgml_tensor_free(a);
}

/* Without matrix units (lavapipe) WGML_F16_MATH_MATRIX is the f32-sums SIMT kernel: the
   same bits as WGML_F16_MATH_F32_SUMS from 16 rows on, and the f32 kernels' bits below (the
   GEMV paths); the error against the double reference is checked by the cases that follow. */
static void matrix_fallback_is_simt(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    if (matrix_units) {
        fprintf(stderr, "  SKIP %s: this adapter has subgroup matrices (the fallback is not taken)\n", test_current);
        return;
    }
    const int64_t dims[][3] = {{33, 130, 65}, {130, 257, 7}, {16, 1100, 33}, {15, 257, 130}, {1, 130, 257}, {40, 4096, 36}};
    for (int i = 0; i < N_OF(dims); i++) {
        int64_t M = dims[i][0], K = dims[i][1], N = dims[i][2], sa[2] = {M, K}, sb[2] = {K, N};
        float *A = rand_floats((size_t)(M * K)), *B = rand_floats((size_t)(K * N));
        wgml_tensor *ta = test_tensor(ctx, 2, sa, A), *tb = test_tensor(ctx, 2, sb, B);
        wgml_matmul_desc d = {.f16_math = WGML_F16_MATH_MATRIX};
        float *got = matmul_read(ctx, ta, tb, &d, NULL, M * N);
        d.f16_math = M >= 16 ? WGML_F16_MATH_F32_SUMS : 0;
        float *want = matmul_read(ctx, ta, tb, &d, NULL, M * N);
        for (int64_t j = 0; got && want && j < M * N; j++)
            if (memcmp(&got[j], &want[j], sizeof got[j])) {
                FAILF("%lldx%lldx%lld: c[%lld] = %.9g, the %s kernel gives %.9g", (long long)M, (long long)K, (long long)N,
                      (long long)j, got[j], M >= 16 ? "f32-sums" : "f32", want[j]);
                break;
            }
        fprintf(stderr, "  %lldx%lldx%lld: as the %s kernel\n", (long long)M, (long long)K, (long long)N,
                M >= 16 ? "f32-sums" : "f32");
        free(got);
        free(want);
        wgml_tensor_free(ta);
        wgml_tensor_free(tb);
        free(A);
        free(B);
    }
}

/* WGML_F16_MATH_MATRIX_SPLIT without matrix units (lavapipe) runs the f32 kernels: the same
   bits as f16_math 0. With them, operands far from 1 in magnitude (the scales from their
   maxima: A near 2^-30, as small gradients are, B near 2^20; and A with a few elements 2^-40 of
   its largest) keep the bound relative to sum |a b|. */
static void split_mode_scales(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* (the last a split K on the matrix units: its maxima wait in C's memory) */
    const int64_t dims[][3] = {{33, 130, 65}, {130, 257, 7}, {1, 130, 257}, {1023, 33, 100}, {200, 1100, 300}, {96, 4100, 130}};
    for (int i = 0; i < N_OF(dims); i++) {
        int64_t M = dims[i][0], K = dims[i][1], N = dims[i][2];
        float *A = rand_floats((size_t)(M * K)), *B = rand_floats((size_t)(K * N)), *got, *f32;
        for (int64_t j = 0; j < M * K; j++) A[j] = ldexpf(A[j], j % 97 == 5 ? -70 : -30);
        for (int64_t j = 0; j < K * N; j++) B[j] = ldexpf(B[j], 20);
        split_and_f32(ctx, A, B, M, K, N, &got, &f32);
        double worst = 0;
        for (int64_t m = 0; got && f32 && m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double sabs, ref = dot_ref(A, B, K, N, m, n, &sabs);
                double err = fabs(got[m * N + n] - ref), bound = tol(K, N) * sabs + 0x1p-149;
                if (err / sabs > worst) worst = err / sabs;
                if (!(err <= bound)) {
                    FAILF("%lldx%lldx%lld: c[%lld,%lld] = %.9g, reference %.9g: error %.3g past %.3g", (long long)M, (long long)K,
                          (long long)N, (long long)m, (long long)n, got[m * N + n], ref, err, bound);
                    m = M;
                    break;
                }
                if (!matrix_units && memcmp(&got[m * N + n], &f32[m * N + n], sizeof *got))
                    FAILF("%lldx%lldx%lld: c[%lld,%lld] = %.9g, the f32 kernel's %.9g (no matrix units: the same kernel)",
                          (long long)M, (long long)K, (long long)N, (long long)m, (long long)n, got[m * N + n], f32[m * N + n]);
            }
        fprintf(stderr, "  %lldx%lldx%lld, A ~2^-30, B ~2^20: max |c - ref| / sum|ab| %.3g (bound %.3g)\n", (long long)M,
                (long long)K, (long long)N, worst, tol(K, N));
        /* the worst case above grows with K; random data meets far less (H200: 1.1-1.8e-6 at K up
           to 8192), where operands rounded to f16 meet ~2e-5 */
        if (worst > 0x1p-16) FAILF("%lldx%lldx%lld: %.3g of sum |ab|, past 2^-16: not f32-class", (long long)M, (long long)K, (long long)N, worst);
        free(got);
        free(f32);
        free(A);
        free(B);
    }
}

/* The exact GELU's derivative, Phi(x) + x phi(x), in double */
static double gelu_exact_grad_ref(double x) { return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) * 0.3989422804014327; }

/* v rounded to f16 (to nearest, ties to even; no overflow at these magnitudes): 11
   significant bits, or a multiple of 2^-24 below 2^-14 (subnormal halves) */
static double to_half(float v)
{
    int e;
    if (v == 0.0f) return 0.0;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    double q = ldexp(1.0, e - 11 > -24 ? e - 11 : -24);
    return nearbyint(v / q) * q;
}

/* Under mixed precision, L = sum((gelu_exact(x) @ W) * R) over x [rows, F] (x as halves when
   x_f16, as the GPT's pre-activation is stored; else f32): x's gradient, (R W^T) * gelu'(x), is
   made by the one GEMM of R and W with the GELU's derivative in its epilogue (the first GEMM's
   node is not in the gradient's graph), and it matches the double reference of the halves the
   GEMM reads (R, W and x rounded to f16) within the GEMM's bound plus the f16 rounding of a
   result stored as halves. x spans [-6, 6] (the left tail where 1 + erf cancels). */
static void gelu_gradient_case(wgml_context *ctx, int64_t rows, int64_t F, int64_t N, bool x_f16)
{
    size_t nx = (size_t)(rows * F), nw = (size_t)(F * N), nr = (size_t)(rows * N);
    float *X = malloc(nx * sizeof *X), *W = rand_floats(nw), *R = rand_floats(nr);
    test_fill_uniform(X, nx, -6, 6);
    int64_t xs[2] = {rows, F}, ws[2] = {F, N}, rs[2] = {rows, N};
    wgml_tensor *tx = NULL, *tw = NULL, *tr = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, xs, X, nx, &tx));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, ws, W, nw, &tw));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, rs, R, nr, &tr));
    CHECK_OK(ctx, wgml_requires_grad(tx, 1));
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED));
    wgml_tensor *xin = x_f16 ? wgml_cast(ctx, tx, WGML_F16) : tx;
    wgml_tensor *y = wgml_matmul(ctx, wgml_gelu_exact(ctx, xin), tw);
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, tr));
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_F32));
    /* the gradient's node: the folded GEMM, behind the cast back to f32 when x was halves */
    wgml_tensor *gx = wgml_grad(tx), *m = gx ? wgml_tensor_base(gx) : NULL;
    if (m && m->op == WGML_OP_CAST_F16_TO_F32) m = wgml_tensor_base(m->src[0]);
    if (!m || m->op != WGML_OP_MATMUL || wgml_matmul_params_of(m).act_grad != WGML_ACT_GELU_EXACT)
        FAILF("x's gradient is not the GEMM with the GELU's derivative in its epilogue (op %s)",
              m ? wgml_op_table[m->op]->name : "none");
    bool stored_f16 = m && m->dtype == WGML_F16;
    float *got = test_read_new(ctx, "grad x", gx, rows * F);
    double worst = 0.0;
    for (int64_t i = 0; got && i < rows; i++)
        for (int64_t j = 0; j < F; j++) {
            double du = 0.0, mag = 0.0;
            for (int64_t k = 0; k < N; k++) {
                double p = to_half(R[i * N + k]) * to_half(W[j * N + k]);
                du += p;
                mag += fabs(p);
            }
            double xv = x_f16 ? to_half(X[i * F + j]) : (double)X[i * F + j];
            double d = gelu_exact_grad_ref(xv), ref = du * d;
            /* the GEMM's bound on du, the derivative's f32 error (~1e-6 of its size, at most
               1.13), the result's rounding to f16 where stored as halves */
            double bound = tol(N, F) * mag * fabs(d) + 2e-6 * mag + (stored_f16 ? U16 : 0x1p-23) * fabs(ref);
            double err = fabs(got[i * F + j] - ref);
            if (err / (bound + 1e-30) > worst) worst = err / (bound + 1e-30);
            if (!(err <= bound)) {
                FAILF("[%lldx%lld, N %lld, x %s] dx[%lld,%lld] = %.9g, want %.9g (x %.6g; bound %.3g)", (long long)rows,
                      (long long)F, (long long)N, x_f16 ? "f16" : "f32", (long long)i, (long long)j, got[i * F + j], ref, xv,
                      bound);
                i = rows;
                break;
            }
        }
    fprintf(stderr, "  gelu gradient %lldx%lld N %lld x %s (%s): worst error %.3f of the bound\n", (long long)rows,
            (long long)F, (long long)N, x_f16 ? "f16" : "f32", stored_f16 ? "stored as halves" : "f32", worst);
    free(got), free(X), free(W), free(R);
    wgml_tensor_free(L), wgml_tensor_free(y);
    if (xin != tx) wgml_tensor_free(xin);
    wgml_tensor_free(tx), wgml_tensor_free(tw), wgml_tensor_free(tr);
}

static void gelu_gradient_in_gemm_epilogue(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    gelu_gradient_case(ctx, 37, 130, 47, true);
    gelu_gradient_case(ctx, 53, 29, 18, false);
    if (matrix_units) { /* partial tiles on every edge of the matrix units' GEMM */
        gelu_gradient_case(ctx, 1023, 390, 129, true);
        gelu_gradient_case(ctx, 300, 1540, 384, true);
        /* F a multiple of 8: the results written 8 a lane as halves, X read a run at a time */
        gelu_gradient_case(ctx, 301, 1536, 384, true);
        gelu_gradient_case(ctx, 129, 264, 200, false);
    }
    wgml_clear_error(ctx);
}

/* On the matrix units (where the adapter has them): awkward sizes up to 4097 that leave
   partial tiles on every edge, every form, GELU, split K of A^T.B (a weight's gradient) */
static void matrix_units_large(void)
{
    wgml_context *ctx = test_context();
    if (!has_f16(ctx)) return;
    if (!matrix_units) {
        fprintf(stderr, "  SKIP %s: no f16 -> f32 subgroup matrices on this adapter (Dawn on a GPU has them)\n",
                test_current);
        return;
    }
    const f16_case cases[] = {
        {.M = 1023, .K = 1023, .N = 1023},
        {.M = 1023, .K = 33, .N = 4097},
        {.M = 4097, .K = 1023, .N = 7},
        {.M = 33, .K = 4097, .N = 1023, .tb = 1},
        {.M = 1023, .K = 257, .N = 1023, .ta = 1, .bias = 1, .act = WGML_ACT_GELU},
        {.M = 1023, .K = 130, .N = 4097, .tb = 1, .bias = 1, .act = WGML_ACT_RELU, .alpha = 0.5f},
        {.M = 384, .K = 8192, .N = 130, .ta = 1}, /* split K */
        {.M = 130, .K = 4097, .N = 384, .ta = 1, .tb = 1},
        {.M = 257, .K = 1023, .N = 130, .batch = 3, .batch_b = 1, .ta = 1},
        {.M = 16, .K = 1023, .N = 7, .batch = 5}, /* B shared: one 80-row GEMM */
        /* the step's form of the GPT's projections: a bias with alpha 1 on whole tiles and on
           edges, both forms of B, a batch */
        {.M = 1024, .K = 384, .N = 768, .bias = 1},
        {.M = 1023, .K = 129, .N = 390, .bias = 1},
        {.M = 640, .K = 200, .N = 512, .tb = 1, .bias = 1},
        {.M = 257, .K = 64, .N = 384, .ta = 1, .bias = 1, .batch = 3},
        /* N a multiple of 8 with an activation: results written 8 a lane as vectors, rows cut
           by M's edge, a batch; with alpha and B^T */
        {.M = 1023, .K = 130, .N = 1024, .bias = 1, .act = WGML_ACT_GELU},
        {.M = 300, .K = 96, .N = 392, .tb = 1, .bias = 1, .act = WGML_ACT_RELU, .alpha = -0.75f, .batch = 2},
        /* ... and in two rounds (N up to 768 over 80 tiles or more), B^T's deeper slices */
        {.M = 3500, .K = 96, .N = 768, .tb = 1, .bias = 1, .act = WGML_ACT_GELU},
    };
    for (int i = 0; i < N_OF(cases); i++) run_case(ctx, &cases[i]);
}

int main(void)
{
    TEST_RUN(exact_roundings);
    TEST_RUN(awkward_sizes);
    TEST_RUN(transposes_batches_epilogue);
    TEST_RUN(every_tile_config);
    TEST_RUN(two_leading_dims);
    TEST_RUN(gradients_are_f32);
    TEST_RUN(precision_policy);
    TEST_RUN(unsupported_without_shader_f16);
    TEST_RUN(bad_mode);
    TEST_RUN(residual_in_gemm_epilogue);
    /* the whole of K in f16 */
    f16_mode = WGML_F16_MATH_F16_SUMS;
    TEST_RUN(exact_roundings);
    TEST_RUN(awkward_sizes);
    TEST_RUN(transposes_batches_epilogue);
    TEST_RUN(two_leading_dims);
    /* f32 sums on the matrix units (WGML_RUNTIME=dawn on a GPU), else the f32-sums kernel:
       lavapipe checks the fallback only (the cases above ran that kernel) */
    f16_mode = WGML_F16_MATH_MATRIX;
    wgml_adapter_info info;
    wgml_context *ctx = test_context();
    if (ctx && wgml_adapter_info_get(ctx, &info) == WGML_OK && info.has_subgroup_matrix &&
        info.subgroup_min_size == info.subgroup_max_size)
        for (int k = 0; k < info.subgroup_matrix_count; k++)
            if (!strcmp(info.subgroup_matrix[k].component, "f16") && !strcmp(info.subgroup_matrix[k].result, "f32"))
                matrix_units = true;
    fprintf(stderr, "f16_math = WGML_F16_MATH_MATRIX runs on %s\n",
            matrix_units ? "the matrix units (subgroup matrices)" : "the SIMT f32-sums kernel (no subgroup matrices)");
    TEST_RUN(matrix_fallback_is_simt);
    TEST_RUN(matrix_units_large);
    TEST_RUN(gelu_gradient_in_gemm_epilogue);
    if (matrix_units) {
        TEST_RUN(residual_in_gemm_epilogue);
        TEST_RUN(awkward_sizes);
        TEST_RUN(transposes_batches_epilogue);
        TEST_RUN(two_leading_dims);
    }
    /* f32 operands as hi and lo halves on the matrix units, else the f32 kernels */
    f16_mode = WGML_F16_MATH_MATRIX_SPLIT;
    fprintf(stderr, "f16_math = WGML_F16_MATH_MATRIX_SPLIT runs on %s\n",
            matrix_units ? "the matrix units (hi and lo halves)" : "the f32 kernels (no subgroup matrices)");
    TEST_RUN(bad_mode);
    TEST_RUN(split_maxima_kernel);
    TEST_RUN(split_mode_scales);
    TEST_RUN(split_policy);
    TEST_RUN(split_mode_non_finite);
    TEST_RUN(awkward_sizes);
    TEST_RUN(transposes_batches_epilogue);
    TEST_RUN(residual_in_gemm_epilogue);
    TEST_RUN(two_leading_dims);
    return test_summary();
}
