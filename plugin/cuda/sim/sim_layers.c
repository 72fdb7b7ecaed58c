/*
 * sim_layers: dev.h's layers on the simulated device (make GPU=sim): setup,
 * forward, backward and Darknet's update of every sdnn_dl_kind, as
 * layers.cu, conv.cu (its CUDNN=0 path: im2col + gemm per image and group)
 * and bn.cu compute them.
 *
 * A layer pass becomes simulated kernels queued on the context's compute
 * stream (sdnn_sim_launch): each kernel is a function over an argument
 * block that holds everything it needs, captured at launch as a CUDA
 * launch captures its arguments: every device pointer translated to its
 * host address by sdnn_sim_dptr in the launching thread (so a bad pointer
 * fails at the call that passed it, naming it), every scalar copied.  The
 * layer struct, and the source layers of route and shortcut, may change
 * before the kernel runs.  Element kernels (copy, axpy, activations) are
 * the runtime's sdnn_k_*.
 *
 * Every element comes from ops.h, the formulas the .cu kernels apply; gemm
 * is OpenBLAS's cblas_sgemm; reductions (batch-norm statistics, bias and
 * scale gradients) run per channel over (image, position) in index order,
 * so reruns give the same bits.  What this shows is the engine's host
 * logic, ordering and arithmetic, never a kernel's behaviour on a GPU.
 */
#include "sim.h"

#include "dlayer.h"
#include "ops.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUTE SDNN_DL_MAX_ROUTE

/* ---- launching ---------------------------------------------------------------- */

/* The host address of n floats at device address p (NULL for p == NULL, n == 0). */
static sdnn_status dp(sdnn_dctx *c, const void *p, size_t n, const char *call, float **h)
{
    void *v = NULL;
    SDNN_CHECK(sdnn_sim_dptr(c, p, n * sizeof(float), call, &v));
    *h = v;
    return SDNN_OK;
}

#define DP(ptr, n, out) SDNN_CHECK(dp(c, (ptr), (n), call, (float **)(out)))

static sdnn_status launch(sdnn_dctx *c, const char *call, sdnn_sim_fn fn, const void *a,
                          size_t size)
{
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, call, fn, a, size);
}

static size_t outs(const sdnn_dlayer *l) { return (size_t)l->outputs * l->batch; }
static size_t ins(const sdnn_dlayer *l) { return (size_t)l->inputs * l->batch; }

/* Darknet's row-major gemm: C = alpha op(A) op(B) + beta C. */
static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *cm, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, a, lda, b, ldb, beta, cm, ldc);
}

/* ---- gemm (connected) ----------------------------------------------------------- */

typedef struct k_gemm_args {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} k_gemm_args;

static sdnn_status k_gemm(void *arg)
{
    const k_gemm_args *g = arg;
    gemm(g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb, g->beta, g->c,
         g->ldc);
    return SDNN_OK;
}

/* The extents of op(A) (m x k), op(B) (k x n) and C (m x n) with their
 * leading dimensions, for the translation. */
static sdnn_status launch_gemm(sdnn_dctx *c, const char *call, int ta, int tb, int m, int n, int k,
                               float alpha, const float *a, int lda, const float *b, int ldb,
                               float beta, float *cm, int ldc)
{
    k_gemm_args g = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, NULL, NULL, NULL};
    size_t arows = ta ? (size_t)k : (size_t)m, brows = tb ? (size_t)n : (size_t)k;
    DP(a, arows * lda, &g.a);
    DP(b, brows * ldb, &g.b);
    DP(cm, (size_t)m * ldc, &g.c);
    return launch(c, call, k_gemm, &g, sizeof g);
}

/* ---- convolution: im2col + gemm per image and group -------------------------------- */

typedef struct k_conv_args {
    sdnn_conv_geom g;
    int batch, groups, m, k, n, direct;
    size_t in_step, out_step, w_step;   /* per (image, group) and per group */
    const float *in, *w, *delta;
    float *out, *col, *wu, *prev;       /* forward: out; backward: wu, prev (may be NULL) */
} k_conv_args;

static sdnn_status k_conv_fwd(void *arg)
{
    const k_conv_args *a = arg;
    size_t ncol = (size_t)a->k * a->n;
    for (int b = 0; b < a->batch; ++b) {
        for (int j = 0; j < a->groups; ++j) {
            const float *in = a->in + ((size_t)b * a->groups + j) * a->in_step;
            const float *src = in;
            if (!a->direct) {
                for (size_t i = 0; i < ncol; ++i) a->col[i] = sdnn_im2col_elem(in, &a->g, i);
                src = a->col;
            }
            gemm(0, 0, a->m, a->n, a->k, 1, a->w + (size_t)j * a->w_step, a->k, src, a->n, 0,
                 a->out + ((size_t)b * a->groups + j) * a->out_step, a->n);
        }
    }
    return SDNN_OK;
}

