/*
 * dlayer: what every implementation of the device layers shares and no
 * kernel computes: the kinds' names and the sizes of each kind's parameter
 * tensors.  Plain C, compiled by every build (make GPU=1 and GPU=sim), so
 * the CUDA layers (layers.cu) and the simulated ones (sim/sim_layers.c)
 * count the same parameters.
 */
#include "dev.h"

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
