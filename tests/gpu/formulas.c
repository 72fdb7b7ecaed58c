/*
 * formulas: the device layers' arithmetic (plugin/cuda/ops.h, compiled here
 * for the host) against libdarknet's CPU layers, on any machine.
 *
 * The kernels apply these per-element functions; this program applies them
 * in plain loops, in the order the kernels use, to the tensors libdarknet's
 * own layers saw, and compares the results: activations and their
 * gradients, batch normalisation forward and backward, maxpool windows and
 * their gradient gather, average pooling, shortcut geometry, upsampling,
 * softmax with its loss, the cost layer's kinds (masked too), dropout masks,
 * route concatenation, im2col and col2im, the bias gradient and Darknet's
 * SGD update.  What it cannot check is the
 * kernels' launch geometry and reductions: tests/gpu/layers does that on a
 * device.
 */
#include "gpu_test.h"
#include "ops.h"
#include "replicas.h"

#include <float.h>

float activate(float x, ACTIVATION a);
float gradient(float x, ACTIVATION a);
/* libdarknet's, not in darknet.h */
void im2col_cpu(float *im, int channels, int height, int width, int ksize, int stride, int pad,
                float *col);
void col2im_cpu(float *col, int channels, int height, int width, int ksize, int stride, int pad,
                float *im);
void backward_bias(float *bias_updates, float *delta, int batch, int n, int size);

#define TOL 1e-5

static const struct {
    ACTIVATION dn;
    int ours;
    const char *name;
} acts[] = {
    {LOGISTIC, SDNN_ACT_LOGISTIC, "logistic"}, {RELU, SDNN_ACT_RELU, "relu"},
    {RELIE, SDNN_ACT_RELIE, "relie"},          {LINEAR, SDNN_ACT_LINEAR, "linear"},
    {RAMP, SDNN_ACT_RAMP, "ramp"},             {TANH, SDNN_ACT_TANH, "tanh"},
    {PLSE, SDNN_ACT_PLSE, "plse"},             {LEAKY, SDNN_ACT_LEAKY, "leaky"},
    {ELU, SDNN_ACT_ELU, "elu"},                {LOGGY, SDNN_ACT_LOGGY, "loggy"},
    {STAIR, SDNN_ACT_STAIR, "stair"},          {HARDTAN, SDNN_ACT_HARDTAN, "hardtan"},
    {LHTAN, SDNN_ACT_LHTAN, "lhtan"},          {SELU, SDNN_ACT_SELU, "selu"},
};

static int act_code(ACTIVATION a)
{
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; ++i)
        if (acts[i].dn == a) return acts[i].ours;
    return -1;
}

static void test_activations(void)
{
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; ++k) {
        double worst = 0, worst_g = 0;
        for (int i = -1200; i <= 1200; ++i) {
            float x = i * 0.005f + 0.00123f;
            float a = sdnn_activate(x, acts[k].ours), b = activate(x, acts[k].dn);
            double e = fabs((double)a - b) / fmax(fabs(b), 1e-3);
            if (e > worst) worst = e;
            float ga = sdnn_gradient(b, acts[k].ours), gb = gradient(b, acts[k].dn);
            double eg = fabs((double)ga - gb) / fmax(fabs(gb), 1e-3);
            if (eg > worst_g) worst_g = eg;
        }
        SOFT_ASSERT(worst < TOL && worst_g < TOL, "activation %-8s: worst rel err %.2e, gradient %.2e",
                 acts[k].name, worst, worst_g);
    }
}

/* ---- helpers over libdarknet layers ------------------------------------------------ */

