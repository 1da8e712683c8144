/*
 * wgml_attention, forward and gradient, against
 *   - the double reference (tests/ref/ref.h: wgml_ref_attention and its analytic gradient), and
 *   - the unfused composition on the GPU: matmul (q k^T, scaled) -> + causal mask (a host
 *     tensor of 0 / -inf) -> softmax -> matmul with v, and its gradients through
 *     wgml_backward,
 * on shapes that are not multiples of the tiles (T = 1, 7, 65, 130), S != T (a block of
 * queries after a cache of keys), grouped-query heads, every head dim the kernels are
 * written for, strided inputs and a custom scale, the result written [B,T,H,D]
 * (desc.out_bthd) and upstream gradients that are permuted views; gradients bit-identical
 * from run to run; no copy launch around the attention in a GPT's [B,T,C] pattern;
 * bad inputs answered with a status; and the memory of forward + backward at T = 512 far
 * below one T x T matrix.
 *
 * Errors are |gpu - ref| / max(|ref|, floor), the floor a fixed fraction of the largest
 * |ref| of the result or of 1, the inputs' scale (an entry near 0 carries the rounding of
 * the larger terms it sums), and printed for every case. The bounds grow with the largest
 * score past 8 (a case with scores ~100 checks the online softmax's rescaling): f32 rounds a
 * score z to ~|z| 2^-24, which exp(z) turns into a relative error of that size.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "harness.h"

#define FWD_TOL 1e-5  /* f32 scores, exp2 and sums over S keys against double, of the sum of |p v| */
#define GRAD_TOL 3e-5 /* sums over T queries of products of those */
#define FLOOR_FRAC 5e-2

typedef struct acase {
    const char *name;
    int64_t B, H, Hkv, T, S, D;
    int causal;
    float scale;   /* 0: the default, 1/sqrt(D) */
    int permuted;  /* q, k, v given as [B,T,H,D] buffers permuted to [B,H,T,D] */
    int three_d;   /* [B*H, T, D] operands (H == Hkv) */
    int unfused;   /* also compare with the unfused composition */
    int layout;    /* 0: y [B,H,T,D], the loss's weights too; 1: y [B,T,H,D] (desc.out_bthd), the
                      weights too; 2: y [B,T,H,D], the loss on its [B,H,T,D] view (dO a
                      permuted view); 3: y [B,H,T,D], the loss on its [B,T,H,D] view (ditto) */
} acase;

static const acase cases[] = {
    {"T=1 D=16", 1, 1, 1, 1, 1, 16, 1, 0, 0, 0, 1, 0},
    {"B=2 H=3 T=7 D=8 causal", 2, 3, 3, 7, 7, 8, 1, 0, 0, 0, 1, 0},
    {"B=2 H=3 T=7 D=8", 2, 3, 3, 7, 7, 8, 0, 0, 0, 0, 1, 0},
    {"T=65 D=32 causal", 1, 2, 2, 65, 65, 32, 1, 0, 0, 0, 1, 0},
    {"T=130 D=64 causal", 1, 2, 2, 130, 130, 64, 1, 0, 0, 0, 1, 0},
    {"T=130 D=64", 1, 1, 1, 130, 130, 64, 0, 0, 0, 0, 0, 0},
    {"T=3 after 20 cached keys, causal", 2, 2, 2, 3, 23, 16, 1, 0, 0, 0, 1, 0},
    {"T=40 S=70 D=32, causal", 1, 2, 2, 40, 70, 32, 1, 0, 0, 0, 0, 0},
    {"GQA H=4 Hkv=2 T=33 causal", 2, 4, 2, 33, 33, 16, 1, 0, 0, 0, 1, 0},
    {"GQA H=6 Hkv=1 T=20 S=37", 1, 6, 1, 20, 37, 32, 0, 0, 0, 0, 0, 0},
    {"scale 0.3 T=19 D=24", 1, 2, 2, 19, 19, 24, 1, 0.3f, 0, 0, 1, 0},
    {"scale 10: scores ~100, T=50 D=32", 1, 2, 2, 50, 50, 32, 1, 10.0f, 0, 0, 1, 0},
    {"D=128 T=70 causal", 1, 1, 1, 70, 70, 128, 1, 0, 0, 0, 0, 0},
    {"D=33 (rows not vec4) T=21", 1, 2, 2, 21, 21, 33, 1, 0, 0, 0, 0, 0},
    {"D=5 T=9", 2, 1, 1, 9, 9, 5, 1, 0, 0, 0, 0, 0},
    {"permuted [B,T,H,D] T=37 D=64", 2, 3, 3, 37, 37, 64, 1, 0, 1, 0, 1, 0},
    {"3-D [N,T,D] T=29 D=16", 3, 1, 1, 29, 29, 16, 1, 0, 0, 1, 0, 0},
    {"S < T, causal: 6 queries over 4 keys", 1, 2, 2, 6, 4, 8, 1, 0, 0, 0, 0, 0},
    {"out [B,T,H,D] H=3 T=7 D=8 causal", 2, 3, 3, 7, 7, 8, 1, 0, 0, 0, 0, 1},
    {"out [B,T,H,D] GQA 3/1 T=33 D=16, dO view", 1, 3, 1, 33, 33, 16, 0, 0, 0, 0, 0, 2},
    {"dO [B,T,H,D] view T=33 D=32 causal", 2, 3, 3, 33, 33, 32, 1, 0, 0, 0, 0, 3},
    {"out [B,T,H,D] D=5 (not vec4) T=9 H=3", 1, 3, 3, 9, 9, 5, 1, 0, 0, 0, 0, 1},
    {"out [B,T,H,D] permuted in, T=37 D=64", 2, 3, 3, 37, 37, 64, 1, 0, 1, 0, 0, 1},
};


