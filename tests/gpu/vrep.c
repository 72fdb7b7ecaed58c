/*
 * vrep: several replicas on one device (virtual devices with streams of
 * their own, the device-local backend, the bucket exchange on the comm
 * stream).  Needs a CUDA device.
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
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"

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
    sdnn_gpu_group *G;
} run;

static sdnn_status start(run *R, const char *set, network *init, const sdnn_gpu_group_options *o,
                         int n)
{
    for (int r = 0; r < n; ++r) {
        R->nets[r] = gt_parse_text(cfg, set);
        if (!R->nets[r]) return SDNN_ERROR(SDNN_ERR_INVALID, "parse");
        gt_copy_net(R->nets[r], init);
    }
    return sdnn_gpu_group_create(R->nets, n, o, &R->G);
}

static void stop(run *R, int n)
{
    sdnn_gpu_group_destroy(R->G);
    for (int r = 0; r < n; ++r) sdnn_network_free(R->nets[r]);
}

/* 10 steps of 8 rows; returns the replicas' largest difference seen. */
static sdnn_status train(run *R, int n, int steps, size_t *replica_diff)
{
    *replica_diff = 0;
    for (int step = 0; step < steps; ++step) {
        data d = gt_class_data(8, R->nets[0]->inputs, 10, 300 + (uint64_t)step);
        sdnn_gpu_step_stats st;
        sdnn_status s = sdnn_gpu_group_feed(R->G, d);
        if (s == SDNN_OK) s = sdnn_gpu_group_step(R->G, &st);
        free_data(d);
        if (s != SDNN_OK) return s;
        if (n > 1) {
            SDNN_CHECK(sdnn_gpu_group_pull(R->G));
            size_t b;
            param_err(R->nets[0], R->nets[1], &b);
            *replica_diff += b;
        }
    }
    return sdnn_gpu_group_pull(R->G);
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
    sdnn_gpu_group_options o = SDNN_GPU_GROUP_OPTIONS_INIT;
    o.bucket_mb = 0.002;   /* several buckets even for this small net */
    size_t rd;

    /* one replica, batch 8 */
    run one, two, two_seq, two_d0, two_fp16, stock;
    GT_OK(start(&one, "batch=8\n", init, &o, 1));
    GT_OK(train(&one, 1, 10, &rd));

    GT_OK(start(&two, NULL, init, &o, 2));
    GT_OK(train(&two, 2, 10, &rd));
    SOFT_ASSERT(rd == 0, "2 virtual replicas stay bit-identical (%zu bytes differed)", rd);
    size_t b;
    double e = param_err(two.nets[0], one.nets[0], &b);
    SOFT_ASSERT(e < 1e-4, "2 replicas x batch 4 vs 1 replica x batch 8 after 10 steps: rel err %.2e",
             e);

    sdnn_gpu_group_options seq = o;
    seq.overlap = 0;
    GT_OK(start(&two_seq, NULL, init, &seq, 2));
    GT_OK(train(&two_seq, 2, 10, &rd));
    param_err(two_seq.nets[0], two.nets[0], &b);
    SOFT_ASSERT(b == 0, "overlap=0 equals overlap=1 bit for bit (%zu bytes differ)", b);

    sdnn_gpu_group_options d0 = o;
    d0.split = SDNN_GPU_SPLIT_DEVICE0;
    GT_OK(start(&two_d0, NULL, init, &d0, 2));
    GT_OK(train(&two_d0, 2, 10, &rd));
    param_err(two_d0.nets[0], two.nets[0], &b);
    SOFT_ASSERT(b == 0 && rd == 0, "split=device0 equals split=cpu bit for bit (%zu bytes differ)", b);

    sdnn_gpu_group_options f = o;
    f.codec = "fp16";
    f.compress_min_floats = 1;
    GT_OK(start(&two_fp16, NULL, init, &f, 2));
    GT_OK(train(&two_fp16, 2, 10, &rd));
    e = param_err(two_fp16.nets[0], two.nets[0], &b);
    SOFT_ASSERT(rd == 0, "fp16 + error feedback: replicas bit-identical (%zu bytes differed)", rd);
    SOFT_ASSERT(e < 1e-2, "fp16 + error feedback vs exact after 10 steps: rel err %.2e", e);

    sdnn_gpu_group_options so = o;
    so.mode = SDNN_GPU_MODE_STOCK;
    so.stock_interval = 2;
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
    GT_OK(sdnn_gpu_group_preload_stats(two.G, &ps));
    printf("    preload (2 replicas, 10 steps): %d copies, %zu bytes, copy %.3f ms, exposed %.3f ms\n",
           ps.copies, ps.bytes, ps.copy_ms, ps.exposed_ms);
    SOFT_ASSERT(ps.copies == 20, "preload: one copy per replica and step (%d)", ps.copies);

    stop(&one, 1);
    stop(&two, 2);
    stop(&two_seq, 2);
    stop(&two_d0, 2);
    stop(&two_fp16, 2);
    stop(&stock, 2);
    sdnn_network_free(init);
    return gt_summary("vrep");
}
