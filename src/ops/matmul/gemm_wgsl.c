/*
 * The matmul kernels' WGSL generators: the register-tiled GEMM (wgml_gemm_source), the
 * GEMV for M == 1 (wgml_gemv_source) and the small-M GEMV (wgml_gemv_rows_source), each
 * written for one tile config (ops/matmul/matmul_tiles.c picks it) with the shared parameter
 * block, bindings and epilogue (alpha, accumulate, bias, activation).
 *
 *   - GEMV (M == 1, or N == 1 with the operands swapped): a workgroup owns 16-64 columns; its
 *     256 threads split K over the rest and reduce in workgroup memory (cooperative
 *     K-reduction).
 *   - small-M GEMV (2 <= M <= 16, neither operand transposed): the GEMV's layout with one
 *     accumulator per row, so the weight is read once for all rows.
 *   - GEMM: 16x16 threads, each computing TM x TN outputs from BK-deep slices staged in
 *     workgroup memory. The generator unrolls the inner product so register tiles are indexed
 *     by constants only (naga emits plain loops and arrays indexed at run time spill).
 *     With f16 arithmetic (opt in, wgml_matmul_desc f16_math) the slices are staged as
 *     halves and the products summed in f16: 16 k at a time, each such sum then added into
 *     the f32 accumulators (WGML_F16_MATH_F32_SUMS), or all of K (WGML_F16_MATH_F16_SUMS).
 * Edges (M, N, K not multiples of the tile) are guarded in the kernel.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/sbuf.h"
#include "ops/matmul/gemm_bindings.h"
#include "ops/matmul/matmul.h"
#include "ops/table.h"
#include "kernels/wgsl_sources.h"

/* the op of the table whose WGSL each activation applies: the same text as the fused ops */
const int wgml_matmul_act_op[] = {
#define WGML_ACT_OP(a, op) [WGML_ACT_##a] = WGML_OP_##op,
    WGML_MATMUL_ACTS(WGML_ACT_OP)
#undef WGML_ACT_OP
};
#define WGML_ACT_ONE(a, op) +1
const int wgml_matmul_act_count = 0 WGML_MATMUL_ACTS(WGML_ACT_ONE);
/* the list's activations are WGML_ACT_NONE.. with no gap, so the count bounds a valid one */
_Static_assert(sizeof wgml_matmul_act_op / sizeof *wgml_matmul_act_op == 0 WGML_MATMUL_ACTS(WGML_ACT_ONE),
               "WGML_MATMUL_ACTS numbers the activations 0.. without a gap");
#undef WGML_ACT_ONE
#define act_op wgml_matmul_act_op

/* b_f16: B is stored as IEEE halves (cached weights uploaded with f16 = 1, f16 tensors); every
   read of it converts to f32 (F16_OPEN / F16_CLOSE around the read), the math stays f32. The
   tiled GEMM reads an f16 A the same way (a_f16) */
#define F16_OPEN(f16, vec) ((f16) ? ((vec) ? "vec4<f32>(" : "f32(") : "")
#define F16_CLOSE(f16) ((f16) ? ")" : "")

static void put_header_ab(wgml_sbuf *b, bool vec_a, bool vec_b, bool a_f16, bool b_f16)
{
    if (a_f16 || b_f16) wgml_sbuf_put(b, "enable f16;\n");
    wgml_sbuf_put(b, WGML_GEMM_BINDINGS_WGSL, a_f16 ? (vec_a ? "vec4<f16>" : "f16") : vec_a ? "vec4<f32>" : "f32",
        b_f16 ? (vec_b ? "vec4<f16>" : "f16") : vec_b ? "vec4<f32>" : "f32", "f32");
}
static void put_header(wgml_sbuf *b, bool vec_a, bool vec_b, bool b_f16) { put_header_ab(b, vec_a, vec_b, false, b_f16); }

const char *wgml_matmul_act_grad_fn(int act) { return act == WGML_ACT_GELU_EXACT ? "wgml_gelu_exact_grad" : NULL; }

/* The prelude of an epilogue that applies an activation, its derivative or a residual: the
   shared elementwise functions, and where X is read (WGML_ACT_GRAD, WGML_ACT_RESID) its binding
   and `fn x_at(idx) -> f32`, X's element of result index idx (C and X have the same shape, both
   contiguous) */
static void put_act_prelude(wgml_sbuf *b, int act)
{
    if ((act & 0xff) != WGML_ACT_NONE)
        /* NaN and inf as runtime values (P.M & 0u is 0): WGSL constants may be neither */
        wgml_sbuf_put(b, "alias T = f32;\nalias TU = u32;\nalias TI = i32;\nalias TB = bool;\n"
                         "fn wgml_nan() -> f32 { return bitcast<f32>(0x7fc00000u | (P.M & 0u)); }\n"
                         "fn wgml_inf() -> f32 { return bitcast<f32>(0x7f800000u | (P.M & 0u)); }\n%s",
                      wgml_wgsl_find("elementwise"));
    if (act & (WGML_ACT_GRAD | WGML_ACT_RESID))
        wgml_sbuf_put(b, "@group(0) @binding(5) var<storage, read> X: array<%s>;\n"
                         "fn x_at(idx: u32) -> f32 { return f32(X[idx - P.c_off + P.x_off]); }\n",
                      act & WGML_ACT_X_F16 ? "f16" : "f32");
}

/* `fn act_x(v: f32, x: f32) -> f32` of an epilogue that reads X: v times the derivative at x
   (WGML_ACT_GRAD), or the activation of v plus x (WGML_ACT_RESID) */
static void put_act_x(wgml_sbuf *b, int act)
{
    const char *v = "v";
    if (act & WGML_ACT_GRAD) {
        wgml_sbuf_put(b, "fn act_x(v: f32, x: f32) -> f32 { return v * %s(x); }\n", wgml_matmul_act_grad_fn(act & 0xff));
        return;
    }
    wgml_sbuf_put(b, "fn act_x(v: f32, x: f32) -> f32 { return ");
    wgml_op_expand(b, act_op[act & 0xff], &v, NULL);
    wgml_sbuf_put(b, " + x; }\n");
}

/* The epilogue every generator calls on a result: alpha, accumulate, bias, activation (or
   its derivative, WGML_ACT_GRAD; or plus a residual, WGML_ACT_RESID). The activation is the op
   table's WGSL over ops/elementwise.wgsl, as in the fused kernels, so both give the same value
   at every input (infinities and NaN included). Written right after put_header. */
