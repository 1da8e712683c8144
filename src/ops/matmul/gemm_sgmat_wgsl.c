/*
 * The GEMM on subgroup matrices: WGSL for one config (gemm_sgmat_wgsl.h).
 *
 * A workgroup of sg_m x sg_n subgroups owns a tile of the output; each subgroup holds
 * frag_m x frag_n result fragments (sm_m x sm_n, f32) in variables of their own, and the
 * generator unrolls every loop over fragments and K steps, so nothing is an array indexed at
 * run time (on the H100 such arrays spilled: 30 TFLOP/s against 151 unrolled). Slices of K,
 * bk deep, are staged in workgroup memory as f16, each operand in its stored layout (rows
 * along its contiguous dimension, padded by 8 halves against bank conflicts): a transposed
 * operand is then read by the matrix loads as column-major instead of being transposed while
 * staged. Global reads go a vector (4 or 8 elements) or an element at a time; f32 operands
 * are converted as they are read. Outside the matrices the staging holds zeros, so edge tiles
 * and a K that is no multiple of bk need no other care in the math. With prefetch (always
 * with two staging buffers) the next slice is read into registers before the math on the
 * current one and stored after it (one barrier a slice with two buffers, two with one);
 * past the last slice the guards read zeros, so the prefetch has no branch;
 * without, each slice is read and stored at the top of its step.
 *
 * Loading the fragments straight from A and B in memory instead (no staging, no barriers)
 * ran 2-4 times slower on an H200 (docs/MEASUREMENTS.md), so every config stages.
 *
 * Results leave through a per-subgroup f32 fragment in workgroup memory, from which the
 * lanes apply the epilogue and write the elements inside the matrix (with c_vec, a run of 8
 * of a row a lane, as 16-byte vectors); whole interior tiles that need no epilogue at run time
 * are stored by the matrix units straight into C. (Without that path the rest of the kernel
 * ran slower on an H200, the results through the block included: docs/MEASUREMENTS.md.)
 */
#include "ops/matmul/gemm_sgmat_wgsl.h"

#include <stdio.h>

#include "core/sbuf.h"
#include "ops/matmul/gemm_bindings.h"

#define STAGE_PAD 8 /* halves of padding per staged row (16 bytes) */
#define STR(x) #x
#define XSTR(x) STR(x)
#define GROUPS_TEXT XSTR(WGML_SGMAT_MAX_ABS_GROUPS)

/* One operand as staged: rows x cols with cols along its contiguous dimension in memory. */
typedef struct operand {
    const char *name, *stage, *reg; /* "A", "As", "xa" */
    const char *base, *ld;          /* WGSL: the batch matrix's start, the row stride */
    const char *row0, *row_lim;     /* the rows' tile origin and limit ("m0", "P.M") */
    const char *col0, *col_lim;
    int rows, cols, stride;         /* the staged tile; stride = cols + STAGE_PAD */
    int vec;                        /* 0, 4 or 8 */
    bool f16;
    bool hilo; /* f32 kept in registers, staged as hi in `stage` and lo in `lo_stage`, scaled by `mul` */
    const char *lo_stage, *mul;
    const char *nonfinite; /* hilo: WGSL's flag that the operand holds an infinity or NaN */
} operand;

/* elements a thread moves per item: the vector width, or 4 one at a time */
static int width_of(const operand *o) { return o->vec ? o->vec : 4; }

static int items_of(const operand *o, int threads) { return (o->rows * (o->cols / width_of(o)) + threads - 1) / threads; }

static int stage_elems(const operand *o) { return o->rows * o->stride; }

/* The global array's element type as bound */
static const char *bound_type(const operand *o)
{
    if (!o->vec) return o->f16 ? "f16" : "f32";
    if (o->f16) return o->vec == 8 ? "vec4<u32>" : "vec2<u32>";
    return "vec4<f32>";
}

static void put_item_head(wgml_sbuf *b, const operand *o, int r, int threads)
{
    int w = width_of(o), per_row = o->cols / w, total = o->rows * per_row;
    wgml_sbuf_put(b, "        {\n            let e = li + %du;\n", r * threads);
    if ((r + 1) * threads > total) wgml_sbuf_put(b, "            if (e < %du) {\n", total);
    wgml_sbuf_put(b, "            let row = e / %du;\n            let col = (e %% %du) * %du;\n", per_row, per_row, w);
}

static void put_item_tail(wgml_sbuf *b, const operand *o, int r, int threads)
{
    int w = width_of(o), total = o->rows * (o->cols / w);
    if ((r + 1) * threads > total) wgml_sbuf_put(b, "            }\n");
    wgml_sbuf_put(b, "        }\n");
}

/* The registers an item's 4 elements wait in until they are staged */
static const char *reg_type(const operand *o) { return o->hilo ? "vec4<f32>" : "vec4<f16>"; }

/* Reads this thread's items of the slice at k0 into its registers (zeros outside). */
static void put_load(wgml_sbuf *b, const operand *o, int threads)
{
    int w = width_of(o), items = (o->rows * (o->cols / w) + threads - 1) / threads;
    for (int r = 0; r < items; r++) {
        put_item_head(b, o, r, threads);
        for (int g = 0; g < w / 4; g++) wgml_sbuf_put(b, "            %s%d_%d = %s();\n", o->reg, r, g, reg_type(o));
        wgml_sbuf_put(b, "            let gr = %s + row;\n            let gc = %s + col;\n", o->row0, o->col0);
        wgml_sbuf_put(b, "            if (gr < %s && gc < %s) {\n                let i = %s + gr * %s + gc;\n", o->row_lim,
                      o->col_lim, o->base, o->ld);
        if (o->vec && o->f16) {
            /* halves in u32 words: two a word */
            wgml_sbuf_put(b, "                let v = %s[i / %du];\n", o->name, w);
            for (int g = 0; g < w / 4; g++)
                wgml_sbuf_put(b, "                %s%d_%d = vec4<f16>(bitcast<vec2<f16>>(v.%c), bitcast<vec2<f16>>(v.%c));\n",
                              o->reg, r, g, "xz"[g], "yw"[g]);
        } else if (o->vec) {
            for (int g = 0; g < w / 4; g++)
                wgml_sbuf_put(b, "                %s%d_%d = %s(%s[i / 4u + %du]);\n", o->reg, r, g, reg_type(o), o->name, g);
        } else {
            /* one at a time: each element inside the matrix on its own */
            const char *cv = o->hilo ? "" : "f16";
            wgml_sbuf_put(b, "                %s%d_0.x = %s(%s[i]);\n", o->reg, r, cv, o->name);
            for (int c = 1; c < 4; c++)
                wgml_sbuf_put(b, "                if (gc + %du < %s) { %s%d_0.%c = %s(%s[i + %du]); }\n", c, o->col_lim,
                              o->reg, r, "xyzw"[c], cv, o->name, c);
        }
        wgml_sbuf_put(b, "            }\n");
        put_item_tail(b, o, r, threads);
    }
}

