/*
 * yolo_dialect: the maintained Darknet fork's [yolo] layer on top of
 * libdarknet's: its keys, its forward and loss (on the host),
 * and its NMS kinds.  dialect.c takes the keys out of the cfg text (so
 * libdarknet builds a plain [yolo] with the mask, anchors, classes and
 * thresholds it knows) and points the layer's forward here; backward stays
 * libdarknet's (the delta added to the input's delta).
 *
 * The forward writes the fork's output (logistic on x, y, objectness and
 * classes unless new_coords; x, y scaled by scale_x_y), computes the
 * fork's deltas and cost when training, and finally stores w, h in the
 * form libdarknet's get_yolo_detections decodes (box_ops.h,
 * sdnn_yolo_wh_stored): `detector map` and `detector test` decode the
 * fork's boxes with libdarknet's code.  Only w, h of a new_coords head
 * differ from the fork's layer output (log(4 v^2) instead of v).
 */
#ifndef SDNN_YOLO_DIALECT_H
#define SDNN_YOLO_DIALECT_H

#include "box_ops.h"
#include <darknet.h>

typedef enum sdnn_nms_kind { SDNN_NMS_DEFAULT = 0, SDNN_NMS_GREEDY, SDNN_NMS_DIOU } sdnn_nms_kind;

/* One [yolo] head's keys beyond libdarknet's; the defaults are the fork's. */
typedef struct sdnn_yolo_opts {
    float scale_x_y;           /* 1 */
    sdnn_iou_kind iou_loss;    /* mse */
    sdnn_iou_kind iou_thresh_kind; /* iou */
    float iou_normalizer;      /* 0.75 */
    float cls_normalizer;      /* 1 (the fork applies it only with counters_per_class) */
    float obj_normalizer;      /* 1 */
    float max_delta;           /* FLT_MAX: no clipping */
    float iou_thresh;          /* 1: no extra anchors */
    float label_smooth_eps;    /* 0 */
    int new_coords;            /* 0 */
    int objectness_smooth;     /* 0 */
    sdnn_nms_kind nms_kind;    /* default */
    float beta_nms;            /* 0.6 */
    float resize;              /* 1: the fork's per-image random resize of the training
                                * images (its loader; plugin/data/batch.h), read from the
                                * last head as the fork does */
} sdnn_yolo_opts;

void sdnn_yolo_opts_init(sdnn_yolo_opts *o);

/* Set one key from a cfg line "key=value" (spaces already removed): 1 when
 * the key is one of the fork's [yolo] keys built here (the value was
 * checked by cfgcheck; an unparsable one keeps the default), 0 when not. */
int sdnn_yolo_opts_set(sdnn_yolo_opts *o, const char *line);

/* The fork's forward_yolo_layer for the CPU build (see the top). */
void sdnn_yolo_forward(layer l, network net, const sdnn_yolo_opts *o);

/* Per-class NMS over `n` detections: libdarknet's do_nms_sort for
 * SDNN_NMS_DEFAULT; otherwise the fork's diounms_sort, suppressing a
 * lower-scored box whose diou (greedynms) or iou - (d/c)^beta (diounms)
 * with a kept box exceeds `thresh`. */
void sdnn_yolo_nms(detection *dets, int n, int classes, float thresh, sdnn_nms_kind kind,
                   float beta);

#endif
