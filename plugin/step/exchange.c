/*
 * exchange: buckets, the comm thread and the per-step protocol (see
 * exchange.h).  All shared state is guarded by one mutex; the heavy work
 * (packing, unpacking, the reduction) runs outside it.  The comm thread is
 * fed through a FIFO of bucket numbers so buckets cross the link in the
 * order their gradients became ready.
 */
#include "exchange.h"
#include "clock.h"
#include "collective.h"
#include "replicas.h"
#include "saveio.h"
#include "timeline.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    int bucket;            /* -1: not exchanged */
    size_t offset;         /* first float of this layer in its bucket */
    int np;
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER]; /* replica 0's views; others via rp */
} slot;

typedef struct bucket {
    int lo, hi;            /* layers hi down to lo */
    size_t count;
    float **pack;          /* [nrep] fresh gradients */
    float **snap;          /* [nrep] snapshots */
    float *mean;           /* uncompressed: the mean every replica reads */
    const sdnn_codec_ops *codec; /* NULL: uncompressed */
    float **outs;          /* compressed: [nrep] each replica's decoded mean */
    float **resid;         /* error feedback: [nrep] residuals, NULL without */
    float **vel;           /* momentum correction: [nrep] velocities */
    unsigned char **efbuf; /* error feedback: [nrep] encode scratch */
    int *rem_r;            /* [nrep] layers of this bucket each replica still owes */
    int remaining;         /* layer x replica completions still expected */
    int nlayers;
    int done;
    double ready_t;        /* when the last replica packed it */
} bucket;

struct sdnn_exchange {
    network **nets;
    int nrep;
    sdnn_comm *comm;
    int overlap;
    int world;
    int nlayers;
    slot *slots;                       /* [nlayers] */
    sdnn_param *rp;                    /* [nrep][nlayers][MAX] */
    int nb;
    bucket *b;
    size_t total;                      /* floats exchanged per replica */
    sdnn_exchange_opts opts;
    sdnn_codec_params step_params;     /* this step's (topk ratio warm-up) */
    uint64_t seed;
    int has_ef;

    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* bucket done, abort */
    pthread_cond_t qcv;                /* queue has work, stop */
    pthread_t thread;
    int thread_started;
    int stop;
    int *queue;
    int qhead, qtail;
    int buckets_ready;
    int aborted;
    sdnn_status err;
    int iteration;
    double *wait_s;                    /* [nrep] waits on the exchange itself */
    double *sync_s;                    /* [nrep] waits for slower replicas */
    double comm_s;
    int exchanged;
    size_t wire;                       /* bytes sent between ranks this step */
    sdnn_timeline *tl;                 /* NULL: no timeline */
};

#define SDNN_STREAM_SEED 0x5ca1ed5ca1edull

static sdnn_param *rparams(sdnn_exchange *ex, int r, int layer)
{
    return ex->rp + ((size_t)r * (size_t)ex->nlayers + (size_t)layer) * SDNN_MAX_PARAMS_PER_LAYER;
}

static void *comm_main(void *arg)
{
    sdnn_exchange *ex = arg;
    const float **in = calloc((size_t)ex->nrep, sizeof *in);
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        while (!ex->stop && ex->qhead == ex->qtail) pthread_cond_wait(&ex->qcv, &ex->mu);
        if (ex->stop) break;
        int k = ex->queue[ex->qhead++];
        int aborted = ex->aborted;
        pthread_mutex_unlock(&ex->mu);

        sdnn_status st = SDNN_OK;
        size_t wire = 0;
        double t0 = sdnn_now_s();
        if (!aborted) {
            bucket *bk = &ex->b[k];
            if (!in) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory in the comm thread");
            } else if (bk->codec) {
                for (int r = 0; r < ex->nrep; ++r) in[r] = bk->pack[r];
                uint64_t stream = sdnn_stream_mix(ex->seed, (uint64_t)ex->iteration, (uint64_t)k);
                st = sdnn_comm_allreduce_mean_coded(ex->comm, bk->codec, &ex->step_params,
                                                         stream, in, ex->nrep, bk->outs,
                                                         bk->count, &wire);
            } else {
                for (int r = 0; r < ex->nrep; ++r) in[r] = bk->pack[r];
                /* wire: what a ring sends (sdnn_comm_allreduce_mean). */
                st = sdnn_comm_allreduce_mean(ex->comm, in, ex->nrep, bk->mean, bk->count, &wire);
            }
        }
        double t1 = sdnn_now_s();
        if (ex->tl) {
            const sdnn_codec_ops *c = ex->b[k].codec;
            sdnn_timeline_span(ex->tl, SDNN_TL_TRACK_COMM, SDNN_TL_ALLREDUCE, t0, t1,
                               ex->iteration, k, (double)wire, c ? c->name : "none");
        }

        pthread_mutex_lock(&ex->mu);
        ex->comm_s += t1 - t0;
        ex->wire += wire;
        ex->exchanged++;
        ex->b[k].done = 1;
        if (st != SDNN_OK && !ex->aborted) {
            ex->aborted = 1;
            ex->err = st;
        }
        pthread_cond_broadcast(&ex->cv);
    }
    pthread_mutex_unlock(&ex->mu);
    free(in);
    return NULL;
}

