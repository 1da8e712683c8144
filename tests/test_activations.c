/*
 * The activations agree between the matmul epilogue and the fused elementwise ops at +-inf,
 * NaN and +-80 (and at zero, +-1e-3, +-3, the thresholds of the ops' special cases and random
 * values), and both agree with the op table's double reference.
 *
 * Method: x holds 64 values. The matmul's pre-activation is made to equal x exactly: K = 1 and
 * the other operand is all ones, so each output is 0 + x * 1 = x (inf * 1 = inf, NaN * 1 =
 * NaN; a larger K would add 0 * inf = NaN). x goes in as A's column or B's row, with and
 * without the transpose flags, so that the generated kernels the matmul picks by shape all
 * run: the GEMV (M = 1), the swapped GEMV (N = 1), the small-M GEMV (M = 4) and the tiled GEMM
 * (M = 64, and M = 4 with a transposed B). For each activation, every output element must
 *   - be of the fused op's class: both NaN, or both the same infinity, or finite and within
 *     1e-6 relative (of the larger, floored as below) of the fused op's value, and
 *   - match the op's reference (ref/ref.h's wgml_ref_elementwise) in double: NaN for NaN, the same infinity, or within the
 *     entry's tolerance, relative to max(|ref|, floor).
 * The fused op is checked against the reference on the vec4 path (64 elements) and the
 * scalar one (63). WGML_ACT_NONE checks the premise: the output is x, bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/table.h"
#include "ref/ref.h"
#include "harness.h"

#define NX 64
#define AGREE 1e-6

typedef wgml_tensor *(*unary_fn)(wgml_context *, wgml_tensor *);

/* floor: gelu's 0.5 x (1 + tanh(u)) cancels for negative x, so its absolute error is that of
   tanh (~1e-7) times 0.5 |x|; results below 1e-2 are held to tol * 1e-2 absolute */
static const struct { wgml_activation act; int op; unary_fn fused; const char *name; double floor; } acts[] = {
    {WGML_ACT_RELU, WGML_OP_RELU, wgml_relu, "relu", 1e-30},
    {WGML_ACT_GELU, WGML_OP_GELU, wgml_gelu, "gelu", 1e-2},
    {WGML_ACT_SILU, WGML_OP_SILU, wgml_silu, "silu", 1e-30},
    {WGML_ACT_GELU_EXACT, WGML_OP_GELU_EXACT, wgml_gelu_exact, "gelu_exact", 1e-2},
};

/* How x reaches the matmul: on A (C[r][c] = x[r]) or on B (C[r][c] = x[c]); the other
   operand is ones. M and N count C's rows and columns; the transpose flags are passed with
   the operand stored transposed. */
typedef struct layout {
    const char *name;
    int x_on_b;
    int64_t M, N;
    int trans_a, trans_b;
} layout;

static const layout layouts[] = {
    {"x[64,1] . 1[1,1] (N = 1: the swapped GEMV)", 0, NX, 1, 0, 0},
    {"1[1,1] . x[1,64] (M = 1: the GEMV)", 1, 1, NX, 0, 0},
    {"1[4,1] . x[1,64] (M = 4: the small-M GEMV)", 1, 4, NX, 0, 0},
    {"1[64,1] . x[1,64] (M = 64: the GEMM)", 1, NX, NX, 0, 0},
    {"x[64,1] . 1[1,8] (the GEMM, N = 8)", 0, NX, 8, 0, 0},
    {"x^T[1,64] trans_a . 1[1,3] (the GEMM, A transposed)", 0, NX, 3, 1, 0},
    {"1[4,1] . x^T[64,1] trans_b (the GEMM, B transposed)", 1, 4, NX, 0, 1},
};

static float xs[NX];

static void make_inputs(void)
{
    const float special[] = {
        INFINITY, -INFINITY, NAN, 80.0f, -80.0f, 0.0f, 1e-3f, -1e-3f, 3.0f, -3.0f,
        10.0f, -10.0f,  /* gelu's u = -10 threshold lies near x = -4.4 */
        -100.5f,        /* past silu's x < -100 threshold */
        -88.5f, -89.5f, /* sigmoid's exp(-x) just below and past the f32 overflow */
        1e30f, -1e30f,  /* x^3 overflows inside gelu */
        -4.5f, -4.3f,
    };
    int k = 0;
    for (; k < N_OF(special); k++) xs[k] = special[k];
    for (; k < NX; k++) xs[k] = (float)test_uniform(-6, 6);
}

static int is_class_equal_or_close(double a, double b, double rel, double floor)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= rel * fmax(fmax(fabs(a), fabs(b)), floor);
}

static int matches_ref(float got, double ref, double tol, double floor)
{
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got)) return (double)got == ref;
    return fabs((double)got - ref) <= tol * fmax(fabs(ref), floor);
}

/* C = act(A B) with x placed as layout L says; its M * N elements into out (0 if the read
   failed) */