/* ---------------------------------------------------------------- helpers */

static double max_abs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* the bound's growth with the scores' size: a score z is rounded to ~|z| 2^-24 in f32, so
   exp(z) and all that follows carry a relative error of that size */
static double score_factor;

/* prints the error of got against want and fails above tol (times score_factor). With terms
   (the forward: sum_j p_j |v_j| of each output), each error is relative to its terms: an output
   near 0 is the cancelling of O(1) terms, and f32 leaves it their rounding (an H200 gave 5.9e-7
   at an output of 0.03, terms ~1). Without (the gradients), relative to |want| floored at
   FLOOR_FRAC of the largest |want|. */
static void compare(const acase *c, const char *what, const float *got, const double *want, const double *terms, size_t n,
                    double tol)
{
    tol *= score_factor;
    double floor = FLOOR_FRAC * fmax(max_abs(want, n), 1.0); /* inputs are O(1): a result near 0 is its terms' rounding */
    double err = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / (terms ? fmax(terms[i], 1e-30) : fmax(fabs(want[i]), floor));
        if (!(d <= err)) err = d, at = i; /* (NaN too) */
    }
    fprintf(stderr, "  %-36s %-22s max rel err %.2e\n", c->name, what, err);
    if (!(err <= tol)) {
        fprintf(stderr, "  %s: %s: max rel err %.3g > %.3g at [%zu]: got %.9g want %.9g%s%.3g (n=%zu)\n", c->name, what, err,
                tol, at, (double)got[at], want[at], terms ? ", terms " : ", floor ", terms ? terms[at] : floor, n);
        fprintf(stderr, "FAIL %s: %s: %s off the reference\n", test_current, c->name, what);
        test_failures++;
    }
}

/* sum_j p_j |v_j| of each output: the attention of q, k and |v| (the forward's terms) */
static double *forward_terms(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S, int64_t D, const double *q,
                             const double *k, const double *v, int causal, double scale)
{
    size_t nv = (size_t)(B * Hkv * S * D), ny = (size_t)(B * H * T * D);
    double *av = malloc(nv * sizeof *av), *terms = malloc(ny * sizeof *terms);
    for (size_t i = 0; i < nv; i++) av[i] = fabs(v[i]);
    CHECK(wgml_ref_attention(B, H, Hkv, T, S, D, q, k, av, causal, scale, terms) == 0);
    free(av);
    return terms;
}

/* x [B,H,T,D] (contiguous) rearranged to [B,T,H,D] */
static void to_bthd(const float *x, float *y, int64_t B, int64_t H, int64_t T, int64_t D)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                memcpy(y + ((b * T + t) * H + h) * D, x + ((b * H + h) * T + t) * D, (size_t)D * sizeof *x);
}

/* The leaves of one case, uploaded; the operands the op takes (views for permuted cases) */
typedef struct operands {
    wgml_tensor *leaf[3]; /* as uploaded: [B,H,T,D], [B,T,H,D] (permuted) or [B*H,T,D] */
    wgml_tensor *x[3];    /* q, k, v as given to wgml_attention */
} operands;

static void upload(wgml_context *ctx, const acase *c, float *const *host, operands *o)
{
    int64_t rows[3] = {c->T, c->S, c->S}, heads[3] = {c->H, c->Hkv, c->Hkv};
    for (int i = 0; i < 3; i++) {
        int64_t n = c->B * heads[i] * rows[i] * c->D;
        if (c->three_d) {
            int64_t s[3] = {c->B * heads[i], rows[i], c->D};
            o->leaf[i] = o->x[i] = test_tensor(ctx, 3, s, host[i]);
        } else if (c->permuted) {
            float *y = malloc((size_t)n * sizeof *y);
            to_bthd(host[i], y, c->B, heads[i], rows[i], c->D);
            int64_t s[4] = {c->B, rows[i], heads[i], c->D};
            o->leaf[i] = test_tensor(ctx, 4, s, y);
            free(y);
            static const int axes[4] = {0, 2, 1, 3};
            o->x[i] = wgml_permute(ctx, o->leaf[i], axes);
        } else {
            int64_t s[4] = {c->B, heads[i], rows[i], c->D};
            o->leaf[i] = o->x[i] = test_tensor(ctx, 4, s, host[i]);
        }
    }
}

