/*
 * bucket_mb=auto in training: the plan arrives after the warm-up step and
 * profile_iters profiled steps, the exchange then uses exactly the plan's
 * buckets, uncompressed training gives the same weights bit for bit as
 * fixed buckets (the mean is elementwise, so boundaries change nothing),
 * compress=auto over a slow link compresses the big buckets and leaves tiny
 * ones alone, replicas stay in lockstep, error-feedback residuals survive a
 * re-plan layer by layer, and a drift re-plans.  The planner never calls a
 * comm: nothing in plugin/plan/ names one, and it plans from the link it is
 * handed, agreeing through the callbacks it is given.  The step's codec
 * models carry the collectives the exchange's comm offers (its table's
 * offers op; none without one), so the plan prices what runs
 * (tests/gpu/autoplan_gpu.c holds it on the gpu engine over NCCL).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <string.h>

#include "autoplan.h"
#include "config.h"
#include "comm.h"
#include "exchange.h"
#include "measure.h"
#include "replicas.h"
#include "trainer.h"
#include "testutil.h"

static const char *CFG =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=1000\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=64\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

#define INPUTS (8 * 8 * 3)

static network **replicas(int n)
{
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    srand(77);
    for (int r = 0; r < n; ++r) {
        nets[r] = tu_parse(CFG);
        assert_non_null(nets[r]);
    }
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    return nets;
}

static sdnn_trainer *trainer(int n, const char *keys)
{
    char text[1024];
    snprintf(text, sizeof text, "[scalednn]\n%s", keys);
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", text, &cfg, NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create(replicas(n), n, &cfg, 1, &t) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    return t;
}

/* One step on a batch from seed; returns whether it re-planned. */
static int step(sdnn_trainer *t, uint64_t *seed)
{
    data d = tu_batch(seed, 4 * sdnn_trainer_replicas(t), INPUTS, 5);
    sdnn_step_stats st;
    if (sdnn_trainer_step(t, d, &st) != SDNN_OK) fail_msg("%s", sdnn_last_error());
    free_data(d);
    return st.replanned;
}


static void test_plan_arrives_and_is_used(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "bucket_mb=auto\nprofile_iters=2\n");
    const sdnn_autoplan *a = sdnn_trainer_autoplan(t);
    assert_non_null(a);
    assert_null(sdnn_autoplan_current(a));
    uint64_t seed = 1;
    assert_false(step(t, &seed));   /* warm-up */
    assert_false(step(t, &seed));   /* profiled */
    assert_true(step(t, &seed));    /* profiled, then planned */
    const sdnn_plan *pl = sdnn_autoplan_current(a);
    assert_non_null(pl);
    assert_int_equal(sdnn_autoplan_count(a), 1);
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    assert_int_equal(sdnn_exchange_nbuckets(ex), pl->nb);
    for (int k = 0; k < pl->nb; ++k) {
        int lo, hi;
        size_t n = sdnn_exchange_bucket(ex, k, &lo, &hi);
        /* The exchange's lo/hi are the outermost layers with parameters. */
        assert_true(lo >= pl->b[k].lo && hi <= pl->b[k].hi);
        assert_true((double)n * 4.0 == pl->b[k].bytes);
        assert_ptr_equal(sdnn_exchange_bucket_codec(ex, k), &sdnn_codec_none);
    }
    assert_true(pl->pred.step_s > 0);
    assert_true(pl->pred.step_s >= pl->pred.compute_s);
    for (int i = 0; i < 4; ++i) assert_false(step(t, &seed));
    assert_true(tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, 1)));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sdnn_autoplan_print(a, f);
    fclose(f);
    assert_non_null(strstr(buf, "plan 1 (bucket_mb=auto), link probed local"));
    assert_non_null(strstr(buf, "predicted:"));
    free(buf);
    sdnn_trainer_destroy(t);
}

/* Buckets only decide when values move, not what they are: the weights
 * after the plan equal those of fixed buckets bit for bit. */
static void test_auto_equals_fixed(void **state)
{
    (void)state;
    sdnn_trainer *a = trainer(2, "bucket_mb=auto\nprofile_iters=1\n");
    sdnn_trainer *b = trainer(2, "bucket_mb=0.01\n");
    uint64_t sa = 5, sb = 5;
    int planned = 0;
    for (int i = 0; i < 6; ++i) {
        planned += step(a, &sa);
        step(b, &sb);
    }
    assert_int_equal(planned, 1);
    assert_true(tu_params_equal(sdnn_trainer_net(a, 0), sdnn_trainer_net(b, 0)));
    sdnn_trainer_destroy(a);
    sdnn_trainer_destroy(b);
}

