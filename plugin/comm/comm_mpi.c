/*
 * comm_mpi: the backend between processes (backend=mpi): the handle (init,
 * exit, the nin agreement) and its operations.  The ideas it drives live in
 * their own files: mpi_wait.c (the one poll loop and its deadline),
 * mpi_ring.c (the plain hierarchical ring), mpi_coded.c (the coded ring's
 * transport), mpi_central.c (stock mode's central host); mpi_internal.h is
 * what they share.  One MPI rank per
 * process, started by mpirun; each process may hold several local buffers
 * (replica threads).  The backend is hierarchical: a process first averages
 * its local buffers with sdnn_mean_buffers (fp32, index order), then the
 * processes average those means.  The mean of the means is the mean of all
 * buffers only when every process holds the same number of them, so the
 * first call (and any call that changes nin) checks that with an allreduce
 * and refuses otherwise.
 *
 * Plain allreduce_mean: the bytes are carried by our own ring, not by
 * MPI_Allreduce (which reached ~50-60% of a shaped link): reduce-scatter
 * then all-gather over the P processes, every chunk cut into segments
 * (SDNN_MPI_SEGMENT_KB, default 60 KiB) with up to MP_DEPTH receives and
 * MP_DEPTH sends in flight, so a segment of step s+1 leaves while step s is
 * still arriving.  Segments stay below OpenMPI's TCP eager limit (64 KiB):
 * a larger message waits for the receiver's go-ahead, and over TCP that
 * small reply queues behind the megabytes the receiver is itself sending
 * the other way round the ring; with 256 KiB segments a shaped 1 Gbit/s
 * link carried ~55%, with 60 KiB ~92% (scripts/netlab.sh).
 *
 * Chunks are sdnn_ring_chunk(n, 1, P, c); chunk c is summed in the fixed
 * order c, c+1, ..., c-1 (mod P), in fp32, and the owner (rank c-1)
 * multiplies by 1.0f/P: the same arithmetic as collective.c's ring with the
 * identity codec, so the plain path equals the local backend's coded
 * "none" ring over P ranks holding the processes' means bit for bit, and
 * every process ends with the same bits.
 *
 * Coded allreduce_mean_coded: collective.c's sdnn_coded_allreduce_mean with
 * each PROCESS one rank of the ring (its local buffers averaged in fp32
 * first) over an MPI transport whose shifts are cut into the same eager
 * segments.  The local backend instead makes every
 * replica a rank.  With one buffer per process the two agree bit for bit;
 * with nin > 1 per process the rings differ (P ranks of local means vs
 * P x nin ranks, other encode points and summation order), so the
 * reference for MPI is the local backend over P ranks that hold the
 * processes' means.
 *
 * Threads: MPI_THREAD_SERIALIZED (the exchange's comm thread makes the
 * collectives, the main thread init, broadcast, barrier and close; never
 * two at once).  A process-wide mutex serialises every MPI call of this
 * file, so two handles used from two threads stay legal too.
 *
 * Waits: every MPI operation is nonblocking and polled (spin, then sleeps
 * growing to 1 ms so a waiting comm thread leaves the core to the replica
 * threads) against a deadline of timeout_s without progress; the message
 * names the peer that did not answer.  MPI_ERRORS_RETURN is set on
 * MPI_COMM_WORLD and on our duplicate of it, so MPI failures come back as
 * codes.  After a failure the handle refuses every call, and its buffers
 * are never freed (MPI may still write into a cancelled receive).
 *
 * MPI is initialised by the first open unless the program did it; then an
 * on_exit handler finalises it when the process exits with status 0, no
 * collective failed and every process reaches a bounded barrier.
 * Otherwise it exits without MPI_Finalize and mpirun ends the job.
 */
#include "comm.h"

#if SDNN_MPI

#include "mpi_internal.h"

#include <errno.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below OpenMPI's TCP eager limit (64 KiB with headers), see the top. */
#define MP_SEGMENT_DEFAULT_KB 60
#define MP_BCAST_FLOATS ((size_t)1 << 20)

