/* wgml bench: filled in by the engine and matmul issues. */
#include <stdio.h>

#include "tools/cli.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "wgml bench: not built yet\n");
    return 2;
}
