/*
 * WebGPU bring-up: instance (Vulkan unless asked otherwise), adapter choice, a device with
 * the adapter's real limits and the features worth having, error and device-lost callbacks,
 * error scopes and blocking waits built on wgpuDevicePoll.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h"

WGPUStringView wgml_sv(const char *s)
{
    return (WGPUStringView){.data = s, .length = s ? strlen(s) : 0};
}

static void sv_copy(char *dst, size_t n, WGPUStringView sv)
{
    size_t len = sv.data ? (sv.length == WGPU_STRLEN ? strlen(sv.data) : sv.length) : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(dst, sv.data, len);
    dst[len] = 0;
}

/* ---------------------------------------------------------------- errors */

wgml_status wgml_rt_failv(wgml_runtime *rt, wgml_status status, const char *fmt, va_list ap)
{
    rt->status = status;
    vsnprintf(rt->message, sizeof rt->message, fmt, ap);
    return status;
}

wgml_status wgml_rt_fail(wgml_runtime *rt, wgml_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wgml_rt_failv(rt, status, fmt, ap);
    va_end(ap);
    return status;
}

wgml_status wgml_check_device(wgml_runtime *rt)
{
    if (!rt->device_lost) return WGML_OK;
    return wgml_rt_fail(rt, WGML_ERROR_DEVICE_LOST,
                        "the WebGPU device was lost (%s); free this context and create a new one",
                        rt->lost_message[0] ? rt->lost_message : "no reason given");
}

/* ---------------------------------------------------------------- callbacks */

static void on_device_lost(WGPUDevice const *device, WGPUDeviceLostReason reason,
                           WGPUStringView message, void *userdata1, void *userdata2)
{
    wgml_runtime *rt = userdata1;
    if (!rt) return;
    rt->device_lost = true;
    sv_copy(rt->lost_message, sizeof rt->lost_message, message);
    if (!rt->lost_message[0])
        snprintf(rt->lost_message, sizeof rt->lost_message, "reason %d", (int)reason);
}

static void on_uncaptured_error(WGPUDevice const *device, WGPUErrorType type,
                                WGPUStringView message, void *userdata1, void *userdata2)
{
    wgml_runtime *rt = userdata1;
    if (!rt || rt->uncaptured_status != WGML_OK) return; /* keep the first */
    rt->uncaptured_status =
        type == WGPUErrorType_OutOfMemory ? WGML_ERROR_OUT_OF_MEMORY : WGML_ERROR_VALIDATION;
    sv_copy(rt->uncaptured_message, sizeof rt->uncaptured_message, message);
}

typedef struct scope_result {
    bool done;
    WGPUErrorType type;
    char message[768];
} scope_result;

static void on_pop_scope(WGPUPopErrorScopeStatus status, WGPUErrorType type,
                         WGPUStringView message, void *userdata1, void *userdata2)
{
    scope_result *r = userdata1;
    r->done = true;
    r->type = status == WGPUPopErrorScopeStatus_Success ? type : WGPUErrorType_NoError;
    sv_copy(r->message, sizeof r->message, message);
}

void wgml_scope_push(wgml_runtime *rt)
{
    wgpuDevicePushErrorScope(rt->device, WGPUErrorFilter_OutOfMemory);
    wgpuDevicePushErrorScope(rt->device, WGPUErrorFilter_Validation);
}

static void pop_one(wgml_runtime *rt, scope_result *r)
{
    WGPUPopErrorScopeCallbackInfo cb = {
        .mode = WGPUCallbackMode_AllowProcessEvents, .callback = on_pop_scope, .userdata1 = r};
    wgpuDevicePopErrorScope(rt->device, cb);
    for (int i = 0; i < 1000 && !r->done; i++) wgpuInstanceProcessEvents(rt->instance);
}

