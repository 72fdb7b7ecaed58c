/*
 * engine_gpu: the `gpu` entry of the engine registry (plugin/engine/) in
 * builds with a GPU engine (make GPU=1, GPU=sim); builds without one get
 * plugin/engine/gpu_stub.c instead.  Every op of engine.h's table on
 * plugin/cuda's device network (sdnn_gpu_net, net.c):
 *
 *   replicas   replica r gets a virtual device of its own (streams and
 *              handles) on physical device opts->devices[r] (NULL: r) and
 *              a device mirror of the host network; the host networks stay
 *              the model's owner and are brought up to date by pull().
 *   feed       (preload=K, split=) each replica's ring of K slots
 *              (preload.c): split=cpu pushes replica r's rows of the step
 *              batch from pinned staging on r's copy stream; split=device0
 *              pushes the whole batch into replica 0's ring and then, on
 *              each other replica's copy stream, peer copies its rows from
 *              there into its own ring.  Called between steps, so with
 *              K > 1 the copies of later batches overlap this step.
 *   train      Darknet's train_network on the device: the oldest fed slot
 *              (the compute stream waits for its copy's event; released
 *              after the last subdivision), or with none fed the slice
 *              through pinned staging to the device once; then forward
 *              and backward of every subdivision; on the last one, after
 *              each parameter layer's backward is queued, the host calls
 *              cb.backward_done(r, layer) (no host wait); then per layer
 *              cb.before_update(r, layer) and that layer's update
 *              (the rest skipped once it returns -1).
 *   buffers    device memory of r's device (buf_alloc); snapshot, pack and
 *              apply are queued on r's compute stream (a copy of the
 *              layer's span of the update arena, dst = updates - snap,
 *              updates = snap + mean); pack records a non-finite element
 *              in a per-layer device slot that sync() reads (the deferred
 *              check of engine.h).
 *   scheduler  ready(r, b) records bucket b's event on r's compute stream;
 *              ready_wait(r, b) makes the exchange's comm stream wait on it
 *              (no host wait); ef_step runs the device codecs' error
 *              feedback (sdnn_dcodec_ef_step: the host codec's arithmetic
 *              and rounding streams) on that comm stream, ordered after
 *              everything r's compute stream has queued.
 *   comm       comm_open gives a comm over these buffers: the local
 *              replicas' mean on the devices by the device ring (ring.c:
 *              device copies when every replica shares one physical
 *              device, NCCL when each has its own; plain and coded means
 *              equal the host backends' bit for bit); when the host
 *              backend spans several processes, every local buffer goes
 *              to pinned host memory, the host backend's collective runs
 *              on them as the cpu engine's would, and the result comes
 *              back to every replica's device (until NCCL between
 *              processes).
 *   timeline   with set_timeline, timing events on the compute stream
 *              (forward and backward of each subdivision) and on the comm
 *              stream (each bucket's exchange, from ready_wait to the end
 *              of the collective) become spans of replica r's track after
 *              sync(), on the host clock.
 *
 * The exchange's stream is the comm stream of xctx(r): r's own virtual
 * device over NCCL, replica 0's when the ring moves data within one
 * device (ring.c runs every rank there).  A mean buffer the exchange
 * allocated on one replica and hands to another's apply() is mirrored on
 * that replica's device by the comm (the simulated devices, like CUDA
 * without peer access, refuse a kernel reading another device's memory).
 *
 * On simulated devices (make GPU=sim) everything here runs: host logic,
 * ordering and arithmetic, never the CUDA kernels or NCCL.
 */
#ifdef GPU
#error "never compile the engine with -DGPU: Debian's libdarknet is a CPU build (layer layout)"
#endif
#include "engine.h"
#include "gpu.h"

#include "clock.h"
#include "comm.h"
#include "dev.h"
#include "hooks.h"
#include "replicas.h"
#include "timeline.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EG_MAX 64
#define EG_NOBAD (~0ull)

typedef struct eg_alloc {
    float *p;
    size_t n;
    int r;                       /* replica whose device holds it */
    float *mirror[EG_MAX];       /* the comm's copies on other replicas' devices */
    struct eg_alloc *next;
} eg_alloc;

typedef struct eg_rep {
    struct gpu_engine *E;
    int r;
    sdnn_dctx *vd;
    sdnn_gpu_net *g;
    sdnn_gpu_preload *ring;      /* feed()'s slots (replica 0 under split=device0:
                                  * whole batches) */
    int rows;                    /* slice rows the buffers hold */
    float *x, *y;                /* device slice */
    float *hx, *hy;              /* pinned staging of the slice */
    unsigned long long *bad;     /* device: first non-finite element per layer */
    unsigned long long *bad_host;
    int checked;                 /* a pack or check queued since the last sync */
    sdnn_devent **ready;         /* [layers]: bucket events */
    sdnn_devent *ef_ev;          /* ef_step: comm stream after compute */
    void *enc, *cscr;            /* ef_step buffers on xctx(r)'s device */
    size_t enc_n, cscr_n;
    /* timeline (set_timeline) */
    sdnn_devent *anchor;
    double anchor_t;
    sdnn_devent **sub_ev;        /* [3 x subdivisions]: forward start, backward start, end */
    int nsub;                    /* recorded this step */
    sdnn_devent **x_ev;          /* [2 x layers]: exchange start, end of bucket b */
    char *x_state;               /* [layers]: 1 start recorded, 2 both */
    int x_cur;                   /* bucket of the last ready_wait */
    int bad_layer;               /* the last deferred finding (nonfinite_at) */
    sdnn_engine_bad bad_what;
    sdnn_status err;             /* first failure of an op without a status */
    char err_msg[256];
    /* bucket_mb=auto's profile: the calling replica thread's accumulator
     * (hooks.h's context), filled from layer events after the sync */
    double *prof;
    int prof_scale;              /* subdivisions the last pass stands for */
    sdnn_gpu_host_loss_stats hl_taken;  /* host_loss_take's last reading */
} eg_rep;

typedef struct gpu_engine {
    int n, layers, subdivisions;
    int hooks;
    int fix_bn;             /* fix_bn_delta: the exact batch-norm backward */
    int one_device;              /* every replica on one physical device */
    int preload;                 /* ring slots per replica (preload=) */
    sdnn_engine_split split;     /* split= */
    eg_rep *rep;
    sdnn_engine_callbacks cb;
    sdnn_comm *comm;             /* comm_open's */
    sdnn_timeline *tl;
    pthread_mutex_t mu;          /* allocs */
    eg_alloc *allocs;
} gpu_engine;

static sdnn_dctx *xctx(gpu_engine *E, int r) { return E->one_device ? E->rep[0].vd : E->rep[r].vd; }

/* ---- availability ------------------------------------------------------------------ */

static int eg_available(int ndev, char *why, size_t len)
{
    int have = 0;
    if (!sdnn_gpu_available() || sdnn_gpu_device_count(&have) != SDNN_OK) have = 0;
    if (have >= ndev && have > 0) return 1;
    if (why && len)
        snprintf(why, len, "%d device%s for %d replica%s", have, have == 1 ? "" : "s", ndev,
                 ndev == 1 ? "" : "s");
    return 0;
}

/* Replica r on device devices[r]: every id below the device count, and
 * either every replica on one device (the device ring) or each on its own
 * (NCCL), as create() requires. */
static int eg_available_on(const int *devices, int n, char *why, size_t len)
{
    int have = 0;
    if (!sdnn_gpu_available() || sdnn_gpu_device_count(&have) != SDNN_OK) have = 0;
    int same = 1, distinct = 1;
    for (int r = 0; r < n; ++r) {
        int d = devices ? devices[r] : r;
        if (d < 0 || d >= have) {
            if (why && len && have > 0)
                snprintf(why, len, "%d device%s (ids 0..%d), and replica %d names device id %d",
                         have, have == 1 ? "" : "s", have - 1, r, d);
            else if (why && len)
                snprintf(why, len, "no device (the GPU runtime found none), and replica %d names "
                         "device id %d", r, d);
            return 0;
        }
        int d0 = devices ? devices[0] : 0;
        same &= d == d0;
        for (int q = 0; q < r; ++q) distinct &= d != (devices ? devices[q] : q);
    }
    if (!same && !distinct) {
        if (why && len)
            snprintf(why, len, "replicas share some devices but not all (the device ring moves "
                     "data within one device, NCCL between distinct ones): name one device for "
                     "every replica, or each device once");
        return 0;
    }
    return 1;
}

/* sdnn_gpu_device_name's line without its leading "N: ". */
static void eg_describe_device(int dev, char *buf, size_t len)
{
    char line[256];
    if (sdnn_gpu_device_name(dev, line, sizeof line) != SDNN_OK) {
        snprintf(buf, len, "%s", sdnn_last_error());   /* names the device */
        return;
    }
    const char *p = strchr(line, ':');
    snprintf(buf, len, "%s", p && p[1] == ' ' ? p + 2 : line);
}

/* ---- creation ---------------------------------------------------------------------- */

