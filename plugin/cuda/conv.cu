/*
 * conv: the convolution of a convolutional layer on the device, and the
 * row-major gemm the connected layer shares.
 *
 * CUDNN=1: cuDNN's legacy convolution API with one descriptor per pass, so
 * each pass runs with the math mode of the algorithm chosen for it.  Unless
 * the context allows TF32, only FMA-math algorithms are taken (plain fp32,
 * what the comparison with libdarknet needs), and with `deterministic` only
 * deterministic ones (no atomics in the filter gradient), so replicas and
 * reruns give the same bits.
 * CUDNN=0: im2col, cuBLAS gemm and col2im per image, as Darknet's CPU layer
 * computes it.
 *
 * Both accumulate the gradients (beta = 1): Darknet's weight_updates carry
 * momentum, and the previous layer's delta may already hold contributions
 * (route, shortcut).
 */
#include "convpick.h"
#include "layers.cuh"
#include "ops.h"

#include <atomic>
#include <stdio.h>
#include <string.h>

#ifndef SDNN_SIM_EXEC
/* cuBLAS; on the simulated device sim/gemm.c stands in for it. */
sdnn_status sdnn_gemm_rm(sdnn_dctx *c, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                         int ldc)
{
    /* Row-major C (m x n) is column-major C^T = op(B)^T op(A)^T. */
    SDNN_BLAS(cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          n, m, k, &alpha, b, ldb, a, lda, &beta, cm, ldc));
    return SDNN_OK;
}
#endif

#if SDNN_CUDNN

static_assert((int)CUDNN_DEFAULT_MATH == (int)SDNN_CONV_MATH_DEFAULT &&
                  (int)CUDNN_TENSOR_OP_MATH == (int)SDNN_CONV_MATH_TENSOR_OP &&
                  (int)CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION == (int)SDNN_CONV_MATH_CONVERT &&
                  (int)CUDNN_FMA_MATH == (int)SDNN_CONV_MATH_FMA,
              "convpick.h: cuDNN's math types");

/* The entry of cuDNN's ranking that sdnn_conv_pick_why (convpick.h) takes:
 * only math the tf32 option allows (never a down-conversion to fp16),
 * deterministic when asked (over the workspace limit if it must be),
 * within the limit where one fits.  What a pick gave up is said on stderr,
 * once per process and kind, at setup: a run asked to be deterministic
 * that is not must not be silent.
 * (The ranking is asked with the math mode we want set on the descriptor;
 * an entry may report CUDNN_DEFAULT_MATH for the same FMA kernels, so
 * without tf32 the descriptor is then set to CUDNN_FMA_MATH explicitly.) */
static void say_gave_up(int gave, int layer, const char *pass, size_t memory, size_t limit)
{
    static std::atomic<int> said(0);
    int fresh = gave & ~said.fetch_or(gave);
    if (fresh & SDNN_CONV_NONDETERMINISTIC)
        fprintf(stderr,
                "scalednn: layer %d: no deterministic cuDNN %s algorithm; this run's "
                "convolutions may differ in their last bits across replicas and reruns "
                "(said once)\n",
                layer, pass);
    else if (fresh & SDNN_CONV_OVER_LIMIT)
        fprintf(stderr,
                "scalednn: layer %d: the deterministic cuDNN %s algorithm needs %zu bytes of "
                "workspace, over workspace_limit %zu: taken, for the same bits across "
                "replicas (said once)\n",
                layer, pass, memory, limit);
}

template <typename Perf>
static int pick(const Perf *p, int n, const sdnn_dctx_options *o, int layer, const char *pass)
{
    enum { MAXALGO = 16 };
    sdnn_conv_algo a[MAXALGO];
    if (n > MAXALGO) n = MAXALGO;
    for (int i = 0; i < n; ++i) {
        a[i].ok = p[i].status == CUDNN_STATUS_SUCCESS;
        a[i].memory = p[i].memory;
        a[i].math = (int)p[i].mathType;
        a[i].deterministic = p[i].determinism == CUDNN_DETERMINISTIC;
    }
    int gave = 0;
    int k = sdnn_conv_pick_why(a, n, o->workspace_limit, o->tf32, o->deterministic, &gave);
    if (k >= 0 && gave && o->deterministic)
        say_gave_up(gave, layer, pass, a[k].memory, o->workspace_limit);
    return k;
}

