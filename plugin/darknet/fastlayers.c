/*
 * fastlayers: see fastlayers.h.  Plain loops gcc -O3 vectorises: the
 * double sums keep LANES independent accumulators (a reduction in one
 * accumulator would need reassociation, which -O3 does not do).
 */
#include "fastlayers.h"
#include "bnfix.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* libdarknet (exported, not declared in darknet.h). */
void activate_array(float *x, const int n, const ACTIVATION a);
void gradient_array(const float *x, const int n, const ACTIVATION a, float *delta);
void forward_batchnorm_layer(layer l, network net);
void backward_bias(float *bias_updates, float *delta, int batch, int n, int size);
void backward_batchnorm_layer(layer l, network net);

#define LANES 8

int sdnn_fast_act_fused(ACTIVATION a) { return a == LINEAR || a == LEAKY || a == RELU; }

void sdnn_fast_activate(float *restrict o, size_t n, ACTIVATION a)
{
    switch (a) {
    case LINEAR:
        return;
    case LEAKY:   /* (x > 0) ? x : .1 * x, the product in double; the select on
                   * the bits, which gcc vectorises (a float select of a
                   * double product it does not, without AVX) */
        for (size_t i = 0; i < n; ++i) {
            float v = o[i], p = (float)(0.1 * (double)v);
            uint32_t a, b;
            memcpy(&a, &v, sizeof a);
            memcpy(&b, &p, sizeof b);
            uint32_t m = -(uint32_t)(v > 0);
            a = (a & m) | (b & ~m);
            memcpy(&o[i], &a, sizeof a);
        }
        return;
    case RELU:    /* x * (x > 0) as Debian's -Ofast build runs it: a select (-0, NaN -> 0) */
        for (size_t i = 0; i < n; ++i) o[i] = o[i] > 0 ? o[i] : 0.0f;
        return;
    default:
        for (size_t i = 0; i < n; i += INT_MAX)
            activate_array(o + i, (int)(n - i < INT_MAX ? n - i : INT_MAX), a);
    }
}

void sdnn_fast_gradient(const float *restrict o, size_t n, ACTIVATION a, float *restrict d)
{
    switch (a) {
    case LINEAR:   /* d * 1 */
        return;
    case LEAKY:    /* (x > 0) ? 1 : .1, as a float */
        for (size_t i = 0; i < n; ++i) {
            float g = o[i] > 0 ? 1.0f : 0.1f;
            d[i] = d[i] * g;
        }
        return;
    case RELU:
        for (size_t i = 0; i < n; ++i) {
            float g = o[i] > 0 ? 1.0f : 0.0f;
            d[i] = d[i] * g;
        }
        return;
    default:
        for (size_t i = 0; i < n; i += INT_MAX)
            gradient_array(o + i, (int)(n - i < INT_MAX ? n - i : INT_MAX), a, d + i);
    }
}

static double sum_d(const float *restrict x, size_t n)
{
    double acc[LANES] = {0};
    size_t k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int j = 0; j < LANES; ++j) acc[j] += x[k + j];
    double s = 0;
    for (; k < n; ++k) s += x[k];
    for (int j = 0; j < LANES; ++j) s += acc[j];
    return s;
}

static double sumsq_dev_d(const float *restrict x, size_t n, double mu)
{
    double acc[LANES] = {0};
    size_t k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int j = 0; j < LANES; ++j) {
            double e = (double)x[k + j] - mu;
            acc[j] += e * e;
        }
    double s = 0;
    for (; k < n; ++k) {
        double e = (double)x[k] - mu;
        s += e * e;
    }
    for (int j = 0; j < LANES; ++j) s += acc[j];
    return s;
}

/* out = scale (x - mean) inv + bias over one row, x_norm too when not NULL. */
static void normalize_row(const float *restrict x, float *restrict xn, float *restrict out,
                          size_t n, float mean, float inv, float scale, float bias)
{
    if (xn) {
        for (size_t k = 0; k < n; ++k) {
            float v = (x[k] - mean) * inv;
            xn[k] = v;
            out[k] = v * scale + bias;
        }
    } else {
        for (size_t k = 0; k < n; ++k) out[k] = (x[k] - mean) * inv * scale + bias;
    }
}