static void free_slice(eg_rep *R)
{
    sdnn_dfree(R->x);
    sdnn_dfree(R->y);
    sdnn_hfree_pinned(R->hx);
    sdnn_hfree_pinned(R->hy);
    R->x = R->y = R->hx = R->hy = NULL;
    R->rows = 0;
}

static sdnn_status slice_buffers(eg_rep *R, network *net, int rows)
{
    if (R->rows >= rows) return SDNN_OK;
    if (R->vd) SDNN_CHECK(sdnn_dctx_sync_all(R->vd));
    free_slice(R);
    size_t in = (size_t)net->inputs * rows, tr = (size_t)(net->truths ? net->truths : 1) * rows;
    SDNN_CHECK(sdnn_dmalloc(R->vd, in * sizeof(float), (void **)&R->x));
    SDNN_CHECK(sdnn_dmalloc(R->vd, tr * sizeof(float), (void **)&R->y));
    SDNN_CHECK(sdnn_hmalloc_pinned(in * sizeof(float), (void **)&R->hx));
    SDNN_CHECK(sdnn_hmalloc_pinned(tr * sizeof(float), (void **)&R->hy));
    R->rows = rows;
    return SDNN_OK;
}

static void destroy_events(sdnn_devent **ev, int n)
{
    for (int i = 0; ev && i < n; ++i) sdnn_devent_destroy(ev[i]);
    free(ev);
}

static void free_rep(gpu_engine *E, eg_rep *R)
{
    if (R->vd) sdnn_dctx_sync_all(R->vd);
    destroy_events(R->ready, E->layers);
    destroy_events(R->sub_ev, 3 * E->subdivisions);
    destroy_events(R->x_ev, 2 * E->layers);
    sdnn_devent_destroy(R->ef_ev);
    sdnn_devent_destroy(R->anchor);
    free(R->x_state);
    sdnn_dfree(R->enc);
    sdnn_dfree(R->cscr);
    sdnn_dfree(R->bad);
    free(R->bad_host);
    free_slice(R);
    sdnn_gpu_preload_destroy(R->ring);
    R->ring = NULL;
    sdnn_gpu_net_destroy(R->g);
}

static void eg_destroy(sdnn_engine *e)
{
    gpu_engine *E = e->impl;
    if (!E) return;
    sdnn_comm_close(E->comm);
    for (int r = 0; E->rep && r < E->n; ++r) free_rep(E, &E->rep[r]);
    while (E->allocs) {
        eg_alloc *a = E->allocs;
        E->allocs = a->next;
        sdnn_dfree(a->p);
        for (int r = 0; r < EG_MAX; ++r) sdnn_dfree(a->mirror[r]);
        free(a);
    }
    for (int r = 0; E->rep && r < E->n; ++r) sdnn_gpu_vdev_close(E->rep[r].vd);
    free(E->rep);
    pthread_mutex_destroy(&E->mu);
    free(E);
    e->impl = NULL;
}

static sdnn_status backward_hook(void *ctx, sdnn_gpu_net *g, int layer);

/* The device network at the host network's size, and its ring of
 * `preload` slots of one slice (replica 0 under split=device0: of the whole
 * step batch).  The synchronous path's slice buffers come with the first
 * train() that has nothing fed. */
static sdnn_status make_net(gpu_engine *E, eg_rep *R, network *net)
{
    SDNN_CHECK(sdnn_gpu_net_create(net, R->vd, &R->g));
    sdnn_gpu_net_set_seed(R->g, 0x5ca1ed0dull + 0x1000193ull * (uint64_t)R->r);
    sdnn_gpu_net_set_backward_hook(R->g, backward_hook, R);
    sdnn_gpu_net_set_bn_exact(R->g, E->fix_bn);
    int rows = net->batch * net->subdivisions;
    if (E->split == SDNN_ENGINE_SPLIT_DEVICE0 && R->r == 0) rows *= E->n;
    return sdnn_gpu_preload_create(R->vd, E->preload, rows, net->inputs, net->truths, &R->ring);
}

static sdnn_status reset_bad(gpu_engine *E, eg_rep *R)
{
    for (int i = 0; i < E->layers; ++i) R->bad_host[i] = EG_NOBAD;
    return sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, R->bad, R->bad_host,
                      (size_t)E->layers * sizeof *R->bad, 1);
}

static sdnn_status create_rep(gpu_engine *E, sdnn_engine *e, const sdnn_engine_opts *o, int r,
                              int ndev)
{
    eg_rep *R = &E->rep[r];
    R->E = E;
    R->r = r;
    R->x_cur = -1;
    R->bad_layer = -1;
    sdnn_gpu_options go = SDNN_GPU_OPTIONS_INIT;
    go.device = o->devices ? o->devices[r] : r;
    /* SDNN_GPU_TF32=1 lets cuDNN/cuBLAS use TF32 (bench_gpu -tf32); off:
     * fp32 as libdarknet computes. */
    const char *tf = getenv("SDNN_GPU_TF32");
    go.tf32 = tf && strcmp(tf, "1") == 0;
    if (go.device < 0 || go.device >= ndev)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: replica %d on device %d (%d device%s)",
                          r, go.device, ndev, ndev == 1 ? "" : "s");
    SDNN_CHECK(sdnn_gpu_vdev_open(&go, &R->vd));
    SDNN_CHECK(make_net(E, R, e->nets[r]));
    SDNN_CHECK(sdnn_dmalloc(R->vd, (size_t)E->layers * sizeof *R->bad, (void **)&R->bad));
    R->bad_host = malloc((size_t)E->layers * sizeof *R->bad_host);
    R->ready = calloc((size_t)E->layers, sizeof *R->ready);
    if (!R->bad_host || !R->ready) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the gpu engine");
    SDNN_CHECK(reset_bad(E, R));
    for (int i = 0; i < E->layers; ++i) SDNN_CHECK(sdnn_devent_create(R->vd, 0, &R->ready[i]));
    return sdnn_devent_create(R->vd, 0, &R->ef_ev);
}

static sdnn_status eg_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    int ndev = 0;
    SDNN_CHECK(sdnn_gpu_device_count(&ndev));
    if (e->n > EG_MAX)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: %d replicas (at most %d)", e->n, EG_MAX);
    gpu_engine *E = calloc(1, sizeof *E);
    if (!E) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the gpu engine");
    pthread_mutex_init(&E->mu, NULL);
    e->impl = E;
    E->n = e->n;
    E->layers = e->nets[0]->n;
    E->subdivisions = e->nets[0]->subdivisions > 0 ? e->nets[0]->subdivisions : 1;
    E->hooks = o->hooks;
    E->fix_bn = o->fix_bn_delta;
    E->preload = o->preload;
    E->split = o->split;
    if (E->preload < 1 || E->preload > 8 ||
        (E->split != SDNN_ENGINE_SPLIT_CPU && E->split != SDNN_ENGINE_SPLIT_DEVICE0)) {
        sdnn_status bad = SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: preload=%d (1..8), split %d",
                                     E->preload, (int)E->split);
        eg_destroy(e);
        return bad;
    }
    e->preload = E->preload;
    E->rep = calloc((size_t)e->n, sizeof *E->rep);
    sdnn_status st = E->rep ? SDNN_OK : SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the gpu engine");
    for (int r = 0; r < e->n && st == SDNN_OK; ++r) st = create_rep(E, e, o, r, ndev);
    if (st == SDNN_OK) {
        int d0 = sdnn_dctx_device(E->rep[0].vd), same = 1, distinct = 1;
        for (int r = 1; r < e->n; ++r) {
            int d = sdnn_dctx_device(E->rep[r].vd);
            same &= d == d0;
            for (int q = 0; q < r; ++q) distinct &= d != sdnn_dctx_device(E->rep[q].vd);
        }
        E->one_device = same;
        if (!same && !distinct)
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                            "engine gpu: replicas share some devices but not all (the device "
                            "ring moves data within one device, NCCL between distinct ones)");
    }
    if (st != SDNN_OK) {
        eg_destroy(e);
        return st;
    }
    return SDNN_OK;
}

static sdnn_engine_mem eg_mem(const sdnn_engine *e)
{
    (void)e;
    return SDNN_ENGINE_MEM_DEVICE;
}

/* ---- buffers ----------------------------------------------------------------------- */

static sdnn_status eg_buf_alloc(sdnn_engine *e, int r, size_t floats, float **out)
{
    gpu_engine *E = e->impl;
    *out = NULL;
    if (r < 0 || r >= E->n) return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: no replica %d", r);
    eg_alloc *a = calloc(1, sizeof *a);
    if (!a) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a buffer record");
    sdnn_status st = sdnn_dmalloc(E->rep[r].vd, (floats ? floats : 1) * sizeof(float),
                                  (void **)&a->p);
    if (st != SDNN_OK) {
        free(a);
        return st;
    }
    a->n = floats;
    a->r = r;
    pthread_mutex_lock(&E->mu);
    a->next = E->allocs;
    E->allocs = a;
    pthread_mutex_unlock(&E->mu);
    *out = a->p;
    return SDNN_OK;
}

