/*
 * The matmul tile policy: which kernel config (ops/matmul/matmul.h, wgml_gemm_config) serves
 * which shape on this adapter. The generators of ops/matmul/gemm_wgsl.c write the kernel for the
 * config chosen here; ops/matmul/matmul.c launches it. Benchmark sweeps override parts of the
 * policy through the context's knobs (engine/tuning.h).
 */
#include <string.h>

#include "ops/matmul/matmul.h"
#include "engine/tuning.h"

/* Tile configs by shape. WGML_GEMM_TILE="tm,tn,bk,stages" overrides the large-M config
   (benchmark sweeps; stages 1 = one buffer, 2 = two with register prefetch, 3 = two without,
   4 = one with register prefetch; tm and tn 4, 8 or 16). Double buffering only where the
   adapter's workgroup memory holds it. */
wgml_gemm_config wgml_gemm_choose(wgml_context *ctx, const wgml_gemm_args *g)
{
    const wgml_tuning *tu = wgml_tuning_of(ctx);
    wgml_gemm_config c;
    if (g->M <= 16) c = (wgml_gemm_config){.tm = 1, .tn = 8, .bk = 16, .double_buffer = true};
    else if (g->M <= 64) c = (wgml_gemm_config){.tm = 4, .tn = 4, .bk = 16, .double_buffer = true};
    else {
        int64_t tiles = ((g->M + 127) / 128) * ((g->N + 127) / 128) * g->batch;
        /* measured on the H100 (docs/MEASUREMENTS.md). 2 to 4 waves of 128x128 tiles (the
           GPT's [16384, 384] x [384, 384] with 384 tiles, its split-K weight gradients with
           288): 128x64 tiles, double buffered with the register prefetch, even out the last
           wave: 16 to 32% less time per GEMM (the GPT's training step) */
        if (tiles > 256 && tiles < 512) c = (wgml_gemm_config){.tm = 8, .tn = 4, .bk = 16, .double_buffer = true, .prefetch = true};
        /* A^T B (a weight's gradient) of 512 tiles and more: both tiles stage without the
           transposing store, and 8-deep slices loaded into registers during the math won:
           4096^3 41.8-42.1 TFLOP/s against 38.4-38.7 with the tile below, three alternations
           in one run (the other forms were slower that way: 36 and 35) */
        else if (tiles >= 512 && g->trans_a && !g->trans_b) c = (wgml_gemm_config){.tm = 8, .tn = 8, .bk = 8, .prefetch = true};
        /* one wave and more: 128x128 tiles, BK 16, one buffer (256 tiles: 2048^3 38.7-40.0
           TFLOP/s against 37.4-38.5 with the register prefetch, four alternations over two
           runs) */
        else if (tiles >= 256) c = (wgml_gemm_config){.tm = 8, .tn = 8, .bk = 16};
        /* 32 to 255 tiles: the next slice loaded into registers during this one's math */
        else if (tiles >= 32) c = (wgml_gemm_config){.tm = 8, .tn = 8, .bk = 16, .prefetch = true};
        /* under 32 tiles: 64x128 tiles, for more workgroups */
        else c = (wgml_gemm_config){.tm = 4, .tn = 8, .bk = 16, .double_buffer = true, .prefetch = true};
        /* f16 arithmetic: 8x4 a thread for 8x8 (H100, 4096^3 / 8192^3: f32 sums 38.3 / 39.4
           TFLOP/s against 33.0 / 34.9, at 102 registers against 177 per thread; f16 sums
           50.0 / 52.0 against 48.5 / 51.5) */
        if (g->f16_math && c.tm == 8 && c.tn == 8) c.tn = 4;
        if (tu->gemm_tile_set) {
            int st = tu->gemm_stages;
            c = (wgml_gemm_config){.tm = tu->gemm_tm, .tn = tu->gemm_tn, .bk = tu->gemm_bk,
                                   .double_buffer = st == 2 || st == 3, .prefetch = st == 2 || st == 4};
        }
    }
    /* f16 arithmetic stages halves: 2-byte elements */
    c.f16_math = g->f16_math;
    uint64_t esize = c.f16_math ? 2 : 4;
    /* within the adapter's workgroup memory: drop the second stage, then shrink the slice */
    uint64_t room = ctx->rt.limits.maxComputeWorkgroupStorageSize;
    while (c.bk > 4 && (uint64_t)c.bk * 16 * (uint64_t)(c.tm + c.tn) * esize > room) c.bk /= 2;
    if ((c.double_buffer ? 2 : 1) * (uint64_t)c.bk * 16 * (uint64_t)(c.tm + c.tn) * esize > room) c.double_buffer = false;
    c.warp_8x4 = tu->gemm_warp_8x4;
    /* vec4 reads need every vec4 wholly inside or wholly outside the matrix, and aligned */
    int64_t a_inner = g->trans_a ? g->M : g->K, b_inner = g->trans_b ? g->K : g->N;
    c.vec_a = a_inner % 4 == 0 && g->lda % 4 == 0 && g->a_off % 4 == 0 && g->a_bs % 4 == 0 && g->a_bs1 % 4 == 0;
    c.vec_b = b_inner % 4 == 0 && g->ldb % 4 == 0 && g->b_off % 4 == 0 && g->b_bs % 4 == 0 && g->b_bs1 % 4 == 0;
    /* a CPU adapter whose loop limit the CPU GEMM's K loop (K / 4 trips) fits under: see below */
    bool cpu = tu->gemm_cpu > 0 || (tu->gemm_cpu == 0 && !strcmp(ctx->rt.info.adapter_type, "CPU"));
    /* (f16 arithmetic: the tiled GEMM for every shape, so it is f16 whatever the shape) */
    bool cpu_gemm = cpu && (uint64_t)g->K / 4 + 3 + 64 <= ctx->rt.loop_limit && !g->f16_math;
    /* 2 <= M <= 16, neither operand transposed: the GEMV layout with a row per accumulator
       (rows rounded up to a power of two, so few variants); WGML_GEMV_ROWS=0 turns it off.
       Not on a CPU adapter, where the CPU GEMM was faster from M = 2 on (lavapipe, K = N =
       1536: 28-35 ms against 33-78 ms at M = 2-16, docs/MEASUREMENTS.md) */
    c.gemv_rows = 0;
    if (g->M >= 2 && g->M <= 16 && !g->trans_a && !g->trans_b && !tu->gemv_rows_off && !cpu_gemm && !g->f16_math)
        for (c.gemv_rows = 2; c.gemv_rows < g->M; c.gemv_rows *= 2) {}
    /* M = 1, f32 weights: the small-M GEMV with one row, which reads A in vec4s when aligned
       (see wgml_gemv_rows_source); WGML_GEMV_ROWS=0 keeps the GEMV kernel, and so do
       subgroup reductions (WGML_SUBGROUPS=1), which only the GEMV kernel has */
    if (g->M == 1 && !g->trans_a && !g->trans_b && !g->b_f16 && c.vec_a && !tu->gemv_rows_off && !tu->gemv_subgroups &&
        !g->f16_math)
        c.gemv_rows = 1;
    /* GEMV: the widest workgroup (most columns, longest contiguous reads) that still gives
       >= 256 workgroups (two per SM on an H100); the small-M one does M times the math per
       weight read and was fastest with >= 32 (H100, M = 16, K = N = 1536 / 4096 / 8192:
       5.2 / 13.4 / 17.0 TFLOP/s vs 4.1 / 10.6 / 16.0 with >= 256) */
    uint64_t enough = c.gemv_rows ? 32 : 256;
    c.gemv_cols = 64;
    while (c.gemv_cols > 16 && (uint64_t)g->batch * (uint64_t)((g->N + c.gemv_cols - 1) / c.gemv_cols) < enough)
        c.gemv_cols /= 2;
    c.gemv_subgroups = tu->gemv_subgroups;
    if (tu->gemv_cols) c.gemv_cols = tu->gemv_cols;
    c.b_f16 = g->b_f16;
    c.a_f16 = g->a_f16 && g->f16_math; /* (the f32 kernels' A is widened first: ops/matmul/matmul.c) */
    /* a CPU adapter (lavapipe): the CPU GEMM wherever the GEMVs do not serve (see
       wgml_gemm_cpu_source), while its K loop (K / 4 trips) stays under the loop limit.
       32 rows x 4 columns a lane, 16 lanes: lavapipe, 512^3, 6.1 GFLOP/s vs 4.3 with 16 rows;
       8 columns or 64 rows were no faster and took 5-10x longer to compile */
    bool gemv = (g->M == 1 && !g->trans_a) || c.gemv_rows;
    if (cpu_gemm && !gemv) {
        c.cpu_rows = 32, c.cpu_cols = 4, c.cpu_lanes = 16;
        c.cpu_subgroups = ctx->rt.info.has_subgroups && !tu->gemm_cpu_no_subgroups;
        if (tu->gemm_cpu_rows) c.cpu_rows = tu->gemm_cpu_rows, c.cpu_cols = tu->gemm_cpu_cols, c.cpu_lanes = tu->gemm_cpu_lanes;
    }
    return c;
}
