/*
 * Training checkpoints (src/models/mlp_checkpoint.c): a save and read round trip that restores
 * the model, the moments, the step and the run's settings exactly; and files that must be
 * refused with a message naming the tensor or key: a moment or weight of the wrong shape
 * (a moment of shape [1] was once copied as if it had its parameter's size, reading past
 * its end), a missing moment, a tensor that is not the model's, bad metadata values.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "io/safetensors.h"
#include "models/mlp_checkpoint.h"

static char dir[256];
static const int64_t sizes[3] = {12, 8, 5};
static const wgml_train_settings settings = {.seed = 7, .lr = 0.0123f, .weight_decay = 0.01f, .max_grad_norm = 0.5f, .batch = 4};

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

/* An MLP trained one step (so the moments are not zero) and its AdamW optimiser. */
static int trained_model(wgml_context *ctx, const int64_t *sz, wgml_mlp *m, wgml_optimizer **opt)
{
    if (wgml_mlp_create(ctx, 2, sz, 3, NULL, NULL, m)) return -1;
    wgml_tensor *params[4];
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = settings.lr, .max_grad_norm = settings.max_grad_norm};
    if (wgml_optimizer_create(ctx, &d, wgml_mlp_params(m, params), params, opt)) return -1;
    float xs[4 * 12], labels[4] = {0, 1, 2, 4}, loss, correct;
    test_fill_uniform(xs, 4 * 12, 0, 1);
    int64_t xshape[2] = {4, 12}, lshape = 4;
    wgml_tensor *x = NULL, *lab = NULL;
    wgml_status st = wgml_tensor_from_data(ctx, 2, xshape, xs, 4 * 12, &x);
    if (!st) st = wgml_tensor_from_data(ctx, 1, &lshape, labels, 4, &lab);
    if (!st) st = wgml_mlp_train_step(m, *opt, x, lab, &loss, &correct);
    wgml_tensor_free(x);
    wgml_tensor_free(lab);
    return st ? -1 : 0;
}

/* A trained model saved to `good`, and the path `bad` the refusal cases write their damaged
   copies to (both 512 bytes). */
static void saved_model(wgml_context *ctx, wgml_mlp *m, wgml_optimizer **opt, char *good, char *bad)
{
    CHECK(trained_model(ctx, sizes, m, opt) == 0);
    path_of(good, 512, "good.safetensors");
    path_of(bad, 512, "bad.safetensors");
    CHECK_OK(ctx, wgml_checkpoint_save(good, m, *opt, 1, &settings));
}

/* A tensor's values on the host (malloc'd). */
static float *values(wgml_tensor *t)
{
    size_t n = (size_t)wgml_tensor_numel(t);
    float *v = malloc(n * sizeof *v);
    if (wgml_tensor_read(t, v, n)) {
        free(v);
        return NULL;
    }
    return v;
}

static int same_values(wgml_tensor *a, wgml_tensor *b)
{
    if (wgml_tensor_numel(a) != wgml_tensor_numel(b)) return 0;
    float *va = values(a), *vb = values(b);
    int same = va && vb && memcmp(va, vb, (size_t)wgml_tensor_numel(a) * sizeof(float)) == 0;
    free(va);
    free(vb);
    return same;
}

/* Rewrites src as dst with one change: tensor `name` given shape dims (zeros), dropped
   (ndim < 0), or added when absent; metadata `key` set to `value` (NULL: dropped), where
   key is given. */
