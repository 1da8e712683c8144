/*
 * The WebGPU library, loaded at run time: wgpu-native or Dawn, opened with dlopen, its entry
 * points in one table. libwgml links neither; the standard webgpu.h functions the code above
 * calls (wgpuQueueSubmit, ...) are defined here, hidden inside libwgml, as calls through the
 * table. Both libraries take the same structs and enum values for everything in
 * WGML_WGPU_STANDARD (scripts/check_dawn_abi.py checks it against Dawn's declarations); what
 * differs between them is called only from the implementation files (wgpu_native.c, dawn.c).
 *
 * One table serves the process, so one implementation is in use at a time: the first context
 * binds it, later ones share it, and another may be bound once every context is freed.
 */
#ifndef WGML_RUNTIME_LOADER_H
#define WGML_RUNTIME_LOADER_H

#include <stdbool.h>
#include <stddef.h>

#include <webgpu/webgpu.h>
#include <webgpu/wgpu.h>

#include "wgml.h"

/* X(return type, name without "wgpu", parameter list, argument list): the standard entry
   points, required of both libraries. */
#define WGML_WGPU_STANDARD(X) \
    X(WGPUInstance, CreateInstance, (WGPUInstanceDescriptor const *d), (d)) \
    X(void, InstanceRelease, (WGPUInstance i), (i)) \
    X(void, InstanceProcessEvents, (WGPUInstance i), (i)) \
    X(WGPUFuture, InstanceRequestAdapter, (WGPUInstance i, WGPURequestAdapterOptions const *o, WGPURequestAdapterCallbackInfo c), (i, o, c)) \
    X(WGPUStatus, AdapterGetInfo, (WGPUAdapter a, WGPUAdapterInfo *info), (a, info)) \
    X(void, AdapterInfoFreeMembers, (WGPUAdapterInfo info), (info)) \
    X(WGPUStatus, AdapterGetLimits, (WGPUAdapter a, WGPULimits *l), (a, l)) \
    X(void, AdapterGetFeatures, (WGPUAdapter a, WGPUSupportedFeatures *f), (a, f)) \
    X(WGPUBool, AdapterHasFeature, (WGPUAdapter a, WGPUFeatureName f), (a, f)) \
    X(void, SupportedFeaturesFreeMembers, (WGPUSupportedFeatures f), (f)) \
    X(WGPUFuture, AdapterRequestDevice, (WGPUAdapter a, WGPUDeviceDescriptor const *d, WGPURequestDeviceCallbackInfo c), (a, d, c)) \
    X(void, AdapterRelease, (WGPUAdapter a), (a)) \
    X(WGPUQueue, DeviceGetQueue, (WGPUDevice d), (d)) \
    X(WGPUStatus, DeviceGetLimits, (WGPUDevice d, WGPULimits *l), (d, l)) \
    X(WGPUBool, DeviceHasFeature, (WGPUDevice d, WGPUFeatureName f), (d, f)) \
    X(void, DevicePushErrorScope, (WGPUDevice d, WGPUErrorFilter f), (d, f)) \
    X(WGPUFuture, DevicePopErrorScope, (WGPUDevice d, WGPUPopErrorScopeCallbackInfo c), (d, c)) \
    X(void, DeviceDestroy, (WGPUDevice d), (d)) \
    X(void, DeviceRelease, (WGPUDevice d), (d)) \
    X(WGPUBuffer, DeviceCreateBuffer, (WGPUDevice d, WGPUBufferDescriptor const *b), (d, b)) \
    X(WGPUShaderModule, DeviceCreateShaderModule, (WGPUDevice d, WGPUShaderModuleDescriptor const *m), (d, m)) \
    X(WGPUComputePipeline, DeviceCreateComputePipeline, (WGPUDevice d, WGPUComputePipelineDescriptor const *p), (d, p)) \
    X(WGPUBindGroup, DeviceCreateBindGroup, (WGPUDevice d, WGPUBindGroupDescriptor const *b), (d, b)) \
    X(WGPUBindGroupLayout, DeviceCreateBindGroupLayout, (WGPUDevice d, WGPUBindGroupLayoutDescriptor const *b), (d, b)) \
    X(WGPUPipelineLayout, DeviceCreatePipelineLayout, (WGPUDevice d, WGPUPipelineLayoutDescriptor const *p), (d, p)) \
    X(WGPUCommandEncoder, DeviceCreateCommandEncoder, (WGPUDevice d, WGPUCommandEncoderDescriptor const *e), (d, e)) \
    X(WGPUQuerySet, DeviceCreateQuerySet, (WGPUDevice d, WGPUQuerySetDescriptor const *q), (d, q)) \
    X(void, QueueSubmit, (WGPUQueue q, size_t n, WGPUCommandBuffer const *c), (q, n, c)) \
    X(void, QueueWriteBuffer, (WGPUQueue q, WGPUBuffer b, uint64_t o, void const *data, size_t n), (q, b, o, data, n)) \
    X(WGPUFuture, QueueOnSubmittedWorkDone, (WGPUQueue q, WGPUQueueWorkDoneCallbackInfo c), (q, c)) \
    X(void, QueueRelease, (WGPUQueue q), (q)) \
    X(WGPUFuture, BufferMapAsync, (WGPUBuffer b, WGPUMapMode m, size_t o, size_t n, WGPUBufferMapCallbackInfo c), (b, m, o, n, c)) \
    X(void const *, BufferGetConstMappedRange, (WGPUBuffer b, size_t o, size_t n), (b, o, n)) \
    X(void *, BufferGetMappedRange, (WGPUBuffer b, size_t o, size_t n), (b, o, n)) \
    X(void, BufferUnmap, (WGPUBuffer b), (b)) \
    X(uint64_t, BufferGetSize, (WGPUBuffer b), (b)) \
    X(void, BufferDestroy, (WGPUBuffer b), (b)) \
    X(void, BufferAddRef, (WGPUBuffer b), (b)) \
    X(void, BufferRelease, (WGPUBuffer b), (b)) \
    X(void, ShaderModuleRelease, (WGPUShaderModule m), (m)) \
    X(WGPUBindGroupLayout, ComputePipelineGetBindGroupLayout, (WGPUComputePipeline p, uint32_t i), (p, i)) \
    X(void, ComputePipelineRelease, (WGPUComputePipeline p), (p)) \
    X(void, BindGroupRelease, (WGPUBindGroup g), (g)) \
    X(void, BindGroupLayoutRelease, (WGPUBindGroupLayout l), (l)) \
    X(void, PipelineLayoutRelease, (WGPUPipelineLayout l), (l)) \
    X(void, QuerySetRelease, (WGPUQuerySet q), (q)) \
    X(WGPUComputePassEncoder, CommandEncoderBeginComputePass, (WGPUCommandEncoder e, WGPUComputePassDescriptor const *d), (e, d)) \
    X(void, CommandEncoderCopyBufferToBuffer, (WGPUCommandEncoder e, WGPUBuffer s, uint64_t so, WGPUBuffer d, uint64_t dof, uint64_t n), (e, s, so, d, dof, n)) \
    X(void, CommandEncoderClearBuffer, (WGPUCommandEncoder e, WGPUBuffer b, uint64_t o, uint64_t n), (e, b, o, n)) \
    X(void, CommandEncoderResolveQuerySet, (WGPUCommandEncoder e, WGPUQuerySet q, uint32_t f, uint32_t n, WGPUBuffer d, uint64_t o), (e, q, f, n, d, o)) \
    X(WGPUCommandBuffer, CommandEncoderFinish, (WGPUCommandEncoder e, WGPUCommandBufferDescriptor const *d), (e, d)) \
    X(void, CommandEncoderRelease, (WGPUCommandEncoder e), (e)) \
    X(void, CommandBufferRelease, (WGPUCommandBuffer c), (c)) \
    X(void, ComputePassEncoderSetPipeline, (WGPUComputePassEncoder p, WGPUComputePipeline q), (p, q)) \
    X(void, ComputePassEncoderSetBindGroup, (WGPUComputePassEncoder p, uint32_t i, WGPUBindGroup g, size_t n, uint32_t const *o), (p, i, g, n, o)) \
    X(void, ComputePassEncoderDispatchWorkgroups, (WGPUComputePassEncoder p, uint32_t x, uint32_t y, uint32_t z), (p, x, y, z)) \
    X(void, ComputePassEncoderDispatchWorkgroupsIndirect, (WGPUComputePassEncoder p, WGPUBuffer b, uint64_t o), (p, b, o)) \
    X(void, ComputePassEncoderEnd, (WGPUComputePassEncoder p), (p)) \
    X(void, ComputePassEncoderRelease, (WGPUComputePassEncoder p), (p))

