/*
 * The cache of bind groups (for the graph executor). Creating one is a large part of the host work per
 * dispatch (wgpu validates it and writes a Vulkan descriptor set), and an evaluation that
 * repeats runs the same kernels on the same pool buffers at the same parameter offsets: so
 * bind groups are kept, keyed by their layout and entries, in a set-associative table.
 *
 * A key names buffers by handle. That is sound because every buffer a graph binds is a pool
 * buffer, kept until the context goes, or the parameter buffer, which clears the cache when
 * it is replaced (a new buffer may get a freed one's handle).
 */
#include <stdlib.h>
#include <string.h>

#include "core/context.h"

/* Sets of WAYS slots, the least recently used one replaced: a GPT-2 small training step makes
   ~620 dispatches, a 24-layer small model's 817, and a direct-mapped table of 512 lost a third
   of a 6-layer step's 223 groups to collisions (lavapipe; test_gpt_train counts them) */
#define SETS 1024
#define WAYS 4
#define MAX_ENTRIES 16

typedef struct bind_entry {
    WGPUBuffer buffer;
    uint64_t offset, size;
    uint32_t binding;
} bind_entry;

typedef struct bind_slot {
    uint64_t hash, used; /* used: the cache's tick at the last hit or fill */
    WGPUBindGroupLayout layout;
    size_t n;
    bind_entry e[MAX_ENTRIES];
    WGPUBindGroup group;
} bind_slot;

typedef struct bind_cache {
    uint64_t tick;
    bind_slot slot[SETS][WAYS];
} bind_cache;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t key_hash(WGPUBindGroupLayout layout, const WGPUBindGroupEntry *e, size_t n)
{
    uint64_t h = mix(0, (uint64_t)(uintptr_t)layout);
    for (size_t i = 0; i < n; i++) {
        h = mix(h, (uint64_t)(uintptr_t)e[i].buffer);
        h = mix(h, e[i].offset);
        h = mix(h, e[i].size);
    }
    return h;
}

static bool same(const bind_slot *s, uint64_t h, WGPUBindGroupLayout layout, const WGPUBindGroupEntry *e, size_t n)
{
    if (!s->group || s->hash != h || s->layout != layout || s->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (s->e[i].binding != e[i].binding || s->e[i].buffer != e[i].buffer || s->e[i].offset != e[i].offset ||
            s->e[i].size != e[i].size)
            return false;
    return true;
}

WGPUBindGroup wgml_bind_group(wgml_context *ctx, WGPUBindGroupLayout layout, const WGPUBindGroupEntry *e, size_t n)
{
    if (n > MAX_ENTRIES) return NULL;
    if (!ctx->bind_cache && !(ctx->bind_cache = calloc(1, sizeof(bind_cache)))) return NULL;
    bind_cache *c = ctx->bind_cache;
    uint64_t h = key_hash(layout, e, n);
    bind_slot *set = c->slot[(h ^ (h >> 32)) % SETS], *victim = &set[0];
    c->tick++;
    for (int w = 0; w < WAYS; w++) {
        if (same(&set[w], h, layout, e, n)) {
            set[w].used = c->tick;
            return set[w].group;
        }
        if (set[w].used < victim->used) victim = &set[w]; /* (empty slots have 0) */
    }
    WGPUBindGroupDescriptor bd = {.layout = layout, .entryCount = n, .entries = e};
    WGPUBindGroup g = wgpuDeviceCreateBindGroup(ctx->rt.device, &bd);
    if (!g) return NULL;
    ctx->rt.stats.bind_groups_created++;
    if (victim->group) wgpuBindGroupRelease(victim->group);
    victim->hash = h;
    victim->used = c->tick;
    victim->layout = layout;
    victim->n = n;
    for (size_t i = 0; i < n; i++)
        victim->e[i] = (bind_entry){.buffer = e[i].buffer, .offset = e[i].offset, .size = e[i].size, .binding = e[i].binding};
    victim->group = g;
    return g;
}

void wgml_bind_cache_clear(wgml_context *ctx)
{
    if (!ctx->bind_cache) return;
    for (int i = 0; i < SETS; i++)
        for (int w = 0; w < WAYS; w++)
            if (ctx->bind_cache->slot[i][w].group) wgpuBindGroupRelease(ctx->bind_cache->slot[i][w].group);
    free(ctx->bind_cache);
    ctx->bind_cache = NULL;
}
