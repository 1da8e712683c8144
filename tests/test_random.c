/*
 * Random numbers on the GPU (ops/random.c, ops/random.wgsl) against the CPU Philox
 * (cpu/philox.c):
 *   - the Philox4x32-10 core gives Random123's known answers;
 *   - wgml_rand's values equal the reference bit for bit, for several seeds, offsets (a carry
 *     into the counter's high word, a wrap past 2^64) and sizes (1, 7, 1023, 65537), for
 *     consecutive calls (the offset advances by ceil(n / 4)) and after wgml_manual_seed; a
 *     value whose u is the largest below 1 stays below hi; random_bits_hash prints the FNV-1a
 *     hash of the first 2^20 values for seed 1234 (compare it between adapters);
 *   - wgml_randn within 1e-5 of the double reference (relative, floored at 0.1 std); 2^20
 *     values have no NaN or inf, |z| <= sqrt(2 ln 2^24), mean, std and the mass within one std
 *     within 5 standard errors;
 *   - wgml_dropout drops exactly the reference's elements and scales the rest by exactly
 *     1 / (1 - p) in f32; the dropped fraction of 2^20 within 5 standard errors of p; its
 *     gradient is the forward's mask times g / (1 - p) and agrees with central differences
 *     taken on the GPU (the perturbed input rebuilt at the same counters); a node evaluated
 *     twice gives the same values, two calls different masks; p = 0 and p = 1;
 *   - the initialisers' bounds and std from the shape ([in, out], leading receptive field);
 *   - bad input answered with WGML_ERROR_INVALID_ARGUMENT and no counters taken.
 * The statistical bounds are deterministic: the seeds are fixed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/philox.h"
#include "ref/ref.h"
#include "harness.h"

#define BIG (1 << 20)

static const int64_t sizes[] = {1, 7, 1023, 65537};

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* the first index where got and want differ in bits, or -1 */
static int64_t first_bit_difference(const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (bits_of(got[i]) != bits_of(want[i])) return i;
    return -1;
}

static void state_is(wgml_context *ctx, uint64_t seed, uint64_t offset, const char *when)
{
    uint64_t s = 0, o = 0;
    CHECK_OK(ctx, wgml_rng_get_state(ctx, &s, &o));
    if (s != seed || o != offset) {
        fprintf(stderr, "FAIL %s: %s: state (%llu, %llu), want (%llu, %llu)\n", test_current, when, (unsigned long long)s,
                (unsigned long long)o, (unsigned long long)seed, (unsigned long long)offset);
        test_failures++;
    }
}

/* ---------------------------------------------------------------- the core */

static void philox_known_answers(void)
{
    /* Random123's kat_vectors, philox4x32 10: counter, key, expected */
    static const struct { uint32_t ctr[4], key[2], want[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int k = 0; k < N_OF(kat); k++) {
        uint32_t out[4];
        wgml_philox4x32_10(kat[k].ctr, kat[k].key, out);
        for (int j = 0; j < 4; j++)
            if (out[j] != kat[k].want[j]) {
                fprintf(stderr, "FAIL %s: vector %d word %d: %08x, want %08x\n", test_current, k, j, out[j], kat[k].want[j]);
                test_failures++;
            }
    }
    /* the mapping: block j of (seed, offset) is counter offset + j under key seed */
    uint32_t a[4], b[4];
    wgml_philox_block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull - 5, 5, a);
    const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0, 0}, key[2] = {0xa4093822, 0x299f31d0};
    wgml_philox4x32_10(ctr, key, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* ---------------------------------------------------------------- uniform */

/* rand(lo, hi) of n elements built at (seed, offset): equal to the reference bit for bit */
static void uniform_case(wgml_context *ctx, uint64_t seed, uint64_t offset, int64_t n, float lo, float hi)
{
    float *want = malloc((size_t)n * sizeof *want);
    if (!want) return;
    wgml_ref_rand(seed, offset, n, lo, hi, want);
    CHECK_OK(ctx, wgml_rng_set_state(ctx, seed, offset));
    wgml_tensor *t = wgml_rand(ctx, 1, &n, lo, hi);
    state_is(ctx, seed, offset + wgml_philox_blocks(n), "after rand");
    float *got = test_read_new(ctx, "read", t, n);
    if (got) {
        int64_t at = first_bit_difference(got, want, n);
        if (at >= 0) {
            fprintf(stderr, "FAIL %s: rand(%g, %g) of %lld at seed %llu offset %llu: element %lld is %.9g (%08x), want %.9g (%08x)\n",
                    test_current, lo, hi, (long long)n, (unsigned long long)seed, (unsigned long long)offset, (long long)at,
                    got[at], bits_of(got[at]), want[at], bits_of(want[at]));
            test_failures++;
        }
        for (int64_t i = 0; i < n; i++)
            if (!(got[i] >= lo && got[i] < hi)) {
                fprintf(stderr, "FAIL %s: rand(%g, %g): element %lld is %.9g\n", test_current, lo, hi, (long long)i, got[i]);
                test_failures++;
                break;
            }
    }
    free(got);
    free(want);
    wgml_tensor_free(t);
}

static void uniform_bits_match_the_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const uint64_t seeds[] = {0, 1, 1234, 0xdeadbeefcafef00dull};
    /* 0xfffffffe: the blocks cross into the counter's high word; 2^64 - 3 wraps to 0 */
    const uint64_t offsets[] = {0, 5, 0xfffffffeull, 0xfffffffffffffffdull};
    for (int s = 0; s < N_OF(seeds); s++)
        for (int o = 0; o < N_OF(offsets); o++)
            for (int k = 0; k < N_OF(sizes); k++) uniform_case(ctx, seeds[s], offsets[o], sizes[k], 0.0f, 1.0f);
    /* other bounds: the f32 product and sum, held below hi */
    uniform_case(ctx, 7, 0, 65537, -3.0f, 5.0f);
    uniform_case(ctx, 7, 3, 1023, 1.0f, 2.0f);
    uniform_case(ctx, 8, 0, 65537, -1e-3f, 2.5e-3f);
}

