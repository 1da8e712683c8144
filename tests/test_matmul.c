/* Matmul against wgml_ref_matmul: awkward sizes, every transpose (flags and transposed
   views, read without a copy), batches, the epilogue (alpha, bias, activations), strided
   operands, errors; and the cached-matmul API, including its split-binding path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "ref/ref.h"
#include "ops/matmul/matmul.h"
#include "engine/tuning.h"
#include "harness.h"

static wgml_stats stats(wgml_context *ctx)
{
    wgml_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ctx, wgml_stats_get(ctx, &s));
    return s;
}

static float *rand_floats(size_t n, double lo, double hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    test_fill_uniform(x, n, lo, hi);
    return x;
}

/* The floor for matmul results, and why: with inputs uniform in [-1, 1] an output is a sum of
   K products of variance 1/9, so its typical magnitude is sqrt(K)/3 (times |alpha|). f32
   accumulation leaves an absolute error of roughly sqrt(K) * 2^-24 * that magnitude (about
   3e-6 at K = 130); a result that happens to be near zero has no meaningful relative error,
   so results below the typical magnitude are held to 1e-5 of it in absolute terms. */
static double mm_floor(int64_t K, double alpha)
{
    double a = fabs(alpha) > 1 ? fabs(alpha) : 1;
    return sqrt((double)K / 9.0) * a;
}

#define MM_TOL 1e-5

typedef struct mm_case {
    int64_t batch_a, batch_b; /* 0: a 2-D operand */
    int64_t M, K, N;
    int ta, tb;         /* the trans flags passed to wgml_matmul_ex */
    int view_a, view_b; /* pass the operand as wgml_transpose of a contiguous matrix */
    float alpha;        /* 0: the default (1) */
    int bias;
    wgml_activation act;
    int residual; /* 1: the result + R read (wgml_add(result, R)), 2: wgml_add(R, result); one launch either way */
} mm_case;

static const char *act_name[] = {"none", "relu", "gelu", "silu", "gelu_exact"};

/* Runs one case; returns 1 if it matched the reference. */
static int run_case(wgml_context *ctx, const mm_case *c)
{
    int64_t M = c->M, K = c->K, N = c->N;
    int64_t ba = c->batch_a ? c->batch_a : 1, bb = c->batch_b ? c->batch_b : 1;
    int64_t batch = ba > bb ? ba : bb;
    /* the operand passed is P (shape ta ? [K,M] : [M,K]); stored as S = P, or S = P^T for
       a view. The logical A is op(P). */
    int64_t pa_r = c->ta ? K : M, pa_c = c->ta ? M : K;
    int64_t pb_r = c->tb ? N : K, pb_c = c->tb ? K : N;
    int64_t sa_r = c->view_a ? pa_c : pa_r, sa_c = c->view_a ? pa_r : pa_c;
    int64_t sb_r = c->view_b ? pb_c : pb_r, sb_c = c->view_b ? pb_r : pb_c;
    size_t na = (size_t)(ba * M * K), nb = (size_t)(bb * K * N), nc = (size_t)(batch * M * N);
    float *A = rand_floats(na, -1, 1), *B = rand_floats(nb, -1, 1), *bias = rand_floats((size_t)N, -1, 1);
    double *want = malloc(nc * sizeof *want);
    /* the reference reads the stored S: logical A = S if (view xor not ta)... */
    int ref_ta = c->view_a ? !c->ta : c->ta, ref_tb = c->view_b ? !c->tb : c->tb;
    double alpha = c->alpha == 0.0f ? 1.0 : c->alpha;
    test_ref_matmul(batch, M, N, K, A, ba, ref_ta, B, bb, ref_tb, alpha, c->bias ? bias : NULL, (int)c->act, want);
    float *R = rand_floats(nc, -1, 1);
    if (c->residual)
        for (size_t i = 0; i < nc; i++) want[i] += R[i];

    int64_t sha[3] = {ba, sa_r, sa_c}, shb[3] = {bb, sb_r, sb_c};
    wgml_tensor *ta = NULL, *tb = NULL, *tbias = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, c->batch_a ? 3 : 2, c->batch_a ? sha : sha + 1, A, na, &ta));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, c->batch_b ? 3 : 2, c->batch_b ? shb : shb + 1, B, nb, &tb));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &N, bias, (size_t)N, &tbias));
    wgml_tensor *pa = c->view_a ? wgml_transpose(ctx, ta, -1, -2) : ta;
    wgml_tensor *pb = c->view_b ? wgml_transpose(ctx, tb, -1, -2) : tb;
    wgml_matmul_desc d = {.trans_a = c->ta, .trans_b = c->tb, .alpha = c->alpha,
                          .bias = c->bias ? tbias : NULL, .activation = c->act};
    int64_t shc[3] = {batch, M, N};
    int ndc = (c->batch_a || c->batch_b) ? 3 : 2;
    wgml_tensor *tR = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, ndc, ndc == 3 ? shc : shc + 1, R, nc, &tR));
    wgml_stats s0 = stats(ctx);
    wgml_tensor *r = wgml_matmul_ex(ctx, pa, pb, &d), *mm = NULL;
    if (c->residual) { /* the add folds into the GEMM's epilogue: r is a new GEMM node, mm (unread) never runs */
        mm = r;
        r = c->residual == 1 ? wgml_add(ctx, mm, tR) : wgml_add(ctx, tR, mm);
    }
    int ok = wgml_tensor_status(r) == WGML_OK;
    int nd = (c->batch_a || c->batch_b) ? 3 : 2;
    ok &= wgml_tensor_ndim(r) == nd;
    if (nd == 3) ok &= wgml_tensor_dim(r, 0) == batch;
    ok &= wgml_tensor_dim(r, -2) == M && wgml_tensor_dim(r, -1) == N;
    float *got = malloc(nc * sizeof *got);
    wgml_status st = wgml_tensor_read(r, got, nc);
    wgml_stats s1 = stats(ctx);
    char what[200];
    snprintf(what, sizeof what,
             "matmul A%s%s [%lld x] B%s%s [%lld x] M=%lld K=%lld N=%lld alpha=%g bias=%d act=%s%s",
             c->ta ? "^T" : "", c->view_a ? "(view)" : "", (long long)c->batch_a, c->tb ? "^T" : "",
             c->view_b ? "(view)" : "", (long long)c->batch_b, (long long)M, (long long)K, (long long)N,
             (double)alpha, c->bias, act_name[c->act], c->residual ? " + R" : "");
    if (st != WGML_OK) {
        fprintf(stderr, "  %s: read gave %s: %s\n", what, wgml_status_name(st), wgml_error_message(ctx));
        ok = 0;
    } else {
        if (!test_close(what, got, want, nc, MM_TOL, mm_floor(K, alpha))) ok = 0;
    }
    /* transposed views of contiguous matrices are read through strides: one dispatch, no copy */
    if (s1.dispatches - s0.dispatches != 1) {
        fprintf(stderr, "  %s: %llu dispatches, want 1 (no copy)\n", what,
                (unsigned long long)(s1.dispatches - s0.dispatches));
        ok = 0;
    }
    wgml_tensor_free(r);
    wgml_tensor_free(mm);
    wgml_tensor_free(tR);
    free(R);
    if (pa != ta) wgml_tensor_free(pa);
    if (pb != tb) wgml_tensor_free(pb);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    wgml_tensor_free(tbias);
    free(A);
    free(B);
    free(bias);
    free(want);
    free(got);
    return ok;
}

/* ---------------------------------------------------------------- the op */

