/*
 * Fused attention: the op and its gradient (ops/attention/attention.c, whose header says how the
 * kernels work) and the generator of their WGSL (ops/attention/attention_wgsl.c).
 */
#ifndef WGML_OPS_ATTENTION_ATTENTION_H
#define WGML_OPS_ATTENTION_ATTENTION_H

#include <stdbool.h>
#include "engine/op.h"

/* its ops, X(ENUM) (ops/table.h) */
#define WGML_ATTENTION_OPS(X) X(ATTENTION) X(ATTENTION_GRAD)

/* attention's and its gradient's parameters: causal or not, the scores' scale, and whether the
   node was built under mixed precision (the matrix units where the adapter has them) */
typedef struct wgml_attention_params {
    bool causal;
    bool mixed;
    bool packed; /* src[3] is the tensor q, k and v are windows of (wgml_attention_desc.packed) */
    bool bthd;   /* the result is stored [B,T,H,D] (wgml_attention_desc.out_bthd) */
    float scale;
} wgml_attention_params;
WGML_OP_PARAMS(wgml_attention_params, wgml_attention_params_of)

#include "engine/executor.h"

/* The kernels: the forward pass, and the gradient's three launches (row dot products
   Delta = rowsum(dO * O), then dK and dV, then dQ). */
enum { WGML_ATTN_FORWARD = 0, WGML_ATTN_DELTA, WGML_ATTN_DKV, WGML_ATTN_DQ, WGML_ATTN_KINDS };

/* One kernel variant: what the generator writes it for, and its pipeline key. Threads form
   rows / 4 lines of tx; each thread owns 4 rows of the workgroup's tile. */
typedef struct wgml_attn_kernel {
    int kind; /* WGML_ATTN_* */
    int d;    /* head dim */
    int dp;   /* d padded (a multiple of tx): the width of a row in workgroup memory */
    int rows; /* forward and dQ: queries per workgroup; dK/dV: keys per workgroup */
    int cols; /* forward and dQ: keys per step; dK/dV: queries per step */
    int tx;   /* threads per line: along cols in the score tile, along D in the accumulator */
    bool vec; /* q, k, v and dO are read as vec4 (rows aligned to 4 floats) */
    int pre;  /* the next step's global loads issued before this step's sums: bits 1 (K) and 2 (V)
                 of the forward, 4 of dK/dV (Q, dO), 8 of dQ (K, V); bit 32: the forward's row maxima
                 meet through subgroup shuffles (needs a line of lanes in one subgroup) */
    bool out16; /* dK/dV and dQ only: the gradient node stores halves (a cast to f16 of it, wgml_cast) */
} wgml_attn_kernel;

/* WGSL pieces both generators write (ops/attention/attention_wgsl.c): the parameter block
   (binding 0) and the constants D, DP4 and LN2; an input binding of floats (vec4 or one at a
   time); fn ld_<x>(base, c4), vec4 c4 of a row of `buf` (zeros past D, checked where the rows
   are padded or read one at a time); a tile of `rows` queries from i0: its keys' end (causal)
   and `ntiles` steps of `cols`; a workgroup's (batch, head) and row offsets into Q, K and V (and
   rb, dO's for the gradients) for a tile of `rows` queries, longest (causal) first, or of `rows`
   keys of one key/value head; the forward's bindings (Q, K, V, O) and loaders; the gradient
   kernels' bindings (Q, K, V, dO, L, Delta, out: of f16 with out16, which needs `enable f16`)
   and loaders. */
struct wgml_sbuf;
void wgml_attn_put_params(struct wgml_sbuf *b, int d, int dp4);
void wgml_attn_put_input(struct wgml_sbuf *b, int binding, const char *name, bool vec);
void wgml_attn_put_loader(struct wgml_sbuf *b, const char *x, const char *buf, bool vec, bool padded);
void wgml_attn_put_key_range(struct wgml_sbuf *b, int rows, int cols);
void wgml_attn_put_query_tile(struct wgml_sbuf *b, int rows, bool grads, bool tile_major);
void wgml_attn_put_key_tile(struct wgml_sbuf *b, int rows);
void wgml_attn_put_forward_bindings(struct wgml_sbuf *b, bool vec, bool padded);
void wgml_attn_put_grad_bindings(struct wgml_sbuf *b, bool vec, bool padded, bool out16);

/* The WGSL of kernel k (the caller frees it; NULL when out of memory). */
char *wgml_attn_source(const wgml_attn_kernel *k);
/* Bytes of workgroup memory kernel k declares. */
uint64_t wgml_attn_shared_bytes(const wgml_attn_kernel *k);
/* The loop iterations of one step of kernel k (a tile of keys or queries), or of the whole
   Delta kernel: the launch's loop_trips are the steps times this. */
uint64_t wgml_attn_step_trips(const wgml_attn_kernel *k);

/* KERNEL entries of the op table */
wgml_status wgml_build_attention(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);
wgml_status wgml_build_attention_grad(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count);
wgml_status wgml_vjp_attention(wgml_context *ctx, wgml_tensor *t, wgml_tensor *g, wgml_tensor **gin);

/* The gradient node of forward node fwd (a WGML_OP_ATTENTION node) for upstream gradient
   dout (q's shape): one flat tensor [dQ | dK | dV], each laid out as contiguous q, k, v
   ([B,H,T,D], [B,Hkv,S,D]); where fwd was packed (wgml_attention_desc.packed), the packed
   tensor's gradient [B,T,H+2Hkv,D] instead (the same number of elements). */
wgml_tensor *wgml_attention_grad(wgml_context *ctx, wgml_tensor *fwd, wgml_tensor *dout);

#endif
