/*
 * The exact batch-norm backward (fix_bn_delta=1; bnfix.h):
 * sdnn_bn_exact_delta against central differences of a double-precision
 * forward written here, x_hat = (x - mean) / (sqrt(var) + 1e-6) with var
 * over N - 1 as Debian's libdarknet computes it, and libdarknet's own
 * batch-norm backward (fix_bn_delta=0) off by about 1/N at small N.
 *
 * Error model of the check: the fix sums in double and rounds each result
 * to float once (half an ulp: 2^-24 relative); central differences in
 * double with step h = 1e-4 times the channel's deviation have a
 * truncation error below 1e-7 of the terms' magnitudes T_i = |g_i|/(s+e) +
 * |sum g|/(N(s+e)) + |variance term_i| (second derivative terms of order
 * (h/s)^2 = 1e-8) and rounding ~1e-16 / 1e-4.  Threshold per element:
 * 2^-23 |fd_i| + 1e-7 T_i, the worst ratio printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bnfix.h"

/* libdarknet's batch-norm backward pieces (exported, not in darknet.h). */
void mean_delta_cpu(float *delta, float *variance, int batch, int filters, int spatial,
                    float *mean_delta);
void variance_delta_cpu(float *x, float *delta, float *mean, float *variance, int batch,
                        int filters, int spatial, float *variance_delta);
void normalize_delta_cpu(float *x, float *mean, float *variance, float *mean_delta,
                         float *variance_delta, int batch, int filters, int spatial,
                         float *delta);

typedef struct case_t {
    int batch, channels, spatial;
    float *x, *w, *scales, *mean, *var;
} case_t;

static unsigned long long g_rng = 88172645463325252ULL;
static double urand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

/* L = sum_i w_i (scale_c x_hat_i), x_hat in double from the float x. */
static double loss(const case_t *t, const double *x)
{
    size_t C = (size_t)t->channels, S = (size_t)t->spatial;
    double n = (double)t->batch * (double)S, L = 0;
    for (size_t f = 0; f < C; ++f) {
        double mu = 0, v = 0;
        for (int b = 0; b < t->batch; ++b)
            for (size_t k = 0; k < S; ++k) mu += x[((size_t)b * C + f) * S + k];
        mu /= n;
        for (int b = 0; b < t->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                double d = x[((size_t)b * C + f) * S + k] - mu;
                v += d * d;
            }
        v /= n - 1;
        double den = sqrt(v) + 1e-6;
        for (int b = 0; b < t->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                size_t i = ((size_t)b * C + f) * S + k;
                L += t->w[i] * t->scales[f] * (x[i] - mu) / den;
            }
    }
    return L;
}

static case_t make_case(int batch, int channels, int spatial)
{
    case_t t = { batch, channels, spatial, NULL, NULL, NULL, NULL, NULL };
    size_t n = (size_t)batch * channels * spatial;
    t.x = malloc(n * sizeof *t.x);
    t.w = malloc(n * sizeof *t.w);
    t.scales = malloc((size_t)channels * sizeof *t.scales);
    t.mean = calloc((size_t)channels, sizeof *t.mean);
    t.var = calloc((size_t)channels, sizeof *t.var);
    assert_non_null(t.x);
    assert_non_null(t.w);
    assert_non_null(t.scales);
    assert_non_null(t.mean);
    assert_non_null(t.var);
    for (int f = 0; f < channels; ++f) {
        double off = 4 * urand() - 2, sd = 0.05 + 3 * urand();
        t.scales[f] = (float)(0.5 + urand());
        for (int b = 0; b < batch; ++b)
            for (int k = 0; k < spatial; ++k) {
                size_t i = ((size_t)b * channels + f) * spatial + k;
                t.x[i] = (float)(off + sd * (2 * urand() - 1));
                t.w[i] = (float)(2 * urand() - 1);
            }
    }
    /* The statistics as Darknet's forward keeps them (float). */
    size_t C = (size_t)channels, S = (size_t)spatial;
    for (size_t f = 0; f < C; ++f) {
        double mu = 0, v = 0, m = (double)batch * spatial;
        for (int b = 0; b < batch; ++b)
            for (size_t k = 0; k < S; ++k) mu += t.x[((size_t)b * C + f) * S + k];
        t.mean[f] = (float)(mu / m);
        for (int b = 0; b < batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                double d = t.x[((size_t)b * C + f) * S + k] - (double)t.mean[f];
                v += d * d;
            }
        t.var[f] = (float)(v / (m - 1));
    }
    return t;
}

static void free_case(case_t *t)
{
    free(t->x);
    free(t->w);
    free(t->scales);
    free(t->mean);
    free(t->var);
}

