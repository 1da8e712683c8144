/* The WGSL kernels of src/ (.wgsl files beside their launch code), embedded at build time (scripts/embed_wgsl.py). */
#ifndef WGML_KERNELS_WGSL_SOURCES_H
#define WGML_KERNELS_WGSL_SOURCES_H

typedef struct wgml_wgsl_source {
    const char *name; /* file name without .wgsl */
    const char *text;
} wgml_wgsl_source;

/* Terminated by an entry whose name is NULL. */
extern const wgml_wgsl_source wgml_wgsl_sources[];

/* The source of kernel `name`, or NULL. */
const char *wgml_wgsl_find(const char *name);

#endif