/* u = 1 - 2^-24, the largest, makes 1 + u round to 2: the value is held at the float below 2 */
static void uniform_stays_below_hi(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    uint64_t seed = 1234, j = 0;
    uint32_t w[4];
    int lane = -1;
    for (; j < (1ull << 28) && lane < 0; j++) {
        wgml_philox_block(seed, 0, j, w);
        for (int k = 0; k < 4 && lane < 0; k++)
            if (w[k] >> 8 == 0xffffff) lane = k;
    }
    if (lane < 0) {
        fprintf(stderr, "FAIL %s: no word with u = 1 - 2^-24 in 2^28 blocks\n", test_current);
        test_failures++;
        return;
    }
    j--; /* the loop stepped past it */
    CHECK_OK(ctx, wgml_rng_set_state(ctx, seed, j));
    int64_t n = 4;
    wgml_tensor *t = wgml_rand(ctx, 1, &n, 1.0f, 2.0f);
    float got[4];
    CHECK_OK(ctx, wgml_tensor_read(t, got, 4));
    CHECK(got[lane] == nextafterf(2.0f, 0.0f));
    fprintf(stderr, "  block %llu word %d: u = 1 - 2^-24 gives %.9g in [1, 2)\n", (unsigned long long)j, lane, got[lane]);
    wgml_tensor_free(t);
    uniform_case(ctx, seed, j, 4, 1.0f, 2.0f);
}

static void consecutive_calls_and_manual_seed(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 1023;
    CHECK_OK(ctx, wgml_manual_seed(ctx, 42));
    state_is(ctx, 42, 0, "after wgml_manual_seed");
    wgml_tensor *a = wgml_rand(ctx, 1, &n, 0, 1), *b = wgml_rand(ctx, 1, &n, 0, 1);
    state_is(ctx, 42, 2 * 256, "after two rand of 1023");
    /* built after a reset, evaluated before the first two: the same numbers as the first */
    CHECK_OK(ctx, wgml_manual_seed(ctx, 42));
    wgml_tensor *c = wgml_rand(ctx, 1, &n, 0, 1);
    float *gc = test_read_new(ctx, "read", c, n), *ga = test_read_new(ctx, "read", a, n), *gb = test_read_new(ctx, "read", b, n);
    float *wa = malloc((size_t)n * sizeof *wa), *wb = malloc((size_t)n * sizeof *wb);
    if (ga && gb && gc && wa && wb) {
        wgml_ref_rand(42, 0, n, 0, 1, wa);
        wgml_ref_rand(42, 256, n, 0, 1, wb);
        CHECK(first_bit_difference(ga, wa, n) < 0);
        CHECK(first_bit_difference(gb, wb, n) < 0);
        CHECK(first_bit_difference(gc, wa, n) < 0);
        CHECK(first_bit_difference(ga, gb, n) == 0); /* the two calls differ */
    }
    /* evaluated again (now storage): the same */
    float *again = test_read_new(ctx, "read", a, n);
    if (again && ga) CHECK(first_bit_difference(again, ga, n) < 0);
    free(again);
    free(ga), free(gb), free(gc), free(wa), free(wb);
    wgml_tensor_free(a), wgml_tensor_free(b), wgml_tensor_free(c);

    /* a fresh context starts at the documented default */
    wgml_context *fresh = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &fresh));
    if (fresh) {
        state_is(fresh, 67280421310721ull, 0, "a fresh context");
        wgml_context_free(fresh);
    }
}

