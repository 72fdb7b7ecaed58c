/*
 * plan: the dynamic programme over bucket boundaries, the per-bucket codec
 * choice and exchange.c's fixed-size partition (see plan.h for why the
 * programme is exact).
 */
#include "plan.h"
#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sdnn_plan_free(sdnn_plan *pl)
{
    if (!pl) return;
    free(pl->b);
    memset(pl, 0, sizeof *pl);
}

sdnn_status sdnn_plan_from_buckets(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                                   sdnn_cm_bucket *b, int nb, sdnn_plan *out)
{
    memset(out, 0, sizeof *out);
    out->b = b;
    out->nb = nb;
    out->iter_factor = 1.0;
    out->factor_codec = -1;
    sdnn_cm_bucket_bytes(p, b, nb);
    sdnn_status st = sdnn_cm_simulate(p, env, b, nb, &out->pred);
    if (st != SDNN_OK) sdnn_plan_free(out);
    return st;
}

/* What a bucket costs the step with codec m: its exchange, plus the
 * error-feedback pass the replicas run for it. */
static double bucket_cost(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes)
{
    return sdnn_cm_exchange_cost(env, m, bytes).total_s + sdnn_cm_ef_s(env, m, bytes);
}

int sdnn_plan_worth_switching(const sdnn_plan *running, const sdnn_plan *fresh, double gain)
{
    return fresh->pred.step_s * fresh->iter_factor <
           (1.0 - gain) * running->pred.step_s * running->iter_factor;
}

int sdnn_plan_codec_allowed(const sdnn_cm_env *env, const sdnn_plan_opts *o, double bytes,
                            int c)
{
    if (c < 0 || c >= env->ncodecs) return 0;
    const sdnn_codec_model *m = &env->codecs[c];
    if (!m->lossy) return 1;
    if (bytes < o->compress_min_bytes) return 0;
    double exact = INFINITY;
    for (int k = 0; k < env->ncodecs; ++k)
        if (!env->codecs[k].lossy) {
            double t = bucket_cost(env, &env->codecs[k], bytes);
            if (t < exact) exact = t;
        }
    return !isfinite(exact) || bucket_cost(env, m, bytes) <= (1.0 - o->codec_gain_min) * exact;
}

int sdnn_plan_best_codec(const sdnn_cm_env *env, const sdnn_plan_opts *o, double bytes)
{
    int best = -1;
    double tbest = INFINITY;
    for (int c = 0; c < env->ncodecs; ++c) {
        if (!sdnn_plan_codec_allowed(env, o, bytes, c)) continue;
        double t = bucket_cost(env, &env->codecs[c], bytes);
        if (t < tbest) {
            best = c;
            tbest = t;
        }
    }
    /* only lossy codecs and a bucket below compress_min: the first one */
    return best < 0 ? 0 : best;
}

/* Layers that exchange something, from the last one down. */
static int exchanged_layers(const sdnn_cost_profile *p, int *q)
{
    int m = 0;
    for (int i = p->n - 1; i >= 0; --i)
        if (p->layer[i].bytes > 0) q[m++] = i;
    return m;
}

/* A partial plan of a prefix of the exchanged layers: the end of its last
 * exchange, the backward delay of its error-feedback passes, and how it
 * was reached (the prefix it extends, which of that prefix's labels, the
 * codec of its last bucket). */
typedef struct label {
    double end, shift;
    int from, from_label, codec;
} label;

typedef struct front {
    label *v;
    int n, cap;
} front;

/* Keep l unless a label already there is as good on both counts; drop the
 * labels l beats on both.  -1: out of memory. */
