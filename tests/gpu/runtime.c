/*
 * runtime: the device runtime of dev.h itself.  On any device: copies
 * round-trip, an event orders two streams, timing events, NCCL's group
 * semantics over two devices (a ring shift inside a group completes).  On
 * simulated devices (make GPU=sim) also what only the simulation can
 * promise: a host access through a device pointer faults at once; a host
 * pointer, a freed buffer, a buffer past its end or another device's
 * buffer in a kernel is SDNN_ERR_INVALID naming the call; a failed
 * operation is sticky on its stream; pageable copies stage their source;
 * the statistics tell pinned from pageable copies and count device memory
 * in use; a ring shift outside a group deadlocks, as with NCCL, and only
 * the stand-in's last-resort bound ends it.
 */
#include "dev.h"
#include "gpu_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

/* A call that must succeed inside a void check: on failure it says so and
 * leaves the check. */
#define GT_FN_OK(call)                                                                   \
    do {                                                                                 \
        sdnn_status s_ = (call);                                                         \
        if (s_ != SDNN_OK) {                                                             \
            SOFT_ASSERT(0, "%s: %s", #call, sdnn_last_error());                          \
            return;                                                                      \
        }                                                                                \
    } while (0)

static int has(const char *needle) { return strstr(sdnn_last_error(), needle) != NULL; }

static void copies_and_events(sdnn_dctx *c)
{
    const size_t n = 1 << 20;
    float *h = malloc(n * 4), *back = malloc(n * 4), *d = NULL, *e = NULL;
    gt_fill(h, n, -1, 1);
    GT_FN_OK(sdnn_dmalloc(c, n * 4, (void **)&d));
    GT_FN_OK(sdnn_dmalloc(c, n * 4, (void **)&e));
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, d, h, n * 4, 1));
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, back, d, n * 4, 1));
    SOFT_ASSERT(gt_bytes_differ(h, back, n * 4) == 0, "a copy round-trips bit for bit");
    /* compute: e = 2, e *= 3; comm waits for it, then d = d + e */
    sdnn_devent *ev = NULL, *t0 = NULL, *t1 = NULL;
    GT_FN_OK(sdnn_devent_create(c, 0, &ev));
    GT_FN_OK(sdnn_devent_create(c, 1, &t0));
    GT_FN_OK(sdnn_devent_create(c, 1, &t1));
    GT_FN_OK(sdnn_devent_record(t0, c, SDNN_STREAM_COMPUTE));
    for (int k = 0; k < 8; ++k) GT_FN_OK(sdnn_k_fill(c, e, n, 2.0f));
    GT_FN_OK(sdnn_k_scale(c, SDNN_STREAM_COMPUTE, e, n, 3.0f));
    GT_FN_OK(sdnn_devent_record(ev, c, SDNN_STREAM_COMPUTE));
    GT_FN_OK(sdnn_devent_record(t1, c, SDNN_STREAM_COMPUTE));
    GT_FN_OK(sdnn_devent_wait(ev, c, SDNN_STREAM_COMM));
    GT_FN_OK(sdnn_k_add(c, SDNN_STREAM_COMM, d, d, e, n));
    GT_FN_OK(sdnn_dctx_sync_stream(c, SDNN_STREAM_COMM));
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COMM, back, d, n * 4, 1));
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += back[i] != h[i] + 6.0f;
    SOFT_ASSERT(bad == 0, "an event orders the comm stream after the compute stream (%zu wrong)",
                bad);
    GT_FN_OK(sdnn_devent_sync(t1));
    float ms = -1;
    GT_FN_OK(sdnn_devent_elapsed(t0, t1, &ms));
    SOFT_ASSERT(ms >= 0 && sdnn_devent_done(t1), "timing events: %.3f ms", ms);
    sdnn_devent_destroy(ev);
    sdnn_devent_destroy(t0);
    sdnn_devent_destroy(t1);
    sdnn_dfree(d);
    sdnn_dfree(e);
    free(h);
    free(back);
}