/* a leaf's gradient in [B,H,T,D] order */
static void read_grad(const acase *c, wgml_tensor *leaf, int64_t heads, int64_t rows, float *out)
{
    int64_t n = c->B * heads * rows * c->D;
    float *g = malloc((size_t)n * sizeof *g);
    wgml_tensor *gt = wgml_grad(leaf);
    CHECK(gt != NULL);
    if (gt) CHECK_OK(wgml_tensor_context(leaf), wgml_tensor_read(gt, g, (size_t)n));
    if (!c->permuted) {
        memcpy(out, g, (size_t)n * sizeof *g);
    } else { /* [B,T,H,D] back to [B,H,T,D] */
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t t = 0; t < rows; t++)
                    memcpy(out + ((b * heads + h) * rows + t) * c->D, g + ((b * rows + t) * heads + h) * c->D,
                           (size_t)c->D * sizeof *g);
    }
    free(g);
}

/* softmax(scale q k^T + mask) v through matmul, add, softmax and matmul: q, k, v [B,H,T,D]
   (k and v repeated over the query heads that share them) */
static wgml_tensor *unfused(wgml_context *ctx, const acase *c, wgml_tensor *const *x, float scale)
{
    int64_t BH = c->B * c->H, R = c->H / c->Hkv;
    int64_t sq[3] = {BH, c->T, c->D}, skv[3] = {BH, c->S, c->D};
    wgml_tensor *kv[2];
    for (int i = 0; i < 2; i++) {
        int64_t s5[4] = {c->B, c->Hkv, 1, c->S * c->D}, s6[4] = {c->B, c->Hkv, R, c->S * c->D};
        wgml_tensor *e = wgml_broadcast_to(ctx, wgml_reshape(ctx, x[1 + i], 4, s5), 4, s6);
        kv[i] = wgml_reshape(ctx, e, 3, skv);
    }
    wgml_tensor *q3 = wgml_reshape(ctx, x[0], 3, sq);
    wgml_matmul_desc md = {.trans_b = 1, .alpha = scale};
    wgml_tensor *s = wgml_matmul_ex(ctx, q3, kv[0], &md);
    if (c->causal) {
        float *mask = malloc((size_t)(c->T * c->S) * sizeof *mask);
        for (int64_t i = 0; i < c->T; i++)
            for (int64_t j = 0; j < c->S; j++) mask[i * c->S + j] = j <= i + c->S - c->T ? 0.0f : -INFINITY;
        int64_t sm[2] = {c->T, c->S};
        s = wgml_add(ctx, s, test_tensor(ctx, 2, sm, mask));
        free(mask);
    }
    wgml_tensor *y = wgml_matmul(ctx, wgml_softmax(ctx, s), kv[1]);
    int64_t so[4] = {c->B, c->H, c->T, c->D};
    return wgml_reshape(ctx, y, 4, so);
}

/* ---------------------------------------------------------------- one case */

typedef struct host_case {
    float *in[3], *w;      /* q, k, v [B,H,T,D] / [B,Hkv,S,D]; w: the loss weights (dout) */
    double *ref, *dref[3]; /* attention and its gradients, in double */
    double *terms;         /* the forward's terms (forward_terms) */
    size_t n[3];
} host_case;

static void host_free(host_case *h)
{
    for (int i = 0; i < 3; i++) free(h->in[i]), free(h->dref[i]);
    free(h->w);
    free(h->ref);
    free(h->terms);
}

