/* Every op against the double-precision CPU reference: the elementwise ops of the op table
   (walked, so an op added without a test fails here), broadcasting, scalars, IEEE specials,
   reductions, row ops, views, and bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "engine/build.h"
#include "ops/table.h"
#include "harness.h"

/* ---------------------------------------------------------------- helpers */


static float *rand_floats(size_t n, double lo, double hi)
{
    float *x = malloc(n * sizeof *x);
    test_fill_uniform(x, n, lo, hi);
    return x;
}

/* Reads t (n elements) and compares with want; prints `what` on failure. */
static int read_close(wgml_context *ctx, const char *what, wgml_tensor *t, const double *want, size_t n,
                      double tol, double floor)
{
    float *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) got[i] = -12345.0f;
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

static void check_shape(wgml_tensor *t, int nd, const int64_t *shape)
{
    CHECK(wgml_tensor_ndim(t) == nd);
    for (int d = 0; d < nd; d++) CHECK(wgml_tensor_dim(t, d) == shape[d]);
}

/* ---------------------------------------------------------------- elementwise ops, from the table */

/* Every elementwise op's forward on awkward sizes is tests/test_op_table.c's; here: broadcasting,
   numbers as operands and special values, each op's reference, domain and tolerance read from
   its entry (ops/table.c). */

#define ARITH 1e-5
#define TRANSC 1e-4
#define TINY 1e-30

static const float clamp_lo = -1.0f, clamp_hi = 1.5f; /* inside clamp's test domain */

static double floor_of(const wgml_op_def *d) { return d->floor > 0 ? d->floor : TINY; }

/* The entry's reference of one element (clamp with the bounds above). */
static double ref_of(int op, double x, double y)
{
    double in[3] = {x, y};
    if (op == WGML_OP_CLAMP) in[1] = clamp_lo, in[2] = clamp_hi;
    wgml_ref_elementwise_fn f = wgml_ref_elementwise(wgml_op_table[op]->name);
    return f ? f(in) : NAN; /* none: a FAIL of test_op_table */
}

/* wgml_ref_unary and wgml_ref_binary take a function of the values: the op of the call under way */
static int ref_op;
static double ref_unary_now(double x) { return ref_of(ref_op, x, 0); }
static double ref_binary_now(double a, double b) { return ref_of(ref_op, a, b); }

static wgml_tensor *apply(wgml_context *ctx, int op, wgml_tensor *a, wgml_tensor *b)
{
    if (op == WGML_OP_CLAMP) return wgml_clamp(ctx, a, clamp_lo, clamp_hi);
    if (wgml_op_table[op]->kind == WGML_KIND_UNARY) return wgml_unary_node(ctx, (wgml_op)op, a);
    return wgml_binary_node(ctx, (wgml_op)op, a, b);
}

/* Operand k of op from its test domain; a divisor takes either sign (away from zero). */
static void fill_operand(int op, int k, float *v, size_t n)
{
    const wgml_op_def *d = wgml_op_table[op];
    test_fill_uniform(v, n, d->test.lo[k], d->test.hi[k]);
    if (op == WGML_OP_DIV && k == 1)
        for (size_t i = 0; i < n; i++)
            if (test_rand_u64() & 1) v[i] = -v[i];
}

/* ---------------------------------------------------------------- tests */

/* contiguous() of a strided view is a real copy kernel (COPY); of a contiguous tensor a view */
static void contiguous_copies_strided_views(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const struct { int nd; int64_t s[4]; int axes[4]; } cases[] = {
        {2, {3, 5}, {1, 0}}, {2, {33, 65}, {1, 0}}, {3, {2, 3, 7}, {2, 0, 1}}, {4, {2, 3, 4, 5}, {3, 1, 0, 2}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int nd = cases[k].nd;
        size_t n = (size_t)test_numel(nd, cases[k].s);
        float *x = rand_floats(n, -5, 5);
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n);
        wgml_ref_permute(nd, cases[k].s, xd, cases[k].axes, want);
        wgml_tensor *a = test_tensor(ctx, nd, cases[k].s, x);
        wgml_tensor *v = wgml_permute(ctx, a, cases[k].axes);
        wgml_tensor *c = wgml_contiguous(ctx, v);
        CHECK_CLOSE(ctx, "contiguous(permute)", c, want, n, 0, TINY);
        /* and the copy is a real tensor that ops read contiguously */
        wgml_tensor *e = wgml_neg(ctx, c);
        for (size_t i = 0; i < n; i++) want[i] = -want[i];
        CHECK_CLOSE(ctx, "neg(contiguous(permute))", e, want, n, 0, TINY);
        wgml_tensor_free(e);
        wgml_tensor_free(c);
        wgml_tensor_free(v);
        wgml_tensor_free(a);
        free(x);
        free(xd);
        free(want);
    }
}

/* pow with negative bases: integer exponents keep C's sign rules, others give NaN */
static void pow_of_negative_bases(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const size_t sizes[] = {255, 1024}; /* scalar and vec4 paths */
    for (size_t s = 0; s < 2; s++) {
        size_t n = sizes[s];
        float *x = rand_floats(n, -5, -0.2), *y = malloc(n * 4);
        for (size_t i = 0; i < n; i++) y[i] = (float)((int)(test_rand_u64() % 9) - 4); /* -4..4 */
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n), *yd = test_to_double(y, n);
        int64_t sh = (int64_t)n;
        wgml_ref_binary(wgml_ref_pow, 1, &sh, xd, 1, &sh, yd, want);
        wgml_tensor *a = test_tensor(ctx, 1, &sh, x), *b = test_tensor(ctx, 1, &sh, y);
        wgml_tensor *p = wgml_pow(ctx, a, b);
        CHECK_CLOSE(ctx, "pow(negative base, integer exponent)", p, want, n, TRANSC, TINY);
        wgml_tensor_free(p);
        /* non-integer exponents of negative bases: NaN, as C */
        for (size_t i = 0; i < n; i++) y[i] = (float)(i % 2 ? 0.5 : -1.25), yd[i] = y[i];
        CHECK_OK(ctx, wgml_tensor_write(b, y, n));
        wgml_ref_binary(wgml_ref_pow, 1, &sh, xd, 1, &sh, yd, want);
        p = wgml_pow(ctx, a, b);
        CHECK_CLOSE(ctx, "pow(negative base, fraction) is NaN", p, want, n, 0, TINY);
        wgml_tensor_free(p);
        wgml_tensor_free(a);
        wgml_tensor_free(b);
        free(x);
        free(y);
        free(xd);
        free(yd);
        free(want);
    }
}

