/*
 * comm_local: the in-process backend.  All replicas of a process share one
 * address space, so an allreduce is a direct average of their buffers; the
 * world is this one process (rank 0 of 1), so broadcast and barrier have
 * nothing to move.  It is the reference the other backends are tested
 * against.
 */
#include "comm.h"

static int local_available(void) { return 1; }

static sdnn_status local_init(sdnn_comm *c)
{
    c->rank = 0;
    c->size = 1;
    c->impl = NULL;
    return SDNN_OK;
}

static sdnn_status local_allreduce_mean(sdnn_comm *c, const float *const *in, int nin,
                                        float *out, size_t n)
{
    (void)c;
    if (nin < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "allreduce over %d buffers", nin);
    sdnn_mean_buffers(in, nin, out, n);
    return SDNN_OK;
}

static sdnn_status local_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    (void)c; (void)buf; (void)n;
    return SDNN_OK;
}

static sdnn_status local_barrier(sdnn_comm *c)
{
    (void)c;
    return SDNN_OK;
}

static void local_destroy(sdnn_comm *c) { (void)c; }

const sdnn_comm_ops sdnn_comm_local_ops = {
    .name = "local",
    .available = local_available,
    .init = local_init,
    .allreduce_mean = local_allreduce_mean,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .destroy = local_destroy,
};
