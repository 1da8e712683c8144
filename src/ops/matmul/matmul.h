/* Matmul kernels shared by the graph op and the cached-matmul API (ops/matmul/matmul_cached.c):
   the tile policy (ops/matmul/matmul_tiles.c), the WGSL generators (ops/matmul/gemm_wgsl.c) and the
   launch (ops/matmul/matmul.c). */
#ifndef WGML_OPS_MATMUL_MATMUL_H
#define WGML_OPS_MATMUL_MATMUL_H

#include "engine/executor.h"
#include "ops/matmul/gemm_sgmat_wgsl.h"
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_MATMUL_OPS(X) X(MATMUL)

/* a matmul node's parameters */
typedef struct wgml_matmul_params {
    bool trans_a, trans_b;           /* how the kernel reads the operands */
    bool user_trans_a, user_trans_b; /* the caller's flags, on the logical operands (its gradient's) */
    bool bias;                       /* src[2] is a bias */
    int32_t act;                     /* wgml_activation */
    int32_t K;
    int32_t f16_math;                /* wgml_matmul_desc's */
    float alpha;
    int32_t act_grad; /* nonzero: the result times this activation's derivative at src[2] (no bias) */
    bool residual;    /* src[2 + bias] (the result's shape, contiguous) is added to the result */
} wgml_matmul_params;
WGML_OP_PARAMS(wgml_matmul_params, wgml_matmul_params_of)

/* The epilogue activations, X(ACT, OP): wgml.h's WGML_ACT_<ACT> applies op OP's WGSL (the
   fused kernels' text), and its gradient is OP's rule. act_op (ops/matmul/gemm_wgsl.c) is made
   from this list; a WGML_ACT_ missing from it fails to compile. */
#define WGML_MATMUL_ACTS(X) X(NONE, COPY) X(RELU, RELU) X(GELU, GELU) X(SILU, SILU) X(GELU_EXACT, GELU_EXACT)
/* the elementwise op of each activation, by WGML_ACT_ */
extern const int wgml_matmul_act_op[];
extern const int wgml_matmul_act_count;
/* A GEMM's epilogue code (wgml_gemm_args.act) beyond the activations: WGML_ACT_GRAD | act
   multiplies the result by act's derivative at X (binding 5, the result's shape, contiguous,
   from P.x_off; halves with WGML_ACT_X_F16): the gradient of act(X) where the GEMM makes the
   gradient of act's output (wgml_rule_matmul_act_grad, ops/rules.h). */
#define WGML_ACT_GRAD 0x100
#define WGML_ACT_X_F16 0x200
/* WGML_ACT_RESID | act adds X (as above) to act's result: a residual stream's sum folded into
   the GEMM that makes its other term (the op table's add_in, ops/matmul/matmul.c) */
#define WGML_ACT_RESID 0x400
/* The WGSL function of act's derivative (ops/elementwise.wgsl), NULL where no epilogue has it */
const char *wgml_matmul_act_grad_fn(int act);

typedef struct wgml_gemm_config {
    int tm, tn, bk;     /* per-thread tile TM x TN (16x16 threads), K-slice depth */
    bool double_buffer; /* two staging buffers: the next slice is staged during this one's math */
    bool prefetch;      /* the next slice loaded into registers before the math, stored after it */
    bool vec_a, vec_b;  /* operand bound as vec4s (its contiguous extent, strides, offsets % 4 == 0) */
    bool warp_8x4;      /* thread layout: a warp covers 8x4 threads of the 16x16 grid (else 16x2) */
    int gemv_cols;      /* GEMV (M == 1): columns per workgroup, 16, 32 or 64 */
    int gemv_rows;      /* 1..16 (a power of two): the small-M GEMV for up to that many rows; 0: not */
    bool gemv_subgroups; /* GEMV: partial sums meet by subgroup shuffles (opt in: WGML_SUBGROUPS=1) */
    bool b_f16;         /* B stored as halves (f16 cached weights, f16 tensors); read as f32 */
    bool a_f16;         /* A stored as halves (the tiled GEMM under f16_math only) */
    int f16_math;       /* tiled GEMM: wgml_matmul_desc's f16_math (0: f32 arithmetic) */
    bool two_leading;   /* two leading dims (L1 > 1): each matrix's start takes a division */
    /* the CPU GEMM (CPU adapters): a workgroup of cpu_lanes invocations, each computing
       cpu_rows x cpu_cols outputs (multiples of 4) without workgroup memory; 0: not */
    int cpu_rows, cpu_cols, cpu_lanes;
    bool cpu_subgroups; /* CPU GEMM: A's values shared by subgroup shuffles (subgroups of 8) */
    /* the GEMM on the matrix units (WGML_F16_MATH_MATRIX where the adapter has them):
       sgmat.sm_m != 0, and the tile fields above unused */
    wgml_sgmat_config sgmat;
} wgml_gemm_config;

