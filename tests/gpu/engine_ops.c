/*
 * engine_ops: the gpu engine's ops (plugin/cuda/engine_gpu.c) driven
 * directly, against host arithmetic.  On simulated devices (make GPU=sim)
 * this checks host logic, ordering and arithmetic and the CUDA kernels run
 * as themselves on the host executor, never a GPU or real NCCL.
 *
 *   registry     gpu available for 1..4 devices, not for more; auto -> gpu
 *   snapshot     = the host update buffers of the layer, bit for bit
 *   pack         = updates - snap, bit for bit (host float arithmetic)
 *   apply        updates = snap + mean, bit for bit
 *   deferred     a NaN in a layer's updates: pack returns 0, sync returns
 *                SDNN_ERR_NONFINITE naming layer, tensor and element; the
 *                next sync is clean
 *   ordering     pack, ready, ready_wait, then the comm's mean on the comm
 *                stream: the mean of the fresh packs (under SDNN_SIM_JITTER
 *                a missing wait reads stale buffers)
 *   comm         plain mean = sdnn_mean_buffers bit for bit; int8 coded
 *                mean by the collective the comm takes, each held to its
 *                own host reference bit for bit: the coded ring = the host
 *                local backend's, the all-gather = every rank's int8
 *                encoding (the host codec, the rank's stream) decoded and
 *                summed in rank order into zeros, x 1/W
 *   choice       2 and 4 devices over NCCL, int8 buckets below, between
 *                and above the cost model's crossover S* (sdnn_cm_crossover
 *                of the comm's own pricing): at W = 2 (where the all-gather
 *                sends the ring's bytes) the all-gather below S*, the coded
 *                ring above; at W = 4 the ring at every size, the byte cap
 *                (SDNN_CM_OFFERS_BYTE_CAP: the all-gather would send W/2 x
 *                the ring's bytes) deciding below S*; every result = its
 *                collective's reference bit for bit; the bytes each replica
 *                sends (the comm's *wire) = sdnn_wire_bytes of the
 *                collective taken, and so is the simulated NCCL's own count
 *                per rank (SDNN_SIM_NCCL_BYTES; real NCCL cannot count)
 *   handoff      the link the step hands the comm (sdnn_comm_set_link, the
 *                comm table's set_link op) changes the choice: at W = 2 an
 *                int8 bucket of 8.39 MB fp32 by the coded ring on the
 *                default nvlink4 pricing, by the all-gather once a 1 ms,
 *                1 GB/s link is handed over (S* = 2 alpha x the device
 *                codecs' rate: 6 MB, then 2 GB); each result its
 *                collective's reference bit for bit, the bytes the comm
 *                reports = sdnn_wire_bytes of each = the simulated NCCL's
 *                count; the banner (the announce op) names the link it
 *                priced with ("default nvlink4 (not measured)", then
 *                "measured test-1ms") and the collective; a link without
 *                bandwidth is refused and changes nothing; a table
 *                without the op (local) takes any link as a no-op
 *   ef_step      int8 and topk error feedback = sdnn_codec_ef_step bit
 *                for bit (grad and residual)
 *   train        the callbacks: backward_done once per parameter layer on
 *                the last subdivision only, before_update per parameter
 *                layer in Darknet's order; -1 skips the rest (the weights
 *                of the skipped layers stay as they were)
 *   resize       a resized net trains and keeps its weights
 */
#include "collective.h"
#include "comm.h"
#include "costmodel.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_comm.h"
#include "gpu_test.h"
#include "replicas.h"

#define NREP 2

static network *nets[NREP];

/* The first parameter layer from the top with at least `min` floats. */
static int param_layer(network *net, size_t min, size_t *count)
{
    for (int i = net->n - 1; i >= 0; --i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        size_t c = 0;
        for (int j = 0; j < np; ++j) c += p[j].n;
        if (np > 0 && c >= min) {
            *count = c;
            return i;
        }
    }
    return -1;
}

/* The layer's update buffers, concatenated (or written from `src`). */
static void host_updates(network *net, int layer, float *dst, const float *src)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[layer], p);
    for (int j = 0; j < np; ++j) {
        if (src) memcpy(p[j].upd, src, p[j].n * sizeof(float)), src += p[j].n;
        if (dst) memcpy(dst, p[j].upd, p[j].n * sizeof(float)), dst += p[j].n;
    }
}

/* The all-gather's result on the host: every rank's encoding of its input
 * (the rank's stream, as ring.c derives it), decoded and accumulated in
 * rank order into zeros, then x 1/W in fp32. */
static void allgather_ref(const sdnn_codec_ops *c, const sdnn_codec_params *p, uint64_t stream,
                          const float *const *in, int W, size_t n, float *out)
{
    unsigned char *enc = malloc(c->encoded_size(p, n) + 16);
    memset(out, 0, n * sizeof(float));
    for (int q = 0; q < W; ++q) {
        c->encode(p, in[q], n, enc, sdnn_stream_mix(stream, (uint64_t)q, 0));
        c->accumulate(p, enc, n, out);
    }
    const float inv = 1.0f / (float)W;
    for (size_t i = 0; i < n; ++i) out[i] *= inv;
    free(enc);
}