static void put_epilogue_fn(wgml_sbuf *b, int act)
{
    put_act_prelude(b, act);
    bool reads_x = (act & (WGML_ACT_GRAD | WGML_ACT_RESID)) != 0;
    if (reads_x) put_act_x(b, act);
    const char *v = "v";
    wgml_sbuf_put(b, "fn epilogue(v0: f32, n: u32, idx: u32) -> f32 {\n"
           "    var v = P.alpha * v0;\n"
           "    if (P.accumulate != 0u) { v = v + C[idx]; }\n"
           "    if (P.has_bias != 0u) { v = v + bias[P.bias_off + n]; }\n"
           "    return ");
    if (reads_x) wgml_sbuf_put(b, "act_x(v, x_at(idx))");
    else wgml_op_expand(b, act_op[act], &v, NULL);
    wgml_sbuf_put(b, ";\n}\n");
}

/* The subgroup-matrix GEMM's activation (ops/matmul/gemm_sgmat_wgsl.h's act_wgsl): the same
   prelude and op-table WGSL as put_epilogue_fn, as `fn act(v: f32) -> f32`, or where X is read
   (WGML_ACT_GRAD, WGML_ACT_RESID) `fn act_x(v: f32, x: f32) -> f32` with X's binding; NULL for
   none (and when out of host memory, which the caller tells apart by act). */
char *wgml_sgmat_act_source(int act)
{
    if (act == WGML_ACT_NONE) return NULL;
    wgml_sbuf b = {0};
    put_act_prelude(&b, act);
    if (act & (WGML_ACT_GRAD | WGML_ACT_RESID)) { /* X read by the kernel (wgml_sgmat_config act_x) */
        put_act_x(&b, act);
        return wgml_sbuf_take(&b);
    }
    wgml_sbuf_put(&b, "fn act(v: f32) -> f32 {\n    return ");
    const char *v = "v";
    wgml_op_expand(&b, act_op[act], &v, NULL);
    wgml_sbuf_put(&b, ";\n}\n");
    return wgml_sbuf_take(&b);
}

/* Where batch bt's matrices start (a_base, b_base): bt = i0 * L1 + i1 over the two leading
   dims, each with its own stride per operand (0 where broadcast). Once per thread, at the top
   of main, so the loops only add a row and a column. */
static const char bases[] = "    let bt = wg.z;\n"
                           "    let a_base = P.a_off + (bt / P.L1) * P.a_bs + (bt % P.L1) * P.a_bs1;\n"
                           "    let b_base = P.b_off + (bt / P.L1) * P.b_bs + (bt % P.L1) * P.b_bs1;\n";
static void put_bases(wgml_sbuf *b) { wgml_sbuf_put(b, "%s", bases); }

/* A element (m, k) and B element (k, n) of batch `bt`, as WGSL index expressions: from the
   bases above with two leading dims, else from the batch index alone. The tiled GEMM keeps
   the second form where it can: holding the bases cost it 15-18% on the H100 (2048^3, M = 128) */
static const char *a_index(bool ta, bool two)
{
    if (two) return ta ? "a_base + k * P.lda + m" : "a_base + m * P.lda + k";
    return ta ? "P.a_off + bt * P.a_bs + k * P.lda + m" : "P.a_off + bt * P.a_bs + m * P.lda + k";
}
static const char *b_index(bool tb, bool two)
{
    if (two) return tb ? "b_base + n * P.ldb + k" : "b_base + k * P.ldb + n";
    return tb ? "P.b_off + bt * P.b_bs + n * P.ldb + k" : "P.b_off + bt * P.b_bs + k * P.ldb + n";
}

/* One operand's side of the GEMM tile, as the generator sees it. The tile is staged in
   workgroup memory k-major ([BK][BM] for A, [BK][BN] for B) so the inner product reads
   vec4s of consecutive rows/columns. Global memory is read in vec4s along the operand's
   contiguous dimension: k when A is not transposed (B: when it is), else m (B: n). */
typedef struct operand {
    const char *name, *shared, *reg; /* "A", "As", "ra" */
    int width;                       /* BM or BN */
    bool along_k;                    /* contiguous dimension is k: the staging transposes */
    bool vec;                        /* buffer bound as array<vec4<f32>> (aligned) */
    const char *outer, *outer_lim;   /* the non-k coordinate: "m", "P.M" */
    const char *index;               /* element index expression (a_index/b_index) */
    bool f16;                        /* stored as halves (f16 cached weights, f16 tensors) */
    bool half;                       /* staged as halves (f16 arithmetic): the store converts */
} operand;

/* Loads the vec4s this thread stages of operand o for the K-slice at `k0` into registers
   o.reg0.. (zero outside the matrix). */
static void put_tile_load(wgml_sbuf *b, const operand *o, int BK)
{
    int vecs = o->width * BK / 4;
    for (int r = 0; r * 256 < vecs; r++) {
        wgml_sbuf_put(b, "        {\n            let e = lid + %du;\n", r * 256);
        wgml_sbuf_put(b, "            %s%d = vec4<f32>(0.0);\n", o->reg, r);
        if (r * 256 + 256 > vecs) wgml_sbuf_put(b, "            if (e < %du) {\n", vecs);
        /* q: which vec4 along the contiguous dimension; s: which row of the stored tile */
        if (o->along_k)
            wgml_sbuf_put(b, "            let %s = %s0 + e / %du; let k = k0 + (e %% %du) * 4u;\n", o->outer,
                o->outer, BK / 4, BK / 4);
        else
            wgml_sbuf_put(b, "            let %s = %s0 + (e %% %du) * 4u; let k = k0 + e / %du;\n", o->outer,
                o->outer, o->width / 4, o->width / 4);
        const char *inner = o->along_k ? "k" : o->outer;
        const char *inner_lim = o->along_k ? "P.K" : o->outer_lim;
        const char *other = o->along_k ? o->outer : "k";
        const char *other_lim = o->along_k ? o->outer_lim : "P.K";
        if (o->vec) {
            /* aligned: the extent along the contiguous dimension is a multiple of 4 */
            wgml_sbuf_put(b, "            if (%s < %s && %s < %s) { %s%d = %s%s[(%s) / 4u]%s; }\n", other, other_lim, inner,
                inner_lim, o->reg, r, F16_OPEN(o->f16, true), o->name, o->index, F16_CLOSE(o->f16));
        } else {
            wgml_sbuf_put(b, "            if (%s < %s) {\n                let i = %s;\n", other, other_lim, o->index);
            for (int c = 0; c < 4; c++)
                wgml_sbuf_put(b, "                if (%s + %du < %s) { %s%d.%c = %s%s[i + %du]%s; }\n", inner, c, inner_lim,
                    o->reg, r, "xyzw"[c], F16_OPEN(o->f16, false), o->name, c, F16_CLOSE(o->f16));
            wgml_sbuf_put(b, "            }\n");
        }
        if (r * 256 + 256 > vecs) wgml_sbuf_put(b, "            }\n");
        wgml_sbuf_put(b, "        }\n");
    }
}

