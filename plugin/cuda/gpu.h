/*
 * gpu: the GPU engine's device API (make GPU=1): device network, preload ring.
 *
 * A device mirror of a CPU `network` built by Debian's libdarknet: the
 * engine reads the CPU network's layers (this header includes darknet.h
 * without GPU, so `layer` has the CPU build's layout), keeps every device
 * buffer in structures of its own, and runs forward, backward and
 * Darknet's update on the device.  The CPU network stays the owner of the
 * model: weights go to the device at creation (sdnn_gpu_net_push) and come
 * back before every save (sdnn_gpu_net_pull); YOLO and region losses are
 * computed by libdarknet's own CPU layers from the device output, as
 * Darknet's GPU build does.
 *
 * Without a CUDA device (or driver) every entry point that needs one
 * returns SDNN_ERR_UNSUPPORTED with "no CUDA device ..." in
 * sdnn_last_error(); nothing crashes and nothing exits.
 *
 * Several networks may share one virtual device (sdnn_gpu_vdev: a device,
 * its own streams and library handles); several virtual devices may share
 * one physical device.
 *
 * How training drives it: the trainer (plugin/step/trainer.c) on the gpu
 * engine (engine_gpu.c, engine.h's table): one sdnn_gpu_net per replica,
 * the loader's batches fed into each device's preload ring ahead of the
 * step that trains them (sdnn_trainer_feed, preload=, split=).
 */
#ifndef SDNN_CUDA_GPU_H
#define SDNN_CUDA_GPU_H

#include "comm.h"
#include "gpu_comm.h"
#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices ------------------------------------------------------------------ */

/* 1 when at least one CUDA device can be used. */
int sdnn_gpu_available(void);
sdnn_status sdnn_gpu_device_count(int *n);
/* "0: NVIDIA H200, sm_90, 132 SMs, 139.8 GiB, runtime 13000, driver 13000" */
sdnn_status sdnn_gpu_device_name(int dev, char *buf, size_t len);

typedef struct sdnn_gpu_options {
    int device;            /* physical device of the virtual device */
    int tf32;              /* let cuDNN/cuBLAS use TF32 (faster, not fp32-exact) */
    int deterministic;     /* deterministic cuDNN algorithms only (default 1) */
    size_t workspace_mb;   /* cap on a convolution's cuDNN workspace */
} sdnn_gpu_options;

#define SDNN_GPU_OPTIONS_INIT { 0, 0, 1, 512 }

/* A virtual device: streams (compute, copy, comm) and handles of its own on
 * a physical device. */
typedef struct sdnn_dctx sdnn_gpu_vdev;
sdnn_status sdnn_gpu_vdev_open(const sdnn_gpu_options *o, sdnn_gpu_vdev **out);
void sdnn_gpu_vdev_close(sdnn_gpu_vdev *v);
sdnn_status sdnn_gpu_vdev_sync(sdnn_gpu_vdev *v);

/* ---- one network on one virtual device ------------------------------------------ */

typedef struct sdnn_gpu_net sdnn_gpu_net;

/* Mirror `net` on `vd` (neither is owned; both must outlive the mirror) and
 * copy its parameters, running statistics and update buffers to the
 * device.  A layer type the engine does not run (see sdnn_gpu_layer_support)
 * is SDNN_ERR_UNSUPPORTED naming the layer; so is adam. */
sdnn_status sdnn_gpu_net_create(network *net, sdnn_gpu_vdev *vd, sdnn_gpu_net **out);
void sdnn_gpu_net_destroy(sdnn_gpu_net *g);
network *sdnn_gpu_net_host(sdnn_gpu_net *g);
/* What the net holds beside its layers' buffers and the vdev's workspace:
 * device bytes (the two parameter arenas, the net's own input and truth
 * buffers) and pinned host bytes (the host-loss input, output and delta of
 * the largest head, the staging of
 * sdnn_gpu_net_train).  The input, truth and staging buffers are made by
 * the first call that needs them (sdnn_gpu_net_train, _set_input,
 * _predict, _layer_forward, the INPUT and TRUTH tensors), so the gpu
 * engine's nets, which read their rows from the preload rings, hold none. */
void sdnn_gpu_net_memory(const sdnn_gpu_net *g, size_t *device, size_t *pinned);
sdnn_gpu_vdev *sdnn_gpu_net_vdev(sdnn_gpu_net *g);

/* SDNN_OK when the engine runs layer `l`; else SDNN_ERR_UNSUPPORTED with the
 * reason recorded. */
sdnn_status sdnn_gpu_layer_support(const network *net, int i);

