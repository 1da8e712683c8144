/*
 * Dynamic loss scaling (wgml_optimizer_set_loss_scaling), checked step by step against a
 * double-precision reference of AdamW with the scaler's rules:
 *   - steps whose loss is multiplied by 1e38 overflow to inf gradients: exactly those steps
 *     leave every parameter and moment bit-for-bit as they were, halve the scale and count a
 *     skipped step; the others update as AdamW on the unscaled gradients (clipped by the
 *     unscaled norm), with Adam's bias correction counting updates, not steps;
 *   - growth_interval good steps in a row double the scale;
 *   - the state read back (scale, good and skipped steps, updates) is exact at every step, and
 *     a second optimiser given the first's parameters, moments, steps and scaler state goes on
 *     bit-identically (what a resumed checkpoint needs);
 *   - bad settings are refused naming the field, the state calls need scaling on; a setting
 *     refused past its checks (a failed submit) changes nothing.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NSTEP 9

static const int64_t sizes[2] = {1023, 7};
/* 1e38 times the loss: gradients times any scale >= 1 are inf in f32 */
static const double loss_mult[NSTEP] = {1, 1, 1e38, 1, 1, 1e38, 1, 0.05, 1};

typedef struct ref_state {
    double *p[2], *m[2], *v[2];
    double scale;
    int good, skipped, updates;
} ref_state;

static wgml_tensor *loss_of(wgml_context *ctx, wgml_tensor *const *param, wgml_tensor *const *coef, double mult)
{
    wgml_tensor *loss = NULL;
    for (int i = 0; i < 2; i++) {
        wgml_tensor *term = wgml_sum_all(ctx, wgml_mul(ctx, param[i], coef[i]));
        loss = loss ? wgml_add(ctx, loss, term) : term;
    }
    return wgml_binary_scalar(ctx, WGML_MUL, loss, (float)mult);
}

/* one optimiser step of `opt` on loss_of(...) scaled by the optimiser's scale */
static void step(wgml_context *ctx, wgml_optimizer *opt, wgml_tensor *const *param, wgml_tensor *const *coef, double mult)
{
    wgml_scope_begin(ctx);
    wgml_tensor *scaled = wgml_optimizer_scale_loss(opt, loss_of(ctx, param, coef, mult));
    CHECK_OK(ctx, wgml_backward(scaled));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
}