/* The transposing store writes 4 k-rows at once from lanes that differ in k and in row s;
   unswizzled, the lanes' addresses fall in a quarter of the banks (4-way conflicts). XOR-ing
   the vec4 column with (k / 4) * swizzle(o) spreads them over all 32 banks. The inner product
   reads the same column with the same XOR (a constant per k), so its vec4 reads stay whole.
   Needs a power-of-two row of >= 8 vec4s (widths 64 and 128). */
static int swizzle(const operand *o, int BK)
{
    return o->along_k && o->width / 4 >= 8 ? 32 / BK : 0;
}

/* Stores the registers of put_tile_load into staging buffer `stage` (a WGSL expression). */
static void put_tile_store(wgml_sbuf *b, const operand *o, int BK, const char *stage)
{
    int vecs = o->width * BK / 4, w4 = o->width / 4;
    wgml_sbuf_put(b, "        let buf = (%s) * %du;\n", stage, vecs);
    for (int r = 0; r * 256 < vecs; r++) {
        wgml_sbuf_put(b, "        {\n            let e = lid + %du;\n", r * 256);
        if (r * 256 + 256 > vecs) wgml_sbuf_put(b, "            if (e < %du) {\n", vecs);
        if (o->along_k) {
            /* row s of the stored tile holds 4 consecutive k: transpose into 4 rows */
            wgml_sbuf_put(b, "            let s = e / %du; let kq = (e %% %du) * 4u;\n", BK / 4, BK / 4);
            wgml_sbuf_put(b, "            let col = (s / 4u) ^ ((kq / 4u) * %du);\n", swizzle(o, BK));
            for (int c = 0; c < 4; c++)
                wgml_sbuf_put(b, "            %s[buf + (kq + %du) * %du + col][s %% 4u] = %s%s%d.%c%s;\n", o->shared, c, w4,
                    o->half ? "f16(" : "", o->reg, r, "xyzw"[c], o->half ? ")" : "");
        } else {
            wgml_sbuf_put(b, "            %s[buf + e] = %s%s%d%s;\n", o->shared, o->half ? "vec4<f16>(" : "", o->reg, r,
                o->half ? ")" : "");
        }
        if (r * 256 + 256 > vecs) wgml_sbuf_put(b, "            }\n");
        wgml_sbuf_put(b, "        }\n");
    }
}

/* Slice `k0` of both operands into registers and, if `store`, on into staging buffer `stage`. */
static void put_slice(wgml_sbuf *b, const operand *A, const operand *B, int BK, const char *k0, const char *stage, bool store)
{
    wgml_sbuf_put(b, "    {\n        let k0 = %s;\n", k0);
    put_tile_load(b, A, BK);
    put_tile_load(b, B, BK);
    if (store) {
        wgml_sbuf_put(b, "    {\n");
        put_tile_store(b, A, BK, stage);
        wgml_sbuf_put(b, "    }\n    {\n");
        put_tile_store(b, B, BK, stage);
        wgml_sbuf_put(b, "    }\n");
    }
    wgml_sbuf_put(b, "    }\n");
}

/* f16 arithmetic with f32 sums: the products of F16_RUN consecutive k (a 16-deep slice, or a
   run of a deeper one) are summed in f16, each run's sum then added in f32. The error grows
   with the run (about u = 2^-11 per term): 16 bounds it at ~18u (tests/test_matmul_f16.c) */
#define F16_RUN 16