static void host_make(const acase *c, host_case *h, float scale)
{
    h->n[0] = (size_t)(c->B * c->H * c->T * c->D);
    h->n[1] = h->n[2] = (size_t)(c->B * c->Hkv * c->S * c->D);
    double *d[3], *dw;
    for (int i = 0; i < 3; i++) {
        h->in[i] = malloc(h->n[i] * sizeof(float));
        test_fill_uniform(h->in[i], h->n[i], -2, 2);
        d[i] = test_to_double(h->in[i], h->n[i]);
        h->dref[i] = malloc(h->n[i] * sizeof(double));
    }
    h->w = malloc(h->n[0] * sizeof(float));
    test_fill_uniform(h->w, h->n[0], -1, 1);
    dw = test_to_double(h->w, h->n[0]);
    h->ref = malloc(h->n[0] * sizeof(double));
    /* the largest |scale q . k|: past 8, the bounds grow with it */
    double zmax = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t hh = 0; hh < c->H; hh++)
            for (int64_t i = 0; i < c->T; i++)
                for (int64_t j = 0; j < c->S; j++) {
                    const double *qi = d[0] + ((b * c->H + hh) * c->T + i) * c->D;
                    const double *kj = d[1] + ((b * c->Hkv + hh / (c->H / c->Hkv)) * c->S + j) * c->D;
                    double z = 0;
                    for (int64_t e = 0; e < c->D; e++) z += qi[e] * kj[e];
                    zmax = fmax(zmax, fabs(scale * z));
                }
    score_factor = fmax(1.0, zmax / 8);
    CHECK(wgml_ref_attention(c->B, c->H, c->Hkv, c->T, c->S, c->D, d[0], d[1], d[2], c->causal, scale, h->ref) == 0);
    h->terms = forward_terms(c->B, c->H, c->Hkv, c->T, c->S, c->D, d[0], d[1], d[2], c->causal, scale);
    CHECK(wgml_ref_attention_backward(c->B, c->H, c->Hkv, c->T, c->S, c->D, d[0], d[1], d[2], dw, c->causal, scale, h->dref[0],
                                      h->dref[1], h->dref[2]) == 0);
    for (int i = 0; i < 3; i++) free(d[i]);
    free(dw);
}

/* forward and gradients of L = sum(w * attention(q, k, v)) (or of the unfused composition);
   out[0] the output, out[1..3] dq, dk, dv in [B,H,T,D] order */
static void run(wgml_context *ctx, const acase *c, const host_case *h, bool fused, float **out)
{
    wgml_scope_begin(ctx);
    operands o;
    upload(ctx, c, h->in, &o);
    for (int i = 0; i < 3; i++) CHECK_OK(ctx, wgml_requires_grad(o.leaf[i], 1));
    bool out_bthd = c->layout == 1 || c->layout == 2, loss_bthd = c->layout == 1 || c->layout == 3;
    wgml_attention_desc desc = {.causal = c->causal, .scale = c->scale, .out_bthd = out_bthd};
    float scale = c->scale != 0.0f ? c->scale : (float)(1.0 / sqrt((double)c->D));
    wgml_tensor *y = fused ? wgml_attention(ctx, o.x[0], o.x[1], o.x[2], &desc) : unfused(ctx, c, o.x, scale);
    CHECK(wgml_tensor_status(y) == WGML_OK);
    int64_t s4[4] = {c->B, c->H, c->T, c->D}, sb[4] = {c->B, c->T, c->H, c->D};
    if (out_bthd) CHECK(wgml_tensor_dim(y, 1) == c->T && wgml_tensor_dim(y, 2) == c->H);
    static const int swap[4] = {0, 2, 1, 3};
    /* y as [B,H,T,D] (read and compared), and as the loss takes it */
    wgml_tensor *yh = c->three_d ? wgml_reshape(ctx, y, 4, s4) : out_bthd ? wgml_permute(ctx, y, swap) : y;
    wgml_tensor *yl = out_bthd == loss_bthd ? y : wgml_permute(ctx, y, swap), *w;
    if (loss_bthd) {
        float *wb = malloc(h->n[0] * sizeof *wb);
        to_bthd(h->w, wb, c->B, c->H, c->T, c->D);
        w = test_tensor(ctx, 4, sb, wb);
        free(wb);
    } else {
        w = test_tensor(ctx, 4, s4, h->w);
    }
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, c->three_d ? yh : yl, w));
    CHECK_OK(ctx, wgml_backward(L));
    CHECK_OK(ctx, wgml_tensor_read(yh, out[0], h->n[0]));
    int64_t heads[3] = {c->H, c->Hkv, c->Hkv}, rows[3] = {c->T, c->S, c->S};
    for (int i = 0; i < 3; i++) read_grad(c, o.leaf[i], heads[i], rows[i], out[1 + i]);
    wgml_scope_end(ctx);
}

static void check_case(wgml_context *ctx, const acase *c)
{
    float scale = c->scale != 0.0f ? c->scale : (float)(1.0 / sqrt((double)c->D));
    host_case h = {0};
    host_make(c, &h, scale);
    float *got[4], *again[4], *comp[4];
    size_t n[4] = {h.n[0], h.n[0], h.n[1], h.n[2]};
    for (int i = 0; i < 4; i++) {
        got[i] = calloc(n[i], sizeof(float));
        again[i] = calloc(n[i], sizeof(float));
        comp[i] = calloc(n[i], sizeof(float));
    }
    run(ctx, c, &h, true, got);
    static const char *const names[4] = {"forward", "dq", "dk", "dv"};
    compare(c, names[0], got[0], h.ref, h.terms, n[0], FWD_TOL);
    for (int i = 1; i < 4; i++) compare(c, names[i], got[i], h.dref[i - 1], NULL, n[i], GRAD_TOL);
    /* the same bits again */
    run(ctx, c, &h, true, again);
    for (int i = 0; i < 4; i++)
        if (memcmp(got[i], again[i], n[i] * sizeof(float))) {
            fprintf(stderr, "FAIL %s: %s: %s differs between two runs\n", test_current, c->name, names[i]);
            test_failures++;
        }
    if (c->unfused) { /* the composition's rounding differs from ours: both against the reference's bound */
        run(ctx, c, &h, false, comp);
        char what[64];
        for (int i = 0; i < 4; i++) {
            double *cd = test_to_double(comp[i], n[i]);
            snprintf(what, sizeof what, "%s vs unfused", names[i]);
            compare(c, what, got[i], cd, i ? NULL : h.terms, n[i], i ? 2 * GRAD_TOL : 2 * FWD_TOL);
            free(cd);
        }
    }
    for (int i = 0; i < 4; i++) free(got[i]), free(again[i]), free(comp[i]);
    host_free(&h);
}

