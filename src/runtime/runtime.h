/*
 * The runtime layer: one WebGPU instance, adapter, device and queue, and what every layer
 * above needs of them: error scopes, submits, blocking waits and map reads, GPU timing, and
 * the record of the last failure. It knows nothing of buffer pools, tensors or graphs; the
 * context of core/context.h embeds one wgml_runtime as its field `rt`.
 */
#ifndef WGML_RUNTIME_RUNTIME_H
#define WGML_RUNTIME_RUNTIME_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <webgpu/webgpu.h>

#include "runtime/settings.h"
#include "wgml.h"

struct wgml_runtime_impl;

typedef struct wgml_runtime {
    const struct wgml_runtime_impl *impl; /* wgpu-native's or Dawn's (runtime/impl.h) */
    wgml_settings settings;               /* the context's knobs, resolved once (settings.h) */
    bool bound;   /* holds the loaded implementation (runtime/loader.h) */
    bool trusted; /* kernels without runtime bounds checks (not desc.bounds_checks) */
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPULimits limits;
    wgml_adapter_info info;
    double poll_spin_seconds; /* how long a read-back spins before blocking (WGML_POLL_SPIN_US) */
    /* The most loop iterations one invocation of a kernel may run, all its loops together.
       Mesa's llvmpipe (lavapipe) ends every loop of a shader once they have run 65535 times
       between them (gallivm's loop limiter), silently: a longer loop gives a wrong answer.
       Kernels split work so they stay under it; a launch past it is refused (WGML_ERROR_LIMIT).
       UINT32_MAX where the driver has no such limit; WGML_LOOP_LIMIT overrides (tests). */
    uint32_t loop_limit;
    /* What a buffer over host memory (wgml_rt_host_buffer) must be aligned to; 0: none offered */
    uint32_t host_mapped_alignment;

    /* WGML_TIMELINE=1: the host clock at each step of the last submit-and-read and the polls
       its wait took (`wgml bench matmul` prints the cached round trip's medians by step).
       Off, each mark is one branch. */
    struct {
        bool on;
        int n, spin_polls, blocking_polls;
        const char *step[16];
        double t[16];
    } timeline;

    bool gpu_timing; /* timestamp the compute pass of each evaluation (runtime/timing.c) */
    WGPUQuerySet timing_queries;
    WGPUBuffer timing_resolve, timing_readback;

    wgml_stats stats; /* counted by every layer */

    /* the last failure (see wgml.h: successes leave it alone) */
    wgml_status status;
    char message[1024];
    volatile bool device_lost;
    char lost_message[512];
    int debug_pass_submits, debug_fail_submits; /* wgml_debug_fail_submits: submits still to let pass, then to refuse */
    wgml_status uncaptured_status; /* from the uncaptured-error callback */
    char uncaptured_message[512];
} wgml_runtime;

/* ---------------------------------------------------------------- bring-up (runtime/device.c) */

/* Resolves desc's settings into rt->settings (desc, else the environment: settings.h) and
   opens instance, adapter (their backend and adapter name), device and queue into rt, which must stay at its address while open (the
   device's callbacks point at it). On failure returns the status and writes why into err;
   whatever was opened is closed again. */
wgml_status wgml_runtime_open(wgml_runtime *rt, const wgml_context_desc *desc, char *err, size_t err_size);
/* Waits for the device and releases it all; rt may be partly opened or zeroed. */
void wgml_runtime_close(wgml_runtime *rt);
/* Destroys the device as a loss would (tests of the lost-device paths). */
void wgml_runtime_destroy_device(wgml_runtime *rt);

/* The timeline (rt->timeline, WGML_TIMELINE): start a new one, and mark the end of a step. */
void wgml_timeline_start(wgml_runtime *rt);
void wgml_timeline_mark(wgml_runtime *rt, const char *step);

/* ---------------------------------------------------------------- errors */

