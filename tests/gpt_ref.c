/*
 * The CPU reference of the GPT models (gpt_ref.h): the clean, slow, double-precision
 * version of src/models/gpt.h's two architectures, for tests. Every layer is a forward and
 * a backward function side by side, shapes in comments ([N,C] rows are the B*T positions,
 * row n = b*T + t); a backward adds into the gradients it is given (+=), so a tensor read by
 * two paths (the residual stream, the tied embedding) sums both.
 */
#include "gpt_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- layers */

/* x is [N,in], W is [in,out], b is [out] or NULL, y is [N,out]: y = x W + b */
static void matmul_forward(const double *x, const double *W, const double *b, int64_t N, int64_t in,
                           int64_t out, double *y)
{
    for (int64_t n = 0; n < N; n++) {
        double *yr = y + n * out;
        for (int64_t o = 0; o < out; o++) yr[o] = b ? b[o] : 0.0;
        for (int64_t i = 0; i < in; i++) {
            const double xi = x[n * in + i], *Wr = W + i * out;
            for (int64_t o = 0; o < out; o++) yr[o] += xi * Wr[o];
        }
    }
}

/* dy is [N,out]: dx [N,in] += dy W^T, dW [in,out] += x^T dy, db [out] += sum of dy's rows
   (db may be NULL) */
static void matmul_backward(const double *x, const double *W, const double *dy, int64_t N, int64_t in,
                            int64_t out, double *dx, double *dW, double *db)
{
    for (int64_t n = 0; n < N; n++) {
        const double *dyr = dy + n * out;
        if (db)
            for (int64_t o = 0; o < out; o++) db[o] += dyr[o];
        for (int64_t i = 0; i < in; i++) {
            const double *Wr = W + i * out;
            double *dWr = dW + i * out, xi = x[n * in + i], s = 0;
            for (int64_t o = 0; o < out; o++) {
                s += dyr[o] * Wr[o];
                dWr[o] += xi * dyr[o];
            }
            dx[n * in + i] += s;
        }
    }
}

/* x is [N,C], w and b are [C], y is [N,C]; mean and rstd [N] are kept for the backward:
   y = (x - mean) rstd w + b, rstd = 1 / sqrt(biased variance + eps) */
static void layernorm_forward(const double *x, const double *w, const double *b, int64_t N, int64_t C, double eps,
                              double *y, double *mean, double *rstd)
{
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double mu = 0, var = 0;
        for (int64_t c = 0; c < C; c++) mu += xr[c];
        mu /= (double)C;
        for (int64_t c = 0; c < C; c++) var += (xr[c] - mu) * (xr[c] - mu);
        var /= (double)C;
        const double rs = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < C; c++) y[n * C + c] = (xr[c] - mu) * rs * w[c] + b[c];
        mean[n] = mu;
        rstd[n] = rs;
    }
}

/* with xhat = (x - mean) rstd and dxhat = dy w:
   dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); dw += dy xhat; db += dy */
static void layernorm_backward(const double *x, const double *w, const double *mean, const double *rstd,
                               const double *dy, int64_t N, int64_t C, double *dx, double *dw, double *db)
{
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C, *dyr = dy + n * C;
        double m1 = 0, m2 = 0;
        for (int64_t c = 0; c < C; c++) {
            double xhat = (xr[c] - mean[n]) * rstd[n], dxhat = dyr[c] * w[c];
            m1 += dxhat;
            m2 += dxhat * xhat;
            dw[c] += dyr[c] * xhat;
            db[c] += dyr[c];
        }
        m1 /= (double)C;
        m2 /= (double)C;
        for (int64_t c = 0; c < C; c++) {
            double xhat = (xr[c] - mean[n]) * rstd[n], dxhat = dyr[c] * w[c];
            dx[n * C + c] += rstd[n] * (dxhat - m1 - xhat * m2);
        }
    }
}

/* x is [N,C], w is [C], y is [N,C], rstd [N] kept: y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps) */
static void rmsnorm_forward(const double *x, const double *w, int64_t N, int64_t C, double eps, double *y,
                            double *rstd)
{
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];
        const double rs = 1.0 / sqrt(ss / (double)C + eps);
        for (int64_t c = 0; c < C; c++) y[n * C + c] = xr[c] * rs * w[c];
        rstd[n] = rs;
    }
}

/* d rstd / d x_c = -rstd^3 x_c / C, so dx_c += rstd dy_c w_c - rstd^3 x_c / C sum_i(dy_i w_i x_i);
   dw += dy x rstd */
static void rmsnorm_backward(const double *x, const double *w, const double *rstd, const double *dy, int64_t N,
                             int64_t C, double *dx, double *dw)
{
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C, *dyr = dy + n * C, rs = rstd[n];
        double s = 0;
        for (int64_t c = 0; c < C; c++) {
            s += dyr[c] * w[c] * xr[c];
            dw[c] += dyr[c] * xr[c] * rs;
        }
        for (int64_t c = 0; c < C; c++) dx[n * C + c] += rs * dyr[c] * w[c] - rs * rs * rs * xr[c] * s / (double)C;
    }
}

