/*
 * wgml train: an MLP on Fashion-MNIST with AdamW and gradient clipping, a progress bar, a
 * safetensors checkpoint after every epoch (models/mlp_checkpoint.h: weights, optimiser moments,
 * step, epoch and the run's settings) and a CSV of metrics, a row per step. --resume
 * continues from a checkpoint with the settings stored in it (flags given override them):
 * shuffling is seeded per epoch, so the result equals the uninterrupted run, also from a
 * checkpoint that Ctrl-C / SIGTERM wrote mid-epoch.
 * wgml eval CHECKPOINT: the test accuracy of a checkpoint.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/idx.h"
#include "io/loader.h"
#include "tools/cli.h"
#include "models/mlp_checkpoint.h"
#include "models/mlp.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define MNIST_PIXELS 784
#define MNIST_CLASSES 10

typedef struct options {
    int epochs;
    wgml_train_settings s;
    unsigned given; /* WGML_CK_* bits: settings named on the command line */
    int nlayers, overwrite;
    int64_t sizes[WGML_MLP_MAX_LAYERS + 1];
    const char *out, *resume, *data, *hidden;
    char resume_dir[1024]; /* the default --out of a resumed run */
} options;

static int parse_hidden(const char *s, options *o, char *err, size_t errlen)
{
    o->nlayers = 0;
    o->sizes[0] = MNIST_PIXELS;
    char *end;
    const char *text = s;
    while (*s) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536 || o->nlayers + 2 > WGML_MLP_MAX_LAYERS || (*end && *end != ',')) {
            snprintf(err, errlen, "--hidden is '%s': want up to %d widths in 1..65536, comma-separated", text,
                     WGML_MLP_MAX_LAYERS - 1);
            return -1;
        }
        o->sizes[++o->nlayers] = v;
        s = *end == ',' ? end + 1 : end;
    }
    o->sizes[++o->nlayers] = MNIST_CLASSES;
    return 0;
}

enum { O_EPOCHS = 256, O_BATCH, O_SEED, O_FLOAT, O_OUT = O_FLOAT + WGML_FLOAT_SETTINGS, O_RESUME, O_DATA, O_HIDDEN, O_OVERWRITE };

