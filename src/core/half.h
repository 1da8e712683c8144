/* IEEE half <-> f32 on the host, one of each for the whole library: an f32 rounded to the
   nearest half (ties to even; subnormals kept, +-infinity from 65520 up, NaN stays a quiet
   NaN), and a half widened to f32 (exact: every half is an f32), branch-free so that loops
   over it vectorise. */
#ifndef WGML_CORE_HALF_H
#define WGML_CORE_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t wgml_f32_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded (exact in float) */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    }
    uint32_t h = (ax - 0x38000000u) >> 13, rest = ax & 0x1fffu; /* exponent rebiased, 10 bits kept */
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* normal values by moving the exponent, subnormals as integers times 2^-24, infinities and
   NaN by their bits (masks, not ?:, which gcc leaves as branches) */
static inline float wgml_half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t normal = (em + ((127u - 15u) << 10)) << 13, special = (em << 13) | 0x7f800000u, bits;
    float sub = (float)em * 0x1p-24f, f;
    memcpy(&bits, &sub, 4);
    uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u), is_normal = (0u - (uint32_t)(em >= 0x400u)) & ~is_special;
    bits = (special & is_special) | (normal & is_normal) | (bits & ~(is_special | is_normal));
    bits |= sign;
    memcpy(&f, &bits, 4);
    return f;
}

#endif
