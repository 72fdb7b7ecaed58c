/*
 * sim/nccl: an in-process stand-in for NCCL behind dev.h's sdnn_dnccl_*
 * calls, so that rings over 2-4 simulated devices run the same host code
 * (ring.c, comm_gpu.c) as NCCL does on real GPUs.
 *
 * What it keeps of NCCL's semantics:
 *  - a communicator is one rank of a world (a "clique" here), on one
 *    device; two ranks on one device are refused, as NCCL refuses them;
 *  - send/recv match per (sender, receiver) pair in the order the calls
 *    were made; the sizes must agree;
 *  - between group_start and group_end, a rank's operations on one stream
 *    form one queued unit whose parts progress together and complete in
 *    any order (so a ring shift inside a group does not deadlock, and one
 *    outside a group does, as with NCCL);
 *  - an unmatched send or receive hangs: it waits until its communicator
 *    is aborted.  Only a last-resort bound (SDNN_SIM_NCCL_HANG_S, default
 *    120 s) fails it, saying that real NCCL would hang there: the caller's
 *    own timeout (sdnn_dring_sync) must catch it first;
 *  - abort cancels what is queued or in flight on that communicator, and
 *    the failure is the stream's sticky error and the communicator's
 *    asynchronous error; destroy waits for queued work, as
 *    ncclCommDestroy does.
 * Allreduce of floats sums in rank order (real NCCL's order is its own
 * choice).  Allreduce of half or bfloat16 (sdnn_dnccl_allreduce_sum_typed)
 * has NCCL's arithmetic: a ring reduce-scatter whose partial sums are
 * rounded to the reduced type at every step, then an all-gather of the
 * rounded sums (reduce16 below states the order), so a sum of W inputs
 * carries W-1 roundings, each at most half an ulp of that type.
 *
 * Between processes (sdnn_dnccl_init_ranks, the world of backend=nccl under
 * mpirun): the ranks meet in a shared memory segment named after the id
 * (shm_open, unlinked once every rank joined, so nothing is left behind
 * by a run that completes its init).  It holds one byte pipe per ordered
 * pair of ranks (single producer, single consumer, C11 atomics), and every
 * operation is messages on those pipes: a send is one message to its
 * peer, an allreduce sends the rank's input to every other rank and sums
 * the W inputs in rank order (so every rank gets the same bits, those of
 * the in-process world), a broadcast is the root's message to each rank.
 * Each message starts with its kind and size, so a send met by a
 * collective, or sizes that disagree, fail as mismatches.  A killed or
 * stopped peer leaves its pipes still: the operations waiting on it never
 * finish, as with NCCL, until the caller's deadline aborts the
 * communicator (sdnn_dnccl_abort cancels them at once).  Joining waits at
 * most the timeout given to init_ranks and names the ranks that never
 * came.
 *
 * Fault injection for the error-path tests, read when a world is created:
 *   SDNN_SIM_NCCL_FAULT=silent:R:K  rank R never answers from its K-th
 *                                   queued unit on (a peer that hangs)
 *   SDNN_SIM_NCCL_FAULT=error:K     the K-th send/recv/allreduce call of
 *                                   the world fails at once (an exchange
 *                                   that fails mid-step)
 *
 * Nothing here shows how real NCCL behaves (its algorithms, its protocols,
 * its timing): only that the host code drives it correctly.
 */
#include "sim.h"
#include "codec.h"
#include "collective.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NOP_SEND, NOP_RECV, NOP_ALLREDUCE, NOP_BCAST };
static const char *const op_names[] = {"ncclSend", "ncclRecv", "ncclAllReduce", "ncclBroadcast"};

enum { FAULT_NONE, FAULT_SILENT, FAULT_ERROR };

typedef struct clique clique;

/* A send in flight: the receiver copies straight from the sender's buffer
 * while the sender's unit waits for it. */
typedef struct post {
    struct post *next;
    int src, dst;
    uint64_t seq;
    const void *buf;
    size_t bytes;
    int consumed, cancelled;
} post;

/* One collective call, gathered over the ranks by sequence number. */
typedef struct coll {
    struct coll *next;
    uint64_t seq;
    int kind, root, dtype;
    size_t n;
    int arrived, finished, ready;
    const void **in;    /* per rank */
    void *result;
} coll;

/* ---- the pipes between processes (declared here, used below) ---- */
enum { SHM_CAP = 1 << 18, SHM_MAXR = 64, SHM_HDR = 4096, SHM_MAGIC = 0x5344504e };

typedef struct shm_pipe {
    _Atomic uint64_t head;   /* bytes written (the sender's) */
    char pad1[56];
    _Atomic uint64_t tail;   /* bytes read (the receiver's) */
    char pad2[56];
    unsigned char data[SHM_CAP];
} shm_pipe;

typedef struct shm_hdr {
    _Atomic uint32_t magic;
    _Atomic int32_t nranks;
    _Atomic int32_t joined;
    _Atomic int32_t pid[SHM_MAXR];   /* 0 until rank r joined */
} shm_hdr;

/* The 16 bytes before each message's payload. */
typedef struct shm_msg {
    uint32_t kind;
    uint32_t from;
    uint64_t bytes;
} shm_msg;

struct clique {
    clique *next;
    /* between processes: the mapped segment (NULL: one process) */
    shm_hdr *shm;
    shm_pipe *pipes;     /* [src * nranks + dst] */
    size_t shm_len;
    char shm_name[64];
    unsigned char id[SDNN_NCCL_ID_BYTES];
    int has_id;
    int nranks, joined, alive;
    sdnn_dnccl **rank;
    post *posts;
    coll *colls;
    int fault, fault_rank;
    long fault_after, calls;
};

/* The bytes a rank sent through the simulated NCCL, by operation. */
typedef struct sim_bytes {
    double send, allreduce, broadcast;
} sim_bytes;

struct sdnn_dnccl {
    clique *q;
    int rank, device;
    int aborted;
    char why[384];                  /* sdnn_dnccl_abort_because's reason */
    sdnn_status async;
    char async_msg[512];
    uint64_t *send_seq, *recv_seq;  /* per peer */
    uint64_t coll_seq;
    long units;                     /* units queued so far (fault injection) */
    int inflight;                   /* units queued that name it */
    sim_bytes counted;              /* what passed through it (count_op) */
};