/* Over a 10 Mbit/s link (as the cost model sees it) the big buckets are
 * worth compressing; a tiny last layer is not. */
static void test_compress_auto_slow_link(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "bucket_mb=auto\ncompress=auto\ncompress_allow=none,fp16,int8\n"
                                 "link_gbps=0.01\nlink_us=100\nprofile_iters=1\n");
    uint64_t seed = 9;
    int planned = 0;
    for (int i = 0; i < 4; ++i) planned += step(t, &seed);
    assert_int_equal(planned, 1);
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    int lossy = 0;
    size_t biggest = 0;
    const sdnn_codec_ops *big_codec = NULL;
    for (int k = 0; k < sdnn_exchange_nbuckets(ex); ++k) {
        size_t n = sdnn_exchange_bucket(ex, k, NULL, NULL);
        const sdnn_codec_ops *c = sdnn_exchange_bucket_codec(ex, k);
        lossy += c->lossy;
        if (n > biggest) {
            biggest = n;
            big_codec = c;
        }
    }
    assert_true(lossy >= 1);
    assert_true(big_codec->lossy);
    assert_true(tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, 1)));
    const sdnn_plan *pl = sdnn_autoplan_current(sdnn_trainer_autoplan(t));
    assert_true(pl->pred.exposed_s > 0);   /* 10 Mbit/s cannot hide everything */
    sdnn_trainer_destroy(t);
}

/* compress=auto weighs the codecs by their iteration factors: over the same
 * 10 Mbit/s link, lossy codecs that cost 50 times none's iterations lose
 * everywhere, and the printed plan shows the factors and the predicted
 * time to accuracy beside the step. */
static void test_compress_auto_factors(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "bucket_mb=auto\ncompress=auto\ncompress_allow=none,fp16,int8\n"
                                 "link_gbps=0.01\nlink_us=100\nprofile_iters=1\n"
                                 "iter_factor=fp16:50,int8:50\n");
    uint64_t seed = 9;
    int planned = 0;
    for (int i = 0; i < 4; ++i) planned += step(t, &seed);
    assert_int_equal(planned, 1);
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    for (int k = 0; k < sdnn_exchange_nbuckets(ex); ++k)
        assert_ptr_equal(sdnn_exchange_bucket_codec(ex, k), &sdnn_codec_none);
    const sdnn_plan *pl = sdnn_autoplan_current(sdnn_trainer_autoplan(t));
    assert_true(pl->iter_factor == 1.0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sdnn_autoplan_print(sdnn_trainer_autoplan(t), f);
    fclose(f);
    assert_non_null(strstr(buf, "iteration factors (iterations to the target against none's; "
                                "iter_factor= overrides): none 1, fp16 50, int8 50\n"));
    assert_non_null(strstr(buf, "predicted: time to accuracy N x 1 x step "));
    free(buf);
    sdnn_trainer_destroy(t);
    /* the stated factors (int8's 1.25 is the one overridden here) */
    t = trainer(2, "bucket_mb=auto\ncompress=auto\ncompress_allow=none,fp16,int8\n"
                   "link_gbps=0.01\nlink_us=100\nprofile_iters=1\niter_factor=int8:1.1\n");
    for (int i = 0; i < 4; ++i) step(t, &seed);
    buf = NULL;
    f = open_memstream(&buf, &len);
    sdnn_autoplan_print(sdnn_trainer_autoplan(t), f);
    fclose(f);
    assert_non_null(strstr(buf, "none 1, fp16 1, int8 1.1\n"));
    pl = sdnn_autoplan_current(sdnn_trainer_autoplan(t));
    /* the plan's factor: the largest of its buckets' codecs' (in
     * compress_allow's order: none 1, fp16 1, int8 1.1) */
    const double want[] = {1.0, 1.0, 1.1};
    double fmax = 0;
    for (int k = 0; k < pl->nb; ++k)
        if (want[pl->b[k].codec] > fmax) fmax = want[pl->b[k].codec];
    assert_true(pl->iter_factor == fmax);
    free(buf);
    sdnn_trainer_destroy(t);
}

