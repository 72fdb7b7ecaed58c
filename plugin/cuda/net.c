/*
 * net: the device mirror of one CPU network (sdnn_gpu_net).  This is the
 * only engine file that reads Darknet's structs, and it is compiled by the
 * C compiler without -DGPU, so `layer` has the layout of Debian's CPU
 * libdarknet.  It translates each layer into an sdnn_dlayer, places the
 * parameters in two device arenas (values and update buffers, layers from
 * last to first), runs the passes the way Darknet's forward_network,
 * backward_network and update_network do, and computes the YOLO and region
 * losses with libdarknet's own CPU layers from the device output.
 */
#ifdef GPU
#error "never compile the engine with -DGPU: Debian's libdarknet is a CPU build (layer layout)"
#endif
#include "gpu.h"

#include "clock.h"
#include "dialect.h"
#include "dev.h"
#include "ops.h"
#include "replicas.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sdnn_gpu_net {
    network *cpu;
    sdnn_dctx *ctx;
    int n;
    sdnn_dlayer *L;
    float *arena, *arena_upd;     /* device */
    size_t arena_n;
    size_t *span_off, *span_n;    /* per layer */
    float *input, *truth;         /* device, batch x inputs / truths; made by
                                   * their first use (own_io) */
    float *stage_x, *stage_y;     /* pinned, same sizes; made by the first
                                   * sdnn_gpu_net_train (the group feeds
                                   * through its preload rings instead) */
    float *host_in;               /* pinned, the largest host-loss input */
    size_t host_in_n;             /* its floats */
    /* The host loss's round trip (hostloss.c's part of this file, below):
     * pinned output and delta of the largest host-loss layer, the events
     * that order the copies, which outputs a later device pass reads, the
     * counters. */
    float *hl_out, *hl_delta;     /* pinned, outputs x batch of the largest */
    size_t hl_out_n;
    sdnn_devent *hl_ready;        /* compute stream: the layer's input is complete */
    sdnn_devent *hl_copied;       /* copy stream: the input is on the host */
    sdnn_devent *hl_back;         /* copy stream: the delta (output) is on the device */
    int hl_pending;               /* hl_ready..hl_back not yet added to the wait */
    int hl_sync;                  /* 1: the synchronous reference path */
    unsigned char *hl_keep;       /* [n]: the device needs the output after training */
    int hl_all;                   /* every output back (the one-layer entry points) */
    sdnn_gpu_host_loss_stats hl;
    const float *cur_input;       /* device input of the current pass */
    const float *cur_truth;       /* device truth of the current pass */
    const float *cur_truth_host;
    int cur_train;
    sdnn_gpu_backward_hook hook;
    void *hook_ctx;
    uint64_t seed;
    double host_loss_s;           /* time in host-side losses */
    sdnn_devent **prof_ev;        /* [2 (n + 1)]: marks around every layer's forward,
                                   * then backward (sdnn_gpu_net_profile) */
    int prof_on, prof_fwd, prof_bwd; /* on; a forward / backward recorded */
};

double sdnn_gpu_now(void) { return sdnn_now_s(); }

double sdnn_gpu_net_host_loss_seconds(const sdnn_gpu_net *g) { return g->host_loss_s; }

