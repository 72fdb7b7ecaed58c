/*
 * agree: between processes, the settings that must be the same on every
 * rank are compared at start, before the first collective (which would
 * otherwise fail late and indirectly: MPI_ERR_TRUNCATE, a timeout, a lost
 * final save).  Each rank describes them in short texts (the network's
 * shape and parameter count, learning rate, mode, codec and its options,
 * buckets, max_batches, replicas per process, the weights' iteration);
 * rank 0's texts are broadcast and every rank compares its own.
 */
#ifndef SDNN_AGREE_H
#define SDNN_AGREE_H

#include "comm.h"
#include "config.h"
#include "scalednn.h"

#include <darknet.h>

/* Collective over `comm` (a no-op for a world of one process).  SDNN_OK
 * when every rank agrees; otherwise SDNN_ERR_INVALID on every rank, the
 * ranks that differ naming each setting with their value and rank 0's. */
sdnn_status sdnn_agree_check(sdnn_comm *comm, network *const *nets, int n, const sdnn_config *cfg);

#endif
