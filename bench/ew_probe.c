/*
 * ew_probe: how much memory bandwidth a plain WGSL kernel reaches on this adapter, outside
 * wgml's graph executor, so that wgml's own elementwise numbers have a ceiling to be judged
 * against. c = a + b on 2^26 floats (--quick: 2^22), in kernel variants (workgroup size,
 * vec4 or scalar, elements per thread, grid-stride loop, checked or trusted module) and
 * timing modes:
 *   single  one dispatch per pass and submit, GPU timestamps around the pass (median of 15)
 *   chain   20 dispatches in one pass on the same buffers (each waits for the one before),
 *           timestamps around the pass / 20
 *   host    the same 20 dispatches, host clock from submit to completion / 20
 * Also a 256 MB copyBufferToBuffer, and wgml_add through the library (same device).
 * Prints one line per measurement: GB/s counted as 3 x 4 bytes per element.
 *
 *   ew_probe [--quick] [--data pattern|rand16|rand32]
 * The data (default rand32: every bit random) matters if the GPU compresses memory: pattern
 * is a short repeating sequence, rand16 has 16 random bits per value (wgml bench's data).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/pass_timer.h"
#include "bench/timing.h"
#include "core/context.h"


static wgml_context *ctx;
static const char *data_mode = "rand32";

static void fill(float *x, uint32_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (!strcmp(data_mode, "pattern")) x[i] = (float)(i % 1000) * 0.001f;
        else if (!strcmp(data_mode, "rand16")) x[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        else {
            uint32_t bits = (uint32_t)(s >> 32);
            x[i] = (float)(bits >> 8) / 16777216.0f - 0.5f + (float)(bits & 0xff) * 1e-9f;
        }
    }
}
static bench_pass_timer timer;

static WGPUBuffer make_buffer(uint64_t size)
{
    WGPUBufferDescriptor d = {.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst,
                              .size = size};
    return wgpuDeviceCreateBuffer(ctx->rt.device, &d);
}

typedef struct variant {
    const char *name;
    int wg;        /* workgroup size */
    int vec4;      /* 1: vec4 elements */
    int per;       /* elements (of the vector type) per thread, strided by wg */
    int stride;    /* 1: grid-stride loop over a fixed grid */
    int trusted;
    int chain;     /* c = 25 x (x * s, + s', + b, relu) of a: 1 literal scalars, 2 scalars from
                      the uniform block, 3 literals and relu as max (NaN not kept), 4 scalars
                      through a function as wgml's fusion writes them */
} variant;

/* The parameter block (scalars for the chain variants) and the three buffers of T */
static int put_bindings(char *s, const char *T)
{
    return snprintf(s, 16384,
                    "alias T = %s;\n"
                    "struct P { n: u32, gx: u32, total: u32, _p: u32, s: array<vec4<f32>, 13> }\n"
                    "@group(0) @binding(0) var<uniform> p: P;\n"
                    "@group(0) @binding(1) var<storage, read> a: array<T>;\n"
                    "@group(0) @binding(2) var<storage, read> b: array<T>;\n"
                    "@group(0) @binding(3) var<storage, read_write> c: array<T>;\n",
                    T);
}

