/*
 * Dawn behind the seam (impl.h). What differs from wgpu-native:
 *  - toggles (a Dawn-only struct chained on the instance, adapter and device descriptors):
 *    allow_unsafe_apis (experimental features: subgroup matrices), vulkan_enable_f16_on_nvidia
 *    (without it shader-f16 is refused on NVIDIA), use_vulkan_memory_model; on the device
 *    disable_robustness for trusted kernels (Dawn's equivalent of wgpu-native's trusted
 *    modules, chosen per device, not per module), timestamp_quantization off;
 *  - adapters from its exported C++ list where present (Dawn's C API enumerates none; else
 *    one, from wgpuInstanceRequestAdapter);
 *  - waits through wgpuInstanceWaitAny with a timeout (instance feature TimedWaitAny);
 *  - timestamps in nanoseconds;
 *  - chromium-experimental-subgroup-matrix and its configurations;
 *  - buffers over the caller's host memory (host-mapped-pointer), for data parallelism's
 *    shared-memory segment.
 * The Dawn-only values below are Dawn v20261009's (the pinned wheels; scripts/check_dawn_abi.py
 * checks them against the generated declarations). They change between Dawn revisions: a
 * feature missing at run time is simply not offered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/impl.h"

#define DAWN_STYPE_TOGGLES ((WGPUSType)0x0005000A)
#define DAWN_STYPE_SUBGROUP_MATRIX_CONFIGS ((WGPUSType)0x0005003B)
#define DAWN_FEATURE_SUBGROUP_MATRIX ((WGPUFeatureName)0x00050034)
#define DAWN_FEATURE_TIMESTAMP_INSIDE_PASSES ((WGPUFeatureName)0x00050003)
#define DAWN_FEATURE_HOST_MAPPED_POINTER ((WGPUFeatureName)0x0005000F)
#define DAWN_STYPE_BUFFER_HOST_MAPPED_POINTER ((WGPUSType)0x00050012)
#define DAWN_STYPE_HOST_MAPPED_POINTER_LIMITS ((WGPUSType)0x00050043)

/* WGPUBufferHostMappedPointer: chained on a buffer's descriptor, the memory the buffer is */
typedef struct dawn_buffer_host_mapped_pointer {
    WGPUChainedStruct chain;
    void *pointer;
    void (*dispose)(void *userdata); /* once the GPU no longer uses the memory */
    void *userdata;
} dawn_buffer_host_mapped_pointer;

/* WGPUDawnHostMappedPointerLimits: chained on the adapter's limits */
typedef struct dawn_host_mapped_pointer_limits {
    WGPUChainedStruct chain;
    uint32_t alignment; /* of a host-mapped buffer's pointer and size */
} dawn_host_mapped_pointer_limits;

/* WGPUSubgroupMatrixConfig as the pinned library writes it: five 32-bit words (the cffi
   declarations' seven-field form did not match it on the H100, shared/DESIGN.md) */
typedef struct dawn_subgroup_matrix_config {
    uint32_t component, result, m, n, k;
} dawn_subgroup_matrix_config;

typedef struct dawn_subgroup_matrix_configs {
    WGPUChainedStruct chain;
    size_t count;
    const dawn_subgroup_matrix_config *configs;
} dawn_subgroup_matrix_configs;

static const char *const instance_toggles[] = {"allow_unsafe_apis", "vulkan_enable_f16_on_nvidia",
                                               "use_vulkan_memory_model"};

static void instance_chain(wgml_toggles *t)
{
    memset(t, 0, sizeof *t);
    t->chain.sType = DAWN_STYPE_TOGGLES;
    t->enabled_count = sizeof instance_toggles / sizeof instance_toggles[0];
    t->enabled = instance_toggles;
}

static wgml_status create_instance(wgml_runtime *rt, wgml_backend backend, char *err, size_t err_size)
{
    wgml_toggles toggles;
    instance_chain(&toggles);
    WGPUInstanceFeatureName timed = WGPUInstanceFeatureName_TimedWaitAny;
    WGPUInstanceDescriptor idesc = {.nextInChain = &toggles.chain, .requiredFeatureCount = 1,
                                    .requiredFeatures = &timed};
    rt->instance = wgpuCreateInstance(&idesc);
    if (!rt->instance) {
        snprintf(err, err_size, "Dawn's wgpuCreateInstance failed");
        return WGML_ERROR_NO_ADAPTER;
    }
    return WGML_OK;
}