static void eg_buf_free(sdnn_engine *e, int r, float *p)
{
    gpu_engine *E = e->impl;
    (void)r;
    if (!p) return;
    pthread_mutex_lock(&E->mu);
    eg_alloc **pp = &E->allocs, *a = NULL;
    while (*pp && (*pp)->p != p) pp = &(*pp)->next;
    if (*pp) {
        a = *pp;
        *pp = a->next;
    }
    pthread_mutex_unlock(&E->mu);
    if (!a) return;
    /* Queued work may still read it (the caller syncs before it frees). */
    sdnn_dfree(a->p);
    for (int q = 0; q < EG_MAX; ++q) sdnn_dfree(a->mirror[q]);
    free(a);
}

/* The allocation holding [p, p + n), or NULL (caller holds no lock). */
static eg_alloc *find_alloc(gpu_engine *E, const float *p)
{
    pthread_mutex_lock(&E->mu);
    eg_alloc *a = E->allocs;
    while (a && !(p >= a->p && p < a->p + (a->n ? a->n : 1))) a = a->next;
    pthread_mutex_unlock(&E->mu);
    return a;
}

static int same_dev(gpu_engine *E, int a, int b)
{
    return sdnn_dctx_device(E->rep[a].vd) == sdnn_dctx_device(E->rep[b].vd);
}

/* p as replica r's device sees it: p itself, or the comm's mirror of it. */
static const float *on_device(gpu_engine *E, int r, const float *p)
{
    eg_alloc *a = find_alloc(E, p);
    if (!a || same_dev(E, a->r, r) || !a->mirror[r]) return p;
    return a->mirror[r] + (p - a->p);
}

static sdnn_status host_side(gpu_engine *E, int r, const float *dev, size_t n, float *host,
                             int to_host)
{
    eg_rep *R = &E->rep[r];
    SDNN_CHECK(sdnn_dctx_bind(R->vd));
    if (xctx(E, r) != R->vd) SDNN_CHECK(sdnn_dctx_sync_stream(xctx(E, r), SDNN_STREAM_COMM));
    SDNN_CHECK(sdnn_dctx_sync_all(R->vd));
    if (to_host) return sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, host, dev, n * sizeof(float), 1);
    return sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, (float *)dev, host, n * sizeof(float), 1);
}

static sdnn_status eg_buf_read(sdnn_engine *e, int r, const float *src, float *host, size_t n)
{
    return host_side(e->impl, r, src, n, host, 1);
}

static sdnn_status eg_buf_write(sdnn_engine *e, int r, float *dst, const float *host, size_t n)
{
    return host_side(e->impl, r, dst, n, (float *)host, 0);
}

/* ---- training ---------------------------------------------------------------------- */

static void eg_set_callbacks(sdnn_engine *e, const sdnn_engine_callbacks *cb)
{
    gpu_engine *E = e->impl;
    if (cb) E->cb = *cb;
    else memset(&E->cb, 0, sizeof E->cb);
}

static void eg_bind_thread(sdnn_engine *e, int r)
{
    gpu_engine *E = e->impl;
    if (r >= 0 && r < E->n) (void)sdnn_dctx_bind(E->rep[r].vd);
}

static int last_subdivision(const network *net)
{
    return ((*net->seen / (size_t)net->batch) % (size_t)net->subdivisions) == 0;
}

static sdnn_status backward_hook(void *ctx, sdnn_gpu_net *g, int layer)
{
    eg_rep *R = ctx;
    gpu_engine *E = R->E;
    network *net = sdnn_gpu_net_host(g);
    if (!E->hooks || !E->cb.backward_done || !last_subdivision(net)) return SDNN_OK;
    if (E->cb.aborted && E->cb.aborted(E->cb.user)) return SDNN_OK;
    size_t off, n;
    sdnn_gpu_net_layer_span(g, layer, &off, &n);
    if (n) E->cb.backward_done(E->cb.user, R->r, layer);
    return SDNN_OK;
}

static sdnn_status tl_mark(eg_rep *R, sdnn_devent **ev, int i)
{
    if (!R->E->tl || !ev) return SDNN_OK;
    return sdnn_devent_record(ev[i], R->vd, SDNN_STREAM_COMPUTE);
}

/* Darknet's update of every layer, each after cb.before_update. */
static sdnn_status update(gpu_engine *E, eg_rep *R, network *net)
{
    if (!E->hooks || !E->cb.before_update) return sdnn_gpu_net_update(R->g);
    for (int i = 0; i < net->n; ++i) {
        size_t off, n;
        sdnn_gpu_net_layer_span(R->g, i, &off, &n);
        if (n && E->cb.before_update(E->cb.user, R->r, i) != 0) return SDNN_OK;
        SDNN_CHECK(sdnn_gpu_net_update_layers(R->g, i, i));
    }
    return SDNN_OK;
}

static sdnn_status train_rows(gpu_engine *E, eg_rep *R, network *net, const float *x,
                              const float *y, const float *yh, int rows, float *loss);

static sdnn_status eg_train(sdnn_engine *e, int r, data d, float *loss)
{
    gpu_engine *E = e->impl;
    eg_rep *R = &E->rep[r];
    network *net = e->nets[r];
    int batch = net->batch;
    if (loss) *loss = 0;
    if (d.X.rows < 1 || d.X.rows % batch)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: %d rows is not a multiple of batch %d",
                          d.X.rows, batch);
    if (d.X.cols != net->inputs || (net->truths && d.y.cols != net->truths))
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "engine gpu: rows of %d inputs and %d truths, the net takes %d and %d",
                          d.X.cols, d.y.cols, net->inputs, net->truths);
    SDNN_CHECK(sdnn_dctx_bind(R->vd));
    size_t in = (size_t)net->inputs, tr = (size_t)net->truths;
    const float *x, *y, *yh;
    int fed = R->ring && sdnn_gpu_preload_queued(R->ring) > 0;
    if (fed) {
        /* The oldest fed batch: the compute stream waits for its copy. */
        sdnn_gpu_slot sl;
        SDNN_CHECK(sdnn_gpu_preload_pop(R->ring, &sl));
        int want = E->split == SDNN_ENGINE_SPLIT_DEVICE0 && r == 0 ? d.X.rows * E->n : d.X.rows;
        if (sl.rows != want) {
            (void)sdnn_gpu_preload_release(R->ring);
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "engine gpu: replica %d: the fed batch has %d rows, train() was "
                              "given a slice of %d", r, sl.rows, d.X.rows);
        }
        x = sl.x;
        y = sl.y;
        yh = sl.y_host;
    } else {
        SDNN_CHECK(slice_buffers(R, net, d.X.rows));
        /* The staging of the previous train() was read by copies sync() waited for. */
        for (int j = 0; j < d.X.rows; ++j) {
            memcpy(R->hx + (size_t)j * in, d.X.vals[j], in * sizeof(float));
            if (tr) memcpy(R->hy + (size_t)j * tr, d.y.vals[j], tr * sizeof(float));
        }
        SDNN_CHECK(sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, R->x, R->hx,
                              (size_t)d.X.rows * in * 4, 0));
        if (tr)
            SDNN_CHECK(sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, R->y, R->hy,
                                  (size_t)d.X.rows * tr * 4, 0));
        x = R->x;
        y = R->y;
        yh = R->hy;
    }
    sdnn_status st = train_rows(E, R, net, x, y, yh, d.X.rows, loss);
    /* The slot is free for a later push once the compute stream is past
     * this step (the push waits for that event, not the host now). */
    if (fed) {
        sdnn_status rs = sdnn_gpu_preload_release(R->ring);
        if (st == SDNN_OK) st = rs;
    }
    return st;
}

/* Forward, backward and the update of every subdivision of rows already on
 * the device (x, y; yh the truths on the host). */
static sdnn_status train_rows(gpu_engine *E, eg_rep *R, network *net, const float *x,
                              const float *y, const float *yh, int rows, float *loss)
{
    int batch = net->batch;
    size_t in = (size_t)net->inputs, tr = (size_t)net->truths;
    R->checked = 1;
    int nb = rows / batch;
    R->nsub = 0;
    /* The planner's profile, as the cpu engine's hooks give it: per layer,
     * the seconds of its forward and backward in this step (the last
     * subdivision's device events, times the subdivisions). */
    sdnn_hook_ctx *hc = sdnn_hooks_context();
    R->prof = hc ? hc->prof : NULL;
    R->prof_scale = nb;
    SDNN_CHECK(sdnn_gpu_net_profile(R->g, R->prof != NULL));
    if (E->tl && R->anchor) {
        SDNN_CHECK(sdnn_devent_record(R->anchor, R->vd, SDNN_STREAM_COMPUTE));
        R->anchor_t = sdnn_now_s();
    }
    float sum = 0;
    for (int b = 0; b < nb; ++b) {
        size_t r0 = (size_t)b * batch;
        *net->seen += (size_t)batch;
        net->train = 1;
        int rec = E->tl && R->sub_ev && R->nsub < E->subdivisions;
        if (rec) SDNN_CHECK(tl_mark(R, R->sub_ev, 3 * R->nsub));
        float err = 0;
        SDNN_CHECK(sdnn_gpu_net_forward(R->g, x + r0 * in, tr ? y + r0 * tr : NULL,
                                        tr ? yh + r0 * tr : NULL, 1, &err));
        if (rec) SDNN_CHECK(tl_mark(R, R->sub_ev, 3 * R->nsub + 1));
        SDNN_CHECK(sdnn_gpu_net_backward(R->g));
        if (rec) SDNN_CHECK(tl_mark(R, R->sub_ev, 3 * R->nsub + 2));
        if (rec) R->nsub++;
        if (last_subdivision(net)) SDNN_CHECK(update(E, R, net));
        sum += err;
    }
    if (loss) *loss = sum / (float)(nb * batch);
    return SDNN_OK;
}