static sdnn_status k_conv_bwd(void *arg)
{
    const k_conv_args *a = arg;
    size_t ncol = (size_t)a->k * a->n, nim = (size_t)a->g.ch * a->g.h * a->g.w;
    for (int b = 0; b < a->batch; ++b) {
        for (int j = 0; j < a->groups; ++j) {
            size_t bj = (size_t)b * a->groups + j;
            const float *d = a->delta + bj * a->out_step;
            const float *in = a->in + bj * a->in_step;
            const float *wt = a->w + (size_t)j * a->w_step;
            const float *src = in;
            if (!a->direct) {
                for (size_t i = 0; i < ncol; ++i) a->col[i] = sdnn_im2col_elem(in, &a->g, i);
                src = a->col;
            }
            gemm(0, 1, a->m, a->k, a->n, 1, d, a->n, src, a->n, 1, a->wu + (size_t)j * a->w_step,
                 a->k);
            if (!a->prev) continue;
            float *pd = a->prev + bj * a->in_step;
            if (a->direct) {
                gemm(1, 0, a->k, a->n, a->m, 1, wt, a->k, d, a->n, 1, pd, a->n);
            } else {
                gemm(1, 0, a->k, a->n, a->m, 1, wt, a->k, d, a->n, 0, a->col, a->n);
                for (size_t i = 0; i < nim; ++i) pd[i] += sdnn_col2im_elem(a->col, &a->g, i);
            }
        }
    }
    return SDNN_OK;
}

static size_t conv_col_bytes(const sdnn_dlayer *l)
{
    return (size_t)(l->c / l->groups) * l->size * l->size * l->out_h * l->out_w * sizeof(float);
}

static sdnn_status conv_args(sdnn_dctx *c, const sdnn_dlayer *l, const sdnn_dstate *s,
                             const char *call, k_conv_args *a)
{
    memset(a, 0, sizeof *a);
    int g = l->groups;
    sdnn_conv_geom cg = {l->c / g, l->h, l->w, l->size, l->stride, l->pad, l->out_h, l->out_w};
    a->g = cg;
    a->batch = l->batch;
    a->groups = g;
    a->m = l->n / g;
    a->k = l->size * l->size * l->c / g;
    a->n = l->out_h * l->out_w;
    a->direct = l->size == 1 && l->stride == 1 && l->pad == 0;
    a->in_step = (size_t)(l->c / g) * l->h * l->w;
    a->out_step = (size_t)a->m * a->n;
    a->w_step = (size_t)l->nweights / g;
    DP(s->input, ins(l), &a->in);
    DP(l->weights, (size_t)l->nweights, &a->w);
    if (!a->direct) {
        size_t need = conv_col_bytes(l);
        if (!s->workspace || s->workspace_bytes < need)
            return SDNN_ERROR(SDNN_ERR_INTERNAL,
                              "%s: layer %d needs a workspace of %zu bytes, has %zu", call,
                              l->index, need, s->workspace ? s->workspace_bytes : (size_t)0);
        DP(s->workspace, need / sizeof(float), &a->col);
    }
    return SDNN_OK;
}

static sdnn_status conv_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    const char *call = "sdnn_dl_forward (convolutional)";
    k_conv_args a;
    SDNN_CHECK(conv_args(c, l, s, call, &a));
    DP(l->output, outs(l), &a.out);
    return launch(c, call, k_conv_fwd, &a, sizeof a);
}

static sdnn_status conv_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    const char *call = "sdnn_dl_backward (convolutional)";
    k_conv_args a;
    SDNN_CHECK(conv_args(c, l, s, call, &a));
    DP(l->delta, outs(l), &a.delta);
    DP(l->weight_updates, (size_t)l->nweights, &a.wu);
    if (s->delta) DP(s->delta, ins(l), &a.prev);
    return launch(c, call, k_conv_bwd, &a, sizeof a);
}

/* ---- biases and batch normalisation -------------------------------------------------- */

typedef struct k_bn_args {
    int batch, C, S, train, exact;
    float *out, *delta, *x, *x_norm;
    float *mean, *var, *rolling_mean, *rolling_var;
    float *scales, *biases, *scale_updates, *bias_updates, *mean_delta, *var_delta;
} k_bn_args;

/* sum over (image, position) of f(element index), for channel ch, in order */
#define CHANNEL_FOR(a, ch, i)                                                          \
    for (int b_ = 0; b_ < (a)->batch; ++b_)                                            \
        for (size_t i = ((size_t)b_ * (a)->C + (ch)) * (a)->S,                        \
                    e_ = i + (size_t)(a)->S;                                           \
             i < e_; ++i)

static sdnn_status k_add_bias(void *arg)
{
    const k_bn_args *a = arg;
    size_t n = (size_t)a->batch * a->C * a->S;
    for (size_t i = 0; i < n; ++i) a->out[i] += a->biases[sdnn_bn_channel(i, a->C, a->S)];
    return SDNN_OK;
}

static sdnn_status k_bias_grad(void *arg)
{
    const k_bn_args *a = arg;
    for (int ch = 0; ch < a->C; ++ch) {
        float s = 0;
        CHANNEL_FOR(a, ch, i) s += a->delta[i];
        a->bias_updates[ch] += s;
    }
    return SDNN_OK;
}

