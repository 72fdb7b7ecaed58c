/*
 * loader: see loader.h.  Darknet's load_data already runs in a thread of its
 * own; this module keeps exactly one batch in flight and measures how long
 * training waits for it.
 */
#include "loader.h"
#include "clock.h"

#include <string.h>

sdnn_status sdnn_loader_start(sdnn_loader *L, load_args args)
{
    memset(&L->buffer, 0, sizeof L->buffer);
    L->args = args;
    L->args.d = &L->buffer;
    L->wait_s = 0;
    L->thread = load_data(L->args);
    L->running = 1;
    return SDNN_OK;
}

sdnn_status sdnn_loader_next(sdnn_loader *L, data *out)
{
    if (!L->running) return SDNN_ERROR(SDNN_ERR_INTERNAL, "loader is not running");
    double t0 = sdnn_now_s();
    pthread_join(L->thread, NULL);
    L->wait_s = sdnn_now_s() - t0;
    *out = L->buffer;
    memset(&L->buffer, 0, sizeof L->buffer);
    L->thread = load_data(L->args);
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