/* FNV-1a over bytes */
static uint64_t fnv1a(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The hash of the first 2^20 values of rand(0, 1) for seed 1234 (the f32 bits, little-endian
   as the GPU stores them): the same line on every adapter */
static void random_bits_hash(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = BIG;
    float *want = malloc((size_t)n * sizeof *want);
    if (!want) return;
    wgml_ref_rand(1234, 0, n, 0.0f, 1.0f, want);
    CHECK_OK(ctx, wgml_manual_seed(ctx, 1234));
    wgml_tensor *t = wgml_rand(ctx, 1, &n, 0.0f, 1.0f);
    float *got = test_read_new(ctx, "read", t, n);
    if (got) {
        wgml_adapter_info info;
        wgml_adapter_info_get(ctx, &info);
        uint64_t hg = fnv1a(got, (size_t)n * 4), hw = fnv1a(want, (size_t)n * 4);
        printf("philox hash seed 1234: %016llx (%s)\n", (unsigned long long)hg, info.name);
        if (hg != hw) {
            fprintf(stderr, "FAIL %s: the GPU's hash %016llx, the reference's %016llx\n", test_current, (unsigned long long)hg,
                    (unsigned long long)hw);
            test_failures++;
        }
    }
    free(got);
    free(want);
    wgml_tensor_free(t);
}

static void uniform_statistics(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = BIG;
    CHECK_OK(ctx, wgml_manual_seed(ctx, 99));
    wgml_tensor *t = wgml_rand(ctx, 1, &n, -1.0f, 3.0f);
    float *v = test_read_new(ctx, "read", t, n);
    if (v) {
        double sum = 0, below = 0;
        for (int64_t i = 0; i < n; i++) sum += v[i], below += v[i] < 0.0f;
        double mean = sum / (double)n, se = 4.0 / sqrt(12.0 * (double)n), frac = below / (double)n;
        fprintf(stderr, "  U(-1, 3): mean %.5f (1 +- %.5f), P(x < 0) %.5f (0.25)\n", mean, se, frac);
        CHECK(fabs(mean - 1.0) < 5 * se);
        CHECK(fabs(frac - 0.25) < 5 * sqrt(0.25 * 0.75 / (double)n));
    }
    free(v);
    wgml_tensor_free(t);
}

/* ---------------------------------------------------------------- normal */

/* |got - want| <= 1e-5 max(|want - mean|, 0.1 std) + 1e-6 |mean|: Box-Muller's r cos t near 0
   carries r's rounding (r up to 5.8) times a few 1e-7 of std */
static double normal_worst; /* over the cases */

static void normal_case(wgml_context *ctx, uint64_t seed, uint64_t offset, int64_t n, float mean, float std)
{
    double *want = malloc((size_t)n * sizeof *want);
    if (!want) return;
    wgml_ref_randn(seed, offset, n, mean, std, want);
    CHECK_OK(ctx, wgml_rng_set_state(ctx, seed, offset));
    wgml_tensor *t = wgml_randn(ctx, 1, &n, mean, std);
    state_is(ctx, seed, offset + wgml_philox_blocks(n), "after randn");
    float *got = test_read_new(ctx, "read", t, n);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; got && i < n; i++) {
        double err = fabs(got[i] - want[i]) / (fmax(fabs(want[i] - mean), 0.1 * std) + 0.1 * fabs(mean));
        if (!(err <= worst)) worst = err, at = i; /* NaN becomes the worst */
    }
    if (got) normal_worst = fmax(normal_worst, worst);
    if (got && !(worst <= 1e-5)) {
        fprintf(stderr, "FAIL %s: randn(%g, %g) of %lld: element %lld is %.9g, want %.9g (scaled error %.3g)\n", test_current,
                mean, std, (long long)n, (long long)at, got[at], want[at], worst);
        test_failures++;
    }
    free(got);
    free(want);
    wgml_tensor_free(t);
}

static void normal_matches_the_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    for (int k = 0; k < N_OF(sizes); k++) {
        normal_case(ctx, 5, 0, sizes[k], 0.0f, 1.0f);
        normal_case(ctx, 0xfeedull << 40, 0xfffffffeull, sizes[k], 3.0f, 0.5f);
    }
    normal_case(ctx, 6, 11, 65537, -2.0f, 0.0f); /* std 0: mean exactly */
    fprintf(stderr, "  worst error %.3g of the bound's scale (bound 1e-5)\n", normal_worst);
}

static void normal_statistics(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = BIG;
    CHECK_OK(ctx, wgml_manual_seed(ctx, 2024));
    wgml_tensor *t = wgml_randn(ctx, 1, &n, 0.0f, 1.0f);
    float *v = test_read_new(ctx, "read", t, n);
    if (v) {
        double sum = 0, sq = 0, within = 0, top = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(v[i])) bad++;
            sum += v[i], sq += (double)v[i] * v[i], within += fabs(v[i]) < 1.0f, top = fmax(top, fabs(v[i]));
        }
        double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean), frac = within / (double)n;
        double p1 = erf(1.0 / sqrt(2.0)); /* 0.6827 */
        fprintf(stderr, "  N(0, 1): mean %.5f, std %.5f, P(|z| < 1) %.5f (%.5f), max |z| %.3f, %lld not finite\n", mean, sd, frac,
                p1, top, (long long)bad);
        CHECK(bad == 0);
        CHECK(fabs(mean) < 5 / sqrt((double)n));
        CHECK(fabs(sd - 1) < 5 / sqrt(2.0 * (double)n));
        CHECK(fabs(frac - p1) < 5 * sqrt(p1 * (1 - p1) / (double)n));
        CHECK(top <= sqrt(2 * 24 * log(2.0)) * (1 + 1e-5)); /* u1 >= 2^-24 */
    }
    free(v);
    wgml_tensor_free(t);
}

