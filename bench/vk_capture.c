/*
 * A stand-in for the Vulkan loader that shows what the driver gets and makes of wgml's
 * kernels: the SPIR-V naga writes for each WGSL kernel and, where the driver offers
 * VK_KHR_pipeline_executable_properties, the compiled kernel's statistics (on NVIDIA:
 * registers per thread and shared memory, which decide occupancy; its local-memory figure
 * read 2^36 for every kernel, not a size).
 * wgpu-native reaches Vulkan only through dlopen("libvulkan.so.1") and the loader's
 * vkGetInstanceProcAddr; this file is built as a library of that file name (with another
 * SONAME), found first on LD_LIBRARY_PATH, and passes everything on to the real loader but
 * vkCreateDevice (adds the extension), vkCreateShaderModule (writes the SPIR-V) and
 * vkCreateComputePipelines (asks for and writes the statistics).
 *
 *   WGML_VK_CAPTURE=dir      where shader_NNN.spv and shader_NNN.txt go (NNN: creation order)
 *   WGML_VK_REAL=path        the real loader (default: Debian's)
 *
 * A diagnostic for kernel work (CMake builds it as build/vk_capture/libvulkan.so.1 where
 * Vulkan's headers are; scripts/device_capture.sh runs the bench under it); not part of the
 * library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static void *real;
static PFN_vkGetInstanceProcAddr real_gipa;
static PFN_vkGetDeviceProcAddr real_gdpa;
static PFN_vkCreateDevice real_create_device;
static PFN_vkCreateShaderModule real_create_module;
static PFN_vkCreateComputePipelines real_create_pipelines;
static PFN_vkGetPipelineExecutablePropertiesKHR get_props;
static PFN_vkGetPipelineExecutableStatisticsKHR get_stats;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* modules in creation order, so a pipeline's statistics land beside its SPIR-V */
#define MAX_MODULES 4096
static VkShaderModule modules[MAX_MODULES];
static int nmodules;

static void load_real(void)
{
    if (real) return;
    const char *path = getenv("WGML_VK_REAL");
    real = dlopen(path ? path : "/usr/lib/x86_64-linux-gnu/libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!real) {
        fprintf(stderr, "vk_capture: cannot open the real loader: %s\n", dlerror());
        abort();
    }
    real_gipa = (PFN_vkGetInstanceProcAddr)dlsym(real, "vkGetInstanceProcAddr");
    real_gdpa = (PFN_vkGetDeviceProcAddr)dlsym(real, "vkGetDeviceProcAddr");
    real_create_device = (PFN_vkCreateDevice)dlsym(real, "vkCreateDevice");
    real_create_module = (PFN_vkCreateShaderModule)dlsym(real, "vkCreateShaderModule");
    real_create_pipelines = (PFN_vkCreateComputePipelines)dlsym(real, "vkCreateComputePipelines");
}

static FILE *open_out(int index, const char *ext, const char *mode)
{
    const char *dir = getenv("WGML_VK_CAPTURE");
    if (!dir) return NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/shader_%03d.%s", dir, index, ext);
    return fopen(path, mode);
}

static VKAPI_ATTR VkResult VKAPI_CALL capture_create_device(VkPhysicalDevice phys, const VkDeviceCreateInfo *info,
                                                            const VkAllocationCallbacks *alloc, VkDevice *dev)
{
    static const char ext[] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    PFN_vkEnumerateDeviceExtensionProperties enum_ext =
        (PFN_vkEnumerateDeviceExtensionProperties)dlsym(real, "vkEnumerateDeviceExtensionProperties");
    uint32_t n = 0;
    enum_ext(phys, NULL, &n, NULL);
    VkExtensionProperties *props = calloc(n ? n : 1, sizeof *props);
    enum_ext(phys, NULL, &n, props);
    int have = 0;
    for (uint32_t i = 0; i < n; i++) have |= !strcmp(props[i].extensionName, ext);
    free(props);
    if (!have) {
        fprintf(stderr, "vk_capture: the driver lacks %s: SPIR-V only\n", ext);
        return real_create_device(phys, info, alloc, dev);
    }
    VkDeviceCreateInfo ci = *info;
    const char **names = calloc(info->enabledExtensionCount + 1, sizeof *names);
    for (uint32_t i = 0; i < info->enabledExtensionCount; i++) names[i] = info->ppEnabledExtensionNames[i];
    names[info->enabledExtensionCount] = ext;
    ci.enabledExtensionCount = info->enabledExtensionCount + 1;
    ci.ppEnabledExtensionNames = names;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR feat = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = (void *)info->pNext,
        .pipelineExecutableInfo = VK_TRUE,
    };
    ci.pNext = &feat;
    VkResult r = real_create_device(phys, &ci, alloc, dev);
    free(names);
    if (r == VK_SUCCESS) {
        get_props = (PFN_vkGetPipelineExecutablePropertiesKHR)real_gdpa(*dev, "vkGetPipelineExecutablePropertiesKHR");
        get_stats = (PFN_vkGetPipelineExecutableStatisticsKHR)real_gdpa(*dev, "vkGetPipelineExecutableStatisticsKHR");
    }
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL capture_create_module(VkDevice dev, const VkShaderModuleCreateInfo *info,
                                                            const VkAllocationCallbacks *alloc, VkShaderModule *mod)
{
    VkResult r = real_create_module(dev, info, alloc, mod);
    if (r != VK_SUCCESS) return r;
    pthread_mutex_lock(&lock);
    int index = nmodules < MAX_MODULES ? nmodules++ : -1;
    if (index >= 0) modules[index] = *mod;
    pthread_mutex_unlock(&lock);
    FILE *f = index >= 0 ? open_out(index, "spv", "wb") : NULL;
    if (f) {
        fwrite(info->pCode, 1, info->codeSize, f);
        fclose(f);
    }
    return r;
}

