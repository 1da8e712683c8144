/*
 * The attention kernels' WGSL generator (ops/attention/attention.c says what each kernel computes
 * and why it is tiled so). Each kernel is written for one head dim and one tile shape, with
 * the loops over D and over a tile's rows of fixed length and their bodies unrolled, so that
 * every register tile is a named variable (naga emits arrays indexed at run time as local
 * memory) and most workgroup-memory addresses are a register plus a constant.
 *
 * Common layout: a workgroup's threads form rows / 4 lines (ty) of tx threads; thread
 * (ty, tx) owns rows ty*4 .. ty*4+3 of the workgroup's tile, the tile's columns tx + tx_n*c
 * in the score phase and the head dims tx + tx_n*c (as vec4s when it owns a multiple of 4)
 * in the accumulation phase. Rows of Q, K, V and dO sit in workgroup memory as vec4s. The
 * score phase reads one vec4 column of 4 rows that every lane of a line shares (stored as
 * is) and of the rows tx + tx_n*c, different in each lane: those are stored with vec4
 * column c of row r at c ^ (r & swizzle), so that the lanes hit different banks; lanes that
 * read along one such row still read consecutive vec4s. Score tiles pass through workgroup
 * memory as vec4s over a thread's 4 rows.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/sbuf.h"
#include "ops/attention/attention.h"

/* the generator's derived constants of one kernel */
typedef struct gen {
    wgml_sbuf *b;
    const wgml_attn_kernel *k;
    int dp4;  /* vec4s per stored row */
    int swm;  /* the row swizzle mask: dp4 a power of two, else 0 */
    int u;    /* the loops over D step this many vec4s (unrolled): swm + 1 or a divisor of dp4 */
    int nt;   /* threads */
    int w;    /* head dims a thread owns in the accumulation phase */
    bool v4;  /* ... as w / 4 vec4s (else w floats) */
    int nacc; /* accumulator registers per row: w / 4 or w */
    const char *in; /* the indent of the tile loads and stores being written */
} gen;

static const char xyzw[] = "xyzw";

static int min_i(int a, int b) { return a < b ? a : b; }

/* the swizzle mask for rows of n vec4s: lanes reading vec4 c of rows r..r+7 spread over
   8 columns (n a power of two >= 8), or over n of them */
static int swizzle_mask(int n) { return (n & (n - 1)) ? 0 : min_i(n, 8) - 1; }

static gen gen_of(wgml_sbuf *b, const wgml_attn_kernel *k)
{
    gen g = {.b = b, .k = k, .dp4 = k->dp / 4, .in = "    "};
    g.swm = swizzle_mask(g.dp4);
    g.u = g.dp4 % 8 == 0 ? 8 : g.dp4 % 4 == 0 ? 4 : g.dp4 % 2 == 0 ? 2 : 1;
    g.nt = k->rows / 4 * k->tx;
    g.w = k->dp / k->tx;
    g.v4 = g.w % 4 == 0;
    g.nacc = g.v4 ? g.w / 4 : g.w;
    return g;
}

uint64_t wgml_attn_shared_bytes(const wgml_attn_kernel *k)
{
    uint64_t dp = (uint64_t)k->dp, r = (uint64_t)k->rows, c = (uint64_t)k->cols;
    switch (k->kind) {
    case WGML_ATTN_FORWARD: return 4 * (r * dp + c * dp + r * c);     /* Q, K or V, P */
    case WGML_ATTN_DKV: return 4 * (2 * r * dp + 2 * c * dp + 2 * r * c + 2 * c); /* K, V, Q, dO, P, dS, L, Delta */
    case WGML_ATTN_DQ: return 4 * (2 * r * dp + 2 * c * dp + r * c);  /* Q, dO, K, V, dS */
    default: return 0;
    }
}

uint64_t wgml_attn_step_trips(const wgml_attn_kernel *k)
{
    if (k->kind == WGML_ATTN_DELTA) return 0; /* unrolled */
    gen g = gen_of(NULL, k);
    return (uint64_t)(g.dp4 / g.u + k->cols / 8 + 1); /* the dot products, the accumulation, the step */
}

/* ---------------------------------------------------------------- shared pieces */

static void put_header(gen *g)
{
    const wgml_attn_kernel *k = g->k;
    static const char *const names[] = {"forward", "row dot products dO . O", "dK and dV", "dQ"};
    wgml_sbuf *b = g->b;
    wgml_sbuf_put(b, "// generated attention kernel: %s, D = %d (rows of %d), tile %d x %d, %d threads (%d x %d)%s%s\n",
                  names[k->kind], k->d, k->dp, k->rows, k->cols, k->kind == WGML_ATTN_DELTA ? 256 : g->nt,
                  k->rows / 4, k->tx, k->vec ? ", vec4 reads" : "", k->out16 ? ", halves out" : "");
    if (k->out16) wgml_sbuf_put(b, "enable f16;\n");
    wgml_attn_put_params(b, k->d, g->dp4);
}

/* ---------------------------------------------------------------- pieces both generators write */

void wgml_attn_put_params(wgml_sbuf *b, int d, int dp4)
{
    wgml_sbuf_put(b, "struct Params {\n"
                     "    B: u32, H: u32, Hkv: u32, T: u32,\n"
                     "    S: u32, R: u32, causal: u32, gx: u32,\n"
                     "    q_off: u32, q_sb: u32, q_sh: u32, q_st: u32,\n"
                     "    k_off: u32, k_sb: u32, k_sh: u32, k_st: u32,\n"
                     "    v_off: u32, v_sb: u32, v_sh: u32, v_st: u32,\n"
                     "    do_off: u32, lse_off: u32, dk_off: u32, dv_off: u32,\n"
                     "    scale2: f32, neg_inf: f32, scale: f32, tiles: u32,\n"
                     "    o_sb: u32, o_sh: u32, o_st: u32, pad0: u32,\n"
                     "    do_sb: u32, do_sh: u32, do_st: u32, pad1: u32,\n"
                     "    dq_off: u32, dq_sb: u32, dq_sh: u32, dq_st: u32,\n"
                     "    kv_sb: u32, kv_sh: u32, kv_st: u32, pad2: u32,\n"
                     "}\n"
                     "@group(0) @binding(0) var<uniform> P: Params;\n");
    wgml_sbuf_put(b, "const D = %du;\nconst DP4 = %du;\nconst LN2 = 0.6931471805599453;\n", d, dp4);
}

