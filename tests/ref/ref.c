/* The double-precision CPU reference; see ref.h. */
#include "ref/ref.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

/* 1 if nd is in 1..WGML_REF_MAX_DIMS and every dim is >= 0. */
static int shape_ok(int nd, const int64_t *shape)
{
    if (nd < 1 || nd > WGML_REF_MAX_DIMS || !shape) return 0;
    for (int i = 0; i < nd; i++)
        if (shape[i] < 0) return 0;
    return 1;
}

/* product of shape[lo..hi-1] (1 when empty) */
static int64_t prod(const int64_t *shape, int lo, int hi)
{
    int64_t p = 1;
    for (int i = lo; i < hi; i++) p *= shape[i];
    return p;
}

/* contiguous row-major strides of shape, in elements */
static void strides_of(int nd, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

/* Advances the multi-index idx over shape (last axis fastest) and the offsets off[k]
   by strides[k][d] for each axis d stepped; nstr sets of strides are carried along. */
static void odometer_step(int nd, const int64_t *shape, int64_t *idx, int nstr,
                          int64_t strides[][WGML_REF_MAX_DIMS], int64_t *off)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d]++;
        for (int k = 0; k < nstr; k++) off[k] += strides[k][d];
        if (idx[d] < shape[d]) return;
        for (int k = 0; k < nstr; k++) off[k] -= strides[k][d] * shape[d];
        idx[d] = 0;
    }
}

/* An array of count doubles (at least one, so malloc(0) is never asked), or NULL when
   count is negative, overflows size_t, or malloc fails. zero: calloc. */
static double *alloc_doubles(int64_t count, int zero)
{
    if (count < 0 || (uint64_t)count > SIZE_MAX / sizeof(double)) return NULL;
    size_t n = count ? (size_t)count : 1;
    return zero ? calloc(n, sizeof(double)) : malloc(n * sizeof(double));
}

/* ---------------------------------------------------------------- elementwise scalars */

double wgml_ref_neg(double x) { return -x; }
double wgml_ref_abs(double x) { return fabs(x); }
double wgml_ref_exp(double x) { return exp(x); }
double wgml_ref_log(double x) { return log(x); }
double wgml_ref_sqrt(double x) { return sqrt(x); }
double wgml_ref_rsqrt(double x) { return 1.0 / sqrt(x); }
double wgml_ref_tanh(double x) { return tanh(x); }

double wgml_ref_sigmoid(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x); /* NaN lands here and stays NaN */
    return e / (1.0 + e);
}

double wgml_ref_relu(double x)
{
    if (isnan(x)) return x;
    return x > 0 ? x : 0.0;
}

double wgml_ref_gelu(double x)
{
    if (isinf(x)) return x > 0 ? x : 0.0; /* the formula gives -inf * 0 = NaN */
    const double k = 0.7978845608028654; /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

double wgml_ref_silu(double x)
{
    if (isinf(x)) return x > 0 ? x : 0.0;
    return x * wgml_ref_sigmoid(x);
}

double wgml_ref_add(double a, double b) { return a + b; }
double wgml_ref_sub(double a, double b) { return a - b; }
double wgml_ref_mul(double a, double b) { return a * b; }
double wgml_ref_div(double a, double b) { return a / b; }
double wgml_ref_pow(double a, double b) { return pow(a, b); }

double wgml_ref_maximum(double a, double b)
{
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? b : a; /* maximum(-0, +0) = +0 */
    return a > b ? a : b;
}

double wgml_ref_minimum(double a, double b)
{
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a == b) return signbit(a) ? a : b; /* minimum(-0, +0) = -0 */
    return a < b ? a : b;
}

double wgml_ref_round_half(double x)
{
    if (isnan(x) || isinf(x)) return x;
    double a = fabs(x);
    if (a >= 65520.0) return copysign(INFINITY, x);
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): 11 significant bits keep steps of 2^(e - 11) */
    double step = a < 0x1p-14 ? 0x1p-24 : ldexp(1.0, e - 11);
    return copysign(nearbyint(a / step) * step, x); /* nearbyint: the default mode, ties to even */
}

double wgml_ref_clamp(double x, double lo, double hi)
{
    return wgml_ref_minimum(wgml_ref_maximum(x, lo), hi);
}

