/*
 * Optimiser parameter groups and learning-rate schedules:
 *   - AdamW and SGD with four groups (each its own lr scale and weight decay), clipping by
 *     the global norm and a warm-up + cosine schedule, against a double-precision reference
 *     over several steps, on parameters of 1, 7, 15 and 1023 elements; parameters, moments
 *     (through wgml_optimizer_state, in group order) and the gradient norm within 1e-5
 *     relative;
 *   - wgml_lr_at against the schedule's closed form at warm-up, peak, mid-decay, the end and
 *     past it;
 *   - the lr a step applies follows the schedule, wgml_optimizer_set_lr and the group's
 *     scale, and no step after the first compiles a kernel;
 *   - bad groups and schedules are refused with a message naming the field.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* |got - want| <= tol * |want|, printing both when not */
static int near(const char *what, double got, double want, double tol)
{
    if (fabs(got - want) <= tol * fabs(want)) return 1;
    fprintf(stderr, "  %s: got %.9g, want %.9g (rel %.2g)\n", what, got, want, fabs(got - want) / fabs(want));
    return 0;
}

/* ------------------------------------------------------------ groups against a reference */

#define NPARAM 6
#define NGROUP 4
#define NSTEP 6

/* parameter shapes (awkward sizes) and the group each belongs to, in group order */
static const struct { int ndim; int64_t shape[2]; int group; } spec[NPARAM] = {
    {1, {1023}, 0}, {1, {7}, 0}, {1, {1}, 1}, {1, {7}, 2}, {1, {1}, 2}, {2, {3, 5}, 3},
};
static const float group_scale[NGROUP] = {0, 0.5f, 2.0f, 1.25f}; /* 0 means 1 */
static const float group_wd[NGROUP] = {0.1f, 0, 0.02f, 0};
/* gradient sizes per step: the global norm (about 26 at factor 1) is clipped to 1 at steps
   0, 2, 4 and 5, and left alone at 1 and 3 */
static const double grad_factor[NSTEP] = {1, 0.01, 3, 0.02, 1, 0.5};

static int64_t numel_of(int i) { return spec[i].ndim == 1 ? spec[i].shape[0] : spec[i].shape[0] * spec[i].shape[1]; }

/* The schedule's closed form (the header's table), written out for warm-up 2, decay to
   step 6, min ratio 0.1, cosine. */
static double ref_lr(double base, int s)
{
    if (s < 2) return base * (s + 1) / 3.0;
    if (s >= 6) return 0.1 * base;
    return 0.1 * base + 0.9 * base * 0.5 * (1 + cos(3.14159265358979323846 * (s - 2) / 4.0));
}

typedef struct ref_param {
    int64_t n;
    double *p, *m, *v;
} ref_param;

