/*
 * comm_mpi: the backend between processes (backend=mpi).  One MPI rank per
 * process, started by mpirun; each process may hold several local buffers
 * (replica threads).  The backend is hierarchical: a process first averages
 * its local buffers with sdnn_mean_buffers (fp32, index order), then the
 * processes average those means.  The mean of the means is the mean of all
 * buffers only when every process holds the same number of them, so the
 * first call (and any call that changes nin) checks that with an allreduce
 * and refuses otherwise.
 *
 * Plain allreduce_mean: the bytes are carried by our own ring, not by
 * MPI_Allreduce (which reached ~50-60% of a shaped link): reduce-scatter
 * then all-gather over the P processes, every chunk cut into segments
 * (SDNN_MPI_SEGMENT_KB, default 60 KiB) with up to MP_DEPTH receives and
 * MP_DEPTH sends in flight, so a segment of step s+1 leaves while step s is
 * still arriving.  Segments stay below OpenMPI's TCP eager limit (64 KiB):
 * a larger message waits for the receiver's go-ahead, and over TCP that
 * small reply queues behind the megabytes the receiver is itself sending
 * the other way round the ring; with 256 KiB segments a shaped 1 Gbit/s
 * link carried ~55%, with 60 KiB ~92% (scripts/netlab.sh).
 *
 * Chunks are sdnn_ring_chunk(n, 1, P, c); chunk c is summed in the fixed
 * order c, c+1, ..., c-1 (mod P), in fp32, and the owner (rank c-1)
 * multiplies by 1.0f/P: the same arithmetic as collective.c's ring with the
 * identity codec, so the plain path equals the local backend's coded
 * "none" ring over P ranks holding the processes' means bit for bit, and
 * every process ends with the same bits.
 *
 * Coded allreduce_mean_coded: collective.c's sdnn_coded_allreduce_mean with
 * each PROCESS one rank of the ring (its local buffers averaged in fp32
 * first) over an MPI transport whose shifts are cut into the same eager
 * segments.  The local backend instead makes every
 * replica a rank.  With one buffer per process the two agree bit for bit;
 * with nin > 1 per process the rings differ (P ranks of local means vs
 * P x nin ranks, other encode points and summation order), so the
 * reference for MPI is the local backend over P ranks that hold the
 * processes' means.
 *
 * Threads: MPI_THREAD_SERIALIZED (the exchange's comm thread makes the
 * collectives, the main thread init, broadcast, barrier and close; never
 * two at once).  A process-wide mutex serialises every MPI call of this
 * file, so two handles used from two threads stay legal too.
 *
 * Waits: every MPI operation is nonblocking and polled (spin, then sleeps
 * growing to 1 ms so a waiting comm thread leaves the core to the replica
 * threads) against a deadline of timeout_s without progress; the message
 * names the peer that did not answer.  MPI_ERRORS_RETURN is set on
 * MPI_COMM_WORLD and on our duplicate of it, so MPI failures come back as
 * codes.  After a failure the handle refuses every call, and its buffers
 * are never freed (MPI may still write into a cancelled receive).
 *
 * MPI is initialised by the first open unless the program did it; then an
 * on_exit handler finalises it when the process exits with status 0, no
 * collective failed and every process reaches a bounded barrier.
 * Otherwise it exits without MPI_Finalize and mpirun ends the job.
 */
#include "comm.h"

#if SDNN_MPI

#include "clock.h"
#include "collective.h"

#include <errno.h>
#include <mpi.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    MP_DEPTH = 16,           /* segments in flight per direction */
    MP_TAG_SPAN = 16384,     /* ring tags cycle through 0..MP_TAG_SPAN-1 */
    MP_TAG_CODED = 20000,    /* the coded ring's shifts */
    MP_CDEPTH = 8,           /* central host: segments in flight per peer */
    MP_TAG_CENTRAL = 24000,  /* central host: tags MP_TAG_CENTRAL + segment % 4096 */
};
/* Below OpenMPI's TCP eager limit (64 KiB with headers), see the top. */
#define MP_SEGMENT_DEFAULT_KB 60
#define MP_BCAST_FLOATS ((size_t)1 << 20)
#define MP_SPIN_S 200e-6
#define MP_NAP_MAX_NS 1000000L

/* Every MPI call of this file holds mp_lock. */
static pthread_mutex_t mp_lock = PTHREAD_MUTEX_INITIALIZER;
static int mp_any_failed;         /* a collective failed: no MPI_Finalize */
static double mp_exit_timeout = SDNN_COMM_TIMEOUT_S;  /* of the latest call */

typedef struct mp_impl {
    MPI_Comm comm;
    int rank, size, left, right;
    int failed;
    int nin;                      /* agreed local buffers, 0 before the first call */
    double timeout;               /* of the call in progress */
    size_t seg;                   /* floats per ring segment */
    int agree[4];                 /* the nin check's buffers (MPI owns them while it runs) */
    float *work;                  /* local mean, then the ring's buffer */
    size_t work_n;
    const float **inoff;          /* the local buffers at a segment's offset */
    int inoff_n;
    float *slots;                 /* MP_DEPTH receive segments */
    unsigned char *scratch;       /* the coded ring's */
    size_t scratch_len;
    float *bounce;                /* broadcast */
    float *cslots;                /* central host, process 0: (P-1) x MP_CDEPTH segments */
    size_t cslots_len;            /* bytes */
    MPI_Request *creq;            /* central host: 2 (P-1) MP_CDEPTH requests */
    int *crecv;                   /* ... and which of them are receives */
    sdnn_transport t;
    struct mp_impl *next_failed;
} mp_impl;

/* Failed handles stay here, reachable and never freed. */
static mp_impl *mp_failed_list;

/* ---- waiting ------------------------------------------------------------- */

