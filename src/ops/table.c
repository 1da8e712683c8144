/*
 * The op table: every op's entry by code, from the families' lists (ops/table.h). Each
 * family defines its entries beside its constructors, gradient rules and launch builder.
 */
#include "ops/entry.h"
#include "ops/table.h"

/* a node whose launch its creator supplies (engine/executor.h's wgml_custom_op) */
WGML_OP_ENTRY(OPTIM_STEP) = {.name = "optimizer_step", .kind = WGML_KIND_CUSTOM, .arity = 1,
                        .no_grad = "an optimiser's update, not a function of the loss"};
WGML_OP_ENTRY(GRAD_SUMSQ) = {.name = "grad_sumsq", .kind = WGML_KIND_CUSTOM,
                        .no_grad = "an optimiser's gradient norm, not a function of the loss"};

const wgml_op_def *const wgml_op_table[] = {
#define WGML_OP_POINT(e) [WGML_OP_##e] = &wgml_opdef_##e,
#define WGML_OP_POINT2(e, fn, api) WGML_OP_POINT(e)
    WGML_OPS(WGML_OP_POINT, WGML_OP_POINT2)
#undef WGML_OP_POINT
#undef WGML_OP_POINT2
};
_Static_assert(sizeof wgml_op_table / sizeof *wgml_op_table == WGML_OP_COUNT, "an entry per code");

int wgml_op_count(void)
{
    return WGML_OP_COUNT;
}

/* how each elementwise op's public constructor is made (ops/elementwise.h) */
static const signed char public_api[WGML_OP_COUNT] = {
#define WGML_OP_API(e, fn, api) [WGML_OP_##e] = WGML_OP_API_##api,
#define WGML_OP_API_NONE 0
#define WGML_OP_API_UNARY 1
#define WGML_OP_API_BINARY 2
    WGML_ELEMENTWISE_OPS(WGML_OP_API)
#undef WGML_OP_API
};

wgml_status wgml_op_get_info(int index, wgml_op_info *info)
{
    if (index < 0 || index >= WGML_OP_COUNT || !info) return WGML_ERROR_INVALID_ARGUMENT;
    static const char *const kinds[] = {
#define WGML_KIND_NAME(k, name) [WGML_KIND_##k] = #name,
        WGML_OP_KINDS(WGML_KIND_NAME)
#undef WGML_KIND_NAME
    };
    const wgml_op_def *d = wgml_op_table[index];
    int binary = -1;
    if (public_api[index] == WGML_OP_API_BINARY)
        for (int b = 0; b < WGML_BINARY_OP_COUNT; b++)
            if (wgml_binary_api_op((wgml_binary_op)b) == index) binary = b;
    *info = (wgml_op_info){.name = d->name, .kind = kinds[d->kind], .arity = d->arity, .has_gradient = d->vjp != NULL,
                           .public_fn = public_api[index] != WGML_OP_API_NONE, .binary_op = binary};
    return WGML_OK;
}
