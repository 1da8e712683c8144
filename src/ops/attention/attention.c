/*
 * Fused attention, FlashAttention-style: the op, its gradient rule and the launches of its
 * kernels (their WGSL: ops/attention/attention_wgsl.c; under mixed precision, where the
 * adapter has f16 -> f32 subgroup matrices, the forward, dK/dV and dQ kernels of
 * ops/attention/attention_sgmat_wgsl.c instead, with the same parameters, bindings and
 * results: f16 operands, f32 sums and statistics; Delta stays this file's kernel).
 *
 *   O = softmax(scale Q K^T [+ causal mask]) V     Q [B,H,T,D], K and V [B,Hkv,S,D]
 *
 * No T x S matrix is ever stored. Scores are kept in log2 units: Q is multiplied by
 * scale * log2(e) as it is staged, so every exponential is an exp2 of a difference.
 *
 * Forward (one launch): a workgroup per (tile of `rows` queries, b, h), the longest causal
 * rows first. Q's tile sits in workgroup memory; the workgroup walks the keys `cols` at a
 * time (with the causal mask only up to the diagonal): K's tile is staged, each thread
 * computes a 4 x (cols / tx) block of scores in registers, the rows' maxima meet (through
 * subgroup shuffles where a line of lanes lies in one subgroup, else workgroup memory), the
 * running max m and sum l of each row are updated (the online
 * softmax: the accumulator is rescaled by exp2(m_old - m_new)), P goes to workgroup memory,
 * V's tile replaces K's, and each thread adds P V into its 4 x (D / tx) block of O. The next
 * K tile's loads are issued before that product. O / l goes out, and L = m + log2(l) per row
 * after O in the node's buffer (the node's `tail`), for the gradient. O lies [B,H,T,D], or
 * [B,T,H,D] (desc.out_bthd: a GPT's [B,T,C] is then a reshape): every kernel finds a row of O,
 * as of Q, K, V and dO, through the b, h and t strides in the parameters, so neither O nor a
 * permuted view of its gradient is copied.
 *
 * Gradient (one node, three launches; the node's buffer is [dQ | dK | dV], or after a packed
 * forward the packed tensor's gradient [B,T,H+2Hkv,D], each row written where it lies; halves
 * where the node is cast to f16, as the QKV GEMM's backward reads it under mixed precision):
 *   1. Delta_i = dO_i . O_i, 16 threads per row, into the node's scratch buffer;
 *   2. a workgroup per (tile of `rows` keys, b, key/value head): K and V stay in workgroup
 *      memory while it walks every query head that reads them and every tile of `cols`
 *      queries that sees one of the keys, recomputing P = exp2(s - L) and
 *      dS = P (dO V^T - Delta), and accumulating dV += P^T dO, dK += dS^T Q in registers;
 *      grouped-query heads are summed inside the workgroup, so the result is deterministic;
 *   3. a workgroup per (tile of `rows` queries, b, h) walks the keys it sees as the forward
 *      does, recomputing P and dS, and accumulates dQ += dS K.
 * No atomics: every result is the same bits from run to run.
 *
 * Tiles are picked per kernel and head dim from the policy below so that the workgroup
 * memory fits the adapter's limit (32 KiB on lavapipe, where the tests run; 48 KiB on NVIDIA
 * through Vulkan); WGML_ATTN_TILES overrides them (engine/tuning.h).
 *
 * Masked scores are -inf in the forward pass and P = 0 in the gradient; a row that sees no
 * key (causal with S < T) gives O = 0, L = -inf and zero gradients.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention/attention.h"
#include "ops/attention/attention_sgmat_wgsl.h"
#include "engine/build.h"
#include "engine/tuning.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

#define MAX_HEAD_DIM 128
/* the kernels' variant bits (wgml_attn_kernel's pre): the forward's next K tile loaded early, its
   row maxima through subgroup shuffles where a line of lanes fits in one subgroup (on the
   H100, forward at T = 1024 0.666 -> 0.645 ms over alternated pairs; no change at T = 256) */
#define PREFETCH (1 | 32)

/* ---------------------------------------------------------------- shapes */

/* the sizes the kernels see: q [B, H, T, D], k and v [B, Hkv, S, D] (3-D [N, T, D]
   operands are B = N, H = Hkv = 1) */
typedef struct attn_dims {
    int64_t B, H, Hkv, T, S, D;
} attn_dims;

static attn_dims dims_of(const wgml_tensor *q, const wgml_tensor *k)
{
    bool four = q->ndim == 4;
    attn_dims d = {.B = q->shape[0], .H = four ? q->shape[1] : 1, .Hkv = four ? k->shape[1] : 1,
                   .T = q->shape[q->ndim - 2], .S = k->shape[k->ndim - 2], .D = q->shape[q->ndim - 1]};
    return d;
}

