/*
 * Every op of every kind, walked from the op table (engine/op.h, ops/table.c;
 * wgml_op_count/wgml_op_get_info), forward against its double-precision reference
 * (tests/ref/) and, where it has a gradient rule, backward against central differences of
 * that reference: the one place an op's gradient is checked (test_autograd.c tests the
 * mechanics of autograd, python/tests/test_grad.py the binding). One record per op says what
 * this test needs beyond the table: the elementwise ops' references are found by name
 * (ref/elementwise.c), their scalars, masks and kinks in ew_extras; every other op has one
 * line in op_cases (how to make its inputs, build it, its reference, its kinks) or names
 * the test that covers it. An op with neither fails ("op X has no reference").
 *
 *   a. completeness: each entry has a name (unique), a kind, a gradient rule or a reason for
 *      none (exactly one); elementwise entries have WGSL that names only the operands and
 *      scalars they have, a tolerance and a non-empty test domain per operand; the public
 *      constructor lists name elementwise ops; wgml_op_get_info says what the table says.
 *   b. the driver: elementwise ops on awkward sizes (1, 7, 1023, 4100, 65537, odd 2-D to 4-D),
 *      inputs drawn from the entry's test domain (never zero), |gpu - ref| <= tol *
 *      max(|ref|, floor); with a rule, L = sum(w * op(x[, y])) for a fixed random w, wgml_grad
 *      against central differences (h = 1e-3 relative), inputs kept 1e-2 from kinks. Views,
 *      reductions, rows, gathers, scans, joins, random ops, matmul and attention by their
 *      cases, the same way.
 *   c. the public binary ops with a number on either side, forward and backward; softplus
 *      at its edges (+-inf, NaN, -30, 80).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "core/tensor.h"
#include "ref/ref.h"
#include "ops/attention/attention.h"
#include "engine/build.h"
#include "ops/gather.h"
#include "ops/table.h"
#include "harness.h"

#define TINY 1e-30
#define FD_REL 1e-3    /* central-difference step, relative to |x| (at least 1e-6 absolute) */
#define GRAD_TOL 1e-3  /* as test_autograd.c's grad_close */
#define GRAD_FLOOR 1e-3
#define KINK 1e-2      /* distance kept from every kink (> h everywhere the inputs go) */


/* ---------------------------------------------------------------- what the X-lists say */

static const char *const enum_name[WGML_OP_COUNT] = {
#define ENUM_NAME(e) [WGML_OP_##e] = "WGML_OP_" #e,
#define ENUM_NAME2(e, fn, api) ENUM_NAME(e)
    WGML_OPS(ENUM_NAME, ENUM_NAME2)
#undef ENUM_NAME2
#undef ENUM_NAME
};
static const char *const kind_name[] = {
#define KIND_NAME(k, name) [WGML_KIND_##k] = #k,
    WGML_OP_KINDS(KIND_NAME)
#undef KIND_NAME
};

/* the public constructors, from the same list ops/elementwise.c expands */
typedef wgml_tensor *(*unary_fn)(wgml_context *, wgml_tensor *);
typedef wgml_tensor *(*binary_fn)(wgml_context *, wgml_tensor *, wgml_tensor *);
static const struct { int op; unary_fn fn; const char *name; } public_unary[] = {
#define PUB_UNARY(e, f, api) PUB_UNARY_##api(e, f)
#define PUB_UNARY_UNARY(e, f) {WGML_OP_##e, wgml_##f, "wgml_" #f},
#define PUB_UNARY_BINARY(e, f)
#define PUB_UNARY_NONE(e, f)
    WGML_ELEMENTWISE_OPS(PUB_UNARY)
#undef PUB_UNARY
};
static const struct { int op; binary_fn fn; wgml_binary_op bop; const char *name; } public_binary[] = {
#define PUB_BINARY(e, f, api) PUB_BINARY_##api(e, f)
#define PUB_BINARY_BINARY(e, f) {WGML_OP_##e, wgml_##f, WGML_##e, "wgml_" #f},
#define PUB_BINARY_UNARY(e, f)
#define PUB_BINARY_NONE(e, f)
    WGML_ELEMENTWISE_OPS(PUB_BINARY)
#undef PUB_BINARY
};

/* the wgml_binary_op of a public binary op, or -1 */
static int public_binary_op(int op)
{
    for (int i = 0; i < N_OF(public_binary); i++)
        if (public_binary[i].op == op) return (int)public_binary[i].bop;
    return -1;
}

static const char *op_name(int op)
{
    return wgml_op_table[op]->name ? wgml_op_table[op]->name : enum_name[op];
}

/* ---------------------------------------------------------------- floors and scalars */

/* |gpu - ref| <= tol * max(|ref|, floor): the entry's floor (its family says why it has one), else
   1e-30, a plain relative check */
static double floor_of(int op) { return wgml_op_table[op]->floor > 0 ? wgml_op_table[op]->floor : TINY; }

/* ---------------------------------------------------------------- small helpers */

/* uniform in [lo, hi], never exactly zero */
static float draw(double lo, double hi)
{
    float v;
    do v = (float)test_uniform(lo, hi);
    while (v == 0.0f || v < lo || v > hi);
    return v;
}

/* Relative error per element, with the floor 1e-3 scaled by the gradient's largest magnitude
   when that exceeds 1 (as test_autograd.c's grad_close). */
static int grad_close(const char *what, const float *got, const double *want, int64_t n)
{
    double scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    if (test_max_rel_err(got, want, (size_t)n, GRAD_FLOOR * scale) <= GRAD_TOL) return 1;
    test_close(what, got, want, (size_t)n, GRAD_TOL, GRAD_FLOOR * scale);
    return 0;
}

/* the FD step at x */
static double fd_step(double x) { return FD_REL * fmax(fabs(x), 1e-3); }

/* ---------------------------------------------------------------- what elementwise ops need here */

/* distance of in[] (operands, then scalars) from a kink of the op (where its derivative jumps) */
static double kink_at_zero(const double *in) { return fabs(in[0]); }
static double kink_at_bounds(const double *in) { return fmin(fabs(in[0] - in[1]), fabs(in[0] - in[2])); }
static double kink_at_ties(const double *in) { return fabs(in[0] - in[1]); }

static wgml_tensor *build_clamp(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const double *s)
{
    (void)b;
    return wgml_clamp(ctx, a, (float)s[0], (float)s[1]);
}
static wgml_tensor *build_masked_fill(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const double *s)
{
    return wgml_masked_fill(ctx, a, b, (float)s[0]);
}

/* An elementwise op's needs beyond its entry and reference, one record per op that has any:
   the scalars it runs with (inside its test domain) and its constructor then, the operand that
   is a 0/1 mask (no gradient), its kinks. An op with scalars and no record fails (a); one with a
   kink and no record fails its gradient check near the kink. */
typedef struct ew_extra {
    const char *name;
    double s[2];
    wgml_tensor *(*build)(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const double *s);
    int mask;                        /* 1 + the operand that is a mask, or 0 */
    double (*kink)(const double *in);
    /* its gradient passes straight through (a cast between f32 and f16, as PyTorch's): held
       to the identity's, not to differences of its rounding steps */
    bool straight;
} ew_extra;

static const ew_extra ew_extras[] = {
    {"relu", .kink = kink_at_zero},
    {"abs", .kink = kink_at_zero},
    {"relu_grad", .kink = kink_at_zero},
    {"clamp", {-1.0, 1.5}, build_clamp, .kink = kink_at_bounds},
    {"maximum", .kink = kink_at_ties},
    {"minimum", .kink = kink_at_ties},
    {"masked_fill", {-7.5, 0}, build_masked_fill, .mask = 2},
    {"cast_f16", .straight = true},
};

static const ew_extra *extra_of(int op)
{
    for (int i = 0; i < N_OF(ew_extras); i++)
        if (strcmp(ew_extras[i].name, wgml_op_table[op]->name) == 0) return &ew_extras[i];
    return NULL;
}

static const double *scalars_of(int op)
{
    const ew_extra *x = extra_of(op);
    return x && x->build ? x->s : NULL;
}

/* operands that are masks: drawn as 0 or 1 (the draw never gives 0 otherwise), no gradient */
static bool mask_operand(int op, int k)
{
    const ew_extra *x = extra_of(op);
    return x && x->mask == k + 1;
}
static void snap_mask(int op, int k, float *x, int64_t n)
{
    if (mask_operand(op, k))
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0 ? 1.0f : 0.0f;
}

/* ---------------------------------------------------------------- a. completeness */

/* counts %k (operands) and #k (scalars) in a WGSL expression: which k appear, any k past 1 */
static void wgsl_refs(const char *w, int *ops_seen, int *sc_seen, int *bad)
{
    *ops_seen = *sc_seen = *bad = 0;
    for (const char *p = w; *p; p++) {
        if (*p != '%' && *p != '#') continue;
        int k = p[1] - '0';
        if (k < 0 || k > 1) { *bad = 1; continue; }
        if (*p == '%') *ops_seen |= 1 << k;
        else *sc_seen |= 1 << k;
        p++;
    }
}

