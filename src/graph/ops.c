/* The op table's rows (see ops.h). */
#include "graph/ops.h"

#include <stddef.h>

const wgml_op_info wgml_op_table[WGML_OP_COUNT] = {
#define WGML_OP_ROW(e, name, kind, wgsl) [WGML_OP_##e] = {name, kind, wgsl},
    WGML_OP_TABLE(WGML_OP_ROW)
#undef WGML_OP_ROW
};

_Static_assert(sizeof(wgml_op_table) / sizeof(wgml_op_table[0]) == WGML_OP_COUNT,
               "one row per op");