static void free_buckets(sdnn_exchange *ex)
{
    if (!ex->b) return;
    for (int k = 0; k < ex->nb; ++k) {
        bucket *bk = &ex->b[k];
        for (int r = 0; r < ex->nrep; ++r) {
            if (bk->pack) free(bk->pack[r]);
            if (bk->snap) free(bk->snap[r]);
            if (bk->outs && r > 0) free(bk->outs[r]);   /* outs[0] is mean */
            if (bk->resid) free(bk->resid[r]);
            if (bk->vel) free(bk->vel[r]);
            if (bk->efbuf) free(bk->efbuf[r]);
        }
        free(bk->pack);
        free(bk->snap);
        free(bk->mean);
        free(bk->outs);
        free(bk->resid);
        free(bk->vel);
        free(bk->efbuf);
        free(bk->rem_r);
    }
    free(ex->b);
    ex->b = NULL;
}

void sdnn_exchange_destroy(sdnn_exchange *ex)
{
    if (!ex) return;
    if (ex->thread_started) {
        pthread_mutex_lock(&ex->mu);
        ex->stop = 1;
        pthread_cond_broadcast(&ex->qcv);
        pthread_mutex_unlock(&ex->mu);
        pthread_join(ex->thread, NULL);
    }
    free_buckets(ex);
    free((void *)ex->opts.plan);
    free(ex->slots);
    free(ex->rp);
    free(ex->queue);
    free(ex->wait_s);
    free(ex->sync_s);
    pthread_mutex_destroy(&ex->mu);
    pthread_cond_destroy(&ex->cv);
    pthread_cond_destroy(&ex->qcv);
    free(ex);
}

/* Layers at or before the last stopbackward layer never run backward: their
 * gradients are never fresh, so they are not exchanged. */
static int first_trained_layer(const network *net)
{
    int first = 0;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;
    return first;
}

static sdnn_status build_slots(sdnn_exchange *ex)
{
    int first = first_trained_layer(ex->nets[0]);
    for (int i = 0; i < ex->nlayers; ++i) {
        slot *s = &ex->slots[i];
        s->bucket = -1;
        for (int r = 0; r < ex->nrep; ++r) {
            const layer *l = &ex->nets[r]->layers[i];
            int np = sdnn_layer_params(l, rparams(ex, r, i));
            if (np < 0)
                return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                  "layer %d (%s) has parameters scalednn cannot exchange yet; "
                                  "use mode=stock for this network",
                                  i, sdnn_layer_type_name(l->type));
            if (r == 0) s->np = np;
            else if (np != s->np)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "replica %d layer %d differs", r, i);
        }
        memcpy(s->p, rparams(ex, 0, i), sizeof s->p);
        if (i < first) s->np = 0;
    }
    return SDNN_OK;
}

