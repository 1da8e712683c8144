/*
 * wgml bench [ops|matmul|attention|gather|transformer|gpt|train|decode|startup|all] [--json] [--quick] [--gpu-time]
 *   (transformer = attention + gather; gpt: tools/bench_gpt.c)
 *
 * Each measurement evaluates `inner` independent copies of an op in one submit and waits, so
 * the per-submit overhead is spread; the median over repetitions (after a warm-up that
 * compiles the kernels) divided by `inner` is reported. --quick uses small sizes (lavapipe).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/timing.h"
#include "core/context.h" /* the runtime's timeline (WGML_TIMELINE) */
#include "tools/cli.h"
#include "wgml.h"


typedef wgml_tensor *(*build_fn)(wgml_context *ctx, void *arg);

/* --gpu-time: contexts time their compute passes with GPU timestamps, and each measurement
   is one op per evaluation (the op alone: no submit latency, no overlap with other ops). */
static int gpu_time;

/* Warm-up per measurement, seconds (WGML_BENCH_WARMUP overrides; --quick: 0.3). On the
   H100 a 2^26-float add on freshly made tensors ran at 1.5 TB/s for the first seconds of
   work on them and at 2.7 TB/s after 3 s, with the SM clock at 1980 MHz throughout: the
   cause is not known, the warm-up keeps it out of the steady-state numbers. */
static double warmup_seconds = 2.0;
#define WARMUP_SECONDS warmup_seconds

static wgml_status context_make(int no_fusion, wgml_context **ctx)
{
    wgml_context_desc d = {.no_fusion = no_fusion, .gpu_timing = gpu_time};
    return wgml_context_create(&d, ctx);
}

/* The median host time per evaluation of the last time_op: from wgml_eval's call to its
   submit (planning, kernel lookup, encoding), the part of an op's time the GPU waits for. */
static double last_host_seconds;

/* Median seconds per op over `reps` runs of `inner` ops in one submit (host clock), or with
   gpu_time of single ops (GPU clock). The first run compiles; runs go on for WARMUP_SECONDS
   at least before the timed ones. */
static double time_op(wgml_context *ctx, build_fn fn, void *arg, int inner, int reps)
{
    double t[64], host[64];
    if (reps > 64) reps = 64;
    if (gpu_time) inner = 1; /* the op alone */
    double warm_until = bench_now() + WARMUP_SECONDS;
    for (int r = -1; r < reps; r++) {
        if (r == 0 && bench_now() < warm_until) r = -1;
        wgml_scope_begin(ctx);
        wgml_tensor *outs[64];
        for (int i = 0; i < inner; i++) outs[i] = fn(ctx, arg);
        wgml_synchronize(ctx);
        double t0 = bench_now();
        wgml_status st = wgml_eval(ctx, inner, outs);
        wgml_synchronize(ctx);
        double el = bench_now() - t0;
        wgml_stats s;
        wgml_stats_get(ctx, &s);
        wgml_scope_end(ctx);
        if (st) {
            fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
            return NAN;
        }
        if (r >= 0) t[r] = gpu_time ? s.gpu_seconds_last : el / inner, host[r] = s.host_seconds_last;
    }
    last_host_seconds = bench_median(host, reps);
    return bench_median(t, reps);
}

