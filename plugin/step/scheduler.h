/*
 * scheduler: the scheduler of a step's buckets (DESIGN §4), for any engine.
 *
 * It owns what decides when a bucket may cross the link and when a layer
 * may update: each bucket's ready count (layer x replica completions still
 * expected), the FIFO of ready buckets (so buckets cross in the order their
 * gradients became ready), the comm thread that runs each bucket's
 * collective, the step's abort (first error wins, every waiter returns),
 * the per-step waits and statistics, and the comm thread's timeline spans.
 *
 * The bucket signal is one concept with two implementations behind the
 * engine table: when replica r has finished its part of bucket b the
 * scheduler calls ops->ready(r, b) (a host engine: nothing, the count is
 * the signal; a device engine: an event after the bucket's last backward),
 * and before the bucket's collective the comm thread calls
 * ops->ready_wait(r, b) for every r (a device engine: the comm stream waits
 * on the event; no host wait).  The scheduler never
 * knows which engine it drives.
 *
 * Threads: layer_packed / replica_ready / wait run in replica threads;
 * step_begin, step_end and set_timeline in the main thread between steps;
 * abort anywhere.
 */
#ifndef SDNN_SCHEDULER_H
#define SDNN_SCHEDULER_H

#include "engine.h"
#include "scalednn.h"
#include "timeline.h"
#include <stddef.h>

typedef struct sdnn_sched sdnn_sched;

/* Bucket b's collective, run on the comm thread once every replica's
 * ready_wait(r, b) returned; *wire: the bytes it sent between ranks. */
typedef sdnn_status (*sdnn_sched_collective)(void *user, int bucket, size_t *wire);

typedef struct sdnn_sched_opts {
    int nrep;                   /* local replicas */
    int nbuckets;
    const int *nlayers;         /* [nbuckets]: exchanged layers of each bucket */
    int overlap;                /* 1: a bucket leaves as soon as it is ready;
                                 * 0: every bucket once all are ready */
    int threaded;               /* 1: start the comm thread (a world > 1);
                                 * 0: nothing is exchanged, only aborts */
    sdnn_sched_collective collective;
    void *user;
    const char *const *labels;  /* [nbuckets]: each collective's timeline
                                 * label (its codec), NULL: "none" */
} sdnn_sched_opts;

typedef struct sdnn_sched_stats {
    size_t wire;           /* bytes the collectives sent */
    double exposed_s;      /* max over replicas: waits for the exchange itself */
    double sync_wait_s;    /* max over replicas: waits for slower replicas */
    double comm_s;         /* time the comm thread spent in collectives */
    int exchanged;         /* buckets through the comm thread */
} sdnn_sched_stats;

sdnn_status sdnn_sched_create(sdnn_engine *e, const sdnn_sched_opts *o, sdnn_sched **out);
void sdnn_sched_destroy(sdnn_sched *s);

/* A new step to `iteration`: every count reset, no abort. */
void sdnn_sched_step_begin(sdnn_sched *s, int iteration);
/* Replica r packed one more layer of bucket b: 1 when that was the last
 * of its part of the bucket (the caller then finishes the part, e.g. the
 * error-feedback step, and calls replica_ready), else 0. */
int sdnn_sched_layer_packed(sdnn_sched *s, int r, int b);
/* Replica r's part of bucket b is complete: ops->ready(r, b), and the
 * bucket is queued when it was the last replica (overlap), or every
 * bucket once the last one is complete (no overlap). */
void sdnn_sched_replica_ready(sdnn_sched *s, int r, int b);
/* Before an update of `layer` in bucket b on replica r: wait until the
 * bucket's collective is done.  0, or -1 when the step was aborted.  The
 * wait is counted (and recorded on r's timeline track) as waiting for
 * slower replicas until the bucket was ready, for the exchange after. */
int sdnn_sched_wait(sdnn_sched *s, int r, int b, int layer);

/* Stop the step with `st`: 1 for the caller that stopped it first (its
 * message names the cause), 0 when it was stopped already. */
int sdnn_sched_abort(sdnn_sched *s, sdnn_status st);
int sdnn_sched_aborted(sdnn_sched *s);
int sdnn_sched_iteration(const sdnn_sched *s);

/* Wait until every queued bucket is through the comm thread; the step's
 * statistics; the first error (SDNN_ERR_ABORTED when stopped without
 * one), or SDNN_ERR_INTERNAL when a threaded step ended with buckets not
 * exchanged. */
sdnn_status sdnn_sched_step_end(sdnn_sched *s, sdnn_sched_stats *st);

/* Record waits (replica tracks) and collectives (comm track) on tl, NULL:
 * stop; call between steps. */
void sdnn_sched_set_timeline(sdnn_sched *s, sdnn_timeline *tl);

/* Queue buckets as they are ready (1) or once the whole backward is done
 * (0) from the next step on; call between steps. */
void sdnn_sched_set_overlap(sdnn_sched *s, int overlap);
int sdnn_sched_overlap(const sdnn_sched *s);

#endif