/* The attention's dimensions: B batches of T positions, H query heads reading Hkv key/value
   heads (query head h reads kv head h / (H / Hkv)), head size D, A = H D (C unless head_dim
   says otherwise), QKV = (H + 2 Hkv) D. */
typedef struct dims {
    int64_t B, T, N, C, H, Hkv, D, A, QKV, F, V;
} dims;

/* qkv is [N,QKV] (q: columns h D.., k: H D + g D.., v: (H + Hkv) D + g D..);
   q is [B,H,T,D], k and v are [B,Hkv,T,D] */
static void split_heads(const dims *d, const double *qkv, double *q, double *k, double *v)
{
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t t = 0; t < d->T; t++) {
            const double *row = qkv + (b * d->T + t) * d->QKV;
            for (int64_t h = 0; h < d->H; h++)
                memcpy(q + ((b * d->H + h) * d->T + t) * d->D, row + h * d->D, (size_t)d->D * sizeof *q);
            for (int64_t g = 0; g < d->Hkv; g++) {
                memcpy(k + ((b * d->Hkv + g) * d->T + t) * d->D, row + (d->H + g) * d->D, (size_t)d->D * sizeof *k);
                memcpy(v + ((b * d->Hkv + g) * d->T + t) * d->D, row + (d->H + d->Hkv + g) * d->D,
                       (size_t)d->D * sizeof *v);
            }
        }
}

/* the inverse of split_heads (a permutation, so also its backward): dq, dk, dv to dqkv [N,QKV] */
static void merge_heads(const dims *d, const double *dq, const double *dk, const double *dv, double *dqkv)
{
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t t = 0; t < d->T; t++) {
            double *row = dqkv + (b * d->T + t) * d->QKV;
            for (int64_t h = 0; h < d->H; h++)
                memcpy(row + h * d->D, dq + ((b * d->H + h) * d->T + t) * d->D, (size_t)d->D * sizeof *dq);
            for (int64_t g = 0; g < d->Hkv; g++) {
                memcpy(row + (d->H + g) * d->D, dk + ((b * d->Hkv + g) * d->T + t) * d->D, (size_t)d->D * sizeof *dk);
                memcpy(row + (d->H + d->Hkv + g) * d->D, dv + ((b * d->Hkv + g) * d->T + t) * d->D,
                       (size_t)d->D * sizeof *dv);
            }
        }
}

/* x is [rows,T,D] (rows = B times a head count), rotated in place: element j < D/2 at
   position t pairs with j + D/2 by the angle t base^(-2j/D) (cs, sn are [block, D/2]):
   x[j] cos - x[j+D/2] sin, x[j+D/2] cos + x[j] sin. sign -1 rotates back by -angle, which is
   also the backward (a rotation's transpose is its inverse). */
static void rope_rotate(double *x, int64_t rows, int64_t T, int64_t D, const double *cs, const double *sn,
                        double sign)
{
    const int64_t half = D / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++) {
            double *xr = x + (r * T + t) * D;
            for (int64_t j = 0; j < half; j++) {
                const double c = cs[t * half + j], s = sign * sn[t * half + j], a = xr[j], b = xr[j + half];
                xr[j] = a * c - b * s;
                xr[j + half] = b * c + a * s;
            }
        }
}

/* q is [B,H,T,D], k and v [B,Hkv,T,D]; p is [B,H,T,T] (the softmax, 0 above the diagonal);
   out is [N,A] (head h in columns h D..): out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D)) v_j */
static void attention_forward(const dims *d, const double *q, const double *k, const double *v, double *p,
                              double *out)
{
    const int64_t T = d->T, D = d->D, group = d->H / d->Hkv;
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++) {
            const int64_t bh = b * d->H + h, bg = b * d->Hkv + h / group;
            for (int64_t i = 0; i < T; i++) {
                const double *qi = q + (bh * T + i) * D;
                double *pr = p + (bh * T + i) * T, mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *kj = k + (bg * T + j) * D;
                    double s = 0;
                    for (int64_t e = 0; e < D; e++) s += qi[e] * kj[e];
                    pr[j] = s * scale;
                    if (pr[j] > mx) mx = pr[j];
                }
                for (int64_t j = 0; j <= i; j++) {
                    pr[j] = exp(pr[j] - mx);
                    sum += pr[j];
                }
                for (int64_t j = 0; j < T; j++) pr[j] = j <= i ? pr[j] / sum : 0.0;
                double *o = out + (b * T + i) * d->A + h * D;
                for (int64_t e = 0; e < D; e++) o[e] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *vj = v + (bg * T + j) * D;
                    for (int64_t e = 0; e < D; e++) o[e] += pr[j] * vj[e];
                }
            }
        }
}

