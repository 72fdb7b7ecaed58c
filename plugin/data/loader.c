/*
 * loader: see loader.h.  Darknet's load_data already runs in a thread of its
 * own; this module keeps exactly one batch in flight and measures how long
 * training waits for it.  With a timeline, a thread of ours starts
 * load_data and joins it, so the end of the load is seen and recorded;
 * without one nothing is added.
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

static void launch(sdnn_loader *L)
{
    L->batches++;
    if (L->tl && pthread_create(&L->thread, NULL, traced_load, L) == 0) return;
    L->thread = load_data(L->args);
}

sdnn_status sdnn_loader_start(sdnn_loader *L, load_args args)
{
    memset(&L->buffer, 0, sizeof L->buffer);
    L->args = args;
    L->args.d = &L->buffer;
    L->wait_s = 0;
    launch(L);
    L->running = 1;
    return SDNN_OK;
}

sdnn_status sdnn_loader_next(sdnn_loader *L, data *out)
{
    if (!L->running) return SDNN_ERROR(SDNN_ERR_INTERNAL, "loader is not running");
    double t0 = sdnn_now_s();
    pthread_join(L->thread, NULL);
    double t1 = sdnn_now_s();
    L->wait_s = t1 - t0;
    if (L->tl)
        sdnn_timeline_span(L->tl, SDNN_TL_TRACK_MAIN, SDNN_TL_DATA_WAIT, t0, t1, L->batches, 0, 0,
                           NULL);
    *out = L->buffer;
    memset(&L->buffer, 0, sizeof L->buffer);
    launch(L);
    if (out->X.rows != L->args.n)
        return SDNN_ERROR(SDNN_ERR_IO, "loader produced %d images, expected %d", out->X.rows,
                          L->args.n);
    return SDNN_OK;
}

void sdnn_loader_stop(sdnn_loader *L)
{
    if (!L->running) return;
    pthread_join(L->thread, NULL);
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
