/* libFuzzer entry for the safetensors parser: any input must parse or fail cleanly,
   never crash, leak or read out of bounds; what parses must be self-consistent. */
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml_st_file file;
    char err[256];
    wgml_status st = wgml_safetensors_parse(data, size, &file, err, sizeof err);
    if (st == WGML_OK) {
        for (int i = 0; i < file.count; i++) {
            const wgml_st_tensor *t = &file.tensors[i];
            /* Touch every byte, so ASan checks the copies and their sizes. */
            int64_t numel = 1;
            for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
            volatile float sink = 0;
            for (int64_t k = 0; k < numel; k++) sink += t->data[k];
            (void)sink;
            if (t->ndim < 0 || t->ndim > 4 || strlen(t->name) > WGML_ST_MAX_NAME ||
                wgml_st_find(&file, t->name) == NULL)
                __builtin_trap();
        }
        for (int i = 0; i < file.meta_count; i++)
            if (wgml_st_meta(&file, file.meta_keys[i]) == NULL) __builtin_trap();
    } else if (err[0] == '\0' || file.count != 0 || file.tensors != NULL) {
        __builtin_trap(); /* a failure must say why and leave nothing behind */
    }
    wgml_st_file_free(&file);
    return 0;
}