static sdnn_status k_bn_fwd(void *arg)
{
    const k_bn_args *a = arg;
    size_t m = (size_t)a->batch * a->S, n = m * a->C;
    if (!a->train) {
        for (size_t i = 0; i < n; ++i) {
            int ch = sdnn_bn_channel(i, a->C, a->S);
            float z = sdnn_bn_normalize(a->out[i], a->rolling_mean[ch], a->rolling_var[ch]);
            a->out[i] = sdnn_bn_scale_shift(z, a->scales[ch], a->biases[ch]);
        }
        return SDNN_OK;
    }
    float inv_m = sdnn_bn_mean_scale(m), inv_m1 = sdnn_bn_var_scale(m);
    for (int ch = 0; ch < a->C; ++ch) {
        float s = 0;
        CHANNEL_FOR(a, ch, i) s += a->out[i];
        float mu = s * inv_m;
        float v = 0;
        CHANNEL_FOR(a, ch, i) v += sdnn_bn_var_term(a->out[i], mu);
        a->mean[ch] = mu;
        a->var[ch] = v * inv_m1;
        a->rolling_mean[ch] = sdnn_bn_rolling(a->rolling_mean[ch], a->mean[ch]);
        a->rolling_var[ch] = sdnn_bn_rolling(a->rolling_var[ch], a->var[ch]);
    }
    for (size_t i = 0; i < n; ++i) {
        int ch = sdnn_bn_channel(i, a->C, a->S);
        float v = a->out[i];
        a->x[i] = v;
        float z = sdnn_bn_normalize(v, a->mean[ch], a->var[ch]);
        a->x_norm[i] = z;
        a->out[i] = sdnn_bn_scale_shift(z, a->scales[ch], a->biases[ch]);
    }
    return SDNN_OK;
}

static sdnn_status k_bn_bwd(void *arg)
{
    const k_bn_args *a = arg;
    size_t m = (size_t)a->batch * a->S, n = m * a->C;
    for (int ch = 0; ch < a->C; ++ch) {
        float sum[3] = {0, 0, 0}, t[3];
        float mu = a->mean[ch];
        CHANNEL_FOR(a, ch, i) {
            sdnn_bn_backward_terms(a->delta[i], a->x_norm[i], a->x[i], mu, t);
            for (int k = 0; k < 3; ++k) sum[k] += t[k];
        }
        if (a->exact)
            sdnn_bn_backward_channel_exact(sum, a->scales[ch], a->var[ch], m,
                                           &a->bias_updates[ch], &a->scale_updates[ch],
                                           &a->mean_delta[ch], &a->var_delta[ch]);
        else
            sdnn_bn_backward_channel(sum, a->scales[ch], a->var[ch], &a->bias_updates[ch],
                                     &a->scale_updates[ch], &a->mean_delta[ch],
                                     &a->var_delta[ch]);
    }
    for (size_t i = 0; i < n; ++i) {
        int ch = sdnn_bn_channel(i, a->C, a->S);
        a->delta[i] = a->exact ? sdnn_bn_delta_elem_exact(a->delta[i], a->scales[ch], a->x[i],
                                                          a->mean[ch], a->var[ch],
                                                          a->mean_delta[ch], a->var_delta[ch],
                                                          (int)m)
                               : sdnn_bn_delta_elem(a->delta[i], a->scales[ch], a->x[i],
                                                    a->mean[ch], a->var[ch], a->mean_delta[ch],
                                                    a->var_delta[ch], (int)m);
    }
    return SDNN_OK;
}

/* The channels and positions of a conv (out_c x out_h*out_w) or connected
 * (outputs x 1) layer. */
static void channels_of(const sdnn_dlayer *l, int *C, int *S)
{
    *C = l->kind == SDNN_DL_CONV ? l->out_c : l->outputs;
    *S = l->kind == SDNN_DL_CONV ? l->out_h * l->out_w : 1;
}

static sdnn_status norm_bias_act(sdnn_dctx *c, sdnn_dlayer *l, int train, const char *call)
{
    k_bn_args a;
    memset(&a, 0, sizeof a);
    channels_of(l, &a.C, &a.S);
    a.batch = l->batch;
    a.train = train;
    size_t ch = (size_t)a.C, out = outs(l);
    DP(l->output, out, &a.out);
    DP(l->biases, ch, &a.biases);
    if (l->bn) {
        DP(l->scales, ch, &a.scales);
        DP(l->rolling_mean, ch, &a.rolling_mean);
        DP(l->rolling_variance, ch, &a.rolling_var);
        if (train) {
            DP(l->mean, ch, &a.mean);
            DP(l->variance, ch, &a.var);
            DP(l->x, out, &a.x);
            DP(l->x_norm, out, &a.x_norm);
        }
        SDNN_CHECK(launch(c, call, k_bn_fwd, &a, sizeof a));
    } else {
        SDNN_CHECK(launch(c, call, k_add_bias, &a, sizeof a));
    }
    return sdnn_dl_activate(c, l);
}

