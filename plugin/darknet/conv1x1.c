/*
 * conv1x1: see conv1x1.h.  The matrices are Darknet's: for image b and
 * group g the weights are m x k (m = filters / groups, k = channels /
 * groups), the gathered input k x N (N = out_h x out_w) and the output
 * m x N, so the gemm calls are the ones libdarknet makes for size > 1 with
 * im2col's column matrix in place of the input.
 */
#include "conv1x1.h"
#include "blas.h"

#include <stddef.h>
#include <string.h>

/* libdarknet's (exported, not declared in darknet.h). */
void forward_convolutional_layer(layer l, network net);
void backward_convolutional_layer(layer l, network net);
void forward_batchnorm_layer(layer l, network net);
void backward_batchnorm_layer(layer l, network net);
void add_bias(float *output, float *biases, int batch, int n, int size);
void backward_bias(float *bias_updates, float *delta, int batch, int n, int size);
void activate_array(float *x, const int n, const ACTIVATION a);
void gradient_array(const float *x, const int n, const ACTIVATION a, float *delta);

int sdnn_conv1x1_strided(const layer *l)
{
    return l->type == CONVOLUTIONAL && l->size == 1 && (l->stride != 1 || l->pad != 0) &&
           !l->binary && !l->xnor && l->groups >= 1 && l->c % l->groups == 0 &&
           l->n % l->groups == 0;
}

/* The k x N matrix the output reads: column (oy, ox) of channel ch is the
 * input pixel (oy * stride - pad, ox * stride - pad), 0 outside. */
static void gather(const layer *l, const float *im, int k, float *cols)
{
    const int ow = l->out_w, oh = l->out_h, s = l->stride, p = l->pad;
    const size_t plane = (size_t)l->h * (size_t)l->w, n = (size_t)oh * (size_t)ow;
    for (int ch = 0; ch < k; ++ch) {
        const float *src = im + (size_t)ch * plane;
        float *dst = cols + (size_t)ch * n;
        for (int oy = 0; oy < oh; ++oy) {
            int iy = oy * s - p;
            float *row = dst + (size_t)oy * (size_t)ow;
            if (iy < 0 || iy >= l->h) {
                memset(row, 0, (size_t)ow * sizeof *row);
                continue;
            }
            for (int ox = 0; ox < ow; ++ox) {
                int ix = ox * s - p;
                row[ox] = ix >= 0 && ix < l->w ? src[(size_t)iy * (size_t)l->w + (size_t)ix] : 0;
            }
        }
    }
}

/* The transpose of gather, adding: each column goes back to its input
 * pixel (a 1x1 window reads each pixel at most once, so nothing collides);
 * columns on padding have no pixel. */
static void scatter_add(const layer *l, const float *cols, int k, float *imd)
{
    const int ow = l->out_w, oh = l->out_h, s = l->stride, p = l->pad;
    const size_t plane = (size_t)l->h * (size_t)l->w, n = (size_t)oh * (size_t)ow;
    for (int ch = 0; ch < k; ++ch) {
        float *dst = imd + (size_t)ch * plane;
        const float *src = cols + (size_t)ch * n;
        for (int oy = 0; oy < oh; ++oy) {
            int iy = oy * s - p;
            if (iy < 0 || iy >= l->h) continue;
            const float *row = src + (size_t)oy * (size_t)ow;
            for (int ox = 0; ox < ow; ++ox) {
                int ix = ox * s - p;
                if (ix >= 0 && ix < l->w) dst[(size_t)iy * (size_t)l->w + (size_t)ix] += row[ox];
            }
        }
    }
}

void sdnn_conv1x1_forward(layer l, network net)
{
    const int m = l.n / l.groups, k = l.c / l.groups, n = l.out_h * l.out_w;
    memset(l.output, 0, (size_t)l.outputs * (size_t)l.batch * sizeof *l.output);
    for (int b = 0; b < l.batch; ++b)
        for (int g = 0; g < l.groups; ++g) {
            size_t at = (size_t)b * (size_t)l.groups + (size_t)g;
            gather(&l, net.input + at * (size_t)k * (size_t)l.h * (size_t)l.w, k, net.workspace);
            gemm(0, 0, m, n, k, 1, l.weights + (size_t)g * (size_t)(l.nweights / l.groups), k,
                 net.workspace, n, 1, l.output + at * (size_t)m * (size_t)n, n);
        }
    if (l.batch_normalize) forward_batchnorm_layer(l, net);
    else add_bias(l.output, l.biases, l.batch, l.n, n);
    activate_array(l.output, l.outputs * l.batch, l.activation);
}

void sdnn_conv1x1_backward(layer l, network net)
{
    const int m = l.n / l.groups, k = l.c / l.groups, n = l.out_h * l.out_w;
    gradient_array(l.output, l.outputs * l.batch, l.activation, l.delta);
    if (l.batch_normalize) backward_batchnorm_layer(l, net);
    else backward_bias(l.bias_updates, l.delta, l.batch, l.n, n);
    for (int b = 0; b < l.batch; ++b)
        for (int g = 0; g < l.groups; ++g) {
            size_t at = (size_t)b * (size_t)l.groups + (size_t)g;
            size_t in_at = at * (size_t)k * (size_t)l.h * (size_t)l.w;
            float *dy = l.delta + at * (size_t)m * (size_t)n;
            float *w = l.weights + (size_t)g * (size_t)(l.nweights / l.groups);
            gather(&l, net.input + in_at, k, net.workspace);
            gemm(0, 1, m, k, n, 1, dy, n, net.workspace, n, 1,
                 l.weight_updates + (size_t)g * (size_t)(l.nweights / l.groups), k);
            if (!net.delta) continue;
            gemm(1, 0, k, n, m, 1, w, k, dy, n, 0, net.workspace, n);
            scatter_add(&l, net.workspace, k, net.delta + in_at);
        }
}

int sdnn_conv1x1_attached(const layer *l)
{
    return l->forward == sdnn_conv1x1_forward && l->backward == sdnn_conv1x1_backward;
}

int sdnn_conv1x1_attach_layer(layer *l)
{
    if (!sdnn_conv1x1_strided(l) || l->forward != forward_convolutional_layer ||
        l->backward != backward_convolutional_layer)
        return 0;
    l->forward = sdnn_conv1x1_forward;
    l->backward = sdnn_conv1x1_backward;
    return 1;
}

void sdnn_conv1x1_release_layer(layer *l)
{
    if (!sdnn_conv1x1_attached(l)) return;
    l->forward = forward_convolutional_layer;
    l->backward = backward_convolutional_layer;
}

int sdnn_conv1x1_attach(network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) k += sdnn_conv1x1_attach_layer(&net->layers[i]);
    return k;
}

int sdnn_conv1x1_detach(network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) {
        k += sdnn_conv1x1_attached(&net->layers[i]);
        sdnn_conv1x1_release_layer(&net->layers[i]);
    }
    return k;
}

int sdnn_conv1x1_count(const network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) k += sdnn_conv1x1_strided(&net->layers[i]);
    return k;
}
