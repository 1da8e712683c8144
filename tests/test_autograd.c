/*
 * Autograd's mechanics against central finite differences of the same loss evaluated on the
 * CPU in double: gradients summed back over broadcast operands (every binary op with a rule,
 * on shapes that broadcast), one leaf used several times, gradients through views and slices
 * (and a row op or a matmul of a view), composite losses (mse, the MLP's training path),
 * accumulation, the convention at ties of max, errors, detach, argmax, reading before
 * backward. Each op's own gradient, on its own shapes, is checked once, in test_op_table.c
 * (its driver walks every op of the table); this file does not repeat it.
 *
 * Method, per case: on the GPU, L = sum_all(op(x[, y]) * w) with w a fixed random tensor of
 * the output's shape (so the upstream gradient is not all ones); the inputs are leaves marked
 * with wgml_requires_grad; wgml_backward(L); wgml_grad(x) is read. On the CPU the same L is
 * computed in double by tests/ref/ref.h (the elementwise ops through ref/elementwise.c's, by
 * op name), and dL/dx_i = (L(x + h e_i) - L(x - h e_i)) / 2h, h = 1e-3, perturbing the float
 * inputs converted to double. Gradients must agree to a relative error of 1e-3 (floor 1e-3 on
 * the magnitude, scaled by the gradient's largest element where that exceeds 1; see
 * grad_close). Inputs are sampled at least 1e-2 (10 h) away from every kink (relu, abs, clamp
 * bounds, maximum/minimum ties, relu pre-activations inside matmul, a max and the runner-up
 * of the same reduction), and layernorm/rmsnorm rows keep sqrt(var + eps) >= 0.1 (the central
 * difference's error grows as (h / that)^2).
 *
 * Every case also checks that the gradient has the input's shape and that the GPU forward
 * value of L matches the CPU one (so the case computes on the CPU what it builds on the GPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "engine/build.h"
#include "ops/table.h"
#include "harness.h"


#define MAXIN 5    /* leaves per case */
#define MAXOP 6    /* operands per case (a leaf may be used twice) */
#define MAXV 2     /* views applied to one operand */
#define MAXEL 4096 /* elements of any array of a case */
#define FD_H 1e-3
#define GRAD_TOL 1e-3
#define GRAD_FLOOR 1e-3
#define KINK 1e-2  /* distance kept from every kink (>= 2h) */

static int n_cases = 0, n_failed_cases = 0;
static double worst_err = 0; /* the largest gradient error seen, for the summary */
static char worst_case[200];

/* ---------------------------------------------------------------- shapes */

/* ---------------------------------------------------------------- the cases */

typedef enum {
    K_UNARY,   /* op: a unary op of the table (clamp: bounds lo, hi) */
    K_BINARY,  /* op: a binary op of the table, NumPy broadcasting */
    K_REDUCE,  /* op: WGML_OP_SUM, _MEAN or _MAX; axis, keepdim, or all (the *_all form) */
    K_ROW,     /* op: WGML_OP_SOFTMAX, _LOG_SOFTMAX, _LAYERNORM or _RMSNORM (eps s; the leaves
                  after x: the weight if has_weight, then the bias if has_bias) */
    K_MATMUL,  /* md; has_bias: the last leaf is the bias */
    K_MSE,     /* wgml_mse(x, y) */
    K_DIAMOND, /* tanh(x) + x * sigmoid(x): one leaf, three uses */
    K_MLP,     /* cross_entropy(relu(x W1 + b1) W2 + b2, labels) */
} kind;

enum { V_RESHAPE = 1, V_PERMUTE, V_BCAST, V_SLICE };
typedef struct view {
    int kind, nd;
    int64_t sh[4];                 /* reshape and broadcast_to */
    int perm[4];                   /* permute */
    int axis;                      /* slice: [start, stop) by step along axis */
    int64_t start, stop, step;
} view;

typedef struct gcase {
    char name[160];
    kind kind;
    int op, axis, keepdim, all; /* op: a wgml_op (engine/op.h) */
    float s, lo, hi;
    wgml_matmul_desc md; /* its bias field is unused: has_bias makes the last leaf the bias */
    int has_bias, has_weight;
    int same;            /* operand 1 is leaf 0 again (one leaf used twice) */
    int vop, nview;      /* views applied, in order, to operand vop before the op */
    view views[MAXV];
    int nin;             /* leaves */
    int nd[MAXIN];
    int64_t sh[MAXIN][4];
    double rlo[MAXIN], rhi[MAXIN], absmin[MAXIN]; /* sampling: uniform in [rlo, rhi), |x| >= absmin */
    int nlabels;
    int32_t labels[64];  /* K_MLP */
} gcase;

/* the op table's name of op */
static const char *op_name(int op) { return wgml_op_table[op]->name; }

/* an op of the table of this kind with a gradient rule */
static int has_rule(int op, wgml_op_kind kind) { return wgml_op_table[op]->kind == kind && wgml_op_table[op]->vjp; }

/* where a unary op's derivative jumps: 1 at 0, 2 at the clamp bounds (0: nowhere) */
static int unary_kink(int op) { return op == WGML_OP_ABS || op == WGML_OP_RELU ? 1 : op == WGML_OP_CLAMP ? 2 : 0; }

static const char *const act_names[] = {"none", "relu", "gelu", "silu", "gelu_exact"};

/* operand k of the op is leaf leaf_of(k) */
static int n_operands(const gcase *c) { return c->nin + (c->same ? 1 : 0); }
static int leaf_of(const gcase *c, int k) { return c->same ? (k == 0 ? 0 : k - 1) : k; }

/* ---------------------------------------------------------------- CPU, in double: tests/ref/ref.h */

typedef struct darr {
    int nd;
    int64_t sh[WGML_REF_MAX_DIMS];
    double *v;
} darr;

/* a becomes the view v of it, held in out (MAXEL doubles); -1 if the reference refuses it */
static int cpu_view(const view *v, darr *a, double *out)
{
    int ax = v->axis < 0 ? v->axis + a->nd : v->axis;
    switch (v->kind) {
    case V_RESHAPE: /* the same elements in the same order */
        a->nd = v->nd;
        memcpy(a->sh, v->sh, sizeof v->sh);
        return 0;
    case V_PERMUTE: {
        int64_t sh[WGML_REF_MAX_DIMS];
        for (int i = 0; i < a->nd; i++) sh[i] = a->sh[v->perm[i]];
        wgml_ref_permute(a->nd, a->sh, a->v, v->perm, out);
        memcpy(a->sh, sh, sizeof sh);
        break;
    }
    case V_BCAST:
        if (wgml_ref_broadcast_to(a->nd, a->sh, a->v, v->nd, v->sh, out)) return -1;
        a->nd = v->nd;
        memcpy(a->sh, v->sh, sizeof v->sh);
        break;
    case V_SLICE:
        wgml_ref_slice(a->nd, a->sh, a->v, ax, v->start, v->stop, v->step, out);
        a->sh[ax] = wgml_ref_slice_len(v->start, v->stop, v->step);
        break;
    default: return -1;
    }
    a->v = out;
    return 0;
}

/* the reference of elementwise op at one element (ref/elementwise.c, by name): its operands, then its scalars */
static double ref_at(int op, double a, double b, double c)
{
    const double in[3] = {a, b, c};
    wgml_ref_elementwise_fn f = wgml_ref_elementwise(wgml_op_table[op]->name);
    return f ? f(in) : NAN; /* none: a FAIL of test_op_table */
}

/* a and b stretched to their broadcast shape (out's; its values in pa and pb) */
static int broadcast_both(const darr *a, const darr *b, darr *out, double *pa, double *pb)
{
    if (wgml_ref_broadcast_shape(a->nd, a->sh, b->nd, b->sh, &out->nd, out->sh)) return -1;
    if (wgml_ref_broadcast_to(a->nd, a->sh, a->v, out->nd, out->sh, pa)) return -1;
    return wgml_ref_broadcast_to(b->nd, b->sh, b->v, out->nd, out->sh, pb);
}

/* C = act(alpha op(A) op(B) + bias) with 2-D or 3-D operands (a 2-D one shared by the batch);
   *kink gets the least |pre-activation| when act is relu */
static int cpu_matmul(const wgml_matmul_desc *md, const darr *a, const darr *b, const double *bias,
                      darr *out, double *kink)
{
    static double z[MAXEL];
    int ta = md->trans_a, tb = md->trans_b;
    int64_t M = ta ? a->sh[a->nd - 1] : a->sh[a->nd - 2], K = ta ? a->sh[a->nd - 2] : a->sh[a->nd - 1];
    int64_t Kb = tb ? b->sh[b->nd - 1] : b->sh[b->nd - 2], N = tb ? b->sh[b->nd - 2] : b->sh[b->nd - 1];
    int64_t ba = a->nd == 3 ? a->sh[0] : 1, bb = b->nd == 3 ? b->sh[0] : 1, batch = ba > bb ? ba : bb;
    if (K != Kb || (ba != bb && ba != 1 && bb != 1)) return -1;
    double alpha = md->alpha == 0.0f ? 1.0 : md->alpha; /* wgml_matmul_desc: 0 means 1 */
    if (md->activation == WGML_ACT_RELU) {
        wgml_ref_matmul(batch, M, N, K, a->v, ba, ta, b->v, bb, tb, alpha, bias, WGML_ACT_NONE, z);
        for (int64_t i = 0; i < batch * M * N; i++) *kink = fmin(*kink, fabs(z[i]));
    }
    wgml_ref_matmul(batch, M, N, K, a->v, ba, ta, b->v, bb, tb, alpha, bias, md->activation, out->v);
    out->nd = (a->nd == 3 || b->nd == 3) ? 3 : 2;
    int64_t s3[3] = {batch, M, N};
    memcpy(out->sh, out->nd == 3 ? s3 : s3 + 1, (size_t)out->nd * sizeof *s3);
    return 0;
}