static void groups_match_reference(wgml_optim_kind kind, const char *what)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_tensor *param[NPARAM] = {0}, *coef[NPARAM] = {0};
    float *c_host[NPARAM];
    ref_param ref[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        int64_t n = numel_of(i);
        float *p0 = malloc((size_t)n * sizeof *p0);
        c_host[i] = malloc((size_t)n * sizeof *c_host[i]);
        ref[i] = (ref_param){n, calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double)),
                             calloc((size_t)n, sizeof(double))};
        test_fill_uniform(p0, (size_t)n, -1, 1);
        for (int64_t k = 0; k < n; k++) ref[i].p[k] = p0[k];
        param[i] = test_tensor(ctx, spec[i].ndim, spec[i].shape, p0);
        CHECK_OK(ctx, wgml_tensor_zeros(ctx, spec[i].ndim, spec[i].shape, &coef[i]));
        free(p0);
    }
    wgml_tensor *members[NGROUP][NPARAM];
    wgml_param_group groups[NGROUP];
    for (int g = 0; g < NGROUP; g++) {
        groups[g] = (wgml_param_group){.n = 0, .params = members[g], .lr_scale = group_scale[g], .weight_decay = group_wd[g]};
        for (int i = 0; i < NPARAM; i++)
            if (spec[i].group == g) members[g][groups[g].n++] = param[i];
    }
    const double b1 = 0.9, b2 = 0.99, eps = 1e-8, mu = 0.8, max_norm = 1.0;
    const double base = kind == WGML_OPTIM_ADAMW ? 1e-2 : 5e-2;
    wgml_optim_desc d = {.kind = kind, .lr = (float)base, .beta1 = (float)b1, .beta2 = (float)b2, .eps = (float)eps,
                         .momentum = (float)mu, .max_grad_norm = (float)max_norm};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create_groups(ctx, &d, NGROUP, groups, &opt));
    wgml_lr_schedule sched = {.warmup_steps = 2, .total_steps = 6, .min_lr_ratio = 0.1f, .decay = WGML_LR_DECAY_COSINE};
    CHECK_OK(ctx, wgml_optimizer_set_schedule(opt, &sched));
    double worst_p = 0;
    for (int s = 0; s < NSTEP && opt; s++) {
        /* gradients: loss = sum_i sum(p_i * c_i), so grad p_i = c_i exactly */
        double norm2 = 0;
        for (int i = 0; i < NPARAM; i++) {
            test_fill_uniform(c_host[i], (size_t)ref[i].n, -grad_factor[s], grad_factor[s]);
            for (int64_t k = 0; k < ref[i].n; k++) norm2 += (double)c_host[i][k] * c_host[i][k];
            CHECK_OK(ctx, wgml_tensor_write(coef[i], c_host[i], (size_t)ref[i].n));
        }
        wgml_scope_begin(ctx);
        wgml_tensor *loss = NULL;
        for (int i = 0; i < NPARAM; i++) {
            wgml_tensor *term = wgml_sum_all(ctx, wgml_mul(ctx, param[i], coef[i]));
            loss = loss ? wgml_add(ctx, loss, term) : term;
        }
        CHECK(near("scheduled lr", wgml_optimizer_lr(opt), ref_lr(base, s), 1e-6));
        CHECK_OK(ctx, wgml_backward(loss));
        CHECK_OK(ctx, wgml_optimizer_step(opt, 1, &loss));
        wgml_scope_end(ctx);

        /* the reference step */
        double norm = sqrt(norm2), clip = fmin(1.0, max_norm / (norm + 1e-6));
        double bc1 = 1 - pow(b1, s + 1), bc2 = 1 - pow(b2, s + 1);
        for (int i = 0; i < NPARAM; i++) {
            int g = spec[i].group;
            double lr = ref_lr(base, s) * (group_scale[g] == 0 ? 1.0 : group_scale[g]), wd = group_wd[g];
            ref_param *r = &ref[i];
            for (int64_t k = 0; k < r->n; k++) {
                double gr = c_host[i][k] * clip;
                if (kind == WGML_OPTIM_ADAMW) {
                    r->m[k] = b1 * r->m[k] + (1 - b1) * gr;
                    r->v[k] = b2 * r->v[k] + (1 - b2) * gr * gr;
                    r->p[k] -= lr * (r->m[k] / bc1 / (sqrt(r->v[k] / bc2) + eps) + wd * r->p[k]);
                } else {
                    r->m[k] = mu * r->m[k] + gr + wd * r->p[k];
                    r->p[k] -= lr * r->m[k];
                }
            }
        }
        float got_norm = NAN;
        CHECK_OK(ctx, wgml_optimizer_grad_norm(opt, &got_norm));
        CHECK(near("gradient norm", got_norm, norm, 1e-5));
        for (int i = 0; i < NPARAM; i++) {
            float *got = malloc((size_t)ref[i].n * sizeof *got);
            CHECK_OK(ctx, wgml_tensor_read(param[i], got, (size_t)ref[i].n));
            char name[64];
            snprintf(name, sizeof name, "%s step %d parameter %d", what, s, i);
            double e = test_max_rel_err(got, ref[i].p, (size_t)ref[i].n, 1e-3);
            if (!(e <= worst_p)) worst_p = e;
            CHECK(test_close(name, got, ref[i].p, (size_t)ref[i].n, 1e-5, 1e-3));
            free(got);
        }
    }
    fprintf(stderr, "  %s: worst parameter error over %d steps %.2e (relative, floor 1e-3)\n", what, NSTEP, worst_p);
    /* moments, by parameter index in group order, as checkpoints see them */
    for (int i = 0; i < NPARAM && opt; i++) {
        wgml_tensor *m = NULL, *v = NULL;
        CHECK_OK(ctx, wgml_optimizer_state(opt, i, &m, &v));
        if (!m || !v) continue;
        CHECK(wgml_tensor_numel(m) == ref[i].n && wgml_tensor_ndim(m) == spec[i].ndim);
        float *got = malloc((size_t)ref[i].n * sizeof *got);
        double *want[2] = {ref[i].m, ref[i].v};
        wgml_tensor *t[2] = {m, v};
        /* a moment is a sum of terms up to `big` in size that may cancel, so an element is
           judged by its error relative to max(|want|, big / 20): f32 rounding of the terms
           stays far below 1e-5 of that */
        for (int w = 0; w < (kind == WGML_OPTIM_ADAMW ? 2 : 1); w++) {
            double big = 0;
            for (int64_t k = 0; k < ref[i].n; k++) big = fmax(big, fabs(want[w][k]));
            CHECK_OK(ctx, wgml_tensor_read(t[w], got, (size_t)ref[i].n));
            char name[64];
            snprintf(name, sizeof name, "%s parameter %d's %s", what, i, w ? "v" : "m");
            CHECK(test_close(name, got, want[w], (size_t)ref[i].n, 1e-5, big / 20));
        }
        free(got);
        wgml_tensor_free(m);
        wgml_tensor_free(v);
    }
    wgml_tensor *m = NULL, *v = NULL;
    CHECK_STATUS(ctx, wgml_optimizer_state(opt, NPARAM, &m, &v), WGML_ERROR_INVALID_ARGUMENT);
    wgml_optimizer_free(opt);
    for (int i = 0; i < NPARAM; i++) {
        wgml_tensor_free(param[i]);
        wgml_tensor_free(coef[i]);
        free(c_host[i]);
        free(ref[i].p), free(ref[i].m), free(ref[i].v);
    }
    wgml_clear_error(ctx);
}

