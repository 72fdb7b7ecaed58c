/*
 * fastlayers: the cpu_conv=onednn loops for a
 * convolutional layer's batch norm, bias and activation and for [maxpool]
 * against libdarknet's own functions on the same inputs (what
 * cpu_conv=darknet runs), shape by shape: odd sizes, batch 1 and more,
 * channel counts that are not multiples of 8, activations linear, leaky,
 * relu (fused) and logistic (libdarknet's per row).
 *
 * Exact where the arithmetic is the same: the activations and their
 * gradients, the bias-only layer, l.x, the backward with fix_bn_delta=0
 * (libdarknet's batch-norm backward after the activation gradient), maxpool's
 * outputs and indexes (ties, NaN, -FLT_MAX, windows past the edge).
 *
 * Error model where it differs (u = 2^-24, ud = 2^-53, g_k = k u / (1 - k u),
 * gd_k the same with ud), per channel of N values y, A1 = sum |y|:
 *   mean: libdarknet sums in float (g_(N-1) A1) and scales twice: within
 *     g_(N+1) A1 / N of the exact mean m; the fast path sums in double and
 *     rounds once: u |m| + gd_(N+1) A1 / N.
 *   variance V = sum (y - m)^2 / (N - 1): a mean off by dm gives
 *     V + N dm^2 / (N - 1) exactly; libdarknet's float terms and sum add
 *     g_(N+4) of that, the fast path's double sum u of it.
 *   x_norm = (y - m) / (s + 1e-6), s = sqrt V: with the mean off by dm and
 *     s by ds <= dv / s, the value is off by (dm + |y - m| ds / D) / (D - ds)
 *     (D = s + 1e-6) plus its own roundings, g_3 |x_norm| (libdarknet:
 *     subtract, divide; fast: subtract, reciprocal, multiply).
 *   output = act(scale x_norm + bias): |scale| times that, plus g_2 (|scale
 *     x_norm| + |bias|) for the two roundings, through an activation of
 *     slope <= 1, plus u |output| for the activation's own rounding.
 * The bound between the two paths is the sum of each path's bound from the
 * exact value (computed here in double).  The exact batch-norm backward is
 * double in both paths (bnfix.c and fastlayers.c): the sums differ by
 * gd_(N+1) of their sums of |terms|, each result by u |result| when rounded.
 * Every comparison prints its worst error / bound; each must be <= 1.
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

#include "bnfix.h"
#include "conv_dnnl.h"
#include "fastlayers.h"
#include "hooks.h"
#include "replicas.h"
#include "testutil.h"

void activate_array(float *x, const int n, const ACTIVATION a);
void gradient_array(const float *x, const int n, const ACTIVATION a, float *delta);
void forward_batchnorm_layer(layer l, network net);
void backward_batchnorm_layer(layer l, network net);
void add_bias(float *output, float *biases, int batch, int n, int size);
void backward_bias(float *bias_updates, float *delta, int batch, int n, int size);
void forward_maxpool_layer(layer l, network net);
void forward_shortcut_layer(layer l, network net);
void backward_shortcut_layer(layer l, network net);

#define U (1.0 / 16777216.0)
#define UD (1.0 / 9007199254740992.0)

static double gam(double k) { return k * U / (1.0 - k * U); }
static double gamd(double k) { return k * UD / (1.0 - k * UD); }

typedef struct shape {
    int batch, c, h, w;
    ACTIVATION act;
    const char *act_name;
} shape;

static network *conv_net(const shape *s, int bn)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nwidth=%d\nheight=%d\nchannels=1\n\n"
             "[convolutional]\nbatch_normalize=%d\nfilters=%d\nsize=1\nstride=1\npad=0\n"
             "activation=%s\n",
             s->batch, s->w, s->h, bn, s->c, s->act_name);
    network *net = tu_parse(text);
    assert_non_null(net);
    net->index = 0;
    return net;
}

static void fill(float *x, size_t n, uint64_t *sd, float lo, float hi)
{
    for (size_t i = 0; i < n; ++i) x[i] = tu_uniform(sd, lo, hi);
}

/* The conv output a test feeds both paths: per channel an offset and a
 * spread, so the statistics are not those of centred data. */
static void conv_output(float *y, const shape *s, uint64_t *sd)
{
    size_t S = (size_t)s->h * s->w;
    for (int c = 0; c < s->c; ++c) {
        float off = tu_uniform(sd, -3.f, 3.f), spread = tu_uniform(sd, 0.1f, 2.f);
        for (int b = 0; b < s->batch; ++b)
            fill(y + ((size_t)b * s->c + c) * S, S, sd, off - spread, off + spread);
    }
}

static void copy_f(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }

/* ---- activations: bit for bit ------------------------------------------- */

