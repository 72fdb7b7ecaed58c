/*
 * bn: batch normalisation and bias kernels shared by the convolutional and
 * connected layers (see bn.cu).
 */
#ifndef SDNN_CUDA_BN_CUH
#define SDNN_CUDA_BN_CUH

#include "cuda_util.cuh"

typedef struct sdnn_bn_args {
    int batch, channels, spatial;
    int exact;              /* fix_bn_delta=1: the exact backward (ops.h) */
    float *out;             /* in: pre-normalisation values; out: result */
    float *delta;
    float *x, *x_norm;
    float *mean, *var, *rolling_mean, *rolling_var;
    float *scales, *biases, *scale_updates, *bias_updates;
    float *mean_delta, *var_delta;
    float *partial;         /* sdnn_bn_partial_floats(channels) */
} sdnn_bn_args;

size_t sdnn_bn_partial_floats(int channels);
sdnn_status sdnn_bn_forward(sdnn_dctx *c, const sdnn_bn_args *a, int train);
/* delta in/out; also accumulates bias and scale gradients. */
sdnn_status sdnn_bn_backward(sdnn_dctx *c, const sdnn_bn_args *a);
sdnn_status sdnn_bias_forward(sdnn_dctx *c, float *out, const float *biases, int batch, int C,
                              int S);
sdnn_status sdnn_bias_backward(sdnn_dctx *c, float *bias_updates, const float *delta, int batch,
                               int C, int S, float *partial);

#endif