/* One message of an operation between processes: its header and payload
 * move through one pipe, `off` bytes of sizeof(shm_msg) + bytes so far. */
typedef struct xfer {
    int send, peer;
    uint32_t kind;
    const unsigned char *src;
    unsigned char *dst;
    size_t bytes;
    size_t off;
    shm_msg got;         /* a receive's header as it arrived */
    int done;
} xfer;

typedef struct dop {
    int kind;
    sdnn_dnccl *c;
    sdnn_dctx *ctx;
    int stream;
    void *buf;          /* host addresses of the device buffers */
    const void *cbuf;
    size_t bytes;
    int peer;
    uint64_t seq;
    const void *in;
    void *out;
    size_t n;
    int dtype;          /* allreduce: sdnn_dnccl_type (broadcast: float) */
    int root;
    int silent;
    /* progress */
    int done;
    post *p;
    coll *k;
    /* between processes */
    xfer *x;
    int nx;
    float *tmp;          /* allreduce: the other ranks' inputs, W x n */
} dop;

typedef struct unit {
    int nops;
    dop *ops;
} unit;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static clique *g_cliques;
static unsigned long long g_id_counter;

static _Thread_local int t_depth;
static _Thread_local dop *t_pend;
static _Thread_local int t_npend, t_cap;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double hang_s(void)
{
    const char *e = getenv("SDNN_SIM_NCCL_HANG_S");
    double v = e && *e ? atof(e) : 120.0;
    return v > 0 ? v : 120.0;
}

/* ---- worlds and communicators ------------------------------------------------------ */

static sdnn_status read_fault(clique *q)
{
    const char *f = getenv("SDNN_SIM_NCCL_FAULT");
    if (!f || !*f) return SDNN_OK;
    int r;
    long k;
    char tail;
    if (sscanf(f, "silent:%d:%ld%c", &r, &k, &tail) == 2 && r >= 0 && k >= 0) {
        q->fault = FAULT_SILENT;
        q->fault_rank = r;
        q->fault_after = k;
    } else if (sscanf(f, "error:%ld%c", &k, &tail) == 1 && k >= 0) {
        q->fault = FAULT_ERROR;
        q->fault_after = k;
    } else {
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "SDNN_SIM_NCCL_FAULT=%s: expected silent:RANK:K or error:K", f);
    }
    return SDNN_OK;
}

static clique *clique_new(int nranks)
{
    clique *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->rank = calloc((size_t)nranks, sizeof *q->rank);
    if (!q->rank) {
        free(q);
        return NULL;
    }
    q->nranks = nranks;
    return q;
}

static void clique_free(clique *q)
{
    if (q->shm) {
        munmap(q->shm, q->shm_len);
        shm_unlink(q->shm_name);   /* already gone after a complete join */
    }
    for (clique **p = &g_cliques; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    while (q->posts) {
        post *p = q->posts;
        q->posts = p->next;
        free(p);
    }
    while (q->colls) {
        coll *k = q->colls;
        q->colls = k->next;
        free(k->in);
        free(k->result);
        free(k);
    }
    free(q->rank);
    free(q);
}

/* ---- the byte counter (tests read it; the real nccl.cu cannot count) -------- *
 * A send counts its bytes.  A collective counts what NCCL's ring sends per
 * rank for it (collective.h's sdnn_wire_bytes: all-reduce 2(W-1)/W x S,
 * broadcast (W-1)/W x S): this stand-in moves a collective's data by other
 * messages, which are not what a rank of a ring would send.  An operation
 * counts when it is queued.  With SDNN_SIM_NCCL_BYTES=FILE every rank
 * appends one line to FILE when its communicator is freed:
 *   sim-nccl-bytes rank R of W: T sent (send S, allreduce A, broadcast B)
 * (one write per line, O_APPEND, so the ranks of several processes share
 * a file). */
static void count_op(sdnn_dnccl *c, const dop *o)
{
    const int W = c->q->nranks;
    switch (o->kind) {
    case NOP_SEND: c->counted.send += (double)o->bytes; break;
    case NOP_ALLREDUCE:
        /* the element type's size (half / bfloat16: 2 bytes) */
        c->counted.allreduce += sdnn_wire_bytes(
            SDNN_WIRE_ALLREDUCE, W,
            (double)(o->n * sdnn_dnccl_type_bytes((sdnn_dnccl_type)o->dtype)));
        break;
    case NOP_BCAST:
        c->counted.broadcast += sdnn_wire_bytes(SDNN_WIRE_BROADCAST, W,
                                                (double)(o->n * sizeof(float)));
        break;
    default: break;
    }
}

double sdnn_dnccl_sim_sent(const sdnn_dnccl *c)
{
    return c ? c->counted.send + c->counted.allreduce + c->counted.broadcast : 0;
}

static void dump_counted(const sdnn_dnccl *c)
{
    const char *path = getenv("SDNN_SIM_NCCL_BYTES");
    if (!path || !*path) return;
    char line[256];
    int len = snprintf(line, sizeof line,
                       "sim-nccl-bytes rank %d of %d: %.0f sent (send %.0f, allreduce %.0f, "
                       "broadcast %.0f)\n",
                       c->rank, c->q->nranks, sdnn_dnccl_sim_sent(c), c->counted.send,
                       c->counted.allreduce, c->counted.broadcast);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        fprintf(stderr, "simulated NCCL: SDNN_SIM_NCCL_BYTES=%s: cannot open it\n", path);
        return;
    }
    if (len > 0 && write(fd, line, (size_t)len) != len)
        fprintf(stderr, "simulated NCCL: SDNN_SIM_NCCL_BYTES=%s: short write\n", path);
    close(fd);
}

static sdnn_status comm_new(clique *q, int rank, sdnn_dctx *ctx, sdnn_dnccl **out)
{
    sdnn_dnccl *c = calloc(1, sizeof *c);
    if (c) {
        c->send_seq = calloc((size_t)q->nranks, sizeof *c->send_seq);
        c->recv_seq = calloc((size_t)q->nranks, sizeof *c->recv_seq);
    }
    if (!c || !c->send_seq || !c->recv_seq) {
        if (c) {
            free(c->send_seq);
            free(c->recv_seq);
        }
        free(c);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a communicator");
    }
    c->q = q;
    c->rank = rank;
    c->device = sdnn_dctx_device(ctx);
    q->rank[rank] = c;
    ++q->joined;
    ++q->alive;
    *out = c;
    return SDNN_OK;
}

