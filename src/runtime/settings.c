/* A context's settings from its desc and the environment (see settings.h): the library's one
   reader of the environment. */
#include "runtime/settings.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The variable's text, or NULL when unset or empty (an empty variable is as if unset). */
static const char *env(const char *name)
{
    const char *e = getenv(name);
    return e && *e ? e : NULL;
}

bool wgml_contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return n == 0;
}

/* WGML_BACKEND's text as a backend (Vulkan for anything it does not name) */
static wgml_backend backend_named(const char *e)
{
    if (!e || wgml_contains_nocase(e, "vulkan")) return WGML_BACKEND_VULKAN;
    if (wgml_contains_nocase(e, "metal")) return WGML_BACKEND_METAL;
    if (wgml_contains_nocase(e, "dx12") || wgml_contains_nocase(e, "d3d12")) return WGML_BACKEND_DX12;
    if (wgml_contains_nocase(e, "gl")) return WGML_BACKEND_GL;
    if (wgml_contains_nocase(e, "all")) return WGML_BACKEND_ALL;
    return WGML_BACKEND_VULKAN;
}

/* The field's text, else the variable's, copied into out[size]; false when it does not fit. */
static bool text(const char *field, const char *var, char *out, size_t size)
{
    const char *v = field ? field : env(var);
    return (size_t)snprintf(out, size, "%s", v ? v : "") < size;
}

#define FAIL(...) return snprintf(err, errlen, __VA_ARGS__), WGML_ERROR_INVALID_ARGUMENT

