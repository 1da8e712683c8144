/*
 * Text corpora for character-level language models, host only.
 *
 * A corpus is one file, or the regular files of a folder (names starting with "." and NAME.dat
 * beside a file NAME skipped, and a file reached by several names, links or hard links, read once
 * under its first: in Debian's fortunes folder those are the index files and the .u8 aliases),
 * concatenated in byte order of their names. The vocabulary is the distinct bytes of the whole text in
 * increasing order; a token is a byte's index in it. The first 90% of the tokens (rounded
 * down) are the training split, the rest the validation split.
 *
 * Batches are windows drawn from a split by a counter-based generator, so that batch number
 * i is the same whatever came before (a resumed run sees the batches of an uninterrupted
 * one) and a script in another language can draw them too. With all arithmetic mod 2^64:
 *   mix(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
 *            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
 *            return z ^ (z >> 31)
 *   row r of batch i from split s (0 train, 1 validation), batch size B, block T:
 *            u = mix(mix(seed + s) + i * B + r)
 *            start = u mod (len(split) - T)
 *            x = split[start .. start + T),  y = split[start + 1 .. start + T + 1)
 */
#ifndef WGML_IO_TEXT_H
#define WGML_IO_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "wgml.h"

#define WGML_TEXT_DEFAULT_DIR "/usr/share/games/fortunes"

typedef struct wgml_text {
    int vocab_size;
    uint8_t vocab[256];   /* token -> byte */
    int16_t token_of[256]; /* byte -> token, -1 if absent */
    int32_t *tokens;      /* the whole corpus */
    int64_t n, n_train;   /* tokens [0, n_train) train, [n_train, n) validation */
    int files;            /* files read */
} wgml_text;

/* Reads a file or a folder as above. WGML_ERROR_IO (missing folder, unreadable file),
   WGML_ERROR_INVALID_ARGUMENT (no files, empty text), with a message naming the folder. On
   failure *out is zeroed. (A split too short for a block is wgml_text_batch's error.) */
wgml_status wgml_text_load(const char *dir, wgml_text *out, char *err, size_t errlen);
/* The same from bytes in memory (tests). */
wgml_status wgml_text_from_bytes(const uint8_t *bytes, size_t len, wgml_text *out, char *err, size_t errlen);
void wgml_text_free(wgml_text *t);

/* The mixing function above. */
uint64_t wgml_text_mix(uint64_t z);

/* Batch i of split s (0 train, 1 validation): x and y each batch * block tokens, row-major.
   WGML_ERROR_INVALID_ARGUMENT when the split is not longer than block. */
wgml_status wgml_text_batch(const wgml_text *t, int split, uint64_t seed, int64_t i, int batch, int block,
                            int32_t *x, int32_t *y, char *err, size_t errlen);

/* Encodes text (bytes outside the vocabulary: WGML_ERROR_INVALID_ARGUMENT naming the first)
   and decodes tokens (ids out of range: '?'). */
wgml_status wgml_text_encode(const wgml_text *t, const char *s, int32_t *ids, size_t cap, size_t *n, char *err,
                             size_t errlen);
void wgml_text_decode(const uint8_t *vocab, int vocab_size, const int32_t *ids, size_t n, char *out);

#endif
