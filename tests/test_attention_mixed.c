/*
 * wgml_attention, forward and gradient, under mixed precision (wgml_set_compute_precision
 * WGML_PRECISION_MIXED), against the double reference (tests/ref/ref.h) with an error bound
 * that follows from f16 operands and f32 sums. Where the adapter has f16 -> f32 subgroup
 * matrices the kernels run on them (ops/attention/attention_sgmat_wgsl.c); elsewhere (lavapipe
 * in CI) the SIMT f32 kernels run and must meet the same bound. WGML_ATTN_MATRIX=emulate runs
 * the matrix kernels with plain-WGSL stand-ins on any adapter (slow: a developer's check on
 * lavapipe, `WGML_RUNTIME=dawn WGML_ATTN_MATRIX=emulate ./test_attention_mixed`);
 * WGML_TEST_ATTN_LONG=1 adds T = 256, 1023 and 4100 (for a GPU); WGML_TEST_ATTN_ONLY=text runs
 * the cases whose names hold the text. The forms of the matrix kernels are forced with
 * WGML_ATTN_MATRIX's form field (emulate,16x16x16,32,16,X or cols,32,32,32,0,-1,X: 1 the
 * one-walk forward, 0 two walks). Some cases take the result
 * written [B,T,H,D] (desc.out_bthd), an upstream gradient that is a permuted view, or q, k and
 * v as windows of one packed tensor whose gradient the kernels write in place (desc.packed), in
 * f32 or, read through a cast to f16 as the QKV GEMM's backward reads it, as halves.
 *
 * The bound, first order in u = 2^-11 (f16's unit roundoff) and e = 2^-24 (f32's), for query
 * row i and key j (a_ij = scale sum_d |q_id k_jd|, W_ij = sum_d |dO_id v_jd|):
 *   score      ds_ij = (2u + D e) a_ij, E_i = max_j ds_ij over the keys row i sees
 *   P          relative rP_i = 2 E_i + u (the row's log-sum-exp moves with its scores; P is
 *              rounded to f16)
 *   O          bo_id = (rP_i + u + S e) sum_j P_ij |v_jd|
 *   dP, Delta  (2u + D e) W_ij;  sum_d |dO_id| bo_id + D e sum_d |dO_id O_id|
 *   dS         bs_ij = P_ij (rP_i |dP_ij - Delta_i| + err dP_ij + err Delta_i) + u |dS_ij|
 *   dV         (rP_i + u + T e) sum_i P_ij |dO_id|
 *   dQ, dK     scale sum_j (bs_ij + (u + S e) |dS_ij|) |k_jd|, and over i with |q_id|
 * and every element must be within twice its bound (the factor covers second-order terms),
 * plus 2^-20 of the result's largest magnitude. The worst ratio error / bound is printed.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/ref.h"
#include "harness.h"

typedef struct mcase {
    const char *name;
    int64_t B, H, Hkv, T, S, D;
    int causal;
    int layout; /* 0: y [B,H,T,D]; 1: y [B,T,H,D] (desc.out_bthd), the loss's weights too;
                   2: y [B,T,H,D], the loss on its [B,H,T,D] view (dO a permuted view);
                   3: as 1, with q, k and v the windows of one [B,T,(H+2Hkv)D] tensor
                   (desc.packed, a GPT's QKV projection), whose gradient the kernels write;
                   4: as 3, that gradient read through a cast to f16 (as the QKV GEMM's
                   backward reads it under mixed precision): the kernels store halves */
    /* scores along the keys: 0 random; 1 growing (q biased by +0.5, key j by +8 j / S in every
       dim), so that a row's max passes the one-walk forward's reference by more than 8 (log2)
       after its first step and O is rescaled; -1 falling (q by +0.5, key j by -8 j / S): it
       never is */
    int grow;
} mcase;

