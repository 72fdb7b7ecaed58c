/*
 * A first layer that writes its input's delta (hooks.h,
 * sdnn_first_delta_needed): libdarknet hands layer 0 the network's delta,
 * NULL in training, and most layer types write through it at the first
 * backward (SIGSEGV).  For each such type as layer 0, the cpu engine
 * trains (stock settings: no [scalednn] section) bit for bit like
 * libdarknet's own train_network on the same network given an explicit
 * scratch delta (the run the crash does not reach), also after a resize;
 * the profiler runs it; gradcheck's double reference agrees with the
 * cpu engine (and the gpu engine, in a build with a GPU runtime) behind a
 * first [maxpool]/[avgpool]/[upsample]; `detector train`
 * exits 0 with a first [maxpool] or [batchnorm] in stock and scalednn mode
 * (Debian's CPU build never allocates its training buffers: layerfix.h).
 * A loss layer ([logistic], [softmax], [cost]) before the last is refused
 * by the engine (it reads past the truth).  A first [dropout] stays refused
 * by the cfg check (libdarknet's parser reads the layer before it), naming
 * the layer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cfgcheck.h"
#include "dialect.h"
#include "engine.h"
#include "gradcheck.h"
#include "hooks.h"
#include "profile.h"
#include "testutil.h"

#define NET "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n" \
            "learning_rate=0.001\nmomentum=0.9\ndecay=0.0005\n"
/* An image body and a flat one (after a layer whose output is a vector). */
#define BODY "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
             "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=1\nactivation=linear\n" \
             "[cost]\ntype=sse\n"
#define FLAT "[connected]\noutput=6\nactivation=leaky\n[connected]\noutput=3\n" \
             "activation=linear\n[cost]\ntype=sse\n"

typedef struct first_case {
    const char *name;
    const char *text;
} first_case;

/* Layer 0 of each: a type whose backward writes its input's delta. */
static const first_case CASES[] = {
    {"maxpool", NET "[maxpool]\nsize=2\nstride=1\n" BODY},
    {"maxpool/2", NET "[maxpool]\nsize=2\nstride=2\n" BODY},
    {"avgpool", NET "[avgpool]\n" BODY},
    {"upsample", NET "[upsample]\nstride=2\n" BODY},
    /* stride 1: libdarknet's reorg divides the channels by stride^2 (0 for
     * 3 channels at stride 2: SIGFPE in its forward, any layer). */
    {"reorg", NET "[reorg]\nstride=1\n" BODY},
    {"activation", NET "[activation]\nactivation=leaky\n" BODY},
    {"batchnorm", NET "[batchnorm]\n" BODY},
    {"normalization", NET "[normalization]\n" BODY},
    {"l2norm", NET "[l2norm]\n" BODY},
    /* noloss=1: a softmax with its loss reads its input's size of truth
     * values, past the network's truth when layers follow it. */
    {"softmax", NET "[softmax]\nnoloss=1\n" FLAT},
    /* A head as the whole network: its truth is its input's size. */
    {"logistic", NET "[logistic]\n"},
};
#define NCASES (sizeof CASES / sizeof *CASES)

static char g_dir[64];
static const char *g_bin;

static network *parse(const char *text, unsigned seed)
{
    char path[128];
    snprintf(path, sizeof path, "%s/net.cfg", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    srand(seed);
    network *net = sdnn_parse_network(path);
    assert_non_null(net);
    return net;
}

static data batch_for(network *net, uint64_t *seed)
{
    data d = tu_batch(seed, net->batch, net->inputs, net->truths);
    for (int i = 0; i < d.y.rows; ++i)
        for (int k = 0; k < d.y.cols; ++k) d.y.vals[i][k] = tu_uniform(seed, 0.f, 1.f);
    return d;
}

/* libdarknet's own train_network with the network's delta set: layer 0
 * writes there instead of through NULL. */
static float *give_delta(network *net)
{
    float *d = calloc((size_t)net->layers[0].inputs * (size_t)net->batch, sizeof *d);
    assert_non_null(d);
    net->delta = d;
    return d;
}

static void test_which_types_need_it(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCASES; ++i) {
        network *net = parse(CASES[i].text, 1);
        if (!sdnn_first_delta_needed(net)) printf("%s: not named\n", CASES[i].name);
        assert_true(sdnn_first_delta_needed(net));
        sdnn_network_free(net);
    }
    /* Layers that test for a missing delta need nothing. */
    static const char *const tests_it[] = {
        NET BODY,
        NET "[connected]\noutput=4\nactivation=leaky\n[cost]\ntype=sse\n",
        NET "[local]\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=leaky\n[cost]\ntype=sse\n",
    };
    for (size_t i = 0; i < sizeof tests_it / sizeof *tests_it; ++i) {
        network *net = parse(tests_it[i], 1);
        assert_false(sdnn_first_delta_needed(net));
        sdnn_network_free(net);
    }
}

