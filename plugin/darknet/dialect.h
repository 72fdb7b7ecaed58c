/*
 * dialect: the parts of the maintained Darknet fork's cfg dialect that this
 * project builds on top of Debian's libdarknet.
 *
 * Built: activation=mish and activation=swish on [convolutional],
 * [connected] and [shortcut] layers; the grouped route; the fork's [yolo]
 * keys (yolo_dialect.h: scale_x_y, iou_loss, the normalizers, new_coords,
 * iou_thresh, objectness_smooth, max_delta, nms_kind, ...).  sdnn_parse_network() reads the cfg,
 * hands libdarknet the same text with those activations written as linear
 * (so the layer computes the pre-activation into its output and its
 * gradient pass is the identity), then points the layer's forward and
 * backward at wrappers: forward runs Darknet's own function, keeps its
 * output (the activation's input x) and applies the formula of act_ops.h;
 * backward multiplies the delta by the gradient at x, then runs Darknet's
 * own function.  The wrappers are the layer's own pointers, so hooks.c,
 * the trainer, stock mode and gradcheck wrap them like any other.
 */
#ifndef SDNN_DIALECT_H
#define SDNN_DIALECT_H

#include "scalednn.h"
#include "yolo_dialect.h"
#include <darknet.h>

/* parse_network_cfg for every command: the cfg at `path` (already checked
 * by cfgcheck) with the dialect's activations installed.  NULL on failure
 * with the error recorded. */
network *sdnn_parse_network(const char *path);

/* How many layers of `net` run the dialect's forward (before hooks wrap it; 0 for a cfg in
 * Debian's dialect, whose layers are untouched). */
int sdnn_dialect_layers(const network *net);

/* The fork's options of layer i when it is a [yolo] head with the fork's keys, else NULL. */
const sdnn_yolo_opts *sdnn_dialect_yolo(const network *net, int i);

/* NMS as the fork's detector does it: the nms_kind and beta_nms of the
 * network's last layer (libdarknet's do_nms_sort when that layer has no
 * nms_kind).  `detector map` and `detector test` call it instead of
 * do_nms_sort. */
void sdnn_dialect_nms(const network *net, detection *dets, int n, int classes, float thresh);

/* What the dialect made of layer i, for an engine that runs the layers
 * itself (the gpu engine); additive: the table keyed by the
 * layer's address, whatever hooks later wrap its pointers with. */
typedef enum sdnn_dialect_kind {
    SDNN_DIALECT_NONE = 0,   /* libdarknet's layer as it is */
    SDNN_DIALECT_MISH,       /* the layer is `linear` for libdarknet; mish after it */
    SDNN_DIALECT_SWISH,      /* the same with swish */
    SDNN_DIALECT_ROUTE_SLICE,/* a ROUTE of one input: slice `gid` of `src`'s channels */
    SDNN_DIALECT_YOLO        /* the fork's [yolo]: its forward is l.forward (host) */
} sdnn_dialect_kind;

typedef struct sdnn_dialect_layer_info {
    sdnn_dialect_kind kind;
    int src, gid;            /* ROUTE_SLICE */
    const sdnn_yolo_opts *yolo; /* YOLO */
} sdnn_dialect_layer_info;

/* Fill *info for layer i of net (kind NONE for a layer the dialect did not
 * change); returns info->kind. */
sdnn_dialect_kind sdnn_dialect_layer(const network *net, int i, sdnn_dialect_layer_info *info);

/* Layer i's mish/swish gradient applied to `delta` in place; returns
 * libdarknet's own backward of the layer, or NULL (nothing done) when the
 * layer has no dialect activation.  For the batch-norm fix (bnfix.h). */
void (*sdnn_dialect_act_grad(const network *net, int i, float *delta))(layer, network);

/* Drop what the dialect keeps for the layers of `net` (sdnn_network_free
 * calls it before freeing the network). */
void sdnn_dialect_forget(const network *net);

#endif
