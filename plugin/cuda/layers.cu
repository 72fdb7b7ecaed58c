/*
 * layers: forward, backward and update of every device layer kind, and the
 * dispatcher net.c calls.  Each kind computes what libdarknet's CPU layer
 * computes (ops.h has the formulas); the convolution itself is in conv.cu,
 * batch norm in bn.cu.  YOLO and region layers compute their loss on the
 * host (net.c); here they only carry their delta back.  The kinds' names
 * and parameter sizes are in dlayer.c (shared with the simulated layers).
 */
#include "bn.cuh"
#include "dlayer.h"
#include "layers.cuh"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- kernels of the simpler kinds --------------------------------------------- */

/* Geometry structs passed by value: plain numbers, no device pointers. */
SDNN_PLAIN_STRUCT(sdnn_pool_geom)
SDNN_PLAIN_STRUCT(sdnn_shortcut_geom)

/* The (int) casts below hand an element index to ops.h's int index maps
 * (libdarknet sizes its buffers with int); sdnn_dl_setup refuses a layer
 * whose input or output times the batch exceeds INT_MAX
 * (sdnn_dl_check_size), so every index these kernels cast is below it. */

__global__ void k_maxpool_fwd(const float *in, sdnn_pool_geom g, size_t n, float *out, int *idx)
{
    SDNN_FOR(o, n) {
        int a;
        out[o] = sdnn_maxpool_elem(in, &g, (int)o, &a);
        idx[o] = a;
    }
}

__global__ void k_maxpool_bwd(const float *delta, const int *idx, sdnn_pool_geom g, size_t n,
                              float *prev)
{
    SDNN_FOR(t, n) prev[t] += sdnn_maxpool_grad_elem(delta, idx, &g, (int)t);
}

/* Global average: one thread per (image, channel), summed in index order. */
__global__ void k_avgpool_fwd(const float *in, int hw, size_t n, float *out)
{
    SDNN_FOR(o, n) out[o] = sdnn_avgpool_elem(in, hw, o);
}

__global__ void k_avgpool_bwd(const float *delta, int hw, size_t n, float *prev)
{
    SDNN_FOR(t, n) prev[t] += sdnn_avgpool_grad_elem(delta, hw, t);
}

/* dst[b*dpitch + i] (+)= src[b*spitch + i] for i < len. */
__global__ void k_rows_add(const float *src, size_t spitch, float *dst, size_t dpitch, size_t len,
                           size_t rows)
{
    SDNN_FOR(e, len * rows) {
        size_t b = e / len, i = e % len;
        dst[b * dpitch + i] += src[b * spitch + i];
    }
}

__global__ void k_shortcut(sdnn_shortcut_geom g, float s1, float s2, const float *add, float *out,
                           size_t n)
{
    SDNN_FOR(e, n) {
        int fi;
        int oi = sdnn_shortcut_map(&g, (int)e, &fi);
        out[oi] = sdnn_shortcut_elem(out[oi], add[fi], s1, s2);
    }
}

__global__ void k_upsample_fwd(const float *in, int w, int h, int c, int s, float scale,
                               size_t n, float *out)
{
    SDNN_FOR(o, n) out[o] = scale * in[sdnn_upsample_src((int)o, w, h, c, s)];
}

/* prev[t] += scale * delta of every output copied from t. */
__global__ void k_upsample_bwd(const float *delta, int w, int h, int s, float scale, size_t n,
                               float *prev)
{
    SDNN_FOR(t, n) prev[t] = sdnn_upsample_grad_elem(delta, w, h, s, scale, t, prev[t]);
}

/* One row (image x group) per thread, as Darknet's softmax(). */
__global__ void k_softmax(const float *in, int n, int rows, int groups, int batch_offset,
                          int group_offset, float temp, float *out)
{
    SDNN_FOR(r, (size_t)rows) {
        int b = (int)r / groups, g = (int)r % groups;
        const float *x = in + (size_t)b * batch_offset + (size_t)g * group_offset;
        float *y = out + (size_t)b * batch_offset + (size_t)g * group_offset;
        sdnn_softmax_row(x, n, temp, y);
    }
}

