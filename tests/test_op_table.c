/*
 * The op table (engine/op.h, ops/table.c) walked entry by entry, so that an entry without a
 * reference, a test domain or (when differentiable) a gradient rule fails the suite, and so
 * that every op of every kind this file knows how to drive is run:
 *
 *   a. completeness: each entry has a name (unique), a kind, a gradient rule or a reason for none (exactly one); elementwise entries have WGSL that
 *      names only the operands and scalars they have, a double reference, a tolerance and a
 *      non-empty test domain per operand; the public constructor lists name elementwise ops.
 *   b. forward: every UNARY and BINARY entry (internal relu_grad and copy included) on
 *      awkward sizes, inputs drawn from its test domain (never zero), against its double
 *      reference, with |gpu - ref| <= tol * max(|ref|, floor) (the entry's floor, or 1e-30);
 *      the public binary ops with a number on either side; softplus at its edges (+-inf, NaN,
 *      -30, 80).
 *   c. backward: every UNARY and BINARY entry with a gradient rule, L = sum(w * op(x[, y]))
 *      with a fixed random w, wgml_grad against central differences of the entry's double
 *      reference (h = 1e-3 relative), inputs kept 1e-2 from kinks; the public binary ops also
 *      with a number on either side.
 *   d. REDUCE, ROW, MATMUL and KERNEL entries: each is built by a driver (a switch whose default
 *      fails, so a new op of those kinds cannot come in untested), checked forward against
 *      cpu/ref.h and, when it has a gradient rule, by central differences of that reference.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "core/tensor.h"
#include "cpu/philox.h"
#include "cpu/ref.h"
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

/* |gpu - ref| <= tol * max(|ref|, floor): the entry's floor (ops.c says why it has one), else
   1e-30, a plain relative check */
static double floor_of(int op) { return wgml_op_table[op]->floor > 0 ? wgml_op_table[op]->floor : TINY; }

/* the scalars an entry with nscalars > 0 is run with, inside its test domain; a new such op
   without a line here fails (its constructor is also needed in ew_build) */
static const struct { int op; double s[2]; } op_scalars[] = {
    {WGML_OP_CLAMP, {-1.0, 1.5}},
    {WGML_OP_MASKED_FILL, {-7.5, 0}},
};

/* operands that are masks: drawn as 0 or 1 (the draw never gives 0 otherwise), no gradient */
static bool mask_operand(int op, int k) { return op == WGML_OP_MASKED_FILL && k == 1; }
static void snap_mask(int op, int k, float *x, int64_t n)
{
    if (mask_operand(op, k))
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0 ? 1.0f : 0.0f;
}

static const double *scalars_of(int op)
{
    for (int i = 0; i < N_OF(op_scalars); i++)
        if (op_scalars[i].op == op) return op_scalars[i].s;
    return NULL;
}

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
            if (!d->ref) ENTRY_FAIL("no double reference (ref)");
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
            if (d->nscalars > 0 && !scalars_of(op)) ENTRY_FAIL("nscalars %d but this test has no scalars for it (op_scalars)", d->nscalars);
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
    return wgml_op_table[c->op]->ref(in);
}

/* how far the inputs are from the op's kinks (where its derivative jumps); a new op with a
   kink needs its line here, or its gradient check will fail near it */