static char *source(const variant *v)
{
    char *s = malloc(16384);
    const char *T = v->vec4 ? "vec4<f32>" : "f32";
    if (v->chain) {
        int n = put_bindings(s, "vec4<f32>");
        n += snprintf(s + n, 16384 - (size_t)n,
                      "fn S(k: u32) -> T { return T(p.s[k / 4u][k %% 4u]); }\n"
                      "@compute @workgroup_size(256)\n"
                      "fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) l: u32) {\n"
                      "    let i = (w.x + w.y * p.gx) * 256u + l;\n"
                      "    if (i >= p.n) { return; }\n"
                      "    let y = b[i];\n"
                      "    var x = a[i];\n");
        for (int g = 0; g < 25; g++) {
            char s1[64], s2[64];
            if (v->chain == 2) {
                snprintf(s1, sizeof s1, "T(p.s[%d][%d])", 2 * g / 4, 2 * g % 4);
                snprintf(s2, sizeof s2, "T(p.s[%d][%d])", (2 * g + 1) / 4, (2 * g + 1) % 4);
            } else if (v->chain == 4) {
                snprintf(s1, sizeof s1, "S(%du)", 2 * g);
                snprintf(s2, sizeof s2, "S(%du)", 2 * g + 1);
            } else {
                snprintf(s1, sizeof s1, "T(0.999)");
                snprintf(s2, sizeof s2, "T(0.001)");
            }
            n += snprintf(s + n, 16384 - (size_t)n, "    x = x * %s;\n    x = x + %s;\n    x = x + y;\n", s1, s2);
            n += snprintf(s + n, 16384 - (size_t)n, v->chain == 3 ? "    x = max(x, T(0.0));\n"
                                                                 : "    x = select(x, T(0.0), x < T(0.0));\n");
        }
        snprintf(s + n, 16384 - (size_t)n, "    c[i] = x;\n}\n");
        return s;
    }
    int n = put_bindings(s, T);
    if (v->stride)
        snprintf(s + n, 16384 - (size_t)n,
                 "@compute @workgroup_size(%d)\n"
                 "fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
                 "    for (var i = g.x; i < p.n; i += p.total) { c[i] = a[i] + b[i]; }\n"
                 "}\n",
                 v->wg);
    else {
        n += snprintf(s + n, 16384 - (size_t)n,
                      "@compute @workgroup_size(%d)\n"
                      "fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) l: u32) {\n"
                      "    let base = (w.x + w.y * p.gx) * %du + l;\n",
                      v->wg, v->wg * v->per);
        for (int u = 0; u < v->per; u++)
            n += snprintf(s + n, 16384 - (size_t)n, "    let x%d = base + %du;\n    var a%d = %s(0.0); var b%d = %s(0.0);\n"
                          "    if (x%d < p.n) { a%d = a[x%d]; b%d = b[x%d]; }\n", u, u * v->wg, u, T, u, T, u, u, u, u, u);
        for (int u = 0; u < v->per; u++)
            n += snprintf(s + n, 16384 - (size_t)n, "    if (x%d < p.n) { c[x%d] = a%d + b%d; }\n", u, u, u, u);
        snprintf(s + n, 16384 - (size_t)n, "}\n");
    }
    return s;
}

