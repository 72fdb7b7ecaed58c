/*
 * flags: see flags.h.
 */
#include "flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Decimal only: strtod would also take "0x10", "inf" and "nan". */
static int decimal(const char *s)
{
    for (const char *p = s; *p; ++p)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    return *s != '\0';
}

static int is_help(const char *a)
{
    return strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0;
}

/* The flag of c called a (or, with c->dashdash, --name for -name). */
static const sdnn_flag *find_flag(const sdnn_command *c, const char *a)
{
    if (c->dashdash && a[0] == '-' && a[1] == '-' && a[2] != '\0') ++a;
    for (int k = 0; k < c->nflags; ++k)
        if (strcmp(c->flags[k].name, a) == 0 ||
            (c->flags[k].alias && strcmp(c->flags[k].alias, a) == 0))
            return &c->flags[k];
    return NULL;
}

static int bad(const sdnn_command *c, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "error: darknet %s: ", c->name);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    sdnn_args_usage(c, stderr);
    return SDNN_ARGS_BAD;
}

int sdnn_args_bad(const sdnn_command *c, const char *flag, const char *value, const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s %s: expected %s", flag, value ? value : "", what);
    return bad(c, "%s%s", msg, "");
}

/* Store value v of flag f; SDNN_ARGS_OK or SDNN_ARGS_BAD after a message. */
static int store(const sdnn_command *c, const sdnn_flag *f, const char *name, const char *v)
{
    char what[160];
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case SDNN_FLAG_SWITCH:
        *(int *)f->dst = 1;
        return SDNN_ARGS_OK;
    case SDNN_FLAG_STR:
        *(const char **)f->dst = v;
        return SDNN_ARGS_OK;
    case SDNN_FLAG_INT:
    case SDNN_FLAG_LONG: {
        long x = strtol(v, &end, 10);
        if (end == v || *end != '\0' || errno == ERANGE || x < (long)f->lo || x > (long)f->hi) {
            snprintf(what, sizeof what, "an integer >= %ld and <= %ld", (long)f->lo, (long)f->hi);
            return sdnn_args_bad(c, name, v, what);
        }
        if (f->kind == SDNN_FLAG_INT) *(int *)f->dst = (int)x;
        else *(long *)f->dst = x;
        return SDNN_ARGS_OK;
    }
    case SDNN_FLAG_DOUBLE:
    case SDNN_FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (!decimal(v) || end == v || *end != '\0' || errno == ERANGE || !isfinite(x) ||
            (f->lo_open ? !(x > f->lo) : !(x >= f->lo)) ||
            (f->hi_open ? !(x < f->hi) : !(x <= f->hi))) {
            snprintf(what, sizeof what, "a number %s %g and %s %g", f->lo_open ? ">" : ">=", f->lo,
                     f->hi_open ? "<" : "<=", f->hi);
            return sdnn_args_bad(c, name, v, what);
        }
        if (f->kind == SDNN_FLAG_FLOAT) *(float *)f->dst = (float)x;
        else *(double *)f->dst = x;
        return SDNN_ARGS_OK;
    }
    case SDNN_FLAG_CUSTOM:
        if (f->parse(name, v, f->dst) == 0) return SDNN_ARGS_OK;
        sdnn_args_usage(c, stderr);
        return SDNN_ARGS_BAD;
    case SDNN_FLAG_REFUSED:
        break;
    }
    return SDNN_ARGS_BAD;
}

/* "-flag VALUE" (or "-flag") as given at argv[i], for messages. */
static void as_given(char *buf, size_t cap, const sdnn_flag *f, int argc, char **argv, int i)
{
    int takes = f->kind != SDNN_FLAG_SWITCH;
    snprintf(buf, cap, "%s%s%s", argv[i], takes ? " " : "",
             takes && i + 1 < argc && argv[i + 1] ? argv[i + 1] : "");
}