__global__ void k_softmax_xent(const float *p, const float *t, size_t n, float *delta,
                               float *loss)
{
    SDNN_FOR(i, n) {
        float d;
        loss[i] = sdnn_xent_elem(p[i], t[i], &d);
        delta[i] = d;
    }
}

__global__ void k_cost(int type, float *pred, const float *truth, size_t n, float *delta,
                       float *err)
{
    SDNN_FOR(i, n) {
        float d;
        err[i] = sdnn_cost_layer_elem(type, &pred[i], truth[i], &d);
        delta[i] = d;
    }
}

__global__ void k_dropout_fwd(float *x, float *rnd, size_t n, float p, float scale,
                              uint64_t seed, uint64_t pass)
{
    SDNN_FOR(i, n) {
        float r = sdnn_dropout_uniform(seed, pass, i);
        rnd[i] = r;
        x[i] = sdnn_dropout_elem(x[i], r, p, scale);
    }
}

__global__ void k_dropout_bwd(float *d, const float *rnd, size_t n, float p, float scale)
{
    SDNN_FOR(i, n) d[i] = sdnn_dropout_elem(d[i], rnd[i], p, scale);
}

/* Region layer (Darknet's GPU backward): logistic gradient on x, y, the
 * extra coordinates and the objectness of every anchor. */
__global__ void k_region_grad(const float *out, float *delta, int outputs, int wh, int coords,
                              int classes, int background, size_t n)
{
    SDNN_FOR(i, n) {
        if (sdnn_region_logistic((int)(i % outputs), wh, coords, classes, background))
            delta[i] *= sdnn_gradient(out[i], SDNN_ACT_LOGISTIC);
    }
}

__global__ void k_sgd(float *w, float *u, size_t n, float decay_scale, float rate, float momentum)
{
    SDNN_FOR(i, n) sdnn_sgd_elem(&w[i], &u[i], decay_scale, rate, momentum);
}

/* ---- setup ------------------------------------------------------------------------ */

#define ALLOC(ptr, count)                                                              \
    SDNN_CHECK(sdnn_dmalloc(c, (size_t)(count) * sizeof *(ptr), (void **)&(ptr)))

extern "C" sdnn_status sdnn_dl_setup(sdnn_dctx *c, sdnn_dlayer *l)
{
    sdnn_dl_impl *im = (sdnn_dl_impl *)calloc(1, sizeof *im);
    if (!im) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for layer %d", l->index);
    l->impl = im;
    SDNN_CHECK(sdnn_dl_check_size(l));
    size_t out = (size_t)l->outputs * l->batch;
    size_t in = (size_t)l->inputs * l->batch;
    if (l->kind != SDNN_DL_DROPOUT) {
        ALLOC(l->output, out);
        ALLOC(l->delta, out);
    }
    switch (l->kind) {
    case SDNN_DL_CONV:
    case SDNN_DL_CONNECTED: {
        int ch = l->kind == SDNN_DL_CONV ? l->out_c : l->outputs;
        ALLOC(im->partial, sdnn_bn_partial_floats(ch));
        if (l->bn) {
            ALLOC(l->mean, ch);
            ALLOC(l->variance, ch);
            ALLOC(l->mean_delta, ch);
            ALLOC(l->variance_delta, ch);
            ALLOC(l->rolling_mean, ch);
            ALLOC(l->rolling_variance, ch);
            ALLOC(l->x, out);
            ALLOC(l->x_norm, out);
        }
        if (l->kind == SDNN_DL_CONV) SDNN_CHECK(sdnn_conv_setup(c, l, im));
        break;
    }
    case SDNN_DL_MAXPOOL: ALLOC(l->indexes, out); break;
    case SDNN_DL_DROPOUT: ALLOC(l->rand, (size_t)l->inputs * l->batch); break;
    case SDNN_DL_SOFTMAX: ALLOC(l->loss, in); break;
    default: break;
    }
    if (l->kind == SDNN_DL_SOFTMAX || l->kind == SDNN_DL_COST) {
        /* The loss the forward brings to the host, pinned once here. */
        SDNN_CU(cudaMallocHost((void **)&im->loss_host, (in ? in : 1) * sizeof(float)));
        im->loss_floats = in;
    }
    if (sdnn_dl_act_keeps_x(l)) ALLOC(l->act_x, out);
    return SDNN_OK;
}

