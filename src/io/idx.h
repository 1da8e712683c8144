/* IDX files (the MNIST format), gzip-compressed or plain, and a loader for the
   Fashion-MNIST splits. Host only; nothing here prints or exits: every function returns
   a status and writes a message naming the file and the fault into err. */
#ifndef WGML_IO_IDX_H
#define WGML_IO_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

/* Only the unsigned-byte type (0x08) is read; dims are in file order. */
typedef struct wgml_idx {
    int ndim;          /* 1..4 */
    uint32_t dims[4];  /* each > 0; unused ones are 0 */
    uint8_t *data;     /* size bytes, row-major; owned */
    size_t size;       /* product of dims, at most 1 GiB */
} wgml_idx;

/* Loads path (gzip or plain; zlib reads both). Errors: WGML_ERROR_IO (cannot open or
   read), WGML_ERROR_FORMAT (bad magic, type or ndim, a zero dim, a size over 1 GiB, a
   truncated file, trailing bytes, a corrupt gzip stream), WGML_ERROR_OUT_OF_MEMORY,
   WGML_ERROR_INVALID_ARGUMENT (NULL path or out). On failure *out is zeroed. */
wgml_status wgml_idx_load(const char *path, wgml_idx *out, char *err, size_t errlen);
void wgml_idx_free(wgml_idx *idx); /* safe on a zeroed or freed struct */

typedef struct wgml_mnist {
    int64_t n;       /* number of examples */
    float *images;   /* n * 784, row-major 28x28, scaled to [0, 1]; owned */
    uint8_t *labels; /* n, each < 10; owned */
} wgml_mnist;

/* Loads <dir>/train-images-idx3-ubyte.gz and <dir>/train-labels-idx1-ubyte.gz (train=1)
   or the t10k-* pair (train=0); where a .gz file is absent, the same name without .gz is
   tried. Checks images are N x 28 x 28, labels are N, and every label is < 10.
   On failure *out is zeroed. */
wgml_status wgml_mnist_load(const char *dir, int train, wgml_mnist *out, char *err,
                            size_t errlen);
void wgml_mnist_free(wgml_mnist *m); /* safe on a zeroed or freed struct */

#endif