static void comm_free_locked(sdnn_dnccl *c)
{
    clique *q = c->q;
    dump_counted(c);
    if (q->rank[c->rank] == c) q->rank[c->rank] = NULL;
    free(c->send_seq);
    free(c->recv_seq);
    free(c);
    if (--q->alive == 0) clique_free(q);
}

static sdnn_status check_devices(sdnn_dctx *const *ctxs, int n, const char *call)
{
    for (int i = 0; i < n; ++i) {
        if (!ctxs[i]) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: no context for rank %d", call, i);
        for (int j = 0; j < i; ++j)
            if (sdnn_dctx_device(ctxs[i]) == sdnn_dctx_device(ctxs[j]))
                return SDNN_ERROR(SDNN_ERR_COMM,
                                  "%s (simulated NCCL): ranks %d and %d on one device (%d): "
                                  "NCCL refuses duplicate devices",
                                  call, j, i, sdnn_dctx_device(ctxs[i]));
    }
    return SDNN_OK;
}

sdnn_status sdnn_dnccl_unique_id(unsigned char id[SDNN_NCCL_ID_BYTES])
{
    memset(id, 0, SDNN_NCCL_ID_BYTES);
    pthread_mutex_lock(&g_mu);
    unsigned long long k = ++g_id_counter;
    pthread_mutex_unlock(&g_mu);
    unsigned long long pid = (unsigned long long)getpid();
    double t = now_s();
    memcpy(id, "sdnn-sim", 8);
    memcpy(id + 8, &pid, sizeof pid);
    memcpy(id + 16, &k, sizeof k);
    memcpy(id + 24, &t, sizeof t);
    return SDNN_OK;
}

sdnn_status sdnn_dnccl_init_all(sdnn_dctx *const *ctxs, int n, sdnn_dnccl **comms)
{
    static const char call[] = "ncclCommInitAll";
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    if (n < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: %d ranks", call, n);
    SDNN_CHECK(check_devices(ctxs, n, call));
    pthread_mutex_lock(&g_mu);
    clique *q = clique_new(n);
    sdnn_status st = q ? read_fault(q)
                       : SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a world");
    for (int i = 0; i < n && st == SDNN_OK; ++i) st = comm_new(q, i, ctxs[i], &comms[i]);
    if (st != SDNN_OK && q) {
        int made = 0;
        for (int i = 0; i < n; ++i)
            if (comms[i]) {
                comm_free_locked(comms[i]);     /* frees q with the last */
                comms[i] = NULL;
                made = 1;
            }
        if (!made) clique_free(q);
    } else if (q) {
        q->next = g_cliques;
        g_cliques = q;
    }
    pthread_mutex_unlock(&g_mu);
    return st;
}

/* The segment of world `id` mapped into this process (made by whichever
 * process comes first; both size it the same, which keeps what is there). */
static sdnn_status shm_attach(clique *q, const unsigned char id[SDNN_NCCL_ID_BYTES], int nranks)
{
    static const char call[] = "ncclCommInitRank (simulated NCCL)";
    if (nranks > SHM_MAXR)
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s: %d ranks between processes (at most %d)", call,
                          nranks, (int)SHM_MAXR);
    /* The name: a hash of the whole id (pid, counter and time of its maker). */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < SDNN_NCCL_ID_BYTES; ++i) h = (h ^ id[i]) * 1099511628211ull;
    snprintf(q->shm_name, sizeof q->shm_name, "/sdnn-simnccl-%016llx", (unsigned long long)h);
    q->shm_len = SHM_HDR + (size_t)nranks * (size_t)nranks * sizeof(shm_pipe);
    int fd = shm_open(q->shm_name, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_COMM, "%s: shm_open %s: %s", call, q->shm_name, strerror(errno));
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)q->shm_len) == 0)
        m = mmap(NULL, q->shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(q->shm_name);
        return SDNN_ERROR(SDNN_ERR_COMM, "%s: %zu bytes of shared memory for %d ranks: %s", call,
                          q->shm_len, nranks, strerror(err));
    }
    q->shm = m;
    q->pipes = (shm_pipe *)((unsigned char *)m + SHM_HDR);
    uint32_t zero = 0;
    if (atomic_compare_exchange_strong(&q->shm->magic, &zero, SHM_MAGIC))
        atomic_store(&q->shm->nranks, nranks);
    for (int spin = 0; atomic_load(&q->shm->nranks) == 0 && spin < 100000; ++spin) {
        struct timespec t = {0, 10000};
        nanosleep(&t, NULL);
    }
    if (atomic_load(&q->shm->nranks) != nranks)
        return SDNN_ERROR(SDNN_ERR_COMM, "%s: the world of this id has %d ranks, joined as %d",
                          call, (int)atomic_load(&q->shm->nranks), nranks);
    return SDNN_OK;
}