typedef struct mp_idle {
    double since;
    long nap_ns;
} mp_idle;

static void idle_reset(mp_idle *w)
{
    w->since = sdnn_now_s();
    w->nap_ns = 0;
}

/* Called when a poll moved nothing: 0 once `timeout` seconds passed since
 * the last progress, else 1 after spinning or a short sleep. */
static int idle_wait(mp_idle *w, double timeout)
{
    const double idle = sdnn_now_s() - w->since;
    if (idle > timeout) return 0;
    if (idle < MP_SPIN_S) return 1;
    w->nap_ns = w->nap_ns ? w->nap_ns * 2 : 10000;
    if (w->nap_ns > MP_NAP_MAX_NS) w->nap_ns = MP_NAP_MAX_NS;
    struct timespec ts = {0, w->nap_ns};
    nanosleep(&ts, NULL);
    return 1;
}

static const char *mp_errstr(int code, char *buf)
{
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, 32, "MPI error %d", code);
    return buf;
}

/* Give up on point-to-point requests (NULL entries are skipped): cancel
 * receives, let sends go; MPI keeps the buffers, so the handle does too. */
static void drop_requests(MPI_Request *req, const int *is_recv, int n)
{
    for (int i = 0; i < n; ++i) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        if (is_recv[i]) MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

static void mark_failed(mp_impl *M)
{
    M->failed = 1;
    mp_any_failed = 1;
}

/* Wait for one nonblocking collective (nothing to cancel: MPI forbids it). */
static sdnn_status wait_collective(mp_impl *M, MPI_Request *req, const char *what)
{
    mp_idle w;
    idle_reset(&w);
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char buf[MPI_MAX_ERROR_STRING];
            mark_failed(M);
            return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s failed: %s", M->rank, what,
                              mp_errstr(rc, buf));
        }
        if (done) return SDNN_OK;
        if (!idle_wait(&w, M->timeout)) {
            mark_failed(M);
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "mpi rank %d: %s: waited %.1f s and at least one of the %d "
                              "processes did not join (stopped, stuck, or waiting elsewhere); "
                              "timeout %.1f s",
                              M->rank, what, sdnn_now_s() - w.since, M->size, M->timeout);
        }
    }
}

static sdnn_status usable(const mp_impl *M)
{
    if (M->failed)
        return SDNN_ERROR(SDNN_ERR_ABORTED,
                          "mpi rank %d: an earlier collective on this handle failed; close it",
                          M->rank);
    return SDNN_OK;
}

static sdnn_status grow(void **p, size_t *have, size_t need, const char *what, int rank)
{
    if (need <= *have) return SDNN_OK;
    void *q = realloc(*p, need);
    if (!q)
        return SDNN_ERROR(SDNN_ERR_NOMEM, "mpi rank %d: no memory for %s (%zu B)", rank, what,
                          need);
    *p = q;
    *have = need;
    return SDNN_OK;
}

static sdnn_status grow_work(mp_impl *M, size_t n)
{
    size_t have = M->work_n * sizeof(float);
    void *p = M->work;
    SDNN_CHECK(grow(&p, &have, n * sizeof(float), "the ring buffer", M->rank));
    M->work = p;
    M->work_n = have / sizeof(float);
    return SDNN_OK;
}

/* Every process must hold the same number of local buffers. */
static sdnn_status agree_nin(mp_impl *M, int nin)
{
    if (M->nin == nin) return SDNN_OK;
    M->agree[0] = nin;
    M->agree[1] = -nin;
    MPI_Request req;
    int rc = MPI_Iallreduce(M->agree, M->agree + 2, 2, MPI_INT, MPI_MAX, M->comm, &req);
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Iallreduce: %s", M->rank,
                          mp_errstr(rc, buf));
    }
    SDNN_CHECK(wait_collective(M, &req, "checking that every process holds as many buffers"));
    const int hi = M->agree[2], lo = -M->agree[3];
    if (hi != lo)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "mpi rank %d: the processes hold between %d and %d local buffers "
                          "(this one %d): the mean of the processes' means is the mean of all "
                          "buffers only when every process holds as many (give every process "
                          "the same replica count)",
                          M->rank, lo, hi, nin);
    M->nin = nin;
    return SDNN_OK;
}

/* ---- the plain ring -------------------------------------------------------- */

static int mod(int a, int m) { return ((a % m) + m) % m; }

typedef struct ring {
    size_t n, seg;
    int P, r;
    long nseg, total;             /* segments per chunk; messages = 2(P-1) nseg */
} ring;

/* Message m is step m / nseg, segment m % nseg.  Steps 0..P-2 reduce-scatter
 * (rank r sends chunk r-t, receives r-t-1), steps P-1.. all-gather (s = t-P+1:
 * sends r+1-s, receives r-s). */
static void ring_piece(const ring *g, long m, int recv, size_t *lo, size_t *len)
{
    const int t = (int)(m / g->nseg);
    const long j = m % g->nseg;
    int c;
    if (t < g->P - 1) c = recv ? mod(g->r - t - 1, g->P) : mod(g->r - t, g->P);
    else c = recv ? mod(g->r - (t - g->P + 1), g->P) : mod(g->r + 1 - (t - g->P + 1), g->P);
    size_t clo, clen;
    sdnn_ring_chunk(g->n, 1, g->P, c, &clo, &clen);
    size_t a = (size_t)j * g->seg, b;
    if (a > clen) a = clen;
    b = a + g->seg < clen ? a + g->seg : clen;
    *lo = clo + a;
    *len = b - a;
}

/* Reduce-scatter message m arrived in `slot`: add the own values, and on
 * the last step (the chunk this rank owns) scale to the mean. */
