/*
 * fastlayers: the work of a cpu_conv=onednn step that is not convolution
 * a convolutional layer's batch norm, bias and
 * activation around the oneDNN convolution, their backward, [maxpool]
 * forward of size 2 (stride 1 or 2), and [shortcut] between layers of one
 * shape.  Used only on the cpu_conv=onednn path (conv_dnnl.c, and hooks.c
 * for maxpool and shortcut); cpu_conv=darknet runs
 * libdarknet's functions, untouched.
 *
 * libdarknet runs each of these as separate passes over the whole output
 * (copy to x, mean, variance, normalise, copy to x_norm, scale, bias, then
 * the activation through a switch per element).  Here one channel is done
 * at a time (batch x out_h x out_w values, which stay in cache between the
 * passes), the statistics accumulate in double, and the normalisation, the
 * scale, the bias and the activation are one pass that also writes x and
 * x_norm.  Formulas (Debian's libdarknet, 2018):
 *
 *   mean = sum x / N, var = sum (x - mean)^2 / (N - 1)   (N = batch x out_h x out_w)
 *   x_norm = (x - mean) / (sqrt(var) + 1e-6f)
 *   rolling = .99 rolling + .01 stat   (float, as scal_cpu then axpy_cpu)
 *   out = act(scale x_norm + bias)
 *
 * Inference (net.train 0) normalises with the rolling statistics, as
 * libdarknet.  The activations LINEAR, LEAKY and RELU run in the fused loops
 * with libdarknet's per-element formulas bit for bit; any other runs
 * libdarknet's activate_array/gradient_array on each row while it is in
 * cache (the same values).
 *
 * Backward: the activation gradient, then with bn_exact (fix_bn_delta=1)
 * the bias and scale gradients and the exact input delta of bnfix.h from one
 * pass of sums in double per channel and one pass of writes; without it
 * libdarknet's backward_batchnorm_layer after the activation gradient.  A
 * layer without batch norm gets its bias gradient right after the activation
 * gradient of each row (libdarknet's backward_bias on the row, bit for bit).
 *
 * Debian builds libdarknet with -Ofast: its float sums are vectorised in an
 * order of the compiler's, and its behaviour on NaN is undefined (its
 * maxpool's output and index can disagree on a window holding a NaN and a
 * number).  The fast path follows libdarknet's source where the build's
 * result is not reproducible: NaN never wins a maxpool window (a window of
 * NaN only keeps index -1, as libdarknet's, for the hooks' check); relu is
 * the build's select (x > 0 ? x : 0).
 *
 * [maxpool]'s backward stays libdarknet's: it is already one scatter loop
 * over the indexes, which is all a fast version would be.
 */
#ifndef SDNN_FASTLAYERS_H
#define SDNN_FASTLAYERS_H

#include <darknet.h>

/* 1 when activation a runs in the fused loops (else libdarknet's per row). */
int sdnn_fast_act_fused(ACTIVATION a);

/* out[i] = a(out[i]) and delta[i] *= a'(out[i]) for n values, libdarknet's
 * formulas bit for bit (any activation). */
void sdnn_fast_activate(float *out, size_t n, ACTIVATION a);
void sdnn_fast_gradient(const float *out, size_t n, ACTIVATION a, float *delta);

/* A convolutional layer after its convolution wrote l->output: batch norm
 * (training when net->train, else the rolling statistics) or the bias, then
 * the activation; fills l->x and (training) l->x_norm, l->mean,
 * l->variance, and updates the rolling statistics, as libdarknet's
 * forward_batchnorm_layer. */
void sdnn_fast_conv_forward_tail(const layer *l, const network *net);

/* A convolutional layer's backward before its convolution: the activation
 * gradient, the bias gradient, and with batch norm the scale gradient and
 * the input delta (bn_exact: the exact derivative, bnfix.h; else
 * libdarknet's backward_batchnorm_layer(*l, *net)). */
void sdnn_fast_conv_backward_head(const layer *l, const network *net, int bn_exact);

/* 1 when [maxpool] layer l has the fast path (size 2, stride 1 or 2). */
int sdnn_fast_maxpool_covered(const layer *l);
/* libdarknet's forward_maxpool_layer for a covered layer: output and
 * indexes equal (first maximum in row-major window order wins, windows
 * offset by -pad/2, the cells outside the input never chosen, index -1
 * where no value exceeds -FLT_MAX, e.g. NaN). */
void sdnn_fast_maxpool_forward(const layer *l, const float *input);

/* [shortcut] (Debian's libdarknet: one from= layer, alpha and beta, an
 * activation).  libdarknet's forward is three passes (copy the input,
 * shortcut_cpu's strided add, activate_array calling activate per element)
 * and its backward three (gradient_array per element, axpy into the
 * input's delta, shortcut_cpu into the from= layer's delta).  1 when layer
 * l has the fast path: the from= layer's output has the shape of the input
 * (then shortcut_cpu's strides are 1 and its loop is elementwise) and
 * alpha = beta = 1 (every cfg's; then each product is exact and the sums
 * are the same roundings as libdarknet's, so the values are equal bit for
 * bit). */
int sdnn_fast_shortcut_covered(const layer *l);
/* l->output = act(input + add), one pass per row (the activation while the
 * row is in cache; linear: none). */
void sdnn_fast_shortcut_forward(const layer *l, const float *input, const float *add);
/* l->delta *= act'(l->output); then in_delta += l->delta (NULL: none) and
 * from_delta += l->delta, in this order (the two may be one buffer, the
 * from= layer being the previous one: then it gets both, as libdarknet's). */
void sdnn_fast_shortcut_backward(const layer *l, float *in_delta, float *from_delta);

#endif