static void adamw_groups_match_reference(void) { groups_match_reference(WGML_OPTIM_ADAMW, "AdamW"); }
static void sgd_groups_match_reference(void) { groups_match_reference(WGML_OPTIM_SGD, "SGD"); }

/* ------------------------------------------------------------ schedules */

static void schedule_matches_closed_form(void)
{
    const double pi = 3.14159265358979323846, base = 6e-4;
    /* nanoGPT's shape: warm-up 10, cosine to step 110, down to a tenth */
    wgml_lr_schedule cosine = {.warmup_steps = 10, .total_steps = 110, .min_lr_ratio = 0.1f, .decay = WGML_LR_DECAY_COSINE};
    double min = base * (double)0.1f;
    struct { int64_t step; double want; const char *what; } cases[] = {
        {0, base / 11, "first warm-up step"},
        {4, base * 5 / 11, "warm-up"},
        {9, base * 10 / 11, "last warm-up step"},
        {10, base, "peak"},
        {35, min + (base - min) * (1 + cos(pi / 4)) / 2, "a quarter into the decay"},
        {60, min + (base - min) / 2, "mid-cosine"},
        {109, min + (base - min) * (1 + cos(pi * 99 / 100)) / 2, "last decay step"},
        {110, min, "end"},
        {111, min, "past the end"},
        {INT64_MAX, min, "far past the end"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (!near(cases[k].what, wgml_lr_at(&cosine, (float)base, cases[k].step), cases[k].want, 1e-6)) CHECK(!"cosine");

    /* linear, no warm-up, to 0 */
    wgml_lr_schedule linear = {.total_steps = 100, .decay = WGML_LR_DECAY_LINEAR};
    CHECK(near("linear step 0", wgml_lr_at(&linear, 0.5f, 0), 0.5, 1e-7));
    CHECK(near("linear step 25", wgml_lr_at(&linear, 0.5f, 25), 0.375, 1e-7));
    CHECK(near("linear step 99", wgml_lr_at(&linear, 0.5f, 99), 0.005, 1e-6));
    CHECK(wgml_lr_at(&linear, 0.5f, 100) == 0 && wgml_lr_at(&linear, 0.5f, 5000) == 0);

    /* warm-up only; no decay (total_steps unused) */
    wgml_lr_schedule warm = {.warmup_steps = 3};
    CHECK(near("warm step 0", wgml_lr_at(&warm, 2.0f, 0), 0.5, 1e-7));
    CHECK(near("warm step 2", wgml_lr_at(&warm, 2.0f, 2), 1.5, 1e-7));
    CHECK(wgml_lr_at(&warm, 2.0f, 3) == 2.0f && wgml_lr_at(&warm, 2.0f, 1000000) == 2.0f);

    /* no schedule and the zeroed one: the base lr at every step */
    wgml_lr_schedule zero = {0};
    CHECK(wgml_lr_at(NULL, 0.25f, 0) == 0.25f && wgml_lr_at(NULL, 0.25f, 77) == 0.25f);
    CHECK(wgml_lr_at(&zero, 0.25f, 0) == 0.25f && wgml_lr_at(&zero, 0.25f, 77) == 0.25f);

    /* the shape over every step: rises during the warm-up, never rises after, stays in
       [min, base] after the warm-up (which starts below min) */
    double prev = 0;
    for (int64_t s = 0; s < 130; s++) {
        double lr = wgml_lr_at(&cosine, (float)base, s);
        if (s <= 10 && !(lr > prev)) CHECK(!"warm-up rises");
        if (s > 10 && !(lr <= prev)) CHECK(!"decay never rises");
        if (s >= 10 && !(lr >= min * (1 - 1e-6) && lr <= base * (1 + 1e-6))) CHECK(!"lr within [min, base]");
        prev = lr;
    }

    /* what wgml_optimizer_set_schedule refuses gives NaN here */
    wgml_lr_schedule bad = cosine;
    bad.total_steps = 10;
    CHECK(isnan(wgml_lr_at(&bad, 1.0f, 0)));
    CHECK(isnan(wgml_lr_at(&cosine, 1.0f, -1)));
    CHECK(isnan(wgml_lr_at(&cosine, NAN, 0)) && isnan(wgml_lr_at(&cosine, -1.0f, 0)) &&
          isnan(wgml_lr_at(NULL, INFINITY, 0)));
}

/* SGD without momentum or decay on one-element parameters reset to 0 before each step, with
   loss sum(a) (+ sum(b)): the step leaves exactly -lr in each, so the lr applied is read back.
   One group takes the kernel's path without the group table, so both are run. */
static void steps_follow_schedule(int n_groups)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    int64_t one = 1;
    float zero = 0;
    wgml_tensor *a = test_tensor(ctx, 1, &one, &zero), *b = test_tensor(ctx, 1, &one, &zero);
    if (!a || !b) return;
    const float scale[2] = {n_groups == 1 ? 0.5f : 0, 0.25f}; /* 0 means 1 */
    wgml_param_group groups[2] = {{.n = 1, .params = &a, .lr_scale = scale[0]}, {.n = 1, .params = &b, .lr_scale = scale[1]}};
    wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 0.5f};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create_groups(ctx, &d, n_groups, groups, &opt));
    if (!opt) return;
    wgml_lr_schedule s = {.warmup_steps = 3, .total_steps = 8, .min_lr_ratio = 0.2f, .decay = WGML_LR_DECAY_COSINE};
    CHECK_OK(ctx, wgml_optimizer_set_schedule(opt, &s));
    wgml_stats after_first = {0}, now = {0};
    double base = 0.5;
    for (int step = 0; step < 14; step++) {
        if (step == 6) { /* a new base lr mid-decay */
            CHECK_OK(ctx, wgml_optimizer_set_lr(opt, 0.3f));
            base = 0.3f;
        }
        if (step == 12) CHECK_OK(ctx, wgml_optimizer_set_schedule(opt, NULL)); /* constant from here */
        double want = step < 12 ? wgml_lr_at(&s, (float)base, step) : base;
        CHECK(wgml_optimizer_steps(opt) == step);
        CHECK(near("wgml_optimizer_lr", wgml_optimizer_lr(opt), want, 1e-7));
        CHECK_OK(ctx, wgml_tensor_write(a, &zero, 1));
        CHECK_OK(ctx, wgml_tensor_write(b, &zero, 1));
        wgml_scope_begin(ctx);
        wgml_tensor *loss = wgml_sum_all(ctx, a);
        if (n_groups == 2) loss = wgml_add(ctx, loss, wgml_sum_all(ctx, b));
        CHECK_OK(ctx, wgml_backward(loss));
        CHECK_OK(ctx, wgml_optimizer_step(opt, 1, &loss));
        wgml_scope_end(ctx);
        for (int g = 0; g < n_groups; g++) {
            float got = NAN;
            CHECK_OK(ctx, wgml_tensor_read(g ? b : a, &got, 1));
            char what[64];
            snprintf(what, sizeof what, "step %d: lr applied to group %d of %d", step, g, n_groups);
            CHECK(near(what, -got, want * (scale[g] == 0 ? 1 : scale[g]), 1e-6));
        }
        if (step == 0) CHECK_OK(ctx, wgml_stats_get(ctx, &after_first));
    }
    CHECK_OK(ctx, wgml_stats_get(ctx, &now));
    if (now.pipelines_compiled != after_first.pipelines_compiled)
        fprintf(stderr, "  %llu kernels compiled after the first step\n",
                (unsigned long long)(now.pipelines_compiled - after_first.pipelines_compiled));
    CHECK(now.pipelines_compiled == after_first.pipelines_compiled);
    CHECK(now.evals > after_first.evals); /* the steps did run */
    wgml_optimizer_free(opt);
    wgml_tensor_free(a);
    wgml_tensor_free(b);
}