/* put_store's items; keep_nonfinite: the hilo cut passes an infinity or NaN on in hi, lo 0 */
static void put_store_items(wgml_sbuf *b, const operand *o, int threads, const char *stage_base, bool keep_nonfinite)
{
    int w = width_of(o), items = (o->rows * (o->cols / w) + threads - 1) / threads;
    for (int r = 0; r < items; r++) {
        put_item_head(b, o, r, threads);
        wgml_sbuf_put(b, "            let o = %s + row * %du + col;\n", stage_base, o->stride);
        /* the scaled value's halves: hi its leading 11 bits (cut in f32, where a compiler cannot
           take f32(f16(v)) for v, as lavapipe's did), lo what hi missed */
        for (int g = 0; g < w / 4 && o->hilo; g++) {
            char cut[96], rest[32];
            snprintf(cut, sizeof cut, "bitcast<vec4<f32>>(bitcast<vec4<u32>>(v%d) & vec4<u32>(0xffffe000u))", g);
            snprintf(rest, sizeof rest, "v%d - t%d", g, g);
            wgml_sbuf_put(b, "            let v%d = %s%d_%d * %s;\n", g, o->reg, r, g, o->mul);
            if (keep_nonfinite)
                wgml_sbuf_put(b, "            let n%d = (bitcast<vec4<u32>>(v%d) & vec4<u32>(0x7f800000u)) == vec4<u32>(0x7f800000u);\n"
                                 "            let t%d = select(%s, v%d, n%d);\n",
                              g, g, g, cut, g, g);
            else wgml_sbuf_put(b, "            let t%d = %s;\n", g, cut);
            wgml_sbuf_put(b, "            let h%d = vec4<f16>(t%d);\n", g, g);
            if (keep_nonfinite) wgml_sbuf_put(b, "            let l%d = vec4<f16>(select(%s, vec4<f32>(), n%d));\n", g, rest, g);
            else wgml_sbuf_put(b, "            let l%d = vec4<f16>(%s);\n", g, rest);
        }
        for (int c = 0; c < w; c++) {
            if (o->hilo)
                wgml_sbuf_put(b, "            %s[o + %du] = h%d.%c;\n            %s[o + %du] = l%d.%c;\n", o->stage, c, c / 4,
                              "xyzw"[c % 4], o->lo_stage, c, c / 4, "xyzw"[c % 4]);
            else wgml_sbuf_put(b, "            %s[o + %du] = %s%d_%d.%c;\n", o->stage, c, o->reg, r, c / 4, "xyzw"[c % 4]);
        }
        put_item_tail(b, o, r, threads);
    }
}

/* Stores the registers of put_load into the staging buffer that starts at `stage_base`. hilo:
   the selects that keep an infinity or NaN only where the maxima found one (a branch the
   whole workgroup takes alike: in every item they cost ~5% of an f32split training step) */
static void put_store(wgml_sbuf *b, const operand *o, int threads, const char *stage_base)
{
    if (!o->hilo) {
        put_store_items(b, o, threads, stage_base, false);
        return;
    }
    wgml_sbuf_put(b, "        if (%s) {\n", o->nonfinite);
    put_store_items(b, o, threads, stage_base, true);
    wgml_sbuf_put(b, "        } else {\n");
    put_store_items(b, o, threads, stage_base, false);
    wgml_sbuf_put(b, "        }\n");
}

int wgml_sgmat_vec_width(int64_t off, int64_t ld, int64_t bs0, int64_t bs1, int64_t extent)
{
    for (int w = 8; w >= 4; w /= 2)
        if (off % w == 0 && ld % w == 0 && bs0 % w == 0 && bs1 % w == 0 && extent % w == 0) return w;
    return 0;
}

static void operands(const wgml_sgmat_config *c, bool ta, bool tb, operand *A, operand *B)
{
    int BM = wgml_sgmat_tile_m(c), BN = wgml_sgmat_tile_n(c), BK = c->bk;
    *A = (operand){"A", "As", "xa", "a_base", "P.lda", "m0", "P.M", "k0", "P.K", BM, BK, 0, c->a_vec, c->a_f16, c->hilo, "Al", "sa", "nfa"};
    if (ta) A->row0 = "k0", A->row_lim = "P.K", A->col0 = "m0", A->col_lim = "P.M", A->rows = BK, A->cols = BM;
    *B = (operand){"B", "Bs", "xb", "b_base", "P.ldb", "k0", "P.K", "n0", "P.N", BK, BN, 0, c->b_vec, c->b_f16, c->hilo, "Bl", "sb", "nfb"};
    if (tb) B->row0 = "n0", B->row_lim = "P.N", B->col0 = "k0", B->col_lim = "P.K", B->rows = BN, B->cols = BK;
    A->stride = A->cols + STAGE_PAD;
    B->stride = B->cols + STAGE_PAD;
}

/* the result blocks in workgroup memory: one a subgroup of a round */
static int cs_slots(const wgml_sgmat_config *c) { return c->sg_m * c->sg_n / (c->cs_rounds > 1 ? c->cs_rounds : 1); }

uint32_t wgml_sgmat_workgroup_bytes(const wgml_sgmat_config *c, bool ta, bool tb)
{
    operand A, B;
    operands(c, ta, tb, &A, &B);
    uint32_t stages = (c->double_buffer ? 2 : 1) * (c->hilo ? 2 : 1);
    return stages * (uint32_t)(stage_elems(&A) + stage_elems(&B)) * 2 +
           (uint32_t)(cs_slots(c) * c->sm_m * c->sm_n) * 4 + (c->hilo ? 16u : 0u);
}

