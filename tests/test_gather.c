/* Gather and scatter with i32 indices (ops/gather.c): embedding, index_select and index_add
   against references in double on awkward shapes (1, 7, 1023 rows; 1, 3, 64 columns; 65537
   elements; every axis of 3-D and 4-D tensors; views), index_add and the embedding gradient
   with many repeated indices (more than one loop budget on one row) and bit-identical over
   runs, index tensors past 65536 rows (two sort nodes), and bad input: f32 indices, host
   indices out of range, out-of-range indices made on the GPU, bad axes and shapes. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"



/* ---------------------------------------------------------------- helpers and references */



static float *rand_floats(int64_t n, double lo, double hi)
{
    float *x = malloc((size_t)n * sizeof *x);
    test_fill_uniform(x, (size_t)n, lo, hi);
    return x;
}

static int32_t *rand_ids(int64_t n, int64_t len)
{
    int32_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(test_rand_u64() % (uint64_t)len);
    return v;
}

/* shape (nd, sh) seen as [outer, len, inner] around axis ax */
static void split3(int nd, const int64_t *sh, int ax, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < ax; d++) *outer *= sh[d];
    for (int d = ax + 1; d < nd; d++) *inner *= sh[d];
    *len = sh[ax];
}

/* out [outer, n, inner] = a [outer, len, inner] at idx along the middle axis */
static void ref_select(int nd, const int64_t *sh, const float *a, int ax, const int32_t *idx, int64_t n, double *out)
{
    int64_t outer, len, inner;
    split3(nd, sh, ax, &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < inner; i++) out[(o * n + j) * inner + i] = a[(o * len + idx[j]) * inner + i];
}

/* out = a (or zeros); out[o, idx[j], i] += src[o, j, i]; mag[k] = |a| + sum of |terms| (the
   scale of a float sum's rounding) */
static void ref_index_add(int nd, const int64_t *sh, const float *a, int ax, const int32_t *idx, int64_t n, const float *src,
                          double *out, double *mag)
{
    int64_t outer, len, inner;
    split3(nd, sh, ax, &outer, &len, &inner);
    for (int64_t k = 0; k < outer * len * inner; k++) {
        out[k] = a ? a[k] : 0.0;
        mag[k] = fabs(out[k]);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * len + idx[j]) * inner + i;
                double v = src[(o * n + j) * inner + i];
                out[k] += v;
                mag[k] += fabs(v);
            }
}

/* |got - want| <= tol * max(mag, 1e-30) everywhere */
static int sums_close(const char *what, const float *got, const double *want, const double *mag, int64_t n, double tol)
{
    for (int64_t k = 0; k < n; k++) {
        double err = fabs((double)got[k] - want[k]);
        if (!(err <= tol * fmax(mag[k], 1e-30))) {
            fprintf(stderr, "  %s: at [%lld] got %.9g want %.9g (|terms| %.3g, tol %.3g)\n", what, (long long)k, (double)got[k],
                    want[k], mag[k], tol);
            return 0;
        }
    }
    return 1;
}

static void check_shape(const char *what, wgml_tensor *t, int nd, const int64_t *sh)
{
    bool ok = wgml_tensor_ndim(t) == nd;
    for (int d = 0; ok && d < nd; d++) ok = wgml_tensor_dim(t, d) == sh[d];
    if (!ok) FAILF("%s: result has the wrong shape", what);
}

/* ---------------------------------------------------------------- forward */

