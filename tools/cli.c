/* The command line's one parser, and what the commands share (tools/cli.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "tools/cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_parse(int argc, char **argv, const char *cmd, const struct option *opts, const char *usage,
              int (*on)(int opt, const char *arg, void *state), void *state, char **pos, int max_pos, int *npos)
{
    /* the short options: -h, and any option whose val is a printable letter */
    char shorts[64] = ":h";
    size_t ns = strlen(shorts);
    for (const struct option *o = opts; o->name && ns + 2 < sizeof shorts; o++)
        if (o->val > ' ' && o->val < 127 && o->val != 'h') {
            shorts[ns++] = (char)o->val;
            if (o->has_arg == required_argument) shorts[ns++] = ':';
        }
    shorts[ns] = 0;
    /* an abbreviation of two options (--st: --steps, --stop-at) named as such; one of a single
       option is that option (GNU's getopt_long: --epoch 1 is --epochs 1) */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *a = argv[i];
        if (a[0] != '-') continue;
        if (a[1] != '-') { /* -x VALUE: the value is no option */
            const char *c = a[1] ? strchr(shorts, a[1]) : NULL;
            if (c && c[1] == ':' && !a[2]) i++;
            continue;
        }
        size_t len = strcspn(a + 2, "=");
        const struct option *exact = NULL, *first = NULL, *second = NULL;
        for (const struct option *o = opts; o->name; o++) {
            if (strncmp(o->name, a + 2, len)) continue;
            if (strlen(o->name) == len) exact = o;
            else if (!first) first = o;
            else if (!second) second = o;
        }
        if (!exact && first && !second) exact = first;
        if (exact && exact->has_arg == required_argument && !a[2 + len]) i++; /* its value follows */
        if (!exact && second) {
            fprintf(stderr, "wgml %s: ambiguous option '%.*s' (--%s, --%s, ...)\n", cmd, (int)(len + 2), a, first->name,
                    second->name);
            return 2;
        }
    }
    optind = 0; /* GNU: start afresh (a second command in one process) */
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 1;
        }
        if (opt == '?') {
            if (optopt) fprintf(stderr, "wgml %s: unknown option '-%c' (see --help)\n", cmd, optopt);
            else fprintf(stderr, "wgml %s: unknown option '%s' (see --help)\n", cmd, argv[optind - 1]);
            return 2;
        }
        if (opt == ':') {
            fprintf(stderr, "wgml %s: option '%s' needs a value\n", cmd, argv[optind - 1]);
            return 2;
        }
        if (on(opt, optarg, state)) return 2;
    }
    int n = 0;
    for (; optind < argc; optind++) {
        if (n == max_pos) {
            fprintf(stderr, "wgml %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
            return 2;
        }
        pos[n++] = argv[optind];
    }
    if (npos) *npos = n;
    return 0;
}

