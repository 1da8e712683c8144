/*
 * Batched matmul over up to two leading dims with NumPy broadcasting (issue 14), against a
 * double-precision reference built here on wgml_ref_matmul (tests/ref/ref.h), one matrix of the
 * batch at a time:
 *   - the attention forms ([B,H,T,D] x [B,H,D,T], Q K^T by trans_b, [B,H,T,T] x [B,H,T,D]),
 *     the linear ones ([B,T,C] x [C,N], x [N,C] by trans_b), broadcasting on either side or
 *     both ([1,H,..] x [B,H,..], [B,1,..] x [1,H,..], a 2-D or 3-D operand against a 4-D one);
 *   - on awkward sizes (M, N, K of 1, 7, 33, 65) with every transpose;
 *   - operands through views: transposed and permuted (a head split), broadcast, sliced; each
 *     read through its strides (the matmul's input is the view, not a COPY, and evaluating it
 *     is one dispatch), and the copy where no stride can express the operand;
 *   - the one-GEMM flattening of [B,T,C] x [C,N] (the launch covers B*T rows in one matrix);
 *   - errors (K, leading dims, 1-D operands, limits);
 *   - gradients of every operand against central differences in double, for the 4-D and
 *     broadcast forms (test_autograd.c's method: L = sum(matmul(...) * W)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/tensor.h"
#include "ref/ref.h"
#include "engine/executor.h"
#include "ops/matmul/matmul.h"
#include "ops/table.h"
#include "harness.h"

#define MM_TOL 1e-5
#define FD_H 1e-3
#define GRAD_TOL 1e-3

/* ---------------------------------------------------------------- operands and views */

enum { V_NONE, V_PERMUTE, V_BCAST, V_SLICE };

/* An operand: a stored tensor of shape sh (row-major, uploaded), passed as is or through one
   view, made as engine/build.c makes it */
typedef struct operand {
    int nd;
    int64_t sh[4];
    int view;
    int perm[4];                         /* V_PERMUTE: dim i is the stored dim perm[i] */
    int bnd;                             /* V_BCAST: broadcast_to [bsh] */
    int64_t bsh[4];
    int axis;                            /* V_SLICE: [start, stop) by step along axis */
    int64_t start, stop, step;
} operand;

/* the operand as the view makes it: shape, strides into the stored tensor, offset */
typedef struct layout {
    int nd;
    int64_t sh[4], st[4], off;
} layout;

static layout layout_of(const operand *o)
{
    layout l = {.nd = o->nd};
    int64_t s = 1;
    for (int d = o->nd - 1; d >= 0; d--) l.sh[d] = o->sh[d], l.st[d] = s, s *= o->sh[d];
    layout v = l;
    if (o->view == V_PERMUTE) {
        for (int d = 0; d < l.nd; d++) v.sh[d] = l.sh[o->perm[d]], v.st[d] = l.st[o->perm[d]];
    } else if (o->view == V_BCAST) {
        v.nd = o->bnd;
        for (int d = 0; d < o->bnd; d++) {
            int sd = d - (o->bnd - l.nd);
            v.sh[d] = o->bsh[d];
            v.st[d] = sd < 0 || l.sh[sd] == 1 ? 0 : l.st[sd];
        }
    } else if (o->view == V_SLICE) {
        v.sh[o->axis] = (o->stop - o->start - 1) / o->step + 1;
        v.st[o->axis] = l.st[o->axis] * o->step;
        v.off = o->start * l.st[o->axis];
    }
    return v;
}

/* the operand's values, row-major in its own shape, gathered from the stored x */
static void gather(const layout *l, const double *x, double *out)
{
    int64_t sh[4] = {1, 1, 1, 1}, st[4] = {0, 0, 0, 0}, k = 0;
    for (int d = 0; d < l->nd; d++) sh[4 - l->nd + d] = l->sh[d], st[4 - l->nd + d] = l->st[d];
    for (int64_t i0 = 0; i0 < sh[0]; i0++)
        for (int64_t i1 = 0; i1 < sh[1]; i1++)
            for (int64_t i2 = 0; i2 < sh[2]; i2++)
                for (int64_t i3 = 0; i3 < sh[3]; i3++)
                    out[k++] = x[l->off + i0 * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3]];
}

static wgml_tensor *gpu_operand(wgml_context *ctx, const operand *o, wgml_tensor *x)
{
    switch (o->view) {
    case V_PERMUTE: return wgml_permute(ctx, x, o->perm);
    case V_BCAST: return wgml_broadcast_to(ctx, x, o->bnd, o->bsh);
    case V_SLICE: return wgml_slice(ctx, x, o->axis, o->start, o->stop, o->step);
    default: return x;
    }
}

/* C = act(alpha op(A) op(B) + bias) over the leading dims broadcast NumPy-style (missing
   dims count as 1), A and B row-major in their shapes (pa, pb): returns C's rank and its shape
   in sc; 0 if they do not multiply */
