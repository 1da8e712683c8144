/* Softmax and log-softmax along the last axis (ops/softmax.c) */
#ifndef WGML_OPS_SOFTMAX_H
#define WGML_OPS_SOFTMAX_H

#include "engine/op.h"

#define WGML_SOFTMAX_OPS(X) X(SOFTMAX) X(LOG_SOFTMAX)

#endif