const char *wgml_sgmat_config_problem(const wgml_sgmat_config *c)
{
    if (c->sm_m < 1 || c->sm_n < 1 || c->sm_k < 1 || c->sm_m > 64 || c->sm_n > 64 || c->sm_k > 64)
        return "no subgroup-matrix shape";
    if (c->subgroup_size < 4 || c->subgroup_size > 128) return "subgroup size out of range";
    if (c->sg_m < 1 || c->sg_n < 1 || c->sg_m * c->sg_n * c->subgroup_size > 1024) return "subgroups per workgroup";
    if (c->frag_m < 1 || c->frag_n < 1 || c->frag_m > 8 || c->frag_n > 8) return "fragments per subgroup (1..8)";
    if (c->bk < c->sm_k || c->bk % c->sm_k || c->bk % 8 || c->bk > 256) return "K depth (a multiple of sm_k and 8)";
    if (wgml_sgmat_tile_m(c) % 8 || wgml_sgmat_tile_n(c) % 8) return "tile not a multiple of 8";
    if ((c->sm_m * c->sm_n) % c->subgroup_size) return "fragment not a whole number of elements per lane";
    if ((c->a_vec && c->a_vec != 4 && c->a_vec != 8) || (c->b_vec && c->b_vec != 4 && c->b_vec != 8))
        return "vector width (0, 4 or 8)";
    if (c->c_vec && (c->sm_m * c->sm_n != 8 * c->subgroup_size || c->sm_n % 8)) return "vector results (8 a lane)";
    if (c->cs_rounds < 0 || c->cs_rounds > 4 || (c->cs_rounds > 1 && (c->sg_m * c->sg_n) % c->cs_rounds))
        return "result rounds (0 to 4, dividing the subgroups)";
    if (c->hilo && (c->a_f16 || c->b_f16)) return "hi and lo halves of operands stored as halves";
    return NULL;
}

wgml_sgmat_config wgml_sgmat_choose(int sm_m, int sm_n, int sm_k, int subgroup_size, int64_t M, int64_t N, int64_t batch,
                                    bool ta, bool tb, uint32_t wg_bytes_limit)
{
    /* subgroups m x n, fragments m x n (in 16x16 units), prefetch: the winners of the H200
       sweeps (docs/MEASUREMENTS.md). With the next slice prefetched into registers, 128x256
       tiles won every shape whose grid of them still fills the GPU (80 workgroups or more:
       4096^3 198-225 TFLOP/s with halves, against 159-181 staged at the top of each step; the
       GPT's K = 384 shapes 107-108 against 99-103), 128x128 below that (a weight gradient's
       few tiles over split K: 144 against 128) and ties where N = 384 leaves half a tile
       column idle (128x128 141.5, 128x256 139.2). Operands in halves or f32 alike (f32, prefetched:
       4096^3 110.8 against 105.0). The rest fit smaller workgroup memories. */
    static const int layouts[][5] = {{4, 4, 2, 4, 1}, {4, 4, 2, 2, 1}, {2, 4, 2, 2, 0}, {2, 2, 2, 2, 0}};
    /* and 128x128 where 256-wide tiles leave an eighth or more of their columns idle (N = 384:
       a quarter, and its edge tiles leave through workgroup memory): the GPT step's N = 384
       GEMMs on an H200, halves, TFLOP/s against 128x256: 16384 x 384 x 384 A.B^T 52.8 / 41.0,
       A.B with a bias 53.7 / 39.1, 384 x 384 x 16384 A^T.B split 32 ways 47.3 / 32.4, K = 1536
       107.8-109.5 / 91.1-96.4 (one process a tile; processes differed by up to 16%) */
    int64_t wide = (N + 255) / 256 * 256;
    int first = ((M + 127) / 128) * ((N + 255) / 256) * (batch > 0 ? batch : 1) >= 80 && (wide - N) * 8 < wide ? 0 : 1;
    wgml_sgmat_config c = {0};
    /* narrower matrices than 16 take more fragments for the same tile */
    int widen_m = sm_m < 16 ? 16 / sm_m : 1, widen_n = sm_n < 16 ? 16 / sm_n : 1;
    /* N up to 768 (GPT-2 small's width) where 128x256 tiles would fill the GPU: 128x128 tiles
       with their results in two rounds (half the result block), which leaves the room for
       deeper staging: K slices of 64 for A.B^T, two buffers of 32 for A.B (H200, halves,
       8192 x 768 x 3072: A.B^T 189.1 TFLOP/s against 148.4, A.B 178.1 against 158.7;
       docs/MEASUREMENTS.md, "workgroup memory and registers") */
    if (first == 0 && N <= 768 && !ta) {
        c = (wgml_sgmat_config){.sm_m = sm_m, .sm_n = sm_n, .sm_k = sm_k, .subgroup_size = subgroup_size, .sg_m = 4,
                                .sg_n = 4, .frag_m = 2 * widen_m, .frag_n = 2 * widen_n, .bk = tb ? 64 : 32,
                                .double_buffer = !tb, .prefetch = tb, .a_vec = 8, .b_vec = 8, .cs_rounds = 2};
        if (c.bk < sm_k) c.bk = sm_k;
        if (!wgml_sgmat_config_problem(&c) && wgml_sgmat_workgroup_bytes(&c, ta, tb) <= wg_bytes_limit) return c;
    }
    for (int i = first; i < 4; i++) {
        c = (wgml_sgmat_config){.sm_m = sm_m, .sm_n = sm_n, .sm_k = sm_k, .subgroup_size = subgroup_size,
                                .sg_m = layouts[i][0], .sg_n = layouts[i][1], .frag_m = layouts[i][2] * widen_m,
                                .frag_n = layouts[i][3] * widen_n, .bk = sm_k > 32 ? sm_k : 32,
                                .prefetch = layouts[i][4], .a_vec = 8, .b_vec = 8};
        if (!wgml_sgmat_config_problem(&c) && wgml_sgmat_workgroup_bytes(&c, ta, tb) <= wg_bytes_limit) break;
    }
    return c;
}

