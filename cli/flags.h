/*
 * flags: the one command-line parser of ./darknet's commands.
 *
 * Each command describes itself once, in an sdnn_command: its name, its
 * positional arguments and a table of flags (name, kind, where the value
 * goes, range, value name, one line of help).  sdnn_args_parse reads argv
 * against the table and sdnn_args_usage prints the usage text from it, so
 * the two cannot disagree.  The convention is Darknet's: single-dash flags
 * followed by their value (`-max_batches 100`), switches without one
 * (`-clear`), positionals in order, `-h`/`-help`/`--help` for the usage.
 *
 * Values are strict: Darknet's find_int_arg/atoi read "-max_batches -5" or
 * "-seed abc" as numbers, wrap "99999999999", and give the default when a
 * flag is the last argument; here each of those, an unknown flag and a
 * wrong number of positionals is bad usage: one message on stderr naming
 * the flag and what is allowed, the usage text, exit status 2.  So is a
 * flag given twice (under either spelling): Darknet's find_arg takes the
 * first, the last would win here, so neither is guessed and both are
 * named.  So is a flag that only matters with another one (its `needs`,
 * e.g. train's -points without -map) given without it: Darknet ignores it
 * silently.  argv may hold NULL entries (Darknet's del_arg).
 */
#ifndef SDNN_FLAGS_H
#define SDNN_FLAGS_H

#include <stdio.h>

typedef enum {
    SDNN_FLAG_SWITCH, /* no value; *(int *)dst = 1 */
    SDNN_FLAG_STR,    /* *(const char **)dst = the value */
    SDNN_FLAG_INT,    /* *(int *)dst: an integer in [lo, hi] */
    SDNN_FLAG_LONG,   /* *(long *)dst: an integer in [lo, hi] */
    SDNN_FLAG_DOUBLE, /* *(double *)dst: a finite decimal number in lo..hi (lo_open, hi_open) */
    SDNN_FLAG_FLOAT,  /* *(float *)dst: the same, stored as a float */
    SDNN_FLAG_CUSTOM, /* parse(flag, value, dst): 0, or -1 after a message naming the flag */
    SDNN_FLAG_REFUSED, /* a flag of the fork that cannot mean anything here: bad usage, with
                        * help saying why (it takes a value when meta is set) */
} sdnn_flag_kind;

typedef struct sdnn_flag {
    const char *name;    /* "-gpus" */
    sdnn_flag_kind kind;
    void *dst;
    double lo, hi;       /* INT, LONG, DOUBLE */
    int lo_open, hi_open; /* DOUBLE: lo / hi excluded */
    const char *meta;    /* the value in the usage text: "LIST" */
    const char *help;    /* one line, or NULL (then the flag is listed only in the synopsis) */
    int (*parse)(const char *flag, const char *value, void *dst); /* CUSTOM */
    int *seen;           /* NULL, or set to 1 when the flag is given */
    const char *alias;   /* NULL, or a second spelling of the same flag ("-dontshow") */
    const char *needs;   /* NULL, or the flag of the same table without which this one changes
                          * nothing ("-map"): given alone it is bad usage, naming both */
    const char *needs_why; /* the reason in that message ("nothing is evaluated without it") */
} sdnn_flag;

typedef struct sdnn_command {
    const char *name;    /* "detector train" */
    const char *args;    /* the positionals in the synopsis: "DATA CFG [WEIGHTS]" */
    int min_pos, max_pos;
    const sdnn_flag *flags;
    int nflags;
    const char *notes;   /* lines printed after the flags, or NULL */
    int dashdash;        /* 1: `--flag` is also read as `-flag` (scripts of an older syntax) */
} sdnn_command;

#define SDNN_ARGS_OK 0
#define SDNN_ARGS_HELP 1  /* -h: the usage went to stdout; the command exits 0 */
#define SDNN_ARGS_BAD 2   /* bad usage: message and usage on stderr; exit 2 */

/* Read argv[first..argc) against c: positionals into pos[0..c->max_pos)
 * (*npos = their count), flag values into their dst.  Returns one of
 * SDNN_ARGS_OK, SDNN_ARGS_HELP, SDNN_ARGS_BAD. */