static float *fdup(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* Run layer i of net forward (train) on `input`, as forward_network does. */
static void cpu_forward(network *net, int i, float *input, float *truth)
{
    layer *l = &net->layers[i];
    if (l->delta) memset(l->delta, 0, (size_t)l->outputs * l->batch * sizeof(float));
    network n = *net;
    n.input = input;
    n.truth = truth;
    n.train = 1;
    n.index = i;
    l->forward(*l, n);
}

static void cpu_backward(network *net, int i, float *input, float *delta)
{
    layer *l = &net->layers[i];
    network n = *net;
    n.input = input;
    n.delta = delta;
    n.train = 1;
    n.index = i;
    l->backward(*l, n);
}

#define CMP(a, b, n, what, ...)                                                      \
    do {                                                                             \
        double e_ = gt_relerr((a), (b), (n));                                        \
        SOFT_ASSERT(e_ < TOL, what ": rel err %.2e", __VA_ARGS__, e_);                  \
    } while (0)

/* ---- batch normalisation through a 1x1 identity convolution ---------------------- */

static void test_batchnorm(void)
{
    const char *cfg = "[net]\nbatch=3\nwidth=5\nheight=4\nchannels=6\n"
                      "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=1\nstride=1\npad=0\n"
                      "activation=leaky\n";
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    gt_randomize(net, 11);
    memset(l->weights, 0, (size_t)l->nweights * sizeof(float));
    for (int k = 0; k < 6; ++k) l->weights[k * 6 + k] = 1;     /* identity: output = input */
    int C = 6, S = 20, B = 3;
    size_t n = (size_t)C * S * B;
    float *in = malloc(n * sizeof *in);
    gt_fill(in, n, -2, 3);
    float *rm0 = fdup(l->rolling_mean, C), *rv0 = fdup(l->rolling_variance, C);
    cpu_forward(net, 0, in, NULL);

    /* forward with ops.h */
    float mean[6], var[6], rm[6], rv[6];
    float *x = fdup(in, n), *xn = malloc(n * 4), *out = malloc(n * 4);
    int m = B * S;
    for (int c = 0; c < C; ++c) {
        float s = 0;
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < S; ++i) s += x[(b * C + c) * S + i];
        mean[c] = s * sdnn_bn_mean_scale((size_t)m);
        float v = 0;
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < S; ++i) v += sdnn_bn_var_term(x[(b * C + c) * S + i], mean[c]);
        var[c] = v * sdnn_bn_var_scale((size_t)m);
        rm[c] = sdnn_bn_rolling(rm0[c], mean[c]);
        rv[c] = sdnn_bn_rolling(rv0[c], var[c]);
    }
    for (size_t i = 0; i < n; ++i) {
        int c = sdnn_bn_channel(i, C, S);
        xn[i] = sdnn_bn_normalize(x[i], mean[c], var[c]);
        out[i] = sdnn_activate(sdnn_bn_scale_shift(xn[i], l->scales[c], l->biases[c]),
                               SDNN_ACT_LEAKY);
    }
    CMP(mean, l->mean, C, "batchnorm %s", "mean");
    CMP(var, l->variance, C, "batchnorm %s", "variance (unbiased)");
    CMP(rm, l->rolling_mean, C, "batchnorm %s", "rolling mean");
    CMP(rv, l->rolling_variance, C, "batchnorm %s", "rolling variance");
    CMP(xn, l->x_norm, n, "batchnorm %s", "x_norm");
    CMP(out, l->output, n, "batchnorm %s", "output");

    /* backward */
    float *delta = malloc(n * 4);
    gt_fill(delta, n, -1, 1);
    memcpy(l->delta, delta, n * 4);
    float *bu0 = fdup(l->bias_updates, C), *su0 = fdup(l->scale_updates, C);
    float *pd = calloc(n, 4);
    cpu_backward(net, 0, in, pd);
    float bu[6], su[6], md[6], vd[6];
    for (size_t i = 0; i < n; ++i) delta[i] *= sdnn_gradient(out[i], SDNN_ACT_LEAKY);
    for (int c = 0; c < C; ++c) {
        float sum[3] = {0, 0, 0}, t[3];
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < S; ++i) {
                size_t k = (size_t)(b * C + c) * S + i;
                sdnn_bn_backward_terms(delta[k], xn[k], x[k], mean[c], t);
                for (int j = 0; j < 3; ++j) sum[j] += t[j];
            }
        bu[c] = bu0[c];
        su[c] = su0[c];
        sdnn_bn_backward_channel(sum, l->scales[c], var[c], &bu[c], &su[c], &md[c], &vd[c]);
    }
    for (size_t i = 0; i < n; ++i) {
        int c = sdnn_bn_channel(i, C, S);
        delta[i] = sdnn_bn_delta_elem(delta[i], l->scales[c], x[i], mean[c], var[c], md[c],
                                      vd[c], m);
    }
    CMP(bu, l->bias_updates, C, "batchnorm %s", "bias gradient");
    CMP(su, l->scale_updates, C, "batchnorm %s", "scale gradient");
    CMP(md, l->mean_delta, C, "batchnorm %s", "mean delta");
    CMP(vd, l->variance_delta, C, "batchnorm %s", "variance delta");
    CMP(delta, pd, n, "batchnorm %s", "input delta");
    free(in); free(rm0); free(rv0); free(x); free(xn); free(out); free(delta); free(bu0);
    free(su0); free(pd);
    sdnn_network_free(net);
}

