/* Tests of the double-precision CPU reference (tests/ref/ref.c) against hand-computed
   values, so that the GPU tests have a reference they can trust. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref/ref.h"
#include "harness.h"


/* |got - want| <= tol * max(1, |want|); NaN only matches NaN, inf only the same inf */
static int near(double got, double want, double tol)
{
    if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got)) return got == want;
    double m = fabs(want) > 1 ? fabs(want) : 1;
    return fabs(got - want) <= tol * m;
}

static int all_near(const double *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++)
        if (!near(got[i], want[i], tol)) {
            fprintf(stderr, "  [%d]: got %.17g want %.17g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

/* ---------------------------------------------------------------- elementwise */

static void test_unary_scalars(void)
{
    CHECK(wgml_ref_neg(2.5) == -2.5);
    CHECK(wgml_ref_abs(-3.0) == 3.0);
    CHECK(near(wgml_ref_exp(1.0), 2.718281828459045, 1e-15));
    CHECK(near(wgml_ref_log(2.718281828459045), 1.0, 1e-15));
    CHECK(wgml_ref_log(0.0) == -INFINITY);
    CHECK(isnan(wgml_ref_log(-1.0)));
    CHECK(wgml_ref_sqrt(16.0) == 4.0);
    CHECK(wgml_ref_rsqrt(4.0) == 0.5);
    CHECK(wgml_ref_rsqrt(0.0) == INFINITY);
    CHECK(near(wgml_ref_tanh(0.5), 0.46211715726000974, 1e-15));
    CHECK(wgml_ref_sigmoid(0.0) == 0.5);
    CHECK(near(wgml_ref_sigmoid(2.0), 0.8807970779778823, 1e-15));
    CHECK(near(wgml_ref_sigmoid(-2.0), 0.11920292202211755, 1e-15));
    CHECK(wgml_ref_sigmoid(-800.0) == 0.0); /* no inf/inf */
    CHECK(wgml_ref_sigmoid(800.0) == 1.0);
    CHECK(wgml_ref_relu(-1.5) == 0.0);
    CHECK(wgml_ref_relu(2.0) == 2.0);
    /* gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) */
    CHECK(near(wgml_ref_gelu(1.0), 0.8411919906082768, 1e-15));
    CHECK(near(wgml_ref_gelu(-1.0), -0.15880800939172324, 1e-15));
    CHECK(wgml_ref_gelu(0.0) == 0.0);
    CHECK(wgml_ref_gelu(-INFINITY) == 0.0);
    CHECK(wgml_ref_gelu(INFINITY) == INFINITY);
    CHECK(near(wgml_ref_silu(1.0), 0.7310585786300049, 1e-15));
    CHECK(near(wgml_ref_silu(-1.0), -0.2689414213699951, 1e-15));
    CHECK(wgml_ref_silu(-INFINITY) == 0.0);
    CHECK(wgml_ref_silu(INFINITY) == INFINITY);
    double (*fs[])(double) = {wgml_ref_neg,  wgml_ref_abs,  wgml_ref_exp,     wgml_ref_log,
                              wgml_ref_sqrt, wgml_ref_rsqrt, wgml_ref_tanh,   wgml_ref_sigmoid,
                              wgml_ref_relu, wgml_ref_gelu, wgml_ref_silu};
    for (int i = 0; i < N_OF(fs); i++) CHECK(isnan(fs[i](NAN)));

    double x[3] = {-1.0, 0.0, 2.0};
    double out[3], want[3] = {0.0, 0.0, 2.0};
    wgml_ref_unary(wgml_ref_relu, 3, x, out);
    CHECK(all_near(out, want, 3, 0));
}

static void test_binary_scalars(void)
{
    CHECK(wgml_ref_add(1.5, 2.0) == 3.5);
    CHECK(wgml_ref_sub(1.5, 2.0) == -0.5);
    CHECK(wgml_ref_mul(1.5, -2.0) == -3.0);
    CHECK(wgml_ref_div(3.0, 4.0) == 0.75);
    CHECK(wgml_ref_div(1.0, 0.0) == INFINITY);
    CHECK(wgml_ref_pow(2.0, 10.0) == 1024.0);
    CHECK(wgml_ref_pow(9.0, 0.5) == 3.0);
    CHECK(isnan(wgml_ref_pow(-8.0, 1.0 / 3.0))); /* C pow */
    CHECK(wgml_ref_pow(-2.0, 3.0) == -8.0);
    CHECK(wgml_ref_maximum(1.0, 2.0) == 2.0);
    CHECK(wgml_ref_minimum(1.0, 2.0) == 1.0);
    CHECK(wgml_ref_maximum(-INFINITY, -3.0) == -3.0);
}

static void test_nan_propagation(void)
{
    CHECK(isnan(wgml_ref_maximum(NAN, 1.0)));
    CHECK(isnan(wgml_ref_maximum(1.0, NAN)));
    CHECK(isnan(wgml_ref_maximum(NAN, INFINITY)));
    CHECK(isnan(wgml_ref_minimum(NAN, 1.0)));
    CHECK(isnan(wgml_ref_minimum(1.0, NAN)));
    CHECK(isnan(wgml_ref_minimum(-INFINITY, NAN)));
    /* signed zeros, as IEEE-754 2019 maximum/minimum */
    CHECK(!signbit(wgml_ref_maximum(-0.0, 0.0)) && !signbit(wgml_ref_maximum(0.0, -0.0)));
    CHECK(signbit(wgml_ref_minimum(-0.0, 0.0)) && signbit(wgml_ref_minimum(0.0, -0.0)));

    CHECK(wgml_ref_clamp(5.0, 0.0, 1.0) == 1.0);
    CHECK(wgml_ref_clamp(-5.0, 0.0, 1.0) == 0.0);
    CHECK(wgml_ref_clamp(0.25, 0.0, 1.0) == 0.25);
    CHECK(wgml_ref_clamp(INFINITY, -1.0, 1.0) == 1.0);
    CHECK(isnan(wgml_ref_clamp(NAN, 0.0, 1.0)));
    CHECK(isnan(wgml_ref_clamp(0.5, NAN, 1.0)));
    CHECK(isnan(wgml_ref_clamp(0.5, 0.0, NAN)));

    /* reductions: max propagates NaN, the others follow arithmetic */
    double x[2][3] = {{1.0, NAN, 3.0}, {4.0, 5.0, 6.0}};
    int64_t s[2] = {2, 3};
    double out[3];
    wgml_ref_max(2, s, &x[0][0], 1, out);
    CHECK(isnan(out[0]) && out[1] == 6.0);
    wgml_ref_max(2, s, &x[0][0], 0, out);
    CHECK(out[0] == 4.0 && isnan(out[1]) && out[2] == 6.0);
    CHECK(isnan(wgml_ref_max_all(6, &x[0][0])));
    wgml_ref_sum(2, s, &x[0][0], 1, out);
    CHECK(isnan(out[0]) && out[1] == 15.0);
    /* argmax: a NaN counts as the max (first NaN wins) */
    wgml_ref_argmax(2, s, &x[0][0], 1, out);
    CHECK(out[0] == 1.0 && out[1] == 2.0);

    /* elementwise over broadcast tensors */
    double a[3] = {NAN, 1.0, 2.0}, b[1] = {1.5};
    int64_t sa[1] = {3}, sb[1] = {1};
    double o[3];
    wgml_ref_binary(wgml_ref_maximum, 1, sa, a, 1, sb, b, o);
    CHECK(isnan(o[0]) && o[1] == 1.5 && o[2] == 2.0);
    wgml_ref_binary(wgml_ref_minimum, 1, sa, a, 1, sb, b, o);
    CHECK(isnan(o[0]) && o[1] == 1.0 && o[2] == 1.5);

    /* softmax: a NaN poisons its row only */
    double sm[2][2] = {{NAN, 1.0}, {0.0, 0.0}};
    double so[4];
    wgml_ref_softmax(2, 2, &sm[0][0], so);
    CHECK(isnan(so[0]) && isnan(so[1]) && so[2] == 0.5 && so[3] == 0.5);
}

/* ---------------------------------------------------------------- broadcasting */

static int shape_is(int n, const int64_t *s, int wn, const int64_t *w)
{
    if (n != wn) return 0;
    for (int i = 0; i < n; i++)
        if (s[i] != w[i]) return 0;
    return 1;
}

static void test_broadcast_shape(void)
{
    int n = -7;
    int64_t out[WGML_REF_MAX_DIMS];
    {
        int64_t a[2] = {3, 1}, b[1] = {4}, w[2] = {3, 4};
        CHECK(wgml_ref_broadcast_shape(2, a, 1, b, &n, out) == 0 && shape_is(n, out, 2, w));
        CHECK(wgml_ref_broadcast_shape(1, b, 2, a, &n, out) == 0 && shape_is(n, out, 2, w));
    }
    {
        int64_t a[3] = {2, 1, 4}, b[2] = {3, 1}, w[3] = {2, 3, 4};
        CHECK(wgml_ref_broadcast_shape(3, a, 2, b, &n, out) == 0 && shape_is(n, out, 3, w));
    }
    {
        int64_t a[4] = {8, 1, 6, 1}, b[3] = {7, 1, 5}, w[4] = {8, 7, 6, 5};
        CHECK(wgml_ref_broadcast_shape(4, a, 3, b, &n, out) == 0 && shape_is(n, out, 4, w));
    }
    {
        int64_t a[1] = {1}, b[1] = {1}, w[1] = {1};
        CHECK(wgml_ref_broadcast_shape(1, a, 1, b, &n, out) == 0 && shape_is(n, out, 1, w));
    }
    {
        int64_t a[2] = {0, 3}, b[1] = {1}, w[2] = {0, 3};
        CHECK(wgml_ref_broadcast_shape(2, a, 1, b, &n, out) == 0 && shape_is(n, out, 2, w));
    }
    /* incompatible: nothing written */
    {
        int64_t a[1] = {3}, b[1] = {4};
        n = -7;
        out[0] = -9;
        CHECK(wgml_ref_broadcast_shape(1, a, 1, b, &n, out) == -1 && n == -7 && out[0] == -9);
        int64_t c[2] = {2, 3}, d[2] = {3, 2};
        CHECK(wgml_ref_broadcast_shape(2, c, 2, d, &n, out) == -1);
        int64_t e[1] = {0}, f[1] = {2};
        CHECK(wgml_ref_broadcast_shape(1, e, 1, f, &n, out) == -1);
        int64_t g[1] = {-1};
        CHECK(wgml_ref_broadcast_shape(1, g, 1, a, &n, out) == -1);
        CHECK(wgml_ref_broadcast_shape(0, a, 1, a, &n, out) == -1);
        int64_t big[WGML_REF_MAX_DIMS + 1] = {0};
        CHECK(wgml_ref_broadcast_shape(WGML_REF_MAX_DIMS + 1, big, 1, a, &n, out) == -1);
    }
}

static void test_binary_broadcast(void)
{
    /* (2,3) + (3,): each row plus b */
    {
        double a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
        int64_t sa[2] = {2, 3}, sb[1] = {3};
        double out[6], want[6] = {11, 22, 33, 14, 25, 36};
        wgml_ref_binary(wgml_ref_add, 2, sa, a, 1, sb, b, out);
        CHECK(all_near(out, want, 6, 0));
    }
    /* (2,1) * (1,3): outer product */
    {
        double a[2] = {2, 3}, b[3] = {1, 10, 100};
        int64_t sa[2] = {2, 1}, sb[2] = {1, 3};
        double out[6], want[6] = {2, 20, 200, 3, 30, 300};
        wgml_ref_binary(wgml_ref_mul, 2, sa, a, 2, sb, b, out);
        CHECK(all_near(out, want, 6, 0));
    }
    /* (3,) - (2,1,1) -> (2,1,3): the right operand stretches, operand order kept */
    {
        double a[3] = {1, 2, 3}, b[2] = {10, 20};
        int64_t sa[1] = {3}, sb[3] = {2, 1, 1};
        double out[6], want[6] = {-9, -8, -7, -19, -18, -17};
        wgml_ref_binary(wgml_ref_sub, 1, sa, a, 3, sb, b, out);
        CHECK(all_near(out, want, 6, 0));
    }
    /* (1,) / (4,): a scalar-shaped tensor */
    {
        double a[1] = {1}, b[4] = {1, 2, 4, 8};
        int64_t sa[1] = {1}, sb[1] = {4};
        double out[4], want[4] = {1, 0.5, 0.25, 0.125};
        wgml_ref_binary(wgml_ref_div, 1, sa, a, 1, sb, b, out);
        CHECK(all_near(out, want, 4, 0));
    }
    /* 4-D: (2,1,3,1) pow-free add (4,1,2) -> (2,4,3,2), checked element by element */
    {
        double a[6], b[8];
        for (int i = 0; i < 6; i++) a[i] = 100.0 * i;
        for (int i = 0; i < 8; i++) b[i] = i;
        int64_t sa[4] = {2, 1, 3, 1}, sb[3] = {4, 1, 2};
        double out[48];
        wgml_ref_binary(wgml_ref_add, 4, sa, a, 3, sb, b, out);
        int bad = 0;
        for (int i0 = 0; i0 < 2; i0++)
            for (int i1 = 0; i1 < 4; i1++)
                for (int i2 = 0; i2 < 3; i2++)
                    for (int i3 = 0; i3 < 2; i3++) {
                        double w = a[i0 * 3 + i2] + b[i1 * 2 + i3];
                        if (out[((i0 * 4 + i1) * 3 + i2) * 2 + i3] != w) bad++;
                    }
        CHECK(bad == 0);
    }
    /* same shapes: element by element, in double */
    {
        double a[2] = {0.1, 0.2}, b[2] = {0.3, 0.4};
        int64_t s[1] = {2};
        double out[2];
        wgml_ref_binary(wgml_ref_add, 1, s, a, 1, s, b, out);
        CHECK(out[0] == 0.1 + 0.3 && out[1] == 0.2 + 0.4);
    }
    /* incompatible shapes: nothing written */
    {
        double a[3] = {1, 2, 3}, b[2] = {1, 2};
        int64_t sa[1] = {3}, sb[1] = {2};
        double out[3] = {-1, -1, -1};
        wgml_ref_binary(wgml_ref_add, 1, sa, a, 1, sb, b, out);
        CHECK(out[0] == -1 && out[1] == -1 && out[2] == -1);
    }
    /* broadcast_to: (3,1) -> (2,3,2) */
    {
        double a[3] = {1, 2, 3}, out[12];
        int64_t sa[2] = {3, 1}, so[3] = {2, 3, 2};
        CHECK(wgml_ref_broadcast_to(2, sa, a, 3, so, out) == 0);
        double want[12] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
        CHECK(memcmp(out, want, sizeof want) == 0);
        int64_t bad1[2] = {2, 3}, bad2[1] = {3};
        CHECK(wgml_ref_broadcast_to(2, sa, a, 2, bad1, out) == -1); /* 3 vs 2 */
        CHECK(wgml_ref_broadcast_to(2, sa, a, 1, bad2, out) == -1); /* fewer dims */
    }
}

/* ---------------------------------------------------------------- reductions */

static void test_reductions(void)
{
    /* x (2,3,4) = 0..23 */
    double x[24];
    for (int i = 0; i < 24; i++) x[i] = i;
    int64_t s[3] = {2, 3, 4};
    double out[12];
    /* axis 0: out (3,4), x[j,k] + x[12 + j,k] */
    {
        double want[12];
        for (int i = 0; i < 12; i++) want[i] = i + (12 + i);
        wgml_ref_sum(3, s, x, 0, out);
        CHECK(all_near(out, want, 12, 0));
        for (int i = 0; i < 12; i++) want[i] /= 2;
        wgml_ref_mean(3, s, x, 0, out);
        CHECK(all_near(out, want, 12, 0));
        for (int i = 0; i < 12; i++) want[i] = 12 + i;
        wgml_ref_max(3, s, x, 0, out);
        CHECK(all_near(out, want, 12, 0));
        for (int i = 0; i < 12; i++) want[i] = 1;
        wgml_ref_argmax(3, s, x, 0, out);
        CHECK(all_near(out, want, 12, 0));
    }
    /* axis 1: out (2,4), sum over j of x[i, j, k] = 3*(12i + k) + 4*(0+1+2) */
    {
        double want[8];
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) want[i * 4 + k] = 3.0 * (12 * i + k) + 12.0;
        wgml_ref_sum(3, s, x, 1, out);
        CHECK(all_near(out, want, 8, 0));
        for (int i = 0; i < 8; i++) want[i] /= 3;
        wgml_ref_mean(3, s, x, 1, out);
        CHECK(all_near(out, want, 8, 1e-15));
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) want[i * 4 + k] = 12 * i + 8 + k;
        wgml_ref_max(3, s, x, 1, out);
        CHECK(all_near(out, want, 8, 0));
        for (int i = 0; i < 8; i++) want[i] = 2;
        wgml_ref_argmax(3, s, x, 1, out);
        CHECK(all_near(out, want, 8, 0));
    }
    /* axis 2 (last): out (2,3), 4*(4r) + 6 */
    {
        double want[6];
        for (int r = 0; r < 6; r++) want[r] = 16.0 * r + 6.0;
        wgml_ref_sum(3, s, x, 2, out);
        CHECK(all_near(out, want, 6, 0));
        for (int r = 0; r < 6; r++) want[r] = 4.0 * r + 1.5;
        wgml_ref_mean(3, s, x, 2, out);
        CHECK(all_near(out, want, 6, 0));
    }
    /* argmax ties pick the first; negative rows; -inf */
    {
        double y[3][4] = {{1, 3, 3, 2}, {-5, -2, -2, -7}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
        int64_t sy[2] = {3, 4};
        double am[3], mx[3];
        wgml_ref_argmax(2, sy, &y[0][0], 1, am);
        wgml_ref_max(2, sy, &y[0][0], 1, mx);
        CHECK(am[0] == 1 && am[1] == 1 && am[2] == 0);
        CHECK(mx[0] == 3 && mx[1] == -2 && mx[2] == -INFINITY);
        double z[2][2] = {{7, 7}, {7, 7}};
        int64_t sz[2] = {2, 2};
        double az[2];
        wgml_ref_argmax(2, sz, &z[0][0], 0, az);
        CHECK(az[0] == 0 && az[1] == 0);
    }
    /* 1-D and 4-D */
    {
        int64_t s1[1] = {24};
        double o;
        wgml_ref_sum(1, s1, x, 0, &o);
        CHECK(o == 276);
        wgml_ref_argmax(1, s1, x, 0, &o);
        CHECK(o == 23);
        int64_t s4[4] = {2, 3, 2, 2}; /* axis 2: out (2,3,2): x[i,j,0,l] + x[i,j,1,l] */
        double want[12];
        for (int r = 0; r < 6; r++)
            for (int l = 0; l < 2; l++) want[r * 2 + l] = (4 * r + l) + (4 * r + 2 + l);
        wgml_ref_sum(4, s4, x, 2, out);
        CHECK(all_near(out, want, 12, 0));
    }
    /* bad axis: nothing written */
    {
        double o[2] = {-1, -1};
        wgml_ref_sum(3, s, x, 3, o);
        wgml_ref_max(3, s, x, -1, o);
        CHECK(o[0] == -1 && o[1] == -1);
    }
    CHECK(wgml_ref_sum_all(24, x) == 276);
    CHECK(wgml_ref_mean_all(24, x) == 11.5);
    CHECK(wgml_ref_max_all(24, x) == 23);
    CHECK(wgml_ref_sum_all(0, x) == 0 && isnan(wgml_ref_mean_all(0, x)));
    CHECK(wgml_ref_max_all(0, x) == -INFINITY);
}

/* ---------------------------------------------------------------- last axis */

static void test_softmax(void)
{
    double x[2][3] = {{1, 2, 3}, {1001, 1002, 1003}}; /* the second would overflow exp */
    double out[6], lout[6];
    /* e^i / (e + e^2 + e^3) */
    double want[6] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219,
                      0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    double lwant[6] = {-2.40760596444438, -1.4076059644443801, -0.4076059644443803,
                       -2.40760596444438, -1.4076059644443801, -0.4076059644443803};
    wgml_ref_softmax(2, 3, &x[0][0], out);
    CHECK(all_near(out, want, 6, 1e-15));
    wgml_ref_log_softmax(2, 3, &x[0][0], lout);
    CHECK(all_near(lout, lwant, 6, 1e-14));
    /* -inf entries get 0 / -inf; a one-element row is 1 / 0 */
    double y[2] = {0.0, -INFINITY};
    wgml_ref_softmax(1, 2, y, out);
    wgml_ref_log_softmax(1, 2, y, lout);
    CHECK(out[0] == 1.0 && out[1] == 0.0 && lout[0] == 0.0 && lout[1] == -INFINITY);
    double z[1] = {-3.5};
    wgml_ref_softmax(1, 1, z, out);
    wgml_ref_log_softmax(1, 1, z, lout);
    CHECK(out[0] == 1.0 && lout[0] == 0.0);
}

static void test_layernorm(void)
{
    /* [1,2,3,4]: mean 2.5, biased var 1.25; (x - 2.5) / sqrt(1.25) */
    double x[2][4] = {{1, 2, 3, 4}, {2, 2, 2, 2}};
    double out[8];
    double want[8] = {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579,
                      1.3416407864998738, 0, 0, 0, 0};
    wgml_ref_layernorm(2, 4, &x[0][0], NULL, NULL, 0.0, out);
    CHECK(all_near(out, want, 4, 1e-15));
    /* a constant row with eps: (x - mean) = 0 exactly */
    wgml_ref_layernorm(2, 4, &x[0][0], NULL, NULL, 1e-5, out);
    CHECK(out[4] == 0 && out[5] == 0 && out[6] == 0 && out[7] == 0);
    /* eps = 1e-5: scale is 1/sqrt(1.25001) */
    CHECK(near(out[3], 1.5 / sqrt(1.25001), 1e-15));
    /* with weight and bias */
    double w[4] = {1, 2, -1, 0.5}, b[4] = {0, 1, 2, 3};
    double wb[4];
    for (int i = 0; i < 4; i++) wb[i] = want[i] * w[i] + b[i];
    wgml_ref_layernorm(1, 4, &x[0][0], w, b, 0.0, out);
    CHECK(all_near(out, wb, 4, 1e-15));
    /* weight only */
    for (int i = 0; i < 4; i++) wb[i] = want[i] * w[i];
    wgml_ref_layernorm(1, 4, &x[0][0], w, NULL, 0.0, out);
    CHECK(all_near(out, wb, 4, 1e-15));
}

static void test_rmsnorm(void)
{
    /* [1,2,3,4]: mean square 7.5, rms 2.7386127875258306 */
    double x[4] = {1, 2, 3, 4}, w[4] = {2, 1, 0, -1};
    double out[4];
    double want[4] = {0.3651483716701107, 0.7302967433402214, 1.0954451150103321,
                      1.4605934866804429};
    wgml_ref_rmsnorm(1, 4, x, NULL, 0.0, out);
    CHECK(all_near(out, want, 4, 1e-15));
    double ww[4];
    for (int i = 0; i < 4; i++) ww[i] = want[i] * w[i];
    wgml_ref_rmsnorm(1, 4, x, w, 0.0, out);
    CHECK(all_near(out, ww, 4, 1e-15));
    wgml_ref_rmsnorm(1, 4, x, NULL, 0.5, out); /* 1 / sqrt(8) */
    CHECK(near(out[0], 0.35355339059327373, 1e-15));
}

/* ---------------------------------------------------------------- movement */

static void test_permute(void)
{
    /* (2,3) transpose -> (3,2) */
    {
        double x[6] = {1, 2, 3, 4, 5, 6}, out[6], want[6] = {1, 4, 2, 5, 3, 6};
        int64_t s[2] = {2, 3};
        int axes[2] = {1, 0};
        wgml_ref_permute(2, s, x, axes, out);
        CHECK(memcmp(out, want, sizeof want) == 0);
    }
    /* (2,3,4) with axes (2,0,1) -> (4,2,3): out[k,i,j] = x[i,j,k] */
    {
        double x[24], out[24];
        for (int i = 0; i < 24; i++) x[i] = i;
        int64_t s[3] = {2, 3, 4};
        int axes[3] = {2, 0, 1}, bad = 0;
        wgml_ref_permute(3, s, x, axes, out);
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++)
                    if (out[(k * 2 + i) * 3 + j] != x[(i * 3 + j) * 4 + k]) bad++;
        CHECK(bad == 0);
        /* identity */
        int id[3] = {0, 1, 2};
        wgml_ref_permute(3, s, x, id, out);
        CHECK(memcmp(out, x, sizeof x) == 0);
        /* 4-D (2,3,2,2), axes (3,1,0,2): out[l,j,i,k] = x[i,j,k,l] */
        int64_t s4[4] = {2, 3, 2, 2};
        int a4[4] = {3, 1, 0, 2};
        wgml_ref_permute(4, s4, x, a4, out);
        bad = 0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 2; k++)
                    for (int l = 0; l < 2; l++)
                        if (out[((l * 3 + j) * 2 + i) * 2 + k] != x[((i * 3 + j) * 2 + k) * 2 + l])
                            bad++;
        CHECK(bad == 0);
        /* not a permutation: nothing written */
        int dup[3] = {0, 0, 1};
        out[0] = -1;
        wgml_ref_permute(3, s, x, dup, out);
        CHECK(out[0] == -1);
    }
}