/* n pseudo-random floats in [-0.5, 0.5) from `seed` (a new array) */
static float *random_floats(int64_t n, uint64_t seed)
{
    float *d = malloc((size_t)n * sizeof *d);
    uint64_t s = seed;
    for (int64_t i = 0; d && i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    return d;
}

static wgml_tensor *random_tensor(wgml_context *ctx, int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    float *d = random_floats(n, 12345);
    wgml_tensor *t = NULL;
    if (wgml_tensor_from_data(ctx, nd, shape, d, (size_t)n, &t)) fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
    free(d);
    return t;
}

/* ---------------------------------------------------------------- results */

typedef struct result {
    char name[64];
    double seconds;
    double value;
    const char *unit;
    double host_seconds; /* per evaluation, see last_host_seconds; 0 where not measured */
} result;

static result results[128];
static int nresults, nfailed;

void bench_report(const char *name, double seconds, double value, const char *unit)
{
    if (nresults == (int)(sizeof results / sizeof results[0])) return;
    result *r = &results[nresults++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->seconds = seconds;
    r->value = value;
    r->unit = unit;
    r->host_seconds = last_host_seconds;
    last_host_seconds = 0;
    if (!isfinite(seconds) || !isfinite(value)) { /* a failed measurement: its message came before */
        nfailed++;
        fprintf(stderr, "  %-34s FAILED\n", name);
        return;
    }
    /* the table in a unit the value reads in (a CPU adapter's GEMM is GFLOP/s, not "0.00
       TFLOP/s"); --json keeps the declared unit, at full precision */
    char shown[32];
    double v = value;
    snprintf(shown, sizeof shown, "%s", unit);
    static const char prefixes[] = "TGMk"; /* each a thousandth of the one before */
    const char *p;
    while (v != 0 && fabs(v) < 1 && shown[0] && (p = strchr(prefixes, shown[0])) && p[1] &&
           (strncmp(shown + 1, "FLOP/s", 6) == 0 || strncmp(shown + 1, "B/s", 3) == 0))
        shown[0] = p[1], v *= 1e3;
    fprintf(stderr, "  %-34s %10.3f ms  %10.2f %-18s", name, seconds * 1e3, v, shown);
    if (r->host_seconds > 0) fprintf(stderr, "  host %.0f us/eval", r->host_seconds * 1e6);
    fprintf(stderr, "\n");
}

/* ---------------------------------------------------------------- fitting the adapter */

/* The most f32 elements one tensor may have on ctx's adapter (its storage-binding and buffer
   limits: lavapipe binds 128 MiB). */
static int64_t max_elements(wgml_context *ctx)
{
    wgml_adapter_info i;
    if (wgml_adapter_info_get(ctx, &i)) return INT64_MAX;
    uint64_t bytes = i.max_storage_buffer_binding_size < i.max_buffer_size ? i.max_storage_buffer_binding_size : i.max_buffer_size;
    return (int64_t)(bytes / 4);
}

/* want, or the largest power of two that fits the adapter, with a note */
static int64_t fit_elements(wgml_context *ctx, int64_t want, const char *what)
{
    int64_t most = max_elements(ctx), n = want;
    while (n > most) n /= 2;
    if (n != want)
        fprintf(stderr, "  (%s: %lld elements instead of %lld, this adapter's largest binding)\n", what, (long long)n,
                (long long)want);
    return n;
}

/* whether tensors of `elements` fit; a note that `name` is skipped when not */
static bool fits(wgml_context *ctx, const char *name, int64_t elements)
{
    if (elements <= max_elements(ctx)) return true;
    fprintf(stderr, "  %-34s skipped: %lld MiB tensors are past this adapter's binding limit\n", name,
            (long long)(elements * 4 >> 20));
    return false;
}

/* ---------------------------------------------------------------- ops */

/* The operands of one benchmark: one independent set per op of a submit, so ops that the GPU
   overlaps in one pass never share an input through its cache (PyTorch's peer runs them one
   after another). */
#define MAX_COPIES 8
typedef struct operands {
    wgml_tensor *a[MAX_COPIES], *b[MAX_COPIES], *w, *bias;
    int copies, next, len;
    const wgml_matmul_desc *desc;
    bool c_f16; /* op_matmul: the result stored as halves, as a cast of it makes the GEMM do */
} operands;

static operands operands_make(wgml_context *ctx, int copies, int nda, const int64_t *sa, int ndb, const int64_t *sb)
{
    operands o = {.copies = copies};
    if (getenv("WGML_BENCH_SHARED")) o.copies = copies = 1; /* the old way, for comparison */
    for (int i = 0; i < copies; i++) {
        o.a[i] = random_tensor(ctx, nda, sa);
        o.b[i] = sb ? random_tensor(ctx, ndb, sb) : NULL;
    }
    return o;
}

static void operands_free(operands *o)
{
    for (int i = 0; i < o->copies; i++) {
        wgml_tensor_free(o->a[i]);
        wgml_tensor_free(o->b[i]);
    }
    wgml_tensor_free(o->w);
    wgml_tensor_free(o->bias);
}

/* the next copy, round robin */
static int pick(operands *o)
{
    int i = o->next;
    o->next = (o->next + 1) % o->copies;
    return i;
}

static wgml_tensor *op_add(wgml_context *ctx, void *p)
{
    operands *t = p;
    int i = pick(t);
    return wgml_add(ctx, t->a[i], t->b[i]);
}

static wgml_tensor *op_chain(wgml_context *ctx, void *p)
{
    operands *t = p;
    int c = pick(t);
    wgml_tensor *x = t->a[c];
    for (int i = 0; i < t->len; i++) {
        switch (i % 4) {
        case 0: x = wgml_binary_scalar(ctx, WGML_MUL, x, 0.999f); break;
        case 1: x = wgml_binary_scalar(ctx, WGML_ADD, x, 0.001f); break;
        case 2: x = wgml_add(ctx, x, t->b[c]); break;
        default: x = wgml_relu(ctx, x); break;
        }
    }
    return x;
}

static wgml_tensor *op_softmax(wgml_context *ctx, void *p) { operands *t = p; return wgml_softmax(ctx, t->a[pick(t)]); }
static wgml_tensor *op_layernorm(wgml_context *ctx, void *p)
{
    operands *t = p;
    return wgml_layernorm(ctx, t->a[pick(t)], t->w, t->bias, 1e-5f);
}

static void bench_ops(int quick)
{
    wgml_context *ctx, *unfused;
    if (context_make(0, &ctx) || context_make(1, &unfused)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        exit(1);
    }
    int64_t n = fit_elements(ctx, quick ? (1 << 20) : (1 << 26), "elementwise");
    int inner = quick ? 2 : 8, reps = quick ? 3 : 15;
    operands t = operands_make(ctx, inner, 1, &n, 1, &n);
    t.len = 100;
    char name[64];
    double s = time_op(ctx, op_add, &t, inner, reps);
    snprintf(name, sizeof name, "add_%lld", (long long)n);
    bench_report(name, s, 3.0 * 4 * (double)n / s / 1e9, "GB/s");
    double add_s = s;
    s = time_op(ctx, op_chain, &t, inner, reps);
    bench_report("chain100_fused", s, s / add_s, "x add");
    operands_free(&t);
    operands u = operands_make(unfused, 1, 1, &n, 1, &n);
    u.len = 100;
    s = time_op(unfused, op_chain, &u, 1, quick ? 2 : 5);
    bench_report("chain100_unfused", s, s / add_s, "x add");
    int64_t rows = quick ? 256 : 4096, cols = quick ? 1024 : 8192, shape[2] = {rows, cols};
    operands_free(&u);
    operands r = operands_make(ctx, inner, 2, shape, 0, NULL);
    r.w = random_tensor(ctx, 1, &cols);
    r.bias = random_tensor(ctx, 1, &cols);
    s = time_op(ctx, op_softmax, &r, inner, reps);
    snprintf(name, sizeof name, "softmax_%lldx%lld", (long long)rows, (long long)cols);
    bench_report(name, s, 2.0 * 4 * (double)(rows * cols) / s / 1e9, "GB/s");
    s = time_op(ctx, op_layernorm, &r, inner, reps);
    snprintf(name, sizeof name, "layernorm_%lldx%lld", (long long)rows, (long long)cols);
    bench_report(name, s, 2.0 * 4 * (double)(rows * cols) / s / 1e9, "GB/s");
    operands_free(&r);
    wgml_context_free(unfused);
    wgml_context_free(ctx);
}

/* ---------------------------------------------------------------- matmul */

bool bench_listed(const char *env, const char *name, bool part)
{
    const char *only = getenv(env);
    if (!only || !*only) return true;
    char list[256];
    snprintf(list, sizeof list, "%s", only);
    for (char *save = NULL, *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save))
        if (part ? strstr(name, w) != NULL : !strcmp(name, w)) return true;
    return false;
}

/* WGML_BENCH_ONLY="a,b": only the matmul measurements whose names contain a or b (sweeps) */
static bool wanted(const char *name) { return bench_listed("WGML_BENCH_ONLY", name, true); }

static wgml_tensor *op_matmul(wgml_context *ctx, void *p)
{
    operands *t = p;
    int i = pick(t);
    wgml_tensor *c = wgml_matmul_ex(ctx, t->a[i], t->b[i], t->desc);
    return t->c_f16 ? wgml_cast(ctx, c, WGML_F16) : c;
}

/* ---------------------------------------------------------------- matmul accuracy */

/* The error of the f32 GEMM and of both f16-arithmetic ones against a double reference on
   the host, over sampled outputs: relative to sum_k |a b| of the output (what rounding
   bounds) and plain, |c - ref| / |ref| (unbounded where ref is near 0) */
#define MATH_MODES 3 /* wgml_matmul_desc f16_math 0, 1, 2 */
static const char *const math_name[MATH_MODES] = {"f32", "f16math", "f16sums"};
typedef struct accuracy {
    char name[64]; /* "" until measured (one size a run) */
    int64_t samples;
    double max_abs[MATH_MODES], rms_abs[MATH_MODES], max_rel[MATH_MODES], rms_rel[MATH_MODES]; /* by f16_math */
} accuracy;
static accuracy measured_accuracy;

static float *matmul_host(wgml_context *ctx, wgml_tensor *a, wgml_tensor *b, const wgml_matmul_desc *d, int64_t n)
{
    wgml_tensor *c = wgml_matmul_ex(ctx, a, b, d);
    float *out = malloc((size_t)n * sizeof *out);
    if (!out || wgml_tensor_read(c, out, (size_t)n)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
        free(out);
        out = NULL;
    }
    wgml_tensor_free(c);
    return out;
}

static void matmul_accuracy(wgml_context *ctx, int64_t s)
{
    char name[64];
    snprintf(name, sizeof name, "gemm_%lld^3_error", (long long)s);
    if (!wanted(name)) return;
    int64_t sh[2] = {s, s}, n = s * s, samples = 1024;
    float *A = random_floats(n, 1), *B = random_floats(n, 2), *C[MATH_MODES] = {NULL, NULL, NULL};
    wgml_tensor *a = NULL, *b = NULL;
    if (A && B && !wgml_tensor_from_data(ctx, 2, sh, A, (size_t)n, &a) && !wgml_tensor_from_data(ctx, 2, sh, B, (size_t)n, &b))
        for (int v = 0; v < MATH_MODES; v++) {
            wgml_matmul_desc d = {.f16_math = v};
            C[v] = matmul_host(ctx, a, b, &d, n);
        }
    if (C[0] && C[1] && C[2]) {
        accuracy *r = &measured_accuracy;
        *r = (accuracy){.samples = samples};
        snprintf(r->name, sizeof r->name, "%s", name);
        double sum2[MATH_MODES][2] = {{0, 0}};
        uint64_t x = 777;
        for (int64_t i = 0; i < samples; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int64_t m = (int64_t)((x >> 33) % (uint64_t)s), col = (int64_t)((x >> 11) % (uint64_t)s);
            double ref = 0, sabs = 0;
            for (int64_t k = 0; k < s; k++) {
                double p = (double)A[m * s + k] * (double)B[k * s + col];
                ref += p;
                sabs += fabs(p);
            }
            for (int v = 0; v < MATH_MODES; v++) {
                double e = fabs((double)C[v][m * s + col] - ref);
                double ea = sabs > 0 ? e / sabs : e, er = ref != 0 ? e / fabs(ref) : e;
                r->max_abs[v] = fmax(r->max_abs[v], ea), r->max_rel[v] = fmax(r->max_rel[v], er);
                sum2[v][0] += ea * ea, sum2[v][1] += er * er;
            }
        }
        for (int v = 0; v < MATH_MODES; v++)
            r->rms_abs[v] = sqrt(sum2[v][0] / (double)samples), r->rms_rel[v] = sqrt(sum2[v][1] / (double)samples);
        for (int rel = 0; rel < 2; rel++) {
            fprintf(stderr, "  %-20s %s", name, rel ? "|c-ref|/|ref|   " : "|c-ref|/sum|ab| ");
            for (int v = 0; v < MATH_MODES; v++)
                fprintf(stderr, "  %s max %.3g rms %.3g", math_name[v], rel ? r->max_rel[v] : r->max_abs[v],
                        rel ? r->rms_rel[v] : r->rms_abs[v]);
            fprintf(stderr, "  (%lld outputs)\n", (long long)samples);
        }
    }
    for (int v = 0; v < MATH_MODES; v++) free(C[v]);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
    free(A);
    free(B);
}

/* whether the f16-arithmetic GEMM (shader-f16) runs here; a note that `name` is skipped when not */
static bool has_f16_math(wgml_context *ctx, const char *name)
{
    wgml_adapter_info i;
    if (!wgml_adapter_info_get(ctx, &i) && i.has_shader_f16) return true;
    fprintf(stderr, "  %-34s skipped: the adapter has no shader-f16 (f16 arithmetic)\n", name);
    return false;
}

/* The GEMMs of the GPT's mixed-precision training step on the matrix units, each as the step
   launches it: the forward projections with their bias, the input gradients (A.B^T) and the
   weight gradients (A^T.B over K = rows, which the matmul splits). nanoGPT's setup (B*T = 16384
   rows, width 384, MLP 1536; "gptstep_"): "_f32" with the operands stored as an earlier step
   stored them (f32 weights and gradients, halves of the norms' and the GELU's outputs), "_f16"
   all halves. GPT-2 small's (8192 rows, width 768, MLP 3072; "gpt2step_"): halves, and
   "_cf16" where the step stores the result as halves too (the MLP's up projection, whose
   output only the GELU reads; the step's other epilogues, the residual's add and the GELU's
   gradient, are not here). Each also with its error
   against a double reference over sampled outputs, relative to sum_k |a b| (f16 operands and
   f32 sums bound it by about 2 * 2^-11 + K * 2^-24; halves of C add 2^-11 of |c|). */
typedef struct { const char *name; int64_t M, N, K; int ta, tb, bias, a_f32, b_f32, c_f16; } step_gemm;

static void bench_step_gemm(wgml_context *ctx, bool units, const char *model, const step_gemm *g, int v, int halves, int quick)
{
    char name[64];
    snprintf(name, sizeof name, "%s_%s_%s", model, g->name, g->c_f16 ? "cf16" : halves ? "f16" : "f32");
    if (!wanted(name) || !has_f16_math(ctx, name)) return;
    if (!units) fprintf(stderr, "  %-34s runs the SIMT f16 GEMM: no f16 -> f32 subgroup matrices here\n", name);
    int64_t M = g->M, N = g->N, K = g->K;
    int64_t sa[2] = {g->ta ? K : M, g->ta ? M : K}, sb[2] = {g->tb ? N : K, g->tb ? K : N};
    float *A = random_floats(M * K, 11 + (uint64_t)v), *B = random_floats(K * N, 23 + (uint64_t)v);
    float *bias = random_floats(N, 37);
    wgml_tensor *a = NULL, *b = NULL, *bt = NULL;
    float *C = malloc((size_t)(M * N) * sizeof *C);
    bool ok = A && B && bias && C && !wgml_tensor_from_data(ctx, 2, sa, A, (size_t)(M * K), &a) &&
              !wgml_tensor_from_data(ctx, 2, sb, B, (size_t)(K * N), &b) &&
              !wgml_tensor_from_data(ctx, 1, &N, bias, (size_t)N, &bt);
    /* operands stored as halves: cast once, outside the timed GEMMs */
    wgml_tensor *casts[2] = {NULL, NULL}, *stored[2] = {a, b};
    if (ok && (halves || !g->a_f32)) casts[0] = a = wgml_cast(ctx, a, WGML_F16);
    if (ok && (halves || !g->b_f32)) casts[1] = b = wgml_cast(ctx, b, WGML_F16);
    for (int i = 0; ok && i < 2; i++) ok = !casts[i] || !wgml_eval(ctx, 1, &casts[i]);
    wgml_matmul_desc d = {.trans_a = g->ta, .trans_b = g->tb, .f16_math = WGML_F16_MATH_MATRIX, .bias = g->bias ? bt : NULL};
    if (ok) {
        operands t = {.copies = 1, .desc = &d, .c_f16 = g->c_f16};
        t.a[0] = a, t.b[0] = b;
        double sec = time_op(ctx, op_matmul, &t, 1, quick ? 3 : 15);
        bench_report(name, sec, 2.0 * (double)M * N * K / sec / 1e12, "TFLOP/s");
        /* (a scope: with halves of C the GEMM node lies under two casts) */
        wgml_scope_begin(ctx);
        wgml_tensor *c = op_matmul(ctx, &t);
        if (c && g->c_f16) c = wgml_cast(ctx, c, WGML_F32);
        ok = c && !wgml_tensor_read(c, C, (size_t)(M * N));
        wgml_scope_end(ctx);
    }
    if (ok) { /* the error over sampled outputs, against the f32 inputs in double */
        double worst = 0;
        uint64_t x = 99;
        for (int i = 0; i < 256; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int64_t m = (int64_t)((x >> 33) % (uint64_t)M), n = (int64_t)((x >> 11) % (uint64_t)N);
            double ref = g->bias ? bias[n] : 0, sabs = fabs(ref);
            for (int64_t k = 0; k < K; k++) {
                double p = (double)A[g->ta ? k * M + m : m * K + k] * (double)B[g->tb ? n * K + k : k * N + n];
                ref += p, sabs += fabs(p);
            }
            worst = fmax(worst, fabs((double)C[m * N + n] - ref) / sabs);
        }
        fprintf(stderr, "  %-34s max |c-ref|/sum|ab| %.3g over 256 outputs (bound ~%.3g)\n", name, worst,
                2 * 0x1p-11 + (double)K * 0x1p-24 + (g->c_f16 ? 0x1p-11 : 0));
    }
    if (!ok) fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(ctx));
    for (int i = 0; i < 2; i++) wgml_tensor_free(casts[i]), wgml_tensor_free(stored[i]);
    wgml_tensor_free(bt);
    free(A), free(B), free(bias), free(C);
}

