/*
 * bn: batch normalisation and biases for convolutional and connected
 * layers, with Darknet's CPU arithmetic (ops.h) rather than cuDNN's (which
 * uses another epsilon and a biased variance).
 *
 * Per-channel sums are deterministic two-phase reductions: a grid of
 * (parts x channels) blocks writes partial sums, one thread per channel adds
 * its parts in order.  No atomics, so reruns give the same bits.  The
 * blocks lie along x, block = channel * parts + part: gridDim.y stops at
 * 65,535 and a connected layer may have more outputs than that.
 */
#include "bn.cuh"
#include "ops.h"

#define BN_MAX_PARTS 64

size_t sdnn_bn_partial_floats(int channels)
{
    return (size_t)channels * BN_MAX_PARTS * 3;
}

static int parts_for(size_t m)
{
    size_t p = (m + SDNN_THREADS * 16 - 1) / (SDNN_THREADS * 16);
    if (p < 1) p = 1;
    if (p > BN_MAX_PARTS) p = BN_MAX_PARTS;
    return (int)p;
}

/* Threads of a partial-sum block: a part's element count rounded up to a
 * power of two, at least a warp, at most SDNN_THREADS (k_channel_partial's
 * tree halves blockDim.x).  A connected layer has batch values a channel:
 * a block of 256 would leave 252 of them idle through every step of the
 * tree. */
static unsigned partial_threads(size_t m, int parts)
{
    size_t per = (m + (size_t)parts - 1) / (size_t)parts;
    unsigned t = 32;
    while (t < SDNN_THREADS && t < per) t <<= 1;
    return t;
}

/* What is summed per element, by mode:
 *   0: x                          (mean)
 *   1: (x - mean)^2               (variance)
 *   2: delta                      (bias gradient)
 *   3: delta, delta*x_norm, delta*(x - mean)   (batch-norm backward) */
template <int MODE>
__global__ void k_channel_partial(const float *a, const float *b, const float *cc,
                                  const float *mean, int C, int S, size_t m, int parts,
                                  float *partial)
{
    constexpr int K = MODE == 3 ? 3 : 1;
    SDNN_SHARED(float, sh, K * SDNN_THREADS);
    int ch = (int)(blockIdx.x / (unsigned)parts), part = (int)(blockIdx.x % (unsigned)parts);
    size_t per = (m + parts - 1) / parts;
    size_t lo = per * part, hi = lo + per < m ? lo + per : m;
    float acc[K];
    for (int k = 0; k < K; ++k) acc[k] = 0;
    float mu = (MODE == 1 || MODE == 3) ? mean[ch] : 0.0f;
    for (size_t e = lo + threadIdx.x; e < hi; e += blockDim.x) {
        size_t bidx = e / (size_t)S, s = e % (size_t)S;
        size_t idx = (bidx * (size_t)C + ch) * (size_t)S + s;
        if (MODE == 0) acc[0] += a[idx];
        if (MODE == 1) acc[0] += sdnn_bn_var_term(a[idx], mu);
        if (MODE == 2) acc[0] += a[idx];
        if (MODE == 3) {
            float t[3];
            sdnn_bn_backward_terms(a[idx], b[idx], cc[idx], mu, t);
            for (int k = 0; k < K; ++k) acc[k] += t[k];
        }
    }
    for (int k = 0; k < K; ++k) sh[k * SDNN_THREADS + threadIdx.x] = acc[k];
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            for (int k = 0; k < K; ++k)
                sh[k * SDNN_THREADS + threadIdx.x] += sh[k * SDNN_THREADS + threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int k = 0; k < K; ++k)
            partial[((size_t)ch * parts + part) * K + k] = sh[k * SDNN_THREADS];
}

/* One thread per channel: the parts in order, then the finishing step. */
__global__ void k_finish_mean(const float *partial, int C, int parts, float scale, float *out)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    float s = 0;
    for (int p = 0; p < parts; ++p) s += partial[(size_t)ch * parts + p];
    out[ch] = s * scale;
}

__global__ void k_finish_add(const float *partial, int C, int parts, float *acc)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    float s = 0;
    for (int p = 0; p < parts; ++p) s += partial[(size_t)ch * parts + p];
    acc[ch] += s;
}

