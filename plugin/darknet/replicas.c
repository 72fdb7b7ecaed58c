/*
 * replicas: per-layer parameter views and replica management (see
 * replicas.h).  Darknet's layer struct says how big each tensor is only
 * partly (connected layers leave nweights at 0), so the sizes come from the
 * layer type here, in one place.
 */
#include "dialect.h"
#include "replicas.h"
#include "saveio.h"

#include <stdio.h>
#include <string.h>

const char *sdnn_layer_type_name(LAYER_TYPE t)
{
    static const char *names[] = {
        "convolutional", "deconvolutional", "connected", "maxpool", "softmax",
        "detection", "dropout", "crop", "route", "cost", "normalization",
        "avgpool", "local", "shortcut", "active", "rnn", "gru", "lstm", "crnn",
        "batchnorm", "network", "xnor", "region", "yolo", "iseg", "reorg",
        "upsample", "logxent", "l2norm", "blank"};
    if ((int)t >= 0 && (size_t)t < sizeof names / sizeof names[0]) return names[t];
    return "unknown";
}

static int add_param(sdnn_param *out, int k, float *val, float *upd, size_t n,
                     const char *what)
{
    if (!val || !upd || n == 0) return k;
    out[k].val = val;
    out[k].upd = upd;
    out[k].n = n;
    out[k].what = what;
    return k + 1;
}

int sdnn_layer_params(const layer *l, sdnn_param out[SDNN_MAX_PARAMS_PER_LAYER])
{
    int k = 0;
    size_t nw, nb;
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL:
        nw = (size_t)l->nweights;
        nb = (size_t)l->n;
        break;
    case CONNECTED:
        nw = (size_t)l->inputs * (size_t)l->outputs;
        nb = (size_t)l->outputs;
        break;
    default:
        return l->update ? -1 : 0;
    }
    k = add_param(out, k, l->weights, l->weight_updates, nw, "weights");
    k = add_param(out, k, l->biases, l->bias_updates, nb, "biases");
    if (l->batch_normalize)
        k = add_param(out, k, l->scales, l->scale_updates, nb, "scales");
    return k;
}

size_t sdnn_layer_bn_stats(const layer *l, float **mean, float **var)
{
    *mean = l->rolling_mean;
    *var = l->rolling_variance;
    if (!l->rolling_mean || !l->rolling_variance) return 0;
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL: return l->batch_normalize ? (size_t)l->n : 0;
    case CONNECTED: return l->batch_normalize ? (size_t)l->outputs : 0;
    case BATCHNORM: return (size_t)l->c;
    default: return 0;
    }
}

size_t sdnn_network_param_count(const network *net)
{
    size_t total = 0;
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(&net->layers[i], p);
        for (int j = 0; j < k; ++j) total += p[j].n;
    }
    return total;
}

sdnn_status sdnn_replicas_broadcast(network **nets, int n)
{
    network *src = nets[0];
    for (int r = 1; r < n; ++r) {
        network *dst = nets[r];
        if (dst->n != src->n)
            return SDNN_ERROR(SDNN_ERR_INTERNAL, "replica %d has %d layers, replica 0 has %d",
                              r, dst->n, src->n);
        for (int i = 0; i < src->n; ++i) {
            sdnn_param ps[SDNN_MAX_PARAMS_PER_LAYER], pd[SDNN_MAX_PARAMS_PER_LAYER];
            int ks = sdnn_layer_params(&src->layers[i], ps);
            int kd = sdnn_layer_params(&dst->layers[i], pd);
            if (ks != kd)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "replica %d layer %d differs in shape", r, i);
            for (int j = 0; j < ks; ++j) {
                memcpy(pd[j].val, ps[j].val, ps[j].n * sizeof(float));
                memcpy(pd[j].upd, ps[j].upd, ps[j].n * sizeof(float));
            }
            float *sm, *sv, *dm, *dv;
            size_t nbn = sdnn_layer_bn_stats(&src->layers[i], &sm, &sv);
            if (nbn && sdnn_layer_bn_stats(&dst->layers[i], &dm, &dv) == nbn) {
                memcpy(dm, sm, nbn * sizeof(float));
                memcpy(dv, sv, nbn * sizeof(float));
            }
        }
        *dst->seen = *src->seen;
        *dst->t = *src->t;
    }
    return SDNN_OK;
}