static const struct option train_flags[] = {
    {"epochs", required_argument, 0, O_EPOCHS}, {"batch", required_argument, 0, O_BATCH},
    {"seed", required_argument, 0, O_SEED},     {"lr", required_argument, 0, O_FLOAT + 0},
    {"wd", required_argument, 0, O_FLOAT + 1},  {"clip", required_argument, 0, O_FLOAT + 2},
    {"out", required_argument, 0, O_OUT},       {"resume", required_argument, 0, O_RESUME},
    {"data", required_argument, 0, O_DATA},     {"hidden", required_argument, 0, O_HIDDEN},
    {"overwrite", no_argument, 0, O_OVERWRITE}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* One flag, parsed strictly (a typo is an error, not a silent 0). */
static int train_flag(int opt, const char *arg, void *state)
{
    options *o = state;
    char err[512];
    int64_t v;
    int bad = 0;
    switch (opt) {
    case O_EPOCHS:
        if (!(bad = wgml_parse_i64("--epochs", arg, 1, WGML_CK_MAX_EPOCH, &v, err, sizeof err) != 0)) o->epochs = (int)v;
        break;
    case O_BATCH:
        if (!(bad = wgml_parse_i64("--batch", arg, 1, WGML_CK_MAX_BATCH, &v, err, sizeof err) != 0)) o->s.batch = (int)v;
        o->given |= WGML_CK_BATCH;
        break;
    case O_SEED:
        bad = wgml_parse_u64("--seed", arg, &o->s.seed, err, sizeof err) != 0;
        o->given |= WGML_CK_SEED;
        break;
    case O_OUT: o->out = arg; break;
    case O_RESUME: o->resume = arg; break;
    case O_DATA: o->data = arg; break;
    case O_HIDDEN: o->hidden = arg; break;
    case O_OVERWRITE: o->overwrite = 1; break;
    default: {
        const wgml_float_setting *fs = &wgml_float_settings[opt - O_FLOAT];
        bad = wgml_parse_f32(fs->flag, arg, 0.0f, FLT_MAX, wgml_setting_f32(&o->s, fs), err, sizeof err) != 0;
        o->given |= fs->bit;
    }
    }
    if (bad) fprintf(stderr, "wgml train: %s (see --help)\n", err);
    return bad;
}

static const char train_usage[] =
    "usage: wgml train [--epochs 10] [--batch 128] [--lr 1e-3] [--wd 0] [--clip 1.0] [--hidden 256,128]\n"
    "                  [--seed 1] [--out out/train; resuming: the checkpoint's folder] [--overwrite]\n"
    "                  [--resume CHECKPOINT] [--data " DEFAULT_DATA "]\n"
    "An MLP on Fashion-MNIST. --resume continues the checkpoint's run: its model, and its seed, batch,\n"
    "lr, wd and clip unless given here. Writes OUT/checkpoint.safetensors after each epoch and\n"
    "OUT/metrics.csv, a row per step (scripts/plot_metrics.py draws it). A folder that holds a run is\n"
    "refused unless resumed from or --overwrite. Ctrl-C (or SIGTERM) stops after the current step with\n"
    "a checkpoint that --resume continues; a second one stops at once.\n";

/* The flags: 0, 1 (help shown) or 2 (a bad flag, reported). */
static int parse_options(int argc, char **argv, options *o)
{
    o->epochs = 10;
    o->s = (wgml_train_settings){.seed = 1, .lr = 1e-3f, .weight_decay = 0, .max_grad_norm = 1.0f, .batch = 128};
    o->out = NULL;
    o->data = DEFAULT_DATA;
    int rc = cli_parse(argc, argv, "train", train_flags, train_usage, train_flag, o, NULL, 0, NULL);
    if (rc) return rc;
    if (!o->out && o->resume) { /* resuming: beside the checkpoint */
        snprintf(o->resume_dir, sizeof o->resume_dir, "%s", o->resume);
        char *slash = strrchr(o->resume_dir, '/');
        if (slash) *slash = 0;
        else snprintf(o->resume_dir, sizeof o->resume_dir, ".");
        o->out = o->resume_dir;
    }
    if (!o->out) o->out = "out/train";
    char err[512];
    if (parse_hidden(o->hidden ? o->hidden : "256,128", o, err, sizeof err)) {
        fprintf(stderr, "wgml train: %s (see --help)\n", err);
        return 2;
    }
    return 0;
}

/* The checkpoint's model for this data set: MNIST-sized input and output. */
static int check_mnist_sizes(const char *path, const wgml_checkpoint *ck, const char *who)
{
    if (ck->sizes[0] == MNIST_PIXELS && ck->sizes[ck->nlayers] == MNIST_CLASSES) return 0;
    fprintf(stderr, "%s: %s: the model maps %lld inputs to %lld classes, want %d to %d (Fashion-MNIST)\n", who, path,
            (long long)ck->sizes[0], (long long)ck->sizes[ck->nlayers], MNIST_PIXELS, MNIST_CLASSES);
    return -1;
}

/* Resuming: the checkpoint's model, and its settings wherever the command line names none,
   so that a resumed run continues the run that wrote it. */
static int resume_from(const char *path, wgml_context *ctx, wgml_checkpoint *ck, wgml_mlp *m, options *o)
{
    wgml_status st = wgml_checkpoint_read(ctx, path, ck);
    if (st) {
        fprintf(stderr, "wgml train: %s\n", cli_message(ctx, st));
        return -1;
    }
    if (check_mnist_sizes(path, ck, "wgml train")) return -1;
    int same = ck->nlayers == o->nlayers;
    for (int l = 0; same && l <= o->nlayers; l++) same = ck->sizes[l] == o->sizes[l];
    if (o->hidden && !same) {
        fprintf(stderr, "wgml train: --hidden %s does not match the checkpoint %s, whose layers are", o->hidden, path);
        for (int l = 0; l <= ck->nlayers; l++) fprintf(stderr, "%s%lld", l ? "-" : " ", (long long)ck->sizes[l]);
        fprintf(stderr, "\n");
        return -1;
    }
    o->nlayers = ck->nlayers;
    memcpy(o->sizes, ck->sizes, sizeof o->sizes);
    unsigned take = ck->stored & ~o->given;
    if (take & WGML_CK_SEED) o->s.seed = ck->settings.seed;
    wgml_train_settings from = ck->settings;
    for (int i = 0; i < WGML_FLOAT_SETTINGS; i++) {
        const wgml_float_setting *fs = &wgml_float_settings[i];
        if (take & fs->bit) *wgml_setting_f32(&o->s, fs) = *wgml_setting_f32(&from, fs);
    }
    if (take & WGML_CK_BATCH) o->s.batch = ck->settings.batch;
    if ((st = wgml_checkpoint_mlp(ctx, ck, m))) {
        fprintf(stderr, "wgml train: %s: cannot build the model: %s\n", path, cli_message(ctx, st));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- evaluation */

static int evaluate(wgml_context *ctx, wgml_mlp *m, const wgml_mnist *test, double *accuracy, double *loss)
{
    const int64_t B = 1000;
    double correct = 0, total_loss = 0;
    float *labf = malloc((size_t)B * sizeof *labf);
    if (!labf) {
        fprintf(stderr, "wgml: evaluation: out of host memory\n");
        return -1;
    }
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
            fprintf(stderr, "wgml: evaluation failed: %s\n", cli_message(ctx, st));
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

/* Under mpirun -np N each rank trains on its N-th of every global batch (the same shuffled
   order on all ranks) and the optimiser averages the gradients across ranks, so every rank
   takes the global batch's step; rank 0 alone evaluates and writes the metrics and checkpoints. */
static int train_body(options o)
{
    const int rank = wgml_dist_rank(), ranks = wgml_dist_size(), lead = rank == 0;
    char err[512];
    wgml_mnist train = {0}, test = {0};
    if (wgml_mnist_load(o.data, 1, &train, err, sizeof err) || wgml_mnist_load(o.data, 0, &test, err, sizeof err)) {
        fprintf(stderr, "wgml train: %s\n(install the data set: apt-get install dataset-fashion-mnist)\n", err);
        wgml_mnist_free(&train);
        return 1;
    }
    wgml_context *ctx;
    wgml_status st = wgml_context_create(NULL, &ctx);
    if (st) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_create_error());
        wgml_mnist_free(&train);
        wgml_mnist_free(&test);
        return 1;
    }
    wgml_adapter_info info;
    wgml_adapter_info_get(ctx, &info);
    wgml_mlp m = {0};
    wgml_checkpoint ck = {0};
    int start_epoch = 0;
    int64_t skip = 0; /* steps of the first epoch already taken (a run stopped mid-epoch) */
    int rc = 1;
    wgml_optimizer *opt = NULL;
    FILE *csv = NULL;
    int64_t *idx = NULL;
    float *xb = NULL, *lb = NULL;
    wgml_tensor *x = NULL, *lab = NULL;
    if (o.resume) {
        if (resume_from(o.resume, ctx, &ck, &m, &o)) goto done;
        start_epoch = ck.epoch;
        if (start_epoch >= o.epochs) {
            fprintf(stderr, "wgml train: %s is at epoch %d of %d: nothing to train (give --epochs past it)\n", o.resume,
                    start_epoch, o.epochs);
            goto done;
        }
        if (ck.settings.ranks != ranks) { /* the batch's split over the ranks is part of the run */
            int n = ck.settings.ranks;
            if (n == 1)
                fprintf(stderr, "wgml train: %s was written by a run in one process and this one has %d ranks: resume it in one "
                                "process (no MPI launcher)\n", o.resume, ranks);
            else
                fprintf(stderr, "wgml train: %s was written by a run on %d ranks and this one has %d: resume it on %d (mpirun "
                                "-np %d, or mpiexec -n %d)\n", o.resume, n, ranks, n, n, n);
            goto done;
        }
        /* a run stopped by a signal mid-epoch goes on from the step after its last */
        int ck_batch = ck.stored & WGML_CK_BATCH ? ck.settings.batch : o.s.batch;
        skip = ck.step - (int64_t)ck.epoch * (train.n / ck_batch);
        if (skip && ck_batch != o.s.batch) {
            fprintf(stderr, "wgml train: %s stopped within epoch %d: resume it with its batch (%d), not --batch %d\n", o.resume,
                    ck.epoch + 1, ck_batch, o.s.batch);
            goto done;
        }
        if (skip < 0 || skip >= train.n / ck_batch) {
            fprintf(stderr, "wgml train: %s: step %lld is not in epoch %d of %lld training examples at batch %d\n", o.resume,
                    (long long)ck.step, ck.epoch + 1, (long long)train.n, ck_batch);
            goto done;
        }
    } else if ((st = wgml_mlp_create(ctx, o.nlayers, o.sizes, o.s.seed, NULL, NULL, &m))) {
        fprintf(stderr, "wgml train: cannot build the model: %s\n", cli_message(ctx, st));
        goto done;
    }
    if (o.s.batch > train.n) {
        fprintf(stderr, "wgml train: batch %d is more than the %lld training examples\n", o.s.batch, (long long)train.n);
        goto done;
    }
    if (cli_dist_check_batch("wgml train", o.s.batch)) goto done;
    if (wgml_dist_size() > 1) { /* every rank's run the same as rank 0's: ranks started otherwise would train apart */
        uint64_t h = cli_fnv1a(CLI_FNV1A_START, train.labels, (size_t)train.n); /* the training set */
        h = cli_fnv1a(h, train.images, (size_t)train.n * MNIST_PIXELS * sizeof *train.images);
        cli_setting same[11 + WGML_MLP_MAX_LAYERS] = {
            {"--epochs", o.epochs}, {"--batch", o.s.batch}, {"--lr", o.s.lr}, {"--wd", o.s.weight_decay},
            {"--clip", o.s.max_grad_norm}, {"--seed", (double)(o.s.seed & 0xffffffffu)},
            {"--seed (its high bits)", (double)(o.s.seed >> 32)}, {"the training examples", (double)train.n},
            {"the training set's checksum", (double)(h >> 11)}, /* (53 bits: exact as a double) */
            {"the first epoch (a resumed checkpoint's)", start_epoch}, {"the first epoch's steps already taken", (double)skip}};
        int n = 11; /* (as many on every rank: the unused widths 0) */
        same[n++] = (cli_setting){"--hidden (its layers)", o.nlayers - 1};
        for (int i = 1; i < WGML_MLP_MAX_LAYERS; i++)
            same[n++] = (cli_setting){"--hidden (a layer's width)", i < o.nlayers ? (double)o.sizes[i] : 0};
        if (cli_dist_check_same("wgml train", n, same)) goto done;
    }
    wgml_tensor *params[2 * WGML_MLP_MAX_LAYERS];
    int np = wgml_mlp_params(&m, params);
    if ((st = wgml_dist_broadcast(ctx, np, params))) { /* every rank starts from rank 0's model */
        fprintf(stderr, "wgml train: %s\n", cli_message(ctx, st));
        goto done;
    }
    wgml_optim_desc d = {.kind = WGML_OPTIM_ADAMW, .lr = o.s.lr, .weight_decay = o.s.weight_decay, .max_grad_norm = o.s.max_grad_norm};
    if ((st = wgml_optimizer_create(ctx, &d, np, params, &opt))) {
        fprintf(stderr, "wgml train: optimizer: %s\n", cli_message(ctx, st));
        goto done;
    }
    if (o.resume && (st = wgml_checkpoint_restore_optimizer(ctx, &ck, opt))) {
        fprintf(stderr, "wgml train: %s: %s\n", o.resume, cli_message(ctx, st));
        goto done;
    }
    if ((st = wgml_dist_data_parallel(opt))) {
        fprintf(stderr, "wgml train: %s\n", wgml_dist_error_message());
        goto done;
    }
    wgml_checkpoint_free(&ck); /* the model and optimiser hold it all now */
    o.s.ranks = ranks;
    char ckpath[1024], csvpath[1024];
    snprintf(ckpath, sizeof ckpath, "%s/checkpoint.safetensors", o.out);
    snprintf(csvpath, sizeof csvpath, "%s/metrics.csv", o.out);
    /* a row per step: the batch's loss and accuracy; the test set's on an epoch's last step;
       samples_per_s is the epoch's so far (as the progress bar shows it), elapsed_s counts
       from this run's first step. A resumed run drops rows past the checkpoint's step. */
    if (lead) csv = cli_metrics_open(csvpath, "step,epoch,loss,accuracy,lr,test_loss,test_accuracy,samples_per_s,elapsed_s",
                                     o.resume ? wgml_optimizer_steps(opt) : -1, err, sizeof err);
    if (lead && !csv) {
        fprintf(stderr, "wgml train: %s\n", err);
        goto done;
    }
    const int batch = o.s.batch, local = batch / ranks; /* global, and this rank's share */
    /* the progress bar's \r only on a terminal; under mpirun every rank's stdout is a
       pseudo-terminal whatever the user's really is, so plain lines there */
    const int tty = isatty(STDOUT_FILENO) && wgml_dist_size() == 1; /* (one rank: the lead) */
    if (lead) {
        printf("training MLP");
        for (int l = 0; l <= o.nlayers; l++) printf("%s%lld", l ? "-" : " ", (long long)o.sizes[l]);
        printf(" on %s (%s), batch %d, AdamW lr %g, wd %g, clip %g, seed %llu, epochs %d..%d\n", info.name, info.backend, batch,
               (double)o.s.lr, (double)o.s.weight_decay, (double)o.s.max_grad_norm, (unsigned long long)o.s.seed, start_epoch + 1,
               o.epochs);
        if (ranks > 1) printf("data parallel over %d ranks: %d examples of each batch per rank\n", ranks, local);
        fflush(stdout); /* on a pipe too: the run has begun */
    }

    idx = malloc((size_t)train.n * sizeof *idx);
    xb = malloc((size_t)local * MNIST_PIXELS * sizeof *xb);
    lb = malloc((size_t)local * sizeof *lb);
    int64_t xs[2] = {local, MNIST_PIXELS}, ls = local;
    if (!idx || !xb || !lb) {
        fprintf(stderr, "wgml train: out of host memory for a batch of %d\n", batch);
        goto done;
    }
    if ((st = wgml_tensor_zeros(ctx, 2, xs, &x)) || (st = wgml_tensor_zeros(ctx, 1, &ls, &lab))) {
        fprintf(stderr, "wgml train: batch tensors: %s\n", cli_message(ctx, st));
        goto done;
    }
    /* elapsed_s goes on from the resumed run's last row */
    double test_acc = 0, test_loss = 0, run_t0 = cli_now() - (lead && o.resume ? cli_metrics_last_elapsed(csvpath) : 0);
    /* Ctrl-C: the step finishes and a checkpoint is written (one process: under mpirun a rank
       alone cannot stop the others' collectives) */
    if (ranks == 1) cli_stop_catch();
    for (int epoch = start_epoch; epoch < o.epochs; epoch++) {
        shuffle(idx, train.n, o.s.seed, epoch);
        int64_t steps = train.n / batch; /* full batches; the remainder is dropped */
        int64_t from = epoch == start_epoch ? skip : 0;
        double t0 = cli_now(), sum_loss = 0, sum_correct = 0;
        for (int64_t s = from; s < steps; s++) {
            for (int i = 0; i < local; i++) {
                int64_t k = idx[s * batch + rank * local + i];
                memcpy(xb + (size_t)i * MNIST_PIXELS, train.images + k * MNIST_PIXELS, MNIST_PIXELS * sizeof *xb);
                lb[i] = train.labels[k];
            }
            float loss, correct, lr = wgml_optimizer_lr(opt); /* the lr this step uses */
            if ((st = wgml_tensor_write(x, xb, (size_t)local * MNIST_PIXELS)) || (st = wgml_tensor_write(lab, lb, (size_t)local)) ||
                (st = wgml_mlp_train_step(&m, opt, x, lab, &loss, &correct))) {
                fprintf(stderr, "\nwgml train: step failed: %s\n", cli_message(ctx, st));
                goto done;
            }
            if (ranks > 1) { /* the global batch's loss (equal shares: the mean) and count */
                double v[2] = {loss, correct};
                if (wgml_dist_allreduce_host(v, 2, WGML_REDUCE_SUM)) {
                    fprintf(stderr, "\nwgml train: %s\n", wgml_dist_error_message());
                    goto done;
                }
                loss = (float)(v[0] / ranks);
                correct = (float)v[1];
            }
            if (!cli_loss_ok("wgml train", wgml_optimizer_steps(opt), loss)) goto done; /* (every rank sees the same mean) */
            sum_loss += loss;
            sum_correct += correct;
            double now = cli_now();
            if (!csv) continue;
            fprintf(csv, "%lld,%d,%.9g,%.9g,%.9g,", (long long)wgml_optimizer_steps(opt), epoch + 1, (double)loss,
                    (double)correct / batch, (double)lr);
            /* the epoch's last row waits for the test set's numbers */
            int64_t done_here = s + 1 - from; /* steps of this epoch in this process */
            if (s + 1 < steps) fprintf(csv, ",,%.1f,%.3f\n", (double)(done_here * batch) / (now - t0), now - run_t0);
            if (tty && (s % 20 == 0 || s + 1 == steps)) {
                double el = now - t0;
                int bar = (int)(30 * (s + 1) / steps);
                printf("\repoch %2d/%d [%.*s%*s] %5.1f%% loss %.4f acc %.4f %8.0f samples/s", epoch + 1, o.epochs, bar,
                       "==============================", 30 - bar, "", 100.0 * (double)(s + 1) / (double)steps,
                       sum_loss / (double)done_here, sum_correct / (double)(done_here * batch),
                       (double)(done_here * batch) / el);
                fflush(stdout);
            }
            /* stopped mid-epoch: the checkpoint holds the step, and --resume takes the rest of
               the epoch (the epoch's last step goes on to its test set and checkpoint) */
            if (cli_stop_signal && s + 1 < steps) {
                if (fflush(csv) || (st = wgml_checkpoint_save(ckpath, &m, opt, epoch, &o.s))) {
                    fprintf(stderr, "\nwgml train: stopped by %s, but the checkpoint failed: %s\n", cli_signal_name(cli_stop_signal),
                            st ? cli_message(ctx, st) : strerror(errno));
                    goto done;
                }
                break;
            }
        }
        if (cli_stop_signal && epoch < o.epochs && wgml_optimizer_steps(opt) % steps != 0) {
            fprintf(stderr, "\nwgml train: stopped by %s after step %lld: checkpoint %s (continue with: wgml train --resume %s "
                            "--epochs %d)\n", cli_signal_name(cli_stop_signal), (long long)wgml_optimizer_steps(opt), ckpath, ckpath,
                    o.epochs);
            rc = 128 + cli_stop_signal;
            goto done;
        }
        const int64_t epoch_steps = steps - from;
        double secs = cli_now() - t0;
        if (!lead) continue; /* the others go on to the next epoch's first all-reduce */
        if (evaluate(ctx, &m, &test, &test_acc, &test_loss)) goto done;
        if (!tty) /* a file or a pipe: one plain line per epoch */
            printf("epoch %2d/%d loss %.4f acc %.4f %8.0f samples/s", epoch + 1, o.epochs, sum_loss / (double)epoch_steps,
                   sum_correct / (double)(epoch_steps * batch), (double)(epoch_steps * batch) / secs);
        printf("  | test loss %.4f acc %.4f (%.1f s)\n", test_loss, test_acc, secs);
        fflush(stdout);
        fprintf(csv, "%.9g,%.9g,%.1f,%.3f\n", test_loss, test_acc, (double)(epoch_steps * batch) / secs, cli_now() - run_t0);
        if (fflush(csv)) { /* the checkpoint must not get ahead of its metrics */
            fprintf(stderr, "wgml train: cannot write %s: %s\n", csvpath, strerror(errno));
            goto done;
        }
        if ((st = wgml_checkpoint_save(ckpath, &m, opt, epoch + 1, &o.s))) {
            fprintf(stderr, "wgml train: checkpoint: %s\n", cli_message(ctx, st));
            goto done;
        }
        if (cli_stop_signal) {
            fprintf(stderr, "wgml train: stopped by %s after epoch %d: checkpoint %s (continue with: wgml train --resume %s "
                            "--epochs %d)\n", cli_signal_name(cli_stop_signal), epoch + 1, ckpath, ckpath, o.epochs);
            rc = 128 + cli_stop_signal;
            goto done;
        }
    }
    if (cli_dist_finish("wgml train", ctx, np, params)) goto done;
    if (lead) printf("test accuracy %.4f\ncheckpoint %s\nmetrics %s\n", test_acc, ckpath, csvpath);
    rc = 0;
done:
    cli_stop_restore();
    free(idx);
    free(xb);
    free(lb);
    wgml_tensor_free(x);
    wgml_tensor_free(lab);
    if (csv) fclose(csv);
    wgml_optimizer_free(opt);
    wgml_mlp_free(&m);
    wgml_checkpoint_free(&ck);
    wgml_context_free(ctx);
    wgml_mnist_free(&train);
    wgml_mnist_free(&test);
    return rc;
}

static int train_run(int argc, char **argv)
{
    options o = {0};
    int prc = parse_options(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    /* a batch the ranks cannot split is refused by every rank before rank 0 locks the folder:
       mpirun kills rank 0 when another rank exits, and a killed rank 0 may still be alive
       (its lock in force) when the next run starts */
    if (!o.resume && cli_dist_check_batch("wgml train", o.s.batch)) return 1;
    /* the folder is this run's alone: a run it holds is continued or replaced on purpose */
    static const char *const run_files[] = {"checkpoint.safetensors", "metrics.csv", NULL};
    cli_out_lock lock = {0};
    if (wgml_dist_rank() == 0) {
        int continuing = o.resume && cli_same_dir(o.out, o.resume);
        if ((prc = cli_out_claim("wgml train", o.out, run_files, continuing, o.overwrite, &lock))) return prc;
    }
    int rc = train_body(o);
    cli_out_release(&lock);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    if (cli_dist_begin("wgml train")) return 1;
    return cli_dist_end("wgml train", train_run(argc, argv));
}

static int eval_flag(int opt, const char *arg, void *state)
{
    if (opt == 256) *(const char **)state = arg;
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    static const struct option flags[] = {{"data", required_argument, 0, 256}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    static const char usage[] = "usage: wgml eval CHECKPOINT [--data " DEFAULT_DATA "]\n"
                                "The test accuracy of a checkpoint of wgml train (wgml gpt eval scores a GPT's).\n";
    const char *data = DEFAULT_DATA;
    char *pos[1];
    int npos = 0, prc = cli_parse(argc, argv, "eval", flags, usage, eval_flag, &data, pos, 1, &npos);
    if (prc) return prc == 1 ? 0 : 2;
    if (npos != 1) {
        fprintf(stderr, "wgml eval: a CHECKPOINT is required (see --help)\n");
        return 2;
    }
    const char *path = pos[0];
    char err[512];
    /* a GPT checkpoint has its own command: say which, rather than "not a wgml checkpoint" */
    wgml_st_file file = {0};
    if (wgml_safetensors_read(path, &file, err, sizeof err) == WGML_OK) {
        const char *format = wgml_st_meta(&file, "format");
        int gpt = format && strncmp(format, "wgml-gpt", 8) == 0;
        wgml_st_file_free(&file);
        if (gpt) {
            fprintf(stderr, "wgml eval: %s is a GPT checkpoint (of wgml gpt train): score it with wgml gpt eval --checkpoint %s\n",
                    path, path);
            return 2;
        }
    }
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
    wgml_mlp m = {0};
    wgml_checkpoint ck = {0};
    int rc = 1;
    double acc, loss;
    wgml_status st = wgml_checkpoint_read(ctx, path, &ck);
    if (st) fprintf(stderr, "wgml eval: %s\n", cli_message(ctx, st));
    else if (check_mnist_sizes(path, &ck, "wgml eval")) st = WGML_ERROR_SHAPE;
    else if ((st = wgml_checkpoint_mlp(ctx, &ck, &m))) fprintf(stderr, "wgml eval: %s: cannot build the model: %s\n", path, cli_message(ctx, st));
    if (!st && !evaluate(ctx, &m, &test, &acc, &loss)) {
        printf("checkpoint %s (epoch %d): test loss %.4f accuracy %.4f\n", path, ck.epoch, loss, acc);
        rc = 0;
    }
    wgml_mlp_free(&m);
    wgml_checkpoint_free(&ck);
    wgml_context_free(ctx);
    wgml_mnist_free(&test);
    return rc;
}
