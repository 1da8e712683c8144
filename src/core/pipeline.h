/*
 * Compiled kernels (core/pipeline.c) and the bind groups that feed them (core/bind_cache.c),
 * each made once per context and looked up after.
 */
#ifndef WGML_CORE_PIPELINE_H
#define WGML_CORE_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <webgpu/webgpu.h>

#include "wgml.h"

typedef struct wgml_pipeline {
    uint64_t hash;
    uint8_t *key; /* what names the kernel: its WGSL source, or a generator's variant key */
    size_t key_len;
    WGPUComputePipeline pipeline;
    WGPUBindGroupLayout layout;
    struct wgml_pipeline *next;
} wgml_pipeline;

#define WGML_PIPELINE_BUCKETS 256

/* The compute pipeline for this WGSL (entry point "main"), compiled once per context.
   trusted: compile without runtime bounds checks (hand-written, tested kernels). */
wgml_pipeline *wgml_pipeline_get(wgml_context *ctx, const char *wgsl, bool trusted);

/* Generated kernels are named by a variant key instead (the generator's inputs, a few
   words, beginning with one of the tags below), so an evaluation that reuses a kernel does
   not write and hash its source again: look the key up, and only when that gives NULL
   generate the source and file it under the key with wgml_pipeline_add, which takes the
   generated source (and frees it; NULL, a generator out of memory, is reported as such). */
/* (a tag's low byte, a key's first, is 0: never the first byte of WGSL source) */
/* X(TAG, name): WGML_KEY_<TAG> is (its place in this list, from 1) << 8; name names its
   kernels in the WGML_DUMP_WGSL folder (core/pipeline.c), from the same list */
#define WGML_KEY_TAGS(X) X(NAMED, named) X(FUSED, fused) X(ROW, row) X(GEMM, gemm) X(GEMV, gemv) \
    X(RANDOM, random) X(ATTN, attention) X(GEMM_MATRIX, gemm-matrix) X(GEMM_MAX_ABS, gemm-max-abs)
enum {
    WGML_KEY_PLACE_NONE_,
#define WGML_KEY_PLACE(tag, name) WGML_KEY_PLACE_##tag,
    WGML_KEY_TAGS(WGML_KEY_PLACE)
#undef WGML_KEY_PLACE
    WGML_KEY_TAG_COUNT
};
enum {
#define WGML_KEY_VALUE(tag, name) WGML_KEY_##tag = WGML_KEY_PLACE_##tag << 8,
    WGML_KEY_TAGS(WGML_KEY_VALUE)
#undef WGML_KEY_VALUE
};
wgml_pipeline *wgml_pipeline_find(wgml_context *ctx, const uint32_t *key, size_t words);
wgml_pipeline *wgml_pipeline_add(wgml_context *ctx, const uint32_t *key, size_t words, char *wgsl, bool trusted);
void wgml_pipelines_destroy(wgml_context *ctx);

/* A bind group for entries e[0..n) (n <= 16) of this layout, made once and kept while the
   same bindings recur; the cache owns it. NULL when it cannot be made. */
WGPUBindGroup wgml_bind_group(wgml_context *ctx, WGPUBindGroupLayout layout, const WGPUBindGroupEntry *e, size_t n);
/* Drops the cached bind groups: before a buffer they may name is released. */
void wgml_bind_cache_clear(wgml_context *ctx);

#endif