/* x is (n,), out is (n,) */
void wgml_ref_unary(double (*f)(double), int64_t n, const double *x, double *out)
{
    for (int64_t i = 0; i < n; i++) out[i] = f(x[i]);
}

/* ---------------------------------------------------------------- broadcasting */

/* sa is (na,), sb is (nb,), sout is (max(na, nb),) */
int wgml_ref_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout,
                             int64_t *sout)
{
    if (!shape_ok(na, sa) || !shape_ok(nb, sb)) return -1;
    int n = na > nb ? na : nb;
    int64_t tmp[WGML_REF_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da == db || db == 1) tmp[i] = da;
        else if (da == 1) tmp[i] = db;
        else return -1;
    }
    for (int i = 0; i < n; i++) sout[i] = tmp[i];
    *nout = n;
    return 0;
}

/* Strides (in elements) for reading a tensor of shape s (ns dims) as if it had shape
   sout (n >= ns dims, right-aligned): 0 along broadcast dims. */
static void broadcast_strides(int ns, const int64_t *s, int n, int64_t *strides)
{
    int64_t own[WGML_REF_MAX_DIMS];
    strides_of(ns, s, own);
    for (int i = 0; i < n; i++) {
        int j = i - (n - ns);
        strides[i] = (j >= 0 && s[j] != 1) ? own[j] : 0;
    }
}

/* a is sa, b is sb, out is broadcast(sa, sb) */
void wgml_ref_binary(double (*f)(double, double), int na, const int64_t *sa, const double *a,
                     int nb, const int64_t *sb, const double *b, double *out)
{
    int n;
    int64_t so[WGML_REF_MAX_DIMS];
    if (wgml_ref_broadcast_shape(na, sa, nb, sb, &n, so) != 0) return;
    int64_t st[2][WGML_REF_MAX_DIMS];
    broadcast_strides(na, sa, n, st[0]);
    broadcast_strides(nb, sb, n, st[1]);
    int64_t total = prod(so, 0, n), idx[WGML_REF_MAX_DIMS] = {0}, off[2] = {0, 0};
    for (int64_t i = 0; i < total; i++) {
        out[i] = f(a[off[0]], b[off[1]]);
        odometer_step(n, so, idx, 2, st, off);
    }
}

/* a is sa, out is sout */
int wgml_ref_broadcast_to(int na, const int64_t *sa, const double *a, int nout,
                          const int64_t *sout, double *out)
{
    if (!shape_ok(na, sa) || !shape_ok(nout, sout) || na > nout) return -1;
    for (int j = 0; j < na; j++) {
        int64_t d = sa[j], t = sout[j + (nout - na)];
        if (d != t && d != 1) return -1;
    }
    int64_t st[1][WGML_REF_MAX_DIMS];
    broadcast_strides(na, sa, nout, st[0]);
    int64_t total = prod(sout, 0, nout), idx[WGML_REF_MAX_DIMS] = {0}, off[1] = {0};
    for (int64_t i = 0; i < total; i++) {
        out[i] = a[off[0]];
        odometer_step(nout, sout, idx, 1, st, off);
    }
    return 0;
}

/* ---------------------------------------------------------------- reductions */

/* Splits shape around axis: x is (outer, n, inner). 0 when the arguments are invalid. */
static int split_axis(int nd, const int64_t *shape, int axis, int64_t *outer, int64_t *n,
                      int64_t *inner)
{
    if (!shape_ok(nd, shape) || axis < 0 || axis >= nd) return 0;
    *outer = prod(shape, 0, axis);
    *n = shape[axis];
    *inner = prod(shape, axis + 1, nd);
    return 1;
}

/* x is (outer, n, inner), out is (outer, inner) */
void wgml_ref_sum(int nd, const int64_t *shape, const double *x, int axis, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t k = 0; k < n; k++) s += x[(o * n + k) * inner + i];
            out[o * inner + i] = s;
        }
}

/* x is (outer, n, inner), out is (outer, inner) */
void wgml_ref_mean(int nd, const int64_t *shape, const double *x, int axis, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    wgml_ref_sum(nd, shape, x, axis, out);
    for (int64_t i = 0; i < outer * inner; i++) out[i] = n ? out[i] / (double)n : NAN;
}

