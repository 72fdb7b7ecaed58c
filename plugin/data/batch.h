/*
 * batch: the project's own detection batch builder, used for a
 * cfg whose last [yolo] has the maintained fork's `resize` != 1, or whose
 * [net] has mosaic=1, letter_box=1 or flip=0; every other cfg keeps
 * libdarknet's load_data (loader.c).
 *
 * It follows the fork's training loader (load_data_detection with its
 * mosaic and letter_box; without mixup, blur or noise: those keys are
 * refused by cfgcheck) per image:
 *   - the crop: each side moves by a jitter term uniform in +-jitter x the
 *     image's side, plus a resize term: with resize R >= 1 uniform between
 *     side x (1 - R)/2 (< 0: the crop grows) and side x (1 - 1/R)/2 (> 0:
 *     it shrinks); with R < 1 between side x (1 - 1/R)/2 and 0.  Left and
 *     top share one resize draw, right and bottom another (so the crop
 *     keeps its aspect up to the jitter); each term is truncated to whole
 *     pixels as the fork does;
 *   - letter_box=1: after those terms, the crop grows on two opposite
 *     sides (by the same amount) to the input's aspect, so the image is
 *     resized with its aspect kept and padded with its mean colour; the
 *     jitter and resize terms still apply, to the image's own sides;
 *   - the pixels: the crop (outside the image: the image's mean colour),
 *     resized bilinearly to the network's size (OpenCV's INTER_LINEAR
 *     convention: pixel centres at +0.5), flipped with probability 1/2
 *     (never with flip=0),
 *     then HSV: saturation and value scaled by rand_scale(saturation) and
 *     rand_scale(exposure) (uniform in [1, s], inverted with probability
 *     1/2) and clipped at 1, hue shifted by 179/180 x uniform(-hue, hue)
 *     of a turn (wrapping);
 *   - the truth: the label file's boxes (clamped to [0, 1] as the fork
 *     reads them) in random order, mapped into the crop, flipped, clipped
 *     to the image, the first num_boxes kept and then those narrower than
 *     1/w or lower than 1/h of the input dropped (the fork's order).
 * The fork works on 8-bit pixels (OpenCV); this works on libdarknet's
 * float image (load_image_color), so pixels differ by the fork's rounding
 * to 1/255 and its 8-bit hue arithmetic; the random numbers, the crop and
 * the boxes are the fork's.
 *
 * Every random number comes from splitmix64 streams derived from (seed,
 * batch index): a batch is a pure function of the two, whatever the
 * threads.  The output is shaped like libdarknet's load_data_detection:
 * X rows of w*h*3 floats (CHW, RGB in [0,1]), y rows of num_boxes x 5
 * floats (x, y, w, h, class), rows freed by free_data.
 */
#ifndef SDNN_BATCH_H
#define SDNN_BATCH_H

#include "scalednn.h"
#include <darknet.h>
#include <stdint.h>

typedef struct sdnn_batch_opts {
    char **paths;       /* the train list (m paths) */
    int m;
    int n;              /* images per batch */
    int w, h;           /* the network's input */
    int num_boxes;      /* truths per image (the [yolo] layer's max) */
    float jitter, resize, hue, saturation, exposure;
    int flip;           /* 1: the random horizontal flip ([net] flip) */
    int mosaic;         /* 1: the fork's 4-image mosaic ([net] mosaic) */
    int mosaic_bound;   /* 1: a mosaic's boxes clipped at the cut ([net] mosaic_bound) */
    int letter_box;     /* 1: the aspect kept, padded ([net] letter_box) */
    uint64_t seed;
    int threads;        /* images decoded at once (>= 1) */
} sdnn_batch_opts;

/* One image's random numbers. */
typedef struct sdnn_batch_draw {
    float resize_r1, resize_r2; /* [0,1): left/top and right/bottom */
    float r1, r2, r3, r4;       /* [0,1): the jitter of left, right, top, bottom */
    int flip;
    float dhue, dsat, dexp;
} sdnn_batch_draw;

/* The crop of an ow x oh image, in its pixels: sides moved inwards by
 * pleft, pright, ptop, pbot (negative: outwards). */
typedef struct sdnn_crop {
    int pleft, pright, ptop, pbot;
    int swidth, sheight; /* ow - pleft - pright, oh - ptop - pbot; >= 1 */
} sdnn_crop;

/* A label file's box as the fork reads it (clamped to [0, 1]). */
typedef struct sdnn_label_box {
    int id;
    float x, y, w, h;
} sdnn_label_box;