/* ---- maxpool, avgpool ------------------------------------------------------------- */

static void test_maxpool(int size, int stride, const char *extra)
{
    const char *tag = *extra ? "padded" : "";
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=2\nwidth=7\nheight=6\nchannels=3\n[maxpool]\nsize=%d\nstride=%d\n%s",
             size, stride, extra);
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    float *in = malloc(nin * 4);
    gt_fill(in, nin, -1, 1);
    cpu_forward(net, 0, in, NULL);
    sdnn_pool_geom g = {l->w, l->h, l->c, l->out_w, l->out_h, l->size, l->stride, l->pad};
    float *out = calloc(nout, 4);
    int *idx = malloc(nout * sizeof(int)), bad_idx = 0;
    for (size_t o = 0; o < nout; ++o) {
        out[o] = sdnn_maxpool_elem(in, &g, (int)o, &idx[o]);
        bad_idx += idx[o] != l->indexes[o];
    }
    CMP(out, l->output, nout, "maxpool %dx%d/%d %s output", size, size, stride, tag);
    SOFT_ASSERT(bad_idx == 0, "maxpool %dx%d/%d: argmax indexes (%d differ)", size, size, stride,
             bad_idx);
    gt_fill(l->delta, nout, -1, 1);
    float *pd = calloc(nin, 4), *mine = calloc(nin, 4);
    cpu_backward(net, 0, in, pd);
    for (size_t t = 0; t < nin; ++t) mine[t] = sdnn_maxpool_grad_elem(l->delta, idx, &g, (int)t);
    CMP(mine, pd, nin, "maxpool %dx%d/%d %s input delta", size, size, stride, tag);
    free(in); free(out); free(idx); free(pd); free(mine);
    sdnn_network_free(net);
}

static void test_avgpool(void)
{
    network *net = gt_parse_text("[net]\nbatch=2\nwidth=5\nheight=3\nchannels=4\n[avgpool]\n", NULL);
    layer *l = &net->layers[0];
    size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    float *in = malloc(nin * 4);
    gt_fill(in, nin, -1, 1);
    cpu_forward(net, 0, in, NULL);
    float *out = calloc(nout, 4);
    int hw = l->w * l->h;
    for (size_t o = 0; o < nout; ++o) out[o] = sdnn_avgpool_elem(in, hw, o);
    CMP(out, l->output, nout, "avgpool %s", "output");
    gt_fill(l->delta, nout, -1, 1);
    float *pd = calloc(nin, 4), *mine = calloc(nin, 4);
    cpu_backward(net, 0, in, pd);
    for (size_t t = 0; t < nin; ++t) mine[t] = sdnn_avgpool_grad_elem(l->delta, hw, t);
    CMP(mine, pd, nin, "avgpool %s", "input delta");
    free(in); free(out); free(pd); free(mine);
    sdnn_network_free(net);
}

