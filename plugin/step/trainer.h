/*
 * trainer: N replicas training one model, in scalednn or stock mode.
 *
 * Each replica runs in a worker thread of its own for the trainer's whole
 * life and trains its slice of every step's batch with Darknet's own
 * train_network.  In scalednn mode the hooks and the exchange average the
 * fresh gradients every step; in stock mode Darknet's periodic weight
 * averaging runs after the step.  Like stock Darknet, the trainer
 * multiplies every replica's learning rate by N, and one step of N replicas
 * advances the iteration counter by N batches.
 */
#ifndef SDNN_TRAINER_H
#define SDNN_TRAINER_H

#include "config.h"
#include "engine.h"
#include "exchange.h"
#include "scalednn.h"
#include "timeline.h"
#include <darknet.h>

typedef struct sdnn_trainer sdnn_trainer;

typedef struct sdnn_step_stats {
    float loss;            /* mean of the replicas' train_network losses */
    double seconds;        /* wall time of the step (compute + exchange) */
    double exposed_s;      /* time the step waited on communication */
    double sync_wait_s;    /* scalednn: time waiting for slower replicas */
    double comm_s;         /* time spent in collectives (may be hidden) */
    size_t bytes;          /* bytes exchanged in this step */
    int synced;            /* stock mode: weights were averaged */
    int replanned;         /* bucket_mb=auto: a new plan takes over from the next step */
    size_t host_loss_bytes;  /* device <-> host for the host-side losses, every
                              * replica (the engine's host_loss_take; 0 on the host) */
    double host_loss_wait_s; /* the longest a replica's device waited on them */
} sdnn_step_stats;

/* Take ownership of `nets` (n replicas with identical weights, see
 * sdnn_replicas_create) when own != 0.  Multiplies learning rates by n. */
/* Between processes (the config's backend resolves to mpi), process 0's
 * replica 0 is broadcast to every replica of every process and the
 * learning rate is multiplied by n x processes instead. */
sdnn_status sdnn_trainer_create(network **nets, int n, const sdnn_config *cfg, int own,
                                sdnn_trainer **out);
/* The same on the engine `engine` rather than the one cfg->engine names
 * (an engine outside the registry: tests that wrap an engine's table). */
sdnn_status sdnn_trainer_create_with(const sdnn_engine_ops *engine, network **nets, int n,
                                     const sdnn_config *cfg, int own, sdnn_trainer **out);

/* What a trainer is made with beside the replicas and the cfg. */
typedef struct sdnn_trainer_opts {
    const sdnn_engine_ops *engine; /* NULL: the one cfg->engine resolves to */
    const int *devices;            /* replica r's device id (the command line's ids; copied);
                                    * NULL: 0..n-1.  A device engine runs replica
                                    * r there; a host engine only counts them.
                                    * An id listed twice needs cfg virtual=1. */
} sdnn_trainer_opts;

#define SDNN_TRAINER_OPTS_INIT { .engine = NULL, .devices = NULL }

/* sdnn_trainer_create with opts (NULL: SDNN_TRAINER_OPTS_INIT). */
sdnn_status sdnn_trainer_create_opts(network **nets, int n, const sdnn_config *cfg,
                                     const sdnn_trainer_opts *opts, int own, sdnn_trainer **out);
void sdnn_trainer_destroy(sdnn_trainer *t);

/* The engine that trains the replicas (the banner describes its devices),
 * and replica r's device id (opts.devices[r], else r). */
const sdnn_engine_ops *sdnn_trainer_engine(const sdnn_trainer *t);
int sdnn_trainer_device(const sdnn_trainer *t, int r);
/* The engine instance itself (tests and benchmarks that read its state). */
sdnn_engine *sdnn_trainer_engine_instance(sdnn_trainer *t);

int sdnn_trainer_replicas(const sdnn_trainer *t);
network *sdnn_trainer_net(sdnn_trainer *t, int r);
network **sdnn_trainer_nets(sdnn_trainer *t);
const sdnn_exchange *sdnn_trainer_exchange(const sdnn_trainer *t);

/* The timeline the trainer records (timeline= key; opened by create,
 * SDNN_ERR_IO naming the file when it cannot be written), or NULL.  Other
 * parts of a run (the loader, the front-end) record on it until
 * sdnn_trainer_close_timeline, which writes the end of the file and
 * reports a failed write; destroy closes it if still open. */
sdnn_timeline *sdnn_trainer_timeline(sdnn_trainer *t);
sdnn_status sdnn_trainer_close_timeline(sdnn_trainer *t);

