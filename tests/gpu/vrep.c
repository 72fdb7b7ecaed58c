/*
 * vrep: several replicas on one device through the trainer on the gpu
 * engine (-gpus 0,0 with virtual=1: virtual devices with streams of their
 * own, the device ring, the bucket exchange on the comm stream; batches
 * fed through the preload rings).  Needs a device (CUDA or simulated).
 *
 *   2 x batch b == 1 x batch 2b   a network without batch norm, 10 steps,
 *                                 exact mean, the same learning rate
 *                                 (DESIGN §5: the N x b oracle); relative
 *                                 error of every parameter < 1e-4
 *   replicas identical            after every step, bit for bit
 *   overlap=0 == overlap=1        bit for bit (the order of the exchange
 *                                 does not change its arithmetic)
 *   split=device0 == split=cpu    bit for bit
 *   fp16 with error feedback      replicas identical, close to exact
 *   stock mode                    runs; after a sync the replicas are equal
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

static const char *cfg =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=12\nheight=12\nchannels=3\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\npolicy=constant\nmax_batches=1000\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[avgpool]\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n";

static double param_err(network *a, network *b, size_t *bytes_differ)
{
    double worst = 0;
    *bytes_differ = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        double e = gt_relerr(x->weights, y->weights, nw), eb = gt_relerr(x->biases, y->biases, nb);
        *bytes_differ += gt_bytes_differ(x->weights, y->weights, nw * 4) +
                         gt_bytes_differ(x->biases, y->biases, nb * 4) +
                         gt_bytes_differ(x->weight_updates, y->weight_updates, nw * 4);
        if (e > worst) worst = e;
        if (eb > worst) worst = eb;
    }
    return worst;
}

/* Bytes of weights and biases that differ (not the momentum buffers). */
static size_t weights_differ(network *a, network *b)
{
    size_t d = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        d += gt_bytes_differ(x->weights, y->weights, nw * 4) +
             gt_bytes_differ(x->biases, y->biases, nb * 4);
    }
    return d;
}

typedef struct run {
    network *nets[2];
    sdnn_trainer *T;
} run;

/* The trainer on the gpu engine with n replicas on device 0 (virtual=1),
 * as detector train -gpus 0,0 runs them. */
static sdnn_status start(run *R, const char *set, network *init, const sdnn_config *c, int n)
{
    memset(R, 0, sizeof *R);
    for (int r = 0; r < n; ++r) {
        R->nets[r] = gt_parse_text(cfg, set);
        if (!R->nets[r]) return SDNN_ERROR(SDNN_ERR_INVALID, "parse");
        gt_copy_net(R->nets[r], init);
    }
    static const int on0[2] = {0, 0};
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    o.devices = on0;
    return sdnn_trainer_create_opts(R->nets, n, c, &o, 0, &R->T);
}

static void stop(run *R, int n)
{
    sdnn_trainer_destroy(R->T);
    for (int r = 0; r < n; ++r) sdnn_network_free(R->nets[r]);
}

static sdnn_status pull(run *R)
{
    sdnn_engine *e = sdnn_trainer_engine_instance(R->T);
    return e->ops->pull(e, SDNN_ENGINE_ALL);
}

/* `steps` steps of 8 rows, fed through the preload ring; the replicas'
 * largest difference seen. */