static void test_slice(void)
{
    /* x (2,5) = 0..9; along axis 1, [1, 5) step 2 -> columns 1, 3 */
    double x[10], out[10];
    for (int i = 0; i < 10; i++) x[i] = i;
    int64_t s[2] = {2, 5};
    CHECK(wgml_ref_slice_len(1, 5, 2) == 2);
    CHECK(wgml_ref_slice_len(0, 5, 2) == 3);
    CHECK(wgml_ref_slice_len(3, 3, 1) == 0);
    wgml_ref_slice(2, s, x, 1, 1, 5, 2, out);
    double want[4] = {1, 3, 6, 8};
    CHECK(memcmp(out, want, sizeof want) == 0);
    wgml_ref_slice(2, s, x, 0, 1, 2, 1, out); /* row 1 */
    CHECK(memcmp(out, x + 5, 5 * sizeof(double)) == 0);
}

/* ---------------------------------------------------------------- matmul */

static void test_matmul(void)
{
    /* A (2,3) = [[1,2,3],[4,5,6]], B (3,2) = [[7,8],[9,10],[11,12]]: C = [[58,64],[139,154]] */
    double A[6] = {1, 2, 3, 4, 5, 6}, At[6] = {1, 4, 2, 5, 3, 6};
    double B[6] = {7, 8, 9, 10, 11, 12}, Bt[6] = {7, 9, 11, 8, 10, 12};
    double want[4] = {58, 64, 139, 154}, C[8];
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            memset(C, 0, sizeof C);
            wgml_ref_matmul(1, 2, 2, 3, ta ? At : A, 1, ta, tb ? Bt : B, 1, tb, 1.0, NULL, 0, C);
            if (!all_near(C, want, 4, 0)) {
                fprintf(stderr, "  trans_a %d trans_b %d\n", ta, tb);
                CHECK(0);
            }
        }
    /* alpha and bias: 0.5 * C + [1, -100] */
    {
        double bias[2] = {1, -100};
        double w2[4] = {30, -68, 70.5, -23};
        wgml_ref_matmul(1, 2, 2, 3, A, 1, 0, B, 1, 0, 0.5, bias, 0, C);
        CHECK(all_near(C, w2, 4, 0));
        double w3[4] = {30, 0, 70.5, 0}; /* relu */
        wgml_ref_matmul(1, 2, 2, 3, A, 1, 0, B, 1, 0, 0.5, bias, 1, C);
        CHECK(all_near(C, w3, 4, 0));
        double w4[4], w5[4];
        for (int i = 0; i < 4; i++) {
            w4[i] = wgml_ref_gelu(w2[i]);
            w5[i] = wgml_ref_silu(w2[i]);
        }
        wgml_ref_matmul(1, 2, 2, 3, A, 1, 0, B, 1, 0, 0.5, bias, 2, C);
        CHECK(all_near(C, w4, 4, 0));
        wgml_ref_matmul(1, 2, 2, 3, A, 1, 0, B, 1, 0, 0.5, bias, 3, C);
        CHECK(all_near(C, w5, 4, 0));
    }
    /* (3,2) x (2,3) with a small-value activation: gelu(-0.25) by the formula */
    {
        double a[2] = {0.5, -1.0}, b[2] = {0.5, 0.5}; /* (1,2) x (2,1) = -0.25 */
        wgml_ref_matmul(1, 1, 1, 2, a, 1, 0, b, 1, 0, 1.0, NULL, 2, C);
        CHECK(near(C[0], -0.100324649298315, 1e-15));
    }
    /* batch 2 with A shared (batch_a 1) and B per batch, the second B negated */
    {
        double B2[12];
        for (int i = 0; i < 6; i++) {
            B2[i] = B[i];
            B2[6 + i] = -B[i];
        }
        double w6[8] = {58, 64, 139, 154, -58, -64, -139, -154};
        wgml_ref_matmul(2, 2, 2, 3, A, 1, 0, B2, 2, 0, 1.0, NULL, 0, C);
        CHECK(all_near(C, w6, 8, 0));
        /* per-batch A, shared transposed B */
        double A2[12];
        for (int i = 0; i < 6; i++) {
            A2[i] = A[i];
            A2[6 + i] = 2 * A[i];
        }
        double w7[8] = {58, 64, 139, 154, 116, 128, 278, 308};
        wgml_ref_matmul(2, 2, 2, 3, A2, 2, 0, Bt, 1, 1, 1.0, NULL, 0, C);
        CHECK(all_near(C, w7, 8, 0));
    }
    /* K = 1 and M = N = 1 edge shapes */
    {
        double a[3] = {1, 2, 3}, b[2] = {10, 20};
        double w8[6] = {10, 20, 20, 40, 30, 60};
        wgml_ref_matmul(1, 3, 2, 1, a, 1, 0, b, 1, 0, 1.0, NULL, 0, C);
        CHECK(all_near(C, w8, 6, 0));
        wgml_ref_matmul(1, 1, 1, 3, a, 1, 0, a, 1, 0, 1.0, NULL, 0, C);
        CHECK(C[0] == 14);
    }
}

