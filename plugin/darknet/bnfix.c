/*
 * bnfix: see bnfix.h.
 */
#include "bnfix.h"
#include "dialect.h"

#include <math.h>
#include <string.h>

/* libdarknet's activation gradient (exported, not declared in darknet.h). */
void gradient_array(const float *x, const int n, const ACTIVATION a, float *delta);

int sdnn_bn_fix_applies(const network *net, int i)
{
    if (i < 0 || i >= net->n) return 0;
    const layer *l = &net->layers[i];
    if (!l->backward) return 0;
    int bn = l->type == BATCHNORM ||
             ((l->type == CONVOLUTIONAL || l->type == CONNECTED) && l->batch_normalize);
    if (!bn || !l->x || !l->x_norm || !l->mean || !l->variance) return 0;
    return (size_t)l->batch * (size_t)l->out_h * (size_t)l->out_w >= 2;
}

int sdnn_bn_fix_count(const network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) k += sdnn_bn_fix_applies(net, i);
    return k;
}

size_t sdnn_bn_fix_sink_floats(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->outputs : (size_t)l->n;
}

void sdnn_bn_exact_delta(float *delta, const float *x, const float *mean, const float *var,
                         const float *scales, int batch, int channels, int spatial,
                         float *var_delta)
{
    size_t S = (size_t)spatial, C = (size_t)channels, N = (size_t)batch * S;
    for (size_t c = 0; c < C; ++c) {
        double s0 = 0, s2 = 0, mu = mean[c];
        for (int b = 0; b < batch; ++b) {
            const float *d = delta + ((size_t)b * C + c) * S, *xs = x + ((size_t)b * C + c) * S;
            for (size_t k = 0; k < S; ++k) {
                s0 += d[k];
                s2 += d[k] * ((double)xs[k] - mu);
            }
        }
        double a, m, t;
        sdnn_bn_exact_coef(s0, s2, var[c], scales ? scales[c] : 1.0, N, &a, &m, &t,
                           var_delta ? &var_delta[c] : NULL);
        for (int b = 0; b < batch; ++b) {
            float *d = delta + ((size_t)b * C + c) * S;
            const float *xs = x + ((size_t)b * C + c) * S;
            for (size_t k = 0; k < S; ++k)
                d[k] = (float)(a * d[k] + m - ((double)xs[k] - mu) * t);
        }
    }
}

/* One layer: the bias and scale gradients as Darknet accumulates them (sum
 * of delta, sum of delta * x_hat), then the exact input delta. */
static void exact_bn(layer *l)
{
    int S = l->out_h * l->out_w;
    int C = (int)((size_t)l->outputs / (size_t)S);
    for (int c = 0; c < C; ++c) {
        double s0 = 0, s1 = 0;
        for (int b = 0; b < l->batch; ++b) {
            size_t o = ((size_t)b * (size_t)C + (size_t)c) * (size_t)S;
            for (int k = 0; k < S; ++k) {
                s0 += l->delta[o + k];
                s1 += (double)l->delta[o + k] * l->x_norm[o + k];
            }
        }
        l->bias_updates[c] += (float)s0;
        l->scale_updates[c] += (float)s1;
    }
    sdnn_bn_exact_delta(l->delta, l->x, l->mean, l->variance, l->scales, l->batch, C, S, NULL);
}

void (*sdnn_bn_fix_backward(layer *l, network *net, float *bias_sink,
                            void (*next)(layer, network)))(layer, network)
{
    size_t n = (size_t)l->outputs * (size_t)l->batch;
    if (l->type == BATCHNORM) {
        /* Darknet's [batchnorm] has no activation; its backward ends by
         * copying the delta into the input's. */
        exact_bn(l);
        if (net->delta) memcpy(net->delta, l->delta, n * sizeof *l->delta);
        return NULL;
    }
    void (*inner)(layer, network) = sdnn_dialect_act_grad(net, net->index, l->delta);
    gradient_array(l->output, (int)n, l->activation, l->delta);
    exact_bn(l);
    l->activation = LINEAR;
    l->batch_normalize = 0;
    l->bias_updates = bias_sink;
    return inner ? inner : next;
}