/* One int8 coded mean of the W buffers `din` (host copies `hin`) through
 * the engine's comm, checked against the reference of the collective the
 * comm takes: the all-gather's (allgather_ref) or the coded ring's (the
 * host local backend's), bit for bit on every replica.  Returns the
 * collective taken; *wire = what the comm reported. */
static sdnn_cm_coll coded_vs_ref(sdnn_engine *e, sdnn_comm *comm, const char *what,
                                 float *const *din, const float *const *hin, int W, size_t n,
                                 uint64_t stream, size_t *wire)
{
    const sdnn_engine_ops *E = e->ops;
    const sdnn_codec_ops *c8 = sdnn_codec_find("int8");
    sdnn_codec_params cp = SDNN_CODEC_PARAMS_INIT;
    sdnn_cm_env env;
    sdnn_codec_model m;
    unsigned offers = 0;
    sdnn_cm_coll path = SDNN_CM_NCOLL;
    if (sdnn_gpu_engine_comm_pricing(comm, c8, &cp, n, &env, &m, &offers, &path) != SDNN_OK) {
        SOFT_ASSERT(0, "%s: the comm's pricing: %s", what, sdnn_last_error());
        return SDNN_CM_NCOLL;
    }
    float *douts[4], *want[4], *got = malloc(n * 4);
    for (int r = 0; r < W; ++r) {
        want[r] = malloc(n * 4);
        douts[r] = NULL;
        (void)E->buf_alloc(e, r, n, &douts[r]);
    }
    if (path == SDNN_CM_ALLGATHER) {
        allgather_ref(c8, &cp, stream, hin, W, n, want[0]);
        for (int r = 1; r < W; ++r) memcpy(want[r], want[0], n * 4);
    } else {
        sdnn_comm *local = NULL;
        size_t wh = 0;
        if (sdnn_comm_open("local", &local) != SDNN_OK ||
            sdnn_comm_allreduce_mean_coded(local, c8, &cp, stream, hin, W, want, n, &wh) !=
                SDNN_OK)
            SOFT_ASSERT(0, "%s: the local backend's coded mean: %s", what, sdnn_last_error());
        sdnn_comm_close(local);
    }
    *wire = 0;
    sdnn_status s = sdnn_comm_allreduce_mean_coded(comm, c8, &cp, stream,
                                                   (const float *const *)din, W, douts, n, wire);
    size_t diff = 0;
    for (int r = 0; r < W && s == SDNN_OK; ++r) {
        if (E->buf_read(e, r, douts[r], got, n) != SDNN_OK) diff += n * 4;
        else diff += gt_bytes_differ(got, want[r], n * 4);
    }
    SOFT_ASSERT(s == SDNN_OK && diff == 0, "%s: int8 mean of %zu floats over %d ranks by the %s "
                "= its reference (%s) bit for bit (%zu bytes differ; %s)", what, n, W,
                sdnn_cm_coll_name(path), path == SDNN_CM_ALLGATHER
                    ? "decoded encodings summed in rank order" : "the local backend's ring",
                diff, s == SDNN_OK ? "ok" : sdnn_last_error());
    for (int r = 0; r < W; ++r) {
        E->buf_free(e, r, douts[r]);
        free(want[r]);
    }
    free(got);
    return path;
}

static void registry(void)
{
    const sdnn_engine_ops *gpu = sdnn_engine_find("gpu"), *got = NULL;
    char why[256] = "";
    int ndev = 0;
    sdnn_dev_count(&ndev);
    SOFT_ASSERT(gpu && gpu->available(ndev, why, sizeof why), "gpu available for %d devices",
                ndev);
    SOFT_ASSERT(gpu && !gpu->available(ndev + 1, why, sizeof why) && strstr(why, "device"),
                "gpu unavailable for %d devices, saying why (%s)", ndev + 1, why);
    sdnn_status s = sdnn_engine_resolve("auto", NREP, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_OK && got == gpu && strstr(why, "gpu"), "engine=auto -> gpu (%s)", why);
}

typedef struct counts {
    int done[256], before[256], order_ok, last_before, stop_at;
    int subdiv_seen;
} counts;

static void cb_done(void *u, int r, int layer)
{
    counts *c = u;
    if (r == 0 && layer >= 0 && layer < 256) c->done[layer]++;
}

static int cb_before(void *u, int r, int layer)
{
    counts *c = u;
    if (r != 0 || layer < 0 || layer >= 256) return 0;
    c->before[layer]++;
    if (layer <= c->last_before) c->order_ok = 0;
    c->last_before = layer;
    return c->stop_at >= 0 && layer >= c->stop_at ? -1 : 0;
}

/* devices: NULL (replica r on device r: the NCCL ring) or {0, 0} (both on
 * device 0: the device ring, every exchange on replica 0's comm stream). */