wgml_sgmat_config wgml_sgmat_choose_hilo(int sm_m, int sm_n, int sm_k, int subgroup_size, bool ta, bool tb,
                                         uint32_t wg_bytes_limit)
{
    /* sg_m, sg_n, frag_m, frag_n (16x16 units), bk, result rounds; all prefetched. 4096^3 A.B
       with hi and lo: 63.7, 61.0 and 35.7 TFLOP/s (the first, third and fifth); 8192 x 3072 x
       768 58.0 with the first. The same in two result rounds fit where a transposed B's
       staging does not. */
    static const int layouts[][6] = {{4, 4, 2, 4, 16, 0}, {4, 4, 2, 4, 16, 2}, {4, 2, 2, 4, 32, 0}, {4, 2, 2, 4, 32, 2},
                                     {2, 4, 2, 2, 32, 0}};
    int widen_m = sm_m < 16 ? 16 / sm_m : 1, widen_n = sm_n < 16 ? 16 / sm_n : 1;
    for (int i = 0; i < 5; i++) {
        wgml_sgmat_config c = {.sm_m = sm_m, .sm_n = sm_n, .sm_k = sm_k, .subgroup_size = subgroup_size,
                               .sg_m = layouts[i][0], .sg_n = layouts[i][1], .frag_m = layouts[i][2] * widen_m,
                               .frag_n = layouts[i][3] * widen_n, .bk = layouts[i][4] > sm_k ? layouts[i][4] : sm_k,
                               .prefetch = true, .a_vec = 8, .b_vec = 8, .cs_rounds = layouts[i][5], .hilo = true};
        if (!wgml_sgmat_config_problem(&c) && wgml_sgmat_workgroup_bytes(&c, ta, tb) <= wg_bytes_limit) return c;
    }
    return (wgml_sgmat_config){0};
}

bool wgml_sgmat_c_vec_fits(const wgml_sgmat_config *c, bool has_act, uint64_t N, uint64_t c_off)
{
    wgml_sgmat_config v = *c;
    v.c_vec = true;
    return N % 8 == 0 && c_off % 8 == 0 && (c->c_f16 || has_act) && !wgml_sgmat_config_problem(&v);
}

/* The left/right fragment loads: the staged tile read row- or column-major. The matrix
   builtins take the layout as a bool argument (col_major), the form Dawn's own tests use; this
   Dawn also takes it as a template argument. */
static void put_frag_load(wgml_sbuf *b, const char *var, const char *type, const char *stage, bool col_major,
                          const char *offset, int stride)
{
    wgml_sbuf_put(b, "        let %s = subgroupMatrixLoad<%s>(&%s, %s, %s, %du);\n", var, type, stage, offset,
                  col_major ? "true" : "false", stride);
}

/* The fragments of one K step (kk into the staged slice) from staging `stage` as l<pre><kk>_<i>
   (left) or r<pre><kk>_<j> (right) */
static void put_frag_loads(wgml_sbuf *b, const wgml_sgmat_config *c, bool left, bool trans, const operand *o,
                           const char *stage, const char *pre, int kk)
{
    int S = left ? c->sm_m : c->sm_n, F = left ? c->frag_m : c->frag_n;
    const char *buf = left ? "abuf" : "bbuf", *tile0 = left ? "sr" : "sc";
    char off[128], var[32];
    for (int i = 0; i < F; i++) {
        /* along the operand's contiguous dimension or across its rows */
        if (trans == left) snprintf(off, sizeof off, "%s + %du + %s + %du", buf, kk * o->stride, tile0, i * S);
        else snprintf(off, sizeof off, "%s + (%s + %du) * %du + %du", buf, tile0, i * S, o->stride, kk);
        snprintf(var, sizeof var, "%c%s%d_%d", left ? 'l' : 'r', pre, kk, i);
        put_frag_load(b, var, left ? "L" : "R", stage, trans, off, o->stride);
    }
}

static void put_products(wgml_sbuf *b, const wgml_sgmat_config *c, const char *lpre, const char *rpre, int kk)
{
    for (int i = 0; i < c->frag_m; i++)
        for (int j = 0; j < c->frag_n; j++)
            wgml_sbuf_put(b, "        c%d_%d = subgroupMatrixMultiplyAccumulate(l%s%d_%d, r%s%d_%d, c%d_%d);\n", i, j, lpre, kk, i,
                          rpre, kk, j, i, j);
}

/* One K step (sm_k deep, kk into the staged slice) of every fragment product; with hilo the
   three products, each operand's lo fragments loaded as the one before is done with */
static void put_k_step(wgml_sbuf *b, const wgml_sgmat_config *c, bool ta, bool tb, const operand *A, const operand *B,
                       int kk)
{
    put_frag_loads(b, c, true, ta, A, "As", "", kk);
    put_frag_loads(b, c, false, tb, B, "Bs", "", kk);
    put_products(b, c, "", "", kk);
    if (!c->hilo) return;
    put_frag_loads(b, c, true, ta, A, "Al", "lo", kk);
    put_products(b, c, "lo", "", kk);
    put_frag_loads(b, c, false, tb, B, "Bl", "lo", kk);
    put_products(b, c, "", "lo", kk);
}

/* act_x: this lane's X of fragment (i, j) into register set `set`, the elements the epilogue
   writes (0 outside the matrix) */
static void put_x_loads(wgml_sbuf *b, const wgml_sgmat_config *c, int i, int j, int set)
{
    int SM = c->sm_m, SN = c->sm_n;
    for (int q = 0; q < SM * SN / c->subgroup_size; q++)
        wgml_sbuf_put(b, "    {\n        let e = lane + %du;\n"
                         "        let m = m0 + sr + %du + e / %du;\n"
                         "        let n = n0 + sc + %du + e %% %du;\n"
                         "        x%d_%d = 0.0;\n"
                         "        if (m < P.M && n < P.N) { x%d_%d = f32(X[cb - P.c_off + P.x_off + m * P.N + n]); }\n"
                         "    }\n",
                      q * c->subgroup_size, i * SM, SN, j * SN, SN, set, q, set, q);
}

