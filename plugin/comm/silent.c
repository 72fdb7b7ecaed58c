/*
 * silent: the one wording of "a peer did not answer" that every backend
 * between processes uses (the mpi backend's rings and central host, the
 * device ring over NCCL), so that a run stopped by a silent rank reads the
 * same whatever carried the data.
 */
#include "comm.h"

sdnn_status sdnn_comm_silent_error(const sdnn_silent_peer *s)
{
    return SDNN_ERROR(SDNN_ERR_COMM,
                      "%s rank %d: waited %.1f s for rank %d%s, which did not answer (%s); "
                      "it stopped, is stuck, or waits itself for a rank that did "
                      "(timeout %.1f s)%s",
                      s->backend, s->rank, s->waited, s->peer, s->peer_note ? s->peer_note : "",
                      s->what, s->timeout, s->after ? s->after : "");
}