static void test_activations_exact(void **state)
{
    (void)state;
    static const ACTIVATION acts[] = {LINEAR, LEAKY, RELU, LOGISTIC, TANH, ELU};
    enum { N = 1031 };
    float x[N], a[N], b[N], d0[N], da[N], db[N];
    uint64_t sd = 7;
    fill(x, N, &sd, -6.f, 6.f);
    x[0] = 0.f;
    x[1] = -0.f;
    x[2] = NAN;
    x[3] = -FLT_MAX;
    fill(d0, N, &sd, -1.f, 1.f);
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; ++i) {
        copy_f(a, x, N);
        copy_f(b, x, N);
        activate_array(a, N, acts[i]);
        sdnn_fast_activate(b, N, acts[i]);
        assert_memory_equal(a, b, sizeof a);
        copy_f(da, d0, N);
        copy_f(db, d0, N);
        gradient_array(a, N, acts[i], da);
        sdnn_fast_gradient(a, N, acts[i], db);
        assert_memory_equal(da, db, sizeof da);
    }
    assert_true(sdnn_fast_act_fused(LEAKY) && sdnn_fast_act_fused(LINEAR) &&
                !sdnn_fast_act_fused(LOGISTIC));
}

/* ---- batch-normalised forward -------------------------------------------- */

typedef struct fwd_err {
    double mean, var, rolling, xnorm, out;   /* worst error / bound */
} fwd_err;

static double ratio(double e, double bound) { return e == 0 ? 0 : e / bound; }

/* Compare the fast layer ld against libdarknet's la after the same forward
 * of y (train: batch statistics; else rolling), per the model above. */
static fwd_err compare_forward(const layer *la, const layer *ld, const float *y, const shape *s,
                               int train, const float *r0m, const float *r0v)
{
    fwd_err w = {0, 0, 0, 0, 0};
    size_t S = (size_t)s->h * s->w, N = (size_t)s->batch * S;
    for (int c = 0; c < s->c; ++c) {
        double m = 0, A1 = 0, V = 0;
        double dm_a = 0, dm_f = 0, dv_a = 0, dv_f = 0;
        if (train) {
            for (int b = 0; b < s->batch; ++b)
                for (size_t k = 0; k < S; ++k) {
                    double v = y[((size_t)b * s->c + c) * S + k];
                    m += v;
                    A1 += fabs(v);
                }
            m /= (double)N;
            double A2 = 0;
            for (int b = 0; b < s->batch; ++b)
                for (size_t k = 0; k < S; ++k) {
                    double e = y[((size_t)b * s->c + c) * S + k] - m;
                    A2 += e * e;
                }
            V = A2 / (double)(N - 1);
            double dd = gamd(2.0 * N + 4) * (A1 / N + V);   /* this double reference's own */
            dm_a = gam(N + 1.0) * A1 / N + dd;
            dm_f = U * fabs(m) + gamd(N + 1.0) * A1 / N + dd;
            double Va = V + N * dm_a * dm_a / (N - 1), Vf = V + N * dm_f * dm_f / (N - 1);
            dv_a = gam(N + 4.0) * Va + (Va - V) + dd;
            dv_f = U * Vf + gamd(N + 4.0) * Vf + (Vf - V) + dd;
            w.mean = fmax(w.mean, ratio(fabs((double)la->mean[c] - ld->mean[c]), dm_a + dm_f));
            w.var = fmax(w.var, ratio(fabs((double)la->variance[c] - ld->variance[c]), dv_a + dv_f));
            /* rolling = .99 r0 + .01 stat in float, the same operations */
            double em = fabs((double)la->rolling_mean[c] - ld->rolling_mean[c]);
            double bm = 0.0101 * fabs((double)la->mean[c] - ld->mean[c]) +
                        2 * U * (fabs(la->rolling_mean[c]) + fabs(r0m[c]) + fabs(m));
            double ev = fabs((double)la->rolling_variance[c] - ld->rolling_variance[c]);
            double bv = 0.0101 * fabs((double)la->variance[c] - ld->variance[c]) +
                        2 * U * (fabs(la->rolling_variance[c]) + fabs(r0v[c]) + V);
            w.rolling = fmax(w.rolling, fmax(ratio(em, bm), ratio(ev, bv)));
        } else {
            m = la->rolling_mean[c];
            V = la->rolling_variance[c];
        }
        double sq = sqrt(V), D = sq + (double)0.000001f;
        double ds_a = dv_a / sq, ds_f = dv_f / sq;
        assert_true(D > ds_a + ds_f);
        double sc = la->scales[c], bi = la->biases[c];
        for (int b = 0; b < s->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                size_t i = ((size_t)b * s->c + c) * S + k;
                double dy = fabs(y[i] - m), xn = dy / D;
                double bx_a = (dm_a + dy * ds_a / D) / (D - ds_a) + gam(3) * (xn + dm_a / (D - ds_a));
                double bx_f = (dm_f + dy * ds_f / D) / (D - ds_f) + gam(3) * (xn + dm_f / (D - ds_f));
                if (train)
                    w.xnorm = fmax(w.xnorm, ratio(fabs((double)la->x_norm[i] - ld->x_norm[i]),
                                                  bx_a + bx_f));
                double pre = fabs(sc) * (xn + bx_a + bx_f) + fabs(bi);
                double bo = fabs(sc) * (bx_a + bx_f) + 2 * gam(2) * pre +
                            U * (fabs(la->output[i]) + fabs(ld->output[i]));
                w.out = fmax(w.out, ratio(fabs((double)la->output[i] - ld->output[i]), bo));
            }
    }
    return w;
}

/* libdarknet's forward of y on la, the fast one on ld (same parameters and
 * rolling statistics); returns the worst ratios. */
