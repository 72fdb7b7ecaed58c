/*
 * mpi_central: stock mode's central host between processes (Darknet's
 * sync_nets through one host): every process streams its buffer to process
 * 0 in ring-sized segments (MP_CDEPTH per peer in flight); process 0 adds
 * them in rank order, scales once by (float)(1.0/P) and streams each
 * finished segment back while later ones still arrive.
 */
#if SDNN_MPI

#include "mpi_internal.h"

#include <stdio.h>

#include <stdlib.h>

/* Segment j of a buffer of n floats cut into pieces of seg: [lo, lo+len). */
static void seg_piece(size_t n, size_t seg, long j, size_t *lo, size_t *len)
{
    *lo = (size_t)j * seg;
    *len = n - *lo < seg ? n - *lo : seg;
}

typedef struct central {
    mp_impl *M;
    size_t n, seg;
    long nseg;
    long rposted, rdone, sposted, sdone;  /* leaf; the root uses rposted, sdone */
    long summed;                          /* root: segments summed and sent */
    int cpeer, speer;                     /* root: next peer to add (summed), to finish (sdone) */
} central;

static int central_fail(const central *s, const char *what, int peer, int rc)
{
    char ebuf[MPI_MAX_ERROR_STRING];
    SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s of the central average with rank %d: %s",
               s->M->rank, what, peer, sdnn_mpi_errstr(rc, ebuf));
    return MP_FAILED;
}

/* Process 0: for every segment j, receives from every peer (MP_CDEPTH
 * segments ahead per peer), adds them to its own values in rank order as
 * they come (work = buf0 + buf1 + ... + buf(P-1)), scales by (float)(1.0/P)
 * and sends the result to every peer while later segments still arrive, so
 * its link carries (P-1) x n floats each way at once. */
