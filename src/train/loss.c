/*
 * Losses: a fused, numerically stable softmax cross-entropy with integer labels (ops 4 and 5 of
 * kernels/row.wgsl: forward and gradient), and mean squared error composed from elementwise ops.
 */
#include "graph/build.h"
#include "train/train.h"

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
    wgml_tensor *src[2] = {wgml_contiguous(ctx, logits), wgml_contiguous(ctx, labels)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY, 1, logits->shape, 2, src);
    wgml_tensor_free(src[0]);
    wgml_tensor_free(src[1]);
    return t;
}

wgml_tensor *wgml_cross_entropy(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels)
{
    wgml_tensor *rows = wgml_cross_entropy_rows(ctx, logits, labels);
    if (!rows || rows->status) return rows;
    wgml_tensor *mean = wgml_mean_all(ctx, rows);
    wgml_tensor_free(rows);
    return mean;
}

/* d loss_rows / d logits, times the upstream gradient of each row g [B] */
wgml_tensor *wgml_cross_entropy_grad(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels, wgml_tensor *g)
{
    wgml_tensor *src[3] = {logits, labels, wgml_contiguous(ctx, g)};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_CROSS_ENTROPY_GRAD, 2, logits->shape, 3, src);
    wgml_tensor_free(src[2]);
    return t;
}

wgml_tensor *wgml_mse(wgml_context *ctx, wgml_tensor *pred, wgml_tensor *target)
{
    wgml_tensor *d = wgml_sub(ctx, pred, target);
    wgml_tensor *sq = wgml_mul(ctx, d, d);
    wgml_tensor *m = wgml_mean_all(ctx, sq);
    wgml_tensor_free(d);
    wgml_tensor_free(sq);
    return m;
}