/* x is (outer, n, inner), out is (outer, inner) */
void wgml_ref_max(int nd, const int64_t *shape, const double *x, int axis, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY;
            for (int64_t k = 0; k < n; k++)
                m = wgml_ref_maximum(m, x[(o * n + k) * inner + i]);
            out[o * inner + i] = m;
        }
}

/* x is (outer, n, inner), out is (outer, inner) */
void wgml_ref_argmax(int nd, const int64_t *shape, const double *x, int axis, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = n ? 0 : -1;
            for (int64_t k = 0; k < n; k++) {
                double v = x[(o * n + k) * inner + i];
                if (isnan(v)) { best = k; break; }
                if (v > x[(o * n + best) * inner + i]) best = k; /* ties keep the first */
            }
            out[o * inner + i] = (double)best;
        }
}

/* x is (n,) */
double wgml_ref_sum_all(int64_t n, const double *x)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* x is (n,) */
double wgml_ref_mean_all(int64_t n, const double *x)
{
    return n > 0 ? wgml_ref_sum_all(n, x) / (double)n : NAN;
}

/* x is (n,) */
double wgml_ref_max_all(int64_t n, const double *x)
{
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = wgml_ref_maximum(m, x[i]);
    return m;
}

/* ---------------------------------------------------------------- along the last axis */

/* the max of a row (NaN propagates) and log(sum(exp(row - max))) */
static void row_max_lse(int64_t n, const double *row, double *max, double *log_sum)
{
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; j++) m = wgml_ref_maximum(m, row[j]);
    for (int64_t j = 0; j < n; j++) s += exp(row[j] - m);
    *max = m;
    *log_sum = log(s);
}

/* x is (rows, n), out is (rows, n) */
void wgml_ref_softmax(int64_t rows, int64_t n, const double *x, double *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double *o = out + r * n, m = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; j++) m = wgml_ref_maximum(m, xr[j]);
        for (int64_t j = 0; j < n; j++) {
            o[j] = exp(xr[j] - m);
            s += o[j];
        }
        for (int64_t j = 0; j < n; j++) o[j] /= s;
    }
}

/* x is (rows, n), out is (rows, n) */
void wgml_ref_log_softmax(int64_t rows, int64_t n, const double *x, double *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double m, ls;
        row_max_lse(n, xr, &m, &ls);
        for (int64_t j = 0; j < n; j++) out[r * n + j] = xr[j] - m - ls;
    }
}

/* x is (rows, n), weight is (n,) or NULL, bias is (n,) or NULL, out is (rows, n) */
void wgml_ref_layernorm(int64_t rows, int64_t n, const double *x, const double *weight,
                        const double *bias, double eps, double *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++) mean += xr[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double d = xr[j] - mean;
            var += d * d;
        }
        var /= (double)n; /* biased, as PyTorch */
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < n; j++) {
            double y = (xr[j] - mean) * inv;
            if (weight) y *= weight[j];
            if (bias) y += bias[j];
            out[r * n + j] = y;
        }
    }
}

/* x is (rows, n), weight is (n,) or NULL, out is (rows, n) */
void wgml_ref_rmsnorm(int64_t rows, int64_t n, const double *x, const double *weight,
                      double eps, double *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double ss = 0;
        for (int64_t j = 0; j < n; j++) ss += xr[j] * xr[j];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t j = 0; j < n; j++) {
            double y = xr[j] * inv;
            if (weight) y *= weight[j];
            out[r * n + j] = y;
        }
    }
}

void wgml_ref_normalize(int64_t rows, int64_t n, const double *x, double eps, double *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double ss = 0;
        for (int64_t j = 0; j < n; j++) ss += xr[j] * xr[j];
        double d = fmax(sqrt(ss), eps);
        for (int64_t j = 0; j < n; j++) out[r * n + j] = xr[j] / d;
    }
}

/* d norm(x) / dx times g, rows of n: x, g, dx (rows, n), weight (n,) or NULL; centred:
   layernorm, else rmsnorm. dx = r (gh - xh mean(gh xh) - [centred] mean(gh)), gh = g w */
