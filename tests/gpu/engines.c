/*
 * engines: the device trainer (plugin/cuda's group) against the CPU
 * trainer (sdnn_trainer: libdarknet's train_network with the hooks and
 * the exchange) on the same batches.  On simulated devices (make GPU=sim)
 * this checks host logic, ordering and arithmetic, never the CUDA kernels
 * or NCCL.
 *
 *   shapes detector (cfg/shapes.cfg) and a yolov3-tiny-shaped cfg,
 *   1, 2 and 4 replicas with overlap on, 4 with overlap off, bucket_mb
 *   fixed (several buckets), plain exchange:
 *     every parameter within PARAM_TOL (relative) of the CPU's after each
 *     of 20 steps, the loss within LOSS_TOL, and the device replicas
 *     bit-identical to each other after every step.
 *
 * Tolerance.  The simulated layers sum in index order and libdarknet's
 * gemm in its own, so the two differ by rounding (~1e-6 relative per
 * step); free-running, that drift grows until a YOLO threshold flips and
 * the runs part.  As tests/gpu/train.c does, every step therefore starts
 * the device replicas from the CPU trainer's state of that step (weights,
 * momentum, running statistics, seen), so the check bounds one step's
 * difference: 1e-3 relative leaves that rounding room and catches any
 * wrong bucket, wrong mean or wrong learning rate (each of those is
 * O(1) relative on some layer).
 *
 * The registry in a GPU build: `gpu` is plugin/cuda/engine_gpu.c's entry
 * (not gpu_stub.c's), which until the device trainer is driven through the
 * table reports itself unavailable naming why: engine=auto resolves to cpu
 * and says so, engine=gpu and create() are SDNN_ERR_UNSUPPORTED.
 *
 * Not yet here (issue 13, the gpu engine behind the engine table): lossy
 * codecs with error feedback against the CPU (group.c's error-feedback
 * streams are its own until it uses the shared bucket layout), bucket_mb
 * auto, stock mode, .ef across engines, timeline spans.
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

#define LOSS_TOL 1e-3
#define PARAM_TOL 1e-3
#define STEPS 20
#define ROWS 8

/* A yolov3-tiny-shaped detector at 64x64: the stride-2 maxpools, the
 * stride-1 maxpool, the 1x1 bottleneck, two YOLO heads joined by route,
 * upsample and route, as in Darknet's yolov3-tiny.cfg, narrowed. */
static const char *tiny_cfg =
    "[net]\nbatch=8\nsubdivisions=2\nwidth=32\nheight=32\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.001\nburn_in=0\nmax_batches=100\n"
    "policy=steps\nsteps=80\nscales=.1\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=1\n"
    "[convolutional]\nbatch_normalize=1\nfilters=32\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=1\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=32\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=24\nactivation=linear\n"
    "[yolo]\nmask=3,4,5\nanchors=6,6, 10,10, 14,14, 20,20, 28,28, 40,40\nclasses=3\nnum=6\n"
    "jitter=.3\nignore_thresh=.7\ntruth_thresh=1\nrandom=0\n"
    "[route]\nlayers=-4\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=1\nstride=1\npad=1\nactivation=leaky\n"
    "[upsample]\nstride=2\n"
    "[route]\nlayers=-1,4\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=24\nactivation=linear\n"
    "[yolo]\nmask=0,1,2\nanchors=6,6, 10,10, 14,14, 20,20, 28,28, 40,40\nclasses=3\nnum=6\n"
    "jitter=.3\nignore_thresh=.7\ntruth_thresh=1\nrandom=0\n";

/* Bytes by which two replicas' parameters differ. */
static size_t replica_diff(network *a, network *b)
{
    size_t d = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        d += gt_bytes_differ(x->weights, y->weights, nw * 4);
        d += gt_bytes_differ(x->biases, y->biases, nb * 4);
        if (x->batch_normalize) d += gt_bytes_differ(x->scales, y->scales, nb * 4);
    }
    return d;
}

static int yolo_classes(network *net)
{
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == YOLO) return net->layers[i].classes;
    return 1;
}

/* One case: n replicas of `cfg` (text, or a file when is_file), ROWS rows
 * a step in all, `overlap`, fixed `bucket_mb`. */