__global__ void k_finish_bn_backward(const float *partial, int C, int parts, const float *scales,
                                     const float *var, float *bias_updates, float *scale_updates,
                                     float *mean_delta, float *var_delta, int exact, size_t m)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    float s0 = 0, s1 = 0, s2 = 0;
    for (int p = 0; p < parts; ++p) {
        const float *q = partial + ((size_t)ch * parts + p) * 3;
        s0 += q[0];
        s1 += q[1];
        s2 += q[2];
    }
    const float sums[3] = {s0, s1, s2};
    if (exact)
        sdnn_bn_backward_channel_exact(sums, scales[ch], var[ch], m, &bias_updates[ch],
                                       &scale_updates[ch], &mean_delta[ch], &var_delta[ch]);
    else
        sdnn_bn_backward_channel(sums, scales[ch], var[ch], &bias_updates[ch],
                                 &scale_updates[ch], &mean_delta[ch], &var_delta[ch]);
}

/* rolling = .99 * rolling + .01 * batch value (ops.h). */
__global__ void k_rolling(int C, const float *mean, const float *var, float *rmean, float *rvar)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    rmean[ch] = sdnn_bn_rolling(rmean[ch], mean[ch]);
    rvar[ch] = sdnn_bn_rolling(rvar[ch], var[ch]);
}

/* Training: x = out; x_norm = normalize(out); out = x_norm*scale + bias. */
__global__ void k_bn_apply_train(float *out, float *x, float *x_norm, const float *mean,
                                 const float *var, const float *scales, const float *biases,
                                 int C, int S, size_t n)
{
    SDNN_FOR(i, n) {
        int ch = sdnn_bn_channel(i, C, S);
        float v = out[i];
        x[i] = v;
        float z = sdnn_bn_normalize(v, mean[ch], var[ch]);
        x_norm[i] = z;
        out[i] = sdnn_bn_scale_shift(z, scales[ch], biases[ch]);
    }
}

__global__ void k_bn_apply_infer(float *out, const float *mean, const float *var,
                                 const float *scales, const float *biases, int C, int S, size_t n)
{
    SDNN_FOR(i, n) {
        int ch = sdnn_bn_channel(i, C, S);
        float z = sdnn_bn_normalize(out[i], mean[ch], var[ch]);
        out[i] = sdnn_bn_scale_shift(z, scales[ch], biases[ch]);
    }
}

__global__ void k_add_bias(float *out, const float *biases, int C, int S, size_t n)
{
    SDNN_FOR(i, n) out[i] += biases[sdnn_bn_channel(i, C, S)];
}

__global__ void k_bn_delta(float *delta, const float *x, const float *mean, const float *var,
                           const float *scales, const float *mean_delta, const float *var_delta,
                           int C, int S, int m, size_t n, int exact)
{
    SDNN_FOR(i, n) {
        int ch = sdnn_bn_channel(i, C, S);
        delta[i] = exact ? sdnn_bn_delta_elem_exact(delta[i], scales[ch], x[i], mean[ch], var[ch],
                                                    mean_delta[ch], var_delta[ch], m)
                         : sdnn_bn_delta_elem(delta[i], scales[ch], x[i], mean[ch], var[ch],
                                              mean_delta[ch], var_delta[ch], m);
    }
}

static unsigned ch_grid(int C) { return (unsigned)((C + 127) / 128); }

/* parts x channels blocks along x (at most 64 x 2^25 channels). */
static sdnn_status partial_grid(int parts, int C, dim3 *grid)
{
    size_t b = (size_t)parts * (size_t)(C > 0 ? C : 1);
    if (b > 0x7fffffffu)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "batch norm: %d channels, at most %d", C,
                          (int)(0x7fffffffu / (unsigned)parts));
    *grid = dim3((unsigned)b);
    return SDNN_OK;
}