/* ---- feed (preload rings) -------------------------------------------------------- */

static sdnn_status eg_feed(sdnn_engine *e, data d)
{
    gpu_engine *E = e->impl;
    network *n0 = e->nets[0];
    int B = n0->batch * n0->subdivisions;
    if (d.X.rows != B * E->n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: feed of %d rows, a step takes %d x %d",
                          d.X.rows, E->n, B);
    if (d.X.cols != n0->inputs || (n0->truths && d.y.cols != n0->truths))
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "engine gpu: feed of rows with %d inputs and %d truths, the net takes "
                          "%d and %d", d.X.cols, d.y.cols, n0->inputs, n0->truths);
    /* Every ring or none: the rings stay in step, slot for slot. */
    for (int r = 0; r < E->n; ++r)
        if (sdnn_gpu_preload_room(E->rep[r].ring) < 1)
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "engine gpu: %d batches fed and not trained (preload=%d): train "
                              "before feeding more", sdnn_gpu_preload_queued(E->rep[r].ring),
                              E->preload);
    float *const *ys = n0->truths ? d.y.vals : NULL;
    if (E->split == SDNN_ENGINE_SPLIT_CPU || E->n == 1) {
        for (int r = 0; r < E->n; ++r) {
            SDNN_CHECK(sdnn_dctx_bind(E->rep[r].vd));
            SDNN_CHECK(sdnn_gpu_preload_push(E->rep[r].ring, d.X.vals + (size_t)r * B,
                                             ys ? ys + (size_t)r * B : NULL, B));
        }
        return SDNN_OK;
    }
    /* split=device0: the whole batch to replica 0's device, then each
     * other replica's rows from there (its copy stream waits for the copy
     * to device 0; no host wait).  Replica 0's slot is reused only after
     * every replica trained on it: the engine's caller syncs every replica
     * after train(), and a feed comes after that. */
    SDNN_CHECK(sdnn_dctx_bind(E->rep[0].vd));
    SDNN_CHECK(sdnn_gpu_preload_push(E->rep[0].ring, d.X.vals, ys, B * E->n));
    sdnn_gpu_slot whole;
    sdnn_devent *copied;
    SDNN_CHECK(sdnn_gpu_preload_last(E->rep[0].ring, &whole, &copied));
    int d0 = sdnn_dctx_device(E->rep[0].vd);
    size_t in = (size_t)n0->inputs, tr = (size_t)n0->truths;
    for (int r = 1; r < E->n; ++r) {
        SDNN_CHECK(sdnn_dctx_bind(E->rep[r].vd));
        SDNN_CHECK(sdnn_gpu_preload_push_peer(E->rep[r].ring, whole.x + (size_t)r * B * in,
                                              tr ? whole.y + (size_t)r * B * tr : NULL, d0, copied,
                                              ys ? ys + (size_t)r * B : NULL, B));
    }
    return SDNN_OK;
}

sdnn_gpu_net *sdnn_gpu_engine_net(sdnn_engine *e, int r)
{
    gpu_engine *E = e && e->ops == &sdnn_engine_gpu ? e->impl : NULL;
    return E && r >= 0 && r < E->n ? E->rep[r].g : NULL;
}

sdnn_status sdnn_gpu_engine_preload_stats(sdnn_engine *e, sdnn_gpu_preload_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!e || e->ops != &sdnn_engine_gpu)
        return SDNN_ERROR(SDNN_ERR_INVALID, "preload statistics: not a gpu engine");
    gpu_engine *E = e->impl;
    for (int r = 0; r < E->n; ++r) {
        sdnn_gpu_preload_stats one;
        SDNN_CHECK(sdnn_dctx_sync_all(E->rep[r].vd));
        SDNN_CHECK(sdnn_gpu_preload_stats_get(E->rep[r].ring, &one));
        st->copy_ms += one.copy_ms;
        st->exposed_ms += one.exposed_ms;
        st->bytes += one.bytes;
        st->copies += one.copies;
    }
    return SDNN_OK;
}

/* ---- the exchange's side --------------------------------------------------------- */

static void span(eg_rep *R, int layer, size_t *off, size_t *n, float **upd)
{
    sdnn_gpu_net_layer_span(R->g, layer, off, n);
    sdnn_gpu_net_arena(R->g, NULL, upd, NULL);
}

/* An op without a status of its own: the next sync() reports its failure. */
static sdnn_status fail_later(eg_rep *R, sdnn_status st)
{
    if (st != SDNN_OK && R->err == SDNN_OK) {
        R->err = st;
        snprintf(R->err_msg, sizeof R->err_msg, "%s", sdnn_last_error());
    }
    return st;
}

static void eg_snapshot(sdnn_engine *e, int r, int layer, float *dst)
{
    eg_rep *R = &((gpu_engine *)e->impl)->rep[r];
    size_t off, n;
    float *upd;
    span(R, layer, &off, &n, &upd);
    if (n) (void)fail_later(R, sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, dst, upd + off,
                                          n * sizeof(float), 0));
}

static int eg_pack(sdnn_engine *e, int r, int layer, const float *snap, float *dst,
                   sdnn_engine_bad *bad)
{
    (void)bad;   /* deferred: sync() names it */
    eg_rep *R = &((gpu_engine *)e->impl)->rep[r];
    size_t off, n;
    float *upd;
    span(R, layer, &off, &n, &upd);
    R->checked = 1;
    if (n) (void)fail_later(R, sdnn_k_sub_check(R->vd, SDNN_STREAM_COMPUTE, dst, upd + off,
                                                 snap, n, &R->bad[layer]));
    return 0;
}

static int eg_check(sdnn_engine *e, int r, int layer, sdnn_engine_bad *bad)
{
    (void)bad;
    eg_rep *R = &((gpu_engine *)e->impl)->rep[r];
    size_t off, n;
    float *upd;
    span(R, layer, &off, &n, &upd);
    R->checked = 1;
    if (n) (void)fail_later(R, sdnn_k_sub_check(R->vd, SDNN_STREAM_COMPUTE, NULL, upd + off,
                                                 NULL, n, &R->bad[layer]));
    return 0;
}

static sdnn_status grow(sdnn_dctx *c, void **p, size_t *have, size_t want)
{
    if (*have >= want) return SDNN_OK;
    SDNN_CHECK(sdnn_dctx_sync_all(c));
    sdnn_dfree(*p);
    *p = NULL;
    *have = 0;
    SDNN_CHECK(sdnn_dmalloc(c, want, p));
    *have = want;
    return SDNN_OK;
}

static sdnn_status ef_step(gpu_engine *E, int r, const sdnn_codec_ops *codec,
                           const sdnn_codec_params *p, float *grad, float *resid, float *vel,
                           float momentum, size_t n, uint64_t stream)
{
    eg_rep *R = &E->rep[r];
    int id = sdnn_dcodec_of(codec);
    if (id < 0)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine gpu: codec %s has no device codec",
                          codec ? codec->name : "(null)");
    sdnn_dctx *c = xctx(E, r);
    SDNN_CHECK(grow(c, &R->enc, &R->enc_n, sdnn_dcodec_size(id, p, n)));
    size_t cs = sdnn_dcodec_scratch_bytes(id, p, n);
    if (cs) SDNN_CHECK(grow(c, &R->cscr, &R->cscr_n, cs));
    /* After everything r's compute stream queued (the packs), whether or
     * not ready_wait came first. */
    SDNN_CHECK(sdnn_devent_record(R->ef_ev, R->vd, SDNN_STREAM_COMPUTE));
    SDNN_CHECK(sdnn_devent_wait(R->ef_ev, c, SDNN_STREAM_COMM));
    SDNN_CHECK(sdnn_dctx_bind(c));
    sdnn_status st = sdnn_dcodec_ef_step(c, SDNN_STREAM_COMM, id, p, grad, resid, vel, momentum,
                                         n, R->enc, cs ? R->cscr : NULL, stream);
    (void)sdnn_dctx_bind(R->vd);
    return st;
}

static void eg_ef_step(sdnn_engine *e, int r, const sdnn_codec_ops *codec,
                       const sdnn_codec_params *p, float *grad, float *resid, float *vel,
                       float momentum, size_t n, void *scratch, uint64_t stream)
{
    (void)scratch;   /* the device codecs' own buffers */
    gpu_engine *E = e->impl;
    (void)fail_later(&E->rep[r], ef_step(E, r, codec, p, grad, resid, vel, momentum, n, stream));
}