wgml_status wgml_scope_pop(wgml_runtime *rt, const char *what)
{
    scope_result validation = {0}, oom = {0};
    pop_one(rt, &validation);
    pop_one(rt, &oom);
    if (rt->device_lost) return wgml_check_device(rt);
    if (oom.type == WGPUErrorType_OutOfMemory)
        return wgml_rt_fail(rt, WGML_ERROR_OUT_OF_MEMORY, "%s: GPU out of memory: %s", what,
                         oom.message);
    if (validation.type != WGPUErrorType_NoError && validation.done)
        return wgml_rt_fail(rt, WGML_ERROR_VALIDATION, "%s: WebGPU rejected the work: %s", what,
                         validation.message);
    if (rt->uncaptured_status != WGML_OK) {
        wgml_status st = rt->uncaptured_status;
        rt->uncaptured_status = WGML_OK;
        return wgml_rt_fail(rt, st, "%s: %s", what, rt->uncaptured_message);
    }
    return WGML_OK;
}

/* Waits until *done is set by a callback of the device's queue. Spins on non-blocking polls
   for a while first (rt->poll_spin_seconds, WGML_POLL_SPIN_US): a blocking poll sleeps on a
   fence and wakes tens of microseconds late, most of a small round trip. Then blocks: each
   poll with wait=true returns when the queue is idle, and the callback runs then. The flag,
   not the poll's "queue empty" answer, says when to stop: on the H100 a non-blocking poll
   answered "empty" with work still running. */
static void wait_for(wgml_runtime *rt, const volatile bool *done)
{
    double spin = rt->poll_spin_seconds, t0 = wgml_host_seconds();
    while (!*done && !rt->device_lost && spin > 0 && wgml_host_seconds() - t0 < spin) {
        wgpuDevicePoll(rt->device, false, NULL);
        wgpuInstanceProcessEvents(rt->instance);
        rt->timeline.spin_polls++;
    }
    for (int i = 0; i < 100 && !*done && !rt->device_lost; i++) {
        wgpuDevicePoll(rt->device, true, NULL);
        wgpuInstanceProcessEvents(rt->instance);
        rt->timeline.blocking_polls++;
    }
}

static void on_work_done(WGPUQueueWorkDoneStatus status, WGPUStringView message, void *userdata1, void *userdata2)
{
    (void)status, (void)message, (void)userdata2;
    *(volatile bool *)userdata1 = true;
}

wgml_status wgml_wait_idle(wgml_runtime *rt)
{
    if (rt->device_lost) return wgml_check_device(rt);
    volatile bool done = false;
    WGPUQueueWorkDoneCallbackInfo cb = {
        .mode = WGPUCallbackMode_AllowProcessEvents, .callback = on_work_done, .userdata1 = (void *)&done};
    wgpuQueueOnSubmittedWorkDone(rt->queue, cb);
    wait_for(rt, &done);
    if (rt->device_lost) return wgml_check_device(rt);
    if (!done) return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "synchronizing: the queue never finished its work");
    return wgml_check_device(rt);
}

typedef struct map_result {
    volatile bool done;
    WGPUMapAsyncStatus status;
    char message[256];
} map_result;

static void on_mapped(WGPUMapAsyncStatus status, WGPUStringView message, void *userdata1,
                      void *userdata2)
{
    (void)userdata2;
    map_result *r = userdata1;
    r->status = status;
    sv_copy(r->message, sizeof r->message, message);
    r->done = true;
}

wgml_status wgml_map_read(wgml_runtime *rt, WGPUBuffer buffer, uint64_t size)
{
    map_result r = {0};
    WGPUBufferMapCallbackInfo cb = {
        .mode = WGPUCallbackMode_AllowProcessEvents, .callback = on_mapped, .userdata1 = &r};
    wgpuBufferMapAsync(buffer, WGPUMapMode_Read, 0, (size_t)size, cb);
    wait_for(rt, &r.done);
    if (rt->device_lost) return wgml_check_device(rt);
    if (!r.done) return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: the map never completed");
    if (r.status != WGPUMapAsyncStatus_Success)
        return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: map failed (%d): %s",
                         (int)r.status, r.message);
    return WGML_OK;
}

