/*
 * Random ops: the context's Philox4x32-10 generator state (seed, offset), the constructors of
 * rand, randn, dropout and the Xavier and Kaiming initialisers, and the builder of their
 * kernel (ops/random.wgsl). cpu/philox.h states the counter mapping; cpu/philox.c is the
 * reference the tests hold the kernel to.
 *
 * A node keeps the counters it took when it was built, so evaluating it later, or building
 * its gradient, uses the same numbers: its wgml_random_params (ops/random.h) hold the seed, the
 * offset and the stream, and lo, hi (rand), mean, std (randn) or p (dropout).
 */
#include "ops/random.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/sbuf.h"
#include "engine/build.h"
#include "engine/executor.h"
#include "kernels/wgsl_sources.h"
#include "ops/rules.h"
#include "ops/entry.h"
#include "ops/table.h"

/* a context's seed until wgml_manual_seed: PyTorch's default seed */
#define DEFAULT_SEED 67280421310721ull
/* the kernel indexes elements with u32, four to a thread */
#define MAX_ELEMENTS 0xfffffffcll

/* ---------------------------------------------------------------- the generator state */

typedef struct rng {
    uint64_t seed, offset; /* offset counts Philox blocks (4 words each) */
    uint32_t stream;       /* the counter's third word: a rank's own numbers (wgml_rng_set_stream) */
    bool started;
} rng;

static const char rng_key; /* names the state's extension of a context */

/* The context's state, made on first use; NULL (error recorded) when out of memory. */
static rng *rng_of(wgml_context *ctx)
{
    rng *r = wgml_extension_make(ctx, &rng_key, sizeof(rng), NULL);
    if (r && !r->started) {
        r->seed = DEFAULT_SEED;
        r->started = true;
    }
    return r;
}

wgml_status wgml_rng_set_state(wgml_context *ctx, uint64_t seed, uint64_t offset)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    rng *r = rng_of(ctx);
    if (!r) return ctx->rt.status;
    r->seed = seed;
    r->offset = offset;
    return WGML_OK;
}

wgml_status wgml_manual_seed(wgml_context *ctx, uint64_t seed) { return wgml_rng_set_state(ctx, seed, 0); }

wgml_status wgml_rng_set_stream(wgml_context *ctx, uint32_t stream)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    rng *r = rng_of(ctx);
    if (!r) return ctx->rt.status;
    r->stream = stream;
    return WGML_OK;
}

uint32_t wgml_rng_stream(wgml_context *ctx)
{
    rng *r = ctx ? rng_of(ctx) : NULL;
    return r ? r->stream : 0;
}

wgml_status wgml_rng_get_state(wgml_context *ctx, uint64_t *seed, uint64_t *offset)
{
    if (!ctx) return WGML_ERROR_INVALID_ARGUMENT;
    if (!seed || !offset) return wgml_fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_rng_get_state: seed or offset is NULL");
    rng *r = rng_of(ctx);
    if (!r) return ctx->rt.status;
    *seed = r->seed;
    *offset = r->offset;
    return WGML_OK;
}

/* ---------------------------------------------------------------- nodes */

/* NULL if shape is one a random op can fill (*numel set), else the error tensor. */
static wgml_tensor *bad_shape(wgml_context *ctx, const char *name, int ndim, const int64_t *shape, int64_t *numel)
{
    if (wgml_shape_check(ctx, ndim, shape, numel)) return wgml_tensor_error(ctx, ctx->rt.status, "%s: %s", name, ctx->rt.message);
    if (*numel > MAX_ELEMENTS)
        return wgml_tensor_error(ctx, WGML_ERROR_LIMIT, "%s: %lld elements; random ops make at most %lld", name,
                                 (long long)*numel, MAX_ELEMENTS);
    return NULL;
}

/* A node of op over shape that takes the generator's next ceil(numel / 4) blocks; a and b are
   the op's numbers (rand's bounds, randn's mean and std, dropout's p). */
static wgml_tensor *random_node(wgml_context *ctx, wgml_op op, int ndim, const int64_t *shape, int nsrc, wgml_tensor **src,
                                float a, float b)
{
    rng *r = rng_of(ctx);
    if (!r) return wgml_tensor_error(ctx, ctx->rt.status, "%s: %s", wgml_op_table[op]->name, ctx->rt.message);
    wgml_tensor *t = wgml_node(ctx, op, ndim, shape, nsrc, src);
    if (!t || t->status) return t;
    wgml_random_params_of_set(
        t, (wgml_random_params){.seed = r->seed, .offset = r->offset, .stream = (uint32_t)r->stream, .a = a, .b = b});
    r->offset += ((uint64_t)t->numel + 3) / 4;
    return t;
}

