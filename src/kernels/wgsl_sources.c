/* Lookup of the embedded WGSL kernels by file name. */
#include "kernels/wgsl_sources.h"

#include <string.h>

const char *wgml_wgsl_find(const char *name)
{
    for (const wgml_wgsl_source *s = wgml_wgsl_sources; s->name; s++)
        if (strcmp(s->name, name) == 0) return s->text;
    return NULL;
}
