/*
 * exchange: the bucket buffers and the per-step protocol (see exchange.h),
 * driven through the engine table: every bucket buffer comes from the
 * engine (buf_alloc) and is touched only by the engine's ops (snapshot,
 * pack, check, ef_step, apply, buf_read/buf_write) and by the comm the
 * engine gives (comm_open).  When buckets may leave, the comm thread and
 * the waits are the scheduler's (scheduler.c); the .ef format is efstate.c's.
 */
#include "exchange.h"
#include "collective.h"
#include "efstate.h"
#include "layout.h"
#include "replicas.h"
#include "scheduler.h"
#include "clock.h"
#include "timeline.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bucket {
    int lo, hi;            /* layers hi down to lo */
    size_t count;
    int nlayers;
    float **pack;          /* [nrep] fresh gradients (engine buffers) */
    float **snap;          /* [nrep] snapshots */
    float *mean;           /* the mean every replica reads (replica 0's buffer);
                            * compressed: outs[0] */
    const sdnn_codec_ops *codec; /* NULL: uncompressed */
    float **outs;          /* compressed: [nrep] each replica's decoded mean */
    float **resid;         /* error feedback: [nrep] residuals, NULL without */
    float **vel;           /* momentum correction: [nrep] velocities */
    float **efbuf;         /* error feedback: [nrep] encode scratch */
} bucket;

struct sdnn_exchange {
    sdnn_engine *eng;
    int own_eng;                       /* made by sdnn_exchange_create */
    int nrep;
    sdnn_comm *comm;                   /* the collectives' (the engine's, or host) */
    int world;
    int nlayers;
    sdnn_layout lay;                   /* each layer's bucket and offset */
    int nb;
    bucket *b;
    const char **labels;               /* [nb] codec names, for the timeline */
    size_t *efcount;                   /* [nb] floats of state (0: none), for .ef */
    sdnn_exchange_opts opts;
    sdnn_codec_params step_params;     /* this step's (topk ratio warm-up) */
    uint64_t seed;
    int has_ef;
    sdnn_sched *sched;
    const float **in;                  /* [nrep] the comm thread's inputs */
    int iteration;
    sdnn_timeline *tl;                 /* NULL: no timeline */
};

#define SDNN_STREAM_SEED 0x5ca1ed5ca1edull

static void buf_free(sdnn_exchange *ex, int r, float *p)
{
    if (p) ex->eng->ops->buf_free(ex->eng, r, p);
}

static void free_buckets(sdnn_exchange *ex)
{
    if (!ex->b) return;
    for (int k = 0; k < ex->nb; ++k) {
        bucket *bk = &ex->b[k];
        for (int r = 0; r < ex->nrep; ++r) {
            if (bk->pack) buf_free(ex, r, bk->pack[r]);
            if (bk->snap) buf_free(ex, r, bk->snap[r]);
            if (bk->outs && r > 0) buf_free(ex, r, bk->outs[r]);   /* outs[0] is mean */
            if (bk->resid) buf_free(ex, r, bk->resid[r]);
            if (bk->vel) buf_free(ex, r, bk->vel[r]);
            if (bk->efbuf) buf_free(ex, r, bk->efbuf[r]);
        }
        buf_free(ex, 0, bk->mean);
        free(bk->pack);
        free(bk->snap);
        free(bk->outs);
        free(bk->resid);
        free(bk->vel);
        free(bk->efbuf);
    }
    free(ex->b);
    ex->b = NULL;
}

void sdnn_exchange_destroy(sdnn_exchange *ex)
{
    if (!ex) return;
    sdnn_sched_destroy(ex->sched);   /* the comm thread first: it reads the buckets */
    free_buckets(ex);
    sdnn_layout_free(&ex->lay);
    free((void *)ex->opts.plan);
    free(ex->labels);
    free(ex->efcount);
    free(ex->in);
    if (ex->own_eng) sdnn_engine_destroy(ex->eng);
    free(ex);
}

/* n zero-filled floats of replica r's memory in the engine. */
static sdnn_status alloc(sdnn_exchange *ex, int r, size_t n, float **out)
{
    return ex->eng->ops->buf_alloc(ex->eng, r, n ? n : 1, out);
}

