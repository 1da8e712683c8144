/*
 * wgpu-native 29 behind the seam (impl.h): instance extras choose the backends, adapters are
 * enumerated, waits poll the device (wgpuDevicePoll blocks on a fence), kernels may be
 * compiled as trusted modules, timestamps count in the queue's period.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/impl.h"

static WGPUInstanceBackend backend_flags(wgml_backend b)
{
    switch (b) {
    case WGML_BACKEND_METAL: return WGPUInstanceBackend_Metal;
    case WGML_BACKEND_DX12: return WGPUInstanceBackend_DX12;
    case WGML_BACKEND_GL: return WGPUInstanceBackend_GL;
    case WGML_BACKEND_ALL: return WGPUInstanceBackend_All;
    default: return WGPUInstanceBackend_Vulkan;
    }
}

static wgml_status create_instance(wgml_runtime *rt, wgml_backend backend, char *err, size_t err_size)
{
    /* Vulkan only unless asked: with all backends on, the GL one prints EGL complaints on a
       headless machine */
    WGPUInstanceExtras extras = {.chain = {.sType = (WGPUSType)WGPUSType_InstanceExtras},
                                 .backends = backend_flags(backend)};
    WGPUInstanceDescriptor idesc = {.nextInChain = &extras.chain};
    rt->instance = wgpuCreateInstance(&idesc);
    if (!rt->instance) {
        snprintf(err, err_size, "wgpuCreateInstance failed");
        return WGML_ERROR_NO_ADAPTER;
    }
    return WGML_OK;
}

static size_t adapters(wgml_runtime *rt, wgml_backend backend, WGPUAdapter *out, size_t max)
{
    WGPUInstanceEnumerateAdapterOptions eopt = {.backends = backend_flags(backend)};
    size_t count = wgml_wgpu_extra.InstanceEnumerateAdapters(rt->instance, &eopt, NULL);
    if (!count) return 0;
    WGPUAdapter all[64];
    if (count > 64) count = 64;
    count = wgml_wgpu_extra.InstanceEnumerateAdapters(rt->instance, &eopt, all);
    if (count > 64) count = 64; /* (it wrote no more than it said the first time) */
    for (size_t i = max; i < count; i++) wgpuAdapterRelease(all[i]);
    if (count > max) count = max;
    memcpy(out, all, count * sizeof *out);
    return count;
}

/* Cooperative matrices are experimental in wgpu-native 29 and its C API cannot enable them:
   named, never requested. */
