/* wgml train / wgml eval: filled in by the training issue. */
#include <stdio.h>

#include "tools/cli.h"

int cmd_train(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "wgml train: not built yet\n");
    return 2;
}

int cmd_eval(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "wgml eval: not built yet\n");
    return 2;
}
