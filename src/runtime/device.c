/*
 * WebGPU bring-up: the implementation chosen and bound (wgpu-native or Dawn, runtime/impl.h),
 * instance (Vulkan unless asked otherwise), adapter choice, a device with the adapter's real
 * limits and the features worth having, error and device-lost callbacks, error scopes and
 * blocking waits. What the two implementations do differently goes through rt->impl.
 */
#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/impl.h"

WGPUStringView wgml_sv(const char *s)
{
    return (WGPUStringView){.data = s, .length = s ? strlen(s) : 0};
}

void wgml_sv_copy(char *dst, size_t n, WGPUStringView sv)
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
    wgml_sv_copy(rt->lost_message, sizeof rt->lost_message, message);
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
    wgml_sv_copy(rt->uncaptured_message, sizeof rt->uncaptured_message, message);
}

typedef struct scope_result {
    volatile bool done;
    WGPUErrorType type;
    char message[768];
} scope_result;

static void on_pop_scope(WGPUPopErrorScopeStatus status, WGPUErrorType type,
                         WGPUStringView message, void *userdata1, void *userdata2)
{
    scope_result *r = userdata1;
    r->done = true;
    r->type = status == WGPUPopErrorScopeStatus_Success ? type : WGPUErrorType_NoError;
    wgml_sv_copy(r->message, sizeof r->message, message);
}

void wgml_scope_push(wgml_runtime *rt)
{
    wgpuDevicePushErrorScope(rt->device, WGPUErrorFilter_OutOfMemory);
    wgpuDevicePushErrorScope(rt->device, WGPUErrorFilter_Validation);
}

static void pop_one(wgml_runtime *rt, scope_result *r)
{
    WGPUPopErrorScopeCallbackInfo cb = {
        .mode = rt->impl->callback_mode, .callback = on_pop_scope, .userdata1 = r};
    rt->impl->wait_host(rt, wgpuDevicePopErrorScope(rt->device, cb), &r->done);
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
        .mode = rt->impl->callback_mode, .callback = on_work_done, .userdata1 = (void *)&done};
    rt->impl->wait_gpu(rt, wgpuQueueOnSubmittedWorkDone(rt->queue, cb), &done);
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
    wgml_sv_copy(r->message, sizeof r->message, message);
    r->done = true;
}

wgml_status wgml_map_read(wgml_runtime *rt, WGPUBuffer buffer, uint64_t size)
{
    map_result r = {0};
    WGPUBufferMapCallbackInfo cb = {
        .mode = rt->impl->callback_mode, .callback = on_mapped, .userdata1 = &r};
    rt->impl->wait_gpu(rt, wgpuBufferMapAsync(buffer, WGPUMapMode_Read, 0, (size_t)size, cb), &r.done);
    if (rt->device_lost) return wgml_check_device(rt);
    if (!r.done) return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: the map never completed");
    if (r.status != WGPUMapAsyncStatus_Success)
        return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: map failed (%d): %s",
                         (int)r.status, r.message);
    return WGML_OK;
}

static void on_mapped_async(WGPUMapAsyncStatus status, WGPUStringView message, void *userdata1, void *userdata2)
{
    (void)userdata2;
    wgml_map_async *m = userdata1;
    m->status = status;
    wgml_sv_copy(m->message, sizeof m->message, message);
    m->done = true;
}

void wgml_map_begin(wgml_runtime *rt, WGPUBuffer buffer, WGPUMapMode mode, uint64_t offset, uint64_t size,
                    wgml_map_async *m)
{
    m->done = false;
    m->status = 0;
    m->message[0] = 0;
    WGPUBufferMapCallbackInfo cb = {.mode = rt->impl->callback_mode, .callback = on_mapped_async, .userdata1 = m};
    m->future = wgpuBufferMapAsync(buffer, mode, (size_t)offset, (size_t)size, cb);
}

static void on_work_done_async(WGPUQueueWorkDoneStatus status, WGPUStringView message, void *userdata1, void *userdata2)
{
    (void)userdata2;
    wgml_map_async *m = userdata1;
    m->status = status == WGPUQueueWorkDoneStatus_Success ? WGPUMapAsyncStatus_Success : WGPUMapAsyncStatus_Error;
    wgml_sv_copy(m->message, sizeof m->message, message);
    m->done = true;
}

