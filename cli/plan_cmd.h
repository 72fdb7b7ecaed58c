/*
 * ./darknet scalednn plan | simulate: the cost model on the command line
 * (plan.c, simulate.c; what both measure: plan_shared.c; flags: flags.h,
 * `-h` prints each command's).
 *
 *   plan DATA CFG [-gpus LIST] [-link NAME | -link_GBps X [-link_us Y]]
 *        [-compress_allow LIST] [-iters N] [-profile FILE] [-save_profile FILE] [-v]
 *     profiles CFG on this machine (or loads a profile), measures the comm
 *     backend's link (or takes a named one) and each allowed codec's rates,
 *     and prints the automatic plan (bucket_mb=auto, compress=auto) as a
 *     table next to the prediction for the cfg's own bucket_mb.
 *
 *   simulate CFG -topology pcie|nvlink|eth|ib [-gpus N] [-nodes M]
 *        [-speed F] [-profile FILE] [-csv FILE] [-link NAME]
 *        [-codec NAME] [-compress_allow LIST] [-bucket_mb X] [-interval K]
 *        (`--flag` is read as `-flag`, the syntax of earlier versions)
 *     predicts step time and scaling efficiency of stock Darknet and of
 *     scalednn (no overlap, overlap, overlap + codec, planned) on a named
 *     machine, as a table and optionally a CSV (scripts/plot_scaling.sh
 *     draws it).
 *
 * Both return the process exit code: 0 done, 1 a failure, 2 bad usage.
 */
#ifndef SDNN_CLI_PLAN_H
#define SDNN_CLI_PLAN_H

/* argv[0] = "plan" */
int sdnn_cmd_plan(int argc, char **argv);
/* argv[0] = "simulate" */
int sdnn_cmd_simulate(int argc, char **argv);

#endif