static size_t slot_floats(const slot *s)
{
    size_t n = 0;
    for (int j = 0; j < s->np; ++j) n += s->p[j].n;
    return n;
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
    for (int r = 1; r < ex->nrep; ++r)
        if (!(bk->outs[r] = malloc(bk->count * sizeof(float))))
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
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
    for (int r = 0; r < ex->nrep; ++r) {
        bk->resid[r] = calloc(bk->count, sizeof(float));
        bk->efbuf[r] = malloc(enc ? enc : 1);
        if (bk->vel) bk->vel[r] = calloc(bk->count, sizeof(float));
        if (!bk->resid[r] || !bk->efbuf[r] || (bk->vel && !bk->vel[r]))
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
    }
    return SDNN_OK;
}

/* Put layer i at the end of bucket k. */
static void assign(sdnn_exchange *ex, int k, int i, size_t n)
{
    slot *s = &ex->slots[i];
    if (ex->b[k].nlayers == 0) {
        ex->b[k].hi = i;
        ex->b[k].count = 0;
    }
    s->bucket = k;
    s->offset = ex->b[k].count;
    ex->b[k].count += n;
    ex->b[k].lo = i;
    ex->b[k].nlayers++;
}

/* Buckets from an explicit plan: checked to cover every exchanged layer
 * once, in exchange order, none empty. */
static sdnn_status plan_buckets(sdnn_exchange *ex)
{
    const sdnn_bucket_spec *sp = ex->opts.plan;
    int above = ex->nlayers;
    for (int k = 0; k < ex->opts.nplan; ++k) {
        if (sp[k].lo < 0 || sp[k].hi < sp[k].lo || sp[k].hi >= above)
            return SDNN_ERROR(SDNN_ERR_INVALID, "plan bucket %d: layers %d..%d are not below "
                              "the previous bucket's (%d)", k, sp[k].hi, sp[k].lo, above);
        for (int i = sp[k].hi + 1; i < above; ++i)
            if (slot_floats(&ex->slots[i]))
                return SDNN_ERROR(SDNN_ERR_INVALID, "plan leaves layer %d out", i);
        for (int i = sp[k].hi; i >= sp[k].lo; --i) {
            size_t n = slot_floats(&ex->slots[i]);
            if (n) assign(ex, k, i, n);
        }
        if (ex->b[k].nlayers == 0)
            return SDNN_ERROR(SDNN_ERR_INVALID, "plan bucket %d (layers %d..%d) exchanges nothing",
                              k, sp[k].hi, sp[k].lo);
        above = sp[k].lo;
    }
    for (int i = above - 1; i >= 0; --i)
        if (slot_floats(&ex->slots[i]))
            return SDNN_ERROR(SDNN_ERR_INVALID, "plan leaves layer %d out", i);
    ex->nb = ex->opts.nplan;
    return SDNN_OK;
}