static sdnn_status act_norm_bias_backward(sdnn_dctx *c, sdnn_dlayer *l, const char *call)
{
    size_t out = outs(l);
    SDNN_CHECK(sdnn_dl_act_backward(c, l));
    k_bn_args a;
    memset(&a, 0, sizeof a);
    channels_of(l, &a.C, &a.S);
    a.batch = l->batch;
    size_t ch = (size_t)a.C;
    DP(l->delta, out, &a.delta);
    DP(l->bias_updates, ch, &a.bias_updates);
    if (!l->bn) return launch(c, call, k_bias_grad, &a, sizeof a);
    a.exact = l->bn_exact;
    DP(l->x, out, &a.x);
    DP(l->x_norm, out, &a.x_norm);
    DP(l->mean, ch, &a.mean);
    DP(l->variance, ch, &a.var);
    DP(l->scales, ch, &a.scales);
    DP(l->scale_updates, ch, &a.scale_updates);
    DP(l->mean_delta, ch, &a.mean_delta);
    DP(l->variance_delta, ch, &a.var_delta);
    return launch(c, call, k_bn_bwd, &a, sizeof a);
}

/* ---- pooling, upsample, shortcut, route -------------------------------------------- */

typedef struct k_pool_args {
    sdnn_pool_geom g;
    int hw;
    size_t n;
    const float *in, *delta;
    float *out, *prev;
    int *idx;
} k_pool_args;

static sdnn_status k_maxpool_fwd(void *arg)
{
    const k_pool_args *a = arg;
    for (size_t o = 0; o < a->n; ++o) {
        int arg_i;
        a->out[o] = sdnn_maxpool_elem(a->in, &a->g, (int)o, &arg_i);
        a->idx[o] = arg_i;
    }
    return SDNN_OK;
}

static sdnn_status k_maxpool_bwd(void *arg)
{
    const k_pool_args *a = arg;
    for (size_t t = 0; t < a->n; ++t)
        a->prev[t] += sdnn_maxpool_grad_elem(a->delta, a->idx, &a->g, (int)t);
    return SDNN_OK;
}

static sdnn_status k_avgpool_fwd(void *arg)
{
    const k_pool_args *a = arg;
    for (size_t o = 0; o < a->n; ++o) a->out[o] = sdnn_avgpool_elem(a->in, a->hw, o);
    return SDNN_OK;
}

static sdnn_status k_avgpool_bwd(void *arg)
{
    const k_pool_args *a = arg;
    for (size_t t = 0; t < a->n; ++t) a->prev[t] += sdnn_avgpool_grad_elem(a->delta, a->hw, t);
    return SDNN_OK;
}

typedef struct k_up_args {
    int w, h, c, s;
    float scale;
    size_t n;
    const float *src;
    float *dst;
} k_up_args;

static sdnn_status k_upsample_fwd(void *arg)
{
    const k_up_args *a = arg;
    for (size_t o = 0; o < a->n; ++o)
        a->dst[o] = a->scale * a->src[sdnn_upsample_src((int)o, a->w, a->h, a->c, a->s)];
    return SDNN_OK;
}

static sdnn_status k_upsample_bwd(void *arg)
{
    const k_up_args *a = arg;
    for (size_t t = 0; t < a->n; ++t)
        a->dst[t] = sdnn_upsample_grad_elem(a->src, a->w, a->h, a->s, a->scale, t, a->dst[t]);
    return SDNN_OK;
}

typedef struct k_shortcut_args {
    sdnn_shortcut_geom g;
    float s1, s2;
    size_t n;
    const float *add;
    float *out;
} k_shortcut_args;

static sdnn_status k_shortcut(void *arg)
{
    const k_shortcut_args *a = arg;
    for (size_t e = 0; e < a->n; ++e) {
        int fi;
        int oi = sdnn_shortcut_map(&a->g, (int)e, &fi);
        a->out[oi] = sdnn_shortcut_elem(a->out[oi], a->add[fi], a->s1, a->s2);
    }
    return SDNN_OK;
}

/* Shortcut in both directions: out (+)= add over the overlap of the two
 * shapes; (w1,h1,c1) is add's shape, (w2,h2,c2) out's. */
static sdnn_status launch_shortcut(sdnn_dctx *c, const char *call, int w1, int h1, int c1,
                                   int w2, int h2, int c2, int batch, float s1, float s2,
                                   const float *add, size_t nadd, float *out, size_t nout)
{
    k_shortcut_args a;
    memset(&a, 0, sizeof a);
    sdnn_shortcut_geom_init(&a.g, w1, h1, c1, w2, h2, c2);
    a.s1 = s1;
    a.s2 = s2;
    a.n = (size_t)a.g.minw * a.g.minh * a.g.minc * batch;
    DP(add, nadd, &a.add);
    DP(out, nout, &a.out);
    return launch(c, call, k_shortcut, &a, sizeof a);
}

