/*
 * Strided and padded 1x1 convolutions (conv1x1.h): libdarknet skips im2col
 * for size=1 and computes on the unstrided input.  The network
 * sdnn_parse_network makes runs conv1x1.h's functions; each is held here to
 * a direct loop in double on random values: stride 2 and 3, odd sizes,
 * padding, groups, with and without batch norm, followed by another layer.
 *
 * Error model (Higham, Accuracy and Stability, thm 3.1): a float dot
 * product of K terms, in any summation order (blocked BLAS included), is
 * within gamma_K = K u / (1 - K u) of the exact sum times sum |terms|,
 * u = 2^-24; each further float operation (the bias, the activation's
 * slope, an add into a prefilled delta) adds u times the magnitude.  The
 * bound used is (K + 3) u (sum |terms| + |added|) per element, 1.01 for
 * the 1/(1 - K u): an a-priori bound, not a number fitted to a machine.
 * The reverted path (libdarknet's functions, fix_1x1_stride=0) misses it
 * by orders of magnitude, so the checks can fail.  The key (its default,
 * values and messages), the cpu engine's pointers for it, and that such a
 * layer needs no 1x1 delta fix are checked too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"
#include "conv1x1.h"
#include "dialect.h"
#include "engine.h"
#include "hooks.h"
#include "testutil.h"

#include <float.h>

void forward_convolutional_layer(layer l, network net);

#define U 0x1p-24

/* The cfg through sdnn_parse_network (the path every command takes). */
static network *parse(const char *text)
{
    char path[] = "/tmp/sdnn-s1x1-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    srand(3);
    network *net = sdnn_parse_network(path);
    unlink(path);
    assert_non_null(net);
    return net;
}

typedef struct shape {
    int w, h, c, filters, stride, padding, groups, bn;
} shape;

static char *cfg_of(const shape *s)
{
    char *t = malloc(1024);
    assert_non_null(t);
    snprintf(t, 1024,
             "[net]\nbatch=2\nsubdivisions=1\nwidth=%d\nheight=%d\nchannels=%d\n"
             "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
             "[convolutional]\nbatch_normalize=%d\nfilters=%d\nsize=1\nstride=%d\npadding=%d\n"
             "groups=%d\nactivation=leaky\n"
             "[convolutional]\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=linear\n"
             "[cost]\ntype=sse\n",
             s->w, s->h, s->c, s->bn, s->filters, s->stride, s->padding, s->groups);
    return t;
}

static void fill(float *x, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; ++i) x[i] = tu_uniform(seed, -1.f, 1.f);
}

/* The input pixel output (oy, ox) reads, or -1 on padding. */
static long src_pixel(const layer *l, int oy, int ox)
{
    int iy = oy * l->stride - l->pad, ix = ox * l->stride - l->pad;
    if (iy < 0 || iy >= l->h || ix < 0 || ix >= l->w) return -1;
    return (long)iy * l->w + ix;
}

/* Worst element of |got - want| / bound over n values, bound > 0. */
static double worst(const float *got, const double *want, const double *bound, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; ++i) {
        double r = fabs((double)got[i] - want[i]) / bound[i];
        if (!(r <= w)) w = r;   /* NaN counts as worst */
    }
    return w;
}

/* Layer 0's pre-activation (before bias and batch norm) against the direct
 * loop; returns the worst ratio to the bound.  pre: the float values to
 * judge (l->x with batch norm, else the output with bias and activation
 * undone by the reference). */
static double forward_ratio(network *net)
{
    layer *l = &net->layers[0];
    int k = l->c / l->groups, m = l->n / l->groups, N = l->out_h * l->out_w;
    size_t n = (size_t)l->outputs * l->batch;
    double *want = calloc(n, sizeof *want), *bound = calloc(n, sizeof *bound);
    assert_non_null(want);
    assert_non_null(bound);
    for (int b = 0; b < l->batch; ++b)
        for (int f = 0; f < l->n; ++f) {
            int g = f / m;
            for (int o = 0; o < N; ++o) {
                long p = src_pixel(l, o / l->out_w, o % l->out_w);
                double s = 0, a = 0;
                for (int ch = 0; ch < k && p >= 0; ++ch) {
                    double t = (double)l->weights[(size_t)f * k + ch] *
                               net->input[((size_t)b * l->c + (size_t)g * k + ch) * l->h * l->w + p];
                    s += t;
                    a += fabs(t);
                }
                size_t at = ((size_t)b * l->n + f) * N + o;
                if (!l->batch_normalize) {
                    double bias = l->biases[f];
                    a += fabs(bias);
                    s += bias;
                    s = s > 0 ? s : 0.1 * s;   /* leaky */
                }
                want[at] = s;
                bound[at] = 1.01 * (k + 3) * U * a + DBL_MIN;
            }
        }
    double r = worst(l->batch_normalize ? l->x : l->output, want, bound, n);
    free(want);
    free(bound);
    return r;
}

