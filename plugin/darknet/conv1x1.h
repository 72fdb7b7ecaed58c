/*
 * conv1x1: the forward and backward of a 1x1 convolution whose output grid
 * is not its input grid (stride > 1, or padding), which Debian's
 * libdarknet computes wrongly (fix_1x1_stride=1, the default).
 *
 * For size=1 libdarknet skips im2col and hands the input itself to gemm
 * as the column matrix, which is right only when the output pixel (y, x)
 * reads the input pixel (y, x): stride 1 and no padding.  With stride s it
 * reads the first out_h x out_w pixels of each channel in memory order
 * instead of every s-th row and column (a wrong forward and backward, exit
 * 0); with padding the column matrix is larger than the input and gemm
 * reads past it.  The functions here gather the input pixels the output
 * reads (zeros where padding) into net.workspace -- which libdarknet sizes
 * for exactly that matrix -- and run the same gemms; the backward scatters
 * the input gradient back to those pixels, adding into net.delta (as
 * col2im does for size > 1, so no 1x1 delta fix is needed after them).
 * Bias, batch norm and activation are libdarknet's own functions, called
 * as its convolution calls them.  Binary and xnor layers are left to
 * libdarknet.
 *
 * sdnn_parse_network points every such layer at these functions, so every
 * path that runs the network (training in either mode, inference, the
 * profiler) computes the right result; the cpu engine puts libdarknet's
 * own back for fix_1x1_stride=0.  The gpu engine has its own convolution,
 * right for every stride, and cpu_conv=onednn's oneDNN convolution is too
 * (hooks.c hands such a layer to oneDNN when it can run it).
 */
#ifndef SDNN_CONV1X1_H
#define SDNN_CONV1X1_H

#include <darknet.h>

/* 1 when `l` is a convolution libdarknet computes on the unstrided input:
 * size 1 with stride != 1 or padding != 0, not binary or xnor. */
int sdnn_conv1x1_strided(const layer *l);

/* The layer functions (Darknet's signatures). */
void sdnn_conv1x1_forward(layer l, network net);
void sdnn_conv1x1_backward(layer l, network net);

/* 1 when `l` carries the two functions above. */
int sdnn_conv1x1_attached(const layer *l);
/* Give layer `l` the functions above when it is sdnn_conv1x1_strided and
 * carries libdarknet's convolution functions (1), else leave it (0). */
int sdnn_conv1x1_attach_layer(layer *l);
/* libdarknet's convolution functions back on `l` when it carries ours. */
void sdnn_conv1x1_release_layer(layer *l);

/* The same over every layer of `net`; each returns how many it changed. */
int sdnn_conv1x1_attach(network *net);
int sdnn_conv1x1_detach(network *net);
/* Layers of `net` that are sdnn_conv1x1_strided. */
int sdnn_conv1x1_count(const network *net);

#endif