/* Compressed-bucket buffers: per-replica outputs, error-feedback state. */
static sdnn_status alloc_coded(sdnn_exchange *ex, int k)
{
    bucket *bk = &ex->b[k];
    const sdnn_exchange_opts *o = &ex->opts;
    int ef = (o->auto_ef ? bk->codec == &sdnn_codec_topk : o->error_feedback) && bk->codec->lossy;
    bk->outs = calloc((size_t)ex->nrep, sizeof *bk->outs);
    if (!bk->outs) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
    bk->outs[0] = bk->mean;
    for (int r = 1; r < ex->nrep; ++r) SDNN_CHECK(alloc(ex, r, bk->count, &bk->outs[r]));
    if (!ef) return SDNN_OK;
    ex->has_ef = 1;
    bk->resid = calloc((size_t)ex->nrep, sizeof *bk->resid);
    bk->efbuf = calloc((size_t)ex->nrep, sizeof *bk->efbuf);
    if (o->topk_momentum > 0) bk->vel = calloc((size_t)ex->nrep, sizeof *bk->vel);
    if (!bk->resid || !bk->efbuf || (o->topk_momentum > 0 && !bk->vel))
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
    /* Sized for the largest encoding of the run: top-k's warm-up starts by
     * keeping everything. */
    sdnn_codec_params widest = o->params;
    if (o->topk_warmup > 0) widest.topk_ratio = 1.0;
    size_t enc = bk->codec->encoded_size(&widest, bk->count);
    size_t enc_floats = (enc + sizeof(float) - 1) / sizeof(float);
    for (int r = 0; r < ex->nrep; ++r) {
        SDNN_CHECK(alloc(ex, r, bk->count, &bk->resid[r]));
        SDNN_CHECK(alloc(ex, r, enc_floats, &bk->efbuf[r]));
        if (bk->vel) SDNN_CHECK(alloc(ex, r, bk->count, &bk->vel[r]));
    }
    return SDNN_OK;
}

/* Every replica's layers hold what replica 0's do (the layout is built on
 * replica 0). */
static sdnn_status check_replicas(sdnn_exchange *ex)
{
    size_t *counts = calloc((size_t)ex->nlayers + 1, sizeof *counts);
    if (!counts) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
    sdnn_status st = SDNN_OK;
    for (int r = 1; r < ex->nrep && st == SDNN_OK; ++r) {
        st = sdnn_layout_counts(ex->eng->nets[r], counts);
        for (int i = 0; st == SDNN_OK && i < ex->nlayers; ++i)
            if (counts[i] != ex->lay.layer[i].count)
                st = SDNN_ERROR(SDNN_ERR_INTERNAL, "replica %d layer %d differs", r, i);
    }
    free(counts);
    return st;
}

static sdnn_status build_buckets(sdnn_exchange *ex, double bucket_mb)
{
    sdnn_layout_range *ranges = NULL;
    if (ex->opts.plan) {
        ranges = calloc((size_t)ex->opts.nplan + 1, sizeof *ranges);
        if (!ranges) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for buckets");
        for (int k = 0; k < ex->opts.nplan; ++k) {
            ranges[k].lo = ex->opts.plan[k].lo;
            ranges[k].hi = ex->opts.plan[k].hi;
        }
    }
    /* The one partition (layout.c) every engine, the planner and the cost
     * model use. */
    sdnn_status ls = sdnn_layout_build(ex->eng->nets[0], bucket_mb, ranges,
                                       ranges ? ex->opts.nplan : 0, &ex->lay);
    free(ranges);
    SDNN_CHECK(ls);
    SDNN_CHECK(check_replicas(ex));
    ex->nb = ex->lay.nbuckets;
    size_t cap = ex->nb > 0 ? (size_t)ex->nb : 1;
    ex->b = calloc(cap, sizeof *ex->b);
    ex->labels = calloc(cap, sizeof *ex->labels);
    ex->efcount = calloc(cap, sizeof *ex->efcount);
    if (!ex->b || !ex->labels || !ex->efcount)
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for buckets");
    for (int k = 0; k < ex->nb; ++k) {
        bucket *bk = &ex->b[k];
        bk->lo = ex->lay.bucket[k].lo;
        bk->hi = ex->lay.bucket[k].hi;
        bk->count = ex->lay.bucket[k].count;
        bk->nlayers = ex->lay.bucket[k].nlayers;
        ex->labels[k] = "none";
        if (ex->world == 1) continue;   /* nothing to pack for a world of one */
        bk->pack = calloc((size_t)ex->nrep, sizeof *bk->pack);
        bk->snap = calloc((size_t)ex->nrep, sizeof *bk->snap);
        if (!bk->pack || !bk->snap) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
        SDNN_CHECK(alloc(ex, 0, bk->count, &bk->mean));
        const sdnn_codec_ops *c = ex->opts.plan ? ex->opts.plan[k].codec : ex->opts.codec;
        if (c && c != &sdnn_codec_none &&
            (double)bk->count * sizeof(float) >= ex->opts.compress_min_kb * 1024.0) {
            bk->codec = c;
            ex->labels[k] = c->name;
            SDNN_CHECK(alloc_coded(ex, k));
            if (bk->resid) ex->efcount[k] = bk->count;
        }
        for (int r = 0; r < ex->nrep; ++r) {
            SDNN_CHECK(alloc(ex, r, bk->count, &bk->pack[r]));
            SDNN_CHECK(alloc(ex, r, bk->count, &bk->snap[r]));
        }
    }
    return SDNN_OK;
}