/* ---------------------------------------------------------------- losses */

static void test_losses(void)
{
    double p[2] = {1, 2}, t[2] = {0, 4};
    CHECK(wgml_ref_mse(2, p, t) == 2.5);
    CHECK(wgml_ref_mse(1, p, p) == 0);
    CHECK(isnan(wgml_ref_mse(0, p, t)));
    double logits[2][3] = {{1, 2, 3}, {1, 2, 3}};
    int32_t labels[2] = {2, 0};
    /* -log_softmax: 0.40760596444438, 2.40760596444438 */
    CHECK(near(wgml_ref_cross_entropy(2, 3, &logits[0][0], labels), 1.4076059644443805, 1e-15));
    CHECK(near(wgml_ref_cross_entropy(1, 3, &logits[0][0], labels), 0.4076059644443804, 1e-14));
    double big[2] = {1000, 0};
    int32_t l1[1] = {1};
    CHECK(near(wgml_ref_cross_entropy(1, 2, big, l1), 1000.0, 1e-15)); /* no overflow */
    int32_t bad[2] = {2, 3};
    CHECK(isnan(wgml_ref_cross_entropy(2, 3, &logits[0][0], bad)));
    int32_t neg[1] = {-1};
    CHECK(isnan(wgml_ref_cross_entropy(1, 3, &logits[0][0], neg)));
}

