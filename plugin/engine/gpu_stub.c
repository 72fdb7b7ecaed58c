/*
 * gpu_stub: the gpu engine's entry in a build without a GPU engine (no
 * make GPU=1 / GPU=sim): the registry lists it, available() says why it
 * cannot run, and create() refuses.  Builds with SDNN_GPU_ENGINE get the
 * real engine from plugin/cuda/engine_gpu.c instead.
 */
#include "engine.h"

#include <stdio.h>

#if !SDNN_GPU_ENGINE

static int gs_available(int ndev, char *why, size_t len)
{
    (void)ndev;
    if (why && len) snprintf(why, len, "this build has no GPU runtime (build with make GPU=1 or GPU=sim)");
    return 0;
}

static sdnn_status gs_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    (void)e; (void)o;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine gpu: this build has no GPU runtime "
                      "(build with make GPU=1 or GPU=sim)");
}

static void gs_destroy(sdnn_engine *e) { (void)e; }

const sdnn_engine_ops sdnn_engine_gpu = {
    .name = "gpu",
    .available = gs_available,
    .create = gs_create,
    .destroy = gs_destroy,
};

#endif