/* Layer 0's backward with dL/dy random and the input delta prefilled:
 * weight and bias gradients and the input delta (prefill + the strided
 * scatter, every other pixel left exactly) against the direct loops, from
 * the delta the layer's gemms used (after batch norm's backward, which is
 * libdarknet's).  Returns the worst ratio. */
static double backward_ratio(network *net, uint64_t *seed)
{
    layer *l = &net->layers[0];
    int k = l->c / l->groups, m = l->n / l->groups, N = l->out_h * l->out_w;
    size_t nout = (size_t)l->outputs * l->batch, nin = (size_t)l->inputs * l->batch;
    fill(l->delta, nout, seed);
    memset(l->weight_updates, 0, (size_t)l->nweights * sizeof(float));
    memset(l->bias_updates, 0, (size_t)l->n * sizeof(float));
    float *dx = malloc(nin * sizeof *dx), *pre = malloc(nin * sizeof *pre);
    assert_non_null(dx);
    assert_non_null(pre);
    fill(pre, nin, seed);
    memcpy(dx, pre, nin * sizeof *dx);
    network nc = *net;
    nc.index = 0;
    nc.delta = dx;
    layer lc = *l;
    lc.backward(lc, nc);
    const float *g = l->delta;   /* the delta the gemms used */
    double r = 0;
    size_t nw = (size_t)l->nweights;
    double *ww = calloc(nw, sizeof *ww), *wb = calloc(nw, sizeof *wb);
    double *xw = calloc(nin, sizeof *xw), *xb = calloc(nin, sizeof *xb);
    assert_non_null(ww);
    assert_non_null(wb);
    assert_non_null(xw);
    assert_non_null(xb);
    for (size_t i = 0; i < nin; ++i) {
        xw[i] = pre[i];
        xb[i] = fabs(pre[i]);
    }
    for (int b = 0; b < l->batch; ++b)
        for (int f = 0; f < l->n; ++f) {
            int gr = f / m;
            for (int o = 0; o < N; ++o) {
                long p = src_pixel(l, o / l->out_w, o % l->out_w);
                if (p < 0) continue;
                double d = g[((size_t)b * l->n + f) * N + o];
                for (int ch = 0; ch < k; ++ch) {
                    size_t xi = ((size_t)b * l->c + (size_t)gr * k + ch) * l->h * l->w + (size_t)p;
                    size_t wi = (size_t)f * k + ch;
                    double t = d * net->input[xi];
                    ww[wi] += t;
                    wb[wi] += fabs(t);
                    double u = d * l->weights[wi];
                    xw[xi] += u;
                    xb[xi] += fabs(u);
                }
            }
        }
    double terms_w = (double)l->batch * N + 3, terms_x = (double)m + 3;
    for (size_t i = 0; i < nw; ++i) wb[i] = 1.01 * terms_w * U * wb[i] + DBL_MIN;
    for (size_t i = 0; i < nin; ++i) xb[i] = 1.01 * terms_x * U * xb[i] + DBL_MIN;
    double rw = worst(l->weight_updates, ww, wb, nw), rx = worst(dx, xw, xb, nin);
    r = rw > rx ? rw : rx;
    if (!l->batch_normalize) {
        /* The bias gradient: the sum of that delta. */
        double *bw = calloc((size_t)l->n, sizeof *bw), *bb = calloc((size_t)l->n, sizeof *bb);
        assert_non_null(bw);
        assert_non_null(bb);
        for (int b = 0; b < l->batch; ++b)
            for (int f = 0; f < l->n; ++f)
                for (int o = 0; o < N; ++o) {
                    double d = g[((size_t)b * l->n + f) * N + o];
                    bw[f] += d;
                    bb[f] += fabs(d);
                }
        for (int f = 0; f < l->n; ++f) bb[f] = 1.01 * terms_w * U * bb[f] + DBL_MIN;
        double rb = worst(l->bias_updates, bw, bb, (size_t)l->n);
        if (rb > r) r = rb;
        free(bw);
        free(bb);
    }
    free(ww);
    free(wb);
    free(xw);
    free(xb);
    free(dx);
    free(pre);
    return r;
}

