/*
 * The training oracles of DESIGN §5 that run on the CPU:
 *  1. one replica in scalednn mode == libdarknet's train_network, bit for bit;
 *  2. N replicas of batch b == one replica of batch N*b with the same scaled
 *     rate (no batch norm), relative error < 1e-5 after 10 steps, for
 *     overlap on/off and several bucket sizes;
 *  3. stock mode == an independent reference of Darknet's averaging;
 *  4. replicas stay bit-identical after every scalednn step;
 * plus the non-finite stop, the bucket partition and the comm registry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm.h"
#include "config.h"
#include "exchange.h"
#include "loader.h"
#include "replicas.h"
#include "saveio.h"
#include "trainer.h"
#include <sys/stat.h>
#include "testutil.h"
#include "margin.h"

/* With batch norm; rate schedule that changes during the run (burn_in,
 * steps) so the learning rate of every update matters. */
static const char *CFG_BN =
    "[net]\nbatch=%d\nsubdivisions=%d\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.05\nburn_in=3\npolicy=steps\n"
    "steps=6\nscales=.5\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

/* Without batch norm, constant rate: the N x b == 1 x Nb oracle. */
static const char *CFG_PLAIN =
    "[net]\nbatch=%d\nsubdivisions=%d\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=16\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

#define INPUTS (8 * 8 * 3)
#define CLASSES 5

static network *make_net(const char *fmt, int batch, int subdiv)
{
    char text[2048];
    /* Darknet divides [net] batch by subdivisions. */
    snprintf(text, sizeof text, fmt, batch * subdiv, subdiv);
    network *net = tu_parse(text);
    assert_non_null(net);
    return net;
}

/* n replicas of fmt at batch b whose weights equal `like`'s. */
static network **make_replicas(const char *fmt, int b, int subdiv, int n, network *like)
{
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    for (int r = 0; r < n; ++r) nets[r] = make_net(fmt, b, subdiv);
    if (like) tu_copy_params(like, nets[0]);
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    return nets;
}

/* The oracles here are libdarknet's train_network, bit for bit or within
 * 1e-5: the trainer runs libdarknet's convolutions (cpu_conv=darknet), not
 * the default's oneDNN ones. */
static void darknet_conv(sdnn_config *c)
{
    snprintf(c->cpu_conv, sizeof c->cpu_conv, "darknet");
}

static sdnn_config scalednn_cfg(double bucket_mb, int overlap)
{
    sdnn_config c = SDNN_CONFIG_INIT;
    darknet_conv(&c);
    c.present = 1;
    c.mode = SDNN_MODE_SCALEDNN;
    c.bucket_mb = bucket_mb;
    c.overlap = overlap;
    return c;
}

/* A scalednn trainer (one bucket per layer, overlap on) over n replicas of
 * a cfg given as text, with replica 0's weights on all of them. */
