/*
 * mpi_wait: how the mpi backend waits (see mpi_internal.h).  Every MPI
 * operation of the backend is nonblocking and polled by sdnn_mpi_poll
 * against a deadline of timeout_s without progress, so a silent peer
 * becomes an error naming it instead of a hang.
 */
#if SDNN_MPI

#include "mpi_internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MP_SPIN_S 200e-6
#define MP_NAP_MAX_NS 1000000L

int sdnn_mpi_any_failed;

void sdnn_mpi_mark_failed(mp_impl *M)
{
    M->failed = 1;
    sdnn_mpi_any_failed = 1;
}

const char *sdnn_mpi_errstr(int code, char *buf)
{
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, 32, "MPI error %d", code);
    return buf;
}

void sdnn_mpi_drop_requests(MPI_Request *req, const int *is_recv, int n)
{
    for (int i = 0; i < n; ++i) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        if (is_recv[i]) MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

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

sdnn_status sdnn_mpi_poll(const mp_poll *p)
{
    mp_idle w;
    idle_reset(&w);
    sdnn_status st = SDNN_ERR_COMM;
    for (;;) {
        const int r = p->step(p->state);
        if (r == MP_DONE) return SDNN_OK;
        if (r == MP_MOVED) {
            idle_reset(&w);
            continue;
        }
        if (r == MP_FAILED) break;
        if (!idle_wait(&w, p->M->timeout)) {
            st = p->stalled(p->state, sdnn_now_s() - w.since);
            break;
        }
    }
    sdnn_mpi_mark_failed(p->M);
    if (p->req) sdnn_mpi_drop_requests(p->req, p->is_recv, p->nreq);
    return st;
}

typedef struct collective_wait {
    mp_impl *M;
    MPI_Request *req;
    const char *what;
} collective_wait;

static int collective_step(void *state)
{
    collective_wait *c = state;
    int done = 0;
    int rc = MPI_Test(c->req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: %s failed: %s", c->M->rank, c->what,
                   sdnn_mpi_errstr(rc, buf));
        return MP_FAILED;
    }
    return done ? MP_DONE : MP_IDLE;
}

static sdnn_status collective_stalled(void *state, double waited)
{
    collective_wait *c = state;
    return SDNN_ERROR(SDNN_ERR_COMM,
                      "mpi rank %d: %s: waited %.1f s and at least one of the %d "
                      "processes did not join (stopped, stuck, or waiting elsewhere); "
                      "timeout %.1f s",
                      c->M->rank, c->what, waited, c->M->size, c->M->timeout);
}

sdnn_status sdnn_mpi_wait_collective(mp_impl *M, MPI_Request *req, const char *what)
{
    collective_wait c = {M, req, what};
    const mp_poll p = {.M = M, .step = collective_step, .stalled = collective_stalled,
                       .state = &c};
    return sdnn_mpi_poll(&p);
}

sdnn_status sdnn_mpi_grow(void **p, size_t *have, size_t need, const char *what, int rank)
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

#endif /* SDNN_MPI */