static const shape SHAPES[] = {
    {8, 8, 3, 4, 2, 0, 1, 0},   /* stride 2 */
    {7, 9, 5, 3, 2, 0, 1, 0},   /* odd sizes */
    {9, 7, 4, 6, 3, 0, 1, 0},   /* stride 3 */
    {7, 7, 3, 4, 2, 1, 1, 0},   /* stride 2, padding 1 */
    {5, 5, 2, 3, 1, 1, 1, 0},   /* stride 1, padding 1: the output is larger */
    {8, 6, 4, 6, 2, 0, 2, 0},   /* two groups */
    {8, 8, 3, 4, 2, 0, 1, 1},   /* batch norm */
    {9, 7, 4, 5, 3, 1, 1, 1},   /* batch norm, stride 3, padding */
};

/* A training forward then layer 0's backward, against the loops. */
static void check_shape(const shape *s, double *fr, double *br)
{
    char *text = cfg_of(s);
    network *net = parse(text);
    free(text);
    layer *l = &net->layers[0];
    assert_int_equal(l->out_w, (s->w + 2 * s->padding - 1) / s->stride + 1);
    uint64_t seed = 17 + (uint64_t)s->w * 31 + (uint64_t)s->stride;
    fill(net->input, (size_t)net->inputs * net->batch, &seed);
    net->train = 1;
    forward_network(net);
    *fr = forward_ratio(net);
    *br = backward_ratio(net, &seed);
    /* The layer after it saw that output: its own forward is finite. */
    for (size_t i = 0; i < (size_t)net->layers[1].outputs * net->batch; ++i)
        assert_true(isfinite(net->layers[1].output[i]));
    sdnn_network_free(net);
}

static void test_parse_attaches(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; ++i) {
        char *text = cfg_of(&SHAPES[i]);
        network *net = parse(text);
        free(text);
        assert_true(sdnn_conv1x1_strided(&net->layers[0]));
        assert_true(sdnn_conv1x1_attached(&net->layers[0]));
        assert_false(sdnn_conv1x1_strided(&net->layers[1]));   /* 3x3: im2col */
        assert_int_equal(sdnn_conv1x1_count(net), 1);
        sdnn_network_free(net);
    }
}

static void test_against_direct_loops(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; ++i) {
        double fr, br;
        check_shape(&SHAPES[i], &fr, &br);
        printf("shape %zu: %dx%dx%d filters %d stride %d padding %d groups %d bn %d: "
               "forward %.3g, backward %.3g of the bound\n",
               i, SHAPES[i].w, SHAPES[i].h, SHAPES[i].c, SHAPES[i].filters, SHAPES[i].stride,
               SHAPES[i].padding, SHAPES[i].groups, SHAPES[i].bn, fr, br);
        assert_true(fr <= 1.0);
        assert_true(br <= 1.0);
    }
}

/* libdarknet's functions back on the layer (fix_1x1_stride=0): the same
 * checks fail by far (stride 2 and 3 without padding only: with padding
 * libdarknet's gemm reads past the input). */
static void test_reverted_fails(void **state)
{
    (void)state;
    const shape *cases[] = {&SHAPES[0], &SHAPES[2], &SHAPES[6]};
    for (size_t i = 0; i < 3; ++i) {
        char *text = cfg_of(cases[i]);
        network *net = parse(text);
        free(text);
        assert_int_equal(sdnn_conv1x1_detach(net), 1);
        assert_true(net->layers[0].forward == forward_convolutional_layer);
        uint64_t seed = 5;
        fill(net->input, (size_t)net->inputs * net->batch, &seed);
        net->train = 1;
        forward_network(net);
        double fr = forward_ratio(net), br = backward_ratio(net, &seed);
        printf("reverted case %zu: forward %.3g, backward %.3g of the bound\n", i, fr, br);
        assert_true(fr > 1e3);
        assert_true(br > 1e3);
        sdnn_network_free(net);
    }
}

/* The cpu engine: fix_1x1_stride=0 puts libdarknet's functions on its
 * replicas for its life (with and without hooks); 1, the default, keeps
 * conv1x1.h's, run through the hooks' wrappers when they are installed. */
