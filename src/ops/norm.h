/* Layer and RMS norms along the last axis, and their input gradients (one row kernel each) (ops/norm.c) */
#ifndef WGML_OPS_NORM_H
#define WGML_OPS_NORM_H

#include "engine/op.h"

#define WGML_NORM_OPS(X) X(LAYERNORM) X(RMSNORM) X(LAYERNORM_GRAD) X(RMSNORM_GRAD)
/* d (layernorm or rmsnorm of x with weight w, which may be NULL) / d x, times the upstream
   gradient g (x's shape): one row kernel */
wgml_tensor *wgml_norm_grad(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w, wgml_tensor *g, float eps, bool centred);

#endif
