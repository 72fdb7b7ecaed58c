/*
 * runtime: devices, contexts (one per virtual device: streams and library
 * handles), events, memory and the translation of CUDA, cuBLAS and cuDNN
 * failures into sdnn_status with the library's own message.
 *
 * Where there is no device or no driver, sdnn_dev_count says so once, with
 * the runtime's reason, and every context creation fails the same way, so
 * every entry point of the engine returns SDNN_ERR_UNSUPPORTED "no CUDA
 * device" instead of crashing.
 */
#include "cuda_util.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sdnn_status sdnn_cuda_fail(cudaError_t e, const char *file, int line, const char *what)
{
    cudaGetLastError();   /* clear a non-sticky error so later calls are not blamed */
    sdnn_status st = (e == cudaErrorMemoryAllocation) ? SDNN_ERR_NOMEM
                     : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                         ? SDNN_ERR_UNSUPPORTED
                         : SDNN_ERR_SYSTEM;
    return sdnn_set_error(st, file, line, "CUDA: %s failed: %s (%s)", what,
                          cudaGetErrorString(e), cudaGetErrorName(e));
}

sdnn_status sdnn_cublas_fail(cublasStatus_t e, const char *file, int line, const char *what)
{
    return sdnn_set_error(e == CUBLAS_STATUS_ALLOC_FAILED ? SDNN_ERR_NOMEM : SDNN_ERR_SYSTEM, file,
                          line, "cuBLAS: %s failed: %s", what, cublasGetStatusString(e));
}

#if SDNN_CUDNN
sdnn_status sdnn_cudnn_fail(cudnnStatus_t e, const char *file, int line, const char *what)
{
    return sdnn_set_error(e == CUDNN_STATUS_ALLOC_FAILED ? SDNN_ERR_NOMEM : SDNN_ERR_SYSTEM, file,
                          line, "cuDNN: %s failed: %s", what, cudnnGetErrorString(e));
}
#endif

