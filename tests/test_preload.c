/*
 * The trainer's preload queue (sdnn_trainer_feed / step_fed, engine.h's
 * feed op) on the CPU:
 *  - the cpu engine holds one batch (its replicas read the host rows in
 *    place): feed + step_fed equals sdnn_trainer_step bit for bit, a second
 *    feed before the step and a plain step with a batch fed are refused;
 *  - split=device0 is refused by the cpu engine, naming the key;
 *  - an engine that holds K batches (the cpu engine's table with a depth of
 *    its own, as a device engine's ring): batches train in the order fed,
 *    the K+1th feed is refused, and the parameters equal stepping the same
 *    batches one by one, bit for bit, for K = 1, 2 and 3;
 *  - a resize drops the batches fed at the old size (counted), a batch of
 *    the old size fed after it is refused, and one of the new size trains.
 * The device engine's rings are checked on simulated devices
 * (tests/gpu/feed.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "config.h"
#include "engine.h"
#include "replicas.h"
#include "trainer.h"
#include "testutil.h"

static const char *CFG_FCN =
    "[net]\nbatch=%d\nsubdivisions=%d\nwidth=%d\nheight=%d\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=5\nsize=1\nstride=1\npad=0\nactivation=linear\n"
    "[avgpool]\n"
    "[softmax]\n";

#define CLASSES 5
#define B 2        /* batch per subdivision */
#define SUB 2      /* subdivisions */
#define N 2        /* replicas */
#define ROWS (N * B * SUB)

/* N replicas at size x size with `like`'s weights (NULL: random). */
static network **replicas_like(int size, network *like)
{
    char text[2048];
    snprintf(text, sizeof text, CFG_FCN, B * SUB, SUB, size, size);
    network **nets = calloc(N, sizeof *nets);
    assert_non_null(nets);
    for (int r = 0; r < N; ++r) {
        nets[r] = tu_parse(text);
        assert_non_null(nets[r]);
    }
    if (like) tu_copy_params(like, nets[0]);
    assert_int_equal(sdnn_replicas_broadcast(nets, N), SDNN_OK);
    return nets;
}

static network **replicas(int size) { return replicas_like(size, NULL); }

static sdnn_config cfg_with(int preload, const char *split)
{
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.bucket_mb = 0.0001;
    c.preload = preload;
    snprintf(c.split, sizeof c.split, "%s", split);
    return c;
}

/* ---- an engine that holds K batches: the cpu engine's table, a depth of
 * its own, and a log of what was fed and what each train() was given ---- */

static sdnn_engine_ops g_deep;
static float *g_fed[16], *g_trained[16];
static int g_nfed, g_ntrained;

static sdnn_status deep_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    sdnn_status s = sdnn_engine_cpu.create(e, o);
    if (s == SDNN_OK) e->preload = o->preload;
    return s;
}

static sdnn_status deep_feed(sdnn_engine *e, data batch)
{
    if (g_nfed < 16) g_fed[g_nfed++] = batch.X.vals[0];
    return sdnn_engine_cpu.feed(e, batch);
}

static sdnn_status deep_train(sdnn_engine *e, int r, data slice, float *loss)
{
    /* Replica 0's rows start the batch: the first row names it. */
    if (r == 0 && g_ntrained < 16) g_trained[g_ntrained++] = slice.X.vals[0];
    return sdnn_engine_cpu.train(e, r, slice, loss);
}

static const sdnn_engine_ops *deep_engine(void)
{
    g_deep = sdnn_engine_cpu;
    g_deep.name = "deep";
    g_deep.create = deep_create;
    g_deep.feed = deep_feed;
    g_deep.train = deep_train;
    g_nfed = g_ntrained = 0;
    return &g_deep;
}

static sdnn_trainer *trainer_like(const sdnn_engine_ops *eng, int preload, const char *split,
                                  int size, sdnn_trainer *like)
{
    sdnn_config cfg = cfg_with(preload, split);
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    o.engine = eng;
    sdnn_trainer *t = NULL;
    network **nets = replicas_like(size, like ? sdnn_trainer_net(like, 0) : NULL);
    sdnn_status s = sdnn_trainer_create_opts(nets, N, &cfg, &o, 1, &t);
    if (s != SDNN_OK) fprintf(stderr, "create: %s\n", sdnn_last_error());
    assert_int_equal(s, SDNN_OK);
    return t;
}

