/*
 * ops: the per-element arithmetic of the device layers, written once for
 * both sides.  nvcc compiles these as __host__ __device__ functions inside
 * the kernels; a plain C compiler compiles them as static inline functions,
 * so tests/gpu/formulas.c can check every formula and index map against
 * libdarknet's CPU layers on a machine without a GPU.
 *
 * The formulas follow what libdarknet's CPU layers compute (checked by that
 * test, not copied): batch norm divides by sqrt(var) + 1e-6 forward but by
 * sqrt(var + 1e-5) backward, its variance is the unbiased one, maxpool keeps
 * the first maximum of a window, and so on.  Products that Darknet writes as
 * a*b + c are kept as two roundings (SDNN_MUL/SDNN_ADD), so nvcc does not
 * contract them into one FMA: the update and the codecs then round exactly
 * as the host does.
 */
#ifndef SDNN_CUDA_OPS_H
#define SDNN_CUDA_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "splitmix.h"
#include "act_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define SDNN_HD static __host__ __device__ __forceinline__
#else
#define SDNN_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define SDNN_MUL(a, b) __fmul_rn((a), (b))
#define SDNN_ADD(a, b) __fadd_rn((a), (b))
#define SDNN_SUB(a, b) __fsub_rn((a), (b))
#else
#define SDNN_MUL(a, b) ((a) * (b))
#define SDNN_ADD(a, b) ((a) + (b))
#define SDNN_SUB(a, b) ((a) - (b))
#endif

/* Our own activation codes (Darknet's ACTIVATION enum is mapped onto them
 * in net.c, so the kernels never include darknet.h). */
enum sdnn_act {
    SDNN_ACT_LINEAR = 0,
    SDNN_ACT_LOGISTIC,
    SDNN_ACT_RELU,
    SDNN_ACT_RELIE,
    SDNN_ACT_RAMP,
    SDNN_ACT_TANH,
    SDNN_ACT_PLSE,
    SDNN_ACT_LEAKY,
    SDNN_ACT_ELU,
    SDNN_ACT_LOGGY,
    SDNN_ACT_STAIR,
    SDNN_ACT_HARDTAN,
    SDNN_ACT_LHTAN,
    SDNN_ACT_SELU,
    SDNN_ACT_MISH,      /* the fork's dialect: act_ops.h's formulas; the */
    SDNN_ACT_SWISH,     /* gradient takes the activation's input x (sdnn_dlayer.act_x) */
    SDNN_ACT_COUNT
};

SDNN_HD float sdnn_activate(float x, int a)
{
    switch (a) {
    case SDNN_ACT_LOGISTIC: return 1.0f / (1.0f + expf(-x));
    case SDNN_ACT_RELU: return x > 0 ? x : 0.0f;
    case SDNN_ACT_RELIE: return x > 0 ? x : 0.01f * x;
    case SDNN_ACT_RAMP: return (x > 0 ? x : 0.0f) + 0.1f * x;
    case SDNN_ACT_TANH: return tanhf(x);
    case SDNN_ACT_PLSE:
        if (x < -4) return 0.01f * (x + 4);
        if (x > 4) return 0.01f * (x - 4) + 1;
        return 0.125f * x + 0.5f;
    case SDNN_ACT_LEAKY: return x > 0 ? x : 0.1f * x;
    case SDNN_ACT_ELU: return x >= 0 ? x : expf(x) - 1;
    case SDNN_ACT_LOGGY: return tanhf(0.5f * x);   /* = 2/(1+e^-x) - 1, without the cancellation */
    case SDNN_ACT_STAIR: {
        int n = (int)floorf(x);
        if (n % 2 == 0) return floorf(x / 2);
        return (x - n) + floorf(x / 2);
    }
    case SDNN_ACT_HARDTAN: return x < -1 ? -1.0f : x > 1 ? 1.0f : x;
    case SDNN_ACT_LHTAN:
        if (x < 0) return 0.001f * x;
        if (x > 1) return 0.001f * (x - 1) + 1;
        return x;
    case SDNN_ACT_SELU: return x >= 0 ? 1.0507f * x : 1.75803124f * (expf(x) - 1);
    case SDNN_ACT_MISH: return sdnn_mishf(x);
    case SDNN_ACT_SWISH: return sdnn_swishf(x);
    default: return x;
    }
}

