/*
 * Attention on subgroup matrices: the WGSL of one kernel (attention_sgmat_wgsl.h). What each
 * kernel computes, and the parameter block, are the SIMT kernels' (ops/attention/attention.c);
 * this file says how the matrix units do it.
 *
 * A workgroup of `subgroups` subgroups owns a tile of rows (queries; keys in dK/dV), sm_m a
 * subgroup. Each subgroup loads its rows of the operands it keeps (Q, or K and V in dK/dV) once
 * into left fragments (f16), through the staging buffer xs, which then takes each step's tiles
 * of the other side, converted from f32 to f16 while staged (rows of the head dim padded to
 * 16, zeros past D and past the ends). Scores S = Q K^T (and dO V^T in the gradient) go from
 * the matrix units through the subgroup's own f32 block of workgroup memory to its lanes,
 * which apply the masks and the softmax in f32 and write P (or dS) as f16 to the subgroup's
 * block of ps, the left operand of the next product. The T x S scores are never stored.
 *
 * The forward pass walks the keys twice: first for each row's max and sum (each lane keeps an
 * online max and sum over its columns; the lanes of a row merge theirs at the end), then with
 * the row's log-sum-exp L known, P = exp2(S - L) is exact and O += P V accumulates in result
 * fragments that are never rescaled, so O stays on the matrix units. (One extra Q K^T
 * instead of an f32 round trip of O through workgroup memory at every step.) The gradient
 * kernels recompute P from L as the SIMT kernels do; their accumulators (dQ; dK and dV) stay in
 * result fragments for the whole walk. Results leave straight from the matrix units where the
 * workgroup's whole tile lies inside and D is a multiple of 16 (`direct`; dS carries the
 * result's multiplier, scale in dQ and ln 2 in dK, before it is rounded to f16), else through
 * the subgroup's f32 block.
 *
 * With `one_pass` the forward walks the keys once (put_forward_one_pass): P = exp2(S - m)
 * against a per-row reference m that moves only when a row's max passes it by more than TAU, O
 * rescaled through the subgroup's f32 block at those steps, O / l on the way out (the
 * policy's forward). Whether a step rescales is the workgroup's vote: each subgroup's
 * subgroupAny stored by all its lanes, the slots read in one workgroupUniformLoad. A vote stored
 * under a lane-divergent `if` (the first forms) came out wrong on the H200 although right on
 * llvmpipe; taking the store out of the branch made it right (docs/MEASUREMENTS.md). The likely
 * reason, not shown: NVIDIA's subgroups need not reconverge after such a branch, and the matrix
 * calls after it need the whole subgroup. The emulated stand-ins, which have no subgroups, keep
 * that form.
 * With `p_early` each step's P is written against the references before the vote (the
 * steps that rescale write it again after), so the vote's barriers order it before P V and the
 * barrier between them goes. With `front_loads` the first K and V tile and every part of Q are
 * read from memory before any is staged, their latencies overlapping.
 *
 * With `prefetch` each step's tiles (K and V; Q, dO, L and Delta in dK/dV) are read from memory
 * into registers, as f16, right after the previous step's tiles were staged, so the reads are in
 * flight during that step's products; the top of each step only stores them (one staging
 * buffer: two barriers around the store, as without prefetch). The gradients compute S, a
 * barrier, the lanes read it, a barrier, then dP through the same block (dP in a block of its
 * own, one barrier fewer, was no faster: its memory cost more). With `stage2` the walk's tiles
 * go to two staging buffers in turn, so a step's store cannot meet the last step's products and
 * the barrier at the top of each step goes (xs grows unless the kept rows already need it).
 * With `p_in_xs` the forward and dQ write P (dS) into xs over the step's tile whose products
 * are done, behind the barrier that follows them (K in the forward, staged after V; V in dQ, whose
 * dS K still reads K), so ps goes. With `kept_halves` the rows kept (Q; dO) are staged half
 * their columns at a time, each half's K steps loaded before the next is staged, so xs needs
 * half their room. Both cut the workgroup memory, which these kernels' speed follows.
 *
 * Lanes and elements: a subgroup's block is sm_m rows by `cols`; lpr =
 * subgroup_size / rows lanes share a row (or, with fewer lanes than rows, a lane has several),
 * lane l having columns l % lpr + lpr * j, so every per-row value (max, sum, L, Delta) is a
 * named register and the loops are unrolled. With `quads` (the gradients) 4 lanes share a row,
 * each taking pairs of adjacent columns, 2 (l % 4) + 8 j and the next, of rows l / 4 + 8 k:
 * likely NVIDIA's result fragment layout (assumed, not shown), so with score rows cols + 8
 * floats apart (8 banks, mod 32) the block's stores (64-bit) and the lanes' reads (pairs:
 * 64-bit) would meet no bank twice in a half warp, and P and dS are stored a pair (4 bytes) at
 * a time (rows cols + 8 halves apart); two lanes a row at columns l % 2 + 2 j, rows cols + 4
 * floats apart, put rows r and r + 8 in one bank. (The bank patterns are worked out from
 * NVIDIA's rules, not measured access by access; the kernels' times are in docs/MEASUREMENTS.md.)
 * With `pairs` (the forward's two lanes a row) lane l takes the pairs 2 (l % 2) + 4 j and the
 * next: its reads of the score block are 8-byte loads (LDS.64 in the H200 driver's SASS), by
 * the same rules meeting no bank twice in a half warp with rows cols + 4 floats apart, and P
 * goes a pair (4 bytes) at a time.
 */
#include "ops/attention/attention_sgmat_wgsl.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/sbuf.h"
#include "ops/attention/attention.h"

#define STAGE_PAD 8 /* halves per staged row against bank conflicts (keeps rows 16-byte aligned) */
/* floats per score row. The matrix units store and load the score block with a stride of
   cols + pad, which Vulkan asks to be a multiple of 16 bytes (VUID-RuntimeSpirv-
   OpCooperativeMatrixLoadKHR-08986: Dawn's subgroupMatrixStore is OpCooperativeMatrixStoreKHR
   there), so each pad is a multiple of 4 floats */
#define SCORE_PAD 4
#define QUAD_SCORE_PAD 8 /* ... with quads: rows 8 (mod 32) banks apart */

/* the generator's derived constants */
typedef struct gen {
    wgml_sbuf *b;
    const wgml_attn_sgmat *c;
    int SM, SN, SK, SGS, NSG, NT, R, C, DP, SD, SC, PC;
    int lpr, rpl, cpr, rstep; /* lanes per row, rows per lane, columns per lane, a lane's row step */
    int FD, KD, FC, KC;       /* fragments along D, K steps along D, fragments along cols, K steps along cols */
    const char *xb;           /* WGSL before the walk's offsets into xs: "xb + " (the step's buffer) with stage2 */
    int ko, vo;               /* halves of xs where the walk's K and V tiles go (the forward, dQ) */
    int KP, SW;               /* parts the kept rows are staged in (kept_halves: 2), and their staged rows' stride */
    const char *pa;           /* the array P (dS) goes to: ps, or xs with p_in_xs (at po, in pb) */
    int po;
} gen;

static gen gen_of(wgml_sbuf *b, const wgml_attn_sgmat *c)
{
    gen g = {.b = b, .c = c, .SM = c->sm_m, .SN = c->sm_n, .SK = c->sm_k, .SGS = c->subgroup_size, .NSG = c->subgroups};
    g.NT = g.NSG * g.SGS;
    g.R = g.NSG * g.SM;
    g.C = c->cols;
    g.DP = wgml_attn_sgmat_dp(c);
    g.SD = g.DP + STAGE_PAD;
    g.PC = g.C + STAGE_PAD;
    g.lpr = c->quads ? 4 : g.SGS >= g.SM ? g.SGS / g.SM : 1;
    g.rpl = g.SM * g.lpr / g.SGS;
    g.cpr = g.C / g.lpr;
    g.SC = g.C + (c->quads ? QUAD_SCORE_PAD : SCORE_PAD);
    g.rstep = g.SGS / g.lpr;
    g.FD = g.DP / g.SN, g.KD = g.DP / g.SK, g.FC = g.C / g.SN, g.KC = g.C / g.SK;
    g.xb = c->stage2 ? "xb + " : "";
    /* with p_in_xs P goes over K in the forward (staged after V), over V in dQ (K is dS K's) */
    bool fwd = c->kind == WGML_ATTN_FORWARD;
    g.ko = c->p_in_xs && fwd ? g.C * g.SD : 0;
    g.vo = c->p_in_xs && fwd ? 0 : g.C * g.SD;
    g.pa = c->p_in_xs ? "xs" : "ps";
    g.po = c->p_in_xs ? g.C * g.SD : 0;
    g.KP = c->kept_halves && c->kind != WGML_ATTN_DKV && g.DP / 2 % g.SK == 0 ? 2 : 1;
    g.SW = g.DP / g.KP + STAGE_PAD;
    return g;
}