extern "C" void sdnn_dl_release(sdnn_dlayer *l)
{
    sdnn_dl_impl *im = (sdnn_dl_impl *)l->impl;
    if (im) {
        sdnn_conv_release(im);
        sdnn_dfree(im->partial);
        if (im->loss_host) cudaFreeHost(im->loss_host);
        free(im);
        l->impl = NULL;
    }
    sdnn_dl_release_buffers(l);
}

/* ---- forward ---------------------------------------------------------------------- */

/* The sum of a softmax's or cost's n loss floats in index order, as
 * Darknet's sum_array and sdnn_dl_host_sum, through the layer's pinned
 * buffer (no allocation per call).  The trainer reads the cost right after
 * the forward, so this waits for the compute stream. */
static sdnn_status loss_sum(sdnn_dctx *c, sdnn_dlayer *l, const float *d, size_t n, float *sum)
{
    sdnn_dl_impl *im = (sdnn_dl_impl *)l->impl;
    if (!im->loss_host || n > im->loss_floats)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: loss of %zu floats, %zu set up",
                          l->index, n, im->loss_floats);
    SDNN_CU(cudaMemcpyAsync(im->loss_host, d, n * sizeof(float), cudaMemcpyDeviceToHost,
                            sdnn_stream(c, SDNN_STREAM_COMPUTE)));
    SDNN_CU(cudaStreamSynchronize(sdnn_stream(c, SDNN_STREAM_COMPUTE)));
    float s = 0;
    for (size_t i = 0; i < n; ++i) s += im->loss_host[i];
    *sum = s;
    return SDNN_OK;
}

static sdnn_bn_args bn_args(sdnn_dlayer *l, int channels, int spatial)
{
    sdnn_bn_args a;
    a.batch = l->batch;
    a.channels = channels;
    a.spatial = spatial;
    a.exact = l->bn_exact;
    a.out = l->output;
    a.delta = l->delta;
    a.x = l->x;
    a.x_norm = l->x_norm;
    a.mean = l->mean;
    a.var = l->variance;
    a.rolling_mean = l->rolling_mean;
    a.rolling_var = l->rolling_variance;
    a.scales = l->scales;
    a.biases = l->biases;
    a.scale_updates = l->scale_updates;
    a.bias_updates = l->bias_updates;
    a.mean_delta = l->mean_delta;
    a.var_delta = l->variance_delta;
    a.partial = ((sdnn_dl_impl *)l->impl)->partial;
    return a;
}

static sdnn_status norm_bias_act(sdnn_dctx *c, sdnn_dlayer *l, int ch, int sp, int train)
{
    if (l->bn) {
        sdnn_bn_args a = bn_args(l, ch, sp);
        SDNN_CHECK(sdnn_bn_forward(c, &a, train));
    } else {
        SDNN_CHECK(sdnn_bias_forward(c, l->output, l->biases, l->batch, ch, sp));
    }
    return sdnn_dl_activate(c, l);
}

static sdnn_status act_norm_bias_backward(sdnn_dctx *c, sdnn_dlayer *l, int ch, int sp)
{
    SDNN_CHECK(sdnn_dl_act_backward(c, l));
    if (l->bn) {
        sdnn_bn_args a = bn_args(l, ch, sp);
        return sdnn_bn_backward(c, &a);
    }
    return sdnn_bias_backward(c, l->bias_updates, l->delta, l->batch, ch, sp,
                              ((sdnn_dl_impl *)l->impl)->partial);
}

