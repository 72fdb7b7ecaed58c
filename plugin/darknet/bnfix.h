/*
 * bnfix: batch norm's backward made the exact derivative of the forward
 * that ran (fix_bn_delta=1).
 *
 * Debian's libdarknet normalises a channel of N = batch x out_h x out_w
 * values in training as x_hat = (x - mean) / (sqrt(var) + 1e-6) with the
 * variance divided by N - 1, but its backward differentiates
 * (x - mean) / sqrt(var' + 1e-5) with the variance divided by N: the
 * gradient behind every batch-normalised layer is off by about 1/N (2% at
 * 8x8, batch 4 of 4x4 alike).  With g = scale * delta, the exact input
 * gradient of the forward is
 *
 *   dx_i = (g_i - mean(g)) / d  -  (x_i - mean) * sum_j g_j (x_j - mean) / (d^2 (N - 1) s)
 *
 * with s = sqrt(var), d = s + 1e-6 (the second term is 0 when s = 0).  The
 * bias and scale gradients (sum of delta, sum of delta * x_hat) are
 * Darknet's, already exact.  hooks.c runs this before the rest of the
 * layer's backward (weights gradient, input delta, the 1x1 fix), which stays
 * libdarknet's own: the layer is handed on with its activation gradient
 * already applied (activation LINEAR), batch_normalize 0 and its bias
 * gradient sent to a scratch buffer (it is accumulated here).
 */
#ifndef SDNN_BNFIX_H
#define SDNN_BNFIX_H

#include <darknet.h>
#include <math.h>
#include <stddef.h>

/* 1 when layer i's backward runs batch norm (a convolutional or connected
 * layer with batch_normalize=1, or a [batchnorm] layer) over at least 2
 * values per channel. */
int sdnn_bn_fix_applies(const network *net, int i);
int sdnn_bn_fix_count(const network *net);

/* The exact batch-norm backward of layer *l (a copy of net.layers[net.index]
 * as Darknet passes it), in place on l->delta, accumulating bias_updates
 * and scale_updates; first the layer's activation gradient (libdarknet's,
 * or the dialect's mish/swish).  Then *l is changed for the rest of its
 * backward: activation LINEAR, batch_normalize 0, bias_updates = bias_sink
 * (l->n floats for a convolution, l->outputs for a connected layer).
 * Returns the function to run the rest with: `next`, or libdarknet's own
 * backward where the dialect's wrapper would apply its activation again.
 * A [batchnorm] layer is finished here (its delta copied to net.delta):
 * returns NULL. */
void (*sdnn_bn_fix_backward(layer *l, network *net, float *bias_sink,
                            void (*next)(layer, network)))(layer, network);

/* The exact input delta in place: delta (dL/dy, before the scale) becomes
 * dL/dx for y = scale * x_hat + bias with x_hat of the forward above; x,
 * mean, var: the forward's, batch x channels x spatial as Darknet lays them
 * out; scales NULL means 1.  var_delta (channels floats, or NULL) gets
 * dL/dvar.  Sums in double. */
void sdnn_bn_exact_delta(float *delta, const float *x, const float *mean, const float *var,
                         const float *scales, int batch, int channels, int spatial,
                         float *var_delta);

/* The factors of that delta for one channel of n values (n >= 1), one
 * formula for bnfix.c and the fused loops of fastlayers.c: from
 * s0 = sum delta and s2 = sum delta (x - mean), dx = a delta + m - (x - mean) t;
 * *var_delta (when not NULL) gets dL/dvar. */
static inline void sdnn_bn_exact_coef(double s0, double s2, float var, double scale, size_t n,
                                      double *a, double *m, double *t, float *var_delta)
{
    double sd = sqrt((double)var);
    double den = sd + 1e-6;     /* the forward's sqrt(var) + .000001f */
    *a = scale / den;
    *m = -scale * s0 / den / (double)n;
    *t = sd > 0 && n > 1 ? scale * s2 / (den * den * (double)(n - 1) * sd) : 0.0;
    if (var_delta) *var_delta = (float)(sd > 0 ? -scale * s2 / (2.0 * den * den * sd) : 0.0);
}

/* Floats bias_sink needs for layer l. */
size_t sdnn_bn_fix_sink_floats(const layer *l);

#endif
