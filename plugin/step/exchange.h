/*
 * exchange: the scalednn step protocol (DESIGN §4), on any engine.
 *
 * The exchange drives an engine (engine.h) and never the host networks:
 * its bucket buffers come from the engine's buf_alloc, each layer's slice
 * is filled and read by the engine's snapshot / pack (check for a world of
 * one) / ef_step / apply, the collectives run on the engine's comm
 * (comm_open; a host engine: the comm given), and the .ef state moves
 * through buf_read / buf_write.  The scheduler (scheduler.h) decides when a
 * bucket leaves and when a layer may update; the .ef format is efstate.h's.
 * An uncompressed bucket's mean is one buffer (allocated as replica 0's,
 * buf_alloc(e, 0, ...)) that the comm's allreduce_mean writes and every
 * replica's apply reads; a compressed bucket has one decoded mean per
 * replica (allreduce_mean_coded's outs, each replica's own).
 * Creating an exchange registers its callbacks with the engine
 * (set_callbacks): from then on the engine's train() calls into this
 * exchange, until another exchange registers its own (a re-plan) or the
 * engine is destroyed, so destroy an exchange only between steps.
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

#include "codec.h"
#include "comm.h"
#include "config.h"
#include "engine.h"
#include "scalednn.h"
#include "timeline.h"
#include <darknet.h>
#include <stddef.h>

typedef struct sdnn_exchange sdnn_exchange;

/* One bucket of an explicit plan: layers hi down to lo (those with
 * parameters among them), carried by `codec` (NULL or none: uncompressed). */
typedef struct sdnn_bucket_spec {
    int lo, hi;
    const sdnn_codec_ops *codec;
} sdnn_bucket_spec;

/* How buckets are formed and encoded. */
typedef struct sdnn_exchange_opts {
    double bucket_mb;              /* target bucket size, MiB, > 0 */
    int overlap;                   /* 1: a bucket leaves as soon as it is ready */
    const sdnn_codec_ops *codec;   /* NULL or &sdnn_codec_none: uncompressed */
    sdnn_codec_params params;      /* topk_ratio is the ratio after warm-up */
    double compress_min_kb;        /* smaller buckets stay uncompressed */
    int error_feedback;            /* keep what a lossy codec did not send */
    float topk_momentum;           /* > 0: DGC momentum correction (topk) */
    int topk_warmup;               /* iterations over which the ratio falls from 1 */
    /* An explicit plan (bucket_mb=auto): buckets in exchange order, from the
     * last layers down, covering every exchanged layer once; NULL: buckets
     * of bucket_mb.  With a plan each bucket has its own codec, and error
     * feedback follows it when auto_ef is set (on for topk only). */
    const sdnn_bucket_spec *plan;
    int nplan;
    int auto_ef;
} sdnn_exchange_opts;

/* Options from a parsed [scalednn] section; SDNN_ERR_INVALID for a codec
 * this build does not know. */
sdnn_status sdnn_exchange_opts_from_config(const sdnn_config *cfg, sdnn_exchange_opts *o);

typedef struct sdnn_exchange_stats {
    size_t bytes;          /* bytes this process's ranks sent: the encoded bytes
                            * of compressed buckets, and for uncompressed ones
                            * what a ring allreduce moves, 2(W-1)/W x the bucket
                            * per rank (in one process every replica is a rank;
                            * across processes each process is one rank) */
    double exposed_s;      /* max over replicas of the time updates waited for
                            * exchanges after their bucket was ready */
    double sync_wait_s;    /* max over replicas of the time updates waited for
                            * slower replicas to finish the bucket's backward */
    double comm_s;         /* time the comm thread spent in collectives */
    int buckets;           /* buckets exchanged */
} sdnn_exchange_stats;

/* The exchange of engine e's replicas (e->n of them; e is not owned and
 * must outlive the exchange); comm is the host backend (local, or mpi
 * between processes). */
sdnn_status sdnn_exchange_create_on(sdnn_engine *e, sdnn_comm *comm,
                                    const sdnn_exchange_opts *opts, sdnn_exchange **out);
/* The same on bare host networks: the exchange makes (and owns) an engine
 * of sdnn_engine_host() on them, without hooks (tests and tools that drive
 * the protocol themselves). */
/* The comm the exchange's collectives run on (the engine's comm_open, or
 * the host comm given): the step measures the planner's link on it. */
sdnn_comm *sdnn_exchange_comm(const sdnn_exchange *ex);

sdnn_status sdnn_exchange_create(network **nets, int nrep, sdnn_comm *comm,
                                 const sdnn_exchange_opts *opts, sdnn_exchange **out);
/* Tells the exchange's comm its buckets (sdnn_comm_announce: each bucket's
 * codec and size; `plan` when they are a plan's), before the first of
 * them travels: a comm that picks a collective per bucket prints its
 * choice there (a device engine's over NCCL).  Creating an exchange does
 * not: the trainer calls it once it has handed the comm its link
 * (sdnn_comm_set_link), and again after a re-plan.  Nothing for a world
 * of one or a comm without the op. */