static void bench_gpt_step_gemms(wgml_context *ctx, bool units, int quick)
{
    int64_t rows = quick ? 1024 : 16384;
    const step_gemm g[] = {
        {"qkv_proj", rows, 384, 384, 0, 0, 1, 0, 1, 0},   {"mlp_up", rows, 1536, 384, 0, 0, 1, 0, 1, 0},
        {"mlp_down", rows, 384, 1536, 0, 0, 1, 0, 1, 0},  {"dx_proj", rows, 384, 384, 0, 1, 0, 1, 1, 0},
        {"dx_mlp_up", rows, 384, 1536, 0, 1, 0, 1, 1, 0}, {"dx_mlp_down", rows, 1536, 384, 0, 1, 0, 1, 1, 0},
        {"dw_proj", 384, 384, rows, 1, 0, 0, 0, 1, 0},    {"dw_mlp_up", 384, 1536, rows, 1, 0, 0, 0, 1, 0},
        {"dw_mlp_down", 1536, 384, rows, 1, 0, 0, 0, 1, 0},
        /* (GPT-2's step projects Q, K and V by this one GEMM; qkv_proj is a third of it) */
        {"qkv_one_gemm", rows, 1152, 384, 0, 0, 1, 0, 1, 0}};
    for (int v = 0; v < (int)(sizeof g / sizeof g[0]); v++)
        for (int halves = 0; halves < 2; halves++) bench_step_gemm(ctx, units, "gptstep", &g[v], v, halves, quick);
    int64_t r2 = quick ? 512 : 8192, c2 = quick ? 128 : 768;
    const step_gemm g2[] = {
        {"qkv", r2, 3 * c2, c2, 0, 0, 1, 0, 0, 0},        {"proj", r2, c2, c2, 0, 0, 1, 0, 0, 0},
        {"mlp_up", r2, 4 * c2, c2, 0, 0, 1, 0, 0, 1},     {"mlp_down", r2, c2, 4 * c2, 0, 0, 1, 0, 0, 0},
        {"dx_qkv", r2, c2, 3 * c2, 0, 1, 0, 0, 0, 0},     {"dx_proj", r2, c2, c2, 0, 1, 0, 0, 0, 0},
        {"dx_mlp_up", r2, c2, 4 * c2, 0, 1, 0, 0, 0, 0},  {"dx_mlp_down", r2, 4 * c2, c2, 0, 1, 0, 0, 0, 0},
        {"dw_qkv", c2, 3 * c2, r2, 1, 0, 0, 0, 0, 0},     {"dw_proj", c2, c2, r2, 1, 0, 0, 0, 0, 0},
        {"dw_mlp_up", c2, 4 * c2, r2, 1, 0, 0, 0, 0, 0},  {"dw_mlp_down", 4 * c2, c2, r2, 1, 0, 0, 0, 0, 0}};
    for (int v = 0; v < (int)(sizeof g2 / sizeof g2[0]); v++) bench_step_gemm(ctx, units, "gpt2step", &g2[v], 20 + v, 1, quick);
}

