/*
 * sim: the internals that the files of the simulated device runtime
 * (`make GPU=sim`, plugin/cuda/sim/) share.  Code above dev.h never
 * includes this header: to it a simulated device is a device like any
 * other, with device pointers it cannot dereference.
 *
 * Two calls make the seam.  A simulated kernel is a function queued on one
 * of a context's streams (each stream is drained in order by its own
 * worker thread), and it sees device memory only through host addresses
 * that sdnn_sim_dptr handed out when it was launched.
 */
#ifndef SDNN_CUDA_SIM_H
#define SDNN_CUDA_SIM_H

#include "dev.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One queued operation.  It runs on the stream's worker thread with `arg`
 * pointing to the runtime's copy of the argument block given at launch
 * (freed after the call).  A non-OK return is the stream's sticky error:
 * the next sync of that stream (or of the context) reports it, as CUDA
 * reports a failed kernel, and later work on that stream is skipped. */
typedef sdnn_status (*sdnn_sim_fn)(void *arg);

/* Queue fn on `stream` (enum sdnn_dstream) of c and return at once.
 * `call` names the dev.h function for errors, statistics and the jitter
 * log.  The argument block is copied: the caller may reuse its storage. */
sdnn_status sdnn_sim_launch(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                            const void *arg, size_t argsize);

/* The host address of [p, p + bytes) on c's device, for a simulated
 * kernel to use.  It fails (SDNN_ERR_INVALID, naming `call`) when p is a
 * host pointer, lies in freed memory, runs past its allocation, or belongs
 * to another simulated device that c's device has no peer access to.
 * p == NULL with bytes == 0 gives *host = NULL. */
sdnn_status sdnn_sim_dptr(sdnn_dctx *c, const void *p, size_t bytes, const char *call,
                          void **host);

/* Additions (runtime agent): sdnn_sim_launch, then wait on the host for
 * that operation (and everything queued before it on the stream); for the
 * dev.h calls documented as synchronous.  Returns the stream's sticky
 * error, if any, as a sync does. */
sdnn_status sdnn_sim_launch_sync(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                                 const void *arg, size_t argsize);
/* sdnn_sim_launch, with `skipped` called in place of fn when the stream
 * already failed (fn is then never called): for an operation that holds
 * resources it must give back either way.  `skipped` may be NULL. */
typedef void (*sdnn_sim_skip_fn)(void *arg);
sdnn_status sdnn_sim_launch_ex(sdnn_dctx *c, int stream, const char *call, sdnn_sim_fn fn,
                               sdnn_sim_skip_fn skipped, const void *arg, size_t argsize);
/* Host wait for one stream of c (the sticky error if any), naming `call`. */
sdnn_status sdnn_sim_stream_sync(sdnn_dctx *c, int stream, const char *call);

/* For the kernel executor (sim/exec.c): whether SDNN_SIM_JITTER is set
 * (its seed in *seed); what host-view address p is (device, offset, the
 * allocation it lies after) for a fault message; one device word per stream
 * of c (allocated at first use, freed with the context). */
int sdnn_sim_jitter_seed(unsigned long long *seed);
void sdnn_sim_describe_host(const void *p, char *buf, size_t len);
sdnn_status sdnn_sim_count_slot(sdnn_dctx *c, int stream, unsigned long long **slot);

#ifdef __cplusplus
}
#endif
/* Bytes rank c sent through the simulated NCCL so far (sim/nccl.c's
 * counter: sends as sent, collectives as NCCL's ring sends them).  Only
 * simulated builds have it: on GPU=1 the figures are collective.h's
 * formula, real NCCL does not count. */
double sdnn_dnccl_sim_sent(const sdnn_dnccl *c);

#endif
