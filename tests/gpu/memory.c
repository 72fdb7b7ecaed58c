/*
 * memory: what a device network holds and when the workspace grows
 * (gpu.h sdnn_gpu_net_memory, dev.h sdnn_dctx_workspace).  Needs a
 * device (a real one or the simulated runtime, make GPU=sim).
 *
 *   engine nets        the device nets of the gpu engine with 2 replicas,
 *                      trained through the trainer on fed batches, hold no
 *                      input, truth or staging buffers of their own: their
 *                      device bytes are the two parameter arenas, no pinned
 *                      bytes (train reads rows from the preload rings)
 *   a single net       holds none either until sdnn_gpu_net_train; then
 *                      its input and truth (device) and its staging (pinned)
 *   workspace          growing it returns a larger buffer and leaves the
 *                      outgrown one usable by work queued before the growth
 *                      (no free in the middle of a step): a copy queued
 *                      from the old buffer before the growth delivers its
 *                      bytes, and the old buffer stays writable until the
 *                      context goes; asking for less returns the current one
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

static const char *cfg =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=6\nheight=6\nchannels=2\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\npolicy=constant\nmax_batches=1000\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static size_t io_bytes(const network *net)
{
    return ((size_t)net->inputs + (size_t)net->truths) * (size_t)net->batch * sizeof(float);
}

static void engine_nets(network *init)
{
    network *nets[2] = {gt_parse_text(cfg, NULL), gt_parse_text(cfg, NULL)};
    if (!nets[0] || !nets[1]) {
        SOFT_ASSERT(0, "engine: parse");
        return;
    }
    gt_copy_net(nets[0], init);
    gt_copy_net(nets[1], init);
    sdnn_trainer *T = NULL;
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.bucket_mb = 0.001;
    snprintf(c.engine, sizeof c.engine, "gpu");
    sdnn_status s = sdnn_trainer_create(nets, 2, &c, 0, &T);
    SOFT_ASSERT(s == SDNN_OK, "engine: create: %s", s ? sdnn_last_error() : "ok");
    for (int k = 0; k < 3 && s == SDNN_OK; ++k) {
        data d = gt_class_data(2 * nets[0]->batch, nets[0]->inputs, 5, 40 + (uint64_t)k);
        sdnn_step_stats st;
        s = sdnn_trainer_feed(T, d);   /* the trainer owns d now */
        if (s != SDNN_OK) free_data(d);
        if (s == SDNN_OK) s = sdnn_trainer_step_fed(T, &st);
        SOFT_ASSERT(s == SDNN_OK, "engine: step %d: %s", k, s ? sdnn_last_error() : "ok");
    }
    if (T) {
        sdnn_engine *e = sdnn_trainer_engine_instance(T);
        for (int r = 0; r < 2; ++r) {
            sdnn_gpu_net *g = sdnn_gpu_engine_net(e, r);
            size_t arena, dev, pin;
            sdnn_gpu_net_arena(g, NULL, NULL, &arena);
            sdnn_gpu_net_memory(g, &dev, &pin);
            SOFT_ASSERT(pin == 0, "engine: replica %d holds no pinned staging (%zu bytes)", r, pin);
            SOFT_ASSERT(dev == 2 * arena * sizeof(float),
                        "engine: replica %d holds its arenas only (%zu bytes, arenas %zu)", r, dev,
                        2 * arena * sizeof(float));
        }
    }
    sdnn_trainer_destroy(T);
    sdnn_network_free(nets[0]);
    sdnn_network_free(nets[1]);
}

