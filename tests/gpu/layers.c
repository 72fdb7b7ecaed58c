/*
 * layers: every device layer against libdarknet's CPU layer, forward and
 * backward, on random inputs (DESIGN §5: ||gpu - cpu|| / ||cpu|| < 1e-4 in
 * fp32), then Darknet's update.  Needs a CUDA device.
 *
 *   layers [CFG ...]      default: a zoo of every kind, every activation,
 *                         the cost kinds (smooth, L1, masked), the shipped
 *                         cfgs and Debian's yolov3-tiny, yolov2-tiny and
 *                         cifar (SDNN_DEBIAN_CFG names their folder), and
 *                         the layer kernels at sizes that cross every
 *                         boundary of their launches (sizes() below)
 *
 * Each layer is checked alone: the CPU reference runs the network layer by
 * layer; before the device runs layer i, it receives the tensors the CPU
 * layer saw (every earlier output, the truth, the deltas accumulated so
 * far, the update buffers), so errors never carry from one layer to the
 * next.  The device keeps its own forward state (batch-norm statistics,
 * maxpool indexes) from its own forward pass; dropout's draws are the one
 * exception: the device's own draws are checked in forward, the CPU's are
 * given to it for backward.
 *
 * The region layer's backward follows Darknet's GPU build (logistic
 * gradient of x, y and objectness, then into the previous delta); Debian's
 * CPU build leaves its backward empty, so that check uses the formula.
 *
 * Backward passes accumulate into the previous layer's delta (route and
 * shortcut may have put contributions there first).  Debian's CPU 1x1
 * convolution overwrites it instead (Darknet's bug; the device is right),
 * so each layer's share is computed by libdarknet on a zeroed delta, and
 * the device must give (values already there) + share: the previous delta
 * is pre-filled with known values of the share's size before the device
 * runs, so an overwrite cannot pass.
 *
 * A bias or scale gradient is a sum over the batch that can cancel to
 * rounding noise (a layer before batch norm: the normalised delta sums to
 * 0 per channel); such a sum is compared relative to the sum of the
 * magnitudes of its terms, not to itself.
 */
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"
#include "ops.h"
#include "replicas.h"

#define TOL 1e-4

typedef struct ref {
    network *cpu, *dev;           /* reference and the engine's host network */
    sdnn_gpu_net *g;
    float *x, *y;                 /* the batch */
} ref;

static size_t outs(const layer *l) { return (size_t)l->outputs * l->batch; }

static size_t nweights(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->inputs * l->outputs
                                : l->type == CONVOLUTIONAL ? (size_t)l->nweights : 0;
}

static size_t nbiases(const layer *l)
{
    return l->type == CONNECTED ? (size_t)l->outputs : l->type == CONVOLUTIONAL ? (size_t)l->n : 0;
}

static const char *kind(const layer *l)
{
    switch (l->type) {
    case CONVOLUTIONAL: return "conv";
    case CONNECTED: return "connected";
    case MAXPOOL: return "maxpool";
    case AVGPOOL: return "avgpool";
    case ROUTE: return "route";
    case SHORTCUT: return "shortcut";
    case UPSAMPLE: return "upsample";
    case SOFTMAX: return "softmax";
    case COST: return "cost";
    case DROPOUT: return "dropout";
    case YOLO: return "yolo";
    case REGION: return "region";
    default: return "other";
    }
}

/* Device tensor vs host values: ||dev - host|| / max(||host||, floor). */
static double dev_err_floor(sdnn_gpu_net *g, int i, sdnn_gpu_tensor t, const float *host,
                            size_t n, double floor)
{
    float *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (sdnn_gpu_net_get(g, i, t, tmp) != SDNN_OK) {
        free(tmp);
        printf("    get tensor %d of layer %d failed: %s\n", (int)t, i, sdnn_last_error());
        return 1e30;
    }
    double d = 0, r = 0;
    for (size_t k = 0; k < n; ++k) {
        double e = (double)tmp[k] - (double)host[k];
        d += e * e;
        r += (double)host[k] * (double)host[k];
    }
    free(tmp);
    r = sqrt(r);
    if (r < floor) r = floor;
    return r > 0 ? sqrt(d) / r : sqrt(d);
}

static double dev_err(sdnn_gpu_net *g, int i, sdnn_gpu_tensor t, const float *host, size_t n)
{
    return dev_err_floor(g, i, t, host, n, 0);
}

/* The norm over channels of sum |delta| * |x|: the size of the terms a
 * per-channel gradient sums (x NULL: 1), for dev_err_floor. */
static double channel_terms(const layer *l, const float *delta, const float *x)
{
    int C = l->type == CONNECTED ? l->outputs : l->n;
    int S = l->type == CONNECTED ? 1 : l->out_w * l->out_h;
    double r = 0;
    for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) {
                size_t e = ((size_t)b * C + c) * S + k;
                s += fabs(delta[e]) * (x ? fabs(x[e]) : 1.0);
            }
        r += s * s;
    }
    return sqrt(r);
}

static float *fdup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (n) memcpy(y, x, n * sizeof *y);
    return y;
}

