/*
 * Loading wgpu-native or Dawn with dlopen, the table of their entry points, and the hidden
 * wgpu* definitions the rest of libwgml calls through it (see loader.h).
 */
#define _GNU_SOURCE /* dladdr: the file the search found */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/loader.h"

typedef struct implementation {
    const char *label;        /* for messages */
    const char *env;          /* the variable naming the file (for messages: settings.c reads it) */
    const char *default_name; /* found through the search path */
    void *handle;             /* dlopen's, kept for the life of the process */
    bool tried;
    char path[512];           /* the file tried or loaded */
    char error[512];          /* why it did not load */
    wgml_wgpu_table table;
    wgml_wgpu_extras extras;
} implementation;

static implementation impls[3] = {
    [WGML_RUNTIME_WGPU_NATIVE] = {.label = "wgpu-native", .env = "WGML_WGPU_NATIVE_LIBRARY",
                                  .default_name = "libwgpu_native.so"},
    [WGML_RUNTIME_DAWN] = {.label = "Dawn", .env = "WGML_DAWN_LIBRARY", .default_name = "libwebgpu_dawn.so"},
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static wgml_runtime_kind bound = WGML_RUNTIME_AUTO;
static int users;
static wgml_wgpu_table table; /* the bound implementation's */
wgml_wgpu_extras wgml_wgpu_extra;

/* Stores a symbol into the function pointer at slot (POSIX makes data and function pointers
   the same size); whether it was found. */
static bool symbol(void *handle, const char *name, void *slot)
{
    void *p = dlsym(handle, name);
    memcpy(slot, &p, sizeof p);
    return p != NULL;
}

/* A bare name the search did not find, looked for where wgml's own build or installation put
   it: beside the object holding this code, in its wgml/ folder, then the build's third_party
   folders (WGML_BUILD_RUNTIME_DIRS). The search follows the runpath of the caller of dlopen:
   under AddressSanitizer, whose dlopen stands between, the bare name was not found (almost every
   test of `make asan` failed so); a program linking libwgml.a may lack that runpath too. */
static void *load_beside(const char *name)
{
    char dirs[2048] = "", path[2560];
    Dl_info info;
    if (dladdr((void *)&load_beside, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            int n = (int)(slash - info.dli_fname);
            snprintf(dirs, sizeof dirs, "%.*s:%.*s/wgml:", n, info.dli_fname, n, info.dli_fname);
        }
    }
#ifdef WGML_BUILD_RUNTIME_DIRS
    strncat(dirs, WGML_BUILD_RUNTIME_DIRS, sizeof dirs - strlen(dirs) - 1);
#endif
    for (char *d = dirs, *end; *d; d = end + (*end != 0)) {
        end = strchr(d, ':');
        if (!end) end = d + strlen(d);
        if (end == d) continue;
        snprintf(path, sizeof path, "%.*s/%s", (int)(end - d), d, name);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    return NULL;
}

/* Loads impl's library once, from path ("" or NULL: its usual name); false (impl->error says
   why) if it cannot. Holds the lock. */
static bool load(implementation *impl, const char *path)
{
    if (impl->tried) return impl->handle != NULL;
    impl->tried = true;
    snprintf(impl->path, sizeof impl->path, "%s", path && *path ? path : impl->default_name);
    /* RTLD_LOCAL: the library's wgpu* symbols stay out of the global scope, where they could
       meet another copy's */
    void *h = dlopen(impl->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(impl->error, sizeof impl->error, "%s", why ? why : "dlopen failed");
        if (!strchr(impl->path, '/')) h = load_beside(impl->path);
    }
    if (!h) {
        return false;
    }
    wgml_wgpu_table t;
    const char *missing = NULL;
#define WGML_WGPU_LOAD(ret, name, params, args) \
    if (!missing && !symbol(h, "wgpu" #name, &t.name)) missing = "wgpu" #name;
    WGML_WGPU_STANDARD(WGML_WGPU_LOAD)
#undef WGML_WGPU_LOAD
    if (missing) {
        snprintf(impl->error, sizeof impl->error, "it has no %s", missing);
        dlclose(h);
        return false;
    }
    impl->table = t;
    wgml_wgpu_extras *x = &impl->extras;
    symbol(h, "wgpuInstanceEnumerateAdapters", &x->InstanceEnumerateAdapters);
    symbol(h, "wgpuDevicePoll", &x->DevicePoll);
    symbol(h, "wgpuDeviceCreateShaderModuleTrusted", &x->DeviceCreateShaderModuleTrusted);
    symbol(h, "wgpuQueueGetTimestampPeriod", &x->QueueGetTimestampPeriod);
    symbol(h, "wgpuGetVersion", &x->GetVersion);
    symbol(h, "wgpuInstanceWaitAny", &x->InstanceWaitAny);
    symbol(h, "wgpuAdapterPropertiesSubgroupMatrixConfigsFreeMembers", &x->AdapterPropertiesSubgroupMatrixConfigsFreeMembers);
    /* operator delete as the process resolves it (a sanitizer's stands in for the C++
       library's there), else the one Dawn's own dependencies give */
    if (impl == &impls[WGML_RUNTIME_DAWN] &&
        (!symbol(h, "_ZN4dawn6native12InstanceBase17EnumerateAdaptersEPKNS0_21RequestAdapterOptionsE",
                 &x->DawnEnumerateAdapters) ||
         !(symbol(RTLD_DEFAULT, "_ZdlPv", &x->CxxDelete) || symbol(h, "_ZdlPv", &x->CxxDelete))))
        x->DawnEnumerateAdapters = NULL, x->CxxDelete = NULL; /* both or neither */
    /* what the implementation file relies on */
    if (impl == &impls[WGML_RUNTIME_WGPU_NATIVE] && !(x->InstanceEnumerateAdapters && x->DevicePoll))
        missing = "wgpuInstanceEnumerateAdapters or wgpuDevicePoll (is it wgpu-native?)";
    if (impl == &impls[WGML_RUNTIME_DAWN] && !x->InstanceWaitAny) missing = "wgpuInstanceWaitAny";
    if (missing) {
        snprintf(impl->error, sizeof impl->error, "it has no %s", missing);
        dlclose(h);
        return false;
    }
    impl->handle = h;
    return true;
}

wgml_status wgml_wgpu_bind(wgml_runtime_kind kind, const char *path, char *err, size_t err_size)
{
    if (kind != WGML_RUNTIME_WGPU_NATIVE && kind != WGML_RUNTIME_DAWN) {
        snprintf(err, err_size, "internal: binding runtime %d", (int)kind);
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    implementation *impl = &impls[kind];
    wgml_status st = WGML_OK;
    pthread_mutex_lock(&lock);
    if (users && bound != kind) {
        snprintf(err, err_size,
                 "the %s runtime was asked for, but this process has a context open on %s: one "
                 "WebGPU runtime at a time (free the other contexts first)",
                 impl->label, impls[bound].label);
        st = WGML_ERROR_UNSUPPORTED;
    } else if (!load(impl, path)) {
        snprintf(err, err_size,
                 "the %s runtime could not be loaded from '%s' (%s); set %s (or the context "
                 "desc's %s) to the library's path%s",
                 impl->label, impl->path, impl->error, impl->env,
                 kind == WGML_RUNTIME_DAWN ? "dawn_library" : "wgpu_native_library",
                 kind == WGML_RUNTIME_DAWN ? " (scripts/deps_dawn.sh installs it)" : "");
        st = WGML_ERROR_UNSUPPORTED;
    } else {
        if (!users) {
            table = impl->table;
            wgml_wgpu_extra = impl->extras;
            bound = kind;
        }
        users++;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

void wgml_wgpu_unbind(void)
{
    pthread_mutex_lock(&lock);
    if (users > 0 && --users == 0) bound = WGML_RUNTIME_AUTO;
    pthread_mutex_unlock(&lock);
}

wgml_runtime_kind wgml_wgpu_bound(void)
{
    pthread_mutex_lock(&lock);
    wgml_runtime_kind k = users ? bound : WGML_RUNTIME_AUTO;
    pthread_mutex_unlock(&lock);
    return k;
}

bool wgml_wgpu_available(wgml_runtime_kind kind, const char *path)
{
    if (kind != WGML_RUNTIME_WGPU_NATIVE && kind != WGML_RUNTIME_DAWN) return false;
    pthread_mutex_lock(&lock);
    bool ok = load(&impls[kind], path);
    pthread_mutex_unlock(&lock);
    return ok;
}

const char *wgml_wgpu_library_path(wgml_runtime_kind kind)
{
    if (kind != WGML_RUNTIME_WGPU_NATIVE && kind != WGML_RUNTIME_DAWN) return "";
    implementation *impl = &impls[kind];
    if (!impl->handle) return impl->path;
    /* the file the search found, not the bare name asked for */
    void *sym = dlsym(impl->handle, "wgpuCreateInstance");
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname) snprintf(impl->path, sizeof impl->path, "%s", info.dli_fname);
    return impl->path;
}

/* The standard entry points, for the code above: hidden (C_VISIBILITY_PRESET), so libwgml
   exports none and never stands in for the loaded library's own. */
#define WGML_WGPU_DEFINE(ret, name, params, args) \
    ret wgpu##name params { return table.name args; }
WGML_WGPU_STANDARD(WGML_WGPU_DEFINE)
#undef WGML_WGPU_DEFINE