sdnn_status sdnn_bn_forward(sdnn_dctx *c, const sdnn_bn_args *a, int train)
{
    cudaStream_t s = sdnn_stream(c, SDNN_STREAM_COMPUTE);
    size_t m = (size_t)a->batch * a->spatial, n = m * a->channels;
    if (!train) {
        SDNN_LAUNCH(k_bn_apply_infer, sdnn_grid(n), SDNN_THREADS, 0, s, a->out, a->rolling_mean,
                    a->rolling_var, a->scales, a->biases, a->channels, a->spatial, n);
        SDNN_LAUNCHED("bn infer");
        return SDNN_OK;
    }
    int parts = parts_for(m);
    dim3 grid;
    SDNN_CHECK(partial_grid(parts, a->channels, &grid));
    unsigned th = partial_threads(m, parts);
    SDNN_LAUNCH(k_channel_partial<0>, grid, th, 0, s, a->out, nullptr, nullptr, nullptr,
                a->channels, a->spatial, m, parts, a->partial);
    SDNN_LAUNCHED("bn mean");
    SDNN_LAUNCH(k_finish_mean, ch_grid(a->channels), 128, 0, s, a->partial, a->channels, parts,
                sdnn_bn_mean_scale(m), a->mean);
    SDNN_LAUNCHED("bn mean");
    SDNN_LAUNCH(k_channel_partial<1>, grid, th, 0, s, a->out, nullptr, nullptr, a->mean,
                a->channels, a->spatial, m, parts, a->partial);
    SDNN_LAUNCHED("bn variance");
    SDNN_LAUNCH(k_finish_mean, ch_grid(a->channels), 128, 0, s, a->partial, a->channels, parts,
                sdnn_bn_var_scale(m), a->var);
    SDNN_LAUNCHED("bn variance");
    SDNN_LAUNCH(k_rolling, ch_grid(a->channels), 128, 0, s, a->channels, a->mean, a->var,
                a->rolling_mean, a->rolling_var);
    SDNN_LAUNCHED("bn rolling");
    SDNN_LAUNCH(k_bn_apply_train, sdnn_grid(n), SDNN_THREADS, 0, s, a->out, a->x, a->x_norm,
                a->mean, a->var, a->scales, a->biases, a->channels, a->spatial, n);
    SDNN_LAUNCHED("bn apply");
    return SDNN_OK;
}

sdnn_status sdnn_bn_backward(sdnn_dctx *c, const sdnn_bn_args *a)
{
    cudaStream_t s = sdnn_stream(c, SDNN_STREAM_COMPUTE);
    size_t m = (size_t)a->batch * a->spatial, n = m * a->channels;
    int parts = parts_for(m);
    dim3 grid;
    SDNN_CHECK(partial_grid(parts, a->channels, &grid));
    unsigned th = partial_threads(m, parts);
    SDNN_LAUNCH(k_channel_partial<3>, grid, th, 0, s, a->delta, a->x_norm, a->x, a->mean,
                a->channels, a->spatial, m, parts, a->partial);
    SDNN_LAUNCHED("bn backward sums");
    SDNN_LAUNCH(k_finish_bn_backward, ch_grid(a->channels), 128, 0, s, a->partial, a->channels,
                parts, a->scales, a->var, a->bias_updates, a->scale_updates, a->mean_delta,
                a->var_delta, a->exact, m);
    SDNN_LAUNCHED("bn backward sums");
    SDNN_LAUNCH(k_bn_delta, sdnn_grid(n), SDNN_THREADS, 0, s, a->delta, a->x, a->mean, a->var,
                a->scales, a->mean_delta, a->var_delta, a->channels, a->spatial, (int)m, n,
                a->exact);
    SDNN_LAUNCHED("bn delta");
    return SDNN_OK;
}

sdnn_status sdnn_bias_forward(sdnn_dctx *c, float *out, const float *biases, int batch, int C,
                              int S)
{
    size_t n = (size_t)batch * C * S;
    SDNN_LAUNCH(k_add_bias, sdnn_grid(n), SDNN_THREADS, 0, sdnn_stream(c, SDNN_STREAM_COMPUTE), out,
                biases, C, S, n);
    SDNN_LAUNCHED("add bias");
    return SDNN_OK;
}

sdnn_status sdnn_bias_backward(sdnn_dctx *c, float *bias_updates, const float *delta, int batch,
                               int C, int S, float *partial)
{
    size_t m = (size_t)batch * S;
    int parts = parts_for(m);
    dim3 grid;
    SDNN_CHECK(partial_grid(parts, C, &grid));
    unsigned th = partial_threads(m, parts);
    SDNN_LAUNCH(k_channel_partial<2>, grid, th, 0, sdnn_stream(c, SDNN_STREAM_COMPUTE),
                delta, nullptr, nullptr, nullptr, C, S, m, parts, partial);
    SDNN_LAUNCHED("bias gradient");
    SDNN_LAUNCH(k_finish_add, ch_grid(C), 128, 0, sdnn_stream(c, SDNN_STREAM_COMPUTE), partial, C,
                parts, bias_updates);
    SDNN_LAUNCHED("bias gradient");
    return SDNN_OK;
}