/* dout is [N,A]; dq [B,H,T,D], dk and dv [B,Hkv,T,D] += (a kv head sums over the query heads
   reading it): dp_j = dout_i . v_j, ds_j = p_j (dp_j - sum_k p_k dp_k), dq_i += ds_j k_j / sqrt(D),
   dk_j += ds_j q_i / sqrt(D), dv_j += p_j dout_i. dp is [T] scratch. */
static void attention_backward(const dims *d, const double *q, const double *k, const double *v, const double *p,
                               const double *dout, double *dq, double *dk, double *dv, double *dp)
{
    const int64_t T = d->T, D = d->D, group = d->H / d->Hkv;
    const double scale = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++) {
            const int64_t bh = b * d->H + h, bg = b * d->Hkv + h / group;
            for (int64_t i = 0; i < T; i++) {
                const double *pr = p + (bh * T + i) * T, *doi = dout + (b * T + i) * d->A + h * D;
                const double *qi = q + (bh * T + i) * D;
                double *dqi = dq + (bh * T + i) * D, pdp = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *vj = v + (bg * T + j) * D;
                    double *dvj = dv + (bg * T + j) * D, s = 0;
                    for (int64_t e = 0; e < D; e++) {
                        s += doi[e] * vj[e];
                        dvj[e] += pr[j] * doi[e];
                    }
                    dp[j] = s;
                    pdp += pr[j] * s;
                }
                for (int64_t j = 0; j <= i; j++) {
                    const double ds = pr[j] * (dp[j] - pdp) * scale, *kj = k + (bg * T + j) * D;
                    double *dkj = dk + (bg * T + j) * D;
                    for (int64_t e = 0; e < D; e++) {
                        dqi[e] += ds * kj[e];
                        dkj[e] += ds * qi[e];
                    }
                }
            }
        }
}

/* exact GELU: y = 0.5 x (1 + erf(x / sqrt 2)); dy/dx = 0.5 (1 + erf(x / sqrt 2)) + x phi(x) */
static void gelu_forward(const double *x, int64_t n, double *y)
{
    for (int64_t i = 0; i < n; i++) y[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
}

/* dx = dy gelu'(x) (written, not added) */
static void gelu_backward(const double *x, const double *dy, int64_t n, double *dx)
{
    const double inv_sqrt_2pi = 0.3989422804014327;
    for (int64_t i = 0; i < n; i++) {
        const double cdf = 0.5 * (1.0 + erf(x[i] / sqrt(2.0))), pdf = inv_sqrt_2pi * exp(-0.5 * x[i] * x[i]);
        dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
}

static double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

/* gu is [N,2F] (g: columns 0..F, u: F..2F), y is [N,F]: y = silu(g) u, silu(g) = g sigmoid(g) */
static void swiglu_forward(const double *gu, int64_t N, int64_t F, double *y)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++) {
            const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
            y[n * F + f] = g * sigmoid(g) * u;
        }
}

/* dgu [N,2F] written: dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))), du = dy silu(g) */
static void swiglu_backward(const double *gu, const double *dy, int64_t N, int64_t F, double *dgu)
{
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++) {
            const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], s = sigmoid(g), dyv = dy[n * F + f];
            dgu[n * 2 * F + f] = dyv * u * s * (1.0 + g * (1.0 - s));
            dgu[n * 2 * F + F + f] = dyv * g * s;
        }
}

/* ids is [B,T], wte [V,C], wpe [block,C] or NULL, x [N,C]: x = wte[ids] + wpe[t] */
static void embed_forward(const dims *d, const int32_t *ids, const double *wte, const double *wpe, double *x)
{
    for (int64_t n = 0; n < d->N; n++) {
        const double *e = wte + (int64_t)ids[n] * d->C, *pe = wpe ? wpe + (n % d->T) * d->C : NULL;
        for (int64_t c = 0; c < d->C; c++) x[n * d->C + c] = e[c] + (pe ? pe[c] : 0.0);
    }
}

/* dx is [N,C]: dwte[ids] += dx, dwpe[t] += dx (dwpe may be NULL) */
static void embed_backward(const dims *d, const int32_t *ids, const double *dx, double *dwte, double *dwpe)
{
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t c = 0; c < d->C; c++) {
            dwte[(int64_t)ids[n] * d->C + c] += dx[n * d->C + c];
            if (dwpe) dwpe[(n % d->T) * d->C + c] += dx[n * d->C + c];
        }
}

/* h is [N,C], wte [V,C], logits [N,V]: the head tied to the embedding, logits = h wte^T */
static void head_forward(const dims *d, const double *h, const double *wte, double *logits)
{
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t v = 0; v < d->V; v++) {
            double s = 0;
            for (int64_t c = 0; c < d->C; c++) s += h[n * d->C + c] * wte[v * d->C + c];
            logits[n * d->V + v] = s;
        }
}

