/*
 * trainer: worker threads, the step in both modes, saving (see trainer.h).
 *
 * Workers wait on a generation counter; the main thread publishes a step
 * (the slices), bumps the generation and waits until every worker has
 * reported.  Nothing inside the step allocates.
 */
#include "trainer.h"
#include "agree.h"
#include "autoplan.h"
#include "measure.h"
#include "clock.h"
#include "blas.h"
#include "comm.h"
#include "config.h"
#include "engine.h"
#include "hooks.h"
#include "loader.h"
#include "replicas.h"
#include "saveio.h"
#include "stock.h"
#include "timeline.h"

#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct worker {
    sdnn_trainer *t;
    int r;
    pthread_t thread;
    sdnn_hook_ctx ctx;
    data slice;
    float loss;
    sdnn_status status;    /* this replica's failure in the step (train, sync) */
} worker;

struct sdnn_trainer {
    network **nets;
    int n;                 /* replicas in this process */
    int world;             /* replicas in every process together: n x processes */
    int own;
    sdnn_config cfg;
    sdnn_comm *comm;
    sdnn_exchange *ex;
    sdnn_exchange_opts xo; /* what the exchange was made with (plans replace buckets) */
    sdnn_autoplan *ap;     /* bucket_mb=auto, NULL otherwise */
    sdnn_timeline *tl;     /* timeline=, NULL without */
    int hooked;            /* the replicas' layers call back into the step */
    sdnn_engine *eng;      /* what trains the replicas (engine.h) */
    int *devices;          /* replica r's device id (the caller's list, or 0..n-1) */
    worker *w;
    int nthreads;

    pthread_mutex_t mu;
    pthread_cond_t go;
    pthread_cond_t done;
    unsigned long gen;
    int finished;
    int stop;
    size_t seen_start;     /* seen each replica starts its part of the step at */
    int iteration;         /* iteration the step ends at (timeline label) */
    sdnn_status failed;    /* first failed step: the replicas are no longer valid */
    /* Batches fed and not yet trained (sdnn_trainer_feed), oldest at
     * fed_head; the engine holds them too (its ring) and the trainer owns
     * the host memory until the step that trains them has run. */
    data *fed;
    int fed_cap, fed_head, fed_count;
    long dropped;          /* fed batches dropped by resizes */
};

static void run_replica(worker *w)
{
    sdnn_trainer *t = w->t;
    network *net = t->nets[w->r];
    sdnn_timeline *tl = w->ctx.tl;
    const int track = SDNN_TL_TRACK_REPLICA0 + w->r;
    double t0 = tl ? sdnn_now_s() : 0;
    w->ctx.cursor = 0;
    w->ctx.iteration = t->iteration;
    if (t->cfg.mode == SDNN_MODE_SCALEDNN) {
        /* Start this replica's count where the step's last batch begins, so
         * train_network's own increments end at seen + n batches and the
         * learning rate of the update is the one for the whole step. */
        *net->seen = t->seen_start;
        sdnn_exchange_replica_begin(t->ex, w->r);
        if (tl)
            sdnn_timeline_span(tl, track, SDNN_TL_SNAPSHOT, t0, sdnn_now_s(), t->iteration, 0, 0,
                               NULL);
    }
    double t1 = tl ? sdnn_now_s() : 0;
    sdnn_status ts = t->eng->ops->train(t->eng, w->r, w->slice, &w->loss);
    if (ts != SDNN_OK && t->ex) sdnn_exchange_abort(t->ex, ts);
    /* Whatever the engine queued for this replica is done (a deferred
     * check fails here): its failure is the step's. */
    sdnn_status ss = t->ex ? sdnn_exchange_replica_end(t->ex, w->r)
                           : t->eng->ops->sync(t->eng, w->r);
    w->status = ts != SDNN_OK ? ts : ss;
    if (tl)
        sdnn_timeline_span(tl, track, SDNN_TL_TRAIN, t1, sdnn_now_s(), t->iteration, 0, 0, NULL);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    sdnn_trainer *t = w->t;
    sdnn_hooks_set_context(t->hooked ? &w->ctx : NULL);
    t->eng->ops->bind_thread(t->eng, w->r);
    unsigned long seen_gen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->gen == seen_gen) pthread_cond_wait(&t->go, &t->mu);
        if (t->stop) break;
        seen_gen = t->gen;
        pthread_mutex_unlock(&t->mu);
        run_replica(w);
        pthread_mutex_lock(&t->mu);
        if (++t->finished == t->n) pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    t->eng->ops->bind_thread(t->eng, -1);
    sdnn_hooks_set_context(NULL);
    return NULL;
}