/* lanes taking pairs of adjacent columns (quads in the gradients, pairs in the forward) */
static bool column_pairs(const wgml_attn_sgmat *c) { return c->quads || c->pairs; }

/* the column of a lane's entry j of each of its rows (WGSL): lc + j lpr, or with column pairs
   the pair 2 lc + 2 lpr (j / 2) (+1 for odd j) */
static const char *lane_col(const gen *g, int j, char *buf, size_t n)
{
    if (column_pairs(g->c)) snprintf(buf, n, "lc2 + %du", (j & 1) + 2 * g->lpr * (j >> 1));
    else snprintf(buf, n, "lc + %du", j * g->lpr);
    return buf;
}

/* the forward in one walk over the keys, O rescaled lazily */
static bool one_pass(const wgml_attn_sgmat *c) { return c->one_pass && c->kind == WGML_ATTN_FORWARD; }

/* rows of the results are whole fragments and 16-byte aligned (and f32, the fragments' type):
   whole tiles go straight from the matrix units to memory */
static bool direct_out(const wgml_attn_sgmat *c) { return c->direct && c->d % 16 == 0 && !one_pass(c) && !c->out16; }

/* xs's halves: the rows the workgroup keeps (staged once, a part of their columns at a time),
   the walk's tiles (2 x cols rows: K and V, or Q and dO; twice with stage2), and with p_in_xs
   P's blocks from po */
static int xs_halves(const gen *g)
{
    int kept = g->R * g->SW, walk = 2 * g->C * (g->c->stage2 ? 2 : 1) * g->SD, p = g->c->p_in_xs ? g->po + g->NSG * g->SM * g->PC : 0;
    int n = kept > walk ? kept : walk;
    return p > n ? p : n;
}

/* the walk's step `it` (WGSL): its staging buffer with stage2, and no barrier at its top (the
   other buffer's last reads, two steps back, are behind the last step's barriers; ss, ps, pp
   and sl are written after this step's first barrier and last read before the last step's
   final one). Without stage2 the barrier. */
static void put_step_top(const gen *g, const char *it, const char *what)
{
    if (g->c->stage2) wgml_sbuf_put(g->b, "        let xb = (%s & 1u) * %du; // this step's staging buffer\n", it, 2 * g->C * g->SD);
    else wgml_sbuf_put(g->b, "        workgroupBarrier(); // the last step's reads of %s are done\n", what);
}

/* before a walk with stage2: the reads of xs before it (the rows kept) are done */
static void put_walk_start(const gen *g)
{
    if (g->c->stage2) wgml_sbuf_put(g->b, "    workgroupBarrier(); // the kept rows' reads of xs are done\n");
}

static bool pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && !(v & (v - 1)); }

const char *wgml_attn_sgmat_problem(const wgml_attn_sgmat *c)
{
    if (c->kind != WGML_ATTN_FORWARD && c->kind != WGML_ATTN_DKV && c->kind != WGML_ATTN_DQ) return "kernel kind";
    if (c->d < 1 || c->d > 128) return "head dim (1..128)";
    if ((c->sm_m != 8 && c->sm_m != 16) || (c->sm_n != 8 && c->sm_n != 16) || (c->sm_k != 8 && c->sm_k != 16))
        return "matrix shape (each side 8 or 16)";
    if (!pow2_in(c->subgroup_size, 4, 128)) return "subgroup size (a power of two, 4..128)";
    if (c->subgroups < 1 || c->subgroups > 16 || c->subgroups * c->subgroup_size > 1024) return "subgroups per workgroup";
    if (!pow2_in(c->cols, 16, 128)) return "cols (16, 32, 64 or 128)";
    if (c->out16 && c->kind == WGML_ATTN_FORWARD) return "results as halves (the gradients only)";
    if (c->p_in_xs && (c->kind == WGML_ATTN_DKV || c->stage2)) return "P in xs (the forward and dQ, one staging buffer)";
    if (c->tile_major && c->kind == WGML_ATTN_DKV) return "tile-major order (the forward and dQ)";
    if (c->kept_halves && c->kind == WGML_ATTN_DKV) return "kept rows by halves (the forward and dQ)";
    if (c->quads && (c->kind == WGML_ATTN_FORWARD || c->subgroup_size < 4 || (c->sm_m * 4) % c->subgroup_size || c->cols % 8))
        return "quads (dK/dV and dQ, rows a whole number of 4-lane groups of the subgroup)";
    if (c->pairs && (c->kind != WGML_ATTN_FORWARD || c->quads || c->subgroup_size != 2 * c->sm_m))
        return "pairs (the forward with two lanes a row)";
    if (c->p_early && !one_pass(c)) return "P before the vote (the one-walk forward)";
    if (c->front_loads && (!one_pass(c) || !c->prefetch)) return "loads up front (the one-walk forward with prefetch)";
    if (c->cols % gen_of(NULL, c).lpr) return "cols not a multiple of the lanes per row"; /* (the fields it reads are checked) */
    return NULL;
}

uint32_t wgml_attn_sgmat_shared_bytes(const wgml_attn_sgmat *c)
{
    gen g = gen_of(NULL, c);
    uint32_t bytes = (uint32_t)(xs_halves(&g) * 2 + g.NSG * g.SM * g.SC * 4 + (c->p_in_xs ? 0 : g.NSG * g.SM * g.PC * 2));
    if (c->kind == WGML_ATTN_FORWARD && g.lpr > 1) bytes += (uint32_t)(g.NSG * g.SM * g.lpr * (one_pass(c) ? 1 : 2) * 4); /* sx */
    if (one_pass(c)) bytes += (uint32_t)(g.R * 4 + 4 * (c->emulate ? 1 : g.NSG));                                                      /* rl, resc */
    if (c->kind == WGML_ATTN_DKV) bytes += (uint32_t)(g.NSG * g.SM * g.PC * 2 + 2 * g.C * 4);              /* pp, sl */
    return bytes;
}

/* ---------------------------------------------------------------- matrix calls */

static void ld_left(gen *g, const char *var, const char *arr, const char *off, bool col_major, int stride)
{
    if (g->c->emulate)
        wgml_sbuf_put(g->b, "        let %s = emu_L_%s(%s, %s, %du);\n", var, arr, off, col_major ? "true" : "false", stride);
    else
        wgml_sbuf_put(g->b, "        let %s = subgroupMatrixLoad<L>(&%s, %s, %s, %du);\n", var, arr, off, col_major ? "true" : "false",
                      stride);
}

/* acc = acc + left * (right loaded from xs at off) */
static void mma_xs(gen *g, const char *acc, const char *left, const char *off, bool col_major, int stride)
{
    const char *cm = col_major ? "true" : "false";
    if (g->c->emulate)
        wgml_sbuf_put(g->b, "        %s = emu_mma(%s, emu_R_xs(%s, %s, %du), %s);\n", acc, left, off, cm, stride, acc);
    else
        wgml_sbuf_put(g->b, "        %s = subgroupMatrixMultiplyAccumulate(%s, subgroupMatrixLoad<R>(&xs, %s, %s, %du), %s);\n", acc,
                      left, off, cm, stride, acc);
}

/* acc into the f32 block ss at off */
static void store_ss(gen *g, const char *acc, const char *off)
{
    if (g->c->emulate) wgml_sbuf_put(g->b, "        emu_st_ss(%s, %s, %du);\n", off, acc, g->SC);
    else wgml_sbuf_put(g->b, "        subgroupMatrixStore(&ss, %s, %s, false, %du);\n", off, acc, g->SC);
}