int cli_make_dirs(const char *path)
{
    char p[1024];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cli_message(wgml_context *ctx, wgml_status st)
{
    const char *m = ctx ? wgml_error_message(ctx) : "";
    return m && m[0] ? m : wgml_status_name(st);
}

FILE *cli_metrics_open(const char *path, const char *header, int64_t resume_step, char *err, size_t errlen)
{
    FILE *in = resume_step >= 0 ? fopen(path, "r") : NULL, *out;
    if (!in && resume_step >= 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    if (!in) { /* a new file */
        if (!(out = fopen(path, "w")) || fprintf(out, "%s\n", header) < 0) {
            snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
            if (out) fclose(out);
            return NULL;
        }
        return out;
    }
    /* the rows to keep go to a temporary file that then replaces the file, so that a crash
       here leaves the old file whole */
    char tmp[1100];
    out = snprintf(tmp, sizeof tmp, "%s.tmp", path) < (int)sizeof tmp ? fopen(tmp, "w") : (errno = ENAMETOOLONG, NULL);
    char *line = NULL;
    size_t cap = 0, hlen = strlen(header);
    ssize_t n;
    int rows = 0, other = 0, made = out != NULL, e = made ? 0 : errno;
    int added = 0; /* columns a newer version appended to an older file's header: its rows get them empty */
    while (!e && (n = getline(&line, &cap, in)) > 0) {
        int keep;
        if (rows++ == 0) {
            size_t old = (size_t)n - 1;
            keep = line[old] == '\n' && old <= hlen && strncmp(line, header, old) == 0 && (old == hlen || header[old] == ',');
            if (!keep) {
                other = 1;
                break;
            }
            for (size_t k = old; k < hlen; k++) added += header[k] == ',';
            if (added > 16) { /* more than the row padding below holds */
                other = 1;
                break;
            }
            if (fprintf(out, "%s\n", header) < 0) e = errno;
            continue;
        } else {
            char *end;
            long long step = strtoll(line, &end, 10);
            /* a row cut short by a crash (no newline) is dropped too */
            keep = end != line && *end == ',' && step <= resume_step && line[n - 1] == '\n';
        }
        if (keep && (fprintf(out, "%.*s%.*s\n", (int)n - 1, line, added, ",,,,,,,,,,,,,,,,") < 0)) e = errno;
    }
    if (!e && ferror(in)) e = EIO;
    if (!e && !other && rows == 0 && fprintf(out, "%s\n", header) < 0) e = errno; /* an empty file: begun afresh */
    free(line);
    fclose(in);
    if (out && fclose(out) && !e) e = errno;
    if (!e && !other && rename(tmp, path)) e = errno;
    if (e || other) {
        if (made) remove(tmp);
        if (other)
            snprintf(err, errlen, "%s does not begin with the header '%s' (another command's or version's metrics): move it "
                                  "away or give another --out", path, header);
        else snprintf(err, errlen, "cannot rewrite %s: %s", path, strerror(e));
        return NULL;
    }
    if (!(out = fopen(path, "a"))) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return out;
}

/* ---------------------------------------------------------------- the WebGPU runtime */

int cli_take_runtime(int *argc, char **argv)
{
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        const char *v = NULL;
        int used = 0;
        if (!strcmp(argv[i], "--runtime")) v = i + 1 < *argc ? argv[i + 1] : "", used = i + 1 < *argc ? 2 : 1;
        else if (!strncmp(argv[i], "--runtime=", 10)) v = argv[i] + 10, used = 1;
        else continue;
        if (strcmp(v, "auto") && strcmp(v, "wgpu-native") && strcmp(v, "dawn")) {
            fprintf(stderr, "wgml: --runtime takes auto, wgpu-native or dawn, not '%s'\n", v);
            return -1;
        }
        setenv("WGML_RUNTIME", v, 1);
        for (int j = i; j + used <= *argc; j++) argv[j] = argv[j + used]; /* argv[argc] is NULL */
        *argc -= used;
        i--;
    }
    return 0;
}

void cli_generation_runtime(void)
{
    /* (H200, docs/MEASUREMENTS.md: the batch-1 plan that wgml_gpt_generate takes, 6,138 tokens/s
       against Dawn's 5,680, and a third of Dawn's host time a step) */
    const char *e = getenv("WGML_RUNTIME");
    if (!e || !*e) setenv("WGML_RUNTIME", "wgpu-native", 1);
}

/* The index of column `name` in a CSV header line, or -1. */
static int column_of(const char *header, const char *name)
{
    size_t len = strlen(name);
    int col = 0;
    for (const char *p = header; *p; col++) {
        size_t w = strcspn(p, ",\n");
        if (w == len && !strncmp(p, name, len)) return col;
        p += w;
        if (*p != ',') break;
        p++;
    }
    return -1;
}

double cli_metrics_last_elapsed(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *line = NULL, *first = NULL, *last = NULL;
    size_t cap = 0;
    double v = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!first) first = strdup(line);
        else free(last), last = strdup(line);
    }
    int col = first ? column_of(first, "elapsed_s") : -1;
    char *field = last;
    for (int k = 0; field && k < col; k++) {
        field = strchr(field, ',');
        if (field) field++;
    }
    if (col >= 0 && field) {
        char *end;
        double e = strtod(field, &end);
        if (end != field && e >= 0 && e < 1e12) v = e;
    }
    free(line), free(first), free(last);
    fclose(f);
    return v;
}