void sdnn_exchange_announce(sdnn_exchange *ex);
void sdnn_exchange_destroy(sdnn_exchange *ex);
/* The engine the exchange drives. */
sdnn_engine *sdnn_exchange_engine(const sdnn_exchange *ex);

int sdnn_exchange_world(const sdnn_exchange *ex);
int sdnn_exchange_nbuckets(const sdnn_exchange *ex);
/* Layers of bucket b: [*lo, *hi]; returns its number of floats. */
size_t sdnn_exchange_bucket(const sdnn_exchange *ex, int b, int *lo, int *hi);
/* Bucket of layer i, or -1 when the layer is not exchanged. */
int sdnn_exchange_layer_bucket(const sdnn_exchange *ex, int layer);
/* Codec bucket b travels with (&sdnn_codec_none when uncompressed). */
const sdnn_codec_ops *sdnn_exchange_bucket_codec(const sdnn_exchange *ex, int b);
/* The top-k ratio used in the step to `iteration` (warm-up applied). */
double sdnn_exchange_topk_ratio(const sdnn_exchange *ex, int iteration);

/*
 * Error-feedback state (residuals, and velocities under momentum
 * correction), per replica and compressed bucket, saved next to a weights
 * file as WEIGHTS.ef: a header (magic, replicas, buckets, each bucket's
 * size, codec, the weights' seen counter), the floats, and a checksum.
 * sdnn_exchange_ef_save writes it atomically (nothing when there is no
 * state).  sdnn_exchange_ef_load restores it when it matches this
 * exchange and `seen`; SDNN_ERR_IO when there is no file, SDNN_ERR_INVALID
 * (naming what differs) when it does not match; the state is untouched on
 * any error.
 */
int sdnn_exchange_has_ef(const sdnn_exchange *ex);
/* Carry error-feedback state over a re-plan: for every layer whose bucket
 * keeps residuals in both, copy its slice of every replica's residual (and
 * velocity) from src to dst.  Layers whose new bucket keeps none lose
 * theirs.  Returns the number of layers carried. */
int sdnn_exchange_carry_ef(sdnn_exchange *dst, const sdnn_exchange *src);
sdnn_status sdnn_exchange_ef_save(const sdnn_exchange *ex, const char *path, uint64_t seen);
sdnn_status sdnn_exchange_ef_load(sdnn_exchange *ex, const char *path, uint64_t seen);
/* Replica r's residual (and velocity, NULL without momentum correction)
 * of bucket b; NULL when the bucket keeps none.  Engine memory: only a
 * host engine's (mem() HOST) may be read or written through it. */
float *sdnn_exchange_ef_residual(sdnn_exchange *ex, int r, int b, float **velocity);

void sdnn_exchange_step_begin(sdnn_exchange *ex, int iteration);
void sdnn_exchange_replica_begin(sdnn_exchange *ex, int r);
void sdnn_exchange_layer_done(sdnn_exchange *ex, int r, int layer);
/* Returns 0 when the layer may update, -1 when the step was aborted. */
int sdnn_exchange_layer_wait(sdnn_exchange *ex, int r, int layer);
/* After replica r's train(): the engine's sync(r).  A failure stops the
 * step (step_end returns it); SDNN_ERR_NONFINITE from a device engine's
 * deferred check gets the host check's message (iteration, layer,
 * tensor[element], replica) when the engine says where (nonfinite_at). */
sdnn_status sdnn_exchange_replica_end(sdnn_exchange *ex, int r);
sdnn_status sdnn_exchange_step_end(sdnn_exchange *ex, sdnn_exchange_stats *st);

/* Record the protocol on tl (NULL: stop recording); call between steps.
 * Replica r records pack, encode, waits and unpack on its own track, the
 * comm thread each bucket's collective on the comm track. */
void sdnn_exchange_set_timeline(sdnn_exchange *ex, sdnn_timeline *tl);

/* From the next step on, queue buckets as they are ready (1) or all once
 * the whole backward is done (0), whatever opts.overlap said; call between
 * steps.  The values are the same either way (only when they move
 * changes): the planner profiles its steps without overlap, so the
 * layers' compute is measured apart from the exchange (autoplan.h). */
void sdnn_exchange_set_overlap(sdnn_exchange *ex, int overlap);
int sdnn_exchange_overlap(const sdnn_exchange *ex);

/* 1 once the step was stopped. */
int sdnn_exchange_aborted(sdnn_exchange *ex);

/* Stop the step because the input of `layer` on replica r is not finite
 * (found by a hook before Darknet's own code would misuse it). */
void sdnn_exchange_report_nonfinite_input(sdnn_exchange *ex, int r, int layer);

/* Stop the step: waiters return, step_end reports `s` (first error wins;
 * the message must already be set with SDNN_ERROR). */
void sdnn_exchange_abort(sdnn_exchange *ex, sdnn_status s);

#endif