static void sizes_and_transposes(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t Ms[] = {1, 2, 3, 4, 5, 17, 64, 127, 128, 129};
    const int64_t KN[] = {1, 3, 7, 13, 33, 65, 130};
    int failed = 0, ran = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (int ki = 0; ki < 7; ki++)
            for (int j = 0; j < 3; j++) {
                int64_t K = KN[ki], N = KN[(ki + 2 * j + (int)mi) % 7];
                /* the four trans combinations, by flags; and the same through views */
                for (int mode = 0; mode < 8; mode++) {
                    mm_case c = {.M = Ms[mi], .K = K, .N = N, .ta = mode & 1, .tb = (mode >> 1) & 1,
                                 .view_a = (mode >> 2) & 1, .view_b = (mode >> 2) & 1};
                    ran++;
                    if (!run_case(ctx, &c)) failed++;
                }
            }
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0);
}

/* K and N multiples of 4: the kernels' vec4 paths (vec4 loads of A when K % 4 == 0, or of A^T
   when M % 4 == 0; of B when N % 4 == 0, or of B^T when K % 4 == 0), and K long enough for
   several K-slices and GEMV's unrolled loop. */
static void aligned_sizes(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t Ms[] = {1, 4, 5, 64, 129, 132};
    const int64_t KN[] = {4, 8, 68, 132, 516};
    int failed = 0, ran = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (int ki = 0; ki < 5; ki++)
            for (int j = 0; j < 2; j++) {
                int64_t K = KN[ki], N = KN[(ki + 2 * j + (int)mi) % 5];
                for (int mode = 0; mode < 4; mode++) {
                    mm_case c = {.M = Ms[mi], .K = K, .N = N, .ta = mode & 1, .tb = (mode >> 1) & 1};
                    ran++;
                    if (!run_case(ctx, &c)) failed++;
                }
            }
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0);
}

/* A context of its own for a setting of the benchmark knobs: a context reads them once, at
   its first kernel choice (engine/tuning.h), so the variable must stay set until then. */
static wgml_context *knob_context(void)
{
    wgml_context *c = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &c));
    return c;
}

/* Every tile config the generator can emit (the defaults pick by shape and adapter; the
   benchmark sweeps force them with WGML_GEMM_TILE / WGML_GEMM_WARP), on a few awkward and
   aligned shapes with every transpose. */
static void every_tile_config(void)
{
    /* tm,tn,bk,stages (3: two buffers, no register prefetch; 4: one buffer with register
       prefetch) and the warp layout */
    const char *configs[][2] = {{"8,8,16,1", "16x2"}, {"8,8,16,3", "8x4"}, {"4,8,4,1", "16x2"}, {"8,4,32,2", "8x4"},
                                {"8,8,16,4", "16x2"}, {"16,8,8,1", "16x2"}, {"8,16,8,4", "8x4"}, {"8,8,8,4", "16x2"}};
    const int64_t dims[][3] = {{65, 33, 130}, {132, 68, 132}};
    int failed = 0, ran = 0;
    setenv("WGML_GEMM_CPU", "0", 1); /* the tiled kernels, on a CPU adapter too */
    for (size_t t = 0; t < sizeof configs / sizeof configs[0]; t++) {
        setenv("WGML_GEMM_TILE", configs[t][0], 1);
        setenv("WGML_GEMM_WARP", configs[t][1], 1);
        wgml_context *ctx = knob_context();
        if (!ctx) break;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int mode = 0; mode < 4; mode++) {
                mm_case c = {.M = dims[d][0], .K = dims[d][1], .N = dims[d][2], .ta = mode & 1, .tb = (mode >> 1) & 1};
                ran++;
                if (!run_case(ctx, &c)) {
                    fprintf(stderr, "  (tile %s, warp %s)\n", configs[t][0], configs[t][1]);
                    failed++;
                }
            }
        wgml_context_free(ctx);
    }
    unsetenv("WGML_GEMM_TILE");
    unsetenv("WGML_GEMM_WARP");
    unsetenv("WGML_GEMM_CPU");
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0 && ran > 0);
}

/* The CPU GEMM (wgml_gemm_cpu_source) forced in several shapes (rows, columns and lanes per
   invocation), with subgroups and without: K around its steps (32 k with vec4s of A, 8
   without, 4, 1), rows and columns past the workgroup's tile, every transpose, aligned or not,
   the epilogue, a batch with a broadcast operand. */
static void cpu_gemm_shapes(void)
{
    const char *shapes[][2] = {{"32,4,16", "1"}, {"32,4,16", "0"}, {"4,8,16", "1"}};
    const int64_t dims[][3] = {{33, 31, 65}, {64, 32, 64}, {40, 67, 36}, {17, 129, 130}, {3, 70, 8}};
    int failed = 0, ran = 0;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        setenv("WGML_GEMM_CPU", shapes[t][0], 1);
        setenv("WGML_GEMM_CPU_SUBGROUPS", shapes[t][1], 1);
        wgml_context *ctx = knob_context();
        if (!ctx) break;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int mode = 0; mode < 6; mode++) {
                mm_case c = {.M = dims[d][0], .K = dims[d][1], .N = dims[d][2], .ta = mode & 1, .tb = (mode >> 1) & 1};
                if (mode == 4) c.alpha = 0.5f, c.bias = 1, c.act = WGML_ACT_GELU, c.ta = 1;
                if (mode == 5) c.batch_a = 3, c.batch_b = 0, c.tb = 1, c.bias = 1, c.act = WGML_ACT_SILU;
                ran++;
                if (!run_case(ctx, &c)) {
                    fprintf(stderr, "  (CPU GEMM %s, subgroups %s)\n", shapes[t][0], shapes[t][1]);
                    failed++;
                }
            }
        wgml_context_free(ctx);
    }
    unsetenv("WGML_GEMM_CPU");
    unsetenv("WGML_GEMM_CPU_SUBGROUPS");
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0 && ran > 0);
}


/* The opt-in GEMV whose partial sums meet by subgroup shuffles (WGML_SUBGROUPS=1), with each
   workgroup width, on lengths that leave partial slices, with bias and activation. */
static void gemv_subgroup_variant(void)
{
    wgml_context *ctx = NULL;
    setenv("WGML_SUBGROUPS", "1", 1);
    int failed = 0, ran = 0;
    ctx = test_context();
    wgml_adapter_info info;
    if (ctx && wgml_adapter_info_get(ctx, &info) == WGML_OK && !info.has_subgroups) {
        fprintf(stderr, "  (adapter has no subgroups: skipped)\n");
        unsetenv("WGML_SUBGROUPS");
        return;
    }
    const char *cols[] = {"16", "32", "64"};
    const int64_t KN[][2] = {{1, 1}, {7, 5}, {1023, 67}, {4096, 1536}, {130, 4100}};
    for (int w = 0; ctx && w < 3; w++) {
        setenv("WGML_GEMV_COLS", cols[w], 1);
        wgml_context *kctx = knob_context();
        if (!kctx) break;
        /* the subgroup reduction is the GEMV kernel's: aligned M = 1 too goes there */
        wgml_gemm_args g1 = {.M = 1, .N = 1536, .K = 4096, .batch = 1, .lda = 4096, .ldb = 1536};
        CHECK(wgml_gemm_choose(kctx, &g1).gemv_rows == 0 && wgml_gemm_choose(kctx, &g1).gemv_subgroups);
        for (size_t i = 0; i < sizeof KN / sizeof KN[0]; i++) {
            mm_case c = {.M = 1, .K = KN[i][0], .N = KN[i][1], .bias = (int)(i % 2), .act = (wgml_activation)(i % 4)};
            ran++;
            if (!run_case(kctx, &c)) {
                fprintf(stderr, "  (subgroup GEMV, %s columns per workgroup)\n", cols[w]);
                failed++;
            }
        }
        wgml_context_free(kctx);
    }
    unsetenv("WGML_GEMV_COLS");
    unsetenv("WGML_SUBGROUPS");
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0 && ran > 0);
}