wgml_status wgml_settings_resolve(const wgml_context_desc *desc_in, wgml_settings *s, char *err, size_t errlen)
{
    const wgml_context_desc d = desc_in ? *desc_in : (wgml_context_desc){0};
    const char *e;
    memset(s, 0, sizeof *s);

    if ((int)d.runtime < WGML_RUNTIME_AUTO || (int)d.runtime > WGML_RUNTIME_DAWN)
        FAIL("runtime %d is not a wgml_runtime_kind (0 to %d)", (int)d.runtime, (int)WGML_RUNTIME_DAWN);
    s->runtime = d.runtime;
    if (s->runtime == WGML_RUNTIME_AUTO && (e = env("WGML_RUNTIME")) && strcmp(e, "auto")) {
        if (!strcmp(e, "dawn")) s->runtime = WGML_RUNTIME_DAWN;
        else if (!strcmp(e, "wgpu-native") || !strcmp(e, "wgpu")) s->runtime = WGML_RUNTIME_WGPU_NATIVE;
        else FAIL("WGML_RUNTIME='%s' names no runtime (auto, wgpu-native, dawn)", e);
    }
    if ((int)d.backend < WGML_BACKEND_DEFAULT || (int)d.backend > WGML_BACKEND_ALL)
        FAIL("wgml_context_create: backend %d is not a wgml_backend (0 to %d)", (int)d.backend, (int)WGML_BACKEND_ALL);
    s->backend = d.backend != WGML_BACKEND_DEFAULT ? d.backend : backend_named(env("WGML_BACKEND"));
    if (!text(d.adapter_name, "WGML_ADAPTER", s->adapter_name, sizeof s->adapter_name))
        FAIL("adapter_name (or WGML_ADAPTER) is longer than %zu bytes", sizeof s->adapter_name - 1);
    s->adapter_index = d.adapter_index ? d.adapter_index : (e = env("WGML_ADAPTER_INDEX")) ? strtol(e, NULL, 10) : 0;
    if (s->adapter_index < 0) FAIL("adapter_index (or WGML_ADAPTER_INDEX) is negative");
    struct {
        const char *field, *var, *name;
        char *out;
        size_t size;
    } texts[] = {
        {d.dawn_library, "WGML_DAWN_LIBRARY", "dawn_library", s->dawn_library, sizeof s->dawn_library},
        {d.wgpu_native_library, "WGML_WGPU_NATIVE_LIBRARY", "wgpu_native_library", s->wgpu_native_library,
         sizeof s->wgpu_native_library},
        {d.dawn_toggles, "WGML_DAWN_TOGGLES", "dawn_toggles", s->dawn_toggles, sizeof s->dawn_toggles},
        {d.dump_wgsl, "WGML_DUMP_WGSL", "dump_wgsl", s->dump_wgsl, sizeof s->dump_wgsl},
        {d.profile, "WGML_PROFILE", "profile", s->profile, sizeof s->profile},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        if (!text(texts[i].field, texts[i].var, texts[i].out, texts[i].size))
            FAIL("%s (or %s) is longer than %zu bytes", texts[i].name, texts[i].var, texts[i].size - 1);
    s->bounds_checks = d.bounds_checks || ((e = env("WGML_BOUNDS_CHECKS")) && *e == '1');
    s->gpu_timing = d.gpu_timing || ((e = env("WGML_GPU_TIMING")) && *e == '1');
    s->timeline = d.timeline || ((e = env("WGML_TIMELINE")) && strcmp(e, "0"));

    if (isnan(d.poll_spin_us)) FAIL("poll_spin_us is NaN");
    double spin = (e = env("WGML_POLL_SPIN_US")) ? atof(e) : -1;
    s->poll_spin_us = d.poll_spin_us > 0 ? d.poll_spin_us : d.poll_spin_us < 0 ? 0 : e ? (spin > 0 ? spin : 0) : -1;
    if (d.loop_limit < 0 || d.loop_limit > UINT32_MAX) FAIL("loop_limit = %lld, want 0 to %u", (long long)d.loop_limit, UINT32_MAX);
    unsigned long ll = (e = env("WGML_LOOP_LIMIT")) ? strtoul(e, NULL, 10) : 0;
    s->loop_limit = d.loop_limit ? (uint32_t)d.loop_limit : ll <= UINT32_MAX ? (uint32_t)ll : 0;
    if (d.binding_limit && d.binding_limit < 256) FAIL("binding_limit = %lld, want 0 or at least 256", (long long)d.binding_limit);
    unsigned long long bl = (e = env("WGML_DEBUG_BINDING_LIMIT")) ? strtoull(e, NULL, 10) : 0;
    s->binding_limit = d.binding_limit ? (uint64_t)d.binding_limit : bl >= 256 ? (uint64_t)bl : 0;
    if (d.dist_bucket_mb && !(d.dist_bucket_mb > 0 && d.dist_bucket_mb <= 1024))
        FAIL("dist_bucket_mb = %g, want 0 or (0, 1024]", d.dist_bucket_mb);
    double mb = (e = env("WGML_DIST_BUCKET_MB")) ? atof(e) : 0;
    s->dist_bucket_mb = d.dist_bucket_mb ? d.dist_bucket_mb : mb > 0 && mb <= 1024 ? mb : 0;
    if (d.dist_overlap < -1 || d.dist_overlap > 1) FAIL("dist_overlap = %d, want -1, 0 or 1", d.dist_overlap);
    s->dist_overlap = d.dist_overlap ? d.dist_overlap > 0 : !((e = env("WGML_DIST_OVERLAP")) && !strcmp(e, "0"));
    if (d.dist_defer < -1 || d.dist_defer > 1) FAIL("dist_defer = %d, want -1, 0 or 1", d.dist_defer);
    s->dist_defer = d.dist_defer ? d.dist_defer > 0 : !((e = env("WGML_DIST_DEFER")) && !strcmp(e, "0"));
    s->dist_inline = d.dist_inline || ((e = env("WGML_DIST_INLINE")) && *e && strcmp(e, "0"));
    if (d.dist_shm < -1 || d.dist_shm > 1) FAIL("dist_shm = %d, want -1, 0 or 1", d.dist_shm);
    s->dist_shm = d.dist_shm ? d.dist_shm > 0 : !((e = env("WGML_DIST_SHM")) && !strcmp(e, "0"));
    /* (no field of the descriptor: the ranks agree on it at the first step, train/dist.c) */
    s->dist_hostmap = !((e = env("WGML_DIST_HOSTMAP")) && !strcmp(e, "0"));
    if (d.dist_f16 < -1 || d.dist_f16 > 1) FAIL("dist_f16 = %d, want -1, 0 or 1", d.dist_f16);
    s->dist_f16 = d.dist_f16 ? d.dist_f16 : (e = env("WGML_DIST_F16")) ? (!strcmp(e, "0") ? -1 : !strcmp(e, "1") ? 1 : 0) : 0;
    if (d.dist_threads < 0 || d.dist_threads > 16) FAIL("dist_threads = %d, want 0 to 16", d.dist_threads);
    int dt = (e = env("WGML_DIST_THREADS")) ? atoi(e) : 0;
    s->dist_threads = d.dist_threads ? d.dist_threads : dt > 0 && dt <= 16 ? dt : 0;

    /* kernel choices: a text too long for its room is no value any of them takes: unset */
    struct {
        const char *field, *var;
        char *out;
    } choices[] = {
        {d.gemm_tile, "WGML_GEMM_TILE", s->gemm_tile},
        {d.gemm_warp, "WGML_GEMM_WARP", s->gemm_warp},
        {d.gemm_cpu, "WGML_GEMM_CPU", s->gemm_cpu},
        {d.gemm_cpu_subgroups, "WGML_GEMM_CPU_SUBGROUPS", s->gemm_cpu_subgroups},
        {d.gemv_cols, "WGML_GEMV_COLS", s->gemv_cols},
        {d.gemv_rows, "WGML_GEMV_ROWS", s->gemv_rows},
        {d.subgroups, "WGML_SUBGROUPS", s->subgroups},
        {d.ew_unroll, "WGML_EW_UNROLL", s->ew_unroll},
        {d.attn_tiles, "WGML_ATTN_TILES", s->attn_tiles},
        {d.attn_pre, "WGML_ATTN_PRE", s->attn_pre},
        {d.attn_matrix, "WGML_ATTN_MATRIX", s->attn_matrix},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (!text(choices[i].field, choices[i].var, choices[i].out, WGML_SETTING_CHOICE)) choices[i].out[0] = '\0';
    return WGML_OK;
}

void wgml_settings_forget_strings(wgml_context_desc *d)
{
    d->adapter_name = d->dawn_library = d->wgpu_native_library = d->dawn_toggles = d->dump_wgsl = d->profile = NULL;
    d->gemm_tile = d->gemm_warp = d->gemm_cpu = d->gemm_cpu_subgroups = d->gemv_cols = d->gemv_rows = d->subgroups = NULL;
    d->ew_unroll = d->attn_tiles = d->attn_pre = d->attn_matrix = NULL;
}

void wgml_launch_settings_read(wgml_launch_settings *out)
{
    /* set by the launchers we know (Open MPI, MPICH/Hydra, PMIx, Slurm's PMI) */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) out->launched |= getenv(vars[i]) != NULL;
    /* (Open MPI first: its mpirun may set PMIx's variables too) */
    if (getenv("OMPI_COMM_WORLD_SIZE")) out->family = WGML_LAUNCHER_OPEN_MPI;
    else if (getenv("PMI_SIZE") || getenv("PMI_RANK") || getenv("MPI_LOCALNRANKS")) out->family = WGML_LAUNCHER_MPICH;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE"); /* Open MPI's count, else MPICH/Hydra's */
    if (!n) n = getenv("PMI_SIZE");
    snprintf(out->size, sizeof out->size, "%s", n ? n : "");
    const char *lib = getenv("WGML_MPI_LIBRARY");
    snprintf(out->mpi_library, sizeof out->mpi_library, "%s", lib ? lib : "");
}
