/*
 * test_engine: the engine registry, the cpu engine's per-layer operations,
 * the bucket layout, and a check that the trainer and the scheduler hold no
 * engine-specific branch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm.h"
#include "config.h"
#include "engine.h"
#include "exchange.h"
#include "layout.h"
#include "replicas.h"
#include "trainer.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *CFG =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static void test_registry(void **state)
{
    (void)state;
    assert_ptr_equal(sdnn_engine_find("cpu"), &sdnn_engine_cpu);
    assert_ptr_equal(sdnn_engine_find("gpu"), &sdnn_engine_gpu);
    assert_null(sdnn_engine_find("tpu"));
    assert_null(sdnn_engine_find(NULL));
    assert_string_equal(sdnn_engine_names(), "cpu, gpu");
    int n = 0;
    for (const sdnn_engine_ops *const *e = sdnn_engine_list(); *e; ++e) ++n;
    assert_int_equal(n, 2);
    assert_true(sdnn_engine_cpu.available(4, NULL, 0));
}

static void test_resolve(void **state)
{
    (void)state;
    const sdnn_engine_ops *e = NULL;
    char why[256];
    assert_int_equal(sdnn_engine_resolve("cpu", 2, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, &sdnn_engine_cpu);
    assert_int_equal(sdnn_engine_resolve("bogus", 2, &e, why, sizeof why), SDNN_ERR_INVALID);
    assert_null(e);
    assert_non_null(strstr(sdnn_last_error(), "bogus"));
    assert_non_null(strstr(sdnn_last_error(), "cpu, gpu"));
    /* auto: gpu exactly when the gpu engine says it can run 2 replicas. */
    char reason[256] = "";
    int gpu_ok = sdnn_engine_gpu.available(2, reason, sizeof reason);
    assert_int_equal(sdnn_engine_resolve("auto", 2, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, gpu_ok ? &sdnn_engine_gpu : &sdnn_engine_cpu);
    assert_non_null(strstr(why, "engine=auto"));
    if (!gpu_ok) {
        assert_true(reason[0] != '\0');
        assert_int_equal(sdnn_engine_resolve("gpu", 2, &e, why, sizeof why), SDNN_ERR_UNSUPPORTED);
        assert_non_null(strstr(sdnn_last_error(), reason));
    }
}

static void fill(network *net, uint64_t seed)
{
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        for (int j = 0; j < np; ++j)
            for (size_t k = 0; k < p[j].n; ++k) p[j].upd[k] = tu_uniform(&seed, -1.f, 1.f);
    }
}

/* snapshot, pack and apply against the arithmetic written out here. */
static void test_cpu_layer_ops(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    assert_non_null(net);
    network *nets[1] = {net};
    sdnn_engine *e = NULL;
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, &o, &e), SDNN_OK);
    assert_int_equal(e->ops->mem(e), SDNN_ENGINE_MEM_HOST);
    fill(net, 7);
    const int L = 0;   /* the convolution: weights, biases, scales */
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[L], p);
    assert_int_equal(np, 3);
    size_t n = p[0].n + p[1].n + p[2].n;
    float *snap, *pack, *mean;
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &snap), SDNN_OK);
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &pack), SDNN_OK);
    assert_int_equal(e->ops->buf_alloc(e, 0, n, &mean), SDNN_OK);
    e->ops->snapshot(e, 0, L, snap);
    assert_memory_equal(snap, p[0].upd, p[0].n * sizeof(float));
    assert_memory_equal(snap + p[0].n, p[1].upd, p[1].n * sizeof(float));
    assert_memory_equal(snap + p[0].n + p[1].n, p[2].upd, p[2].n * sizeof(float));
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k) p[j].upd[k] += 0.25f * (float)(k % 5);
    sdnn_engine_bad bad = {0};
    assert_int_equal(e->ops->pack(e, 0, L, snap, pack, &bad), 0);
    size_t off = 0;
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k, ++off)
            assert_true(pack[off] == p[j].upd[k] - snap[off]);
    for (size_t k = 0; k < n; ++k) mean[k] = (float)k * 0.5f;
    e->ops->apply(e, 0, L, snap, mean);
    off = 0;
    for (int j = 0; j < np; ++j)
        for (size_t k = 0; k < p[j].n; ++k, ++off)
            assert_true(p[j].upd[k] == snap[off] + mean[off]);
    assert_int_equal(e->ops->check(e, 0, L, &bad), 0);
    /* A NaN in the biases is named by tensor and element. */
    p[1].upd[3] = NAN;
    assert_int_equal(e->ops->pack(e, 0, L, snap, pack, &bad), -1);
    assert_string_equal(bad.what, "biases");
    assert_int_equal(bad.at, 3);
    memset(&bad, 0, sizeof bad);
    assert_int_equal(e->ops->check(e, 0, L, &bad), -1);
    assert_string_equal(bad.what, "biases");
    assert_int_equal(bad.at, 3);
    e->ops->buf_free(e, 0, snap);
    e->ops->buf_free(e, 0, pack);
    e->ops->buf_free(e, 0, mean);
    sdnn_engine_destroy(e);
    sdnn_network_free(net);
}

