/*
 * preload: the preload ring of one device (plugin/cuda/preload.c) against
 * its contract in gpu.h.  Needs a device (a real one or the simulated
 * runtime, make GPU=sim).
 *
 *   a popped slot is never a push's target   K = 2 and K = 1: with every
 *                      other slot queued, a push while a slot is popped and
 *                      not released is SDNN_ERR_INVALID and leaves the
 *                      popped slot's host truth (y_host, read by host
 *                      losses) and device rows as they were popped
 *   room               K - queued - popped, at every point of the cycle
 *   order              after the release, the refused push succeeds; the
 *                      slots come back in push order with their own rows
 *   statistics         one copy per released slot, bytes of the rows
 *   bad input          a push of 0 rows or of more rows than a slot holds,
 *                      a pop with nothing queued, a release with nothing
 *                      popped: SDNN_ERR_INVALID, and the ring goes on
 */
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"

enum { ROWS = 3, IN = 5, TR = 2 };

/* The rows of batch `tag`: x[r][i] = tag * 100 + r * 10 + i, y = -x. */
typedef struct batch {
    float x[ROWS][IN], y[ROWS][TR];
    float *xr[ROWS], *yr[ROWS];
} batch;

static void make(batch *b, int tag)
{
    for (int r = 0; r < ROWS; ++r) {
        for (int i = 0; i < IN; ++i) b->x[r][i] = (float)(tag * 100 + r * 10 + i);
        for (int i = 0; i < TR; ++i) b->y[r][i] = -(float)(tag * 100 + r * 10 + i);
        b->xr[r] = b->x[r];
        b->yr[r] = b->y[r];
    }
}

/* 1 when the slot holds batch b: its host truth and (read on the compute
 * stream, which waits for the slot's copy) its device rows. */
static int holds(sdnn_gpu_vdev *vd, const sdnn_gpu_slot *s, const batch *b, const char *what)
{
    float x[ROWS * IN], y[ROWS * TR];
    sdnn_status st = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, x, s->x, sizeof x, 1);
    if (st == SDNN_OK) st = sdnn_dcopy(vd, SDNN_STREAM_COMPUTE, y, s->y, sizeof y, 1);
    if (st != SDNN_OK) {
        SOFT_ASSERT(0, "%s: reading the slot: %s", what, sdnn_last_error());
        return 0;
    }
    int host = s->y_host && memcmp(s->y_host, b->y, sizeof b->y) == 0;
    int dev = memcmp(x, b->x, sizeof x) == 0 && memcmp(y, b->y, sizeof y) == 0;
    SOFT_ASSERT(host, "%s: the slot's host truth is the batch's (first value %g, batch %g)", what,
                s->y_host ? (double)s->y_host[0] : 0.0, (double)b->y[0][0]);
    SOFT_ASSERT(dev, "%s: the slot's device rows are the batch's (x[0] %g, batch %g)", what,
                (double)x[0], (double)b->x[0][0]);
    return host && dev;
}

