/* Argument validation and the error rules: freed handles are documented as undefined (not
   promised to be caught), slices take any int64 start/stop/step without overflow, numbers
   out of range are INVALID_ARGUMENT with a message naming them, and wgml_error_message keeps
   the most recent failure until wgml_clear_error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The whole of a small file; NULL if it cannot be read. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* Item 1: a freed handle cannot be checked without reading freed memory, so the header says
   such use is undefined and no longer promises a status for it; NULL is still refused. */
static void freed_handles_are_documented_as_undefined(void)
{
    /* the status names and the header must not claim what the library cannot do */
    const char *name = wgml_status_name(WGML_ERROR_CONTEXT);
    CHECK(strstr(name, "stale") == NULL && strstr(name, "freed") == NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s", __FILE__); /* .../tests/test_validation.c */
    char *slash = strrchr(path, '/');
    CHECK(slash != NULL);
    if (slash) {
        snprintf(slash, sizeof path - (size_t)(slash - path), "/../include/wgml.h");
        char *h = slurp(path);
        CHECK(h != NULL);
        if (h) {
            CHECK(strstr(h, "freed handle") == NULL);
            CHECK(strstr(h, "stale") == NULL);
            const char *decl = strstr(h, "void wgml_tensor_free(wgml_tensor *t);");
            const char *ub = strstr(h, "undefined behaviour");
            CHECK(decl != NULL && ub != NULL);
            /* said in the overview and again in the comment just above wgml_tensor_free */
            if (decl && ub) {
                CHECK(ub < decl);
                size_t back = decl - h < 300 ? (size_t)(decl - h) : 300;
                char near[301];
                memcpy(near, decl - back, back);
                near[back] = 0;
                CHECK(strstr(near, "undefined behaviour") != NULL);
            }
            free(h);
        }
    }

    /* NULL handles: a status or a neutral value, never a crash */
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float buf[1] = {0};
    CHECK(wgml_tensor_read(NULL, buf, 1) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_write(NULL, buf, 1) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_status(NULL) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_tensor_ndim(NULL) == 0 && wgml_tensor_dim(NULL, 0) == 0 && wgml_tensor_numel(NULL) == 0);
    CHECK(wgml_tensor_context(NULL) == NULL);
    CHECK(wgml_requires_grad(NULL, 1) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_backward(NULL) == WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_grad(NULL) == NULL);
    wgml_tensor_free(NULL);
    wgml_keep(NULL);
    wgml_zero_grad(NULL);
    wgml_tensor *none = NULL;
    CHECK_STATUS(ctx, wgml_eval(ctx, 1, &none), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "NULL") && !test_message_has(ctx, "freed")); /* no claim to have seen a freed one */
    wgml_tensor *e = wgml_exp(ctx, NULL);
    CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "NULL"));
    wgml_tensor_free(e);
    wgml_clear_error(ctx);
}

/* Item 2: NumPy's length for a positive step, start and stop clamped to [0, n] after
   negative ones count from the end. No step is added to anything, so no overflow. */
static int64_t numpy_slice_len(int64_t start, int64_t stop, int64_t step, int64_t n)
{
    if (start < 0) start = start + n < 0 ? 0 : start + n;
    if (start > n) start = n;
    if (stop < 0) stop = stop + n < 0 ? 0 : stop + n;
    if (stop > n) stop = n;
    return stop > start ? (stop - start - 1) / step + 1 : 0;
}

