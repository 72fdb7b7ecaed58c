/*
 * hooks: wrappers around each layer's backward and update pointers.
 *
 * Darknet calls l.forward(l, net) and l.backward(l, net) with net.index = i
 * and l.update(l, args) with no index.  The wrappers find the replica
 * through a thread-local context (each replica trains in its own thread),
 * the layer through net.index (forward, backward) or its parameter pointers
 * (update), tell the exchange, record the timeline, and call Darknet's own
 * function.  Without a context (a thread that is not a replica) they are
 * transparent.  Forward is wrapped only for a timeline or the planner's
 * profile: the exchange has no use for it.
 */
#ifndef SDNN_HOOKS_H
#define SDNN_HOOKS_H

#include "exchange.h"
#include "scalednn.h"
#include "timeline.h"
#include <darknet.h>

typedef struct sdnn_hook_ctx {
    sdnn_exchange *ex;   /* NULL: stock mode, only the timeline is recorded */
    sdnn_timeline *tl;   /* NULL: no timeline */
    int replica;
    int iteration;       /* the step's iteration, for the timeline */
    network *net;
    int cursor;          /* next layer index update_network will reach */
    double *prof;        /* NULL, or [3 * layers]: seconds of each layer's forward,
                          * backward and update (Darknet's own functions only),
                          * accumulated for the planner (bucket_mb=auto) */
} sdnn_hook_ctx;

/* Wrap the backward pointer of every layer, the update pointer of every
 * layer with parameters and, when `forward` is set, the forward pointer of
 * every layer. */
sdnn_status sdnn_hooks_install(network *net, int forward);
/* Put Darknet's own pointers back. */
void sdnn_hooks_uninstall(network *net);

/* Context of the calling thread (NULL to clear). */
void sdnn_hooks_set_context(sdnn_hook_ctx *ctx);

#endif
