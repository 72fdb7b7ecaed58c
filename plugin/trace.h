/*
 * trace: the per-iteration CSV (csv= key or -csv flag): one row per step
 * with the loss, throughput, bytes exchanged and the communication the step
 * could not hide.
 */
#ifndef SDNN_TRACE_H
#define SDNN_TRACE_H

#include "scalednn.h"
#include <stddef.h>
#include <stdio.h>

typedef struct sdnn_csv {
    FILE *f;
    char path[1024];
} sdnn_csv;

typedef struct sdnn_csv_row {
    size_t iteration;
    size_t images;         /* images seen so far (all replicas) */
    float loss;
    float avg_loss;
    float rate;
    double seconds;        /* step wall time */
    double images_per_s;
    size_t bytes;          /* bytes exchanged in this step */
    double exposed_s;      /* communication the step waited on */
    double comm_s;         /* communication time, hidden or not */
    double data_wait_s;    /* time waiting for the loader */
    double sync_wait_s;    /* time waiting for slower replicas */
} sdnn_csv_row;

sdnn_status sdnn_csv_open(sdnn_csv *c, const char *path);
sdnn_status sdnn_csv_write(sdnn_csv *c, const sdnn_csv_row *row);
void sdnn_csv_close(sdnn_csv *c);

#endif
