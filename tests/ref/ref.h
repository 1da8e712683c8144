/*
 * ref.h — the double-precision CPU reference that every GPU op is tested against (the
 * tests' own: the library never links it).
 *
 * Conventions:
 *   - Plain C11, no global state. Nothing here prints, exits or aborts.
 *   - Tensors are row-major and contiguous; shapes are int64_t arrays of 1..4 dims
 *     (up to WGML_REF_MAX_DIMS are accepted). Broadcasting follows NumPy: shapes are
 *     right-aligned and a size-1 dim stretches to the other's size.
 *   - Inputs and results are double, and everything is computed and accumulated in
 *     double; movement ops (permute, broadcast_to, slice) copy doubles. A GPU test widens
 *     the floats it gave the GPU (exactly), so both read the same values; a test that
 *     works in double (finite differences) calls the same functions. The MLP reference
 *     alone takes float weights and inputs (what the GPU model holds) and converts them.
 *   - Functions that allocate return 0 on success and -1 on allocation failure (or on
 *     invalid arguments, where noted). void functions do not allocate; given arguments
 *     that break their stated preconditions they write nothing.
 *   - Shapes are given in comments in the llm.c manner: "x is (rows, n)".
 */
#ifndef WGML_TESTS_REF_H
#define WGML_TESTS_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WGML_REF_MAX_DIMS 8

/* ---------------------------------------------------------------- elementwise scalars */
/* ref/elementwise.c's table maps op names onto these. NaN in gives NaN out. Infinite inputs give the
   mathematical limits (gelu(-inf) = silu(-inf) = 0, sigmoid(-inf) = 0, ...). */

double wgml_ref_neg(double x);
double wgml_ref_abs(double x);
double wgml_ref_exp(double x);
double wgml_ref_log(double x);     /* log(0) = -inf, log(<0) = NaN */
double wgml_ref_sqrt(double x);
double wgml_ref_rsqrt(double x);   /* 1/sqrt(x): rsqrt(0) = +inf */
double wgml_ref_tanh(double x);
double wgml_ref_sigmoid(double x); /* 1/(1+exp(-x)), evaluated without overflow */
double wgml_ref_relu(double x);    /* max(x, 0); NaN stays NaN */
double wgml_ref_gelu(double x);    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
double wgml_ref_silu(double x);    /* x * sigmoid(x) */

double wgml_ref_add(double a, double b);
double wgml_ref_sub(double a, double b);
double wgml_ref_mul(double a, double b);
double wgml_ref_div(double a, double b);
double wgml_ref_pow(double a, double b);     /* C pow */
/* IEEE-754 2019 maximum/minimum: NaN if either is NaN; -0 < +0. */
double wgml_ref_maximum(double a, double b);
double wgml_ref_minimum(double a, double b);
/* minimum(maximum(x, lo), hi): NaN in x, lo or hi gives NaN. */
double wgml_ref_clamp(double x, double lo, double hi);
/* x rounded to the nearest IEEE half (ties to even): subnormal halves below 2^-14 (multiples of
   2^-24), +-inf from 65520 on, NaN stays NaN; computed in double from the half's spacing */
double wgml_ref_round_half(double x);

/* One element of the elementwise op named `name` (wgml_op_get_info's name; ref/elementwise.c):
   in[] holds its operands, then its scalars (clamp's bounds, masked_fill's value). NULL for
   a name without a reference (the op-table test fails for such an elementwise op). */
typedef double (*wgml_ref_elementwise_fn)(const double *in);
wgml_ref_elementwise_fn wgml_ref_elementwise(const char *name);

/* x is (n,), out is (n,): out[i] = f(x[i]) */
void wgml_ref_unary(double (*f)(double), int64_t n, const double *x, double *out);

/* ---------------------------------------------------------------- broadcasting */

/* sa is (na,), sb is (nb,), sout is (max(na, nb),): the NumPy broadcast of the two
   shapes. Returns 0 and sets *nout = max(na, nb), or -1 (nothing written) when a pair
   of dims differs with neither being 1, or na/nb is outside 1..WGML_REF_MAX_DIMS, or a
   dim is negative. A 0-size dim broadcasts with 1 (giving 0) like NumPy. */
int wgml_ref_broadcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout,
                             int64_t *sout);

/* a is sa, b is sb, out is broadcast(sa, sb): out[i] = f(a[ia], b[ib]). Writes nothing
   when the shapes do not broadcast. */
void wgml_ref_binary(double (*f)(double, double), int na, const int64_t *sa, const double *a,
                     int nb, const int64_t *sb, const double *b, double *out);