static void steps_follow_schedule_without_compiling(void) { steps_follow_schedule(2); }
static void one_group_follows_schedule_and_scale(void) { steps_follow_schedule(1); }

/* One group with its own decay: SGD without momentum, loss sum(p), so p -= lr * scale * (1 + wd p). */
static void one_group_applies_its_decay(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[2] = {1, 2};
    int64_t n = 2;
    wgml_tensor *p = test_tensor(ctx, 1, &n, x);
    if (!p) return;
    wgml_param_group g = {.n = 1, .params = &p, .lr_scale = 2, .weight_decay = 0.1f};
    wgml_optim_desc d = {.kind = WGML_OPTIM_SGD, .lr = 0.25f};
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create_groups(ctx, &d, 1, &g, &opt));
    if (opt) {
        wgml_tensor *loss = wgml_sum_all(ctx, p);
        CHECK_OK(ctx, wgml_backward(loss));
        CHECK_OK(ctx, wgml_optimizer_step(opt, 1, &loss));
        wgml_tensor_free(loss);
        float got[2];
        CHECK_OK(ctx, wgml_tensor_read(p, got, 2));
        CHECK(near("p[0]", got[0], 1 - 0.5 * (1 + 0.1 * 1), 1e-6) && near("p[1]", got[1], 2 - 0.5 * (1 + 0.1 * 2), 1e-6));
        wgml_optimizer_free(opt);
    }
    wgml_tensor_free(p);
}