/* Everything a GEMM/GEMV launch needs; offsets and strides in elements. The batch is
   L0 x L1 matrices over two leading dims (L0 = batch / L1; an L1 of 0 counts as 1): matrix bt
   of the output reads A at a_off + (bt / L1) * a_bs + (bt % L1) * a_bs1 (B alike), a stride
   0 where the operand is broadcast along that dim; the output is contiguous [batch, M, N]. */
typedef struct wgml_gemm_args {
    int64_t M, N, K, batch, L1;
    bool trans_a, trans_b;
    int act;
    float alpha;
    int64_t lda, ldb, a_off, b_off, a_bs, b_bs, a_bs1, b_bs1, c_off, bias_off;
    uint32_t has_bias, accumulate; /* accumulate: C += result (split K) */
    bool b_f16;                    /* B is stored as halves (offsets and strides still in elements) */
    bool a_f16;                    /* A too (read directly under f16_math; else widened first) */
    int f16_math;                  /* wgml_matmul_desc's f16_math (the tiled GEMM only; 0: f32) */
    bool c_f16;                    /* C stored as halves (the matrix units' GEMM only) */
    int64_t x_off;                 /* WGML_ACT_GRAD, WGML_ACT_RESID: X's offset */
} wgml_gemm_args;

/* Whether matmul node t, given dtype f16, can store its result as halves itself: it runs the
   matrix units' GEMM (Dawn's subgroup matrices), without split K. (ops/elementwise.c's
   wgml_cast asks, so a cast of such a node costs no pass of its own.) */
bool wgml_matmul_stores_f16(wgml_context *ctx, const struct wgml_tensor *t);

/* The kernels' parameter block (wgml_gemm_params fills it; a multiple of 16 bytes) */
#define WGML_GEMM_PARAMS_BYTES 80

/* What f16_math mode g's matmul runs on this adapter: WGML_F16_MATH_MATRIX only where the
   adapter has an f16 -> f32 subgroup matrix and one subgroup size and M >= 16; else
   WGML_F16_MATH_F32_SUMS, or 0 (f32) for M < 16. Other modes unchanged. */
int wgml_gemm_resolve_f16_math(const wgml_context *ctx, const wgml_gemm_args *g);

/* The kernels' WGSL for a config (ops/matmul/gemm_wgsl.c); NULL when out of host memory. */
char *wgml_gemm_source(const wgml_gemm_config *cfg, bool trans_a, bool trans_b, int act);
char *wgml_gemv_source(const wgml_gemm_config *cfg, bool trans_b, int act);
char *wgml_gemv_rows_source(const wgml_gemm_config *cfg, int act);
/* The subgroup-matrix GEMM's act_wgsl for an activation (NULL for none) */
char *wgml_sgmat_act_source(int act);
char *wgml_gemm_cpu_source(const wgml_gemm_config *cfg, bool trans_a, bool trans_b, int act);
/* The tile config for g: by shape, within the adapter's workgroup memory
   (ops/matmul/matmul_tiles.c). */
wgml_gemm_config wgml_gemm_choose(wgml_context *ctx, const wgml_gemm_args *g);
/* Picks and compiles the kernel for g (cached), and fills the launch's parameters. */
wgml_status wgml_gemm_pipeline(wgml_context *ctx, const wgml_gemm_args *g, wgml_launch *l, bool *gemv,
                               wgml_gemm_config *cfg);
void wgml_gemm_params(wgml_context *ctx, wgml_launch *l, const wgml_gemm_args *g, bool gemv,
                      const wgml_gemm_config *cfg);

/* The matmul entry's launches: the GEMM or GEMV (or a split K's partial GEMMs and their sum). */
wgml_status wgml_build_matmul(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);

#endif
