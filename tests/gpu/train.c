/*
 * train: whole training steps on one device against libdarknet's CPU
 * training (Darknet's train_network; the CPU trainer with one replica is
 * bit-identical to it, DESIGN §5).  Needs a CUDA device.
 *
 *   shapes detector  20 steps, batch 8 in 2 subdivisions, detection
 *                    batches made in memory.  Each step starts both sides
 *                    from the CPU's state and runs twice on the device:
 *                    held (held_step: layer by layer, each layer's output
 *                    within FWD_TOL of the CPU's on the CPU's input, then
 *                    replaced by it, so maxpool choices, leaky slopes and
 *                    YOLO's ignore tests are the CPU's): every parameter
 *                    and running statistic within PARAM_TOL after the
 *                    step; free (sdnn_gpu_net_train): the loss within
 *                    LOSS_TOL (relative).  Free, the parameters are not a
 *                    smooth map of the state: the objects are constant-
 *                    colour regions, so convolution outputs tie exactly in
 *                    one gemm and differ in the last bit in another (edge
 *                    tiles), and a maxpool takes the other input: 4.7e-4
 *                    at one step under OPENBLAS_CORETYPE=Sandybridge,
 *                    against ~1e-6 held; they are printed
 *   fmnist           10 steps of the classifier: the same
 *   world of one     the trainer with 1 replica on the gpu engine
 *                    (scalednn mode, batches fed 2 ahead into the preload
 *                    ring) equals sdnn_gpu_net_train bit for bit
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
/* One layer on the same input, normwise (DESIGN §5: GPU layers == libdarknet
 * CPU layers within 1e-4 in fp32). */
#define FWD_TOL 1e-4

static data make_batch(network *net, int rows, int detection, uint64_t seed)
{
    if (detection) {
        int classes = 1;
        for (int i = 0; i < net->n; ++i)
            if (net->layers[i].type == YOLO) classes = net->layers[i].classes;
        return gt_detection_data(rows, net->w, net->h, net->c, net->truths, classes, seed);
    }
    return gt_class_data(rows, net->inputs, net->truths, seed);
}

/* One step as Darknet's train_network runs it (get_next_batch, then
 * train_network_datum per subdivision: forward_network, backward_network,
 * update_network after the last), with the device's held step beside it:
 * after the CPU's forward of a subdivision the device runs the same
 * subdivision layer by layer, each layer's output compared with the CPU's
 * (*fwd_err, normwise) and then replaced by it, so every discrete decision
 * a later pass takes from an output (a maxpool's choice, leaky's slope
 * taken from the output's sign, YOLO's ignore and best-anchor tests on the
 * host) is the CPU's; then the device's backward layer by layer and its
 * update.  What is left between the two is float reassociation inside
 * each layer's forward and backward and the update (a smooth map of the
 * same inputs), which PARAM_TOL bounds. */
static sdnn_status held_step(network *cpu, network *dev, sdnn_gpu_net *g, data d, float *loss,
                             float *buf, double *fwd_err, int *fwd_layer)
{
    int batch = cpu->batch, n = d.X.rows / batch;
    float sum = 0;
    for (int b = 0; b < n; ++b) {
        get_next_batch(d, batch, b * batch, cpu->input, cpu->truth);
        if (cpu->truths)
            memcpy(dev->truth, cpu->truth, (size_t)cpu->truths * (size_t)batch * sizeof(float));
        *cpu->seen += (size_t)batch;
        *dev->seen += (size_t)batch;
        cpu->train = dev->train = 1;
        forward_network(cpu);
        SDNN_CHECK(sdnn_gpu_net_set_input(g, cpu->input, cpu->truth));
        for (int i = 0; i < cpu->n; ++i) {
            const layer *l = &cpu->layers[i];
            size_t no = (size_t)l->outputs * (size_t)l->batch, dn = 0;
            float *dp = NULL;
            SDNN_CHECK(sdnn_gpu_net_layer_forward(g, i, 1));
            SDNN_CHECK(sdnn_gpu_net_tensor(g, i, SDNN_GT_OUTPUT, &dp, &dn));
            if (dn != no)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: device output of %zu floats, "
                                  "the CPU's %zu", i, dn, no);
            SDNN_CHECK(sdnn_gpu_net_get(g, i, SDNN_GT_OUTPUT, buf));
            double e = gt_relerr(buf, l->output, no);
            if (e > *fwd_err) *fwd_err = e, *fwd_layer = i;
            SDNN_CHECK(sdnn_gpu_net_set(g, i, SDNN_GT_OUTPUT, l->output));
        }
        backward_network(cpu);
        for (int i = cpu->n - 1; i >= 0 && !cpu->layers[i].stopbackward; --i)
            SDNN_CHECK(sdnn_gpu_net_layer_backward(g, i));
        sum += *cpu->cost;
        if ((*cpu->seen / (size_t)batch) % (size_t)cpu->subdivisions == 0) {
            update_network(cpu);
            SDNN_CHECK(sdnn_gpu_net_update(g));
        }
    }
    *loss = sum / (float)(n * batch);
    return SDNN_OK;
}