static void the_table_is_complete(void)
{
    int bad_entries = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        const wgml_op_def *d = wgml_op_table[op];
        int before = test_failures;
        const char *nm = op_name(op);
#define ENTRY_FAIL(...)                                                   \
        do {                                                              \
            fprintf(stderr, "FAIL %s: entry %s (%s): ", test_current, nm, enum_name[op]); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            test_failures++;                                              \
        } while (0)
        if (!d->name || !d->name[0]) ENTRY_FAIL("no name");
        if ((int)d->kind < 0 || d->kind >= WGML_KIND_COUNT) ENTRY_FAIL("kind %d is not a kind", (int)d->kind);
        int has_rule = d->vjp != NULL, has_reason = d->no_grad != NULL && d->no_grad[0];
        if (d->no_grad && !d->no_grad[0]) ENTRY_FAIL("an empty no_grad reason");
        if (has_rule + has_reason != 1)
            ENTRY_FAIL("%s", has_rule ? "both a gradient rule and a reason for none"
                                      : "neither a gradient rule (vjp) nor a reason for none (no_grad)");
        if (d->constant && !has_reason) ENTRY_FAIL("constant (passes no gradient) but without a no_grad reason");
        if (op == WGML_OP_NONE && !has_reason) ENTRY_FAIL("storage is a leaf: it needs no_grad, not a rule");
        if (op == WGML_OP_VIEW && !has_rule) ENTRY_FAIL("views pass gradients: they need a rule");
        if (d->nscalars < 0 || d->nscalars > 2) ENTRY_FAIL("nscalars %d (the WGSL has #0 and #1 only)", d->nscalars);
        if (!(d->tol >= 0) || !isfinite(d->tol)) ENTRY_FAIL("tolerance %g", d->tol);

        bool ew = d->kind == WGML_KIND_UNARY || d->kind == WGML_KIND_BINARY;
        if (ew) {
            int want_arity = d->kind == WGML_KIND_UNARY ? 1 : 2;
            if (d->arity != want_arity) ENTRY_FAIL("arity %d, want %d for its kind", d->arity, want_arity);
            if (!(d->tol > 0)) ENTRY_FAIL("tolerance %g, want > 0", d->tol);
            for (int k = 0; k < want_arity; k++)
                if (!(d->test.lo[k] < d->test.hi[k]) || !isfinite(d->test.lo[k]) || !isfinite(d->test.hi[k]))
                    ENTRY_FAIL("operand %d's test domain [%g, %g] is empty or not finite", k, d->test.lo[k], d->test.hi[k]);
            if (!d->wgsl || !d->wgsl[0]) ENTRY_FAIL("no WGSL expression");
            else {
                int ops_seen, sc_seen, bad;
                wgsl_refs(d->wgsl, &ops_seen, &sc_seen, &bad);
                if (bad) ENTRY_FAIL("WGSL \"%s\" names an operand or scalar past 1", d->wgsl);
                if (ops_seen != (1 << want_arity) - 1)
                    ENTRY_FAIL("WGSL \"%s\" names operands 0x%x, want each of its %d", d->wgsl, (unsigned)ops_seen, want_arity);
                if (sc_seen != (1 << d->nscalars) - 1)
                    ENTRY_FAIL("WGSL \"%s\" names scalars 0x%x, but nscalars is %d", d->wgsl, (unsigned)sc_seen, d->nscalars);
                const char *operands[2] = {"aa", "bb"}, *scalars[2] = {"ss", "tt"};
                wgml_sbuf b = {0};
                wgml_op_expand(&b, op, operands, scalars);
                char *out = wgml_sbuf_take(&b);
                if (!out)
                    ENTRY_FAIL("wgml_op_expand fails on its WGSL");
                else if (strchr(out, '%') || strchr(out, '#'))
                    ENTRY_FAIL("wgml_op_expand leaves a placeholder: %s", out);
                free(out);
            }
            if (d->nscalars > 0 && !scalars_of(op)) ENTRY_FAIL("nscalars %d but this test has no scalars for it (ew_extras)", d->nscalars);
        } else if (d->wgsl) {
            ENTRY_FAIL("WGSL on a %s entry (only elementwise ops have an expression)", kind_name[d->kind]);
        }
        if (op == WGML_OP_CLAMP && d->nscalars != 2) ENTRY_FAIL("clamp has two scalars (its bounds), nscalars %d", d->nscalars);
        if (d->kind == WGML_KIND_BINARY && d->nscalars != 0 && public_binary_op(op) >= 0)
            ENTRY_FAIL("a public binary op's scalar slot #0 is its number operand: nscalars %d", d->nscalars);
        if (d->kind == WGML_KIND_KERNEL && !d->build) ENTRY_FAIL("a KERNEL entry without a build function");
        if (d->kind == WGML_KIND_REDUCE || d->kind == WGML_KIND_ROW || d->kind == WGML_KIND_MATMUL || d->kind == WGML_KIND_KERNEL)
            if (!(d->test.lo[0] < d->test.hi[0])) ENTRY_FAIL("operand 0's test domain [%g, %g] is empty", d->test.lo[0], d->test.hi[0]);
        for (int o = 0; o < op; o++)
            if (d->name && wgml_op_table[o]->name && strcmp(d->name, wgml_op_table[o]->name) == 0)
                ENTRY_FAIL("the name \"%s\" is also %s's", d->name, enum_name[o]);
#undef ENTRY_FAIL
        if (test_failures != before) bad_entries++;
    }
    for (int i = 0; i < N_OF(public_unary); i++)
        if (wgml_op_table[public_unary[i].op]->kind != WGML_KIND_UNARY)
            FAILF("%s is UNARY in WGML_ELEMENTWISE_OPS but %s is not UNARY", public_unary[i].name, enum_name[public_unary[i].op]);
    for (int i = 0; i < N_OF(public_binary); i++)
        if (wgml_op_table[public_binary[i].op]->kind != WGML_KIND_BINARY)
            FAILF("%s is BINARY in WGML_ELEMENTWISE_OPS but %s is not BINARY", public_binary[i].name, enum_name[public_binary[i].op]);
    fprintf(stderr, "  %d entries, %d incomplete\n", WGML_OP_COUNT, bad_entries);
}

/* ---------------------------------------------------------------- elementwise cases */

typedef struct ew_case {
    int op;
    int side;  /* 0: tensor operands; 1: op(x, s); 2: op(s, x) (a public binary op with a number) */
    double s;  /* that number */
    int nd;
    int64_t sh[4];
    wgml_ref_elementwise_fn ref; /* its reference (ew_forward and ew_backward look it up) */
} ew_case;

/* the tensor operands a case has */
static int ew_ntensors(const ew_case *c) { return wgml_op_table[c->op]->kind == WGML_KIND_BINARY && !c->side ? 2 : 1; }

/* the position of tensor operand k among the op's operands (its test domain) */
static int ew_position(const ew_case *c, int k) { return c->side == 2 ? 1 : k; }

/* the reference's in[]: operands, then scalars */
static int ew_inputs(const ew_case *c, double x, double y, double *in)
{
    const wgml_op_def *d = wgml_op_table[c->op];
    int k = 0;
    if (d->kind == WGML_KIND_UNARY) in[k++] = x;
    else if (c->side == 1) in[k++] = x, in[k++] = c->s;
    else if (c->side == 2) in[k++] = c->s, in[k++] = x;
    else in[k++] = x, in[k++] = y;
    const double *sc = scalars_of(c->op);
    for (int j = 0; j < d->nscalars; j++) in[k++] = sc ? sc[j] : NAN;
    return k;
}

static double ew_ref(const ew_case *c, double x, double y)
{
    double in[4];
    ew_inputs(c, x, y, in);
    return c->ref(in);
}

/* how far the inputs are from the op's kinks (ew_extras) */
static double ew_kink(const ew_case *c, double x, double y)
{
    double in[4];
    ew_inputs(c, x, y, in);
    const ew_extra *e = extra_of(c->op);
    return e && e->kink ? e->kink(in) : INFINITY;
}

/* the node of case c on tensors a (and b); NULL (and a FAIL) when this test cannot build it */
static wgml_tensor *ew_build(wgml_context *ctx, const ew_case *c, wgml_tensor *a, wgml_tensor *b)
{
    const wgml_op_def *d = wgml_op_table[c->op];
    if (c->side) {
        int bop = public_binary_op(c->op);
        if (bop < 0) {
            FAILF("%s: a number operand needs a public binary op", d->name);
            return NULL;
        }
        return c->side == 1 ? wgml_binary_scalar(ctx, (wgml_binary_op)bop, a, (float)c->s)
                            : wgml_scalar_binary(ctx, (wgml_binary_op)bop, (float)c->s, a);
    }
    if (d->nscalars == 0)
        return d->kind == WGML_KIND_UNARY ? wgml_unary_node(ctx, (wgml_op)c->op, a) : wgml_binary_node(ctx, (wgml_op)c->op, a, b);
    const ew_extra *e = extra_of(c->op);
    if (e && e->build) return e->build(ctx, a, b, e->s);
    FAILF("no constructor for %s with %d scalars in this test (ew_extras)", d->name, d->nscalars);
    return NULL;
}

static void ew_describe(char *out, size_t cap, const ew_case *c)
{
    char ss[48];
    test_shape_str(ss, sizeof ss, c->nd, c->sh);
    const char *n = op_name(c->op);
    if (c->side == 1) snprintf(out, cap, "%s(x%s, %g)", n, ss, c->s);
    else if (c->side == 2) snprintf(out, cap, "%s(%g, x%s)", n, c->s, ss);
    else snprintf(out, cap, "%s %s", n, ss);
}

/* ---------------------------------------------------------------- b. forward */

/* operand k of case c from x: i32 where the entry takes only i32 (x is then rounded to whole
   numbers, none zero) */
static wgml_tensor *ew_tensor(wgml_context *ctx, const ew_case *c, int k, float *x)
{
    if (!(wgml_op_table[c->op]->i32_only >> ew_position(c, k) & 1)) return test_tensor(ctx, c->nd, c->sh, x);
    int64_t n = test_numel(c->nd, c->sh);
    int32_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = (int32_t)lrint(x[i]);
        if (v[i] == 0) v[i] = 1;
        x[i] = (float)v[i];
    }
    wgml_tensor *t = test_tensor_i32(ctx, c->nd, c->sh, v);
    free(v);
    return t;
}