static void eg_apply(sdnn_engine *e, int r, int layer, const float *snap, const float *mean)
{
    gpu_engine *E = e->impl;
    eg_rep *R = &E->rep[r];
    size_t off, n;
    float *upd;
    span(R, layer, &off, &n, &upd);
    if (!n) return;
    (void)fail_later(R, sdnn_k_add(R->vd, SDNN_STREAM_COMPUTE, upd + off, snap,
                                   on_device(E, r, mean), n));
}

static void eg_ready(sdnn_engine *e, int r, int bucket)
{
    gpu_engine *E = e->impl;
    if (bucket < 0 || bucket >= E->layers) return;
    eg_rep *R = &E->rep[r];
    (void)fail_later(R, sdnn_devent_record(R->ready[bucket], R->vd, SDNN_STREAM_COMPUTE));
}

static sdnn_status eg_ready_wait(sdnn_engine *e, int r, int bucket)
{
    gpu_engine *E = e->impl;
    if (bucket < 0 || bucket >= E->layers)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: bucket %d (at most %d)", bucket,
                          E->layers);
    eg_rep *R = &E->rep[r];
    sdnn_dctx *c = xctx(E, r);
    SDNN_CHECK(sdnn_devent_wait(R->ready[bucket], c, SDNN_STREAM_COMM));
    if (E->tl && R->x_ev) {
        SDNN_CHECK(sdnn_devent_record(R->x_ev[2 * bucket], c, SDNN_STREAM_COMM));
        R->x_state[bucket] = 1;
        R->x_cur = bucket;
    }
    return SDNN_OK;
}

/* The end of the exchange of every replica's current bucket (the comm). */
static sdnn_status tl_exchange_end(gpu_engine *E)
{
    if (!E->tl) return SDNN_OK;
    for (int r = 0; r < E->n; ++r) {
        eg_rep *R = &E->rep[r];
        int b = R->x_cur;
        if (!R->x_ev || b < 0 || R->x_state[b] != 1) continue;
        SDNN_CHECK(sdnn_devent_record(R->x_ev[2 * b + 1], xctx(E, r), SDNN_STREAM_COMM));
        R->x_state[b] = 2;
        R->x_cur = -1;
    }
    return SDNN_OK;
}

static double ev_time(eg_rep *R, sdnn_devent *ev)
{
    float ms = 0;
    if (sdnn_devent_elapsed(R->anchor, ev, &ms) != SDNN_OK) return -1;
    return R->anchor_t + ms / 1000.0;
}

static void tl_write(gpu_engine *E, eg_rep *R, network *net)
{
    if (!E->tl || !R->anchor) return;
    int track = SDNN_TL_TRACK_REPLICA0 + R->r;
    double it = (double)get_current_batch(net);
    for (int j = 0; j < R->nsub; ++j) {
        double a = ev_time(R, R->sub_ev[3 * j]), b = ev_time(R, R->sub_ev[3 * j + 1]),
               c = ev_time(R, R->sub_ev[3 * j + 2]);
        if (a >= 0 && b >= a)
            sdnn_timeline_span(E->tl, track, SDNN_TL_FORWARD, a, b, it, -1, j, "device");
        if (b >= 0 && c >= b)
            sdnn_timeline_span(E->tl, track, SDNN_TL_BACKWARD, b, c, it, -1, j, "device");
    }
    R->nsub = 0;
    for (int k = 0; k < E->layers; ++k) {
        if (R->x_state[k] != 2) {
            R->x_state[k] = 0;
            continue;
        }
        double a = ev_time(R, R->x_ev[2 * k]), b = ev_time(R, R->x_ev[2 * k + 1]);
        if (a >= 0 && b >= a)
            sdnn_timeline_span(E->tl, track, SDNN_TL_ALLREDUCE, a, b, it, k, 0, "device");
        R->x_state[k] = 0;
    }
}

/* Tensor and element of element `at` of layer i's span (weights, biases,
 * scales, as sdnn_layer_params lists them). */
static void name_element(network *net, int i, unsigned long long at, const char **what, long *el)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[i], p);
    size_t rest = (size_t)at;
    for (int j = 0; j < np; ++j) {
        if (rest < p[j].n) {
            *what = p[j].what;
            *el = (long)rest;
            return;
        }
        rest -= p[j].n;
    }
    *what = "parameters";
    *el = (long)at;
}

static sdnn_status eg_sync(sdnn_engine *e, int r)
{
    gpu_engine *E = e->impl;
    eg_rep *R = &E->rep[r];
    network *net = e->nets[r];
    SDNN_CHECK(sdnn_dctx_bind(R->vd));
    if (xctx(E, r) != R->vd) SDNN_CHECK(sdnn_dctx_sync_stream(xctx(E, r), SDNN_STREAM_COMM));
    SDNN_CHECK(sdnn_dctx_sync_all(R->vd));
    tl_write(E, R, net);
    if (R->prof) {
        SDNN_CHECK(sdnn_gpu_net_profile_read(R->g, R->prof, (double)R->prof_scale));
        R->prof = NULL;
    }
    if (R->err != SDNN_OK) {
        sdnn_status st = R->err;
        R->err = SDNN_OK;
        return SDNN_ERROR(st, "engine gpu, replica %d: %s", r, R->err_msg);
    }
    R->bad_layer = -1;
    if (!R->checked) return SDNN_OK;
    R->checked = 0;
    SDNN_CHECK(sdnn_dcopy(R->vd, SDNN_STREAM_COMPUTE, R->bad_host, R->bad,
                          (size_t)E->layers * sizeof *R->bad, 1));
    /* The layer whose backward finished first (the host's pack order). */
    for (int i = E->layers - 1; i >= 0; --i) {
        if (R->bad_host[i] == EG_NOBAD) continue;
        const char *what;
        long el;
        name_element(net, i, R->bad_host[i], &what, &el);
        R->bad_layer = i;
        R->bad_what.what = what;
        R->bad_what.at = el;
        SDNN_CHECK(reset_bad(E, R));
        return SDNN_ERROR(SDNN_ERR_NONFINITE,
                          "non-finite gradient in the step to iteration %zu: layer %d (%s) "
                          "%s[%ld] on replica %d (found on the device); training stopped, "
                          "saved weights are left as they were (lower learning_rate, raise "
                          "burn_in, or check the input images)",
                          get_current_batch(net), i, sdnn_layer_type_name(net->layers[i].type),
                          what, el, r);
    }
    return SDNN_OK;
}

static int eg_nonfinite_at(sdnn_engine *e, int r, int *layer, sdnn_engine_bad *bad)
{
    eg_rep *R = &((gpu_engine *)e->impl)->rep[r];
    if (R->bad_layer < 0) return 0;
    *layer = R->bad_layer;
    if (bad) *bad = R->bad_what;
    return 1;
}

/* ---- host networks ---------------------------------------------------------------- */

static unsigned move_flags(unsigned what)
{
    unsigned m = 0;
    if (what & SDNN_ENGINE_PARAMS) m |= SDNN_GPU_MOVE_PARAMS;
    if (what & SDNN_ENGINE_UPDATES) m |= SDNN_GPU_MOVE_UPDATES;
    if (what & SDNN_ENGINE_BNSTATS) m |= SDNN_GPU_MOVE_BNSTATS;
    if (what & SDNN_ENGINE_FORWARD) m |= SDNN_GPU_MOVE_FORWARD;
    return m;
}

static sdnn_status move(sdnn_engine *e, unsigned what, int to_device)
{
    gpu_engine *E = e->impl;
    unsigned m = move_flags(what);
    if (!m) return SDNN_OK;
    for (int r = 0; r < E->n; ++r) {
        SDNN_CHECK(sdnn_dctx_sync_all(E->rep[r].vd));
        SDNN_CHECK(sdnn_gpu_net_move(E->rep[r].g, to_device, m));
    }
    return SDNN_OK;
}

static sdnn_status eg_pull(sdnn_engine *e, unsigned what) { return move(e, what, 0); }
static sdnn_status eg_push(sdnn_engine *e, unsigned what) { return move(e, what, 1); }

static sdnn_status eg_resize(sdnn_engine *e, int w, int h)
{
    gpu_engine *E = e->impl;
    (void)w;
    (void)h;
    /* resize_network keeps the host parameter buffers; the device holds
     * their current values: bring them home, then mirror the resized net. */
    for (int r = 0; r < E->n; ++r) {
        eg_rep *R = &E->rep[r];
        SDNN_CHECK(sdnn_dctx_sync_all(R->vd));
        SDNN_CHECK(sdnn_gpu_net_pull(R->g));
        sdnn_gpu_net_destroy(R->g);
        R->g = NULL;
        free_slice(R);
        /* Slots fed at the old size are dropped with their ring (the
         * trainer drops their host batches); E->comm is kept. */
        sdnn_gpu_preload_destroy(R->ring);
        R->ring = NULL;
        SDNN_CHECK(make_net(E, R, e->nets[r]));
    }
    return SDNN_OK;
}

/* ---- timeline ---------------------------------------------------------------------- */