static int run(const int *devices)
{
    for (int r = 0; r < NREP; ++r) {
        nets[r] = gt_parse_file("cfg/shapes.cfg", "batch=2\nsubdivisions=2\n");
        if (!nets[r]) {
            SOFT_ASSERT(0, "cannot parse cfg/shapes.cfg");
            return gt_summary(argv0_);
        }
    }
    gt_randomize(nets[0], 5);
    for (int r = 1; r < NREP; ++r) gt_copy_net(nets[r], nets[0]);
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    o.hooks = 1;
    o.devices = devices;
    printf("    replicas on devices %d and %d\n", devices ? devices[0] : 0, devices ? devices[1] : 1);
    sdnn_engine *e = NULL;
    GT_OK(sdnn_engine_create(&sdnn_engine_gpu, nets, NREP, &o, &e));
    const sdnn_engine_ops *E = e->ops;
    SOFT_ASSERT(E->mem(e) == SDNN_ENGINE_MEM_DEVICE, "gpu engine buffers are device memory");

    size_t n = 0;
    int L = param_layer(nets[0], 64, &n);
    SOFT_ASSERT(L >= 0, "shapes has a parameter layer (%d, %zu floats)", L, n);
    if (L < 0) return gt_summary(argv0_);
    float *h_upd = malloc(n * 4), *h_snap = malloc(n * 4), *h_mean = malloc(n * 4);
    float *h_got = malloc(n * 4), *h_want = malloc(n * 4), *h_new = malloc(n * 4);
    float *snap[NREP], *pack[NREP], *mean = NULL;
    for (int r = 0; r < NREP; ++r) {
        GT_OK(E->buf_alloc(e, r, n, &snap[r]));
        GT_OK(E->buf_alloc(e, r, n, &pack[r]));
    }
    GT_OK(E->buf_alloc(e, 0, n, &mean));

    /* snapshot: the device's update buffers as pushed from the host */
    gt_seed(77);
    for (int r = 0; r < NREP; ++r) {
        gt_fill(h_upd, n, -1, 1);
        host_updates(nets[r], L, NULL, h_upd);
    }
    GT_OK(E->push(e, SDNN_ENGINE_ALL));
    for (int r = 0; r < NREP; ++r) E->snapshot(e, r, L, snap[r]);
    for (int r = 0; r < NREP; ++r) GT_OK(E->sync(e, r));
    size_t diff = 0;
    for (int r = 0; r < NREP; ++r) {
        host_updates(nets[r], L, h_want, NULL);
        GT_OK(E->buf_read(e, r, snap[r], h_got, n));
        diff += gt_bytes_differ(h_got, h_want, n * 4);
    }
    SOFT_ASSERT(diff == 0, "snapshot = the layer's update buffers (%zu bytes differ)", diff);

    /* pack: new updates - snapshot; ready, ready_wait, then the comm's mean */
    sdnn_comm *comm = NULL;
    GT_OK(E->comm_open(e, NULL, &comm));
    float *fresh[NREP];
    for (int r = 0; r < NREP; ++r) {
        fresh[r] = malloc(n * 4);
        host_updates(nets[r], L, h_snap, NULL);
        gt_fill(h_new, n, -2, 2);
        host_updates(nets[r], L, NULL, h_new);
        for (size_t k = 0; k < n; ++k) fresh[r][k] = h_new[k] - h_snap[k];
    }
    GT_OK(E->push(e, SDNN_ENGINE_UPDATES));
    int bad_ret = 0;
    size_t stale = 0;
    float *junk = calloc(n, 4);
    for (int round = 0; round < 6; ++round) {
        /* stale values in the pack buffers: a comm that does not wait reads them */
        for (int r = 0; r < NREP; ++r) GT_OK(E->buf_write(e, r, pack[r], junk, n));
        for (int r = 0; r < NREP; ++r) {
            sdnn_engine_bad b = {0};
            bad_ret |= E->pack(e, r, L, snap[r], pack[r], &b);
            E->ready(e, r, 0);
        }
        for (int r = 0; r < NREP; ++r) GT_OK(E->ready_wait(e, r, 0));
        const float *in[NREP] = {pack[0], pack[1]};
        GT_OK(sdnn_comm_allreduce_mean(comm, in, NREP, mean, n, NULL));
        for (int r = 0; r < NREP; ++r) GT_OK(E->sync(e, r));
        const float *hin0[NREP] = {fresh[0], fresh[1]};
        sdnn_mean_buffers(hin0, NREP, h_want, n);
        GT_OK(E->buf_read(e, 0, mean, h_got, n));
        stale += gt_bytes_differ(h_got, h_want, n * 4);
    }
    free(junk);
    SOFT_ASSERT(stale == 0, "every round's mean is of the fresh packs, not of stale buffers "
                "(%zu bytes differ)", stale);
    SOFT_ASSERT(bad_ret == 0, "pack of finite values returns 0");
    diff = 0;
    for (int r = 0; r < NREP; ++r) {
        GT_OK(E->buf_read(e, r, pack[r], h_got, n));
        diff += gt_bytes_differ(h_got, fresh[r], n * 4);
    }
    SOFT_ASSERT(diff == 0, "pack = updates - snap bit for bit (%zu bytes differ)", diff);
    const float *hin[NREP] = {fresh[0], fresh[1]};
    sdnn_mean_buffers(hin, NREP, h_want, n);
    GT_OK(E->buf_read(e, 0, mean, h_got, n));
    diff = gt_bytes_differ(h_got, h_want, n * 4);
    SOFT_ASSERT(diff == 0, "the comm's mean after ready/ready_wait = sdnn_mean_buffers of the "
                "packs (%zu bytes differ)", diff);

    /* apply on both replicas from replica 0's mean buffer */
    for (int r = 0; r < NREP; ++r) E->apply(e, r, L, snap[r], mean);
    for (int r = 0; r < NREP; ++r) GT_OK(E->sync(e, r));
    GT_OK(E->pull(e, SDNN_ENGINE_UPDATES));
    diff = 0;
    for (int r = 0; r < NREP; ++r) {
        GT_OK(E->buf_read(e, r, snap[r], h_snap, n));
        host_updates(nets[r], L, h_got, NULL);
        for (size_t k = 0; k < n; ++k) h_new[k] = h_snap[k] + h_want[k];
        diff += gt_bytes_differ(h_got, h_new, n * 4);
    }
    SOFT_ASSERT(diff == 0, "apply: updates = snap + mean on every replica (%zu bytes differ)",
                diff);

    /* coded mean (int8) by the collective the comm takes = that
     * collective's reference, bit for bit (over device copies: the ring) */
    {
        float *dins[NREP];
        for (int r = 0; r < NREP; ++r) {
            GT_OK(E->buf_alloc(e, r, n, &dins[r]));
            GT_OK(E->buf_write(e, r, dins[r], fresh[r], n));
        }
        size_t wd = 0;
        sdnn_cm_coll path = coded_vs_ref(e, comm, devices ? "device copies" : "nccl", dins, hin,
                                         NREP, n, 99, &wd);
        SOFT_ASSERT(wd > 0 && (devices == NULL || path == SDNN_CM_CODED_RING),
                    "int8 through the engine's comm by the %s, wire %zu (device copies keep "
                    "collective.c's ring)", sdnn_cm_coll_name(path), wd);
        for (int r = 0; r < NREP; ++r) E->buf_free(e, r, dins[r]);
    }

    /* ef_step = sdnn_codec_ef_step bit for bit */
    static const char *const lossy[] = {"int8", "topk"};
    for (size_t ci = 0; ci < 2; ++ci) {
        const sdnn_codec_ops *c = sdnn_codec_find(lossy[ci]);
        sdnn_codec_params cp = SDNN_CODEC_PARAMS_INIT;
        float *g = malloc(n * 4), *res = malloc(n * 4), *dres = NULL;
        void *scratch = malloc(c->encoded_size(&cp, n) + 64);
        GT_OK(E->buf_alloc(e, 1, n, &dres));
        gt_fill(res, n, -0.01f, 0.01f);
        GT_OK(E->buf_write(e, 1, pack[1], fresh[1], n));
        GT_OK(E->buf_write(e, 1, dres, res, n));
        memcpy(g, fresh[1], n * 4);
        for (int step = 0; step < 2; ++step) {
            sdnn_codec_ef_step(c, &cp, g, res, NULL, 0, n, scratch, 1234 + (uint64_t)step);
            E->ef_step(e, 1, c, &cp, pack[1], dres, NULL, 0, n, NULL, 1234 + (uint64_t)step);
        }
        GT_OK(E->sync(e, 1));
        GT_OK(E->buf_read(e, 1, pack[1], h_got, n));
        size_t dg = gt_bytes_differ(h_got, g, n * 4);
        GT_OK(E->buf_read(e, 1, dres, h_got, n));
        size_t dr = gt_bytes_differ(h_got, res, n * 4);
        SOFT_ASSERT(dg == 0 && dr == 0, "%s ef_step on the device = sdnn_codec_ef_step "
                    "(grad %zu, residual %zu bytes differ)", lossy[ci], dg, dr);
        E->buf_free(e, 1, dres);
        free(g);
        free(res);
        free(scratch);
    }

    /* deferred finite check */
    {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&nets[1]->layers[L], p);
        int j = np > 1 ? 1 : 0;
        size_t at = p[j].n / 2;
        float keep = p[j].upd[at];
        p[j].upd[at] = NAN;
        GT_OK(E->push(e, SDNN_ENGINE_UPDATES));
        sdnn_engine_bad b = {0};
        int ret = E->pack(e, 1, L, snap[1], pack[1], &b);
        sdnn_status s = E->sync(e, 1);
        char want[96], want2[64];
        snprintf(want, sizeof want, "layer %d (", L);
        snprintf(want2, sizeof want2, "%s[%zu] on replica 1", p[j].what, at);
        SOFT_ASSERT(ret == 0 && s == SDNN_ERR_NONFINITE && strstr(sdnn_last_error(), want) &&
                    strstr(sdnn_last_error(), want2),
                    "deferred check: pack returns 0, sync names layer, tensor, element (%s)",
                    sdnn_last_error());
        s = E->sync(e, 1);
        SOFT_ASSERT(s == SDNN_OK, "the next sync is clean (%s)", sdnn_strerror(s));
        p[j].upd[at] = keep;
        GT_OK(E->push(e, SDNN_ENGINE_UPDATES));
    }

    /* train: the callbacks */
    {
        counts c;
        memset(&c, 0, sizeof c);
        c.order_ok = 1;
        c.last_before = -1;
        c.stop_at = -1;
        sdnn_engine_callbacks cb = {.user = &c, .backward_done = cb_done,
                                    .before_update = cb_before};
        E->set_callbacks(e, &cb);
        E->bind_thread(e, 0);
        network *net = nets[0];
        int rows = net->batch * net->subdivisions;
        data d = gt_detection_data(rows, net->w, net->h, net->c, net->truths, 3, 42);
        float loss = 0;
        GT_OK(E->train(e, 0, d, &loss));
        GT_OK(E->sync(e, 0));
        int ok_done = 1, ok_before = 1, params = 0;
        for (int i = 0; i < net->n && i < 256; ++i) {
            sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
            int has = sdnn_layer_params(&net->layers[i], p) > 0;
            params += has;
            ok_done &= c.done[i] == has;
            ok_before &= c.before[i] == has;
        }
        SOFT_ASSERT(ok_done && params > 0, "backward_done once per parameter layer, last "
                    "subdivision only (%d layers)", params);
        SOFT_ASSERT(ok_before && c.order_ok, "before_update once per parameter layer, in "
                    "ascending order");
        SOFT_ASSERT(isfinite(loss) && loss > 0, "train's loss %g", loss);

        /* -1 from before_update: that layer and the later ones keep their weights */
        GT_OK(E->pull(e, SDNN_ENGINE_PARAMS));
        size_t nw = (size_t)net->layers[L].nweights;
        float *w0 = malloc(nw * 4);
        memcpy(w0, net->layers[L].weights, nw * 4);
        memset(&c, 0, sizeof c);
        c.order_ok = 1;
        c.last_before = -1;
        c.stop_at = L;
        GT_OK(E->train(e, 0, d, &loss));
        GT_OK(E->sync(e, 0));
        GT_OK(E->pull(e, SDNN_ENGINE_PARAMS));
        SOFT_ASSERT(gt_bytes_differ(w0, net->layers[L].weights, nw * 4) == 0 &&
                    c.before[L] == 1,
                    "before_update -1 at layer %d skips its update", L);
        free(w0);

        /* resize: the resized net trains and keeps its weights */
        GT_OK(E->pull(e, SDNN_ENGINE_ALL));
        memcpy(h_want, net->layers[L].weights, (nw < n ? nw : n) * 4);
        int w = net->w, h = net->h;
        for (int r = 0; r < NREP; ++r) resize_network(nets[r], w + 32, h + 32);
        GT_OK(E->resize(e, w + 32, h + 32));
        GT_OK(E->pull(e, SDNN_ENGINE_PARAMS));
        SOFT_ASSERT(gt_bytes_differ(h_want, net->layers[L].weights, (nw < n ? nw : n) * 4) == 0,
                    "resize keeps the weights");
        data d2 = gt_detection_data(rows, net->w, net->h, net->c, net->truths, 3, 43);
        c.stop_at = -1;
        sdnn_status s = E->train(e, 0, d2, &loss);
        if (s == SDNN_OK) s = E->sync(e, 0);
        SOFT_ASSERT(s == SDNN_OK && isfinite(loss), "a %dx%d slice trains after resize (%s)",
                    net->w, net->h, s == SDNN_OK ? "ok" : sdnn_last_error());
        free_data(d2);
        free_data(d);
        E->bind_thread(e, -1);
        E->set_callbacks(e, NULL);
    }

    for (int r = 0; r < NREP; ++r) {
        E->buf_free(e, r, snap[r]);
        E->buf_free(e, r, pack[r]);
        free(fresh[r]);
    }
    E->buf_free(e, 0, mean);
    sdnn_engine_destroy(e);
    free(h_upd);
    free(h_snap);
    free(h_mean);
    free(h_got);
    free(h_want);
    free(h_new);
    for (int r = 0; r < NREP; ++r) sdnn_network_free(nets[r]);
    return 0;
}

