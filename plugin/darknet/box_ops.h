/*
 * box_ops: the per-element box formulas of the maintained Darknet fork's
 * [yolo] layer, written once for the host and the device as
 * act_ops.h is: plain C, math.h only; nvcc sees __host__ __device__.
 *
 * Boxes are centre x, y and width, height, in units of the image (0..1).
 *
 *   iou  = I / U                        (I = 0 when the boxes do not meet)
 *   giou = iou - (C - U) / C            C: area of the enclosing box
 *   diou = iou - (d / c)^0.6            d: squared centre distance,
 *                                       c: squared enclosing diagonal
 *   ciou = iou - (d / c + a v)          v = 4/pi^2 (atan(wt/ht) - atan(w/h))^2,
 *                                       a = v / (1 - iou + v + 1e-6)
 *   diounms(beta) = iou - (d / c)^beta  (the fork's DIoU-NMS overlap)
 *
 * sdnn_box_iou_delta is the fork's box "gradient" (the direction its loss
 * pushes the prediction, added to the layer's delta), with the fork's
 * conventions kept so that training matches it:
 *   - x, y: the derivative of the IoU term (and of -d/c for diou/ciou, of
 *     U/C for giou) with respect to the centre;
 *   - w, h: twice the derivative of the IoU (and giou) term (the fork
 *     takes right - left without halving), plus once the derivative of
 *     -d/c, plus for ciou  -a (w^2 + h^2) dv/dw  (a held constant, the
 *     CIoU paper's dropped 1/(w^2 + h^2));
 *   - the distance term is differentiated as d/c although diou's value
 *     uses (d/c)^0.6, and in the centre's components the enclosing
 *     diagonal's part enters with the opposite sign:
 *     (2 (xt - x) c - d dc/dx) / c^2 where -d/c gives ... + d dc/dx;
 *   - boxes that do not overlap get the penalty term's part alone (with
 *     CIoU's alpha taken from the extents' product Iw Ih, not 0);
 * tests/test_yolo.c checks each of these against central differences of a
 * double-precision reference.
 *
 * The yolo coding (entries t of the layer's input, per anchor):
 *   new_coords=0:  x = (i + s sigmoid(tx) - (s-1)/2) / lw,
 *                  w = exp(tw) anchor_w / net_w
 *   new_coords=1:  the layer applies no logistic (the convolution before it
 *                  does); x = (i + s tx - (s-1)/2) / lw,
 *                  w = 4 tw^2 anchor_w / net_w
 *   s = scale_x_y.
 */
#ifndef SDNN_BOX_OPS_H
#define SDNN_BOX_OPS_H

#include <math.h>

#ifdef __CUDACC__
#define SDNN_BOX_HD static __host__ __device__ __forceinline__
#else
#define SDNN_BOX_HD static inline
#endif

#define SDNN_BOX_PI 3.14159265358979323846

typedef struct sdnn_box {
    float x, y, w, h;
} sdnn_box;

/* The fork's IOU_LOSS names, in its order. */
typedef enum sdnn_iou_kind {
    SDNN_IOU = 0,
    SDNN_GIOU = 1,
    SDNN_MSE = 2,
    SDNN_DIOU = 3,
    SDNN_CIOU = 4
} sdnn_iou_kind;

SDNN_BOX_HD float sdnn_box_overlap(float x1, float w1, float x2, float w2)
{
    float l1 = x1 - w1 / 2, l2 = x2 - w2 / 2;
    float r1 = x1 + w1 / 2, r2 = x2 + w2 / 2;
    float left = l1 > l2 ? l1 : l2, right = r1 < r2 ? r1 : r2;
    return right - left;
}

SDNN_BOX_HD float sdnn_box_intersection(sdnn_box a, sdnn_box b)
{
    float w = sdnn_box_overlap(a.x, a.w, b.x, b.w);
    float h = sdnn_box_overlap(a.y, a.h, b.y, b.h);
    if (w < 0 || h < 0) return 0;
    return w * h;
}

