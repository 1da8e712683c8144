/*
 * The pipeline cache: every distinct kernel (keyed by its full WGSL source) is compiled
 * once per context. Hand-written and generated kernels whose indexing is guarded in the
 * WGSL go through wgpuDeviceCreateShaderModuleTrusted without runtime checks: naga's checked
 * code ran 50x slower on the H100 (shared/DEVICE.md).
 */
#include <stdlib.h>
#include <string.h>

#include "core/context.h"

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

wgml_pipeline *wgml_pipeline_get(wgml_context *ctx, const char *wgsl, bool trusted)
{
    uint64_t h = fnv1a(wgsl);
    wgml_pipeline **bucket = &ctx->pipelines[h % WGML_PIPELINE_BUCKETS];
    for (wgml_pipeline *p = *bucket; p; p = p->next)
        if (p->hash == h && strcmp(p->key, wgsl) == 0) {
            ctx->stats.pipeline_cache_hits++;
            return p;
        }

    wgml_pipeline *p = calloc(1, sizeof *p);
    char *key = p ? strdup(wgsl) : NULL;
    if (!key) {
        free(p);
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    WGPUShaderSourceWGSL src = {.chain = {.sType = WGPUSType_ShaderSourceWGSL}, .code = wgml_sv(wgsl)};
    WGPUShaderModuleDescriptor md = {.nextInChain = &src.chain, .label = wgml_sv("wgml kernel")};
    wgml_scope_push(ctx);
    WGPUShaderModule module = (trusted && ctx->trusted_kernels)
        ? wgpuDeviceCreateShaderModuleTrusted(ctx->device, &md, WGPUShaderRuntimeChecks_None)
        : wgpuDeviceCreateShaderModule(ctx->device, &md);
    WGPUComputePipelineDescriptor pd = {
        .label = wgml_sv("wgml kernel"),
        .compute = {.module = module, .entryPoint = wgml_sv("main")},
    };
    WGPUComputePipeline pipeline = module ? wgpuDeviceCreateComputePipeline(ctx->device, &pd) : NULL;
    if (module) wgpuShaderModuleRelease(module);
    wgml_status st = wgml_scope_pop(ctx, "compiling a kernel");
    if (st != WGML_OK || !pipeline) {
        if (pipeline) wgpuComputePipelineRelease(pipeline);
        if (st == WGML_OK) wgml_fail(ctx, WGML_ERROR_VALIDATION, "compiling a kernel failed");
        free(key);
        free(p);
        return NULL;
    }
    p->hash = h;
    p->key = key;
    p->pipeline = pipeline;
    p->layout = wgpuComputePipelineGetBindGroupLayout(pipeline, 0);
    p->next = *bucket;
    *bucket = p;
    ctx->stats.pipelines_compiled++;
    return p;
}

void wgml_pipelines_destroy(wgml_context *ctx)
{
    for (int i = 0; i < WGML_PIPELINE_BUCKETS; i++) {
        wgml_pipeline *p = ctx->pipelines[i];
        while (p) {
            wgml_pipeline *next = p->next;
            if (p->layout) wgpuBindGroupLayoutRelease(p->layout);
            wgpuComputePipelineRelease(p->pipeline);
            free(p->key);
            free(p);
            p = next;
        }
        ctx->pipelines[i] = NULL;
    }
}
