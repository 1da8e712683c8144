/* Foundation: context, tensors, round trips, the pool, and every error of the runtime. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "harness.h"

static void round_trips_are_bit_exact(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const size_t sizes[] = {1, 3, 1023, 65537, (1u << 20) + 7};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *in = malloc(n * 4), *out = malloc(n * 4);
        test_fill_uniform(in, n, -1e6, 1e6);
        in[0] = -0.0f;
        if (n > 2) in[2] = INFINITY, in[1] = NAN;
        memset(out, 0xAB, n * 4);
        int64_t shape = (int64_t)n;
        wgml_tensor *t = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &shape, in, n, &t));
        CHECK_OK(ctx, wgml_tensor_read(t, out, n));
        CHECK(memcmp(in, out, n * 4) == 0);
        wgml_tensor_free(t);
        free(in);
        free(out);
    }
    /* 2-D, 3-D and 4-D shapes too */
    int64_t shapes[3][4] = {{7, 13}, {3, 5, 7}, {2, 3, 4, 5}};
    for (int k = 0; k < 3; k++) {
        int nd = k + 2;
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)shapes[k][d];
        float in[840], out[840];
        test_fill_uniform(in, n, -3, 3);
        wgml_tensor *t = NULL;
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, nd, shapes[k], in, n, &t));
        CHECK(wgml_tensor_ndim(t) == nd && wgml_tensor_numel(t) == (int64_t)n);
        CHECK(wgml_tensor_dim(t, -1) == shapes[k][nd - 1]);
        CHECK_OK(ctx, wgml_tensor_read(t, out, n));
        CHECK(memcmp(in, out, n * 4) == 0);
        wgml_tensor_free(t);
    }
}

static void zeros_and_write(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 1023;
    float buf[1023], out[1023];
    /* dirty a pool buffer of the same class first: zeros must really clear it */
    test_fill_uniform(buf, 1023, 1, 2);
    wgml_tensor *dirty = NULL, *z = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, buf, 1023, &dirty));
    wgml_tensor_free(dirty);
    CHECK_OK(ctx, wgml_tensor_zeros(ctx, 1, &n, &z));
    CHECK_OK(ctx, wgml_tensor_read(z, out, 1023));
    int zero = 1;
    for (int i = 0; i < 1023; i++) zero &= out[i] == 0.0f;
    CHECK(zero);
    CHECK_OK(ctx, wgml_tensor_write(z, buf, 1023));
    CHECK_OK(ctx, wgml_tensor_read(z, out, 1023));
    CHECK(memcmp(buf, out, sizeof buf) == 0);
    wgml_tensor_free(z);
}

static void pool_reuses_buffers(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 4099;
    float *d = malloc(4099 * 4);
    test_fill_uniform(d, 4099, -1, 1);
    wgml_stats s0, s1;
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, d, 4099, &t));
    wgml_tensor_free(t);
    wgml_stats_get(ctx, &s0);
    for (int i = 0; i < 20; i++) {
        CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, d, 4099, &t));
        wgml_tensor_free(t);
    }
    wgml_stats_get(ctx, &s1);
    CHECK(s1.buffers_live == s0.buffers_live); /* no new buffer: reused from the pool */
    CHECK(s1.bytes_uploaded == s0.bytes_uploaded + 20 * 4099 * 4);
    free(d);
}

static void stats_count_transfers(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_stats a, b;
    wgml_stats_get(ctx, &a);
    float x[7] = {1, 2, 3, 4, 5, 6, 7}, y[7];
    int64_t n = 7;
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 7, &t));
    CHECK_OK(ctx, wgml_tensor_read(t, y, 7));
    wgml_stats_get(ctx, &b);
    CHECK(b.bytes_uploaded - a.bytes_uploaded == 28);
    CHECK(b.bytes_downloaded - a.bytes_downloaded == 28);
    CHECK(b.submits - a.submits == 1);
    wgml_tensor_free(t);
}