static void slice_lengths_match_numpy_at_extremes(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const int64_t R = 3, C = 5;
    float x[15];
    for (int i = 0; i < 15; i++) x[i] = (float)i;
    int64_t shape[2] = {R, C};
    wgml_tensor *a = test_tensor(ctx, 2, shape, x);
    if (!a) return;
    const int64_t idx[] = {INT64_MIN, INT64_MIN + 1, -6, -5, -1, 0, 1, 4, 5, 6, INT64_MAX - 1, INT64_MAX};
    const int64_t steps[] = {INT64_MIN, -1, 0, 1, 2, 4, 5, 6, INT64_MAX - 1, INT64_MAX};
    const size_t ni = sizeof idx / sizeof idx[0], ns = sizeof steps / sizeof steps[0];
    int accepted = 0;
    for (size_t i = 0; i < ni; i++)
        for (size_t j = 0; j < ni; j++)
            for (size_t k = 0; k < ns; k++) {
                int64_t start = idx[i], stop = idx[j], step = steps[k];
                /* wgml's documented domain: no negative or clamped indices, step >= 1 */
                int in_domain = step >= 1 && start >= 0 && start < stop && stop <= C;
                wgml_tensor *r = wgml_slice(ctx, a, 1, start, stop, step);
                CHECK(r != NULL);
                if (!r) continue;
                if (in_domain) {
                    int64_t want = numpy_slice_len(start, stop, step, C);
                    accepted++;
                    if (wgml_tensor_status(r) != WGML_OK || wgml_tensor_dim(r, 0) != R ||
                        wgml_tensor_dim(r, 1) != want) {
                        fprintf(stderr, "  slice [%lld:%lld:%lld] of [3, 5]: status %s, shape [%lld, %lld], "
                                "NumPy [3, %lld]\n", (long long)start, (long long)stop, (long long)step,
                                wgml_status_name(wgml_tensor_status(r)), (long long)wgml_tensor_dim(r, 0),
                                (long long)wgml_tensor_dim(r, 1), (long long)want);
                        CHECK(!"slice shape differs from NumPy's");
                    } else {
                        float got[15];
                        double ref[15];
                        for (int64_t row = 0; row < R; row++)
                            for (int64_t c = 0; c < want; c++) ref[row * want + c] = x[row * C + start + c * step];
                        char what[96];
                        snprintf(what, sizeof what, "slice [%lld:%lld:%lld]", (long long)start, (long long)stop,
                                 (long long)step);
                        CHECK_OK(ctx, wgml_tensor_read(r, got, (size_t)(R * want)));
                        CHECK(test_close(what, got, ref, (size_t)(R * want), 0, 1e-30));
                    }
                } else {
                    char want[96];
                    snprintf(want, sizeof want, "[%lld:%lld:%lld]", (long long)start, (long long)stop,
                             (long long)step);
                    CHECK(wgml_tensor_status(r) == WGML_ERROR_INVALID_ARGUMENT);
                    CHECK(test_message_has(ctx, want));
                }
                wgml_tensor_free(r);
            }
    CHECK(accepted == 42); /* (start, stop) in {0,1,4} x {1,4,5} with start < stop: 6; steps >= 1: 7 */
    /* the case from the report: a step of INT64_MAX keeps one element, as in NumPy */
    wgml_tensor *r = wgml_slice(ctx, a, 1, 0, C, INT64_MAX);
    CHECK(wgml_tensor_status(r) == WGML_OK && wgml_tensor_dim(r, 1) == 1);
    wgml_tensor_free(r);
    wgml_tensor_free(a);
    wgml_clear_error(ctx);
}

/* Item 3: a backend value outside the enum is refused before any adapter is looked for */
static void bad_backend_is_refused(void)
{
    const int bad[] = {77, -1, WGML_BACKEND_ALL + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wgml_context *ctx = NULL;
        wgml_context_desc d = {.backend = (wgml_backend)bad[i]};
        CHECK_STATUS(NULL, wgml_context_create(&d, &ctx), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(ctx == NULL);
        char want[32];
        snprintf(want, sizeof want, "backend %d", bad[i]);
        CHECK(strstr(wgml_last_create_error(), want) != NULL);
        if (ctx) wgml_context_free(ctx); /* the old code made one */
    }
}

static void clamp_bounds_are_checked(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[4] = {-3, -0.5f, 0.5f, 3};
    int64_t n = 4;
    wgml_tensor *a = test_tensor(ctx, 1, &n, x);
    if (!a) return;
    const struct { float lo, hi; const char *lo_s, *hi_s; } bad[] = {
        {2, 1, "lo = 2", "hi = 1"},         {NAN, 1, "lo = nan", "hi = 1"},
        {-1, NAN, "lo = -1", "hi = nan"},   {NAN, NAN, "lo = nan", "hi = nan"},
        {INFINITY, -INFINITY, "lo = inf", "hi = -inf"},
    };
    float out[4];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        wgml_clear_error(ctx);
        wgml_tensor *e = wgml_clamp(ctx, a, bad[k].lo, bad[k].hi);
        CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
        CHECK(wgml_last_status(ctx) == WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "clamp") && test_message_has(ctx, bad[k].lo_s) && test_message_has(ctx, bad[k].hi_s));
        CHECK_STATUS(ctx, wgml_tensor_read(e, out, 4), WGML_ERROR_INVALID_ARGUMENT);
        wgml_tensor_free(e);
    }
    /* equal bounds and infinite ones are fine */
    wgml_tensor *r = wgml_clamp(ctx, a, 0.25f, 0.25f);
    CHECK_OK(ctx, wgml_tensor_read(r, out, 4));
    CHECK(out[0] == 0.25f && out[3] == 0.25f);
    wgml_tensor_free(r);
    r = wgml_clamp(ctx, a, -INFINITY, 1);
    CHECK_OK(ctx, wgml_tensor_read(r, out, 4));
    CHECK(out[0] == -3 && out[3] == 1);
    wgml_tensor_free(r);
    wgml_tensor_free(a);
    wgml_clear_error(ctx);
}