/* ---- shortcut, upsample, route ----------------------------------------------------- */

static void test_shortcut(const char *name, const char *cfg)
{
    network *net = gt_parse_text(cfg, NULL);
    int i = net->n - 1;
    layer *l = &net->layers[i], *from = &net->layers[l->index], *prev = &net->layers[i - 1];
    size_t nout = (size_t)l->outputs * l->batch, nfrom = (size_t)from->outputs * from->batch;
    gt_fill(from->output, nfrom, -1, 1);
    gt_fill(prev->output, nout, -1, 1);
    float *in = fdup(prev->output, nout);
    cpu_forward(net, i, in, NULL);
    sdnn_shortcut_geom g;
    sdnn_shortcut_geom_init(&g, l->w, l->h, l->c, l->out_w, l->out_h, l->out_c);
    float *out = fdup(in, nout);
    size_t ne = (size_t)g.minw * g.minh * g.minc * l->batch;
    for (size_t e = 0; e < ne; ++e) {
        int fi, oi = sdnn_shortcut_map(&g, (int)e, &fi);
        out[oi] = sdnn_shortcut_elem(out[oi], from->output[fi], l->alpha, l->beta);
    }
    for (size_t k = 0; k < nout; ++k) out[k] = sdnn_activate(out[k], act_code(l->activation));
    CMP(out, l->output, nout, "shortcut %s output", name);
    gt_fill(l->delta, nout, -1, 1);
    float *delta = fdup(l->delta, nout);
    float *pd = calloc(nout, 4), *fd0 = calloc(nfrom, 4);
    memset(from->delta, 0, nfrom * 4);
    cpu_backward(net, i, in, pd);
    float *mpd = calloc(nout, 4);
    for (size_t k = 0; k < nout; ++k) {
        delta[k] *= sdnn_gradient(out[k], act_code(l->activation));
        mpd[k] += l->alpha * delta[k];
    }
    sdnn_shortcut_geom_init(&g, l->out_w, l->out_h, l->out_c, l->w, l->h, l->c);
    for (size_t e = 0; e < ne; ++e) {
        int fi, oi = sdnn_shortcut_map(&g, (int)e, &fi);
        fd0[oi] = sdnn_shortcut_elem(fd0[oi], delta[fi], 1.0f, l->beta);
    }
    CMP(mpd, pd, nout, "shortcut %s input delta", name);
    CMP(fd0, from->delta, nfrom, "shortcut %s source delta", name);
    free(in); free(out); free(delta); free(pd); free(fd0); free(mpd);
    sdnn_network_free(net);
}

static void test_upsample(int stride, float scale)
{
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=2\nwidth=3\nheight=4\nchannels=2\n[upsample]\nstride=%d\nscale=%g\n",
             stride, scale);
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    size_t nin = (size_t)l->inputs * l->batch, nout = (size_t)l->outputs * l->batch;
    float *in = malloc(nin * 4);
    gt_fill(in, nin, -1, 1);
    cpu_forward(net, 0, in, NULL);
    float *out = calloc(nout, 4);
    for (size_t o = 0; o < nout; ++o)
        out[o] = l->scale * in[sdnn_upsample_src((int)o, l->w, l->h, l->c, stride)];
    CMP(out, l->output, nout, "upsample x%d scale %g output", stride, scale);
    gt_fill(l->delta, nout, -1, 1);
    float *pd = calloc(nin, 4), *mine = calloc(nin, 4);
    cpu_backward(net, 0, in, pd);
    for (size_t o = 0; o < nout; ++o)
        mine[sdnn_upsample_src((int)o, l->w, l->h, l->c, stride)] += l->scale * l->delta[o];
    CMP(mine, pd, nin, "upsample x%d scale %g input delta (scatter)", stride, scale);
    /* the kernels' gather, onto a delta that already holds values */
    float *pre = malloc(nin * 4), *pd2 = malloc(nin * 4);
    gt_fill(pre, nin, -1, 1);
    memcpy(pd2, pre, nin * 4);
    cpu_backward(net, 0, in, pd2);
    for (size_t t = 0; t < nin; ++t)
        mine[t] = sdnn_upsample_grad_elem(l->delta, l->w, l->h, stride, l->scale, t, pre[t]);
    CMP(mine, pd2, nin, "upsample x%d scale %g input delta (gather, accumulated)", stride, scale);
    free(pre); free(pd2);
    free(in); free(out); free(pd); free(mine);
    sdnn_network_free(net);
}

