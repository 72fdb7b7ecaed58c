/*
 * flags: see flags.h.
 */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sdnn_flag_str(int argc, char **argv, const char *name, const char **val)
{
    *val = NULL;
    for (int i = 0; i < argc && argv[i]; ++i) {
        if (strcmp(argv[i], name) != 0) continue;
        if (i + 1 >= argc || !argv[i + 1] || !argv[i + 1][0]) {
            fprintf(stderr, "error: %s needs a value (it is the last argument)\n", name);
            return -1;
        }
        *val = argv[i + 1];
    }
    return 0;
}

/* Decimal only: strtod would also take "0x10", "inf" and "nan". */
static int decimal(const char *s)
{
    for (const char *p = s; *p; ++p)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    return *s != '\0';
}

int sdnn_flag_long(int argc, char **argv, const char *name, long def, long lo, long hi, long *out)
{
    const char *v;
    *out = def;
    if (sdnn_flag_str(argc, argv, name, &v)) return -1;
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "error: %s %s: expected an integer >= %ld and <= %ld\n", name, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int sdnn_flag_double(int argc, char **argv, const char *name, double def, double lo, int lo_open,
                     double hi, double *out)
{
    const char *v;
    *out = def;
    if (sdnn_flag_str(argc, argv, name, &v)) return -1;
    if (!v) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!decimal(v) || end == v || *end != '\0' || errno == ERANGE || !isfinite(x) ||
        (lo_open ? !(x > lo) : !(x >= lo)) || !(x <= hi)) {
        fprintf(stderr, "error: %s %s: expected a number %s %g and <= %g\n", name, v,
                lo_open ? ">" : ">=", lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int sdnn_flag_gpus(const char *list)
{
    char seen[1024] = {0};
    int n = 0;
    const char *p = list;
    if (!p || !*p) goto bad;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1023 || (*p < '0' || *p > '9')) goto bad;
        if (seen[v]) {
            fprintf(stderr, "error: -gpus %s: id %ld is listed twice (each device once)\n", list, v);
            return -1;
        }
        seen[v] = 1;
        ++n;
        if (*end == '\0') return n;
        if (*end != ',') goto bad;
        p = end + 1;
    }
bad:
    fprintf(stderr, "error: -gpus %s: expected a comma-separated list of ids, e.g. 0,1,2,3\n",
            list ? list : "");
    return -1;
}
