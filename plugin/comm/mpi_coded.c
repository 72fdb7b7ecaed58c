/*
 * mpi_coded: the transport collective.c's compressed ring runs on between
 * processes: one hop shifts slen bytes to the right neighbour and rlen from
 * the left, cut into the plain ring's eager segments (comm_mpi.c's top),
 * MP_DEPTH of each in flight.
 */
#if SDNN_MPI

#include "mpi_internal.h"

typedef struct shift {
    mp_impl *M;
    const char *send;
    char *recv;
    size_t slen, rlen, piece;
    long ns, nr;
    long rposted, rdone, sposted, sdone;
    MPI_Request req[2 * MP_DEPTH]; /* [0, D) receives, [D, 2D) sends */
    int is_recv[2 * MP_DEPTH];
} shift;

static int shift_fail(const shift *s, int rc)
{
    char ebuf[MPI_MAX_ERROR_STRING];
    SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: compressed ring shift with ranks %d/%d: %s",
               s->M->rank, s->M->left, s->M->right, sdnn_mpi_errstr(rc, ebuf));
    return MP_FAILED;
}

static int shift_step(void *state)
{
    shift *s = state;
    mp_impl *M = s->M;
    MPI_Request *rreq = s->req, *sreq = s->req + MP_DEPTH;
    if (!(s->rdone < s->nr || s->sdone < s->ns)) return MP_DONE;
    int moved = 0, rc;
    while (s->rposted < s->nr && s->rposted - s->rdone < MP_DEPTH) {
        const size_t off = (size_t)s->rposted * s->piece;
        const size_t len = s->rlen - off < s->piece ? s->rlen - off : s->piece;
        rc = MPI_Irecv(s->recv + off, (int)len, MPI_BYTE, M->left, MP_TAG_CODED, M->comm,
                       &rreq[s->rposted % MP_DEPTH]);
        if (rc != MPI_SUCCESS) return shift_fail(s, rc);
        ++s->rposted;
        moved = 1;
    }
    while (s->sposted < s->ns && s->sposted - s->sdone < MP_DEPTH) {
        const size_t off = (size_t)s->sposted * s->piece;
        const size_t len = s->slen - off < s->piece ? s->slen - off : s->piece;
        rc = MPI_Isend(s->send + off, (int)len, MPI_BYTE, M->right, MP_TAG_CODED, M->comm,
                       &sreq[s->sposted % MP_DEPTH]);
        if (rc != MPI_SUCCESS) return shift_fail(s, rc);
        ++s->sposted;
        moved = 1;
    }
    if (s->rdone < s->rposted) {
        int done = 0;
        MPI_Status status;
        rc = MPI_Test(&rreq[s->rdone % MP_DEPTH], &done, &status);
        if (rc != MPI_SUCCESS) return shift_fail(s, rc);
        if (done) {
            const size_t off = (size_t)s->rdone * s->piece;
            const size_t len = s->rlen - off < s->piece ? s->rlen - off : s->piece;
            int got = -1;
            MPI_Get_count(&status, MPI_BYTE, &got);
            if (got != (int)len) {
                SDNN_ERROR(SDNN_ERR_COMM,
                           "mpi rank %d: rank %d sent %d B where %zu were expected: the "
                           "processes called the coded allreduce with different sizes or codecs",
                           M->rank, M->left, got, len);
                return MP_FAILED;
            }
            ++s->rdone;
            moved = 1;
        }
    }
    if (s->sdone < s->sposted) {
        int done = 0;
        rc = MPI_Test(&sreq[s->sdone % MP_DEPTH], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return shift_fail(s, rc);
        if (done) {
            ++s->sdone;
            moved = 1;
        }
    }
    return moved ? MP_MOVED : MP_IDLE;
}

static sdnn_status shift_stalled(void *state, double waited)
{
    const shift *s = state;
    const mp_impl *M = s->M;
    const int from_left = s->rdone < s->rposted;
    const sdnn_silent_peer e = {
        .backend = "mpi", .rank = M->rank, .waited = waited,
        .peer = from_left ? M->left : M->right,
        .what = from_left ? "no data from it in the compressed ring"
                          : "it took none of our data in the compressed ring",
        .timeout = M->timeout};
    return sdnn_comm_silent_error(&e);
}

static sdnn_status mp_shift(sdnn_transport *t, const void *send, size_t slen, void *recv,
                            size_t rlen)
{
    mp_impl *M = t->impl;
    shift s = {.M = M, .send = send, .recv = recv, .slen = slen, .rlen = rlen,
               .piece = M->seg * sizeof(float)};
    s.ns = slen ? (long)((slen + s.piece - 1) / s.piece) : 1;
    s.nr = rlen ? (long)((rlen + s.piece - 1) / s.piece) : 1;
    for (int i = 0; i < 2 * MP_DEPTH; ++i) {
        s.req[i] = MPI_REQUEST_NULL;
        s.is_recv[i] = i < MP_DEPTH;
    }
    const mp_poll p = {.M = M, .step = shift_step, .stalled = shift_stalled, .state = &s,
                       .req = s.req, .is_recv = s.is_recv, .nreq = 2 * MP_DEPTH};
    return sdnn_mpi_poll(&p);
}

const sdnn_transport_ops sdnn_mpi_transport_ops = {.shift = mp_shift};

#endif /* SDNN_MPI */