static int ref_bmm(const layout *pa, const double *A, int ta, const layout *pb, const double *B, int tb, double alpha,
                   const double *bias, int act, int64_t *sc, double *C)
{
    int na = pa->nd, nb = pb->nd;
    int64_t M = ta ? pa->sh[na - 1] : pa->sh[na - 2], K = ta ? pa->sh[na - 2] : pa->sh[na - 1];
    int64_t Kb = tb ? pb->sh[nb - 1] : pb->sh[nb - 2], N = tb ? pb->sh[nb - 2] : pb->sh[nb - 1];
    if (K != Kb) return 0;
    int64_t la[2] = {1, 1}, lb[2] = {1, 1}, lc[2];
    for (int j = 0; j < na - 2; j++) la[2 - (na - 2) + j] = pa->sh[j];
    for (int j = 0; j < nb - 2; j++) lb[2 - (nb - 2) + j] = pb->sh[j];
    for (int j = 0; j < 2; j++) {
        if (la[j] != lb[j] && la[j] != 1 && lb[j] != 1) return 0;
        lc[j] = la[j] > lb[j] ? la[j] : lb[j];
    }
    for (int64_t i0 = 0; i0 < lc[0]; i0++)
        for (int64_t i1 = 0; i1 < lc[1]; i1++) {
            int64_t ia = (la[0] > 1 ? i0 : 0) * la[1] + (la[1] > 1 ? i1 : 0);
            int64_t ib = (lb[0] > 1 ? i0 : 0) * lb[1] + (lb[1] > 1 ? i1 : 0);
            wgml_ref_matmul(1, M, N, K, A + ia * M * K, 1, ta, B + ib * K * N, 1, tb, alpha, bias, act,
                            C + (i0 * lc[1] + i1) * M * N);
        }
    int nl = (na > nb ? na : nb) - 2;
    for (int j = 0; j < nl; j++) sc[j] = lc[2 - nl + j];
    sc[nl] = M;
    sc[nl + 1] = N;
    return nl + 2;
}

/* "[2, 3, 7, 5]", or "[2, 7, 3, 5] permuted (0 2 1 3)", ... */
static void operand_str(char *out, size_t n, const operand *o)
{
    char s[64];
    test_shape_str(s, sizeof s, o->nd, o->sh);
    if (o->view == V_PERMUTE)
        snprintf(out, n, "%s permuted (%d %d %d %d)", s, o->perm[0], o->perm[1], o->nd > 2 ? o->perm[2] : -1,
                 o->nd > 3 ? o->perm[3] : -1);
    else if (o->view == V_BCAST) {
        char t[64];
        test_shape_str(t, sizeof t, o->bnd, o->bsh);
        snprintf(out, n, "%s broadcast to %s", s, t);
    } else if (o->view == V_SLICE)
        snprintf(out, n, "%s sliced [%lld:%lld:%lld] on %d", s, (long long)o->start, (long long)o->stop,
                 (long long)o->step, o->axis);
    else
        snprintf(out, n, "%s", s);
}

static wgml_stats stats(wgml_context *ctx)
{
    wgml_stats s;
    memset(&s, 0, sizeof s);
    CHECK_OK(ctx, wgml_stats_get(ctx, &s));
    return s;
}

/* ---------------------------------------------------------------- forward cases */

typedef struct bcase {
    operand a, b;
    int ta, tb;
    float alpha; /* 0: the default (1) */
    int bias;
    wgml_activation act;
    int copy_a;  /* A's strides cannot be read: a COPY of it is expected (two dispatches) */
} bcase;

/* a contiguous operand of nd dims */
static operand op_of(int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    operand o = {.nd = nd};
    int64_t all[4] = {d0, d1, d2, d3};
    memcpy(o.sh, all, sizeof all);
    return o;
}

static operand permuted(operand o, int p0, int p1, int p2, int p3)
{
    o.view = V_PERMUTE;
    int p[4] = {p0, p1, p2, p3};
    memcpy(o.perm, p, sizeof p);
    return o;
}

/* the last two dims swapped (wgml_transpose(x, -1, -2)) */
static operand transposed(operand o)
{
    int p[4] = {0, 1, 2, 3};
    p[o.nd - 2] = o.nd - 1;
    p[o.nd - 1] = o.nd - 2;
    return permuted(o, p[0], p[1], p[2], p[3]);
}

