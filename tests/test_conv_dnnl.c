/*
 * cpu_conv=onednn (conv_dnnl.h): the oneDNN convolution against
 * libdarknet's own forward_convolutional_layer/backward_convolutional_layer
 * and against a double-precision reference written here, per layer: 1x1,
 * 3x3, stride 2 and 3, groups, with and without padding, non-square
 * inputs; forward (+ bias), backward-data, backward-weights (+ bias); the
 * accumulate semantics (the gradients are added into l.weight_updates and
 * net.delta); a resize; the double-precision gradient check with
 * cpu_conv=onednn.  Skipped, with a message, in a build without oneDNN.
 *
 * Error model: every output is a sum of k products (forward: k = C/groups x
 * size x size; backward-data: k <= n/groups x size x size; backward-weights:
 * k = batch x out_h x out_w) that Darknet (im2col + gemm) and oneDNN add in
 * different orders.  Each float sum is within gamma_k S of the exact one,
 * S = sum |products| (deterministic worst case gamma_k ~ k u, u = 2^-24);
 * with the random signs of the data here the rounding errors add as a
 * random walk, ~ sqrt(k) u S (Higham, Accuracy and Stability, 2.8).  The
 * bound per output is sqrt(k) x FLT_EPSILON x S (2 sqrt(k) u S) against the
 * double reference, for each path, and twice that between the two paths;
 * a bias or an earlier value the result is added to contributes one more
 * rounding, FLT_EPSILON x |result|.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "conv_dnnl.h"
#include "dialect.h"
#include "gradcheck.h"
#include "replicas.h"
#include "trainer.h"
#include "testutil.h"

void forward_convolutional_layer(layer l, network net);
void backward_convolutional_layer(layer l, network net);

typedef struct geom {
    int batch, c, h, w, n, size, stride, pad, groups;
} geom;

static network *make_net(const geom *g)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nwidth=%d\nheight=%d\nchannels=%d\n\n"
             "[convolutional]\nfilters=%d\nsize=%d\nstride=%d\npadding=%d\ngroups=%d\n"
             "activation=linear\n",
             g->batch, g->w, g->h, g->c, g->n, g->size, g->stride, g->pad, g->groups);
    network *net = tu_parse(text);
    assert_non_null(net);
    return net;
}

static void fill(float *x, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; ++i) x[i] = tu_uniform(s, -1.0f, 1.0f);
}

/* The input element of output (b, o, oh, ow) at (ci, kh, kw) of its group,
 * or -1 in the padding. */
static long in_index(const layer *l, int b, int o, int oh, int ow, int ci, int kh, int kw)
{
    int cg = l->c / l->groups, ng = l->n / l->groups;
    int y = oh * l->stride + kh - l->pad, x = ow * l->stride + kw - l->pad;
    if (y < 0 || y >= l->h || x < 0 || x >= l->w) return -1;
    int c = (o / ng) * cg + ci;
    return (((long)b * l->c + c) * l->h + y) * l->w + x;
}

/* Double references: forward with bias (out, S per output), the weight
 * gradient (dw, S), the input gradient (dx, S). */
static void reference(const layer *l, const float *x, const float *delta, double *out,
                      double *so, double *dw, double *sw, double *dx, double *sx)
{
    int cg = l->c / l->groups, K = l->size;
    size_t nin = (size_t)l->batch * l->inputs;
    memset(dw, 0, (size_t)l->nweights * sizeof *dw);
    memset(sw, 0, (size_t)l->nweights * sizeof *sw);
    memset(dx, 0, nin * sizeof *dx);
    memset(sx, 0, nin * sizeof *sx);
    for (int b = 0; b < l->batch; ++b)
        for (int o = 0; o < l->n; ++o)
            for (int oh = 0; oh < l->out_h; ++oh)
                for (int ow = 0; ow < l->out_w; ++ow) {
                    size_t oi = (((size_t)b * l->n + o) * l->out_h + oh) * l->out_w + ow;
                    double acc = 0, s = 0;
                    for (int ci = 0; ci < cg; ++ci)
                        for (int kh = 0; kh < K; ++kh)
                            for (int kw = 0; kw < K; ++kw) {
                                long ii = in_index(l, b, o, oh, ow, ci, kh, kw);
                                if (ii < 0) continue;
                                size_t wi = (((size_t)o * cg + ci) * K + kh) * K + kw;
                                double wv = l->weights[wi];
                                acc += wv * x[ii];
                                s += fabs(wv * x[ii]);
                                dw[wi] += (double)delta[oi] * x[ii];
                                sw[wi] += fabs((double)delta[oi] * x[ii]);
                                dx[ii] += wv * delta[oi];
                                sx[ii] += fabs(wv * delta[oi]);
                            }
                    out[oi] = acc + l->biases[o];
                    so[oi] = s;
                }
}

