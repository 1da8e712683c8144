/* Cross-entropy of rows of logits against class labels, and its gradient (ops/cross_entropy.c) */
#ifndef WGML_OPS_CROSS_ENTROPY_H
#define WGML_OPS_CROSS_ENTROPY_H

#include "engine/op.h"

#define WGML_CROSS_ENTROPY_OPS(X) X(CROSS_ENTROPY) X(CROSS_ENTROPY_GRAD)
/* logits [B, C], labels [B] (class indices as floats) -> per-row losses [B] */
wgml_tensor *wgml_cross_entropy_rows(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels);
/* d loss_rows / d logits [B, C], times the upstream gradient of each row g [B] */
wgml_tensor *wgml_cross_entropy_grad(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels, wgml_tensor *g);

#endif