static void test_route(void)
{
    const char *cfg = "[net]\nbatch=2\nwidth=4\nheight=4\nchannels=3\n"
                      "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n"
                      "[convolutional]\nfilters=5\nsize=1\nactivation=linear\n"
                      "[route]\nlayers=-1,-2\n";
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[2];
    for (int j = 0; j < 2; ++j)
        gt_fill(net->layers[j].output, (size_t)net->layers[j].outputs * l->batch, -1, 1);
    cpu_forward(net, 2, net->layers[1].output, NULL);
    size_t nout = (size_t)l->outputs * l->batch;
    float *out = calloc(nout, 4);
    size_t off = 0;
    for (int j = 0; j < l->n; ++j) {
        layer *f = &net->layers[l->input_layers[j]];
        for (int b = 0; b < l->batch; ++b)
            memcpy(out + (size_t)b * l->outputs + off, f->output + (size_t)b * l->input_sizes[j],
                   (size_t)l->input_sizes[j] * 4);
        off += (size_t)l->input_sizes[j];
    }
    CMP(out, l->output, nout, "route %s", "output");
    free(out);
    sdnn_network_free(net);
}

/* ---- losses, dropout ---------------------------------------------------------------- */

static void test_softmax(int groups, float temp)
{
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=3\nwidth=1\nheight=1\nchannels=12\n[softmax]\ngroups=%d\ntemperature=%g\n",
             groups, temp);
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    size_t n = (size_t)l->inputs * l->batch;
    float *in = malloc(n * 4), *truth = calloc(n, 4);
    gt_fill(in, n, -3, 3);
    for (int b = 0; b < l->batch; ++b) truth[b * l->inputs + (b * 5) % l->inputs] = 1;
    cpu_forward(net, 0, in, truth);
    float *out = calloc(n, 4), *delta = malloc(n * 4);
    int per = l->inputs / groups;
    for (int r = 0; r < l->batch * groups; ++r) {
        const float *x = in + (size_t)(r / groups) * l->inputs + (size_t)(r % groups) * per;
        float *y = out + (size_t)(r / groups) * l->inputs + (size_t)(r % groups) * per;
        sdnn_softmax_row(x, per, temp, y);
    }
    float cost = 0;
    for (size_t i = 0; i < n; ++i) cost += sdnn_xent_elem(out[i], truth[i], &delta[i]);
    CMP(out, l->output, n, "softmax groups=%d temperature=%g output", groups, temp);
    CMP(delta, l->delta, n, "softmax groups=%d temperature=%g delta", groups, temp);
    SOFT_ASSERT(fabsf(cost - l->cost[0]) <= 1e-5f * fabsf(l->cost[0]) + 1e-6f,
             "softmax cost %g vs %g", cost, l->cost[0]);
    free(in); free(truth); free(out); free(delta);
    sdnn_network_free(net);
}

