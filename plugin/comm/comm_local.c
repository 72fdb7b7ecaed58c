/*
 * comm_local: the in-process backend.  All replicas of a process share one
 * address space, so the plain allreduce is a direct average of their
 * buffers; the world is this one process (rank 0 of 1), so broadcast and
 * barrier have nothing to move.  It is the reference the other backends are
 * tested against.
 *
 * Compressed allreduces run the ring algorithm of collective.c with one
 * rank per local buffer: the calling thread is rank 0 and a pool of
 * nin - 1 threads, started at the first coded call and kept, plays the
 * others.  The transport between them is a mailbox per rank: shift()
 * posts a pointer to the outgoing bytes, copies the left neighbour's bytes
 * once they are posted, and returns when the right neighbour has copied
 * its own.  A rank that fails marks the job failed and every waiting rank
 * returns.
 */
#include "collective.h"
#include "comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct local_rank {
    struct local_impl *pool;
    sdnn_transport t;
    const void *buf;        /* mailbox: bytes posted for the right neighbour */
    size_t len;
    unsigned posted, taken; /* shifts posted by this rank / copied by its right */
    unsigned char *scratch;
    size_t scratch_len;
    sdnn_status st;
} local_rank;

typedef struct local_impl {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    int world;              /* ranks of the pool (threads = world - 1) */
    local_rank *ranks;
    unsigned job;           /* generation of the current job */
    int running;            /* helper ranks still working on it */
    int stop;
    int failed;
    /* the job */
    const sdnn_codec_ops *codec;
    const sdnn_codec_params *params;
    uint64_t stream;
    const float *const *in;
    float *const *out;
    size_t n;
} local_impl;

static sdnn_status local_shift(sdnn_transport *t, const void *send, size_t slen,
                               void *recv, size_t rlen)
{
    local_rank *me = t->impl;
    local_impl *L = me->pool;
    local_rank *left = &L->ranks[(t->rank + t->size - 1) % t->size];
    pthread_mutex_lock(&L->mu);
    me->buf = send;
    me->len = slen;
    unsigned seq = ++me->posted;
    pthread_cond_broadcast(&L->cv);
    while (left->posted < seq && !L->failed) pthread_cond_wait(&L->cv, &L->mu);
    if (L->failed) {
        pthread_mutex_unlock(&L->mu);
        return SDNN_ERR_ABORTED;
    }
    if (left->len != rlen) {
        L->failed = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "local ring: rank %d expected %zu bytes, got %zu",
                          t->rank, rlen, left->len);
    }
    const void *src = left->buf;
    pthread_mutex_unlock(&L->mu);
    memcpy(recv, src, rlen);
    pthread_mutex_lock(&L->mu);
    left->taken = seq;
    pthread_cond_broadcast(&L->cv);
    while (me->taken < seq && !L->failed) pthread_cond_wait(&L->cv, &L->mu);
    int failed = L->failed && me->taken < seq;
    pthread_mutex_unlock(&L->mu);
    return failed ? SDNN_ERR_ABORTED : SDNN_OK;
}

static const sdnn_transport_ops local_transport = {.shift = local_shift};

/* Rank r's part of the current job. */
static sdnn_status run_rank(local_impl *L, int r)
{
    local_rank *me = &L->ranks[r];
    sdnn_status st = SDNN_OK;
    size_t need = sdnn_coded_scratch_bytes(L->codec, L->params, L->n, L->world);
    if (need > me->scratch_len) {
        unsigned char *s = realloc(me->scratch, need);
        if (!s) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the ring scratch of rank %d", r);
        } else {
            me->scratch = s;
            me->scratch_len = need;
        }
    }
    if (st == SDNN_OK)
        st = sdnn_coded_allreduce_mean(&me->t, L->codec, L->params, L->stream, L->in[r],
                                       L->out[r], L->n, me->scratch);
    if (st != SDNN_OK) {
        pthread_mutex_lock(&L->mu);
        L->failed = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
    }
    return st;
}

typedef struct worker_arg {
    local_impl *L;
    int rank;
    unsigned seen;          /* the job generation when the pool started */
} worker_arg;

static void *worker_main(void *arg)
{
    local_impl *L = ((worker_arg *)arg)->L;
    int r = ((worker_arg *)arg)->rank;
    unsigned seen = ((worker_arg *)arg)->seen;
    free(arg);
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->stop && L->job == seen) pthread_cond_wait(&L->cv, &L->mu);
        if (L->stop) break;
        seen = L->job;
        pthread_mutex_unlock(&L->mu);
        L->ranks[r].st = run_rank(L, r);
        pthread_mutex_lock(&L->mu);
        L->running--;
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static void pool_stop(local_impl *L)
{
    if (L->threads) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
        for (int i = 0; i < L->world - 1; ++i) pthread_join(L->threads[i], NULL);
    }
    for (int r = 0; L->ranks && r < L->world; ++r) free(L->ranks[r].scratch);
    free(L->threads);
    free(L->ranks);
    L->threads = NULL;
    L->ranks = NULL;
    L->world = 0;
    L->stop = 0;
}