/* Runs one case against the reference; returns 1 if it matched. */
static int run_case(wgml_context *ctx, const bcase *c)
{
    layout la = layout_of(&c->a), lb = layout_of(&c->b);
    int64_t na = test_numel(c->a.nd, c->a.sh), nb = test_numel(c->b.nd, c->b.sh);
    int64_t nla = test_numel(la.nd, la.sh), nlb = test_numel(lb.nd, lb.sh);
    int64_t N = c->tb ? lb.sh[lb.nd - 2] : lb.sh[lb.nd - 1], K = c->ta ? la.sh[la.nd - 2] : la.sh[la.nd - 1];
    float *A = malloc((size_t)na * 4), *B = malloc((size_t)nb * 4), *bias = malloc((size_t)N * 4);
    test_fill_uniform(A, (size_t)na, -1, 1);
    test_fill_uniform(B, (size_t)nb, -1, 1);
    test_fill_uniform(bias, (size_t)N, -1, 1);
    double *Ad = test_to_double(A, (size_t)na), *Bd = test_to_double(B, (size_t)nb), *bd = test_to_double(bias, (size_t)N);
    double *Al = malloc((size_t)nla * sizeof *Al), *Bl = malloc((size_t)nlb * sizeof *Bl);
    gather(&la, Ad, Al);
    gather(&lb, Bd, Bl);
    double alpha = c->alpha == 0.0f ? 1.0 : c->alpha;
    int64_t sc[4];
    /* the output's size, as large as the broadcast of both operands' batches */
    int64_t nc_max = (nla / K) * (nlb / K);
    double *want = malloc((size_t)nc_max * sizeof *want);
    int ndc = ref_bmm(&la, Al, c->ta, &lb, Bl, c->tb, alpha, c->bias ? bd : NULL, (int)c->act, sc, want);
    int64_t nc = ndc ? test_numel(ndc, sc) : 0;
    float *got = malloc((size_t)(nc ? nc : 1) * 4);

    char sa[160], sb[160], what[400];
    operand_str(sa, sizeof sa, &c->a);
    operand_str(sb, sizeof sb, &c->b);
    snprintf(what, sizeof what, "%s%s x %s%s alpha %g bias %d act %d", sa, c->ta ? "^T" : "", sb, c->tb ? "^T" : "",
             alpha, c->bias, (int)c->act);
    int ok = 1;
    if (!ndc) {
        fprintf(stderr, "  %s: the reference rejects it (test bug)\n", what);
        ok = 0;
        goto out;
    }
    wgml_scope_begin(ctx);
    wgml_tensor *xa = test_tensor(ctx, c->a.nd, c->a.sh, A), *xb = test_tensor(ctx, c->b.nd, c->b.sh, B);
    wgml_tensor *xbias = test_tensor(ctx, 1, &N, bias);
    wgml_tensor *pa = gpu_operand(ctx, &c->a, xa), *pb = gpu_operand(ctx, &c->b, xb);
    wgml_matmul_desc d = {.trans_a = c->ta, .trans_b = c->tb, .alpha = c->alpha, .bias = c->bias ? xbias : NULL,
                          .activation = c->act};
    wgml_tensor *r = wgml_matmul_ex(ctx, pa, pb, &d);
    if (wgml_tensor_status(r) != WGML_OK) {
        fprintf(stderr, "  %s: %s: %s\n", what, wgml_status_name(wgml_tensor_status(r)), wgml_error_message(ctx));
        ok = 0;
        goto done;
    }
    int64_t shr[4] = {0};
    for (int i = 0; i < wgml_tensor_ndim(r) && i < 4; i++) shr[i] = wgml_tensor_dim(r, i);
    if (wgml_tensor_ndim(r) != ndc || memcmp(shr, sc, (size_t)ndc * sizeof *sc)) {
        char s1[64], s2[64];
        test_shape_str(s1, sizeof s1, wgml_tensor_ndim(r), shr);
        test_shape_str(s2, sizeof s2, ndc, sc);
        fprintf(stderr, "  %s: output shape %s, want %s\n", what, s1, s2);
        ok = 0;
        goto done;
    }
    /* read through strides: the matmul's inputs are the operands themselves (views included),
       a COPY only where the case expects one */
    int copied_a = r->src[0]->op == WGML_OP_COPY, copied_b = r->src[1]->op == WGML_OP_COPY;
    if (copied_a != c->copy_a || copied_b) {
        fprintf(stderr, "  %s: copies of A %d, of B %d; want %d and 0\n", what, copied_a, copied_b, c->copy_a);
        ok = 0;
    }
    wgml_stats s0 = stats(ctx);
    wgml_status st = wgml_tensor_read(r, got, (size_t)nc);
    wgml_stats s1 = stats(ctx);
    if (st != WGML_OK) {
        fprintf(stderr, "  %s: read gave %s: %s\n", what, wgml_status_name(st), wgml_error_message(ctx));
        ok = 0;
        goto done;
    }
    if (s1.dispatches - s0.dispatches != 1u + (unsigned)c->copy_a) {
        fprintf(stderr, "  %s: %llu dispatches, want %d\n", what, (unsigned long long)(s1.dispatches - s0.dispatches),
                1 + c->copy_a);
        ok = 0;
    }
    double floor = sqrt((double)K / 9.0) * fmax(1, fabs(alpha));
    if (!test_close(what, got, want, (size_t)nc, MM_TOL, floor)) ok = 0;
done:
    wgml_scope_end(ctx);
out:
    free(A), free(B), free(bias), free(Ad), free(Bd), free(bd), free(Al), free(Bl), free(want), free(got);
    return ok;
}

static void run_cases(const bcase *cs, int n)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int failed = 0;
    for (int i = 0; i < n; i++) failed += !run_case(ctx, &cs[i]);
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, n);
    CHECK(failed == 0);
}


/* ---------------------------------------------------------------- the forms */

/* B = 2, H = 3, T = 7, D = 5: scores, Q K^T, the weighted values, broadcast batches, and the
   decode step (T = 1) */
static void attention_forms(void)
{
    enum { B = 2, H = 3, T = 7, D = 5 };
    const bcase cs[] = {
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, D, T)},
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, T, D), .tb = 1, .alpha = 0.4472136f}, /* Q K^T / sqrt(D) */
        {.a = op_of(4, B, H, T, T), .b = op_of(4, B, H, T, D)},
        {.a = op_of(4, 1, H, T, D), .b = op_of(4, B, H, D, T)},
        {.a = op_of(4, B, H, T, D), .b = op_of(4, 1, H, D, T)},
        {.a = op_of(4, B, 1, T, D), .b = op_of(4, 1, H, D, T)},
        {.a = op_of(4, 1, H, T, D), .b = op_of(4, B, 1, T, D), .tb = 1},
        {.a = op_of(4, B, H, D, T), .b = op_of(4, B, H, D, T), .ta = 1},                 /* A^T B */
        {.a = op_of(4, B, H, D, T), .b = op_of(4, B, H, T, D), .ta = 1, .tb = 1},
        {.a = op_of(4, B, H, 1, D), .b = op_of(4, B, H, D, T)},                          /* decode: T = 1 */
        {.a = op_of(4, B, H, 1, D), .b = op_of(4, B, H, T, D), .tb = 1},
        {.a = op_of(4, B, H, 1, T), .b = op_of(4, B, H, T, D)},
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, D, 1)},                          /* N = 1 */
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, 1, D), .tb = 1},
        /* the epilogue on a 4-D output */
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, D, T), .alpha = 0.5f, .bias = 1, .act = WGML_ACT_GELU},
        {.a = op_of(4, B, 1, T, D), .b = op_of(4, 1, H, D, 6), .bias = 1, .act = WGML_ACT_SILU},
        {.a = op_of(4, B, H, 1, D), .b = op_of(4, B, H, D, 9), .bias = 1, .act = WGML_ACT_RELU},
    };
    run_cases(cs, N_OF(cs));
}

