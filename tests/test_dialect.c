/*
 * The maintained Darknet fork's cfg dialect: the mish and swish
 * formulas of plugin/act_ops.h against references written here in double
 * precision (values, and gradients against a central difference of the
 * reference), and the cfg checker refusing, by file, line and key, every
 * dialect key this project does not build yet and every bad value of the
 * [yolo] keys it builds, while the neutral values (what libdarknet
 * computes anyway) and Debian's own keys still pass.  The [yolo] layer's
 * formulas and loss are tested in test_yolo.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "act_ops.h"
#include "cfgcheck.h"
#include "dialect.h"
#include "gradcheck.h"
#include "replicas.h"
#include "testutil.h"
#include "margin.h"
#include "scalednn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- references ------------------------------------------------------------ */

static double ref_mish(double x) { return x * tanh(log(1.0 + exp(x))); }
static double ref_swish(double x) { return x / (1.0 + exp(-x)); }

static double central(double (*f)(double), double x)
{
    const double h = 1e-5;
    return (f(x + h) - f(x - h)) / (2 * h);
}

/* Relative-or-absolute closeness: float formulas against double references. */
static void assert_close(double got, double want, double tol, const char *what, double x)
{
    double err = fabs(got - want) / (fabs(want) > 1.0 ? fabs(want) : 1.0);
    if (err > tol) fail_msg("%s(%g) = %.9g, reference %.9g (error %.3g > %.3g)", what, x, got, want,
                            err, tol);
}

static void test_mish_swish_values(void **state)
{
    (void)state;
    int n = 0;
    for (double x = -30.0; x <= 30.0; x += 0.0625, ++n) {
        float xf = (float)x;
        assert_close(sdnn_mishf(xf), ref_mish(xf), 2e-6, "mish", x);
        assert_close(sdnn_swishf(xf), ref_swish(xf), 2e-6, "swish", x);
    }
    assert_int_equal(n, 961);
    /* Known points: mish(0) = swish(0) = 0, swish(x) -> x, mish(x) -> x. */
    assert_true(sdnn_mishf(0.0f) == 0.0f && sdnn_swishf(0.0f) == 0.0f);
    assert_close(sdnn_mishf(1.0f), 0.8650983882673103, 1e-6, "mish", 1.0);
    assert_close(sdnn_swishf(1.0f), 0.7310585786300049, 1e-6, "swish", 1.0);
    assert_true(sdnn_mishf(-100.0f) <= 0.0f && sdnn_mishf(-100.0f) > -1e-30f);
}

static void test_mish_swish_gradients(void **state)
{
    (void)state;
    for (double x = -25.0; x <= 25.0; x += 0.03125) {
        float xf = (float)x;
        assert_close(sdnn_mish_gradf(xf), central(ref_mish, xf), 1e-5, "mish'", x);
        assert_close(sdnn_swish_gradf(xf), central(ref_swish, xf), 1e-5, "swish'", x);
    }
    assert_close(sdnn_mish_gradf(0.0f), 0.6, 1e-6, "mish'", 0.0); /* tanh(ln 2) = 0.6 */
    assert_close(sdnn_swish_gradf(0.0f), 0.5, 1e-6, "swish'", 0.0);
}

/* ---- the checker ---------------------------------------------------------- */

#define NET "[net]\nbatch=2\nwidth=16\nheight=16\nchannels=3\n"              /* lines 1-5 */
#define CONV "[convolutional]\nfilters=8\nsize=3\npad=1\nactivation=leaky\n" /* +5 lines */

static void refused(const char *text, const char *const *want)
{
    sdnn_status st = sdnn_cfg_check_text("d.cfg", text);
    const char *msg = sdnn_last_error();
    if (st == SDNN_OK) fail_msg("accepted:\n%s", text);
    for (int i = 0; want[i]; ++i)
        if (!strstr(msg, want[i])) fail_msg("message lacks \"%s\": %s", want[i], msg);
}