/* the least sqrt(var + eps) of the rows of x (rows, len), var about the row mean when
   centred (layernorm) and about 0 if not (rmsnorm): the central difference's error grows as
   (h / that)^2 */
static double least_row_scale(int64_t rows, int64_t len, const double *x, int centred, double eps)
{
    static double mean[MAXEL], xc[MAXEL], sq[MAXEL], var[MAXEL];
    int64_t sh[2] = {rows, len}, col[2] = {rows, 1};
    const double *d = x;
    if (centred) {
        wgml_ref_mean(2, sh, x, 1, mean);
        wgml_ref_binary(wgml_ref_sub, 2, sh, x, 2, col, mean, xc);
        d = xc;
    }
    wgml_ref_binary(wgml_ref_mul, 2, sh, d, 2, sh, d, sq);
    wgml_ref_mean(2, sh, sq, 1, var);
    double least = INFINITY;
    for (int64_t r = 0; r < rows; r++) least = fmin(least, sqrt(var[r] + eps));
    return least;
}

/* The op's output in double, from the leaves in[] (double). *kink (if given) gets the least
   distance of any input to a kink of the op. Returns 0, or -1 for a case the reference (or
   this function) does not take. */
static int cpu_forward(const gcase *c, double *const *in, darr *out, double *kink)
{
    static double viewbuf[MAXV][MAXEL], tmp[2][MAXEL];
    darr op[MAXOP];
    for (int k = 0; k < n_operands(c); k++) {
        int l = leaf_of(c, k);
        op[k].nd = c->nd[l];
        memcpy(op[k].sh, c->sh[l], sizeof c->sh[l]);
        op[k].v = in[l];
    }
    for (int i = 0; i < c->nview; i++)
        if (cpu_view(&c->views[i], &op[c->vop], viewbuf[i])) return -1;
    darr *x = &op[0];
    int64_t n = test_numel(x->nd, x->sh);
    double dummy = INFINITY;
    if (!kink) kink = &dummy;
    /* elementwise and row ops keep x's shape */
    out->nd = x->nd;
    memcpy(out->sh, x->sh, sizeof x->sh);
    switch (c->kind) {
    case K_UNARY:
        for (int64_t i = 0; i < n; i++) {
            double v = x->v[i];
            if (unary_kink(c->op) == 1) *kink = fmin(*kink, fabs(v));
            if (unary_kink(c->op) == 2) *kink = fmin(*kink, fmin(fabs(v - c->lo), fabs(v - c->hi)));
            out->v[i] = ref_at(c->op, v, c->lo, c->hi); /* the bounds: clamp's scalars */
        }
        return 0;
    case K_BINARY: {
        if (broadcast_both(&op[0], &op[1], out, tmp[0], tmp[1])) return -1;
        int extremum = c->op == WGML_OP_MAXIMUM || c->op == WGML_OP_MINIMUM;
        for (int64_t i = 0; i < test_numel(out->nd, out->sh); i++) {
            if (extremum) *kink = fmin(*kink, fabs(tmp[0][i] - tmp[1][i]));
            out->v[i] = ref_at(c->op, tmp[0][i], tmp[1][i], 0);
        }
        return 0;
    }
    case K_REDUCE: {
        darr flat = {.nd = 1, .sh = {n}, .v = x->v}; /* the *_all forms reduce x flattened */
        if (c->all) x = &flat;
        int ax = c->all ? 0 : c->axis < 0 ? c->axis + x->nd : c->axis;
        int64_t outer = test_numel(ax, x->sh), len = x->sh[ax], inner = test_numel(x->nd - ax - 1, x->sh + ax + 1);
        switch (c->op) {
        case WGML_OP_SUM: wgml_ref_sum(x->nd, x->sh, x->v, ax, out->v); break;
        case WGML_OP_MEAN: wgml_ref_mean(x->nd, x->sh, x->v, ax, out->v); break;
        case WGML_OP_MAX:
            wgml_ref_max(x->nd, x->sh, x->v, ax, out->v);
            *kink = fmin(*kink, test_max_gap(outer, len, inner, x->v)); /* a tie is a kink */
            break;
        case WGML_OP_MIN: { /* -max(-x) */
            double *neg = malloc((size_t)n * sizeof *neg);
            for (int64_t i = 0; i < n; i++) neg[i] = -x->v[i];
            wgml_ref_max(x->nd, x->sh, neg, ax, out->v);
            for (int64_t i = 0; i < outer * inner; i++) out->v[i] = -out->v[i];
            *kink = fmin(*kink, test_max_gap(outer, len, inner, neg));
            free(neg);
            break;
        }
        default: return -1;
        }
        out->nd = 0;
        for (int d = 0; d < x->nd && !c->all; d++)
            if (d != ax) out->sh[out->nd++] = x->sh[d];
            else if (c->keepdim) out->sh[out->nd++] = 1;
        if (out->nd == 0) out->sh[out->nd++] = 1;
        return 0;
    }
    case K_ROW: {
        int64_t len = x->sh[x->nd - 1], rows = n / len;
        const double *weight = c->has_weight ? op[1].v : NULL, *bias = c->has_bias ? op[1 + c->has_weight].v : NULL;
        switch (c->op) {
        case WGML_OP_SOFTMAX: wgml_ref_softmax(rows, len, x->v, out->v); return 0;
        case WGML_OP_LOG_SOFTMAX: wgml_ref_log_softmax(rows, len, x->v, out->v); return 0;
        case WGML_OP_LAYERNORM: wgml_ref_layernorm(rows, len, x->v, weight, bias, c->s, out->v); break;
        case WGML_OP_RMSNORM: wgml_ref_rmsnorm(rows, len, x->v, weight, c->s, out->v); break;
        default: return -1;
        }
        *kink = fmin(*kink, least_row_scale(rows, len, x->v, c->op == WGML_OP_LAYERNORM, c->s) / 10);
        return 0;
    }
    case K_MATMUL:
        return cpu_matmul(&c->md, &op[0], &op[1], c->has_bias ? op[2].v : NULL, out, kink);
    case K_MSE: {
        darr d;
        if (broadcast_both(&op[0], &op[1], &d, tmp[0], tmp[1])) return -1;
        out->v[0] = wgml_ref_mse(test_numel(d.nd, d.sh), tmp[0], tmp[1]);
        out->nd = 1;
        out->sh[0] = 1;
        return 0;
    }
    case K_DIAMOND:
        for (int64_t i = 0; i < n; i++) out->v[i] = wgml_ref_tanh(x->v[i]) + x->v[i] * wgml_ref_sigmoid(x->v[i]);
        return 0;
    case K_MLP: {
        wgml_matmul_desc l1 = {.activation = WGML_ACT_RELU}, l2 = {0};
        darr h = {.v = tmp[0]}, logits = {.v = tmp[1]};
        if (cpu_matmul(&l1, &op[0], &op[1], op[2].v, &h, kink)) return -1;
        if (cpu_matmul(&l2, &h, &op[3], op[4].v, &logits, kink)) return -1;
        out->v[0] = wgml_ref_cross_entropy(logits.sh[0], logits.sh[1], logits.v, c->labels);
        out->nd = 1;
        out->sh[0] = 1;
        return 0;
    }
    }
    return -1;
}

/* ---------------------------------------------------------------- GPU */