static void test_engine_key(void **state)
{
    (void)state;
    char *text = cfg_of(&SHAPES[0]);
    for (int hooks = 0; hooks < 2; ++hooks)
        for (int key = 0; key < 2; ++key) {
            network *net = parse(text);
            net->learning_rate = 0;   /* the weights stay those the forward used */
            network *nets[1] = {net};
            sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
            assert_int_equal(o.fix_1x1_stride, 1);
            o.fix_1x1_stride = key;
            o.hooks = hooks;
            sdnn_engine *e = NULL;
            assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, &o, &e), SDNN_OK);
            assert_int_equal(sdnn_hooks_installed(net), hooks);
            if (!key) assert_true(net->layers[0].forward == forward_convolutional_layer);
            else if (!hooks) assert_true(sdnn_conv1x1_attached(&net->layers[0]));
            uint64_t seed = 21;
            data d = tu_batch(&seed, net->batch, net->inputs, net->truths);
            float loss = 0;
            assert_int_equal(e->ops->train(e, 0, d, &loss), SDNN_OK);
            assert_true(isfinite(loss));
            free_data(d);
            /* The training forward of the layer was the strided one
             * exactly when the key is 1. */
            double fr = forward_ratio(net);
            if (key) assert_true(fr <= 1.0);
            else assert_true(fr > 1e3);
            sdnn_engine_destroy(e);
            assert_true(sdnn_conv1x1_attached(&net->layers[0]));   /* given back */
            sdnn_network_free(net);
        }
    free(text);
}

/* A strided 1x1 layer whose input delta a later [route] also writes: with
 * conv1x1.h's functions (which add) it needs no 1x1 delta fix; with
 * libdarknet's (beta-0 gemm) it does. */
static void test_no_delta_fix_needed(void **state)
{
    (void)state;
    network *net = parse("[net]\nbatch=2\nwidth=8\nheight=8\nchannels=3\n"
                         "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
                         "[convolutional]\nfilters=2\nsize=1\nstride=2\nactivation=leaky\n"
                         "[route]\nlayers=-2\n"
                         "[convolutional]\nfilters=2\nsize=1\nstride=1\nactivation=linear\n"
                         "[cost]\ntype=sse\n");
    assert_false(sdnn_fix_1x1_needed(net, 1));
    assert_int_equal(sdnn_hooks_install(net, 0, SDNN_FIX_1X1), SDNN_OK);
    assert_false(sdnn_fix_1x1_needed(net, 1));
    sdnn_hooks_uninstall(net);
    assert_true(sdnn_conv1x1_attached(&net->layers[1]));
    sdnn_conv1x1_detach(net);
    assert_true(sdnn_fix_1x1_needed(net, 1));
    sdnn_network_free(net);
}

/* The key: 1 by default (with or without a section, in either mode), 0
 * taken, anything else refused naming the line and what is allowed. */
static void test_key(void **state)
{
    (void)state;
    static const struct {
        const char *section;
        int want;
    } ok[] = {{"", 1}, {"[scalednn]\n", 1}, {"[scalednn]\nmode=stock\n", 1},
              {"[scalednn]\nfix_1x1_stride=0\n", 0}, {"[scalednn]\nmode=stock\nfix_1x1_stride=0\n", 0},
              {"[scalednn]\nfix_1x1_stride = 1\n", 1}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; ++i) {
        char text[256];
        snprintf(text, sizeof text, "[net]\nbatch=1\n[softmax]\n%s", ok[i].section);
        sdnn_config cfg;
        char *stripped = NULL;
        assert_int_equal(sdnn_config_parse_text("k.cfg", text, &cfg, &stripped), SDNN_OK);
        assert_int_equal(cfg.fix_1x1_stride, ok[i].want);
        free(stripped);
    }
    static const char *const bad[] = {"fix_1x1_stride=2", "fix_1x1_stride=yes",
                                      "fix_1x1_stride=01", "fix_1x1_stride="};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        char text[256];
        snprintf(text, sizeof text, "[net]\nbatch=1\n[softmax]\n[scalednn]\n%s\n", bad[i]);
        sdnn_config cfg;
        char *stripped = NULL;
        sdnn_clear_error();
        assert_int_equal(sdnn_config_parse_text("k.cfg", text, &cfg, &stripped), SDNN_ERR_INVALID);
        free(stripped);
        const char *msg = sdnn_last_error();
        assert_non_null(strstr(msg, "k.cfg:5:"));
        assert_non_null(strstr(msg, "fix_1x1_stride"));
        assert_non_null(strstr(msg, "0 or 1") ? msg : strstr(msg, "(strided, the default)"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_attaches),
        cmocka_unit_test(test_against_direct_loops),
        cmocka_unit_test(test_reverted_fails),
        cmocka_unit_test(test_engine_key),
        cmocka_unit_test(test_no_delta_fix_needed),
        cmocka_unit_test(test_key),
    };
    /* SDNN_TEST_FILTER=PATTERN runs the matching tests alone (cmocka's filter). */
    const char *filter = getenv("SDNN_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
