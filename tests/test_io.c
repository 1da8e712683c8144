/* Tests of the host-side I/O layer (src/io): safetensors round trips, write failures and
   a battery of corrupt files; numbers read from text; IDX files, plain and gzip, valid and
   corrupt; the MNIST
   loader on synthetic files and, where installed, on the real Fashion-MNIST splits. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "io/idx.h"
#include "io/loader.h"
#include "io/safetensors.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

static char tmp_dir[256];

/* ------------------------------------------------------------------ helpers */

static void tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tmp_dir, name);
}

static int file_exists(const char *path)
{
    struct stat info;
    return stat(path, &info) == 0;
}

/* Entries of dir whose name contains needle. */
static int count_entries_with(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat info;
        if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) remove_tree(path);
        else remove(path);
    }
    closedir(d);
    rmdir(dir);
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    int ok = (len == 0 || fwrite(data, 1, len, fp) == len);
    return (fclose(fp) == 0) && ok;
}

static int write_gz_file(const char *path, const void *data, size_t len)
{
    gzFile f = gzopen(path, "wb");
    if (!f) return 0;
    int ok = (len == 0 || gzwrite(f, data, (unsigned)len) == (int)len);
    return (gzclose(f) == Z_OK) && ok;
}

/* The whole file in a malloc'd buffer (NULL on failure). */
static uint8_t *read_whole_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    if (buf && fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *len = (size_t)size;
    return buf;
}

/* Parses a copy in a buffer of exactly len bytes, so ASan sees any read past its end. */
static wgml_status parse_exact(const uint8_t *bytes, size_t len, char *err, size_t errlen)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len) memcpy(copy, bytes, len);
    wgml_st_file f;
    wgml_status st = wgml_safetensors_parse(len ? copy : NULL, len, &f, err, errlen);
    if (st == WGML_OK) {
        /* Whatever parsed must be self-consistent (wgml_st_find is a linear search:
           look up only the first tensors of a large file). */
        for (int i = 0; i < f.count; i++) {
            CHECK(f.tensors[i].ndim >= 0 && f.tensors[i].ndim <= 4);
            if (i < 100) CHECK(wgml_st_find(&f, f.tensors[i].name) != NULL);
        }
    } else {
        CHECK(f.count == 0 && f.tensors == NULL && f.meta_count == 0);
        CHECK(err[0] != '\0');
    }
    wgml_st_file_free(&f);
    free(copy);
    return st;
}

/* A safetensors buffer: the header length, header text as given, data_len zero bytes. */
static uint8_t *make_st(const char *header, uint64_t header_len_field, size_t data_len,
                        size_t *len)
{
    size_t header_len = strlen(header);
    *len = 8 + header_len + data_len;
    uint8_t *buf = calloc(1, *len);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(header_len_field >> (8 * i));
    memcpy(buf + 8, header, header_len);
    return buf;
}

static wgml_status parse_header_text(const char *header, size_t data_len, char *err,
                                     size_t errlen)
{
    size_t len;
    uint8_t *buf = make_st(header, strlen(header), data_len, &len);
    wgml_status st = parse_exact(buf, len, err, errlen);
    free(buf);
    return st;
}

static wgml_st_tensor make_tensor(const char *name, int ndim, const int64_t *shape)
{
    wgml_st_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    t.data = numel ? malloc(numel * sizeof(float)) : NULL;
    if (numel) test_fill_uniform(t.data, numel, -3.0, 3.0);
    return t;
}