static sdnn_trainer *trainer_from_text(const char *cfgtext, int n)
{
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    for (int r = 0; r < n; ++r) {
        nets[r] = tu_parse(cfgtext);
        assert_non_null(nets[r]);
    }
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    sdnn_config cfg = scalednn_cfg(0.0001, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    return t;
}

/* ---- oracle 1 ------------------------------------------------------------ */

static void one_replica_equals_darknet(int subdiv, double bucket_mb, int overlap)
{
    const int b = 4;
    network *ref = make_net(CFG_BN, b, subdiv);
    network **nets = make_replicas(CFG_BN, b, subdiv, 1, ref);
    assert_true(tu_bitwise_equal(ref, nets[0]));
    sdnn_config cfg = scalednn_cfg(bucket_mb, overlap);
    cfg.fix_bn_delta = 0;   /* the oracle is Darknet as users have it */
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, 1, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 42;
    for (int step = 0; step < 5; ++step) {
        data d = tu_batch(&seed, b * subdiv, INPUTS, CLASSES);
        float lref = train_network(ref, d);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        assert_true(memcmp(&lref, &st.loss, sizeof lref) == 0);
        assert_true(tu_bitwise_equal(ref, sdnn_trainer_net(t, 0)));
        assert_int_equal(*ref->seen, *sdnn_trainer_net(t, 0)->seen);
        assert_int_equal(st.bytes, 0);
        free_data(d);
    }
    sdnn_trainer_destroy(t);
    sdnn_network_free(ref);
}

static void test_one_replica_bitwise(void **state)
{
    (void)state;
    one_replica_equals_darknet(1, 4.0, 1);
    one_replica_equals_darknet(2, 4.0, 1);
    one_replica_equals_darknet(2, 0.0001, 0);
}

/* With fix_bn_delta=1 (the default) the batch-normalised layers' backward
 * is the exact one: after one step the weights differ from Darknet's, the
 * loss (a forward before any update) does not. */
static void test_fix_bn_delta_differs(void **state)
{
    (void)state;
    const int b = 4;
    network *ref = make_net(CFG_BN, b, 1);
    network **nets = make_replicas(CFG_BN, b, 1, 1, ref);
    sdnn_config cfg = scalednn_cfg(4.0, 1);
    assert_int_equal(cfg.fix_bn_delta, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, 1, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 42;
    data d = tu_batch(&seed, b, INPUTS, CLASSES);
    float lref = train_network(ref, d);
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
    assert_true(memcmp(&lref, &st.loss, sizeof lref) == 0);
    assert_false(tu_bitwise_equal(ref, sdnn_trainer_net(t, 0)));
    free_data(d);
    sdnn_trainer_destroy(t);
    sdnn_network_free(ref);
}

/* ---- oracle 2 ------------------------------------------------------------ */

static void n_replicas_equal_big_batch(int n, int subdiv, double bucket_mb, int overlap)
{
    const int b = 3;
    network *ref = make_net(CFG_PLAIN, n * b, subdiv);
    ref->learning_rate *= (float)n;     /* "the same scaled rate" */
    network **nets = make_replicas(CFG_PLAIN, b, subdiv, n, ref);
    network *init = make_net(CFG_PLAIN, b, subdiv);
    tu_copy_params(ref, init);
    sdnn_config cfg = scalednn_cfg(bucket_mb, overlap);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 7;
    for (int step = 0; step < 10; ++step) {
        data d = tu_batch(&seed, n * b * subdiv, INPUTS, CLASSES);
        train_network(ref, d);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        assert_true(st.bytes > 0);
        free_data(d);
    }
    double err = tu_rel_diff(ref, sdnn_trainer_net(t, 0));
    /* The test must be able to fail: the weights moved from their start far
     * more than the tolerance over 10 steps. */
    double moved = tu_rel_diff(ref, init);
    sdnn_network_free(init);
    printf("n=%d subdiv=%d bucket_mb=%g overlap=%d: rel err %.3g (weights moved %.3g)\n", n,
           subdiv, bucket_mb, overlap, err, moved);
    tm_margin("test_train:n_replicas_eq_one_big_batch", err, 1e-5);
    assert_true(err < 1e-5);
    assert_true(moved > 1e-3);
    /* Counters: N batches per step, like a batch of N*b. */
    assert_int_equal(*sdnn_trainer_net(t, 0)->seen, *ref->seen);
    assert_int_equal(sdnn_trainer_iteration(t), 10 * (size_t)n);
    sdnn_trainer_destroy(t);
    sdnn_network_free(ref);
}

static void test_n_replicas_equal_big_batch(void **state)
{
    (void)state;
    const double buckets[] = {0.0001, 0.004, 4.0};
    for (int n = 2; n <= 4; n += 2)
        for (int k = 0; k < 3; ++k)
            for (int ov = 0; ov <= 1; ++ov) n_replicas_equal_big_batch(n, 1, buckets[k], ov);
    n_replicas_equal_big_batch(2, 2, 0.004, 1);
}

/* The update of a step must use the learning rate of the whole step
 * (iteration base + N): with burn_in and steps, N replicas of batch b equal
 * one replica of batch N*b whose schedule is N times shorter in iterations. */
static const char *CFG_SCHED =
    "[net]\nbatch=%d\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\nburn_in=%d\npolicy=steps\n"
    "steps=%d\nscales=.3\nmax_batches=100\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static void test_rate_schedule_per_step(void **state)
{
    (void)state;
    const int n = 2, b = 3;
    char text[2048];
    snprintf(text, sizeof text, CFG_SCHED, n * b, 6 / n, 12 / n);
    network *ref = tu_parse(text);
    ref->learning_rate *= (float)n;
    snprintf(text, sizeof text, CFG_SCHED, b, 6, 12);
    network **nets = calloc((size_t)n, sizeof *nets);
    for (int r = 0; r < n; ++r) nets[r] = tu_parse(text);
    tu_copy_params(ref, nets[0]);
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    sdnn_config cfg = scalednn_cfg(0.004, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 31;
    for (int step = 0; step < 10; ++step) {
        data d = tu_batch(&seed, n * b, INPUTS, CLASSES);
        train_network(ref, d);
        sdnn_step_stats st;
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
        assert_true(get_current_rate(ref) == get_current_rate(sdnn_trainer_net(t, 0)));
        free_data(d);
    }
    double err = tu_rel_diff(ref, sdnn_trainer_net(t, 0));
    printf("schedule: rel err %.3g at iteration %zu\n", err, sdnn_trainer_iteration(t));
    tm_margin("test_train:schedule", err, 1e-5);
    assert_true(err < 1e-5);
    sdnn_trainer_destroy(t);
    sdnn_network_free(ref);
}

/* ---- oracle 3 ------------------------------------------------------------ */

/* Darknet's train_networks + sync_nets, written from its description. */
static void reference_stock_step(network **nets, int n, data d, int interval)
{
    for (int r = 0; r < n; ++r) {
        data p = sdnn_data_slice(d, r, n);
        train_network(nets[r], p);
    }
    size_t per = (size_t)nets[0]->batch * (size_t)nets[0]->subdivisions;
    if ((*nets[0]->seen / per) % (size_t)interval != 0) return;
    *nets[0]->seen += (size_t)interval * (size_t)(n - 1) * per;
    for (int r = 1; r < n; ++r) *nets[r]->seen = *nets[0]->seen;
    for (int i = 0; i < nets[0]->n; ++i) {
        layer l0 = nets[0]->layers[i];
        float *bufs[3][8];
        size_t lens[3];
        int k = 0;
        if (l0.type == CONVOLUTIONAL) {
            lens[0] = (size_t)l0.nweights, lens[1] = (size_t)l0.n, lens[2] = (size_t)l0.n;
            for (int r = 0; r < n; ++r) {
                bufs[0][r] = nets[r]->layers[i].weights;
                bufs[1][r] = nets[r]->layers[i].biases;
                bufs[2][r] = nets[r]->layers[i].scales;
            }
            k = l0.batch_normalize ? 3 : 2;
        } else if (l0.type == CONNECTED) {
            lens[0] = (size_t)l0.inputs * (size_t)l0.outputs, lens[1] = (size_t)l0.outputs;
            for (int r = 0; r < n; ++r) {
                bufs[0][r] = nets[r]->layers[i].weights;
                bufs[1][r] = nets[r]->layers[i].biases;
            }
            k = 2;
        }
        for (int j = 0; j < k; ++j) {
            float *base = malloc(lens[j] * sizeof(float));
            assert_non_null(base);
            memcpy(base, bufs[j][0], lens[j] * sizeof(float));
            for (int r = 1; r < n; ++r)
                for (size_t e = 0; e < lens[j]; ++e) base[e] += bufs[j][r][e];
            for (size_t e = 0; e < lens[j]; ++e) base[e] *= (float)(1.0 / n);
            for (int r = 0; r < n; ++r) memcpy(bufs[j][r], base, lens[j] * sizeof(float));
            free(base);
        }
    }
}

static void stock_equals_reference(int n, int interval)
{
    const int b = 2;
    network **ref = make_replicas(CFG_BN, b, 1, n, NULL);
    network **nets = make_replicas(CFG_BN, b, 1, n, ref[0]);
    for (int r = 0; r < n; ++r) ref[r]->learning_rate *= (float)n;
    sdnn_config cfg = SDNN_CONFIG_INIT;
    darknet_conv(&cfg);   /* the reference steps run libdarknet's convolutions */
    cfg.mode = SDNN_MODE_STOCK;
    cfg.interval = interval;
    cfg.fix_bn_delta = 0;   /* the reference steps run Darknet's own backward */
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 99;
    int syncs = 0;
    for (int step = 0; step < 9; ++step) {
        data d = tu_batch(&seed, n * b, INPUTS, CLASSES);
        reference_stock_step(ref, n, d, interval);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        syncs += st.synced;
        for (int r = 0; r < n; ++r) {
            assert_true(tu_bitwise_equal(ref[r], sdnn_trainer_net(t, r)));
            assert_int_equal(*ref[r]->seen, *sdnn_trainer_net(t, r)->seen);
        }
        free_data(d);
    }
    assert_true(syncs >= 2);
    /* After a sync the replicas' weights agree; between syncs they drift. */
    sdnn_trainer_destroy(t);
    sdnn_replicas_free(ref, n);
}

static void test_stock_equals_reference(void **state)
{
    (void)state;
    stock_equals_reference(2, 4);
    stock_equals_reference(2, 2);
    stock_equals_reference(3, 2);
}

/* ---- oracle 4 ------------------------------------------------------------ */

static void replicas_identical(int n, int subdiv, double bucket_mb, int overlap)
{
    const int b = 2;
    network **nets = make_replicas(CFG_BN, b, subdiv, n, NULL);
    sdnn_config cfg = scalednn_cfg(bucket_mb, overlap);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 5;
    for (int step = 0; step < 6; ++step) {
        data d = tu_batch(&seed, n * b * subdiv, INPUTS, CLASSES);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        char where[128] = "";
        int same = sdnn_replicas_identical(sdnn_trainer_nets(t), n, where, sizeof where);
        if (!same) fprintf(stderr, "step %d: %s\n", step, where);
        assert_true(same);
        free_data(d);
    }
    /* And the check itself can fail. */
    sdnn_trainer_net(t, n - 1)->layers[0].weights[3] += 1e-3f;
    assert_false(sdnn_replicas_identical(sdnn_trainer_nets(t), n, NULL, 0));
    sdnn_trainer_destroy(t);
}

static void test_replicas_stay_identical(void **state)
{
    (void)state;
    replicas_identical(2, 1, 4.0, 1);
    replicas_identical(3, 2, 0.0001, 1);
    replicas_identical(4, 1, 0.001, 0);
}

/* Batch-norm running statistics are averaged before a save. */
static void test_bn_average(void **state)
{
    (void)state;
    network **nets = make_replicas(CFG_BN, 2, 1, 2, NULL);
    for (int e = 0; e < 8; ++e) {
        nets[0]->layers[0].rolling_mean[e] = 1.f;
        nets[1]->layers[0].rolling_mean[e] = 3.f;
        nets[0]->layers[0].rolling_variance[e] = 2.f;
        nets[1]->layers[0].rolling_variance[e] = 4.f;
    }
    sdnn_replicas_average_bn(nets, 2);
    for (int r = 0; r < 2; ++r)
        for (int e = 0; e < 8; ++e) {
            assert_true(nets[r]->layers[0].rolling_mean[e] == 2.f);
            assert_true(nets[r]->layers[0].rolling_variance[e] == 3.f);
        }
    sdnn_replicas_free(nets, 2);
}

/* Fully convolutional, so it can change input size (multi-scale). */
static const char *CFG_FCN =
    "[net]\nbatch=%d\nsubdivisions=%d\nwidth=16\nheight=16\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=5\nsize=1\nstride=1\npad=0\nactivation=linear\n"
    "[avgpool]\n"
    "[softmax]\n";

/* Multi-scale: every replica resized to one new size keeps training in
 * lockstep. */
static void test_resize_keeps_lockstep(void **state)
{
    (void)state;
    const int n = 2, b = 2;
    network **nets = make_replicas(CFG_FCN, b, 1, n, NULL);
    sdnn_config cfg = scalednn_cfg(0.0001, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 8;
    const int sizes[] = {16, 24, 8, 16};
    for (int k = 0; k < 4; ++k) {
        assert_int_equal(sdnn_trainer_resize(t, sizes[k], sizes[k]), SDNN_OK);
        for (int r = 0; r < n; ++r) {
            assert_int_equal(sdnn_trainer_net(t, r)->w, sizes[k]);
            assert_int_equal(sdnn_trainer_net(t, r)->inputs, sizes[k] * sizes[k] * 3);
        }
        data d = tu_batch(&seed, n * b, sizes[k] * sizes[k] * 3, 5);
        sdnn_step_stats st;
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
        assert_true(st.bytes > 0);
        assert_true(sdnn_replicas_identical(sdnn_trainer_nets(t), n, NULL, 0));
        free_data(d);
    }
    sdnn_trainer_destroy(t);
}

/* Layers at or before a stopbackward layer get no gradient: they are not
 * exchanged, and the step must not wait for them. */
static void test_stopbackward_layers_not_exchanged(void **state)
{
    (void)state;
    const char *cfgtext =
        "[net]\nbatch=4\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
        "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
        "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
        "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\nstopbackward=1\n"
        "[connected]\noutput=5\nactivation=linear\n"
        "[softmax]\n";
    sdnn_trainer *t = trainer_from_text(cfgtext, 2);
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    assert_int_equal(sdnn_exchange_layer_bucket(ex, 0), -1);
    assert_int_equal(sdnn_exchange_layer_bucket(ex, 1), -1);
    assert_int_equal(sdnn_exchange_layer_bucket(ex, 2), 0);
    assert_int_equal(sdnn_exchange_nbuckets(ex), 1);
    uint64_t seed = 4;
    for (int k = 0; k < 3; ++k) {
        data d = tu_batch(&seed, 8, INPUTS, CLASSES);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        char where[128] = "";
        int same = sdnn_replicas_identical(sdnn_trainer_nets(t), 2, where, sizeof where);
        if (!same) fprintf(stderr, "step %d: %s\n", k, where);
        assert_true(same);
        free_data(d);
    }
    sdnn_trainer_destroy(t);
}

/* Saving: scalednn mode writes the replicas' mean running statistics;
 * stock mode writes the mean weights (Darknet syncs before every save).
 * The files load back into libdarknet. */
static void save_and_load(int mode)
{
    const int n = 2, b = 2;
    network **nets = make_replicas(CFG_BN, b, 1, n, NULL);
    sdnn_config cfg = scalednn_cfg(4.0, 1);
    cfg.mode = mode;
    cfg.interval = 100;   /* no stock sync during these steps */
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 21;
    for (int k = 0; k < 3; ++k) {
        data d = tu_batch(&seed, n * b, INPUTS, CLASSES);
        sdnn_step_stats st;
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
        free_data(d);
    }
    layer *l0 = &sdnn_trainer_net(t, 0)->layers[0], *l1 = &sdnn_trainer_net(t, 1)->layers[0];
    float want_mean[8], want_w[8];
    for (int e = 0; e < 8; ++e) {
        want_mean[e] = (l0->rolling_mean[e] + l1->rolling_mean[e]) * 0.5f;
        want_w[e] = (l0->weights[e] + l1->weights[e]) * 0.5f;
    }
    if (mode == SDNN_MODE_SCALEDNN) {
        /* Replicas saw different images: their statistics differ. */
        assert_true(memcmp(l0->rolling_mean, l1->rolling_mean, 8 * sizeof(float)) != 0);
    } else {
        assert_true(memcmp(l0->weights, l1->weights, 8 * sizeof(float)) != 0);
    }
    char path[] = "/tmp/sdnn-save-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sdnn_trainer_save(t, path), SDNN_OK);
    network *back = make_net(CFG_BN, b, 1);
    assert_int_equal(sdnn_check_weights_file(back, path, 1, NULL), SDNN_OK);
    load_weights(back, path);
    for (int e = 0; e < 8; ++e) {
        if (mode == SDNN_MODE_SCALEDNN)
            assert_true(back->layers[0].rolling_mean[e] == want_mean[e]);
        else
            assert_true(back->layers[0].weights[e] == want_w[e]);
    }
    /* Non-finite parameters are never saved over a good file. */
    sdnn_trainer_net(t, 0)->layers[3].biases[0] = NAN;
    if (mode == SDNN_MODE_STOCK) sdnn_trainer_net(t, 1)->layers[3].biases[0] = NAN;
    assert_int_equal(sdnn_trainer_save(t, path), SDNN_ERR_NONFINITE);
    network *again = make_net(CFG_BN, b, 1);
    load_weights(again, path);
    assert_true(memcmp(back->layers[3].biases, again->layers[3].biases, 5 * sizeof(float)) == 0);
    sdnn_network_free(again);
    sdnn_network_free(back);
    unlink(path);
    sdnn_trainer_destroy(t);
}

static void test_save_scalednn_averages_bn(void **state)
{
    (void)state;
    save_and_load(SDNN_MODE_SCALEDNN);
}

static void test_save_stock_averages_weights(void **state)
{
    (void)state;
    save_and_load(SDNN_MODE_STOCK);
}

/* A weights file must fit the cfg: whole layers, no truncated tail. */
static void test_weights_file_check(void **state)
{
    (void)state;
    network *net = make_net(CFG_BN, 2, 1);
    char path[] = "/tmp/sdnn-wcheck-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    save_weights(net, path);
    int layers = -1;
    assert_int_equal(sdnn_check_weights_file(net, path, 1, &layers), SDNN_OK);
    assert_int_equal(layers, 4);   /* conv, maxpool, conv, connected */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    /* Header + layer 0 only: a valid partial file for training, not for test. */
    long long l0 = 4LL * (8 + 8 * 3 * 9 + 3 * 8);
    assert_int_equal(truncate(path, 20 + l0), 0);
    assert_int_equal(sdnn_check_weights_file(net, path, 0, &layers), SDNN_OK);
    assert_int_equal(layers, 1);
    assert_int_equal(sdnn_check_weights_file(net, path, 1, &layers), SDNN_ERR_INVALID);
    /* Cut inside a layer: refused either way, with the file named. */
    assert_int_equal(truncate(path, 20 + l0 + 10), 0);
    sdnn_clear_error();
    assert_int_equal(sdnn_check_weights_file(net, path, 0, &layers), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), path));
    assert_int_equal(truncate(path, 7), 0);
    assert_int_equal(sdnn_check_weights_file(net, path, 0, &layers), SDNN_ERR_INVALID);
    unlink(path);
    assert_int_equal(sdnn_check_weights_file(net, path, 0, &layers), SDNN_ERR_IO);
    sdnn_network_free(net);
}

/* ---- failures ------------------------------------------------------------ */

static void test_nonfinite_stops(void **state)
{
    (void)state;
    for (int overlap = 0; overlap <= 1; ++overlap) {
        network **nets = make_replicas(CFG_BN, 2, 1, 2, NULL);
        sdnn_config cfg = scalednn_cfg(4.0, overlap);
        sdnn_trainer *t = NULL;
        assert_int_equal(sdnn_trainer_create(nets, 2, &cfg, 1, &t), SDNN_OK);
        uint64_t seed = 3;
        data d = tu_batch(&seed, 4, INPUTS, CLASSES);
        sdnn_step_stats st;
        sdnn_status sst = sdnn_trainer_step(t, d, &st);
        if (sst != SDNN_OK) fprintf(stderr, "step: %s\n", sdnn_last_error());
        assert_int_equal(sst, SDNN_OK);
        /* Poison replica 1: its gradients become NaN. */
        sdnn_trainer_net(t, 1)->layers[3].weights[0] = NAN;
        sdnn_clear_error();
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_NONFINITE);
        const char *msg = sdnn_last_error();
        printf("message: %s\n", msg);
        assert_non_null(strstr(msg, "to iteration 4"));
        assert_non_null(strstr(msg, "replica 1"));
        assert_non_null(strstr(msg, "layer 3"));
        /* The replicas hold the failed step's partial state: the trainer
         * refuses to go on or to save. */
        sdnn_trainer_net(t, 1)->layers[3].weights[0] = 0.f;
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_ABORTED);
        assert_int_equal(sdnn_trainer_save(t, "/tmp/sdnn-never-written.weights"), SDNN_ERR_ABORTED);
        assert_int_equal(access("/tmp/sdnn-never-written.weights", F_OK), -1);
        free_data(d);
        sdnn_trainer_destroy(t);
    }
}