static void ew_forward(wgml_context *ctx, const ew_case *cin)
{
    ew_case cc = *cin, *c = &cc;
    cc.ref = wgml_ref_elementwise(wgml_op_table[c->op]->name);
    const wgml_op_def *d = wgml_op_table[c->op];
    if (!cc.ref) {
        FAILF("op %s has no reference (tests/ref/elementwise.c)", d->name);
        return;
    }
    int64_t n = test_numel(c->nd, c->sh);
    int nt = ew_ntensors(c);
    float *x[2] = {NULL, NULL};
    double *want = malloc((size_t)n * sizeof *want);
    for (int k = 0; k < nt; k++) {
        int p = ew_position(c, k);
        x[k] = malloc((size_t)n * sizeof *x[k]);
        for (int64_t i = 0; i < n; i++) x[k][i] = draw(d->test.lo[p], d->test.hi[p]);
        snap_mask(c->op, p, x[k], n);
    }
    char what[128];
    ew_describe(what, sizeof what, c);
    wgml_scope_begin(ctx);
    wgml_tensor *a = ew_tensor(ctx, c, 0, x[0]), *b = nt > 1 ? ew_tensor(ctx, c, 1, x[1]) : NULL;
    for (int64_t i = 0; i < n; i++) want[i] = ew_ref(c, x[0][i], nt > 1 ? x[1][i] : 0.0);
    wgml_tensor *y = ew_build(ctx, c, a, b);
    if (y && y->op != c->op) FAILF("%s: the node built is op %d (%s)", what, y->op, op_name(y->op));
    if (y && wgml_tensor_status(y)) FAILF("%s: built in error: %s", what, wgml_error_message(ctx));
    else if (y) {
        float *got = test_read_new(ctx, what, y, n);
        if (got && !test_close(what, got, want, (size_t)n, d->tol, floor_of(c->op))) FAILF("%s: off the reference", what);
        free(got);
    }
    wgml_scope_end(ctx);
    free(x[0]);
    free(x[1]);
    free(want);
}

/* 1, 7, 1023 (the scalar path), 4100 (vec4), 65537 (past 256 workgroups), odd 2-D/3-D, a 4-D */
static const struct { int nd; int64_t s[4]; } ew_shapes[] = {
    {1, {1}}, {1, {7}}, {1, {1023}}, {1, {4100}}, {1, {65537}}, {2, {3, 5}}, {3, {2, 3, 7}}, {4, {2, 2, 3, 2}},
};

/* every public elementwise constructor builds its own op */
/* wgml_op_get_info (what Python makes its elementwise functions from) says what the table says */
static void op_info_describes_every_entry(void)
{
    CHECK(wgml_op_count() == WGML_OP_COUNT);
    wgml_op_info info;
    CHECK(wgml_op_get_info(-1, &info) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_op_get_info(WGML_OP_COUNT, &info) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_op_get_info(0, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    int unary = 0, binary = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        const wgml_op_def *d = wgml_op_table[op];
        if (wgml_op_get_info(op, &info) != WGML_OK || !info.name || !info.kind) {
            FAILF("op %d: no info", op);
            continue;
        }
        if (strcmp(info.name, d->name) || info.arity != d->arity ||
            info.has_gradient != (d->vjp != NULL))
            FAILF("op %s: info (%s, %s, arity %d, gradient %d) differs from its entry", enum_name[op], info.name, info.kind,
                  info.arity, info.has_gradient);
        for (const char *k = kind_name[d->kind], *c = info.kind; *k || *c; k++, c++)
            if (tolower((unsigned char)*k) != *c) {
                FAILF("op %s: kind \"%s\", its entry's %s", enum_name[op], info.kind, kind_name[d->kind]);
                break;
            }
        if (info.public_fn && d->kind == WGML_KIND_UNARY) unary++;
        if (info.public_fn && d->kind == WGML_KIND_BINARY) {
            binary++;
            if (info.binary_op < 0 || wgml_binary_api_op((wgml_binary_op)info.binary_op) != op)
                FAILF("op %s: binary_op %d is not its wgml_binary_op", enum_name[op], info.binary_op);
        } else if (info.binary_op != -1) {
            FAILF("op %s: binary_op %d on an op without a public binary constructor", enum_name[op], info.binary_op);
        }
    }
    CHECK(unary == N_OF(public_unary) && binary == N_OF(public_binary) && binary == WGML_BINARY_OP_COUNT);
}

static void public_constructors_build_their_ops(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float v[3] = {0.5f, 1.0f, 2.0f};
    int64_t sh = 3;
    wgml_scope_begin(ctx);
    wgml_tensor *a = test_tensor(ctx, 1, &sh, v), *b = test_tensor(ctx, 1, &sh, v);
    for (int i = 0; i < N_OF(public_unary); i++) {
        wgml_tensor *t = public_unary[i].fn(ctx, a);
        if (!t || t->op != public_unary[i].op)
            FAILF("%s builds op %s, want %s", public_unary[i].name, t ? op_name(t->op) : "NULL", op_name(public_unary[i].op));
    }
    for (int i = 0; i < N_OF(public_binary); i++) {
        wgml_tensor *t[4] = {public_binary[i].fn(ctx, a, b), wgml_binary(ctx, public_binary[i].bop, a, b),
                             wgml_binary_scalar(ctx, public_binary[i].bop, a, 2.0f),
                             wgml_scalar_binary(ctx, public_binary[i].bop, 2.0f, a)};
        for (int k = 0; k < 4; k++)
            if (!t[k] || t[k]->op != public_binary[i].op)
                FAILF("%s (form %d) builds op %s, want %s", public_binary[i].name, k, t[k] ? op_name(t[k]->op) : "NULL",
                      op_name(public_binary[i].op));
    }
    wgml_scope_end(ctx);
}

/* op(x, s) and op(s, x) for every public binary op: the number from the other position's
   domain */
static void binary_ops_with_a_number_on_either_side(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const struct { int nd; int64_t s[4]; } shapes[] = {{1, {7}}, {1, {4100}}, {3, {2, 3, 7}}};
    for (int i = 0; i < N_OF(public_binary); i++) {
        const wgml_op_def *d = wgml_op_table[public_binary[i].op];
        for (int side = 1; side <= 2; side++)
            for (int s = 0; s < N_OF(shapes); s++) {
                int other = side == 1 ? 1 : 0;
                ew_case c = {.op = public_binary[i].op, .side = side, .s = draw(d->test.lo[other], d->test.hi[other]), .nd = shapes[s].nd};
                memcpy(c.sh, shapes[s].s, sizeof c.sh);
                ew_forward(ctx, &c);
            }
    }
}

/* softplus(+inf) = inf, softplus(-inf) = 0, NaN stays NaN, softplus(-30) = 9.36e-14 (the
   series, where 1 + e^-30 rounds to 1), softplus(80) = 80; on the scalar and the vec4 path */
static void softplus_at_its_edges(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const wgml_op_def *d = wgml_op_table[WGML_OP_SOFTPLUS];
    wgml_ref_elementwise_fn ref = wgml_ref_elementwise(d->name);
    if (!ref) {
        FAILF("softplus has no reference");
        return;
    }
    const float x[8] = {INFINITY, -INFINITY, NAN, -30.0f, 80.0f, 0.0f, -80.0f, 30.0f};
    const double sp_m30 = 9.357622968840175e-14; /* log1p(exp(-30)) */
    /* the reference itself */
    double in = INFINITY;
    CHECK(ref(&in) == INFINITY);
    in = -INFINITY;
    CHECK(ref(&in) == 0.0);
    in = NAN;
    CHECK(isnan(ref(&in)));
    in = -30;
    CHECK(fabs(ref(&in) - sp_m30) <= 1e-12 * sp_m30);
    in = 80;
    CHECK(ref(&in) == 80.0);
    const int64_t sizes[2] = {5, 8};
    for (int k = 0; k < 2; k++) {
        int64_t n = sizes[k];
        wgml_scope_begin(ctx);
        wgml_tensor *a = test_tensor(ctx, 1, &n, x), *y = wgml_softplus(ctx, a);
        char what[64];
        snprintf(what, sizeof what, "softplus edges (n=%lld)", (long long)n);
        float *got = test_read_new(ctx, what, y, n);
        if (got) {
            if (!(got[0] == INFINITY)) FAILF("%s: softplus(+inf) = %.9g, want inf", what, got[0]);
            if (!(got[1] == 0.0f)) FAILF("%s: softplus(-inf) = %.9g, want 0", what, got[1]);
            if (!isnan(got[2])) FAILF("%s: softplus(NaN) = %.9g, want NaN", what, got[2]);
            if (!(fabs(got[3] - sp_m30) <= 1e-5 * sp_m30)) FAILF("%s: softplus(-30) = %.9g, want %.9g", what, got[3], sp_m30);
            if (!(got[4] == 80.0f)) FAILF("%s: softplus(80) = %.9g, want 80", what, got[4]);
            double want[8];
            for (int i = 0; i < n; i++) {
                double xi = x[i];
                want[i] = ref(&xi);
            }
            if (!test_close(what, got, want, (size_t)n, d->tol, TINY)) FAILF("%s: off the reference", what);
        }
        free(got);
        wgml_scope_end(ctx);
    }
}

/* ---------------------------------------------------------------- c. backward */

/* the FD range of an operand: its test domain clipped to [-3, 3] (exp, pow and the like stay
   moderate), or its first unit when the domain lies outside */
static void fd_range(int op, int pos, double *lo, double *hi)
{
    const wgml_op_def *d = wgml_op_table[op];
    *lo = fmax(d->test.lo[pos], -3.0);
    *hi = fmin(d->test.hi[pos], 3.0);
    if (!(*lo < *hi)) {
        *lo = d->test.lo[pos];
        *hi = fmin(d->test.hi[pos], *lo + 1.0);
    }
}

static void ew_backward(wgml_context *ctx, const ew_case *cin)
{
    ew_case cc = *cin, *c = &cc;
    cc.ref = wgml_ref_elementwise(wgml_op_table[c->op]->name);
    if (!cc.ref) {
        FAILF("op %s has no reference (tests/ref/elementwise.c)", wgml_op_table[c->op]->name);
        return;
    }
    int64_t n = test_numel(c->nd, c->sh);
    int nt = ew_ntensors(c);
    float *x[2] = {NULL, NULL}, *w = malloc((size_t)n * sizeof *w);
    double *want = malloc((size_t)n * sizeof *want);
    double lo[2] = {0, 0}, hi[2] = {0, 0};
    for (int k = 0; k < nt; k++) {
        fd_range(c->op, ew_position(c, k), &lo[k], &hi[k]);
        x[k] = malloc((size_t)n * sizeof *x[k]);
    }
    char what[160];
    ew_describe(what, sizeof what, c);
    for (int64_t i = 0; i < n; i++) {
        int tries = 0;
        do {
            for (int k = 0; k < nt; k++) x[k][i] = draw(lo[k], hi[k]);
        } while (ew_kink(c, x[0][i], nt > 1 ? x[1][i] : 0.0) < KINK && ++tries < 1000);
        if (tries == 1000) {
            FAILF("%s: no inputs %g away from its kinks in [%g, %g]", what, KINK, lo[0], hi[0]);
            goto out;
        }
    }
    for (int k = 0; k < nt; k++) snap_mask(c->op, ew_position(c, k), x[k], n);
    test_fill_uniform(w, (size_t)n, -1, 1);
    wgml_scope_begin(ctx);
    wgml_tensor *in[2] = {NULL, NULL};
    for (int k = 0; k < nt; k++) {
        in[k] = test_tensor(ctx, c->nd, c->sh, x[k]);
        if (!mask_operand(c->op, ew_position(c, k))) CHECK_OK(ctx, wgml_requires_grad(in[k], 1));
    }
    wgml_tensor *y = ew_build(ctx, c, in[0], in[1]);
    if (!y || wgml_tensor_status(y)) {
        if (y) FAILF("%s: built in error: %s", what, wgml_error_message(ctx));
        goto scope;
    }
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, c->nd, c->sh, w)));
    wgml_status st = wgml_backward(L);
    if (st) {
        FAILF("%s: wgml_backward gave %s: %s", what, wgml_status_name(st), wgml_error_message(ctx));
        goto scope;
    }
    wgml_tensor *ev[3] = {L, NULL, NULL};
    for (int k = 0; k < nt; k++) {
        if (mask_operand(c->op, ew_position(c, k))) { ev[1 + k] = L; continue; } /* no gradient */
        ev[1 + k] = wgml_grad(in[k]);
        if (!ev[1 + k]) {
            FAILF("%s: no gradient reaches operand %d", what, k);
            goto scope;
        }
    }
    st = wgml_eval(ctx, 1 + nt, ev);
    if (st) {
        FAILF("%s: evaluating the gradients gave %s: %s", what, wgml_status_name(st), wgml_error_message(ctx));
        goto scope;
    }
    /* the loss, against the reference */
    float Lgpu = NAN;
    CHECK_OK(ctx, wgml_tensor_read(L, &Lgpu, 1));
    double Lcpu = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ew_ref(c, x[0][i], nt > 1 ? x[1][i] : 0.0);
        Lcpu += w[i] * v;
        mag += fabs(w[i] * v);
    }
    if (!(fabs(Lgpu - Lcpu) <= 1e-4 * fmax(mag, 1e-3))) FAILF("%s: loss %.9g, reference %.9g", what, Lgpu, Lcpu);
    /* each operand's gradient: w_i (f(x_i + h) - f(x_i - h)) / 2h (elementwise, so one
       element's difference is the loss's) */
    for (int k = 0; k < nt; k++) {
        if (mask_operand(c->op, ew_position(c, k))) continue;
        for (int64_t i = 0; i < n; i++) {
            double v[2] = {x[0][i], nt > 1 ? x[1][i] : 0.0}, h = fd_step(v[k]), p[2], m[2];
            memcpy(p, v, sizeof v);
            memcpy(m, v, sizeof v);
            p[k] += h;
            m[k] -= h;
            want[i] = w[i] * (ew_ref(c, p[0], p[1]) - ew_ref(c, m[0], m[1])) / (2 * h);
            if (extra_of(c->op) && extra_of(c->op)->straight) want[i] = w[i];
        }
        char gw[200];
        snprintf(gw, sizeof gw, "d/d(operand %d) of %s", k, what);
        float *got = test_read_new(ctx, gw, ev[1 + k], n);
        if (got && !grad_close(gw, got, want, n)) FAILF("%s: off the central differences", gw);
        free(got);
    }