static double ew_kink(const ew_case *c, double x, double y)
{
    double in[4];
    ew_inputs(c, x, y, in);
    switch (c->op) {
    case WGML_OP_RELU: case WGML_OP_ABS: case WGML_OP_RELU_GRAD: return fabs(in[0]);
    case WGML_OP_CLAMP: return fmin(fabs(in[0] - in[1]), fabs(in[0] - in[2]));
    case WGML_OP_MAXIMUM: case WGML_OP_MINIMUM: return fabs(in[0] - in[1]);
    default: return INFINITY;
    }
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
    const double *s = scalars_of(c->op);
    if (c->op == WGML_OP_CLAMP) return wgml_clamp(ctx, a, (float)s[0], (float)s[1]);
    if (c->op == WGML_OP_MASKED_FILL) return wgml_masked_fill(ctx, a, b, (float)s[0]);
    FAILF("no constructor for %s with %d scalars in this test (ew_build)", d->name, d->nscalars);
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

static void ew_forward(wgml_context *ctx, const ew_case *c)
{
    const wgml_op_def *d = wgml_op_table[c->op];
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

static void every_elementwise_entry_matches_its_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int ran = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        if (!wgml_op_is_elementwise(op)) continue;
        if (!wgml_op_table[op]->ref) continue; /* a FAIL of the completeness test */
        for (int s = 0; s < N_OF(ew_shapes); s++) {
            ew_case c = {.op = op, .nd = ew_shapes[s].nd};
            memcpy(c.sh, ew_shapes[s].s, sizeof c.sh);
            ew_forward(ctx, &c);
        }
        ran++;
    }
    fprintf(stderr, "  %d elementwise entries on %d shapes\n", ran, N_OF(ew_shapes));
}

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
    const float x[8] = {INFINITY, -INFINITY, NAN, -30.0f, 80.0f, 0.0f, -80.0f, 30.0f};
    const double sp_m30 = 9.357622968840175e-14; /* log1p(exp(-30)) */
    /* the reference itself */
    double in = INFINITY;
    CHECK(d->ref(&in) == INFINITY);
    in = -INFINITY;
    CHECK(d->ref(&in) == 0.0);
    in = NAN;
    CHECK(isnan(d->ref(&in)));
    in = -30;
    CHECK(fabs(d->ref(&in) - sp_m30) <= 1e-12 * sp_m30);
    in = 80;
    CHECK(d->ref(&in) == 80.0);
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
                want[i] = d->ref(&xi);
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

static void ew_backward(wgml_context *ctx, const ew_case *c)
{
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

static const struct { int nd; int64_t s[4]; } grad_shapes[] = {{1, {1}}, {1, {7}}, {2, {3, 5}}};

static void every_differentiable_elementwise_entry_has_the_right_gradient(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int ran = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        const wgml_op_def *d = wgml_op_table[op];
        if (!wgml_op_is_elementwise(op) || !d->vjp || !d->ref) continue;
        for (int s = 0; s < N_OF(grad_shapes); s++) {
            ew_case c = {.op = op, .nd = grad_shapes[s].nd};
            memcpy(c.sh, grad_shapes[s].s, sizeof c.sh);
            ew_backward(ctx, &c);
        }
        ran++;
    }
    /* the public binary ops with a number: the gradient of the tensor operand only */
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
    fprintf(stderr, "  %d differentiable elementwise entries, %d public binary ops with a number\n", ran, N_OF(public_binary));
}

/* ---------------------------------------------------------------- d. reductions, rows, matmul */

#define MAXIN 4
#define MAXEL 64

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
    int flag;              /* cumsum: reverse; rope: 1 interleaved, 2 inverse */
    int64_t pos;           /* rope: pos_offset */
    float base;            /* rope */
    int causal;            /* attention's desc */
    float scale;
    int with_weight;       /* the norms' gradients: a weight, or none */
} rcase;

#define RCASE_SEED 20240601 /* random ops are built at (this seed, offset 0) */

/* true when t's graph (before evaluation) has a node of op */
static bool reaches(const wgml_tensor *t, int op, int depth)
{
    if (!t || depth > 8) return false;
    if (t->op == op) return true;
    for (int i = 0; i < t->nsrc; i++)
        if (reaches(t->src[i], op, depth + 1)) return true;
    return false;
}