/* Worst |got - want| / bound over n values; bound = sqrt(k) eps S + eps |want|
 * + tiny (FLT_MIN: an exact zero sum). */
static double worst(const float *got, const double *want, const double *S, const float *base,
                    size_t n, double k, double factor)
{
    double r = 0;
    for (size_t i = 0; i < n; ++i) {
        double w = want[i] + (base ? base[i] : 0.0);
        double bound = factor * (sqrt(k) * FLT_EPSILON * S[i] + FLT_EPSILON * fabs(w)) + FLT_MIN;
        double e = fabs((double)got[i] - w) / bound;
        if (e > r) r = e;
    }
    return r;
}

static void skip_without_dnnl(void)
{
    if (!sdnn_conv_dnnl_built()) {
        print_message("this build has no oneDNN (libdnnl-dev): skipped\n");
        skip();
    }
}

/* One geometry: both paths on the same weights, input and output delta,
 * each against the reference, and against each other. */
static void check_geom(const geom *g)
{
    network *a = make_net(g), *d = make_net(g);
    layer *la = &a->layers[0], *ld = &d->layers[0];
    assert_true(sdnn_conv_dnnl_eligible(d, 0));
    uint64_t seed = 0x1234u + (uint64_t)g->size * 77u + (uint64_t)g->groups * 13u +
                    (uint64_t)g->stride;
    fill(la->weights, (size_t)la->nweights, &seed);
    fill(la->biases, (size_t)la->n, &seed);
    memcpy(ld->weights, la->weights, (size_t)la->nweights * sizeof(float));
    memcpy(ld->biases, la->biases, (size_t)la->n * sizeof(float));
    int count = 0;
    assert_int_equal(sdnn_conv_dnnl_attach(d, &count), SDNN_OK);
    assert_int_equal(count, 1);
    assert_true(sdnn_conv_dnnl_owns(ld));
    assert_int_equal(sdnn_conv_dnnl_ready(ld), SDNN_OK);

    size_t nin = (size_t)g->batch * la->inputs, nout = (size_t)g->batch * la->outputs;
    size_t nw = (size_t)la->nweights;
    float *x = malloc(nin * sizeof *x), *delta = malloc(nout * sizeof *delta);
    float *pd_a = malloc(nin * sizeof(float)), *pd_d = malloc(nin * sizeof(float));
    float *u0 = malloc(nw * sizeof(float)), *b0 = malloc((size_t)g->n * sizeof(float));
    double *out = malloc(nout * sizeof *out), *so = malloc(nout * sizeof *so);
    double *dw = malloc(nw * sizeof *dw), *sw = malloc(nw * sizeof *sw);
    double *dx = malloc(nin * sizeof *dx), *sx = malloc(nin * sizeof *sx);
    assert_true(x && delta && pd_a && pd_d && u0 && b0 && out && so && dw && sw && dx && sx);
    fill(x, nin, &seed);
    fill(delta, nout, &seed);
    fill(u0, nw, &seed);
    fill(b0, (size_t)g->n, &seed);

    /* forward (Darknet's network struct as forward_network hands it over;
     * the network's own input buffer is put back before it is freed) */
    float *in_a = a->input, *in_d = d->input;
    a->input = x;
    d->input = x;
    forward_convolutional_layer(*la, *a);
    assert_int_equal(sdnn_conv_dnnl_forward(*ld, *d), SDNN_OK);
    reference(la, x, delta, out, so, dw, sw, dx, sx);
    double kf = (double)(g->c / g->groups) * g->size * g->size;
    double ef_d = worst(ld->output, out, so, NULL, nout, kf, 1.0);
    double ef_a = worst(la->output, out, so, NULL, nout, kf, 1.0);
    double *outa = malloc(nout * sizeof *outa);
    for (size_t i = 0; i < nout; ++i) outa[i] = la->output[i];
    double ef_x = worst(ld->output, outa, so, NULL, nout, kf, 2.0);

    /* backward: the updates and the input delta hold earlier values, which
     * both must keep (Darknet adds; its 1x1 gemm overwrites net.delta, so
     * only size > 1 compares Darknet's input delta) */
    memcpy(la->delta, delta, nout * sizeof(float));
    memcpy(ld->delta, delta, nout * sizeof(float));
    memcpy(la->weight_updates, u0, nw * sizeof(float));
    memcpy(ld->weight_updates, u0, nw * sizeof(float));
    memcpy(la->bias_updates, b0, (size_t)g->n * sizeof(float));
    memcpy(ld->bias_updates, b0, (size_t)g->n * sizeof(float));
    float *p0 = malloc(nin * sizeof(float));
    fill(p0, nin, &seed);
    memcpy(pd_a, p0, nin * sizeof(float));
    memcpy(pd_d, p0, nin * sizeof(float));
    a->delta = pd_a;
    d->delta = pd_d;
    backward_convolutional_layer(*la, *a);
    assert_int_equal(sdnn_conv_dnnl_backward(*ld, *d), SDNN_OK);
    double kw = (double)g->batch * la->out_h * la->out_w;
    double kx = (double)(g->n / g->groups) * g->size * g->size;
    double ew_d = worst(ld->weight_updates, dw, sw, u0, nw, kw, 1.0);
    double ew_a = worst(la->weight_updates, dw, sw, u0, nw, kw, 1.0);
    double ex_d = worst(pd_d, dx, sx, p0, nin, kx, 1.0);
    double ex_a = g->size > 1 ? worst(pd_a, dx, sx, p0, nin, kx, 1.0) : 0.0;
    /* bias: b0 + sum of the delta, the same code (Darknet's backward_bias)
     * on the same delta in both paths */
    for (int o = 0; o < g->n; ++o) assert_true(la->bias_updates[o] == ld->bias_updates[o]);
    print_message("b%d c%d %dx%d n%d size %d stride %d pad %d groups %d: worst error / bound: "
                  "forward %.3f (darknet %.3f, between %.3f), weights %.3f (darknet %.3f), "
                  "input delta %.3f (darknet %.3f)\n",
                  g->batch, g->c, g->h, g->w, g->n, g->size, g->stride, g->pad, g->groups, ef_d,
                  ef_a, ef_x, ew_d, ew_a, ex_d, ex_a);
    assert_true(ef_d <= 1.0);
    assert_true(ew_d <= 1.0);
    assert_true(ex_d <= 1.0);
    if (g->size == 1 && g->stride > 1) {
        /* Debian's libdarknet skips im2col for size=1 and so ignores the
         * stride: its result is not a strided convolution (the reference
         * is); only oneDNN's is checked, and Darknet's shown to be off. */
        print_message("  libdarknet's 1x1 stride %d is not a strided convolution: not compared\n",
                      g->stride);
        assert_true(ef_a > 1.0);
    } else {
        assert_true(ef_a <= 1.0);
        assert_true(ef_x <= 1.0);
        assert_true(ew_a <= 1.0);
        assert_true(ex_a <= 1.0);
    }

    sdnn_conv_dnnl_detach(d);
    assert_false(sdnn_conv_dnnl_owns(ld));
    a->input = in_a;
    d->input = in_d;
    a->delta = d->delta = NULL;
    free(x); free(delta); free(pd_a); free(pd_d); free(u0); free(b0); free(p0);
    free(out); free(so); free(dw); free(sw); free(dx); free(sx); free(outa);
    sdnn_network_free(a);
    sdnn_network_free(d);
}