/* ---------------------------------------------------------------- dropout */

/* n values of magnitude in [0.5, 2] with random signs (never 0, so 0 marks a drop) */
static float *nonzero_data(int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return NULL;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(test_uniform(0.5, 2.0) * (test_rand_u64() & 1 ? 1 : -1));
    return x;
}

/* dropout(x, p) built at (seed, offset): the reference's elements dropped, the others exactly
   x * f32(1 / (1 - p)) */
static void dropout_case(wgml_context *ctx, uint64_t seed, uint64_t offset, int64_t n, float p, int statistics)
{
    float *x = nonzero_data(n);
    if (!x) return;
    wgml_tensor *tx = test_tensor(ctx, 1, &n, x);
    CHECK_OK(ctx, wgml_rng_set_state(ctx, seed, offset));
    wgml_tensor *y = wgml_dropout(ctx, tx, p);
    state_is(ctx, seed, offset + wgml_philox_blocks(n), "after dropout");
    float *got = test_read_new(ctx, "read", y, n);
    float scale = (float)(1.0 / (1.0 - (double)p));
    int64_t dropped = 0, wrong = 0, first = -1;
    for (int64_t i = 0; got && i < n; i++) {
        int drop = wgml_ref_dropped(seed, offset, (uint64_t)i, p);
        float want = drop ? 0.0f : x[i] * scale;
        dropped += drop;
        if (bits_of(got[i]) != bits_of(want) && wrong++ == 0) first = i;
    }
    if (wrong) {
        fprintf(stderr, "FAIL %s: dropout(p = %g) of %lld: %lld elements differ, first %lld: %.9g, x %.9g\n", test_current, p,
                (long long)n, (long long)wrong, (long long)first, got[first], x[first]);
        test_failures++;
    }
    if (got && statistics) {
        double frac = (double)dropped / (double)n, se = sqrt(p * (1.0 - p) / (double)n);
        fprintf(stderr, "  dropout p = %.2f: dropped %.5f of %lld (+- %.5f)\n", p, frac, (long long)n, se);
        CHECK(fabs(frac - p) < 5 * se);
    }
    free(got);
    free(x);
    wgml_tensor_free(y);
    wgml_tensor_free(tx);
}

static void dropout_forward(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < N_OF(sizes); k++) dropout_case(ctx, 77, 3, sizes[k], 0.3f, 0);
    for (int k = 0; k < N_OF(ps); k++) dropout_case(ctx, 31 + (uint64_t)k, 0, BIG, ps[k], 1);
}

/* a non-contiguous input (a transposed view) is dropped in its own row-major order */
static void dropout_of_a_view(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t sh[2] = {5, 9}, n = 45;
    float *x = nonzero_data(n);
    if (!x) return;
    wgml_tensor *tx = test_tensor(ctx, 2, sh, x);
    CHECK_OK(ctx, wgml_manual_seed(ctx, 3));
    wgml_tensor *y = wgml_dropout(ctx, wgml_transpose(ctx, tx, 0, 1), 0.5f);
    float got[45];
    CHECK_OK(ctx, wgml_tensor_read(y, got, 45));
    float scale = 2.0f;
    for (int64_t i = 0; i < 9; i++)
        for (int64_t j = 0; j < 5; j++) {
            int64_t k = i * 5 + j; /* y[i][j] = x[j][i] */
            float want = wgml_ref_dropped(3, 0, (uint64_t)k, 0.5f) ? 0.0f : x[j * 9 + i] * scale;
            CHECK(bits_of(got[k]) == bits_of(want));
        }
    free(x);
    wgml_tensor_free(y);
    wgml_tensor_free(tx);
}

/* the first block at or after block 0 of seed holding a word whose top 24 bits are k, and the
   word's place in it (-1 when none within 2^28 blocks) */
static int find_word(uint64_t seed, uint32_t k, uint64_t *block)
{
    uint32_t w[4];
    for (uint64_t j = 0; j < (1ull << 28); j++) {
        wgml_philox_block(seed, 0, j, w);
        for (int lane = 0; lane < 4; lane++)
            if (w[lane] >> 8 == k) {
                *block = j;
                return lane;
            }
    }
    return -1;
}

/* u = p exactly (u = 0.5 for p = 0.5) is kept, the word one below dropped: u < p drops */
static void dropout_at_the_threshold(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    for (uint32_t k = 0x7fffff; k <= 0x800000; k++) {
        uint64_t j = 0;
        int lane = find_word(4321, k, &j);
        CHECK(lane >= 0);
        if (lane < 0) continue;
        int64_t n = 4;
        float x[4] = {1, 1, 1, 1}, got[4] = {0};
        wgml_tensor *tx = test_tensor(ctx, 1, &n, x);
        CHECK_OK(ctx, wgml_rng_set_state(ctx, 4321, j));
        wgml_tensor *y = wgml_dropout(ctx, tx, 0.5f);
        CHECK_OK(ctx, wgml_tensor_read(y, got, 4));
        CHECK(got[lane] == (k < 0x800000 ? 0.0f : 2.0f));
        fprintf(stderr, "  u = %.9g at block %llu word %d: %s\n", k * 0x1p-24, (unsigned long long)j, lane,
                got[lane] == 0.0f ? "dropped" : "kept");
        wgml_tensor_free(y);
        wgml_tensor_free(tx);
    }
}

