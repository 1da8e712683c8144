/* Shared by the wgml tool's commands. */
#ifndef WGML_TOOLS_CLI_H
#define WGML_TOOLS_CLI_H

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "wgml.h"

/* mkdir -p: the folder and any missing parents (a fresh checkout has no out/); -1 with errno */
int cli_make_dirs(const char *path);
double cli_now(void); /* monotonic seconds */
/* The context's message, or the status's name where a call left none. */
const char *cli_message(wgml_context *ctx, wgml_status st);

/* Opens a run's metrics CSV (rows begin with their step) for appending rows. A fresh run
   (resume_step < 0), or a resumed one whose file is missing, starts the file with header. A
   resumed run keeps the header and the rows of steps <= resume_step and drops any after it (a
   run that stopped after its last checkpoint wrote them), so the file equals an unbroken run's.
   NULL with the reason in err when it cannot be written or, resuming, its first line is not
   header or the start of it (another command's file is not overwritten; an older version's
   file, whose header lacks columns added at the end, gets them, empty in its rows). */
FILE *cli_metrics_open(const char *path, const char *header, int64_t resume_step, char *err, size_t errlen);
/* The elapsed_s column (found by the header) of the last row of a metrics CSV, so that a
   resumed run's clock goes on from where the run stopped; 0 when there is no such row. */
double cli_metrics_last_elapsed(const char *path);

/* A run's output folder, held by one process at a time. cli_out_claim creates dir, takes its
   lock file (dir/.wgml.lock holding the pid; a lock whose process is gone is taken over),
   removes temporary files that a killed write left (NAME.tmp.PID of a dead PID, and
   metrics.csv.tmp), and refuses a folder holding a run (any of the names in run_files, a
   NULL-ended list) unless continuing (the run is resumed from this folder) or overwrite
   (the run's files are removed now).
   0, or reported naming the folder and what to do: 1 (cannot), 2 (refused). */
typedef struct cli_out_lock {
    char path[1100];
    int held;
} cli_out_lock;
int cli_out_claim(const char *who, const char *dir, const char *const *run_files, int continuing, int overwrite,
                  cli_out_lock *lock);
void cli_out_release(cli_out_lock *lock);
/* Whether file lies in dir (both existing): a resume from dir's own checkpoint. */
int cli_same_dir(const char *dir, const char *file);
/* Whether a step's loss is a number; if not, says the run diverged (who: the command) */
int cli_loss_ok(const char *who, int64_t step, double loss);

/* SIGINT and SIGTERM while training: the first sets cli_stop_signal (the trainer finishes its
   step, writes a checkpoint and exits 128 + the signal), and says so on stderr; a second one
   ends the process at once (exit 128 + the signal). cli_stop_restore puts the old handlers back. */
extern volatile sig_atomic_t cli_stop_signal;
void cli_stop_catch(void);
void cli_stop_restore(void);
const char *cli_signal_name(int sig);

/* Parses a command's argv (argv[0] is its name) with getopt_long: on(opt, optarg, state)
   for each option (non-zero: a bad value, already reported); -h and --help print usage and
   return 1 (the caller exits 0); an unknown option, a missing value or more than max_pos
   positional arguments (collected into pos, *npos of them) are reported naming the option,
   and return 2. 0 when all is well. */
int cli_parse(int argc, char **argv, const char *cmd, const struct option *opts, const char *usage,
              int (*on)(int opt, const char *arg, void *state), void *state, char **pos, int max_pos, int *npos);

/* Data-parallel runs (mpirun -np N): cli_dist_begin joins the ranks (0, or -1 reported);
   cli_dist_end(who, rc) leaves them, or, when this rank failed (rc != 0) with others
   running, ends them all (MPI_Abort) so that none waits forever in a collective. */
int cli_dist_begin(const char *who);
int cli_dist_end(const char *who, int rc);
/* Whether the global batch splits evenly over the ranks (0); else says so, 1. */
int cli_dist_check_batch(const char *who, int64_t batch);
/* FNV-1a over `bytes` bytes, from h (CLI_FNV1A_START at first): the replicas' check, the
   settings' checksums of a run's data */
#define CLI_FNV1A_START 0xcbf29ce484222325ull
uint64_t cli_fnv1a(uint64_t h, const void *data, size_t bytes);
/* A run's settings, named, as every rank has them (integers up to 2^53 and floats are exact as
   doubles). Every rank calls it with the same names: 0 where every rank's values are rank 0's
   (bit for bit); else each rank that differs names its first such setting, and every rank
   returns 1 (before any training, which would otherwise part the ranks and be found out only
   at the end). */
typedef struct cli_setting {
    const char *name;
    double value;
} cli_setting;
int cli_dist_check_same(const char *who, int n, const cli_setting *settings);
/* The end of a data-parallel run (nothing on one rank): whether every rank holds the same
   tensors (FNV-1a of their values; rank 0 prints the check), then the gradient all-reduce's
   time per step on rank 0. 0 when the replicas agree; else reported, nonzero. */
int cli_dist_finish(const char *who, wgml_context *ctx, int n, wgml_tensor *const *tensors);

/* Takes `--runtime NAME` (or --runtime=NAME) out of argv, wherever it is, into WGML_RUNTIME,
   which every context of the command then reads: every command has the option. -1 (after a
   message) for a name that is no runtime or a missing one. */
int cli_take_runtime(int *argc, char **argv);
/* Generation (wgml gpt sample, wgml bench decode) on wgpu-native where no runtime is named (no
   --runtime, WGML_RUNTIME unset): its decode launches ran faster than Dawn's, which the library's
   automatic choice takes on adapters with matrix units. --runtime auto keeps the library's choice. */
void cli_generation_runtime(void);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_gpt(int argc, char **argv);

/* wgml bench's results table (tools/bench.c) and its GPT part (tools/bench_gpt.c) */
void bench_report(const char *name, double seconds, double value, const char *unit);
/* Whether the comma list in environment variable env (unset or empty: everything) names
   name: one of its words equal to it, or with part, contained in it */
bool bench_listed(const char *env, const char *name, bool part);
/* A context of its own for a part of the bench (NULL, with a message on stderr naming `who`,
   when none can be made), its adapter's info, and whether the adapter is a discrete GPU's
   (not a CPU's, nor --quick): the sizes to bench at. */
struct wgml_context;
struct wgml_adapter_info;
struct wgml_context *bench_context(const char *who, int quick, struct wgml_adapter_info *info, int *big);
void bench_gpt(int quick, int decode_only); /* decode_only: generation rows alone (wgml bench decode) */
/* wgml bench train: the training rows alone, of the nanoGPT setup and GPT-2 small's shape */
void bench_train(int quick);
/* generation through the decode plan (tools/bench_decode.c): the character GPT g, and the
   Qwen3-0.6B shape in a context of its own */
struct wgml_gpt;
void bench_decode_char(struct wgml_gpt *g, int quick);
void bench_decode_qwen(int quick);

#endif
