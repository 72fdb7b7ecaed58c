/*
 * dlayer: what every implementation of the device layers shares and no
 * kernel computes: the kinds' names and the sizes of each kind's parameter
 * tensors.  Plain C, compiled by every build (make GPU=1 and GPU=sim), so
 * the device layers (layers.cu) and the host glue count the same
 * parameters; and a host sum of a device buffer in index order.
 */
#include "dlayer.h"
#include "ops.h"

#include <limits.h>
#include <stdlib.h>

static const char *const kind_names[SDNN_DL_KIND_COUNT] = {
    "convolutional", "connected", "maxpool", "avgpool", "route", "shortcut",
    "upsample", "softmax", "cost", "dropout", "yolo", "region"};

const char *sdnn_dl_kind_name(int kind)
{
    return kind >= 0 && kind < SDNN_DL_KIND_COUNT ? kind_names[kind] : "unknown";
}

size_t sdnn_dl_nweights(const sdnn_dlayer *l)
{
    if (l->kind == SDNN_DL_CONV) return (size_t)l->nweights;
    if (l->kind == SDNN_DL_CONNECTED) return (size_t)l->inputs * l->outputs;
    return 0;
}

size_t sdnn_dl_nbiases(const sdnn_dlayer *l)
{
    if (l->kind == SDNN_DL_CONV) return (size_t)l->n;
    if (l->kind == SDNN_DL_CONNECTED) return (size_t)l->outputs;
    return 0;
}

size_t sdnn_dl_nscales(const sdnn_dlayer *l)
{
    return l->bn ? sdnn_dl_nbiases(l) : 0;
}

sdnn_status sdnn_dl_check_size(const sdnn_dlayer *l)
{
    size_t out = (size_t)(l->outputs > 0 ? l->outputs : 0) * (size_t)(l->batch > 0 ? l->batch : 0);
    size_t in = (size_t)(l->inputs > 0 ? l->inputs : 0) * (size_t)(l->batch > 0 ? l->batch : 0);
    if (l->outputs < 0 || l->inputs < 0 || l->batch < 0 || out > INT_MAX || in > INT_MAX)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "layer %d (%s): inputs %d, outputs %d, batch %d; the device kernels "
                          "index with int: inputs x batch and outputs x batch at most %d",
                          l->index, sdnn_dl_kind_name(l->kind), l->inputs, l->outputs, l->batch,
                          INT_MAX);
    return SDNN_OK;
}

sdnn_status sdnn_dl_host_sum(sdnn_dctx *c, const float *d, size_t n, float *sum)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a loss of %zu floats", n);
    sdnn_status st = sdnn_dcopy(c, SDNN_STREAM_COMPUTE, h, d, n * sizeof *h, 1);
    if (st != SDNN_OK) {
        free(h);
        return st;
    }
    float s = 0;
    for (size_t i = 0; i < n; ++i) s += h[i];
    free(h);
    *sum = s;
    return SDNN_OK;
}

void sdnn_dl_release_buffers(sdnn_dlayer *l)
{
    if (l->kind != SDNN_DL_DROPOUT) {
        sdnn_dfree(l->output);
        sdnn_dfree(l->delta);
    }
    l->output = l->delta = NULL;
    float **bufs[] = {&l->mean, &l->variance, &l->mean_delta, &l->variance_delta,
                      &l->rolling_mean, &l->rolling_variance, &l->x, &l->x_norm,
                      &l->rand, &l->loss, &l->act_x};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) {
        sdnn_dfree(*bufs[i]);
        *bufs[i] = NULL;
    }
    sdnn_dfree(l->indexes);
    l->indexes = NULL;
}

int sdnn_dl_act_keeps_x(const sdnn_dlayer *l)
{
    return (l->kind == SDNN_DL_CONV || l->kind == SDNN_DL_CONNECTED ||
            l->kind == SDNN_DL_SHORTCUT) &&
           (l->act == SDNN_ACT_MISH || l->act == SDNN_ACT_SWISH);
}

sdnn_status sdnn_dl_activate(sdnn_dctx *c, sdnn_dlayer *l)
{
    size_t n = (size_t)l->outputs * l->batch;
    if (sdnn_dl_act_keeps_x(l)) {
        if (!l->act_x)
            return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: no buffer for the activation's input",
                              l->index);
        SDNN_CHECK(sdnn_k_copy(c, l->act_x, l->output, n));
    }
    return sdnn_k_activate(c, l->output, n, l->act);
}

sdnn_status sdnn_dl_act_backward(sdnn_dctx *c, sdnn_dlayer *l)
{
    size_t n = (size_t)l->outputs * l->batch;
    const float *at = l->output;
    if (sdnn_dl_act_keeps_x(l)) {
        if (!l->act_x)
            return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: no buffer for the activation's input",
                              l->index);
        at = l->act_x;
    }
    return sdnn_k_gradient(c, at, n, l->act, l->delta);
}
