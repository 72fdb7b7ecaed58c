/*
 * comm_nccl: the host side of backend=nccl (comm.h, sdnn_comm_nccl_boot_ops).
 *
 * The bucket collectives of backend=nccl run on the devices, on one NCCL
 * communicator that spans every device of every process; the gpu engine's
 * comm_open makes it (plugin/cuda/engine_gpu.c).  What stays on the host is
 * this bootstrap: under mpirun it opens the mpi backend and forwards to it
 * the trainer's host calls (the NCCL id's broadcast, the loss and BN
 * means of one buffer, broadcasts, barriers, stock mode's central host),
 * each bounded by timeout_s as the mpi backend is.  Alone it is a world of
 * one process.  Bucket collectives reach it only when no engine claimed it
 * (engine=cpu): those are refused, naming the backends that carry host
 * buffers.
 *
 * The ops table is in plugin/cuda/comm_tables.c for builds with a GPU
 * engine (built = the build has NCCL, real or simulated); a CPU build gets
 * the stub table below, built = 0, so that backend=nccl is refused there
 * with what the build lacks.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

typedef struct nccl_boot {
    sdnn_comm *mpi;  /* NULL in a world of one process */
    int claimed;
} nccl_boot;

static int under_mpirun(void)
{
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    return ws && atoi(ws) > 1;
}

int sdnn_comm_nccl_boot_available(void)
{
    return !under_mpirun() || sdnn_comm_mpi_ops.available();
}

sdnn_status sdnn_comm_nccl_boot_init(sdnn_comm *c)
{
    nccl_boot *b = calloc(1, sizeof *b);
    if (!b) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for backend nccl");
    if (under_mpirun()) {
        sdnn_comm_opts o = SDNN_COMM_OPTS_INIT;
        o.timeout_s = c->timeout_s;
        sdnn_status st = sdnn_comm_open_opts("mpi", &o, &b->mpi);
        if (st != SDNN_OK) {
            free(b);
            return SDNN_ERROR(st, "backend nccl: its bootstrap between processes (mpi): %s",
                              sdnn_last_error());
        }
        c->rank = b->mpi->rank;
        c->size = b->mpi->size;
    }
    c->impl = b;
    return SDNN_OK;
}

void sdnn_comm_nccl_boot_destroy(sdnn_comm *c)
{
    nccl_boot *b = c->impl;
    if (!b) return;
    sdnn_comm_close(b->mpi);
    free(b);
    c->impl = NULL;
}

int sdnn_comm_is_nccl_boot(const sdnn_comm *c)
{
    return c && c->ops && c->ops->init == sdnn_comm_nccl_boot_init;
}

void sdnn_comm_nccl_claim(sdnn_comm *c)
{
    if (sdnn_comm_is_nccl_boot(c)) ((nccl_boot *)c->impl)->claimed = 1;
}

/* The mpi backend with this handle's current deadline; NULL alone. */
static sdnn_comm *inner(sdnn_comm *c)
{
    nccl_boot *b = c->impl;
    if (b->mpi) b->mpi->timeout_s = c->timeout_s;
    return b->mpi;
}

static sdnn_status refuse_host_buckets(void)
{
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                      "backend=nccl carries device buffers: it needs engine=gpu (the cpu "
                      "engine's buckets are host memory: backend=mpi between processes, "
                      "local in one)");
}

sdnn_status sdnn_comm_nccl_boot_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                     size_t n)
{
    nccl_boot *b = c->impl;
    if (!b->claimed && nin > 1) return refuse_host_buckets();
    sdnn_comm *m = inner(c);
    if (m) return sdnn_comm_allreduce_mean(m, in, nin, out, n, NULL);
    sdnn_mean_buffers(in, nin, out, n);
    return SDNN_OK;
}

sdnn_status sdnn_comm_nccl_boot_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                      const sdnn_codec_params *p, uint64_t stream,
                                      const float *const *in, int nin, float *const *out,
                                      size_t n, size_t *wire)
{
    nccl_boot *b = c->impl;
    if (wire) *wire = 0;
    if (!b->claimed) return refuse_host_buckets();
    sdnn_comm *m = inner(c);
    if (!m)
        return SDNN_ERROR(SDNN_ERR_INTERNAL,
                          "backend nccl: a compressed mean reached the host bootstrap of a "
                          "world of one process");
    return sdnn_comm_allreduce_mean_coded(m, codec, p, stream, in, nin, out, n, wire);
}

sdnn_status sdnn_comm_nccl_boot_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    sdnn_comm *m = inner(c);
    return m ? sdnn_comm_broadcast(m, buf, n) : SDNN_OK;
}

sdnn_status sdnn_comm_nccl_boot_central(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    sdnn_comm *m = inner(c);
    return m ? sdnn_comm_central_mean(m, buf, n, wire) : SDNN_OK;
}

sdnn_status sdnn_comm_nccl_boot_barrier(sdnn_comm *c)
{
    sdnn_comm *m = inner(c);
    return m ? sdnn_comm_barrier(m) : SDNN_OK;
}

#if !SDNN_GPU_ENGINE
/* A CPU build: the name is known, the backend is not built. */
static int no_nccl_here(void) { return 0; }

static const char *cpu_build(void)
{
    return "a CPU build has no GPU engine and no NCCL (make GPU=1 with NCCL, or GPU=sim for "
           "simulated devices)";
}

const sdnn_comm_ops sdnn_comm_nccl_boot_ops = {
    .name = "nccl",
    .available = no_nccl_here,
    .init = sdnn_comm_nccl_boot_init,
    .allreduce_mean = sdnn_comm_nccl_boot_mean,
    .allreduce_mean_coded = sdnn_comm_nccl_boot_coded,
    .broadcast = sdnn_comm_nccl_boot_broadcast,
    .central_mean = sdnn_comm_nccl_boot_central,
    .barrier = sdnn_comm_nccl_boot_barrier,
    .destroy = sdnn_comm_nccl_boot_destroy,
    .hierarchical = 0,
    .unavailable_reason = cpu_build,
    .built = 0,
};
#endif