/* The small-M GEMV (2 <= M <= 16, rows rounded up to a power of two and masked): every row
   count class, K with and without an odd tail, batched, with alpha, bias and activation, at
   each workgroup width. */
static void small_m_gemv(void)
{
    const char *cols[] = {"16", "32", "64"};
    const int64_t Ms[] = {2, 3, 9, 16}, Ks[] = {1, 31, 1023}, Ns[] = {5, 67, 1536};
    int failed = 0, ran = 0;
    setenv("WGML_GEMM_CPU", "0", 1); /* a CPU adapter takes the CPU GEMM for these: not here */
    for (int w = 0; w < 3; w++) {
        setenv("WGML_GEMV_COLS", cols[w], 1);
        wgml_context *ctx = knob_context();
        if (!ctx) break;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++) {
                mm_case c = {.M = Ms[i], .K = Ks[j], .N = Ns[(i + j + w) % 3], .bias = (i + j) % 2,
                             .act = (wgml_activation)((i + w) % 4), .alpha = j == 1 ? 0.5f : 0.0f,
                             .batch_a = i == 2 ? 2 : 0, .batch_b = i == 2 ? 2 : 0};
                ran++;
                if (!run_case(ctx, &c)) {
                    fprintf(stderr, "  (small-M GEMV, %s columns per workgroup)\n", cols[w]);
                    failed++;
                }
            }
        wgml_context_free(ctx);
    }
    unsetenv("WGML_GEMV_COLS");
    unsetenv("WGML_GEMM_CPU");
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0 && ran > 0);
}

static void views_and_flags_mixed(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* a view on one side only, and a view combined with the flag (a double transpose) */
    const int64_t dims[][3] = {{1, 33, 65}, {3, 7, 13}, {17, 130, 5}, {64, 13, 33}, {129, 65, 7}};
    int failed = 0;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (int mode = 0; mode < 16; mode++) {
            mm_case c = {.M = dims[k][0], .K = dims[k][1], .N = dims[k][2], .ta = mode & 1, .tb = (mode >> 1) & 1,
                         .view_a = (mode >> 2) & 1, .view_b = (mode >> 3) & 1};
            if (!run_case(ctx, &c)) failed++;
        }
    CHECK(failed == 0);
}

static void tall_and_thin(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t kn[][2] = {{3, 7}, {13, 5}, {1, 1}, {7, 65}};
    for (size_t k = 0; k < sizeof kn / sizeof kn[0]; k++)
        for (int mode = 0; mode < 4; mode++) {
            mm_case c = {.M = 1000, .K = kn[k][0], .N = kn[k][1], .ta = mode & 1, .tb = mode >> 1};
            CHECK(run_case(ctx, &c));
        }
}

static void batched(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t dims[][3] = {{1, 13, 7}, {5, 7, 13}, {17, 33, 3}, {64, 65, 33}, {129, 3, 130}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (int mode = 0; mode < 8; mode++) {
            int ta = mode & 1, tb = (mode >> 1) & 1, view = mode >> 2;
            mm_case c = {.M = dims[k][0], .K = dims[k][1], .N = dims[k][2], .ta = ta, .tb = tb,
                         .view_a = view, .view_b = view};
            /* both batched */
            c.batch_a = 3, c.batch_b = 3;
            CHECK(run_case(ctx, &c));
            /* a 2-D B broadcast over A's batch */
            c.batch_a = 3, c.batch_b = 0;
            CHECK(run_case(ctx, &c));
            /* a 2-D A broadcast over B's batch, and a batch of one against three */
            c.batch_a = 0, c.batch_b = 2;
            CHECK(run_case(ctx, &c));
            c.batch_a = 1, c.batch_b = 3;
            CHECK(run_case(ctx, &c));
        }
}

static void epilogue(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t dims[][3] = {{1, 130, 65}, {3, 33, 7}, {17, 13, 130}, {64, 65, 33}, {129, 7, 13}};
    const float alphas[] = {0.0f, 1.0f, 0.5f, -2.0f};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (int act = 0; act <= WGML_ACT_GELU_EXACT; act++)
            for (int bias = 0; bias <= 1; bias++)
                for (int ai = 0; ai < 4; ai++) {
                    mm_case c = {.M = dims[k][0], .K = dims[k][1], .N = dims[k][2], .alpha = alphas[ai],
                                 .bias = bias, .act = (wgml_activation)act, .tb = (int)(k & 1), .ta = ai == 3};
                    CHECK(run_case(ctx, &c));
                }
    /* batched with the epilogue */
    mm_case c = {.batch_a = 2, .batch_b = 2, .M = 17, .K = 33, .N = 13, .alpha = 0.75f, .bias = 1, .act = WGML_ACT_GELU};
    CHECK(run_case(ctx, &c));
    c.batch_b = 0;
    c.act = WGML_ACT_SILU;
    CHECK(run_case(ctx, &c));
}

/* A GEMM's result plus a tensor of its shape (a residual stream's add) runs as one launch, the
   add in the epilogue after alpha, bias and activation: every path (tiles, GEMV, small-M GEMV,
   batches, transposes) against the double reference. Where the GEMM's own result is read too,
   both values are right. Its gradient passes the sum's on to the residual. */
static void residual_epilogue(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t dims[][3] = {{1, 130, 65}, {3, 33, 7}, {7, 1023, 9}, {64, 65, 33}, {129, 7, 13}, {33, 384, 2}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (int v = 0; v < 4; v++) {
            mm_case c = {.M = dims[k][0], .K = dims[k][1], .N = dims[k][2], .alpha = v == 3 ? -0.5f : 0.0f, .bias = v & 1,
                         .act = v == 2 ? WGML_ACT_GELU_EXACT : WGML_ACT_NONE, .tb = (int)(k & 1), .ta = v == 3,
                         .residual = 1 + (v & 1)};
            CHECK(run_case(ctx, &c));
        }
    mm_case c = {.batch_a = 2, .batch_b = 2, .M = 17, .K = 33, .N = 13, .alpha = 0.75f, .bias = 1, .act = WGML_ACT_RELU, .residual = 1};
    CHECK(run_case(ctx, &c));
    c.batch_b = 0;
    c.residual = 2;
    CHECK(run_case(ctx, &c));

    /* a GEMM that splits K (few tiles, a long K) keeps its split: the add stays a launch of its own */
    {
        int64_t sm[2] = {64, 4096}, sk[2] = {4096, 64}, sn[2] = {64, 64};
        float *a = rand_floats(64 * 4096, -1, 1), *b = rand_floats(4096 * 64, -1, 1), *q = rand_floats(64 * 64, -1, 1);
        double *want = malloc(64 * 64 * sizeof *want);
        test_ref_matmul(1, 64, 64, 4096, a, 1, 0, b, 1, 0, 1.0, NULL, 0, want);
        for (int i = 0; i < 64 * 64; i++) want[i] += q[i];
        wgml_scope_begin(ctx);
        wgml_tensor *sum = wgml_add(ctx, wgml_matmul(ctx, test_tensor(ctx, 2, sm, a), test_tensor(ctx, 2, sk, b)), test_tensor(ctx, 2, sn, q));
        wgml_stats s0 = stats(ctx);
        float *got = test_read_new(ctx, "split K + r", sum, 64 * 64);
        wgml_stats s1 = stats(ctx);
        if (got) CHECK(test_close("split K + r", got, want, 64 * 64, MM_TOL, mm_floor(4096, 1)));
        if (s1.dispatches - s0.dispatches != 3)
            FAILF("split K + r: %llu dispatches, want 3 (the chunks, their sum, the add)", (unsigned long long)(s1.dispatches - s0.dispatches));
        free(got);
        wgml_scope_end(ctx);
        free(a), free(b), free(q), free(want);
    }
    /* y = x W + r and also 2 (x W), read; L = sum(G * (y + x W)): dr = G, dx = 2 G W^T */
    int64_t M = 7, K = 33, N = 9, sx[2] = {M, K}, sw[2] = {K, N}, sy[2] = {M, N};
    float *x = rand_floats((size_t)(M * K), -1, 1), *w = rand_floats((size_t)(K * N), -1, 1), *rr = rand_floats((size_t)(M * N), -1, 1),
          *G = rand_floats((size_t)(M * N), -1, 1);
    wgml_scope_begin(ctx);
    wgml_tensor *tx = test_tensor(ctx, 2, sx, x), *tw = test_tensor(ctx, 2, sw, w), *tr = test_tensor(ctx, 2, sy, rr),
                *tG = test_tensor(ctx, 2, sy, G);
    CHECK_OK(ctx, wgml_requires_grad(tx, 1));
    CHECK_OK(ctx, wgml_requires_grad(tr, 1));
    wgml_tensor *xw = wgml_matmul(ctx, tx, tw), *y = wgml_add(ctx, xw, tr), *twice = wgml_binary_scalar(ctx, WGML_MUL, xw, 2.0f);
    float *gy = test_read_new(ctx, "x W + r", y, M * N), *g2 = test_read_new(ctx, "2 x W", twice, M * N);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, tG, wgml_add(ctx, y, xw)))));
    float *dr = test_read_new(ctx, "dr", wgml_grad(tr), M * N), *dx = test_read_new(ctx, "dx", wgml_grad(tx), M * K);
    double *want_y = malloc((size_t)(M * N) * sizeof *want_y), *want_2 = malloc((size_t)(M * N) * sizeof *want_2),
           *want_dr = malloc((size_t)(M * N) * sizeof *want_dr), *want_dx = malloc((size_t)(M * K) * sizeof *want_dx);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)x[m * K + k] * w[k * N + n];
            want_y[m * N + n] = s + rr[m * N + n], want_2[m * N + n] = 2 * s, want_dr[m * N + n] = G[m * N + n];
        }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++) s += 2.0 * G[m * N + n] * w[k * N + n];
            want_dx[m * K + k] = s;
        }
    if (gy) CHECK(test_close("x W + r", gy, want_y, (size_t)(M * N), MM_TOL, mm_floor(K, 1)));
    if (g2) CHECK(test_close("2 x W, the GEMM's own result read too", g2, want_2, (size_t)(M * N), MM_TOL, mm_floor(K, 2)));
    if (dr) CHECK(test_close("dr", dr, want_dr, (size_t)(M * N), MM_TOL, 1));
    if (dx) CHECK(test_close("dx", dx, want_dx, (size_t)(M * K), MM_TOL, mm_floor(N, 2)));
    CHECK(gy && g2 && dr && dx);
    free(gy), free(g2), free(dr), free(dx), free(want_y), free(want_2), free(want_dr), free(want_dx);
    wgml_scope_end(ctx);
    free(x), free(w), free(rr), free(G);
}

