/*
 * Fused attention on subgroup matrices (the GPU's matrix units through Dawn's
 * chromium_experimental_subgroup_matrix): the WGSL of the forward, dK/dV and dQ kernels, f16
 * operands, f32 sums and f32 softmax statistics. They read the SIMT kernels' parameter block
 * and bindings (ops/attention/attention_wgsl.c) and write the same results, so the op
 * (ops/attention/attention.c) picks either per launch and Delta stays the SIMT kernel's.
 * Self-contained (core/sbuf only) for the structure test.
 */
#ifndef WGML_OPS_ATTENTION_ATTENTION_SGMAT_WGSL_H
#define WGML_OPS_ATTENTION_ATTENTION_SGMAT_WGSL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wgml_attn_sgmat {
    int kind; /* WGML_ATTN_FORWARD, WGML_ATTN_DKV or WGML_ATTN_DQ (ops/attention/attention.h) */
    int d;    /* head dim (1..128) */
    /* the adapter's f16 -> f32 matrix shape (left sm_m x sm_k, right sm_k x sm_n), each 8 or 16 */
    int sm_m, sm_n, sm_k;
    int subgroup_size;
    int subgroups; /* per workgroup: each owns sm_m rows (queries; keys in dK/dV) */
    int cols;      /* keys per step (forward, dQ), queries per step (dK/dV): a multiple of 16 */
    bool vec;      /* q, k, v and dO are read as vec4 (rows aligned to 4 floats) */
    /* each step's tiles are read from memory into registers (as f16) during the previous
       step's products, and stored into workgroup memory at the top of the step */
    bool prefetch;
    /* two staging buffers for the tiles of the walk, used in turn: a step stores into the one
       the last step's products did not read, so the barrier at the top of each step goes */
    bool stage2;
    /* the forward and dQ: P (dS in dQ) written into xs over the step's tile whose products are
       done (K in the forward, staged after V; V in dQ) instead of a block of its own (ps), so the
       workgroup declares less memory; not with stage2 */
    bool p_in_xs;
    /* the forward and dQ: the rows kept (Q; dO) staged half their columns at a time (where a
       half is whole K steps), so they need half the room in xs (the walk's tiles may need more) */
    bool kept_halves;
    /* the forward and dQ: workgroups in tile-major order (every head's first tile, then every
       head's second...) instead of a head's tiles together */
    bool tile_major;
    /* whole tiles of results are stored straight from the matrix units (where d is a multiple
       of 16); the output binding must then hold a 16 x 16 f32 fragment at least */
    bool direct;
    /* the forward in one walk over the keys: P = exp2(S - m) against a per-row reference m that
       moves only when a row's max passes it by more than 8 (log2 units; P <= 256 in f16), O's
       accumulators then rescaled through workgroup memory; O / l on the way out. Without it,
       two walks: the row statistics first, then P = exp2(S - L) exactly */
    bool one_pass;
    /* plain-WGSL stand-ins for the matrix builtins and subgroup ids, in which every invocation
       computes its subgroup's whole matrices: the kernels' indexing, staging, masks and
       softmax run on an adapter without matrix units (lavapipe), slowly */
    bool emulate;
    /* dK/dV and dQ only (a problem on the forward): the gradient node stores halves (a cast to f16 of it); the results then
       leave through the f32 block, converted (a matrix store writes its own component type) */
    bool out16;
    /* dK/dV and dQ: the lanes read the f32 score block (and write P, dS) in what is likely the
       result fragment's layout on NVIDIA: 4 lanes a row, rows lane / 4 + 8 k, each lane two adjacent
       columns at 2 (lane % 4) + 8 j, so a lane's pairs are 8-byte reads and 4-byte f16 stores;
       score rows cols + 8 floats apart (without it: subgroup_size / sm_m lanes a row, columns
       lane % lanes + lanes j, rows cols + 4 apart) */
    bool quads;
    /* the forward with two lanes a row: each lane takes pairs of adjacent columns, 2 (lane % 2)
       + 4 j and the next, so its reads of the score block are 8-byte loads and its P 4-byte
       stores (half the instructions, in the H200 driver's SASS); score rows cols + 4 floats
       apart, where those reads meet no bank twice by NVIDIA's bank rules (worked out) */
    bool pairs;
    /* the one-walk forward: each step's P written against the row's reference before the vote
       on rescaling (written again in the rescaling branch), so the vote's barriers order P
       before P V and the barrier between them goes */
    bool p_early;
    /* the one-walk forward with prefetch: the first K and V tile and every part of the kept
       rows (Q) read from memory before any is staged, so their latencies overlap */
    bool front_loads;
} wgml_attn_sgmat;

/* The workgroup's rows (queries, or keys in dK/dV), threads and head dim padded to 16 */
static inline int wgml_attn_sgmat_rows(const wgml_attn_sgmat *c) { return c->subgroups * c->sm_m; }
static inline int wgml_attn_sgmat_threads(const wgml_attn_sgmat *c) { return c->subgroups * c->subgroup_size; }
static inline int wgml_attn_sgmat_dp(const wgml_attn_sgmat *c) { return (c->d + 15) / 16 * 16; }

/* NULL when the config can be generated, else why not (a static string). */
const char *wgml_attn_sgmat_problem(const wgml_attn_sgmat *c);
/* Bytes of workgroup memory the kernel declares. */
uint32_t wgml_attn_sgmat_shared_bytes(const wgml_attn_sgmat *c);
/* The WGSL, or NULL (a config problem or out of memory); the caller frees it. */
char *wgml_attn_sgmat_source(const wgml_attn_sgmat *c);

#endif
