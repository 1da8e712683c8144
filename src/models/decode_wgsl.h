/* WGSL generators of the decode plan's kernels (models/decode_wgsl.c; the attention's in
   models/decode_attn_wgsl.c). Each returns malloc'ed source (NULL when out of memory). Bindings
   (group 0):
   gemv:   0 pass (uniform: R, S, temperature, seed), 1 picks (the head's rows), 2 x, 3 W,
           4 the layer's vectors (norm weights, biases), 5 out, 6 rows, 7 K cache, 8 V cache,
           14 the head's candidates (*bindings gets the mask of those the kernel declares)
   attn:   0 rows, 1 q, 2 K cache, 3 V cache, 4 out
   rope:   0 rows, 1 qkv, 2 frequencies, 3 K cache, 4 V cache, 5 vectors (qk_norm)
   embed:  0 pass, 1 rows, 2 the embedding, 3 positions (GPT-2), 4 x
   sample: 0 pass, 1 picks, 2 logits (or the head's candidates), 3 the decode rows, 4 tokens,
           5 the prefill rows */
#ifndef WGML_MODELS_DECODE_WGSL_H
#define WGML_MODELS_DECODE_WGSL_H

#include <stdint.h>

enum { DECODE_NORM_NONE, DECODE_NORM_LN, DECODE_NORM_RMS };
enum { DECODE_X_PLAIN, DECODE_X_SUM, DECODE_X_EMBED }; /* a GEMV's input rows: x; x + partial sums; the embedding */
enum { DECODE_OUT_PLAIN, DECODE_OUT_RESID, DECODE_OUT_GELU, DECODE_OUT_SWIGLU, DECODE_OUT_QKV };

/* out[r, n] = epilogue(sum_k prologue(x)[r, k] W[n, k] (+ bias[n])) for the pass's R rows
   (the head: its S picked rows), 256 / lpo outputs a workgroup of 256 threads, lpo along K each. */
typedef struct wgml_decode_gemv {
    unsigned K, KP, N; /* inputs, W's row stride (K rounded up to 8), outputs */
    unsigned RB;       /* rows summed together (each weight load serves them all) */
    unsigned kch;      /* inputs staged in workgroup memory at a time (multiple of 8) */
    unsigned xs, os;   /* row strides of x and out */
    int f16;           /* W holds halves */
    int norm;          /* DECODE_NORM_*: the prologue's norm of each x row (weights at norm_w, norm_b in vecs) */
    unsigned norm_w, norm_b;
    float eps;
    int bias; /* offset of the bias in vecs, or -1 */
    int epilogue;
    int head; /* x rows are picks[r] of the pass's S */
    int cand; /* the head's candidates: for each picked row r, each workgroup's best (noised as the sampler
                 would, rows at 6 giving slot and position) output and its index at binding 14,
                 cand[r * workgroups + workgroup] = (value, bits of the index) */
    unsigned qd, kvd, block; /* DECODE_OUT_QKV: outputs below qd are q; then K and V into the caches */
    int f16c;                /* the caches hold halves (WGSL's f16: the adapter has shader-f16) */
    int xsrc;                /* DECODE_X_*: SUM adds np partials (binding 9, ps apart, rows as x's); EMBED
                                reads the embedding (12, e_f16, row stride ekp) and positions (11) */
    unsigned np, ps, ekp;
    int e_f16, positions;
    int persist; /* workgroup 0 writes the rows it read (before the norm) to binding 10 */
    unsigned lpo; /* lanes summing an output (8, 16, 32, 64 or 128; 0: 32): 256 / lpo outputs a workgroup */
    int sg;       /* the lanes' sums and the norm's statistics by subgroup shuffles (the adapter has subgroups):
                     a barrier each, not a tree of a barrier a round */
    unsigned rgroups; /* the rows in this many groups over the grid's y (workgroup y takes RB rows from y RB, then
                         every RB rgroups-th; 0 or 1: one) */
    unsigned nr;  /* rows a group of lpo lanes sums (0 or 1: one), OPW = 256 / lpo apart: a tile of OPW nr rows, each
                     staged x read once for nr rows */
    int planes;   /* f16 weights: x staged with each row's even vec4s first, its odd ones after, so a lane's
                     reads of the inputs of its weight unit are two runs of neighbouring 16-byte loads (in
                     place, lanes 32 bytes apart meet each bank twice a quarter warp by NVIDIA's rules: worked out, not
                     counted; the speed-up is measured, docs/MEASUREMENTS.md) */
    unsigned hwg; /* with norm, x in one chunk: this many workgroups, each staging x once and going over
                     tiles of 256 / lpo rows (grid stride), the next tile's loads issued before this one's
                     sums; the head's candidates then hwg a row (0: a workgroup a tile) */
} wgml_decode_gemv;
char *wgml_decode_gemv_wgsl(const wgml_decode_gemv *k, uint32_t *bindings);
/* Tiles of a GEMV of N outputs at lpo lanes an output and nr rows a lane group (a tile: 256 / lpo
   groups of nr rows), as its kernel counts them */