/* ---------------------------------------------------------------- the output folder */

/* Whether process pid is running (a process we may not signal is running too). */
static int alive(long pid)
{
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM)) return 0;
    /* a killed run not yet reaped by its parent (a zombie, 'Z' in /proc) holds nothing */
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = 0;
    const char *paren = strrchr(stat, ')'); /* the state follows the command's name in parentheses */
    return !(paren && paren[1] == ' ' && paren[2] == 'Z');
}

static int take_lock(const char *who, const char *dir, cli_out_lock *lock)
{
    snprintf(lock->path, sizeof lock->path, "%s/.wgml.lock", dir);
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(lock->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            int ok = write(fd, pid, (size_t)n) == n;
            close(fd);
            if (!ok) {
                fprintf(stderr, "%s: cannot write %s: %s\n", who, lock->path, strerror(errno));
                unlink(lock->path);
                return 1;
            }
            lock->held = 1;
            return 0;
        }
        if (errno != EEXIST) {
            fprintf(stderr, "%s: cannot create %s: %s\n", who, lock->path, strerror(errno));
            return 1;
        }
        long pid = 0;
        FILE *f = fopen(lock->path, "r");
        if (f) {
            if (fscanf(f, "%ld", &pid) != 1) pid = 0;
            fclose(f);
        }
        if (alive(pid)) {
            fprintf(stderr, "%s: %s is in use by another run (process %ld holds %s): wait for it, or give another --out "
                            "(if that process is no run of wgml, remove the lock file)\n", who, dir, pid, lock->path);
            return 2;
        }
        /* its process is gone (killed, or a second Ctrl-C): the lock is stale */
        if (unlink(lock->path) && errno != ENOENT) {
            fprintf(stderr, "%s: cannot remove the stale lock %s: %s\n", who, lock->path, strerror(errno));
            return 1;
        }
    }
    fprintf(stderr, "%s: cannot take %s: another process keeps taking it\n", who, lock->path);
    return 2;
}

/* Removes NAME.tmp.PID (PID no longer running) and NAME.tmp: what a killed atomic write left. */
static void remove_stale_temporaries(const char *who, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[2048];
    while ((e = readdir(d))) {
        const char *tmp = strstr(e->d_name, ".tmp");
        if (!tmp || tmp == e->d_name) continue;
        char *end = NULL;
        long pid = 0;
        if (tmp[4] == '.') pid = strtol(tmp + 5, &end, 10);
        int stale = tmp[4] == '.' ? end != tmp + 5 && *end == 0 && !alive(pid) : tmp[4] == 0 && strcmp(e->d_name, "metrics.csv.tmp") == 0;
        if (!stale) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (remove(path) == 0) fprintf(stderr, "%s: removed %s (left by an interrupted write)\n", who, path);
    }
    closedir(d);
}

int cli_same_dir(const char *dir, const char *file)
{
    char *d = realpath(dir, NULL), *f = realpath(file, NULL);
    char *slash = f ? strrchr(f, '/') : NULL;
    int same = 0;
    if (d && slash) {
        *slash = 0;
        same = strcmp(d, slash == f ? "/" : f) == 0;
    }
    free(d), free(f);
    return same;
}

/* Whether a run file holds a run: a metrics file only with a row past its header (a run that
   failed at its first step leaves the header alone, and the folder stays free) */
static int holds_run(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    size_t n = strlen(path);
    if (n < 4 || strcmp(path + n - 4, ".csv")) return 1;
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int c, lines = 0, after = 0;
    while ((c = fgetc(f)) != EOF && !after) {
        if (lines) after = 1;
        if (c == '\n') lines++;
    }
    fclose(f);
    return after;
}

