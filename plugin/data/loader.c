/*
 * loader: see loader.h.  Darknet's load_data already runs in a thread of its
 * own; this module keeps exactly one batch in flight and measures how long
 * training waits for it.  With a timeline, a thread of ours starts
 * load_data and joins it, so the end of the load is seen and recorded;
 * without one nothing is added.  The project's own builder (batch.h) runs
 * in a thread of ours in place of load_data, with the same span.
 */
#include "loader.h"
#include "clock.h"

#include <string.h>

static void *traced_load(void *arg)
{
    sdnn_loader *L = arg;   /* the main thread leaves it alone until the join */
    double t0 = sdnn_now_s();
    pthread_t th = load_data(L->args);
    pthread_join(th, NULL);
    sdnn_timeline_span(L->tl, SDNN_TL_TRACK_LOADER, SDNN_TL_LOAD, t0, sdnn_now_s(), L->batches,
                       L->args.n, 0, NULL);
    return NULL;
}

static void *own_load(void *arg)
{
    sdnn_loader *L = arg;   /* the main thread leaves it alone until the join */
    double t0 = sdnn_now_s();
    const load_args *a = &L->args;
    sdnn_batch_opts o = {.paths = a->paths,
                         .m = a->m,
                         .n = a->n,
                         .w = a->w,
                         .h = a->h,
                         .num_boxes = a->num_boxes,
                         .jitter = a->jitter,
                         .resize = L->resize,
                         .hue = a->hue,
                         .saturation = a->saturation,
                         .exposure = a->exposure,
                         .flip = L->flip,
                         .mosaic = L->mosaic,
                         .mosaic_bound = L->mosaic_bound,
                         .letter_box = L->letter_box,
                         .seed = L->seed,
                         .threads = a->threads > 0 ? a->threads : 1};
    L->status = sdnn_batch_build(&o, L->first_batch + (uint64_t)(L->batches - 1), &L->buffer);
    if (L->tl)
        sdnn_timeline_span(L->tl, SDNN_TL_TRACK_LOADER, SDNN_TL_LOAD, t0, sdnn_now_s(),
                           L->batches, a->n, 0, NULL);
    return NULL;
}

static void launch(sdnn_loader *L)
{
    L->batches++;
    if (L->own) {
        if (pthread_create(&L->thread, NULL, own_load, L) != 0) {
            /* No thread: the batch is built here, before the step. */
            L->thread_ok = 0;
            own_load(L);
            return;
        }
        L->thread_ok = 1;
        return;
    }
    L->thread_ok = 1;
    if (L->tl && pthread_create(&L->thread, NULL, traced_load, L) == 0) return;
    L->thread = load_data(L->args);
}

static void join(sdnn_loader *L)
{
    if (L->thread_ok) pthread_join(L->thread, NULL);
    L->thread_ok = 0;
}

sdnn_status sdnn_loader_start(sdnn_loader *L, load_args args)
{
    memset(&L->buffer, 0, sizeof L->buffer);
    L->args = args;
    L->args.d = &L->buffer;
    L->wait_s = 0;
    L->status = SDNN_OK;
    launch(L);
    L->running = 1;
    return SDNN_OK;
}

sdnn_status sdnn_loader_next(sdnn_loader *L, data *out)
{
    if (!L->running) return SDNN_ERROR(SDNN_ERR_INTERNAL, "loader is not running");
    double t0 = sdnn_now_s();
    join(L);
    double t1 = sdnn_now_s();
    L->wait_s = t1 - t0;
    if (L->tl)
        sdnn_timeline_span(L->tl, SDNN_TL_TRACK_MAIN, SDNN_TL_DATA_WAIT, t0, t1, L->batches, 0, 0,
                           NULL);
    *out = L->buffer;
    memset(&L->buffer, 0, sizeof L->buffer);
    sdnn_status built = L->status;
    if (built != SDNN_OK) {
        /* The message is the builder's (a label file, an image); nothing
         * more is loaded. */
        return built;
    }
    launch(L);
    if (out->X.rows != L->args.n)
        return SDNN_ERROR(SDNN_ERR_IO, "loader produced %d images, expected %d", out->X.rows,
                          L->args.n);
    return SDNN_OK;
}

void sdnn_loader_stop(sdnn_loader *L)
{
    if (!L->running) return;
    join(L);
    free_data(L->buffer);
    memset(&L->buffer, 0, sizeof L->buffer);
    L->running = 0;
}

sdnn_status sdnn_loader_resize(sdnn_loader *L, int w, int h)
{
    sdnn_loader_stop(L);
    L->args.w = w;
    L->args.h = h;
    return sdnn_loader_start(L, L->args);
}

data sdnn_data_slice(data d, int part, int nparts)
{
    data p = {0};
    int lo = d.X.rows * part / nparts;
    int hi = d.X.rows * (part + 1) / nparts;
    p.shallow = 1;
    p.w = d.w;
    p.h = d.h;
    p.X.rows = hi - lo;
    p.X.cols = d.X.cols;
    p.X.vals = d.X.vals + lo;
    p.y.rows = hi - lo;
    p.y.cols = d.y.cols;
    p.y.vals = d.y.vals + lo;
    return p;
}