/* The warm-up and profiled steps run without overlap, so the hooks time
 * the compute with no exchange on the same cores; the planned steps with
 * the cfg's overlap; a drift's re-profile without it again. */
static void test_profiled_steps_without_overlap(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "bucket_mb=auto\nprofile_iters=2\nreplan_drift=0.000001\n");
    const sdnn_autoplan *a = sdnn_trainer_autoplan(t);
    uint64_t seed = 4;
    int profiled = 0, planned_steps = 0, replans = 0, reprofiled = 0;
    for (int i = 0; i < 40; ++i) {
        int p = sdnn_autoplan_profiling(a);
        if (i < 3) assert_true(p);   /* warm-up and 2 profiled steps */
        if (p && sdnn_autoplan_count(a) > 0) reprofiled++;
        int re = step(t, &seed);
        replans += re;
        /* a replanned step ran on the exchange it replaced */
        if (re) {
            assert_int_equal(sdnn_exchange_overlap(sdnn_trainer_exchange(t)), 1);
            continue;
        }
        assert_int_equal(sdnn_exchange_overlap(sdnn_trainer_exchange(t)), p ? 0 : 1);
        profiled += p;
        planned_steps += !p;
    }
    assert_true(replans >= 1);
    assert_true(planned_steps >= 20);
    assert_true(reprofiled >= 1);   /* the drift's re-profile ran without overlap too */
    assert_true(tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, 1)));
    sdnn_trainer_destroy(t);
    /* overlap=0 stays 0 */
    t = trainer(2, "bucket_mb=auto\nprofile_iters=1\noverlap=0\n");
    for (int i = 0; i < 5; ++i) {
        step(t, &seed);
        assert_int_equal(sdnn_exchange_overlap(sdnn_trainer_exchange(t)), 0);
    }
    sdnn_trainer_destroy(t);
}

/* sdnn_exchange_carry_ef moves every layer's residual slice into its new
 * bucket, whatever the boundaries. */
static void test_carry_ef(void **state)
{
    (void)state;
    network **nets = replicas(2);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    sdnn_exchange_opts xo = {.bucket_mb = 100, .overlap = 1, .codec = &sdnn_codec_topk,
                             .error_feedback = 1, .topk_momentum = 0.5f};
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    xo.params = p;
    sdnn_exchange *one = NULL, *per = NULL;
    assert_int_equal(sdnn_exchange_create(nets, 2, comm, &xo, &one), SDNN_OK);
    assert_int_equal(sdnn_exchange_nbuckets(one), 1);
    /* One bucket per layer with parameters: 4, 3, 2, 0. */
    sdnn_bucket_spec spec[4] = {{4, 5, &sdnn_codec_topk}, {3, 3, &sdnn_codec_topk},
                                {1, 2, &sdnn_codec_topk}, {0, 0, &sdnn_codec_none}};
    xo.plan = spec;
    xo.nplan = 4;
    assert_int_equal(sdnn_exchange_create(nets, 2, comm, &xo, &per), SDNN_OK);
    assert_int_equal(sdnn_exchange_nbuckets(per), 4);
    size_t total = sdnn_exchange_bucket(one, 0, NULL, NULL);
    for (int r = 0; r < 2; ++r) {
        float *v, *res = sdnn_exchange_ef_residual(one, r, 0, &v);
        for (size_t i = 0; i < total; ++i) {
            res[i] = (float)(r * 100000 + (int)i);
            v[i] = -res[i];
        }
    }
    assert_int_equal(sdnn_exchange_carry_ef(per, one), 3);   /* layer 0 is uncompressed now */
    /* In `one` the layers sit from the last down: 4, 3, 2, 0. */
    size_t off = 0;
    for (int b = 0; b < 4; ++b) {
        size_t n = sdnn_exchange_bucket(per, b, NULL, NULL);
        for (int r = 0; r < 2; ++r) {
            float *v, *res = sdnn_exchange_ef_residual(per, r, b, &v);
            if (b == 3) {
                assert_null(res);
                continue;
            }
            for (size_t i = 0; i < n; ++i) {
                assert_true(res[i] == (float)(r * 100000 + (int)(off + i)));
                assert_true(v[i] == -res[i]);
            }
        }
        off += n;
    }
    assert_int_equal(off, total);
    /* A plan that misses a layer is refused. */
    sdnn_bucket_spec bad[2] = {{3, 5, NULL}, {1, 2, NULL}};
    xo.plan = bad;
    xo.nplan = 2;
    sdnn_exchange *x = NULL;
    sdnn_clear_error();
    assert_int_equal(sdnn_exchange_create(nets, 2, comm, &xo, &x), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "plan leaves layer 0 out"));
    sdnn_exchange_destroy(one);
    sdnn_exchange_destroy(per);
    sdnn_comm_close(comm);
    sdnn_replicas_free(nets, 2);
}