static void bad_arguments_allocate_nothing(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_stats before, after;
    wgml_stats_get(ctx, &before);
    float data[8] = {0};
    wgml_tensor *t = (wgml_tensor *)1;
    int64_t ok[1] = {8}, zero[2] = {3, 0}, neg[1] = {-2}, five[5] = {1, 1, 1, 1, 1};
    int64_t huge[4] = {INT64_MAX / 2, 4, 1, 1};
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, ok, NULL, 8, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(t == NULL);
    CHECK(strstr(wgml_error_message(ctx), "NULL") != NULL);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, ok, data, 8, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, NULL, data, 8, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, wgml_tensor_from_data(NULL, 1, ok, data, 8, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 2, zero, data, 0, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "[3, 0]") != NULL);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, neg, data, 8, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 5, five, data, 1, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 0, ok, data, 1, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_zeros(ctx, 4, huge, &t), WGML_ERROR_OVERFLOW);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, ok, data, 7, &t), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(wgml_error_message(ctx), "7") != NULL);
    wgml_stats_get(ctx, &after);
    CHECK(after.buffers_live == before.buffers_live && after.bytes_in_use == before.bytes_in_use);

    /* reads with the wrong length or NULL */
    wgml_tensor *good = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, ok, data, 8, &good));
    float out[8];
    CHECK_STATUS(ctx, wgml_tensor_read(good, out, 9), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_read(good, NULL, 8), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_tensor_read(NULL, out, 8), WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_free(good);
}

static void past_the_adapter_limit(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_adapter_info info;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &info));
    uint64_t lim = info.max_storage_buffer_binding_size < info.max_buffer_size ? info.max_storage_buffer_binding_size
                                                                              : info.max_buffer_size;
    int64_t shape[1] = {(int64_t)(lim / 4) + 1};
    wgml_stats before, after;
    wgml_stats_get(ctx, &before);
    wgml_tensor *t = NULL;
    CHECK_STATUS(ctx, wgml_tensor_zeros(ctx, 1, shape, &t), WGML_ERROR_LIMIT);
    char want[64];
    snprintf(want, sizeof want, "%llu", (unsigned long long)(lim + 4));
    CHECK(strstr(wgml_error_message(ctx), want) != NULL); /* the size asked */
    snprintf(want, sizeof want, "%llu", (unsigned long long)lim);
    CHECK(strstr(wgml_error_message(ctx), want) != NULL); /* the limit */
    wgml_stats_get(ctx, &after);
    CHECK(after.buffers_live == before.buffers_live);
}

static void no_adapter_is_a_clear_status(void)
{
    wgml_context *ctx = NULL;
    wgml_context_desc d = {.adapter_name = "no-such-adapter-xyz"};
    CHECK_STATUS(NULL, wgml_context_create(&d, &ctx), WGML_ERROR_NO_ADAPTER);
    CHECK(ctx == NULL);
    CHECK(strstr(wgml_last_create_error(), "no-such-adapter-xyz") != NULL);
    /* a backend with no adapter on this machine: the message hints at the driver package */
    wgml_context_desc m = {.backend = WGML_BACKEND_METAL};
    CHECK_STATUS(NULL, wgml_context_create(&m, &ctx), WGML_ERROR_NO_ADAPTER);
    CHECK(strstr(wgml_last_create_error(), "mesa-vulkan-drivers") != NULL);
    CHECK_STATUS(NULL, wgml_context_create(NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
}

/* adapter_index picks among adapters of the chosen kind, modulo their number (one GPU per
   local rank); here every index lands on the same one, the first; a negative one is refused */
static void adapter_index_wraps_and_is_checked(void)
{
    wgml_context *first = NULL, *seventh = NULL, *bad = NULL;
    wgml_context_desc d0 = {0}, d7 = {.adapter_index = 7}, dn = {.adapter_index = -1};
    CHECK_OK(NULL, wgml_context_create(&d0, &first));
    CHECK_OK(NULL, wgml_context_create(&d7, &seventh));
    if (first && seventh) {
        wgml_adapter_info a, b;
        CHECK_OK(first, wgml_adapter_info_get(first, &a));
        CHECK_OK(seventh, wgml_adapter_info_get(seventh, &b));
        CHECK(strcmp(a.name, b.name) == 0 && strcmp(a.adapter_type, b.adapter_type) == 0);
    }
    CHECK_STATUS(NULL, wgml_context_create(&dn, &bad), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(bad == NULL && strstr(wgml_last_create_error(), "adapter_index") != NULL);
    setenv("WGML_ADAPTER_INDEX", "-2", 1);
    CHECK_STATUS(NULL, wgml_context_create(&d0, &bad), WGML_ERROR_INVALID_ARGUMENT);
    unsetenv("WGML_ADAPTER_INDEX");
    wgml_context_free(first);
    wgml_context_free(seventh);
}

static void adapter_info_is_filled(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_adapter_info i;
    CHECK_OK(ctx, wgml_adapter_info_get(ctx, &i));
    CHECK(strlen(i.name) > 0);
    CHECK(strcmp(i.backend, "Vulkan") == 0);
    CHECK(i.max_buffer_size >= (1u << 27));
    CHECK(i.max_compute_invocations_per_workgroup >= 256);
    CHECK(i.max_compute_workgroup_storage_size >= 16384);
}

static void lost_device_fails_cleanly(void)
{
    wgml_context *ctx = NULL;
    CHECK_OK(NULL, wgml_context_create(NULL, &ctx));
    if (!ctx) return;
    float x[7] = {1, 2, 3, 4, 5, 6, 7}, y[7];
    int64_t n = 7;
    wgml_tensor *t = NULL, *u = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 7, &t));
    wgml_tensor *lazy = wgml_exp(ctx, t);
    wgml_debug_destroy_device(ctx);
    CHECK_STATUS(ctx, wgml_tensor_read(t, y, 7), WGML_ERROR_DEVICE_LOST);
    CHECK(strstr(wgml_error_message(ctx), "lost") != NULL);
    CHECK_STATUS(ctx, wgml_tensor_read(lazy, y, 7), WGML_ERROR_DEVICE_LOST);
    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 7, &u), WGML_ERROR_DEVICE_LOST);
    CHECK_STATUS(ctx, wgml_eval(ctx, 1, &lazy), WGML_ERROR_DEVICE_LOST);
    CHECK_STATUS(ctx, wgml_synchronize(ctx), WGML_ERROR_DEVICE_LOST);
    CHECK_STATUS(ctx, wgml_weight_upload(ctx, "w", x, 1, 7), WGML_ERROR_DEVICE_LOST);
    wgml_context_free(ctx); /* releases everything (LeakSanitizer checks in make asan) */
}