/* Total bytes the simulated NCCL counted per rank (SDNN_SIM_NCCL_BYTES
 * lines "sim-nccl-bytes rank R of W: T sent ..."), into per[0..W-1];
 * returns the lines read. */
static int sim_counted(const char *path, double *per, int W)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int k = 0;
    while (fgets(line, sizeof line, f)) {
        int r, w;
        double t;
        if (sscanf(line, "sim-nccl-bytes rank %d of %d: %lf sent", &r, &w, &t) == 3 && w == W &&
            r >= 0 && r < W) {
            per[r] += t;
            ++k;
        }
    }
    fclose(f);
    return k;
}

/* The collective per int8 bucket where the cost model says, at W = 2 and
 * 4 NCCL ranks (one process, a device each), on a test link of 0.25 us and
 * 450 GB/s (the engine's device codecs at its own rate): buckets of 64 KB,
 * 360 KB and 1 MB fp32 against S*(W) = sdnn_cm_crossover(all-gather, coded
 * ring) of the comm's pricing (0.50 MB at W = 2, 0.24 MB at 4): each result
 * bit for bit its collective's reference, the bytes the comm reports and
 * the simulated NCCL's own count = sdnn_wire_bytes of the collective. */
static void choices(int simulated)
{
    static const size_t sizes[3] = {16384, 90112, 262144};
    sdnn_cm_coll took[2][3] = {{SDNN_CM_NCOLL, SDNN_CM_NCOLL, SDNN_CM_NCOLL},
                               {SDNN_CM_NCOLL, SDNN_CM_NCOLL, SDNN_CM_NCOLL}};
    for (int wi = 0; wi < 2; ++wi) {
        const int W = wi ? 4 : 2;
        char count_path[] = "/tmp/sdnn-engine-ops-bytes-XXXXXX";
        int fd = mkstemp(count_path);
        if (fd >= 0) close(fd);
        if (simulated && fd >= 0) setenv("SDNN_SIM_NCCL_BYTES", count_path, 1);
        network *ns[4] = {0};
        for (int r = 0; r < W; ++r) ns[r] = gt_parse_file("cfg/shapes.cfg", "batch=2\n");
        sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
        sdnn_engine *e = NULL;
        sdnn_comm *comm = NULL;
        sdnn_status s = ns[W - 1] ? sdnn_engine_create(&sdnn_engine_gpu, ns, W, &o, &e)
                                  : SDNN_ERR_INVALID;
        if (s == SDNN_OK) s = e->ops->comm_open(e, NULL, &comm);
        sdnn_link test_link = {"test-0.25us", 0.25e-6, 450e9};
        if (s == SDNN_OK) s = sdnn_comm_set_link(comm, &test_link, "test");
        SOFT_ASSERT(s == SDNN_OK, "W=%d: engine and comm over NCCL (%s)", W,
                    s == SDNN_OK ? "ok" : sdnn_last_error());
        double expect = 0, reported = 0;
        if (s == SDNN_OK) {
            const sdnn_codec_ops *c8 = sdnn_codec_find("int8");
            sdnn_codec_params cp = SDNN_CODEC_PARAMS_INIT;
            sdnn_cm_env env;
            sdnn_codec_model m;
            unsigned offers = 0;
            sdnn_cm_coll path;
            (void)sdnn_gpu_engine_comm_pricing(comm, c8, &cp, sizes[0], &env, &m, &offers, &path);
            const double Sx = sdnn_cm_crossover(&env, &m, SDNN_CM_ALLGATHER, SDNN_CM_CODED_RING);
            printf("    W=%d: S* = %.3f MB (all-gather below, coded ring above)\n", W, Sx / 1e6);
            SOFT_ASSERT((offers & SDNN_CM_OFFERS(SDNN_CM_ALLGATHER)) &&
                        (offers & SDNN_CM_OFFERS(SDNN_CM_CODED_RING)),
                        "W=%d: the comm offers int8 the all-gather and the coded ring (%#x)", W,
                        offers);
            for (int i = 0; i < 3; ++i) {
                const size_t n = sizes[i];
                float *hin[4], *din[4];
                for (int r = 0; r < W; ++r) {
                    hin[r] = malloc(n * 4);
                    gt_seed(1000 + (uint64_t)(10 * i + r));
                    gt_fill(hin[r], n, -1, 1);
                    din[r] = NULL;
                    (void)e->ops->buf_alloc(e, r, n, &din[r]);
                    (void)e->ops->buf_write(e, r, din[r], hin[r], n);
                }
                char what[64];
                snprintf(what, sizeof what, "W=%d, %.0f KB", W, n * 4 / 1e3);
                size_t wire = 0;
                took[wi][i] = coded_vs_ref(e, comm, what, din, (const float *const *)hin, W, n,
                                           500 + (uint64_t)i, &wire);
                const int below = (double)n * 4 < Sx, ag = below && W == 2;
                SOFT_ASSERT(took[wi][i] == (ag ? SDNN_CM_ALLGATHER : SDNN_CM_CODED_RING),
                            "%s: %s S* = %.3f MB%s: the %s (took the %s)", what,
                            below ? "below" : "above", Sx / 1e6,
                            below && !ag ? ", the all-gather's bytes over the cap" : "",
                            ag ? "all-gather" : "coded ring", sdnn_cm_coll_name(took[wi][i]));
                if (below && !ag) {
                    const double bx = (double)n * 4;
                    SOFT_ASSERT(sdnn_cm_exchange_via(&env, &m, bx, SDNN_CM_ALLGATHER).total_s <
                                    sdnn_cm_exchange_via(&env, &m, bx, SDNN_CM_CODED_RING).total_s &&
                                sdnn_cm_choose(&env, &m, bx, SDNN_CM_OFFERS_ALL) ==
                                    SDNN_CM_ALLGATHER,
                                "%s: the all-gather is the faster, uncapped the model takes it; "
                                "the cap keeps the ring", what);
                }
                const double enc = (double)c8->encoded_size(&cp, n);
                const double per = sdnn_wire_bytes(took[wi][i] == SDNN_CM_ALLGATHER
                                                       ? SDNN_WIRE_ALLGATHER : SDNN_WIRE_ALLREDUCE,
                                                   W, enc);
                /* sdnn_comm_allreduce_mean_coded reports what each replica sends */
                SOFT_ASSERT(fabs((double)wire - per) <= 0.5, "%s: the comm's bytes per replica "
                            "%zu = sdnn_wire_bytes(%s, W, encoded) = %.0f", what, wire,
                            took[wi][i] == SDNN_CM_ALLGATHER ? "all-gather" : "all-reduce", per);
                expect += per;
                reported += (double)wire;
                for (int r = 0; r < W; ++r) {
                    e->ops->buf_free(e, r, din[r]);
                    free(hin[r]);
                }
            }
        }
        sdnn_engine_destroy(e);   /* frees the communicators: the counter's lines */
        for (int r = 0; r < W; ++r)
            if (ns[r]) sdnn_network_free(ns[r]);
        if (simulated && fd >= 0) {
            double per[4] = {0, 0, 0, 0}, mean = 0;
            int lines = sim_counted(count_path, per, W);
            for (int r = 0; r < W; ++r) mean += per[r] / W;
            SOFT_ASSERT(lines == W && fabs(mean - expect) <= 1.0,
                        "W=%d: the simulated NCCL counted %.0f bytes per rank (%d lines) = "
                        "sdnn_wire_bytes of the collectives taken, %.0f (the comm said %.0f)", W,
                        mean, lines, expect, reported);
            unsetenv("SDNN_SIM_NCCL_BYTES");
        }
        if (fd >= 0) remove(count_path);
    }
    /* both choices happen: at W=2 small buckets by the all-gather, large
     * ones by the ring; at W=4 every one by the ring */
    SOFT_ASSERT(took[0][0] == SDNN_CM_ALLGATHER && took[0][1] == SDNN_CM_ALLGATHER &&
                took[0][2] == SDNN_CM_CODED_RING && took[1][0] == SDNN_CM_CODED_RING &&
                took[1][1] == SDNN_CM_CODED_RING && took[1][2] == SDNN_CM_CODED_RING,
                "W=2: 64 and 360 KB by the all-gather, 1 MB by the coded ring; W=4: all by the "
                "coded ring (W=2: %s, %s, %s)", sdnn_cm_coll_name(took[0][0]),
                sdnn_cm_coll_name(took[0][1]), sdnn_cm_coll_name(took[0][2]));
}