/* ---- libdarknet's own rounding in batch norm ---------------------------------------
 *
 * The reference is libdarknet's float layer, not the exact one.  Its batch
 * norm sums each channel's m = batch x positions values one after another
 * in float (mean_cpu, variance_cpu, mean_delta_cpu, variance_delta_cpu):
 * with m in the hundreds of thousands (2 x 416 x 416 at Debian's
 * yolov3-tiny's first layer) such a sum errs by about u sqrt(m) of its
 * terms' size (u = 2^-24), which batch norm then divides by a standard
 * deviation that can be far below the mean: libdarknet itself lands above
 * 1e-4 of the exact result there.  The device sums in blocks of 16 a thread
 * and trees of 256 (bn.cu), within a few u of the exact sums.  So a
 * batch-normalised layer is held to TOL plus libdarknet's own distance from
 * the exact result (the triangle inequality), measured here against the
 * same formulas in double: the statistics from the layer's x, and for the
 * backward libdarknet's normalize_delta in double from its own
 * activation-gradient delta. */

/* Per channel of a batch-normalised layer: mean and unbiased variance of
 * its x in double. */
static void bn_exact_stats(const layer *l, double *mu, double *var)
{
    int C = l->out_c, S = l->out_w * l->out_h;
    size_t m = (size_t)l->batch * S;
    for (int c = 0; c < C; ++c) {
        double s = 0, q = 0;
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) s += l->x[((size_t)b * C + c) * S + k];
        double mean = s / (double)m;
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) {
                double d = l->x[((size_t)b * C + c) * S + k] - mean;
                q += d * d;
            }
        mu[c] = mean;
        var[c] = m > 1 ? q / (double)(m - 1) : 0;
    }
}

/* The largest slope of the layer's activation (the forward's error passes
 * through it at most this much amplified). */
static double act_slope(const layer *l)
{
    switch (l->activation) {
    case LINEAR: case RELU: case LEAKY: case RAMP: case TANH: return 1.0;
    case LOGISTIC: return 0.25;
    default: return 1.1;
    }
}

/* libdarknet's forward output of a batch-normalised conv layer against the
 * same layer with exact statistics, relative to its output: first order in
 * the statistics' errors, through normalize_cpu (x - mean) / (sqrt(var) +
 * 1e-6), the scale and the activation's slope. */
static double bn_forward_ref_err(const layer *l)
{
    int C = l->out_c, S = l->out_w * l->out_h;
    double *mu = malloc((size_t)C * sizeof *mu), *var = malloc((size_t)C * sizeof *var);
    bn_exact_stats(l, mu, var);
    double e2 = 0, y2 = 0, slope = act_slope(l);
    for (int c = 0; c < C; ++c) {
        double sd = sqrt(var[c]), d = sd + 1e-6;
        double dmu = (double)l->mean[c] - mu[c];
        double dsd = sd > 0 ? ((double)l->variance[c] - var[c]) / (2 * sd) : 0;
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) {
                size_t e = ((size_t)b * C + c) * S + k;
                double dz = -dmu / d - ((double)l->x[e] - mu[c]) * dsd / (d * d);
                double dy = fabs((double)l->scales[c] * dz) * slope;
                e2 += dy * dy;
                y2 += (double)l->output[e] * l->output[e];
            }
    }
    free(mu);
    free(var);
    return y2 > 0 ? sqrt(e2 / y2) : 0;
}

void gradient_array(const float *x, const int n, const ACTIVATION a, float *delta);

/* libdarknet's weight gradient of a batch-normalised conv layer against the
 * same formulas in double (normalize_delta with exact statistics and exact
 * sums, then the same im2col gemm), relative to the weight updates after
 * the backward (wu_after).  delta_in: the layer's delta before its
 * backward; input: the layer's input. */
static double bn_backward_ref_err(const layer *l, const float *delta_in, const float *input,
                                  const float *wu_after)
{
    int C = l->out_c, S = l->out_w * l->out_h, g = l->groups > 0 ? l->groups : 1;
    size_t m = (size_t)l->batch * S, n = outs(l);
    double *mu = malloc((size_t)C * sizeof *mu), *var = malloc((size_t)C * sizeof *var);
    bn_exact_stats(l, mu, var);
    float *da = fdup(delta_in, n);
    gradient_array(l->output, (int)n, l->activation, da);
    /* exact normalize_delta (Darknet's formula, variance + 1e-5) minus
     * libdarknet's result, l->delta */
    double *dd = malloc(n * sizeof *dd);
    for (int c = 0; c < C; ++c) {
        double sc = l->scales[c], r = 1 / sqrt(var[c] + .00001), md = 0, vd = 0;
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) {
                size_t e = ((size_t)b * C + c) * S + k;
                double ds = da[e] * sc;
                md += ds * -r;
                vd += ds * ((double)l->x[e] - mu[c]);
            }
        vd *= -.5 * pow(var[c] + .00001, -1.5);
        for (int b = 0; b < l->batch; ++b)
            for (int k = 0; k < S; ++k) {
                size_t e = ((size_t)b * C + c) * S + k;
                double exact = da[e] * sc * r + vd * 2 * ((double)l->x[e] - mu[c]) / (double)m +
                               md / (double)m;
                dd[e] = (double)l->delta[e] - exact;
            }
    }
    /* dW = sum over images of dd (per group: n/g x S) times im2col(input)^T */
    int nf = l->n / g, cg = l->c / g, kk = cg * l->size * l->size;
    sdnn_conv_geom geo = {cg, l->h, l->w, l->size, l->stride, l->pad, l->out_h, l->out_w};
    double *dw = calloc((size_t)l->n * kk, sizeof *dw);
    float *col = malloc((size_t)kk * S * sizeof *col);
    for (int b = 0; b < l->batch; ++b)
        for (int j = 0; j < g; ++j) {
            const float *im = input + ((size_t)b * g + j) * cg * l->h * l->w;
            for (size_t q = 0; q < (size_t)kk * S; ++q) col[q] = sdnn_im2col_elem(im, &geo, q);
            for (int f = 0; f < nf; ++f) {
                const double *row = dd + ((size_t)b * l->n + (size_t)j * nf + f) * S;
                double *w = dw + ((size_t)j * nf + f) * kk;
                for (int q = 0; q < kk; ++q) {
                    const float *cr = col + (size_t)q * S;
                    double acc = 0;
                    for (int k = 0; k < S; ++k) acc += row[k] * cr[k];
                    w[q] += acc;
                }
            }
        }
    double e2 = 0, w2 = 0;
    for (size_t q = 0; q < (size_t)l->n * kk; ++q) {
        e2 += dw[q] * dw[q];
        w2 += (double)wu_after[q] * wu_after[q];
    }
    free(col);
    free(dw);
    free(dd);
    free(da);
    free(mu);
    free(var);
    return w2 > 0 ? sqrt(e2 / w2) : 0;
}

