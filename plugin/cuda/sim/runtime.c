/*
 * sim/runtime: the simulated device runtime behind dev.h (make GPU=sim):
 * devices, contexts, streams, events, memory and copies, on the CPU.
 *
 * It behaves like CUDA where that matters for finding host-logic bugs:
 *  - a stream is an in-order queue drained by its own worker thread; a
 *    launch or an async copy returns before it runs;
 *  - an event records a position in a stream; a wait makes another stream
 *    block at that position (the most recent record made before the wait
 *    call), with no host wait; syncs are the only host waits;
 *  - a failing operation's error is sticky on its stream and reported by
 *    the next sync, naming the dev.h call that queued it;
 *  - device memory of each simulated device is one memfd mapped twice: a
 *    PROT_NONE view whose addresses are the device pointers (a host access
 *    through one faults at once) and a read-write view that only
 *    sdnn_sim_dptr translates to.  Offsets are never reused, so a use after
 *    free is found in the allocation table; dfree punches a hole to give
 *    the pages back.  In the host view too, the page after an allocation
 *    (which ends within 255 bytes of it, starts 256-aligned) and freed
 *    memory are PROT_NONE, so a kernel running past its buffer faults;
 *  - pinned host memory is registered apart from pageable memory, copies
 *    from pageable memory stage (host to device) or wait (device to host)
 *    as cudaMemcpyAsync does, and the statistics count both kinds;
 *  - SDNN_SIM_JITTER=seed sleeps a random while before queued work, so a
 *    missing event wait shows as a wrong result instead of passing by luck.
 *
 * Nothing here says anything about kernels, launch geometry or the real
 * CUDA runtime: results on a simulated device show host logic, ordering
 * and arithmetic only.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SIM_MAX_DEVICES 8
#define SIM_DEFAULT_DEVICES 2
#define SIM_SPAN ((size_t)64 << 30)     /* address space per simulated device */
#define SIM_PAGE ((size_t)4096)

static const char *const stream_names[3] = {"compute", "copy", "comm"};

/* ---- devices and their memory ---------------------------------------------------- */

typedef struct sim_alloc {
    size_t off, bytes;          /* off: the pointer's offset */
    size_t base, span;          /* the pages it owns, guard page included */
    int live;
} sim_alloc;

typedef struct sim_device {
    int fd;
    unsigned char *dview;       /* PROT_NONE: the device addresses */
    unsigned char *hview;       /* read-write: what the simulated kernels use */
    size_t next;                /* next free offset (monotonic) */
    sim_alloc *a;
    size_t na, cap;
    sdnn_dev_stats st;
    sdnn_dctx *ctxs;            /* contexts on this device (dfree waits for them) */
    pthread_mutex_t lock;
} sim_device;

static sim_device g_dev[SIM_MAX_DEVICES];
static int g_ndev;
static sdnn_status g_init_status;
static char g_init_msg[256];
static unsigned long long g_jitter_seed;
static int g_jitter;
static FILE *g_log;             /* SDNN_SIM_LOG: one line per queued operation run */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint g_ctx_serial;

typedef struct pinned_block {
    unsigned char *p;
    size_t bytes;
} pinned_block;
static pinned_block *g_pinned;
static size_t g_npinned, g_cap_pinned;

static void sim_init(void)
{
    const char *env = getenv("SDNN_SIM_DEVICES");
    int n = SIM_DEFAULT_DEVICES;
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v > SIM_MAX_DEVICES) {
            g_init_status = SDNN_ERR_INVALID;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "SDNN_SIM_DEVICES=%s: expected a number of simulated devices, 0..%d", env,
                     SIM_MAX_DEVICES);
            return;
        }
        n = (int)v;
    }
    const char *j = getenv("SDNN_SIM_JITTER");
    if (j && *j) {
        char *end;
        g_jitter_seed = strtoull(j, &end, 10);
        if (*end) {
            g_init_status = SDNN_ERR_INVALID;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "SDNN_SIM_JITTER=%s: expected a seed (an unsigned integer)", j);
            return;
        }
        g_jitter = 1;
    }
    const char *log = getenv("SDNN_SIM_LOG");
    if (log && *log) {
        g_log = strcmp(log, "stderr") == 0 ? stderr : fopen(log, "w");
        if (!g_log) {
            g_init_status = SDNN_ERR_IO;
            snprintf(g_init_msg, sizeof g_init_msg, "SDNN_SIM_LOG=%s: cannot write it: %s", log,
                     strerror(errno));
            return;
        }
    }
    for (int d = 0; d < n; ++d) {
        sim_device *D = &g_dev[d];
        pthread_mutex_init(&D->lock, NULL);
        char name[32];
        snprintf(name, sizeof name, "sdnn-sim-device-%d", d);
        D->fd = memfd_create(name, MFD_CLOEXEC);
        void *dv = MAP_FAILED, *hv = MAP_FAILED;
        if (D->fd >= 0 && ftruncate(D->fd, (off_t)SIM_SPAN) == 0) {
            dv = mmap(NULL, SIM_SPAN, PROT_NONE, MAP_SHARED | MAP_NORESERVE, D->fd, 0);
            hv = mmap(NULL, SIM_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, D->fd, 0);
        }
        if (D->fd < 0 || dv == MAP_FAILED || hv == MAP_FAILED) {
            g_init_status = SDNN_ERR_SYSTEM;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "simulated device %d: cannot map its memory (memfd_create/mmap of %zu GiB: %s)",
                     d, SIM_SPAN >> 30, strerror(errno));
            return;
        }
        D->dview = dv;
        D->hview = hv;
        D->next = SIM_PAGE;     /* offset 0 is never handed out */
    }
    g_ndev = n;
}