sdnn_status sdnn_dnccl_init_ranks(const unsigned char id[SDNN_NCCL_ID_BYTES], int nranks,
                                  int first_rank, sdnn_dctx *const *ctxs, int n,
                                  double timeout_s, sdnn_dnccl **comms)
{
    static const char call[] = "ncclCommInitRank";
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    if (nranks < 1 || first_rank < 0 || n < 1 || first_rank + n > nranks)
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s: ranks %d..%d of a world of %d", call,
                          first_rank, first_rank + n - 1, nranks);
    SDNN_CHECK(check_devices(ctxs, n, call));
    if (!(timeout_s > 0)) timeout_s = hang_s();
    sdnn_status st = SDNN_OK;
    pthread_mutex_lock(&g_mu);
    clique *q = g_cliques;
    while (q && !(q->has_id && memcmp(q->id, id, SDNN_NCCL_ID_BYTES) == 0)) q = q->next;
    if (!q) {
        q = clique_new(nranks);
        if (!q) st = SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a world");
        else {
            memcpy(q->id, id, SDNN_NCCL_ID_BYTES);
            q->has_id = 1;
            st = read_fault(q);
            if (st == SDNN_OK) st = shm_attach(q, id, nranks);
            if (st != SDNN_OK) clique_free(q);
            else {
                q->next = g_cliques;
                g_cliques = q;
            }
        }
    } else if (q->nranks != nranks) {
        st = SDNN_ERROR(SDNN_ERR_COMM, "%s (simulated NCCL): world of %d ranks, joined as %d",
                        call, q->nranks, nranks);
    }
    for (int i = 0; i < n && st == SDNN_OK; ++i) {
        int32_t none = 0, me = (int32_t)getpid();
        if (q->rank[first_rank + i] ||
            !atomic_compare_exchange_strong(&q->shm->pid[first_rank + i], &none, me))
            st = SDNN_ERROR(SDNN_ERR_COMM, "%s (simulated NCCL): rank %d joined twice", call,
                            first_rank + i);
        else
            st = comm_new(q, first_rank + i, ctxs[i], &comms[i]);
        if (st == SDNN_OK) atomic_fetch_add(&q->shm->joined, 1);
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    /* NCCL's init is collective: wait (without the lock) for every rank of
     * every process, at most timeout_s. */
    const double deadline = now_s() + timeout_s;
    while (st == SDNN_OK && atomic_load(&q->shm->joined) < nranks) {
        if (now_s() > deadline) {
            char who[256] = "";
            size_t len = 0;
            for (int r = 0; r < nranks && len < sizeof who; ++r)
                if (atomic_load(&q->shm->pid[r]) == 0)
                    len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", len ? ", " : "",
                                            r);
            st = SDNN_ERROR(SDNN_ERR_COMM,
                            "%s (simulated NCCL): %d of %d ranks joined in %.1f s; rank %s never "
                            "came (its process stopped, failed, or was not started)",
                            call, (int)atomic_load(&q->shm->joined), nranks, timeout_s, who);
            break;
        }
        struct timespec t = {0, 1000000L};
        nanosleep(&t, NULL);
    }
    /* Everyone has the segment open: its name can go. */
    if (st == SDNN_OK) shm_unlink(q->shm_name);
    if (st != SDNN_OK) {
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < n; ++i)
            if (comms[i]) {
                comm_free_locked(comms[i]);
                comms[i] = NULL;
            }
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
    }
    return st;
}

void sdnn_dnccl_abort_because(sdnn_dnccl *c, const char *why)
{
    if (!c) return;
    pthread_mutex_lock(&g_mu);
    if (!c->aborted && why && *why) snprintf(c->why, sizeof c->why, "%s", why);
    pthread_mutex_unlock(&g_mu);
    sdnn_dnccl_abort(c);
}