sdnn_status sdnn_gpu_net_profile(sdnn_gpu_net *g, int on)
{
    if (on && !g->prof_ev) {
        int m = 2 * (g->n + 1);
        g->prof_ev = calloc((size_t)m, sizeof *g->prof_ev);
        if (!g->prof_ev) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for layer events");
        for (int i = 0; i < m; ++i) {
            sdnn_status st = sdnn_devent_create(g->ctx, 1, &g->prof_ev[i]);
            if (st != SDNN_OK) {
                for (int k = 0; k < i; ++k) sdnn_devent_destroy(g->prof_ev[k]);
                free(g->prof_ev);
                g->prof_ev = NULL;
                return st;
            }
        }
    }
    g->prof_on = on;
    g->prof_fwd = g->prof_bwd = 0;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_profile_read(sdnn_gpu_net *g, double *prof, double scale)
{
    if (!g->prof_ev || !prof) return SDNN_OK;
    int n = g->n;
    for (int i = 0; i < n; ++i) {
        float ms = 0;
        if (g->prof_fwd) {
            SDNN_CHECK(sdnn_devent_elapsed(g->prof_ev[i], g->prof_ev[i + 1], &ms));
            prof[3 * i] += scale * (double)ms / 1000.0;
        }
        if (g->prof_bwd) {
            sdnn_devent **bm = g->prof_ev + n + 1;
            SDNN_CHECK(sdnn_devent_elapsed(bm[i + 1], bm[i], &ms));
            prof[3 * i + 1] += scale * (double)ms / 1000.0;
        }
    }
    g->prof_fwd = g->prof_bwd = 0;
    return SDNN_OK;
}

int sdnn_gpu_available(void)
{
    int n = 0;
    return sdnn_dev_count(&n) == SDNN_OK && n > 0;
}

sdnn_status sdnn_gpu_device_count(int *n) { return sdnn_dev_count(n); }

sdnn_status sdnn_gpu_device_name(int dev, char *buf, size_t len)
{
    return sdnn_dev_describe(dev, buf, len);
}

sdnn_status sdnn_gpu_vdev_open(const sdnn_gpu_options *o, sdnn_gpu_vdev **out)
{
    sdnn_gpu_options def = SDNN_GPU_OPTIONS_INIT;
    if (!o) o = &def;
    sdnn_dctx_options d = SDNN_DCTX_OPTIONS_INIT;
    d.device = o->device;
    d.tf32 = o->tf32;
    d.deterministic = o->deterministic;
    d.workspace_limit = (o->workspace_mb ? o->workspace_mb : 512) << 20;
    return sdnn_dctx_create(&d, out);
}

void sdnn_gpu_vdev_close(sdnn_gpu_vdev *v) { sdnn_dctx_destroy(v); }

sdnn_status sdnn_gpu_vdev_sync(sdnn_gpu_vdev *v) { return sdnn_dctx_sync_all(v); }

/* ---- translation of Darknet's layers -------------------------------------------- */

static int act_of(ACTIVATION a, int *out)
{
    switch (a) {
    case LOGISTIC: *out = SDNN_ACT_LOGISTIC; return 1;
    case RELU: *out = SDNN_ACT_RELU; return 1;
    case RELIE: *out = SDNN_ACT_RELIE; return 1;
    case LINEAR: *out = SDNN_ACT_LINEAR; return 1;
    case RAMP: *out = SDNN_ACT_RAMP; return 1;
    case TANH: *out = SDNN_ACT_TANH; return 1;
    case PLSE: *out = SDNN_ACT_PLSE; return 1;
    case LEAKY: *out = SDNN_ACT_LEAKY; return 1;
    case ELU: *out = SDNN_ACT_ELU; return 1;
    case LOGGY: *out = SDNN_ACT_LOGGY; return 1;
    case STAIR: *out = SDNN_ACT_STAIR; return 1;
    case HARDTAN: *out = SDNN_ACT_HARDTAN; return 1;
    case LHTAN: *out = SDNN_ACT_LHTAN; return 1;
    case SELU: *out = SDNN_ACT_SELU; return 1;
    }
    return 0;
}

#define UNSUP(...) SDNN_ERROR(SDNN_ERR_UNSUPPORTED, __VA_ARGS__)

/* Fill d from Darknet's layer i by its type, or say why the engine cannot run it. */
static sdnn_status translate_type(const network *net, int i, sdnn_dlayer *d)
{
    const layer *l = &net->layers[i];
    const char *name = sdnn_layer_type_name(l->type);
    memset(d, 0, sizeof *d);
    d->index = i;
    d->batch = l->batch;
    d->inputs = l->inputs;
    d->outputs = l->outputs;
    d->w = l->w; d->h = l->h; d->c = l->c;
    d->out_w = l->out_w; d->out_h = l->out_h; d->out_c = l->out_c;
    d->stopbackward = l->stopbackward;
    d->lr_scale = l->learning_rate_scale;
    if (l->truth)
        return UNSUP("layer %d (%s): truth=1 layers are not run on the GPU", i, name);
    switch (l->type) {
    case CONVOLUTIONAL:
        if (l->binary || l->xnor)
            return UNSUP("layer %d (convolutional): binary/xnor weights are not run on the GPU", i);
        d->kind = SDNN_DL_CONV;
        d->n = l->n; d->size = l->size; d->stride = l->stride; d->pad = l->pad;
        d->groups = l->groups > 0 ? l->groups : 1;
        d->nweights = l->nweights;
        d->bn = l->batch_normalize;
        if (!act_of(l->activation, &d->act))
            return UNSUP("layer %d (convolutional): activation %d unknown", i, (int)l->activation);
        if (l->nweights != l->c / d->groups * l->n * l->size * l->size)
            return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: nweights %d does not match its shape",
                              i, l->nweights);
        return SDNN_OK;
    case CONNECTED:
        d->kind = SDNN_DL_CONNECTED;
        d->bn = l->batch_normalize;
        if (!act_of(l->activation, &d->act))
            return UNSUP("layer %d (connected): activation %d unknown", i, (int)l->activation);
        return SDNN_OK;
    case MAXPOOL:
        d->kind = SDNN_DL_MAXPOOL;
        d->size = l->size; d->stride = l->stride; d->pad = l->pad;
        return SDNN_OK;
    case AVGPOOL:
        d->kind = SDNN_DL_AVGPOOL;
        return SDNN_OK;
    case ROUTE:
        d->kind = SDNN_DL_ROUTE;
        if (l->n > SDNN_DL_MAX_ROUTE)
            return UNSUP("layer %d (route): %d inputs, at most %d on the GPU", i, l->n,
                         SDNN_DL_MAX_ROUTE);
        d->nroute = l->n;
        for (int j = 0; j < l->n; ++j) {
            d->route_from[j] = l->input_layers[j];
            d->route_size[j] = l->input_sizes[j];
        }
        return SDNN_OK;
    case SHORTCUT:
        d->kind = SDNN_DL_SHORTCUT;
        d->from = l->index;
        d->alpha = l->alpha;
        d->beta = l->beta;
        if (!act_of(l->activation, &d->act))
            return UNSUP("layer %d (shortcut): activation %d unknown", i, (int)l->activation);
        return SDNN_OK;
    case UPSAMPLE:
        if (l->reverse)
            return UNSUP("layer %d (upsample): negative stride (downsampling) is not run on "
                         "the GPU", i);
        d->kind = SDNN_DL_UPSAMPLE;
        d->stride = l->stride;
        d->scale = l->scale;
        return SDNN_OK;
    case SOFTMAX:
        if (l->softmax_tree)
            return UNSUP("layer %d (softmax): hierarchical softmax (tree=) is not run on the GPU",
                         i);
        d->kind = SDNN_DL_SOFTMAX;
        d->softmax_groups = l->groups > 0 ? l->groups : 1;
        d->temperature = l->temperature;
        d->noloss = l->noloss;
        d->has_cost = 0;
        return SDNN_OK;
    case COST:
        d->kind = SDNN_DL_COST;
        d->scale = l->scale;
        switch (l->cost_type) {
        case SSE: d->cost_type = SDNN_COST_SSE; break;
        case MASKED: d->cost_type = SDNN_COST_MASKED; break;
        case L1: d->cost_type = SDNN_COST_L1; break;
        case SMOOTH: d->cost_type = SDNN_COST_SMOOTH; break;
        default:
            return UNSUP("layer %d (cost): cost type %d (seg/wgan) is not run on the GPU", i,
                         (int)l->cost_type);
        }
        return SDNN_OK;
    case DROPOUT:
        d->kind = SDNN_DL_DROPOUT;
        d->probability = l->probability;
        d->scale = l->scale;
        return SDNN_OK;
    case YOLO:
        d->kind = SDNN_DL_YOLO;
        return SDNN_OK;
    case REGION:
        d->kind = SDNN_DL_REGION;
        d->coords = l->coords;
        d->classes = l->classes;
        d->anchors = l->n;
        d->background = l->background;
        return SDNN_OK;
    default:
        return UNSUP("layer %d: %s layers are not run on the GPU (supported: convolutional, "
                     "connected, maxpool, avgpool, route, shortcut, upsample, softmax, cost, "
                     "dropout, yolo, region)", i, name);
    }
}

/* translate_type, then what the fork's dialect (dialect.h) made
 * of the layer: libdarknet's type alone would run it wrong. */
