/*
 * plan: layers -> buckets (+ a codec per bucket), chosen with the cost
 * model so that the predicted step time is smallest (bucket_mb=auto,
 * compress=auto), and the fixed-size partition exchange.c builds from
 * bucket_mb, for comparison.
 *
 * The automatic plan is exact for the cost model, not a heuristic.  The
 * layers that exchange something, walked from the last one down, are cut
 * into contiguous buckets.  On one serial comm thread a bucket's exchange
 * ends at
 *     end_k = max(ready_k, end_{k-1}) + x(bucket k, codec k)
 * where ready_k depends only on the bucket's lowest layer and x only on
 * the bucket's bytes and codec: a non-decreasing function of end_{k-1}.
 * So among all partitions of the first j layers, one with the smallest end
 * of its last exchange is the best start for any continuation, and
 *     E[j] = min over i < j and codecs of max(E[i], ready(j)) + x(i..j)
 * (O(L^2 C) for L exchanged layers and C codecs) gives the smallest end of
 * the last exchange.  The step is max(backward end + updates of the layers
 * that exchange nothing and come first, end of the last exchange) + the
 * remaining updates, because Darknet updates the layers in forward order
 * and the lowest layer's bucket is exchanged last: also non-decreasing in
 * that end, so the smallest E[L] gives the smallest step.
 *
 * Error feedback adds a second number.  A lossy bucket's error-feedback
 * pass runs in the replica threads and pushes the backward of every layer
 * below it back, so a partial plan is (end of its last exchange, backward
 * delay so far), and both only ever make the rest later.  The programme
 * keeps, per prefix, every partial plan that no other one beats on both
 * numbers (a Pareto front) and simulates the survivors for the whole
 * layers: still exact.  Without error feedback (or without lossy codecs)
 * the delay is 0 and each front holds one plan: the recurrence above.
 * Without overlap every bucket waits for the whole backward, and the
 * front orders partial plans by the sum of their exchanges instead.
 * The tests check the plan against every partition and codec assignment
 * for up to 10 layers.  Fronts of more than 128 labels are thinned (plan.c
 * says how, and what it may cost: at most a cell of delay per thinning),
 * as with error feedback on a slow link they grow combinatorially.
 *
 * Time to accuracy.  With iteration factors (sdnn_plan_opts.iter_factor,
 * costmodel.h) the plan minimises step time x the plan's factor: its
 * buckets' codecs' factors weighted by the buckets' bytes (one codec on
 * every bucket: that codec's).  The factors are measured with one codec on
 * every bucket; a mixed plan's is a model.  The lab's mixed plans (int8
 * with top-k on the largest layers, bench/tta_lab.sh) needed
 * 1.29, 1.00 and 0.88 x none's iterations, where top-k on every bucket
 * needed 1.31 and int8 1.00: the bytes-weighted mean (about 1.16 for those
 * plans) is nearer than the lossiest codec's factor, which an earlier
 * version charged and which, with the measured factors, would have made
 * the planner leave the mixed plan, the fastest in every seed, for int8 on
 * every bucket.  The gain and size rules (codec_gain_min, compress_min)
 * still keep a lossy codec off the buckets where it saves little.
 * The search: for each factor F among the codecs (ascending), the
 * programme above over the codecs of factor <= F gives the smallest step
 * of any plan using only those codecs; each such plan is weighed by its
 * own weighted factor and the best product is kept (on a tie, the smaller
 * factor).  Under the lossiest-codec rule this was exact.  Under the
 * weighted rule it is not always: a plan with the dearer codec on fewer
 * layers than the fastest plan's could do better, and finding it exactly
 * takes the weighted bytes as a third count of the fronts, which grew past
 * minutes on 110 layers.  What holds, and the tests check against every
 * partition and codec assignment: the plan is never worse than the best
 * plan under the lossiest-codec rule (each candidate's weighted factor is
 * at most its lossiest codec's), and never better than the weighted
 * optimum; nor worse than any fixed partition with one codec.
 */
#ifndef SDNN_PLAN_H
#define SDNN_PLAN_H

#include "costmodel.h"
#include "scalednn.h"

typedef struct sdnn_plan_opts {
    /* Buckets (all but the last, which takes what is left) hold at least
     * this many bytes; 0: any size. */
    double min_bucket_bytes;
    /* Lossy codecs only for buckets of at least this many bytes (the
     * [scalednn] compress_min_kb rule). */
    double compress_min_bytes;
    /* A lossy codec is chosen only when it cuts the bucket's exchange time
     * by at least this fraction against the best lossless codec of the
     * environment (0: whatever is fastest).  Where latency dominates, a
     * codec saves little and its error is not worth it. */
    double codec_gain_min;
    /* [env->ncodecs]: each codec's iteration factor (iterations to the
     * target / none's, > 0; costmodel.h, sdnn_iter_factor); the plan then
     * minimises step x factor.  NULL: every codec 1, the step alone. */
    const double *iter_factor;
} sdnn_plan_opts;