void wgml_attn_put_input(wgml_sbuf *b, int binding, const char *name, bool vec)
{
    wgml_sbuf_put(b, "@group(0) @binding(%d) var<storage, read> %s: array<%s>;\n", binding, name, vec ? "vec4<f32>" : "f32");
}

void wgml_attn_put_loader(wgml_sbuf *b, const char *x, const char *buf, bool vec, bool padded)
{
    wgml_sbuf_put(b, "fn ld_%s(base: u32, c4: u32) -> vec4<f32> {\n", x);
    if (vec) {
        if (padded) wgml_sbuf_put(b, "    if (c4 * 4u >= D) { return vec4<f32>(0.0); }\n");
        wgml_sbuf_put(b, "    return %s[base / 4u + c4];\n}\n", buf);
        return;
    }
    wgml_sbuf_put(b, "    var r = vec4<f32>(0.0);\n    let d = c4 * 4u;\n");
    for (int c = 0; c < 4; c++) wgml_sbuf_put(b, "    if (d + %du < D) { r.%c = %s[base + d + %du]; }\n", c, xyzw[c], buf, c);
    wgml_sbuf_put(b, "    return r;\n}\n");
}

void wgml_attn_put_key_range(wgml_sbuf *b, int rows, int cols)
{
    wgml_sbuf_put(b, "    let iend = min(i0 + %du, P.T);\n"
                     "    var kend = P.S;\n"
                     "    if (P.causal != 0u) { kend = select(0u, min(P.S, iend + P.S - P.T), iend + P.S > P.T); }\n"
                     "    let ntiles = (kend + %du) / %du;\n",
                  rows, cols - 1, cols);
}

void wgml_attn_put_query_tile(wgml_sbuf *b, int rows, bool grads, bool tile_major)
{
    /* tile-major: every head's longest tile (causal) before any head's next, the short ones
       last; else a head's tiles together (longest first), which likely share its K and V in L2 */
    if (tile_major)
        wgml_sbuf_put(b, "    let bh = wid %% (P.B * P.H);\n"
                         "    let i0 = (P.tiles - 1u - wid / (P.B * P.H)) * %du; // the longest rows (causal) first, tile-major\n",
                      rows);
    else
        wgml_sbuf_put(b, "    let bh = wid / P.tiles;\n"
                         "    let i0 = (P.tiles - 1u - wid %% P.tiles) * %du; // the longest rows (causal) first\n",
                      rows);
    wgml_sbuf_put(b, "    let b = bh / P.H;\n    let h = bh %% P.H;\n    let g = h / P.R;\n");
    if (grads) wgml_sbuf_put(b, "    let rb = bh * P.T;\n");
    wgml_sbuf_put(b, "    let qb = P.q_off + b * P.q_sb + h * P.q_sh;\n");
    if (grads) wgml_sbuf_put(b, "    let ob = P.do_off + b * P.do_sb + h * P.do_sh;\n");
    wgml_sbuf_put(b, "    let kb = P.k_off + b * P.k_sb + g * P.k_sh;\n"
                     "    let vb = P.v_off + b * P.v_sb + g * P.v_sh;\n");
}

void wgml_attn_put_key_tile(wgml_sbuf *b, int rows)
{
    wgml_sbuf_put(b, "    let bg = wid / P.tiles;\n"
                     "    let j0 = (wid %% P.tiles) * %du; // the keys most queries see (causal) first\n"
                     "    let b = bg / P.Hkv;\n    let g = bg %% P.Hkv;\n"
                     "    let kb = P.k_off + b * P.k_sb + g * P.k_sh;\n"
                     "    let vb = P.v_off + b * P.v_sb + g * P.v_sh;\n",
                  rows);
}

void wgml_attn_put_forward_bindings(wgml_sbuf *b, bool vec, bool padded)
{
    static const char *const in[3][2] = {{"q", "Q"}, {"k", "K"}, {"v", "V"}};
    for (int i = 0; i < 3; i++) wgml_attn_put_input(b, i + 1, in[i][1], vec);
    wgml_sbuf_put(b, "@group(0) @binding(4) var<storage, read_write> O: array<f32>;\n");
    for (int i = 0; i < 3; i++) wgml_attn_put_loader(b, in[i][0], in[i][1], vec, padded);
}

void wgml_attn_put_grad_bindings(wgml_sbuf *b, bool vec, bool padded, bool out16)
{
    static const char *const in[4][2] = {{"q", "Q"}, {"k", "K"}, {"v", "V"}, {"do", "DO"}};
    for (int i = 0; i < 4; i++) wgml_attn_put_input(b, i + 1, in[i][1], vec);
    wgml_sbuf_put(b, "@group(0) @binding(5) var<storage, read> LSE: array<f32>;\n"
                     "@group(0) @binding(6) var<storage, read> DEL: array<f32>;\n"
                     "@group(0) @binding(7) var<storage, read_write> OUT: array<%s>;\n",
                  out16 ? "f16" : "f32");
    for (int i = 0; i < 4; i++) wgml_attn_put_loader(b, in[i][0], in[i][1], vec, padded);
}

/* ---------------------------------------------------------------- the SIMT kernels */

/* fn ld_<x>(base, c4): vec4 c4 of the row of tensor X starting at element base (zeros past D) */
static void put_loader(gen *g, const char *x, const char *buf)
{
    wgml_attn_put_loader(g->b, x, buf, g->k->vec, g->k->dp != g->k->d);
}

static void put_input(gen *g, int binding, const char *name) { wgml_attn_put_input(g->b, binding, name, g->k->vec); }

/* Loads `rows` rows of a tensor into registers <reg>0.. (as many vec4s as this thread
   stages): row r of the tile is the tensor's row row0 + r, which starts at element
   base + (row0 + r) * stride; rows at or past lim read as zeros; scale multiplies. */
