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
 * Backends between processes ("mpi", and "nccl" whose bootstrap is mpi)
 * never wait forever: a call that sees no progress from a peer for
 * timeout_s seconds fails with SDNN_ERR_COMM naming that peer
 * (sdnn_comm_silent_error's wording), and the handle refuses every later
 * call (SDNN_ERR_ABORTED): close it and stop.
 */
#ifndef SDNN_COMM_H
#define SDNN_COMM_H

#include "codec.h"
#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

typedef struct sdnn_comm sdnn_comm;
/* costmodel.h's link (alpha, beta, name), by its tag only: comm.h does not
 * include plan/ (set_link below). */
struct sdnn_link;

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
     * encoded bytes this process's nin buffers sent in all (a hierarchical
     * backend: this process's own sends).  out[r] may alias in[r]. */
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
    /* NULL, or the collectives this handle offers lossy codec `codec`
     * besides collective.c's way (the coded ring of a dense codec, the
     * all-gather of a sparse one), as costmodel.h's SDNN_CM_OFFERS bits
     * (0: that way only).  The gpu engine's comm over NCCL offers NCCL's
     * native half / bfloat16 allreduce; the step gives the planner's codec
     * models these bits (plugin/step/measure.c). */
    unsigned (*offers)(const sdnn_comm *c, const sdnn_codec_ops *codec);
    /* NULL, or told the exchange's buckets once they are known (at the
     * exchange's creation: before its first step, and again for a plan's
     * buckets): codec[k] (NULL: uncompressed) and n[k] floats of bucket k,
     * with the codec parameters p; `plan` is 1 for a plan's buckets.  A
     * comm that picks a collective per bucket says here what it will pick
     * and why (the gpu engine's over NCCL: one banner line per choice on
     * process 0); nothing travels. */
    void (*announce)(sdnn_comm *c, const sdnn_codec_ops *const *codec, const size_t *n, int nb,
                     const sdnn_codec_params *p, int plan);
    /* NULL, or told the link the step has for this world (costmodel.h's
     * sdnn_link), before the buckets are announced: `how` says where it
     * came from ("measured": the step timed it, sdnn_measure_for_plan;
     * "cfg": link= or link_gbps= in the cfg).  A comm that prices a
     * collective per bucket (the gpu engine's over NCCL) prices with it
     * from then on and names it, with `how`, in its banner; until told, it
     * prices with its own default and says so.  SDNN_ERR_INVALID for a
     * link without bandwidth or with a negative latency. */
    sdnn_status (*set_link)(sdnn_comm *c, const struct sdnn_link *link, const char *how);
} sdnn_comm_ops;

struct sdnn_comm {
    const sdnn_comm_ops *ops;
    int rank;      /* this process */
    int size;      /* processes */
    double timeout_s; /* sdnn_comm_opts.timeout_s; may be changed between calls */
    void *impl;
};

/* Open backend `name` ("local", "mpi", "nccl").  Unknown names are
 * SDNN_ERR_INVALID, known but unavailable ones SDNN_ERR_UNSUPPORTED.
 * sdnn_comm_open uses SDNN_COMM_OPTS_INIT. */
sdnn_status sdnn_comm_open(const char *name, sdnn_comm **out);
sdnn_status sdnn_comm_open_opts(const char *name, const sdnn_comm_opts *opts, sdnn_comm **out);
void sdnn_comm_close(sdnn_comm *c);

/* The calls of an open handle: callers use these, never c->ops->.  Each
 * forwards to the backend (comments on sdnn_comm_ops above).  *wire (may
 * be NULL) = the bytes EACH replica sends, collective.h's one definition
 * (sdnn_wire_bytes) over the world's W = size x nin replicas, the same for
 * 1 process x 4 buffers and 2 x 2: the coded one is the mean over this
 * process's buffers of what the backend counted (a hierarchical backend
 * with several buffers: the flat world's sdnn_coded_wire_bytes / W, its
 * local stage being a memory mean); the plain one is a ring all-reduce's
 * 2(W-1)/W x 4n. */
const char *sdnn_comm_name(const sdnn_comm *c);
int sdnn_comm_hierarchical(const sdnn_comm *c);
int sdnn_comm_has_coded(const sdnn_comm *c);
/* The table's offers op for codec (0 when the table has none). */
unsigned sdnn_comm_offers(const sdnn_comm *c, const sdnn_codec_ops *codec);
/* The table's announce op (nothing when the table has none). */
void sdnn_comm_announce(sdnn_comm *c, const sdnn_codec_ops *const *codec, const size_t *n, int nb,
                        const sdnn_codec_params *p, int plan);