static sdnn_status translate(const network *net, int i, sdnn_dlayer *d)
{
    SDNN_CHECK(translate_type(net, i, d));
    const layer *l = &net->layers[i];
    sdnn_dialect_layer_info di;
    switch (sdnn_dialect_layer(net, i, &di)) {
    case SDNN_DIALECT_NONE: return SDNN_OK;
    case SDNN_DIALECT_MISH: d->act = SDNN_ACT_MISH; return SDNN_OK;
    case SDNN_DIALECT_SWISH: d->act = SDNN_ACT_SWISH; return SDNN_OK;
    case SDNN_DIALECT_ROUTE_SLICE: {
        const layer *src = &net->layers[di.src];
        if (d->kind != SDNN_DL_ROUTE || d->nroute != 1 || di.gid < 0 ||
            (long)(di.gid + 1) * l->outputs > (long)src->outputs)
            return UNSUP("layer %d (grouped route): group_id %d, slices of %d of layer %d's %d "
                         "outputs: not a slice the GPU engine can copy", i, di.gid, l->outputs,
                         di.src, src->outputs);
        d->route_size[0] = l->outputs;
        d->route_off[0] = di.gid * l->outputs;
        return SDNN_OK;
    }
    case SDNN_DIALECT_YOLO:
        /* The fork's forward and loss on the host: host_loss_forward calls
         * l->forward, which dialect.c pointed at sdnn_yolo_forward (its own
         * logistic, none with new_coords); backward is libdarknet's (the
         * delta into the input's), as the device's yolo backward. */
        if (d->kind != SDNN_DL_YOLO)
            return UNSUP("layer %d: the fork's [yolo] keys on a %s layer", i,
                         sdnn_layer_type_name(l->type));
        return SDNN_OK;
    }
    return UNSUP("layer %d (%s): a dialect layer the GPU engine does not run", i,
                 sdnn_layer_type_name(l->type));
}

sdnn_status sdnn_gpu_layer_support(const network *net, int i)
{
    sdnn_dlayer d;
    return translate(net, i, &d);
}

static int host_loss(const sdnn_dlayer *d)
{
    return d->kind == SDNN_DL_YOLO || d->kind == SDNN_DL_REGION;
}

static int kind_has_cost(int kind)
{
    return kind == SDNN_DL_SOFTMAX || kind == SDNN_DL_COST || kind == SDNN_DL_YOLO ||
           kind == SDNN_DL_REGION;
}

/* ---- creation -------------------------------------------------------------------- */

static sdnn_status host_loss_setup(sdnn_gpu_net *g, size_t out_n);

void sdnn_gpu_net_destroy(sdnn_gpu_net *g)
{
    if (!g) return;
    if (g->ctx) sdnn_dctx_sync_all(g->ctx);
    for (int i = 0; g->L && i < g->n; ++i) sdnn_dl_release(&g->L[i]);
    free(g->L);
    sdnn_dfree(g->arena);
    sdnn_dfree(g->arena_upd);
    sdnn_dfree(g->input);
    sdnn_dfree(g->truth);
    sdnn_hfree_pinned(g->stage_x);
    sdnn_hfree_pinned(g->stage_y);
    sdnn_hfree_pinned(g->host_in);
    sdnn_hfree_pinned(g->hl_out);
    sdnn_hfree_pinned(g->hl_delta);
    sdnn_devent_destroy(g->hl_ready);
    sdnn_devent_destroy(g->hl_copied);
    sdnn_devent_destroy(g->hl_back);
    free(g->hl_keep);
    for (int i = 0; g->prof_ev && i < 2 * (g->n + 1); ++i) sdnn_devent_destroy(g->prof_ev[i]);
    free(g->prof_ev);
    free(g->span_off);
    free(g->span_n);
    free(g);
}

sdnn_status sdnn_gpu_net_create(network *net, sdnn_gpu_vdev *vd, sdnn_gpu_net **out)
{
    *out = NULL;
    if (!net || !vd) return SDNN_ERROR(SDNN_ERR_INVALID, "gpu net: no network or device");
    if (net->adam) return UNSUP("adam is not run on the GPU (momentum SGD only)");
    sdnn_gpu_net *g = calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a gpu net");
    sdnn_status st = SDNN_OK;
    g->cpu = net;
    g->ctx = vd;
    g->n = net->n;
    g->seed = 0x5ca1ed0dull;
    g->L = calloc((size_t)net->n, sizeof *g->L);
    g->span_off = calloc((size_t)net->n, sizeof *g->span_off);
    g->span_n = calloc((size_t)net->n, sizeof *g->span_n);
    if (!g->L || !g->span_off || !g->span_n) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a gpu net");
        goto fail;
    }
    SDNN_CHECKGOTO(sdnn_dctx_bind(vd), st, fail);
    for (int i = 0; i < net->n; ++i) SDNN_CHECKGOTO(translate(net, i, &g->L[i]), st, fail);

    /* Parameter arenas: layers from last to first. */
    size_t total = 0;
    for (int i = net->n - 1; i >= 0; --i) {
        sdnn_dlayer *d = &g->L[i];
        g->span_off[i] = total;
        g->span_n[i] = sdnn_dl_nweights(d) + sdnn_dl_nbiases(d) + sdnn_dl_nscales(d);
        total += g->span_n[i];
    }
    g->arena_n = total;
    SDNN_CHECKGOTO(sdnn_dmalloc(vd, total * sizeof(float), (void **)&g->arena), st, fail);
    SDNN_CHECKGOTO(sdnn_dmalloc(vd, total * sizeof(float), (void **)&g->arena_upd), st, fail);

    size_t ws = 0, host_in = 0, host_out = 0;
    for (int i = 0; i < net->n; ++i) {
        sdnn_dlayer *d = &g->L[i];
        size_t o = g->span_off[i], nw = sdnn_dl_nweights(d), nb = sdnn_dl_nbiases(d);
        if (g->span_n[i]) {
            d->weights = g->arena + o;
            d->weight_updates = g->arena_upd + o;
            d->biases = g->arena + o + nw;
            d->bias_updates = g->arena_upd + o + nw;
            if (d->bn) {
                d->scales = g->arena + o + nw + nb;
                d->scale_updates = g->arena_upd + o + nw + nb;
            }
        }
        d->seed = g->seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
        if (d->kind == SDNN_DL_DROPOUT) {
            if (i == 0) {
                st = UNSUP("layer 0 (dropout): a dropout layer needs a layer before it");
                goto fail;
            }
            d->output = g->L[i - 1].output;
            d->delta = g->L[i - 1].delta;
        }
        SDNN_CHECKGOTO(sdnn_dl_setup(vd, d), st, fail);
        if (d->workspace > ws) ws = d->workspace;
        if (host_loss(d) && (size_t)d->inputs * d->batch > host_in)
            host_in = (size_t)d->inputs * d->batch;
        if (host_loss(d) && (size_t)d->outputs * d->batch > host_out)
            host_out = (size_t)d->outputs * d->batch;
    }
    if (ws) {
        /* Once, for the largest need of every layer, before any pass: the
         * workspace never grows inside a step (dev.h). */
        void *p;
        SDNN_CHECKGOTO(sdnn_dctx_workspace(vd, ws, &p), st, fail);
    }
    if (host_in)
        SDNN_CHECKGOTO(sdnn_hmalloc_pinned(host_in * sizeof(float), (void **)&g->host_in), st,
                       fail);
    g->host_in_n = host_in;
    if (host_out) SDNN_CHECKGOTO(host_loss_setup(g, host_out), st, fail);
    SDNN_CHECKGOTO(sdnn_gpu_net_push(g), st, fail);
    *out = g;
    return SDNN_OK;