/* a is sa, out is sout (the target shape, nout >= na): a copy of a stretched to sout.
   Returns 0, or -1 (nothing written) when sa does not broadcast to exactly sout. */
int wgml_ref_broadcast_to(int na, const int64_t *sa, const double *a, int nout,
                          const int64_t *sout, double *out);

/* ---------------------------------------------------------------- reductions */
/* x is shape (nd dims), 0 <= axis < nd; out is shape with that axis removed (the same
   memory order, so also valid for keepdim). Writing outer = prod(shape[:axis]),
   n = shape[axis], inner = prod(shape[axis+1:]): x is (outer, n, inner), out is
   (outer, inner). */
void wgml_ref_sum(int nd, const int64_t *shape, const double *x, int axis, double *out);
void wgml_ref_mean(int nd, const int64_t *shape, const double *x, int axis,
                   double *out); /* n == 0 gives NaN */
void wgml_ref_max(int nd, const int64_t *shape, const double *x, int axis,
                  double *out); /* NaN propagates; n == 0 gives -inf */
/* The first index of the max, as a double. A NaN counts as the max (NumPy/PyTorch):
   the first NaN's index is returned. n == 0 gives -1. */
void wgml_ref_argmax(int nd, const int64_t *shape, const double *x, int axis, double *out);

/* x is (n,): over all elements. Empty: sum 0, mean NaN, max -inf. max propagates NaN. */
double wgml_ref_sum_all(int64_t n, const double *x);
double wgml_ref_mean_all(int64_t n, const double *x);
double wgml_ref_max_all(int64_t n, const double *x);

/* ---------------------------------------------------------------- along the last axis */

/* x is (rows, n), out is (rows, n). exp(x - max) / sum, so no overflow. A NaN in a row
   makes the whole row NaN; an all -inf row is NaN (as PyTorch). */
void wgml_ref_softmax(int64_t rows, int64_t n, const double *x, double *out);
/* x is (rows, n), out is (rows, n): x - max - log(sum(exp(x - max))). */
void wgml_ref_log_softmax(int64_t rows, int64_t n, const double *x, double *out);
/* x is (rows, n), weight is (n,) or NULL (ones), bias is (n,) or NULL (zeros),
   out is (rows, n): (x - mean) / sqrt(var + eps) * weight + bias, with the biased
   variance mean((x - mean)^2), as PyTorch. */
void wgml_ref_layernorm(int64_t rows, int64_t n, const double *x, const double *weight,
                        const double *bias, double eps, double *out);
/* the input gradient of layernorm (centred) or rmsnorm times g: x, g, dx (rows, n), weight
   (n,) or NULL */
void wgml_ref_norm_grad(int64_t rows, int64_t n, const double *x, const double *weight, const double *g, double eps,
                        int centred, double *dx);
/* x is (rows, n), weight is (n,) or NULL (ones), out is (rows, n):
   x / sqrt(mean(x^2) + eps) * weight. */
void wgml_ref_rmsnorm(int64_t rows, int64_t n, const double *x, const double *weight,
                      double eps, double *out);
/* x / max(||x||_2, eps) per row of n */
void wgml_ref_normalize(int64_t rows, int64_t n, const double *x, double eps, double *out);

/* ---------------------------------------------------------------- scans and positions */

/* x is shape (nd dims), 0 <= axis < nd, out is shape: the running sum along axis,
   out[..., k, ...] = sum of x[..., j, ...] over j <= k (reverse: j >= k). */
void wgml_ref_cumsum(int nd, const int64_t *shape, const double *x, int axis, int reverse,
                     double *out);
/* x is (batch, T, D), D even, out is (batch, T, D): rotary position embedding. Row t is at
   position p = t + pos_offset; pair j < D/2 is (j, j + D/2) (HF's rotate_half), or (2j, 2j+1)
   when interleaved, rotated by the angle a = p * base^(-2j/D) (inverse: -a):
   out[i1] = x[i1] cos a - x[i2] sin a, out[i2] = x[i2] cos a + x[i1] sin a. */
void wgml_ref_rope(int64_t batch, int64_t T, int64_t D, const double *x, double pos_offset,
                   double base, int interleaved, int inverse, double *out);

/* ---------------------------------------------------------------- movement */

/* x is shape (nd dims), axes is (nd,) a permutation of 0..nd-1, out is
   (shape[axes[0]], ..., shape[axes[nd-1]]): out[i0..] = x[j] with j[axes[k]] = i_k.
   Writes nothing if axes is not a permutation. */