static wgml_tensor *gpu_forward(wgml_context *ctx, const gcase *c, wgml_tensor *const *in)
{
    wgml_tensor *op[MAXOP];
    for (int k = 0; k < n_operands(c); k++) op[k] = in[leaf_of(c, k)];
    for (int i = 0; i < c->nview; i++) {
        const view *v = &c->views[i];
        wgml_tensor *t = op[c->vop];
        op[c->vop] = v->kind == V_RESHAPE ? wgml_reshape(ctx, t, v->nd, v->sh)
                     : v->kind == V_PERMUTE ? wgml_permute(ctx, t, v->perm)
                     : v->kind == V_SLICE   ? wgml_slice(ctx, t, v->axis, v->start, v->stop, v->step)
                                            : wgml_broadcast_to(ctx, t, v->nd, v->sh);
    }
    wgml_tensor *x = op[0];
    switch (c->kind) {
    case K_UNARY: /* the public constructors are these nodes (engine/build.c) */
        return c->op == WGML_OP_CLAMP ? wgml_clamp(ctx, x, c->lo, c->hi) : wgml_unary_node(ctx, (wgml_op)c->op, x);
    case K_BINARY: return wgml_binary_node(ctx, (wgml_op)c->op, x, op[1]);
    case K_REDUCE:
        switch (c->op) {
        case WGML_OP_SUM: return c->all ? wgml_sum_all(ctx, x) : wgml_sum(ctx, x, c->axis, c->keepdim);
        case WGML_OP_MEAN: return c->all ? wgml_mean_all(ctx, x) : wgml_mean(ctx, x, c->axis, c->keepdim);
        case WGML_OP_MAX: return c->all ? wgml_max_all(ctx, x) : wgml_max(ctx, x, c->axis, c->keepdim);
        case WGML_OP_MIN: return c->all ? wgml_min_all(ctx, x) : wgml_min(ctx, x, c->axis, c->keepdim);
        default: return NULL;
        }
    case K_ROW: {
        wgml_tensor *w = c->has_weight ? op[1] : NULL, *b = c->has_bias ? op[1 + c->has_weight] : NULL;
        switch (c->op) {
        case WGML_OP_SOFTMAX: return wgml_softmax(ctx, x);
        case WGML_OP_LOG_SOFTMAX: return wgml_log_softmax(ctx, x);
        case WGML_OP_LAYERNORM: return wgml_layernorm(ctx, x, w, b, c->s);
        case WGML_OP_RMSNORM: return wgml_rmsnorm(ctx, x, w, c->s);
        default: return NULL;
        }
    }
    case K_MATMUL: {
        wgml_matmul_desc md = c->md;
        md.bias = c->has_bias ? op[2] : NULL;
        return wgml_matmul_ex(ctx, x, op[1], &md);
    }
    case K_MSE: return wgml_mse(ctx, x, op[1]);
    case K_DIAMOND: return wgml_add(ctx, wgml_tanh(ctx, x), wgml_mul(ctx, x, wgml_sigmoid(ctx, x)));
    case K_MLP: {
        float lab[64];
        for (int i = 0; i < c->nlabels; i++) lab[i] = (float)c->labels[i];
        int64_t nl = c->nlabels;
        wgml_tensor *labels = NULL;
        if (wgml_tensor_from_data(ctx, 1, &nl, lab, (size_t)nl, &labels)) return NULL;
        wgml_matmul_desc l1 = {.bias = op[2], .activation = WGML_ACT_RELU}, l2 = {.bias = op[4]};
        wgml_tensor *h = wgml_matmul_ex(ctx, x, op[1], &l1);
        return wgml_cross_entropy(ctx, wgml_matmul_ex(ctx, h, op[3], &l2), labels);
    }
    }
    return NULL;
}

/* ---------------------------------------------------------------- the check */

static double loss_of(const gcase *c, double *const *in, const double *w, darr *out)
{
    if (cpu_forward(c, in, out, NULL)) return NAN;
    double L = 0;
    int64_t n = test_numel(out->nd, out->sh);
    for (int64_t i = 0; i < n; i++) L += out->v[i] * w[i];
    return L;
}

/* Relative error per element, |got - want| / max(|want|, floor), with floor = 1e-3 scaled by
   the gradient's largest magnitude when that is above 1: an element that cancels to near zero
   in a long float sum (matmul) carries the rounding of its terms, which scale with the
   gradient, not with that element. Prints the worst element and the first few, side by side,
   when the gradient is off. */
static int grad_close(const char *what, const float *got, const double *want, int64_t n)
{
    double scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    double floor = GRAD_FLOOR * scale;
    double worst = test_max_rel_err(got, want, (size_t)n, floor);
    if (worst > worst_err || isnan(worst)) {
        worst_err = worst;
        snprintf(worst_case, sizeof worst_case, "%.199s", what);
    }
    if (worst <= GRAD_TOL) return 1;
    test_close(what, got, want, (size_t)n, GRAD_TOL, floor);
    fprintf(stderr, "    (floor %.3g)\n    got :", floor);
    for (int64_t i = 0; i < n && i < 8; i++) fprintf(stderr, " %+.6f", got[i]);
    fprintf(stderr, "%s\n    want:", n > 8 ? " ..." : "");
    for (int64_t i = 0; i < n && i < 8; i++) fprintf(stderr, " %+.6f", want[i]);
    fprintf(stderr, "%s\n", n > 8 ? " ..." : "");
    return 0;
}

static void sample_inputs(const gcase *c, float **x)
{
    for (int l = 0; l < c->nin; l++) {
        int64_t n = test_numel(c->nd[l], c->sh[l]);
        for (int64_t i = 0; i < n; i++) {
            double v;
            do v = test_uniform(c->rlo[l], c->rhi[l]);
            while (fabs(v) < c->absmin[l]);
            x[l][i] = (float)v;
        }
    }
}

static void run_case(const gcase *c)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int before = test_failures;
    n_cases++;
    static float xf[MAXIN][MAXEL], wf[MAXEL], got[MAXEL];
    static double xd[MAXIN][MAXEL], outv[MAXEL], want[MAXEL];
    float *xp[MAXIN];
    double *dp[MAXIN];
    for (int l = 0; l < MAXIN; l++) xp[l] = xf[l], dp[l] = xd[l];
    darr out = {.v = outv};

    /* inputs away from kinks */
    int tries = 0;
    for (;; tries++) {
        sample_inputs(c, xp);
        for (int l = 0; l < c->nin; l++)
            for (int64_t i = 0; i < test_numel(c->nd[l], c->sh[l]); i++) xd[l][i] = xf[l][i];
        double kink = INFINITY;
        if (cpu_forward(c, dp, &out, &kink)) {
            fprintf(stderr, "FAIL %s: case %s: the CPU reference rejects it (test bug)\n", test_current, c->name);
            test_failures++;
            return;
        }
        if (kink >= KINK) break;
        if (tries == 1000) {
            fprintf(stderr, "FAIL %s: case %s: no inputs away from kinks after 1000 tries\n", test_current, c->name);
            test_failures++;
            return;
        }
    }
    int64_t nout = test_numel(out.nd, out.sh);
    test_fill_uniform(wf, (size_t)nout, -1, 1);
    double w[MAXEL];
    for (int64_t i = 0; i < nout; i++) w[i] = wf[i];

    wgml_scope_begin(ctx);
    wgml_tensor *in[MAXIN] = {0};
    for (int l = 0; l < c->nin; l++) {
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, c->nd[l], c->sh[l], xf[l], (size_t)test_numel(c->nd[l], c->sh[l]), &in[l]));
        CHECK_OK(ctx, wgml_requires_grad(in[l], 1));
    }
    wgml_tensor *y = gpu_forward(ctx, c, in), *wt = NULL;
    char s1[64], s2[64];
    if (!y || wgml_tensor_status(y)) {
        fprintf(stderr, "FAIL %s: case %s: forward: %s: %s\n", test_current, c->name,
                y ? wgml_status_name(wgml_tensor_status(y)) : "NULL", wgml_error_message(ctx));
        test_failures++;
        goto done;
    }
    int64_t ysh[4];
    for (int d = 0; d < wgml_tensor_ndim(y); d++) ysh[d] = wgml_tensor_dim(y, d);
    if (wgml_tensor_ndim(y) != out.nd || memcmp(ysh, out.sh, (size_t)out.nd * sizeof *ysh)) {
        test_shape_str(s1, sizeof s1, wgml_tensor_ndim(y), ysh);
        test_shape_str(s2, sizeof s2, out.nd, out.sh);
        fprintf(stderr, "FAIL %s: case %s: forward shape %s, want %s\n", test_current, c->name, s1, s2);
        test_failures++;
        goto done;
    }
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, out.nd, out.sh, wf, (size_t)nout, &wt));
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, wt));
    wgml_status st = wgml_backward(L);
    if (st) {
        fprintf(stderr, "FAIL %s: case %s: wgml_backward gave %s: %s\n", test_current, c->name,
                wgml_status_name(st), wgml_error_message(ctx));
        test_failures++;
        goto done;
    }
    wgml_tensor *grads[MAXIN + 1];
    int ng = 0;
    for (int l = 0; l < c->nin; l++) {
        wgml_tensor *g = wgml_grad(in[l]);
        if (!g) {
            fprintf(stderr, "FAIL %s: case %s: no gradient for input %d\n", test_current, c->name, l);
            test_failures++;
            goto done;
        }
        int64_t gsh[4];
        for (int d = 0; d < wgml_tensor_ndim(g); d++) gsh[d] = wgml_tensor_dim(g, d);
        if (wgml_tensor_ndim(g) != c->nd[l] || memcmp(gsh, c->sh[l], (size_t)c->nd[l] * sizeof *gsh)) {
            test_shape_str(s1, sizeof s1, wgml_tensor_ndim(g), gsh);
            test_shape_str(s2, sizeof s2, c->nd[l], c->sh[l]);
            fprintf(stderr, "FAIL %s: case %s: gradient of input %d has shape %s, want %s (status %s)\n",
                    test_current, c->name, l, s1, s2, wgml_status_name(wgml_tensor_status(g)));
            test_failures++;
            goto done;
        }
        grads[ng++] = g;
    }
    grads[ng++] = L;
    st = wgml_eval(ctx, ng, grads);
    if (st) {
        fprintf(stderr, "FAIL %s: case %s: evaluating the gradients gave %s: %s\n", test_current, c->name,
                wgml_status_name(st), wgml_error_message(ctx));
        test_failures++;
        goto done;
    }

    /* the forward value, against the reference */
    float Lgpu = NAN;
    CHECK_OK(ctx, wgml_tensor_read(L, &Lgpu, 1));
    double Lcpu = loss_of(c, dp, w, &out), mag = 0;
    for (int64_t i = 0; i < nout; i++) mag += fabs(out.v[i] * w[i]);
    if (!(fabs(Lgpu - Lcpu) <= 1e-4 * fmax(mag, 1e-3))) {
        fprintf(stderr, "FAIL %s: case %s: forward L = %.9g, CPU %.9g\n", test_current, c->name, Lgpu, Lcpu);
        test_failures++;
    }

    /* each leaf's gradient against central differences */
    for (int l = 0; l < c->nin; l++) {
        int64_t n = test_numel(c->nd[l], c->sh[l]);
        for (int64_t i = 0; i < n; i++) {
            double x0 = xd[l][i];
            xd[l][i] = x0 + FD_H;
            double lp = loss_of(c, dp, w, &out);
            xd[l][i] = x0 - FD_H;
            double lm = loss_of(c, dp, w, &out);
            xd[l][i] = x0;
            want[i] = (lp - lm) / (2 * FD_H);
        }
        CHECK_OK(ctx, wgml_tensor_read(grads[l], got, (size_t)n));
        char what[256];
        test_shape_str(s1, sizeof s1, c->nd[l], c->sh[l]);
        snprintf(what, sizeof what, "%s: d/d(input %d %s)", c->name, l, s1);
        if (!grad_close(what, got, want, n)) {
            fprintf(stderr, "FAIL %s: case %s: gradient of input %d\n", test_current, c->name, l);
            test_failures++;
        }
    }