static void skips_overflows_and_matches_reference(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    const double b1 = 0.9, b2 = 0.99, eps = 1e-8, lr = 1e-2, wd = 0.1, max_norm = 2.0;
    wgml_tensor *param[2], *coef[2];
    float *c_host[2];
    ref_state r = {.scale = 1024};
    for (int i = 0; i < 2; i++) {
        int64_t n = sizes[i];
        float *p0 = malloc((size_t)n * sizeof *p0);
        c_host[i] = malloc((size_t)n * sizeof *c_host[i]);
        test_fill_uniform(p0, (size_t)n, -1, 1);
        r.p[i] = malloc((size_t)n * sizeof(double));
        r.m[i] = calloc((size_t)n, sizeof(double));
        r.v[i] = calloc((size_t)n, sizeof(double));
        for (int64_t k = 0; k < n; k++) r.p[i][k] = p0[k];
        param[i] = test_tensor(ctx, 1, &sizes[i], p0);
        CHECK_OK(ctx, wgml_tensor_zeros(ctx, 1, &sizes[i], &coef[i]));
        free(p0);
    }
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = (float)lr, .beta1 = (float)b1, .beta2 = (float)b2,
                         .eps = (float)eps, .weight_decay = (float)wd, .max_grad_norm = (float)max_norm};
    wgml_optimizer *opt = NULL, *twin = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 2, param, &opt));
    wgml_loss_scaling sc = {.init_scale = 1024, .growth_interval = 2};
    CHECK_OK(ctx, wgml_optimizer_set_loss_scaling(opt, &sc));
    wgml_tensor *twin_param[2] = {0};
    float *before[2], *got[2];
    for (int i = 0; i < 2; i++) {
        before[i] = malloc((size_t)sizes[i] * sizeof(float));
        got[i] = malloc((size_t)sizes[i] * sizeof(float));
    }
    for (int s = 0; s < NSTEP && opt; s++) {
        double norm2 = 0;
        for (int i = 0; i < 2; i++) {
            test_fill_uniform(c_host[i], (size_t)sizes[i], -1, 1);
            for (int64_t k = 0; k < sizes[i]; k++) norm2 += (double)c_host[i][k] * c_host[i][k] * loss_mult[s] * loss_mult[s];
            CHECK_OK(ctx, wgml_tensor_write(coef[i], c_host[i], (size_t)sizes[i]));
            CHECK_OK(ctx, wgml_tensor_read(param[i], before[i], (size_t)sizes[i]));
        }
        step(ctx, opt, param, coef, loss_mult[s]);
        if (twin) step(ctx, twin, twin_param, coef, loss_mult[s]);

        bool skip = loss_mult[s] > 1e30;
        if (skip) {
            r.scale *= 0.5;
            r.good = 0;
            r.skipped++;
        } else {
            r.updates++;
            double norm = sqrt(norm2), clip = fmin(1.0, max_norm / (norm + 1e-6));
            double bc1 = 1 - pow(b1, r.updates), bc2 = 1 - pow(b2, r.updates);
            for (int i = 0; i < 2; i++)
                for (int64_t k = 0; k < sizes[i]; k++) {
                    double g = c_host[i][k] * loss_mult[s] * clip;
                    r.m[i][k] = b1 * r.m[i][k] + (1 - b1) * g;
                    r.v[i][k] = b2 * r.v[i][k] + (1 - b2) * g * g;
                    r.p[i][k] -= lr * (r.m[i][k] / bc1 / (sqrt(r.v[i][k] / bc2) + eps) + wd * r.p[i][k]);
                }
            if (++r.good == 2) r.scale *= 2, r.good = 0;
            float got_norm = NAN;
            CHECK_OK(ctx, wgml_optimizer_grad_norm(opt, &got_norm));
            if (!(fabs(got_norm - norm) <= 1e-5 * norm)) FAILF("step %d: unscaled norm %.9g, want %.9g", s, got_norm, norm);
        }
        wgml_loss_scale_state st = {0};
        CHECK_OK(ctx, wgml_optimizer_loss_scale_state(opt, &st));
        if (st.scale != (float)r.scale || st.good_steps != r.good || st.skipped_steps != r.skipped ||
            st.updates != r.updates || st.last_skipped != (int)skip)
            FAILF("step %d: state scale %g good %lld skipped %lld updates %lld last %d; want %g %d %d %d %d", s, st.scale,
                  (long long)st.good_steps, (long long)st.skipped_steps, (long long)st.updates, st.last_skipped, r.scale,
                  r.good, r.skipped, r.updates, (int)skip);
        for (int i = 0; i < 2; i++) {
            CHECK_OK(ctx, wgml_tensor_read(param[i], got[i], (size_t)sizes[i]));
            char name[64];
            snprintf(name, sizeof name, "step %d parameter %d", s, i);
            if (skip) {
                if (memcmp(got[i], before[i], (size_t)sizes[i] * sizeof(float)))
                    FAILF("%s: a skipped step changed the parameter", name);
            } else
                /* parameters start in [-1, 1]: an error below 1e-7 is a few f32 roundings of those */
                CHECK(test_close(name, got[i], r.p[i], (size_t)sizes[i], 1e-5, 1e-2));
        }
        if (twin) {
            for (int i = 0; i < 2; i++) {
                float *t = malloc((size_t)sizes[i] * sizeof *t);
                CHECK_OK(ctx, wgml_tensor_read(twin_param[i], t, (size_t)sizes[i]));
                if (memcmp(t, got[i], (size_t)sizes[i] * sizeof *t))
                    FAILF("step %d: the restored optimiser's parameter %d differs from the original's", s, i);
                free(t);
            }
            wgml_loss_scale_state ts = {0};
            CHECK_OK(ctx, wgml_optimizer_loss_scale_state(twin, &ts));
            if (ts.scale != st.scale || ts.good_steps != st.good_steps || ts.skipped_steps != st.skipped_steps)
                FAILF("step %d: the restored optimiser's scaler state differs", s);
        }
        if (s == 3) { /* a "checkpoint": a second optimiser from the first's state */
            for (int i = 0; i < 2; i++) twin_param[i] = test_tensor(ctx, 1, &sizes[i], got[i]);
            CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, 2, twin_param, &twin));
            if (!twin) break;
            for (int i = 0; i < 2; i++) {
                wgml_tensor *m, *v, *tm, *tv;
                CHECK_OK(ctx, wgml_optimizer_state(opt, i, &m, &v));
                CHECK_OK(ctx, wgml_optimizer_state(twin, i, &tm, &tv));
                float *buf = malloc((size_t)sizes[i] * sizeof *buf);
                CHECK_OK(ctx, wgml_tensor_read(m, buf, (size_t)sizes[i]));
                CHECK_OK(ctx, wgml_tensor_write(tm, buf, (size_t)sizes[i]));
                CHECK_OK(ctx, wgml_tensor_read(v, buf, (size_t)sizes[i]));
                CHECK_OK(ctx, wgml_tensor_write(tv, buf, (size_t)sizes[i]));
                free(buf);
                wgml_tensor_free(m), wgml_tensor_free(v), wgml_tensor_free(tm), wgml_tensor_free(tv);
            }
            CHECK_OK(ctx, wgml_optimizer_set_steps(twin, wgml_optimizer_steps(opt)));
            CHECK_OK(ctx, wgml_optimizer_set_loss_scaling(twin, &sc));
            CHECK_OK(ctx, wgml_optimizer_set_loss_scale_state(twin, &st));
        }
    }
    CHECK(r.skipped == 2 && wgml_optimizer_steps(opt) == NSTEP);
    wgml_optimizer_free(opt);
    wgml_optimizer_free(twin);
    for (int i = 0; i < 2; i++) {
        wgml_tensor_free(param[i]), wgml_tensor_free(coef[i]), wgml_tensor_free(twin_param[i]);
        free(c_host[i]), free(before[i]), free(got[i]);
        free(r.p[i]), free(r.m[i]), free(r.v[i]);
    }
    wgml_clear_error(ctx);
}