/* the matrix types, or their stand-ins: whole matrices in every invocation */
static void put_types(gen *g)
{
    wgml_sbuf *b = g->b;
    int SM = g->SM, SN = g->SN, SK = g->SK;
    if (!g->c->emulate) {
        wgml_sbuf_put(b, "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n"
                         "alias L = subgroup_matrix_left<f16, %d, %d>;\n"
                         "alias R = subgroup_matrix_right<f16, %d, %d>;\n"
                         "alias Acc = subgroup_matrix_result<f32, %d, %d>;\n",
                      SK, SM, SN, SK, SN, SM);
        return;
    }
    /* the loops' trip counts are not constants, so that llvmpipe's compiler leaves them rolled
       (unrolled at every call site, the kernels took it minutes and gigabytes) */
    wgml_sbuf_put(b, "enable f16;\n// emulated subgroup matrices: every invocation holds its subgroup's whole matrices\n"
                     "struct L { v: array<f32, %d> }\nstruct R { v: array<f32, %d> }\nstruct Acc { v: array<f32, %d> }\n"
                     "fn emu_n(n: u32) -> u32 { return select(n, 0u, P.tiles == 0xffffffffu); }\n"
                     "fn emu_mma(a: L, r: R, acc: Acc) -> Acc {\n    var o = acc;\n"
                     "    for (var i = 0u; i < emu_n(%du); i++) { for (var j = 0u; j < emu_n(%du); j++) { for (var k = 0u; k < emu_n(%du); k++) {\n"
                     "        o.v[i * %du + j] += a.v[i * %du + k] * r.v[k * %du + j]; } } }\n    return o;\n}\n"
                     "fn emu_st_ss(off: u32, x: Acc, stride: u32) {\n"
                     "    for (var i = 0u; i < emu_n(%du); i++) { for (var j = 0u; j < emu_n(%du); j++) { ss[off + i * stride + j] = x.v[i * %du + j]; } }\n}\n",
                  SM * SK, SK * SN, SM * SN, SM, SN, SK, SN, SK, SN, SM, SN, SN);
    if (direct_out(g->c))
        wgml_sbuf_put(b, "fn emu_st_%s(off: u32, x: Acc, stride: u32) {\n"
                         "    for (var i = 0u; i < emu_n(%du); i++) { for (var j = 0u; j < emu_n(%du); j++) { %s[off + i * stride + j] = x.v[i * %du + j]; } }\n}\n",
                      g->c->kind == WGML_ATTN_FORWARD ? "O" : "OUT", SM, SN, g->c->kind == WGML_ATTN_FORWARD ? "O" : "OUT", SN);
    if (one_pass(g->c))
        wgml_sbuf_put(b, "fn emu_A_ss(off: u32, stride: u32) -> Acc {\n    var x: Acc;\n"
                         "    for (var i = 0u; i < emu_n(%du); i++) { for (var j = 0u; j < emu_n(%du); j++) { x.v[i * %du + j] = ss[off + i * stride + j]; } }\n"
                         "    return x;\n}\n",
                      SM, SN, SN);
    static const char *const lefts[] = {"xs", "ps", "pp"};
    int nl = g->c->kind == WGML_ATTN_DKV ? 3 : 2;
    for (int i = 0; i < nl + 1; i++) {
        bool right = i == nl;
        if (i == 1 && g->c->p_in_xs) continue; /* (no ps) */
        const char *arr = right ? "xs" : lefts[i];
        int rows = right ? SK : SM, cols = right ? SN : SK;
        wgml_sbuf_put(b, "fn emu_%c_%s(off: u32, cm: bool, stride: u32) -> %c {\n    var x: %c;\n"
                         "    for (var r = 0u; r < emu_n(%du); r++) { for (var c = 0u; c < emu_n(%du); c++) {\n"
                         "        x.v[r * %du + c] = f32(%s[select(off + r * stride + c, off + c * stride + r, cm)]); } }\n"
                         "    return x;\n}\n",
                      right ? 'R' : 'L', arr, right ? 'R' : 'L', right ? 'R' : 'L', rows, cols, cols, arr);
    }
}

/* ---------------------------------------------------------------- shared pieces */

static void put_params(gen *g) { wgml_attn_put_params(g->b, g->c->d, g->DP / 4); }

/* The items (vec4 of a row) each thread moves for a tile of `rows` rows */
static int stage_items(const gen *g, int rows) { return (rows * g->DP / 4 + g->NT - 1) / g->NT; }

/* registers <reg>0.. for a tile of `rows` rows, as f16 */
static void put_stage_regs(gen *g, const char *reg, int rows)
{
    for (int n = 0; n < stage_items(g, rows); n++) wgml_sbuf_put(g->b, "    var %s%d = vec4<f16>();\n", reg, n);
}

/* This thread's items of `rows` rows of a tensor into registers <reg>0.. as f16 after
   multiplying by scale (NULL: 1): row r is the tensor's row row0 + r (zeros at or past lim),
   starting at element base + (row0 + r) * stride */
static void put_fetch(gen *g, const char *reg, const char *x, int rows, const char *row0, const char *lim, const char *base,
                      const char *stride, const char *scale)
{
    wgml_sbuf *b = g->b;
    int items = rows * g->DP / 4;
    for (int n = 0; n * g->NT < items; n++) {
        bool tail = (n + 1) * g->NT > items;
        wgml_sbuf_put(b, "    {\n        let e = li + %du;\n        %s%d = vec4<f16>();\n", n * g->NT, reg, n);
        if (tail) wgml_sbuf_put(b, "        if (e < %du) {\n", items);
        wgml_sbuf_put(b, "        let r = e / DP4;\n"
                         "        if (%s + r < %s) { %s%d = vec4<f16>(ld_%s(%s + (%s + r) * %s, e %% DP4)%s%s); }\n",
                      row0, lim, reg, n, x, base, row0, stride, scale ? " * " : "", scale ? scale : "");
        if (tail) wgml_sbuf_put(b, "        }\n");
        wgml_sbuf_put(b, "    }\n");
    }
}

/* Stores registers <reg>n (vec4<f16>, `items` of them over the workgroup's threads: thread li
   has item li + n NT) into xs at o, a WGSL expression of the item e */
static void put_xs_store(gen *g, const char *reg, int items, const char *o)
{
    wgml_sbuf *b = g->b;
    for (int n = 0; n * g->NT < items; n++) {
        bool tail = (n + 1) * g->NT > items;
        wgml_sbuf_put(b, "    {\n        let e = li + %du;\n", n * g->NT);
        if (tail) wgml_sbuf_put(b, "        if (e < %du) {\n", items);
        wgml_sbuf_put(b, "        let o = %s;\n"
                         "        xs[o] = %s%d.x;\n        xs[o + 1u] = %s%d.y;\n        xs[o + 2u] = %s%d.z;\n        xs[o + 3u] = %s%d.w;\n",
                      o, reg, n, reg, n, reg, n, reg, n);
        if (tail) wgml_sbuf_put(b, "        }\n");
        wgml_sbuf_put(b, "    }\n");
    }
}

/* ... and stores them into xs from half `dst` (row r at dst + r * SD) */
static void put_store_regs(gen *g, const char *reg, int rows, int dst)
{
    char o[80];
    snprintf(o, sizeof o, "%s%du + (e / DP4) * %du + (e %% DP4) * 4u", g->xb, dst, g->SD);
    put_xs_store(g, reg, rows * g->DP / 4, o);
}

/* The reads of part p of the kept rows (put_kept) into registers <reg>0.. (declared here) */
static void put_kept_loads(gen *g, int p, const char *reg, const char *x, const char *row0, const char *lim, const char *base,
                           const char *stride, const char *scale)
{
    wgml_sbuf *b = g->b;
    int W4 = g->DP / 4 / g->KP, items = g->R * W4;
    for (int n = 0; n * g->NT < items; n++) {
        bool tail = (n + 1) * g->NT > items;
        wgml_sbuf_put(b, "    var %s%d = vec4<f16>();\n    {\n        let e = li + %du;\n", reg, n, n * g->NT);
        if (tail) wgml_sbuf_put(b, "        if (e < %du) {\n", items);
        wgml_sbuf_put(b, "        let r = e / %du;\n"
                         "        if (%s + r < %s) { %s%d = vec4<f16>(ld_%s(%s + (%s + r) * %s, %du + e %% %du)%s%s); }\n",
                      W4, row0, lim, reg, n, x, base, row0, stride, p * W4, W4, scale ? " * " : "", scale ? scale : "");
        if (tail) wgml_sbuf_put(b, "        }\n");
        wgml_sbuf_put(b, "    }\n");
    }
}