done:
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
    if (test_failures != before) n_failed_cases++;
}

/* ---------------------------------------------------------------- case builders */

static void set_leaf(gcase *c, int l, int nd, const int64_t *sh, double lo, double hi)
{
    c->nd[l] = nd;
    memcpy(c->sh[l], sh, (size_t)nd * sizeof *sh);
    c->rlo[l] = lo;
    c->rhi[l] = hi;
    c->absmin[l] = 0;
    if (l >= c->nin) c->nin = l + 1;
}

static void name_shapes(char *buf, size_t n, const gcase *c)
{
    size_t k = strlen(buf);
    for (int l = 0; l < c->nin && k < n; l++) {
        char s[64];
        test_shape_str(s, sizeof s, c->nd[l], c->sh[l]);
        k += (size_t)snprintf(buf + k, n - k, "%s%s", l ? " " : " ", s);
    }
}

typedef struct shape { int nd; int64_t sh[4]; } shape;

/* 1 to 4 dims of 1 to 4 each */
static shape random_shape(void)
{
    shape s = {.nd = 1 + (int)(test_rand_u64() % 4)};
    for (int d = 0; d < s.nd; d++) s.sh[d] = 1 + (int64_t)(test_rand_u64() % 4);
    return s;
}

/* ---------------------------------------------------------------- elementwise */

/* x [3,4] with y [4], y [3,1], ...: gradients must be summed back to the inputs' shapes */
static const shape bin_pairs[][2] = {
    {{2, {3, 4}}, {1, {4}}},
    {{2, {3, 4}}, {2, {3, 1}}},
    {{2, {3, 1}}, {2, {1, 4}}},
    {{1, {4}}, {2, {3, 4}}},
    {{3, {2, 3, 4}}, {2, {3, 1}}},
    {{3, {2, 1, 4}}, {2, {3, 1}}},
    {{1, {1}}, {2, {2, 3}}},
};

/* a random shape and another that broadcasts with it (a suffix of it, some dims 1, and some
   of the first's dims 1 where the second's are not), in either order */
static void random_pair(shape *a, shape *b)
{
    *a = random_shape();
    b->nd = 1 + (int)(test_rand_u64() % (uint64_t)a->nd);
    for (int d = 0; d < b->nd; d++) {
        int da = d + a->nd - b->nd;
        b->sh[d] = a->sh[da];
        if (test_rand_u64() % 3 == 0) b->sh[d] = 1;
        else if (test_rand_u64() % 4 == 0) a->sh[da] = 1;
    }
    if (test_rand_u64() & 1) {
        shape t = *a;
        *a = *b;
        *b = t;
    }
}

static void binary_ranges(gcase *c, int op)
{
    for (int l = 0; l < 2; l++) c->rlo[l] = -2, c->rhi[l] = 2;
    if (op == WGML_OP_DIV) c->absmin[1] = 0.5;
    if (op == WGML_OP_POW) c->rlo[0] = 0.5, c->rhi[0] = 2, c->rlo[1] = -1.5, c->rhi[1] = 2.5;
}

/* every binary op of the table with a gradient rule */
static void test_binary_broadcast_grads(void)
{
    /* (masked_fill's mask takes no gradient: test_op_table and test_select check it) */
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        if (!has_rule(op, WGML_KIND_BINARY) || op == WGML_OP_MASKED_FILL) continue;
        for (int k = 0; k < N_OF(bin_pairs); k++) {
            gcase c = {.kind = K_BINARY, .op = op};
            set_leaf(&c, 0, bin_pairs[k][0].nd, bin_pairs[k][0].sh, 0, 0);
            set_leaf(&c, 1, bin_pairs[k][1].nd, bin_pairs[k][1].sh, 0, 0);
            binary_ranges(&c, op);
            snprintf(c.name, sizeof c.name, "%s", op_name(op));
            name_shapes(c.name, sizeof c.name, &c);
            run_case(&c);
        }
    }
    for (int op = 0; op < WGML_OP_COUNT; op++) {
        if (!has_rule(op, WGML_KIND_BINARY) || op == WGML_OP_MASKED_FILL) continue;
        for (int k = 0; k < 4; k++) {
            shape a, b;
            random_pair(&a, &b);
            gcase c = {.kind = K_BINARY, .op = op};
            set_leaf(&c, 0, a.nd, a.sh, 0, 0);
            set_leaf(&c, 1, b.nd, b.sh, 0, 0);
            binary_ranges(&c, op);
            snprintf(c.name, sizeof c.name, "%s (random)", op_name(op));
            name_shapes(c.name, sizeof c.name, &c);
            run_case(&c);
        }
    }
    /* past one workgroup of elements */
    gcase big = {.kind = K_BINARY, .op = WGML_OP_MUL};
    set_leaf(&big, 0, 2, (int64_t[]){5, 333}, -2, 2);
    set_leaf(&big, 1, 2, (int64_t[]){5, 1}, -2, 2);
    snprintf(big.name, sizeof big.name, "mul [5,333] [5,1]");
    run_case(&big);
}

/* one leaf used twice: both uses must add up */
static void test_shared_input_grads(void)
{
    const shape sh[] = {{2, {3, 5}}, {1, {1}}, {3, {2, 3, 4}}};
    for (int k = 0; k < N_OF(sh); k++) {
        gcase c = {.kind = K_BINARY, .op = WGML_OP_MUL, .same = 1};
        set_leaf(&c, 0, sh[k].nd, sh[k].sh, -2, 2);
        snprintf(c.name, sizeof c.name, "mul(x, x)");
        name_shapes(c.name, sizeof c.name, &c);
        run_case(&c);
        gcase d = {.kind = K_DIAMOND};
        set_leaf(&d, 0, sh[k].nd, sh[k].sh, -3, 3);
        snprintf(d.name, sizeof d.name, "tanh(x) + x*sigmoid(x)");
        name_shapes(d.name, sizeof d.name, &d);
        run_case(&d);
    }
    /* pow(x, x) and div(x, x): both the base/numerator and the exponent/denominator rule */
    gcase p = {.kind = K_BINARY, .op = WGML_OP_POW, .same = 1};
    set_leaf(&p, 0, 2, (int64_t[]){2, 3}, 0.5, 2);
    snprintf(p.name, sizeof p.name, "pow(x, x) [2,3]");
    run_case(&p);
}

/* ---------------------------------------------------------------- reductions and rows */

/* The convention at ties: each of the k equal maxima of a reduction gets 1/k of its gradient.
   Values from {0, 1, 2} make ties in most rows; the want is counted here from the floats. */
static void max_ties_case(const shape *s, int axis, int all)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    n_cases++;
    int before = test_failures;
    int64_t n = test_numel(s->nd, s->sh);
    float x[64], w[64], got[64];
    double want[64];
    for (int64_t i = 0; i < n; i++) x[i] = (float)(test_rand_u64() % 3), w[i] = (float)test_uniform(-1, 1);
    int64_t outer = 1, len = n, inner = 1;
    if (!all) {
        outer = test_numel(axis, s->sh), len = s->sh[axis], inner = test_numel(s->nd - axis - 1, s->sh + axis + 1);
    }
    char name[96], sh[32];
    test_shape_str(sh, sizeof sh, s->nd, s->sh);
    if (all) snprintf(name, sizeof name, "max_all ties %s", sh);
    else snprintf(name, sizeof name, "max(axis %d) ties %s", axis, sh);
    wgml_scope_begin(ctx);
    wgml_tensor *xt = NULL, *wt = NULL;
    int64_t nw = outer * inner;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, s->nd, s->sh, x, (size_t)n, &xt));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &nw, w, (size_t)nw, &wt));
    CHECK_OK(ctx, wgml_requires_grad(xt, 1));
    wgml_tensor *m = all ? wgml_max_all(ctx, xt) : wgml_max(ctx, xt, axis, 0);
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_reshape(ctx, m, 1, &nw), wt));
    CHECK_OK(ctx, wgml_backward(L));
    if (!wgml_grad(xt)) {
        CHECK(wgml_grad(xt) != NULL);
        goto done;
    }
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(xt), got, (size_t)n));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float top = -INFINITY;
            int ties = 0;
            for (int64_t k = 0; k < len; k++) top = fmaxf(top, x[(o * len + k) * inner + i]);
            for (int64_t k = 0; k < len; k++) ties += x[(o * len + k) * inner + i] == top;
            for (int64_t k = 0; k < len; k++)
                want[(o * len + k) * inner + i] = x[(o * len + k) * inner + i] == top ? w[o * inner + i] / ties : 0.0;
        }
    if (!test_close(name, got, want, (size_t)n, 1e-6, 1e-6)) {
        fprintf(stderr, "FAIL %s: case %s: the gradient is not split equally among the maxima\n", test_current, name);
        test_failures++;
    }
