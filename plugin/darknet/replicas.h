/*
 * replicas: N Darknet networks that train one model side by side.
 *
 * Owns the per-layer views of parameters and their update (gradient)
 * buffers, the one-after-another parsing of replicas (Darknet's rand_normal
 * is not thread-safe) followed by the broadcast of replica 0's weights, the
 * averaging of batch-norm running statistics before a save, and the
 * bit-identity check the tests use.
 */
#ifndef SDNN_REPLICAS_H
#define SDNN_REPLICAS_H

#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>

/* One trainable tensor of a layer and the buffer Darknet accumulates its
 * (negative, batch-summed, momentum-carrying) gradient in. */
typedef struct sdnn_param {
    float *val;
    float *upd;
    size_t n;
    const char *what;   /* "weights", "biases", "scales" */
} sdnn_param;

#define SDNN_MAX_PARAMS_PER_LAYER 3

/* Fills out[] with the trainable tensors of `l` and returns how many
 * (0 for layers without parameters).  Returns -1 for a layer type with
 * parameters that scalednn does not know how to view (RNN, LOCAL, ...). */
int sdnn_layer_params(const layer *l, sdnn_param out[SDNN_MAX_PARAMS_PER_LAYER]);

/* Running mean and variance of a layer with batch norm and their length
 * (0 when the layer has none). */
size_t sdnn_layer_bn_stats(const layer *l, float **mean, float **var);

/* Name of a Darknet layer type, for messages. */
const char *sdnn_layer_type_name(LAYER_TYPE t);

/* Parse `n` replicas of the cfg at `cfgpath` (a Darknet-parsable file, e.g.
 * the stripped memfd path) one after another, load `weights` (may be NULL)
 * into replica 0, clear its `seen` when `clear`, and copy replica 0's
 * parameters, running statistics and counters into the others.  A weights
 * file that does not fit the cfg (see sdnn_check_weights_file; a prefix of
 * whole layers is fine) is SDNN_ERR_INVALID.  On error, nothing is left
 * allocated. */
sdnn_status sdnn_replicas_create(const char *cfgpath, const char *weights,
                                 int clear, int n, network ***out);
void sdnn_replicas_free(network **nets, int n);

/* free_network plus what it leaves behind (seen, t, cost, workspace, the
 * steps and scales of the rate policy). */
void sdnn_network_free(network *net);

/* Copy parameters, batch-norm statistics, update buffers and the
 * seen/t counters of nets[0] into nets[1..n-1]. */
sdnn_status sdnn_replicas_broadcast(network **nets, int n);

/* Replace every replica's rolling mean/variance by their mean over
 * replicas (scalednn mode does this before every save). */
void sdnn_replicas_average_bn(network **nets, int n);

/* 1 when every parameter and update buffer of every replica equals replica
 * 0's bit for bit (running statistics are per replica and not compared); else 0 and, if where != NULL, a
 * description of the first difference. */
int sdnn_replicas_identical(network **nets, int n, char *where, size_t len);

/* Total number of trainable floats (what a gradient exchange moves). */
size_t sdnn_network_param_count(const network *net);

#endif