int sdnn_args_parse(const sdnn_command *c, int argc, char **argv, int first, const char **pos,
                    int *npos);

/* "usage: darknet NAME ARGS [-flag META] ...", then one line per flag with
 * help, then the notes. */
void sdnn_args_usage(const sdnn_command *c, FILE *f);

/* Report a bad value of `flag` ("error: FLAG VALUE: expected WHAT") and
 * return SDNN_ARGS_BAD; for checks a command makes after parsing. */
int sdnn_args_bad(const sdnn_command *c, const char *flag, const char *value, const char *what);

/* -gpus LIST: device ids 0..SDNN_GPUS_MAX_ID, comma-separated, at most
 * SDNN_GPUS_MAX of them. */
#define SDNN_GPUS_MAX 1024
#define SDNN_GPUS_MAX_ID 1023

/* The ids of LIST in ids[0..max) (ids may be NULL: only checked); an id
 * may repeat (train decides with virtual=).  The count, or -1 after a
 * message naming the list and what is wrong (empty, a negative id, not a
 * number, an id past SDNN_GPUS_MAX_ID, more than max ids). */
int sdnn_flag_gpus_ids(const char *list, int *ids, int max);

/* The same with each id once (the commands that only count replicas); the
 * replica count, or -1 after a message. */
int sdnn_flag_gpus(const char *list);

/* SDNN_FLAG_CUSTOM parser of -gpus: *(const char **)dst = the list once it
 * is valid. */
int sdnn_flag_parse_gpus(const char *flag, const char *value, void *dst);
/* The same allowing an id twice (detector/classifier train: [scalednn]
 * virtual=1 decides, after the cfg is read). */
int sdnn_flag_parse_gpus_ids(const char *flag, const char *value, void *dst);

/* The fork's window flags, accepted on every detector command: nothing is
 * ever shown here (no display), so they change nothing; the command says so
 * once (sdnn_note_no_window). */
#define SDNN_FLAGS_NO_WINDOW(dont_show, show_imgs)                                                 \
    {.name = "-dont_show", .alias = "-dontshow", .kind = SDNN_FLAG_SWITCH, .dst = (dont_show),   \
     .help = "accepted: no window is ever opened here"},                                         \
    {.name = "-show_imgs", .kind = SDNN_FLAG_SWITCH, .dst = (show_imgs),                         \
     .help = "accepted: no window here, nothing is shown"}

/* The fork's flags that cannot mean anything in this build: bad usage,
 * naming why. */
#define SDNN_FLAGS_FORK_REFUSED                                                                    \
    {.name = "-mjpeg_port", .kind = SDNN_FLAG_REFUSED, .meta = "PORT",                            \
     .help = "this build serves no MJPEG stream (no network server); the progress is in the "     \
             "CSV and chart.png"},                                                                \
    {.name = "-http_post_host", .kind = SDNN_FLAG_REFUSED, .meta = "HOST",                        \
     .help = "this build posts no results over HTTP (no network client)"},                       \
    {.name = "-json_port", .kind = SDNN_FLAG_REFUSED, .meta = "PORT",                             \
     .help = "this build serves no JSON stream (no network server)"}

/* One line on stderr when -dont_show or -show_imgs was given. */
void sdnn_note_no_window(const char *command, int dont_show, int show_imgs);

/* A threshold (a float flag's value) as text that reads back as the same
 * float: with min_decimals decimals where those suffice (2 keeps the
 * fork's "mAP@0.50"), more where needed (-iou_thresh 0.999 is "0.999",
 * never "1.00"), %g's exponent form for what 9 decimals cannot hold.
 * buf holds SDNN_FMT_FLOAT_LEN bytes.  Returns buf. */
#define SDNN_FMT_FLOAT_LEN 64
const char *sdnn_fmt_float(char *buf, float v, int min_decimals);

/* The fork's -points: 0 (all-point), 11 or 101. */
int sdnn_flag_parse_points(const char *flag, const char *value, void *dst);

#endif