int cli_out_claim(const char *who, const char *dir, const char *const *run_files, int continuing, int overwrite,
                  cli_out_lock *lock)
{
    memset(lock, 0, sizeof *lock);
    if (cli_make_dirs(dir)) {
        fprintf(stderr, "%s: cannot create %s: %s\n", who, dir, strerror(errno));
        return 1;
    }
    int rc = take_lock(who, dir, lock);
    if (rc) return rc;
    remove_stale_temporaries(who, dir);
    if (continuing) return 0;
    char path[1100];
    if (overwrite) { /* the old run goes now, not at the first checkpoint */
        for (const char *const *name = run_files; *name; name++) snprintf(path, sizeof path, "%s/%s", dir, *name), remove(path);
        return 0;
    }
    char held[512] = "";
    size_t n = 0;
    for (const char *const *name = run_files; *name; name++) {
        snprintf(path, sizeof path, "%s/%s", dir, *name);
        if (holds_run(path) && n < sizeof held)
            n += (size_t)snprintf(held + n, sizeof held - n, "%s%s", n ? ", " : "", *name);
    }
    if (!n) return 0;
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, run_files[0]);
    if (stat(path, &sb) == 0)
        fprintf(stderr, "%s: %s holds a run (%s): continue it with --resume %s, write elsewhere with --out DIR, or "
                        "replace it with --overwrite\n", who, dir, held, path);
    else /* (a run that ended before its first checkpoint, e.g. killed under mpirun) */
        fprintf(stderr, "%s: %s holds a run (%s) that wrote no checkpoint, so it cannot be continued: write elsewhere "
                        "with --out DIR, or replace it with --overwrite\n", who, dir, held);
    cli_out_release(lock);
    return 2;
}

int cli_loss_ok(const char *who, int64_t step, double loss)
{
    if (isfinite(loss)) return 1;
    fprintf(stderr, "\n%s: the loss of step %lld is %g: training diverged (a lower --lr, or --clip); the last checkpoint is "
                    "kept as it was\n", who, (long long)step, loss);
    return 0;
}

void cli_out_release(cli_out_lock *lock)
{
    if (lock && lock->held) unlink(lock->path);
    if (lock) lock->held = 0;
}

/* ---------------------------------------------------------------- stopping on a signal */

volatile sig_atomic_t cli_stop_signal;
static struct sigaction old_int, old_term;
static int caught;