static void test_activations(void **state)
{
    (void)state;
    refused(NET "[deconvolutional]\nfilters=8\nsize=3\nactivation=mish\n",
            (const char *const[]){"d.cfg:9:", "activation=mish", "[convolutional], [connected] "
                                  "and [shortcut] only", "leaky", NULL});
    refused(NET "[local]\nfilters=8\nsize=3\nactivation=swish\n",
            (const char *const[]){"d.cfg:9:", "[local]", "activation=swish", NULL});
    /* Built on these: accepted. */
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET CONV "[shortcut]\nfrom=-1\n"
                                         "activation=mish\n[convolutional]\nfilters=8\n"
                                         "size=3\nactivation=swish\n[connected]\noutput=4\n"
                                         "activation=mish\n"),
                     SDNN_OK);
    refused(NET "[convolutional]\nfilters=8\nsize=3\nactivation=gelu\n",
            (const char *const[]){"d.cfg:9:", "activation=gelu", "unknown activation",
                                  "relu instead", NULL});
    static const char *const ok[] = {"logistic", "loggy", "relu", "elu", "selu", "relie", "plse",
                                     "hardtan", "lhtan", "linear", "ramp", "leaky", "tanh",
                                     "stair", NULL};
    for (int i = 0; ok[i]; ++i) {
        char text[256];
        snprintf(text, sizeof text, NET "[convolutional]\nfilters=8\nsize=3\nactivation=%s\n",
                 ok[i]);
        if (sdnn_cfg_check_text("d.cfg", text) != SDNN_OK)
            fail_msg("activation=%s refused: %s", ok[i], sdnn_last_error());
    }
}

/* A head that libdarknet accepts: 3 masks x (4 + 1 + 4 classes) = 27. */
#define HEAD_CONV "[convolutional]\nfilters=27\nsize=1\nactivation=linear\n" /* +4 lines */
#define YOLO "[yolo]\nmask=0,1,2\nanchors=4,4,8,8,12,12\nclasses=4\nnum=3\n" /* +5 lines */

static void test_yolo_keys_refused(void **state)
{
    (void)state;
    /* The fork's keys not built here: refused by name; line 20 is the key. */
    static const char *const cases[][2] = {{"counters_per_class", "1,2"}, {"focal_loss", "1"},
                                           {"delta_normalizer", "2"},
                                           {"embedding_layer", "-2"}};
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; ++i) {
        char text[512], kv[64];
        snprintf(text, sizeof text, NET CONV HEAD_CONV YOLO "%s=%s\n", cases[i][0], cases[i][1]);
        snprintf(kv, sizeof kv, "%s=%s", cases[i][0], cases[i][1]);
        refused(text, (const char *const[]){"d.cfg:20:", "[yolo]", kv, "fork", NULL});
    }
    assert_int_equal(n, 4);
    /* Neutral values pass, and so does the plain head. */
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET CONV HEAD_CONV YOLO), SDNN_OK);
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET CONV HEAD_CONV YOLO
                                         "resize=1\nfocal_loss=0\ndelta_normalizer=1\n"),
                     SDNN_OK);
}

/* The fork's [yolo] keys built here: every value outside what is allowed
 * is named with file, line, key and the allowed values; line 20 is the key. */
static void test_yolo_key_values(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"scale_x_y", "0.5", "expected a number >= 1 and <= 4"},
        {"scale_x_y", "big", "expected a number >= 1 and <= 4"},
        {"iou_loss", "l1", "expected one of mse, iou, giou, diou, ciou"},
        {"iou_normalizer", "-1", "expected a number >= 0 and <= 100"},
        {"cls_normalizer", "abc", "expected a number >= 0 and <= 100"},
        {"obj_normalizer", "101", "expected a number >= 0 and <= 100"},
        {"max_delta", "0", "expected a number >= 1e-06"},
        {"iou_thresh", "1.5", "expected a number >= 0 and <= 1"},
        {"label_smooth_eps", "2", "expected a number >= 0 and <= 1"},
        {"beta_nms", "0", "expected a number >= 0.01 and <= 10"},
        {"new_coords", "2", "expected 0 or 1"},
        {"objectness_smooth", "0.5", "expected 0 or 1"},
        {"iou_thresh_kind", "mse", "expected one of iou, giou, diou, ciou"},
        {"nms_kind", "cornersnms", "expected one of default, greedynms, diounms"}};
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; ++i) {
        char text[512], kv[64];
        snprintf(text, sizeof text, NET CONV HEAD_CONV YOLO "%s=%s\n", cases[i][0], cases[i][1]);
        snprintf(kv, sizeof kv, "%s=%s", cases[i][0], cases[i][1]);
        refused(text, (const char *const[]){"d.cfg:20:", "[yolo]", kv, cases[i][2], NULL});
    }
    assert_int_equal(n, 14);
    /* The yolov7-tiny head's whole key set, and yolov4-tiny's, are
     * accepted. */
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET CONV HEAD_CONV YOLO
                                         "scale_x_y=2.0\nobjectness_smooth=1\niou_thresh=0.2\n"
                                         "iou_normalizer=0.05\ncls_normalizer=0.5\n"
                                         "obj_normalizer=1.0\niou_loss=ciou\nnms_kind=diounms\n"
                                         "beta_nms=0.6\nnew_coords=1\nmax_delta=2\n"
                                         "iou_thresh_kind=giou\nlabel_smooth_eps=0.1\n"),
                     SDNN_OK);
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET CONV HEAD_CONV YOLO
                                         "scale_x_y=1.05\niou_loss=giou\niou_normalizer=0.07\n"
                                         "nms_kind=greedynms\nbeta_nms=0.6\nresize=1.5\n"),
                     SDNN_OK);
}