static void single_net(sdnn_gpu_vdev *vd, network *init)
{
    network *net = gt_parse_text(cfg, NULL);
    if (!net) {
        SOFT_ASSERT(0, "single: parse");
        return;
    }
    gt_copy_net(net, init);
    sdnn_gpu_net *g = NULL;
    if (sdnn_gpu_net_create(net, vd, &g) != SDNN_OK) {
        SOFT_ASSERT(0, "single: create: %s", sdnn_last_error());
        sdnn_network_free(net);
        return;
    }
    size_t arena, dev, pin;
    sdnn_gpu_net_arena(g, NULL, NULL, &arena);
    sdnn_gpu_net_memory(g, &dev, &pin);
    SOFT_ASSERT(pin == 0 && dev == 2 * arena * sizeof(float),
                "single: nothing but the arenas before the first train (%zu device, %zu pinned)",
                dev, pin);
    data d = gt_class_data(net->batch, net->inputs, 5, 77);
    float loss = 0;
    sdnn_status s = sdnn_gpu_net_train(g, d, &loss);
    SOFT_ASSERT(s == SDNN_OK, "single: train: %s", s ? sdnn_last_error() : "ok");
    sdnn_gpu_net_memory(g, &dev, &pin);
    SOFT_ASSERT(pin == io_bytes(net) && dev == 2 * arena * sizeof(float) + io_bytes(net),
                "single: after sdnn_gpu_net_train, input/truth and staging (%zu device, %zu "
                "pinned; expected %zu and %zu)", dev, pin, 2 * arena * sizeof(float) + io_bytes(net),
                io_bytes(net));
    free_data(d);
    sdnn_gpu_net_destroy(g);
    sdnn_network_free(net);
}

static void workspace(sdnn_gpu_vdev *vd)
{
    enum { SMALL = 4096, BIG = 1 << 20 };
    void *w1 = NULL, *w2 = NULL, *w3 = NULL, *dst = NULL;
    size_t have = 0;
    unsigned char *pat = malloc(SMALL), *back = malloc(SMALL);
    if (!pat || !back) {
        SOFT_ASSERT(0, "workspace: no memory");
        free(pat);
        free(back);
        return;
    }
    for (int i = 0; i < SMALL; ++i) pat[i] = (unsigned char)(i * 7 + 3);
    sdnn_status s = sdnn_dctx_workspace(vd, SMALL, &w1);
    if (s == SDNN_OK) s = sdnn_dmalloc(vd, SMALL, &dst);
    SOFT_ASSERT(s == SDNN_OK && w1, "workspace: %d bytes: %s", SMALL, s ? sdnn_last_error() : "ok");
    if (s != SDNN_OK) goto out;
    sdnn_dctx_workspace_current(vd, &w3, &have);
    SOFT_ASSERT(w3 == w1 && have >= SMALL, "workspace: current = the one given (%zu bytes)", have);
    /* Work queued before the growth reads the old buffer. */
    s = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, w1, pat, SMALL, 0);
    if (s == SDNN_OK) s = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, dst, w1, SMALL, 0);
    SOFT_ASSERT(s == SDNN_OK, "workspace: copies queued: %s", s ? sdnn_last_error() : "ok");
    s = sdnn_dctx_workspace(vd, BIG, &w2);
    SOFT_ASSERT(s == SDNN_OK && w2 && w2 != w1, "workspace: grown to %d bytes (a new buffer): %s",
                BIG, s ? sdnn_last_error() : "ok");
    sdnn_dctx_workspace_current(vd, &w3, &have);
    SOFT_ASSERT(w3 == w2 && have >= BIG, "workspace: current = the grown one (%zu bytes)", have);
    s = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, back, dst, SMALL, 1);
    SOFT_ASSERT(s == SDNN_OK && memcmp(back, pat, SMALL) == 0,
                "workspace: the copy queued from the outgrown buffer delivered its bytes (%s)",
                s ? sdnn_last_error() : "ok");
    /* The outgrown buffer is still the context's until it is destroyed. */
    memset(back, 0, SMALL);
    s = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, w1, pat, SMALL, 0);
    if (s == SDNN_OK) s = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, back, w1, SMALL, 1);
    SOFT_ASSERT(s == SDNN_OK && memcmp(back, pat, SMALL) == 0,
                "workspace: the outgrown buffer is not freed before the context (%s)",
                s ? sdnn_last_error() : "ok");
    s = sdnn_dctx_workspace(vd, SMALL, &w3);
    SOFT_ASSERT(s == SDNN_OK && w3 == w2, "workspace: asking for less keeps the grown one");
out:
    sdnn_dfree(dst);
    free(pat);
    free(back);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "memory";
    network *init = gt_parse_text(cfg, NULL);
    if (!init) {
        SOFT_ASSERT(0, "parse");
        return gt_summary("memory");
    }
    gt_randomize(init, 5);
    sdnn_gpu_vdev *vd = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    engine_nets(init);
    single_net(vd, init);
    sdnn_gpu_vdev *ws = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &ws));
    workspace(ws);
    sdnn_gpu_vdev_close(ws);
    sdnn_gpu_vdev_close(vd);
    sdnn_network_free(init);
    return gt_summary("memory");
}