/* c_vec: this lane's run of 8 in fragment (i, j): row lane / (sm_n / 8), columns from
   (lane % (sm_n / 8)) * 8 */
static void put_run_origin(wgml_sbuf *b, const wgml_sgmat_config *c, int i, int j)
{
    int runs = c->sm_n / 8;
    wgml_sbuf_put(b, "        let m = m0 + sr + %du + lane / %du;\n"
                     "        let n = n0 + sc + %du + (lane %% %du) * 8u;\n",
                  i * c->sm_m, runs, j * c->sm_n, runs);
}

/* act_x with c_vec: X of this lane's run into register set `set` (0 outside the matrix) */
static void put_x_run_loads(wgml_sbuf *b, const wgml_sgmat_config *c, int i, int j, int set)
{
    wgml_sbuf_put(b, "    {\n");
    put_run_origin(b, c, i, j);
    for (int q = 0; q < 8; q++) wgml_sbuf_put(b, "        x%d_%d = 0.0;\n", set, q);
    wgml_sbuf_put(b, "        if (m < P.M && n < P.N) {\n            let xi = cb - P.c_off + P.x_off + m * P.N + n;\n");
    for (int q = 0; q < 8; q++) wgml_sbuf_put(b, "            x%d_%d = f32(X[xi + %du]);\n", set, q, q);
    wgml_sbuf_put(b, "        }\n    }\n");
}