/* one broadcast pattern, both operand orders, every public binary op */
static void broadcast_case(wgml_context *ctx, int na, const int64_t *sa, int nb, const int64_t *sb)
{
    int64_t so[8];
    int no = 0;
    CHECK(wgml_ref_broadcast_shape(na, sa, nb, sb, &no, so) == 0);
    size_t n_a = (size_t)test_numel(na, sa), n_b = (size_t)test_numel(nb, sb), n = (size_t)test_numel(no, so);
    for (int op = WGML_ADD; op <= WGML_MINIMUM; op++) {
        int top = wgml_binary_api_op((wgml_binary_op)op);
        const wgml_op_def *c = wgml_op_table[top];
        for (int order = 0; order < 2; order++) {
            /* order 0: op(A, B); order 1: op(B, A), with the ranges following the position */
            int n1 = order ? nb : na, n2 = order ? na : nb;
            const int64_t *s1 = order ? sb : sa, *s2 = order ? sa : sb;
            size_t c1 = order ? n_b : n_a, c2 = order ? n_a : n_b;
            float *x = malloc(c1 * 4), *y = malloc(c2 * 4);
            fill_operand(top, 0, x, c1);
            fill_operand(top, 1, y, c2);
            double *want = malloc(n * sizeof *want), *xd = test_to_double(x, c1), *yd = test_to_double(y, c2);
            ref_op = top;
            wgml_ref_binary(ref_binary_now, n1, s1, xd, n2, s2, yd, want);
            wgml_tensor *a = test_tensor(ctx, n1, s1, x), *b = test_tensor(ctx, n2, s2, y);
            wgml_tensor *r = wgml_binary(ctx, (wgml_binary_op)op, a, b);
            check_shape(r, no, so);
            char what[128], q1[48], q2[48];
            test_shape_str(q1, sizeof q1, n1, s1);
            test_shape_str(q2, sizeof q2, n2, s2);
            snprintf(what, sizeof what, "%s(%s, %s)", c->name, q1, q2);
            CHECK_CLOSE(ctx, what, r, want, n, c->tol, floor_of(c));
            wgml_tensor_free(r);
            wgml_tensor_free(a);
            wgml_tensor_free(b);
            free(x);
            free(y);
            free(xd);
            free(yd);
            free(want);
        }
    }
}

static void broadcasting_patterns(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t one[1] = {1}, n1[1] = {1023}, n2[1] = {4100};
    broadcast_case(ctx, 1, n1, 1, one);
    broadcast_case(ctx, 1, n2, 1, one); /* vec4 kernel with a scalar leaf */
    int64_t a31[2] = {3, 1}, a15[2] = {1, 5};
    broadcast_case(ctx, 2, a31, 2, a15);
    int64_t a234[3] = {2, 3, 4}, a4[1] = {4};
    broadcast_case(ctx, 3, a234, 1, a4);
    int64_t a214[3] = {2, 1, 4};
    broadcast_case(ctx, 3, a214, 2, a31);
    int64_t a2345[4] = {2, 3, 4, 5}, a315[3] = {3, 1, 5};
    broadcast_case(ctx, 4, a2345, 3, a315);
}

/* op(a, s) and op(s, a); another value of s reuses the compiled kernel */
static void scalar_operands(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const size_t sizes[] = {1023, 4100};
    for (size_t si = 0; si < 2; si++) {
        size_t n = sizes[si];
        int64_t sh = (int64_t)n;
        for (int op = WGML_ADD; op <= WGML_MINIMUM; op++) {
            int top = wgml_binary_api_op((wgml_binary_op)op);
            const wgml_op_def *c = wgml_op_table[top];
            for (int side = 1; side <= 2; side++) {
                /* the tensor takes the range of its position; the scalar one of the other */
                float *x = malloc(n * 4);
                fill_operand(top, side == 1 ? 0 : 1, x, n);
                const float svals[2][2] = {{1.75f, -2.5f}, {2.25f, 0.625f}};
                /* scalars valid for the other position: for pow, side 1 is an exponent
                   (any), side 2 a positive base; for div side 1 a denominator != 0 */
                const float *sv = (op == WGML_POW && side == 2) ? svals[1] : svals[0];
                wgml_tensor *a = test_tensor(ctx, 1, &sh, x);
                double *want = malloc(n * sizeof *want);
                uint64_t compiled_after_first = 0;
                for (int v = 0; v < 2; v++) {
                    float s = sv[v];
                    for (size_t i = 0; i < n; i++)
                        want[i] = side == 1 ? ref_of(top, x[i], s) : ref_of(top, s, x[i]);
                    wgml_tensor *r = side == 1 ? wgml_binary_scalar(ctx, (wgml_binary_op)op, a, s)
                                               : wgml_scalar_binary(ctx, (wgml_binary_op)op, s, a);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s scalar %g (n=%zu)", c->name, side == 1 ? "tensor," : "scalar,",
                             (double)s, n);
                    CHECK_CLOSE(ctx, what, r, want, n, c->tol, floor_of(c));
                    wgml_tensor_free(r);
                    wgml_stats st;
                    wgml_stats_get(ctx, &st);
                    if (v == 0) compiled_after_first = st.pipelines_compiled;
                    else CHECK(st.pipelines_compiled == compiled_after_first); /* same kernel */
                }
                wgml_tensor_free(a);
                free(x);
                free(want);
            }
        }
    }
}

typedef wgml_tensor *(*reduce_fn)(wgml_context *, wgml_tensor *, int, int);
typedef void (*reduce_ref)(int, const int64_t *, const double *, int, double *);

/* NaN and +-inf propagate as IEEE (pow as C's): every pair of special and plain values
   through every elementwise op of the table, then the reductions and row ops. NaN
   wins in maximum, minimum, max and argmax, as in NumPy. Drivers fold x != x to false, so
   the kernels test NaN by its bits. */