void sdnn_trainer_destroy(sdnn_trainer *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->nthreads; ++i) pthread_join(t->w[i].thread, NULL);
    sdnn_exchange_destroy(t->ex);
    for (int i = 0; i < t->fed_count; ++i) free_data(t->fed[(t->fed_head + i) % t->fed_cap]);
    free(t->fed);
    /* The engine before the comm and the timeline it may hold. */
    sdnn_engine_destroy(t->eng);
    sdnn_autoplan_destroy(t->ap);
    sdnn_comm_close(t->comm);
    (void)sdnn_timeline_close(t->tl);   /* a failure leaves its message */
    for (int r = 0; r < t->n; ++r) {
        if (t->world > 0) t->nets[r]->learning_rate /= (float)t->world;
    }
    if (t->own) sdnn_replicas_free(t->nets, t->n);
    free(t->w);
    free(t->devices);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    free(t);
}

/* Process 0's replica 0 on every replica of every process: parameters,
 * update buffers and running statistics (what sdnn_replicas_broadcast
 * copies between local replicas).  Every process loaded the same weights
 * file, so the counters agree already; random initial weights do not. */
static sdnn_status broadcast_world(sdnn_trainer *t)
{
    network *net = t->nets[0];
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(&net->layers[i], p);
        for (int j = 0; j < k; ++j) {
            SDNN_CHECK(sdnn_comm_broadcast(t->comm, p[j].val, p[j].n));
            SDNN_CHECK(sdnn_comm_broadcast(t->comm, p[j].upd, p[j].n));
        }
        float *mean, *var;
        size_t nbn = sdnn_layer_bn_stats(&net->layers[i], &mean, &var);
        if (nbn) {
            SDNN_CHECK(sdnn_comm_broadcast(t->comm, mean, nbn));
            SDNN_CHECK(sdnn_comm_broadcast(t->comm, var, nbn));
        }
    }
    return sdnn_replicas_broadcast(t->nets, t->n);
}

/* Running statistics: the mean over local replicas, then over processes. */
static sdnn_status average_bn_world(sdnn_trainer *t)
{
    sdnn_replicas_average_bn(t->nets, t->n);
    if (!t->comm || t->comm->size < 2) return SDNN_OK;
    network *net = t->nets[0];
    for (int i = 0; i < net->n; ++i) {
        float *mean, *var;
        size_t nbn = sdnn_layer_bn_stats(&net->layers[i], &mean, &var);
        if (!nbn) continue;
        const float *m = mean, *v = var;
        SDNN_CHECK(sdnn_comm_allreduce_mean(t->comm, &m, 1, mean, nbn, NULL));
        SDNN_CHECK(sdnn_comm_allreduce_mean(t->comm, &v, 1, var, nbn, NULL));
        for (int r = 1; r < t->n; ++r) {
            memcpy(t->nets[r]->layers[i].rolling_mean, mean, nbn * sizeof(float));
            memcpy(t->nets[r]->layers[i].rolling_variance, var, nbn * sizeof(float));
        }
    }
    return SDNN_OK;
}

static sdnn_status create(const sdnn_trainer_opts *o, network **nets, int n,
                          const sdnn_config *cfg, int own, sdnn_trainer **out);

sdnn_status sdnn_trainer_create(network **nets, int n, const sdnn_config *cfg, int own,
                                sdnn_trainer **out)
{
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    return create(&o, nets, n, cfg, own, out);
}

sdnn_status sdnn_trainer_create_with(const sdnn_engine_ops *engine, network **nets, int n,
                                     const sdnn_config *cfg, int own, sdnn_trainer **out)
{
    *out = NULL;
    if (!engine) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_trainer_create_with needs an engine");
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    o.engine = engine;
    return create(&o, nets, n, cfg, own, out);
}

sdnn_status sdnn_trainer_create_opts(network **nets, int n, const sdnn_config *cfg,
                                     const sdnn_trainer_opts *opts, int own, sdnn_trainer **out)
{
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    return create(opts ? opts : &o, nets, n, cfg, own, out);
}