static void ring_reduce(float *restrict work, const float *restrict slot, size_t len,
                        int last, float inv)
{
    if (last)
        for (size_t i = 0; i < len; ++i) work[i] = (slot[i] + work[i]) * inv;
    else
        for (size_t i = 0; i < len; ++i) work[i] = slot[i] + work[i];
}

/* work[lo, lo+len) = the local mean of that piece of the inputs. */
static void ring_load(mp_impl *M, const float *const *in, int nin, size_t lo, size_t len)
{
    for (int k = 0; k < nin; ++k) M->inoff[k] = in[k] + lo;
    sdnn_mean_buffers(M->inoff, nin, M->work + lo, len);
}

/* The ring over the processes.  The local mean is loaded into work one
 * segment at a time where the ring first needs it (the sends of step 0,
 * the receives of the reduce-scatter), and each segment's final mean goes
 * to out as soon as it is known, so neither copy waits for the link.
 * out may alias in[0]: a segment of out is written only after the same
 * segment was loaded. */
static sdnn_status ring_allreduce(mp_impl *M, size_t n, const float *const *in, int nin,
                                  float *out)
{
    ring g = {n, M->seg, M->size, M->rank, 0, 0};
    size_t lo0, per;
    sdnn_ring_chunk(n, 1, g.P, 0, &lo0, &per);
    g.nseg = (long)((per + g.seg - 1) / g.seg);
    if (g.nseg < 1) g.nseg = 1;
    g.total = 2L * (g.P - 1) * g.nseg;
    const long rs_end = (long)(g.P - 1) * g.nseg;   /* first all-gather message */
    const float inv = 1.0f / (float)g.P;

    MPI_Request req[2 * MP_DEPTH];      /* [0, D) receives, [D, 2D) sends */
    int is_recv[2 * MP_DEPTH];
    for (int i = 0; i < 2 * MP_DEPTH; ++i) {
        req[i] = MPI_REQUEST_NULL;
        is_recv[i] = i < MP_DEPTH;
    }
    MPI_Request *rreq = req, *sreq = req + MP_DEPTH;
    long rposted = 0, rdone = 0, sposted = 0, sdone = 0;
    mp_idle w;
    idle_reset(&w);
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_SUCCESS;
    const char *what = "";
    long bad = 0;

    while (rdone < g.total || sdone < g.total) {
        int moved = 0;
        /* Receives: a free slot, and in the all-gather the region's
         * reduce-scatter send (message m - rs_end) must be done. */
        while (rposted < g.total && rposted - rdone < MP_DEPTH &&
               (rposted < rs_end || sdone > rposted - rs_end)) {
            size_t lo, len;
            ring_piece(&g, rposted, 1, &lo, &len);
            float *dst = rposted < rs_end ? M->slots + (size_t)(rposted % MP_DEPTH) * g.seg
                                          : M->work + lo;
            rc = MPI_Irecv(dst, (int)len, MPI_FLOAT, M->left, (int)(rposted % MP_TAG_SPAN),
                           M->comm, &rreq[rposted % MP_DEPTH]);
            if (rc != MPI_SUCCESS) { what = "MPI_Irecv"; bad = rposted; goto fail; }
            ++rposted;
            moved = 1;
        }
        /* Sends: step 0 is the local mean; later ones need the segment
         * one step back received (and reduced). */
        while (sposted < g.total && sposted - sdone < MP_DEPTH &&
               (sposted < g.nseg || sposted - g.nseg < rdone)) {
            size_t lo, len;
            ring_piece(&g, sposted, 0, &lo, &len);
            if (sposted < g.nseg) ring_load(M, in, nin, lo, len);
            rc = MPI_Isend(M->work + lo, (int)len, MPI_FLOAT, M->right,
                           (int)(sposted % MP_TAG_SPAN), M->comm, &sreq[sposted % MP_DEPTH]);
            if (rc != MPI_SUCCESS) { what = "MPI_Isend"; bad = sposted; goto fail; }
            ++sposted;
            moved = 1;
        }
        if (rdone < rposted) {
            int done = 0;
            MPI_Status status;
            rc = MPI_Test(&rreq[rdone % MP_DEPTH], &done, &status);
            if (rc != MPI_SUCCESS) { what = "receive"; bad = rdone; goto fail; }
            if (done) {
                size_t lo, len;
                int got = -1;
                ring_piece(&g, rdone, 1, &lo, &len);
                MPI_Get_count(&status, MPI_FLOAT, &got);
                if (got != (int)len) {
                    mark_failed(M);
                    drop_requests(req, is_recv, 2 * MP_DEPTH);
                    return SDNN_ERROR(SDNN_ERR_COMM,
                                      "mpi rank %d: rank %d sent %d floats for ring step %ld "
                                      "where %zu were expected: the processes called allreduce "
                                      "with different sizes",
                                      M->rank, M->left, got, rdone / g.nseg + 1, len);
                }
                if (rdone < rs_end) {
                    const int last = rdone / g.nseg == g.P - 2;
                    ring_load(M, in, nin, lo, len);
                    ring_reduce(M->work + lo, M->slots + (size_t)(rdone % MP_DEPTH) * g.seg, len,
                                last, inv);
                    if (last) memcpy(out + lo, M->work + lo, len * sizeof(float));
                } else {
                    memcpy(out + lo, M->work + lo, len * sizeof(float));
                }
                ++rdone;
                moved = 1;
            }
        }
        if (sdone < sposted) {
            int done = 0;
            rc = MPI_Test(&sreq[sdone % MP_DEPTH], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { what = "send"; bad = sdone; goto fail; }
            if (done) {
                ++sdone;
                moved = 1;
            }
        }
        if (moved) {
            idle_reset(&w);
            continue;
        }
        if (!idle_wait(&w, M->timeout)) {
            /* Missing data from the left, or the right not taking ours. */
            const int from_left = rdone < rposted;
            const long m = from_left ? rdone : sdone;
            mark_failed(M);
            drop_requests(req, is_recv, 2 * MP_DEPTH);
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "mpi rank %d: waited %.1f s for rank %d, which did not answer "
                              "(%s ring step %ld of %ld, segment %ld of %ld); it stopped, is "
                              "stuck, or waits itself for a rank that did (timeout %.1f s)",
                              M->rank, sdnn_now_s() - w.since, from_left ? M->left : M->right,
                              from_left ? "no data from it for" : "it took none of our data for",
                              m / g.nseg + 1, 2L * (g.P - 1), m % g.nseg + 1, g.nseg, M->timeout);
        }
    }
    return SDNN_OK;

fail:
    mark_failed(M);
    drop_requests(req, is_recv, 2 * MP_DEPTH);
    return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s of ring step %ld (peer rank %d) failed: %s",
                      M->rank, what, bad / g.nseg + 1,
                      strcmp(what, "MPI_Irecv") == 0 || strcmp(what, "receive") == 0 ? M->left
                                                                                       : M->right,
                      mp_errstr(rc, ebuf));
}

