/*
 * sync_probe: what a dependent step costs on this adapter, a launch boundary against a barrier
 * across the whole grid inside one launch, so that the decode plan's 5 launches a layer can be
 * judged against one persistent launch. W workgroups of 256 threads take N steps; in each, every
 * workgroup reads its own slice of a weight-like buffer (WB 16-byte words a workgroup, 0: none;
 * a different region each step, 32 regions, so the reads come from memory) and then writes one
 * word that the next step's neighbour reads. Forms, each timed by GPU timestamps around one pass
 * (median of 7), per step:
 *   chain     N launches in one pass (the API's barrier between them)
 *   grid      one launch, a barrier over the grid between steps (an atomic counter each workgroup
 *             adds to and spins on, device-scope fences around it: wgpu-native's storageBarrier);
 *             the step's loads after the barrier
 *   grid+pre  the same, each step's loads issued before the barrier that ends the previous step
 * Every workgroup of a grid form must be resident at once: W at most what the GPU holds (past
 * it the waits give up after 2^22 reads and the result reads WRONG). The result of each form is
 * checked (every word N after N steps). wgpu-native only.
 *
 *   sync_probe [--steps N] [--forms F] [--workgroups W]   (F = 1: the chain alone, for a CPU adapter, whose
 *                                        workgroups are not all resident)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/pass_timer.h"
#include "bench/timing.h"
#include "core/context.h"

static wgml_context *ctx;
static bench_pass_timer timer;
enum { REGIONS = 32 };

static WGPUBuffer make_buffer(uint64_t size, WGPUBufferUsage extra)
{
    WGPUBufferDescriptor d = {.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst | extra, .size = size};
    return wgpuDeviceCreateBuffer(ctx->rt.device, &d);
}

/* form 0: one step a launch; 1: N steps, loads after the barrier; 2: loads before it */
static char *source(int form, unsigned W, unsigned WB, unsigned N, unsigned regions)
{
    char *s = malloc(8192);
    int n = snprintf(s, 8192,
                     "@group(0) @binding(0) var<storage, read_write> st: array<atomic<u32>>;\n"
                     "@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;\n"
                     "@group(0) @binding(2) var<storage, read_write> bar: array<atomic<u32>>;\n"
                     "const W: u32 = %uu;\nconst WB: u32 = %uu;\nconst N: u32 = %uu;\nconst PER: u32 = %uu;\n"
                     "fn load(step: u32, wg: u32, tid: u32) -> vec4<u32> {\n"
                     "    var acc = vec4<u32>(0u);\n"
                     "    let base = ((step %% %uu) * W + wg) * WB;\n"
                     "    for (var k = 0u; k < PER; k++) { acc ^= w[base + k * 256u + tid]; }\n"
                     "    return acc;\n}\n"
                     /* (st: [W) each workgroup's launches so far, then the values by the step's parity) */
                     "fn advance(step: u32, wg: u32, tid: u32, acc: vec4<u32>) {\n"
                     "    let od = W + (step %% 2u) * W;\n    let nw = W + ((step + 1u) %% 2u) * W;\n"
                     "    if (tid == 0u) {\n"
                     "        let v = atomicLoad(&st[od + (wg + 1u) %% W]) + 1u + select(0u, 1u, all(acc == vec4<u32>(7u, 5u, 3u, 1u)));\n"
                     "        atomicStore(&st[nw + wg], v);\n    }\n"
                     "}\n"
                     "fn grid_sync(goal: u32, tid: u32) {\n"
                     "    storageBarrier();\n"
                     "    if (tid == 0u) {\n"
                     "        atomicAdd(&bar[0], 1u);\n"
                     "        for (var n = 0u; n < 4194304u; n++) { if (atomicLoad(&bar[0]) >= goal) { break; } }\n"
                     "    }\n"
                     "    storageBarrier();\n"
                     "}\n"
                     "@compute @workgroup_size(256)\n"
                     "fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) tid: u32) {\n"
                     "    let wg = g.x;\n",
                     W, WB, N, WB / 256, regions);
    if (form == 0)
        n += snprintf(s + n, 8192 - (size_t)n, "    let step = atomicLoad(&st[wg]);\n"
                                               "    let acc = load(step, wg, tid);\n    workgroupBarrier();\n    advance(step, wg, tid, acc);\n"
                                               "    if (tid == 0u) { atomicStore(&st[wg], step + 1u); }\n}\n");
    else if (form == 1)
        n += snprintf(s + n, 8192 - (size_t)n, "    for (var step = 0u; step < N; step++) {\n"
                                               "        let acc = load(step, wg, tid);\n        workgroupBarrier();\n"
                                               "        advance(step, wg, tid, acc);\n        grid_sync((step + 1u) * W, tid);\n    }\n}\n");
    else
        n += snprintf(s + n, 8192 - (size_t)n, "    var acc = load(0u, wg, tid);\n"
                                               "    for (var step = 0u; step < N; step++) {\n"
                                               "        workgroupBarrier();\n        advance(step, wg, tid, acc);\n"
                                               "        acc = load(step + 1u, wg, tid);\n"
                                               "        grid_sync((step + 1u) * W, tid);\n    }\n}\n");
    return s;
}