void wgml_ref_norm_grad(int64_t rows, int64_t n, const double *x, const double *weight, const double *g, double eps,
                        int centred, double *dx)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n, *gr = g + r * n;
        double mean = 0, var = 0, m1 = 0, m2 = 0;
        if (centred) {
            for (int64_t j = 0; j < n; j++) mean += xr[j];
            mean /= (double)n;
        }
        for (int64_t j = 0; j < n; j++) var += (xr[j] - mean) * (xr[j] - mean);
        double inv = 1.0 / sqrt(var / (double)n + eps);
        for (int64_t j = 0; j < n; j++) {
            double gh = gr[j] * (weight ? weight[j] : 1.0);
            m1 += gh;
            m2 += gh * (xr[j] - mean) * inv;
        }
        m1 = centred ? m1 / (double)n : 0.0;
        m2 /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double gh = gr[j] * (weight ? weight[j] : 1.0);
            dx[r * n + j] = inv * (gh - (xr[j] - mean) * inv * m2 - m1);
        }
    }
}

/* ---------------------------------------------------------------- scans and positions */

/* x is (outer, n, inner), out is (outer, n, inner) */
void wgml_ref_cumsum(int nd, const int64_t *shape, const double *x, int axis, int reverse, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t q = 0; q < n; q++) {
                int64_t k = reverse ? n - 1 - q : q;
                s += x[(o * n + k) * inner + i];
                out[(o * n + k) * inner + i] = s;
            }
        }
}

/* x is (batch, T, D), out is (batch, T, D) */
void wgml_ref_rope(int64_t batch, int64_t T, int64_t D, const double *x, double pos_offset, double base,
                   int interleaved, int inverse, double *out)
{
    if (batch < 0 || T < 0 || D < 2 || D % 2 || !(base > 0)) return;
    int64_t half = D / 2;
    for (int64_t r = 0; r < batch * T; r++) {
        double pos = (double)(r % T) + pos_offset;
        const double *xr = x + r * D;
        double *o = out + r * D;
        for (int64_t j = 0; j < half; j++) {
            double a = pos * pow(base, -2.0 * (double)j / (double)D), c = cos(a), s = inverse ? -sin(a) : sin(a);
            int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
            o[i1] = xr[i1] * c - xr[i2] * s;
            o[i2] = xr[i2] * c + xr[i1] * s;
        }
    }
}

/* ---------------------------------------------------------------- movement */

/* x is shape, out is (shape[axes[0]], ..., shape[axes[nd-1]]) */
void wgml_ref_permute(int nd, const int64_t *shape, const double *x, const int *axes,
                      double *out)
{
    if (!shape_ok(nd, shape) || !axes) return;
    int seen[WGML_REF_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) {
        if (axes[i] < 0 || axes[i] >= nd || seen[axes[i]]) return;
        seen[axes[i]] = 1;
    }
    int64_t in_st[WGML_REF_MAX_DIMS], oshape[WGML_REF_MAX_DIMS], st[1][WGML_REF_MAX_DIMS];
    strides_of(nd, shape, in_st);
    for (int i = 0; i < nd; i++) {
        oshape[i] = shape[axes[i]];
        st[0][i] = in_st[axes[i]];
    }
    int64_t total = prod(oshape, 0, nd), idx[WGML_REF_MAX_DIMS] = {0}, off[1] = {0};
    for (int64_t i = 0; i < total; i++) {
        out[i] = x[off[0]];
        odometer_step(nd, oshape, idx, 1, st, off);
    }
}

int64_t wgml_ref_slice_len(int64_t start, int64_t stop, int64_t step)
{
    if (step < 1 || stop <= start) return 0;
    return (stop - start - 1) / step + 1;
}

/* x is (outer, n, inner), out is (outer, slice_len, inner) */
void wgml_ref_slice(int nd, const int64_t *shape, const double *x, int axis, int64_t start,
                    int64_t stop, int64_t step, double *out)
{
    int64_t outer, n, inner;
    if (!split_axis(nd, shape, axis, &outer, &n, &inner)) return;
    if (step < 1 || start < 0 || start > stop || stop > n) return;
    int64_t len = wgml_ref_slice_len(start, stop, step);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            memcpy(out + (o * len + j) * inner, x + (o * n + start + j * step) * inner,
                   (size_t)inner * sizeof(double));
}