sdnn_status sdnn_exchange_opts_from_config(const sdnn_config *cfg, sdnn_exchange_opts *o)
{
    memset(o, 0, sizeof *o);
    o->bucket_mb = cfg->bucket_mb;
    o->overlap = cfg->overlap;
    /* compress=auto: the plan gives each bucket its codec; until then none. */
    int autoc = strcmp(cfg->compress, "auto") == 0;
    o->codec = autoc ? &sdnn_codec_none : sdnn_codec_find(cfg->compress);
    o->auto_ef = autoc;
    if (!o->codec)
        return SDNN_ERROR(SDNN_ERR_INVALID, "compress=%s: unknown codec (%s)", cfg->compress,
                          sdnn_codec_names());
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = cfg->int8_chunk;
    p.stochastic = cfg->stochastic_rounding;
    p.seed = SDNN_STREAM_SEED;
    p.topk_ratio = cfg->topk_ratio;
    o->params = p;
    o->compress_min_kb = cfg->compress_min_kb;
    o->error_feedback = cfg->error_feedback > 0;
    o->topk_momentum = (float)cfg->topk_momentum;
    o->topk_warmup = cfg->topk_warmup;
    return SDNN_OK;
}


/* Bucket k's collective on the comm thread (the scheduler calls it once
 * every replica's signal is in). */
static sdnn_status collective(void *user, int k, size_t *wire)
{
    sdnn_exchange *ex = user;
    bucket *bk = &ex->b[k];
    for (int r = 0; r < ex->nrep; ++r) ex->in[r] = bk->pack[r];
    if (bk->codec) {
        uint64_t stream = sdnn_stream_mix(ex->seed, (uint64_t)ex->iteration, (uint64_t)k);
        return sdnn_comm_allreduce_mean_coded(ex->comm, bk->codec, &ex->step_params, stream,
                                              ex->in, ex->nrep, bk->outs, bk->count, wire);
    }
    /* wire: what a ring sends (sdnn_comm_allreduce_mean). */
    return sdnn_comm_allreduce_mean(ex->comm, ex->in, ex->nrep, bk->mean, bk->count, wire);
}

static void cb_backward_done(void *user, int r, int layer)
{
    sdnn_exchange_layer_done(user, r, layer);
}

static int cb_before_update(void *user, int r, int layer)
{
    return sdnn_exchange_layer_wait(user, r, layer);
}

static void cb_nonfinite_input(void *user, int r, int layer)
{
    sdnn_exchange_report_nonfinite_input(user, r, layer);
}

static int cb_aborted(void *user) { return sdnn_exchange_aborted(user); }

static void cb_abort(void *user, int r, sdnn_status s)
{
    (void)r;
    sdnn_exchange_abort(user, s);
}