static int run_matmul(wgml_context *ctx, const layout *L, wgml_activation act, float *out)
{
    int64_t n_other = L->x_on_b ? L->M : L->N;
    float *ones = malloc((size_t)n_other * sizeof *ones);
    for (int64_t i = 0; i < n_other; i++) ones[i] = 1.0f;
    /* A is [M,1] ([1,M] if trans_a); B is [1,N] ([N,1] if trans_b) */
    int64_t sa[2] = {L->trans_a ? 1 : L->M, L->trans_a ? L->M : 1};
    int64_t sb[2] = {L->trans_b ? L->N : 1, L->trans_b ? 1 : L->N};
    wgml_scope_begin(ctx);
    wgml_tensor *a = test_tensor(ctx, 2, sa, L->x_on_b ? ones : xs);
    wgml_tensor *b = test_tensor(ctx, 2, sb, L->x_on_b ? xs : ones);
    wgml_tensor *c = wgml_matmul_ex(ctx, a, b, &(wgml_matmul_desc){.trans_a = L->trans_a, .trans_b = L->trans_b, .activation = act});
    wgml_status st = wgml_tensor_read(c, out, (size_t)(L->M * L->N));
    if (st) {
        fprintf(stderr, "FAIL %s: %s: matmul gave %s: %s\n", test_current, L->name, wgml_status_name(st), wgml_error_message(ctx));
        test_failures++;
    }
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
    free(ones);
    return st == WGML_OK;
}

/* the index into x of output element (r, c) */
static int x_index(const layout *L, int64_t r, int64_t c) { return (int)(L->x_on_b ? c : r); }

/* The premise: with no activation each output is x itself, bit for bit (NaN as NaN). */
static void the_pre_activation_is_x(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float *out = malloc((size_t)NX * NX * sizeof *out);
    for (int l = 0; l < N_OF(layouts); l++) {
        const layout *L = &layouts[l];
        if (!run_matmul(ctx, L, WGML_ACT_NONE, out)) continue;
        int bad = 0;
        for (int64_t r = 0; r < L->M; r++)
            for (int64_t c = 0; c < L->N; c++) {
                float v = out[r * L->N + c], x = xs[x_index(L, r, c)];
                if (isnan(x) ? !isnan(v) : v != x) {
                    if (bad++ < 4) fprintf(stderr, "  %s: C[%lld,%lld] = %.9g, want x = %.9g\n", L->name, (long long)r, (long long)c, v, x);
                }
            }
        if (bad) {
            fprintf(stderr, "FAIL %s: %s: %d outputs are not x\n", test_current, L->name, bad);
            test_failures++;
        }
    }
    free(out);
}

static void check_activation(int k)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const wgml_op_def *d = wgml_op_table[acts[k].op];
    wgml_ref_elementwise_fn f = wgml_ref_elementwise(d->name);
    if (!f) {
        FAILF("%s: no reference (ref/elementwise.c)", d->name);
        return;
    }
    double ref[NX];
    for (int i = 0; i < NX; i++) {
        double in = xs[i];
        ref[i] = f(&in);
    }
    /* the fused op, on the vec4 path (64) and the scalar one (63), against the reference */
    float fused[NX], fused63[NX - 1];
    int64_t n64 = NX, n63 = NX - 1;
    wgml_scope_begin(ctx);
    wgml_tensor *x64 = test_tensor(ctx, 1, &n64, xs), *x63 = test_tensor(ctx, 1, &n63, xs);
    CHECK_OK(ctx, wgml_tensor_read(acts[k].fused(ctx, x64), fused, NX));
    CHECK_OK(ctx, wgml_tensor_read(acts[k].fused(ctx, x63), fused63, NX - 1));
    wgml_scope_end(ctx);
    int bad = 0;
    for (int i = 0; i < NX; i++) {
        int ok = matches_ref(fused[i], ref[i], d->tol, acts[k].floor);
        if (i < NX - 1 && !(isnan(fused63[i]) ? isnan(fused[i]) : fused63[i] == fused[i])) ok = 0;
        if (!ok && bad++ < 8)
            fprintf(stderr, "  fused %s(%.9g) = %.9g (scalar path %.9g), reference %.9g\n", acts[k].name, xs[i], fused[i],
                    i < NX - 1 ? fused63[i] : fused[i], ref[i]);
    }
    if (bad) {
        fprintf(stderr, "FAIL %s: the fused %s is off the reference (or its two paths differ) at %d inputs\n", test_current,
                acts[k].name, bad);
        test_failures++;
    }

    float *out = malloc((size_t)NX * NX * sizeof *out);
    for (int l = 0; l < N_OF(layouts); l++) {
        const layout *L = &layouts[l];
        if (!run_matmul(ctx, L, acts[k].act, out)) continue;
        int bad_fused = 0, bad_ref = 0;
        for (int64_t r = 0; r < L->M; r++)
            for (int64_t c = 0; c < L->N; c++) {
                int i = x_index(L, r, c);
                float e = out[r * L->N + c];
                int agree = is_class_equal_or_close(e, fused[i], AGREE, acts[k].floor);
                int right = matches_ref(e, ref[i], d->tol, acts[k].floor);
                /* print each differing input once (the first output that shows it) */
                int first = L->x_on_b ? r == 0 : c == 0;
                if ((!agree || !right) && first)
                    fprintf(stderr, "  %s: epilogue %s(%.9g) = %.9g, fused %.9g, reference %.9g\n", L->name, acts[k].name,
                            xs[i], e, fused[i], ref[i]);
                bad_fused += !agree;
                bad_ref += !right;
            }
        if (bad_fused || bad_ref) {
            fprintf(stderr, "FAIL %s: %s: %d outputs differ from the fused %s, %d from the reference\n", test_current, L->name,
                    bad_fused, acts[k].name, bad_ref);
            test_failures++;
        }
    }
    free(out);
}

static void relu_agrees(void) { check_activation(0); }
static void gelu_agrees(void) { check_activation(1); }
static void silu_agrees(void) { check_activation(2); }

int main(void)
{
    make_inputs();
    TEST_RUN(the_pre_activation_is_x);
    TEST_RUN(relu_agrees);
    TEST_RUN(gelu_agrees);
    TEST_RUN(silu_agrees);
    return test_summary();
}