static void test_world_of_one_nonfinite(void **state)
{
    (void)state;
    network **nets = make_replicas(CFG_BN, 2, 1, 1, NULL);
    sdnn_config cfg = scalednn_cfg(4.0, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, 1, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 3;
    data d = tu_batch(&seed, 2, INPUTS, CLASSES);
    /* (Not through the input: Darknet's maxpool keeps index -1 for an
     * all-NaN window and writes out of bounds in backward.) */
    sdnn_trainer_net(t, 0)->layers[3].biases[1] = INFINITY;
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_NONFINITE);
    assert_non_null(strstr(sdnn_last_error(), "replica 0"));
    free_data(d);
    sdnn_trainer_destroy(t);
}

/* NaN input: Darknet's maxpool would keep index -1 for an all-NaN window
 * and write out of bounds in backward (ASan sees that); the hooks stop the
 * step first and report it. */
static void test_nonfinite_input_stops_cleanly(void **state)
{
    (void)state;
    for (int n = 1; n <= 2; ++n) {
        network **nets = make_replicas(CFG_BN, 2, 1, n, NULL);
        sdnn_config cfg = scalednn_cfg(0.0001, 1);
        sdnn_trainer *t = NULL;
        assert_int_equal(sdnn_trainer_create(nets, n, &cfg, 1, &t), SDNN_OK);
        uint64_t seed = 13;
        data d = tu_batch(&seed, 2 * n, INPUTS, CLASSES);
        for (int j = 0; j < INPUTS; ++j) d.X.vals[2 * n - 1][j] = NAN;
        sdnn_step_stats st;
        sdnn_clear_error();
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_NONFINITE);
        printf("n=%d: %s\n", n, sdnn_last_error());
        char want[32];
        snprintf(want, sizeof want, "replica %d", n - 1);
        assert_non_null(strstr(sdnn_last_error(), want));
        assert_non_null(strstr(sdnn_last_error(), "non-finite"));
        free_data(d);
        sdnn_trainer_destroy(t);
    }
}

