/*
 * mpi_timeout: one process stops answering; the others must fail with
 * SDNN_ERR_COMM within the timeout (plus a margin), naming it when it is
 * their direct neighbour, and refuse every later call.  Run under mpirun
 * (tests/mpi/run.sh; driven by tests/test_mpi.c).
 *
 *   mpi_timeout OP TIMEOUT_S     OP: allreduce | coded | barrier | bcast
 *
 * The last process sleeps 4 x TIMEOUT_S after a first, shared allreduce
 * (so every connection is up) and never joins the second call.  Each other
 * process prints one line
 *   rank R: status=S elapsed=T peer=P then=S2 msg=...
 * (P: the rank the message names, -1 if none; S2: the status of a
 * following call) and exits at once without MPI_Finalize, so mpirun ends
 * the job; the test reads the lines, not the exit status.
 */
#include "soft_assert.h"

#include "clock.h"
#include "codec.h"
#include "comm.h"
#include "scalednn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) { return sdnn_now_s(); }

static sdnn_status run_op(sdnn_comm *c, const char *op, float *buf, float *out, size_t n)
{
    const float *in[1] = {buf};
    if (strcmp(op, "allreduce") == 0) return c->ops->allreduce_mean(c, in, 1, out, n);
    if (strcmp(op, "coded") == 0) {
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        float *outs[1] = {out};
        return c->ops->allreduce_mean_coded(c, &sdnn_codec_fp16, &p, 7, in, 1, outs, n, NULL);
    }
    if (strcmp(op, "barrier") == 0) return c->ops->barrier(c);
    if (strcmp(op, "bcast") == 0) return c->ops->broadcast(c, buf, n);
    return SDNN_ERR_INVALID;
}

/* The "rank K" a message names first after "for rank" / "did not join". */
static int named_peer(const char *msg)
{
    const char *p = strstr(msg, "for rank ");
    return p ? atoi(p + 9) : -1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mpi_timeout allreduce|coded|barrier|bcast TIMEOUT_S\n");
        return 2;
    }
    const char *op = argv[1];
    sdnn_comm_opts o = SDNN_COMM_OPTS_INIT;
    o.timeout_s = atof(argv[2]);
    sdnn_comm *c = NULL;
    if (sdnn_comm_open_opts("mpi", &o, &c) != SDNN_OK) {
        printf("rank ?: cannot open the mpi backend: %s\n", sdnn_last_error());
        return 1;
    }
    enum { N = 1 << 20 };
    float *buf = calloc(N, sizeof(float)), *out = calloc(N, sizeof(float));
    const float *in[1] = {buf};
    if (c->ops->allreduce_mean(c, in, 1, out, N) != SDNN_OK) {
        printf("rank %d: the first allreduce failed: %s\n", c->rank, sdnn_last_error());
        return 1;
    }
    if (c->rank == c->size - 1) {
        sleep((unsigned)(4 * o.timeout_s + 1));
        _exit(0);
    }
    const double t0 = now_s();
    sdnn_status st = run_op(c, op, buf, out, N);
    const double dt = now_s() - t0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sdnn_last_error());
    sdnn_status then = run_op(c, op, buf, out, N);
    g_rank = c->rank;
    /* A broadcast can reach a rank straight from rank 0 before the sleeper
     * is missed: that rank may succeed this time. */
    int may_pass = strcmp(op, "bcast") == 0 && c->rank != 0;
    SOFT_ASSERT(st == SDNN_ERR_COMM || (may_pass && st == SDNN_OK), "%s: status %s", op,
           sdnn_strerror(st));
    if (st != SDNN_OK) {
        SOFT_ASSERT(then == SDNN_ERR_ABORTED, "%s: the call after a failure returned %s", op,
               sdnn_strerror(then));
        SOFT_ASSERT(dt >= 0.9 * o.timeout_s && dt <= o.timeout_s + 3.0,
               "%s: failed after %.2f s with a %.2f s timeout", op, dt, o.timeout_s);
    }
    printf("rank %d: status=%s elapsed=%.2f peer=%d then=%s msg=%s\n", c->rank,
           st == SDNN_ERR_COMM ? "comm" : sdnn_strerror(st), dt, named_peer(msg),
           then == SDNN_ERR_ABORTED ? "aborted" : sdnn_strerror(then), msg);
    fflush(stdout);
    _exit(g_fail ? 1 : 0);
}