void sdnn_fast_conv_forward_tail(const layer *l, const network *net)
{
    size_t S = (size_t)l->out_h * (size_t)l->out_w, C = (size_t)l->out_c, B = (size_t)l->batch;
    size_t N = B * S;
    ACTIVATION act = l->activation;
    if (!l->batch_normalize) {
        for (size_t b = 0; b < B; ++b)
            for (size_t c = 0; c < C; ++c) {
                float *restrict o = l->output + (b * C + c) * S;
                float bias = l->biases[c];
                for (size_t k = 0; k < S; ++k) o[k] += bias;
                sdnn_fast_activate(o, S, act);
            }
        return;
    }
    if (net->train && N < 2) {
        /* one value per channel: libdarknet's own (its variance is 0/0) */
        forward_batchnorm_layer(*l, *net);
        sdnn_fast_activate(l->output, N * C, act);
        return;
    }
    for (size_t c = 0; c < C; ++c) {
        float mean, var;
        if (net->train) {
            double s = 0;
            for (size_t b = 0; b < B; ++b) {
                size_t o = (b * C + c) * S;
                memcpy(l->x + o, l->output + o, S * sizeof(float));
                s += sum_d(l->x + o, S);
            }
            mean = (float)(s / (double)N);
            double q = 0;
            for (size_t b = 0; b < B; ++b) q += sumsq_dev_d(l->x + (b * C + c) * S, S, mean);
            var = (float)(q / (double)(N - 1));
            l->mean[c] = mean;
            l->variance[c] = var;
            /* scal_cpu(.99) then axpy_cpu(.01), in float */
            l->rolling_mean[c] *= 0.99f;
            l->rolling_mean[c] += 0.01f * mean;
            l->rolling_variance[c] *= 0.99f;
            l->rolling_variance[c] += 0.01f * var;
        } else {
            mean = l->rolling_mean[c];
            var = l->rolling_variance[c];
            for (size_t b = 0; b < B; ++b) {
                size_t o = (b * C + c) * S;
                memcpy(l->x + o, l->output + o, S * sizeof(float));
            }
        }
        float inv = (float)(1.0 / (sqrt((double)var) + (double)0.000001f));
        float scale = l->scales[c], bias = l->biases[c];
        for (size_t b = 0; b < B; ++b) {
            size_t o = (b * C + c) * S;
            normalize_row(l->x + o, net->train ? l->x_norm + o : NULL, l->output + o, S, mean,
                          inv, scale, bias);
            sdnn_fast_activate(l->output + o, S, act);
        }
    }
}

/* s0 += sum d, s1 += sum d xn, s2 += sum d (x - mu) over one row. */
static void bn_sums_row(const float *restrict d, const float *restrict xn,
                        const float *restrict x, size_t n, double mu, double s[3])
{
    double a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0};
    size_t k = 0;
    for (; k + LANES <= n; k += LANES)
        for (int j = 0; j < LANES; ++j) {
            double dj = d[k + j];
            a0[j] += dj;
            a1[j] += dj * xn[k + j];
            a2[j] += dj * ((double)x[k + j] - mu);
        }
    for (; k < n; ++k) {
        double dk = d[k];
        s[0] += dk;
        s[1] += dk * xn[k];
        s[2] += dk * ((double)x[k] - mu);
    }
    for (int j = 0; j < LANES; ++j) {
        s[0] += a0[j];
        s[1] += a1[j];
        s[2] += a2[j];
    }
}

static void bn_delta_row(float *restrict d, const float *restrict x, size_t n, double mu,
                         double a, double m, double t)
{
    for (size_t k = 0; k < n; ++k) d[k] = (float)(a * d[k] + m - ((double)x[k] - mu) * t);
}

void sdnn_fast_conv_backward_head(const layer *l, const network *net, int bn_exact)
{
    size_t S = (size_t)l->out_h * (size_t)l->out_w, C = (size_t)l->out_c, B = (size_t)l->batch;
    size_t N = B * S;
    ACTIVATION act = l->activation;
    if (!l->batch_normalize) {
        /* libdarknet's backward_bias row by row, while the row is in cache:
         * its sum's order is its -Ofast build's, so it stays its own */
        for (size_t b = 0; b < B; ++b)
            for (size_t c = 0; c < C; ++c) {
                size_t o = (b * C + c) * S;
                sdnn_fast_gradient(l->output + o, S, act, l->delta + o);
                backward_bias(l->bias_updates + c, l->delta + o, 1, 1, (int)S);
            }
        return;
    }
    if (!bn_exact || N < 2) {
        sdnn_fast_gradient(l->output, N * C, act, l->delta);
        backward_batchnorm_layer(*l, *net);
        return;
    }
    for (size_t c = 0; c < C; ++c) {
        double s[3] = {0, 0, 0}, mu = l->mean[c];
        for (size_t b = 0; b < B; ++b) {
            size_t o = (b * C + c) * S;
            sdnn_fast_gradient(l->output + o, S, act, l->delta + o);
            bn_sums_row(l->delta + o, l->x_norm + o, l->x + o, S, mu, s);
        }
        l->bias_updates[c] += (float)s[0];
        l->scale_updates[c] += (float)s[1];
        double a, m, t;
        sdnn_bn_exact_coef(s[0], s[2], l->variance[c], l->scales ? l->scales[c] : 1.0, N, &a, &m,
                           &t, NULL);
        for (size_t b = 0; b < B; ++b) {
            size_t o = (b * C + c) * S;
            bn_delta_row(l->delta + o, l->x + o, S, mu, a, m, t);
        }
    }
}

/* ---- [maxpool] ---------------------------------------------------------- */

int sdnn_fast_maxpool_covered(const layer *l)
{
    return l->type == MAXPOOL && l->size == 2 && (l->stride == 1 || l->stride == 2) &&
           l->indexes && l->out_c == l->c;
}