static fwd_err run_forward(network *na, network *nd, const shape *s, const float *y, int train)
{
    layer *la = &na->layers[0], *ld = &nd->layers[0];
    size_t n = (size_t)s->batch * la->outputs;
    float r0m[64], r0v[64];
    assert_true(s->c <= 64);
    copy_f(r0m, la->rolling_mean, (size_t)s->c);
    copy_f(r0v, la->rolling_variance, (size_t)s->c);
    na->train = nd->train = train;
    copy_f(la->output, y, n);
    copy_f(ld->output, y, n);
    forward_batchnorm_layer(*la, *na);
    activate_array(la->output, (int)n, la->activation);
    sdnn_fast_conv_forward_tail(ld, nd);
    assert_memory_equal(la->x, ld->x, n * sizeof(float));
    return compare_forward(la, ld, y, s, train, r0m, r0v);
}

static void params(network *na, network *nd, int c, uint64_t *sd)
{
    layer *la = &na->layers[0], *ld = &nd->layers[0];
    fill(la->scales, (size_t)c, sd, -2.f, 2.f);
    fill(la->biases, (size_t)c, sd, -1.f, 1.f);
    fill(la->rolling_mean, (size_t)c, sd, -1.f, 1.f);
    fill(la->rolling_variance, (size_t)c, sd, 0.2f, 3.f);
    copy_f(ld->scales, la->scales, (size_t)c);
    copy_f(ld->biases, la->biases, (size_t)c);
    copy_f(ld->rolling_mean, la->rolling_mean, (size_t)c);
    copy_f(ld->rolling_variance, la->rolling_variance, (size_t)c);
}

static const shape SHAPES[] = {
    {1, 3, 5, 7, LEAKY, "leaky"},      /* batch 1, odd sizes */
    {2, 5, 3, 3, LINEAR, "linear"},
    {4, 17, 6, 5, LEAKY, "leaky"},     /* 17 channels */
    {3, 9, 1, 1, RELU, "relu"},        /* N = 3 */
    {2, 12, 13, 11, LOGISTIC, "logistic"},
    {1, 1, 1, 2, LEAKY, "leaky"},      /* N = 2 */
    {8, 33, 16, 16, LEAKY, "leaky"},   /* N = 2048 */
};

static void test_bn_forward(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
        const shape *s = &SHAPES[i];
        network *na = conv_net(s, 1), *nd = conv_net(s, 1);
        uint64_t sd = 100 + i;
        params(na, nd, s->c, &sd);
        size_t n = (size_t)s->batch * na->layers[0].outputs;
        float *y = malloc(n * sizeof *y);
        assert_non_null(y);
        conv_output(y, s, &sd);
        fwd_err t = run_forward(na, nd, s, y, 1);
        /* inference from the same rolling statistics (the training step
         * left them a rounding apart) */
        copy_f(nd->layers[0].rolling_mean, na->layers[0].rolling_mean, (size_t)s->c);
        copy_f(nd->layers[0].rolling_variance, na->layers[0].rolling_variance, (size_t)s->c);
        fwd_err f = run_forward(na, nd, s, y, 0);
        print_message("b%d c%d %dx%d %s: worst error / bound: mean %.3f variance %.3f rolling "
                      "%.3f x_norm %.3f output %.3f; inference output %.3f\n",
                      s->batch, s->c, s->h, s->w, s->act_name, t.mean, t.var, t.rolling, t.xnorm,
                      t.out, f.out);
        assert_true(t.mean <= 1 && t.var <= 1 && t.rolling <= 1 && t.xnorm <= 1 && t.out <= 1);
        assert_true(f.out <= 1);
        free(y);
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
}

/* The comparison can fail: one input of libdarknet's side 1e-3 off is
 * caught (the worst-case bounds grow with N: at N = 120 a mean may be off by
 * ~7e-6 of the mean |y|), and so is a variance divided by N (oneDNN's batch
 * norm) instead of N - 1. */
static void test_bn_forward_can_fail(void **state)
{
    (void)state;
    const shape *s = &SHAPES[2];
    network *na = conv_net(s, 1), *nd = conv_net(s, 1);
    uint64_t sd = 5;
    params(na, nd, s->c, &sd);
    layer *la = &na->layers[0], *ld = &nd->layers[0];
    size_t n = (size_t)s->batch * la->outputs;
    float *y = malloc(n * sizeof *y), *yp = malloc(n * sizeof *yp);
    assert_true(y && yp);
    conv_output(y, s, &sd);
    copy_f(yp, y, n);
    yp[37] *= 1.001f;
    float r0m[64], r0v[64];
    copy_f(r0m, la->rolling_mean, (size_t)s->c);
    copy_f(r0v, la->rolling_variance, (size_t)s->c);
    na->train = nd->train = 1;
    copy_f(la->output, yp, n);
    copy_f(ld->output, y, n);
    forward_batchnorm_layer(*la, *na);
    activate_array(la->output, (int)n, la->activation);
    sdnn_fast_conv_forward_tail(ld, nd);
    fwd_err w = compare_forward(la, ld, y, s, 1, r0m, r0v);
    print_message("one input 1e-3 off: mean %.2f x_norm %.1f output %.1f (must exceed 1)\n",
                  w.mean, w.xnorm, w.out);
    assert_true(w.out > 1 && w.xnorm > 1);
    /* the same inputs on both sides, then the fast variance divided by N */
    copy_f(la->rolling_mean, r0m, (size_t)s->c);
    copy_f(la->rolling_variance, r0v, (size_t)s->c);
    copy_f(ld->rolling_mean, r0m, (size_t)s->c);
    copy_f(ld->rolling_variance, r0v, (size_t)s->c);
    copy_f(la->output, y, n);
    copy_f(ld->output, y, n);
    forward_batchnorm_layer(*la, *na);
    activate_array(la->output, (int)n, la->activation);
    sdnn_fast_conv_forward_tail(ld, nd);
    w = compare_forward(la, ld, y, s, 1, r0m, r0v);
    assert_true(w.var <= 1);
    double N = (double)s->batch * s->h * s->w;
    for (int c = 0; c < s->c; ++c) ld->variance[c] = (float)(ld->variance[c] * (N - 1) / N);
    w = compare_forward(la, ld, y, s, 1, r0m, r0v);
    print_message("the variance divided by N: %.1f (must exceed 1)\n", w.var);
    assert_true(w.var > 1);
    free(y);
    free(yp);
    sdnn_network_free(na);
    sdnn_network_free(nd);
}

