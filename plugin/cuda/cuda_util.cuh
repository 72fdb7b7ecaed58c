/*
 * cuda_util: what every .cu file of the engine shares: the context's
 * layout, error translation that keeps file:line, launch geometry, and the
 * one launch form (SDNN_LAUNCH) and shared-memory declarations
 * (SDNN_SHARED, SDNN_SHARED_DYN) that both executors understand.
 *
 * nvcc sees this header for GPU=1.  Under GPU=sim (SDNN_SIM_EXEC) the .cu
 * files that mk/gpu.mk lists in GPU_SIM_CU are compiled by the host C++
 * compiler against sim/cuda_shim.h, and their kernels run on the simulated
 * device's executor (sim/exec.h); the context is then the simulated
 * runtime's, reached only through sdnn_stream.
 */
#ifndef SDNN_CUDA_UTIL_CUH
#define SDNN_CUDA_UTIL_CUH

#include "dev.h"

#ifdef SDNN_SIM_EXEC
#include "sim/cuda_shim.h"

#include <cstdio>

/* The simulated runtime's context, stream `which` (enum sdnn_dstream). */
static inline cudaStream_t sdnn_stream(sdnn_dctx *c, int which)
{
    return cudaStream_t{c, which};
}

/* A failed runtime call or launch: the executor's message, with file:line. */
static inline sdnn_status sdnn_cuda_fail(cudaError_t e, const char *file, int line,
                                         const char *what)
{
    (void)sdnn_ex_take_launch_error();
    sdnn_status st = e > cudaErrorSimulated ? (sdnn_status)(e - cudaErrorSimulated)
                                            : SDNN_ERR_SYSTEM;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sdnn_last_error());
    return sdnn_set_error(st, file, line, "%s failed on a simulated device: %s", what, msg);
}

#define SDNN_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    sdnn_ex_launch(#kernel, kernel, dim3(grid), dim3(block), (shmem), (stream), __VA_ARGS__)
#define SDNN_SHARED(type, name, n) static thread_local sdnn_shared_array<type, (n)> name(#name)
#define SDNN_SHARED_DYN(type, name) sdnn_shared_dyn<type> name(#name)
#define SDNN_STRUCT_POINTERS(type, arr, n) SDNN_EX_STRUCT_POINTERS(type, arr, n)
#define SDNN_PLAIN_STRUCT(type) SDNN_EX_PLAIN_STRUCT(type)

static inline cudaError_t sdnn_count_slot(sdnn_dctx *c, int which, unsigned long long **slot)
{
    return sdnn_ex_cuda(sdnn_sim_count_slot(c, which, slot));
}

#else /* nvcc */

#define SDNN_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define SDNN_SHARED(type, name, n) __shared__ type name[n]
#define SDNN_SHARED_DYN(type, name) extern __shared__ type name[]
#define SDNN_STRUCT_POINTERS(type, arr, n)
#define SDNN_PLAIN_STRUCT(type)

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
    unsigned long long *count_slot[3];  /* per stream: sdnn_count_slot */
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


static inline cudaStream_t sdnn_stream(sdnn_dctx *c, int which)
{
    return c->s[which];
}

/* One device word per stream of c for a kernel's count that the host reads
 * back (allocated at first use, freed with the context). */
static inline cudaError_t sdnn_count_slot(sdnn_dctx *c, int which, unsigned long long **slot)
{
    cudaError_t e = cudaSuccess;
    if (!c->count_slot[which])
        e = cudaMalloc((void **)&c->count_slot[which], sizeof(unsigned long long));
    *slot = c->count_slot[which];
    return e;
}

#endif /* nvcc */

#define SDNN_CU(call)                                                          \
    do {                                                                       \
        cudaError_t sdnn_e_ = (call);                                          \
        if (sdnn_e_ != cudaSuccess)                                            \
            return sdnn_cuda_fail(sdnn_e_, __FILE__, __LINE__, #call);         \
    } while (0)

/* After a launch: a bad configuration shows up here (named by the function
 * that launched), a fault in the kernel at the next synchronisation. */
#define SDNN_LAUNCHED(name)                                                    \
    do {                                                                       \
        cudaError_t sdnn_e_ = cudaGetLastError();                              \
        if (sdnn_e_ != cudaSuccess)                                            \
            return sdnn_cuda_fail(sdnn_e_, __FILE__, __LINE__, __func__);      \
    } while (0)

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

#endif