wgml_status wgml_submit(wgml_runtime *rt, WGPUCommandBuffer cb)
{
    /* wgpu-native aborts the process on a submit to a lost device: a loss that the lost
       callback has reported is returned instead. (A non-blocking poll here to collect a
       loss sooner cost ~25 us per cached-matmul round trip on the H100, so there is none.) */
    if (rt->device_lost) {
        wgpuCommandBufferRelease(cb);
        return wgml_check_device(rt);
    }
    wgpuQueueSubmit(rt->queue, 1, &cb);
    wgpuCommandBufferRelease(cb);
    rt->stats.submits++;
    return WGML_OK;
}

/* ---------------------------------------------------------------- adapter choice */

static const char *backend_name(WGPUBackendType b)
{
    switch (b) {
    case WGPUBackendType_Vulkan: return "Vulkan";
    case WGPUBackendType_Metal: return "Metal";
    case WGPUBackendType_D3D12: return "D3D12";
    case WGPUBackendType_D3D11: return "D3D11";
    case WGPUBackendType_OpenGL: return "OpenGL";
    case WGPUBackendType_OpenGLES: return "OpenGL ES";
    case WGPUBackendType_WebGPU: return "WebGPU";
    case WGPUBackendType_Null: return "null";
    default: return "unknown";
    }
}

static const char *adapter_type_name(WGPUAdapterType t)
{
    switch (t) {
    case WGPUAdapterType_DiscreteGPU: return "discrete GPU";
    case WGPUAdapterType_IntegratedGPU: return "integrated GPU";
    case WGPUAdapterType_CPU: return "CPU";
    default: return "unknown";
    }
}

static int type_rank(WGPUAdapterType t)
{
    switch (t) {
    case WGPUAdapterType_DiscreteGPU: return 0;
    case WGPUAdapterType_IntegratedGPU: return 1;
    case WGPUAdapterType_CPU: return 2;
    default: return 3;
    }
}

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return n == 0;
}

static wgml_backend backend_from_env(void)
{
    const char *e = getenv("WGML_BACKEND");
    if (!e || !*e) return WGML_BACKEND_VULKAN;
    if (contains_nocase(e, "vulkan")) return WGML_BACKEND_VULKAN;
    if (contains_nocase(e, "metal")) return WGML_BACKEND_METAL;
    if (contains_nocase(e, "dx12") || contains_nocase(e, "d3d12")) return WGML_BACKEND_DX12;
    if (contains_nocase(e, "gl")) return WGML_BACKEND_GL;
    if (contains_nocase(e, "all")) return WGML_BACKEND_ALL;
    return WGML_BACKEND_VULKAN;
}

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

static const char *backend_label(wgml_backend b)
{
    switch (b) {
    case WGML_BACKEND_METAL: return "Metal";
    case WGML_BACKEND_DX12: return "DX12";
    case WGML_BACKEND_GL: return "GL";
    case WGML_BACKEND_ALL: return "all";
    default: return "Vulkan";
    }
}

/* ---------------------------------------------------------------- features */

typedef struct feature_name {
    WGPUFeatureName id;
    const char *name;
} feature_name;