static void report(const char *what, const char *mode, double s, double bytes)
{
    printf("%-26s %-7s %9.1f us %8.0f GB/s\n", what, mode, s * 1e6, bytes / s / 1e9);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data_mode = argv[++i];
    }
    printf("data: %s\n", data_mode);
    wgml_context_desc cd = {0};
    if (wgml_context_create(&cd, &ctx)) {
        fprintf(stderr, "ew_probe: %s\n", wgml_last_create_error());
        return 1;
    }
    if (bench_pass_timer_init(ctx, &timer)) {
        fprintf(stderr, "ew_probe: the adapter has no timestamp queries\n");
        return 1;
    }
    uint32_t n = quick ? 1u << 22 : 1u << 26;
    uint64_t bytes = (uint64_t)n * 4;

    WGPUBuffer a = make_buffer(bytes), b = make_buffer(bytes), c = make_buffer(bytes);
    float *host = malloc(bytes);
    fill(host, n, 1);
    wgpuQueueWriteBuffer(ctx->rt.queue, a, 0, host, bytes);
    fill(host, n, 2);
    wgpuQueueWriteBuffer(ctx->rt.queue, b, 0, host, bytes);
    wgpuQueueWriteBuffer(ctx->rt.queue, c, 0, host, bytes);
    free(host);
    WGPUBufferDescriptor ud = {.usage = WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, .size = 256};
    WGPUBuffer params = wgpuDeviceCreateBuffer(ctx->rt.device, &ud);

    static const variant variants[] = {
        {"v4 wg256 x1 trusted", 256, 1, 1, 0, 1, 0},
        {"v4 wg256 x1 checked", 256, 1, 1, 0, 0, 0},
        {"v4 wg64 x1 trusted", 64, 1, 1, 0, 1, 0},
        {"v4 wg128 x1 trusted", 128, 1, 1, 0, 1, 0},
        {"v4 wg512 x1 trusted", 512, 1, 1, 0, 1, 0},
        {"v4 wg1024 x1 trusted", 1024, 1, 1, 0, 1, 0},
        {"v4 wg256 x2 trusted", 256, 1, 2, 0, 1, 0},
        {"v4 wg256 x4 trusted", 256, 1, 4, 0, 1, 0},
        {"v4 wg256 stride trusted", 256, 1, 1, 1, 1, 0},
        {"f32 wg256 x1 trusted", 256, 0, 1, 0, 1, 0},
        {"f32 wg256 x4 trusted", 256, 0, 4, 0, 1, 0},
        {"chain literal", 256, 1, 1, 0, 1, 1},
        {"chain uniform", 256, 1, 1, 0, 1, 2},
        {"chain literal max", 256, 1, 1, 0, 1, 3},
        {"chain S()", 256, 1, 1, 0, 1, 4},
    };
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        const variant *v = &variants[vi];
        char *src = source(v);
        wgml_pipeline *p = wgml_pipeline_get(ctx, src, v->trusted);
        free(src);
        if (!p) {
            printf("%s: %s\n", v->name, wgml_error_message(ctx));
            continue;
        }
        uint32_t items = v->vec4 ? n / 4 : n;
        uint32_t groups = v->stride ? 132u * 16u : (items + (uint32_t)(v->wg * v->per) - 1) / (uint32_t)(v->wg * v->per);
        uint32_t gy = (groups + 65534) / 65535, gx = (groups + gy - 1) / gy;
        uint32_t pr[56] = {items, gx, gx * gy * (uint32_t)v->wg, 0};
        for (int k = 0; k < 52; k++) {
            float f = k % 2 ? 0.001f : 0.999f;
            memcpy(&pr[4 + k], &f, 4);
        }
        wgpuQueueWriteBuffer(ctx->rt.queue, params, 0, pr, sizeof pr);
        WGPUBindGroupEntry e[4] = {
            {.binding = 0, .buffer = params, .size = sizeof pr},
            {.binding = 1, .buffer = a, .size = bytes},
            {.binding = 2, .buffer = b, .size = bytes},
            {.binding = 3, .buffer = c, .size = bytes},
        };
        WGPUBindGroupDescriptor bgd = {.layout = p->layout, .entryCount = 4, .entries = e};
        WGPUBindGroup bg = wgpuDeviceCreateBindGroup(ctx->rt.device, &bgd);
        double t[20];
        for (int mode = 0; mode < 3; mode++) {
            int reps = mode == 0 ? 15 : 5, per_pass = mode == 0 ? 1 : 20;
            for (int r = -1; r < reps; r++) {
                WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
                WGPUPassTimestampWrites tw = bench_pass_timer_writes(&timer);
                WGPUComputePassDescriptor pd = {.timestampWrites = &tw};
                WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
                wgpuComputePassEncoderSetPipeline(pass, p->pipeline);
                wgpuComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
                for (int k = 0; k < per_pass; k++) wgpuComputePassEncoderDispatchWorkgroups(pass, gx, gy, 1);
                wgpuComputePassEncoderEnd(pass);
                wgpuComputePassEncoderRelease(pass);
                bench_pass_timer_resolve(&timer, enc);
                WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
                double t0 = bench_now();
                wgpuQueueSubmit(ctx->rt.queue, 1, &cb);
                double s = bench_pass_timer_seconds(ctx, &timer);
                double host_s = bench_now() - t0;
                wgpuCommandBufferRelease(cb);
                wgpuCommandEncoderRelease(enc);
                if (r >= 0) t[r] = (mode == 2 ? host_s : s) / per_pass;
            }
            report(v->name, mode == 0 ? "single" : mode == 1 ? "chain" : "host", bench_median(t, reps), 3.0 * (double)bytes);
        }
        wgpuBindGroupRelease(bg);
    }

    /* 8 independent adds in one pass (no barriers between them): distinct buffers, then
       distinct outputs with shared inputs */
    for (int shared = 0; shared < 2; shared++) {
        enum { K = 8 };
        WGPUBuffer sa[K], sb[K], sc[K];
        WGPUBindGroup bgs[K];
        const variant v = {"v4 wg256 x1 trusted", 256, 1, 1, 0, 1, 0};
        char *src = source(&v);
        wgml_pipeline *p = wgml_pipeline_get(ctx, src, true);
        free(src);
        uint32_t groups = n / 4 / 256, gy = (groups + 65534) / 65535, gx = (groups + gy - 1) / gy;
        uint32_t pr[56] = {n / 4, gx, 0, 0};
        wgpuQueueWriteBuffer(ctx->rt.queue, params, 0, pr, sizeof pr);
        for (int k = 0; k < K; k++) {
            sa[k] = shared && k ? sa[0] : make_buffer(bytes);
            sb[k] = shared && k ? sb[0] : make_buffer(bytes);
            sc[k] = make_buffer(bytes);
            if (!shared || !k) {
                WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
                wgpuCommandEncoderCopyBufferToBuffer(enc, a, 0, sa[k], 0, bytes);
                wgpuCommandEncoderCopyBufferToBuffer(enc, b, 0, sb[k], 0, bytes);
                WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
                wgpuQueueSubmit(ctx->rt.queue, 1, &cb);
                wgpuCommandBufferRelease(cb);
                wgpuCommandEncoderRelease(enc);
            }
            WGPUBindGroupEntry e[4] = {
                {.binding = 0, .buffer = params, .size = sizeof pr},
                {.binding = 1, .buffer = sa[k], .size = bytes},
                {.binding = 2, .buffer = sb[k], .size = bytes},
                {.binding = 3, .buffer = sc[k], .size = bytes},
            };
            WGPUBindGroupDescriptor bgd = {.layout = p->layout, .entryCount = 4, .entries = e};
            bgs[k] = wgpuDeviceCreateBindGroup(ctx->rt.device, &bgd);
        }
        double t[9], th[9];
        for (int r = -1; r < 9; r++) {
            WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
            WGPUPassTimestampWrites tw = bench_pass_timer_writes(&timer);
            WGPUComputePassDescriptor pd = {.timestampWrites = &tw};
            WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
            wgpuComputePassEncoderSetPipeline(pass, p->pipeline);
            for (int k = 0; k < K; k++) {
                wgpuComputePassEncoderSetBindGroup(pass, 0, bgs[k], 0, NULL);
                wgpuComputePassEncoderDispatchWorkgroups(pass, gx, gy, 1);
            }
            wgpuComputePassEncoderEnd(pass);
            wgpuComputePassEncoderRelease(pass);
            bench_pass_timer_resolve(&timer, enc);
            WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
            wgml_synchronize(ctx);
            double t0 = bench_now();
            wgpuQueueSubmit(ctx->rt.queue, 1, &cb);
            double gs = bench_pass_timer_seconds(ctx, &timer);
            if (r >= 0) t[r] = gs / K, th[r] = (bench_now() - t0) / K;
            wgpuCommandBufferRelease(cb);
            wgpuCommandEncoderRelease(enc);
        }
        const char *what = shared ? "8 concurrent, shared in" : "8 concurrent, distinct";
        report(what, "gpu", bench_median(t, 9), 3.0 * (double)bytes);
        report(what, "host", bench_median(th, 9), 3.0 * (double)bytes);
        for (int k = 0; k < K; k++) {
            wgpuBindGroupRelease(bgs[k]);
            if (!shared || !k) wgpuBufferRelease(sa[k]), wgpuBufferRelease(sb[k]);
            wgpuBufferRelease(sc[k]);
        }
    }

    /* a plain copy: bytes read + bytes written */
    {
        double t[9];
        for (int r = -1; r < 9; r++) {
            WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
            wgpuCommandEncoderCopyBufferToBuffer(enc, a, 0, c, 0, bytes);
            WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
            wgml_synchronize(ctx);
            double t0 = bench_now();
            wgpuQueueSubmit(ctx->rt.queue, 1, &cb);
            wgml_synchronize(ctx);
            if (r >= 0) t[r] = bench_now() - t0;
            wgpuCommandBufferRelease(cb);
            wgpuCommandEncoderRelease(enc);
        }
        report("copyBufferToBuffer", "host", bench_median(t, 9), 2.0 * (double)bytes);
    }
    wgpuBufferRelease(a);
    wgpuBufferRelease(b);
    wgpuBufferRelease(c);
    wgpuBufferRelease(params);

    /* wgml_add through the library (a second context with GPU timing): one op per
       evaluation, and 8 independent ones in one evaluation */
    {
        wgml_context *tc;
        wgml_context_desc td = {.gpu_timing = true};
        if (wgml_context_create(&td, &tc)) return 1;
        enum { K = 8 };
        int64_t shape = n;
        float *d = malloc(bytes);
        wgml_tensor *x[K], *y[K];
        for (int k = 0; k < K; k++) {
            fill(d, n, 10 + 2 * (uint64_t)k);
            wgml_tensor_from_data(tc, 1, &shape, d, n, &x[k]);
            fill(d, n, 11 + 2 * (uint64_t)k);
            wgml_tensor_from_data(tc, 1, &shape, d, n, &y[k]);
        }
        free(d);
        for (int mode = 0; mode < 4; mode++) {
            int m = mode % 2 ? K : 1, chain = mode >= 2;
            double t[15], tg[15];
            double warm_until = bench_now() + 3.0; /* fresh tensors ran slow for their first seconds */
            for (int r = -1; r < 15; r++) {
                if (r == 0 && bench_now() < warm_until) r = -1;
                wgml_scope_begin(tc);
                wgml_tensor *z[K];
                for (int k = 0; k < m; k++) {
                    z[k] = chain ? x[k] : wgml_add(tc, x[k], y[k]);
                    for (int i = 0; chain && i < 100; i++) /* bench's chain of 100 */
                        z[k] = i % 4 == 0 ? wgml_binary_scalar(tc, WGML_MUL, z[k], 0.999f)
                             : i % 4 == 1 ? wgml_binary_scalar(tc, WGML_ADD, z[k], 0.001f)
                             : i % 4 == 2 ? wgml_add(tc, z[k], y[k]) : wgml_relu(tc, z[k]);
                }
                wgml_synchronize(tc);
                double t0 = bench_now();
                wgml_eval(tc, m, z);
                wgml_synchronize(tc);
                wgml_stats st;
                wgml_stats_get(tc, &st);
                if (r >= 0) t[r] = (bench_now() - t0) / m, tg[r] = st.gpu_seconds_last / m;
                wgml_scope_end(tc);
            }
            static const char *names[] = {"wgml_add", "wgml_add x8 one eval", "wgml chain100", "wgml chain100 x8"};
            report(names[mode], "host", bench_median(t, 15), 3.0 * (double)bytes);
            report(names[mode], "gpu", bench_median(tg, 15), 3.0 * (double)bytes);
        }
        for (int k = 0; k < K; k++) wgml_tensor_free(x[k]), wgml_tensor_free(y[k]);
        wgml_context_free(tc);
    }
    bench_pass_timer_free(&timer);
    wgml_context_free(ctx);
    return 0;
}
