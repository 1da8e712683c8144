/* libFuzzer entry for the IDX reader: any file, plain or gzip, must load or fail cleanly,
   never crash, leak or read out of bounds; what loads must be self-consistent. The reader
   takes a path (zlib reads files), so each input is written to a temporary file first. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[512];
static int fd = -1;

static void remove_file(void) { unlink(path); }

/* One temporary file for the whole run, in memory where /dev/shm exists: on a disk, every
   rewrite costs a flush (18 times slower, measured). It is overwritten in place and
   cut to size (a truncation to zero would also make ext4 flush). */
static int input_file(void)
{
    if (fd >= 0) return 0;
    const char *dirs[3] = {"/dev/shm", getenv("TMPDIR"), "/tmp"};
    for (int i = 0; i < 3 && fd < 0; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        snprintf(path, sizeof path, "%s/wgml_fuzz_idx.XXXXXX", dirs[i]);
        fd = mkstemp(path);
    }
    if (fd < 0) return -1;
    atexit(remove_file);
    return 0;
}

static int write_input(const uint8_t *data, size_t size)
{
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return ftruncate(fd, (off_t)size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (input_file() || write_input(data, size)) __builtin_trap();

    wgml_idx idx;
    char err[256];
    wgml_status st = wgml_idx_load(path, &idx, err, sizeof err);
    if (st == WGML_OK) {
        if (idx.ndim < 1 || idx.ndim > 4 || !idx.data) __builtin_trap();
        uint64_t total = 1;
        for (int d = 0; d < 4; d++) {
            if (d < idx.ndim && idx.dims[d] == 0) __builtin_trap();
            if (d >= idx.ndim && idx.dims[d] != 0) __builtin_trap();
            if (d < idx.ndim) total *= idx.dims[d];
        }
        if (total != idx.size || total > ((uint64_t)1 << 30)) __builtin_trap();
        /* A plain file holds exactly its header and its data, nothing more. */
        int gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
        if (!gzip && (size_t)4 + 4 * (size_t)idx.ndim + idx.size != size) __builtin_trap();
        if (!gzip && memcmp(idx.data, data + 4 + 4 * idx.ndim, idx.size) != 0) __builtin_trap();
        /* Touch every byte, so ASan checks the buffer's size. */
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < idx.size; i++) sink ^= idx.data[i];
        (void)sink;
    } else if (err[0] == '\0' || idx.data != NULL || idx.ndim != 0 || idx.size != 0) {
        __builtin_trap(); /* a failure must say why and leave nothing behind */
    }
    wgml_idx_free(&idx);
    return 0;
}