done:
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
    if (test_failures != before) n_failed_cases++;
}

static void test_max_ties(void)
{
    const struct { shape s; int axis, all; } cases[] = {
        {{2, {3, 4}}, 1, 0}, {{2, {5, 3}}, 0, 0}, {{3, {2, 3, 4}}, 1, 0}, {{1, {7}}, 0, 0},
        {{2, {5, 6}}, 0, 1}, {{1, {1}}, 0, 1},
    };
    for (int k = 0; k < N_OF(cases); k++) max_ties_case(&cases[k].s, cases[k].axis, cases[k].all);
}

/* layernorm (weight and bias each optional) and rmsnorm (weight optional): the gradients of x,
   the weight and the bias; transposed: x is 2-D and the op gets its transpose */
static void norm_case(int op, const shape *s, int weight, int bias, float eps, int transposed)
{
    gcase c = {.kind = K_ROW, .op = op, .s = eps, .has_weight = weight, .has_bias = bias, .nview = transposed,
               .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&c, 0, s->nd, s->sh, -2, 2);
    int64_t n = transposed ? s->sh[0] : s->sh[s->nd - 1];
    if (weight) set_leaf(&c, c.nin, 1, &n, -1.5, 1.5);
    if (bias) set_leaf(&c, c.nin, 1, &n, -1, 1);
    snprintf(c.name, sizeof c.name, "%s(%s%s%s, eps %g)", op_name(op), transposed ? "transpose(x), " : "",
             weight ? "weight" : "no weight", bias ? ", bias" : "", eps);
    name_shapes(c.name, sizeof c.name, &c);
    run_case(&c);
}

/* a norm of a transposed x: the row op reads a contiguous copy of the view, and the gradient
   flows back through both (the norms' own gradients, with and without weight and bias:
   test_op_table) */
static void test_norm_of_a_view_grads(void)
{
    const int ln = WGML_OP_LAYERNORM, rms = WGML_OP_RMSNORM;
    const struct { int op, weight, bias; } kinds[] = {{ln, 0, 0}, {ln, 1, 0}, {ln, 0, 1}, {ln, 1, 1}, {rms, 0, 0}, {rms, 1, 0}};
    const shape s35 = {2, {3, 5}};
    for (int v = 0; v < N_OF(kinds); v++) norm_case(kinds[v].op, &s35, kinds[v].weight, kinds[v].bias, 1e-5f, 1);
}

/* ---------------------------------------------------------------- views */

static void test_view_grads(void)
{
    /* reshape [2,6] -> [3,4], then * y [4] */
    gcase a = {.kind = K_BINARY, .op = WGML_OP_MUL, .nview = 1,
               .views = {{.kind = V_RESHAPE, .nd = 2, .sh = {3, 4}}}};
    set_leaf(&a, 0, 2, (int64_t[]){2, 6}, -2, 2);
    set_leaf(&a, 1, 1, (int64_t[]){4}, -2, 2);
    snprintf(a.name, sizeof a.name, "reshape([2,6] -> [3,4]) * y[4]");
    run_case(&a);

    /* transpose [3,5] -> [5,3], then - y [5,3] */
    gcase b = {.kind = K_BINARY, .op = WGML_OP_SUB, .nview = 1,
               .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&b, 0, 2, (int64_t[]){3, 5}, -2, 2);
    set_leaf(&b, 1, 2, (int64_t[]){5, 3}, -2, 2);
    snprintf(b.name, sizeof b.name, "transpose([3,5]) - y[5,3]");
    run_case(&b);

    /* permute [2,3,4] by (2,0,1), then tanh */
    gcase c = {.kind = K_UNARY, .op = WGML_OP_TANH, .nview = 1, .views = {{.kind = V_PERMUTE, .perm = {2, 0, 1}}}};
    set_leaf(&c, 0, 3, (int64_t[]){2, 3, 4}, -2, 2);
    snprintf(c.name, sizeof c.name, "tanh(permute([2,3,4], (2,0,1)))");
    run_case(&c);

    /* broadcast_to [3,1] -> [2,3,4], then * y [2,3,4] */
    gcase d = {.kind = K_BINARY, .op = WGML_OP_MUL, .nview = 1,
               .views = {{.kind = V_BCAST, .nd = 3, .sh = {2, 3, 4}}}};
    set_leaf(&d, 0, 2, (int64_t[]){3, 1}, -2, 2);
    set_leaf(&d, 1, 3, (int64_t[]){2, 3, 4}, -2, 2);
    snprintf(d.name, sizeof d.name, "broadcast_to([3,1] -> [2,3,4]) * y");
    run_case(&d);

    /* broadcast_to [5] -> [3,5], then softmax (a non-contiguous row op input) */
    gcase e = {.kind = K_ROW, .op = WGML_OP_SOFTMAX, .nview = 1, .views = {{.kind = V_BCAST, .nd = 2, .sh = {3, 5}}}};
    set_leaf(&e, 0, 1, (int64_t[]){5}, -2, 2);
    snprintf(e.name, sizeof e.name, "softmax(broadcast_to([5] -> [3,5]))");
    run_case(&e);

    /* transpose then reduce (a non-contiguous reduction input) */
    gcase f = {.kind = K_REDUCE, .op = WGML_OP_MEAN, .axis = 1, .nview = 1, .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&f, 0, 2, (int64_t[]){3, 5}, -2, 2);
    snprintf(f.name, sizeof f.name, "mean(transpose([3,5]), axis 1)");
    run_case(&f);

    /* transpose then reshape (reshape of a non-contiguous view copies), then log_softmax */
    gcase g = {.kind = K_ROW, .op = WGML_OP_LOG_SOFTMAX, .nview = 2,
               .views = {{.kind = V_PERMUTE, .perm = {1, 0}}, {.kind = V_RESHAPE, .nd = 2, .sh = {2, 6}}}};
    set_leaf(&g, 0, 2, (int64_t[]){3, 4}, -2, 2);
    snprintf(g.name, sizeof g.name, "log_softmax(reshape(transpose([3,4]) -> [2,6]))");
    run_case(&g);

    /* a view on the second operand: y [2,3] broadcast to [4,2,3] */
    gcase h = {.kind = K_BINARY, .op = WGML_OP_DIV, .vop = 1, .nview = 1,
               .views = {{.kind = V_BCAST, .nd = 3, .sh = {4, 2, 3}}}};
    set_leaf(&h, 0, 3, (int64_t[]){4, 2, 3}, -2, 2);
    set_leaf(&h, 1, 2, (int64_t[]){2, 3}, -2, 2);
    h.absmin[1] = 0.5;
    snprintf(h.name, sizeof h.name, "x[4,2,3] / broadcast_to(y[2,3] -> [4,2,3])");
    run_case(&h);

    /* transposed views feeding matmul: a = x^T with x [K,M] = [5,3]; b [5,4] */
    gcase m1 = {.kind = K_MATMUL, .nview = 1, .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&m1, 0, 2, (int64_t[]){5, 3}, -1, 1);
    set_leaf(&m1, 1, 2, (int64_t[]){5, 4}, -1, 1);
    snprintf(m1.name, sizeof m1.name, "matmul(transpose(x[5,3]), y[5,4])");
    run_case(&m1);

    /* the same, square (shapes cannot catch a transposed gradient) */
    gcase m2 = m1;
    m2.sh[0][0] = m2.sh[0][1] = 4, m2.sh[1][0] = 4;
    snprintf(m2.name, sizeof m2.name, "matmul(transpose(x[4,4]), y[4,4])");
    run_case(&m2);

    /* b = transpose(y) with y [N,K] = [4,5], trans_b = 0 */
    gcase m3 = {.kind = K_MATMUL, .vop = 1, .nview = 1, .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&m3, 0, 2, (int64_t[]){3, 5}, -1, 1);
    set_leaf(&m3, 1, 2, (int64_t[]){4, 5}, -1, 1);
    snprintf(m3.name, sizeof m3.name, "matmul(x[3,5], transpose(y[4,5]))");
    run_case(&m3);

    /* transposed view with trans_a = 1 (two transposes cancel) */
    gcase m4 = {.kind = K_MATMUL, .md = {.trans_a = 1}, .nview = 1, .views = {{.kind = V_PERMUTE, .perm = {1, 0}}}};
    set_leaf(&m4, 0, 2, (int64_t[]){3, 5}, -1, 1);
    set_leaf(&m4, 1, 2, (int64_t[]){5, 4}, -1, 1);
    snprintf(m4.name, sizeof m4.name, "matmul(transpose(x[3,5]), y[5,4], trans_a)");
    run_case(&m4);
}