/* dlogits is [N,V]: dh [N,C] += dlogits wte, dwte [V,C] += dlogits^T h */
static void head_backward(const dims *d, const double *h, const double *wte, const double *dlogits, double *dh,
                          double *dwte)
{
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t v = 0; v < d->V; v++) {
            const double g = dlogits[n * d->V + v];
            for (int64_t c = 0; c < d->C; c++) {
                dh[n * d->C + c] += g * wte[v * d->C + c];
                dwte[v * d->C + c] += g * h[n * d->C + c];
            }
        }
}

/* logits is [N,V], targets [N]: the mean of logsumexp(row) - row[target]; dlogits [N,V]
   (NULL: not wanted) written as (softmax(row) - onehot(target)) / N */
static double cross_entropy(const dims *d, const double *logits, const int32_t *targets, double *dlogits)
{
    double total = 0;
    for (int64_t n = 0; n < d->N; n++) {
        const double *row = logits + n * d->V;
        double mx = row[0], sum = 0;
        for (int64_t v = 1; v < d->V; v++)
            if (row[v] > mx) mx = row[v];
        for (int64_t v = 0; v < d->V; v++) sum += exp(row[v] - mx);
        const double lse = mx + log(sum);
        total += lse - row[targets[n]];
        if (dlogits)
            for (int64_t v = 0; v < d->V; v++)
                dlogits[n * d->V + v] = (exp(row[v] - lse) - (v == targets[n])) / (double)d->N;
    }
    return total / (double)d->N;
}

/* ---------------------------------------------------------------- the model */

/* One layer's tensors (parameters or their gradients): GPT-2 uses them all; Llama has no
   biases (NULL), w1 is mlp.wgu [C,2F] and w2 is mlp.wd [F,C]. */
typedef struct layer_w {
    double *n1w, *n1b, *wqkv, *bqkv, *wo, *bo, *n2w, *n2b, *w1, *b1, *w2, *b2;
    double *qnw, *knw; /* qk_norm: the heads' RMSNorm weights [D] */
} layer_w;

/* One layer's activations of the last forward. */
typedef struct layer_acts {
    double *x;         /* [N,C] the layer's input (the residual stream) */
    double *h1;        /* [N,C] norm1(x) */
    double *mu1, *rs1; /* [N] its mean (layernorm) and 1/std */
    double *qkv;       /* [N,QKV] h1 wqkv + bqkv */
    double *q, *k, *v; /* [B,H,T,D], [B,Hkv,T,D] x2: heads (q and k rotated for Llama) */
    double *p;         /* [B,H,T,T] attention probabilities */
    double *att;       /* [N,A] the heads' outputs merged */
    double *x2;        /* [N,C] x + att wo + bo */
    double *h2;        /* [N,C] norm2(x2) */
    double *mu2, *rs2; /* [N] */
    double *pre;       /* [N,F] h2 w1 + b1 (GPT-2), or [N,2F] h2 wgu (Llama) */
    double *act;       /* [N,F] gelu(pre), or silu(g) u */
} layer_acts;

struct gpt_ref {
    wgml_gpt_config cfg; /* resolved */
    int n;               /* parameters */
    int64_t *numel;
    int *ndim;
    double **p, **g, **m, **v; /* values, gradients, AdamW moments */
    double *rope_cos, *rope_sin; /* [block, D/2] (Llama) */
    /* the last forward's batch and activations, all in one allocation */
    int B, T;
    double *arena;
    layer_acts *L;
    double *xf, *hf, *muf, *rsf; /* [N,C], [N,C], [N], [N]: the final norm's input and output */
    double *logits;              /* [N,V] */
};

static int is_llama(const gpt_ref *r) { return r->cfg.arch == WGML_GPT_LLAMA; }

static dims dims_of(const gpt_ref *r, int B, int T)
{
    const wgml_gpt_config *c = &r->cfg;
    dims d = {.B = B, .T = T, .N = (int64_t)B * T, .C = c->width, .H = c->heads, .Hkv = c->kv_heads,
              .D = c->head_dim, .F = c->ffn, .V = c->vocab};
    d.A = d.H * d.D;
    d.QKV = (d.H + 2 * d.Hkv) * d.D;
    return d;
}