/* Operands that are views with row strides other than their width, offsets, and a row of a
   transposed matrix; also views the kernel cannot read through strides (copied first). */
static void strided_operands(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t Ms[] = {1, 3, 17, 64};
    for (size_t mi = 0; mi < 4; mi++) {
        int64_t M = Ms[mi], K = 33, N = 13;
        /* A = rows 1, 3, 5, ... of a [2M+1, K+5] matrix, columns 2..K+1 */
        int64_t wa[2] = {2 * M + 1, K + 5}, wb[2] = {K, 2 * N + 3};
        float *Abig = rand_floats((size_t)(wa[0] * wa[1]), -1, 1), *Bbig = rand_floats((size_t)(wb[0] * wb[1]), -1, 1);
        float *A = malloc((size_t)(M * K) * 4), *B = malloc((size_t)(K * N) * 4);
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < K; k++) A[i * K + k] = Abig[(2 * i + 1) * wa[1] + 2 + k];
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) B[k * N + j] = Bbig[k * wb[1] + 3 + j];
        double *want = malloc((size_t)(M * N) * sizeof *want);
        test_ref_matmul(1, M, N, K, A, 1, 0, B, 1, 0, 1.0, NULL, 0, want);
        wgml_tensor *ta = NULL, *tb = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, wa, Abig, (size_t)(wa[0] * wa[1]), &ta));
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, wb, Bbig, (size_t)(wb[0] * wb[1]), &tb));
        wgml_tensor *va = wgml_slice(ctx, wgml_slice(ctx, ta, 0, 1, 2 * M + 1, 2), 1, 2, K + 2, 1);
        wgml_tensor *vb = wgml_slice(ctx, tb, 1, 3, N + 3, 1);
        wgml_tensor *r = wgml_matmul(ctx, va, vb);
        float *got = malloc((size_t)(M * N) * 4);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)(M * N)));
        char what[96];
        snprintf(what, sizeof what, "strided rows/columns M=%lld", (long long)M);
        CHECK(test_close(what, got, want, (size_t)(M * N), MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        /* the same through trans flags on transposed strided views */
        wgml_matmul_desc d = {.trans_a = 1, .trans_b = 1};
        r = wgml_matmul_ex(ctx, wgml_transpose(ctx, va, 0, 1), wgml_transpose(ctx, vb, 0, 1), &d);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)(M * N)));
        snprintf(what, sizeof what, "strided, transposed twice M=%lld", (long long)M);
        CHECK(test_close(what, got, want, (size_t)(M * N), MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        /* columns with a step: not readable through strides, copied first */
        wgml_tensor *vc = wgml_slice(ctx, tb, 1, 0, 2 * N, 2); /* [K, N] with column stride 2 */
        float *C = malloc((size_t)(K * N) * 4);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) C[k * N + j] = Bbig[k * wb[1] + 2 * j];
        test_ref_matmul(1, M, N, K, A, 1, 0, C, 1, 0, 1.0, NULL, 0, want);
        r = wgml_matmul(ctx, va, vc);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)(M * N)));
        snprintf(what, sizeof what, "column-step operand M=%lld", (long long)M);
        CHECK(test_close(what, got, want, (size_t)(M * N), MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        wgml_tensor_free(vc);
        wgml_tensor_free(va);
        wgml_tensor_free(vb);
        wgml_tensor_free(ta);
        wgml_tensor_free(tb);
        free(Abig);
        free(Bbig);
        free(A);
        free(B);
        free(C);
        free(want);
        free(got);
    }
}

/* A one-row A that is a strided view: a row of a transposed matrix, and a column of a matrix
   under trans_a. M = 1 takes the GEMV kernel. */