/* Entry points one implementation has and the other lacks (NULL where absent). Only
   wgpu_native.c and dawn.c call them. */
typedef struct wgml_wgpu_extras {
    /* wgpu-native (wgpu.h) */
    size_t (*InstanceEnumerateAdapters)(WGPUInstance, WGPUInstanceEnumerateAdapterOptions const *, WGPUAdapter *);
    WGPUBool (*DevicePoll)(WGPUDevice, WGPUBool, WGPUSubmissionIndex const *);
    WGPUShaderModule (*DeviceCreateShaderModuleTrusted)(WGPUDevice, WGPUShaderModuleDescriptor const *, WGPUShaderRuntimeChecks);
    float (*QueueGetTimestampPeriod)(WGPUQueue);
    uint32_t (*GetVersion)(void);
    /* Dawn (the standard wgpuInstanceWaitAny, which wgpu-native 29 leaves unimplemented) */
    WGPUWaitStatus (*InstanceWaitAny)(WGPUInstance, size_t, WGPUFutureWaitInfo *, uint64_t);
    void (*AdapterPropertiesSubgroupMatrixConfigsFreeMembers)(void); /* cast to its type in dawn.c */
    /* Dawn's C API hands out one adapter per request; its C++ InstanceBase::EnumerateAdapters
       (exported) lists them all, so that a process can take the N-th GPU (one rank each).
       Called as the Itanium ABI passes it: the returned std::vector<Ref<AdapterBase>> (three
       pointers) through `out`, then `this` (a WGPUInstance is an InstanceBase *), then the
       options (Dawn's internal RequestAdapterOptions has WGPURequestAdapterOptions' layout).
       CxxDelete (operator delete of Dawn's C++ library) frees the vector's storage. */
    void (*DawnEnumerateAdapters)(void *out, WGPUInstance, WGPURequestAdapterOptions const *);
    void (*CxxDelete)(void *);
} wgml_wgpu_extras;