static sdnn_status sim_ready(void)
{
    pthread_once(&g_once, sim_init);
    if (g_init_status != SDNN_OK) return SDNN_ERROR(g_init_status, "%s", g_init_msg);
    return SDNN_OK;
}

/* The simulated device whose address range holds p, or -1 (host memory). */
static int sim_dev_of(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    for (int d = 0; d < g_ndev; ++d) {
        uintptr_t b = (uintptr_t)g_dev[d].dview;
        if (u >= b && u - b < SIM_SPAN) return d;
    }
    return -1;
}

static int sim_is_pinned(const void *p, size_t bytes)
{
    const unsigned char *q = p;
    int found = 0;
    pthread_mutex_lock(&g_pinned_lock);
    for (size_t i = 0; i < g_npinned; ++i)
        if (q >= g_pinned[i].p && q + bytes <= g_pinned[i].p + g_pinned[i].bytes) {
            found = 1;
            break;
        }
    pthread_mutex_unlock(&g_pinned_lock);
    return found;
}

/* The allocation at or before offset o (caller holds D->lock), or NULL. */
static sim_alloc *sim_find(sim_device *D, size_t o)
{
    size_t lo = 0, hi = D->na;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (D->a[mid].off <= o) lo = mid + 1;
        else hi = mid;
    }
    return lo ? &D->a[lo - 1] : NULL;
}

/* Host address of [p, p + bytes) on a simulated device: want >= 0 demands
 * that device (no peer access), want < 0 accepts any. */
static sdnn_status sim_translate(int want, const void *p, size_t bytes, const char *call,
                                 void **host, int *devp)
{
    *host = NULL;
    if (!p) {
        if (bytes == 0) return SDNN_OK;
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s: NULL device pointer for %zu bytes", call, bytes);
    }
    int d = sim_dev_of(p);
    if (d < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: %p is %s host memory, not memory of a simulated device", call, p,
                          sim_is_pinned(p, 0) ? "pinned" : "pageable");
    if (want >= 0 && d != want)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: %p belongs to simulated device %d, used on simulated device %d "
                          "(no peer access)",
                          call, p, d, want);
    sim_device *D = &g_dev[d];
    size_t o = (size_t)((const unsigned char *)p - D->dview);
    pthread_mutex_lock(&D->lock);
    sim_alloc *a = sim_find(D, o);
    sdnn_status st = SDNN_OK;
    if (!a || o > a->off + a->bytes)
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: %p lies in no allocation of simulated device %d", call, p, d);
    else if (!a->live)
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: %p is freed memory of simulated device %d (use after free of an "
                        "allocation of %zu bytes)",
                        call, p, d, a->bytes);
    else if (bytes > a->off + a->bytes - o)
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: [%p, +%zu bytes) runs %zu bytes past its allocation of %zu bytes on "
                        "simulated device %d",
                        call, p, bytes, bytes - (a->off + a->bytes - o), a->bytes, d);
    pthread_mutex_unlock(&D->lock);
    if (st != SDNN_OK) return st;
    *host = D->hview + o;
    if (devp) *devp = d;
    return SDNN_OK;
}

/* ---- streams ---------------------------------------------------------------------- */

enum { OP_FN, OP_RECORD, OP_WAIT };

typedef struct sim_op {
    struct sim_op *next;
    int kind;
    sdnn_sim_fn fn;
    sdnn_sim_skip_fn skipped;
    void *arg;
    const char *call;
    sdnn_devent *ev;
    uint64_t gen;
} sim_op;

typedef struct sim_stream {
    sdnn_dctx *ctx;
    int which;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    sim_op *head, *tail;
    uint64_t submitted, completed;
    int stop;
    sdnn_status err;
    const char *errcall;
    char errmsg[1024];
    uint64_t rng;
} sim_stream;

struct sdnn_dctx {
    sdnn_dctx_options o;
    unsigned serial;
    sim_stream s[3];
    void *ws;
    size_t ws_bytes;
    void **ws_retired;      /* outgrown workspaces, freed with the context */
    size_t n_retired;
    sdnn_dctx *next_on_dev;
    unsigned long long *count_slot[3];  /* sdnn_sim_count_slot */
};