/* Without batch norm: bias + activation, bit for bit. */
static void test_bias_forward_exact(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
        const shape *s = &SHAPES[i];
        network *na = conv_net(s, 0), *nd = conv_net(s, 0);
        layer *la = &na->layers[0], *ld = &nd->layers[0];
        uint64_t sd = 300 + i;
        fill(la->biases, (size_t)s->c, &sd, -1.f, 1.f);
        copy_f(ld->biases, la->biases, (size_t)s->c);
        size_t n = (size_t)s->batch * la->outputs, S = (size_t)s->h * s->w;
        conv_output(la->output, s, &sd);
        copy_f(ld->output, la->output, n);
        add_bias(la->output, la->biases, s->batch, s->c, (int)S);
        activate_array(la->output, (int)n, la->activation);
        sdnn_fast_conv_forward_tail(ld, nd);
        assert_memory_equal(la->output, ld->output, n * sizeof(float));
        /* backward: activation gradient + bias gradient */
        fill(la->delta, n, &sd, -1.f, 1.f);
        copy_f(ld->delta, la->delta, n);
        fill(la->bias_updates, (size_t)s->c, &sd, -1.f, 1.f);
        copy_f(ld->bias_updates, la->bias_updates, (size_t)s->c);
        gradient_array(la->output, (int)n, la->activation, la->delta);
        backward_bias(la->bias_updates, la->delta, s->batch, s->c, (int)S);
        sdnn_fast_conv_backward_head(ld, nd, 1);
        assert_memory_equal(la->delta, ld->delta, n * sizeof(float));
        assert_memory_equal(la->bias_updates, ld->bias_updates, (size_t)s->c * sizeof(float));
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
}

/* ---- batch-normalised backward ------------------------------------------- */

typedef struct bwd_err {
    double bias, scale, delta;
} bwd_err;

/* Both layers hold libdarknet's forward of the same y and the same delta,
 * updates; la gets the reference backward (`exact`: bnfix's path, else
 * libdarknet's), ld the fast one with bn_exact 1. */
static bwd_err run_backward(network *na, network *nd, const shape *s, uint64_t *sd, int exact)
{
    layer *la = &na->layers[0], *ld = &nd->layers[0];
    size_t n = (size_t)s->batch * la->outputs, S = (size_t)s->h * s->w, N = (size_t)s->batch * S;
    size_t C = (size_t)s->c;
    na->train = nd->train = 1;
    conv_output(la->output, s, sd);
    forward_batchnorm_layer(*la, *na);
    activate_array(la->output, (int)n, la->activation);
    copy_f(ld->output, la->output, n);
    copy_f(ld->x, la->x, n);
    copy_f(ld->x_norm, la->x_norm, n);
    copy_f(ld->mean, la->mean, C);
    copy_f(ld->variance, la->variance, C);
    fill(la->delta, n, sd, -1.f, 1.f);
    copy_f(ld->delta, la->delta, n);
    float *d0 = malloc(n * sizeof *d0);
    assert_non_null(d0);
    copy_f(d0, la->delta, n);
    fill(la->bias_updates, C, sd, -1.f, 1.f);
    fill(la->scale_updates, C, sd, -1.f, 1.f);
    copy_f(ld->bias_updates, la->bias_updates, C);
    copy_f(ld->scale_updates, la->scale_updates, C);
    if (exact) {
        layer copy = *la;
        float sink[64];
        assert_true(sdnn_bn_fix_backward(&copy, na, sink, backward_batchnorm_layer) ==
                    backward_batchnorm_layer);
    } else {
        gradient_array(la->output, (int)n, la->activation, la->delta);
        backward_batchnorm_layer(*la, *na);
    }
    sdnn_fast_conv_backward_head(ld, nd, 1);

    bwd_err w = {0, 0, 0};
    for (size_t c = 0; c < C; ++c) {
        /* sums of |terms| (|act'| <= 1 here) */
        double G = 0, GX = 0, GM = 0;
        for (int b = 0; b < s->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                size_t i = ((size_t)b * C + c) * S + k;
                G += fabs(d0[i]);
                GX += fabs(d0[i] * ld->x_norm[i]);
                GM += fabs(d0[i] * ((double)ld->x[i] - ld->mean[c]));
            }
        double eb = fabs((double)la->bias_updates[c] - ld->bias_updates[c]);
        double bb = 2 * gamd(N + 1.0) * G + 2 * U * G +
                    U * (fabs(la->bias_updates[c]) + fabs(ld->bias_updates[c]));
        double es = fabs((double)la->scale_updates[c] - ld->scale_updates[c]);
        double bs = 2 * gamd(N + 1.0) * GX + 2 * U * GX +
                    U * (fabs(la->scale_updates[c]) + fabs(ld->scale_updates[c]));
        w.bias = fmax(w.bias, ratio(eb, bb));
        w.scale = fmax(w.scale, ratio(es, bs));
        double sdv = sqrt((double)ld->variance[c]), den = sdv + 1e-6, g = fabs(ld->scales[c]);
        double dm = g / den / (double)N * 2 * gamd(N + 1.0) * G;
        double dt = sdv > 0 ? g * 2 * gamd(N + 1.0) * GM / (den * den * (double)(N - 1) * sdv) : 0;
        double t = sdv > 0 ? g * GM / (den * den * (double)(N - 1) * sdv) : 0;
        for (int b = 0; b < s->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                size_t i = ((size_t)b * C + c) * S + k;
                double xm = fabs((double)ld->x[i] - ld->mean[c]);
                double terms = g / den * fabs(d0[i]) + g * G / den / (double)N + xm * t;
                double bd = dm + xm * dt + 8 * UD * terms +
                            U * (fabs(la->delta[i]) + fabs(ld->delta[i]));
                w.delta = fmax(w.delta, ratio(fabs((double)la->delta[i] - ld->delta[i]), bd));
            }
    }
    free(d0);
    return w;
}