/* slices: the gradient lands on the sliced elements, zeros elsewhere */
static void slice_case(int nd, const int64_t *sh, int axis, int64_t start, int64_t stop, int64_t step, const char *tag)
{
    gcase c = {.kind = K_UNARY, .op = WGML_OP_TANH, .nview = 1,
               .views = {{.kind = V_SLICE, .axis = axis, .start = start, .stop = stop, .step = step}}};
    set_leaf(&c, 0, nd, sh, -2, 2);
    snprintf(c.name, sizeof c.name, "tanh(x[%lld:%lld:%lld] on axis %d)%s", (long long)start, (long long)stop,
             (long long)step, axis, tag);
    name_shapes(c.name, sizeof c.name, &c);
    run_case(&c);
}

static void test_slice_grads(void)
{
    const struct { shape s; int axis; int64_t start, stop, step; } cases[] = {
        {{1, {7}}, 0, 1, 6, 2},         {{1, {7}}, 0, 0, 7, 1},         {{1, {7}}, 0, 3, 7, 10},
        {{1, {7}}, 0, 6, 7, 1},         {{1, {1}}, 0, 0, 1, 1},         {{2, {3, 5}}, 0, 1, 3, 1},
        {{2, {3, 5}}, 1, 0, 5, 3},      {{2, {3, 5}}, -1, 4, 5, 1},     {{3, {2, 3, 4}}, 0, 1, 2, 1},
        {{3, {2, 3, 4}}, 1, 1, 2, 1},   {{3, {2, 3, 4}}, 2, 1, 4, 2},   {{4, {2, 1, 3, 5}}, 3, 2, 5, 2},
        {{4, {2, 1, 3, 5}}, 1, 0, 1, 1}, {{4, {2, 3, 2, 3}}, 1, 1, 3, 1}, {{2, {2, 300}}, 1, 7, 290, 5},
        {{2, {300, 2}}, 0, 150, 151, 1},
    };
    for (int k = 0; k < N_OF(cases); k++)
        slice_case(cases[k].s.nd, cases[k].s.sh, cases[k].axis, cases[k].start, cases[k].stop, cases[k].step, "");
    for (int k = 0; k < 8; k++) {
        shape r = random_shape();
        int axis = (int)(test_rand_u64() % (uint64_t)r.nd);
        int64_t n = r.sh[axis], start = (int64_t)(test_rand_u64() % (uint64_t)n);
        int64_t stop = start + 1 + (int64_t)(test_rand_u64() % (uint64_t)(n - start));
        slice_case(r.nd, r.sh, axis, start, stop, 1 + (int64_t)(test_rand_u64() % 3), " (random)");
    }

    /* a slice of a slice */
    gcase a = {.kind = K_UNARY, .op = WGML_OP_TANH, .nview = 2,
               .views = {{.kind = V_SLICE, .axis = 1, .start = 1, .stop = 8, .step = 2},
                         {.kind = V_SLICE, .axis = 1, .start = 1, .stop = 4, .step = 2}}};
    set_leaf(&a, 0, 2, (int64_t[]){3, 8}, -2, 2);
    snprintf(a.name, sizeof a.name, "tanh(x[3,8][:, 1:8:2][:, 1:4:2])");
    run_case(&a);

    /* a slice of a transposed view: the gradient goes on through the permute */
    gcase b = {.kind = K_UNARY, .op = WGML_OP_TANH, .nview = 2,
               .views = {{.kind = V_PERMUTE, .perm = {1, 0}}, {.kind = V_SLICE, .axis = 0, .start = 1, .stop = 5, .step = 2}}};
    set_leaf(&b, 0, 2, (int64_t[]){3, 5}, -2, 2);
    snprintf(b.name, sizeof b.name, "tanh(transpose(x[3,5])[1:5:2])");
    run_case(&b);

    /* a slice of a broadcast view (stride 0 along the sliced axis) */
    gcase d = {.kind = K_UNARY, .op = WGML_OP_TANH, .nview = 2,
               .views = {{.kind = V_BCAST, .nd = 2, .sh = {3, 4}}, {.kind = V_SLICE, .axis = 1, .start = 1, .stop = 4, .step = 2}}};
    set_leaf(&d, 0, 2, (int64_t[]){3, 1}, -2, 2);
    snprintf(d.name, sizeof d.name, "tanh(broadcast_to(x[3,1] -> [3,4])[:, 1:4:2])");
    run_case(&d);

    /* a reshape of a slice (copies it), then log_softmax */
    gcase e = {.kind = K_ROW, .op = WGML_OP_LOG_SOFTMAX, .nview = 2,
               .views = {{.kind = V_SLICE, .axis = 1, .start = 1, .stop = 5, .step = 1}, {.kind = V_RESHAPE, .nd = 2, .sh = {2, 8}}}};
    set_leaf(&e, 0, 2, (int64_t[]){4, 6}, -2, 2);
    snprintf(e.name, sizeof e.name, "log_softmax(reshape(x[4,6][:, 1:5] -> [2,8]))");
    run_case(&e);

    /* one leaf whole and sliced: x * x[1:2] (broadcast), both uses add up */
    gcase f = {.kind = K_BINARY, .op = WGML_OP_MUL, .same = 1, .vop = 1, .nview = 1,
               .views = {{.kind = V_SLICE, .axis = 0, .start = 1, .stop = 2, .step = 1}}};
    set_leaf(&f, 0, 2, (int64_t[]){3, 4}, -2, 2);
    snprintf(f.name, sizeof f.name, "x[3,4] * x[1:2]");
    run_case(&f);

    /* a sliced matmul operand, and a reduction of a slice */
    gcase m = {.kind = K_MATMUL, .nview = 1, .views = {{.kind = V_SLICE, .axis = 1, .start = 1, .stop = 6, .step = 2}}};
    set_leaf(&m, 0, 2, (int64_t[]){3, 6}, -1, 1);
    set_leaf(&m, 1, 2, (int64_t[]){3, 4}, -1, 1);
    snprintf(m.name, sizeof m.name, "matmul(x[3,6][:, 1:6:2], y[3,4])");
    run_case(&m);
    gcase r = {.kind = K_REDUCE, .op = WGML_OP_MAX, .axis = 0, .nview = 1, .views = {{.kind = V_SLICE, .axis = 1, .start = 0, .stop = 3, .step = 1}}};
    set_leaf(&r, 0, 2, (int64_t[]){5, 4}, -5, 5);
    snprintf(r.name, sizeof r.name, "max(x[5,4][:, 0:3], axis 0)");
    run_case(&r);
}

/* ---------------------------------------------------------------- matmul */

static void matmul_case(int nda, const int64_t *sa, int ndb, const int64_t *sb, int ta, int tb, float alpha,
                        int bias, int act, int same)
{
    gcase c = {.kind = K_MATMUL, .md = {.trans_a = ta, .trans_b = tb, .alpha = alpha, .activation = act}, .same = same};
    set_leaf(&c, 0, nda, sa, -1, 1);
    if (!same) set_leaf(&c, 1, ndb, sb, -1, 1);
    if (bias) {
        int64_t n = tb ? sb[ndb - 2] : sb[ndb - 1];
        set_leaf(&c, c.nin, 1, &n, -1, 1);
        c.has_bias = 1;
    }
    snprintf(c.name, sizeof c.name, "matmul%s(ta %d, tb %d, alpha %g, %s, act %s)", same ? "(x, x)" : "", ta, tb,
             alpha, bias ? "bias" : "no bias", act_names[act]);
    name_shapes(c.name, sizeof c.name, &c);
    run_case(&c);
}

/* one leaf as both operands (x x, x^T x, x x^T): both uses of the leaf add up (matmul's
   own gradients, every flag, activation and batching: test_op_table) */
static void test_matmul_shared_operand_grads(void)
{
    int64_t sq[2] = {4, 4}, rect[2] = {3, 5};
    matmul_case(2, sq, 2, sq, 0, 0, 1.0f, 0, WGML_ACT_NONE, 1);
    matmul_case(2, rect, 2, rect, 1, 0, 1.0f, 0, WGML_ACT_NONE, 1);
    matmul_case(2, rect, 2, rect, 0, 1, 0.5f, 1, WGML_ACT_SILU, 1);
}

/* ---------------------------------------------------------------- losses */

static void test_mse_grads(void)
{
    const shape pairs[][2] = {{{2, {3, 4}}, {2, {3, 4}}}, {{2, {3, 4}}, {1, {4}}}, {{1, {1}}, {1, {1}}},
                              {{3, {2, 3, 4}}, {3, {2, 3, 4}}}};
    for (int k = 0; k < N_OF(pairs); k++) {
        gcase c = {.kind = K_MSE};
        set_leaf(&c, 0, pairs[k][0].nd, pairs[k][0].sh, -2, 2);
        set_leaf(&c, 1, pairs[k][1].nd, pairs[k][1].sh, -2, 2);
        snprintf(c.name, sizeof c.name, "mse");
        name_shapes(c.name, sizeof c.name, &c);
        run_case(&c);
    }
}

