/*
 * hooks: see hooks.h.  Darknet sets one forward, backward and update
 * function per layer type, so the originals are kept per type; installing
 * on a layer whose pointer differs from the one recorded for its type is
 * refused.
 */
#include "hooks.h"
#include "bnfix.h"
#include "clock.h"
#include "conv1x1.h"
#include "conv_dnnl.h"
#include "fastlayers.h"
#include "replicas.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*forward_fn)(layer, network);
typedef void (*backward_fn)(layer, network);
typedef void (*update_fn)(layer, update_args);

/* libdarknet's (exported, not declared in darknet.h). */
void forward_maxpool_layer(layer l, network net);
void forward_shortcut_layer(layer l, network net);
void backward_shortcut_layer(layer l, network net);

#define NTYPES ((int)BLANK + 1)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static forward_fn g_forward[NTYPES];
static backward_fn g_backward[NTYPES];
static update_fn g_update[NTYPES];
static _Thread_local sdnn_hook_ctx *tl_ctx;

/* The fix's scratch buffer of each network with fixed layers, found by the
 * network's layer array (the one pointer every copy of the network struct
 * Darknet passes around shares).  Guarded by g_lock; each network's buffer
 * is used only by the thread training that network. */
typedef struct fix_scratch {
    const layer *layers;
    float *buf;
    size_t cap;   /* floats */
    struct fix_scratch *next;
} fix_scratch;
static fix_scratch *g_fix;

void sdnn_hooks_set_context(sdnn_hook_ctx *ctx) { tl_ctx = ctx; }
sdnn_hook_ctx *sdnn_hooks_context(void) { return tl_ctx; }

void sdnn_hooks_bind_callbacks(const sdnn_engine_callbacks *cb)
{
    if (tl_ctx) tl_ctx->cb = cb;
}

/* The callbacks of context c, or NULL when there are none (stock mode). */
static const sdnn_engine_callbacks *callbacks(const sdnn_hook_ctx *c)
{
    return c ? c->cb : NULL;
}

/* A failure inside a layer: the step stops through the callbacks, or
 * (stock mode, no scheduler) the message is printed. */
static void layer_failed(int index, sdnn_status st)
{
    sdnn_hook_ctx *c = tl_ctx;
    const sdnn_engine_callbacks *cb = callbacks(c);
    if (cb && cb->abort) {
        cb->abort(cb->user, c->replica, st);
        return;
    }
    fprintf(stderr, "scalednn: layer %d: %s\n", index, sdnn_last_error());
}

/* cpu_conv=onednn (conv_dnnl.h): a convolution with a oneDNN state runs
 * there; when its primitives cannot be made for the present shape the
 * layer runs Darknet's own function, said once per process. */
static int dnnl_usable(const layer *l, int index)
{
    if (l->type != CONVOLUTIONAL || !sdnn_conv_dnnl_owns(l)) return 0;
    if (sdnn_conv_dnnl_ready(l) == SDNN_OK) return 1;
    static _Atomic int said;
    if (!said++)
        fprintf(stderr, "scalednn: layer %d runs Darknet's convolution: %s\n", index,
                sdnn_last_error());
    return 0;
}

/* A convolution on oneDNN where it owns the layer, else on `own`: Darknet's
 * function, or conv1x1.h's for a strided 1x1 layer. */
static void conv_forward_on(layer l, network net, forward_fn own)
{
    if (!dnnl_usable(&l, net.index)) {
        own(l, net);
        return;
    }
    sdnn_status st = sdnn_conv_dnnl_forward(l, net);
    if (st != SDNN_OK) layer_failed(net.index, st);
}

static void conv_backward_on(layer l, network net, backward_fn own)
{
    if (!dnnl_usable(&l, net.index)) {
        own(l, net);
        return;
    }
    sdnn_status st = sdnn_conv_dnnl_backward(l, net);
    if (st != SDNN_OK) layer_failed(net.index, st);
}

static void conv_forward(layer l, network net) { conv_forward_on(l, net, g_forward[l.type]); }
static void conv_backward(layer l, network net) { conv_backward_on(l, net, g_backward[l.type]); }
static void c1_forward(layer l, network net) { conv_forward_on(l, net, sdnn_conv1x1_forward); }
static void c1_backward(layer l, network net) { conv_backward_on(l, net, sdnn_conv1x1_backward); }