/* The cpu engine with the engine defaults (stock mode's: no callbacks)
 * against train_network with an explicit delta: the losses and every
 * tensor bit for bit over 3 steps, then again after a resize to a larger
 * input where the layer can be resized (the scratch grows). */
static void test_cpu_engine_trains(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCASES; ++i) {
        printf("first layer %s\n", CASES[i].name);
        network *a = parse(CASES[i].text, 7), *b = parse(CASES[i].text, 7);
        float *bd = give_delta(b);
        network *nets[1] = {a};
        sdnn_engine *e = NULL;
        assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, NULL, &e), SDNN_OK);
        assert_true(sdnn_hooks_installed(a));
        uint64_t seed = 40 + i;
        LAYER_TYPE t = a->layers[0].type;
        int resizable = t == MAXPOOL || t == UPSAMPLE || t == REORG || t == NORMALIZATION;
        for (int s = 0; s < (resizable ? 5 : 3); ++s) {
            if (s == 3) {
                /* 16x16: layer 0's input quadruples. */
                assert_int_equal(resize_network(a, 16, 16), 0);
                assert_int_equal(resize_network(b, 16, 16), 0);
                assert_int_equal(e->ops->resize(e, 16, 16), SDNN_OK);
                free(bd);
                bd = give_delta(b);
            }
            data d = batch_for(a, &seed);
            float la = 0;
            assert_int_equal(e->ops->train(e, 0, d, &la), SDNN_OK);
            float lb = train_network(b, d);
            if (!isfinite(la) || la != lb) printf("step %d: loss %g, libdarknet %g\n", s, la, lb);
            assert_true(isfinite(la));
            assert_true(la == lb);
            free_data(d);
        }
        assert_true(tu_bitwise_equal(a, b));
        sdnn_engine_destroy(e);
        assert_false(sdnn_hooks_installed(a));
        b->delta = NULL;
        free(bd);
        sdnn_network_free(a);
        sdnn_network_free(b);
    }
}

/* The profiler's own layer loop on an unhooked network. */
static void test_profile_runs(void **state)
{
    (void)state;
    for (size_t i = 0; i < NCASES; ++i) {
        network *net = parse(CASES[i].text, 3);
        sdnn_profile_opts o = SDNN_PROFILE_OPTS_INIT;
        o.iters = 1;
        o.warmup = 0;
        sdnn_cost_profile p;
        assert_int_equal(sdnn_profile_network(net, &o, &p), SDNN_OK);
        assert_false(sdnn_hooks_installed(net));
        sdnn_cost_profile_free(&p);
        sdnn_network_free(net);
    }
}

/* The layers after the first train right: gradcheck's double reference
 * (which has these layer types) agrees with the cpu engine. */
static void test_gradcheck_behind_first_layer(void **state)
{
    (void)state;
    static const char *const texts[] = {
        NET "[maxpool]\nsize=2\nstride=1\n" BODY,
        NET "[upsample]\nstride=2\n" BODY,
        NET "[avgpool]\n" BODY,
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; ++i) {
        /* 2: the gpu engine, where the build has a GPU runtime (make
         * GPU=sim): it skips the input delta of layer 0, the same answer. */
        const sdnn_engine_ops *gpu = sdnn_engine_find("gpu");
        int runs = gpu && gpu->available(1, NULL, 0) ? 3 : 2;
        for (int stock = 0; stock < runs; ++stock) {
            char text[1024];
            snprintf(text, sizeof text, "%s[scalednn]\nmode=%s\n", texts[i],
                     stock == 1 ? "stock" : "scalednn");
            sdnn_gradcheck_opts o = SDNN_GRADCHECK_OPTS_INIT;
            if (stock == 2) o.engine = "gpu";
            o.samples = 8;
            sdnn_gradcheck_report r;
            sdnn_status st = sdnn_gradcheck_text("first.cfg", text, &o, &r);
            if (st != SDNN_OK) printf("gradcheck: %s\n", sdnn_last_error());
            assert_int_equal(st, SDNN_OK);
            sdnn_gradcheck_print(&r, stdout);
            assert_int_equal(r.nlayers, 2);
            assert_int_equal(r.failed, 0);
            sdnn_gradcheck_report_free(&r);
        }
    }
}

/* The reported run: shapes.cfg with the layer put before its layer 0,
 * `detector train` to the end, in stock mode and in scalednn mode. */
