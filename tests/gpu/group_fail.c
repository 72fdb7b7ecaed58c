/*
 * group_fail: the device trainer's failed state and its feed contract
 * (gpu.h, plugin/cuda/group.c).  Needs a device (a real one or the
 * simulated runtime, make GPU=sim).
 *
 *   caller errors      a feed beyond `preload` fed steps, a feed of the
 *                      wrong size, a step with nothing fed: SDNN_ERR_INVALID,
 *                      nothing queued or popped, the group not failed, and
 *                      the steps after them train on the batches fed, in
 *                      order (the same weights as a group that never saw
 *                      the refused calls)
 *   a failed step      a backward that fails on the last replica, after
 *                      the others have run and every ring has been popped:
 *                      the step returns that failure, sdnn_gpu_group_failed
 *                      names it, and every later feed, step and pull is
 *                      SDNN_ERR_ABORTED with the first failure in its
 *                      message; the CPU networks keep what the last good
 *                      pull gave them; destroy works
 * Each with 1 replica and with 2 virtual replicas on one device.
 *   a failed exchange  (simulated devices only: the NCCL stand-in's
 *                      SDNN_SIM_NCCL_FAULT=error:K) 2 replicas on devices
 *                      0 and 1 with comm=nccl, an exchange call failing a few
 *                      calls in: the step that meets it fails, the group is
 *                      failed and refuses the rest, destroy returns
 */
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"
#include "replicas.h"

static const char *cfg =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=6\nheight=6\nchannels=2\n"
    "learning_rate=0.05\nmomentum=0.9\ndecay=0.0005\npolicy=constant\nmax_batches=1000\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

#define PRELOAD 2

typedef struct run {
    int n;
    network *nets[2];
    sdnn_gpu_group *G;
} run;

static sdnn_status start_opts(run *R, int n, network *init, const sdnn_gpu_group_options *o)
{
    memset(R, 0, sizeof *R);
    R->n = n;
    for (int r = 0; r < n; ++r) {
        R->nets[r] = gt_parse_text(cfg, NULL);
        if (!R->nets[r]) return SDNN_ERROR(SDNN_ERR_INVALID, "parse");
        gt_copy_net(R->nets[r], init);
    }
    return sdnn_gpu_group_create(R->nets, n, o, &R->G);
}

static sdnn_status start(run *R, int n, network *init)
{
    sdnn_gpu_group_options o = SDNN_GPU_GROUP_OPTIONS_INIT;
    o.preload = PRELOAD;
    return start_opts(R, n, init, &o);
}

static void stop(run *R)
{
    sdnn_gpu_group_destroy(R->G);
    for (int r = 0; r < R->n; ++r)
        if (R->nets[r]) sdnn_network_free(R->nets[r]);
}

static data batch_of(run *R, int k)
{
    return gt_class_data(R->n * R->nets[0]->batch, R->nets[0]->inputs, 5, 700 + (uint64_t)k);
}

/* Bytes of weights and biases that differ between a and b. */
static size_t differ(network *a, network *b)
{
    size_t d = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        d += gt_bytes_differ(x->weights, y->weights, nw * 4) +
             gt_bytes_differ(x->biases, y->biases, nb * 4);
    }
    return d;
}

static sdnn_status feed_step(run *R, int k)
{
    data d = batch_of(R, k);
    sdnn_gpu_step_stats st;
    sdnn_status s = sdnn_gpu_group_feed(R->G, d);
    if (s == SDNN_OK) s = sdnn_gpu_group_step(R->G, &st);
    free_data(d);
    return s;
}