static void nan_and_inf_propagate(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const float sp[8] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.5f, -2.5f, 3.0f};
    float a[64], b[64];
    double ad[64], bd[64];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            a[i * 8 + j] = sp[i], b[i * 8 + j] = sp[j];
            ad[i * 8 + j] = sp[i], bd[i * 8 + j] = sp[j];
        }
    double want[64];
    char what[96];
    /* 64 elements: the vec4 kernel; 63: the scalar one */
    for (int64_t n = 63; n <= 64; n++) {
        wgml_tensor *ta = test_tensor(ctx, 1, &n, a), *tb = test_tensor(ctx, 1, &n, b);
        for (int op = 0; op < WGML_OP_COUNT; op++) {
            const wgml_op_def *c = wgml_op_table[op];
            if (!wgml_op_is_elementwise(op) || c->i32_only) continue; /* NaN has no i32 */
            ref_op = op;
            if (c->kind == WGML_KIND_UNARY) wgml_ref_unary(ref_unary_now, n, ad, want);
            else wgml_ref_binary(ref_binary_now, 1, &n, ad, 1, &n, bd, want);
            wgml_tensor *r = apply(ctx, op, ta, tb);
            snprintf(what, sizeof what, "%s with NaN/inf (n=%lld)", c->name, (long long)n);
            CHECK_CLOSE(ctx, what, r, want, (size_t)n, c->tol, floor_of(c));
            wgml_tensor_free(r);
        }
        /* a NaN clamp bound is refused (INVALID_ARGUMENT, test_validation) */
        wgml_tensor *r = wgml_clamp(ctx, ta, NAN, 1.5f);
        CHECK(wgml_tensor_status(r) == WGML_ERROR_INVALID_ARGUMENT);
        wgml_tensor_free(r);
        wgml_tensor_free(ta);
        wgml_tensor_free(tb);
    }

    /* rows: a NaN among finite values (not first: the max must not drop it), +inf, -inf,
       both infinities, all -inf, +inf and NaN, finite with signed zeros and a tie */
    const float inf = INFINITY;
    const float x[56] = {
        1, NAN, 2, 3, -2.5f, 0, -0.0f, 1.5f,   1, 2, inf, 3, -2.5f, 0, -0.0f, 1.5f,
        1, 2, -inf, 3, -2.5f, 0, -0.0f, 1.5f,  -inf, 2, inf, 3, -2.5f, 0, -0.0f, 1.5f,
        -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf,
        1, inf, 2, NAN, -2.5f, 0, -0.0f, 1.5f, -0.0f, 2, 0, 3, -2.5f, 3, -0.0f, 1.5f,
    };
    int64_t shape[2] = {7, 8};
    wgml_tensor *tx = test_tensor(ctx, 2, shape, x);
    double *xd = test_to_double(x, 56);
    const struct { const char *name; reduce_fn fn; reduce_ref ref; double tol; } reds[] = {
        {"sum", wgml_sum, wgml_ref_sum, 1e-5}, {"max", wgml_max, wgml_ref_max, 0},
        {"argmax", wgml_argmax, wgml_ref_argmax, 0},
    };
    for (int ax = 0; ax < 2; ax++)
        for (size_t k = 0; k < sizeof reds / sizeof reds[0]; k++) {
            reds[k].ref(2, shape, xd, ax, want);
            wgml_tensor *r = reds[k].fn(ctx, tx, ax, 0);
            snprintf(what, sizeof what, "%s along axis %d with NaN/inf", reds[k].name, ax);
            CHECK_CLOSE(ctx, what, r, want, (size_t)shape[1 - ax], reds[k].tol, TINY);
            wgml_tensor_free(r);
        }
    wgml_ref_softmax(7, 8, xd, want);
    wgml_tensor *r = wgml_softmax(ctx, tx);
    CHECK_CLOSE(ctx, "softmax with NaN/inf", r, want, 56, 1e-5, TINY);
    wgml_tensor_free(r);
    wgml_ref_log_softmax(7, 8, xd, want);
    r = wgml_log_softmax(ctx, tx);
    CHECK_CLOSE(ctx, "log_softmax with NaN/inf", r, want, 56, 1e-4, TINY);
    wgml_tensor_free(r);
    wgml_tensor_free(tx);
    free(xd);
}

/* ---------------------------------------------------------------- reductions */

static void reductions_along_every_axis(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const struct { int nd; int64_t s[4]; } shapes[] = {
        {1, {1023}}, {2, {7, 13}}, {3, {3, 5, 7}}, {4, {2, 3, 4, 5}}, {2, {300, 3}}, {1, {1}},
    };
    const struct { const char *name; reduce_fn fn; reduce_ref ref; double tol; } ops[] = {
        {"sum", wgml_sum, wgml_ref_sum, 1e-5}, {"mean", wgml_mean, wgml_ref_mean, 1e-5},
        {"max", wgml_max, wgml_ref_max, 0}, {"argmax", wgml_argmax, wgml_ref_argmax, 0},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int nd = shapes[k].nd;
        const int64_t *shape = shapes[k].s;
        size_t n = (size_t)test_numel(nd, shape);
        /* [0.5, 1.5]: no cancellation in the sums; random floats so max/argmax have no ties */
        float *x = rand_floats(n, 0.5, 1.5);
        wgml_tensor *a = test_tensor(ctx, nd, shape, x);
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n);
        for (int ax = 0; ax < nd; ax++) {
            for (size_t o = 0; o < 4; o++) {
                ops[o].ref(nd, shape, xd, ax, want);
                size_t nout = n / (size_t)shape[ax];
                for (int keep = 0; keep <= 1; keep++) {
                    /* also the same axis counted from the end */
                    int axis_arg = keep ? ax - nd : ax;
                    wgml_tensor *r = ops[o].fn(ctx, a, axis_arg, keep);
                    int64_t want_shape[4];
                    int wn = 0;
                    for (int d = 0; d < nd; d++) {
                        if (d != ax) want_shape[wn++] = shape[d];
                        else if (keep) want_shape[wn++] = 1;
                    }
                    if (wn == 0) want_shape[wn++] = 1;
                    check_shape(r, wn, want_shape);
                    char what[96], ss[48];
                    test_shape_str(ss, sizeof ss, nd, shape);
                    snprintf(what, sizeof what, "%s(%s, axis %d, keepdim %d)", ops[o].name, ss, axis_arg, keep);
                    CHECK_CLOSE(ctx, what, r, want, nout, ops[o].tol, TINY);
                    wgml_tensor_free(r);
                }
            }
        }
        wgml_tensor_free(a);
        free(x);
        free(xd);
        free(want);
    }
}

/* Sums over a long axis of wide rows (a bias's gradient, [rows, N] over rows), which the
   column-sum kernel takes four columns a thread (one where rows of 1,030 are no multiple of
   4), in one launch or through partials, against the double reference: rows of 32, 36,
   1,024 and 1,030, axes of 65 to 70,001 (past 65,536: chunks longer than 256 rows), several
   leading matrices, and from a row view (an offset) */
