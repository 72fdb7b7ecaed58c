/*
 * gradcheck: the command (see gradcheck_cmd.h); the check is in
 * plugin/gradref/gradcheck.c.
 */
#include "gradcheck_cmd.h"
#include "engine.h"
#include "gradcheck.h"
#include "flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sdnn_cmd_gradcheck(int argc, char **argv)
{
    sdnn_gradcheck_opts o = SDNN_GRADCHECK_OPTS_INIT;
    long seed = (long)o.seed;
    char engines[128];
    snprintf(engines, sizeof engines, "what runs the step: %s (%s)", sdnn_gradcheck_engines(),
             o.engine);
    const sdnn_flag flags[] = {
        {.name = "-engine", .kind = SDNN_FLAG_STR, .dst = &o.engine, .meta = "NAME",
         .help = engines},
        {.name = "-samples", .kind = SDNN_FLAG_INT, .dst = &o.samples, .lo = 1, .hi = 1000000,
         .meta = "N", .help = "elements checked per weights/biases/scales tensor (8)"},
        {.name = "-seed", .kind = SDNN_FLAG_LONG, .dst = &seed, .lo = 0, .hi = 0x7fffffff,
         .meta = "S", .help = "weights, batch and dropout draws (1)"},
        {.name = "-eps", .kind = SDNN_FLAG_DOUBLE, .dst = &o.eps, .lo = 0, .lo_open = 1, .hi = 1,
         .hi_open = 1, .meta = "E", .help = "stage 1's finite-difference step, in double (1e-5)"},
    };
    const sdnn_command cmd = {
        .name = "scalednn gradcheck", .args = "CFG", .min_pos = 1, .max_pos = 1, .flags = flags,
        .nflags = (int)(sizeof flags / sizeof flags[0]),
    };
    const char *pos[1] = {0};
    int np;
    int st = sdnn_args_parse(&cmd, argc, argv, 1, pos, &np);
    if (st != SDNN_ARGS_OK) return st == SDNN_ARGS_HELP ? 0 : 2;
    const char *cfg = pos[0];
    o.seed = (uint64_t)seed;
    if (sdnn_gradcheck_engine_check(o.engine) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 2;
    }
    sdnn_gradcheck_report r;
    if (sdnn_gradcheck_file(cfg, &o, &r) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 1;
    }
    char on[256] = "";
    const sdnn_engine_ops *eng = sdnn_engine_find(o.engine);
    if (eng && eng->describe_device) eng->describe_device(0, on, sizeof on); /* "simulated" there */
    printf("gradcheck %s: engine %s%s%s%s, %d samples per tensor, eps %g, seed %llu\n", cfg,
           o.engine, on[0] ? " (" : "", on, on[0] ? ")" : "", o.samples, o.eps,
           (unsigned long long)o.seed);
    sdnn_gradcheck_print(&r, stdout);
    int failed = r.failed;
    sdnn_gradcheck_report_free(&r);
    return failed ? 1 : 0;
}
