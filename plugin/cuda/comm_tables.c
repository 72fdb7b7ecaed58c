/*
 * comm_tables: the ops tables of the device backends, in C so that the
 * designated initializers follow comm.h's struct as it grows.  The
 * functions are in comm_gpu.cu.
 */
#include "gpu_comm.h"

#include <stddef.h>

static const char *no_device(void)
{
    return "no CUDA device (or driver) on this machine";
}

static const char *no_nccl(void)
{
    return SDNN_NCCL ? "no CUDA device (or driver) on this machine"
                     : "this build has no NCCL (NCCL=0)";
}

/* Stock mode between processes averages through process 0's host memory
 * (comm_mpi.c); the device backends have no such path. */
static sdnn_status no_central(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    (void)c; (void)buf; (void)n;
    if (wire) *wire = 0;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                      "stock mode's central host between processes runs over backend=mpi, "
                      "not over the device backends");
}

/* Every local buffer is a rank of the ring (world = all devices of all
 * processes), not a hierarchy of processes. */
const sdnn_comm_ops sdnn_comm_nccl_ops = {
    .name = "nccl",
    .available = sdnn_gpucomm_nccl_available,
    .init = sdnn_gpucomm_nccl_init,
    .allreduce_mean = sdnn_gpucomm_allreduce_mean,
    .allreduce_mean_coded = sdnn_gpucomm_allreduce_mean_coded,
    .broadcast = sdnn_gpucomm_broadcast,
    .central_mean = no_central,
    .barrier = sdnn_gpucomm_barrier,
    .destroy = sdnn_gpucomm_destroy,
    .hierarchical = 0,
    .unavailable_reason = no_nccl,
};

const sdnn_comm_ops sdnn_comm_device_ops = {
    .name = "device",
    .available = sdnn_gpucomm_available,
    .init = sdnn_gpucomm_device_init,
    .allreduce_mean = sdnn_gpucomm_allreduce_mean,
    .allreduce_mean_coded = sdnn_gpucomm_allreduce_mean_coded,
    .broadcast = sdnn_gpucomm_broadcast,
    .central_mean = no_central,
    .barrier = sdnn_gpucomm_barrier,
    .destroy = sdnn_gpucomm_destroy,
    .hierarchical = 0,
    .unavailable_reason = no_device,
};

/* backend=nccl's host side (plugin/comm/comm_nccl.c): built when this build
 * has NCCL (real, or the simulated one of GPU=sim). */
static const char *boot_lacks(void)
{
    return SDNN_NCCL ? "under mpirun it needs the mpi backend (MPI=1) for its bootstrap"
                     : "this build has no NCCL (NCCL=0; build with NCCL=1 and NCCL_HOME)";
}

static int boot_available(void) { return SDNN_NCCL && sdnn_comm_nccl_boot_available(); }

const sdnn_comm_ops sdnn_comm_nccl_boot_ops = {
    .name = "nccl",
    .available = boot_available,
    .init = sdnn_comm_nccl_boot_init,
    .allreduce_mean = sdnn_comm_nccl_boot_mean,
    .allreduce_mean_coded = sdnn_comm_nccl_boot_coded,
    .broadcast = sdnn_comm_nccl_boot_broadcast,
    .central_mean = sdnn_comm_nccl_boot_central,
    .barrier = sdnn_comm_nccl_boot_barrier,
    .destroy = sdnn_comm_nccl_boot_destroy,
    .hierarchical = 0,
    .unavailable_reason = boot_lacks,
    .built = SDNN_NCCL,
};