static void test_cost(const char *type, int ours)
{
    int masked = ours == SDNN_COST_MASKED;
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=2\nwidth=1\nheight=1\nchannels=9\n[cost]\ntype=%s\nscale=0.7\n", type);
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    size_t n = (size_t)l->inputs * l->batch;
    float *in = malloc(n * 4), *truth = malloc(n * 4);
    gt_fill(in, n, -2, 2);
    gt_fill(truth, n, -2, 2);
    if (masked)
        for (size_t i = 0; i < n; i += 3) truth[i] = SDNN_COST_SECRET;
    float *in0 = fdup(in, n);
    cpu_forward(net, 0, in, truth);
    float *err = malloc(n * 4), *delta = malloc(n * 4), cost = 0;
    for (size_t i = 0; i < n; ++i) {
        err[i] = sdnn_cost_layer_elem(ours, &in0[i], truth[i], &delta[i]);
        cost += err[i];
    }
    if (masked) CMP(in0, in, n, "cost %s input (SECRET_NUM written)", type);
    CMP(err, l->output, n, "cost %s error", type);
    CMP(delta, l->delta, n, "cost %s delta", type);
    SOFT_ASSERT(fabsf(cost - l->cost[0]) <= 1e-5f * fabsf(l->cost[0]), "cost %s sum %g vs %g", type,
             cost, l->cost[0]);
    float *pd = calloc(n, 4), *mine = calloc(n, 4);
    cpu_backward(net, 0, in, pd);
    for (size_t i = 0; i < n; ++i) mine[i] = l->scale * delta[i];
    CMP(mine, pd, n, "cost %s input delta", type);
    free(in); free(truth); free(in0); free(err); free(delta); free(pd); free(mine);
    sdnn_network_free(net);
}

static void test_dropout(void)
{
    const char *cfg = "[net]\nbatch=2\nwidth=4\nheight=4\nchannels=2\n"
                      "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n"
                      "[dropout]\nprobability=0.3\n";
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[1], *p = &net->layers[0];
    size_t n = (size_t)l->inputs * l->batch;
    gt_fill(p->output, n, -1, 1);
    float *in0 = fdup(p->output, n);
    cpu_forward(net, 1, p->output, NULL);
    SOFT_ASSERT(l->output == p->output && l->delta == p->delta,
             "dropout aliases the previous layer's output and delta");
    float *out = calloc(n, 4);
    for (size_t i = 0; i < n; ++i) out[i] = sdnn_dropout_elem(in0[i], l->rand[i], l->probability, l->scale);
    CMP(out, p->output, n, "dropout %s", "output (CPU draws)");
    gt_fill(p->delta, n, -1, 1);
    float *d0 = fdup(p->delta, n);
    cpu_backward(net, 1, p->output, p->delta);
    for (size_t i = 0; i < n; ++i) out[i] = sdnn_dropout_elem(d0[i], l->rand[i], l->probability, l->scale);
    CMP(out, p->delta, n, "dropout %s", "delta");
    free(in0); free(out); free(d0);
    sdnn_network_free(net);
}

/* ---- im2col, col2im, the bias gradient ----------------------------------------------- */

static void test_im2col(int size, int stride, int pad)
{
    sdnn_conv_geom g = {3, 7, 6, size, stride, pad, 0, 0};
    g.oh = (g.h + 2 * pad - size) / stride + 1;
    g.ow = (g.w + 2 * pad - size) / stride + 1;
    size_t nim = (size_t)g.ch * g.h * g.w, ncol = (size_t)g.ch * size * size * g.oh * g.ow;
    float *im = malloc(nim * 4), *col = malloc(ncol * 4), *mine = malloc(ncol * 4);
    gt_fill(im, nim, -1, 1);
    im2col_cpu(im, g.ch, g.h, g.w, size, stride, pad, col);
    for (size_t i = 0; i < ncol; ++i) mine[i] = sdnn_im2col_elem(im, &g, i);
    CMP(mine, col, ncol, "im2col %dx%d/%d pad %d", size, size, stride, pad);
    float *back = calloc(nim, 4), *mback = malloc(nim * 4);
    gt_fill(col, ncol, -1, 1);
    col2im_cpu(col, g.ch, g.h, g.w, size, stride, pad, back);
    for (size_t i = 0; i < nim; ++i) mback[i] = sdnn_col2im_elem(col, &g, i);
    CMP(mback, back, nim, "col2im %dx%d/%d pad %d", size, size, stride, pad);
    free(im); free(col); free(mine); free(back); free(mback);
}

