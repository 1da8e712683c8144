/*
 * normalize: each row (the last axis) scaled to unit length, x / max(||x||_2, eps), as
 * torch.nn.functional.normalize(x, dim=-1). A row op of its own: this file and its kernel
 * (ops/normalize.wgsl) are all of it but its line in ops/table.h and its wgml.h line.
 */
#include "engine/build.h"
#include "ops/entry.h"
#include "ops/row.h"
#include "ops/table.h"

typedef wgml_tensor T;

wgml_tensor *wgml_normalize(wgml_context *ctx, wgml_tensor *a, float eps)
{
    return wgml_row_node(ctx, WGML_OP_NORMALIZE, a, NULL, NULL, eps);
}

/* y = x / d, d = max(n, eps), n = ||x||: dy/dx g = (g - y sum(g y)) / d where n > eps (the
   rescaling's part), g / d where d is the constant eps */
static wgml_status vjp_normalize(wgml_context *c, T *t, T *g, T **gin)
{
    T *x = t->src[0];
    float eps = wgml_row_params_of(t).eps;
    T *n = wgml_sqrt(c, wgml_sum(c, wgml_mul(c, x, x), -1, 1));
    T *d = wgml_binary_scalar(c, WGML_MAXIMUM, n, eps);
    T *along = wgml_mul(c, wgml_binary_scalar(c, WGML_GT, n, eps), wgml_mul(c, t, wgml_sum(c, wgml_mul(c, g, t), -1, 1)));
    gin[0] = wgml_div(c, wgml_sub(c, g, along), d);
    return WGML_OK;
}

static wgml_status build_normalize(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_row_kernel rk = {.kernel = "normalize", .op = t->op, .x = t->src[0], .eps = wgml_row_params_of(t).eps};
    return wgml_row_launch(ctx, t, &rk, l);
}

/* a sum of squares and a division: rounding only (the tests' rows are O(1) to O(10) long) */
WGML_OP_ENTRY(NORMALIZE) = {.name = "normalize", .kind = WGML_KIND_ROW, .build = build_normalize, .arity = 1,
                            .vjp = vjp_normalize, .recompute = true, DOMAIN(-10, 10, 0, 0), ARITH};
