/*
 * wgml train: an MLP on Fashion-MNIST with AdamW and gradient clipping, a progress bar, a
 * safetensors checkpoint after every epoch (weights, optimiser moments, step, epoch) and a
 * CSV of metrics. --resume continues from a checkpoint: shuffling is seeded per epoch, so the
 * result equals an uninterrupted run with the same seed.
 * wgml eval CHECKPOINT: the test accuracy of a checkpoint.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "io/idx.h"
#include "io/safetensors.h"
#include "tools/cli.h"
#include "train/mlp.h"

/* mkdir -p: the output folder and any missing parents (a fresh checkout has no out/). */
static int make_dirs(const char *path)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *c = '/';
    }
    if (mkdir(p, 0755) && errno != EEXIST) return -1;
    return 0;
}

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

typedef struct options {
    int epochs, batch;
    float lr, wd, clip;
    uint64_t seed;
    int nlayers;
    int64_t sizes[WGML_MLP_MAX_LAYERS + 1];
    const char *out, *resume, *data;
} options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_hidden(const char *s, options *o)
{
    o->nlayers = 0;
    o->sizes[0] = 784;
    char *end;
    while (*s) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536 || o->nlayers + 2 > WGML_MLP_MAX_LAYERS) return -1;
        o->sizes[++o->nlayers] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    o->sizes[++o->nlayers] = 10;
    return 0;
}

/* ---------------------------------------------------------------- checkpoints */

static int save_checkpoint(const char *path, wgml_mlp *m, wgml_optimizer *opt, int epoch, const options *o)
{
    wgml_tensor *params[2 * WGML_MLP_MAX_LAYERS];
    int np = wgml_mlp_params(m, params);
    wgml_st_tensor *t = calloc((size_t)np * 3, sizeof *t);
    int count = 0, rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        wgml_tensor *src[3] = {params[i], NULL, NULL};
        if (wgml_optimizer_state(opt, i, &src[1], &src[2])) rc = -1;
        const char *kind[3] = {"", ".m", ".v"};
        for (int k = 0; k < 3 && !rc; k++) {
            wgml_st_tensor *e = &t[count++];
            snprintf(e->name, sizeof e->name, "%s%d%s", i % 2 ? "b" : "W", i / 2, kind[k]);
            e->ndim = wgml_tensor_ndim(src[k]);
            for (int d = 0; d < e->ndim; d++) e->shape[d] = wgml_tensor_dim(src[k], d);
            size_t n = (size_t)wgml_tensor_numel(src[k]);
            e->data = malloc(n * sizeof(float));
            if (!e->data || wgml_tensor_read(src[k], e->data, n)) rc = -1;
        }
        wgml_tensor_free(src[1]);
        wgml_tensor_free(src[2]);
    }
    char step[32], ep[32], hidden[128] = "", seed[32];
    snprintf(step, sizeof step, "%lld", (long long)wgml_optimizer_steps(opt));
    snprintf(ep, sizeof ep, "%d", epoch);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    for (int l = 0; l <= m->nlayers; l++)
        snprintf(hidden + strlen(hidden), sizeof hidden - strlen(hidden), "%s%lld", l ? "," : "", (long long)m->sizes[l]);
    const char *keys[4] = {"step", "epoch", "sizes", "seed"}, *vals[4] = {step, ep, hidden, seed};
    char err[512];
    if (!rc && wgml_safetensors_write(path, t, count, keys, vals, 4, err, sizeof err)) {
        fprintf(stderr, "wgml train: %s\n", err);
        rc = -1;
    }
    for (int i = 0; i < count; i++) free(t[i].data);
    free(t);
    return rc;
}