/* What sdnn_comm_announce of one int8 bucket of n floats prints (the
 * banner on stdout), into buf. */
static void banner_of(sdnn_comm *comm, size_t n, char *buf, size_t len)
{
    const sdnn_codec_ops *codec[1] = {sdnn_codec_find("int8")};
    const size_t count[1] = {n};
    sdnn_codec_params cp = SDNN_CODEC_PARAMS_INIT;
    buf[0] = 0;
    char path[] = "/tmp/sdnn-engine-ops-banner-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    fflush(stdout);
    int saved = dup(1);
    if (saved < 0 || dup2(fd, 1) < 0) {
        close(fd);
        remove(path);
        return;
    }
    sdnn_comm_announce(comm, codec, count, 1, &cp, 0);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    ssize_t got = pread(fd, buf, len - 1, 0);
    buf[got > 0 ? got : 0] = 0;
    close(fd);
    remove(path);
}

/* The link the step hands over flips an int8 bucket's collective at W = 2
 * (see the header): the crossover and both choices from the comm's own
 * pricing, checked against the formula, each collective run and held to
 * its reference, its bytes to the simulated NCCL's count. */
static void handoff(int simulated)
{
    enum { W = 2 };
    const size_t n = (size_t)1 << 21;   /* 8.39 MB of fp32 */
    char count_path[] = "/tmp/sdnn-engine-ops-bytes-XXXXXX";
    int fd = mkstemp(count_path);
    if (fd >= 0) close(fd);
    if (simulated && fd >= 0) setenv("SDNN_SIM_NCCL_BYTES", count_path, 1);
    network *ns[W] = {0};
    for (int r = 0; r < W; ++r) ns[r] = gt_parse_file("cfg/shapes.cfg", "batch=2\n");
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    sdnn_engine *e = NULL;
    sdnn_comm *comm = NULL;
    sdnn_status s = ns[W - 1] ? sdnn_engine_create(&sdnn_engine_gpu, ns, W, &o, &e)
                              : SDNN_ERR_INVALID;
    if (s == SDNN_OK) s = e->ops->comm_open(e, NULL, &comm);
    SOFT_ASSERT(s == SDNN_OK, "handoff: engine and comm over NCCL at W=%d (%s)", W,
                s == SDNN_OK ? "ok" : sdnn_last_error());
    double expect = 0;
    if (s == SDNN_OK) {
        const sdnn_codec_ops *c8 = sdnn_codec_find("int8");
        sdnn_codec_params cp = SDNN_CODEC_PARAMS_INIT;
        const sdnn_link slow = {"test-1ms", 1e-3, 1e9};
        float *hin[W], *din[W];
        for (int r = 0; r < W; ++r) {
            hin[r] = malloc(n * 4);
            gt_seed(2000 + (uint64_t)r);
            gt_fill(hin[r], n, -1, 1);
            din[r] = NULL;
            (void)e->ops->buf_alloc(e, r, n, &din[r]);
            (void)e->ops->buf_write(e, r, din[r], hin[r], n);
        }
        sdnn_cm_coll took[2] = {SDNN_CM_NCOLL, SDNN_CM_NCOLL};
        for (int h = 0; h < 2; ++h) {
            if (h == 1) {
                /* refused: no bandwidth; the pricing stays the default */
                const sdnn_link none = {"no-bandwidth", 1e-3, 0};
                SOFT_ASSERT(sdnn_comm_set_link(comm, &none, "measured") == SDNN_ERR_INVALID,
                            "handoff: a link of 0 B/s is refused");
                SOFT_ASSERT(sdnn_comm_set_link(comm, &slow, "measured") == SDNN_OK,
                            "handoff: the 1 ms, 1 GB/s link is taken (%s)", sdnn_last_error());
            }
            sdnn_cm_env env;
            sdnn_codec_model m;
            unsigned offers = 0;
            sdnn_cm_coll path = SDNN_CM_NCOLL;
            (void)sdnn_gpu_engine_comm_pricing(comm, c8, &cp, n, &env, &m, &offers, &path);
            const double Sx = sdnn_cm_crossover(&env, &m, SDNN_CM_ALLGATHER, SDNN_CM_CODED_RING);
            /* W = 2: ring - all-gather = alpha - dec/2, dec = S / dec_Bps */
            const double formula = 2.0 * env.link.alpha_s * m.dec_Bps;
            const double want_alpha = h ? slow.alpha_s : 3e-6;
            const sdnn_cm_coll want = (double)n * 4 < Sx ? SDNN_CM_ALLGATHER : SDNN_CM_CODED_RING;
            printf("    handoff %s: link %s %.1f us, S* = %.3f MB, the %.2f MB bucket by the %s\n",
                   h ? "after" : "before", env.link.name, env.link.alpha_s * 1e6, Sx / 1e6,
                   n * 4 / 1e6, sdnn_cm_coll_name(path));
            SOFT_ASSERT(fabs(env.link.alpha_s - want_alpha) <= 1e-12 &&
                        fabs(Sx - formula) <= 1e-9 * formula && path == want,
                        "handoff %s: the comm prices with alpha %.1f us (want %.1f), S* %.4g = "
                        "2 alpha x dec rate %.4g, and takes the %s (model: %s)",
                        h ? "after" : "before", env.link.alpha_s * 1e6, want_alpha * 1e6, Sx,
                        formula, sdnn_cm_coll_name(path), sdnn_cm_coll_name(want));
            char banner[4096], what[64];
            banner_of(comm, n, banner, sizeof banner);
            const char *link_text = h ? "link: measured test-1ms, 1000.0 us, 1.00 GB/s"
                                      : "link: default nvlink4 (not measured), 3.0 us, 450.00 GB/s";
            char via[64];
            snprintf(via, sizeof via, ": int8 via %s: ", sdnn_cm_coll_name(path));
            SOFT_ASSERT(strstr(banner, link_text) && strstr(banner, via),
                        "handoff %s: the banner names '%s' and '%s' (it says: %s)",
                        h ? "after" : "before", link_text, via, banner);
            snprintf(what, sizeof what, "handoff %s", h ? "after" : "before");
            size_t wire = 0;
            took[h] = coded_vs_ref(e, comm, what, din, (const float *const *)hin, W, n,
                                   700 + (uint64_t)h, &wire);
            const double per = sdnn_wire_bytes(took[h] == SDNN_CM_ALLGATHER
                                                   ? SDNN_WIRE_ALLGATHER : SDNN_WIRE_ALLREDUCE,
                                               W, (double)c8->encoded_size(&cp, n));
            SOFT_ASSERT(took[h] == path && fabs((double)wire - per) <= 0.5,
                        "%s: took the %s as priced; bytes per replica %zu = sdnn_wire_bytes %.0f",
                        what, sdnn_cm_coll_name(took[h]), wire, per);
            expect += per;
        }
        SOFT_ASSERT(took[0] == SDNN_CM_CODED_RING && took[1] == SDNN_CM_ALLGATHER,
                    "handoff: the 8.39 MB bucket by the coded ring on nvlink4, by the all-gather "
                    "on the handed 1 ms link (%s, then %s)", sdnn_cm_coll_name(took[0]),
                    sdnn_cm_coll_name(took[1]));
        for (int r = 0; r < W; ++r) {
            e->ops->buf_free(e, r, din[r]);
            free(hin[r]);
        }
    }
    sdnn_engine_destroy(e);   /* frees the communicators: the counter's lines */
    for (int r = 0; r < W; ++r)
        if (ns[r]) sdnn_network_free(ns[r]);
    if (simulated && fd >= 0) {
        double per[W] = {0, 0}, mean = 0;
        int lines = sim_counted(count_path, per, W);
        for (int r = 0; r < W; ++r) mean += per[r] / W;
        SOFT_ASSERT(lines == W && fabs(mean - expect) <= 1.0,
                    "handoff: the simulated NCCL counted %.0f bytes per rank (%d lines) = the "
                    "comm's, %.0f", mean, lines, expect);
        unsetenv("SDNN_SIM_NCCL_BYTES");
    }
    if (fd >= 0) remove(count_path);
    /* a table without the op: the handoff is a no-op */
    sdnn_comm *local = NULL;
    const sdnn_link slow = {"test-1ms", 1e-3, 1e9};
    s = sdnn_comm_open("local", &local);
    SOFT_ASSERT(s == SDNN_OK && sdnn_comm_set_link(local, &slow, "measured") == SDNN_OK,
                "handoff: the local backend (no set_link op) takes a link as a no-op");
    sdnn_comm_close(local);
}

int main(void)
{
    argv0_ = "engine_ops";
    setenv("SDNN_SIM_DEVICES", "4", 0);   /* read by the simulated runtime only */
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK) sdnn_dev_describe(0, desc, sizeof desc);
    printf("    device 0: %s%s\n", desc,
           strstr(desc, "simulated") ? " (host logic and kernels on the host executor; no GPU)" : "");
    if (ndev < NREP) {
        printf("    %d device(s): the engine's ops need %d (not run)\n", ndev, NREP);
        return gt_summary(argv0_);
    }
    registry();
    static const int one_device[NREP] = {0, 0};
    (void)run(NULL);
    (void)run(one_device);
    handoff(strstr(desc, "simulated") != NULL);
    if (ndev >= 4) choices(strstr(desc, "simulated") != NULL);
    else printf("    %d device(s): the collective choice at W = 4 needs 4 (not run)\n", ndev);
    return gt_summary(argv0_);
}