/* the training path: cross_entropy(relu(x W1 + b1) W2 + b2), every parameter and x */
static void test_mlp_grads(void)
{
    const int64_t dims[][4] = {{4, 5, 6, 3}, {1, 3, 2, 4}, {7, 2, 9, 5}};
    for (int k = 0; k < N_OF(dims); k++) {
        int64_t B = dims[k][0], D = dims[k][1], Hd = dims[k][2], C = dims[k][3];
        gcase c = {.kind = K_MLP};
        set_leaf(&c, 0, 2, (int64_t[]){B, D}, -1, 1);
        set_leaf(&c, 1, 2, (int64_t[]){D, Hd}, -1, 1);
        set_leaf(&c, 2, 1, (int64_t[]){Hd}, -0.5, 0.5);
        set_leaf(&c, 3, 2, (int64_t[]){Hd, C}, -1, 1);
        set_leaf(&c, 4, 1, (int64_t[]){C}, -0.5, 0.5);
        c.nlabels = (int)B;
        for (int64_t r = 0; r < B; r++) c.labels[r] = (int32_t)(test_rand_u64() % (uint64_t)C);
        snprintf(c.name, sizeof c.name, "mlp cross_entropy(relu(x W1 + b1) W2 + b2)");
        name_shapes(c.name, sizeof c.name, &c);
        run_case(&c);
    }
}

/* ---------------------------------------------------------------- accumulation and errors */

/* grad(x) of sum(tanh(x) * w), after `times` backward passes over `graphs` loss graphs */
static wgml_tensor *tanh_loss(wgml_context *ctx, wgml_tensor *x, wgml_tensor *w)
{
    return wgml_sum_all(ctx, wgml_mul(ctx, wgml_tanh(ctx, x), w));
}

static void test_gradient_accumulation(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    int64_t sh[2] = {3, 5};
    float xv[15], wv[15], g1[15], g2[15], g3[15], g4[15];
    test_fill_uniform(xv, 15, -2, 2);
    test_fill_uniform(wv, 15, -1, 1);
    wgml_tensor *x1 = NULL, *x2 = NULL, *w = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 15, &x1));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 15, &x2));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, wv, 15, &w));
    CHECK_OK(ctx, wgml_requires_grad(x1, 1));
    CHECK_OK(ctx, wgml_requires_grad(x2, 1));
    CHECK(wgml_grad(x1) == NULL);

    /* one pass: the reference gradient (checked against the analytic one) */
    CHECK_OK(ctx, wgml_backward(tanh_loss(ctx, x1, w)));
    CHECK(wgml_grad(x1) != NULL);
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(x1), g1, 15));
    double want[15];
    for (int i = 0; i < 15; i++) want[i] = wv[i] * (1 - tanh(xv[i]) * tanh(xv[i]));
    CHECK(test_close("single pass", g1, want, 15, 1e-4, 1e-3));

    /* two passes over the same loss graph before anything is evaluated: 2x */
    wgml_tensor *L = tanh_loss(ctx, x2, w);
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(x2), g2, 15));
    for (int i = 0; i < 15; i++) want[i] = 2.0 * g1[i];
    CHECK(test_close("two backward calls on one loss", g2, want, 15, 1e-6, 1e-3));

    /* a third pass over a fresh graph, after the accumulated gradient was evaluated: 3x */
    CHECK_OK(ctx, wgml_backward(tanh_loss(ctx, x2, w)));
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(x2), g3, 15));
    for (int i = 0; i < 15; i++) want[i] = 3.0 * g1[i];
    CHECK(test_close("a third backward after a read", g3, want, 15, 1e-6, 1e-3));

    /* zero_grad starts over */
    wgml_zero_grad(x2);
    CHECK(wgml_grad(x2) == NULL);
    CHECK_OK(ctx, wgml_backward(tanh_loss(ctx, x2, w)));
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(x2), g4, 15));
    for (int i = 0; i < 15; i++) want[i] = g1[i];
    CHECK(test_close("after zero_grad", g4, want, 15, 1e-6, 1e-3));

    /* a one-element loss of shape [1,1] (keepdim) seeds the pass like a [1] one */
    int64_t sr[2] = {1, 15};
    wgml_tensor *x3 = NULL, *w3 = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sr, xv, 15, &x3));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sr, wv, 15, &w3));
    CHECK_OK(ctx, wgml_requires_grad(x3, 1));
    wgml_tensor *L11 = wgml_sum(ctx, wgml_mul(ctx, x3, w3), 1, 1);
    CHECK(wgml_tensor_ndim(L11) == 2 && wgml_tensor_numel(L11) == 1);
    CHECK_OK(ctx, wgml_backward(L11));
    if (wgml_grad(x3)) {
        CHECK_OK(ctx, wgml_tensor_read(wgml_grad(x3), g4, 15));
        for (int i = 0; i < 15; i++) want[i] = wv[i];
        CHECK(test_close("loss of shape [1,1]", g4, want, 15, 1e-6, 1e-3));
    } else {
        CHECK(wgml_grad(x3) != NULL);
    }
    wgml_scope_end(ctx);
}

static void test_backward_errors(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    int64_t sh[2] = {3, 4};
    float xv[12];
    test_fill_uniform(xv, 12, -2, 2);
    wgml_tensor *x = NULL, *c = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 12, &x));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 12, &c));
    CHECK_OK(ctx, wgml_requires_grad(x, 1));

    /* a loss of more than one element */
    CHECK_STATUS(ctx, wgml_backward(wgml_tanh(ctx, x)), WGML_ERROR_SHAPE);
    CHECK_STATUS(ctx, wgml_backward(wgml_sum(ctx, x, 0, 0)), WGML_ERROR_SHAPE);
    CHECK(wgml_grad(x) == NULL);

    /* no trainable tensor reaches the loss */
    wgml_status st = wgml_backward(wgml_sum_all(ctx, wgml_exp(ctx, c)));
    if (st == WGML_OK) {
        fprintf(stderr, "FAIL %s: backward with no trainable input gave OK\n", test_current);
        test_failures++;
    }
    CHECK(wgml_grad(c) == NULL);
    wgml_clear_error(ctx);

    /* only leaves can be trainable: a result computed from a trainable tensor is not one */
    CHECK_STATUS(ctx, wgml_requires_grad(wgml_exp(ctx, x), 1), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "computed from trainable tensors, not a leaf"));
    CHECK_STATUS(ctx, wgml_requires_grad(wgml_exp(ctx, x), 0), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_requires_grad(NULL, 1), WGML_ERROR_INVALID_ARGUMENT);
    wgml_clear_error(ctx);
    /* a pending result of untrainable tensors is one (an initialiser's, c * 0.02): evaluated
       then, it takes its gradient as any leaf (2 w of sum(w^2)) */
    wgml_tensor *w = wgml_binary_scalar(ctx, WGML_MUL, c, 0.02f);
    CHECK_OK(ctx, wgml_requires_grad(w, 1));
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, w, w))));
    float gw[12];
    CHECK_OK(ctx, wgml_tensor_read(wgml_grad(w), gw, 12));
    for (int i = 0; i < 12; i++) CHECK(fabs(gw[i] - 2.0 * (double)(xv[i] * 0.02f)) <= 1e-6 * (1 + fabs(xv[i])));

    /* a loss in the error state reports its error */
    int64_t bad[1] = {5};
    wgml_tensor *y = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, bad, xv, 5, &y));
    CHECK_STATUS(ctx, wgml_backward(wgml_sum_all(ctx, wgml_add(ctx, x, y))), WGML_ERROR_SHAPE);
    wgml_clear_error(ctx);
    wgml_scope_end(ctx);
}

/* An op without a rule must fail with UNSUPPORTED rather than give a wrong (e.g. zero)
   gradient, and its input gets no gradient. Every public op has a rule; the ops the backward
   pass builds (relu_grad here) do not. Another trainable leaf y that reaches the loss only
   through ops with rules may get its gradient before the pass stops; if so it must be the
   right one (2y here). */
static void test_unsupported_ops(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t sh[2] = {3, 4};
    float xv[12], yv[12], gy[12];
    test_fill_uniform(xv, 12, -2, 2);
    test_fill_uniform(yv, 12, -2, 2);
    double want_y[12];
    for (int i = 0; i < 12; i++) want_y[i] = 2.0 * yv[i];
    for (int k = 0; k < 2; k++) {
        wgml_scope_begin(ctx);
        wgml_tensor *x = NULL, *y = NULL, *c = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 12, &x));
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, yv, 12, &y));
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, yv, 12, &c));
        CHECK_OK(ctx, wgml_requires_grad(x, 1));
        CHECK_OK(ctx, wgml_requires_grad(y, 1));
        const char *what = k ? "relu_grad(c, x)" : "relu_grad(x, c)";
        wgml_tensor *part = wgml_sum_all(ctx, k ? wgml_binary_node(ctx, WGML_OP_RELU_GRAD, c, wgml_exp(ctx, x))
                                                : wgml_binary_node(ctx, WGML_OP_RELU_GRAD, x, c));
        wgml_tensor *L = wgml_add(ctx, part, wgml_sum_all(ctx, wgml_mul(ctx, y, y)));
        wgml_status st = wgml_backward(L);
        if (st != WGML_ERROR_UNSUPPORTED) {
            fprintf(stderr, "FAIL %s: backward through %s gave %s, want WGML_ERROR_UNSUPPORTED: %s\n", test_current,
                    what, wgml_status_name(st), wgml_error_message(ctx));
            test_failures++;
        }
        if (wgml_grad(x) != NULL) {
            fprintf(stderr, "FAIL %s: backward through %s failed but set a gradient for its input\n", test_current, what);
            test_failures++;
        }
        wgml_clear_error(ctx);
        if (wgml_grad(y) != NULL) {
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(y), gy, 12));
            if (!test_close(what, gy, want_y, 12, 1e-6, 1e-3)) {
                fprintf(stderr, "FAIL %s: backward through %s left a wrong gradient in another input\n", test_current, what);
                test_failures++;
            }
        }
        wgml_clear_error(ctx);
        wgml_scope_end(ctx);
    }
}