/* Every MPI call of the backend holds mp_lock. */
static pthread_mutex_t mp_lock = PTHREAD_MUTEX_INITIALIZER;
static double mp_exit_timeout = SDNN_COMM_TIMEOUT_S;  /* of the latest call */

/* Failed handles stay here, reachable and never freed. */
static mp_impl *mp_failed_list;

static int mod(int a, int m) { return ((a % m) + m) % m; }

static sdnn_status usable(const mp_impl *M)
{
    if (M->failed)
        return SDNN_ERROR(SDNN_ERR_ABORTED,
                          "mpi rank %d: an earlier collective on this handle failed; close it",
                          M->rank);
    return SDNN_OK;
}

static sdnn_status grow_work(mp_impl *M, size_t n)
{
    size_t have = M->work_n * sizeof(float);
    void *p = M->work;
    SDNN_CHECK(sdnn_mpi_grow(&p, &have, n * sizeof(float), "the ring buffer", M->rank));
    M->work = p;
    M->work_n = have / sizeof(float);
    return SDNN_OK;
}

/* Every process must hold the same number of local buffers. */
static sdnn_status agree_nin(mp_impl *M, int nin)
{
    if (M->nin == nin) return SDNN_OK;
    M->agree[0] = nin;
    M->agree[1] = -nin;
    MPI_Request req;
    int rc = MPI_Iallreduce(M->agree, M->agree + 2, 2, MPI_INT, MPI_MAX, M->comm, &req);
    if (rc != MPI_SUCCESS) {
        char buf[MPI_MAX_ERROR_STRING];
        return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Iallreduce: %s", M->rank,
                          sdnn_mpi_errstr(rc, buf));
    }
    SDNN_CHECK(sdnn_mpi_wait_collective(M, &req,
                                        "checking that every process holds as many buffers"));
    const int hi = M->agree[2], lo = -M->agree[3];
    if (hi != lo)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "mpi rank %d: the processes hold between %d and %d local buffers "
                          "(this one %d): the mean of the processes' means is the mean of all "
                          "buffers only when every process holds as many (give every process "
                          "the same replica count)",
                          M->rank, lo, hi, nin);
    M->nin = nin;
    return SDNN_OK;
}

/* ---- init, exit ------------------------------------------------------------ */

static int mp_launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static int mp_available(void) { return mp_launched(); }

static const char *mp_unavailable_reason(void)
{
    return "this process was not started by mpirun (mpirun -np N ./darknet ...)";
}

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown level";
    }
}

/* Finalise only after a clean exit that every process reaches; after a
 * failure (or a non-zero exit) MPI_Finalize could wait for a process that
 * is gone, and mpirun ends the job anyway. */
static void mp_at_exit(int status, void *arg)
{
    (void)arg;
    if (pthread_mutex_trylock(&mp_lock) != 0) return;   /* a thread is inside MPI */
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized && status == 0 && !sdnn_mpi_any_failed) {
        MPI_Request req;
        mp_impl probe = {.rank = -1, .size = 0, .timeout = mp_exit_timeout};
        MPI_Comm_rank(MPI_COMM_WORLD, &probe.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &probe.size);
        if (MPI_Ibarrier(MPI_COMM_WORLD, &req) == MPI_SUCCESS &&
            sdnn_mpi_wait_collective(&probe, &req, "the barrier before MPI_Finalize") == SDNN_OK) {
#if defined(__SANITIZE_ADDRESS__)
            /* MPI_Finalize unloads OpenMPI's components, after which the
             * check at exit can no longer tell their leaks from ours
             * (tests/lsan.supp names OpenMPI's libraries): check now. */
            __lsan_do_leak_check();
#endif
            MPI_Finalize();
        } else
            fprintf(stderr, "scalednn: mpi rank %d exits without MPI_Finalize: %s\n", probe.rank,
                    sdnn_last_error());
    }
    pthread_mutex_unlock(&mp_lock);
}

