/*
 * scheduler: ready counts, the FIFO of ready buckets, the comm thread, aborts
 * and per-step waits (see scheduler.h).  All shared state is guarded by one
 * mutex; the collectives run outside it.
 */
#include "scheduler.h"
#include "clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbucket {
    int nlayers;
    int *rem_r;            /* [nrep] layers of this bucket each replica still owes */
    int remaining;         /* layer x replica completions still expected */
    int done;
    double ready_t;        /* when the last replica finished it */
} sbucket;

struct sdnn_sched {
    sdnn_engine *e;
    sdnn_sched_opts o;
    sbucket *b;

    pthread_mutex_t mu;
    pthread_cond_t cv;     /* bucket done, abort */
    pthread_cond_t qcv;    /* queue has work, stop */
    pthread_t thread;
    int thread_started;
    int stop;
    int *queue;            /* [nbuckets] */
    int qhead, qtail;
    int buckets_ready;
    int aborted;
    sdnn_status err;
    int iteration;
    double *wait_s;        /* [nrep] waits on the exchange itself */
    double *sync_s;        /* [nrep] waits for slower replicas */
    double comm_s;
    int exchanged;
    size_t wire;
    sdnn_timeline *tl;
};

/* Bucket k's collective once every replica's signal is in. */
static sdnn_status run_bucket(sdnn_sched *s, int k, size_t *wire)
{
    for (int r = 0; r < s->o.nrep; ++r)
        SDNN_CHECK(s->e->ops->ready_wait(s->e, r, k));
    return s->o.collective(s->o.user, k, wire);
}

static void *comm_main(void *arg)
{
    sdnn_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->qhead == s->qtail) pthread_cond_wait(&s->qcv, &s->mu);
        if (s->stop) break;
        int k = s->queue[s->qhead++];
        int aborted = s->aborted;
        int iteration = s->iteration;
        sdnn_timeline *tl = s->tl;
        pthread_mutex_unlock(&s->mu);

        sdnn_status st = SDNN_OK;
        size_t wire = 0;
        double t0 = sdnn_now_s();
        if (!aborted) st = run_bucket(s, k, &wire);
        double t1 = sdnn_now_s();
        if (tl) {
            const char *label = s->o.labels && s->o.labels[k] ? s->o.labels[k] : "none";
            sdnn_timeline_span(tl, SDNN_TL_TRACK_COMM, SDNN_TL_ALLREDUCE, t0, t1, iteration, k,
                               (double)wire, label);
        }

        pthread_mutex_lock(&s->mu);
        s->comm_s += t1 - t0;
        s->wire += wire;
        s->exchanged++;
        s->b[k].done = 1;
        if (st != SDNN_OK && !s->aborted) {
            s->aborted = 1;
            s->err = st;
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void sdnn_sched_destroy(sdnn_sched *s)
{
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->qcv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int k = 0; s->b && k < s->o.nbuckets; ++k) free(s->b[k].rem_r);
    free(s->b);
    free(s->queue);
    free(s->wait_s);
    free(s->sync_s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->qcv);
    free(s);
}

sdnn_status sdnn_sched_create(sdnn_engine *e, const sdnn_sched_opts *o, sdnn_sched **out)
{
    *out = NULL;
    if (!e || !o || o->nrep < 1 || o->nbuckets < 0 || (o->nbuckets > 0 && !o->nlayers) ||
        (o->threaded && !o->collective))
        return SDNN_ERROR(SDNN_ERR_INVALID, "the scheduler needs an engine, replicas and buckets");
    sdnn_sched *s = calloc(1, sizeof *s);
    if (!s) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the scheduler");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->qcv, NULL);
    s->e = e;
    s->o = *o;
    size_t nb = o->nbuckets > 0 ? (size_t)o->nbuckets : 1;
    s->b = calloc(nb, sizeof *s->b);
    s->queue = calloc(nb, sizeof *s->queue);
    s->wait_s = calloc((size_t)o->nrep, sizeof *s->wait_s);
    s->sync_s = calloc((size_t)o->nrep, sizeof *s->sync_s);
    sdnn_status st = SDNN_OK;
    if (!s->b || !s->queue || !s->wait_s || !s->sync_s) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the scheduler");
        goto fail;
    }
    for (int k = 0; k < o->nbuckets; ++k) {
        s->b[k].nlayers = o->nlayers[k];
        if (!(s->b[k].rem_r = calloc((size_t)o->nrep, sizeof *s->b[k].rem_r))) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the scheduler");
            goto fail;
        }
    }
    /* The table's pointers are the caller's; only the counts are kept. */
    s->o.nlayers = NULL;
    if (o->threaded) {
        if (pthread_create(&s->thread, NULL, comm_main, s) != 0) {
            st = SDNN_ERROR(SDNN_ERR_SYSTEM, "cannot start the comm thread");
            goto fail;
        }
        s->thread_started = 1;
    }
    *out = s;
    return SDNN_OK;
fail:
    sdnn_sched_destroy(s);
    return st;
}

void sdnn_sched_step_begin(sdnn_sched *s, int iteration)
{
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->o.nbuckets; ++k) {
        sbucket *b = &s->b[k];
        b->remaining = b->nlayers * s->o.nrep;
        b->done = 0;
        b->ready_t = 0;
        for (int r = 0; r < s->o.nrep; ++r) b->rem_r[r] = b->nlayers;
    }
    s->wire = 0;
    s->qhead = s->qtail = 0;
    s->buckets_ready = 0;
    s->aborted = 0;
    s->err = SDNN_OK;
    s->iteration = iteration;
    for (int r = 0; r < s->o.nrep; ++r) s->wait_s[r] = s->sync_s[r] = 0;
    s->comm_s = 0;
    s->exchanged = 0;
    pthread_mutex_unlock(&s->mu);
}