/* Darknet's maxpool keeps index -1 for a window of NaNs and its backward
 * then writes before the start of the input's delta; catch that first. */
static int maxpool_indexes_valid(const layer *l)
{
    long n = (long)l->out_h * l->out_w * l->out_c * l->batch;
    long limit = (long)l->h * l->w * l->c * l->batch;
    for (long i = 0; i < n; ++i)
        if (l->indexes[i] < 0 || l->indexes[i] >= limit) return 0;
    return 1;
}

/* Which subdivision of the step train_network is in: it advances seen
 * before each subdivision's forward. */
static int subdivision(const network *net)
{
    size_t b = *net->seen / (size_t)net->batch;
    size_t s = (size_t)net->subdivisions;
    return (int)((b + s - 1) % s);
}

/* cpu_conv=onednn: [maxpool] of size 2 on fastlayers.c (installed only on
 * covered layers; a resize keeps size and stride, the check is cheap). */
static void pool_forward(layer l, network net)
{
    if (sdnn_fast_maxpool_covered(&l)) sdnn_fast_maxpool_forward(&l, net.input);
    else g_forward[l.type](l, net);
}

/* cpu_conv=onednn: [shortcut] on fastlayers.c (installed only on covered
 * layers; checked again per call, as a resize could change a shape). */
static void shortcut_forward(layer l, network net)
{
    if (sdnn_fast_shortcut_covered(&l))
        sdnn_fast_shortcut_forward(&l, net.input, net.layers[l.index].output);
    else
        g_forward[l.type](l, net);
}

static void shortcut_backward(layer l, network net)
{
    if (sdnn_fast_shortcut_covered(&l))
        sdnn_fast_shortcut_backward(&l, net.delta, net.layers[l.index].delta);
    else
        g_backward[l.type](l, net);
}

static void forward_body(layer l, network net, forward_fn f)
{
    sdnn_hook_ctx *c = tl_ctx;
    if (!c || (!c->tl && !c->prof)) {
        f(l, net);
        return;
    }
    double t0 = sdnn_now_s();
    f(l, net);
    double t1 = sdnn_now_s();
    if (c->prof) c->prof[3 * net.index] += t1 - t0;
    if (c->tl)
        sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_FORWARD, t0, t1,
                           c->iteration, net.index, subdivision(&net),
                           sdnn_layer_type_name(l.type));
}

static void hook_forward(layer l, network net)
{
    forward_body(l, net, l.type == CONVOLUTIONAL ? conv_forward : g_forward[l.type]);
}

static void hook_forward_pool(layer l, network net) { forward_body(l, net, pool_forward); }
static void hook_forward_shortcut(layer l, network net) { forward_body(l, net, shortcut_forward); }
/* A strided 1x1 convolution that carried conv1x1.h's functions. */
static void hook_forward_c1(layer l, network net) { forward_body(l, net, c1_forward); }

static int is_forward_hook(forward_fn f)
{
    return f == hook_forward || f == hook_forward_pool || f == hook_forward_shortcut ||
           f == hook_forward_c1;
}

/* fix_region_delta: Darknet's GPU region backward on the host (hooks.h):
 * the logistic's derivative on the entries the forward activated with it,
 * then the delta added to the input's. */
static void region_backward(layer l, network net)
{
    size_t wh = (size_t)l.w * l.h, per = (size_t)l.coords + (size_t)l.classes + 1;
    for (int b = 0; b < l.batch; ++b)
        for (int n = 0; n < l.n; ++n)
            for (size_t e = 0; e < per; ++e) {
                int lg = e < 2 || (l.coords > 4 && e >= 4 && e < (size_t)l.coords) ||
                         (e == (size_t)l.coords && !l.background);
                if (!lg) continue;
                size_t k0 = (size_t)b * l.outputs + ((size_t)n * per + e) * wh;
                for (size_t q = 0; q < wh; ++q) {
                    float o = l.output[k0 + q];
                    l.delta[k0 + q] *= (1 - o) * o;
                }
            }
    if (!net.delta) return;
    size_t nd = (size_t)l.batch * l.inputs;
    for (size_t k = 0; k < nd; ++k) net.delta[k] += l.delta[k];
}