static int root_step(void *state)
{
    central *s = state;
    mp_impl *M = s->M;
    const int P = M->size, D = MP_CDEPTH, npeer = P - 1;
    const size_t seg = s->seg;
    const float scale = (float)(1.0 / P);
    MPI_Request *rreq = M->creq, *sreq = M->creq + (size_t)npeer * D;
    if (!(s->summed < s->nseg || s->sdone < s->nseg)) return MP_DONE;
    int moved = 0, rc;
    while (s->rposted < s->nseg && s->rposted - s->summed < D) {
        size_t lo, len;
        seg_piece(s->n, seg, s->rposted, &lo, &len);
        for (int p = 1; p < P; ++p) {
            const size_t k = (size_t)(p - 1) * D + (size_t)(s->rposted % D);
            rc = MPI_Irecv(M->cslots + k * seg, (int)len, MPI_FLOAT, p,
                           MP_TAG_CENTRAL + (int)(s->rposted % 4096), M->comm, &rreq[k]);
            if (rc != MPI_SUCCESS) return central_fail(s, "MPI_Irecv", p, rc);
        }
        ++s->rposted;
        moved = 1;
    }
    /* Add what arrived for segment `summed`, in rank order; the result
     * leaves once the sends of segment summed - D are done. */
    while (s->summed < s->rposted && s->summed - s->sdone < D) {
        size_t lo, len;
        seg_piece(s->n, seg, s->summed, &lo, &len);
        const size_t k = (size_t)(s->cpeer - 1) * D + (size_t)(s->summed % D);
        int done = 0;
        MPI_Status status;
        rc = MPI_Test(&rreq[k], &done, &status);
        if (rc != MPI_SUCCESS) return central_fail(s, "receive", s->cpeer, rc);
        if (!done) break;
        int got = -1;
        MPI_Get_count(&status, MPI_FLOAT, &got);
        if (got != (int)len) {
            SDNN_ERROR(SDNN_ERR_COMM,
                       "mpi rank 0: rank %d sent %d floats for central segment %ld where %zu "
                       "were expected: the processes averaged different sizes",
                       s->cpeer, got, s->summed + 1, len);
            return MP_FAILED;
        }
        float *restrict acc = M->work + lo;
        const float *restrict x = M->cslots + k * seg;
        for (size_t i = 0; i < len; ++i) acc[i] += x[i];
        moved = 1;
        if (++s->cpeer < P) continue;
        for (size_t i = 0; i < len; ++i) acc[i] *= scale;
        for (int p = 1; p < P; ++p) {
            const size_t ks = (size_t)(p - 1) * D + (size_t)(s->summed % D);
            rc = MPI_Isend(acc, (int)len, MPI_FLOAT, p, MP_TAG_CENTRAL + (int)(s->summed % 4096),
                           M->comm, &sreq[ks]);
            if (rc != MPI_SUCCESS) return central_fail(s, "MPI_Isend", p, rc);
        }
        s->cpeer = 1;
        ++s->summed;
    }
    while (s->sdone < s->summed) {
        const size_t k = (size_t)(s->speer - 1) * D + (size_t)(s->sdone % D);
        int done = 0;
        rc = MPI_Test(&sreq[k], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return central_fail(s, "send", s->speer, rc);
        if (!done) break;
        moved = 1;
        if (++s->speer < P) continue;
        s->speer = 1;
        ++s->sdone;
    }
    return moved ? MP_MOVED : MP_IDLE;
}

static sdnn_status root_stalled(void *state, double waited)
{
    const central *s = state;
    const int recv = s->summed < s->rposted && s->summed - s->sdone < MP_CDEPTH;
    char what[160];
    snprintf(what, sizeof what, "%s for segment %ld of %ld of the central average",
             recv ? "no data from it" : "it took none of the average",
             (recv ? s->summed : s->sdone) + 1, s->nseg);
    const sdnn_silent_peer e = {.backend = "mpi", .rank = 0, .waited = waited,
                                .peer = recv ? s->cpeer : s->speer, .what = what,
                                .timeout = s->M->timeout};
    return sdnn_comm_silent_error(&e);
}

/* Any other process: its segments to process 0 (MP_CDEPTH in flight), and
 * the average of each back into the same place once that segment's send
 * is done. */
static int leaf_step(void *state)
{
    central *s = state;
    mp_impl *M = s->M;
    const int D = MP_CDEPTH;
    const size_t seg = s->seg;
    MPI_Request *rreq = M->creq, *sreq = M->creq + D;
    if (!(s->rdone < s->nseg || s->sdone < s->nseg)) return MP_DONE;
    int moved = 0, rc;
    while (s->sposted < s->nseg && s->sposted - s->sdone < D) {
        size_t lo, len;
        seg_piece(s->n, seg, s->sposted, &lo, &len);
        rc = MPI_Isend(M->work + lo, (int)len, MPI_FLOAT, 0,
                       MP_TAG_CENTRAL + (int)(s->sposted % 4096), M->comm, &sreq[s->sposted % D]);
        if (rc != MPI_SUCCESS) return central_fail(s, "MPI_Isend", 0, rc);
        ++s->sposted;
        moved = 1;
    }
    while (s->sdone < s->sposted) {
        int done = 0;
        rc = MPI_Test(&sreq[s->sdone % D], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return central_fail(s, "send", 0, rc);
        if (!done) break;
        ++s->sdone;
        moved = 1;
    }
    while (s->rposted < s->sdone && s->rposted - s->rdone < D) {
        size_t lo, len;
        seg_piece(s->n, seg, s->rposted, &lo, &len);
        rc = MPI_Irecv(M->work + lo, (int)len, MPI_FLOAT, 0,
                       MP_TAG_CENTRAL + (int)(s->rposted % 4096), M->comm, &rreq[s->rposted % D]);
        if (rc != MPI_SUCCESS) return central_fail(s, "MPI_Irecv", 0, rc);
        ++s->rposted;
        moved = 1;
    }
    while (s->rdone < s->rposted) {
        size_t lo, len;
        seg_piece(s->n, seg, s->rdone, &lo, &len);
        int done = 0;
        MPI_Status status;
        rc = MPI_Test(&rreq[s->rdone % D], &done, &status);
        if (rc != MPI_SUCCESS) return central_fail(s, "receive", 0, rc);
        if (!done) break;
        int got = -1;
        MPI_Get_count(&status, MPI_FLOAT, &got);
        if (got != (int)len) {
            SDNN_ERROR(SDNN_ERR_COMM,
                       "mpi rank %d: rank 0 sent %d floats for central segment %ld where %zu "
                       "were expected: the processes averaged different sizes",
                       M->rank, got, s->rdone + 1, len);
            return MP_FAILED;
        }
        ++s->rdone;
        moved = 1;
    }
    return moved ? MP_MOVED : MP_IDLE;
}

static sdnn_status leaf_stalled(void *state, double waited)
{
    const central *s = state;
    char what[160];
    snprintf(what, sizeof what, "%s, segment %ld of %ld",
             s->sdone < s->sposted ? "it took none of our weights" : "no average came back",
             (s->sdone < s->sposted ? s->sdone : s->rdone) + 1, s->nseg);
    const sdnn_silent_peer e = {.backend = "mpi", .rank = s->M->rank, .waited = waited,
                                .peer = 0, .peer_note = ", the central host", .what = what,
                                .timeout = s->M->timeout};
    return sdnn_comm_silent_error(&e);
}

sdnn_status sdnn_mpi_central_mean(mp_impl *M, size_t n)
{
    central s = {.M = M, .n = n, .seg = M->seg, .cpeer = 1, .speer = 1};
    s.nseg = (long)((n + s.seg - 1) / s.seg);
    const int root = M->rank == 0;
    const int npeer = root ? M->size - 1 : 1;
    const mp_poll p = {.M = M, .step = root ? root_step : leaf_step,
                       .stalled = root ? root_stalled : leaf_stalled, .state = &s,
                       .req = M->creq, .is_recv = M->crecv, .nreq = 2 * npeer * MP_CDEPTH};
    return sdnn_mpi_poll(&p);
}

/* The request arrays (and process 0's receive segments) for a world of
 * M->size processes; allocated once. */
sdnn_status sdnn_mpi_central_buffers(mp_impl *M)
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
    SDNN_CHECK(sdnn_mpi_grow(&p, &M->cslots_len, npeer * MP_CDEPTH * M->seg * sizeof(float),
                             "the central average's segments", M->rank));
    M->cslots = p;
    return SDNN_OK;
}

#endif /* SDNN_MPI */