int sdnn_args_parse(const sdnn_command *c, int argc, char **argv, int first, const char **pos,
                    int *npos)
{
    int np = 0;
    *npos = 0;
    /* Where each flag was first given (argv index), to refuse a repeat. */
    enum { MAX_FLAGS = 128 };
    int at[MAX_FLAGS];
    for (int k = 0; k < MAX_FLAGS; ++k) at[k] = -1;
    for (int i = first; i < argc; ++i) {
        const char *a = argv[i];
        if (!a) continue;
        if (a[0] != '-' || a[1] == '\0' || (a[1] >= '0' && a[1] <= '9')) {
            if (np == c->max_pos) return bad(c, "unexpected argument %s%s", a, "");
            pos[np++] = a;
            continue;
        }
        if (is_help(a)) {
            sdnn_args_usage(c, stdout);
            return SDNN_ARGS_HELP;
        }
        const sdnn_flag *f = find_flag(c, a);
        if (!f) return bad(c, "unknown flag %s%s (-h lists the flags)", a, "");
        if (f->kind == SDNN_FLAG_REFUSED)
            return bad(c, "%s cannot be used here: %s", a, f->help ? f->help : "not supported");
        int k = (int)(f - c->flags);
        if (k < MAX_FLAGS && at[k] >= 0) {
            char first_s[160], again[160];
            as_given(first_s, sizeof first_s, f, argc, argv, at[k]);
            as_given(again, sizeof again, f, argc, argv, i);
            char msg[640];
            snprintf(msg, sizeof msg, "%s is given twice (%s, then %s): Darknet takes the first, "
                     "so neither is guessed; give it once", f->name, first_s, again);
            return bad(c, "%s%s", msg, "");
        }
        if (k < MAX_FLAGS) at[k] = i;
        if (f->seen) *f->seen = 1;
        if (f->kind == SDNN_FLAG_SWITCH) {
            *(int *)f->dst = 1;
            continue;
        }
        if (i + 1 >= argc || !argv[i + 1] || !argv[i + 1][0])
            return bad(c, "%s needs a value (%s)", a, f->meta ? f->meta : "a value");
        int st = store(c, f, a, argv[++i]);
        if (st != SDNN_ARGS_OK) return st;
    }
    /* A flag that changes nothing without another: refused, not ignored. */
    for (int k = 0; k < c->nflags && k < MAX_FLAGS; ++k) {
        const sdnn_flag *f = &c->flags[k];
        if (!f->needs || at[k] < 0) continue;
        const sdnn_flag *g = find_flag(c, f->needs);
        int kg = g ? (int)(g - c->flags) : -1;
        if (kg >= 0 && kg < MAX_FLAGS && at[kg] >= 0) continue;
        char given[160], msg[480];
        as_given(given, sizeof given, f, argc, argv, at[k]);
        snprintf(msg, sizeof msg, "%s needs %s (%s)", given, f->needs,
                 f->needs_why ? f->needs_why : "it changes nothing without it");
        return bad(c, "%s%s", msg, "");
    }
    *npos = np;
    if (np < c->min_pos) {
        fprintf(stderr, "error: darknet %s: expected %s\n", c->name, c->args);
        sdnn_args_usage(c, stderr);
        return SDNN_ARGS_BAD;
    }
    return SDNN_ARGS_OK;
}

void sdnn_args_usage(const sdnn_command *c, FILE *f)
{
    int col = fprintf(f, "usage: darknet %s%s%s", c->name, c->args[0] ? " " : "", c->args);
    int indent = (int)strlen("usage: darknet ") + (int)strlen(c->name) + 1;
    for (int k = 0; k < c->nflags; ++k) {
        const sdnn_flag *fl = &c->flags[k];
        if (fl->kind == SDNN_FLAG_REFUSED) continue;
        char item[96];
        if (fl->kind == SDNN_FLAG_SWITCH) snprintf(item, sizeof item, " [%s]", fl->name);
        else snprintf(item, sizeof item, " [%s %s]", fl->name, fl->meta ? fl->meta : "X");
        if (col + (int)strlen(item) > 96) col = fprintf(f, "\n%*s", indent - 1, "") - 1;
        col += fprintf(f, "%s", item);
    }
    fputc('\n', f);
    for (int k = 0; k < c->nflags; ++k) {
        const sdnn_flag *fl = &c->flags[k];
        if (!fl->help) continue;
        char head[64];
        if (fl->kind == SDNN_FLAG_SWITCH || (fl->kind == SDNN_FLAG_REFUSED && !fl->meta))
            snprintf(head, sizeof head, "%s", fl->name);
        else snprintf(head, sizeof head, "%s %s", fl->name, fl->meta ? fl->meta : "X");
        fprintf(f, "  %-20s %s%s%s%s%s\n", head, fl->kind == SDNN_FLAG_REFUSED ? "refused: " : "",
                fl->help, fl->alias ? " (also " : "", fl->alias ? fl->alias : "",
                fl->alias ? ")" : "");
    }
    if (c->notes) fprintf(f, "%s", c->notes);
}