static int set_t(sdnn_gpu_net *g, int i, sdnn_gpu_tensor t, const float *host)
{
    sdnn_status s = sdnn_gpu_net_set(g, i, t, host);
    if (s != SDNN_OK) printf("    set tensor %d of layer %d: %s\n", (int)t, i, sdnn_last_error());
    return s == SDNN_OK;
}

static void cpu_forward(network *net, int i, float *input, float *truth)
{
    layer *l = &net->layers[i];
    if (l->delta) memset(l->delta, 0, outs(l) * sizeof(float));
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

/* Push every CPU output of layers < i (layer i-1's as it was before layer
 * i ran: dropout and masked cost change their input in place). */
static int push_inputs(ref *R, int i, const float *prev_before)
{
    network *net = R->cpu;
    if (!set_t(R->g, 0, SDNN_GT_INPUT, R->x)) return 0;
    if (!set_t(R->g, 0, SDNN_GT_TRUTH, R->y)) return 0;
    for (int j = 0; j < i; ++j) {
        const float *src = j == i - 1 && prev_before ? prev_before : net->layers[j].output;
        if (!set_t(R->g, j, SDNN_GT_OUTPUT, src)) return 0;
    }
    return 1;
}

static void check_forward(ref *R, int i)
{
    network *net = R->cpu;
    layer *l = &net->layers[i];
    float *input = i == 0 ? R->x : net->layers[i - 1].output;
    size_t nin = (size_t)l->inputs * l->batch;
    /* what layer i - 1 (or the net's input) holds: a route's inputs are
     * not its previous layer's outputs */
    size_t nprev = i == 0 ? (size_t)net->inputs * net->batch : outs(&net->layers[i - 1]);
    float *prev_before = fdup(input, nprev);
    float *rm0 = NULL, *rv0 = NULL;
    if (l->batch_normalize) {
        rm0 = fdup(l->rolling_mean, nbiases(l));
        rv0 = fdup(l->rolling_variance, nbiases(l));
    }
    cpu_forward(net, i, input, R->y);
    if (!push_inputs(R, i, prev_before)) {
        SOFT_ASSERT(0, "layer %d: pushing inputs", i);
        goto out;
    }
    if (l->batch_normalize) {
        set_t(R->g, i, SDNN_GT_ROLLING_MEAN, rm0);
        set_t(R->g, i, SDNN_GT_ROLLING_VARIANCE, rv0);
    }
    memcpy(R->dev->truth, R->y, (size_t)net->truths * net->batch * sizeof(float));
    sdnn_status s = sdnn_gpu_net_layer_forward(R->g, i, 1);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "layer %d (%s) forward: %s", i, kind(l), sdnn_last_error());
        goto out;
    }
    double e;
    if (l->type == DROPOUT) {
        /* The device's own draws: out = r < p ? 0 : in * scale. */
        float *rnd = malloc(nin * sizeof *rnd), *want = malloc(nin * sizeof *want);
        sdnn_gpu_net_get(R->g, i, SDNN_GT_RAND, rnd);
        size_t dropped = 0;
        for (size_t k = 0; k < nin; ++k) {
            want[k] = rnd[k] < l->probability ? 0 : prev_before[k] * l->scale;
            dropped += rnd[k] < l->probability;
        }
        e = dev_err(R->g, i, SDNN_GT_OUTPUT, want, nin);
        tm_margin("gpu/layers:forward", e, TOL);
        double frac = (double)dropped / (double)nin;
        SOFT_ASSERT(e < TOL && fabs(frac - l->probability) < 0.05 + 3.0 / sqrt((double)nin),
                 "layer %2d %-9s forward: rel err %.2e, dropped %.3f (p = %.2f)", i, kind(l), e,
                 frac, l->probability);
        free(rnd);
        free(want);
    } else {
        e = dev_err(R->g, i, SDNN_GT_OUTPUT, l->output, outs(l));
        /* a batch-normalised conv: TOL plus libdarknet's own distance from
         * the exact statistics (above) */
        double ref = l->type == CONVOLUTIONAL && l->batch_normalize ? bn_forward_ref_err(l) : 0;
        if (ref > 0 && getenv("SDNN_LAYERS_VERBOSE"))
            printf("    layer %2d %-9s forward: rel err %.2e, libdarknet's own %.2e\n", i, kind(l),
                   e, ref);
        tm_margin("gpu/layers:forward", e, TOL + ref);
        SOFT_ASSERT(e < TOL + ref, "layer %2d %-9s forward: rel err %.2e (libdarknet's own %.2e)",
                    i, kind(l), e, ref);
    }
    if (l->type == COST && l->cost_type == MASKED && i > 0) {
        /* Darknet writes SECRET_NUM into the input where the truth is */
        double ei = dev_err(R->g, i - 1, SDNN_GT_OUTPUT, input, nprev);
        SOFT_ASSERT(ei < TOL, "layer %2d %-9s masked input: rel err %.2e", i, kind(l), ei);
    }
    if (l->batch_normalize) {
        double em = dev_err(R->g, i, SDNN_GT_ROLLING_MEAN, l->rolling_mean, nbiases(l));
        double ev = dev_err(R->g, i, SDNN_GT_ROLLING_VARIANCE, l->rolling_variance, nbiases(l));
        tm_margin("gpu/layers:bn_stats", fmax(em, ev), TOL);
        SOFT_ASSERT(em < TOL && ev < TOL, "layer %2d %-9s running mean %.2e, variance %.2e", i,
                 kind(l), em, ev);
    }
    if (l->cost) {
        float dc = sdnn_gpu_net_layer_cost(R->g, i);
        double ec = fabs((double)dc - l->cost[0]) / fmax(fabs(l->cost[0]), 1e-6);
        tm_margin("gpu/layers:cost", ec, TOL);
        SOFT_ASSERT(ec < TOL, "layer %2d %-9s cost %g vs %g", i, kind(l), dc, l->cost[0]);
        if (l->type == YOLO || l->type == REGION || l->type == SOFTMAX || l->type == COST) {
            double ed = dev_err(R->g, i, SDNN_GT_DELTA, l->delta, outs(l));
            tm_margin("gpu/layers:loss_delta", ed, TOL);
            SOFT_ASSERT(ed < TOL, "layer %2d %-9s loss delta: rel err %.2e", i, kind(l), ed);
        }
    }