void wgml_work_done_begin(wgml_runtime *rt, wgml_map_async *m)
{
    m->done = false;
    m->status = 0;
    m->message[0] = 0;
    WGPUQueueWorkDoneCallbackInfo cb = {.mode = rt->impl->callback_mode, .callback = on_work_done_async, .userdata1 = m};
    m->future = wgpuQueueOnSubmittedWorkDone(rt->queue, cb);
}

WGPUBuffer wgml_rt_host_buffer(wgml_runtime *rt, void *pointer, uint64_t size, WGPUBufferUsage usage, const char *label,
                               void (*disposed)(void *), void *userdata)
{
    uint64_t a = rt->host_mapped_alignment;
    if (!rt->impl->host_buffer || !a || (uintptr_t)pointer % a || size % a || rt->device_lost ||
        rt->uncaptured_status != WGML_OK) /* (the scope below would take that error as its own) */
        return NULL;
    /* (a refusal is an error buffer: caught here, not left to the uncaptured-error callback) */
    wgml_status saved = rt->status;
    char message[sizeof rt->message];
    memcpy(message, rt->message, sizeof message);
    wgml_scope_push(rt);
    WGPUBuffer b = rt->impl->host_buffer(rt, pointer, size, usage, label, disposed, userdata);
    if (wgml_scope_pop(rt, "a buffer over host memory") != WGML_OK && b) {
        wgpuBufferRelease(b);
        b = NULL;
    }
    if (rt->device_lost) { /* (the failure's words stay) */
        if (b) wgpuBufferRelease(b);
        return NULL;
    }
    rt->status = saved;
    memcpy(rt->message, message, sizeof message);
    return b;
}

bool wgml_map_poll(wgml_runtime *rt, wgml_map_async *m)
{
    if (!m->done && !rt->device_lost) {
        if (rt->impl->kind == WGML_RUNTIME_DAWN) {
            WGPUFutureWaitInfo w = {.future = m->future};
            wgml_wgpu_extra.InstanceWaitAny(rt->instance, 1, &w, 0);
        }
        rt->impl->poll(rt);
    }
    return m->done;
}

wgml_status wgml_map_end(wgml_runtime *rt, wgml_map_async *m)
{
    if (rt->impl->kind == WGML_RUNTIME_DAWN) {
        rt->impl->wait_gpu(rt, m->future, &m->done); /* waits for this future alone */
    } else {
        /* wgpu-native's blocking poll waits for the whole queue: spin on non-blocking ones,
           yielding the core after the first millisecond; give up after ten minutes */
        double t0 = wgml_host_seconds();
        while (!wgml_map_poll(rt, m) && !rt->device_lost) {
            double waited = wgml_host_seconds() - t0;
            if (waited > 600) break;
            if (waited > 1e-3) sched_yield();
        }
    }
    if (rt->device_lost) return wgml_check_device(rt);
    if (!m->done) return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: the map never completed");
    if (m->status != WGPUMapAsyncStatus_Success)
        return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "reading back: map failed (%d): %s", (int)m->status, m->message);
    return WGML_OK;
}

WGPUShaderModule wgml_rt_shader_module(wgml_runtime *rt, const WGPUShaderModuleDescriptor *md, bool trusted)
{
    return rt->impl->shader_module(rt, md, trusted && rt->trusted);
}

double wgml_rt_timestamp_ns(wgml_runtime *rt) { return rt->impl->timestamp_ns(rt); }