/* ---- the central host (stock mode) ----------------------------------------- */

/* Segment j of a buffer of n floats cut into pieces of seg: [lo, lo+len). */
static void seg_piece(size_t n, size_t seg, long j, size_t *lo, size_t *len)
{
    *lo = (size_t)j * seg;
    *len = n - *lo < seg ? n - *lo : seg;
}

/* Process 0: for every segment j, receives from every peer (MP_CDEPTH
 * segments ahead per peer), adds them to its own values in rank order as
 * they come (work = buf0 + buf1 + ... + buf(P-1)), scales by (float)(1.0/P)
 * and sends the result to every peer while later segments still arrive, so
 * its link carries (P-1) x n floats each way at once. */
static sdnn_status central_root(mp_impl *M, size_t n)
{
    const int P = M->size, D = MP_CDEPTH, npeer = P - 1;
    const size_t seg = M->seg;
    const long nseg = (long)((n + seg - 1) / seg);
    const float scale = (float)(1.0 / P);
    MPI_Request *rreq = M->creq, *sreq = M->creq + (size_t)npeer * D;
    long rposted = 0, summed = 0, sdone = 0;
    int cpeer = 1, speer = 1;        /* next peer to add (segment summed), to finish (sdone) */
    mp_idle w;
    idle_reset(&w);
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_SUCCESS, peer = 0;
    const char *what = "";
    while (summed < nseg || sdone < nseg) {
        int moved = 0;
        while (rposted < nseg && rposted - summed < D) {
            size_t lo, len;
            seg_piece(n, seg, rposted, &lo, &len);
            for (int p = 1; p < P; ++p) {
                const size_t k = (size_t)(p - 1) * D + (size_t)(rposted % D);
                rc = MPI_Irecv(M->cslots + k * seg, (int)len, MPI_FLOAT, p,
                               MP_TAG_CENTRAL + (int)(rposted % 4096), M->comm, &rreq[k]);
                if (rc != MPI_SUCCESS) { what = "MPI_Irecv"; peer = p; goto fail; }
            }
            ++rposted;
            moved = 1;
        }
        /* Add what arrived for segment `summed`, in rank order; the result
         * leaves once the sends of segment summed - D are done. */
        while (summed < rposted && summed - sdone < D) {
            size_t lo, len;
            seg_piece(n, seg, summed, &lo, &len);
            const size_t k = (size_t)(cpeer - 1) * D + (size_t)(summed % D);
            int done = 0;
            MPI_Status status;
            rc = MPI_Test(&rreq[k], &done, &status);
            if (rc != MPI_SUCCESS) { what = "receive"; peer = cpeer; goto fail; }
            if (!done) break;
            int got = -1;
            MPI_Get_count(&status, MPI_FLOAT, &got);
            if (got != (int)len) {
                mark_failed(M);
                drop_requests(M->creq, M->crecv, 2 * npeer * D);
                return SDNN_ERROR(SDNN_ERR_COMM,
                                  "mpi rank 0: rank %d sent %d floats for central segment %ld "
                                  "where %zu were expected: the processes averaged different "
                                  "sizes",
                                  cpeer, got, summed + 1, len);
            }
            float *restrict acc = M->work + lo;
            const float *restrict x = M->cslots + k * seg;
            for (size_t i = 0; i < len; ++i) acc[i] += x[i];
            moved = 1;
            if (++cpeer < P) continue;
            for (size_t i = 0; i < len; ++i) acc[i] *= scale;
            for (int p = 1; p < P; ++p) {
                const size_t ks = (size_t)(p - 1) * D + (size_t)(summed % D);
                rc = MPI_Isend(acc, (int)len, MPI_FLOAT, p, MP_TAG_CENTRAL + (int)(summed % 4096),
                               M->comm, &sreq[ks]);
                if (rc != MPI_SUCCESS) { what = "MPI_Isend"; peer = p; goto fail; }
            }
            cpeer = 1;
            ++summed;
        }
        while (sdone < summed) {
            const size_t k = (size_t)(speer - 1) * D + (size_t)(sdone % D);
            int done = 0;
            rc = MPI_Test(&sreq[k], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { what = "send"; peer = speer; goto fail; }
            if (!done) break;
            moved = 1;
            if (++speer < P) continue;
            speer = 1;
            ++sdone;
        }
        if (moved) {
            idle_reset(&w);
            continue;
        }
        if (!idle_wait(&w, M->timeout)) {
            const int recv = summed < rposted && summed - sdone < D;
            mark_failed(M);
            drop_requests(M->creq, M->crecv, 2 * npeer * D);
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "mpi rank 0: waited %.1f s for rank %d, which did not answer (%s "
                              "for segment %ld of %ld of the central average); it stopped, is "
                              "stuck, or waits elsewhere (timeout %.1f s)",
                              sdnn_now_s() - w.since, recv ? cpeer : speer,
                              recv ? "no data from it" : "it took none of the average",
                              (recv ? summed : sdone) + 1, nseg, M->timeout);
        }
    }
    return SDNN_OK;

fail:
    mark_failed(M);
    drop_requests(M->creq, M->crecv, 2 * npeer * D);
    return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank 0: %s of the central average with rank %d: %s", what,
                      peer, mp_errstr(rc, ebuf));
}