/* The cpu engine's train() is train_network: the same weights bit for bit. */
static void test_cpu_train_is_darknet(void **state)
{
    (void)state;
    network *a = tu_parse(CFG), *b = tu_parse(CFG);
    assert_non_null(a);
    assert_non_null(b);
    tu_copy_params(a, b);
    network *nets[1] = {a};
    sdnn_engine *e = NULL;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_cpu, nets, 1, NULL, &e), SDNN_OK);
    for (int s = 0; s < 3; ++s) {
        uint64_t seed = 11 + (uint64_t)s;
        data d = tu_batch(&seed, 2, 8 * 8 * 3, 5);
        float la = 0;
        assert_int_equal(e->ops->train(e, 0, d, &la), SDNN_OK);
        float lb = train_network(b, d);
        assert_true(la == lb);
        free_data(d);
    }
    assert_true(tu_bitwise_equal(a, b));
    sdnn_engine_destroy(e);
    sdnn_network_free(a);
    sdnn_network_free(b);
}

static void test_gpu_stub_refuses(void **state)
{
    (void)state;
    if (sdnn_engine_gpu.available(1, NULL, 0)) skip();
    network *net = tu_parse(CFG);
    network *nets[1] = {net};
    sdnn_engine *e = NULL;
    assert_int_equal(sdnn_engine_create(&sdnn_engine_gpu, nets, 1, NULL, &e), SDNN_ERR_UNSUPPORTED);
    assert_null(e);
    sdnn_network_free(net);
}

/* -gpus ids: the cpu engine only counts them (any list runs); in a build
 * without a GPU engine, gpu refuses every list naming the build and how to
 * get one; describe_device needs no instance. */
static void test_resolve_on_devices(void **state)
{
    (void)state;
    const sdnn_engine_ops *e = NULL;
    char why[256], line[320];
    const int ids[] = {5, 5, 1023};
    assert_int_equal(sdnn_engine_resolve_on("cpu", ids, 3, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, &sdnn_engine_cpu);
    assert_string_equal(why, "engine=cpu");
    assert_true(sdnn_engine_cpu.available_on(ids, 3, NULL, 0));
    sdnn_engine_describe_device(&sdnn_engine_cpu, 5, line, sizeof line);
    assert_non_null(strstr(line, "CPU replica"));
    assert_non_null(strstr(line, "only counts replicas"));
    assert_non_null(strstr(line, "gemm: "));
    /* NULL ids: the count alone, as sdnn_engine_resolve. */
    assert_int_equal(sdnn_engine_resolve_on("cpu", NULL, 2, &e, NULL, 0), SDNN_OK);
    assert_ptr_equal(e, &sdnn_engine_cpu);
    assert_int_equal(sdnn_engine_resolve_on("tpu", ids, 3, &e, NULL, 0), SDNN_ERR_INVALID);
    assert_null(e);
    assert_non_null(strstr(sdnn_last_error(), "unknown engine 'tpu' (allowed: cpu, gpu, auto)"));
    assert_int_equal(sdnn_engine_resolve_on("cpu", ids, 0, &e, NULL, 0), SDNN_ERR_INVALID);
    /* An engine without describe_device: its id. */
    sdnn_engine_ops bare = {.name = "bare"};
    sdnn_engine_describe_device(&bare, 3, line, sizeof line);
    assert_string_equal(line, "device 3");
    if (sdnn_engine_gpu.available(1, NULL, 0)) skip();   /* a GPU build: tests/gpu */
    assert_false(sdnn_engine_gpu.available_on(ids, 1, why, sizeof why));
    assert_non_null(strstr(why, "this is a CPU build"));
    assert_int_equal(sdnn_engine_resolve_on("gpu", ids, 2, &e, NULL, 0), SDNN_ERR_UNSUPPORTED);
    assert_null(e);
    const char *msg = sdnn_last_error();
    assert_non_null(strstr(msg, "engine gpu cannot run 2 replicas here: this is a CPU build"));
    assert_non_null(strstr(msg, "make GPU=1 (CUDA) or make GPU=sim (simulated devices)"));
    assert_int_equal(sdnn_engine_resolve_on("auto", ids, 2, &e, why, sizeof why), SDNN_OK);
    assert_ptr_equal(e, &sdnn_engine_cpu);
    assert_non_null(strstr(why, "engine=auto: cpu (gpu: this is a CPU build"));
    sdnn_engine_describe_device(&sdnn_engine_gpu, 0, line, sizeof line);
    assert_non_null(strstr(line, "device 0: not usable (this is a CPU build"));
}

/* The trainer hands the ids to the engine and keeps them for the banner;
 * an id twice without virtual=1 is refused before anything is made. */
static void test_trainer_devices(void **state)
{
    (void)state;
    network *nets[2] = {tu_parse(CFG), tu_parse(CFG)};
    sdnn_config cfg = SDNN_CONFIG_INIT;
    cfg.present = 1;
    cfg.bucket_mb = 1.0;
    const int ids[] = {3, 3};
    sdnn_trainer_opts o = SDNN_TRAINER_OPTS_INIT;
    o.devices = ids;
    sdnn_trainer *t = NULL;
    assert_int_equal(sdnn_trainer_create_opts(nets, 2, &cfg, &o, 0, &t), SDNN_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(sdnn_last_error(), "id 3 is listed twice"));
    cfg.virtual_devices = 1;
    assert_int_equal(sdnn_trainer_create_opts(nets, 2, &cfg, &o, 0, &t), SDNN_OK);
    assert_ptr_equal(sdnn_trainer_engine(t), &sdnn_engine_cpu);
    assert_int_equal(sdnn_trainer_device(t, 0), 3);
    assert_int_equal(sdnn_trainer_device(t, 1), 3);
    sdnn_trainer_destroy(t);
    /* Without ids: 0..n-1. */
    assert_int_equal(sdnn_trainer_create(nets, 2, &cfg, 0, &t), SDNN_OK);
    assert_int_equal(sdnn_trainer_device(t, 0), 0);
    assert_int_equal(sdnn_trainer_device(t, 1), 1);
    sdnn_trainer_destroy(t);
    sdnn_network_free(nets[0]);
    sdnn_network_free(nets[1]);
}

static void test_layout_fixed(void **state)
{
    (void)state;
    /* 1 MiB = 262144 floats.  Layers 5..0; 0 and 3 exchange nothing. */
    const size_t counts[6] = {0, 100000, 200000, 0, 300000, 50000};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_fixed(counts, 6, 1.0, &l), SDNN_OK);
    /* 5 (50000) + 4 (300000) reaches the target, then 2 + 1. */
    assert_int_equal(l.nbuckets, 2);
    assert_int_equal(l.bucket[0].hi, 5);
    assert_int_equal(l.bucket[0].lo, 4);
    assert_int_equal(l.bucket[0].count, 350000);
    assert_int_equal(l.bucket[1].hi, 2);
    assert_int_equal(l.bucket[1].lo, 1);
    assert_int_equal(l.layer[5].offset, 0);
    assert_int_equal(l.layer[4].offset, 50000);
    assert_int_equal(l.layer[1].offset, 200000);
    assert_int_equal(l.layer[3].bucket, -1);
    assert_int_equal(l.layer[0].bucket, -1);
    assert_int_equal(l.total, 650000);
    sdnn_layout_free(&l);
    assert_int_equal(sdnn_layout_fixed(counts, 6, 0.0, &l), SDNN_ERR_INVALID);
}