static void on_stop(int sig)
{
    /* (async-signal-safe: a flag, write(2) and _exit) */
    if (cli_stop_signal) _exit(128 + sig);
    cli_stop_signal = sig;
    static const char msg[] = "\nstopping after this step, with a checkpoint (signal again to stop at once)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

void cli_stop_catch(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    cli_stop_signal = 0;
    /* SIGINT ignored when we started (a background job of a script, nohup) stays ignored */
    sigaction(SIGINT, NULL, &old_int);
    if (old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, &old_term);
    caught = 1;
}

void cli_stop_restore(void)
{
    if (!caught) return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    caught = 0;
}

const char *cli_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* ---------------------------------------------------------------- data-parallel runs */

int cli_dist_begin(const char *who)
{
    if (wgml_dist_init() == WGML_OK) {
        /* one GPU per rank of a machine where there are several (wgml_context_desc's
           adapter_index); WGML_ADAPTER_INDEX given by the user wins */
        if (wgml_dist_size() > 1 && !getenv("WGML_ADAPTER_INDEX")) {
            char v[16];
            snprintf(v, sizeof v, "%d", wgml_dist_local_rank());
            setenv("WGML_ADAPTER_INDEX", v, 1);
        }
        return 0;
    }
    fprintf(stderr, "%s: %s\n", who, wgml_dist_error_message());
    return -1;
}

int cli_dist_end(const char *who, int rc)
{
    if (rc != 0 && wgml_dist_size() > 1) {
        fprintf(stderr, "%s: rank %d of %d failed: stopping every rank\n", who, wgml_dist_rank(), wgml_dist_size());
        fflush(stderr);
        wgml_dist_abort(rc);
    }
    if (wgml_dist_finalize() && !rc) {
        fprintf(stderr, "%s: %s\n", who, wgml_dist_error_message());
        rc = 1;
    }
    return rc;
}

uint64_t cli_fnv1a(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *b = data;
    for (size_t k = 0; k < bytes; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    return h;
}

static int check_replicas(const char *who, wgml_context *ctx, int n, wgml_tensor *const *tensors)
{
    uint64_t h = CLI_FNV1A_START;
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)wgml_tensor_numel(tensors[i]);
        float *v = malloc(len * sizeof *v);
        wgml_status st = v ? wgml_tensor_read(tensors[i], v, len) : WGML_ERROR_OUT_OF_MEMORY;
        if (st) {
            fprintf(stderr, "%s: reading the parameters: %s\n", who, cli_message(ctx, st));
            free(v);
            return -1;
        }
        h = cli_fnv1a(h, v, len * sizeof *v);
        free(v);
    }
    /* rank 0's hash to all; then how many ranks differ from it */
    uint64_t root = h;
    double differ = 0;
    if (wgml_dist_broadcast_host(&root, sizeof root) == WGML_OK) differ = root != h;
    if (wgml_dist_allreduce_host(&differ, 1, WGML_REDUCE_SUM)) {
        fprintf(stderr, "%s: %s\n", who, wgml_dist_error_message());
        return -1;
    }
    if (differ > 0) {
        if (root != h) fprintf(stderr, "%s: rank %d's parameters (fnv1a %016llx) differ from rank 0's (%016llx)\n", who,
                               wgml_dist_rank(), (unsigned long long)h, (unsigned long long)root);
        return -1;
    }
    if (wgml_dist_rank() == 0)
        printf("replicas: parameters identical on %d ranks (fnv1a %016llx)\n", wgml_dist_size(), (unsigned long long)h);
    return 0;
}

/* Every rank's waits, one line on rank 0: the rank that waits least for the others is the one
   they wait for (a slower GPU, its bus, its host). Every rank calls it. */
static void per_rank_waits(const wgml_dist_stats *s, double k)
{
    int n = wgml_dist_size(), r = wgml_dist_rank();
    double *w = calloc((size_t)n * 3, sizeof *w);
    if (!w) return;
    w[3 * r] = s->rank_wait_seconds * k, w[3 * r + 1] = s->exposed_seconds * k, w[3 * r + 2] = s->gpu_wait_seconds * k;
    if (wgml_dist_allreduce_host(w, (size_t)n * 3, WGML_REDUCE_SUM) == WGML_OK && r == 0) {
        printf("per rank, ms/step waiting for the other ranks / exposed / waiting after the backward pass was submitted:");
        for (int i = 0; i < n; i++) printf("%s rank %d %.2f / %.2f / %.2f", i ? ";" : "", i, w[3 * i], w[3 * i + 1], w[3 * i + 2]);
        printf("\n");
    }
    free(w);
}