/* The callbacks are WaitAnyOnly: wgpuInstanceWaitAny runs f's when it completes. */
static void wait_host(wgml_runtime *rt, WGPUFuture f, const volatile bool *done)
{
    /* ten minutes in steps of a second: a lost device ends the wait sooner */
    for (int i = 0; i < 600 && !*done && !rt->device_lost; i++) {
        WGPUFutureWaitInfo w = {.future = f};
        WGPUWaitStatus s = wgml_wgpu_extra.InstanceWaitAny(rt->instance, 1, &w, 1000000000ull);
        if (s == WGPUWaitStatus_Error || w.completed) break;
    }
}

/* Spins on wgpuInstanceWaitAny without a timeout for rt->poll_spin_seconds first (a blocking
   wait wakes late, as wgpu-native's does), then blocks in it. */
static void wait_gpu(wgml_runtime *rt, WGPUFuture f, const volatile bool *done)
{
    double spin = rt->poll_spin_seconds, t0 = wgml_host_seconds();
    while (!*done && !rt->device_lost && spin > 0 && wgml_host_seconds() - t0 < spin) {
        WGPUFutureWaitInfo w = {.future = f};
        wgml_wgpu_extra.InstanceWaitAny(rt->instance, 1, &w, 0);
        wgpuInstanceProcessEvents(rt->instance); /* the device's own callbacks */
        rt->timeline.spin_polls++;
        if (w.completed) break;
    }
    if (!*done) rt->timeline.blocking_polls++;
    wait_host(rt, f, done);
}

typedef struct adapter_result {
    volatile bool done;
    WGPUAdapter adapter;
} adapter_result;

static void on_adapter(WGPURequestAdapterStatus status, WGPUAdapter adapter, WGPUStringView message,
                       void *userdata1, void *userdata2)
{
    (void)message, (void)userdata2;
    adapter_result *r = userdata1;
    r->adapter = status == WGPURequestAdapterStatus_Success ? adapter : NULL;
    r->done = true;
}

static WGPUBackendType backend_type(wgml_backend b)
{
    switch (b) {
    case WGML_BACKEND_METAL: return WGPUBackendType_Metal;
    case WGML_BACKEND_DX12: return WGPUBackendType_D3D12;
    case WGML_BACKEND_GL: return WGPUBackendType_OpenGLES;
    case WGML_BACKEND_ALL: return WGPUBackendType_Undefined;
    default: return WGPUBackendType_Vulkan;
    }
}

/* Dawn's C API hands out one adapter per request: a GPU by preference, else (asked again with
   the fallback flag) a CPU one such as lavapipe. Where the library exports its C++ list of
   adapters (loader.h), all of them are offered instead, so that ranks on a machine with
   several GPUs each take their own (device.c picks the adapter_index-th of the best type). */
static size_t adapters(wgml_runtime *rt, wgml_backend backend, WGPUAdapter *out, size_t max)
{
    if (!max) return 0;
    for (int fallback = 0; fallback < 2; fallback++) {
        wgml_toggles toggles;
        instance_chain(&toggles);
        WGPURequestAdapterOptions opt = {.nextInChain = &toggles.chain,
                                         .featureLevel = WGPUFeatureLevel_Core,
                                         .powerPreference = WGPUPowerPreference_HighPerformance,
                                         .forceFallbackAdapter = fallback,
                                         .backendType = backend_type(backend)};
        if (wgml_wgpu_extra.DawnEnumerateAdapters) {
            struct { WGPUAdapter *begin, *end, *cap; } list = {0}; /* std::vector's three pointers */
            wgml_wgpu_extra.DawnEnumerateAdapters(&list, rt->instance, &opt);
            size_t n = 0;
            for (WGPUAdapter *a = list.begin; a && a < list.end; a++) {
                if (n < max) out[n++] = *a; /* the list's reference passes to the caller */
                else wgpuAdapterRelease(*a);
            }
            if (list.begin) wgml_wgpu_extra.CxxDelete(list.begin);
            if (n) return n;
            continue;
        }
        adapter_result r = {0};
        WGPURequestAdapterCallbackInfo cb = {.mode = WGPUCallbackMode_WaitAnyOnly,
                                             .callback = on_adapter, .userdata1 = &r};
        wait_host(rt, wgpuInstanceRequestAdapter(rt->instance, &opt, cb), &r.done);
        if (r.adapter) {
            out[0] = r.adapter;
            return 1;
        }
    }
    return 0;
}