/* ---------------------------------------------------------------- the tests */

static void matches_the_reference_and_the_composition(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    for (int i = 0; i < N_OF(cases); i++) check_case(ctx, &cases[i]);
}

/* other tile shapes than this adapter's policy picks (WGML_ATTN_TILES, read by a new
   context): the NVIDIA policy's larger tiles where they fit lavapipe's 32 KiB, 16-wide thread
   lines with every kernel's loads of the next step issued early (WGML_ATTN_PRE), and the
   smallest tiles (D = 128's on lavapipe) on the shapes above */
static void other_tiles_give_the_same_results(void)
{
    static const char *const tiles[] = {
        "64,64,16,32,32,16,32,32,16",  /* the 48 KiB policy (it fits here for D <= 32) */
        "32,64,16,16,32,16,16,32,16",  /* threads in lines of 16 */
        "16,16,8,16,8,8,16,8,8",       /* the smallest, many head dims per thread */
        "32,32,8,16,16,8,16,16,8",     /* the 48 KiB policy's tiles for D = 128 */
    };
    static const char *const pre[] = {"1", "15", "0", "1"};
    static const int picks[] = {1, 3, 4, 6, 8, 10, 11, 13, 14, 15, 19, 20};
    for (int t = 0; t < N_OF(tiles); t++) {
        setenv("WGML_ATTN_TILES", tiles[t], 1);
        setenv("WGML_ATTN_PRE", pre[t], 1);
        wgml_context *ctx = NULL;
        CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
        if (!ctx) break;
        fprintf(stderr, "  WGML_ATTN_TILES=%s WGML_ATTN_PRE=%s\n", tiles[t], pre[t]);
        for (int i = 0; i < N_OF(picks); i++) {
            acase c = cases[picks[i]];
            c.unfused = 0;
            check_case(ctx, &c);
        }
        wgml_context_free(ctx); /* (a context reads the knob when it first picks tiles) */
    }
    unsetenv("WGML_ATTN_TILES");
    unsetenv("WGML_ATTN_PRE");
}

static void expect_status(wgml_context *ctx, wgml_tensor *t, wgml_status want, const char *what)
{
    wgml_status st = wgml_tensor_status(t);
    const char *msg = wgml_error_message(ctx);
    if (st != want || !strstr(msg, "attention")) {
        fprintf(stderr, "FAIL %s: %s gave %s (%s), want %s\n", test_current, what, wgml_status_name(st), msg,
                wgml_status_name(want));
        test_failures++;
    }
    wgml_clear_error(ctx);
}