extern "C" sdnn_status sdnn_dl_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    size_t out = (size_t)l->outputs * l->batch;
    size_t in = (size_t)l->inputs * l->batch;
    cudaStream_t st = sdnn_stream(c, SDNN_STREAM_COMPUTE);
    l->has_cost = 0;
    switch (l->kind) {
    case SDNN_DL_CONV:
        SDNN_CHECK(sdnn_conv_forward(c, l, s));
        return norm_bias_act(c, l, l->out_c, l->out_h * l->out_w, s->train);
    case SDNN_DL_CONNECTED:
        SDNN_CHECK(sdnn_gemm_rm(c, 0, 1, l->batch, l->outputs, l->inputs, 1, s->input, l->inputs,
                                l->weights, l->inputs, 0, l->output, l->outputs));
        return norm_bias_act(c, l, l->outputs, 1, s->train);
    case SDNN_DL_MAXPOOL: {
        sdnn_pool_geom g = {l->w, l->h, l->c, l->out_w, l->out_h, l->size, l->stride, l->pad};
        SDNN_LAUNCH(k_maxpool_fwd, sdnn_grid(out), SDNN_THREADS, 0, st, s->input, g, out, l->output,
                    l->indexes);
        SDNN_LAUNCHED("maxpool");
        return SDNN_OK;
    }
    case SDNN_DL_AVGPOOL:
        SDNN_LAUNCH(k_avgpool_fwd, sdnn_grid(out), SDNN_THREADS, 0, st, s->input, l->w * l->h, out,
                    l->output);
        SDNN_LAUNCHED("avgpool");
        return SDNN_OK;
    case SDNN_DL_ROUTE: {
        size_t off = 0;
        for (int j = 0; j < l->nroute; ++j) {
            const sdnn_dlayer *from = &s->layers[l->route_from[j]];
            size_t len = (size_t)l->route_size[j];
            SDNN_CU(cudaMemcpy2DAsync(l->output + off, (size_t)l->outputs * sizeof(float),
                                      from->output + l->route_off[j],
                                      (size_t)from->outputs * sizeof(float), len * sizeof(float),
                                      (size_t)l->batch, cudaMemcpyDeviceToDevice, st));
            off += len;
        }
        return SDNN_OK;
    }
    case SDNN_DL_SHORTCUT: {
        SDNN_CHECK(sdnn_k_copy(c, l->output, s->input, out));
        sdnn_shortcut_geom g;
        sdnn_shortcut_geom_init(&g, l->w, l->h, l->c, l->out_w, l->out_h, l->out_c);
        size_t n = (size_t)g.minw * g.minh * g.minc * l->batch;
        SDNN_LAUNCH(k_shortcut, sdnn_grid(n), SDNN_THREADS, 0, st, g, l->alpha, l->beta,
                    s->layers[l->from].output, l->output, n);
        SDNN_LAUNCHED("shortcut");
        return sdnn_dl_activate(c, l);
    }
    case SDNN_DL_UPSAMPLE:
        SDNN_LAUNCH(k_upsample_fwd, sdnn_grid(out), SDNN_THREADS, 0, st, s->input, l->w, l->h, l->c,
                    l->stride, l->scale, out, l->output);
        SDNN_LAUNCHED("upsample");
        return SDNN_OK;
    case SDNN_DL_SOFTMAX: {
        int groups = l->softmax_groups;
        int n = l->inputs / groups;
        SDNN_LAUNCH(k_softmax, sdnn_grid((size_t)l->batch * groups), SDNN_THREADS, 0, st, s->input,
                    n, l->batch * groups, groups, l->inputs, n, l->temperature, l->output);
        SDNN_LAUNCHED("softmax");
        if (s->truth && !l->noloss) {
            SDNN_LAUNCH(k_softmax_xent, sdnn_grid(in), SDNN_THREADS, 0, st, l->output, s->truth, in,
                        l->delta, l->loss);
            SDNN_LAUNCHED("softmax loss");
            SDNN_CHECK(loss_sum(c, l, l->loss, in, &l->cost));
            l->has_cost = 1;
        }
        return SDNN_OK;
    }
    case SDNN_DL_COST:
        if (!s->truth) return SDNN_OK;
        /* The masked cost writes SECRET_NUM into its input, as Darknet. */
        SDNN_LAUNCH(k_cost, sdnn_grid(in), SDNN_THREADS, 0, st, l->cost_type, (float *)s->input,
                    s->truth, in, l->delta, l->output);
        SDNN_LAUNCHED("cost");
        SDNN_CHECK(loss_sum(c, l, l->output, in, &l->cost));
        l->has_cost = 1;
        return SDNN_OK;
    case SDNN_DL_DROPOUT:
        if (!s->train) return SDNN_OK;
        /* In place on the previous layer's output, which this layer's
         * output aliases. */
        SDNN_LAUNCH(k_dropout_fwd, sdnn_grid(in), SDNN_THREADS, 0, st, l->output, l->rand, in,
                    l->probability, l->scale, l->seed, l->draws++);
        SDNN_LAUNCHED("dropout");
        return SDNN_OK;
    case SDNN_DL_YOLO:
    case SDNN_DL_REGION:
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: %s forward runs on the host (net.c)",
                          l->index, sdnn_dl_kind_name(l->kind));
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no device forward for kind %d",
                          l->index, l->kind);
    }
}