static size_t env_segment_floats(void)
{
    const char *s = getenv("SDNN_MPI_SEGMENT_KB");
    long kb = MP_SEGMENT_DEFAULT_KB;
    if (s && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (!errno && *end == '\0' && v >= 1 && v <= 1L << 20) kb = v;
        else fprintf(stderr, "scalednn: SDNN_MPI_SEGMENT_KB=%s ignored (1..1048576)\n", s);
    }
    return (size_t)kb * 1024 / sizeof(float);
}

static sdnn_status mp_init_locked(sdnn_comm *c, mp_impl *M)
{
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE, rc;
    char ebuf[MPI_MAX_ERROR_STRING];
    MPI_Finalized(&finalized);
    if (finalized)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "mpi: MPI was already finalised in this process and cannot start again");
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return SDNN_ERROR(SDNN_ERR_COMM, "mpi: MPI_Init_thread failed: %s",
                              sdnn_mpi_errstr(rc, ebuf));
        on_exit(mp_at_exit, NULL);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "mpi: the MPI library provides %s, the mpi backend needs "
                          "MPI_THREAD_SERIALIZED or more (its calls come from the exchange's comm "
                          "thread and from the main thread, one at a time)%s",
                          thread_level_name(provided),
                          inited ? "; the program initialised MPI itself: use MPI_Init_thread "
                                   "with MPI_THREAD_SERIALIZED"
                                 : "");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &M->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &M->size);
    /* Our own communicator: our tags never meet the program's messages. */
    MPI_Request req;
    rc = MPI_Comm_idup(MPI_COMM_WORLD, &M->comm, &req);
    if (rc != MPI_SUCCESS) {
        M->comm = MPI_COMM_NULL;
        return SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Comm_idup: %s", M->rank,
                          sdnn_mpi_errstr(rc, ebuf));
    }
    M->timeout = c->timeout_s;
    SDNN_CHECK(sdnn_mpi_wait_collective(M, &req, "duplicating MPI_COMM_WORLD"));
    MPI_Comm_set_errhandler(M->comm, MPI_ERRORS_RETURN);
    M->left = mod(M->rank - 1, M->size);
    M->right = mod(M->rank + 1, M->size);
    M->seg = env_segment_floats();
    M->t.ops = &sdnn_mpi_transport_ops;
    M->t.rank = M->rank;
    M->t.size = M->size;
    M->t.impl = M;
    mp_exit_timeout = c->timeout_s;
    c->rank = M->rank;
    c->size = M->size;
    return SDNN_OK;
}

static void release(mp_impl *M)
{
    if (M->failed) {
        /* MPI may still own these buffers. */
        M->next_failed = mp_failed_list;
        mp_failed_list = M;
        return;
    }
    if (M->comm != MPI_COMM_NULL) MPI_Comm_free(&M->comm);
    free(M->work);
    free(M->inoff);
    free(M->slots);
    free(M->scratch);
    free(M->bounce);
    free(M->cslots);
    free(M->creq);
    free(M->crecv);
    free(M);
}

static sdnn_status mp_init(sdnn_comm *c)
{
    mp_impl *M = calloc(1, sizeof *M);
    if (!M) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the mpi backend");
    M->comm = MPI_COMM_NULL;
    pthread_mutex_lock(&mp_lock);
    sdnn_status st = mp_init_locked(c, M);
    if (st == SDNN_OK) {
        M->slots = malloc((size_t)MP_DEPTH * M->seg * sizeof(float));
        if (!M->slots) st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the mpi ring's segments");
    }
    if (st != SDNN_OK) release(M);
    else c->impl = M;
    pthread_mutex_unlock(&mp_lock);
    return st;
}

static void mp_destroy(sdnn_comm *c)
{
    mp_impl *M = c->impl;
    if (!M) return;
    pthread_mutex_lock(&mp_lock);
    release(M);
    pthread_mutex_unlock(&mp_lock);
    c->impl = NULL;
}

