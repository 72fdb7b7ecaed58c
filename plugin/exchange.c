/*
 * exchange: buckets, the comm thread and the per-step protocol (see
 * exchange.h).  All shared state is guarded by one mutex; the heavy work
 * (packing, unpacking, the reduction) runs outside it.  The comm thread is
 * fed through a FIFO of bucket numbers so buckets cross the link in the
 * order their gradients became ready.
 */
#include "exchange.h"
#include "clock.h"
#include "replicas.h"

#include <math.h>
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
    float *mean;
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
};

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
        double t0 = sdnn_now_s();
        if (!aborted) {
            bucket *bk = &ex->b[k];
            if (!in) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory in the comm thread");
            } else {
                for (int r = 0; r < ex->nrep; ++r) in[r] = bk->pack[r];
                st = ex->comm->ops->allreduce_mean(ex->comm, in, ex->nrep, bk->mean, bk->count);
            }
        }
        double t1 = sdnn_now_s();

        pthread_mutex_lock(&ex->mu);
        ex->comm_s += t1 - t0;
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
        for (int r = 0; bk->pack && r < ex->nrep; ++r) free(bk->pack[r]);
        for (int r = 0; bk->snap && r < ex->nrep; ++r) free(bk->snap[r]);
        free(bk->pack);
        free(bk->snap);
        free(bk->mean);
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

static sdnn_status build_buckets(sdnn_exchange *ex, double bucket_mb)
{
    size_t target = (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    if (target < 1) target = 1;
    ex->b = calloc((size_t)ex->nlayers + 1, sizeof *ex->b);
    if (!ex->b) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for buckets");
    int k = -1;
    for (int i = ex->nlayers - 1; i >= 0; --i) {
        slot *s = &ex->slots[i];
        size_t n = slot_floats(s);
        if (n == 0) continue;
        if (k < 0 || ex->b[k].count >= target) {
            ++k;
            ex->b[k].hi = i;
            ex->b[k].count = 0;
        }
        s->bucket = k;
        s->offset = ex->b[k].count;
        ex->b[k].count += n;
        ex->b[k].lo = i;
        ex->b[k].nlayers++;
    }
    ex->nb = k + 1;
    ex->total = 0;
    for (k = 0; k < ex->nb; ++k) {
        bucket *bk = &ex->b[k];
        ex->total += bk->count;
        if (ex->world == 1) continue;   /* nothing to pack for a world of one */
        bk->pack = calloc((size_t)ex->nrep, sizeof *bk->pack);
        bk->snap = calloc((size_t)ex->nrep, sizeof *bk->snap);
        bk->mean = malloc(bk->count * sizeof(float));
        if (!bk->pack || !bk->snap || !bk->mean)
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
        for (int r = 0; r < ex->nrep; ++r) {
            bk->pack[r] = malloc(bk->count * sizeof(float));
            bk->snap[r] = malloc(bk->count * sizeof(float));
            if (!bk->pack[r] || !bk->snap[r])
                return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for bucket %d", k);
        }
    }
    return SDNN_OK;
}

sdnn_status sdnn_exchange_create(network **nets, int nrep, sdnn_comm *comm,
                                 double bucket_mb, int overlap, sdnn_exchange **out)
{
    *out = NULL;
    if (nrep < 1 || !comm) return SDNN_ERROR(SDNN_ERR_INVALID, "exchange needs replicas and a comm");
    if (!(bucket_mb > 0)) return SDNN_ERROR(SDNN_ERR_INVALID, "bucket_mb must be > 0");
    sdnn_exchange *ex = calloc(1, sizeof *ex);
    if (!ex) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the exchange");
    pthread_mutex_init(&ex->mu, NULL);
    pthread_cond_init(&ex->cv, NULL);
    pthread_cond_init(&ex->qcv, NULL);
    ex->nets = nets;
    ex->nrep = nrep;
    ex->comm = comm;
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

void sdnn_exchange_step_begin(sdnn_exchange *ex, int iteration)
{
    pthread_mutex_lock(&ex->mu);
    for (int k = 0; k < ex->nb; ++k) {
        ex->b[k].remaining = ex->b[k].nlayers * ex->nrep;
        ex->b[k].done = 0;
        ex->b[k].ready_t = 0;
    }
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
    if (bk->ready_t > t0) {
        ex->sync_s[r] += bk->ready_t - t0;
        ex->wait_s[r] += t1 - bk->ready_t;
    } else {
        ex->wait_s[r] += t1 - t0;
    }
    pthread_mutex_unlock(&ex->mu);
    if (aborted) return -1;
    const float *mean = bk->mean + s->offset;
    const float *snap = bk->snap[r] + s->offset;
    const sdnn_param *p = rparams(ex, r, layer);
    for (int j = 0; j < s->np; ++j) {
        float *u = p[j].upd;
        for (size_t e = 0; e < p[j].n; ++e) u[e] = snap[e] + mean[e];
        mean += p[j].n;
        snap += p[j].n;
    }
    return 0;
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
            st->bytes = 2u * (size_t)ex->nrep * ex->total * sizeof(float);
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