char *wgml_sgmat_gemm_source(const wgml_sgmat_config *c, bool ta, bool tb, const char *act_wgsl)
{
    if (wgml_sgmat_config_problem(c)) return NULL;
    int BM = wgml_sgmat_tile_m(c), BN = wgml_sgmat_tile_n(c), BK = c->bk, NT = wgml_sgmat_threads(c);
    int SM = c->sm_m, SN = c->sm_n, SK = c->sm_k, FM = c->frag_m, FN = c->frag_n, SGS = c->subgroup_size;
    operand A, B;
    operands(c, ta, tb, &A, &B);
    int stages = c->double_buffer ? 2 : 1, asz = stage_elems(&A), bsz = stage_elems(&B);
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "// generated subgroup-matrix GEMM: %dx%dx%d matrices, %dx%d subgroups of %dx%d fragments "
                  "(tile %dx%d), K slices of %d, %d stage(s)%s, A%s %s%s B%s %s%s%s%s%s\n",
                  SM, SN, SK, c->sg_m, c->sg_n, FM, FN, BM, BN, BK, stages,
                  stages == 1 && c->prefetch ? " with prefetch" : "", ta ? "^T" : "",
                  c->a_f16 ? "f16" : "f32", c->a_vec ? (c->a_vec == 8 ? " x8" : " x4") : "", tb ? "^T" : "",
                  c->b_f16 ? "f16" : "f32", c->b_vec ? (c->b_vec == 8 ? " x8" : " x4") : "", c->c_f16 ? ", C f16" : "",
                  c->cs_rounds > 1 ? ", results in rounds" : "", c->hilo ? ", hi and lo halves (three products)" : "");
    wgml_sbuf_put(&b, "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n");
    /* results in rounds: matrix stores under a branch on the subgroup's index, uniform in each
       subgroup, which the uniformity analysis (by workgroups) cannot see */
    if (c->cs_rounds > 1)
        wgml_sbuf_put(&b, "diagnostic(off, subgroup_matrix_uniformity);\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n");
    wgml_sbuf_put(&b, "alias L = subgroup_matrix_left<f16, %d, %d>;\n"
                      "alias R = subgroup_matrix_right<f16, %d, %d>;\n"
                      "alias Acc = subgroup_matrix_result<f32, %d, %d>;\n", SK, SM, SN, SK, SN, SM);
    /* the parameter block and bindings of every GEMM kernel (ops/matmul/gemm_bindings.h) */
    /* C of halves: the epilogue's f32 value rounded as it is stored (the adapter's conversion) */
    const char *ct = c->c_f16 ? "f16" : "f32";
    wgml_sbuf_put(&b, WGML_GEMM_BINDINGS_WGSL, bound_type(&A), bound_type(&B),
                  c->c_vec ? (c->c_f16 ? "vec4<u32>" : "vec4<f32>") : ct);
    if (act_wgsl) wgml_sbuf_put(&b, "%s\n", act_wgsl);
    if (c->hilo)
        /* the operands' scales from their finite maxima: 2^k with max |v| 2^k in [2^14, 2^15)
           (an operand of zeros or subnormals 2^126) */
        wgml_sbuf_put(&b, "@group(0) @binding(%d) var<storage, read> maxima: array<u32, %d>;\n"
                          "var<workgroup> max_ab: array<atomic<u32>, 4>;\n"
                          "var<private> unscale: vec2<f32>;\n"
                          "fn scale_exp(bits: u32) -> i32 {\n"
                          "    let e = i32((bits >> 23u) & 255u);\n"
                          "    return min(141 - e, 126);\n"
                          "}\n", wgml_sgmat_scales_binding(c), 2 * WGML_SGMAT_MAX_ABS_GROUPS);
    /* the epilogue of one result; with c_vec the caller reads C as vectors and passes the old
       value in (accumulate) and rounds the f32 it gets back */
    const char *vr = c->act_x ? "act_x(v, x)" : act_wgsl ? "act(v)" : "v";
    wgml_sbuf_put(&b, "fn epilogue(v0: f32, n: u32, %s%s) -> %s {\n"
                      "    var v = P.alpha * %s;\n"
                      "    if (P.accumulate != 0u) { v = v + %s; }\n"
                      "    if (P.has_bias != 0u) { v = v + bias[P.bias_off + n]; }\n",
                  c->c_vec ? "old: f32" : "idx: u32", c->act_x ? ", x: f32" : "", c->c_vec ? "f32" : ct,
                  c->hilo ? "(v0 * unscale.x * unscale.y)" : "v0",
                  c->c_vec ? "old" : "f32(C[idx])");
    if (c->c_vec) wgml_sbuf_put(&b, "    return %s;\n}\n", vr);
    else wgml_sbuf_put(&b, "    return %s(%s);\n}\n", ct, vr);
    wgml_sbuf_put(&b, "var<workgroup> As: array<f16, %d>; // [stage][%d][%d + pad]\n", stages * asz, A.rows, A.cols);
    wgml_sbuf_put(&b, "var<workgroup> Bs: array<f16, %d>; // [stage][%d][%d + pad]\n", stages * bsz, B.rows, B.cols);
    if (c->hilo)
        wgml_sbuf_put(&b, "var<workgroup> Al: array<f16, %d>; // what As's halves missed\n"
                          "var<workgroup> Bl: array<f16, %d>;\n", stages * asz, stages * bsz);
    int rounds = c->cs_rounds > 1 ? c->cs_rounds : 1, slots = cs_slots(c);
    wgml_sbuf_put(&b, "var<workgroup> Cs: array<f32, %d>; // a fragment per subgroup%s\n", slots * SM * SN,
                  rounds > 1 ? " of a round" : "");
    wgml_sbuf_put(&b, "@compute @workgroup_size(%d)\n"
                      "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,\n"
                      "        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n"
                      "    let tiles_n = (P.N + %du) / %du;\n"
                      "    let tile = wg.x + wg.y * P.gx;\n"
                      "    let m0 = (tile / tiles_n) * %du;\n"
                      "    let n0 = (tile %% tiles_n) * %du;\n"
                      "    if (m0 >= P.M) { return; }\n"
                      "    let bt = wg.z;\n",
                  NT, BN - 1, BN, BM, BN);
    if (c->two_leading)
        wgml_sbuf_put(&b, "    let a_base = P.a_off + (bt / P.L1) * P.a_bs + (bt %% P.L1) * P.a_bs1;\n"
                          "    let b_base = P.b_off + (bt / P.L1) * P.b_bs + (bt %% P.L1) * P.b_bs1;\n");
    else
        wgml_sbuf_put(&b, "    let a_base = P.a_off + bt * P.a_bs;\n    let b_base = P.b_off + bt * P.b_bs;\n");
    /* this subgroup's first row and column in the tile */
    wgml_sbuf_put(&b, "    let sr = (sg / %du) * %du;\n    let sc = (sg %% %du) * %du;\n", c->sg_n, FM * SM, c->sg_n, FN * SN);
    if (c->hilo) /* the maxima's partial words, each operand's in one word of workgroup memory
                    and its non-finite flags in another; the scales and their inverses exact
                    powers of two in f32's normal range */
        /* (cleared here: under Dawn's disable_workgroup_init, as sgmat_gemm runs, workgroup memory
           starts as the last workgroup on the multiprocessor left it) */
        wgml_sbuf_put(&b, "    if (li < 4u) { atomicStore(&max_ab[li], 0u); }\n"
                          "    workgroupBarrier();\n"
                          "    for (var i = li; i < %du; i += %du) {\n"
                          "        let w = maxima[i];\n"
                          "        atomicMax(&max_ab[i / %du], w & 0x7fffffffu);\n"
                          "        if (w >= 0x80000000u) { atomicOr(&max_ab[2u + i / %du], 1u); }\n"
                          "    }\n"
                          "    workgroupBarrier();\n"
                          "    let ka = scale_exp(atomicLoad(&max_ab[0]));\n    let kb = scale_exp(atomicLoad(&max_ab[1]));\n"
                          "    let nfa = atomicLoad(&max_ab[2]) != 0u;\n    let nfb = atomicLoad(&max_ab[3]) != 0u;\n"
                          "    let sa = ldexp(1.0, ka);\n    let sb = ldexp(1.0, kb);\n"
                          "    unscale = vec2<f32>(ldexp(1.0, -ka), ldexp(1.0, -kb));\n",
                      2 * WGML_SGMAT_MAX_ABS_GROUPS, NT, WGML_SGMAT_MAX_ABS_GROUPS, WGML_SGMAT_MAX_ABS_GROUPS);
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++) wgml_sbuf_put(&b, "    var c%d_%d: Acc;\n", i, j);
    for (int r = 0; r < items_of(&A, NT); r++)
        for (int g = 0; g < width_of(&A) / 4; g++) wgml_sbuf_put(&b, "    var xa%d_%d: %s;\n", r, g, reg_type(&A));
    for (int r = 0; r < items_of(&B, NT); r++)
        for (int g = 0; g < width_of(&B) / 4; g++) wgml_sbuf_put(&b, "    var xb%d_%d: %s;\n", r, g, reg_type(&B));
    wgml_sbuf_put(&b, "    let slices = (P.K + %du) / %du;\n", BK - 1, BK);
    bool prefetch = stages == 2 || c->prefetch;
    if (prefetch) {
        /* prologue: slice 0 into stage 0 */
        wgml_sbuf_put(&b, "    {\n        let k0 = 0u;\n");
        put_load(&b, &A, NT);
        put_load(&b, &B, NT);
        put_store(&b, &A, NT, "0u");
        put_store(&b, &B, NT, "0u");
        wgml_sbuf_put(&b, "    }\n    workgroupBarrier();\n");
    }
    wgml_sbuf_put(&b, "    for (var t = 0u; t < slices; t++) {\n");
    wgml_sbuf_put(&b, "        let cur = %s;\n        let abuf = cur * %du;\n        let bbuf = cur * %du;\n",
                  stages == 2 ? "t & 1u" : "0u", asz, bsz);
    if (prefetch) {
        /* the next slice into registers: its reads are in flight during this slice's math.
           Past the last slice the edge guards read zeros, so no branch is needed (after
           the last slice they are stored into a buffer nobody reads again). */
        wgml_sbuf_put(&b, "        {\n        let k0 = (t + 1u) * %du;\n", BK);
        put_load(&b, &A, NT);
        put_load(&b, &B, NT);
        wgml_sbuf_put(&b, "        }\n");
    } else {
        /* this slice read and staged at once (fewer registers, no overlap) */
        wgml_sbuf_put(&b, "        {\n        let k0 = t * %du;\n", BK);
        put_load(&b, &A, NT);
        put_load(&b, &B, NT);
        put_store(&b, &A, NT, "0u");
        put_store(&b, &B, NT, "0u");
        wgml_sbuf_put(&b, "        }\n        workgroupBarrier();\n");
    }
    for (int kk = 0; kk < BK; kk += SK) put_k_step(&b, c, ta, tb, &A, &B, kk);
    /* with two buffers the other was last read in the previous slice, before its closing
       barrier; with one, everyone must be done reading it */
    char a_next[48] = "0u", b_next[48] = "0u";
    if (stages == 2) {
        snprintf(a_next, sizeof a_next, "(1u - cur) * %du", asz);
        snprintf(b_next, sizeof b_next, "(1u - cur) * %du", bsz);
    } else if (prefetch) {
        wgml_sbuf_put(&b, "        workgroupBarrier();\n");
    }
    if (prefetch) {
        wgml_sbuf_put(&b, "        {\n");
        put_store(&b, &A, NT, a_next);
        put_store(&b, &B, NT, b_next);
        wgml_sbuf_put(&b, "        }\n");
    }
    wgml_sbuf_put(&b, "        workgroupBarrier();\n    }\n");
    /* results */
    wgml_sbuf_put(&b, "    let cb = P.c_off + bt * P.M * P.N;\n");
    if (!act_wgsl && !c->c_f16 && !c->c_vec && !c->hilo) {
        /* straight from the matrix units: a whole tile, no epilogue, C's rows 16-byte aligned */
        wgml_sbuf_put(&b, "    if (m0 + %du <= P.M && n0 + %du <= P.N && P.alpha == 1.0 && P.accumulate == 0u && "
                          "P.has_bias == 0u && P.N %% 4u == 0u && cb %% 4u == 0u) {\n", BM, BN);
        for (int i = 0; i < FM; i++)
            for (int j = 0; j < FN; j++)
                wgml_sbuf_put(&b, "        subgroupMatrixStore(&C, cb + (m0 + sr + %du) * P.N + n0 + sc + %du, c%d_%d, false, P.N);\n",
                              i * SM, j * SN, i, j);
        wgml_sbuf_put(&b, "        return;\n    }\n");
    }
    if (rounds > 1) wgml_sbuf_put(&b, "    let cs = (sg %% %du) * %du;\n", slots, SM * SN);
    else wgml_sbuf_put(&b, "    let cs = sg * %du;\n", SM * SN);
    int per_lane = SM * SN / SGS;
    if (c->act_x) { /* X of fragment 0 (two sets of registers: the next fragment's loads in flight) */
        for (int q = 0; q < per_lane; q++) wgml_sbuf_put(&b, "    var x0_%d = 0.0;\n    var x1_%d = 0.0;\n", q, q);
        if (c->c_vec) put_x_run_loads(&b, c, 0, 0, 0);
        else put_x_loads(&b, c, 0, 0, 0);
    }
    for (int i = 0; i < FM; i++)
        for (int j = 0; j < FN; j++) {
            int f = i * FN + j;
            /* in rounds, a round's subgroups (whole subgroups: the branch is uniform in each) */
            for (int r = 0; r < rounds; r++) {
                if (rounds > 1) wgml_sbuf_put(&b, "    if (sg / %du == %du) {\n", slots, r);
                wgml_sbuf_put(&b, "    subgroupMatrixStore(&Cs, cs, c%d_%d, false, %du);\n", i, j, SN);
                if (rounds > 1) wgml_sbuf_put(&b, "    }\n");
                wgml_sbuf_put(&b, "    workgroupBarrier();\n");
                if (c->act_x && r == 0 && f + 1 < FM * FN) {
                    if (c->c_vec) put_x_run_loads(&b, c, (f + 1) / FN, (f + 1) % FN, (f + 1) % 2);
                    else put_x_loads(&b, c, (f + 1) / FN, (f + 1) % FN, (f + 1) % 2);
                }
                if (rounds > 1) wgml_sbuf_put(&b, "    if (sg / %du == %du) {\n", slots, r);
                char xarg[32] = "";
                if (c->c_vec) { /* this lane's run of 8: one or two 16-byte stores */
                    int runs = SN / 8;
                    wgml_sbuf_put(&b, "    {\n");
                    put_run_origin(&b, c, i, j);
                    wgml_sbuf_put(&b, "        if (m < P.M && n < P.N) {\n"
                                      "            let idx = cb + m * P.N + n;\n"
                                      "            let e = cs + (lane / %du) * %du + (lane %% %du) * 8u;\n",
                                  runs, SN, runs);
                    /* the old values for accumulate (read only when asked) */
                    wgml_sbuf_put(&b, "            var o0 = vec4<f32>();\n            var o1 = vec4<f32>();\n"
                                      "            if (P.accumulate != 0u) {\n");
                    if (c->c_f16)
                        wgml_sbuf_put(&b, "                let w = C[idx / 8u];\n"
                                          "                o0 = vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(w.x)), vec2<f32>(bitcast<vec2<f16>>(w.y)));\n"
                                          "                o1 = vec4<f32>(vec2<f32>(bitcast<vec2<f16>>(w.z)), vec2<f32>(bitcast<vec2<f16>>(w.w)));\n");
                    else
                        wgml_sbuf_put(&b, "                o0 = C[idx / 4u];\n                o1 = C[idx / 4u + 1u];\n");
                    wgml_sbuf_put(&b, "            }\n");
                    for (int q = 0; q < 8; q++) {
                        if (c->act_x) snprintf(xarg, sizeof xarg, ", x%d_%d", f % 2, q);
                        wgml_sbuf_put(&b, "            let v%d = epilogue(Cs[e + %du], n + %du, o%d.%c%s);\n", q, q, q, q / 4,
                                      "xyzw"[q % 4], xarg);
                    }
                    if (c->c_f16)
                        wgml_sbuf_put(&b, "            C[idx / 8u] = vec4<u32>(bitcast<u32>(vec2<f16>(f16(v0), f16(v1))), "
                                          "bitcast<u32>(vec2<f16>(f16(v2), f16(v3))), bitcast<u32>(vec2<f16>(f16(v4), f16(v5))), "
                                          "bitcast<u32>(vec2<f16>(f16(v6), f16(v7))));\n");
                    else
                        wgml_sbuf_put(&b, "            C[idx / 4u] = vec4<f32>(v0, v1, v2, v3);\n"
                                          "            C[idx / 4u + 1u] = vec4<f32>(v4, v5, v6, v7);\n");
                    wgml_sbuf_put(&b, "        }\n    }\n");
                }
                for (int q = 0; q < per_lane && !c->c_vec; q++) {
                    if (c->act_x) snprintf(xarg, sizeof xarg, ", x%d_%d", f % 2, q);
                    wgml_sbuf_put(&b, "    {\n        let e = lane + %du;\n"
                                      "        let m = m0 + sr + %du + e / %du;\n"
                                      "        let n = n0 + sc + %du + e %% %du;\n"
                                      "        if (m < P.M && n < P.N) { let idx = cb + m * P.N + n; C[idx] = epilogue(Cs[cs + e], n, idx%s); }\n"
                                      "    }\n",
                                  q * SGS, i * SM, SN, j * SN, SN, xarg);
                }
                if (rounds > 1) wgml_sbuf_put(&b, "    }\n");
                wgml_sbuf_put(&b, "    workgroupBarrier();\n");
            }
        }
    wgml_sbuf_put(&b, "}\n");
    return wgml_sbuf_take(&b);
}