/* Host -> device: weights, biases, scales, running statistics and update
 * buffers.  Device -> host: the same (call before every save). */
sdnn_status sdnn_gpu_net_push(sdnn_gpu_net *g);
sdnn_status sdnn_gpu_net_pull(sdnn_gpu_net *g);
/* Some of them (SDNN_GPU_MOVE_* flags): to_device 1 is a push, 0 a pull.
 * SDNN_GPU_MOVE_FORWARD (a pull only, not in ALL): what the last forward
 * decided, into the CPU network's buffers: every device-computed layer's
 * output, maxpool's choices (indexes), the [yolo]/[region] deltas the
 * device's backward read and dropout's draws. */
enum { SDNN_GPU_MOVE_PARAMS = 1, SDNN_GPU_MOVE_UPDATES = 2, SDNN_GPU_MOVE_BNSTATS = 4,
       SDNN_GPU_MOVE_ALL = 7, SDNN_GPU_MOVE_FORWARD = 8 };
sdnn_status sdnn_gpu_net_move(sdnn_gpu_net *g, int to_device, unsigned what);

/* Darknet's train_network on the device: d holds a multiple of net->batch
 * rows; every net->batch rows are one forward/backward, `seen` advances by
 * net->batch each time and Darknet's update runs when a whole
 * batch x subdivisions has been seen.  *loss as train_network returns it. */
sdnn_status sdnn_gpu_net_train(sdnn_gpu_net *g, data d, float *loss);

/* The parts of one mini-batch (net->batch rows).  X and Y are device
 * pointers (NULL: the net's own input/truth buffers, filled with
 * sdnn_gpu_net_set_input); Y_host is the same truth on the host (YOLO and
 * region losses need it; NULL when not training).  *cost: Darknet's
 * network cost (mean over layers with a cost). */
sdnn_status sdnn_gpu_net_set_input(sdnn_gpu_net *g, const float *X_host, const float *Y_host);
sdnn_status sdnn_gpu_net_forward(sdnn_gpu_net *g, const float *X, const float *Y,
                                 const float *Y_host, int train, float *cost);
sdnn_status sdnn_gpu_net_backward(sdnn_gpu_net *g);
/* Darknet's update_network with the rate of the current `seen`. */
sdnn_status sdnn_gpu_net_update(sdnn_gpu_net *g);
/* Darknet's train_network on rows already on the device (X, Y; Y_host the
 * same truth on the host).  do_update = 0 leaves the update to the caller
 * (the exchange runs between backward and update). */
sdnn_status sdnn_gpu_net_train_rows(sdnn_gpu_net *g, const float *X, const float *Y,
                                    const float *Y_host, int rows, int do_update, float *loss);
/* Darknet's update for layers lo..hi only (the layers of one bucket). */
sdnn_status sdnn_gpu_net_update_layers(sdnn_gpu_net *g, int lo, int hi);
/* Inference of batch rows X_host -> out_host (net->outputs x batch). */
sdnn_status sdnn_gpu_net_predict(sdnn_gpu_net *g, const float *X_host, float *out_host);

/* Called on the host after the backward of layer i has been queued on the
 * compute stream (the exchange records its bucket events here). */
typedef sdnn_status (*sdnn_gpu_backward_hook)(void *ctx, sdnn_gpu_net *g, int layer);
void sdnn_gpu_net_set_backward_hook(sdnn_gpu_net *g, sdnn_gpu_backward_hook fn, void *ctx);
/* fix_bn_delta: 1 makes every batch-normalised layer's backward the exact
 * derivative of its forward (ops.h, as plugin/darknet/bnfix.h on the host);
 * 0 (the default of a new net) keeps Darknet's. */
void sdnn_gpu_net_set_bn_exact(sdnn_gpu_net *g, int on);
/* Seconds spent in host-side losses (YOLO, region: device output to the
 * host, libdarknet's CPU layer, delta back), since creation. */
double sdnn_gpu_net_host_loss_seconds(const sdnn_gpu_net *g);
/* What the host-side losses moved and cost since creation (net.c
 * describes the round trip).  Per pass of a YOLO/region layer (the fork's
 * yolo included): its input, batch x inputs floats, device -> host; its
 * delta, batch x outputs floats, host -> device when training; its output
 * too where a later device pass reads it (region's backward, a layer that
 * takes it as input) or when not training.  Softmax and cost layers bring
 * their per-element loss (batch x inputs floats) to the host for the cost
 * sum.  wait_s: the time the device's compute stream stood waiting on the
 * host loss (events around the round trip; on simulated devices the host
 * clock as each ran); host_s: the host thread's time in it, from the call
 * to the delta's copy queued (its wait for the layers before the head
 * included); compute_s: libdarknet's layer alone. */