/* the driver of each REDUCE, ROW and MATMUL entry: how to build it (GPU) */
static wgml_tensor *r_build(wgml_context *ctx, const rcase *c, wgml_tensor *const *in)
{
    switch (c->op) {
    case WGML_OP_SUM: return wgml_sum(ctx, in[0], c->axis, 0);
    case WGML_OP_MEAN: return wgml_mean(ctx, in[0], c->axis, 0);
    case WGML_OP_MAX: return wgml_max(ctx, in[0], c->axis, 0);
    case WGML_OP_ARGMAX: return wgml_argmax(ctx, in[0], c->axis, 0);
    case WGML_OP_MIN: return wgml_min(ctx, in[0], c->axis, 0);
    case WGML_OP_ARGMIN: return wgml_argmin(ctx, in[0], c->axis, 0);
    case WGML_OP_SOFTMAX: return wgml_softmax(ctx, in[0]);
    case WGML_OP_LOG_SOFTMAX: return wgml_log_softmax(ctx, in[0]);
    case WGML_OP_LAYERNORM: return wgml_layernorm(ctx, in[0], in[1], in[2], c->eps);
    case WGML_OP_RMSNORM: return wgml_rmsnorm(ctx, in[0], in[1], c->eps);
    case WGML_OP_NORMALIZE: return wgml_normalize(ctx, in[0], c->eps);
    case WGML_OP_CROSS_ENTROPY: return wgml_cross_entropy(ctx, in[0], in[1]);
    case WGML_OP_CROSS_ENTROPY_GRAD: return wgml_cross_entropy_grad(ctx, in[0], in[1], in[2]);
    case WGML_OP_LAYERNORM_GRAD: case WGML_OP_RMSNORM_GRAD:
        return wgml_norm_grad(ctx, in[0], c->with_weight ? in[1] : NULL, in[2], c->eps, c->op == WGML_OP_LAYERNORM_GRAD);
    case WGML_OP_MATMUL: return wgml_matmul_ex(ctx, in[0], in[1], &(wgml_matmul_desc){.bias = in[2]});
    case WGML_OP_CONCAT: return wgml_concat(ctx, c->nin, in, c->axis);
    case WGML_OP_RAND: case WGML_OP_RANDN: case WGML_OP_DROPOUT:
        if (wgml_manual_seed(ctx, RCASE_SEED)) return NULL;
        return c->op == WGML_OP_RAND    ? wgml_rand(ctx, c->nd[0], c->sh[0], c->r0, c->r1)
               : c->op == WGML_OP_RANDN ? wgml_randn(ctx, c->nd[0], c->sh[0], c->r0, c->r1)
                                        : wgml_dropout(ctx, in[0], c->r0);
    case WGML_OP_INDEX_SELECT: return wgml_index_select(ctx, in[0], c->axis, in[1]);
    case WGML_OP_INDEX_SORT: return wgml_index_sort(ctx, in[0], c->labels_of[0]);
    case WGML_OP_INDEX_ADD: return wgml_index_add(ctx, in[0], c->axis, in[1], in[2]);
    case WGML_OP_CUMSUM: return wgml_cumsum(ctx, in[0], c->axis, c->flag);
    case WGML_OP_ROPE:
        return wgml_rope_ex(ctx, in[0], &(wgml_rope_desc){.pos_offset = c->pos, .base = c->base, .interleaved = c->flag & 1, .inverse = c->flag >> 1});
    case WGML_OP_ATTENTION:
        return wgml_attention(ctx, in[0], in[1], in[2], &(wgml_attention_desc){.causal = c->causal, .scale = c->scale});
    case WGML_OP_ATTENTION_GRAD: /* [dq | dk | dv] for upstream gradient in[3] */
        return wgml_attention_grad(
            ctx, wgml_attention(ctx, in[0], in[1], in[2], &(wgml_attention_desc){.causal = c->causal, .scale = c->scale}), in[3]);
    default: return NULL;
    }
}

