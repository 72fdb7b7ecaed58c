/*
 * ./darknet: the scalednn front-end, command-line compatible with stock
 * Darknet for the commands it has.  The only place that exits.
 */
#include "bench_comm.h"
#include "commands.h"
#include "gradcheck_cmd.h"
#include "plan_cmd.h"
#include "config.h"

#include <stdio.h>
#include <string.h>

/* The commands; each prints its own flags from its flag table (-h). */
static int usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s detector train|test|map|valid|recall|calc_anchors ...\n"
            "       %s classifier train|valid ...\n"
            "       %s scalednn gen-shapes|fmnist|bench-comm|plan|simulate|gradcheck ...\n"
            "       %s scalednn keys       (the [scalednn] cfg keys)\n"
            "Each command takes -h for its arguments and flags (-flag value, Darknet's style).\n",
            prog, prog, prog, prog);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage(argv[0]);
    if (strcmp(argv[1], "detector") == 0) return sdnn_cmd_detector(argc - 2, argv + 2);
    if (strcmp(argv[1], "classifier") == 0) return sdnn_cmd_classifier(argc - 2, argv + 2);
    if (strcmp(argv[1], "scalednn") == 0 && argc >= 3) {
        if (strcmp(argv[2], "gen-shapes") == 0) return sdnn_cmd_gen_shapes(argc - 2, argv + 2);
        if (strcmp(argv[2], "fmnist") == 0) return sdnn_cmd_fmnist(argc - 2, argv + 2);
        if (strcmp(argv[2], "bench-comm") == 0) return sdnn_cmd_bench_comm(argc - 2, argv + 2);
        if (strcmp(argv[2], "plan") == 0) return sdnn_cmd_plan(argc - 2, argv + 2);
        if (strcmp(argv[2], "simulate") == 0) return sdnn_cmd_simulate(argc - 2, argv + 2);
        if (strcmp(argv[2], "gradcheck") == 0) return sdnn_cmd_gradcheck(argc - 2, argv + 2);
        if (strcmp(argv[2], "keys") == 0 && argc == 3) {
            sdnn_config_print_keys(stdout);
            return 0;
        }
    }
    return usage(argv[0]);
}