struct sdnn_devent {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;       /* records made (host side) */
    uint64_t done;      /* the latest record that has run */
    double t_done;      /* when it ran (seconds, monotonic) */
    int timing;
    int device;
    int refs;           /* the handle and every queued op that names it */
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void event_unref(sdnn_devent *e)
{
    pthread_mutex_lock(&e->mu);
    int left = --e->refs;
    pthread_mutex_unlock(&e->mu);
    if (left == 0) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
    }
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Mostly nothing, often a few tens of microseconds, now and then a few
 * milliseconds: enough to reorder streams that lack an event wait.
 * Returns the delay (microseconds). */
static long jitter(sim_stream *s)
{
    uint64_t r = xorshift(&s->rng);
    unsigned pick = (unsigned)(r % 100);
    long us = 0;
    if (pick >= 97) us = 500 + (long)((r >> 8) % 2500);
    else if (pick >= 60) us = (long)((r >> 8) % 150);
    if (us) {
        struct timespec t = {0, us * 1000L};
        nanosleep(&t, NULL);
    }
    return us;
}

static const char *op_call(const sim_op *op)
{
    if (op->kind == OP_RECORD) return "sdnn_devent_record";
    if (op->kind == OP_WAIT) return "sdnn_devent_wait";
    return op->call ? op->call : "operation";
}

static void *stream_main(void *arg)
{
    sim_stream *s = arg;
    /* An operation's failure is reported by the next sync, on another
     * thread: it must not overwrite the message of whatever call fails
     * there meanwhile. */
    char msg[1024];
    sdnn_error_capture(msg, sizeof msg);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (!s->head) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        sim_op *op = s->head;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        int failed = s->err != SDNN_OK;
        pthread_mutex_unlock(&s->mu);

        long delay = g_jitter ? jitter(s) : 0;
        if (g_log)
            fprintf(g_log, "%.6f device %d context %u %s stream: %s%s (jitter %ld us)\n", now_s(),
                    s->ctx->o.device, s->ctx->serial, stream_names[s->which], op_call(op),
                    failed ? " skipped" : "", delay);
        pthread_mutex_lock(&g_dev[s->ctx->o.device].lock);
        ++g_dev[s->ctx->o.device].st.ops;
        g_dev[s->ctx->o.device].st.jitter_us += (uint64_t)delay;
        pthread_mutex_unlock(&g_dev[s->ctx->o.device].lock);
        if (op->kind == OP_FN) {
            if (failed) {
                if (op->skipped) op->skipped(op->arg);
            } else {
                sdnn_status st = op->fn(op->arg);
                if (st != SDNN_OK) {
                    pthread_mutex_lock(&s->mu);
                    s->err = st;
                    s->errcall = op->call;
                    snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
                    pthread_mutex_unlock(&s->mu);
                }
            }
            free(op->arg);
        } else if (op->kind == OP_RECORD) {
            /* Records run even on a failed stream: other streams wait on them. */
            sdnn_devent *e = op->ev;
            pthread_mutex_lock(&e->mu);
            if (op->gen > e->done) {
                e->done = op->gen;
                e->t_done = now_s();
            }
            pthread_cond_broadcast(&e->cv);
            pthread_mutex_unlock(&e->mu);
            event_unref(e);
        } else {
            sdnn_devent *e = op->ev;
            pthread_mutex_lock(&e->mu);
            while (e->done < op->gen) pthread_cond_wait(&e->cv, &e->mu);
            pthread_mutex_unlock(&e->mu);
            event_unref(e);
        }
        free(op);
        pthread_mutex_lock(&s->mu);
        ++s->completed;
        pthread_cond_broadcast(&s->done);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static sdnn_status stream_check(sdnn_dctx *c, int stream, const char *call)
{
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: no device context", call);
    if (stream < 0 || stream > 2)
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s: stream %d (compute 0, copy 1, comm 2)", call,
                          stream);
    return SDNN_OK;
}

/* Queue op on stream; *seq (optional) is its position for stream_wait. */
static void stream_push(sim_stream *s, sim_op *op, uint64_t *seq)
{
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    uint64_t n = ++s->submitted;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (seq) *seq = n;
}

/* Wait until the first `seq` operations of s ran; the sticky error if any. */
static sdnn_status stream_wait(sim_stream *s, uint64_t seq, const char *call)
{
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq) pthread_cond_wait(&s->done, &s->mu);
    sdnn_status st = s->err;
    char msg[1024];
    const char *ecall = s->errcall;
    if (st != SDNN_OK) snprintf(msg, sizeof msg, "%s", s->errmsg);
    pthread_mutex_unlock(&s->mu);
    if (st == SDNN_OK) return SDNN_OK;
    return SDNN_ERROR(st, "%s: simulated device %d, %s stream: an earlier %s failed: %s", call,
                      s->ctx->o.device, stream_names[s->which], ecall ? ecall : "operation", msg);
}