static void test_geometries(void **state)
{
    (void)state;
    skip_without_dnnl();
    static const geom gs[] = {
        {2, 8, 6, 6, 5, 1, 1, 0, 1},     /* 1x1 */
        {2, 6, 7, 7, 4, 1, 2, 0, 1},     /* 1x1 stride 2 */
        {2, 4, 7, 7, 6, 3, 1, 1, 1},     /* 3x3 padded */
        {3, 3, 9, 9, 4, 3, 2, 1, 1},     /* 3x3 stride 2 */
        {2, 3, 8, 5, 4, 3, 1, 0, 1},     /* 3x3 unpadded, not square */
        {2, 8, 6, 6, 8, 3, 1, 1, 2},     /* 2 groups */
        {2, 8, 6, 6, 8, 3, 1, 1, 8},     /* depthwise */
        {2, 2, 11, 11, 3, 5, 3, 1, 1},   /* 5x5 stride 3, right padding short */
        {1, 16, 10, 10, 32, 3, 1, 1, 1}, /* wider: oneDNN's blocked layouts */
    };
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; ++i) check_geom(&gs[i]);
}

/* resize_network changes the shape: the primitives are rebuilt and the
 * result still matches Darknet's. */
static void test_conv_resize(void **state)
{
    (void)state;
    skip_without_dnnl();
    geom g = {2, 4, 8, 8, 6, 3, 1, 1, 1};
    network *a = make_net(&g), *d = make_net(&g);
    uint64_t seed = 99;
    fill(a->layers[0].weights, (size_t)a->layers[0].nweights, &seed);
    memcpy(d->layers[0].weights, a->layers[0].weights,
           (size_t)a->layers[0].nweights * sizeof(float));
    assert_int_equal(sdnn_conv_dnnl_attach(d, NULL), SDNN_OK);
    resize_network(a, 12, 10);
    resize_network(d, 12, 10);
    layer *la = &a->layers[0], *ld = &d->layers[0];
    assert_int_equal(ld->out_w, 12);
    assert_int_equal(sdnn_conv_dnnl_ready(ld), SDNN_OK);
    size_t nin = (size_t)la->batch * la->inputs, nout = (size_t)la->batch * la->outputs;
    float *x = malloc(nin * sizeof *x);
    assert_non_null(x);
    fill(x, nin, &seed);
    float *in_a = a->input, *in_d = d->input;
    a->input = d->input = x;
    forward_convolutional_layer(*la, *a);
    assert_int_equal(sdnn_conv_dnnl_forward(*ld, *d), SDNN_OK);
    /* the resized output, element by element, within the forward's bound
     * (k = 36 products of |w x| <= 1: sqrt(36) x 2 x FLT_EPSILON x 36) */
    double bound = 2.0 * 6.0 * FLT_EPSILON * 36.0;
    double e = 0;
    for (size_t i = 0; i < nout; ++i) e = fmax(e, fabs((double)la->output[i] - ld->output[i]));
    print_message("resize to 12x10: largest difference %.3g (bound %.3g)\n", e, bound);
    assert_true(e <= bound);
    a->input = in_a;
    d->input = in_d;
    sdnn_conv_dnnl_detach(d);
    free(x);
    sdnn_network_free(a);
    sdnn_network_free(d);
}