static void validation_errors_become_statuses(void)
{
    /* a kernel that WebGPU rejects (compiled through the public pipeline cache) */
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_pipeline *p = wgml_pipeline_get(ctx, "this is not WGSL", true);
    CHECK(p == NULL);
    CHECK(wgml_last_status(ctx) == WGML_ERROR_VALIDATION);
    CHECK(strstr(wgml_error_message(ctx), "compiling") != NULL);
    /* the context still works afterwards */
    float x[3] = {1, 2, 3}, y[3];
    int64_t n = 3;
    wgml_tensor *t = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 3, &t));
    CHECK_OK(ctx, wgml_tensor_read(t, y, 3));
    CHECK(memcmp(x, y, sizeof x) == 0);
    wgml_tensor_free(t);
}

static void status_names_are_identifiers(void)
{
    /* each status's name is its enum identifier, spelled as in wgml.h */
    static const struct { wgml_status s; const char *name; } want[] = {
        {WGML_OK, "WGML_OK"}, {WGML_ERROR_SHAPE, "WGML_ERROR_SHAPE"}, {WGML_ERROR_IO, "WGML_ERROR_IO"},
        {WGML_ERROR_DEVICE_LOST, "WGML_ERROR_DEVICE_LOST"}, {WGML_ERROR_UNSUPPORTED, "WGML_ERROR_UNSUPPORTED"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK(strcmp(wgml_status_name(want[i].s), want[i].name) == 0);
    /* all of them distinct identifiers */
    for (int s = 0; s < WGML_STATUS_COUNT; s++) {
        const char *n = wgml_status_name((wgml_status)s);
        CHECK(strncmp(n, "WGML_", 5) == 0 && strspn(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == strlen(n));
        for (int r = 0; r < s; r++) CHECK(strcmp(n, wgml_status_name((wgml_status)r)) != 0);
    }
    CHECK(strcmp(wgml_status_name((wgml_status)999), "WGML_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(wgml_status_name((wgml_status)-1), "WGML_STATUS_UNKNOWN") == 0);
}

/* the library's version string is the header's macros */
static void version_matches_header(void)
{
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", WGML_VERSION_MAJOR, WGML_VERSION_MINOR, WGML_VERSION_PATCH);
    CHECK(strcmp(wgml_version(), want) == 0);
}

int main(void)
{
    TEST_RUN(round_trips_are_bit_exact);
    TEST_RUN(zeros_and_write);
    TEST_RUN(pool_reuses_buffers);
    TEST_RUN(stats_count_transfers);
    TEST_RUN(bad_arguments_allocate_nothing);
    TEST_RUN(past_the_adapter_limit);
    TEST_RUN(no_adapter_is_a_clear_status);
    TEST_RUN(adapter_index_wraps_and_is_checked);
    TEST_RUN(adapter_info_is_filled);
    TEST_RUN(lost_device_fails_cleanly);
    TEST_RUN(validation_errors_become_statuses);
    TEST_RUN(status_names_are_identifiers);
    TEST_RUN(version_matches_header);
    return test_summary();
}