static sdnn_status stream_sync(sim_stream *s, const char *call)
{
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return stream_wait(s, seq, call);
}

static sdnn_status launch_seq(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                              sdnn_sim_skip_fn skipped, const void *arg, size_t argsize,
                              uint64_t *seq)
{
    SDNN_CHECK(stream_check(c, stream, call));
    sim_op *op = calloc(1, sizeof *op);
    void *copy = malloc(argsize ? argsize : 1);
    if (!op || !copy) {
        free(op);
        free(copy);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to queue it", call);
    }
    if (argsize) memcpy(copy, arg, argsize);
    op->kind = OP_FN;
    op->fn = fn;
    op->skipped = skipped;
    op->arg = copy;
    op->call = call;
    stream_push(&c->s[stream], op, seq);
    return SDNN_OK;
}

sdnn_status sdnn_sim_launch(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                            const void *arg, size_t argsize)
{
    return launch_seq(c, stream, call, fn, NULL, arg, argsize, NULL);
}

sdnn_status sdnn_sim_launch_ex(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                               sdnn_sim_skip_fn skipped, const void *arg, size_t argsize)
{
    return launch_seq(c, stream, call, fn, skipped, arg, argsize, NULL);
}

sdnn_status sdnn_sim_launch_sync(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                                 const void *arg, size_t argsize)
{
    uint64_t seq;
    SDNN_CHECK(launch_seq(c, stream, call, fn, NULL, arg, argsize, &seq));
    return stream_wait(&c->s[stream], seq, call);
}

sdnn_status sdnn_sim_dptr(sdnn_dctx *c, const void *p, size_t bytes, const char *call,
                          void **host)
{
    *host = NULL;
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: no device context", call);
    return sim_translate(c->o.device, p, bytes, call, host, NULL);
}

sdnn_status sdnn_sim_stream_sync(sdnn_dctx *c, int stream, const char *call)
{
    SDNN_CHECK(stream_check(c, stream, call));
    return stream_sync(&c->s[stream], call);
}

/* ---- devices and contexts ---------------------------------------------------------- */

sdnn_status sdnn_dev_count(int *n)
{
    *n = 0;
    SDNN_CHECK(sim_ready());
    if (g_ndev < 1)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "no CUDA device (no simulated device: SDNN_SIM_DEVICES=0)");
    *n = g_ndev;
    return SDNN_OK;
}

sdnn_status sdnn_dev_describe(int dev, char *buf, size_t len)
{
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    if (dev < 0 || dev >= n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device %d does not exist (%d simulated)", dev, n);
    sdnn_dev_stats s;
    SDNN_CHECK(sdnn_dev_stats_get(dev, &s));
    snprintf(buf, len,
             "%d: simulated device %d (CPU, make GPU=sim: host logic and the kernels on a host "
             "executor, no GPU), "
             "%.1f MiB in use%s",
             dev, dev, (double)s.mem_live / (1024.0 * 1024.0), g_jitter ? ", jitter on" : "");
    return SDNN_OK;
}

sdnn_status sdnn_dev_stats_get(int dev, sdnn_dev_stats *out)
{
    memset(out, 0, sizeof *out);
    SDNN_CHECK(sim_ready());
    if (dev < 0 || dev >= g_ndev)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device %d does not exist (%d simulated)", dev,
                          g_ndev);
    pthread_mutex_lock(&g_dev[dev].lock);
    *out = g_dev[dev].st;
    pthread_mutex_unlock(&g_dev[dev].lock);
    return SDNN_OK;
}

static void ctx_stop_streams(sdnn_dctx *c)
{
    for (int i = 0; i < 3; ++i) {
        sim_stream *s = &c->s[i];
        if (!s->started) continue;
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        s->started = 0;
    }
}

sdnn_status sdnn_dctx_create(const sdnn_dctx_options *o, sdnn_dctx **out)
{
    *out = NULL;
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    sdnn_dctx_options def = SDNN_DCTX_OPTIONS_INIT;
    if (!o) o = &def;
    if (o->device < 0 || o->device >= n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device %d does not exist (%d simulated)", o->device,
                          n);
    sdnn_dctx *c = calloc(1, sizeof *c);
    if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device context");
    c->o = *o;
    c->serial = atomic_fetch_add(&g_ctx_serial, 1u);
    for (int i = 0; i < 3; ++i) {
        sim_stream *s = &c->s[i];
        s->ctx = c;
        s->which = i;
        s->rng = (g_jitter_seed + 1) * 0x9e3779b97f4a7c15ull ^
                 ((uint64_t)c->serial * 3 + (uint64_t)i + 1) * 0xbf58476d1ce4e5b9ull;
        if (!s->rng) s->rng = 1;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->work, NULL);
        pthread_cond_init(&s->done, NULL);
        int e = pthread_create(&s->th, NULL, stream_main, s);
        if (e) {
            pthread_mutex_destroy(&s->mu);
            pthread_cond_destroy(&s->work);
            pthread_cond_destroy(&s->done);
            ctx_stop_streams(c);
            free(c);
            return SDNN_ERROR(SDNN_ERR_SYSTEM, "simulated device %d: no thread for a stream: %s",
                              o->device, strerror(e));
        }
        s->started = 1;
    }
    sim_device *D = &g_dev[o->device];
    pthread_mutex_lock(&D->lock);
    c->next_on_dev = D->ctxs;
    D->ctxs = c;
    pthread_mutex_unlock(&D->lock);
    *out = c;
    return SDNN_OK;
}

