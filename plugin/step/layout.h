/*
 * layout: the partition of a network's exchanged layers into buckets.
 *
 * One module decides which layer travels in which bucket and at which
 * offset, for the exchange, the planner (sdnn_plan_fixed), the cost model
 * and every engine, so bucket boundaries are the same everywhere by
 * construction.
 *
 * Layers are taken in reverse order (the order backward finishes them).
 * A layer is exchanged when it has parameters and is trained (no layer at
 * or after it... i.e. it is after the last stopbackward layer).  Its
 * tensors (sdnn_layer_params order: weights, biases, scales) lie one after
 * another at the layer's offset in its bucket.
 *
 * Fixed partition: a new bucket starts when the current one already holds
 * at least bucket_mb MiB (so the last layer added may overshoot).  Plan
 * partition: buckets [lo, hi] given in exchange order, checked to cover
 * every exchanged layer exactly once, none empty.
 */
#ifndef SDNN_LAYOUT_H
#define SDNN_LAYOUT_H

#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>

typedef struct sdnn_layout_layer {
    int bucket;        /* -1: not exchanged */
    size_t offset;     /* first float of the layer in its bucket */
    size_t count;      /* floats of the layer (0: not exchanged) */
} sdnn_layout_layer;

typedef struct sdnn_layout_bucket {
    int lo, hi;        /* lowest and highest exchanged layer in it */
    int nlayers;       /* exchanged layers in it */
    size_t count;      /* floats */
} sdnn_layout_bucket;

typedef struct sdnn_layout {
    int nlayers;              /* layers of the network */
    int nbuckets;
    size_t total;             /* floats over every bucket */
    sdnn_layout_layer *layer; /* [nlayers] */
    sdnn_layout_bucket *bucket; /* [nbuckets], bucket 0 holds the last layers */
} sdnn_layout;

/* One bucket of a plan: layers hi down to lo. */
typedef struct sdnn_layout_range {
    int lo, hi;
} sdnn_layout_range;

/* Floats each layer of `net` would exchange (0 for layers without
 * parameters and layers before the last stopbackward).  counts has
 * net->n entries.  SDNN_ERR_UNSUPPORTED names a layer with parameters
 * scalednn cannot view. */
sdnn_status sdnn_layout_counts(const network *net, size_t *counts);

/* Fixed partition of layers with counts[0..nlayers-1] into buckets of
 * bucket_mb MiB (> 0). */
sdnn_status sdnn_layout_fixed(const size_t *counts, int nlayers, double bucket_mb,
                              sdnn_layout *out);
/* Partition given by a plan of n ranges in exchange order. */
sdnn_status sdnn_layout_plan(const size_t *counts, int nlayers, const sdnn_layout_range *plan,
                             int n, sdnn_layout *out);
/* Either of the above for a network (plan NULL: fixed). */
sdnn_status sdnn_layout_build(const network *net, double bucket_mb, const sdnn_layout_range *plan,
                              int nplan, sdnn_layout *out);
void sdnn_layout_free(sdnn_layout *l);

#endif
