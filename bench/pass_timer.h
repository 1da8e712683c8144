/* GPU timestamps around one compute pass, for the probes that drive kernels themselves
   (bench/ew_probe.c, bench/sync_probe.c): begin and end of the pass, resolved and read back. */
#ifndef WGML_BENCH_PASS_TIMER_H
#define WGML_BENCH_PASS_TIMER_H

#include "core/context.h"

typedef struct bench_pass_timer {
    WGPUQuerySet qs;
    WGPUBuffer resolve, read;
} bench_pass_timer;

/* 0, or -1 where the adapter has no timestamp queries. */
static inline int bench_pass_timer_init(wgml_context *ctx, bench_pass_timer *t)
{
    if (!ctx->rt.info.has_timestamp_query) return -1;
    WGPUQuerySetDescriptor qd = {.type = WGPUQueryType_Timestamp, .count = 2};
    WGPUBufferDescriptor rd = {.usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, .size = 256};
    WGPUBufferDescriptor bd = {.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 256};
    t->qs = wgpuDeviceCreateQuerySet(ctx->rt.device, &qd);
    t->resolve = wgpuDeviceCreateBuffer(ctx->rt.device, &rd);
    t->read = wgpuDeviceCreateBuffer(ctx->rt.device, &bd);
    return 0;
}

/* The pass descriptor's timestamp writes. */
static inline WGPUPassTimestampWrites bench_pass_timer_writes(const bench_pass_timer *t)
{
    return (WGPUPassTimestampWrites){.querySet = t->qs, .beginningOfPassWriteIndex = 0, .endOfPassWriteIndex = 1};
}

/* After the pass: the timestamps resolved and copied out for bench_pass_timer_seconds. */
static inline void bench_pass_timer_resolve(const bench_pass_timer *t, WGPUCommandEncoder enc)
{
    wgpuCommandEncoderResolveQuerySet(enc, t->qs, 0, 2, t->resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, t->resolve, 0, t->read, 0, 16);
}

/* The pass's seconds once its submit is done (waits for it); -1 where the read failed. */
static inline double bench_pass_timer_seconds(wgml_context *ctx, const bench_pass_timer *t)
{
    if (wgml_map_read(&ctx->rt, t->read, 16)) return -1;
    const uint64_t *v = wgpuBufferGetConstMappedRange(t->read, 0, 16);
    double s = v ? (double)(v[1] - v[0]) * wgml_rt_timestamp_ns(&ctx->rt) * 1e-9 : -1;
    wgpuBufferUnmap(t->read);
    return s;
}

static inline void bench_pass_timer_free(bench_pass_timer *t)
{
    wgpuQuerySetRelease(t->qs);
    wgpuBufferRelease(t->resolve);
    wgpuBufferRelease(t->read);
}

#endif