sdnn_status sdnn_exchange_create_on(sdnn_engine *e, sdnn_comm *comm,
                                    const sdnn_exchange_opts *opts, sdnn_exchange **out)
{
    *out = NULL;
    if (!e || e->n < 1 || !comm || !opts)
        return SDNN_ERROR(SDNN_ERR_INVALID, "exchange needs an engine, a comm and options");
    if (!(opts->bucket_mb > 0) && !opts->plan)
        return SDNN_ERROR(SDNN_ERR_INVALID, "bucket_mb must be > 0 (or an explicit plan)");
    /* The engine's comm over its buffers (a host engine: the host comm). */
    sdnn_comm *use = NULL;
    if (e->ops->comm_open) SDNN_CHECK(e->ops->comm_open(e, comm, &use));
    if (!use) use = comm;
    if (opts->codec && opts->codec != &sdnn_codec_none && !sdnn_comm_has_coded(use))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "comm backend %s has no compressed allreduce",
                          sdnn_comm_name(use));
    sdnn_exchange *ex = calloc(1, sizeof *ex);
    if (!ex) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
    ex->eng = e;
    ex->nrep = e->n;
    ex->comm = use;
    ex->opts = *opts;
    ex->opts.plan = NULL;
    sdnn_status st = SDNN_OK;
    if (opts->plan) {
        sdnn_bucket_spec *copy = malloc((size_t)(opts->nplan > 0 ? opts->nplan : 1) * sizeof *copy);
        if (!copy) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange plan");
            goto fail;
        }
        memcpy(copy, opts->plan, (size_t)opts->nplan * sizeof *copy);
        ex->opts.plan = copy;
    }
    ex->step_params = opts->params;
    ex->seed = opts->params.seed;
    /* Processes of the host backend times local replicas. */
    ex->world = ex->nrep * comm->size;
    ex->nlayers = e->nets[0]->n;
    ex->in = calloc((size_t)ex->nrep, sizeof *ex->in);
    if (!ex->in) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
        goto fail;
    }
    SDNN_CHECKGOTO(build_buckets(ex, opts->bucket_mb), st, fail);
    {
        int *nl = calloc(ex->nb > 0 ? (size_t)ex->nb : 1, sizeof *nl);
        if (!nl) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
            goto fail;
        }
        for (int k = 0; k < ex->nb; ++k) nl[k] = ex->b[k].nlayers;
        sdnn_sched_opts so = {.nrep = ex->nrep, .nbuckets = ex->nb, .nlayers = nl,
                              .overlap = opts->overlap, .threaded = ex->world > 1,
                              .collective = collective, .user = ex, .labels = ex->labels};
        st = sdnn_sched_create(e, &so, &ex->sched);
        free(nl);
        if (st != SDNN_OK) goto fail;
    }
    sdnn_engine_callbacks cb = {.user = ex,
                                .backward_done = cb_backward_done,
                                .before_update = cb_before_update,
                                .nonfinite_input = cb_nonfinite_input,
                                .aborted = cb_aborted,
                                .abort = cb_abort};
    e->ops->set_callbacks(e, &cb);
    *out = ex;
    return SDNN_OK;
fail:
    sdnn_exchange_destroy(ex);
    return st;
}

sdnn_comm *sdnn_exchange_comm(const sdnn_exchange *ex) { return ex->comm; }

void sdnn_exchange_announce(sdnn_exchange *ex)
{
    if (!ex || ex->world < 2 || ex->nb < 1) return;
    const sdnn_codec_ops **codecs = calloc((size_t)ex->nb, sizeof *codecs);
    size_t *counts = calloc((size_t)ex->nb, sizeof *counts);
    if (codecs && counts) {
        for (int k = 0; k < ex->nb; ++k) {
            codecs[k] = ex->b[k].codec;
            counts[k] = ex->b[k].count;
        }
        sdnn_comm_announce(ex->comm, codecs, counts, ex->nb, &ex->opts.params,
                           ex->opts.plan != NULL);
    }
    free(codecs);
    free(counts);
}

sdnn_status sdnn_exchange_create(network **nets, int nrep, sdnn_comm *comm,
                                 const sdnn_exchange_opts *opts, sdnn_exchange **out)
{
    *out = NULL;
    if (nrep < 1 || !nets || !comm || !opts)
        return SDNN_ERROR(SDNN_ERR_INVALID, "exchange needs replicas, a comm and options");
    sdnn_engine *e = NULL;
    SDNN_CHECK(sdnn_engine_create(sdnn_engine_host(), nets, nrep, NULL, &e));
    sdnn_status st = sdnn_exchange_create_on(e, comm, opts, out);
    if (st != SDNN_OK) {
        sdnn_engine_destroy(e);
        return st;
    }
    (*out)->own_eng = 1;
    return SDNN_OK;
}

sdnn_engine *sdnn_exchange_engine(const sdnn_exchange *ex) { return ex->eng; }
int sdnn_exchange_world(const sdnn_exchange *ex) { return ex->world; }
int sdnn_exchange_nbuckets(const sdnn_exchange *ex) { return ex->nb; }

