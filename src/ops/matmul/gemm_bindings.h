/*
 * The parameter block and bindings every GEMM kernel declares (ops/matmul/gemm_wgsl.c, the SIMT
 * kernels; ops/matmul/gemm_sgmat_wgsl.c, the matrix units), as one format string: its three %s
 * are the WGSL element types of A, B and C. wgml_gemm_params (ops/matmul/matmul.c) fills the
 * block.
 */
#ifndef WGML_OPS_MATMUL_GEMM_BINDINGS_H
#define WGML_OPS_MATMUL_GEMM_BINDINGS_H

#define WGML_GEMM_BINDINGS_WGSL                                         \
    "struct Params {\n"                                                 \
    "    M: u32, N: u32, K: u32, batch: u32,\n"                         \
    "    lda: u32, ldb: u32, a_off: u32, b_off: u32,\n"                 \
    "    a_bs: u32, b_bs: u32, c_off: u32, has_bias: u32,\n"            \
    "    bias_off: u32, gx: u32, alpha: f32, accumulate: u32,\n"        \
    "    a_bs1: u32, b_bs1: u32, L1: u32, x_off: u32,\n"                \
    "}\n"                                                               \
    "@group(0) @binding(0) var<uniform> P: Params;\n"                   \
    "@group(0) @binding(1) var<storage, read> A: array<%s>;\n"          \
    "@group(0) @binding(2) var<storage, read> B: array<%s>;\n"          \
    "@group(0) @binding(3) var<storage, read> bias: array<f32>;\n"      \
    "@group(0) @binding(4) var<storage, read_write> C: array<%s>;\n"

#endif