/* [B,T,C] x [C,N] and x [N,C]^T (one GEMM over B*T rows), and the other mixes of ranks */
static void linear_forms(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t Ts[] = {1, 7, 33}, Cs[] = {1, 7, 33, 65}, Ns[] = {1, 7, 65};
    int failed = 0, ran = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 4; ci++)
            for (int ni = 0; ni < 3; ni++) {
                int64_t T = Ts[ti], C = Cs[ci], N = Ns[ni], Bt = 2 + (ti + ci + ni) % 2;
                bcase c = {.a = op_of(3, Bt, T, C, 0), .b = op_of(2, C, N, 0, 0)};
                failed += !run_case(ctx, &c), ran++;
                c.b = op_of(2, N, C, 0, 0), c.tb = 1;
                c.bias = (ci + ni) % 2, c.act = c.bias ? WGML_ACT_GELU : WGML_ACT_NONE;
                failed += !run_case(ctx, &c), ran++;
            }
    enum { B = 2, H = 3, T = 5, C = 7, N = 6 };
    const bcase cs[] = {
        {.a = op_of(4, B, H, T, C), .b = op_of(2, C, N, 0, 0)},
        {.a = op_of(4, B, H, T, C), .b = op_of(2, N, C, 0, 0), .tb = 1, .bias = 1},
        {.a = op_of(3, B, T, C, 0), .b = op_of(4, 1, 1, C, N)},     /* B with leading ones */
        {.a = op_of(4, B, H, C, T), .b = op_of(2, C, N, 0, 0), .ta = 1},
        {.a = op_of(2, T, C, 0, 0), .b = op_of(4, B, H, C, N)},     /* A shared */
        {.a = op_of(2, C, T, 0, 0), .b = op_of(4, B, H, N, C), .ta = 1, .tb = 1},
        {.a = op_of(3, H, T, C, 0), .b = op_of(4, B, H, C, N)},     /* 3-D x 4-D */
        {.a = op_of(4, B, H, T, C), .b = op_of(3, H, C, N, 0)},     /* 4-D x 3-D */
        {.a = op_of(4, B, 1, T, C), .b = op_of(3, H, C, N, 0)},
        {.a = op_of(3, 1, T, C, 0), .b = op_of(4, B, H, C, N)},
    };
    for (int i = 0; i < N_OF(cs); i++) failed += !run_case(ctx, &cs[i]), ran++;
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0);
}

/* M, N, K of 1, 7, 33 and 65 with every transpose, over [2,3] batches broadcast five ways */
static void awkward_sizes(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t S[] = {1, 7, 33, 65};
    /* the leading dims of A and B: rank (0: none) and sizes */
    const int64_t lead[5][2][3] = {
        {{2, 2, 3}, {2, 2, 3}}, {{2, 1, 3}, {2, 2, 3}}, {{2, 2, 1}, {2, 1, 3}}, {{2, 2, 3}, {1, 3, 0}}, {{0}, {2, 2, 3}},
    };
    int failed = 0, ran = 0;
    for (int mi = 0; mi < 4; mi++)
        for (int ki = 0; ki < 4; ki++)
            for (int ni = 0; ni < 4; ni++) {
                if ((mi + ki + ni) % 2) continue; /* half the sizes, all of each */
                for (int t = 0; t < 4; t++) {
                    int64_t M = S[mi], K = S[ki], N = S[ni];
                    int ta = t & 1, tb = t >> 1, l = (mi + 2 * ki + 3 * ni + t) % 5;
                    bcase c = {.ta = ta, .tb = tb};
                    int64_t am[2] = {ta ? K : M, ta ? M : K}, bm[2] = {tb ? N : K, tb ? K : N};
                    operand *o[2] = {&c.a, &c.b};
                    const int64_t *mat[2] = {am, bm};
                    for (int s = 0; s < 2; s++) {
                        int nl = (int)lead[l][s][0];
                        o[s]->nd = nl + 2;
                        for (int j = 0; j < nl; j++) o[s]->sh[j] = lead[l][s][1 + j];
                        o[s]->sh[nl] = mat[s][0];
                        o[s]->sh[nl + 1] = mat[s][1];
                    }
                    failed += !run_case(ctx, &c), ran++;
                }
            }
    if (failed) fprintf(stderr, "  %d of %d cases failed\n", failed, ran);
    CHECK(failed == 0);
}

/* Operands through views, each read through its strides: K^T by wgml_transpose, the head
   split [B,T,H,D] -> [B,H,T,D] by wgml_permute (and K straight to [B,H,D,T]), a broadcast
   matrix, sliced leading and row dims; and the copy where neither matrix dim has unit
   stride. */
