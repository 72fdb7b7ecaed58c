/*
 * devmodel: per-layer step times of a network on a named GPU, from the
 * device's published fp32 throughput and memory bandwidth (a roofline per
 * layer and pass, plus a launch cost per kernel), for `scalednn simulate`
 * on GPU topologies where this machine's CPU profile would make compute
 * look 100x slower than it is and communication free.
 *
 * A model, not a measurement: it knows each layer's floating-point work and
 * the bytes it must read and write, not cuDNN's algorithm choices or the
 * caches.  A profile measured on a GPU (`--profile FILE`) replaces it.
 */
#ifndef SDNN_DEVMODEL_H
#define SDNN_DEVMODEL_H

#include "costmodel.h"
#include "scalednn.h"

#include <darknet.h>

typedef struct sdnn_device_model {
    const char *name;       /* registry name, e.g. "v100" */
    const char *desc;       /* the product */
    double fp32_flops;      /* published peak fp32 FLOP/s (no tensor cores) */
    double mem_Bps;         /* published peak memory bandwidth, bytes/s */
    double mem_gib;         /* device memory */
    double compute_eff;     /* fraction of the peak a convolution/gemm reaches */
    double mem_eff;         /* fraction of the bandwidth an element kernel reaches */
    double launch_s;        /* cost of one kernel launch on the stream */
    double host_Bps;        /* device <-> host copies (YOLO/region loss on the host) */
} sdnn_device_model;

/* The named model, or NULL.  Names: sdnn_device_model_names(). */
const sdnn_device_model *sdnn_device_model_find(const char *name);
/* "v100, v100-pcie, t4, ..." */
const char *sdnn_device_model_names(void);

/* The work of one layer pass, as the model counts it. */
typedef struct sdnn_layer_work {
    double flops;           /* floating-point operations */
    double bytes;           /* bytes read and written in device memory */
    double host_bytes;      /* bytes copied between device and host */
    int kernels;            /* kernel launches */
} sdnn_layer_work;

/* Forward, backward and update work of layer i of net (batch images). */
void sdnn_layer_work_of(const network *net, int i, sdnn_layer_work *fwd, sdnn_layer_work *bwd,
                        sdnn_layer_work *upd);
/* Time of one pass: max(flops / (peak x eff), bytes / (bandwidth x eff)) +
 * host bytes / host rate + launches x launch cost. */
double sdnn_device_model_time(const sdnn_device_model *d, const sdnn_layer_work *w);

/* A profile of net on device d, laid out like sdnn_profile_network's
 * (same layers, bytes, tensors, batch, subdivisions; layers at or before a
 * stopbackward run no backward). */
sdnn_status sdnn_device_model_profile(const network *net, const sdnn_device_model *d,
                                      sdnn_cost_profile *out);

/* Encode (= decode) rate of a codec on the device, in fp32 input bytes/s:
 * an element kernel that reads 4 bytes and writes 4 x ratio per value
 * (`passes` such sweeps, e.g. 3 for a top-k selection). */
double sdnn_device_model_codec_Bps(const sdnn_device_model *d, double ratio, int passes);

#endif