static sdnn_status build_buckets(sdnn_exchange *ex, double bucket_mb)
{
    size_t target = (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    if (target < 1) target = 1;
    int cap = ex->nlayers + 1;
    if (ex->opts.plan && ex->opts.nplan > cap) cap = ex->opts.nplan;
    ex->b = calloc((size_t)cap, sizeof *ex->b);
    if (!ex->b) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for buckets");
    if (ex->opts.plan) {
        SDNN_CHECK(plan_buckets(ex));
    } else {
        int k = -1;
        for (int i = ex->nlayers - 1; i >= 0; --i) {
            size_t n = slot_floats(&ex->slots[i]);
            if (n == 0) continue;
            if (k < 0 || ex->b[k].count >= target) ++k;
            assign(ex, k, i, n);
        }
        ex->nb = k + 1;
    }
    ex->total = 0;
    for (int k = 0; k < ex->nb; ++k) {
        bucket *bk = &ex->b[k];
        ex->total += bk->count;
        if (ex->world == 1) continue;   /* nothing to pack for a world of one */
        bk->pack = calloc((size_t)ex->nrep, sizeof *bk->pack);
        bk->snap = calloc((size_t)ex->nrep, sizeof *bk->snap);
        bk->mean = malloc(bk->count * sizeof(float));
        bk->rem_r = calloc((size_t)ex->nrep, sizeof *bk->rem_r);
        if (!bk->pack || !bk->snap || !bk->mean || !bk->rem_r)
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
        const sdnn_codec_ops *c = ex->opts.plan ? ex->opts.plan[k].codec : ex->opts.codec;
        if (c && c != &sdnn_codec_none &&
            (double)bk->count * sizeof(float) >= ex->opts.compress_min_kb * 1024.0) {
            bk->codec = c;
            SDNN_CHECK(alloc_coded(ex, k));
        }
        for (int r = 0; r < ex->nrep; ++r) {
            bk->pack[r] = malloc(bk->count * sizeof(float));
            bk->snap[r] = malloc(bk->count * sizeof(float));
            if (!bk->pack[r] || !bk->snap[r])
                return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
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

sdnn_status sdnn_exchange_create(network **nets, int nrep, sdnn_comm *comm,
                                 const sdnn_exchange_opts *opts, sdnn_exchange **out)
{
    *out = NULL;
    if (nrep < 1 || !comm || !opts)
        return SDNN_ERROR(SDNN_ERR_INVALID, "exchange needs replicas, a comm and options");
    double bucket_mb = opts->bucket_mb;
    int overlap = opts->overlap;
    if (!(bucket_mb > 0) && !opts->plan)
        return SDNN_ERROR(SDNN_ERR_INVALID, "bucket_mb must be > 0 (or an explicit plan)");
    if (opts->codec && opts->codec != &sdnn_codec_none && !sdnn_comm_has_coded(comm))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "comm backend %s has no compressed allreduce",
                          sdnn_comm_name(comm));
    sdnn_exchange *ex = calloc(1, sizeof *ex);
    if (!ex) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->cv, NULL);
    pthread_cond_init(&ex->qcv, NULL);
    ex->nets = nets;
    ex->nrep = nrep;
    ex->comm = comm;
    ex->opts = *opts;
    if (opts->plan) {
        sdnn_bucket_spec *copy = malloc((size_t)(opts->nplan > 0 ? opts->nplan : 1) * sizeof *copy);
        if (!copy) {
            free(ex);
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange plan");
        }
        memcpy(copy, opts->plan, (size_t)opts->nplan * sizeof *copy);
        ex->opts.plan = copy;
    }
    ex->step_params = opts->params;
    ex->seed = opts->params.seed;
    ex->overlap = overlap;
    ex->world = nrep * comm->size;
    ex->nlayers = nets[0]->n;
    ex->slots = calloc((size_t)ex->nlayers, sizeof *ex->slots);
    ex->rp = calloc((size_t)nrep * (size_t)ex->nlayers * SDNN_MAX_PARAMS_PER_LAYER, sizeof *ex->rp);
    ex->wait_s = calloc((size_t)nrep, sizeof *ex->wait_s);
    ex->sync_s = calloc((size_t)nrep, sizeof *ex->sync_s);
    ex->queue = calloc((size_t)ex->nlayers + 1, sizeof *ex->queue);
    sdnn_status st = SDNN_OK;
    if (!ex->slots || !ex->rp || !ex->wait_s || !ex->sync_s || !ex->queue) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
        goto fail;
    }
    SDNN_CHECKGOTO(build_slots(ex), st, fail);
    SDNN_CHECKGOTO(build_buckets(ex, bucket_mb), st, fail);
    if (ex->world > 1) {
        if (pthread_create(&ex->thread, NULL, comm_main, ex) != 0) {
            st = SDNN_ERROR(SDNN_ERR_SYSTEM, "cannot start the comm thread");
            goto fail;
        }
        ex->thread_started = 1;
    }
    *out = ex;
    return SDNN_OK;
fail:
    sdnn_exchange_destroy(ex);
    return st;
}

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
    return ex->slots[layer].bucket;
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
    pthread_mutex_lock(&ex->mu);
    for (int k = 0; k < ex->nb; ++k) {
        ex->b[k].remaining = ex->b[k].nlayers * ex->nrep;
        ex->b[k].done = 0;
        ex->b[k].ready_t = 0;
        for (int r = 0; ex->b[k].rem_r && r < ex->nrep; ++r) ex->b[k].rem_r[r] = ex->b[k].nlayers;
    }
    ex->step_params.topk_ratio = sdnn_exchange_topk_ratio(ex, iteration);
    ex->wire = 0;
    ex->qhead = ex->qtail = 0;
    ex->buckets_ready = 0;
    ex->aborted = 0;
    ex->err = SDNN_OK;
    ex->iteration = iteration;
    for (int r = 0; r < ex->nrep; ++r) ex->wait_s[r] = ex->sync_s[r] = 0;
    ex->comm_s = 0;
    ex->exchanged = 0;
    pthread_mutex_unlock(&ex->mu);
}

