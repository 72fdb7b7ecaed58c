/*
 * hooks: wrappers around each layer's backward and update pointers.
 *
 * Darknet calls l.forward(l, net) and l.backward(l, net) with net.index = i
 * and l.update(l, args) with no index.  The wrappers find the replica
 * through a thread-local context (each replica trains in its own thread),
 * the layer through net.index (forward, backward) or its parameter pointers
 * (update), call the scheduler's callbacks (the engine table's
 * sdnn_engine_callbacks, registered by the exchange), record the timeline,
 * and call Darknet's own function.  Without a context (a thread that is not a replica) they are
 * transparent.  Forward is wrapped only for a timeline or the planner's
 * profile: the scheduler has no use for it.
 *
 * The 1x1 delta fix (fix_1x1_delta=1): Debian's libdarknet
 * computes the input gradient of a size=1 convolution with a gemm whose
 * beta is 0 straight into the previous layer's delta, overwriting what a
 * later [shortcut] or [route] consumer had already added there (size > 1
 * goes through col2im, which adds).  On the layers where that matters -- a
 * 1x1 convolution whose input delta another, later layer also writes -- the
 * wrapper runs Darknet's backward with net.delta pointed at a scratch
 * buffer of the network's own and then adds the scratch into the real
 * delta: one extra pass over that delta.  Every other layer runs exactly as
 * before, so networks without the pattern train bit for bit as they did.
 */
#ifndef SDNN_HOOKS_H
#define SDNN_HOOKS_H

#include "engine.h"
#include "scalednn.h"
#include "timeline.h"
#include <darknet.h>

typedef struct sdnn_hook_ctx {
    /* The scheduler's callbacks (the cpu engine's, set by its bind_thread
     * through sdnn_hooks_bind_callbacks); NULL, or none set: stock mode,
     * only the timeline and the profile are recorded. */
    const sdnn_engine_callbacks *cb;
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
 * every layer.  With fix_1x1_delta, the layers sdnn_fix_1x1_needed names
 * get the fixing wrapper instead (it does everything the plain one does). */
enum { SDNN_FIX_1X1 = 1, SDNN_FIX_BN = 2, SDNN_HOOK_ONEDNN = 4, SDNN_FIX_REGION = 8 };
/* `fixes`: SDNN_FIX_1X1 (fix_1x1_delta) and/or SDNN_FIX_BN (fix_bn_delta:
 * the layers sdnn_bn_fix_applies names get the exact batch-norm backward,
 * bnfix.h), SDNN_HOOK_ONEDNN (cpu_conv=onednn: the convolutions
 * sdnn_conv_dnnl_eligible names run on oneDNN, conv_dnnl.h; their forward
 * is wrapped too, and they need no 1x1 fix since oneDNN's backward adds;
 * their batch norm, bias and activation, and the forward of [maxpool] of
 * size 2, run on fastlayers.h's loops). */
sdnn_status sdnn_hooks_install(network *net, int forward, int fixes);
/* 1 when the hooks are installed on `net`. */
int sdnn_hooks_installed(const network *net);

/* 1 when layer i is a size=1 convolution whose input delta (layer i-1's)
 * is also written by the backward of a layer after i (a shortcut's from=
 * or its own input, a route's input, aliases such as dropout included):
 * the layer whose gradient Darknet's beta-0 gemm would overwrite (not a
 * strided 1x1 layer running conv1x1.h's functions, whose backward adds). */
int sdnn_fix_1x1_needed(const network *net, int i);
/* How many layers of `net` need the fix. */
int sdnn_fix_1x1_count(const network *net);
/* fix_region_delta (SDNN_FIX_REGION): Debian's CPU backward_region_layer is
 * empty (a bare ret), so nothing before a [region] head gets a gradient.
 * The fix runs what Darknet's GPU build runs (and the gpu engine, ops.h's
 * sdnn_region_logistic): the layer's delta times the logistic's derivative
 * o (1 - o) on x, y, the extra coordinates and (without background) the
 * objectness, then added to the input's delta.  The number of [region]
 * layers of `net` (the layers it applies to). */
int sdnn_fix_region_count(const network *net);

/* 1 when layer 0 of `net` writes its input's delta unconditionally and the
 * network has none (net->delta NULL, as libdarknet's training leaves it):
 * [maxpool], [avgpool], [upsample], [reorg], [activation], [batchnorm],
 * [normalization], [l2norm], [logistic], [softmax], [cost], [yolo],
 * [detection], ... -- every type but those that test for it.  libdarknet
 * then writes through NULL at the first backward; the hooks hand such a
 * layer 0 a cleared scratch of the network's and discard what it writes
 * there (the gpu engine, which tests for it, drops it too).  The cpu engine
 * hooks such a network in every mode. */
int sdnn_first_delta_needed(const network *net);

/* Strided 1x1 convolutions (conv1x1.h): a layer that carries conv1x1.h's
 * functions when the hooks are installed keeps running them through its
 * wrappers (on oneDNN where cpu_conv=onednn owns it), without the 1x1
 * delta fix (their backward adds); uninstall gives them back. */

/* Put Darknet's own pointers back. */
void sdnn_hooks_uninstall(network *net);

/* Context of the calling thread (NULL to clear). */
void sdnn_hooks_set_context(sdnn_hook_ctx *ctx);
/* The calling thread's context, or NULL (an engine that times layers
 * itself, the gpu engine, adds to its prof). */
sdnn_hook_ctx *sdnn_hooks_context(void);
/* The callbacks the hooks of the calling thread call (backward_done after
 * a layer's last-subdivision backward, before_update before its update,
 * nonfinite_input, aborted, abort): stored in the thread's context, when
 * it has one.  The cpu engine calls it from bind_thread. */
void sdnn_hooks_bind_callbacks(const sdnn_engine_callbacks *cb);

#endif