static void rewrite(const char *src, const char *dst, const char *name, int ndim, const int64_t *dims, const char *key,
                    const char *value)
{
    wgml_st_file f;
    char err[512];
    CHECK(wgml_safetensors_read(src, &f, err, sizeof err) == WGML_OK);
    wgml_st_tensor *t = calloc((size_t)f.count + 1, sizeof *t);
    int n = 0, found = 0;
    float *zeros = calloc(1024, sizeof(float));
    for (int i = 0; i <= f.count; i++) {
        int added = i == f.count;
        if (added && (found || !name || ndim < 0)) break;
        wgml_st_tensor e = added ? (wgml_st_tensor){0} : f.tensors[i];
        if (added) snprintf(e.name, sizeof e.name, "%s", name);
        if (name && strcmp(e.name, name) == 0) {
            found = 1;
            if (ndim < 0) continue;
            e.ndim = ndim;
            for (int d = 0; d < 4; d++) e.shape[d] = d < ndim ? dims[d] : 0;
            e.data = zeros;
        }
        t[n++] = e;
    }
    const char *keys[16], *vals[16];
    int nm = 0, key_found = 0;
    for (int i = 0; i < f.meta_count && nm < 15; i++) {
        if (key && strcmp(f.meta_keys[i], key) == 0) {
            key_found = 1;
            if (!value) continue;
            keys[nm] = key, vals[nm++] = value;
        } else {
            keys[nm] = f.meta_keys[i], vals[nm++] = f.meta_values[i];
        }
    }
    if (key && value && !key_found) keys[nm] = key, vals[nm++] = value;
    CHECK(wgml_safetensors_write(dst, t, n, keys, vals, nm, err, sizeof err) == WGML_OK);
    free(zeros);
    free(t);
    wgml_st_file_free(&f);
}

/* src with element `index` of tensor `name` set to value, as dst. */
static void poke(const char *src, const char *dst, const char *name, int64_t index, float value)
{
    wgml_st_file f;
    char err[512];
    CHECK(wgml_safetensors_read(src, &f, err, sizeof err) == WGML_OK);
    for (int i = 0; i < f.count; i++)
        if (strcmp(f.tensors[i].name, name) == 0) f.tensors[i].data[index] = value;
    const char *keys[32], *vals[32];
    CHECK(f.meta_count <= 32);
    for (int i = 0; i < f.meta_count && i < 32; i++) keys[i] = f.meta_keys[i], vals[i] = f.meta_values[i];
    CHECK(wgml_safetensors_write(dst, f.tensors, f.count, keys, vals, f.meta_count, err, sizeof err) == WGML_OK);
    wgml_st_file_free(&f);
}

/* Reading path must fail with `want` and a message holding each of the needles. */
static void refused(wgml_context *ctx, const char *path, wgml_status want, const char *what, const char *const *needles)
{
    wgml_checkpoint ck;
    wgml_clear_error(ctx);
    wgml_status st = wgml_checkpoint_read(ctx, path, &ck);
    const char *msg = wgml_error_message(ctx);
    if (st != want) fprintf(stderr, "  %s: got %s, want %s: %s\n", what, wgml_status_name(st), wgml_status_name(want), msg);
    CHECK(st == want);
    CHECK(ck.file.count == 0 && ck.nlayers == 0); /* zeroed on failure */
    for (int i = 0; needles[i]; i++) {
        if (!strstr(msg, needles[i])) fprintf(stderr, "  %s: the message lacks '%s': %s\n", what, needles[i], msg);
        CHECK(strstr(msg, needles[i]) != NULL);
    }
    fprintf(stderr, "  %-28s -> %s\n", what, msg);
    wgml_checkpoint_free(&ck);
}