static void norm_eps_is_checked(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[6] = {1, 2, 4, -1, 0, 1};
    int64_t s[2] = {2, 3};
    wgml_tensor *a = test_tensor(ctx, 2, s, x);
    if (!a) return;
    const struct { float eps; const char *s; } bad[] = {{-1e-5f, "eps = -1e-05"}, {NAN, "eps = nan"}, {-INFINITY, "eps = -inf"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (int op = 0; op < 2; op++) {
            wgml_clear_error(ctx);
            wgml_tensor *e = op ? wgml_rmsnorm(ctx, a, NULL, bad[k].eps) : wgml_layernorm(ctx, a, NULL, NULL, bad[k].eps);
            CHECK(e != NULL && wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT);
            CHECK(test_message_has(ctx, op ? "rmsnorm" : "layernorm") && test_message_has(ctx, bad[k].s));
            wgml_tensor_free(e);
        }
    /* eps = 0 and +inf are numbers >= 0: accepted (their values are test_ops' business) */
    const float good[2] = {0.0f, INFINITY};
    for (int k = 0; k < 2; k++) {
        wgml_tensor *r = wgml_rmsnorm(ctx, a, NULL, good[k]), *l = wgml_layernorm(ctx, a, NULL, NULL, good[k]);
        CHECK(wgml_tensor_status(r) == WGML_OK && wgml_tensor_status(l) == WGML_OK);
        wgml_tensor_free(r);
        wgml_tensor_free(l);
    }
    wgml_tensor_free(a);
    wgml_clear_error(ctx);
}

/* One SGD step on p with loss sum(p): the gradient is all ones. */
static void sgd_step(wgml_context *ctx, wgml_optimizer *opt, wgml_tensor *p)
{
    wgml_tensor *loss = wgml_sum_all(ctx, p);
    CHECK_OK(ctx, wgml_backward(loss));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 1, &loss));
    wgml_tensor_free(loss);
}

static void optimizer_numbers_are_checked(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[2] = {1, 2};
    int64_t n = 2;
    wgml_tensor *p = test_tensor(ctx, 1, &n, x);
    if (!p) return;
    const wgml_optim_desc ok = {.kind = WGML_OPTIM_ADAMW, .lr = 1e-3f};
    struct { wgml_optim_desc d; const char *want; } bad[] = {
        {ok, "lr = -0.5"}, {ok, "lr = nan"}, {ok, "lr = inf"},
        {ok, "beta1 = 1"}, {ok, "beta1 = -0.1"}, {ok, "beta1 = nan"},
        {ok, "beta2 = 1.5"}, {ok, "beta2 = -1"}, {ok, "eps = -1e-08"}, {ok, "eps = nan"},
        {ok, "weight_decay = -0.01"}, {ok, "weight_decay = nan"},
        {ok, "momentum = 1"}, {ok, "momentum = -0.5"},
        {ok, "max_grad_norm = -1"}, {ok, "max_grad_norm = nan"},
    };
    bad[0].d.lr = -0.5f, bad[1].d.lr = NAN, bad[2].d.lr = INFINITY;
    bad[3].d.beta1 = 1, bad[4].d.beta1 = -0.1f, bad[5].d.beta1 = NAN;
    bad[6].d.beta2 = 1.5f, bad[7].d.beta2 = -1, bad[8].d.eps = -1e-8f, bad[9].d.eps = NAN;
    bad[10].d.weight_decay = -0.01f, bad[11].d.weight_decay = NAN;
    bad[12].d.kind = WGML_OPTIM_SGD, bad[12].d.momentum = 1;
    bad[13].d.kind = WGML_OPTIM_SGD, bad[13].d.momentum = -0.5f;
    bad[14].d.max_grad_norm = -1, bad[15].d.max_grad_norm = NAN;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        wgml_clear_error(ctx);
        wgml_optimizer *opt = NULL;
        CHECK_STATUS(ctx, wgml_optimizer_create(ctx, &bad[k].d, 1, &p, &opt), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(opt == NULL);
        if (!test_message_has(ctx, bad[k].want)) {
            fprintf(stderr, "  want \"%s\" in \"%s\"\n", bad[k].want, wgml_error_message(ctx));
            CHECK(!"the message names the field and its value");
        }
        if (opt) wgml_optimizer_free(opt); /* the old code made one */
    }

    /* zeros mean defaults and are fine; a rejected lr leaves the old one in force */
    wgml_optimizer *opt = NULL;
    wgml_optim_desc sgd = {.kind = WGML_OPTIM_SGD, .lr = 0.25f};
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &sgd, 1, &p, &opt));
    if (!opt) {
        wgml_tensor_free(p);
        return;
    }
    float got[2];
    sgd_step(ctx, opt, p);
    CHECK_OK(ctx, wgml_tensor_read(p, got, 2));
    CHECK(got[0] == 0.75f && got[1] == 1.75f);
    const float bad_lr[] = {-1.0f, NAN, INFINITY};
    const char *bad_lr_s[] = {"lr = -1", "lr = nan", "lr = inf"};
    for (int k = 0; k < 3; k++) {
        CHECK_STATUS(ctx, wgml_optimizer_set_lr(opt, bad_lr[k]), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "set_lr") && test_message_has(ctx, bad_lr_s[k]));
    }
    sgd_step(ctx, opt, p);
    CHECK_OK(ctx, wgml_tensor_read(p, got, 2));
    CHECK(got[0] == 0.5f && got[1] == 1.5f);
    CHECK_OK(ctx, wgml_optimizer_set_lr(opt, 0.5f));
    sgd_step(ctx, opt, p);
    CHECK_OK(ctx, wgml_tensor_read(p, got, 2));
    CHECK(got[0] == 0.0f && got[1] == 1.0f);
    wgml_optimizer_free(opt);
    wgml_tensor_free(p);
    wgml_clear_error(ctx);
}