static const mcase short_cases[] = {
    {"T=1 D=32", 1, 2, 2, 1, 1, 32, 1, 0, 0},
    {"T=7 D=64 causal GQA 4/2", 2, 4, 2, 7, 7, 64, 1, 0, 0},
    {"T=33 D=32 GQA 3/1", 1, 3, 1, 33, 33, 32, 0, 0, 0},
    {"T=33 D=64 causal", 1, 2, 2, 33, 33, 64, 1, 0, 0},
    {"T=7 S=40 D=24 causal (cached keys)", 1, 2, 1, 7, 40, 24, 1, 0, 0},
    {"T=9 D=5 (rows not vec4)", 1, 1, 1, 9, 9, 5, 0, 0, 0},
    {"T=7 D=64 causal GQA 3/1, out [B,T,H,D]", 2, 3, 1, 7, 7, 64, 1, 1, 0},
    {"T=33 D=32, out [B,T,H,D], dO view", 1, 3, 3, 33, 33, 32, 0, 2, 0},
    {"T=65 D=32 causal GQA 3/1, out [B,T,H,D]", 1, 3, 1, 65, 65, 32, 1, 1, 0},
    {"T=47 D=32 causal, scores growing (rescaled)", 1, 2, 2, 47, 47, 32, 1, 0, 1},
    {"T=40 D=48 GQA 2/1, scores falling (never)", 1, 2, 1, 40, 40, 48, 0, 0, -1},
    {"T=20 D=128 GQA 2/1", 1, 2, 1, 20, 20, 128, 0, 0, 0},
    {"T=65 D=32 causal GQA 4/2, packed", 2, 4, 2, 65, 65, 32, 1, 3, 0},
    {"T=21 D=24 GQA 3/1, packed", 2, 3, 1, 21, 21, 24, 0, 3, 0},
    {"T=65 D=32 causal GQA 4/2, packed, halves", 2, 4, 2, 65, 65, 32, 1, 4, 0},
    {"T=21 D=24 GQA 3/1, packed, halves", 2, 3, 1, 21, 21, 24, 0, 4, 0},
};

static const mcase long_cases[] = {
    {"T=256 D=64 causal GQA 6/2", 2, 6, 2, 256, 256, 64, 1, 0, 0},
    {"T=256 D=128", 1, 2, 2, 256, 256, 128, 0, 0, 0},
    {"T=1023 D=32 causal", 1, 2, 2, 1023, 1023, 32, 1, 0, 0},
    {"T=1023 D=96 GQA 4/1", 1, 4, 1, 1023, 1023, 96, 0, 0, 0},
    {"T=1023 D=128 causal GQA 2/1", 1, 2, 1, 1023, 1023, 128, 1, 0, 0},
    {"T=4100 D=64 causal GQA 2/1", 1, 2, 1, 4100, 4100, 64, 1, 0, 0},
    {"T=256 D=64 causal GQA 6/2, out [B,T,H,D]", 2, 6, 2, 256, 256, 64, 1, 1, 0},
    {"T=1023 D=128 causal, out [B,T,H,D], dO view", 1, 3, 3, 1023, 1023, 128, 1, 2, 0},
    {"T=1023 D=64 causal, scores growing (rescaled)", 1, 2, 2, 1023, 1023, 64, 1, 0, 1},
    {"T=256 D=64 causal H=6, packed", 4, 6, 6, 256, 256, 64, 1, 3, 0},
    {"T=1023 D=64 causal GQA 6/2, packed", 2, 6, 2, 1023, 1023, 64, 1, 3, 0},
    {"T=256 D=64 causal H=6, packed, halves", 4, 6, 6, 256, 256, 64, 1, 4, 0},
};

#define U16 (1.0 / 2048.0)
#define U32 (1.0 / 16777216.0)