fail:
    sdnn_gpu_net_destroy(g);
    return st;
}

/* The net's own device input and truth buffers, on first use: a net that
 * a group feeds from its preload rings never needs them.  (The allocation
 * waits for the compute stream: only the single-net entry points, outside
 * a group's step, come here.) */
static sdnn_status own_io(sdnn_gpu_net *g)
{
    if (g->input) return SDNN_OK;
    size_t nin = (size_t)g->cpu->inputs * g->cpu->batch;
    size_t ntr = (size_t)g->cpu->truths * g->cpu->batch;
    SDNN_CHECK(sdnn_dmalloc(g->ctx, (ntr ? ntr : 1) * sizeof(float), (void **)&g->truth));
    return sdnn_dmalloc(g->ctx, nin * sizeof(float), (void **)&g->input);
}

void sdnn_gpu_net_memory(const sdnn_gpu_net *g, size_t *device, size_t *pinned)
{
    size_t nin = (size_t)g->cpu->inputs * g->cpu->batch;
    size_t ntr = (size_t)g->cpu->truths * g->cpu->batch;
    size_t io = (nin + (ntr ? ntr : 1)) * sizeof(float);
    *device = 2 * g->arena_n * sizeof(float) + (g->input ? io : 0);
    *pinned = (g->host_in_n + 2 * g->hl_out_n) * sizeof(float) + (g->stage_x ? io : 0);
}

network *sdnn_gpu_net_host(sdnn_gpu_net *g) { return g->cpu; }
sdnn_gpu_vdev *sdnn_gpu_net_vdev(sdnn_gpu_net *g) { return g->ctx; }
int sdnn_gpu_net_layers(const sdnn_gpu_net *g) { return g->n; }

void sdnn_gpu_net_set_backward_hook(sdnn_gpu_net *g, sdnn_gpu_backward_hook fn, void *ctx)
{
    g->hook = fn;
    g->hook_ctx = ctx;
}

void sdnn_gpu_net_set_seed(sdnn_gpu_net *g, uint64_t seed)
{
    g->seed = seed;
    for (int i = 0; i < g->n; ++i) g->L[i].seed = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
}

sdnn_status sdnn_gpu_net_arena(sdnn_gpu_net *g, float **params, float **updates, size_t *n)
{
    if (params) *params = g->arena;
    if (updates) *updates = g->arena_upd;
    if (n) *n = g->arena_n;
    return SDNN_OK;
}

void sdnn_gpu_net_layer_span(const sdnn_gpu_net *g, int layer, size_t *off, size_t *n)
{
    *off = g->span_off[layer];
    *n = g->span_n[layer];
}

/* ---- tensors ---------------------------------------------------------------------- */

/* The device buffer of a tensor and the matching host buffer of the CPU
 * layer (NULL where the CPU has none, e.g. the net's input). */
static sdnn_status tensor(sdnn_gpu_net *g, int i, sdnn_gpu_tensor t, float **dev, float **host,
                          size_t *n)
{
    *dev = NULL;
    *host = NULL;
    *n = 0;
    if (t == SDNN_GT_INPUT || t == SDNN_GT_TRUTH) SDNN_CHECK(own_io(g));
    if (t == SDNN_GT_INPUT) {
        *dev = g->input;
        *host = g->cpu->input;
        *n = (size_t)g->cpu->inputs * g->cpu->batch;
        return SDNN_OK;
    }
    if (t == SDNN_GT_TRUTH) {
        *dev = g->truth;
        *host = g->cpu->truth;
        *n = (size_t)g->cpu->truths * g->cpu->batch;
        return SDNN_OK;
    }
    if (i < 0 || i >= g->n) return SDNN_ERROR(SDNN_ERR_INVALID, "no layer %d", i);
    sdnn_dlayer *d = &g->L[i];
    layer *l = &g->cpu->layers[i];
    size_t out = (size_t)d->outputs * d->batch;
    size_t ch = sdnn_dl_nbiases(d);
    switch (t) {
    case SDNN_GT_OUTPUT: *dev = d->output; *host = l->output; *n = out; break;
    case SDNN_GT_DELTA: *dev = d->delta; *host = l->delta; *n = out; break;
    case SDNN_GT_WEIGHTS: *dev = d->weights; *host = l->weights; *n = sdnn_dl_nweights(d); break;
    case SDNN_GT_WEIGHT_UPDATES:
        *dev = d->weight_updates; *host = l->weight_updates; *n = sdnn_dl_nweights(d);
        break;
    case SDNN_GT_BIASES: *dev = d->biases; *host = l->biases; *n = ch; break;
    case SDNN_GT_BIAS_UPDATES: *dev = d->bias_updates; *host = l->bias_updates; *n = ch; break;
    case SDNN_GT_SCALES: *dev = d->scales; *host = l->scales; *n = sdnn_dl_nscales(d); break;
    case SDNN_GT_SCALE_UPDATES:
        *dev = d->scale_updates; *host = l->scale_updates; *n = sdnn_dl_nscales(d);
        break;
    case SDNN_GT_ROLLING_MEAN:
        *dev = d->rolling_mean; *host = l->rolling_mean; *n = d->bn ? ch : 0;
        break;
    case SDNN_GT_ROLLING_VARIANCE:
        *dev = d->rolling_variance; *host = l->rolling_variance; *n = d->bn ? ch : 0;
        break;
    case SDNN_GT_RAND:
        *dev = d->rand; *host = l->rand;
        *n = d->kind == SDNN_DL_DROPOUT ? (size_t)d->inputs * d->batch : 0;
        break;
    default: return SDNN_ERROR(SDNN_ERR_INVALID, "unknown tensor %d", (int)t);
    }
    if (!*dev) *n = 0;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_tensor(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, float **dev,
                                size_t *n)
{
    float *host;
    return tensor(g, layer, t, dev, &host, n);
}

sdnn_status sdnn_gpu_net_get(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, float *h)
{
    float *dev, *host;
    size_t n;
    SDNN_CHECK(tensor(g, layer, t, &dev, &host, &n));
    return sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, h, dev, n * sizeof(float), 1);
}

