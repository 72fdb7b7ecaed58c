/*
 * layers: what the per-kind device layer files share: the private state
 * behind sdnn_dlayer.impl, the row-major gemm on cuBLAS, and the entry
 * points of the convolution (conv.cu) that the dispatcher (layers.cu) calls.
 */
#ifndef SDNN_CUDA_LAYERS_CUH
#define SDNN_CUDA_LAYERS_CUH

#include "cuda_util.cuh"

typedef struct sdnn_dl_impl {
    float *partial;                     /* per-channel reduction scratch */
    float *loss_host;                   /* pinned: softmax/cost loss for the sum */
    size_t loss_floats;
#if SDNN_CUDNN
    /* NULL until created; sdnn_conv_release destroys those that exist. */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd_fwd, cd_bwd_data, cd_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
#endif
} sdnn_dl_impl;

/* C = alpha * op(A) * op(B) + beta * C with Darknet's row-major gemm
 * arguments (TA, TB, M, N, K, lda, ldb, ldc), on the compute stream:
 * cuBLAS's sgemm (conv.cu) on a GPU; on the simulated device its stand-in,
 * OpenBLAS queued on the stream (sim/gemm.c, C, hence extern "C"). */
extern "C" sdnn_status sdnn_gemm_rm(sdnn_dctx *c, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                         int ldc);

sdnn_status sdnn_conv_setup(sdnn_dctx *c, sdnn_dlayer *l, sdnn_dl_impl *im);
void sdnn_conv_release(sdnn_dl_impl *im);
/* output = conv(input); delta(prev) += conv^T(delta); weight_updates += ... */
sdnn_status sdnn_conv_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s);
sdnn_status sdnn_conv_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s);

#endif