typedef struct wgml_wgpu_table {
#define WGML_WGPU_FIELD(ret, name, params, args) ret(*name) params;
    WGML_WGPU_STANDARD(WGML_WGPU_FIELD)
#undef WGML_WGPU_FIELD
} wgml_wgpu_table;

/* The bound implementation's extras (valid while a context is open). */
extern wgml_wgpu_extras wgml_wgpu_extra;

/* Binds the implementation `kind` (WGPU_NATIVE or DAWN, not AUTO) for one more user, loading
   its library on first use: from `path` (the settings' dawn_library or wgpu_native_library)
   where it is not "", else the library's usual name through the search path (libwgml's
   runpath: installed beside it). WGML_ERROR_UNSUPPORTED, with the path tried in err, where it
   cannot be loaded or another implementation is bound by an open context. */
wgml_status wgml_wgpu_bind(wgml_runtime_kind kind, const char *path, char *err, size_t err_size);
/* One user fewer; the last one leaves the table free to be bound to the other. */
void wgml_wgpu_unbind(void);
/* The implementation bound now, WGML_RUNTIME_AUTO if none. */
wgml_runtime_kind wgml_wgpu_bound(void);
/* Whether the implementation's library loads (from path as wgml_wgpu_bind's, loading it if
   not yet), without binding it. */
bool wgml_wgpu_available(wgml_runtime_kind kind, const char *path);
/* The file the implementation was loaded from ("" before it is). */
const char *wgml_wgpu_library_path(wgml_runtime_kind kind);

#endif