static void test_layout_plan(void **state)
{
    (void)state;
    const size_t counts[4] = {10, 0, 20, 30};
    sdnn_layout_range ok[2] = {{2, 3}, {0, 1}};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_plan(counts, 4, ok, 2, &l), SDNN_OK);
    assert_int_equal(l.nbuckets, 2);
    assert_int_equal(l.bucket[0].count, 50);
    assert_int_equal(l.layer[2].offset, 30);
    assert_int_equal(l.bucket[1].nlayers, 1);
    sdnn_layout_free(&l);
    sdnn_layout_range gap[1] = {{2, 3}};
    assert_int_equal(sdnn_layout_plan(counts, 4, gap, 1, &l), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "leaves layer 0 out"));
    sdnn_layout_range empty[2] = {{0, 3}, {1, 1}};
    assert_int_equal(sdnn_layout_plan(counts, 4, empty, 2, &l), SDNN_ERR_INVALID);
}

/* The exchange's buckets are the layout's. */
static void test_exchange_uses_layout(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    network *nets[1] = {net};
    sdnn_layout l;
    assert_int_equal(sdnn_layout_build(net, 0.001, NULL, 0, &l), SDNN_OK);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    sdnn_exchange_opts xo = {0};
    xo.bucket_mb = 0.001;
    xo.overlap = 1;
    sdnn_exchange *ex = NULL;
    assert_int_equal(sdnn_exchange_create(nets, 1, comm, &xo, &ex), SDNN_OK);
    assert_int_equal(sdnn_exchange_nbuckets(ex), l.nbuckets);
    assert_true(l.nbuckets >= 2);
    for (int b = 0; b < l.nbuckets; ++b) {
        int lo, hi;
        assert_int_equal(sdnn_exchange_bucket(ex, b, &lo, &hi), l.bucket[b].count);
        assert_int_equal(lo, l.bucket[b].lo);
        assert_int_equal(hi, l.bucket[b].hi);
    }
    for (int i = 0; i < net->n; ++i)
        assert_int_equal(sdnn_exchange_layer_bucket(ex, i), l.layer[i].bucket);
    sdnn_exchange_destroy(ex);
    sdnn_comm_close(comm);
    sdnn_layout_free(&l);
    sdnn_network_free(net);
}

/* ---- a guarded engine: the exchange touches bucket buffers only through
 * the table ------------------------------------------------------------- */

/* The cpu engine's ops behind a table of its own whose mem() is DEVICE.
 * Its bucket buffers are pages of their own with no access (PROT_NONE)
 * except while one of its ops (or its comm) works on them, so a direct
 * read or write by the exchange faults; a shadow copy kept by the ops
 * catches a write made while another thread's op had the pages open.
 * Every op is logged in order, for the checks of the step's protocol. */

enum { EV_SNAP, EV_PACK, EV_CHECK, EV_EF, EV_APPLY, EV_READY, EV_WAIT, EV_COLL, EV_TRAIN,
       EV_SYNC };

typedef struct gev {
    int kind, r, a;   /* a: layer (snap, pack, check, apply) or bucket */
} gev;

typedef struct gbuf {
    float *base;
    size_t n;         /* floats */
    size_t mapped;    /* bytes */
    float *shadow;
    int refs;
} gbuf;

#define GMAX_BUFS 512
#define GMAX_EV 8192

typedef struct guard {
    sdnn_engine inner;          /* the cpu engine the ops forward to */
    pthread_mutex_t mu;
    gbuf bufs[GMAX_BUFS];
    int nbufs;
    int changed;                /* buffers found changed outside the ops */
    int unknown;                /* pointers outside every buffer */
    gev ev[GMAX_EV];
    int nev;
    int comm_bucket;            /* the bucket of the comm thread's last ready_wait */
    sdnn_comm comm;             /* over the guarded buffers */
    sdnn_comm *host;
    /* Deferred checks, as a device engine does them: pack and check
     * return 0 and remember the first non-finite value; sync reports it. */
    int deferred;
    int has_bad[8];
    int bad_layer[8];
    sdnn_engine_bad bad[8];
} guard;

