/* yolo_dialect: see yolo_dialect.h.  The arithmetic follows the fork's
 * CPU build (yolo_layer.cpp, box.cpp at the commit named in
 * bench/RESULTS.md), written here in C; a truth is libdarknet's
 * (x, y, w, h, class), l.truths floats per image. */
#include "yolo_dialect.h"
#include "act_ops.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sdnn_yolo_opts_init(sdnn_yolo_opts *o)
{
    *o = (sdnn_yolo_opts){.scale_x_y = 1,
                          .iou_loss = SDNN_MSE,
                          .iou_thresh_kind = SDNN_IOU,
                          .iou_normalizer = 0.75f,
                          .cls_normalizer = 1,
                          .obj_normalizer = 1,
                          .max_delta = FLT_MAX,
                          .iou_thresh = 1,
                          .label_smooth_eps = 0,
                          .new_coords = 0,
                          .objectness_smooth = 0,
                          .nms_kind = SDNN_NMS_DEFAULT,
                          .beta_nms = 0.6f,
                          .resize = 1};
}

static int iou_kind(const char *v, sdnn_iou_kind *k)
{
    static const char *const names[] = {"iou", "giou", "mse", "diou", "ciou"};
    for (int i = 0; i < 5; ++i)
        if (strcmp(v, names[i]) == 0) {
            *k = (sdnn_iou_kind)i;
            return 1;
        }
    return 0;
}

int sdnn_yolo_opts_set(sdnn_yolo_opts *o, const char *line)
{
    const char *eq = strchr(line, '=');
    if (!eq) return 0;
    char key[40];
    size_t n = (size_t)(eq - line);
    if (n >= sizeof key) return 0;
    memcpy(key, line, n);
    key[n] = '\0';
    const char *v = eq + 1;
    char *end;
    float f = strtof(v, &end);
    int num = end != v && *end == '\0';
    struct {
        const char *key;
        float *dst;
    } floats[] = {{"scale_x_y", &o->scale_x_y},       {"iou_normalizer", &o->iou_normalizer},
                  {"cls_normalizer", &o->cls_normalizer}, {"obj_normalizer", &o->obj_normalizer},
                  {"max_delta", &o->max_delta},       {"iou_thresh", &o->iou_thresh},
                  {"label_smooth_eps", &o->label_smooth_eps}, {"beta_nms", &o->beta_nms},
                  {"resize", &o->resize}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; ++i)
        if (strcmp(key, floats[i].key) == 0) {
            if (num) *floats[i].dst = f;
            return 1;
        }
    if (strcmp(key, "new_coords") == 0 || strcmp(key, "objectness_smooth") == 0) {
        if (num) *(key[0] == 'n' ? &o->new_coords : &o->objectness_smooth) = (int)f;
        return 1;
    }
    if (strcmp(key, "iou_loss") == 0) {
        iou_kind(v, &o->iou_loss);
        return 1;
    }
    if (strcmp(key, "iou_thresh_kind") == 0) {
        iou_kind(v, &o->iou_thresh_kind);
        return 1;
    }
    if (strcmp(key, "nms_kind") == 0) {
        o->nms_kind = strcmp(v, "greedynms") == 0 ? SDNN_NMS_GREEDY
                      : strcmp(v, "diounms") == 0 ? SDNN_NMS_DIOU
                                                  : SDNN_NMS_DEFAULT;
        return 1;
    }
    return 0;
}

/* ---- the loss --------------------------------------------------------------- */

static int entry(const layer *l, int b, int location, int e)
{
    int n = location / (l->w * l->h), loc = location % (l->w * l->h);
    return b * l->outputs + n * l->w * l->h * (4 + l->classes + 1) + e * l->w * l->h + loc;
}

