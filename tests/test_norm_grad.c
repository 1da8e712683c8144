/*
 * The norms' input gradients (one row kernel each, made by backward): layernorm and rmsnorm,
 * with a weight and without, against the double reference on awkward row lengths that reach
 * every variant of the kernel: scalar and vec4 units, rows held in registers and rows read
 * again (past 8192 floats), one row and many. (Through wgml_backward, with the weight's
 * and bias's gradients, test_op_table's central differences cover them.)
 */
#include <math.h>
#include <stdlib.h>

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

int main(void)
{
    TEST_RUN(input_gradients_match_reference);
    return test_summary();
}