static const feature_name known_features[] = {
    {WGPUFeatureName_TimestampQuery, "timestamp-query"},
    {WGPUFeatureName_ShaderF16, "shader-f16"},
    {WGPUFeatureName_Subgroups, "subgroups"},
    {WGPUFeatureName_Float32Filterable, "float32-filterable"},
    {WGPUFeatureName_Float32Blendable, "float32-blendable"},
    {WGPUFeatureName_IndirectFirstInstance, "indirect-first-instance"},
    {WGPUFeatureName_DepthClipControl, "depth-clip-control"},
    {WGPUFeatureName_Depth32FloatStencil8, "depth32float-stencil8"},
    {WGPUFeatureName_TextureCompressionBC, "texture-compression-bc"},
    {WGPUFeatureName_RG11B10UfloatRenderable, "rg11b10ufloat-renderable"},
    {WGPUFeatureName_BGRA8UnormStorage, "bgra8unorm-storage"},
    {WGPUFeatureName_ClipDistances, "clip-distances"},
    {WGPUFeatureName_DualSourceBlending, "dual-source-blending"},
    {(WGPUFeatureName)WGPUNativeFeature_Immediates, "immediates"},
    {(WGPUFeatureName)WGPUNativeFeature_Subgroup, "native-subgroup"},
    {(WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsidePasses, "timestamp-query-inside-passes"},
    {(WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsideEncoders, "timestamp-query-inside-encoders"},
    {(WGPUFeatureName)WGPUNativeFeature_PipelineCache, "pipeline-cache"},
    {(WGPUFeatureName)WGPUNativeFeature_ShaderF64, "shader-f64"},
    {(WGPUFeatureName)WGPUNativeFeature_ShaderInt64, "shader-int64"},
    {(WGPUFeatureName)WGPUNativeFeature_ShaderFloat32Atomic, "shader-float32-atomic"},
    {(WGPUFeatureName)WGPUNativeFeature_CooperativeMatrix, "cooperative-matrix (experimental)"},
    {(WGPUFeatureName)WGPUNativeFeature_PipelineStatisticsQuery, "pipeline-statistics-query"},
    {(WGPUFeatureName)WGPUNativeFeature_MappablePrimaryBuffers, "mappable-primary-buffers"},
};

/* Features wgml enables when offered. Cooperative matrices are experimental in wgpu-native 29
   and its C API cannot enable them, so they are listed but never requested. */
static const WGPUFeatureName wanted_features[] = {
    WGPUFeatureName_TimestampQuery,
    WGPUFeatureName_ShaderF16,
    WGPUFeatureName_Subgroups,
    (WGPUFeatureName)WGPUNativeFeature_Subgroup, /* what wgpu-native 29 offers on Vulkan */
    (WGPUFeatureName)WGPUNativeFeature_Immediates,
    (WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsidePasses,
    (WGPUFeatureName)WGPUNativeFeature_TimestampQueryInsideEncoders,
    (WGPUFeatureName)WGPUNativeFeature_PipelineCache,
};

static bool has_feature(const WGPUSupportedFeatures *f, WGPUFeatureName id)
{
    for (size_t i = 0; i < f->featureCount; i++)
        if (f->features[i] == id) return true;
    return false;
}

static void fill_info(wgml_runtime *rt, const WGPUAdapterInfo *ai, const WGPUSupportedFeatures *af)
{
    wgml_adapter_info *info = &rt->info;
    sv_copy(info->name, sizeof info->name, ai->device);
    sv_copy(info->vendor, sizeof info->vendor, ai->vendor);
    sv_copy(info->architecture, sizeof info->architecture, ai->architecture);
    sv_copy(info->driver, sizeof info->driver, ai->description);
    info->backend = backend_name(ai->backendType);
    info->adapter_type = adapter_type_name(ai->adapterType);
    info->vendor_id = ai->vendorID;
    info->device_id = ai->deviceID;
    info->subgroup_min_size = ai->subgroupMinSize;
    info->subgroup_max_size = ai->subgroupMaxSize;
    const WGPULimits *l = &rt->limits;
    info->max_buffer_size = l->maxBufferSize;
    info->max_storage_buffer_binding_size = l->maxStorageBufferBindingSize;
    info->max_uniform_buffer_binding_size = l->maxUniformBufferBindingSize;
    info->max_compute_workgroup_storage_size = l->maxComputeWorkgroupStorageSize;
    info->max_compute_invocations_per_workgroup = l->maxComputeInvocationsPerWorkgroup;
    info->max_compute_workgroup_size_x = l->maxComputeWorkgroupSizeX;
    info->max_compute_workgroup_size_y = l->maxComputeWorkgroupSizeY;
    info->max_compute_workgroup_size_z = l->maxComputeWorkgroupSizeZ;
    info->max_compute_workgroups_per_dimension = l->maxComputeWorkgroupsPerDimension;
    info->max_storage_buffers_per_shader_stage = l->maxStorageBuffersPerShaderStage;
    info->min_storage_buffer_offset_alignment = l->minStorageBufferOffsetAlignment;
    info->min_uniform_buffer_offset_alignment = l->minUniformBufferOffsetAlignment;
    info->feature_count = 0;
    for (size_t i = 0; i < sizeof known_features / sizeof known_features[0]; i++)
        if (has_feature(af, known_features[i].id) && info->feature_count < 64)
            info->features[info->feature_count++] = known_features[i].name;
}

typedef struct device_result {
    bool done;
    WGPURequestDeviceStatus status;
    WGPUDevice device;
    char message[512];
} device_result;

static void on_device(WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView message,
                      void *userdata1, void *userdata2)
{
    device_result *r = userdata1;
    r->done = true;
    r->status = status;
    r->device = device;
    sv_copy(r->message, sizeof r->message, message);
}

/* Closes what was opened and says why in err. */
static wgml_status open_fail(wgml_runtime *rt, wgml_status st, const char *msg, char *err, size_t err_size)
{
    snprintf(err, err_size, "%s", msg);
    wgml_runtime_close(rt);
    return st;
}

wgml_status wgml_runtime_open(wgml_runtime *rt, const wgml_context_desc *desc_in, char *err, size_t err_size)
{
    wgml_context_desc desc = desc_in ? *desc_in : (wgml_context_desc){0};
    wgml_backend backend = desc.backend == WGML_BACKEND_DEFAULT ? backend_from_env() : desc.backend;
    const char *want_name = desc.adapter_name ? desc.adapter_name : getenv("WGML_ADAPTER");
    const char *index_env = getenv("WGML_ADAPTER_INDEX");
    long want_index = desc.adapter_index ? desc.adapter_index : index_env && *index_env ? strtol(index_env, NULL, 10) : 0;
    if (want_index < 0)
        return open_fail(rt, WGML_ERROR_INVALID_ARGUMENT, "adapter_index (or WGML_ADAPTER_INDEX) is negative", err,
                         err_size);

    const char *timing = getenv("WGML_GPU_TIMING");
    rt->gpu_timing = desc.gpu_timing || (timing && *timing == '1');

    WGPUInstanceExtras extras = {.chain = {.sType = (WGPUSType)WGPUSType_InstanceExtras},
                                 .backends = backend_flags(backend)};
    WGPUInstanceDescriptor idesc = {.nextInChain = &extras.chain};
    rt->instance = wgpuCreateInstance(&idesc);
    if (!rt->instance)
        return open_fail(rt, WGML_ERROR_NO_ADAPTER, "wgpuCreateInstance failed", err, err_size);

    WGPUInstanceEnumerateAdapterOptions eopt = {.backends = backend_flags(backend)};
    size_t count = wgpuInstanceEnumerateAdapters(rt->instance, &eopt, NULL);
    WGPUAdapter *adapters = count ? calloc(count, sizeof *adapters) : NULL;
    if (count && !adapters) return open_fail(rt, WGML_ERROR_OUT_OF_MEMORY, "out of host memory", err, err_size);
    if (count) count = wgpuInstanceEnumerateAdapters(rt->instance, &eopt, adapters);

    /* Choose: by name if asked, else discrete, integrated, CPU; among several of the best
       type, the want_index-th (modulo their number) */
    int best = -1, best_rank = 99, ranks[64], ties = 0;
    char names[512] = "";
    size_t names_len = 0;
    for (size_t i = 0; i < count; i++) {
        WGPUAdapterInfo ai = {0};
        if (i < 64) ranks[i] = 99;
        if (wgpuAdapterGetInfo(adapters[i], &ai) != WGPUStatus_Success) continue;
        char name[256];
        sv_copy(name, sizeof name, ai.device);
        if (names_len < sizeof names - 1)
            names_len += (size_t)snprintf(names + names_len, sizeof names - names_len, "%s'%s' (%s)",
                                          names_len ? ", " : "", name, adapter_type_name(ai.adapterType));
        if (names_len >= sizeof names) names_len = sizeof names - 1;
        int rank = type_rank(ai.adapterType);
        bool name_ok = !want_name || !*want_name || contains_nocase(name, want_name);
        if (i < 64) ranks[i] = name_ok ? rank : 99;
        if (name_ok && rank < best_rank) { best = (int)i; best_rank = rank; }
        wgpuAdapterInfoFreeMembers(ai);
    }
    for (size_t i = 0; i < count && i < 64; i++) ties += ranks[i] == best_rank;
    for (size_t i = 0, seen = 0; best >= 0 && ties && i < count && i < 64; i++)
        if (ranks[i] == best_rank && seen++ == (size_t)(want_index % ties)) best = (int)i;
    for (size_t i = 0; i < count; i++)
        if ((int)i != best) wgpuAdapterRelease(adapters[i]);
    if (best >= 0) rt->adapter = adapters[best];
    free(adapters);
    if (!rt->adapter) {
        char msg[1024];
        if (count && want_name && *want_name)
            snprintf(msg, sizeof msg,
                     "no WebGPU adapter named like '%s' (backend %s); adapters found: %s",
                     want_name, backend_label(backend), names);
        else
            snprintf(msg, sizeof msg,
                     "no WebGPU adapter found (backend %s). On a machine without a GPU install "
                     "Mesa's software Vulkan driver: apt-get install mesa-vulkan-drivers libvulkan1",
                     backend_label(backend));
        return open_fail(rt, WGML_ERROR_NO_ADAPTER, msg, err, err_size);
    }

    /* The device gets the adapter's real limits and the features worth having. */
    WGPULimits limits = {0};
    if (wgpuAdapterGetLimits(rt->adapter, &limits) != WGPUStatus_Success)
        return open_fail(rt, WGML_ERROR_DEVICE, "wgpuAdapterGetLimits failed", err, err_size);
    limits.nextInChain = NULL;
    WGPUSupportedFeatures af = {0};
    wgpuAdapterGetFeatures(rt->adapter, &af);
    WGPUFeatureName req[16];
    size_t nreq = 0;
    for (size_t i = 0; i < sizeof wanted_features / sizeof wanted_features[0]; i++)
        if (has_feature(&af, wanted_features[i])) req[nreq++] = wanted_features[i];

    WGPUDeviceDescriptor ddesc = {
        .label = wgml_sv("wgml"),
        .requiredFeatureCount = nreq,
        .requiredFeatures = req,
        .requiredLimits = &limits,
        .deviceLostCallbackInfo = {.mode = WGPUCallbackMode_AllowSpontaneous,
                                   .callback = on_device_lost, .userdata1 = rt},
        .uncapturedErrorCallbackInfo = {.callback = on_uncaptured_error, .userdata1 = rt},
    };
    device_result dr = {0};
    WGPURequestDeviceCallbackInfo dcb = {
        .mode = WGPUCallbackMode_AllowProcessEvents, .callback = on_device, .userdata1 = &dr};
    wgpuAdapterRequestDevice(rt->adapter, &ddesc, dcb);
    for (int i = 0; i < 1000 && !dr.done; i++) wgpuInstanceProcessEvents(rt->instance);
    if (!dr.done || dr.status != WGPURequestDeviceStatus_Success || !dr.device) {
        wgpuSupportedFeaturesFreeMembers(af);
        char msg[768];
        snprintf(msg, sizeof msg, "requesting a device failed: %s", dr.message);
        return open_fail(rt, WGML_ERROR_DEVICE, msg, err, err_size);
    }
    rt->device = dr.device;
    rt->queue = wgpuDeviceGetQueue(rt->device);
    rt->limits = limits;
    if (wgpuDeviceGetLimits(rt->device, &rt->limits) != WGPUStatus_Success) rt->limits = limits;
    rt->limits.nextInChain = NULL;
    /* kernels index elements with u32 arithmetic: a binding of under 2^32 bytes keeps every
       element index, and every product of a tensor's dimensions, below 2^30 */
    if (rt->limits.maxStorageBufferBindingSize > 0xfffffffcull) rt->limits.maxStorageBufferBindingSize = 0xfffffffcull;

    WGPUAdapterInfo ai = {0};
    wgpuAdapterGetInfo(rt->adapter, &ai);
    fill_info(rt, &ai, &af);
    /* how long a wait spins before it blocks (see wait_for): up to 10 ms on a GPU; not on a
       CPU adapter, where the spinning thread takes a core from the work it waits for
       (lavapipe on 2 cores, `WGML_BENCH_ONLY=cached_roundtrip wgml bench matmul --quick`:
       352-423 us blocking at once, 497-543 us spinning 1 ms) */
    const char *spin = getenv("WGML_POLL_SPIN_US");
    bool cpu = ai.adapterType == WGPUAdapterType_CPU;
    rt->poll_spin_seconds = spin && *spin ? atof(spin) * 1e-6 : cpu ? 0.0 : 10e-3;
    const char *tl = getenv("WGML_TIMELINE");
    rt->timeline.on = tl && *tl && strcmp(tl, "0");
    /* llvmpipe's loop limiter (see wgml_context.loop_limit); the margin is for the fixed loops
       (reduction trees) that the kernels' own counts leave out */
    const char *ll = getenv("WGML_LOOP_LIMIT");
    rt->loop_limit = strstr(rt->info.name, "llvmpipe") ? 65535 - 512 : UINT32_MAX;
    if (ll && *ll && strtoul(ll, NULL, 10) > 0) rt->loop_limit = (uint32_t)strtoul(ll, NULL, 10);
    wgpuAdapterInfoFreeMembers(ai);
    wgpuSupportedFeaturesFreeMembers(af);
    for (size_t i = 0; i < nreq; i++) {
        if (req[i] == WGPUFeatureName_TimestampQuery) rt->info.has_timestamp_query = 1;
        if (req[i] == WGPUFeatureName_ShaderF16) rt->info.has_shader_f16 = 1;
        if (req[i] == WGPUFeatureName_Subgroups || req[i] == (WGPUFeatureName)WGPUNativeFeature_Subgroup)
            rt->info.has_subgroups = 1;
        if (req[i] == (WGPUFeatureName)WGPUNativeFeature_Immediates) rt->info.has_immediates = 1;
        if (req[i] == (WGPUFeatureName)WGPUNativeFeature_PipelineCache) rt->info.has_pipeline_cache = 1;
    }
    for (int i = 0; i < rt->info.feature_count; i++)
        if (strstr(rt->info.features[i], "cooperative-matrix")) rt->info.has_cooperative_matrix = 1;
    return WGML_OK;
}

void wgml_runtime_destroy_device(wgml_runtime *rt)
{
    if (!rt->device) return;
    wgpuDeviceDestroy(rt->device);
    wgpuDevicePoll(rt->device, false, NULL);
    wgpuInstanceProcessEvents(rt->instance);
    rt->device_lost = true; /* destroy is a loss, whether or not the callback has run yet */
    if (!rt->lost_message[0])
        snprintf(rt->lost_message, sizeof rt->lost_message, "the device was destroyed");
}

void wgml_runtime_close(wgml_runtime *rt)
{
    wgml_timing_destroy(rt);
    if (rt->queue) wgpuQueueRelease(rt->queue);
    if (rt->device) {
        if (!rt->device_lost) wgpuDevicePoll(rt->device, true, NULL);
        wgpuDeviceRelease(rt->device);
    }
    if (rt->adapter) wgpuAdapterRelease(rt->adapter);
    if (rt->instance) wgpuInstanceRelease(rt->instance);
    rt->queue = NULL;
    rt->device = NULL;
    rt->adapter = NULL;
    rt->instance = NULL;
}