int sdnn_fix_region_count(const network *net)
{
    int n = 0;
    for (int i = 0; i < net->n; ++i) n += net->layers[i].type == REGION;
    return n;
}

/* Layer types whose libdarknet backward writes nothing into its input's
 * delta when there is none (net.delta NULL, as for layer 0): they test it
 * (the convolutions, connected, local, dropout, the recurrent layers), write
 * no input delta (crop; route writes its inputs' own), or are empty
 * (Debian's CPU [region]; the fix's region_backward tests it).  Every other
 * type writes its input's delta unconditionally. */
static int skips_missing_delta(LAYER_TYPE t)
{
    return t == CONVOLUTIONAL || t == DECONVOLUTIONAL || t == CONNECTED || t == LOCAL ||
           t == DROPOUT || t == CROP || t == ROUTE || t == RNN || t == GRU || t == LSTM ||
           t == CRNN || t == REGION;
}

int sdnn_first_delta_needed(const network *net)
{
    if (net->n < 1 || !net->layers[0].backward || net->delta) return 0;
    return !skips_missing_delta(net->layers[0].type);
}

static float *scratch_for(const layer *layers, size_t n);

/* Where layer 0's input delta goes when the network has none: the
 * network's scratch, cleared (the layer may add into it), and discarded
 * after the layer's backward, as the gpu engine drops it.  NULL when
 * there is no memory (the step is stopped). */
static float *first_delta(const layer *l, network *net)
{
    size_t n = (size_t)l->batch * (size_t)l->inputs;
    float *s = scratch_for(net->layers, n);
    if (!s) {
        sdnn_hook_ctx *c = tl_ctx;
        const sdnn_engine_callbacks *cb = callbacks(c);
        SDNN_ERROR(SDNN_ERR_NOMEM, "layer %d (%s): no memory for the input delta of the first "
                   "layer (%zu floats)", net->index, sdnn_layer_type_name(l->type), n);
        if (cb && cb->abort) cb->abort(cb->user, c->replica, SDNN_ERR_NOMEM);
        else fprintf(stderr, "scalednn: %s\n", sdnn_last_error());
        return NULL;
    }
    memset(s, 0, n * sizeof *s);
    return s;
}

/* Darknet's backward of l, timed for the timeline and the planner; with
 * `add` (the fix) the delta Darknet wrote into net.delta (the scratch) is
 * then added to `add`, inside the timed span: it is part of the layer's
 * backward.  own: OWN_DARKNET the layer's own (or the oneDNN convolution's),
 * OWN_REGION region_backward, OWN_SHORTCUT fastlayers.c's [shortcut],
 * OWN_CONV1X1 conv1x1.h's strided 1x1 convolution (or oneDNN's). */