static sdnn_status timeline_events(gpu_engine *E, eg_rep *R)
{
    if (R->anchor) return SDNN_OK;
    int ns = 3 * E->subdivisions, nx = 2 * E->layers;
    R->sub_ev = calloc((size_t)ns, sizeof *R->sub_ev);
    R->x_ev = calloc((size_t)nx, sizeof *R->x_ev);
    R->x_state = calloc((size_t)E->layers, 1);
    if (!R->sub_ev || !R->x_ev || !R->x_state)
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for timeline events");
    for (int i = 0; i < ns; ++i) SDNN_CHECK(sdnn_devent_create(R->vd, 1, &R->sub_ev[i]));
    for (int i = 0; i < nx; ++i) SDNN_CHECK(sdnn_devent_create(xctx(E, R->r), 1, &R->x_ev[i]));
    return sdnn_devent_create(R->vd, 1, &R->anchor);
}

static void eg_set_timeline(sdnn_engine *e, struct sdnn_timeline *tl)
{
    gpu_engine *E = e->impl;
    if (tl)
        for (int r = 0; r < E->n; ++r)
            if (timeline_events(E, &E->rep[r]) != SDNN_OK) {
                tl = NULL;   /* no device spans rather than half of them */
                break;
            }
    E->tl = tl;
}

/* ---- the comm over the engine's buffers ------------------------------------------ */

/* Between processes there are two paths, picked by the trainer's backend:
 *   mpi   hierarchical: each process's device mean (the local ring) goes
 *         through pinned host memory to the mpi backend and back;
 *   nccl  one NCCL communicator over every device of every process
 *         (processes x devices ranks, process p's device d is rank
 *         p * devices + d): process 0 makes the NCCL id, the bootstrap
 *         (comm_nccl.c, the mpi backend underneath) broadcasts it, and the
 *         bucket collectives run device to device on the ring over it,
 *         every wait bounded by comm_timeout_s (ring.c).  On simulated
 *         devices the NCCL is sim/nccl.c's, between processes through
 *         shared memory: the host logic, ordering and arithmetic, never
 *         real NCCL's behaviour. */

typedef struct eg_comm {
    gpu_engine *E;
    sdnn_comm *host;             /* the trainer's (not owned) */
    int world_ring;              /* nccl: ring spans every device of every process */
    sdnn_dring *ring;
    float *h;                    /* pinned: every local buffer, between processes */
    size_t h_n;
    /* The pricing of each bucket's collective (sdnn_cm_choose): the link
     * (the comm table's set_link: the step's, "measured" or "cfg", in
     * link_how; until then SDNN_EG_LINK, "default") and the device codecs'
     * rate (SDNN_EG_CODEC_BPS: the step measures host codecs only). */
    sdnn_link link;
    char link_how[16];
    double codec_Bps;
} eg_comm;

/* Until the step hands over its measured link, an NVLink4-class link
 * between the devices (costmodel.c's nvlink4: 3 us, 450 GB/s). */
#define SDNN_EG_LINK "nvlink4"
/* Device codec kernels stream the bucket at memory speed: 1e12 fp32 bytes/s
 * (an HBM-class device moves several TB/s; the kernels read and write). */
#define SDNN_EG_CODEC_BPS 1e12

static int spans_processes(const eg_comm *g) { return g->host && g->host->size > 1; }
/* Through host memory to the mpi backend (backend=mpi between processes). */
static int via_host(const eg_comm *g) { return spans_processes(g) && !g->world_ring; }

static sdnn_status check_nin(eg_comm *g, int nin)
{
    if (nin != g->E->n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu comm: %d buffers for %d replicas", nin,
                          g->E->n);
    return SDNN_OK;
}

/* The replica whose device holds p (0 when the engine did not allocate it). */
static int owner(gpu_engine *E, const float *p)
{
    eg_alloc *a = find_alloc(E, p);
    return a ? a->r : 0;
}

/* Replica r's copy of out (out itself on its owner's device). */
static sdnn_status mirror_of(gpu_engine *E, float *out, size_t n, int r, float **m)
{
    eg_alloc *a = find_alloc(E, out);
    if (!a || same_dev(E, a->r, r)) {
        *m = out;
        return SDNN_OK;
    }
    if (!a->mirror[r])
        SDNN_CHECK(sdnn_dmalloc(E->rep[r].vd, (a->n ? a->n : 1) * sizeof(float),
                                (void **)&a->mirror[r]));
    (void)n;
    *m = a->mirror[r] + (out - a->p);
    return SDNN_OK;
}

static sdnn_status staging(eg_comm *g, size_t floats)
{
    if (g->h_n >= floats) return SDNN_OK;
    sdnn_hfree_pinned(g->h);
    g->h = NULL;
    g->h_n = 0;
    SDNN_CHECK(sdnn_hmalloc_pinned(floats * sizeof(float), (void **)&g->h));
    g->h_n = floats;
    return SDNN_OK;
}

/* Every local buffer to host staging (slot r at h + r * n). */
static sdnn_status to_host(eg_comm *g, const float *const *in, size_t n)
{
    gpu_engine *E = g->E;
    SDNN_CHECK(staging(g, n * (size_t)E->n));
    for (int r = 0; r < E->n; ++r) {
        sdnn_dctx *c = E->rep[owner(E, in[r])].vd;
        SDNN_CHECK(sdnn_dcopy(c, SDNN_STREAM_COMM, g->h + (size_t)r * n, in[r],
                              n * sizeof(float), 1));
    }
    return SDNN_OK;
}

static sdnn_status from_host(eg_comm *g, const float *h, float *dst, size_t n)
{
    gpu_engine *E = g->E;
    sdnn_dctx *c = E->rep[owner(E, dst)].vd;
    return sdnn_dcopy(c, SDNN_STREAM_COMM, dst, h, n * sizeof(float), 1);
}

static sdnn_status gc_mean(sdnn_comm *c, const float *const *in, int nin, float *out, size_t n)
{
    eg_comm *g = c->impl;
    gpu_engine *E = g->E;
    SDNN_CHECK(check_nin(g, nin));
    if (via_host(g)) {
        SDNN_CHECK(to_host(g, in, n));
        const float *hin[EG_MAX];
        for (int r = 0; r < nin; ++r) hin[r] = g->h + (size_t)r * n;
        float *res = g->h;   /* out may alias in[0] */
        SDNN_CHECK(sdnn_comm_allreduce_mean(g->host, hin, nin, res, n, NULL));
        SDNN_CHECK(from_host(g, res, out, n));
        for (int r = 0; r < E->n; ++r) {
            float *m;
            SDNN_CHECK(mirror_of(E, out, n, r, &m));
            if (m != out) SDNN_CHECK(from_host(g, res, m, n));
        }
        return tl_exchange_end(E);
    }
    float *outs[EG_MAX];
    for (int r = 0; r < nin; ++r) SDNN_CHECK(mirror_of(E, out, n, r, &outs[r]));
    sdnn_dring_set_timeout(g->ring, c->timeout_s);
    SDNN_CHECK(sdnn_dring_mean(g->ring, in, outs, n, NULL));
    SDNN_CHECK(tl_exchange_end(E));
    return sdnn_dring_sync(g->ring);
}

/* The ring is NCCL's (not device copies): the collectives apply. */
static int gc_over_nccl(const eg_comm *g)
{
    return g->ring && sdnn_dring_offers(g->ring, &sdnn_codec_fp16, SDNN_CM_NATIVE);
}

/* The collectives the ring offers for a lossy codec (sdnn_dring_offers)
 * among those the engine takes (costmodel.h's SDNN_CM_OFFERS_GPU_ENGINE):
 * over NCCL the native half / bf16 allreduce and the all-gather of any
 * codec besides collective.c's ways, within the byte cap (the dense
 * all-gather at W = 2 only); over device copies (virtual devices)
 * collective.c's ways only (0), bit for bit the host ring.  The identity
 * codec keeps its way. */
static unsigned gc_offers(const eg_comm *g, const sdnn_codec_ops *codec)
{
    if (!g->ring || !codec->lossy || !gc_over_nccl(g)) return 0;
    unsigned m = 0;
    for (int k = 0; k < SDNN_CM_NCOLL; ++k)
        if (sdnn_dring_offers(g->ring, codec, (sdnn_cm_coll)k)) m |= SDNN_CM_OFFERS(k);
    /* with the engine's byte cap: never more bytes than collective.c's way */
    return m ? (m | SDNN_CM_OFFERS_BYTE_CAP) & SDNN_CM_OFFERS_GPU_ENGINE : 0;
}

static int gc_world(const eg_comm *g)
{
    return g->world_ring ? g->host->size * g->E->n : g->E->n;
}

static void gc_env(const eg_comm *g, const sdnn_codec_ops *codec, const sdnn_codec_params *p,
                   sdnn_cm_env *env, sdnn_codec_model *m)
{
    memset(env, 0, sizeof *env);
    env->link = g->link;
    env->world = gc_world(g);
    env->overlap = 1;
    *m = sdnn_codec_model_of(codec, p, g->codec_Bps, g->codec_Bps);
    env->codecs = m;
    env->ncodecs = 1;
}