static guard *G(sdnn_engine *e) { return e->impl; }

static void g_log(guard *g, int kind, int r, int a)
{
    pthread_mutex_lock(&g->mu);
    if (g->nev < GMAX_EV) g->ev[g->nev++] = (gev){kind, r, a};
    pthread_mutex_unlock(&g->mu);
}

/* The buffer holding p (mutex held), or NULL. */
static gbuf *g_find(guard *g, const void *p)
{
    const float *f = p;
    for (int i = 0; i < g->nbufs; ++i)
        if (g->bufs[i].base && f >= g->bufs[i].base && f < g->bufs[i].base + g->bufs[i].n)
            return &g->bufs[i];
    return NULL;
}

/* An op starts on the buffer holding p: open its pages; the first opener
 * checks that nothing changed it since the last op. */
static void g_open(guard *g, const void *p)
{
    if (!p) return;
    pthread_mutex_lock(&g->mu);
    gbuf *b = g_find(g, p);
    if (!b) {
        g->unknown++;
    } else if (b->refs++ == 0) {
        mprotect(b->base, b->mapped, PROT_READ | PROT_WRITE);
        if (memcmp(b->base, b->shadow, b->n * sizeof(float)) != 0) g->changed++;
    }
    pthread_mutex_unlock(&g->mu);
}

/* The op is done with p's buffer: its content is the ops' own again. */
static void g_close(guard *g, const void *p)
{
    if (!p) return;
    pthread_mutex_lock(&g->mu);
    gbuf *b = g_find(g, p);
    if (b) {
        memcpy(b->shadow, b->base, b->n * sizeof(float));
        if (--b->refs == 0) mprotect(b->base, b->mapped, PROT_NONE);
    }
    pthread_mutex_unlock(&g->mu);
}

static int g_available(int ndev, char *why, size_t len)
{
    (void)ndev; (void)why; (void)len;
    return 1;
}

static sdnn_status g_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    guard *g = calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the guarded engine");
    pthread_mutex_init(&g->mu, NULL);
    g->inner.ops = &sdnn_engine_cpu;
    g->inner.nets = e->nets;
    g->inner.n = e->n;
    g->comm_bucket = -1;
    sdnn_status st = sdnn_engine_cpu.create(&g->inner, o);
    if (st != SDNN_OK) {
        free(g);
        return st;
    }
    e->impl = g;
    return SDNN_OK;
}

static void g_destroy(sdnn_engine *e)
{
    guard *g = G(e);
    sdnn_engine_cpu.destroy(&g->inner);
    for (int i = 0; i < g->nbufs; ++i)
        if (g->bufs[i].base) {
            munmap(g->bufs[i].base, g->bufs[i].mapped);
            free(g->bufs[i].shadow);
        }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static sdnn_engine_mem g_mem(const sdnn_engine *e)
{
    (void)e;
    return SDNN_ENGINE_MEM_DEVICE;
}

static sdnn_status g_buf_alloc(sdnn_engine *e, int r, size_t floats, float **out)
{
    (void)r;
    guard *g = G(e);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = floats ? floats : 1;
    size_t mapped = (n * sizeof(float) + page - 1) / page * page;
    *out = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->nbufs == GMAX_BUFS) {
        pthread_mutex_unlock(&g->mu);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "guarded engine: more than %d buffers", GMAX_BUFS);
    }
    void *m = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *shadow = calloc(n, sizeof(float));
    if (m == MAP_FAILED || !shadow) {
        if (m != MAP_FAILED) munmap(m, mapped);
        free(shadow);
        pthread_mutex_unlock(&g->mu);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "guarded engine: no memory for %zu floats", n);
    }
    g->bufs[g->nbufs++] = (gbuf){.base = m, .n = n, .mapped = mapped, .shadow = shadow};
    pthread_mutex_unlock(&g->mu);
    *out = m;   /* zero-filled, as the table says */
    return SDNN_OK;
}

static void g_buf_free(sdnn_engine *e, int r, float *p)
{
    (void)r;
    guard *g = G(e);
    pthread_mutex_lock(&g->mu);
    gbuf *b = g_find(g, p);
    if (b && b->base == p) {
        munmap(b->base, b->mapped);
        free(b->shadow);
        *b = (gbuf){0};
    } else {
        g->unknown++;
    }
    pthread_mutex_unlock(&g->mu);
}

static void g_set_callbacks(sdnn_engine *e, const sdnn_engine_callbacks *cb)
{
    sdnn_engine_cpu.set_callbacks(&G(e)->inner, cb);
}

static void g_bind_thread(sdnn_engine *e, int r) { sdnn_engine_cpu.bind_thread(&G(e)->inner, r); }