sdnn_status sdnn_gpu_net_set(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, const float *h)
{
    float *dev, *host;
    size_t n;
    SDNN_CHECK(tensor(g, layer, t, &dev, &host, &n));
    return sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, dev, h, n * sizeof(float), 1);
}

/* Tensors that travel between the CPU network and its mirror. */
static const sdnn_gpu_tensor state_tensors[] = {
    SDNN_GT_WEIGHTS, SDNN_GT_WEIGHT_UPDATES, SDNN_GT_BIASES, SDNN_GT_BIAS_UPDATES,
    SDNN_GT_SCALES, SDNN_GT_SCALE_UPDATES, SDNN_GT_ROLLING_MEAN, SDNN_GT_ROLLING_VARIANCE};

static unsigned tensor_class(sdnn_gpu_tensor t)
{
    switch (t) {
    case SDNN_GT_WEIGHTS: case SDNN_GT_BIASES: case SDNN_GT_SCALES: return SDNN_GPU_MOVE_PARAMS;
    case SDNN_GT_ROLLING_MEAN: case SDNN_GT_ROLLING_VARIANCE: return SDNN_GPU_MOVE_BNSTATS;
    default: return SDNN_GPU_MOVE_UPDATES;
    }
}

/* SDNN_GPU_MOVE_FORWARD: the last forward's decisions into the CPU network. */
static sdnn_status pull_forward(sdnn_gpu_net *g)
{
    for (int i = 0; i < g->n; ++i) {
        sdnn_dlayer *d = &g->L[i];
        layer *l = &g->cpu->layers[i];
        size_t out = (size_t)d->outputs * d->batch;
        int host_loss = d->kind == SDNN_DL_YOLO || d->kind == SDNN_DL_REGION;
        /* A host-loss layer's device output is its input (the host layer
         * activates it); its decisions are in the delta. */
        float *src = host_loss ? d->delta : d->output, *dst = host_loss ? l->delta : l->output;
        if (src && dst && out)
            SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, dst, src, out * sizeof(float), 0));
        if (d->kind == SDNN_DL_MAXPOOL && d->indexes && l->indexes)
            SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, l->indexes, d->indexes,
                                  out * sizeof(int), 0));
        if (d->kind == SDNN_DL_DROPOUT && d->rand && l->rand)
            SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, l->rand, d->rand,
                                  (size_t)d->inputs * d->batch * sizeof(float), 0));
    }
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_move(sdnn_gpu_net *g, int to_device, unsigned what)
{
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    if (what & SDNN_GPU_MOVE_FORWARD) {
        if (to_device)
            return SDNN_ERROR(SDNN_ERR_INVALID, "the last forward's decisions are pulled, never "
                              "pushed");
        SDNN_CHECK(pull_forward(g));
    }
    for (int i = 0; i < g->n; ++i) {
        for (size_t k = 0; k < sizeof state_tensors / sizeof state_tensors[0]; ++k) {
            float *dev, *host;
            size_t n;
            if (!(tensor_class(state_tensors[k]) & what)) continue;
            SDNN_CHECK(tensor(g, i, state_tensors[k], &dev, &host, &n));
            if (!n) continue;
            if (!host)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "layer %d: tensor %d has no host buffer", i,
                                  (int)state_tensors[k]);
            if (to_device)
                SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, dev, host, n * sizeof(float), 0));
            else
                SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, host, dev, n * sizeof(float), 0));
        }
    }
    return sdnn_dctx_sync(g->ctx);
}

sdnn_status sdnn_gpu_net_push(sdnn_gpu_net *g) { return sdnn_gpu_net_move(g, 1, SDNN_GPU_MOVE_ALL); }
sdnn_status sdnn_gpu_net_pull(sdnn_gpu_net *g) { return sdnn_gpu_net_move(g, 0, SDNN_GPU_MOVE_ALL); }

/* ---- passes ----------------------------------------------------------------------- */

static sdnn_dstate state_for(sdnn_gpu_net *g, int i, int train)
{
    sdnn_dstate s;
    s.input = i == 0 ? g->cur_input : g->L[i - 1].output;
    s.delta = i == 0 ? NULL : g->L[i - 1].delta;
    s.truth = g->cur_truth;
    s.train = train;
    s.layers = g->L;
    sdnn_dctx_workspace_current(g->ctx, &s.workspace, &s.workspace_bytes);
    return s;
}

/* YOLO and region: libdarknet's CPU layer on the device input, as Darknet's
 * GPU build does (the CPU build activates the raw input itself), then its
 * delta (and, where a later device pass reads it, its output) back to the
 * device.  The layers treat every image apart (the cost is the squared
 * norm of the whole delta), so with SDNN_GPU_LOSS_THREADS=T the batch is
 * cut into T parts run by T threads, each with a view of the layer; the
 * cost is the sum of the parts' costs (equal up to rounding).  Each part
 * prints Darknet's own status line.
 *
 * The round trip moves only the layer's own tensors and never
 * stops the device's other streams:
 *   compute stream   record hl_ready after the layers before it
 *   copy stream      wait hl_ready; input -> pinned host_in; record hl_copied
 *   host             wait hl_copied; the CPU layer writes its output and
 *                    delta into pinned hl_out / hl_delta (a copy of the
 *                    layer struct points there: Darknet's own l->output and
 *                    l->delta are not written)
 *   copy stream      hl_delta -> delta (hl_out -> output where hl_keep);
 *                    record hl_back
 *   compute stream   wait hl_back (no host wait), then the later layers
 * The truth is the host copy the batch came with (cur_truth_host): it
 * never crosses again.  The pinned buffers are reused by the next
 * host-loss layer only after its own input arrived on the copy stream,
 * which is after this layer's copies back (one stream, in order).  The
 * device's wait is the time from hl_ready to hl_back (timing events:
 * on simulated devices the host clock when each ran); it is read at the
 * next host-loss layer or by sdnn_gpu_net_host_loss_stats.
 * hl_sync = 1 keeps the synchronous path it replaced (copies on the
 * compute stream, the host waiting, Darknet's own buffers) as the
 * reference that tests/gpu/hostloss.c compares bit for bit. */
typedef struct loss_part {
    layer l;
    network net;
    float cost;
} loss_part;

static void *loss_part_run(void *arg)
{
    loss_part *p = arg;
    p->l.cost = &p->cost;
    p->l.forward(p->l, p->net);
    return NULL;
}

static int loss_threads(int batch)
{
    const char *e = getenv("SDNN_GPU_LOSS_THREADS");
    int t = e && *e ? atoi(e) : 1;
    if (t < 1) t = 1;
    if (t > batch) t = batch;
    if (t > 64) t = 64;
    return t;
}