static void column_sums_of_long_axes(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t cases[][3] = {{1, 65, 32}, {3, 1023, 36}, {1, 4097, 1024}, {2, 257, 1030}, {1, 70001, 32}, {1, 256, 64}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int from = 0; from < 2; from++) {
            int64_t outer = cases[k][0], len = cases[k][1] + from, inner = cases[k][2], shape[3] = {outer, len, inner};
            size_t n = (size_t)(outer * len * inner);
            float *x = rand_floats(n, -1, 1);
            wgml_tensor *a = test_tensor(ctx, 3, shape, x);
            /* from 1: rows 1.. of each matrix, a view starting at element inner */
            wgml_tensor *v = from ? wgml_slice(ctx, a, 1, 1, len, 1) : a;
            wgml_tensor *r = wgml_sum(ctx, v, 1, 0);
            int64_t rows = len - from;
            double *want = malloc((size_t)(outer * inner) * sizeof *want), *mag = malloc((size_t)(outer * inner) * sizeof *mag);
            for (int64_t o = 0; o < outer; o++)
                for (int64_t c = 0; c < inner; c++) {
                    double sum = 0, m = 0;
                    for (int64_t j = from; j < len; j++) {
                        double e = x[(o * len + j) * inner + c];
                        sum += e;
                        m += fabs(e);
                    }
                    want[o * inner + c] = sum;
                    mag[o * inner + c] = m;
                }
            float *got = test_read_new(ctx, "column sums", r, outer * inner);
            int bad = 0;
            for (int64_t i = 0; got && i < outer * inner; i++)
                /* f32 sums: each partial rounds at most (rows + 16) times */
                if (fabs(got[i] - want[i]) > (double)(rows + 16) * 0x1p-24 * mag[i] && bad++ < 3)
                    FAILF("sum over %lld rows of [%lld, %lld, %lld] from row %d: output %lld = %.9g, reference %.9g", (long long)rows,
                          (long long)outer, (long long)len, (long long)inner, from, (long long)i, got[i], want[i]);
            free(got);
            free(want);
            free(mag);
            wgml_tensor_free(r);
            if (from) wgml_tensor_free(v);
            wgml_tensor_free(a);
            free(x);
        }
}

static void reductions_over_all_elements(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const struct { int nd; int64_t s[4]; } shapes[] = {{1, {65537}}, {3, {7, 9, 1041}}, {2, {1, 1}}};
    for (size_t k = 0; k < 3; k++) {
        size_t n = (size_t)test_numel(shapes[k].nd, shapes[k].s);
        float *x = rand_floats(n, 0.5, 1.5);
        x[n / 3] = 1.75f; /* a unique max */
        wgml_tensor *a = test_tensor(ctx, shapes[k].nd, shapes[k].s, x);
        double w, *xd = test_to_double(x, n);
        wgml_tensor *r = wgml_sum_all(ctx, a);
        check_shape(r, 1, (int64_t[]){1});
        w = wgml_ref_sum_all((int64_t)n, xd);
        CHECK_CLOSE(ctx, "sum_all", r, &w, 1, 1e-5, TINY);
        wgml_tensor_free(r);
        r = wgml_mean_all(ctx, a);
        w = wgml_ref_mean_all((int64_t)n, xd);
        CHECK_CLOSE(ctx, "mean_all", r, &w, 1, 1e-5, TINY);
        wgml_tensor_free(r);
        r = wgml_max_all(ctx, a);
        w = wgml_ref_max_all((int64_t)n, xd);
        CHECK_CLOSE(ctx, "max_all", r, &w, 1, 0, TINY);
        wgml_tensor_free(r);
        wgml_tensor_free(a);
        free(x);
        free(xd);
    }
    /* max and argmax with NaN: NaN wins, the first NaN's index */
    float y[300];
    test_fill_uniform(y, 300, -1, 1);
    y[17] = NAN;
    y[250] = NAN;
    int64_t sh = 300;
    wgml_tensor *a = test_tensor(ctx, 1, &sh, y);
    double w, *yd = test_to_double(y, 300);
    wgml_tensor *r = wgml_max(ctx, a, 0, 0);
    w = wgml_ref_max_all(300, yd);
    CHECK_CLOSE(ctx, "max with NaN", r, &w, 1, 0, TINY);
    wgml_tensor_free(r);
    r = wgml_argmax(ctx, a, 0, 0);
    wgml_ref_argmax(1, &sh, yd, 0, &w);
    CHECK_CLOSE(ctx, "argmax with NaN", r, &w, 1, 0, TINY);
    wgml_tensor_free(r);
    wgml_tensor_free(a);
    free(yd);
}

/* ---------------------------------------------------------------- row ops */

static const struct { int nd; int64_t s[4]; } row_shapes[] = {
    {2, {1, 7}}, {2, {7, 1023}}, {3, {3, 5, 65}}, {2, {1, 4099}}, {1, {4099}},
    /* multiples of 4: the vec4 kernels, rows held in registers (up to 8192) or re-read */
    {2, {3, 4}}, {2, {5, 1024}}, {2, {2, 8192}}, {2, {2, 8196}},
};
#define NROWSHAPES (sizeof row_shapes / sizeof row_shapes[0])

static void softmax_and_log_softmax(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    for (size_t k = 0; k < NROWSHAPES; k++) {
        int nd = row_shapes[k].nd;
        const int64_t *shape = row_shapes[k].s;
        size_t n = (size_t)test_numel(nd, shape);
        int64_t cols = shape[nd - 1], rows = (int64_t)n / cols;
        float *x = rand_floats(n, -4, 4);
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n);
        wgml_tensor *a = test_tensor(ctx, nd, shape, x);
        char what[96], ss[48];
        test_shape_str(ss, sizeof ss, nd, shape);

        wgml_ref_softmax(rows, cols, xd, want);
        wgml_tensor *r = wgml_softmax(ctx, a);
        check_shape(r, nd, shape);
        snprintf(what, sizeof what, "softmax %s", ss);
        CHECK_CLOSE(ctx, what, r, want, n, 1e-5, TINY);
        wgml_tensor_free(r);

        wgml_ref_log_softmax(rows, cols, xd, want);
        r = wgml_log_softmax(ctx, a);
        check_shape(r, nd, shape);
        snprintf(what, sizeof what, "log_softmax %s", ss);
        CHECK_CLOSE(ctx, what, r, want, n, 1e-4, TINY);
        wgml_tensor_free(r);
        wgml_tensor_free(a);
        free(x);
        free(xd);
        free(want);
    }
}

static void softmax_of_huge_values_stays_finite(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t shape[2] = {3, 300};
    float x[900];
    test_fill_uniform(x, 900, -3, 3);
    x[5] = 1e30f;  /* row 0: two huge values share the mass */
    x[299] = 1e30f;
    x[300 + 7] = 1e30f; /* row 1: one huge, one hugely negative */
    x[300 + 8] = -1e30f;
    x[600 + 100] = -1e30f; /* row 2: only a hugely negative value */
    double want[900], *xd = test_to_double(x, 900);
    wgml_ref_softmax(3, 300, xd, want);
    wgml_tensor *a = test_tensor(ctx, 2, shape, x);
    wgml_tensor *r = wgml_softmax(ctx, a);
    float got[900];
    CHECK_OK(ctx, wgml_tensor_read(r, got, 900));
    int finite = 1;
    for (int i = 0; i < 900; i++) finite &= isfinite(got[i]);
    CHECK(finite);
    CHECK(test_close("softmax with 1e30", got, want, 900, 1e-5, TINY));
    wgml_tensor_free(r);
    /* log_softmax: finite too, and accurate: row 0's two 1e30 entries are -log(2) (x - max
       must be taken before adding log(sum), or 1e30 + log(2) rounds to 1e30 and gives 0) */
    wgml_ref_log_softmax(3, 300, xd, want);
    r = wgml_log_softmax(ctx, a);
    CHECK_OK(ctx, wgml_tensor_read(r, got, 900));
    finite = 1;
    for (int i = 0; i < 900; i++) finite &= isfinite(got[i]);
    CHECK(finite);
    CHECK(test_close("log_softmax with 1e30", got, want, 900, 1e-4, TINY));
    wgml_tensor_free(r);
    wgml_tensor_free(a);
    free(xd);
}