static int front_add(front *f, label l)
{
    for (int k = 0; k < f->n; ++k)
        if (f->v[k].end <= l.end && f->v[k].shift <= l.shift) return 0;
    int w = 0;
    for (int k = 0; k < f->n; ++k)
        if (!(l.end <= f->v[k].end && l.shift <= f->v[k].shift)) f->v[w++] = f->v[k];
    f->n = w;
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 4;
        label *v = realloc(f->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = l;
    return 0;
}

/*
 * Thinning.  With error feedback the fronts hold plans that trade a later
 * end for a shorter backward delay, and on a slow link their number grows
 * with the layers combinatorially (25 exchanged layers with top-k allowed
 * took 14 s, 40 did not finish in a minute).  A front of more than
 * FRONT_CAP labels keeps, of the labels whose delays fall in one cell of
 * width delta, the one of least end (on the staircase the front is, the
 * last of the cell): at most FRONT_CAP + 1 labels.  A label dropped for a
 * kept one ends no earlier and is delayed at most delta less, and every
 * extension adds the same to both counts, so each thinning costs the plan
 * at most delta of step.  delta is the larger of 1e-3 x the profile's
 * compute / the exchanged layers (all thinnings together: 0.1% of the
 * compute) and the front's spread of delays / FRONT_CAP (what keeps the
 * programme to seconds on 110 layers; then the bound is that sum).  Fronts
 * of up to FRONT_CAP labels are kept whole, as in every test against the
 * brute force: exact there.
 */
enum { FRONT_CAP = 128 };

static int cmp_shift(const void *x, const void *y)
{
    const label *a = x, *b = y;
    return (a->shift > b->shift) - (a->shift < b->shift);
}

static void front_thin(front *f, double delta0)
{
    if (f->n <= FRONT_CAP) return;
    qsort(f->v, (size_t)f->n, sizeof *f->v, cmp_shift);
    double delta = (f->v[f->n - 1].shift - f->v[0].shift) / FRONT_CAP;
    if (delta < delta0) delta = delta0;
    if (!(delta > 0)) return;
    int w = 0;
    for (int k = 0; k < f->n; ++k) {
        if (k + 1 < f->n && floor((f->v[k + 1].shift - f->v[0].shift) / delta) ==
                                floor((f->v[k].shift - f->v[0].shift) / delta))
            continue;
        f->v[w++] = f->v[k];
    }
    f->n = w;
}

/* The buckets of label `li` of front m, in exchange order. */
static sdnn_cm_bucket *unwind(const front *fr, const int *q, int m, int li, int *nb)
{
    int n = 0;
    for (int j = m, k = li; j > 0;) {
        const label *l = &fr[j].v[k];
        ++n;
        k = l->from_label;
        j = l->from;
    }
    sdnn_cm_bucket *b = calloc((size_t)(n ? n : 1), sizeof *b);
    if (!b) return NULL;
    int at = n;
    for (int j = m, k = li; j > 0;) {
        const label *l = &fr[j].v[k];
        --at;
        b[at].hi = q[l->from];
        b[at].lo = q[j - 1];
        b[at].codec = l->codec;
        k = l->from_label;
        j = l->from;
    }
    *nb = n;
    return b;
}

/* The plan's buckets as layout.c's plan partition: the one the exchange
 * builds from it (sdnn_layout_plan), so a plan it would refuse is the
 * planner's error, found here. */
static sdnn_status check_layout(const sdnn_cost_profile *p, const sdnn_plan *pl)
{
    size_t *counts = calloc((size_t)p->n + 1, sizeof *counts);
    sdnn_layout_range *ranges = calloc((size_t)pl->nb + 1, sizeof *ranges);
    sdnn_status st = SDNN_OK;
    if (!counts || !ranges) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "plan: no memory for the layout check");
        goto done;
    }
    for (int i = 0; i < p->n; ++i)
        counts[i] = p->layer[i].bytes > 0 ? (size_t)(p->layer[i].bytes / sizeof(float)) : 0;
    for (int k = 0; k < pl->nb; ++k) {
        ranges[k].lo = pl->b[k].lo;
        ranges[k].hi = pl->b[k].hi;
    }
    sdnn_layout lay;
    st = sdnn_layout_plan(counts, p->n, ranges, pl->nb, &lay);
    if (st == SDNN_OK) {
        if (lay.nbuckets != pl->nb)
            st = SDNN_ERROR(SDNN_ERR_INTERNAL, "plan: %d buckets, the layout has %d", pl->nb,
                            lay.nbuckets);
        sdnn_layout_free(&lay);
    } else {
        char why[512];
        snprintf(why, sizeof why, "%s", sdnn_last_error());
        st = SDNN_ERROR(SDNN_ERR_INTERNAL, "plan: the planner's buckets are not a layout: %s",
                        why);
    }
done:
    free(counts);
    free(ranges);
    return st;
}

/* The programme over the codecs whose factor is at most fmax (all without
 * factors): the plan of smallest step among them in *out, *found = 1; or
 * *found = 0 when those codecs leave no plan (the gain and size rules
 * refuse every one of them for some bucket). */