/* The per-channel sum of the bias gradient, in the order of the simulated
 * device (image, then position) against libdarknet's backward_bias. */
static void test_bias_gradient(void)
{
    int B = 3, C = 5, S = 11;
    size_t n = (size_t)B * C * S;
    float *delta = malloc(n * 4), bu[5], mine[5];
    gt_fill(delta, n, -1, 1);
    gt_fill(bu, 5, -1, 1);
    memcpy(mine, bu, sizeof bu);
    backward_bias(bu, delta, B, C, S);
    float sum[5] = {0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; ++i) sum[sdnn_bn_channel(i, C, S)] += delta[i];
    for (int c = 0; c < C; ++c) mine[c] += sum[c];
    CMP(mine, bu, 5, "bias gradient %s", "(backward_bias)");
    free(delta);
}

/* ---- region ------------------------------------------------------------------------------ */

/* The entries whose delta the device multiplies by the logistic gradient
 * are the ones libdarknet's CPU region forward passes through the logistic
 * (x, y and, without background, the objectness; coords = 4, as the CPU
 * forward has no extra coordinates); w, h pass through, classes get the
 * softmax. */
static void test_region(int background)
{
    int num = 2, classes = 3, coords = 4, per = coords + classes + 1;
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=2\nwidth=3\nheight=3\nchannels=%d\n[region]\nanchors=1,1,2,2\n"
             "classes=%d\ncoords=%d\nnum=%d\nsoftmax=1\nbackground=%d\n",
             num * per, classes, coords, num, background);
    network *net = gt_parse_text(cfg, NULL);
    layer *l = &net->layers[0];
    size_t n = (size_t)l->outputs * l->batch;
    float *in = malloc(n * 4);
    gt_fill(in, n, -3, 3);
    network nn = *net;
    nn.input = in;
    nn.train = 0;
    nn.index = 0;
    l->forward(*l, nn);
    int wh = l->w * l->h, logistic = 0, passed = 0, bad = 0;
    for (size_t k = 0; k < n; ++k) {
        int r = (int)(k % (size_t)l->outputs), e = (r / wh) % per;
        float want;
        if (sdnn_region_logistic(r, wh, coords, classes, background)) {
            want = 1.0f / (1.0f + expf(-in[k]));
            ++logistic;
        } else if (e < coords) {
            want = in[k];
            ++passed;
        } else {
            continue;   /* objectness with background, classes: softmax */
        }
        bad += fabsf(want - l->output[k]) > 1e-6f * fmaxf(1.0f, fabsf(want));
    }
    int expect_logistic = l->batch * num * wh * (2 + !background);
    SOFT_ASSERT(bad == 0 && logistic == expect_logistic && passed == l->batch * num * wh * 2,
                "region background=%d: logistic entries as the CPU forward (%d logistic, %d "
                "passed through, %d differ)",
                background, logistic, passed, bad);
    free(in);
    sdnn_network_free(net);
}

/* ---- update --------------------------------------------------------------------------- */