static void one_row_strided_views(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t Ns[] = {7, 65};
    for (int ni = 0; ni < 2; ni++) {
        int64_t K = 33, N = Ns[ni], W = 7;
        float *X = rand_floats((size_t)(K * W), -1, 1), *B = rand_floats((size_t)(K * N), -1, 1);
        float a[33];
        for (int64_t k = 0; k < K; k++) a[k] = X[k * W + 2]; /* column 2 of X [K, W] */
        double want[65];
        test_ref_matmul(1, 1, N, K, a, 1, 0, B, 1, 0, 1.0, NULL, 0, want);
        wgml_tensor *tx = NULL, *tbm = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){K, W}, X, (size_t)(K * W), &tx));
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){K, N}, B, (size_t)(K * N), &tbm));
        float got[65];
        /* row 2 of X^T: a [1, K] view with strides (1, W) */
        wgml_tensor *row = wgml_slice(ctx, wgml_transpose(ctx, tx, 0, 1), 0, 2, 3, 1);
        wgml_tensor *r = wgml_matmul(ctx, row, tbm);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)N));
        CHECK(test_close("matmul(row of a transposed matrix, B)", got, want, (size_t)N, MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        /* column 2 of X, [K, 1] with strides (W, 1), under trans_a */
        wgml_tensor *col = wgml_slice(ctx, tx, 1, 2, 3, 1);
        wgml_matmul_desc d = {.trans_a = 1};
        r = wgml_matmul_ex(ctx, col, tbm, &d);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)N));
        CHECK(test_close("matmul(column^T, B)", got, want, (size_t)N, MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        /* the same with B transposed (the other GEMV kernel) */
        wgml_tensor *bt = wgml_contiguous(ctx, wgml_transpose(ctx, tbm, 0, 1)); /* [N, K] */
        wgml_matmul_desc d2 = {.trans_a = 1, .trans_b = 1};
        r = wgml_matmul_ex(ctx, col, bt, &d2);
        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)N));
        CHECK(test_close("matmul(column^T, B^T)", got, want, (size_t)N, MM_TOL, mm_floor(K, 1)));
        wgml_tensor_free(r);
        wgml_tensor_free(bt);
        wgml_tensor_free(col);
        wgml_tensor_free(row);
        wgml_tensor_free(tx);
        wgml_tensor_free(tbm);
        free(X);
        free(B);
    }
}

/* matmul of lazy inputs and as the input of other ops, in one graph */
static void matmul_in_a_graph(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t M = 17, K = 13, N = 33;
    float *A = rand_floats((size_t)(M * K), -1, 1), *B = rand_floats((size_t)(K * N), -1, 1);
    float *A2 = malloc((size_t)(M * K) * 4);
    for (int64_t i = 0; i < M * K; i++) A2[i] = (float)tanh((double)A[i]);
    /* the GPU's tanh of A differs from this one by ~1e-7 relative: within the tolerance */
    double *want = malloc((size_t)(M * N) * sizeof *want);
    test_ref_matmul(1, M, N, K, A2, 1, 0, B, 1, 0, 1.0, NULL, 0, want);
    for (int64_t i = 0; i < M * N; i++) want[i] = want[i] * 2.0;
    wgml_tensor *ta = NULL, *tb = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){M, K}, A, (size_t)(M * K), &ta));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){K, N}, B, (size_t)(K * N), &tb));
    wgml_tensor *r = wgml_binary_scalar(ctx, WGML_MUL, wgml_matmul(ctx, wgml_tanh(ctx, ta), tb), 2.0f);
    float *got = malloc((size_t)(M * N) * 4);
    CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)(M * N)));
    CHECK(test_close("2 * matmul(tanh(A), B)", got, want, (size_t)(M * N), 1e-4, 2 * mm_floor(K, 1)));
    wgml_tensor_free(r);
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    free(A);
    free(A2);
    free(B);
    free(want);
    free(got);
}

static void errors(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[64];
    test_fill_uniform(x, 64, -1, 1);
    wgml_tensor *a34 = NULL, *b56 = NULL, *b45 = NULL, *v4 = NULL, *bias6 = NULL, *bias55 = NULL, *a234 = NULL,
                *b345 = NULL, *q = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){3, 4}, x, 12, &a34));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){5, 6}, x, 30, &b56));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){4, 5}, x, 20, &b45));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, (int64_t[]){4}, x, 4, &v4));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, (int64_t[]){6}, x, 6, &bias6));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, (int64_t[]){5, 5}, x, 25, &bias55));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 3, (int64_t[]){2, 3, 4}, x, 24, &a234));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 3, (int64_t[]){3, 4, 5}, x, 60, &b345));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 4, (int64_t[]){1, 1, 3, 4}, x, 12, &q));
    float out[64];

    /* K mismatch: SHAPE, naming both shapes */
    wgml_tensor *e = wgml_matmul(ctx, a34, b56);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    CHECK(test_message_has(ctx, "[3, 4]") && test_message_has(ctx, "[5, 6]"));
    CHECK_STATUS(ctx, wgml_tensor_read(e, out, (size_t)wgml_tensor_numel(e)), WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    /* the flags count: a34^T is [4, 3], which does not fit b45 */
    wgml_matmul_desc d = {.trans_a = 1};
    e = wgml_matmul_ex(ctx, a34, b45, &d);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[3, 4]") && test_message_has(ctx, "[4, 5]"));
    wgml_tensor_free(e);
    /* 1-D operands (4-D ones batch: tests/test_matmul_batched.c) */
    e = wgml_matmul(ctx, v4, b45);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[4]"));
    wgml_tensor_free(e);
    e = wgml_matmul(ctx, a34, v4);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    e = wgml_matmul(ctx, q, b45);
    CHECK(wgml_tensor_status(e) == WGML_OK && wgml_tensor_ndim(e) == 4 && wgml_tensor_dim(e, -1) == 5);
    wgml_tensor_free(e);
    /* batch mismatch */
    e = wgml_matmul(ctx, a234, b345);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3, 4]") && test_message_has(ctx, "[3, 4, 5]"));
    wgml_tensor_free(e);
    /* bad bias: wrong length, 2-D */
    wgml_matmul_desc db = {.bias = bias6};
    e = wgml_matmul_ex(ctx, a34, b45, &db);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[6]"));
    wgml_tensor_free(e);
    db.bias = bias55;
    e = wgml_matmul_ex(ctx, a34, b45, &db);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[5, 5]"));
    wgml_tensor_free(e);
    /* unknown activation, NULL operands, error operands */
    wgml_matmul_desc da = {.activation = (wgml_activation)9};
    e = wgml_matmul_ex(ctx, a34, b45, &da);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_matmul(ctx, NULL, b45);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_matmul(ctx, a34, NULL);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    CHECK(wgml_matmul(NULL, a34, b45) == NULL);
    wgml_tensor *bad = wgml_add(ctx, a34, b45);
    e = wgml_matmul(ctx, bad, b45);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    wgml_tensor_free(bad);
    /* the good product still works */
    e = wgml_matmul(ctx, a34, b45);
    double want[15];
    test_ref_matmul(1, 3, 5, 4, x, 1, 0, x, 1, 0, 1.0, NULL, 0, want);
    CHECK_OK(ctx, wgml_tensor_read(e, out, 15));
    CHECK(test_close("3x4 by 4x5 after errors", out, want, 15, MM_TOL, mm_floor(4, 1)));
    wgml_tensor_free(e);
    wgml_tensor *all[9] = {a34, b56, b45, v4, bias6, bias55, a234, b345, q};
    for (int i = 0; i < 9; i++) wgml_tensor_free(all[i]);
}

/* ---------------------------------------------------------------- the cached API */

