/*
 * evaluate: `detector map` (mean average precision over the valid list) and
 * `classifier valid` (top-1 / top-k accuracy), and the evaluations behind
 * them as functions a training loop can call on a network it already holds.
 */
#ifndef SDNN_EVALUATE_H
#define SDNN_EVALUATE_H

#include <darknet.h>
#include <stddef.h>

#include "evalmap.h"
#include "scalednn.h"

/* ./darknet detector map DATA CFG WEIGHTS [-iou_thresh 0.5] [-points 0|11|101] [-thresh 0.25] ...
 * argv[0] == "map"; returns the exit code. */
int sdnn_cmd_detector_map(int argc, char **argv);

/* ./darknet classifier valid DATA CFG WEIGHTS; argv[0] == "valid". */
int sdnn_cmd_classifier_valid(int argc, char **argv);

typedef struct sdnn_map_eval_opts {
    float iou;    /* a detection matches a truth at IoU >= iou, (0, 1] */
    float thresh; /* a (box, class) with probability > thresh is a detection, [0, 1) */
    float nms;    /* do_nms_sort threshold, (0, 1] */
    int letter_box; /* 1: letterboxed input (aspect kept), 0: stretched (sdnn_detector_input) */
} sdnn_map_eval_opts;

/* The defaults of detector map (stretched, as the fork); training's -map
 * sets letter_box from [net] letter_box / -letter_box (train.c). */
#define SDNN_MAP_EVAL_OPTS_INIT { .iou = 0.5f, .thresh = 0.005f, .nms = 0.45f, .letter_box = 0 }

/* The network's input made of an image: letter_box 0 stretches it to the
 * network's size (resize_image, the fork's default), 1 letterboxes it
 * (the aspect ratio kept, the rest grey: the fork's -letter_box, Debian
 * darknet's only way).  The caller frees it. */
image sdnn_detector_input(const network *net, image im, int letter_box);

/* get_network_boxes after network_predict on sdnn_detector_input(net, im,
 * letter_box): boxes relative to im (0..1) either way (a letterboxed box
 * is mapped back out of the bars, a stretched one is already relative to
 * the image).  Caller frees with free_detections. */
detection *sdnn_detector_boxes(network *net, image im, int letter_box, float thresh, float hier,
                               int *nboxes);

/* The fork's line beside the mAP: the detections with probability > conf
 * (its -thresh, 0.25) matched to the truths as for AP (same IoU, one
 * detection per truth, by class). */
typedef struct sdnn_map_pr {
    float conf;
    int tp, fp, fn;
    double precision, recall, f1; /* 0 where undefined (no detections / no truths) */
} sdnn_map_pr;

/* sdnn_detector_map_eval, and the precision and recall at pr->conf (set by
 * the caller) into *pr. */
sdnn_status sdnn_detector_map_eval_pr(network *net, char **paths, int n,
                                      const sdnn_map_eval_opts *opts, sdnn_ap *per_class,
                                      sdnn_map_result *result, sdnn_map_pr *pr);

/* Every parameter and running statistic of net is finite; otherwise
 * SDNN_ERR_NONFINITE naming `weights`, the layer (index and type), the
 * tensor and the element (what training says of such weights). */
sdnn_status sdnn_check_net_finite(const network *net, const char *weights);

/* The map at the fork's -points: 0 all-point, 11, 101. */
double sdnn_map_at_points(const sdnn_map_result *r, int points);

/* The class names of a data file's names=/labels= (key) file, one a line,
 * as an array (*out: the list, for free_ptrs/free_list).  NULL after a
 * message naming the file and line(s) for: an unreadable file, an empty
 * (or blank) line, a name given twice.  file_prefix: NULL, or the prefix
 * of the per-class result files the names make (valid's PREFIXNAME.txt):
 * then a name with '/' or one making a file name over 255 bytes is refused
 * too, before anything is written. */
char **sdnn_read_class_names(const char *datacfg, const char *key, const char *file,
                             const char *file_prefix, list **out);

/* Classes of the network's detection layers ([yolo], [region], [detection]);
 * -1 when it has none or they disagree. */
int sdnn_detector_classes(const network *net);

/* mAP of `net` over the images paths[0..n) with their Darknet label files
 * (sdnn_label_path).  Every image and label file is checked and read first
 * (nothing calls exit: a missing or malformed file is SDNN_ERR_IO /
 * SDNN_ERR_INVALID naming it), then each image is made the network's input
 * (opts->letter_box: letterboxed or stretched) and run with batch 1.  The network is not freed; its batch
 * size is restored before returning, so a training replica can be passed
 * between steps (not while a step runs on it).  per_class: NULL or
 * sdnn_detector_classes(net) entries. */
sdnn_status sdnn_detector_map_eval(network *net, char **paths, int n,
                                   const sdnn_map_eval_opts *opts, sdnn_ap *per_class,
                                   sdnn_map_result *result);

typedef struct sdnn_cls_result {
    int images;
    int k;       /* the k of top-k */
    double top1; /* fraction of images whose label scored highest */
    double topk; /* fraction whose label is among the k highest */
} sdnn_cls_result;

/* Top-1 and top-k accuracy of `net` over paths[0..n); the label of an image
 * is sdnn_label_of_path(path, labels, classes).  The image is resized so
 * its shorter side is the network's width and the centre is cropped, as
 * Darknet's classifier validation does.  A class ranks by its score; equal
 * scores rank by class index.  class_total / class_top1: NULL or `classes`
 * ints, images and top-1 hits per class.  Batch size restored as above. */
sdnn_status sdnn_classifier_eval(network *net, char **paths, int n, char **labels, int classes,
                                 int k, int *class_total, int *class_top1,
                                 sdnn_cls_result *result);

/* Darknet's classifier convention: the label whose name appears in the
 * path.  When several do, the occurrence ending last in the path wins,
 * then the longer name ("t-shirt" over "shirt"), then the lower index.
 * -1 when none appears (empty names never match). */
int sdnn_label_of_path(const char *path, char *const *labels, int n);

/* Darknet's label file of a detection image: the first "images",
 * "JPEGImages" and "raw" become "labels", the first ".jpg", ".png",
 * ".JPG", ".JPEG" becomes ".txt".  0, or -1 when out is too small. */
int sdnn_label_path(const char *img, char *out, size_t len);

/* "png", "jpeg", "bmp" or "pnm" by the file's first bytes; NULL for
 * anything else or an unreadable file (Darknet's image loader exits on
 * what it cannot decode). */
const char *sdnn_image_kind(const char *path);

#endif
