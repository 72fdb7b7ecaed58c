/*
 * dialect: the maintained fork's cfg dialect on the gpu engine's
 * device network, layer by layer against the CPU network (libdarknet's
 * layers with plugin/darknet/dialect.c's wrappers) on the same weights and
 * batch: the grouped route (slice copy forward, delta added into the
 * routed layer's slice backward), mish and swish on convolutional,
 * connected and shortcut layers (act_ops.h's formulas in the device
 * activation kernels, the gradient at the kept input).
 *
 *   every layer's output and delta, every parameter layer's weight and
 *   bias updates within TOL (relative) of the CPU's after one forward and
 *   backward in training mode;
 *   the device's dialect query (sdnn_dialect_layer) names the layers the
 *   dialect changed and nothing else;
 *   a grouped route whose slice lies outside its source is refused by
 *   sdnn_gpu_layer_support naming the layer and why.
 *
 * Tolerance.  The simulated layers sum in index order and libdarknet's gemm
 * in its own: outputs and deltas differ by float rounding (measured below
 * 1e-5 relative); 1e-4 leaves that room, and a wrong slice, a linear
 * activation where mish belongs or a gradient taken at the output instead
 * of the input is O(1) off.  On simulated devices this checks host logic
 * and the CUDA kernels run as themselves on the host executor, not a GPU.
 */
#include "dev.h"
#include "dialect.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"

#define TOL 1e-4

/* Layers: 0 conv mish (bn), 1 grouped route (second half of 0), 2 conv
 * swish, 3 shortcut of 1 with swish, 4 grouped route (first half of 0),
 * 5 route of 3 and 4, 6 connected mish, 7 connected linear, 8 cost. */
static const char *cfg =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=6\nheight=6\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.01\nmax_batches=10\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=mish\n"
    "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=swish\n"
    "[shortcut]\nfrom=-2\nactivation=swish\n"
    "[route]\nlayers=-4\ngroups=2\ngroup_id=0\n"
    "[route]\nlayers=-2,-1\n"
    "[connected]\noutput=12\nactivation=mish\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[cost]\ntype=sse\n";

static const sdnn_dialect_kind expect_kind[] = {
    SDNN_DIALECT_MISH, SDNN_DIALECT_ROUTE_SLICE, SDNN_DIALECT_SWISH, SDNN_DIALECT_SWISH,
    SDNN_DIALECT_ROUTE_SLICE, SDNN_DIALECT_NONE, SDNN_DIALECT_MISH, SDNN_DIALECT_NONE,
    SDNN_DIALECT_NONE};

static float *dupf(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (y && n) memcpy(y, x, n * sizeof *y);
    return y;
}

static size_t nparams(const layer *l, int bias)
{
    if (l->type == CONNECTED) return bias ? (size_t)l->outputs : (size_t)l->inputs * l->outputs;
    if (l->type == CONVOLUTIONAL && l->nweights > 0) return bias ? (size_t)l->n : (size_t)l->nweights;
    return 0;
}

static void zero_updates(network *net)
{
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        size_t nw = nparams(l, 0), nb = nparams(l, 1);
        if (nw) memset(l->weight_updates, 0, nw * sizeof(float));
        if (nb) memset(l->bias_updates, 0, nb * sizeof(float));
        if (nb && l->batch_normalize) memset(l->scale_updates, 0, nb * sizeof(float));
    }
}