typedef struct k_route_args {
    int nsrc, batch;
    size_t outputs;
    size_t len[MAX_ROUTE];
    size_t off[MAX_ROUTE];           /* per image, the run's start in the source */
    size_t pitch[MAX_ROUTE];         /* the source's outputs */
    const float *src[MAX_ROUTE];     /* forward: sources; backward: unused */
    float *dst[MAX_ROUTE];           /* backward: the sources' deltas */
    const float *delta;
    float *out;
} k_route_args;

static sdnn_status k_route_fwd(void *arg)
{
    const k_route_args *a = arg;
    size_t off = 0;
    for (int j = 0; j < a->nsrc; ++j) {
        for (int b = 0; b < a->batch; ++b)
            memcpy(a->out + (size_t)b * a->outputs + off,
                   a->src[j] + (size_t)b * a->pitch[j] + a->off[j], a->len[j] * sizeof(float));
        off += a->len[j];
    }
    return SDNN_OK;
}

static sdnn_status k_route_bwd(void *arg)
{
    const k_route_args *a = arg;
    size_t off = 0;
    for (int j = 0; j < a->nsrc; ++j) {
        for (int b = 0; b < a->batch; ++b) {
            const float *d = a->delta + (size_t)b * a->outputs + off;
            float *t = a->dst[j] + (size_t)b * a->pitch[j] + a->off[j];
            for (size_t i = 0; i < a->len[j]; ++i) t[i] += d[i];
        }
        off += a->len[j];
    }
    return SDNN_OK;
}

static sdnn_status route_pass(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s, int backward)
{
    const char *call = backward ? "sdnn_dl_backward (route)" : "sdnn_dl_forward (route)";
    k_route_args a;
    memset(&a, 0, sizeof a);
    if (l->nroute < 1 || l->nroute > MAX_ROUTE)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "%s: layer %d has %d inputs", call, l->index,
                          l->nroute);
    a.nsrc = l->nroute;
    a.batch = l->batch;
    a.outputs = (size_t)l->outputs;
    size_t total = 0;
    for (int j = 0; j < l->nroute; ++j) {
        const sdnn_dlayer *from = &s->layers[l->route_from[j]];
        a.len[j] = (size_t)l->route_size[j];
        a.off[j] = (size_t)l->route_off[j];
        a.pitch[j] = (size_t)from->outputs;
        total += a.len[j];
        /* All of the source's outputs, or (the grouped route) one run of them. */
        if (l->route_off[j] < 0 || a.off[j] + a.len[j] > (size_t)from->outputs)
            return SDNN_ERROR(SDNN_ERR_INTERNAL,
                              "%s: layer %d takes %zu floats at %d of layer %d's %d outputs",
                              call, l->index, a.len[j], l->route_off[j], l->route_from[j],
                              from->outputs);
        if (backward) DP(from->delta, outs(from), &a.dst[j]);
        else DP(from->output, outs(from), &a.src[j]);
    }
    if (total != a.outputs)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "%s: layer %d: its inputs make %zu of %d outputs",
                          call, l->index, total, l->outputs);
    if (backward) {
        DP(l->delta, outs(l), &a.delta);
        return launch(c, call, k_route_bwd, &a, sizeof a);
    }
    DP(l->output, outs(l), &a.out);
    return launch(c, call, k_route_fwd, &a, sizeof a);
}

/* ---- losses, dropout, region ----------------------------------------------------- */

typedef struct k_loss_args {
    int type, n, rows, groups;
    size_t count, batch_offset, group_offset;
    float temp;
    float *pred;            /* cost: the input (masked cost writes it) */
    const float *in, *truth;
    float *out, *delta, *loss;
} k_loss_args;

static sdnn_status k_softmax(void *arg)
{
    const k_loss_args *a = arg;
    for (int r = 0; r < a->rows; ++r) {
        size_t off = (size_t)(r / a->groups) * a->batch_offset +
                     (size_t)(r % a->groups) * a->group_offset;
        sdnn_softmax_row(a->in + off, a->n, a->temp, a->out + off);
    }
    return SDNN_OK;
}

static sdnn_status k_softmax_xent(void *arg)
{
    const k_loss_args *a = arg;
    for (size_t i = 0; i < a->count; ++i) {
        float d;
        a->loss[i] = sdnn_xent_elem(a->out[i], a->truth[i], &d);
        a->delta[i] = d;
    }
    return SDNN_OK;
}

static sdnn_status k_cost(void *arg)
{
    const k_loss_args *a = arg;
    for (size_t i = 0; i < a->count; ++i) {
        float d;
        a->out[i] = sdnn_cost_layer_elem(a->type, &a->pred[i], a->truth[i], &d);
        a->delta[i] = d;
    }
    return SDNN_OK;
}

