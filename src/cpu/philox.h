/*
 * philox.h — Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
 * 1, 2, 3", SC11), the counter-based generator behind wgml's random ops (ops/random.c
 * builds them, ops/random.wgsl runs them; the models' host-side masks call it here). The ops'
 * CPU reference, which the tests compare with, is the tests' (tests/ref/random.c).
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

#ifdef __cplusplus
}
#endif
#endif