scope:
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
out:
    free(x[0]);
    free(x[1]);
    free(w);
    free(want);
}

static const struct { int nd; int64_t s[4]; } grad_shapes[] = {{1, {1}}, {1, {7}}, {2, {3, 5}}, {3, {2, 3, 4}}};

/* the public binary ops with a number on either side: the gradient of the tensor operand */
static void binary_ops_with_a_number_have_the_right_gradient(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    for (int i = 0; i < N_OF(public_binary); i++) {
        int op = public_binary[i].op;
        if (!wgml_op_table[op]->vjp) continue;
        for (int side = 1; side <= 2; side++) {
            double lo, hi;
            fd_range(op, side == 1 ? 1 : 0, &lo, &hi);
            ew_case c = {.op = op, .side = side, .s = draw(lo, hi), .nd = 2, .sh = {3, 5}};
            ew_backward(ctx, &c);
        }
    }
}

/* ---------------------------------------------------------------- d. every other kind: one case per op */

#define MAXIN 4
#define MAXEL 1024 /* elements of a leaf or a result (rows of 300: past one workgroup) */

/* one run of a case: its leaves and the op's parameters */
typedef struct rcase {
    int op;
    int nin;               /* leaves */
    int nd[MAXIN];
    int64_t sh[MAXIN][4];
    double lo[MAXIN], hi[MAXIN];
    int labels_of[MAXIN];  /* > 0: leaf holds class indices 0..labels_of-1 (no gradient) */
    bool ints[MAXIN];      /* ... uploaded as i32 (indices of gather and scatter) */
    int axis;
    float eps;
    float r0, r1;          /* random ops: rand's lo, hi; randn's mean, std; dropout's p */
    int flag;              /* cumsum: reverse; rope: 1 interleaved, 2 inverse; views: which view */
    int64_t pos;           /* rope: pos_offset */
    float base;            /* rope */
    int causal;            /* attention's desc */
    float scale;
    int with_weight;       /* the norms (and their gradients): a weight, or none */
    int with_bias;         /* layernorm and matmul: a bias, or none */
    int ta, tb, act;       /* matmul's desc (alpha in scale) */
    int keepdim, all;      /* reductions: keep the reduced axis; over every element (the *_all form) */
} rcase;

/* Everything this test knows of one op that is not elementwise, in one record: how to make
   the inputs of its runs, how to build it on the GPU, its double reference (ref/ref.h) and
   where its derivative jumps. An op covered elsewhere names that test instead. The driver
   walks wgml_op_get_info: an op with neither fails. */
typedef struct op_case {
    const char *name;       /* the op's, as wgml_op_get_info says */
    const char *covered_by; /* or: the test that checks it against a reference instead */
    /* run v's leaves and parameters (c->op set, the rest zero); false past the last run */
    bool (*make)(rcase *c, int v, const wgml_op_def *d);
    wgml_tensor *(*build)(wgml_context *ctx, const rcase *c, wgml_tensor *const *in);
    int64_t (*ref)(const rcase *c, double *const *in, double *out); /* out's element count, or -1 */
    double (*kink)(const rcase *c, double *const *in);               /* NULL: smooth */
} op_case;

#define RCASE_SEED 20240601 /* random ops are built at (this seed, offset 0) */

static void set_leaf(rcase *c, int l, int nd, const int64_t *sh, double lo, double hi)
{
    c->nd[l] = nd;
    memcpy(c->sh[l], sh, (size_t)nd * sizeof *sh);
    c->lo[l] = lo;
    c->hi[l] = hi;
    if (l >= c->nin) c->nin = l + 1;
}

static int64_t numel0(const rcase *c) { return test_numel(c->nd[0], c->sh[0]); }

static const int64_t s354[3] = {3, 5, 4}, s47[2] = {4, 7}, s7[1] = {7};

/* ---- views: a permutation, a strided slice, a broadcast (each one VIEW node) */
static bool make_view(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t s234[3] = {2, 3, 4}, s54[2] = {5, 4}, s31[2] = {3, 1};
    const int64_t *shapes[3] = {s234, s54, s31};
    if (v > 2) return false;
    c->flag = v;
    set_leaf(c, 0, v ? 2 : 3, shapes[v], -3, 3);
    (void)d;
    return true;
}
static const int view_axes[3] = {2, 0, 1};
static const int64_t view_to[2] = {3, 4};
static wgml_tensor *build_view(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return c->flag == 0   ? wgml_permute(ctx, in[0], view_axes)
           : c->flag == 1 ? wgml_slice(ctx, in[0], 0, 1, 5, 2)
                          : wgml_broadcast_to(ctx, in[0], 2, view_to);
}
static int64_t ref_view(const rcase *c, double *const *in, double *out)
{
    if (c->flag == 0) {
        wgml_ref_permute(c->nd[0], c->sh[0], in[0], view_axes, out);
        return numel0(c);
    }
    if (c->flag == 1) {
        wgml_ref_slice(c->nd[0], c->sh[0], in[0], 0, 1, 5, 2, out);
        return wgml_ref_slice_len(1, 5, 2) * c->sh[0][1];
    }
    return wgml_ref_broadcast_to(c->nd[0], c->sh[0], in[0], 2, view_to, out) ? -1 : view_to[0] * view_to[1];
}

/* ---- reductions: along each axis (a negative one too) of awkward shapes, keeping the axis or
   not, rows past one workgroup, and over every element (the *_all form, at the end: the
   index reductions have none) */