/* Rank 0's all-reduce times a step */
static void print_totals(const wgml_dist_stats *s, double k)
{
    char how[64] = "MPI";
    if (s->shared_memory)
        snprintf(how, sizeof how, "shared memory%s (%d thread%s a rank)", s->shared_memory == 2 ? " mapped by the GPU" : "",
                 s->shared_memory_threads, s->shared_memory_threads == 1 ? "" : "s");
    /* f16: the gradients travelled as 2 bytes a value */
    const char *as = s->bytes < 4 * s->values ? "f16" : "f32";
    if (s->buckets) { /* overlapped with the backward pass */
        printf("gradient all-reduce on %d ranks, overlapped: %.2f ms/step exposed after the last bucket reached the host "
               "(%.1f buckets, %s %.2f ms in its thread of which %.2f waiting for the other ranks, write-back %.2f); %.2f MB a step as %s; %.2f ms/step waiting "
               "after the backward pass was submitted, %.2f ms/step from then to the next step's first bucket\n",
               wgml_dist_size(), s->exposed_seconds * k, (double)s->buckets / (double)s->calls, how, s->reduce_seconds * k,
               s->rank_wait_seconds * k, s->copy_in_seconds * k, (double)s->bytes / (double)s->calls / 1e6, as, s->gpu_wait_seconds * k,
               s->between_seconds * k);
        return;
    }
    printf("gradient all-reduce on %d ranks: %.2f ms/step (copy-out %.2f, %s %.2f, copy-in %.2f), %.2f MB a step as %s; "
           "%.2f ms/step waiting for the GPU's gradients\n",
           wgml_dist_size(), (s->copy_out_seconds + s->reduce_seconds + s->copy_in_seconds) * k, s->copy_out_seconds * k,
           how, s->reduce_seconds * k, s->copy_in_seconds * k, (double)s->bytes / (double)s->calls / 1e6, as,
           s->gpu_wait_seconds * k);
}

static void report(void)
{
    wgml_dist_stats s;
    wgml_dist_stats_get(&s);
    if (!s.calls) return; /* (the same on every rank: one all-reduce a step) */
    double k = 1e3 / (double)s.calls;
    if (wgml_dist_rank() == 0) print_totals(&s, k);
    if (s.buckets) per_rank_waits(&s, k);
}

int cli_dist_check_batch(const char *who, int64_t batch)
{
    if (batch % wgml_dist_size() == 0) return 0;
    fprintf(stderr, "%s: batch %lld (the global batch) does not split evenly over %d ranks\n", who, (long long)batch,
            wgml_dist_size());
    return 1;
}

int cli_dist_check_same(const char *who, int n, const cli_setting *settings)
{
    if (wgml_dist_size() < 2 || n <= 0) return 0;
    double *root = malloc((size_t)n * sizeof *root);
    if (!root) return fprintf(stderr, "%s: out of host memory\n", who), 1;
    for (int i = 0; i < n; i++) root[i] = settings[i].value;
    int first = -1;
    if (wgml_dist_broadcast_host(root, (size_t)n * sizeof *root) == WGML_OK)
        for (int i = 0; i < n && first < 0; i++)
            if (memcmp(&root[i], &settings[i].value, sizeof root[i]) != 0) first = i;
    if (first >= 0) {
        char mine[64], theirs[64]; /* (whole numbers whole, others as %g) */
        double v[2] = {settings[first].value, root[first]};
        char *out[2] = {mine, theirs};
        for (int k = 0; k < 2; k++)
            snprintf(out[k], sizeof mine, fabs(v[k]) < 9e15 && v[k] == (double)(int64_t)v[k] ? "%.0f" : "%g", v[k]);
        fprintf(stderr, "%s: rank %d was started with other settings than rank 0: %s %s here, %s on rank 0 (every rank "
                        "needs the same options and data)\n", who, wgml_dist_rank(), settings[first].name, mine, theirs);
    }
    /* (said before the count's collective: no rank can end the job before this one has spoken) */
    double differ = first >= 0;
    if (wgml_dist_allreduce_host(&differ, 1, WGML_REDUCE_SUM)) {
        fprintf(stderr, "%s: %s\n", who, wgml_dist_error_message());
        free(root);
        return 1;
    }
    if (differ > 0 && first < 0 && wgml_dist_rank() == 0)
        fprintf(stderr, "%s: %g rank(s) were started with other settings than rank 0 (their messages name them)\n", who, differ);
    free(root);
    return differ > 0;
}

int cli_dist_finish(const char *who, wgml_context *ctx, int n, wgml_tensor *const *tensors)
{
    if (wgml_dist_size() < 2) return 0;
    int rc = check_replicas(who, ctx, n, tensors);
    if (!rc) report();
    return rc;
}
