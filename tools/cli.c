/* The command line's one parser (tools/cli.h). */
#include "tools/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
    while (!e && (n = getline(&line, &cap, in)) > 0) {
        int keep;
        if (rows++ == 0) {
            keep = (size_t)n == hlen + 1 && strncmp(line, header, hlen) == 0 && line[hlen] == '\n';
            if (!keep) {
                other = 1;
                break;
            }
        } else {
            char *end;
            long long step = strtoll(line, &end, 10);
            /* a row cut short by a crash (no newline) is dropped too */
            keep = end != line && *end == ',' && step <= resume_step && line[n - 1] == '\n';
        }
        if (keep && fputs(line, out) < 0) e = errno;
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
