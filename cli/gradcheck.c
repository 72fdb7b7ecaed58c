/*
 * gradcheck: the command (see gradcheck_cmd.h); the check is in
 * plugin/gradcheck.c.
 */
#include "gradcheck_cmd.h"
#include "gradcheck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: darknet scalednn gradcheck CFG [-engine %s] [-samples N] "
                    "[-seed S] [-eps E]\n"
                    "  -samples N  elements checked per weights/biases/scales tensor (8)\n"
                    "  -seed S     weights, batch and dropout draws (1)\n"
                    "  -eps E      finite-difference step (1e-3)\n",
            sdnn_gradcheck_engines());
    return 2;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "gradcheck: %s %s: expected an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int sdnn_cmd_gradcheck(int argc, char **argv)
{
    sdnn_gradcheck_opts o = SDNN_GRADCHECK_OPTS_INIT;
    const char *cfg = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (cfg) {
                fprintf(stderr, "gradcheck: one cfg only (%s, then %s)\n", cfg, a);
                return usage();
            }
            cfg = a;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gradcheck: %s needs a value\n", a);
            return usage();
        }
        const char *v = argv[++i];
        long x;
        if (strcmp(a, "-engine") == 0) {
            o.engine = v;
        } else if (strcmp(a, "-samples") == 0) {
            if (parse_long(a, v, 1, 1000000, &x)) return 2;
            o.samples = (int)x;
        } else if (strcmp(a, "-seed") == 0) {
            if (parse_long(a, v, 0, 0x7fffffffL, &x)) return 2;
            o.seed = (uint64_t)x;
        } else if (strcmp(a, "-eps") == 0) {
            char *end = NULL;
            errno = 0;
            o.eps = strtod(v, &end);
            if (end == v || *end || errno || !(o.eps > 0) || !(o.eps < 1)) {
                fprintf(stderr, "gradcheck: -eps %s: expected a step > 0 and < 1\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "gradcheck: unknown option %s\n", a);
            return usage();
        }
    }
    if (!cfg) return usage();
    if (sdnn_gradcheck_engine_check(o.engine) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 2;
    }
    sdnn_gradcheck_report r;
    if (sdnn_gradcheck_file(cfg, &o, &r) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 1;
    }
    printf("gradcheck %s: engine %s, %d samples per tensor, eps %g, seed %llu\n", cfg, o.engine,
           o.samples, o.eps, (unsigned long long)o.seed);
    sdnn_gradcheck_print(&r, stdout);
    int failed = r.failed;
    sdnn_gradcheck_report_free(&r);
    return failed ? 1 : 0;
}