extern "C" sdnn_status sdnn_dev_count(int *n)
{
    *n = 0;
    int k = 0;
    cudaError_t e = cudaGetDeviceCount(&k);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "no CUDA device (cudaGetDeviceCount: %s)",
                          cudaGetErrorString(e));
    }
    if (k < 1) return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "no CUDA device (none found)");
    *n = k;
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dev_describe(int dev, char *buf, size_t len)
{
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    if (dev < 0 || dev >= n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device %d does not exist (%d found)", dev, n);
    cudaDeviceProp p;
    SDNN_CU(cudaGetDeviceProperties(&p, dev));
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    snprintf(buf, len, "%d: %s, sm_%d%d, %d SMs, %.1f GiB, runtime %d, driver %d", dev, p.name,
             p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), rt, drv);
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dctx_create(const sdnn_dctx_options *o, sdnn_dctx **out)
{
    *out = NULL;
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    sdnn_dctx_options def = SDNN_DCTX_OPTIONS_INIT;
    if (!o) o = &def;
    if (o->device < 0 || o->device >= n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device %d does not exist (%d found)", o->device, n);
    sdnn_dctx *c = (sdnn_dctx *)calloc(1, sizeof *c);
    if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device context");
    c->o = *o;
    sdnn_status st = SDNN_OK;
    cudaError_t e = cudaSetDevice(o->device);
    for (int i = 0; i < 3 && e == cudaSuccess; ++i)
        e = cudaStreamCreateWithFlags(&c->s[i], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        st = sdnn_cuda_fail(e, __FILE__, __LINE__, "stream creation");
        goto fail;
    }
    {
        cublasStatus_t be = cublasCreate(&c->blas);
        if (be == CUBLAS_STATUS_SUCCESS) be = cublasSetStream(c->blas, c->s[0]);
        if (be == CUBLAS_STATUS_SUCCESS)
            be = cublasSetMathMode(c->blas, o->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_PEDANTIC_MATH);
        if (be != CUBLAS_STATUS_SUCCESS) {
            st = sdnn_cublas_fail(be, __FILE__, __LINE__, "cublasCreate");
            goto fail;
        }
    }
#if SDNN_CUDNN
    {
        cudnnStatus_t de = cudnnCreate(&c->dnn);
        if (de == CUDNN_STATUS_SUCCESS) de = cudnnSetStream(c->dnn, c->s[0]);
        if (de != CUDNN_STATUS_SUCCESS) {
            st = sdnn_cudnn_fail(de, __FILE__, __LINE__, "cudnnCreate");
            goto fail;
        }
    }
#endif
    *out = c;
    return SDNN_OK;
fail:
    sdnn_dctx_destroy(c);
    return st;
}

extern "C" void sdnn_dctx_destroy(sdnn_dctx *c)
{
    if (!c) return;
    cudaSetDevice(c->o.device);
    for (int i = 0; i < 3; ++i)
        if (c->s[i]) cudaStreamSynchronize(c->s[i]);
#if SDNN_CUDNN
    if (c->dnn) cudnnDestroy(c->dnn);
#endif
    if (c->blas) cublasDestroy(c->blas);
    if (c->ws) cudaFree(c->ws);
    for (size_t i = 0; i < c->n_retired; ++i) cudaFree(c->ws_retired[i]);
    free(c->ws_retired);
    for (int i = 0; i < 3; ++i)
        if (c->count_slot[i]) cudaFree(c->count_slot[i]);
    for (int i = 0; i < 3; ++i)
        if (c->s[i]) cudaStreamDestroy(c->s[i]);
    free(c);
}

extern "C" int sdnn_dctx_device(const sdnn_dctx *c) { return c->o.device; }
extern "C" const sdnn_dctx_options *sdnn_dctx_opts(const sdnn_dctx *c) { return &c->o; }

extern "C" sdnn_status sdnn_dctx_bind(sdnn_dctx *c)
{
    SDNN_CU(cudaSetDevice(c->o.device));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dctx_sync(sdnn_dctx *c)
{
    SDNN_CU(cudaStreamSynchronize(c->s[0]));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dctx_sync_all(sdnn_dctx *c)
{
    for (int i = 0; i < 3; ++i) SDNN_CU(cudaStreamSynchronize(c->s[i]));
    return SDNN_OK;
}

/* Growth never frees: work already queued may still read the old buffer,
 * and a cudaFree (like the stream wait it would need first) waits for the
 * whole device, every virtual device on it included.  The old buffer is
 * retired and freed with the context, after its streams are idle. */
extern "C" sdnn_status sdnn_dctx_workspace(sdnn_dctx *c, size_t bytes, void **ws)
{
    if (bytes > c->ws_bytes) {
        SDNN_CU(cudaSetDevice(c->o.device));
        if (c->ws) {
            void **r = (void **)realloc(c->ws_retired, (c->n_retired + 1) * sizeof *r);
            if (!r) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to grow a workspace");
            c->ws_retired = r;
        }
        void *p = NULL;
        SDNN_CU(cudaMalloc(&p, bytes));
        if (c->ws) c->ws_retired[c->n_retired++] = c->ws;
        c->ws = p;
        c->ws_bytes = bytes;
    }
    *ws = c->ws;
    return SDNN_OK;
}

extern "C" void sdnn_dctx_workspace_current(sdnn_dctx *c, void **ws, size_t *bytes)
{
    *ws = c->ws;
    *bytes = c->ws_bytes;
}

extern "C" void *sdnn_dctx_stream(sdnn_dctx *c, int stream) { return (void *)c->s[stream]; }

/* ---- events ---------------------------------------------------------------------- */

extern "C" sdnn_status sdnn_devent_create(sdnn_dctx *c, int timing, sdnn_devent **out)
{
    *out = NULL;
    SDNN_CU(cudaSetDevice(c->o.device));
    sdnn_devent *e = (sdnn_devent *)calloc(1, sizeof *e);
    if (!e) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for an event");
    cudaError_t r = cudaEventCreateWithFlags(&e->e, timing ? cudaEventDefault
                                                           : cudaEventDisableTiming);
    if (r != cudaSuccess) {
        free(e);
        return sdnn_cuda_fail(r, __FILE__, __LINE__, "cudaEventCreate");
    }
    e->device = c->o.device;
    *out = e;
    return SDNN_OK;
}

extern "C" void sdnn_devent_destroy(sdnn_devent *e)
{
    if (!e) return;
    cudaEventDestroy(e->e);
    free(e);
}

extern "C" sdnn_status sdnn_devent_record(sdnn_devent *e, sdnn_dctx *c, int stream)
{
    SDNN_CU(cudaEventRecord(e->e, c->s[stream]));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_devent_wait(sdnn_devent *e, sdnn_dctx *c, int stream)
{
    SDNN_CU(cudaStreamWaitEvent(c->s[stream], e->e, 0));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_devent_sync(sdnn_devent *e)
{
    SDNN_CU(cudaEventSynchronize(e->e));
    return SDNN_OK;
}

extern "C" int sdnn_devent_done(sdnn_devent *e)
{
    cudaError_t r = cudaEventQuery(e->e);
    if (r == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" sdnn_status sdnn_devent_elapsed(sdnn_devent *from, sdnn_devent *to, float *ms)
{
    SDNN_CU(cudaEventElapsedTime(ms, from->e, to->e));
    return SDNN_OK;
}

/* ---- memory ---------------------------------------------------------------------- */

extern "C" sdnn_status sdnn_dmalloc(sdnn_dctx *c, size_t bytes, void **p)
{
    *p = NULL;
    if (bytes == 0) return SDNN_OK;
    SDNN_CU(cudaSetDevice(c->o.device));
    SDNN_CU(cudaMalloc(p, bytes));
    /* Zeroed before anyone sees it: other streams (copy, comm) do not
     * wait for the compute stream. */
    cudaError_t e = cudaMemsetAsync(*p, 0, bytes, c->s[0]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->s[0]);
    if (e != cudaSuccess) {
        cudaFree(*p);
        *p = NULL;
        return sdnn_cuda_fail(e, __FILE__, __LINE__, "cudaMemsetAsync");
    }
    return SDNN_OK;
}

extern "C" void sdnn_dfree(void *p)
{
    if (p) cudaFree(p);
}

extern "C" sdnn_status sdnn_hmalloc_pinned(size_t bytes, void **p)
{
    *p = NULL;
    SDNN_CU(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable));
    return SDNN_OK;
}

extern "C" void sdnn_hfree_pinned(void *p)
{
    if (p) cudaFreeHost(p);
}

extern "C" sdnn_status sdnn_dcopy(sdnn_dctx *c, int stream, void *dst, const void *src,
                                  size_t bytes, int sync)
{
    if (bytes == 0) return SDNN_OK;
    SDNN_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->s[stream]));
    if (sync) SDNN_CU(cudaStreamSynchronize(c->s[stream]));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcopy_peer(sdnn_dctx *c, int stream, void *dst, int dst_dev,
                                       const void *src, int src_dev, size_t bytes)
{
    if (bytes == 0) return SDNN_OK;
    if (dst_dev == src_dev)
        SDNN_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->s[stream]));
    else
        SDNN_CU(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, c->s[stream]));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dev_stats_get(int dev, sdnn_dev_stats *s)
{
    (void)dev;
    memset(s, 0, sizeof *s);
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                      "device memory and copy statistics are kept by the simulated runtime "
                      "(make GPU=sim) only");
}

extern "C" sdnn_status sdnn_dctx_sync_stream(sdnn_dctx *c, int stream)
{
    SDNN_CU(cudaStreamSynchronize(c->s[stream]));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dzero(sdnn_dctx *c, int stream, void *p, size_t bytes)
{
    if (bytes == 0) return SDNN_OK;
    SDNN_CU(cudaMemsetAsync(p, 0, bytes, c->s[stream]));
    return SDNN_OK;
}