/* the element strides of b, h and t (d's is 1) */
static void strides_of(const wgml_tensor *x, uint32_t *s)
{
    bool four = x->ndim == 4;
    s[0] = (uint32_t)x->stride[0];
    s[1] = four ? (uint32_t)x->stride[1] : 0;
    s[2] = (uint32_t)x->stride[x->ndim - 2];
}

/* rows of x start on a multiple of 4 floats (and D is one): read as vec4 */
static bool rows_aligned(const wgml_tensor *x)
{
    if (x->shape[x->ndim - 1] % 4 || x->offset % 4) return false;
    for (int i = 0; i < x->ndim - 1; i++)
        if (x->stride[i] % 4) return false;
    return true;
}

/* NULL where q, k and v are the three windows of `packed` that wgml_attention_desc.packed
   describes (as views: no copy between), else an error tensor saying what differs */
static wgml_tensor *check_packed(wgml_context *ctx, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                 wgml_tensor *packed, attn_dims d)
{
    wgml_tensor *bad = wgml_check_input(ctx, packed, "attention", "packed");
    if (bad) return bad;
    int64_t N = (d.H + 2 * d.Hkv) * d.D;
    bool ok = q->ndim == 4 && packed->ndim == 3 && packed->dtype == WGML_F32 && wgml_is_contiguous(packed) &&
              packed->shape[0] == d.B && packed->shape[1] == d.T && packed->shape[2] == N && d.S == d.T;
    const wgml_tensor *in[3] = {q, k, v};
    const int64_t first[3] = {0, d.H * d.D, (d.H + d.Hkv) * d.D}; /* each window's first column */
    for (int i = 0; i < 3 && ok; i++) {
        const wgml_tensor *x = in[i];
        ok = wgml_tensor_base((wgml_tensor *)x) == wgml_tensor_base(packed) && x->offset == packed->offset + first[i] &&
             x->stride[0] == d.T * N && x->stride[1] == d.D && x->stride[2] == N && x->stride[3] == 1;
    }
    if (ok) return NULL;
    char sp[128];
    wgml_format_shape(sp, sizeof sp, packed->ndim, packed->shape);
    return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                             "attention: q, k and v are not the windows of desc.packed (%s): want it [B,T,(H+2Hkv)D] = "
                             "[%lld,%lld,%lld] contiguous, S = T, and q, k, v its heads split by reshape, slice and permute",
                             sp, (long long)d.B, (long long)d.T, (long long)N);
}

wgml_tensor *wgml_attention(wgml_context *ctx, wgml_tensor *q, wgml_tensor *k, wgml_tensor *v,
                            const wgml_attention_desc *desc)
{
    if (!ctx) return NULL;
    wgml_tensor *in[3] = {q, k, v}, *bad;
    static const char *const roles[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++)
        if ((bad = wgml_check_input(ctx, in[i], "attention", roles[i]))) return bad;
    char sq[128], sk[128], sv[128];
    wgml_format_shape(sq, sizeof sq, q->ndim, q->shape);
    wgml_format_shape(sk, sizeof sk, k->ndim, k->shape);
    wgml_format_shape(sv, sizeof sv, v->ndim, v->shape);
    if (q->ndim < 3 || q->ndim != k->ndim || q->ndim != v->ndim)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE,
                                 "attention: q %s, k %s and v %s must all be [B,H,T,D] and [B,Hkv,S,D], or all [N,T,D] and [N,S,D]",
                                 sq, sk, sv);
    for (int i = 0; i < 3; i++)
        if (in[i]->dtype != WGML_F32)
            return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "attention: %s is %s; attention takes f32 (wgml_cast converts)",
                                     roles[i], wgml_dtype_name(in[i]->dtype));
    attn_dims d = dims_of(q, k);
    bool same_kv = true;
    for (int i = 0; i < k->ndim; i++) same_kv &= k->shape[i] == v->shape[i];
    if (!same_kv || k->shape[0] != d.B || k->shape[k->ndim - 1] != d.D)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE,
                                 "attention: k %s and v %s must both be [B,Hkv,S,D] with q %s's B and D", sk, sv, sq);
    if (d.H % d.Hkv)
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE,
                                 "attention: q's %lld heads (%s) are not a multiple of k and v's %lld (%s)", (long long)d.H, sq,
                                 (long long)d.Hkv, sk);
    if (d.D > MAX_HEAD_DIM)
        return wgml_tensor_error(ctx, WGML_ERROR_UNSUPPORTED, "attention: head dim D = %lld (q %s) is past the %d the kernels take",
                                 (long long)d.D, sq, MAX_HEAD_DIM);
    float scale = desc && desc->scale != 0.0f ? desc->scale : (float)(1.0 / sqrt((double)d.D));
    if (!isfinite(scale))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "attention: scale = %g must be a finite number", scale);
    wgml_tensor *packed = desc ? desc->packed : NULL;
    if (packed && (bad = check_packed(ctx, q, k, v, packed, d))) return bad;
    /* the kernels read rows through the b, h and t strides; a row must be contiguous. A packed
       tensor rides along as a fourth input that no launch reads: the gradient's way to it */
    wgml_tensor *src[4] = {NULL, NULL, NULL, packed};
    wgml_tensor *t = NULL;
    for (int i = 0; i < 3; i++) {
        bool rows = in[i]->stride[in[i]->ndim - 1] == 1 || d.D == 1;
        src[i] = rows ? in[i] : wgml_contiguous(ctx, in[i]);
        if (!t && src[i]->status) t = src[i]; /* (out of memory) */
    }
    /* [B,T,H,D] out: the kernels write each row of O at (b, h, t)'s place in that layout */
    bool bthd = desc && desc->out_bthd && q->ndim == 4;
    const int64_t bthd_shape[4] = {d.B, d.T, d.H, d.D};
    if (!t) t = wgml_node(ctx, WGML_OP_ATTENTION, q->ndim, bthd ? bthd_shape : q->shape, packed ? 4 : 3, src);
    for (int i = 0; i < 3; i++)
        if (src[i] != in[i] && src[i] != t) wgml_tensor_free(src[i]); /* the node holds them */
    if (t && !t->status) {
        t->tail = d.B * d.H * d.T; /* L of every row */
        wgml_attention_params_of_set(t, (wgml_attention_params){.causal = desc && desc->causal, .scale = scale,
                                                                .mixed = ctx->compute_precision == WGML_PRECISION_MIXED,
                                                                .packed = packed != NULL, .bthd = bthd});
    }
    return t;
}

