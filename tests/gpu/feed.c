/*
 * feed: the loader -> preload ring path of the gpu engine through the
 * trainer (sdnn_trainer_feed / step_fed, engine.h's feed op), on the
 * shapes detector (cfg/shapes.cfg) against the same trainer stepping the
 * same batches synchronously (sdnn_trainer_step: no ring).  On simulated
 * devices (make GPU=sim) this checks host logic, ordering and arithmetic,
 * with the CUDA kernels run as themselves on the host executor; never a
 * GPU or real NCCL.
 *
 *   preload=1, 2, 3 with split=cpu and preload=2, 3 with split=device0 on
 *   2 replicas, and split=device0 on 4: batches fed up to K ahead train in
 *   the order fed; after every step every parameter, update and running
 *   statistic pulled from the devices equals the synchronous trainer's bit
 *   for bit (the same kernels on the same rows: any other slot, a
 *   half-copied one or another replica's rows differ at once), and so do
 *   the losses;
 *   the copies of a feed, counted by the simulated runtime as they are
 *   queued: split=cpu puts each replica's rows (inputs and truths) on its
 *   own device from pinned memory and nothing between devices; split=
 *   device0 puts the whole batch on device 0 from pinned memory and each
 *   other replica's rows on its device by peer copies, none from the host;
 *   the K+1th feed is refused;
 *   multi-scale: K batches fed at 64x64, then a resize to 96x96: every
 *   batch fed is dropped (counted), a 64x64 batch is refused, and the
 *   step at 96x96 (the rings rebuilt at the new size, the exchange's comm
 *   kept) equals the synchronous trainer's after the same resize;
 *   the gpu engine refuses preload=0 (the key table's range is 1..8).
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "exchange.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

#define ROWS 8
#define STEPS 5

typedef struct fcase {
    int n, preload;
    const char *split;
} fcase;

/* The trainer's replicas' state as the devices hold it: pulled, then
 * compared byte for byte with the other trainer's. */
static int pulled(sdnn_trainer *t)
{
    sdnn_engine *e = sdnn_exchange_engine(sdnn_trainer_exchange(t));
    return e->ops->pull(e, SDNN_ENGINE_ALL) == SDNN_OK;
}

static size_t bytes_apart(network *a, network *b)
{
    size_t d = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL) continue;
        size_t nw = (size_t)x->nweights, nb = (size_t)x->n;
        d += memcmp(x->weights, y->weights, nw * 4) != 0;
        d += memcmp(x->weight_updates, y->weight_updates, nw * 4) != 0;
        d += memcmp(x->biases, y->biases, nb * 4) != 0;
        d += memcmp(x->bias_updates, y->bias_updates, nb * 4) != 0;
        if (x->batch_normalize) {
            d += memcmp(x->scales, y->scales, nb * 4) != 0;
            d += memcmp(x->rolling_mean, y->rolling_mean, nb * 4) != 0;
            d += memcmp(x->rolling_variance, y->rolling_variance, nb * 4) != 0;
        }
    }
    return d;
}

typedef struct pair {
    network *init, *fed[4], *ref[4];
    sdnn_trainer *F, *R;
} pair;

static void pair_free(pair *p, int n)
{
    sdnn_trainer_destroy(p->F);
    sdnn_trainer_destroy(p->R);
    for (int r = 0; r < n; ++r) {
        if (p->fed[r]) sdnn_network_free(p->fed[r]);
        if (p->ref[r]) sdnn_network_free(p->ref[r]);
    }
    if (p->init) sdnn_network_free(p->init);
}

/* Two gpu trainers over the same initial weights: F with (preload, split),
 * R with the defaults, stepped synchronously. */