/* ---------------------------------------------------------------- matmul */

static double apply_act(int act, double y)
{
    switch (act) {
    case 1: return wgml_ref_relu(y);
    case 2: return wgml_ref_gelu(y);
    case 3: return wgml_ref_silu(y);
    case 4: return 0.5 * y * erfc(-y / sqrt(2.0));
    default: return y;
    }
}

/* A is (batch_a, M, K) or (batch_a, K, M) if trans_a; B is (batch_b, K, N) or
   (batch_b, N, K) if trans_b; bias is (N,) or NULL; C is (batch, M, N) */
void wgml_ref_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const double *A,
                     int64_t batch_a, int trans_a, const double *B, int64_t batch_b,
                     int trans_b, double alpha, const double *bias, int act, double *C)
{
    /* element (m, k) of op(A) is at m*a_m + k*a_k; (k, n) of op(B) at k*b_k + n*b_n */
    int64_t a_m = trans_a ? 1 : K, a_k = trans_a ? M : 1;
    int64_t b_k = trans_b ? 1 : N, b_n = trans_b ? K : 1;
    for (int64_t bt = 0; bt < batch; bt++) {
        const double *Ab = A + (batch_a == 1 ? 0 : bt) * M * K;
        const double *Bb = B + (batch_b == 1 ? 0 : bt) * K * N;
        double *Cb = C + bt * M * N;
        for (int64_t m = 0; m < M; m++) {
            double *c = Cb + m * N;
            for (int64_t n = 0; n < N; n++) c[n] = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = Ab[m * a_m + k * a_k];
                const double *brow = Bb + k * b_k;
                for (int64_t n = 0; n < N; n++) c[n] += a * brow[n * b_n];
            }
            for (int64_t n = 0; n < N; n++)
                c[n] = apply_act(act, alpha * c[n] + (bias ? bias[n] : 0.0));
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* p (S,) := the softmax weights of query row qi over the keys it sees (0 elsewhere); returns
   how many keys it sees */
static int64_t attention_row(int64_t T, int64_t S, int64_t D, const double *qi, int64_t i,
                             const double *kg, int causal, double scale, double *p)
{
    int64_t seen = causal ? i + S - T + 1 : S;
    if (seen > S) seen = S;
    if (seen <= 0) {
        memset(p, 0, (size_t)S * sizeof *p);
        return 0;
    }
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < seen; j++) {
        double z = 0;
        for (int64_t d = 0; d < D; d++) z += qi[d] * kg[j * D + d];
        p[j] = scale * z;
        m = wgml_ref_maximum(m, p[j]);
    }
    for (int64_t j = 0; j < seen; j++) sum += p[j] = exp(p[j] - m);
    for (int64_t j = 0; j < seen; j++) p[j] /= sum;
    for (int64_t j = seen; j < S; j++) p[j] = 0;
    return seen;
}

int wgml_ref_attention(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S, int64_t D,
                       const double *q, const double *k, const double *v, int causal,
                       double scale, double *out)
{
    double *p = malloc((size_t)S * sizeof *p);
    if (!p) return -1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / Hkv);
            const double *kg = k + (b * Hkv + g) * S * D, *vg = v + (b * Hkv + g) * S * D;
            for (int64_t i = 0; i < T; i++) {
                const double *qi = q + ((b * H + h) * T + i) * D;
                double *o = out + ((b * H + h) * T + i) * D;
                int64_t seen = attention_row(T, S, D, qi, i, kg, causal, scale, p);
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < seen; j++) acc += p[j] * vg[j * D + d];
                    o[d] = acc;
                }
            }
        }
    free(p);
    return 0;
}

/* per query row: dp_j = dout . v_j, dz_j = p_j (dp_j - sum_j' p_j' dp_j'), then
   dq = scale sum_j dz_j k_j, dk_j += scale dz_j q, dv_j += p_j dout */