void sdnn_dnccl_abort(sdnn_dnccl *c)
{
    if (!c) return;
    pthread_mutex_lock(&g_mu);
    if (!c->aborted) {
        c->aborted = 1;
        if (c->async == SDNN_OK) {
            c->async = SDNN_ERR_ABORTED;
            snprintf(c->async_msg, sizeof c->async_msg, "communicator of rank %d aborted",
                     c->rank);
        }
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

void sdnn_dnccl_destroy(sdnn_dnccl *c)
{
    if (!c) return;
    pthread_mutex_lock(&g_mu);
    /* As ncclCommDestroy: the queued work first (an aborted one drains). */
    while (c->inflight > 0) pthread_cond_wait(&g_cv, &g_mu);
    comm_free_locked(c);
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

sdnn_status sdnn_dnccl_async_error(sdnn_dnccl *c)
{
    pthread_mutex_lock(&g_mu);
    sdnn_status st = c->async;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", c->async_msg);
    pthread_mutex_unlock(&g_mu);
    if (st == SDNN_OK) return SDNN_OK;
    return SDNN_ERROR(st, "%s", msg);
}

/* ---- queued units ------------------------------------------------------------------ */

static void set_async(sdnn_dnccl *c, sdnn_status st, const char *msg)
{
    if (c->async == SDNN_OK) {
        c->async = st;
        snprintf(c->async_msg, sizeof c->async_msg, "%s", msg);
    }
}

static const char *pending_what(const dop *o, char *buf, size_t len)
{
    if (o->kind == NOP_SEND || o->kind == NOP_RECV)
        snprintf(buf, len, "%s of %zu bytes %s peer %d", op_names[o->kind], o->bytes,
                 o->kind == NOP_SEND ? "to" : "from", o->peer);
    else
        snprintf(buf, len, "%s of %zu floats (call %llu of the world)", op_names[o->kind], o->n,
                 (unsigned long long)o->seq);
    return buf;
}

/* ---- the reduction's arithmetic ------------------------------------------------------ */

static const char *const type_names[] = {"floats", "halves", "bfloat16s"};

size_t sdnn_dnccl_type_bytes(sdnn_dnccl_type t) { return t == SDNN_DNCCL_FLOAT ? 4 : 2; }

static size_t elem_bytes(int t) { return sdnn_dnccl_type_bytes((sdnn_dnccl_type)t); }

static float load16(int t, const void *p, size_t i)
{
    uint16_t h;
    memcpy(&h, (const unsigned char *)p + 2 * i, 2);
    return t == SDNN_DNCCL_HALF ? sdnn_f16_to_f32(h) : sdnn_bf16_to_f32(h);
}

/* a + b rounded to t (nearest even).  The float sum of two binary16 values
 * is exact or within a quarter ulp of binary16 of the larger operand, far
 * from a binary16 tie, so rounding it again is the correctly rounded sum
 * (__hadd); bfloat16 adds in float and rounds, as NCCL's bf16 sum does on
 * devices without a native bf16 add. */
static uint16_t add16(int t, float a, float b)
{
    return t == SDNN_DNCCL_HALF ? sdnn_f32_to_f16(a + b) : sdnn_f32_to_bf16(a + b);
}

/*
 * NCCL's ring for 16-bit types, element by element (so out may alias an
 * input): the buffer is W chunks, chunk c = [c n / W, (c+1) n / W); its
 * reduce-scatter starts at rank c+1, and each of the next ranks c+2, ...,
 * c (mod W) adds its input to the partial sum it received and rounds the
 * result to the type before it passes it on, so rank c holds chunk c's sum
 * after W-1 rounded additions; the all-gather then copies that sum to
 * every rank unchanged.  Floats: ((in0 + in1) + in2) + ... in rank order.
 */
static void reduce_inputs(int t, const void *const *in, int W, size_t n, void *out)
{
    if (t == SDNN_DNCCL_FLOAT) {
        for (size_t i = 0; i < n; ++i) {
            float acc = ((const float *)in[0])[i];
            for (int r = 1; r < W; ++r) acc += ((const float *)in[r])[i];
            ((float *)out)[i] = acc;
        }
        return;
    }
    for (int c = 0; c < W; ++c) {
        const size_t lo = (size_t)c * n / (size_t)W, hi = (size_t)(c + 1) * n / (size_t)W;
        for (size_t i = lo; i < hi; ++i) {
            int r = (c + 1) % W;
            float acc = load16(t, in[r], i);
            uint16_t h = 0;
            memcpy(&h, (const unsigned char *)in[r] + 2 * i, 2);
            for (int s = 1; s < W; ++s) {
                r = (c + 1 + s) % W;
                h = add16(t, acc, load16(t, in[r], i));
                acc = t == SDNN_DNCCL_HALF ? sdnn_f16_to_f32(h) : sdnn_bf16_to_f32(h);
            }
            memcpy((unsigned char *)out + 2 * i, &h, 2);
        }
    }
}

/* Make progress on o (caller holds g_mu); 1 when something moved. */
static int progress(dop *o)
{
    clique *q = o->c->q;
    if (o->done) return 0;
    switch (o->kind) {
    case NOP_SEND:
        if (o->p->consumed) {
            o->done = 1;
            return 1;
        }
        return 0;
    case NOP_RECV:
        for (post *p = q->posts; p; p = p->next)
            if (p->src == o->peer && p->dst == o->c->rank && p->seq == o->seq && !p->cancelled &&
                !p->consumed) {
                if (p->bytes != o->bytes) return -1;
                if (o->bytes) memcpy(o->buf, p->buf, o->bytes);
                p->consumed = 1;
                o->done = 1;
                return 1;
            }
        return 0;
    default: {
        coll *k = o->k;
        const size_t es = elem_bytes(k->dtype);
        if (!k->ready && k->arrived == q->nranks) {
            k->result = malloc((k->n ? k->n : 1) * es);
            if (!k->result) return -2;
            if (k->kind == NOP_ALLREDUCE)
                reduce_inputs(k->dtype, k->in, q->nranks, k->n, k->result);
            else
                memcpy(k->result, k->in[k->root], k->n * es);
            k->ready = 1;
        }
        if (!k->ready) return 0;
        if (k->n) memcpy(o->out, k->result, k->n * es);
        o->done = 1;
        ++k->finished;
        return 1;
    }
    }
}

static void unlink_post(clique *q, post *p)
{
    for (post **pp = &q->posts; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    free(p);
}

static void unlink_coll_if_done(clique *q, coll *k)
{
    if (k->finished < q->nranks) return;
    for (coll **pp = &q->colls; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    free(k->in);
    free(k->result);
    free(k);
}

static coll *coll_slot(clique *q, const dop *o)
{
    for (coll *k = q->colls; k; k = k->next)
        if (k->seq == o->seq) return k;
    coll *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->in = calloc((size_t)q->nranks, sizeof *k->in);
    if (!k->in) {
        free(k);
        return NULL;
    }
    k->seq = o->seq;
    k->kind = o->kind;
    k->root = o->root;
    k->dtype = o->dtype;
    k->n = o->n;
    k->next = q->colls;
    q->colls = k;
    return k;
}

/* ---- operations between processes (the shared memory pipes) ---------------------- */

static shm_pipe *pipe_of(clique *q, int src, int dst)
{
    return &q->pipes[(size_t)src * (size_t)q->nranks + (size_t)dst];
}

/* Move what the pipe allows of x (1 when bytes moved, -1 on a mismatch). */
static int xfer_step(clique *q, int me, xfer *x)
{
    const size_t H = sizeof(shm_msg), total = H + x->bytes;
    shm_pipe *p = x->send ? pipe_of(q, me, x->peer) : pipe_of(q, x->peer, me);
    uint64_t head, tail;
    if (x->send) {
        head = atomic_load_explicit(&p->head, memory_order_relaxed);
        tail = atomic_load_explicit(&p->tail, memory_order_acquire);
    } else {
        head = atomic_load_explicit(&p->head, memory_order_acquire);
        tail = atomic_load_explicit(&p->tail, memory_order_relaxed);
    }
    size_t room = x->send ? SHM_CAP - (size_t)(head - tail) : (size_t)(head - tail);
    size_t want = total - x->off;
    if (want > room) want = room;
    if (want == 0) return 0;
    shm_msg hdr = {x->kind, (uint32_t)me, (uint64_t)x->bytes};
    uint64_t at = x->send ? head : tail;
    for (size_t done = 0; done < want;) {
        size_t pos = (size_t)(at % SHM_CAP), len = SHM_CAP - pos;
        if (len > want - done) len = want - done;
        size_t o = x->off + done;   /* offset in the message */
        for (size_t k = 0; k < len;) {
            size_t piece;
            if (o + k < H) {
                piece = H - (o + k) < len - k ? H - (o + k) : len - k;
                if (x->send) memcpy(p->data + pos + k, (unsigned char *)&hdr + o + k, piece);
                else memcpy((unsigned char *)&x->got + o + k, p->data + pos + k, piece);
            } else {
                piece = len - k;
                size_t d = o + k - H;
                if (x->send) memcpy(p->data + pos + k, x->src + d, piece);
                else memcpy(x->dst + d, p->data + pos + k, piece);
            }
            k += piece;
            /* A receive checks the header once it is whole. */
            if (!x->send && o + k >= H && o + k - piece < H &&
                (x->got.kind != x->kind || x->got.bytes != x->bytes))
                return -1;
        }
        done += len;
        at += len;
    }
    x->off += want;
    if (x->send) atomic_store_explicit(&p->head, head + want, memory_order_release);
    else atomic_store_explicit(&p->tail, tail + want, memory_order_release);
    if (x->off == total) x->done = 1;
    return 1;
}

static void add_xfer(dop *o, int send, int peer, const void *src, void *dst, size_t bytes)
{
    xfer *x = &o->x[o->nx++];
    memset(x, 0, sizeof *x);
    x->send = send;
    x->peer = peer;
    x->kind = (uint32_t)(o->kind == NOP_SEND || o->kind == NOP_RECV ? NOP_SEND : o->kind);
    x->src = src;
    x->dst = dst;
    x->bytes = bytes;
}

/* o's messages (and the allreduce's landing space). */
static sdnn_status plan_xfers(dop *o)
{
    clique *q = o->c->q;
    const int W = q->nranks, me = o->c->rank;
    o->x = calloc((size_t)(2 * W + 1), sizeof *o->x);
    if (!o->x) return SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for an operation");
    switch (o->kind) {
    case NOP_SEND: add_xfer(o, 1, o->peer, o->cbuf, NULL, o->bytes); break;
    case NOP_RECV: add_xfer(o, 0, o->peer, NULL, o->buf, o->bytes); break;
    case NOP_ALLREDUCE: {
        const size_t b = o->n * elem_bytes(o->dtype);
        o->tmp = malloc((size_t)W * b + 1);
        if (!o->tmp) return SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a reduction");
        for (int r = 0; r < W; ++r) {
            if (r == me) continue;
            add_xfer(o, 1, r, o->in, NULL, b);
            add_xfer(o, 0, r, NULL, (unsigned char *)o->tmp + (size_t)r * b, b);
        }
        break;
    }
    default:
        for (int r = 0; r < W; ++r) {
            if (r == me) continue;
            if (me == o->root) add_xfer(o, 1, r, o->out, NULL, o->n * sizeof(float));
            else if (r == o->root) add_xfer(o, 0, r, NULL, o->out, o->n * sizeof(float));
        }
    }
    return SDNN_OK;
}

/* Every rank's input reduced as the in-process world does (reduce_inputs:
 * the same bits on every rank and in both worlds); out may alias in. */
static int finish_allreduce(dop *o)
{
    const int W = o->c->q->nranks, me = o->c->rank;
    const size_t b = o->n * elem_bytes(o->dtype);
    const void **in = malloc((size_t)W * sizeof *in);
    if (!in) return -1;
    for (int r = 0; r < W; ++r) in[r] = r == me ? o->in : (unsigned char *)o->tmp + (size_t)r * b;
    reduce_inputs(o->dtype, in, W, o->n, o->out);
    free(in);
    return 0;
}

/* 1 when an earlier message of the unit, not done yet, uses the pipe of
 * message j of operation i (one pipe carries one message at a time, in
 * the order the calls were made). */
static int pipe_busy(const unit *u, int i, int j)
{
    const dop *o = &u->ops[i];
    const xfer *x = &o->x[j];
    for (int a = 0; a <= i; ++a) {
        const dop *p = &u->ops[a];
        for (int b = 0; b < (a == i ? j : p->nx); ++b) {
            const xfer *y = &p->x[b];
            if (!y->done && y->send == x->send && y->peer == x->peer && p->c == o->c) return 1;
        }
    }
    return 0;
}

/* One unit between processes: every message progresses together (a ring
 * shift in a group cannot deadlock), until done, aborted, or the last
 * resort bound. */
static sdnn_status run_unit_shm(unit *u)
{
    sdnn_status st = SDNN_OK;
    char what[160];
    int silent = 0;
    for (int i = 0; i < u->nops; ++i) silent |= u->ops[i].silent;
    for (int i = 0; i < u->nops && st == SDNN_OK; ++i) st = plan_xfers(&u->ops[i]);
    const double deadline = now_s() + hang_s();
    long nap_ns = 0;
    while (st == SDNN_OK) {
        int all = 1, moved = 0;
        for (int i = 0; i < u->nops && !silent && st == SDNN_OK; ++i) {
            dop *o = &u->ops[i];
            if (o->done) continue;
            int odone = 1;
            for (int j = 0; j < o->nx; ++j) {
                xfer *x = &o->x[j];
                if (x->done) continue;
                if (pipe_busy(u, i, j)) {
                    odone = 0;
                    continue;
                }
                int r = xfer_step(o->c->q, o->c->rank, x);
                if (r < 0) {
                    st = SDNN_ERROR(SDNN_ERR_COMM,
                                    "simulated NCCL, rank %d: %s met %s of %llu bytes from peer "
                                    "%d (the ranks' calls do not match)",
                                    o->c->rank, pending_what(o, what, sizeof what),
                                    x->got.kind < 4 ? op_names[x->got.kind] : "garbage",
                                    (unsigned long long)x->got.bytes, x->peer);
                    break;
                }
                moved |= r;
                odone &= x->done;
            }
            if (st == SDNN_OK && odone) {
                if (o->kind == NOP_ALLREDUCE && finish_allreduce(o) != 0) {
                    st = SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a reduction");
                    break;
                }
                o->done = 1;
                moved = 1;
            }
            all &= o->done;
        }
        if (st != SDNN_OK) break;
        if (!silent && all) break;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < u->nops && st == SDNN_OK; ++i)
            if (u->ops[i].c->aborted)
                st = SDNN_ERROR(SDNN_ERR_COMM,
                                "simulated NCCL, rank %d: %s cancelled: the communicator was "
                                "aborted%s%s",
                                u->ops[i].c->rank, pending_what(&u->ops[i], what, sizeof what),
                                u->ops[i].c->why[0] ? ": " : "", u->ops[i].c->why);
        pthread_mutex_unlock(&g_mu);
        if (st != SDNN_OK) break;
        if (moved) {
            nap_ns = 0;
            continue;
        }
        if (now_s() > deadline) {
            st = SDNN_ERROR(SDNN_ERR_COMM,
                            "simulated NCCL, rank %d: %s still unmatched after %.1f s "
                            "(real NCCL would hang here: the caller's own timeout should "
                            "have aborted the communicator)",
                            u->ops[0].c->rank, pending_what(&u->ops[0], what, sizeof what),
                            hang_s());
            break;
        }
        nap_ns = nap_ns ? nap_ns * 2 : 20000;
        if (nap_ns > 1000000L) nap_ns = 1000000L;
        struct timespec t = {0, nap_ns};
        nanosleep(&t, NULL);
    }
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < u->nops; ++i) {
        dop *o = &u->ops[i];
        if (st != SDNN_OK) set_async(o->c, st, sdnn_last_error());
        --o->c->inflight;
        free(o->x);
        free(o->tmp);
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    free(u->ops);
    free(u);
    return st;
}

static sdnn_status run_unit(void *arg)
{
    unit *u = *(unit **)arg;
    if (u->nops > 0 && u->ops[0].c->q->shm) return run_unit_shm(u);
    sdnn_status st = SDNN_OK;
    char what[160];
    pthread_mutex_lock(&g_mu);
    int silent = 0;
    for (int i = 0; i < u->nops; ++i) silent |= u->ops[i].silent;
    /* Post every send and join every collective before waiting on any. */
    for (int i = 0; i < u->nops && st == SDNN_OK && !silent; ++i) {
        dop *o = &u->ops[i];
        clique *q = o->c->q;
        if (o->kind == NOP_SEND) {
            post *p = calloc(1, sizeof *p);
            if (!p) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a send");
                break;
            }
            p->src = o->c->rank;
            p->dst = o->peer;
            p->seq = o->seq;
            p->buf = o->cbuf;
            p->bytes = o->bytes;
            p->next = q->posts;
            q->posts = p;
            o->p = p;
        } else if (o->kind != NOP_RECV) {
            coll *k = coll_slot(q, o);
            if (!k) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a collective");
                break;
            }
            if (k->kind != o->kind || k->n != o->n || k->root != o->root ||
                k->dtype != o->dtype) {
                st = SDNN_ERROR(SDNN_ERR_COMM,
                                "simulated NCCL, rank %d: %s of %zu %s does not match the "
                                "other ranks' call %llu (%s of %zu %s)",
                                o->c->rank, op_names[o->kind], o->n, type_names[o->dtype],
                                (unsigned long long)o->seq, op_names[k->kind], k->n,
                                type_names[k->dtype]);
                break;
            }
            k->in[o->c->rank] = o->kind == NOP_ALLREDUCE ? o->in : o->out;
            ++k->arrived;
            o->k = k;
        }
    }
    pthread_cond_broadcast(&g_cv);
    double deadline = now_s() + hang_s();
    while (st == SDNN_OK) {
        int all = 1, moved = 0;
        for (int i = 0; i < u->nops && !silent; ++i) {
            int r = progress(&u->ops[i]);
            if (r == -1) {
                dop *o = &u->ops[i];
                st = SDNN_ERROR(SDNN_ERR_COMM,
                                "simulated NCCL, rank %d: ncclRecv of %zu bytes from peer %d "
                                "met a send of another size",
                                o->c->rank, o->bytes, o->peer);
                break;
            }
            if (r == -2) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "simulated NCCL: no memory for a reduction");
                break;
            }
            moved |= r;
            all &= u->ops[i].done;
        }
        if (st != SDNN_OK) break;
        if (!silent && all) break;
        for (int i = 0; i < u->nops; ++i)
            if (u->ops[i].c->aborted) {
                st = SDNN_ERROR(SDNN_ERR_COMM,
                                "simulated NCCL, rank %d: %s cancelled: the communicator was "
                                "aborted%s%s",
                                u->ops[i].c->rank,
                                pending_what(&u->ops[i], what, sizeof what),
                                u->ops[i].c->why[0] ? ": " : "", u->ops[i].c->why);
                break;
            }
        if (st != SDNN_OK) break;
        if (moved) {
            pthread_cond_broadcast(&g_cv);
            continue;
        }
        if (now_s() > deadline) {
            const dop *o = &u->ops[0];
            for (int i = 0; i < u->nops; ++i)
                if (!u->ops[i].done) {
                    o = &u->ops[i];
                    break;
                }
            st = SDNN_ERROR(SDNN_ERR_COMM,
                            "simulated NCCL, rank %d: %s still unmatched after %.1f s "
                            "(real NCCL would hang here: the caller's own timeout should "
                            "have aborted the communicator)",
                            o->c->rank, pending_what(o, what, sizeof what), hang_s());
            break;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 20000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_nsec -= 1000000000L;
            ++t.tv_sec;
        }
        pthread_cond_timedwait(&g_cv, &g_mu, &t);
    }
    /* Withdraw what this unit posted; leave every communicator's state. */
    for (int i = 0; i < u->nops; ++i) {
        dop *o = &u->ops[i];
        clique *q = o->c->q;
        if (o->p) unlink_post(q, o->p);
        if (o->k) {
            if (!o->done) {
                /* Left behind: the others cannot finish it either. */
                o->k->finished = -q->nranks * 4;
            } else {
                unlink_coll_if_done(q, o->k);
            }
        }
        if (st != SDNN_OK) set_async(o->c, st, sdnn_last_error());
        --o->c->inflight;
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    free(u->ops);
    free(u);
    return st;
}

/* The stream failed before the unit's turn: it never runs, and gives its
 * communicators back (their peers' matching parts wait for an abort). */
static void skip_unit(void *arg)
{
    unit *u = *(unit **)arg;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < u->nops; ++i) {
        set_async(u->ops[i].c, SDNN_ERR_COMM,
                  "an operation was skipped: its stream had failed before");
        --u->ops[i].c->inflight;
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    free(u->ops);
    free(u);
}

/* ---- the calls ------------------------------------------------------------------------ */

static sdnn_status flush(dop *ops, int n)
{
    sdnn_status first = SDNN_OK;
    int *taken = calloc((size_t)(n ? n : 1), sizeof *taken);
    if (!taken) return SDNN_ERROR(SDNN_ERR_NOMEM, "ncclGroupEnd (simulated): no memory");
    for (int i = 0; i < n; ++i) {
        if (taken[i]) continue;
        int cnt = 0;
        for (int j = i; j < n; ++j)
            if (!taken[j] && ops[j].ctx == ops[i].ctx && ops[j].stream == ops[i].stream) ++cnt;
        unit *u = calloc(1, sizeof *u);
        dop *uo = calloc((size_t)cnt, sizeof *uo);
        if (!u || !uo) {
            free(u);
            free(uo);
            if (first == SDNN_OK) first = SDNN_ERROR(SDNN_ERR_NOMEM, "ncclGroupEnd: no memory");
            continue;
        }
        int m = 0, silent = 0;
        pthread_mutex_lock(&g_mu);
        for (int j = i; j < n; ++j)
            if (!taken[j] && ops[j].ctx == ops[i].ctx && ops[j].stream == ops[i].stream) {
                taken[j] = 1;
                uo[m] = ops[j];
                sdnn_dnccl *c = uo[m].c;
                ++c->inflight;
                clique *q = c->q;
                if (q->fault == FAULT_SILENT && c->rank == q->fault_rank &&
                    c->units >= q->fault_after)
                    silent = 1;
                ++m;
            }
        for (int j = 0; j < m; ++j) uo[j].silent = silent;
        for (int j = 0; j < m; ++j) ++uo[j].c->units;
        pthread_mutex_unlock(&g_mu);
        u->nops = m;
        u->ops = uo;
        sdnn_status st = sdnn_sim_launch_ex(ops[i].ctx, ops[i].stream,
                                            "ncclGroupEnd (simulated)", run_unit, skip_unit, &u,
                                            sizeof u);
        if (st != SDNN_OK) {
            pthread_mutex_lock(&g_mu);
            for (int j = 0; j < m; ++j) --uo[j].c->inflight;
            pthread_cond_broadcast(&g_cv);
            pthread_mutex_unlock(&g_mu);
            free(uo);
            free(u);
            if (first == SDNN_OK) first = st;
        }
    }
    free(taken);
    return first;
}

sdnn_status sdnn_dnccl_group_start(void)
{
    ++t_depth;
    return SDNN_OK;
}

sdnn_status sdnn_dnccl_group_end(void)
{
    if (t_depth < 1)
        return SDNN_ERROR(SDNN_ERR_COMM, "ncclGroupEnd (simulated): no ncclGroupStart before it");
    if (--t_depth > 0) return SDNN_OK;
    sdnn_status st = flush(t_pend, t_npend);
    free(t_pend);
    t_pend = NULL;
    t_npend = t_cap = 0;
    return st;
}

/* An operation of `kind` on communicator c, queued on ctx's stream; the
 * caller fills in its sizes and buffers. */
static dop new_op(int kind, sdnn_dnccl *c, sdnn_dctx *ctx, int stream)
{
    dop o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.c = c;
    o.ctx = ctx;
    o.stream = stream;
    return o;
}

/* Checks common to every call; assigns the matching sequence numbers. */
static sdnn_status add_op(dop *o)
{
    const char *call = op_names[o->kind];
    sdnn_dnccl *c = o->c;
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "%s (simulated NCCL): no communicator", call);
    if (o->stream < 0 || o->stream > 2 || !o->ctx)
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s (simulated NCCL): no stream", call);
    if (sdnn_dctx_device(o->ctx) != c->device)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s (simulated NCCL): rank %d lives on device %d, its stream on %d", call,
                          c->rank, c->device, sdnn_dctx_device(o->ctx));
    pthread_mutex_lock(&g_mu);
    clique *q = c->q;
    sdnn_status st = SDNN_OK;
    if (c->aborted)
        st = SDNN_ERROR(SDNN_ERR_ABORTED, "%s (simulated NCCL): rank %d's communicator was aborted",
                        call, c->rank);
    else if ((o->kind == NOP_SEND || o->kind == NOP_RECV) && (o->peer < 0 || o->peer >= q->nranks))
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s (simulated NCCL): peer %d of a world of %d", call,
                        o->peer, q->nranks);
    else if (o->kind == NOP_BCAST && (o->root < 0 || o->root >= q->nranks))
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s (simulated NCCL): root %d of a world of %d", call,
                        o->root, q->nranks);
    else if (q->fault == FAULT_ERROR && q->calls++ == q->fault_after)
        st = SDNN_ERROR(SDNN_ERR_COMM,
                        "%s (simulated NCCL): rank %d: injected failure (SDNN_SIM_NCCL_FAULT)",
                        call, c->rank);
    if (st == SDNN_OK) {
        if (o->kind == NOP_SEND) o->seq = c->send_seq[o->peer]++;
        else if (o->kind == NOP_RECV) o->seq = c->recv_seq[o->peer]++;
        else o->seq = c->coll_seq++;
        count_op(c, o);
    }
    pthread_mutex_unlock(&g_mu);
    if (st != SDNN_OK) return st;
    if (t_depth == 0) return flush(o, 1);
    if (t_npend == t_cap) {
        int cap = t_cap ? 2 * t_cap : 16;
        dop *p = realloc(t_pend, (size_t)cap * sizeof *p);
        if (!p) return SDNN_ERROR(SDNN_ERR_NOMEM, "%s (simulated NCCL): no memory", call);
        t_pend = p;
        t_cap = cap;
    }
    t_pend[t_npend++] = *o;
    return SDNN_OK;
}

