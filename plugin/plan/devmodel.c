/*
 * devmodel: see devmodel.h.  The figures of each device are its maker's
 * published peak fp32 rate (without tensor cores: Darknet's layers are
 * fp32) and peak memory bandwidth; the efficiencies and the launch cost are
 * this model's assumptions, the same for every device, printed by every
 * command that uses them.
 */
#include "devmodel.h"

#include "replicas.h"

#include <stdio.h>
#include <string.h>

#define TF 1e12
#define GBs 1e9

/* name, product, fp32 FLOP/s, bytes/s, GiB; then the shared assumptions:
 * 60% of peak for convolutions and gemms, 75% of the bandwidth for element
 * kernels, 5 us per launch, 12 GB/s to the host (PCIe 3 x16 in practice). */
#define MODEL(n, d, f, b, g) { n, d, (f) * TF, (b) * GBs, g, 0.60, 0.75, 5e-6, 12 * GBs }

static const sdnn_device_model models[] = {
    MODEL("v100", "NVIDIA Tesla V100 SXM2 (NVLink 2)", 15.7, 900, 16),
    MODEL("v100-pcie", "NVIDIA Tesla V100 PCIe", 14.0, 900, 16),
    MODEL("t4", "NVIDIA T4", 8.1, 320, 16),
    MODEL("rtx3090", "NVIDIA GeForce RTX 3090", 35.6, 936, 24),
    MODEL("a100", "NVIDIA A100 SXM4 80 GB", 19.5, 2039, 80),
    MODEL("l4", "NVIDIA L4", 30.3, 300, 24),
    MODEL("h100", "NVIDIA H100 SXM5", 66.9, 3350, 80),
    MODEL("h200", "NVIDIA H200 SXM", 66.9, 4800, 141),
};
#define NMODELS ((int)(sizeof models / sizeof models[0]))

const sdnn_device_model *sdnn_device_model_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < NMODELS; ++i)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