/* WGML_SGMAT_MAX_ABS_GROUPS workgroups an operand; a workgroup's largest finite |v| into its
   word's low 31 bits, and whether it met an infinity or NaN into bit 31 (they set no scale;
   the GEMM passes them on as f32 would, where the flag is set). A
   contiguous operand is read as one run of elements, sixteen a lane at a time (loads in
   flight together: four, ~1 MB in flight an operand, left memory's latency exposed); a
   strided view a row at a time, grid-strided over its rows (its index arithmetic once a
   row: a division an element cost more than the reads). The loops twice, once an operand's
   binding: a WGSL function takes no pointer to storage. */
#define MAX_ABS_LOOPS(X)                                                                                        \
    "    if (flat) {\n"                                                                                      \
    "        let n = o.batch * o.rows * o.cols;\n"                                                            \
    "        let step = " GROUPS_TEXT "u * 256u;\n"                                                          \
    "        var e = g * 256u + li;\n"                                                                       \
    "        for (; e + 15u * step < n; e += 16u * step) {\n"                                                \
    "            var v: array<vec4<f32>, 4>;\n"                                                               \
    "            for (var q = 0u; q < 4u; q++) {\n"                                                           \
    "                let at = o.off + e + 4u * q * step;\n"                                                   \
    "                v[q] = vec4<f32>(" X "[at], " X "[at + step], " X "[at + 2u * step], " X "[at + 3u * step]);\n" \
    "            }\n"                                                                                        \
    "            for (var q = 0u; q < 4u; q++) { m = merge(m, finite_bits4(v[q])); }\n"                         \
    "        }\n"                                                                                            \
    "        for (; e < n; e += step) { m = merge(m, finite_bits(" X "[o.off + e])); }\n"                      \
    "    } else {\n"                                                                                         \
    "        for (var r = g; r < o.batch * o.rows; r += " GROUPS_TEXT "u) {\n"                               \
    "            let bt = r / o.rows;\n"                                                                     \
    "            let base = o.off + (bt / o.L1) * o.bs0 + (bt % o.L1) * o.bs1 + (r % o.rows) * o.ld;\n"      \
    "            for (var j = li; j < o.cols; j += 256u) { m = merge(m, finite_bits(" X "[base + j])); }\n"     \
    "        }\n"                                                                                            \
    "    }\n"

