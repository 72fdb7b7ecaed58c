/*
 * engine: the table of operations that touch parameters, gradients and
 * activations of N local replicas of one model.
 *
 * Everything above the table (the trainer, the scheduler, the exchange,
 * stock mode, saves) drives an engine through sdnn_engine_ops and never
 * knows which one it holds.  An engine is found by name in the registry
 * (engine.c: the only list of engine names):
 *
 *   cpu   libdarknet's train_network on the host networks with scalednn's
 *         layer hooks (hooks.c, the 1x1 delta fix included): today's path,
 *         bit for bit.  Buffers are host memory.
 *   gpu   the device engine of plugin/cuda (one virtual device per replica);
 *         buffers are device memory, the host networks are the model's
 *         owner and are brought up to date with pull().  Replica r runs on
 *         device opts.devices[r] (-gpus 0,2,3; a device named twice holds
 *         two replicas, [scalednn] virtual=1).
 *
 * Replicas and threads.  The caller runs replica r's train() in a thread of
 * its own (one per replica, the same thread every step); the engine calls
 * the scheduler's callbacks from that thread.  Every per-replica operation
 * (snapshot, pack, ef_step, apply, update) of replica r is called from
 * replica r's thread or while no train() runs.
 *
 * Memory.  Bucket buffers (snapshots, packed gradients, means, residuals)
 * are allocated by the engine with buf_alloc and live where mem() says, so
 * the comm backend is handed pointers it can use (host: any backend;
 * device: the device transports).  Parameters are addressed by layer: the
 * engine knows where each layer's tensors are; the caller gives the
 * layer's slice of a bucket buffer (the bucket layout, layout.h, says
 * where the slice is).
 *
 * One step of the scalednn mode, for replica r (see docs/ARCHITECTURE.md):
 *   snapshot(r, b, snap)        every bucket: the update buffers, which
 *                               hold momentum x the previous update
 *   train(r, slice, &loss)      forward/backward of every subdivision;
 *                               after each exchanged layer's last backward
 *                               the engine calls cb.backward_done(r, layer)
 *                               (which packs, through pack()); before each
 *                               layer's update cb.before_update(r, layer)
 *                               (which waits for the bucket and applies the
 *                               mean, through apply()); then Darknet's
 *                               update of that layer.
 *   ready(r, b)                 the scheduler marks bucket b complete on r:
 *                               cpu: nothing to do (the ready count is the
 *                               signal); gpu: record an event on r's compute
 *                               stream after the bucket's last backward.
 *   ready_wait(r, b)            called by the comm side before bucket b's
 *                               exchange: cpu nothing, gpu the comm stream
 *                               waits on the event (no host wait).
 *
 * Deferred checks.  A device engine may not look at a value on the host
 * in the middle of backward: its pack() then returns 0 and records a
 * non-finite value on the device, and the replica's sync() (the caller
 * calls it after every train()) returns SDNN_ERR_NONFINITE naming the
 * layer, the tensor and the element.  The step fails as it does on the
 * host; nothing of it reaches a save.
 *
 * Errors: sdnn_status with SDNN_ERROR's message; nothing exits.
 */
#ifndef SDNN_ENGINE_H
#define SDNN_ENGINE_H

#include "codec.h"
#include "layout.h"
#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sdnn_engine sdnn_engine;
struct sdnn_comm;        /* comm.h */
struct sdnn_timeline;    /* timeline.h */

/* Where an engine's bucket buffers live. */
typedef enum sdnn_engine_mem {
    SDNN_ENGINE_MEM_HOST = 0,
    SDNN_ENGINE_MEM_DEVICE = 1
} sdnn_engine_mem;

/* What pull/push move between the engine and the host networks
 * (bit flags). */
