/*
 * The norms' input gradients (one row kernel each, made by backward): layernorm and rmsnorm,
 * with a weight and without, against the double reference on awkward row lengths that reach
 * every variant of the kernel: scalar and vec4 units, rows held in registers and rows read
 * again (past 8192 floats), one row and many. (Through wgml_backward, with the weight's
 * and bias's gradients, test_op_table's central differences cover them.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ref/ref.h"
#include "engine/build.h"
#include "ops/table.h"
#include "harness.h"

static void input_gradients_match_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const int64_t shapes[][2] = {{1, 7}, {1023, 384}, {5, 385}, {3, 8195}, {2, 8196}, {65, 1}};
    for (int s = 0; s < N_OF(shapes); s++) {
        int64_t rows = shapes[s][0], n = shapes[s][1], sh[2] = {rows, n};
        size_t total = (size_t)(rows * n);
        float *x = malloc(total * sizeof *x), *g = malloc(total * sizeof *g), *w = malloc((size_t)n * sizeof *w);
        double *dxv = malloc(total * sizeof *dxv), *dg = malloc(total * sizeof *dg),
               *dw = malloc((size_t)n * sizeof *dw), *want = malloc(total * sizeof *want);
        test_fill_uniform(x, total, -3, 5); /* a mean away from 0 */
        test_fill_uniform(g, total, -1, 1);
        test_fill_uniform(w, (size_t)n, 0.5f, 1.5f);
        for (size_t i = 0; i < total; i++) dxv[i] = x[i], dg[i] = g[i];
        for (int64_t j = 0; j < n; j++) dw[j] = w[j];
        for (int centred = 0; centred < 2; centred++)
            for (int weighted = 0; weighted < 2; weighted++) {
                wgml_scope_begin(ctx);
                wgml_tensor *tx = test_tensor(ctx, 2, sh, x), *tg = test_tensor(ctx, 2, sh, g), *tw = test_tensor(ctx, 1, &n, w);
                wgml_ref_norm_grad(rows, n, dxv, weighted ? dw : NULL, dg, 1e-5, centred, want);
                float *got = test_read_new(ctx, "norm gradient", wgml_norm_grad(ctx, tx, weighted ? tw : NULL, tg, 1e-5f, centred), (int64_t)total);
                char what[96];
                snprintf(what, sizeof what, "%s grad, %s weight, [%lld, %lld]", centred ? "layernorm" : "rmsnorm",
                         weighted ? "with" : "no", (long long)rows, (long long)n);
                /* n = 1: layernorm's x - mean is 0 and so is the gradient */
                if (got) CHECK(test_close(what, got, want, total, 2e-4, 1e-2));
                free(got);
                wgml_scope_end(ctx);
            }
        free(x), free(g), free(w), free(dxv), free(dg), free(dw), free(want);
    }
}

/* Two residual blocks, x1 = x + norm(x), out = x1 + norm(x1), L = sum(out G): backward folds
   each block's sum of gradients (the residual's and the norm's) into the norm's gradient kernel
   (the op table's add_in), and the second block's folded node is passed on to both of the
   first add's operands. dx against the double reference, and no add launched for either sum. */
