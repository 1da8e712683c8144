/*
 * The seam between wgml's runtime and one WebGPU implementation: everything wgpu-native and
 * Dawn do differently, as one table each (wgpu_native.c, dawn.c). device.c drives the
 * bring-up, the waits and the errors through it and names neither. Private to runtime/.
 */
#ifndef WGML_RUNTIME_IMPL_H
#define WGML_RUNTIME_IMPL_H

#include "runtime/loader.h"
#include "runtime/runtime.h"

/* Dawn's toggles descriptor (dawn/webgpu.h's WGPUDawnTogglesDescriptor), chained on the
   instance, adapter and device descriptors; the caller of device_chain keeps it alive. */
typedef struct wgml_toggles {
    WGPUChainedStruct chain;
    size_t enabled_count;
    const char *const *enabled;
    size_t disabled_count;
    const char *const *disabled;
    const char *names[16]; /* storage for `enabled` */
    char extra[256];       /* for the names of WGML_DAWN_TOGGLES */
} wgml_toggles;

typedef struct wgml_runtime_impl {
    wgml_runtime_kind kind;
    const char *name; /* "wgpu-native", "dawn" */
    /* rt->instance for the backend; a status and err on failure */
    wgml_status (*create_instance)(wgml_runtime *rt, wgml_backend backend, char *err, size_t err_size);
    /* The adapters offered for the backend, at most max of them into out (each to be
       released); their count. */
    size_t (*adapters)(wgml_runtime *rt, wgml_backend backend, WGPUAdapter *out, size_t max);
    /* The subgroup-matrix feature's value, 0 where the implementation has none. */
    WGPUFeatureName subgroup_matrix_feature;
    /* The features wgml requests where the adapter offers them. */
    const WGPUFeatureName *wanted_features;
    size_t wanted_count;
    /* A feature's name, NULL for one wgml does not know. */
    const char *(*feature_name)(WGPUFeatureName id);
    /* The device descriptor's chain (NULL for none), built in *storage. */
    WGPUChainedStruct *(*device_chain)(wgml_runtime *rt, wgml_toggles *storage);
    /* The mode of the callbacks wait_host and wait_gpu wait for. */
    WGPUCallbackMode callback_mode;
    /* Waits for a callback (made with callback_mode, returning f) to set *done: host-side
       events (error scopes, a device request) and queue work. */
    void (*wait_host)(wgml_runtime *rt, WGPUFuture f, const volatile bool *done);
    void (*wait_gpu)(wgml_runtime *rt, WGPUFuture f, const volatile bool *done);
    /* Collects finished work and callbacks without blocking. */
    void (*poll)(wgml_runtime *rt);
    /* A shader module, without runtime bounds checks where trusted (and where the
       implementation can choose per module; Dawn chooses per device, see device_chain). */
    WGPUShaderModule (*shader_module)(wgml_runtime *rt, const WGPUShaderModuleDescriptor *md, bool trusted);
    /* Nanoseconds per timestamp-query tick. */
    double (*timestamp_ns)(wgml_runtime *rt);
    /* rt->info's runtime fields: version and, where offered, subgroup-matrix configurations;
       called once the device is open. */
    void (*describe)(wgml_runtime *rt);
    /* A buffer that is `size` bytes of the caller's host memory at `pointer` (both multiples
       of rt->host_mapped_alignment), which must stay until disposed(userdata) is called (the
       GPU done with it, after the buffer's release); NULL where the implementation has none. */
    WGPUBuffer (*host_buffer)(wgml_runtime *rt, void *pointer, uint64_t size, WGPUBufferUsage usage, const char *label,
                              void (*disposed)(void *), void *userdata);
} wgml_runtime_impl;

extern const wgml_runtime_impl wgml_impl_wgpu_native;
extern const wgml_runtime_impl wgml_impl_dawn;

/* shared by the implementation files */
void wgml_sv_copy(char *dst, size_t n, WGPUStringView sv);

#endif