/* ------------------------------------------------------------ bad input */

static void bad_groups_are_refused(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[3] = {1, 2, 3};
    int64_t n = 3;
    wgml_tensor *t[3] = {test_tensor(ctx, 1, &n, x), test_tensor(ctx, 1, &n, x), test_tensor(ctx, 1, &n, x)};
    if (!t[0] || !t[1] || !t[2]) return;
    wgml_tensor *lazy = wgml_exp(ctx, t[0]);
    wgml_tensor *first[2] = {t[0], t[1]}, *second[1] = {t[2]}, *again[1] = {t[1]}, *twice[2] = {t[2], t[2]},
                *pending[1] = {lazy}, *nulls[1] = {NULL};
    const wgml_optim_desc ok = {.kind = WGML_OPTIM_ADAMW, .lr = 1e-3f};
    const wgml_param_group g0 = {.n = 2, .params = first, .weight_decay = 0.1f}, g1 = {.n = 1, .params = second};
    enum { NCASE = 17 };
    struct { wgml_optim_desc d; wgml_param_group g[2]; int n_groups; const char *want; } bad[NCASE];
    for (int k = 0; k < NCASE; k++) {
        bad[k].d = ok;
        bad[k].g[0] = g0, bad[k].g[1] = g1;
        bad[k].n_groups = 2;
    }
    int k = 0;
    bad[k].n_groups = 0, bad[k++].want = "n_groups = 0";
    bad[k].n_groups = -1, bad[k++].want = "n_groups = -1";
    bad[k].g[1].n = 0, bad[k++].want = "groups[1].n = 0";
    bad[k].g[0].n = -2, bad[k++].want = "groups[0].n = -2";
    bad[k].g[1].params = NULL, bad[k++].want = "groups[1].params is NULL";
    bad[k].g[1].lr_scale = -1, bad[k++].want = "groups[1].lr_scale = -1";
    bad[k].g[0].lr_scale = NAN, bad[k++].want = "groups[0].lr_scale = nan";
    bad[k].g[1].lr_scale = INFINITY, bad[k++].want = "groups[1].lr_scale = inf";
    bad[k].g[1].weight_decay = -0.5f, bad[k++].want = "groups[1].weight_decay = -0.5";
    bad[k].g[0].weight_decay = NAN, bad[k++].want = "groups[0].weight_decay = nan";
    bad[k].g[1].weight_decay = INFINITY, bad[k++].want = "groups[1].weight_decay = inf";
    bad[k].g[1].params = again, bad[k++].want = "groups[1].params[0] is also groups[0].params[1]";
    bad[k].g[1].params = twice, bad[k].g[1].n = 2, bad[k++].want = "groups[1].params[1] is also groups[1].params[0]";
    bad[k].g[1].params = pending, bad[k++].want = "groups[1].params[0] must be an evaluated";
    bad[k].g[1].params = nulls, bad[k++].want = "groups[1].params[0] is not a tensor";
    bad[k].d.weight_decay = 0.1f, bad[k++].want = "desc.weight_decay = 0.1";
    bad[k].d.lr = NAN, bad[k++].want = "lr = nan";
    CHECK(k == NCASE);
    for (k = 0; k < NCASE; k++) {
        wgml_clear_error(ctx);
        wgml_optimizer *opt = (wgml_optimizer *)&bad; /* must be set to NULL */
        CHECK_STATUS(ctx, wgml_optimizer_create_groups(ctx, &bad[k].d, bad[k].n_groups, bad[k].g, &opt),
                     WGML_ERROR_INVALID_ARGUMENT);
        CHECK(opt == NULL);
        if (!test_message_has(ctx, "optimizer_create_groups") || !test_message_has(ctx, bad[k].want)) {
            fprintf(stderr, "  want \"%s\" in \"%s\"\n", bad[k].want, wgml_error_message(ctx));
            CHECK(!"the message names the field and its value");
        }
        if (opt && opt != (wgml_optimizer *)&bad) wgml_optimizer_free(opt);
    }
    wgml_optimizer *opt = NULL;
    CHECK_STATUS(ctx, wgml_optimizer_create_groups(ctx, &ok, 1, NULL, &opt), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "groups is NULL"));
    CHECK_STATUS(ctx, wgml_optimizer_create_groups(ctx, NULL, 1, &g0, &opt), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "desc is NULL"));
    CHECK_STATUS(ctx, wgml_optimizer_create_groups(ctx, &ok, 1, &g0, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "out is NULL"));
    CHECK_STATUS(NULL, wgml_optimizer_create_groups(NULL, &ok, 1, &g0, &opt), WGML_ERROR_INVALID_ARGUMENT);
    /* the single-group creator names its parameters by index */
    wgml_tensor *dup[2] = {t[0], t[0]};
    CHECK_STATUS(ctx, wgml_optimizer_create(ctx, &ok, 2, dup, &opt), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "optimizer_create: parameter 1 is also parameter 0"));

    /* the refused calls took nothing: the tensors are as they were and make a good optimiser */
    float got[3];
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ctx, wgml_tensor_read(t[i], got, 3));
        CHECK(got[0] == 1 && got[1] == 2 && got[2] == 3);
    }
    wgml_param_group good[2] = {g0, g1};
    CHECK_OK(ctx, wgml_optimizer_create_groups(ctx, &ok, 2, good, &opt));
    if (opt) {
        /* schedules: every field checked, the old schedule kept on refusal */
        wgml_lr_schedule keep = {.warmup_steps = 4, .total_steps = 10, .decay = WGML_LR_DECAY_LINEAR};
        CHECK_OK(ctx, wgml_optimizer_set_schedule(opt, &keep));
        float before = wgml_optimizer_lr(opt);
        CHECK(near("lr at step 0", before, 1e-3 / 5, 1e-6));
        struct { wgml_lr_schedule s; const char *want; } bs[] = {
            {{.warmup_steps = -1}, "warmup_steps = -1"},
            {{.total_steps = -5}, "total_steps = -5"},
            {{.warmup_steps = 10, .total_steps = 10, .decay = WGML_LR_DECAY_COSINE}, "total_steps = 10 must be > warmup_steps = 10"},
            {{.warmup_steps = 20, .total_steps = 10, .decay = WGML_LR_DECAY_LINEAR}, "total_steps = 10 must be > warmup_steps = 20"},
            {{.total_steps = 0, .decay = WGML_LR_DECAY_COSINE}, "total_steps = 0"},
            {{.decay = (wgml_lr_decay)7}, "decay = 7"},
            {{.total_steps = 10, .decay = WGML_LR_DECAY_COSINE, .min_lr_ratio = -0.1f}, "min_lr_ratio = -0.1"},
            {{.total_steps = 10, .decay = WGML_LR_DECAY_COSINE, .min_lr_ratio = 1.5f}, "min_lr_ratio = 1.5"},
            {{.total_steps = 10, .decay = WGML_LR_DECAY_COSINE, .min_lr_ratio = NAN}, "min_lr_ratio = nan"},
        };
        for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++) {
            CHECK_STATUS(ctx, wgml_optimizer_set_schedule(opt, &bs[j].s), WGML_ERROR_INVALID_ARGUMENT);
            if (!test_message_has(ctx, "optimizer_set_schedule") || !test_message_has(ctx, bs[j].want)) {
                fprintf(stderr, "  want \"%s\" in \"%s\"\n", bs[j].want, wgml_error_message(ctx));
                CHECK(!"the message names the field and its value");
            }
            CHECK(isnan(wgml_lr_at(&bs[j].s, 1.0f, 0)));
            CHECK(wgml_optimizer_lr(opt) == before);
        }
        wgml_optimizer_free(opt);
    }
    CHECK_STATUS(NULL, wgml_optimizer_set_schedule(NULL, &(wgml_lr_schedule){0}), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(isnan(wgml_optimizer_lr(NULL)));
    wgml_tensor_free(lazy);
    for (int i = 0; i < 3; i++) wgml_tensor_free(t[i]);
    wgml_clear_error(ctx);
}