static sdnn_status plan_dp(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                           const sdnn_plan_opts *o, double fmax, sdnn_plan *out, int *found)
{
    memset(out, 0, sizeof *out);
    *found = 0;
    sdnn_status st = SDNN_OK;
    int *q = malloc((size_t)p->n * sizeof *q);
    front *fr = calloc((size_t)p->n + 1, sizeof *fr);
    if (!q || !fr) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "plan: no memory for %d layers", p->n);
        goto done;
    }
    int m = exchanged_layers(p, q);
    if (front_add(&fr[0], (label){0, 0, -1, -1, -1})) goto nomem;
    double compute = 0;
    for (int i = 0; i < p->n; ++i) compute += p->layer[i].fwd_s + p->layer[i].bwd_s;
    const double delta = m > 0 ? 1e-3 * compute / m : 0;

    /* fr[j]: the partial plans of q[0..j-1] that no other beats on both
     * the end of the last exchange and the backward delay.  Without
     * overlap every bucket waits for the whole backward, so `end` counts
     * from there (the exchanges' sum) and the simulation adds the rest. */
    for (int j = 1; j <= m; ++j) {
        double ready = sdnn_cm_ready_s(p, env->overlap, q[j - 1]);
        double bytes = 0;
        for (int i = j - 1; i >= 0; --i) {
            bytes += p->layer[q[i]].bytes;
            if (j < m && bytes < o->min_bucket_bytes) continue;
            for (int c = 0; c < env->ncodecs; ++c) {
                if (o->iter_factor && o->iter_factor[c] > fmax) continue;
                if (!sdnn_plan_codec_allowed(env, o, bytes, c)) continue;
                const sdnn_codec_model *cm = &env->codecs[c];
                double x = sdnn_cm_exchange_cost(env, cm, bytes).total_s;
                double ef = sdnn_cm_ef_s(env, cm, bytes);
                for (int k = 0; k < fr[i].n; ++k) {
                    const label *a = &fr[i].v[k];
                    label l = {0, a->shift + ef, i, k, c};
                    if (env->overlap) {
                        double r = ready + l.shift;
                        l.end = (r > a->end ? r : a->end) + x;
                    } else {
                        l.end = a->end + x;
                    }
                    if (front_add(&fr[j], l)) goto nomem;
                    if (fr[j].n > 4 * FRONT_CAP) front_thin(&fr[j], delta);
                }
            }
        }
        /* complete: labels of later fronts point into it from now on */
        front_thin(&fr[j], delta);
    }
    if (fr[m].n == 0) goto done;
    *found = 1;

    /* The step is non-decreasing in both numbers: simulate each survivor. */
    if (m == 0) {
        st = sdnn_plan_from_buckets(p, env, NULL, 0, out);
        goto done;
    }
    for (int k = 0; k < fr[m].n; ++k) {
        int nb;
        sdnn_cm_bucket *b = unwind(fr, q, m, k, &nb);
        if (!b) goto nomem;
        sdnn_plan cand;
        SDNN_CHECKGOTO(sdnn_plan_from_buckets(p, env, b, nb, &cand), st, done);
        if (!out->b || cand.pred.step_s < out->pred.step_s) {
            sdnn_plan_free(out);
            *out = cand;
        } else {
            sdnn_plan_free(&cand);
        }
    }
    goto done;
nomem:
    st = SDNN_ERROR(SDNN_ERR_NOMEM, "plan: no memory");
done:
    if (st != SDNN_OK) sdnn_plan_free(out);
    if (fr)
        for (int j = 0; j <= p->n; ++j) free(fr[j].v);
    free(fr);
    free(q);
    return st;
}

void sdnn_plan_set_factor(sdnn_plan *pl, const double *f)
{
    pl->iter_factor = 1.0;
    pl->factor_codec = -1;
    if (!f) return;
    /* The buckets' codecs' factors weighted by the buckets' bytes; the
     * codec of the largest factor (the first bucket of it) is named beside
     * it.  No buckets or no bytes: nothing is coded, 1. */
    double fb = 0, bytes = 0;
    for (int k = 0; k < pl->nb; ++k) {
        int c = pl->b[k].codec;
        fb += pl->b[k].bytes * f[c];
        bytes += pl->b[k].bytes;
        if (pl->factor_codec < 0 || f[c] > f[pl->factor_codec]) pl->factor_codec = c;
    }
    if (bytes > 0) pl->iter_factor = fb / bytes;
}