void sdnn_dctx_destroy(sdnn_dctx *c)
{
    if (!c) return;
    for (int i = 0; i < 3; ++i) (void)stream_sync(&c->s[i], "sdnn_dctx_destroy");
    sim_device *D = &g_dev[c->o.device];
    pthread_mutex_lock(&D->lock);
    for (sdnn_dctx **p = &D->ctxs; *p; p = &(*p)->next_on_dev)
        if (*p == c) {
            *p = c->next_on_dev;
            break;
        }
    pthread_mutex_unlock(&D->lock);
    if (c->ws) sdnn_dfree(c->ws);
    for (size_t i = 0; i < c->n_retired; ++i) sdnn_dfree(c->ws_retired[i]);
    for (int i = 0; i < 3; ++i) sdnn_dfree(c->count_slot[i]);
    free(c->ws_retired);
    ctx_stop_streams(c);
    free(c);
}

int sdnn_dctx_device(const sdnn_dctx *c) { return c->o.device; }
const sdnn_dctx_options *sdnn_dctx_opts(const sdnn_dctx *c) { return &c->o; }

sdnn_status sdnn_dctx_bind(sdnn_dctx *c)
{
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_dctx_bind: no device context");
    return SDNN_OK;
}

sdnn_status sdnn_dctx_sync(sdnn_dctx *c)
{
    SDNN_CHECK(stream_check(c, 0, "sdnn_dctx_sync"));
    return stream_sync(&c->s[SDNN_STREAM_COMPUTE], "sdnn_dctx_sync");
}

sdnn_status sdnn_dctx_sync_all(sdnn_dctx *c)
{
    SDNN_CHECK(stream_check(c, 0, "sdnn_dctx_sync_all"));
    sdnn_status first = SDNN_OK;
    for (int i = 0; i < 3; ++i) {
        sdnn_status st = stream_sync(&c->s[i], "sdnn_dctx_sync_all");
        if (first == SDNN_OK) first = st;
    }
    return first;
}

sdnn_status sdnn_dctx_workspace(sdnn_dctx *c, size_t bytes, void **ws)
{
    if (bytes > c->ws_bytes) {
        /* As runtime.cu: no wait and no free; queued work may still read
         * the outgrown buffer, which goes with the context. */
        if (c->ws) {
            void **r = realloc(c->ws_retired, (c->n_retired + 1) * sizeof *r);
            if (!r) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to grow a workspace");
            c->ws_retired = r;
        }
        void *p = NULL;
        SDNN_CHECK(sdnn_dmalloc(c, bytes, &p));
        if (c->ws) c->ws_retired[c->n_retired++] = c->ws;
        c->ws = p;
        c->ws_bytes = bytes;
    }
    *ws = c->ws;
    return SDNN_OK;
}

void sdnn_dctx_workspace_current(sdnn_dctx *c, void **ws, size_t *bytes)
{
    *ws = c->ws;
    *bytes = c->ws_bytes;
}

void *sdnn_dctx_stream(sdnn_dctx *c, int stream)
{
    return stream >= 0 && stream < 3 ? (void *)&c->s[stream] : NULL;
}

/* ---- events -------------------------------------------------------------------------- */

sdnn_status sdnn_devent_create(sdnn_dctx *c, int timing, sdnn_devent **out)
{
    *out = NULL;
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_devent_create: no device context");
    sdnn_devent *e = calloc(1, sizeof *e);
    if (!e) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for an event");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->timing = timing;
    e->device = c->o.device;
    e->refs = 1;
    *out = e;
    return SDNN_OK;
}

void sdnn_devent_destroy(sdnn_devent *e)
{
    if (e) event_unref(e);
}

static sdnn_status event_op(sdnn_devent *e, sdnn_dctx *c, int stream, int kind, const char *call)
{
    SDNN_CHECK(stream_check(c, stream, call));
    if (!e) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: no event", call);
    sim_op *op = calloc(1, sizeof *op);
    if (!op) return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to queue it", call);
    op->kind = kind;
    op->ev = e;
    op->call = call;
    pthread_mutex_lock(&e->mu);
    if (kind == OP_RECORD) op->gen = ++e->gen;
    else op->gen = e->gen;      /* the most recent record before this call */
    ++e->refs;
    pthread_mutex_unlock(&e->mu);
    stream_push(&c->s[stream], op, NULL);
    return SDNN_OK;
}