/* A failed check of replica r's layer: at once, or remembered (deferred). */
static int g_checked(guard *g, int r, int layer, int rc, const sdnn_engine_bad *bad)
{
    if (rc == 0 || !g->deferred) return rc;
    pthread_mutex_lock(&g->mu);
    if (!g->has_bad[r]) {
        g->has_bad[r] = 1;
        g->bad_layer[r] = layer;
        g->bad[r] = *bad;
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static sdnn_status g_train(sdnn_engine *e, int r, data slice, float *loss)
{
    G(e)->has_bad[r] = 0;
    sdnn_status st = sdnn_engine_cpu.train(&G(e)->inner, r, slice, loss);
    g_log(G(e), EV_TRAIN, r, 0);
    return st;
}

static void g_snapshot(sdnn_engine *e, int r, int layer, float *dst)
{
    guard *g = G(e);
    g_log(g, EV_SNAP, r, layer);
    g_open(g, dst);
    sdnn_engine_cpu.snapshot(&g->inner, r, layer, dst);
    g_close(g, dst);
}

static int g_pack(sdnn_engine *e, int r, int layer, const float *snap, float *dst,
                  sdnn_engine_bad *bad)
{
    guard *g = G(e);
    g_log(g, EV_PACK, r, layer);
    g_open(g, snap);
    g_open(g, dst);
    sdnn_engine_bad mine = {0};
    int rc = sdnn_engine_cpu.pack(&g->inner, r, layer, snap, dst, &mine);
    g_close(g, dst);
    g_close(g, snap);
    if (rc != 0 && bad) *bad = mine;
    return g_checked(g, r, layer, rc, &mine);
}

static int g_check(sdnn_engine *e, int r, int layer, sdnn_engine_bad *bad)
{
    g_log(G(e), EV_CHECK, r, layer);
    sdnn_engine_bad mine = {0};
    int rc = sdnn_engine_cpu.check(&G(e)->inner, r, layer, &mine);
    if (rc != 0 && bad) *bad = mine;
    return g_checked(G(e), r, layer, rc, &mine);
}

static void g_ef_step(sdnn_engine *e, int r, const sdnn_codec_ops *codec,
                      const sdnn_codec_params *p, float *grad, float *resid, float *vel,
                      float momentum, size_t n, void *scratch, uint64_t stream)
{
    guard *g = G(e);
    g_log(g, EV_EF, r, 0);
    void *bufs[4] = {grad, resid, vel, scratch};
    for (int i = 0; i < 4; ++i) g_open(g, bufs[i]);
    sdnn_engine_cpu.ef_step(&g->inner, r, codec, p, grad, resid, vel, momentum, n, scratch,
                            stream);
    for (int i = 0; i < 4; ++i) g_close(g, bufs[i]);
}

static void g_apply(sdnn_engine *e, int r, int layer, const float *snap, const float *mean)
{
    guard *g = G(e);
    g_log(g, EV_APPLY, r, layer);
    g_open(g, snap);
    g_open(g, mean);
    sdnn_engine_cpu.apply(&g->inner, r, layer, snap, mean);
    g_close(g, mean);
    g_close(g, snap);
}

static void g_ready(sdnn_engine *e, int r, int bucket) { g_log(G(e), EV_READY, r, bucket); }

static sdnn_status g_ready_wait(sdnn_engine *e, int r, int bucket)
{
    guard *g = G(e);
    g_log(g, EV_WAIT, r, bucket);
    g->comm_bucket = bucket;   /* the comm thread's own: its collective comes next */
    return SDNN_OK;
}

static sdnn_status g_sync(sdnn_engine *e, int r)
{
    guard *g = G(e);
    g_log(g, EV_SYNC, r, 0);
    if (g->has_bad[r])
        return SDNN_ERROR(SDNN_ERR_NONFINITE, "replica %d: layer %d %s[%ld] is not finite", r,
                          g->bad_layer[r], g->bad[r].what, g->bad[r].at);
    return SDNN_OK;
}

static int g_nonfinite_at(sdnn_engine *e, int r, int *layer, sdnn_engine_bad *bad)
{
    guard *g = G(e);
    if (!g->has_bad[r]) return 0;
    *layer = g->bad_layer[r];
    *bad = g->bad[r];
    return 1;
}

static sdnn_status g_move(sdnn_engine *e, unsigned what)
{
    (void)e; (void)what;
    return SDNN_OK;
}

static sdnn_status g_resize(sdnn_engine *e, int w, int h)
{
    return sdnn_engine_cpu.resize(&G(e)->inner, w, h);
}

static sdnn_status g_buf_read(sdnn_engine *e, int r, const float *src, float *host, size_t n)
{
    guard *g = G(e);
    g_open(g, src);
    sdnn_status st = sdnn_engine_cpu.buf_read(&g->inner, r, src, host, n);
    g_close(g, src);
    return st;
}

static sdnn_status g_buf_write(sdnn_engine *e, int r, float *dst, const float *host, size_t n)
{
    guard *g = G(e);
    g_open(g, dst);
    sdnn_status st = sdnn_engine_cpu.buf_write(&g->inner, r, dst, host, n);
    g_close(g, dst);
    return st;
}

/* The comm over the guarded buffers: the host comm with the pages open. */
static int gc_available(void) { return 1; }

static sdnn_status gc_mean(sdnn_comm *c, const float *const *in, int nin, float *out, size_t n)
{
    guard *g = c->impl;
    g_log(g, EV_COLL, -1, g->comm_bucket);
    for (int r = 0; r < nin; ++r) g_open(g, in[r]);
    g_open(g, out);
    sdnn_status st = sdnn_comm_allreduce_mean(g->host, in, nin, out, n, NULL);
    g_close(g, out);
    for (int r = 0; r < nin; ++r) g_close(g, in[r]);
    return st;
}

static sdnn_status gc_coded(sdnn_comm *c, const sdnn_codec_ops *codec, const sdnn_codec_params *p,
                            uint64_t stream, const float *const *in, int nin, float *const *out,
                            size_t n, size_t *wire)
{
    guard *g = c->impl;
    g_log(g, EV_COLL, -1, g->comm_bucket);
    for (int r = 0; r < nin; ++r) {
        g_open(g, in[r]);
        g_open(g, out[r]);
    }
    sdnn_status st = sdnn_comm_allreduce_mean_coded(g->host, codec, p, stream, in, nin, out, n,
                                                    wire);
    /* The host comm said what each replica sends; a comm table reports its
     * nin buffers' sum (comm.h), which the caller's wrapper divides again. */
    if (st == SDNN_OK && wire) *wire *= (size_t)nin;
    for (int r = 0; r < nin; ++r) {
        g_close(g, out[r]);
        g_close(g, in[r]);
    }
    return st;
}

static const sdnn_comm_ops guarded_comm_ops = {
    .name = "guarded",
    .available = gc_available,
    .allreduce_mean = gc_mean,
    .allreduce_mean_coded = gc_coded,
};

static sdnn_status g_comm_open(sdnn_engine *e, sdnn_comm *host, sdnn_comm **out)
{
    guard *g = G(e);
    g->host = host;
    g->comm = (sdnn_comm){.ops = &guarded_comm_ops, .rank = host->rank, .size = host->size,
                          .timeout_s = host->timeout_s, .impl = g};
    *out = &g->comm;
    return SDNN_OK;
}

static sdnn_status g_create_deferred(sdnn_engine *e, const sdnn_engine_opts *o)
{
    SDNN_CHECK(g_create(e, o));
    G(e)->deferred = 1;
    return SDNN_OK;
}

static const sdnn_engine_ops guarded_engine = {
    .name = "guarded",
    .available = g_available,
    .create = g_create,
    .destroy = g_destroy,
    .mem = g_mem,
    .buf_alloc = g_buf_alloc,
    .buf_free = g_buf_free,
    .set_callbacks = g_set_callbacks,
    .bind_thread = g_bind_thread,
    .train = g_train,
    .snapshot = g_snapshot,
    .pack = g_pack,
    .check = g_check,
    .ef_step = g_ef_step,
    .apply = g_apply,
    .ready = g_ready,
    .ready_wait = g_ready_wait,
    .sync = g_sync,
    .pull = g_move,
    .push = g_move,
    .resize = g_resize,
    .comm_open = g_comm_open,
    .buf_read = g_buf_read,
    .buf_write = g_buf_write,
};

/* The same table with the deferred check of a device engine. */
static const sdnn_engine_ops *deferred_engine(void)
{
    static sdnn_engine_ops d;
    d = guarded_engine;
    d.name = "deferred";
    d.create = g_create_deferred;
    d.nonfinite_at = g_nonfinite_at;
    return &d;
}

/* Index of the first event of `kind` on replica r (r < 0: any) about `a`
 * at or after `from`, or -1. */
static int find_ev(const guard *g, int from, int kind, int r, int a)
{
    for (int i = from; i < g->nev; ++i)
        if (g->ev[i].kind == kind && (r < 0 || g->ev[i].r == r) && g->ev[i].a == a) return i;
    return -1;
}

/* One step's log against the protocol: every exchanged layer snapshotted
 * before its pack and applied after its bucket's collective, once per
 * replica; ready(r, b) before ready_wait(r, b), the collective after every
 * ready_wait of its bucket; sync after each train. */
static void check_step_log(const guard *g, const sdnn_exchange *ex, int nrep)
{
    const int nb = sdnn_exchange_nbuckets(ex);
    int colls = 0;
    for (int i = 0; i < g->nev; ++i) {
        const gev *v = &g->ev[i];
        switch (v->kind) {
        case EV_PACK: {
            int s = find_ev(g, 0, EV_SNAP, v->r, v->a);
            if (s < 0 || s > i) fail_msg("pack of layer %d on replica %d before its snapshot", v->a, v->r);
            break;
        }
        case EV_WAIT: {
            int s = find_ev(g, 0, EV_READY, v->r, v->a);
            if (s < 0 || s > i) fail_msg("ready_wait(%d, %d) before ready(%d, %d)", v->r, v->a, v->r, v->a);
            break;
        }
        case EV_COLL:
            colls++;
            for (int r = 0; r < nrep; ++r) {
                int w = find_ev(g, 0, EV_WAIT, r, v->a);
                if (w < 0 || w > i) fail_msg("bucket %d's collective before ready_wait(%d)", v->a, r);
            }
            break;
        case EV_APPLY: {
            int b = sdnn_exchange_layer_bucket(ex, v->a);
            int c = find_ev(g, 0, EV_COLL, -1, b);
            if (b < 0 || c < 0 || c > i)
                fail_msg("apply of layer %d on replica %d before bucket %d's collective", v->a, v->r, b);
            break;
        }
        case EV_TRAIN: {
            int s = find_ev(g, i, EV_SYNC, v->r, 0);
            if (s < 0) fail_msg("no sync after replica %d's train", v->r);
            break;
        }
        default:
            break;
        }
    }
    assert_int_equal(colls, nb);
    /* Exactly once per replica and exchanged layer, or bucket. */
    for (int r = 0; r < nrep; ++r) {
        for (int b = 0; b < nb; ++b) {
            int k = find_ev(g, 0, EV_READY, r, b);
            assert_true(k >= 0);
            assert_int_equal(find_ev(g, k + 1, EV_READY, r, b), -1);
        }
        for (int i = 0; i < g->inner.nets[0]->n; ++i) {
            if (sdnn_exchange_layer_bucket(ex, i) < 0) continue;
            static const int once[] = {EV_SNAP, EV_PACK, EV_APPLY};
            for (size_t j = 0; j < sizeof once / sizeof *once; ++j) {
                int k = find_ev(g, 0, once[j], r, i);
                assert_true(k >= 0);
                assert_int_equal(find_ev(g, k + 1, once[j], r, i), -1);
            }
        }
        int t = find_ev(g, 0, EV_TRAIN, r, 0), s = find_ev(g, 0, EV_SYNC, r, 0);
        assert_true(t >= 0 && s > t);
    }
}

static const char *GCFG =
    "[net]\nbatch=4\nsubdivisions=2\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=%s\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=16\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static sdnn_trainer *g_trainer(const sdnn_engine_ops *eng, int n, const char *keys,
                               const char *momentum)
{
    char text[2048];
    snprintf(text, sizeof text, GCFG, momentum);
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    srand(4321);   /* Darknet's initial weights come from rand(): the same start */
    for (int r = 0; r < n; ++r) assert_non_null(nets[r] = tu_parse(text));
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    char sec[512];
    snprintf(sec, sizeof sec, "[scalednn]\n%s", keys);
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", sec, &cfg, NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create_with(eng, nets, n, &cfg, 1, &t) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    return t;
}

static int files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* A fault while the guarded steps run is the exchange touching a guarded
 * buffer itself (in any thread): say so and fail. */
static void guard_fault(int sig)
{
    (void)sig;
    static const char msg[] = "test_engine: a bucket buffer of the guarded engine was accessed "
                              "outside the engine's ops (fault)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

/* Steps through the guarded engine equal the cpu engine's bit for bit, the
 * exchange never touches a bucket buffer except through the table, and
 * the calls come in the protocol's order. */
static void test_guarded_engine_step(void **state)
{
    (void)state;
    static const struct {
        const char *keys, *momentum;
    } runs[] = {
        {"bucket_mb=0.002\noverlap=1\n", "0.9"},
        {"bucket_mb=0.002\noverlap=0\ncompress=int8\nerror_feedback=1\ncompress_min_kb=0\n", "0.9"},
        {"bucket_mb=0.004\noverlap=1\ncompress=topk\ntopk_ratio=0.1\ntopk_momentum=0.5\ncompress_min_kb=0\n", "0"},
    };
    struct sigaction fault = {0}, before;
    fault.sa_handler = guard_fault;
    sigemptyset(&fault.sa_mask);
    assert_int_equal(sigaction(SIGSEGV, &fault, &before), 0);
    for (size_t k = 0; k < sizeof runs / sizeof *runs; ++k) {
        const int n = 2;
        sdnn_trainer *a = g_trainer(&sdnn_engine_cpu, n, runs[k].keys, runs[k].momentum);
        sdnn_trainer *b = g_trainer(&guarded_engine, n, runs[k].keys, runs[k].momentum);
        const sdnn_exchange *ex = sdnn_trainer_exchange(b);
        assert_non_null(ex);
        assert_true(sdnn_exchange_nbuckets(ex) >= 2);
        guard *g = G(sdnn_exchange_engine(ex));
        uint64_t seed = 99 + k;
        for (int s = 0; s < 4; ++s) {
            data d = tu_batch(&seed, 4 * n, 8 * 8 * 3, 5);
            sdnn_step_stats sa, sb;
            g->nev = 0;
            if (sdnn_trainer_step(a, d, &sa) != SDNN_OK) fail_msg("%s", sdnn_last_error());
            if (sdnn_trainer_step(b, d, &sb) != SDNN_OK) fail_msg("%s", sdnn_last_error());
            free_data(d);
            assert_true(sa.loss == sb.loss);
            assert_int_equal(sa.bytes, sb.bytes);
            for (int r = 0; r < n; ++r)
                assert_true(tu_params_equal(sdnn_trainer_net(a, r), sdnn_trainer_net(b, r)));
            check_step_log(g, ex, n);
            assert_int_equal(g->changed, 0);
            assert_int_equal(g->unknown, 0);
        }
        /* .ef through buf_read: the same file; restored through buf_write. */
        assert_int_equal(sdnn_trainer_has_ef(b), k > 0);
        if (sdnn_trainer_has_ef(b)) {
            char pa[] = "/tmp/sdnn-test-guard-a-XXXXXX", pb[] = "/tmp/sdnn-test-guard-b-XXXXXX";
            int fa = mkstemp(pa), fb = mkstemp(pb);
            assert_true(fa >= 0 && fb >= 0);
            close(fa);
            close(fb);
            assert_int_equal(sdnn_trainer_save(a, pa), SDNN_OK);
            assert_int_equal(sdnn_trainer_save(b, pb), SDNN_OK);
            char efa[64], efb[64];
            snprintf(efa, sizeof efa, "%s.ef", pa);
            snprintf(efb, sizeof efb, "%s.ef", pb);
            assert_true(files_equal(efa, efb));
            assert_int_equal(sdnn_trainer_load_ef(b, pa), SDNN_OK);
            assert_int_equal(g->changed, 0);
            assert_int_equal(g->unknown, 0);
            unlink(pa);
            unlink(pb);
            unlink(efa);
            unlink(efb);
        }
        sdnn_trainer_destroy(a);
        sdnn_trainer_destroy(b);
    }
    sigaction(SIGSEGV, &before, NULL);
}

/* A non-finite gradient found by a deferred check (reported by sync after
 * train) stops the step with the message the host check gives at once. */
static void test_deferred_nonfinite_message(void **state)
{
    (void)state;
    char msg[2][1024];
    const sdnn_engine_ops *engines[2] = {&sdnn_engine_cpu, deferred_engine()};
    for (int k = 0; k < 2; ++k) {
        const int n = 2;
        sdnn_trainer *t = g_trainer(engines[k], n, "bucket_mb=0.002\noverlap=1\n", "0.9");
        uint64_t seed = 5;
        data d = tu_batch(&seed, 4 * n, 8 * 8 * 3, 5);
        sdnn_step_stats st;
        if (sdnn_trainer_step(t, d, &st) != SDNN_OK) fail_msg("%s", sdnn_last_error());
        /* Replica 1's last layer: every gradient of the step is NaN there. */
        sdnn_trainer_net(t, 1)->layers[4].weights[0] = NAN;
        sdnn_clear_error();
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_NONFINITE);
        snprintf(msg[k], sizeof msg[k], "%s", sdnn_last_error());
        /* Failed for good, as after the host's check. */
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_ERR_ABORTED);
        free_data(d);
        sdnn_trainer_destroy(t);
    }
    printf("host:     %s\ndeferred: %s\n", msg[0], msg[1]);
    assert_non_null(strstr(msg[0], "layer 4 (connected) weights["));
    assert_non_null(strstr(msg[0], "replica 1"));
    assert_string_equal(msg[0], msg[1]);
}