static sdnn_status softmax_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    const char *call = "sdnn_dl_forward (softmax)";
    k_loss_args a;
    memset(&a, 0, sizeof a);
    a.groups = l->softmax_groups > 0 ? l->softmax_groups : 1;
    a.n = l->inputs / a.groups;
    a.rows = l->batch * a.groups;
    a.batch_offset = (size_t)l->inputs;
    a.group_offset = (size_t)a.n;
    a.temp = l->temperature;
    a.count = ins(l);
    DP(s->input, ins(l), &a.in);
    DP(l->output, outs(l), &a.out);
    SDNN_CHECK(launch(c, call, k_softmax, &a, sizeof a));
    if (!s->truth || l->noloss) return SDNN_OK;
    DP(s->truth, ins(l), &a.truth);
    DP(l->delta, outs(l), &a.delta);
    DP(l->loss, ins(l), &a.loss);
    SDNN_CHECK(launch(c, "sdnn_dl_forward (softmax loss)", k_softmax_xent, &a, sizeof a));
    SDNN_CHECK(sdnn_dl_host_sum(c, l->loss, ins(l), &l->cost));
    l->has_cost = 1;
    return SDNN_OK;
}

static sdnn_status cost_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    const char *call = "sdnn_dl_forward (cost)";
    if (!s->truth) return SDNN_OK;
    k_loss_args a;
    memset(&a, 0, sizeof a);
    a.type = l->cost_type;
    a.count = ins(l);
    /* The masked cost writes SECRET_NUM into its input, as Darknet. */
    DP(s->input, ins(l), &a.pred);
    DP(s->truth, ins(l), &a.truth);
    DP(l->delta, outs(l), &a.delta);
    DP(l->output, outs(l), &a.out);
    SDNN_CHECK(launch(c, call, k_cost, &a, sizeof a));
    SDNN_CHECK(sdnn_dl_host_sum(c, l->output, ins(l), &l->cost));
    l->has_cost = 1;
    return SDNN_OK;
}

typedef struct k_dropout_args {
    size_t n;
    float p, scale;
    uint64_t seed, pass;
    float *x, *rnd;
} k_dropout_args;

static sdnn_status k_dropout_fwd(void *arg)
{
    const k_dropout_args *a = arg;
    for (size_t i = 0; i < a->n; ++i) {
        float r = sdnn_dropout_uniform(a->seed, a->pass, i);
        a->rnd[i] = r;
        a->x[i] = sdnn_dropout_elem(a->x[i], r, a->p, a->scale);
    }
    return SDNN_OK;
}

static sdnn_status k_dropout_bwd(void *arg)
{
    const k_dropout_args *a = arg;
    for (size_t i = 0; i < a->n; ++i) a->x[i] = sdnn_dropout_elem(a->x[i], a->rnd[i], a->p, a->scale);
    return SDNN_OK;
}

static sdnn_status dropout_pass(sdnn_dctx *c, sdnn_dlayer *l, float *x, const char *call,
                                int backward)
{
    k_dropout_args a;
    memset(&a, 0, sizeof a);
    a.n = ins(l);
    a.p = l->probability;
    a.scale = l->scale;
    a.seed = l->seed;
    DP(x, a.n, &a.x);
    DP(l->rand, a.n, &a.rnd);
    if (backward) return launch(c, call, k_dropout_bwd, &a, sizeof a);
    /* In place on the previous layer's output, which this layer's output
     * aliases; each forward pass draws anew. */
    a.pass = l->draws++;
    return launch(c, call, k_dropout_fwd, &a, sizeof a);
}

typedef struct k_region_args {
    int outputs, wh, coords, classes, background;
    size_t n;
    const float *out;
    float *delta;
} k_region_args;

static sdnn_status k_region_grad(void *arg)
{
    const k_region_args *a = arg;
    for (size_t i = 0; i < a->n; ++i)
        if (sdnn_region_logistic((int)(i % (size_t)a->outputs), a->wh, a->coords, a->classes,
                                 a->background))
            a->delta[i] *= sdnn_gradient(a->out[i], SDNN_ACT_LOGISTIC);
    return SDNN_OK;
}

/* ---- update ---------------------------------------------------------------------- */

typedef struct k_sgd_args {
    size_t n;
    float decay_scale, rate, momentum;
    float *w, *u;
} k_sgd_args;

static sdnn_status k_sgd(void *arg)
{
    const k_sgd_args *a = arg;
    for (size_t i = 0; i < a->n; ++i)
        sdnn_sgd_elem(&a->w[i], &a->u[i], a->decay_scale, a->rate, a->momentum);
    return SDNN_OK;
}

static sdnn_status launch_sgd(sdnn_dctx *c, const char *call, float *w, float *u, size_t n,
                              float decay_scale, float rate, float momentum)
{
    if (!n) return SDNN_OK;
    k_sgd_args a = {n, decay_scale, rate, momentum, NULL, NULL};
    DP(w, n, &a.w);
    DP(u, n, &a.u);
    return launch(c, call, k_sgd, &a, sizeof a);
}

/* ---- dev.h: setup and release ------------------------------------------------------ */

#define ALLOC(ptr, count)                                                              \
    SDNN_CHECK(sdnn_dmalloc(c, (size_t)(count) * sizeof *(ptr), (void **)&(ptr)))

