/*
 * boxref: the box arithmetic the double-precision head references share
 * (yolo_ref.c, region_ref.c): Darknet's centre/size boxes, its logistic
 * and its box_iou, in double.
 */
#ifndef SDNN_BOXREF_H
#define SDNN_BOXREF_H

#include <math.h>

typedef struct sdnn_dbox { double x, y, w, h; } sdnn_dbox;

static inline double sdnn_dlogistic(double z) { return 1.0 / (1.0 + exp(-z)); }

/* The length of the overlap of two segments given by centre and width
 * (negative when they are apart). */
static inline double sdnn_dseg_overlap(double c1, double w1, double c2, double w2)
{
    return fmin(c1 + w1 / 2, c2 + w2 / 2) - fmax(c1 - w1 / 2, c2 - w2 / 2);
}

/* Intersection over union as Darknet's box_iou: 0 when they do not overlap. */
static inline double sdnn_dbox_iou(sdnn_dbox a, sdnn_dbox b)
{
    double ow = sdnn_dseg_overlap(a.x, a.w, b.x, b.w), oh = sdnn_dseg_overlap(a.y, a.h, b.y, b.h);
    double inter = (ow < 0 || oh < 0) ? 0 : ow * oh;
    double uni = a.w * a.h + b.w * b.h - inter;
    return uni > 0 ? inter / uni : 0;
}

#endif