static void test_bn_backward_exact(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
        const shape *s = &SHAPES[i];
        network *na = conv_net(s, 1), *nd = conv_net(s, 1);
        uint64_t sd = 500 + i;
        params(na, nd, s->c, &sd);
        bwd_err w = run_backward(na, nd, s, &sd, 1);
        print_message("b%d c%d %dx%d %s: exact backward, worst error / bound: bias %.3f scale "
                      "%.3f delta %.3f\n",
                      s->batch, s->c, s->h, s->w, s->act_name, w.bias, w.scale, w.delta);
        assert_true(w.bias <= 1 && w.scale <= 1 && w.delta <= 1);
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
}

/* The comparison can fail: against libdarknet's own (inexact, ~1/N)
 * batch-norm backward, the fast exact delta is far outside the bound. */
static void test_bn_backward_can_fail(void **state)
{
    (void)state;
    const shape *s = &SHAPES[2];
    network *na = conv_net(s, 1), *nd = conv_net(s, 1);
    uint64_t sd = 9;
    params(na, nd, s->c, &sd);
    bwd_err w = run_backward(na, nd, s, &sd, 0);
    print_message("against libdarknet's inexact backward: delta %.3g (must exceed 1)\n", w.delta);
    assert_true(w.delta > 1);
    sdnn_network_free(na);
    sdnn_network_free(nd);
}

/* fix_bn_delta=0: the activation gradient, then libdarknet's batch-norm
 * backward: bit for bit. */
static void test_bn_backward_darknet(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
        const shape *s = &SHAPES[i];
        network *na = conv_net(s, 1), *nd = conv_net(s, 1);
        layer *la = &na->layers[0], *ld = &nd->layers[0];
        uint64_t sd = 700 + i;
        params(na, nd, s->c, &sd);
        size_t n = (size_t)s->batch * la->outputs, C = (size_t)s->c;
        na->train = nd->train = 1;
        conv_output(la->output, s, &sd);
        forward_batchnorm_layer(*la, *na);
        activate_array(la->output, (int)n, la->activation);
        copy_f(ld->output, la->output, n);
        copy_f(ld->x, la->x, n);
        copy_f(ld->x_norm, la->x_norm, n);
        copy_f(ld->mean, la->mean, C);
        copy_f(ld->variance, la->variance, C);
        fill(la->delta, n, &sd, -1.f, 1.f);
        copy_f(ld->delta, la->delta, n);
        gradient_array(la->output, (int)n, la->activation, la->delta);
        backward_batchnorm_layer(*la, *na);
        sdnn_fast_conv_backward_head(ld, nd, 0);
        assert_memory_equal(la->delta, ld->delta, n * sizeof(float));
        assert_memory_equal(la->bias_updates, ld->bias_updates, C * sizeof(float));
        assert_memory_equal(la->scale_updates, ld->scale_updates, C * sizeof(float));
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
}

/* ---- [maxpool] ------------------------------------------------------------ */

typedef struct pool_shape {
    int batch, c, h, w, stride, padding;   /* padding < 0: the default (size - 1) */
} pool_shape;

static network *pool_net(const pool_shape *p)
{
    char text[512], pad[32] = "";
    if (p->padding >= 0) snprintf(pad, sizeof pad, "padding=%d\n", p->padding);
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nwidth=%d\nheight=%d\nchannels=%d\n\n"
             "[maxpool]\nsize=2\nstride=%d\n%s",
             p->batch, p->w, p->h, p->c, p->stride, pad);
    network *net = tu_parse(text);
    assert_non_null(net);
    return net;
}

/* Values from a small set (ties are common), some NaN and -FLT_MAX, and in
 * the first plane's corner a 2x2 of NaN only. */