static void put_tile_load(gen *g, const char *reg, const char *x, int rows, const char *row0, const char *lim,
                          const char *base, const char *stride, const char *scale)
{
    int total = rows * g->dp4;
    const char *in = g->in;
    for (int n = 0; n * g->nt < total; n++) {
        wgml_sbuf_put(g->b, "%s{\n%s    let e = lid + %du;\n%s    %s%d = vec4<f32>(0.0);\n", in, in, n * g->nt, in, reg, n);
        bool tail = (n + 1) * g->nt > total;
        if (tail) wgml_sbuf_put(g->b, "%s    if (e < %du) {\n", in, total);
        wgml_sbuf_put(g->b, "%s    let r = %s + e / DP4;\n"
                            "%s    if (r < %s) { %s%d = ld_%s(%s + r * %s, e %% DP4)%s%s; }\n",
                      in, row0, in, lim, reg, n, x, base, stride, scale ? " * " : "", scale ? scale : "");
        if (tail) wgml_sbuf_put(g->b, "%s    }\n", in);
        wgml_sbuf_put(g->b, "%s}\n", in);
    }
}

/* ... and stores them into workgroup array sh: row r's vec4 c at r * DP4 + c, or swizzled
   at r * DP4 + (c ^ (r & swm)) */
static void put_tile_store(gen *g, const char *reg, const char *sh, int rows, bool swizzled)
{
    int swm = swizzled ? g->swm : 0;
    int total = rows * g->dp4;
    const char *in = g->in;
    for (int n = 0; n * g->nt < total; n++) {
        wgml_sbuf_put(g->b, "%s{\n%s    let e = lid + %du;\n", in, in, n * g->nt);
        bool tail = (n + 1) * g->nt > total;
        if (tail) wgml_sbuf_put(g->b, "%s    if (e < %du) {\n", in, total);
        if (swm)
            wgml_sbuf_put(g->b, "%s    let r = e / DP4;\n%s    %s[r * DP4 + ((e %% DP4) ^ (r & %du))] = %s%d;\n", in, in, sh, swm, reg, n);
        else
            wgml_sbuf_put(g->b, "%s    %s[e] = %s%d;\n", in, sh, reg, n);
        if (tail) wgml_sbuf_put(g->b, "%s    }\n", in);
        wgml_sbuf_put(g->b, "%s}\n", in);
    }
}

static void put_tile_regs(gen *g, const char *reg, int rows)
{
    for (int n = 0; n * g->nt < rows * g->dp4; n++) wgml_sbuf_put(g->b, "    var %s%d: vec4<f32>;\n", reg, n);
}

/* the main function's opening: workgroup index wid (past `count` workgroups: nothing to do),
   the thread's line ty and lane tx */
static void put_main(gen *g, const char *count)
{
    wgml_sbuf_put(g->b, "@compute @workgroup_size(%d)\n"
                        "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
                        "    let wid = wg.x + wg.y * P.gx;\n"
                        "    if (wid >= %s) { return; }\n"
                        "    let tx = lid %% %du;\n    let ty = lid / %du;\n",
                  g->nt, count, g->k->tx, g->k->tx);
    /* swizzled rows: lane tx's rows tx + tx_n*c all have (row & swm) = tx & swm, so vec4 kb + kk
       of them is at kb + (kk ^ (tx & swm)); along row j, the thread's vec4 tx + tx_n*c is at
       (tx ^ (j & swm)) + tx_n*c */
    for (int kk = 0; kk < g->u; kk++) wgml_sbuf_put(g->b, "    let kx%d = %du ^ (tx & %du);\n", kk, kk, g->swm);
    for (int m = 0; m <= g->swm; m++) wgml_sbuf_put(g->b, "    let tq%d = tx ^ %du;\n", m, m);
}

/* Dot products over D of 4 shared rows of a_sh (a_row<r>: where row r starts, stored as is)
   with `nc` lane rows of b_sh (b_row<c>, swizzled): acc<r>_<c> += a . b, d ascending (the same
   order in every kernel, so that the forward pass and the gradient compute bit-identical
   scores). One loop over D for any number of such products (a_sh[i], b_sh[i], acc[i]). */
static void put_dots(gen *g, int n, const char *const *acc, const char *const *a_sh, const char *a_row,
                     const char *const *b_sh, const char *b_row, int nc)
{
    wgml_sbuf *b = g->b;
    wgml_sbuf_put(b, "        for (var kb = 0u; kb < DP4; kb += %du) {\n", g->u);
    for (int kk = 0; kk < g->u; kk++) {
        wgml_sbuf_put(b, "            {\n");
        for (int i = 0; i < n; i++) {
            for (int r = 0; r < 4; r++)
                wgml_sbuf_put(b, "                let a%d_%d = %s[%s%d + kb + %du];\n", i, r, a_sh[i], a_row, r, kk);
            for (int c = 0; c < nc; c++) {
                if (g->swm) wgml_sbuf_put(b, "                let b%d_%d = %s[%s%d + kb + kx%d];\n", i, c, b_sh[i], b_row, c, kk);
                else wgml_sbuf_put(b, "                let b%d_%d = %s[%s%d + kb + %du];\n", i, c, b_sh[i], b_row, c, kk);
            }
        }
        for (int e = 0; e < 4; e++)
            for (int i = 0; i < n; i++)
                for (int r = 0; r < 4; r++)
                    for (int c = 0; c < nc; c++)
                        wgml_sbuf_put(b, "                %s%d_%d = fma(a%d_%d.%c, b%d_%d.%c, %s%d_%d);\n", acc[i], r, c, i, r,
                                      xyzw[e], i, c, xyzw[e], acc[i], r, c);
        wgml_sbuf_put(b, "            }\n");
    }
    wgml_sbuf_put(b, "        }\n");
}

/* For every row j < count of stored tiles: acc[i]<r>_<c> += p[r] * v_sh[i][row j, the
   thread's head dims], p the vec4 over the thread's 4 rows at p_sh[i][j * p4 + ty]; v_sh[i]
   swizzled or not. The loop steps 8 rows (unrolled), so (j & swm) is a constant. */