/* Records status and message and returns status. */
wgml_status wgml_rt_fail(wgml_runtime *rt, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
wgml_status wgml_rt_failv(wgml_runtime *rt, wgml_status status, const char *fmt, va_list ap);
/* The status to return when the device is lost (records the message), else WGML_OK. */
wgml_status wgml_check_device(wgml_runtime *rt);

/* Error scopes around WebGPU calls: push both kinds, pop and turn a captured error into a
   status (WGML_ERROR_VALIDATION or WGML_ERROR_OUT_OF_MEMORY) with `what` in the message. */
void wgml_scope_push(wgml_runtime *rt);
wgml_status wgml_scope_pop(wgml_runtime *rt, const char *what);

/* ---------------------------------------------------------------- submits and waits */

/* Submits cb (and releases it), or reports a lost device without submitting. */
wgml_status wgml_submit(wgml_runtime *rt, WGPUCommandBuffer cb);
/* bytes of src at src_off copied to dst at dst_off on the GPU: a submit of its own */
wgml_status wgml_submit_copy(wgml_runtime *rt, WGPUBuffer src, uint64_t src_off, WGPUBuffer dst, uint64_t dst_off, uint64_t bytes);
/* Blocks until the queue is idle. */
wgml_status wgml_wait_idle(wgml_runtime *rt);
/* Maps `buffer` for reading and blocks until done. */
wgml_status wgml_map_read(wgml_runtime *rt, WGPUBuffer buffer, uint64_t size);
/* A map that does not block: wgml_map_begin starts it, wgml_map_poll says whether it is done
   without waiting, wgml_map_end waits for it. The wait is for this map alone, not for work
   submitted after it (wgml_map_read waits for an idle queue on wgpu-native), so one bucket
   of gradients can be read while the kernels of the next still run. `m` must live until
   wgml_map_end returns. */
typedef struct wgml_map_async {
    volatile bool done;
    WGPUMapAsyncStatus status;
    char message[256];
    WGPUFuture future;
} wgml_map_async;
void wgml_map_begin(wgml_runtime *rt, WGPUBuffer buffer, WGPUMapMode mode, uint64_t offset, uint64_t size,
                    wgml_map_async *m);
bool wgml_map_poll(wgml_runtime *rt, wgml_map_async *m);
wgml_status wgml_map_end(wgml_runtime *rt, wgml_map_async *m);
/* The queue's work submitted so far, done: begun without blocking, then wgml_map_poll and
   wgml_map_end as for a map (its status Success once done). */
void wgml_work_done_begin(wgml_runtime *rt, wgml_map_async *m);
/* A buffer that is `size` bytes of host memory at `pointer` (both multiples of
   rt->host_mapped_alignment): the GPU's copies read and write it in place. The memory must
   stay until disposed(userdata) is called, which the runtime does once the buffer is released
   and the GPU done with it (Dawn: at the latest when the device goes). NULL where the runtime
   offers none (wgpu-native) or refuses it, with rt's status and message untouched, unless the
   refusal lost the device (Dawn takes a failed import for an internal error): then they say so.
   The GPU's writes reach the host without a barrier of Dawn's for the host (the buffer is not
   mappable): coherent memory and the work-done future are relied on, as on NVIDIA's driver and
   lavapipe. */
WGPUBuffer wgml_rt_host_buffer(wgml_runtime *rt, void *pointer, uint64_t size, WGPUBufferUsage usage, const char *label,
                               void (*disposed)(void *), void *userdata);
/* A shader module: without runtime bounds checks where trusted and the context allows. */
WGPUShaderModule wgml_rt_shader_module(wgml_runtime *rt, const WGPUShaderModuleDescriptor *md, bool trusted);
/* Nanoseconds per timestamp-query tick. */
double wgml_rt_timestamp_ns(wgml_runtime *rt);
WGPUStringView wgml_sv(const char *s);

/* ---------------------------------------------------------------- timing (runtime/timing.c) */

/* GPU timing of compute passes: the pass's timestamp writes (NULL when timing is off), the
   resolve encoded after the pass, and the read after the submit. */
const WGPUPassTimestampWrites *wgml_timing_writes(wgml_runtime *rt, WGPUPassTimestampWrites *tw);
void wgml_timing_resolve(wgml_runtime *rt, WGPUCommandEncoder enc);
wgml_status wgml_timing_read(wgml_runtime *rt);
void wgml_timing_destroy(wgml_runtime *rt);
/* A monotonic host clock, seconds. */
double wgml_host_seconds(void);

#endif