static void test_net_keys(void **state)
{
    (void)state;
    /* mosaic, letter_box and flip=0 are built (plugin/data/batch.c; their
     * values are checked in test_batch). */
    static const char *const cases[][2] = {{"ema_alpha", "0.9998"}, {"cutmix", "1"},
                                           {"mixup", "1"}, {"blur", "1"}};
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; ++i) {
        char text[512], kv[64];
        snprintf(text, sizeof text, NET "%s=%s\n" CONV, cases[i][0], cases[i][1]);
        snprintf(kv, sizeof kv, "%s=%s", cases[i][0], cases[i][1]);
        refused(text, (const char *const[]){"d.cfg:6:", "[net]", kv, "fork", NULL});
    }
    /* The neutral values (what libdarknet does anyway) pass. */
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET "mosaic=0\nflip=1\n" CONV), SDNN_OK);
    /* Display only: accepted (with a note on stderr). */
    assert_int_equal(sdnn_cfg_check_text("d.cfg", NET "max_chart_loss=20\n" CONV), SDNN_OK);
}

/* ---- the layers ----------------------------------------------------------- */

static network *parse_text(const char *text, int dialect)
{
    char path[] = "/tmp/sdnn-dialect-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    srand(7); /* the same initial weights for both parses */
    network *net = dialect ? sdnn_parse_network(path) : parse_network_cfg(path);
    unlink(path);
    assert_non_null(net);
    return net;
}

#define DNET "[net]\nbatch=1\nwidth=6\nheight=6\nchannels=3\n"

/* conv(mish) -> connected(swish) against the same layers parsed as linear
 * by libdarknet, with the activations and the connected product computed
 * here in double. */
static void test_forward_against_reference(void **state)
{
    (void)state;
    network *d = parse_text(DNET "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation = mish\n"
                                 "[connected]\noutput=5\nactivation=swish\n", 1);
    network *l = parse_text(DNET "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=linear\n"
                                 "[connected]\noutput=5\nactivation=linear\n", 0);
    assert_int_equal(sdnn_dialect_layers(d), 2);
    assert_int_equal(sdnn_dialect_layers(l), 0);
    assert_int_equal(d->layers[0].outputs, 144);
    float in[108];
    uint64_t seed = 3;
    for (int i = 0; i < 108; ++i) in[i] = tu_uniform(&seed, -2.0f, 2.0f);
    network_predict(d, in);
    network_predict(l, in);
    const layer *c = &d->layers[1];
    for (int i = 0; i < 144; ++i)
        assert_close(d->layers[0].output[i], ref_mish(l->layers[0].output[i]), 1e-5, "conv mish",
                     i);
    for (int o = 0; o < 5; ++o) {
        double y = c->biases[o];
        for (int i = 0; i < 144; ++i)
            y += (double)c->weights[o * 144 + i] * ref_mish(l->layers[0].output[i]);
        assert_close(c->output[o], ref_swish(y), 1e-4, "connected swish", o);
    }
    sdnn_network_free(d);
    sdnn_network_free(l);
}

/* A cfg in Debian's dialect is parsed exactly as libdarknet parses it. */
static void test_plain_cfg_untouched(void **state)
{
    (void)state;
    const char *text = DNET "[convolutional]\nfilters=4\nsize=3\nactivation=leaky\n";
    network *d = parse_text(text, 1), *l = parse_text(text, 0);
    assert_int_equal(sdnn_dialect_layers(d), 0);
    assert_true(d->layers[0].forward == l->layers[0].forward);
    assert_true(d->layers[0].backward == l->layers[0].backward);
    assert_int_equal(d->layers[0].activation, LEAKY);
    sdnn_network_free(d);
    sdnn_network_free(l);
}