#define SDNN_PLAN_OPTS_INIT { .min_bucket_bytes = 0.0, .compress_min_bytes = 0.0, .codec_gain_min = 0.05, .iter_factor = NULL }

typedef struct sdnn_plan {
    int nb;
    sdnn_cm_bucket *b;    /* [nb], exchange order, times predicted */
    sdnn_cm_result pred;  /* the predicted step */
    /* The plan's iteration factor (its buckets' codecs' factors weighted
     * by the buckets' bytes; 1 without factors or buckets) and the codec of
     * the largest factor among its buckets (-1: no factors or no bucket);
     * pred.step_s x iter_factor is its predicted time to accuracy in units
     * of none's iterations. */
    double iter_factor;
    int factor_codec;
} sdnn_plan;

/* The plan's factor under f ([env->ncodecs], NULL: all 1): sets
 * pl->iter_factor and pl->factor_codec (sdnn_plan_auto does it itself;
 * the other constructors leave 1 and -1). */
void sdnn_plan_set_factor(sdnn_plan *pl, const double *f);

/* 1 when codec c may carry a bucket of `bytes` under o: lossless codecs
 * always; lossy ones from compress_min_bytes up, and only when they cut the
 * bucket's cost (exchange + error-feedback pass) by codec_gain_min against
 * the best lossless codec of env. */
int sdnn_plan_codec_allowed(const sdnn_cm_env *env, const sdnn_plan_opts *o, double bytes,
                            int c);

/* The allowed codec (index into env->codecs) that costs a bucket of
 * `bytes` least on its own. */
int sdnn_plan_best_codec(const sdnn_cm_env *env, const sdnn_plan_opts *o, double bytes);

/* bucket_mb=auto, compress=auto: the partition and codecs (among those
 * sdnn_plan_codec_allowed lets through) that minimise the predicted step
 * time, or with o->iter_factor the predicted time to accuracy (step x the
 * plan's factor).  Layer byte counts must be whole numbers (they are: 4 x
 * floats).  With compress_min_bytes > 0, env must hold a lossless codec;
 * SDNN_ERR_INVALID for a factor that is not > 0. */
sdnn_status sdnn_plan_auto(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                           const sdnn_plan_opts *o, sdnn_plan *out);

/* What exchange.c builds for bucket_mb (layers from the last down, a bucket
 * closed once it holds bucket_mb MiB or more); buckets of at least
 * compress_min_bytes get codec `codec`, the others codec 0. */
sdnn_status sdnn_plan_fixed(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                            double bucket_mb, int codec, double compress_min_bytes,
                            sdnn_plan *out);

/* A plan from explicit buckets (lo, hi, codec set by the caller); bytes and
 * times are filled in.  Takes ownership of b (freed by sdnn_plan_free, also
 * on error). */
sdnn_status sdnn_plan_from_buckets(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                                   sdnn_cm_bucket *b, int nb, sdnn_plan *out);

void sdnn_plan_free(sdnn_plan *pl);

/* A re-plan's choice: 1 when `fresh`, planned from a new profile, should
 * replace the running plan, whose buckets predicted from the same profile
 * are `running`: fresh's time to accuracy (step x factor) is below
 * running's by more than the fraction `gain`. */
int sdnn_plan_worth_switching(const sdnn_plan *running, const sdnn_plan *fresh, double gain);

/* The plan as a table (bucket, layers, bytes, codec, wire KB, predicted
 * ready/start/end ms) and a one-line prediction ("WHAT: N buckets, step ...
 * = compute ... + exposed ..."). */
#include <stdio.h>
void sdnn_plan_print(FILE *f, const sdnn_plan *pl, const sdnn_cm_env *env);
void sdnn_plan_print_prediction(FILE *f, const char *what, const sdnn_plan *pl);
/* The bytes each replica sends a step under the plan, as the cost model
 * prices them: the sum of its buckets' wire bytes (the table's wire_KB,
 * collective.h's one definition at env->world, by the collective each
 * bucket takes).  The progress line's "MB exchanged" measures the same. */
double sdnn_plan_wire_bytes(const sdnn_plan *pl, const sdnn_cm_env *env);
/* "WHAT: X MB on the wire each replica a step (world W; ...)": the line
 * under the table. */
void sdnn_plan_print_wire(FILE *f, const char *what, const sdnn_plan *pl,
                          const sdnn_cm_env *env);
/* "WHAT: time to accuracy N x F x step S ms = N x T ms (iteration factor F:
 * CODEC X MB x FC[, ...][, weighted by bytes]; N = none's iterations to the
 * target)": the line beside the prediction's step; fac: the factors the
 * plan was weighed by ([env->ncodecs], NULL: 1). */
void sdnn_plan_print_tta(FILE *f, const char *what, const sdnn_plan *pl,
                         const sdnn_cm_env *env, const double *fac);
/* "none 1, fp16 1, int8 1.25, topk 1.5": env's codecs with factors f
 * (NULL: 1), for banners. */
void sdnn_plan_describe_factors(const sdnn_cm_env *env, const double *f, char *buf,
                                size_t len);

#endif
