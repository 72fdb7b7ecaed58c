/*
 * comm: the one collective interface every exchange goes through.
 *
 * A backend is a table of function pointers (sdnn_comm_ops) found by name in
 * a registry; the trainer never knows which one it holds.  "local" averages
 * the buffers of the replica threads of one process and is the reference
 * that later backends (mpi, nccl) must match.  A world of one process and
 * one buffer is a real world: every call is valid and moves nothing.
 *
 * Collectives are called from one thread per process (the comm thread, or a
 * replica thread while the others wait), never concurrently on one handle.
 */
#ifndef SDNN_COMM_H
#define SDNN_COMM_H

#include "codec.h"
#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

typedef struct sdnn_comm sdnn_comm;

typedef struct sdnn_comm_ops {
    const char *name;
    /* 1 when this build and machine can run the backend. */
    int (*available)(void);
    sdnn_status (*init)(sdnn_comm *c);
    /* out = mean over every process of the mean of the local in[0..nin-1];
     * equal bit for bit on every process.  out may alias in[0]. */
    sdnn_status (*allreduce_mean)(sdnn_comm *c, const float *const *in, int nin,
                                  float *out, size_t n);
    /* out[r] (r < nin) = the decoded mean over every process and local
     * buffer of in[], carried encoded by codec (dense: ring reduce-scatter
     * + all-gather, sparse: all-gather; see collective.h), bit-identical on
     * every buffer of every process.  Each local buffer is a rank of the
     * ring.  *wire (may be NULL) = encoded bytes this process sent.  out[r]
     * may alias in[r]. */
    sdnn_status (*allreduce_mean_coded)(sdnn_comm *c, const sdnn_codec_ops *codec,
                                        const sdnn_codec_params *p, uint64_t stream,
                                        const float *const *in, int nin,
                                        float *const *out, size_t n, size_t *wire);
    /* buf on every process = buf of process 0. */
    sdnn_status (*broadcast)(sdnn_comm *c, float *buf, size_t n);
    sdnn_status (*barrier)(sdnn_comm *c);
    void (*destroy)(sdnn_comm *c);
} sdnn_comm_ops;

struct sdnn_comm {
    const sdnn_comm_ops *ops;
    int rank;      /* this process */
    int size;      /* processes */
    void *impl;
};

/* Open backend `name` ("local").  Unknown names are SDNN_ERR_INVALID, known
 * but unavailable ones SDNN_ERR_UNSUPPORTED. */
sdnn_status sdnn_comm_open(const char *name, sdnn_comm **out);
void sdnn_comm_close(sdnn_comm *c);

/* Names of the backends this build has, comma-separated (for messages). */
const char *sdnn_comm_available_names(void);

/* The reference kernel: out[i] = (in[0][i] + ... + in[nin-1][i]) * (1/nin),
 * summed in index order.  Exposed for benchmarks and other backends. */
void sdnn_mean_buffers(const float *const *in, int nin, float *out, size_t n);

extern const sdnn_comm_ops sdnn_comm_local_ops;

#endif