static void round_trip(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_mlp m = {0}, back = {0};
    wgml_optimizer *opt = NULL, *opt2 = NULL;
    CHECK(trained_model(ctx, sizes, &m, &opt) == 0);
    char path[512];
    path_of(path, sizeof path, "ck.safetensors");
    CHECK_OK(ctx, wgml_checkpoint_save(path, &m, opt, 3, &settings));

    wgml_checkpoint ck;
    CHECK_OK(ctx, wgml_checkpoint_read(ctx, path, &ck));
    CHECK(ck.epoch == 3 && ck.step == 1 && ck.nlayers == 2 && ck.has_moments);
    CHECK(ck.sizes[0] == 12 && ck.sizes[1] == 8 && ck.sizes[2] == 5);
    CHECK(ck.stored == (WGML_CK_SEED | WGML_CK_LR | WGML_CK_WEIGHT_DECAY | WGML_CK_MAX_GRAD_NORM | WGML_CK_BATCH));
    /* settings read back as the very same values */
    CHECK(ck.settings.seed == 7 && ck.settings.lr == 0.0123f && ck.settings.weight_decay == 0.01f &&
          ck.settings.max_grad_norm == 0.5f && ck.settings.batch == 4 && ck.settings.ranks == 1); /* ranks 0 is written 1 */
    CHECK(strcmp(wgml_st_meta(&ck.file, "lr"), "0.0123") == 0); /* the shortest exact text */

    CHECK_OK(ctx, wgml_checkpoint_mlp(ctx, &ck, &back));
    wgml_tensor *p1[4], *p2[4];
    wgml_mlp_params(&m, p1);
    int np = wgml_mlp_params(&back, p2);
    for (int i = 0; i < np; i++) CHECK(same_values(p1[i], p2[i]));
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = ck.settings.lr};
    CHECK_OK(ctx, wgml_optimizer_create(ctx, &d, np, p2, &opt2));
    CHECK_OK(ctx, wgml_checkpoint_restore_optimizer(ctx, &ck, opt2));
    CHECK(wgml_optimizer_steps(opt2) == 1);
    for (int i = 0; i < np && opt2; i++) {
        wgml_tensor *m1 = NULL, *v1 = NULL, *m2 = NULL, *v2 = NULL;
        CHECK_OK(ctx, wgml_optimizer_state(opt, i, &m1, &v1));
        CHECK_OK(ctx, wgml_optimizer_state(opt2, i, &m2, &v2));
        CHECK(same_values(m1, m2) && same_values(v1, v2));
        /* a step was taken: the moments hold something (not every entry: a unit the batch
           left dead has no gradient) */
        float *v = values(v1);
        int64_t nv = wgml_tensor_numel(v1), held = 0;
        for (int64_t j = 0; v && j < nv; j++) held += v[j] != 0;
        CHECK(held > 0);
        free(v);
        wgml_tensor_free(m1), wgml_tensor_free(v1), wgml_tensor_free(m2), wgml_tensor_free(v2);
    }
    wgml_checkpoint_free(&ck);
    wgml_checkpoint_free(&ck); /* twice is safe */

    /* A model of other sizes: its optimiser's slots do not fit the checkpoint's moments,
       and restoring checks them once more instead of writing past the smaller one. */
    CHECK_OK(ctx, wgml_checkpoint_read(ctx, path, &ck));
    wgml_mlp other = {0};
    wgml_optimizer *opt3 = NULL;
    const int64_t other_sizes[3] = {12, 8, 6};
    CHECK(trained_model(ctx, other_sizes, &other, &opt3) == 0);
    CHECK_STATUS(ctx, wgml_checkpoint_restore_optimizer(ctx, &ck, opt3), WGML_ERROR_SHAPE);
    CHECK(strstr(wgml_error_message(ctx), "'W1.m' has shape [8, 5], but its optimizer slot has shape [8, 6]") != NULL);
    fprintf(stderr, "  restore into other sizes -> %s\n", wgml_error_message(ctx));
    wgml_checkpoint_free(&ck);

    wgml_optimizer_free(opt);
    wgml_optimizer_free(opt2);
    wgml_optimizer_free(opt3);
    wgml_mlp_free(&m);
    wgml_mlp_free(&back);
    wgml_mlp_free(&other);
    remove(path);
}