/* ... and its reference (cpu/ref.h, in double): out's element count, or -1 */
static int64_t r_eval(const rcase *c, double *const *in, double *out)
{
    int64_t rows = c->nd[0] == 2 ? c->sh[0][0] : 1, cols = c->sh[0][c->nd[0] - 1];
    int32_t labels[MAXEL];
    switch (c->op) {
    case WGML_OP_SUM: wgml_ref_sum(c->nd[0], c->sh[0], in[0], c->axis, out); break;
    case WGML_OP_MEAN: wgml_ref_mean(c->nd[0], c->sh[0], in[0], c->axis, out); break;
    case WGML_OP_MAX: wgml_ref_max(c->nd[0], c->sh[0], in[0], c->axis, out); break;
    case WGML_OP_ARGMAX: wgml_ref_argmax(c->nd[0], c->sh[0], in[0], c->axis, out); break;
    case WGML_OP_MIN: case WGML_OP_ARGMIN: { /* the max and argmax of -x */
        double neg[MAXEL];
        int64_t n = test_numel(c->nd[0], c->sh[0]);
        for (int64_t i = 0; i < n; i++) neg[i] = -in[0][i];
        if (c->op == WGML_OP_ARGMIN) wgml_ref_argmax(c->nd[0], c->sh[0], neg, c->axis, out);
        else {
            wgml_ref_max(c->nd[0], c->sh[0], neg, c->axis, out);
            for (int64_t i = 0; i < n / c->sh[0][c->axis]; i++) out[i] = -out[i];
        }
        break;
    }
    case WGML_OP_SOFTMAX: wgml_ref_softmax(rows, cols, in[0], out); return rows * cols;
    case WGML_OP_LOG_SOFTMAX: wgml_ref_log_softmax(rows, cols, in[0], out); return rows * cols;
    case WGML_OP_LAYERNORM: wgml_ref_layernorm(rows, cols, in[0], in[1], in[2], c->eps, out); return rows * cols;
    case WGML_OP_RMSNORM: wgml_ref_rmsnorm(rows, cols, in[0], in[1], c->eps, out); return rows * cols;
    case WGML_OP_NORMALIZE: wgml_ref_normalize(rows, cols, in[0], c->eps, out); return rows * cols;
    case WGML_OP_CROSS_ENTROPY:
        for (int64_t r = 0; r < rows; r++) labels[r] = (int32_t)in[1][r];
        out[0] = wgml_ref_cross_entropy(rows, cols, in[0], labels);
        return 1;
    case WGML_OP_LAYERNORM_GRAD: case WGML_OP_RMSNORM_GRAD:
        wgml_ref_norm_grad(rows, cols, in[0], c->with_weight ? in[1] : NULL, in[2], c->eps, c->op == WGML_OP_LAYERNORM_GRAD, out);
        return rows * cols;
    case WGML_OP_CROSS_ENTROPY_GRAD: /* g_r (softmax(x_r) - onehot(label_r)) */
        wgml_ref_softmax(rows, cols, in[0], out);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                out[r * cols + j] = in[2][r] * (out[r * cols + j] - (j == (int64_t)in[1][r] ? 1.0 : 0.0));
        return rows * cols;
    case WGML_OP_MATMUL: {
        int64_t M = c->sh[0][0], K = c->sh[0][1], N = c->sh[1][1];
        wgml_ref_matmul(1, M, N, K, in[0], 1, 0, in[1], 1, 0, 1.0, in[2], 0, out);
        return M * N;
    }
    case WGML_OP_CONCAT: { /* 2-D leaves joined along c->axis */
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
    case WGML_OP_RAND: { /* exact in f32 */
        float u[MAXEL];
        int64_t n = test_numel(c->nd[0], c->sh[0]);
        wgml_ref_rand(RCASE_SEED, 0, n, c->r0, c->r1, u);
        for (int64_t i = 0; i < n; i++) out[i] = u[i];
        return n;
    }
    case WGML_OP_RANDN: wgml_ref_randn(RCASE_SEED, 0, test_numel(c->nd[0], c->sh[0]), c->r0, c->r1, out); return test_numel(c->nd[0], c->sh[0]);
    case WGML_OP_DROPOUT: wgml_ref_dropout(RCASE_SEED, 0, test_numel(c->nd[0], c->sh[0]), in[0], c->r0, out); return test_numel(c->nd[0], c->sh[0]);
    case WGML_OP_INDEX_SELECT: case WGML_OP_INDEX_ADD: { /* a [outer, len, inner], idx [n], src [outer, n, inner] */
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
    case WGML_OP_INDEX_SORT: { /* stable: by value, then position */
        int64_t n = c->sh[0][0], k = 0;
        for (int v = 0; v < c->labels_of[0]; v++)
            for (int64_t p = 0; p < n; p++)
                if ((int)in[0][p] == v) out[k] = v, out[n + k++] = (double)p;
        return 2 * n;
    }
    case WGML_OP_CUMSUM:
        wgml_ref_cumsum(c->nd[0], c->sh[0], in[0], c->axis < 0 ? c->axis + c->nd[0] : c->axis, c->flag, out);
        return test_numel(c->nd[0], c->sh[0]);
    case WGML_OP_ROPE: { /* [B, T, D] */
        int64_t D = c->sh[0][c->nd[0] - 1], T = c->sh[0][c->nd[0] - 2], n = test_numel(c->nd[0], c->sh[0]);
        wgml_ref_rope(n / (T * D), T, D, in[0], (double)c->pos, c->base, c->flag & 1, c->flag >> 1, out);
        return n;
    }
    case WGML_OP_ATTENTION:
    case WGML_OP_ATTENTION_GRAD: { /* q [B,H,T,D], k and v [B,Hkv,S,D] */
        int64_t B = c->sh[0][0], H = c->sh[0][1], T = c->sh[0][2], D = c->sh[0][3], Hkv = c->sh[1][1], S = c->sh[1][2];
        int64_t nq = B * H * T * D, nk = B * Hkv * S * D;
        if (c->op == WGML_OP_ATTENTION)
            return wgml_ref_attention(B, H, Hkv, T, S, D, in[0], in[1], in[2], c->causal, c->scale, out) ? -1 : nq;
        int bad = wgml_ref_attention_backward(B, H, Hkv, T, S, D, in[0], in[1], in[2], in[3], c->causal, c->scale, out, out + nq,
                                              out + nq + nk);
        return bad ? -1 : nq + 2 * nk;
    }
    default: return -1;
    }
    return test_numel(c->nd[0], c->sh[0]) / c->sh[0][c->axis]; /* reductions */
}

/* how far a max reduction's inputs are from a tie of the max (its kink) */
static double r_kink(const rcase *c, const double *x)
{
    if (c->op != WGML_OP_MAX && c->op != WGML_OP_MIN) return INFINITY;
    int64_t outer = 1, n = c->sh[0][c->axis], inner = 1;
    for (int d = 0; d < c->axis; d++) outer *= c->sh[0][d];
    for (int d = c->axis + 1; d < c->nd[0]; d++) inner *= c->sh[0][d];
    double neg[MAXEL];
    for (int64_t i = 0; c->op == WGML_OP_MIN && i < outer * n * inner; i++) neg[i] = -x[i];
    return test_max_gap(outer, n, inner, c->op == WGML_OP_MIN ? neg : x);
}

static void run_rcase(wgml_context *ctx, const rcase *c)
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
    } while (r_kink(c, xd[0]) < KINK && ++tries < 1000);
    int64_t nout = r_eval(c, dp, out);
    if (nout < 0) {
        FAILF("no reference for op %s of kind %s (r_eval)", d->name, kind_name[d->kind]);
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
    wgml_tensor *y = r_build(ctx, c, in);
    if (!y) {
        FAILF("no test driver for op %s of kind %s (r_build)", d->name, kind_name[d->kind]);
        goto scope;
    }
    if (wgml_tensor_status(y)) {
        FAILF("%s: built in error: %s", what, wgml_error_message(ctx));
        goto scope;
    }
    if (!reaches(y, c->op, 0)) FAILF("%s: its driver's graph has no %s node", what, d->name);
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
                r_eval(c, dp, out);
                for (int64_t j = 0; j < nout; j++) lp += wf[j] * out[j];
                xd[l][i] = x0 - h;
                r_eval(c, dp, out);
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

static void set_leaf(rcase *c, int l, int nd, const int64_t *sh, double lo, double hi)
{
    c->nd[l] = nd;
    memcpy(c->sh[l], sh, (size_t)nd * sizeof *sh);
    c->lo[l] = lo;
    c->hi[l] = hi;
    if (l >= c->nin) c->nin = l + 1;
}

static void every_kernel_entry_has_a_driver(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int ran = 0;
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        const wgml_op_def *d = wgml_op_table[op];
        if (d->kind != WGML_KIND_REDUCE && d->kind != WGML_KIND_ROW && d->kind != WGML_KIND_MATMUL && d->kind != WGML_KIND_KERNEL)
            continue;
        double lo0 = d->test.lo[0], hi0 = d->test.hi[0], lo1 = d->test.lo[1], hi1 = d->test.hi[1];
        rcase c = {.op = op};
        const int64_t s354[3] = {3, 5, 4}, s47[2] = {4, 7}, s7[1] = {7}, s4[1] = {4};
        switch (op) {
        case WGML_OP_SUM: case WGML_OP_MEAN: case WGML_OP_MAX: case WGML_OP_ARGMAX: case WGML_OP_MIN: case WGML_OP_ARGMIN:
            set_leaf(&c, 0, 3, s354, lo0, hi0);
            for (c.axis = 0; c.axis < 3; c.axis++) run_rcase(ctx, &c);
            break;
        case WGML_OP_SOFTMAX: case WGML_OP_LOG_SOFTMAX:
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            run_rcase(ctx, &c);
            break;
        case WGML_OP_LAYERNORM: case WGML_OP_RMSNORM:
            c.eps = 1e-5f;
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            set_leaf(&c, 1, 1, s7, lo1, hi1); /* weight */
            if (op == WGML_OP_LAYERNORM) set_leaf(&c, 2, 1, s7, lo1, hi1); /* bias */
            run_rcase(ctx, &c);
            break;
        case WGML_OP_NORMALIZE: { /* f32 and vec4 rows; eps below every row's norm, then above (x / eps) */
            const int64_t s416[2] = {4, 16};
            for (int w = 0; w < 2; w++)
                for (int big = 0; big < 2; big++) {
                    c.eps = big ? 100.0f : 1e-12f;
                    set_leaf(&c, 0, 2, w ? s416 : s47, lo0, hi0);
                    run_rcase(ctx, &c);
                }
            break;
        }
        case WGML_OP_CROSS_ENTROPY:
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            set_leaf(&c, 1, 1, s4, 0, 0);
            c.labels_of[1] = 7;
            run_rcase(ctx, &c);
            break;
        case WGML_OP_LAYERNORM_GRAD: case WGML_OP_RMSNORM_GRAD: /* with a weight and without */
            c.eps = 1e-5f;
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            set_leaf(&c, 1, 1, s7, lo1, hi1); /* weight */
            set_leaf(&c, 2, 2, s47, lo1, hi1); /* upstream gradient */
            for (c.with_weight = 1; c.with_weight >= 0; c.with_weight--) run_rcase(ctx, &c);
            c.with_weight = 0;
            break;
        case WGML_OP_CROSS_ENTROPY_GRAD:
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            set_leaf(&c, 1, 1, s4, 0, 0);
            c.labels_of[1] = 7;
            set_leaf(&c, 2, 1, s4, lo1, hi1); /* each row's upstream gradient */
            run_rcase(ctx, &c);
            break;
        case WGML_OP_MATMUL: {
            const int64_t sa[2] = {5, 7}, sb[2] = {7, 3}, sbias[1] = {3};
            set_leaf(&c, 0, 2, sa, lo0, hi0);
            set_leaf(&c, 1, 2, sb, lo1, hi1);
            set_leaf(&c, 2, 1, sbias, lo1, hi1);
            run_rcase(ctx, &c);
            break;
        }
        case WGML_OP_CONCAT: { /* three 2-D tensors along each axis */
            const int64_t s23[2] = {2, 3}, s21[2] = {2, 1}, s24[2] = {2, 4}, s13[2] = {1, 3}, s43[2] = {4, 3};
            set_leaf(&c, 0, 2, s23, lo0, hi0);
            set_leaf(&c, 1, 2, s21, lo0, hi0);
            set_leaf(&c, 2, 2, s24, lo0, hi0);
            c.axis = 1;
            run_rcase(ctx, &c);
            set_leaf(&c, 1, 2, s13, lo0, hi0);
            set_leaf(&c, 2, 2, s43, lo0, hi0);
            c.axis = 0;
            run_rcase(ctx, &c);
            break;
        }
        case WGML_OP_RAND: case WGML_OP_RANDN: /* no operand: leaf 0's shape is the output's, nin stays 0 */
            c.nd[0] = 2;
            memcpy(c.sh[0], s47, sizeof s47);
            c.r0 = op == WGML_OP_RAND ? (float)lo0 : 0.5f; /* rand: its test domain; randn: mean 0.5, std 2 */
            c.r1 = op == WGML_OP_RAND ? (float)hi0 : 2.0f;
            run_rcase(ctx, &c);
            break;
        case WGML_OP_DROPOUT:
            set_leaf(&c, 0, 2, s47, lo0, hi0);
            c.r0 = 0.5f;
            run_rcase(ctx, &c);
            break;
        case WGML_OP_INDEX_SELECT: case WGML_OP_INDEX_ADD: { /* a [3, 4, 2], 5 indices with repeats, along each axis */
            const int64_t s342[3] = {3, 4, 2}, s5[1] = {5};
            for (c.axis = 0; c.axis < 3; c.axis++) {
                int64_t ssrc[3] = {3, 4, 2};
                ssrc[c.axis] = 5;
                c.nin = 0;
                set_leaf(&c, 0, 3, s342, lo0, hi0);
                set_leaf(&c, 1, 1, s5, 0, 0);
                c.labels_of[1] = (int)s342[c.axis];
                c.ints[1] = true;
                if (op == WGML_OP_INDEX_ADD) set_leaf(&c, 2, 3, ssrc, lo1, hi1); /* src */
                run_rcase(ctx, &c);
            }
            break;
        }
        case WGML_OP_INDEX_SORT: { /* 30 indices below 300: two radix passes */
            const int64_t s30[1] = {30};
            set_leaf(&c, 0, 1, s30, 0, 0);
            c.labels_of[0] = 300;
            c.ints[0] = true;
            run_rcase(ctx, &c);
            break;
        }
        case WGML_OP_CUMSUM: /* every axis, a negative one too, both directions */
            set_leaf(&c, 0, 3, s354, lo0, hi0);
            for (c.axis = -1; c.axis < 3; c.axis++)
                for (c.flag = 0; c.flag < 2; c.flag++) run_rcase(ctx, &c);
            break;
        case WGML_OP_ROPE: { /* [B, T, D] at positions 5..7, both pairings, forward and inverse */
            const int64_t s234[3] = {2, 3, 4};
            set_leaf(&c, 0, 3, s234, lo0, hi0);
            c.pos = 5;
            c.base = 100.0f; /* frequencies 1 and 0.1 */
            for (c.flag = 0; c.flag < 4; c.flag++) run_rcase(ctx, &c);
            break;
        }
        case WGML_OP_ATTENTION: case WGML_OP_ATTENTION_GRAD: {
            /* two query heads sharing one key/value head, 3 queries after 2 cached keys */
            const int64_t sq[4] = {1, 2, 3, 4}, skv[4] = {1, 1, 5, 4};
            c.causal = 1;
            c.scale = 0.4f;
            set_leaf(&c, 0, 4, sq, lo0, hi0);
            set_leaf(&c, 1, 4, skv, lo1, hi1);
            set_leaf(&c, 2, 4, skv, lo1, hi1);
            if (op == WGML_OP_ATTENTION_GRAD) set_leaf(&c, 3, 4, sq, lo1, hi1); /* the upstream gradient */
            run_rcase(ctx, &c);
            break;
        }
        default:
            FAILF("no test driver for op %s (%s) of kind %s: add its case here", d->name, enum_name[op], kind_name[d->kind]);
            continue;
        }
        ran++;
    }
    fprintf(stderr, "  %d reduce, row, matmul and kernel entries driven\n", ran);
}

int main(void)
{
    TEST_RUN(the_table_is_complete);
    TEST_RUN(every_elementwise_entry_matches_its_reference);
    TEST_RUN(op_info_describes_every_entry);
    TEST_RUN(public_constructors_build_their_ops);
    TEST_RUN(binary_ops_with_a_number_on_either_side);
    TEST_RUN(softplus_at_its_edges);
    TEST_RUN(every_differentiable_elementwise_entry_has_the_right_gradient);
    TEST_RUN(every_kernel_entry_has_a_driver);
    return test_summary();
}