/* ---- backward --------------------------------------------------------------------- */

extern "C" sdnn_status sdnn_dl_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    size_t out = (size_t)l->outputs * l->batch;
    size_t in = (size_t)l->inputs * l->batch;
    cudaStream_t st = sdnn_stream(c, SDNN_STREAM_COMPUTE);
    switch (l->kind) {
    case SDNN_DL_CONV:
        SDNN_CHECK(act_norm_bias_backward(c, l, l->out_c, l->out_h * l->out_w));
        return sdnn_conv_backward(c, l, s);
    case SDNN_DL_CONNECTED:
        SDNN_CHECK(act_norm_bias_backward(c, l, l->outputs, 1));
        SDNN_CHECK(sdnn_gemm_rm(c, 1, 0, l->outputs, l->inputs, l->batch, 1, l->delta,
                                l->outputs, s->input, l->inputs, 1, l->weight_updates,
                                l->inputs));
        if (s->delta)
            SDNN_CHECK(sdnn_gemm_rm(c, 0, 0, l->batch, l->inputs, l->outputs, 1, l->delta,
                                    l->outputs, l->weights, l->inputs, 1, s->delta, l->inputs));
        return SDNN_OK;
    case SDNN_DL_MAXPOOL: {
        if (!s->delta) return SDNN_OK;
        sdnn_pool_geom g = {l->w, l->h, l->c, l->out_w, l->out_h, l->size, l->stride, l->pad};
        SDNN_LAUNCH(k_maxpool_bwd, sdnn_grid(in), SDNN_THREADS, 0, st, l->delta, l->indexes, g, in,
                    s->delta);
        SDNN_LAUNCHED("maxpool backward");
        return SDNN_OK;
    }
    case SDNN_DL_AVGPOOL:
        if (!s->delta) return SDNN_OK;
        SDNN_LAUNCH(k_avgpool_bwd, sdnn_grid(in), SDNN_THREADS, 0, st, l->delta, l->w * l->h, in,
                    s->delta);
        SDNN_LAUNCHED("avgpool backward");
        return SDNN_OK;
    case SDNN_DL_ROUTE: {
        size_t off = 0;
        for (int j = 0; j < l->nroute; ++j) {
            sdnn_dlayer *from = &s->layers[l->route_from[j]];
            size_t len = (size_t)l->route_size[j];
            SDNN_LAUNCH(k_rows_add, sdnn_grid(len * l->batch), SDNN_THREADS, 0, st, l->delta + off,
                        (size_t)l->outputs, from->delta + l->route_off[j], (size_t)from->outputs,
                        len, (size_t)l->batch);
            SDNN_LAUNCHED("route backward");
            off += len;
        }
        return SDNN_OK;
    }
    case SDNN_DL_SHORTCUT: {
        SDNN_CHECK(sdnn_dl_act_backward(c, l));
        if (s->delta) SDNN_CHECK(sdnn_k_axpy(c, out, l->alpha, l->delta, s->delta));
        sdnn_shortcut_geom g;
        sdnn_shortcut_geom_init(&g, l->out_w, l->out_h, l->out_c, l->w, l->h, l->c);
        size_t n = (size_t)g.minw * g.minh * g.minc * l->batch;
        SDNN_LAUNCH(k_shortcut, sdnn_grid(n), SDNN_THREADS, 0, st, g, 1.0f, l->beta, l->delta,
                    s->layers[l->from].delta, n);
        SDNN_LAUNCHED("shortcut backward");
        return SDNN_OK;
    }
    case SDNN_DL_UPSAMPLE:
        if (!s->delta) return SDNN_OK;
        SDNN_LAUNCH(k_upsample_bwd, sdnn_grid(in), SDNN_THREADS, 0, st, l->delta, l->w, l->h,
                    l->stride, l->scale, in, s->delta);
        SDNN_LAUNCHED("upsample backward");
        return SDNN_OK;
    case SDNN_DL_SOFTMAX:
    case SDNN_DL_YOLO:
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, in, 1.0f, l->delta, s->delta);
    case SDNN_DL_COST:
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, in, l->scale, l->delta, s->delta);
    case SDNN_DL_DROPOUT:
        if (!s->delta) return SDNN_OK;
        SDNN_LAUNCH(k_dropout_bwd, sdnn_grid(in), SDNN_THREADS, 0, st, s->delta, l->rand, in,
                    l->probability, l->scale);
        SDNN_LAUNCHED("dropout backward");
        return SDNN_OK;
    case SDNN_DL_REGION:
        SDNN_LAUNCH(k_region_grad, sdnn_grid(out), SDNN_THREADS, 0, st, l->output, l->delta,
                    l->outputs, l->w * l->h, l->coords, l->classes, l->background, out);
        SDNN_LAUNCHED("region backward");
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, in, 1.0f, l->delta, s->delta);
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no device backward for kind %d",
                          l->index, l->kind);
    }
}