static void put_accumulate(gen *g, int n, const char *const *acc, const char *const *p_sh, int p4, const char *const *v_sh,
                           bool swizzled, int count)
{
    wgml_sbuf *b = g->b;
    const int tx = g->k->tx;
    wgml_sbuf_put(b, "        for (var jb = 0u; jb < %du; jb += 8u) {\n", count);
    for (int jj = 0; jj < 8; jj++) {
        int m = swizzled ? jj & g->swm : 0;
        wgml_sbuf_put(b, "            {\n                let vr = (jb + %du) * DP4;\n", jj);
        for (int i = 0; i < n; i++) {
            wgml_sbuf_put(b, "                let p%d = %s[(jb + %du) * %du + ty];\n", i, p_sh[i], jj, p4);
            for (int c = 0; c < g->nacc; c++) {
                if (g->v4)
                    wgml_sbuf_put(b, "                let v%d_%d = %s[vr + tq%d + %du];\n", i, c, v_sh[i], m, tx * c);
                else /* a float of the row: vec4 (d / 4) ^ m, component d %% 4 */
                    wgml_sbuf_put(b, "                let v%d_%d = %s[vr + (((tx + %du) / 4u) ^ %du)][(tx + %du) %% 4u];\n", i, c,
                                  v_sh[i], tx * c, m, tx * c);
            }
        }
        for (int i = 0; i < n; i++)
            for (int c = 0; c < g->nacc; c++)
                for (int r = 0; r < 4; r++) {
                    if (g->v4)
                        wgml_sbuf_put(b, "                %s%d_%d = fma(vec4<f32>(p%d.%c), v%d_%d, %s%d_%d);\n", acc[i], r, c, i,
                                      xyzw[r], i, c, acc[i], r, c);
                    else
                        wgml_sbuf_put(b, "                %s%d_%d = fma(p%d.%c, v%d_%d, %s%d_%d);\n", acc[i], r, c, i, xyzw[r], i,
                                      c, acc[i], r, c);
                }
        wgml_sbuf_put(b, "            }\n");
    }
    wgml_sbuf_put(b, "        }\n");
}

static void put_acc_decl(gen *g, const char *acc)
{
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < g->nacc; c++)
            wgml_sbuf_put(g->b, "    var %s%d_%d = %s;\n", acc, r, c, g->v4 ? "vec4<f32>(0.0)" : "0.0");
}

/* Writes accumulator row r (times `mul`) into out at element `base` + the thread's head dims,
   those below D; as halves where `to` is "f16" (else ""). */
static void put_acc_store(gen *g, const char *acc, int r, const char *out, const char *base, const char *mul, const char *to)
{
    const int tx = g->k->tx;
    for (int c = 0; c < g->nacc; c++) {
        if (g->v4) {
            wgml_sbuf_put(g->b, "            {\n                let d = (tx + %du) * 4u;\n", tx * c);
            for (int e = 0; e < 4; e++)
                wgml_sbuf_put(g->b, "                if (d + %du < D) { %s[%s + d + %du] = %s(%s%d_%d.%c * %s); }\n", e, out, base, e,
                              to, acc, r, c, xyzw[e], mul);
            wgml_sbuf_put(g->b, "            }\n");
        } else {
            wgml_sbuf_put(g->b, "            if (tx + %du < D) { %s[%s + tx + %du] = %s(%s%d_%d * %s); }\n", tx * c, out, base, tx * c,
                          to, acc, r, c, mul);
        }
    }
}

/* the key range of query tile i0.. (`kend`, `ntiles` of `bc` keys): every key, or with the
   causal mask those the tile's last row sees */
static void put_key_range(gen *g, int br, int bc) { wgml_attn_put_key_range(g->b, br, bc); }

/* `ok` for score (row i, key j): the key exists and, causal, the query sees it (rows past T
   are masked too: their loads read zeros) */
#define SEES "(%s < P.T && %s < P.S && (P.causal == 0u || %s + P.T <= %s + P.S))"

/* The score registers of a thread, 4 rows by nc columns, zeroed: s<r>_<c>, and with grads the
   d<r>_<c> (dO . v) beside them. */
static void put_score_regs(gen *g, int nc, bool grads)
{
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < nc; c++) {
            wgml_sbuf_put(g->b, "        var s%d_%d = 0.0;\n", r, c);
            if (grads) wgml_sbuf_put(g->b, "        var d%d_%d = 0.0;\n", r, c);
        }
}

/* ---------------------------------------------------------------- forward */

/* O = softmax(scale Q K^T) V for `rows` queries of one head, streaming `cols` keys a step;
   writes O and each row's log2-sum-exp2 of the scaled scores, L = m + log2(l), after O. */