enum {
    SDNN_ENGINE_PARAMS  = 1,   /* weights, biases, scales */
    SDNN_ENGINE_UPDATES = 2,   /* update (momentum) buffers */
    SDNN_ENGINE_BNSTATS = 4,   /* rolling mean / variance */
    SDNN_ENGINE_ALL     = 7,
    /* pull only, not in ALL: what each replica's last forward decided
     * (layer outputs, maxpool choices, [yolo]/[region] deltas, dropout
     * draws), into its host network's buffers: gradcheck's reference takes
     * the engine's own float decisions at kinks, ties and thresholds.  A
     * host engine's networks hold them already (it does nothing). */
    SDNN_ENGINE_FORWARD = 8
};

/* The scheduler's side, called by the engine from replica r's thread while
 * train() runs.  Any may be NULL (stock mode, one replica without checks). */
typedef struct sdnn_engine_callbacks {
    void *user;
    /* Layer `layer` finished its last-subdivision backward on replica r. */
    void (*backward_done)(void *user, int r, int layer);
    /* Layer `layer` of replica r is about to run Darknet's update: return 0
     * to update, -1 when the step was aborted (the engine then skips the
     * update of this and every later layer of the step). */
    int (*before_update)(void *user, int r, int layer);
    /* The input of `layer` on replica r is not finite (a forward check). */
    void (*nonfinite_input)(void *user, int r, int layer);
    /* The exchange through the table (the step's side): */
    /* 1 once the step was stopped (anywhere): the engine skips the rest of
     * replica r's backward, whose values are no longer used and may not be
     * safe to compute (Darknet's code on non-finite input). */
    int (*aborted)(void *user);
    /* Stop the step with `s` because the engine failed on replica r in the
     * middle of train() (no memory in a hook, an unknown layer); the
     * message is already set with SDNN_ERROR.  Waiters on every replica
     * return, so train() can finish. */
    void (*abort)(void *user, int r, sdnn_status s);
} sdnn_engine_callbacks;

/* How feed() gets each replica its rows of a step's batch (split=). */
typedef enum sdnn_engine_split {
    /* split=cpu: the host splits the batch; replica r's rows go from pinned
     * host memory to replica r's own device. */
    SDNN_ENGINE_SPLIT_CPU = 0,
    /* split=device0: the whole batch goes to replica 0's device and is
     * scattered from there device to device (peer copies).  A host engine
     * refuses it at create (its replicas read the host rows in place). */
    SDNN_ENGINE_SPLIT_DEVICE0 = 1
} sdnn_engine_split;

/* What an engine is created with. */
typedef struct sdnn_engine_opts {
    int fix_1x1_delta;      /* hooks.c's fix (cpu), the same result (gpu) */
    int fix_1x1_stride;     /* conv1x1.h's strided 1x1 convolution (cpu: 0 puts
                             * libdarknet's back on the replicas; gpu: always
                             * right, the key changes nothing) */
    int fix_bn_delta;       /* bnfix.h's exact batch-norm backward (cpu, gpu) */
    int fix_region_delta;   /* hooks.h's region backward (cpu; the gpu engine always
                             * runs Darknet's GPU backward) */
    int hook_forward;       /* time each layer's forward (timeline, profile) */
    int hooks;              /* 1: call the callbacks (scalednn mode, a
                             * timeline or a profile); 0: plain Darknet */
    const int *devices;     /* gpu: device of each replica; NULL: 0..n-1 */
    /* The preload ring: */
    int preload;            /* [scalednn] preload=K: step batches a device
                             * engine holds fed ahead of train (1..8) */
    sdnn_engine_split split; /* [scalednn] split=: how feed() splits a batch */
    /* oneDNN's convolutions: */
    int cpu_conv_onednn;    /* cpu: 1 runs the convolutions on oneDNN
                             * (cpu_conv=onednn, or auto where built) */
} sdnn_engine_opts;

#define SDNN_ENGINE_OPTS_INIT { .fix_1x1_delta = 0, .fix_1x1_stride = 1, .fix_bn_delta = 0, .fix_region_delta = 0, .hook_forward = 0, .hooks = 0, \
                                .devices = NULL, .preload = 1, .split = SDNN_ENGINE_SPLIT_CPU, \
                                .cpu_conv_onednn = 0 }