void sdnn_exchange_replica_begin(sdnn_exchange *ex, int r)
{
    if (ex->world == 1) return;
    for (int i = 0; i < ex->nlayers; ++i) {
        const slot *s = &ex->slots[i];
        if (s->bucket < 0) continue;
        float *dst = ex->b[s->bucket].snap[r] + s->offset;
        const sdnn_param *p = rparams(ex, r, i);
        for (int j = 0; j < s->np; ++j) {
            memcpy(dst, p[j].upd, p[j].n * sizeof(float));
            dst += p[j].n;
        }
    }
}

/* Stop the step; 1 for the caller that stopped it first. */
static int claim_abort(sdnn_exchange *ex, sdnn_status s)
{
    pthread_mutex_lock(&ex->mu);
    int first = !ex->aborted;
    if (first) {
        ex->aborted = 1;
        ex->err = s;
    }
    pthread_cond_broadcast(&ex->cv);
    pthread_mutex_unlock(&ex->mu);
    return first;
}

void sdnn_exchange_abort(sdnn_exchange *ex, sdnn_status s)
{
    (void)claim_abort(ex, s);
}

static long first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

static void report_nonfinite(sdnn_exchange *ex, int r, int layer, const sdnn_param *p, long at)
{
    if (!claim_abort(ex, SDNN_ERR_NONFINITE)) return;   /* the first report names it */
    SDNN_ERROR(SDNN_ERR_NONFINITE,
               "non-finite gradient in the step to iteration %d: layer %d (%s) %s[%ld] on replica %d; "
               "training stopped, saved weights are left as they were (lower learning_rate, "
               "raise burn_in, or check the input images)",
               ex->iteration, layer, sdnn_layer_type_name(ex->nets[r]->layers[layer].type),
               p->what, at, r);
}

void sdnn_exchange_report_nonfinite_input(sdnn_exchange *ex, int r, int layer)
{
    if (!claim_abort(ex, SDNN_ERR_NONFINITE)) return;
    SDNN_ERROR(SDNN_ERR_NONFINITE,
               "non-finite activations in the step to iteration %d: the input of layer %d (%s) "
               "on replica %d; training stopped, saved weights are left as they were (check "
               "the input images, lower learning_rate or raise burn_in)",
               ex->iteration, layer, sdnn_layer_type_name(ex->nets[r]->layers[layer].type), r);
}

int sdnn_exchange_aborted(sdnn_exchange *ex)
{
    pthread_mutex_lock(&ex->mu);
    int a = ex->aborted;
    pthread_mutex_unlock(&ex->mu);
    return a;
}

/* Queue bucket k (mutex held). */
static void enqueue(sdnn_exchange *ex, int k)
{
    ex->b[k].ready_t = sdnn_now_s();
    ex->queue[ex->qtail++] = k;
    pthread_cond_signal(&ex->qcv);
}

