/* The command line's one parser (tools/cli.h). */
#include "tools/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
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
