/*
 * The op table: every op's entry by code, from the families' lists (ops/table.h). Each
 * family defines its entries beside its constructors, gradient rules and launch builder.
 */
#include "ops/entry.h"
#include "ops/table.h"

/* a node whose launch its creator supplies (engine/executor.h's wgml_custom_op) */
WGML_OP_ENTRY(OPTIM_STEP) = {.name = "optimizer_step", .kind = WGML_KIND_CUSTOM, .arity = 1,
                        .no_grad = "an optimiser's update, not a function of the loss"};

const wgml_op_def *const wgml_op_table[] = {
#define WGML_OP_POINT(e) [WGML_OP_##e] = &wgml_opdef_##e,
#define WGML_OP_POINT2(e, fn, api) WGML_OP_POINT(e)
    WGML_OPS(WGML_OP_POINT, WGML_OP_POINT2)
#undef WGML_OP_POINT
#undef WGML_OP_POINT2
};
_Static_assert(sizeof wgml_op_table / sizeof *wgml_op_table == WGML_OP_COUNT, "an entry per code");
const int wgml_op_count = WGML_OP_COUNT;