/* Where a non-finite value was found by pack(). */
typedef struct sdnn_engine_bad {
    const char *what;       /* "weights", "biases", "scales" */
    long at;                /* element of that tensor */
} sdnn_engine_bad;

typedef struct sdnn_engine_ops {
    const char *name;
    /* 1 when the replicas' buffers are host memory of this process, so the
     * local backend's exchange between them is a sum in memory (cpu). */
    int host_memory;
    /* 1 when this build and machine can run the engine for `ndev` replicas
     * (gpu: a GPU runtime with at least ndev devices); else 0 and, when
     * why != NULL, the reason. */
    int (*available)(int ndev, char *why, size_t len);

    /* Take the parsed replicas (not owned; they must outlive the engine;
     * replica 0's parameters already broadcast) and make the engine's
     * copies.  e->nets and e->n are set before create is called. */
    sdnn_status (*create)(sdnn_engine *e, const sdnn_engine_opts *o);
    void (*destroy)(sdnn_engine *e);

    sdnn_engine_mem (*mem)(const sdnn_engine *e);
    /* Buffers for replica r's side of the exchange (device buffers on r's
     * device); zero-filled. */
    sdnn_status (*buf_alloc)(sdnn_engine *e, int r, size_t floats, float **out);
    void (*buf_free)(sdnn_engine *e, int r, float *p);

    /* The scheduler's callbacks for every later train(). */
    void (*set_callbacks)(sdnn_engine *e, const sdnn_engine_callbacks *cb);
    /* Per-replica context of the calling thread: call once in replica r's
     * thread before its first train() and with r = -1 before it ends. */
    void (*bind_thread)(sdnn_engine *e, int r);
    /* One slice (a batch of every subdivision) on replica r: forward,
     * backward, the callbacks, Darknet's update; *loss as train_network
     * returns it.  Runs in replica r's thread. */
    sdnn_status (*train)(sdnn_engine *e, int r, data slice, float *loss);

    /* Copy layer `layer`'s update buffers of replica r into dst (its slice
     * of a bucket's snapshot). */
    void (*snapshot)(sdnn_engine *e, int r, int layer, float *dst);
    /* dst = the layer's updates - snap (the fresh gradient of the step).
     * Returns 0, or -1 with *bad set when a value is not finite (dst is
     * then partly written). */
    int (*pack)(sdnn_engine *e, int r, int layer, const float *snap, float *dst,
                sdnn_engine_bad *bad);
    /* The only finite check a world of one needs: 0, or -1 with *bad set
     * when the layer's update buffers hold a non-finite value. */
    int (*check)(sdnn_engine *e, int r, int layer, sdnn_engine_bad *bad);
    /* Error feedback of a complete bucket on replica r: see
     * sdnn_codec_ef_step (same arguments, engine memory). */
    void (*ef_step)(sdnn_engine *e, int r, const sdnn_codec_ops *codec,
                    const sdnn_codec_params *p, float *grad, float *resid, float *vel,
                    float momentum, size_t n, void *scratch, uint64_t stream);
    /* The layer's updates = snap + mean (the averaged gradient). */
    void (*apply)(sdnn_engine *e, int r, int layer, const float *snap, const float *mean);

    /* Bucket signal (see the top of this file). */
    void (*ready)(sdnn_engine *e, int r, int bucket);
    sdnn_status (*ready_wait)(sdnn_engine *e, int r, int bucket);
    /* Wait until every operation queued for replica r is done (host: no-op). */
    sdnn_status (*sync)(sdnn_engine *e, int r);

    /* Host networks <- engine (pull) and engine <- host networks (push),
     * for the `what` flags, every replica: saves, broadcasts, stock
     * averaging, -map.  A host engine does nothing. */
    sdnn_status (*pull)(sdnn_engine *e, unsigned what);
    sdnn_status (*push)(sdnn_engine *e, unsigned what);

    /* Multi-scale training: every replica's input becomes w x h (the host
     * networks are resized by the caller first, with resize_network).
     * Batches fed and not yet trained are dropped (feed()); the comm that
     * comm_open returned stays valid (communicators are kept). */
    sdnn_status (*resize)(sdnn_engine *e, int w, int h);

    /* The comm the exchange uses on this engine's bucket buffers.  host is
     * the backend the trainer opened (local, or mpi between processes).
     * NULL op, or *out = NULL: use host as it is (a host engine).  A device
     * engine returns a comm over its device buffers (the mean of its local
     * replicas on the devices, then host between processes when the world
     * spans several); *out is the engine's (freed by destroy).  Contract of
     * every comm call the exchange makes on it: when the call returns, the
     * result is complete (a device comm has synced its own streams), so
     * apply() may read it from any stream without a further wait. */
    sdnn_status (*comm_open)(sdnn_engine *e, struct sdnn_comm *host, struct sdnn_comm **out);
    /* n floats of replica r's bucket buffer to / from host memory (.ef
     * save and restore, carrying residuals across re-plans, tests). */
    sdnn_status (*buf_read)(sdnn_engine *e, int r, const float *src, float *host, size_t n);
    sdnn_status (*buf_write)(sdnn_engine *e, int r, float *dst, const float *host, size_t n);
    /* Device work as timeline spans (NULL tl: none).  May be NULL (host). */
    void (*set_timeline)(sdnn_engine *e, struct sdnn_timeline *tl);

    /* The exchange through the table (the step's side): */
    /* After sync(e, r) returned SDNN_ERR_NONFINITE from the deferred check:
     * the layer and tensor element of the first non-finite value pack()
     * found on replica r in this step (1), or 0 when none was recorded.
     * The exchange then stops the step with the message the host check
     * gives (iteration, layer, tensor[element], replica).  May be NULL (a
     * host engine checks at once; the exchange reports sync's message). */
    int (*nonfinite_at)(sdnn_engine *e, int r, int *layer, sdnn_engine_bad *bad);

    /* Device ids (-gpus names devices): */
    /* 1 when this build and machine can run replica r on device devices[r]
     * for every r < n (gpu: a runtime whose device count is past every id,
     * and a placement the engine supports); else 0 and, when why != NULL,
     * the reason, naming the id and the count.  Duplicate ids are several
     * replicas on one device (the caller allows them: virtual=1).  A host
     * engine ignores the ids (they only count replicas).  May be NULL:
     * available(n) decides. */
    int (*available_on)(const int *devices, int n, char *why, size_t len);
    /* One line about device `dev` as replica r's banner shows it, with no
     * instance (before or without create): gpu "NVIDIA H200, sm_90, ...,
     * 139.8 GiB" or "simulated device 1 (...)"; cpu the CPU replica and
     * its gemm.  Never fails: a device it cannot describe says why. */
    void (*describe_device)(int dev, char *buf, size_t len);

    /* The host loss: what replica r moved between its
     * device and the host for the losses computed on the host (YOLO and
     * region heads, softmax/cost sums: bytes in both directions) since the
     * previous call, and the time its device stood waiting on them.
     * Called between steps.  May be NULL (a host engine moves nothing). */
    sdnn_status (*host_loss_take)(sdnn_engine *e, int r, uint64_t *bytes, double *wait_s);
    /* The preload ring (loader -> device): */
    /* Hand the engine a whole step's batch (n x the slice rows, the rows of
     * replica r at [r x rows/n, (r+1) x rows/n), as sdnn_data_slice cuts
     * them) ahead of the train() calls that consume it, while no train()
     * runs.  Batches are consumed in the order fed: a train(r, slice) with
     * a fed batch queued trains replica r on that batch's rows (slice must
     * be the same rows; it then only says how many), one with none queued
     * copies `slice` itself.  At most e->preload batches may be fed and not
     * yet trained by every replica (SDNN_ERR_INVALID past that).  The
     * batch's host memory must stay valid until every replica's train() of
     * it has returned (a host engine reads it there).
     *   cpu   nothing to do: train() reads the host rows in place (zero-copy
     *         views); e->preload is 1, the loader's own one-step lookahead
     *         is its overlap.
     *   gpu   split=cpu: each replica's rows go to pinned staging and on
     *         its device's copy stream into its ring of `preload` slots
     *         (plugin/cuda/preload.c); split=device0: the whole batch into
     *         replica 0's ring, then peer copies from there into each other
     *         replica's ring, on that replica's copy stream.  train() makes
     *         the compute stream wait for its slot's copy (no host wait), so
     *         the copies of later batches run while this step computes.
     * resize() drops every batch fed and not trained (the rings are made
     * again at the new size).  May be NULL (the engine has no feed: the
     * trainer refuses sdnn_trainer_feed). */
    sdnn_status (*feed)(sdnn_engine *e, data batch);
} sdnn_engine_ops;

