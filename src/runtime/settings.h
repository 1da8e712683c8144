/*
 * A context's settings: every knob of wgml_context_desc, resolved once when the context is
 * made, from the desc, else the environment, else the default (include/wgml.h lists them).
 * settings.c is the only file of the library that reads the environment (scripts/
 * check_layers.py fails a getenv anywhere else): the rest read ctx->rt.settings.
 *
 * Here in the runtime layer, the lowest, because the runtime opens the device with them and
 * every layer above reaches the runtime (the context embeds it as ctx->rt).
 */
#ifndef WGML_RUNTIME_SETTINGS_H
#define WGML_RUNTIME_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

#define WGML_SETTING_PATH 512 /* room for a file or folder (with its NUL) */
#define WGML_SETTING_CHOICE 64 /* room for a kernel choice's text */

typedef struct wgml_settings {
    /* the runtime and the adapter */
    wgml_runtime_kind runtime; /* AUTO: choose (device.c) */
    wgml_backend backend;      /* never DEFAULT */
    char adapter_name[256];    /* "": any */
    long adapter_index;        /* >= 0 */
    char dawn_library[WGML_SETTING_PATH], wgpu_native_library[WGML_SETTING_PATH]; /* "": the usual name */
    char dawn_toggles[256];
    bool bounds_checks, gpu_timing; /* (no_fusion: the executor reads ctx->desc) */
    /* diagnostics ("": off) */
    char dump_wgsl[WGML_SETTING_PATH], profile[WGML_SETTING_PATH];
    bool timeline;
    /* behaviour */
    double poll_spin_us;    /* < 0: the adapter's default */
    uint32_t loop_limit;    /* 0: the adapter's */
    uint64_t binding_limit; /* 0: the adapter's */
    double dist_bucket_mb;  /* 0: the default */
    bool dist_overlap, dist_defer, dist_inline;
    bool dist_shm; /* the shared-memory reduction where the ranks share a machine */
    bool dist_hostmap; /* ... the GPU copying into and out of it itself where it can (WGML_DIST_HOSTMAP) */
    int dist_f16;  /* -1 never, 0 with loss scaling (mixed precision), 1 always */
    int dist_threads; /* 0: the default */
    /* kernel choices: the text of the desc field or variable ("": unset) */
    char gemm_tile[WGML_SETTING_CHOICE], gemm_warp[WGML_SETTING_CHOICE], gemm_cpu[WGML_SETTING_CHOICE],
        gemm_cpu_subgroups[WGML_SETTING_CHOICE], gemv_cols[WGML_SETTING_CHOICE], gemv_rows[WGML_SETTING_CHOICE],
        subgroups[WGML_SETTING_CHOICE], ew_unroll[WGML_SETTING_CHOICE], attn_tiles[WGML_SETTING_CHOICE],
        attn_pre[WGML_SETTING_CHOICE], attn_matrix[WGML_SETTING_CHOICE];
} wgml_settings;

/* The settings of desc (NULL: all zero). WGML_ERROR_INVALID_ARGUMENT, why in err, for a field
   or variable out of range (an enum that is none of its values, a negative index, a path too
   long, ...); kernel choices out of range are kept, and ignored where they are used. */
wgml_status wgml_settings_resolve(const wgml_context_desc *desc, wgml_settings *out, char *err, size_t errlen);

/* desc without the caller's strings (what a context keeps of its desc). */
void wgml_settings_forget_strings(wgml_context_desc *desc);

/* The process's launch, read at each wgml_dist_init (it takes no context). */
typedef struct wgml_launch_settings {
    bool launched;          /* a launcher's variable is set */
    int family;             /* whose launcher: a wgml_launcher_family */
    char size[32];          /* its count of ranks as given ("" if none) */
    char mpi_library[WGML_SETTING_PATH]; /* WGML_MPI_LIBRARY ("": the built-in one) */
} wgml_launch_settings;
/* Whose variables a launcher set: Open MPI's mpirun (OMPI_*), or MPICH's Hydra (PMI_* and
   MPI_LOCAL*; Intel MPI's and MVAPICH's too); PMIx's alone do not say */
enum wgml_launcher_family { WGML_LAUNCHER_UNKNOWN, WGML_LAUNCHER_OPEN_MPI, WGML_LAUNCHER_MPICH };
void wgml_launch_settings_read(wgml_launch_settings *out);

/* Whether hay contains needle, ASCII case ignored (WGML_BACKEND's text, adapter names). */
bool wgml_contains_nocase(const char *hay, const char *needle);

#endif