static size_t tensor_numel(const wgml_st_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

/* ------------------------------------------------------------------ safetensors */

static void test_st_roundtrip(void)
{
    const int64_t s1[] = {1}, s7[] = {7}, s3x5[] = {3, 5}, s4d[] = {2, 3, 4, 5},
                  s_empty[] = {2, 0}, s_bits[] = {64};
    wgml_st_tensor tensors[7];
    tensors[0] = make_tensor("scalar", 0, NULL);
    tensors[1] = make_tensor("one", 1, s1);
    tensors[2] = make_tensor("layer.7.bias", 1, s7);
    tensors[3] = make_tensor("w3x5", 2, s3x5);
    tensors[4] = make_tensor("four_d", 4, s4d);
    tensors[5] = make_tensor("empty", 2, s_empty);
    tensors[6] = make_tensor("raw_bits", 1, s_bits);
    /* Raw random bits: NaNs with payloads, infinities, subnormals, -0 must survive. */
    for (int i = 0; i < 64; i++) {
        uint32_t bits = (uint32_t)test_rand_u64();
        if (i == 0) bits = 0x7fc00001u; /* quiet NaN with a payload */
        if (i == 1) bits = 0xff800000u; /* -inf */
        if (i == 2) bits = 0x00000001u; /* smallest subnormal */
        if (i == 3) bits = 0x80000000u; /* -0 */
        memcpy(&tensors[6].data[i], &bits, sizeof bits);
    }
    const char *keys[] = {"format", "step", "note"};
    const char *values[] = {"wgml", "42", "h\xc3\xa9llo, \"quoted\" \\ tab\t"};
    char path[512], err[512];
    tmp_path(path, sizeof path, "model.safetensors");

    /* Write something else first: the second write must replace it whole. */
    CHECK(wgml_safetensors_write(path, tensors, 2, NULL, NULL, 0, err, sizeof err) == WGML_OK);
    wgml_status st = wgml_safetensors_write(path, tensors, 7, keys, values, 3, err, sizeof err);
    CHECK(st == WGML_OK);
    if (st != WGML_OK) fprintf(stderr, "  write: %s\n", err);
    CHECK(count_entries_with(tmp_dir, ".tmp.") == 0);

    /* Layout: header padded to 8 bytes, data tight after it. */
    size_t len = 0;
    uint8_t *bytes = read_whole_file(path, &len);
    CHECK(bytes != NULL);
    if (bytes) {
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
        size_t data_bytes = 0;
        for (int i = 0; i < 7; i++) data_bytes += tensor_numel(&tensors[i]) * sizeof(float);
        CHECK(header_len % 8 == 0);
        CHECK(len == 8 + header_len + data_bytes);
    }

    for (int pass = 0; pass < 2; pass++) {
        /* pass 0 reads the file, pass 1 parses the same bytes from memory */
        wgml_st_file f;
        st = pass == 0 ? wgml_safetensors_read(path, &f, err, sizeof err)
                       : wgml_safetensors_parse(bytes, len, &f, err, sizeof err);
        CHECK(st == WGML_OK);
        if (st != WGML_OK) {
            fprintf(stderr, "  read: %s\n", err);
            continue;
        }
        CHECK(f.count == 7);
        for (int i = 0; i < 7 && i < f.count; i++) {
            const wgml_st_tensor *want = &tensors[i], *got = &f.tensors[i];
            CHECK(strcmp(got->name, want->name) == 0); /* written order is kept */
            CHECK(got->ndim == want->ndim);
            for (int d = 0; d < 4; d++) CHECK(got->shape[d] == want->shape[d]);
            size_t n = tensor_numel(want);
            CHECK(n == 0 ? got->data == NULL
                         : got->data && memcmp(got->data, want->data, n * sizeof(float)) == 0);
            CHECK(wgml_st_find(&f, want->name) == got);
        }
        CHECK(wgml_st_find(&f, "missing") == NULL);
        CHECK(f.meta_count == 3);
        for (int i = 0; i < 3; i++) {
            const char *v = wgml_st_meta(&f, keys[i]);
            CHECK(v && strcmp(v, values[i]) == 0);
        }
        CHECK(wgml_st_meta(&f, "missing") == NULL);
        wgml_st_file_free(&f);
        wgml_st_file_free(&f); /* freeing twice is safe */
    }
    free(bytes);

    /* No tensors and no metadata is a valid file too. */
    wgml_st_file f;
    CHECK(wgml_safetensors_write(path, NULL, 0, NULL, NULL, 0, err, sizeof err) == WGML_OK);
    CHECK(wgml_safetensors_read(path, &f, err, sizeof err) == WGML_OK);
    CHECK(f.count == 0 && f.meta_count == 0);
    wgml_st_file_free(&f);

    remove(path);
    for (int i = 0; i < 7; i++) free(tensors[i].data);
}

static void test_st_write_errors(void)
{
    const int64_t s3[] = {3};
    wgml_st_tensor t = make_tensor("w", 1, s3);
    char path[512], err[512];

    /* A missing directory: WGML_ERROR_IO, nothing created. */
    tmp_path(path, sizeof path, "no_such_dir/model.safetensors");
    CHECK(wgml_safetensors_write(path, &t, 1, NULL, NULL, 0, err, sizeof err) == WGML_ERROR_IO);
    fprintf(stderr, "  missing dir: %s\n", err);
    CHECK(strstr(err, "no_such_dir") != NULL);
    char missing_dir[512];
    tmp_path(missing_dir, sizeof missing_dir, "no_such_dir");
    CHECK(!file_exists(missing_dir));
    CHECK(count_entries_with(tmp_dir, ".tmp.") == 0);

    /* The target is a directory: the temp file is written, rename fails, and the temp
       file must be gone afterwards. */
    tmp_path(path, sizeof path, "a_directory");
    CHECK(mkdir(path, 0700) == 0);
    CHECK(wgml_safetensors_write(path, &t, 1, NULL, NULL, 0, err, sizeof err) == WGML_ERROR_IO);
    fprintf(stderr, "  rename over a directory: %s\n", err);
    CHECK(count_entries_with(tmp_dir, ".tmp.") == 0);
    rmdir(path);

    /* Bad arguments never create the file. */
    tmp_path(path, sizeof path, "bad.safetensors");
    wgml_st_tensor bad[2];
    const char *key_ok[] = {"k"}, *value_ok[] = {"v"};
    char long_key[80], long_value[300];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    memset(long_value, 'v', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    const char *long_keys[] = {long_key}, *long_values[] = {long_value};
    const char *dup_keys[] = {"k", "k"}, *dup_values[] = {"a", "b"};
    const char *bad_utf8[] = {"\xff\xfe"};

    CHECK(wgml_safetensors_write(NULL, &t, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, &t, -1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, NULL, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, &t, 1, NULL, NULL, 1, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);

    bad[0] = t;
    bad[0].ndim = 5;
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    bad[0] = t;
    bad[0].shape[0] = -3;
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    bad[0] = t;
    bad[1] = t; /* the same name twice */
    CHECK(wgml_safetensors_write(path, bad, 2, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    fprintf(stderr, "  duplicate name: %s\n", err);
    bad[0] = t;
    snprintf(bad[0].name, sizeof bad[0].name, "__metadata__");
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    bad[0].name[0] = '\0';
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    memset(bad[0].name, 'n', sizeof bad[0].name); /* no terminating NUL */
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    snprintf(bad[0].name, sizeof bad[0].name, "%s", "\xc3\x28"); /* invalid UTF-8 */
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    bad[0] = t;
    bad[0].data = NULL;
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    bad[0] = t;
    bad[0].ndim = 4;
    bad[0].shape[0] = bad[0].shape[1] = bad[0].shape[2] = bad[0].shape[3] = (int64_t)1 << 20;
    CHECK(wgml_safetensors_write(path, bad, 1, NULL, NULL, 0, err, sizeof err) ==
          WGML_ERROR_OVERFLOW);
    fprintf(stderr, "  overflow: %s\n", err);
    CHECK(wgml_safetensors_write(path, &t, 1, long_keys, value_ok, 1, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, &t, 1, key_ok, long_values, 1, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, &t, 1, dup_keys, dup_values, 2, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_safetensors_write(path, &t, 1, key_ok, bad_utf8, 1, err, sizeof err) ==
          WGML_ERROR_INVALID_ARGUMENT);
    CHECK(!file_exists(path));
    CHECK(count_entries_with(tmp_dir, ".tmp.") == 0);

    /* Reading what is not there, or not a file. */
    wgml_st_file f;
    CHECK(wgml_safetensors_read(path, &f, err, sizeof err) == WGML_ERROR_IO);
    CHECK(wgml_safetensors_read(tmp_dir, &f, err, sizeof err) == WGML_ERROR_IO);
    CHECK(wgml_safetensors_read(NULL, &f, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT);
    free(t.data);
}

typedef struct corrupt_case {
    const char *what;
    const char *header;
    size_t data_len;
    wgml_status want;
} corrupt_case;

#define ENTRY(name, dtype, shape, offsets) \
    "\"" name "\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offsets "}"

static void test_st_corrupt_headers(void)
{
    static const corrupt_case cases[] = {
        {"valid baseline", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") "}", 8, WGML_OK},
        {"valid scalar", "{" ENTRY("a", "\"F32\"", "[]", "[0,4]") "}", 4, WGML_OK},
        {"valid empty tensor", "{" ENTRY("a", "\"F32\"", "[3,0]", "[0,0]") "}", 0, WGML_OK},
        {"valid empty header", "{}", 0, WGML_OK},
        {"valid padded header", "{}      ", 0, WGML_OK},
        {"valid metadata", "{\"__metadata__\":{\"k\":\"v\"}}", 0, WGML_OK},
        {"valid adjacent", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                           ENTRY("b", "\"F32\"", "[2]", "[8,16]") "}", 16, WGML_OK},
        {"valid empty tensors at the seams", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                      ENTRY("e", "\"F32\"", "[0]", "[8,8]") "," ENTRY("z", "\"F32\"", "[0,3]", "[0,0]") "}",
         8, WGML_OK},
        {"empty header", "", 0, WGML_ERROR_FORMAT},
        {"not JSON", "{\"a\":", 0, WGML_ERROR_FORMAT},
        {"garbage", "\x01\x02\x03", 0, WGML_ERROR_FORMAT},
        {"JSON array", "[1,2]", 0, WGML_ERROR_FORMAT},
        {"JSON string", "\"x\"", 0, WGML_ERROR_FORMAT},
        {"trailing JSON", "{}{}", 0, WGML_ERROR_FORMAT},
        {"entry is a number", "{\"a\":5}", 0, WGML_ERROR_FORMAT},
        {"entry is an array", "{\"a\":[]}", 0, WGML_ERROR_FORMAT},
        {"entry is null", "{\"a\":null}", 0, WGML_ERROR_FORMAT},
        {"missing dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         WGML_ERROR_FORMAT},
        {"dtype not a string", "{" ENTRY("a", "5", "[2]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"valid F16", "{" ENTRY("a", "\"F16\"", "[4]", "[0,8]") "}", 8, WGML_OK},
        {"F16 sized as F32", "{" ENTRY("a", "\"F16\"", "[4]", "[0,16]") "}", 16, WGML_ERROR_FORMAT},
        {"dtype F64", "{" ENTRY("a", "\"F64\"", "[1]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"dtype unknown", "{" ENTRY("a", "\"f32\"", "[2]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
         WGML_ERROR_FORMAT},
        {"shape not an array", "{" ENTRY("a", "\"F32\"", "2", "[0,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"shape of 5 dims", "{" ENTRY("a", "\"F32\"", "[1,1,1,1,2]", "[0,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"negative dim", "{" ENTRY("a", "\"F32\"", "[-2]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"real dim", "{" ENTRY("a", "\"F32\"", "[2.0]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"string dim", "{" ENTRY("a", "\"F32\"", "[\"2\"]", "[0,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"boolean dim", "{" ENTRY("a", "\"F32\"", "[true]", "[0,4]") "}", 4,
         WGML_ERROR_FORMAT},
        {"dim past int64", "{" ENTRY("a", "\"F32\"", "[99999999999999999999]", "[0,8]") "}",
         8, WGML_ERROR_FORMAT},
        {"numel overflow",
         "{" ENTRY("a", "\"F32\"", "[4294967296,4294967296,4294967296]", "[0,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"byte size overflow", "{" ENTRY("a", "\"F32\"", "[4611686018427387904]", "[0,8]") "}",
         8, WGML_ERROR_FORMAT},
        {"missing offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, WGML_ERROR_FORMAT},
        {"offsets not an array", "{" ENTRY("a", "\"F32\"", "[2]", "8") "}", 8,
         WGML_ERROR_FORMAT},
        {"one offset", "{" ENTRY("a", "\"F32\"", "[2]", "[0]") "}", 8, WGML_ERROR_FORMAT},
        {"three offsets", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"string offset", "{" ENTRY("a", "\"F32\"", "[2]", "[0,\"8\"]") "}", 8,
         WGML_ERROR_FORMAT},
        {"real offset", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8.0]") "}", 8, WGML_ERROR_FORMAT},
        {"begin after end", "{" ENTRY("a", "\"F32\"", "[2]", "[8,0]") "}", 8,
         WGML_ERROR_FORMAT},
        {"negative begin", "{" ENTRY("a", "\"F32\"", "[2]", "[-8,0]") "}", 8,
         WGML_ERROR_FORMAT},
        {"end past the data", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") "}", 4,
         WGML_ERROR_FORMAT},
        {"huge end", "{" ENTRY("a", "\"F32\"", "[2]", "[0,9223372036854775807]") "}", 8,
         WGML_ERROR_FORMAT},
        {"size mismatch", "{" ENTRY("a", "\"F32\"", "[3]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        {"size mismatch scalar", "{" ENTRY("a", "\"F32\"", "[]", "[0,0]") "}", 0,
         WGML_ERROR_FORMAT},
        {"name of 127 bytes",
         "{" ENTRY("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "\"F32\"", "[2]", "[0,8]") "}",
         8, WGML_OK},
        {"name of 128 bytes",
         "{" ENTRY("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "\"F32\"", "[2]", "[0,8]") "}",
         8, WGML_ERROR_FORMAT},
        {"NUL in a name", "{" ENTRY("a\\u0000b", "\"F32\"", "[2]", "[0,8]") "}", 8,
         WGML_ERROR_FORMAT},
        {"duplicate names", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                            ENTRY("a", "\"F32\"", "[2]", "[8,16]") "}", 16, WGML_ERROR_FORMAT},
        {"metadata a number", "{\"__metadata__\":5}", 0, WGML_ERROR_FORMAT},
        {"metadata null", "{\"__metadata__\":null}", 0, WGML_ERROR_FORMAT},
        {"metadata value a number", "{\"__metadata__\":{\"k\":1}}", 0, WGML_ERROR_FORMAT},
        {"metadata value null", "{\"__metadata__\":{\"k\":null}}", 0, WGML_ERROR_FORMAT},
        {"metadata value an object", "{\"__metadata__\":{\"k\":{}}}", 0, WGML_ERROR_FORMAT},
        {"metadata key of 64 bytes",
         "{\"__metadata__\":{\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\""
         ":\"v\"}}", 0, WGML_ERROR_FORMAT},
        {"overlap", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                    ENTRY("b", "\"F32\"", "[2]", "[4,12]") "}", 12, WGML_ERROR_FORMAT},
        {"same range twice", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                             ENTRY("b", "\"F32\"", "[2]", "[0,8]") "}", 8, WGML_ERROR_FORMAT},
        /* The tensors must cover the data exactly: no gap, nothing after the last one. */
        {"gap between tensors", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                                ENTRY("b", "\"F32\"", "[1]", "[12,16]") "}", 16, WGML_ERROR_FORMAT},
        {"gap before the first", "{" ENTRY("a", "\"F32\"", "[1]", "[4,8]") "}", 8, WGML_ERROR_FORMAT},
        {"one byte after the data", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") "}", 9, WGML_ERROR_FORMAT},
        {"data but no tensors", "{}", 4, WGML_ERROR_FORMAT},
        {"empty tensor inside another", "{" ENTRY("a", "\"F32\"", "[2]", "[0,8]") ","
                                        ENTRY("e", "\"F32\"", "[0]", "[4,4]") "}", 8, WGML_ERROR_FORMAT},
        {"range inside another", "{" ENTRY("a", "\"F32\"", "[4]", "[0,16]") ","
                                 ENTRY("b", "\"F32\"", "[1]", "[4,8]") ","
                                 ENTRY("c", "\"F32\"", "[1]", "[16,20]") "}", 20,
         WGML_ERROR_FORMAT},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const corrupt_case *c = &cases[i];
        wgml_status st = parse_header_text(c->header, c->data_len, err, sizeof err);
        if (st != c->want)
            fprintf(stderr, "FAIL %s: case '%s': got %s, want %s: %s\n", test_current,
                    c->what, wgml_status_name(st), wgml_status_name(c->want), err);
        CHECK(st == c->want);
        if (st != WGML_OK) fprintf(stderr, "  %-24s -> %s\n", c->what, err);
    }

    /* Long metadata: a 255-byte value is kept whole, 256 bytes is refused. */
    char header[600];
    char value[257];
    memset(value, 'v', 256);
    value[256] = '\0';
    snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"%s\"}}", value);
    CHECK(parse_header_text(header, 0, err, sizeof err) == WGML_ERROR_FORMAT);
    value[255] = '\0';
    snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"%s\"}}", value);
    size_t len;
    uint8_t *buf = make_st(header, strlen(header), 0, &len);
    wgml_st_file f;
    CHECK(wgml_safetensors_parse(buf, len, &f, err, sizeof err) == WGML_OK);
    CHECK(wgml_st_meta(&f, "k") && strlen(wgml_st_meta(&f, "k")) == 255);
    wgml_st_file_free(&f);
    free(buf);
}

/* F16 and BF16 are read as f32 (every value exactly: normal, subnormal, zero, infinity, NaN,
   negative), I32 as its bits with dtype I32, and the writer writes I32 back as I32. */
static void test_st_other_dtypes(void)
{
    const char *header = "{" ENTRY("h", "\"F16\"", "[7]", "[0,14]") "," ENTRY("b", "\"BF16\"", "[3]", "[14,20]") ","
                         ENTRY("i", "\"I32\"", "[2]", "[20,28]") "}";
    static const uint16_t halves[7] = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0xfc00, 0x7e00};
    static const float want_h[7] = {1.0f, -2.0f, 5.9604645e-8f, 6.0975552e-5f, 65504.0f, -INFINITY, NAN};
    static const uint16_t bf[3] = {0x3f80, 0xc0a0, 0x0001};
    static const int32_t ints[2] = {-7, 2147483647};
    size_t len;
    uint8_t *buf = make_st(header, strlen(header), 28, &len);
    uint8_t *data = buf + 8 + strlen(header);
    memcpy(data, halves, 14);
    memcpy(data + 14, bf, 6);
    memcpy(data + 20, ints, 8);
    wgml_st_file f;
    char err[512];
    CHECK(wgml_safetensors_parse(buf, len, &f, err, sizeof err) == WGML_OK);
    const wgml_st_tensor *h = wgml_st_find(&f, "h"), *b = wgml_st_find(&f, "b"), *i = wgml_st_find(&f, "i");
    CHECK(h && b && i && h->dtype == WGML_F32 && b->dtype == WGML_F32 && i->dtype == WGML_I32);
    for (int k = 0; h && k < 7; k++) {
        int same = isnan(want_h[k]) ? isnan(h->data[k]) : h->data[k] == want_h[k];
        if (!same) FAILF("F16 0x%04x read as %.9g, want %.9g", halves[k], (double)h->data[k], (double)want_h[k]);
    }
    uint32_t tiny = 0x00010000u;
    float tinyf;
    memcpy(&tinyf, &tiny, 4);
    CHECK(b && b->data[0] == 1.0f && b->data[1] == -5.0f && b->data[2] == tinyf);
    int32_t got[2] = {0, 0};
    if (i) memcpy(got, i->data, 8);
    CHECK(got[0] == -7 && got[1] == 2147483647);
    /* written back: I32 stays I32 */
    char path[512];
    tmp_path(path, sizeof path, "dtypes.safetensors");
    CHECK(wgml_safetensors_write(path, f.tensors, f.count, NULL, NULL, 0, err, sizeof err) == WGML_OK);
    wgml_st_file g;
    CHECK(wgml_safetensors_read(path, &g, err, sizeof err) == WGML_OK);
    const wgml_st_tensor *i2 = wgml_st_find(&g, "i");
    CHECK(i2 && i2->dtype == WGML_I32 && memcmp(i2->data, ints, 8) == 0);
    wgml_st_file_free(&g);
    remove(path);
    wgml_st_file_free(&f);
    free(buf);
}

/* Raw framing: short files and header lengths that lie. */
static void test_st_corrupt_framing(void)
{
    char err[512];
    uint8_t zeros[8] = {0};
    for (size_t n = 0; n < 8; n++) CHECK(parse_exact(zeros, n, err, sizeof err) != WGML_OK);
    fprintf(stderr, "  7 bytes -> %s\n", err);

    const uint64_t lies[] = {0, 3, 100000001ull, 0xffffffffffffffffull, 0x8000000000000000ull};
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        size_t len;
        uint8_t *buf = make_st("{}", lies[i], 0, &len);
        CHECK(parse_exact(buf, len, err, sizeof err) == WGML_ERROR_FORMAT);
        fprintf(stderr, "  header length %llu -> %s\n", (unsigned long long)lies[i], err);
        free(buf);
    }
    /* A header length that claims everything but one byte more than there is. */
    size_t len;
    uint8_t *buf = make_st("{}", 3, 0, &len);
    CHECK(parse_exact(buf, len, err, sizeof err) == WGML_ERROR_FORMAT);
    free(buf);

    /* A file as wgml writes it (header padded with spaces), then its header length one
       byte short: the JSON still parses, and every tensor would be read one byte early. */
    const int64_t s2x3[] = {2, 3}, s5[] = {5};
    wgml_st_tensor t[2] = {make_tensor("W", 2, s2x3), make_tensor("bias", 1, s5)};
    char path[512];
    tmp_path(path, sizeof path, "framing.safetensors");
    CHECK(wgml_safetensors_write(path, t, 2, NULL, NULL, 0, err, sizeof err) == WGML_OK);
    uint8_t *bytes = read_whole_file(path, &len);
    CHECK(bytes != NULL && len > 16);
    if (bytes) {
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
        CHECK(bytes[8 + header_len - 1] == ' '); /* the case needs padding to cut into */
        CHECK(parse_exact(bytes, len, err, sizeof err) == WGML_OK);
        uint8_t *changed = malloc(len + 1);
        memcpy(changed, bytes, len);
        changed[0] = (uint8_t)(bytes[0] - 1);
        CHECK(parse_exact(changed, len, err, sizeof err) == WGML_ERROR_FORMAT);
        CHECK(strstr(err, "cover 44 of the 45 data bytes") != NULL);
        fprintf(stderr, "  header length one short -> %s\n", err);
        /* a byte appended after the data */
        memcpy(changed, bytes, len);
        changed[len] = 0;
        CHECK(parse_exact(changed, len + 1, err, sizeof err) == WGML_ERROR_FORMAT);
        CHECK(strstr(err, "cover 44 of the 45 data bytes") != NULL);
        fprintf(stderr, "  one byte appended -> %s\n", err);
        /* and through a file, as wgml eval reads it */
        CHECK(write_file(path, changed, len + 1));
        wgml_st_file f;
        CHECK(wgml_safetensors_read(path, &f, err, sizeof err) == WGML_ERROR_FORMAT);
        CHECK(strstr(err, "framing.safetensors") != NULL);
        wgml_st_file_free(&f);
        free(changed);
    }
    free(bytes);
    remove(path);
    free(t[0].data);
    free(t[1].data);
}

static void test_st_too_many_tensors(void)
{
    /* WGML_ST_MAX_TENSORS empty tensors parse; one more is refused. */
    for (int extra = 0; extra <= 1; extra++) {
        int n = WGML_ST_MAX_TENSORS + extra;
        size_t cap = (size_t)n * 64 + 16, used = 0;
        char *header = malloc(cap);
        used += (size_t)snprintf(header + used, cap - used, "{");
        for (int i = 0; i < n; i++)
            used += (size_t)snprintf(header + used, cap - used,
                                     "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],"
                                     "\"data_offsets\":[0,0]}", i ? "," : "", i);
        snprintf(header + used, cap - used, "}");
        char err[512];
        wgml_status st = parse_header_text(header, 0, err, sizeof err);
        CHECK(st == (extra ? WGML_ERROR_FORMAT : WGML_OK));
        if (extra) fprintf(stderr, "  %d tensors -> %s\n", n, err);
        free(header);
    }
}

/* Truncations of a valid file at every length, and random byte flips in its header. */
static void test_st_truncation_and_flips(void)
{
    const int64_t s3x5[] = {3, 5}, s7[] = {7}, s2x3x4x5[] = {2, 3, 4, 5};
    wgml_st_tensor tensors[4];
    tensors[0] = make_tensor("w", 2, s3x5);
    tensors[1] = make_tensor("b", 1, s7);
    tensors[2] = make_tensor("s", 0, NULL);
    tensors[3] = make_tensor("big", 4, s2x3x4x5);
    const char *keys[] = {"format"}, *values[] = {"wgml"};
    char path[512], cut_path[512], err[512];
    tmp_path(path, sizeof path, "valid.safetensors");
    tmp_path(cut_path, sizeof cut_path, "cut.safetensors");
    CHECK(wgml_safetensors_write(path, tensors, 4, keys, values, 1, err, sizeof err) ==
          WGML_OK);
    size_t len = 0;
    uint8_t *bytes = read_whole_file(path, &len);
    CHECK(bytes != NULL && len > 8);
    if (!bytes) goto out;

    int refused = 0;
    for (size_t cut = 0; cut < len; cut++) {
        wgml_status st = parse_exact(bytes, cut, err, sizeof err);
        refused += st == WGML_ERROR_FORMAT;
        /* the same through a file */
        wgml_st_file f;
        CHECK(write_file(cut_path, bytes, cut));
        wgml_status file_st = wgml_safetensors_read(cut_path, &f, err, sizeof err);
        CHECK(file_st == WGML_ERROR_FORMAT);
        CHECK(strstr(err, "cut.safetensors") != NULL); /* the message names the file */
        wgml_st_file_free(&f);
    }
    CHECK(refused == (int)len);
    CHECK(parse_exact(bytes, len, err, sizeof err) == WGML_OK);
    fprintf(stderr, "  truncations: %d of %zu lengths refused\n", refused, len);
    remove(cut_path);

    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
    uint8_t *mutated = malloc(len);
    int flips = 4000, errors = 0;
    for (int it = 0; it < flips; it++) {
        memcpy(mutated, bytes, len);
        int nflips = 1 + (int)(test_rand_u64() % 3);
        for (int k = 0; k < nflips; k++) {
            size_t at = (size_t)(test_rand_u64() % (8 + header_len));
            mutated[at] ^= (uint8_t)(1 + test_rand_u64() % 255);
        }
        errors += parse_exact(mutated, len, err, sizeof err) != WGML_OK;
    }
    /* Some flips leave a valid file (a changed letter in a name, a space that becomes
       another blank); most must not. */
    CHECK(errors > flips / 2);
    fprintf(stderr, "  header byte flips: %d of %d refused, the rest parsed consistently\n",
            errors, flips);
    free(mutated);
    free(bytes);
out:
    remove(path);
    for (int i = 0; i < 4; i++) free(tensors[i].data);
}

/* ------------------------------------------------------------------ numbers in text */

/* Metadata and flags are text: only a whole number in range is taken. */
static void test_parse_numbers(void)
{
    char err[512];
    static const struct { const char *text; int64_t lo, hi; int ok; int64_t want; } ints[] = {
        {"0", 0, 100, 1, 0},
        {"42", 0, 100, 1, 42},
        {"100", 0, 100, 1, 100},
        {"-3", -5, 5, 1, -3},
        {"2147483647", 0, 2147483647, 1, 2147483647},
        {"9223372036854775807", 0, INT64_MAX, 1, INT64_MAX},
        {"-3", 0, 2147483647, 0, 0},            /* a negative epoch */
        {"99999999999", 0, 2147483647, 0, 0},   /* wraps in an int */
        {"9223372036854775808", 0, INT64_MAX, 0, 0}, /* past int64: ERANGE */
        {"101", 0, 100, 0, 0},
        {"", 0, 100, 0, 0},
        {"abc", 0, 100, 0, 0},
        {"12abc", 0, 100, 0, 0},
        {"1.5", 0, 100, 0, 0},
        {" 7", 0, 100, 0, 0},
        {"7 ", 0, 100, 0, 0},
        {"+7", 0, 100, 0, 0},
        {"0x10", 0, 100, 0, 0},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = -12345;
        wgml_status st = wgml_parse_i64("metadata 'epoch'", ints[i].text, ints[i].lo, ints[i].hi, &v, err, sizeof err);
        CHECK(st == (ints[i].ok ? WGML_OK : WGML_ERROR_FORMAT));
        if (ints[i].ok) {
            CHECK(v == ints[i].want);
        } else {
            CHECK(v == -12345); /* untouched on failure */
            CHECK(strstr(err, "metadata 'epoch'") != NULL);
            if (st != WGML_OK && i == 6) fprintf(stderr, "  %s\n", err);
        }
        if ((st == WGML_OK) != ints[i].ok) fprintf(stderr, "  case '%s' gave %s\n", ints[i].text, wgml_status_name(st));
    }
    CHECK(wgml_parse_i64("x", NULL, 0, 1, &(int64_t){0}, err, sizeof err) == WGML_ERROR_FORMAT);

    uint64_t u = 0;
    CHECK(wgml_parse_u64("seed", "18446744073709551615", &u, err, sizeof err) == WGML_OK && u == UINT64_MAX);
    CHECK(wgml_parse_u64("seed", "7", &u, err, sizeof err) == WGML_OK && u == 7);
    CHECK(wgml_parse_u64("seed", "-1", &u, err, sizeof err) == WGML_ERROR_FORMAT); /* strtoull would wrap it */
    CHECK(wgml_parse_u64("seed", "18446744073709551616", &u, err, sizeof err) == WGML_ERROR_FORMAT);
    CHECK(wgml_parse_u64("seed", "7x", &u, err, sizeof err) == WGML_ERROR_FORMAT);
    CHECK(wgml_parse_u64("seed", "", &u, err, sizeof err) == WGML_ERROR_FORMAT);
    CHECK(u == 7);

    float f = 0;
    CHECK(wgml_parse_f32("lr", "0.00999999978", 0, 1, &f, err, sizeof err) == WGML_OK && f == 0.01f);
    CHECK(wgml_parse_f32("lr", "1e-3", 0, 1, &f, err, sizeof err) == WGML_OK && f == 1e-3f);
    CHECK(wgml_parse_f32("lr", "-0.5", -1, 1, &f, err, sizeof err) == WGML_OK && f == -0.5f);
    const char *bad_floats[] = {"nan", "inf", "-inf", "1e39", "", "0.1x", " 0.1", "2", "-0.5"};
    for (size_t i = 0; i < sizeof bad_floats / sizeof bad_floats[0]; i++) {
        wgml_status st = wgml_parse_f32("lr", bad_floats[i], 0, 1, &f, err, sizeof err);
        CHECK(st == WGML_ERROR_FORMAT);
        if (st != WGML_ERROR_FORMAT) fprintf(stderr, "  float '%s' was taken\n", bad_floats[i]);
    }
    CHECK(f == -0.5f);
}

/* ------------------------------------------------------------------ IDX */

/* An IDX image: magic 00 00 type ndim, big-endian dims, data. */
static uint8_t *make_idx(uint8_t type, int ndim, const uint32_t *dims, const uint8_t *data,
                         size_t data_len, size_t *len)
{
    *len = 4 + 4 * (size_t)ndim + data_len;
    uint8_t *buf = malloc(*len);
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = type;
    buf[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        buf[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        buf[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        buf[7 + 4 * i] = (uint8_t)dims[i];
    }
    if (data_len) memcpy(buf + 4 + 4 * ndim, data, data_len);
    return buf;
}

static wgml_status load_idx_bytes(const uint8_t *bytes, size_t len, int gzip, wgml_idx *out,
                                  char *err, size_t errlen)
{
    char path[512];
    tmp_path(path, sizeof path, gzip ? "case.idx.gz" : "case.idx");
    CHECK(gzip ? write_gz_file(path, bytes, len) : write_file(path, bytes, len));
    wgml_status st = wgml_idx_load(path, out, err, errlen);
    remove(path);
    return st;
}

static void test_idx_valid(void)
{
    uint8_t data[120];
    for (int i = 0; i < 120; i++) data[i] = (uint8_t)(i * 37 + 11);
    const uint32_t d1[] = {5}, d2[] = {6, 20}, d3[] = {2, 3, 4}, d4[] = {1, 2, 3, 4};
    const uint32_t *dims[] = {d1, d2, d3, d4};
    const size_t sizes[] = {5, 120, 24, 24};
    char err[512];
    for (int nd = 1; nd <= 4; nd++) {
        for (int gzip = 0; gzip <= 1; gzip++) {
            size_t len;
            uint8_t *bytes = make_idx(0x08, nd, dims[nd - 1], data, sizes[nd - 1], &len);
            wgml_idx idx;
            wgml_status st = load_idx_bytes(bytes, len, gzip, &idx, err, sizeof err);
            CHECK(st == WGML_OK);
            if (st != WGML_OK) fprintf(stderr, "  ndim %d gzip %d: %s\n", nd, gzip, err);
            CHECK(idx.ndim == nd);
            for (int d = 0; d < nd; d++) CHECK(idx.dims[d] == dims[nd - 1][d]);
            CHECK(idx.size == sizes[nd - 1]);
            CHECK(idx.data && memcmp(idx.data, data, sizes[nd - 1]) == 0);
            wgml_idx_free(&idx);
            wgml_idx_free(&idx);
            free(bytes);
        }
    }
}

static void test_idx_corrupt(void)
{
    uint8_t data[24] = {0};
    const uint32_t d3[] = {2, 3, 4}, zero_dim[] = {2, 0, 4}, big[] = {65536, 65536},
                   huge[] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                   d5[] = {1, 1, 1, 1, 1};
    char err[512];
    for (int gzip = 0; gzip <= 1; gzip++) {
        size_t len;
        uint8_t *good = make_idx(0x08, 3, d3, data, 24, &len);
        uint8_t *buf = malloc(len + 1);
        wgml_idx idx;
        struct {
            const char *what;
            size_t len;
            int byte_at;
            uint8_t byte;
        } edits[] = {
            {"empty file", 0, -1, 0},
            {"short magic", 3, -1, 0},
            {"truncated dims", 9, -1, 0},
            {"header only", 16, -1, 0},
            {"one data byte short", len - 1, -1, 0},
            {"bad magic byte 0", len, 0, 1},
            {"bad magic byte 1", len, 1, 8},
            {"type 0x09 (signed byte)", len, 2, 0x09},
            {"type 0x0D (float)", len, 2, 0x0D},
            {"ndim 0", len, 3, 0},
            {"ndim 5", len, 3, 5},
            {"ndim 2 (data too long)", len, 3, 2},
            {"trailing byte", len + 1, -1, 0},
        };
        for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
            memcpy(buf, good, len);
            buf[len] = 0x55;
            if (edits[e].byte_at >= 0) buf[edits[e].byte_at] = edits[e].byte;
            wgml_status st = load_idx_bytes(buf, edits[e].len, gzip, &idx, err, sizeof err);
            CHECK(st == WGML_ERROR_FORMAT);
            CHECK(idx.data == NULL && idx.size == 0);
            if (st != WGML_ERROR_FORMAT)
                fprintf(stderr, "FAIL %s: %s (gzip %d): got %s\n", test_current,
                        edits[e].what, gzip, wgml_status_name(st));
            else if (gzip == 0 || e == 4)
                fprintf(stderr, "  %-26s -> %s\n", edits[e].what, err);
        }
        free(buf);
        free(good);

        /* Headers that claim impossible sizes; no data follows. */
        const uint32_t *bad_dims[] = {zero_dim, big, huge, d5};
        const int bad_ndim[] = {3, 2, 4, 5};
        for (int k = 0; k < 4; k++) {
            uint8_t *b = make_idx(0x08, bad_ndim[k], bad_dims[k], NULL, 0, &len);
            CHECK(load_idx_bytes(b, len, gzip, &idx, err, sizeof err) == WGML_ERROR_FORMAT);
            if (gzip == 0) fprintf(stderr, "  bad dims %d -> %s\n", k, err);
            free(b);
        }
        /* A header that claims 1 GiB exactly, then a few bytes: truncated, and no 1 GiB
           allocation up front (ASan would show it in the peak, this just must not fail
           for lack of memory). */
        const uint32_t gib[] = {1024, 1024, 1024};
        uint8_t *b = make_idx(0x08, 3, gib, data, 24, &len);
        CHECK(load_idx_bytes(b, len, gzip, &idx, err, sizeof err) == WGML_ERROR_FORMAT);
        if (gzip == 0) fprintf(stderr, "  1 GiB header, 24 bytes -> %s\n", err);
        free(b);
    }

    /* A gzip stream cut in the middle, and one with a broken CRC. */
    size_t len;
    uint8_t big_data[4096];
    for (int i = 0; i < 4096; i++) big_data[i] = (uint8_t)test_rand_u64();
    const uint32_t d1[] = {4096};
    uint8_t *bytes = make_idx(0x08, 1, d1, big_data, sizeof big_data, &len);
    char path[512];
    tmp_path(path, sizeof path, "stream.idx.gz");
    CHECK(write_gz_file(path, bytes, len));
    size_t gz_len = 0;
    uint8_t *gz = read_whole_file(path, &gz_len);
    CHECK(gz != NULL && gz_len > 100);
    wgml_idx idx;
    if (gz) {
        CHECK(write_file(path, gz, gz_len / 2));
        CHECK(wgml_idx_load(path, &idx, err, sizeof err) == WGML_ERROR_FORMAT);
        fprintf(stderr, "  gzip cut in half -> %s\n", err);
        CHECK(write_file(path, gz, gz_len - 4)); /* all data, no length trailer */
        CHECK(wgml_idx_load(path, &idx, err, sizeof err) == WGML_ERROR_FORMAT);
        fprintf(stderr, "  gzip without trailer -> %s\n", err);
        gz[gz_len - 6] ^= 0xff; /* inside the CRC32 */
        CHECK(write_file(path, gz, gz_len));
        CHECK(wgml_idx_load(path, &idx, err, sizeof err) == WGML_ERROR_FORMAT);
        fprintf(stderr, "  gzip bad CRC -> %s\n", err);
        free(gz);
    }
    remove(path);
    free(bytes);

    tmp_path(path, sizeof path, "does-not-exist.idx.gz");
    CHECK(wgml_idx_load(path, &idx, err, sizeof err) == WGML_ERROR_IO);
    CHECK(strstr(err, "does-not-exist.idx.gz") != NULL);
    fprintf(stderr, "  missing file -> %s\n", err);
    CHECK(wgml_idx_load(NULL, &idx, err, sizeof err) == WGML_ERROR_INVALID_ARGUMENT);
}

/* Writes <dir>/<prefix>-images-idx3-ubyte[.gz] and the labels file. */
static void write_fake_mnist(const char *dir, const char *prefix, int gzip, uint32_t n_images,
                             uint32_t side, uint32_t n_labels, uint8_t bad_label)
{
    char path[512];
    size_t len;
    size_t pixels = (size_t)n_images * side * side;
    uint8_t *img = malloc(pixels);
    for (size_t i = 0; i < pixels; i++) img[i] = (uint8_t)(i % 256);
    const uint32_t img_dims[] = {n_images, side, side};
    uint8_t *bytes = make_idx(0x08, 3, img_dims, img, pixels, &len);
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, prefix, gzip ? ".gz" : "");
    CHECK(gzip ? write_gz_file(path, bytes, len) : write_file(path, bytes, len));
    free(bytes);
    free(img);

    uint8_t labels[64];
    for (uint32_t i = 0; i < n_labels && i < 64; i++) labels[i] = (uint8_t)(i % 10);
    if (bad_label) labels[n_labels - 1] = bad_label;
    const uint32_t label_dims[] = {n_labels};
    bytes = make_idx(0x08, 1, label_dims, labels, n_labels, &len);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, prefix, gzip ? ".gz" : "");
    CHECK(gzip ? write_gz_file(path, bytes, len) : write_file(path, bytes, len));
    free(bytes);
}

static void test_mnist_synthetic(void)
{
    char dir[512], err[512];
    tmp_path(dir, sizeof dir, "mnist");
    CHECK(mkdir(dir, 0700) == 0);
    wgml_mnist m;

    write_fake_mnist(dir, "train", 1, 3, 28, 3, 0);
    write_fake_mnist(dir, "t10k", 0, 2, 28, 2, 0); /* plain files: the fallback name */
    CHECK(wgml_mnist_load(dir, 1, &m, err, sizeof err) == WGML_OK);
    CHECK(m.n == 3);
    CHECK(m.images && m.labels);
    if (m.images && m.labels) {
        CHECK(m.images[0] == 0.0f && m.images[255] == 1.0f);
        CHECK(m.images[3 * 784 - 1] == (float)((3 * 784 - 1) % 256) / 255.0f);
        CHECK(m.labels[0] == 0 && m.labels[2] == 2);
    }
    wgml_mnist_free(&m);
    CHECK(wgml_mnist_load(dir, 0, &m, err, sizeof err) == WGML_OK);
    CHECK(m.n == 2);
    wgml_mnist_free(&m);

    write_fake_mnist(dir, "train", 1, 3, 28, 4, 0); /* 3 images, 4 labels */
    CHECK(wgml_mnist_load(dir, 1, &m, err, sizeof err) == WGML_ERROR_FORMAT);
    fprintf(stderr, "  count mismatch -> %s\n", err);
    CHECK(m.images == NULL && m.labels == NULL && m.n == 0);
    write_fake_mnist(dir, "train", 1, 3, 27, 3, 0);
    CHECK(wgml_mnist_load(dir, 1, &m, err, sizeof err) == WGML_ERROR_FORMAT);
    fprintf(stderr, "  27x27 images -> %s\n", err);
    write_fake_mnist(dir, "train", 1, 3, 28, 3, 10);
    CHECK(wgml_mnist_load(dir, 1, &m, err, sizeof err) == WGML_ERROR_FORMAT);
    fprintf(stderr, "  label 10 -> %s\n", err);

    char missing[512];
    tmp_path(missing, sizeof missing, "no-mnist-here");
    CHECK(wgml_mnist_load(missing, 1, &m, err, sizeof err) == WGML_ERROR_IO);
    fprintf(stderr, "  missing dir -> %s\n", err);
    remove_tree(dir);
}

static void check_real_split(int train, int64_t want_n)
{
    char err[512];
    wgml_mnist m;
    wgml_status st = wgml_mnist_load(FASHION_MNIST_DIR, train, &m, err, sizeof err);
    CHECK(st == WGML_OK);
    if (st != WGML_OK) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    CHECK(m.n == want_n);
    size_t pixels = (size_t)m.n * 784, out_of_range = 0, nonzero = 0;
    double sum = 0;
    for (size_t i = 0; i < pixels; i++) {
        float v = m.images[i];
        out_of_range += !(v >= 0.0f && v <= 1.0f);
        nonzero += v != 0.0f;
        sum += v;
    }
    CHECK(out_of_range == 0);
    CHECK(nonzero > 0);
    int64_t per_class[10] = {0}, bad_labels = 0;
    for (int64_t i = 0; i < m.n; i++) {
        if (m.labels[i] < 10) per_class[m.labels[i]]++;
        else bad_labels++;
    }
    CHECK(bad_labels == 0);
    /* Fashion-MNIST is balanced: n/10 of each class. */
    for (int c = 0; c < 10; c++) CHECK(per_class[c] == want_n / 10);
    double mean = sum / (double)pixels;
    CHECK(mean > 0.2 && mean < 0.4); /* about 0.286 */
    fprintf(stderr, "  %s: n=%lld, mean pixel %.4f, %zu nonzero pixels, class 0..9 counts "
            "%lld..%lld\n", train ? "train" : "t10k", (long long)m.n, mean, nonzero,
            (long long)per_class[0], (long long)per_class[9]);
    wgml_mnist_free(&m);
}

static void test_fashion_mnist_real(void)
{
    if (!file_exists(FASHION_MNIST_DIR)) {
        fprintf(stderr, "  %s not installed: skipped\n", FASHION_MNIST_DIR);
        return;
    }
    check_real_split(1, 60000);
    check_real_split(0, 10000);
}

int main(void)
{
    const char *tmp_root = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/wgml_test_io.XXXXXX",
             tmp_root && *tmp_root ? tmp_root : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        fprintf(stderr, "FAIL: cannot create a temp dir\n");
        return 1;
    }
    TEST_RUN(test_st_roundtrip);
    TEST_RUN(test_st_write_errors);
    TEST_RUN(test_st_corrupt_headers);
    TEST_RUN(test_st_other_dtypes);
    TEST_RUN(test_st_corrupt_framing);
    TEST_RUN(test_st_too_many_tensors);
    TEST_RUN(test_st_truncation_and_flips);
    TEST_RUN(test_parse_numbers);
    TEST_RUN(test_idx_valid);
    TEST_RUN(test_idx_corrupt);
    TEST_RUN(test_mnist_synthetic);
    TEST_RUN(test_fashion_mnist_real);
    remove_tree(tmp_dir);
    return test_summary();
}