static void embedding_matches_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const struct { int64_t V, C; } tables[] = {{1, 1}, {7, 3}, {7, 64}, {1023, 1}, {1023, 3}, {1023, 64}, {65537, 1}, {1, 65537}};
    static const struct { int nd; int64_t s[3]; } ids_shapes[] = {{1, {1}}, {1, {7}}, {2, {2, 3}}, {3, {2, 3, 5}}};
    int ran = 0;
    for (int t = 0; t < N_OF(tables); t++)
        for (int s = 0; s < N_OF(ids_shapes); s++) {
            int64_t V = tables[t].V, C = tables[t].C, n = test_numel(ids_shapes[s].nd, ids_shapes[s].s), tsh[2] = {V, C};
            float *table = rand_floats(V * C, -5, 5);
            int32_t *ids = rand_ids(n, V);
            ids[n - 1] = (int32_t)(V - 1); /* the last row is reached */
            double *want = malloc((size_t)(n * C) * sizeof *want);
            ref_select(2, tsh, table, 0, ids, n, want);
            char what[128], ss[48];
            test_shape_str(ss, sizeof ss, ids_shapes[s].nd, ids_shapes[s].s);
            snprintf(what, sizeof what, "embedding of table [%lld,%lld] by ids %s", (long long)V, (long long)C, ss);
            wgml_scope_begin(ctx);
            wgml_tensor *y = wgml_embedding(ctx, test_tensor(ctx, 2, tsh, table), test_tensor_i32(ctx, ids_shapes[s].nd, ids_shapes[s].s, ids));
            int64_t ysh[4];
            memcpy(ysh, ids_shapes[s].s, sizeof ids_shapes[s].s);
            ysh[ids_shapes[s].nd] = C;
            check_shape(what, y, ids_shapes[s].nd + 1, ysh);
            float *got = test_read_new(ctx, what, y, n * C);
            if (got && !test_close(what, got, want, (size_t)(n * C), 0, 1e-30)) FAILF("%s: off the reference", what);
            free(got);
            wgml_scope_end(ctx);
            free(table);
            free(ids);
            free(want);
            ran++;
        }
    fprintf(stderr, "  %d table and ids shapes\n", ran);
}

/* index_select along each axis (negative too) of 3-D and 4-D tensors, 1 and 7 indices with
   repeats, on the scalar and the vec4 paths */
static void index_select_along_every_axis(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const struct { int nd; int64_t s[4]; } shapes[] = {{3, {3, 5, 4}}, {3, {2, 7, 8}}, {4, {2, 3, 4, 5}}, {4, {3, 2, 5, 8}}, {1, {9}}};
    for (int s = 0; s < N_OF(shapes); s++) {
        int nd = shapes[s].nd;
        const int64_t *sh = shapes[s].s;
        int64_t numel = test_numel(nd, sh);
        float *a = rand_floats(numel, -3, 3);
        for (int ax = 0; ax < nd; ax++)
            for (int len = 1; len <= 7; len += 6) {
                int32_t *idx = rand_ids(len, sh[ax]);
                int64_t osh[4];
                memcpy(osh, sh, sizeof osh);
                osh[ax] = len;
                int64_t on = test_numel(nd, osh);
                double *want = malloc((size_t)on * sizeof *want);
                ref_select(nd, sh, a, ax, idx, len, want);
                char what[128], ss[48];
                test_shape_str(ss, sizeof ss, nd, sh);
                snprintf(what, sizeof what, "index_select of %s along axis %d by %d indices", ss, ax, len);
                wgml_scope_begin(ctx);
                wgml_tensor *at = test_tensor(ctx, nd, sh, a), *it = test_tensor_i32(ctx, 1, (int64_t[]){len}, idx);
                wgml_tensor *ys[2] = {wgml_index_select(ctx, at, ax, it), wgml_index_select(ctx, at, ax - nd, it)};
                for (int k = 0; k < 2; k++) {
                    check_shape(what, ys[k], nd, osh);
                    float *got = test_read_new(ctx, what, ys[k], on);
                    if (got && !test_close(what, got, want, (size_t)on, 0, 1e-30)) FAILF("%s: off the reference", what);
                    free(got);
                }
                wgml_scope_end(ctx);
                free(idx);
                free(want);
            }
        free(a);
    }
}