static void bad_settings_are_refused(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 7;
    float p0[7] = {1, 2, 3, 4, 5, 6, 7};
    wgml_tensor *p = test_tensor(ctx, 1, &n, p0);
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.lr = 1e-3f}, 1, &p, &opt));
    if (!opt) return;
    wgml_loss_scale_state st = {0};
    CHECK_STATUS(ctx, wgml_optimizer_loss_scale_state(opt, &st), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "loss scaling is off"));
    struct { wgml_loss_scaling s; const char *want; } bad[] = {
        {{.init_scale = -1}, "init_scale"},
        {{.init_scale = INFINITY}, "init_scale"},
        {{.growth_interval = -3}, "growth_interval"},
        {{.backoff = 1}, "backoff"},
        {{.backoff = NAN}, "backoff"},
        {{.growth = 0.5f}, "growth"},
    };
    for (int i = 0; i < N_OF(bad); i++) {
        CHECK_STATUS(ctx, wgml_optimizer_set_loss_scaling(opt, &bad[i].s), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, bad[i].want));
    }
    CHECK_OK(ctx, wgml_optimizer_set_loss_scaling(opt, &(wgml_loss_scaling){0}));
    CHECK_OK(ctx, wgml_optimizer_loss_scale_state(opt, &st));
    CHECK(st.scale == 65536.0f && st.good_steps == 0 && st.skipped_steps == 0 && st.updates == 0);
    st.good_steps = 2000; /* not below the default interval */
    CHECK_STATUS(ctx, wgml_optimizer_set_loss_scale_state(opt, &st), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, wgml_optimizer_set_loss_scale_state(opt, NULL), WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_begin(ctx);
    wgml_tensor *bad_loss = wgml_optimizer_scale_loss(opt, p); /* 7 elements */
    CHECK(wgml_tensor_status(bad_loss) == WGML_ERROR_INVALID_ARGUMENT);
    wgml_scope_end(ctx);
    CHECK_OK(ctx, wgml_optimizer_set_loss_scaling(opt, NULL));
    CHECK_STATUS(ctx, wgml_optimizer_loss_scale_state(opt, &st), WGML_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, wgml_optimizer_set_loss_scaling(NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(wgml_optimizer_scale_loss(NULL, p) == NULL);
    wgml_optimizer_free(opt);
    wgml_tensor_free(p);
    wgml_clear_error(ctx);
}

/* A setting refused past its checks (here its write of the state, behind a scaled loss still
   pending whose submit fails) changes nothing: the old scale and growth interval go on */
static void a_refused_setting_changes_nothing(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t n = 7;
    const float p0[7] = {1, 2, 3, 4, 5, 6, 7}, c0[7] = {0.5f, -1, 2, 0.25f, -3, 1.5f, -0.75f};
    wgml_tensor *p = test_tensor(ctx, 1, &n, p0), *c = test_tensor(ctx, 1, &n, c0);
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.lr = 1e-3f}, 1, &p, &opt));
    if (!opt) return;
    CHECK_OK(ctx, wgml_optimizer_set_loss_scaling(opt, &(wgml_loss_scaling){.init_scale = 1024}));
    wgml_scope_begin(ctx);
    wgml_tensor *scaled = wgml_optimizer_scale_loss(opt, wgml_sum_all(ctx, wgml_mul(ctx, p, c)));
    wgml_debug_fail_submits(ctx, 0, 1);
    CHECK_STATUS(ctx, wgml_optimizer_set_loss_scaling(opt, &(wgml_loss_scaling){.init_scale = 256, .growth_interval = 1}),
                 WGML_ERROR_DEVICE);
    wgml_debug_fail_submits(ctx, 0, 0);
    CHECK_OK(ctx, wgml_backward(scaled));
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    wgml_tensor *const param[2] = {p, p}, *const coef[2] = {c, c};
    for (int k = 0; k < 2; k++) step(ctx, opt, param, coef, 1);
    wgml_loss_scale_state st = {0};
    CHECK_OK(ctx, wgml_optimizer_loss_scale_state(opt, &st));
    /* (the refused interval of 1 would have doubled it at each of the 3 steps) */
    CHECK(st.scale == 1024.0f && st.good_steps == 3 && st.updates == 3);
    wgml_optimizer_free(opt);
    wgml_tensor_free(p), wgml_tensor_free(c);
}

int main(void)
{
    TEST_RUN(skips_overflows_and_matches_reference);
    TEST_RUN(bad_settings_are_refused);
    TEST_RUN(a_refused_setting_changes_nothing);
    return test_summary();
}