enum { OWN_DARKNET, OWN_REGION, OWN_SHORTCUT, OWN_CONV1X1 };
static void backward_body(layer l, network net, float *add, size_t nadd, int bn, int own)
{
    sdnn_hook_ctx *c = tl_ctx;
    const sdnn_engine_callbacks *cb = callbacks(c);
    if (cb) {
        /* After a failure anywhere, the rest of the backward pass is
         * skipped: its values are garbage and Darknet's code is not safe on
         * non-finite input. */
        if (cb->aborted && cb->aborted(cb->user)) return;
        if (cb->nonfinite_input && l.type == MAXPOOL && l.indexes &&
            !maxpool_indexes_valid(&l)) {
            cb->nonfinite_input(cb->user, c->replica, net.index);
            return;
        }
    }
    /* Layer 0 of a network without an input delta (add is NULL there):
     * a layer that writes it unconditionally gets a scratch. */
    if (!net.delta && !skips_missing_delta(l.type) && !(net.delta = first_delta(&l, &net)))
        return;
    double t0 = c && (c->tl || c->prof) ? sdnn_now_s() : 0;
    backward_fn conv = own == OWN_CONV1X1 ? c1_backward : conv_backward;
    if (bn && l.type == CONVOLUTIONAL && dnnl_usable(&l, net.index)) {
        /* cpu_conv=onednn: the exact batch-norm backward fused with the
         * activation gradient (fastlayers.h), then the convolution's */
        sdnn_status st = sdnn_conv_dnnl_backward_ex(l, net, 1);
        if (st != SDNN_OK) layer_failed(net.index, st);
    } else if (bn) {
        /* fix_bn_delta: the exact batch-norm backward first (bnfix.h), then
         * the rest of the layer's own backward. */
        float *sink = malloc(sdnn_bn_fix_sink_floats(&l) * sizeof *sink);
        if (!sink) {
            SDNN_ERROR(SDNN_ERR_NOMEM, "layer %d: no memory for the batch-norm fix", net.index);
            if (cb && cb->abort) cb->abort(cb->user, c->replica, SDNN_ERR_NOMEM);
            return;
        }
        backward_fn next = l.type == CONVOLUTIONAL ? conv : g_backward[l.type];
        void (*rest)(layer, network) = sdnn_bn_fix_backward(&l, &net, sink, next);
        if (rest) rest(l, net);
        free(sink);
    } else if (l.type == CONVOLUTIONAL) {
        conv(l, net);
    } else if (own == OWN_REGION) {
        region_backward(l, net);
    } else if (own == OWN_SHORTCUT) {
        shortcut_backward(l, net);
    } else {
        g_backward[l.type](l, net);
    }
    if (add) {
        const float *restrict src = net.delta;
        float *restrict dst = add;
        for (size_t k = 0; k < nadd; ++k) dst[k] += src[k];
    }
    if (c && (c->tl || c->prof)) {
        double t1 = sdnn_now_s();
        if (c->prof) c->prof[3 * net.index + 1] += t1 - t0;
        if (c->tl)
            sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_BACKWARD, t0,
                               t1, c->iteration, net.index, subdivision(&net),
                               sdnn_layer_type_name(l.type));
    }
    if (!cb || !cb->backward_done || !l.update) return;
    /* seen was advanced before this subdivision's forward; the update comes
     * after the subdivision that makes seen/batch a multiple of
     * subdivisions, so only then are the layer's gradients complete. */
    if ((*net.seen / (size_t)net.batch) % (size_t)net.subdivisions != 0) return;
    cb->backward_done(cb->user, c->replica, net.index);
}

static void hook_backward(layer l, network net) { backward_body(l, net, NULL, 0, 0, 0); }
static void hook_backward_bn(layer l, network net) { backward_body(l, net, NULL, 0, 1, 0); }
static void hook_backward_region(layer l, network net)
{
    backward_body(l, net, NULL, 0, 0, OWN_REGION);
}
static void hook_backward_shortcut(layer l, network net)
{
    backward_body(l, net, NULL, 0, 0, OWN_SHORTCUT);
}
/* conv1x1.h's backward adds into its input's delta: no 1x1 delta fix. */
static void hook_backward_c1(layer l, network net) { backward_body(l, net, NULL, 0, 0, OWN_CONV1X1); }
static void hook_backward_c1_bn(layer l, network net)
{
    backward_body(l, net, NULL, 0, 1, OWN_CONV1X1);
}

/* The scratch of the network whose layer array is `layers`, at least n
 * floats (it grows only after a resize), or NULL. */
static float *scratch_for(const layer *layers, size_t n)
{
    pthread_mutex_lock(&g_lock);
    fix_scratch *f = g_fix;
    while (f && f->layers != layers) f = f->next;
    pthread_mutex_unlock(&g_lock);
    if (!f) return NULL;
    if (f->cap < n) {
        float *b = realloc(f->buf, n * sizeof *b);
        if (!b) return NULL;
        f->buf = b;
        f->cap = n;
    }
    return f->buf;
}

/* A 1x1 convolution whose input delta has another writer: Darknet's
 * backward writes the input gradient into the scratch (its gemm has beta 0
 * and overwrites every element, so the scratch needs no clearing), and the
 * scratch is added to the real delta as col2im adds for size > 1. */