/* an i32 table gathers as it is, bit for bit, on both paths */
static void index_select_of_an_i32_table(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const int64_t widths[] = {3, 8};
    for (int w = 0; w < N_OF(widths); w++) {
        int64_t V = 1023, C = widths[w], tsh[2] = {V, C}, n = 7, ish[2] = {7, 1};
        int32_t *table = malloc((size_t)(V * C) * sizeof *table);
        for (int64_t i = 0; i < V * C; i++) table[i] = (int32_t)((int64_t)(test_rand_u64() % 4000000000u) - 1999999999);
        int32_t *ids = rand_ids(n, V);
        ids[0] = 0;
        ids[1] = (int32_t)(V - 1);
        wgml_scope_begin(ctx);
        wgml_tensor *y = wgml_index_select(ctx, test_tensor_i32(ctx, 2, tsh, table), 0, test_tensor_i32(ctx, 1, &n, ids));
        wgml_tensor *e = wgml_embedding(ctx, test_tensor_i32(ctx, 2, tsh, table), test_tensor_i32(ctx, 2, ish, ids));
        CHECK(wgml_tensor_dtype(y) == WGML_I32 && wgml_tensor_dtype(e) == WGML_I32);
        int32_t *got = malloc((size_t)(n * C) * sizeof *got);
        for (int k = 0; k < 2; k++) {
            CHECK_OK(ctx, wgml_tensor_read_i32(k ? e : y, got, (size_t)(n * C)));
            for (int64_t j = 0; j < n; j++)
                for (int64_t c = 0; c < C; c++)
                    if (got[j * C + c] != table[ids[j] * C + c]) {
                        FAILF("i32 table of width %lld: [%lld,%lld] = %d, want %d", (long long)C, (long long)j, (long long)c,
                              got[j * C + c], table[ids[j] * C + c]);
                        j = n;
                        break;
                    }
        }
        free(got);
        wgml_scope_end(ctx);
        free(table);
        free(ids);
    }
}

/* views are read through their strides: transposes, slices with an offset (vec4 and not),
   a step, a broadcast; non-contiguous indices */
static void index_select_of_views(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t bsh[2] = {10, 8}, n = 5;
    float *base = rand_floats(80, -3, 3);
    int32_t ids10[10] = {3, 0, 9, 4, 4, 1, 2, 2, 7, 5};
    wgml_scope_begin(ctx);
    wgml_tensor *b = test_tensor(ctx, 2, bsh, base), *ids_all = test_tensor_i32(ctx, 1, (int64_t[]){10}, ids10);
    /* every other index, a non-contiguous idx: 3 9 4 2 7 */
    wgml_tensor *ids = wgml_slice(ctx, ids_all, 0, 0, 10, 2);
    const int32_t picked[5] = {3, 9, 4, 2, 7};
    struct { const char *name; wgml_tensor *view; int64_t r0, rs, c0, cs, rows, cols; } views[] = {
        {"transpose", wgml_transpose(ctx, b, 0, 1), 0, 1, 0, 8, 8, 10}, /* element (i, j) = base[j * 8 + i] */
        {"rows 1..9 (offset 8)", wgml_slice(ctx, b, 0, 1, 10, 1), 8, 8, 0, 1, 9, 8},
        {"every other row", wgml_slice(ctx, b, 0, 0, 10, 2), 0, 16, 0, 1, 5, 8},
        {"columns 1..4", wgml_slice(ctx, b, 1, 1, 5, 1), 1, 8, 0, 1, 10, 4},
        {"a broadcast row", wgml_broadcast_to(ctx, wgml_slice(ctx, b, 0, 3, 4, 1), 2, (int64_t[]){6, 8}), 24, 0, 0, 1, 6, 8},
    };
    for (int v = 0; v < N_OF(views); v++)
        for (int ax = 0; ax < 2; ax++) {
            int64_t rows = views[v].rows, cols = views[v].cols, len = ax ? cols : rows;
            int32_t idx[5];
            for (int j = 0; j < n; j++) idx[j] = picked[j] % (int32_t)len;
            wgml_tensor *it = ids;
            if (len < 10) { /* indices inside this axis: the same pattern, uploaded */
                it = test_tensor_i32(ctx, 1, &n, idx);
            }
            int64_t orows = ax ? rows : n, ocols = ax ? n : cols;
            double want[80];
            for (int64_t r = 0; r < orows; r++)
                for (int64_t c = 0; c < ocols; c++) {
                    int64_t sr = ax ? r : idx[r], sc = ax ? idx[c] : c;
                    /* the transpose: (i, j) -> base[j * 8 + i]; the others: r0 + sr * rs + sc */
                    want[r * ocols + c] = v == 0 ? base[sc * 8 + sr] : base[views[v].r0 + sr * views[v].rs + sc * views[v].cs];
                }
            char what[96];
            snprintf(what, sizeof what, "index_select of %s along axis %d", views[v].name, ax);
            wgml_tensor *y = wgml_index_select(ctx, views[v].view, ax, it);
            float *got = test_read_new(ctx, what, y, orows * ocols);
            if (got && !test_close(what, got, want, (size_t)(orows * ocols), 0, 1e-30)) FAILF("%s: off the reference", what);
            free(got);
        }
    wgml_scope_end(ctx);
    free(base);
}

