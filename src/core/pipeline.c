/*
 * The pipeline cache: every distinct kernel is compiled once per context. A kernel is named
 * by its full WGSL source, or, for generated kernels, by a variant key: the few words the
 * generator makes its source from (see context.h), which are much cheaper to hash and compare
 * than the source on every evaluation.
 *
 * Hand-written and generated kernels whose indexing is guarded in the WGSL are compiled
 * without runtime checks (wgml_rt_shader_module): naga's checked code ran 50x slower on the
 * H100 (shared/DEVICE.md).
 *
 * WGML_DUMP_WGSL=dir (read once per context) writes every kernel source compiled here to
 * dir/<name>.wgsl, named by its variant key: a tag (fused, row, gemm, gemv, a hand-written
 * kernel's file name) and the key's words in hex, or for a long key or a plain-source kernel
 * a hash of it. Failures to write are ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/context.h"
#include "kernels/wgsl_sources.h"

/* A key's hash, eight bytes per step (a fused chain's key is a few kilobytes, hashed on every
   evaluation) */
static uint64_t key_hash(const uint8_t *s, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static wgml_pipeline *find(wgml_context *ctx, const void *key, size_t len, uint64_t h)
{
    for (wgml_pipeline *p = ctx->pipelines[h % WGML_PIPELINE_BUCKETS]; p; p = p->next)
        if (p->hash == h && p->key_len == len && memcmp(p->key, key, len) == 0) {
            ctx->rt.stats.pipeline_cache_hits++;
            return p;
        }
    return NULL;
}

/* ---------------------------------------------------------------- WGML_DUMP_WGSL */

static const char dump_key; /* names the extension */

typedef struct dump_state {
    bool read;       /* WGML_DUMP_WGSL was looked at */
    char dir[4096];  /* the folder, or "" when not dumping */
} dump_state;

/* The folder kernels are dumped to, or NULL. */
static const char *dump_dir(wgml_context *ctx)
{
    dump_state *d = wgml_extension_make(ctx, &dump_key, sizeof *d, NULL);
    if (!d) return NULL;
    if (!d->read) {
        snprintf(d->dir, sizeof d->dir, "%s", ctx->rt.settings.dump_wgsl);
        d->read = true;
        if (*d->dir) mkdir(d->dir, 0777); /* may exist; a failure shows as files not written */
    }
    return *d->dir ? d->dir : NULL;
}

/* Writes a kernel's source to the dump folder: key[0..words) is its variant key, or NULL for
   a kernel named by its source (hash h). */
static void dump(wgml_context *ctx, const uint32_t *key, size_t words, uint64_t h, const char *wgsl)
{
    const char *dir = dump_dir(ctx);
    if (!dir) return;
    char name[256];
    const char *tag = "wgsl";
    if (key) {
        static const char *const tags[] = {
            "key",
#define WGML_KEY_NAME(tag, name) #name,
            WGML_KEY_TAGS(WGML_KEY_NAME)
#undef WGML_KEY_NAME
        };
        _Static_assert(sizeof tags / sizeof *tags == WGML_KEY_TAG_COUNT, "a name per tag");
        uint32_t t = key[0] >> 8;
        tag = t < sizeof tags / sizeof tags[0] ? tags[t] : "key";
        if (key[0] == WGML_KEY_NAMED && words > 1) /* key[1]: the kernel's place among the embedded sources */
            for (uint32_t i = 0; wgml_wgsl_sources[i].name; i++)
                if (i == key[1]) tag = wgml_wgsl_sources[i].name;
    }
    int n = snprintf(name, sizeof name, "%.64s", tag);
    if (key && words <= 16)
        for (size_t i = 0; i < words; i++) n += snprintf(name + n, sizeof name - (size_t)n, "%c%x", i ? '_' : '-', key[i]);
    else
        n += snprintf(name + n, sizeof name - (size_t)n, "-%zuw-%016llx", key ? words : strlen(wgsl), (unsigned long long)h);
    size_t path_len = strlen(dir) + (size_t)n + 8;
    char *path = malloc(path_len);
    if (!path) return;
    snprintf(path, path_len, "%s/%s.wgsl", dir, name);
    FILE *f = fopen(path, "w");
    free(path);
    if (!f) return;
    fputs(wgsl, f);
    fclose(f);
}

/* ---------------------------------------------------------------- the cache */

static wgml_pipeline *add(wgml_context *ctx, const void *key, size_t len, uint64_t h, const char *wgsl, bool trusted)
{
    wgml_pipeline *p = calloc(1, sizeof *p);
    uint8_t *k = p ? malloc(len) : NULL;
    if (!k) {
        free(p);
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        return NULL;
    }
    memcpy(k, key, len);
    dump(ctx, wgsl == key ? NULL : key, len / 4, h, wgsl);
    WGPUShaderSourceWGSL src = {.chain = {.sType = WGPUSType_ShaderSourceWGSL}, .code = wgml_sv(wgsl)};
    WGPUShaderModuleDescriptor md = {.nextInChain = &src.chain, .label = wgml_sv("wgml kernel")};
    wgml_scope_push(&ctx->rt);
    WGPUShaderModule module = wgml_rt_shader_module(&ctx->rt, &md, trusted && ctx->trusted_kernels);
    WGPUComputePipelineDescriptor pd = {
        .label = wgml_sv("wgml kernel"),
        .compute = {.module = module, .entryPoint = wgml_sv("main")},
    };
    WGPUComputePipeline pipeline = module ? wgpuDeviceCreateComputePipeline(ctx->rt.device, &pd) : NULL;
    if (module) wgpuShaderModuleRelease(module);
    wgml_status st = wgml_scope_pop(&ctx->rt, "compiling a kernel");
    if (st != WGML_OK || !pipeline) {
        if (pipeline) wgpuComputePipelineRelease(pipeline);
        if (st == WGML_OK) wgml_fail(ctx, WGML_ERROR_VALIDATION, "compiling a kernel failed");
        free(k);
        free(p);
        return NULL;
    }
    wgml_pipeline **bucket = &ctx->pipelines[h % WGML_PIPELINE_BUCKETS];
    p->hash = h;
    p->key = k;
    p->key_len = len;
    p->pipeline = pipeline;
    p->layout = wgpuComputePipelineGetBindGroupLayout(pipeline, 0);
    p->next = *bucket;
    *bucket = p;
    ctx->rt.stats.pipelines_compiled++;
    return p;
}

wgml_pipeline *wgml_pipeline_get(wgml_context *ctx, const char *wgsl, bool trusted)
{
    size_t len = strlen(wgsl);
    uint64_t h = key_hash((const uint8_t *)wgsl, len);
    wgml_pipeline *p = find(ctx, wgsl, len, h);
    return p ? p : add(ctx, wgsl, len, h, wgsl, trusted);
}

wgml_pipeline *wgml_pipeline_find(wgml_context *ctx, const uint32_t *key, size_t words)
{
    return find(ctx, key, words * 4, key_hash((const uint8_t *)key, words * 4));
}

wgml_pipeline *wgml_pipeline_add(wgml_context *ctx, const uint32_t *key, size_t words, char *wgsl, bool trusted)
{
    if (!wgsl) {
        wgml_fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory for a kernel's source");
        return NULL;
    }
    wgml_pipeline *p = add(ctx, key, words * 4, key_hash((const uint8_t *)key, words * 4), wgsl, trusted);
    free(wgsl);
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