/* o->engine: the engine to use, NULL: the one cfg->engine resolves to. */
static sdnn_status create(const sdnn_trainer_opts *o, network **nets, int n,
                          const sdnn_config *cfg, int own, sdnn_trainer **out)
{
    *out = NULL;
    if (n < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "need at least one replica");
    SDNN_CHECK(sdnn_config_check_devices(cfg, o->devices, n));
    sdnn_trainer *t = calloc(1, sizeof *t);
    if (!t) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the trainer");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    t->nets = nets;
    t->n = n;
    t->cfg = *cfg;
    sdnn_status st = SDNN_OK;
    const int plan_auto = cfg->mode == SDNN_MODE_SCALEDNN && cfg->bucket_mb <= 0;
    sdnn_link measured;   /* the link the step measured (plan_auto) */
    int have_measured = 0;
    t->devices = malloc((size_t)n * sizeof *t->devices);
    if (!t->devices) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the trainer");
        goto fail;
    }
    for (int r = 0; r < n; ++r) t->devices[r] = o->devices ? o->devices[r] : r;
    /* The backend first: the world it spans sets the learning rate.  Stock
     * mode needs one only between processes (its local sync is stock.c). */
    const char *backend = sdnn_config_backend(cfg);
    if (cfg->mode == SDNN_MODE_SCALEDNN || strcmp(backend, "local") != 0) {
        sdnn_comm_opts co = SDNN_COMM_OPTS_INIT;
        if (cfg->comm_timeout_s > 0) co.timeout_s = cfg->comm_timeout_s;
        SDNN_CHECKGOTO(sdnn_comm_open_opts(backend, &co, &t->comm), st, fail);
        /* Every process the same cfg and flags, checked before the first
         * collective that depends on them (agree.h). */
        SDNN_CHECKGOTO(sdnn_agree_check(t->comm, nets, n, cfg), st, fail);
    }
    t->world = n * (t->comm ? t->comm->size : 1);
    for (int r = 0; r < n; ++r) nets[r]->learning_rate *= (float)t->world;
    if (t->comm && t->comm->size > 1)
        SDNN_CHECKGOTO(broadcast_world(t), st, fail);
    if (cfg->timeline[0]) {
        /* Between processes each rank records its own trace: rank R > 0
         * writes PATH.rankR next to rank 0's PATH, with pid R + 1, and all
         * open right after a barrier so that their times start together
         * (scripts/timeline_merge.sh makes one trace of them). */
        char tlpath[sizeof cfg->timeline + 32];
        sdnn_timeline_opts to = SDNN_TIMELINE_OPTS_INIT;
        if (t->comm && t->comm->rank > 0)
            snprintf(tlpath, sizeof tlpath, "%s.rank%d", cfg->timeline, t->comm->rank);
        else
            snprintf(tlpath, sizeof tlpath, "%s", cfg->timeline);
        if (t->comm && t->comm->size > 1) {
            to.rank = t->comm->rank;
            SDNN_CHECKGOTO(sdnn_comm_barrier(t->comm), st, fail);
        }
        SDNN_CHECKGOTO(sdnn_timeline_open(tlpath, n, &to, &t->tl), st, fail);
    }

    if (cfg->mode == SDNN_MODE_SCALEDNN) {
        /* Darknet updates when seen/batch reaches a multiple of subdivisions;
         * a counter from a run with another batch size would put that update
         * in the middle of a step, and the gradients of the subdivisions after
         * it would never be exchanged.  Start on a step boundary instead. */
        size_t per = (size_t)nets[0]->batch * (size_t)nets[0]->subdivisions;
        for (int r = 0; r < n; ++r) *nets[r]->seen -= *nets[r]->seen % per;
        if (cfg->topk_momentum > 0 && nets[0]->momentum != 0) {
            st = SDNN_ERROR(SDNN_ERR_INVALID,
                            "[scalednn] topk_momentum=%g with [net] momentum=%g: momentum "
                            "correction takes the place of the optimizer's momentum; set "
                            "[net] momentum=0 or remove topk_momentum",
                            cfg->topk_momentum, nets[0]->momentum);
            goto fail;
        }
        SDNN_CHECKGOTO(sdnn_exchange_opts_from_config(cfg, &t->xo), st, fail);
        if (cfg->bucket_mb <= 0) {
            /* bucket_mb=auto: fixed 1 MiB buckets, uncompressed under
             * compress=auto, until the profile gives a plan (agreed by
             * every process, see autoplan.h). */
            t->xo.bucket_mb = 1.0;
            if (strcmp(cfg->compress, "auto") == 0) {
                t->xo.codec = &sdnn_codec_none;
                t->xo.auto_ef = 1;
            }
        }
    }
    /* scalednn mode needs the hooks; stock mode for a timeline or for the
     * 1x1 delta fix on a network that has the pattern. */
    {
        const sdnn_engine_ops *eops = o->engine;
        char why[320];
        if (!eops) {
            SDNN_CHECKGOTO(sdnn_engine_resolve_on(cfg->engine, o->devices, n, &eops, why,
                                                  sizeof why), st, fail);
            if (strcmp(cfg->engine, "auto") == 0 && sdnn_trainer_rank(t) == 0)
                fprintf(stderr, "scalednn: %s\n", why);
        }
        sdnn_engine_opts eo = SDNN_ENGINE_OPTS_INIT;
        eo.fix_1x1_delta = cfg->fix_1x1_delta;
        eo.fix_1x1_stride = cfg->fix_1x1_stride;
        eo.fix_bn_delta = cfg->fix_bn_delta;
        eo.fix_region_delta = cfg->fix_region_delta;
        eo.cpu_conv_onednn = sdnn_config_cpu_conv_onednn(cfg);
        eo.hook_forward = t->tl != NULL || plan_auto;
        eo.hooks = cfg->mode == SDNN_MODE_SCALEDNN || t->tl != NULL;
        eo.devices = t->devices;
        eo.preload = cfg->preload;
        eo.split = strcmp(cfg->split, "device0") == 0 ? SDNN_ENGINE_SPLIT_DEVICE0
                                                      : SDNN_ENGINE_SPLIT_CPU;
        SDNN_CHECKGOTO(sdnn_engine_create(eops, nets, n, &eo, &t->eng), st, fail);
        t->fed_cap = t->eng->preload > 0 ? t->eng->preload : 1;
        t->fed = calloc((size_t)t->fed_cap, sizeof *t->fed);
        if (!t->fed) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the trainer");
            goto fail;
        }
        t->hooked = eo.hooks || sdnn_engine_fixes_needed(&eo, nets[0]);
        if (t->eng->ops->set_timeline) t->eng->ops->set_timeline(t->eng, t->tl);
    }
    /* The exchange drives the engine's replicas (and registers its
     * callbacks with it). */
    if (cfg->mode == SDNN_MODE_SCALEDNN) {
        SDNN_CHECKGOTO(sdnn_exchange_create_on(t->eng, t->comm, &t->xo, &t->ex), st, fail);
        sdnn_exchange_set_timeline(t->ex, t->tl);
    }
    if (plan_auto) {
        /* The planner's link and codec rates, measured here once for the
         * world through the engine's buffers and the exchange's comm
         * (device buffers on a device engine), process 0's agreed by all;
         * the planner itself never calls a comm (measure.h). */
        sdnn_plan_measured pm;
        /* compress=auto in one process on an engine of host memory, over the probed
         * link: the replicas' exchange is a sum in memory, and a codec's
         * encode and decode move more memory than they save there, so the
         * plan chooses buckets only (a link named in the cfg is planned
         * for as given). */
        sdnn_config pc = *cfg;
        if (strcmp(cfg->compress, "auto") == 0 && strcmp(backend, "local") == 0 &&
            t->eng->ops->host_memory && sdnn_autoplan_needs_link(cfg, t->world)) {
            snprintf(pc.compress_allow, sizeof pc.compress_allow, "none");
            fprintf(stderr, "scalednn: compress=auto: one process on the cpu engine exchanges "
                    "through memory, where no codec pays for its encoding; buckets are planned "
                    "uncompressed\n");
        }
        SDNN_CHECKGOTO(sdnn_measure_for_plan(t->eng, sdnn_exchange_comm(t->ex), t->comm, n,
                                             t->world, &pc, &pm), st, fail);
        sdnn_plan_agree ag = sdnn_plan_agree_over(t->comm);
        SDNN_CHECKGOTO(sdnn_autoplan_create(nets[0], n, t->world, &pc, &pm, &ag, &t->ap), st,
                       fail);
        if (pm.have_link) {
            measured = pm.link;
            have_measured = 1;
        }
    }
    if (t->ex) {
        /* The exchange's comm gets the link the step has (the cfg's, else
         * the one measured above; neither: the comm keeps its default and
         * says so), then hears the buckets: a comm that picks a collective
         * per bucket prices, and names, that link in its banner. */
        sdnn_link named_link;
        int named = 0;
        SDNN_CHECKGOTO(sdnn_autoplan_cfg_link(cfg, &named_link, &named), st, fail);
        if (named)
            SDNN_CHECKGOTO(sdnn_comm_set_link(sdnn_exchange_comm(t->ex), &named_link, "cfg"), st,
                           fail);
        else if (have_measured)
            SDNN_CHECKGOTO(sdnn_comm_set_link(sdnn_exchange_comm(t->ex), &measured, "measured"),
                           st, fail);
        sdnn_exchange_announce(t->ex);
    }
    /* Several replica threads share the cores: one BLAS thread each (the
     * setting is process-wide, and OpenBLAS's own threads would compete with
     * the replicas).  A single replica may use every core, or its share of
     * them when mpirun put several processes on this host. */
    {
        long cores = sdnn_usable_cores();
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        long local = ls ? strtol(ls, NULL, 10) : 1;
        /* Unbound processes of one host share its cores; a bound one
         * already sees its share in its affinity. */
        if (local > 1 && cores == sysconf(_SC_NPROCESSORS_ONLN)) cores /= local;
        sdnn_blas_set_threads(n > 1 || cores < 1 ? 1 : (int)cores);
    }
    t->w = calloc((size_t)n, sizeof *t->w);
    if (!t->w) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for workers");
        goto fail;
    }
    for (int r = 0; r < n; ++r) {
        worker *w = &t->w[r];
        w->t = t;
        w->r = r;
        w->ctx.tl = t->tl;
        w->ctx.prof = t->ap ? sdnn_autoplan_prof(t->ap, r) : NULL;
        w->ctx.replica = r;
        w->ctx.net = nets[r];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            st = SDNN_ERROR(SDNN_ERR_SYSTEM, "cannot start replica thread %d", r);
            goto fail;
        }
        t->nthreads++;
    }
    t->own = own;
    *out = t;
    return SDNN_OK;