/* Loads the checkpoint's sizes and, with an optimiser, its moments and step. */
static int load_checkpoint(const char *path, wgml_context *ctx, wgml_mlp *m, options *o, wgml_st_file *f, int *epoch)
{
    char err[512];
    if (wgml_safetensors_read(path, f, err, sizeof err)) {
        fprintf(stderr, "wgml: %s\n", err);
        return -1;
    }
    const char *sizes = wgml_st_meta(f, "sizes"), *ep = wgml_st_meta(f, "epoch");
    if (!sizes || !ep) {
        fprintf(stderr, "wgml: %s: not a wgml checkpoint (no sizes/epoch metadata)\n", path);
        return -1;
    }
    o->nlayers = -1;
    for (const char *s = sizes; s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL)
        if (o->nlayers + 1 <= WGML_MLP_MAX_LAYERS) o->sizes[++o->nlayers] = strtoll(s, NULL, 10);
    *epoch = atoi(ep);
    const float *W[WGML_MLP_MAX_LAYERS], *b[WGML_MLP_MAX_LAYERS];
    for (int l = 0; l < o->nlayers; l++) {
        char wn[32], bn[32];
        snprintf(wn, sizeof wn, "W%d", l);
        snprintf(bn, sizeof bn, "b%d", l);
        const wgml_st_tensor *wt = wgml_st_find(f, wn), *bt = wgml_st_find(f, bn);
        if (!wt || !bt || wt->ndim != 2 || wt->shape[0] != o->sizes[l] || wt->shape[1] != o->sizes[l + 1] || bt->ndim != 1 ||
            bt->shape[0] != o->sizes[l + 1]) {
            fprintf(stderr, "wgml: %s: layer %d is missing or has the wrong shape\n", path, l);
            return -1;
        }
        W[l] = wt->data;
        b[l] = bt->data;
    }
    if (o->nlayers < 1 || wgml_mlp_create(ctx, o->nlayers, o->sizes, 0, W, b, m)) {
        fprintf(stderr, "wgml: %s: cannot build the model: %s\n", path, wgml_error_message(ctx));
        return -1;
    }
    return 0;
}

static int restore_optimizer(const wgml_st_file *f, wgml_optimizer *opt, int np)
{
    for (int i = 0; i < np; i++) {
        wgml_tensor *mt, *vt;
        if (wgml_optimizer_state(opt, i, &mt, &vt)) return -1;
        char mn[32], vn[32];
        snprintf(mn, sizeof mn, "%s%d.m", i % 2 ? "b" : "W", i / 2);
        snprintf(vn, sizeof vn, "%s%d.v", i % 2 ? "b" : "W", i / 2);
        const wgml_st_tensor *ms = wgml_st_find(f, mn), *vs = wgml_st_find(f, vn);
        size_t n = (size_t)wgml_tensor_numel(mt);
        int bad = !ms || !vs || wgml_tensor_write(mt, ms->data, n) || wgml_tensor_write(vt, vs->data, n);
        wgml_tensor_free(mt);
        wgml_tensor_free(vt);
        if (bad) return -1;
    }
    const char *step = wgml_st_meta(f, "step");
    return step ? (int)wgml_optimizer_set_steps(opt, strtoll(step, NULL, 10)) : -1;
}

/* ---------------------------------------------------------------- evaluation */

static int evaluate(wgml_context *ctx, wgml_mlp *m, const wgml_mnist *test, double *accuracy, double *loss)
{
    const int64_t B = 1000;
    double correct = 0, total_loss = 0;
    float *labf = malloc((size_t)B * sizeof *labf);
    for (int64_t first = 0; first < test->n; first += B) {
        int64_t n = test->n - first < B ? test->n - first : B;
        int64_t xs[2] = {n, 784};
        for (int64_t i = 0; i < n; i++) labf[i] = test->labels[first + i];
        wgml_scope_begin(ctx);
        wgml_tensor *x = NULL, *lab = NULL;
        wgml_status st = wgml_tensor_from_data(ctx, 2, xs, test->images + first * 784, (size_t)(n * 784), &x);
        if (!st) st = wgml_tensor_from_data(ctx, 1, &n, labf, (size_t)n, &lab);
        float c = 0, l = 0;
        wgml_tensor *logits = st ? NULL : wgml_mlp_forward(m, x);
        wgml_tensor *cc = wgml_count_correct(ctx, logits, lab), *ll = wgml_cross_entropy(ctx, logits, lab);
        wgml_tensor *both[2] = {cc, ll};
        if (!st) st = wgml_eval(ctx, 2, both);
        if (!st) st = wgml_tensor_read(cc, &c, 1);
        if (!st) st = wgml_tensor_read(ll, &l, 1);
        wgml_scope_end(ctx);
        if (st) {
            fprintf(stderr, "wgml: evaluation failed: %s\n", wgml_error_message(ctx));
            free(labf);
            return -1;
        }
        correct += c;
        total_loss += (double)l * (double)n;
    }
    free(labf);
    *accuracy = correct / (double)test->n;
    *loss = total_loss / (double)test->n;
    return 0;
}

/* ---------------------------------------------------------------- train */

