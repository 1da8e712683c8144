/* Softmax and log-softmax along the last axis: constructors, gradient rules, entries. */
#include "ops/softmax.h"

#include <stdio.h>

#include "engine/build.h"
#include "ops/row.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- constructors */

wgml_tensor *wgml_softmax(wgml_context *ctx, wgml_tensor *a) { return wgml_row_node(ctx, WGML_OP_SOFTMAX, a, NULL, NULL, 0); }

wgml_tensor *wgml_log_softmax(wgml_context *ctx, wgml_tensor *a) { return wgml_row_node(ctx, WGML_OP_LOG_SOFTMAX, a, NULL, NULL, 0); }

/* ---------------------------------------------------------------- gradient rules */

static wgml_status vjp_softmax(wgml_context *c, T *t, T *g, T **gin) /* y (g - sum(g y)) */
{
    gin[0] = wgml_mul(c, t, wgml_sub(c, g, wgml_sum(c, wgml_mul(c, g, t), -1, 1)));
    return WGML_OK;
}

static wgml_status vjp_log_softmax(wgml_context *c, T *t, T *g, T **gin) /* g - softmax * sum(g) */
{
    gin[0] = wgml_sub(c, g, wgml_mul(c, wgml_exp(c, t), wgml_sum(c, g, -1, 1)));
    return WGML_OK;
}

/* ---------------------------------------------------------------- launch */

/* ops/softmax.wgsl over the rows of x, no weight */
static wgml_status build_softmax(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_row_kernel rk = {.kernel = "softmax", .codes = {{"SOFTMAX", WGML_OP_SOFTMAX}, {"LOG_SOFTMAX", WGML_OP_LOG_SOFTMAX}},
                          .op = t->op, .x = t->src[0]};
    return wgml_row_launch(ctx, t, &rk, l);
}

/* ---------------------------------------------------------------- entries */

WGML_OP_ENTRY(SOFTMAX) = {.name = "softmax", .kind = WGML_KIND_ROW, .build = build_softmax, .arity = 1, .vjp = vjp_softmax, DOMAIN(-20, 20, 0, 0), TRANSC};
/* x - max - log(sum): the row's largest entry is near 0 after cancelling terms up to 40 */
WGML_OP_ENTRY(LOG_SOFTMAX) = {.name = "log_softmax", .kind = WGML_KIND_ROW, .build = build_softmax, .arity = 1, .vjp = vjp_log_softmax, DOMAIN(-20, 20, 0, 0), TRANSC, FLOOR(1)};