/* A later device pass reads layer i's output: the next layer takes it as
 * its input (anything but a route, which reads its own sources), a route
 * or shortcut names it, or its own backward needs it (region's logistic
 * gradient). */
static int output_needed(const sdnn_gpu_net *g, int i)
{
    if (g->L[i].kind == SDNN_DL_REGION) return 1;
    if (i + 1 < g->n && g->L[i + 1].kind != SDNN_DL_ROUTE) return 1;
    for (int j = i + 1; j < g->n; ++j) {
        const sdnn_dlayer *d = &g->L[j];
        if (d->kind == SDNN_DL_SHORTCUT && d->from == i) return 1;
        for (int k = 0; d->kind == SDNN_DL_ROUTE && k < d->nroute; ++k)
            if (d->route_from[k] == i) return 1;
    }
    return 0;
}

static sdnn_status host_loss_setup(sdnn_gpu_net *g, size_t out_n)
{
    SDNN_CHECK(sdnn_hmalloc_pinned(out_n * sizeof(float), (void **)&g->hl_out));
    SDNN_CHECK(sdnn_hmalloc_pinned(out_n * sizeof(float), (void **)&g->hl_delta));
    g->hl_out_n = out_n;
    SDNN_CHECK(sdnn_devent_create(g->ctx, 1, &g->hl_ready));
    SDNN_CHECK(sdnn_devent_create(g->ctx, 1, &g->hl_copied));
    SDNN_CHECK(sdnn_devent_create(g->ctx, 1, &g->hl_back));
    g->hl_keep = calloc((size_t)g->n, 1);
    if (!g->hl_keep) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the host-loss table");
    for (int i = 0; i < g->n; ++i) g->hl_keep[i] = (unsigned char)output_needed(g, i);
    return SDNN_OK;
}

/* The last round trip's device wait, once its copies are done. */
static sdnn_status host_loss_settle(sdnn_gpu_net *g)
{
    if (!g->hl_pending) return SDNN_OK;
    SDNN_CHECK(sdnn_devent_sync(g->hl_back));
    float ms = 0;
    SDNN_CHECK(sdnn_devent_elapsed(g->hl_ready, g->hl_back, &ms));
    g->hl.wait_s += (double)ms / 1000.0;
    g->hl_pending = 0;
    return SDNN_OK;
}

/* libdarknet's layer (a copy of it whose output and delta are `out` and
 * `delta`) on the host input, in T parts; the cost into d->cost and the
 * layer's own cost slot. */
static sdnn_status host_loss_compute(sdnn_gpu_net *g, int i, network nc, float *out, float *delta)
{
    sdnn_dlayer *d = &g->L[i];
    layer lc = g->cpu->layers[i];
    layer *l = &g->cpu->layers[i];
    lc.output = out;
    lc.delta = delta;
    int T = loss_threads(lc.batch);
    if (T == 1) {
        lc.forward(lc, nc);
        d->cost = l->cost ? l->cost[0] : 0;
        return SDNN_OK;
    }
    loss_part parts[64];
    pthread_t th[64];
    int started = 0;
    for (int t = 0; t < T; ++t) {
        int b0 = lc.batch * t / T, b1 = lc.batch * (t + 1) / T;
        loss_part *p = &parts[t];
        p->l = lc;
        p->l.batch = b1 - b0;
        p->l.output = lc.output + (size_t)b0 * lc.outputs;
        p->l.delta = lc.delta + (size_t)b0 * lc.outputs;
        p->net = nc;
        p->net.input = nc.input + (size_t)b0 * lc.inputs;
        if (nc.truth) p->net.truth = nc.truth + (size_t)b0 * lc.truths;
        p->cost = 0;
        if (pthread_create(&th[t], NULL, loss_part_run, p) != 0) break;
        ++started;
    }
    for (int t = 0; t < started; ++t) pthread_join(th[t], NULL);
    if (started < T)
        return SDNN_ERROR(SDNN_ERR_SYSTEM, "layer %d: could not start %d loss threads", i, T);
    float c = 0;
    for (int t = 0; t < T; ++t) c += parts[t].cost;
    d->cost = c;
    if (l->cost) l->cost[0] = c;
    return SDNN_OK;
}

static network host_loss_net(sdnn_gpu_net *g, int i, const sdnn_dstate *s)
{
    network nc = *g->cpu;
    nc.input = g->host_in;
    nc.truth = (float *)g->cur_truth_host;
    nc.train = s->train && g->cur_truth_host != NULL;
    nc.index = i;
    nc.delta = NULL;
    return nc;
}

/* The path this file had before the round trip above: every copy on the
 * compute stream with the host waiting, Darknet's own output and delta. */
static sdnn_status host_loss_forward_sync(sdnn_gpu_net *g, int i, const sdnn_dstate *s)
{
    sdnn_dlayer *d = &g->L[i];
    layer *l = &g->cpu->layers[i];
    double t0 = sdnn_gpu_now();
    size_t nin = (size_t)d->inputs * d->batch, nout = (size_t)d->outputs * d->batch;
    SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->host_in, s->input, nin * sizeof(float),
                          1));
    network nc = host_loss_net(g, i, s);
    double c0 = sdnn_gpu_now();
    SDNN_CHECK(host_loss_compute(g, i, nc, l->output, l->delta));
    g->hl.compute_s += sdnn_gpu_now() - c0;
    SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, d->output, l->output,
                          nout * sizeof(float), 0));
    if (nc.train)
        SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, d->delta, l->delta,
                              nout * sizeof(float), 0));
    /* The next pull or host read must not race the copies from l's buffers. */
    SDNN_CHECK(sdnn_dctx_sync(g->ctx));
    d->has_cost = nc.train;
    double dt = sdnn_gpu_now() - t0;
    g->host_loss_s += dt;
    g->hl.host_s += dt;
    g->hl.wait_s += dt;   /* the device had nothing queued meanwhile */
    g->hl.layers++;
    g->hl.d2h_bytes += nin * sizeof(float);
    g->hl.h2d_bytes += (nc.train ? 2 : 1) * nout * sizeof(float);
    return SDNN_OK;
}

