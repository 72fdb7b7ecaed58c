/*
 * stock: Darknet's own multi-device protocol, reproduced as the baseline.
 *
 * Each replica takes its own SGD steps on its slice of the batch.  Every
 * `interval` iterations (counted on replica 0 as Darknet does) the weights,
 * biases and batch-norm scales of convolutional, deconvolutional and
 * connected layers are averaged through one host buffer and copied back to
 * every replica, and the `seen` counters catch up with the images the other
 * replicas trained on.  Running statistics are not averaged.
 */
#ifndef SDNN_STOCK_H
#define SDNN_STOCK_H

#include "comm.h"
#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>

/* 1 when Darknet's train_networks would sync after this step. */
int sdnn_stock_due(network **nets, int n, int interval);

/* The sync itself.  *bytes gets the bytes moved to and from the host
 * buffer.  A non-finite averaged weight is SDNN_ERR_NONFINITE. */
sdnn_status sdnn_stock_sync(network **nets, int n, int interval, size_t *bytes);

/* The sync over processes too (comm->size > 1; otherwise sdnn_stock_sync):
 * each process averages its replicas as above, then Darknet's central host
 * between processes: every averaged tensor, packed into one buffer, goes
 * to process 0, which sums the processes' buffers in rank order and scales
 * once (comm's central_mean), and the result comes back to every replica;
 * `seen` catches up with interval x (world - 1) batches (world = n x
 * processes).  With one replica per process this is Darknet's sync_nets
 * over the world's devices bit for bit; with more, a mean of process means
 * (the same number up to rounding in the last bits).  *bytes adds what
 * this process sent (process 0: (P-1) x the weights, the others 1 x).
 * Every process must call it at the same step. */
sdnn_status sdnn_stock_sync_world(network **nets, int n, sdnn_comm *comm, int interval,
                                  size_t *bytes);

#endif