int wgml_ref_attention_backward(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S,
                                int64_t D, const double *q, const double *k, const double *v,
                                const double *dout, int causal, double scale, double *dq,
                                double *dk, double *dv)
{
    double *p = malloc((size_t)S * 2 * sizeof *p);
    if (!p) return -1;
    double *dz = p + S;
    memset(dk, 0, (size_t)(B * Hkv * S * D) * sizeof *dk);
    memset(dv, 0, (size_t)(B * Hkv * S * D) * sizeof *dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / Hkv);
            const double *kg = k + (b * Hkv + g) * S * D, *vg = v + (b * Hkv + g) * S * D;
            double *dkg = dk + (b * Hkv + g) * S * D, *dvg = dv + (b * Hkv + g) * S * D;
            for (int64_t i = 0; i < T; i++) {
                int64_t row = ((b * H + h) * T + i) * D;
                int64_t seen = attention_row(T, S, D, q + row, i, kg, causal, scale, p);
                double delta = 0;
                for (int64_t j = 0; j < seen; j++) {
                    double dp = 0;
                    for (int64_t d = 0; d < D; d++) dp += dout[row + d] * vg[j * D + d];
                    dz[j] = dp;
                    delta += p[j] * dp;
                }
                for (int64_t d = 0; d < D; d++) dq[row + d] = 0;
                for (int64_t j = 0; j < seen; j++) {
                    dz[j] = p[j] * (dz[j] - delta);
                    for (int64_t d = 0; d < D; d++) {
                        dq[row + d] += scale * dz[j] * kg[j * D + d];
                        dkg[j * D + d] += scale * dz[j] * q[row + d];
                        dvg[j * D + d] += p[j] * dout[row + d];
                    }
                }
            }
        }
    free(p);
    return 0;
}

/* ---------------------------------------------------------------- losses */

/* pred is (n,), target is (n,) */
double wgml_ref_mse(int64_t n, const double *pred, const double *target)
{
    if (n <= 0) return NAN;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = pred[i] - target[i];
        s += d * d;
    }
    return s / (double)n;
}

/* logits is (rows, classes), labels is (rows,) */
double wgml_ref_cross_entropy(int64_t rows, int64_t classes, const double *logits,
                              const int32_t *labels)
{
    if (rows <= 0) return NAN;
    double s = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (labels[r] < 0 || labels[r] >= classes) return NAN;
        double m, ls;
        row_max_lse(classes, logits + r * classes, &m, &ls);
        s += m + ls - logits[r * classes + labels[r]];
    }
    return s / (double)rows;
}

/* ---------------------------------------------------------------- MLP training */

static int64_t w_count(const wgml_ref_mlp *m, int l) { return m->sizes[l] * m->sizes[l + 1]; }

void wgml_ref_mlp_free(wgml_ref_mlp *m)
{
    if (!m) return;
    for (int l = 0; l < 7; l++) {
        free(m->W[l]); free(m->b[l]); free(m->gW[l]); free(m->gb[l]);
        free(m->mW[l]); free(m->mb[l]); free(m->vW[l]); free(m->vb[l]);
    }
    memset(m, 0, sizeof *m);
}

/* sizes is (nlayers+1,), W_init[l] is (sizes[l], sizes[l+1]), b_init[l] is (sizes[l+1],) */
int wgml_ref_mlp_init(wgml_ref_mlp *m, int nlayers, const int64_t *sizes,
                      const float *const *W_init, const float *const *b_init)
{
    if (!m) return -1;
    memset(m, 0, sizeof *m);
    if (nlayers < 1 || nlayers > 7 || !sizes || !W_init) return -1;
    for (int l = 0; l <= nlayers; l++) {
        /* keep every product (and B * sum) far from int64 overflow */
        if (sizes[l] < 1 || sizes[l] > ((int64_t)1 << 30)) return -1;
        if (l < nlayers && !W_init[l]) return -1;
    }
    m->nlayers = nlayers;
    for (int l = 0; l <= nlayers; l++) m->sizes[l] = sizes[l];
    for (int l = 0; l < nlayers; l++) {
        int64_t nw = w_count(m, l), nb = sizes[l + 1];
        double **wa[4] = {&m->W[l], &m->gW[l], &m->mW[l], &m->vW[l]};
        double **ba[4] = {&m->b[l], &m->gb[l], &m->mb[l], &m->vb[l]};
        for (int i = 0; i < 4; i++) {
            *wa[i] = alloc_doubles(nw, 1);
            *ba[i] = alloc_doubles(nb, 1);
            if (!*wa[i] || !*ba[i]) {
                wgml_ref_mlp_free(m);
                return -1;
            }
        }
        for (int64_t i = 0; i < nw; i++) m->W[l][i] = (double)W_init[l][i];
        if (b_init && b_init[l])
            for (int64_t i = 0; i < nb; i++) m->b[l][i] = (double)b_init[l][i];
    }
    return 0;
}