static int pair_make(pair *p, const fcase *fc, const char *label)
{
    memset(p, 0, sizeof *p);
    char set[64];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=2\n", ROWS / fc->n);
    p->init = gt_parse_file("cfg/shapes.cfg", set);
    if (!p->init) return 0;
    gt_randomize(p->init, 41);
    for (int r = 0; r < fc->n; ++r) {
        p->fed[r] = gt_parse_file("cfg/shapes.cfg", set);
        p->ref[r] = gt_parse_file("cfg/shapes.cfg", set);
        if (!p->fed[r] || !p->ref[r]) return 0;
        gt_copy_net(p->fed[r], p->init);
        gt_copy_net(p->ref[r], p->init);
    }
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.bucket_mb = 0.05;
    snprintf(c.engine, sizeof c.engine, "gpu");
    if (sdnn_trainer_create(p->ref, fc->n, &c, 0, &p->R) != SDNN_OK) {
        SOFT_ASSERT(0, "%s: reference trainer: %s", label, sdnn_last_error());
        return 0;
    }
    c.preload = fc->preload;
    snprintf(c.split, sizeof c.split, "%s", fc->split);
    if (sdnn_trainer_create(p->fed, fc->n, &c, 0, &p->F) != SDNN_OK) {
        SOFT_ASSERT(0, "%s: trainer: %s", label, sdnn_last_error());
        return 0;
    }
    return 1;
}

static data batch_for(network *net, uint64_t seed)
{
    return gt_detection_data(ROWS, net->w, net->h, net->c, net->truths, gt_yolo_classes(net), seed);
}

typedef struct copies {
    uint64_t h2d[4], peer[4];
} copies;

static void copies_now(int n, copies *c)
{
    for (int r = 0; r < n; ++r) {
        sdnn_dev_stats st;
        memset(&st, 0, sizeof st);
        (void)sdnn_dev_stats_get(r, &st);
        c->h2d[r] = st.h2d_pinned_bytes;
        c->peer[r] = st.peer_bytes;
    }
}

/* One feed of `d` into F, checking what it copied where. */
static int feed_counted(pair *p, const fcase *fc, data d, const char *label)
{
    copies a, b;
    copies_now(fc->n, &a);
    sdnn_status s = sdnn_trainer_feed(p->F, d);
    copies_now(fc->n, &b);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: feed: %s", label, sdnn_last_error());
        free_data(d);
        return 0;
    }
    network *net = p->fed[0];
    uint64_t row = (uint64_t)(net->inputs + net->truths) * sizeof(float);
    uint64_t per = (uint64_t)(ROWS / fc->n) * row;
    int device0 = strcmp(fc->split, "device0") == 0 && fc->n > 1;
    int ok = 1;
    for (int r = 0; r < fc->n; ++r) {
        uint64_t h2d = b.h2d[r] - a.h2d[r], peer = b.peer[r] - a.peer[r];
        uint64_t want_h2d = device0 ? (r == 0 ? (uint64_t)ROWS * row : 0) : per;
        uint64_t want_peer = device0 && r > 0 ? per : 0;
        ok &= h2d == want_h2d && peer == want_peer;
        if (h2d != want_h2d || peer != want_peer)
            printf("    %s: device %d: %llu bytes from pinned memory (want %llu), %llu by peer "
                   "copies (want %llu)\n", label, r, (unsigned long long)h2d,
                   (unsigned long long)want_h2d, (unsigned long long)peer,
                   (unsigned long long)want_peer);
    }
    return ok;
}