static void bench_matmul(int quick)
{
    wgml_context *ctx;
    if (context_make(0, &ctx)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        exit(1);
    }
    const int64_t squares_full[] = {512, 1024, 2048, 4096, 8192}, squares_quick[] = {128, 256, 512};
    const int64_t *sq = quick ? squares_quick : squares_full;
    int nsq = quick ? 3 : 5;
    char name[64];
    /* the two largest also with f16 arithmetic (wgml_matmul_desc f16_math): "_f16math" with
       f32 sums of 16-k f16 sums, "_f16sums" with the whole sum in f16 */
    const wgml_matmul_desc f16_math[MATH_MODES] = {{0}, {.f16_math = 1}, {.f16_math = 2}};
    for (int i = 0; i < nsq; i++)
        for (int h = 0; h < (i >= nsq - 2 ? MATH_MODES : 1); h++) {
            int64_t s = sq[i], sh[2] = {s, s};
            int inner = quick ? 1 : s >= 4096 ? 3 : 8;
            snprintf(name, sizeof name, "gemm_%lld^3%s%s", (long long)s, h ? "_" : "", h ? math_name[h] : "");
            if (!wanted(name) || !fits(ctx, name, s * s) || (h && !has_f16_math(ctx, name))) continue;
            operands t = operands_make(ctx, inner, 2, sh, 2, sh);
            t.desc = h ? &f16_math[h] : NULL;
            double sec = time_op(ctx, op_matmul, &t, inner, quick ? 3 : 9);
            bench_report(name, sec, 2.0 * (double)s * s * s / sec / 1e12, "TFLOP/s");
            operands_free(&t);
        }
    /* the error of the f32 and both f16 GEMMs against a double reference: at 4096 on a GPU,
       512 (quick: 256) on a CPU adapter, where a 4096^3 GEMM takes minutes */
    {
        wgml_adapter_info i;
        bool cpu = !wgml_adapter_info_get(ctx, &i) && !strcmp(i.adapter_type, "CPU");
        int64_t s = cpu || quick ? (quick ? 256 : 512) : 4096;
        snprintf(name, sizeof name, "gemm_%lld^3_error", (long long)s);
        if (wanted(name) && fits(ctx, name, s * s) && has_f16_math(ctx, name)) matmul_accuracy(ctx, s);
    }
    /* the transposed-operand GEMMs of a backward pass, at the 4096 size */
    for (int v = 0; v < 2; v++) {
        int64_t s = quick ? 512 : 4096, sh[2] = {s, s};
        wgml_matmul_desc d = {.trans_a = v == 0, .trans_b = v == 1};
        snprintf(name, sizeof name, "gemm_%lld^3_%s", (long long)s, v == 0 ? "At_B" : "A_Bt");
        if (!wanted(name)) continue;
        operands t = operands_make(ctx, quick ? 1 : 3, 2, sh, 2, sh);
        t.desc = &d;
        double sec = time_op(ctx, op_matmul, &t, t.copies, quick ? 3 : 9);
        bench_report(name, sec, 2.0 * (double)s * s * s / sec / 1e12, "TFLOP/s");
        operands_free(&t);
    }
    /* f16 operands with f32 sums on the matrix units (WGML_F16_MATH_MATRIX; Dawn with
       subgroup matrices, else the "_f16math" kernel, which stderr notes): the 4096^3 forms
       and the GPT's projections ([B*T, C] x [C, 3C], [B*T, 4C] x [4C, C], C = 384); then the
       same with f32 operands as hi and lo halves ("_split": WGML_F16_MATH_MATRIX_SPLIT, else
       the f32 kernels) */
    {
        wgml_adapter_info ai;
        bool units = false;
        if (!wgml_adapter_info_get(ctx, &ai) && ai.has_subgroup_matrix && ai.subgroup_min_size == ai.subgroup_max_size)
            for (int k = 0; k < ai.subgroup_matrix_count; k++)
                units = units || (!strcmp(ai.subgroup_matrix[k].component, "f16") && !strcmp(ai.subgroup_matrix[k].result, "f32"));
        int64_t s = quick ? 512 : 4096, rows = quick ? 1024 : 16384;
        const struct { const char *form; int64_t M, K, N; int ta, tb; } mx[] = {
            {"", s, s, s, 0, 0}, {"_At_B", s, s, s, 1, 0}, {"_A_Bt", s, s, s, 0, 1},
            {"", rows, 384, 1152, 0, 0}, {"", rows, 1536, 384, 0, 0}};
        for (int v = 0; v < 10; v++) {
            bool split = v >= 5;
            int w = v % 5;
            const char *mode = split ? "split" : "matrix";
            if (w < 3) snprintf(name, sizeof name, "gemm_%lld^3%s_%s", (long long)s, mx[w].form, mode);
            else snprintf(name, sizeof name, "gpt_M%lld_K%lld_N%lld_%s", (long long)mx[w].M, (long long)mx[w].K,
                          (long long)mx[w].N, mode);
            if (!wanted(name) || !fits(ctx, name, mx[w].M * mx[w].K) || !has_f16_math(ctx, name)) continue;
            if (!units) fprintf(stderr, "  %-34s runs the %s: no f16 -> f32 subgroup matrices here\n", name,
                                split ? "f32 GEMM" : "SIMT f16 GEMM");
            int64_t sa[2] = {mx[w].ta ? mx[w].K : mx[w].M, mx[w].ta ? mx[w].M : mx[w].K};
            int64_t sb[2] = {mx[w].tb ? mx[w].N : mx[w].K, mx[w].tb ? mx[w].K : mx[w].N};
            wgml_matmul_desc d = {.trans_a = mx[w].ta, .trans_b = mx[w].tb,
                                  .f16_math = split ? WGML_F16_MATH_MATRIX_SPLIT : WGML_F16_MATH_MATRIX};
            operands t = operands_make(ctx, quick ? 1 : 3, 2, sa, 2, sb);
            t.desc = &d;
            double sec = time_op(ctx, op_matmul, &t, t.copies, quick ? 3 : 9);
            bench_report(name, sec, 2.0 * (double)mx[w].M * mx[w].N * mx[w].K / sec / 1e12, "TFLOP/s");
            operands_free(&t);
        }
    }
    {
        wgml_adapter_info ai;
        bool units = false;
        if (!wgml_adapter_info_get(ctx, &ai) && ai.has_subgroup_matrix && ai.subgroup_min_size == ai.subgroup_max_size)
            for (int k = 0; k < ai.subgroup_matrix_count; k++)
                units = units || (!strcmp(ai.subgroup_matrix[k].component, "f16") && !strcmp(ai.subgroup_matrix[k].result, "f32"));
        bench_gpt_step_gemms(ctx, units, quick);
    }
    const int64_t ms[] = {1, 16, 128}, ks_full[] = {1536, 4096, 8192}, ks_quick[] = {256, 512};
    const int64_t *ks = quick ? ks_quick : ks_full;
    int nk = quick ? 2 : 3;
    for (int mi = 0; mi < 3; mi++)
        for (int ki = 0; ki < nk; ki++)
            /* M = 128 at the largest K also with f16 arithmetic */
            for (int h = 0; h < (mi == 2 && ki == nk - 1 ? MATH_MODES : 1); h++) {
                int64_t M = ms[mi], K = ks[ki], sa[2] = {M, K}, sb[2] = {K, K};
                snprintf(name, sizeof name, "llm_M%lld_K%lld_N%lld%s%s", (long long)M, (long long)K, (long long)K, h ? "_" : "",
                         h ? math_name[h] : "");
                if (!wanted(name) || !fits(ctx, name, K * K) || (h && !has_f16_math(ctx, name))) continue;
                operands t = operands_make(ctx, quick ? 1 : 8, 2, sa, 2, sb);
                t.desc = h ? &f16_math[h] : NULL;
                double sec = time_op(ctx, op_matmul, &t, t.copies, quick ? 3 : 11);
                if (M == 1) bench_report(name, sec, 4.0 * (double)K * K / sec / 1e9, "GB/s (weight read)");
                else bench_report(name, sec, 2.0 * (double)M * K * K / sec / 1e12, "TFLOP/s");
                operands_free(&t);
            }
    /* a narrow GEMV (few columns, long K): the split-K kernel's case */
    {
        int64_t K = quick ? 4096 : 16384, N = quick ? 128 : 512, sa[2] = {1, K}, sb[2] = {K, N};
        snprintf(name, sizeof name, "gemv_narrow_K%lld_N%lld", (long long)K, (long long)N);
        if (wanted(name)) {
            operands t = operands_make(ctx, quick ? 1 : 8, 2, sa, 2, sb);
            double sec = time_op(ctx, op_matmul, &t, t.copies, quick ? 3 : 11);
            bench_report(name, sec, 4.0 * (double)K * N / sec / 1e9, "GB/s (weight read)");
            operands_free(&t);
        }
    }
    /* cached weights stored as f32 and as f16 (opt-in): round trips with a large weight,
       where the weight read dominates */
    const int64_t cached_ms[] = {1, 16, 128};
    for (int f16 = 0; f16 < 2; f16++)
        for (int mi = 0; mi < 3; mi++) {
            int64_t K = quick ? 512 : 8192, m = cached_ms[mi];
            snprintf(name, sizeof name, "cached_M%lld_%lld_%s", (long long)m, (long long)K, f16 ? "f16" : "f32");
            if (!wanted(name)) continue;
            float *w = malloc((size_t)(K * K) * sizeof *w), *x = malloc((size_t)(m * K) * sizeof *x);
            float *y = malloc((size_t)(m * K) * sizeof *y);
            for (int64_t i = 0; i < K * K; i++) w[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
            for (int64_t i = 0; i < m * K; i++) x[i] = (float)(i % 17) / 17.0f;
            wgml_weight_desc d = {.f16 = f16};
            double t[101];
            int reps = quick ? 11 : 101, done = 0;
            if (wgml_weight_upload_ex(ctx, name, w, K, K, &d) == WGML_OK) {
                /* a fresh buffer reads at half speed for its first second or so: warm up */
                double warm_until = bench_now() + WARMUP_SECONDS;
                for (int r = -5; r < reps; r++, done = r) {
                    if (r == -1 && bench_now() < warm_until) r = -2;
                    double t0 = bench_now();
                    if (wgml_matmul_cached(ctx, name, x, (size_t)(m * K), y, (size_t)(m * K), m)) break;
                    if (r >= 0) t[r] = bench_now() - t0;
                }
                wgml_weight_remove(ctx, name);
            }
            if (done == reps) {
                double med = bench_median(t, reps);
                bench_report(name, med, (double)K * K * (f16 ? 2 : 4) / med / 1e9, "GB/s (weight read)");
            } else {
                fprintf(stderr, "wgml bench: %s: %s\n", name, wgml_error_message(ctx));
            }
            free(w);
            free(x);
            free(y);
        }
    /* the cached-matmul round trip: host input -> GPU -> host output, M = 1, 1536 x 1536 */
    if (!wanted("cached_roundtrip")) {
        wgml_context_free(ctx);
        return;
    }
    int64_t K = quick ? 256 : 1536;
    float *w = malloc((size_t)(K * K) * sizeof *w), *x = malloc((size_t)K * sizeof *x), *y = malloc((size_t)K * sizeof *y);
    for (int64_t i = 0; i < K * K; i++) w[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int64_t i = 0; i < K; i++) x[i] = (float)(i % 17) / 17.0f;
    wgml_weight_upload(ctx, "bench", w, K, K);
    double t[201];
    int reps = quick ? 21 : 201;
    /* WGML_TIMELINE: each step's time (runtime.h), medians printed after the total */
    const wgml_runtime *rt = &ctx->rt;
    double steps[16][201], polls[2][201];
    int nsteps = 0;
    double warm_until = bench_now() + WARMUP_SECONDS;
    for (int r = -5; r < reps; r++) {
        if (r == -1 && bench_now() < warm_until) r = -2; /* warm up as above */
        double t0 = bench_now();
        if (wgml_matmul_cached(ctx, "bench", x, (size_t)K, y, (size_t)K, 1)) {
            fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
            break;
        }
        if (r >= 0) t[r] = bench_now() - t0;
        if (r >= 0 && rt->timeline.on) {
            nsteps = rt->timeline.n;
            for (int i = 1; i < nsteps; i++) steps[i][r] = rt->timeline.t[i] - rt->timeline.t[i - 1];
            polls[0][r] = rt->timeline.spin_polls, polls[1][r] = rt->timeline.blocking_polls;
        }
    }
    double med = bench_median(t, reps);
    snprintf(name, sizeof name, "cached_roundtrip_M1_%lld", (long long)K);
    bench_report(name, med, med * 1e6, "us median");
    for (int i = 1; i < nsteps; i++)
        fprintf(stderr, "    %-18s %7.1f us median\n", rt->timeline.step[i], bench_median(steps[i], reps) * 1e6);
    if (nsteps)
        fprintf(stderr, "    polls: %.0f spinning, %.0f blocking (medians)\n", bench_median(polls[0], reps),
                bench_median(polls[1], reps));
    free(w);
    free(x);
    free(y);
    wgml_context_free(ctx);
}

/* ---------------------------------------------------------------- startup */

wgml_context *bench_context(const char *who, int quick, wgml_adapter_info *info, int *big)
{
    wgml_context *ctx = NULL;
    if (wgml_context_create(NULL, &ctx)) {
        fprintf(stderr, "wgml bench %s: %s\n", who, wgml_last_create_error());
        return NULL;
    }
    wgml_adapter_info_get(ctx, info);
    *big = !quick && strcmp(info->adapter_type, "CPU") != 0;
    return ctx;
}

/* Context creation to the first result of a small fused kernel: run it twice, with the
   driver's shader cache emptied and then kept, to see a cold and a warm start. */
static void bench_startup(void)
{
    double t0 = bench_now();
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        exit(1);
    }
    double t1 = bench_now();
    int64_t n = 1024, sh[2] = {32, 32};
    operands t = operands_make(ctx, 1, 1, &n, 1, &n), m = operands_make(ctx, 1, 2, sh, 2, sh);
    t.len = 10;
    float out[1024];
    wgml_tensor *a = op_chain(ctx, &t), *b = wgml_matmul(ctx, m.a[0], m.b[0]), *c = wgml_softmax(ctx, m.a[0]);
    wgml_tensor *all[3] = {a, b, c};
    wgml_eval(ctx, 3, all);
    wgml_tensor_read(a, out, 1024);
    double t2 = bench_now();
    bench_report("context_create", t1 - t0, (t1 - t0) * 1e3, "ms");
    bench_report("first_result_3_kernels", t2 - t1, (t2 - t1) * 1e3, "ms");
    wgml_context_free(ctx);
}