/* The start banner's lines (process 0, over NCCL): told the exchange's
 * buckets before the first travels (the comm table's announce op), one
 * line per choice, i.e. per codec and collective, with the prices of the
 * closest call among its buckets and the crossover (sdnn_cm_group_line).
 * gc_coded prices each bucket by the same model, so what travels is what
 * was said. */
static void gc_announce(sdnn_comm *c, const sdnn_codec_ops *const *codec, const size_t *n, int nb,
                        const sdnn_codec_params *p, int plan)
{
    eg_comm *g = c->impl;
    if (!g || !gc_over_nccl(g) || (g->host && g->host->rank != 0)) return;
    double *bytes = malloc((size_t)nb * sizeof *bytes);
    int *ids = malloc((size_t)nb * sizeof *ids);
    sdnn_cm_coll *path = malloc((size_t)nb * sizeof *path);
    char *done = calloc((size_t)nb, 1);
    if (!bytes || !ids || !path || !done) goto out;
    int said = 0;
    for (int k = 0; k < nb; ++k) {
        done[k] = 1;
        if (!codec[k] || !gc_offers(g, codec[k])) continue;
        sdnn_cm_env env;
        sdnn_codec_model m;
        gc_env(g, codec[k], p, &env, &m);
        path[k] = sdnn_cm_choose(&env, &m, (double)n[k] * sizeof(float), gc_offers(g, codec[k]));
        done[k] = 0;
    }
    for (int k = 0; k < nb; ++k) {
        if (done[k]) continue;
        sdnn_cm_env env;
        sdnn_codec_model m;
        gc_env(g, codec[k], p, &env, &m);
        int cnt = 0;
        for (int j = k; j < nb; ++j)
            if (!done[j] && codec[j] == codec[k] && path[j] == path[k]) {
                bytes[cnt] = (double)n[j] * sizeof(float);
                ids[cnt++] = j;
                done[j] = 1;
            }
        if (!said++) {
            char dev[160] = "", desc[256];
            eg_describe_device(sdnn_dctx_device(g->E->rep[0].vd), desc, sizeof desc);
            if (strstr(desc, "simulated"))
                snprintf(dev, sizeof dev, "; simulated devices: the choice and the arithmetic, "
                         "never NCCL's timing");
            /* the link it priced with, and where that came from */
            printf("scalednn: collective per bucket over NCCL, one line per choice for the %s%d "
                   "buckets (cost model: link: %s %s%s, %.1f us, %.2f GB/s, device codecs "
                   "%.0f GB/s, world %d%s):\n", plan ? "plan's " : "", nb, g->link_how,
                   env.link.name, strcmp(g->link_how, "measured") ? " (not measured)" : "",
                   env.link.alpha_s * 1e6, env.link.beta_Bps / 1e9, g->codec_Bps / 1e9,
                   env.world, dev);
        }
        char line[512];
        sdnn_cm_group_line(&env, &m, bytes, ids, cnt, gc_offers(g, codec[k]), line, sizeof line);
        printf("scalednn:   %s\n", line);
    }
    fflush(stdout);
out:
    free(bytes);
    free(ids);
    free(path);
    free(done);
}

static sdnn_status gc_coded(sdnn_comm *c, const sdnn_codec_ops *codec, const sdnn_codec_params *p,
                            uint64_t stream, const float *const *in, int nin, float *const *out,
                            size_t n, size_t *wire)
{
    eg_comm *g = c->impl;
    gpu_engine *E = g->E;
    if (wire) *wire = 0;
    SDNN_CHECK(check_nin(g, nin));
    if (via_host(g)) {
        SDNN_CHECK(to_host(g, in, n));
        const float *hin[EG_MAX];
        float *hout[EG_MAX];
        for (int r = 0; r < nin; ++r) hin[r] = hout[r] = g->h + (size_t)r * n;
        SDNN_CHECK(sdnn_comm_allreduce_mean_coded(g->host, codec, p, stream, hin, nin, hout, n,
                                                  wire));
        /* The host comm said what each replica sends; this table reports
         * its nin buffers' sum, as the device ring does (comm.h). */
        if (wire) *wire *= (size_t)nin;
        for (int r = 0; r < nin; ++r) SDNN_CHECK(from_host(g, hout[r], out[r], n));
        return tl_exchange_end(E);
    }
    size_t sent = 0;
    sdnn_dring_set_timeout(g->ring, c->timeout_s);
    const unsigned offers = gc_offers(g, codec);
    if (offers) {
        sdnn_cm_env env;
        sdnn_codec_model m;
        gc_env(g, codec, p, &env, &m);
        const sdnn_cm_coll path = sdnn_cm_choose(&env, &m, (double)n * sizeof(float), offers);
        SDNN_CHECK(sdnn_dring_exchange(g->ring, path, codec, p, stream, in, out, n, &sent));
    } else {
        SDNN_CHECK(sdnn_dring_coded(g->ring, codec, p, stream, in, out, n, &sent));
    }
    SDNN_CHECK(tl_exchange_end(E));
    SDNN_CHECK(sdnn_dring_sync(g->ring));
    if (wire) *wire = sent;
    return SDNN_OK;
}

/* Device buffers through host staging to the host backend and back. */
static sdnn_status gc_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    eg_comm *g = c->impl;
    if (!spans_processes(g)) return SDNN_OK;
    const float *in[1] = {buf};
    SDNN_CHECK(staging(g, n));
    SDNN_CHECK(sdnn_dcopy(g->E->rep[owner(g->E, buf)].vd, SDNN_STREAM_COMM, g->h, in[0],
                          n * sizeof(float), 1));
    SDNN_CHECK(sdnn_comm_broadcast(g->host, g->h, n));
    return from_host(g, g->h, buf, n);
}

static sdnn_status gc_central(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    eg_comm *g = c->impl;
    if (wire) *wire = 0;
    if (!spans_processes(g)) return SDNN_OK;
    SDNN_CHECK(staging(g, n));
    SDNN_CHECK(sdnn_dcopy(g->E->rep[owner(g->E, buf)].vd, SDNN_STREAM_COMM, g->h, buf,
                          n * sizeof(float), 1));
    SDNN_CHECK(sdnn_comm_central_mean(g->host, g->h, n, wire));
    return from_host(g, g->h, buf, n);
}

static sdnn_status gc_barrier(sdnn_comm *c)
{
    eg_comm *g = c->impl;
    return g->host ? sdnn_comm_barrier(g->host) : SDNN_OK;
}

static void gc_destroy(sdnn_comm *c)
{
    eg_comm *g = c->impl;
    if (!g) return;
    sdnn_dring_destroy(g->ring);
    sdnn_hfree_pinned(g->h);
    free(g);
    c->impl = NULL;
}

static int gc_available(void) { return 1; }
static sdnn_status gc_init(sdnn_comm *c)
{
    (void)c;
    return SDNN_ERROR(SDNN_ERR_INVALID, "the gpu engine's comm is opened by comm_open");
}

/* The comm table's offers op: gc_offers of this handle. */
static unsigned gc_offers_op(const sdnn_comm *c, const sdnn_codec_ops *codec)
{
    return gc_offers(c->impl, codec);
}

/* The comm table's set_link op: the link every later choice and banner
 * prices with. */
static sdnn_status gc_set_link(sdnn_comm *c, const sdnn_link *link, const char *how)
{
    eg_comm *g = c->impl;
    if (!g) return SDNN_ERROR(SDNN_ERR_INVALID, "gpu engine comm: closed");
    if (!(link->beta_Bps > 0) || !(link->alpha_s >= 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "gpu engine comm: a link needs bandwidth > 0 and "
                          "latency >= 0 (%s: %g s, %g B/s)", link->name, link->alpha_s,
                          link->beta_Bps);
    g->link = *link;
    snprintf(g->link_how, sizeof g->link_how, "%s", how);
    return SDNN_OK;
}

static const sdnn_comm_ops gc_ops = {
    .name = "gpu-engine",
    .available = gc_available,
    .init = gc_init,
    .allreduce_mean = gc_mean,
    .allreduce_mean_coded = gc_coded,
    .broadcast = gc_broadcast,
    .central_mean = gc_central,
    .barrier = gc_barrier,
    .destroy = gc_destroy,
    .hierarchical = 0,
    .unavailable_reason = NULL,
    .offers = gc_offers_op,
    .announce = gc_announce,
    .set_link = gc_set_link,
};

/* backend=nccl between processes: every process the same device count,
 * then the id from process 0 and the ring over the world of
 * processes x devices NCCL ranks. */
static sdnn_status open_world(eg_comm *g, sdnn_comm *host, sdnn_dctx *const *ctxs)
{
    gpu_engine *E = g->E;
    /* One replica on one device is an NCCL rank like any other; only
     * several replicas of this process on one device (an id repeated in
     * -gpus, which virtual=1 allows) cannot each be a rank. */
    if (E->one_device && E->n > 1)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "backend=nccl between %d processes: the %d replicas of process %d all "
                          "run on device %d (-gpus repeats the id, which virtual=1 allows), and "
                          "NCCL needs a device of its own per replica; list distinct devices "
                          "(e.g. -gpus 0,1) or set backend=mpi",
                          host->size, E->n, host->rank, sdnn_dctx_device(E->rep[0].vd));
    /* The mean of n and of n*n over the processes: equal counts leave no
     * variance (host scalars, carried by the bootstrap). */
    float cnt[2] = {(float)E->n, (float)E->n * (float)E->n};
    const float *in[1] = {cnt};
    SDNN_CHECK(sdnn_comm_allreduce_mean(host, in, 1, cnt, 2, NULL));
    if (fabsf(cnt[0] - (float)E->n) > 0.01f || fabsf(cnt[1] - cnt[0] * cnt[0]) > 0.01f)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "backend=nccl: process %d drives %d devices, and the processes do not "
                          "all drive the same number (mean %.2f); give every process the same "
                          "-gpus count", host->rank, E->n, (double)cnt[0]);
    float idf[SDNN_NCCL_ID_BYTES / sizeof(float)];
    unsigned char id[SDNN_NCCL_ID_BYTES];
    memset(idf, 0, sizeof idf);
    /* A process 0 that cannot make an id still joins the broadcast (with
     * zeros), so that the others fail at init instead of waiting. */
    sdnn_status made = host->rank == 0 ? sdnn_dnccl_unique_id(id) : SDNN_OK;
    if (host->rank == 0 && made == SDNN_OK) memcpy(idf, id, sizeof id);
    SDNN_CHECK(sdnn_comm_broadcast(host, idf, sizeof idf / sizeof idf[0]));
    if (made != SDNN_OK) return made;
    memcpy(id, idf, sizeof id);
    const int world = host->size * E->n, first = host->rank * E->n;
    SDNN_CHECK(sdnn_dring_create_nccl_world(id, world, first, ctxs, E->n, host->timeout_s,
                                            &g->ring));
    g->world_ring = 1;
    sdnn_comm_nccl_claim(host);
    return SDNN_OK;
}