static inline uint32_t wgml_decode_gemv_tiles(uint64_t N, unsigned lpo, unsigned nr)
{
    const uint64_t per = 256 / lpo * (nr > 1 ? nr : 1);
    return (uint32_t)((N + per - 1) / per);
}

/* Attention of a row's G query heads (those of one K/V head) over its slot's cache positions
   0 .. its position; a workgroup per (row, K/V head): a thread per position for the scores,
   then threads sharing each output over every PARTS-th position. */
typedef struct wgml_decode_attn {
    unsigned D, G, kvd, block, qs, as;
    float scale;
    /* the output projection fused: partial[g] (binding 7, ps apart, rows of C) = the group's heads
       times their rows of wo (binding 5, [A, C] as the model holds it, row stride cp, f16 or not),
       plus, for group 0, the bias at vecs (6) offset bias (-1: none) */
    int wo_fused, f16, bias;
    unsigned C, cp, ps;
    unsigned cols; /* wo_fused: the projection's columns in this many blocks, a workgroup each (grid y Hkv cols),
                      each working out its group's attention again (0: 1) */
    unsigned wgs; /* threads a workgroup, a power of two from 256 (0: 256): more for more loads in flight */
    unsigned max_parts; /* at most this many threads share an output (0: as many as there are; tests) */
    /* Llama decoding (each row its own slot): this row's heads of the group normed (qk_norm,
       weights at vecs (6) offsets qnorm, knorm) and rotated (frequencies at 8) first, k and v
       appended, so no launch of its own; hq query heads in all */
    int rope, qk_norm;
    unsigned hq, qnorm, knorm;
    /* GPT-2 decoding with the QKV worked out by the previous layer's block (wgml_decode_block's
       Q): this row's k and v appended in the prologue, as with rope, but not rotated */
    int append;
    float eps;
    /* chunk > 0 (not with wo_fused): split over positions, a workgroup per (row, K/V head,
       chunk of this many positions): grid (rows, Hkv NS), NS = ceil(block / chunk); each
       writes its heads' unnormalised sums to binding 4 (G D floats) and their (max, sum of
       exponentials) to binding 9, at ((row Hkv + g) NS + chunk) G + head; chunks past the
       row's position stay empty (wgml_decode_attn_combine_wgsl reads only the others) */
    unsigned chunk;
    /* with chunk: the last workgroup of a (row, K/V head) to finish combines the chunks itself
       into binding 10 (rows of as), counted by an atomic per (row, K/V head) at binding 11 that
       it resets; the sums and (max, sum) then pass as atomics. Only where storageBarrier is a
       device-scope fence (wgpu-native's naga: see the kernel), else the combine's launch. */
    int combine;
    /* with chunk and rope: the chunk's cache loads issued before the prologue where the shape
       takes it (wgml_decode_attn_early_fits; else after, as without) */
    int early;
    /* with early: the QK-norm's and the softmax's sums by subgroup operations (the adapter has
       subgroups), a barrier each instead of a tree of a barrier a round */
    int sg;
    int f16c; /* the caches hold halves (WGSL's f16), read into f32 */
} wgml_decode_attn;
/* Whether a, with early set, runs the early form within wg_bytes of workgroup memory (D a
   multiple of 8, the chunk and (G + 1) 64 fit the workgroup, its 5 WGS G more floats of
   workgroup memory and 2 D fit too): the plan asks before it picks the wider workgroup. */
int wgml_decode_attn_early_fits(const wgml_decode_attn *a, uint64_t wg_bytes);
/* Bytes of workgroup memory a's kernel declares in its other forms (unsplit, or split with the
   loads after the prologue), which the plan checks before it picks a chunk. */
uint64_t wgml_decode_attn_late_bytes(const wgml_decode_attn *a);
/* The split attention's chunks combined into each head's output (binding 10, rows of as):
   grid (rows, heads of G groups); bindings 0 rows, 4 sums, 9 (max, sum). */
char *wgml_decode_attn_combine_wgsl(const wgml_decode_attn *a);

/* GPT-2's MLP in one launch: FB hidden units a workgroup (norm of x + np partials, W1 rows of
   its transposed copy, bias, GELU), times their rows of W2 ([F, C], row stride cp), summed into
   partial[workgroup] (binding 14; workgroup 0 adds b2). Bindings as the GEMV's, W2 at 13. */
typedef struct wgml_decode_mlp {
    unsigned C, CP, F, FB, RB, np, ps;
    int f16;
    float eps;
    unsigned norm_w, norm_b, b1, b2;
} wgml_decode_mlp;
char *wgml_decode_mlp_wgsl(const wgml_decode_mlp *m);