/* A ring shift of two ranks inside a group completes. */
static void nccl_group(sdnn_dctx *c0, sdnn_dctx *c1)
{
    sdnn_dctx *ctx[2] = {c0, c1};
    sdnn_dnccl *nc[2];
    if (sdnn_dnccl_init_all(ctx, 2, nc) != SDNN_OK) {
        SOFT_ASSERT(0, "nccl over 2 devices: %s", sdnn_last_error());
        return;
    }
    const size_t n = 4096;
    float *s[2], *r[2], *h = malloc(n * 4);
    for (int k = 0; k < 2; ++k) {
        sdnn_dmalloc(ctx[k], n * 4, (void **)&s[k]);
        sdnn_dmalloc(ctx[k], n * 4, (void **)&r[k]);
        for (size_t i = 0; i < n; ++i) h[i] = (float)(k * 10000 + (int)i);
        sdnn_dcopy(ctx[k], 0, s[k], h, n * 4, 1);
    }
    sdnn_status st = sdnn_dnccl_group_start();
    for (int k = 0; k < 2 && st == SDNN_OK; ++k) {
        st = sdnn_dnccl_send(nc[k], ctx[k], SDNN_STREAM_COMM, s[k], n * 4, 1 - k);
        if (st == SDNN_OK) st = sdnn_dnccl_recv(nc[k], ctx[k], SDNN_STREAM_COMM, r[k], n * 4, 1 - k);
    }
    sdnn_status e2 = sdnn_dnccl_group_end();
    if (st == SDNN_OK) st = e2;
    for (int k = 0; k < 2 && st == SDNN_OK; ++k) st = sdnn_dctx_sync_stream(ctx[k], SDNN_STREAM_COMM);
    size_t bad = 0;
    for (int k = 0; k < 2 && st == SDNN_OK; ++k) {
        sdnn_dcopy(ctx[k], 0, h, r[k], n * 4, 1);
        for (size_t i = 0; i < n; ++i) bad += h[i] != (float)((1 - k) * 10000 + (int)i);
    }
    SOFT_ASSERT(st == SDNN_OK && bad == 0, "a ring shift inside an NCCL group completes (%zu wrong)%s%s",
                bad, st ? ": " : "", st ? sdnn_last_error() : "");
    for (int k = 0; k < 2; ++k) {
        sdnn_dnccl_destroy(nc[k]);
        sdnn_dfree(s[k]);
        sdnn_dfree(r[k]);
    }
    free(h);
}

/* ---- simulated devices only --------------------------------------------------------- */