wgml_tensor *wgml_attention_grad(wgml_context *ctx, wgml_tensor *fwd, wgml_tensor *dout)
{
    if (!ctx) return NULL;
    wgml_tensor *bad;
    if ((bad = wgml_check_input(ctx, fwd, "attention_grad", "forward")) || (bad = wgml_check_input(ctx, dout, "attention_grad", "dout"))) return bad;
    if (fwd->op != WGML_OP_ATTENTION || dout->ndim != fwd->ndim || memcmp(dout->shape, fwd->shape, sizeof fwd->shape[0] * (size_t)fwd->ndim))
        return wgml_tensor_error(ctx, WGML_ERROR_SHAPE, "attention gradient: needs the lazy forward node and a gradient of its shape");
    wgml_tensor *q = fwd->src[0], *k = fwd->src[1];
    int64_t n = q->numel + 2 * k->numel;
    /* the kernels read dO through its b, h and t strides (a permuted view of a [B,T,C]
       gradient needs no copy); only rows that are not contiguous are copied */
    bool rows = dout->stride[dout->ndim - 1] == 1 || dout->shape[dout->ndim - 1] == 1;
    wgml_tensor *dc = rows ? dout : wgml_contiguous(ctx, dout);
    if (!dc || dc->status) return dc;
    wgml_tensor *src[5] = {q, k, fwd->src[2], fwd, dc};
    wgml_tensor *t = wgml_node(ctx, WGML_OP_ATTENTION_GRAD, 1, &n, 5, src);
    if (dc != dout) wgml_tensor_free(dc); /* the node holds it */
    if (t && !t->status) {
        /* the precision in force when the gradient is built, as for matmul's */
        wgml_attention_params pa = wgml_attention_params_of(fwd);
        pa.mixed = ctx->compute_precision == WGML_PRECISION_MIXED;
        wgml_attention_params_of_set(t, pa);
    }
    return t;
}

/* the gradients are views of the flat [dQ | dK | dV]; after a packed forward the node is the
   packed tensor's gradient as it lies (grad_layout), and none goes to the windows */
wgml_status wgml_vjp_attention(wgml_context *ctx, wgml_tensor *t, wgml_tensor *g, wgml_tensor **gin)
{
    wgml_tensor *flat = wgml_attention_grad(ctx, t, g);
    if (wgml_attention_params_of(t).packed) {
        gin[3] = wgml_reshape(ctx, flat, t->src[3]->ndim, t->src[3]->shape);
        return WGML_OK;
    }
    int64_t start = 0;
    for (int i = 0; i < 3; i++) {
        wgml_tensor *x = t->src[i];
        gin[i] = wgml_reshape(ctx, wgml_slice(ctx, flat, 0, start, start + x->numel, 1), x->ndim, x->shape);
        start += x->numel;
    }
    return WGML_OK;
}

/* ---------------------------------------------------------------- tiles */

typedef struct tiles {
    int rows, cols, tx;
} tiles;

/* The policy, best first, per kernel (forward, dK/dV, dQ): the first that fits the adapter.
   Larger tiles reuse each value read from workgroup memory more (a thread's 4 x 4 score
   block: 8 reads per 16 fused multiply-adds), but the H100 wants threads more: lines of 16
   threads (4 x 4 or 4 x 2 score blocks, 256 or 128 threads) beat lines of 8 with twice the
   work each by 15-30% in every kernel (Vulkan's 48 KiB holds the first of each at D = 64;
   32 KiB, lavapipe's, the second, third and third). */
