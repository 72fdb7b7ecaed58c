/*
 * evalmap: average precision of a detector, the arithmetic only.
 *
 * The front-end runs the network and reads the label files; this module
 * matches detections to ground truth image by image and turns the ranked
 * matches into per-class AP with both interpolations in use:
 *   - all-point (VOC 2010 and later): the area under the precision envelope
 *     (precision made non-increasing from the right) over recall;
 *   - 11-point (VOC 2007): the mean over r = 0, 0.1, ..., 1 of the highest
 *     precision at recall >= r (0 where recall never reaches r);
 *   - 101-point (COCO): the same over r = 0, 0.01, ..., 1.
 * These are the fork's `detector map -points 0|11|101`.
 * No Darknet dependency, so hand-made cases test it directly.
 */
#ifndef SDNN_EVALMAP_H
#define SDNN_EVALMAP_H

#include "scalednn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A box by its centre and size, in any unit shared by all boxes of an
 * image (Darknet's relative coordinates in practice). */
typedef struct sdnn_rect {
    float x, y, w, h;
} sdnn_rect;

typedef struct sdnn_map_truth {
    int cls;
    sdnn_rect box;
} sdnn_map_truth;

typedef struct sdnn_map_det {
    int cls;
    float score;
    sdnn_rect box;
} sdnn_map_det;

/* One class's result.  ap_all and ap11 are 0 when truths == 0; such a
 * class is left out of the mean. */
typedef struct sdnn_ap {
    int truths;     /* ground-truth boxes of the class over all images */
    int dets;       /* detections of the class */
    int tp;         /* detections matched to a truth */
    double ap_all;  /* all-point interpolated AP */
    double ap11;    /* 11-point interpolated AP */
    double ap101;   /* 101-point interpolated AP (COCO's) */
} sdnn_ap;

typedef struct sdnn_map_result {
    double map_all;     /* mean of ap_all over the classes with truths */
    double map11;       /* mean of ap11 over the same classes */
    double map101;      /* mean of ap101 over the same classes */
    int classes_scored; /* classes with at least one truth */
    int images;         /* images added */
} sdnn_map_result;

/* Opaque accumulator. */
typedef struct sdnn_map sdnn_map;

/* IoU of two boxes (0 when they do not overlap or a box is empty), computed
 * in double so that exact cases stay exact. */
double sdnn_rect_iou(sdnn_rect a, sdnn_rect b);

/* An accumulator for `classes` classes matching at IoU >= iou_thresh
 * (0 < iou_thresh <= 1).  SDNN_ERR_INVALID / SDNN_ERR_NOMEM otherwise. */
sdnn_status sdnn_map_create(int classes, float iou_thresh, sdnn_map **out);
void sdnn_map_destroy(sdnn_map *m);

/* Add one image.  Per class, its detections are taken by score, highest
 * first (equal scores in the order given); each is matched to the not yet
 * matched truth of that class with the highest IoU >= the threshold
 * (the first such truth in the order given on equal IoU) and is a true
 * positive, or else a false positive, so a second detection of a truth
 * already taken is a false positive.  Class ids outside [0, classes) or a
 * non-finite score: SDNN_ERR_INVALID and nothing of the image is added. */
sdnn_status sdnn_map_add_image(sdnn_map *m, const sdnn_map_truth *truths, int ntruths,
                               const sdnn_map_det *dets, int ndets);

/* Per-class AP over everything added so far.  All detections of a class
 * are ranked by score, highest first; equal scores keep the order in which
 * they were added (image order, then the per-image order above).
 * per_class may be NULL, otherwise it holds `classes` entries.  Classes
 * without truths are reported with AP 0 and left out of the means;
 * result->classes_scored == 0 leaves both means at 0. */
sdnn_status sdnn_map_compute(const sdnn_map *m, sdnn_ap *per_class, sdnn_map_result *result);

/* AP of one ranked list: tp[i] != 0 when the i-th detection (highest score
 * first) is a true positive; npos truths in all.  Both interpolations; 0
 * for npos == 0 or n == 0.  SDNN_ERR_INVALID when the list holds more true
 * positives than npos. */
sdnn_status sdnn_ap_ranked(const unsigned char *tp, int n, int npos, double *ap_all,
                           double *ap11);
/* The same with the 101-point AP as well. */
sdnn_status sdnn_ap_ranked3(const unsigned char *tp, int n, int npos, double *ap_all,
                            double *ap11, double *ap101);

#ifdef __cplusplus
}
#endif
#endif