/* The double-precision gradient check passes with cpu_conv=onednn on a
 * residual net with batch norm, 1x1 layers feeding shortcuts, stride 2. */
static const char *RESIDUAL =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=12\nheight=12\nchannels=3\n"
    "learning_rate=0.001\nmomentum=0.9\ndecay=0\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=1\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[shortcut]\nfrom=-3\nactivation=linear\n\n"
    "[convolutional]\nfilters=6\nsize=3\nstride=2\npad=1\ngroups=2\nactivation=leaky\n\n"
    "[convolutional]\nfilters=5\nsize=1\nstride=1\npad=1\nactivation=linear\n\n"
    "[cost]\ntype=sse\n\n"
    "[scalednn]\ncpu_conv=onednn\n";

static void test_gradcheck(void **state)
{
    (void)state;
    skip_without_dnnl();
    sdnn_gradcheck_opts o = SDNN_GRADCHECK_OPTS_INIT;
    sdnn_gradcheck_report r;
    assert_int_equal(sdnn_gradcheck_text("res.cfg", RESIDUAL, &o, &r), SDNN_OK);
    sdnn_gradcheck_print(&r, stderr);
    assert_int_equal(r.nlayers, 5);
    assert_int_equal(r.failed, 0);
    sdnn_gradcheck_report_free(&r);
    /* ... and a wrong gradient on a oneDNN layer is caught */
    o.test_layer = 2;
    o.test_factor = 1.01;
    assert_int_equal(sdnn_gradcheck_text("res.cfg", RESIDUAL, &o, &r), SDNN_OK);
    assert_int_equal(r.failed, 1);
    sdnn_gradcheck_report_free(&r);
}