void sdnn_replicas_average_bn(network **nets, int n)
{
    if (n < 2) return;
    float inv = 1.0f / (float)n;
    for (int i = 0; i < nets[0]->n; ++i) {
        float *m0, *v0;
        size_t len = sdnn_layer_bn_stats(&nets[0]->layers[i], &m0, &v0);
        for (size_t e = 0; e < len; ++e) {
            float sm = 0.f, sv = 0.f;
            for (int r = 0; r < n; ++r) {
                sm += nets[r]->layers[i].rolling_mean[e];
                sv += nets[r]->layers[i].rolling_variance[e];
            }
            for (int r = 0; r < n; ++r) {
                nets[r]->layers[i].rolling_mean[e] = sm * inv;
                nets[r]->layers[i].rolling_variance[e] = sv * inv;
            }
        }
    }
}

int sdnn_replicas_identical(network **nets, int n, char *where, size_t len)
{
    for (int r = 1; r < n; ++r) {
        for (int i = 0; i < nets[0]->n; ++i) {
            sdnn_param a[SDNN_MAX_PARAMS_PER_LAYER], b[SDNN_MAX_PARAMS_PER_LAYER];
            int ka = sdnn_layer_params(&nets[0]->layers[i], a);
            int kb = sdnn_layer_params(&nets[r]->layers[i], b);
            if (ka != kb) goto differ_shape;
            for (int j = 0; j < ka; ++j) {
                if (memcmp(a[j].val, b[j].val, a[j].n * sizeof(float)) != 0) {
                    if (where) snprintf(where, len, "replica %d layer %d %s", r, i, a[j].what);
                    return 0;
                }
                if (memcmp(a[j].upd, b[j].upd, a[j].n * sizeof(float)) != 0) {
                    if (where) snprintf(where, len, "replica %d layer %d %s updates", r, i, a[j].what);
                    return 0;
                }
            }
            continue;
        differ_shape:
            if (where) snprintf(where, len, "replica %d layer %d shape", r, i);
            return 0;
        }
    }
    return 1;
}

void sdnn_network_free(network *net)
{
    if (!net) return;
    sdnn_dialect_forget(net);
    /* Darknet's free_network frees the layers, input, truth and the struct;
     * these come from make_network, parse_net_options, parse_network_cfg
     * and the yolo mask parser and would leak every time. */
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == YOLO) free(net->layers[i].mask);   /* free_layer does not */
    free(net->seen);
    free(net->t);
    free(net->cost);
    free(net->workspace);
    free(net->steps);
    free(net->scales);
    free_network(net);
}

void sdnn_replicas_free(network **nets, int n)
{
    if (!nets) return;
    for (int r = 0; r < n; ++r) sdnn_network_free(nets[r]);
    free(nets);
}

sdnn_status sdnn_replicas_create(const char *cfgpath, const char *weights,
                                 int clear, int n, network ***out)
{
    *out = NULL;
    if (n < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "need at least one replica, got %d", n);
    network **nets = calloc((size_t)n, sizeof *nets);
    if (!nets) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d replicas", n);
    /* One after another: parsing draws initial weights from rand_normal. */
    for (int r = 0; r < n; ++r) {
        nets[r] = sdnn_parse_network(cfgpath);
        if (!nets[r]) {
            sdnn_replicas_free(nets, n);
            return SDNN_ERROR(SDNN_ERR_INVALID, "darknet could not parse %s: %s", cfgpath, sdnn_last_error());
        }
    }
    if (weights && weights[0]) {
        sdnn_status st = sdnn_check_weights_file(nets[0], weights, 0, NULL);
        if (st != SDNN_OK) {
            sdnn_replicas_free(nets, n);
            return st;
        }
        load_weights(nets[0], (char *)weights);
    }
    if (clear) *nets[0]->seen = 0;
    sdnn_status st = sdnn_replicas_broadcast(nets, n);
    if (st != SDNN_OK) {
        sdnn_replicas_free(nets, n);
        return st;
    }
    *out = nets;
    return SDNN_OK;
}