/* layer l's views into arr (r->p or r->g), in gpt.h's order */
static layer_w layer_view(const gpt_ref *r, double *const *arr, int l)
{
    layer_w w = {0};
    if (is_llama(r)) {
        double *const *a = arr + 1 + (r->cfg.qk_norm ? 8 : 6) * l;
        w.n1w = a[0], w.wqkv = a[1], w.wo = a[2], w.n2w = a[3], w.w1 = a[4], w.w2 = a[5];
        if (r->cfg.qk_norm) w.qnw = a[6], w.knw = a[7];
    } else {
        double *const *a = arr + 2 + 12 * l;
        w.n1w = a[0], w.n1b = a[1], w.wqkv = a[2], w.bqkv = a[3], w.wo = a[4], w.bo = a[5];
        w.n2w = a[6], w.n2b = a[7], w.w1 = a[8], w.b1 = a[9], w.w2 = a[10], w.b2 = a[11];
    }
    return w;
}

/* Hands out n doubles from *cursor (counting only, when base is NULL). */
static double *take(double *base, int64_t *cursor, int64_t n)
{
    double *p = base ? base + *cursor : NULL;
    *cursor += n;
    return p;
}

/* Lays the activations of a [B,T] batch out in base; returns the doubles they need. */
static int64_t layout_acts(gpt_ref *r, const dims *d, double *base)
{
    int64_t at = 0, N = d->N, C = d->C;
    for (int l = 0; l < r->cfg.layers; l++) {
        layer_acts *a = &r->L[l];
        a->x = take(base, &at, N * C), a->h1 = take(base, &at, N * C);
        a->mu1 = take(base, &at, N), a->rs1 = take(base, &at, N);
        a->qkv = take(base, &at, N * d->QKV);
        a->q = take(base, &at, N * d->H * d->D);
        a->k = take(base, &at, N * d->Hkv * d->D), a->v = take(base, &at, N * d->Hkv * d->D);
        a->p = take(base, &at, N * d->H * d->T);
        a->att = take(base, &at, N * d->A), a->x2 = take(base, &at, N * C), a->h2 = take(base, &at, N * C);
        a->mu2 = take(base, &at, N), a->rs2 = take(base, &at, N);
        a->pre = take(base, &at, N * d->F * (is_llama(r) ? 2 : 1));
        a->act = take(base, &at, N * d->F);
    }
    r->xf = take(base, &at, N * C), r->hf = take(base, &at, N * C);
    r->muf = take(base, &at, N), r->rsf = take(base, &at, N);
    r->logits = take(base, &at, N * d->V);
    return at;
}

/* Room for the activations of a [B,T] batch; 0 when out of memory. */
static int ensure_acts(gpt_ref *r, const dims *d)
{
    if (r->arena && r->B == d->B && r->T == d->T) return 1;
    free(r->arena);
    r->arena = NULL;
    r->B = r->T = 0;
    int64_t need = layout_acts(r, d, NULL);
    r->arena = calloc((size_t)need, sizeof(double));
    if (!r->arena) return 0;
    layout_acts(r, d, r->arena);
    r->B = (int)d->B, r->T = (int)d->T;
    return 1;
}

/* norm(x; w, b) of either architecture (mu unused by rmsnorm) */
static void norm_forward(const gpt_ref *r, const double *x, const double *w, const double *b, int64_t N,
                         double *y, double *mu, double *rs)
{
    if (is_llama(r)) rmsnorm_forward(x, w, N, r->cfg.width, r->cfg.norm_eps, y, rs);
    else layernorm_forward(x, w, b, N, r->cfg.width, r->cfg.norm_eps, y, mu, rs);
}

static void norm_backward(const gpt_ref *r, const double *x, const double *w, const double *mu, const double *rs,
                          const double *dy, int64_t N, double *dx, double *dw, double *db)
{
    if (is_llama(r)) rmsnorm_backward(x, w, rs, dy, N, r->cfg.width, dx, dw);
    else layernorm_backward(x, w, mu, rs, dy, N, r->cfg.width, dx, dw, db);
}

/* layer l from L[l].x to out [N,C] */
static void block_forward(gpt_ref *r, const dims *d, int l, double *out)
{
    layer_acts *a = &r->L[l];
    const layer_w w = layer_view(r, r->p, l);
    const int64_t N = d->N, C = d->C, F = d->F;
    norm_forward(r, a->x, w.n1w, w.n1b, N, a->h1, a->mu1, a->rs1);
    matmul_forward(a->h1, w.wqkv, w.bqkv, N, C, d->QKV, a->qkv);
    split_heads(d, a->qkv, a->q, a->k, a->v);
    if (w.qnw) { /* each head's vector (a row of D) normalised in place: forward only */
        double *rs = malloc((size_t)(N * d->H) * sizeof *rs);
        if (rs) {
            rmsnorm_forward(a->q, w.qnw, N * d->H, d->D, r->cfg.norm_eps, a->q, rs);
            rmsnorm_forward(a->k, w.knw, N * d->Hkv, d->D, r->cfg.norm_eps, a->k, rs);
        }
        free(rs);
    }
    if (is_llama(r)) {
        rope_rotate(a->q, d->B * d->H, d->T, d->D, r->rope_cos, r->rope_sin, 1.0);
        rope_rotate(a->k, d->B * d->Hkv, d->T, d->D, r->rope_cos, r->rope_sin, 1.0);
    }
    attention_forward(d, a->q, a->k, a->v, a->p, a->att);
    matmul_forward(a->att, w.wo, w.bo, N, d->A, C, a->x2);
    for (int64_t i = 0; i < N * C; i++) a->x2[i] += a->x[i];
    norm_forward(r, a->x2, w.n2w, w.n2b, N, a->h2, a->mu2, a->rs2);
    if (is_llama(r)) {
        matmul_forward(a->h2, w.w1, NULL, N, C, 2 * F, a->pre);
        swiglu_forward(a->pre, N, F, a->act);
    } else {
        matmul_forward(a->h2, w.w1, w.b1, N, C, F, a->pre);
        gelu_forward(a->pre, N * F, a->act);
    }
    matmul_forward(a->act, w.w2, w.b2, N, F, C, out);
    for (int64_t i = 0; i < N * C; i++) out[i] += a->x2[i];
}