struct sdnn_engine {
    const sdnn_engine_ops *ops;
    network **nets;            /* the host replicas (not owned) */
    int n;
    void *impl;                /* the engine's own state */
    int preload;               /* batches feed() may hold ahead of train():
                                * 1 unless create sets more (gpu: opts.preload) */
};

/* The registry: the engine called `name`, or NULL. */
const sdnn_engine_ops *sdnn_engine_find(const char *name);
/* Registered engines, NULL-terminated, in registry order. */
const sdnn_engine_ops *const *sdnn_engine_list(void);
/* The engine that trains the host networks themselves (host memory, no
 * copies): what an exchange made on bare networks (sdnn_exchange_create)
 * drives. */
const sdnn_engine_ops *sdnn_engine_host(void);
/* "cpu, gpu" (every registered name), for messages and usage text. */
const char *sdnn_engine_names(void);

/* Resolve `engine=` ("cpu", "gpu" or "auto") for ndev replicas:
 * auto is gpu when it is available for ndev, else cpu.  An unknown name or
 * an unavailable engine is SDNN_ERR_INVALID / SDNN_ERR_UNSUPPORTED naming
 * the choices (and why).  *why (may be NULL) gets what auto decided, for
 * the one line said at start. */
sdnn_status sdnn_engine_resolve(const char *name, int ndev, const sdnn_engine_ops **out,
                                char *why, size_t len);