static void test_detector_train(void **state)
{
    (void)state;
    char *shapes = tu_slurp("cfg/shapes.cfg");
    assert_non_null(shapes);
    const char *at = strstr(shapes, "# 0: 64x64x3");
    assert_non_null(at);
    static const char *const firsts[] = {"[maxpool]\nsize=2\nstride=1\n", "[batchnorm]\n"};
    for (size_t i = 0; i < sizeof firsts / sizeof *firsts; ++i)
        for (int mode = 0; mode < 2; ++mode) {
            char path[128];
            snprintf(path, sizeof path, "%s/first.cfg", g_dir);
            FILE *f = fopen(path, "w");
            assert_non_null(f);
            fprintf(f, "%.*s%s\n%s%s", (int)(at - shapes), shapes, firsts[i], at,
                    mode ? "\n[scalednn]\nmode=scalednn\n" : "");
            fclose(f);
            int rc = tu_run("cd %s && %s detector train x.data first.cfg -max_batches 2 "
                            ">train.log 2>&1", g_dir, g_bin);
            if (rc != 0) {
                printf("%s mode %d: exit %d\n", firsts[i], mode, rc);
                tu_run("tail -5 %s/train.log", g_dir);
            }
            assert_int_equal(rc, 0);
            char w[160];
            snprintf(w, sizeof w, "%s/backup/first_final.weights", g_dir);
            assert_int_equal(access(w, R_OK), 0);
            unlink(w);
        }
    free(shapes);
}

/* A loss layer before the last reads its input's size of the truth, which
 * libdarknet sizes for the last layer: refused by every engine before any
 * training, naming the layer (shapes.cfg with a first [logistic] was a
 * SIGSEGV in its forward). */
static void test_loss_before_last_refused(void **state)
{
    (void)state;
    static const char *const texts[] = {NET "[logistic]\n" BODY, NET "[softmax]\n" FLAT,
                                        NET "[cost]\ntype=sse\n" FLAT};
    static const char *const names[] = {"layer 0 ([logistic])", "layer 0 ([softmax])",
                                        "layer 0 ([cost])"};
    for (size_t i = 0; i < 3; ++i) {
        network *net = parse(texts[i], 1);
        network *nets[1] = {net};
        sdnn_engine *e = NULL;
        sdnn_clear_error();
        assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, NULL, &e), SDNN_ERR_INVALID);
        assert_null(e);
        assert_non_null(strstr(sdnn_last_error(), names[i]));
        assert_non_null(strstr(sdnn_last_error(), "truth"));
        sdnn_network_free(net);
    }
    char *shapes = tu_slurp("cfg/shapes.cfg");
    assert_non_null(shapes);
    const char *at = strstr(shapes, "# 0: 64x64x3");
    assert_non_null(at);
    char path[128];
    snprintf(path, sizeof path, "%s/logistic.cfg", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%.*s[logistic]\n\n%s", (int)(at - shapes), shapes, at);
    fclose(f);
    free(shapes);
    assert_int_equal(tu_run("cd %s && %s detector train x.data logistic.cfg -max_batches 2 "
                            ">logistic.log 2>&1", g_dir, g_bin), 1);
    assert_int_equal(tu_run("grep -q 'layer 0 (\\[logistic\\]) reads' %s/logistic.log", g_dir), 0);
    char w[160];
    snprintf(w, sizeof w, "%s/backup/logistic_final.weights", g_dir);
    assert_int_not_equal(access(w, F_OK), 0);
}

/* A first [dropout] cannot be built by libdarknet's parser: still refused
 * by the cfg check, naming the file, line and layer. */
static void test_first_dropout_refused(void **state)
{
    (void)state;
    sdnn_clear_error();
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET "[dropout]\nprobability=.5\n" BODY),
                     SDNN_ERR_INVALID);
    const char *msg = sdnn_last_error();
    assert_non_null(strstr(msg, "d.cfg:10: [dropout]"));
    assert_non_null(strstr(msg, "cannot be the first layer"));
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-first-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 16 -valid 2 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/x.data", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "classes=4\ntrain=%s/shapes/train.txt\nvalid=%s/shapes/valid.txt\n"
            "names=%s/shapes/shapes.names\nbackup=%s/backup/\n", g_dir, g_dir, g_dir, g_dir);
    fclose(f);
    return tu_run("mkdir -p %s/backup", g_dir);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_types_need_it),
        cmocka_unit_test(test_cpu_engine_trains),
        cmocka_unit_test(test_profile_runs),
        cmocka_unit_test(test_gradcheck_behind_first_layer),
        cmocka_unit_test(test_detector_train),
        cmocka_unit_test(test_loss_before_last_refused),
        cmocka_unit_test(test_first_dropout_refused),
    };
    /* SDNN_TEST_FILTER=PATTERN runs the matching tests alone (cmocka's filter). */
    const char *filter = getenv("SDNN_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
