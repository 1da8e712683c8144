/*
 * GPU timing of compute passes, opt in (wgml_context_desc.gpu_timing or WGML_GPU_TIMING=1):
 * timestamps written at the beginning and end of an evaluation's compute pass, resolved into
 * a buffer in the same command buffer, read back after the submit. Host timers see submit
 * and wake-up latency, and ops of one submit that the GPU overlaps; a single op per
 * evaluation timed this way is the op alone. Ticks are scaled by the queue's timestamp
 * period (nanoseconds per tick).
 */
#include <string.h>
#include <time.h>

#include "core/context.h"

double wgml_host_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool timing_ready(wgml_context *ctx)
{
    if (!ctx->gpu_timing || !ctx->info.has_timestamp_query) return false;
    if (ctx->timing_queries) return true;
    WGPUQuerySetDescriptor qd = {.label = wgml_sv("wgml timing"), .type = WGPUQueryType_Timestamp, .count = 2};
    WGPUBufferDescriptor rd = {.label = wgml_sv("wgml timing resolve"),
                               .usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, .size = 256};
    WGPUBufferDescriptor bd = {.label = wgml_sv("wgml timing readback"),
                               .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 256};
    ctx->timing_queries = wgpuDeviceCreateQuerySet(ctx->device, &qd);
    ctx->timing_resolve = wgpuDeviceCreateBuffer(ctx->device, &rd);
    ctx->timing_readback = wgpuDeviceCreateBuffer(ctx->device, &bd);
    if (!ctx->timing_queries || !ctx->timing_resolve || !ctx->timing_readback) {
        wgml_timing_destroy(ctx);
        ctx->gpu_timing = false; /* not available: evaluations run untimed */
        return false;
    }
    return true;
}

const WGPUPassTimestampWrites *wgml_timing_writes(wgml_context *ctx, WGPUPassTimestampWrites *tw)
{
    if (!timing_ready(ctx)) return NULL;
    memset(tw, 0, sizeof *tw);
    tw->querySet = ctx->timing_queries;
    tw->beginningOfPassWriteIndex = 0;
    tw->endOfPassWriteIndex = 1;
    return tw;
}

void wgml_timing_resolve(wgml_context *ctx, WGPUCommandEncoder enc)
{
    if (!ctx->gpu_timing || !ctx->timing_queries) return;
    wgpuCommandEncoderResolveQuerySet(enc, ctx->timing_queries, 0, 2, ctx->timing_resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, ctx->timing_resolve, 0, ctx->timing_readback, 0, 16);
}

wgml_status wgml_timing_read(wgml_context *ctx)
{
    if (!ctx->gpu_timing || !ctx->timing_queries) return WGML_OK;
    wgml_status st = wgml_map_read(ctx, ctx->timing_readback, 16);
    if (st) return st;
    const uint64_t *t = wgpuBufferGetConstMappedRange(ctx->timing_readback, 0, 16);
    if (t && t[1] >= t[0]) {
        ctx->stats.gpu_seconds_last = (double)(t[1] - t[0]) * (double)wgpuQueueGetTimestampPeriod(ctx->queue) * 1e-9;
        ctx->stats.gpu_seconds_total += ctx->stats.gpu_seconds_last;
    }
    wgpuBufferUnmap(ctx->timing_readback);
    return WGML_OK;
}

void wgml_timing_destroy(wgml_context *ctx)
{
    if (ctx->timing_queries) wgpuQuerySetRelease(ctx->timing_queries);
    if (ctx->timing_resolve) wgpuBufferRelease(ctx->timing_resolve);
    if (ctx->timing_readback) wgpuBufferRelease(ctx->timing_readback);
    ctx->timing_queries = NULL;
    ctx->timing_resolve = ctx->timing_readback = NULL;
}