static sdnn_status host_loss_forward(sdnn_gpu_net *g, int i, const sdnn_dstate *s)
{
    if (g->hl_sync) return host_loss_forward_sync(g, i, s);
    sdnn_dlayer *d = &g->L[i];
    double t0 = sdnn_gpu_now();
    size_t nin = (size_t)d->inputs * d->batch, nout = (size_t)d->outputs * d->batch;
    SDNN_CHECK(host_loss_settle(g));
    SDNN_CHECK(sdnn_devent_record(g->hl_ready, g->ctx, SDNN_STREAM_COMPUTE));
    SDNN_CHECK(sdnn_devent_wait(g->hl_ready, g->ctx, SDNN_STREAM_COPY));
    SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COPY, g->host_in, s->input, nin * sizeof(float), 0));
    SDNN_CHECK(sdnn_devent_record(g->hl_copied, g->ctx, SDNN_STREAM_COPY));
    /* Only this copy: waiting for the whole copy stream would also wait for
     * whatever was queued on it after (preloads).  A failed copy leaves
     * the buffer unwritten; the stream's sticky error fails the step at
     * the replica's sync, before anything of it is used. */
    SDNN_CHECK(sdnn_devent_sync(g->hl_copied));
    network nc = host_loss_net(g, i, s);
    double c0 = sdnn_gpu_now();
    SDNN_CHECK(host_loss_compute(g, i, nc, g->hl_out, g->hl_delta));
    g->hl.compute_s += sdnn_gpu_now() - c0;
    size_t back = 0;
    if (nc.train) {
        SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COPY, d->delta, g->hl_delta,
                              nout * sizeof(float), 0));
        back += nout;
    }
    if (!nc.train || g->hl_keep[i] || g->hl_all) {
        SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COPY, d->output, g->hl_out,
                              nout * sizeof(float), 0));
        back += nout;
    }
    SDNN_CHECK(sdnn_devent_record(g->hl_back, g->ctx, SDNN_STREAM_COPY));
    SDNN_CHECK(sdnn_devent_wait(g->hl_back, g->ctx, SDNN_STREAM_COMPUTE));
    g->hl_pending = 1;
    d->has_cost = nc.train;
    double dt = sdnn_gpu_now() - t0;
    g->host_loss_s += dt;
    g->hl.host_s += dt;
    g->hl.layers++;
    g->hl.d2h_bytes += nin * sizeof(float);
    g->hl.h2d_bytes += back * sizeof(float);
    return SDNN_OK;
}

void sdnn_gpu_net_set_host_loss_sync(sdnn_gpu_net *g, int sync)
{
    (void)host_loss_settle(g);
    g->hl_sync = sync != 0;
}

sdnn_status sdnn_gpu_net_host_loss_stats(sdnn_gpu_net *g, sdnn_gpu_host_loss_stats *s)
{
    SDNN_CHECK(host_loss_settle(g));
    *s = g->hl;
    return SDNN_OK;
}

static sdnn_status layer_forward(sdnn_gpu_net *g, int i, int train)
{
    sdnn_dlayer *d = &g->L[i];
    sdnn_dstate s = state_for(g, i, train);
    if (train && d->delta) SDNN_CHECK(sdnn_k_fill(g->ctx, d->delta, (size_t)d->outputs * d->batch, 0));
    if (host_loss(d)) return host_loss_forward(g, i, &s);
    SDNN_CHECK(sdnn_dl_forward(g->ctx, d, &s));
    /* softmax and cost: the per-element loss came to the host for the sum
     * (sdnn_dl_host_sum, a host wait) */
    if ((d->kind == SDNN_DL_SOFTMAX || d->kind == SDNN_DL_COST) && d->has_cost)
        g->hl.sum_bytes += (size_t)d->inputs * d->batch * sizeof(float);
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_layer_forward(sdnn_gpu_net *g, int i, int train)
{
    if (i < 0 || i >= g->n) return SDNN_ERROR(SDNN_ERR_INVALID, "no layer %d", i);
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    SDNN_CHECK(own_io(g));
    g->cur_input = g->input;
    g->cur_truth = g->truth;
    g->cur_truth_host = g->cpu->truth;
    /* One layer checked by itself: its output comes back whatever reads it. */
    g->hl_all = 1;
    sdnn_status st = layer_forward(g, i, train);
    g->hl_all = 0;
    SDNN_CHECK(st);
    return sdnn_dctx_sync(g->ctx);
}

sdnn_status sdnn_gpu_net_layer_backward(sdnn_gpu_net *g, int i)
{
    if (i < 0 || i >= g->n) return SDNN_ERROR(SDNN_ERR_INVALID, "no layer %d", i);
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    SDNN_CHECK(own_io(g));
    g->cur_input = g->input;
    sdnn_dstate s = state_for(g, i, 1);
    SDNN_CHECK(sdnn_dl_backward(g->ctx, &g->L[i], &s));
    return sdnn_dctx_sync(g->ctx);
}

float sdnn_gpu_net_layer_cost(const sdnn_gpu_net *g, int i) { return g->L[i].cost; }

sdnn_status sdnn_gpu_net_set_input(sdnn_gpu_net *g, const float *X_host, const float *Y_host)
{
    network *net = g->cpu;
    size_t nin = (size_t)net->inputs * net->batch, ntr = (size_t)net->truths * net->batch;
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    SDNN_CHECK(own_io(g));
    if (X_host) SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->input, X_host, nin * 4, 0));
    if (Y_host && ntr) SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->truth, Y_host, ntr * 4, 0));
    return sdnn_dctx_sync(g->ctx);
}

