/*
 * profile: the measured inputs of the cost model on this machine.
 *
 *  - per-layer forward, backward and update times of a Darknet network,
 *    measured by calling each layer's own forward/backward/update the way
 *    Darknet's forward_network/backward_network/update_network do, with
 *    the convolutions training runs (cpu_conv=, and the 1x1 delta fix) but
 *    without the exchange's hooks;
 *    (the link of a comm backend is measured by the step, which owns the
 *    comm: plugin/step/measure.h);
 *  - a codec's encode and decode rates;
 *  - profiles saved to and loaded from a small CSV, so a profile measured
 *    on one machine (a GPU) can drive `simulate` on another.
 */
#ifndef SDNN_PROFILE_H
#define SDNN_PROFILE_H

#include "codec.h"
#include "costmodel.h"
#include "scalednn.h"
#include <darknet.h>
#include <stdint.h>

typedef struct sdnn_profile_opts {
    int iters;      /* timed passes; each layer's median is kept (>= 1) */
    int warmup;     /* untimed passes first (>= 0) */
    uint64_t seed;  /* random input, uniform in [0, 1) */
    const float *input; /* NULL, or net->inputs x net->batch floats used
                         * instead of random ones */
    const char *cpu_conv; /* the run's cpu_conv= (darknet, onednn, auto); NULL:
                           * its default (SDNN_CONFIG_INIT), what a cfg
                           * without the key trains with */
} sdnn_profile_opts;

#define SDNN_PROFILE_OPTS_INIT { .iters = 5, .warmup = 1, .seed = 1, .input = NULL, \
                                 .cpu_conv = NULL }

/*
 * Time every layer of `net` on an input batch (net->batch images, random or o->input,
 * the truth left as it is: zeros after parsing).  The network is changed
 * as a training step would change it, apart from its weights (updates are
 * timed with learning rate 0): inputs, outputs, deltas, update buffers and
 * batch-norm running statistics; profile a network of its own.  Layers at
 * or before a stopbackward get no backward time and no bytes (they are not
 * exchanged).  SDNN_ERR_UNSUPPORTED for a layer whose parameters
 * sdnn_layer_params cannot view.
 */
sdnn_status sdnn_profile_network(network *net, const sdnn_profile_opts *o,
                                 sdnn_cost_profile *out);

/* Encode and decode rates of codec c on n floats (median of iters), as a
 * cost model codec; the identity codec costs nothing. */
sdnn_status sdnn_probe_codec(const sdnn_codec_ops *c, const sdnn_codec_params *p, size_t n,
                             int iters, sdnn_codec_model *out);

/*
 * Profile files: a comment line "# scalednn profile batch=B subdivisions=S",
 * the header "layer,type,fwd_s,bwd_s,upd_s,bytes,tensors" and one row per
 * layer in order.  Load errors name the file and line.
 */
sdnn_status sdnn_profile_save(const sdnn_cost_profile *p, const char *path);
sdnn_status sdnn_profile_load(const char *path, sdnn_cost_profile *out);

#endif