/* ---- the operations -------------------------------------------------------- */

static sdnn_status mp_begin(sdnn_comm *c, mp_impl **out)
{
    mp_impl *M = c->impl;
    pthread_mutex_lock(&mp_lock);
    sdnn_status st = usable(M);
    if (st != SDNN_OK) {
        pthread_mutex_unlock(&mp_lock);
        return st;
    }
    M->timeout = c->timeout_s > 0 ? c->timeout_s : SDNN_COMM_TIMEOUT_S;
    mp_exit_timeout = M->timeout;
    *out = M;
    return SDNN_OK;
}

static sdnn_status mp_end(sdnn_status st)
{
    pthread_mutex_unlock(&mp_lock);
    return st;
}

static sdnn_status mp_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n)
{
    if (nin < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "allreduce over %d buffers", nin);
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    sdnn_status st = agree_nin(M, nin);
    if (st != SDNN_OK || n == 0) return mp_end(st);
    if (M->size == 1) {
        sdnn_mean_buffers(in, nin, out, n);
        return mp_end(SDNN_OK);
    }
    if ((st = grow_work(M, n)) != SDNN_OK) return mp_end(st);
    if (M->inoff_n < nin) {
        const float **p = realloc(M->inoff, (size_t)nin * sizeof *p);
        if (!p) return mp_end(SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d buffer pointers", nin));
        M->inoff = p;
        M->inoff_n = nin;
    }
    return mp_end(sdnn_mpi_ring_allreduce(M, n, in, nin, out));
}

static sdnn_status mp_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin, float *const *out,
                                           size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    if (nin < 1 || !codec)
        return SDNN_ERROR(SDNN_ERR_INVALID, "coded allreduce over %d buffers", nin);
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    sdnn_status st = agree_nin(M, nin);
    if (st != SDNN_OK || n == 0) return mp_end(st);
    const float *src = in[0];
    if (nin > 1) {
        if ((st = grow_work(M, n)) != SDNN_OK) return mp_end(st);
        sdnn_mean_buffers(in, nin, M->work, n);
        src = M->work;
    }
    void *scratch = M->scratch;
    st = sdnn_mpi_grow(&scratch, &M->scratch_len, sdnn_coded_scratch_bytes(codec, p, n, M->size),
              "the compressed ring's scratch", M->rank);
    M->scratch = scratch;
    if (st != SDNN_OK) return mp_end(st);
    M->t.sent = 0;
    st = sdnn_coded_allreduce_mean(&M->t, codec, p, stream, src, out[0], n, M->scratch);
    if (st == SDNN_OK) {
        for (int r = 1; r < nin; ++r)
            if (out[r] != out[0]) memcpy(out[r], out[0], n * sizeof(float));
        if (wire) *wire = M->t.sent;
    }
    return mp_end(st);
}

static sdnn_status mp_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1 || n == 0) return mp_end(SDNN_OK);
    if (!M->bounce && !(M->bounce = malloc(MP_BCAST_FLOATS * sizeof(float))))
        return mp_end(SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the broadcast buffer"));
    /* Through our own buffer: after a timeout MPI may still write into it. */
    for (size_t lo = 0; lo < n; lo += MP_BCAST_FLOATS) {
        const size_t len = n - lo < MP_BCAST_FLOATS ? n - lo : MP_BCAST_FLOATS;
        if (M->rank == 0) memcpy(M->bounce, buf + lo, len * sizeof(float));
        MPI_Request req;
        char ebuf[MPI_MAX_ERROR_STRING];
        int rc = MPI_Ibcast(M->bounce, (int)len, MPI_FLOAT, 0, M->comm, &req);
        if (rc != MPI_SUCCESS)
            return mp_end(SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Ibcast: %s", M->rank,
                                     sdnn_mpi_errstr(rc, ebuf)));
        sdnn_status st = sdnn_mpi_wait_collective(M, &req, "broadcast from rank 0");
        if (st != SDNN_OK) return mp_end(st);
        if (M->rank != 0) memcpy(buf + lo, M->bounce, len * sizeof(float));
    }
    return mp_end(SDNN_OK);
}