static void test_update(void)
{
    const char *cfg = "[net]\nbatch=4\nsubdivisions=2\nwidth=3\nheight=3\nchannels=2\n"
                      "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
                      "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
                      "[connected]\noutput=5\nbatch_normalize=1\nactivation=linear\n";
    network *net = gt_parse_text(cfg, NULL);
    gt_randomize(net, 5);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        size_t nw = l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
        size_t nb = l->type == CONNECTED ? (size_t)l->outputs : (size_t)l->n;
        gt_fill(l->weight_updates, nw, -1, 1);
        gt_fill(l->bias_updates, nb, -1, 1);
        gt_fill(l->scale_updates, nb, -1, 1);
        float *w = fdup(l->weights, nw), *u = fdup(l->weight_updates, nw);
        float *b = fdup(l->biases, nb), *bu = fdup(l->bias_updates, nb);
        float *s = fdup(l->scales, nb), *su = fdup(l->scale_updates, nb);
        update_args a;
        memset(&a, 0, sizeof a);
        a.batch = net->batch * net->subdivisions;
        a.learning_rate = net->learning_rate;
        a.momentum = net->momentum;
        a.decay = net->decay;
        l->update(*l, a);
        float lr = a.learning_rate * l->learning_rate_scale, rate = lr / a.batch;
        float decay = -a.decay * a.batch;
        for (size_t k = 0; k < nw; ++k) sdnn_sgd_elem(&w[k], &u[k], decay, rate, a.momentum);
        for (size_t k = 0; k < nb; ++k) {
            sdnn_sgd_elem(&b[k], &bu[k], 0, rate, a.momentum);
            sdnn_sgd_elem(&s[k], &su[k], 0, rate, a.momentum);
        }
        size_t diff = gt_bytes_differ(w, l->weights, nw * 4) + gt_bytes_differ(u, l->weight_updates, nw * 4) +
                      gt_bytes_differ(b, l->biases, nb * 4) + gt_bytes_differ(bu, l->bias_updates, nb * 4) +
                      gt_bytes_differ(s, l->scales, nb * 4) + gt_bytes_differ(su, l->scale_updates, nb * 4);
        CMP(w, l->weights, nw, "update layer %d weights", i);
        CMP(u, l->weight_updates, nw, "update layer %d weight momentum", i);
        CMP(s, l->scales, nb, "update layer %d scales", i);
        printf("    update layer %d: %zu bytes differ from libdarknet (rounding of its axpy)\n", i,
               diff);
        free(w); free(u); free(b); free(bu); free(s); free(su);
    }
    sdnn_network_free(net);
}

int main(void)
{
    argv0_ = "formulas";
    test_activations();
    test_batchnorm();
    test_maxpool(2, 2, "");
    test_maxpool(2, 1, "");
    test_maxpool(3, 2, "");
    test_maxpool(3, 1, "padding=2\n");
    test_avgpool();
    test_shortcut("same shape",
                  "[net]\nbatch=2\nwidth=4\nheight=4\nchannels=3\n"
                  "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n"
                  "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n"
                  "[shortcut]\nfrom=-2\nactivation=leaky\nalpha=0.5\nbeta=2\n");
    test_shortcut("larger source",
                  "[net]\nbatch=2\nwidth=8\nheight=8\nchannels=3\n"
                  "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n"
                  "[maxpool]\nsize=2\nstride=2\n"
                  "[convolutional]\nfilters=6\nsize=1\nactivation=linear\n"
                  "[shortcut]\nfrom=0\nactivation=linear\n");
    test_shortcut("smaller source",
                  "[net]\nbatch=2\nwidth=8\nheight=8\nchannels=3\n"
                  "[maxpool]\nsize=2\nstride=2\n"
                  "[convolutional]\nfilters=5\nsize=1\nactivation=linear\n"
                  "[upsample]\nstride=2\n"
                  "[shortcut]\nfrom=1\nactivation=relu\n");
    test_upsample(2, 1);
    test_upsample(3, 0.5f);
    test_route();
    test_softmax(1, 1);
    test_softmax(3, 0.5f);
    test_cost("sse", SDNN_COST_SSE);
    test_cost("L1", SDNN_COST_L1);
    test_cost("smooth", SDNN_COST_SMOOTH);
    test_cost("masked", SDNN_COST_MASKED);
    test_im2col(3, 1, 1);
    test_im2col(3, 2, 1);
    test_im2col(5, 2, 2);
    test_im2col(2, 2, 0);
    test_im2col(1, 1, 0);
    test_bias_gradient();
    test_region(0);
    test_region(1);
    test_dropout();
    test_update();
    return gt_summary("formulas");
}