/* The activations of every layer in one block: acts[l] is (B, sizes[l]) for
   l = 0..nlayers (acts[0] = x, acts[nlayers] = logits); extra doubles after them for the
   caller. Returns the block (free it) or NULL. */
static double *mlp_forward_acts(const wgml_ref_mlp *m, int64_t B, const float *x,
                                int64_t extra, double **acts)
{
    int L = m->nlayers;
    int64_t total = extra;
    for (int l = 0; l <= L; l++) {
        if (B > (INT64_MAX - total) / m->sizes[l]) return NULL;
        total += B * m->sizes[l];
    }
    double *block = alloc_doubles(total, 0);
    if (!block) return NULL;
    double *p = block;
    for (int l = 0; l <= L; l++) {
        acts[l] = p;
        p += B * m->sizes[l];
    }
    for (int64_t i = 0; i < B * m->sizes[0]; i++) acts[0][i] = (double)x[i];
    for (int l = 0; l < L; l++)
        /* acts[l + 1] = acts[l] W[l] + b[l], then relu except on the last layer */
        wgml_ref_matmul(1, B, m->sizes[l + 1], m->sizes[l], acts[l], 1, 0, m->W[l], 1, 0, 1.0,
                        m->b[l], l < L - 1 ? 1 : 0, acts[l + 1]);
    return block;
}

/* x is (B, sizes[0]), logits is (B, sizes[nlayers]) */
int wgml_ref_mlp_forward(const wgml_ref_mlp *m, int64_t B, const float *x, double *logits)
{
    if (!m || m->nlayers < 1 || B < 1) return -1;
    double *acts[8];
    double *block = mlp_forward_acts(m, B, x, 0, acts);
    if (!block) return -1;
    memcpy(logits, acts[m->nlayers], (size_t)(B * m->sizes[m->nlayers]) * sizeof(double));
    free(block);
    return 0;
}

/* x is (B, sizes[0]), labels is (B,) */
int wgml_ref_mlp_loss_grad_ex(wgml_ref_mlp *m, int64_t B, const float *x,
                              const int32_t *labels, double *loss)
{
    if (!m || m->nlayers < 1 || B < 1) return -1;
    int L = m->nlayers;
    int64_t C = m->sizes[L], widest = 1;
    for (int64_t r = 0; r < B; r++)
        if (labels[r] < 0 || labels[r] >= C) return -1;
    for (int l = 1; l <= L; l++)
        if (m->sizes[l] > widest) widest = m->sizes[l];
    if (B > INT64_MAX / 2 / widest) return -1;

    /* dz is (B, sizes[l+1]): d(loss)/d(pre-activation of layer l); two buffers swap */
    double *acts[8];
    double *block = mlp_forward_acts(m, B, x, 2 * B * widest, acts);
    if (!block) return -1;
    double *dz = acts[L] + B * C, *dprev = dz + B * widest;

    /* the loss, and d(loss)/d(logits) = (softmax - onehot) / B */
    double mean_loss = wgml_ref_cross_entropy(B, C, acts[L], labels);
    wgml_ref_softmax(B, C, acts[L], dz);
    for (int64_t r = 0; r < B; r++) {
        double *g = dz + r * C;
        for (int64_t j = 0; j < C; j++) g[j] /= (double)B;
        g[labels[r]] -= 1.0 / (double)B;
    }

    for (int l = L - 1; l >= 0; l--) {
        int64_t n_in = m->sizes[l], n_out = m->sizes[l + 1];
        const double *a = acts[l]; /* (B, n_in): the layer's input */
        /* gW = a^T dz is (n_in, n_out); gb = sum over rows of dz is (n_out,) */
        const int64_t dz_shape[2] = {B, n_out};
        wgml_ref_matmul(1, n_in, n_out, B, a, 1, 1, dz, 1, 0, 1.0, NULL, 0, m->gW[l]);
        wgml_ref_sum(2, dz_shape, dz, 0, m->gb[l]);
        if (l == 0) break;
        /* d(input) = dz W^T is (B, n_in); through relu: zero where the output was 0 */
        wgml_ref_matmul(1, B, n_in, n_out, dz, 1, 0, m->W[l], 1, 1, 1.0, NULL, 0, dprev);
        for (int64_t i = 0; i < B * n_in; i++)
            if (!(a[i] > 0)) dprev[i] = 0.0;
        double *t = dz;
        dz = dprev;
        dprev = t;
    }
    free(block);
    *loss = mean_loss;
    return 0;
}