static const tiles policy[3][6] = {
    {{64, 64, 16}, {64, 32, 8}, {32, 32, 16}, {32, 16, 8}, {16, 16, 8}, {16, 8, 8}},
    {{32, 32, 16}, {32, 32, 8}, {32, 16, 8}, {16, 16, 8}, {16, 8, 8}, {0, 0, 0}},
    {{32, 32, 16}, {32, 32, 8}, {16, 32, 8}, {16, 16, 8}, {16, 8, 8}, {0, 0, 0}},
};

static bool tiles_fit(wgml_context *ctx, wgml_attn_kernel *k, tiles t)
{
    if ((t.rows != 16 && t.rows != 32 && t.rows != 64) || (t.tx != 8 && t.tx != 16) || t.cols < t.tx || t.cols > 64 ||
        t.cols % t.tx)
        return false;
    k->rows = t.rows, k->cols = t.cols, k->tx = t.tx;
    k->dp = (k->d + t.tx - 1) / t.tx * t.tx;
    return (uint64_t)(t.rows / 4 * t.tx) <= ctx->rt.limits.maxComputeInvocationsPerWorkgroup &&
           wgml_attn_shared_bytes(k) <= ctx->rt.limits.maxComputeWorkgroupStorageSize;
}

/* every subgroup has at least n lanes: the adapter's least subgroup size, or where it does
   not say (wgpu-native reports 0) NVIDIA's, whose subgroups are warps of 32 */
static bool subgroups_hold(wgml_context *ctx, int n)
{
    const wgml_adapter_info *a = &ctx->rt.info;
    if (!a->has_subgroups) return false;
    uint32_t least = a->subgroup_min_size ? a->subgroup_min_size : a->vendor_id == 0x10de ? 32 : 0;
    return least >= (uint32_t)n;
}

/* k's tiles (kind and d set): the knob's, else the policy's first that fits and whose rows
   are not twice the `n` rows there are to cover (16 at least): a tile mostly past the end
   costs every adapter its idle threads, and a CPU adapter (lavapipe) its barriers too, 15
   times the time at T = 16 */
static wgml_status choose_tiles(wgml_context *ctx, wgml_attn_kernel *k, int64_t n)
{
    int which = k->kind == WGML_ATTN_FORWARD ? 0 : k->kind == WGML_ATTN_DKV ? 1 : 2;
    const wgml_tuning *tu = wgml_tuning_of(ctx);
    k->pre = (tu->attn_pre >= 0 ? tu->attn_pre : PREFETCH) & (which == 0 ? 3 | 32 : which == 1 ? 4 : 8);
    bool fit = tu->attn_tiles_set && tiles_fit(ctx, k, (tiles){tu->attn_tiles[which][0], tu->attn_tiles[which][1], tu->attn_tiles[which][2]});
    int64_t most = 16;
    while (most < n) most *= 2;
    for (int i = 0; !fit && i < 6 && policy[which][i].rows; i++)
        fit = policy[which][i].rows <= most && tiles_fit(ctx, k, policy[which][i]);
    /* the forward's shuffles want each line of tx lanes inside one subgroup */
    if (!subgroups_hold(ctx, k->tx)) k->pre &= ~32;
    if (fit) return WGML_OK;
    return wgml_fail(ctx, WGML_ERROR_LIMIT, "attention: no tile for D = %d fits this adapter's %u bytes of workgroup memory", k->d,
                     ctx->rt.limits.maxComputeWorkgroupStorageSize);
}

/* ---------------------------------------------------------------- matrix units */

/* The matrix-unit kernel of `kind` for head dim d (ops/attention/attention_sgmat_wgsl.c):
   true, with *c, where the node was built under mixed precision, the adapter has f16 -> f32
   subgroup matrices (or WGML_ATTN_MATRIX=emulate stands in for them) and a tile fits its
   limits; else the SIMT f32 kernels run. The policy below was measured on an H200
   (docs/MEASUREMENTS.md, helpers attn2, attn3, attnbwd, attnfwd and the twentieth session):
   four subgroups of sm_m rows; every kernel in steps of 16 columns (32 where 16 does not fit).
   These kernels' speed follows their workgroup memory more than their barriers (likely the
   workgroups an SM holds), hence: two staging buffers only in dK/dV, whose steps of 16 already
   keep the room they take; P (dS) over the staged tile whose products are done in the forward
   and dQ (p_in_xs); the forward's Q staged by halves of its columns (kept_halves: dQ's Q and dO
   so staged measured 1-2% slower). Every kernel prefetches. The forward and dQ go tile-major (every
   head's longest tile first); dK/dV keeps a head's tiles together (likely they share its Q and
   dO in L2). The forward walks the keys once. The gradients' lanes take their score blocks in
   quads (the result fragment's layout: pairs of adjacent columns; likely fewer bank conflicts
   and wider accesses of workgroup memory); the forward's two lanes a row take pairs of
   adjacent columns, write P before the vote on rescaling (one barrier fewer a step) and read
   the first K and V tile and all of Q before staging any. `rows` (T, or S for dK/dV): whole tiles of
   results go straight from the matrix units only where a whole tile exists (a store of a
   16 x 16 f32 fragment makes Dawn ask bindings of at least 1024 bytes). */