/* the executables' properties or one executable's statistics, by the records' type */
static VkResult query(VkDevice dev, VkStructureType type, const void *info, uint32_t *n, void *out)
{
    if (type == VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR) return get_props(dev, info, n, out);
    return get_stats(dev, info, n, out);
}

/* Vulkan's two-call idiom: how many, then fill `n` records of `size` bytes whose sType is set */
static void *list(VkDevice dev, VkStructureType type, const void *info, size_t size, uint32_t *n)
{
    *n = 0;
    query(dev, type, info, n, NULL);
    char *rec = calloc(*n ? *n : 1, size);
    for (uint32_t i = 0; rec && i < *n; i++) ((VkBaseOutStructure *)(rec + i * size))->sType = type;
    if (rec) query(dev, type, info, n, rec);
    else *n = 0;
    return rec;
}

/* the driver's statistics of each of the pipeline's executables (a compute pipeline: one) */
static void write_stats(VkDevice dev, VkPipeline pipe, int index)
{
    FILE *f = open_out(index, "txt", "w");
    if (!f) return;
    VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipe};
    uint32_t ne, ns;
    VkPipelineExecutablePropertiesKHR *props = list(dev, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR, &pi,
                                                    sizeof *props, &ne);
    for (uint32_t e = 0; e < ne; e++) {
        fprintf(f, "executable %u: %s (%s), subgroup size %u\n", e, props[e].name, props[e].description, props[e].subgroupSize);
        VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe, .executableIndex = e};
        VkPipelineExecutableStatisticKHR *st = list(dev, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR, &ei,
                                                    sizeof *st, &ns);
        for (uint32_t i = 0; i < ns; i++) {
            /* WGML_VK_CAPTURE_PRINT=1: the registers and shared memory also on stderr, where they fall
               between the lines of a bench that compiles a kernel and then times it */
            if (getenv("WGML_VK_CAPTURE_PRINT") && st[i].format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR &&
                (strstr(st[i].name, "Register") || strstr(st[i].name, "Shared")))
                fprintf(stderr, "vk_capture: shader_%03d %s %" PRIu64 "\n", index, st[i].name, st[i].value.u64);
            fprintf(f, "  %-32s ", st[i].name);
            switch (st[i].format) {
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: fprintf(f, "%s", st[i].value.b32 ? "true" : "false"); break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: fprintf(f, "%" PRId64, st[i].value.i64); break;
            case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: fprintf(f, "%" PRIu64, st[i].value.u64); break;
            default: fprintf(f, "%g", st[i].value.f64); break;
            }
            fprintf(f, "  (%s)\n", st[i].description);
        }
        free(st);
    }
    free(props);
    fclose(f);
}

static VKAPI_ATTR VkResult VKAPI_CALL capture_create_pipelines(VkDevice dev, VkPipelineCache cache, uint32_t n,
                                                               const VkComputePipelineCreateInfo *infos,
                                                               const VkAllocationCallbacks *alloc, VkPipeline *pipes)
{
    if (!get_props) return real_create_pipelines(dev, cache, n, infos, alloc, pipes);
    VkComputePipelineCreateInfo *ci = calloc(n ? n : 1, sizeof *ci);
    for (uint32_t i = 0; i < n; i++) {
        ci[i] = infos[i];
        ci[i].flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    }
    VkResult r = real_create_pipelines(dev, cache, n, ci, alloc, pipes);
    if (r == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) {
            int index = -1;
            pthread_mutex_lock(&lock);
            for (int j = nmodules - 1; j >= 0 && index < 0; j--)
                if (modules[j] == ci[i].stage.module) index = j;
            pthread_mutex_unlock(&lock);
            /* a pipeline whose module was never seen (its SPIR-V given inline) gets an index of its own */
            if (index < 0) {
                pthread_mutex_lock(&lock);
                index = nmodules < MAX_MODULES ? nmodules++ : -1;
                pthread_mutex_unlock(&lock);
            }
            if (index >= 0) write_stats(dev, pipes[i], index);
        }
    free(ci);
    return r;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL capture_gdpa(VkDevice dev, const char *name);

/* the one entry point wgpu-native looks up itself; everything else comes through it */
VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance inst, const char *name)
{
    load_real();
    if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)vkGetInstanceProcAddr;
    if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)capture_gdpa;
    if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)capture_create_device;
    PFN_vkVoidFunction f = capture_gdpa(VK_NULL_HANDLE, name);
    return f ? f : real_gipa(inst, name);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL capture_gdpa(VkDevice dev, const char *name)
{
    if (!strcmp(name, "vkCreateShaderModule")) return (PFN_vkVoidFunction)capture_create_module;
    if (!strcmp(name, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)capture_create_pipelines;
    return dev ? real_gdpa(dev, name) : NULL;
}