static void pool_input(float *x, size_t n, int w, int h, uint64_t *sd)
{
    for (size_t i = 0; i < n; ++i) {
        uint64_t r = tu_next(sd) % 16;
        x[i] = r == 0 ? NAN : r == 1 ? -FLT_MAX : r == 2 ? -INFINITY : (float)(r % 5) - 2.f;
    }
    x[0] = NAN;
    if (w > 1) x[1] = NAN;
    if (h > 1) x[w] = NAN;
    if (w > 1 && h > 1) x[w + 1] = NAN;
}

/* libdarknet's source semantics (first maximum wins, strict >, NaN never
 * wins); with `last` the last maximum wins (>=): a broken fast path the
 * comparison must catch.  nan[k]: output k's window holds a NaN. */
static void pool_ref(const layer *l, const float *in, int *idx, float *out, char *nan, int last)
{
    int off = -l->pad / 2;
    for (int b = 0; b < l->batch; ++b)
        for (int k = 0; k < l->c; ++k)
            for (int i = 0; i < l->out_h; ++i)
                for (int j = 0; j < l->out_w; ++j) {
                    float m = -FLT_MAX;
                    int id = -1, hasnan = 0;
                    for (int n = 0; n < 2; ++n)
                        for (int q = 0; q < 2; ++q) {
                            int y = off + i * l->stride + n, x = off + j * l->stride + q;
                            if (y < 0 || y >= l->h || x < 0 || x >= l->w) continue;
                            int ix = x + l->w * (y + l->h * (k + b * l->c));
                            hasnan |= isnan(in[ix]);
                            if (last ? in[ix] >= m : in[ix] > m) {
                                m = in[ix];
                                id = ix;
                            }
                        }
                    size_t o = (size_t)j + (size_t)l->out_w * (i + l->out_h * (k + l->c * b));
                    idx[o] = id;
                    out[o] = m;
                    nan[o] = (char)hasnan;
                }
}

static void test_maxpool(void **state)
{
    (void)state;
    static const pool_shape ps[] = {
        {1, 3, 8, 8, 2, -1},    /* yolov3-tiny's 2/2 */
        {2, 5, 7, 9, 2, -1},    /* odd: the last window half outside */
        {3, 4, 6, 5, 1, -1},    /* yolov3-tiny's 2/1 */
        {1, 2, 5, 5, 2, 0},     /* no padding */
        {2, 3, 6, 7, 2, 2},     /* offset -1: the first row/column outside */
        {1, 1, 1, 1, 1, -1},
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; ++i) {
        network *na = pool_net(&ps[i]), *nd = pool_net(&ps[i]);
        layer *la = &na->layers[0], *ld = &nd->layers[0];
        assert_true(sdnn_fast_maxpool_covered(ld));
        size_t nin = (size_t)la->batch * la->inputs, nout = (size_t)la->batch * la->outputs;
        float *x = malloc(nin * sizeof *x);
        int *last = malloc(nout * sizeof *last), *src = malloc(nout * sizeof *src);
        float *srco = malloc(nout * sizeof *srco);
        char *nan = malloc(nout);
        assert_true(x && last && src && srco && nan);
        uint64_t sd = 900 + i;
        pool_input(x, nin, la->w, la->h, &sd);
        float *in_a = na->input;
        na->input = x;
        forward_maxpool_layer(*la, *na);
        na->input = in_a;
        sdnn_fast_maxpool_forward(ld, x);
        /* windows without NaN: libdarknet's output and index; with a NaN
         * (its -Ofast build's result is the compiler's): the source's */
        pool_ref(ld, x, src, srco, nan, 0);
        size_t same = 0, nanw = 0, dk_nan_differs = 0;
        for (size_t k = 0; k < nout; ++k) {
            if (nan[k]) {
                ++nanw;
                dk_nan_differs += la->indexes[k] != ld->indexes[k];
                assert_int_equal(src[k], ld->indexes[k]);
                assert_memory_equal(&srco[k], &ld->output[k], sizeof(float));
            } else {
                assert_int_equal(la->indexes[k], ld->indexes[k]);
                assert_memory_equal(&la->output[k], &ld->output[k], sizeof(float));
                ++same;
            }
        }
        int neg = 0;
        for (size_t k = 0; k < nout; ++k) neg += ld->indexes[k] < 0;
        pool_ref(ld, x, last, srco, nan, 1);
        size_t differ = 0;
        for (size_t k = 0; k < nout; ++k) differ += last[k] != ld->indexes[k];
        print_message("maxpool b%d c%d %dx%d stride %d pad %d: %zu windows identical to "
                      "libdarknet's, %zu with a NaN as its source (its build differs at %zu); "
                      "%d without a value above -FLT_MAX; last-max-wins differs at %zu\n",
                      la->batch, la->c, la->h, la->w, la->stride, la->pad, same, nanw,
                      dk_nan_differs, neg, differ);
        if (nout > 4) assert_true(differ > 0);
        free(src);
        free(srco);
        free(nan);
        free(x);
        free(last);
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
    /* a shape the fast path leaves to libdarknet */
    network *n3 = tu_parse("[net]\nbatch=1\nwidth=6\nheight=6\nchannels=1\n\n"
                           "[maxpool]\nsize=3\nstride=2\n");
    assert_non_null(n3);
    assert_false(sdnn_fast_maxpool_covered(&n3->layers[0]));
    sdnn_network_free(n3);
}

/* The hooks put [maxpool]'s forward on the fast path only with
 * cpu_conv=onednn (SDNN_HOOK_ONEDNN); cpu_conv=darknet keeps libdarknet's. */
static void test_maxpool_hook(void **state)
{
    (void)state;
    if (!sdnn_conv_dnnl_built()) {
        print_message("this build has no oneDNN (libdnnl-dev): skipped\n");
        skip();
    }
    const char *text = "[net]\nbatch=2\nwidth=9\nheight=7\nchannels=3\n\n"
                       "[maxpool]\nsize=2\nstride=2\n\n[maxpool]\nsize=2\nstride=1\n\n"
                       "[maxpool]\nsize=3\nstride=2\n";
    network *na = tu_parse(text), *nd = tu_parse(text);
    assert_true(na && nd);
    assert_int_equal(sdnn_hooks_install(na, 0, SDNN_FIX_BN), SDNN_OK);
    assert_int_equal(sdnn_hooks_install(nd, 0, SDNN_FIX_BN | SDNN_HOOK_ONEDNN), SDNN_OK);
    for (int i = 0; i < 3; ++i) {
        assert_true(na->layers[i].forward == forward_maxpool_layer);
        /* size 3 is left to libdarknet */
        assert_true((nd->layers[i].forward == forward_maxpool_layer) == (i == 2));
    }
    size_t nin = (size_t)na->batch * na->inputs;
    float *x = malloc(nin * sizeof *x);
    assert_non_null(x);
    uint64_t sd = 4242;
    fill(x, nin, &sd, -1.f, 1.f);
    na->train = nd->train = 1;
    float *in_a = na->input, *in_d = nd->input;
    na->input = x;
    nd->input = x;
    for (int i = 0; i < 3; ++i) {
        na->index = nd->index = i;
        na->layers[i].forward(na->layers[i], *na);
        nd->layers[i].forward(nd->layers[i], *nd);
        size_t n = (size_t)na->batch * na->layers[i].outputs;
        assert_memory_equal(na->layers[i].output, nd->layers[i].output, n * sizeof(float));
        assert_memory_equal(na->layers[i].indexes, nd->layers[i].indexes, n * sizeof(int));
        na->input = na->layers[i].output;
        nd->input = nd->layers[i].output;
    }
    na->input = in_a;
    nd->input = in_d;
    sdnn_hooks_uninstall(nd);
    for (int i = 0; i < 3; ++i) assert_true(nd->layers[i].forward == forward_maxpool_layer);
    sdnn_hooks_uninstall(na);
    free(x);
    sdnn_network_free(na);
    sdnn_network_free(nd);
}

/* ---- [shortcut] ----------------------------------------------------------- */

/* Layers 0 and 1: 1x1 convolutions of 4 filters on a 6x5x3 input (never
 * run: their outputs and deltas are filled by the test), layer 2 the
 * [shortcut] from= `from`, with `act`. */
static network *shortcut_net(int batch, int from, const char *act)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nwidth=6\nheight=5\nchannels=3\n\n"
             "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n\n"
             "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n\n"
             "[shortcut]\nfrom=%d\nactivation=%s\n",
             batch, from, act);
    network *net = tu_parse(text);
    assert_non_null(net);
    return net;
}