sdnn_status sdnn_devent_record(sdnn_devent *e, sdnn_dctx *c, int stream)
{
    return event_op(e, c, stream, OP_RECORD, "sdnn_devent_record");
}

sdnn_status sdnn_devent_wait(sdnn_devent *e, sdnn_dctx *c, int stream)
{
    return event_op(e, c, stream, OP_WAIT, "sdnn_devent_wait");
}

sdnn_status sdnn_devent_sync(sdnn_devent *e)
{
    if (!e) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_devent_sync: no event");
    pthread_mutex_lock(&e->mu);
    uint64_t want = e->gen;
    while (e->done < want) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return SDNN_OK;
}

int sdnn_devent_done(sdnn_devent *e)
{
    pthread_mutex_lock(&e->mu);
    int done = e->done >= e->gen;
    pthread_mutex_unlock(&e->mu);
    return done;
}

sdnn_status sdnn_devent_elapsed(sdnn_devent *from, sdnn_devent *to, float *ms)
{
    *ms = 0;
    if (!from || !to || !from->timing || !to->timing)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "sdnn_devent_elapsed: both events must be timing events");
    double a, b;
    int ok;
    pthread_mutex_lock(&from->mu);
    ok = from->gen > 0 && from->done >= from->gen;
    a = from->t_done;
    pthread_mutex_unlock(&from->mu);
    pthread_mutex_lock(&to->mu);
    ok = ok && to->gen > 0 && to->done >= to->gen;
    b = to->t_done;
    pthread_mutex_unlock(&to->mu);
    if (!ok)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "sdnn_devent_elapsed: an event was never recorded or has not completed");
    *ms = (float)((b - a) * 1e3);
    return SDNN_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

sdnn_status sdnn_dmalloc(sdnn_dctx *c, size_t bytes, void **p)
{
    *p = NULL;
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_dmalloc: no device context");
    if (bytes == 0) return SDNN_OK;
    int d = c->o.device;
    sim_device *D = &g_dev[d];
    size_t span = (bytes + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE + SIM_PAGE;
    size_t padded = (bytes + 255) / 256 * 256;
    if (span < bytes) return SDNN_ERROR(SDNN_ERR_NOMEM, "sdnn_dmalloc: %zu bytes", bytes);
    sdnn_status st = SDNN_OK;
    pthread_mutex_lock(&D->lock);
    if (D->next > SIM_SPAN || span > SIM_SPAN - D->next) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM,
                        "sdnn_dmalloc: %zu bytes on simulated device %d: its %zu GiB of "
                        "addresses are used up (offsets are never reused)",
                        bytes, d, SIM_SPAN >> 30);
    } else if (D->na == D->cap) {
        size_t cap = D->cap ? D->cap * 2 : 256;
        sim_alloc *a = realloc(D->a, cap * sizeof *a);
        if (!a) st = SDNN_ERROR(SDNN_ERR_NOMEM, "sdnn_dmalloc: no memory for its table");
        else {
            D->a = a;
            D->cap = cap;
        }
    }
    if (st == SDNN_OK) {
        sim_alloc *a = &D->a[D->na++];
        a->base = D->next;
        a->off = a->base + (span - SIM_PAGE - padded);    /* its end near the guard */
        a->bytes = bytes;
        a->span = span;
        /* The guard page in the host view (best effort: the mapping count
         * is limited; a failure only loses the check). */
        (void)mprotect(D->hview + a->base + span - SIM_PAGE, SIM_PAGE, PROT_NONE);
        a->live = 1;
        D->next += span;
        D->st.mem_live += bytes;
        if (D->st.mem_live > D->st.mem_peak) D->st.mem_peak = D->st.mem_live;
        ++D->st.allocs;
        *p = D->dview + a->off;     /* fresh pages of the memfd: zeroed */
    }
    pthread_mutex_unlock(&D->lock);
    return st;
}

void sdnn_dfree(void *p)
{
    if (!p) return;
    int d = sim_dev_of(p);
    if (d < 0) {
        (void)SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_dfree: %p is host memory, not device memory", p);
        return;
    }
    sim_device *D = &g_dev[d];
    /* cudaFree waits for the device: so does this, for every context on it. */
    sdnn_dctx *ctxs[256];
    int nc = 0;
    pthread_mutex_lock(&D->lock);
    for (sdnn_dctx *c = D->ctxs; c && nc < 256; c = c->next_on_dev) ctxs[nc++] = c;
    pthread_mutex_unlock(&D->lock);
    for (int i = 0; i < nc; ++i)
        for (int s = 0; s < 3; ++s) {
            sim_stream *S = &ctxs[i]->s[s];
            pthread_mutex_lock(&S->mu);
            while (S->completed < S->submitted) pthread_cond_wait(&S->done, &S->mu);
            pthread_mutex_unlock(&S->mu);
        }
    size_t o = (size_t)((unsigned char *)p - D->dview);
    pthread_mutex_lock(&D->lock);
    sim_alloc *a = sim_find(D, o);
    if (!a || a->off != o || !a->live) {
        (void)SDNN_ERROR(SDNN_ERR_INVALID,
                         "sdnn_dfree: %p on simulated device %d is %s", p, d,
                         a && a->off == o ? "already freed (double free)"
                                          : "not the start of an allocation");
        ++D->st.bad_frees;
    } else {
        a->live = 0;
        D->st.mem_live -= a->bytes;
        ++D->st.frees;
        fallocate(D->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a->base,
                  (off_t)a->span);
        (void)mprotect(D->hview + a->base, a->span, PROT_NONE);
    }
    pthread_mutex_unlock(&D->lock);
}