char *wgml_gemm_source(const wgml_gemm_config *cfg, bool ta, bool tb, int act)
{
    int TM = cfg->tm, TN = cfg->tn, BK = cfg->bk;
    int BM = 16 * TM, BN = 16 * TN;
    int stages = cfg->double_buffer ? 2 : 1;
    bool half = cfg->f16_math != 0, whole = cfg->f16_math == WGML_F16_MATH_F16_SUMS;
    const char *st = half ? "f16" : "f32"; /* the staged type */
    operand A = {"A", "As", "ra", BM, !ta, cfg->vec_a, "m", "P.M", a_index(ta, cfg->two_leading), cfg->a_f16, half};
    operand B = {"B", "Bs", "rb", BN, tb, cfg->vec_b, "n", "P.N", b_index(tb, cfg->two_leading), cfg->b_f16, half};
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "// generated GEMM: tile %dx%dx%d, %dx%d per thread, A%s%s B%s%s, %d stage(s)%s%s\n", BM, BN, BK,
        TM, TN, ta ? "^T" : "", cfg->vec_a ? " vec4" : "", tb ? "^T" : "", cfg->vec_b ? " vec4" : "", stages,
        cfg->prefetch ? ", register prefetch" : "", half ? ", f16 arithmetic" : "");
    if (half && !cfg->b_f16 && !cfg->a_f16) wgml_sbuf_put(&b, "enable f16;\n");
    put_header_ab(&b, cfg->vec_a, cfg->vec_b, cfg->a_f16, cfg->b_f16);
    put_epilogue_fn(&b, act);
    wgml_sbuf_put(&b, "var<workgroup> As: array<vec4<%s>, %d>; // [stage][BK][BM / 4]\n", st, stages * BK * BM / 4);
    wgml_sbuf_put(&b, "var<workgroup> Bs: array<vec4<%s>, %d>; // [stage][BK][BN / 4]\n", st, stages * BK * BN / 4);
    wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
            "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
            "    let tiles_n = (P.N + %du) / %du;\n"
            "    let tile = wg.x + wg.y * P.gx;\n"
            "    let m0 = (tile / tiles_n) * %du;\n"
            "    let n0 = (tile %% tiles_n) * %du;\n"
            "    if (m0 >= P.M) { return; }\n", BN - 1, BN, BM, BN);
    wgml_sbuf_put(&b, "%s", cfg->two_leading ? bases : "    let bt = wg.z;\n");
    /* a warp covers 8x4 threads (reads 128 B of Bs and 64 B of As per step: one wavefront
       each) or 16x2 (256 B of Bs: two) */
    if (cfg->warp_8x4)
        wgml_sbuf_put(&b, "    let tx = (lid %% 8u) + ((lid / 32u) %% 2u) * 8u;\n"
                "    let ty = ((lid / 8u) %% 4u) + (lid / 64u) * 4u;\n");
    else
        wgml_sbuf_put(&b, "    let tx = lid %% 16u;\n    let ty = lid / 16u;\n");
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN / 4; j++) wgml_sbuf_put(&b, "    var c%d_%d = vec4<f32>(0.0);\n", i, j);
    if (whole)
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN / 4; j++) wgml_sbuf_put(&b, "    var h%d_%d = vec4<f16>(0.0);\n", i, j);
    for (int r = 0; r * 256 < BM * BK / 4; r++) wgml_sbuf_put(&b, "    var ra%d: vec4<f32>;\n", r);
    for (int r = 0; r * 256 < BN * BK / 4; r++) wgml_sbuf_put(&b, "    var rb%d: vec4<f32>;\n", r);
    char next_k0[32];
    snprintf(next_k0, sizeof next_k0, "(t + 1u) * %du", BK);
    /* prologue: slice 0 into stage 0 */
    wgml_sbuf_put(&b, "    let slices = (P.K + %du) / %du;\n", BK - 1, BK);
    put_slice(&b, &A, &B, BK, "0u", "0u", true);
    wgml_sbuf_put(&b, "    workgroupBarrier();\n    for (var t = 0u; t < slices; t++) {\n");
    if (stages == 2) {
        /* slice t+1: with prefetch, load it into registers now (its latency hides behind slice
           t's math) and store it after; without, stage it into the other buffer right away */
        wgml_sbuf_put(&b, "        let cur = t & 1u;\n        if (t + 1u < slices) {\n");
        put_slice(&b, &A, &B, BK, next_k0, "1u - cur", !cfg->prefetch);
        wgml_sbuf_put(&b, "        }\n");
    } else {
        wgml_sbuf_put(&b, "        let cur = 0u;\n");
        if (cfg->prefetch) {
            /* one buffer, slice t+1 loaded into registers before slice t's math */
            wgml_sbuf_put(&b, "        if (t + 1u < slices) {\n");
            put_slice(&b, &A, &B, BK, next_k0, "0u", false);
            wgml_sbuf_put(&b, "        }\n");
        }
    }
    wgml_sbuf_put(&b, "        let abuf = cur * %du;\n        let bbuf = cur * %du;\n", BK * BM / 4, BK * BN / 4);
    /* the inner product, unrolled so register tiles are indexed by constants only: rows
       ty*4 + 64*i' (+0..3), columns tx*4 + 64*j (+0..3) so a warp reads neighbouring vec4s */
    for (int kk = 0; kk < BK; kk++) {
        /* the swizzled column (see swizzle()): ty ^ f < 16, so ib * 16 + (ty ^ f) */
        if (kk % 4 == 0) {
            wgml_sbuf_put(&b, "        let ty_s%d = ty ^ %du;\n", kk / 4, (kk / 4) * swizzle(&A, BK));
            wgml_sbuf_put(&b, "        let tx_s%d = tx ^ %du;\n", kk / 4, (kk / 4) * swizzle(&B, BK));
        }
        if (TM % 4 == 0)
            for (int ib = 0; ib < TM / 4; ib++)
                wgml_sbuf_put(&b, "        let a%d_%d = As[abuf + %du + ty_s%d];\n", kk, ib, kk * BM / 4 + ib * 16, kk / 4);
        else
            wgml_sbuf_put(&b, "        let a%d_0 = vec4<%s>(As[abuf + %du + ty / 4u][ty %% 4u]);\n", kk, st, kk * BM / 4);
        for (int jb = 0; jb < TN / 4; jb++)
            wgml_sbuf_put(&b, "        let b%d_%d = Bs[bbuf + %du + tx_s%d];\n", kk, jb, kk * BN / 4 + jb * 16, kk / 4);
        for (int i = 0; i < TM; i++)
            for (int jb = 0; jb < TN / 4; jb++) {
                char av[64];
                snprintf(av, sizeof av, "vec4<%s>(a%d_%d.%c)", st, kk, i / 4, "xyzw"[i % 4]);
                if (!half)
                    wgml_sbuf_put(&b, "        c%d_%d = fma(%s, b%d_%d, c%d_%d);\n", i, jb, av, kk, jb, i, jb);
                else if (kk % F16_RUN == 0 && !whole) /* a run's f16 sums start from its first products */
                    wgml_sbuf_put(&b, "        %sh%d_%d = %s * b%d_%d;\n", kk ? "" : "var ", i, jb, av, kk, jb);
                else
                    wgml_sbuf_put(&b, "        h%d_%d = fma(%s, b%d_%d, h%d_%d);\n", i, jb, av, kk, jb, i, jb);
            }
        /* f16 arithmetic: a run's f16 sums into the f32 accumulators */
        if (half && !whole && (kk % F16_RUN == F16_RUN - 1 || kk == BK - 1))
            for (int i = 0; i < TM; i++)
                for (int jb = 0; jb < TN / 4; jb++) wgml_sbuf_put(&b, "        c%d_%d += vec4<f32>(h%d_%d);\n", i, jb, i, jb);
    }
    if (stages == 2 && cfg->prefetch) {
        wgml_sbuf_put(&b, "        if (t + 1u < slices) {\n        {\n");
        put_tile_store(&b, &A, BK, "1u - cur");
        wgml_sbuf_put(&b, "        }\n        {\n");
        put_tile_store(&b, &B, BK, "1u - cur");
        wgml_sbuf_put(&b, "        }\n        }\n");
    } else if (stages == 1) {
        /* one buffer: everyone is done reading it before the next slice goes in */
        wgml_sbuf_put(&b, "        workgroupBarrier();\n        if (t + 1u < slices) {\n");
        if (cfg->prefetch) {
            wgml_sbuf_put(&b, "        {\n");
            put_tile_store(&b, &A, BK, "0u");
            wgml_sbuf_put(&b, "        }\n        {\n");
            put_tile_store(&b, &B, BK, "0u");
            wgml_sbuf_put(&b, "        }\n");
        } else {
            put_slice(&b, &A, &B, BK, next_k0, "0u", true);
        }
        wgml_sbuf_put(&b, "        }\n");
    }
    wgml_sbuf_put(&b, "        workgroupBarrier();\n    }\n");
    if (whole)
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN / 4; j++) wgml_sbuf_put(&b, "    c%d_%d = vec4<f32>(h%d_%d);\n", i, j, i, j);
    wgml_sbuf_put(&b, "    let cb = P.c_off + bt * P.M * P.N;\n");
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN / 4; j++) {
            if (TM % 4 == 0)
                wgml_sbuf_put(&b, "    {\n        let m = m0 + ty * 4u + %du;\n", (i / 4) * 64 + i % 4);
            else
                wgml_sbuf_put(&b, "    {\n        let m = m0 + ty;\n");
            wgml_sbuf_put(&b, "        let n = n0 + tx * 4u + %du;\n        if (m < P.M) {\n", j * 64);
            for (int c = 0; c < 4; c++)
                wgml_sbuf_put(&b, "            if (n + %du < P.N) { let idx = cb + m * P.N + n + %du; C[idx] = epilogue(c%d_%d.%c, n + %du, idx); }\n",
                    c, c, i, j, "xyzw"[c], c);
            wgml_sbuf_put(&b, "        }\n    }\n");
        }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}

/* load_b(k, n, base): B[k, n .. n + 3] of the batch's matrix at base (B stored [K, N]), zero
   past N */