static void views_through_strides(void)
{
    enum { B = 2, H = 3, T = 7, D = 5 };
    operand bthd = op_of(4, B, T, H, D);
    const bcase cs[] = {
        {.a = op_of(4, B, H, T, D), .b = transposed(op_of(4, B, H, T, D))},            /* Q (K^T view) */
        {.a = transposed(op_of(4, B, H, D, T)), .b = op_of(4, B, H, D, T)},
        {.a = transposed(op_of(4, B, H, D, T)), .b = transposed(op_of(4, B, H, T, D)), .ta = 1, .tb = 1},
        {.a = permuted(bthd, 0, 2, 1, 3), .b = permuted(bthd, 0, 2, 1, 3), .tb = 1},    /* head-split Q K^T */
        {.a = permuted(bthd, 0, 2, 1, 3), .b = permuted(bthd, 0, 2, 3, 1)},             /* K to [B,H,D,T] */
        {.a = op_of(4, B, H, T, T), .b = permuted(bthd, 0, 2, 1, 3), .alpha = 0.5f},     /* P V, V split */
        {.a = permuted(op_of(4, B, 1, T, T), 0, 1, 3, 2), .b = permuted(bthd, 0, 2, 1, 3)},
        {.a = permuted(op_of(4, H, B, T, D), 1, 0, 2, 3), .b = op_of(4, B, H, D, T)},   /* leading dims swapped */
        {.a = permuted(bthd, 0, 2, 1, 3), .b = op_of(2, D, 4, 0, 0), .bias = 1},         /* split heads x W */
        /* a matrix broadcast over the batch (strides 0) */
        {.a = {.nd = 2, .sh = {T, D}, .view = V_BCAST, .bnd = 4, .bsh = {B, H, T, D}}, .b = op_of(4, B, H, D, T)},
        {.a = op_of(4, B, H, T, D), .b = {.nd = 3, .sh = {1, D, T}, .view = V_BCAST, .bnd = 4, .bsh = {B, H, D, T}}},
        /* every other matrix of a leading dim; every other row */
        {.a = {.nd = 4, .sh = {4, H, T, D}, .view = V_SLICE, .axis = 0, .start = 1, .stop = 4, .step = 2},
         .b = op_of(4, B, H, D, T)},
        {.a = {.nd = 3, .sh = {B, 2 * T, D}, .view = V_SLICE, .axis = 1, .start = 0, .stop = 2 * T, .step = 2},
         .b = op_of(2, D, 9, 0, 0)},
        /* one row of each matrix ([B,1,C], rows of the batch 4 * C apart) x a shared [C,N] */
        {.a = {.nd = 3, .sh = {3, 4, 33}, .view = V_SLICE, .axis = 1, .start = 2, .stop = 3, .step = 1},
         .b = op_of(2, 33, 7, 0, 0)},
        {.a = {.nd = 4, .sh = {B, H, 4, 8}, .view = V_SLICE, .axis = 2, .start = 1, .stop = 2, .step = 1},
         .b = op_of(2, 8, 12, 0, 0), .bias = 1},
        /* [T,D,B,H] permuted to [B,H,T,D]: neither matrix dim has unit stride, a copy */
        {.a = permuted(op_of(4, T, D, B, H), 2, 3, 0, 1), .b = op_of(4, B, H, D, T), .copy_a = 1},
    };
    run_cases(cs, N_OF(cs));
}

/* The launch itself: [B,T,C] x [C,N] with A contiguous (or one row of each matrix) is one
   GEMM of B*T rows; a batch of matrices otherwise. */
static void flattening(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static wgml_launch l[WGML_MAX_NODE_LAUNCHES];
    struct {
        operand a, b;
        int64_t rows, batch; /* the launch's M and batch */
    } cs[] = {
        {op_of(3, 4, 33, 16, 0), op_of(2, 16, 20, 0, 0), 4 * 33, 1},
        {op_of(4, 2, 3, 9, 16), op_of(2, 16, 20, 0, 0), 2 * 3 * 9, 1},
        {op_of(4, 2, 3, 9, 16), op_of(4, 1, 1, 16, 20), 2 * 3 * 9, 1},
        {{.nd = 3, .sh = {5, 4, 16}, .view = V_SLICE, .axis = 1, .start = 3, .stop = 4, .step = 1}, op_of(2, 16, 20, 0, 0), 5, 1},
        {op_of(4, 2, 3, 9, 16), op_of(3, 3, 16, 20, 0), 9, 6},          /* B per head: a batch */
        {{.nd = 3, .sh = {4, 40, 16}, .view = V_SLICE, .axis = 1, .start = 0, .stop = 33, .step = 1}, op_of(2, 16, 20, 0, 0), 33, 4},
        {transposed(op_of(3, 4, 16, 33, 0)), op_of(2, 16, 20, 0, 0), 33, 4},
    };
    for (int i = 0; i < N_OF(cs); i++) {
        wgml_scope_begin(ctx);
        float x[4 * 40 * 16] = {0};
        wgml_tensor *xa = test_tensor(ctx, cs[i].a.nd, cs[i].a.sh, x), *xb = test_tensor(ctx, cs[i].b.nd, cs[i].b.sh, x);
        wgml_tensor *r = wgml_matmul(ctx, gpu_operand(ctx, &cs[i].a, xa), gpu_operand(ctx, &cs[i].b, xb));
        CHECK(wgml_tensor_status(r) == WGML_OK);
        if (wgml_tensor_status(r) == WGML_OK) {
            memset(l, 0, sizeof l);
            int count = 1;
            CHECK_OK(ctx, wgml_build_matmul(ctx, r, l, &count));
            uint32_t M;
            memcpy(&M, l[0].params, 4); /* the parameter block's first field */
            if (M != (uint32_t)cs[i].rows || l[0].groups[2] != (uint32_t)cs[i].batch || count != 1) {
                fprintf(stderr, "  case %d: launch of %u rows x %u matrices, want %lld x %lld\n", i, M, l[0].groups[2],
                        (long long)cs[i].rows, (long long)cs[i].batch);
                CHECK(0);
            }
        }
        wgml_scope_end(ctx);
    }
}

/* ---------------------------------------------------------------- errors */