sdnn_status sdnn_plan_auto(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                           const sdnn_plan_opts *o, sdnn_plan *out)
{
    memset(out, 0, sizeof *out);
    if (env->ncodecs < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "plan: no codec allowed");
    for (int i = 0; i < p->n; ++i)
        if (!(p->layer[i].bytes >= 0) || p->layer[i].bytes != floor(p->layer[i].bytes))
            return SDNN_ERROR(SDNN_ERR_INVALID, "plan: layer %d has %g bytes (expected a "
                              "whole number)", i, p->layer[i].bytes);
    int lossless = 0;
    for (int c = 0; c < env->ncodecs; ++c) lossless |= !env->codecs[c].lossy;
    if (!lossless && o->compress_min_bytes > 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "plan: buckets below compress_min travel "
                          "uncompressed, but codec none is not allowed");
    const double *f = o->iter_factor;
    for (int c = 0; f && c < env->ncodecs; ++c)
        if (!(f[c] > 0) || !isfinite(f[c]))
            return SDNN_ERROR(SDNN_ERR_INVALID, "plan: codec %s has iteration factor %g "
                              "(expected a number > 0)", env->codecs[c].name, f[c]);
    /* Each factor among the codecs, ascending: the plan of smallest step
     * over the codecs at or below it, weighed by its own (bytes-weighted)
     * factor, and the best product of those (plan.h).  Without a
     * lossless codec at or below a level, only plans whose buckets all
     * reach compress_min exist there, and plan_dp may find none. */
    int have = 0;
    double best = INFINITY, prev = -INFINITY;
    for (;;) {
        double level = INFINITY;
        for (int c = 0; f && c < env->ncodecs; ++c)
            if (f[c] > prev && f[c] < level) level = f[c];
        if (f && !isfinite(level)) break;
        prev = level;
        sdnn_plan cand;
        int found;
        sdnn_status st = plan_dp(p, env, o, level, &cand, &found);
        if (st != SDNN_OK) {
            sdnn_plan_free(out);
            return st;
        }
        if (found) {
            sdnn_plan_set_factor(&cand, f);
            double t = cand.pred.step_s * cand.iter_factor;
            if (!have || t < best || (t == best && cand.iter_factor < out->iter_factor)) {
                sdnn_plan_free(out);
                *out = cand;
                best = t;
                have = 1;
            } else {
                sdnn_plan_free(&cand);
            }
        }
        if (!f) break;   /* no factors: one programme over every codec */
    }
    if (!have) return SDNN_ERROR(SDNN_ERR_INTERNAL, "plan: no plan for %d layers", p->n);
    sdnn_status st = out->nb > 0 ? check_layout(p, out) : SDNN_OK;
    if (st != SDNN_OK) sdnn_plan_free(out);
    return st;
}

sdnn_status sdnn_plan_fixed(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                            double bucket_mb, int codec, double compress_min_bytes,
                            sdnn_plan *out)
{
    memset(out, 0, sizeof *out);
    if (!(bucket_mb > 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "bucket_mb=%g: expected a number > 0", bucket_mb);
    if (codec < 0 || codec >= env->ncodecs)
        return SDNN_ERROR(SDNN_ERR_INVALID, "plan: codec %d of %d", codec, env->ncodecs);
    /* The partition of layout.c, the one the exchange uses. */
    size_t *counts = calloc((size_t)p->n + 1, sizeof *counts);
    sdnn_cm_bucket *b = calloc((size_t)p->n + 1, sizeof *b);
    if (!counts || !b) {
        free(counts);
        free(b);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "plan: no memory for buckets");
    }
    for (int i = 0; i < p->n; ++i)
        counts[i] = p->layer[i].bytes > 0 ? (size_t)(p->layer[i].bytes / sizeof(float)) : 0;
    sdnn_layout lay;
    sdnn_status ls = sdnn_layout_fixed(counts, p->n, bucket_mb, &lay);
    free(counts);
    if (ls != SDNN_OK) {
        free(b);
        return ls;
    }
    for (int k = 0; k < lay.nbuckets; ++k) {
        b[k].hi = lay.bucket[k].hi;
        b[k].lo = lay.bucket[k].lo;
    }
    int k = lay.nbuckets - 1;
    sdnn_layout_free(&lay);
    int nb = k + 1;
    sdnn_cm_bucket_bytes(p, b, nb);
    for (k = 0; k < nb; ++k)
        b[k].codec = b[k].bytes >= compress_min_bytes ? codec : 0;
    return sdnn_plan_from_buckets(p, env, b, nb, out);
}