static sdnn_box get_box(const float *x, const float *biases, int n, int index, int i, int j,
                        int lw, int lh, int w, int h, int stride, int new_coords)
{
    sdnn_box b;
    b.x = (i + x[index + 0 * stride]) / lw;
    b.y = (j + x[index + 1 * stride]) / lh;
    b.w = sdnn_yolo_wh(x[index + 2 * stride], biases[2 * n], w, new_coords);
    b.h = sdnn_yolo_wh(x[index + 3 * stride], biases[2 * n + 1], h, new_coords);
    return b;
}

static float finite_or_zero(float v) { return isnan(v) || isinf(v) ? 0.0f : v; }

static float clip(float v, float m) { return v > m ? m : v < -m ? -m : v; }

typedef struct box_ious {
    float iou, giou;
} box_ious;

/* The fork's delta_yolo_box (accumulating). */
static box_ious delta_box(sdnn_box truth, const float *x, const float *biases, int n, int index,
                          int i, int j, int lw, int lh, int w, int h, float *delta, float scale,
                          int stride, const sdnn_yolo_opts *o)
{
    sdnn_box pred = get_box(x, biases, n, index, i, j, lw, lh, w, h, stride, o->new_coords);
    box_ious r = {sdnn_box_iou(pred, truth), sdnn_box_giou(pred, truth)};
    if (pred.w == 0) pred.w = 1.0f;
    if (pred.h == 0) pred.h = 1.0f;
    if (o->iou_loss == SDNN_MSE) {
        float tx = truth.x * lw - i, ty = truth.y * lh - j;
        float tw = sdnn_yolo_wh_target(truth.w, biases[2 * n], w, o->new_coords);
        float th = sdnn_yolo_wh_target(truth.h, biases[2 * n + 1], h, o->new_coords);
        delta[index + 0 * stride] += scale * (tx - x[index + 0 * stride]) * o->iou_normalizer;
        delta[index + 1 * stride] += scale * (ty - x[index + 1 * stride]) * o->iou_normalizer;
        delta[index + 2 * stride] += scale * (tw - x[index + 2 * stride]) * o->iou_normalizer;
        delta[index + 3 * stride] += scale * (th - x[index + 3 * stride]) * o->iou_normalizer;
        return r;
    }
    float d[4];
    sdnn_box_iou_delta(pred, truth, o->iou_loss, d);
    d[2] *= sdnn_yolo_wh_chain(x[index + 2 * stride], o->new_coords);
    d[3] *= sdnn_yolo_wh_chain(x[index + 3 * stride], o->new_coords);
    for (int k = 0; k < 4; ++k) {
        d[k] = finite_or_zero(d[k] * o->iou_normalizer);
        if (o->max_delta != FLT_MAX) d[k] = clip(d[k], o->max_delta);
        delta[index + k * stride] += d[k];
    }
    return r;
}

/* The fork's delta_yolo_class (no focal loss, no class multipliers). */
static void delta_class(const float *out, float *delta, int index, int cls, int classes,
                        int stride, float eps, float *avg_cat)
{
    if (delta[index + stride * cls]) {
        float y = 1;
        if (eps) y = y * (1 - eps) + 0.5f * eps;
        float r = y - out[index + stride * cls];
        if (!isnan(r) && !isinf(r)) delta[index + stride * cls] = r;
        if (avg_cat) *avg_cat += out[index + stride * cls];
        return;
    }
    for (int n = 0; n < classes; ++n) {
        float y = n == cls ? 1.0f : 0.0f;
        if (eps) y = y * (1 - eps) + 0.5f * eps;
        float r = y - out[index + stride * n];
        if (!isnan(r) && !isinf(r)) delta[index + stride * n] = r;
        if (n == cls && avg_cat) *avg_cat += out[index + stride * n];
    }
}

static int any_class_above(const float *out, int classes, int index, int stride, float thresh)
{
    for (int j = 0; j < classes; ++j)
        if (out[index + stride * j] > thresh) return 1;
    return 0;
}

typedef struct stats {
    float tot_iou, tot_iou_loss, tot_giou_loss, avg_cat, avg_obj, recall, recall75;
    int count, class_count;
} stats;

static sdnn_box truth_at(const float *t)
{
    return (sdnn_box){t[0], t[1], t[2], t[3]};
}

