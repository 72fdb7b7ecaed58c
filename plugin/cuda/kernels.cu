/*
 * kernels: element-wise device kernels every layer and the exchange use
 * (fill, copy, axpy, activations, differences, the reference mean).
 * Grid-stride loops; everything on the stream the caller names.
 */
#include "cuda_util.cuh"
#include "ops.h"

__global__ void k_fill(float *x, size_t n, float v)
{
    SDNN_FOR(i, n) x[i] = v;
}

__global__ void k_axpy(size_t n, float a, const float *x, float *y)
{
    SDNN_FOR(i, n) y[i] = SDNN_ADD(y[i], SDNN_MUL(a, x[i]));
}

__global__ void k_activate(float *x, size_t n, int act)
{
    SDNN_FOR(i, n) x[i] = sdnn_activate(x[i], act);
}

__global__ void k_gradient(const float *y, size_t n, int act, float *d)
{
    SDNN_FOR(i, n) d[i] *= sdnn_gradient(y[i], act);
}

__global__ void k_sub(float *y, const float *a, const float *b, size_t n)
{
    SDNN_FOR(i, n) y[i] = SDNN_SUB(a[i], b[i]);
}

__global__ void k_add(float *y, const float *a, const float *b, size_t n)
{
    SDNN_FOR(i, n) y[i] = SDNN_ADD(a[i], b[i]);
}

__global__ void k_scale(float *x, size_t n, float s)
{
    SDNN_FOR(i, n) x[i] = SDNN_MUL(x[i], s);
}

__global__ void k_nonfinite(const float *x, size_t n, unsigned long long *bad)
{
    unsigned long long mine = 0;
    SDNN_FOR(i, n) mine += !isfinite(x[i]);
    if (mine) atomicAdd(bad, mine);
}

__global__ void k_sub_check(float *y, const float *a, const float *b, size_t n,
                            unsigned long long *first)
{
    unsigned long long mine = ~0ull;
    SDNN_FOR(i, n) {
        float v = b ? SDNN_SUB(a[i], b[i]) : a[i];
        if (y) y[i] = v;
        if (!isfinite(v) && (unsigned long long)i < mine) mine = (unsigned long long)i;
    }
    if (mine != ~0ull) atomicMin(first, mine);
}

/* sdnn_mean_buffers' order: ((in0 + in1) + in2) + ... then times 1/nin, the
 * last addition and the scale fused as (o + x) * s, two roundings. */
#define SDNN_MEAN_MAX_IN 64
struct mean_args {
    const float *in[SDNN_MEAN_MAX_IN];
};
SDNN_STRUCT_POINTERS(mean_args, in, SDNN_MEAN_MAX_IN)

__global__ void k_mean(mean_args a, int nin, float inv, float *out, size_t n)
{
    SDNN_FOR(i, n) {
        if (nin == 1) {
            out[i] = a.in[0][i];
            continue;
        }
        float o = SDNN_ADD(a.in[0][i], a.in[1][i]);
        if (nin == 2) {
            out[i] = SDNN_MUL(o, inv);
            continue;
        }
        for (int r = 2; r < nin - 1; ++r) o = SDNN_ADD(o, a.in[r][i]);
        out[i] = SDNN_MUL(SDNN_ADD(o, a.in[nin - 1][i]), inv);
    }
}

extern "C" sdnn_status sdnn_k_fill(sdnn_dctx *c, float *x, size_t n, float v)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_fill, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, 0), x, n, v);
    SDNN_LAUNCHED("fill");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_copy(sdnn_dctx *c, float *y, const float *x, size_t n)
{
    if (!n || x == y) return SDNN_OK;
    SDNN_CU(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, sdnn_stream(c, 0)));
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_axpy(sdnn_dctx *c, size_t n, float a, const float *x, float *y)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_axpy, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, 0), n, a, x, y);
    SDNN_LAUNCHED("axpy");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_activate(sdnn_dctx *c, float *x, size_t n, int act)
{
    if (!n || act == SDNN_ACT_LINEAR) return SDNN_OK;
    SDNN_LAUNCH(k_activate, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, 0), x, n, act);
    SDNN_LAUNCHED("activate");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_gradient(sdnn_dctx *c, const float *y, size_t n, int act,
                                       float *delta)
{
    if (!n || act == SDNN_ACT_LINEAR) return SDNN_OK;
    SDNN_LAUNCH(k_gradient, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, 0), y, n, act, delta);
    SDNN_LAUNCHED("gradient");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_sub(sdnn_dctx *c, int stream, float *y, const float *a,
                                  const float *b, size_t n)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_sub, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), y, a, b, n);
    SDNN_LAUNCHED("sub");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_add(sdnn_dctx *c, int stream, float *y, const float *a,
                                  const float *b, size_t n)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_add, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), y, a, b, n);
    SDNN_LAUNCHED("add");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_scale(sdnn_dctx *c, int stream, float *x, size_t n, float s)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_scale, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), x, n, s);
    SDNN_LAUNCHED("scale");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_sub_check(sdnn_dctx *c, int stream, float *y, const float *a,
                                        const float *b, size_t n, unsigned long long *first)
{
    if (!n) return SDNN_OK;
    SDNN_LAUNCH(k_sub_check, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), y, a, b, n, first);
    SDNN_LAUNCHED("sub_check");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_count_nonfinite(sdnn_dctx *c, int stream, const float *x,
                                              size_t n, size_t *bad)
{
    *bad = 0;
    if (!n) return SDNN_OK;
    /* The comm stream may run this while the compute stream uses the
     * workspace: a word of the stream's own, kept by the context. */
    unsigned long long *d = NULL;
    cudaError_t e = sdnn_count_slot(c, stream, &d);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(d, 0, sizeof *d, sdnn_stream(c, stream));
    if (e == cudaSuccess) {
        SDNN_LAUNCH(k_nonfinite, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), x, n, d);
        e = cudaGetLastError();
    }
    unsigned long long h = 0;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, sdnn_stream(c, stream));
    if (e == cudaSuccess) e = cudaStreamSynchronize(sdnn_stream(c, stream));
    if (e != cudaSuccess) return sdnn_cuda_fail(e, __FILE__, __LINE__, "count_nonfinite");
    *bad = (size_t)h;
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_k_mean(sdnn_dctx *c, int stream, const float *const *in, int nin,
                                   float *out, size_t n)
{
    if (nin < 1 || nin > SDNN_MEAN_MAX_IN)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device mean: %d inputs (1..%d)", nin,
                          SDNN_MEAN_MAX_IN);
    if (!n) return SDNN_OK;
    mean_args a = {};
    for (int r = 0; r < nin; ++r) a.in[r] = in[r];
    SDNN_LAUNCH(k_mean, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, stream), a, nin, 1.0f / (float)nin, out, n);
    SDNN_LAUNCHED("mean");
    return SDNN_OK;
}