/* The table's set_link op (SDNN_OK and nothing when the table has none:
 * a comm that prices nothing needs no link). */
sdnn_status sdnn_comm_set_link(sdnn_comm *c, const struct sdnn_link *link, const char *how);
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
/* NULL, or why this build lacks backend `name` (its unavailable_reason). */
const char *sdnn_comm_lacks(const char *name);
/* Every backend name the registry knows, built here or not ("local, mpi,
 * nccl"), comma-separated. */
const char *sdnn_comm_names(void);
/* 1: `name` is a backend this build has (`built`); 0: a known name this
 * build lacks (mpi with MPI=0, nccl in a CPU or NCCL=0 build); -1: not a
 * backend name. */
int sdnn_comm_known(const char *name);
/* The backends this build has (`built`), comma-separated: what a cfg may
 * name ("local, mpi"). */
const char *sdnn_comm_built_names(void);

/* The reference kernel: out[i] = (in[0][i] + ... + in[nin-1][i]) * (1/nin),
 * summed in index order.  Exposed for benchmarks and other backends. */
void sdnn_mean_buffers(const float *const *in, int nin, float *out, size_t n);

/* What a backend knows when a peer went silent (sdnn_comm_silent_error). */
typedef struct sdnn_silent_peer {
    const char *backend;   /* "mpi", "nccl" */
    int rank;              /* the rank that waited */
    double waited;         /* seconds without progress */
    int peer;              /* the rank that did not answer */
    const char *peer_note; /* NULL, or text after the peer (" (process 1)") */
    const char *what;      /* what was missing ("no data from it for ring step 2 of 6") */
    double timeout;        /* the deadline, seconds */
    const char *after;     /* NULL, or text after the message ("; communicators aborted") */
} sdnn_silent_peer;

/* SDNN_ERR_COMM with the backends' one message for a silent peer:
 * "BACKEND rank R: waited W s for rank P, which did not answer (WHAT); it
 * stopped, is stuck, or waits itself for a rank that did (timeout T s)". */
sdnn_status sdnn_comm_silent_error(const sdnn_silent_peer *s);

extern const sdnn_comm_ops sdnn_comm_local_ops;
/* Between processes started by mpirun (comm_mpi.c); available() is 0 in a
 * build without MPI (MPI=0). */
extern const sdnn_comm_ops sdnn_comm_mpi_ops;
/* "nccl" (comm_nccl.c, its table in plugin/cuda/comm_tables.c in a build
 * with NCCL or simulated devices): the host side of the gpu engine's NCCL
 * exchange.  Under mpirun it is the mpi backend, used only as the
 * bootstrap (it carries the NCCL id, the trainer's scalars, broadcasts and
 * barriers); the gpu engine's comm_open claims it and runs the bucket
 * collectives on one NCCL communicator over every device of every process.
 * Unclaimed (engine=cpu), its bucket collectives are refused. */
extern const sdnn_comm_ops sdnn_comm_nccl_boot_ops;
/* The bootstrap's calls for the gpu engine (comm_nccl.c). */
sdnn_status sdnn_comm_nccl_boot_init(sdnn_comm *c);
void sdnn_comm_nccl_boot_destroy(sdnn_comm *c);
sdnn_status sdnn_comm_nccl_boot_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n);
sdnn_status sdnn_comm_nccl_boot_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                      const sdnn_codec_params *p, uint64_t stream,
                                      const float *const *in, int nin, float *const *out,
                                      size_t n, size_t *wire);
sdnn_status sdnn_comm_nccl_boot_broadcast(sdnn_comm *c, float *buf, size_t n);
sdnn_status sdnn_comm_nccl_boot_central(sdnn_comm *c, float *buf, size_t n, size_t *wire);
sdnn_status sdnn_comm_nccl_boot_barrier(sdnn_comm *c);
int sdnn_comm_nccl_boot_available(void);
/* 1 when c is the "nccl" bootstrap; sdnn_comm_nccl_claim marks that the
 * gpu engine carries its bucket collectives (then it forwards only the
 * trainer's host calls). */
int sdnn_comm_is_nccl_boot(const sdnn_comm *c);
void sdnn_comm_nccl_claim(sdnn_comm *c);

#endif