sdnn_status sdnn_dl_setup(sdnn_dctx *c, sdnn_dlayer *l)
{
    if (l->kind < 0 || l->kind >= SDNN_DL_KIND_COUNT)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no device layer of kind %d", l->index,
                          l->kind);
    l->impl = NULL;
    l->workspace = 0;
    SDNN_CHECK(sdnn_dl_check_size(l));
    size_t out = outs(l);
    if (l->kind != SDNN_DL_DROPOUT) {
        ALLOC(l->output, out);
        ALLOC(l->delta, out);
    }
    switch (l->kind) {
    case SDNN_DL_CONV:
    case SDNN_DL_CONNECTED: {
        int ch, sp;
        channels_of(l, &ch, &sp);
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
        if (l->kind == SDNN_DL_CONV) {
            if (l->groups < 1 || l->c % l->groups || l->n % l->groups)
                return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                  "layer %d: %d groups do not divide %d channels and %d filters",
                                  l->index, l->groups, l->c, l->n);
            l->workspace = conv_col_bytes(l);
        }
        break;
    }
    case SDNN_DL_MAXPOOL: ALLOC(l->indexes, out); break;
    case SDNN_DL_DROPOUT: ALLOC(l->rand, ins(l)); break;
    case SDNN_DL_SOFTMAX: ALLOC(l->loss, ins(l)); break;
    default: break;
    }
    if (sdnn_dl_act_keeps_x(l)) ALLOC(l->act_x, out);
    return SDNN_OK;
}

void sdnn_dl_release(sdnn_dlayer *l)
{
    sdnn_dl_release_buffers(l);
    l->impl = NULL;
}

/* ---- dev.h: the passes ------------------------------------------------------------- */

sdnn_status sdnn_dl_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    l->has_cost = 0;
    switch (l->kind) {
    case SDNN_DL_CONV:
        SDNN_CHECK(conv_forward(c, l, s));
        return norm_bias_act(c, l, s->train, "sdnn_dl_forward (convolutional)");
    case SDNN_DL_CONNECTED:
        SDNN_CHECK(launch_gemm(c, "sdnn_dl_forward (connected)", 0, 1, l->batch, l->outputs,
                               l->inputs, 1, s->input, l->inputs, l->weights, l->inputs, 0,
                               l->output, l->outputs));
        return norm_bias_act(c, l, s->train, "sdnn_dl_forward (connected)");
    case SDNN_DL_MAXPOOL:
    case SDNN_DL_AVGPOOL: {
        const char *call = l->kind == SDNN_DL_MAXPOOL ? "sdnn_dl_forward (maxpool)"
                                                      : "sdnn_dl_forward (avgpool)";
        k_pool_args a;
        memset(&a, 0, sizeof a);
        sdnn_pool_geom g = {l->w, l->h, l->c, l->out_w, l->out_h, l->size, l->stride, l->pad};
        a.g = g;
        a.hw = l->w * l->h;
        a.n = outs(l);
        DP(s->input, ins(l), &a.in);
        DP(l->output, outs(l), &a.out);
        if (l->kind == SDNN_DL_AVGPOOL) return launch(c, call, k_avgpool_fwd, &a, sizeof a);
        SDNN_CHECK(sdnn_sim_dptr(c, l->indexes, outs(l) * sizeof(int), call, (void **)&a.idx));
        return launch(c, call, k_maxpool_fwd, &a, sizeof a);
    }
    case SDNN_DL_ROUTE: return route_pass(c, l, s, 0);
    case SDNN_DL_SHORTCUT: {
        const sdnn_dlayer *from = &s->layers[l->from];
        SDNN_CHECK(sdnn_k_copy(c, l->output, s->input, outs(l)));
        SDNN_CHECK(launch_shortcut(c, "sdnn_dl_forward (shortcut)", l->w, l->h, l->c, l->out_w,
                                   l->out_h, l->out_c, l->batch, l->alpha, l->beta, from->output,
                                   outs(from), l->output, outs(l)));
        return sdnn_dl_activate(c, l);
    }
    case SDNN_DL_UPSAMPLE: {
        const char *call = "sdnn_dl_forward (upsample)";
        k_up_args a = {l->w, l->h, l->c, l->stride, l->scale, outs(l), NULL, NULL};
        DP(s->input, ins(l), &a.src);
        DP(l->output, outs(l), &a.dst);
        return launch(c, call, k_upsample_fwd, &a, sizeof a);
    }
    case SDNN_DL_SOFTMAX: return softmax_forward(c, l, s);
    case SDNN_DL_COST: return cost_forward(c, l, s);
    case SDNN_DL_DROPOUT:
        if (!s->train) return SDNN_OK;
        return dropout_pass(c, l, l->output, "sdnn_dl_forward (dropout)", 0);
    case SDNN_DL_YOLO:
    case SDNN_DL_REGION:
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: %s forward runs on the host (net.c)",
                          l->index, sdnn_dl_kind_name(l->kind));
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no device forward for kind %d",
                          l->index, l->kind);
    }
}