/* The draws for one image from the stream *s, in the fork's order. */
void sdnn_batch_draws(uint64_t *s, const sdnn_batch_opts *o, sdnn_batch_draw *d);

/* The fork's crop for draws d. */
sdnn_crop sdnn_batch_crop(int ow, int oh, float jitter, float resize, const sdnn_batch_draw *d);

/* The image part: src (any size, 3 channels) through crop c, flip and the
 * HSV factors into out (w*h*3 floats, CHW). */
void sdnn_batch_pixels(image src, sdnn_crop c, int flip, float dhue, float dsat, float dexp,
                       int w, int h, float *out);

/* The truth part: boxes[0..count) (already in the order to keep) through
 * crop c of an ow x oh image and flip into truth (num_boxes x 5 floats,
 * zeros after the last); returns how many were written. */
int sdnn_batch_truth(const sdnn_label_box *boxes, int count, int ow, int oh, sdnn_crop c,
                     int flip, int w, int h, int num_boxes, float *truth);

/* letter_box: crop c of an ow x oh image padded (top and bottom, or left
 * and right, by the same amount) to the aspect of the w x h input, as the
 * fork does after the jitter and resize terms; swidth/sheight updated. */
void sdnn_batch_letter_box(sdnn_crop *c, int ow, int oh, int w, int h);

/* ---- mosaic ------------------------------------------------------------------------
 * The fork's mosaic (load_data_detection with mixup = 3): each output
 * image is, with probability 1/2, four images.  A cut point (cut_x,
 * cut_y), each uniform over the whole pixels [0.2 x side, 0.8 x side]
 * (the fork's rand_int, both ends included), splits the input; quarter q
 * (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) is cut out of
 * its own fully augmented image (own draws, crop, flip, HSV), from the
 * corner opposite to where it goes, past the mean-colour padding the crop
 * added there (the shifts).  With probability 1/2 per quarter the crop's
 * slack is first moved all to the side away from the cut (`corner`), so
 * most of the image shows.  Boxes: each quarter's, shifted with its
 * pixels, appended in quarter order to num_boxes; clipped at the cut with
 * mosaic_bound=1, else only at the input's border (the fork's: a box may
 * then reach over the cut into a neighbour's pixels). */
typedef struct sdnn_mosaic_shift {
    int left, right, top, bot; /* input pixels of padding skipped on each side */
} sdnn_mosaic_shift;

/* The corner move of quarter q on crop c (flip: the quarter's flip). */
void sdnn_batch_mosaic_corner(sdnn_crop *c, int flip, int q);

/* The shifts of a quarter whose crop is c (before the flip; flip swaps
 * left and right as the image was flipped) on an ow x oh image. */
sdnn_mosaic_shift sdnn_batch_mosaic_shift(sdnn_crop c, int flip, int ow, int oh, int w, int h,
                                          int cut_x, int cut_y);

/* Quarter q of the w x h output `out` (CHW) from the quarter's augmented
 * image `ai` (w x h, CHW). */
void sdnn_batch_mosaic_pixels(const float *ai, int w, int h, int cut_x, int cut_y, int q,
                              sdnn_mosaic_shift s, float *out);

/* Append quarter q's boxes (qtruth, as sdnn_batch_truth wrote them, zeros
 * after the last) to truth, which holds `count` boxes; returns the new
 * count (at most num_boxes). */
int sdnn_batch_mosaic_truth(float *truth, int count, const float *qtruth, int w, int h,
                            int cut_x, int cut_y, int q, sdnn_mosaic_shift s, int bound,
                            int num_boxes);

/* The [net] augmentation keys of a cfg (already checked by cfgcheck), as
 * the fork reads them: mosaic, mosaic_bound, letter_box (default 0) and
 * flip (default 1). */
typedef struct sdnn_batch_net_keys {
    int mosaic, mosaic_bound, letter_box, flip;
} sdnn_batch_net_keys;
sdnn_status sdnn_batch_read_net_keys(const char *cfg, sdnn_batch_net_keys *k);

/* The boxes of the label file of image `path` (libdarknet's path rule:
 * images/JPEGImages/raw -> labels, .jpg/.png/.JPG/.JPEG -> .txt); *boxes
 * is malloc'd (NULL when count is 0). */
sdnn_status sdnn_batch_read_labels(const char *path, sdnn_label_box **boxes, int *count);

/* Batch `index` of the run: *out is allocated here (free_data). */
sdnn_status sdnn_batch_build(const sdnn_batch_opts *o, uint64_t index, data *out);

#endif