/* Without oneDNN the key is refused by file, line and key; with it, auto
 * means onednn. */
static void test_key(void **state)
{
    (void)state;
    sdnn_config c;
    char *stripped = NULL;
    const char *text = "[net]\nbatch=1\n\n[scalednn]\ncpu_conv=onednn\n";
    sdnn_status st = sdnn_config_parse_text("k.cfg", text, &c, &stripped);
    free(stripped);
    stripped = NULL;
    if (sdnn_conv_dnnl_built()) {
        assert_int_equal(st, SDNN_OK);
        assert_int_equal(sdnn_config_cpu_conv_onednn(&c), 1);
    } else {
        assert_int_equal(st, SDNN_ERR_UNSUPPORTED);
        const char *m = sdnn_last_error();
        assert_non_null(strstr(m, "k.cfg:5"));
        assert_non_null(strstr(m, "cpu_conv=onednn"));
        assert_non_null(strstr(m, "no oneDNN"));
    }
    assert_int_equal(sdnn_config_parse_text("k.cfg", "[net]\nbatch=1\n\n[scalednn]\n"
                                            "cpu_conv=auto\n", &c, &stripped), SDNN_OK);
    free(stripped);
    stripped = NULL;
    assert_int_equal(sdnn_config_cpu_conv_onednn(&c), sdnn_conv_dnnl_built());
    assert_int_equal(sdnn_config_parse_text("k.cfg", "[net]\nbatch=1\n\n[scalednn]\n", &c,
                                            &stripped), SDNN_OK);
    free(stripped);
    stripped = NULL;
    /* The default is auto: oneDNN wherever the build has it, in a section
     * without the key and in a cfg without a section (stock mode) alike. */
    assert_string_equal(c.cpu_conv, "auto");
    assert_int_equal(sdnn_config_cpu_conv_onednn(&c), sdnn_conv_dnnl_built());
    assert_int_equal(sdnn_config_parse_text("k.cfg", "[net]\nbatch=1\n", &c, &stripped), SDNN_OK);
    free(stripped);
    stripped = NULL;
    assert_int_equal(c.mode, SDNN_MODE_STOCK);
    assert_string_equal(c.cpu_conv, "auto");
    assert_int_equal(sdnn_config_cpu_conv_onednn(&c), sdnn_conv_dnnl_built());
    const sdnn_config def = SDNN_CONFIG_INIT;
    assert_string_equal(def.cpu_conv, "auto");
    assert_int_equal(sdnn_config_parse_text("k.cfg", "[net]\nbatch=1\n\n[scalednn]\n"
                                            "cpu_conv=mkl\n", &c, &stripped), SDNN_ERR_INVALID);
    free(stripped);
    assert_non_null(strstr(sdnn_last_error(), "darknet, onednn, auto"));
}

/* The start banner's account of the convolutions (conv_dnnl.h): how many
 * run on oneDNN, and each that stays on libdarknet's with its reason. */
static const char *BANNER_NET =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "learning_rate=0.01\nmomentum=0.9\ndecay=0\n\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=%s\n\n"
    "[maxpool]\nsize=2\nstride=2\n\n"
    "[connected]\noutput=3\nactivation=%s\n\n"
    "[softmax]\n";

static network *banner_net(const char *conv_act, const char *fc_act)
{
    char text[1024], path[] = "/tmp/sdnn-banner-XXXXXX";
    snprintf(text, sizeof text, BANNER_NET, conv_act, fc_act);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    network *net = sdnn_parse_network(path);   /* the dialect's mish and swish */
    unlink(path);
    assert_non_null(net);
    return net;
}