/* The maxpool guard itself: an all-NaN window right at the input. */
static void test_maxpool_guard(void **state)
{
    (void)state;
    const char *cfgtext =
        "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
        "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
        "[convolutional]\nfilters=5\nsize=1\nstride=1\npad=0\nactivation=linear\n"
        "[maxpool]\nsize=2\nstride=2\n"
        "[avgpool]\n[softmax]\n";
    sdnn_trainer *t = trainer_from_text(cfgtext, 2);
    uint64_t seed = 17;
    data d = tu_batch(&seed, 4, INPUTS, CLASSES);
    /* One NaN window of 2x2 pixels in every channel of image 3 (replica 1);
     * the 1x1 convolution keeps it local; the maxpool turns it into
     * -FLT_MAX, so nothing after it is non-finite and only the guard on the
     * maxpool's backward can see it. */
    for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 2; ++y)
            for (int x = 0; x < 2; ++x) d.X.vals[3][c * 64 + y * 8 + x] = NAN;
    sdnn_step_stats st;
    sdnn_clear_error();
    assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_NONFINITE);
    printf("%s\n", sdnn_last_error());
    assert_non_null(strstr(sdnn_last_error(), "replica 1"));
    assert_non_null(strstr(sdnn_last_error(), "input of layer 1 (maxpool)"));
    free_data(d);
    sdnn_trainer_destroy(t);
}