/* How the grid block's phases wait for the one before (wgml_decode_block.wait). Past the
   barrier, each phase's outputs carry in their lowest bit whether they are this launch's (x: 0
   from the projection, 1 from down, and 1 as the launch finds it, which the embedding's tag
   sees to; h: 0, each word set to 1 at the launch's start, before any workgroup's first write of
   x, by a fence each side), and a staging reads its words again until all carry the tag it
   waits for; x and h lose their last bit to it. */
typedef enum wgml_grid_wait {
    WGML_GRID_WAIT_BARRIER, /* a barrier across the grid: fences, the arrivals at K counters, the waits */
    WGML_GRID_WAIT_TAGGED,  /* the barrier's arrivals and waits without its fences, the outputs tagged */
    WGML_GRID_WAIT_PROBED   /* no arrivals: a few threads of each workgroup read a word of each line of
                               the tagged outputs until all are this launch's (wgml_decode_block_rows_everywhere) */
} wgml_grid_wait;

/* Llama decoding at batch 1: the layer's output projection plus the residual, its norm with
   gate/up and SwiGLU, its down projection plus the residual (and with Q the next layer's norm
   and QKV) in one launch of W workgroups (a power of two, all resident at once), each phase
   waiting for the one before across the grid (wait): binding 8 holds the arrival counters
   (which the kernel never resets: their counts stay multiples of W / K), word 1, which a wait
   that gives up sets (and any other wait reads, and then gives up too), and word 2, the
   bound on a wait's rounds. Bindings: 1 the attention's output (A), 2 x (C, read and written as
   atomics: other workgroups' writes are read across the waits), 3 wo, 4 gate/up interleaved, 5
   down (rows of an output, round8(K) wide, f16 or f32), 6 the vectors (the norm's weights at
   norm_w), 7 h (F, atomics). Needs storageBarrier to be a device-scope fence (wgpu-native's
   naga; see the split attention's combine). With ln, GPT-2's layer instead: LayerNorms (their
   biases at norm_b, and C past the next layer's weights), a GELU MLP of F units (binding 4 F
   rows, not 2 F), and each matrix's bias added (bo, b1, b2 in binding 6; the next QKV's at bq
   of binding 10). */
typedef struct wgml_decode_block {
    unsigned A, C, F, W, norm_w;
    unsigned Q; /* > 0: a fourth phase, the next layer's norm (weights at binding 10, offset 0) and QKV
                   (binding 9, Q rows) into binding 11 */
    int f16, sg;
    float eps;
    int ln;
    unsigned norm_b, bo, b1, b2, bq;
    int planes; /* f16: x staged in planes, as wgml_decode_gemv's */
    unsigned K; /* the arrivals spread over K counters (a power of two up to W and 256; 0 or 1: word 0 alone): workgroup g
                   adds to counter g % K, at word 64 (g % K) (word 0 for the first), and the workgroup's
                   threads t < K each wait for counter t */
    wgml_grid_wait wait; /* how a phase waits for the one before */
} wgml_decode_block;
/* Whether every workgroup of k's grid has rows in each phase that a later one waits on (the
   projection and down: C rows; gate/up): the probed form's waits need it, since only a phase's
   outputs order one workgroup's stagings after another's, and none waits for a workgroup
   without rows */
int wgml_decode_block_rows_everywhere(const wgml_decode_block *k);
/* Bytes of workgroup memory k's kernel declares */
uint64_t wgml_decode_block_bytes(const wgml_decode_block *k);
char *wgml_decode_block_wgsl(const wgml_decode_block *k);
char *wgml_decode_attention_wgsl(const wgml_decode_attn *a);

/* Llama: each head of a row's q and k normed (qk_norm) and rotated, q in place, k and v into the
   caches at the row's position; a workgroup per (row, head of H + Hkv). */
typedef struct wgml_decode_rope {
    unsigned D, H, Hkv, qs, block;
    int qk_norm;
    unsigned qnorm, knorm; /* offsets of their weights in vecs */
    float eps;
    int f16c; /* the caches hold halves */
} wgml_decode_rope;
char *wgml_decode_rope_wgsl(const wgml_decode_rope *k);

typedef struct wgml_decode_embed {
    unsigned C, KP;
    int f16, positions;
    int tag; /* x's lowest bit set, as the grid block's tag form expects of it */
} wgml_decode_embed;
char *wgml_decode_embed_wgsl(const wgml_decode_embed *k);

/* A token per picked row: the argmax of its logits, or with the pass's temperature > 0 of
   logits / temperature + Gumbel noise; written into the slot's decode row (position + 1,
   count + 1) and its ring of CAP tokens. */
typedef struct wgml_decode_sample {
    unsigned V, cap;
    unsigned cands; /* > 0: not the V logits but that many candidates a row (the head's, binding 2) */
    int prefill; /* the rows are the prefill pass's */
    unsigned wgs; /* threads (a power of two, 0: 256): 1024 where allowed, as a vocabulary is long */
} wgml_decode_sample;
char *wgml_decode_sample_wgsl(const wgml_decode_sample *k);

#endif