static void put_forward(gen *g)
{
    const wgml_attn_kernel *k = g->k;
    wgml_sbuf *b = g->b;
    const int br = k->rows, bc = k->cols, tx = k->tx, cn = bc / tx, br4 = br / 4;
    wgml_attn_put_forward_bindings(b, k->vec, k->dp != k->d);
    wgml_sbuf_put(b, "var<workgroup> qs: array<vec4<f32>, %d>; // Q tile, scaled\n", br * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> kv: array<vec4<f32>, %d>; // K tile (swizzled), then V tile\n", bc * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> pb: array<vec4<f32>, %d>; // P [key][rows / 4], or each lane's row partials [lane][rows / 4]\n",
                  bc * br4);
    put_main(g, "P.tiles * P.B * P.H");
    wgml_attn_put_query_tile(b, br, false, false);
    wgml_sbuf_put(b, "    let ninf = P.neg_inf;\n");
    put_tile_regs(g, "t", br > bc ? br : bc);
    put_tile_regs(g, "u", bc);
    put_tile_load(g, "t", "q", br, "i0", "P.T", "qb", "P.q_st", "P.scale2");
    put_tile_store(g, "t", "qs", br, false);
    put_key_range(g, br, bc);
    wgml_sbuf_put(b, "    var m = vec4<f32>(ninf); // running max of each row (scaled scores, log2 units)\n"
                     "    var l = vec4<f32>(0.0);  // running sum of exp2(s - m), this thread's keys\n");
    put_acc_decl(g, "o");
    for (int r = 0; r < 4; r++) wgml_sbuf_put(b, "    let qr%d = (ty * 4u + %du) * DP4;\n", r, r);
    for (int c = 0; c < cn; c++) wgml_sbuf_put(b, "    let kr%d = (tx + %du) * DP4;\n", c, tx * c);
    g->in = "        ";
    if (k->pre & 3) wgml_sbuf_put(b, "    if (ntiles > 0u) {\n");
    if (k->pre & 1) put_tile_load(g, "t", "k", bc, "0u", "P.S", "kb", "P.k_st", NULL);
    if (k->pre & 2) put_tile_load(g, "u", "v", bc, "0u", "P.S", "vb", "P.v_st", NULL);
    if (k->pre & 3) wgml_sbuf_put(b, "    }\n");
    wgml_sbuf_put(b, "    for (var t = 0u; t < ntiles; t++) {\n        let j0 = t * %du;\n", bc);
    if (!(k->pre & 1)) put_tile_load(g, "t", "k", bc, "j0", "P.S", "kb", "P.k_st", NULL);
    wgml_sbuf_put(b, "        workgroupBarrier(); // the last step's reads of kv and pb are done\n");
    put_tile_store(g, "t", "kv", bc, true);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_score_regs(g, cn, false);
    {
        const char *acc[] = {"s"}, *a[] = {"qs"}, *bs[] = {"kv"};
        put_dots(g, 1, acc, a, "qr", bs, "kr", cn);
    }
    /* masks only on tiles that cross the end of the keys or the diagonal */
    wgml_sbuf_put(b, "        if (j0 + %du > P.S || (P.causal != 0u && j0 + %du + P.T > i0 + P.S)) {\n", bc, bc - 1);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < cn; c++) {
            char i[32], j[32];
            snprintf(i, sizeof i, "(i0 + ty * 4u + %du)", r);
            snprintf(j, sizeof j, "(j0 + tx + %du)", tx * c);
            wgml_sbuf_put(b, "            s%d_%d = select(ninf, s%d_%d, " SEES ");\n", r, c, r, c, i, j, j, i);
        }
    wgml_sbuf_put(b, "        }\n");
    /* row maxima: this thread's, then every lane's: through pb, or (a line's lanes in one
       subgroup) a butterfly of shuffles, which needs no barrier; a max is exact in any order */
    const bool sg = k->pre & 32;
    if (sg) wgml_sbuf_put(b, "        var pm = vec4<f32>(");
    else wgml_sbuf_put(b, "        pb[tx * %du + ty] = vec4<f32>(", br4);
    for (int r = 0; r < 4; r++) {
        for (int c = 1; c < cn; c++) wgml_sbuf_put(b, "max(");
        wgml_sbuf_put(b, "s%d_0", r);
        for (int c = 1; c < cn; c++) wgml_sbuf_put(b, ", s%d_%d)", r, c);
        wgml_sbuf_put(b, "%s", r < 3 ? ", " : ");\n");
    }
    if (sg) {
        for (int o = 1; o < tx; o <<= 1) wgml_sbuf_put(b, "        pm = max(pm, subgroupShuffleXor(pm, %du));\n", o);
        if (!(k->pre & 2)) put_tile_load(g, "u", "v", bc, "j0", "P.S", "vb", "P.v_st", NULL);
        wgml_sbuf_put(b, "        let mx = max(m, pm);\n");
    } else {
        wgml_sbuf_put(b, "        workgroupBarrier(); // kv is free (K read), the partial maxima are in\n");
        if (!(k->pre & 2)) put_tile_load(g, "u", "v", bc, "j0", "P.S", "vb", "P.v_st", NULL);
        wgml_sbuf_put(b, "        var mx = m;\n");
        for (int x = 0; x < tx; x++) wgml_sbuf_put(b, "        mx = max(mx, pb[%du + ty]);\n", x * br4);
    }
    wgml_sbuf_put(b, "        // a row with no key yet keeps m = -inf: exponents against 0 instead give 0, not NaN\n"
                     "        let mu = select(mx, vec4<f32>(0.0), mx == vec4<f32>(ninf));\n"
                     "        let al = exp2(m - mu);\n"
                     "        m = mx;\n");
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < cn; c++) wgml_sbuf_put(b, "        s%d_%d = exp2(s%d_%d - mu.%c);\n", r, c, r, c, xyzw[r]);
    wgml_sbuf_put(b, "        l = l * al + vec4<f32>(");
    for (int r = 0; r < 4; r++) {
        for (int c = 0; c < cn; c++) wgml_sbuf_put(b, "%ss%d_%d", c ? " + " : "", r, c);
        wgml_sbuf_put(b, "%s", r < 3 ? ", " : ");\n");
    }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < g->nacc; c++) wgml_sbuf_put(b, "        o%d_%d = o%d_%d * al.%c;\n", r, c, r, c, xyzw[r]);
    wgml_sbuf_put(b, "        workgroupBarrier(); // %s\n", sg ? "kv is free (K read)" : "every lane has read the partial maxima");
    for (int c = 0; c < cn; c++)
        wgml_sbuf_put(b, "        pb[(tx + %du) * %du + ty] = vec4<f32>(s0_%d, s1_%d, s2_%d, s3_%d);\n", tx * c, br4, c, c, c, c);
    put_tile_store(g, "u", "kv", bc, false);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    if (k->pre & 3) {
        wgml_sbuf_put(b, "        if (t + 1u < ntiles) { // the next tiles' loads overlap this P V\n");
        char next[32];
        snprintf(next, sizeof next, "j0 + %du", bc);
        g->in = "            ";
        if (k->pre & 1) put_tile_load(g, "t", "k", bc, next, "P.S", "kb", "P.k_st", NULL);
        if (k->pre & 2) put_tile_load(g, "u", "v", bc, next, "P.S", "vb", "P.v_st", NULL);
        wgml_sbuf_put(b, "        }\n");
    }
    g->in = "    ";
    {
        const char *acc[] = {"o"}, *ps[] = {"pb"}, *vs[] = {"kv"};
        put_accumulate(g, 1, acc, ps, br4, vs, false, bc);
    }
    wgml_sbuf_put(b, "    }\n");
    /* the rows' sums over every lane, then O / l and L */
    wgml_sbuf_put(b, "    workgroupBarrier();\n    pb[tx * %du + ty] = l;\n    workgroupBarrier();\n    var lt = vec4<f32>(0.0);\n",
                  br4);
    for (int x = 0; x < tx; x++) wgml_sbuf_put(b, "    lt = lt + pb[%du + ty];\n", x * br4);
    wgml_sbuf_put(b, "    let none = lt == vec4<f32>(0.0); // rows that see no key: O = 0, L = -inf\n"
                     "    let inv = select(vec4<f32>(1.0) / lt, vec4<f32>(0.0), none);\n"
                     "    let lse = select(m + log2(lt), vec4<f32>(ninf), none);\n");
    for (int r = 0; r < 4; r++) {
        char mul[16];
        snprintf(mul, sizeof mul, "inv.%c", xyzw[r]);
        wgml_sbuf_put(b, "    {\n        let i = i0 + ty * 4u + %du;\n        if (i < P.T) {\n            let ob = b * P.o_sb + h * P.o_sh + i * P.o_st;\n", r);
        put_acc_store(g, "o", r, "O", "ob", mul, "");
        wgml_sbuf_put(b, "            if (tx == 0u) { O[P.lse_off + bh * P.T + i] = lse.%c; }\n        }\n    }\n", xyzw[r]);
    }
    wgml_sbuf_put(b, "}\n");
}