static void test_wrong_batch_rows(void **state)
{
    (void)state;
    network **nets = make_replicas(CFG_BN, 2, 1, 2, NULL);
    sdnn_config cfg = scalednn_cfg(4.0, 1);
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create(nets, 2, &cfg, 1, &t), SDNN_OK);
    uint64_t seed = 3;
    data d = tu_batch(&seed, 3, INPUTS, CLASSES);
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_INVALID);
    free_data(d);
    sdnn_trainer_destroy(t);
}

/* ---- buckets, comm, loader ---------------------------------------------- */

static void test_bucket_partition(void **state)
{
    (void)state;
    network **nets = make_replicas(CFG_PLAIN, 2, 1, 2, NULL);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    const double sizes[] = {0.00001, 0.002, 100.0};
    const int expect_min[] = {4, 2, 1};
    for (int k = 0; k < 3; ++k) {
        sdnn_exchange *ex = NULL;
        sdnn_exchange_opts xo = {.bucket_mb = sizes[k], .overlap = 1};
        assert_int_equal(sdnn_exchange_create(nets, 2, comm, &xo, &ex), SDNN_OK);
        int nb = sdnn_exchange_nbuckets(ex);
        assert_true(nb >= expect_min[k]);
        if (k == 0) assert_int_equal(nb, 4);   /* one per layer with parameters */
        if (k == 2) assert_int_equal(nb, 1);
        size_t total = 0;
        int prev_lo = nets[0]->n;
        for (int bk = 0; bk < nb; ++bk) {
            int lo, hi;
            total += sdnn_exchange_bucket(ex, bk, &lo, &hi);
            assert_true(hi < prev_lo);   /* reverse layer order, contiguous */
            assert_true(lo <= hi);
            for (int i = lo; i <= hi; ++i)
                if (nets[0]->layers[i].update) assert_int_equal(sdnn_exchange_layer_bucket(ex, i), bk);
            prev_lo = lo;
        }
        assert_int_equal(total, sdnn_network_param_count(nets[0]));
        sdnn_exchange_destroy(ex);
    }
    sdnn_comm_close(comm);
    sdnn_replicas_free(nets, 2);
}