static sdnn_status mp_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1 || n == 0) return mp_end(SDNN_OK);
    sdnn_status st = grow_work(M, n);
    if (st == SDNN_OK) st = sdnn_mpi_central_buffers(M);
    if (st != SDNN_OK) return mp_end(st);
    /* Through our own buffer: after a timeout MPI may still write into it. */
    memcpy(M->work, buf, n * sizeof(float));
    st = sdnn_mpi_central_mean(M, n);
    if (st == SDNN_OK) {
        memcpy(buf, M->work, n * sizeof(float));
        if (wire) *wire = (M->rank == 0 ? (size_t)(M->size - 1) : 1) * n * sizeof(float);
    }
    return mp_end(st);
}

static sdnn_status mp_barrier(sdnn_comm *c)
{
    mp_impl *M;
    SDNN_CHECK(mp_begin(c, &M));
    if (M->size == 1) return mp_end(SDNN_OK);
    MPI_Request req;
    char ebuf[MPI_MAX_ERROR_STRING];
    int rc = MPI_Ibarrier(M->comm, &req);
    if (rc != MPI_SUCCESS)
        return mp_end(SDNN_ERROR(SDNN_ERR_COMM, "mpi rank %d: MPI_Ibarrier: %s", M->rank,
                                 sdnn_mpi_errstr(rc, ebuf)));
    return mp_end(sdnn_mpi_wait_collective(M, &req, "barrier"));
}

const sdnn_comm_ops sdnn_comm_mpi_ops = {
    .name = "mpi",
    .built = 1,
    .available = mp_available,
    .init = mp_init,
    .allreduce_mean = mp_allreduce_mean,
    .allreduce_mean_coded = mp_allreduce_mean_coded,
    .broadcast = mp_broadcast,
    .central_mean = mp_central_mean,
    .barrier = mp_barrier,
    .destroy = mp_destroy,
    .hierarchical = 1,
    .unavailable_reason = mp_unavailable_reason,
};

#else /* !SDNN_MPI: the name is known, the backend is not built. */

static int mp_available(void) { return 0; }

static const char *mp_unavailable_reason(void)
{
    return "built without MPI (install libopenmpi-dev openmpi-bin and build with MPI=1)";
}

static sdnn_status mp_not_built(void)
{
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "comm backend mpi: %s", mp_unavailable_reason());
}

static sdnn_status mp_init(sdnn_comm *c)
{
    (void)c;
    return mp_not_built();
}

static sdnn_status mp_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n)
{
    (void)c; (void)in; (void)nin; (void)out; (void)n;
    return mp_not_built();
}

static sdnn_status mp_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin, float *const *out,
                                           size_t n, size_t *wire)
{
    (void)c; (void)codec; (void)p; (void)stream; (void)in; (void)nin; (void)out; (void)n;
    if (wire) *wire = 0;
    return mp_not_built();
}

static sdnn_status mp_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    (void)c; (void)buf; (void)n;
    return mp_not_built();
}

static sdnn_status mp_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    (void)c; (void)buf; (void)n;
    if (wire) *wire = 0;
    return mp_not_built();
}

static sdnn_status mp_barrier(sdnn_comm *c)
{
    (void)c;
    return mp_not_built();
}

static void mp_destroy(sdnn_comm *c) { (void)c; }

const sdnn_comm_ops sdnn_comm_mpi_ops = {
    .name = "mpi",
    .built = 0,
    .available = mp_available,
    .init = mp_init,
    .allreduce_mean = mp_allreduce_mean,
    .allreduce_mean_coded = mp_allreduce_mean_coded,
    .broadcast = mp_broadcast,
    .central_mean = mp_central_mean,
    .barrier = mp_barrier,
    .destroy = mp_destroy,
    .hierarchical = 1,
    .unavailable_reason = mp_unavailable_reason,
};

#endif