static cudnnMathType_t math_for(cudnnMathType_t reported, const sdnn_dctx_options *o)
{
    return (cudnnMathType_t)sdnn_conv_math_set((int)reported, o->tf32);
}

/* Every descriptor is created into a field of the layer's impl (calloc'd,
 * so NULL until then) and sdnn_conv_release destroys each one that exists:
 * a setup that fails partway, which the caller always releases, leaks
 * nothing. */
static sdnn_status conv_desc(cudnnConvolutionDescriptor_t *d, const sdnn_dlayer *l)
{
    cudnnConvolutionDescriptor_t made = NULL;
    SDNN_DNN(cudnnCreateConvolutionDescriptor(&made));
    *d = made;
    SDNN_DNN(cudnnSetConvolution2dDescriptor(*d, l->pad, l->pad, l->stride, l->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SDNN_DNN(cudnnSetConvolutionGroupCount(*d, l->groups));
    return SDNN_OK;
}

sdnn_status sdnn_conv_setup(sdnn_dctx *c, sdnn_dlayer *l, sdnn_dl_impl *im)
{
    const sdnn_dctx_options *o = &c->o;
    cudnnTensorDescriptor_t td = NULL;
    cudnnFilterDescriptor_t fd = NULL;
    SDNN_DNN(cudnnCreateTensorDescriptor(&td));
    im->xd = td;
    td = NULL;
    SDNN_DNN(cudnnCreateTensorDescriptor(&td));
    im->yd = td;
    SDNN_DNN(cudnnCreateFilterDescriptor(&fd));
    im->wd = fd;
    SDNN_DNN(cudnnSetTensor4dDescriptor(im->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, l->batch, l->c,
                                        l->h, l->w));
    SDNN_DNN(cudnnSetTensor4dDescriptor(im->yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, l->batch,
                                        l->out_c, l->out_h, l->out_w));
    SDNN_DNN(cudnnSetFilter4dDescriptor(im->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l->n,
                                        l->c / l->groups, l->size, l->size));
    SDNN_CHECK(conv_desc(&im->cd_fwd, l));
    SDNN_CHECK(conv_desc(&im->cd_bwd_data, l));
    SDNN_CHECK(conv_desc(&im->cd_bwd_filter, l));
    /* The output size cuDNN derives must be Darknet's. */
    int nn, cc, hh, ww;
    SDNN_DNN(cudnnGetConvolution2dForwardOutputDim(im->cd_fwd, im->xd, im->wd, &nn, &cc, &hh, &ww));
    if (nn != l->batch || cc != l->out_c || hh != l->out_h || ww != l->out_w)
        return SDNN_ERROR(SDNN_ERR_INTERNAL,
                          "layer %d: cuDNN output %dx%dx%dx%d differs from Darknet's %dx%dx%dx%d",
                          l->index, nn, cc, hh, ww, l->batch, l->out_c, l->out_h, l->out_w);
    enum { MAXALGO = 16 };
    int got = 0, k;
    size_t ws = 0;
    {
        cudnnConvolutionFwdAlgoPerf_t p[MAXALGO];
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_fwd, o->tf32 ? CUDNN_DEFAULT_MATH
                                                                 : CUDNN_FMA_MATH));
        SDNN_DNN(cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, im->xd, im->wd, im->cd_fwd, im->yd,
                                                        MAXALGO, &got, p));
        if ((k = pick(p, got, o, l->index, "forward")) < 0)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no usable cuDNN forward algorithm",
                              l->index);
        im->fwd_algo = p[k].algo;
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_fwd, math_for(p[k].mathType, o)));
        size_t need = 0;
        SDNN_DNN(cudnnGetConvolutionForwardWorkspaceSize(c->dnn, im->xd, im->wd, im->cd_fwd,
                                                         im->yd, im->fwd_algo, &need));
        if (need > ws) ws = need;
        if (p[k].memory > ws) ws = p[k].memory;
    }
    {
        cudnnConvolutionBwdDataAlgoPerf_t p[MAXALGO];
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_bwd_data, o->tf32 ? CUDNN_DEFAULT_MATH
                                                                      : CUDNN_FMA_MATH));
        SDNN_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, im->wd, im->yd,
                                                             im->cd_bwd_data, im->xd, MAXALGO,
                                                             &got, p));
        if ((k = pick(p, got, o, l->index, "backward-data")) < 0)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                              "layer %d: no usable cuDNN backward-data algorithm", l->index);
        im->bwd_data_algo = p[k].algo;
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_bwd_data, math_for(p[k].mathType, o)));
        size_t need = 0;
        SDNN_DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, im->wd, im->yd,
                                                              im->cd_bwd_data, im->xd,
                                                              im->bwd_data_algo, &need));
        if (need > ws) ws = need;
        if (p[k].memory > ws) ws = p[k].memory;
    }
    {
        cudnnConvolutionBwdFilterAlgoPerf_t p[MAXALGO];
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_bwd_filter, o->tf32 ? CUDNN_DEFAULT_MATH
                                                                        : CUDNN_FMA_MATH));
        SDNN_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, im->xd, im->yd,
                                                               im->cd_bwd_filter, im->wd,
                                                               MAXALGO, &got, p));
        if ((k = pick(p, got, o, l->index, "backward-filter")) < 0)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                              "layer %d: no usable cuDNN backward-filter algorithm", l->index);
        im->bwd_filter_algo = p[k].algo;
        SDNN_DNN(cudnnSetConvolutionMathType(im->cd_bwd_filter, math_for(p[k].mathType, o)));
        size_t need = 0;
        SDNN_DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, im->xd, im->yd,
                                                                im->cd_bwd_filter, im->wd,
                                                                im->bwd_filter_algo, &need));
        if (need > ws) ws = need;
        if (p[k].memory > ws) ws = p[k].memory;
    }
    l->workspace = ws;
    return SDNN_OK;
}

