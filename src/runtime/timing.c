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

#include "runtime/runtime.h"

double wgml_host_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool timing_ready(wgml_runtime *rt)
{
    if (!rt->gpu_timing || !rt->info.has_timestamp_query) return false;
    if (rt->timing_queries) return true;
    WGPUQuerySetDescriptor qd = {.label = wgml_sv("wgml timing"), .type = WGPUQueryType_Timestamp, .count = 2};
    WGPUBufferDescriptor rd = {.label = wgml_sv("wgml timing resolve"),
                               .usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, .size = 256};
    WGPUBufferDescriptor bd = {.label = wgml_sv("wgml timing readback"),
                               .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 256};
    rt->timing_queries = wgpuDeviceCreateQuerySet(rt->device, &qd);
    rt->timing_resolve = wgpuDeviceCreateBuffer(rt->device, &rd);
    rt->timing_readback = wgpuDeviceCreateBuffer(rt->device, &bd);
    if (!rt->timing_queries || !rt->timing_resolve || !rt->timing_readback) {
        wgml_timing_destroy(rt);
        rt->gpu_timing = false; /* not available: evaluations run untimed */
        return false;
    }
    return true;
}

const WGPUPassTimestampWrites *wgml_timing_writes(wgml_runtime *rt, WGPUPassTimestampWrites *tw)
{
    if (!timing_ready(rt)) return NULL;
    memset(tw, 0, sizeof *tw);
    tw->querySet = rt->timing_queries;
    tw->beginningOfPassWriteIndex = 0;
    tw->endOfPassWriteIndex = 1;
    return tw;
}

void wgml_timing_resolve(wgml_runtime *rt, WGPUCommandEncoder enc)
{
    if (!rt->gpu_timing || !rt->timing_queries) return;
    wgpuCommandEncoderResolveQuerySet(enc, rt->timing_queries, 0, 2, rt->timing_resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, rt->timing_resolve, 0, rt->timing_readback, 0, 16);
}

wgml_status wgml_timing_read(wgml_runtime *rt)
{
    if (!rt->gpu_timing || !rt->timing_queries) return WGML_OK;
    wgml_status st = wgml_map_read(rt, rt->timing_readback, 16);
    if (st) return st;
    const uint64_t *t = wgpuBufferGetConstMappedRange(rt->timing_readback, 0, 16);
    if (t && t[1] >= t[0]) {
        rt->stats.gpu_seconds_last = (double)(t[1] - t[0]) * wgml_rt_timestamp_ns(rt) * 1e-9;
        rt->stats.gpu_seconds_total += rt->stats.gpu_seconds_last;
    }
    wgpuBufferUnmap(rt->timing_readback);
    return WGML_OK;
}

void wgml_timing_destroy(wgml_runtime *rt)
{
    if (rt->timing_queries) wgpuQuerySetRelease(rt->timing_queries);
    if (rt->timing_resolve) wgpuBufferRelease(rt->timing_resolve);
    if (rt->timing_readback) wgpuBufferRelease(rt->timing_readback);
    rt->timing_queries = NULL;
    rt->timing_resolve = rt->timing_readback = NULL;
}

void wgml_timeline_start(wgml_runtime *rt)
{
    if (!rt->timeline.on) return;
    rt->timeline.n = rt->timeline.spin_polls = rt->timeline.blocking_polls = 0;
    wgml_timeline_mark(rt, "start");
}

void wgml_timeline_mark(wgml_runtime *rt, const char *step)
{
    if (!rt->timeline.on || rt->timeline.n >= 16) return;
    rt->timeline.step[rt->timeline.n] = step;
    rt->timeline.t[rt->timeline.n++] = wgml_host_seconds();
}