/* the matrix kernels' forms (WGML_ATTN_MATRIX's X bits): 1 the forward in one walk; the lanes
   in quads over the score blocks (wgml_attn_sgmat.quads, where the generator takes them): 2
   dK/dV, 4 dQ (measured on an H200: dK/dV -16.5% / -10.5%, dQ -7.2% / -1.5% at T = 1024 / 256;
   the forward's lost, +12% at T = 256); the forward's: 8 its lanes on column pairs (pairs,
   where two lanes share a row), 16 P before the vote (p_early), 32 its first reads up front
   (front_loads); 16 and 32 in one walk only (measured on an H200, the forward at T = 1024 /
   256: 8 -4.1% / -0.9%, 16 -2.6% / +0.6%, 32 -0.8% / 0.0%, all three -6.7% / -1.2%) */
#define MATRIX_FORMS 63
/* the kernels in tile-major order (WGML_ATTN_MATRIX's G bits): 1 the forward, 4 dQ */
#define MATRIX_TILE_MAJOR 5
/* the kernels' options (WGML_ATTN_MATRIX's O bits): 1 prefetch, 4 two staging
   buffers, 8 P (dS) over a staged tile in xs, 16 the kept rows staged by halves (8, 16: the
   forward and dQ) */
#define MATRIX_OPTS_FWD 25
#define MATRIX_OPTS_DQ 9
#define MATRIX_OPTS_DKV 5

static bool choose_matrix(wgml_context *ctx, const wgml_tensor *t, int kind, int d, bool vec, int64_t rows, wgml_attn_sgmat *c)
{
    const wgml_tuning *tu = wgml_tuning_of(ctx);
    if (!wgml_attention_params_of(t).mixed || tu->attn_matrix < 0) return false;
    int m, n, k, sgs;
    bool emulate = tu->attn_matrix > 0;
    if (emulate) m = tu->attn_emu[0], n = tu->attn_emu[1], k = tu->attn_emu[2], sgs = tu->attn_emu[3];
    else if (!wgml_sgmat_adapter_shape(ctx, &m, &n, &k, &sgs)) return false;
    static const int cols[] = {16, 32}; /* (32 where 16 does not fit) */
    int which = kind == WGML_ATTN_FORWARD ? 0 : kind == WGML_ATTN_DKV ? 1 : 2, knob = tu->attn_mcols[which];
    int opts = tu->attn_mpre >= 0 ? tu->attn_mpre : kind == WGML_ATTN_DKV ? MATRIX_OPTS_DKV : kind == WGML_ATTN_DQ ? MATRIX_OPTS_DQ : MATRIX_OPTS_FWD;
    int order = tu->attn_morder >= 0 ? tu->attn_morder : MATRIX_TILE_MAJOR;
    int forms = tu->attn_mform >= 0 ? tu->attn_mform : MATRIX_FORMS;
    for (int i = knob ? -1 : 0; i < 2; i++)
        for (int stage2 = opts >> 2 & 1; stage2 >= 0; stage2--) {
            *c = (wgml_attn_sgmat){.kind = kind, .d = d, .sm_m = m, .sm_n = n, .sm_k = k, .subgroup_size = sgs,
                                   .subgroups = tu->attn_msub > 0 && i < 0 ? tu->attn_msub : 4,
                                   .cols = emulate ? tu->attn_emu[4] : i < 0 ? knob : cols[i], .vec = vec, .emulate = emulate,
                                   .prefetch = opts & 1, .stage2 = stage2, .one_pass = kind == WGML_ATTN_FORWARD && (forms & 1),
                                   .p_in_xs = kind != WGML_ATTN_DKV && !stage2 && (opts & 8),
                                   .kept_halves = kind != WGML_ATTN_DKV && (opts & 16),
                                   .tile_major = kind != WGML_ATTN_DKV && (order >> which & 1),
                                   .quads = (kind == WGML_ATTN_DKV && (forms & 2)) || (kind == WGML_ATTN_DQ && (forms & 4)),
                                   .pairs = kind == WGML_ATTN_FORWARD && (forms & 8),
                                   .p_early = kind == WGML_ATTN_FORWARD && (forms & 1) && (forms & 16),
                                   .front_loads = kind == WGML_ATTN_FORWARD && (forms & 1) && (opts & 1) && (forms & 32)};
            c->direct = rows >= wgml_attn_sgmat_rows(c);
            if (c->quads && wgml_attn_sgmat_problem(c)) c->quads = false; /* (rows not whole 4-lane groups) */
            if (c->pairs && wgml_attn_sgmat_problem(c)) c->pairs = false; /* (not two lanes a row) */
            if (!wgml_attn_sgmat_problem(c) && wgml_attn_sgmat_shared_bytes(c) <= ctx->rt.limits.maxComputeWorkgroupStorageSize &&
                (uint32_t)wgml_attn_sgmat_threads(c) <= ctx->rt.limits.maxComputeInvocationsPerWorkgroup)
                return true;
        }
    return false;
}

