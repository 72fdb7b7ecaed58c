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
 * compress_allow, for the smallest predicted time to accuracy: step x the
 * plan's iteration factor (iter_factor= over the codecs' own, costmodel.h).
 * The warm-up and profiled steps run without overlap
 * (sdnn_autoplan_profiling), so the hooks time the compute with no
 * exchange competing for the cores; the plan runs with the cfg's overlap.  After that the measured step time is compared with the
 * prediction; when the median of the last 10 steps drifts by more than
 * replan_drift (a fraction) the layers are re-profiled over the next
 * profile_iters steps and planned again (at most once every 20 steps).  The
 * new plan replaces the running one only when its predicted time to
 * accuracy is 5% below the running buckets' predicted from the same new
 * profile; else the running buckets stay with the new prediction (and
 * sdnn_autoplan_print_note says so).  When a re-plan gives the same
 * buckets, the wait doubles.
 *
 * Between processes the processes plan together: the profile is the mean
 * over the processes, the link and codec rates are process 0's
 * measurements, the drift verdict is process 0's (checked once per 10
 * steps), so every process switches to the same buckets at the same step.
 *
 * The planner never calls a comm (nothing in plugin/plan/ does): the step
 * measures the link and the codecs through the engine's own buffers and the
 * exchange's comm (plugin/step/measure.h) and hands them over in
 * sdnn_plan_measured; the agreement between processes goes through the
 * sdnn_plan_agree callbacks the step makes over its host comm.
 */
#ifndef SDNN_AUTOPLAN_H
#define SDNN_AUTOPLAN_H

#include "codec.h"
#include "costmodel.h"
#include "config.h"
#include "exchange.h"
#include "plan.h"
#include "scalednn.h"
#include <darknet.h>
#include <stdio.h>

typedef struct sdnn_autoplan sdnn_autoplan;

enum { SDNN_PLAN_MAX_CODECS = 8 };

/* What the step measured for the planner (the same on every process). */
typedef struct sdnn_plan_measured {
    int have_link;                /* 1: link holds the measured link */
    sdnn_link link;
    int ncodecs;                  /* the codecs the planner may choose, in order */
    const sdnn_codec_ops *ops[SDNN_PLAN_MAX_CODECS];
    sdnn_codec_model models[SDNN_PLAN_MAX_CODECS];   /* ef set as the cfg asks */
} sdnn_plan_measured;

/* How the planner's processes agree (procs < 2: no calls are made).  Both
 * callbacks are collectives every process calls at the same point:
 * broadcast leaves process 0's buf[0..n) on every process, mean the mean
 * over the processes of buf[0..n) (the same bits on every process). */
typedef struct sdnn_plan_agree {
    int procs;
    int rank;
    void *ctx;
    sdnn_status (*broadcast)(void *ctx, float *buf, size_t n);
    sdnn_status (*mean)(void *ctx, float *buf, size_t n);
} sdnn_plan_agree;

/* 1 when sdnn_autoplan_create needs a measured link for cfg in a world of
 * `world` ranks (no link=, no link_gbps=, world >= 2). */
int sdnn_autoplan_needs_link(const sdnn_config *cfg, int world);
/* The link cfg names (link=NAME, or link_gbps= with link_us=) into *out
 * and *named = 1; *named = 0 (out untouched) when it names none.  The
 * planner uses it instead of a measured one, and so does the step's
 * handoff to the comm (trainer.c). */
sdnn_status sdnn_autoplan_cfg_link(const sdnn_config *cfg, sdnn_link *out, int *named);

/* The codec names the planner may choose for cfg (compress, or
 * compress_allow under compress=auto), written to names[0..max) as
 * pointers into buf (len bytes); *n = how many.  *ef[i] = whether codec i
 * runs with error feedback.  SDNN_ERR_INVALID past `max`. */
sdnn_status sdnn_autoplan_codec_names(const sdnn_config *cfg, char *buf, size_t len,
                                      const char **names, int *ef, int max, int *n);

/* "none 1, fp16 1, int8 1.25": the iteration factor of each codec the
 * planner may choose for cfg (sdnn_autoplan_codec_names, iter_factor=
 * over the codecs' own), for the start banner. */
void sdnn_autoplan_describe_factors(const sdnn_config *cfg, char *buf, size_t len);

/* For replicas shaped like `net` (nrep of them in this process, `world`
 * ranks in all) with the step's measurements m (the link is used only when
 * sdnn_autoplan_needs_link) and its agreement ag (NULL: one process). */
sdnn_status sdnn_autoplan_create(const network *net, int nrep, int world, const sdnn_config *cfg,
                                 const sdnn_plan_measured *m, const sdnn_plan_agree *ag,
                                 sdnn_autoplan **out);
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

/* 1 while the next step is a warm-up or profiled step (before the first
 * plan, and after a drift until the next): the trainer runs those without
 * overlap, so the per-layer times are the compute alone, not slowed by an
 * exchange on the same cores; the plan then runs with the cfg's overlap. */
int sdnn_autoplan_profiling(const sdnn_autoplan *a);

/* The plan in force (NULL before the first) and how many plans were made. */
const sdnn_plan *sdnn_autoplan_current(const sdnn_autoplan *a);
int sdnn_autoplan_count(const sdnn_autoplan *a);

/* The plan as a table: buckets, layers, bytes, codec, predicted start and
 * end, the predicted step and exposed time, and the link used. */
void sdnn_autoplan_print(const sdnn_autoplan *a, FILE *f);
/* A re-plan that kept the running plan (its new plan did not beat the
 * running one's time to accuracy, both predicted from the new profile, by
 * 5%: autoplan.c) leaves one line saying so: printed to f when a has kept
 * more than *seen times (the caller's count, 0 at start, updated here).
 * Nothing with a NULL a. */
void sdnn_autoplan_print_note(const sdnn_autoplan *a, int *seen, FILE *f);

#endif
