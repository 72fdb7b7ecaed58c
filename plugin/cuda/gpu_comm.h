/*
 * gpu_comm: the comm backends on devices (comm_gpu.cu), declared apart
 * from gpu.h so that code without darknet.h can use them.
 *
 *   "nccl"    buffers are device pointers, in[r] on the r-th device of the
 *             process.  sdnn_comm_open("nccl") (the registry) opens one
 *             process driving every visible device (ncclCommInitAll;
 *             SDNN_NCCL_DEVICES=0,1,... picks them); several processes join
 *             one world with an NCCL id shared out of band (MPI).
 *   "device"  replicas on one physical device (virtual devices); buffers
 *             are device pointers on it (SDNN_GPU_DEVICE, default 0).  The
 *             plain mean equals "local" bit for bit, and so does every
 *             coded mean (the device ring is collective.c's algorithm).
 */
#ifndef SDNN_CUDA_GPU_COMM_H
#define SDNN_CUDA_GPU_COMM_H

#include "scalednn.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "comm.h"
#include "costmodel.h"

extern const sdnn_comm_ops sdnn_comm_nccl_ops;
extern const sdnn_comm_ops sdnn_comm_device_ops;

#define SDNN_NCCL_ID_BYTES 128
/* A fresh NCCL unique id (rank 0 makes it, MPI broadcasts it). */
sdnn_status sdnn_gpu_nccl_id(unsigned char id[SDNN_NCCL_ID_BYTES]);
/* This process's part of a world of `nranks` NCCL ranks: its devices
 * devs[0..ndev-1] are ranks first_rank .. first_rank + ndev - 1. */
sdnn_status sdnn_gpu_comm_open_nccl(const unsigned char id[SDNN_NCCL_ID_BYTES], int nranks,
                                    int first_rank, const int *devs, int ndev, sdnn_comm **out);
/* One process, all of devs[] (ncclCommInitAll). */
sdnn_status sdnn_gpu_comm_open_nccl_local(const int *devs, int ndev, sdnn_comm **out);
sdnn_status sdnn_gpu_comm_open_device(int device, sdnn_comm **out);

/* The tables' entries (comm_gpu.cu), gathered by comm_tables.c. */
int sdnn_gpucomm_available(void);
int sdnn_gpucomm_nccl_available(void);
sdnn_status sdnn_gpucomm_nccl_init(sdnn_comm *c);
sdnn_status sdnn_gpucomm_device_init(sdnn_comm *c);
void sdnn_gpucomm_destroy(sdnn_comm *c);
sdnn_status sdnn_gpucomm_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                        size_t n);
sdnn_status sdnn_gpucomm_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                              const sdnn_codec_params *p, uint64_t stream,
                                              const float *const *in, int nin, float *const *out,
                                              size_t n, size_t *wire);
sdnn_status sdnn_gpucomm_broadcast(sdnn_comm *c, float *buf, size_t n);
sdnn_status sdnn_gpucomm_barrier(sdnn_comm *c);

/* How the gpu engine's comm prices a bucket of n floats with codec (on the
 * link sdnn_comm_set_link gave it, until then costmodel.c's nvlink4): the
 * model's environment and codec model (env->codecs = m), the collectives
 * it offers the codec (SDNN_CM_OFFERS bits; 0 over device copies:
 * collective.c's way only) and the one it takes (tests hold each to its
 * own reference).  SDNN_ERR_INVALID for another comm. */
sdnn_status sdnn_gpu_engine_comm_pricing(const sdnn_comm *c, const sdnn_codec_ops *codec,
                                         const sdnn_codec_params *p, size_t n,
                                         sdnn_cm_env *env, sdnn_codec_model *m,
                                         unsigned *offers, sdnn_cm_coll *path);

#ifdef __cplusplus
}
#endif
#endif