/* L = sum(x * detach(x) * w): dL/dx = detach(x) * w, x * w (1x, not 2x); detach's value is x's */
static void test_detach_stops_the_gradient(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t sizes[3] = {1, 7, 1023};
    for (int si = 0; si < 3; si++) {
        int64_t n = sizes[si];
        float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w), *got = malloc((size_t)n * sizeof *got);
        test_fill_uniform(x, (size_t)n, -2, 2);
        test_fill_uniform(w, (size_t)n, 0.5, 1.5);
        wgml_scope_begin(ctx);
        wgml_tensor *xt = test_tensor(ctx, 1, &n, x), *wt = test_tensor(ctx, 1, &n, w);
        CHECK_OK(ctx, wgml_requires_grad(xt, 1));
        wgml_tensor *d = wgml_detach(ctx, xt);
        CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, wgml_mul(ctx, xt, d), wt))));
        CHECK(wgml_grad(xt) != NULL);
        if (wgml_grad(xt)) {
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(xt), got, (size_t)n));
            double worst = 0;
            for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - (double)x[i] * w[i]) / (1e-6 + fabs((double)x[i] * w[i])));
            CHECK(worst < 1e-5);
        }
        /* the detached value alone: no trainable tensor reaches it */
        CHECK(wgml_backward(wgml_sum_all(ctx, wgml_detach(ctx, xt))) == WGML_ERROR_INVALID_ARGUMENT);
        wgml_clear_error(ctx);
        wgml_scope_end(ctx);
        free(x), free(w), free(got);
    }
}

/* Reading before backward (printing the loss, looking at a hidden layer) must not cut the
   graph: L = sum(h * h), h = tanh(x W + b), x [5,7], W [7,3], b [3]. The loss read first, then
   backward: W's and b's gradients as the CPU's in double; h read first and L built on it: the
   same; h made trainable after its read: a leaf, so the gradient stops there (2h); h written
   from the host after its read: constants, so no trainable tensor reaches the loss. */
static void read_before_backward_case(int read_what)
{
    static const char *const what[] = {"loss read", "hidden read", "hidden made a leaf", "hidden written"};
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { B = 5, K = 7, N = 3 };
    int64_t sx[2] = {B, K}, sw[2] = {K, N}, sb[1] = {N};
    float xv[B * K], wv[K * N], bv[N], gw[K * N], gb[N], gh[B * N], lossv;
    test_fill_uniform(xv, B * K, -1, 1);
    test_fill_uniform(wv, K * N, -0.8, 0.8);
    test_fill_uniform(bv, N, -0.5, 0.5);
    /* the reference in double */
    double h[B * N], dpre[B * N], want_w[K * N] = {0}, want_b[N] = {0}, want_h[B * N], want_loss = 0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < N; j++) {
            double acc = bv[j];
            for (int k = 0; k < K; k++) acc += (double)xv[i * K + k] * wv[k * N + j];
            h[i * N + j] = tanh(acc);
            want_loss += h[i * N + j] * h[i * N + j];
            want_h[i * N + j] = 2 * h[i * N + j];
            dpre[i * N + j] = 2 * h[i * N + j] * (1 - h[i * N + j] * h[i * N + j]);
            want_b[j] += dpre[i * N + j];
        }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            for (int i = 0; i < B; i++) want_w[k * N + j] += (double)xv[i * K + k] * dpre[i * N + j];

    wgml_scope_begin(ctx);
    wgml_tensor *x = test_tensor(ctx, 2, sx, xv), *w = test_tensor(ctx, 2, sw, wv), *b = test_tensor(ctx, 1, sb, bv);
    CHECK_OK(ctx, wgml_requires_grad(w, 1));
    CHECK_OK(ctx, wgml_requires_grad(b, 1));
    wgml_tensor *ht = wgml_tanh(ctx, wgml_add(ctx, wgml_matmul(ctx, x, w), b));
    float hv[B * N];
    if (read_what > 0) CHECK_OK(ctx, wgml_tensor_read(ht, hv, B * N));
    if (read_what == 2) CHECK_OK(ctx, wgml_requires_grad(ht, 1));
    if (read_what == 3) { /* written over from the host: constants, the graph behind them gone */
        CHECK_OK(ctx, wgml_tensor_write(ht, hv, B * N));
        wgml_tensor *cut = wgml_sum_all(ctx, wgml_mul(ctx, ht, ht));
        CHECK_STATUS(ctx, wgml_backward(cut), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(wgml_grad(w) == NULL && wgml_grad(b) == NULL);
        wgml_clear_error(ctx);
        wgml_scope_end(ctx);
        return;
    }
    wgml_tensor *loss = wgml_sum_all(ctx, wgml_mul(ctx, ht, ht));
    CHECK_OK(ctx, wgml_tensor_read(loss, &lossv, 1));
    double got_loss = lossv;
    if (fabs(got_loss - want_loss) > 1e-5 * (1 + fabs(want_loss))) FAILF("%s: loss %.9g, want %.9g", what[read_what], got_loss, want_loss);
    CHECK_OK(ctx, wgml_backward(loss));
    if (read_what == 2) {
        CHECK(wgml_grad(w) == NULL && wgml_grad(b) == NULL);
        CHECK(wgml_grad(ht) != NULL);
        if (wgml_grad(ht)) {
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(ht), gh, B * N));
            CHECK(test_close(what[read_what], gh, want_h, B * N, 1e-5, 1e-3));
        }
    } else {
        CHECK(wgml_grad(w) != NULL && wgml_grad(b) != NULL);
        if (wgml_grad(w) && wgml_grad(b)) {
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(w), gw, K * N));
            CHECK_OK(ctx, wgml_tensor_read(wgml_grad(b), gb, N));
            CHECK(test_close(what[read_what], gw, want_w, K * N, 1e-4, 1e-3));
            CHECK(test_close(what[read_what], gb, want_b, N, 1e-4, 1e-3));
        }
    }
    /* the value read stays what it was */
    float again;
    CHECK_OK(ctx, wgml_tensor_read(loss, &again, 1));
    CHECK(again == lossv);
    wgml_scope_end(ctx);
}

static void test_read_before_backward(void)
{
    for (int r = 0; r < 4; r++) read_before_backward_case(r);
}

/* argmax passes no gradient (its indices are constant almost everywhere), as in PyTorch: the
   other factor of argmax(x) * y gets its gradient, x gets none, and a loss reached only
   through argmax has no trainable input */
static void test_argmax_passes_no_gradient(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    int64_t sh[2] = {3, 4}, n3 = 3;
    float xv[12], yv[3], got[3];
    test_fill_uniform(xv, 12, -2, 2);
    test_fill_uniform(yv, 3, -2, 2);
    wgml_tensor *x = NULL, *y = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 2, sh, xv, 12, &x));
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n3, yv, 3, &y));
    CHECK_OK(ctx, wgml_requires_grad(x, 1));
    CHECK_OK(ctx, wgml_requires_grad(y, 1));
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, wgml_cast(ctx, wgml_argmax(ctx, x, 1, 0), WGML_F32), y))));
    CHECK(wgml_grad(x) == NULL);
    CHECK(wgml_grad(y) != NULL);
    if (wgml_grad(y)) {
        double want[3], *xd = test_to_double(xv, 12);
        wgml_ref_argmax(2, sh, xd, 1, want);
        free(xd);
        CHECK_OK(ctx, wgml_tensor_read(wgml_grad(y), got, 3));
        CHECK(test_close("d/dy sum(argmax(x) * y)", got, want, 3, 1e-6, 1e-6));
    }
    CHECK_STATUS(ctx, wgml_backward(wgml_sum_all(ctx, wgml_argmax(ctx, x, 0, 0))), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_grad(x) == NULL);
    wgml_clear_error(ctx);
    wgml_scope_end(ctx);
}

int main(void)
{
    TEST_RUN(test_binary_broadcast_grads);
    TEST_RUN(test_shared_input_grads);
    TEST_RUN(test_max_ties);
    TEST_RUN(test_norm_of_a_view_grads);
    TEST_RUN(test_view_grads);
    TEST_RUN(test_slice_grads);
    TEST_RUN(test_matmul_shared_operand_grads);
    TEST_RUN(test_mse_grads);
    TEST_RUN(test_mlp_grads);
    TEST_RUN(test_gradient_accumulation);
    TEST_RUN(test_backward_errors);
    TEST_RUN(test_unsupported_ops);
    TEST_RUN(test_argmax_passes_no_gradient);
    TEST_RUN(test_detach_stops_the_gradient);
    TEST_RUN(test_read_before_backward);
    fprintf(stderr, "autograd: %d gradient case(s), %d failed; worst gradient error %.3g (%s)\n", n_cases,
            n_failed_cases, worst_err, worst_case);
    return test_summary();
}