/* The guard itself: a direct write to one of its buffers faults. */
static void test_guard_catches_direct_access(void **state)
{
    (void)state;
    network *net = tu_parse(CFG);
    assert_non_null(net);
    network *nets[1] = {net};
    sdnn_engine *e = NULL;
    assert_int_equal(sdnn_engine_create(&guarded_engine, nets, 1, NULL, &e), SDNN_OK);
    float *buf = NULL;
    assert_int_equal(e->ops->buf_alloc(e, 0, 16, &buf), SDNN_OK);
    float host[16];
    for (int i = 0; i < 16; ++i) host[i] = (float)i;
    assert_int_equal(e->ops->buf_write(e, 0, buf, host, 16), SDNN_OK);
    float back[16] = {0};
    assert_int_equal(e->ops->buf_read(e, 0, buf, back, 16), SDNN_OK);
    assert_memory_equal(back, host, sizeof host);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);   /* not the test runner's handler */
        volatile float *p = buf;
        p[3] = 42.f;   /* must fault */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    e->ops->buf_free(e, 0, buf);
    assert_int_equal(G(e)->unknown, 0);
    sdnn_engine_destroy(e);
    sdnn_network_free(net);
}

/* Nothing above the table knows which engine it drives: no file of
 * plugin/step/ (the trainer, the exchange, the scheduler, the layout,
 * stock mode, the .ef format, and any file added there) names a GPU, CUDA
 * or the cpu engine, or compiles conditionally.  Headers may have their
 * include guard (#ifndef) and nothing else of the kind. */