/* ---------------------------------------------------------------- gather, scatter, new elementwise ops */

static wgml_tensor *random_ids(wgml_context *ctx, int64_t n, int32_t below)
{
    int32_t *v = malloc((size_t)n * sizeof *v);
    uint64_t s = 777;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int32_t)((s >> 33) % (uint64_t)below);
    }
    wgml_tensor *t = NULL;
    if (wgml_tensor_from_i32(ctx, 1, &n, v, (size_t)n, &t)) fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
    free(v);
    return t;
}

typedef struct gather_args {
    wgml_tensor *table, *ids, *src, *zeros;
} gather_args;
static wgml_tensor *op_gather(wgml_context *ctx, void *p) { gather_args *g = p; return wgml_embedding(ctx, g->table, g->ids); }
static wgml_tensor *op_scatter(wgml_context *ctx, void *p)
{
    gather_args *g = p;
    return wgml_index_add(ctx, g->zeros, 0, g->ids, g->src);
}
static wgml_tensor *op_gelu_exact(wgml_context *ctx, void *p) { operands *t = p; return wgml_gelu_exact(ctx, t->a[pick(t)]); }

/* An embedding's gather (V rows of C, N ids) and its scatter-add (index_add into zeros: the
   gradient's work), in GB/s of the bytes each must move; the exact GELU against add's rate */