size_t sdnn_exchange_bucket(const sdnn_exchange *ex, int b, int *lo, int *hi)
{
    if (b < 0 || b >= ex->nb) return 0;
    if (lo) *lo = ex->b[b].lo;
    if (hi) *hi = ex->b[b].hi;
    return ex->b[b].count;
}

int sdnn_exchange_layer_bucket(const sdnn_exchange *ex, int layer)
{
    if (layer < 0 || layer >= ex->nlayers) return -1;
    return ex->lay.layer[layer].bucket;
}

const sdnn_codec_ops *sdnn_exchange_bucket_codec(const sdnn_exchange *ex, int b)
{
    if (b < 0 || b >= ex->nb || !ex->b[b].codec) return &sdnn_codec_none;
    return ex->b[b].codec;
}

/* DGC's warm-up: the kept fraction falls geometrically from 1 to the
 * target over topk_warmup iterations. */
double sdnn_exchange_topk_ratio(const sdnn_exchange *ex, int iteration)
{
    double target = ex->opts.params.topk_ratio;
    int w = ex->opts.topk_warmup;
    if (w <= 0 || iteration >= w) return target;
    if (iteration < 0) iteration = 0;
    return pow(target, (double)iteration / (double)w);
}

void sdnn_exchange_step_begin(sdnn_exchange *ex, int iteration)
{
    ex->step_params.topk_ratio = sdnn_exchange_topk_ratio(ex, iteration);
    ex->iteration = iteration;
    sdnn_sched_step_begin(ex->sched, iteration);
}

void sdnn_exchange_replica_begin(sdnn_exchange *ex, int r)
{
    if (ex->world == 1) return;
    sdnn_engine *e = ex->eng;
    for (int i = 0; i < ex->nlayers; ++i) {
        const sdnn_layout_layer *l = &ex->lay.layer[i];
        if (l->bucket < 0) continue;
        e->ops->snapshot(e, r, i, ex->b[l->bucket].snap[r] + l->offset);
    }
}

void sdnn_exchange_abort(sdnn_exchange *ex, sdnn_status s)
{
    (void)sdnn_sched_abort(ex->sched, s);
}

static void report_nonfinite(sdnn_exchange *ex, int r, int layer, const sdnn_engine_bad *bad)
{
    if (!sdnn_sched_abort(ex->sched, SDNN_ERR_NONFINITE)) return;   /* the first report names it */
    SDNN_ERROR(SDNN_ERR_NONFINITE,
               "non-finite gradient in the step to iteration %d: layer %d (%s) %s[%ld] on replica %d; "
               "training stopped, saved weights are left as they were (lower learning_rate, "
               "raise burn_in, or check the input images)",
               ex->iteration, layer, sdnn_layer_type_name(ex->eng->nets[r]->layers[layer].type),
               bad->what ? bad->what : "?", bad->at, r);
}

void sdnn_exchange_report_nonfinite_input(sdnn_exchange *ex, int r, int layer)
{
    if (!sdnn_sched_abort(ex->sched, SDNN_ERR_NONFINITE)) return;
    SDNN_ERROR(SDNN_ERR_NONFINITE,
               "non-finite activations in the step to iteration %d: the input of layer %d (%s) "
               "on replica %d; training stopped, saved weights are left as they were (check "
               "the input images, lower learning_rate or raise burn_in)",
               ex->iteration, layer, sdnn_layer_type_name(ex->eng->nets[r]->layers[layer].type), r);
}

int sdnn_exchange_aborted(sdnn_exchange *ex) { return sdnn_sched_aborted(ex->sched); }