static void versus_cpu(const char *name, const char *cfg, const char *set, int steps,
                       int detection, sdnn_gpu_vdev *vd)
{
    network *cpu = gt_parse_file(cfg, set), *dev = gt_parse_file(cfg, set);
    network *pre = gt_parse_file(cfg, set);
    if (!cpu || !dev || !pre) {
        SOFT_ASSERT(0, "%s: cannot parse %s", name, cfg);
        return;
    }
    gt_copy_net(dev, cpu);
    sdnn_gpu_net *g = NULL;
    sdnn_status s = sdnn_gpu_net_create(dev, vd, &g);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: gpu net: %s", name, sdnn_last_error());
        return;
    }
    size_t most = 0;
    for (int i = 0; i < cpu->n; ++i)
        if ((size_t)cpu->layers[i].outputs * cpu->layers[i].batch > most)
            most = (size_t)cpu->layers[i].outputs * cpu->layers[i].batch;
    float *buf = malloc((most ? most : 1) * sizeof *buf);
    int rows = cpu->batch * cpu->subdivisions;
    double worst_loss = 0, worst_param = 0, worst_fwd = 0, worst_free = 0;
    int worst_layer = -1, worst_step = -1, fwd_layer = -1;
    for (int step = 0; step < steps && buf; ++step) {
        data d = make_batch(cpu, rows, detection, 1000 + (uint64_t)step);
        gt_copy_net(pre, cpu);
        /* The held step: parameters after it, from the same state. */
        float lc = 0;
        s = held_step(cpu, dev, g, d, &lc, buf, &worst_fwd, &fwd_layer);
        if (s == SDNN_OK) s = sdnn_gpu_net_pull(g);
        if (s != SDNN_OK) {
            SOFT_ASSERT(0, "%s step %d: held step: %s", name, step, sdnn_last_error());
            free_data(d);
            break;
        }
        int wl;
        double pe = gt_param_err(dev, cpu, &wl);
        if (pe > worst_param) worst_param = pe, worst_layer = wl, worst_step = step;
        SOFT_ASSERT(*cpu->seen == *dev->seen, "%s step %d: held: seen %zu vs %zu", name, step,
                    *cpu->seen, *dev->seen);
        /* The free step: sdnn_gpu_net_train from the same state, its loss
         * against the CPU's (its parameters are printed, not judged: a
         * decision the float sums put on the other side of a tie or a
         * corner moves them by more than rounding). */
        gt_copy_net(dev, pre);
        float lg = 0;
        s = sdnn_gpu_net_push(g);
        if (s == SDNN_OK) s = sdnn_gpu_net_train(g, d, &lg);
        if (s == SDNN_OK) s = sdnn_gpu_net_pull(g);
        free_data(d);
        if (s != SDNN_OK) {
            SOFT_ASSERT(0, "%s step %d: %s", name, step, sdnn_last_error());
            break;
        }
        double e = fabs((double)lg - lc) / fmax(fabs(lc), 1e-6);
        if (e > worst_loss) worst_loss = e;
        int fl;
        double fe = gt_param_err(dev, cpu, &fl);
        if (fe > worst_free) worst_free = fe;
        printf("    %s step %2d: loss cpu %.6f gpu %.6f (rel %.1e), parameters rel %.1e held "
               "(layer %d), %.1e free (layer %d)\n", name, step, lc, lg, e, pe, wl, fe, fl);
        SOFT_ASSERT(*cpu->seen == *dev->seen, "%s step %d: seen %zu vs %zu", name, step,
                    *cpu->seen, *dev->seen);
        /* The next step starts from the CPU's state on both sides. */
        gt_copy_net(dev, cpu);
        s = sdnn_gpu_net_push(g);
        if (s != SDNN_OK) {
            SOFT_ASSERT(0, "%s step %d: push: %s", name, step, sdnn_last_error());
            break;
        }
    }
    SOFT_ASSERT(buf != NULL, "%s: no memory", name);
    printf("    %s: worst layer output (held forward) rel %.1e (layer %d); free steps' "
           "parameters rel %.1e (reported)\n", name, worst_fwd, fwd_layer, worst_free);
    char mname[96];
    snprintf(mname, sizeof mname, "gpu/train:%s:loss", name);
    tm_margin(mname, worst_loss, LOSS_TOL);
    snprintf(mname, sizeof mname, "gpu/train:%s:forward", name);
    tm_margin(mname, worst_fwd, FWD_TOL);
    snprintf(mname, sizeof mname, "gpu/train:%s:params", name);
    tm_margin(mname, worst_param, PARAM_TOL);
    SOFT_ASSERT(worst_loss < LOSS_TOL, "%s: %d steps, worst loss difference %.2e", name, steps,
             worst_loss);
    SOFT_ASSERT(worst_fwd < FWD_TOL, "%s: every layer's output on the CPU's input, %d steps: "
                "worst rel err %.2e (layer %d)", name, steps, worst_fwd, fwd_layer);
    SOFT_ASSERT(worst_param < PARAM_TOL, "%s: parameters and running statistics after each of %d "
             "held steps: worst rel err %.2e (layer %d, step %d)", name, steps, worst_param,
             worst_layer, worst_step);
    free(buf);
    sdnn_gpu_net_destroy(g);
    sdnn_network_free(cpu);
    sdnn_network_free(dev);
    sdnn_network_free(pre);
}

