/*
 * hooks: see hooks.h.  Darknet sets one backward and one update function per
 * layer type, so the originals are kept per type; installing on a layer
 * whose pointer differs from the one recorded for its type is refused.
 */
#include "hooks.h"
#include "replicas.h"

#include <pthread.h>

typedef void (*backward_fn)(layer, network);
typedef void (*update_fn)(layer, update_args);

#define NTYPES ((int)BLANK + 1)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static backward_fn g_backward[NTYPES];
static update_fn g_update[NTYPES];
static _Thread_local sdnn_hook_ctx *tl_ctx;

void sdnn_hooks_set_context(sdnn_hook_ctx *ctx) { tl_ctx = ctx; }

static void hook_backward(layer l, network net)
{
    g_backward[l.type](l, net);
    sdnn_hook_ctx *c = tl_ctx;
    if (!c || !c->ex) return;
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
    if (c && c->ex) {
        int i = find_layer(c, &l);
        if (i < 0) {
            SDNN_ERROR(SDNN_ERR_INTERNAL, "update of an unknown layer on replica %d", c->replica);
            sdnn_exchange_abort(c->ex, SDNN_ERR_INTERNAL);
            return;
        }
        if (sdnn_exchange_layer_wait(c->ex, c->replica, i) != 0) return;
    }
    g_update[l.type](l, a);
}

sdnn_status sdnn_hooks_install(network *net)
{
    sdnn_status st = SDNN_OK;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (!l->update) continue;
        int t = (int)l->type;
        if (t < 0 || t >= NTYPES) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "layer %d has unknown type %d", i, t);
            break;
        }
        if (l->update == hook_update) continue;   /* already installed */
        if ((g_update[t] && g_update[t] != l->update) ||
            (g_backward[t] && g_backward[t] != l->backward)) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                            "layer %d (%s) has its own backward/update functions; cannot hook it",
                            i, sdnn_layer_type_name(l->type));
            break;
        }
        g_update[t] = l->update;
        g_backward[t] = l->backward;
        l->update = hook_update;
        l->backward = hook_backward;
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
        if (l->update != hook_update) continue;
        l->update = g_update[l->type];
        l->backward = g_backward[l->type];
    }
    pthread_mutex_unlock(&g_lock);
}