static void errors(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    static float x[4096];
    test_fill_uniform(x, 4096, -1, 1);
    wgml_tensor *a = test_tensor(ctx, 4, (int64_t[]){2, 3, 4, 5}, x);
    wgml_tensor *bk = test_tensor(ctx, 4, (int64_t[]){2, 3, 6, 7}, x);
    wgml_tensor *bl = test_tensor(ctx, 4, (int64_t[]){3, 3, 5, 4}, x);
    wgml_tensor *b3 = test_tensor(ctx, 3, (int64_t[]){4, 5, 6}, x);
    wgml_tensor *v = test_tensor(ctx, 1, (int64_t[]){5}, x);
    /* K: 5 against 6 */
    wgml_tensor *e = wgml_matmul(ctx, a, bk);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3, 4, 5]") && test_message_has(ctx, "[2, 3, 6, 7]"));
    /* the transposes are named: a^T is [.., 5, 4], whose K 4 does not meet b's 5 */
    e = wgml_matmul_ex(ctx, a, bl, &(wgml_matmul_desc){.trans_a = 1});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3, 4, 5]^T") && test_message_has(ctx, "[3, 3, 5, 4]"));
    /* leading dims 2 against 3, and [2, 3] against [4] */
    e = wgml_matmul(ctx, a, bl);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[2, 3, 4, 5]") && test_message_has(ctx, "[3, 3, 5, 4]") &&
          test_message_has(ctx, "broadcast"));
    e = wgml_matmul(ctx, a, b3);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[4, 5, 6]"));
    /* 1-D operands; no tensor has 5 dims (WGML_MAX_DIMS), so none reaches matmul */
    e = wgml_matmul(ctx, v, a);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[5]") && test_message_has(ctx, "[2, 3, 4, 5]"));
    e = wgml_matmul_ex(ctx, a, v, &(wgml_matmul_desc){.trans_b = 1});
    CHECK(wgml_tensor_status(e) == WGML_ERROR_SHAPE && test_message_has(ctx, "[5]^T"));
    CHECK(wgml_tensor_from_data(ctx, 5, (int64_t[]){1, 1, 1, 1, 1}, x, 1, &e) != WGML_OK);
    /* past the adapter: a batch of 70000 matrices (more workgroups than a grid dimension
       holds), and an output of 2^34 floats from views of a few; refused when evaluated */
    wgml_tensor *small = test_tensor(ctx, 4, (int64_t[]){1, 1, 2, 2}, x);
    wgml_tensor *many = wgml_broadcast_to(ctx, small, 4, (int64_t[]){700, 100, 2, 2});
    wgml_tensor *many2 = wgml_broadcast_to(ctx, small, 4, (int64_t[]){700, 100, 2, 2});
    e = wgml_matmul(ctx, many, wgml_contiguous(ctx, many2));
    CHECK(wgml_tensor_status(e) == WGML_OK);
    CHECK_STATUS(ctx, wgml_eval(ctx, 1, &e), WGML_ERROR_LIMIT);
    wgml_tensor *huge = wgml_broadcast_to(ctx, small, 4, (int64_t[]){65536, 65536, 2, 2});
    e = wgml_matmul(ctx, huge, wgml_transpose(ctx, huge, -1, -2));
    CHECK(wgml_tensor_status(e) == WGML_OK);
    wgml_status st = wgml_eval(ctx, 1, &e);
    CHECK(st == WGML_ERROR_LIMIT || st == WGML_ERROR_OUT_OF_MEMORY);
    if (st != WGML_ERROR_LIMIT) fprintf(stderr, "  2^34 outputs: %s: %s\n", wgml_status_name(st), wgml_error_message(ctx));
    wgml_clear_error(ctx);
    /* the context still works */
    e = wgml_matmul_ex(ctx, a, a, &(wgml_matmul_desc){.trans_b = 1});
    CHECK_OK(ctx, wgml_eval(ctx, 1, &e));
    wgml_scope_end(ctx);
}

/* ---------------------------------------------------------------- gradients */

/* L = sum(act(alpha op(A) op(B) + bias) * W) in double, A and B the stored tensors through
   the case's views */
static double loss_of(const bcase *c, const double *A, const double *B, const double *bias, const double *W,
                      double *Al, double *Bl, double *Z)
{
    layout la = layout_of(&c->a), lb = layout_of(&c->b);
    gather(&la, A, Al);
    gather(&lb, B, Bl);
    int64_t sc[4];
    int nd = ref_bmm(&la, Al, c->ta, &lb, Bl, c->tb, c->alpha == 0.0f ? 1.0 : c->alpha, c->bias ? bias : NULL,
                     (int)c->act, sc, Z);
    double L = 0;
    for (int64_t i = 0; i < test_numel(nd, sc); i++) L += Z[i] * W[i];
    return L;
}

/* |got - want| / max(|want|, 1e-3 scaled by the largest |want| past 1), as test_autograd */
static int grads_close(const char *what, const float *got, const double *want, int64_t n)
{
    double scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    return test_close(what, got, want, (size_t)n, GRAD_TOL, 1e-3 * scale);
}