/* Item 4: the message and status are those of the most recent failure; successes leave them
   alone; wgml_clear_error clears them. Every failure on the context replaces them. */
static void error_message_keeps_the_most_recent_failure(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_clear_error(ctx);
    CHECK(wgml_last_status(ctx) == WGML_OK && wgml_error_message(ctx)[0] == 0);
    float x[3] = {1, 2, 3}, y[3];
    int64_t n = 3;
    wgml_tensor *t = NULL, *u = NULL;
    CHECK_OK(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 3, &t));
    /* a success on a clean context leaves it clean */
    CHECK(wgml_last_status(ctx) == WGML_OK && wgml_error_message(ctx)[0] == 0);

    CHECK_STATUS(ctx, wgml_tensor_from_data(ctx, 1, &n, x, 7, &u), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "7"));
    char first[1024];
    snprintf(first, sizeof first, "%s", wgml_error_message(ctx));
    /* successes after it do not clear or change it */
    CHECK_OK(ctx, wgml_tensor_read(t, y, 3));
    wgml_tensor *e = wgml_exp(ctx, t);
    CHECK_OK(ctx, wgml_tensor_read(e, y, 3));
    wgml_tensor_free(e);
    CHECK(wgml_last_status(ctx) == WGML_ERROR_INVALID_ARGUMENT && strcmp(wgml_error_message(ctx), first) == 0);

    /* a later failure replaces it, whichever function it came from */
    e = wgml_add(ctx, t, NULL);
    CHECK(wgml_tensor_status(e) == WGML_ERROR_INVALID_ARGUMENT && test_message_has(ctx, "add") && test_message_has(ctx, "NULL"));
    wgml_tensor_free(e);
    e = wgml_reshape(ctx, t, 1, (int64_t[]){4});
    CHECK(wgml_last_status(ctx) == WGML_ERROR_SHAPE && test_message_has(ctx, "reshape"));
    wgml_tensor_free(e);
    wgml_optimizer *opt = NULL;
    wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 0.1f};
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 1, &t, &opt));
    if (opt) {
        CHECK_STATUS(ctx, wgml_optimizer_set_steps(opt, -3), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "set_steps") && test_message_has(ctx, "-3"));
        CHECK_STATUS(ctx, wgml_optimizer_grad_norm(opt, NULL), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "grad_norm") && test_message_has(ctx, "NULL"));
        wgml_optimizer_free(opt);
    }
    wgml_clear_error(ctx);
    CHECK(wgml_last_status(ctx) == WGML_OK && wgml_error_message(ctx)[0] == 0);
    wgml_tensor_free(t);
}

int main(void)
{
    TEST_RUN(freed_handles_are_documented_as_undefined);
    TEST_RUN(slice_lengths_match_numpy_at_extremes);
    TEST_RUN(bad_backend_is_refused);
    TEST_RUN(clamp_bounds_are_checked);
    TEST_RUN(norm_eps_is_checked);
    TEST_RUN(optimizer_numbers_are_checked);
    TEST_RUN(error_message_keeps_the_most_recent_failure);
    return test_summary();
}