/* Refused calls between good steps change nothing. */
static void caller_errors(int n, network *init)
{
    run a, b;
    sdnn_status s = start(&a, n, init);
    if (s == SDNN_OK) s = start(&b, n, init);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%d replicas: create: %s", n, sdnn_last_error());
        stop(&a);
        return;
    }
    sdnn_gpu_step_stats st;
    s = sdnn_gpu_group_step(a.G, &st);
    SOFT_ASSERT(s == SDNN_ERR_INVALID, "%d replicas: a step with nothing fed is SDNN_ERR_INVALID "
                "(%s)", n, sdnn_strerror(s));
    data d[PRELOAD + 1];
    for (int k = 0; k <= PRELOAD; ++k) d[k] = batch_of(&a, k);
    for (int k = 0; k < PRELOAD; ++k)
        SOFT_ASSERT(sdnn_gpu_group_feed(a.G, d[k]) == SDNN_OK, "%d replicas: feed %d", n, k);
    s = sdnn_gpu_group_feed(a.G, d[PRELOAD]);
    SOFT_ASSERT(s == SDNN_ERR_INVALID, "%d replicas: a feed beyond preload=%d fed steps is "
                "SDNN_ERR_INVALID, it does not block (%s)", n, PRELOAD, sdnn_strerror(s));
    data small = gt_rows(d[PRELOAD], 0, d[PRELOAD].X.rows - 1);
    s = sdnn_gpu_group_feed(a.G, small);
    SOFT_ASSERT(s == SDNN_ERR_INVALID, "%d replicas: a feed of %d rows is SDNN_ERR_INVALID (%s)",
                n, small.X.rows, sdnn_strerror(s));
    SOFT_ASSERT(sdnn_gpu_group_failed(a.G) == SDNN_OK,
                "%d replicas: caller errors do not fail the group", n);
    /* The reference group gets only the calls that succeed. */
    for (int k = 0; k < PRELOAD; ++k)
        SOFT_ASSERT(sdnn_gpu_group_feed(b.G, d[k]) == SDNN_OK, "%d replicas: reference feed", n);
    for (int k = 0; k < PRELOAD; ++k) {
        SOFT_ASSERT(sdnn_gpu_group_step(a.G, &st) == SDNN_OK, "%d replicas: step %d: %s", n, k,
                    sdnn_last_error());
        SOFT_ASSERT(sdnn_gpu_group_step(b.G, &st) == SDNN_OK, "%d replicas: reference step %d",
                    n, k);
    }
    s = sdnn_gpu_group_step(a.G, &st);
    SOFT_ASSERT(s == SDNN_ERR_INVALID, "%d replicas: a step past the fed ones is "
                "SDNN_ERR_INVALID (%s)", n, sdnn_strerror(s));
    SOFT_ASSERT(sdnn_gpu_group_feed(a.G, d[PRELOAD]) == SDNN_OK &&
                    sdnn_gpu_group_step(a.G, &st) == SDNN_OK,
                "%d replicas: feed and step after the refused calls: %s", n, sdnn_last_error());
    SOFT_ASSERT(sdnn_gpu_group_feed(b.G, d[PRELOAD]) == SDNN_OK &&
                    sdnn_gpu_group_step(b.G, &st) == SDNN_OK,
                "%d replicas: reference feed and step", n);
    SOFT_ASSERT(sdnn_gpu_group_pull(a.G) == SDNN_OK && sdnn_gpu_group_pull(b.G) == SDNN_OK,
                "%d replicas: pulls", n);
    for (int r = 0; r < n; ++r) {
        size_t x = differ(a.nets[r], b.nets[r]);
        SOFT_ASSERT(x == 0, "%d replicas: replica %d after refused calls = the reference bit for "
                    "bit (%zu bytes differ)", n, r, x);
    }
    SOFT_ASSERT(*a.nets[0]->seen == *b.nets[0]->seen && *a.nets[0]->seen > 0,
                "%d replicas: seen %zu = reference %zu", n, *a.nets[0]->seen, *b.nets[0]->seen);
    for (int k = 0; k <= PRELOAD; ++k) free_data(d[k]);
    stop(&a);
    stop(&b);
}

static int hook_calls;

static sdnn_status failing_hook(void *ctx, sdnn_gpu_net *g, int layer)
{
    (void)ctx;
    (void)g;
    ++hook_calls;
    return SDNN_ERROR(SDNN_ERR_COMM, "injected failure after the backward of layer %d", layer);
}

