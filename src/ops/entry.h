/* What a family writes its entries with (its .c files only: the short names stay out of
   other code). */
#ifndef WGML_OPS_ENTRY_H
#define WGML_OPS_ENTRY_H

#include "ops/table.h"

/* Writing entries. Test domains and tolerances: arithmetic is exact to rounding, transcendental
   functions carry the WGSL accuracy of their builtins. FLOOR(f): |ref| is floored at f where a
   result near zero carries the absolute rounding of larger terms (each use says why). */
#define ARITH .tol = 1e-5
#define TRANSC .tol = 1e-4
#define FLOOR(f) .floor = f
#define DOMAIN(l0, h0, l1, h1) .test = {.lo = {l0, l1}, .hi = {h0, h1}}

/* an elementwise entry (a unary one is cheap to recompute) */
#define UNARY(e, n, w, v, l, h, ...) \
    WGML_OP_ENTRY(e) = {.name = n, .kind = WGML_KIND_UNARY, .arity = 1, .recompute = true, .wgsl = w, .vjp = v, DOMAIN(l, h, 0, 0), __VA_ARGS__}
#define BINARY(e, n, w, v, l0, h0, l1, h1, ...) \
    WGML_OP_ENTRY(e) = {.name = n, .kind = WGML_KIND_BINARY, .arity = 2, .wgsl = w, .vjp = v, DOMAIN(l0, h0, l1, h1), __VA_ARGS__}

#endif