/* Derivative expressed through the activated value y, as Darknet does;
 * for mish and swish (not invertible) y is the activation's input x. */
SDNN_HD float sdnn_gradient(float y, int a)
{
    switch (a) {
    case SDNN_ACT_LOGISTIC: return (1 - y) * y;
    case SDNN_ACT_RELU: return y > 0 ? 1.0f : 0.0f;
    case SDNN_ACT_RELIE: return y > 0 ? 1.0f : 0.01f;
    case SDNN_ACT_RAMP: return (y > 0 ? 1.0f : 0.0f) + 0.1f;
    case SDNN_ACT_TANH: return 1 - y * y;
    case SDNN_ACT_PLSE: return (y < 0 || y > 1) ? 0.01f : 0.125f;
    case SDNN_ACT_LEAKY: return y > 0 ? 1.0f : 0.1f;
    case SDNN_ACT_ELU: return y >= 0 ? 1.0f : y + 1;
    case SDNN_ACT_LOGGY: {
        float t = (y + 1) / 2;
        return 2 * (1 - t) * t;
    }
    case SDNN_ACT_STAIR: return floorf(y) == y ? 0.0f : 1.0f;
    case SDNN_ACT_HARDTAN: return (y > -1 && y < 1) ? 1.0f : 0.0f;
    case SDNN_ACT_LHTAN: return (y > 0 && y < 1) ? 1.0f : 0.001f;
    case SDNN_ACT_SELU: return y >= 0 ? 1.0507f : y + 1.75803124f;   /* 1.0507 * 1.6732 */
    case SDNN_ACT_MISH: return sdnn_mish_gradf(y);
    case SDNN_ACT_SWISH: return sdnn_swish_gradf(y);
    default: return 1.0f;
    }
}

/* ---- batch norm (per element; the per-channel sums are reductions) ---- */

SDNN_HD float sdnn_bn_normalize(float x, float mean, float var)
{
    return (x - mean) / (sqrtf(var) + 0.000001f);
}

/* mean_delta = sum(delta) * bn_mean_delta_factor(var) */
SDNN_HD float sdnn_bn_mean_delta_factor(float var)
{
    return -1.0f / sqrtf(var + 0.00001f);
}

/* variance_delta = sum(delta * (x - mean)) * bn_var_delta_factor(var) */
SDNN_HD float sdnn_bn_var_delta_factor(float var)
{
    return -0.5f * powf(var + 0.00001f, -1.5f);
}

SDNN_HD float sdnn_bn_normalize_delta(float delta, float x, float mean, float var,
                                      float mean_delta, float var_delta, int m)
{
    return delta / sqrtf(var + 0.00001f) + var_delta * 2.0f * (x - mean) / m + mean_delta / m;
}

/* The input delta of one element: Darknet scales the delta by the
 * channel's scale, then normalises it. */
SDNN_HD float sdnn_bn_delta_elem(float delta, float scale, float x, float mean, float var,
                                 float mean_delta, float var_delta, int m)
{
    return sdnn_bn_normalize_delta(delta * scale, x, mean, var, mean_delta, var_delta, m);
}

/* The statistics of a channel of m = batch x positions values: mean = sum
 * of x times bn_mean_scale(m), variance = sum of bn_var_term(x, mean) times
 * bn_var_scale(m) (unbiased, as Darknet's variance_cpu). */
SDNN_HD float sdnn_bn_mean_scale(size_t m)
{
    return (float)(1.0 / (double)m);
}

SDNN_HD float sdnn_bn_var_scale(size_t m)
{
    return (float)(1.0 / ((double)m - 1));
}

SDNN_HD float sdnn_bn_var_term(float x, float mean)
{
    float d = x - mean;
    return d * d;
}

/* The channel of element i of a (batch, C, S) tensor. */
SDNN_HD int sdnn_bn_channel(size_t i, int C, int S)
{
    return (int)((i / (size_t)S) % (size_t)C);
}

