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
#include <stdint.h>

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
    default: return x;
    }
}

/* Derivative expressed through the activated value y, as Darknet does. */
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

#endif