typedef struct sdnn_gpu_host_loss_stats {
    uint64_t d2h_bytes, h2d_bytes;   /* yolo/region layers */
    uint64_t sum_bytes;              /* softmax/cost sums, device -> host */
    uint64_t layers;                 /* host-loss layer passes */
    double wait_s, host_s;
    double compute_s;                /* the CPU layers alone (host_s also holds the
                                      * host's wait for the head's input) */
} sdnn_gpu_host_loss_stats;
/* Waits for the last round trip's copies, then *s. */
sdnn_status sdnn_gpu_net_host_loss_stats(sdnn_gpu_net *g, sdnn_gpu_host_loss_stats *s);
/* 1: the synchronous path the round trip replaced (copies on the compute
 * stream with the host waiting; Darknet's own layer buffers), kept as the
 * reference tests/gpu/hostloss.c compares the deltas against. */
void sdnn_gpu_net_set_host_loss_sync(sdnn_gpu_net *g, int sync);

/* An instance of the gpu engine (engine_gpu.c; e from sdnn_engine_create or
 * the create of a copy of its table): replica r's bucket buffers (what the
 * exchange allocated on r's device with buf_alloc, and the comm's mirrors
 * of other replicas' buffers there), the device codecs' buffers, and its
 * net's host-loss counters.  SDNN_ERR_INVALID for another engine. */
struct sdnn_engine;
typedef struct sdnn_gpu_engine_stats {
    size_t bucket_bytes, codec_bytes;
    sdnn_gpu_host_loss_stats host_loss;
} sdnn_gpu_engine_stats;
sdnn_status sdnn_gpu_engine_replica_stats(struct sdnn_engine *e, int r, sdnn_gpu_engine_stats *s);
/* Per-layer device timing for the planner (bucket_mb=auto): with `on`,
 * every later forward and backward records an event before and after each
 * layer on the compute stream (the events are made on the first call).
 * After a sync, sdnn_gpu_net_profile_read adds scale x the last pass's
 * seconds of layer i's forward to prof[3i] and of its backward to
 * prof[3i + 1] (update: not timed) and forgets that pass; nothing when no
 * pass was recorded since. */
sdnn_status sdnn_gpu_net_profile(sdnn_gpu_net *g, int on);
sdnn_status sdnn_gpu_net_profile_read(sdnn_gpu_net *g, double *prof, double scale);
/* A monotonic clock in seconds. */
double sdnn_gpu_now(void);
/* Salt of the dropout generator (replicas should differ). */
void sdnn_gpu_net_set_seed(sdnn_gpu_net *g, uint64_t seed);

/* ---- tensors (tests, the exchange) -------------------------------------------- */

typedef enum sdnn_gpu_tensor {
    SDNN_GT_OUTPUT = 0,
    SDNN_GT_DELTA,
    SDNN_GT_WEIGHTS,
    SDNN_GT_WEIGHT_UPDATES,
    SDNN_GT_BIASES,
    SDNN_GT_BIAS_UPDATES,
    SDNN_GT_SCALES,
    SDNN_GT_SCALE_UPDATES,
    SDNN_GT_ROLLING_MEAN,
    SDNN_GT_ROLLING_VARIANCE,
    SDNN_GT_RAND,           /* dropout draws */
    SDNN_GT_INPUT,          /* the net's input buffer (layer ignored) */
    SDNN_GT_TRUTH           /* the net's truth buffer (layer ignored) */
} sdnn_gpu_tensor;

int sdnn_gpu_net_layers(const sdnn_gpu_net *g);
/* Device pointer and length (floats) of a tensor; NULL/0 when the layer
 * has none. */
sdnn_status sdnn_gpu_net_tensor(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, float **dev,
                                size_t *n);
/* Synchronous copies of a whole tensor. */
sdnn_status sdnn_gpu_net_get(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, float *host);
sdnn_status sdnn_gpu_net_set(sdnn_gpu_net *g, int layer, sdnn_gpu_tensor t, const float *host);
/* One layer alone, with the device state as it is: input is layer i-1's
 * device output (the net's input for i = 0), truth the net's truth
 * buffers; forward zeroes the layer's delta first when training. */
sdnn_status sdnn_gpu_net_layer_forward(sdnn_gpu_net *g, int i, int train);
sdnn_status sdnn_gpu_net_layer_backward(sdnn_gpu_net *g, int i);
/* This layer's cost after its forward (layers with a loss). */
float sdnn_gpu_net_layer_cost(const sdnn_gpu_net *g, int i);

