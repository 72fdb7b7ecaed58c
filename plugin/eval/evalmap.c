/*
 * evalmap: see evalmap.h.  Matching happens when an image is added, so the
 * accumulator keeps only one small record per detection (score, matched or
 * not) and a truth count per class; AP is computed from those at the end.
 */
#include "evalmap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ranked {
    float score;
    unsigned char tp;
} ranked;

typedef struct class_acc {
    ranked *recs;
    int n, cap;
    int truths;
} class_acc;

struct sdnn_map {
    int classes;
    double iou;
    int images;
    class_acc *acc;
    int *scratch; /* classes ints: per-image detection counts */
};

double sdnn_rect_iou(sdnn_rect a, sdnn_rect b)
{
    double aw = a.w, ah = a.h, bw = b.w, bh = b.h;
    if (!(aw > 0 && ah > 0 && bw > 0 && bh > 0)) return 0;
    double l = fmax((double)a.x - aw / 2, (double)b.x - bw / 2);
    double r = fmin((double)a.x + aw / 2, (double)b.x + bw / 2);
    double t = fmax((double)a.y - ah / 2, (double)b.y - bh / 2);
    double btm = fmin((double)a.y + ah / 2, (double)b.y + bh / 2);
    if (r <= l || btm <= t) return 0;
    double inter = (r - l) * (btm - t);
    return inter / (aw * ah + bw * bh - inter);
}

sdnn_status sdnn_map_create(int classes, float iou_thresh, sdnn_map **out)
{
    *out = NULL;
    if (classes < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: %d classes (need at least 1)", classes);
    if (!(iou_thresh > 0 && iou_thresh <= 1))
        return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: IoU threshold %g is not in (0, 1]",
                          (double)iou_thresh);
    sdnn_map *m = calloc(1, sizeof *m);
    if (m) {
        m->acc = calloc((size_t)classes, sizeof *m->acc);
        m->scratch = calloc((size_t)classes, sizeof *m->scratch);
    }
    if (!m || !m->acc || !m->scratch) {
        sdnn_map_destroy(m);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory for %d classes", classes);
    }
    m->classes = classes;
    m->iou = iou_thresh;
    *out = m;
    return SDNN_OK;
}

void sdnn_map_destroy(sdnn_map *m)
{
    if (!m) return;
    if (m->acc)
        for (int c = 0; c < m->classes; ++c) free(m->acc[c].recs);
    free(m->acc);
    free(m->scratch);
    free(m);
}

/* A score and where it came from; sorted by score, highest first, equal
 * scores by index, so ties keep their input order whatever qsort does. */
typedef struct order_key {
    float score;
    int idx;
} order_key;

static int by_score_then_index(const void *pa, const void *pb)
{
    const order_key *a = pa, *b = pb;
    if (a->score > b->score) return -1;
    if (a->score < b->score) return 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static sdnn_status reserve(class_acc *a, int extra)
{
    if (a->n + extra <= a->cap) return SDNN_OK;
    int cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra) cap *= 2;
    ranked *r = realloc(a->recs, (size_t)cap * sizeof *r);
    if (!r) return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory for %d detections", cap);
    a->recs = r;
    a->cap = cap;
    return SDNN_OK;
}

sdnn_status sdnn_map_add_image(sdnn_map *m, const sdnn_map_truth *truths, int ntruths,
                               const sdnn_map_det *dets, int ndets)
{
    if (ntruths < 0 || ndets < 0 || (ntruths && !truths) || (ndets && !dets))
        return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: bad image arguments (%d truths, %d detections)",
                          ntruths, ndets);
    for (int i = 0; i < ntruths; ++i)
        if (truths[i].cls < 0 || truths[i].cls >= m->classes)
            return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: truth %d has class %d (classes 0..%d)", i,
                              truths[i].cls, m->classes - 1);
    memset(m->scratch, 0, (size_t)m->classes * sizeof *m->scratch);
    for (int i = 0; i < ndets; ++i) {
        if (dets[i].cls < 0 || dets[i].cls >= m->classes)
            return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: detection %d has class %d (classes 0..%d)",
                              i, dets[i].cls, m->classes - 1);
        if (!isfinite(dets[i].score))
            return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: detection %d has score %g", i,
                              (double)dets[i].score);
        m->scratch[dets[i].cls]++;
    }
    for (int c = 0; c < m->classes; ++c)
        if (m->scratch[c]) SDNN_CHECK(reserve(&m->acc[c], m->scratch[c]));

    order_key *order = malloc((size_t)(ndets ? ndets : 1) * sizeof *order);
    unsigned char *taken = calloc((size_t)(ntruths ? ntruths : 1), 1);
    if (!order || !taken) {
        free(order);
        free(taken);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory for an image of %d detections", ndets);
    }
    for (int i = 0; i < ndets; ++i) order[i] = (order_key){dets[i].score, i};
    qsort(order, (size_t)ndets, sizeof *order, by_score_then_index);

    for (int k = 0; k < ndets; ++k) {
        const sdnn_map_det *d = &dets[order[k].idx];
        int best = -1;
        double best_iou = 0;
        for (int j = 0; j < ntruths; ++j) {
            if (taken[j] || truths[j].cls != d->cls) continue;
            double iou = sdnn_rect_iou(d->box, truths[j].box);
            if (iou >= m->iou && (best < 0 || iou > best_iou)) {
                best = j;
                best_iou = iou;
            }
        }
        if (best >= 0) taken[best] = 1;
        class_acc *a = &m->acc[d->cls];
        a->recs[a->n++] = (ranked){d->score, (unsigned char)(best >= 0)};
    }
    for (int j = 0; j < ntruths; ++j) m->acc[truths[j].cls].truths++;
    m->images++;
    free(order);
    free(taken);
    return SDNN_OK;
}