/* ---------------------------------------------------------------- index_add */

typedef struct add_case {
    int nd;
    int64_t sh[4];
    int ax;
    int64_t n;
    bool zeros; /* the gradient's form: no a */
} add_case;

/* index_add of random data against the reference, three times from scratch: the same bits */
static void run_add(wgml_context *ctx, const add_case *c)
{
    int64_t outer, len, inner, ssh[4];
    split3(c->nd, c->sh, c->ax, &outer, &len, &inner);
    memcpy(ssh, c->sh, sizeof ssh);
    ssh[c->ax] = c->n;
    int64_t numel = outer * len * inner, sn = outer * c->n * inner;
    float *a = rand_floats(numel, -1, 1), *src = rand_floats(sn, -1, 1), *first = NULL;
    int32_t *idx = rand_ids(c->n, len);
    idx[c->n - 1] = (int32_t)(len - 1);
    double *want = malloc((size_t)numel * sizeof *want), *mag = malloc((size_t)numel * sizeof *mag);
    ref_index_add(c->nd, c->sh, c->zeros ? NULL : a, c->ax, idx, c->n, src, want, mag);
    char what[160], ss[48];
    test_shape_str(ss, sizeof ss, c->nd, c->sh);
    snprintf(what, sizeof what, "index_add%s into %s along axis %d of %lld indices", c->zeros ? " (into zeros, by the gradient)" : "", ss,
             c->ax, (long long)c->n);
    for (int run = 0; run < 3; run++) {
        wgml_scope_begin(ctx);
        wgml_tensor *it = test_tensor_i32(ctx, 1, &c->n, idx), *st = test_tensor(ctx, c->nd, ssh, src), *y;
        if (c->zeros) { /* the gradient of index_select: loss = sum(w * index_select(a)) with w = src */
            wgml_tensor *at = test_tensor(ctx, c->nd, c->sh, a);
            CHECK_OK(ctx, wgml_requires_grad(at, 1));
            CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, wgml_index_select(ctx, at, c->ax, it), st))));
            y = wgml_grad(at);
        } else {
            y = wgml_index_add(ctx, test_tensor(ctx, c->nd, c->sh, a), c->ax, it, st);
        }
        check_shape(what, y, c->nd, c->sh);
        float *got = y ? test_read_new(ctx, what, y, numel) : NULL;
        if (got && run == 0 && !sums_close(what, got, want, mag, numel, 1e-5)) FAILF("%s: off the reference", what);
        if (got && run > 0 && first && memcmp(got, first, (size_t)numel * sizeof *got) != 0)
            FAILF("%s: run %d's bits differ from the first run's", what, run + 1);
        if (run == 0) first = got;
        else free(got);
        wgml_scope_end(ctx);
    }
    free(first);
    free(a);
    free(src);
    free(idx);
    free(want);
    free(mag);
}