/* The rows the workgroup keeps: its R rows of a tensor (row r is the tensor's row row0 + r,
   zeros at or past lim, from element base + (row0 + r) * stride, times scale unless NULL),
   staged into xs KP parts of their columns at a time (rows SW apart), each part's K steps
   loaded into left fragments <var>0.. of the subgroup's rows (K step k in <var>k). A barrier
   first where `barrier` (xs's last reads are before it) and between parts; the last part's
   loads are left to the next barrier. With `front` every part is read from memory first (into
   st<part>_<n>), else each part just before it is staged. */
static void put_kept(gen *g, const char *x, const char *row0, const char *lim, const char *base, const char *stride,
                     const char *scale, const char *var, bool barrier, bool front)
{
    wgml_sbuf *b = g->b;
    int W4 = g->DP / 4 / g->KP, KDP = g->KD / g->KP, items = g->R * W4;
    char reg[16];
    for (int p = 0; p < g->KP && front; p++) {
        snprintf(reg, sizeof reg, "st%d_", p);
        put_kept_loads(g, p, reg, x, row0, lim, base, stride, scale);
    }
    for (int p = 0; p < g->KP; p++) {
        if (barrier || p) wgml_sbuf_put(b, "    workgroupBarrier();%s\n", p ? " // the last part's loads are done" : "");
        wgml_sbuf_put(b, "    {\n");
        if (front) snprintf(reg, sizeof reg, "st%d_", p);
        else {
            snprintf(reg, sizeof reg, "st");
            put_kept_loads(g, p, reg, x, row0, lim, base, stride, scale);
        }
        char o[64];
        snprintf(o, sizeof o, "(e / %du) * %du + (e %% %du) * 4u", W4, g->SW, W4);
        put_xs_store(g, reg, items, o);
        wgml_sbuf_put(b, "    }\n    workgroupBarrier();\n");
        for (int k = p * KDP; k < (p + 1) * KDP; k++) {
            char v[16], off[64];
            snprintf(v, sizeof v, "%s%d", var, k);
            snprintf(off, sizeof off, "sr * %du + %du", g->SW, (k - p * KDP) * g->SK);
            ld_left(g, v, "xs", off, false, g->SW);
        }
    }
}

/* Scores into the subgroup's f32 block of ss: for each fragment f of `cols` columns, the sum over D of
   left fragments <left>k times the rows of xs from half `at` (a tile staged row-major [col][d],
   read column-major as the right operand) */
static void put_scores(gen *g, const char *left, int at)
{
    for (int f = 0; f < g->FC; f++) {
        /* (zeroed by a constructor: a bare `var s: Acc;` here was zeroed once, not at every
           step, on Dawn over llvmpipe) */
        wgml_sbuf_put(g->b, "    {\n");
        wgml_sbuf_put(g->b, "        var s0 = Acc();\n");
        for (int k = 0; k < g->KD; k++) {
            char off[64], l0[16];
            snprintf(off, sizeof off, "%s%du", g->xb, at + f * g->SN * g->SD + k * g->SK);
            snprintf(l0, sizeof l0, "%s%d", left, k);
            mma_xs(g, "s0", l0, off, true, g->SD);
        }
        char off[48];
        snprintf(off, sizeof off, "sb + %du", f * g->SN);
        store_ss(g, "s0", off);
        wgml_sbuf_put(g->b, "    }\n");
    }
}

/* acc<f> += (left from array `arr` at the subgroup's block, cols wide) x (xs rows from half `at`,
   a [col][d] tile read row-major) for every fragment f along D */
static void put_accumulate(gen *g, const char *acc, const char *arr, int at)
{
    wgml_sbuf_put(g->b, "    {\n");
    for (int k = 0; k < g->KC; k++) {
        char v[16], off[48];
        snprintf(v, sizeof v, "a%d", k);
        snprintf(off, sizeof off, "pb + %du", k * g->SK);
        ld_left(g, v, arr, off, false, g->PC);
    }
    for (int f = 0; f < g->FD; f++)
        for (int k = 0; k < g->KC; k++) {
            char off[48], a[16], l[16];
            snprintf(off, sizeof off, "%s%du", g->xb, at + k * g->SK * g->SD + f * g->SN);
            snprintf(a, sizeof a, "%s%d", acc, f);
            snprintf(l, sizeof l, "a%d", k);
            mma_xs(g, a, l, off, false, g->SD);
        }
    wgml_sbuf_put(g->b, "    }\n");
}

/* Where `full` (workgroup-uniform WGSL: every row of the workgroup's tile is inside), each
   accumulator <acc>f goes straight to out[<base0> + f * SN ...] (rows `stride` apart, WGSL;
   base0: the subgroup's row 0), and the rest of the kernel's results code (put_results) runs
   in the else branch that this leaves open; see put_results_end. */
static void put_results_begin(gen *g, int n, const char *const *acc, const char *out, const char *const *base0, const char *stride,
                              const char *full)
{
    if (!direct_out(g->c)) return;
    wgml_sbuf_put(g->b, "    if (%s) {\n", full);
    for (int a = 0; a < n; a++)
        for (int f = 0; f < g->FD; f++) {
            if (g->c->emulate)
                wgml_sbuf_put(g->b, "        emu_st_%s(%s + %du, %s%d, %s);\n", out, base0[a], f * g->SN, acc[a], f, stride);
            else
                wgml_sbuf_put(g->b, "        subgroupMatrixStore(&%s, %s + %du, %s%d, false, %s);\n", out, base0[a], f * g->SN, acc[a], f,
                              stride);
        }
    wgml_sbuf_put(g->b, "    } else {\n");
}

static void put_results_end(gen *g)
{
    if (direct_out(g->c)) wgml_sbuf_put(g->b, "    }\n");
}

/* Writes accumulators <acc>f through the subgroup's f32 block: element (row, c)
   of fragment f goes to out[<base of row> + f * SN + c] when the row's `ok` and the dim < D.
   row_base and ok are WGSL with the row index `row` in scope. */
static void put_results(gen *g, const char *acc, const char *out, const char *row_base, const char *ok)
{
    wgml_sbuf *b = g->b;
    int per = g->SM * g->SN;
    for (int f = 0; f < g->FD; f++) {
        char a[16];
        snprintf(a, sizeof a, "%s%d", acc, f);
        wgml_sbuf_put(b, "    workgroupBarrier();\n    {\n");
        store_ss(g, a, "sb");
        wgml_sbuf_put(b, "    }\n    workgroupBarrier();\n");
        for (int n = 0; n * g->SGS < per; n++) {
            wgml_sbuf_put(b, "    {\n        let e = lane + %du;\n        let row = e / %du;\n        let d = %du + e %% %du;\n",
                          n * g->SGS, g->SN, f * g->SN, g->SN);
            wgml_sbuf_put(b, "        if (e < %du && d < D && %s) { %s[%s + d] = %s(ss[sb + e / %du * %du + e %% %du]); }\n    }\n", per,
                          ok, out, row_base, g->c->out16 ? "f16" : "", g->SN, g->SC, g->SN);
        }
    }
}

/* One result per row of the workgroup's query tile (the forward's O, dQ): the subgroup's row 0
   at element `base` of out, rows `stride` apart (WGSL); whole tiles straight from the matrix
   units where they may */
static void put_row_results(gen *g, const char *acc, const char *out, const char *base, const char *stride)
{
    char full[64], at[160];
    snprintf(full, sizeof full, "i0 + %du <= P.T", g->R);
    snprintf(at, sizeof at, "%s + row * %s", base, stride);
    const char *accs[] = {acc}, *bases[] = {base};
    put_results_begin(g, 1, accs, out, bases, stride, full);
    put_results(g, acc, out, at, "r0 + row < P.T");
    put_results_end(g);
}