static int int_index(const int *a, int v, int n)
{
    for (int i = 0; i < n; ++i)
        if (a[i] == v) return i;
    return -1;
}

/* One truth on anchor n (mask index m): the box, objectness and class deltas. */
static void assign(const layer *l, const network *net, const sdnn_yolo_opts *o, int b, int m,
                   int n, int i, int j, sdnn_box truth, int class_id, stats *s)
{
    const int stride = l->w * l->h;
    int box_index = entry(l, b, m * stride + j * l->w + i, 0);
    box_ious r = delta_box(truth, l->output, l->biases, n, box_index, i, j, l->w, l->h, net->w,
                           net->h, l->delta, 2 - truth.w * truth.h, stride, o);
    s->tot_iou += r.iou;
    s->tot_iou_loss += 1 - r.iou;
    s->tot_giou_loss += 1 - r.giou;
    if (r.iou > .5f) s->recall += 1;
    if (r.iou > .75f) s->recall75 += 1;
    int obj_index = entry(l, b, m * stride + j * l->w + i, 4);
    s->avg_obj += l->output[obj_index];
    if (o->objectness_smooth) {
        float d = o->obj_normalizer * (1 - l->output[obj_index]);
        if (l->delta[obj_index] == 0) l->delta[obj_index] = d;
    } else {
        l->delta[obj_index] = o->obj_normalizer * (1 - l->output[obj_index]);
    }
    int class_index = entry(l, b, m * stride + j * l->w + i, 4 + 1);
    delta_class(l->output, l->delta, class_index, class_id, l->classes, stride,
                o->label_smooth_eps, &s->avg_cat);
    ++s->count;
    ++s->class_count;
}

