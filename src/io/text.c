/* Text corpora for character-level models: see text.h for the format of the data and the
   batch generator. */
#include "io/text.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILES 4096

uint64_t wgml_text_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void wgml_text_free(wgml_text *t)
{
    if (!t) return;
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

wgml_status wgml_text_from_bytes(const uint8_t *bytes, size_t len, wgml_text *out, char *err, size_t errlen)
{
    if (!out) return WGML_ERROR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (!bytes || len == 0) {
        snprintf(err, errlen, "the text is empty");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    int present[256] = {0};
    for (size_t i = 0; i < len; i++) present[bytes[i]] = 1;
    for (int b = 0; b < 256; b++) {
        out->token_of[b] = -1;
        if (present[b]) out->token_of[b] = (int16_t)out->vocab_size, out->vocab[out->vocab_size++] = (uint8_t)b;
    }
    out->tokens = malloc(len * sizeof *out->tokens);
    if (!out->tokens) {
        snprintf(err, errlen, "out of memory for %zu tokens", len);
        return WGML_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < len; i++) out->tokens[i] = out->token_of[bytes[i]];
    out->n = (int64_t)len;
    out->n_train = (int64_t)(len / 10 * 9 + (len % 10) * 9 / 10); /* floor(0.9 len) without overflow */
    return WGML_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* NAME.dat beside a file NAME: strfile's index in Debian's fortunes folder, not a text */
static int is_index(const char *path)
{
    struct stat sb;
    size_t n = strlen(path);
    char text[4096];
    if (!ends_with(path, ".dat") || n - 4 >= sizeof text) return 0;
    memcpy(text, path, n - 4);
    text[n - 4] = 0;
    return stat(text, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A folder's text file: its name, and the file it is (links and hard links to one file are one) */
typedef struct text_file {
    char *name;
    dev_t dev;
    ino_t ino;
} text_file;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const text_file *)a)->name, ((const text_file *)b)->name);
}

/* Appends the file's bytes to *buf; -1 with err set on failure. */
static int append_file(const char *path, uint8_t **buf, size_t *len, size_t *cap, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (*cap - *len < 65536) {
            size_t ncap = *cap ? *cap * 2 : 1 << 20;
            uint8_t *nb = realloc(*buf, ncap);
            if (!nb) {
                fclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return -1;
            }
            *buf = nb, *cap = ncap;
        }
        size_t got = fread(*buf + *len, 1, *cap - *len, f);
        *len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "error reading %s", path);
        return -1;
    }
    return 0;
}