static void layernorm_and_rmsnorm(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const float eps = 1e-5f;
    for (size_t k = 0; k < NROWSHAPES; k++) {
        int nd = row_shapes[k].nd;
        const int64_t *shape = row_shapes[k].s;
        size_t n = (size_t)test_numel(nd, shape);
        int64_t cols = shape[nd - 1], rows = (int64_t)n / cols;
        /* an offset mean (2) so layernorm really subtracts it */
        float *x = rand_floats(n, 1, 3), *w = rand_floats((size_t)cols, 0.5, 2), *b = rand_floats((size_t)cols, -1, 1);
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n);
        double *wd = test_to_double(w, (size_t)cols), *bd = test_to_double(b, (size_t)cols);
        wgml_tensor *a = test_tensor(ctx, nd, shape, x), *tw = test_tensor(ctx, 1, &cols, w), *tb = test_tensor(ctx, 1, &cols, b);
        char what[96], ss[48];
        test_shape_str(ss, sizeof ss, nd, shape);
        /* outputs are O(1) (normalised, times O(1) weights plus O(1) biases); an element
           that lands near zero carries the absolute rounding of (x - mean) * inv ~ 1e-6,
           so the floor is 1e-2 (1e-6 absolute below it) */
        for (int mode = 0; mode < 4; mode++) {
            const double *wp = (mode & 1) ? wd : NULL, *bp = (mode & 2) ? bd : NULL;
            wgml_ref_layernorm(rows, cols, xd, wp, bp, eps, want);
            wgml_tensor *r = wgml_layernorm(ctx, a, wp ? tw : NULL, bp ? tb : NULL, eps);
            check_shape(r, nd, shape);
            snprintf(what, sizeof what, "layernorm %s weight %d bias %d", ss, wp != NULL, bp != NULL);
            CHECK_CLOSE(ctx, what, r, want, n, 1e-4, 1e-2);
            wgml_tensor_free(r);
        }
        for (int mode = 0; mode < 2; mode++) {
            const double *wp = mode ? wd : NULL;
            wgml_ref_rmsnorm(rows, cols, xd, wp, eps, want);
            wgml_tensor *r = wgml_rmsnorm(ctx, a, wp ? tw : NULL, eps);
            check_shape(r, nd, shape);
            snprintf(what, sizeof what, "rmsnorm %s weight %d", ss, wp != NULL);
            CHECK_CLOSE(ctx, what, r, want, n, 1e-5, TINY); /* no cancellation: x > 0 */
            wgml_tensor_free(r);
        }
        wgml_tensor_free(a);
        wgml_tensor_free(tw);
        wgml_tensor_free(tb);
        free(x);
        free(w);
        free(b);
        free(xd);
        free(wd);
        free(bd);
        free(want);
    }
}

/* Rows whose mean (1000) is large next to their spread (1): layernorm must not lose the
   deviations to cancellation (a one-pass sum of squares, or Welford in f32, is off by ~1e-3
   here). Both widths and both paths: 1023 (f32), 1024 (vec4, held in registers), 8196 (vec4,
   re-read). */
static void layernorm_large_mean(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t cols_list[] = {1023, 1024, 8196};
    for (int k = 0; k < 3; k++) {
        int64_t shape[2] = {3, cols_list[k]};
        size_t n = (size_t)(3 * cols_list[k]);
        float *x = rand_floats(n, 999, 1001);
        double *want = malloc(n * sizeof *want), *xd = test_to_double(x, n);
        wgml_tensor *a = test_tensor(ctx, 2, shape, x);
        wgml_ref_layernorm(3, cols_list[k], xd, NULL, NULL, 1e-5f, want);
        wgml_tensor *r = wgml_layernorm(ctx, a, NULL, NULL, 1e-5f);
        char what[64];
        snprintf(what, sizeof what, "layernorm, mean 1000, [3, %lld]", (long long)cols_list[k]);
        CHECK_CLOSE(ctx, what, r, want, n, 1e-4, 1e-2);
        wgml_tensor_free(r);
        wgml_tensor_free(a);
        free(x);
        free(xd);
        free(want);
    }
}

/* ---------------------------------------------------------------- views */