static void bench_gather(int quick)
{
    wgml_context *ctx;
    if (context_make(0, &ctx)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        exit(1);
    }
    char name[96];
    int64_t V = quick ? 1024 : 32768, C = quick ? 128 : 768, N = quick ? 2048 : 16384, tsh[2] = {V, C}, ssh[2] = {N, C};
    gather_args g = {random_tensor(ctx, 2, tsh), random_ids(ctx, N, (int32_t)V), random_tensor(ctx, 2, ssh), NULL};
    if (wgml_tensor_zeros(ctx, 2, tsh, &g.zeros)) fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
    int inner = quick ? 2 : 8, reps = quick ? 3 : 15;
    double s = time_op(ctx, op_gather, &g, inner, reps);
    snprintf(name, sizeof name, "gather_V%lld_C%lld_N%lld", (long long)V, (long long)C, (long long)N);
    bench_report(name, s, 2.0 * 4 * (double)(N * C) / s / 1e9, "GB/s");
    s = time_op(ctx, op_scatter, &g, inner, reps);
    snprintf(name, sizeof name, "scatter_V%lld_C%lld_N%lld", (long long)V, (long long)C, (long long)N);
    bench_report(name, s, 4.0 * (double)(N * C + 2 * V * C) / s / 1e9, "GB/s");
    wgml_tensor_free(g.table), wgml_tensor_free(g.ids), wgml_tensor_free(g.src), wgml_tensor_free(g.zeros);
    int64_t n = fit_elements(ctx, quick ? (1 << 20) : (1 << 26), "gelu_exact");
    operands t = operands_make(ctx, inner, 1, &n, 1, &n);
    s = time_op(ctx, op_gelu_exact, &t, inner, reps);
    snprintf(name, sizeof name, "gelu_exact_%lld", (long long)n);
    bench_report(name, s, 2.0 * 4 * (double)n / s / 1e9, "GB/s");
    operands_free(&t);
    wgml_context_free(ctx);
}

/* ---------------------------------------------------------------- attention */

/* q, k, v as the GPT's step makes them: windows of the QKV GEMM's [B,T,3C] result (packed)
   seen as [B,H,T,D] (sh: B, H, T, D) */
static void gpt_heads(wgml_context *ctx, wgml_tensor *packed, const int64_t *sh, wgml_tensor **qkv)
{
    static const int bhtd[4] = {0, 2, 1, 3};
    wgml_tensor *all = wgml_reshape(ctx, packed, 4, (int64_t[4]){sh[0], sh[2], 3 * sh[1], sh[3]});
    for (int i = 0; i < 3; i++) qkv[i] = wgml_permute(ctx, wgml_slice(ctx, all, 2, i * sh[1], (i + 1) * sh[1], 1), bhtd);
}

