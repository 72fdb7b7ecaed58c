/*
 * outputs: every file a training run will write, collected at start and
 * checked before the first of them is opened: no two are the same file
 * and none is one of the run's inputs.  "The same" is judged both by the
 * path normalised (absolute, symbolic links resolved where the file or its
 * folder exists, "." and ".." folded) and, where the files exist, by
 * (st_dev, st_ino), so ./backup/x and backup/x, a symbolic link and a hard
 * link are all caught.  Weights saves are renamed over their path, so two
 * of them never clash (and the weights a run starts from may be one: a
 * resumed run reads NAME_last.weights whole before it saves it again);
 * everything else written over an input or another output loses it.
 */
#ifndef SDNN_OUTPUTS_H
#define SDNN_OUTPUTS_H

#include <sys/types.h>

typedef struct sdnn_outfile {
    char *what;     /* the flag or role: "-chart", "the final weights" */
    char *path;     /* as the run names it */
    char *norm;     /* normalised */
    int exists;
    dev_t dev;
    ino_t ino;
    int weights;    /* a weights save (replaced by rename) */
    int device;     /* a character device (/dev/null): shared by any number */
    unsigned mode;  /* st_mode where it exists */
} sdnn_outfile;

typedef struct sdnn_outputs {
    sdnn_outfile *f;
    int n, cap;
    char *backup;   /* the backup folder, normalised */
    char *base;     /* the cfg's base name: BACKUP/BASE_N.weights are the periodic saves */
} sdnn_outputs;

/* The run's backup folder (it exists) and cfg base name; 0 or -1 (no memory,
 * after a message). */
int sdnn_outputs_init(sdnn_outputs *o, const char *backup, const char *base);

/* One more output; weights: a weights save.  0 or -1 after a message. */
int sdnn_outputs_add(sdnn_outputs *o, const char *what, const char *path, int weights);

/* The periodic saves BACKUP/BASE_N.weights[.ef] that exist now, as outputs
 * (for the identity checks; names that do not exist are matched by
 * pattern). */
int sdnn_outputs_add_periodic(sdnn_outputs *o);

/* No two outputs are the same file, none is a periodic save's name, and
 * each one that exists is a regular file (a FIFO would block the run at
 * its first write and a directory fail it at its last; a character device
 * such as /dev/null may take a CSV or a trace, never a weights save, whose
 * rename would replace it).  0, or -1 after a message naming both flags or
 * roles and both paths, or the output and what it is. */
int sdnn_outputs_check(const sdnn_outputs *o);

/* Whether any output exists now (else no input can be one of them). */
int sdnn_outputs_any_exist(const sdnn_outputs *o);

/* The input `path` (the role in `what`, e.g. "the cfg file") is none of the
 * outputs; weights_ok: it may be a weights save (the weights a run starts
 * from).  0, or -1 after a message. */
int sdnn_outputs_check_input(const sdnn_outputs *o, const char *what, const char *path,
                             int weights_ok);

void sdnn_outputs_free(sdnn_outputs *o);

#endif