fail:
    t->own = 0;   /* the caller keeps its networks on failure */
    sdnn_trainer_destroy(t);
    return st;
}

int sdnn_trainer_replicas(const sdnn_trainer *t) { return t->n; }
const sdnn_engine_ops *sdnn_trainer_engine(const sdnn_trainer *t) { return t->eng->ops; }
sdnn_engine *sdnn_trainer_engine_instance(sdnn_trainer *t) { return t->eng; }
int sdnn_trainer_device(const sdnn_trainer *t, int r) { return t->devices[r]; }
network *sdnn_trainer_net(sdnn_trainer *t, int r) { return t->nets[r]; }
network **sdnn_trainer_nets(sdnn_trainer *t) { return t->nets; }
const sdnn_exchange *sdnn_trainer_exchange(const sdnn_trainer *t) { return t->ex; }
sdnn_timeline *sdnn_trainer_timeline(sdnn_trainer *t) { return t->tl; }

sdnn_status sdnn_trainer_close_timeline(sdnn_trainer *t)
{
    if (!t->tl) return SDNN_OK;
    /* No step runs now: the workers read their context at the next one. */
    if (t->ex) sdnn_exchange_set_timeline(t->ex, NULL);
    if (t->eng->ops->set_timeline) t->eng->ops->set_timeline(t->eng, NULL);
    for (int r = 0; r < t->nthreads; ++r) t->w[r].ctx.tl = NULL;
    sdnn_timeline *tl = t->tl;
    t->tl = NULL;
    return sdnn_timeline_close(tl);
}