/* the lane's rows and columns of its subgroup's block */
static void put_lane_ids(gen *g)
{
    wgml_sbuf_put(g->b, "    let lr = lane / %du;\n    let lc = lane %% %du;\n    let sr = sg * %du;\n"
                        "    let sb = sg * %du; // the subgroup's f32 block\n    let pb = %du + sg * %du; // its f16 block (in %s)\n",
                  g->lpr, g->lpr, g->SM, g->SM * g->SC, g->po, g->SM * g->PC, g->pa);
    if (column_pairs(g->c)) wgml_sbuf_put(g->b, "    let lc2 = lc * 2u;\n");
    for (int k = 0; k < g->rpl; k++) wgml_sbuf_put(g->b, "    let row%d = lr + %du;\n", k, k * g->rstep);
}

static void put_main(gen *g, const char *count)
{
    if (g->c->emulate)
        wgml_sbuf_put(g->b, "@compute @workgroup_size(%d)\n"
                            "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {\n"
                            "    let sg = li / %du;\n    let lane = li %% %du;\n",
                      g->NT, g->SGS, g->SGS);
    else
        wgml_sbuf_put(g->b, "@compute @workgroup_size(%d)\n"
                            "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,\n"
                            "        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n",
                      g->NT);
    wgml_sbuf_put(g->b, "    let wid = wg.x + wg.y * P.gx;\n    if (wid >= %s) { return; }\n    let ninf = P.neg_inf;\n", count);
}

/* `ok` for score (query i, key j) */
#define SEES "(%s < P.T && %s < P.S && (P.causal == 0u || %s + P.T <= %s + P.S))"

/* Reads the lane's scores of its block into x<k>_<j>, masked to `masked` on tiles that cross
   an end or the diagonal (`edge`); qi, kj: WGSL of the query and key of element (row<k>,
   col<j>) with %d for k then j */
static void put_read_scores(gen *g, const char *masked, bool rows_are_queries)
{
    wgml_sbuf *b = g->b;
    char lcol[32];
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(b, "        var x%d_%d = ss[sb + row%d * %du + %s];\n", k, j, k, g->SC, lane_col(g, j, lcol, sizeof lcol));
    wgml_sbuf_put(b, "        if (edge) {\n");
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++) {
            char row[48], col[48];
            snprintf(row, sizeof row, "(r0 + row%d)", k);
            snprintf(col, sizeof col, "(c0 + %s)", lane_col(g, j, lcol, sizeof lcol));
            const char *i = rows_are_queries ? row : col, *jj = rows_are_queries ? col : row;
            wgml_sbuf_put(b, "            x%d_%d = select(%s, x%d_%d, " SEES ");\n", k, j, masked, k, j, i, jj, jj, i);
        }
    wgml_sbuf_put(b, "        }\n");
}

/* the key range of the query tile i0.. as the SIMT forward's */
static void put_key_range(gen *g) { wgml_attn_put_key_range(g->b, g->R, g->C); }

/* K's tile of the keys from `j` (WGSL), and V's, into registers ka<n> and va<n>: rows at or
   past the query tile's last key (kend) read as zeros (they lie in tiles that are masked) */
static void put_key_fetch(gen *g, bool with_v, const char *j)
{
    put_fetch(g, "ka", "k", g->C, j, "kend", "kb", "P.k_st", NULL);
    if (with_v) put_fetch(g, "va", "v", g->C, j, "kend", "vb", "P.v_st", NULL);
}

/* before a walk over the keys: with prefetch, the first tile into the registers */
static void put_key_prologue(gen *g, bool with_v)
{
    if (!g->c->prefetch) return;
    wgml_sbuf_put(g->b, "    {\n        let jn = 0u;\n");
    put_key_fetch(g, with_v, "jn");
    wgml_sbuf_put(g->b, "    }\n");
}

/* the opening of a step over the tile of keys j0.. of a query tile: stage K (and V, after K's
   C x SD) from the registers (read now, or during the last step with prefetch, which then
   reads the next tile's), the scores S = Q K^T and each
   lane's entries of S, masked (x<k>_<j>); the step's loop stays open */
static void put_key_step(gen *g, bool with_v)
{
    wgml_sbuf *b = g->b;
    const int C = g->C;
    put_walk_start(g);
    wgml_sbuf_put(b, "    for (var t = 0u; t < ntiles; t++) {\n        let j0 = t * %du;\n        let c0 = j0;\n"
                     "        let edge = i0 + %du > P.T || j0 + %du > P.S || (P.causal != 0u && j0 + %du + P.T > i0 + P.S);\n",
                  C, g->R, C, C - 1);
    put_step_top(g, "t", with_v ? "xs, ss and ps" : "xs and ss");
    if (one_pass(g->c) && g->c->emulate) wgml_sbuf_put(b, "        if (li == 0u) { resc[0] = 0u; } // (its last reads were before that barrier)\n");
    if (!g->c->prefetch) put_key_fetch(g, with_v, "j0");
    put_store_regs(g, "ka", C, g->ko);
    if (with_v) put_store_regs(g, "va", C, g->vo);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    if (g->c->prefetch) {
        wgml_sbuf_put(b, "    {\n        let jn = j0 + %du; // the next tile's reads, in flight during this one's products\n", C);
        put_key_fetch(g, with_v, "jn");
        wgml_sbuf_put(b, "    }\n");
    }
    put_scores(g, "q", g->ko);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_read_scores(g, "ninf", true);
}

/* The start of a kernel over a tile of queries (the forward, dQ): the entry point, the lane
   ids, the tile, and its scaled queries staged and kept in the subgroups' rows. */
static void put_query_tile_start(gen *g, bool grad, bool kept)
{
    put_main(g, "P.tiles * P.B * P.H");
    put_lane_ids(g);
    wgml_attn_put_query_tile(g->b, g->R, grad, g->c->tile_major);
    wgml_sbuf_put(g->b, "    let r0 = i0 + sr; // the query of the subgroup's row 0\n");
    if (kept) put_kept(g, "q", "i0", "P.T", "qb", "P.q_st", "P.scale2", "q", false, false);
}

/* ---------------------------------------------------------------- forward */

/* Both forwards' opening: the bindings, the query tile, its key range, K's and V's registers */
static void put_forward_start(gen *g)
{
    wgml_attn_put_forward_bindings(g->b, g->c->vec, true);
    bool front = g->c->front_loads;
    put_query_tile_start(g, false, !front);
    put_key_range(g);
    put_stage_regs(g, "ka", g->C);
    put_stage_regs(g, "va", g->C);
    if (!front) return;
    /* the first tile's reads and Q's, all in flight together (the walk's prologue is here) */
    put_key_prologue(g, true);
    put_kept(g, "q", "i0", "P.T", "qb", "P.q_st", "P.scale2", "q", false, true);
}