static sdnn_status train(run *R, int n, int steps, size_t *replica_diff)
{
    *replica_diff = 0;
    for (int step = 0; step < steps; ++step) {
        data d = gt_class_data(8, R->nets[0]->inputs, 10, 300 + (uint64_t)step);
        sdnn_step_stats st;
        sdnn_status s = sdnn_trainer_feed(R->T, d);
        if (s != SDNN_OK) free_data(d);
        if (s == SDNN_OK) s = sdnn_trainer_step_fed(R->T, &st);
        if (s != SDNN_OK) return s;
        if (n > 1) {
            SDNN_CHECK(pull(R));
            size_t b;
            param_err(R->nets[0], R->nets[1], &b);
            *replica_diff += b;
        }
    }
    return pull(R);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "vrep";
    network *init = gt_parse_text(cfg, NULL);
    if (!init) {
        SOFT_ASSERT(0, "parse");
        return gt_summary("vrep");
    }
    gt_randomize(init, 9);
    sdnn_config o = SDNN_CONFIG_INIT;
    o.present = 1;
    o.virtual_devices = 1;
    o.bucket_mb = 0.002;   /* several buckets even for this small net */
    snprintf(o.engine, sizeof o.engine, "gpu");
    size_t rd;

    /* one replica, batch 8, at the rate the trainer gives 2 replicas */
    run one, two, two_seq, two_d0, two_fp16, stock;
    network *init8 = gt_parse_text(cfg, "batch=8\n");
    if (!init8) {
        SOFT_ASSERT(0, "parse");
        return gt_summary("vrep");
    }
    gt_copy_net(init8, init);
    GT_OK(start(&one, "batch=8\n", init8, &o, 1));
    one.nets[0]->learning_rate *= 2;   /* read by the update of every step */
    GT_OK(train(&one, 1, 10, &rd));

    GT_OK(start(&two, NULL, init, &o, 2));
    GT_OK(train(&two, 2, 10, &rd));
    SOFT_ASSERT(rd == 0, "2 virtual replicas stay bit-identical (%zu bytes differed)", rd);
    size_t b;
    double e = param_err(two.nets[0], one.nets[0], &b);
    double moved = param_err(two.nets[0], init, &b);
    SOFT_ASSERT(e < 1e-4 && moved > 1e-3, "2 replicas x batch 4 vs 1 replica x batch 8 after 10 "
                "steps: rel err %.2e (the weights moved %.2e)", e, moved);

    sdnn_config seq = o;
    seq.overlap = 0;
    GT_OK(start(&two_seq, NULL, init, &seq, 2));
    GT_OK(train(&two_seq, 2, 10, &rd));
    param_err(two_seq.nets[0], two.nets[0], &b);
    SOFT_ASSERT(b == 0, "overlap=0 equals overlap=1 bit for bit (%zu bytes differ)", b);

    sdnn_config d0 = o;
    snprintf(d0.split, sizeof d0.split, "device0");
    GT_OK(start(&two_d0, NULL, init, &d0, 2));
    GT_OK(train(&two_d0, 2, 10, &rd));
    param_err(two_d0.nets[0], two.nets[0], &b);
    SOFT_ASSERT(b == 0 && rd == 0, "split=device0 equals split=cpu bit for bit (%zu bytes differ)", b);

    sdnn_config f = o;
    snprintf(f.compress, sizeof f.compress, "fp16");
    f.error_feedback = 1;
    f.compress_min_kb = 0;
    GT_OK(start(&two_fp16, NULL, init, &f, 2));
    GT_OK(train(&two_fp16, 2, 10, &rd));
    e = param_err(two_fp16.nets[0], two.nets[0], &b);
    SOFT_ASSERT(rd == 0, "fp16 + error feedback: replicas bit-identical (%zu bytes differed)", rd);
    SOFT_ASSERT(e < 1e-2 && b > 0, "fp16 + error feedback vs exact after 10 steps: rel err %.2e "
                "(%zu bytes differ: the codec ran)", e, b);

    sdnn_config so = o;
    so.mode = SDNN_MODE_STOCK;
    so.interval = 2;
    GT_OK(start(&stock, NULL, init, &so, 2));
    GT_OK(train(&stock, 2, 1, &rd));
    size_t between = weights_differ(stock.nets[0], stock.nets[1]);
    SOFT_ASSERT(between > 0, "stock mode: replicas differ between syncs (%zu bytes)", between);
    GT_OK(train(&stock, 2, 1, &rd));
    size_t after = weights_differ(stock.nets[0], stock.nets[1]);
    SOFT_ASSERT(after == 0, "stock mode (interval 2): weights equal right after the sync (%zu bytes "
             "differ)", after);
    SOFT_ASSERT(*stock.nets[0]->seen == *stock.nets[1]->seen && *stock.nets[0]->seen == 16,
             "stock mode: seen caught up to 16 (%zu, %zu)", *stock.nets[0]->seen,
             *stock.nets[1]->seen);

    sdnn_gpu_preload_stats ps;
    GT_OK(sdnn_gpu_engine_preload_stats(sdnn_trainer_engine_instance(two.T), &ps));
    printf("    preload (2 replicas, 10 steps): %d copies, %zu bytes, copy %.3f ms, exposed %.3f ms\n",
           ps.copies, ps.bytes, ps.copy_ms, ps.exposed_ms);
    SOFT_ASSERT(ps.copies == 20, "preload: one copy per replica and step (%d)", ps.copies);
    sdnn_network_free(init8);

    stop(&one, 1);
    stop(&two, 2);
    stop(&two_seq, 2);
    stop(&two_d0, 2);
    stop(&two_fp16, 2);
    stop(&stock, 2);
    sdnn_network_free(init);
    return gt_summary("vrep");
}