SDNN_BOX_HD float sdnn_box_union(sdnn_box a, sdnn_box b, float inter)
{
    return a.w * a.h + b.w * b.h - inter;
}

SDNN_BOX_HD float sdnn_box_iou(sdnn_box a, sdnn_box b)
{
    float i = sdnn_box_intersection(a, b);
    if (i == 0.0f) return 0.0f;
    return i / sdnn_box_union(a, b, i);
}

/* The smallest box enclosing both: its width and height. */
SDNN_BOX_HD void sdnn_box_enclosing(sdnn_box a, sdnn_box b, float *w, float *h)
{
    float t = fminf(a.y - a.h / 2, b.y - b.h / 2), bo = fmaxf(a.y + a.h / 2, b.y + b.h / 2);
    float l = fminf(a.x - a.w / 2, b.x - b.w / 2), r = fmaxf(a.x + a.w / 2, b.x + b.w / 2);
    *w = r - l;
    *h = bo - t;
}

SDNN_BOX_HD float sdnn_box_giou(sdnn_box a, sdnn_box b)
{
    float w, h;
    sdnn_box_enclosing(a, b, &w, &h);
    float c = w * h, iou = sdnn_box_iou(a, b);
    if (c == 0.0f) return iou;
    float u = sdnn_box_union(a, b, sdnn_box_intersection(a, b));
    return iou - (c - u) / c;
}

/* iou - (d/c)^beta: diou with beta 0.6, the fork's DIoU-NMS with beta_nms. */
SDNN_BOX_HD float sdnn_box_diou_beta(sdnn_box a, sdnn_box b, float beta)
{
    float w, h;
    sdnn_box_enclosing(a, b, &w, &h);
    float c = w * w + h * h, iou = sdnn_box_iou(a, b);
    if (c == 0.0f) return iou;
    float d = (a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y);
    return iou - powf(d / c, beta);
}

SDNN_BOX_HD float sdnn_box_diou(sdnn_box a, sdnn_box b) { return sdnn_box_diou_beta(a, b, 0.6f); }

/* 4/pi^2 (atan(wt/ht) - atan(wp/hp))^2: CIoU's aspect-ratio term. */
SDNN_BOX_HD float sdnn_box_aspect_v(sdnn_box pred, sdnn_box truth)
{
    float da = atanf(truth.w / truth.h) - atanf(pred.w / pred.h);
    return (float)(4.0 / (SDNN_BOX_PI * SDNN_BOX_PI)) * da * da;
}

SDNN_BOX_HD float sdnn_box_ciou(sdnn_box a, sdnn_box b)
{
    float w, h;
    sdnn_box_enclosing(a, b, &w, &h);
    float c = w * w + h * h, iou = sdnn_box_iou(a, b);
    if (c == 0.0f) return iou;
    float d = ((a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y)) / c;
    float v = sdnn_box_aspect_v(a, b);
    float alpha = v / (1 - iou + v + 0.000001f);
    return iou - (d + alpha * v);
}

SDNN_BOX_HD float sdnn_box_iou_kind(sdnn_box a, sdnn_box b, sdnn_iou_kind k)
{
    switch (k) {
    case SDNN_GIOU: return sdnn_box_giou(a, b);
    case SDNN_DIOU: return sdnn_box_diou(a, b);
    case SDNN_CIOU: return sdnn_box_ciou(a, b);
    default: return sdnn_box_iou(a, b);
    }
}

/* The fork's box delta for an IoU-family loss (see the top of the file):
 * out[0..3] = the x, y, w, h components, before the chain through the
 * coding and before the normalizer. */
