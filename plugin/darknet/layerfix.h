/*
 * layerfix: repairs of libdarknet's layers that every path running a
 * network needs (training in either mode, inference, the profiler), so
 * sdnn_parse_network applies them to every network it makes:
 *
 *  - strided or padded 1x1 convolutions get conv1x1.h's functions
 *    (fix_1x1_stride, on by default; the cpu engine takes them off for 0);
 *  - a [batchnorm] layer gets the buffers Debian's CPU build never
 *    allocates for it (x, x_norm, mean_delta, variance_delta: its training
 *    forward copies into x through NULL, on any layer).  free_layer frees
 *    them with the layer.
 */
#ifndef SDNN_LAYERFIX_H
#define SDNN_LAYERFIX_H

#include "scalednn.h"
#include <darknet.h>

/* Both repairs on `net`; SDNN_ERR_NOMEM (nothing half-made is left
 * unfreeable: free_layer frees whatever was allocated). */
sdnn_status sdnn_layerfix_apply(network *net);

#endif