void wgml_ref_permute(int nd, const int64_t *shape, const double *x, const int *axes,
                      double *out);
/* x is shape (nd dims); out is shape with shape[axis] replaced by
   wgml_ref_slice_len(start, stop, step): the elements start, start+step, ... < stop
   along axis. Needs 0 <= start <= stop <= shape[axis] and step >= 1 (else writes
   nothing). */
int64_t wgml_ref_slice_len(int64_t start, int64_t stop, int64_t step);
void wgml_ref_slice(int nd, const int64_t *shape, const double *x, int axis, int64_t start,
                    int64_t stop, int64_t step, double *out);

/* ---------------------------------------------------------------- matmul */

/* C[b] = act(alpha * op(A[b]) op(B[b]) + bias), for b in 0..batch-1.
   A is (batch_a, M, K), or (batch_a, K, M) if trans_a;
   B is (batch_b, K, N), or (batch_b, N, K) if trans_b;
   bias is (N,) or NULL; C is (batch, M, N).
   batch_a and batch_b are each batch or 1 (1: the same matrix for every b).
   alpha is used as given (wgml_matmul_desc's "0 means 1" is the caller's to resolve).
   act: 0 none, 1 relu, 2 gelu (tanh form), 3 silu, 4 gelu (exact), as wgml_activation. */
void wgml_ref_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const double *A,
                     int64_t batch_a, int trans_a, const double *B, int64_t batch_b,
                     int trans_b, double alpha, const double *bias, int act, double *C);

/* ---------------------------------------------------------------- attention */

/* q is (B, H, T, D), k and v are (B, Hkv, S, D) with H a multiple of Hkv (query head h
   reads key/value head h / (H / Hkv)); out is (B, H, T, D):
     out[b, h, i] = sum_j softmax_j(scale q[b, h, i] . k[b, g, j]) v[b, g, j]
   over the keys j that query i sees: all of them, or with causal those with
   j <= i + S - T (the mask aligned bottom-right: tril when S == T). A query that sees no
   key (causal with S < T) gives 0. Returns 0, or -1 when out of memory. */
int wgml_ref_attention(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S, int64_t D,
                       const double *q, const double *k, const double *v, int causal,
                       double scale, double *out);
/* The gradients of sum(dout * attention(q, k, v)) (dout is (B, H, T, D)): dq is
   (B, H, T, D), dk and dv are (B, Hkv, S, D), a key/value head's summing over the query
   heads that read it. Returns 0, or -1 when out of memory. */
int wgml_ref_attention_backward(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t S,
                                int64_t D, const double *q, const double *k, const double *v,
                                const double *dout, int causal, double scale, double *dq,
                                double *dk, double *dv);

/* ---------------------------------------------------------------- losses */

/* pred is (n,), target is (n,): mean((pred - target)^2); n == 0 gives NaN. */
double wgml_ref_mse(int64_t n, const double *pred, const double *target);
/* logits is (rows, classes), labels is (rows,): the mean over rows of
   logsumexp(row) - row[label]. A label outside 0..classes-1 gives NaN. */
double wgml_ref_cross_entropy(int64_t rows, int64_t classes, const double *logits,
                              const int32_t *labels);

/* ---------------------------------------------------------------- MLP training */
/* A complete reference of MLP training in double, for the GPU parity gate, built on the
   array functions above (matmul, softmax, cross_entropy, sum).
   Layer sizes are sizes[0..nlayers] (e.g. 784, 256, 128, 10), 1 <= nlayers <= 7.
   Hidden layers use relu, the last layer is linear; the loss is softmax cross-entropy
   averaged over the batch. Layer l (0 <= l < nlayers) has
     W[l] is (sizes[l], sizes[l+1]) row-major, input-major: y = x W + b
     b[l] is (sizes[l+1],)
   and gW/gb (gradients), mW/mb (AdamW first moment, or the SGD momentum buffer),
   vW/vb (AdamW second moment) of the same shapes, all in double. */
typedef struct wgml_ref_mlp {
    int nlayers;
    int64_t sizes[8];
    double *W[7], *b[7], *gW[7], *gb[7], *mW[7], *mb[7], *vW[7], *vb[7];
    int64_t step;
} wgml_ref_mlp;

/* sizes is (nlayers+1,); W_init[l] is (sizes[l], sizes[l+1]) float; b_init is NULL
   (zero biases) or b_init[l] is (sizes[l+1],) float or NULL (zeros). Copies them into
   m (held in double); gradients and optimizer state start at zero, step at 0.
   Returns 0, or -1 on allocation failure or invalid arguments (nlayers outside 1..7,
   a size outside 1..2^30, a NULL W_init[l]); then m is zeroed and
   wgml_ref_mlp_free(m) is harmless. */
