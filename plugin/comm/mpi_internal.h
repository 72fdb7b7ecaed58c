/*
 * mpi_internal: what the files of the mpi backend share (comm_mpi.c the
 * handle and its operations, mpi_wait.c the one poll loop with its
 * deadline, mpi_ring.c the hierarchical plain ring, mpi_central.c stock
 * mode's central host, mpi_coded.c the coded ring's transport).  Only
 * those files include it, and only in an MPI=1 build.
 */
#ifndef SDNN_MPI_INTERNAL_H
#define SDNN_MPI_INTERNAL_H

#include "collective.h"
#include "comm.h"

#include <mpi.h>
#include <stddef.h>

enum {
    MP_DEPTH = 16,           /* segments in flight per direction */
    MP_TAG_SPAN = 16384,     /* ring tags cycle through 0..MP_TAG_SPAN-1 */
    MP_TAG_CODED = 20000,    /* the coded ring's shifts */
    MP_CDEPTH = 8,           /* central host: segments in flight per peer */
    MP_TAG_CENTRAL = 24000,  /* central host: tags MP_TAG_CENTRAL + segment % 4096 */
};

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

/* ---- mpi_wait.c ------------------------------------------------------------ */

/* A collective failed in this process: no MPI_Finalize at exit. */
extern int sdnn_mpi_any_failed;

/* The handle refuses every further call; sets sdnn_mpi_any_failed. */
void sdnn_mpi_mark_failed(mp_impl *M);

/* MPI's text for an error code, in buf (MPI_MAX_ERROR_STRING bytes). */
const char *sdnn_mpi_errstr(int code, char *buf);

/* Give up on point-to-point requests (MPI_REQUEST_NULL entries are
 * skipped): cancel receives, let sends go; MPI keeps the buffers, so the
 * handle does too. */
void sdnn_mpi_drop_requests(MPI_Request *req, const int *is_recv, int n);

/* What one poll of a transfer did. */
enum { MP_FAILED = -1, MP_IDLE = 0, MP_MOVED = 1, MP_DONE = 2 };

/* A transfer driven by sdnn_mpi_poll. */
typedef struct mp_poll {
    mp_impl *M;
    /* Post and test what can be: MP_DONE once the transfer is complete,
     * MP_MOVED when something was posted or finished, MP_IDLE when nothing
     * moved, MP_FAILED after recording the error (SDNN_ERROR, SDNN_ERR_COMM). */
    int (*step)(void *state);
    /* Record the message of `waited` seconds without progress, naming the
     * peer that did not answer; returns its status. */
    sdnn_status (*stalled)(void *state, double waited);
    void *state;
    MPI_Request *req;             /* given up on a failure; NULL: nothing to give up */
    const int *is_recv;
    int nreq;
} mp_poll;

/* The one wait of the backend: call p->step until MP_DONE; when nothing
 * moved, spin, then sleep in naps growing to 1 ms (a waiting comm thread
 * leaves the core to the replica threads), and fail once M->timeout
 * seconds pass without progress.  On a failure the handle is marked failed
 * and p's requests are given up. */
sdnn_status sdnn_mpi_poll(const mp_poll *p);

/* Wait for one nonblocking collective (nothing to cancel: MPI forbids it);
 * `what` names it in messages. */
sdnn_status sdnn_mpi_wait_collective(mp_impl *M, MPI_Request *req, const char *what);

/* *p grown to at least `need` bytes (*have: its size). */
sdnn_status sdnn_mpi_grow(void **p, size_t *have, size_t need, const char *what, int rank);

/* ---- mpi_ring.c, mpi_central.c, mpi_coded.c -------------------------------- */

/* out = the mean over every process of the mean of in[0..nin-1] (M->work
 * holds n floats, M->inoff nin pointers, M->slots MP_DEPTH segments). */
sdnn_status sdnn_mpi_ring_allreduce(mp_impl *M, size_t n, const float *const *in, int nin,
                                    float *out);

/* Stock mode's central host: M->work (n floats) becomes the mean over the
 * processes, summed by process 0 in rank order.  sdnn_mpi_central_buffers
 * first. */
sdnn_status sdnn_mpi_central_buffers(mp_impl *M);
sdnn_status sdnn_mpi_central_mean(mp_impl *M, size_t n);

/* collective.c's transport over MPI (t->impl is the mp_impl). */
extern const sdnn_transport_ops sdnn_mpi_transport_ops;

#endif