static void bad_inputs_are_refused(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_scope_begin(ctx);
    static float z[4 * 3 * 5 * 132];
    int64_t sq[4] = {2, 4, 5, 8}, skv[4] = {2, 2, 6, 8};
    wgml_tensor *q = test_tensor(ctx, 4, sq, z), *k = test_tensor(ctx, 4, skv, z), *v = test_tensor(ctx, 4, skv, z);
    CHECK(wgml_attention(NULL, q, k, v, NULL) == NULL);
    expect_status(ctx, wgml_attention(ctx, NULL, k, v, NULL), WGML_ERROR_INVALID_ARGUMENT, "q NULL");
    expect_status(ctx, wgml_attention(ctx, q, k, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, "v NULL");
    int64_t s2[2] = {5, 8}, s3[3] = {2, 6, 8};
    wgml_tensor *m2 = test_tensor(ctx, 2, s2, z), *m3 = test_tensor(ctx, 3, s3, z);
    expect_status(ctx, wgml_attention(ctx, m2, m2, m2, NULL), WGML_ERROR_SHAPE, "2-D operands");
    expect_status(ctx, wgml_attention(ctx, q, m3, m3, NULL), WGML_ERROR_SHAPE, "4-D q, 3-D k and v");
    int64_t sd[4] = {2, 2, 6, 7}, sh[4] = {2, 3, 6, 8}, sb[4] = {1, 2, 6, 8}, ss[4] = {2, 2, 7, 8};
    expect_status(ctx, wgml_attention(ctx, q, test_tensor(ctx, 4, sd, z), test_tensor(ctx, 4, sd, z), NULL), WGML_ERROR_SHAPE,
                  "D mismatch");
    expect_status(ctx, wgml_attention(ctx, q, test_tensor(ctx, 4, sh, z), test_tensor(ctx, 4, sh, z), NULL), WGML_ERROR_SHAPE,
                  "H = 4 over Hkv = 3");
    expect_status(ctx, wgml_attention(ctx, q, test_tensor(ctx, 4, sb, z), test_tensor(ctx, 4, sb, z), NULL), WGML_ERROR_SHAPE,
                  "B mismatch");
    expect_status(ctx, wgml_attention(ctx, q, k, test_tensor(ctx, 4, ss, z), NULL), WGML_ERROR_SHAPE, "k and v of other shapes");
    int32_t zi[2 * 4 * 5 * 8] = {0};
    wgml_tensor *qi = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 4, sq, zi, 2 * 4 * 5 * 8, &qi));
    expect_status(ctx, wgml_attention(ctx, qi, k, v, NULL), WGML_ERROR_INVALID_ARGUMENT, "i32 q");
    int64_t sq1[4] = {1, 1, 5, 132}, skv1[4] = {1, 1, 5, 132};
    wgml_tensor *big = test_tensor(ctx, 4, sq1, z), *bigkv = test_tensor(ctx, 4, skv1, z);
    expect_status(ctx, wgml_attention(ctx, big, bigkv, bigkv, NULL), WGML_ERROR_UNSUPPORTED, "D = 132");
    expect_status(ctx, wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.scale = NAN}), WGML_ERROR_INVALID_ARGUMENT, "NaN scale");
    expect_status(ctx, wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.scale = INFINITY}), WGML_ERROR_INVALID_ARGUMENT,
                  "inf scale");
    /* an input in an error state passes its status on */
    wgml_tensor *bad = wgml_reshape(ctx, q, 2, s2);
    CHECK(wgml_tensor_status(bad) == WGML_ERROR_SHAPE);
    wgml_clear_error(ctx);
    CHECK(wgml_tensor_status(wgml_attention(ctx, bad, k, v, NULL)) == WGML_ERROR_SHAPE);
    wgml_clear_error(ctx);
    /* and a good call after them works */
    wgml_tensor *y = wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.causal = 1});
    float out[2 * 4 * 5 * 8];
    CHECK_OK(ctx, wgml_tensor_read(y, out, 2 * 4 * 5 * 8));
    wgml_scope_end(ctx);
}

/* q, k and v as windows of one [B,T,(H+2Hkv)D] tensor (desc.packed, as a fused QKV projection
   makes them): the forward against the reference, and the gradient, one tensor that the
   kernels write in place (dQ, dK and dV rows at their heads' columns), against the reference's
   dq, dk and dv put back side by side: a wrong stride of b, h or t or a wrong offset of a part
   moves rows or leaves some unwritten. Grouped heads (dK and dV at other columns than dQ's
   heads would put them), several batches, T past one tile, rows read as vec4 and not;
   windows of the wrong order are refused */
