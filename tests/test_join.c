/* concat, stack, split and chunk on awkward shapes, strided and i32 inputs, more inputs than
   one node joins, against the host's own copy; splits are views (no dispatch) */
#include <math.h>
#include <string.h>

#include "harness.h"

/* element (i0..i3) of a row-major 4-D array of shape s */
static int64_t at4(const int64_t *s, int64_t a, int64_t b, int64_t c, int64_t d) { return ((a * s[1] + b) * s[2] + c) * s[3] + d; }

static void concat_along_every_axis(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t base[4] = {2, 3, 5, 7};
    const int64_t lens[3] = {1, 4, 2};
    for (int ax = 0; ax < 4; ax++) {
        wgml_scope_begin(ctx);
        float *x[3];
        wgml_tensor *t[3];
        int64_t sh[3][4], total = 0;
        for (int k = 0; k < 3; k++) {
            memcpy(sh[k], base, sizeof base);
            sh[k][ax] = lens[k];
            total += lens[k];
            int64_t n = sh[k][0] * sh[k][1] * sh[k][2] * sh[k][3];
            x[k] = malloc((size_t)n * sizeof *x[k]);
            test_fill_uniform(x[k], (size_t)n, -5, 5);
            CHECK_OK(ctx, wgml_tensor_from_data(ctx, 4, sh[k], x[k], (size_t)n, &t[k]));
        }
        /* the middle input read through a strided view: a transposed copy transposed back */
        wgml_tensor *mid = wgml_transpose(ctx, wgml_contiguous(ctx, wgml_transpose(ctx, t[1], 1, 3)), 1, 3);
        wgml_tensor *in[3] = {t[0], mid, t[2]};
        wgml_tensor *y = wgml_concat(ctx, 3, in, ax - 4); /* negative axis */
        int64_t os[4];
        memcpy(os, base, sizeof base);
        os[ax] = total;
        int64_t n = os[0] * os[1] * os[2] * os[3];
        CHECK(wgml_tensor_numel(y) == n && wgml_tensor_dim(y, ax) == total);
        float *got = malloc((size_t)n * sizeof *got);
        CHECK_OK(ctx, wgml_tensor_read(y, got, (size_t)n));
        int bad = 0;
        for (int64_t a = 0; a < os[0]; a++)
            for (int64_t b = 0; b < os[1]; b++)
                for (int64_t c = 0; c < os[2]; c++)
                    for (int64_t d = 0; d < os[3]; d++) {
                        int64_t i[4] = {a, b, c, d};
                        int k = 0;
                        while (i[ax] >= sh[k][ax]) i[ax] -= sh[k++][ax];
                        bad += got[at4(os, a, b, c, d)] != x[k][at4(sh[k], i[0], i[1], i[2], i[3])];
                    }
        CHECK(bad == 0);
        free(got);
        for (int k = 0; k < 3; k++) free(x[k]);
        wgml_scope_end(ctx);
    }
}

/* 19 pieces of one i32 row (more than a node joins), stack on a new first and last axis, then
   split and chunk back as views */
