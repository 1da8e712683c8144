/*
 * The ops a matmul's gradient computes again instead of keeping (op.h's `recompute`): every
 * unary elementwise op and the row norms (layernorm, rmsnorm, normalize). A GPT-2 block's
 * matmuls read a norm's or the GELU's output; with the flag that output is freed after the
 * forward matmul and made again for the weight's gradient, which is what keeps the nanoGPT
 * step's peak at 2,052 MiB on the H100 (docs/MEASUREMENTS.md; without it on the norms the
 * peak was 2,316). The flag lives in each family's entry, so this list guards it.
 */
#include <stdbool.h>
#include <string.h>

#include "harness.h"
#include "ops/table.h"

static void recompute_flags(void)
{
    static const char *const row_norms[] = {"layernorm", "rmsnorm", "normalize"};
    int flagged = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        const wgml_op_def *d = wgml_op_table[op];
        bool want = d->kind == WGML_KIND_UNARY;
        for (int k = 0; k < N_OF(row_norms); k++) want |= !strcmp(d->name, row_norms[k]);
        if (d->recompute != want) FAILF("op %s: recompute is %d, want %d", d->name, (int)d->recompute, (int)want);
        flagged += d->recompute;
    }
    CHECK(flagged > 3); /* the unary ops are there at all */
}

int main(void)
{
    TEST_RUN(recompute_flags);
    return test_summary();
}