double wgml_ref_mlp_loss_grad(wgml_ref_mlp *m, int64_t B, const float *x,
                              const int32_t *labels)
{
    double loss;
    return wgml_ref_mlp_loss_grad_ex(m, B, x, labels, &loss) == 0 ? loss : NAN;
}

double wgml_ref_mlp_grad_norm(const wgml_ref_mlp *m)
{
    double s = 0;
    for (int l = 0; l < m->nlayers; l++) {
        for (int64_t i = 0; i < w_count(m, l); i++) s += m->gW[l][i] * m->gW[l][i];
        for (int64_t i = 0; i < m->sizes[l + 1]; i++) s += m->gb[l][i] * m->gb[l][i];
    }
    return sqrt(s);
}

void wgml_ref_mlp_clip_grads(wgml_ref_mlp *m, double max_norm)
{
    if (!(max_norm > 0)) return;
    double scale = max_norm / (wgml_ref_mlp_grad_norm(m) + 1e-6);
    if (!(scale < 1.0)) return;
    for (int l = 0; l < m->nlayers; l++) {
        for (int64_t i = 0; i < w_count(m, l); i++) m->gW[l][i] *= scale;
        for (int64_t i = 0; i < m->sizes[l + 1]; i++) m->gb[l][i] *= scale;
    }
}

/* p, g, mo, v are (n,) */
static void adamw_array(int64_t n, double *p, const double *g, double *mo, double *v,
                        double lr, double b1, double b2, double eps, double wd, double bc1,
                        double bc2)
{
    for (int64_t i = 0; i < n; i++) {
        mo[i] = b1 * mo[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        double mhat = mo[i] / bc1, vhat = v[i] / bc2;
        p[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]);
    }
}

void wgml_ref_mlp_adamw_step(wgml_ref_mlp *m, double lr, double b1, double b2, double eps,
                             double wd, double max_norm)
{
    wgml_ref_mlp_clip_grads(m, max_norm);
    m->step += 1;
    double bc1 = 1.0 - pow(b1, (double)m->step), bc2 = 1.0 - pow(b2, (double)m->step);
    for (int l = 0; l < m->nlayers; l++) {
        adamw_array(w_count(m, l), m->W[l], m->gW[l], m->mW[l], m->vW[l], lr, b1, b2, eps,
                    wd, bc1, bc2);
        adamw_array(m->sizes[l + 1], m->b[l], m->gb[l], m->mb[l], m->vb[l], lr, b1, b2, eps,
                    wd, bc1, bc2);
    }
}

/* p, g, buf are (n,) */
static void sgd_array(int64_t n, double *p, const double *g, double *buf, double lr,
                      double mu, double wd)
{
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] + wd * p[i];
        buf[i] = mu * buf[i] + gi;
        p[i] -= lr * buf[i];
    }
}

void wgml_ref_mlp_sgd_step(wgml_ref_mlp *m, double lr, double momentum, double wd,
                           double max_norm)
{
    wgml_ref_mlp_clip_grads(m, max_norm);
    m->step += 1;
    for (int l = 0; l < m->nlayers; l++) {
        sgd_array(w_count(m, l), m->W[l], m->gW[l], m->mW[l], lr, momentum, wd);
        sgd_array(m->sizes[l + 1], m->b[l], m->gb[l], m->mb[l], lr, momentum, wd);
    }
}