sdnn_status sdnn_gpu_net_forward(sdnn_gpu_net *g, const float *X, const float *Y,
                                 const float *Y_host, int train, float *cost)
{
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    if (!X || (!Y && Y_host && g->cpu->truths)) SDNN_CHECK(own_io(g));
    if (!Y && Y_host && g->cpu->truths) {
        /* A host truth only: the device layers (softmax, cost) read it too. */
        SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->truth, Y_host,
                              (size_t)g->cpu->truths * g->cpu->batch * sizeof(float), 0));
        Y = g->truth;
    }
    g->cur_input = X ? X : g->input;
    g->cur_truth = Y;
    g->cur_truth_host = Y_host;
    g->cur_train = train;
    sdnn_devent **fm = g->prof_on ? g->prof_ev : NULL;
    for (int i = 0; i < g->n; ++i) {
        if (fm) SDNN_CHECK(sdnn_devent_record(fm[i], g->ctx, SDNN_STREAM_COMPUTE));
        SDNN_CHECK(layer_forward(g, i, train));
    }
    if (fm) {
        SDNN_CHECK(sdnn_devent_record(fm[g->n], g->ctx, SDNN_STREAM_COMPUTE));
        g->prof_fwd = 1;
    }
    /* calc_network_cost: the mean over the layers that have a cost. */
    float sum = 0;
    int count = 0;
    for (int i = 0; i < g->n; ++i) {
        if (!kind_has_cost(g->L[i].kind)) continue;
        sum += g->L[i].has_cost ? g->L[i].cost : 0;
        ++count;
    }
    if (cost) *cost = count ? sum / count : 0;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_backward(sdnn_gpu_net *g)
{
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    /* bm[i]: after layer i's backward (bm[n]: before the first) */
    sdnn_devent **bm = g->prof_on ? g->prof_ev + g->n + 1 : NULL;
    if (bm) SDNN_CHECK(sdnn_devent_record(bm[g->n], g->ctx, SDNN_STREAM_COMPUTE));
    int i = g->n - 1;
    for (; i >= 0; --i) {
        sdnn_dlayer *d = &g->L[i];
        if (d->stopbackward) break;
        sdnn_dstate s = state_for(g, i, 1);
        SDNN_CHECK(sdnn_dl_backward(g->ctx, d, &s));
        if (bm) SDNN_CHECK(sdnn_devent_record(bm[i], g->ctx, SDNN_STREAM_COMPUTE));
        if (g->hook) SDNN_CHECK(g->hook(g->hook_ctx, g, i));
    }
    if (bm) {
        for (; i >= 0; --i)   /* below stopbackward: no backward, no time */
            SDNN_CHECK(sdnn_devent_record(bm[i], g->ctx, SDNN_STREAM_COMPUTE));
        g->prof_bwd = 1;
    }
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_update_layers(sdnn_gpu_net *g, int lo, int hi)
{
    network *net = g->cpu;
    sdnn_dupdate a;
    a.batch = net->batch * net->subdivisions;
    a.learning_rate = get_current_rate(net);
    a.momentum = net->momentum;
    a.decay = net->decay;
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    for (int i = lo < 0 ? 0 : lo; i <= hi && i < g->n; ++i)
        SDNN_CHECK(sdnn_dl_update(g->ctx, &g->L[i], &a));
    return SDNN_OK;
}

sdnn_status sdnn_gpu_net_update(sdnn_gpu_net *g) { return sdnn_gpu_net_update_layers(g, 0, g->n - 1); }

sdnn_status sdnn_gpu_net_predict(sdnn_gpu_net *g, const float *X_host, float *out_host)
{
    SDNN_CHECK(sdnn_gpu_net_set_input(g, X_host, NULL));
    SDNN_CHECK(sdnn_gpu_net_forward(g, g->input, NULL, NULL, 0, NULL));
    sdnn_dlayer *last = &g->L[g->n - 1];
    return sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, out_host, last->output,
                      (size_t)last->outputs * last->batch * sizeof(float), 1);
}

sdnn_status sdnn_gpu_net_train_rows(sdnn_gpu_net *g, const float *X, const float *Y,
                                    const float *Y_host, int rows, int do_update, float *loss)
{
    network *net = g->cpu;
    int batch = net->batch;
    if (rows % batch)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gpu train: %d rows is not a multiple of batch %d",
                          rows, batch);
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    size_t in = (size_t)net->inputs, tr = (size_t)net->truths;
    int n = rows / batch;
    float sum = 0;
    for (int b = 0; b < n; ++b) {
        size_t r0 = (size_t)b * batch;
        *net->seen += (size_t)batch;
        net->train = 1;
        float err = 0;
        SDNN_CHECK(sdnn_gpu_net_forward(g, X + r0 * in, tr ? Y + r0 * tr : NULL,
                                        tr && Y_host ? Y_host + r0 * tr : NULL, 1, &err));
        SDNN_CHECK(sdnn_gpu_net_backward(g));
        if (do_update && ((*net->seen) / (size_t)batch) % (size_t)net->subdivisions == 0)
            SDNN_CHECK(sdnn_gpu_net_update(g));
        sum += err;
    }
    if (loss) *loss = sum / (float)(n * batch);
    return SDNN_OK;
}

/* Darknet's train_network: get_next_batch, train_network_datum per batch. */
sdnn_status sdnn_gpu_net_train(sdnn_gpu_net *g, data d, float *loss)
{
    network *net = g->cpu;
    int batch = net->batch;
    if (d.X.rows % batch)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gpu train: %d rows is not a multiple of batch %d",
                          d.X.rows, batch);
    if (d.X.cols != net->inputs || (net->truths && d.y.cols != net->truths))
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "gpu train: data has %d inputs and %d truths per row, the net %d and %d",
                          d.X.cols, d.y.cols, net->inputs, net->truths);
    SDNN_CHECK(sdnn_dctx_bind(g->ctx));
    SDNN_CHECK(own_io(g));
    size_t tr = (size_t)net->truths;
    if (!g->stage_x) {
        /* Host rows of Darknet's matrix go through pinned staging. */
        size_t nin = (size_t)net->inputs * batch, ntr = tr * batch;
        SDNN_CHECK(sdnn_hmalloc_pinned(nin * sizeof(float), (void **)&g->stage_x));
        sdnn_status st = sdnn_hmalloc_pinned((ntr ? ntr : 1) * sizeof(float), (void **)&g->stage_y);
        if (st != SDNN_OK) {
            sdnn_hfree_pinned(g->stage_x);
            g->stage_x = NULL;
            return st;
        }
    }
    int n = d.X.rows / batch;
    float sum = 0;
    for (int b = 0; b < n; ++b) {
        for (int j = 0; j < batch; ++j) {
            memcpy(g->stage_x + (size_t)j * net->inputs, d.X.vals[b * batch + j],
                   (size_t)net->inputs * sizeof(float));
            if (tr) memcpy(g->stage_y + (size_t)j * tr, d.y.vals[b * batch + j], tr * sizeof(float));
        }
        SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->input, g->stage_x,
                              (size_t)batch * net->inputs * sizeof(float), 0));
        if (tr)
            SDNN_CHECK(sdnn_dcopy(g->ctx, SDNN_STREAM_COMPUTE, g->truth, g->stage_y,
                                  (size_t)batch * tr * sizeof(float), 0));
        *net->seen += (size_t)batch;
        net->train = 1;
        float err = 0;
        SDNN_CHECK(sdnn_gpu_net_forward(g, g->input, g->truth, g->stage_y, 1, &err));
        SDNN_CHECK(sdnn_gpu_net_backward(g));
        if (((*net->seen) / (size_t)batch) % (size_t)net->subdivisions == 0)
            SDNN_CHECK(sdnn_gpu_net_update(g));
        /* The staging buffers are rewritten next round. */
        SDNN_CHECK(sdnn_dctx_sync(g->ctx));
        sum += err;
    }
    if (loss) *loss = sum / (float)(n * batch);
    return SDNN_OK;
}

void sdnn_gpu_net_set_bn_exact(sdnn_gpu_net *g, int on)
{
    for (int i = 0; i < g->n; ++i) g->L[i].bn_exact = on && g->L[i].bn;
}