/* sum(w * dropout(x, p)) at the counters (seed, 0), evaluated on the GPU */
static double loss_at(wgml_context *ctx, uint64_t seed, int64_t n, const float *x, const float *w, float p)
{
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_rng_set_state(ctx, seed, 0));
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, wgml_dropout(ctx, test_tensor(ctx, 1, &n, x), p), test_tensor(ctx, 1, &n, w)));
    float v = NAN;
    CHECK_OK(ctx, wgml_tensor_read(L, &v, 1));
    wgml_scope_end(ctx);
    return v;
}

static void dropout_backward(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t ns[] = {7, 1023, 65537};
    const float p = 0.4f, scale = (float)(1.0 / (1.0 - 0.4));
    for (int k = 0; k < N_OF(ns); k++) {
        int64_t n = ns[k];
        float *x = nonzero_data(n), *w = nonzero_data(n);
        if (!x || !w) return;
        wgml_scope_begin(ctx);
        wgml_tensor *tx = test_tensor(ctx, 1, &n, x);
        CHECK_OK(ctx, wgml_requires_grad(tx, 1));
        CHECK_OK(ctx, wgml_manual_seed(ctx, 500 + (uint64_t)k));
        wgml_tensor *y = wgml_dropout(ctx, tx, p);
        wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, y, test_tensor(ctx, 1, &n, w)));
        CHECK_OK(ctx, wgml_backward(L));
        state_is(ctx, 500 + (uint64_t)k, wgml_philox_blocks(n), "after backward (no counters of its own)");
        wgml_tensor *ev[2] = {y, wgml_grad(tx)};
        CHECK_OK(ctx, wgml_eval(ctx, 2, ev));
        float *gy = test_read_new(ctx, "read", y, n), *gg = ev[1] ? test_read_new(ctx, "read", ev[1], n) : NULL;
        CHECK(gg != NULL);
        int64_t wrong = 0;
        for (int64_t i = 0; gy && gg && i < n; i++) {
            float want = gy[i] == 0.0f ? 0.0f : w[i] * scale; /* x != 0: 0 marks the forward's drops */
            wrong += bits_of(gg[i]) != bits_of(want);
        }
        if (wrong) {
            fprintf(stderr, "FAIL %s: n = %lld: %lld gradient elements off the forward's mask\n", test_current, (long long)n,
                    (long long)wrong);
            test_failures++;
        }
        /* central differences on the GPU: the perturbed x dropped at the same counters */
        for (int s = 0; gg && n <= 1023 && s < 6; s++) {
            int64_t i = (int64_t)(test_rand_u64() % (uint64_t)n);
            float x0 = x[i], h = 1e-2f;
            x[i] = x0 + h;
            double lp = loss_at(ctx, 500 + (uint64_t)k, n, x, w, p);
            x[i] = x0 - h;
            double lm = loss_at(ctx, 500 + (uint64_t)k, n, x, w, p);
            x[i] = x0;
            double fd = (lp - lm) / (2.0 * h);
            /* the sums of n products round at ~1e-7 of their terms' total, divided by 2h */
            double tol = 1e-3 * (fabs(gg[i]) + 1) + 1e-7 * 2.0 * (double)n / (2.0 * h);
            if (!(fabs(fd - gg[i]) <= tol)) {
                fprintf(stderr, "FAIL %s: n = %lld: d/dx[%lld]: %.6g, central differences %.6g\n", test_current, (long long)n,
                        (long long)i, gg[i], fd);
                test_failures++;
            }
        }
        free(gy);
        free(gg);
        wgml_scope_end(ctx);
        free(x);
        free(w);
    }
}

static void dropout_repeats_and_differs(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 4099;
    float *x = nonzero_data(n);
    if (!x) return;
    wgml_scope_begin(ctx);
    wgml_tensor *tx = test_tensor(ctx, 1, &n, x);
    wgml_tensor *a = wgml_dropout(ctx, tx, 0.5f), *b = wgml_dropout(ctx, tx, 0.5f);
    /* a computed inside another graph first (it stays lazy), then as a target, then read from
       storage: the same values each time */
    float *gs = test_read_new(ctx, "read", wgml_add(ctx, a, b), n);
    float *ga = test_read_new(ctx, "read", a, n), *gb = test_read_new(ctx, "read", b, n), *again = test_read_new(ctx, "read", a, n);
    if (gs && ga && gb && again) {
        int64_t same = 0, sums = 0;
        for (int64_t i = 0; i < n; i++) {
            same += (ga[i] == 0) == (gb[i] == 0);
            sums += bits_of(gs[i]) == bits_of(ga[i] + gb[i]);
        }
        fprintf(stderr, "  two dropout calls agree on %lld of %lld elements' drops (half expected)\n", (long long)same,
                (long long)n);
        CHECK(same < n * 6 / 10 && same > n * 4 / 10);
        CHECK(sums == n);
        CHECK(first_bit_difference(ga, again, n) < 0);
    }
    free(ga), free(gb), free(gs), free(again);
    wgml_scope_end(ctx);
    free(x);
}