/* one call vs the reference; with `repeat`, the same input once more must give the same bits */
static int cached_matches(wgml_context *ctx, const char *name, const float *W, int64_t K, int64_t N, int64_t m,
                          int repeat)
{
    float *in = rand_floats((size_t)(m * K), -1, 1), *out = malloc((size_t)(m * N) * 4);
    double *want = malloc((size_t)(m * N) * sizeof *want);
    test_ref_matmul(1, m, N, K, in, 1, 0, W, 1, 0, 1.0, NULL, 0, want);
    wgml_status st = wgml_matmul_cached(ctx, name, in, (size_t)(m * K), out, (size_t)(m * N), m);
    int ok = st == WGML_OK;
    char what[96];
    snprintf(what, sizeof what, "cached '%s' [%lld x %lld] m=%lld", name, (long long)K, (long long)N, (long long)m);
    if (!ok) fprintf(stderr, "  %s: %s: %s\n", what, wgml_status_name(st), wgml_error_message(ctx));
    else ok = test_close(what, out, want, (size_t)(m * N), MM_TOL, mm_floor(K, 1));
    if (ok && repeat) {
        /* the same input again gives the same bits */
        float *again = malloc((size_t)(m * N) * 4);
        CHECK_OK(ctx, wgml_matmul_cached(ctx, name, in, (size_t)(m * K), again, (size_t)(m * N), m));
        ok = memcmp(out, again, (size_t)(m * N) * 4) == 0;
        if (!ok) fprintf(stderr, "  %s: a repeated call gave other bits\n", what);
        free(again);
    }
    free(in);
    free(out);
    free(want);
    return ok;
}

static void cached_matmul(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t K = 37, N = 45;
    float *W = rand_floats((size_t)(K * N), -1, 1);
    size_t count0 = 99;
    uint64_t bytes0 = 99;
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count0, &bytes0));
    CHECK_OK(ctx, wgml_weight_upload(ctx, "w1", W, K, N));
    size_t count = 0;
    uint64_t bytes = 0;
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count, &bytes));
    CHECK(count == count0 + 1 && bytes == bytes0 + (uint64_t)(K * N) * 4);
    const int64_t ms[] = {1, 3, 64};
    for (int i = 0; i < 3; i++) CHECK(cached_matches(ctx, "w1", W, K, N, ms[i], 1));
    /* steady state: after the first call of a size, no more buffers over 10 calls */
    for (int i = 0; i < 3; i++) {
        int64_t m = ms[i];
        float *in = rand_floats((size_t)(m * K), -1, 1), *out = malloc((size_t)(m * N) * 4), *first = malloc((size_t)(m * N) * 4);
        CHECK_OK(ctx, wgml_matmul_cached(ctx, "w1", in, (size_t)(m * K), first, (size_t)(m * N), m));
        wgml_stats s0 = stats(ctx);
        int same = 1;
        for (int rep = 0; rep < 10; rep++) {
            CHECK_OK(ctx, wgml_matmul_cached(ctx, "w1", in, (size_t)(m * K), out, (size_t)(m * N), m));
            same &= memcmp(out, first, (size_t)(m * N) * 4) == 0;
        }
        wgml_stats s1 = stats(ctx);
        CHECK(same);
        CHECK(s1.buffers_live == s0.buffers_live);
        CHECK(s1.bytes_live == s0.bytes_live);
        CHECK(s1.submits - s0.submits == 10);
        free(in);
        free(out);
        free(first);
    }
    /* a second weight, calls interleaved with the first at the same m */
    int64_t K2 = 20, N2 = 30;
    float *W2 = rand_floats((size_t)(K2 * N2), -1, 1);
    CHECK_OK(ctx, wgml_weight_upload(ctx, "w2", W2, K2, N2));
    for (int i = 0; i < 3; i++) {
        CHECK(cached_matches(ctx, "w2", W2, K2, N2, ms[i], 0));
        CHECK(cached_matches(ctx, "w1", W, K, N, ms[i], 0));
        CHECK(cached_matches(ctx, "w2", W2, K2, N2, ms[i], 0));
    }
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count, &bytes));
    CHECK(count == count0 + 2 && bytes == bytes0 + (uint64_t)(K * N + K2 * N2) * 4);

    /* errors */
    float in[64 * 37], out[64 * 45];
    test_fill_uniform(in, 64 * 37, -1, 1);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "nope", in, 37, out, 45, 1), WGML_ERROR_NOT_FOUND);
    CHECK(test_message_has(ctx, "nope"));
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, "w1", W, K, N), WGML_ERROR_EXISTS);
    CHECK(test_message_has(ctx, "w1"));
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 3 * 37 - 1, out, 3 * 45, 3), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 3 * 37, out, 3 * 45 - 1, 3), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 37, out, 45, 0), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 37, out, 45, -1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", NULL, 37, out, 45, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 37, NULL, 45, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, NULL, in, 37, out, 45, 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, NULL, W, K, N), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, "w3", NULL, K, N), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, "w3", W, 0, N), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, "w3", W, K, -2), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_weights_resident(ctx, NULL, &bytes), WGML_ERROR_INVALID_ARGUMENT);
    /* the failed uploads added nothing; the weights still work after the errors */
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count, &bytes));
    CHECK(count == count0 + 2);
    CHECK(cached_matches(ctx, "w1", W, K, N, 3, 0));

    /* remove: gone (NOT_FOUND after), the other stays, the name can be reused */
    CHECK_OK(ctx, wgml_weight_remove(ctx, "w1"));
    CHECK_STATUS(ctx, wgml_weight_remove(ctx, "w1"), WGML_ERROR_NOT_FOUND);
    CHECK_STATUS(ctx, wgml_matmul_cached(ctx, "w1", in, 37, out, 45, 1), WGML_ERROR_NOT_FOUND);
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count, &bytes));
    CHECK(count == count0 + 1 && bytes == bytes0 + (uint64_t)(K2 * N2) * 4);
    CHECK(cached_matches(ctx, "w2", W2, K2, N2, 3, 0));
    CHECK_OK(ctx, wgml_weight_upload(ctx, "w1", W2, K2, N2)); /* same name, other shape */
    CHECK(cached_matches(ctx, "w1", W2, K2, N2, 64, 0));
    CHECK_OK(ctx, wgml_weight_remove(ctx, "w1"));
    CHECK_OK(ctx, wgml_weight_remove(ctx, "w2"));
    CHECK_OK(ctx, wgml_weights_resident(ctx, &count, &bytes));
    CHECK(count == count0 && bytes == bytes0);
    free(W);
    free(W2);
}

/* A weight bigger than the (debug-lowered) binding limit: bound in row chunks */
static void cached_matmul_split_binding(void)
{
    setenv("WGML_DEBUG_BINDING_LIMIT", "4096", 1);
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (ctx) {
        int64_t K = 64, N = 100; /* 25600 bytes, 400 per row */
        float *W = rand_floats((size_t)(K * N), -1, 1);
        CHECK_OK(ctx, wgml_weight_upload(ctx, "big", W, K, N));
        const int64_t ms[] = {1, 3, 64};
        for (int i = 0; i < 3; i++) {
            wgml_stats s0 = stats(ctx);
            CHECK(cached_matches(ctx, "big", W, K, N, ms[i], 0));
            wgml_stats s1 = stats(ctx);
            /* the split path really ran: one dispatch per chunk of rows */
            CHECK(s1.dispatches - s0.dispatches > 1);
        }
        /* and a second weight of another shape, split too, interleaved */
        int64_t K2 = 50, N2 = 36;
        float *W2 = rand_floats((size_t)(K2 * N2), -1, 1);
        CHECK_OK(ctx, wgml_weight_upload(ctx, "big2", W2, K2, N2));
        CHECK(cached_matches(ctx, "big2", W2, K2, N2, 3, 0));
        CHECK(cached_matches(ctx, "big", W, K, N, 3, 0));
        wgml_context_free(ctx);
        free(W);
        free(W2);
    }
    unsetenv("WGML_DEBUG_BINDING_LIMIT");
}

