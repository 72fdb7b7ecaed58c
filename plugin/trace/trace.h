/*
 * trace: the per-iteration CSV (csv= key, -csv flag, or BACKUP/CFG.csv):
 * one row per step with the loss, learning rate, throughput, bytes
 * exchanged, the communication the step could not hide and, on rows where
 * it was measured, the mAP.  An optional first line "# label: TEXT" names
 * the run for scripts/plot.sh.
 */
#ifndef SDNN_TRACE_H
#define SDNN_TRACE_H

#include "scalednn.h"
#include <stddef.h>
#include <stdio.h>

typedef struct sdnn_csv {
    FILE *f;
    char path[1024];
    char tmp[1100];     /* a new CSV before its first row: where it is written */
} sdnn_csv;

typedef struct sdnn_csv_row {
    size_t iteration;
    size_t images;         /* images seen so far (all replicas) */
    float loss;
    float avg_loss;
    float rate;            /* learning rate of the step */
    double seconds;        /* step wall time */
    double elapsed_s;      /* wall time since training started */
    double images_per_s;
    size_t bytes;          /* bytes exchanged in this step */
    double exposed_s;      /* communication the step waited on */
    double comm_s;         /* communication time, hidden or not */
    double data_wait_s;    /* time waiting for the loader */
    double sync_wait_s;    /* time waiting for slower replicas */
    double map;            /* mAP measured after this step; < 0 = not measured */
    size_t host_loss_bytes;  /* device <-> host for the host-side losses (gpu engine) */
    double host_loss_wait_s; /* the device's wait on them */
} sdnn_csv_row;

/* The header row, also what scripts/plot.sh reads. */
#define SDNN_CSV_HEADER                                                            \
    "iteration,images,loss,avg_loss,learning_rate,seconds,elapsed_s,images_per_s," \
    "bytes_exchanged,exposed_comm_s,comm_s,data_wait_s,sync_wait_s,map,host_loss_bytes," \
    "host_loss_wait_s"

/* label may be NULL (no label line).  A file that exists and is not one of
 * ours (it starts neither with "# label: " nor with the header) is never
 * overwritten: SDNN_ERR_INVALID naming it (sdnn_check_overwrite).  The new
 * file is written beside `path` (sdnn_temp_create) and renamed over it by
 * the first sdnn_csv_write: a run that ends before its first row (a
 * refusal, a crash) leaves the previous run's CSV as it was, and
 * sdnn_csv_close removes the unused file. */
sdnn_status sdnn_csv_open(sdnn_csv *c, const char *path, const char *label);

/* As sdnn_csv_open, but a CSV of ours that exists is kept and the new rows
 * are appended after its rows (a resumed run). */
sdnn_status sdnn_csv_open_append(sdnn_csv *c, const char *path, const char *label);

/* The prefixes that make a file one of our CSVs, for sdnn_check_overwrite. */
extern const char *const sdnn_csv_prefixes[];
sdnn_status sdnn_csv_write(sdnn_csv *c, const sdnn_csv_row *row);
void sdnn_csv_close(sdnn_csv *c);

/* Async-signal-safe: remove a new CSV that has no row yet (a SIGINT or
 * SIGTERM handler calls it). */
void sdnn_csv_interrupted(void);

#endif