static void dropout_edges(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 1023;
    float *x = nonzero_data(n), *w = nonzero_data(n);
    if (!x || !w) return;
    wgml_scope_begin(ctx);
    wgml_tensor *tx = test_tensor(ctx, 1, &n, x);
    CHECK_OK(ctx, wgml_requires_grad(tx, 1));
    /* p = 0: a itself, no counters taken */
    CHECK_OK(ctx, wgml_manual_seed(ctx, 9));
    wgml_tensor *same = wgml_dropout(ctx, tx, 0.0f);
    state_is(ctx, 9, 0, "after dropout with p = 0");
    float *g = test_read_new(ctx, "read", same, n);
    if (g) CHECK(first_bit_difference(g, x, n) < 0);
    free(g);
    /* p = 1: zeros, and a zero gradient */
    wgml_tensor *none = wgml_dropout(ctx, tx, 1.0f);
    wgml_tensor *L = wgml_sum_all(ctx, wgml_mul(ctx, none, test_tensor(ctx, 1, &n, w)));
    CHECK_OK(ctx, wgml_backward(L));
    wgml_tensor *ev[2] = {none, wgml_grad(tx)};
    CHECK_OK(ctx, wgml_eval(ctx, 2, ev));
    float *z = test_read_new(ctx, "read", none, n), *gz = ev[1] ? test_read_new(ctx, "read", ev[1], n) : NULL;
    int64_t nonzero = 0;
    for (int64_t i = 0; z && gz && i < n; i++) nonzero += z[i] != 0.0f || gz[i] != 0.0f;
    CHECK(z && gz && nonzero == 0);
    free(z), free(gz);
    wgml_zero_grad(tx);
    wgml_scope_end(ctx);
    free(x), free(w);
}

/* ---------------------------------------------------------------- initialisers */

typedef wgml_tensor *(*init_fn)(wgml_context *, int, const int64_t *, float, wgml_fan_mode);
static wgml_tensor *xu(wgml_context *c, int nd, const int64_t *s, float g, wgml_fan_mode m) { return wgml_xavier_uniform(c, nd, s, g); }
static wgml_tensor *xn(wgml_context *c, int nd, const int64_t *s, float g, wgml_fan_mode m) { return wgml_xavier_normal(c, nd, s, g); }

/* The stream is the counter's third word: rand(0, 1) of stream 7 is (w >> 8) 2^-24 of the
   blocks with counter (b, 0, 7, 0), bit for bit; stream 0 is the plain mapping; a random op
   keeps the stream it was built with (as its seed and offset). */
static void streams_are_the_third_counter_word(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { N = 37 };
    float got[N], got0[N], again[N];
    wgml_scope_begin(ctx);
    CHECK(wgml_rng_stream(ctx) == 0);
    CHECK_OK(ctx, wgml_rng_set_stream(ctx, 7));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 99));
    wgml_tensor *r7 = wgml_rand(ctx, 1, (int64_t[]){N}, 0, 1);
    CHECK_OK(ctx, wgml_rng_set_stream(ctx, 0)); /* after building: r7 keeps stream 7 */
    CHECK_OK(ctx, wgml_tensor_read(r7, got, N));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 99));
    CHECK_OK(ctx, wgml_tensor_read(wgml_rand(ctx, 1, (int64_t[]){N}, 0, 1), got0, N));
    float want0[N];
    wgml_ref_rand(99, 0, N, 0, 1, want0);
    CHECK(memcmp(got0, want0, sizeof got0) == 0);
    int wrong = 0, same = 0;
    for (int i = 0; i < N; i++) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), 0, 7, 0}, key[2] = {99, 0}, w[4];
        wgml_philox4x32_10(ctr, key, w);
        wrong += got[i] != (float)(w[i % 4] >> 8) * (1.0f / 16777216.0f);
        same += got[i] == got0[i];
    }
    CHECK(wrong == 0);
    CHECK(same < N / 4);
    CHECK_OK(ctx, wgml_rng_set_stream(ctx, 7));
    CHECK_OK(ctx, wgml_manual_seed(ctx, 99));
    CHECK_OK(ctx, wgml_tensor_read(wgml_rand(ctx, 1, (int64_t[]){N}, 0, 1), again, N));
    CHECK(memcmp(got, again, sizeof got) == 0);
    CHECK_OK(ctx, wgml_rng_set_stream(ctx, 0));
    CHECK_STATUS(NULL, wgml_rng_set_stream(NULL, 1), WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_end(ctx);
}

