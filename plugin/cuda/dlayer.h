/*
 * dlayer: host-side helpers of the device layers that every implementation
 * of dev.h's layers shares (dlayer.c; the layers of layers.cu, which run
 * on a GPU or, under GPU=sim, on the simulated executor).  Only dev.h
 * calls, no kernels.
 */
#ifndef SDNN_CUDA_DLAYER_H
#define SDNN_CUDA_DLAYER_H

#include "dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sum of n device floats, as Darknet's sum_array (a float sum in index
 * order): the values come to the host on the compute stream, which this
 * waits for. */
sdnn_status sdnn_dl_host_sum(sdnn_dctx *c, const float *d, size_t n, float *sum);
/* SDNN_ERR_UNSUPPORTED naming l when its input or output times the batch
 * exceeds INT_MAX (or a size is negative): the device kernels hand element
 * indices to ops.h's int index maps, as libdarknet sizes with int.  Every
 * sdnn_dl_setup checks it first. */
sdnn_status sdnn_dl_check_size(const sdnn_dlayer *l);
/* Free the buffers sdnn_dl_setup allocated in l (output and delta unless
 * a dropout aliases its input's; the batch-norm, dropout, loss and maxpool
 * buffers) and clear the pointers; l->impl is the implementation's. */
void sdnn_dl_release_buffers(sdnn_dlayer *l);
/* 1 when l's activation needs its input kept for the gradient (mish,
 * swish: sdnn_dl_setup allocates act_x, outputs x batch floats). */
int sdnn_dl_act_keeps_x(const sdnn_dlayer *l);
/* The activation of l's output in place (keeping its input in act_x
 * first where the gradient needs it) and, backward, delta times the
 * gradient (at the output, or at act_x); both on the compute stream. */
sdnn_status sdnn_dl_activate(sdnn_dctx *c, sdnn_dlayer *l);
sdnn_status sdnn_dl_act_backward(sdnn_dctx *c, sdnn_dlayer *l);

#ifdef __cplusplus
}
#endif
#endif
