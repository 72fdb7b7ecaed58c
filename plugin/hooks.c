/*
 * hooks: see hooks.h.  Darknet sets one forward, backward and update
 * function per layer type, so the originals are kept per type; installing
 * on a layer whose pointer differs from the one recorded for its type is
 * refused.
 */
#include "hooks.h"
#include "clock.h"
#include "replicas.h"

#include <pthread.h>

typedef void (*forward_fn)(layer, network);
typedef void (*backward_fn)(layer, network);
typedef void (*update_fn)(layer, update_args);

#define NTYPES ((int)BLANK + 1)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static forward_fn g_forward[NTYPES];
static backward_fn g_backward[NTYPES];
static update_fn g_update[NTYPES];
static _Thread_local sdnn_hook_ctx *tl_ctx;

void sdnn_hooks_set_context(sdnn_hook_ctx *ctx) { tl_ctx = ctx; }

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

static void hook_forward(layer l, network net)
{
    sdnn_hook_ctx *c = tl_ctx;
    if (!c || (!c->tl && !c->prof)) {
        g_forward[l.type](l, net);
        return;
    }
    double t0 = sdnn_now_s();
    g_forward[l.type](l, net);
    double t1 = sdnn_now_s();
    if (c->prof) c->prof[3 * net.index] += t1 - t0;
    if (c->tl)
        sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_FORWARD, t0, t1,
                           c->iteration, net.index, subdivision(&net),
                           sdnn_layer_type_name(l.type));
}

static void hook_backward(layer l, network net)
{
    sdnn_hook_ctx *c = tl_ctx;
    if (c && c->ex) {
        /* After a failure anywhere, the rest of the backward pass is
         * skipped: its values are garbage and Darknet's code is not safe on
         * non-finite input. */
        if (sdnn_exchange_aborted(c->ex)) return;
        if (l.type == MAXPOOL && l.indexes && !maxpool_indexes_valid(&l)) {
            sdnn_exchange_report_nonfinite_input(c->ex, c->replica, net.index);
            return;
        }
    }
    if (c && (c->tl || c->prof)) {
        double t0 = sdnn_now_s();
        g_backward[l.type](l, net);
        double t1 = sdnn_now_s();
        if (c->prof) c->prof[3 * net.index + 1] += t1 - t0;
        if (c->tl)
            sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_BACKWARD, t0,
                               t1, c->iteration, net.index, subdivision(&net),
                               sdnn_layer_type_name(l.type));
    } else {
        g_backward[l.type](l, net);
    }
    if (!c || !c->ex || !l.update) return;
    /* seen was advanced before this subdivision's forward; the update comes
     * after the subdivision that makes seen/batch a multiple of
     * subdivisions, so only then are the layer's gradients complete. */
    if ((*net.seen / (size_t)net.batch) % (size_t)net.subdivisions != 0) return;
    sdnn_exchange_layer_done(c->ex, c->replica, net.index);
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
    if (!c || (!c->ex && !c->tl)) {
        g_update[l.type](l, a);
        return;
    }
    double t0 = c->tl ? sdnn_now_s() : 0;
    int i = find_layer(c, &l);
    if (c->ex) {
        if (i < 0) {
            SDNN_ERROR(SDNN_ERR_INTERNAL, "update of an unknown layer on replica %d", c->replica);
            sdnn_exchange_abort(c->ex, SDNN_ERR_INTERNAL);
            return;
        }
        if (sdnn_exchange_layer_wait(c->ex, c->replica, i) != 0) return;
    }
    double u0 = c->prof ? sdnn_now_s() : 0;
    g_update[l.type](l, a);
    if (c->prof && i >= 0) c->prof[3 * i + 2] += sdnn_now_s() - u0;
    if (c->tl)
        sdnn_timeline_span(c->tl, SDNN_TL_TRACK_REPLICA0 + c->replica, SDNN_TL_UPDATE, t0,
                           sdnn_now_s(), c->iteration, i, 0, NULL);
}

sdnn_status sdnn_hooks_install(network *net, int forward)
{
    sdnn_status st = SDNN_OK;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        int t = (int)l->type;
        if ((l->backward || (forward && l->forward)) && (t < 0 || t >= NTYPES)) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d has unknown type %d", i, t);
            break;
        }
        if (forward && l->forward && l->forward != hook_forward) {
            if (g_forward[t] && g_forward[t] != l->forward) {
                st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                "layer %d (%s) has its own forward function; cannot hook it", i,
                                sdnn_layer_type_name(l->type));
                break;
            }
            g_forward[t] = l->forward;
            l->forward = hook_forward;
        }
        if (!l->backward) continue;
        if (l->backward == hook_backward) continue;   /* already installed */
        if ((l->update && g_update[t] && g_update[t] != l->update) ||
            (g_backward[t] && g_backward[t] != l->backward)) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                            "layer %d (%s) has its own backward/update functions; cannot hook it",
                            i, sdnn_layer_type_name(l->type));
            break;
        }
        g_backward[t] = l->backward;
        l->backward = hook_backward;
        if (l->update) {
            g_update[t] = l->update;
            l->update = hook_update;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (st != SDNN_OK) sdnn_hooks_uninstall(net);
    return st;
}

void sdnn_hooks_uninstall(network *net)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->forward == hook_forward) l->forward = g_forward[l->type];
        if (l->update == hook_update) l->update = g_update[l->type];
        if (l->backward == hook_backward) l->backward = g_backward[l->type];
    }
    pthread_mutex_unlock(&g_lock);
}