out:
    free(prev_before);
    free(rm0);
    free(rv0);
}

/* Region backward as Darknet's GPU build: logistic gradient (the layer's
 * own delta holds it afterwards), then +=. */
static void region_expected(layer *l, const float *delta, float *prev)
{
    int wh = l->w * l->h, per = l->coords + l->classes + 1;
    for (size_t k = 0; k < outs(l); ++k) {
        int r = (int)(k % (size_t)l->outputs);
        int e = (r / wh) % per;
        int logistic = e < 2 || (l->coords > 4 && e >= 4 && e < l->coords) ||
                       (e == l->coords && !l->background);
        float d = delta[k];
        if (logistic) d *= (1 - l->output[k]) * l->output[k];
        l->delta[k] = d;
        prev[k] += d;
    }
}

static void check_backward(ref *R, int i)
{
    network *net = R->cpu;
    layer *l = &net->layers[i];
    int n = net->n;
    float **before = calloc((size_t)n, sizeof *before);
    for (int j = 0; j < n; ++j) before[j] = fdup(net->layers[j].delta, outs(&net->layers[j]));
    size_t nw = nweights(l), nb = nbiases(l);
    float *wu = fdup(l->weight_updates, nw), *bu = fdup(l->bias_updates, nb);
    float *su = l->batch_normalize ? fdup(l->scale_updates, nb) : NULL;
    float *input = i == 0 ? R->x : net->layers[i - 1].output;
    /* The previous delta: libdarknet's share on a zeroed delta (dropout
     * works in place on it instead), the device's on known values. */
    layer *prev = i == 0 ? NULL : &net->layers[i - 1];
    size_t np = prev ? outs(prev) : 0;
    int share_of = prev && l->type != DROPOUT;
    float *pre = NULL, *share = NULL;
    if (share_of) memset(prev->delta, 0, np * sizeof(float));
    cpu_backward(net, i, input, prev ? prev->delta : NULL);
    if (l->type == REGION) region_expected(l, before[i], prev->delta);
    if (share_of) {
        share = fdup(prev->delta, np);
        double rms = 0;
        for (size_t k = 0; k < np; ++k) rms += (double)share[k] * share[k];
        rms = np ? sqrt(rms / (double)np) : 0;
        if (rms == 0) rms = 1;
        pre = malloc((np ? np : 1) * sizeof *pre);
        for (size_t k = 0; k < np; ++k) {
            pre[k] = before[i - 1][k] + (float)(rms * gt_unif(-1, 1));
            prev->delta[k] = pre[k] + share[k];
        }
    }

    int ok = push_inputs(R, i, NULL);
    for (int j = 0; ok && j < n; ++j)
        ok = set_t(R->g, j, SDNN_GT_DELTA, share_of && j == i - 1 ? pre : before[j]);
    /* the layer's own output (activation gradient) as the CPU had it */
    if (ok) ok = set_t(R->g, i, SDNN_GT_OUTPUT, l->output);
    if (ok && nw) {
        ok = set_t(R->g, i, SDNN_GT_WEIGHT_UPDATES, wu) && set_t(R->g, i, SDNN_GT_BIAS_UPDATES, bu);
        if (ok && su) ok = set_t(R->g, i, SDNN_GT_SCALE_UPDATES, su);
    }
    if (ok && l->type == DROPOUT) ok = set_t(R->g, i, SDNN_GT_RAND, l->rand);
    if (!ok) {
        SOFT_ASSERT(0, "layer %d: pushing backward state", i);
        goto out;
    }
    sdnn_status s = sdnn_gpu_net_layer_backward(R->g, i);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "layer %d (%s) backward: %s", i, kind(l), sdnn_last_error());
        goto out;
    }
    double worst = 0;
    int worst_j = -1;
    for (int j = 0; j < i; ++j) {
        layer *lj = &net->layers[j];
        double e = dev_err(R->g, j, SDNN_GT_DELTA, lj->delta, outs(lj));
        if (e > worst) worst = e, worst_j = j;
    }
    if (l->type != DROPOUT) {
        /* this layer's delta after its own backward (activation, batch norm) */
        double e = dev_err(R->g, i, SDNN_GT_DELTA, l->delta, outs(l));
        if (e > worst) worst = e, worst_j = i;
    }
    tm_margin("gpu/layers:backward", worst, TOL);
    SOFT_ASSERT(worst < TOL, "layer %2d %-9s backward: deltas rel err %.2e (worst: layer %d)", i,
             kind(l), worst, worst_j);
    if (nw) {
        /* the terms: the delta after the activation gradient (bias), times
         * x_norm (scale); l->delta after a batch-norm backward is the
         * normalised one, of the same size */
        double ew = dev_err(R->g, i, SDNN_GT_WEIGHT_UPDATES, l->weight_updates, nw);
        double wref = l->type == CONVOLUTIONAL && l->batch_normalize
                          ? bn_backward_ref_err(l, before[i], input, l->weight_updates)
                          : 0;
        double eb = dev_err_floor(R->g, i, SDNN_GT_BIAS_UPDATES, l->bias_updates, nb,
                                  channel_terms(l, l->delta, NULL));
        double es = su ? dev_err_floor(R->g, i, SDNN_GT_SCALE_UPDATES, l->scale_updates, nb,
                                       channel_terms(l, l->delta, l->x_norm))
                       : 0;
        if (wref > 0 && getenv("SDNN_LAYERS_VERBOSE"))
            printf("    layer %2d %-9s weights: rel err %.2e, libdarknet's own %.2e\n", i, kind(l),
                   ew, wref);
        tm_margin("gpu/layers:gradients", fmax(ew * TOL / (TOL + wref), fmax(eb, es)), TOL);
        SOFT_ASSERT(ew < TOL + wref && eb < TOL && es < TOL,
                 "layer %2d %-9s gradients: weights %.2e (libdarknet's own %.2e), biases %.2e, "
                 "scales %.2e", i, kind(l), ew, wref, eb, es);
    }