int sdnn_sched_layer_packed(sdnn_sched *s, int r, int b)
{
    pthread_mutex_lock(&s->mu);
    int mine_done = --s->b[b].rem_r[r] == 0;
    pthread_mutex_unlock(&s->mu);
    return mine_done;
}

/* Queue bucket k (mutex held). */
static void enqueue(sdnn_sched *s, int k)
{
    s->b[k].ready_t = sdnn_now_s();
    s->queue[s->qtail++] = k;
    pthread_cond_signal(&s->qcv);
}

void sdnn_sched_replica_ready(sdnn_sched *s, int r, int b)
{
    /* The engine's half of the signal first: the comm side waits on it
     * (ready_wait) once the count below lets the bucket go. */
    s->e->ops->ready(s->e, r, b);
    pthread_mutex_lock(&s->mu);
    /* Each of the replica's layers counted once in `remaining`; its part
     * is complete, so all of them are in. */
    s->b[b].remaining -= s->b[b].nlayers;
    if (s->b[b].remaining == 0) {
        if (s->o.overlap) {
            enqueue(s, b);
        } else if (++s->buckets_ready == s->o.nbuckets) {
            for (int k = 0; k < s->o.nbuckets; ++k) enqueue(s, k);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

int sdnn_sched_wait(sdnn_sched *s, int r, int b, int layer)
{
    sbucket *bk = &s->b[b];
    double t0 = sdnn_now_s();
    pthread_mutex_lock(&s->mu);
    while (!bk->done && !s->aborted) pthread_cond_wait(&s->cv, &s->mu);
    int aborted = s->aborted;
    /* Until the bucket was ready the replica waited for slower replicas;
     * after that, for the exchange itself. */
    double t1 = sdnn_now_s();
    double ready = bk->ready_t;
    if (ready > t0) {
        s->sync_s[r] += ready - t0;
        s->wait_s[r] += t1 - ready;
    } else {
        s->wait_s[r] += t1 - t0;
    }
    sdnn_timeline *tl = s->tl;
    int iteration = s->iteration;
    pthread_mutex_unlock(&s->mu);
    if (tl) {
        /* The same readings as the counters above: the spans of a step add
         * up to its sync_wait_s and exposed_s. */
        const int track = SDNN_TL_TRACK_REPLICA0 + r;
        if (ready > t0)
            sdnn_timeline_span(tl, track, SDNN_TL_SYNC_WAIT, t0, ready, iteration, layer, b, NULL);
        sdnn_timeline_span(tl, track, SDNN_TL_EXCHANGE_WAIT, ready > t0 ? ready : t0, t1,
                           iteration, layer, b, NULL);
    }
    return aborted ? -1 : 0;
}

int sdnn_sched_abort(sdnn_sched *s, sdnn_status st)
{
    pthread_mutex_lock(&s->mu);
    int first = !s->aborted;
    if (first) {
        s->aborted = 1;
        s->err = st;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return first;
}

int sdnn_sched_aborted(sdnn_sched *s)
{
    pthread_mutex_lock(&s->mu);
    int a = s->aborted;
    pthread_mutex_unlock(&s->mu);
    return a;
}

int sdnn_sched_iteration(const sdnn_sched *s) { return s->iteration; }

sdnn_status sdnn_sched_step_end(sdnn_sched *s, sdnn_sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    /* Every queued bucket must be through the comm thread before the next
     * step reuses the buffers; after an abort it skips the work, so this
     * wait is short. */
    while (s->thread_started && s->exchanged < s->qtail) pthread_cond_wait(&s->cv, &s->mu);
    sdnn_status err = s->aborted ? (s->err != SDNN_OK ? s->err : SDNN_ERR_ABORTED) : SDNN_OK;
    if (st) {
        memset(st, 0, sizeof *st);
        if (s->thread_started && !s->aborted) {
            st->wire = s->wire;
            st->exchanged = s->exchanged;
        }
        for (int r = 0; r < s->o.nrep; ++r) {
            if (s->wait_s[r] > st->exposed_s) st->exposed_s = s->wait_s[r];
            if (s->sync_s[r] > st->sync_wait_s) st->sync_wait_s = s->sync_s[r];
        }
        st->comm_s = s->comm_s;
    }
    int exchanged = s->exchanged;
    pthread_mutex_unlock(&s->mu);
    if (err == SDNN_OK && s->thread_started && exchanged != s->o.nbuckets)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "step ended with %d of %d buckets exchanged",
                          exchanged, s->o.nbuckets);
    return err;
}

void sdnn_sched_set_overlap(sdnn_sched *s, int overlap)
{
    pthread_mutex_lock(&s->mu);
    s->o.overlap = overlap != 0;
    pthread_mutex_unlock(&s->mu);
}

int sdnn_sched_overlap(const sdnn_sched *s) { return s->o.overlap; }

void sdnn_sched_set_timeline(sdnn_sched *s, sdnn_timeline *tl)
{
    pthread_mutex_lock(&s->mu);
    s->tl = tl;
    pthread_mutex_unlock(&s->mu);
}
