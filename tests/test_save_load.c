/*
 * wgml_save and wgml_load: named f32 and i32 tensors of awkward sizes (a view saved in its
 * logical order, a lazy result evaluated) and string metadata through a file and back
 * bit for bit; a file of F16 and BF16 values written by hand read as f32; bad arguments, a
 * missing, truncated or foreign file refused with messages naming what is wrong.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "/tmp/wgml_test_save_load_%d_%s", (int)getpid(), name);
}

static void round_trip(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    enum { N = 1023 };
    float a[N], m[3 * 5];
    int32_t ids[65537 % 100 + 7];
    test_fill_uniform(a, N, -3, 3);
    test_fill_uniform(m, 15, -1, 1);
    for (int i = 0; i < N_OF(ids); i++) ids[i] = (int32_t)(test_rand_u64() % 100000) - 50000;
    int64_t sa = N, sm[2] = {3, 5}, si = N_OF(ids);
    wgml_tensor *ta = test_tensor(ctx, 1, &sa, a), *tm = test_tensor(ctx, 2, sm, m), *ti = test_tensor_i32(ctx, 1, &si, ids);
    wgml_tensor *view = wgml_transpose(ctx, tm, 0, 1);                              /* [5, 3], strided */
    wgml_tensor *lazy = wgml_binary_scalar(ctx, WGML_MUL, ta, 2.0f);               /* evaluated by the save */
    const char *names[4] = {"a", "m_t", "ids", "twice_a"};
    wgml_tensor *ts[4] = {ta, view, ti, lazy};
    const char *keys[2] = {"format", "note"}, *vals[2] = {"test", "awkward sizes"};
    char path[256];
    path_of(path, sizeof path, "round.safetensors");
    CHECK_OK(ctx, wgml_save(ctx, path, 4, names, ts, 2, keys, vals));
    wgml_file *f = NULL;
    CHECK_OK(ctx, wgml_load(ctx, path, &f));
    CHECK(wgml_file_count(f) == 4 && wgml_file_find(f, "ids") >= 0 && wgml_file_find(f, "nope") == -1);
    CHECK(wgml_file_meta(f, "note") && strcmp(wgml_file_meta(f, "note"), "awkward sizes") == 0 && !wgml_file_meta(f, "x"));
    /* the keys listed, each once; none past the count */
    CHECK(wgml_file_meta_count(f) == 2 && !wgml_file_meta_key(f, 2) && !wgml_file_meta_key(f, -1) && !wgml_file_meta_key(NULL, 0));
    for (int i = 0; i < wgml_file_meta_count(f); i++) {
        const char *k = wgml_file_meta_key(f, i);
        CHECK(k && (strcmp(k, "format") == 0 || strcmp(k, "note") == 0));
        if (i > 0) CHECK(k && strcmp(k, wgml_file_meta_key(f, 0)) != 0);
    }
    wgml_tensor *ra = wgml_file_tensor(f, wgml_file_find(f, "a")), *rv = wgml_file_tensor(f, wgml_file_find(f, "m_t"));
    wgml_tensor *ri = wgml_file_tensor(f, wgml_file_find(f, "ids")), *rl = wgml_file_tensor(f, wgml_file_find(f, "twice_a"));
    CHECK(ra && rv && ri && rl && wgml_tensor_dtype(ri) == WGML_I32 && wgml_tensor_ndim(rv) == 2 && wgml_tensor_dim(rv, 0) == 5);
    float *ga = test_read_new(ctx, "a", ra, N), *gv = test_read_new(ctx, "m_t", rv, 15), *gl = test_read_new(ctx, "2a", rl, N);
    int32_t gi[N_OF(ids)];
    CHECK_OK(ctx, wgml_tensor_read_i32(ri, gi, N_OF(ids)));
    CHECK(ga && memcmp(ga, a, sizeof a) == 0);
    int bad = 0;
    for (int r = 0; gv && r < 5; r++)
        for (int c = 0; c < 3; c++) bad += gv[r * 3 + c] != m[c * 5 + r];
    for (int i = 0; gl && i < N; i++) bad += gl[i] != 2.0f * a[i];
    CHECK(bad == 0 && memcmp(gi, ids, sizeof ids) == 0);
    free(ga), free(gv), free(gl);
    wgml_tensor_free(ra), wgml_tensor_free(rv), wgml_tensor_free(ri), wgml_tensor_free(rl);
    CHECK(wgml_file_tensor(f, 4) == NULL && test_message_has(ctx, "index 4"));
    wgml_file_free(f);

    /* bad arguments and files */
    const char *dup[2] = {"a", "a"};
    wgml_tensor *two[2] = {ta, ta};
    CHECK(wgml_save(ctx, path, 2, dup, two, 0, NULL, NULL) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "'a'"));
    CHECK(wgml_save(ctx, path, 1, names, (wgml_tensor *[1]){NULL}, 0, NULL, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_save(ctx, NULL, 1, names, ts, 0, NULL, NULL) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_load(ctx, "/nonexistent/file.safetensors", &f) == WGML_ERROR_IO && f == NULL);
    FILE *w = fopen(path, "r+b");
    if (w) {
        fseek(w, 0, SEEK_END);
        long len = ftell(w);
        fclose(w);
        CHECK(truncate(path, len - 3) == 0);
    }
    CHECK(wgml_load(ctx, path, &f) == WGML_ERROR_FORMAT && f == NULL && test_message_has(ctx, "wgml_load"));
    remove(path);
    wgml_tensor_free(lazy), wgml_tensor_free(view);
    wgml_tensor_free(ta), wgml_tensor_free(tm), wgml_tensor_free(ti);
    wgml_clear_error(ctx);
}

/* F16 and BF16 files (as other frameworks write them) load as f32 */
static void halves_load_as_f32(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const char header[] = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}";
    const uint16_t h[4] = {0x3c00, 0xb800, 0x4248, 0x0400}, b[3] = {0x3f80, 0x4049, 0xbe80};
    const float want_h[4] = {1.0f, -0.5f, 3.140625f, 6.1035156e-5f}, want_b[3] = {1.0f, 3.140625f, -0.25f};
    char path[256];
    path_of(path, sizeof path, "halves.safetensors");
    FILE *w = fopen(path, "wb");
    CHECK(w != NULL);
    if (!w) return;
    uint64_t hl = sizeof header - 1;
    fwrite(&hl, 8, 1, w), fwrite(header, 1, hl, w), fwrite(h, 2, 4, w), fwrite(b, 2, 3, w);
    fclose(w);
    wgml_file *f = NULL;
    CHECK_OK(ctx, wgml_load(ctx, path, &f));
    wgml_tensor *th = wgml_file_tensor(f, wgml_file_find(f, "h")), *tb = wgml_file_tensor(f, wgml_file_find(f, "b"));
    float gh[4] = {0}, gb[3] = {0};
    CHECK_OK(ctx, wgml_tensor_read(th, gh, 4));
    CHECK_OK(ctx, wgml_tensor_read(tb, gb, 3));
    CHECK(memcmp(gh, want_h, sizeof gh) == 0 && memcmp(gb, want_b, sizeof gb) == 0);
    wgml_tensor_free(th), wgml_tensor_free(tb);
    wgml_file_free(f);
    remove(path);
}

int main(void)
{
    TEST_RUN(round_trip);
    TEST_RUN(halves_load_as_f32);
    return test_summary();
}