static void test_comm_registry(void **state)
{
    (void)state;
    sdnn_comm *c = NULL;
    assert_int_equal(sdnn_comm_open("mpi", &c), SDNN_ERR_UNSUPPORTED);
    assert_non_null(strstr(sdnn_last_error(), "not available in this build"));
    assert_int_equal(sdnn_comm_open("carrier-pigeon", &c), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_comm_open("local", &c), SDNN_OK);
    assert_int_equal(c->size, 1);
    assert_int_equal(c->rank, 0);
    uint64_t seed = 11;
    enum { N = 10007, R = 3 };
    float *in[R], out[N];
    for (int r = 0; r < R; ++r) {
        in[r] = malloc(N * sizeof(float));
        for (int i = 0; i < N; ++i) in[r][i] = tu_uniform(&seed, -10, 10);
    }
    assert_int_equal(c->ops->allreduce_mean(c, (const float *const *)in, R, out, N), SDNN_OK);
    for (int i = 0; i < N; ++i) {
        float want = ((in[0][i] + in[1][i]) + in[2][i]) * (1.0f / 3.0f);
        assert_true(memcmp(&want, &out[i], sizeof want) == 0);
    }
    for (int r = 0; r < R; ++r) free(in[r]);
    sdnn_comm_close(c);
}