sdnn_status sdnn_dl_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s)
{
    switch (l->kind) {
    case SDNN_DL_CONV:
        SDNN_CHECK(act_norm_bias_backward(c, l, "sdnn_dl_backward (convolutional)"));
        return conv_backward(c, l, s);
    case SDNN_DL_CONNECTED: {
        const char *call = "sdnn_dl_backward (connected)";
        SDNN_CHECK(act_norm_bias_backward(c, l, call));
        SDNN_CHECK(launch_gemm(c, call, 1, 0, l->outputs, l->inputs, l->batch, 1, l->delta,
                               l->outputs, s->input, l->inputs, 1, l->weight_updates, l->inputs));
        if (s->delta)
            SDNN_CHECK(launch_gemm(c, call, 0, 0, l->batch, l->inputs, l->outputs, 1, l->delta,
                                   l->outputs, l->weights, l->inputs, 1, s->delta, l->inputs));
        return SDNN_OK;
    }
    case SDNN_DL_MAXPOOL:
    case SDNN_DL_AVGPOOL: {
        if (!s->delta) return SDNN_OK;
        const char *call = l->kind == SDNN_DL_MAXPOOL ? "sdnn_dl_backward (maxpool)"
                                                      : "sdnn_dl_backward (avgpool)";
        k_pool_args a;
        memset(&a, 0, sizeof a);
        sdnn_pool_geom g = {l->w, l->h, l->c, l->out_w, l->out_h, l->size, l->stride, l->pad};
        a.g = g;
        a.hw = l->w * l->h;
        a.n = ins(l);
        DP(l->delta, outs(l), &a.delta);
        DP(s->delta, ins(l), &a.prev);
        if (l->kind == SDNN_DL_AVGPOOL) return launch(c, call, k_avgpool_bwd, &a, sizeof a);
        SDNN_CHECK(sdnn_sim_dptr(c, l->indexes, outs(l) * sizeof(int), call, (void **)&a.idx));
        return launch(c, call, k_maxpool_bwd, &a, sizeof a);
    }
    case SDNN_DL_ROUTE: return route_pass(c, l, s, 1);
    case SDNN_DL_SHORTCUT: {
        sdnn_dlayer *from = &s->layers[l->from];
        size_t out = outs(l);
        SDNN_CHECK(sdnn_dl_act_backward(c, l));
        if (s->delta) SDNN_CHECK(sdnn_k_axpy(c, out, l->alpha, l->delta, s->delta));
        return launch_shortcut(c, "sdnn_dl_backward (shortcut)", l->out_w, l->out_h, l->out_c,
                               l->w, l->h, l->c, l->batch, 1.0f, l->beta, l->delta, out,
                               from->delta, outs(from));
    }
    case SDNN_DL_UPSAMPLE: {
        if (!s->delta) return SDNN_OK;
        const char *call = "sdnn_dl_backward (upsample)";
        k_up_args a = {l->w, l->h, l->c, l->stride, l->scale, ins(l), NULL, NULL};
        DP(l->delta, outs(l), &a.src);
        DP(s->delta, ins(l), &a.dst);
        return launch(c, call, k_upsample_bwd, &a, sizeof a);
    }
    case SDNN_DL_SOFTMAX:
    case SDNN_DL_YOLO:
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, ins(l), 1.0f, l->delta, s->delta);
    case SDNN_DL_COST:
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, ins(l), l->scale, l->delta, s->delta);
    case SDNN_DL_DROPOUT:
        if (!s->delta) return SDNN_OK;
        return dropout_pass(c, l, s->delta, "sdnn_dl_backward (dropout)", 1);
    case SDNN_DL_REGION: {
        const char *call = "sdnn_dl_backward (region)";
        k_region_args a = {l->outputs, l->w * l->h, l->coords, l->classes, l->background,
                           outs(l), NULL, NULL};
        DP(l->output, outs(l), &a.out);
        DP(l->delta, outs(l), &a.delta);
        SDNN_CHECK(launch(c, call, k_region_grad, &a, sizeof a));
        if (!s->delta) return SDNN_OK;
        return sdnn_k_axpy(c, ins(l), 1.0f, l->delta, s->delta);
    }
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d: no device backward for kind %d",
                          l->index, l->kind);
    }
}

sdnn_status sdnn_dl_update(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dupdate *a)
{
    if (l->kind != SDNN_DL_CONV && l->kind != SDNN_DL_CONNECTED) return SDNN_OK;
    float lr = a->learning_rate * l->lr_scale;
    float rate = lr / a->batch;
    float decay = -a->decay * a->batch;
    size_t nb = sdnn_dl_nbiases(l), nw = sdnn_dl_nweights(l);
    SDNN_CHECK(launch_sgd(c, "sdnn_dl_update (biases)", l->biases, l->bias_updates, nb, 0.0f,
                          rate, a->momentum));
    if (l->bn)
        SDNN_CHECK(launch_sgd(c, "sdnn_dl_update (scales)", l->scales, l->scale_updates, nb,
                              0.0f, rate, a->momentum));
    return launch_sgd(c, "sdnn_dl_update (weights)", l->weights, l->weight_updates, nw, decay,
                      rate, a->momentum);
}