wgml_status wgml_submit_copy(wgml_runtime *rt, WGPUBuffer src, uint64_t src_off, WGPUBuffer dst, uint64_t dst_off, uint64_t bytes)
{
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(rt->device, NULL);
    wgpuCommandEncoderCopyBufferToBuffer(enc, src, src_off, dst, dst_off, bytes);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuCommandEncoderRelease(enc);
    return wgml_submit(rt, cb);
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
    if (rt->debug_fail_submits > 0 && rt->debug_pass_submits > 0) rt->debug_pass_submits--;
    else if (rt->debug_fail_submits > 0) {
        rt->debug_fail_submits--;
        wgpuCommandBufferRelease(cb);
        return wgml_rt_fail(rt, WGML_ERROR_DEVICE, "a submit refused on purpose (wgml_debug_fail_submits): none of its work ran");
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

/* The standard features' names; each implementation names its own (impl->feature_name). */
static const char *feature_name(const wgml_runtime_impl *impl, WGPUFeatureName id)
{
    switch (id) {
    case WGPUFeatureName_TimestampQuery: return "timestamp-query";
    case WGPUFeatureName_ShaderF16: return "shader-f16";
    case WGPUFeatureName_Subgroups: return "subgroups";
    case WGPUFeatureName_Float32Filterable: return "float32-filterable";
    case WGPUFeatureName_Float32Blendable: return "float32-blendable";
    case WGPUFeatureName_IndirectFirstInstance: return "indirect-first-instance";
    case WGPUFeatureName_DepthClipControl: return "depth-clip-control";
    case WGPUFeatureName_Depth32FloatStencil8: return "depth32float-stencil8";
    case WGPUFeatureName_TextureCompressionBC: return "texture-compression-bc";
    case WGPUFeatureName_RG11B10UfloatRenderable: return "rg11b10ufloat-renderable";
    case WGPUFeatureName_BGRA8UnormStorage: return "bgra8unorm-storage";
    case WGPUFeatureName_ClipDistances: return "clip-distances";
    case WGPUFeatureName_DualSourceBlending: return "dual-source-blending";
    default: return impl->feature_name(id);
    }
}

static bool has_feature(const WGPUSupportedFeatures *f, WGPUFeatureName id)
{
    for (size_t i = 0; i < f->featureCount; i++)
        if (f->features[i] == id) return true;
    return false;
}

static void fill_info(wgml_runtime *rt, const WGPUAdapterInfo *ai, const WGPUSupportedFeatures *af)
{
    wgml_adapter_info *info = &rt->info;
    wgml_sv_copy(info->name, sizeof info->name, ai->device);
    wgml_sv_copy(info->vendor, sizeof info->vendor, ai->vendor);
    wgml_sv_copy(info->architecture, sizeof info->architecture, ai->architecture);
    wgml_sv_copy(info->driver, sizeof info->driver, ai->description);
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
    for (size_t i = 0; i < af->featureCount && info->feature_count < 64; i++) {
        const char *name = feature_name(rt->impl, af->features[i]);
        if (name) info->features[info->feature_count++] = name;
    }
    info->runtime = rt->impl->name;
    snprintf(info->runtime_library, sizeof info->runtime_library, "%s", wgml_wgpu_library_path(rt->impl->kind));
}

typedef struct device_result {
    volatile bool done;
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
    wgml_sv_copy(r->message, sizeof r->message, message);
}

/* Closes what was opened and says why in err. */
static wgml_status open_fail(wgml_runtime *rt, wgml_status st, const char *msg, char *err, size_t err_size)
{
    snprintf(err, err_size, "%s", msg);
    wgml_runtime_close(rt);
    return st;
}

/* Opens everything on one implementation. need_subgroup_matrix (the automatic choice trying
   Dawn): WGML_ERROR_UNSUPPORTED as soon as the adapter is known not to offer them. */
static wgml_status open_on(wgml_runtime *rt, const wgml_settings *settings, wgml_runtime_kind kind,
                           bool need_subgroup_matrix, char *err, size_t err_size)
{
    rt->settings = *settings;
    const wgml_settings *s = &rt->settings;
    wgml_status st = wgml_wgpu_bind(kind, kind == WGML_RUNTIME_DAWN ? s->dawn_library : s->wgpu_native_library, err, err_size);
    if (st) return st;
    rt->bound = true;
    rt->impl = kind == WGML_RUNTIME_DAWN ? &wgml_impl_dawn : &wgml_impl_wgpu_native;
    wgml_backend backend = s->backend;
    const char *want_name = s->adapter_name;
    long want_index = s->adapter_index;

    rt->gpu_timing = s->gpu_timing;
    rt->trusted = !s->bounds_checks;

    char msg[1024];
    if ((st = rt->impl->create_instance(rt, backend, msg, sizeof msg))) return open_fail(rt, st, msg, err, err_size);
    WGPUAdapter adapters[64];
    size_t count = rt->impl->adapters(rt, backend, adapters, 64);

    /* Choose: by name if asked, else discrete, integrated, CPU; among several of the best
       type, the want_index-th (modulo their number) */
    int best = -1, best_rank = 99, ranks[64], ties = 0;
    char names[512] = "";
    size_t names_len = 0;
    for (size_t i = 0; i < count; i++) {
        WGPUAdapterInfo ai = {0};
        ranks[i] = 99;
        if (wgpuAdapterGetInfo(adapters[i], &ai) != WGPUStatus_Success) continue;
        char name[256];
        wgml_sv_copy(name, sizeof name, ai.device);
        if (names_len < sizeof names - 1)
            names_len += (size_t)snprintf(names + names_len, sizeof names - names_len, "%s'%s' (%s)",
                                          names_len ? ", " : "", name, adapter_type_name(ai.adapterType));
        if (names_len >= sizeof names) names_len = sizeof names - 1;
        int rank = type_rank(ai.adapterType);
        bool name_ok = !want_name || !*want_name || wgml_contains_nocase(name, want_name);
        ranks[i] = name_ok ? rank : 99;
        if (name_ok && rank < best_rank) { best = (int)i; best_rank = rank; }
        wgpuAdapterInfoFreeMembers(ai);
    }
    for (size_t i = 0; i < count; i++) ties += ranks[i] == best_rank;
    for (size_t i = 0, seen = 0; best >= 0 && ties && i < count; i++)
        if (ranks[i] == best_rank && seen++ == (size_t)(want_index % ties)) best = (int)i;
    for (size_t i = 0; i < count; i++)
        if ((int)i != best) wgpuAdapterRelease(adapters[i]);
    if (best >= 0) rt->adapter = adapters[best];
    if (!rt->adapter) {
        if (count && want_name && *want_name)
            snprintf(msg, sizeof msg, "no WebGPU adapter named like '%s' (%s, backend %s); adapters found: %s",
                     want_name, rt->impl->name, backend_label(backend), names);
        else
            snprintf(msg, sizeof msg,
                     "no WebGPU adapter found (%s, backend %s). On a machine without a GPU install "
                     "Mesa's software Vulkan driver: apt-get install mesa-vulkan-drivers libvulkan1%s",
                     rt->impl->name, backend_label(backend),
                     rt->impl->kind == WGML_RUNTIME_DAWN ? " (Dawn needs Mesa 25: VK_DRIVER_FILES="
                                                          "third_party/dawn/mesa/lvp_icd.json)" : "");
        return open_fail(rt, WGML_ERROR_NO_ADAPTER, msg, err, err_size);
    }
    rt->info.has_subgroup_matrix = 0;
    if (need_subgroup_matrix && (!rt->impl->subgroup_matrix_feature ||
                                 !wgpuAdapterHasFeature(rt->adapter, rt->impl->subgroup_matrix_feature)))
        return open_fail(rt, WGML_ERROR_UNSUPPORTED, "the adapter offers no subgroup matrices", err, err_size);

    /* The device gets the adapter's real limits and the features worth having. */
    WGPULimits limits = {0};
    if (wgpuAdapterGetLimits(rt->adapter, &limits) != WGPUStatus_Success)
        return open_fail(rt, WGML_ERROR_DEVICE, "wgpuAdapterGetLimits failed", err, err_size);
    limits.nextInChain = NULL;
    WGPUSupportedFeatures af = {0};
    wgpuAdapterGetFeatures(rt->adapter, &af);
    WGPUFeatureName req[16];
    size_t nreq = 0;
    for (size_t i = 0; i < rt->impl->wanted_count && nreq < 16; i++)
        if (has_feature(&af, rt->impl->wanted_features[i])) req[nreq++] = rt->impl->wanted_features[i];

    wgml_toggles toggles;
    WGPUDeviceDescriptor ddesc = {
        .nextInChain = rt->impl->device_chain(rt, &toggles),
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
        .mode = rt->impl->callback_mode, .callback = on_device, .userdata1 = &dr};
    rt->impl->wait_host(rt, wgpuAdapterRequestDevice(rt->adapter, &ddesc, dcb), &dr.done);
    if (!dr.done || dr.status != WGPURequestDeviceStatus_Success || !dr.device) {
        wgpuSupportedFeaturesFreeMembers(af);
        snprintf(msg, sizeof msg, "requesting a device (%s) failed: %s", rt->impl->name, dr.message);
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
    /* how long a wait spins before it blocks (see wait_gpu): up to 10 ms on a GPU; not on a
       CPU adapter, where the spinning thread takes a core from the work it waits for
       (lavapipe on 2 cores, `WGML_BENCH_ONLY=cached_roundtrip wgml bench matmul --quick`:
       352-423 us blocking at once, 497-543 us spinning 1 ms) */
    bool cpu = ai.adapterType == WGPUAdapterType_CPU;
    rt->poll_spin_seconds = s->poll_spin_us >= 0 ? s->poll_spin_us * 1e-6 : cpu ? 0.0 : 10e-3;
    rt->timeline.on = s->timeline;
    /* llvmpipe's loop limiter (see wgml_context.loop_limit); the margin is for the fixed loops
       (reduction trees) that the kernels' own counts leave out */
    rt->loop_limit = strstr(rt->info.name, "llvmpipe") ? 65535 - 512 : UINT32_MAX;
    if (s->loop_limit) rt->loop_limit = s->loop_limit;
    wgpuAdapterInfoFreeMembers(ai);
    wgpuSupportedFeaturesFreeMembers(af);
    for (size_t i = 0; i < nreq; i++) {
        if (req[i] == WGPUFeatureName_TimestampQuery) rt->info.has_timestamp_query = 1;
        if (req[i] == WGPUFeatureName_ShaderF16) rt->info.has_shader_f16 = 1;
        const char *name = feature_name(rt->impl, req[i]);
        if (req[i] == WGPUFeatureName_Subgroups || (name && !strcmp(name, "native-subgroup")))
            rt->info.has_subgroups = 1;
        if (name && !strcmp(name, "immediates")) rt->info.has_immediates = 1;
        if (name && !strcmp(name, "pipeline-cache")) rt->info.has_pipeline_cache = 1;
        if (name && !strcmp(name, "chromium-experimental-subgroup-matrix")) rt->info.has_subgroup_matrix = 1;
    }
    for (int i = 0; i < rt->info.feature_count; i++)
        if (strstr(rt->info.features[i], "cooperative-matrix")) rt->info.has_cooperative_matrix = 1;
    rt->impl->describe(rt);
    /* subgroup matrices are usable with shader-f16 and subgroups, and a configuration known */
    if (!rt->info.has_shader_f16 || !rt->info.has_subgroups || !rt->info.subgroup_matrix_count)
        rt->info.has_subgroup_matrix = 0;
    return WGML_OK;
}

wgml_status wgml_runtime_open(wgml_runtime *rt, const wgml_context_desc *desc, char *err, size_t err_size)
{
    wgml_settings settings; /* kept apart from rt, which a second try below zeroes */
    wgml_status st = wgml_settings_resolve(desc, &settings, err, err_size);
    if (st) return st;
    wgml_runtime_kind kind = settings.runtime;
    if (kind != WGML_RUNTIME_AUTO) return open_on(rt, &settings, kind, false, err, err_size);
    /* Automatic: the implementation this process already runs; else Dawn where it loads and
       the adapter has subgroup matrices (the matrix units are Dawn's to reach); else
       wgpu-native, whose dispatches and waits are the ones measured on every adapter. Asked
       first, wgpu-native names the adapters with matrix units (its experimental
       cooperative-matrix feature, which it cannot enable): only those try Dawn, so other
       machines never load it (nor read its warnings on stderr). */
    wgml_runtime_kind bound = wgml_wgpu_bound();
    if (bound != WGML_RUNTIME_AUTO) return open_on(rt, &settings, bound, false, err, err_size);
    st = open_on(rt, &settings, WGML_RUNTIME_WGPU_NATIVE, false, err, err_size);
    if (st || !rt->info.has_cooperative_matrix || !wgml_wgpu_available(WGML_RUNTIME_DAWN, settings.dawn_library)) return st;
    wgml_runtime_close(rt);
    memset(rt, 0, sizeof *rt);
    if (open_on(rt, &settings, WGML_RUNTIME_DAWN, true, err, err_size) == WGML_OK) return WGML_OK;
    memset(rt, 0, sizeof *rt);
    if (err_size) err[0] = 0; /* Dawn's refusal is no failure of this context */
    return open_on(rt, &settings, WGML_RUNTIME_WGPU_NATIVE, false, err, err_size);
}

void wgml_runtime_destroy_device(wgml_runtime *rt)
{
    if (!rt->device) return;
    wgpuDeviceDestroy(rt->device);
    rt->impl->poll(rt);
    rt->device_lost = true; /* destroy is a loss, whether or not the callback has run yet */
    if (!rt->lost_message[0])
        snprintf(rt->lost_message, sizeof rt->lost_message, "the device was destroyed");
}

void wgml_runtime_close(wgml_runtime *rt)
{
    wgml_timing_destroy(rt);
    if (rt->queue) {
        if (rt->device && !rt->device_lost) wgml_wait_idle(rt);
        wgpuQueueRelease(rt->queue);
    }
    if (rt->device) wgpuDeviceRelease(rt->device);
    if (rt->adapter) wgpuAdapterRelease(rt->adapter);
    if (rt->instance) wgpuInstanceRelease(rt->instance);
    rt->queue = NULL;
    rt->device = NULL;
    rt->adapter = NULL;
    rt->instance = NULL;
    if (rt->bound) wgml_wgpu_unbind();
    rt->bound = false;
}