static void views_read_back(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* reshape */
    int64_t s2[2] = {6, 35}, s4[4] = {2, 3, 5, 7};
    float x[210];
    double want[210];
    test_fill_uniform(x, 210, -5, 5);
    double *xd = test_to_double(x, 210);
    wgml_tensor *a = test_tensor(ctx, 2, s2, x);
    wgml_tensor *r = wgml_reshape(ctx, a, 4, s4);
    check_shape(r, 4, s4);
    CHECK_CLOSE(ctx, "reshape", r, xd, 210, 0, TINY);
    wgml_tensor_free(r);

    /* transposes and permutes of 2-D, 3-D, 4-D */
    int64_t m2[2] = {5, 7};
    wgml_tensor *b2 = test_tensor(ctx, 2, m2, x);
    int ax2[2] = {1, 0};
    wgml_ref_permute(2, m2, xd, ax2, want);
    r = wgml_transpose(ctx, b2, 0, 1);
    check_shape(r, 2, (int64_t[]){7, 5});
    CHECK_CLOSE(ctx, "transpose 2-D", r, want, 35, 0, TINY);
    wgml_tensor_free(r);
    /* reshape of a transposed view needs a copy */
    r = wgml_reshape(ctx, wgml_transpose(ctx, b2, -1, -2), 1, (int64_t[]){35});
    CHECK_CLOSE(ctx, "reshape(transpose)", r, want, 35, 0, TINY);
    wgml_tensor_free(r);

    int64_t m3[3] = {3, 5, 7};
    wgml_tensor *b3 = test_tensor(ctx, 3, m3, x);
    const int perms3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++) {
        wgml_ref_permute(3, m3, xd, perms3[p], want);
        r = wgml_permute(ctx, b3, perms3[p]);
        check_shape(r, 3, (int64_t[]){m3[perms3[p][0]], m3[perms3[p][1]], m3[perms3[p][2]]});
        char what[64];
        snprintf(what, sizeof what, "permute 3-D {%d,%d,%d}", perms3[p][0], perms3[p][1], perms3[p][2]);
        CHECK_CLOSE(ctx, what, r, want, 105, 0, TINY);
        wgml_tensor_free(r);
    }
    wgml_tensor *b4 = test_tensor(ctx, 4, s4, x);
    const int perms4[4][4] = {{3, 1, 0, 2}, {0, 2, 1, 3}, {3, 2, 1, 0}, {1, 3, 2, 0}};
    for (int p = 0; p < 4; p++) {
        wgml_ref_permute(4, s4, xd, perms4[p], want);
        r = wgml_permute(ctx, b4, perms4[p]);
        CHECK_CLOSE(ctx, "permute 4-D", r, want, 210, 0, TINY);
        wgml_tensor_free(r);
    }
    /* transpose of a transpose is the original, and of the middle axes of 4-D */
    r = wgml_transpose(ctx, wgml_transpose(ctx, b4, 1, 2), 2, 1);
    CHECK_CLOSE(ctx, "transpose twice", r, xd, 210, 0, TINY);
    wgml_tensor_free(r);

    /* broadcast_to */
    int64_t c31[2] = {3, 1}, t235[3] = {2, 3, 5};
    wgml_tensor *c = test_tensor(ctx, 2, c31, x);
    CHECK(wgml_ref_broadcast_to(2, c31, xd, 3, t235, want) == 0);
    r = wgml_broadcast_to(ctx, c, 3, t235);
    check_shape(r, 3, t235);
    CHECK_CLOSE(ctx, "broadcast_to [3,1]->[2,3,5]", r, want, 30, 0, TINY);
    wgml_tensor_free(r);

    /* slices with steps */
    int64_t m713[2] = {7, 13};
    wgml_tensor *d = test_tensor(ctx, 2, m713, x);
    const struct { int axis; int64_t start, stop, step; } sl[] = {
        {1, 2, 12, 3}, {0, 1, 7, 2}, {-1, 0, 13, 1}, {0, 3, 4, 1}, {1, 12, 13, 5}, {0, 0, 7, 6},
    };
    for (size_t k = 0; k < sizeof sl / sizeof sl[0]; k++) {
        int ax = sl[k].axis < 0 ? sl[k].axis + 2 : sl[k].axis;
        wgml_ref_slice(2, m713, xd, ax, sl[k].start, sl[k].stop, sl[k].step, want);
        int64_t len = wgml_ref_slice_len(sl[k].start, sl[k].stop, sl[k].step);
        size_t n = (size_t)(len * (ax == 0 ? 13 : 7));
        r = wgml_slice(ctx, d, sl[k].axis, sl[k].start, sl[k].stop, sl[k].step);
        CHECK(wgml_tensor_dim(r, ax) == len);
        char what[64];
        snprintf(what, sizeof what, "slice axis %d [%lld:%lld:%lld]", sl[k].axis, (long long)sl[k].start,
                 (long long)sl[k].stop, (long long)sl[k].step);
        CHECK_CLOSE(ctx, what, r, want, n, 0, TINY);
        wgml_tensor_free(r);
    }
    /* a slice of a slice of a 3-D tensor; a slice of a transpose */
    {
        double t1[105];
        wgml_ref_slice(3, m3, xd, 1, 1, 5, 2, t1); /* [3,2,7] */
        int64_t m327[3] = {3, 2, 7};
        wgml_ref_slice(3, m327, t1, 2, 1, 7, 3, want); /* [3,2,2] */
        r = wgml_slice(ctx, wgml_slice(ctx, b3, 1, 1, 5, 2), 2, 1, 7, 3);
        check_shape(r, 3, (int64_t[]){3, 2, 2});
        CHECK_CLOSE(ctx, "slice of slice", r, want, 12, 0, TINY);
        wgml_tensor_free(r);
        int64_t m75[2] = {7, 5};
        wgml_ref_permute(2, m2, xd, ax2, t1); /* [7,5] */
        wgml_ref_slice(2, m75, t1, 0, 2, 7, 2, want);
        r = wgml_slice(ctx, wgml_transpose(ctx, b2, 0, 1), 0, 2, 7, 2);
        CHECK_CLOSE(ctx, "slice of transpose", r, want, 15, 0, TINY);
        wgml_tensor_free(r);
    }
    wgml_tensor_free(a);
    wgml_tensor_free(b2);
    wgml_tensor_free(b3);
    wgml_tensor_free(b4);
    wgml_tensor_free(c);
    wgml_tensor_free(d);
    free(xd);
}

static void views_as_op_inputs(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[1155], y[1155];
    double want[1155], tmp[1155], tmp2[1155];
    test_fill_uniform(x, 1155, -2, 2);
    test_fill_uniform(y, 1155, -2, 2);
    double *xd = test_to_double(x, 1155), *yd = test_to_double(y, 1155);
    int64_t m57[2] = {5, 7}, m75[2] = {7, 5};
    int ax2[2] = {1, 0};
    wgml_tensor *a = test_tensor(ctx, 2, m57, x), *b = test_tensor(ctx, 2, m75, y);

    /* add(transpose(a), b) */
    wgml_ref_permute(2, m57, xd, ax2, tmp);
    wgml_ref_binary(wgml_ref_add, 2, m75, tmp, 2, m75, yd, want);
    wgml_tensor *r = wgml_add(ctx, wgml_transpose(ctx, a, 0, 1), b);
    CHECK_CLOSE(ctx, "add(transpose(a), b)", r, want, 35, ARITH, TINY);
    wgml_tensor_free(r);

    /* exp(slice(a)) */
    int64_t m1155[3] = {5, 11, 21};
    wgml_tensor *big = test_tensor(ctx, 3, m1155, x);
    wgml_ref_slice(3, m1155, xd, 2, 1, 20, 4, tmp); /* [5,11,5] */
    wgml_ref_unary(wgml_ref_exp, 275, tmp, want);
    r = wgml_exp(ctx, wgml_slice(ctx, big, 2, 1, 20, 4));
    check_shape(r, 3, (int64_t[]){5, 11, 5});
    CHECK_CLOSE(ctx, "exp(slice(a))", r, want, 275, TRANSC, TINY);
    wgml_tensor_free(r);

    /* a contiguous slice at an offset (rows 1..4 of [5,11,21]: 924 elements, a multiple of 4,
       at offset 231, which is not: the kernel must not read it as aligned vec4s) */
    wgml_ref_slice(3, m1155, xd, 0, 1, 5, 1, tmp); /* [4,11,21]: 924 elements at offset 231 */
    wgml_ref_unary(wgml_ref_neg, 924, tmp, want);
    r = wgml_neg(ctx, wgml_slice(ctx, big, 0, 1, 5, 1));
    CHECK_CLOSE(ctx, "neg(slice at an odd offset)", r, want, 924, 0, TINY);
    wgml_tensor_free(r);
    /* and read directly: a contiguous view at an offset */
    r = wgml_slice(ctx, big, 0, 1, 5, 1);
    CHECK_CLOSE(ctx, "read of a contiguous slice", r, tmp, 924, 0, TINY);
    wgml_tensor_free(r);

    /* mul(broadcast_to(c), permute(big)) */
    int64_t c1[3] = {1, 5, 1}, m21_5_11[3] = {21, 5, 11};
    int perm[3] = {2, 0, 1};
    wgml_tensor *cc = test_tensor(ctx, 3, c1, y);
    CHECK(wgml_ref_broadcast_to(3, c1, yd, 3, m21_5_11, tmp) == 0);
    wgml_ref_permute(3, m1155, xd, perm, tmp2);
    wgml_ref_binary(wgml_ref_mul, 3, m21_5_11, tmp, 3, m21_5_11, tmp2, want);
    r = wgml_mul(ctx, wgml_broadcast_to(ctx, cc, 3, m21_5_11), wgml_permute(ctx, big, perm));
    CHECK_CLOSE(ctx, "mul(broadcast_to, permute)", r, want, 1155, ARITH, TINY);
    wgml_tensor_free(r);

    /* reductions and row ops of views */
    wgml_ref_permute(3, m1155, xd, perm, tmp2);
    for (int i = 0; i < 1155; i++) tmp2[i] += 3.0; /* positive: sums without cancellation */
    wgml_tensor *shifted = wgml_binary_scalar(ctx, WGML_ADD, wgml_permute(ctx, big, perm), 3.0f);
    wgml_ref_sum(3, m21_5_11, tmp2, 1, want);
    r = wgml_sum(ctx, shifted, 1, 0);
    CHECK_CLOSE(ctx, "sum(permute(a) + 3, axis 1)", r, want, 231, 1e-5, TINY);
    wgml_tensor_free(r);
    wgml_ref_permute(3, m1155, xd, perm, tmp2);
    wgml_ref_softmax(105, 11, tmp2, want);
    r = wgml_softmax(ctx, wgml_permute(ctx, big, perm));
    CHECK_CLOSE(ctx, "softmax(permute(a))", r, want, 1155, 1e-5, TINY);
    wgml_tensor_free(r);
    wgml_ref_max(3, m21_5_11, tmp2, 2, want);
    r = wgml_max(ctx, wgml_permute(ctx, big, perm), -1, 1);
    CHECK_CLOSE(ctx, "max(permute(a), -1)", r, want, 105, 0, TINY);
    wgml_tensor_free(r);

    wgml_tensor_free(shifted);
    wgml_tensor_free(cc);
    wgml_tensor_free(big);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    free(xd);
    free(yd);
}