/* rolling = .99 * rolling + .01 * batch value (Darknet's scal then axpy). */
SDNN_HD float sdnn_bn_rolling(float rolling, float batch_value)
{
    return SDNN_ADD(SDNN_MUL(rolling, 0.99f), SDNN_MUL(0.01f, batch_value));
}

/* out = x_norm * scale + bias */
SDNN_HD float sdnn_bn_scale_shift(float z, float scale, float bias)
{
    return SDNN_ADD(SDNN_MUL(z, scale), bias);
}

/* The three per-channel sums of the backward pass gather, per element:
 * delta (bias gradient), delta * x_norm (scale gradient) and
 * delta * (x - mean) (variance delta). */
SDNN_HD void sdnn_bn_backward_terms(float delta, float x_norm, float x, float mean, float t[3])
{
    t[0] = delta;
    t[1] = delta * x_norm;
    t[2] = delta * (x - mean);
}

/* The per-channel step after those sums (s[0..2] as sdnn_bn_backward_terms):
 * the gradients accumulate; Darknet scales delta by the scale before the
 * mean and variance deltas, here the sums are scaled instead. */
SDNN_HD void sdnn_bn_backward_channel(const float s[3], float scale, float var,
                                      float *bias_update, float *scale_update, float *mean_delta,
                                      float *var_delta)
{
    *bias_update += s[0];
    *scale_update += s[1];
    *mean_delta = (scale * s[0]) * sdnn_bn_mean_delta_factor(var);
    *var_delta = (scale * s[2]) * sdnn_bn_var_delta_factor(var);
}

/* fix_bn_delta=1 (plugin/darknet/bnfix.h): the exact derivative of the
 * forward that ran, x_hat = (x - mean) / d with d = sqrt(var) + 1e-6 and the
 * variance over m - 1, in the same shape as Darknet's step: the input delta
 * is delta * scale / d + var_delta * 2 (x - mean) / m + mean_delta / m with
 * mean_delta = -scale * s0 / d and var_delta = -scale * s2 * m /
 * (2 d^2 (m - 1) sqrt(var)) (0 when var is 0: every x - mean is 0). */
SDNN_HD void sdnn_bn_backward_channel_exact(const float s[3], float scale, float var, size_t m,
                                            float *bias_update, float *scale_update,
                                            float *mean_delta, float *var_delta)
{
    *bias_update += s[0];
    *scale_update += s[1];
    float sd = sqrtf(var), d = sd + 0.000001f;
    *mean_delta = -(scale * s[0]) / d;
    *var_delta = sd > 0 && m > 1 ? -(scale * s[2]) * ((float)m / (2.0f * d * d * (float)(m - 1) * sd))
                        : 0.0f;
}

SDNN_HD float sdnn_bn_delta_elem_exact(float delta, float scale, float x, float mean, float var,
                                       float mean_delta, float var_delta, int m)
{
    return delta * scale / (sqrtf(var) + 0.000001f) + var_delta * 2.0f * (x - mean) / m +
           mean_delta / m;
}

/* ---- maxpool ---------------------------------------------------------- */

typedef struct sdnn_pool_geom {
    int w, h, c;            /* input */
    int out_w, out_h;
    int size, stride, pad;  /* Darknet's pad: windows start at -pad/2 */
} sdnn_pool_geom;

/* Output element o (index into batch x c x out_h x out_w): its maximum and
 * the input index it came from (-1 when the window holds no valid input). */
SDNN_HD float sdnn_maxpool_elem(const float *in, const sdnn_pool_geom *g, int o, int *arg)
{
    int j = o % g->out_w;
    int i = (o / g->out_w) % g->out_h;
    int k = o / (g->out_w * g->out_h);        /* b * c + channel */
    int off = -g->pad / 2;
    float best = -3.402823466e+38f;
    int besti = -1;
    for (int n = 0; n < g->size; ++n) {
        for (int m = 0; m < g->size; ++m) {
            int y = off + i * g->stride + n;
            int x = off + j * g->stride + m;
            int valid = y >= 0 && y < g->h && x >= 0 && x < g->w;
            int idx = x + g->w * (y + g->h * k);
            float v = valid ? in[idx] : -3.402823466e+38f;
            if (v > best) {
                best = v;
                besti = idx;
            }
        }
    }
    *arg = besti;
    return best;
}

