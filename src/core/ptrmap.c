#include "core/ptrmap.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const void *key, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

uint32_t wgml_ptrmap_get(const wgml_ptrmap *m, const void *key)
{
    if (!m->cap) return WGML_PTRMAP_NONE;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (!m->keys[i]) return WGML_PTRMAP_NONE;
    }
}

static bool grow(wgml_ptrmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 256;
    const void **keys = calloc(cap, sizeof *keys);
    uint32_t *vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = slot_of(m->keys[i], cap);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return true;
}

bool wgml_ptrmap_put(wgml_ptrmap *m, const void *key, uint32_t val)
{
    if ((m->n + 1) * 2 > m->cap && !grow(m)) return false;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

void wgml_ptrmap_clear(wgml_ptrmap *m)
{
    if (m->cap) memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->n = 0;
}

void wgml_ptrmap_free(wgml_ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