/* The trainer with one replica on the gpu engine, its batches fed two
 * steps ahead through the preload ring (sdnn_trainer_feed / step_fed),
 * against sdnn_gpu_net_train on the same batches. */
static void world_of_one(sdnn_gpu_vdev *vd)
{
    const char *cfg = "cfg/shapes.cfg", *set = "batch=8\nsubdivisions=2\n";
    network *a = gt_parse_file(cfg, set), *b = gt_parse_file(cfg, set);
    if (!a || !b) {
        SOFT_ASSERT(0, "world of one: parse");
        return;
    }
    gt_copy_net(b, a);
    sdnn_gpu_net *g = NULL;
    sdnn_trainer *T = NULL;
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.preload = 2;
    snprintf(c.engine, sizeof c.engine, "gpu");
    sdnn_status s = sdnn_gpu_net_create(a, vd, &g);
    /* the engine's default fix_bn_delta=1: the exact batch-norm backward */
    if (s == SDNN_OK) sdnn_gpu_net_set_bn_exact(g, 1);
    if (s == SDNN_OK) s = sdnn_trainer_create(&b, 1, &c, 0, &T);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "world of one: %s", sdnn_last_error());
        sdnn_gpu_net_destroy(g);
        sdnn_network_free(a);
        sdnn_network_free(b);
        return;
    }
    int rows = a->batch * a->subdivisions, fed = 0;
    const int steps = 5;
    for (int step = 0; step < steps && s == SDNN_OK; ++step) {
        while (s == SDNN_OK && fed < steps && sdnn_trainer_queued(T) < sdnn_trainer_preload(T))
            s = sdnn_trainer_feed(T, make_batch(a, rows, 1, 50 + (uint64_t)fed++));
        data d = make_batch(a, rows, 1, 50 + (uint64_t)step);
        float la = 0;
        sdnn_step_stats st;
        if (s == SDNN_OK) s = sdnn_gpu_net_train(g, d, &la);
        if (s == SDNN_OK) s = sdnn_trainer_step_fed(T, &st);
        free_data(d);
        if (s == SDNN_OK)
            SOFT_ASSERT(la == st.loss, "world of one step %d: loss %.9g vs %.9g", step, la, st.loss);
    }
    SOFT_ASSERT(s == SDNN_OK, "world of one: %s", s ? sdnn_last_error() : "ok");
    sdnn_engine *e = sdnn_trainer_engine_instance(T);
    sdnn_gpu_net_pull(g);
    e->ops->pull(e, SDNN_ENGINE_ALL);
    int wl;
    double pe = gt_param_err(a, b, &wl);
    SOFT_ASSERT(pe == 0, "world of one: the trainer on the gpu engine (1 replica, preload=2) = "
                "sdnn_gpu_net_train bit for bit (rel err %.2e)", pe);
    sdnn_gpu_preload_stats ps;
    s = sdnn_gpu_engine_preload_stats(e, &ps);
    SOFT_ASSERT(s == SDNN_OK && ps.copies == steps, "world of one: %d preloaded copies (%d), %.3f "
                "ms copying, %.3f ms exposed", steps, ps.copies, ps.copy_ms, ps.exposed_ms);
    sdnn_trainer_destroy(T);
    sdnn_gpu_net_destroy(g);
    sdnn_network_free(a);
    sdnn_network_free(b);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "train";
    sdnn_gpu_vdev *vd = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    versus_cpu("shapes", "cfg/shapes.cfg", "batch=8\nsubdivisions=2\n", 20, 1, vd);
    versus_cpu("fmnist", "cfg/fmnist.cfg", "batch=16\nsubdivisions=1\n", 10, 0, vd);
    world_of_one(vd);
    sdnn_gpu_vdev_close(vd);
    return gt_summary("train");
}