#define GNET(b, hw)                                                                  \
    "[net]\nbatch=" #b "\nsubdivisions=1\nwidth=" #hw "\nheight=" #hw "\nchannels=3\n" \
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.01\n"

/* scalednn gradcheck of `text` (12 samples a layer): nlayers checked, each
 * with at least 4 samples and its median below its threshold. */
static void gradcheck_passes(const char *name, const char *text, int nlayers)
{
    sdnn_gradcheck_opts o = SDNN_GRADCHECK_OPTS_INIT;
    o.samples = 12;
    sdnn_gradcheck_report r;
    sdnn_status st = sdnn_gradcheck_text(name, text, &o, &r);
    if (st != SDNN_OK) fail_msg("gradcheck: %s", sdnn_last_error());
    sdnn_gradcheck_print(&r, stdout);
    char mname[160];
    snprintf(mname, sizeof mname, "test_dialect:%s", name);
    tm_margin_gradcheck(mname, &r);
    assert_int_equal(r.nlayers, nlayers);
    for (int k = 0; k < r.nlayers; ++k) {
        assert_true(r.layer[k].samples >= 4);
        assert_true(r.layer[k].median_rel <= r.layer[k].threshold);
    }
    assert_int_equal(r.failed, 0);
    sdnn_gradcheck_report_free(&r);
}

/* scalednn gradcheck through the trainer on every layer the dialect
 * activations are built on. */
static void test_gradcheck_dialect_layers(void **state)
{
    (void)state;
    const char *text = GNET(2, 8)
        "[convolutional]\nfilters=6\nsize=3\npad=1\nactivation=mish\n"
        "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\npad=1\nactivation=swish\n"
        "[shortcut]\nfrom=-2\nactivation=mish\n"
        "[connected]\noutput=4\nactivation=swish\n"
        "[cost]\ntype=sse\n";
    gradcheck_passes("dialect.cfg", text, 3);
}

/* A grouped route is slice group_id of the routed layer's channels, has no
 * parameters, and leaves no trace in the weights file. */
static void test_grouped_route_forward(void **state)
{
    (void)state;
    const char *text = DNET "[convolutional]\nfilters=8\nsize=3\npad=1\nactivation=leaky\n"
                            "[route]\nlayers = -1\ngroups=2\ngroup_id=1\n"
                            "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n";
    network *d = parse_text(text, 1);
    assert_int_equal(d->n, 3);
    const layer *r = &d->layers[1];
    assert_int_equal(r->type, ROUTE);
    assert_int_equal(r->out_c, 4);
    assert_int_equal(r->out_w, 6);
    assert_int_equal(r->outputs, 144);
    assert_int_equal(r->nweights, 0);
    assert_int_equal(d->layers[2].c, 4);
    assert_int_equal(sdnn_dialect_layers(d), 1);
    float in[108];
    uint64_t seed = 5;
    for (int i = 0; i < 108; ++i) in[i] = tu_uniform(&seed, -1.0f, 1.0f);
    network_predict(d, in);
    /* Channels 4..7 of layer 0, 36 values each. */
    for (int i = 0; i < 144; ++i) assert_true(r->output[i] == d->layers[0].output[144 + i]);
    /* Weights: Darknet's header (3 ints and a size_t) and the two
     * convolutions (biases then weights, no batch norm). */
    char path[] = "/tmp/sdnn-dialect-w-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    save_weights(d, path);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    unlink(path);
    assert_int_equal(size, 3 * 4 + 8 + 4 * (8 + 8 * 3 * 9) + 4 * (4 + 4 * 4 * 9));
    sdnn_network_free(d);
    /* group_id=0 takes the first half. */
    network *e = parse_text(DNET "[convolutional]\nfilters=8\nsize=3\npad=1\nactivation=leaky\n"
                                 "[route]\nlayers=0\ngroups=4\ngroup_id=0\n", 1);
    assert_int_equal(e->layers[1].out_c, 2);
    network_predict(e, in);
    for (int i = 0; i < 72; ++i) assert_true(e->layers[1].output[i] == e->layers[0].output[i]);
    sdnn_network_free(e);
}

static void test_gradcheck_grouped_route(void **state)
{
    (void)state;
    const char *text = GNET(2, 8)
        "[convolutional]\nfilters=8\nsize=3\npad=1\nactivation=mish\n"
        "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n"
        "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
        "[route]\nlayers=-1,-3\n"
        "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n"
        "[cost]\ntype=sse\n";
    gradcheck_passes("grouped.cfg", text, 3);
}

