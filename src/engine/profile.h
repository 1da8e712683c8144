/* A per-kernel GPU profile, opt in for benchmarking: with WGML_PROFILE=FILE in the
   environment (and an adapter with timestamp queries), every dispatch runs in its own compute
   pass between two timestamps, and the GPU time of each kind of launch (its description,
   wgml_launch.what) is summed; the table goes to FILE when the context is freed. Separate
   passes cost some overlap, so profiled totals exceed unprofiled ones a little. */
#ifndef WGML_ENGINE_PROFILE_H
#define WGML_ENGINE_PROFILE_H

#include "engine/executor.h"

typedef struct wgml_profile wgml_profile;

/* The context's profiler, or NULL when profiling is off. */
wgml_profile *wgml_profile_of(wgml_context *ctx);
/* Timestamp writes around dispatch i of a submit; NULL past the profiler's capacity. */
const WGPUPassTimestampWrites *wgml_profile_writes(wgml_profile *p, int i, WGPUPassTimestampWrites *tw);
/* Resolves the first n dispatches' timestamps (before the command buffer is finished). */
void wgml_profile_resolve(wgml_profile *p, WGPUCommandEncoder enc, int n);
/* After the submit: reads the timestamps and adds them to the launches' rows. */
wgml_status wgml_profile_collect(wgml_context *ctx, wgml_profile *p, const wgml_launch *l, int n);

#endif