sdnn_status sdnn_hmalloc_pinned(size_t bytes, void **p)
{
    *p = NULL;
    size_t n = (bytes ? bytes : 1);
    n = (n + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE;
    void *m = aligned_alloc(SIM_PAGE, n);
    if (!m) return SDNN_ERROR(SDNN_ERR_NOMEM, "sdnn_hmalloc_pinned: %zu bytes", bytes);
    pthread_mutex_lock(&g_pinned_lock);
    if (g_npinned == g_cap_pinned) {
        size_t cap = g_cap_pinned ? 2 * g_cap_pinned : 64;
        pinned_block *b = realloc(g_pinned, cap * sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&g_pinned_lock);
            free(m);
            return SDNN_ERROR(SDNN_ERR_NOMEM, "sdnn_hmalloc_pinned: no memory for its table");
        }
        g_pinned = b;
        g_cap_pinned = cap;
    }
    g_pinned[g_npinned].p = m;
    g_pinned[g_npinned].bytes = n;
    ++g_npinned;
    pthread_mutex_unlock(&g_pinned_lock);
    *p = m;
    return SDNN_OK;
}

void sdnn_hfree_pinned(void *p)
{
    if (!p) return;
    int found = 0;
    pthread_mutex_lock(&g_pinned_lock);
    for (size_t i = 0; i < g_npinned; ++i)
        if (g_pinned[i].p == p) {
            g_pinned[i] = g_pinned[--g_npinned];
            found = 1;
            break;
        }
    if (g_npinned == 0) {
        free(g_pinned);
        g_pinned = NULL;
        g_cap_pinned = 0;
    }
    pthread_mutex_unlock(&g_pinned_lock);
    if (found) free(p);
    else (void)SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_hfree_pinned: %p was not pinned by sdnn_hmalloc_pinned", p);
}

/* ---- copies ---------------------------------------------------------------------------- */

typedef struct copy_arg {
    void *dst;
    const void *src;
    size_t bytes;
    void *staging;      /* owned: freed after the copy */
} copy_arg;

static sdnn_status run_copy(void *arg)
{
    copy_arg *a = arg;
    memmove(a->dst, a->staging ? a->staging : a->src, a->bytes);
    free(a->staging);
    return SDNN_OK;
}

static void skip_copy(void *arg)
{
    copy_arg *a = arg;
    free(a->staging);
}

typedef struct side {
    int dev;            /* -1: host */
    int pinned;
    void *host;
} side;

static sdnn_status classify(const void *p, size_t bytes, const char *call, const char *what,
                            side *s)
{
    s->dev = sim_dev_of(p);
    s->pinned = 0;
    if (s->dev < 0) {
        if (!p) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: NULL %s", call, what);
        s->pinned = sim_is_pinned(p, bytes);
        s->host = (void *)p;
        return SDNN_OK;
    }
    return sim_translate(-1, p, bytes, call, &s->host, NULL);
}

static void count_copy(int dev, uint64_t *n, uint64_t *b, size_t bytes)
{
    pthread_mutex_lock(&g_dev[dev].lock);
    ++*n;
    *b += bytes;
    pthread_mutex_unlock(&g_dev[dev].lock);
}

sdnn_status sdnn_dcopy(sdnn_dctx *c, int stream, void *dst, const void *src, size_t bytes,
                       int sync)
{
    static const char call[] = "sdnn_dcopy";
    SDNN_CHECK(stream_check(c, stream, call));
    if (bytes == 0) return SDNN_OK;
    side d, s;
    SDNN_CHECK(classify(dst, bytes, call, "destination", &d));
    SDNN_CHECK(classify(src, bytes, call, "source", &s));
    if (d.dev < 0 && s.dev < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: host to host (%p <- %p): one side must be device memory", call, dst,
                          src);
    sdnn_dev_stats *st = &g_dev[c->o.device].st;
    copy_arg a = {d.host, s.host, bytes, NULL};
    int wait_after = sync;
    if (s.dev < 0) {
        if (s.pinned) {
            count_copy(c->o.device, &st->h2d_pinned, &st->h2d_pinned_bytes, bytes);
        } else {
            /* Pageable: the runtime stages the source before returning. */
            count_copy(c->o.device, &st->h2d_pageable, &st->h2d_pageable_bytes, bytes);
            a.staging = malloc(bytes);
            if (!a.staging) return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: staging %zu bytes", call, bytes);
            memcpy(a.staging, src, bytes);
        }
    } else if (d.dev < 0) {
        if (d.pinned) {
            count_copy(c->o.device, &st->d2h_pinned, &st->d2h_pinned_bytes, bytes);
        } else {
            /* Pageable: the call returns when the copy is done. */
            count_copy(c->o.device, &st->d2h_pageable, &st->d2h_pageable_bytes, bytes);
            wait_after = 1;
        }
    } else {
        count_copy(c->o.device, &st->d2d, &st->d2d_bytes, bytes);
    }
    uint64_t seq;
    sdnn_status r = launch_seq(c, stream, call, run_copy, skip_copy, &a, sizeof a, &seq);
    if (r != SDNN_OK) {
        free(a.staging);
        return r;
    }
    if (wait_after) return stream_wait(&c->s[stream], seq, call);
    return SDNN_OK;
}