static wgml_tensor *make_rand(wgml_context *ctx, const char *name, int ndim, const int64_t *shape, float lo, float hi)
{
    int64_t n;
    wgml_tensor *bad = bad_shape(ctx, name, ndim, shape, &n);
    if (bad) return bad;
    float range = hi - lo;
    if (!(lo < hi) || !isfinite(lo) || !isfinite(hi) || !isfinite(range))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "%s: bounds lo = %g, hi = %g must be finite numbers with lo < hi and hi - lo finite", name,
                                 lo, hi);
    return random_node(ctx, WGML_OP_RAND, ndim, shape, 0, NULL, lo, hi);
}

static wgml_tensor *make_randn(wgml_context *ctx, const char *name, int ndim, const int64_t *shape, float mean, float std)
{
    int64_t n;
    wgml_tensor *bad = bad_shape(ctx, name, ndim, shape, &n);
    if (bad) return bad;
    if (!isfinite(mean) || !(std >= 0) || !isfinite(std)) /* NaN fails !(std >= 0) */
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "%s: mean = %g must be finite and std = %g finite and >= 0", name, mean, std);
    return random_node(ctx, WGML_OP_RANDN, ndim, shape, 0, NULL, mean, std);
}

wgml_tensor *wgml_rand(wgml_context *ctx, int ndim, const int64_t *shape, float lo, float hi)
{
    return ctx ? make_rand(ctx, "rand", ndim, shape, lo, hi) : NULL;
}

wgml_tensor *wgml_randn(wgml_context *ctx, int ndim, const int64_t *shape, float mean, float std)
{
    return ctx ? make_randn(ctx, "randn", ndim, shape, mean, std) : NULL;
}

wgml_tensor *wgml_dropout(wgml_context *ctx, wgml_tensor *a, float p)
{
    if (!ctx) return NULL;
    wgml_tensor *bad = wgml_check_input(ctx, a, "dropout", "a");
    if (bad) return bad;
    if (a->dtype != WGML_F32)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "dropout: a is %s; dropout takes f32 (wgml_cast converts)",
                                 wgml_dtype_name(a->dtype));
    if (!(p >= 0.0f && p <= 1.0f))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "dropout: p = %g must be in [0, 1]", p);
    if (a->numel > MAX_ELEMENTS)
        return wgml_tensor_error(ctx, WGML_ERROR_LIMIT, "dropout: %lld elements; random ops make at most %lld",
                                 (long long)a->numel, MAX_ELEMENTS);
    if (p == 0.0f) return wgml_contiguous(ctx, a); /* a itself (a view), as PyTorch: no counters taken */
    wgml_tensor *c = wgml_contiguous(ctx, a);
    if (!c || c->status) return c;
    wgml_tensor *t = random_node(ctx, WGML_OP_DROPOUT, a->ndim, a->shape, 1, &c, p, 0.0f);
    wgml_tensor_free(c); /* the node holds it */
    return t;
}

wgml_tensor *wgml_dropout_like(wgml_context *ctx, wgml_tensor *g, const wgml_tensor *t)
{
    wgml_tensor *c = wgml_contiguous(ctx, g);
    if (!c || c->status) return c;
    wgml_tensor *d = wgml_node(ctx, WGML_OP_DROPOUT, t->ndim, t->shape, 1, &c);
    wgml_tensor_free(c);
    if (d && !d->status) {
        wgml_random_params_of_set(d, wgml_random_params_of(t));
    }
    return d;
}

/* ---------------------------------------------------------------- initialisers */

/* NULL if a weight of this shape has fans (set) and gain is usable, else the error tensor.
   A weight is [..., in, out] (x [B, in] @ W [in, out]); dims before the last two are a
   receptive field that multiplies both fans (Keras's rule for [kh, kw, in, out] kernels, PyTorch's
   for [out, in, kh, kw] read in this layout). */
