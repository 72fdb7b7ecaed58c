/*
 * mpi_ring: the mpi backend's plain allreduce (see comm_mpi.c's top): the
 * processes' local means averaged by our own segmented, pipelined ring,
 * reduce-scatter then all-gather, chunk c summed c, c+1, ... in fp32 and
 * scaled once by its owner, so every process ends with the same bits.
 */
#if SDNN_MPI

#include "mpi_internal.h"

#include <stdio.h>

#include <string.h>

static int mod(int a, int m) { return ((a % m) + m) % m; }

typedef struct ring {
    mp_impl *M;
    size_t n, seg;
    int P, r;
    long nseg, total;             /* segments per chunk; messages = 2(P-1) nseg */
    long rs_end;                  /* first all-gather message */
    float inv;
    const float *const *in;
    int nin;
    float *out;
    MPI_Request req[2 * MP_DEPTH]; /* [0, D) receives, [D, 2D) sends */
    int is_recv[2 * MP_DEPTH];
    long rposted, rdone, sposted, sdone;
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

/* An MPI call of message m failed. */
static int ring_fail(const ring *g, const char *what, long m, int rc)
{
    char ebuf[MPI_MAX_ERROR_STRING];
    const int from_left = strcmp(what, "MPI_Irecv") == 0 || strcmp(what, "receive") == 0;
    SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s of ring step %ld (peer rank %d) failed: %s",
               g->M->rank, what, m / g->nseg + 1, from_left ? g->M->left : g->M->right,
               sdnn_mpi_errstr(rc, ebuf));
    return MP_FAILED;
}

/* One poll.  The local mean is loaded into work one segment at a time
 * where the ring first needs it (the sends of step 0, the receives of the
 * reduce-scatter), and each segment's final mean goes to out as soon as it
 * is known, so neither copy waits for the link.  out may alias in[0]: a
 * segment of out is written only after the same segment was loaded. */