/* the bounds of one case (see the header), in [B,H,T,D] / [B,Hkv,S,D] order */
static void bounds(const mcase *c, const double *q, const double *k, const double *v, const double *dout, const double *o,
                   double scale, double *bo, double *bq, double *bk, double *bv)
{
    const int64_t D = c->D, T = c->T, S = c->S, R = c->H / c->Hkv;
    memset(bk, 0, (size_t)(c->B * c->Hkv * S * D) * sizeof *bk);
    memset(bv, 0, (size_t)(c->B * c->Hkv * S * D) * sizeof *bv);
    double *p = malloc((size_t)S * sizeof *p), *a = malloc((size_t)S * sizeof *a), *dp = malloc((size_t)S * sizeof *dp),
           *w = malloc((size_t)S * sizeof *w);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            int64_t g = h / R;
            for (int64_t i = 0; i < T; i++) {
                const double *qi = q + ((b * c->H + h) * T + i) * D, *doi = dout + ((b * c->H + h) * T + i) * D,
                             *oi = o + ((b * c->H + h) * T + i) * D;
                double *boi = bo + ((b * c->H + h) * T + i) * D, *bqi = bq + ((b * c->H + h) * T + i) * D;
                int64_t seen = c->causal ? i + S - T + 1 : S;
                if (seen > S) seen = S;
                memset(boi, 0, (size_t)D * sizeof *boi);
                memset(bqi, 0, (size_t)D * sizeof *bqi);
                if (seen <= 0) continue;
                double m = -INFINITY, E = 0;
                for (int64_t j = 0; j < seen; j++) {
                    const double *kj = k + ((b * c->Hkv + g) * S + j) * D, *vj = v + ((b * c->Hkv + g) * S + j) * D;
                    double z = 0, az = 0, x = 0, aw = 0;
                    for (int64_t d = 0; d < D; d++) {
                        z += qi[d] * kj[d], az += fabs(qi[d] * kj[d]);
                        x += doi[d] * vj[d], aw += fabs(doi[d] * vj[d]);
                    }
                    p[j] = scale * z, a[j] = scale * az, dp[j] = x, w[j] = aw;
                    m = fmax(m, p[j]);
                    E = fmax(E, (2 * U16 + (double)D * U32) * a[j]);
                }
                double l = 0;
                for (int64_t j = 0; j < seen; j++) l += (p[j] = exp(p[j] - m));
                double delta = 0, adelta = 0, edelta = 0, rp = 2 * E + U16;
                for (int64_t j = 0; j < seen; j++) p[j] /= l;
                for (int64_t d = 0; d < D; d++) {
                    double s = 0;
                    for (int64_t j = 0; j < seen; j++) s += p[j] * fabs(v[((b * c->Hkv + g) * S + j) * D + d]);
                    boi[d] = (rp + U16 + (double)S * U32) * s;
                    delta += doi[d] * oi[d], adelta += fabs(doi[d] * oi[d]), edelta += fabs(doi[d]) * boi[d];
                }
                edelta += (double)D * U32 * adelta;
                for (int64_t j = 0; j < seen; j++) {
                    const double *kj = k + ((b * c->Hkv + g) * S + j) * D;
                    double ds = p[j] * (dp[j] - delta);
                    double bs = p[j] * (rp * fabs(dp[j] - delta) + (2 * U16 + (double)D * U32) * w[j] + edelta) + U16 * fabs(ds);
                    double *bkj = bk + ((b * c->Hkv + g) * S + j) * D, *bvj = bv + ((b * c->Hkv + g) * S + j) * D;
                    for (int64_t d = 0; d < D; d++) {
                        bqi[d] += scale * (bs + (U16 + (double)S * U32) * fabs(ds)) * fabs(kj[d]);
                        bkj[d] += scale * (bs + (U16 + (double)T * U32) * fabs(ds)) * fabs(qi[d]);
                        bvj[d] += p[j] * fabs(doi[d]) * (rp + U16 + (double)T * U32);
                    }
                }
            }
        }
    free(p), free(a), free(dp), free(w);
}

/* The rows and steps (after a row's first key) at which the one-walk forward rescales O when it
   walks the keys `cols` at a time: the row's max so far passes the max it had when the last
   rescale (or its first key) set its reference by more than 8 in log2 units (ops/attention/
   attention_sgmat_wgsl.c, TAU) */
static int64_t rescales(const mcase *c, const double *q, const double *k, double scale, int cols)
{
    const int64_t D = c->D, T = c->T, S = c->S, R = c->H / c->Hkv;
    int64_t n = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < T; i++) {
                int64_t seen = c->causal ? i + S - T + 1 : S;
                if (seen > S) seen = S;
                double ref = -INFINITY;
                for (int64_t j0 = 0; j0 < seen; j0 += cols) {
                    double m = -INFINITY;
                    for (int64_t j = j0; j < j0 + cols && j < seen; j++) {
                        double z = 0;
                        for (int64_t d = 0; d < D; d++)
                            z += q[((b * c->H + h) * T + i) * D + d] * k[((b * c->Hkv + h / R) * S + j) * D + d];
                        m = fmax(m, scale * z * 1.4426950408889634);
                    }
                    if (m > ref + 8) {
                        n += ref > -INFINITY;
                        ref = m;
                    }
                }
            }
    return n;
}

