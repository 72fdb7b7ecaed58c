/*
 * cuda_util: what every .cu file of the engine shares: the context's
 * layout, error translation that keeps file:line, and launch geometry.
 * Only nvcc sees this header.
 */
#ifndef SDNN_CUDA_UTIL_CUH
#define SDNN_CUDA_UTIL_CUH

#include "dev.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#if SDNN_CUDNN
#include <cudnn.h>
#endif

struct sdnn_dctx {
    sdnn_dctx_options o;
    cudaStream_t s[3];          /* compute, copy, comm */
    cublasHandle_t blas;
#if SDNN_CUDNN
    cudnnHandle_t dnn;
#endif
    void *ws;
    size_t ws_bytes;
    void **ws_retired;          /* outgrown workspaces, freed with the context */
    size_t n_retired;
};

struct sdnn_devent {
    cudaEvent_t e;
    int device;
};

sdnn_status sdnn_cuda_fail(cudaError_t e, const char *file, int line, const char *what);
sdnn_status sdnn_cublas_fail(cublasStatus_t e, const char *file, int line, const char *what);
#if SDNN_CUDNN
sdnn_status sdnn_cudnn_fail(cudnnStatus_t e, const char *file, int line, const char *what);
#endif

#define SDNN_CU(call)                                                          \
    do {                                                                       \
        cudaError_t sdnn_e_ = (call);                                          \
        if (sdnn_e_ != cudaSuccess)                                            \
            return sdnn_cuda_fail(sdnn_e_, __FILE__, __LINE__, #call);         \
    } while (0)

#define SDNN_BLAS(call)                                                        \
    do {                                                                       \
        cublasStatus_t sdnn_e_ = (call);                                       \
        if (sdnn_e_ != CUBLAS_STATUS_SUCCESS)                                  \
            return sdnn_cublas_fail(sdnn_e_, __FILE__, __LINE__, #call);       \
    } while (0)

#if SDNN_CUDNN
#define SDNN_DNN(call)                                                         \
    do {                                                                       \
        cudnnStatus_t sdnn_e_ = (call);                                        \
        if (sdnn_e_ != CUDNN_STATUS_SUCCESS)                                   \
            return sdnn_cudnn_fail(sdnn_e_, __FILE__, __LINE__, #call);        \
    } while (0)
#endif

/* After a launch: a bad configuration shows up here, a fault in the kernel
 * at the next synchronisation. */
#define SDNN_LAUNCHED(name) SDNN_CU(cudaGetLastError())

#define SDNN_THREADS 256

static inline unsigned sdnn_grid(size_t n)
{
    size_t b = (n + SDNN_THREADS - 1) / SDNN_THREADS;
    if (b < 1) b = 1;
    if (b > 65535u * 8u) b = 65535u * 8u;   /* grid-stride loops do the rest */
    return (unsigned)b;
}

#define SDNN_FOR(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)blockDim.x * gridDim.x)

static inline cudaStream_t sdnn_stream(sdnn_dctx *c, int which)
{
    return c->s[which];
}

#endif