/* ---------------------------------------------------------------- MLP */

static void test_mlp_gradcheck(void)
{
    enum { B = 3 };
    const int64_t sizes[3] = {5, 4, 3};
    float W0[20], b0[4], W1[12], b1[3], x[B * 5];
    test_seed(777);
    test_fill_uniform(W0, 20, -1, 1);
    test_fill_uniform(b0, 4, -0.5, 0.5);
    test_fill_uniform(W1, 12, -1, 1);
    test_fill_uniform(b1, 3, -0.5, 0.5);
    test_fill_uniform(x, B * 5, -2, 2);
    int32_t labels[B] = {0, 2, 1};
    const float *Wi[2] = {W0, W1}, *bi[2] = {b0, b1};
    wgml_ref_mlp m;
    CHECK(wgml_ref_mlp_init(&m, 2, sizes, Wi, bi) == 0);
    if (m.nlayers != 2) return;
    CHECK(m.W[0][7] == (double)W0[7] && m.b[1][2] == (double)b1[2] && m.step == 0);

    /* the forward pass by hand: h = relu(x W0 + b0), logits = h W1 + b1 */
    double logits[B * 3], want_logits[B * 3];
    for (int r = 0; r < B; r++) {
        double h[4];
        for (int j = 0; j < 4; j++) {
            h[j] = b0[j];
            for (int i = 0; i < 5; i++) h[j] += (double)x[r * 5 + i] * W0[i * 4 + j];
            h[j] = h[j] > 0 ? h[j] : 0;
        }
        for (int c = 0; c < 3; c++) {
            want_logits[r * 3 + c] = b1[c];
            for (int j = 0; j < 4; j++) want_logits[r * 3 + c] += h[j] * W1[j * 3 + c];
        }
    }
    CHECK(wgml_ref_mlp_forward(&m, B, x, logits) == 0);
    CHECK(all_near(logits, want_logits, B * 3, 1e-14));

    double loss = wgml_ref_mlp_loss_grad(&m, B, x, labels);
    CHECK(near(loss, wgml_ref_cross_entropy(B, 3, want_logits, labels), 1e-14));

    /* keep the analytic gradients: every loss_grad call below overwrites them */
    double gW[2][20], gb[2][4];
    for (int l = 0; l < 2; l++) {
        memcpy(gW[l], m.gW[l], (size_t)(sizes[l] * sizes[l + 1]) * sizeof(double));
        memcpy(gb[l], m.gb[l], (size_t)sizes[l + 1] * sizeof(double));
    }
    /* overwrite, not accumulate: a second call gives the same gradients */
    CHECK(wgml_ref_mlp_loss_grad(&m, B, x, labels) == loss);
    CHECK(m.gW[0][3] == gW[0][3] && m.gb[1][1] == gb[1][1]);

    /* central differences on every parameter */
    const double h = 1e-5;
    double worst = 0, gsq = 0;
    int nparams = 0;
    for (int l = 0; l < 2; l++)
        for (int which = 0; which < 2; which++) {
            double *p = which ? m.b[l] : m.W[l];
            const double *g = which ? gb[l] : gW[l];
            int64_t n = which ? sizes[l + 1] : sizes[l] * sizes[l + 1];
            for (int64_t i = 0; i < n; i++) {
                double save = p[i];
                p[i] = save + h;
                double lp = wgml_ref_mlp_loss_grad(&m, B, x, labels);
                p[i] = save - h;
                double lm = wgml_ref_mlp_loss_grad(&m, B, x, labels);
                p[i] = save;
                double fd = (lp - lm) / (2 * h);
                /* relative to the gradient, with a floor for (near) zero entries */
                double den = fmax(fabs(g[i]), 1e-3);
                double e = fabs(fd - g[i]) / den;
                if (e > worst) worst = e;
                gsq += g[i] * g[i];
                nparams++;
            }
        }
    fprintf(stderr, "  gradcheck: %d params, max rel err %.3g\n", nparams, worst);
    CHECK(nparams == 20 + 4 + 12 + 3);
    CHECK(worst < 1e-6);
    /* the gradients are not trivially zero, and grad_norm is their L2 norm */
    CHECK(gsq > 1e-4);
    wgml_ref_mlp_loss_grad(&m, B, x, labels);
    CHECK(near(wgml_ref_mlp_grad_norm(&m), sqrt(gsq), 1e-14));

    /* a bad label: -1, NaN, gradients unchanged */
    int32_t bad[B] = {0, 3, 1};
    double l2 = 0;
    CHECK(wgml_ref_mlp_loss_grad_ex(&m, B, x, bad, &l2) == -1);
    CHECK(isnan(wgml_ref_mlp_loss_grad(&m, B, x, bad)));
    CHECK(m.gW[0][3] == gW[0][3]);

    /* a few AdamW steps lower the loss on this batch */
    double first = wgml_ref_mlp_loss_grad(&m, B, x, labels), last = first;
    for (int s = 0; s < 20; s++) {
        wgml_ref_mlp_adamw_step(&m, 0.01, 0.9, 0.999, 1e-8, 0.0, 1.0);
        last = wgml_ref_mlp_loss_grad(&m, B, x, labels);
    }
    CHECK(m.step == 20);
    CHECK(last < first);
    wgml_ref_mlp_free(&m);
    CHECK(m.W[0] == NULL && m.nlayers == 0);
    wgml_ref_mlp_free(&m); /* a zeroed m is fine */
}