/* the largest error over every result of every case, relative to the result's largest
   magnitude: f16 operands show (~1e-3), the f32 kernels do not (~1e-6) */
static double largest_rel_err;

/* every |got - want| within 2 bound + 2^-20 max|want|; prints the worst ratio to the bound */
static void compare(const mcase *c, const char *what, const float *got, const double *want, const double *bound, size_t n)
{
    double big = 0, worst = 0, worst_err = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]), lim = 2 * bound[i] + big / 1048576.0;
        if (!(err <= lim)) bad++;
        worst = fmax(worst, err / lim);
        worst_err = fmax(worst_err, err);
    }
    if (big > 0 && (c->layout != 4 || !strcmp(what, "forward"))) /* (gradients stored as halves are rounded on either path) */
        largest_rel_err = fmax(largest_rel_err, worst_err / big);
    fprintf(stderr, "  %-42s %-8s max err %.2e (max |ref| %.2e), worst err / allowed %.2e\n", c->name, what, worst_err, big, worst);
    if (bad) FAILF("%s: %s: %zu of %zu elements past the bound", c->name, what, bad, n);
}

static void check_case(wgml_context *ctx, const mcase *c)
{
    size_t nq = (size_t)(c->B * c->H * c->T * c->D), nk = (size_t)(c->B * c->Hkv * c->S * c->D), n[3] = {nq, nk, nk};
    double scale = 1.0 / sqrt((double)c->D);
    float *in[3], *w = malloc(nq * sizeof *w), *out[4];
    double *din[3], *dw, *ref = malloc(nq * sizeof *ref), *dref[3], *bd[4];
    for (int i = 0; i < 3; i++) {
        in[i] = malloc(n[i] * sizeof(float));
        test_fill_uniform(in[i], n[i], -2, 2);
        din[i] = test_to_double(in[i], n[i]);
        dref[i] = malloc(n[i] * sizeof(double));
    }
    if (c->grow) { /* (see mcase) */
        for (size_t i = 0; i < nq; i++) in[0][i] += 0.5f;
        for (int64_t r = 0; r < c->B * c->Hkv * c->S; r++)
            for (int64_t d = 0; d < c->D; d++) in[1][r * c->D + d] += (float)(c->grow * 8.0 * (double)(r % c->S) / (double)c->S);
        for (int i = 0; i < 2; i++) {
            free(din[i]);
            din[i] = test_to_double(in[i], n[i]);
        }
    }
    /* the one-walk forward's rescales: some where the scores grow, none where they fall */
    int64_t resc16 = rescales(c, din[0], din[1], scale, 16), resc32 = rescales(c, din[0], din[1], scale, 32);
    if (c->grow) fprintf(stderr, "  %-42s rescales in steps of 16 / 32 keys: %lld / %lld\n", c->name, (long long)resc16, (long long)resc32);
    if (c->grow > 0) CHECK(resc16 > 0 && resc32 > 0);
    if (c->grow < 0) CHECK(resc16 == 0 && resc32 == 0);
    test_fill_uniform(w, nq, -1, 1);
    dw = test_to_double(w, nq);
    size_t nout[4] = {nq, nq, nk, nk};
    for (int i = 0; i < 4; i++) out[i] = calloc(nout[i], sizeof(float)), bd[i] = malloc(nout[i] * sizeof(double));
    CHECK(wgml_ref_attention(c->B, c->H, c->Hkv, c->T, c->S, c->D, din[0], din[1], din[2], c->causal, scale, ref) == 0);
    CHECK(wgml_ref_attention_backward(c->B, c->H, c->Hkv, c->T, c->S, c->D, din[0], din[1], din[2], dw, c->causal, scale, dref[0],
                                      dref[1], dref[2]) == 0);
    bounds(c, din[0], din[1], din[2], dw, ref, scale, bd[0], bd[1], bd[2], bd[3]);

    wgml_scope_begin(ctx);
    int64_t heads[3] = {c->H, c->Hkv, c->Hkv}, rows[3] = {c->T, c->S, c->S};
    /* packed: [B,T,N], q's heads then k's then v's along N (S = T) */
    const int64_t N = (c->H + 2 * c->Hkv) * c->D, first[3] = {0, c->H, c->H + c->Hkv};
    wgml_tensor *x[3], *qkv = NULL;
    const bool packed = c->layout >= 3;
    if (packed) {
        float *xp = malloc((size_t)(c->B * c->T * N) * sizeof *xp);
        for (int i = 0; i < 3; i++)
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t h = 0; h < heads[i]; h++)
                    for (int64_t t = 0; t < c->T; t++)
                        memcpy(xp + (b * c->T + t) * N + (first[i] + h) * c->D, in[i] + ((b * heads[i] + h) * c->T + t) * c->D,
                               (size_t)c->D * sizeof *xp);
        int64_t s3[3] = {c->B, c->T, N}, s4[4] = {c->B, c->T, c->H + 2 * c->Hkv, c->D};
        qkv = test_tensor(ctx, 3, s3, xp);
        free(xp);
        CHECK_OK(ctx, wgml_requires_grad(qkv, 1));
        static const int bhtd[4] = {0, 2, 1, 3};
        wgml_tensor *all = wgml_reshape(ctx, qkv, 4, s4);
        for (int i = 0; i < 3; i++) x[i] = wgml_permute(ctx, wgml_slice(ctx, all, 2, first[i], first[i] + heads[i], 1), bhtd);
    } else {
        for (int i = 0; i < 3; i++) {
            int64_t s[4] = {c->B, heads[i], rows[i], c->D};
            x[i] = test_tensor(ctx, 4, s, in[i]);
            CHECK_OK(ctx, wgml_requires_grad(x[i], 1));
        }
    }
    wgml_tensor *y = wgml_attention(ctx, x[0], x[1], x[2],
                                    &(wgml_attention_desc){.causal = c->causal, .out_bthd = c->layout != 0, .packed = qkv});
    int64_t s4[4] = {c->B, c->H, c->T, c->D}, sb[4] = {c->B, c->T, c->H, c->D};
    static const int swap[4] = {0, 2, 1, 3};
    wgml_tensor *yh = c->layout ? wgml_permute(ctx, y, swap) : y, *L; /* y as [B,H,T,D] */
    if (c->layout == 1 || packed) { /* the weights [B,T,H,D]: dO lies as y does */
        float *wb = malloc(nq * sizeof *wb);
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t t = 0; t < c->T; t++)
                    memcpy(wb + ((b * c->T + t) * c->H + h) * c->D, w + ((b * c->H + h) * c->T + t) * c->D, (size_t)c->D * sizeof *w);
        L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, 4, sb, wb)));
        free(wb);
    } else {
        L = wgml_sum_all(ctx, wgml_mul(ctx, yh, test_tensor(ctx, 4, s4, w)));
    }
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_tensor_read(yh, out[0], nq));
    if (qkv) { /* the packed gradient's parts back to [B,h,T,D] */
        size_t np = (size_t)(c->B * c->T * N);
        float *gp = malloc(np * sizeof *gp);
        wgml_tensor *gt = wgml_grad(qkv);
        CHECK(gt != NULL);
        if (gt && c->layout == 4) gt = wgml_cast(ctx, gt, WGML_F16);
        if (gt) CHECK_OK(ctx, wgml_tensor_read(gt, gp, np));
        for (int i = 0; i < 3; i++)
            for (int64_t b = 0; b < c->B; b++)
                for (int64_t h = 0; h < heads[i]; h++)
                    for (int64_t t = 0; t < c->T; t++)
                        memcpy(out[1 + i] + ((b * heads[i] + h) * c->T + t) * c->D, gp + (b * c->T + t) * N + (first[i] + h) * c->D,
                               (size_t)c->D * sizeof *gp);
        free(gp);
    }
    for (int i = 0; i < 3 && !qkv; i++) {
        wgml_tensor *gt = wgml_grad(x[i]);
        CHECK(gt != NULL);
        if (gt) CHECK_OK(ctx, wgml_tensor_read(gt, out[1 + i], n[i]));
    }
    wgml_scope_end(ctx);

    static const char *const names[4] = {"forward", "dq", "dk", "dv"};
    const double *want[4] = {ref, dref[0], dref[1], dref[2]};
    if (c->layout == 4) /* the gradients rounded to f16 once more: u of each */
        for (int i = 1; i < 4; i++)
            for (size_t e = 0; e < nout[i]; e++) bd[i][e] += U16 * fabs(want[i][e]);
    for (int i = 0; i < 4; i++) compare(c, names[i], out[i], want[i], bd[i], nout[i]);
    for (int i = 0; i < 3; i++) free(in[i]), free(din[i]), free(dref[i]);
    for (int i = 0; i < 4; i++) free(out[i]), free(bd[i]);
    free(w), free(dw), free(ref);
}