void sdnn_plan_print(FILE *f, const sdnn_plan *pl, const sdnn_cm_env *env)
{
    /* The collective column where a codec may travel by more than one. */
    int colls = 0;
    for (int k = 0; k < env->ncodecs; ++k) colls |= env->codecs[k].colls != 0;
    fprintf(f, "bucket  layers        bytes  codec      wire_KB   ready_ms   start_ms     end_ms%s\n",
            colls ? "  collective" : "");
    for (int k = 0; k < pl->nb; ++k) {
        const sdnn_cm_bucket *b = &pl->b[k];
        sdnn_cm_exchange x = sdnn_cm_exchange_cost(env, &env->codecs[b->codec], b->bytes);
        char layers[32];
        if (b->lo == b->hi) snprintf(layers, sizeof layers, "%d", b->hi);
        else snprintf(layers, sizeof layers, "%d..%d", b->hi, b->lo);
        const sdnn_codec_model *m = &env->codecs[b->codec];
        fprintf(f, "%6d  %-9s %9.0f  %-8s %9.1f %10.3f %10.3f %10.3f", k, layers, b->bytes,
                m->name, x.wire_bytes / 1024.0, b->ready_s * 1e3, b->start_s * 1e3,
                b->end_s * 1e3);
        if (colls)
            fprintf(f, "  %s", sdnn_cm_coll_label(sdnn_cm_choose(env, m, b->bytes, m->colls), m));
        fprintf(f, "\n");
    }
}

double sdnn_plan_wire_bytes(const sdnn_plan *pl, const sdnn_cm_env *env)
{
    double sum = 0.0;
    for (int k = 0; k < pl->nb; ++k)
        sum += sdnn_cm_exchange_cost(env, &env->codecs[pl->b[k].codec], pl->b[k].bytes)
                   .wire_bytes;
    return sum;
}

void sdnn_plan_print_wire(FILE *f, const char *what, const sdnn_plan *pl,
                          const sdnn_cm_env *env)
{
    fprintf(f, "%s: %.4f MB on the wire each replica a step (world %d, the sum of wire_KB; "
               "the progress line's MB exchanged is the count)\n",
            what, sdnn_plan_wire_bytes(pl, env) / 1e6, env->world);
}

void sdnn_plan_print_prediction(FILE *f, const char *what, const sdnn_plan *pl)
{
    fprintf(f, "%s: %d bucket%s, step %.3f ms = compute %.3f ms + exposed %.3f ms "
               "(communication %.3f ms)\n",
            what, pl->nb, pl->nb == 1 ? "" : "s", pl->pred.step_s * 1e3,
            pl->pred.compute_s * 1e3, pl->pred.exposed_s * 1e3, pl->pred.comm_s * 1e3);
}

void sdnn_plan_print_tta(FILE *f, const char *what, const sdnn_plan *pl,
                         const sdnn_cm_env *env, const double *fac)
{
    fprintf(f, "%s: time to accuracy N x %.3g x step %.3f ms = N x %.3f ms (iteration factor "
               "%.3g: ", what, pl->iter_factor, pl->pred.step_s * 1e3,
            pl->pred.step_s * pl->iter_factor * 1e3, pl->iter_factor);
    /* each codec of the plan with its bytes and factor, in env's order */
    int any = 0;
    for (int c = 0; c < env->ncodecs; ++c) {
        double bytes = 0;
        int nb = 0;
        for (int k = 0; k < pl->nb; ++k)
            if (pl->b[k].codec == c) {
                bytes += pl->b[k].bytes;
                nb++;
            }
        if (!nb) continue;
        fprintf(f, "%s%s %.1f MB x %.3g", any ? ", " : "", env->codecs[c].name, bytes / 1e6,
                fac ? fac[c] : 1.0);
        any = 1;
    }
    fprintf(f, "%s; N = none's iterations to the target)\n",
            !any ? "nothing exchanged" : pl->nb > 1 ? ", weighted by bytes" : "");
}

void sdnn_plan_describe_factors(const sdnn_cm_env *env, const double *f, char *buf,
                                size_t len)
{
    size_t at = 0;
    if (len) buf[0] = '\0';
    for (int c = 0; c < env->ncodecs && at < len; ++c) {
        int w = snprintf(buf + at, len - at, "%s%s %.3g", c ? ", " : "", env->codecs[c].name,
                         f ? f[c] : 1.0);
        if (w < 0) break;
        at += (size_t)w;
    }
}