/* Any other process: its segments to process 0 (MP_CDEPTH in flight), and
 * the average of each back into the same place once that segment's send
 * is done. */
static sdnn_status central_leaf(mp_impl *M, size_t n)
{
    const int D = MP_CDEPTH;
    const size_t seg = M->seg;
    const long nseg = (long)((n + seg - 1) / seg);
    MPI_Request *rreq = M->creq, *sreq = M->creq + D;
    long rposted = 0, rdone = 0, sposted = 0, sdone = 0;
    mp_idle w;
    idle_reset(&w);
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_SUCCESS;
    const char *what = "";
    while (rdone < nseg || sdone < nseg) {
        int moved = 0;
        while (sposted < nseg && sposted - sdone < D) {
            size_t lo, len;
            seg_piece(n, seg, sposted, &lo, &len);
            rc = MPI_Isend(M->work + lo, (int)len, MPI_FLOAT, 0,
                           MP_TAG_CENTRAL + (int)(sposted % 4096), M->comm, &sreq[sposted % D]);
            if (rc != MPI_SUCCESS) { what = "MPI_Isend"; goto fail; }
            ++sposted;
            moved = 1;
        }
        while (sdone < sposted) {
            int done = 0;
            rc = MPI_Test(&sreq[sdone % D], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) { what = "send"; goto fail; }
            if (!done) break;
            ++sdone;
            moved = 1;
        }
        while (rposted < sdone && rposted - rdone < D) {
            size_t lo, len;
            seg_piece(n, seg, rposted, &lo, &len);
            rc = MPI_Irecv(M->work + lo, (int)len, MPI_FLOAT, 0,
                           MP_TAG_CENTRAL + (int)(rposted % 4096), M->comm, &rreq[rposted % D]);
            if (rc != MPI_SUCCESS) { what = "MPI_Irecv"; goto fail; }
            ++rposted;
            moved = 1;
        }
        while (rdone < rposted) {
            size_t lo, len;
            seg_piece(n, seg, rdone, &lo, &len);
            int done = 0;
            MPI_Status status;
            rc = MPI_Test(&rreq[rdone % D], &done, &status);
            if (rc != MPI_SUCCESS) { what = "receive"; goto fail; }
            if (!done) break;
            int got = -1;
            MPI_Get_count(&status, MPI_FLOAT, &got);
            if (got != (int)len) {
                mark_failed(M);
                drop_requests(M->creq, M->crecv, 2 * D);
                return SDNN_ERROR(SDNN_ERR_COMM,
                                  "mpi rank %d: rank 0 sent %d floats for central segment %ld "
                                  "where %zu were expected: the processes averaged different "
                                  "sizes",
                                  M->rank, got, rdone + 1, len);
            }
            ++rdone;
            moved = 1;
        }
        if (moved) {
            idle_reset(&w);
            continue;
        }
        if (!idle_wait(&w, M->timeout)) {
            mark_failed(M);
            drop_requests(M->creq, M->crecv, 2 * D);
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "mpi rank %d: waited %.1f s for rank 0, the central host, which did "
                              "not answer (%s, segment %ld of %ld); it stopped, is stuck, or "
                              "waits for a rank that did (timeout %.1f s)",
                              M->rank, sdnn_now_s() - w.since,
                              sdone < sposted ? "it took none of our weights"
                                              : "no average came back",
                              (sdone < sposted ? sdone : rdone) + 1, nseg, M->timeout);
        }
    }
    return SDNN_OK;

fail:
    mark_failed(M);
    drop_requests(M->creq, M->crecv, 2 * D);
    return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s of the central average with rank 0: %s",
                      M->rank, what, mp_errstr(rc, ebuf));
}

/* The request arrays (and process 0's receive segments) for a world of
 * M->size processes; allocated once. */
static sdnn_status central_buffers(mp_impl *M)
{
    const size_t npeer = M->rank == 0 ? (size_t)M->size - 1 : 1;
    if (!M->creq) {
        const size_t nreq = 2 * npeer * MP_CDEPTH;
        M->creq = malloc(nreq * sizeof *M->creq);
        M->crecv = malloc(nreq * sizeof *M->crecv);
        if (!M->creq || !M->crecv) {
            free(M->creq);
            free(M->crecv);
            M->creq = NULL;
            M->crecv = NULL;
            return SDNN_ERROR(SDNN_ERR_NOMEM, "mpi rank %d: no memory for the central average",
                              M->rank);
        }
        for (size_t i = 0; i < nreq; ++i) {
            M->creq[i] = MPI_REQUEST_NULL;
            M->crecv[i] = i < nreq / 2;
        }
    }
    if (M->rank != 0) return SDNN_OK;
    void *p = M->cslots;
    SDNN_CHECK(grow(&p, &M->cslots_len, npeer * MP_CDEPTH * M->seg * sizeof(float),
                    "the central average's segments", M->rank));
    M->cslots = p;
    return SDNN_OK;
}

/* ---- the coded ring's transport -------------------------------------------- */