static void versus(const char *name, const char *cfg, int is_file, int n, int overlap,
                   double bucket_mb)
{
    char set[64], label[160];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=2\n", ROWS / n);
    snprintf(label, sizeof label, "%s, %d replica(s), overlap=%d, bucket_mb=%g", name, n,
             overlap, bucket_mb);
    network *init = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
    network *cpu[4] = {0}, *dev[4] = {0};
    int ok = init != NULL;
    for (int r = 0; r < n && ok; ++r) {
        cpu[r] = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
        dev[r] = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
        ok = cpu[r] && dev[r];
    }
    if (!ok) {
        SOFT_ASSERT(0, "%s: cannot parse the cfg", label);
        goto out_nets;
    }
    gt_randomize(init, 31);
    for (int r = 0; r < n; ++r) gt_copy_net(cpu[r], init), gt_copy_net(dev[r], init);

    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = SDNN_MODE_SCALEDNN;
    c.bucket_mb = bucket_mb;
    c.overlap = overlap;
    c.error_feedback = 0;
    sdnn_trainer *T = NULL;
    sdnn_status s = sdnn_trainer_create(cpu, n, &c, 0, &T);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: cpu trainer: %s", label, sdnn_last_error());
        goto out_nets;
    }
    /* the CPU trainer multiplied its learning rates by n; the group
     * multiplies nothing (its caller does) */
    for (int r = 0; r < n; ++r) dev[r]->learning_rate = cpu[r]->learning_rate;

    sdnn_gpu_group_options o = SDNN_GPU_GROUP_OPTIONS_INIT;
    o.overlap = overlap;
    o.bucket_mb = bucket_mb;
    o.error_feedback = 0;
    sdnn_gpu_group *G = NULL;
    s = sdnn_gpu_group_create(dev, n, &o, &G);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: gpu group: %s", label, sdnn_last_error());
        goto out_trainer;
    }

    double worst_loss = 0, worst_param = 0;
    int worst_step = -1, worst_layer = -1;
    size_t rdiff = 0;
    int classes = yolo_classes(init);
    for (int step = 0; step < STEPS; ++step) {
        /* the device replicas start this step from the CPU's state */
        for (int r = 0; r < n; ++r) {
            gt_copy_net(dev[r], cpu[r]);
            s = sdnn_gpu_net_push(sdnn_gpu_group_net(G, r));
            if (s != SDNN_OK) break;
        }
        data d = gt_detection_data(ROWS, init->w, init->h, init->c, init->truths, classes,
                                   900 + (uint64_t)step);
        sdnn_step_stats cs;
        sdnn_gpu_step_stats gs;
        if (s == SDNN_OK) s = sdnn_trainer_step(T, d, &cs);
        if (s == SDNN_OK) s = sdnn_gpu_group_feed(G, d);
        if (s == SDNN_OK) s = sdnn_gpu_group_step(G, &gs);
        if (s == SDNN_OK) s = sdnn_gpu_group_pull(G);
        free_data(d);
        if (s != SDNN_OK) {
            SOFT_ASSERT(0, "%s: step %d: %s", label, step, sdnn_last_error());
            break;
        }
        double le = fabs((double)gs.loss - (double)cs.loss) / (fabs((double)cs.loss) + 1e-6);
        if (le > worst_loss) worst_loss = le;
        for (int r = 0; r < n; ++r) {
            int wl;
            double e = gt_param_err(cpu[r], dev[r], &wl);
            if (e > worst_param) worst_param = e, worst_step = step, worst_layer = wl;
        }
        for (int r = 1; r < n; ++r) rdiff += replica_diff(dev[0], dev[r]);
    }
    printf("    %-52s loss rel %.2e, params rel %.2e (step %d, layer %d)\n", label, worst_loss,
           worst_param, worst_step, worst_layer);
    SOFT_ASSERT(worst_loss <= LOSS_TOL, "%s: loss within %g of the CPU's (%.2e)", label,
                LOSS_TOL, worst_loss);
    SOFT_ASSERT(worst_param <= PARAM_TOL, "%s: params within %g of the CPU's (%.2e, step %d, "
                "layer %d)", label, PARAM_TOL, worst_param, worst_step, worst_layer);
    SOFT_ASSERT(rdiff == 0, "%s: device replicas bit-identical after every step (%zu bytes)",
                label, rdiff);
    sdnn_gpu_group_destroy(G);
out_trainer:
    sdnn_trainer_destroy(T);
out_nets:
    for (int r = 0; r < n; ++r) {
        if (cpu[r]) sdnn_network_free(cpu[r]);
        if (dev[r]) sdnn_network_free(dev[r]);
    }
    if (init) sdnn_network_free(init);
}

static void registry(void)
{
    const sdnn_engine_ops *gpu = sdnn_engine_find("gpu"), *got = NULL;
    SOFT_ASSERT(gpu != NULL && sdnn_engine_find("cpu") != NULL, "registry lists cpu and gpu (%s)",
                sdnn_engine_names());
    if (!gpu) return;
    char why[256] = "";
    SOFT_ASSERT(gpu->available(2, why, sizeof why), "gpu engine available for 2 replicas (%s)",
                why);
    sdnn_status s = sdnn_engine_resolve("auto", 2, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_OK && got == gpu && strstr(why, "engine=auto: gpu"),
                "engine=auto resolves to gpu, saying so (%s)", why);
    s = sdnn_engine_resolve("gpu", 64, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && got == NULL &&
                strstr(sdnn_last_error(), "engine gpu cannot run 64 replicas"),
                "engine=gpu for more replicas than devices refused naming the reason (%s)",
                sdnn_last_error());
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "engines";
    setenv("SDNN_SIM_DEVICES", "4", 0);   /* read by the simulated runtime only */
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK) sdnn_dev_describe(0, desc, sizeof desc);
    printf("    device 0: %s%s\n", desc,
           strstr(desc, "simulated") ? " (host logic, ordering and arithmetic only)" : "");
    registry();
    if (ndev < 1) {
        printf("    no device: the trainer comparisons need one (not run)\n");
        return gt_summary("engines");
    }
    /* overlap=0 only with 4 replicas (the most buckets in flight): each
     * case costs 20 CPU and 20 simulated steps, and the suite runs 3 times
     * in CI and once under ASan */
    static const struct { int n, overlap; } cases[] = {{1, 1}, {2, 1}, {4, 1}, {4, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        versus("shapes", "cfg/shapes.cfg", 1, cases[k].n, cases[k].overlap, 0.05);
        versus("yolov3-tiny-shaped", tiny_cfg, 0, cases[k].n, cases[k].overlap, 0.005);
    }
    return gt_summary("engines");
}