int main(int argc, char **argv)
{
    unsigned N = 200;
    int nforms = 3;
    unsigned only_w = 0; /* (--workgroups W: that many alone) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) N = (unsigned)atoi(argv[++i]);
        if (!strcmp(argv[i], "--forms") && i + 1 < argc) nforms = atoi(argv[++i]);
        if (!strcmp(argv[i], "--workgroups") && i + 1 < argc) only_w = (unsigned)atoi(argv[++i]);
    }
    wgml_context_desc cd = {0};
    if (wgml_context_create(&cd, &ctx)) {
        fprintf(stderr, "sync_probe: %s\n", wgml_last_create_error());
        return 1;
    }
    if (bench_pass_timer_init(ctx, &timer)) {
        fprintf(stderr, "sync_probe: the adapter has no timestamp queries\n");
        return 1;
    }
    printf("adapter %s, runtime %s\n", ctx->rt.info.name, ctx->rt.info.runtime);
    WGPUBufferDescriptor bd = {.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 1 << 16};
    static const unsigned Ws[] = {132, 264, 528}, WBs[] = {0, 256, 1024};
    for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++)
        for (size_t bi = 0; bi < sizeof WBs / sizeof WBs[0]; bi++) {
            const unsigned W = only_w ? only_w : Ws[wi], WB = WBs[bi];
            if (only_w && wi) break;
            /* (at most 32 regions, fewer where they would pass a binding's limit) */
            const uint64_t slice = (uint64_t)W * (WB ? WB : 1) * 16, most = ctx->rt.info.max_storage_buffer_binding_size / slice;
            const unsigned regions = most < REGIONS ? (unsigned)most : REGIONS;
            const uint64_t wbytes = regions * slice;
            WGPUBuffer st = make_buffer(3 * W * 4, 0), wt = make_buffer(wbytes, 0), bar = make_buffer(256, 0);
            WGPUBuffer rb = wgpuDeviceCreateBuffer(ctx->rt.device, &bd);
            /* (random words: no compression of the reads) */
            uint32_t *host = malloc(wbytes);
            uint64_t x = 0x9e3779b97f4a7c15ull ^ W ^ ((uint64_t)WB << 20);
            for (uint64_t i = 0; host && i < wbytes / 4; i++) x = x * 6364136223846793005ull + 1442695040888963407ull, host[i] = (uint32_t)(x >> 32);
            if (host) wgpuQueueWriteBuffer(ctx->rt.queue, wt, 0, host, wbytes);
            free(host);
            for (int form = 0; form < nforms; form++) {
                char *src = source(form, W, WB, N, regions);
                wgml_pipeline *p = wgml_pipeline_get(ctx, src, true);
                free(src);
                if (!p) {
                    printf("W %u WB %u form %d: %s\n", W, WB, form, wgml_error_message(ctx));
                    continue;
                }
                WGPUBindGroupEntry e[3] = {{.binding = 0, .buffer = st, .size = 3 * W * 4},
                                           {.binding = 1, .buffer = wt, .size = wbytes},
                                           {.binding = 2, .buffer = bar, .size = 256}};
                WGPUBindGroupDescriptor bgd = {.layout = p->layout, .entryCount = form ? 3 : 2, .entries = e}; /* (bar unused by the chain) */
                WGPUBindGroup bg = wgpuDeviceCreateBindGroup(ctx->rt.device, &bgd);
                double t[7];
                int ok = 1;
                for (int r = -1; r < 7; r++) {
                    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->rt.device, NULL);
                    wgpuCommandEncoderClearBuffer(enc, st, 0, 3 * W * 4);
                    wgpuCommandEncoderClearBuffer(enc, bar, 0, 256);
                    WGPUPassTimestampWrites tw = bench_pass_timer_writes(&timer);
                    WGPUComputePassDescriptor pd = {.timestampWrites = &tw};
                    WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &pd);
                    wgpuComputePassEncoderSetPipeline(pass, p->pipeline);
                    wgpuComputePassEncoderSetBindGroup(pass, 0, bg, 0, NULL);
                    for (unsigned k = 0; k < (form == 0 ? N : 1); k++) wgpuComputePassEncoderDispatchWorkgroups(pass, W, 1, 1);
                    wgpuComputePassEncoderEnd(pass);
                    wgpuComputePassEncoderRelease(pass);
                    bench_pass_timer_resolve(&timer, enc);
                    wgpuCommandEncoderCopyBufferToBuffer(enc, st, (1 + N % 2) * W * 4, rb, 0, W * 4);
                    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
                    wgpuQueueSubmit(ctx->rt.queue, 1, &cb);
                    double s = bench_pass_timer_seconds(ctx, &timer);
                    wgpuCommandBufferRelease(cb);
                    wgpuCommandEncoderRelease(enc);
                    if (r >= 0) t[r] = s / N;
                    if (!wgml_map_read(&ctx->rt, rb, W * 4)) {
                        const uint32_t *v = wgpuBufferGetConstMappedRange(rb, 0, W * 4);
                        for (unsigned i = 0; v && i < W; i++) ok &= v[i] == N;
                        if (getenv("SYNC_PROBE_DEBUG") && v && (v[0] != N || v[W - 1] != N)) for (unsigned i = 0; i < W && i < 4; i++) printf("  rep %d st[%u] = %u\n", r, i, v[i]);
                        wgpuBufferUnmap(rb);
                    }
                }
                static const char *const forms[] = {"chain", "grid", "grid+pre"};
                printf("W %4u  %6.1f KB a workgroup a step  %-9s %7.2f us a step%s\n", W, WB * 16 / 1024.0, forms[form],
                       bench_median(t, 7) * 1e6, ok ? "" : "  (WRONG RESULT)");
                fflush(stdout);
                wgpuBindGroupRelease(bg);
            }
            wgpuBufferRelease(st), wgpuBufferRelease(wt), wgpuBufferRelease(bar), wgpuBufferRelease(rb);
        }
    bench_pass_timer_free(&timer);
    wgml_context_free(ctx);
    return 0;
}
