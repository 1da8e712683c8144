/*
 * philox.h — Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
 * 1, 2, 3", SC11), the counter-based generator behind wgml's random ops, and the CPU
 * reference of those ops (ops/random.c builds them, ops/random.wgsl runs them) that
 * the tests compare with.
 *
 * The counter mapping (wgml.h says the same to users): a random op of n elements made when
 * its context's generator state is (seed, offset) draws element i from the Philox block
 *     key     = (seed mod 2^32, seed >> 32)
 *     counter = (b mod 2^32, b >> 32, 0, 0),  b = offset + floor(i / 4)  (mod 2^64)
 * taking the block's 32-bit word i % 4; the op then advances offset by ceil(n / 4). The
 * ops use the top 24 bits of a word, w >> 8, as the integer k of the uniform u = k 2^-24
 * (exact in f32).
 *
 * Plain C11, no global state; nothing here prints, allocates or aborts.
 */
#ifndef WGML_CPU_PHILOX_H
#define WGML_CPU_PHILOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox4x32-10 block: ten rounds of the counter under the key (bumped between rounds
   by the Weyl constants). Random123's known-answer vectors hold for it. */
void wgml_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The block of elements 4j .. 4j + 3 of an op made at (seed, offset), as the mapping above. */
void wgml_philox_block(uint64_t seed, uint64_t offset, uint64_t j, uint32_t out[4]);

/* The blocks an op of n elements uses: ceil(n / 4). */
uint64_t wgml_philox_blocks(int64_t n);

/* out is (n,): wgml_rand's values bit for bit: u = (w >> 8) 2^-24, lo + (hi - lo) u with
   each operation rounded in f32 (no fused multiply-add), held below hi (at most the largest
   float under hi). */
void wgml_ref_rand(uint64_t seed, uint64_t offset, int64_t n, float lo, float hi, float *out);

/* out is (n,): wgml_randn's values in double: words 2m and 2m + 1 of a block give elements
   2m and 2m + 1 as mean + std r cos(t) and mean + std r sin(t), with r = sqrt(-2 ln u1),
   u1 = ((w_2m >> 8) + 1) 2^-24 in (0, 1] (so never ln 0) and t = 2 pi (w_2m+1 >> 8) 2^-24. */
void wgml_ref_randn(uint64_t seed, uint64_t offset, int64_t n, double mean, double std, double *out);

/* Whether wgml_dropout with probability p drops element i: u = (w >> 8) 2^-24 < p. */
int wgml_ref_dropped(uint64_t seed, uint64_t offset, uint64_t i, float p);
/* The factor dropout scales kept elements by: 1 / (1 - p) rounded to f32 once; 0 for p = 1. */
float wgml_ref_dropout_scale(float p);
/* x and out are (n,): 0 where dropped, else x * scale (each product of a float x and the f32
   scale is exact in double, so rounding it to f32 gives the GPU's product). */
void wgml_ref_dropout(uint64_t seed, uint64_t offset, int64_t n, const double *x, float p, double *out);

#ifdef __cplusplus
}
#endif
#endif