static const WGPUFeatureName wanted[] = {
    WGPUFeatureName_TimestampQuery,
    WGPUFeatureName_ShaderF16,
    WGPUFeatureName_Subgroups,
    (WGPUFeatureName)WGPUNativeFeature_Subgroup, /* what wgpu-native 29 offers on Vulkan */
    (WGPUFeatureName)WGPUNativeFeature_Immediates,
    (WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsidePasses,
    (WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsideEncoders,
    (WGPUFeatureName)WGPUNativeFeature_PipelineCache,
};

static const char *feature_name(WGPUFeatureName id)
{
    switch ((int)id) {
    case WGPUNativeFeature_Immediates: return "immediates";
    case WGPUNativeFeature_Subgroup: return "native-subgroup";
    case WGPUNativeFeature_TimestampQueryInsidePasses: return "timestamp-query-inside-passes";
    case WGPUNativeFeature_TimestampQueryInsideEncoders: return "timestamp-query-inside-encoders";
    case WGPUNativeFeature_PipelineCache: return "pipeline-cache";
    case WGPUNativeFeature_ShaderF64: return "shader-f64";
    case WGPUNativeFeature_ShaderInt64: return "shader-int64";
    case WGPUNativeFeature_ShaderFloat32Atomic: return "shader-float32-atomic";
    case WGPUNativeFeature_CooperativeMatrix: return "cooperative-matrix (experimental)";
    case WGPUNativeFeature_PipelineStatisticsQuery: return "pipeline-statistics-query";
    case WGPUNativeFeature_MappablePrimaryBuffers: return "mappable-primary-buffers";
    default: return NULL;
    }
}

static WGPUChainedStruct *device_chain(wgml_runtime *rt, wgml_toggles *storage)
{
    (void)rt, (void)storage;
    return NULL;
}

static void wait_host(wgml_runtime *rt, WGPUFuture f, const volatile bool *done)
{
    (void)f; /* wgpu-native 29 does not implement wgpuInstanceWaitAny */
    for (int i = 0; i < 1000 && !*done; i++) wgpuInstanceProcessEvents(rt->instance);
}

/* Spins on non-blocking polls for a while first (rt->poll_spin_seconds, WGML_POLL_SPIN_US):
   a blocking poll sleeps on a fence and wakes tens of microseconds late, most of a small round
   trip. Then blocks: each poll with wait=true returns when the queue is idle, and the callback
   runs then. The flag, not the poll's "queue empty" answer, says when to stop: on the H100 a
   non-blocking poll answered "empty" with work still running. */
static void wait_gpu(wgml_runtime *rt, WGPUFuture f, const volatile bool *done)
{
    (void)f;
    double spin = rt->poll_spin_seconds, t0 = wgml_host_seconds();
    while (!*done && !rt->device_lost && spin > 0 && wgml_host_seconds() - t0 < spin) {
        wgml_wgpu_extra.DevicePoll(rt->device, false, NULL);
        wgpuInstanceProcessEvents(rt->instance);
        rt->timeline.spin_polls++;
    }
    for (int i = 0; i < 100 && !*done && !rt->device_lost; i++) {
        wgml_wgpu_extra.DevicePoll(rt->device, true, NULL);
        wgpuInstanceProcessEvents(rt->instance);
        rt->timeline.blocking_polls++;
    }
}

static void poll(wgml_runtime *rt)
{
    wgml_wgpu_extra.DevicePoll(rt->device, false, NULL);
    wgpuInstanceProcessEvents(rt->instance);
}

/* naga's checked code ran 50x slower on the H100 (shared/DEVICE.md) */
static WGPUShaderModule shader_module(wgml_runtime *rt, const WGPUShaderModuleDescriptor *md, bool trusted)
{
    if (trusted && wgml_wgpu_extra.DeviceCreateShaderModuleTrusted)
        return wgml_wgpu_extra.DeviceCreateShaderModuleTrusted(rt->device, md, WGPUShaderRuntimeChecks_None);
    return wgpuDeviceCreateShaderModule(rt->device, md);
}

static double timestamp_ns(wgml_runtime *rt)
{
    return wgml_wgpu_extra.QueueGetTimestampPeriod ? (double)wgml_wgpu_extra.QueueGetTimestampPeriod(rt->queue) : 1.0;
}

static void describe(wgml_runtime *rt)
{
    uint32_t v = wgml_wgpu_extra.GetVersion ? wgml_wgpu_extra.GetVersion() : 0;
    snprintf(rt->info.runtime_version, sizeof rt->info.runtime_version, "%u.%u.%u.%u", v >> 24,
             (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
}

const wgml_runtime_impl wgml_impl_wgpu_native = {
    .kind = WGML_RUNTIME_WGPU_NATIVE,
    .name = "wgpu-native",
    .create_instance = create_instance,
    .adapters = adapters,
    .callback_mode = WGPUCallbackMode_AllowProcessEvents, /* no wgpuInstanceWaitAny */
    .wanted_features = wanted,
    .wanted_count = sizeof wanted / sizeof wanted[0],
    .feature_name = feature_name,
    .device_chain = device_chain,
    .wait_host = wait_host,
    .wait_gpu = wait_gpu,
    .poll = poll,
    .shader_module = shader_module,
    .timestamp_ns = timestamp_ns,
    .describe = describe,
};