/* f rounded to the nearest IEEE half (ties to even) and widened back, written out here
   rather than taken from the library (which is what is tested) or from _Float16 (which clang 14
   has not on x86-64). Halves have 10 fraction bits and exponents -14..15; below 2^-14 they are
   subnormal, multiples of 2^-24; from 65520 up a value rounds to infinity; NaN stays NaN. */
static float round_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t ax = x & 0x7fffffffu;
    float r;
    if (ax > 0x7f800000u) return f;              /* NaN */
    if (ax >= 0x477ff000u) r = INFINITY;         /* 65520 and up, infinity */
    else if (ax >= 0x38800000u) {                /* a normal half: keep 10 of 23 fraction bits */
        uint32_t q = ax >> 13, rest = ax & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (q & 1))) q++; /* a carry may raise the exponent: right */
        uint32_t y = q << 13;
        memcpy(&r, &y, sizeof r);
    } else if (ax < 0x33000000u) r = 0;          /* below 2^-25, half the smallest subnormal: 0 */
    else {                                       /* a subnormal half: a whole number of 2^-24 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u; /* |f| = m * 2^(e - 150) */
        uint32_t shift = 126 - e;                /* 14..24: m * 2^(e - 150) / 2^-24 = m >> shift */
        uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), tie = 1u << (shift - 1);
        if (rest > tie || (rest == tie && (q & 1))) q++;
        r = ldexpf((float)q, -24);
    }
    return (x >> 31) ? -r : r;
}

/* Weights stored as halves: results match the reference on the weights rounded to half
   (by round_to_half above, not by the library's own conversion) at the f32 tolerance, for the
   GEMV, the small-M GEMV and the GEMM, also bound in chunks; tiny weights test the
   subnormal halves, and the resident bytes are halved. */
static void cached_matmul_f16(void)
{
    wgml_context *ctx = test_context();
    wgml_adapter_info info;
    if (!ctx || wgml_adapter_info_get(ctx, &info) != WGML_OK) return;
    if (!info.has_shader_f16) {
        fprintf(stderr, "  (adapter has no shader-f16: skipped)\n");
        return;
    }
    /* whole, then bound in chunks of rows (a binding limit of 4096 bytes: 200 and 72 bytes a row) */
    const int64_t shapes[2][3][2] = {{{7, 5}, {1023, 67}, {64, 1536}}, {{7, 5}, {64, 100}, {50, 36}}};
    const int64_t ms[] = {1, 3, 16, 40};
    wgml_weight_desc half = {.f16 = 1};
    for (int split = 0; split < 2; split++) {
        if (split) setenv("WGML_DEBUG_BINDING_LIMIT", "4096", 1);
        wgml_context *c = ctx;
        if (split) CHECK_OK(NULL, wgml_context_create(NULL, &c));
        for (int s = 0; c && s < 3; s++) {
            int64_t K = shapes[split][s][0], N = shapes[split][s][1];
            float *W = rand_floats((size_t)(K * N), -1, 1), *Wh = malloc((size_t)(K * N) * 4);
            for (int64_t i = 0; i < K * N; i++) {
                if (i % 7 == 3) W[i] *= 1e-6f; /* below half's smallest normal, 6.1e-5 */
                Wh[i] = round_to_half(W[i]);
            }
            char name[32];
            snprintf(name, sizeof name, "h%d_%d", split, s);
            size_t count0 = 0, count = 0;
            uint64_t bytes0 = 0, bytes = 0;
            CHECK_OK(c, wgml_weights_resident(c, &count0, &bytes0));
            CHECK_OK(c, wgml_weight_upload_ex(c, name, W, K, N, &half));
            CHECK_OK(c, wgml_weights_resident(c, &count, &bytes));
            CHECK(count == count0 + 1 && bytes == bytes0 + (uint64_t)(K * N) * 2);
            wgml_stats s0 = stats(c);
            for (int i = 0; i < 4; i++) CHECK(cached_matches(c, name, Wh, K, N, ms[i], i == 0));
            if (split && s > 0) CHECK(stats(c).dispatches - s0.dispatches > 4); /* chunks ran */
            CHECK_OK(c, wgml_weight_remove(c, name));
            free(W);
            free(Wh);
        }
        if (split) {
            wgml_context_free(c);
            unsetenv("WGML_DEBUG_BINDING_LIMIT");
        }
    }
}

/* ---------------------------------------------------------------- knobs and the executor */

/* The benchmark knobs are read once per context: what was set when it first chose a kernel
   stays, later changes of the environment do not reach it, values a knob does not take are
   as if unset; a context made after sees the new environment. */
static void knobs_read_once(void)
{
    setenv("WGML_GEMM_TILE", "4,8,4,1", 1);
    setenv("WGML_GEMM_WARP", "8x4", 1);
    setenv("WGML_GEMV_COLS", "16", 1);
    setenv("WGML_GEMV_ROWS", "0", 1);
    setenv("WGML_EW_UNROLL", "4", 1);
    wgml_context *ctx = knob_context();
    if (!ctx) return;
    const wgml_tuning *t = wgml_tuning_of(ctx);
    CHECK(t->gemm_tile_set && t->gemm_tm == 4 && t->gemm_tn == 8 && t->gemm_bk == 4 && t->gemm_stages == 1);
    CHECK(t->gemm_warp_8x4 && t->gemv_cols == 16 && t->gemv_rows_off && t->ew_unroll == 4);
    setenv("WGML_GEMV_COLS", "17", 1); /* not a width: as if unset */
    setenv("WGML_GEMM_TILE", "5,8,4,1", 1);
    setenv("WGML_EW_UNROLL", "3", 1);
    unsetenv("WGML_GEMV_ROWS");
    unsetenv("WGML_GEMM_WARP");
    CHECK(wgml_tuning_of(ctx) == t && t->gemv_cols == 16 && t->gemv_rows_off && t->ew_unroll == 4);
    wgml_gemm_args g = {.M = 200, .N = 200, .K = 8, .batch = 1};
    wgml_gemm_config c = wgml_gemm_choose(ctx, &g);
    CHECK(c.tm == 4 && c.tn == 8 && c.bk == 4 && !c.double_buffer && !c.prefetch && c.warp_8x4);
    g.M = 3;
    CHECK(wgml_gemm_choose(ctx, &g).gemv_rows == 0 && wgml_gemm_choose(ctx, &g).gemv_cols == 16);
    g.M = 1; /* aligned: the one-row kernel, but for WGML_GEMV_ROWS=0 */
    CHECK(wgml_gemm_choose(ctx, &g).gemv_rows == 0);
    g.M = 3;
    mm_case mc = {.M = 67, .K = 33, .N = 70};
    CHECK(run_case(ctx, &mc));
    wgml_context_free(ctx);
    ctx = knob_context();
    if (ctx) {
        t = wgml_tuning_of(ctx);
        CHECK(!t->gemm_tile_set && !t->gemm_warp_8x4 && !t->gemv_rows_off && t->gemv_cols == 0 && t->ew_unroll == 0);
        g.M = 3;
        /* the small-M GEMV for 3 rows (4, a power of two); on a CPU adapter the CPU GEMM; one
           row (aligned) through its one-row form */
        wgml_gemm_args g1 = g;
        g1.M = 1;
        CHECK(wgml_gemm_choose(ctx, &g1).gemv_rows == 1);
        wgml_gemm_config c3 = wgml_gemm_choose(ctx, &g);
        if (!strcmp(ctx->rt.info.adapter_type, "CPU")) CHECK(c3.gemv_rows == 0 && c3.cpu_rows > 0);
        else CHECK(c3.gemv_rows == 4);
        wgml_context_free(ctx);
    }
    setenv("WGML_GEMM_CPU", "0", 1);
    ctx = knob_context();
    if (ctx) {
        CHECK(wgml_gemm_choose(ctx, &g).gemv_rows == 4 && wgml_gemm_choose(ctx, &g).cpu_rows == 0);
        wgml_context_free(ctx);
    }
    unsetenv("WGML_GEMM_CPU");
    unsetenv("WGML_GEMV_COLS");
    unsetenv("WGML_GEMM_TILE");
    unsetenv("WGML_EW_UNROLL");
}

