/*
 * dlayer: what every implementation of the device layers shares and no
 * kernel computes: the kinds' names and the sizes of each kind's parameter
 * tensors.  Plain C, compiled by every build (make GPU=1 and GPU=sim), so
 * the CUDA layers (layers.cu) and the simulated ones (sim/sim_layers.c)
 * count the same parameters; and the loss sum both take to the host.
 */
#include "dlayer.h"

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
                      &l->rand, &l->loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) {
        sdnn_dfree(*bufs[i]);
        *bufs[i] = NULL;
    }
    sdnn_dfree(l->indexes);
    l->indexes = NULL;
}
