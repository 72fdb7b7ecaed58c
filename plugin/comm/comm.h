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
 *
 * Backends between processes ("mpi") never wait forever: a call that sees
 * no progress from a peer for timeout_s seconds fails with SDNN_ERR_COMM
 * naming that peer, and the handle refuses every later call
 * (SDNN_ERR_ABORTED): close it and stop.
 */
#ifndef SDNN_COMM_H
#define SDNN_COMM_H

#include "codec.h"
#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

typedef struct sdnn_comm sdnn_comm;

/* Default for sdnn_comm_opts.timeout_s (seconds). */
#define SDNN_COMM_TIMEOUT_S 60.0

/* Options of sdnn_comm_open_opts; start from SDNN_COMM_OPTS_INIT. */
typedef struct sdnn_comm_opts {
    /* Longest wait without progress from a peer before a call fails with
     * SDNN_ERR_COMM (> 0; backends inside one process ignore it).  Also
     * bounds the waits inside init (MPI: the communicator's duplication). */
    double timeout_s;
} sdnn_comm_opts;

#define SDNN_COMM_OPTS_INIT { .timeout_s = SDNN_COMM_TIMEOUT_S }

typedef struct sdnn_comm_ops {
    const char *name;
    /* 1 when this build and machine can run the backend (mpi: built with
     * MPI=1 and this process started by mpirun). */
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
     * ring, or, for a hierarchical backend, each process with the fp32 mean
     * of its local buffers (see `hierarchical`).  *wire (may be NULL) =
     * encoded bytes this process sent.  out[r] may alias in[r]. */
    sdnn_status (*allreduce_mean_coded)(sdnn_comm *c, const sdnn_codec_ops *codec,
                                        const sdnn_codec_params *p, uint64_t stream,
                                        const float *const *in, int nin,
                                        float *const *out, size_t n, size_t *wire);
    /* buf on every process = buf of process 0. */
    sdnn_status (*broadcast)(sdnn_comm *c, float *buf, size_t n);
    /* Darknet's central host between processes: every process sends buf to
     * process 0, which sums them in rank order (buf0 + buf1 + ... in fp32)
     * and scales once by (float)(1.0/size), and sends the result back, so
     * buf on every process = that mean, bit for bit the arithmetic of
     * Darknet's sync_nets over `size` devices.  Process 0 carries
     * (size-1) x n floats each way, the others n.  *wire (may be NULL) =
     * bytes this process sent.  A world of one process leaves buf as is. */
    sdnn_status (*central_mean)(sdnn_comm *c, float *buf, size_t n, size_t *wire);
    sdnn_status (*barrier)(sdnn_comm *c);
    void (*destroy)(sdnn_comm *c);
    /* 0: every local buffer is a rank of the ring (local: world = nin).
     * 1: each process first averages its local buffers in fp32 and the
     * processes are the ranks of the ring (mpi: world = size processes,
     * every process must pass the same nin).  Benchmarks and checks use it
     * to know what crossed a link. */
    int hierarchical;
    /* NULL, or why available() is 0 (appended to sdnn_comm_open's
     * message). */
    const char *(*unavailable_reason)(void);
    /* 1 when this build has the backend's code, so a cfg may name it
     * (available() also needs the process to be started for it: mpi under
     * mpirun); 0 for a stub (mpi in an MPI=0 build). */
    int built;
} sdnn_comm_ops;

struct sdnn_comm {
    const sdnn_comm_ops *ops;
    int rank;      /* this process */
    int size;      /* processes */
    double timeout_s; /* sdnn_comm_opts.timeout_s; may be changed between calls */
    void *impl;
};

/* Open backend `name` ("local", "mpi").  Unknown names are
 * SDNN_ERR_INVALID, known but unavailable ones SDNN_ERR_UNSUPPORTED.
 * sdnn_comm_open uses SDNN_COMM_OPTS_INIT. */
sdnn_status sdnn_comm_open(const char *name, sdnn_comm **out);
sdnn_status sdnn_comm_open_opts(const char *name, const sdnn_comm_opts *opts, sdnn_comm **out);
void sdnn_comm_close(sdnn_comm *c);

/* The calls of an open handle: callers use these, never c->ops->.  Each
 * forwards to the backend (comments on sdnn_comm_ops above).  *wire (may
 * be NULL) = bytes this process sent, reported the same way by both
 * allreduces: the coded one counts what the backend sent; the plain one
 * counts what a ring sends, one rank per process across processes
 * (2 (P-1) B / P) and one per buffer inside one process (2 (nin-1) B). */
const char *sdnn_comm_name(const sdnn_comm *c);
int sdnn_comm_hierarchical(const sdnn_comm *c);
int sdnn_comm_has_coded(const sdnn_comm *c);
sdnn_status sdnn_comm_allreduce_mean(sdnn_comm *c, const float *const *in, int nin,
                                     float *out, size_t n, size_t *wire);
sdnn_status sdnn_comm_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin,
                                           float *const *out, size_t n, size_t *wire);
sdnn_status sdnn_comm_broadcast(sdnn_comm *c, float *buf, size_t n);
sdnn_status sdnn_comm_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire);
sdnn_status sdnn_comm_barrier(sdnn_comm *c);

/* Names of the backends this build has, comma-separated (for messages). */
const char *sdnn_comm_available_names(void);
/* Every backend name the registry knows, available here or not, and the
 * ones later issues bring ("local, mpi, nccl"), comma-separated. */
const char *sdnn_comm_names(void);
/* 1: `name` is a backend this build has (`built`); 0: a known name this
 * build lacks (MPI=0, or a later issue's); -1: not a backend name. */
int sdnn_comm_known(const char *name);
/* The backends this build has (`built`), comma-separated: what a cfg may
 * name ("local, mpi"). */
const char *sdnn_comm_built_names(void);

/* The reference kernel: out[i] = (in[0][i] + ... + in[nin-1][i]) * (1/nin),
 * summed in index order.  Exposed for benchmarks and other backends. */
void sdnn_mean_buffers(const float *const *in, int nin, float *out, size_t n);

extern const sdnn_comm_ops sdnn_comm_local_ops;
/* Between processes started by mpirun (comm_mpi.c); available() is 0 in a
 * build without MPI (MPI=0). */
extern const sdnn_comm_ops sdnn_comm_mpi_ops;

#endif