sdnn_status sdnn_dcopy_peer(sdnn_dctx *c, int stream, void *dst, int dst_dev, const void *src,
                            int src_dev, size_t bytes)
{
    static const char call[] = "sdnn_dcopy_peer";
    SDNN_CHECK(stream_check(c, stream, call));
    if (bytes == 0) return SDNN_OK;
    void *hd, *hs;
    int dd = -1, sd = -1;
    SDNN_CHECK(sim_translate(-1, dst, bytes, call, &hd, &dd));
    SDNN_CHECK(sim_translate(-1, src, bytes, call, &hs, &sd));
    if (dd != dst_dev || sd != src_dev)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: destination on simulated device %d (said %d), source on %d (said %d)",
                          call, dd, dst_dev, sd, src_dev);
    sdnn_dev_stats *st = &g_dev[c->o.device].st;
    if (dd == sd) count_copy(c->o.device, &st->d2d, &st->d2d_bytes, bytes);
    else count_copy(c->o.device, &st->peer, &st->peer_bytes, bytes);
    copy_arg a = {hd, hs, bytes, NULL};
    return sdnn_sim_launch(c, stream, call, run_copy, &a, sizeof a);
}

sdnn_status sdnn_dctx_sync_stream(sdnn_dctx *c, int stream)
{
    SDNN_CHECK(stream_check(c, stream, "sdnn_dctx_sync_stream"));
    return stream_sync(&c->s[stream], "sdnn_dctx_sync_stream");
}

typedef struct zero_arg {
    void *p;
    size_t bytes;
} zero_arg;

static sdnn_status run_zero(void *arg)
{
    zero_arg *z = arg;
    memset(z->p, 0, z->bytes);
    return SDNN_OK;
}

sdnn_status sdnn_dzero(sdnn_dctx *c, int stream, void *p, size_t bytes)
{
    if (bytes == 0) return SDNN_OK;
    zero_arg z;
    SDNN_CHECK(sdnn_sim_dptr(c, p, bytes, "sdnn_dzero", &z.p));
    z.bytes = bytes;
    return sdnn_sim_launch(c, stream, "sdnn_dzero", run_zero, &z, sizeof z);
}

/* ---- for the kernel executor ----------------------------------------------------------- */

int sdnn_sim_jitter_seed(unsigned long long *seed)
{
    *seed = g_jitter_seed;
    return g_jitter;
}

void sdnn_sim_describe_host(const void *p, char *buf, size_t len)
{
    uintptr_t u = (uintptr_t)p;
    for (int d = 0; d < g_ndev; ++d) {
        uintptr_t b = (uintptr_t)g_dev[d].hview;
        if (u < b || u - b >= SIM_SPAN) continue;
        size_t o = (size_t)(u - b);
        /* No lock: the process is about to die of this fault. */
        sim_alloc *a = sim_find(&g_dev[d], o);
        if (a && !a->live && o < a->base + a->span)
            snprintf(buf, len, "in freed memory of simulated device %d (an allocation of %zu "
                     "bytes)", d, a->bytes);
        else if (a)
            snprintf(buf, len, "%zu bytes past the end of an allocation of %zu bytes on "
                     "simulated device %d (its guard page)", o - (a->off + a->bytes), a->bytes,
                     d);
        else
            snprintf(buf, len, "outside every allocation of simulated device %d", d);
        return;
    }
    snprintf(buf, len, "not memory of a simulated device (a host pointer, or a device "
             "address used untranslated)");
}

sdnn_status sdnn_sim_count_slot(sdnn_dctx *c, int stream, unsigned long long **slot)
{
    *slot = NULL;
    SDNN_CHECK(stream_check(c, stream, "sdnn_sim_count_slot"));
    if (!c->count_slot[stream]) {
        void *p = NULL;
        SDNN_CHECK(sdnn_dmalloc(c, sizeof(unsigned long long), &p));
        c->count_slot[stream] = p;
    }
    *slot = c->count_slot[stream];
    return SDNN_OK;
}