static sdnn_trainer *trainer_on(const sdnn_engine_ops *eng, int preload, const char *split,
                                int size)
{
    return trainer_like(eng, preload, split, size, NULL);
}

static void same_params(sdnn_trainer *a, sdnn_trainer *b)
{
    for (int r = 0; r < N; ++r)
        assert_true(tu_bitwise_equal(sdnn_trainer_net(a, r), sdnn_trainer_net(b, r)));
}

/* ---- the cpu engine: one batch ------------------------------------------ */

static void test_cpu_holds_one(void **state)
{
    (void)state;
    sdnn_trainer *fed = trainer_on(&sdnn_engine_cpu, 3, "cpu", 16);
    sdnn_trainer *ref = trainer_like(&sdnn_engine_cpu, 3, "cpu", 16, fed);
    same_params(fed, ref);
    assert_int_equal(sdnn_trainer_preload(fed), 1);
    uint64_t s1 = 5, s2 = 5;
    for (int step = 0; step < 3; ++step) {
        data d = tu_batch(&s1, ROWS, 16 * 16 * 3, CLASSES);
        data e = tu_batch(&s2, ROWS, 16 * 16 * 3, CLASSES);
        assert_int_equal(sdnn_trainer_feed(fed, d), SDNN_OK);
        assert_int_equal(sdnn_trainer_queued(fed), 1);
        /* Full: the caller keeps e on a refused feed. */
        assert_int_equal(sdnn_trainer_feed(fed, e), SDNN_ERR_INVALID);
        assert_non_null(strstr(sdnn_last_error(), "1 batch fed and not yet trained"));
        sdnn_step_stats st, sr;
        assert_int_equal(sdnn_trainer_step(fed, e, &st), SDNN_ERR_INVALID);
        assert_non_null(strstr(sdnn_last_error(), "sdnn_trainer_step_fed first"));
        assert_int_equal(sdnn_trainer_step_fed(fed, &st), SDNN_OK);
        assert_int_equal(sdnn_trainer_queued(fed), 0);
        assert_int_equal(sdnn_trainer_step(ref, e, &sr), SDNN_OK);
        assert_true(memcmp(&st.loss, &sr.loss, sizeof st.loss) == 0);
        same_params(fed, ref);
        free_data(e);
    }
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step_fed(fed, &st), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "no batch fed"));
    sdnn_trainer_destroy(fed);
    sdnn_trainer_destroy(ref);
}

static void test_cpu_refuses_device0(void **state)
{
    (void)state;
    sdnn_config cfg = cfg_with(2, "device0");
    network **nets = replicas(16);
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    o.engine = &sdnn_engine_cpu;
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create_opts(nets, N, &cfg, &o, 1, &t), SDNN_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(sdnn_last_error(), "split=device0 needs a device engine"));
    assert_non_null(strstr(sdnn_last_error(), "split=cpu"));
    sdnn_replicas_free(nets, N);
}

/* ---- K batches ahead ------------------------------------------------------ */

static void deep_in_order(int k)
{
    sdnn_trainer *fed = trainer_on(deep_engine(), k, "cpu", 16);
    sdnn_trainer *ref = trainer_like(&sdnn_engine_cpu, 1, "cpu", 16, fed);
    same_params(fed, ref);
    assert_int_equal(sdnn_trainer_preload(fed), k);
    uint64_t s1 = 11, s2 = 11;
    const int steps = 6;
    int trained = 0;
    for (int i = 0; i < steps; ++i) {
        data d = tu_batch(&s1, ROWS, 16 * 16 * 3, CLASSES);
        assert_int_equal(sdnn_trainer_feed(fed, d), SDNN_OK);
        if (sdnn_trainer_queued(fed) < k) continue;
        /* Full at k: one more is refused. */
        data extra = tu_batch(&(uint64_t){99}, ROWS, 16 * 16 * 3, CLASSES);
        assert_int_equal(sdnn_trainer_feed(fed, extra), SDNN_ERR_INVALID);
        free_data(extra);
        sdnn_step_stats st, sr;
        assert_int_equal(sdnn_trainer_step_fed(fed, &st), SDNN_OK);
        data e = tu_batch(&s2, ROWS, 16 * 16 * 3, CLASSES);
        assert_int_equal(sdnn_trainer_step(ref, e, &sr), SDNN_OK);
        free_data(e);
        assert_true(memcmp(&st.loss, &sr.loss, sizeof st.loss) == 0);
        same_params(fed, ref);
        trained++;
    }
    /* What is left trains in order too. */
    while (sdnn_trainer_queued(fed) > 0) {
        sdnn_step_stats st, sr;
        assert_int_equal(sdnn_trainer_step_fed(fed, &st), SDNN_OK);
        data e = tu_batch(&s2, ROWS, 16 * 16 * 3, CLASSES);
        assert_int_equal(sdnn_trainer_step(ref, e, &sr), SDNN_OK);
        free_data(e);
        same_params(fed, ref);
        trained++;
    }
    assert_int_equal(trained, steps);
    assert_int_equal(g_nfed, steps);
    assert_int_equal(g_ntrained, steps);
    /* The rows each step trained are the batch fed that many steps before
     * (the pointers are the trainer's held batches, freed once trained:
     * compare the order of first rows, recorded before any free). */
    for (int i = 0; i < steps; ++i) assert_ptr_equal(g_trained[i], g_fed[i]);
    sdnn_trainer_destroy(fed);
    sdnn_trainer_destroy(ref);
}