static const WGPUFeatureName wanted[] = {
    WGPUFeatureName_TimestampQuery,
    WGPUFeatureName_ShaderF16,
    WGPUFeatureName_Subgroups,
    DAWN_FEATURE_SUBGROUP_MATRIX,
    DAWN_FEATURE_HOST_MAPPED_POINTER,
};

static const char *feature_name(WGPUFeatureName id)
{
    if (id == DAWN_FEATURE_SUBGROUP_MATRIX) return "chromium-experimental-subgroup-matrix";
    if (id == DAWN_FEATURE_TIMESTAMP_INSIDE_PASSES) return "chromium-experimental-timestamp-query-inside-passes";
    if (id == DAWN_FEATURE_HOST_MAPPED_POINTER) return "host-mapped-pointer";
    return NULL;
}

/* WGML_DAWN_TOGGLES: more device toggles, comma-separated (experiments: skip_validation, ...) */
static WGPUChainedStruct *device_chain(wgml_runtime *rt, wgml_toggles *t)
{
    static const char *const off[] = {"timestamp_quantization"};
    t->chain = (WGPUChainedStruct){.sType = DAWN_STYPE_TOGGLES};
    size_t n = 0;
    t->names[n++] = "allow_unsafe_apis";
    if (rt->trusted) t->names[n++] = "disable_robustness";
    const char *e = rt->settings.dawn_toggles;
    if (*e) {
        snprintf(t->extra, sizeof t->extra, "%s", e);
        for (char *save = NULL, *tok = strtok_r(t->extra, ",", &save); tok && n < 16; tok = strtok_r(NULL, ",", &save))
            if (*tok) t->names[n++] = tok;
    }
    t->enabled_count = n;
    t->enabled = t->names;
    t->disabled_count = 1;
    t->disabled = off;
    return &t->chain;
}

static void poll(wgml_runtime *rt) { wgpuInstanceProcessEvents(rt->instance); }

/* naga (wgpu-native) takes subgroup built-ins without WGSL's `enable subgroups;`, which Tint
   requires: a kernel that uses them and lacks it gets it here, as its first line (Dawn's
   messages then count one line more). */
static WGPUShaderModule shader_module(wgml_runtime *rt, const WGPUShaderModuleDescriptor *md, bool trusted)
{
    (void)trusted; /* the device's disable_robustness toggle decides */
    const WGPUChainedStruct *c = md->nextInChain;
    if (!c || c->sType != WGPUSType_ShaderSourceWGSL) return wgpuDeviceCreateShaderModule(rt->device, md);
    const WGPUShaderSourceWGSL *src = (const WGPUShaderSourceWGSL *)c;
    size_t n = src->code.length == WGPU_STRLEN ? strlen(src->code.data) : src->code.length;
    static const char directive[] = "enable subgroups;\n";
    bool uses = false, has = false;
    for (const char *p = src->code.data, *end = p + n; p + 8 <= end && !has; p++)
        if (!memcmp(p, "subgroup", 8)) {
            uses = true;
            has = p >= src->code.data + 7 && !memcmp(p - 7, "enable ", 7);
        }
    if (!uses || has || !rt->info.has_subgroups) return wgpuDeviceCreateShaderModule(rt->device, md);
    char *code = malloc(sizeof directive - 1 + n);
    if (!code) return NULL;
    memcpy(code, directive, sizeof directive - 1);
    memcpy(code + sizeof directive - 1, src->code.data, n);
    WGPUShaderSourceWGSL with = *src;
    with.code = (WGPUStringView){.data = code, .length = sizeof directive - 1 + n};
    WGPUShaderModuleDescriptor d = *md;
    d.nextInChain = &with.chain;
    WGPUShaderModule m = wgpuDeviceCreateShaderModule(rt->device, &d);
    free(code);
    return m;
}

static double timestamp_ns(wgml_runtime *rt)
{
    (void)rt;
    return 1.0;
}