/* One hop of collective.c's ring: slen bytes to the right, rlen from the
 * left, cut into segments like the plain ring (eager messages, see the
 * top), MP_DEPTH of each in flight. */
static sdnn_status mp_shift(sdnn_transport *t, const void *send, size_t slen, void *recv,
                            size_t rlen)
{
    mp_impl *M = t->impl;
    const size_t piece = M->seg * sizeof(float);
    const long ns = slen ? (long)((slen + piece - 1) / piece) : 1;
    const long nr = rlen ? (long)((rlen + piece - 1) / piece) : 1;
    MPI_Request req[2 * MP_DEPTH];      /* [0, D) receives, [D, 2D) sends */
    int is_recv[2 * MP_DEPTH];
    for (int i = 0; i < 2 * MP_DEPTH; ++i) {
        req[i] = MPI_REQUEST_NULL;
        is_recv[i] = i < MP_DEPTH;
    }
    MPI_Request *rreq = req, *sreq = req + MP_DEPTH;
    long rposted = 0, rdone = 0, sposted = 0, sdone = 0;
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_SUCCESS;
    mp_idle w;
    idle_reset(&w);
    while (rdone < nr || sdone < ns) {
        int moved = 0;
        while (rposted < nr && rposted - rdone < MP_DEPTH) {
            const size_t off = (size_t)rposted * piece;
            const size_t len = rlen - off < piece ? rlen - off : piece;
            rc = MPI_Irecv((char *)recv + off, (int)len, MPI_BYTE, M->left, MP_TAG_CODED, M->comm,
                           &rreq[rposted % MP_DEPTH]);
            if (rc != MPI_SUCCESS) goto fail;
            ++rposted;
            moved = 1;
        }
        while (sposted < ns && sposted - sdone < MP_DEPTH) {
            const size_t off = (size_t)sposted * piece;
            const size_t len = slen - off < piece ? slen - off : piece;
            rc = MPI_Isend((const char *)send + off, (int)len, MPI_BYTE, M->right, MP_TAG_CODED,
                           M->comm, &sreq[sposted % MP_DEPTH]);
            if (rc != MPI_SUCCESS) goto fail;
            ++sposted;
            moved = 1;
        }
        if (rdone < rposted) {
            int done = 0;
            MPI_Status status;
            rc = MPI_Test(&rreq[rdone % MP_DEPTH], &done, &status);
            if (rc != MPI_SUCCESS) goto fail;
            if (done) {
                const size_t off = (size_t)rdone * piece;
                const size_t len = rlen - off < piece ? rlen - off : piece;
                int got = -1;
                MPI_Get_count(&status, MPI_BYTE, &got);
                if (got != (int)len) {
                    mark_failed(M);
                    drop_requests(req, is_recv, 2 * MP_DEPTH);
                    return SDNN_ERROR(SDNN_ERR_COMM,
                                      "mpi rank %d: rank %d sent %d B where %zu were expected: "
                                      "the processes called the coded allreduce with different "
                                      "sizes or codecs",
                                      M->rank, M->left, got, len);
                }
                ++rdone;
                moved = 1;
            }
        }
        if (sdone < sposted) {
            int done = 0;
            rc = MPI_Test(&sreq[sdone % MP_DEPTH], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) goto fail;
            if (done) {
                ++sdone;
                moved = 1;
            }
        }
        if (moved) {
            idle_reset(&w);
            continue;
        }
        if (!idle_wait(&w, M->timeout)) {
            const int from_left = rdone < rposted;
            mark_failed(M);
            drop_requests(req, is_recv, 2 * MP_DEPTH);
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "mpi rank %d: waited %.1f s for rank %d, which did not answer "
                              "(%s in the compressed ring); it stopped, is stuck, or waits "
                              "itself for a rank that did (timeout %.1f s)",
                              M->rank, sdnn_now_s() - w.since, from_left ? M->left : M->right,
                              from_left ? "no data from it" : "it took none of our data",
                              M->timeout);
        }
    }
    return SDNN_OK;

fail:
    mark_failed(M);
    drop_requests(req, is_recv, 2 * MP_DEPTH);
    return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: compressed ring shift with ranks %d/%d: %s",
                      M->rank, M->left, M->right, mp_errstr(rc, ebuf));
}

static const sdnn_transport_ops mp_transport = {.shift = mp_shift};

/* ---- init, exit ------------------------------------------------------------ */

static int mp_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static int mp_available(void) { return mp_launched(); }

static const char *mp_unavailable_reason(void)
{
    return "this process was not started by mpirun (mpirun -np N ./darknet ...)";
}

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown level";
    }
}

/* Finalise only after a clean exit that every process reaches; after a
 * failure (or a non-zero exit) MPI_Finalize could wait for a process that
 * is gone, and mpirun ends the job anyway. */
static void mp_at_exit(int status, void *arg)
{
    (void)arg;
    if (pthread_mutex_trylock(&mp_lock) != 0) return;   /* a thread is inside MPI */
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized && status == 0 && !mp_any_failed) {
        MPI_Request req;
        mp_impl probe = {.rank = -1, .size = 0, .timeout = mp_exit_timeout};
        MPI_Comm_rank(MPI_COMM_WORLD, &probe.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &probe.size);
        if (MPI_Ibarrier(MPI_COMM_WORLD, &req) == MPI_SUCCESS &&
            wait_collective(&probe, &req, "the barrier before MPI_Finalize") == SDNN_OK) {
#if defined(__SANITIZE_ADDRESS__)
            /* MPI_Finalize unloads OpenMPI's components, after which the
             * check at exit can no longer tell their leaks from ours
             * (tests/lsan.supp names OpenMPI's libraries): check now. */
            __lsan_do_leak_check();
#endif
            MPI_Finalize();
        } else
            fprintf(stderr, "scalednn: mpi rank %d exits without MPI_Finalize: %s\n", probe.rank,
                    sdnn_last_error());
    }
    pthread_mutex_unlock(&mp_lock);
}