out:
    /* The CPU network goes on with the correct gradient, without the known
     * values: what was there + this layer's share. */
    if (share_of)
        for (size_t k = 0; k < np; ++k) prev->delta[k] = before[i - 1][k] + share[k];
    free(pre);
    free(share);
    for (int j = 0; j < n; ++j) free(before[j]);
    free(before);
    free(wu);
    free(bu);
    free(su);
}

static void check_update(ref *R)
{
    network *net = R->cpu;
    /* Past burn-in, so the rate is not 0 and the weights move. */
    *net->seen = (size_t)1000 * net->batch * net->subdivisions;
    gt_copy_net(R->dev, net);
    sdnn_status s = sdnn_gpu_net_push(R->g);
    if (s == SDNN_OK) s = sdnn_gpu_net_update(R->g);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "update: %s", sdnn_last_error());
        return;
    }
    update_network(net);
    double worst = 0;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        size_t nw = nweights(l), nb = nbiases(l);
        if (!nw) continue;
        double e[5] = {dev_err(R->g, i, SDNN_GT_WEIGHTS, l->weights, nw),
                       dev_err(R->g, i, SDNN_GT_WEIGHT_UPDATES, l->weight_updates, nw),
                       dev_err(R->g, i, SDNN_GT_BIASES, l->biases, nb),
                       dev_err(R->g, i, SDNN_GT_BIAS_UPDATES, l->bias_updates, nb),
                       l->batch_normalize ? dev_err(R->g, i, SDNN_GT_SCALES, l->scales, nb) : 0};
        for (int k = 0; k < 5; ++k)
            if (e[k] > worst) worst = e[k];
    }
    SOFT_ASSERT(worst < 1e-6, "update (momentum, decay, batch scaling): worst rel err %.2e", worst);
}

/* Inputs and truths that suit the network's last layers. */
static void make_data(ref *R, uint64_t seed)
{
    network *net = R->cpu;
    size_t nin = (size_t)net->inputs * net->batch, ntr = (size_t)net->truths * net->batch;
    R->x = calloc(nin, sizeof(float));
    R->y = calloc(ntr ? ntr : 1, sizeof(float));
    layer *last = &net->layers[net->n - 1];
    int detection = 0, classes = 1;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == YOLO || net->layers[i].type == REGION) {
            detection = 1;
            classes = net->layers[i].classes;
        }
    if (detection) {
        data d = gt_detection_data(net->batch, net->w, net->h, net->c, net->truths, classes, seed);
        for (int r = 0; r < net->batch; ++r) {
            memcpy(R->x + (size_t)r * net->inputs, d.X.vals[r], (size_t)net->inputs * 4);
            memcpy(R->y + (size_t)r * net->truths, d.y.vals[r], (size_t)net->truths * 4);
        }
        free_data(d);
    } else {
        gt_seed(seed);
        gt_fill(R->x, nin, 0, 1);
        if (last->type == COST && last->cost_type != SSE) {
            gt_fill(R->y, ntr, -1, 1);
            if (last->cost_type == MASKED)   /* every third truth is ignored */
                for (size_t k = 0; k < ntr; k += 3) R->y[k] = SDNN_COST_SECRET;
        }
        else
            for (int r = 0; r < net->batch; ++r)
                R->y[(size_t)r * net->truths + gt_next() % (uint64_t)net->truths] = 1;
    }
}

