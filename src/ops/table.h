/*
 * The op list: every op's code, composed from the families' lists (each family's header lists
 * its ops as X(ENUM), elementwise's public ones as X(ENUM, fn)), and what a family writes its
 * entries with. A new family adds its list here and its header's include; a new op of a family
 * is a line in that family's list.
 */
#ifndef WGML_OPS_TABLE_H
#define WGML_OPS_TABLE_H

#include "engine/op.h"
#include "ops/attention/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/join.h"
#include "ops/matmul/matmul.h"
#include "ops/norm.h"
#include "ops/random.h"
#include "ops/reduce.h"
#include "ops/scan.h"
#include "ops/softmax.h"
#include "ops/views.h"

/* ops whose node's creator supplies its launch (the optimiser's step and its squared norm's
   first stage, train/optim.c) */
#define WGML_CUSTOM_OPS(X) X(OPTIM_STEP) X(GRAD_SUMSQ)

/* Every family's op, X(ENUM), or X3(ENUM, fn, API) for an elementwise one (ops/elementwise.h);
   WGML_OPS adds the engine's own three first. (The order only numbers the codes.) */
#define WGML_FAMILY_OPS(X, X3)                                                                     \
    WGML_VIEWS_OPS(X) WGML_ELEMENTWISE_OPS(X3) WGML_REDUCE_OPS(X) WGML_SOFTMAX_OPS(X) WGML_NORM_OPS(X) \
    WGML_CROSS_ENTROPY_OPS(X) WGML_GATHER_OPS(X) WGML_SCAN_OPS(X) WGML_MATMUL_OPS(X) WGML_JOIN_OPS(X)  \
    WGML_ATTENTION_OPS(X) WGML_CUSTOM_OPS(X) WGML_RANDOM_OPS(X) X(NORMALIZE) /* ops/normalize.c */
#define WGML_OPS(X, X3) X(NONE) X(VIEW) X(COPY) WGML_FAMILY_OPS(X, X3)

enum {
    WGML_OP_FAMILY_BEFORE_ = WGML_OP_ENGINE_COUNT - 1, /* the families' codes follow the engine's */
#define WGML_OP_ENUM(e) WGML_OP_##e,
#define WGML_OP_ENUM2(e, fn, api) WGML_OP_ENUM(e)
    WGML_FAMILY_OPS(WGML_OP_ENUM, WGML_OP_ENUM2)
#undef WGML_OP_ENUM
#undef WGML_OP_ENUM2
    WGML_OP_COUNT
};

/* Each op's entry, defined by its family: WGML_OP_ENTRY(ADD) = {...}; */
#define WGML_OP_ENTRY(e) const wgml_op_def wgml_opdef_##e
#define WGML_OP_DECLARE(e) extern WGML_OP_ENTRY(e);
#define WGML_OP_DECLARE2(e, fn, api) WGML_OP_DECLARE(e)
WGML_OPS(WGML_OP_DECLARE, WGML_OP_DECLARE2)
#undef WGML_OP_DECLARE
#undef WGML_OP_DECLARE2

#endif