/* Input element t: the sum of the deltas of every output whose maximum came
 * from t (a gather, so no atomics and a fixed order). */
SDNN_HD float sdnn_maxpool_grad_elem(const float *delta, const int *indexes,
                                     const sdnn_pool_geom *g, int t)
{
    int x = t % g->w;
    int y = (t / g->w) % g->h;
    int k = t / (g->w * g->h);
    int off = -g->pad / 2;
    float sum = 0;
    /* outputs i with off + i*stride <= y <= off + i*stride + size - 1 */
    int ylo = y - off - (g->size - 1), yhi = y - off;
    int xlo = x - off - (g->size - 1), xhi = x - off;
    int i0 = ylo <= 0 ? 0 : (ylo + g->stride - 1) / g->stride;
    int j0 = xlo <= 0 ? 0 : (xlo + g->stride - 1) / g->stride;
    for (int i = i0; i < g->out_h && i * g->stride <= yhi; ++i) {
        for (int j = j0; j < g->out_w && j * g->stride <= xhi; ++j) {
            int o = j + g->out_w * (i + g->out_h * k);
            if (indexes[o] == t) sum += delta[o];
        }
    }
    return sum;
}

/* ---- avgpool (global) ------------------------------------------------------ */

/* Output o (image x channel): the mean of its hw inputs, summed in order. */
SDNN_HD float sdnn_avgpool_elem(const float *in, int hw, size_t o)
{
    const float *p = in + o * (size_t)hw;
    float s = 0;
    for (int i = 0; i < hw; ++i) s += p[i];
    return s / hw;
}

/* Input t's share of its output's delta. */
SDNN_HD float sdnn_avgpool_grad_elem(const float *delta, int hw, size_t t)
{
    return delta[t / (size_t)hw] / hw;
}

/* ---- convolution as im2col + gemm ------------------------------------------- */

/* One image's (channel group's) geometry: ch input channels of h x w, a
 * size x size kernel, Darknet's pad (already size/2 when pad=1), an
 * oh x ow output.  The column matrix has ch*size*size rows of oh*ow. */
typedef struct sdnn_conv_geom {
    int ch, h, w, size, stride, pad, oh, ow;
} sdnn_conv_geom;

/* col[(c*size*size + ki*size + kj) * (oh*ow) + oy*ow + ox], as Darknet's
 * im2col_cpu (0 outside the image). */
SDNN_HD float sdnn_im2col_elem(const float *im, const sdnn_conv_geom *g, size_t i)
{
    int ox = (int)(i % (size_t)g->ow);
    int oy = (int)((i / (size_t)g->ow) % (size_t)g->oh);
    int r = (int)(i / ((size_t)g->ow * g->oh));
    int kj = r % g->size, ki = (r / g->size) % g->size, cc = r / (g->size * g->size);
    int y = oy * g->stride - g->pad + ki, x = ox * g->stride - g->pad + kj;
    return (y >= 0 && y < g->h && x >= 0 && x < g->w) ? im[((size_t)cc * g->h + y) * g->w + x]
                                                     : 0.0f;
}

/* Image element i of col2im(col): the sum of every column entry that
 * im2col took from it (a gather in kernel-row, kernel-column order, so no
 * atomics and a fixed order; Darknet's col2im_cpu scatters). */
SDNN_HD float sdnn_col2im_elem(const float *col, const sdnn_conv_geom *g, size_t i)
{
    int x = (int)(i % (size_t)g->w), y = (int)((i / (size_t)g->w) % (size_t)g->h);
    int cc = (int)(i / ((size_t)g->w * g->h));
    float sum = 0;
    for (int ki = 0; ki < g->size; ++ki) {
        int ty = y + g->pad - ki;
        if (ty < 0 || ty % g->stride) continue;
        int oy = ty / g->stride;
        if (oy >= g->oh) continue;
        for (int kj = 0; kj < g->size; ++kj) {
            int tx = x + g->pad - kj;
            if (tx < 0 || tx % g->stride) continue;
            int ox = tx / g->stride;
            if (ox >= g->ow) continue;
            sum += col[(((size_t)cc * g->size + ki) * g->size + kj) * g->oh * g->ow +
                       (size_t)oy * g->ow + ox];
        }
    }
    return sum;
}