/* views of lazy (not yet evaluated) results */
static void views_of_lazy_results(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[420], y[420];
    double want[420];
    test_fill_uniform(x, 420, -2, 2);
    test_fill_uniform(y, 420, -2, 2);
    double *xd = test_to_double(x, 420), *yd = test_to_double(y, 420);
    int64_t m3[3] = {4, 7, 15}, m2[2] = {28, 15};
    wgml_tensor *a = test_tensor(ctx, 3, m3, x), *b = test_tensor(ctx, 3, m3, y);

    /* transpose(exp(a)) */
    int perm[3] = {2, 0, 1};
    double e[420];
    wgml_ref_unary(wgml_ref_exp, 420, xd, e);
    wgml_ref_permute(3, m3, e, perm, want);
    wgml_tensor *r = wgml_permute(ctx, wgml_exp(ctx, a), perm);
    CHECK_CLOSE(ctx, "permute(exp(a))", r, want, 420, TRANSC, TINY);
    wgml_tensor_free(r);
    r = wgml_transpose(ctx, wgml_reshape(ctx, wgml_exp(ctx, a), 2, m2), 0, 1);
    int ax2[2] = {1, 0};
    wgml_ref_permute(2, m2, e, ax2, want);
    CHECK_CLOSE(ctx, "transpose(reshape(exp(a)))", r, want, 420, TRANSC, TINY);
    wgml_tensor_free(r);

    /* slice(mul(a, b)) then added to another view: the lazy product is read through a view */
    double pr[420];
    wgml_ref_binary(wgml_ref_mul, 3, m3, xd, 3, m3, yd, pr);
    double t2[120], t3[120];
    wgml_ref_slice(3, m3, pr, 1, 1, 7, 3, t2); /* [4,2,15] */
    wgml_ref_slice(3, m3, yd, 1, 0, 2, 1, t3); /* [4,2,15] */
    int64_t m4215[3] = {4, 2, 15};
    wgml_ref_binary(wgml_ref_add, 3, m4215, t2, 3, m4215, t3, want);
    wgml_tensor *prod = wgml_mul(ctx, a, b);
    r = wgml_add(ctx, wgml_slice(ctx, prod, 1, 1, 7, 3), wgml_slice(ctx, b, 1, 0, 2, 1));
    CHECK_CLOSE(ctx, "slice(mul(a,b)) + slice(b)", r, want, 120, ARITH, TINY);
    wgml_tensor_free(r);
    /* the lazy product itself, read afterwards */
    CHECK_CLOSE(ctx, "mul(a,b) after its view was used", prod, pr, 420, ARITH, TINY);
    wgml_tensor_free(prod);

    /* broadcast_to of a lazy reduction: a - max(a, -1, keepdim) */
    double mx[28];
    wgml_ref_max(3, m3, xd, 2, mx);
    for (int i = 0; i < 420; i++) want[i] = xd[i] - mx[i / 15];
    r = wgml_sub(ctx, a, wgml_broadcast_to(ctx, wgml_max(ctx, a, 2, 1), 3, m3));
    CHECK_CLOSE(ctx, "a - broadcast_to(max(a))", r, want, 420, ARITH, 1e-30);
    wgml_tensor_free(r);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    free(xd);
    free(yd);
}

/* ---------------------------------------------------------------- bad input */