/* With a drift threshold nothing can meet, the planner profiles again
 * after the minimum 20 steps and plans a second time. */
static void test_drift_replans(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "bucket_mb=auto\nprofile_iters=1\nreplan_drift=0.000001\n");
    uint64_t seed = 3;
    for (int i = 0; i < 26; ++i) step(t, &seed);
    const sdnn_autoplan *a = sdnn_trainer_autoplan(t);
    assert_true(sdnn_autoplan_count(a) >= 2);
    /* a re-plan that kept the running plan says so once, and only then */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int seen = 0;
    sdnn_autoplan_print_note(a, &seen, f);
    sdnn_autoplan_print_note(a, &seen, f);
    sdnn_autoplan_print_note(NULL, &seen, f);
    fclose(f);
    const char *kept = strstr(buf, "kept the running plan");
    if (seen > 0) {
        assert_non_null(kept);
        assert_null(strstr(kept + 1, "kept the running plan"));
    } else {
        assert_int_equal(len, 0);
    }
    free(buf);
    assert_true(tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, 1)));
    sdnn_trainer_destroy(t);
}

/* The planner never calls a comm: no file of plugin/plan/ names an
 * sdnn_comm call or type, or includes comm.h (every call of a backend goes
 * through an sdnn_comm_* function, comm.h). */
static void test_plan_names_no_comm(void **state)
{
    (void)state;
    static const char *const banned[] = {"sdnn_comm", "\"comm.h\"", "allreduce_mean("};
    static const char *const must[] = {"autoplan.c", "profile.c", "plan.c", "costmodel.c"};
    DIR *d = opendir("plugin/plan");
    if (!d) fail_msg("cannot read plugin/plan (run from the repository root)");
    int found[sizeof must / sizeof *must] = {0};
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 3 || de->d_name[len - 2] != '.') continue;
        if (de->d_name[len - 1] != 'c' && de->d_name[len - 1] != 'h') continue;
        for (size_t m = 0; m < sizeof must / sizeof *must; ++m)
            found[m] |= strcmp(de->d_name, must[m]) == 0;
        char path[512];
        snprintf(path, sizeof path, "plugin/plan/%s", de->d_name);
        char *text = tu_slurp(path);
        if (!text) fail_msg("cannot read %s", path);
        for (size_t b = 0; b < sizeof banned / sizeof *banned; ++b)
            if (strstr(text, banned[b])) fail_msg("%s contains '%s'", path, banned[b]);
        free(text);
    }
    closedir(d);
    for (size_t m = 0; m < sizeof must / sizeof *must; ++m)
        if (!found[m]) fail_msg("plugin/plan/%s is missing: the check would pass vacuously", must[m]);
}

/* An agreement that counts its calls and leaves the values (every
 * "process" is this one). */
typedef struct counting_agree {
    int broadcasts;
    int means;
} counting_agree;

static sdnn_status count_broadcast(void *ctx, float *buf, size_t n)
{
    (void)buf, (void)n;
    ((counting_agree *)ctx)->broadcasts++;
    return SDNN_OK;
}

static sdnn_status count_mean(void *ctx, float *buf, size_t n)
{
    (void)buf, (void)n;
    ((counting_agree *)ctx)->means++;
    return SDNN_OK;
}

/* The planner plans from the link the step hands it (its name in the
 * printed plan) and agrees through the callbacks: the profile's mean and
 * process 0's plan once each; without a link for a world of 4 it refuses. */
