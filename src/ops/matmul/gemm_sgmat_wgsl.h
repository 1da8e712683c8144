/* The GEMM on subgroup matrices (the GPU's matrix units through Dawn's
   chromium_experimental_subgroup_matrix): f16 operands, f32 sums. Self-contained (it needs only
   core/sbuf), so the bench (bench/sgmat_gemm.c) and the graph's matmul share it.

   The kernel takes the SIMT GEMM's parameter block and bindings (ops/matmul/matmul.h: 0 the
   uniform Params of WGML_GEMM_PARAMS_BYTES, 1 A, 2 B, 3 bias, 4 C of f32, or of f16 with
   c_f16), so
   wgml_gemm_params fills its parameters, with the grid counted in this config's tiles
   (wgml_sgmat_tile_m / _n). Forms A.B, A.B^T, A^T.B (and A^T.B^T), batched over two
   leading dims with broadcast (stride 0), the epilogue alpha, accumulate (C += result, which
   is how a residual or a split K's chunks are added), bias and an activation. A split K is
   a batch of chunks into partials, as wgml's matmul does it. */
#ifndef WGML_OPS_MATMUL_GEMM_SGMAT_WGSL_H
#define WGML_OPS_MATMUL_GEMM_SGMAT_WGSL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wgml_sgmat_config {
    /* the subgroup-matrix shape: one of the adapter's f16 -> f32 configurations (the left
       operand sm_m x sm_k, the right sm_k x sm_n), never assumed */
    int sm_m, sm_n, sm_k;
    int subgroup_size; /* the adapter's subgroup size (its min must equal its max) */
    int sg_m, sg_n;    /* subgroups per workgroup along M and N */
    int frag_m, frag_n; /* result fragments per subgroup along M and N */
    int bk;            /* K depth of a staged slice: a multiple of sm_k (and of 8) */
    bool double_buffer; /* two staging buffers: one barrier a slice instead of two */
    /* one buffer: the next slice read into registers during this slice's math, stored after
       it (with two buffers, always) */
    bool prefetch;
    /* global reads of each operand: 0 one element at a time (any layout), or 4 or 8
       elements at once, which needs its offset, strides and contiguous extent to be
       multiples of that (wgml_sgmat_vec_width says which fits) */
    int a_vec, b_vec;
    bool a_f16, b_f16; /* stored as halves (else f32, converted to f16 while staged) */
    bool c_f16;        /* C stored as halves (every result through the epilogue) */
    bool two_leading;  /* two leading dims (L1 > 1): each matrix's start takes a division */
    /* the activation reads X at each result (act_wgsl defines `fn act_x(v: f32, x: f32) -> f32`
       and X's binding 5, and `P.x_off`): each fragment's X is loaded while the one before it
       leaves, so the loads' latency is paid once, not once a fragment */
    bool act_x;
    /* results leave through workgroup memory in this many rounds (0 or 1: every subgroup at
       once), a round's subgroups sharing a result block of sg_m * sg_n / rounds fragments */
    int cs_rounds;
    /* the epilogue's lanes each take a run of 8 neighbouring results of a fragment row and
       write them as 16-byte vectors (C bound as vec4<u32> of halves, or vec4<f32>): needs
       N and C's offset multiples of 8 (a run is then wholly inside or outside the matrix)
       and fragments of 8 results a lane whose rows are whole runs (16x16
       of 32 lanes). It drops the straight store of f32 C, so wgml takes it only where there
       is none (C of halves, or an activation: wgml_sgmat_c_vec_fits) */
    bool c_vec;
    /* f32 accuracy on the matrix units: each f32 operand staged as two halves, hi = s v cut
       to its leading 11 bits and lo = f16(s v - hi), and three products a K step (hi.hi + lo.hi
       + hi.lo; lo.lo, under 2^-20 of a product, is left out). s is a power of two per operand that puts its largest
       finite magnitude in [2^14, 2^15) (f16's range holds, and lo stays clear of f16's subnormals for
       all but the smallest elements); the kernel reads the partial maxima from
       wgml_sgmat_scales_binding (wgml_sgmat_max_abs_wgsl's words) and divides s out in the
       epilogue, so every result goes through it; where a word flags an infinity or NaN the
       operand is staged keeping it (hi the value, lo 0). Needs both operands stored as f32. */
    bool hilo;
} wgml_sgmat_config;

