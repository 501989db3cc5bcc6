/* cli_gold.c - placeholder until the gold-set layer lands (issue 3). */
#include "harness.h"

int k25_cmd_gold(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "k25 gold: not built yet\n");
    return 2;
}
