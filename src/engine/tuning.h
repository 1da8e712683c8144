/*
 * The knobs of benchmark sweeps (README, "Measuring"): the context's settings (its desc's
 * fields, else the environment's variables, read when it was made: runtime/settings.h),
 * parsed once, when first asked for, and kept as the context's extension: the tile policy
 * (ops/matmul/matmul_tiles.c) and the fused kernels read them here rather than parsing them at
 * every kernel choice. A knob set to something it does not take is as if unset.
 */
#ifndef WGML_ENGINE_TUNING_H
#define WGML_ENGINE_TUNING_H

#include "core/context.h"

typedef struct wgml_tuning {
    /* WGML_GEMM_TILE=tm,tn,bk,stages: the large-M GEMM tile (tm, tn 4, 8 or 16; bk 4, 8, 16
       or 32; stages 1..4 as wgml_gemm_choose reads them); gemm_tile_set when given */
    bool gemm_tile_set;
    int gemm_tm, gemm_tn, gemm_bk, gemm_stages;
    /* WGML_GEMM_CPU=0: no CPU GEMM on a CPU adapter; =1: the CPU GEMM on any adapter;
       =rows,cols,lanes: that shape of it (rows and cols 4, 8 or 16, lanes 8..256 a power of
       two), on any adapter */
    int gemm_cpu; /* -1 off, 0 by the adapter, 1 forced */
    int gemm_cpu_rows, gemm_cpu_cols, gemm_cpu_lanes;
    bool gemm_cpu_no_subgroups; /* WGML_GEMM_CPU_SUBGROUPS=0: the CPU GEMM without them */
    bool gemm_warp_8x4;  /* WGML_GEMM_WARP=8x4 (else the 16x2 layout) */
    bool gemv_rows_off;  /* WGML_GEMV_ROWS=0: no small-M GEMV (M = 1 through the GEMV kernel too) */
    bool gemv_subgroups; /* WGML_SUBGROUPS=1 and the adapter has subgroups */
    int gemv_cols;       /* WGML_GEMV_COLS=16|32|64; 0: by shape */
    int ew_unroll;       /* WGML_EW_UNROLL=1|2|4|8: elements per thread of fused kernels; 0: by kernel */
    /* WGML_ATTN_TILES=r,c,t,r,c,t,r,c,t: the attention kernels' tiles (rows, cols, tx of
       wgml_attn_kernel) for the forward, dK/dV and dQ kernels, in that order; a triple that
       does not fit the adapter (or is 0,0,0) leaves that kernel to the policy */
    bool attn_tiles_set;
    int attn_tiles[3][3];
    int attn_pre; /* WGML_ATTN_PRE=n: wgml_attn_kernel's pre bits of every kernel; -1: the policy's */
    /* WGML_ATTN_MATRIX: 0 (unset) the policy (matrix units under mixed precision where the
       adapter has them), -1 ("0") the SIMT kernels always, 1 ("emulate[,MxNxK,lanes]") the
       matrix kernels with stand-ins of that shape and subgroup size (default 16x16x16, 32:
       the H100's), steps of `cols` (default 16: the stand-ins' code grows with the
       fragments, and llvmpipe's compile with it), under mixed precision on any adapter;
       "emulate,MxNxK,L,C,X" also sets the forms (X, as below) */
    int attn_matrix;
    int attn_emu[5];
    /* WGML_ATTN_MATRIX=cols,F,K,Q,S[,O]: the matrix kernels' steps of columns (forward, dK/dV,
       dQ) and subgroups per workgroup (0: the policy's), the policy otherwise; O (attn_mpre; -1:
       the policy's, per kernel) picks every kernel's options: 1 prefetch, 4 two staging
       buffers, 8 P over a staged tile, 16 the kept rows staged by halves (8 and 16: the forward
       and dQ only; wgml_attn_sgmat); ",X" (attn_mform; -1: the policy's) the forms: 1 the
       forward in one walk, 2 dK/dV's and 4 dQ's lanes in quads; ",G" (attn_morder; -1: the policy's) the kernels whose
       workgroups go in tile-major order: 1 the forward, 4 dQ */
    int attn_mcols[3], attn_msub, attn_mpre, attn_mform, attn_morder;
} wgml_tuning;

/* The context's knobs, read on first use. Never NULL: when the state cannot be kept (out of
   host memory), the defaults. */
const wgml_tuning *wgml_tuning_of(wgml_context *ctx);

#endif