static void run(const char *name, const char *text, const char *set, sdnn_gpu_vdev *vd)
{
    printf("%s\n", name);
    ref R;
    memset(&R, 0, sizeof R);
    R.cpu = gt_parse_text(text, set);
    R.dev = gt_parse_text(text, set);
    if (!R.cpu || !R.dev) {
        SOFT_ASSERT(0, "%s: parse", name);
        return;
    }
    gt_randomize(R.cpu, 42);
    gt_copy_net(R.dev, R.cpu);
    sdnn_status s = sdnn_gpu_net_create(R.dev, vd, &R.g);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: gpu net: %s", name, sdnn_last_error());
        return;
    }
    make_data(&R, 7);
    for (int i = 0; i < R.cpu->n; ++i) check_forward(&R, i);
    for (int i = R.cpu->n - 1; i >= 0; --i) {
        if (R.cpu->layers[i].stopbackward) break;
        check_backward(&R, i);
    }
    check_update(&R);
    sdnn_gpu_net_destroy(R.g);
    free(R.x);
    free(R.y);
    sdnn_network_free(R.cpu);
    sdnn_network_free(R.dev);
}

static const char *zoo =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=16\nheight=16\nchannels=3\n"
    "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=12\ngroups=2\nsize=3\nstride=1\npad=1\nactivation=linear\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=1\nstride=1\nactivation=relu\n"
    "[shortcut]\nfrom=-3\nactivation=leaky\nalpha=0.5\nbeta=1.5\n"
    "[upsample]\nstride=2\n"
    "[route]\nlayers=-1,0\n"
    "[maxpool]\nsize=2\nstride=1\n"
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=2\npad=1\nactivation=logistic\n"
    "[avgpool]\n"
    "[connected]\noutput=20\nbatch_normalize=1\nactivation=leaky\n"
    "[dropout]\nprobability=0.25\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n"
    "[cost]\ntype=sse\n";

/* Every activation of ops.h in a convolution, with and without batch norm,
 * and in a connected layer. */
static const char *activations =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=6\nheight=6\nchannels=3\n"
    "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=logistic\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=relu\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=relie\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=ramp\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=tanh\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=plse\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=elu\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=loggy\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=stair\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=hardtan\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=lhtan\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=selu\n"
    "[connected]\noutput=6\nactivation=loggy\n"
    "[connected]\noutput=5\nbatch_normalize=1\nactivation=selu\n"
    "[cost]\ntype=sse\n";

static const char *regress =
    "[net]\nbatch=3\nsubdivisions=1\nwidth=6\nheight=6\nchannels=2\n"
    "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=tanh\n"
    "[connected]\noutput=7\nactivation=elu\n"
    "[cost]\ntype=smooth\nscale=0.5\n";

static const char *regress_l1 =
    "[net]\nbatch=3\nsubdivisions=1\nwidth=6\nheight=6\nchannels=2\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=relie\n"
    "[connected]\noutput=7\nactivation=linear\n"
    "[cost]\ntype=L1\n";

/* ---- sizes that cross every boundary of a launch ------------------------------------ */

/* layers.cu's, bn.cu's and conv.cu's kernels at element counts on both sides
 * of a warp (32), a block (256), bn.cu's parts (4096 values a part) and
 * 65537 (past 2^16): one image of width n and one channel, so every layer of
 * `pipeline` but upsample and avgpool holds n (or n + 1) values: conv 3x3
 * with batch norm (im2col of 9n, a channel of m = n values, col2im; no batch
 * norm at n = 1, where Darknet's variance over m - 1 is 0/0), shortcut,
 * dropout, maxpool, upsample (4n), avgpool (a mean of 4n), a route of two
 * inputs (rows_add), softmax and its cross-entropy over n + 1 values, sse
 * cost, the update.  `wide_bn` is a connected layer of n channels with batch
 * norm (ceil(n / 128) finishing threads, partial blocks of 32).
 * Above 2^24 (n = 2^24 + 3, where a float index would round) the layers
 * without a sum over the n values run: maxpool (forward only: the first
 * layer, whose libdarknet backward would write a delta that is not there),
 * maxpool, shortcut with leaky, dropout, avgpool (one thread a channel adds its values in libdarknet's
 * order), cost.  Not there: sums over the 2^24 values (batch norm's
 * statistics, softmax's, a convolution's bias and 1x1 weight gradients),
 * where libdarknet's float running sum stalls and is no reference
 * (measured against the kernels: running mean 2.96e-3, softmax 5.0e-2, bias
 * gradient 8.3e-3 of the sum of its terms' magnitudes); tests/gpu/sim/
 * mutants checks bn.cu's sums at that size against double sums.  The block
 * order is SDNN_SIM_JITTER's (run_sim.sh runs three). */
