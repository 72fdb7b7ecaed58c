/*
 * test_engine: the engine registry, the cpu engine's per-layer operations,
 * the bucket layout, and a check that the trainer and the scheduler hold no
 * engine-specific branch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"
#include "exchange.h"
#include "layout.h"
#include "replicas.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static const char *CFG =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(sdnn_engine_find("cpu"), &sdnn_engine_cpu);
    assert_ptr_equal(sdnn_engine_find("gpu"), &sdnn_engine_gpu);
    assert_null(sdnn_engine_find("tpu"));
    assert_null(sdnn_engine_find(NULL));
    assert_string_equal(sdnn_engine_names(), "cpu, gpu");
    int n = 0;
    for (const sdnn_engine_ops *const *e = sdnn_engine_list(); *e; ++e) ++n;
    assert_int_equal(n, 2);
    assert_true(sdnn_engine_cpu.available(4, NULL, 0));
}

static void test_resolve(void **state)
{
    (void)state;
    const sdnn_engine_ops *e = NULL;
    char why[256];
    assert_int_equal(sdnn_engine_resolve("cpu", 2, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, &sdnn_engine_cpu);
    assert_int_equal(sdnn_engine_resolve("bogus", 2, &e, why, sizeof why), SDNN_ERR_INVALID);
    assert_null(e);
    assert_non_null(strstr(sdnn_last_error(), "bogus"));
    assert_non_null(strstr(sdnn_last_error(), "cpu, gpu"));
    /* auto: gpu exactly when the gpu engine says it can run 2 replicas. */
    char reason[256] = "";
    int gpu_ok = sdnn_engine_gpu.available(2, reason, sizeof reason);
    assert_int_equal(sdnn_engine_resolve("auto", 2, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, gpu_ok ? &sdnn_engine_gpu : &sdnn_engine_cpu);
    assert_non_null(strstr(why, "engine=auto"));
    if (!gpu_ok) {
        assert_true(reason[0] != '\0');
        assert_int_equal(sdnn_engine_resolve("gpu", 2, &e, why, sizeof why), SDNN_ERR_UNSUPPORTED);
        assert_non_null(strstr(sdnn_last_error(), reason));
    }
}

static void fill(network *net, uint64_t seed)
{
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        for (int j = 0; j < np; ++j)
            for (size_t k = 0; k < p[j].n; ++k) p[j].upd[k] = tu_uniform(&seed, -1.f, 1.f);
    }
}

/* snapshot, pack and apply against the arithmetic written out here. */
static void test_cpu_layer_ops(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    assert_non_null(net);
    network *nets[1] = {net};
    sdnn_engine *e = NULL;
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, &o, &e), SDNN_OK);
    assert_int_equal(e->ops->mem(e), SDNN_ENGINE_MEM_HOST);
    fill(net, 7);
    const int L = 0;   /* the convolution: weights, biases, scales */
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[L], p);
    assert_int_equal(np, 3);
    size_t n = p[0].n + p[1].n + p[2].n;
    float *snap, *pack, *mean;
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &snap), SDNN_OK);
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &pack), SDNN_OK);
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &mean), SDNN_OK);
    e->ops->snapshot(e, 0, L, snap);
    assert_memory_equal(snap, p[0].upd, p[0].n * sizeof(float));
    assert_memory_equal(snap + p[0].n, p[1].upd, p[1].n * sizeof(float));
    assert_memory_equal(snap + p[0].n + p[1].n, p[2].upd, p[2].n * sizeof(float));
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k) p[j].upd[k] += 0.25f * (float)(k % 5);
    sdnn_engine_bad bad = {0};
    assert_int_equal(e->ops->pack(e, 0, L, snap, pack, &bad), 0);
    size_t off = 0;
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k, ++off)
            assert_true(pack[off] == p[j].upd[k] - snap[off]);
    for (size_t k = 0; k < n; ++k) mean[k] = (float)k * 0.5f;
    e->ops->apply(e, 0, L, snap, mean);
    off = 0;
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k, ++off)
            assert_true(p[j].upd[k] == snap[off] + mean[off]);
    assert_int_equal(e->ops->check(e, 0, L, &bad), 0);
    /* A NaN in the biases is named by tensor and element. */
    p[1].upd[3] = NAN;
    assert_int_equal(e->ops->pack(e, 0, L, snap, pack, &bad), -1);
    assert_string_equal(bad.what, "biases");
    assert_int_equal(bad.at, 3);
    memset(&bad, 0, sizeof bad);
    assert_int_equal(e->ops->check(e, 0, L, &bad), -1);
    assert_string_equal(bad.what, "biases");
    assert_int_equal(bad.at, 3);
    e->ops->buf_free(e, 0, snap);
    e->ops->buf_free(e, 0, pack);
    e->ops->buf_free(e, 0, mean);
    sdnn_engine_destroy(e);
    sdnn_network_free(net);
}

/* The cpu engine's train() is train_network: the same weights bit for bit. */
static void test_cpu_train_is_darknet(void **state)
{
    (void)state;
    network *a = tu_parse(CFG), *b = tu_parse(CFG);
    assert_non_null(a);
    assert_non_null(b);
    tu_copy_params(a, b);
    network *nets[1] = {a};
    sdnn_engine *e = NULL;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, NULL, &e), SDNN_OK);
    for (int s = 0; s < 3; ++s) {
        uint64_t seed = 11 + (uint64_t)s;
        data d = tu_batch(&seed, 2, 8 * 8 * 3, 5);
        float la = 0;
        assert_int_equal(e->ops->train(e, 0, d, &la), SDNN_OK);
        float lb = train_network(b, d);
        assert_true(la == lb);
        free_data(d);
    }
    assert_true(tu_bitwise_equal(a, b));
    sdnn_engine_destroy(e);
    sdnn_network_free(a);
    sdnn_network_free(b);
}