int wgml_ref_mlp_init(wgml_ref_mlp *m, int nlayers, const int64_t *sizes,
                      const float *const *W_init, const float *const *b_init);
/* Frees all arrays and zeroes m. NULL and a zeroed m are fine. */
void wgml_ref_mlp_free(wgml_ref_mlp *m);

/* x is (B, sizes[0]), logits is (B, sizes[nlayers]): the forward pass only.
   Returns 0, or -1 on allocation failure or B < 1. */
int wgml_ref_mlp_forward(const wgml_ref_mlp *m, int64_t B, const float *x, double *logits);

/* x is (B, sizes[0]), labels is (B,): forward + backward. Overwrites (does not
   accumulate) every gW/gb with d(loss)/d(param) and stores the mean loss in *loss.
   Returns 0, or -1 on allocation failure, B < 1 or a label outside 0..classes-1
   (then gW/gb are unchanged). */
int wgml_ref_mlp_loss_grad_ex(wgml_ref_mlp *m, int64_t B, const float *x,
                              const int32_t *labels, double *loss);
/* The same, returning the loss; NaN when _ex would return -1. */
double wgml_ref_mlp_loss_grad(wgml_ref_mlp *m, int64_t B, const float *x,
                              const int32_t *labels);
/* sqrt of the sum of squares of every gW and gb element. */
double wgml_ref_mlp_grad_norm(const wgml_ref_mlp *m);

/* Clip by global norm, in place on gW/gb (as PyTorch's clip_grad_norm_):
   scale = min(1, max_norm / (norm + 1e-6)); max_norm <= 0: no clipping. */
void wgml_ref_mlp_clip_grads(wgml_ref_mlp *m, double max_norm);

/* clip (above), then AdamW on every parameter p with gradient g:
     step += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     mhat = m / (1 - b1^step); vhat = v / (1 - b2^step);
     p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)
   (decoupled weight decay, applied to W and b alike). */
void wgml_ref_mlp_adamw_step(wgml_ref_mlp *m, double lr, double b1, double b2, double eps,
                             double wd, double max_norm);
/* clip (above), then SGD with momentum, PyTorch's convention (buf in mW/mb, zero at
   start): g' = g + wd p; buf = momentum buf + g'; p -= lr buf. step += 1. */
void wgml_ref_mlp_sgd_step(wgml_ref_mlp *m, double lr, double momentum, double wd,
                           double max_norm);

/* ---------------------------------------------------------------- random ops (ref/random.c) */
/* Over cpu/philox.h's generator and its counter mapping (the library's). */

/* The block of elements 4j .. 4j + 3 of an op made at (seed, offset), as the mapping above. */
void wgml_philox_block(uint64_t seed, uint64_t offset, uint64_t j, uint32_t out[4]);

/* The blocks an op of n elements uses: ceil(n / 4). */
uint64_t wgml_philox_blocks(int64_t n);

/* out is (n,): wgml_rand's values bit for bit: u = (w >> 8) 2^-24, lo + (hi - lo) u with
   each operation rounded in f32 (no fused multiply-add), held below hi (at most the largest
   float under hi). */
void wgml_ref_rand(uint64_t seed, uint64_t offset, int64_t n, float lo, float hi, float *out);

/* out is (n,): wgml_randn's values in double: words 2m and 2m + 1 of a block give elements
   2m and 2m + 1 as mean + std r cos(t) and mean + std r sin(t), with r = sqrt(-2 ln u1),
   u1 = ((w_2m >> 8) + 1) 2^-24 in (0, 1] (so never ln 0) and t = 2 pi (w_2m+1 >> 8) 2^-24. */
void wgml_ref_randn(uint64_t seed, uint64_t offset, int64_t n, double mean, double std, double *out);

/* Whether wgml_dropout with probability p drops element i: u = (w >> 8) 2^-24 < p. */
int wgml_ref_dropped(uint64_t seed, uint64_t offset, uint64_t i, float p);
/* The factor dropout scales kept elements by: 1 / (1 - p) rounded to f32 once; 0 for p = 1. */
float wgml_ref_dropout_scale(float p);
/* x and out are (n,): 0 where dropped, else x * scale (each product of a float x and the f32
   scale is exact in double, so rounding it to f32 gives the GPU's product). */
void wgml_ref_dropout(uint64_t seed, uint64_t offset, int64_t n, const double *x, float p, double *out);

#ifdef __cplusplus
}
#endif

#endif