static void packed_windows_take_one_gradient(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    static const struct { int64_t B, H, Hkv, T, D; int causal; } shapes[] = {
        {2, 3, 3, 13, 8, 1}, {1, 4, 2, 21, 12, 1}, {3, 2, 1, 7, 5, 1},
        {2, 4, 2, 70, 64, 1}, {2, 6, 2, 37, 33, 0}, {1, 3, 1, 129, 16, 1},
    };
    for (int sc = 0; sc < N_OF(shapes); sc++) {
        const int64_t B = shapes[sc].B, H = shapes[sc].H, Hkv = shapes[sc].Hkv, T = shapes[sc].T, D = shapes[sc].D;
        const int causal = shapes[sc].causal;
        const int64_t N = (H + 2 * Hkv) * D, n = B * T * N, ny = B * H * T * D;
        const double scale = 1.0 / sqrt((double)D);
        float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)ny * sizeof *w);
        test_fill_uniform(x, (size_t)n, -1, 1);
        test_fill_uniform(w, (size_t)ny, -1, 1);
        /* the reference's q, k, v [B,h,T,D] cut out of x's columns */
        const int64_t heads[3] = {H, Hkv, Hkv}, first[3] = {0, H, H + Hkv}; /* in heads */
        double *in[3], *d[3], *ref = malloc((size_t)ny * sizeof *ref), *wd = test_to_double(w, (size_t)ny);
        for (int i = 0; i < 3; i++) {
            size_t m = (size_t)(B * heads[i] * T * D);
            in[i] = malloc(m * sizeof **in), d[i] = malloc(m * sizeof **d);
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < heads[i]; h++)
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t e = 0; e < D; e++)
                            in[i][((b * heads[i] + h) * T + t) * D + e] = x[(b * T + t) * N + (first[i] + h) * D + e];
        }
        CHECK(wgml_ref_attention(B, H, Hkv, T, T, D, in[0], in[1], in[2], causal, scale, ref) == 0);
        double *terms = forward_terms(B, H, Hkv, T, T, D, in[0], in[1], in[2], causal, scale);
        CHECK(wgml_ref_attention_backward(B, H, Hkv, T, T, D, in[0], in[1], in[2], wd, causal, scale, d[0], d[1], d[2]) == 0);
        double *dref = malloc((size_t)n * sizeof *dref);
        for (int i = 0; i < 3; i++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < heads[i]; h++)
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t e = 0; e < D; e++)
                            dref[(b * T + t) * N + (first[i] + h) * D + e] = d[i][((b * heads[i] + h) * T + t) * D + e];

        wgml_scope_begin(ctx);
        int64_t s3[3] = {B, T, N}, s4[4] = {B, T, H + 2 * Hkv, D}, sy[4] = {B, H, T, D};
        wgml_tensor *qkv = test_tensor(ctx, 3, s3, x);
        CHECK_OK(ctx, wgml_requires_grad(qkv, 1));
        wgml_tensor *all = wgml_reshape(ctx, qkv, 4, s4), *part[3];
        static const int bhtd[4] = {0, 2, 1, 3};
        for (int i = 0; i < 3; i++) part[i] = wgml_permute(ctx, wgml_slice(ctx, all, 2, first[i], first[i] + heads[i], 1), bhtd);
        wgml_tensor *y = wgml_attention(ctx, part[0], part[1], part[2], &(wgml_attention_desc){.causal = causal, .packed = qkv});
        wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, 4, sy, w)));
        CHECK_OK(ctx, wgml_backward(L));
        float *got = test_read_new(ctx, "packed forward", y, ny), *grad = test_read_new(ctx, "packed gradient", wgml_grad(qkv), n);
        char name[64];
        snprintf(name, sizeof name, "packed B=%lld H=%lld/%lld T=%lld D=%lld%s", (long long)B, (long long)H, (long long)Hkv,
                 (long long)T, (long long)D, causal ? " causal" : "");
        acase c = {.name = name};
        score_factor = 1.0;
        if (got) compare(&c, "forward", got, ref, terms, (size_t)ny, FWD_TOL);
        if (grad) compare(&c, "d(qkv)", grad, dref, NULL, (size_t)n, GRAD_TOL);
        /* k's and v's windows swapped: not what packed says */
        wgml_tensor *bad = wgml_attention(ctx, part[0], part[2], part[1], &(wgml_attention_desc){.causal = 1, .packed = qkv});
        CHECK(wgml_tensor_status(bad) == WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "desc.packed"));
        wgml_clear_error(ctx);
        wgml_scope_end(ctx);
        free(got), free(grad), free(x), free(w), free(ref), free(terms), free(wd), free(dref);
        for (int i = 0; i < 3; i++) free(in[i]), free(d[i]);
    }
}

/* a sequence whose key loop would pass the adapter's loop limit (lowered here through
   WGML_LOOP_LIMIT) is refused with a status that says so, not run into a wrong answer */
static void loops_past_the_limit_are_refused(void)
{
    setenv("WGML_LOOP_LIMIT", "40", 1);
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    unsetenv("WGML_LOOP_LIMIT");
    if (!ctx) return;
    int64_t s[4] = {1, 1, 300, 64};
    float *x = calloc(300 * 64, sizeof *x);
    wgml_tensor *q = test_tensor(ctx, 4, s, x);
    wgml_tensor *y = wgml_attention(ctx, q, q, q, NULL);
    CHECK_STATUS(ctx, wgml_tensor_read(y, x, 300 * 64), WGML_ERROR_LIMIT);
    CHECK(strstr(wgml_error_message(ctx), "attention") != NULL);
    free(x);
    wgml_context_free(ctx);
}

/* The dispatches of a forward and backward pass of a GPT's attention pattern: heads to [B,T,C]
   (`pattern` 1: the result written [B,T,H,D] and reshaped; 2: [B,H,T,D] permuted and reshaped,
   a copy; 0: [B,H,T,D] reshaped as it lies, the same launches with no copy, wrong for a model
   but a count to compare with), then the output projection and a weighted sum. */