static void test_plan_from_handed_link(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    assert_non_null(net);
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", "[scalednn]\nbucket_mb=auto\nprofile_iters=1\n", &cfg,
                               NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    sdnn_plan_measured m = {0};
    m.ncodecs = 1;
    m.ops[0] = &sdnn_codec_none;
    m.models[0] = sdnn_codec_model_none();
    counting_agree ca = {0};
    sdnn_plan_agree ag = {.procs = 2, .rank = 0, .ctx = &ca, .broadcast = count_broadcast,
                          .mean = count_mean};
    sdnn_autoplan *a = NULL;
    assert_int_equal(sdnn_autoplan_create(net, 2, 4, &cfg, &m, &ag, &a), SDNN_ERR_INVALID);
    assert_null(a);
    m.have_link = 1;
    assert_int_equal(sdnn_link_custom(1.0, 5.0, &m.link), SDNN_OK);
    snprintf(m.link.name, sizeof m.link.name, "handed");
    assert_int_equal(sdnn_autoplan_create(net, 2, 4, &cfg, &m, &ag, &a), SDNN_OK);
    const sdnn_bucket_spec *spec = NULL;
    int n = 0, ready = 0;
    for (int it = 0; it < 2 && !ready; ++it) {
        for (int r = 0; r < 2; ++r) {
            double *p = sdnn_autoplan_prof(a, r);
            for (int i = 0; i < 3 * net->n; ++i) p[i] = 1e-3;
        }
        assert_int_equal(sdnn_autoplan_after_step(a, net, 0.01, 1, &spec, &n, &ready), SDNN_OK);
    }
    assert_true(ready);
    assert_true(n >= 1);
    assert_int_equal(ca.means, 1);
    assert_int_equal(ca.broadcasts, 1);
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    sdnn_autoplan_print(a, f);
    fclose(f);
    assert_non_null(strstr(buf, "link handed"));
    sdnn_autoplan_destroy(a);
    sdnn_network_free(net);
}

/* A comm table of one process whose only op is offers: fp16 and bf16 the
 * native allreduce besides the coded ring, int8 nothing more. */
static unsigned fake_offers(const sdnn_comm *c, const sdnn_codec_ops *codec)
{
    (void)c;
    if (codec == &sdnn_codec_fp16 || codec == &sdnn_codec_bf16)
        return SDNN_CM_OFFERS(SDNN_CM_CODED_RING) | SDNN_CM_OFFERS(SDNN_CM_NATIVE);
    return 0;
}

static const sdnn_comm_ops fake_ops = {.name = "offering", .offers = fake_offers};

/* The models sdnn_measure_for_plan hands the planner: colls = what the
 * comm's offers op says per codec; a table without the op (local) gives 0
 * for every codec (collective.c's way only). */
static void test_models_carry_offers(void **state)
{
    (void)state;
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", "[scalednn]\nbucket_mb=auto\ncompress=auto\n"
                               "compress_allow=none,fp16,bf16,int8\nlink_gbps=10\n", &cfg,
                               NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    sdnn_comm fake = {.ops = &fake_ops, .rank = 0, .size = 1};
    sdnn_plan_measured pm;
    assert_int_equal(sdnn_measure_for_plan(NULL, &fake, NULL, 4, 4, &cfg, &pm), SDNN_OK);
    assert_int_equal(pm.ncodecs, 4);
    int seen = 0;
    for (int i = 0; i < pm.ncodecs; ++i) {
        unsigned want = fake_offers(&fake, pm.ops[i]);
        if (pm.models[i].colls != want)
            fail_msg("codec %s: the model carries collectives 0x%x, the comm offers 0x%x",
                     pm.ops[i]->name, pm.models[i].colls, want);
        seen += want != 0;
    }
    assert_int_equal(seen, 2);   /* fp16 and bf16: the check saw the bits */
    sdnn_comm *local = NULL;
    assert_int_equal(sdnn_comm_open("local", &local), SDNN_OK);
    assert_int_equal(sdnn_measure_for_plan(NULL, local, NULL, 4, 4, &cfg, &pm), SDNN_OK);
    for (int i = 0; i < pm.ncodecs; ++i) assert_int_equal(pm.models[i].colls, 0);
    sdnn_comm_close(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_arrives_and_is_used),
        cmocka_unit_test(test_auto_equals_fixed),
        cmocka_unit_test(test_compress_auto_slow_link),
        cmocka_unit_test(test_compress_auto_factors),
        cmocka_unit_test(test_profiled_steps_without_overlap),
        cmocka_unit_test(test_carry_ef),
        cmocka_unit_test(test_drift_replans),
        cmocka_unit_test(test_plan_names_no_comm),
        cmocka_unit_test(test_plan_from_handed_link),
        cmocka_unit_test(test_models_carry_offers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