void sdnn_conv_release(sdnn_dl_impl *im)
{
    if (im->xd) cudnnDestroyTensorDescriptor(im->xd);
    if (im->yd) cudnnDestroyTensorDescriptor(im->yd);
    if (im->wd) cudnnDestroyFilterDescriptor(im->wd);
    if (im->cd_fwd) cudnnDestroyConvolutionDescriptor(im->cd_fwd);
    if (im->cd_bwd_data) cudnnDestroyConvolutionDescriptor(im->cd_bwd_data);
    if (im->cd_bwd_filter) cudnnDestroyConvolutionDescriptor(im->cd_bwd_filter);
    im->xd = im->yd = NULL;
    im->wd = NULL;
    im->cd_fwd = im->cd_bwd_data = im->cd_bwd_filter = NULL;
}

sdnn_status sdnn_conv_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    sdnn_dl_impl *im = (sdnn_dl_impl *)l->impl;
    const float one = 1, zero = 0;
    SDNN_DNN(cudnnConvolutionForward(c->dnn, &one, im->xd, s->input, im->wd, l->weights,
                                     im->cd_fwd, im->fwd_algo, s->workspace, s->workspace_bytes,
                                     &zero, im->yd, l->output));
    return SDNN_OK;
}

sdnn_status sdnn_conv_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    sdnn_dl_impl *im = (sdnn_dl_impl *)l->impl;
    const float one = 1;
    SDNN_DNN(cudnnConvolutionBackwardFilter(c->dnn, &one, im->xd, s->input, im->yd, l->delta,
                                            im->cd_bwd_filter, im->bwd_filter_algo, s->workspace,
                                            s->workspace_bytes, &one, im->wd, l->weight_updates));
    if (s->delta)
        SDNN_DNN(cudnnConvolutionBackwardData(c->dnn, &one, im->wd, l->weights, im->yd, l->delta,
                                              im->cd_bwd_data, im->bwd_data_algo, s->workspace,
                                              s->workspace_bytes, &one, im->xd, s->delta));
    return SDNN_OK;
}

#else /* !SDNN_CUDNN: im2col + gemm */

/* The index maps are ops.h's; the geometry is passed by value (no pointers). */
SDNN_PLAIN_STRUCT(sdnn_conv_geom)

__global__ void k_im2col(const float *im, sdnn_conv_geom g, float *col)
{
    size_t n = (size_t)g.ch * g.size * g.size * g.oh * g.ow;
    SDNN_FOR(i, n) col[i] = sdnn_im2col_elem(im, &g, i);
}