static int layer_by_layer(void)
{
    network *net = gt_parse_text(cfg, NULL);
    SOFT_ASSERT(net != NULL, "the dialect cfg parses: %s", net ? "" : sdnn_last_error());
    if (!net) return 1;
    SOFT_ASSERT(net->n == (int)(sizeof expect_kind / sizeof expect_kind[0]), "%d layers", net->n);
    if (net->n != (int)(sizeof expect_kind / sizeof expect_kind[0])) return 1;
    for (int i = 0; i < net->n; ++i) {
        sdnn_dialect_layer_info di;
        sdnn_dialect_kind k = sdnn_dialect_layer(net, i, &di);
        SOFT_ASSERT(k == expect_kind[i], "layer %d: dialect kind %d (expected %d)", i, (int)k,
                 (int)expect_kind[i]);
        if (k == SDNN_DIALECT_ROUTE_SLICE)
            SOFT_ASSERT(di.src == 0 && di.gid == (i == 1 ? 1 : 0), "layer %d: slice %d of layer %d",
                     i, di.gid, di.src);
    }
    gt_randomize(net, 17);
    zero_updates(net);
    size_t nin = (size_t)net->inputs * net->batch, ntr = (size_t)net->truths * net->batch;
    float *X = malloc(nin * sizeof *X), *Y = malloc(ntr * sizeof *Y);
    gt_seed(5);
    gt_fill(X, nin, -1, 1);
    gt_fill(Y, ntr, -1, 1);

    /* The CPU network: forward and backward as Darknet's train step does. */
    float *in0 = net->input, *tr0 = net->truth;
    net->input = X;
    net->truth = Y;
    net->train = 1;
    net->delta = 0;
    forward_network(net);
    backward_network(net);
    net->input = in0;
    net->truth = tr0;
    int n = net->n;
    float **out = calloc((size_t)n, sizeof *out), **del = calloc((size_t)n, sizeof *del);
    float **wu = calloc((size_t)n, sizeof *wu), **bu = calloc((size_t)n, sizeof *bu);
    for (int i = 0; i < n; ++i) {
        layer *l = &net->layers[i];
        size_t o = (size_t)l->outputs * l->batch;
        out[i] = dupf(l->output, o);
        del[i] = dupf(l->delta, o);
        wu[i] = dupf(l->weight_updates, nparams(l, 0));
        bu[i] = dupf(l->bias_updates, nparams(l, 1));
    }
    zero_updates(net);

    sdnn_gpu_vdev *vd = NULL;
    sdnn_gpu_net *g = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    if (vd) GT_OK(sdnn_gpu_net_create(net, vd, &g));
    float cost = 0;
    if (g) {
        GT_OK(sdnn_gpu_net_set_input(g, X, NULL));
        GT_OK(sdnn_gpu_net_forward(g, NULL, NULL, Y, 1, &cost));
        GT_OK(sdnn_gpu_net_backward(g));
    }
    static const char *names[] = {"conv mish", "grouped route 1/2", "conv swish",
                                  "shortcut swish", "grouped route 0/2", "route",
                                  "connected mish", "connected", "cost"};
    for (int i = 0; g && i < n; ++i) {
        layer *l = &net->layers[i];
        size_t o = (size_t)l->outputs * l->batch;
        float *h = malloc(o * sizeof *h);
        GT_OK(sdnn_gpu_net_get(g, i, SDNN_GT_OUTPUT, h));
        double eo = gt_relerr(h, out[i], o);
        GT_OK(sdnn_gpu_net_get(g, i, SDNN_GT_DELTA, h));
        double ed = gt_relerr(h, del[i], o);
        free(h);
        tm_margin("gpu/dialect:forward", eo, TOL);
        tm_margin("gpu/dialect:backward", ed, TOL);
        SOFT_ASSERT(eo <= TOL, "layer %d (%s): output within %g of the CPU's (%.2e)", i, names[i],
                 TOL, eo);
        SOFT_ASSERT(ed <= TOL, "layer %d (%s): delta within %g of the CPU's (%.2e)", i, names[i],
                 TOL, ed);
        double ew = 0, eb = 0;
        size_t nw = nparams(l, 0), nb = nparams(l, 1);
        if (nw) {
            float *w = malloc(nw * sizeof *w), *b = malloc(nb * sizeof *b);
            GT_OK(sdnn_gpu_net_get(g, i, SDNN_GT_WEIGHT_UPDATES, w));
            GT_OK(sdnn_gpu_net_get(g, i, SDNN_GT_BIAS_UPDATES, b));
            ew = gt_relerr(w, wu[i], nw);
            eb = gt_relerr(b, bu[i], nb);
            free(w);
            free(b);
            tm_margin("gpu/dialect:gradients", fmax(ew, eb), TOL);
            SOFT_ASSERT(ew <= TOL && eb <= TOL,
                     "layer %d (%s): weight/bias updates within %g of the CPU's (%.2e, %.2e)", i,
                     names[i], TOL, ew, eb);
        }
        printf("    layer %d %-18s output %.2e  delta %.2e%s", i, names[i], eo, ed,
               nw ? "" : "\n");
        if (nw) printf("  updates %.2e %.2e\n", ew, eb);
    }

    /* A slice outside its source must be refused, not copied. */
    if (g) {
        layer *r = &net->layers[1];
        int keep = r->outputs;
        r->outputs = net->layers[0].outputs; /* slice 1 of a slice the source's size */
        sdnn_status s = sdnn_gpu_layer_support(net, 1);
        r->outputs = keep;
        SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && strstr(sdnn_last_error(), "layer 1 (grouped route)"),
                 "a slice past its source is refused naming the layer (%s)", sdnn_last_error());
        SOFT_ASSERT(sdnn_gpu_layer_support(net, 1) == SDNN_OK, "the real slice is supported");
    }
    sdnn_gpu_net_destroy(g);
    if (vd) sdnn_gpu_vdev_close(vd);
    for (int i = 0; i < n; ++i) free(out[i]), free(del[i]), free(wu[i]), free(bu[i]);
    free(out);
    free(del);
    free(wu);
    free(bu);
    free(X);
    free(Y);
    sdnn_network_free(net); /* the dialect's entries too */
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "dialect";
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK && ndev > 0) sdnn_dev_describe(0, desc, sizeof desc);
    printf("    device 0: %s%s\n", desc,
           strstr(desc, "simulated") ? " (host logic and kernels on the host executor; no GPU)" : "");
    if (ndev < 1) {
        printf("    no device: not run\n");
        return gt_summary("dialect");
    }
    (void)layer_by_layer(); /* its failures are counted by gt_summary */
    return gt_summary("dialect");
}
