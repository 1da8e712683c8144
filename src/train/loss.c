/*
 * Losses: the mean of the fused softmax cross-entropy rows (engine/build.c's node, a row op of
 * ops/row.wgsl) and mean squared error composed from elementwise ops.
 */
#include "engine/build.h"
#include "ops/cross_entropy.h"

wgml_tensor *wgml_cross_entropy(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels)
{
    wgml_tensor *rows = wgml_cross_entropy_rows(ctx, logits, labels);
    if (!rows || rows->status) return rows;
    wgml_tensor *mean = wgml_mean_all(ctx, rows);
    wgml_tensor_free(rows);
    return mean;
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
