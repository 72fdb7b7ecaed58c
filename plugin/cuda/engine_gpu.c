/*
 * engine_gpu: the `gpu` entry of the engine registry (plugin/engine/) in
 * builds with a GPU engine (make GPU=1, GPU=sim); builds without one get
 * plugin/engine/gpu_stub.c instead.
 *
 * State (issue 13, in progress): the device trainer of this folder (net.c,
 * group.c, preload.c, ring.c) is not yet driven through the engine table.
 * Until it is, this entry says so: available() is 0 with that reason, so
 * engine=auto resolves to cpu and says why once at start, and engine=gpu
 * is refused by sdnn_engine_resolve naming the reason; create() refuses
 * too.  The device trainer itself (sdnn_gpu_group_*) is unchanged and
 * tested against the CPU trainer by tests/gpu/engines.c.
 */
#ifdef GPU
#error "never compile the engine with -DGPU: Debian's libdarknet is a CPU build (layer layout)"
#endif
#include "engine.h"
#include "gpu.h"

#include <stdio.h>

#define NOT_YET "the device trainer is not yet driven through the engine table (issue 13)"

static int eg_available(int ndev, char *why, size_t len)
{
    int have = 0;
    if (!sdnn_gpu_available() || sdnn_gpu_device_count(&have) != SDNN_OK) have = 0;
    if (why && len) {
        if (have < ndev)
            snprintf(why, len, "%d device%s for %d replica%s; and %s", have,
                     have == 1 ? "" : "s", ndev, ndev == 1 ? "" : "s", NOT_YET);
        else
            snprintf(why, len, "%s", NOT_YET);
    }
    return 0;
}

static sdnn_status eg_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    (void)o;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine gpu (%d replica%s): %s", e->n,
                      e->n == 1 ? "" : "s", NOT_YET);
}

static void eg_destroy(sdnn_engine *e) { (void)e; }

const sdnn_engine_ops sdnn_engine_gpu = {
    .name = "gpu",
    .available = eg_available,
    .create = eg_create,
    .destroy = eg_destroy,
};
