/*
 * conv_dnnl: Darknet's convolutional layer on oneDNN (cpu_conv=onednn, and
 * cpu_conv=auto, the default, in a build with oneDNN).
 *
 * The cpu engine runs libdarknet's layers; with cpu_conv=onednn the hooks
 * (hooks.c) call these functions in place of forward_convolutional_layer
 * and backward_convolutional_layer on the layers sdnn_conv_dnnl_eligible
 * names.  Everything the rest of the project sees stays Darknet's: the
 * weights and their updates in Darknet's layout (oihw, goihw with groups),
 * l.output and l.delta in NCHW, the same accumulate semantics (the weight
 * gradient and the input gradient are ADDED into l.weight_updates and
 * net.delta), and batch norm, bias and activation with Darknet's formulas
 * (not oneDNN's fused batch norm, which divides the variance by N where
 * Darknet's forward divides by N-1): fastlayers.c's fused loops, one
 * channel at a time, around the convolution.
 *
 * Each layer of a network gets a state, keyed by its weights pointer (the
 * one pointer each copy of the layer struct Darknet passes around shares):
 * the forward, backward-data and backward-weights primitives, the reorders
 * between Darknet's plain formats and the ones oneDNN picks for speed, made
 * once per shape and rebuilt when the shape changes (resize_network); the
 * buffers they need only while they run come from one arena per thread.  Each replica trains its own network in its own
 * thread, so a state is only ever used by one thread at a time.
 *
 * Threads: Debian's libdnnl runs on OpenMP (DNNL_CPU_RUNTIME_OMP, libgomp).
 * Each call bounds the calling thread's OpenMP team to the number of
 * threads OpenBLAS has (sdnn_blas_get_threads: the trainer gives each of
 * several replicas one thread, a single replica the process's cores), so
 * replicas x threads never oversubscribe the cores.
 *
 * Without oneDNN (the build did not find libdnnl-dev) every function here
 * says so: sdnn_conv_dnnl_built() is 0 and attaching fails with the reason.
 */
#ifndef SDNN_CONV_DNNL_H
#define SDNN_CONV_DNNL_H

#include "scalednn.h"
#include <darknet.h>

/* 1 when this build has oneDNN (SDNN_ONEDNN). */
int sdnn_conv_dnnl_built(void);
/* "oneDNN 2.6.3 (OpenMP)" or "not built (no libdnnl-dev)". */
const char *sdnn_conv_dnnl_name(void);

/* 1 when layer i of `net` can run on oneDNN: a convolution whose forward
 * and backward are still libdarknet's own (not xnor/binary, not a layer
 * the dialect wrapped for mish/swish). */
int sdnn_conv_dnnl_eligible(const network *net, int i);

/* The start banner's account of the convolutions of `net` (a replica the
 * cpu engine has made, its states attached): `setting` is cpu_conv's value,
 * `onednn` what it resolved to (sdnn_config_cpu_conv_onednn).  Without
 * oneDNN one line: libdarknet's on every convolutional layer, and for
 * auto that the build has no oneDNN.  With it: how many run on oneDNN, then
 * one line per reason naming the layers that stay on libdarknet's, e.g.
 *   cpu_conv=auto: 12 of 13 convolutional layers on oneDNN 2.6.3 ..., 1 on libdarknet's:
 *     layer 7 conv mish: oneDNN has no mish here (...)
 * Each line starts with `prefix` and ends in '\n'; cut short with "...". */
void sdnn_conv_dnnl_describe(const network *net, const char *setting, int onednn,
                             const char *prefix, char *buf, size_t len);

/* Make the state of every eligible layer of `net` at its present shape
 * (primitives created now, so an unsupported layer fails here, not in the
 * middle of a step); *count gets how many.  An error leaves nothing
 * attached. */
sdnn_status sdnn_conv_dnnl_attach(network *net, int *count);
/* Free the states of `net`'s layers. */
void sdnn_conv_dnnl_detach(network *net);
/* 1 when layer l (a copy of a network's layer) has a state. */
int sdnn_conv_dnnl_owns(const layer *l);

/* Make l's primitives match its present shape (rebuilt after a resize);
 * SDNN_OK when the layer can run on oneDNN now.  On an error nothing has
 * changed and the caller runs Darknet's own function instead. */
sdnn_status sdnn_conv_dnnl_ready(const layer *l);

/* Darknet's forward/backward of a convolutional layer, the convolution on
 * oneDNN (see the top of this file); call after sdnn_conv_dnnl_ready.  An
 * error here (a primitive failed to run) leaves the layer's buffers
 * undefined: the step must stop. */
sdnn_status sdnn_conv_dnnl_forward(layer l, network net);
sdnn_status sdnn_conv_dnnl_backward(layer l, network net);
/* The same with bn_exact 1: a batch-normalised layer's backward is the
 * exact derivative of its forward (fix_bn_delta=1, bnfix.h), fused with
 * the activation gradient (fastlayers.h); 0 is libdarknet's batch-norm
 * backward, as sdnn_conv_dnnl_backward. */
sdnn_status sdnn_conv_dnnl_backward_ex(layer l, network net, int bn_exact);

#endif