void sdnn_exchange_layer_done(sdnn_exchange *ex, int r, int layer)
{
    const slot *s = &ex->slots[layer];
    if (s->bucket < 0 || sdnn_exchange_aborted(ex)) return;
    const sdnn_param *p = rparams(ex, r, layer);
    if (ex->world == 1) {
        for (int j = 0; j < s->np; ++j) {
            long at = first_nonfinite(p[j].upd, p[j].n);
            if (at >= 0) {
                report_nonfinite(ex, r, layer, &p[j], at);
                return;
            }
        }
        return;
    }
    bucket *bk = &ex->b[s->bucket];
    float *dst = bk->pack[r] + s->offset;
    const float *snap = bk->snap[r] + s->offset;
    const int track = SDNN_TL_TRACK_REPLICA0 + r;
    double tp = ex->tl ? sdnn_now_s() : 0;
    for (int j = 0; j < s->np; ++j) {
        const float *u = p[j].upd;
        int bad = 0;
        for (size_t e = 0; e < p[j].n; ++e) {
            float g = u[e] - snap[e];
            bad |= !isfinite(g);
            dst[e] = g;
        }
        if (bad) {
            report_nonfinite(ex, r, layer, &p[j], first_nonfinite(dst, p[j].n));
            return;
        }
        dst += p[j].n;
        snap += p[j].n;
    }
    if (ex->tl)
        sdnn_timeline_span(ex->tl, track, SDNN_TL_PACK, tp, sdnn_now_s(), ex->iteration, layer,
                           s->bucket, NULL);
    pthread_mutex_lock(&ex->mu);
    int mine_done = --bk->rem_r[r] == 0;
    pthread_mutex_unlock(&ex->mu);
    if (mine_done && bk->resid) {
        /* This replica's part of the bucket is complete: add what earlier
         * steps did not send, and keep what this one will not, here in the
         * replica's own thread. */
        uint64_t stream = sdnn_stream_mix(ex->seed ^ 0xefefefefull, (uint64_t)ex->iteration,
                                          (uint64_t)s->bucket * 4096u + (uint64_t)r);
        double te = ex->tl ? sdnn_now_s() : 0;
        sdnn_codec_ef_step(bk->codec, &ex->step_params, bk->pack[r], bk->resid[r],
                           bk->vel ? bk->vel[r] : NULL, ex->opts.topk_momentum, bk->count,
                           bk->efbuf[r], stream);
        if (ex->tl)
            sdnn_timeline_span(ex->tl, track, SDNN_TL_ENCODE, te, sdnn_now_s(), ex->iteration,
                               s->bucket, (double)bk->count, bk->codec->name);
    }
    pthread_mutex_lock(&ex->mu);
    if (--bk->remaining == 0) {
        if (ex->overlap) {
            enqueue(ex, s->bucket);
        } else if (++ex->buckets_ready == ex->nb) {
            for (int k = 0; k < ex->nb; ++k) enqueue(ex, k);
        }
    }
    pthread_mutex_unlock(&ex->mu);
}

int sdnn_exchange_layer_wait(sdnn_exchange *ex, int r, int layer)
{
    const slot *s = &ex->slots[layer];
    if (ex->world == 1 || s->bucket < 0) {
        int aborted;
        pthread_mutex_lock(&ex->mu);
        aborted = ex->aborted;
        pthread_mutex_unlock(&ex->mu);
        return aborted ? -1 : 0;
    }
    bucket *bk = &ex->b[s->bucket];
    double t0 = sdnn_now_s();
    pthread_mutex_lock(&ex->mu);
    while (!bk->done && !ex->aborted) pthread_cond_wait(&ex->cv, &ex->mu);
    int aborted = ex->aborted;
    /* Until the bucket was ready the replica waited for slower replicas;
     * after that, for the exchange itself. */
    double t1 = sdnn_now_s();
    double ready = bk->ready_t;
    if (ready > t0) {
        ex->sync_s[r] += ready - t0;
        ex->wait_s[r] += t1 - ready;
    } else {
        ex->wait_s[r] += t1 - t0;
    }
    pthread_mutex_unlock(&ex->mu);
    const int track = SDNN_TL_TRACK_REPLICA0 + r;
    if (ex->tl) {
        /* The same readings as the counters above: the spans of a step add
         * up to its sync_wait_s and exposed_s. */
        if (ready > t0)
            sdnn_timeline_span(ex->tl, track, SDNN_TL_SYNC_WAIT, t0, ready, ex->iteration, layer,
                               s->bucket, NULL);
        sdnn_timeline_span(ex->tl, track, SDNN_TL_EXCHANGE_WAIT, ready > t0 ? ready : t0, t1,
                           ex->iteration, layer, s->bucket, NULL);
    }
    if (aborted) return -1;
    const float *mean = (bk->codec ? bk->outs[r] : bk->mean) + s->offset;
    const float *snap = bk->snap[r] + s->offset;
    const sdnn_param *p = rparams(ex, r, layer);
    for (int j = 0; j < s->np; ++j) {
        float *u = p[j].upd;
        for (size_t e = 0; e < p[j].n; ++e) u[e] = snap[e] + mean[e];
        mean += p[j].n;
        snap += p[j].n;
    }
    if (ex->tl)
        sdnn_timeline_span(ex->tl, track, SDNN_TL_UNPACK, t1, sdnn_now_s(), ex->iteration, layer,
                           s->bucket, NULL);
    return 0;
}