/* Central differences of loss(): fd[i] = dL/dx_i; tmag[i] = T_i. */
static void central(const case_t *t, double *fd, double *tmag)
{
    size_t C = (size_t)t->channels, S = (size_t)t->spatial;
    size_t n = (size_t)t->batch * C * S;
    double *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; ++i) x[i] = t->x[i];
    double m = (double)t->batch * S;
    for (size_t i = 0; i < n; ++i) {
        size_t f = (i / S) % C;
        double s = sqrt((double)t->var[f]), d = s + 1e-6;
        double h = 1e-4 * s, keep = x[i];
        x[i] = keep + h;
        double lp = loss(t, x);
        x[i] = keep - h;
        double lm = loss(t, x);
        x[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
        double sg = 0, sgx = 0;
        for (int b = 0; b < t->batch; ++b)
            for (size_t k = 0; k < S; ++k) {
                size_t j = ((size_t)b * C + f) * S + k;
                double g = (double)t->w[j] * t->scales[f];
                sg += fabs(g);
                sgx += fabs(g * (x[j] - t->mean[f]));
            }
        double g = (double)t->w[i] * t->scales[f];
        tmag[i] = fabs(g) / d + sg / (m * d) +
                  fabs(x[i] - t->mean[f]) * sgx / ((m - 1) * s * d * d);
    }
    free(x);
}

/* Worst |got - fd| / (2^-23 |fd| + 1e-7 T) and the relative error of the
 * whole tensor ||got - fd|| / ||fd||. */
static double worst_ratio(const float *got, const double *fd, const double *tmag, size_t n,
                          double *rel)
{
    double worst = 0, e2 = 0, f2 = 0;
    for (size_t i = 0; i < n; ++i) {
        double e = fabs((double)got[i] - fd[i]);
        double thr = ldexp(fabs(fd[i]), -23) + 1e-7 * tmag[i];
        if (e / thr > worst) worst = e / thr;
        e2 += e * e;
        f2 += fd[i] * fd[i];
    }
    *rel = sqrt(e2 / f2);
    return worst;
}

static void run_case(int batch, int channels, int spatial, double *fix_rel, double *dk_rel)
{
    case_t t = make_case(batch, channels, spatial);
    size_t n = (size_t)batch * channels * spatial;
    double *fd = malloc(n * sizeof *fd), *tm = malloc(n * sizeof *tm);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    float *md = malloc((size_t)channels * sizeof *md), *vd = malloc((size_t)channels * sizeof *vd);
    assert_non_null(fd);
    assert_non_null(tm);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(md);
    assert_non_null(vd);
    central(&t, fd, tm);
    memcpy(a, t.w, n * sizeof *a);
    sdnn_bn_exact_delta(a, t.x, t.mean, t.var, t.scales, batch, channels, spatial, NULL);
    double worst = worst_ratio(a, fd, tm, n, fix_rel);
    /* Darknet's: delta scaled by the scale, then its three functions. */
    for (size_t i = 0; i < n; ++i) b[i] = t.w[i] * t.scales[(i / (size_t)spatial) % (size_t)channels];
    mean_delta_cpu(b, t.var, batch, channels, spatial, md);
    variance_delta_cpu(t.x, b, t.mean, t.var, batch, channels, spatial, vd);
    normalize_delta_cpu(t.x, t.mean, t.var, md, vd, batch, channels, spatial, b);
    double dk_worst = worst_ratio(b, fd, tm, n, dk_rel);
    printf("  batch %d x %d channels x %d positions (N = %d): fixed rel %.3g, worst "
           "error/threshold %.3g; Darknet's rel %.3g (1/N = %.3g), error/threshold %.3g\n",
           batch, channels, spatial, batch * spatial, *fix_rel, worst, *dk_rel,
           1.0 / (batch * spatial), dk_worst);
    assert_true(worst <= 1.0);
    free(fd);
    free(tm);
    free(a);
    free(b);
    free(md);
    free(vd);
    free_case(&t);
}

/* The fixed backward equals central differences within the error model
 * at every N; Darknet's is off by up to the order of 1/N (over 0.1/N at
 * N = 4, under 2/N, and over 100 times the fix's error up to N = 16). */
static void test_exact_vs_central(void **state)
{
    (void)state;
    static const int shapes[][3] = { { 2, 3, 2 }, { 4, 2, 4 }, { 2, 4, 16 }, { 8, 2, 64 } };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
        double fr, dr;
        run_case(shapes[k][0], shapes[k][1], shapes[k][2], &fr, &dr);
        double N = (double)shapes[k][0] * shapes[k][2];
        assert_true(fr < 1e-6);
        /* Darknet's error is the variance term's share of the gradient
         * times 1/N: about 1/N at N = 4, a fraction of it above. */
        if (N <= 4) assert_true(dr > 0.1 / N);
        if (N <= 16) {
            assert_true(dr > 100 * fr);
            assert_true(dr < 2.0 / N);
        }
    }
}

/* A constant channel (var = 0): the limit, g / e centred, finite. */
static void test_constant_channel(void **state)
{
    (void)state;
    float x[4] = { 1.5f, 1.5f, 1.5f, 1.5f }, mean[1] = { 1.5f }, var[1] = { 0.0f };
    float d[4] = { 1e-6f, -2e-6f, 3e-6f, 0.0f }, vd[1] = { 7.0f };
    sdnn_bn_exact_delta(d, x, mean, var, NULL, 1, 1, 4, vd);
    double g0 = 0.5e-6;   /* mean of the deltas */
    assert_float_equal(vd[0], 0.0f, 0.0f);
    assert_true(fabs(d[0] - (1e-6 - g0) / 1e-6) < 1e-5);
    assert_true(fabs(d[3] - (0.0 - g0) / 1e-6) < 1e-5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_vs_central),
        cmocka_unit_test(test_constant_channel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