static void faults(sdnn_dctx *c0, sdnn_dctx *c1)
{
    float *d = NULL, *other = NULL, host[16] = {0};
    sdnn_dmalloc(c0, 64 * 4, (void **)&d);
    sdnn_dmalloc(c1, 64 * 4, (void **)&other);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child's fault report (a sanitizer's, under ASan) is expected: keep it out of the log. */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        volatile float x = d[3];    /* must fault right here */
        (void)x;
        _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    SOFT_ASSERT((WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSEGV) || (WIFEXITED(ws) && WEXITSTATUS(ws)),
                "a host read through a device pointer faults at once (%s %d)",
                WIFSIGNALED(ws) ? "signal" : "exit", WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));

    sdnn_status s = sdnn_k_fill(c0, host, 16, 1);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("sdnn_k_fill") && has("host memory"),
                "a host pointer in a kernel: %s", sdnn_last_error());
    s = sdnn_k_axpy(c0, 64, 1, other, d);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("sdnn_k_axpy") && has("no peer access"),
                "device 1's buffer in a kernel on device 0: %s", sdnn_last_error());
    /* The launch is valid; the kernel's store past the end faults on the
     * guard page, which the executor reports as the kernel's error. */
    sdnn_dctx *oob = NULL;
    s = sdnn_dctx_create(sdnn_dctx_opts(c0), &oob);     /* its stream keeps the error */
    if (s == SDNN_OK) s = sdnn_k_fill(oob, d, 65, 1);
    if (s == SDNN_OK) s = sdnn_dctx_sync(oob);
    sdnn_dctx_destroy(oob);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("k_fill") && has("thread (64,0,0)") &&
                    has("past the end of an allocation of 256 bytes"),
                "a kernel past the end of a buffer: %s", sdnn_last_error());
    s = sdnn_dcopy(c0, 0, host, host + 8, 16, 1);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("sdnn_dcopy") && has("host to host"),
                "a copy with no device side: %s", sdnn_last_error());
    s = sdnn_dcopy_peer(c0, 0, other, 0, d, 0, 16);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("sdnn_dcopy_peer"),
                "a peer copy naming the wrong device: %s", sdnn_last_error());
    s = sdnn_dcopy_peer(c0, 0, other, 1, d, 0, 64 * 4);
    if (s == SDNN_OK) s = sdnn_dctx_sync(c0);
    SOFT_ASSERT(s == SDNN_OK, "a peer copy from device 0 to device 1");
    sdnn_dfree(d);
    s = sdnn_k_scale(c0, SDNN_STREAM_COMM, d, 4, 2);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("sdnn_k_scale") && has("use after free"),
                "a freed buffer in a kernel: %s", sdnn_last_error());
    s = sdnn_dcopy(c0, 0, host, d, 16, 1);
    SOFT_ASSERT(s == SDNN_ERR_INVALID && has("use after free"), "a copy from freed memory: %s",
                sdnn_last_error());
    sdnn_dfree(d);
    SOFT_ASSERT(has("double free"), "a double free is reported: %s", sdnn_last_error());
    sdnn_dfree(other);
}

static void stats_and_staging(sdnn_dctx *c)
{
    const size_t n = 1 << 16;
    sdnn_dev_stats a, b;
    GT_FN_OK(sdnn_dev_stats_get(0, &a));
    float *d = NULL, *pinned = NULL, *pageable = malloc(n * 4);
    GT_FN_OK(sdnn_dmalloc(c, n * 4, (void **)&d));
    GT_FN_OK(sdnn_hmalloc_pinned(n * 4, (void **)&pinned));
    for (size_t i = 0; i < n; ++i) pageable[i] = 1.0f;
    /* pageable: the source is staged at the call, so overwriting it at once is safe */
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, d, pageable, n * 4, 0));
    for (size_t i = 0; i < n; ++i) pageable[i] = 2.0f;
    GT_FN_OK(sdnn_dctx_sync_all(c));
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, pinned, d, n * 4, 1));
    size_t ones = 0;
    for (size_t i = 0; i < n; ++i) ones += pinned[i] == 1.0f;
    SOFT_ASSERT(ones == n, "a pageable copy stages its source (%zu of %zu)", ones, n);
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, d, pinned, n * 4, 1));
    GT_FN_OK(sdnn_dcopy(c, SDNN_STREAM_COPY, pageable, d, n * 4, 1));
    GT_FN_OK(sdnn_dev_stats_get(0, &b));
    SOFT_ASSERT(b.h2d_pageable - a.h2d_pageable == 1 && b.h2d_pinned - a.h2d_pinned == 1 &&
                    b.d2h_pinned - a.d2h_pinned == 1 && b.d2h_pageable - a.d2h_pageable == 1,
                "copy statistics tell pinned from pageable (h2d %llu/%llu, d2h %llu/%llu)",
                (unsigned long long)(b.h2d_pinned - a.h2d_pinned),
                (unsigned long long)(b.h2d_pageable - a.h2d_pageable),
                (unsigned long long)(b.d2h_pinned - a.d2h_pinned),
                (unsigned long long)(b.d2h_pageable - a.d2h_pageable));
    SOFT_ASSERT(b.ops - a.ops >= 4, "queued operations counted (%llu, 4 copies)",
                (unsigned long long)(b.ops - a.ops));
    SOFT_ASSERT(b.mem_live - a.mem_live == n * 4 && b.mem_peak >= b.mem_live,
                "device memory in use: %zu bytes more, peak %zu", b.mem_live - a.mem_live,
                b.mem_peak);
    sdnn_dfree(d);
    GT_FN_OK(sdnn_dev_stats_get(0, &b));
    SOFT_ASSERT(b.mem_live == a.mem_live, "freed memory leaves the count (%zu vs %zu)", b.mem_live,
                a.mem_live);
    sdnn_hfree_pinned(pinned);
    free(pageable);
}