/* A tensor lives in one optimiser's slot: a second optimiser over it takes it over (a script
   run again makes its optimiser again), and the first one's step is refused from then on,
   since its update would go to the slot the tensor left, not to the tensor. */
static void a_parameter_has_one_optimizer(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[7], c[7];
    test_fill_uniform(x, 7, -1, 1);
    test_fill_uniform(c, 7, 0.5, 2);
    int64_t n = 7;
    wgml_tensor *w = test_tensor(ctx, 1, &n, x), *b = test_tensor(ctx, 1, &n, x), *k = test_tensor(ctx, 1, &n, c);
    if (!w || !b || !k) return;
    const wgml_optim_desc sgd = {.kind = WGML_OPTIM_SGD, .lr = 0.25f};
    wgml_tensor *both[2] = {w, b}, *one[1] = {w};
    wgml_optimizer *first = NULL, *second = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &sgd, 2, both, &first));
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &sgd, 1, one, &second));
    float got[7];
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_add(ctx, wgml_sum_all(ctx, wgml_mul(ctx, w, k)), wgml_sum_all(ctx, b))));
    if (first) {
        CHECK_STATUS(ctx, wgml_optimizer_step(first, 0, NULL), WGML_ERROR_INVALID_ARGUMENT);
        CHECK(test_message_has(ctx, "parameter 0 was taken by an optimizer made later"));
        wgml_clear_error(ctx);
    }
    CHECK_OK(ctx, wgml_tensor_read(w, got, 7));
    CHECK(memcmp(got, x, sizeof x) == 0); /* the refused step moved nothing */
    /* the second one's step reaches w: w - lr k, the gradient of sum(w k) */
    if (second) CHECK_OK(ctx, wgml_optimizer_step(second, 0, NULL));
    wgml_scope_end(ctx);
    CHECK_OK(ctx, wgml_tensor_read(w, got, 7));
    for (int i = 0; i < 7; i++) CHECK(fabsf(got[i] - (x[i] - 0.25f * c[i])) <= 1e-6f * (1 + fabsf(x[i])));
    wgml_optimizer_free(second);
    wgml_optimizer_free(first);
    /* a tensor of another context: WGML_ERROR_CONTEXT, as from any op */
    wgml_context *other = NULL;
    if (wgml_context_create(NULL, &other) == WGML_OK) {
        wgml_optimizer *o = NULL;
        CHECK_STATUS(other, wgml_optimizer_create(other, &sgd, 1, one, &o), WGML_ERROR_CONTEXT);
        CHECK(o == NULL && test_message_has(other, "parameter 0 is a tensor of another context"));
        wgml_context_free(other);
    }
    wgml_tensor_free(w), wgml_tensor_free(b), wgml_tensor_free(k);
}