static uint64_t pattern_dispatches(wgml_context *ctx, int pattern)
{
    const int64_t B = 2, H = 3, T = 17, D = 8, C = H * D, n = B * T * C;
    float *x = malloc((size_t)(n + C * C) * sizeof *x);
    test_fill_uniform(x, (size_t)(n + C * C), -1, 1);
    wgml_scope_begin(ctx);
    int64_t s[4] = {B, H, T, D}, sw[2] = {C, C}, sr[2] = {B * T, C};
    wgml_tensor *in[3], *wo = test_tensor(ctx, 2, sw, x + n), *w = test_tensor(ctx, 2, sr, x);
    for (int i = 0; i < 3; i++) {
        in[i] = test_tensor(ctx, 4, s, x + i * 7);
        CHECK_OK(ctx, wgml_requires_grad(in[i], 1));
    }
    CHECK_OK(ctx, wgml_synchronize(ctx));
    wgml_stats a, b;
    CHECK_OK(ctx, wgml_stats_get(ctx, &a));
    static const int swap[4] = {0, 2, 1, 3};
    wgml_tensor *y = wgml_attention(ctx, in[0], in[1], in[2], &(wgml_attention_desc){.causal = 1, .out_bthd = pattern == 1});
    if (pattern == 2) y = wgml_permute(ctx, y, swap);
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_matmul(ctx, wgml_reshape(ctx, y, 2, sr), wo), w));
    CHECK_OK(ctx, wgml_backward(L));
    wgml_tensor *all[4] = {wgml_grad(in[0]), wgml_grad(in[1]), wgml_grad(in[2]), L};
    CHECK_OK(ctx, wgml_eval(ctx, 4, all));
    CHECK_OK(ctx, wgml_stats_get(ctx, &b));
    wgml_scope_end(ctx);
    free(x);
    return b.dispatches - a.dispatches;
}

/* [B,T,H,D] out (desc.out_bthd) and a reshape to [B,T,C]: no copy launch, forward or backward,
   against the same graph without the heads' reordering; permuting [B,H,T,D] costs the
   forward's copy only (the gradient reads the permuted dO through its strides) */
static void no_copy_around_the_attention(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    uint64_t none = pattern_dispatches(ctx, 0), bthd = pattern_dispatches(ctx, 1), permuted = pattern_dispatches(ctx, 2);
    fprintf(stderr, "  dispatches: %llu as it lies, %llu written [B,T,H,D], %llu permuted\n", (unsigned long long)none,
            (unsigned long long)bthd, (unsigned long long)permuted);
    CHECK(none > 4);
    CHECK(bthd == none);
    CHECK(permuted == none + 1);
}

/* forward + backward at T = 1024 hold a few [B,H,T,D] tensors, never a [T,T] matrix */
static void memory_stays_linear_in_T(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t B = 1, H = 2, T = 1024, D = 16, n = B * H * T * D;
    float *x = malloc((size_t)n * sizeof *x);
    test_fill_uniform(x, (size_t)n, -1, 1);
    wgml_scope_begin(ctx);
    int64_t s[4] = {B, H, T, D};
    wgml_tensor *q = test_tensor(ctx, 4, s, x), *k = test_tensor(ctx, 4, s, x), *v = test_tensor(ctx, 4, s, x);
    wgml_tensor *w = test_tensor(ctx, 4, s, x);
    for (int i = 0; i < 3; i++) CHECK_OK(ctx, wgml_requires_grad(i == 0 ? q : i == 1 ? k : v, 1));
    wgml_stats st0, st1;
    CHECK_OK(ctx, wgml_synchronize(ctx));
    wgml_stats_reset_peaks(ctx);
    CHECK_OK(ctx, wgml_stats_get(ctx, &st0));
    wgml_tensor *y = wgml_attention(ctx, q, k, v, &(wgml_attention_desc){.causal = 1});
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, w));
    CHECK_OK(ctx, wgml_backward(L));
    wgml_tensor *grads[4] = {wgml_grad(q), wgml_grad(k), wgml_grad(v), L};
    CHECK_OK(ctx, wgml_eval(ctx, 4, grads));
    CHECK_OK(ctx, wgml_stats_get(ctx, &st1));
    uint64_t extra = st1.bytes_in_use_peak - st0.bytes_in_use, scores = (uint64_t)(B * H * T * T * 4);
    fprintf(stderr, "  B=%lld H=%lld T=%lld D=%lld: peak %.2f MiB above the inputs; the scores would be %.2f MiB\n",
            (long long)B, (long long)H, (long long)T, (long long)D, extra / 1048576.0, scores / 1048576.0);
    CHECK(extra < scores / 4);
    wgml_scope_end(ctx);
    free(x);
}

int main(void)
{
    TEST_RUN(matches_the_reference_and_the_composition);
    TEST_RUN(other_tiles_give_the_same_results);
    TEST_RUN(bad_inputs_are_refused);
    TEST_RUN(packed_windows_take_one_gradient);
    TEST_RUN(no_copy_around_the_attention);
    TEST_RUN(loops_past_the_limit_are_refused);
    TEST_RUN(memory_stays_linear_in_T);
    return test_summary();
}
