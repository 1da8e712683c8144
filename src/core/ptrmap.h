/*
 * A map from pointers to small integers (open addressing): the scheduler and autograd keep
 * their per-pass notes about tensors in arrays of their own, found through one of these,
 * rather than in every tensor.
 */
#ifndef WGML_CORE_PTRMAP_H
#define WGML_CORE_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WGML_PTRMAP_NONE UINT32_MAX

typedef struct wgml_ptrmap {
    const void **keys;
    uint32_t *vals;
    size_t cap, n; /* cap: a power of two, or 0 */
} wgml_ptrmap;

/* The value of key, or WGML_PTRMAP_NONE. */
uint32_t wgml_ptrmap_get(const wgml_ptrmap *m, const void *key);
/* Sets key to val (key not NULL); false when out of host memory. */
bool wgml_ptrmap_put(wgml_ptrmap *m, const void *key, uint32_t val);
/* Forgets every key; keeps the memory for the next pass. */
void wgml_ptrmap_clear(wgml_ptrmap *m);
void wgml_ptrmap_free(wgml_ptrmap *m);

#endif
