/*
 * gpu_stub: the gpu engine's entry in a build without a GPU engine (no
 * make GPU=1 / GPU=sim): the registry lists it, available() says why it
 * cannot run, and create() refuses.  Builds with SDNN_GPU_ENGINE get the
 * real engine from plugin/cuda/engine_gpu.c instead.
 */
#include "engine.h"

#include <stdio.h>

#if !SDNN_GPU_ENGINE

#define GS_WHY "this is a CPU build, without a GPU runtime: build with make GPU=1 (CUDA) " \
               "or make GPU=sim (simulated devices), or set engine=cpu"

static int gs_available(int ndev, char *why, size_t len)
{
    (void)ndev;
    if (why && len) snprintf(why, len, "%s", GS_WHY);
    return 0;
}

static int gs_available_on(const int *devices, int n, char *why, size_t len)
{
    (void)devices;
    return gs_available(n, why, len);
}

static void gs_describe_device(int dev, char *buf, size_t len)
{
    snprintf(buf, len, "device %d: not usable (%s)", dev, GS_WHY);
}

static sdnn_status gs_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    (void)e; (void)o;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine gpu: %s", GS_WHY);
}

static void gs_destroy(sdnn_engine *e) { (void)e; }

static sdnn_status gs_feed(sdnn_engine *e, data batch)
{
    (void)e; (void)batch;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine gpu: %s", GS_WHY);
}

const sdnn_engine_ops sdnn_engine_gpu = {
    .name = "gpu",
    .available = gs_available,
    .create = gs_create,
    .destroy = gs_destroy,
    .available_on = gs_available_on,
    .describe_device = gs_describe_device,
    .feed = gs_feed,
};

#endif