/* Backward scratch of one batch, reused by every layer. */
typedef struct scratch {
    double *dh;            /* [N,C] */
    double *datt;          /* [N,C] */
    double *dqkv;          /* [N,QKV] */
    double *dq, *dk, *dv;  /* heads */
    double *dpre, *dact;   /* [N,F or 2F], [N,F] */
    double *dp;            /* [T] */
    double *dlogits;       /* [N,V] */
    double *dx;            /* [N,C] the residual stream's gradient */
} scratch;

static int64_t layout_scratch(const dims *d, double *base, scratch *s)
{
    int64_t at = 0, N = d->N;
    s->dh = take(base, &at, N * d->C), s->datt = take(base, &at, N * d->A);
    s->dqkv = take(base, &at, N * d->QKV);
    s->dq = take(base, &at, N * d->H * d->D);
    s->dk = take(base, &at, N * d->Hkv * d->D), s->dv = take(base, &at, N * d->Hkv * d->D);
    s->dpre = take(base, &at, N * 2 * d->F), s->dact = take(base, &at, N * d->F);
    s->dp = take(base, &at, d->T);
    s->dlogits = take(base, &at, N * d->V);
    s->dx = take(base, &at, N * d->C);
    return at;
}

static void zero(double *x, int64_t n) { memset(x, 0, (size_t)n * sizeof *x); }

/* s->dx: in, the gradient of layer l's output; out, of its input x */
static void block_backward(gpt_ref *r, const dims *d, int l, scratch *s)
{
    const layer_acts *a = &r->L[l];
    const layer_w w = layer_view(r, r->p, l), g = layer_view(r, r->g, l);
    const int64_t N = d->N, C = d->C, F = d->F, F2 = is_llama(r) ? 2 * F : F;
    /* out = x2 + act w2 + b2 */
    zero(s->dact, N * F);
    matmul_backward(a->act, w.w2, s->dx, N, F, C, s->dact, g.w2, g.b2);
    if (is_llama(r)) swiglu_backward(a->pre, s->dact, N, F, s->dpre);
    else gelu_backward(a->pre, s->dact, N * F, s->dpre);
    zero(s->dh, N * C);
    matmul_backward(a->h2, w.w1, s->dpre, N, C, F2, s->dh, g.w1, g.b1);
    norm_backward(r, a->x2, w.n2w, a->mu2, a->rs2, s->dh, N, s->dx, g.n2w, g.n2b); /* dx: now d x2 */
    /* x2 = x + att wo + bo */
    zero(s->datt, N * d->A);
    matmul_backward(a->att, w.wo, s->dx, N, d->A, C, s->datt, g.wo, g.bo);
    zero(s->dq, N * d->H * d->D);
    zero(s->dk, N * d->Hkv * d->D);
    zero(s->dv, N * d->Hkv * d->D);
    attention_backward(d, a->q, a->k, a->v, a->p, s->datt, s->dq, s->dk, s->dv, s->dp);
    if (is_llama(r)) {
        rope_rotate(s->dq, d->B * d->H, d->T, d->D, r->rope_cos, r->rope_sin, -1.0);
        rope_rotate(s->dk, d->B * d->Hkv, d->T, d->D, r->rope_cos, r->rope_sin, -1.0);
    }
    merge_heads(d, s->dq, s->dk, s->dv, s->dqkv);
    zero(s->dh, N * C);
    matmul_backward(a->h1, w.wqkv, s->dqkv, N, C, d->QKV, s->dh, g.wqkv, g.bqkv);
    norm_backward(r, a->x, w.n1w, a->mu1, a->rs1, s->dh, N, s->dx, g.n1w, g.n1b); /* dx: now d x */
}