static void failed_step(int n, network *init)
{
    run a;
    if (start(&a, n, init) != SDNN_OK) {
        SOFT_ASSERT(0, "%d replicas: create: %s", n, sdnn_last_error());
        stop(&a);
        return;
    }
    SOFT_ASSERT(feed_step(&a, 0) == SDNN_OK, "%d replicas: a good step: %s", n, sdnn_last_error());
    SOFT_ASSERT(sdnn_gpu_group_pull(a.G) == SDNN_OK, "%d replicas: pull after the good step", n);
    network *saved = gt_parse_text(cfg, NULL);
    if (saved) gt_copy_net(saved, a.nets[0]);
    /* Both batches fed, then the last replica's backward fails: every ring
     * has been popped and the other replicas have run their passes. */
    data d0 = batch_of(&a, 1), d1 = batch_of(&a, 2);
    SOFT_ASSERT(sdnn_gpu_group_feed(a.G, d0) == SDNN_OK && sdnn_gpu_group_feed(a.G, d1) == SDNN_OK,
                "%d replicas: two feeds", n);
    sdnn_gpu_net_set_backward_hook(sdnn_gpu_group_net(a.G, n - 1), failing_hook, NULL);
    hook_calls = 0;
    sdnn_gpu_step_stats st;
    sdnn_status s = sdnn_gpu_group_step(a.G, &st);
    SOFT_ASSERT(s == SDNN_ERR_COMM && hook_calls == 1,
                "%d replicas: the step returns the injected failure (%s, %d hook calls)", n,
                sdnn_strerror(s), hook_calls);
    SOFT_ASSERT(sdnn_gpu_group_failed(a.G) == SDNN_ERR_COMM,
                "%d replicas: the group is failed with that status (%s)", n,
                sdnn_strerror(sdnn_gpu_group_failed(a.G)));
    /* Nothing goes on: one batch is still queued, yet the step is refused. */
    s = sdnn_gpu_group_step(a.G, &st);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED && strstr(sdnn_last_error(), "injected"),
                "%d replicas: the next step is SDNN_ERR_ABORTED naming the first failure (%s: %s)",
                n, sdnn_strerror(s), sdnn_last_error());
    SOFT_ASSERT(hook_calls == 1, "%d replicas: the refused step ran nothing (%d hook calls)", n,
                hook_calls);
    s = sdnn_gpu_group_feed(a.G, d0);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED, "%d replicas: a feed after the failure is "
                "SDNN_ERR_ABORTED (%s)", n, sdnn_strerror(s));
    s = sdnn_gpu_group_pull(a.G);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED && strstr(sdnn_last_error(), "injected"),
                "%d replicas: the pull before a save is SDNN_ERR_ABORTED (%s: %s)", n,
                sdnn_strerror(s), sdnn_last_error());
    if (saved) {
        size_t x = differ(a.nets[0], saved);
        SOFT_ASSERT(x == 0, "%d replicas: the CPU network keeps the last good pull (%zu bytes "
                    "differ)", n, x);
        sdnn_network_free(saved);
    }
    SOFT_ASSERT(sdnn_gpu_group_failed(a.G) == SDNN_ERR_COMM,
                "%d replicas: the first failure stays the group's status", n);
    free_data(d0);
    free_data(d1);
    stop(&a);
}

/* An exchange that fails in the NCCL stand-in of the simulated runtime. */
static void failed_exchange(network *init)
{
    int ndev = 0;
    if (sdnn_dev_count(&ndev) != SDNN_OK || ndev < 2) {
        printf("    failed exchange: skipped (%d devices)\n", ndev);
        return;
    }
    static const int devices[2] = {0, 1};
    sdnn_gpu_group_options o = SDNN_GPU_GROUP_OPTIONS_INIT;
    o.preload = PRELOAD;
    o.devices = devices;
    o.comm = "nccl";
    o.bucket_mb = 0.0005;   /* several buckets, several calls per step */
    setenv("SDNN_SIM_NCCL_FAULT", "error:7", 1);
    run a;
    sdnn_status s = start_opts(&a, 2, init, &o);
    unsetenv("SDNN_SIM_NCCL_FAULT");
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "failed exchange: create: %s", sdnn_last_error());
        stop(&a);
        return;
    }
    int k = 0;
    for (; k < 6 && s == SDNN_OK; ++k) s = feed_step(&a, 10 + k);
    SOFT_ASSERT(s != SDNN_OK && s != SDNN_ERR_ABORTED && s != SDNN_ERR_INVALID,
                "failed exchange: a step fails with the exchange's error (step %d: %s)", k - 1,
                s ? sdnn_last_error() : "none failed");
    SOFT_ASSERT(sdnn_gpu_group_failed(a.G) == s, "failed exchange: the group is failed with it "
                "(%s)", sdnn_strerror(sdnn_gpu_group_failed(a.G)));
    sdnn_gpu_step_stats st;
    data d = batch_of(&a, 20);
    s = sdnn_gpu_group_feed(a.G, d);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED, "failed exchange: feed refused (%s)", sdnn_strerror(s));
    s = sdnn_gpu_group_step(a.G, &st);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED, "failed exchange: step refused (%s)", sdnn_strerror(s));
    s = sdnn_gpu_group_pull(a.G);
    SOFT_ASSERT(s == SDNN_ERR_ABORTED, "failed exchange: pull refused (%s)", sdnn_strerror(s));
    free_data(d);
    stop(&a);   /* run.sh's timeout catches a destroy that hangs */
    printf("    failed exchange: destroyed\n");
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "group_fail";
    network *init = gt_parse_text(cfg, NULL);
    if (!init) {
        SOFT_ASSERT(0, "parse");
        return gt_summary("group_fail");
    }
    gt_randomize(init, 21);
    for (int n = 1; n <= 2; ++n) {
        caller_errors(n, init);
        failed_step(n, init);
    }
    failed_exchange(init);
    sdnn_network_free(init);
    return gt_summary("group_fail");
}