static size_t env_segment_floats(void)
{
    const char *s = getenv("SDNN_MPI_SEGMENT_KB");
    long kb = MP_SEGMENT_DEFAULT_KB;
    if (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (!errno && *end == '\0' && v >= 1 && v <= 1L << 20) kb = v;
        else fprintf(stderr, "scalednn: SDNN_MPI_SEGMENT_KB=%s ignored (1..1048576)\n", s);
    }
    return (size_t)kb * 1024 / sizeof(float);
}

static sdnn_status mp_init_locked(sdnn_comm *c, mp_impl *M)
{
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE, rc;
    char ebuf[MPI_MAX_ERROR_STRING];
    MPI_Finalized(&finalized);
    if (finalized)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "mpi: MPI was already finalised in this process and cannot start again");
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return SDNN_ERROR(SDNN_ERR_COMM, "mpi: MPI_Init_thread failed: %s",
                              mp_errstr(rc, ebuf));
        on_exit(mp_at_exit, NULL);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "mpi: the MPI library provides %s, the mpi backend needs "
                          "MPI_THREAD_SERIALIZED or more (its calls come from the exchange's comm "
                          "thread and from the main thread, one at a time)%s",
                          thread_level_name(provided),
                          inited ? "; the program initialised MPI itself: use MPI_Init_thread "
                                   "with MPI_THREAD_SERIALIZED"
                                 : "");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &M->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &M->size);
    /* Our own communicator: our tags never meet the program's messages. */
    MPI_Request req;
    rc = MPI_Comm_idup(MPI_COMM_WORLD, &M->comm, &req);
    if (rc != MPI_SUCCESS) {
        M->comm = MPI_COMM_NULL;
        return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Comm_idup: %s", M->rank,
                          mp_errstr(rc, ebuf));
    }
    M->timeout = c->timeout_s;
    SDNN_CHECK(wait_collective(M, &req, "duplicating MPI_COMM_WORLD"));
    MPI_Comm_set_errhandler(M->comm, MPI_ERRORS_RETURN);
    M->left = mod(M->rank - 1, M->size);
    M->right = mod(M->rank + 1, M->size);
    M->seg = env_segment_floats();
    M->t.ops = &mp_transport;
    M->t.rank = M->rank;
    M->t.size = M->size;
    M->t.impl = M;
    mp_exit_timeout = c->timeout_s;
    c->rank = M->rank;
    c->size = M->size;
    return SDNN_OK;
}

static void release(mp_impl *M)
{
    if (M->failed) {
        /* MPI may still own these buffers. */
        M->next_failed = mp_failed_list;
        mp_failed_list = M;
        return;
    }
    if (M->comm != MPI_COMM_NULL) MPI_Comm_free(&M->comm);
    free(M->work);
    free(M->inoff);
    free(M->slots);
    free(M->scratch);
    free(M->bounce);
    free(M->cslots);
    free(M->creq);
    free(M->crecv);
    free(M);
}

static sdnn_status mp_init(sdnn_comm *c)
{
    mp_impl *M = calloc(1, sizeof *M);
    if (!M) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the mpi backend");
    M->comm = MPI_COMM_NULL;
    pthread_mutex_lock(&mp_lock);
    sdnn_status st = mp_init_locked(c, M);
    if (st == SDNN_OK) {
        M->slots = malloc((size_t)MP_DEPTH * M->seg * sizeof(float));
        if (!M->slots) st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the mpi ring's segments");
    }
    if (st != SDNN_OK) release(M);
    else c->impl = M;
    pthread_mutex_unlock(&mp_lock);
    return st;
}

static void mp_destroy(sdnn_comm *c)
{
    mp_impl *M = c->impl;
    if (!M) return;
    pthread_mutex_lock(&mp_lock);
    release(M);
    pthread_mutex_unlock(&mp_lock);
    c->impl = NULL;
}

/* ---- the operations -------------------------------------------------------- */

static sdnn_status mp_begin(sdnn_comm *c, mp_impl **out)
{
    mp_impl *M = c->impl;
    pthread_mutex_lock(&mp_lock);
    sdnn_status st = usable(M);
    if (st != SDNN_OK) {
        pthread_mutex_unlock(&mp_lock);
        return st;
    }
    M->timeout = c->timeout_s > 0 ? c->timeout_s : SDNN_COMM_TIMEOUT_S;
    mp_exit_timeout = M->timeout;
    *out = M;
    return SDNN_OK;
}

static sdnn_status mp_end(sdnn_status st)
{
    pthread_mutex_unlock(&mp_lock);
    return st;
}

static sdnn_status mp_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n)
{
    if (nin < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "allreduce over %d buffers", nin);
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    sdnn_status st = agree_nin(M, nin);
    if (st != SDNN_OK || n == 0) return mp_end(st);
    if (M->size == 1) {
        sdnn_mean_buffers(in, nin, out, n);
        return mp_end(SDNN_OK);
    }
    if ((st = grow_work(M, n)) != SDNN_OK) return mp_end(st);
    if (M->inoff_n < nin) {
        const float **p = realloc(M->inoff, (size_t)nin * sizeof *p);
        if (!p) return mp_end(SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d buffer pointers", nin));
        M->inoff = p;
        M->inoff_n = nin;
    }
    return mp_end(ring_allreduce(M, n, in, nin, out));
}

static sdnn_status mp_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin, float *const *out,
                                           size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    if (nin < 1 || !codec)
        return SDNN_ERROR(SDNN_ERR_INVALID, "coded allreduce over %d buffers", nin);
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    sdnn_status st = agree_nin(M, nin);
    if (st != SDNN_OK || n == 0) return mp_end(st);
    const float *src = in[0];
    if (nin > 1) {
        if ((st = grow_work(M, n)) != SDNN_OK) return mp_end(st);
        sdnn_mean_buffers(in, nin, M->work, n);
        src = M->work;
    }
    void *scratch = M->scratch;
    st = grow(&scratch, &M->scratch_len, sdnn_coded_scratch_bytes(codec, p, n, M->size),
              "the compressed ring's scratch", M->rank);
    M->scratch = scratch;
    if (st != SDNN_OK) return mp_end(st);
    M->t.sent = 0;
    st = sdnn_coded_allreduce_mean(&M->t, codec, p, stream, src, out[0], n, M->scratch);
    if (st == SDNN_OK) {
        for (int r = 1; r < nin; ++r)
            if (out[r] != out[0]) memcpy(out[r], out[0], n * sizeof(float));
        if (wire) *wire = M->t.sent;
    }
    return mp_end(st);
}