static void fix_body(layer l, network net, int bn)
{
    float *delta = net.delta;
    if (!delta) {
        backward_body(l, net, NULL, 0, bn, 0);
        return;
    }
    size_t n = (size_t)l.batch * (size_t)l.inputs;
    float *s = scratch_for(net.layers, n);
    if (!s) {
        sdnn_hook_ctx *c = tl_ctx;
        const sdnn_engine_callbacks *cb = callbacks(c);
        SDNN_ERROR(SDNN_ERR_NOMEM, "layer %d: no memory for the 1x1 delta fix's scratch buffer",
                   net.index);
        if (cb && cb->abort) cb->abort(cb->user, c->replica, SDNN_ERR_NOMEM);
        return;
    }
    /* A 1x1 layer whose output is not its input's size (stride or pad)
     * writes only part of the input's delta: clear the rest. */
    if ((size_t)l.out_h * (size_t)l.out_w != (size_t)l.h * (size_t)l.w)
        memset(s, 0, n * sizeof *s);
    net.delta = s;
    backward_body(l, net, delta, n, bn, 0);
}

static void hook_backward_fix(layer l, network net) { fix_body(l, net, 0); }
static void hook_backward_fix_bn(layer l, network net) { fix_body(l, net, 1); }

static int is_backward_hook(backward_fn f)
{
    return f == hook_backward || f == hook_backward_bn || f == hook_backward_fix ||
           f == hook_backward_fix_bn || f == hook_backward_region || f == hook_backward_shortcut ||
           f == hook_backward_c1 || f == hook_backward_c1_bn;
}

/* Does the backward of layer j write into `d`?  Most layers add into their
 * input's delta (layer j-1's); a route adds into each routed layer's delta
 * and a shortcut also into its from= layer's. */
static int writes_delta(const network *net, int j, const float *d)
{
    const layer *l = &net->layers[j];
    if (!l->backward) return 0;
    if (l->type != ROUTE && net->layers[j - 1].delta == d) return 1;
    if (l->type == SHORTCUT && l->index >= 0 && l->index < net->n &&
        net->layers[l->index].delta == d)
        return 1;
    if (l->type == ROUTE && l->input_layers)
        for (int k = 0; k < l->n; ++k) {
            int src = l->input_layers[k];
            if (src >= 0 && src < net->n && net->layers[src].delta == d) return 1;
        }
    return 0;
}

int sdnn_fix_1x1_needed(const network *net, int i)
{
    if (i < 1 || i >= net->n) return 0;
    const layer *l = &net->layers[i];
    if (l->type != CONVOLUTIONAL || l->size != 1 || !l->backward) return 0;
    /* conv1x1.h's strided 1x1 convolution adds (it is its own fix). */
    if (sdnn_conv1x1_attached(l) || l->forward == hook_forward_c1) return 0;
    const float *d = net->layers[i - 1].delta;
    if (!d) return 0;
    for (int j = i + 1; j < net->n; ++j)
        if (writes_delta(net, j, d)) return 1;
    return 0;
}

int sdnn_fix_1x1_count(const network *net)
{
    int k = 0;
    for (int i = 1; i < net->n; ++i) k += sdnn_fix_1x1_needed(net, i);
    return k;
}

/* Index of the layer `l` is a copy of: update_network walks the layers in
 * order, so the search starts at the cursor and normally succeeds at once. */
static int find_layer(sdnn_hook_ctx *c, const layer *l)
{
    network *net = c->net;
    for (int pass = 0; pass < 2; ++pass) {
        int start = pass == 0 ? c->cursor : 0;
        for (int i = start; i < net->n; ++i) {
            const layer *m = &net->layers[i];
            if (m->biases == l->biases && m->weights == l->weights) {
                c->cursor = i + 1;
                return i;
            }
        }
    }
    return -1;
}