static void put_load_b(wgml_sbuf *b, bool vec_b, bool f16)
{
    wgml_sbuf_put(b, "fn load_b(k: u32, n: u32, base: u32) -> vec4<f32> {\n"
           "    let row = base + k * P.ldb + n;\n");
    const char *o = F16_OPEN(f16, false), *c = F16_CLOSE(f16);
    if (vec_b)
        wgml_sbuf_put(b, "    return %sB[row / 4u]%s; // N %% 4 == 0: the vec4 is wholly inside\n}\n",
                      F16_OPEN(f16, true), c);
    else
        wgml_sbuf_put(b, "    var v = vec4<f32>(0.0);\n"
               "    v.x = %sB[row]%s;\n"
               "    if (n + 1u < P.N) { v.y = %sB[row + 1u]%s; }\n"
               "    if (n + 2u < P.N) { v.z = %sB[row + 2u]%s; }\n"
               "    if (n + 3u < P.N) { v.w = %sB[row + 3u]%s; }\n"
               "    return v;\n}\n", o, c, o, c, o, c, o, c);
}

/* y[b, n] = sum_k x[b, k] B[k, n]: one workgroup owns cfg->gemv_cols columns (vec4 groups of
   them across threads) and splits K over the rest of its 256 threads; partial sums meet in
   workgroup memory. Narrow workgroups for narrow matrices, so there are enough of them to
   keep every SM's loads in flight. */
char *wgml_gemv_source(const wgml_gemm_config *cfg, bool tb, int act)
{
    wgml_sbuf b = {0};
    bool sg = !tb && cfg->gemv_subgroups; /* (naga 29 takes subgroup ops without `enable`) */
    wgml_sbuf_put(&b, "// generated GEMV (M = 1), B%s%s%s\n", tb ? "^T" : "", !tb && cfg->vec_b ? " vec4" : "",
                  sg ? ", subgroup reduction" : "");
    put_header(&b, false, !tb && cfg->vec_b, cfg->b_f16);
    put_epilogue_fn(&b, act);
    if (!tb) {
        int groups = cfg->gemv_cols / 4, slices = 256 / groups;
        /* thread (ks, c) sums k = ks, ks + slices, ... for columns n .. n + 3; four
           independent accumulators keep four loads in flight */
        wgml_sbuf_put(&b, "var<workgroup> part: array<vec4<f32>, 256>;\n");
        put_load_b(&b, cfg->vec_b, cfg->b_f16);
        wgml_sbuf_put(&b, "@compute @workgroup_size(256)\n"
                "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32%s) {\n"
                "    let n0 = (wg.x + wg.y * P.gx) * %du;\n"
                "    if (n0 >= P.N) { return; }\n",
            sg ? ", @builtin(subgroup_size) sg_size: u32" : "", cfg->gemv_cols);
        put_bases(&b);
        wgml_sbuf_put(&b,
                "    let c = lid %% %du;\n"
                "    let ks = lid / %du;\n"
                "    let n = n0 + c * 4u;\n"
                "    let m = 0u;\n"
                "    var acc0 = vec4<f32>(0.0); var acc1 = vec4<f32>(0.0);\n"
                "    var acc2 = vec4<f32>(0.0); var acc3 = vec4<f32>(0.0);\n"
                "    if (n < P.N) {\n"
                "        var k = ks;\n"
                "        for (; k + %du < P.K; k += %du) {\n",
            groups, groups, 3 * slices, 4 * slices);
        for (int u = 0; u < 4; u++)
            wgml_sbuf_put(&b, "            { let k = k + %du; acc%d = fma(vec4<f32>(A[%s]), load_b(k, n, b_base), acc%d); }\n",
                u * slices, u, a_index(false, true), u);
        wgml_sbuf_put(&b, "        }\n"
                "        for (; k < P.K; k += %du) { acc0 = fma(vec4<f32>(A[%s]), load_b(k, n, b_base), acc0); }\n"
                "    }\n",
            slices, a_index(false, true));
        /* the workgroup's partial sums meet in part[]; thread c < G then holds its 4 columns in r */
        if (sg) {
            /* lanes lid and lid ^ o of a subgroup hold the same columns when o is a multiple of
               the number of column groups G: a butterfly leaves each subgroup's sums in its
               first G lanes (a subgroup narrower than G is left as it is). One barrier, then
               thread c < G adds one entry per subgroup (or per slice). Assumes lanes are
               numbered along local_invocation_index, as Vulkan drivers do for a 1-D
               workgroup. */
            wgml_sbuf_put(&b,
                "    var v = (acc0 + acc1) + (acc2 + acc3);\n"
                "    for (var o = %du; o < sg_size; o <<= 1u) { v += subgroupShuffleXor(v, o); }\n"
                "    part[lid] = v;\n"
                "    workgroupBarrier();\n"
                "    if (lid < %du) {\n"
                "        let step = max(sg_size, %du);\n"
                "        var r = vec4<f32>(0.0);\n"
                "        for (var j = lid; j < 256u; j += step) { r += part[j]; }\n",
                groups, groups, groups);
        } else {
            wgml_sbuf_put(&b,
                "    part[lid] = (acc0 + acc1) + (acc2 + acc3);\n"
                "    workgroupBarrier();\n"
                "    for (var s = 128u; s >= %du; s >>= 1u) {\n"
                "        if (lid < s) { part[lid] += part[lid + s]; }\n"
                "        workgroupBarrier();\n"
                "    }\n"
                "    if (lid < %du) {\n"
                "        let r = part[lid];\n",
                groups, groups);
        }
        wgml_sbuf_put(&b,
                "        let cb = P.c_off + bt * P.N;\n"
                "        for (var q = 0u; q < 4u; q++) {\n"
                "            if (n + q < P.N) { C[cb + n + q] = epilogue(r[q], n + q, cb + n + q); }\n"
                "        }\n"
                "    }\n"
                "}\n");
    } else {
        /* B stored [N, K]: each output is a dot product of two contiguous rows; 8 outputs
           per workgroup, 32 threads each */
        wgml_sbuf_put(&b, "var<workgroup> part: array<f32, 256>;\n"
                "@compute @workgroup_size(256)\n"
                "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
                "%s"
                "    let n = (wg.x + wg.y * P.gx) * 8u + lid / 32u;\n"
                "    let lane = lid %% 32u;\n"
                "    let m = 0u;\n"
                "    var acc = 0.0;\n"
                "    if (n < P.N) {\n"
                "        for (var k = lane; k < P.K; k += 32u) { acc = fma(A[%s], %sB[%s]%s, acc); }\n"
                "    }\n"
                "    part[lid] = acc;\n"
                "    workgroupBarrier();\n"
                "    for (var s = 16u; s > 0u; s >>= 1u) {\n"
                "        if (lane < s) { part[lid] += part[lid + s]; }\n"
                "        workgroupBarrier();\n"
                "    }\n"
                "    if (lane == 0u && n < P.N) { let idx = P.c_off + bt * P.N + n; C[idx] = epilogue(part[lid], n, idx); }\n"
                "}\n",
            bases, a_index(false, true), F16_OPEN(cfg->b_f16, false), b_index(true, true), F16_CLOSE(cfg->b_f16));
    }
    return wgml_sbuf_take(&b);
}