/* The same for replicas on the devices devices[0..n) (-gpus 0,2,3; NULL:
 * 0..n-1): an engine is available when available_on says so (available(n)
 * where it has no available_on); the reason names the id and the count. */
sdnn_status sdnn_engine_resolve_on(const char *name, const int *devices, int n,
                                   const sdnn_engine_ops **out, char *why, size_t len);
/* engine->describe_device(dev, ...), or "device DEV" where the engine has
 * none. */
void sdnn_engine_describe_device(const sdnn_engine_ops *engine, int dev, char *buf, size_t len);

/* Create / destroy an engine instance. */
/* 1 when a fix of libdarknet's backward (the 1x1 delta, batch norm) that `o`
 * asks for has a layer of `net` to act on, or layer 0 needs a scratch
 * input delta (hooks.h, sdnn_first_delta_needed, whatever `o` says): the
 * host engine then hooks the replicas even in stock mode. */
int sdnn_engine_fixes_needed(const sdnn_engine_opts *o, const network *net);

sdnn_status sdnn_engine_create(const sdnn_engine_ops *ops, network **nets, int n,
                               const sdnn_engine_opts *o, sdnn_engine **out);
void sdnn_engine_destroy(sdnn_engine *e);

/* Registered engines (engine.c's list; defined by each engine's file). */
extern const sdnn_engine_ops sdnn_engine_cpu;
extern const sdnn_engine_ops sdnn_engine_gpu;

#ifdef __cplusplus
}
#endif

#endif