static void hook_update(layer l, update_args a)
{
    sdnn_hook_ctx *c = tl_ctx;
    const sdnn_engine_callbacks *cb = callbacks(c);
    int wait = cb && cb->before_update;
    if (!c || (!wait && !c->tl)) {
        g_update[l.type](l, a);
        return;
    }
    double t0 = c->tl ? sdnn_now_s() : 0;
    int i = find_layer(c, &l);
    if (wait) {
        if (i < 0) {
            SDNN_ERROR(SDNN_ERR_INTERNAL, "update of an unknown layer on replica %d", c->replica);
            if (cb->abort) cb->abort(cb->user, c->replica, SDNN_ERR_INTERNAL);
            return;
        }
        if (cb->before_update(cb->user, c->replica, i) != 0) return;
    }
    double u0 = c->prof ? sdnn_now_s() : 0;
    g_update[l.type](l, a);
    if (c->prof && i >= 0) c->prof[3 * i + 2] += sdnn_now_s() - u0;
    if (c->tl)
        sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_UPDATE, t0,
                           sdnn_now_s(), c->iteration, i, 0, NULL);
}

/* The network's scratch entry (g_lock held), made when missing. */
static sdnn_status add_scratch(const network *net)
{
    size_t need = 0;
    for (int i = 1; i < net->n; ++i)
        if (sdnn_fix_1x1_needed(net, i)) {
            size_t n = (size_t)net->layers[i].batch * (size_t)net->layers[i].inputs;
            if (n > need) need = n;
        }
    if (sdnn_first_delta_needed(net)) {
        size_t n = (size_t)net->layers[0].batch * (size_t)net->layers[0].inputs;
        if (n > need) need = n;
    }
    for (fix_scratch *f = g_fix; f; f = f->next)
        if (f->layers == net->layers) return SDNN_OK;
    fix_scratch *f = calloc(1, sizeof *f);
    float *b = malloc((need ? need : 1) * sizeof *b);
    if (!f || !b) {
        free(f);
        free(b);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the hooks' scratch delta (%zu floats)",
                          need);
    }
    f->layers = net->layers;
    f->buf = b;
    f->cap = need;
    f->next = g_fix;
    g_fix = f;
    return SDNN_OK;
}

static void drop_scratch(const network *net)
{
    for (fix_scratch **p = &g_fix; *p; p = &(*p)->next)
        if ((*p)->layers == net->layers) {
            fix_scratch *f = *p;
            *p = f->next;
            free(f->buf);
            free(f);
            return;
        }
}

int sdnn_hooks_installed(const network *net)
{
    for (int i = 0; i < net->n; ++i)
        if (is_backward_hook(net->layers[i].backward)) return 1;
    return 0;
}