/* ---- shortcut ----------------------------------------------------------- */

/* Darknet's shortcut maps the `from` tensor (w1,h1,c1) onto the output
 * (w2,h2,c2) with a stride when it is larger and a sample step when it is
 * smaller, over the smaller of the two extents.  Element e of that
 * overlap: returns its output index and sets *from_index. */
typedef struct sdnn_shortcut_geom {
    int w1, h1, c1;     /* added tensor */
    int w2, h2, c2;     /* output */
    int stride, sample; /* >= 1 */
    int minw, minh, minc;
} sdnn_shortcut_geom;

SDNN_HD void sdnn_shortcut_geom_init(sdnn_shortcut_geom *g, int w1, int h1, int c1, int w2,
                                     int h2, int c2)
{
    g->w1 = w1; g->h1 = h1; g->c1 = c1;
    g->w2 = w2; g->h2 = h2; g->c2 = c2;
    g->stride = w1 / w2 < 1 ? 1 : w1 / w2;
    g->sample = w2 / w1 < 1 ? 1 : w2 / w1;
    g->minw = w1 < w2 ? w1 : w2;
    g->minh = h1 < h2 ? h1 : h2;
    g->minc = c1 < c2 ? c1 : c2;
}

SDNN_HD int sdnn_shortcut_map(const sdnn_shortcut_geom *g, int e, int *from_index)
{
    int i = e % g->minw;
    int j = (e / g->minw) % g->minh;
    int k = (e / (g->minw * g->minh)) % g->minc;
    int b = e / (g->minw * g->minh * g->minc);
    *from_index = i * g->stride + g->w1 * (j * g->stride + g->h1 * (k + g->c1 * b));
    return i * g->sample + g->w2 * (j * g->sample + g->h2 * (k + g->c2 * b));
}

/* out = s1 * out + s2 * add, two roundings as Darknet's shortcut_cpu. */
SDNN_HD float sdnn_shortcut_elem(float out, float add, float s1, float s2)
{
    return SDNN_ADD(SDNN_MUL(s1, out), SDNN_MUL(s2, add));
}

/* ---- upsample ---------------------------------------------------------- */

/* Output element o of a stride-s nearest upsampling of (w,h,c): the input
 * index it copies. */
SDNN_HD int sdnn_upsample_src(int o, int w, int h, int c, int s)
{
    int ow = w * s, oh = h * s;
    int i = o % ow;
    int j = (o / ow) % oh;
    int k = (o / (ow * oh)) % c;
    int b = o / (ow * oh * c);
    return b * w * h * c + k * w * h + (j / s) * w + i / s;
}

/* Input element t of the backward pass: acc (the delta it holds) plus scale
 * times the delta of every output copied from it, rows then columns. */
SDNN_HD float sdnn_upsample_grad_elem(const float *delta, int w, int h, int s, float scale,
                                      size_t t, float acc)
{
    int x = (int)(t % (size_t)w), y = (int)((t / (size_t)w) % (size_t)h);
    size_t plane = t / ((size_t)w * h);           /* b*c + k */
    const float *d = delta + plane * (size_t)w * h * s * s;
    for (int dy = 0; dy < s; ++dy)
        for (int dx = 0; dx < s; ++dx)
            acc += scale * d[(size_t)(y * s + dy) * w * s + x * s + dx];
    return acc;
}

/* ---- softmax ------------------------------------------------------------- */

/* One row of n values, as Darknet's softmax(): the largest value, then
 * e = exp(x/t - largest/t) summed in index order, then each e / sum. */
SDNN_HD void sdnn_softmax_row(const float *x, int n, float temp, float *y)
{
    float largest = -3.402823466e+38f, sum = 0;
    for (int i = 0; i < n; ++i) largest = x[i] > largest ? x[i] : largest;
    for (int i = 0; i < n; ++i) {
        float e = expf(x[i] / temp - largest / temp);
        sum += e;
        y[i] = e;
    }
    for (int i = 0; i < n; ++i) y[i] /= sum;
}