static void residual_sums_fold_into_the_norm_gradient(void)
{
    static const int64_t shapes[][2] = {{1, 7}, {33, 384}, {7, 1023}, {2, 8196}};
    for (int s = 0; s < N_OF(shapes); s++)
        for (int centred = 0; centred < 2; centred++) {
            char path[TEST_PROFILE_PATH];
            wgml_context *ctx = test_profiled_context(path);
            if (!ctx) return;
            int64_t rows = shapes[s][0], n = shapes[s][1], sh[2] = {rows, n};
            size_t total = (size_t)(rows * n);
            float *x = malloc(total * sizeof *x), *G = malloc(total * sizeof *G), *w = malloc((size_t)n * sizeof *w);
            double *dx = malloc(total * sizeof *dx), *dG = malloc(total * sizeof *dG), *dw = malloc((size_t)n * sizeof *dw),
                   *x1 = malloc(total * sizeof *x1), *g1 = malloc(total * sizeof *g1), *want = malloc(total * sizeof *want);
            test_fill_uniform(x, total, -3, 5);
            test_fill_uniform(G, total, -1, 1);
            test_fill_uniform(w, (size_t)n, 0.5f, 1.5f);
            for (size_t i = 0; i < total; i++) dx[i] = x[i], dG[i] = G[i];
            for (int64_t j = 0; j < n; j++) dw[j] = w[j];
            /* x1 = x + norm(x); d x1 = G + norm'(x1) G; dx = d x1 + norm'(x) d x1 */
            if (centred) wgml_ref_layernorm(rows, n, dx, dw, NULL, 1e-5, x1);
            else wgml_ref_rmsnorm(rows, n, dx, dw, 1e-5, x1);
            for (size_t i = 0; i < total; i++) x1[i] += dx[i];
            wgml_ref_norm_grad(rows, n, x1, dw, dG, 1e-5, centred, g1);
            for (size_t i = 0; i < total; i++) g1[i] += dG[i];
            wgml_ref_norm_grad(rows, n, dx, dw, g1, 1e-5, centred, want);
            for (size_t i = 0; i < total; i++) want[i] += g1[i];
            wgml_scope_begin(ctx);
            wgml_tensor *tx = test_tensor(ctx, 2, sh, x), *tG = test_tensor(ctx, 2, sh, G), *tw = test_tensor(ctx, 1, &n, w);
            CHECK_OK(ctx, wgml_requires_grad(tx, 1));
            wgml_tensor *n0 = centred ? wgml_layernorm(ctx, tx, tw, NULL, 1e-5f) : wgml_rmsnorm(ctx, tx, tw, 1e-5f);
            wgml_tensor *t1 = wgml_add(ctx, tx, n0);
            wgml_tensor *n1 = centred ? wgml_layernorm(ctx, t1, tw, NULL, 1e-5f) : wgml_rmsnorm(ctx, t1, tw, 1e-5f);
            wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_add(ctx, t1, n1), tG));
            CHECK_OK(ctx, wgml_backward(L));
            float *got = wgml_grad(tx) ? test_read_new(ctx, "dx", wgml_grad(tx), (int64_t)total) : NULL;
            CHECK(got != NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, two residual blocks, [%lld, %lld]", centred ? "layernorm" : "rmsnorm", (long long)rows,
                     (long long)n);
            if (got) CHECK(test_close(what, got, want, total, 2e-4, 1e-2));
            free(got);
            wgml_scope_end(ctx);
            wgml_context_free(ctx); /* writes the profile */
            long adds = test_profile_count(path, "add of"), grads = test_profile_count(path, "layernorm_grad of") + test_profile_count(path, "rmsnorm_grad of");
            unlink(path);
            /* the forward's x1 (the second residual add fuses into the product with G); the
               backward's two sums inside the norms' gradients */
            if (adds != 1 || grads != 2) FAILF("%s: %ld adds and %ld norm gradients launched, want 1 and 2", what, adds, grads);
            free(x), free(G), free(w), free(dx), free(dG), free(dw), free(x1), free(g1), free(want);
        }
}

/* The addend's own variants, given to the kernel directly (the op table's add_in): rows
   of vec4 units and of single floats, the addend starting at an element that is a multiple of
   4 (vec4 units) or not (single floats), a view into a larger buffer */
static void addend_offsets(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const int64_t shapes[][3] = {{33, 384, 0}, {33, 384, 4}, {33, 384, 1}, {5, 385, 3}, {1, 7, 0}};
    for (int s = 0; s < N_OF(shapes); s++) {
        int64_t rows = shapes[s][0], n = shapes[s][1], off = shapes[s][2], sh[2] = {rows, n}, whole = rows * n + off;
        size_t total = (size_t)(rows * n);
        float *x = malloc(total * sizeof *x), *g = malloc(total * sizeof *g), *w = malloc((size_t)n * sizeof *w),
              *r = malloc((size_t)whole * sizeof *r);
        double *dxv = malloc(total * sizeof *dxv), *dg = malloc(total * sizeof *dg), *dw = malloc((size_t)n * sizeof *dw),
               *want = malloc(total * sizeof *want);
        test_fill_uniform(x, total, -3, 5);
        test_fill_uniform(g, total, -1, 1);
        test_fill_uniform(w, (size_t)n, 0.5f, 1.5f);
        test_fill_uniform(r, (size_t)whole, -2, 2);
        for (size_t i = 0; i < total; i++) dxv[i] = x[i], dg[i] = g[i];
        for (int64_t j = 0; j < n; j++) dw[j] = w[j];
        wgml_ref_norm_grad(rows, n, dxv, dw, dg, 1e-5, 1, want);
        for (size_t i = 0; i < total; i++) want[i] += r[off + (int64_t)i];
        wgml_scope_begin(ctx);
        wgml_tensor *tx = test_tensor(ctx, 2, sh, x), *tg = test_tensor(ctx, 2, sh, g), *tw = test_tensor(ctx, 1, &n, w);
        wgml_tensor *tr = wgml_reshape(ctx, wgml_slice(ctx, test_tensor(ctx, 1, &whole, r), 0, off, whole, 1), 2, sh);
        wgml_tensor *dx = wgml_norm_grad(ctx, tx, tw, tg, 1e-5f, true);
        CHECK(dx && tr && wgml_op_table[dx->op]->add_in(ctx, dx, tr, true) == dx);
        float *got = test_read_new(ctx, "norm gradient + r", dx, (int64_t)total);
        char what[96];
        snprintf(what, sizeof what, "layernorm grad + r at element %lld, [%lld, %lld]", (long long)off, (long long)rows, (long long)n);
        if (got) CHECK(test_close(what, got, want, total, 2e-4, 1e-2));
        free(got);
        wgml_scope_end(ctx);
        free(x), free(g), free(w), free(r), free(dxv), free(dg), free(dw), free(want);
    }
}

int main(void)
{
    TEST_RUN(input_gradients_match_reference);
    TEST_RUN(addend_offsets);
    TEST_RUN(residual_sums_fold_into_the_norm_gradient);
    return test_summary();
}