static const char *component_name(uint32_t c)
{
    static const char *names[] = {NULL, "f32", "f16", "u32", "i32", "u8", "i8"};
    return c >= 1 && c <= 6 ? names[c] : NULL;
}

static WGPUBuffer host_buffer(wgml_runtime *rt, void *pointer, uint64_t size, WGPUBufferUsage usage, const char *label,
                              void (*disposed)(void *), void *userdata)
{
    dawn_buffer_host_mapped_pointer hm = {.chain = {.sType = DAWN_STYPE_BUFFER_HOST_MAPPED_POINTER},
                                          .pointer = pointer, .dispose = disposed, .userdata = userdata};
    WGPUBufferDescriptor d = {.nextInChain = &hm.chain, .label = wgml_sv(label), .size = size, .usage = usage};
    return wgpuDeviceCreateBuffer(rt->device, &d);
}

/* The alignment of host-mapped buffers, where the device took the feature (0: none) */
static uint32_t host_mapped_alignment(wgml_runtime *rt)
{
    if (!wgpuDeviceHasFeature(rt->device, DAWN_FEATURE_HOST_MAPPED_POINTER)) return 0;
    dawn_host_mapped_pointer_limits hl = {.chain = {.sType = DAWN_STYPE_HOST_MAPPED_POINTER_LIMITS}};
    WGPULimits l = {.nextInChain = &hl.chain};
    if (wgpuAdapterGetLimits(rt->adapter, &l) != WGPUStatus_Success || !hl.alignment) return 0;
    return hl.alignment;
}

static void describe(wgml_runtime *rt)
{
    wgml_adapter_info *info = &rt->info;
    rt->host_mapped_alignment = host_mapped_alignment(rt);
    /* Dawn's C API has no version call: deps_dawn.sh writes one beside the library */
    snprintf(info->runtime_version, sizeof info->runtime_version, "unknown");
    char path[600];
    snprintf(path, sizeof path, "%s.version", wgml_wgpu_library_path(WGML_RUNTIME_DAWN));
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(info->runtime_version, sizeof info->runtime_version, f))
            info->runtime_version[strcspn(info->runtime_version, "\r\n")] = 0;
        fclose(f);
    }
    if (!wgpuAdapterHasFeature(rt->adapter, DAWN_FEATURE_SUBGROUP_MATRIX)) return;
    dawn_subgroup_matrix_configs sm = {.chain = {.sType = DAWN_STYPE_SUBGROUP_MATRIX_CONFIGS}};
    WGPUAdapterInfo ai = {.nextInChain = &sm.chain};
    if (wgpuAdapterGetInfo(rt->adapter, &ai) != WGPUStatus_Success) return;
    for (size_t i = 0; i < sm.count && info->subgroup_matrix_count < WGML_MAX_SUBGROUP_MATRIX_CONFIGS; i++) {
        const dawn_subgroup_matrix_config *c = &sm.configs[i];
        const char *a = component_name(c->component), *r = component_name(c->result);
        /* a layout other than the one above shows as nonsense values: keep none of them */
        if (!a || !r || !c->m || !c->n || !c->k || c->m > 256 || c->n > 256 || c->k > 256) {
            info->subgroup_matrix_count = 0;
            break;
        }
        wgml_subgroup_matrix_config *o = &info->subgroup_matrix[info->subgroup_matrix_count++];
        o->component = a;
        o->result = r;
        o->m = c->m;
        o->n = c->n;
        o->k = c->k;
    }
    if (wgml_wgpu_extra.AdapterPropertiesSubgroupMatrixConfigsFreeMembers) {
        void (*free_members)(dawn_subgroup_matrix_configs);
        memcpy(&free_members, &wgml_wgpu_extra.AdapterPropertiesSubgroupMatrixConfigsFreeMembers, sizeof free_members);
        free_members(sm);
    }
    wgpuAdapterInfoFreeMembers(ai);
}

const wgml_runtime_impl wgml_impl_dawn = {
    .kind = WGML_RUNTIME_DAWN,
    .name = "dawn",
    .create_instance = create_instance,
    .adapters = adapters,
    .subgroup_matrix_feature = DAWN_FEATURE_SUBGROUP_MATRIX,
    .callback_mode = WGPUCallbackMode_WaitAnyOnly, /* run by wgpuInstanceWaitAny, on the waiting thread */
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
    .host_buffer = host_buffer,
};