void sdnn_exchange_layer_done(sdnn_exchange *ex, int r, int layer)
{
    const sdnn_layout_layer *l = &ex->lay.layer[layer];
    if (l->bucket < 0 || sdnn_exchange_aborted(ex)) return;
    sdnn_engine *e = ex->eng;
    sdnn_engine_bad bad = {0};
    if (ex->world == 1) {
        if (e->ops->check(e, r, layer, &bad) != 0) report_nonfinite(ex, r, layer, &bad);
        return;
    }
    const int b = l->bucket;
    bucket *bk = &ex->b[b];
    const int track = SDNN_TL_TRACK_REPLICA0 + r;
    double tp = ex->tl ? sdnn_now_s() : 0;
    if (e->ops->pack(e, r, layer, bk->snap[r] + l->offset, bk->pack[r] + l->offset, &bad) != 0) {
        report_nonfinite(ex, r, layer, &bad);
        return;
    }
    if (ex->tl)
        sdnn_timeline_span(ex->tl, track, SDNN_TL_PACK, tp, sdnn_now_s(), ex->iteration, layer, b,
                           NULL);
    if (!sdnn_sched_layer_packed(ex->sched, r, b)) return;
    if (bk->resid) {
        /* This replica's part of the bucket is complete: add what earlier
         * steps did not send, and keep what this one will not, here in the
         * replica's own thread. */
        uint64_t stream = sdnn_stream_mix(ex->seed ^ 0xefefefefull, (uint64_t)ex->iteration,
                                          (uint64_t)b * 4096u + (uint64_t)r);
        double te = ex->tl ? sdnn_now_s() : 0;
        e->ops->ef_step(e, r, bk->codec, &ex->step_params, bk->pack[r], bk->resid[r],
                        bk->vel ? bk->vel[r] : NULL, ex->opts.topk_momentum, bk->count,
                        bk->efbuf[r], stream);
        if (ex->tl)
            sdnn_timeline_span(ex->tl, track, SDNN_TL_ENCODE, te, sdnn_now_s(), ex->iteration, b,
                               (double)bk->count, bk->codec->name);
    }
    sdnn_sched_replica_ready(ex->sched, r, b);
}

int sdnn_exchange_layer_wait(sdnn_exchange *ex, int r, int layer)
{
    const sdnn_layout_layer *l = &ex->lay.layer[layer];
    if (ex->world == 1 || l->bucket < 0) return sdnn_exchange_aborted(ex) ? -1 : 0;
    const int b = l->bucket;
    if (sdnn_sched_wait(ex->sched, r, b, layer) != 0) return -1;
    double t1 = ex->tl ? sdnn_now_s() : 0;
    bucket *bk = &ex->b[b];
    const float *mean = (bk->codec ? bk->outs[r] : bk->mean) + l->offset;
    ex->eng->ops->apply(ex->eng, r, layer, bk->snap[r] + l->offset, mean);
    if (ex->tl)
        sdnn_timeline_span(ex->tl, SDNN_TL_TRACK_REPLICA0 + r, SDNN_TL_UNPACK, t1, sdnn_now_s(),
                           ex->iteration, layer, b, NULL);
    return 0;
}

sdnn_status sdnn_exchange_replica_end(sdnn_exchange *ex, int r)
{
    sdnn_engine *e = ex->eng;
    sdnn_status st = e->ops->sync(e, r);
    if (st == SDNN_OK) return SDNN_OK;
    int layer = -1;
    sdnn_engine_bad bad = {0};
    if (st == SDNN_ERR_NONFINITE && e->ops->nonfinite_at &&
        e->ops->nonfinite_at(e, r, &layer, &bad) && layer >= 0 && layer < ex->nlayers)
        report_nonfinite(ex, r, layer, &bad);   /* the host check's message */
    else
        sdnn_exchange_abort(ex, st);            /* sync's own message */
    return st;
}

void sdnn_exchange_set_overlap(sdnn_exchange *ex, int overlap)
{
    if (ex->sched) sdnn_sched_set_overlap(ex->sched, overlap);
}

int sdnn_exchange_overlap(const sdnn_exchange *ex)
{
    return ex->sched ? sdnn_sched_overlap(ex->sched) : 0;
}

void sdnn_exchange_set_timeline(sdnn_exchange *ex, sdnn_timeline *tl)
{
    ex->tl = tl;
    sdnn_sched_set_timeline(ex->sched, tl);
}

sdnn_status sdnn_exchange_step_end(sdnn_exchange *ex, sdnn_exchange_stats *st)
{
    sdnn_sched_stats ss;
    sdnn_status err = sdnn_sched_step_end(ex->sched, &ss);
    if (st) {
        memset(st, 0, sizeof *st);
        st->bytes = ss.wire;
        st->buckets = ss.exchanged;
        st->exposed_s = ss.exposed_s;
        st->sync_wait_s = ss.sync_wait_s;
        st->comm_s = ss.comm_s;
    }
    return err;
}

/* ---- error-feedback state ------------------------------------------------- */

int sdnn_exchange_has_ef(const sdnn_exchange *ex) { return ex->has_ef; }

float *sdnn_exchange_ef_residual(sdnn_exchange *ex, int r, int b, float **velocity)
{
    if (velocity) *velocity = NULL;
    if (r < 0 || r >= ex->nrep || b < 0 || b >= ex->nb || !ex->b[b].resid) return NULL;
    if (velocity && ex->b[b].vel) *velocity = ex->b[b].vel[r];
    return ex->b[b].resid[r];
}

