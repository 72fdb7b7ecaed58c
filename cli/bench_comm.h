/*
 * ./darknet scalednn bench-comm: the comm backends' allreduce-mean, plain
 * and compressed, timed and checked over a sweep of sizes in the style of
 * nccl-tests (same flags, size/time/algbw/busbw/#wrong columns, JSON).
 */
#ifndef SDNN_BENCH_COMM_H
#define SDNN_BENCH_COMM_H

/* argv[0] = "bench-comm".  Returns 0 when every result is within its
 * bound, 1 when a check or a collective failed, 2 on bad usage. */
int sdnn_cmd_bench_comm(int argc, char **argv);

#endif