int sdnn_flag_gpus_ids(const char *list, int *ids, int max)
{
    int n = 0;
    const char *p = list;
    if (!p || !*p) {
        fprintf(stderr, "error: -gpus %s: empty: expected a comma-separated list of ids, e.g. "
                "0,1,2,3\n", list ? "''" : "");
        return -1;
    }
    for (;;) {
        if (*p == '-' && p[1] >= '0' && p[1] <= '9') {
            fprintf(stderr, "error: -gpus %s: %.*s is negative: ids are devices 0, 1, 2, ...\n",
                    list, (int)strcspn(p, ","), p);
            return -1;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || (*p < '0' || *p > '9') || (*end != '\0' && *end != ',')) {
            fprintf(stderr, "error: -gpus %s: expected a comma-separated list of ids, e.g. "
                    "0,1,2,3\n", list);
            return -1;
        }
        if (errno || v > SDNN_GPUS_MAX_ID) {
            fprintf(stderr, "error: -gpus %s: id %.*s is past %d, the largest id\n", list,
                    (int)(end - p), p, SDNN_GPUS_MAX_ID);
            return -1;
        }
        if (n == max) {
            fprintf(stderr, "error: -gpus %s: more than %d ids\n", list, max);
            return -1;
        }
        if (ids) ids[n] = (int)v;
        ++n;
        if (*end == '\0') return n;
        p = end + 1;
    }
}

int sdnn_flag_gpus(const char *list)
{
    int ids[SDNN_GPUS_MAX];
    int n = sdnn_flag_gpus_ids(list, ids, SDNN_GPUS_MAX);
    for (int r = 1; r < n; ++r)
        for (int q = 0; q < r; ++q)
            if (ids[q] == ids[r]) {
                fprintf(stderr, "error: -gpus %s: id %d is listed twice (each device once)\n",
                        list, ids[r]);
                return -1;
            }
    return n;
}

int sdnn_flag_parse_gpus(const char *flag, const char *value, void *dst)
{
    (void)flag;
    if (sdnn_flag_gpus(value) < 1) return -1;
    *(const char **)dst = value;
    return 0;
}

int sdnn_flag_parse_gpus_ids(const char *flag, const char *value, void *dst)
{
    (void)flag;
    if (sdnn_flag_gpus_ids(value, NULL, SDNN_GPUS_MAX) < 1) return -1;
    *(const char **)dst = value;
    return 0;
}

void sdnn_note_no_window(const char *command, int dont_show, int show_imgs)
{
    if (!dont_show && !show_imgs) return;
    fprintf(stderr, "note: darknet %s: %s%s%s: this build never opens a window (no display); "
            "nothing is shown%s\n", command, dont_show ? "-dont_show" : "",
            dont_show && show_imgs ? " and " : "", show_imgs ? "-show_imgs" : "",
            show_imgs ? ", images with boxes are written as files where the command writes them"
                      : "");
}

int sdnn_flag_parse_points(const char *flag, const char *value, void *dst)
{
    if (strcmp(value, "0") && strcmp(value, "11") && strcmp(value, "101")) {
        fprintf(stderr, "error: %s %s: expected 0 (all-point AP), 11 (VOC 2007 11-point) or 101 "
                "(COCO 101-point)\n", flag, value);
        return -1;
    }
    *(int *)dst = atoi(value);
    return 0;
}

const char *sdnn_fmt_float(char *buf, float v, int min_decimals)
{
    if (!buf) return "";
    if (!isfinite(v)) {
        snprintf(buf, SDNN_FMT_FLOAT_LEN, "%g", (double)v);
        return buf;
    }
    for (int d = min_decimals < 0 ? 0 : min_decimals; d <= 9; ++d) {
        snprintf(buf, SDNN_FMT_FLOAT_LEN, "%.*f", d, (double)v);
        if (strtof(buf, NULL) == v) return buf;
    }
    for (int p = 1; p <= 9; ++p) { /* 9 significant digits always read back a float */
        snprintf(buf, SDNN_FMT_FLOAT_LEN, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}
