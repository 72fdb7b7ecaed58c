/*
 * flags: strict command-line values.  Darknet's find_int_arg/atoi read
 * "-max_batches -5" or "-seed abc" as numbers, wrap "99999999999", and give
 * the default when a flag is the last argument with no value; these report
 * each of those on stderr naming the flag and what is allowed, and return
 * -1 (the caller exits 1).  argv may hold NULL entries (Darknet's del_arg).
 */
#ifndef SDNN_FLAGS_H
#define SDNN_FLAGS_H

/* *val = the value after `name`, or NULL when the flag is absent. */
int sdnn_flag_str(int argc, char **argv, const char *name, const char **val);

/* An integer in [lo, hi]; *out = def when absent. */
int sdnn_flag_long(int argc, char **argv, const char *name, long def, long lo, long hi, long *out);

/* A finite number in [lo, hi] (lo excluded when lo_open); *out = def when absent. */
int sdnn_flag_double(int argc, char **argv, const char *name, double def, double lo, int lo_open,
                     double hi, double *out);

/* -gpus LIST: ids 0..1023, comma-separated, each once; the replica count
 * or -1 (reported). */
int sdnn_flag_gpus(const char *list);

#endif