static void index_add_matches_reference_and_repeats_its_bits(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const add_case cases[] = {
        {1, {1}, 0, 1, false},
        {2, {7, 3}, 0, 5000, false},          /* ~700 repeats a row */
        {2, {7, 64}, 0, 5000, false},         /* vec4 */
        {2, {3, 1}, 0, 70000, false},         /* ~23000 a row: past one loop budget */
        {2, {3, 4}, 0, 70000, true},
        {1, {1}, 0, 70000, false},            /* one run of 70000 */
        {2, {1023, 64}, 0, 2000, true},       /* an embedding's gradient */
        {3, {3, 5, 4}, 1, 9, false},
        {3, {3, 5, 4}, 2, 11, false},
        {3, {3, 5, 4}, 0, 6, true},
        {4, {2, 3, 4, 5}, 3, 13, false},
        {4, {2, 3, 4, 8}, 2, 300, false},
        {2, {300, 2}, 0, 4000, false},        /* keys past 8 bits: two passes */
        {2, {65535, 1}, 0, 3000, false},      /* the most rows one sort node takes */
        {2, {65536, 2}, 0, 3000, false},      /* keys past 16 bits: a second sort node */
        {2, {70001, 1}, 0, 100, true},
    };
    for (int i = 0; i < N_OF(cases); i++) run_add(ctx, &cases[i]);
}

/* the gradients of embedding (to the table) and of index_add (to a and src) against their
   references: rows of w scattered, g itself, g gathered */
static void gradients_match_their_references(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t V = 7, C = 5, ish[2] = {3, 4}, n = 12, tsh[2] = {V, C}, ysh[3] = {3, 4, C};
    float *table = rand_floats(V * C, -2, 2), *w = rand_floats(n * C, -1, 1);
    int32_t ids[12] = {6, 0, 0, 3, 6, 6, 1, 2, 0, 6, 5, 3}; /* row 4 is never used: its gradient is 0 */
    double want[35], mag[35];
    ref_index_add(2, tsh, NULL, 0, ids, n, w, want, mag);
    wgml_scope_begin(ctx);
    wgml_tensor *tt = test_tensor(ctx, 2, tsh, table);
    CHECK_OK(ctx, wgml_requires_grad(tt, 1));
    wgml_tensor *y = wgml_embedding(ctx, tt, test_tensor_i32(ctx, 2, ish, ids));
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, 3, ysh, w)))));
    float *got = test_read_new(ctx, "embedding's gradient", wgml_grad(tt), V * C);
    if (got && !sums_close("embedding's gradient", got, want, mag, V * C, 1e-6)) FAILF("embedding's gradient is off");
    free(got);

    /* index_add: L = sum(w * index_add(a, 0, ids, s)) gives dL/da = w, dL/ds = w at ids */
    int64_t ssh[2] = {n, C};
    float *s = rand_floats(n * C, -1, 1), *wa = rand_floats(V * C, -1, 1);
    wgml_tensor *at = test_tensor(ctx, 2, tsh, table), *sv = test_tensor(ctx, 2, ssh, s);
    CHECK_OK(ctx, wgml_requires_grad(at, 1));
    CHECK_OK(ctx, wgml_requires_grad(sv, 1));
    wgml_tensor *z = wgml_index_add(ctx, at, 0, test_tensor_i32(ctx, 1, &n, ids), sv);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, z, test_tensor(ctx, 2, tsh, wa)))));
    double wd[35], ws[60];
    for (int i = 0; i < V * C; i++) wd[i] = wa[i];
    ref_select(2, tsh, wa, 0, ids, n, ws);
    float *ga = test_read_new(ctx, "index_add's gradient to a", wgml_grad(at), V * C);
    float *gs = test_read_new(ctx, "index_add's gradient to src", wgml_grad(sv), n * C);
    if (ga && !test_close("index_add's gradient to a", ga, wd, (size_t)(V * C), 0, 1e-30)) FAILF("index_add's gradient to a is off");
    if (gs && !test_close("index_add's gradient to src", gs, ws, (size_t)(n * C), 0, 1e-30)) FAILF("index_add's gradient to src is off");
    free(ga);
    free(gs);
    wgml_scope_end(ctx);
    free(table);
    free(w);
    free(s);
    free(wa);
}