static sdnn_status mp_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1 || n == 0) return mp_end(SDNN_OK);
    if (!M->bounce && !(M->bounce = malloc(MP_BCAST_FLOATS * sizeof(float))))
        return mp_end(SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the broadcast buffer"));
    /* Through our own buffer: after a timeout MPI may still write into it. */
    for (size_t lo = 0; lo < n; lo += MP_BCAST_FLOATS) {
        const size_t len = n - lo < MP_BCAST_FLOATS ? n - lo : MP_BCAST_FLOATS;
        if (M->rank == 0) memcpy(M->bounce, buf + lo, len * sizeof(float));
        MPI_Request req;
        char ebuf[MPI_MAX_ERROR_STRING];
        int rc = MPI_Ibcast(M->bounce, (int)len, MPI_FLOAT, 0, M->comm, &req);
        if (rc != MPI_SUCCESS)
            return mp_end(SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Ibcast: %s", M->rank,
                                     mp_errstr(rc, ebuf)));
        sdnn_status st = wait_collective(M, &req, "broadcast from rank 0");
        if (st != SDNN_OK) return mp_end(st);
        if (M->rank != 0) memcpy(buf + lo, M->bounce, len * sizeof(float));
    }
    return mp_end(SDNN_OK);
}

static sdnn_status mp_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1 || n == 0) return mp_end(SDNN_OK);
    sdnn_status st = grow_work(M, n);
    if (st == SDNN_OK) st = central_buffers(M);
    if (st != SDNN_OK) return mp_end(st);
    /* Through our own buffer: after a timeout MPI may still write into it. */
    memcpy(M->work, buf, n * sizeof(float));
    st = M->rank == 0 ? central_root(M, n) : central_leaf(M, n);
    if (st == SDNN_OK) {
        memcpy(buf, M->work, n * sizeof(float));
        if (wire) *wire = (M->rank == 0 ? (size_t)(M->size - 1) : 1) * n * sizeof(float);
    }
    return mp_end(st);
}

static sdnn_status mp_barrier(sdnn_comm *c)
{
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1) return mp_end(SDNN_OK);
    MPI_Request req;
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_Ibarrier(M->comm, &req);
    if (rc != MPI_SUCCESS)
        return mp_end(SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Ibarrier: %s", M->rank,
                                 mp_errstr(rc, ebuf)));
    return mp_end(wait_collective(M, &req, "barrier"));
}

const sdnn_comm_ops sdnn_comm_mpi_ops = {
    .name = "mpi",
    .built = 1,
    .available = mp_available,
    .init = mp_init,
    .allreduce_mean = mp_allreduce_mean,
    .allreduce_mean_coded = mp_allreduce_mean_coded,
    .broadcast = mp_broadcast,
    .central_mean = mp_central_mean,
    .barrier = mp_barrier,
    .destroy = mp_destroy,
    .hierarchical = 1,
    .unavailable_reason = mp_unavailable_reason,
};

#else /* !SDNN_MPI: the name is known, the backend is not built. */

static int mp_available(void) { return 0; }

static const char *mp_unavailable_reason(void)
{
    return "built without MPI (install libopenmpi-dev openmpi-bin and build with MPI=1)";
}

static sdnn_status mp_not_built(void)
{
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "comm backend mpi: %s", mp_unavailable_reason());
}

static sdnn_status mp_init(sdnn_comm *c)
{
    (void)c;
    return mp_not_built();
}

static sdnn_status mp_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n)
{
    (void)c; (void)in; (void)nin; (void)out; (void)n;
    return mp_not_built();
}

static sdnn_status mp_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin, float *const *out,
                                           size_t n, size_t *wire)
{
    (void)c; (void)codec; (void)p; (void)stream; (void)in; (void)nin; (void)out; (void)n;
    if (wire) *wire = 0;
    return mp_not_built();
}

static sdnn_status mp_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    (void)c; (void)buf; (void)n;
    return mp_not_built();
}

static sdnn_status mp_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    (void)c; (void)buf; (void)n;
    if (wire) *wire = 0;
    return mp_not_built();
}

static sdnn_status mp_barrier(sdnn_comm *c)
{
    (void)c;
    return mp_not_built();
}

static void mp_destroy(sdnn_comm *c) { (void)c; }

const sdnn_comm_ops sdnn_comm_mpi_ops = {
    .name = "mpi",
    .built = 0,
    .available = mp_available,
    .init = mp_init,
    .allreduce_mean = mp_allreduce_mean,
    .allreduce_mean_coded = mp_allreduce_mean_coded,
    .broadcast = mp_broadcast,
    .central_mean = mp_central_mean,
    .barrier = mp_barrier,
    .destroy = mp_destroy,
    .hierarchical = 1,
    .unavailable_reason = mp_unavailable_reason,
};

#endif