static void test_no_engine_branch(void **state)
{
    (void)state;
    static const char *const banned_c[] = {"gpu", "cuda", "#if", "sdnn_engine_cpu"};
    static const char *const banned_h[] = {"gpu", "cuda", "#if ", "#ifdef", "#elif",
                                           "sdnn_engine_cpu"};
    static const char *const must[] = {"trainer.c", "exchange.c", "layout.c", "scheduler.c",
                                       "stock.c", "efstate.c"};
    DIR *d = opendir("plugin/step");
    if (!d) fail_msg("cannot read plugin/step (run from the repository root)");
    int found[sizeof must / sizeof *must] = {0};
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 3 || de->d_name[len - 2] != '.') continue;
        char c = de->d_name[len - 1];
        if (c != 'c' && c != 'h') continue;
        for (size_t m = 0; m < sizeof must / sizeof *must; ++m)
            found[m] |= strcmp(de->d_name, must[m]) == 0;
        char path[512];
        snprintf(path, sizeof path, "plugin/step/%s", de->d_name);
        char *text = tu_slurp(path);
        if (!text) fail_msg("cannot read %s", path);
        const char *const *banned = c == 'c' ? banned_c : banned_h;
        size_t nb = c == 'c' ? sizeof banned_c / sizeof *banned_c
                             : sizeof banned_h / sizeof *banned_h;
        for (size_t b = 0; b < nb; ++b)
            if (strstr(text, banned[b])) fail_msg("%s contains '%s'", path, banned[b]);
        free(text);
        files++;
    }
    closedir(d);
    for (size_t m = 0; m < sizeof must / sizeof *must; ++m)
        if (!found[m]) fail_msg("plugin/step/%s is missing: the check would pass vacuously", must[m]);
    assert_true(files >= 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_cpu_layer_ops),
        cmocka_unit_test(test_cpu_train_is_darknet),
        cmocka_unit_test(test_gpu_stub_refuses),
        cmocka_unit_test(test_resolve_on_devices),
        cmocka_unit_test(test_trainer_devices),
        cmocka_unit_test(test_layout_fixed),
        cmocka_unit_test(test_layout_plan),
        cmocka_unit_test(test_exchange_uses_layout),
        cmocka_unit_test(test_guarded_engine_step),
        cmocka_unit_test(test_guard_catches_direct_access),
        cmocka_unit_test(test_deferred_nonfinite_message),
        cmocka_unit_test(test_no_engine_branch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