/* A hilo config's operand maxima: wgml_sgmat_max_abs_wgsl's kernel, WGML_SGMAT_MAX_ABS_GROUPS
   workgroups an operand (A's first), writes each workgroup's largest finite |v| (as f32 bits, in
   the low 31) and whether it met an infinity or NaN (bit 31) into its word of binding 1, which the GEMM reads as its binding wgml_sgmat_scales_binding (no word
   needs clearing first). Binding 0: a wgml_sgmat_max_abs_params for A then one for B, a strided
   view's batch x rows x cols elements from `off` (leading dims L0 x L1, strides bs0 and bs1,
   L1 1 for one); 2 and 3: A's and B's f32 elements. */
static inline int wgml_sgmat_scales_binding(const wgml_sgmat_config *c) { return c->act_x ? 6 : 5; } /* after X's */
#define WGML_SGMAT_MAX_ABS_GROUPS 256
const char *wgml_sgmat_max_abs_wgsl(void);
typedef struct wgml_sgmat_max_abs_params {
    uint32_t off, ld, rows, cols, bs0, bs1, L1, batch;
} wgml_sgmat_max_abs_params;

/* Whether c_vec serves this config for a C of N columns starting at element c_off (runs of 8
   whole or outside: N and c_off multiples of 8), with an activation or not: the config takes it
   (wgml_sgmat_config_problem) and the epilogue runs anyway (C of halves, or an activation) */
bool wgml_sgmat_c_vec_fits(const wgml_sgmat_config *c, bool has_act, uint64_t N, uint64_t c_off);

/* The workgroup's output tile and size */
static inline int wgml_sgmat_tile_m(const wgml_sgmat_config *c) { return c->sg_m * c->frag_m * c->sm_m; }
static inline int wgml_sgmat_tile_n(const wgml_sgmat_config *c) { return c->sg_n * c->frag_n * c->sm_n; }
static inline int wgml_sgmat_threads(const wgml_sgmat_config *c) { return c->sg_m * c->sg_n * c->subgroup_size; }

/* Bytes of workgroup memory the kernel declares (staging of both operands, and the f32
   fragment each subgroup writes its results through at edges and for the epilogue). */
uint32_t wgml_sgmat_workgroup_bytes(const wgml_sgmat_config *c, bool trans_a, bool trans_b);

/* NULL when the config can be generated, else why not (a static string). */
const char *wgml_sgmat_config_problem(const wgml_sgmat_config *c);

/* The widest global read (8, 4 or 0) an operand of this layout allows: its element offset,
   row stride, the two batch strides and its contiguous extent (K for A, N for B when not
   transposed; M for A^T, K for B^T) all multiples of it. */
int wgml_sgmat_vec_width(int64_t off, int64_t ld, int64_t bs0, int64_t bs1, int64_t extent);

/* The measured policy (docs/MEASUREMENTS.md, H200): for an M x N result over `batch`
   matrices (or split-K chunks), a config on the
   adapter's matrix shape sm_m x sm_n x sm_k (16x16x16 where offered: the caller picks it from
   the adapter's f16 -> f32 list), K slices of 32 in one staging buffer with the next slice
   prefetched into registers (where N <= 768 fills the GPU: 128x128 tiles, results in two
   rounds, deeper staging), 8-wide reads (the caller lowers a_vec / b_vec to
   wgml_sgmat_vec_width's and sets the storage fields), within wg_bytes_limit of workgroup
   memory. The tile follows from M, N and batch alone: K and the operands' storage (halves or
   f32) changed no winner in the sweeps. */
wgml_sgmat_config wgml_sgmat_choose(int sm_m, int sm_n, int sm_k, int subgroup_size, int64_t M, int64_t N, int64_t batch,
                                    bool trans_a, bool trans_b, uint32_t wg_bytes_limit);

/* A hilo config for the matrix shape and transposes given: the first of the measured
   layouts (H200, docs/MEASUREMENTS.md: 128x256 in K slices of 16 prefetched, then 128x128 and
   64x128 in slices of 32, the first two also with results in two rounds) whose doubled staging
   fits wg_bytes_limit; sm_m 0 when none does. */
wgml_sgmat_config wgml_sgmat_choose_hilo(int sm_m, int sm_n, int sm_k, int subgroup_size, bool trans_a, bool trans_b,
                                         uint32_t wg_bytes_limit);

/* The kernel's WGSL, or NULL (a config problem, or out of host memory). act_wgsl: NULL, or
   WGSL text that defines `fn act(v: f32) -> f32` (and whatever that needs), or with act_x `fn act_x(v: f32, x: f32) -> f32`, applied last in the
   epilogue; without it, results that need no epilogue at run time (alpha 1, no bias, no
   accumulate) go from the matrix units straight to C in whole interior tiles. */
char *wgml_sgmat_gemm_source(const wgml_sgmat_config *c, bool trans_a, bool trans_b, const char *act_wgsl);

#endif
