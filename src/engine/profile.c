/* The per-kernel GPU profile of WGML_PROFILE (profile.h). */
#include "engine/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAPACITY 2048 /* dispatches timed per submit */
#define ROWS 512

typedef struct row {
    char what[48];
    double seconds;
    uint64_t count;
} row;

struct wgml_profile {
    bool off; /* tried and not available */
    char path[512];
    WGPUQuerySet queries;
    WGPUBuffer resolve, readback;
    row rows[ROWS];
    int nrows;
};

static const char profile_key;

static int by_time(const void *a, const void *b)
{
    double x = ((const row *)a)->seconds, y = ((const row *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void release(wgml_context *ctx, void *state)
{
    (void)ctx;
    wgml_profile *p = state;
    if (p->queries) wgpuQuerySetRelease(p->queries);
    if (p->resolve) wgpuBufferRelease(p->resolve);
    if (p->readback) wgpuBufferRelease(p->readback);
    if (p->off || !p->nrows) return;
    FILE *f = fopen(p->path, "w");
    if (!f) return; /* a benchmark aid: nothing to report the failure to */
    qsort(p->rows, (size_t)p->nrows, sizeof p->rows[0], by_time);
    double total = 0;
    for (int i = 0; i < p->nrows; i++) total += p->rows[i].seconds;
    fprintf(f, "%10s %6s %10s %8s  %s\n", "total_ms", "share", "count", "avg_us", "launch");
    for (int i = 0; i < p->nrows; i++)
        fprintf(f, "%10.3f %5.1f%% %10llu %8.2f  %s\n", p->rows[i].seconds * 1e3, 100 * p->rows[i].seconds / total,
                (unsigned long long)p->rows[i].count, p->rows[i].seconds * 1e6 / (double)p->rows[i].count, p->rows[i].what);
    fclose(f);
}

wgml_profile *wgml_profile_of(wgml_context *ctx)
{
    wgml_profile *p = wgml_extension_get(ctx, &profile_key);
    if (p) return p->off ? NULL : p;
    const char *path = ctx->rt.settings.profile; /* (read at the context's creation) */
    if (!*path) return NULL;
    if (!(p = wgml_extension_make(ctx, &profile_key, sizeof *p, release))) return NULL;
    snprintf(p->path, sizeof p->path, "%s", path);
    wgml_runtime *rt = &ctx->rt;
    if (!rt->info.has_timestamp_query) return p->off = true, NULL;
    WGPUQuerySetDescriptor qd = {.label = wgml_sv("wgml profile"), .type = WGPUQueryType_Timestamp, .count = 2 * CAPACITY};
    WGPUBufferDescriptor rd = {.label = wgml_sv("wgml profile resolve"),
                               .usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, .size = 16 * CAPACITY};
    WGPUBufferDescriptor bd = {.label = wgml_sv("wgml profile readback"),
                               .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 16 * CAPACITY};
    p->queries = wgpuDeviceCreateQuerySet(rt->device, &qd);
    p->resolve = wgpuDeviceCreateBuffer(rt->device, &rd);
    p->readback = wgpuDeviceCreateBuffer(rt->device, &bd);
    if (!p->queries || !p->resolve || !p->readback) return p->off = true, NULL;
    return p;
}

const WGPUPassTimestampWrites *wgml_profile_writes(wgml_profile *p, int i, WGPUPassTimestampWrites *tw)
{
    if (i >= CAPACITY) return NULL;
    memset(tw, 0, sizeof *tw);
    tw->querySet = p->queries;
    tw->beginningOfPassWriteIndex = 2 * (uint32_t)i;
    tw->endOfPassWriteIndex = 2 * (uint32_t)i + 1;
    return tw;
}

void wgml_profile_resolve(wgml_profile *p, WGPUCommandEncoder enc, int n)
{
    if (n > CAPACITY) n = CAPACITY;
    if (n <= 0) return;
    wgpuCommandEncoderResolveQuerySet(enc, p->queries, 0, 2 * (uint32_t)n, p->resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, p->resolve, 0, p->readback, 0, 16 * (uint64_t)n);
}

wgml_status wgml_profile_collect(wgml_context *ctx, wgml_profile *p, const wgml_launch *l, int n)
{
    if (n > CAPACITY) n = CAPACITY;
    if (n <= 0) return WGML_OK;
    wgml_status st = wgml_map_read(&ctx->rt, p->readback, 16 * (uint64_t)n);
    if (st) return st;
    const uint64_t *t = wgpuBufferGetConstMappedRange(p->readback, 0, 16 * (size_t)n);
    double period = wgml_rt_timestamp_ns(&ctx->rt) * 1e-9;
    for (int i = 0; t && i < n; i++) {
        const char *what = l[i].what[0] ? l[i].what : "elementwise (fused)";
        int r = 0;
        while (r < p->nrows && strcmp(p->rows[r].what, what)) r++;
        if (r == p->nrows) {
            if (p->nrows == ROWS) continue;
            snprintf(p->rows[p->nrows++].what, sizeof p->rows[0].what, "%s", what);
        }
        if (t[2 * i + 1] >= t[2 * i]) p->rows[r].seconds += (double)(t[2 * i + 1] - t[2 * i]) * period;
        p->rows[r].count++;
    }
    wgpuBufferUnmap(p->readback);
    return WGML_OK;
}
