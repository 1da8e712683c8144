/* The op type's helpers: an elementwise entry's WGSL written out for the fused kernels and
   the matmul epilogue. */
#include "engine/op.h"

#include <string.h>

#include "core/sbuf.h"

void wgml_op_expand(wgml_sbuf *b, int op, const char *const *operands, const char *const *scalars)
{
    for (const char *p = wgml_op_table[op]->wgsl; p && *p;) {
        if ((p[0] == '%' || p[0] == '#') && (p[1] == '0' || p[1] == '1')) {
            wgml_sbuf_put(b, "%s", p[0] == '%' ? operands[p[1] - '0'] : scalars[p[1] - '0']);
            p += 2;
        } else {
            int len = (int)strcspn(p + 1, "%#") + 1;
            wgml_sbuf_put(b, "%.*s", len, p);
            p += len;
        }
    }
}