/* The mean over r = t / (points - 1), t = 0 .. points - 1, of the highest
 * precision at recall >= r; recall >= t / (points - 1) is compared in
 * integers: cum * (points - 1) >= t * npos.  The first rank reaching it
 * carries the envelope's maximum over all later ranks. */
static double interpolated(const double *envelope, const int *cum, int n, int npos, int points)
{
    double sum = 0;
    int i = 0;
    for (int t = 0; t < points; ++t) {
        while (i < n && (long long)cum[i] * (points - 1) < (long long)t * npos) ++i;
        if (i < n) sum += envelope[i];
    }
    return sum / points;
}

sdnn_status sdnn_ap_ranked(const unsigned char *tp, int n, int npos, double *ap_all, double *ap11)
{
    double ap101;
    return sdnn_ap_ranked3(tp, n, npos, ap_all, ap11, &ap101);
}

sdnn_status sdnn_ap_ranked3(const unsigned char *tp, int n, int npos, double *ap_all, double *ap11,
                            double *ap101)
{
    *ap_all = 0;
    *ap11 = 0;
    *ap101 = 0;
    int total = 0;
    for (int i = 0; i < n; ++i) total += tp[i] != 0;
    if (total > npos)
        return SDNN_ERROR(SDNN_ERR_INVALID, "AP: %d true positives for %d truths", total, npos);
    if (npos <= 0 || n <= 0) return SDNN_OK;

    /* envelope[i]: the highest precision at rank i or below (recall only
     * grows down the list, so this is the best precision at recall >= the
     * recall of rank i). */
    double *envelope = malloc((size_t)n * sizeof *envelope);
    int *cum = malloc((size_t)n * sizeof *cum);
    if (!envelope || !cum) {
        free(envelope);
        free(cum);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "AP: no memory for %d detections", n);
    }
    int hits = 0;
    for (int i = 0; i < n; ++i) {
        hits += tp[i] != 0;
        cum[i] = hits;
        envelope[i] = (double)hits / (double)(i + 1);
    }
    for (int i = n - 2; i >= 0; --i)
        if (envelope[i + 1] > envelope[i]) envelope[i] = envelope[i + 1];

    /* Recall rises by 1/npos at each true positive; the envelope there is
     * the height of that strip. */
    double area = 0;
    for (int i = 0; i < n; ++i)
        if (tp[i]) area += envelope[i];
    *ap_all = area / npos;

    *ap11 = interpolated(envelope, cum, n, npos, 11);
    *ap101 = interpolated(envelope, cum, n, npos, 101);
    free(envelope);
    free(cum);
    return SDNN_OK;
}

sdnn_status sdnn_map_compute(const sdnn_map *m, sdnn_ap *per_class, sdnn_map_result *result)
{
    memset(result, 0, sizeof *result);
    result->images = m->images;
    int most = 1;
    for (int c = 0; c < m->classes; ++c)
        if (m->acc[c].n > most) most = m->acc[c].n;
    order_key *order = malloc((size_t)most * sizeof *order);
    unsigned char *tp = malloc((size_t)most);
    if (!order || !tp) {
        free(order);
        free(tp);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory to rank %d detections", most);
    }
    sdnn_status st = SDNN_OK;
    for (int c = 0; c < m->classes; ++c) {
        const class_acc *a = &m->acc[c];
        sdnn_ap ap = {a->truths, a->n, 0, 0, 0, 0};
        for (int i = 0; i < a->n; ++i) order[i] = (order_key){a->recs[i].score, i};
        qsort(order, (size_t)a->n, sizeof *order, by_score_then_index);
        for (int i = 0; i < a->n; ++i) {
            tp[i] = a->recs[order[i].idx].tp;
            ap.tp += tp[i];
        }
        st = sdnn_ap_ranked3(tp, a->n, a->truths, &ap.ap_all, &ap.ap11, &ap.ap101);
        if (st != SDNN_OK) break;
        if (per_class) per_class[c] = ap;
        if (a->truths > 0) {
            result->classes_scored++;
            result->map_all += ap.ap_all;
            result->map11 += ap.ap11;
            result->map101 += ap.ap101;
        }
    }
    if (st == SDNN_OK && result->classes_scored > 0) {
        result->map_all /= result->classes_scored;
        result->map11 /= result->classes_scored;
        result->map101 /= result->classes_scored;
    }
    free(order);
    free(tp);
    return st;
}