static wgml_tensor *bad_fans(wgml_context *ctx, const char *name, int ndim, const int64_t *shape, float gain,
                             double *fan_in, double *fan_out)
{
    int64_t n;
    wgml_tensor *bad = bad_shape(ctx, name, ndim, shape, &n);
    if (bad) return bad;
    if (ndim < 2)
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT,
                                 "%s: a weight has at least 2 dimensions ([in, out]) to give fan_in and fan_out, not %d", name,
                                 ndim);
    if (!(gain > 0) || !isfinite(gain))
        return wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: gain = %g must be finite and > 0", name, gain);
    double field = 1;
    for (int d = 0; d < ndim - 2; d++) field *= (double)shape[d];
    *fan_in = (double)shape[ndim - 2] * field;
    *fan_out = (double)shape[ndim - 1] * field;
    return NULL;
}

wgml_tensor *wgml_xavier_uniform(wgml_context *ctx, int ndim, const int64_t *shape, float gain)
{
    if (!ctx) return NULL;
    double in = 0, out = 0; /* (set by bad_fans on success; gcc -O3 cannot tell) */
    wgml_tensor *bad = bad_fans(ctx, "xavier_uniform", ndim, shape, gain, &in, &out);
    if (bad) return bad;
    float b = (float)(gain * sqrt(6.0 / (in + out)));
    return make_rand(ctx, "xavier_uniform", ndim, shape, -b, b);
}

wgml_tensor *wgml_xavier_normal(wgml_context *ctx, int ndim, const int64_t *shape, float gain)
{
    if (!ctx) return NULL;
    double in = 0, out = 0; /* (set by bad_fans on success; gcc -O3 cannot tell) */
    wgml_tensor *bad = bad_fans(ctx, "xavier_normal", ndim, shape, gain, &in, &out);
    if (bad) return bad;
    return make_randn(ctx, "xavier_normal", ndim, shape, 0.0f, (float)(gain * sqrt(2.0 / (in + out))));
}

/* the fan a Kaiming initialiser scales by; 0 (with the error tensor in *bad) for a bad mode */
static double kaiming_fan(wgml_context *ctx, const char *name, int ndim, const int64_t *shape, float gain, wgml_fan_mode mode,
                          wgml_tensor **bad)
{
    double in = 0, out = 0; /* (set by bad_fans on success; gcc -O3 cannot tell) */
    if ((*bad = bad_fans(ctx, name, ndim, shape, gain, &in, &out))) return 0;
    if (mode != WGML_FAN_IN && mode != WGML_FAN_OUT) {
        *bad = wgml_tensor_error(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: mode %d is not WGML_FAN_IN or WGML_FAN_OUT", name,
                                 (int)mode);
        return 0;
    }
    return mode == WGML_FAN_IN ? in : out;
}

wgml_tensor *wgml_kaiming_uniform(wgml_context *ctx, int ndim, const int64_t *shape, float gain, wgml_fan_mode mode)
{
    if (!ctx) return NULL;
    wgml_tensor *bad;
    double fan = kaiming_fan(ctx, "kaiming_uniform", ndim, shape, gain, mode, &bad);
    if (bad) return bad;
    float b = (float)(gain * sqrt(3.0 / fan));
    return make_rand(ctx, "kaiming_uniform", ndim, shape, -b, b);
}

wgml_tensor *wgml_kaiming_normal(wgml_context *ctx, int ndim, const int64_t *shape, float gain, wgml_fan_mode mode)
{
    if (!ctx) return NULL;
    wgml_tensor *bad;
    double fan = kaiming_fan(ctx, "kaiming_normal", ndim, shape, gain, mode, &bad);
    if (bad) return bad;
    return make_randn(ctx, "kaiming_normal", ndim, shape, 0.0f, (float)(gain / sqrt(fan)));
}

/* ---------------------------------------------------------------- the kernel */

/* ops/random.wgsl behind its header: ops/mul_wide.wgsl, MODE and the bindings (dropout reads X, the
   generators only write Y) */