static void test_gpu_stub_refuses(void **state)
{
    (void)state;
    if (sdnn_engine_gpu.available(1, NULL, 0)) skip();
    network *net = tu_parse(CFG);
    network *nets[1] = {net};
    sdnn_engine *e = NULL;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_gpu, nets, 1, NULL, &e), SDNN_ERR_UNSUPPORTED);
    assert_null(e);
    sdnn_network_free(net);
}

static void test_layout_fixed(void **state)
{
    (void)state;
    /* 1 MiB = 262144 floats.  Layers 5..0; 0 and 3 exchange nothing. */
    const size_t counts[6] = {0, 100000, 200000, 0, 300000, 50000};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_fixed(counts, 6, 1.0, &l), SDNN_OK);
    /* 5 (50000) + 4 (300000) reaches the target, then 2 + 1. */
    assert_int_equal(l.nbuckets, 2);
    assert_int_equal(l.bucket[0].hi, 5);
    assert_int_equal(l.bucket[0].lo, 4);
    assert_int_equal(l.bucket[0].count, 350000);
    assert_int_equal(l.bucket[1].hi, 2);
    assert_int_equal(l.bucket[1].lo, 1);
    assert_int_equal(l.layer[5].offset, 0);
    assert_int_equal(l.layer[4].offset, 50000);
    assert_int_equal(l.layer[1].offset, 200000);
    assert_int_equal(l.layer[3].bucket, -1);
    assert_int_equal(l.layer[0].bucket, -1);
    assert_int_equal(l.total, 650000);
    sdnn_layout_free(&l);
    assert_int_equal(sdnn_layout_fixed(counts, 6, 0.0, &l), SDNN_ERR_INVALID);
}

static void test_layout_plan(void **state)
{
    (void)state;
    const size_t counts[4] = {10, 0, 20, 30};
    sdnn_layout_range ok[2] = {{2, 3}, {0, 1}};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_plan(counts, 4, ok, 2, &l), SDNN_OK);
    assert_int_equal(l.nbuckets, 2);
    assert_int_equal(l.bucket[0].count, 50);
    assert_int_equal(l.layer[2].offset, 30);
    assert_int_equal(l.bucket[1].nlayers, 1);
    sdnn_layout_free(&l);
    sdnn_layout_range gap[1] = {{2, 3}};
    assert_int_equal(sdnn_layout_plan(counts, 4, gap, 1, &l), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "leaves layer 0 out"));
    sdnn_layout_range empty[2] = {{0, 3}, {1, 1}};
    assert_int_equal(sdnn_layout_plan(counts, 4, empty, 2, &l), SDNN_ERR_INVALID);
}

/* The exchange's buckets are the layout's. */
static void test_exchange_uses_layout(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    network *nets[1] = {net};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_build(net, 0.001, NULL, 0, &l), SDNN_OK);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    sdnn_exchange_opts xo = {0};
    xo.bucket_mb = 0.001;
    xo.overlap = 1;
    sdnn_exchange *ex = NULL;
    assert_int_equal(sdnn_exchange_create(nets, 1, comm, &xo, &ex), SDNN_OK);
    assert_int_equal(sdnn_exchange_nbuckets(ex), l.nbuckets);
    assert_true(l.nbuckets >= 2);
    for (int b = 0; b < l.nbuckets; ++b) {
        int lo, hi;
        assert_int_equal(sdnn_exchange_bucket(ex, b, &lo, &hi), l.bucket[b].count);
        assert_int_equal(lo, l.bucket[b].lo);
        assert_int_equal(hi, l.bucket[b].hi);
    }
    for (int i = 0; i < net->n; ++i)
        assert_int_equal(sdnn_exchange_layer_bucket(ex, i), l.layer[i].bucket);
    sdnn_exchange_destroy(ex);
    sdnn_comm_close(comm);
    sdnn_layout_free(&l);
    sdnn_network_free(net);
}

/* Nothing above the table knows which engine it drives. */
static void test_no_engine_branch(void **state)
{
    (void)state;
    static const char *const files[] = {"plugin/step/trainer.c", "plugin/step/exchange.c",
                                        "plugin/step/layout.c"};
    static const char *const banned[] = {"gpu", "cuda", "#if", "sdnn_engine_cpu"};
    for (size_t f = 0; f < sizeof files / sizeof *files; ++f) {
        char *text = tu_slurp(files[f]);
        if (!text) fail_msg("cannot read %s (run from the repository root)", files[f]);
        for (size_t b = 0; b < sizeof banned / sizeof *banned; ++b)
            if (strstr(text, banned[b])) fail_msg("%s contains '%s'", files[f], banned[b]);
        free(text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_cpu_layer_ops),
        cmocka_unit_test(test_cpu_train_is_darknet),
        cmocka_unit_test(test_gpu_stub_refuses),
        cmocka_unit_test(test_layout_fixed),
        cmocka_unit_test(test_layout_plan),
        cmocka_unit_test(test_exchange_uses_layout),
        cmocka_unit_test(test_no_engine_branch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
