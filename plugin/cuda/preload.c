/*
 * preload: the ring of K mini-batch slices that wait on one device
 * (DESIGN §2, mini-batch pre-loading).  A push copies the rows into the
 * slot's pinned staging buffer (the only host copy: Darknet's rows are
 * separate pageable allocations) and queues one asynchronous copy per
 * tensor on the copy stream; a pop makes the compute stream wait for that
 * copy's event, so the host never waits for a transfer, and a release
 * records when the compute stream is done with the slot.  A push waits on
 * the host only when the slot it reuses has not been released by the
 * device yet.
 *
 * Timing events measure each copy on the copy stream and how long the
 * compute stream stood waiting for it: the hidden fraction of the
 * transfers is 1 - exposed / copy.
 */
#ifdef GPU
#error "never compile the engine with -DGPU: Debian's libdarknet is a CPU build (layer layout)"
#endif
#include "gpu.h"

#include "dev.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    float *dx, *dy;                 /* device */
    float *hx, *hy;                 /* pinned */
    int rows;
    sdnn_devent *start, *copied;    /* copy stream */
    sdnn_devent *ready;             /* compute stream reached the pop */
    sdnn_devent *consumed;          /* compute stream released the slot */
    int in_use;                     /* consumed recorded, not yet waited for */
    int timed;                      /* stats not yet harvested */
} slot;

struct sdnn_gpu_preload {
    sdnn_dctx *ctx;
    int k, rows, inputs, truths;
    slot *s;
    int head, tail, count;
    int popped;                     /* slot popped and not released, or -1 */
    sdnn_gpu_preload_stats st;
};

void sdnn_gpu_preload_destroy(sdnn_gpu_preload *p)
{
    if (!p) return;
    if (p->ctx) sdnn_dctx_sync_all(p->ctx);
    for (int i = 0; p->s && i < p->k; ++i) {
        slot *s = &p->s[i];
        sdnn_dfree(s->dx);
        sdnn_dfree(s->dy);
        sdnn_hfree_pinned(s->hx);
        sdnn_hfree_pinned(s->hy);
        sdnn_devent_destroy(s->start);
        sdnn_devent_destroy(s->copied);
        sdnn_devent_destroy(s->ready);
        sdnn_devent_destroy(s->consumed);
    }
    free(p->s);
    free(p);
}

sdnn_status sdnn_gpu_preload_create(sdnn_gpu_vdev *vd, int slots, int rows, int inputs,
                                    int truths, sdnn_gpu_preload **out)
{
    *out = NULL;
    if (slots < 1 || rows < 1 || inputs < 1 || truths < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "preload: %d slots of %d rows x (%d inputs, %d truths)", slots, rows,
                          inputs, truths);
    sdnn_gpu_preload *p = calloc(1, sizeof *p);
    if (!p) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a preload ring");
    p->ctx = vd;
    p->k = slots;
    p->rows = rows;
    p->inputs = inputs;
    p->truths = truths;
    p->popped = -1;
    sdnn_status st = SDNN_OK;
    p->s = calloc((size_t)slots, sizeof *p->s);
    if (!p->s) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a preload ring");
        goto fail;
    }
    size_t xb = (size_t)rows * inputs * sizeof(float), yb = (size_t)rows * truths * sizeof(float);
    for (int i = 0; i < slots; ++i) {
        slot *s = &p->s[i];
        SDNN_CHECKGOTO(sdnn_dmalloc(vd, xb, (void **)&s->dx), st, fail);
        SDNN_CHECKGOTO(sdnn_hmalloc_pinned(xb, (void **)&s->hx), st, fail);
        if (yb) {
            SDNN_CHECKGOTO(sdnn_dmalloc(vd, yb, (void **)&s->dy), st, fail);
            SDNN_CHECKGOTO(sdnn_hmalloc_pinned(yb, (void **)&s->hy), st, fail);
        }
        SDNN_CHECKGOTO(sdnn_devent_create(vd, 1, &s->start), st, fail);
        SDNN_CHECKGOTO(sdnn_devent_create(vd, 1, &s->copied), st, fail);
        SDNN_CHECKGOTO(sdnn_devent_create(vd, 1, &s->ready), st, fail);
        SDNN_CHECKGOTO(sdnn_devent_create(vd, 0, &s->consumed), st, fail);
    }
    *out = p;
    return SDNN_OK;
fail:
    sdnn_gpu_preload_destroy(p);
    return st;
}

int sdnn_gpu_preload_queued(const sdnn_gpu_preload *p) { return p->count; }

int sdnn_gpu_preload_room(const sdnn_gpu_preload *p)
{
    return p->k - p->count - (p->popped >= 0);
}

/* Add a completed slot's copy time and exposed wait to the totals. */
static sdnn_status harvest(sdnn_gpu_preload *p, slot *s)
{
    if (!s->timed) return SDNN_OK;
    float copy = 0, wait = 0;
    SDNN_CHECK(sdnn_devent_elapsed(s->start, s->copied, &copy));
    SDNN_CHECK(sdnn_devent_elapsed(s->ready, s->copied, &wait));
    p->st.copy_ms += copy;
    if (wait > 0) p->st.exposed_ms += wait;
    p->st.bytes += (size_t)s->rows * ((size_t)p->inputs + p->truths) * sizeof(float);
    p->st.copies += 1;
    s->timed = 0;
    return SDNN_OK;
}