const char *sdnn_device_model_names(void)
{
    static char buf[256];
    if (buf[0]) return buf;
    size_t used = 0;
    for (int i = 0; i < NMODELS && used < sizeof buf; ++i) {
        int w = snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "", models[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

static void work_set(sdnn_layer_work *w, double flops, double bytes, double host_bytes,
                     int kernels)
{
    w->flops = flops;
    w->bytes = bytes;
    w->host_bytes = host_bytes;
    w->kernels = kernels;
}

/* A convolution or a gemm: k multiply-adds per output value, `in` input and
 * `out` output values per image, `wts` weights. */
static void gemm_layer(const layer *l, double k, double in, double out, double wts, int dgrad,
                       sdnn_layer_work *f, sdnn_layer_work *b)
{
    double bt = l->batch;
    double x = bt * in, y = bt * out;
    int bn = l->batch_normalize != 0;
    /* forward: the product, then bias (or batch norm: mean, variance,
     * normalise, scale and shift: six sweeps), then the activation */
    double fb = 4 * (x + y + wts) + (bn ? 6 : 2) * 4 * y + 2 * 4 * y;
    work_set(f, 2 * k * y, fb, 0, 1 + (bn ? 5 : 1) + 1);
    /* backward: the activation's gradient, the bias sum (batch norm: eight
     * sweeps), the weight gradient (reads input and delta, updates the
     * weight buffer) and, below the first layer, the input gradient
     * (reads delta and weights, accumulates into the previous delta). */
    double bb = 3 * 4 * y + (bn ? 8 : 1) * 4 * y + 4 * (x + y + 2 * wts);
    double bf = 2 * k * y;
    int kernels = 1 + (bn ? 6 : 1) + 1;
    if (dgrad) {
        bb += 4 * (y + wts + 2 * x);
        bf += 2 * k * y;
        ++kernels;
    }
    work_set(b, bf, bb, 0, kernels);
}

void sdnn_layer_work_of(const network *net, int i, sdnn_layer_work *f, sdnn_layer_work *b,
                        sdnn_layer_work *u)
{
    const layer *l = &net->layers[i];
    double bt = l->batch;
    double in = l->inputs, out = l->outputs;
    work_set(f, 0, 0, 0, 0);
    work_set(b, 0, 0, 0, 0);
    work_set(u, 0, 0, 0, 0);
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL: {
        int g = l->groups > 0 ? l->groups : 1;
        double k = (double)l->size * l->size * l->c / g;
        if (l->type == DECONVOLUTIONAL) k = (double)l->size * l->size * l->n * in / out;
        gemm_layer(l, k, in, out, (double)l->nweights, i > 0, f, b);
        break;
    }
    case CONNECTED:
        gemm_layer(l, in, in, out, in * out, i > 0, f, b);
        break;
    case YOLO:
    case REGION:
    case DETECTION:
        /* the device output goes to the host, the loss runs there (the GPU
         * engine's YOLO path), the delta comes back; backward adds it to
         * the previous delta */
        work_set(f, bt * out, 8 * bt * out, 8 * bt * out, 2);
        work_set(b, bt * out, 12 * bt * out, 0, 1);
        break;
    case MAXPOOL: {
        double win = (double)l->size * l->size;
        work_set(f, bt * out * win, 4 * bt * (in + 2 * out), 0, 1);
        work_set(b, bt * in, 4 * bt * (2 * out + 2 * in), 0, 1);
        break;
    }
    default:
        /* element-wise or copying layers: read the input, write the output;
         * backward reads the delta and accumulates into the previous one */
        work_set(f, bt * (in > out ? in : out), 4 * bt * (in + out), 0, 1);
        work_set(b, bt * (in > out ? in : out), 4 * bt * (out + 2 * in), 0, 1);
        break;
    }
    sdnn_param prm[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(l, prm);
    for (int j = 0; j < np; ++j) {
        /* Darknet's update: read weight and update buffer, write both */
        u->bytes += 16.0 * (double)prm[j].n;
        u->flops += 4.0 * (double)prm[j].n;
        ++u->kernels;
    }
}

double sdnn_device_model_time(const sdnn_device_model *d, const sdnn_layer_work *w)
{
    if (w->kernels == 0 && w->bytes == 0 && w->flops == 0 && w->host_bytes == 0) return 0;
    double tc = w->flops / (d->fp32_flops * d->compute_eff);
    double tm = w->bytes / (d->mem_Bps * d->mem_eff);
    return (tc > tm ? tc : tm) + w->host_bytes / d->host_Bps + w->kernels * d->launch_s;
}

sdnn_status sdnn_device_model_profile(const network *net, const sdnn_device_model *d,
                                      sdnn_cost_profile *out)
{
    memset(out, 0, sizeof *out);
    if (!net || !d) return SDNN_ERROR(SDNN_ERR_INVALID, "device model: no network or device");
    int n = net->n, first = 0;
    for (int i = 0; i < n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;
    SDNN_CHECK(sdnn_cost_profile_alloc(n, out));
    out->batch = net->batch;
    out->subdivisions = net->subdivisions > 0 ? net->subdivisions : 1;
    for (int i = 0; i < n; ++i) {
        const layer *l = &net->layers[i];
        sdnn_param prm[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(l, prm);
        if (np < 0) {
            sdnn_cost_profile_free(out);
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "device model: layer %d (%s) has "
                              "parameters scalednn cannot view", i,
                              sdnn_layer_type_name(l->type));
        }
        sdnn_layer_cost *c = &out->layer[i];
        snprintf(c->type, sizeof c->type, "%s", sdnn_layer_type_name(l->type));
        c->tensors = np;
        sdnn_layer_work f, b, u;
        sdnn_layer_work_of(net, i, &f, &b, &u);
        c->fwd_s = sdnn_device_model_time(d, &f);
        c->upd_s = sdnn_device_model_time(d, &u);
        if (i < first) continue;
        c->bwd_s = sdnn_device_model_time(d, &b);
        for (int j = 0; j < np; ++j) c->bytes += (double)(prm[j].n * sizeof(float));
    }
    return SDNN_OK;
}

double sdnn_device_model_codec_Bps(const sdnn_device_model *d, double ratio, int passes)
{
    if (passes < 1) passes = 1;
    return d->mem_Bps * d->mem_eff * 4.0 / (4.0 + 4.0 * ratio) / passes;
}