static void run_case(const fcase *fc)
{
    char label[128];
    snprintf(label, sizeof label, "%d replicas, preload=%d, split=%s", fc->n, fc->preload,
             fc->split);
    pair p;
    if (!pair_make(&p, fc, label)) {
        SOFT_ASSERT(0, "%s: set-up failed", label);
        pair_free(&p, fc->n);
        return;
    }
    SOFT_ASSERT(sdnn_trainer_preload(p.F) == fc->preload, "%s: the trainer holds %d batches",
                label, sdnn_trainer_preload(p.F));
    int fed = 0, trained = 0, copies_ok = 1, refused = 0, equal = 1, losses = 1;
    size_t worst = 0;
    while (trained < STEPS) {
        /* Fill up to K ahead (never past the last step). */
        while (fed < STEPS && sdnn_trainer_queued(p.F) < sdnn_trainer_preload(p.F)) {
            if (!feed_counted(&p, fc, batch_for(p.fed[0], 500 + (uint64_t)fed), label)) {
                copies_ok = 0;
                if (sdnn_trainer_queued(p.F) == 0) goto out;
            }
            fed++;
        }
        if (fed < STEPS) {
            data extra = batch_for(p.fed[0], 99);
            refused += sdnn_trainer_feed(p.F, extra) == SDNN_ERR_INVALID;
            free_data(extra);
        }
        sdnn_step_stats fs, rs;
        sdnn_status s = sdnn_trainer_step_fed(p.F, &fs);
        SOFT_ASSERT(s == SDNN_OK, "%s: step_fed %d: %s", label, trained,
                    s == SDNN_OK ? "" : sdnn_last_error());
        data d = batch_for(p.ref[0], 500 + (uint64_t)trained);
        sdnn_status t = sdnn_trainer_step(p.R, d, &rs);
        free_data(d);
        SOFT_ASSERT(t == SDNN_OK, "%s: reference step %d: %s", label, trained,
                    t == SDNN_OK ? "" : sdnn_last_error());
        if (s != SDNN_OK || t != SDNN_OK) goto out;
        losses &= memcmp(&fs.loss, &rs.loss, sizeof fs.loss) == 0;
        if (!pulled(p.F) || !pulled(p.R)) {
            SOFT_ASSERT(0, "%s: pull: %s", label, sdnn_last_error());
            goto out;
        }
        for (int r = 0; r < fc->n; ++r) {
            size_t d = bytes_apart(p.fed[r], p.ref[r]);
            if (d > worst) worst = d;
            equal &= d == 0;
        }
        trained++;
    }
    SOFT_ASSERT(equal, "%s: after each of %d steps the devices' parameters equal the "
                "synchronous trainer's bit for bit (%zu tensors apart at worst)", label, STEPS,
                worst);
    SOFT_ASSERT(losses, "%s: the losses equal the synchronous trainer's bit for bit", label);
    SOFT_ASSERT(copies_ok, "%s: each feed copied %s", label,
                strcmp(fc->split, "device0") == 0 && fc->n > 1
                    ? "the batch to device 0 and each other replica's rows by peer copies"
                    : "each replica's rows from pinned memory to its own device");
    if (STEPS > fc->preload)
        SOFT_ASSERT(refused > 0, "%s: a feed past %d batches ahead is refused", label,
                    fc->preload);
out:
    pair_free(&p, fc->n);
}