static void shuffle(int64_t *idx, int64_t n, uint64_t seed, int epoch)
{
    uint64_t rng = seed * 1000003u + (uint64_t)epoch;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(wgml_rng_next(&rng) % (uint64_t)(i + 1));
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

int cmd_train(int argc, char **argv)
{
    if (cli_has_flag(argc, argv, "--help")) {
        printf("wgml train [--epochs 10] [--batch 128] [--lr 1e-3] [--wd 0] [--clip 1.0] [--hidden 256,128]\n"
               "           [--seed 1] [--out out/train] [--resume CHECKPOINT] [--data %s]\n", DEFAULT_DATA);
        return 0;
    }
    options o = {0};
    o.epochs = atoi(cli_option(argc, argv, "--epochs", "10"));
    o.batch = atoi(cli_option(argc, argv, "--batch", "128"));
    o.lr = (float)atof(cli_option(argc, argv, "--lr", "1e-3"));
    o.wd = (float)atof(cli_option(argc, argv, "--wd", "0"));
    o.clip = (float)atof(cli_option(argc, argv, "--clip", "1.0"));
    o.seed = strtoull(cli_option(argc, argv, "--seed", "1"), NULL, 10);
    o.out = cli_option(argc, argv, "--out", "out/train");
    o.resume = cli_option(argc, argv, "--resume", NULL);
    o.data = cli_option(argc, argv, "--data", DEFAULT_DATA);
    if (o.epochs < 1 || o.batch < 1 || o.batch > 60000 || parse_hidden(cli_option(argc, argv, "--hidden", "256,128"), &o)) {
        fprintf(stderr, "wgml train: bad options (see --help)\n");
        return 2;
    }
    char err[512];
    wgml_mnist train = {0}, test = {0};
    if (wgml_mnist_load(o.data, 1, &train, err, sizeof err) || wgml_mnist_load(o.data, 0, &test, err, sizeof err)) {
        fprintf(stderr, "wgml train: %s\n(install the data set: apt-get install dataset-fashion-mnist)\n", err);
        return 1;
    }
    wgml_context *ctx;
    wgml_status st = wgml_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_create_error());
        return 1;
    }
    wgml_adapter_info info;
    wgml_adapter_info_get(ctx, &info);
    wgml_mlp m;
    wgml_st_file ck = {0};
    int start_epoch = 0;
    int rc = 1;
    if (o.resume ? load_checkpoint(o.resume, ctx, &m, &o, &ck, &start_epoch)
                 : (int)wgml_mlp_create(ctx, o.nlayers, o.sizes, o.seed, NULL, NULL, &m)) {
        if (!o.resume) fprintf(stderr, "wgml train: %s\n", wgml_error_message(ctx));
        goto done_ctx;
    }
    wgml_tensor *params[2 * WGML_MLP_MAX_LAYERS];
    int np = wgml_mlp_params(&m, params);
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = o.lr, .weight_decay = o.wd, .max_grad_norm = o.clip};
    wgml_optimizer *opt = NULL;
    if (wgml_optimizer_create(ctx, &d, np, params, &opt) || (o.resume && restore_optimizer(&ck, opt, np))) {
        fprintf(stderr, "wgml train: optimizer: %s\n", wgml_error_message(ctx));
        goto done_model;
    }
    if (make_dirs(o.out)) {
        fprintf(stderr, "wgml train: cannot create %s: %s\n", o.out, strerror(errno));
        goto done_opt;
    }
    char ckpath[1024], csvpath[1024];
    snprintf(ckpath, sizeof ckpath, "%s/checkpoint.safetensors", o.out);
    snprintf(csvpath, sizeof csvpath, "%s/metrics.csv", o.out);
    FILE *csv = fopen(csvpath, o.resume ? "a" : "w");
    if (!csv) {
        fprintf(stderr, "wgml train: cannot write %s: %s\n", csvpath, strerror(errno));
        goto done_opt;
    }
    if (!o.resume) fprintf(csv, "epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s,epoch_seconds\n");
    printf("training MLP");
    for (int l = 0; l <= o.nlayers; l++) printf("%s%lld", l ? "-" : " ", (long long)o.sizes[l]);
    printf(" on %s (%s), batch %d, AdamW lr %g, clip %g, epochs %d..%d\n", info.name, info.backend, o.batch, o.lr, o.clip,
           start_epoch + 1, o.epochs);

    int64_t *idx = malloc((size_t)train.n * sizeof *idx);
    float *xb = malloc((size_t)o.batch * 784 * sizeof *xb), *lb = malloc((size_t)o.batch * sizeof *lb);
    int64_t xs[2] = {o.batch, 784}, ls = o.batch;
    wgml_tensor *x = NULL, *lab = NULL;
    if (!idx || !xb || !lb || wgml_tensor_zeros(ctx, 2, xs, &x) || wgml_tensor_zeros(ctx, 1, &ls, &lab)) goto done_buffers;
    double test_acc = 0, test_loss = 0;
    for (int epoch = start_epoch; epoch < o.epochs; epoch++) {
        shuffle(idx, train.n, o.seed, epoch);
        int64_t steps = train.n / o.batch; /* full batches; the remainder is dropped */
        double t0 = now(), sum_loss = 0, sum_correct = 0;
        for (int64_t s = 0; s < steps; s++) {
            for (int i = 0; i < o.batch; i++) {
                int64_t k = idx[s * o.batch + i];
                memcpy(xb + (size_t)i * 784, train.images + k * 784, 784 * sizeof *xb);
                lb[i] = train.labels[k];
            }
            float loss, correct;
            if (wgml_tensor_write(x, xb, (size_t)o.batch * 784) || wgml_tensor_write(lab, lb, (size_t)o.batch) ||
                wgml_mlp_train_step(&m, opt, x, lab, &loss, &correct)) {
                fprintf(stderr, "\nwgml train: step failed: %s\n", wgml_error_message(ctx));
                goto done_buffers;
            }
            sum_loss += loss;
            sum_correct += correct;
            if (s % 20 == 0 || s + 1 == steps) {
                double el = now() - t0;
                int bar = (int)(30 * (s + 1) / steps);
                printf("\repoch %2d/%d [%.*s%*s] %5.1f%% loss %.4f acc %.4f %8.0f samples/s", epoch + 1, o.epochs, bar,
                       "==============================", 30 - bar, "", 100.0 * (double)(s + 1) / (double)steps,
                       sum_loss / (double)(s + 1), sum_correct / (double)((s + 1) * o.batch),
                       (double)((s + 1) * o.batch) / el);
                fflush(stdout);
            }
        }
        double secs = now() - t0;
        if (evaluate(ctx, &m, &test, &test_acc, &test_loss)) goto done_buffers;
        printf("  | test loss %.4f acc %.4f (%.1f s)\n", test_loss, test_acc, secs);
        fprintf(csv, "%d,%lld,%.6f,%.6f,%.6f,%.6f,%.1f,%.3f\n", epoch + 1, (long long)wgml_optimizer_steps(opt),
                sum_loss / (double)steps, sum_correct / (double)(steps * o.batch), test_loss, test_acc,
                (double)(steps * o.batch) / secs, secs);
        fflush(csv);
        if (save_checkpoint(ckpath, &m, opt, epoch + 1, &o)) goto done_buffers;
    }
    printf("test accuracy %.4f\ncheckpoint %s\nmetrics %s\n", test_acc, ckpath, csvpath);
    rc = 0;