/* ---------------------------------------------------------------- the gradient */

/* Delta[row] = dO[row] . O[row]: 16 lanes per row read its vec4s side by side, then one sums
   their partial sums in a fixed order */
static void put_delta(gen *g)
{
    wgml_sbuf *b = g->b;
    int d4 = (g->k->d + 3) / 4;
    wgml_sbuf_put(b, "@group(0) @binding(1) var<storage, read> O: array<%s>;\n", g->k->vec ? "vec4<f32>" : "f32");
    put_input(g, 2, "DO");
    wgml_sbuf_put(b, "@group(0) @binding(3) var<storage, read_write> DEL: array<f32>;\n");
    put_loader(g, "o", "O");
    put_loader(g, "do", "DO");
    wgml_sbuf_put(b, "var<workgroup> part: array<f32, 256>;\n"
                     "@compute @workgroup_size(256)\n"
                     "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
                     "    let row = (wg.x + wg.y * P.gx) * 16u + lid / 16u;\n"
                     "    let lane = lid %% 16u;\n"
                     "    let rows = P.B * P.H * P.T;\n"
                     "    var acc = vec4<f32>(0.0);\n"
                     "    if (row < rows) {\n"
                     "        let t = row %% P.T;\n        let h = (row / P.T) %% P.H;\n        let b = row / P.T / P.H;\n"
                     "        let ob = b * P.o_sb + h * P.o_sh + t * P.o_st;\n"
                     "        let db = P.do_off + b * P.do_sb + h * P.do_sh + t * P.do_st;\n");
    for (int c = 0; c * 16 < d4; c++)
        wgml_sbuf_put(b, "        if (lane + %du < %du) { acc = fma(ld_o(ob, lane + %du), ld_do(db, lane + %du), acc); }\n",
                      16 * c, d4, 16 * c, 16 * c);
    wgml_sbuf_put(b, "    }\n"
                     "    part[lid] = (acc.x + acc.y) + (acc.z + acc.w);\n"
                     "    workgroupBarrier();\n"
                     "    if (lane == 0u && row < rows) {\n"
                     "        var s = part[lid];\n");
    for (int l = 1; l < 16; l++) wgml_sbuf_put(b, "        s = s + part[lid + %du];\n", l);
    wgml_sbuf_put(b, "        DEL[row] = s;\n    }\n}\n");
}

/* the gradient kernels' bindings: inputs, L (after O in the forward's buffer), Delta, out */
static void put_grad_bindings(gen *g) { wgml_attn_put_grad_bindings(g->b, g->k->vec, g->k->dp != g->k->d, g->k->out16); }

/* The probabilities and score gradients of a tile of br queries from i0 and bc keys from j0,
   from s<r>_<c> (scaled scores) and d<r>_<c> (dO . v): s := P = exp2(s - L),
   d := dS = P (d - Delta); L and Delta of score (r, c) are the expressions lse/del with %d for
   r or c (whichever indexes the query), and masked scores give 0 (masks only on tiles that
   cross the end of the queries or keys, or the diagonal). */
static void put_probabilities(gen *g, int nc, bool query_is_row, const char *i_fmt, const char *j_fmt, int br, int bc)
{
    wgml_sbuf *b = g->b;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < nc; c++) {
            int qi = query_is_row ? r : c;
            wgml_sbuf_put(b, "        s%d_%d = exp2(s%d_%d - lq%d);\n", r, c, r, c, qi);
        }
    wgml_sbuf_put(b, "        if (i0 + %d > P.T || j0 + %d > P.S || (P.causal != 0u && j0 + %d + P.T > i0 + P.S)) {\n", br, bc,
                  bc - 1);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < nc; c++) {
            char i[48], j[48];
            snprintf(i, sizeof i, i_fmt, query_is_row ? r : g->k->tx * c);
            snprintf(j, sizeof j, j_fmt, query_is_row ? g->k->tx * c : r);
            wgml_sbuf_put(b, "            s%d_%d = select(0.0, s%d_%d, " SEES ");\n", r, c, r, c, i, j, j, i);
        }
    wgml_sbuf_put(b, "        }\n");
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < nc; c++) wgml_sbuf_put(b, "        d%d_%d = s%d_%d * (d%d_%d - dl%d);\n", r, c, r, c, r, c, query_is_row ? r : c);
}

/* dK/dV's loads of step `it` (an expression) into registers: Q (scaled) into t<n>, dO into
   u<n>, L and Delta of the step's queries into lv<n>, dv<n> */
static void put_dkv_fetch(gen *g, const char *it)
{
    const int br = g->k->cols;
    wgml_sbuf *b = g->b;
    wgml_sbuf_put(b, "        {\n"
                     "            let fh = g * P.R + (%s) / nq;\n"
                     "            let fi0 = (qstart + (%s) %% nq) * %du;\n"
                     "            let frb = (b * P.H + fh) * P.T; // row index of (b, h, 0)\n"
                     "            let fqb = P.q_off + b * P.q_sb + fh * P.q_sh;\n"
                     "            let fob = P.do_off + b * P.do_sb + fh * P.do_sh;\n",
                  it, it, br);
    g->in = "            ";
    put_tile_load(g, "t", "q", br, "fi0", "P.T", "fqb", "P.q_st", "P.scale2");
    put_tile_load(g, "u", "do", br, "fi0", "P.T", "fob", "P.do_st", NULL);
    g->in = "    ";
    for (int n = 0; n * g->nt < br; n++)
        wgml_sbuf_put(b, "            if (lid + %du < %du && fi0 + lid + %du < P.T) { lv%d = LSE[P.lse_off + frb + fi0 + lid + %du]; dv%d = DEL[frb + fi0 + lid + %du]; }\n"
                         "            else { lv%d = 0.0; dv%d = 0.0; }\n",
                      n * g->nt, br, n * g->nt, n, n * g->nt, n, n * g->nt, n, n);
    wgml_sbuf_put(b, "        }\n");
}