/* The start banner's line for the exchange between processes (process 0). */
static void say_path(const eg_comm *g)
{
    const sdnn_comm *h = g->host;
    if (!h || h->rank != 0) return;
    if (g->world_ring)
        printf("scalednn: backend nccl: one NCCL communicator of %d ranks (%d process%s x %d "
               "device%s), its id through mpi\n", h->size * g->E->n, h->size,
               h->size == 1 ? "" : "es", g->E->n, g->E->n == 1 ? "" : "s");
    else if (h->size > 1)
        printf("scalednn: backend %s: each process's device mean through pinned host memory, "
               "then %s between the %d processes (hierarchical)\n", sdnn_comm_name(h),
               sdnn_comm_name(h), h->size);
    else if (sdnn_comm_is_nccl_boot(h) && g->E->one_device)
        printf("scalednn: backend nccl: one process, its %d replicas on one device (device "
               "copies)\n", g->E->n);
    else if (sdnn_comm_is_nccl_boot(h))
        printf("scalednn: backend nccl: one process, NCCL over its %d device%s\n", g->E->n,
               g->E->n == 1 ? "" : "s");
    fflush(stdout);
}

static sdnn_status eg_comm_open(sdnn_engine *e, struct sdnn_comm *host, struct sdnn_comm **out)
{
    gpu_engine *E = e->impl;
    *out = NULL;
    if (E->comm) {
        *out = E->comm;
        return SDNN_OK;
    }
    eg_comm *g = calloc(1, sizeof *g);
    sdnn_comm *c = calloc(1, sizeof *c);
    if (!g || !c) {
        free(g);
        free(c);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the gpu engine's comm");
    }
    g->E = E;
    g->host = host;
    (void)sdnn_link_find(SDNN_EG_LINK, &g->link);
    snprintf(g->link_how, sizeof g->link_how, "default");
    g->codec_Bps = SDNN_EG_CODEC_BPS;
    c->ops = &gc_ops;
    c->rank = host ? host->rank : 0;
    c->size = host ? host->size : 1;
    c->timeout_s = host ? host->timeout_s : SDNN_COMM_TIMEOUT_S;
    c->impl = g;
    sdnn_dctx *ctxs[EG_MAX];
    for (int r = 0; r < E->n; ++r) ctxs[r] = E->rep[r].vd;
    sdnn_status st;
    if (host && host->size > 1 && sdnn_comm_is_nccl_boot(host))
        st = open_world(g, host, ctxs);
    else if (E->one_device)
        st = sdnn_dring_create(ctxs, E->n, NULL, E->n, 0, &g->ring);
    else
        st = sdnn_dring_create_nccl_local(ctxs, E->n, &g->ring);
    if (st == SDNN_OK && host && sdnn_comm_is_nccl_boot(host)) sdnn_comm_nccl_claim(host);
    if (st != SDNN_OK) {
        sdnn_comm_close(c);
        return st;
    }
    say_path(g);
    E->comm = c;
    *out = c;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_engine_comm_pricing(const sdnn_comm *c, const sdnn_codec_ops *codec,
                                         const sdnn_codec_params *p, size_t n,
                                         sdnn_cm_env *env, sdnn_codec_model *m,
                                         unsigned *offers, sdnn_cm_coll *path)
{
    if (!c || c->ops != &gc_ops || !c->impl || !codec)
        return SDNN_ERROR(SDNN_ERR_INVALID, "not the gpu engine's comm");
    const eg_comm *g = c->impl;
    gc_env(g, codec, p, env, m);
    env->codecs = m;
    *offers = gc_offers(g, codec);
    *path = *offers ? sdnn_cm_choose(env, m, (double)n * sizeof(float), *offers)
                    : sdnn_cm_coll_default(m);
    return SDNN_OK;
}

/* The host-loss counters since the last call (net.c's round trip). */
static sdnn_status eg_host_loss_take(sdnn_engine *e, int r, uint64_t *bytes, double *wait_s)
{
    gpu_engine *E = e->impl;
    *bytes = 0;
    *wait_s = 0;
    if (r < 0 || r >= E->n) return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: no replica %d", r);
    eg_rep *R = &E->rep[r];
    sdnn_gpu_host_loss_stats now;
    SDNN_CHECK(sdnn_gpu_net_host_loss_stats(R->g, &now));
    const sdnn_gpu_host_loss_stats *p = &R->hl_taken;
    /* a resize made a new net: its counters start again */
    if (now.d2h_bytes < p->d2h_bytes || now.h2d_bytes < p->h2d_bytes ||
        now.sum_bytes < p->sum_bytes || now.wait_s < p->wait_s)
        memset(&R->hl_taken, 0, sizeof R->hl_taken);
    *bytes = (now.d2h_bytes - p->d2h_bytes) + (now.h2d_bytes - p->h2d_bytes) +
             (now.sum_bytes - p->sum_bytes);
    *wait_s = now.wait_s - p->wait_s;
    R->hl_taken = now;
    return SDNN_OK;
}

const sdnn_engine_ops sdnn_engine_gpu = {
    .name = "gpu",
    .available = eg_available,
    .create = eg_create,
    .destroy = eg_destroy,
    .mem = eg_mem,
    .buf_alloc = eg_buf_alloc,
    .buf_free = eg_buf_free,
    .set_callbacks = eg_set_callbacks,
    .bind_thread = eg_bind_thread,
    .train = eg_train,
    .snapshot = eg_snapshot,
    .pack = eg_pack,
    .check = eg_check,
    .ef_step = eg_ef_step,
    .apply = eg_apply,
    .ready = eg_ready,
    .ready_wait = eg_ready_wait,
    .sync = eg_sync,
    .pull = eg_pull,
    .push = eg_push,
    .resize = eg_resize,
    .comm_open = eg_comm_open,
    .buf_read = eg_buf_read,
    .buf_write = eg_buf_write,
    .set_timeline = eg_set_timeline,
    .nonfinite_at = eg_nonfinite_at,
    .available_on = eg_available_on,
    .describe_device = eg_describe_device,
    .host_loss_take = eg_host_loss_take,
    .feed = eg_feed,
};

/* ---- what a replica holds and moves (memory, host loss) --------------------------- */

sdnn_status sdnn_gpu_engine_replica_stats(sdnn_engine *e, int r, sdnn_gpu_engine_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!e || !e->ops || e->ops->destroy != eg_destroy || !e->impl)
        return SDNN_ERROR(SDNN_ERR_INVALID, "not an instance of the gpu engine");
    gpu_engine *E = e->impl;
    if (r < 0 || r >= E->n) return SDNN_ERROR(SDNN_ERR_INVALID, "engine gpu: no replica %d", r);
    eg_rep *R = &E->rep[r];
    pthread_mutex_lock(&E->mu);
    for (eg_alloc *a = E->allocs; a; a = a->next) {
        size_t b = (a->n ? a->n : 1) * sizeof(float);
        if (a->r == r) s->bucket_bytes += b;
        if (a->mirror[r]) s->bucket_bytes += b;
    }
    pthread_mutex_unlock(&E->mu);
    s->codec_bytes = R->enc_n + R->cscr_n;
    SDNN_CHECK(sdnn_dctx_bind(R->vd));
    return sdnn_gpu_net_host_loss_stats(R->g, &s->host_loss);
}
