/*
 * wide: layers with more channels than a grid has rows.  CUDA stops
 * gridDim.y at 65,535; a kernel that put a connected layer's outputs (its
 * channels) there failed to launch past that.  Needs a device.  On the
 * simulated one bn.cu's kernels run as themselves on the host executor,
 * which refuses a launch a GPU refuses (gridDim.y over 65,535 included);
 * occupancy and speed show on a GPU alone.
 *
 *   connected, 70,000 outputs, batch norm   3 training steps on the device
 *                      and in libdarknet (train_network): every loss within
 *                      1e-3 (relative), and the layer's weights, biases,
 *                      scales and running statistics within 1e-3 after them
 *   the same without batch norm (the bias-gradient reduction)
 */
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"

#define TOL 1e-3

static const char *cfg_fmt =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=3\nheight=1\nchannels=1\n"
    "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\npolicy=constant\nmax_batches=100\n"
    "[connected]\noutput=%d\nbatch_normalize=%d\nactivation=leaky\n"
    "[connected]\noutput=3\nactivation=linear\n"
    "[cost]\ntype=sse\n";

static double worst_param(network *a, network *b)
{
    double w = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONNECTED) continue;
        size_t nw = (size_t)x->inputs * x->outputs, nb = (size_t)x->outputs;
        double e[5] = {gt_relerr(x->weights, y->weights, nw), gt_relerr(x->biases, y->biases, nb),
                       0, 0, 0};
        if (x->batch_normalize) {
            e[2] = gt_relerr(x->scales, y->scales, nb);
            e[3] = gt_relerr(x->rolling_mean, y->rolling_mean, nb);
            e[4] = gt_relerr(x->rolling_variance, y->rolling_variance, nb);
        }
        for (int k = 0; k < 5; ++k)
            if (e[k] > w) w = e[k];
    }
    return w;
}

static void wide(sdnn_gpu_vdev *vd, int outputs, int bn)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg, cfg_fmt, outputs, bn);
    network *cpu = gt_parse_text(cfg, NULL), *dev = gt_parse_text(cfg, NULL);
    if (!cpu || !dev) {
        SOFT_ASSERT(0, "%d outputs: parse", outputs);
        return;
    }
    gt_randomize(cpu, 31 + (uint64_t)bn);
    gt_copy_net(dev, cpu);
    sdnn_gpu_net *g = NULL;
    sdnn_status s = sdnn_gpu_net_create(dev, vd, &g);
    SOFT_ASSERT(s == SDNN_OK, "%d outputs, bn=%d: create: %s", outputs, bn,
                s ? sdnn_last_error() : "ok");
    double worst = 0;
    for (int step = 0; step < 3 && s == SDNN_OK; ++step) {
        data d = gt_class_data(cpu->batch, cpu->inputs, 3, 90 + (uint64_t)step);
        float lc = train_network(cpu, d), lg = 0;
        s = sdnn_gpu_net_train(g, d, &lg);
        free_data(d);
        SOFT_ASSERT(s == SDNN_OK, "%d outputs, bn=%d: step %d on the device: %s", outputs, bn,
                    step, s ? sdnn_last_error() : "ok");
        double e = fabs((double)lg - lc) / fmax(fabs(lc), 1e-6);
        if (s == SDNN_OK && e > worst) worst = e;
    }
    if (s == SDNN_OK) {
        SOFT_ASSERT(worst < TOL, "%d outputs, bn=%d: losses within %.0e of libdarknet (%.2e)",
                    outputs, bn, TOL, worst);
        s = sdnn_gpu_net_pull(g);
        SOFT_ASSERT(s == SDNN_OK, "%d outputs, bn=%d: pull", outputs, bn);
        double pe = worst_param(dev, cpu);
        SOFT_ASSERT(pe < TOL, "%d outputs, bn=%d: parameters and running statistics within %.0e "
                    "of libdarknet after 3 steps (%.2e)", outputs, bn, TOL, pe);
    }
    sdnn_gpu_net_destroy(g);
    sdnn_network_free(cpu);
    sdnn_network_free(dev);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "wide";
    sdnn_gpu_vdev *vd = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    wide(vd, 70000, 1);
    wide(vd, 70000, 0);
    sdnn_gpu_vdev_close(vd);
    return gt_summary("wide");
}
