/*
 * The launch description: one dispatch of a compiled kernel, its bindings, parameter block and
 * grid, as an op's builder fills it and the executor plans, checks and encodes it.
 */
#ifndef WGML_ENGINE_LAUNCH_H
#define WGML_ENGINE_LAUNCH_H

#include "core/context.h"
#include "core/pipeline.h"

#define WGML_MAX_BINDINGS 10
#define WGML_MAX_PARAMS_BYTES 1024

/* One dispatch: binding 0 is the parameter block, 1..n the storage buffers in order. A node
   takes one launch, or up to WGML_MAX_NODE_LAUNCHES that run in order and share a scratch
   buffer (a reduction's partial results). */
typedef struct wgml_launch {
    wgml_pipeline *pipeline;
    int nbuffers;
    /* bases: the node itself is its output, other tensors its inputs; NULL where raw[] or the
       scratch buffer is bound instead */
    wgml_tensor *buffers[WGML_MAX_BINDINGS];
    WGPUBuffer raw[WGML_MAX_BINDINGS];       /* or raw buffers (cached matmul), if set */
    /* where raw[b] is bound, bytes (the executor fills them for tensors); size 0: the rest */
    uint64_t offsets[WGML_MAX_BINDINGS], sizes[WGML_MAX_BINDINGS];
    /* a bind group the caller keeps (parameter block at binding 0 included): bound as is,
       params and raw[] are then not read (wgml_exec_submit) */
    WGPUBindGroup bind;
    uint32_t scratch_mask;  /* bit b: binding b is the node's scratch buffer */
    uint64_t scratch_bytes; /* on a node's first launch: the size of that buffer */
    /* the most loop iterations one invocation runs, all loops together: the executor refuses
       a launch past the adapter's loop limit (wgml_runtime.loop_limit) */
    uint64_t loop_trips;
    char what[48];          /* names the launch in that error */
    uint8_t params[WGML_MAX_PARAMS_BYTES];
    uint32_t params_size;
    uint32_t groups[3];
} wgml_launch;

#define WGML_MAX_NODE_LAUNCHES 8

/* The context's GPU error flags, made on first use (NULL when they cannot be): a kernel that
   checks its data binds them and records a problem as WGML_GPU_ERROR_* bits in word 0 and
   the first offending position as UINT32_MAX - position, by atomicMax, in word 1. */
enum { WGML_GPU_ERROR_LABEL = 1u << 0, WGML_GPU_ERROR_INDEX = 1u << 1 };
WGPUBuffer wgml_gpu_errors_buffer(wgml_context *ctx);
/* Every launch passes here before it is encoded: WGML_ERROR_LIMIT when its grid is past the
   adapter's workgroups per dimension, or when it would loop past the adapter's loop limit
   (wgml_runtime.loop_limit), which on llvmpipe ends loops early and silently gives a wrong
   answer */
wgml_status wgml_check_launch(wgml_context *ctx, const wgml_launch *l);

/* Splits `groups` workgroups over x and y so neither passes the adapter's limit; returns the
   x count (threads = x * workgroup size per row of the grid). */
uint32_t wgml_grid(wgml_context *ctx, uint64_t groups, uint32_t out[3]);

/* The most bytes one storage binding may address: the adapter's limit (the binding_limit
   setting, WGML_DEBUG_BINDING_LIMIT, lowers it for tests) */
uint64_t wgml_binding_limit(const wgml_context *ctx);

/* The pipeline of a hand-written kernel embedded from src/ (a .wgsl file beside its family)
   by file name, compiled once per context. */
wgml_status wgml_kernel_pipeline(wgml_context *ctx, const char *name, wgml_launch *l);
/* The same kernel behind `header` (WGSL text the kernel expects before its body: constants, a
   unit type), one of a few the caller numbers by `variant`: the header must be the same text
   whenever name and variant are. */
wgml_status wgml_kernel_pipeline_variant(wgml_context *ctx, const char *name, uint32_t variant, const char *header,
                                         wgml_launch *l);

#endif