/* Median seconds of causal attention's forward pass, or forward and backward (q, k, v
   trainable, L = sum(y * dout) so that dout is y's gradient), one evaluation a run; with
   packed (non-NULL) in the GPT step's layout (gpt_heads; the output and dout [B,T,H,D], the
   gradient packed's), else qkv_in [B,H,T,D] */
static double time_attention(wgml_context *ctx, wgml_tensor *const *qkv_in, wgml_tensor *packed, const int64_t *sh,
                             wgml_tensor *dout, bool backward, int reps)
{
    double t[64];
    if (reps > 64) reps = 64;
    double warm_until = bench_now() + WARMUP_SECONDS;
    for (int r = -1; r < reps; r++) {
        if (r == 0 && bench_now() < warm_until) r = -1;
        wgml_scope_begin(ctx);
        wgml_tensor *qkv[3] = {qkv_in[0], qkv_in[1], qkv_in[2]};
        if (packed) gpt_heads(ctx, packed, sh, qkv);
        wgml_tensor *y = wgml_attention(ctx, qkv[0], qkv[1], qkv[2], &(wgml_attention_desc){.causal = 1, .packed = packed, .out_bthd = packed != NULL});
        wgml_tensor *outs[3] = {y};
        int n = 1;
        wgml_status st = WGML_OK;
        if (backward) {
            st = wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, y, dout)));
            n = packed ? 1 : 3; /* (the packed input's gradient holds all three) */
            for (int i = 0; i < n; i++) outs[i] = wgml_grad(packed ? packed : qkv[i]);
        }
        wgml_synchronize(ctx);
        double t0 = bench_now();
        if (!st) st = wgml_eval(ctx, n, outs);
        wgml_synchronize(ctx);
        double el = bench_now() - t0;
        wgml_stats s;
        wgml_stats_get(ctx, &s);
        for (int i = 0; i < n && backward; i++) wgml_zero_grad(packed ? packed : qkv[i]);
        wgml_scope_end(ctx);
        if (st) {
            fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
            return NAN;
        }
        if (r >= 0) t[r] = gpu_time ? s.gpu_seconds_last : el;
    }
    return bench_median(t, reps);
}

/* y = attention(q, k, v) and its gradients for L = sum(y * dout), read into out[0..3] (each n
   floats) */
static wgml_status attention_results(wgml_context *ctx, wgml_tensor *const *qkv, wgml_tensor *dout, size_t n, float **out)
{
    wgml_scope_begin(ctx);
    wgml_tensor *y = wgml_attention(ctx, qkv[0], qkv[1], qkv[2], &(wgml_attention_desc){.causal = 1});
    wgml_status st = wgml_backward(wgml_sum_all(ctx, wgml_mul(ctx, y, dout)));
    if (!st) st = wgml_tensor_read(y, out[0], n);
    for (int i = 0; i < 3 && !st; i++) st = wgml_tensor_read(wgml_grad(qkv[i]), out[1 + i], n);
    for (int i = 0; i < 3; i++) wgml_zero_grad(qkv[i]);
    wgml_scope_end(ctx);
    return st;
}

/* wgml_attention at the shapes, causal, in TFLOP/s by FlashAttention's count:
   4 B H T^2 D / 2 for the forward pass, 2.5 times that for the backward; and the memory that
   forward + backward take above their inputs; forward + backward again in the GPT step's
   layout (rows ending _gpt_layout: q, k and v windows of one [B,T,3C] tensor, the output
   [B,T,H,D]). Then the same under mixed precision (the
   matrix units where the adapter has them: rows ending _mixed), with its error against the
   f32 kernels' results, max |mixed - f32| / max |f32| of y, dq, dk and dv in millionths. */
static void bench_attention(int quick)
{
    wgml_context *ctx;
    if (context_make(0, &ctx)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        exit(1);
    }
    const int64_t full[2][4] = {{64, 6, 256, 64}, {8, 12, 1024, 64}}, small[2][4] = {{2, 2, 128, 64}, {1, 2, 256, 64}};
    char name[80];
    for (int i = 0; i < 2; i++) {
        const int64_t *sh = quick ? small[i] : full[i];
        wgml_tensor *qkv[3], *dout = random_tensor(ctx, 4, sh);
        /* the GPT step's layout: one [B,T,3C] input, the output and its gradient [B,T,H,D] */
        const int64_t btc3[3] = {sh[0], sh[2], 3 * sh[1] * sh[3]}, bthd[4] = {sh[0], sh[2], sh[1], sh[3]};
        wgml_tensor *packed = random_tensor(ctx, 3, btc3), *dout_bthd = random_tensor(ctx, 4, bthd);
        wgml_requires_grad(packed, 1);
        for (int j = 0; j < 3; j++) {
            qkv[j] = random_tensor(ctx, 4, sh);
            wgml_requires_grad(qkv[j], 1);
        }
        size_t n = (size_t)(sh[0] * sh[1] * sh[2] * sh[3]);
        float *res[2][4];
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < 4; j++) res[m][j] = malloc(n * sizeof(float));
        double flops = 4.0 * (double)(sh[0] * sh[1]) * (double)(sh[2] * sh[2]) * (double)sh[3] / 2;
        /* WGML_BENCH_ATTN_MIXED_ONLY=1: the mixed rows alone (sweeps of WGML_ATTN_MATRIX) */
        const char *mo = getenv("WGML_BENCH_ATTN_MIXED_ONLY");
        bool mixed_only = mo && *mo == '1';
        for (int mixed = mixed_only; mixed < 2; mixed++) {
            const char *tag = mixed ? "_mixed" : "";
            if (mixed && wgml_set_compute_precision(ctx, WGML_PRECISION_MIXED)) {
                fprintf(stderr, "wgml bench: no mixed-precision rows: %s\n", wgml_error_message(ctx));
                wgml_clear_error(ctx);
                break;
            }
            snprintf(name, sizeof name, "attention_fwd_B%lld_H%lld_T%lld_D%lld%s", (long long)sh[0], (long long)sh[1],
                     (long long)sh[2], (long long)sh[3], tag);
            double sec = time_attention(ctx, qkv, NULL, sh, dout, false, quick ? 3 : 15);
            bench_report(name, sec, flops / sec / 1e12, "TFLOP/s");
            wgml_stats s0, s1;
            wgml_synchronize(ctx);
            wgml_stats_reset_peaks(ctx);
            wgml_stats_get(ctx, &s0);
            sec = time_attention(ctx, qkv, NULL, sh, dout, true, quick ? 3 : 15);
            wgml_stats_get(ctx, &s1);
            snprintf(name, sizeof name, "attention_fwdbwd_B%lld_H%lld_T%lld_D%lld%s", (long long)sh[0], (long long)sh[1],
                     (long long)sh[2], (long long)sh[3], tag);
            bench_report(name, sec, 3.5 * flops / sec / 1e12, "TFLOP/s");
            snprintf(name, sizeof name, "attention_fwdbwd_T%lld_peak_extra%s", (long long)sh[2], tag);
            last_host_seconds = 0;
            bench_report(name, 0, (double)(s1.bytes_in_use_peak - s0.bytes_in_use) / 1048576.0, "MiB above inputs");
            snprintf(name, sizeof name, "attention_fwdbwd_B%lld_H%lld_T%lld_D%lld_gpt_layout%s", (long long)sh[0], (long long)sh[1],
                     (long long)sh[2], (long long)sh[3], tag);
            sec = time_attention(ctx, qkv, packed, sh, dout_bthd, true, quick ? 3 : 15);
            bench_report(name, sec, 3.5 * flops / sec / 1e12, "TFLOP/s");
            if (!mixed_only && attention_results(ctx, qkv, dout, n, res[mixed])) {
                fprintf(stderr, "wgml bench: %s\n", wgml_error_message(ctx));
                wgml_clear_error(ctx);
                break;
            }
            static const char *const what[4] = {"y", "dq", "dk", "dv"};
            for (int j = 0; j < 4 && mixed && !mixed_only; j++) {
                double big = 0, err = 0;
                for (size_t e = 0; e < n; e++) {
                    big = fmax(big, fabs((double)res[0][j][e]));
                    err = fmax(err, fabs((double)res[1][j][e] - (double)res[0][j][e]));
                }
                snprintf(name, sizeof name, "attention_mixed_err_T%lld_%s", (long long)sh[2], what[j]);
                bench_report(name, 0, (big > 0 ? err / big : err) * 1e6, "ppm: max |mixed - f32| / max |f32|");
            }
        }
        wgml_set_compute_precision(ctx, WGML_PRECISION_F32);
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < 4; j++) free(res[m][j]);
        for (int j = 0; j < 3; j++) wgml_tensor_free(qkv[j]);
        wgml_tensor_free(dout);
        wgml_tensor_free(packed);
        wgml_tensor_free(dout_bthd);
    }
    wgml_context_free(ctx);
}