/* K slots: fill every slot, pop one, try to push into the popped one. */
static void popped_slot(sdnn_gpu_vdev *vd, int K)
{
    char what[64];
    sdnn_gpu_preload *p = NULL;
    sdnn_status st = sdnn_gpu_preload_create(vd, K, ROWS, IN, TR, &p);
    SOFT_ASSERT(st == SDNN_OK, "K=%d: create: %s", K, st ? sdnn_last_error() : "ok");
    if (st != SDNN_OK) return;
    batch b[8];
    for (int i = 0; i < 8; ++i) make(&b[i], i + 1);
    int pushed = 0, popped = 0;
    for (; pushed < K; ++pushed)
        SOFT_ASSERT(sdnn_gpu_preload_push(p, b[pushed].xr, b[pushed].yr, ROWS) == SDNN_OK,
                    "K=%d: push %d of %d", K, pushed, K);
    SOFT_ASSERT(sdnn_gpu_preload_room(p) == 0, "K=%d: room 0 with %d queued (%d)", K, K,
                sdnn_gpu_preload_room(p));
    st = sdnn_gpu_preload_push(p, b[pushed].xr, b[pushed].yr, ROWS);
    SOFT_ASSERT(st == SDNN_ERR_INVALID, "K=%d: a push into a full ring is SDNN_ERR_INVALID (%s)",
                K, sdnn_strerror(st));

    sdnn_gpu_slot s;
    SOFT_ASSERT(sdnn_gpu_preload_pop(p, &s) == SDNN_OK, "K=%d: pop", K);
    SOFT_ASSERT(sdnn_gpu_preload_queued(p) == K - 1 && sdnn_gpu_preload_room(p) == 0,
                "K=%d: after a pop, %d queued and room 0 (%d, %d)", K, K - 1,
                sdnn_gpu_preload_queued(p), sdnn_gpu_preload_room(p));
    /* The slot after the queued ones is the popped one. */
    st = sdnn_gpu_preload_push(p, b[pushed].xr, b[pushed].yr, ROWS);
    SOFT_ASSERT(st == SDNN_ERR_INVALID,
                "K=%d: a push while the only other slot is popped and not released is "
                "SDNN_ERR_INVALID (%s)", K, sdnn_strerror(st));
    if (st == SDNN_OK) ++pushed;   /* the defect: it took the popped slot */
    snprintf(what, sizeof what, "K=%d: popped slot after the refused push", K);
    holds(vd, &s, &b[popped], what);
    SOFT_ASSERT(sdnn_gpu_preload_queued(p) == (st == SDNN_OK ? K : K - 1),
                "K=%d: the refused push queued nothing (%d queued)", K, sdnn_gpu_preload_queued(p));

    SOFT_ASSERT(sdnn_gpu_preload_release(p) == SDNN_OK, "K=%d: release", K);
    ++popped;
    SOFT_ASSERT(sdnn_gpu_preload_room(p) == 1, "K=%d: room 1 after the release (%d)", K,
                sdnn_gpu_preload_room(p));
    if (st != SDNN_OK) {
        st = sdnn_gpu_preload_push(p, b[pushed].xr, b[pushed].yr, ROWS);
        SOFT_ASSERT(st == SDNN_OK, "K=%d: after the release the push succeeds (%s)", K,
                    st ? sdnn_last_error() : "ok");
        if (st == SDNN_OK) ++pushed;
    }
    /* Everything queued comes back in push order. */
    while (popped < pushed && sdnn_gpu_preload_queued(p) > 0) {
        if (sdnn_gpu_preload_pop(p, &s) != SDNN_OK) {
            SOFT_ASSERT(0, "K=%d: pop %d: %s", K, popped, sdnn_last_error());
            break;
        }
        snprintf(what, sizeof what, "K=%d: slot %d in push order", K, popped);
        holds(vd, &s, &b[popped], what);
        SOFT_ASSERT(sdnn_gpu_preload_release(p) == SDNN_OK, "K=%d: release %d", K, popped);
        ++popped;
    }
    SOFT_ASSERT(popped == K + 1, "K=%d: %d batches went through (%d)", K, K + 1, popped);
    SOFT_ASSERT(sdnn_gpu_preload_room(p) == K, "K=%d: room %d when empty (%d)", K, K,
                sdnn_gpu_preload_room(p));
    SOFT_ASSERT(sdnn_gpu_vdev_sync(vd) == SDNN_OK, "K=%d: sync", K);
    sdnn_gpu_preload_stats ps;
    SOFT_ASSERT(sdnn_gpu_preload_stats_get(p, &ps) == SDNN_OK, "K=%d: stats", K);
    SOFT_ASSERT(ps.copies == popped, "K=%d: one copy per released slot (%d, %d released)", K,
                ps.copies, popped);
    SOFT_ASSERT(ps.bytes == (size_t)popped * ROWS * (IN + TR) * sizeof(float),
                "K=%d: %zu bytes copied", K, ps.bytes);
    sdnn_gpu_preload_destroy(p);
}

static void bad_input(sdnn_gpu_vdev *vd)
{
    sdnn_gpu_preload *p = NULL;
    if (sdnn_gpu_preload_create(vd, 2, ROWS, IN, TR, &p) != SDNN_OK) {
        SOFT_ASSERT(0, "bad input: create: %s", sdnn_last_error());
        return;
    }
    batch b;
    make(&b, 7);
    sdnn_gpu_slot s;
    SOFT_ASSERT(sdnn_gpu_preload_pop(p, &s) == SDNN_ERR_INVALID, "pop with nothing queued");
    SOFT_ASSERT(sdnn_gpu_preload_release(p) == SDNN_ERR_INVALID, "release with nothing popped");
    SOFT_ASSERT(sdnn_gpu_preload_push(p, b.xr, b.yr, 0) == SDNN_ERR_INVALID, "push of 0 rows");
    SOFT_ASSERT(sdnn_gpu_preload_push(p, b.xr, b.yr, ROWS + 1) == SDNN_ERR_INVALID,
                "push of more rows than a slot holds");
    SOFT_ASSERT(sdnn_gpu_preload_queued(p) == 0 && sdnn_gpu_preload_room(p) == 2,
                "refused calls changed nothing (%d queued, room %d)", sdnn_gpu_preload_queued(p),
                sdnn_gpu_preload_room(p));
    SOFT_ASSERT(sdnn_gpu_preload_push(p, b.xr, b.yr, ROWS) == SDNN_OK, "then a push succeeds");
    SOFT_ASSERT(sdnn_gpu_preload_pop(p, &s) == SDNN_OK, "and its pop");
    SOFT_ASSERT(sdnn_gpu_preload_pop(p, &s) == SDNN_ERR_INVALID,
                "a second pop before the release is refused");
    holds(vd, &s, &b, "bad input: the popped slot after a refused second pop");
    SOFT_ASSERT(sdnn_gpu_preload_release(p) == SDNN_OK, "release");
    sdnn_gpu_preload_destroy(p);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "preload";
    sdnn_gpu_vdev *vd = NULL;
    GT_OK(sdnn_gpu_vdev_open(NULL, &vd));
    popped_slot(vd, 2);
    popped_slot(vd, 1);
    popped_slot(vd, 3);
    bad_input(vd);
    sdnn_gpu_vdev_close(vd);
    return gt_summary("preload");
}