/* C[b, m, n] = sum_k A[b, m, k] B[k, n] for a few rows (2 <= M <= cfg->gemv_rows <= 16):
   the GEMV's layout (a workgroup owns gemv_cols columns, its threads split K) with one
   accumulator per row, so the weight is read once for all rows, as a GEMV reads it. Rows past
   M read row M - 1 (no branch in the loop) and are not written. Partial sums meet four rows
   at a time in workgroup memory. */
char *wgml_gemv_rows_source(const wgml_gemm_config *cfg, int act)
{
    int R = cfg->gemv_rows, groups = cfg->gemv_cols / 4, slices = 256 / groups;
    /* one row (M = 1) with A aligned: A read as vec4s along k, 4 k and four weight loads per
       step. On the H100, medians over the session's runs against the GEMV kernel: +15% at
       K = N = 4096, +8% at 1536, equal at 8192; for 16 rows (K = N = 4096, 8192) the
       float-at-a-time form below was 16-28% faster (docs/MEASUREMENTS.md) */
    bool va = cfg->vec_a && R == 1;
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "// generated small-M GEMV: up to %d rows, %d columns per workgroup%s%s\n", R, cfg->gemv_cols,
                  cfg->vec_b ? ", B vec4" : "", va ? ", A vec4 along k" : "");
    put_header(&b, va, cfg->vec_b, cfg->b_f16);
    put_epilogue_fn(&b, act);
    put_load_b(&b, cfg->vec_b, cfg->b_f16);
    wgml_sbuf_put(&b, "var<workgroup> part: array<vec4<f32>, 1024>; // [4 rows][256 threads]\n"
            "@compute @workgroup_size(256)\n"
            "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
            "%s"
            "    let n0 = (wg.x + wg.y * P.gx) * %du;\n"
            "    if (n0 >= P.N) { return; }\n"
            "    let c = lid %% %du;\n"
            "    let ks = lid / %du;\n"
            "    let n = n0 + c * 4u;\n",
        bases, cfg->gemv_cols, groups, groups);
    for (int m = 0; m < R; m++)
        wgml_sbuf_put(&b, "    var acc%d = vec4<f32>(0.0);\n    let a%d = (a_base + min(%du, P.M - 1u) * P.lda)%s;\n",
                      m, m, m, va ? " / 4u" : "");
    if (va) {
        /* thread ks takes the quads of k ks, ks + slices, ...; K % 4 == 0 */
        wgml_sbuf_put(&b, "    if (n < P.N) {\n"
                "        for (var q = ks; q < P.K / 4u; q += %du) {\n"
                "            let k = q * 4u;\n"
                "            let b0 = load_b(k, n, b_base);\n"
                "            let b1 = load_b(k + 1u, n, b_base);\n"
                "            let b2 = load_b(k + 2u, n, b_base);\n"
                "            let b3 = load_b(k + 3u, n, b_base);\n",
            slices);
        for (int m = 0; m < R; m++)
            wgml_sbuf_put(&b, "            { let a = A[a%d + q]; acc%d = fma(vec4<f32>(a.w), b3, fma(vec4<f32>(a.z), b2, "
                              "fma(vec4<f32>(a.y), b1, fma(vec4<f32>(a.x), b0, acc%d)))); }\n", m, m, m);
        wgml_sbuf_put(&b, "        }\n    }\n");
    } else {
        /* two k per step: two weight loads in flight per thread */
        wgml_sbuf_put(&b, "    if (n < P.N) {\n"
                "        var k = ks;\n"
                "        for (; k + %du < P.K; k += %du) {\n"
                "            let b0 = load_b(k, n, b_base);\n"
                "            let b1 = load_b(k + %du, n, b_base);\n",
            slices, 2 * slices, slices);
        for (int m = 0; m < R; m++)
            wgml_sbuf_put(&b, "            acc%d = fma(vec4<f32>(A[a%d + k]), b0, fma(vec4<f32>(A[a%d + k + %du]), b1, acc%d));\n",
                          m, m, m, slices, m);
        wgml_sbuf_put(&b, "        }\n"
                "        if (k < P.K) {\n"
                "            let b0 = load_b(k, n, b_base);\n");
        for (int m = 0; m < R; m++) wgml_sbuf_put(&b, "            acc%d = fma(vec4<f32>(A[a%d + k]), b0, acc%d);\n", m, m, m);
        wgml_sbuf_put(&b, "        }\n    }\n");
    }
    for (int m0 = 0; m0 < R; m0 += 4) {
        int q = R - m0 < 4 ? R - m0 : 4;
        for (int r = 0; r < q; r++) wgml_sbuf_put(&b, "    part[%du + lid] = acc%d;\n", r * 256, m0 + r);
        wgml_sbuf_put(&b, "    workgroupBarrier();\n"
                "    for (var s = 128u; s >= %du; s >>= 1u) {\n"
                "        if (lid < s) {\n", groups);
        for (int r = 0; r < q; r++) wgml_sbuf_put(&b, "            part[%du + lid] += part[%du + lid + s];\n", r * 256, r * 256);
        wgml_sbuf_put(&b, "        }\n        workgroupBarrier();\n    }\n    if (lid < %du) {\n", groups);
        for (int r = 0; r < q; r++)
            wgml_sbuf_put(&b,
                "        if (%du < P.M) {\n"
                "            let r = part[%du + lid];\n"
                "            let cb = P.c_off + (bt * P.M + %du) * P.N;\n"
                "            for (var q = 0u; q < 4u; q++) {\n"
                "                if (n + q < P.N) { C[cb + n + q] = epilogue(r[q], n + q, cb + n + q); }\n"
                "            }\n"
                "        }\n",
                m0 + r, r * 256, m0 + r);
        wgml_sbuf_put(&b, "    }\n");
    }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}



/* The CPU GEMM's step at k = `ku` once a0 .. a<RM-1> hold A(m0 + i, ku): B's values for the
   lane's columns (b<j>, a vec4 of 4 columns), and the FMAs. With B^T read in vec4s along k,
   bk<j>_<c> hold column c's 4 k from ku - u on and u picks the component. */