static void sizes(sdnn_gpu_vdev *vd)
{
    const size_t ns[] = {1, 31, 32, 33, 255, 256, 257, 4095, 4096, 4097, 65537};
    char cfg[1024], name[96];
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; ++k) {
        size_t n = ns[k];
        snprintf(cfg, sizeof cfg,
                 "[net]\nbatch=1\nsubdivisions=1\nwidth=%zu\nheight=1\nchannels=1\n"
                 "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
                 "[convolutional]\nbatch_normalize=%d\nfilters=1\nsize=3\nstride=1\npad=1\n"
                 "activation=leaky\n"
                 "[shortcut]\nfrom=-1\nactivation=linear\n"
                 "[dropout]\nprobability=0.25\n"
                 "[maxpool]\nsize=2\nstride=1\n"
                 "[upsample]\nstride=2\n"
                 "[avgpool]\n"
                 "[route]\nlayers=-1,-3\n"
                 "[softmax]\n"
                 "[cost]\ntype=sse\n",
                 n, n > 1);
        snprintf(name, sizeof name, "sizes: pipeline, n = %zu", n);
        run(name, cfg, NULL, vd);
        snprintf(cfg, sizeof cfg,
                 "[net]\nbatch=2\nsubdivisions=1\nwidth=1\nheight=1\nchannels=3\n"
                 "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
                 "[connected]\noutput=%zu\nbatch_normalize=1\nactivation=leaky\n"
                 "[cost]\ntype=sse\n",
                 n);
        snprintf(name, sizeof name, "sizes: wide_bn, n = %zu", n);
        run(name, cfg, NULL, vd);
    }
    size_t big = ((size_t)1 << 24) + 3;
    snprintf(cfg, sizeof cfg,
             "[net]\nbatch=1\nsubdivisions=1\nwidth=%zu\nheight=1\nchannels=1\n"
             "learning_rate=0.01\nmomentum=0.9\ndecay=0.0005\n"
             "[maxpool]\nsize=2\nstride=1\nstopbackward=1\n"
             "[maxpool]\nsize=2\nstride=1\n"
             "[shortcut]\nfrom=-2\nactivation=leaky\n"
             "[dropout]\nprobability=0.25\n"
             "[avgpool]\n"
             "[cost]\ntype=sse\n",
             big);
    snprintf(name, sizeof name, "sizes: elementwise, n = %zu", big);
    run(name, cfg, NULL, vd);
}

/* ---- a launch captures its arguments ---------------------------------------------- */

/* As a CUDA launch does, a device layer call takes what it needs when it is
 * called: the host may change the layer structs (net.c rebuilds states,
 * replicas swap buffers) before the queued work runs.  Here they change at
 * once after the calls; on the simulated device with SDNN_SIM_JITTER the
 * queued work mostly runs after that. */
#define CAP_OK(call, what)                                                             \
    do {                                                                               \
        if ((call) != SDNN_OK) {                                                       \
            SOFT_ASSERT(0, "launch capture: %s: %s", what, sdnn_last_error());         \
            goto out;                                                                  \
        }                                                                              \
    } while (0)

static void check_launch_capture(sdnn_dctx *c)
{
    enum { B = 2, A0 = 5, A1 = 3, A = A0 + A1, NI = 4, NO = 3 };
    sdnn_dlayer L[3];
    memset(L, 0, sizeof L);
    float h0[B * A0], h1[B * A1], got[B * A], want[B * A];
    float w[NI * NO], u[NI * NO], b[NO], bu[NO], wg[NI * NO], bg[NO];
    gt_seed(99);
    gt_fill(h0, B * A0, -1, 1);
    gt_fill(h1, B * A1, -1, 1);
    for (int r = 0; r < B; ++r) {
        memcpy(want + r * A, h0 + r * A0, A0 * sizeof(float));
        memcpy(want + r * A + A0, h1 + r * A1, A1 * sizeof(float));
    }
    float *route_out = NULL, *src0 = NULL, *src1 = NULL;
    float *dw = NULL, *du = NULL, *db = NULL, *dbu = NULL;
    /* route: two source layers, then the route */
    L[0].batch = L[1].batch = L[2].batch = B;
    L[0].outputs = A0;
    L[1].outputs = A1;
    L[2].kind = SDNN_DL_ROUTE;
    L[2].index = 2;
    L[2].inputs = L[2].outputs = A;
    L[2].nroute = 2;
    L[2].route_from[0] = 0;
    L[2].route_from[1] = 1;
    L[2].route_size[0] = A0;
    L[2].route_size[1] = A1;
    CAP_OK(sdnn_dmalloc(c, sizeof h0, (void **)&src0), "alloc");
    CAP_OK(sdnn_dmalloc(c, sizeof h1, (void **)&src1), "alloc");
    L[0].output = src0;
    L[1].output = src1;
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, src0, h0, sizeof h0, 0), "copy");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, src1, h1, sizeof h1, 1), "copy");
    CAP_OK(sdnn_dl_setup(c, &L[2]), "route setup");
    route_out = L[2].output;
    sdnn_dstate st;
    memset(&st, 0, sizeof st);
    st.input = src1;
    st.layers = L;
    st.train = 1;
    CAP_OK(sdnn_dl_forward(c, &L[2], &st), "route forward");
    /* the sources swapped, the route's sizes and output gone */
    L[0].output = src1;
    L[1].output = src0;
    L[2].output = NULL;
    L[2].route_size[0] = L[2].route_size[1] = 0;
    L[2].batch = 0;

    /* update: a connected layer's parameters */
    sdnn_dlayer f;
    memset(&f, 0, sizeof f);
    f.kind = SDNN_DL_CONNECTED;
    f.inputs = NI;
    f.outputs = NO;
    f.batch = B;
    f.lr_scale = 1;
    gt_fill(w, NI * NO, -1, 1);
    gt_fill(u, NI * NO, -1, 1);
    gt_fill(b, NO, -1, 1);
    gt_fill(bu, NO, -1, 1);
    CAP_OK(sdnn_dmalloc(c, sizeof w, (void **)&dw), "alloc");
    CAP_OK(sdnn_dmalloc(c, sizeof u, (void **)&du), "alloc");
    CAP_OK(sdnn_dmalloc(c, sizeof b, (void **)&db), "alloc");
    CAP_OK(sdnn_dmalloc(c, sizeof bu, (void **)&dbu), "alloc");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, dw, w, sizeof w, 0), "copy");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, du, u, sizeof u, 0), "copy");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, db, b, sizeof b, 0), "copy");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, dbu, bu, sizeof bu, 1), "copy");
    f.weights = dw;
    f.weight_updates = du;
    f.biases = db;
    f.bias_updates = dbu;
    sdnn_dupdate ua = {B, 0.1f, 0.9f, 0.0005f};
    CAP_OK(sdnn_dl_update(c, &f, &ua), "update");
    f.weights = f.weight_updates = f.biases = f.bias_updates = NULL;
    f.lr_scale = 0;
    ua.learning_rate = 0;
    ua.batch = 1;

    CAP_OK(sdnn_dctx_sync(c), "sync");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, got, route_out, sizeof got, 1), "copy back");
    SOFT_ASSERT(gt_bytes_differ(got, want, sizeof got) == 0,
                "launch capture: route output from the sources as they were at the call");
    for (int k = 0; k < NI * NO; ++k)
        sdnn_sgd_elem(&w[k], &u[k], -0.0005f * B, 0.1f / B, 0.9f);
    for (int k = 0; k < NO; ++k) sdnn_sgd_elem(&b[k], &bu[k], 0, 0.1f / B, 0.9f);
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, wg, dw, sizeof wg, 0), "copy back");
    CAP_OK(sdnn_dcopy(c, SDNN_STREAM_COMPUTE, bg, db, sizeof bg, 1), "copy back");
    SOFT_ASSERT(gt_bytes_differ(wg, w, sizeof w) == 0 && gt_bytes_differ(bg, b, sizeof b) == 0,
                "launch capture: update with the rates and buffers as they were at the call");
