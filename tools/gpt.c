/*
 * wgml gpt train: a character-level GPT (GPT-2 or Llama style, src/models/gpt.h) on a text
 * folder (Debian's fortunes by default, src/io/text.h), AdamW with warm-up and cosine decay,
 * clipping, weight decay on the matrices, dropout; the validation loss every N steps; a
 * progress line; metrics per step in CSV; an atomic safetensors checkpoint
 * (src/models/gpt_checkpoint.h) every N steps and at the end. --resume continues a run with
 * the settings stored in its checkpoint: batches are drawn by step number and the GPU
 * generator's state is stored, so the losses equal those of a run that never stopped.
 * --init-from starts a new run from a checkpoint's weights. The output folder is locked and
 * a run it holds is not overwritten by accident; Ctrl-C / SIGTERM end the step, write a
 * checkpoint and exit (tools/cli.h).
 * wgml gpt sample: text from a checkpoint, with a KV cache and sampling on the GPU (top-p
 * on the host). wgml gpt eval: loss and perplexity of a checkpoint on a file or a split.
 * The model is the public one (wgml_gpt.h); the run settings stored beside it are the command's.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/loader.h"
#include "io/text.h"
#include "models/gpt_checkpoint.h" /* the run settings a checkpoint keeps: the command's */
#include "tools/cli.h"
#include "wgml_gpt.h"

/* ---------------------------------------------------------------- options */

enum {
    O_ARCH = 256, O_STEPS, O_LAYERS, O_HEADS, O_KV_HEADS, O_WIDTH, O_FFN, O_BLOCK, O_BATCH, O_LR, O_MIN_LR, O_WARMUP,
    O_WD, O_CLIP, O_DROPOUT, O_SEED, O_DATA, O_OUT, O_RESUME, O_EVAL_EVERY, O_EVAL_BATCHES, O_SAVE_EVERY, O_SAVE_INIT,
    O_SAMPLE, O_STOP_AT, O_CHECKPOINT, O_PROMPT, O_TOKENS, O_TEMPERATURE, O_TOP_K, O_BETA2, O_INIT_FROM, O_OVERWRITE,
    O_TOP_P, O_PRECISION, O_SAMPLES
};

typedef struct train_options {
    wgml_gpt_config cfg;
    wgml_gpt_run run;
    int64_t steps, stop_at, save_every, sample_tokens;
    const char *out, *resume, *init_from;
    int save_init, overwrite;
    int precision; /* wgml_precision, or -1: mixed where the adapter has matrix units */
    unsigned char given[64]; /* which options the command line named (by O_ - 256) */
} train_options;