static void put_forward(gen *g)
{
    wgml_sbuf *b = g->b;
    put_forward_start(g);
    for (int k = 0; k < g->rpl; k++) wgml_sbuf_put(b, "    var m%d = ninf;\n    var l%d = 0.0;\n", k, k);
    /* pass 1: each lane's running max and sum of its columns of each of its rows */
    put_key_prologue(g, false);
    put_key_step(g, false);
    for (int k = 0; k < g->rpl; k++) {
        wgml_sbuf_put(b, "        {\n            let mn = max(m%d, ", k);
        for (int j = 1; j < g->cpr; j++) wgml_sbuf_put(b, "max(");
        wgml_sbuf_put(b, "x%d_0", k);
        for (int j = 1; j < g->cpr; j++) wgml_sbuf_put(b, ", x%d_%d)", k, j);
        wgml_sbuf_put(b, ");\n            // a row with no key yet keeps -inf: exponents against 0 give 0, not NaN\n"
                         "            let mu = select(mn, 0.0, mn == ninf);\n            l%d = l%d * exp2(m%d - mu)", k, k, k);
        for (int j = 0; j < g->cpr; j++) wgml_sbuf_put(b, " + exp2(x%d_%d - mu)", k, j);
        wgml_sbuf_put(b, ";\n            m%d = mn;\n        }\n", k);
    }
    wgml_sbuf_put(b, "    }\n");
    /* the lanes of a row merge their maxima and sums: L = m + log2(l) (-inf for a row with no key) */
    if (g->lpr > 1) {
        int w = g->lpr * 2;
        wgml_sbuf_put(b, "    sx[(sr + row0) * %du + lc * 2u] = m0;\n    sx[(sr + row0) * %du + lc * 2u + 1u] = l0;\n"
                         "    workgroupBarrier();\n    var mm = ninf;\n",
                      w, w);
        for (int p = 0; p < g->lpr; p++) wgml_sbuf_put(b, "    mm = max(mm, sx[(sr + row0) * %du + %du]);\n", w, 2 * p);
        wgml_sbuf_put(b, "    let mmu = select(mm, 0.0, mm == ninf);\n    var ll = 0.0;\n");
        for (int p = 0; p < g->lpr; p++)
            wgml_sbuf_put(b, "    ll = ll + sx[(sr + row0) * %du + %du] * exp2(sx[(sr + row0) * %du + %du] - mmu);\n", w, 2 * p + 1, w,
                          2 * p);
        wgml_sbuf_put(b, "    let lse0 = select(mm + log2(ll), ninf, ll == 0.0);\n");
    } else {
        for (int k = 0; k < g->rpl; k++) wgml_sbuf_put(b, "    let lse%d = select(m%d + log2(l%d), ninf, l%d == 0.0);\n", k, k, k, k);
    }
    for (int k = 0; k < g->rpl; k++)
        wgml_sbuf_put(b, "    if (lc == 0u && r0 + row%d < P.T) { O[P.lse_off + bh * P.T + r0 + row%d] = lse%d; }\n", k, k, k);
    /* pass 2: P = exp2(S - L), O += P V */
    char lcol[32];
    for (int f = 0; f < g->FD; f++) wgml_sbuf_put(b, "    var o%d = Acc();\n", f);
    put_key_prologue(g, true);
    put_key_step(g, true);
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(b, "        %s[pb + row%d * %du + %s] = f16(select(0.0, exp2(x%d_%d - lse%d), x%d_%d != ninf));\n", g->pa,
                          k, g->PC, lane_col(g, j, lcol, sizeof lcol), k, j, k, k, j);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_accumulate(g, "o", g->pa, g->vo);
    wgml_sbuf_put(b, "    }\n");
    put_row_results(g, "o", "O", "b * P.o_sb + h * P.o_sh + r0 * P.o_st", "P.o_st");
    wgml_sbuf_put(b, "}\n");
}

/* The lanes' P = exp2(x - m) of their entries of each row into ps (f16), and their sums in f32
   into ls<k>; m is the row's reference mr<k> (0 while that is -inf: the row's entries are then
   all -inf, or the step rescales and writes P again). Masked entries and references are tested
   against -inf rather than computed with, as the two-walk kernels' P is (Vulkan keeps IEEE
   infinities only where a shader asks for them) */
static void put_lazy_p(gen *g)
{
    char lcol[32];
    for (int k = 0; k < g->rpl; k++) {
        wgml_sbuf_put(g->b, "        {\n            let mu = select(mr%d, 0.0, mr%d == ninf);\n            ls%d = 0.0;\n", k, k, k);
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(g->b, "            { let p = select(0.0, exp2(x%d_%d - mu), x%d_%d != ninf); ls%d += p; %s[pb + row%d * %du + %s] = f16(p); }\n",
                          k, j, k, j, k, g->pa, k, g->PC, lane_col(g, j, lcol, sizeof lcol));
        wgml_sbuf_put(g->b, "        }\n");
    }
}

/* The subgroup's accumulators <acc>0.. through its f32 block of ss, FC fragments along D at a
   time: each pass stores them (row fragment r at rows r SM), waits, runs `lane` (WGSL run by
   every lane, with the pass's first dim f0 and width w in scope), waits, and when `reload`
   loads them back */
static void put_acc_passes(gen *g, const char *acc, const char *lane, bool reload)
{
    wgml_sbuf *b = g->b;
    for (int f0 = 0; f0 < g->FD; f0 += g->FC) {
        int nf = g->FD - f0 < g->FC ? g->FD - f0 : g->FC;
        wgml_sbuf_put(b, "        {\n        let f0 = %du;\n        let w = %du;\n", f0 * g->SN, nf * g->SN);
        for (int f = 0; f < nf; f++) {
            char a[16], off[48];
            snprintf(a, sizeof a, "%s%d", acc, f0 + f);
            snprintf(off, sizeof off, "sb + %du", f * g->SN);
            store_ss(g, a, off);
        }
        wgml_sbuf_put(b, "        workgroupBarrier();\n%s        workgroupBarrier();\n", lane);
        if (reload)
            for (int f = 0; f < nf; f++) {
                int off = f * g->SN;
                if (g->c->emulate)
                    wgml_sbuf_put(b, "        %s%d = emu_A_ss(sb + %du, %du);\n", acc, f0 + f, off, g->SC);
                else
                    wgml_sbuf_put(b, "        %s%d = subgroupMatrixLoad<Acc>(&ss, sb + %du, false, %du);\n", acc, f0 + f, off, g->SC);
            }
        /* (the next pass stores over what these loads read) */
        if (reload && f0 + g->FC < g->FD) wgml_sbuf_put(b, "        workgroupBarrier();\n");
        wgml_sbuf_put(b, "        }\n");
    }
}

/* The forward in one walk over the keys (one_pass): O accumulates P V with P = exp2(S - mr)
   against each row's reference mr, and l the sum of P in f32. A step where some row's max
   passes its reference by more than TAU (the workgroup decides, so that the barriers and matrix
   calls stay in uniform control flow) moves every row's reference to its max and scales l and
   the rows of O by exp2(old - new) (O through the subgroup's f32 block); then P. A step costs
   one barrier more than the second walk of the two-walk form (the decision's). O / l and L =
   mr + log2(l) on the way out. */