/* dK and dV of `rows` keys of one key/value head: for each query head that reads it and each
   tile of `cols` queries that sees a key of them, recompute the scores, P and dS, then
   dV += P^T dO, dK += dS^T Q */
static void put_dkv(gen *g)
{
    const wgml_attn_kernel *k = g->k;
    wgml_sbuf *b = g->b;
    const int bc = k->rows, br = k->cols, tx = k->tx, ca = br / tx, bc4 = bc / 4;
    const char *to = k->out16 ? "f16" : "";
    put_grad_bindings(g);
    wgml_sbuf_put(b, "var<workgroup> ks: array<vec4<f32>, %d>;\n", bc * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> vs: array<vec4<f32>, %d>;\n", bc * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> qs: array<vec4<f32>, %d>; // scaled, swizzled\n", br * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> os: array<vec4<f32>, %d>; // dO, swizzled\n", br * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> ps: array<vec4<f32>, %d>; // P [query][keys / 4]\n", br * bc4);
    wgml_sbuf_put(b, "var<workgroup> dss: array<vec4<f32>, %d>; // dS [query][keys / 4]\n", br * bc4);
    wgml_sbuf_put(b, "var<workgroup> st: array<f32, %d>; // L, then Delta of the step's queries\n", 2 * br);
    put_main(g, "P.tiles * P.B * P.Hkv");
    wgml_attn_put_key_tile(b, bc);
    put_tile_regs(g, "t", bc > br ? bc : br);
    put_tile_regs(g, "u", br);
    put_tile_load(g, "t", "k", bc, "j0", "P.S", "kb", "P.k_st", NULL);
    put_tile_store(g, "t", "ks", bc, false);
    put_tile_load(g, "t", "v", bc, "j0", "P.S", "vb", "P.v_st", NULL);
    put_tile_store(g, "t", "vs", bc, false);
    wgml_sbuf_put(b, "    // the first query tile that sees one of these keys: i + S >= j0 + T\n"
                     "    var qstart = 0u;\n"
                     "    if (P.causal != 0u && j0 + P.T > P.S) { qstart = (j0 + P.T - P.S) / %du; }\n"
                     "    let nq = (P.T + %du) / %du - qstart;\n"
                     "    let steps = P.R * nq;\n",
                  br, br - 1, br);
    put_acc_decl(g, "dk");
    put_acc_decl(g, "dv");
    for (int r = 0; r < 4; r++) wgml_sbuf_put(b, "    let kr%d = (ty * 4u + %du) * DP4;\n", r, r);
    for (int c = 0; c < ca; c++) wgml_sbuf_put(b, "    let qr%d = (tx + %du) * DP4;\n", c, tx * c);
    for (int n = 0; n * g->nt < br; n++) wgml_sbuf_put(b, "    var lv%d = 0.0;\n    var dv%d = 0.0;\n", n, n);
    if (k->pre & 4) {
        wgml_sbuf_put(b, "    if (steps > 0u) {\n");
        put_dkv_fetch(g, "0u");
        wgml_sbuf_put(b, "    }\n");
    }
    wgml_sbuf_put(b, "    for (var it = 0u; it < steps; it++) {\n"
                     "        let i0 = (qstart + it %% nq) * %du;\n",
                  br);
    if (!(k->pre & 4)) put_dkv_fetch(g, "it");
    wgml_sbuf_put(b, "        workgroupBarrier(); // the last step's reads are done\n");
    g->in = "        ";
    put_tile_store(g, "t", "qs", br, true);
    put_tile_store(g, "u", "os", br, true);
    g->in = "    ";
    for (int n = 0; n * g->nt < br; n++)
        wgml_sbuf_put(b, "        if (lid + %du < %du) { st[lid + %du] = lv%d; st[%du + lid] = dv%d; }\n", n * g->nt, br, n * g->nt, n,
                      br + n * g->nt, n);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_score_regs(g, ca, true);
    {
        const char *acc[] = {"s", "d"}, *a[] = {"ks", "vs"}, *bs[] = {"qs", "os"};
        put_dots(g, 2, acc, a, "kr", bs, "qr", ca);
    }
    for (int c = 0; c < ca; c++)
        wgml_sbuf_put(b, "        let lq%d = st[tx + %du];\n        let dl%d = st[%du + tx + %du];\n", c, tx * c, c, br, tx * c);
    put_probabilities(g, ca, false, "(i0 + tx + %du)", "(j0 + ty * 4u + %du)", br, bc);
    for (int c = 0; c < ca; c++)
        wgml_sbuf_put(b, "        ps[(tx + %du) * %du + ty] = vec4<f32>(s0_%d, s1_%d, s2_%d, s3_%d);\n"
                         "        dss[(tx + %du) * %du + ty] = vec4<f32>(d0_%d, d1_%d, d2_%d, d3_%d);\n",
                      tx * c, bc4, c, c, c, c, tx * c, bc4, c, c, c, c);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    if (k->pre & 4) {
        wgml_sbuf_put(b, "        if (it + 1u < steps) { // the next step's loads overlap this one's sums\n");
        put_dkv_fetch(g, "it + 1u");
        wgml_sbuf_put(b, "        }\n");
    }
    {
        const char *acc[] = {"dv", "dk"}, *p[] = {"ps", "dss"}, *v[] = {"os", "qs"};
        put_accumulate(g, 2, acc, p, bc4, v, true, br);
    }
    wgml_sbuf_put(b, "    }\n");
    /* Q was scaled by scale * log2(e): dK = scale dS^T Q = ln 2 dS^T (scaled Q) */
    for (int r = 0; r < 4; r++) {
        wgml_sbuf_put(b, "    {\n        let j = j0 + ty * 4u + %du;\n        if (j < P.S) {\n"
                         "            let kvb = b * P.kv_sb + g * P.kv_sh + j * P.kv_st;\n"
                         "            let dkb = P.dk_off + kvb;\n            let dvb = P.dv_off + kvb;\n",
                      r);
        put_acc_store(g, "dk", r, "OUT", "dkb", "LN2", to);
        put_acc_store(g, "dv", r, "OUT", "dvb", "1.0", to);
        wgml_sbuf_put(b, "        }\n    }\n");
    }
    wgml_sbuf_put(b, "}\n");
}

/* dQ's loads of the K and V tiles from key j0 (an expression) into registers t<n>, u<n> (at
   the indent g->in) */
static void put_dq_fetch(gen *g, const char *j0)
{
    put_tile_load(g, "t", "k", g->k->cols, j0, "P.S", "kb", "P.k_st", NULL);
    put_tile_load(g, "u", "v", g->k->cols, j0, "P.S", "vb", "P.v_st", NULL);
}

/* dQ of `rows` queries: for each tile of `cols` keys they see, recompute the scores, P and
   dS, then dQ += dS K */
static void put_dq(gen *g)
{
    const wgml_attn_kernel *k = g->k;
    wgml_sbuf *b = g->b;
    const int br = k->rows, bc = k->cols, tx = k->tx, cn = bc / tx, br4 = br / 4;
    const char *to = k->out16 ? "f16" : "";
    put_grad_bindings(g);
    wgml_sbuf_put(b, "var<workgroup> qs: array<vec4<f32>, %d>; // scaled\n", br * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> os: array<vec4<f32>, %d>; // dO\n", br * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> ks: array<vec4<f32>, %d>; // swizzled\n", bc * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> vs: array<vec4<f32>, %d>; // swizzled\n", bc * g->dp4);
    wgml_sbuf_put(b, "var<workgroup> dss: array<vec4<f32>, %d>; // dS [key][rows / 4]\n", bc * br4);
    put_main(g, "P.tiles * P.B * P.H");
    wgml_attn_put_query_tile(b, br, true, false);
    put_tile_regs(g, "t", bc > br ? bc : br);
    put_tile_regs(g, "u", bc);
    put_tile_load(g, "t", "q", br, "i0", "P.T", "qb", "P.q_st", "P.scale2");
    put_tile_store(g, "t", "qs", br, false);
    put_tile_load(g, "t", "do", br, "i0", "P.T", "ob", "P.do_st", NULL);
    put_tile_store(g, "t", "os", br, false);
    for (int r = 0; r < 4; r++)
        wgml_sbuf_put(b, "    var lq%d = 0.0;\n    var dl%d = 0.0;\n"
                         "    if (i0 + ty * 4u + %du < P.T) { lq%d = LSE[P.lse_off + rb + i0 + ty * 4u + %du]; dl%d = DEL[rb + i0 + ty * 4u + %du]; }\n",
                      r, r, r, r, r, r, r);
    put_key_range(g, br, bc);
    put_acc_decl(g, "dq");
    for (int r = 0; r < 4; r++) wgml_sbuf_put(b, "    let qr%d = (ty * 4u + %du) * DP4;\n", r, r);
    for (int c = 0; c < cn; c++) wgml_sbuf_put(b, "    let kr%d = (tx + %du) * DP4;\n", c, tx * c);
    g->in = "        ";
    if (k->pre & 8) {
        wgml_sbuf_put(b, "    if (ntiles > 0u) {\n");
        put_dq_fetch(g, "0u");
        wgml_sbuf_put(b, "    }\n");
    }
    wgml_sbuf_put(b, "    for (var t = 0u; t < ntiles; t++) {\n        let j0 = t * %du;\n", bc);
    if (!(k->pre & 8)) put_dq_fetch(g, "j0");
    wgml_sbuf_put(b, "        workgroupBarrier(); // the last step's reads are done\n");
    put_tile_store(g, "t", "ks", bc, true);
    put_tile_store(g, "u", "vs", bc, true);
    g->in = "    ";
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_score_regs(g, cn, true);
    {
        const char *acc[] = {"s", "d"}, *a[] = {"qs", "os"}, *bs[] = {"ks", "vs"};
        put_dots(g, 2, acc, a, "qr", bs, "kr", cn);
    }
    put_probabilities(g, cn, true, "(i0 + ty * 4u + %du)", "(j0 + tx + %du)", br, bc);
    for (int c = 0; c < cn; c++)
        wgml_sbuf_put(b, "        dss[(tx + %du) * %du + ty] = vec4<f32>(d0_%d, d1_%d, d2_%d, d3_%d);\n", tx * c, br4, c, c, c, c);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    if (k->pre & 8) {
        wgml_sbuf_put(b, "        if (t + 1u < ntiles) { // the next K and V tiles' loads overlap this dS K\n");
        char next[32];
        snprintf(next, sizeof next, "j0 + %du", bc);
        g->in = "            ";
        put_dq_fetch(g, next);
        g->in = "    ";
        wgml_sbuf_put(b, "        }\n");
    }
    {
        const char *acc[] = {"dq"}, *p[] = {"dss"}, *v[] = {"ks"};
        put_accumulate(g, 1, acc, p, br4, v, true, bc);
    }
    wgml_sbuf_put(b, "    }\n");
    for (int r = 0; r < 4; r++) {
        wgml_sbuf_put(b, "    {\n        let i = i0 + ty * 4u + %du;\n        if (i < P.T) {\n            let qo = P.dq_off + b * P.dq_sb + h * P.dq_sh + i * P.dq_st;\n", r);
        put_acc_store(g, "dq", r, "OUT", "qo", "P.scale", to);
        wgml_sbuf_put(b, "        }\n    }\n");
    }
    wgml_sbuf_put(b, "}\n");
}

char *wgml_attn_source(const wgml_attn_kernel *k)
{
    wgml_sbuf b = {0};
    gen g = gen_of(&b, k);
    put_header(&g);
    switch (k->kind) {
    case WGML_ATTN_FORWARD: put_forward(&g); break;
    case WGML_ATTN_DELTA: put_delta(&g); break;
    case WGML_ATTN_DKV: put_dkv(&g); break;
    case WGML_ATTN_DQ: put_dq(&g); break;
    default: break;
    }
    return wgml_sbuf_take(&b);
}