static const struct option train_flags[] = {
    {"arch", required_argument, 0, O_ARCH},       {"steps", required_argument, 0, O_STEPS},
    {"layers", required_argument, 0, O_LAYERS},   {"heads", required_argument, 0, O_HEADS},
    {"kv-heads", required_argument, 0, O_KV_HEADS}, {"width", required_argument, 0, O_WIDTH},
    {"ffn", required_argument, 0, O_FFN},         {"block", required_argument, 0, O_BLOCK},
    {"batch", required_argument, 0, O_BATCH},     {"lr", required_argument, 0, O_LR},
    {"min-lr-ratio", required_argument, 0, O_MIN_LR}, {"warmup", required_argument, 0, O_WARMUP},
    {"weight-decay", required_argument, 0, O_WD}, {"clip", required_argument, 0, O_CLIP},
    {"dropout", required_argument, 0, O_DROPOUT}, {"beta2", required_argument, 0, O_BETA2},
    {"seed", required_argument, 0, O_SEED},
    {"data", required_argument, 0, O_DATA},       {"out", required_argument, 0, O_OUT},
    {"resume", required_argument, 0, O_RESUME},   {"eval-every", required_argument, 0, O_EVAL_EVERY},
    {"eval-batches", required_argument, 0, O_EVAL_BATCHES}, {"save-every", required_argument, 0, O_SAVE_EVERY},
    {"save-init", no_argument, 0, O_SAVE_INIT},   {"sample", required_argument, 0, O_SAMPLE},
    {"stop-at", required_argument, 0, O_STOP_AT}, {"init-from", required_argument, 0, O_INIT_FROM},
    {"overwrite", no_argument, 0, O_OVERWRITE},   {"precision", required_argument, 0, O_PRECISION},
    {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
};

static const char train_usage[] =
    "usage: wgml gpt train [options]\n"
    "  model:  --arch gpt2|llama (gpt2)  --layers N (2)  --heads N (4)  --kv-heads N (= heads)\n"
    "          --width N (128)  --ffn N (4 width; llama: 8 width / 3, up to a multiple of 32)\n"
    "          --block N (64)  --dropout P (0)\n"
    "  train:  --steps N (500)  --batch N (16)  --lr X (1e-3)  --min-lr-ratio X (0.1)  --warmup N (100, at most steps / 10)\n"
    "          --weight-decay X (0.1)  --clip X (1, 0: none)  --beta2 X (0.99)  --seed N (1)\n"
    "          --precision f32|mixed|f32split|auto (auto: mixed where the adapter has matrix units, else f32;\n"
    "          mixed: matmuls with f16 operands and f32 sums, dynamic loss scaling; weights and optimiser in f32;\n"
    "          f32split: f32 matmuls on the matrix units as hi and lo halves, error near f32's)\n"
    "  data:   --data FILE|DIR (" WGML_TEXT_DEFAULT_DIR ")  --eval-every N (100, 0: only at the end)  --eval-batches N (8)\n"
    "  output: --out DIR (out/gpt): metrics.csv, gpt.safetensors  --save-every N (eval-every)  --save-init\n"
    "          (also DIR/init.safetensors, the initial weights)  --sample N (print N sampled tokens at the end)\n"
    "          --overwrite (replace the run DIR holds; without it such a folder is refused)\n"
    "  --stop-at N  stop (with a checkpoint) after step N of the --steps schedule; --resume goes on\n"
    "  --resume CHECKPOINT  continue a run with its stored settings (flags that would change them are refused);\n"
    "          --steps may extend it (past the stored schedule at its minimum lr); --out defaults to its folder;\n"
    "          --data says where its text is now, if it moved (the same text: checked)\n"
    "  --init-from CHECKPOINT  a new run (its own lr, steps, data, schedule) from a checkpoint's weights\n"
    "          and model (the model flags are refused; --data defaults to the checkpoint's text)\n"
    "  Ctrl-C (or SIGTERM) stops after the current step with a checkpoint; a second one stops at once.\n";

/* Parses a number flag into p, strictly. */
static int number(int opt, const char *arg, void *p, char *err, size_t errlen)
{
    char flag[32];
    for (const struct option *o = train_flags; o->name; o++)
        if (o->val == opt) snprintf(flag, sizeof flag, "--%s", o->name);
    int64_t v;
    switch (opt) {
    case O_LR: return wgml_parse_f32(flag, arg, FLT_MIN, 10.0f, p, err, errlen) ? -1 : 0;
    case O_MIN_LR: return wgml_parse_f32(flag, arg, 0.0f, 1.0f, p, err, errlen) ? -1 : 0;
    case O_WD: case O_CLIP: return wgml_parse_f32(flag, arg, 0.0f, 1e6f, p, err, errlen) ? -1 : 0;
    case O_DROPOUT: return wgml_parse_f32(flag, arg, 0.0f, 0.99f, p, err, errlen) ? -1 : 0;
    case O_BETA2: return wgml_parse_f32(flag, arg, 0.0f, 0.999999f, p, err, errlen) ? -1 : 0;
    case O_SEED: return wgml_parse_u64(flag, arg, p, err, errlen) ? -1 : 0;
    default: {
        /* the ranges a checkpoint's reader accepts (models/gpt_checkpoint.c), so that every run
           can be resumed */
        int64_t lo = opt == O_WARMUP || opt == O_EVAL_EVERY || opt == O_SAVE_EVERY || opt == O_SAMPLE || opt == O_STOP_AT ? 0 : 1;
        int64_t hi = opt == O_BATCH ? 1 << 24 : opt == O_EVAL_BATCHES ? 1 << 20 : opt == O_SAMPLE ? 1 << 24 : 1000000000000000ll;
        if (wgml_parse_i64(flag, arg, lo, hi, &v, err, errlen)) return -1;
        *(int64_t *)p = v;
        return 0;
    }
    }
}

static int train_flag(int opt, const char *arg, void *state)
{
    train_options *o = state;
    char err[256];
    void *p = NULL;
    switch (opt) {
    case O_ARCH:
        if (strcmp(arg, "gpt2") && strcmp(arg, "llama")) {
            fprintf(stderr, "wgml gpt train: --arch is '%s', want gpt2 or llama\n", arg);
            return 1;
        }
        o->cfg.arch = strcmp(arg, "llama") == 0 ? WGML_GPT_LLAMA : WGML_GPT_GPT2;
        break;
    case O_DATA: snprintf(o->run.data, sizeof o->run.data, "%s", arg); break;
    case O_OUT: o->out = arg; break;
    case O_RESUME: o->resume = arg; break;
    case O_INIT_FROM: o->init_from = arg; break;
    case O_OVERWRITE: o->overwrite = 1; break;
    case O_PRECISION:
        if (strcmp(arg, "f32") && strcmp(arg, "mixed") && strcmp(arg, "f32split") && strcmp(arg, "auto")) {
            fprintf(stderr, "wgml gpt train: --precision is '%s', want f32, mixed, f32split or auto\n", arg);
            return 1;
        }
        o->precision = !strcmp(arg, "f32")        ? WGML_PRECISION_F32
                       : !strcmp(arg, "mixed")    ? WGML_PRECISION_MIXED
                       : !strcmp(arg, "f32split") ? WGML_PRECISION_F32_SPLIT
                                                  : -1;
        break;
    case O_SAVE_INIT: o->save_init = 1; break;
    case O_STEPS: p = &o->steps; break;
    case O_LAYERS: p = &o->cfg.layers; break;
    case O_HEADS: p = &o->cfg.heads; break;
    case O_KV_HEADS: p = &o->cfg.kv_heads; break;
    case O_WIDTH: p = &o->cfg.width; break;
    case O_FFN: p = &o->cfg.ffn; break;
    case O_BLOCK: p = &o->cfg.block; break;
    case O_DROPOUT: p = &o->cfg.dropout; break;
    case O_BATCH: p = &o->run.batch; break;
    case O_LR: p = &o->run.lr; break;
    case O_MIN_LR: p = &o->run.min_lr_ratio; break;
    case O_WARMUP: p = &o->run.warmup; break;
    case O_WD: p = &o->run.weight_decay; break;
    case O_CLIP: p = &o->run.max_grad_norm; break;
    case O_BETA2: p = &o->run.beta2; break;
    case O_SEED: p = &o->run.seed; break;
    case O_EVAL_EVERY: p = &o->run.eval_every; break;
    case O_EVAL_BATCHES: p = &o->run.eval_batches; break;
    case O_SAVE_EVERY: p = &o->save_every; break;
    case O_SAMPLE: p = &o->sample_tokens; break;
    case O_STOP_AT: p = &o->stop_at; break;
    default: return 1;
    }
    o->given[opt - 256] = 1;
    if (p && number(opt, arg, p, err, sizeof err)) {
        fprintf(stderr, "wgml gpt train: %s\n", err);
        return 1;
    }
    return 0;
}

static int parse_train(int argc, char **argv, train_options *o)
{
    memset(o, 0, sizeof *o);
    o->cfg = (wgml_gpt_config){.arch = WGML_GPT_GPT2, .layers = 2, .heads = 4, .width = 128, .block = 64};
    o->run = (wgml_gpt_run){.seed = 1, .lr = 1e-3f, .min_lr_ratio = 0.1f, .weight_decay = 0.1f, .max_grad_norm = 1.0f,
                            .beta1 = 0.9f, .beta2 = 0.99f, .batch = 16, .eval_every = 100, .eval_batches = 8, .warmup = -1};
    snprintf(o->run.data, sizeof o->run.data, "%s", WGML_TEXT_DEFAULT_DIR);
    o->steps = 500, o->save_every = -1, o->out = NULL, o->precision = -1;
    int rc = cli_parse(argc, argv, "gpt train", train_flags, train_usage, train_flag, o, NULL, 0, NULL);
    if (rc) return rc;
    if (o->run.warmup < 0) o->run.warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    if (o->save_every < 0) o->save_every = o->run.eval_every;
    return 0;
}

/* ---------------------------------------------------------------- training */

typedef struct trainer {
    wgml_context *ctx;
    wgml_text text;
    wgml_gpt *model;
    wgml_optimizer *opt;
    wgml_tensor *ids, *targets, *val_ids, *val_targets;
    int32_t *x, *y;
    FILE *csv;
    int64_t step;
    double elapsed_before; /* elapsed_s where a resumed run stopped */
} trainer;

static void trainer_free(trainer *t)
{
    if (t->csv) fclose(t->csv);
    wgml_optimizer_free(t->opt);
    wgml_tensor_free(t->ids), wgml_tensor_free(t->targets);
    wgml_tensor_free(t->val_ids), wgml_tensor_free(t->val_targets);
    wgml_gpt_delete(t->model);
    wgml_text_free(&t->text);
    free(t->x), free(t->y);
    if (t->ctx) wgml_context_free(t->ctx);
}

/* Uploads batch i of a split into the (persistent) id and target tensors. */
static wgml_status load_batch(trainer *t, const train_options *o, int split, int64_t i, wgml_tensor **ids,
                              wgml_tensor **targets)
{
    char err[256];
    int B = (int)o->run.batch, T = (int)o->cfg.block;
    wgml_status st = wgml_text_batch(&t->text, split, o->run.seed, i, B, T, t->x, t->y, err, sizeof err);
    if (st) return fprintf(stderr, "wgml gpt train: %s\n", err), st;
    /* data parallel: a training batch is global, and this rank takes its share of the rows */
    int rows = split == 0 ? B / wgml_dist_size() : B;
    size_t first = split == 0 ? (size_t)wgml_dist_rank() * (size_t)rows * (size_t)T : 0;
    size_t n = (size_t)rows * (size_t)T;
    if (!*ids) {
        int64_t bt[2] = {rows, T};
        st = wgml_tensor_from_i32(t->ctx, 2, bt, t->x + first, n, ids);
        if (!st) st = wgml_tensor_from_i32(t->ctx, 2, bt, t->y + first, n, targets);
        return st;
    }
    st = wgml_tensor_write_i32(*ids, t->x + first, n);
    return st ? st : wgml_tensor_write_i32(*targets, t->y + first, n);
}

static wgml_status val_loss(trainer *t, const train_options *o, float *out)
{
    double sum = 0;
    for (int64_t i = 0; i < o->run.eval_batches; i++) {
        if (cli_stop_signal) return *out = NAN, WGML_OK; /* Ctrl-C: no validation loss, the checkpoint next */
        float l;
        wgml_status st = load_batch(t, o, 1, i, &t->val_ids, &t->val_targets);
        if (!st) st = wgml_gpt_eval_loss(t->model, t->val_ids, t->val_targets, &l);
        if (st) return st;
        sum += l;
    }
    *out = (float)(sum / (double)o->run.eval_batches);
    return WGML_OK;
}

static wgml_status save(trainer *t, const train_options *o, const char *path, int with_optimizer)
{
    wgml_gpt_run run = o->run;
    wgml_status st = wgml_rng_get_state(t->ctx, &run.rng_seed, &run.rng_offset);
    if (!st) st = wgml_gpt_checkpoint_save(path, t->model, with_optimizer ? t->opt : NULL, t->step, &run, t->text.vocab,
                                           t->text.vocab_size);
    return st;
}

/* Prints samples of n tokens continuing the prompt, or "\n" (or the vocabulary's first byte). */
static wgml_status print_sample(wgml_gpt *g, const uint8_t *vocab, int vocab_size, const int16_t *token_of, int64_t n,
                                float temperature, int64_t top_k, float top_p, const char *prompt, int64_t samples, double *seconds);

/* Steps run without waiting for their losses: the host builds step n + 1 while the GPU
   runs step n, and every SYNC steps (and at evaluations, checkpoints and the end) the
   losses come back and the metrics are written. grad_norm is read at those steps only. */
#define SYNC 10

static void free_pending(wgml_tensor **pending, int n)
{
    for (int i = 0; i < n; i++) wgml_tensor_free(pending[i]);
}

/* Ctrl-C or SIGTERM: a checkpoint of the steps done, then the exit status of the signal */
static int stop_with_checkpoint(trainer *t, const train_options *o, char *path, size_t n)
{
    snprintf(path, n, "%s/gpt.safetensors", o->out);
    wgml_status st = save(t, o, path, 1);
    if (st) {
        fprintf(stderr, "\nwgml gpt train: stopped by %s, but the checkpoint failed: %s\n", cli_signal_name(cli_stop_signal),
                cli_message(t->ctx, st));
        return 1;
    }
    fprintf(stderr, "%swgml gpt train: stopped by %s after step %lld: checkpoint %s (continue with: wgml gpt train --resume %s)\n",
            isatty(STDERR_FILENO) ? "\n" : "", cli_signal_name(cli_stop_signal), (long long)t->step, path, path);
    return 128 + cli_stop_signal;
}

static int train_loop(trainer *t, train_options *o)
{
    /* (under mpirun stderr may be a pseudo-terminal whatever the user's is: plain lines) */
    const int lead = wgml_dist_rank() == 0, tty = isatty(STDERR_FILENO) && wgml_dist_size() == 1;
    float losses[SYNC];
    double t0 = cli_now(), shown = t0, first_el = 0;
    int64_t first = t->step, tokens_per_step = o->run.batch * o->cfg.block;
    int64_t end = o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    wgml_tensor *pending[SYNC];
    float lrs[SYNC], loss = NAN;
    int np = 0, sync_every = SYNC;
    char path[1100];
    while (t->step < end) {
        wgml_status st = load_batch(t, o, 0, t->step, &t->ids, &t->targets);
        lrs[np] = wgml_optimizer_lr(t->opt);
        if (!st) st = wgml_gpt_train_step_submit(t->model, t->opt, t->ids, t->targets, &pending[np]);
        if (st) {
            fprintf(stderr, "\nwgml gpt train: step %lld: %s\n", (long long)t->step + 1, cli_message(t->ctx, st));
            return free_pending(pending, np), 1;
        }
        np++;
        t->step++;
        int last = t->step == o->steps;
        int eval = last || (o->run.eval_every > 0 && t->step % o->run.eval_every == 0);
        int save_now = last || t->step == end || (o->save_every > 0 && t->step % o->save_every == 0);
        int scheduled = eval || t->step % SYNC == 0; /* where the metrics hold grad_norm */
        /* this session's first step syncs too: its time, shown on a pipe as well, tells how
           long the run will take (on a CPU adapter a step can take minutes); the second
           gives a step's time without the kernels' compilation */
        int first_step = t->step == first + 1;
        /* (Ctrl-C, cli_stop_signal, syncs too: the step in flight ends the run, with a checkpoint) */
        if (!scheduled && !save_now && !cli_stop_signal && t->step > first + 2 && np < sync_every) continue;
        /* the sync: losses of the steps since the last one, the last step's gradient norm */
        float norm = NAN, vloss = NAN;
        for (int i = 0; i < np && !st; i++) st = wgml_tensor_read(pending[i], &losses[i], 1);
        if (!st && wgml_dist_size() > 1) { /* the global batch's losses: the mean of the ranks' */
            double v[SYNC];
            for (int i = 0; i < np; i++) v[i] = losses[i];
            if (wgml_dist_allreduce_host(v, (size_t)np, WGML_REDUCE_MEAN))
                return fprintf(stderr, "\nwgml gpt train: %s\n", wgml_dist_error_message()), free_pending(pending, np), 1;
            for (int i = 0; i < np; i++) losses[i] = (float)v[i];
        }
        for (int i = 0; i < np && !st; i++) {
            loss = losses[i];
            if (!cli_loss_ok("wgml gpt train", t->step - np + 1 + i, loss)) return free_pending(pending, np), 1;
            if (!st && lead) {
                int64_t s = t->step - np + 1 + i;
                fprintf(t->csv, "%lld,%.9g,%.9g,", (long long)s, (double)loss, (double)lrs[i]);
                if (i == np - 1 && scheduled && !(st = wgml_optimizer_grad_norm(t->opt, &norm))) fprintf(t->csv, "%.9g", (double)norm);
                fprintf(t->csv, i == np - 1 ? "," : ",,,,,\n");
            }
        }
        free_pending(pending, np);
        np = 0;
        /* the all-reduce's report leaves out the first steps (kernels compiled, buffers made) */
        if (t->step - first == SYNC && wgml_dist_size() > 1) wgml_dist_stats_reset();
        if (!lead) continue; /* rank 0 alone evaluates, logs and saves */
        if (!st && eval) st = val_loss(t, o, &vloss);
        if (st) {
            fprintf(stderr, "\nwgml gpt train: step %lld: %s\n", (long long)t->step, cli_message(t->ctx, st));
            return 1;
        }
        double now = cli_now(), el = now - t0, tps = (double)(t->step - first) * (double)tokens_per_step / el;
        if (eval && !isnan(vloss)) fprintf(t->csv, "%.9g", (double)vloss);
        fprintf(t->csv, ",%.1f,%.3f,", tps, t->elapsed_before + el);
        wgml_loss_scale_state sc;
        if (wgml_optimizer_scales_loss(t->opt) && !(st = wgml_optimizer_loss_scale_state(t->opt, &sc)))
            fprintf(t->csv, "%.9g,%lld", (double)sc.scale, (long long)sc.skipped_steps);
        else fprintf(t->csv, ",");
        fprintf(t->csv, "\n");
        if (st) {
            fprintf(stderr, "\nwgml gpt train: step %lld: %s\n", (long long)t->step, cli_message(t->ctx, st));
            return 1;
        }
        fflush(t->csv);
        double left = (double)(end - t->step) * el / (double)(t->step - first);
        if (eval && !isnan(vloss))
            fprintf(stderr, "%sstep %lld/%lld  loss %.4f  val %.4f  %.0f tokens/s  %.0f s left\n", tty ? "\r" : "",
                    (long long)t->step, (long long)end, (double)loss, (double)vloss, tps, left);
        else if (tty)
            fprintf(stderr, "\rstep %lld/%lld  loss %.4f  %.0f tokens/s  %.0f s left   ", (long long)t->step, (long long)end,
                    (double)loss, tps, left);
        else if (first_step || now - shown >= 30) /* a file or a pipe: a line now and then */
            fprintf(stderr, "step %lld/%lld  loss %.4f  %.0f tokens/s  %.1f s a step  %.0f s left\n", (long long)t->step,
                    (long long)end, (double)loss, tps, el / (double)(t->step - first), left);
        if (!tty && (eval || first_step || now - shown >= 30)) shown = now;
        /* steps of a second or more gain nothing from queueing, and a Ctrl-C then waits
           for one step rather than SYNC (one process: ranks must agree on their syncs,
           whose all-reduce of the losses is a collective) */
        if (t->step == first + 1) first_el = el;
        if (t->step == first + 2 && el - first_el >= 1.0 && wgml_dist_size() == 1) sync_every = 1;
        /* a signal while this step was awaited or evaluated stops here, before another starts */
        if (cli_stop_signal) return stop_with_checkpoint(t, o, path, sizeof path);
        if (save_now) {
            snprintf(path, sizeof path, "%s/gpt.safetensors", o->out);
            if ((st = save(t, o, path, 1))) {
                fprintf(stderr, "\nwgml gpt train: %s\n", cli_message(t->ctx, st));
                return 1;
            }
        }
    }
    int n_params;
    wgml_tensor *const *params = wgml_gpt_params(t->model, &n_params);
    if (cli_dist_finish("wgml gpt train", t->ctx, n_params, params)) return 1;
    if (lead)
        fprintf(stderr, "%strained %lld step%s in %.1f s; checkpoint %s/gpt.safetensors, metrics %s/metrics.csv\n", tty ? "\n" : "",
                (long long)(t->step - first), t->step - first == 1 ? "" : "s", cli_now() - t0, o->out, o->out);
    return 0;
}

/* A checksum of a text's tokens: a resumed run, and every rank of one, must read the same text */
static uint64_t text_checksum(const wgml_text *text)
{
    return cli_fnv1a(CLI_FNV1A_START, text->tokens, (size_t)text->n * sizeof *text->tokens);
}

/* Whether text (in the run's vocabulary) differs from the one run recorded (older checkpoints
   record none: 0) */
static int text_changed(const wgml_gpt_run *run, const wgml_text *text)
{
    return run->data_tokens && (run->data_tokens != text->n || run->data_checksum != text_checksum(text));
}

/* Re-tokenises text with a checkpoint's vocabulary, which must hold every byte of the text,
   so that a model goes on with (or is scored on) text other than its own. 0, or reported. */
static int adopt_vocab(const char *who, wgml_text *text, const char *text_name, const uint8_t *vocab, int vocab_size,
                       const char *ck_path)
{
    int16_t token_of[256];
    int32_t map[256];
    for (int b = 0; b < 256; b++) token_of[b] = -1;
    for (int k = 0; k < vocab_size; k++) token_of[vocab[k]] = (int16_t)k;
    for (int k = 0; k < text->vocab_size; k++)
        if ((map[k] = token_of[text->vocab[k]]) < 0) {
            uint8_t b = text->vocab[k];
            char shown[8] = "";
            if (b >= 32 && b < 127) snprintf(shown, sizeof shown, " ('%c')", (char)b);
            fprintf(stderr, "%s: %s holds the byte 0x%02x%s, which is not in the vocabulary of %s (%d bytes)\n", who, text_name,
                    (unsigned)b, shown, ck_path, vocab_size);
            return 1;
        }
    for (int64_t i = 0; i < text->n; i++) text->tokens[i] = map[text->tokens[i]];
    memcpy(text->vocab, vocab, (size_t)vocab_size);
    memcpy(text->token_of, token_of, sizeof token_of);
    text->vocab_size = vocab_size;
    return 0;
}

static const int model_flags[] = {O_ARCH, O_LAYERS, O_HEADS, O_KV_HEADS, O_WIDTH, O_FFN, O_BLOCK};

/* The first of flags[0..n) given on the command line, or NULL. */
static const char *given_flag(const train_options *o, const int *flags, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (o->given[flags[k] - 256])
            for (const struct option *f = train_flags; f->name; f++)
                if (f->val == flags[k]) return f->name;
    return NULL;
}

/* Whether the adapter multiplies f16 into f32 on matrix units (what mixed precision needs to pay). */
static int has_matrix_units(wgml_context *ctx)
{
    wgml_adapter_info info;
    if (wgml_adapter_info_get(ctx, &info) || !info.has_subgroup_matrix || !info.has_shader_f16) return 0;
    for (int k = 0; k < info.subgroup_matrix_count; k++)
        if (!strcmp(info.subgroup_matrix[k].component, "f16") && !strcmp(info.subgroup_matrix[k].result, "f32")) return 1;
    return 0;
}

static wgml_status make_optimizer(trainer *t, train_options *o, int64_t total_steps)
{
    wgml_gpt_train_desc d = {.lr = o->run.lr, .weight_decay = o->run.weight_decay, .max_grad_norm = o->run.max_grad_norm,
                             .beta1 = o->run.beta1, .beta2 = o->run.beta2,
                             .precision = (wgml_precision)(o->precision >= 0 ? o->precision : has_matrix_units(t->ctx)),
                             .schedule = {.warmup_steps = o->run.warmup, .total_steps = total_steps,
                                          .min_lr_ratio = o->run.min_lr_ratio, .decay = WGML_LR_DECAY_COSINE}};
    if (total_steps <= o->run.warmup) d.schedule = (wgml_lr_schedule){0};
    o->run.precision = d.precision; /* the checkpoints' record of the run */
    return wgml_gpt_optimizer(t->model, &d, &t->opt);
}

/* Takes the model, optimiser state and settings of a checkpoint read to resume; flags that would
   change a stored setting are refused. */
static int resume(trainer *t, train_options *o, const wgml_gpt_checkpoint *ck)
{
    wgml_status st;
    /* everything the checkpoint holds: a resumed run is the run that wrote it */
    static const int stored_flags[] = {O_ARCH,    O_LAYERS, O_HEADS, O_KV_HEADS, O_WIDTH,      O_FFN,          O_BLOCK,
                                       O_BATCH,   O_SEED,   O_LR,    O_MIN_LR,   O_WARMUP,     O_WD,
                                       O_CLIP,    O_BETA2,  O_DROPOUT, O_EVAL_EVERY, O_EVAL_BATCHES, O_SAVE_INIT,
                                       O_PRECISION};
    const char *name = given_flag(o, stored_flags, sizeof stored_flags / sizeof stored_flags[0]);
    if (name) {
        fprintf(stderr, "wgml gpt train: --%s cannot be given with --resume: the checkpoint's model, data and settings are kept "
                        "(--init-from starts a new run from its weights)\n", name);
        return 2;
    }
    if (ck->run.ranks != wgml_dist_size()) { /* the batch's split over the ranks is part of the run */
        long long n = (long long)ck->run.ranks;
        if (n == 1)
            fprintf(stderr, "wgml gpt train: %s was written by a run in one process and this one has %d ranks: resume it in "
                            "one process (no MPI launcher)\n", o->resume, wgml_dist_size());
        else
            fprintf(stderr, "wgml gpt train: %s was written by a run on %lld ranks and this one has %d: resume it on %lld "
                            "(mpirun -np %lld, or mpiexec -n %lld)\n", o->resume, n, wgml_dist_size(), n, n, n);
        return 1;
    }
    o->cfg = ck->cfg;
    char data[sizeof o->run.data]; /* the run's text, or where --data says it is now */
    memcpy(data, o->run.data, sizeof data);
    o->run = ck->run;
    memcpy(o->run.data, data, sizeof data);
    o->precision = (int)ck->run.precision;
    if (!o->given[O_STEPS - 256]) o->steps = ck->run.total_steps;
    /* checkpoints as often as the run made them: every evaluation unless --save-every says */
    if (!o->given[O_SAVE_EVERY - 256]) o->save_every = o->run.eval_every;
    if (ck->step >= o->steps) {
        fprintf(stderr, "wgml gpt train: %s is at step %lld of %lld: nothing to train (give --steps past it)\n", o->resume,
                (long long)ck->step, (long long)o->steps);
        return 1;
    }
    if (o->stop_at > 0 && ck->step >= o->stop_at) {
        fprintf(stderr, "wgml gpt train: %s is at step %lld, --stop-at %lld: nothing to train (give --stop-at past it)\n",
                o->resume, (long long)ck->step, (long long)o->stop_at);
        return 1;
    }
    st = wgml_gpt_from_checkpoint(t->ctx, ck, &t->model);
    if (!st) st = make_optimizer(t, o, o->run.total_steps);
    if (!st) st = wgml_gpt_checkpoint_restore_optimizer(ck, t->model, t->opt);
    if (!st) st = wgml_rng_set_state(t->ctx, ck->run.rng_seed, ck->run.rng_offset);
    t->step = ck->step;
    if (st) fprintf(stderr, "wgml gpt train: %s\n", cli_message(t->ctx, st));
    if (!st && adopt_vocab("wgml gpt train", &t->text, o->run.data, ck->vocab, ck->vocab_size, o->resume)) return 1;
    if (!st && !ck->run.data_tokens)
        fprintf(stderr, "wgml gpt train: %s records no checksum of its text (an older checkpoint): %s is taken as the run's\n",
                o->resume, o->run.data);
    if (!st && text_changed(&ck->run, &t->text)) {
        fprintf(stderr, "wgml gpt train: %s is not the text %s trained on (%lld tokens, checksum %016llx; it has %lld, %016llx)%s\n",
                o->run.data, o->resume, (long long)ck->run.data_tokens, (unsigned long long)ck->run.data_checksum, (long long)t->text.n,
                (unsigned long long)text_checksum(&t->text), o->given[O_DATA - 256] ? "" : ": give --data with the run's text");
        return 1;
    }
    return st ? 1 : 0;
}

/* A new run from a checkpoint's weights and model: its own settings, a fresh optimiser. */
static int init_from(trainer *t, train_options *o, const wgml_gpt_checkpoint *ck)
{
    float dropout = o->cfg.dropout;
    o->cfg = ck->cfg;
    if (o->given[O_DROPOUT - 256]) o->cfg.dropout = dropout;
    if (adopt_vocab("wgml gpt train", &t->text, o->run.data, ck->vocab, ck->vocab_size, o->init_from)) return 1;
    if (o->run.warmup >= o->steps && o->steps > 0) o->run.warmup = o->steps - 1;
    o->run.total_steps = o->steps;
    wgml_status st = wgml_gpt_from_checkpoint(t->ctx, ck, &t->model);
    if (!st) st = wgml_gpt_set_dropout(t->model, o->cfg.dropout);
    if (!st) st = wgml_manual_seed(t->ctx, o->run.seed); /* the dropout masks, as a new run's */
    if (!st) st = make_optimizer(t, o, o->steps);
    if (st) fprintf(stderr, "wgml gpt train: %s\n", cli_message(t->ctx, st));
    return st ? 1 : 0;
}

/* A CPU adapter (lavapipe) trains at about this many useful FLOP/s on 2 idle cores (a step's
   6 per parameter per token and the attention's 12 L T C a token; docs/MEASUREMENTS.md):
   said up front, since a GPU-sized model takes minutes a step there. */
#define CPU_FLOPS_PER_S 1e9

static void say_cpu_speed(wgml_context *ctx, const train_options *o)
{
    wgml_adapter_info i;
    wgml_adapter_info_get(ctx, &i);
    if (strcmp(i.adapter_type, "CPU") != 0) return;
    double per_token = 6.0 * (double)wgml_gpt_numel(&o->cfg) + 12.0 * (double)(o->cfg.layers * o->cfg.block * o->cfg.width);
    double flops = per_token * (double)(o->run.batch * o->cfg.block);
    fprintf(stderr, "%s is a CPU adapter: a step here is %.2g GFLOP, about %.2g s at the ~1 GFLOP/s of 2 idle cores (the "
                    "line after the first step gives this machine's time); the README has a recipe sized for a CPU\n",
            i.name, flops / 1e9, flops / CPU_FLOPS_PER_S);
}

/* Every rank's run the same as rank 0's (ranks started with other options or text would
   train apart and be found out only at the end): 0, else each says how, 1 */
static int check_same_run(const train_options *o, const wgml_text *text, int64_t first_step)
{
    if (wgml_dist_size() < 2) return 0;
    uint64_t h = text_checksum(text);
    const wgml_gpt_config *c = &o->cfg;
    const wgml_gpt_run *r = &o->run;
    const cli_setting s[] = {
        {"the first step (a resumed checkpoint's)", (double)first_step},
        {"--steps", (double)o->steps}, {"--stop-at", (double)o->stop_at}, {"--batch", (double)r->batch},
        {"--save-every", (double)o->save_every}, /* (each checkpoint is a sync of every rank: the losses' all-reduce) */
        {"--lr", r->lr}, {"--min-lr-ratio", r->min_lr_ratio}, {"--warmup", (double)r->warmup},
        {"--weight-decay", r->weight_decay}, {"--clip", r->max_grad_norm}, {"--beta2", r->beta2},
        {"--seed", (double)(r->seed & 0xffffffffu)}, {"--seed (its high bits)", (double)(r->seed >> 32)},
        {"--eval-every", (double)r->eval_every}, {"--eval-batches", (double)r->eval_batches},
        {"--precision (as resolved)", (double)r->precision}, {"--arch", (double)c->arch}, {"--layers", (double)c->layers},
        {"--heads", (double)c->heads}, {"--kv-heads", (double)c->kv_heads}, {"--width", (double)c->width},
        {"--ffn", (double)c->ffn}, {"--block", (double)c->block}, {"--dropout", c->dropout},
        {"the text's tokens", (double)text->n}, {"the text's vocabulary", (double)text->vocab_size},
        {"the text's checksum", (double)(h >> 11)}, /* (53 bits: exact as a double) */
    };
    return cli_dist_check_same("wgml gpt train", (int)(sizeof s / sizeof *s), s);
}

static int train_run(train_options *o)
{
    trainer t = {0};
    char err[512];
    wgml_status st;
    int rc;
    if (!o->resume || o->given[O_DATA - 256]) { /* the folder as an absolute path, so that a resume from elsewhere finds it */
        char *abs = realpath(o->run.data, NULL);
        if (abs && strlen(abs) >= sizeof o->run.data) {
            fprintf(stderr, "wgml gpt train: the text's path has %zu bytes; at most %zu fit in a checkpoint\n", strlen(abs),
                    sizeof o->run.data - 1);
            free(abs);
            return 2;
        }
        if (abs) snprintf(o->run.data, sizeof o->run.data, "%s", abs);
        free(abs);
        if (o->given[O_WARMUP - 256] && o->run.warmup >= o->steps) {
            fprintf(stderr, "wgml gpt train: --warmup %lld is not shorter than --steps %lld\n", (long long)o->run.warmup,
                    (long long)o->steps);
            return 2;
        }
    }
    if ((st = wgml_context_create(NULL, &t.ctx))) return fprintf(stderr, "wgml: %s\n", wgml_last_create_error()), 1;
    wgml_gpt_checkpoint ck = {0};
    const char *from = o->resume ? o->resume : o->init_from;
    if (from) { /* the checkpoint first: it names the text */
        if ((st = wgml_gpt_checkpoint_read(t.ctx, from, &ck)))
            return fprintf(stderr, "wgml gpt train: %s\n", cli_message(t.ctx, st)), trainer_free(&t), 1;
        if (!o->given[O_DATA - 256]) snprintf(o->run.data, sizeof o->run.data, "%s", ck.run.data);
    }
    if ((st = wgml_text_load(o->run.data, &t.text, err, sizeof err))) {
        fprintf(stderr, "wgml gpt train: %s%s\n", err, o->resume && !o->given[O_DATA - 256] ? " (the run's text: where it has moved, give --data)" : "");
        return wgml_gpt_checkpoint_free(&ck), trainer_free(&t), 1;
    }
    if (from) {
        rc = o->resume ? resume(&t, o, &ck) : init_from(&t, o, &ck);
        wgml_gpt_checkpoint_free(&ck);
        if (rc) return trainer_free(&t), rc;
    } else {
        o->cfg.vocab = t.text.vocab_size;
        o->run.total_steps = o->steps;
        wgml_gpt_config c;
        if (wgml_gpt_config_resolve(&o->cfg, &c, err, sizeof err)) return fprintf(stderr, "wgml gpt train: %s\n", err), trainer_free(&t), 2;
        if (o->run.warmup >= o->steps && o->steps > 0) o->run.warmup = o->steps - 1;
        o->cfg = c;
        st = wgml_gpt_new(t.ctx, &o->cfg, o->run.seed, &t.model);
        if (!st) st = make_optimizer(&t, o, o->steps);
        if (st) return fprintf(stderr, "wgml gpt train: %s\n", cli_message(t.ctx, st)), trainer_free(&t), 1;
    }
    o->run.ranks = wgml_dist_size();
    o->run.data_tokens = t.text.n, o->run.data_checksum = text_checksum(&t.text);
    int64_t T = o->cfg.block;
    if (t.text.n_train <= T || t.text.n - t.text.n_train <= T) {
        fprintf(stderr, "wgml gpt train: %s has %lld training and %lld validation tokens; block %lld needs more than that\n",
                o->run.data, (long long)t.text.n_train, (long long)(t.text.n - t.text.n_train), (long long)T);
        return trainer_free(&t), 1;
    }
    const int lead = wgml_dist_rank() == 0, ranks = wgml_dist_size();
    if (cli_dist_check_batch("wgml gpt train", o->run.batch) || check_same_run(o, &t.text, t.step)) return trainer_free(&t), 1;
    /* every rank starts from rank 0's parameters, and its steps average the gradients */
    int n_params;
    wgml_tensor *const *params = wgml_gpt_params(t.model, &n_params);
    if ((st = wgml_dist_broadcast(t.ctx, n_params, params)))
        return fprintf(stderr, "wgml gpt train: %s\n", cli_message(t.ctx, st)), trainer_free(&t), 1;
    if ((st = wgml_dist_data_parallel(t.opt)))
        return fprintf(stderr, "wgml gpt train: %s\n", wgml_dist_error_message()), trainer_free(&t), 1;
    t.x = malloc((size_t)(o->run.batch * T) * sizeof *t.x), t.y = malloc((size_t)(o->run.batch * T) * sizeof *t.y);
    char path[1100];
    if (!t.x || !t.y) return fprintf(stderr, "wgml gpt train: out of host memory\n"), trainer_free(&t), 1;
    snprintf(path, sizeof path, "%s/metrics.csv", o->out);
    if (lead)
        t.csv = cli_metrics_open(path, "step,loss,lr,grad_norm,val_loss,tokens_per_s,elapsed_s,loss_scale,skipped_steps", o->resume ? t.step : -1, err, sizeof err);
    if (lead && !t.csv) return fprintf(stderr, "wgml gpt train: %s\n", err), trainer_free(&t), 1;
    if (lead && o->resume) t.elapsed_before = cli_metrics_last_elapsed(path);
    if (lead && o->save_init && !o->resume) {
        snprintf(path, sizeof path, "%s/init.safetensors", o->out);
        if ((st = save(&t, o, path, 0))) return fprintf(stderr, "wgml gpt train: %s\n", cli_message(t.ctx, st)), trainer_free(&t), 1;
    }
    if (lead)
        fprintf(stderr, "gpt: %s, %lld layers, %lld heads (%lld K/V), width %lld, block %lld, %lld parameters; %lld tokens of text "
                        "(%d bytes of vocabulary) from %d file%s\n",
                o->cfg.arch == WGML_GPT_LLAMA ? "llama" : "gpt2", (long long)o->cfg.layers, (long long)o->cfg.heads,
                (long long)o->cfg.kv_heads, (long long)o->cfg.width, (long long)o->cfg.block, (long long)wgml_gpt_numel(&o->cfg),
                (long long)t.text.n, t.text.vocab_size, t.text.files, t.text.files == 1 ? "" : "s");
    if (lead && o->init_from) fprintf(stderr, "starting from the weights of %s\n", o->init_from);
    if (lead) say_cpu_speed(t.ctx, o);
    if (lead && ranks > 1) fprintf(stderr, "data parallel over %d ranks: %lld sequences of each batch per rank\n", ranks,
                                   (long long)(o->run.batch / ranks));
    /* Ctrl-C finishes the step and writes a checkpoint (one process: under mpirun a rank
       alone cannot stop the others' collectives) */
    if (ranks == 1) cli_stop_catch();
    rc = o->steps > t.step ? train_loop(&t, o) : 0;
    cli_stop_restore();
    if (!rc && lead && o->sample_tokens > 0) {
        double secs;
        st = print_sample(t.model, t.text.vocab, t.text.vocab_size, t.text.token_of, o->sample_tokens, 0.8f, 0, 1.0f, NULL, 1, &secs);
        if (st) fprintf(stderr, "wgml gpt train: sampling: %s\n", cli_message(t.ctx, st)), rc = 1;
    }
    trainer_free(&t);
    return rc;
}

static int cmd_gpt_train(int argc, char **argv)
{
    train_options o;
    int rc = parse_train(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.resume && o.init_from) return fprintf(stderr, "wgml gpt train: --resume and --init-from exclude each other\n"), 2;
    const char *name = given_flag(&o, model_flags, sizeof model_flags / sizeof model_flags[0]);
    if (o.init_from && name) {
        fprintf(stderr, "wgml gpt train: --%s cannot be given with --init-from: the checkpoint's model is kept\n", name);
        return 2;
    }
    char out_dir[1024];
    if (!o.out) { /* resuming: beside the checkpoint */
        snprintf(out_dir, sizeof out_dir, "%s", o.resume ? o.resume : "out/gpt/x");
        char *slash = strrchr(out_dir, '/');
        if (slash) *slash = 0;
        else snprintf(out_dir, sizeof out_dir, ".");
        o.out = out_dir;
    }
    /* a batch the ranks cannot split is refused by every rank before rank 0 locks the folder:
       mpirun kills rank 0 when another rank exits, and a killed rank 0 may still be alive
       (its lock in force) when the next run starts */
    if (!o.resume && cli_dist_check_batch("wgml gpt train", o.run.batch)) return 1;
    /* the folder is this run's alone: a run it holds is continued or replaced on purpose */
    static const char *const run_files[] = {"gpt.safetensors", "metrics.csv", "init.safetensors", NULL};
    cli_out_lock lock = {0};
    if (o.init_from && o.overwrite && cli_same_dir(o.out, o.init_from)) { /* (before anything is removed) */
        const char *base = strrchr(o.init_from, '/') ? strrchr(o.init_from, '/') + 1 : o.init_from;
        for (const char *const *f = run_files; *f; f++)
            if (!strcmp(base, *f)) {
                fprintf(stderr, "wgml gpt train: --init-from %s is one of the files --overwrite removes from %s first: copy it "
                                "elsewhere, or write to another --out\n", o.init_from, o.out);
                return 2;
            }
    }
    if (wgml_dist_rank() == 0) {
        int continuing = o.resume && cli_same_dir(o.out, o.resume);
        if ((rc = cli_out_claim("wgml gpt train", o.out, run_files, continuing, o.overwrite, &lock))) return rc;
    }
    rc = train_run(&o);
    cli_out_release(&lock);
    return rc;
}

/* ---------------------------------------------------------------- sampling */

typedef struct printer {
    const uint8_t *vocab;
    int vocab_size;
} printer;

static int print_token(int32_t tok, void *user)
{
    const printer *p = user;
    fputc(tok >= 0 && tok < p->vocab_size ? p->vocab[tok] : '?', stdout);
    fflush(stdout);
    return 0;
}

/* The prompt as ids (empty: a newline's token, or the vocabulary's first) */
static int32_t *prompt_ids(const int16_t *token_of, const char *prompt, size_t *np)
{
    *np = prompt ? strlen(prompt) : 0;
    int32_t *ids = malloc((*np + 1) * sizeof *ids);
    if (ids && *np == 0) ids[0] = token_of['\n'] >= 0 ? token_of['\n'] : 0, *np = 1;
    else if (ids) for (size_t i = 0; i < *np; i++) ids[i] = token_of[(uint8_t)prompt[i]];
    return ids;
}

static void put_prompt(const uint8_t *vocab, const int32_t *ids, const char *prompt)
{
    if (prompt && *prompt) fputs(prompt, stdout);
    else fputc(vocab[ids[0]], stdout);
}

/* One sample, streamed token by token; or, samples > 1, that many continuations of the prompt
   drawn together (wgml_gpt_generate_batch), each printed whole after the others, a line "---"
   between them */
static wgml_status print_sample(wgml_gpt *g, const uint8_t *vocab, int vocab_size, const int16_t *token_of, int64_t n,
                                float temperature, int64_t top_k, float top_p, const char *prompt, int64_t samples, double *seconds)
{
    size_t np;
    int32_t *ids = prompt_ids(token_of, prompt, &np);
    if (!ids) return WGML_ERROR_OUT_OF_MEMORY;
    printer p = {vocab, vocab_size};
    wgml_gpt_sample_desc d = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
    wgml_status st = WGML_OK;
    if (samples == 1) {
        put_prompt(vocab, ids, prompt);
        double t0 = cli_now();
        st = wgml_gpt_generate(g, ids, (int64_t)np, n, &d, NULL, print_token, &p);
        *seconds = cli_now() - t0;
        fputc('\n', stdout);
    } else {
        const int32_t **prompts = malloc((size_t)samples * sizeof *prompts);
        int64_t *lens = malloc((size_t)samples * sizeof *lens);
        int32_t *out = malloc((size_t)(samples * n) * sizeof *out);
        st = prompts && lens && out ? WGML_OK : WGML_ERROR_OUT_OF_MEMORY;
        for (int64_t s = 0; !st && s < samples; s++) prompts[s] = ids, lens[s] = (int64_t)np;
        double t0 = cli_now();
        if (!st) st = wgml_gpt_generate_batch(g, samples, prompts, lens, n, &d, out);
        *seconds = cli_now() - t0;
        for (int64_t s = 0; !st && s < samples; s++) {
            if (s) fputs("---\n", stdout);
            put_prompt(vocab, ids, prompt);
            for (int64_t k = 0; k < n; k++) print_token(out[s * n + k], &p);
            fputc('\n', stdout);
        }
        free(prompts), free(lens), free(out);
    }
    fflush(stdout); /* the text ends its line before anything on stderr, in a log of both */
    free(ids);
    return st;
}

static const struct option sample_flags[] = {
    {"checkpoint", required_argument, 0, O_CHECKPOINT}, {"prompt", required_argument, 0, O_PROMPT},
    {"tokens", required_argument, 0, O_TOKENS},         {"temperature", required_argument, 0, O_TEMPERATURE},
    {"top-k", required_argument, 0, O_TOP_K},           {"top-p", required_argument, 0, O_TOP_P},
    {"seed", required_argument, 0, O_SEED},             {"samples", required_argument, 0, O_SAMPLES},
    {"help", no_argument, 0, 'h'},                      {0, 0, 0, 0},
};

static const char sample_usage[] =
    "usage: wgml gpt sample --checkpoint FILE [--prompt TEXT (a newline)] [--tokens N (200)] [--temperature X (0.8; 0: greedy)]\n"
    "                       [--top-k N (0: all)] [--top-p P (1: all; else the fewest likeliest tokens reaching P)] [--seed N (1)]\n"
    "                       [--samples N (1; more: N continuations drawn together, a line \"---\" between them)]\n"
    "The text goes to stdout; its speed, on a line of its own, to stderr. Runs on wgpu-native unless\n"
    "--runtime (or WGML_RUNTIME) names another.\n";

typedef struct sample_options {
    const char *path, *prompt;
    int64_t tokens, top_k, samples;
    float temperature, top_p;
    uint64_t seed;
} sample_options;

static int sample_flag(int opt, const char *arg, void *state)
{
    sample_options *o = state;
    char err[256];
    int bad = 0;
    switch (opt) {
    case O_CHECKPOINT: o->path = arg; break;
    case O_PROMPT: o->prompt = arg; break;
    case O_TOKENS: bad = wgml_parse_i64("--tokens", arg, 1, 1 << 24, &o->tokens, err, sizeof err) != 0; break;
    case O_TOP_K: bad = wgml_parse_i64("--top-k", arg, 0, 1 << 20, &o->top_k, err, sizeof err) != 0; break;
    case O_TOP_P:
        bad = wgml_parse_f32("--top-p", arg, 0.0f, 1.0f, &o->top_p, err, sizeof err) != 0;
        if (!bad && !(o->top_p > 0)) bad = 1, snprintf(err, sizeof err, "--top-p is %s: want more than 0 and at most 1", arg);
        break;
    case O_TEMPERATURE: bad = wgml_parse_f32("--temperature", arg, 0.0f, 100.0f, &o->temperature, err, sizeof err) != 0; break;
    case O_SEED: bad = wgml_parse_u64("--seed", arg, &o->seed, err, sizeof err) != 0; break;
    case O_SAMPLES: bad = wgml_parse_i64("--samples", arg, 1, 256, &o->samples, err, sizeof err) != 0; break;
    default: return 1;
    }
    if (bad) fprintf(stderr, "wgml gpt sample: %s\n", err);
    return bad;
}

static int cmd_gpt_sample(int argc, char **argv)
{
    sample_options so = {.tokens = 200, .temperature = 0.8f, .top_p = 1.0f, .seed = 1, .samples = 1};
    int prc = cli_parse(argc, argv, "gpt sample", sample_flags, sample_usage, sample_flag, &so, NULL, 0, NULL);
    if (prc) return prc == 1 ? 0 : 2;
    const char *path = so.path, *prompt = so.prompt;
    if (!path) return fprintf(stderr, "wgml gpt sample: --checkpoint FILE is required (see --help)\n"), 2;
    cli_generation_runtime();
    wgml_context *ctx = NULL;
    if (wgml_context_create(NULL, &ctx)) return fprintf(stderr, "wgml: %s\n", wgml_last_create_error()), 1;
    wgml_gpt *g = NULL;
    wgml_status st = wgml_gpt_load(ctx, path, &g);
    if (!st) st = wgml_manual_seed(ctx, so.seed);
    const uint8_t *vocab = NULL;
    int vocab_size = wgml_gpt_vocab(g, &vocab);
    int16_t token_of[256];
    for (int b = 0; b < 256; b++) token_of[b] = -1;
    for (int k = 0; !st && k < vocab_size; k++) token_of[vocab[k]] = (int16_t)k;
    int rc = st ? 1 : 0;
    for (size_t i = 0; !rc && prompt && prompt[i]; i++)
        if (token_of[(uint8_t)prompt[i]] < 0) {
            fprintf(stderr, "wgml gpt sample: byte %zu of the prompt (0x%02x) is not in the checkpoint's vocabulary\n", i,
                    (unsigned)(uint8_t)prompt[i]);
            rc = 2;
        }
    double secs = 0;
    if (!rc) {
        st = print_sample(g, vocab, vocab_size, token_of, so.tokens, so.temperature, so.top_k, so.top_p, prompt, so.samples, &secs);
        if (!st) fprintf(stderr, "%lld tokens in %.2f s: %.0f tokens/s\n", (long long)(so.tokens * so.samples), secs,
                         (double)(so.tokens * so.samples) / secs);
    }
    if (st) fprintf(stderr, "wgml gpt sample: %s\n", cli_message(ctx, st)), rc = 1;
    wgml_gpt_delete(g);
    wgml_context_free(ctx);
    return rc;
}

/* ---------------------------------------------------------------- evaluation */

static const struct option eval_flags[] = {
    {"checkpoint", required_argument, 0, O_CHECKPOINT}, {"data", required_argument, 0, O_DATA},
    {"batch", required_argument, 0, O_BATCH},           {"tokens", required_argument, 0, O_TOKENS},
    {"help", no_argument, 0, 'h'},                      {0, 0, 0, 0},
};

static const char eval_usage[] =
    "usage: wgml gpt eval --checkpoint FILE [--data FILE|DIR] [--batch N (16)] [--tokens N (all)]\n"
    "The mean loss (nats a byte), perplexity and bits a byte of a checkpoint on text: all of FILE,\n"
    "or the validation split (the last 10%) of DIR, by default the checkpoint's own text. The text\n"
    "is cut into windows of the block; --tokens scores only the first N predictions (N + 1 tokens).\n";

typedef struct eval_options {
    const char *path, *data;
    int64_t batch, tokens;
} eval_options;

static int eval_flag(int opt, const char *arg, void *state)
{
    eval_options *o = state;
    char err[256];
    int bad = 0;
    switch (opt) {
    case O_CHECKPOINT: o->path = arg; break;
    case O_DATA: o->data = arg; break;
    case O_BATCH: bad = wgml_parse_i64("--batch", arg, 1, 1 << 16, &o->batch, err, sizeof err) != 0; break;
    case O_TOKENS: bad = wgml_parse_i64("--tokens", arg, 1, INT64_MAX - 1, &o->tokens, err, sizeof err) != 0; break;
    default: return 1;
    }
    if (bad) fprintf(stderr, "wgml gpt eval: %s\n", err);
    return bad;
}

/* The loss of windows of seq (n tokens): ids [b, T] predicting the next token each. */
static wgml_status score_windows(wgml_gpt *g, const int32_t *seq, int64_t b, int64_t T, int32_t *x, int32_t *y, double *sum)
{
    wgml_context *ctx = wgml_gpt_context(g);
    for (int64_t r = 0; r < b; r++) {
        memcpy(x + r * T, seq + r * T, (size_t)T * sizeof *x);
        memcpy(y + r * T, seq + r * T + 1, (size_t)T * sizeof *y);
    }
    wgml_scope_begin(ctx);
    wgml_tensor *ids = NULL, *targets = NULL;
    int64_t shape[2] = {b, T};
    float l = 0;
    wgml_status st = wgml_tensor_from_i32(ctx, 2, shape, x, (size_t)(b * T), &ids);
    if (!st) st = wgml_tensor_from_i32(ctx, 2, shape, y, (size_t)(b * T), &targets);
    if (!st) st = wgml_gpt_eval_loss(g, ids, targets, &l);
    wgml_scope_end(ctx);
    *sum += (double)l * (double)(b * T);
    return st;
}

/* The mean loss of the n - 1 predictions of seq (n tokens): windows of the block, B at a time,
   and what is left over as one shorter window. */
static wgml_status score(wgml_gpt *g, const int32_t *seq, int64_t n, int64_t B, double *loss, int64_t *scored)
{
    wgml_gpt_config cfg;
    wgml_status st = wgml_gpt_get_config(g, &cfg);
    if (st) return st;
    int64_t T = cfg.block < n - 1 ? cfg.block : n - 1, windows = (n - 1) / T, rest = (n - 1) - windows * T;
    int32_t *x = malloc((size_t)(B * T) * sizeof *x), *y = malloc((size_t)(B * T) * sizeof *y);
    st = x && y ? WGML_OK : WGML_ERROR_OUT_OF_MEMORY;
    double sum = 0;
    for (int64_t w0 = 0; w0 < windows && !st; w0 += B)
        st = score_windows(g, seq + w0 * T, windows - w0 < B ? windows - w0 : B, T, x, y, &sum);
    if (!st && rest) st = score_windows(g, seq + windows * T, 1, rest, x, y, &sum);
    free(x), free(y);
    *loss = sum / (double)(n - 1);
    *scored = n - 1;
    return st;
}

static int cmd_gpt_eval(int argc, char **argv)
{
    eval_options eo = {.batch = 16};
    int prc = cli_parse(argc, argv, "gpt eval", eval_flags, eval_usage, eval_flag, &eo, NULL, 0, NULL);
    if (prc) return prc == 1 ? 0 : 2;
    if (!eo.path) return fprintf(stderr, "wgml gpt eval: --checkpoint FILE is required (see --help)\n"), 2;
    wgml_context *ctx = NULL;
    if (wgml_context_create(NULL, &ctx)) return fprintf(stderr, "wgml: %s\n", wgml_last_create_error()), 1;
    wgml_gpt_checkpoint ck = {0};
    wgml_gpt *g = NULL;
    wgml_text text = {0};
    char err[512];
    int rc = 1;
    wgml_status st = wgml_gpt_checkpoint_read(ctx, eo.path, &ck);
    if (st) fprintf(stderr, "wgml gpt eval: %s\n", cli_message(ctx, st));
    const char *data = eo.data ? eo.data : ck.run.data;
    struct stat sb;
    /* --data FILE: all of it; a folder, or by default the checkpoint's own text (file or folder):
       its validation split, the part its run did not train on */
    int whole = eo.data && stat(data, &sb) == 0 && S_ISREG(sb.st_mode);
    if (!st && (st = wgml_text_load(data, &text, err, sizeof err))) fprintf(stderr, "wgml gpt eval: %s\n", err);
    if (!st && !adopt_vocab("wgml gpt eval", &text, data, ck.vocab, ck.vocab_size, eo.path)) {
        if (!eo.data && text_changed(&ck.run, &text))
            fprintf(stderr, "wgml gpt eval: %s is not the text %s trained on (it changed): its validation split is not the run's\n",
                    data, eo.path);
        int64_t lo = whole ? 0 : text.n_train, n = text.n - lo;
        if (eo.tokens && eo.tokens + 1 < n) n = eo.tokens + 1;
        double loss;
        int64_t scored;
        if (n < 2) fprintf(stderr, "wgml gpt eval: %s has %lld tokens to score: want at least 2\n", data, (long long)n);
        else if ((st = wgml_gpt_from_checkpoint(ctx, &ck, &g)) || (st = score(g, text.tokens + lo, n, eo.batch, &loss, &scored)))
            fprintf(stderr, "wgml gpt eval: %s\n", cli_message(ctx, st));
        else {
            printf("%s: loss %.4f  perplexity %.3f  %.3f bits a byte  (%lld predicted token%s of %s%s, step %lld)\n", eo.path, loss,
                   exp(loss), loss / log(2.0), (long long)scored, scored == 1 ? "" : "s", whole ? "" : "the validation split of ", data,
                   (long long)ck.step);
            rc = 0;
        }
    }
    wgml_text_free(&text);
    wgml_gpt_delete(g);
    wgml_gpt_checkpoint_free(&ck);
    wgml_context_free(ctx);
    return rc;
}

int cmd_gpt(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "train") == 0) {
        if (cli_dist_begin("wgml gpt train")) return 1;
        return cli_dist_end("wgml gpt train", cmd_gpt_train(argc, argv));
    }
    if (argc >= 1 && strcmp(argv[0], "sample") == 0) return cmd_gpt_sample(argc, argv);
    if (argc >= 1 && strcmp(argv[0], "eval") == 0) return cmd_gpt_eval(argc, argv);
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("usage: wgml gpt train [options]   (wgml gpt train --help)\n       wgml gpt sample --checkpoint FILE [options]\n"
               "       wgml gpt eval --checkpoint FILE [--data FILE|DIR]\n");
        return 0;
    }
    fprintf(stderr, "wgml gpt: %s%s%s; want train, sample or eval\n", argc ? "unknown command '" : "no command", argc ? argv[0] : "",
            argc ? "'" : "");
    return 2;
}