static void put_forward_one_pass(gen *g)
{
    wgml_sbuf *b = g->b;
    put_forward_start(g);
    for (int k = 0; k < g->rpl; k++) wgml_sbuf_put(b, "    var mr%d = ninf;\n    var l%d = 0.0;\n    var ls%d = 0.0;\n", k, k, k);
    for (int f = 0; f < g->FD; f++) wgml_sbuf_put(b, "    var o%d = Acc();\n", f);
    if (!g->c->front_loads) put_key_prologue(g, true);
    put_key_step(g, true);
    if (!g->c->emulate) wgml_sbuf_put(b, "        var want = false;\n");
    for (int k = 0; k < g->rpl; k++) {
        wgml_sbuf_put(b, "        let lm%d = ", k);
        for (int j = 1; j < g->cpr; j++) wgml_sbuf_put(b, "max(");
        wgml_sbuf_put(b, "x%d_0", k);
        for (int j = 1; j < g->cpr; j++) wgml_sbuf_put(b, ", x%d_%d)", k, j);
        wgml_sbuf_put(b, ";\n");
        if (g->lpr > 1) wgml_sbuf_put(b, "        sx[(sr + row%d) * %du + lc] = lm%d;\n", k, g->lpr, k);
        if (g->c->emulate)
            wgml_sbuf_put(b, "        if (lm%d != ninf && (mr%d == ninf || lm%d - mr%d > TAU)) { resc[0] = 1u; }\n", k, k, k, k);
        else
            wgml_sbuf_put(b, "        want = want || (lm%d != ninf && (mr%d == ninf || lm%d - mr%d > TAU));\n", k, k, k, k);
    }
    /* with p_early P now, against the reference before the vote: the vote's barriers order it
       before P V (the steps that rescale write it again, as they would overflow) */
    if (g->c->p_early) put_lazy_p(g);
    if (g->c->emulate) wgml_sbuf_put(b, "        if (workgroupUniformLoad(&resc[0]) != 0u) {\n");
    else {
        /* no lane-divergent branch before the matrix calls: each subgroup's vote stored by all
           its lanes, the workgroup's read in one uniform load (two barriers; a load a slot took
           two each: docs/MEASUREMENTS.md) */
        wgml_sbuf_put(b, "        resc[sg] = select(0u, 1u, subgroupAny(want));\n        let votes = workgroupUniformLoad(&resc);\n        if ((");
        for (int i = 0; i < g->NSG; i++) wgml_sbuf_put(b, "%svotes[%d]", i ? " | " : "", i);
        wgml_sbuf_put(b, ") != 0u) {\n");
    }
    for (int k = 0; k < g->rpl; k++) {
        wgml_sbuf_put(b, "            var mn%d = max(mr%d, lm%d);\n", k, k, k);
        for (int p = 0; p < g->lpr && g->lpr > 1; p++)
            wgml_sbuf_put(b, "            mn%d = max(mn%d, sx[(sr + row%d) * %du + %du]);\n", k, k, k, g->lpr, p);
        /* (a row with no key yet has l = 0 and O = 0: any finite factor) */
        wgml_sbuf_put(b, "            let al%d = select(exp2(mr%d - mn%d), 1.0, mr%d == ninf);\n            l%d = l%d * al%d;\n"
                         "            mr%d = mn%d;\n",
                      k, k, k, k, k, k, k, k, k);
    }
    wgml_sbuf_put(b, "            if (t > 0u) { // (O is zero before the first step's product)\n");
    wgml_sbuf *lane = &(wgml_sbuf){0};
    char lcol[32];
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(lane, "        if (%s < w) { ss[sb + row%d * %du + %s] *= al%d; }\n", lane_col(g, j, lcol, sizeof lcol), k, g->SC, lcol, k);
    char *lt = wgml_sbuf_take(lane);
    put_acc_passes(g, "o", lt ? lt : "", true);
    free(lt);
    wgml_sbuf_put(b, "            }\n");
    if (g->c->p_early) {
        put_lazy_p(g);
        wgml_sbuf_put(b, "        workgroupBarrier();\n");
    }
    wgml_sbuf_put(b, "        }\n");
    if (!g->c->p_early) {
        /* P once, after the decision: each lane writes its entries of ps once a step */
        put_lazy_p(g);
        wgml_sbuf_put(b, "        workgroupBarrier();\n");
    }
    for (int k = 0; k < g->rpl; k++) wgml_sbuf_put(b, "        l%d = l%d + ls%d;\n", k, k, k);
    put_accumulate(g, "o", g->pa, g->vo);
    wgml_sbuf_put(b, "    }\n");
    /* each lane summed its columns: the lanes of a row add theirs (sx's last reads were before
       the rescaling steps' last barrier) */
    if (g->lpr > 1) {
        wgml_sbuf_put(b, "    sx[(sr + row0) * %du + lc] = l0;\n    workgroupBarrier();\n    l0 = 0.0;\n", g->lpr);
        for (int p = 0; p < g->lpr; p++) wgml_sbuf_put(b, "    l0 = l0 + sx[(sr + row0) * %du + %du];\n", g->lpr, p);
    }
    /* L, 1 / l of each row for the results (0 for a row with no key: O stays 0) */
    for (int k = 0; k < g->rpl; k++)
        wgml_sbuf_put(b, "    if (lc == 0u) {\n        rl[sr + row%d] = select(1.0 / l%d, 0.0, l%d == 0.0);\n"
                         "        if (r0 + row%d < P.T) { O[P.lse_off + bh * P.T + r0 + row%d] = select(mr%d + log2(l%d), ninf, l%d == 0.0); }\n    }\n",
                      k, k, k, k, k, k, k, k);
    /* O / l: lanes along the rows of the pass's fragments (coalesced) */
    wgml_sbuf *out = &(wgml_sbuf){0};
    for (int n = 0; n * g->SGS < g->SM * g->C; n++)
        wgml_sbuf_put(out, "        {\n            let e = lane + %du;\n            let row = e / w;\n            let d = f0 + e %% w;\n"
                           "            if (row < %du && d < D && r0 + row < P.T) {\n"
                           "                O[b * P.o_sb + h * P.o_sh + (r0 + row) * P.o_st + d] = ss[sb + row * %du + e %% w] * rl[sr + row];\n"
                           "            }\n        }\n",
                      n * g->SGS, g->SM, g->SC);
    char *ot = wgml_sbuf_take(out);
    put_acc_passes(g, "o", ot ? ot : "", false);
    free(ot);
    wgml_sbuf_put(b, "}\n");
}

/* ---------------------------------------------------------------- gradient */

static void put_grad_bindings(gen *g) { wgml_attn_put_grad_bindings(g->b, g->c->vec, true, g->c->out16); }

/* dQ of a tile of queries: for each tile of `cols` keys they see, S = Q K^T and dP = dO V^T,
   P = exp2(S - L) and dS = P (dP - Delta), dQ += dS K */
static void put_dq(gen *g)
{
    wgml_sbuf *b = g->b;
    const int C = g->C;
    put_grad_bindings(g);
    put_query_tile_start(g, true, true);
    put_kept(g, "do", "i0", "P.T", "ob", "P.do_st", NULL, "w", true, false);
    for (int k = 0; k < g->rpl; k++)
        wgml_sbuf_put(b, "    var lq%d = 0.0;\n    var dl%d = 0.0;\n"
                         "    if (r0 + row%d < P.T) { lq%d = LSE[P.lse_off + rb + r0 + row%d]; dl%d = DEL[rb + r0 + row%d]; }\n",
                      k, k, k, k, k, k, k);
    put_key_range(g);
    for (int f = 0; f < g->FD; f++) wgml_sbuf_put(b, "    var dq%d = Acc();\n", f);
    put_stage_regs(g, "ka", C);
    put_stage_regs(g, "va", C);
    put_key_prologue(g, true);
    put_key_step(g, true);
    /* dS times the scale (dQ = scale dS K) before it is rounded to f16: the results need no
       multiplier, so whole tiles leave straight from the matrix units */
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(b, "        let p%d_%d = select(0.0, exp2(x%d_%d - lq%d), x%d_%d != ninf);\n", k, j, k, j, k, k, j);
    /* dP through the scores' block, once S is read from it */
    wgml_sbuf_put(b, "        workgroupBarrier(); // the scores are read\n");
    put_scores(g, "w", g->vo);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    /* (with p_in_xs dS goes over V, whose last reads, dP's, are behind the last barrier) */
    char lcol[32];
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++) {
            lane_col(g, j, lcol, sizeof lcol);
            wgml_sbuf_put(b, "        %s[pb + row%d * %du + %s] = f16(p%d_%d * (ss[sb + row%d * %du + %s] - dl%d) * P.scale);\n",
                          g->pa, k, g->PC, lcol, k, j, k, g->SC, lcol, k);
        }
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_accumulate(g, "dq", g->pa, g->ko);
    wgml_sbuf_put(b, "    }\n");
    /* (dS carries the scale: see ps above) */
    put_row_results(g, "dq", "OUT", "P.dq_off + b * P.dq_sb + h * P.dq_sh + r0 * P.dq_st", "P.dq_st");
    wgml_sbuf_put(b, "}\n");
}

/* dK/dV's reads of step `it` (WGSL) into registers: Q (scaled) into qa<n>, dO into oa<n>, L
   and Delta of the step's queries into sla<n>, sld<n>; past the last step, nothing */
static void put_query_fetch(gen *g, const char *it)
{
    wgml_sbuf *b = g->b;
    const int C = g->C;
    wgml_sbuf_put(b, "    {\n        let fit = %s;\n"
                     "        let fh = g * P.R + fit / nq;\n"
                     "        let fi0 = (qstart + fit %% nq) * %du;\n"
                     "        let frb = (b * P.H + fh) * P.T; // the row of (b, fh, 0)\n"
                     "        let fqb = P.q_off + b * P.q_sb + fh * P.q_sh;\n"
                     "        let fob = P.do_off + b * P.do_sb + fh * P.do_sh;\n"
                     "        let flim = select(0u, P.T, fit < steps);\n",
                  it, C);
    put_fetch(g, "qa", "q", C, "fi0", "flim", "fqb", "P.q_st", "P.scale2");
    put_fetch(g, "oa", "do", C, "fi0", "flim", "fob", "P.do_st", NULL);
    for (int n = 0; n * g->NT < C; n++)
        wgml_sbuf_put(b, "        if (li + %du < %du) {\n            let i = fi0 + li + %du;\n"
                         "            sla%d = 0.0;\n            sld%d = 0.0;\n"
                         "            if (i < flim) { sla%d = LSE[P.lse_off + frb + i]; sld%d = DEL[frb + i]; }\n        }\n",
                      n * g->NT, C, n * g->NT, n, n, n, n);
    wgml_sbuf_put(b, "    }\n");
}

/* dK and dV of a tile of keys of one key/value head: for each query head that reads it and each
   tile of `cols` queries that sees one of its keys, S^T = K Q^T and dP^T = V dO^T, P and dS
   as dQ's, dV += P^T dO and dK += dS^T Q; grouped heads summed here, deterministically */
