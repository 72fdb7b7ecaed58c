/*
 * layout: the partition of exchanged layers into buckets (see layout.h).
 */
#include "layout.h"
#include "replicas.h"

#include <stdlib.h>
#include <string.h>

sdnn_status sdnn_layout_counts(const network *net, size_t *counts)
{
    int first = 0;   /* layers before the last stopbackward are never fresh */
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        if (np < 0)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                              "layer %d (%s) has parameters scalednn cannot exchange yet; "
                              "use mode=stock for this network",
                              i, sdnn_layer_type_name(net->layers[i].type));
        counts[i] = 0;
        if (i < first) continue;
        for (int j = 0; j < np; ++j) counts[i] += p[j].n;
    }
    return SDNN_OK;
}

static sdnn_status alloc_layout(int nlayers, int cap, sdnn_layout *out)
{
    memset(out, 0, sizeof *out);
    out->nlayers = nlayers;
    out->layer = calloc(nlayers > 0 ? (size_t)nlayers : 1, sizeof *out->layer);
    out->bucket = calloc(cap > 0 ? (size_t)cap : 1, sizeof *out->bucket);
    if (!out->layer || !out->bucket) {
        sdnn_layout_free(out);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the bucket layout");
    }
    for (int i = 0; i < nlayers; ++i) out->layer[i].bucket = -1;
    return SDNN_OK;
}

/* Put layer i (n floats) at the end of bucket k. */
static void assign(sdnn_layout *l, int k, int i, size_t n)
{
    sdnn_layout_bucket *b = &l->bucket[k];
    if (b->nlayers == 0) {
        b->hi = i;
        b->count = 0;
    }
    l->layer[i].bucket = k;
    l->layer[i].offset = b->count;
    l->layer[i].count = n;
    b->count += n;
    b->lo = i;
    b->nlayers++;
}

static void finish(sdnn_layout *l)
{
    l->total = 0;
    for (int k = 0; k < l->nbuckets; ++k) l->total += l->bucket[k].count;
}

sdnn_status sdnn_layout_fixed(const size_t *counts, int nlayers, double bucket_mb,
                              sdnn_layout *out)
{
    if (!(bucket_mb > 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "bucket_mb must be > 0 (got %g)", bucket_mb);
    SDNN_CHECK(alloc_layout(nlayers, nlayers + 1, out));
    size_t target = (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    if (target < 1) target = 1;
    int k = -1;
    for (int i = nlayers - 1; i >= 0; --i) {
        if (counts[i] == 0) continue;
        if (k < 0 || out->bucket[k].count >= target) ++k;
        assign(out, k, i, counts[i]);
    }
    out->nbuckets = k + 1;
    finish(out);
    return SDNN_OK;
}

sdnn_status sdnn_layout_plan(const size_t *counts, int nlayers, const sdnn_layout_range *sp,
                             int n, sdnn_layout *out)
{
    SDNN_CHECK(alloc_layout(nlayers, n, out));
    sdnn_status st = SDNN_OK;
    int above = nlayers;
    for (int k = 0; k < n && st == SDNN_OK; ++k) {
        if (sp[k].lo < 0 || sp[k].hi < sp[k].lo || sp[k].hi >= above) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "plan bucket %d: layers %d..%d are not below "
                            "the previous bucket's (%d)", k, sp[k].hi, sp[k].lo, above);
            break;
        }
        for (int i = sp[k].hi + 1; i < above && st == SDNN_OK; ++i)
            if (counts[i]) st = SDNN_ERROR(SDNN_ERR_INVALID, "plan leaves layer %d out", i);
        if (st != SDNN_OK) break;
        for (int i = sp[k].hi; i >= sp[k].lo; --i)
            if (counts[i]) assign(out, k, i, counts[i]);
        if (out->bucket[k].nlayers == 0)
            st = SDNN_ERROR(SDNN_ERR_INVALID, "plan bucket %d (layers %d..%d) exchanges nothing",
                            k, sp[k].hi, sp[k].lo);
        above = sp[k].lo;
    }
    for (int i = above - 1; i >= 0 && st == SDNN_OK; --i)
        if (counts[i]) st = SDNN_ERROR(SDNN_ERR_INVALID, "plan leaves layer %d out", i);
    if (st != SDNN_OK) {
        sdnn_layout_free(out);
        return st;
    }
    out->nbuckets = n;
    finish(out);
    return SDNN_OK;
}

sdnn_status sdnn_layout_build(const network *net, double bucket_mb, const sdnn_layout_range *plan,
                              int nplan, sdnn_layout *out)
{
    memset(out, 0, sizeof *out);
    size_t *counts = calloc(net->n > 0 ? (size_t)net->n : 1, sizeof *counts);
    if (!counts) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the bucket layout");
    sdnn_status st = sdnn_layout_counts(net, counts);
    if (st == SDNN_OK)
        st = plan ? sdnn_layout_plan(counts, net->n, plan, nplan, out)
                  : sdnn_layout_fixed(counts, net->n, bucket_mb, out);
    free(counts);
    return st;
}

void sdnn_layout_free(sdnn_layout *l)
{
    if (!l) return;
    free(l->layer);
    free(l->bucket);
    memset(l, 0, sizeof *l);
}