static void initialisers(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    /* [in, out] = [512, 256]: fan_in 512, fan_out 256; [3, 3, 64, 32]: receptive field 9,
       fan_in 576, fan_out 288 */
    static const struct { int nd; int64_t sh[4]; double in, out; } shapes[] = {
        {2, {512, 256}, 512, 256},
        {4, {3, 3, 64, 32}, 576, 288},
    };
    static const struct { init_fn fn; const char *name; int normal, kaiming; } inits[] = {
        {xu, "xavier_uniform", 0, 0},
        {xn, "xavier_normal", 1, 0},
        {wgml_kaiming_uniform, "kaiming_uniform", 0, 1},
        {wgml_kaiming_normal, "kaiming_normal", 1, 1},
    };
    const float gain = 1.41421356f;
    for (int s = 0; s < N_OF(shapes); s++)
        for (int f = 0; f < N_OF(inits); f++)
            for (int mode = WGML_FAN_IN; mode <= (inits[f].kaiming ? WGML_FAN_OUT : WGML_FAN_IN); mode++) {
                double fan = mode == WGML_FAN_IN ? shapes[s].in : shapes[s].out;
                double in = shapes[s].in, out = shapes[s].out;
                /* the bound (uniform) or std (normal) of the documentation */
                double want = inits[f].kaiming ? (inits[f].normal ? gain / sqrt(fan) : gain * sqrt(3.0 / fan))
                                               : gain * sqrt((inits[f].normal ? 2.0 : 6.0) / (in + out));
                int64_t n = 1;
                for (int d = 0; d < shapes[s].nd; d++) n *= shapes[s].sh[d];
                CHECK_OK(ctx, wgml_manual_seed(ctx, 11));
                wgml_tensor *t = inits[f].fn(ctx, shapes[s].nd, shapes[s].sh, gain, (wgml_fan_mode)mode);
                CHECK(wgml_tensor_ndim(t) == shapes[s].nd && wgml_tensor_numel(t) == n);
                float *v = test_read_new(ctx, "read", t, n);
                if (!v) continue;
                /* exactly rand(-b, b) / randn(0, std) at the same counters */
                float b = (float)want;
                double sum = 0, sq = 0, top = 0;
                for (int64_t i = 0; i < n; i++) sum += v[i], sq += (double)v[i] * v[i], top = fmax(top, fabs(v[i]));
                double sd = sqrt(sq / (double)n - (sum / (double)n) * (sum / (double)n));
                double want_sd = inits[f].normal ? want : want / sqrt(3.0);
                fprintf(stderr, "  %s %s mode %d: %s %.5f, sample std %.5f (%.5f), max |x| %.5f\n", inits[f].name,
                        shapes[s].nd == 2 ? "[512,256]" : "[3,3,64,32]", mode, inits[f].normal ? "std" : "bound", want, sd,
                        want_sd, top);
                CHECK(fabs(sd / want_sd - 1) < 5 / sqrt(2.0 * (double)n)); /* a normal's standard error; a uniform's is smaller */
                if (inits[f].normal) {
                    double *r = malloc((size_t)n * sizeof *r);
                    if (r) {
                        wgml_ref_randn(11, 0, n, 0.0, b, r);
                        double worst = 0;
                        for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(v[i] - r[i]) / (0.1 * b + fabs(r[i])));
                        CHECK(worst <= 1e-5);
                        free(r);
                    }
                } else {
                    float *r = malloc((size_t)n * sizeof *r);
                    if (r) {
                        wgml_ref_rand(11, 0, n, -b, b, r);
                        CHECK(first_bit_difference(v, r, n) < 0);
                        free(r);
                    }
                    CHECK(top < b && top > 0.999 * b);
                }
                free(v);
                wgml_tensor_free(t);
            }
}

/* ---------------------------------------------------------------- bad input */