void sdnn_exchange_set_timeline(sdnn_exchange *ex, sdnn_timeline *tl)
{
    pthread_mutex_lock(&ex->mu);
    ex->tl = tl;
    pthread_mutex_unlock(&ex->mu);
}

sdnn_status sdnn_exchange_step_end(sdnn_exchange *ex, sdnn_exchange_stats *st)
{
    pthread_mutex_lock(&ex->mu);
    /* Every queued bucket must be through the comm thread before the next
     * step reuses the buffers; after an abort it skips the work, so this
     * wait is short. */
    while (ex->world > 1 && ex->exchanged < ex->qtail)
        pthread_cond_wait(&ex->cv, &ex->mu);
    sdnn_status err = ex->aborted ? (ex->err != SDNN_OK ? ex->err : SDNN_ERR_ABORTED) : SDNN_OK;
    if (st) {
        memset(st, 0, sizeof *st);
        if (ex->world > 1 && !ex->aborted) {
            st->bytes = ex->wire;
            st->buckets = ex->exchanged;
        }
        for (int r = 0; r < ex->nrep; ++r) {
            if (ex->wait_s[r] > st->exposed_s) st->exposed_s = ex->wait_s[r];
            if (ex->sync_s[r] > st->sync_wait_s) st->sync_wait_s = ex->sync_s[r];
        }
        st->comm_s = ex->comm_s;
    }
    pthread_mutex_unlock(&ex->mu);
    if (err == SDNN_OK && ex->world > 1 && ex->exchanged != ex->nb)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "step ended with %d of %d buckets exchanged",
                          ex->exchanged, ex->nb);
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

#define EF_MAGIC "SDNNEF01"

typedef struct ef_header {
    char magic[8];
    uint32_t nrep;
    uint32_t nbuckets;
    uint32_t velocity;     /* 1 when velocities follow each residual */
    uint32_t reserved;
    uint64_t seen;
    char codec[16];
} ef_header;

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The file's size for this exchange, and the header it must carry. */
static size_t ef_layout(const sdnn_exchange *ex, uint64_t seen, ef_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, EF_MAGIC, 8);
    h->nrep = (uint32_t)ex->nrep;
    h->nbuckets = (uint32_t)ex->nb;
    h->velocity = ex->opts.topk_momentum > 0;
    h->seen = seen;
    snprintf(h->codec, sizeof h->codec, "%s", ex->opts.codec ? ex->opts.codec->name : "none");
    size_t floats = 0;
    for (int k = 0; k < ex->nb; ++k)
        if (ex->b[k].resid) floats += ex->b[k].count * (h->velocity ? 2u : 1u);
    return sizeof *h + (size_t)ex->nb * sizeof(uint64_t) +
           floats * (size_t)ex->nrep * sizeof(float) + sizeof(uint64_t);
}

sdnn_status sdnn_exchange_ef_save(const sdnn_exchange *ex, const char *path, uint64_t seen)
{
    if (!ex->has_ef) return SDNN_OK;
    ef_header h;
    size_t size = ef_layout(ex, seen, &h);
    unsigned char *buf = malloc(size), *p = buf;
    if (!buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to save %s (%zu bytes)", path, size);
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int k = 0; k < ex->nb; ++k) {
        uint64_t n = ex->b[k].resid ? ex->b[k].count : 0;
        memcpy(p, &n, sizeof n);
        p += sizeof n;
    }
    for (int r = 0; r < ex->nrep; ++r)
        for (int k = 0; k < ex->nb; ++k) {
            const bucket *bk = &ex->b[k];
            if (!bk->resid) continue;
            memcpy(p, bk->resid[r], bk->count * sizeof(float));
            p += bk->count * sizeof(float);
            if (h.velocity) {
                memcpy(p, bk->vel[r], bk->count * sizeof(float));
                p += bk->count * sizeof(float);
            }
        }
    uint64_t sum = fnv1a(buf, (size_t)(p - buf));
    memcpy(p, &sum, sizeof sum);
    sdnn_status st = sdnn_write_file_atomic(path, buf, size);
    free(buf);
    return st;
}