static void within_the_f16_bound(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    if (!info.has_shader_f16) {
        fprintf(stderr, "  %s has no shader-f16: mixed precision is refused\n", info.name);
        CHECK_STATUS(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED), WGML_ERROR_UNSUPPORTED);
        return;
    }
    CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED));
    const char *knob = getenv("WGML_ATTN_MATRIX");
    bool emulated = knob && !strncmp(knob, "emulate", 7), off = knob && !strcmp(knob, "0");
    bool matrix = !off && (emulated || info.has_subgroup_matrix);
    fprintf(stderr, "  %s: %s\n", info.name,
            off        ? "WGML_ATTN_MATRIX=0: the SIMT kernels"
            : emulated ? "matrix kernels, emulated"
            : matrix   ? "matrix units"
                       : "no subgroup matrices: the SIMT kernels");
    /* WGML_TEST_ATTN_ONLY=text: only the cases whose names hold it (a developer's shortcut for the
       slow emulated runs) */
    const char *only = getenv("WGML_TEST_ATTN_ONLY");
    for (int i = 0; i < N_OF(short_cases); i++)
        if (!only || strstr(short_cases[i].name, only)) check_case(ctx, &short_cases[i]);
    const char *lg = getenv("WGML_TEST_ATTN_LONG");
    if (lg && *lg == '1')
        for (int i = 0; i < N_OF(long_cases); i++)
            if (!only || strstr(long_cases[i].name, only)) check_case(ctx, &long_cases[i]);
    /* the path taken: f16 rounding where the matrix kernels ran, f32 accuracy elsewhere (an
       adapter with subgroup matrices but no f16 -> f32 shape, none seen yet, would need this
       to ask wgml_info's matmul line instead) */
    fprintf(stderr, "  largest error relative to its result's magnitude: %.2e\n", largest_rel_err);
    if (matrix) CHECK(largest_rel_err > 5e-5);
    else CHECK(largest_rel_err < 1e-5);
}

/* d(qkv) read as halves is the attention's gradient node storing them (an f16 cast of it is the
   node retyped: ops/elementwise.c's wgml_cast), not the f32 node and a cast after it: the
   profile of one such case has one dQ launch and no cast */
static void packed_gradient_stored_as_halves(void)
{
    char path[TEST_PROFILE_PATH];
    wgml_context *ctx = test_profiled_context(path);
    if (!ctx) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    bool f16 = info.has_shader_f16;
    if (f16) {
        CHECK_OK(ctx, wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED));
        const mcase c = {"T=21 D=24 GQA 3/1, packed, halves (profiled)", 2, 3, 1, 21, 21, 24, 0, 4, 0};
        check_case(ctx, &c);
    }
    wgml_context_free(ctx); /* writes the profile */
    long casts = test_profile_count(path, "cast"), dq = test_profile_count(path, "attention dQ");
    unlink(path);
    if (!f16) return;
    fprintf(stderr, "  %ld dQ launches, %ld casts\n", dq, casts);
    CHECK(dq == 1);
    CHECK(casts == 0);
}

int main(void)
{
    TEST_RUN(within_the_f16_bound);
    TEST_RUN(packed_gradient_stored_as_halves);
    return test_summary();
}