typedef struct bench_flags {
    int quick, json;
} bench_flags;

static int bench_flag(int opt, const char *arg, void *state)
{
    (void)arg;
    bench_flags *f = state;
    if (opt == 256) f->quick = 1;
    else if (opt == 257) gpu_time = 1;
    else if (opt == 258) f->json = 1;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    static const struct option flags[] = {{"quick", no_argument, 0, 256}, {"gpu-time", no_argument, 0, 257},
                                          {"json", no_argument, 0, 258},  {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    static const char usage[] =
        "usage: wgml bench [ops|matmul|attention|gather|transformer|gpt|train|decode|startup|all] [--json] [--quick] [--gpu-time]\n"
        "Times ops and the GPT on this adapter (default: all; train, the GPT's training steps at two sizes, only when named).\n"
        "--quick: small sizes; --gpu-time: GPU timestamps, one op per evaluation; --json: the results as JSON on stdout.\n";
    static const char *const targets[] = {"ops", "matmul", "attention", "gather", "transformer", "gpt", "train", "decode", "startup", "all"};
    bench_flags f = {0};
    char *pos[1];
    int npos = 0, prc = cli_parse(argc, argv, "bench", flags, usage, bench_flag, &f, pos, 1, &npos);
    if (prc) return prc == 1 ? 0 : 2;
    const char *what = npos ? pos[0] : "all";
    int known = 0;
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) known |= !strcmp(what, targets[i]);
    if (!known) {
        fprintf(stderr, "wgml bench: unknown target '%s'; want one of ops, matmul, attention, gather, transformer, gpt, train, decode, startup, all\n",
                what);
        return 2;
    }
    int quick = f.quick;
    if (quick) warmup_seconds = 0.3;
    const char *wu = getenv("WGML_BENCH_WARMUP");
    if (wu && atof(wu) >= 0) warmup_seconds = atof(wu);
    if (!strcmp(what, "decode")) cli_generation_runtime();
    wgml_context *probe;
    if (wgml_context_create(NULL, &probe)) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_create_error());
        return 1;
    }
    wgml_adapter_info info;
    wgml_adapter_info_get(probe, &info);
    wgml_context_free(probe);
    fprintf(stderr, "wgml bench on %s (%s), %s\n", info.name, info.backend,
            gpu_time ? "GPU timestamps, one op per evaluation" : "host clock, ops batched per submit");
    if (!strcmp(what, "ops") || !strcmp(what, "all")) bench_ops(quick);
    if (!strcmp(what, "matmul") || !strcmp(what, "all")) bench_matmul(quick);
    if (!strcmp(what, "attention") || !strcmp(what, "transformer") || !strcmp(what, "all")) bench_attention(quick);
    if (!strcmp(what, "gather") || !strcmp(what, "transformer") || !strcmp(what, "all")) bench_gather(quick);
    if (!strcmp(what, "gpt") || !strcmp(what, "decode") || !strcmp(what, "all")) bench_gpt(quick, !strcmp(what, "decode"));
    /* not in all: a GPT-2-sized model's minutes on a small GPU */
    if (!strcmp(what, "train")) bench_train(quick);
    if (!strcmp(what, "startup")) bench_startup();
    if (f.json) {
        /* every result under "results"; the transformer ops' and the GPT's also by family:
           "attention", "gather", "scatter" and "gpt" hold the results whose names begin so.
           A failed measurement is null (JSON has no NaN). */
        static const char *const groups[] = {"results", "attention", "gather", "scatter", "gpt", "qwen3"};
        json_t *root = json_object();
        json_object_set_new(root, "device", json_string(info.name));
        for (int g = 0; g < 6; g++) {
            size_t len = g ? strlen(groups[g]) : 0;
            json_t *group = json_object();
            for (int i = 0; i < nresults; i++) {
                if (len && strncmp(results[i].name, groups[g], len)) continue;
                const result *r = &results[i];
                json_t *e = json_object();
                bool ok = isfinite(r->seconds) && isfinite(r->value);
                json_object_set_new(e, "ms", ok ? json_real(r->seconds * 1e3) : json_null());
                json_object_set_new(e, "value", ok ? json_real(r->value) : json_null());
                json_object_set_new(e, "unit", json_string(r->unit));
                json_object_set_new(e, "host_us_per_eval", json_real(r->host_seconds * 1e6));
                json_object_set_new(group, r->name, e);
            }
            if (g == 0 || json_object_size(group)) json_object_set_new(root, groups[g], group);
            else json_decref(group);
        }
        /* the GEMMs' errors (matmul_accuracy): "accuracy": {"gemm_S^3_error": {"f32": {...},
           "f16math": {...}, "f16sums": {...}, "samples": n}} */
        const accuracy *a = &measured_accuracy;
        if (a->name[0]) {
            json_t *acc = json_object(), *e = json_object();
            for (int v = 0; v < MATH_MODES; v++) {
                json_t *k = json_object();
                json_object_set_new(k, "max_err_over_sum_abs", json_real(a->max_abs[v]));
                json_object_set_new(k, "rms_err_over_sum_abs", json_real(a->rms_abs[v]));
                json_object_set_new(k, "max_rel_err", json_real(a->max_rel[v]));
                json_object_set_new(k, "rms_rel_err", json_real(a->rms_rel[v]));
                json_object_set_new(e, math_name[v], k);
            }
            json_object_set_new(e, "samples", json_integer(a->samples));
            json_object_set_new(acc, a->name, e);
            json_object_set_new(root, "accuracy", acc);
        }
        json_dumpf(root, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(root);
    }
    if (nfailed) fprintf(stderr, "wgml bench: %d measurement(s) failed\n", nfailed);
    return nfailed ? 1 : 0;
}