static wgml_status matrix_pipeline(wgml_context *ctx, const wgml_attn_sgmat *c, wgml_launch *l)
{
    /* kind + 16: apart from the SIMT kernels' keys */
    uint32_t key[9] = {WGML_KEY_ATTN, (uint32_t)c->kind + 16, (uint32_t)c->d,
                       (uint32_t)c->sm_m | (uint32_t)c->sm_n << 8 | (uint32_t)c->sm_k << 16, (uint32_t)c->subgroup_size,
                       (uint32_t)c->subgroups, (uint32_t)c->cols,
                       c->vec | (uint32_t)c->prefetch << 1 | (uint32_t)c->direct << 3 |
                           (uint32_t)c->one_pass << 4 | (uint32_t)c->out16 << 5 | (uint32_t)c->stage2 << 6 | (uint32_t)c->tile_major << 7 |
                           (uint32_t)c->p_in_xs << 8 | (uint32_t)c->kept_halves << 9 | (uint32_t)c->quads << 10 |
                           (uint32_t)c->pairs << 11 | (uint32_t)c->p_early << 12 | (uint32_t)c->front_loads << 13,
                       c->emulate};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 9))) return WGML_OK;
    l->pipeline = wgml_pipeline_add(ctx, key, 9, wgml_attn_sgmat_source(c), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

/* ---------------------------------------------------------------- launches */

/* the parameter block every attention kernel reads (the Params of attention_wgsl.c) */
typedef struct attn_params {
    uint32_t B, H, Hkv, T;
    uint32_t S, R, causal, gx;
    uint32_t q[4], k[4], v[4]; /* offset, stride of b, h, t */
    uint32_t do_off, lse_off, dk_off, dv_off;
    float scale2, neg_inf, scale;
    uint32_t tiles;
    uint32_t o[3], pad0;  /* the stride of b, h, t of O in the forward node's buffer */
    uint32_t dout[3], pad1; /* ... and of dO */
    uint32_t dq[4];         /* the gradient's dQ: offset, stride of b, h, t in the gradient node's buffer */
    uint32_t dkv[3], pad2;  /* ... dK's and dV's stride of b, h, t (their offsets dk_off, dv_off) */
} attn_params;

static wgml_status attn_pipeline(wgml_context *ctx, const wgml_attn_kernel *k, wgml_launch *l)
{
    uint32_t key[9] = {WGML_KEY_ATTN, (uint32_t)k->kind, (uint32_t)k->d, (uint32_t)k->dp,
                       (uint32_t)k->rows, (uint32_t)k->cols, (uint32_t)k->tx, k->vec | (uint32_t)k->out16 << 1, (uint32_t)k->pre};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 9))) return WGML_OK;
    l->pipeline = wgml_pipeline_add(ctx, key, 9, wgml_attn_source(k), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

/* the strides of b, h and t of the forward node's O, [B,H,T,D] or [B,T,H,D] (params bthd) */
static void o_strides(const wgml_tensor *fwd, attn_dims d, uint32_t *s)
{
    bool bthd = wgml_attention_params_of(fwd).bthd;
    s[0] = (uint32_t)(d.H * d.T * d.D);
    s[1] = (uint32_t)(bthd ? d.D : d.T * d.D);
    s[2] = (uint32_t)(bthd ? d.H * d.D : d.D);
}

/* the parameters of node t (forward or gradient: both read q, k, v as src[0..2]) */
static attn_params params_of(const wgml_tensor *t, attn_dims d)
{
    const wgml_attention_params ap = wgml_attention_params_of(t);
    attn_params p = {.B = (uint32_t)d.B, .H = (uint32_t)d.H, .Hkv = (uint32_t)d.Hkv, .T = (uint32_t)d.T, .S = (uint32_t)d.S,
                     .R = (uint32_t)(d.H / d.Hkv), .causal = (uint32_t)ap.causal, .neg_inf = -INFINITY, .scale = ap.scale,
                     .scale2 = (float)((double)ap.scale * 1.4426950408889634)};
    uint32_t *dst[3] = {p.q, p.k, p.v};
    for (int i = 0; i < 3; i++) {
        dst[i][0] = (uint32_t)t->src[i]->offset;
        strides_of(t->src[i], dst[i] + 1);
    }
    return p;
}

static void set_params(wgml_launch *l, const attn_params *p)
{
    memcpy(l->params, p, sizeof *p);
    l->params_size = sizeof *p;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* y [B,H,T,D] (+ L [B,H,T] after it) from q, k, v */
wgml_status wgml_build_attention(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    attn_dims d = dims_of(t->src[0], t->src[1]);
    wgml_attn_kernel k = {.kind = WGML_ATTN_FORWARD, .d = (int)d.D,
                          .vec = rows_aligned(t->src[0]) && rows_aligned(t->src[1]) && rows_aligned(t->src[2])};
    wgml_attn_sgmat mc;
    bool matrix = choose_matrix(ctx, t, WGML_ATTN_FORWARD, k.d, k.vec, d.T, &mc);
    wgml_status st = matrix ? matrix_pipeline(ctx, &mc, l) : choose_tiles(ctx, &k, d.T);
    if (st || (!matrix && (st = attn_pipeline(ctx, &k, l)))) return st;
    attn_params p = params_of(t, d);
    o_strides(t, d, p.o);
    p.tiles = (uint32_t)ceil_div(d.T, matrix ? wgml_attn_sgmat_rows(&mc) : k.rows);
    p.lse_off = (uint32_t)t->numel;
    p.gx = wgml_grid(ctx, (uint64_t)p.tiles * (uint64_t)(d.B * d.H), l->groups);
    set_params(l, &p);
    for (int i = 0; i < 3; i++) l->buffers[i] = wgml_tensor_base(t->src[i]);
    l->buffers[3] = t;
    l->nbuffers = 4;
    /* (the matrix kernels' loops over D and a tile are unrolled; it walks the keys once or twice) */
    l->loop_trips = matrix ? (mc.one_pass ? 1 : 2) * (uint64_t)ceil_div(d.S, mc.cols) + 1 : (uint64_t)ceil_div(d.S, k.cols) * wgml_attn_step_trips(&k) + 1;
    snprintf(l->what, sizeof l->what, "attention (T %lld, S %lld, D %lld)", (long long)d.T, (long long)d.S, (long long)d.D);
    *count = 1;
    return WGML_OK;
}

/* where the gradient node's kernels write each row of dQ, dK and dV: flat [dQ | dK | dV], each
   as q, k, v lie contiguous ([B,H,T,D], [B,Hkv,S,D]); or, after a packed forward, the packed
   tensor's gradient [B,T,H+2Hkv,D] itself, dQ at heads 0.., dK at H.., dV at H+Hkv.. (S = T) */
static void grad_layout(const wgml_tensor *t, attn_dims d, attn_params *p)
{
    if (wgml_attention_params_of(t).packed) {
        uint32_t N = (uint32_t)((d.H + 2 * d.Hkv) * d.D);
        p->dq[0] = 0, p->dk_off = (uint32_t)(d.H * d.D), p->dv_off = (uint32_t)((d.H + d.Hkv) * d.D);
        p->dq[1] = p->dkv[0] = (uint32_t)d.T * N;
        p->dq[2] = p->dkv[1] = (uint32_t)d.D;
        p->dq[3] = p->dkv[2] = N;
        return;
    }
    int64_t nq = d.B * d.H * d.T * d.D, nk = d.B * d.Hkv * d.S * d.D;
    p->dq[0] = 0, p->dk_off = (uint32_t)nq, p->dv_off = (uint32_t)(nq + nk);
    p->dq[1] = (uint32_t)(d.H * d.T * d.D), p->dq[2] = (uint32_t)(d.T * d.D), p->dq[3] = (uint32_t)d.D;
    p->dkv[0] = (uint32_t)(d.Hkv * d.S * d.D), p->dkv[1] = (uint32_t)(d.S * d.D), p->dkv[2] = (uint32_t)d.D;
}

/* [dQ | dK | dV] (or the packed gradient: grad_layout) from q, k, v, the forward's O and L, and
   dO (src[0..4]) */
wgml_status wgml_build_attention_grad(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    wgml_tensor *q = t->src[0], *kt = t->src[1], *fwd = t->src[3], *dout = t->src[4];
    attn_dims d = dims_of(q, kt);
    bool vec = rows_aligned(q) && rows_aligned(kt) && rows_aligned(t->src[2]) && rows_aligned(dout);
    wgml_attn_kernel kd = {.kind = WGML_ATTN_DELTA, .d = (int)d.D, .dp = (int)(d.D + 3) / 4 * 4, .rows = 4, .cols = 4, .tx = 4, .vec = vec};
    /* a cast to f16 of the node (the GPT's d(qkv) under mixed precision) is the node storing halves */
    bool out16 = t->dtype == WGML_F16;
    wgml_attn_kernel kkv = {.kind = WGML_ATTN_DKV, .d = (int)d.D, .vec = vec, .out16 = out16};
    wgml_attn_kernel kq = {.kind = WGML_ATTN_DQ, .d = (int)d.D, .vec = vec, .out16 = out16};
    wgml_status st;
    wgml_attn_sgmat mkv, mq;
    bool matrix_kv = choose_matrix(ctx, t, WGML_ATTN_DKV, kkv.d, vec, d.S, &mkv),
         matrix_q = choose_matrix(ctx, t, WGML_ATTN_DQ, kq.d, vec, d.T, &mq);
    mkv.out16 = mq.out16 = out16;
    if ((!matrix_kv && (st = choose_tiles(ctx, &kkv, d.S))) || (!matrix_q && (st = choose_tiles(ctx, &kq, d.T)))) return st;
    wgml_launch *ld = &l[0], *lkv = &l[1], *lq = &l[2];
    if ((st = attn_pipeline(ctx, &kd, ld))) return st;
    *lkv = *ld, *lq = *ld;
    if ((st = matrix_kv ? matrix_pipeline(ctx, &mkv, lkv) : attn_pipeline(ctx, &kkv, lkv)) ||
        (st = matrix_q ? matrix_pipeline(ctx, &mq, lq) : attn_pipeline(ctx, &kq, lq)))
        return st;
    attn_params p = params_of(t, d);
    o_strides(fwd, d, p.o);
    p.do_off = (uint32_t)dout->offset;
    /* dO has O's shape: [B,H,T,D], [B,T,H,D] (bthd) or [N,T,D] */
    bool bthd = wgml_attention_params_of(fwd).bthd;
    p.dout[0] = (uint32_t)dout->stride[0];
    p.dout[1] = dout->ndim == 4 ? (uint32_t)dout->stride[bthd ? 2 : 1] : 0;
    p.dout[2] = (uint32_t)dout->stride[dout->ndim == 4 && !bthd ? 2 : 1];
    p.lse_off = (uint32_t)(fwd->offset + fwd->numel);
    grad_layout(t, d, &p);
    uint64_t rows = (uint64_t)(d.B * d.H * d.T);
    long long T = (long long)d.T, S = (long long)d.S, D = (long long)d.D;

    /* 1. Delta = rowsum(dO * O) into the scratch buffer */
    p.gx = wgml_grid(ctx, (rows + 15) / 16, ld->groups); /* 16 rows a workgroup */
    set_params(ld, &p);
    ld->buffers[0] = fwd;
    ld->buffers[1] = wgml_tensor_base(dout);
    ld->buffers[2] = NULL;
    ld->nbuffers = 3;
    ld->scratch_mask = 1u << 2;
    ld->scratch_bytes = rows * 4;
    ld->loop_trips = wgml_attn_step_trips(&kd);
    snprintf(ld->what, sizeof ld->what, "attention Delta (T %lld, S %lld, D %lld)", T, S, D);

    /* 2. dK, dV: a workgroup per key tile and key/value head */
    wgml_launch *gl[2] = {lkv, lq};
    for (int i = 0; i < 2; i++) {
        for (int b = 0; b < 3; b++) gl[i]->buffers[b] = wgml_tensor_base(t->src[b]);
        gl[i]->buffers[3] = wgml_tensor_base(dout);
        gl[i]->buffers[4] = fwd;
        gl[i]->buffers[5] = NULL;
        gl[i]->buffers[6] = t;
        gl[i]->nbuffers = 7;
        gl[i]->scratch_mask = 1u << 5;
        gl[i]->scratch_bytes = 0;
    }
    p.tiles = (uint32_t)ceil_div(d.S, matrix_kv ? wgml_attn_sgmat_rows(&mkv) : kkv.rows);
    p.gx = wgml_grid(ctx, (uint64_t)p.tiles * (uint64_t)(d.B * d.Hkv), lkv->groups);
    set_params(lkv, &p);
    lkv->loop_trips = (uint64_t)(d.H / d.Hkv) * (uint64_t)ceil_div(d.T, matrix_kv ? mkv.cols : kkv.cols) *
                          (matrix_kv ? 1 : wgml_attn_step_trips(&kkv)) + 1;
    snprintf(lkv->what, sizeof lkv->what, "attention dK, dV (T %lld, S %lld, D %lld)", T, S, D);

    /* 3. dQ: a workgroup per query tile and head */
    p.tiles = (uint32_t)ceil_div(d.T, matrix_q ? wgml_attn_sgmat_rows(&mq) : kq.rows);
    p.gx = wgml_grid(ctx, (uint64_t)p.tiles * (uint64_t)(d.B * d.H), lq->groups);
    set_params(lq, &p);
    lq->loop_trips = (uint64_t)ceil_div(d.S, matrix_q ? mq.cols : kq.cols) * (matrix_q ? 1 : wgml_attn_step_trips(&kq)) + 1;
    snprintf(lq->what, sizeof lq->what, "attention dQ (T %lld, S %lld, D %lld)", T, S, D);
    *count = 3;
    return WGML_OK;
}

/* ---------------------------------------------------------------- gradient rules and entries */

/* sums over S keys and D dims of products of [-2, 2] values, as matmul's */
WGML_OP_ENTRY(ATTENTION) = {.name = "attention", .kind = WGML_KIND_KERNEL, .arity = 3, .build = wgml_build_attention,
                       .vjp = wgml_vjp_attention, DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1)};
WGML_OP_ENTRY(ATTENTION_GRAD) = {.name = "attention_grad", .kind = WGML_KIND_KERNEL, .arity = 5, .build = wgml_build_attention_grad,
                            .f16_out = true, DOMAIN(-2, 2, -2, 2), ARITH, FLOOR(1),
                            .no_grad = "made by backward only (no second derivatives)"};