static void put_cpu_b_fma(wgml_sbuf *b, const wgml_gemm_config *cfg, bool tb, const char *ku, int u)
{
    int RM = cfg->cpu_rows, NV = cfg->cpu_cols / 4;
    const char *bo = F16_OPEN(cfg->b_f16, false), *bov = F16_OPEN(cfg->b_f16, true), *bc = F16_CLOSE(cfg->b_f16);
    for (int j = 0; j < NV; j++) {
        if (!tb && cfg->vec_b)
            wgml_sbuf_put(b, "            let b%d = %sB[(rb%d + %s * P.ldb) / 4u]%s;\n", j, bov, j, ku, bc);
        else if (!tb) {
            wgml_sbuf_put(b, "            let b%d = vec4<f32>(", j);
            for (int c = 0; c < 4; c++) wgml_sbuf_put(b, "%s%sB[rb%d_%d + %s * P.ldb]%s", c ? ", " : "", bo, j, c, ku, bc);
            wgml_sbuf_put(b, ");\n");
        } else if (u >= 0)
            wgml_sbuf_put(b, "            let b%d = vec4<f32>(bk%d_0.%c, bk%d_1.%c, bk%d_2.%c, bk%d_3.%c);\n", j, j, "xyzw"[u], j,
                          "xyzw"[u], j, "xyzw"[u], j, "xyzw"[u]);
        else {
            wgml_sbuf_put(b, "            let b%d = vec4<f32>(", j);
            for (int c = 0; c < 4; c++) wgml_sbuf_put(b, "%s%sB[rb%d_%d + %s]%s", c ? ", " : "", bo, j, c, ku, bc);
            wgml_sbuf_put(b, ");\n");
        }
    }
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < NV; j++) wgml_sbuf_put(b, "            c%d_%d = fma(vec4<f32>(a%d), b%d, c%d_%d);\n", i, j, i, j, i, j);
}

/* B^T read in vec4s along k: column c of vec4 j at k .. k + 3 into bk<j>_<c> */
static void put_cpu_bk(wgml_sbuf *b, const wgml_gemm_config *cfg, const char *k)
{
    for (int j = 0; j < cfg->cpu_cols / 4; j++)
        for (int c = 0; c < 4; c++)
            wgml_sbuf_put(b, "        let bk%d_%d = %sB[(rb%d_%d + %s) / 4u]%s;\n", j, c, F16_OPEN(cfg->b_f16, true), j, c, k,
                          F16_CLOSE(cfg->b_f16));
}

/* C = A B on a CPU adapter (lavapipe). lavapipe runs a workgroup's invocations as SIMD loops
   of 8 lanes and fetches every storage-buffer element lane by lane (a loop with a bounds
   check per lane and component, whatever the address), so a load costs about as much as the
   eight FMAs it could feed many times over: the kernel is built to load little per FMA.
   - No workgroup memory and no barriers (each barrier splits the shader; workgroup memory is
     fetched lane by lane too).
   - Each invocation owns cpu_rows x cpu_cols outputs: per k it loads cpu_cols / 4 vec4s of B
     (its own columns, cpu_lanes * 4 apart, so neighbouring lanes read neighbouring columns)
     and uses each for cpu_rows FMAs.
   - Every lane of a workgroup has the same rows, so A's values are the same for all lanes:
     with subgroups of 8 (cpu_subgroups; checked at run time, else the plain loop), lane s
     loads A's values for k + 4s .. (or rows m0 + 4s .. for A^T) and the others take them by
     subgroupShuffle / subgroupBroadcast, one load for 8 lanes' worth of k.
   K is walked 4 at a time (vec4 reads of an operand bound as vec4s and contiguous along k),
   then one at a time. Rows and columns past the matrix read the last one and are not
   written, so the loops have no branches. cpu_rows is a multiple of 4. */