/* Multi-scale: what was fed at the old size is dropped, never trained. */
static void resize_case(int preload, const char *split)
{
    fcase fc = {2, preload, split};
    char label[128];
    snprintf(label, sizeof label, "resize, preload=%d, split=%s", preload, split);
    pair p;
    if (!pair_make(&p, &fc, label)) {
        SOFT_ASSERT(0, "%s: set-up failed", label);
        pair_free(&p, fc.n);
        return;
    }
    int ok = 1;
    /* One step at 64x64 on both, then K more fed at 64x64 on F. */
    sdnn_step_stats fs, rs;
    data d = batch_for(p.fed[0], 700);
    ok &= sdnn_trainer_feed(p.F, d) == SDNN_OK;
    ok &= ok && sdnn_trainer_step_fed(p.F, &fs) == SDNN_OK;
    d = batch_for(p.ref[0], 700);
    ok &= sdnn_trainer_step(p.R, d, &rs) == SDNN_OK;
    free_data(d);
    for (int k = 0; k < preload && ok; ++k)
        ok &= sdnn_trainer_feed(p.F, batch_for(p.fed[0], 710 + (uint64_t)k)) == SDNN_OK;
    SOFT_ASSERT(ok && sdnn_trainer_queued(p.F) == preload, "%s: %d batches fed at 64x64 (%s)",
                label, preload, ok ? "" : sdnn_last_error());
    if (!ok) goto out;
    long before = sdnn_trainer_dropped(p.F);
    sdnn_status s = sdnn_trainer_resize(p.F, 96, 96);
    sdnn_status t = sdnn_trainer_resize(p.R, 96, 96);
    SOFT_ASSERT(s == SDNN_OK && t == SDNN_OK, "%s: resize to 96x96", label);
    if (s != SDNN_OK || t != SDNN_OK) goto out;
    SOFT_ASSERT(sdnn_trainer_dropped(p.F) - before == preload && sdnn_trainer_queued(p.F) == 0,
                "%s: the %d batches fed at 64x64 are dropped (%ld counted)", label, preload,
                sdnn_trainer_dropped(p.F) - before);
    gt_seed(1);
    data old = gt_detection_data(ROWS, 64, 64, 3, p.fed[0]->truths, 4, 720);
    s = sdnn_trainer_feed(p.F, old);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && strstr(sdnn_last_error(), "the network takes 27648 (96x96x3)"),
                "%s: a 64x64 batch after the resize is refused: %s", label, sdnn_last_error());
    free_data(old);
    int equal = 1;
    for (int k = 0; k < 2 && equal; ++k) {
        s = sdnn_trainer_feed(p.F, batch_for(p.fed[0], 730 + (uint64_t)k));
        if (s == SDNN_OK) s = sdnn_trainer_step_fed(p.F, &fs);
        d = batch_for(p.ref[0], 730 + (uint64_t)k);
        t = sdnn_trainer_step(p.R, d, &rs);
        free_data(d);
        SOFT_ASSERT(s == SDNN_OK && t == SDNN_OK, "%s: step %d at 96x96%s%s", label, k,
                    s == SDNN_OK && t == SDNN_OK ? "" : ": ", s == SDNN_OK && t == SDNN_OK ? "" : sdnn_last_error());
        if (s != SDNN_OK || t != SDNN_OK || !pulled(p.F) || !pulled(p.R)) goto out;
        equal &= memcmp(&fs.loss, &rs.loss, sizeof fs.loss) == 0;
        for (int r = 0; r < fc.n; ++r) equal &= bytes_apart(p.fed[r], p.ref[r]) == 0;
    }
    SOFT_ASSERT(equal, "%s: at 96x96 the fed trainer equals the synchronous one bit for bit "
                "(rings rebuilt at the new size, the exchange goes on)", label);
out:
    pair_free(&p, fc.n);
}

static void bad_preload(void)
{
    network *nets[2] = {gt_parse_file("cfg/shapes.cfg", "batch=4\nsubdivisions=2\n"),
                        gt_parse_file("cfg/shapes.cfg", "batch=4\nsubdivisions=2\n")};
    if (!nets[0] || !nets[1]) {
        SOFT_ASSERT(0, "cannot parse cfg/shapes.cfg");
        return;
    }
    sdnn_replicas_broadcast(nets, 2);
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    o.preload = 0;
    sdnn_engine *e = NULL;
    sdnn_status s = sdnn_engine_create(&sdnn_engine_gpu, nets, 2, &o, &e);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && !e && strstr(sdnn_last_error(), "preload=0 (1..8)"),
                "the gpu engine refuses preload=0: %s", sdnn_last_error());
    if (e) sdnn_engine_destroy(e);
    for (int r = 0; r < 2; ++r) sdnn_network_free(nets[r]);
}

int main(void)
{
    argv0_ = "feed";
    setenv("SDNN_SIM_DEVICES", "4", 0);   /* read by the simulated runtime only */
    int ndev = 0;
    if (sdnn_dev_count(&ndev) != SDNN_OK || ndev < 2) {
        printf("    fewer than 2 devices: the feed checks need 2 (not run)\n");
        SOFT_ASSERT(0, "2 devices for the feed checks (found %d)", ndev);
        return gt_summary("feed");
    }
    static const fcase cases[] = {
        {2, 1, "cpu"}, {2, 2, "cpu"}, {2, 3, "cpu"}, {2, 2, "device0"}, {2, 3, "device0"},
        {4, 2, "device0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
        if (cases[k].n > ndev) {
            printf("    %d replicas: %d devices here (not run)\n", cases[k].n, ndev);
            continue;
        }
        run_case(&cases[k]);
    }
    resize_case(2, "cpu");
    resize_case(3, "device0");
    bad_preload();
    return gt_summary("feed");
}
