/*
 * stock: see stock.h.  The arithmetic follows Darknet's sync_nets: the host
 * buffer starts as replica 0's tensor, the others are added in replica
 * order, the sum is scaled by (float)(1.0/n), and the result is copied to
 * every replica.
 */
#include "stock.h"
#include "collective.h"
#include "replicas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int sdnn_stock_due(network **nets, int n, int interval)
{
    if (n < 2 || interval < 1) return 0;
    return get_current_batch(nets[0]) % (size_t)interval == 0;
}

static int averaged_type(LAYER_TYPE t)
{
    return t == CONVOLUTIONAL || t == DECONVOLUTIONAL || t == CONNECTED;
}

/* An average that overflowed stops training before it reaches a replica. */
static sdnn_status check_finite(network *base, int layer, const char *what, const float *v,
                                size_t len)
{
    for (size_t e = 0; e < len; ++e)
        if (!isfinite(v[e]))
            return SDNN_ERROR(SDNN_ERR_NONFINITE,
                              "non-finite averaged %s[%zu] of layer %d (%s) at iteration %zu; "
                              "training stopped, saved weights are left as they were",
                              what, e, layer, sdnn_layer_type_name(base->layers[layer].type),
                              get_current_batch(base));
    return SDNN_OK;
}

sdnn_status sdnn_stock_sync(network **nets, int n, int interval, size_t *bytes)
{
    *bytes = 0;
    network *base = nets[0];

    size_t cap = 0;
    float *host = NULL;
    const float scale = (float)(1.0 / n);
    for (int i = 0; i < base->n; ++i) {
        if (!averaged_type(base->layers[i].type)) continue;
        sdnn_param p0[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&base->layers[i], p0);
        for (int j = 0; j < np; ++j) {
            size_t len = p0[j].n;
            if (len > cap) {
                float *h = realloc(host, len * sizeof *h);
                if (!h) {
                    free(host);
                    return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the stock host buffer");
                }
                host = h;
                cap = len;
            }
            memcpy(host, p0[j].val, len * sizeof *host);
            for (int r = 1; r < n; ++r) {
                sdnn_param pr[SDNN_MAX_PARAMS_PER_LAYER];
                sdnn_layer_params(&nets[r]->layers[i], pr);
                const float *x = pr[j].val;
                for (size_t e = 0; e < len; ++e) host[e] += x[e];
            }
            for (size_t e = 0; e < len; ++e) host[e] *= scale;
            sdnn_status fin = check_finite(base, i, p0[j].what, host, len);
            if (fin != SDNN_OK) {
                free(host);
                return fin;
            }
            for (int r = 0; r < n; ++r) {
                sdnn_param pr[SDNN_MAX_PARAMS_PER_LAYER];
                sdnn_layer_params(&nets[r]->layers[i], pr);
                memcpy(pr[j].val, host, len * sizeof *host);
            }
            /* collective.h's definition: what each of the n replicas sends
             * for a central average (the host's sends included). */
            *bytes += (size_t)(sdnn_wire_bytes(SDNN_WIRE_CENTRAL, n,
                                               (double)(len * sizeof(float))) + 0.5);
        }
    }
    free(host);
    /* The counters catch up only once the average went through. */
    *base->seen += (size_t)interval * (size_t)(n - 1) * (size_t)base->batch *
                   (size_t)base->subdivisions;
    for (int r = 1; r < n; ++r) *nets[r]->seen = *base->seen;
    return SDNN_OK;
}

sdnn_status sdnn_stock_sync_world(network **nets, int n, sdnn_comm *comm, int interval,
                                  size_t *bytes)
{
    if (!comm || comm->size < 2) return sdnn_stock_sync(nets, n, interval, bytes);
    network *base = nets[0];
    /* Local mean first; the counters move once, for the whole world. */
    SDNN_CHECK(sdnn_stock_sync(nets, n, 0, bytes));
    /* Every averaged tensor in one buffer, in layer order, for one trip
     * through process 0. */
    size_t total = 0;
    for (int i = 0; i < base->n; ++i) {
        if (!averaged_type(base->layers[i].type)) continue;
        sdnn_param p0[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&base->layers[i], p0);
        for (int j = 0; j < np; ++j) total += p0[j].n;
    }
    float *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the stock average (%zu floats)", total);
    size_t off = 0;
    for (int i = 0; i < base->n; ++i) {
        if (!averaged_type(base->layers[i].type)) continue;
        sdnn_param p0[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&base->layers[i], p0);
        for (int j = 0; j < np; ++j) {
            memcpy(all + off, p0[j].val, p0[j].n * sizeof *all);
            off += p0[j].n;
        }
    }
    sdnn_status st = sdnn_comm_central_mean(comm, all, total, NULL);
    if (st != SDNN_OK) {
        free(all);
        return st;
    }
    /* One central average over every replica of every process (the local
     * mean's bytes above are part of it, so this is the step's figure). */
    *bytes = (size_t)(sdnn_wire_bytes(SDNN_WIRE_CENTRAL, n * comm->size,
                                      (double)(total * sizeof(float))) + 0.5);
    off = 0;
    for (int i = 0; i < base->n; ++i) {
        if (!averaged_type(base->layers[i].type)) continue;
        sdnn_param p0[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&base->layers[i], p0);
        for (int j = 0; j < np; ++j) {
            const float *v = all + off;
            sdnn_status fin = check_finite(base, i, p0[j].what, v, p0[j].n);
            if (fin != SDNN_OK) {
                free(all);
                return fin;
            }
            for (int r = 0; r < n; ++r) {
                sdnn_param pr[SDNN_MAX_PARAMS_PER_LAYER];
                sdnn_layer_params(&nets[r]->layers[i], pr);
                memcpy(pr[j].val, v, p0[j].n * sizeof(float));
            }
            off += p0[j].n;
        }
    }
    free(all);
    int world = n * comm->size;
    *base->seen += (size_t)interval * (size_t)(world - 1) * (size_t)base->batch *
                   (size_t)base->subdivisions;
    for (int r = 1; r < n; ++r) *nets[r]->seen = *base->seen;
    return SDNN_OK;
}