/* Softmax cross-entropy of one element (Darknet's softmax_x_ent_cpu): the
 * loss, and the delta t - p. */
SDNN_HD float sdnn_xent_elem(float p, float t, float *delta)
{
    *delta = t - p;
    return t != 0 ? -logf(p) : 0.0f;
}

/* ---- losses --------------------------------------------------------------- */

enum sdnn_cost { SDNN_COST_SSE = 0, SDNN_COST_L1, SDNN_COST_SMOOTH, SDNN_COST_MASKED };

/* Error and delta of one element for prediction p and truth t. */
SDNN_HD float sdnn_cost_elem(int type, float p, float t, float *delta)
{
    float diff = t - p;
    if (type == SDNN_COST_L1) {
        *delta = diff > 0 ? 1.0f : -1.0f;
        return fabsf(diff);
    }
    if (type == SDNN_COST_SMOOTH) {
        float a = fabsf(diff);
        if (a < 1) {
            *delta = diff;
            return diff * diff;
        }
        *delta = diff < 0 ? 1.0f : -1.0f;
        return 2 * a - 1;
    }
    *delta = diff;
    return diff * diff;
}

/* Darknet's SECRET_NUM: a masked cost ignores truths equal to it. */
#define SDNN_COST_SECRET (-1234.0f)

/* The cost layer's element: as sdnn_cost_elem, and for the masked cost the
 * prediction is set to SECRET_NUM where the truth is (Darknet writes that
 * into its input), then the squared error. */
SDNN_HD float sdnn_cost_layer_elem(int type, float *pred, float t, float *delta)
{
    float p = *pred;
    int kind = type;
    if (type == SDNN_COST_MASKED) {
        if (t == SDNN_COST_SECRET) *pred = p = SDNN_COST_SECRET;
        kind = SDNN_COST_SSE;
    }
    return sdnn_cost_elem(kind, p, t, delta);
}

/* ---- dropout ------------------------------------------------------------- */

/* The draw of element i in forward pass `pass` of a layer seeded `seed`: a
 * splitmix64 finaliser over the three, 24 bits into [0, 1).  Counter-based,
 * so any thread (or the simulation) draws the same value for i. */
SDNN_HD float sdnn_dropout_uniform(uint64_t seed, uint64_t pass, uint64_t i)
{
    uint64_t z = sdnn_splitmix64_mix(seed ^ (pass * SDNN_SPLITMIX_GOLDEN) ^ ((i + 1) * 0xc2b2ae3d27d4eb4full));
    return (float)(z >> 40) * 0x1p-24f;
}

/* Forward and backward alike: dropped (r < p) is 0, kept is scaled. */
SDNN_HD float sdnn_dropout_elem(float x, float r, float p, float scale)
{
    return r < p ? 0.0f : x * scale;
}

/* ---- region ---------------------------------------------------------------- */

/* Darknet's GPU region backward multiplies the delta by the logistic
 * gradient on x, y, the extra coordinates and (without background) the
 * objectness of every anchor.  r: the index within one image's outputs,
 * wh the cells, per anchor coords + classes + 1 planes. */
SDNN_HD int sdnn_region_logistic(int r, int wh, int coords, int classes, int background)
{
    int e = (r / wh) % (coords + classes + 1);
    return e < 2 || (coords > 4 && e >= 4 && e < coords) || (e == coords && !background);
}

/* ---- update ------------------------------------------------------------- */

/* Darknet's SGD step on one weight w with its update buffer u:
 *   u += -decay*batch * w   (weights only: decay_scale = -decay*batch, else 0)
 *   w += lr/batch * u
 *   u *= momentum
 * Each line rounds like the host's axpy/scal. */
SDNN_HD void sdnn_sgd_elem(float *w, float *u, float decay_scale, float rate, float momentum)
{
    float uu = *u;
    if (decay_scale != 0) uu = SDNN_ADD(uu, SDNN_MUL(decay_scale, *w));
    *w = SDNN_ADD(*w, SDNN_MUL(rate, uu));
    *u = SDNN_MUL(momentum, uu);
}

#ifdef __cplusplus
}
#endif

#endif