static void bad_input_gives_error_tensors(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[64];
    test_fill_uniform(x, 64, 1, 2);
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s7[1] = {7};
    wgml_tensor *a = test_tensor(ctx, 2, s23, x), *b = test_tensor(ctx, 2, s32, x), *v = test_tensor(ctx, 1, s7, x);
    float out[64];

    /* shape mismatch: SHAPE, and the message names both shapes */
    wgml_tensor *e = wgml_add(ctx, a, b);
    CHECK(e != NULL);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    CHECK(wgml_last_status(ctx) == WGML_ERROR_SHAPE);
    CHECK(test_message_has(ctx, "[2, 3]") && test_message_has(ctx, "[3, 2]"));
    /* ops on it inherit the status and the message; reading returns the status */
    wgml_clear_error(ctx);
    wgml_tensor *f = wgml_exp(ctx, e);
    wgml_tensor *g = wgml_mul(ctx, a, f);
    wgml_tensor *h = wgml_sum(ctx, g, 0, 0);
    CHECK(wgml_tensor_status(f) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(g) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(h) == WGML_ERROR_SHAPE);
    wgml_clear_error(ctx);
    CHECK_STATUS(ctx, wgml_tensor_read(h, out, (size_t)wgml_tensor_numel(h)), WGML_ERROR_SHAPE);
    CHECK(test_message_has(ctx, "[2, 3]") && test_message_has(ctx, "[3, 2]"));
    CHECK_STATUS(ctx, wgml_tensor_read(e, out, (size_t)wgml_tensor_numel(e)), WGML_ERROR_SHAPE);
    CHECK_STATUS(ctx, wgml_eval(ctx, 1, &g), WGML_ERROR_SHAPE);
    /* an error tensor among good ones: eval fails, the good one is still fine afterwards */
    wgml_tensor *good = wgml_neg(ctx, a);
    wgml_tensor *both[2] = {good, g};
    CHECK_STATUS(ctx, wgml_eval(ctx, 2, both), WGML_ERROR_SHAPE);
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = -(double)x[i];
    CHECK_CLOSE(ctx, "good tensor after a failed eval", good, want, 6, 0, TINY);
    wgml_tensor_free(good);
    wgml_tensor_free(e);
    wgml_tensor_free(f);
    wgml_tensor_free(g);
    wgml_tensor_free(h);

    /* other shape errors */
    e = wgml_mul(ctx, v, a);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[7]") && test_message_has(ctx, "[2, 3]"));
    wgml_tensor_free(e);
    e = wgml_binary_node(ctx, WGML_OP_RELU_GRAD, a, b);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    e = wgml_reshape(ctx, a, 1, (int64_t[]){7});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3]") && test_message_has(ctx, "[7]"));
    wgml_tensor_free(e);
    e = wgml_broadcast_to(ctx, a, 2, (int64_t[]){2, 4});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3]") && test_message_has(ctx, "[2, 4]"));
    wgml_tensor_free(e);
    e = wgml_broadcast_to(ctx, a, 1, (int64_t[]){3}); /* fewer dims than the input */
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    e = wgml_layernorm(ctx, a, v, NULL, 1e-5f); /* weight [7] for rows of 3 */
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);
    e = wgml_rmsnorm(ctx, a, b, 1e-5f); /* 2-D weight */
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE);
    wgml_tensor_free(e);

    /* invalid axes */
    reduce_fn rfs[4] = {wgml_sum, wgml_mean, wgml_max, wgml_argmax};
    for (int k = 0; k < 4; k++) {
        const int bad_axes[3] = {2, -3, 100};
        for (int j = 0; j < 3; j++) {
            e = rfs[k](ctx, a, bad_axes[j], 0);
            CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
            CHECK_STATUS(ctx, wgml_tensor_read(e, out, 1), WGML_ERROR_INVALID_ARGUMENT);
            wgml_tensor_free(e);
        }
    }
    e = wgml_transpose(ctx, a, 0, 2);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_transpose(ctx, a, -3, 0);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_permute(ctx, a, (int[]){0, 0});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_permute(ctx, a, (int[]){1, 2});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_permute(ctx, a, NULL);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    /* slices: bad axis, empty, out of range, bad step */
    const struct { int axis; int64_t start, stop, step; } bad[] = {
        {2, 0, 1, 1}, {-3, 0, 1, 1}, {1, 2, 2, 1}, {1, 3, 1, 1}, {1, 0, 4, 1}, {0, -1, 1, 1}, {1, 0, 3, 0}, {1, 0, 3, -1},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        e = wgml_slice(ctx, a, bad[k].axis, bad[k].start, bad[k].stop, bad[k].step);
        CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
        wgml_tensor_free(e);
    }

    /* NULL inputs */
    e = wgml_add(ctx, NULL, a);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_add(ctx, a, NULL);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_exp(ctx, NULL);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_sum(ctx, NULL, 0, 0);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_softmax(ctx, NULL);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_transpose(ctx, NULL, 0, 1);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_binary_scalar(ctx, WGML_ADD, NULL, 1.0f);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    e = wgml_binary_scalar(ctx, (wgml_binary_op)99, a, 1.0f);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(e);
    CHECK(wgml_add(NULL, a, a) == NULL);
    CHECK(wgml_exp(NULL, a) == NULL);
    CHECK(wgml_sum(NULL, a, 0, 0) == NULL);

    /* a tensor from another context */
    wgml_context *ctx2 = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx2));
    if (ctx2) {
        wgml_tensor *o = test_tensor(ctx2, 2, s23, x);
        e = wgml_add(ctx, a, o);
        CHECK(wgml_tensor_status(e) == WGML_ERROR_CONTEXT);
        CHECK(wgml_tensor_context(e) == ctx);
        CHECK_STATUS(ctx, wgml_tensor_read(e, out, 1), WGML_ERROR_CONTEXT);
        wgml_tensor_free(e);
        e = wgml_exp(ctx, o);
        CHECK(wgml_tensor_status(e) == WGML_ERROR_CONTEXT);
        wgml_tensor_free(e);
        e = wgml_softmax(ctx, o);
        CHECK(wgml_tensor_status(e) == WGML_ERROR_CONTEXT);
        wgml_tensor_free(e);
        e = wgml_sum(ctx, o, 0, 0);
        CHECK(wgml_tensor_status(e) == WGML_ERROR_CONTEXT);
        wgml_tensor_free(e);
        CHECK_STATUS(ctx, wgml_eval(ctx, 1, &o), WGML_ERROR_CONTEXT);
        /* the other context is untouched and still works */
        wgml_tensor *p = wgml_neg(ctx2, o);
        for (int i = 0; i < 6; i++) want[i] = -(double)x[i];
        CHECK_CLOSE(ctx2, "op in the second context", p, want, 6, 0, TINY);
        wgml_context_free(ctx2);
    }
    /* the first context still works after all these errors */
    wgml_tensor *ok = wgml_add(ctx, a, a);
    for (int i = 0; i < 6; i++) want[i] = 2.0 * x[i];
    CHECK_CLOSE(ctx, "op after errors", ok, want, 6, 0, TINY);
    wgml_tensor_free(ok);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    wgml_tensor_free(v);
}

int main(void)
{
    TEST_RUN(contiguous_copies_strided_views);
    TEST_RUN(pow_of_negative_bases);
    TEST_RUN(broadcasting_patterns);
    TEST_RUN(scalar_operands);
    TEST_RUN(nan_and_inf_propagate);
    TEST_RUN(reductions_along_every_axis);
    TEST_RUN(reductions_over_all_elements);
    TEST_RUN(column_sums_of_long_axes);
    TEST_RUN(softmax_and_log_softmax);
    TEST_RUN(softmax_of_huge_values_stays_finite);
    TEST_RUN(layernorm_and_rmsnorm);
    TEST_RUN(layernorm_large_mean);
    TEST_RUN(views_read_back);
    TEST_RUN(views_as_op_inputs);
    TEST_RUN(views_of_lazy_results);
    TEST_RUN(bad_input_gives_error_tensors);
    return test_summary();
}