const char *wgml_sgmat_max_abs_wgsl(void)
{
    return "struct Op { off: u32, ld: u32, rows: u32, cols: u32, bs0: u32, bs1: u32, L1: u32, batch: u32 }\n"
           "@group(0) @binding(0) var<uniform> P: array<Op, 2>;\n"
           "@group(0) @binding(1) var<storage, read_write> maxima: array<u32>;\n"
           "@group(0) @binding(2) var<storage, read> A: array<f32>;\n"
           "@group(0) @binding(3) var<storage, read> B: array<f32>;\n"
           "var<workgroup> part: array<u32, 256>;\n"
           /* |x|'s bits, or the flag alone for an infinity or NaN; merge keeps the larger
              magnitude and either flag */
           "fn finite_bits(x: f32) -> u32 { let u = bitcast<u32>(abs(x)); return select(u, 0x80000000u, u >= 0x7f800000u); }\n"
           "fn merge(a: u32, b: u32) -> u32 { return max(a & 0x7fffffffu, b & 0x7fffffffu) | ((a | b) & 0x80000000u); }\n"
           "fn finite_bits4(v: vec4<f32>) -> u32 {\n"
           "    return merge(merge(finite_bits(v.x), finite_bits(v.y)), merge(finite_bits(v.z), finite_bits(v.w)));\n}\n"
           "fn max_a(o: Op, g: u32, li: u32, flat: bool) -> u32 {\n    var m = 0u;\n" MAX_ABS_LOOPS("A") "    return m;\n}\n"
           "fn max_b(o: Op, g: u32, li: u32, flat: bool) -> u32 {\n    var m = 0u;\n" MAX_ABS_LOOPS("B") "    return m;\n}\n"
           "@compute @workgroup_size(256)\n"
           "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {\n"
           "    let which = wg.x / " GROUPS_TEXT "u;\n"
           "    let o = P[which];\n"
           "    let g = wg.x % " GROUPS_TEXT "u;\n"
           /* one run: rows ld apart, matrices rows * ld apart, in order */
           "    let mat = o.rows * o.ld;\n"
           "    let flat = o.ld == o.cols && (o.batch == 1u || (o.L1 == 1u && o.bs0 == mat) ||\n"
           "                                  (o.bs1 == mat && o.bs0 == o.L1 * mat));\n"
           "    var m = 0u;\n"
           "    if (which == 0u) { m = max_a(o, g, li, flat); } else { m = max_b(o, g, li, flat); }\n"
           "    part[li] = m;\n"
           "    workgroupBarrier();\n"
           "    for (var s = 128u; s > 0u; s >>= 1u) {\n"
           "        if (li < s) { part[li] = merge(part[li], part[li + s]); }\n"
           "        workgroupBarrier();\n"
           "    }\n"
           "    if (li == 0u) { maxima[wg.x] = part[0]; }\n"
           "}\n";
}