static void test_grouped_route_refusals(void **state)
{
    (void)state;
    refused(NET CONV "[route]\nlayers=-1\ngroups=3\ngroup_id=1\n",
            (const char *const[]){"d.cfg:13:", "groups=3", "divide the routed channels (8)",
                                  NULL});
    refused(NET CONV "[route]\nlayers=-1\ngroups=2\ngroup_id=2\n",
            (const char *const[]){"d.cfg:14:", "group_id=2", "<= 1", NULL});
    refused(NET CONV CONV "[route]\nlayers=-1,-2\ngroups=2\n",
            (const char *const[]){"d.cfg:18:", "groups=2", "one routed layer", NULL});
    refused(NET CONV "[route]\nlayers=-1\ngroups=2\n" HEAD_CONV YOLO "random=1\n",
            (const char *const[]){"d.cfg:23:", "[yolo]", "random=1", "grouped route", NULL});
}

/* The project's yolov4-tiny-style cfg: checked, built with its grouped
 * routes, and its weights saved and loaded back give the same outputs. */
static void test_v4tiny_cfg(void **state)
{
    (void)state;
    assert_int_equal(sdnn_cfg_check_file("cfg/shapes-v4tiny.cfg"), SDNN_OK);
    srand(11);
    network *a = sdnn_parse_network("cfg/shapes-v4tiny.cfg");
    assert_non_null(a);
    assert_int_equal(a->n, 30);
    assert_int_equal(sdnn_dialect_layers(a), 4); /* 2 grouped routes, 2 fork [yolo] heads */
    assert_non_null(sdnn_dialect_yolo(a, 22));
    assert_non_null(sdnn_dialect_yolo(a, 29));
    assert_null(sdnn_dialect_yolo(a, 21));
    assert_true(sdnn_dialect_yolo(a, 29)->iou_loss == SDNN_CIOU);
    assert_true(sdnn_dialect_yolo(a, 29)->nms_kind == SDNN_NMS_GREEDY);
    assert_true(sdnn_dialect_yolo(a, 22)->scale_x_y == 1.05f);
    assert_int_equal(a->layers[3].type, ROUTE);
    assert_int_equal(a->layers[3].out_c, 16);
    assert_int_equal(a->layers[11].out_c, 32);
    assert_int_equal(a->layers[22].type, a->layers[29].type); /* both [yolo] */
    assert_int_equal(a->layers[22].out_c, 27);
    assert_int_equal(a->layers[22].out_w, 4);
    assert_int_equal(a->layers[29].out_w, 8);
    assert_int_equal(a->layers[26].out_c, 96);
    set_batch_network(a, 1);
    /* Untrained, the rolling variances are 0 and predict overflows: give
     * them 1 (they are saved, so the reload must bring them back). */
    for (int L = 0; L < a->n; ++L)
        if (a->layers[L].batch_normalize)
            for (int c = 0; c < a->layers[L].n; ++c) a->layers[L].rolling_variance[c] = 1.0f;
    char path[] = "/tmp/sdnn-v4tiny-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    save_weights(a, path);
    srand(12); /* other initial weights */
    network *b = sdnn_parse_network("cfg/shapes-v4tiny.cfg");
    assert_non_null(b);
    load_weights(b, path);
    unlink(path);
    set_batch_network(b, 1);
    static float in[64 * 64 * 3];
    uint64_t seed = 9;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) in[i] = tu_uniform(&seed, 0.0f, 1.0f);
    network_predict(a, in);
    network_predict(b, in);
    for (int L = 0; L < a->n; ++L)
        for (int i = 0; i < a->layers[L].outputs; ++i)
            if (a->layers[L].output[i] != b->layers[L].output[i])
                fail_msg("layer %d value %d: %g != %g", L, i, a->layers[L].output[i],
                         b->layers[L].output[i]);
    sdnn_network_free(a);
    sdnn_network_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mish_swish_values),
        cmocka_unit_test(test_mish_swish_gradients),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_yolo_keys_refused),
        cmocka_unit_test(test_yolo_key_values),
        cmocka_unit_test(test_net_keys),
        cmocka_unit_test(test_forward_against_reference),
        cmocka_unit_test(test_plain_cfg_untouched),
        cmocka_unit_test(test_gradcheck_dialect_layers),
        cmocka_unit_test(test_grouped_route_forward),
        cmocka_unit_test(test_gradcheck_grouped_route),
        cmocka_unit_test(test_grouped_route_refusals),
        cmocka_unit_test(test_v4tiny_cfg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