static void refuses_bad_tensors(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_mlp m = {0};
    wgml_optimizer *opt = NULL;
    char good[512], bad[512];
    saved_model(ctx, &m, &opt, good, bad);
    wgml_checkpoint ck;

    const int64_t one[1] = {1}, three[1] = {3}, transposed[2] = {8, 12};
    rewrite(good, bad, "W0.v", 1, one, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_SHAPE, "moment W0.v of shape [1]",
            (const char *const[]){"'W0.v' has shape [1], want [12, 8] (the shape of W0)", NULL});
    rewrite(good, bad, "b1.m", 1, three, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_SHAPE, "moment b1.m of shape [3]", (const char *const[]){"'b1.m' has shape [3], want [5]", NULL});
    rewrite(good, bad, "W1.v", 0, NULL, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_SHAPE, "moment W1.v a scalar", (const char *const[]){"'W1.v' has shape [], want [8, 5]", NULL});
    rewrite(good, bad, "W0", 2, transposed, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_SHAPE, "weight W0 transposed",
            (const char *const[]){"'W0' has shape [8, 12], want [12, 8] (the metadata's sizes 12,8,5)", NULL});
    rewrite(good, bad, "b0", -1, NULL, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_FORMAT, "bias b0 missing", (const char *const[]){"'b0' is missing", NULL});
    rewrite(good, bad, "b0.v", -1, NULL, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_FORMAT, "moment b0.v missing", (const char *const[]){"'b0.v' is missing", "7 of the 8", NULL});
    rewrite(good, bad, "W2", 2, transposed, NULL, NULL);
    refused(ctx, bad, WGML_ERROR_FORMAT, "a third layer's weight", (const char *const[]){"unexpected tensor 'W2'", NULL});
    /* moments no AdamW step can leave: refused when read, not at the first step */
    poke(good, bad, "W0.v", 17, -0.25f);
    refused(ctx, bad, WGML_ERROR_FORMAT, "a negative second moment",
            (const char *const[]){"optimiser moment 'W0.v' holds -0.25 at element 17", "corrupt", NULL});
    poke(good, bad, "b1.m", 4, NAN);
    refused(ctx, bad, WGML_ERROR_FORMAT, "a first moment NaN", (const char *const[]){"optimiser moment 'b1.m' holds nan at element 4", NULL});
    poke(good, bad, "b0.v", 0, INFINITY);
    refused(ctx, bad, WGML_ERROR_FORMAT, "a second moment inf", (const char *const[]){"'b0.v' holds inf at element 0", NULL});
    poke(good, bad, "W1", 6, NAN); /* a weight of a run that diverged: nothing to go on from */
    refused(ctx, bad, WGML_ERROR_FORMAT, "a weight NaN", (const char *const[]){"'W1' holds nan at element 6", NULL});
    poke(good, bad, "W0.m", 3, -5.0f); /* a first moment may be negative */
    CHECK_OK(ctx, wgml_checkpoint_read(ctx, bad, &ck));
    wgml_checkpoint_free(&ck);

    /* Weights only: fine for evaluation, refused for resuming. */
    const char *moments[] = {"W0.m", "W0.v", "b0.m", "b0.v", "W1.m", "W1.v", "b1.m", "b1.v"};
    char from[512], to[512];
    snprintf(from, sizeof from, "%s", good);
    for (int i = 0; i < 8; i++) {
        path_of(to, sizeof to, i % 2 ? "w_odd.safetensors" : "w_even.safetensors");
        rewrite(from, to, moments[i], -1, NULL, NULL, NULL);
        snprintf(from, sizeof from, "%s", to);
    }
    CHECK_OK(ctx, wgml_checkpoint_read(ctx, from, &ck));
    CHECK(!ck.has_moments && ck.file.count == 4);
    wgml_mlp back = {0};
    CHECK_OK(ctx, wgml_checkpoint_mlp(ctx, &ck, &back));
    CHECK_STATUS(ctx, wgml_checkpoint_restore_optimizer(ctx, &ck, opt), WGML_ERROR_FORMAT);
    CHECK(strstr(wgml_error_message(ctx), "no optimiser moments") != NULL);
    wgml_checkpoint_free(&ck);
    wgml_mlp_free(&back);
    remove(from);
    path_of(to, sizeof to, "w_even.safetensors");
    remove(to);

    wgml_optimizer_free(opt);
    wgml_mlp_free(&m);
    remove(good);
    remove(bad);
}