/* Through the trainer under the default config (stock or scalednn mode):
 * replica 1's banner text. */
static void banner_of(int mode, char *out, size_t len)
{
    network **nets = malloc(2 * sizeof *nets);
    assert_non_null(nets);
    nets[0] = banner_net("leaky", "mish");   /* mish on a [connected] layer only */
    nets[1] = banner_net("leaky", "mish");
    assert_int_equal(sdnn_replicas_broadcast(nets, 2), SDNN_OK);
    sdnn_config cfg = SDNN_CONFIG_INIT;   /* cpu_conv: the default */
    cfg.mode = mode;
    cfg.present = mode == SDNN_MODE_SCALEDNN;
    cfg.bucket_mb = 4.0;
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create(nets, 2, &cfg, 1, &t) != SDNN_OK) fail_msg("%s", sdnn_last_error());
    sdnn_conv_dnnl_describe(sdnn_trainer_net(t, 1), cfg.cpu_conv,
                            sdnn_config_cpu_conv_onednn(&cfg), "p: ", out, len);
    print_message("%s", out);
    sdnn_trainer_destroy(t);
}

static void test_banner(void **state)
{
    (void)state;
    char b[2048], want[512];
    for (int mode = SDNN_MODE_SCALEDNN; mode <= SDNN_MODE_STOCK; ++mode) {
        banner_of(mode, b, sizeof b);
        if (sdnn_conv_dnnl_built())
            snprintf(want, sizeof want, "p: cpu_conv=auto: 2 of 2 convolutional layers on %s, "
                     "0 on libdarknet's\n", sdnn_conv_dnnl_name());
        else
            snprintf(want, sizeof want, "p: cpu_conv=auto: libdarknet's convolutions on all 2 "
                     "convolutional layers because this build has no oneDNN (install "
                     "libdnnl-dev, scripts/setup.sh, and rebuild for oneDNN's)\n");
        assert_string_equal(b, want);
    }
    if (!sdnn_conv_dnnl_built()) return;   /* the rest lists oneDNN's layers */
    /* A mish (swish) convolution stays on libdarknet's, and so does the
     * other one (the dialect wraps every convolution of such a net).  Not
     * through a trainer: hooks.c keeps one libdarknet function per layer
     * type for the process, and the plain nets above set it. */
    static const char *const acts[] = {"mish", "swish"};
    for (int k = 0; k < 2; ++k) {
        network *net = banner_net(acts[k], "linear");
        int n = -1;
        assert_int_equal(sdnn_conv_dnnl_attach(net, &n), SDNN_OK);
        assert_int_equal(n, 0);
        sdnn_conv_dnnl_describe(net, "onednn", 1, "p: ", b, sizeof b);
        print_message("%s", b);
        snprintf(want, sizeof want, "p: cpu_conv=onednn: 0 of 2 convolutional layers on %s, 2 "
                 "on libdarknet's:\np:   layer 1 conv %s: oneDNN has no %s here", sdnn_conv_dnnl_name(),
                 acts[k], acts[k]);
        assert_non_null(strstr(b, want));
        assert_non_null(strstr(b, "\np:   layer 0 conv linear/leaky beside mish or swish"));
        sdnn_conv_dnnl_detach(net);
        sdnn_network_free(net);
    }
}

/* cpu_conv=darknet says so; a buffer too small is cut short, still one line. */
static void test_banner_darknet(void **state)
{
    (void)state;
    char text[1024];
    snprintf(text, sizeof text, BANNER_NET, "leaky", "linear");
    network *net = tu_parse(text);
    assert_non_null(net);
    char b[256];
    sdnn_conv_dnnl_describe(net, "darknet", 0, "", b, sizeof b);
    assert_string_equal(b, "cpu_conv=darknet: libdarknet's convolutions on all 2 convolutional "
                           "layers\n");
    char small[24];
    sdnn_conv_dnnl_describe(net, "darknet", 0, "", small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_string_equal(small + sizeof small - 5, "...\n");
    sdnn_network_free(net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_banner),
        cmocka_unit_test(test_banner_darknet),
        cmocka_unit_test(test_geometries),
        cmocka_unit_test(test_conv_resize),
        cmocka_unit_test(test_gradcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