sdnn_status sdnn_exchange_ef_load(sdnn_exchange *ex, const char *path, uint64_t seen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ef_header want;
    size_t size = ef_layout(ex, seen, &want);
    unsigned char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read %s", path);
    }
    size_t got = fread(buf, 1, size + 1, f);
    fclose(f);
    sdnn_status st = SDNN_OK;
    ef_header h;
    if (got < sizeof h) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: %zu bytes, too short for an error-feedback file",
                        path, got);
        goto out;
    }
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, EF_MAGIC, 8) != 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: not a scalednn error-feedback file", path);
        goto out;
    }
    if (h.nrep != want.nrep || h.nbuckets != want.nbuckets || h.velocity != want.velocity ||
        strncmp(h.codec, want.codec, sizeof h.codec) != 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: saved for %u replicas, %u buckets, compress=%.16s%s; this run has "
                        "%u replicas, %u buckets, compress=%.16s%s",
                        path, h.nrep, h.nbuckets, h.codec, h.velocity ? " with momentum" : "",
                        want.nrep, want.nbuckets, want.codec, want.velocity ? " with momentum" : "");
        goto out;
    }
    if (h.seen != seen) {
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: saved at %llu images seen, the weights are at %llu (saved by "
                        "another run, or the save was interrupted between the two files)",
                        path, (unsigned long long)h.seen, (unsigned long long)seen);
        goto out;
    }
    const unsigned char *p = buf + sizeof h;
    for (int k = 0; k < ex->nb; ++k) {
        uint64_t n;
        memcpy(&n, p, sizeof n);
        p += sizeof n;
        uint64_t expect = ex->b[k].resid ? ex->b[k].count : 0;
        if (n != expect) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: bucket %d holds %llu values, this run's has %llu "
                            "(different cfg or bucket_mb)", path, k, (unsigned long long)n,
                            (unsigned long long)expect);
            goto out;
        }
    }
    if (got != size) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: %zu bytes, expected %zu", path, got, size);
        goto out;
    }
    uint64_t sum;
    memcpy(&sum, buf + size - sizeof sum, sizeof sum);
    if (sum != fnv1a(buf, size - sizeof sum)) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: checksum mismatch (the file is damaged)", path);
        goto out;
    }
    for (int r = 0; r < ex->nrep; ++r)
        for (int k = 0; k < ex->nb; ++k) {
            bucket *bk = &ex->b[k];
            if (!bk->resid) continue;
            memcpy(bk->resid[r], p, bk->count * sizeof(float));
            p += bk->count * sizeof(float);
            if (want.velocity) {
                memcpy(bk->vel[r], p, bk->count * sizeof(float));
                p += bk->count * sizeof(float);
            }
        }
out:
    free(buf);
    return st;
}

int sdnn_exchange_carry_ef(sdnn_exchange *dst, const sdnn_exchange *src)
{
    if (!dst->has_ef || !src->has_ef || dst->nrep != src->nrep || dst->nlayers != src->nlayers)
        return 0;
    int carried = 0;
    for (int i = 0; i < dst->nlayers; ++i) {
        const slot *a = &src->slots[i], *b = &dst->slots[i];
        if (a->bucket < 0 || b->bucket < 0) continue;
        const bucket *from = &src->b[a->bucket];
        bucket *to = &dst->b[b->bucket];
        if (!from->resid || !to->resid) continue;
        size_t n = slot_floats(b);
        for (int r = 0; r < dst->nrep; ++r) {
            memcpy(to->resid[r] + b->offset, from->resid[r] + a->offset, n * sizeof(float));
            if (to->vel && from->vel)
                memcpy(to->vel[r] + b->offset, from->vel[r] + a->offset, n * sizeof(float));
        }
        carried++;
    }
    return carried;
}