size_t sdnn_trainer_iteration(sdnn_trainer *t) { return get_current_batch(t->nets[0]); }

/* Between steps (the workers wait): a new exchange with the plan's buckets,
 * the error-feedback residuals carried layer by layer, the old one gone. */
static sdnn_status replan(sdnn_trainer *t, const sdnn_bucket_spec *spec, int nb)
{
    sdnn_exchange_opts xo = t->xo;
    xo.plan = spec;
    xo.nplan = nb;
    sdnn_exchange *ex = NULL;
    /* The new exchange registers its callbacks with the engine. */
    SDNN_CHECK(sdnn_exchange_create_on(t->eng, t->comm, &xo, &ex));
    (void)sdnn_exchange_carry_ef(ex, t->ex);
    sdnn_exchange_set_timeline(ex, t->tl);
    /* The comm (the engine's, kept) still holds the link handed at the
     * start: the plan's buckets are priced on it. */
    sdnn_exchange_announce(ex);
    sdnn_exchange_destroy(t->ex);
    t->ex = ex;
    return SDNN_OK;
}

const sdnn_autoplan *sdnn_trainer_autoplan(const sdnn_trainer *t) { return t->ap; }

static void run_workers(sdnn_trainer *t)
{
    pthread_mutex_lock(&t->mu);
    t->finished = 0;
    t->gen++;
    pthread_cond_broadcast(&t->go);
    while (t->finished < t->n) pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

/* d against the replicas as they are now: the rows of one step, each of
 * the network's current input size (a batch of the old size after a
 * resize is refused, never trained at the wrong size). */
static sdnn_status check_batch(sdnn_trainer *t, data d)
{
    network *net0 = t->nets[0];
    int per = net0->batch * net0->subdivisions;
    if (t->failed != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_ABORTED, "the trainer stopped after a failed step (%s); "
                          "its replicas hold that step's partial state", sdnn_strerror(t->failed));
    if (d.X.rows != per * t->n)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "step batch has %d images, expected batch %d x subdivisions %d x %d replicas",
                          d.X.rows, net0->batch, net0->subdivisions, t->n);
    if (d.X.cols != net0->inputs)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "step batch rows have %d inputs; the network takes %d (%dx%dx%d)",
                          d.X.cols, net0->inputs, net0->w, net0->h, net0->c);
    return SDNN_OK;
}

static sdnn_status step_on(sdnn_trainer *t, data d, sdnn_step_stats *st);