static void test_deep_in_order(void **state)
{
    (void)state;
    for (int k = 1; k <= 3; ++k) deep_in_order(k);
}

/* ---- multi-scale: drop what was fed at the old size ------------------------ */

/* A trainer on the deep engine (preload= as given, split=cpu, 16 x 16
 * inputs) with two batches fed and both still queued. */
static sdnn_trainer *two_fed(int preload, uint64_t *seed)
{
    sdnn_trainer *t = trainer_on(deep_engine(), preload, "cpu", 16);
    for (int i = 0; i < 2; ++i)
        assert_int_equal(sdnn_trainer_feed(t, tu_batch(seed, ROWS, 16 * 16 * 3, CLASSES)),
                         SDNN_OK);
    assert_int_equal(sdnn_trainer_queued(t), 2);
    return t;
}

static void test_resize_drops(void **state)
{
    (void)state;
    uint64_t seed = 3;
    sdnn_trainer *t = two_fed(3, &seed);
    assert_int_equal(sdnn_trainer_dropped(t), 0);
    assert_int_equal(sdnn_trainer_resize(t, 24, 24), SDNN_OK);
    assert_int_equal(sdnn_trainer_queued(t), 0);
    assert_int_equal(sdnn_trainer_dropped(t), 2);
    /* A batch loaded at the old size is never trained at the new one. */
    data old = tu_batch(&seed, ROWS, 16 * 16 * 3, CLASSES);
    assert_int_equal(sdnn_trainer_feed(t, old), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "768 inputs; the network takes 1728 (24x24x3)"));
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step(t, old, &st), SDNN_ERR_INVALID);
    free_data(old);
    data now = tu_batch(&seed, ROWS, 24 * 24 * 3, CLASSES);
    assert_int_equal(sdnn_trainer_feed(t, now), SDNN_OK);
    assert_int_equal(sdnn_trainer_step_fed(t, &st), SDNN_OK);
    assert_true(isfinite(st.loss) && st.bytes > 0);
    assert_true(sdnn_replicas_identical(sdnn_trainer_nets(t), N, NULL, 0));
    /* One more resize with one queued: the count goes on. */
    assert_int_equal(sdnn_trainer_feed(t, tu_batch(&seed, ROWS, 24 * 24 * 3, CLASSES)),
                     SDNN_OK);
    assert_int_equal(sdnn_trainer_resize(t, 16, 16), SDNN_OK);
    assert_int_equal(sdnn_trainer_dropped(t), 3);
    sdnn_trainer_destroy(t);   /* frees nothing twice (ASan) */
}

/* Batches still queued when the trainer goes are freed with it. */
static void test_destroy_frees_queued(void **state)
{
    (void)state;
    uint64_t seed = 4;
    sdnn_trainer *t = two_fed(2, &seed);
    sdnn_trainer_destroy(t);   /* LSan: nothing leaks */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_holds_one),
        cmocka_unit_test(test_cpu_refuses_device0),
        cmocka_unit_test(test_deep_in_order),
        cmocka_unit_test(test_resize_drops),
        cmocka_unit_test(test_destroy_frees_queued),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