/* The same random outputs and deltas in layers 0-2 of na and nd (layer 2's
 * output only in its delta's sign mix: the forward writes it). */
static void shortcut_fill(network *na, network *nd, uint64_t seed)
{
    uint64_t sa = seed, sd = seed;
    for (int i = 0; i < 3; ++i) {
        size_t n = (size_t)na->batch * na->layers[i].outputs;
        fill(na->layers[i].output, n, &sa, -2.f, 2.f);
        fill(na->layers[i].delta, n, &sa, -1.f, 1.f);
        fill(nd->layers[i].output, n, &sd, -2.f, 2.f);
        fill(nd->layers[i].delta, n, &sd, -1.f, 1.f);
    }
}

/* Layer 2 of net with `fwd` and `bwd` (libdarknet's or the hooks'), as
 * Darknet's forward_network/backward_network call it. */
static void shortcut_run(network *net, void (*fwd)(layer, network), void (*bwd)(layer, network))
{
    network n = *net;
    n.index = 2;
    n.train = 1;
    n.input = net->layers[1].output;
    fwd(net->layers[2], n);
    n.delta = net->layers[1].delta;
    bwd(net->layers[2], n);
}

static void shortcut_same(const network *na, const network *nd)
{
    for (int i = 0; i < 3; ++i) {
        size_t n = (size_t)na->batch * na->layers[i].outputs * sizeof(float);
        assert_memory_equal(na->layers[i].output, nd->layers[i].output, n);
        assert_memory_equal(na->layers[i].delta, nd->layers[i].delta, n);
    }
}

/* The fast [shortcut] against libdarknet's, bit for bit: from= two layers
 * back (the input and the added output differ) and from= the previous
 * layer (the input is the added output, and the two deltas written are one
 * buffer, which gets the delta twice); linear, leaky, relu and logistic. */