sdnn_status sdnn_trainer_step(sdnn_trainer *t, data d, sdnn_step_stats *st)
{
    memset(st, 0, sizeof *st);
    if (t->fed_count > 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "sdnn_trainer_step with %d fed batch%s not yet trained: train them "
                          "with sdnn_trainer_step_fed first (batches train in the order given)",
                          t->fed_count, t->fed_count == 1 ? "" : "es");
    SDNN_CHECK(check_batch(t, d));
    return step_on(t, d, st);
}

int sdnn_trainer_preload(const sdnn_trainer *t) { return t->fed_cap; }
int sdnn_trainer_queued(const sdnn_trainer *t) { return t->fed_count; }
long sdnn_trainer_dropped(const sdnn_trainer *t) { return t->dropped; }

sdnn_status sdnn_trainer_feed(sdnn_trainer *t, data d)
{
    SDNN_CHECK(check_batch(t, d));
    if (t->fed_count >= t->fed_cap)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%d batch%s fed and not yet trained (the engine holds %d ahead): step "
                          "before feeding more", t->fed_count, t->fed_count == 1 ? "" : "es",
                          t->fed_cap);
    if (!t->eng->ops->feed)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine %s has no feed operation",
                          t->eng->ops->name);
    sdnn_status s = t->eng->ops->feed(t->eng, d);
    if (s != SDNN_OK) {
        /* A partly fed batch leaves the engine's rings out of step. */
        t->failed = s;
        return s;
    }
    t->fed[(t->fed_head + t->fed_count) % t->fed_cap] = d;
    t->fed_count++;
    return SDNN_OK;
}

