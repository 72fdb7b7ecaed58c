/*
 * probe: the engine loads and answers on any machine.
 *
 *   probe [--expect-none | --expect-device] [CFG...]
 *
 * Without a device every entry point must fail cleanly with
 * SDNN_ERR_UNSUPPORTED and "no CUDA device" (no crash, no exit); with one,
 * the devices are listed and a network is mirrored and freed.  On both,
 * every layer of the given cfgs (default: the shipped ones and Debian's
 * yolov3-tiny, yolov2-tiny and cifar) must be a layer the engine runs.
 */
#include "engine.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"

static const char *default_cfgs[] = {"cfg/shapes.cfg", "cfg/fmnist.cfg", "@yolov3-tiny.cfg",
                                     "@yolov2-tiny.cfg", "@cifar.cfg"};

/* "@name": Debian's cfg, from SDNN_DEBIAN_CFG or /usr/share/darknet/cfg. */
static void resolve(const char *name, char *out, size_t len)
{
    if (name[0] != '@') {
        snprintf(out, len, "%s", name);
        return;
    }
    const char *dir = getenv("SDNN_DEBIAN_CFG");
    snprintf(out, len, "%s/%s", dir && *dir ? dir : "/usr/share/darknet/cfg", name + 1);
}

static void check_support(const char *name)
{
    char path[512];
    resolve(name, path, sizeof path);
    if (access(path, R_OK) != 0) {
        SOFT_ASSERT(0, "%s: cannot read it", path);
        return;
    }
    network *net = gt_parse_file(path, "batch=1\nsubdivisions=1\n");
    SOFT_ASSERT(net != NULL, "%s parses", path);
    if (!net) return;
    int bad = 0;
    for (int i = 0; i < net->n; ++i) {
        sdnn_clear_error();
        sdnn_status s = sdnn_gpu_layer_support(net, i);
        if (s != SDNN_OK) {
            ++bad;
            printf("    %s layer %d: %s\n", path, i, sdnn_last_error());
        }
    }
    SOFT_ASSERT(bad == 0, "%s: all %d layers run on the GPU engine", path, net->n);
    sdnn_network_free(net);
}

int main(int argc, char **argv)
{
    argv0_ = "probe";
    int expect = 0;   /* -1 none, 1 device */
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--expect-none") == 0) expect = -1, first = 2;
    else if (argc > 1 && strcmp(argv[1], "--expect-device") == 0) expect = 1, first = 2;

    int n = -1;
    sdnn_clear_error();
    sdnn_status s = sdnn_gpu_device_count(&n);
    printf("devices: %d (%s)%s%s\n", n, sdnn_strerror(s), s ? ": " : "", s ? sdnn_last_error() : "");
    if (expect == -1) SOFT_ASSERT(s != SDNN_OK && n == 0, "no device expected");
    if (expect == 1) SOFT_ASSERT(s == SDNN_OK && n > 0, "a device expected");
    SOFT_ASSERT(sdnn_gpu_available() == (s == SDNN_OK), "sdnn_gpu_available agrees");

    if (s != SDNN_OK) {
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED, "device count: unsupported (got %s)", sdnn_strerror(s));
        SOFT_ASSERT(strstr(sdnn_last_error(), "no CUDA device") != NULL, "message names it: %s",
                 sdnn_last_error());
        sdnn_gpu_vdev *v = NULL;
        sdnn_clear_error();
        s = sdnn_gpu_vdev_open(NULL, &v);
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && v == NULL &&
                     strstr(sdnn_last_error(), "no CUDA device"),
                 "vdev_open: %s", sdnn_last_error());
        sdnn_comm *c = NULL;
        sdnn_clear_error();
        s = sdnn_gpu_comm_open_device(0, &c);
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && c == NULL, "device comm: %s", sdnn_last_error());
        int devs[1] = {0};
        sdnn_clear_error();
        s = sdnn_gpu_comm_open_nccl_local(devs, 1, &c);
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && c == NULL, "nccl comm: %s", sdnn_last_error());
        SOFT_ASSERT(!sdnn_comm_nccl_ops.available() && !sdnn_comm_device_ops.available(),
                 "backends say unavailable (%s)", sdnn_comm_nccl_ops.unavailable_reason());
        unsigned char id[SDNN_NCCL_ID_BYTES];
        sdnn_clear_error();
        s = sdnn_gpu_nccl_id(id);
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED, "nccl id: %s", sdnn_last_error());
        char why[256] = "";
        SOFT_ASSERT(!sdnn_engine_gpu.available(1, why, sizeof why) && why[0],
                    "the gpu engine says it cannot run: %s", why);
    } else {
        for (int d = 0; d < n; ++d) {
            char name[256];
            GT_OK(sdnn_gpu_device_name(d, name, sizeof name));
            printf("  %s\n", name);
        }
        sdnn_gpu_vdev *v = NULL;
        GT_OK(sdnn_gpu_vdev_open(NULL, &v));
        network *net = gt_parse_file("cfg/shapes.cfg", "batch=2\nsubdivisions=1\n");
        SOFT_ASSERT(net != NULL, "shapes.cfg parses");
        if (net) {
            sdnn_gpu_net *g = NULL;
            GT_OK(sdnn_gpu_net_create(net, v, &g));
            GT_OK(sdnn_gpu_net_pull(g));
            sdnn_gpu_net_destroy(g);
            sdnn_network_free(net);
        }
        sdnn_gpu_vdev_close(v);
    }

    if (argc > first)
        for (int i = first; i < argc; ++i) check_support(argv[i]);
    else
        for (size_t i = 0; i < sizeof default_cfgs / sizeof default_cfgs[0]; ++i)
            check_support(default_cfgs[i]);
    return gt_summary("probe");
}