/* The tail slot, free for a push of `rows` rows (its last reader done). */
static sdnn_status take_tail(sdnn_gpu_preload *p, int rows, slot **out)
{
    if (rows < 1 || rows > p->rows)
        return SDNN_ERROR(SDNN_ERR_INVALID, "preload: %d rows for slots of %d", rows, p->rows);
    /* The queued slots run from head, the popped one sits just before
     * head, so with no room the tail is the popped slot (or a queued one). */
    if (sdnn_gpu_preload_room(p) < 1)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "preload: no free slot of %d (%d queued, %d popped and not released)",
                          p->k, p->count, p->popped >= 0);
    slot *s = &p->s[p->tail];
    if (s->in_use) {
        /* The compute stream may still read this slot. */
        SDNN_CHECK(sdnn_devent_sync(s->consumed));
        s->in_use = 0;
        SDNN_CHECK(harvest(p, s));
    }
    *out = s;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_push(sdnn_gpu_preload *p, float *const *xrows, float *const *yrows,
                                  int rows)
{
    slot *s;
    SDNN_CHECK(take_tail(p, rows, &s));
    for (int r = 0; r < rows; ++r) {
        memcpy(s->hx + (size_t)r * p->inputs, xrows[r], (size_t)p->inputs * sizeof(float));
        if (p->truths && yrows)
            memcpy(s->hy + (size_t)r * p->truths, yrows[r], (size_t)p->truths * sizeof(float));
    }
    s->rows = rows;
    SDNN_CHECK(sdnn_devent_record(s->start, p->ctx, SDNN_STREAM_COPY));
    SDNN_CHECK(sdnn_dcopy(p->ctx, SDNN_STREAM_COPY, s->dx, s->hx,
                          (size_t)rows * p->inputs * sizeof(float), 0));
    if (p->truths)
        SDNN_CHECK(sdnn_dcopy(p->ctx, SDNN_STREAM_COPY, s->dy, s->hy,
                              (size_t)rows * p->truths * sizeof(float), 0));
    SDNN_CHECK(sdnn_devent_record(s->copied, p->ctx, SDNN_STREAM_COPY));
    p->tail = (p->tail + 1) % p->k;
    p->count += 1;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_last(const sdnn_gpu_preload *p, sdnn_gpu_slot *out,
                                  sdnn_devent **copied)
{
    if (p->count == 0) return SDNN_ERROR(SDNN_ERR_INVALID, "preload: nothing queued");
    const slot *s = &p->s[(p->tail + p->k - 1) % p->k];
    out->x = s->dx;
    out->y = s->dy;
    out->y_host = s->hy;
    out->rows = s->rows;
    *copied = s->copied;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_push_peer(sdnn_gpu_preload *p, const float *x, const float *y,
                                       int src_dev, sdnn_devent *after, float *const *yrows,
                                       int rows)
{
    slot *s;
    SDNN_CHECK(take_tail(p, rows, &s));
    /* Only the truths go through the host (the host-side loss reads them
     * there); the inputs come from the source device. */
    for (int r = 0; p->truths && yrows && r < rows; ++r)
        memcpy(s->hy + (size_t)r * p->truths, yrows[r], (size_t)p->truths * sizeof(float));
    s->rows = rows;
    int dev = sdnn_dctx_device(p->ctx);
    SDNN_CHECK(sdnn_devent_wait(after, p->ctx, SDNN_STREAM_COPY));
    SDNN_CHECK(sdnn_devent_record(s->start, p->ctx, SDNN_STREAM_COPY));
    SDNN_CHECK(sdnn_dcopy_peer(p->ctx, SDNN_STREAM_COPY, s->dx, dev, x, src_dev,
                               (size_t)rows * p->inputs * sizeof(float)));
    if (p->truths)
        SDNN_CHECK(sdnn_dcopy_peer(p->ctx, SDNN_STREAM_COPY, s->dy, dev, y, src_dev,
                                   (size_t)rows * p->truths * sizeof(float)));
    SDNN_CHECK(sdnn_devent_record(s->copied, p->ctx, SDNN_STREAM_COPY));
    p->tail = (p->tail + 1) % p->k;
    p->count += 1;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_pop(sdnn_gpu_preload *p, sdnn_gpu_slot *out)
{
    if (p->count == 0) return SDNN_ERROR(SDNN_ERR_INVALID, "preload: nothing queued");
    if (p->popped >= 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "preload: release the popped slot first");
    slot *s = &p->s[p->head];
    SDNN_CHECK(sdnn_devent_record(s->ready, p->ctx, SDNN_STREAM_COMPUTE));
    SDNN_CHECK(sdnn_devent_wait(s->copied, p->ctx, SDNN_STREAM_COMPUTE));
    out->x = s->dx;
    out->y = s->dy;
    out->y_host = s->hy;
    out->rows = s->rows;
    p->popped = p->head;
    p->head = (p->head + 1) % p->k;
    p->count -= 1;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_release(sdnn_gpu_preload *p)
{
    if (p->popped < 0) return SDNN_ERROR(SDNN_ERR_INVALID, "preload: no slot popped");
    slot *s = &p->s[p->popped];
    SDNN_CHECK(sdnn_devent_record(s->consumed, p->ctx, SDNN_STREAM_COMPUTE));
    s->in_use = 1;
    s->timed = 1;
    p->popped = -1;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_preload_stats_get(sdnn_gpu_preload *p, sdnn_gpu_preload_stats *st)
{
    for (int i = 0; i < p->k; ++i) {
        slot *s = &p->s[i];
        if (s->timed && sdnn_devent_done(s->consumed)) SDNN_CHECK(harvest(p, s));
    }
    *st = p->st;
    return SDNN_OK;
}
