/*
 * loader: CPU-centric batch building on top of Darknet's load_data.
 *
 * One host loader builds the whole step's batch (batch x subdivisions x
 * replicas images) in Darknet's background loader thread, one step ahead of
 * training, and each replica gets a view of its rows: no image is copied
 * again to split the batch.
 *
 * With `own` set before start (a cfg whose last [yolo] has the fork's
 * resize != 1, or [net] mosaic=1, letter_box=1 or flip=0), the project's own builder (batch.h) makes each batch in a
 * thread of ours instead, at the same place in the pipeline: batch k of
 * the run (first_batch + the loads started so far) is a pure function of
 * (seed, k).
 */
#ifndef SDNN_LOADER_H
#define SDNN_LOADER_H

#include "scalednn.h"
#include "timeline.h"
#include "batch.h"
#include <darknet.h>
#include <pthread.h>

typedef struct sdnn_loader {
    load_args args;
    data buffer;        /* filled by Darknet's loader thread */
    pthread_t thread;
    int running;
    double wait_s;      /* time the last next() waited for the batch */
    sdnn_timeline *tl;  /* set before start to record load_data on the loader
                         * track and the waits on the main track; NULL: none */
    int batches;        /* batches started (the timeline's batch number) */
    /* Set before start for the project's own builder (batch.h); own 0:
     * Darknet's load_data with args. */
    int own;
    float resize;       /* the last [yolo]'s resize */
    int flip;           /* the random flip (the fork's [net] flip) */
    int mosaic, mosaic_bound, letter_box; /* the fork's [net] keys (batch.h) */
    uint64_t seed;      /* the run's seed (with the rank mixed in) */
    uint64_t first_batch; /* the batch index of the first load (a resumed
                           * run continues the sequence) */
    sdnn_status status; /* the last own build's */
    int thread_ok;      /* a thread to join */
} sdnn_loader;

/* Start loading the first batch.  args.d is set to &L->buffer. */
sdnn_status sdnn_loader_start(sdnn_loader *L, load_args args);
/* Hand over the batch loaded in the background and start the next one.
 * The caller frees *out with free_data(). */
sdnn_status sdnn_loader_next(sdnn_loader *L, data *out);
/* Drop the batch in flight and restart at a new input size. */
sdnn_status sdnn_loader_resize(sdnn_loader *L, int w, int h);
/* Wait for the batch in flight and free it. */
void sdnn_loader_stop(sdnn_loader *L);

/* Rows [part*rows/nparts, (part+1)*rows/nparts) of d, sharing d's memory
 * (shallow: free only d). */
data sdnn_data_slice(data d, int part, int nparts);

#endif