/* a 1-1 "MLP": one weight, one bias; gradients set by hand */
static int one_by_one(wgml_ref_mlp *m, float w, float b)
{
    const int64_t sizes[2] = {1, 1};
    const float *Wi[1] = {&w}, *bi[1] = {&b};
    return wgml_ref_mlp_init(m, 1, sizes, Wi, bi);
}

static void test_adamw_by_hand(void)
{
    wgml_ref_mlp m;
    CHECK(one_by_one(&m, 0.5f, 0.25f) == 0);
    if (m.nlayers != 1) return;
    /* step 1, g = 0.2: m = 0.02, v = 4e-5, mhat = 0.2, vhat = 0.04;
       W = 0.5 - 0.1 * (0.2 / (0.2 + 1e-8) + 0.01 * 0.5) = 0.399500005 (to 1e-17) */
    m.gW[0][0] = 0.2;
    m.gb[0][0] = -0.4;
    wgml_ref_mlp_adamw_step(&m, 0.1, 0.9, 0.999, 1e-8, 0.01, 0.0);
    CHECK(m.step == 1);
    CHECK(near(m.mW[0][0], 0.02, 1e-15) && near(m.vW[0][0], 4e-5, 1e-15));
    CHECK(near(m.W[0][0], 0.399500005, 1e-15));
    /* b: g = -0.4: mhat = -0.4, vhat = 0.16;
       b = 0.25 - 0.1 * (-0.4 / (0.4 + 1e-8) + 0.01 * 0.25) = 0.3497499975 */
    CHECK(near(m.b[0][0], 0.3497499975, 1e-15));
    /* step 2, the same g: m = 0.038, v = 7.996e-5, mhat = 0.038 / 0.19 = 0.2,
       vhat = 7.996e-5 / 0.001999 = 0.04: the same Adam term again;
       W = 0.399500005 - 0.1 * (0.99999995 + 0.00399500005) = 0.299100509995 */
    wgml_ref_mlp_adamw_step(&m, 0.1, 0.9, 0.999, 1e-8, 0.01, 0.0);
    CHECK(m.step == 2);
    CHECK(near(m.mW[0][0], 0.038, 1e-15) && near(m.vW[0][0], 7.996e-5, 1e-14));
    CHECK(near(m.W[0][0], 0.299100509995, 1e-14));
    wgml_ref_mlp_free(&m);
}