static sdnn_status pool_start(local_impl *L, int world)
{
    pool_stop(L);
    L->ranks = calloc((size_t)world, sizeof *L->ranks);
    L->threads = calloc((size_t)(world > 1 ? world - 1 : 1), sizeof *L->threads);
    if (!L->ranks || !L->threads) {
        pool_stop(L);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d local ranks", world);
    }
    L->world = world;
    for (int r = 0; r < world; ++r) {
        local_rank *k = &L->ranks[r];
        k->pool = L;
        k->t.ops = &local_transport;
        k->t.rank = r;
        k->t.size = world;
        k->t.impl = k;
    }
    for (int i = 0; i < world - 1; ++i) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->L = L;
            a->rank = i + 1;
            a->seen = L->job;   /* no job runs while the pool starts */
        }
        if (!a || pthread_create(&L->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            L->world = i + 1;   /* join the ones started */
            pool_stop(L);
            return SDNN_ERROR(SDNN_ERR_SYSTEM, "cannot start local ring thread %d", i + 1);
        }
    }
    return SDNN_OK;
}

static int local_available(void) { return 1; }

static sdnn_status local_init(sdnn_comm *c)
{
    c->rank = 0;
    c->size = 1;
    local_impl *L = calloc(1, sizeof *L);
    if (!L) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the local backend");
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    c->impl = L;
    return SDNN_OK;
}

static sdnn_status local_allreduce_mean(sdnn_comm *c, const float *const *in, int nin,
                                        float *out, size_t n)
{
    (void)c;
    if (nin < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "allreduce over %d buffers", nin);
    sdnn_mean_buffers(in, nin, out, n);
    return SDNN_OK;
}

static sdnn_status local_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                              const sdnn_codec_params *p, uint64_t stream,
                                              const float *const *in, int nin,
                                              float *const *out, size_t n, size_t *wire)
{
    local_impl *L = c->impl;
    if (wire) *wire = 0;
    if (nin < 1 || !codec) return SDNN_ERROR(SDNN_ERR_INVALID, "coded allreduce over %d buffers", nin);
    if (L->world != nin) SDNN_CHECK(pool_start(L, nin));
    pthread_mutex_lock(&L->mu);
    for (int r = 0; r < nin; ++r) {
        local_rank *k = &L->ranks[r];
        k->posted = k->taken = 0;
        k->buf = NULL;
        k->len = 0;
        k->t.sent = 0;
        k->st = SDNN_OK;
    }
    L->failed = 0;
    L->codec = codec;
    L->params = p;
    L->stream = stream;
    L->in = in;
    L->out = out;
    L->n = n;
    L->running = nin - 1;
    L->job++;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);

    sdnn_status st = run_rank(L, 0);

    pthread_mutex_lock(&L->mu);
    while (L->running > 0) pthread_cond_wait(&L->cv, &L->mu);
    pthread_mutex_unlock(&L->mu);
    size_t sent = 0;
    for (int r = 0; r < nin; ++r) {
        sent += L->ranks[r].t.sent;
        /* Report the rank that failed, not one that stopped because of it. */
        if (L->ranks[r].st != SDNN_OK && L->ranks[r].st != SDNN_ERR_ABORTED) st = L->ranks[r].st;
        else if (st == SDNN_OK) st = L->ranks[r].st;
    }
    if (wire) *wire = sent;
    return st;
}

static sdnn_status local_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    (void)c; (void)buf; (void)n;
    return SDNN_OK;
}

static sdnn_status local_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    (void)c; (void)buf; (void)n;
    if (wire) *wire = 0;
    return SDNN_OK;
}

static sdnn_status local_barrier(sdnn_comm *c)
{
    (void)c;
    return SDNN_OK;
}

static void local_destroy(sdnn_comm *c)
{
    local_impl *L = c->impl;
    if (!L) return;
    pool_stop(L);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    free(L);
    c->impl = NULL;
}

const sdnn_comm_ops sdnn_comm_local_ops = {
    .name = "local",
    .built = 1,
    .available = local_available,
    .init = local_init,
    .allreduce_mean = local_allreduce_mean,
    .allreduce_mean_coded = local_allreduce_mean_coded,
    .broadcast = local_broadcast,
    .central_mean = local_central_mean,
    .barrier = local_barrier,
    .destroy = local_destroy,
};
