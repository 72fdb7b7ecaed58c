/*
 * exchange: the scalednn step protocol (DESIGN §4).
 *
 * The exchanged layers are grouped, in reverse layer order, into buckets of
 * about bucket_mb MiB.  Per step:
 *   step_begin      (main)     reset bucket state
 *   replica_begin   (replica)  snapshot the update buffers, which hold
 *                              momentum x previous update at this point
 *   layer_done      (replica)  after the layer's last-subdivision backward:
 *                              fresh gradient = updates - snapshot, packed
 *                              into the bucket; non-finite values abort.
 *                              When every layer of a bucket is done on every
 *                              replica the bucket is queued to the comm
 *                              thread (overlap=1) or, without overlap, all
 *                              buckets are queued once the whole backward
 *                              is done everywhere.
 *   layer_wait      (replica)  before the layer's update: wait for its
 *                              bucket, then updates = snapshot + mean.
 *   step_end        (main)     counters of the step; first error if any.
 * A world of one replica in one process exchanges nothing and touches no
 * buffer (only the non-finite check runs), so it equals Darknet's own
 * train_network bit for bit.
 */
#ifndef SDNN_EXCHANGE_H
#define SDNN_EXCHANGE_H

#include "comm.h"
#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>

typedef struct sdnn_exchange sdnn_exchange;

typedef struct sdnn_exchange_stats {
    size_t bytes;          /* bytes into and out of the collective, all replicas */
    double exposed_s;      /* max over replicas of the time updates waited for
                            * exchanges after their bucket was ready */
    double sync_wait_s;    /* max over replicas of the time updates waited for
                            * slower replicas to finish the bucket's backward */
    double comm_s;         /* time the comm thread spent in collectives */
    int buckets;           /* buckets exchanged */
} sdnn_exchange_stats;

sdnn_status sdnn_exchange_create(network **nets, int nrep, sdnn_comm *comm,
                                 double bucket_mb, int overlap, sdnn_exchange **out);
void sdnn_exchange_destroy(sdnn_exchange *ex);

int sdnn_exchange_world(const sdnn_exchange *ex);
int sdnn_exchange_nbuckets(const sdnn_exchange *ex);
/* Layers of bucket b: [*lo, *hi]; returns its number of floats. */
size_t sdnn_exchange_bucket(const sdnn_exchange *ex, int b, int *lo, int *hi);
/* Bucket of layer i, or -1 when the layer is not exchanged. */
int sdnn_exchange_layer_bucket(const sdnn_exchange *ex, int layer);

void sdnn_exchange_step_begin(sdnn_exchange *ex, int iteration);
void sdnn_exchange_replica_begin(sdnn_exchange *ex, int r);
void sdnn_exchange_layer_done(sdnn_exchange *ex, int r, int layer);
/* Returns 0 when the layer may update, -1 when the step was aborted. */
int sdnn_exchange_layer_wait(sdnn_exchange *ex, int r, int layer);
sdnn_status sdnn_exchange_step_end(sdnn_exchange *ex, sdnn_exchange_stats *st);

/* 1 once the step was stopped. */
int sdnn_exchange_aborted(sdnn_exchange *ex);

/* Stop the step because the input of `layer` on replica r is not finite
 * (found by a hook before Darknet's own code would misuse it). */
void sdnn_exchange_report_nonfinite_input(sdnn_exchange *ex, int r, int layer);

/* Stop the step: waiters return, step_end reports `s` (first error wins;
 * the message must already be set with SDNN_ERROR). */
void sdnn_exchange_abort(sdnn_exchange *ex, sdnn_status s);

#endif