static void grad_case(wgml_context *ctx, const bcase *c)
{
    enum { MAXEL = 4096 };
    static float xf[3][MAXEL], wf[MAXEL], got[MAXEL];
    static double xd[3][MAXEL], w[MAXEL], want[MAXEL], Al[MAXEL], Bl[MAXEL], Z[MAXEL];
    layout la = layout_of(&c->a), lb = layout_of(&c->b);
    int64_t N = c->tb ? lb.sh[lb.nd - 2] : lb.sh[lb.nd - 1];
    int nd[3] = {c->a.nd, c->b.nd, 1};
    const int64_t *sh[3] = {c->a.sh, c->b.sh, &N};
    int nin = c->bias ? 3 : 2;
    for (int l = 0; l < nin; l++) {
        test_fill_uniform(xf[l], (size_t)test_numel(nd[l], sh[l]), -1, 1);
        for (int64_t i = 0; i < test_numel(nd[l], sh[l]); i++) xd[l][i] = xf[l][i];
    }
    int64_t sc[4];
    gather(&la, xd[0], Al);
    gather(&lb, xd[1], Bl);
    int ndc = ref_bmm(&la, Al, c->ta, &lb, Bl, c->tb, 1.0, NULL, 0, sc, Z);
    int64_t nc = test_numel(ndc, sc);
    test_fill_uniform(wf, (size_t)nc, -1, 1);
    for (int64_t i = 0; i < nc; i++) w[i] = wf[i];

    char sa[160], sb[160], what[400];
    operand_str(sa, sizeof sa, &c->a);
    operand_str(sb, sizeof sb, &c->b);
    snprintf(what, sizeof what, "grad of %s%s x %s%s alpha %g bias %d act %d", sa, c->ta ? "^T" : "", sb,
             c->tb ? "^T" : "", c->alpha == 0.0f ? 1.0 : c->alpha, c->bias, (int)c->act);
    wgml_scope_begin(ctx);
    wgml_tensor *in[3] = {0};
    for (int l = 0; l < nin; l++) {
        in[l] = test_tensor(ctx, nd[l], sh[l], xf[l]);
        CHECK_OK(ctx, wgml_requires_grad(in[l], 1));
    }
    wgml_matmul_desc d = {.trans_a = c->ta, .trans_b = c->tb, .alpha = c->alpha, .bias = in[2], .activation = c->act};
    wgml_tensor *y = wgml_matmul_ex(ctx, gpu_operand(ctx, &c->a, in[0]), gpu_operand(ctx, &c->b, in[1]), &d);
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, ndc, sc, wf)));
    wgml_status st = wgml_backward(L);
    if (st) {
        fprintf(stderr, "  %s: backward gave %s: %s\n", what, wgml_status_name(st), wgml_error_message(ctx));
        CHECK(0);
        goto done;
    }
    for (int l = 0; l < nin; l++) {
        wgml_tensor *g = wgml_grad(in[l]);
        int same = g && wgml_tensor_ndim(g) == nd[l];
        for (int k = 0; same && k < nd[l]; k++) same = wgml_tensor_dim(g, k) == sh[l][k];
        if (!same) {
            fprintf(stderr, "  %s: the gradient of input %d does not have its shape\n", what, l);
            CHECK(0);
            continue;
        }
        int64_t n = test_numel(nd[l], sh[l]);
        for (int64_t i = 0; i < n; i++) {
            double x0 = xd[l][i];
            xd[l][i] = x0 + FD_H;
            double lp = loss_of(c, xd[0], xd[1], xd[2], w, Al, Bl, Z);
            xd[l][i] = x0 - FD_H;
            double lm = loss_of(c, xd[0], xd[1], xd[2], w, Al, Bl, Z);
            xd[l][i] = x0;
            want[i] = (lp - lm) / (2 * FD_H);
        }
        CHECK_OK(ctx, wgml_tensor_read(g, got, (size_t)n));
        char gw[440];
        snprintf(gw, sizeof gw, "%s: d/d(input %d)", what, l);
        CHECK(grads_close(gw, got, want, n));
    }
done:
    wgml_scope_end(ctx);
}

/* every operand's gradient where leading dims broadcast (missing or 1) on either side, through
   views, with the epilogue */
static void gradients(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { B = 2, H = 3, T = 4, D = 3, N = 5 };
    operand bthd = op_of(4, B, T, H, D);
    const bcase cs[] = {
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, D, T)},
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, H, T, D), .tb = 1, .alpha = 0.5f},
        {.a = op_of(4, B, H, D, T), .b = op_of(4, B, H, D, N), .ta = 1},
        {.a = op_of(4, 1, H, T, D), .b = op_of(4, B, H, D, T)},
        {.a = op_of(4, B, 1, T, D), .b = op_of(4, 1, H, D, N), .bias = 1},
        {.a = op_of(4, B, H, T, D), .b = op_of(4, B, 1, N, D), .tb = 1},
        {.a = op_of(4, B, H, T, D), .b = op_of(2, D, N, 0, 0), .bias = 1, .act = WGML_ACT_GELU}, /* a layer */
        {.a = op_of(4, B, H, T, D), .b = op_of(2, N, D, 0, 0), .tb = 1, .alpha = -0.75f},
        {.a = op_of(3, B, T, D, 0), .b = op_of(4, 1, 1, D, N), .act = WGML_ACT_SILU},
        {.a = op_of(4, B, H, D, T), .b = op_of(2, D, N, 0, 0), .ta = 1},
        {.a = op_of(2, T, D, 0, 0), .b = op_of(4, B, H, D, N)},
        {.a = op_of(2, D, T, 0, 0), .b = op_of(4, B, H, N, D), .ta = 1, .tb = 1},
        {.a = op_of(3, H, T, D, 0), .b = op_of(4, B, 1, D, N)},
        {.a = op_of(4, B, H, T, D), .b = op_of(3, H, D, N, 0)},
        /* through views: K^T by transpose, head splits, a broadcast matrix */
        {.a = op_of(4, B, H, T, D), .b = transposed(op_of(4, B, H, T, D))},
        {.a = permuted(bthd, 0, 2, 1, 3), .b = permuted(bthd, 0, 2, 1, 3), .tb = 1},
        {.a = op_of(4, B, H, T, T), .b = permuted(bthd, 0, 2, 1, 3)},
        {.a = permuted(bthd, 0, 2, 1, 3), .b = op_of(2, D, N, 0, 0)},
        {.a = {.nd = 2, .sh = {T, D}, .view = V_BCAST, .bnd = 4, .bsh = {B, H, T, D}}, .b = op_of(4, B, 1, D, N)},
        {.a = permuted(op_of(4, T, D, B, H), 2, 3, 0, 1), .b = op_of(4, B, H, D, N)}, /* read through a copy */
    };
    for (int i = 0; i < N_OF(cs); i++) grad_case(ctx, &cs[i]);
}

