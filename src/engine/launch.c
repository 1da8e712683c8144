/* Launches: grids within the adapter's limits, the check every launch passes, and the
   pipelines of the kernels embedded from src/. */
#include "engine/launch.h"

#include <string.h>

#include "core/sbuf.h"
#include "kernels/wgsl_sources.h"

uint32_t wgml_grid(wgml_context *ctx, uint64_t groups, uint32_t out[3])
{
    uint64_t maxd = ctx->rt.limits.maxComputeWorkgroupsPerDimension;
    if (groups == 0) groups = 1;
    uint64_t gy = (groups + maxd - 1) / maxd;
    uint64_t gx = (groups + gy - 1) / gy;
    out[0] = (uint32_t)gx;
    out[1] = (uint32_t)gy;
    out[2] = 1;
    return (uint32_t)gx;
}

wgml_status wgml_check_launch(wgml_context *ctx, const wgml_launch *l)
{
    uint32_t maxd = ctx->rt.limits.maxComputeWorkgroupsPerDimension;
    for (int d = 0; d < 3; d++)
        if (l->groups[d] > maxd)
            return wgml_fail(ctx, WGML_ERROR_LIMIT, "%s needs %u workgroups along dimension %d, past this adapter's %u",
                             l->what[0] ? l->what : "a kernel", l->groups[d], d, maxd);
    if (l->loop_trips <= ctx->rt.loop_limit) return WGML_OK;
    return wgml_fail(ctx, WGML_ERROR_LIMIT,
                     "%s needs %llu loop iterations per GPU thread, past this adapter's limit of %u "
                     "(%s ends longer loops early, which would give a wrong answer)",
                     l->what[0] ? l->what : "a kernel", (unsigned long long)l->loop_trips, ctx->rt.loop_limit,
                     ctx->rt.info.name);
}

uint64_t wgml_binding_limit(const wgml_context *ctx)
{
    uint64_t v = ctx->rt.settings.binding_limit; /* tests: force the split path */
    uint64_t lim = ctx->rt.limits.maxStorageBufferBindingSize;
    return v && v < lim ? v : lim;
}

wgml_status wgml_kernel_pipeline_variant(wgml_context *ctx, const char *name, uint32_t variant, const char *header,
                                         wgml_launch *l)
{
    const char *body = wgml_wgsl_find(name);
    if (!body) return wgml_fail(ctx, WGML_ERROR_UNSUPPORTED, "kernel %s is not built in", name);
    /* named by its place in the table of embedded sources (and the variant) */
    uint32_t key[3] = {WGML_KEY_NAMED, 0, variant};
    while (wgml_wgsl_sources[key[1]].text != body) key[1]++;
    if ((l->pipeline = wgml_pipeline_find(ctx, key, 3))) return WGML_OK;
    wgml_sbuf b = {0};
    wgml_sbuf_put(&b, "%s%s", header, body);
    l->pipeline = wgml_pipeline_add(ctx, key, 3, wgml_sbuf_take(&b), true);
    return l->pipeline ? WGML_OK : ctx->rt.status;
}

wgml_status wgml_kernel_pipeline(wgml_context *ctx, const char *name, wgml_launch *l)
{
    return wgml_kernel_pipeline_variant(ctx, name, 0, "", l);
}