sdnn_status sdnn_dnccl_send(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const void *buf,
                            size_t bytes, int peer)
{
    dop o = new_op(NOP_SEND, c, ctx, stream);
    o.bytes = bytes;
    o.peer = peer;
    void *h = NULL;
    if (bytes) SDNN_CHECK(sdnn_sim_dptr(ctx, buf, bytes, "ncclSend (simulated)", &h));
    o.cbuf = h;
    return add_op(&o);
}

sdnn_status sdnn_dnccl_recv(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, void *buf, size_t bytes,
                            int peer)
{
    dop o = new_op(NOP_RECV, c, ctx, stream);
    o.bytes = bytes;
    o.peer = peer;
    if (bytes) SDNN_CHECK(sdnn_sim_dptr(ctx, buf, bytes, "ncclRecv (simulated)", &o.buf));
    return add_op(&o);
}

sdnn_status sdnn_dnccl_allreduce_sum_typed(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                           const void *in, void *out, size_t n,
                                           sdnn_dnccl_type t)
{
    if (t != SDNN_DNCCL_FLOAT && t != SDNN_DNCCL_HALF && t != SDNN_DNCCL_BF16)
        return SDNN_ERROR(SDNN_ERR_INVALID, "ncclAllReduce (simulated): element type %d", (int)t);
    dop o = new_op(NOP_ALLREDUCE, c, ctx, stream);
    o.n = n;
    o.dtype = (int)t;
    const size_t b = n * elem_bytes(o.dtype);
    void *h;
    SDNN_CHECK(sdnn_sim_dptr(ctx, in, b, "ncclAllReduce (simulated)", &h));
    o.in = h;
    SDNN_CHECK(sdnn_sim_dptr(ctx, out, b, "ncclAllReduce (simulated)", &h));
    o.out = h;
    return add_op(&o);
}

sdnn_status sdnn_dnccl_allreduce_sum(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const float *in,
                                     float *out, size_t n)
{
    return sdnn_dnccl_allreduce_sum_typed(c, ctx, stream, in, out, n, SDNN_DNCCL_FLOAT);
}

sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf, size_t n,
                                 int root)
{
    dop o = new_op(NOP_BCAST, c, ctx, stream);
    o.n = n;
    o.root = root;
    void *h;
    SDNN_CHECK(sdnn_sim_dptr(ctx, buf, n * sizeof(float), "ncclBroadcast (simulated)", &h));
    o.out = h;
    return add_op(&o);
}