/* The large-M tile policy, shape by shape (the table of ops/matmul/matmul_tiles.c, which the H100
   runs chose): a broken branch there would still give right answers, only slower. */
static void tile_policy(void)
{
    wgml_context *ctx = knob_context();
    if (!ctx) return;
    if (ctx->rt.limits.maxComputeWorkgroupStorageSize < 32768) {
        printf("  (skipped: %u bytes of workgroup memory shrink the tiles)\n", ctx->rt.limits.maxComputeWorkgroupStorageSize);
        wgml_context_free(ctx);
        return;
    }
    struct {
        int64_t M, N, K;
        int ta, tb;
        int tm, tn, bk, double_buffer, prefetch;
        int f16_math;
    } want[] = {
        {4096, 4096, 4096, 0, 0, 8, 8, 16, 0, 0, 0}, /* >= 512 tiles: one buffer */
        {4096, 4096, 4096, 0, 1, 8, 8, 16, 0, 0, 0},
        {4096, 4096, 4096, 1, 0, 8, 8, 8, 0, 1, 0},  /* A^T B: 8-deep slices, register prefetch */
        {2048, 2048, 2048, 0, 0, 8, 8, 16, 0, 0, 0}, /* one wave (256 tiles) */
        {2048, 2048, 2048, 1, 0, 8, 8, 16, 0, 0, 0},
        {2560, 2048, 512, 0, 0, 8, 4, 16, 1, 1, 0},  /* 320 tiles: 128x64, two buffers */
        {1024, 1024, 1024, 0, 0, 8, 8, 16, 0, 1, 0}, /* 64 tiles: register prefetch */
        {256, 512, 64, 0, 0, 4, 8, 16, 1, 1, 0},     /* 8 tiles: 64x128 */
        {4096, 4096, 4096, 0, 0, 8, 4, 16, 0, 0, 1}, /* f16 arithmetic: 8x4 a thread */
        {2048, 2048, 2048, 0, 0, 8, 4, 16, 0, 0, 2},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        wgml_gemm_args g = {.M = want[i].M, .N = want[i].N, .K = want[i].K, .batch = 1, .trans_a = want[i].ta,
                            .trans_b = want[i].tb, .lda = want[i].ta ? want[i].M : want[i].K,
                            .ldb = want[i].tb ? want[i].K : want[i].N, .f16_math = want[i].f16_math};
        wgml_gemm_config c = wgml_gemm_choose(ctx, &g);
        bool ok = c.tm == want[i].tm && c.tn == want[i].tn && c.bk == want[i].bk &&
                  c.double_buffer == (bool)want[i].double_buffer && c.prefetch == (bool)want[i].prefetch;
        if (!ok)
            fprintf(stderr, "  [%lld, %lld, %lld]%s%s: tile %d,%d,%d double %d prefetch %d\n", (long long)g.M, (long long)g.N,
                    (long long)g.K, g.trans_a ? " A^T" : "", g.trans_b ? " B^T" : "", c.tm, c.tn, c.bk, c.double_buffer, c.prefetch);
        CHECK(ok);
    }
    wgml_context_free(ctx);
}

/* wgml_exec_submit with launches bound through the bind cache (raw buffers): two GEMM
   launches in one pass, the second accumulating onto the first (C = 2 A B), and a read-back
   from an offset of the output buffer. */
static void exec_submit_raw_launches(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t M = 5, K = 7, N = 9, sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    float *A = rand_floats((size_t)(M * K), -1, 1), *B = rand_floats((size_t)(K * N), -1, 1);
    float *Z = calloc((size_t)(M * N), sizeof *Z), *got = calloc((size_t)(M * N), sizeof *got);
    double *want = malloc((size_t)(M * N) * sizeof *want);
    test_ref_matmul(1, M, N, K, A, 1, 0, B, 1, 0, 2.0, NULL, 0, want);
    wgml_tensor *ta = test_tensor(ctx, 2, sa, A), *tb = test_tensor(ctx, 2, sb, B), *tc = test_tensor(ctx, 2, sc, Z);
    if (ta && tb && tc) {
        WGPUBuffer a = ta->buf->handle, b = tb->buf->handle, c = tc->buf->handle;
        wgml_launch l[2];
        memset(l, 0, sizeof l);
        for (int i = 0; i < 2; i++) {
            wgml_gemm_args g = {.M = M, .N = N, .K = K, .batch = 1, .alpha = 1.0f, .lda = K, .ldb = N, .accumulate = i > 0};
            bool gemv;
            wgml_gemm_config cfg;
            CHECK_OK(ctx, wgml_gemm_pipeline(ctx, &g, &l[i], &gemv, &cfg));
            wgml_gemm_params(ctx, &l[i], &g, gemv, &cfg);
            WGPUBuffer raw[4] = {a, b, a, c};
            memcpy(l[i].raw, raw, sizeof raw);
            l[i].nbuffers = 4;
        }
        wgml_stats s0 = stats(ctx);
        wgml_exec_readback rb = {.buffer = c, .offset = (uint64_t)N * 4, .size = (uint64_t)((M - 1) * N) * 4, .host = got};
        CHECK_OK(ctx, wgml_exec_submit(ctx, l, 2, &rb, "a test", wgml_host_seconds()));
        wgml_stats s1 = stats(ctx);
        CHECK(s1.dispatches - s0.dispatches == 2 && s1.submits - s0.submits == 1);
        CHECK(test_close("2 A B by raw launches, rows 1..", got, want + N, (size_t)((M - 1) * N), MM_TOL, mm_floor(K, 2)));
    }
    wgml_tensor_free(ta);
    wgml_tensor_free(tb);
    wgml_tensor_free(tc);
    free(A);
    free(B);
    free(Z);
    free(got);
    free(want);
}

/* The GEMM kernel the adapter does not pick by default, through the main suites: the tiled
   kernels on a CPU adapter (the GPU's path, which CI runs on lavapipe), the CPU GEMM on a GPU. */
static void other_gemm_suites(void)
{
    sizes_and_transposes();
    aligned_sizes();
    batched();
    epilogue();
    strided_operands();
}
static void other_gemm_kernel(void) { test_with_other_gemm_kernel(other_gemm_suites); }

int main(void)
{
    TEST_RUN(sizes_and_transposes);
    TEST_RUN(aligned_sizes);
    TEST_RUN(every_tile_config);
    TEST_RUN(gemv_subgroup_variant);
    TEST_RUN(small_m_gemv);
    TEST_RUN(views_and_flags_mixed);
    TEST_RUN(tall_and_thin);
    TEST_RUN(batched);
    TEST_RUN(epilogue);
    TEST_RUN(residual_epilogue);
    TEST_RUN(strided_operands);
    TEST_RUN(one_row_strided_views);
    TEST_RUN(matmul_in_a_graph);
    TEST_RUN(errors);
    TEST_RUN(cached_matmul);
    TEST_RUN(cached_matmul_split_binding);
    TEST_RUN(cached_matmul_f16);
    TEST_RUN(knobs_read_once);
    TEST_RUN(tile_policy);
    TEST_RUN(exec_submit_raw_launches);
    TEST_RUN(cpu_gemm_shapes);
    TEST_RUN(other_gemm_kernel);
    return test_summary();
}