/* Outside a group, each rank's send waits for a receive queued behind the
 * peer's own send: a deadlock, as with NCCL; the failure is then sticky. */
static void nccl_deadlock(sdnn_dctx *c0, sdnn_dctx *c1)
{
    setenv("SDNN_SIM_NCCL_HANG_S", "0.5", 1);
    sdnn_dctx *ctx[2] = {c0, c1};
    sdnn_dnccl *nc[2];
    if (sdnn_dnccl_init_all(ctx, 2, nc) != SDNN_OK) {
        SOFT_ASSERT(0, "nccl over 2 devices: %s", sdnn_last_error());
        return;
    }
    float *s[2], *r[2];
    for (int k = 0; k < 2; ++k) {
        sdnn_dmalloc(ctx[k], 4096, (void **)&s[k]);
        sdnn_dmalloc(ctx[k], 4096, (void **)&r[k]);
    }
    for (int k = 0; k < 2; ++k) {
        sdnn_dnccl_send(nc[k], ctx[k], SDNN_STREAM_COMM, s[k], 4096, 1 - k);
        sdnn_dnccl_recv(nc[k], ctx[k], SDNN_STREAM_COMM, r[k], 4096, 1 - k);
    }
    sdnn_status st = sdnn_dctx_sync_stream(c0, SDNN_STREAM_COMM);
    SOFT_ASSERT(st == SDNN_ERR_COMM && has("unmatched") && has("peer 1"),
                "a shift outside a group deadlocks (the stand-in's bound names the peer): %s",
                sdnn_last_error());
    (void)sdnn_dctx_sync_stream(c1, SDNN_STREAM_COMM);
    st = sdnn_dnccl_async_error(nc[0]);
    SOFT_ASSERT(st != SDNN_OK, "the communicator holds the error: %s", sdnn_last_error());
    st = sdnn_k_fill(c0, s[0], 4, 1);
    if (st == SDNN_OK) st = sdnn_k_scale(c0, SDNN_STREAM_COMM, s[0], 4, 1);
    if (st == SDNN_OK) st = sdnn_dctx_sync_stream(c0, SDNN_STREAM_COMM);
    SOFT_ASSERT(st == SDNN_ERR_COMM, "the failure is sticky on its stream: %s", sdnn_last_error());
    for (int k = 0; k < 2; ++k) {
        sdnn_dnccl_abort(nc[k]);
        sdnn_dnccl_destroy(nc[k]);
    }
    unsetenv("SDNN_SIM_NCCL_HANG_S");
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "runtime";
    int ndev = 0;
    char desc[256] = "";
    GT_OK(sdnn_dev_count(&ndev));
    GT_OK(sdnn_dev_describe(0, desc, sizeof desc));
    int simulated = strstr(desc, "simulated") != NULL;
    printf("    %d device(s); 0: %s\n", ndev, desc);
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    sdnn_dctx *c0 = NULL, *c1 = NULL;
    GT_OK(sdnn_dctx_create(&o, &c0));
    copies_and_events(c0);
    if (ndev >= 2) {
        o.device = 1;
        GT_OK(sdnn_dctx_create(&o, &c1));
        nccl_group(c0, c1);
    }
    if (simulated) {
        SOFT_ASSERT(ndev >= 2, "at least 2 simulated devices (%d)", ndev);
        stats_and_staging(c0);
        if (c1) {
            faults(c0, c1);
            nccl_deadlock(c0, c1);
        }
    }
    sdnn_dctx_destroy(c1);
    sdnn_dctx_destroy(c0);
    return gt_summary("runtime");
}
