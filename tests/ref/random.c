/* The CPU reference of the random ops over the library's Philox4x32-10 (cpu/philox.h states
   the counter mapping); declared in ref/ref.h. */
#include <math.h>

#include "cpu/philox.h"
#include "ref/ref.h"

static const double two_pi = 6.283185307179586476925286766559;

void wgml_philox_block(uint64_t seed, uint64_t offset, uint64_t j, uint32_t out[4])
{
    uint64_t b = offset + j; /* wraps mod 2^64, as the kernel's carry does */
    const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    wgml_philox4x32_10(ctr, key, out);
}

uint64_t wgml_philox_blocks(int64_t n) { return n > 0 ? ((uint64_t)n + 3) / 4 : 0; }

void wgml_ref_rand(uint64_t seed, uint64_t offset, int64_t n, float lo, float hi, float *out)
{
    float range = hi - lo, below = nextafterf(hi, -INFINITY);
    uint32_t w[4];
    for (int64_t i = 0; i < n; i++) {
        if (i % 4 == 0) wgml_philox_block(seed, offset, (uint64_t)i / 4, w);
        float u = (float)(w[i % 4] >> 8) * 0x1p-24f;
        /* separate statements: a compiler may fuse a * b + c within one expression */
        float t = range * u;
        float y = lo + t;
        out[i] = y < below ? y : below;
    }
}

void wgml_ref_randn(uint64_t seed, uint64_t offset, int64_t n, double mean, double std, double *out)
{
    uint32_t w[4];
    for (int64_t i = 0; i < n; i += 2) {
        if (i % 4 == 0) wgml_philox_block(seed, offset, (uint64_t)i / 4, w);
        int m = (int)(i % 4);
        double u1 = ((w[m] >> 8) + 1) * 0x1p-24, t = two_pi * (w[m + 1] >> 8) * 0x1p-24;
        double r = sqrt(-2.0 * log(u1));
        out[i] = mean + std * r * cos(t);
        if (i + 1 < n) out[i + 1] = mean + std * r * sin(t);
    }
}

int wgml_ref_dropped(uint64_t seed, uint64_t offset, uint64_t i, float p)
{
    uint32_t w[4];
    wgml_philox_block(seed, offset, i / 4, w);
    return (w[i % 4] >> 8) * 0x1p-24 < (double)p;
}

float wgml_ref_dropout_scale(float p) { return p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f; }

void wgml_ref_dropout(uint64_t seed, uint64_t offset, int64_t n, const double *x, float p, double *out)
{
    double scale = wgml_ref_dropout_scale(p);
    uint32_t w[4];
    for (int64_t i = 0; i < n; i++) {
        if (i % 4 == 0) wgml_philox_block(seed, offset, (uint64_t)i / 4, w);
        out[i] = (w[i % 4] >> 8) * 0x1p-24 < (double)p ? 0.0 : x[i] * scale;
    }
}
