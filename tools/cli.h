/* Shared by the wgml tool's commands. */
#ifndef WGML_TOOLS_CLI_H
#define WGML_TOOLS_CLI_H

int cli_has_flag(int argc, char **argv, const char *flag);
const char *cli_option(int argc, char **argv, const char *name, const char *def);

int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_gpt(int argc, char **argv);

/* wgml bench's results table (tools/bench.c) and its GPT part (tools/bench_gpt.c) */
void bench_report(const char *name, double seconds, double value, const char *unit);
void bench_gpt(int quick);

#endif
