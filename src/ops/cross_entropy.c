/* Cross-entropy of rows of logits against class labels, and its gradient: constructors, gradient rule, entries. */
#include "ops/cross_entropy.h"

#include <stdio.h>

#include "engine/build.h"
#include "ops/row.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

typedef wgml_tensor T;

/* ---------------------------------------------------------------- constructors */

/* logits [B, C], labels [B] (class indices as floats) -> per-row losses [B] */
wgml_tensor *wgml_cross_entropy_rows(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels)
{
    if (!ctx) return NULL;
    if (!wgml_tensor_valid(logits) || !wgml_tensor_valid(labels))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "cross_entropy: logits and labels must be given");
    if (logits->status) return wgml_tensor_error(ctx, logits->status, "%s", logits->error);
    if (labels->status) return wgml_tensor_error(ctx, labels->status, "%s", labels->error);
    if (logits->ctx != ctx || labels->ctx != ctx)
        return wgml_tensor_error(ctx, WGML_ERROR_CONTEXT, "cross_entropy: a tensor belongs to another context");
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        char s1[128], s2[128];
        wgml_format_shape(s1, sizeof s1, logits->ndim, logits->shape);
        wgml_format_shape(s2, sizeof s2, labels->ndim, labels->shape);
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "cross_entropy: logits %s must be [B, C] and labels %s [B]", s1, s2);
    }
    if (labels->dtype == WGML_I32) { /* host labels are checked here, as gather's indices */
        wgml_tensor *bad = wgml_check_indices(ctx, "cross_entropy", labels, logits->shape[1], "the classes");
        if (bad) return bad;
    }
    /* class indices as i32, or as whole floats */
    wgml_tensor *src[2] = {wgml_contiguous(ctx, logits),
                           labels->dtype == WGML_I32 ? wgml_cast(ctx, labels, WGML_F32) : wgml_contiguous(ctx, labels)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY, 1, logits->shape, 2, src);
    wgml_tensor_free(src[0]);
    wgml_tensor_free(src[1]);
    return t;
}

/* d loss_rows / d logits, times the upstream gradient of each row g [B] */
wgml_tensor *wgml_cross_entropy_grad(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels, wgml_tensor *g)
{
    wgml_tensor *src[3] = {logits, labels, wgml_contiguous(ctx, g)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY_GRAD, 2, logits->shape, 3, src);
    wgml_tensor_free(src[2]);
    return t;
}

/* ---------------------------------------------------------------- gradient rules */

static wgml_status vjp_cross_entropy(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_cross_entropy_grad(c, t->src[0], t->src[1], g);
    return WGML_OK;
}

/* ---------------------------------------------------------------- launch */

/* ops/cross_entropy.wgsl: logits [rows, n], a label per row, and for the gradient the upstream
   gradient per row (x bound in its place for the loss); a label that is not a class index is
   flagged in the GPU error flags */
static wgml_status build_cross_entropy(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *x = t->src[0];
    bool grad = t->op == WGML_OP_CROSS_ENTROPY_GRAD;
    wgml_row_kernel rk = {.kernel = "cross_entropy",
                          .codes = {{"CROSS_ENTROPY", WGML_OP_CROSS_ENTROPY}, {"CROSS_ENTROPY_GRAD", WGML_OP_CROSS_ENTROPY_GRAD}},
                          .op = t->op, .x = x, .w = t->src[1], .b = grad ? t->src[2] : x, .per_row = true,
                          .scalar_out = !grad, .errors = true};
    return wgml_row_launch(ctx, t, &rk, l);
}

/* ---------------------------------------------------------------- entries */

WGML_OP_ENTRY(CROSS_ENTROPY) = {.name = "cross_entropy", .kind = WGML_KIND_ROW, .build = build_cross_entropy, .arity = 2, .vjp = vjp_cross_entropy,
                           DOMAIN(-20, 20, 0, 0), TRANSC};
/* softmax - 1 cancels at the label where its probability is near 1 */
WGML_OP_ENTRY(CROSS_ENTROPY_GRAD) = {.name = "cross_entropy_grad", .kind = WGML_KIND_ROW, .build = build_cross_entropy, .arity = 3, DOMAIN(-20, 20, -2, 2), TRANSC, FLOOR(1e-2),
                                .no_grad = "made by backward only (no second derivatives)"};