/* The forward of ids [B,T] into the activations and r->logits; 0 when out of memory. */
static int model_forward(gpt_ref *r, const int32_t *ids, int B, int T)
{
    const dims d = dims_of(r, B, T);
    if (!ensure_acts(r, &d)) return 0;
    const int llama = is_llama(r), L = (int)r->cfg.layers;
    embed_forward(&d, ids, r->p[0], llama ? NULL : r->p[1], r->L[0].x);
    for (int l = 0; l < L; l++) block_forward(r, &d, l, l + 1 < L ? r->L[l + 1].x : r->xf);
    const int fw = r->n - (llama ? 1 : 2);
    norm_forward(r, r->xf, r->p[fw], llama ? NULL : r->p[fw + 1], d.N, r->hf, r->muf, r->rsf);
    head_forward(&d, r->hf, r->p[0], r->logits);
    return 1;
}

/* Every gradient of the loss whose dlogits are in s->dlogits (after model_forward). */
static void model_backward(gpt_ref *r, const dims *d, const int32_t *ids, scratch *s)
{
    const int llama = is_llama(r), L = (int)r->cfg.layers, fw = r->n - (llama ? 1 : 2);
    for (int i = 0; i < r->n; i++) zero(r->g[i], r->numel[i]);
    zero(s->dh, d->N * d->C);
    head_backward(d, r->hf, r->p[0], s->dlogits, s->dh, r->g[0]);
    zero(s->dx, d->N * d->C);
    norm_backward(r, r->xf, r->p[fw], r->muf, r->rsf, s->dh, d->N, s->dx, r->g[fw], llama ? NULL : r->g[fw + 1]);
    for (int l = L - 1; l >= 0; l--) block_backward(r, d, l, s);
    embed_backward(d, ids, s->dx, r->g[0], llama ? NULL : r->g[1]);
}

/* ---------------------------------------------------------------- the API */

void gpt_ref_free(gpt_ref *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        if (r->p) free(r->p[i]);
        if (r->g) free(r->g[i]);
        if (r->m) free(r->m[i]);
        if (r->v) free(r->v[i]);
    }
    free(r->p), free(r->g), free(r->m), free(r->v);
    free(r->numel), free(r->ndim);
    free(r->rope_cos), free(r->rope_sin);
    free(r->arena), free(r->L);
    free(r);
}

gpt_ref *gpt_ref_create(const wgml_gpt_config *cfg, const float *const *params)
{
    wgml_gpt_config c;
    if (!cfg || !params || wgml_gpt_config_resolve(cfg, &c, NULL, 0) != WGML_OK) return NULL;
    gpt_ref *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->cfg = c;
    r->n = wgml_gpt_param_count(&c);
    r->numel = calloc((size_t)r->n, sizeof *r->numel);
    r->ndim = calloc((size_t)r->n, sizeof *r->ndim);
    r->p = calloc((size_t)r->n, sizeof *r->p);
    r->g = calloc((size_t)r->n, sizeof *r->g);
    r->m = calloc((size_t)r->n, sizeof *r->m);
    r->v = calloc((size_t)r->n, sizeof *r->v);
    r->L = calloc((size_t)c.layers, sizeof *r->L);
    if (!r->numel || !r->ndim || !r->p || !r->g || !r->m || !r->v || !r->L) goto fail;
    for (int i = 0; i < r->n; i++) {
        char name[WGML_GPT_NAME];
        int64_t shape[2];
        wgml_gpt_param_info(&c, i, name, &r->ndim[i], shape);
        r->numel[i] = shape[0] * (r->ndim[i] == 2 ? shape[1] : 1);
        r->p[i] = malloc((size_t)r->numel[i] * sizeof(double));
        r->g[i] = calloc((size_t)r->numel[i], sizeof(double));
        r->m[i] = calloc((size_t)r->numel[i], sizeof(double));
        r->v[i] = calloc((size_t)r->numel[i], sizeof(double));
        if (!r->p[i] || !r->g[i] || !r->m[i] || !r->v[i] || !params[i]) goto fail;
        for (int64_t k = 0; k < r->numel[i]; k++) r->p[i][k] = params[i][k];
    }
    if (is_llama(r)) { /* the angles t base^(-2j/D), base as the float the GPU is given */
        const int64_t D = c.head_dim, half = D / 2;
        r->rope_cos = malloc((size_t)(c.block * half) * sizeof(double));
        r->rope_sin = malloc((size_t)(c.block * half) * sizeof(double));
        if (!r->rope_cos || !r->rope_sin) goto fail;
        for (int64_t t = 0; t < c.block; t++)
            for (int64_t j = 0; j < half; j++) {
                const double a = (double)t * pow((double)c.rope_base, -2.0 * (double)j / (double)D);
                r->rope_cos[t * half + j] = cos(a);
                r->rope_sin[t * half + j] = sin(a);
            }
    }
    return r;
fail:
    gpt_ref_free(r);
    return NULL;
}