/* The parameters of every layer live in one device arena and their update
 * buffers in a second with the same layout, layers from last to first
 * (weights, biases, scales each), so an exchange bucket of consecutive
 * layers is one contiguous range.  span: the layer's range (0 floats for a
 * layer without parameters). */
sdnn_status sdnn_gpu_net_arena(sdnn_gpu_net *g, float **params, float **updates, size_t *n);
void sdnn_gpu_net_layer_span(const sdnn_gpu_net *g, int layer, size_t *off, size_t *n);

/* ---- pinned preload ring --------------------------------------------------------- */

/* K slots of mini-batch slices waiting on one device: pinned host staging,
 * copies on the virtual device's copy stream, the compute stream waits on
 * an event (no host wait) before it reads a slot. */
typedef struct sdnn_gpu_preload sdnn_gpu_preload;
struct sdnn_devent;     /* dev.h */

typedef struct sdnn_gpu_slot {
    float *x, *y;           /* device */
    const float *y_host;    /* the same truth on the host */
    int rows;
} sdnn_gpu_slot;

sdnn_status sdnn_gpu_preload_create(sdnn_gpu_vdev *vd, int slots, int rows, int inputs,
                                    int truths, sdnn_gpu_preload **out);
void sdnn_gpu_preload_destroy(sdnn_gpu_preload *p);
/* Queue `rows` rows (row pointers, as Darknet's matrix) of X and Y
 * (yrows may be NULL when truths is 0) in a free slot: the rows are copied
 * into the slot's pinned staging and sent on the copy stream.  It waits on
 * the host only for the compute stream to reach the release of the step
 * that last read the slot.  With no free slot (K queued, or K - 1 queued
 * and one popped and not yet released) it is SDNN_ERR_INVALID and changes
 * nothing: a popped slot is never overwritten before its release. */
sdnn_status sdnn_gpu_preload_push(sdnn_gpu_preload *p, float *const *xrows, float *const *yrows,
                                  int rows);
/* Slots a push may fill now (0..K). */
int sdnn_gpu_preload_room(const sdnn_gpu_preload *p);
/* The slot pushed last (queued, not popped) and the event its copy ends
 * with: the source of a scatter (split=device0). */
sdnn_status sdnn_gpu_preload_last(const sdnn_gpu_preload *p, sdnn_gpu_slot *out,
                                  struct sdnn_devent **copied);
/* Push `rows` rows from device memory of device src_dev (x, and y for the
 * truths) by peer copies on the copy stream, after event `after`; the
 * truths' host rows (yrows) go to the slot's pinned y_host.  The source
 * must stay unchanged until this ring's pop of the slot has run. */
sdnn_status sdnn_gpu_preload_push_peer(sdnn_gpu_preload *p, const float *x, const float *y,
                                       int src_dev, struct sdnn_devent *after,
                                       float *const *yrows, int rows);
/* The oldest queued slot; the compute stream waits for its copy.  The
 * slot (its device rows and y_host) stays as it is until
 * sdnn_gpu_preload_release; one slot at a time is popped. */
sdnn_status sdnn_gpu_preload_pop(sdnn_gpu_preload *p, sdnn_gpu_slot *s);
/* The compute stream is done with the popped slot once it reaches here. */
sdnn_status sdnn_gpu_preload_release(sdnn_gpu_preload *p);
int sdnn_gpu_preload_queued(const sdnn_gpu_preload *p);

typedef struct sdnn_gpu_preload_stats {
    double copy_ms;         /* copy-stream time of the copies (events) */
    double exposed_ms;      /* time the compute stream waited for copies */
    size_t bytes;
    int copies;
} sdnn_gpu_preload_stats;
/* Copy and exposed times of the slots popped so far (reads completed
 * events; call after a sync). */
sdnn_status sdnn_gpu_preload_stats_get(sdnn_gpu_preload *p, sdnn_gpu_preload_stats *st);

/* ---- the gpu engine (engine_gpu.c) from the device side ------------------------ */

struct sdnn_engine;     /* engine.h */
/* Replica r's device network of a gpu engine (NULL for another engine or
 * r out of range): tests and benchmarks read its counters. */
sdnn_gpu_net *sdnn_gpu_engine_net(struct sdnn_engine *e, int r);
/* The sum over every replica's preload ring (after syncing them). */
sdnn_status sdnn_gpu_engine_preload_stats(struct sdnn_engine *e, sdnn_gpu_preload_stats *st);

/* ---- comm backends on devices: see gpu_comm.h ------------------------------- */

#ifdef __cplusplus
}
#endif
#endif