SDNN_BOX_HD void sdnn_box_iou_delta(sdnn_box pred, sdnn_box truth, sdnn_iou_kind kind,
                                    float out[4])
{
    float pt0 = pred.y - pred.h / 2, pb0 = pred.y + pred.h / 2;
    float pl0 = pred.x - pred.w / 2, pr0 = pred.x + pred.w / 2;
    float pt = fminf(pt0, pb0), pb = fmaxf(pt0, pb0);
    float pl = fminf(pl0, pr0), pr = fmaxf(pl0, pr0);
    float tt = truth.y - truth.h / 2, tb = truth.y + truth.h / 2;
    float tl = truth.x - truth.w / 2, tr = truth.x + truth.w / 2;

    float X = (pb - pt) * (pr - pl);
    float Xhat = (tb - tt) * (tr - tl);
    float Ih = fminf(pb, tb) - fmaxf(pt, tt);
    float Iw = fminf(pr, tr) - fmaxf(pl, tl);
    float I = Iw * Ih;
    float U = X + Xhat - I;
    float S = (pred.x - truth.x) * (pred.x - truth.x) + (pred.y - truth.y) * (pred.y - truth.y);
    float gCw = fmaxf(pr, tr) - fminf(pl, tl);
    float gCh = fmaxf(pb, tb) - fminf(pt, tt);
    float gC = gCw * gCh;

    /* Derivatives of the prediction's area X, the intersection I, the
     * union U and the enclosing area with respect to its edges. */
    float dX_t = -(pr - pl), dX_b = pr - pl, dX_l = -(pb - pt), dX_r = pb - pt;
    float dI_t = pt > tt ? -Iw : 0, dI_b = pb < tb ? Iw : 0;
    float dI_l = pl > tl ? -Ih : 0, dI_r = pr < tr ? Ih : 0;
    float dU_t = dX_t - dI_t, dU_b = dX_b - dI_b, dU_l = dX_l - dI_l, dU_r = dX_r - dI_r;
    float dC_t = pt < tt ? -gCw : 0, dC_b = pb > tb ? gCw : 0;
    float dC_l = pl < tl ? -gCh : 0, dC_r = pr > tr ? gCh : 0;

    float p_t = 0, p_b = 0, p_l = 0, p_r = 0;
    if (U > 0) {
        p_t = (U * dI_t - I * dU_t) / (U * U);
        p_b = (U * dI_b - I * dU_b) / (U * U);
        p_l = (U * dI_l - I * dU_l) / (U * U);
        p_r = (U * dI_r - I * dU_r) / (U * U);
    }
    /* An inverted prediction (negative width or height) swaps its edges. */
    if (!(pt0 < pb0)) p_t = p_b;
    if (!(pt0 < pb0)) p_b = p_t;
    if (!(pl0 < pr0)) p_l = p_r;
    if (!(pl0 < pr0)) p_r = p_l;

    if (kind == SDNN_GIOU) {
        float gt = 0, gb = 0, gl = 0, gr = 0;
        if (gC > 0) {
            gt = (gC * dU_t - U * dC_t) / (gC * gC);
            gb = (gC * dU_b - U * dC_b) / (gC * gC);
            gl = (gC * dU_l - U * dC_l) / (gC * gC);
            gr = (gC * dU_r - U * dC_r) / (gC * gC);
        }
        if (Iw <= 0 || Ih <= 0) {
            p_t = gt;
            p_b = gb;
            p_l = gl;
            p_r = gr;
        } else {
            p_t += gt;
            p_b += gb;
            p_l += gl;
            p_r += gr;
        }
    }

    float p_dx = p_l + p_r, p_dy = p_t + p_b, p_dw = p_r - p_l, p_dh = p_b - p_t;

    if (kind == SDNN_DIOU || kind == SDNN_CIOU) {
        float Ct = fminf(pred.y - pred.h / 2, truth.y - truth.h / 2);
        float Cb = fmaxf(pred.y + pred.h / 2, truth.y + truth.h / 2);
        float Cl = fminf(pred.x - pred.w / 2, truth.x - truth.w / 2);
        float Cr = fmaxf(pred.x + pred.w / 2, truth.x + truth.w / 2);
        float Cw = Cr - Cl, Ch = Cb - Ct, C = Cw * Cw + Ch * Ch;
        /* The enclosing box's width and height move with the prediction
         * only where the prediction's edge is the outer one. */
        float dCw_dx = (pr > tr ? 1.0f : 0.0f) - (pl < tl ? 1.0f : 0.0f);
        float dCw_dw = (pr > tr ? 0.5f : 0.0f) + (pl < tl ? 0.5f : 0.0f);
        float dCh_dy = (pb > tb ? 1.0f : 0.0f) - (pt < tt ? 1.0f : 0.0f);
        float dCh_dh = (pb > tb ? 0.5f : 0.0f) + (pt < tt ? 0.5f : 0.0f);
        float aw = 0, ah = 0;
        if (kind == SDNN_CIOU) {
            float da = atanf(truth.w / truth.h) - atanf(pred.w / pred.h);
            float v = (float)(4.0 / (SDNN_BOX_PI * SDNN_BOX_PI)) * da * da;
            float alpha = v / (1 - I / U + v + 0.000001f);
            aw = alpha * (float)(8.0 / (SDNN_BOX_PI * SDNN_BOX_PI)) * da * pred.h;
            ah = -alpha * (float)(8.0 / (SDNN_BOX_PI * SDNN_BOX_PI)) * da * pred.w;
        }
        float qx = 0, qy = 0, qw = 0, qh = 0;
        if (C > 0) {
            qx = (2 * (truth.x - pred.x) * C - (2 * Cw * dCw_dx) * S) / (C * C);
            qy = (2 * (truth.y - pred.y) * C - (2 * Ch * dCh_dy) * S) / (C * C);
            qw = (2 * Cw * dCw_dw) * S / (C * C);
            qh = (2 * Ch * dCh_dh) * S / (C * C);
        }
        if (Iw <= 0 || Ih <= 0) {
            p_dx = qx;
            p_dy = qy;
            p_dw = qw + aw;
            p_dh = qh + ah;
        } else if (C > 0) {
            p_dx += qx;
            p_dy += qy;
            p_dw += qw + aw;
            p_dh += qh + ah;
        }
    }
    out[0] = p_dx;
    out[1] = p_dy;
    out[2] = p_dw;
    out[3] = p_dh;
}