/* ---------------------------------------------------------------- bad input */

#define CHECK_BUILD(ctx, expr, want_status, needle)                                                             \
    do {                                                                                                         \
        wgml_tensor *t_ = (expr);                                                                                \
        if (wgml_tensor_status(t_) != (want_status))                                                             \
            FAILF("%s gave %s, want %s", #expr, wgml_status_name(wgml_tensor_status(t_)), wgml_status_name(want_status)); \
        else                                                                                                     \
            CHECK(test_message_has(ctx, needle));                                                                \
    } while (0)

static void bad_input_is_refused_when_built(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t tsh[2] = {7, 3}, n3 = 3, n4 = 4, i2[2] = {2, 2};
    float table[21], fidx[3] = {0, 1, 2};
    test_fill_uniform(table, 21, -1, 1);
    const int32_t neg[3] = {0, -1, 2}, big[3] = {6, 7, 0}, fine[4] = {0, 6, 3, 3};
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, 2, tsh, table), *f = test_tensor(ctx, 1, &n3, fidx);
    wgml_tensor *in = test_tensor_i32(ctx, 1, &n3, neg), *ib = test_tensor_i32(ctx, 1, &n3, big), *ok = test_tensor_i32(ctx, 1, &n4, fine);
    /* f32 indices */
    CHECK_BUILD(ctx, wgml_embedding(ctx, t, f), WGML_ERROR_INVALID_ARGUMENT, "i32");
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 0, f), WGML_ERROR_INVALID_ARGUMENT, "f32");
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 1, f, t), WGML_ERROR_INVALID_ARGUMENT, "i32");
    /* host indices out of range, named with the range */
    CHECK_BUILD(ctx, wgml_embedding(ctx, t, in), WGML_ERROR_INVALID_ARGUMENT, "index -1 is out of range");
    CHECK(test_message_has(ctx, "0 to 6"));
    CHECK_BUILD(ctx, wgml_embedding(ctx, t, ib), WGML_ERROR_INVALID_ARGUMENT, "index 7 is out of range");
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 1, ib), WGML_ERROR_INVALID_ARGUMENT, "index 7");
    CHECK(test_message_has(ctx, "0 to 2"));
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 1, in), WGML_ERROR_INVALID_ARGUMENT, "index -1");
    int64_t s3[2] = {7, 3};
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 1, ib, test_tensor(ctx, 2, s3, table)), WGML_ERROR_INVALID_ARGUMENT, "index 7");
    /* 2-D ids into a reshaped upload: still the whole upload */
    CHECK_BUILD(ctx, wgml_embedding(ctx, t, wgml_reshape(ctx, test_tensor_i32(ctx, 2, i2, (int32_t[]){1, 2, 3, 70}), 1, &n4)),
                WGML_ERROR_INVALID_ARGUMENT, "index 70");
    /* bad axes */
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 2, ok), WGML_ERROR_INVALID_ARGUMENT, "axis 2");
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, -3, ok), WGML_ERROR_INVALID_ARGUMENT, "axis -3");
    int64_t s43[2] = {4, 3};
    wgml_tensor *src43 = test_tensor(ctx, 2, s43, table);
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 2, ok, src43), WGML_ERROR_INVALID_ARGUMENT, "axis 2");
    /* shapes */
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 0, test_tensor_i32(ctx, 2, i2, fine)), WGML_ERROR_SHAPE, "1-D");
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 0, ok, t), WGML_ERROR_SHAPE, "src [7, 3] must be a's shape [7, 3] with axis 0 of idx's length 4"); /* src has 7 rows, idx 4 */
    int64_t s44[2] = {4, 4}, s3d[3] = {4, 3, 1};
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 0, ok, test_tensor(ctx, 2, s44, table)), WGML_ERROR_SHAPE, "src [4, 4]");
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 0, ok, test_tensor(ctx, 3, s3d, table)), WGML_ERROR_SHAPE, "index_add");
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 0, test_tensor_i32(ctx, 2, i2, fine), src43), WGML_ERROR_SHAPE, "1-D");
    int64_t s3x[3] = {7, 3, 1}, s4x[4] = {2, 2, 1, 1};
    CHECK_BUILD(ctx, wgml_embedding(ctx, test_tensor(ctx, 3, s3x, table), ok), WGML_ERROR_SHAPE, "[V, C]");
    CHECK_BUILD(ctx, wgml_embedding(ctx, t, test_tensor_i32(ctx, 4, s4x, fine)), WGML_ERROR_SHAPE, "1 to 3 dimensions");
    /* an i32 a or src for index_add */
    CHECK_BUILD(ctx, wgml_index_add(ctx, test_tensor_i32(ctx, 1, &n4, fine), 0, ok, test_tensor_i32(ctx, 1, &n4, fine)), WGML_ERROR_INVALID_ARGUMENT, "f32");
    /* NULL and error inputs */
    CHECK_BUILD(ctx, wgml_embedding(ctx, NULL, ok), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK_BUILD(ctx, wgml_index_select(ctx, t, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK_BUILD(ctx, wgml_index_add(ctx, t, 0, ok, NULL), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK(wgml_embedding(NULL, t, ok) == NULL);
    /* a view that leaves the bad value out is not refused, and reads right */
    wgml_tensor *part = wgml_slice(ctx, ib, 0, 0, 1, 1); /* {6} of {6, 7, 0} */
    wgml_tensor *y = wgml_embedding(ctx, t, part);
    CHECK_OK(ctx, wgml_tensor_status(y));
    float row[3];
    CHECK_OK(ctx, wgml_tensor_read(y, row, 3));
    CHECK(memcmp(row, table + 18, sizeof row) == 0);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* Indices made on the GPU (a cast of floats) past the table: the gather reads nothing there
   (the rows are 0), index_add skips them, the read reports the first bad position, and the
   context works on */
static void gpu_indices_out_of_range_are_reported(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t tsh[2] = {7, 5}, n = 4;
    float table[35], fids[4] = {1, 99, -4, 2};
    test_fill_uniform(table, 35, -1, 1);
    wgml_scope_begin(ctx);
    wgml_tensor *t = test_tensor(ctx, 2, tsh, table);
    wgml_tensor *ids = wgml_cast(ctx, test_tensor(ctx, 1, &n, fids), WGML_I32);
    wgml_tensor *y = wgml_embedding(ctx, t, ids);
    CHECK_OK(ctx, wgml_tensor_status(y)); /* not known when built */
    float got[20];
    for (int i = 0; i < 20; i++) got[i] = -777.0f;
    CHECK_STATUS(ctx, wgml_tensor_read(y, got, 20), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "out of range"));
    CHECK(test_message_has(ctx, "element 1 of"));
    for (int c = 0; c < 5; c++) {
        if (got[c] != table[5 + c] || got[15 + c] != table[10 + c]) FAILF("a good row read wrong at column %d", c);
        if (got[5 + c] != 0.0f || got[10 + c] != 0.0f) FAILF("a bad index's row reads %g, %g, want 0", got[5 + c], got[10 + c]);
    }
    /* the error was reported once: the context works on */
    float back[35];
    CHECK_OK(ctx, wgml_tensor_read(t, back, 35));
    CHECK(memcmp(back, table, sizeof back) == 0);

    /* index_add: the bad positions add nothing; reported by the next read, of anything */
    int64_t ssh[2] = {4, 5};
    float src[20];
    test_fill_uniform(src, 20, -1, 1);
    wgml_tensor *z = wgml_index_add(ctx, t, 0, ids, test_tensor(ctx, 2, ssh, src));
    CHECK_OK(ctx, wgml_eval(ctx, 1, &z));
    CHECK_STATUS(ctx, wgml_tensor_read(t, back, 35), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "element 1 of"));
    float zs[35];
    CHECK_OK(ctx, wgml_tensor_read(z, zs, 35));
    for (int r = 0; r < 7; r++)
        for (int c = 0; c < 5; c++) {
            float want = table[r * 5 + c] + (r == 1 ? src[c] : r == 2 ? src[15 + c] : 0.0f);
            if (zs[r * 5 + c] != want) FAILF("index_add with bad GPU indices: [%d,%d] = %g, want %g", r, c, zs[r * 5 + c], want);
        }
    /* a negative index alone: the first bad position is named */
    float fneg[3] = {0, 6, -1};
    int64_t n3 = 3;
    wgml_tensor *y2 = wgml_index_select(ctx, t, 0, wgml_cast(ctx, test_tensor(ctx, 1, &n3, fneg), WGML_I32));
    float g2[15];
    CHECK_STATUS(ctx, wgml_tensor_read(y2, g2, 15), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "element 2 of"));
    /* past 65536 rows (two sort nodes): bad positions 1 and 3 skipped, the first named */
    {
        int64_t V = 70001, n5 = 5;
        float *big = rand_floats(V, -1, 1), *sb = rand_floats(5, -1, 1), fb[5] = {5, 70001, 70000, -1, 5}, *gb = malloc(V * sizeof *gb);
        wgml_tensor *zb = wgml_index_add(ctx, test_tensor(ctx, 1, &V, big), 0, wgml_cast(ctx, test_tensor(ctx, 1, &n5, fb), WGML_I32),
                                         test_tensor(ctx, 1, &n5, sb));
        CHECK_STATUS(ctx, wgml_tensor_read(zb, gb, (size_t)V), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "element 1 of"));
        float run5 = sb[0] + sb[4]; /* the run's terms in order, then added to a */
        big[5] = big[5] + run5;
        big[70000] = big[70000] + sb[2];
        if (memcmp(gb, big, (size_t)V * sizeof *gb) != 0) FAILF("index_add into 70001 rows with bad GPU indices: wrong data");
        free(big);
        free(sb);
        free(gb);
    }
    /* good GPU-made indices: no error */
    float fgood[3] = {6, 0, 6};
    wgml_tensor *y3 = wgml_embedding(ctx, t, wgml_cast(ctx, test_tensor(ctx, 1, &n3, fgood), WGML_I32));
    CHECK_OK(ctx, wgml_tensor_read(y3, g2, 15));
    CHECK(memcmp(g2, table + 30, 5 * sizeof *g2) == 0 && memcmp(g2 + 5, table, 5 * sizeof *g2) == 0);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(embedding_matches_reference);
    TEST_RUN(index_select_along_every_axis);
    TEST_RUN(index_select_of_an_i32_table);
    TEST_RUN(index_select_of_views);
    TEST_RUN(index_add_matches_reference_and_repeats_its_bits);
    TEST_RUN(gradients_match_their_references);
    TEST_RUN(bad_input_is_refused_when_built);
    TEST_RUN(gpu_indices_out_of_range_are_reported);
    return test_summary();
}