/* ---- update ----------------------------------------------------------------------- */

extern "C" sdnn_status sdnn_dl_update(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dupdate *a)
{
    if (l->kind != SDNN_DL_CONV && l->kind != SDNN_DL_CONNECTED) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, SDNN_STREAM_COMPUTE);
    float lr = a->learning_rate * l->lr_scale;
    float rate = lr / a->batch;
    float decay = -a->decay * a->batch;
    size_t nb = sdnn_dl_nbiases(l), nw = sdnn_dl_nweights(l);
    SDNN_LAUNCH(k_sgd, sdnn_grid(nb), SDNN_THREADS, 0, st, l->biases, l->bias_updates, nb, 0.0f,
                rate, a->momentum);
    SDNN_LAUNCHED("update biases");
    if (l->bn) {
        SDNN_LAUNCH(k_sgd, sdnn_grid(nb), SDNN_THREADS, 0, st, l->scales, l->scale_updates, nb,
                    0.0f, rate, a->momentum);
        SDNN_LAUNCHED("update scales");
    }
    SDNN_LAUNCH(k_sgd, sdnn_grid(nw), SDNN_THREADS, 0, st, l->weights, l->weight_updates, nw, decay,
                rate, a->momentum);
    SDNN_LAUNCHED("update weights");
    return SDNN_OK;
}