static int ring_step(void *state)
{
    ring *g = state;
    mp_impl *M = g->M;
    MPI_Request *rreq = g->req, *sreq = g->req + MP_DEPTH;
    if (!(g->rdone < g->total || g->sdone < g->total)) return MP_DONE;
    int moved = 0, rc;
    /* Receives: a free slot, and in the all-gather the region's
     * reduce-scatter send (message m - rs_end) must be done. */
    while (g->rposted < g->total && g->rposted - g->rdone < MP_DEPTH &&
           (g->rposted < g->rs_end || g->sdone > g->rposted - g->rs_end)) {
        size_t lo, len;
        ring_piece(g, g->rposted, 1, &lo, &len);
        float *dst = g->rposted < g->rs_end ? M->slots + (size_t)(g->rposted % MP_DEPTH) * g->seg
                                            : M->work + lo;
        rc = MPI_Irecv(dst, (int)len, MPI_FLOAT, M->left, (int)(g->rposted % MP_TAG_SPAN),
                       M->comm, &rreq[g->rposted % MP_DEPTH]);
        if (rc != MPI_SUCCESS) return ring_fail(g, "MPI_Irecv", g->rposted, rc);
        ++g->rposted;
        moved = 1;
    }
    /* Sends: step 0 is the local mean; later ones need the segment one step
     * back received (and reduced). */
    while (g->sposted < g->total && g->sposted - g->sdone < MP_DEPTH &&
           (g->sposted < g->nseg || g->sposted - g->nseg < g->rdone)) {
        size_t lo, len;
        ring_piece(g, g->sposted, 0, &lo, &len);
        if (g->sposted < g->nseg) ring_load(M, g->in, g->nin, lo, len);
        rc = MPI_Isend(M->work + lo, (int)len, MPI_FLOAT, M->right,
                       (int)(g->sposted % MP_TAG_SPAN), M->comm, &sreq[g->sposted % MP_DEPTH]);
        if (rc != MPI_SUCCESS) return ring_fail(g, "MPI_Isend", g->sposted, rc);
        ++g->sposted;
        moved = 1;
    }
    if (g->rdone < g->rposted) {
        int done = 0;
        MPI_Status status;
        rc = MPI_Test(&rreq[g->rdone % MP_DEPTH], &done, &status);
        if (rc != MPI_SUCCESS) return ring_fail(g, "receive", g->rdone, rc);
        if (done) {
            size_t lo, len;
            int got = -1;
            ring_piece(g, g->rdone, 1, &lo, &len);
            MPI_Get_count(&status, MPI_FLOAT, &got);
            if (got != (int)len) {
                SDNN_ERROR(SDNN_ERR_COMM,
                           "mpi rank %d: rank %d sent %d floats for ring step %ld where %zu "
                           "were expected: the processes called allreduce with different sizes",
                           M->rank, M->left, got, g->rdone / g->nseg + 1, len);
                return MP_FAILED;
            }
            if (g->rdone < g->rs_end) {
                const int last = g->rdone / g->nseg == g->P - 2;
                ring_load(M, g->in, g->nin, lo, len);
                ring_reduce(M->work + lo, M->slots + (size_t)(g->rdone % MP_DEPTH) * g->seg, len,
                            last, g->inv);
                if (last) memcpy(g->out + lo, M->work + lo, len * sizeof(float));
            } else {
                memcpy(g->out + lo, M->work + lo, len * sizeof(float));
            }
            ++g->rdone;
            moved = 1;
        }
    }
    if (g->sdone < g->sposted) {
        int done = 0;
        rc = MPI_Test(&sreq[g->sdone % MP_DEPTH], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return ring_fail(g, "send", g->sdone, rc);
        if (done) {
            ++g->sdone;
            moved = 1;
        }
    }
    return moved ? MP_MOVED : MP_IDLE;
}

/* Missing data from the left, or the right not taking ours. */
static sdnn_status ring_stalled(void *state, double waited)
{
    const ring *g = state;
    const mp_impl *M = g->M;
    const int from_left = g->rdone < g->rposted;
    const long m = from_left ? g->rdone : g->sdone;
    char what[160];
    snprintf(what, sizeof what, "%s ring step %ld of %ld, segment %ld of %ld",
             from_left ? "no data from it for" : "it took none of our data for",
             m / g->nseg + 1, 2L * (g->P - 1), m % g->nseg + 1, g->nseg);
    const sdnn_silent_peer s = {.backend = "mpi", .rank = M->rank, .waited = waited,
                                .peer = from_left ? M->left : M->right, .what = what,
                                .timeout = M->timeout};
    return sdnn_comm_silent_error(&s);
}

sdnn_status sdnn_mpi_ring_allreduce(mp_impl *M, size_t n, const float *const *in, int nin,
                                    float *out)
{
    ring g = {.M = M, .n = n, .seg = M->seg, .P = M->size, .r = M->rank, .in = in, .nin = nin,
              .out = out};
    size_t lo0, per;
    sdnn_ring_chunk(n, 1, g.P, 0, &lo0, &per);
    g.nseg = (long)((per + g.seg - 1) / g.seg);
    if (g.nseg < 1) g.nseg = 1;
    g.total = 2L * (g.P - 1) * g.nseg;
    g.rs_end = (long)(g.P - 1) * g.nseg;
    g.inv = 1.0f / (float)g.P;
    for (int i = 0; i < 2 * MP_DEPTH; ++i) {
        g.req[i] = MPI_REQUEST_NULL;
        g.is_recv[i] = i < MP_DEPTH;
    }
    const mp_poll p = {.M = M, .step = ring_step, .stalled = ring_stalled, .state = &g,
                       .req = g.req, .is_recv = g.is_recv, .nreq = 2 * MP_DEPTH};
    return sdnn_mpi_poll(&p);
}

#endif /* SDNN_MPI */