/* ---- the yolo coding ---------------------------------------------------- */

/* The box centre within its cell from the (activated) entry v. */
SDNN_BOX_HD float sdnn_yolo_xy(float v, float scale_x_y)
{
    return v * scale_x_y + (-0.5f * (scale_x_y - 1));
}

/* The box's width (or height) in image units from the entry v. */
SDNN_BOX_HD float sdnn_yolo_wh(float v, float anchor, int net_size, int new_coords)
{
    return new_coords ? v * v * 4 * anchor / net_size : expf(v) * anchor / net_size;
}

/* The entry that gives width `w` (the inverse of sdnn_yolo_wh; v >= 0 for
 * new_coords): the MSE loss's target. */
SDNN_BOX_HD float sdnn_yolo_wh_target(float w, float anchor, int net_size, int new_coords)
{
    return new_coords ? sqrtf(w * net_size / (4 * anchor)) : logf(w * net_size / anchor);
}

/* The derivative of sdnn_yolo_wh's exponent part that the fork applies to
 * the IoU delta of w, h: e^v for the exponential coding, 1 for
 * new_coords (the fork leaves the square's derivative out). */
SDNN_BOX_HD float sdnn_yolo_wh_chain(float v, int new_coords)
{
    return new_coords ? 1.0f : expf(v);
}

/* The value stored in the layer's output for w, h so that libdarknet's own
 * decoding (exp(out) anchor / net) gives sdnn_yolo_wh: v itself for the
 * exponential coding, log(4 v^2) for new_coords. */
SDNN_BOX_HD float sdnn_yolo_wh_stored(float v, int new_coords)
{
    return new_coords ? logf(4 * v * v) : v;
}

#endif