sdnn_status sdnn_hooks_install(network *net, int forward, int fixes)
{
    sdnn_status st = SDNN_OK;
    /* Decided before any pointer changes: the test reads the layers' own
     * backward pointers.  fix[i]: bit 0 the 1x1 fix, bit 1 the BN fix,
     * bit 2 the region backward (a region layer has neither of the others). */
    unsigned char *fix = calloc((size_t)net->n + 1, 1);
    /* c1[i]: layer i carried conv1x1.h's strided 1x1 functions (the
     * parse's default).  They become Darknet's pointers again here, so one
     * type keeps one pair of originals (and oneDNN's eligibility sees
     * Darknet's own); the layer's wrappers run conv1x1.h's functions, and
     * uninstall gives them back. */
    unsigned char *c1 = calloc((size_t)net->n + 1, 1);
    if (!fix || !c1) {
        free(fix);
        free(c1);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the hooks");
    }
    for (int i = 0; i < net->n; ++i) {
        c1[i] = (unsigned char)sdnn_conv1x1_attached(&net->layers[i]);
        sdnn_conv1x1_release_layer(&net->layers[i]);
    }
    int ndnnl = 0;
    if (fixes & SDNN_HOOK_ONEDNN) {
        /* Before any pointer changes: eligibility reads Darknet's own. */
        st = sdnn_conv_dnnl_attach(net, &ndnnl);
        if (st != SDNN_OK) {
            for (int i = 0; i < net->n; ++i)
                if (c1[i]) sdnn_conv1x1_attach_layer(&net->layers[i]);
            free(fix);
            free(c1);
            return st;
        }
    }
    int nfix = 0;
    for (int i = 0; i < net->n; ++i) {
        /* oneDNN's backward adds the input gradient, and so does
         * conv1x1.h's: no 1x1 fix needed. */
        int one = (fixes & SDNN_FIX_1X1) && sdnn_fix_1x1_needed(net, i) && !c1[i] &&
                  !(ndnnl && sdnn_conv_dnnl_owns(&net->layers[i]));
        nfix += one;
        fix[i] = (unsigned char)(one | ((fixes & SDNN_FIX_BN) && sdnn_bn_fix_applies(net, i) ? 2 : 0) |
                                 ((fixes & SDNN_FIX_REGION) && net->layers[i].type == REGION ? 4 : 0));
    }
    pthread_mutex_lock(&g_lock);
    if (nfix || sdnn_first_delta_needed(net)) st = add_scratch(net);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        int t = (int)l->type;
        if ((l->backward || (forward && l->forward)) && (t < 0 || t >= NTYPES)) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d has unknown type %d", i, t);
            break;
        }
        /* cpu_conv=onednn: [maxpool]'s forward on fastlayers.c */
        int pool = (fixes & SDNN_HOOK_ONEDNN) && t == MAXPOOL &&
                   (l->forward == forward_maxpool_layer || l->forward == hook_forward_pool) &&
                   sdnn_fast_maxpool_covered(l);
        /* and [shortcut]'s forward and backward */
        int sc = (fixes & SDNN_HOOK_ONEDNN) && t == SHORTCUT &&
                 (l->forward == forward_shortcut_layer || l->forward == hook_forward_shortcut) &&
                 (l->backward == backward_shortcut_layer || is_backward_hook(l->backward)) &&
                 sdnn_fast_shortcut_covered(l);
        int own_fwd = forward || pool || sc || c1[i] ||
                      (ndnnl && t == CONVOLUTIONAL && sdnn_conv_dnnl_owns(l));
        if (own_fwd && l->forward && !is_forward_hook(l->forward)) {
            if (g_forward[t] && g_forward[t] != l->forward) {
                st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                "layer %d (%s) has its own forward function; cannot hook it", i,
                                sdnn_layer_type_name(l->type));
                break;
            }
            g_forward[t] = l->forward;
            l->forward = pool ? hook_forward_pool : sc ? hook_forward_shortcut
                                                       : c1[i] ? hook_forward_c1 : hook_forward;
        }
        if (st != SDNN_OK) break;
        if (!l->backward) continue;
        if (is_backward_hook(l->backward)) continue;   /* already installed */
        if ((l->update && g_update[t] && g_update[t] != l->update) ||
            (g_backward[t] && g_backward[t] != l->backward)) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                            "layer %d (%s) has its own backward/update functions; cannot hook it",
                            i, sdnn_layer_type_name(l->type));
            break;
        }
        g_backward[t] = l->backward;
        static const backward_fn by_fix[4] = {hook_backward, hook_backward_fix,
                                              hook_backward_bn, hook_backward_fix_bn};
        unsigned f = fix[i];
        if (c1[i]) l->backward = f & 2 ? hook_backward_c1_bn : hook_backward_c1;
        else l->backward = f & 4 ? hook_backward_region : sc && !f ? hook_backward_shortcut : by_fix[f & 3];
        if (l->update) {
            g_update[t] = l->update;
            l->update = hook_update;
        }
    }
    pthread_mutex_unlock(&g_lock);
    free(fix);
    if (st != SDNN_OK) {
        sdnn_hooks_uninstall(net);
        for (int i = 0; i < net->n; ++i)
            if (c1[i]) sdnn_conv1x1_attach_layer(&net->layers[i]);
    }
    free(c1);
    return st;
}

void sdnn_hooks_uninstall(network *net)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        int c1 = l->forward == hook_forward_c1;
        if (is_forward_hook(l->forward)) l->forward = g_forward[l->type];
        if (l->update == hook_update) l->update = g_update[l->type];
        if (is_backward_hook(l->backward)) l->backward = g_backward[l->type];
        if (c1) sdnn_conv1x1_attach_layer(l);
    }
    drop_scratch(net);
    pthread_mutex_unlock(&g_lock);
    sdnn_conv_dnnl_detach(net);
}