static void test_shortcut(void **state)
{
    (void)state;
    static const struct { int from; const char *act; int batch; } cs[] = {
        {-2, "linear", 3}, {-2, "leaky", 3}, {-1, "linear", 3}, {-1, "relu", 3},
        {-2, "logistic", 3}, {-1, "leaky", 40},   /* 4800 values: more than one row */
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k) {
        network *na = shortcut_net(cs[k].batch, cs[k].from, cs[k].act);
        network *nd = shortcut_net(cs[k].batch, cs[k].from, cs[k].act);
        layer *ld = &nd->layers[2];
        assert_true(sdnn_fast_shortcut_covered(ld));
        shortcut_fill(na, nd, 77 + k);
        size_t n = (size_t)nd->batch * ld->outputs;
        float *before = malloc(n * sizeof *before);
        assert_non_null(before);
        memcpy(before, nd->layers[1].delta, n * sizeof *before);
        shortcut_run(na, forward_shortcut_layer, backward_shortcut_layer);
        sdnn_fast_shortcut_forward(ld, nd->layers[1].output, nd->layers[2 + cs[k].from].output);
        sdnn_fast_shortcut_backward(ld, nd->layers[1].delta, nd->layers[2 + cs[k].from].delta);
        shortcut_same(na, nd);
        /* the checks can fail: with from=-1 the previous delta got the
         * delta twice, so adding it once would differ */
        if (cs[k].from == -1) {
            size_t once = 0, nz = 0;
            for (size_t i = 0; i < n; ++i) {
                if (ld->delta[i] == 0) continue;   /* relu's zeros add nothing */
                ++nz;
                once += before[i] + ld->delta[i] == nd->layers[1].delta[i];
            }
            assert_true(nz > n / 4);
            assert_true(once < nz / 2);
        }
        print_message("shortcut from=%d %s: output and 3 deltas (%zu values each) identical to "
                      "libdarknet's\n", cs[k].from, cs[k].act, n);
        free(before);
        sdnn_network_free(na);
        sdnn_network_free(nd);
    }
    /* what stays libdarknet's: another shape (from= a 2x larger layer) and
     * alpha or beta other than 1 */
    network *nm = tu_parse("[net]\nbatch=1\nwidth=8\nheight=8\nchannels=2\n\n"
                           "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n\n"
                           "[maxpool]\nsize=2\nstride=2\n\n"
                           "[shortcut]\nfrom=-2\nactivation=linear\n");
    assert_non_null(nm);
    assert_false(sdnn_fast_shortcut_covered(&nm->layers[2]));
    sdnn_network_free(nm);
    network *na = shortcut_net(1, -2, "linear");
    layer *l = &na->layers[2];
    assert_true(sdnn_fast_shortcut_covered(l));
    l->alpha = 0.5f;
    assert_false(sdnn_fast_shortcut_covered(l));
    l->alpha = 1.0f;
    l->beta = 2.0f;
    assert_false(sdnn_fast_shortcut_covered(l));
    assert_false(sdnn_fast_shortcut_covered(&na->layers[1]));
    sdnn_network_free(na);
}

/* The hooks put [shortcut] on the fast path only with cpu_conv=onednn, and
 * what they run is libdarknet's values; uninstall gives the pointers back. */
static void test_shortcut_hook(void **state)
{
    (void)state;
    if (!sdnn_conv_dnnl_built()) {
        print_message("this build has no oneDNN (libdnnl-dev): skipped\n");
        skip();
    }
    network *na = shortcut_net(2, -2, "leaky"), *nd = shortcut_net(2, -2, "leaky");
    network *nb = shortcut_net(2, -2, "leaky");
    assert_int_equal(sdnn_hooks_install(na, 0, SDNN_FIX_BN), SDNN_OK);
    assert_int_equal(sdnn_hooks_install(nd, 0, SDNN_FIX_BN | SDNN_HOOK_ONEDNN), SDNN_OK);
    assert_true(na->layers[2].forward == forward_shortcut_layer);
    assert_true(nd->layers[2].forward != forward_shortcut_layer);
    assert_true(nd->layers[2].backward != backward_shortcut_layer);
    assert_true(na->layers[2].backward != backward_shortcut_layer);   /* timed, not fast */
    shortcut_fill(nb, nd, 5150);
    shortcut_fill(na, nd, 5150);
    shortcut_run(nb, forward_shortcut_layer, backward_shortcut_layer);
    shortcut_run(nd, nd->layers[2].forward, nd->layers[2].backward);
    shortcut_run(na, na->layers[2].forward, na->layers[2].backward);
    shortcut_same(nb, nd);
    shortcut_same(nb, na);
    sdnn_hooks_uninstall(nd);
    assert_true(nd->layers[2].forward == forward_shortcut_layer);
    assert_true(nd->layers[2].backward == backward_shortcut_layer);
    sdnn_hooks_uninstall(na);
    sdnn_network_free(na);
    sdnn_network_free(nd);
    sdnn_network_free(nb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations_exact),
        cmocka_unit_test(test_bn_forward),
        cmocka_unit_test(test_bn_forward_can_fail),
        cmocka_unit_test(test_bias_forward_exact),
        cmocka_unit_test(test_bn_backward_exact),
        cmocka_unit_test(test_bn_backward_can_fail),
        cmocka_unit_test(test_bn_backward_darknet),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_maxpool_hook),
        cmocka_unit_test(test_shortcut),
        cmocka_unit_test(test_shortcut_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