static float *ef_buffer(const sdnn_exchange *ex, int r, int b, int which)
{
    const bucket *bk = &ex->b[b];
    if (!bk->resid) return NULL;
    if (which == SDNN_EF_VELOCITY) return bk->vel ? bk->vel[r] : NULL;
    return bk->resid[r];
}

static sdnn_status ef_read(void *user, int r, int b, int which, float *host, size_t n)
{
    const sdnn_exchange *ex = user;
    const float *src = ef_buffer(ex, r, b, which);
    if (!src) return SDNN_ERROR(SDNN_ERR_INTERNAL, "bucket %d keeps no error-feedback state", b);
    return ex->eng->ops->buf_read(ex->eng, r, src, host, n);
}

static sdnn_status ef_write(void *user, int r, int b, int which, const float *host, size_t n)
{
    const sdnn_exchange *ex = user;
    float *dst = ef_buffer(ex, r, b, which);
    if (!dst) return SDNN_ERROR(SDNN_ERR_INTERNAL, "bucket %d keeps no error-feedback state", b);
    return ex->eng->ops->buf_write(ex->eng, r, dst, host, n);
}

static sdnn_ef_view ef_view(const sdnn_exchange *ex)
{
    sdnn_ef_view v = {.nrep = ex->nrep,
                      .nbuckets = ex->nb,
                      .velocity = ex->opts.topk_momentum > 0,
                      .codec = ex->opts.codec ? ex->opts.codec->name : "none",
                      .count = ex->efcount,
                      .user = (void *)ex,
                      .read = ef_read,
                      .write = ef_write};
    return v;
}

sdnn_status sdnn_exchange_ef_save(const sdnn_exchange *ex, const char *path, uint64_t seen)
{
    if (!ex->has_ef) return SDNN_OK;
    sdnn_ef_view v = ef_view(ex);
    return sdnn_ef_save(&v, path, seen);
}

sdnn_status sdnn_exchange_ef_load(sdnn_exchange *ex, const char *path, uint64_t seen)
{
    sdnn_ef_view v = ef_view(ex);
    return sdnn_ef_load(&v, path, seen);
}

/* One layer's slice of replica r's buffer `which` from src to dst, through
 * host memory (tmp). */
static sdnn_status carry_slice(sdnn_exchange *dst, const sdnn_exchange *src, int r, int which,
                               const sdnn_layout_layer *to, const sdnn_layout_layer *from,
                               float *tmp)
{
    const float *s = ef_buffer(src, r, from->bucket, which);
    float *d = ef_buffer(dst, r, to->bucket, which);
    if (!s || !d) return SDNN_OK;
    SDNN_CHECK(src->eng->ops->buf_read(src->eng, r, s + from->offset, tmp, to->count));
    return dst->eng->ops->buf_write(dst->eng, r, d + to->offset, tmp, to->count);
}

int sdnn_exchange_carry_ef(sdnn_exchange *dst, const sdnn_exchange *src)
{
    if (!dst->has_ef || !src->has_ef || dst->nrep != src->nrep || dst->nlayers != src->nlayers)
        return 0;
    size_t most = 0;
    for (int i = 0; i < dst->nlayers; ++i)
        if (dst->lay.layer[i].count > most) most = dst->lay.layer[i].count;
    float *tmp = malloc((most ? most : 1) * sizeof *tmp);
    if (!tmp) return 0;
    int carried = 0;
    for (int i = 0; i < dst->nlayers; ++i) {
        const sdnn_layout_layer *a = &src->lay.layer[i], *b = &dst->lay.layer[i];
        if (a->bucket < 0 || b->bucket < 0) continue;
        if (!src->b[a->bucket].resid || !dst->b[b->bucket].resid) continue;
        int ok = 1;
        for (int r = 0; ok && r < dst->nrep; ++r) {
            ok = carry_slice(dst, src, r, SDNN_EF_RESIDUAL, b, a, tmp) == SDNN_OK;
            if (ok && dst->b[b->bucket].vel && src->b[a->bucket].vel)
                ok = carry_slice(dst, src, r, SDNN_EF_VELOCITY, b, a, tmp) == SDNN_OK;
        }
        carried += ok;
    }
    free(tmp);
    return carried;
}