static void test_sgd_by_hand(void)
{
    wgml_ref_mlp m;
    CHECK(one_by_one(&m, 0.5f, 0.0f) == 0);
    if (m.nlayers != 1) return;
    /* lr 0.1, momentum 0.9, wd 0.01, g = 0.2 on W, 0 on b:
       step 1: g' = 0.205, buf = 0.205, W = 0.4795
       step 2: g' = 0.2 + 0.004795 = 0.204795, buf = 0.1845 + 0.204795 = 0.389295,
               W = 0.4795 - 0.0389295 = 0.4405705 */
    m.gW[0][0] = 0.2;
    wgml_ref_mlp_sgd_step(&m, 0.1, 0.9, 0.01, 0.0);
    CHECK(near(m.mW[0][0], 0.205, 1e-15) && near(m.W[0][0], 0.4795, 1e-15));
    wgml_ref_mlp_sgd_step(&m, 0.1, 0.9, 0.01, 0.0);
    CHECK(near(m.mW[0][0], 0.389295, 1e-15) && near(m.W[0][0], 0.4405705, 1e-15));
    CHECK(m.b[0][0] == 0 && m.step == 2);
    wgml_ref_mlp_free(&m);

    /* clipping by global norm: g = (0.3, 0.4), norm 0.5 */
    CHECK(one_by_one(&m, 1.0f, 1.0f) == 0);
    if (m.nlayers != 1) return;
    m.gW[0][0] = 0.3;
    m.gb[0][0] = 0.4;
    CHECK(near(wgml_ref_mlp_grad_norm(&m), 0.5, 1e-15));
    wgml_ref_mlp_sgd_step(&m, 1.0, 0.0, 0.0, 1.0); /* 1 / 0.500001 > 1: no clipping */
    CHECK(near(m.W[0][0], 0.7, 1e-15) && near(m.b[0][0], 0.6, 1e-15));
    m.gW[0][0] = 0.3;
    m.gb[0][0] = 0.4;
    double scale = 0.25 / (0.5 + 1e-6);
    wgml_ref_mlp_sgd_step(&m, 1.0, 0.0, 0.0, 0.25);
    CHECK(near(m.W[0][0], 0.7 - 0.3 * scale, 1e-15) && near(m.b[0][0], 0.6 - 0.4 * scale, 1e-15));
    CHECK(near(m.gW[0][0], 0.3 * scale, 1e-15)); /* clipped in place */
    CHECK(near(wgml_ref_mlp_grad_norm(&m), 0.25 / (1 + 2e-6), 1e-15));
    wgml_ref_mlp_free(&m);
}