out:
    sdnn_dctx_sync(c);
    L[2].output = route_out;
    L[2].batch = B;
    sdnn_dl_release(&L[2]);
    sdnn_dfree(src0);
    sdnn_dfree(src1);
    sdnn_dfree(dw);
    sdnn_dfree(du);
    sdnn_dfree(db);
    sdnn_dfree(dbu);
}

/* A layer whose elements a batch pass INT_MAX is refused before anything is
 * allocated: the kernels hand int indices to ops.h's maps. */
static void check_int_bound(sdnn_dctx *c)
{
    static const struct { int inputs, outputs, batch; } big[] = {
        {1 << 20, 1 << 20, 2048}, {1 << 16, 4, 1 << 15}, {4, -1, 1}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; ++i) {
        sdnn_dlayer l;
        memset(&l, 0, sizeof l);
        l.kind = SDNN_DL_MAXPOOL;
        l.index = 7;
        l.inputs = big[i].inputs;
        l.outputs = big[i].outputs;
        l.batch = big[i].batch;
        sdnn_status st = sdnn_dl_setup(c, &l);
        const char *why = st == SDNN_OK ? "" : sdnn_last_error();
        SOFT_ASSERT(st == SDNN_ERR_UNSUPPORTED && strstr(why, "layer 7") && !l.output,
                    "inputs %d, outputs %d, batch %d: refused naming the layer, nothing "
                    "allocated (%d: %s)",
                    big[i].inputs, big[i].outputs, big[i].batch, (int)st, why);
        sdnn_dl_release(&l);
    }
}

static const char *regress_masked =
    "[net]\nbatch=3\nsubdivisions=1\nwidth=5\nheight=5\nchannels=2\n"
    "[convolutional]\nfilters=3\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=6\nactivation=linear\n"
    "[cost]\ntype=masked\n";

int main(int argc, char **argv)
{
    argv0_ = "layers";
    sdnn_gpu_vdev *vd = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    if (argc > 1) {
        for (int i = 1; i < argc; ++i) {
            char *t = gt_read_file(argv[i]);
            if (!t) {
                SOFT_ASSERT(0, "%s: cannot read", argv[i]);
                continue;
            }
            run(argv[i], t, "batch=2\nsubdivisions=1\n", vd);
            free(t);
        }
    } else {
        check_launch_capture(vd);
        check_int_bound(vd);
        sizes(vd);
        run("zoo (every kind)", zoo, NULL, vd);
        run("activations (every kind)", activations, NULL, vd);
        run("regression (smooth L1)", regress, NULL, vd);
        run("regression (L1)", regress_l1, NULL, vd);
        run("regression (masked)", regress_masked, NULL, vd);
        const char *dir = getenv("SDNN_DEBIAN_CFG");
        if (!dir || !*dir) dir = "/usr/share/darknet/cfg";
        struct {
            const char *path, *set;
        } files[] = {
            {"cfg/shapes.cfg", "batch=2\nsubdivisions=1\n"},
            {"cfg/fmnist.cfg", "batch=4\nsubdivisions=1\n"},
            {"yolov3-tiny.cfg", "batch=2\nsubdivisions=1\nwidth=160\nheight=160\n"},
            {"yolov2-tiny.cfg", "batch=2\nsubdivisions=1\nwidth=160\nheight=160\n"},
            {"cifar.cfg", "batch=4\nsubdivisions=1\n"},
        };
        for (size_t k = 0; k < sizeof files / sizeof files[0]; ++k) {
            char path[512];
            if (strncmp(files[k].path, "cfg/", 4) == 0) snprintf(path, sizeof path, "%s", files[k].path);
            else snprintf(path, sizeof path, "%s/%s", dir, files[k].path);
            char *t = gt_read_file(path);
            if (!t) {
                SOFT_ASSERT(0, "%s: cannot read", path);
                continue;
            }
            run(path, t, files[k].set, vd);
            free(t);
        }
    }
    sdnn_gpu_vdev_close(vd);
    return gt_summary("layers");
}