sdnn_status sdnn_trainer_step_fed(sdnn_trainer *t, sdnn_step_stats *st)
{
    memset(st, 0, sizeof *st);
    if (t->fed_count == 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_trainer_step_fed: no batch fed");
    data d = t->fed[t->fed_head];
    t->fed_head = (t->fed_head + 1) % t->fed_cap;
    t->fed_count--;
    sdnn_status s = t->failed != SDNN_OK ? check_batch(t, d) : step_on(t, d, st);
    free_data(d);
    return s;
}

static sdnn_status step_on(sdnn_trainer *t, data d, sdnn_step_stats *st)
{
    network *net0 = t->nets[0];
    int per = net0->batch * net0->subdivisions;
    memset(st, 0, sizeof *st);
    for (int r = 0; r < t->n; ++r) t->w[r].slice = sdnn_data_slice(d, r, t->n);

    double t0 = sdnn_now_s();
    sdnn_status status = SDNN_OK;
    size_t base = *net0->seen;
    if (t->cfg.mode == SDNN_MODE_SCALEDNN) {
        /* Every process's replicas together make the step. */
        t->seen_start = base + (size_t)(t->world - 1) * (size_t)per;
        size_t iter_after = (base + (size_t)t->world * (size_t)per) / (size_t)per;
        t->iteration = (int)iter_after;
        /* The planner's warm-up and profiled steps run without overlap:
         * no exchange competes with the compute it times (autoplan.h). */
        if (t->ap)
            sdnn_exchange_set_overlap(t->ex, sdnn_autoplan_profiling(t->ap) ? 0 : t->xo.overlap);
        sdnn_exchange_step_begin(t->ex, (int)iter_after);
        run_workers(t);
        sdnn_exchange_stats xs;
        status = sdnn_exchange_step_end(t->ex, &xs);
        st->bytes = xs.bytes;
        st->exposed_s = xs.exposed_s;
        st->sync_wait_s = xs.sync_wait_s;
        st->comm_s = xs.comm_s;
    } else {
        /* Replica 0's own count: the catch-up comes with the sync. */
        t->iteration = (int)((base + (size_t)per) / (size_t)per);
        run_workers(t);
        for (int r = 0; r < t->n && status == SDNN_OK; ++r) status = t->w[r].status;
        if (status == SDNN_OK && sdnn_stock_due(t->nets, t->world, t->cfg.interval)) {
            double s0 = sdnn_now_s();
            /* Darknet's host averaging (sync_nets): the engine's weights,
             * biases and scales come to the host networks and go back
             * averaged; running statistics stay on each device, as
             * Darknet's pull_weights/distribute_weights leave them. */
            status = t->eng->ops->pull(t->eng, SDNN_ENGINE_PARAMS);
            if (status == SDNN_OK)
                status = sdnn_stock_sync_world(t->nets, t->n, t->comm, t->cfg.interval,
                                               &st->bytes);
            if (status == SDNN_OK)
                status = t->eng->ops->push(t->eng, SDNN_ENGINE_PARAMS);
            double s1 = sdnn_now_s();
            st->exposed_s = st->comm_s = s1 - s0;
            st->synced = 1;
            if (t->tl)
                sdnn_timeline_span(t->tl, SDNN_TL_TRACK_MAIN, SDNN_TL_STOCK_SYNC, s0, s1,
                                   t->iteration, (double)st->bytes, 0, NULL);
        }
    }
    for (int r = 0; r < t->n && t->eng->ops->host_loss_take; ++r) {
        uint64_t b = 0;
        double w = 0;
        if (t->eng->ops->host_loss_take(t->eng, r, &b, &w) != SDNN_OK) continue;
        st->host_loss_bytes += (size_t)b;
        if (w > st->host_loss_wait_s) st->host_loss_wait_s = w;
    }
    double t1 = sdnn_now_s();
    st->seconds = t1 - t0;
    if (t->tl) {
        sdnn_timeline_span(t->tl, SDNN_TL_TRACK_MAIN, SDNN_TL_STEP, t0, t1, t->iteration, 0, 0,
                           NULL);
        sdnn_timeline_counter(t->tl, SDNN_TL_C_BYTES, t1, (double)st->bytes);
    }
    if (status != SDNN_OK) t->failed = status;
    if (t->ap) {
        const sdnn_bucket_spec *spec;
        int nb;
        int ready = 0;
        sdnn_status ps = sdnn_autoplan_after_step(t->ap, net0, st->seconds, status == SDNN_OK,
                                                  &spec, &nb, &ready);
        if (ps != SDNN_OK) {
            t->failed = ps;
            return ps;
        }
        if (ready) {
            ps = replan(t, spec, nb);
            if (ps != SDNN_OK) {
                t->failed = ps;
                return ps;
            }
            st->replanned = 1;
        }
    }
    float sum = 0;
    for (int r = 0; r < t->n; ++r) sum += t->w[r].loss;
    st->loss = sum / (float)t->n;
    if (status == SDNN_OK && t->comm && t->comm->size > 1) {
        /* The world's loss, as one process with every replica reports it. */
        const float *in = &st->loss;
        status = sdnn_comm_allreduce_mean(t->comm, &in, 1, &st->loss, 1, NULL);
        if (status != SDNN_OK) t->failed = status;
    }
    return status;
}

sdnn_status sdnn_trainer_resize(sdnn_trainer *t, int w, int h)
{
    /* Batches fed at the old size are dropped (and counted), never trained
     * at the new one: the engine's resize drops its copies. */
    for (; t->fed_count > 0; t->fed_count--) {
        free_data(t->fed[t->fed_head]);
        t->fed_head = (t->fed_head + 1) % t->fed_cap;
        t->dropped++;
    }
    for (int r = 0; r < t->n; ++r)
        if (resize_network(t->nets[r], w, h) != 0)
            return SDNN_ERROR(SDNN_ERR_NOMEM, "cannot resize replica %d to %dx%d", r, w, h);
    return t->eng->ops->resize(t->eng, w, h);
}

static sdnn_status nonfinite_stat(network *net, int i, const char *what, size_t e)
{
    return SDNN_ERROR(SDNN_ERR_NONFINITE,
                      "not saving: layer %d (%s) %s[%zu] is not finite at iteration %zu; the "
                      "previous weights files are kept",
                      i, sdnn_layer_type_name(net->layers[i].type), what, e, get_current_batch(net));
}

/* A save must never replace good weights with NaN or inf: parameters and
 * the running statistics save_weights writes too. */
static sdnn_status check_finite(network *net)
{
    for (int i = 0; i < net->n; ++i) {
        float *mean, *var;
        size_t nbn = sdnn_layer_bn_stats(&net->layers[i], &mean, &var);
        for (size_t e = 0; e < nbn; ++e) {
            if (!isfinite(mean[e])) return nonfinite_stat(net, i, "rolling_mean", e);
            if (!isfinite(var[e])) return nonfinite_stat(net, i, "rolling_variance", e);
        }
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(&net->layers[i], p);
        for (int j = 0; j < k; ++j)
            for (size_t e = 0; e < p[j].n; ++e)
                if (!isfinite(p[j].val[e])) return nonfinite_stat(net, i, p[j].what, e);
    }
    return SDNN_OK;
}

static sdnn_status save(sdnn_trainer *t, const char *path);

sdnn_status sdnn_trainer_save(sdnn_trainer *t, const char *path)
{
    double t0 = t->tl ? sdnn_now_s() : 0;
    sdnn_status st = save(t, path);
    if (t->tl)
        sdnn_timeline_span(t->tl, SDNN_TL_TRACK_MAIN, SDNN_TL_SAVE, t0, sdnn_now_s(),
                           (double)get_current_batch(t->nets[0]), 0, 0, NULL);
    return st;
}

static sdnn_status save(sdnn_trainer *t, const char *path)
{
    if (t->failed != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_ABORTED, "not saving %s: the trainer stopped after a failed "
                          "step (%s)", path, sdnn_strerror(t->failed));
    SDNN_CHECK(t->eng->ops->pull(t->eng, SDNN_ENGINE_ALL));
    for (int r = 0; r < t->n; ++r) SDNN_CHECK(check_finite(t->nets[r]));
    if (t->cfg.mode == SDNN_MODE_SCALEDNN) {
        SDNN_CHECK(average_bn_world(t));
    } else if (t->world > 1) {
        /* Darknet's train_detector calls sync_nets(nets, n, 0) before
         * every save: weights averaged, seen unchanged. */
        size_t bytes;
        SDNN_CHECK(sdnn_stock_sync_world(t->nets, t->n, t->comm, 0, &bytes));
    }
    SDNN_CHECK(t->eng->ops->push(t->eng, SDNN_ENGINE_PARAMS | SDNN_ENGINE_BNSTATS));
    SDNN_CHECK(check_finite(t->nets[0]));   /* an average can still overflow */
    /* Between processes every rank averages (above, collectively) and only
     * rank 0 writes: the weights are the same everywhere.  The .ef file
     * holds rank 0's replicas' residuals only; other ranks' residuals are
     * not saved, and a resume restores rank 0's file on rank 0 alone. */
    if (t->comm && t->comm->rank != 0) return SDNN_OK;
    if (t->ex && sdnn_exchange_has_ef(t->ex)) {
        char ef[4096];
        if (snprintf(ef, sizeof ef, "%s.ef", path) >= (int)sizeof ef)
            return SDNN_ERROR(SDNN_ERR_INVALID, "weights path too long: %s", path);
        SDNN_CHECK(sdnn_exchange_ef_save(t->ex, ef, (uint64_t)*t->nets[0]->seen));
    }
    return sdnn_save_weights_atomic(t->nets[0], path);
}

void sdnn_trainer_average_bn(sdnn_trainer *t)
{
    if (t->cfg.mode != SDNN_MODE_SCALEDNN || t->failed != SDNN_OK) return;
    if (t->eng->ops->pull(t->eng, SDNN_ENGINE_BNSTATS) != SDNN_OK) {
        t->failed = SDNN_ERR_ABORTED;
        return;
    }
    if (average_bn_world(t) != SDNN_OK) t->failed = SDNN_ERR_COMM;
    else if (t->eng->ops->push(t->eng, SDNN_ENGINE_BNSTATS) != SDNN_OK) t->failed = SDNN_ERR_ABORTED;
}

int sdnn_trainer_rank(const sdnn_trainer *t) { return t->comm ? t->comm->rank : 0; }
int sdnn_usable_cores(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int k = CPU_COUNT(&set);
        if (k > 0) return k;
    }
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

int sdnn_trainer_processes(const sdnn_trainer *t) { return t->comm ? t->comm->size : 1; }
int sdnn_trainer_world(const sdnn_trainer *t) { return t->world; }

sdnn_status sdnn_trainer_broadcast_int(sdnn_trainer *t, int *v)
{
    if (!t->comm || t->comm->size < 2) return SDNN_OK;
    float f = (float)*v;   /* exact for |v| < 2^24: sizes and flags */
    SDNN_CHECK(sdnn_comm_broadcast(t->comm, &f, 1));
    *v = (int)f;
    return SDNN_OK;
}

sdnn_status sdnn_trainer_broadcast_double(sdnn_trainer *t, double *v)
{
    if (!t->comm || t->comm->size < 2) return SDNN_OK;
    float f[2];
    f[0] = (float)*v;
    f[1] = (float)(*v - (double)f[0]);
    SDNN_CHECK(sdnn_comm_broadcast(t->comm, f, 2));
    *v = (double)f[0] + (double)f[1];
    return SDNN_OK;
}

int sdnn_trainer_has_ef(const sdnn_trainer *t) { return t->ex && sdnn_exchange_has_ef(t->ex); }

sdnn_status sdnn_trainer_load_ef(sdnn_trainer *t, const char *weights)
{
    if (!sdnn_trainer_has_ef(t)) return SDNN_OK;
    if (t->comm && t->comm->rank != 0) return SDNN_OK;   /* saved by rank 0 alone */
    char ef[4096];
    if (snprintf(ef, sizeof ef, "%s.ef", weights) >= (int)sizeof ef)
        return SDNN_ERROR(SDNN_ERR_INVALID, "weights path too long: %s", weights);
    return sdnn_exchange_ef_load(t->ex, ef, (uint64_t)*t->nets[0]->seen);
}