static void test_mlp_init_args(void)
{
    wgml_ref_mlp m;
    float w[4] = {1, 2, 3, 4};
    const float *Wi[2] = {w, w};
    int64_t sizes[3] = {2, 2, 1};
    CHECK(wgml_ref_mlp_init(&m, 0, sizes, Wi, NULL) == -1 && m.W[0] == NULL);
    CHECK(wgml_ref_mlp_init(&m, 8, sizes, Wi, NULL) == -1);
    int64_t zero[3] = {2, 0, 1};
    CHECK(wgml_ref_mlp_init(&m, 2, zero, Wi, NULL) == -1 && m.W[0] == NULL);
    const float *Wnull[2] = {w, NULL};
    CHECK(wgml_ref_mlp_init(&m, 2, sizes, Wnull, NULL) == -1 && m.W[0] == NULL);
    wgml_ref_mlp_free(&m);
    /* b_init NULL: zero biases */
    CHECK(wgml_ref_mlp_init(&m, 2, sizes, Wi, NULL) == 0);
    if (m.nlayers == 2) {
        CHECK(m.b[0][0] == 0 && m.b[0][1] == 0 && m.b[1][0] == 0);
        CHECK(m.W[1][1] == 2 && m.sizes[2] == 1 && m.gW[0][3] == 0 && m.vb[1][0] == 0);
        double out;
        CHECK(wgml_ref_mlp_forward(&m, 0, (const float[2]){1, 1}, &out) == -1);
        int32_t lab[1] = {0};
        double loss = -1;
        CHECK(wgml_ref_mlp_loss_grad_ex(&m, 1, (const float[2]){1, 1}, lab, &loss) == 0);
        CHECK(loss == 0); /* one class: log_softmax is 0 */
    }
    wgml_ref_mlp_free(&m);
}

int main(void)
{
    TEST_RUN(test_unary_scalars);
    TEST_RUN(test_binary_scalars);
    TEST_RUN(test_nan_propagation);
    TEST_RUN(test_broadcast_shape);
    TEST_RUN(test_binary_broadcast);
    TEST_RUN(test_reductions);
    TEST_RUN(test_softmax);
    TEST_RUN(test_layernorm);
    TEST_RUN(test_rmsnorm);
    TEST_RUN(test_permute);
    TEST_RUN(test_slice);
    TEST_RUN(test_matmul);
    TEST_RUN(test_losses);
    TEST_RUN(test_mlp_gradcheck);
    TEST_RUN(test_adamw_by_hand);
    TEST_RUN(test_sgd_by_hand);
    TEST_RUN(test_mlp_init_args);
    return test_summary();
}