static void put_dkv(gen *g)
{
    wgml_sbuf *b = g->b;
    const int C = g->C;
    put_grad_bindings(g);
    put_main(g, "P.tiles * P.B * P.Hkv");
    put_lane_ids(g);
    wgml_attn_put_key_tile(b, g->R);
    wgml_sbuf_put(b, "    let r0 = j0 + sr; // the key of the subgroup's row 0\n");
    put_kept(g, "k", "j0", "P.S", "kb", "P.k_st", NULL, "kr", false, false);
    put_kept(g, "v", "j0", "P.S", "vb", "P.v_st", NULL, "vr", true, false);
    wgml_sbuf_put(b, "    // the first query tile that sees one of these keys: i + S >= j0 + T\n"
                     "    var qstart = 0u;\n"
                     "    if (P.causal != 0u && j0 + P.T > P.S) { qstart = (j0 + P.T - P.S) / %du; }\n"
                     "    let nq = (P.T + %du) / %du - qstart;\n"
                     "    let steps = P.R * nq;\n",
                  C, C - 1, C);
    for (int f = 0; f < g->FD; f++) wgml_sbuf_put(b, "    var dk%d = Acc();\n    var dv%d = Acc();\n", f, f);
    put_stage_regs(g, "qa", C);
    put_stage_regs(g, "oa", C);
    for (int n = 0; n * g->NT < C; n++) wgml_sbuf_put(b, "    var sla%d = 0.0;\n    var sld%d = 0.0;\n", n, n);
    if (g->c->prefetch) put_query_fetch(g, "0u");
    put_walk_start(g);
    wgml_sbuf_put(b, "    for (var it = 0u; it < steps; it++) {\n"
                     "        let i0 = (qstart + it %% nq) * %du;\n"
                     "        let c0 = i0;\n"
                     "        let edge = i0 + %du > P.T || j0 + %du > P.S || (P.causal != 0u && j0 + %du + P.T > i0 + P.S);\n",
                  C, C, g->R, g->R - 1);
    put_step_top(g, "it", "xs, ss, pp, ps and sl");
    if (!g->c->prefetch) put_query_fetch(g, "it");
    put_store_regs(g, "qa", C, 0);
    put_store_regs(g, "oa", C, C * g->SD);
    for (int n = 0; n * g->NT < C; n++)
        wgml_sbuf_put(b, "        if (li + %du < %du) { sl[li + %du] = sla%d; sl[%du + li + %du] = sld%d; }\n", n * g->NT, C, n * g->NT, n,
                      C, n * g->NT, n);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    if (g->c->prefetch) put_query_fetch(g, "it + 1u");
    put_scores(g, "kr", 0);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_read_scores(g, "ninf", false);
    char lcol[32];
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(b, "        let p%d_%d = select(0.0, exp2(x%d_%d - sl[%s]), x%d_%d != ninf);\n", k, j, k, j, lane_col(g, j, lcol, sizeof lcol),
                          k, j);
    /* (then P^T: a quad lane's pair stored together, likely one 4-byte store) */
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++)
            wgml_sbuf_put(b, "        pp[pb + row%d * %du + %s] = f16(p%d_%d);\n", k, g->PC, lane_col(g, j, lcol, sizeof lcol), k, j);
    wgml_sbuf_put(b, "        workgroupBarrier(); // the scores are read\n");
    put_scores(g, "vr", C * g->SD);
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    /* dS^T times ln 2 before it is rounded to f16: Q was staged times scale log2(e), and
       dK = scale dS^T Q = ln 2 dS^T (scaled Q), so the results need no multiplier */
    for (int k = 0; k < g->rpl; k++)
        for (int j = 0; j < g->cpr; j++) {
            lane_col(g, j, lcol, sizeof lcol);
            wgml_sbuf_put(b, "        ps[pb + row%d * %du + %s] = f16(p%d_%d * (ss[sb + row%d * %du + %s] - sl[%du + %s]) * LN2);\n", k,
                          g->PC, lcol, k, j, k, g->SC, lcol, C, lcol);
        }
    wgml_sbuf_put(b, "        workgroupBarrier();\n");
    put_accumulate(g, "dv", "pp", C * g->SD);
    put_accumulate(g, "dk", "ps", 0);
    wgml_sbuf_put(b, "    }\n");
    /* (dS^T carries ln 2, see ps above) */
    char full[64];
    snprintf(full, sizeof full, "j0 + %du <= P.S", g->R);
    const char *acc[] = {"dk", "dv"}, *base0[] = {"P.dk_off + b * P.kv_sb + g * P.kv_sh + r0 * P.kv_st",
                                                  "P.dv_off + b * P.kv_sb + g * P.kv_sh + r0 * P.kv_st"};
    put_results_begin(g, 2, acc, "OUT", base0, "P.kv_st", full);
    put_results(g, "dk", "OUT", "P.dk_off + b * P.kv_sb + g * P.kv_sh + (r0 + row) * P.kv_st", "r0 + row < P.S");
    put_results(g, "dv", "OUT", "P.dv_off + b * P.kv_sb + g * P.kv_sh + (r0 + row) * P.kv_st", "r0 + row < P.S");
    put_results_end(g);
    wgml_sbuf_put(b, "}\n");
}

char *wgml_attn_sgmat_source(const wgml_attn_sgmat *c)
{
    if (wgml_attn_sgmat_problem(c)) return NULL;
    wgml_sbuf b = {0};
    gen g = gen_of(&b, c);
    static const char *const names[] = {"forward", "", "dK and dV", "dQ"};
    wgml_sbuf_put(&b, "// generated attention kernel on subgroup matrices: %s, D = %d (rows of %d), %dx%dx%d matrices, "
                      "%d subgroups of %d lanes and %d rows (tile %d x %d)%s%s%s%s%s\n",
                  names[c->kind], c->d, g.DP, g.SM, g.SN, g.SK, g.NSG, g.SGS, g.SM, g.R, g.C, c->vec ? ", vec4 reads" : "",
                  one_pass(c) ? ", one walk" : "", c->emulate ? ", emulated" : "", c->out16 ? ", halves out" : "",
                  c->stage2 ? ", two staging buffers" : "");
    put_types(&g);
    put_params(&g);
    wgml_sbuf_put(&b, "var<workgroup> xs: array<f16, %d>; // staged rows of %d + pad%s%s\n", xs_halves(&g), g.DP,
                  g.KP > 1 ? " (the kept rows' in halves)" : "", c->p_in_xs ? ", each subgroup's P or dS over the walk's tile done with" : "");
    wgml_sbuf_put(&b, "var<workgroup> ss: array<f32, %d>; // each subgroup's scores [%d][%d + pad]\n", g.NSG * g.SM * g.SC, g.SM, g.C);
    if (!c->p_in_xs)
        wgml_sbuf_put(&b, "var<workgroup> ps: array<f16, %d>; // each subgroup's P or dS [%d][%d + pad]\n", g.NSG * g.SM * g.PC, g.SM, g.C);
    if (c->kind == WGML_ATTN_FORWARD && g.lpr > 1)
        wgml_sbuf_put(&b, "var<workgroup> sx: array<f32, %d>; // each lane's row max%s\n", g.NSG * g.SM * g.lpr * (one_pass(c) ? 1 : 2),
                      one_pass(c) ? " of the step" : " and sum");
    if (one_pass(c))
        wgml_sbuf_put(&b, "var<workgroup> rl: array<f32, %d>; // 1 / l of each row at the end\n"
                          "var<workgroup> resc: array<u32, %d>; // some row passed its reference this step (a subgroup's vote)\nconst TAU = 8.0;\n",
                      g.R, c->emulate ? 1 : g.NSG);
    if (c->kind == WGML_ATTN_DKV)
        wgml_sbuf_put(&b, "var<workgroup> pp: array<f16, %d>; // each subgroup's P^T\n"
                          "var<workgroup> sl: array<f32, %d>; // L, then Delta of the step's queries\n",
                      g.NSG * g.SM * g.PC, 2 * g.C);
    switch (c->kind) {
    case WGML_ATTN_FORWARD: one_pass(c) ? put_forward_one_pass(&g) : put_forward(&g); break;
    case WGML_ATTN_DKV: put_dkv(&g); break;
    default: put_dq(&g); break;
    }
    return wgml_sbuf_take(&b);
}
