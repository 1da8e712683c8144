/* Training internals shared by autograd, losses and optimisers. */
#ifndef WGML_TRAIN_TRAIN_H
#define WGML_TRAIN_TRAIN_H

#include "core/context.h"

wgml_tensor *wgml_cross_entropy_rows(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels);
wgml_tensor *wgml_cross_entropy_grad(wgml_context *ctx, wgml_tensor *logits, wgml_tensor *labels, wgml_tensor *g);

#endif