static void test_data_slice_shares_rows(void **state)
{
    (void)state;
    uint64_t seed = 1;
    data d = tu_batch(&seed, 12, 4, 2);
    for (int p = 0; p < 3; ++p) {
        data s = sdnn_data_slice(d, p, 3);
        assert_int_equal(s.X.rows, 4);
        assert_ptr_equal(s.X.vals[0], d.X.vals[4 * p]);
        assert_ptr_equal(s.y.vals[3], d.y.vals[4 * p + 3]);
        assert_int_equal(s.shallow, 1);
    }
    free_data(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_replica_bitwise),
        cmocka_unit_test(test_fix_bn_delta_differs),
        cmocka_unit_test(test_n_replicas_equal_big_batch),
        cmocka_unit_test(test_rate_schedule_per_step),
        cmocka_unit_test(test_stock_equals_reference),
        cmocka_unit_test(test_replicas_stay_identical),
        cmocka_unit_test(test_bn_average),
        cmocka_unit_test(test_resize_keeps_lockstep),
        cmocka_unit_test(test_save_scalednn_averages_bn),
        cmocka_unit_test(test_save_stock_averages_weights),
        cmocka_unit_test(test_weights_file_check),
        cmocka_unit_test(test_stopbackward_layers_not_exchanged),
        cmocka_unit_test(test_nonfinite_stops),
        cmocka_unit_test(test_world_of_one_nonfinite),
        cmocka_unit_test(test_nonfinite_input_stops_cleanly),
        cmocka_unit_test(test_maxpool_guard),
        cmocka_unit_test(test_wrong_batch_rows),
        cmocka_unit_test(test_bucket_partition),
        cmocka_unit_test(test_comm_registry),
        cmocka_unit_test(test_data_slice_shares_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