done_buffers:
    free(idx);
    free(xb);
    free(lb);
    wgml_tensor_free(x);
    wgml_tensor_free(lab);
    fclose(csv);
done_opt:
    wgml_optimizer_free(opt);
done_model:
    wgml_mlp_free(&m);
done_ctx:
    wgml_st_file_free(&ck);
    wgml_context_free(ctx);
    wgml_mnist_free(&train);
    wgml_mnist_free(&test);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    if (argc < 1 || argv[0][0] == '-') {
        fprintf(stderr, "usage: wgml eval CHECKPOINT [--data DIR]\n");
        return 2;
    }
    const char *data = cli_option(argc, argv, "--data", DEFAULT_DATA);
    char err[512];
    wgml_mnist test = {0};
    if (wgml_mnist_load(data, 0, &test, err, sizeof err)) {
        fprintf(stderr, "wgml eval: %s\n", err);
        return 1;
    }
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx)) {
        fprintf(stderr, "wgml eval: %s\n", wgml_last_create_error());
        wgml_mnist_free(&test);
        return 1;
    }
    options o = {0};
    wgml_mlp m;
    wgml_st_file f = {0};
    int epoch = 0, rc = 1;
    double acc, loss;
    if (!load_checkpoint(argv[0], ctx, &m, &o, &f, &epoch)) {
        if (!evaluate(ctx, &m, &test, &acc, &loss)) {
            printf("checkpoint %s (epoch %d): test loss %.4f accuracy %.4f\n", argv[0], epoch, loss, acc);
            rc = 0;
        }
        wgml_mlp_free(&m);
    }
    wgml_st_file_free(&f);
    wgml_context_free(ctx);
    wgml_mnist_free(&test);
    return rc;
}