static wgml_status random_pipeline(wgml_context *ctx, uint32_t mode, wgml_launch *l)
{
    uint32_t key[2] = {WGML_KEY_RANDOM, mode};
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 2))) return WGML_OK;
    const char *body = wgml_wgsl_find("random"), *mul_wide = wgml_wgsl_find("mul_wide");
    if (!body || !mul_wide) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel random is not built in");
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "%sconst MODE = %uu;\n", mul_wide, mode);
    if (mode == 2)
        wgml_sbuf_put(&b, "@group(0) @binding(1) var<storage, read> X: array<f32>;\n"
                          "@group(0) @binding(2) var<storage, read_write> Y: array<f32>;\n"
                          "fn x_at(i: u32) -> f32 { return X[i]; }\n");
    else
        wgml_sbuf_put(&b, "@group(0) @binding(1) var<storage, read_write> Y: array<f32>;\n"
                          "fn x_at(i: u32) -> f32 { return 0.0; }\n");
    wgml_sbuf_put(&b, "%s", body);
    l->pipeline = wgml_pipeline_add(ctx, key, 2, wgml_sbuf_take(&b), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

/* random.wgsl's Params */
typedef struct random_params {
    uint32_t n, blocks, gx, x_offset;
    uint32_t seed_lo, seed_hi, offset_lo, offset_hi;
    float a, b, c;
    uint32_t zero;
    uint32_t threshold, stream, pad[2];
} random_params;

/* t [n] (dropout: x [n] -> t [n]) -> a thread per Philox block of 4 elements */
wgml_status wgml_build_random(wgml_context *ctx, wgml_tensor *t, wgml_launch *l, int *count)
{
    uint32_t mode = t->op == WGML_OP_RAND ? 0 : t->op == WGML_OP_RANDN ? 1 : 2;
    wgml_status st = random_pipeline(ctx, mode, l);
    if (st) return st;
    uint64_t n = (uint64_t)t->numel, blocks = (n + 3) / 4;
    wgml_random_params rp = wgml_random_params_of(t);
    random_params p = {.n = (uint32_t)n, .blocks = (uint32_t)blocks, .seed_lo = (uint32_t)rp.seed,
                       .seed_hi = (uint32_t)(rp.seed >> 32), .offset_lo = (uint32_t)rp.offset,
                       .offset_hi = (uint32_t)(rp.offset >> 32), .stream = rp.stream};
    p.gx = wgml_grid(ctx, (blocks + 255) / 256, l->groups);
    float f0 = rp.a, f1 = rp.b;
    if (mode == 0) { /* lo, hi - lo (as cpu/philox.c rounds it), the largest float below hi */
        p.a = f0;
        p.b = f1 - f0;
        p.c = nextafterf(f1, -INFINITY);
    } else if (mode == 1) {
        p.a = f0;
        p.b = f1;
    } else { /* dropped where u < p: (w >> 8) < ceil(p 2^24), exactly */
        p.a = f0 < 1.0f ? (float)(1.0 / (1.0 - (double)f0)) : 0.0f;
        p.threshold = (uint32_t)ceil((double)f0 * 16777216.0);
        wgml_tensor *x = t->src[0];
        p.x_offset = (uint32_t)x->offset;
        l->buffers[0] = wgml_tensor_base(x);
    }
    l->buffers[mode == 2] = t;
    l->nbuffers = mode == 2 ? 2 : 1;
    memcpy(l->params, &p, sizeof p);
    l->params_size = sizeof p;
    l->loop_trips = 10 + 4 + 4; /* Philox rounds, dropout's lanes, the stores */
    snprintf(l->what, sizeof l->what, "%s of %llu elements", wgml_op_table[t->op]->name, (unsigned long long)n);
    return WGML_OK;
}

/* ---------------------------------------------------------------- gradient rules and entries */

typedef wgml_tensor T;

/* the same mask and scale on g: a dropout node with t's counters */
static wgml_status vjp_dropout(wgml_context *c, T *t, T *g, T **gin)
{
    gin[0] = wgml_dropout_like(c, g, t);
    return WGML_OK;
}

/* random numbers (ops/random.c): rand's values and dropout's products are exact; randn's
   r cos t near 0 carries the absolute rounding of r (up to 5.8) times a few 1e-7 */
WGML_OP_ENTRY(RAND) = {.name = "rand", .kind = WGML_KIND_KERNEL, .build = wgml_build_random, DOMAIN(-2, 2, 0, 0), ARITH,
                  .no_grad = "random numbers depend on no input"};
WGML_OP_ENTRY(RANDN) = {.name = "randn", .kind = WGML_KIND_KERNEL, .build = wgml_build_random, DOMAIN(-2, 2, 0, 0), ARITH, FLOOR(1),
                   .no_grad = "random numbers depend on no input"};
WGML_OP_ENTRY(DROPOUT) = {.name = "dropout", .kind = WGML_KIND_KERNEL, .arity = 1, .build = wgml_build_random, .vjp = vjp_dropout,
                     DOMAIN(-10, 10, 0, 0), ARITH};