char *wgml_gemm_cpu_source(const wgml_gemm_config *cfg, bool ta, bool tb, int act)
{
    int RM = cfg->cpu_rows, W = cfg->cpu_lanes, NV = cfg->cpu_cols / 4;
    bool va = cfg->vec_a, vb = cfg->vec_b, sg = cfg->cpu_subgroups;
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "// generated CPU GEMM: %d lanes, %dx%d per lane, A%s%s B%s%s%s\n", W, RM, 4 * NV, ta ? "^T" : "",
                  va ? " vec4" : "", tb ? "^T" : "", vb ? " vec4" : "", sg ? ", A by subgroup broadcast" : "");
    put_header(&b, va, vb, cfg->b_f16);
    put_epilogue_fn(&b, act);
    wgml_sbuf_put(&b, "@compute @workgroup_size(%d)\n"
            "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32%s) {\n"
            "    let tiles_n = (P.N + %du) / %du;\n"
            "    let tile = wg.x + wg.y * P.gx;\n"
            "    let m0 = (tile / tiles_n) * %du;\n"
            "    let n0 = (tile %% tiles_n) * %du;\n"
            "    if (m0 >= P.M) { return; }\n",
        W, sg ? ", @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sl: u32" : "",
        W * 4 * NV - 1, W * 4 * NV, RM, W * 4 * NV);
    put_bases(&b);
    /* where each row's (column's) reads start, clamped into the matrix */
    for (int i = 0; i < RM; i++) {
        if (!ta) wgml_sbuf_put(&b, "    let ra%d = a_base + min(m0 + %du, P.M - 1u) * P.lda;\n", i, i);
        else if (!va) wgml_sbuf_put(&b, "    let ra%d = a_base + min(m0 + %du, P.M - 1u);\n", i, i);
        else if (i % 4 == 0) /* M % 4 == 0: the vec4 of rows m0 + i .. + 3 */
            wgml_sbuf_put(&b, "    let ra%d = a_base + min(m0 + %du, P.M - 4u);\n", i, i);
    }
    for (int j = 0; j < NV; j++) {
        wgml_sbuf_put(&b, "    let nc%d = n0 + (%du + lid) * 4u;\n", j, j * W);
        if (!tb && vb) /* N % 4 == 0: a vec4 that starts inside is wholly inside */
            wgml_sbuf_put(&b, "    let rb%d = b_base + min(nc%d, P.N - 4u);\n", j, j);
        else
            for (int c = 0; c < 4; c++)
                wgml_sbuf_put(&b, "    let rb%d_%d = b_base + min(nc%d + %du, P.N - 1u)%s;\n", j, c, j, c, tb ? " * P.ldb" : "");
    }
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < NV; j++) wgml_sbuf_put(&b, "    var c%d_%d = vec4<f32>(0.0);\n", i, j);
    wgml_sbuf_put(&b, "    var k = 0u;\n");
    if (sg) {
        /* KS k a step: A in vec4s along k: lane s holds k + 4s .. + 3 of each row (32 k); in
           scalars: k + s (8 k); A^T: 4 k, each a load of rows m0 + 4s .. + 3 per 32 rows
           (vec4s) or m0 + s per 8 (scalars) */
        int KS = ta ? 4 : va ? 32 : 8;
        int groups = ta ? (va ? (RM + 31) / 32 : (RM + 7) / 8) : 0;
        for (int g = 0; g < groups; g++) {
            if (va) wgml_sbuf_put(&b, "    let mq%d = a_base + min(m0 + %du + 4u * min(sl, %du), P.M - 4u);\n", g, 32 * g,
                                  (RM - 32 * g >= 32 ? 32 : RM - 32 * g) / 4 - 1);
            else wgml_sbuf_put(&b, "    let mq%d = a_base + min(m0 + %du + sl, P.M - 1u);\n", g, 8 * g);
        }
        wgml_sbuf_put(&b, "    if (sg_size == 8u) {\n    for (; k + %du < P.K; k += %du) {\n", KS - 1, KS);
        if (!ta)
            for (int i = 0; i < RM; i++)
                wgml_sbuf_put(&b, va ? "        let al%d = A[(ra%d + k) / 4u + sl];\n" : "        let al%d = A[ra%d + k + sl];\n", i, i);
        if (!ta) {
            /* the 8 lanes' values one after another, lane q's in trip q (a loop rather than
               unrolled: the kernel stays small enough to compile quickly) */
            int per = va ? 4 : 1;
            wgml_sbuf_put(&b, "        for (var q = 0u; q < 8u; q++) {\n");
            for (int i = 0; i < RM; i++) wgml_sbuf_put(&b, "        let aq%d = subgroupShuffle(al%d, q);\n", i, i);
            if (tb && vb) put_cpu_bk(&b, cfg, "k + q * 4u");
            for (int u = 0; u < per; u++) {
                wgml_sbuf_put(&b, "        {\n            let ku = k + q * %du + %du;\n", per, u);
                for (int i = 0; i < RM; i++) {
                    if (va) wgml_sbuf_put(&b, "            let a%d = aq%d.%c;\n", i, i, "xyzw"[u]);
                    else wgml_sbuf_put(&b, "            let a%d = aq%d;\n", i, i);
                }
                put_cpu_b_fma(&b, cfg, tb, "ku", tb && vb ? u : -1);
                wgml_sbuf_put(&b, "        }\n");
            }
            wgml_sbuf_put(&b, "        }\n");
        }
        for (int kk = 0; kk < (ta ? KS : 0); kk++) {
            if (tb && vb && kk % 4 == 0) { /* B^T's vec4s of these 4 k, in a scope of their own */
                char k4[32];
                snprintf(k4, sizeof k4, "k + %du", kk);
                wgml_sbuf_put(&b, "        {\n");
                put_cpu_bk(&b, cfg, k4);
            }
            if (!ta && va && kk % 4 == 0)
                for (int i = 0; i < RM; i++)
                    wgml_sbuf_put(&b, "        let aq%d_%d = subgroupBroadcast(al%d, %du);\n", i, kk / 4, i, kk / 4);
            wgml_sbuf_put(&b, "        {\n            let ku = k + %du;\n", kk);
            for (int g = 0; g < groups; g++)
                wgml_sbuf_put(&b, va ? "            let al%d = A[(mq%d + ku * P.lda) / 4u];\n" : "            let al%d = A[mq%d + ku * P.lda];\n", g, g);
            for (int i = 0; i < RM; i++) {
                if (!ta && va)
                    wgml_sbuf_put(&b, "            let a%d = aq%d_%d.%c;\n", i, i, kk / 4, "xyzw"[kk % 4]);
                else if (!ta)
                    wgml_sbuf_put(&b, "            let a%d = subgroupBroadcast(al%d, %du);\n", i, i, kk);
                else if (va) {
                    if (i % 4 == 0) wgml_sbuf_put(&b, "            let aq%d = subgroupBroadcast(al%d, %du);\n", i / 4, i / 32, (i % 32) / 4);
                    wgml_sbuf_put(&b, "            let a%d = aq%d.%c;\n", i, i / 4, "xyzw"[i % 4]);
                } else
                    wgml_sbuf_put(&b, "            let a%d = subgroupBroadcast(al%d, %du);\n", i, i / 8, i % 8);
            }
            put_cpu_b_fma(&b, cfg, tb, "ku", tb && vb ? kk % 4 : -1);
            wgml_sbuf_put(&b, "        }\n");
            if (tb && vb && kk % 4 == 3) wgml_sbuf_put(&b, "        }\n");
        }
        wgml_sbuf_put(&b, "    }\n    }\n");
    }
    /* 4 k a step; then one a step, where K need not be a multiple of 4 (an operand read as
       vec4s along k makes it one) */
    bool tail = !(!ta && va) && !(tb && vb);
    for (int pass = 0; pass < (tail ? 2 : 1); pass++) {
        int U = pass == 0 ? 4 : 1;
        if (U == 4) wgml_sbuf_put(&b, "    for (; k + 3u < P.K; k += 4u) {\n");
        else wgml_sbuf_put(&b, "    for (; k < P.K; k++) {\n");
        if (U == 4 && !ta)
            for (int i = 0; i < RM; i++) {
                if (va) wgml_sbuf_put(&b, "        let ak%d = A[(ra%d + k) / 4u];\n", i, i);
                else wgml_sbuf_put(&b, "        let ak%d = vec4<f32>(A[ra%d + k], A[ra%d + k + 1u], A[ra%d + k + 2u], A[ra%d + k + 3u]);\n",
                                   i, i, i, i, i);
            }
        if (U == 4 && tb && vb) put_cpu_bk(&b, cfg, "k");
        for (int u = 0; u < U; u++) {
            wgml_sbuf_put(&b, "        {\n            let ku = k + %du;\n", u);
            for (int i = 0; i < RM; i++) {
                if (!ta && U == 4) wgml_sbuf_put(&b, "            let a%d = ak%d.%c;\n", i, i, "xyzw"[u]);
                else if (!ta) wgml_sbuf_put(&b, "            let a%d = A[ra%d + ku];\n", i, i);
                else if (va) {
                    if (i % 4 == 0) wgml_sbuf_put(&b, "            let av%d = A[(ra%d + ku * P.lda) / 4u];\n", i / 4, i);
                    wgml_sbuf_put(&b, "            let a%d = av%d.%c;\n", i, i / 4, "xyzw"[i % 4]);
                } else wgml_sbuf_put(&b, "            let a%d = A[ra%d + ku * P.lda];\n", i, i);
            }
            put_cpu_b_fma(&b, cfg, tb, "ku", tb && vb ? u : -1);
            wgml_sbuf_put(&b, "        }\n");
        }
        wgml_sbuf_put(&b, "    }\n");
    }
    wgml_sbuf_put(&b, "    let cb = P.c_off + bt * P.M * P.N;\n");
    for (int i = 0; i < RM; i++) {
        wgml_sbuf_put(&b, "    if (m0 + %du < P.M) {\n        let m = m0 + %du;\n", i, i);
        for (int j = 0; j < NV; j++)
            for (int c = 0; c < 4; c++)
                wgml_sbuf_put(&b, "        if (nc%d + %du < P.N) { let idx = cb + m * P.N + nc%d + %du; C[idx] = epilogue(c%d_%d.%c, nc%d + %du, idx); }\n",
                              j, c, j, c, i, j, "xyzw"[c], j, c);
        wgml_sbuf_put(&b, "    }\n");
    }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}