static void process_image(const layer *l, const network *net, const sdnn_yolo_opts *o, int b,
                          stats *s, float *avg_anyobj)
{
    const int stride = l->w * l->h;
    const float *truths = net->truth + (size_t)b * l->truths;
    /* libdarknet keeps 90 boxes per image (l.truths) whatever `max` says. */
    const int nbox = l->max_boxes < l->truths / 5 ? l->max_boxes : l->truths / 5;
    for (int j = 0; j < l->h; ++j)
        for (int i = 0; i < l->w; ++i)
            for (int n = 0; n < l->n; ++n) {
                int loc = n * stride + j * l->w + i;
                int class_index = entry(l, b, loc, 4 + 1), obj_index = entry(l, b, loc, 4);
                int box_index = entry(l, b, loc, 0);
                sdnn_box pred = get_box(l->output, l->biases, l->mask[n], box_index, i, j, l->w,
                                        l->h, net->w, net->h, stride, o->new_coords);
                float best_match_iou = 0, best_iou = 0;
                int best_t = 0;
                for (int t = 0; t < nbox; ++t) {
                    sdnn_box truth = truth_at(truths + t * 5);
                    if (!truth.x) break;
                    if (isnan(l->output[obj_index]) || isinf(l->output[obj_index]))
                        l->output[obj_index] = 0;
                    int match = any_class_above(l->output, l->classes, class_index, stride, 0.25f);
                    float iou = sdnn_box_iou(pred, truth);
                    if (iou > best_match_iou && match) best_match_iou = iou;
                    if (iou > best_iou) {
                        best_iou = iou;
                        best_t = t;
                    }
                }
                *avg_anyobj += l->output[obj_index];
                l->delta[obj_index] = o->obj_normalizer * (0 - l->output[obj_index]);
                if (best_match_iou > l->ignore_thresh) {
                    if (o->objectness_smooth) {
                        float d = o->obj_normalizer * (best_match_iou - l->output[obj_index]);
                        if (d > l->delta[obj_index]) l->delta[obj_index] = d;
                    } else {
                        l->delta[obj_index] = 0;
                    }
                }
                if (best_iou > l->truth_thresh) {
                    float mult = best_iou * best_iou;
                    l->delta[obj_index] = o->obj_normalizer *
                                          ((o->objectness_smooth ? mult : 1) - l->output[obj_index]);
                    int class_id = (int)truths[best_t * 5 + 4];
                    if (l->map) class_id = l->map[class_id];
                    if (class_id < 0 || class_id >= l->classes) continue;
                    delta_class(l->output, l->delta, class_index, class_id, l->classes, stride,
                                o->label_smooth_eps, NULL);
                    if (o->objectness_smooth)
                        l->delta[class_index + stride * class_id] =
                            mult - l->output[class_index + stride * class_id];
                    sdnn_box truth = truth_at(truths + best_t * 5);
                    delta_box(truth, l->output, l->biases, l->mask[n], box_index, i, j, l->w,
                              l->h, net->w, net->h, l->delta, 2 - truth.w * truth.h, stride, o);
                }
            }

    for (int t = 0; t < nbox; ++t) {
        sdnn_box truth = truth_at(truths + t * 5);
        if (!truth.x) break;
        int class_id = (int)truths[t * 5 + 4];
        if (class_id < 0 || class_id >= l->classes) continue;
        if (l->map) class_id = l->map[class_id];
        if (class_id < 0 || class_id >= l->classes) continue;
        float best_iou = 0;
        int best_n = 0;
        int i = (int)(truth.x * l->w), j = (int)(truth.y * l->h);
        if (i >= l->w) i = l->w - 1;
        if (j >= l->h) j = l->h - 1;
        sdnn_box shift = truth;
        shift.x = shift.y = 0;
        for (int n = 0; n < l->total; ++n) {
            sdnn_box p = {0, 0, l->biases[2 * n] / net->w, l->biases[2 * n + 1] / net->h};
            float iou = sdnn_box_iou(p, shift);
            if (iou > best_iou) {
                best_iou = iou;
                best_n = n;
            }
        }
        int m = int_index(l->mask, best_n, l->n);
        if (m >= 0) assign(l, net, o, b, m, best_n, i, j, truth, class_id, s);
        for (int n = 0; n < l->total; ++n) {
            int mn = int_index(l->mask, n, l->n);
            if (mn < 0 || n == best_n || !(o->iou_thresh < 1.0f)) continue;
            sdnn_box p = {0, 0, l->biases[2 * n] / net->w, l->biases[2 * n + 1] / net->h};
            if (sdnn_box_iou_kind(p, shift, o->iou_thresh_kind) > o->iou_thresh)
                assign(l, net, o, b, mn, n, i, j, truth, class_id, s);
        }
    }

    if (o->iou_thresh < 1.0f) {
        /* A cell that took several truths: its box delta is their mean. */
        for (int j = 0; j < l->h; ++j)
            for (int i = 0; i < l->w; ++i)
                for (int n = 0; n < l->n; ++n) {
                    int loc = n * stride + j * l->w + i;
                    if (l->delta[entry(l, b, loc, 4)] == 0) continue;
                    int ci = entry(l, b, loc, 5), bi = entry(l, b, loc, 0), k = 0;
                    for (int c = 0; c < l->classes; ++c) k += l->delta[ci + stride * c] > 0;
                    if (k > 0)
                        for (int e = 0; e < 4; ++e) l->delta[bi + e * stride] /= k;
                }
    }
}

static float sum_squares(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += (double)x[i] * x[i];
    return (float)s;
}

