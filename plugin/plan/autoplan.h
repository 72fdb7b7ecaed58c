/*
 * autoplan: bucket_mb=auto (and compress=auto) during training.
 *
 * The trainer starts with fixed 1 MiB buckets while the hooks time each
 * layer's forward, backward and update on every replica.  The first step is
 * a warm-up; after `profile_iters` more, the averaged per-layer times, the
 * layers' parameter bytes, the link (link=, link_gbps=/link_us=, or a probe
 * of the active backend made at start) and the codecs' measured encode and
 * decode rates go into the cost model, and the planner (plan.c) chooses the
 * buckets and, with compress=auto, each bucket's codec among
 * compress_allow.  After that the measured step time is compared with the
 * prediction; when the median of the last 10 steps drifts by more than
 * replan_drift (a fraction) the layers are re-profiled over the next
 * profile_iters steps and planned again (at most once every 20 steps; when a
 * re-plan gives the same buckets, the wait doubles).
 *
 * Between processes (backend=mpi) the processes plan together: the profile
 * is the mean over the processes, the link and codec rates are process 0's
 * probes, the drift verdict is process 0's (checked once per 10 steps), so
 * every process switches to the same buckets at the same step.
 */
#ifndef SDNN_AUTOPLAN_H
#define SDNN_AUTOPLAN_H

#include "comm.h"
#include "config.h"
#include "exchange.h"
#include "plan.h"
#include "scalednn.h"
#include <darknet.h>
#include <stdio.h>

typedef struct sdnn_autoplan sdnn_autoplan;

/* For replicas shaped like `net` (nrep of them in this process, the world
 * of `comm` around them).  Probes the link and the codecs now. */
sdnn_status sdnn_autoplan_create(const network *net, int nrep, sdnn_comm *comm,
                                 const sdnn_config *cfg, sdnn_autoplan **out);
void sdnn_autoplan_destroy(sdnn_autoplan *a);

/* Replica r's accumulator for the hooks ([3 x layers] seconds). */
double *sdnn_autoplan_prof(sdnn_autoplan *a, int r);

/* After every step (ok = the step succeeded; step_s its wall time), on
 * every process at the same step.  *ready = 1 when a new plan is ready:
 * *spec (owned by a, valid until the next call) and *n describe it for
 * sdnn_exchange_opts.plan.  Between processes the plan and the drift
 * verdict are agreed over the backend; a failed collective is returned
 * (SDNN_ERR_COMM ...) and training must stop. */
sdnn_status sdnn_autoplan_after_step(sdnn_autoplan *a, const network *net, double step_s,
                                     int ok, const sdnn_bucket_spec **spec, int *n, int *ready);

/* The plan in force (NULL before the first) and how many plans were made. */
const sdnn_plan *sdnn_autoplan_current(const sdnn_autoplan *a);
int sdnn_autoplan_count(const sdnn_autoplan *a);

/* The plan as a table: buckets, layers, bytes, codec, predicted start and
 * end, the predicted step and exposed time, and the link used. */
void sdnn_autoplan_print(const sdnn_autoplan *a, FILE *f);

#endif