/* Few output tiles and a long K (a weight's gradient, x^T g over every token) split K into a
   batch of partial GEMMs and a sum: both transposed forms, against the double reference;
   a K that splits into no chunk of 16 stays one launch, as do enough tiles. The sums over rows of the same
   shapes (a bias's gradient) go through the same column-sum kernel as split K's sum. */
static void split_k_and_column_sums(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const struct { int64_t M, N, K; int ta, tb, launches; } cs[] = {
        {40, 72, 4096, 1, 0, 2}, {33, 65, 8192, 0, 1, 2}, {64, 48, 2560, 1, 1, 2}, {40, 72, 4100, 1, 0, 1}, {40, 72, 1000, 0, 0, 1},
    };
    static wgml_launch l[WGML_MAX_NODE_LAUNCHES];
    for (int i = 0; i < N_OF(cs); i++) {
        int64_t M = cs[i].M, N = cs[i].N, K = cs[i].K;
        int64_t sa[2] = {cs[i].ta ? K : M, cs[i].ta ? M : K}, sb[2] = {cs[i].tb ? N : K, cs[i].tb ? K : N};
        float *a = malloc((size_t)(M * K) * sizeof *a), *b = malloc((size_t)(K * N) * sizeof *b);
        double *da = malloc((size_t)(M * K) * sizeof *da), *db = malloc((size_t)(K * N) * sizeof *db), *want = malloc((size_t)(M * N) * sizeof *want);
        test_fill_uniform(a, (size_t)(M * K), -1, 1);
        test_fill_uniform(b, (size_t)(K * N), -1, 1);
        for (int64_t j = 0; j < M * K; j++) da[j] = a[j];
        for (int64_t j = 0; j < K * N; j++) db[j] = b[j];
        wgml_ref_matmul(1, M, N, K, da, 1, cs[i].ta, db, 1, cs[i].tb, 1.0, NULL, 0, want);
        wgml_scope_begin(ctx);
        wgml_tensor *r = wgml_matmul_ex(ctx, test_tensor(ctx, 2, sa, a), test_tensor(ctx, 2, sb, b),
                                        &(wgml_matmul_desc){.trans_a = cs[i].ta, .trans_b = cs[i].tb});
        memset(l, 0, sizeof l);
        int count = 1; /* as the executor: a builder that fills more says so */
        CHECK_OK(ctx, wgml_build_matmul(ctx, r, l, &count));
        if (count != cs[i].launches) FAILF("M %lld N %lld K %lld: %d launches, want %d", (long long)M, (long long)N, (long long)K, count, cs[i].launches);
        float *got = test_read_new(ctx, "split-K matmul", r, M * N);
        /* sums of K products of [-1, 1] values: errors grow as sqrt(K) */
        if (got) CHECK(test_close("split-K matmul", got, want, (size_t)(M * N), 1e-5, sqrt((double)K)));
        free(got);
        /* column sums of b seen as [K, N] rows */
        if (!cs[i].tb) {
            double *cw = calloc((size_t)N, sizeof *cw);
            wgml_ref_sum(2, sb, db, 0, cw);
            float *cg = test_read_new(ctx, "column sums", wgml_sum(ctx, test_tensor(ctx, 2, sb, b), 0, 0), N);
            if (cg) CHECK(test_close("column sums", cg, cw, (size_t)N, 1e-5, sqrt((double)K)));
            free(cg), free(cw);
        }
        wgml_scope_end(ctx);
        free(a), free(b), free(da), free(db), free(want);
    }
    /* tiles enough to fill a GPU twice over (256 or more of 128 x 128) never split, however
       long K: GPT-2 small's dX GEMM, [8192 x 768] over K = 3072 (planned only, not run). The
       rule that splits it matters on the matrix units (where wgml splits down to 512 tiles);
       on an adapter without them (lavapipe) the SIMT rule leaves it whole as well. */
    wgml_scope_begin(ctx);
    const int64_t sa[2] = {8192, 3072}, sb[2] = {768, 3072};
    wgml_tensor *r = wgml_matmul_ex(ctx, wgml_rand(ctx, 2, sa, -1, 1), wgml_rand(ctx, 2, sb, -1, 1),
                                    &(wgml_matmul_desc){.trans_b = 1});
    memset(l, 0, sizeof l);
    int count = 1;
    CHECK_OK(ctx, wgml_build_matmul(ctx, r, l, &count));
    if (count != 1) FAILF("8192 x 768 over K = 3072: %d launches, want 1 (no split)", count);
    wgml_scope_end(ctx);
}

/* The batched forms through the GEMM kernel the adapter does not pick by default: the tiled
   kernels on a CPU adapter (the GPU's path, which CI runs on lavapipe), the CPU GEMM on a GPU. */
static void other_gemm_suites(void)
{
    split_k_and_column_sums();
    attention_forms();
    linear_forms();
    awkward_sizes();
    views_through_strides();
}
static void other_gemm_kernel(void) { test_with_other_gemm_kernel(other_gemm_suites); }

int main(void)
{
    TEST_RUN(split_k_and_column_sums);
    TEST_RUN(attention_forms);
    TEST_RUN(linear_forms);
    TEST_RUN(awkward_sizes);
    TEST_RUN(views_through_strides);
    TEST_RUN(flattening);
    TEST_RUN(errors);
    TEST_RUN(gradients);
    TEST_RUN(other_gemm_kernel);
    return test_summary();
}
