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

/* The exact transform of one layer's delta (see bnfix.h), with the bias and
 * scale gradients accumulated as Darknet does.  Sums in double. */
static void exact_bn(layer *l)
{
    size_t S = (size_t)l->out_h * (size_t)l->out_w;
    int C = (int)((size_t)l->outputs / S);
    size_t N = (size_t)l->batch * S;
    for (int c = 0; c < C; ++c) {
        double s0 = 0, s1 = 0, s2 = 0, mu = l->mean[c];
        for (int b = 0; b < l->batch; ++b) {
            size_t o = ((size_t)b * (size_t)C + (size_t)c) * S;
            for (size_t k = 0; k < S; ++k) {
                double d = l->delta[o + k];
                s0 += d;
                s1 += d * l->x_norm[o + k];
                s2 += d * ((double)l->x[o + k] - mu);
            }
        }
        l->bias_updates[c] += (float)s0;
        l->scale_updates[c] += (float)s1;
        double g = l->scales[c];
        double s = sqrt((double)l->variance[c]);
        double den = s + 1e-6;      /* the forward's sqrt(var) + .000001f */
        double a = g / den;
        double m = -g * s0 / den / (double)N;
        double t = s > 0 ? g * s2 / (den * den * (double)(N - 1) * s) : 0.0;
        for (int b = 0; b < l->batch; ++b) {
            size_t o = ((size_t)b * (size_t)C + (size_t)c) * S;
            for (size_t k = 0; k < S; ++k) {
                double xc = (double)l->x[o + k] - mu;
                l->delta[o + k] = (float)(a * l->delta[o + k] + m - xc * t);
            }
        }
    }
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