/* im += col2im(col), a gather per input element. */
__global__ void k_col2im_add(const float *col, sdnn_conv_geom g, float *im)
{
    size_t n = (size_t)g.ch * g.h * g.w;
    SDNN_FOR(i, n) im[i] += sdnn_col2im_elem(col, &g, i);
}

static sdnn_conv_geom conv_geom(const sdnn_dlayer *l)
{
    sdnn_conv_geom g = {l->c / l->groups, l->h, l->w, l->size, l->stride, l->pad, l->out_h,
                        l->out_w};
    return g;
}

sdnn_status sdnn_conv_setup(sdnn_dctx *c, sdnn_dlayer *l, sdnn_dl_impl *im)
{
    (void)c; (void)im;
    l->workspace = (size_t)(l->c / l->groups) * l->size * l->size * l->out_h * l->out_w *
                   sizeof(float);
    return SDNN_OK;
}

void sdnn_conv_release(sdnn_dl_impl *im) { (void)im; }

sdnn_status sdnn_conv_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    int g = l->groups, m = l->n / g, k = l->size * l->size * l->c / g, n = l->out_h * l->out_w;
    float *col = (float *)s->workspace;
    sdnn_conv_geom cg = conv_geom(l);
    for (int b = 0; b < l->batch; ++b) {
        for (int j = 0; j < g; ++j) {
            const float *in = s->input + ((size_t)b * g + j) * (l->c / g) * l->h * l->w;
            float *out = l->output + ((size_t)b * g + j) * (size_t)n * m;
            const float *wt = l->weights + (size_t)j * l->nweights / g;
            const float *src = in;
            if (l->size != 1 || l->stride != 1 || l->pad != 0) {
                SDNN_LAUNCH(k_im2col, sdnn_grid((size_t)k * n), SDNN_THREADS, 0,
                            sdnn_stream(c, SDNN_STREAM_COMPUTE), in, cg, col);
                SDNN_LAUNCHED("im2col");
                src = col;
            }
            SDNN_CHECK(sdnn_gemm_rm(c, 0, 0, m, n, k, 1, wt, k, src, n, 0, out, n));
        }
    }
    return SDNN_OK;
}

sdnn_status sdnn_conv_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    int g = l->groups, m = l->n / g, k = l->size * l->size * l->c / g, n = l->out_h * l->out_w;
    float *col = (float *)s->workspace;
    sdnn_conv_geom cg = conv_geom(l);
    int direct = l->size == 1 && l->stride == 1 && l->pad == 0;
    for (int b = 0; b < l->batch; ++b) {
        for (int j = 0; j < g; ++j) {
            const float *d = l->delta + ((size_t)b * g + j) * (size_t)m * n;
            const float *in = s->input + ((size_t)b * g + j) * (l->c / g) * l->h * l->w;
            float *wu = l->weight_updates + (size_t)j * l->nweights / g;
            const float *src = in;
            if (!direct) {
                SDNN_LAUNCH(k_im2col, sdnn_grid((size_t)k * n), SDNN_THREADS, 0,
                            sdnn_stream(c, SDNN_STREAM_COMPUTE), in, cg, col);
                SDNN_LAUNCHED("im2col");
                src = col;
            }
            SDNN_CHECK(sdnn_gemm_rm(c, 0, 1, m, k, n, 1, d, n, src, n, 1, wu, k));
            if (s->delta) {
                const float *wt = l->weights + (size_t)j * l->nweights / g;
                float *pd = s->delta + ((size_t)b * g + j) * (l->c / g) * l->h * l->w;
                if (direct) {
                    SDNN_CHECK(sdnn_gemm_rm(c, 1, 0, k, n, m, 1, wt, k, d, n, 1, pd, n));
                } else {
                    SDNN_CHECK(sdnn_gemm_rm(c, 1, 0, k, n, m, 1, wt, k, d, n, 0, col, n));
                    SDNN_LAUNCH(k_col2im_add, sdnn_grid((size_t)(l->c / g) * l->h * l->w),
                                SDNN_THREADS, 0, sdnn_stream(c, SDNN_STREAM_COMPUTE), col, cg, pd);
                    SDNN_LAUNCHED("col2im");
                }
            }
        }
    }
    return SDNN_OK;
}

#endif
