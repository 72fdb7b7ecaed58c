/*
 * layerfix: see layerfix.h.
 */
#include "layerfix.h"
#include "conv1x1.h"

#include <stdlib.h>

/* calloc'd n floats into *p when it is NULL; 0, or -1 without memory. */
static int ensure(float **p, size_t n)
{
    if (!*p) *p = calloc(n ? n : 1, sizeof **p);
    return *p ? 0 : -1;
}

sdnn_status sdnn_layerfix_apply(network *net)
{
    sdnn_conv1x1_attach(net);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != BATCHNORM) continue;
        size_t n = (size_t)l->outputs * (size_t)l->batch, c = (size_t)l->out_c;
        if (ensure(&l->x, n) || ensure(&l->x_norm, n) || ensure(&l->mean_delta, c) ||
            ensure(&l->variance_delta, c))
            return SDNN_ERROR(SDNN_ERR_NOMEM, "layer %d (batchnorm): no memory for its "
                              "training buffers (%zu floats)", i, 2 * n + 2 * c);
    }
    return SDNN_OK;
}