/* 1 if the n tokens are in [0, V) */
static int tokens_ok(const gpt_ref *r, const int32_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] < 0 || x[i] >= r->cfg.vocab) return 0;
    return 1;
}

double gpt_ref_loss(gpt_ref *r, const int32_t *ids, const int32_t *targets, int B, int T, int with_grad)
{
    if (!r || !ids || !targets || B < 1 || T < 1 || T > r->cfg.block || !tokens_ok(r, ids, (int64_t)B * T) ||
        !tokens_ok(r, targets, (int64_t)B * T) || !model_forward(r, ids, B, T))
        return NAN;
    const dims d = dims_of(r, B, T);
    if (!with_grad) return cross_entropy(&d, r->logits, targets, NULL);
    if (r->cfg.qk_norm) return NAN; /* (its backward is not written here) */
    scratch s;
    double *base = calloc((size_t)layout_scratch(&d, NULL, &s), sizeof(double));
    if (!base) return NAN;
    layout_scratch(&d, base, &s);
    const double loss = cross_entropy(&d, r->logits, targets, s.dlogits);
    model_backward(r, &d, ids, &s);
    free(base);
    return loss;
}

double gpt_ref_adamw_step(gpt_ref *r, const wgml_gpt_train_desc *d, int64_t steps_taken)
{
    if (!r || !d) return NAN;
    double norm2 = 0;
    for (int i = 0; i < r->n; i++)
        for (int64_t k = 0; k < r->numel[i]; k++) norm2 += r->g[i][k] * r->g[i][k];
    const double norm = sqrt(norm2);
    const double scale = d->max_grad_norm > 0 ? fmin(1.0, d->max_grad_norm / (norm + 1e-6)) : 1.0;
    const double lr = wgml_lr_at(&d->schedule, d->lr, steps_taken);
    /* the floats the GPU is given, widened */
    const double b1 = d->beta1 != 0 ? d->beta1 : 0.9f, b2 = d->beta2 != 0 ? d->beta2 : 0.99f, eps = 1e-8f;
    const double t = (double)(steps_taken + 1), bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int i = 0; i < r->n; i++) {
        const double wd = r->ndim[i] == 2 ? d->weight_decay : 0.0;
        double *p = r->p[i], *m = r->m[i], *v = r->v[i];
        for (int64_t k = 0; k < r->numel[i]; k++) {
            const double g = r->g[i][k] * scale;
            m[k] = b1 * m[k] + (1 - b1) * g;
            v[k] = b2 * v[k] + (1 - b2) * g * g;
            p[k] -= lr * (m[k] / bc1 / (sqrt(v[k] / bc2) + eps) + wd * p[k]);
        }
    }
    return norm;
}

void gpt_ref_logits(gpt_ref *r, const int32_t *ids, int T, double *logits)
{
    if (!r || !ids || !logits) return;
    const int64_t n = (int64_t)(T > 0 ? T : 0) * r->cfg.vocab;
    if (T < 1 || T > r->cfg.block || !tokens_ok(r, ids, T) || !model_forward(r, ids, 1, T)) {
        for (int64_t i = 0; i < n; i++) logits[i] = NAN;
        return;
    }
    memcpy(logits, r->logits, (size_t)n * sizeof *logits);
}

void gpt_ref_greedy(gpt_ref *r, const int32_t *prompt, int n_prompt, int n_new, int32_t *out)
{
    if (!r || !prompt || !out || n_prompt < 1 || n_new < 0) return;
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    const int64_t V = r->cfg.vocab;
    for (int len = n_prompt; len < n_prompt + n_new; len++) {
        const int ctx = len < r->cfg.block ? len : (int)r->cfg.block;
        if (!tokens_ok(r, out + len - ctx, ctx) || !model_forward(r, out + len - ctx, 1, ctx)) {
            for (int k = len; k < n_prompt + n_new; k++) out[k] = -1;
            return;
        }
        const double *last = r->logits + (int64_t)(ctx - 1) * V;
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (last[v] > last[best]) best = (int32_t)v;
        out[len] = best;
    }
}

double *gpt_ref_param(gpt_ref *r, int i) { return r && i >= 0 && i < r->n ? r->p[i] : NULL; }
double *gpt_ref_grad(gpt_ref *r, int i) { return r && i >= 0 && i < r->n ? r->g[i] : NULL; }
double *gpt_ref_moment(gpt_ref *r, int i, int which)
{
    if (!r || i < 0 || i >= r->n || (which != 0 && which != 1)) return NULL;
    return which ? r->v[i] : r->m[i];
}
const wgml_gpt_config *gpt_ref_config(const gpt_ref *r) { return r ? &r->cfg : NULL; }
int gpt_ref_param_count(const gpt_ref *r) { return r ? r->n : 0; }
int64_t gpt_ref_numel(const gpt_ref *r, int i) { return r && i >= 0 && i < r->n ? r->numel[i] : 0; }