static const struct { int nd; int64_t s[4]; int axis, keepdim, all; } reduce_runs[] = {
    {3, {3, 5, 4}, 0, 0, 0}, {3, {3, 5, 4}, 1, 0, 0},    {3, {3, 5, 4}, 2, 1, 0},    {3, {2, 3, 4}, -1, 1, 0},
    {1, {7}, 0, 1, 0},       {1, {1}, 0, 0, 0},          {4, {2, 1, 3, 2}, 1, 0, 0}, {4, {2, 1, 3, 2}, 2, 1, 0},
    {1, {600}, 0, 0, 0},     {2, {3, 300}, 1, 0, 0},     {2, {300, 2}, 0, 0, 0},
    {3, {2, 3, 4}, 0, 0, 1}, {1, {1}, 0, 0, 1},          {2, {5, 6}, 0, 0, 1},
};
enum { REDUCE_ALL_RUNS = 3 };
static bool make_reduce(rcase *c, int v, const wgml_op_def *d)
{
    bool index = c->op == WGML_OP_ARGMAX || c->op == WGML_OP_ARGMIN;
    if (v >= N_OF(reduce_runs) - (index ? REDUCE_ALL_RUNS : 0)) return false;
    set_leaf(c, 0, reduce_runs[v].nd, reduce_runs[v].s, d->test.lo[0], d->test.hi[0]);
    c->axis = reduce_runs[v].axis;
    c->keepdim = reduce_runs[v].keepdim;
    c->all = reduce_runs[v].all;
    return true;
}
/* what the reference reduces: the leaf along its axis, or all of it as one axis */
static int reduce_shape(const rcase *c, int64_t *sh, int *axis)
{
    if (c->all) {
        sh[0] = numel0(c);
        *axis = 0;
        return 1;
    }
    memcpy(sh, c->sh[0], sizeof c->sh[0]);
    *axis = c->axis < 0 ? c->axis + c->nd[0] : c->axis;
    return c->nd[0];
}
static int64_t reduced(const rcase *c)
{
    int64_t sh[4];
    int ax;
    reduce_shape(c, sh, &ax);
    return numel0(c) / sh[ax];
}
static int64_t ref_reduce(const rcase *c, const double *x, double *out,
                          void (*f)(int, const int64_t *, const double *, int, double *))
{
    int64_t sh[4];
    int ax, nd = reduce_shape(c, sh, &ax);
    f(nd, sh, x, ax, out);
    return reduced(c);
}
static wgml_tensor *build_sum(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return c->all ? wgml_sum_all(ctx, in[0]) : wgml_sum(ctx, in[0], c->axis, c->keepdim);
}
static wgml_tensor *build_mean(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return c->all ? wgml_mean_all(ctx, in[0]) : wgml_mean(ctx, in[0], c->axis, c->keepdim);
}
static wgml_tensor *build_max(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return c->all ? wgml_max_all(ctx, in[0]) : wgml_max(ctx, in[0], c->axis, c->keepdim);
}
static wgml_tensor *build_min(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return c->all ? wgml_min_all(ctx, in[0]) : wgml_min(ctx, in[0], c->axis, c->keepdim);
}
static wgml_tensor *build_argmax(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_argmax(ctx, in[0], c->axis, c->keepdim); }
static wgml_tensor *build_argmin(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_argmin(ctx, in[0], c->axis, c->keepdim); }
static int64_t ref_sum(const rcase *c, double *const *in, double *out) { return ref_reduce(c, in[0], out, wgml_ref_sum); }
static int64_t ref_mean(const rcase *c, double *const *in, double *out) { return ref_reduce(c, in[0], out, wgml_ref_mean); }
static int64_t ref_max(const rcase *c, double *const *in, double *out) { return ref_reduce(c, in[0], out, wgml_ref_max); }
static int64_t ref_argmax(const rcase *c, double *const *in, double *out) { return ref_reduce(c, in[0], out, wgml_ref_argmax); }
/* min and argmin: the max and argmax of -x */
static int64_t ref_min(const rcase *c, double *const *in, double *out)
{
    static double neg[MAXEL];
    for (int64_t i = 0; i < numel0(c); i++) neg[i] = -in[0][i];
    int64_t n = ref_reduce(c, neg, out, wgml_ref_max);
    for (int64_t i = 0; i < n; i++) out[i] = -out[i];
    return n;
}
static int64_t ref_argmin(const rcase *c, double *const *in, double *out)
{
    static double neg[MAXEL];
    for (int64_t i = 0; i < numel0(c); i++) neg[i] = -in[0][i];
    return ref_reduce(c, neg, out, wgml_ref_argmax);
}
/* how far a max's inputs are from a tie of the max (its kink); a min's, of -x */
static double extremum_gap(const rcase *c, const double *x, double sign)
{
    int64_t sh[4];
    int ax, nd = reduce_shape(c, sh, &ax);
    int64_t outer = 1, n = sh[ax], inner = 1;
    for (int d = 0; d < ax; d++) outer *= sh[d];
    for (int d = ax + 1; d < nd; d++) inner *= sh[d];
    static double v[MAXEL];
    for (int64_t i = 0; i < outer * n * inner; i++) v[i] = sign * x[i];
    return test_max_gap(outer, n, inner, v);
}
static double kink_max(const rcase *c, double *const *in) { return extremum_gap(c, in[0], 1); }
static double kink_min(const rcase *c, double *const *in) { return extremum_gap(c, in[0], -1); }