/* A step that fails (a parameter without a gradient) loses nothing and leaves the optimiser
   usable: the next backward and step (the gradients summed with those left pending) go through,
   and so does a step retried as it was. It used to leave the pending gradients writing into the
   flat buffer, and the next step's sum read and wrote it in one dispatch (WebGPU refused it:
   an abort under wgpu-native). */
static void a_failed_step_loses_nothing(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    float x[7], y[7];
    test_fill_uniform(x, 7, -1, 1);
    test_fill_uniform(y, 7, -1, 1);
    int64_t n = 7;
    wgml_tensor *a = test_tensor(ctx, 1, &n, x), *b = test_tensor(ctx, 1, &n, y);
    if (!a || !b) return;
    wgml_optimizer *opt = NULL;
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &(wgml_optim_desc){.kind = WGML_OPTIM_SGD, .lr = 0.5f}, 2, (wgml_tensor *[]){a, b}, &opt));
    if (!opt) return;
    wgml_scope_begin(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, b))); /* a forgotten: no gradient */
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_INVALID_ARGUMENT);
    CHECK(test_message_has(ctx, "parameter 0 has no gradient"));
    CHECK_STATUS(ctx, wgml_optimizer_step(opt, 0, NULL), WGML_ERROR_INVALID_ARGUMENT); /* retried as it was */
    wgml_clear_error(ctx);
    CHECK_OK(ctx, wgml_backward(wgml_sum_all(ctx, wgml_add(ctx, a, b)))); /* b's gradient is now 2 */
    CHECK_OK(ctx, wgml_optimizer_step(opt, 0, NULL));
    wgml_scope_end(ctx);
    float ga[7], gb[7];
    CHECK_OK(ctx, wgml_tensor_read(a, ga, 7));
    CHECK_OK(ctx, wgml_tensor_read(b, gb, 7));
    for (int i = 0; i < 7; i++) {
        CHECK(fabsf(ga[i] - (x[i] - 0.5f)) <= 1e-6f);
        CHECK(fabsf(gb[i] - (y[i] - 1.0f)) <= 1e-6f);
    }
    wgml_optimizer_free(opt);
    wgml_tensor_free(a), wgml_tensor_free(b);
}

int main(void)
{
    TEST_RUN(adamw_groups_match_reference);
    TEST_RUN(sgd_groups_match_reference);
    TEST_RUN(schedule_matches_closed_form);
    TEST_RUN(steps_follow_schedule_without_compiling);
    TEST_RUN(one_group_follows_schedule_and_scale);
    TEST_RUN(one_group_applies_its_decay);
    TEST_RUN(bad_groups_are_refused);
    TEST_RUN(a_parameter_has_one_optimizer);
    TEST_RUN(a_failed_step_loses_nothing);
    return test_summary();
}