static void many_pieces_stack_split_chunk(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    enum { P = 19 };
    wgml_tensor *pieces[P];
    int32_t all[P * 3];
    for (int k = 0; k < P; k++) {
        int32_t v[3] = {k * 3 + 1, -k * 3 - 2, 1 << 25 | k}; /* the last is no float */
        memcpy(all + 3 * k, v, sizeof v);
        int64_t three = 3;
        CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 1, &three, v, 3, &pieces[k]));
    }
    wgml_tensor *row = wgml_concat(ctx, P, pieces, 0);
    CHECK(wgml_tensor_dtype(row) == WGML_I32 && wgml_tensor_numel(row) == P * 3);
    int32_t got[P * 3];
    CHECK_OK(ctx, wgml_tensor_read_i32(row, got, P * 3));
    CHECK(memcmp(got, all, sizeof all) == 0);
    wgml_tensor *s0 = wgml_stack(ctx, P, pieces, 0), *s1 = wgml_stack(ctx, P, pieces, -1);
    CHECK(wgml_tensor_ndim(s0) == 2 && wgml_tensor_dim(s0, 0) == P && wgml_tensor_dim(s1, 1) == P);
    CHECK_OK(ctx, wgml_tensor_read_i32(s0, got, P * 3));
    CHECK(memcmp(got, all, sizeof all) == 0);
    CHECK_OK(ctx, wgml_tensor_read_i32(s1, got, P * 3));
    int bad = 0;
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < P; k++) bad += got[j * P + k] != all[k * 3 + j];
    CHECK(bad == 0);
    /* split [P, 3] along 0 into 5 + 14, and chunk along 1 into 3: views, no dispatch */
    CHECK_OK(ctx, wgml_eval(ctx, 1, &s0));
    wgml_tensor *parts[4];
    int64_t sizes[2] = {5, 14};
    wgml_stats before, after;
    wgml_stats_get(ctx, &before);
    CHECK_OK(ctx, wgml_split(ctx, s0, 0, 2, sizes, parts));
    CHECK(wgml_tensor_dim(parts[0], 0) == 5 && wgml_tensor_dim(parts[1], 0) == 14);
    wgml_stats_get(ctx, &after);
    CHECK(after.dispatches == before.dispatches);
    int32_t p1[14 * 3];
    CHECK_OK(ctx, wgml_tensor_read_i32(parts[1], p1, 14 * 3));
    CHECK(memcmp(p1, all + 15, sizeof p1) == 0);
    CHECK_OK(ctx, wgml_chunk(ctx, s0, 1, 3, parts));
    int32_t col[P];
    CHECK_OK(ctx, wgml_tensor_read_i32(parts[2], col, P));
    for (int k = 0; k < P; k++) CHECK(col[k] == all[k * 3 + 2]);
    /* bad input */
    CHECK_STATUS(ctx, wgml_chunk(ctx, s0, 0, 4, parts), WGML_ERROR_SHAPE);
    CHECK(parts[0] == NULL);
    int64_t bad_sizes[2] = {5, 13};
    CHECK_STATUS(ctx, wgml_split(ctx, s0, 0, 2, bad_sizes, parts), WGML_ERROR_SHAPE);
    CHECK_STATUS(ctx, wgml_split(ctx, s0, 2, 2, sizes, parts), WGML_ERROR_INVALID_ARGUMENT);
    float f[3] = {1, 2, 3};
    int64_t three = 3, two[2] = {1, 3};
    wgml_tensor *tf = NULL, *t2 = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &three, f, 3, &tf));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, two, f, 3, &t2));
    wgml_tensor *mixed[2] = {pieces[0], tf}, *ranks[2] = {tf, t2};
    CHECK(wgml_tensor_status(wgml_concat(ctx, 2, mixed, 0)) == WGML_ERROR_INVALID_ARGUMENT); /* i32 with f32: a dtype, not a shape */
    CHECK(wgml_tensor_status(wgml_concat(ctx, 2, ranks, 0)) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(wgml_concat(ctx, 0, ranks, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_concat(ctx, 2, (wgml_tensor *[]){tf, NULL}, 0)) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(wgml_stack(ctx, 2, ranks, 0)) == WGML_ERROR_SHAPE);
    CHECK(wgml_tensor_status(wgml_stack(ctx, 1, &t2, 3)) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* gradients through concat, stack and split reach each input's own window */
static void gradients_through_joins(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    float a[6], b[6], w[12];
    test_fill_uniform(a, 6, -1, 1);
    test_fill_uniform(b, 6, -1, 1);
    test_fill_uniform(w, 12, -1, 1);
    int64_t s23[2] = {2, 3}, s223[3] = {2, 2, 3};
    wgml_tensor *ta, *tb, *tw;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, s23, a, 6, &ta));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, s23, b, 6, &tb));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 3, s223, w, 12, &tw));
    CHECK_OK(ctx, wgml_requires_grad(ta, 1));
    CHECK_OK(ctx, wgml_requires_grad(tb, 1));
    wgml_tensor *st = wgml_stack(ctx, 2, (wgml_tensor *[]){ta, tb}, 0); /* [2, 2, 3]: a then b */
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, st, tw))));
    float ga[6], gb[6];
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(ta), ga, 6));
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(tb), gb, 6));
    for (int i = 0; i < 6; i++) CHECK(ga[i] == w[i] && gb[i] == w[6 + i]);
    wgml_scope_end(ctx);
}

int main(void)
{
    TEST_RUN(concat_along_every_axis);
    TEST_RUN(many_pieces_stack_split_chunk);
    TEST_RUN(gradients_through_joins);
    return test_summary();
}