/* ---- rows: softmax, the norms, cross-entropy ([rows, cols] = [4, 7]) */
static int64_t cols_of(const rcase *c) { return c->sh[0][c->nd[0] - 1]; }
static int64_t rows_of(const rcase *c) { return numel0(c) / cols_of(c); }
/* rows of 1, 7 and 300 (past one workgroup), one row and several, 1-D to 4-D */
static const struct { int nd; int64_t s[4]; } row_shapes[] = {
    {2, {4, 7}}, {1, {7}}, {1, {1}}, {2, {4, 1}}, {3, {2, 3, 4}}, {4, {2, 1, 3, 2}}, {2, {2, 300}},
};
static bool make_row(rcase *c, int v, const wgml_op_def *d)
{
    if (v >= N_OF(row_shapes)) return false;
    /* the first run on the whole test domain; the others in [-3, 3], where a float gradient
       of rows of 300 keeps 1e-3 of the central differences' (log_softmax's g - p sum(g)
       cancels as the row's largest entry wins) */
    set_leaf(c, 0, row_shapes[v].nd, row_shapes[v].s, v ? fmax(d->test.lo[0], -3) : d->test.lo[0],
             v ? fmin(d->test.hi[0], 3) : d->test.hi[0]);
    return true;
}
static wgml_tensor *build_softmax(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { (void)c; return wgml_softmax(ctx, in[0]); }
static wgml_tensor *build_log_softmax(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { (void)c; return wgml_log_softmax(ctx, in[0]); }
static int64_t ref_softmax(const rcase *c, double *const *in, double *out) { wgml_ref_softmax(rows_of(c), cols_of(c), in[0], out); return numel0(c); }
static int64_t ref_log_softmax(const rcase *c, double *const *in, double *out) { wgml_ref_log_softmax(rows_of(c), cols_of(c), in[0], out); return numel0(c); }

/* the norms: x, then the weight and (layernorm) the bias where the run has them; rows of one
   element have var 0, so eps keeps them from the singularity */
static const struct { int nd; int64_t s[4]; float eps; int weight, bias; } norm_runs[] = {
    {2, {4, 7}, 1e-5f, 1, 1},     {1, {7}, 1e-5f, 0, 0},    {3, {2, 3, 4}, 1e-5f, 1, 0}, {2, {4, 1}, 0.25f, 0, 1},
    {1, {1}, 0.25f, 1, 1},        {2, {2, 300}, 1e-5f, 1, 1}, {4, {2, 1, 3, 2}, 0.5f, 0, 0}, {2, {5, 2}, 1e-3f, 1, 0},
    {2, {3, 5}, 1e-5f, 0, 1},
};
static bool make_norm(rcase *c, int v, const wgml_op_def *d)
{
    if (v >= N_OF(norm_runs)) return false;
    c->eps = norm_runs[v].eps;
    c->with_weight = norm_runs[v].weight;
    c->with_bias = c->op == WGML_OP_LAYERNORM && norm_runs[v].bias;
    set_leaf(c, 0, norm_runs[v].nd, norm_runs[v].s, d->test.lo[0], d->test.hi[0]);
    int64_t n = cols_of(c);
    if (c->with_weight) set_leaf(c, c->nin, 1, &n, d->test.lo[1], d->test.hi[1]);
    if (c->with_bias) set_leaf(c, c->nin, 1, &n, d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_layernorm(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return wgml_layernorm(ctx, in[0], c->with_weight ? in[1] : NULL, c->with_bias ? in[1 + c->with_weight] : NULL, c->eps);
}
static wgml_tensor *build_rmsnorm(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return wgml_rmsnorm(ctx, in[0], c->with_weight ? in[1] : NULL, c->eps);
}
static int64_t ref_layernorm(const rcase *c, double *const *in, double *out)
{
    wgml_ref_layernorm(rows_of(c), cols_of(c), in[0], c->with_weight ? in[1] : NULL, c->with_bias ? in[1 + c->with_weight] : NULL,
                       c->eps, out);
    return numel0(c);
}
static int64_t ref_rmsnorm(const rcase *c, double *const *in, double *out)
{
    wgml_ref_rmsnorm(rows_of(c), cols_of(c), in[0], c->with_weight ? in[1] : NULL, c->eps, out);
    return numel0(c);
}
/* rows keep sqrt(var + eps) >= 0.1: the central difference's error grows as (h / that)^2 */
static double kink_norm(const rcase *c, double *const *in)
{
    const double *x = in[0];
    int64_t rows = rows_of(c), n = cols_of(c);
    double least = INFINITY;
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        if (c->op == WGML_OP_LAYERNORM)
            for (int64_t j = 0; j < n; j++) mean += x[r * n + j] / (double)n;
        for (int64_t j = 0; j < n; j++) var += (x[r * n + j] - mean) * (x[r * n + j] - mean) / (double)n;
        least = fmin(least, sqrt(var + c->eps));
    }
    return least >= 0.1 ? INFINITY : 0;
}

/* normalize: f32 and vec4 rows; eps below every row's norm, then above (x / eps) */
static bool make_normalize(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t s416[2] = {4, 16};
    if (v > 3) return false;
    c->eps = v & 1 ? 100.0f : 1e-12f;
    set_leaf(c, 0, 2, v >> 1 ? s416 : s47, d->test.lo[0], d->test.hi[0]);
    return true;
}
static wgml_tensor *build_normalize(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_normalize(ctx, in[0], c->eps); }
static int64_t ref_normalize(const rcase *c, double *const *in, double *out) { wgml_ref_normalize(rows_of(c), cols_of(c), in[0], c->eps, out); return numel0(c); }

/* the norms' gradient kernels: x, weight, upstream gradient; with a weight and without */
static bool make_norm_grad(rcase *c, int v, const wgml_op_def *d)
{
    if (v > 1) return false;
    c->eps = 1e-5f;
    c->with_weight = !v;
    set_leaf(c, 0, 2, s47, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 1, 1, s7, d->test.lo[1], d->test.hi[1]);
    set_leaf(c, 2, 2, s47, d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_norm_grad(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return wgml_norm_grad(ctx, in[0], c->with_weight ? in[1] : NULL, in[2], c->eps, c->op == WGML_OP_LAYERNORM_GRAD);
}
static int64_t ref_norm_grad(const rcase *c, double *const *in, double *out)
{
    wgml_ref_norm_grad(rows_of(c), cols_of(c), in[0], c->with_weight ? in[1] : NULL, in[2], c->eps, c->op == WGML_OP_LAYERNORM_GRAD, out);
    return numel0(c);
}

/* cross-entropy: logits [4, 7], 4 labels below 7 (and, for its gradient kernel, each row's
   upstream gradient) */
static bool make_cross_entropy(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t runs[][2] = {{4, 7}, {4, 5}, {1, 1}, {1, 3}, {3, 7}, {9, 2}, {2, 300}}; /* rows, classes */
    if (v >= N_OF(runs)) return false;
    /* the first run on the whole test domain, the others in [-3, 3] (as make_row) */
    set_leaf(c, 0, 2, runs[v], v ? fmax(d->test.lo[0], -3) : d->test.lo[0], v ? fmin(d->test.hi[0], 3) : d->test.hi[0]);
    set_leaf(c, 1, 1, runs[v], 0, 0);
    c->labels_of[1] = (int)runs[v][1];
    if (c->op == WGML_OP_CROSS_ENTROPY_GRAD) set_leaf(c, 2, 1, runs[v], d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_cross_entropy(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { (void)c; return wgml_cross_entropy(ctx, in[0], in[1]); }
static wgml_tensor *build_cross_entropy_grad(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { (void)c; return wgml_cross_entropy_grad(ctx, in[0], in[1], in[2]); }
static int64_t ref_cross_entropy(const rcase *c, double *const *in, double *out)
{
    int32_t labels[MAXEL];
    for (int64_t r = 0; r < rows_of(c); r++) labels[r] = (int32_t)in[1][r];
    out[0] = wgml_ref_cross_entropy(rows_of(c), cols_of(c), in[0], labels);
    return 1;
}
static int64_t ref_cross_entropy_grad(const rcase *c, double *const *in, double *out) /* g_r (softmax(x_r) - onehot(label_r)) */
{
    int64_t rows = rows_of(c), cols = cols_of(c);
    wgml_ref_softmax(rows, cols, in[0], out);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) out[r * cols + j] = in[2][r] * (out[r * cols + j] - (j == (int64_t)in[1][r] ? 1.0 : 0.0));
    return rows * cols;
}

/* ---- matmul: A (op(A) [M, K]), B (op(B) [K, N]), either batched or shared by the batch,
   every transpose flag with each epilogue activation (M = 1: the GEMV path), alpha, a bias
   (the last leaf) */
static const struct { int64_t batch_a, batch_b, M, N, K; int t, act, bias; float alpha; } matmul_runs[] = {
    {0, 0, 5, 3, 7, 0, WGML_ACT_NONE, 1, 0.75f},   {0, 0, 1, 4, 6, 1, WGML_ACT_RELU, 1, 0.75f},
    {0, 0, 3, 2, 5, 2, WGML_ACT_GELU, 1, 0.0f},    {0, 0, 4, 6, 1, 3, WGML_ACT_SILU, 0, 0.75f},
    {0, 0, 2, 5, 3, 0, WGML_ACT_GELU_EXACT, 1, 0.75f}, {0, 0, 1, 1, 2, 3, WGML_ACT_RELU, 1, 0.75f},
    {0, 0, 5, 1, 4, 2, WGML_ACT_NONE, 1, 0.75f},   {0, 0, 1, 3, 7, 0, WGML_ACT_SILU, 1, 0.75f},
    {0, 0, 17, 19, 23, 0, WGML_ACT_GELU, 1, 0.5f}, {0, 0, 7, 1, 9, 3, WGML_ACT_SILU, 1, -0.5f}, /* past one 16-wide tile */
    {2, 2, 3, 4, 5, 0, WGML_ACT_NONE, 0, 0.5f},    {2, 2, 3, 4, 5, 1, WGML_ACT_NONE, 1, 0.5f},
    {2, 2, 3, 4, 5, 2, WGML_ACT_RELU, 0, 0.5f},    {2, 2, 3, 4, 5, 3, WGML_ACT_NONE, 1, 1.0f},
    {3, 0, 2, 4, 5, 0, WGML_ACT_NONE, 0, 1.0f},    {3, 0, 2, 4, 5, 1, WGML_ACT_NONE, 1, 1.0f},
    {3, 0, 2, 4, 5, 2, WGML_ACT_NONE, 0, 1.0f},    {3, 0, 2, 4, 5, 3, WGML_ACT_GELU, 0, 1.0f},
    {0, 2, 3, 4, 5, 0, WGML_ACT_NONE, 0, 1.0f},    {0, 2, 3, 4, 5, 1, WGML_ACT_NONE, 0, 1.0f},
    {0, 2, 3, 4, 5, 2, WGML_ACT_NONE, 0, 1.0f},    {0, 2, 3, 4, 5, 3, WGML_ACT_NONE, 0, 1.0f},
};
static bool make_matmul(rcase *c, int v, const wgml_op_def *d)
{
    if (v >= N_OF(matmul_runs)) return false;
    int64_t M = matmul_runs[v].M, N = matmul_runs[v].N, K = matmul_runs[v].K, ba = matmul_runs[v].batch_a, bb = matmul_runs[v].batch_b;
    c->ta = matmul_runs[v].t & 1;
    c->tb = matmul_runs[v].t >> 1;
    c->act = matmul_runs[v].act;
    c->scale = matmul_runs[v].alpha;
    c->with_bias = matmul_runs[v].bias;
    int64_t sa[3] = {ba, c->ta ? K : M, c->ta ? M : K}, sb[3] = {bb, c->tb ? N : K, c->tb ? K : N};
    set_leaf(c, 0, ba ? 3 : 2, ba ? sa : sa + 1, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 1, bb ? 3 : 2, bb ? sb : sb + 1, d->test.lo[1], d->test.hi[1]);
    if (c->with_bias) set_leaf(c, 2, 1, &N, d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_matmul(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    wgml_matmul_desc md = {.trans_a = c->ta, .trans_b = c->tb, .alpha = c->scale, .activation = (wgml_activation)c->act,
                           .bias = c->with_bias ? in[2] : NULL};
    return wgml_matmul_ex(ctx, in[0], in[1], &md);
}
static int64_t matmul_with(const rcase *c, double *const *in, int act, double *out)
{
    int nda = c->nd[0], ndb = c->nd[1];
    const int64_t *sa = c->sh[0], *sb = c->sh[1];
    int64_t M = c->ta ? sa[nda - 1] : sa[nda - 2], K = c->ta ? sa[nda - 2] : sa[nda - 1], N = c->tb ? sb[ndb - 2] : sb[ndb - 1];
    int64_t ba = nda == 3 ? sa[0] : 1, bb = ndb == 3 ? sb[0] : 1, batch = ba > bb ? ba : bb;
    double alpha = c->scale == 0.0f ? 1.0 : c->scale; /* wgml_matmul_desc: 0 means 1 */
    wgml_ref_matmul(batch, M, N, K, in[0], ba, c->ta, in[1], bb, c->tb, alpha, c->with_bias ? in[2] : NULL, act, out);
    return batch * M * N;
}
static int64_t ref_matmul(const rcase *c, double *const *in, double *out) { return matmul_with(c, in, c->act, out); }
/* relu's kink: the least |pre-activation| */
static double kink_matmul(const rcase *c, double *const *in)
{
    if (c->act != WGML_ACT_RELU) return INFINITY;
    static double z[MAXEL];
    int64_t n = matmul_with(c, in, WGML_ACT_NONE, z);
    double least = INFINITY;
    for (int64_t i = 0; i < n; i++) least = fmin(least, fabs(z[i]));
    return least;
}

/* ---- join: three 2-D tensors along each axis; then rows of multiples of 4 (a thread copies
   four elements) along each axis */
static bool make_concat(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t s23[2] = {2, 3}, s21[2] = {2, 1}, s24[2] = {2, 4}, s13[2] = {1, 3}, s43[2] = {4, 3};
    static const int64_t s38[2] = {3, 8}, s34[2] = {3, 4}, s3c[2] = {3, 12}, s58[2] = {5, 8}, s28[2] = {2, 8};
    if (v > 3) return false;
    c->axis = !(v % 2);
    if (v >= 2) {
        set_leaf(c, 0, 2, s38, d->test.lo[0], d->test.hi[0]);
        set_leaf(c, 1, 2, c->axis ? s34 : s58, d->test.lo[0], d->test.hi[0]);
        set_leaf(c, 2, 2, c->axis ? s3c : s28, d->test.lo[0], d->test.hi[0]);
        return true;
    }
    set_leaf(c, 0, 2, s23, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 1, 2, v ? s13 : s21, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 2, 2, v ? s43 : s24, d->test.lo[0], d->test.hi[0]);
    return true;
}
static wgml_tensor *build_concat(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_concat(ctx, c->nin, in, c->axis); }
static int64_t ref_concat(const rcase *c, double *const *in, double *out)
{
    int64_t R = 0, C = 0, n = 0;
    for (int l = 0; l < c->nin; l++) (c->axis ? (C += c->sh[l][1], R = c->sh[l][0]) : (R += c->sh[l][0], C = c->sh[l][1]));
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++) {
            int64_t rr = r, jj = j;
            int l = 0;
            if (c->axis) while (jj >= c->sh[l][1]) jj -= c->sh[l++][1];
            else while (rr >= c->sh[l][0]) rr -= c->sh[l++][0];
            out[n++] = in[l][rr * c->sh[l][1] + jj];
        }
    return n;
}

/* ---- random: built at (RCASE_SEED, 0); rand and randn have no operand (leaf 0's shape is
   the output's, nin stays 0) */
static bool make_random(rcase *c, int v, const wgml_op_def *d)
{
    if (v > 0) return false;
    if (c->op == WGML_OP_DROPOUT) {
        set_leaf(c, 0, 2, s47, d->test.lo[0], d->test.hi[0]);
        c->r0 = 0.5f;
        return true;
    }
    c->nd[0] = 2;
    memcpy(c->sh[0], s47, sizeof s47);
    c->r0 = c->op == WGML_OP_RAND ? (float)d->test.lo[0] : 0.5f; /* rand: its test domain; randn: mean 0.5, std 2 */
    c->r1 = c->op == WGML_OP_RAND ? (float)d->test.hi[0] : 2.0f;
    return true;
}
static wgml_tensor *build_rand(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    (void)in;
    return wgml_manual_seed(ctx, RCASE_SEED) ? NULL : wgml_rand(ctx, c->nd[0], c->sh[0], c->r0, c->r1);
}
static wgml_tensor *build_randn(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    (void)in;
    return wgml_manual_seed(ctx, RCASE_SEED) ? NULL : wgml_randn(ctx, c->nd[0], c->sh[0], c->r0, c->r1);
}
static wgml_tensor *build_dropout(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return wgml_manual_seed(ctx, RCASE_SEED) ? NULL : wgml_dropout(ctx, in[0], c->r0);
}
static int64_t ref_rand(const rcase *c, double *const *in, double *out) /* exact in f32 */
{
    float u[MAXEL];
    (void)in;
    wgml_ref_rand(RCASE_SEED, 0, numel0(c), c->r0, c->r1, u);
    for (int64_t i = 0; i < numel0(c); i++) out[i] = u[i];
    return numel0(c);
}
static int64_t ref_randn(const rcase *c, double *const *in, double *out)
{
    (void)in;
    wgml_ref_randn(RCASE_SEED, 0, numel0(c), c->r0, c->r1, out);
    return numel0(c);
}
static int64_t ref_dropout(const rcase *c, double *const *in, double *out)
{
    wgml_ref_dropout(RCASE_SEED, 0, numel0(c), in[0], c->r0, out);
    return numel0(c);
}

/* ---- gather: a [3, 4, 2], 5 indices with repeats, along each axis (index_add: src [.., 5, ..]) */
static bool make_index(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t s342[3] = {3, 4, 2}, s5[1] = {5};
    if (v > 2) return false;
    c->axis = v;
    int64_t ssrc[3] = {3, 4, 2};
    ssrc[v] = 5;
    set_leaf(c, 0, 3, s342, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 1, 1, s5, 0, 0);
    c->labels_of[1] = (int)s342[v];
    c->ints[1] = true;
    if (c->op == WGML_OP_INDEX_ADD) set_leaf(c, 2, 3, ssrc, d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_index_select(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_index_select(ctx, in[0], c->axis, in[1]); }
static wgml_tensor *build_index_add(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_index_add(ctx, in[0], c->axis, in[1], in[2]); }
static int64_t ref_index(const rcase *c, double *const *in, double *out) /* a [outer, len, inner], idx [n], src [outer, n, inner] */
{
    int64_t outer = 1, len = c->sh[0][c->axis], inner = 1, n = c->sh[1][0];
    for (int d = 0; d < c->axis; d++) outer *= c->sh[0][d];
    for (int d = c->axis + 1; d < c->nd[0]; d++) inner *= c->sh[0][d];
    bool add = c->op == WGML_OP_INDEX_ADD;
    if (add) memcpy(out, in[0], (size_t)(outer * len * inner) * sizeof *out);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t at = (o * len + (int64_t)in[1][j]) * inner + i, k = (o * n + j) * inner + i;
                if (add) out[at] += in[2][k];
                else out[k] = in[0][at];
            }
    return outer * (add ? len : n) * inner;
}
static bool make_index_sort(rcase *c, int v, const wgml_op_def *d) /* 30 indices below 300: two radix passes */
{
    static const int64_t s30[1] = {30};
    (void)d;
    if (v > 0) return false;
    set_leaf(c, 0, 1, s30, 0, 0);
    c->labels_of[0] = 300;
    c->ints[0] = true;
    return true;
}
static wgml_tensor *build_index_sort(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_index_sort(ctx, in[0], c->labels_of[0]); }
static int64_t ref_index_sort(const rcase *c, double *const *in, double *out) /* stable: by value, then position */
{
    int64_t n = c->sh[0][0], k = 0;
    for (int v = 0; v < c->labels_of[0]; v++)
        for (int64_t p = 0; p < n; p++)
            if ((int)in[0][p] == v) out[k] = v, out[n + k++] = (double)p;
    return 2 * n;
}

/* ---- scans: cumsum along every axis (a negative one too), both directions; RoPE on
   [B, T, D] at positions 5..7 (frequencies 1 and 0.1), both pairings, forward and inverse */
static bool make_cumsum(rcase *c, int v, const wgml_op_def *d)
{
    if (v > 7) return false;
    set_leaf(c, 0, 3, s354, d->test.lo[0], d->test.hi[0]);
    c->axis = v / 2 - 1;
    c->flag = v % 2;
    return true;
}
static wgml_tensor *build_cumsum(wgml_context *ctx, const rcase *c, wgml_tensor *const *in) { return wgml_cumsum(ctx, in[0], c->axis, c->flag); }
static int64_t ref_cumsum(const rcase *c, double *const *in, double *out)
{
    wgml_ref_cumsum(c->nd[0], c->sh[0], in[0], c->axis < 0 ? c->axis + c->nd[0] : c->axis, c->flag, out);
    return numel0(c);
}
static bool make_rope(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t s234[3] = {2, 3, 4};
    if (v > 3) return false;
    set_leaf(c, 0, 3, s234, d->test.lo[0], d->test.hi[0]);
    c->pos = 5;
    c->base = 100.0f;
    c->flag = v;
    return true;
}
static wgml_tensor *build_rope(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    return wgml_rope_ex(ctx, in[0], &(wgml_rope_desc){.pos_offset = c->pos, .base = c->base, .interleaved = c->flag & 1, .inverse = c->flag >> 1});
}
static int64_t ref_rope(const rcase *c, double *const *in, double *out)
{
    int64_t D = c->sh[0][c->nd[0] - 1], T = c->sh[0][c->nd[0] - 2], n = numel0(c);
    wgml_ref_rope(n / (T * D), T, D, in[0], (double)c->pos, c->base, c->flag & 1, c->flag >> 1, out);
    return n;
}

/* ---- attention: two query heads sharing one key/value head, 3 queries after 2 cached keys;
   its gradient kernel gives [dq | dk | dv] for an upstream gradient (leaf 3) */
static bool make_attention(rcase *c, int v, const wgml_op_def *d)
{
    static const int64_t sq[4] = {1, 2, 3, 4}, skv[4] = {1, 1, 5, 4};
    if (v > 0) return false;
    c->causal = 1;
    c->scale = 0.4f;
    set_leaf(c, 0, 4, sq, d->test.lo[0], d->test.hi[0]);
    set_leaf(c, 1, 4, skv, d->test.lo[1], d->test.hi[1]);
    set_leaf(c, 2, 4, skv, d->test.lo[1], d->test.hi[1]);
    if (c->op == WGML_OP_ATTENTION_GRAD) set_leaf(c, 3, 4, sq, d->test.lo[1], d->test.hi[1]);
    return true;
}
static wgml_tensor *build_attention(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    wgml_tensor *y = wgml_attention(ctx, in[0], in[1], in[2], &(wgml_attention_desc){.causal = c->causal, .scale = c->scale});
    return c->op == WGML_OP_ATTENTION_GRAD ? wgml_attention_grad(ctx, y, in[3]) : y;
}
static int64_t ref_attention(const rcase *c, double *const *in, double *out) /* q [B,H,T,D], k and v [B,Hkv,S,D] */
{
    int64_t B = c->sh[0][0], H = c->sh[0][1], T = c->sh[0][2], D = c->sh[0][3], Hkv = c->sh[1][1], S = c->sh[1][2];
    int64_t nq = B * H * T * D, nk = B * Hkv * S * D;
    if (c->op == WGML_OP_ATTENTION) return wgml_ref_attention(B, H, Hkv, T, S, D, in[0], in[1], in[2], c->causal, c->scale, out) ? -1 : nq;
    return wgml_ref_attention_backward(B, H, Hkv, T, S, D, in[0], in[1], in[2], in[3], c->causal, c->scale, out, out + nq, out + nq + nk)
               ? -1
               : nq + 2 * nk;
}

/* one line per op that is not elementwise */
static const op_case op_cases[] = {
    {"storage", .covered_by = "every case here (its operands are storage leaves)"},
    {"view", NULL, make_view, build_view, ref_view, NULL},
    {"sum", NULL, make_reduce, build_sum, ref_sum, NULL},
    {"mean", NULL, make_reduce, build_mean, ref_mean, NULL},
    {"max", NULL, make_reduce, build_max, ref_max, kink_max},
    {"argmax", NULL, make_reduce, build_argmax, ref_argmax, NULL},
    {"min", NULL, make_reduce, build_min, ref_min, kink_min},
    {"argmin", NULL, make_reduce, build_argmin, ref_argmin, NULL},
    {"softmax", NULL, make_row, build_softmax, ref_softmax, NULL},
    {"log_softmax", NULL, make_row, build_log_softmax, ref_log_softmax, NULL},
    {"layernorm", NULL, make_norm, build_layernorm, ref_layernorm, kink_norm},
    {"rmsnorm", NULL, make_norm, build_rmsnorm, ref_rmsnorm, kink_norm},
    {"layernorm_grad", NULL, make_norm_grad, build_norm_grad, ref_norm_grad, NULL},
    {"rmsnorm_grad", NULL, make_norm_grad, build_norm_grad, ref_norm_grad, NULL},
    {"normalize", NULL, make_normalize, build_normalize, ref_normalize, NULL},
    {"cross_entropy", NULL, make_cross_entropy, build_cross_entropy, ref_cross_entropy, NULL},
    {"cross_entropy_grad", NULL, make_cross_entropy, build_cross_entropy_grad, ref_cross_entropy_grad, NULL},
    {"index_select", NULL, make_index, build_index_select, ref_index, NULL},
    {"index_add", NULL, make_index, build_index_add, ref_index, NULL},
    {"index_sort", NULL, make_index_sort, build_index_sort, ref_index_sort, NULL},
    {"cumsum", NULL, make_cumsum, build_cumsum, ref_cumsum, NULL},
    {"rope", NULL, make_rope, build_rope, ref_rope, NULL},
    {"matmul", NULL, make_matmul, build_matmul, ref_matmul, kink_matmul},
    {"concat", NULL, make_concat, build_concat, ref_concat, NULL},
    {"attention", NULL, make_attention, build_attention, ref_attention, NULL},
    {"attention_grad", NULL, make_attention, build_attention, ref_attention, NULL},
    {"rand", NULL, make_random, build_rand, ref_rand, NULL},
    {"randn", NULL, make_random, build_randn, ref_randn, NULL},
    {"dropout", NULL, make_random, build_dropout, ref_dropout, NULL},
    {"grad_sumsq", .covered_by = "test_train.c and test_optim_groups.c (the clipped steps read the squared norm it starts)"},
    {"optimizer_step", .covered_by = "test_train.c and test_optim_groups.c (the optimisers' steps against ref/ref.h's)"},
};

static const op_case *case_of(const char *name)
{
    for (int i = 0; i < N_OF(op_cases); i++)
        if (strcmp(op_cases[i].name, name) == 0) return &op_cases[i];
    return NULL;
}

/* true when t's graph (before evaluation) has a node of op */
static bool reaches(const wgml_tensor *t, int op, int depth)
{
    if (!t || depth > 8) return false;
    if (t->op == op) return true;
    for (int i = 0; i < t->nsrc; i++)
        if (reaches(t->src[i], op, depth + 1)) return true;
    return false;
}

/* forward against k->ref; with a gradient rule, L = sum(w * op(...)) by wgml_grad against
   central differences of k->ref for every leaf that is not labels */
static void run_rcase(wgml_context *ctx, const op_case *k, const rcase *c)
{
    const wgml_op_def *d = wgml_op_table[c->op];
    static float xf[MAXIN][MAXEL], wf[MAXEL];
    static double xd[MAXIN][MAXEL], out[MAXEL], want[MAXEL];
    double *dp[MAXIN] = {NULL};
    char what[160], ss[48];
    test_shape_str(ss, sizeof ss, c->nd[0], c->sh[0]);
    snprintf(what, sizeof what, "%s %s", d->name, ss);
    for (int l = 0; l < c->nin; l++) dp[l] = xd[l];
    int tries = 0;
    do {
        for (int l = 0; l < c->nin; l++)
            for (int64_t i = 0; i < test_numel(c->nd[l], c->sh[l]); i++) {
                xf[l][i] = c->labels_of[l] ? (float)(test_rand_u64() % (uint64_t)c->labels_of[l]) : draw(c->lo[l], c->hi[l]);
                xd[l][i] = xf[l][i];
            }
    } while (k->kink && k->kink(c, dp) < KINK && ++tries < 1000);
    int64_t nout = k->ref(c, dp, out);
    if (nout < 0 || nout > MAXEL) {
        FAILF("%s: its reference gives %lld elements", what, (long long)nout);
        return;
    }
    wgml_scope_begin(ctx);
    wgml_tensor *in[MAXIN] = {NULL};
    bool diff = d->vjp != NULL;
    for (int l = 0; l < c->nin; l++) {
        if (c->ints[l]) {
            int32_t v[MAXEL];
            for (int64_t i = 0; i < test_numel(c->nd[l], c->sh[l]); i++) v[i] = (int32_t)xf[l][i];
            if (wgml_tensor_from_i32(ctx, c->nd[l], c->sh[l], v, (size_t)test_numel(c->nd[l], c->sh[l]), &in[l]))
                FAILF("%s: from_i32: %s", what, wgml_error_message(ctx));
        } else {
            in[l] = test_tensor(ctx, c->nd[l], c->sh[l], xf[l]);
        }
        if (diff && !c->labels_of[l]) CHECK_OK(ctx, wgml_requires_grad(in[l], 1));
    }
    wgml_tensor *y = k->build(ctx, c, in);
    if (!y || wgml_tensor_status(y)) {
        FAILF("%s: built in error: %s", what, wgml_error_message(ctx));
        goto scope;
    }
    if (!reaches(y, c->op, 0)) FAILF("%s: its case's graph has no %s node", what, d->name);
    if (wgml_tensor_numel(y) != nout) {
        FAILF("%s: %lld elements, the reference %lld", what, (long long)wgml_tensor_numel(y), (long long)nout);
        goto scope;
    }
    wgml_tensor *L = NULL, *ev[1 + MAXIN] = {y};
    int nev = 1;
    if (diff) {
        test_fill_uniform(wf, (size_t)nout, -1, 1);
        L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, wgml_tensor_ndim(y), y->shape, wf)));
        wgml_status st = wgml_backward(L);
        if (st) {
            FAILF("%s: wgml_backward gave %s: %s", what, wgml_status_name(st), wgml_error_message(ctx));
            goto scope;
        }
        for (int l = 0; l < c->nin; l++) {
            if (c->labels_of[l]) continue;
            ev[nev] = wgml_grad(in[l]);
            if (!ev[nev]) {
                FAILF("%s: no gradient reaches input %d", what, l);
                goto scope;
            }
            nev++;
        }
    }
    wgml_status st = wgml_eval(ctx, nev, ev);
    if (st) {
        FAILF("%s: evaluation gave %s: %s", what, wgml_status_name(st), wgml_error_message(ctx));
        goto scope;
    }
    float *got = test_read_new(ctx, what, y, nout);
    if (got && !test_close(what, got, out, (size_t)nout, d->tol, floor_of(c->op))) FAILF("%s: off the reference", what);
    free(got);
    if (diff) {
        int g = 1;
        for (int l = 0; l < c->nin; l++) {
            if (c->labels_of[l]) continue;
            int64_t n = test_numel(c->nd[l], c->sh[l]);
            for (int64_t i = 0; i < n; i++) {
                double x0 = xd[l][i], h = fd_step(x0), lp = 0, lm = 0;
                xd[l][i] = x0 + h;
                k->ref(c, dp, out);
                for (int64_t j = 0; j < nout; j++) lp += wf[j] * out[j];
                xd[l][i] = x0 - h;
                k->ref(c, dp, out);
                for (int64_t j = 0; j < nout; j++) lm += wf[j] * out[j];
                xd[l][i] = x0;
                want[i] = (lp - lm) / (2 * h);
            }
            char gw[200];
            snprintf(gw, sizeof gw, "d/d(input %d) of %s", l, what);
            float *gg = test_read_new(ctx, gw, ev[g++], n);
            if (gg && !grad_close(gw, gg, want, n)) FAILF("%s: off the central differences", gw);
            free(gg);
        }
    }
scope:
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

/* ---------------------------------------------------------------- the driver */

/* Every op wgml_op_get_info lists, of every kind: an elementwise one against its reference
   (ref/elementwise.c, by name) forward on every shape and, with a gradient rule, backward;
   any other by its case above; an op with neither a reference nor a case (nor a covered_by
   line) fails: "op X has no reference". */
static void every_op_forward_and_backward(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int runs[WGML_KIND_COUNT] = {0}, ops[WGML_KIND_COUNT] = {0}, elsewhere = 0;
    for (int op = 0; op < wgml_op_count(); op++) {
        wgml_op_info info;
        if (wgml_op_get_info(op, &info) != WGML_OK) {
            FAILF("op %d: no info", op);
            continue;
        }
        const wgml_op_def *d = wgml_op_table[op];
        if (wgml_op_is_elementwise(op)) {
            if (!wgml_ref_elementwise(info.name)) {
                FAILF("op %s has no reference (add it to tests/ref/elementwise.c)", info.name);
                continue;
            }
            for (int s = 0; s < N_OF(ew_shapes); s++, runs[d->kind]++) {
                ew_case c = {.op = op, .nd = ew_shapes[s].nd};
                memcpy(c.sh, ew_shapes[s].s, sizeof c.sh);
                ew_forward(ctx, &c);
            }
            for (int s = 0; d->vjp && s < N_OF(grad_shapes); s++, runs[d->kind]++) {
                ew_case c = {.op = op, .nd = grad_shapes[s].nd};
                memcpy(c.sh, grad_shapes[s].s, sizeof c.sh);
                ew_backward(ctx, &c);
            }
            ops[d->kind]++;
            continue;
        }
        const op_case *k = case_of(info.name);
        if (!k) {
            FAILF("op %s (%s) has no reference: add its case to op_cases in test_op_table.c (or a covered_by line)", info.name,
                  info.kind);
            continue;
        }
        if (k->covered_by) {
            elsewhere++;
            continue;
        }
        for (int v = 0;; v++, runs[d->kind]++) {
            rcase c = {.op = op};
            if (!k->make(&c, v, d)) break;
            run_rcase(ctx, k, &c);
        }
        ops[d->kind]++;
    }
    /* a case for a name the table no longer has is a stale line */
    for (int i = 0; i < N_OF(op_cases); i++) {
        bool found = false;
        for (int op = 0; op < wgml_op_count() && !found; op++) found = strcmp(wgml_op_table[op]->name, op_cases[i].name) == 0;
        if (!found) FAILF("op_cases has \"%s\", which is no op", op_cases[i].name);
    }
    for (int kd = 0; kd < WGML_KIND_COUNT; kd++)
        if (ops[kd]) fprintf(stderr, "  %-8s %2d ops, %3d runs\n", kind_name[kd], ops[kd], runs[kd]);
    fprintf(stderr, "  %d covered by other tests\n", elsewhere);
}

int main(void)
{
    TEST_RUN(the_table_is_complete);
    TEST_RUN(op_info_describes_every_entry);
    TEST_RUN(public_constructors_build_their_ops);
    TEST_RUN(every_op_forward_and_backward);
    TEST_RUN(binary_ops_with_a_number_on_either_side);
    TEST_RUN(softplus_at_its_edges);
    TEST_RUN(binary_ops_with_a_number_have_the_right_gradient);
    return test_summary();
}
