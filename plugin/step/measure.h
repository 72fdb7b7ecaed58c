/*
 * measure: what the planner (plugin/plan/autoplan.h) is handed, measured by
 * the step, which owns the engine and the comm.
 *
 *  - the link: timed allreduce_mean at 16 KiB, 256 KiB, 1 MiB and 4 MiB per
 *    buffer, on buffers the engine allocated (buf_alloc: device memory on
 *    a device engine, so backend=nccl is timed on what it carries), through
 *    the comm the exchange uses (the engine's comm_open), fitted to the
 *    ring formula (sdnn_link_fit);
 *  - the codecs' encode and decode rates (sdnn_probe_codec, host code);
 *  - both once per world: process 0's figures are broadcast over the host
 *    comm (rounded to float on every process alike), so every process plans
 *    from the same numbers.
 *
 * The planner never calls a comm; its agreement between processes (the
 * profile's mean, process 0's plan and drift verdict) goes through the
 * sdnn_plan_agree callbacks made here over the host comm.
 */
#ifndef SDNN_MEASURE_H
#define SDNN_MEASURE_H

#include "autoplan.h"
#include "comm.h"
#include "config.h"
#include "engine.h"
#include "scalednn.h"

/*
 * The link of comm `c` as `world` ranks with `nin` local buffers per
 * process (world >= 2): buffers from engine e (buf_alloc of replica r for
 * buffer r, the mean in replica 0's memory), or host memory with random
 * values when e is NULL.  allreduce_mean timed `iters` times (median) at
 * each size after two untimed calls.  *rms (may be NULL) = root-mean-square
 * relative error of the fit.
 */
sdnn_status sdnn_probe_link_on(sdnn_engine *e, sdnn_comm *c, int nin, int world, int iters,
                               sdnn_link *out, double *rms);

/* sdnn_probe_link_on(NULL, c, nin, nin x c->size, ...): host buffers. */
sdnn_status sdnn_probe_link(sdnn_comm *c, int nin, int iters, sdnn_link *out, double *rms);

/*
 * Everything sdnn_autoplan_create needs measured for cfg, for replicas of a
 * world of `world` ranks, nrep of them in this process: the link (only
 * when the cfg names none: no link=, no link_gbps=, world >= 2) through
 * engine e and its comm `dev` (the exchange's), and every codec the cfg
 * may use (compress, or compress_allow under compress=auto).  host is the
 * trainer's comm (NULL or one process: nothing to agree); process 0's
 * figures are broadcast over it.
 */
sdnn_status sdnn_measure_for_plan(sdnn_engine *e, sdnn_comm *dev, sdnn_comm *host, int nrep,
                                  int world, const sdnn_config *cfg, sdnn_plan_measured *out);

/* The planner's agreement over host comm c (NULL: a world of one
 * process): broadcast = process 0's values, mean = allreduce_mean of one
 * buffer (the same bits everywhere). */
sdnn_plan_agree sdnn_plan_agree_over(sdnn_comm *c);

#endif