static void refuses_bad_metadata(void)
{
    wgml_context *ctx = test_context();
    if (!ctx) return;
    wgml_mlp m = {0};
    wgml_optimizer *opt = NULL;
    char good[512], bad[512];
    saved_model(ctx, &m, &opt, good, bad);

    static const struct { const char *key, *value; } cases[] = {
        {"epoch", "-3"}, {"epoch", "99999999999"}, {"epoch", "abc"}, {"epoch", ""}, {"epoch", "2 "},
        {"step", "-1"}, {"step", "9223372036854775808"}, {"seed", "-1"}, {"seed", "0x7"},
        {"lr", "nan"}, {"lr", "-1"}, {"lr", "1e40"}, {"weight_decay", "inf"}, {"max_grad_norm", "0.5.1"},
        {"batch", "0"}, {"batch", "4294967300"}, {"sizes", "12,8,abc"}, {"sizes", "12,,5"}, {"sizes", "12,8,5,"},
        {"sizes", "12"}, {"sizes", "12,-8,5"}, {"sizes", "1,1,1,1,1,1,1,1,1"}, {"ranks", "0"}, {"ranks", "two"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite(good, bad, NULL, 0, NULL, cases[i].key, cases[i].value);
        char what[128], quoted[128];
        snprintf(what, sizeof what, "%s '%s'", cases[i].key, cases[i].value);
        snprintf(quoted, sizeof quoted, "'%s'", cases[i].value);
        refused(ctx, bad, WGML_ERROR_FORMAT, what, (const char *const[]){cases[i].key, quoted, NULL});
    }
    /* sizes that parse but do not match the tensors */
    rewrite(good, bad, NULL, 0, NULL, "sizes", "12,8,6");
    refused(ctx, bad, WGML_ERROR_SHAPE, "sizes 12,8,6", (const char *const[]){"'W1' has shape [8, 5], want [8, 6]", NULL});
    rewrite(good, bad, NULL, 0, NULL, "epoch", NULL);
    refused(ctx, bad, WGML_ERROR_FORMAT, "no epoch", (const char *const[]){"not a wgml checkpoint", "'epoch'", NULL});

    /* A checkpoint from before the settings were stored: only the seed. */
    char step1[512];
    path_of(step1, sizeof step1, "old1.safetensors");
    rewrite(good, step1, NULL, 0, NULL, "lr", NULL);
    rewrite(step1, bad, NULL, 0, NULL, "weight_decay", NULL);
    rewrite(bad, step1, NULL, 0, NULL, "max_grad_norm", NULL);
    rewrite(step1, bad, NULL, 0, NULL, "batch", NULL);
    wgml_checkpoint ck;
    CHECK_OK(ctx, wgml_checkpoint_read(ctx, bad, &ck));
    CHECK(ck.stored == WGML_CK_SEED && ck.settings.seed == 7 && ck.settings.lr == 0 && ck.settings.batch == 0);
    wgml_checkpoint_free(&ck);
    remove(step1);

    /* A save that cannot be written says why. */
    char missing[512];
    path_of(missing, sizeof missing, "no_such_dir/ck.safetensors");
    wgml_clear_error(ctx);
    CHECK_STATUS(ctx, wgml_checkpoint_save(missing, &m, opt, 1, &settings), WGML_ERROR_IO);
    CHECK(strstr(wgml_error_message(ctx), "no_such_dir") != NULL);
    CHECK_STATUS(ctx, wgml_checkpoint_read(ctx, missing, &ck), WGML_ERROR_IO);
    CHECK(strstr(wgml_error_message(ctx), "no_such_dir") != NULL);

    wgml_optimizer_free(opt);
    wgml_mlp_free(&m);
    remove(good);
    remove(bad);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/wgml_test_checkpoint.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(round_trip);
    TEST_RUN(refuses_bad_tensors);
    TEST_RUN(refuses_bad_metadata);
    rmdir(dir);
    return test_summary();
}