void sdnn_yolo_forward(layer l, network net, const sdnn_yolo_opts *o)
{
    const int stride = l.w * l.h;
    size_t total = (size_t)l.outputs * l.batch;
    memcpy(l.output, net.input, total * sizeof *l.output);
    for (int b = 0; b < l.batch; ++b)
        for (int n = 0; n < l.n; ++n) {
            float *x = l.output + entry(&l, b, n * stride, 0);
            if (!o->new_coords) {
                for (int k = 0; k < 2 * stride; ++k) x[k] = sdnn_sigmoidf(x[k]);
                float *p = l.output + entry(&l, b, n * stride, 4);
                for (int k = 0; k < (1 + l.classes) * stride; ++k) p[k] = sdnn_sigmoidf(p[k]);
            }
            for (int k = 0; k < 2 * stride; ++k) x[k] = sdnn_yolo_xy(x[k], o->scale_x_y);
        }
    if (net.train && net.truth) {
        memset(l.delta, 0, total * sizeof *l.delta);
        stats s = {0};
        float avg_anyobj = 0;
        for (int b = 0; b < l.batch; ++b) process_image(&l, &net, o, b, &s, &avg_anyobj);
        int count = s.count ? s.count : 1, class_count = s.class_count ? s.class_count : 1;
        float loss = sum_squares(l.delta, total);
        /* The cost: |delta|^2 for mse; else the mean IoU (or GIoU) loss
         * times iou_normalizer plus obj_normalizer |delta without boxes|^2. */
        float box = 0;
        for (int b = 0; b < l.batch; ++b)
            for (int n = 0; n < l.n; ++n) {
                const float *d = l.delta + entry(&l, b, n * stride, 0);
                box += sum_squares(d, 4 * (size_t)stride);
            }
        float cls_loss = o->obj_normalizer * (loss - box);
        if (l.cost) {
            if (o->iou_loss == SDNN_MSE)
                *l.cost = loss;
            else
                *l.cost = o->iou_normalizer *
                              ((o->iou_loss == SDNN_GIOU ? s.tot_giou_loss : s.tot_iou_loss) /
                               count) +
                          cls_loss;
        }
        printf("Region %d Avg IOU: %f, Class: %f, Obj: %f, No Obj: %f, .5R: %f, .75R: %f,  "
               "count: %d\n",
               net.index, s.tot_iou / count, s.avg_cat / class_count, s.avg_obj / count,
               avg_anyobj / (stride * l.n * l.batch), s.recall / count, s.recall75 / count,
               s.count);
    }
    if (o->new_coords)
        for (int b = 0; b < l.batch; ++b)
            for (int n = 0; n < l.n; ++n) {
                float *x = l.output + entry(&l, b, n * stride, 2);
                for (int k = 0; k < 2 * stride; ++k) x[k] = sdnn_yolo_wh_stored(x[k], 1);
            }
}

/* ---- NMS -------------------------------------------------------------------- */

static int by_score(const void *pa, const void *pb)
{
    const detection *a = pa, *b = pb;
    float diff = b->sort_class >= 0 ? a->prob[b->sort_class] - b->prob[b->sort_class]
                                    : a->objectness - b->objectness;
    return diff < 0 ? 1 : diff > 0 ? -1 : 0;
}

void sdnn_yolo_nms(detection *dets, int total, int classes, float thresh, sdnn_nms_kind kind,
                   float beta)
{
    if (kind == SDNN_NMS_DEFAULT) {
        do_nms_sort(dets, total, classes, thresh);
        return;
    }
    int k = total - 1;
    for (int i = 0; i <= k; ++i)
        if (dets[i].objectness == 0) {
            detection t = dets[i];
            dets[i] = dets[k];
            dets[k] = t;
            --k;
            --i;
        }
    total = k + 1;
    for (k = 0; k < classes; ++k) {
        for (int i = 0; i < total; ++i) dets[i].sort_class = k;
        qsort(dets, (size_t)total, sizeof *dets, by_score);
        for (int i = 0; i < total; ++i) {
            if (dets[i].prob[k] == 0) continue;
            sdnn_box a = {dets[i].bbox.x, dets[i].bbox.y, dets[i].bbox.w, dets[i].bbox.h};
            for (int j = i + 1; j < total; ++j) {
                sdnn_box b = {dets[j].bbox.x, dets[j].bbox.y, dets[j].bbox.w, dets[j].bbox.h};
                float ov = kind == SDNN_NMS_GREEDY ? sdnn_box_diou(a, b)
                                                   : sdnn_box_diou_beta(a, b, beta);
                if (ov > thresh) dets[j].prob[k] = 0;
            }
        }
    }
}