/* One step on d, which holds batch x subdivisions x n rows; replica r
 * trains rows [r*rows/n, (r+1)*rows/n).  After a failed step the replicas
 * hold that step's partial state: later steps and saves return
 * SDNN_ERR_ABORTED. */
sdnn_status sdnn_trainer_step(sdnn_trainer *t, data d, sdnn_step_stats *st);

/* Preloading (the [scalednn] preload= key through the engine's feed op,
 * engine.h): feed hands over the loader's batch for a later step (the
 * trainer owns d on SDNN_OK and frees it once trained; on failure the
 * caller keeps it); step_fed trains the oldest fed batch.  At most
 * sdnn_trainer_preload(t) batches are fed and not trained: the engine's
 * depth (a device engine: preload=K slots per device; a host one: 1, its replicas read the
 * host rows in place).  A device engine starts the copies at feed, so with
 * K > 1 the copies of later batches run while a step computes.  A batch
 * whose input size is not the network's (fed before a resize) is refused
 * (SDNN_ERR_INVALID), never trained at the wrong size.  A failed feed
 * stops the trainer like a failed step.  sdnn_trainer_step(d) is the same
 * as a feed of d and step_fed with nothing fed before, but d stays the
 * caller's and a device engine copies it synchronously. */
sdnn_status sdnn_trainer_feed(sdnn_trainer *t, data d);
sdnn_status sdnn_trainer_step_fed(sdnn_trainer *t, sdnn_step_stats *st);
int sdnn_trainer_preload(const sdnn_trainer *t);
int sdnn_trainer_queued(const sdnn_trainer *t);
/* Batches fed and dropped by resizes since create. */
long sdnn_trainer_dropped(const sdnn_trainer *t);

/* Resize every replica to w x h (multi-scale training).  Batches fed and
 * not trained are at the old size: they are dropped (freed, counted in
 * sdnn_trainer_dropped), as Darknet drops its loader's batch in flight on
 * a resize, so the sizes change at the same iterations whatever preload
 * is; the engine rebuilds its rings at the new size and keeps its comm. */
sdnn_status sdnn_trainer_resize(sdnn_trainer *t, int w, int h);

/* Save replica 0 in Darknet's format, atomically.  scalednn mode first
 * averages the batch-norm running statistics over the replicas; stock mode
 * first averages the weights as Darknet's detector does before every save.
 * Non-finite parameters or running statistics on any replica are
 * SDNN_ERR_NONFINITE and nothing is written or averaged. */
sdnn_status sdnn_trainer_save(sdnn_trainer *t, const char *path);

/* bucket_mb=auto: the planner (plan in force, printing), NULL otherwise. */
struct sdnn_autoplan;
const struct sdnn_autoplan *sdnn_trainer_autoplan(const sdnn_trainer *t);

/* The cores this process may run on (its CPU affinity, e.g. as mpirun's
 * binding left it; else the online cores). */
int sdnn_usable_cores(void);

/* scalednn mode: average the batch-norm running statistics over the
 * replicas (before an evaluation of replica 0; saves do it themselves). */
void sdnn_trainer_average_bn(sdnn_trainer *t);

/* Error feedback: 1 when the exchange keeps residuals.  The residuals are
 * saved by sdnn_trainer_save as PATH.ef next to the weights;
 * sdnn_trainer_load_ef restores them from WEIGHTS.ef when resuming
 * (SDNN_ERR_IO: no such file; SDNN_ERR_INVALID: it does not match this run;
 * either way training may go on with zero residuals). */
int sdnn_trainer_has_ef(const sdnn_trainer *t);
sdnn_status sdnn_trainer_load_ef(sdnn_trainer *t, const char *weights);

/* Across processes (backend=mpi): this process's rank (0 without a
 * backend between processes), the number of processes, and the world
 * (replicas in every process together; the learning rate is multiplied by
 * it and a step advances `seen` by world batches). */
int sdnn_trainer_rank(const sdnn_trainer *t);
int sdnn_trainer_processes(const sdnn_trainer *t);
int sdnn_trainer_world(const sdnn_trainer *t);

/* *v on every process = *v of process 0 (multi-scale sizes); |v| < 2^24. */
sdnn_status sdnn_trainer_broadcast_int(sdnn_trainer *t, int *v);
/* Process 0's *v to every process (two floats: the value and what the
 * first leaves, about 2^-48 relative), e.g. the accuracy of an evaluation
 * every process must decide on alike. */
sdnn_status sdnn_trainer_broadcast_double(sdnn_trainer *t, double *v);

/* Current iteration (Darknet's get_current_batch of replica 0). */
size_t sdnn_trainer_iteration(sdnn_trainer *t);

#endif