static void bad_input_is_refused(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    CHECK_OK(ctx, wgml_manual_seed(ctx, 1));
    const int64_t s2[2] = {3, 4}, s1[1] = {5}, zero[2] = {3, 0}, neg[2] = {-1, 4}, s5[5] = {1, 1, 1, 1, 1};
    float nan = NAN, inf = INFINITY;
    wgml_scope_begin(ctx);
    wgml_tensor *x = test_tensor(ctx, 2, s2, (const float[12]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    int32_t ints[5] = {0};
    wgml_tensor *xi = NULL;
    CHECK_OK(ctx, wgml_tensor_from_i32(ctx, 1, s1, ints, 5, &xi));
    const struct { const char *what; wgml_tensor *t; } bad[] = {
        {"rand lo == hi", wgml_rand(ctx, 2, s2, 1, 1)},
        {"rand lo > hi", wgml_rand(ctx, 2, s2, 2, 1)},
        {"rand NaN lo", wgml_rand(ctx, 2, s2, nan, 1)},
        {"rand inf hi", wgml_rand(ctx, 2, s2, 0, inf)},
        {"rand hi - lo overflows", wgml_rand(ctx, 2, s2, -3e38f, 3e38f)},
        {"rand ndim 0", wgml_rand(ctx, 0, s2, 0, 1)},
        {"rand ndim 5", wgml_rand(ctx, 5, s5, 0, 1)},
        {"rand dim 0", wgml_rand(ctx, 2, zero, 0, 1)},
        {"rand dim -1", wgml_rand(ctx, 2, neg, 0, 1)},
        {"rand shape NULL", wgml_rand(ctx, 2, NULL, 0, 1)},
        {"randn std < 0", wgml_randn(ctx, 2, s2, 0, -1)},
        {"randn NaN std", wgml_randn(ctx, 2, s2, 0, nan)},
        {"randn inf std", wgml_randn(ctx, 2, s2, 0, inf)},
        {"randn NaN mean", wgml_randn(ctx, 2, s2, nan, 1)},
        {"randn dim 0", wgml_randn(ctx, 2, zero, 0, 1)},
        {"dropout p < 0", wgml_dropout(ctx, x, -0.1f)},
        {"dropout p > 1", wgml_dropout(ctx, x, 1.5f)},
        {"dropout NaN p", wgml_dropout(ctx, x, nan)},
        {"dropout NULL", wgml_dropout(ctx, NULL, 0.5f)},
        {"dropout i32", wgml_dropout(ctx, xi, 0.5f)},
        {"xavier_uniform 1-D", wgml_xavier_uniform(ctx, 1, s1, 1)},
        {"xavier_uniform gain 0", wgml_xavier_uniform(ctx, 2, s2, 0)},
        {"xavier_normal gain < 0", wgml_xavier_normal(ctx, 2, s2, -1)},
        {"xavier_normal NaN gain", wgml_xavier_normal(ctx, 2, s2, nan)},
        {"kaiming_uniform bad mode", wgml_kaiming_uniform(ctx, 2, s2, 1, (wgml_fan_mode)7)},
        {"kaiming_normal 1-D", wgml_kaiming_normal(ctx, 1, s1, 1, WGML_FAN_IN)},
        {"kaiming_normal dim 0", wgml_kaiming_normal(ctx, 2, zero, 1, WGML_FAN_OUT)},
    };
    for (int i = 0; i < N_OF(bad); i++) {
        wgml_status st = wgml_tensor_status(bad[i].t);
        if (st != WGML_ERROR_INVALID_ARGUMENT) {
            fprintf(stderr, "FAIL %s: %s gave %s, want WGML_ERROR_INVALID_ARGUMENT\n", test_current, bad[i].what,
                    wgml_status_name(st));
            test_failures++;
        } else if (i < 3) {
            /* the message names the op and the values */
            float v;
            CHECK(wgml_tensor_read(bad[i].t, &v, 1) == WGML_ERROR_INVALID_ARGUMENT);
            fprintf(stderr, "  %s: %s\n", bad[i].what, wgml_error_message(ctx));
        }
    }
    /* past the kernel's u32 element indices: refused when built, nothing allocated */
    const int64_t huge[2] = {65536, 65536};
    CHECK(wgml_tensor_status(wgml_rand(ctx, 2, huge, 0, 1)) == WGML_ERROR_LIMIT);
    CHECK(wgml_tensor_status(wgml_randn(ctx, 2, huge, 0, 1)) == WGML_ERROR_LIMIT);
    wgml_tensor *wide = wgml_broadcast_to(ctx, wgml_reshape(ctx, x, 2, (const int64_t[2]){12, 1}), 2, (const int64_t[2]){12, 1ll << 30});
    CHECK(wgml_tensor_status(wide) == WGML_OK);
    CHECK(wgml_tensor_status(wgml_dropout(ctx, wide, 0.5f)) == WGML_ERROR_LIMIT);
    /* an error in the input passes through, with its message */
    wgml_tensor *e = wgml_dropout(ctx, bad[0].t, 0.5f);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
    state_is(ctx, 1, 0, "after refused random ops");
    CHECK(wgml_rand(NULL, 2, s2, 0, 1) == NULL);
    CHECK(wgml_dropout(NULL, x, 0.5f) == NULL);
    CHECK(wgml_manual_seed(NULL, 1) == WGML_ERROR_INVALID_ARGUMENT);
    uint64_t seed;
    CHECK(wgml_rng_get_state(ctx, &seed, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_end(ctx);
    wgml_clear_error(ctx);
}

int main(void)
{
    TEST_RUN(philox_known_answers);
    TEST_RUN(uniform_bits_match_the_reference);
    TEST_RUN(uniform_stays_below_hi);
    TEST_RUN(consecutive_calls_and_manual_seed);
    TEST_RUN(random_bits_hash);
    TEST_RUN(uniform_statistics);
    TEST_RUN(normal_matches_the_reference);
    TEST_RUN(normal_statistics);
    TEST_RUN(dropout_forward);
    TEST_RUN(dropout_of_a_view);
    TEST_RUN(dropout_at_the_threshold);
    TEST_RUN(dropout_backward);
    TEST_RUN(dropout_repeats_and_differs);
    TEST_RUN(dropout_edges);
    TEST_RUN(streams_are_the_third_counter_word);
    TEST_RUN(initialisers);
    TEST_RUN(bad_input_is_refused);
    return test_summary();
}