wgml_status wgml_text_load(const char *dir, wgml_text *out, char *err, size_t errlen)
{
    if (!out) return WGML_ERROR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (!dir) {
        snprintf(err, errlen, "no text folder given");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    struct stat top;
    if (stat(dir, &top) == 0 && S_ISREG(top.st_mode)) { /* one file: its text alone */
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        wgml_status st = append_file(dir, &buf, &len, &cap, err, errlen) ? WGML_ERROR_IO : WGML_OK;
        if (!st && len == 0) {
            snprintf(err, errlen, "the text in %s is empty", dir);
            st = WGML_ERROR_INVALID_ARGUMENT;
        }
        if (!st) st = wgml_text_from_bytes(buf, len, out, err, errlen);
        free(buf);
        if (!st) out->files = 1;
        return st;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot open the text folder %s: %s%s", dir, strerror(errno),
                 strcmp(dir, WGML_TEXT_DEFAULT_DIR) == 0 ? " (Debian's fortunes package: make deps installs it)" : "");
        return WGML_ERROR_IO;
    }
    text_file *files = NULL;
    int n = 0;
    wgml_status st = WGML_OK;
    char path[4096];
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        struct stat sb;
        if (is_index(path) || stat(path, &sb) || !S_ISREG(sb.st_mode)) continue; /* folders, devices, broken links */
        text_file *nn = n < MAX_FILES ? realloc(files, (size_t)(n + 1) * sizeof *files) : NULL;
        char *copy = nn ? strdup(e->d_name) : NULL;
        if (nn) files = nn;
        if (!copy) {
            if (n < MAX_FILES) snprintf(err, errlen, "out of memory listing %s", dir);
            else snprintf(err, errlen, "more than %d files in %s", MAX_FILES, dir);
            st = n < MAX_FILES ? WGML_ERROR_OUT_OF_MEMORY : WGML_ERROR_INVALID_ARGUMENT;
            break;
        }
        files[n++] = (text_file){.name = copy, .dev = sb.st_dev, .ino = sb.st_ino};
    }
    closedir(d);
    /* each file once, under its first name (the fortunes' .u8 links come after their files) */
    qsort(files, (size_t)n, sizeof *files, by_name);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < kept && !seen; k++) seen = files[k].dev == files[i].dev && files[k].ino == files[i].ino;
        if (seen) free(files[i].name);
        else files[kept++] = files[i];
    }
    n = kept;
    if (!st && n == 0) {
        snprintf(err, errlen, "the text folder %s has no text files", dir);
        st = WGML_ERROR_INVALID_ARGUMENT;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < n && !st; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (append_file(path, &buf, &len, &cap, err, errlen)) st = WGML_ERROR_IO;
    }
    for (int i = 0; i < n; i++) free(files[i].name);
    free(files);
    if (!st && len == 0) {
        snprintf(err, errlen, "the text in %s is empty", dir);
        st = WGML_ERROR_INVALID_ARGUMENT;
    }
    if (!st) st = wgml_text_from_bytes(buf, len, out, err, errlen);
    free(buf);
    if (!st) out->files = n;
    return st;
}

wgml_status wgml_text_batch(const wgml_text *t, int split, uint64_t seed, int64_t i, int batch, int block,
                            int32_t *x, int32_t *y, char *err, size_t errlen)
{
    if (!t || !t->tokens || !x || !y || (split != 0 && split != 1) || batch < 1 || block < 1 || i < 0) {
        snprintf(err, errlen, "text batch: bad arguments");
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    const int32_t *base = split ? t->tokens + t->n_train : t->tokens;
    int64_t len = split ? t->n - t->n_train : t->n_train;
    if (len <= block) {
        snprintf(err, errlen, "the %s split has %lld tokens, too few for windows of block %d + 1",
                 split ? "validation" : "training", (long long)len, block);
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    uint64_t key = wgml_text_mix(seed + (uint64_t)split);
    for (int r = 0; r < batch; r++) {
        uint64_t u = wgml_text_mix(key + (uint64_t)i * (uint64_t)batch + (uint64_t)r);
        int64_t start = (int64_t)(u % (uint64_t)(len - block));
        memcpy(x + (size_t)r * (size_t)block, base + start, (size_t)block * sizeof *x);
        memcpy(y + (size_t)r * (size_t)block, base + start + 1, (size_t)block * sizeof *y);
    }
    return WGML_OK;
}

wgml_status wgml_text_encode(const wgml_text *t, const char *s, int32_t *ids, size_t cap, size_t *n, char *err,
                             size_t errlen)
{
    size_t len = strlen(s);
    if (len > cap) {
        snprintf(err, errlen, "the text has %zu bytes, more than the %zu that fit", len, cap);
        return WGML_ERROR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < len; i++) {
        int id = t->token_of[(uint8_t)s[i]];
        if (id < 0) {
            snprintf(err, errlen, "byte %zu of the text (0x%02x) is not in the vocabulary", i, (unsigned)(uint8_t)s[i]);
            return WGML_ERROR_INVALID_ARGUMENT;
        }
        ids[i] = id;
    }
    *n = len;
    return WGML_OK;
}

void wgml_text_decode(const uint8_t *vocab, int vocab_size, const int32_t *ids, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) out[i] = ids[i] >= 0 && ids[i] < vocab_size ? (char)vocab[ids[i]] : '?';
    out[n] = 0;
}