/* One output of a window that may reach outside the input (libdarknet's
 * loop: cells outside count as -FLT_MAX and never win). */
static void pool_edge(const float *in, int H, int W, int base, int h0, int w0, float *out,
                      int *idx)
{
    float m = -FLT_MAX;
    int id = -1;
    for (int n = 0; n < 2; ++n)
        for (int q = 0; q < 2; ++q) {
            int y = h0 + n, x = w0 + q;
            if (y < 0 || y >= H || x < 0 || x >= W) continue;
            float v = in[y * W + x];
            if (v > m) {
                m = v;
                id = base + y * W + x;
            }
        }
    *out = m;
    *idx = id;
}

void sdnn_fast_maxpool_forward(const layer *l, const float *input)
{
    int H = l->h, W = l->w, C = l->c, OH = l->out_h, OW = l->out_w, st = l->stride;
    int off = -l->pad / 2;
    for (int b = 0; b < l->batch; ++b)
        for (int k = 0; k < C; ++k) {
            int base = (b * C + k) * H * W;   /* libdarknet's int index */
            const float *in = input + base;
            float *out = l->output + (size_t)(b * C + k) * (size_t)OH * (size_t)OW;
            int *idx = l->indexes + (size_t)(b * C + k) * (size_t)OH * (size_t)OW;
            for (int i = 0; i < OH; ++i) {
                int h0 = off + i * st;
                float *orow = out + (size_t)i * OW;
                int *irow = idx + (size_t)i * OW;
                if (h0 < 0 || h0 + 1 >= H) {
                    for (int j = 0; j < OW; ++j)
                        pool_edge(in, H, W, base, h0, off + j * st, orow + j, irow + j);
                    continue;
                }
                const float *r0 = in + (size_t)h0 * W, *r1 = r0 + W;
                int i0 = base + h0 * W;
                for (int j = 0; j < OW; ++j) {
                    int w0 = off + j * st;
                    if (w0 < 0 || w0 + 1 >= W) {
                        pool_edge(in, H, W, base, h0, w0, orow + j, irow + j);
                        continue;
                    }
                    /* the window's cells in libdarknet's order, strict >:
                     * the first maximum wins, NaN never does (libdarknet's
                     * source; its -Ofast build's result on a window with a
                     * NaN and a number is the compiler's, see fastlayers.h) */
                    float m = -FLT_MAX, v;
                    int id = -1;
                    v = r0[w0];
                    id = v > m ? i0 + w0 : id;
                    m = v > m ? v : m;
                    v = r0[w0 + 1];
                    id = v > m ? i0 + w0 + 1 : id;
                    m = v > m ? v : m;
                    v = r1[w0];
                    id = v > m ? i0 + W + w0 : id;
                    m = v > m ? v : m;
                    v = r1[w0 + 1];
                    id = v > m ? i0 + W + w0 + 1 : id;
                    m = v > m ? v : m;
                    orow[j] = m;
                    irow[j] = id;
                }
            }
        }
}

/* ---- [shortcut] --------------------------------------------------------- */

/* Rows of this many values: the add, the activation and the two delta sums
 * of one row run while it is in cache. */
#define SC_ROW 4096

int sdnn_fast_shortcut_covered(const layer *l)
{
    return l->type == SHORTCUT && l->w == l->out_w && l->h == l->out_h && l->c == l->out_c &&
           l->alpha == 1.0f && l->beta == 1.0f;
}

void sdnn_fast_shortcut_forward(const layer *l, const float *input, const float *add)
{
    size_t n = (size_t)l->batch * (size_t)l->outputs;
    for (size_t r = 0; r < n; r += SC_ROW) {
        size_t m = n - r < SC_ROW ? n - r : SC_ROW;
        const float *restrict a = input + r, *restrict b = add + r;
        float *restrict o = l->output + r;
        /* libdarknet: o = a, then o = 1 * o + 1 * b (both products exact) */
        for (size_t i = 0; i < m; ++i) o[i] = a[i] + b[i];
        sdnn_fast_activate(o, m, l->activation);
    }
}

static void add_row(float *restrict dst, const float *restrict src, size_t m)
{
    for (size_t i = 0; i < m; ++i) dst[i] += src[i];
}

void sdnn_fast_shortcut_backward(const layer *l, float *in_delta, float *from_delta)
{
    size_t n = (size_t)l->batch * (size_t)l->outputs;
    for (size_t r = 0; r < n; r += SC_ROW) {
        size_t m = n - r < SC_ROW ? n - r : SC_ROW;
        float *d = l->delta + r;
        sdnn_fast_gradient(l->output + r, m, l->activation, d);
        /* in_delta and from_delta may be one buffer: one add each, in
         * libdarknet's order (axpy with alpha 1, then shortcut_cpu with
         * 1 x its value + beta 1 x the delta) */
        if (in_delta) add_row(in_delta + r, d, m);
        add_row(from_delta + r, d, m);
    }
}
