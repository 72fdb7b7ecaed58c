/* batch: see batch.h.  The geometry follows the fork's load_data_detection,
 * fill_truth_detection, correct_boxes and image_data_augmentation (its
 * OpenCV build) at the commit named in bench/RESULTS.md, written here in C
 * on libdarknet's float images. */
#include "batch.h"
#include "splitmix.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers --------------------------------------------------------- */

/* Uniform in [0, 1) with 24 random bits (a float's mantissa). */
static float unit(uint64_t *s)
{
    return (float)(sdnn_splitmix64_next(s) >> 40) * (1.0f / 16777216.0f);
}

static float uniform(uint64_t *s, float lo, float hi)
{
    if (hi < lo) {
        float t = lo;
        lo = hi;
        hi = t;
    }
    return lo + unit(s) * (hi - lo);
}

static int coin(uint64_t *s) { return (int)(sdnn_splitmix64_next(s) >> 63); }

/* The fork's rand_scale: uniform in [1, v], inverted half of the time. */
static float rand_scale(uint64_t *s, float v)
{
    float x = uniform(s, 1.0f, v);
    return coin(s) ? 1.0f / x : x;
}

/* Uniform in [0, m). */
static int below(uint64_t *s, int m)
{
    return (int)(((sdnn_splitmix64_next(s) >> 32) * (uint64_t)m) >> 32);
}

void sdnn_batch_draws(uint64_t *s, const sdnn_batch_opts *o, sdnn_batch_draw *d)
{
    d->resize_r1 = unit(s);
    d->resize_r2 = unit(s);
    d->r1 = unit(s);
    d->r2 = unit(s);
    d->r3 = unit(s);
    d->r4 = unit(s);
    d->flip = o->flip ? coin(s) : 0;
    d->dhue = uniform(s, -o->hue, o->hue);
    d->dsat = rand_scale(s, o->saturation);
    d->dexp = rand_scale(s, o->exposure);
}

/* ---- the crop ----------------------------------------------------------------- */

/* The fork's rand_precalc_random. */
static float precalc(float lo, float hi, float r)
{
    if (hi < lo) {
        float t = lo;
        lo = hi;
        hi = t;
    }
    return r * (hi - lo) + lo;
}

sdnn_crop sdnn_batch_crop(int ow, int oh, float jitter, float resize, const sdnn_batch_draw *d)
{
    /* The fork's integer conversions (truncation toward zero) kept. */
    int dw = (int)((float)ow * jitter), dh = (int)((float)oh * jitter);
    float down = resize > 1.0f ? 1.0f / resize : resize;
    float up = resize < 1.0f ? 1.0f / resize : resize;
    int min_rdw = (int)((float)ow * (1.0f - 1.0f / down) / 2.0f);
    int min_rdh = (int)((float)oh * (1.0f - 1.0f / down) / 2.0f);
    int max_rdw = resize < 1.0f ? 0 : (int)((float)ow * (1.0f - 1.0f / up) / 2.0f);
    int max_rdh = resize < 1.0f ? 0 : (int)((float)oh * (1.0f - 1.0f / up) / 2.0f);
    sdnn_crop c;
    c.pleft = (int)precalc((float)-dw, (float)dw, d->r1);
    c.pright = (int)precalc((float)-dw, (float)dw, d->r2);
    c.ptop = (int)precalc((float)-dh, (float)dh, d->r3);
    c.pbot = (int)precalc((float)-dh, (float)dh, d->r4);
    c.pleft = (int)((float)c.pleft + precalc((float)min_rdw, (float)max_rdw, d->resize_r1));
    c.pright = (int)((float)c.pright + precalc((float)min_rdw, (float)max_rdw, d->resize_r2));
    c.ptop = (int)((float)c.ptop + precalc((float)min_rdh, (float)max_rdh, d->resize_r1));
    c.pbot = (int)((float)c.pbot + precalc((float)min_rdh, (float)max_rdh, d->resize_r2));
    c.swidth = ow - c.pleft - c.pright;
    c.sheight = oh - c.ptop - c.pbot;
    /* The fork's OpenCV would fail on an empty crop (jitter + resize
     * beyond what a side can give): one pixel is kept. */
    if (c.swidth < 1) c.swidth = 1;
    if (c.sheight < 1) c.sheight = 1;
    return c;
}

/* ---- the pixels --------------------------------------------------------------- */

static void rgb_to_hsv(float r, float g, float b, float *h, float *s, float *v)
{
    float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b)), d = mx - mn;
    *v = mx;
    *s = mx > 0 ? d / mx : 0;
    if (d <= 0) {
        *h = 0;
        return;
    }
    float x;
    if (mx == r) x = (g - b) / d;
    else if (mx == g) x = 2 + (b - r) / d;
    else x = 4 + (r - g) / d;
    x /= 6;
    *h = x < 0 ? x + 1 : x;
}

static void hsv_to_rgb(float h, float s, float v, float *r, float *g, float *b)
{
    float f6 = h * 6;
    int i = (int)floorf(f6);
    float f = f6 - (float)i;
    i %= 6;
    if (i < 0) i += 6;
    float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    switch (i) {
    case 0: *r = v, *g = t, *b = p; break;
    case 1: *r = q, *g = v, *b = p; break;
    case 2: *r = p, *g = v, *b = t; break;
    case 3: *r = p, *g = q, *b = v; break;
    case 4: *r = t, *g = p, *b = v; break;
    default: *r = v, *g = p, *b = q; break;
    }
}

/* Pixel (x, y) of channel k of the crop canvas: the image where the crop
 * covers it, else the image's mean colour. */
static float canvas(image src, sdnn_crop c, const float *mean, int k, int x, int y)
{
    int sx = x + c.pleft, sy = y + c.ptop;
    if (sx < 0 || sy < 0 || sx >= src.w || sy >= src.h) return mean[k];
    return src.data[(size_t)k * src.w * src.h + (size_t)sy * src.w + sx];
}

/* OpenCV's INTER_LINEAR source coordinate of output pixel i. */
static void source_of(int i, double scale, int n, int *i0, int *i1, float *f)
{
    float x = (float)(((double)i + 0.5) * scale - 0.5);
    int s = (int)floorf(x);
    float fr = x - (float)s;
    if (s < 0) s = 0, fr = 0;
    if (s >= n - 1) s = n - 1, fr = 0;
    *i0 = s;
    *i1 = s + 1 < n ? s + 1 : s;
    *f = fr;
}

void sdnn_batch_pixels(image src, sdnn_crop c, int flip, float dhue, float dsat, float dexp,
                       int w, int h, float *out)
{
    float mean[3] = {0, 0, 0};
    size_t plane = (size_t)src.w * src.h;
    int covers = c.pleft == 0 && c.ptop == 0 && c.swidth == src.w && c.sheight == src.h;
    if (!covers)
        for (int k = 0; k < 3; ++k) {
            double sum = 0;
            for (size_t i = 0; i < plane; ++i) sum += src.data[k * plane + i];
            mean[k] = plane ? (float)(sum / (double)plane) : 0;
        }
    double scx = (double)c.swidth / w, scy = (double)c.sheight / h;
    for (int y = 0; y < h; ++y) {
        int y0, y1;
        float fy;
        source_of(y, scy, c.sheight, &y0, &y1, &fy);
        for (int x = 0; x < w; ++x) {
            int x0, x1;
            float fx;
            source_of(x, scx, c.swidth, &x0, &x1, &fx);
            int ox = flip ? w - 1 - x : x;
            for (int k = 0; k < 3; ++k) {
                float a = canvas(src, c, mean, k, x0, y0), b = canvas(src, c, mean, k, x1, y0);
                float d = canvas(src, c, mean, k, x0, y1), e = canvas(src, c, mean, k, x1, y1);
                float top = a + (b - a) * fx, bot = d + (e - d) * fx;
                out[(size_t)k * w * h + (size_t)y * w + ox] = top + (bot - top) * fy;
            }
        }
    }
    if (dsat == 1 && dexp == 1 && dhue == 0) return;
    size_t p = (size_t)w * h;
    float shift = dhue * 179.0f / 180.0f;
    for (size_t i = 0; i < p; ++i) {
        float hh, s, v, r, g, b;
        rgb_to_hsv(out[i], out[p + i], out[2 * p + i], &hh, &s, &v);
        s = fminf(s * dsat, 1.0f);
        v = fminf(v * dexp, 1.0f);
        hh += shift;
        hh -= floorf(hh);
        hsv_to_rgb(hh, s, v, &r, &g, &b);
        out[i] = r;
        out[p + i] = g;
        out[2 * p + i] = b;
    }
}

/* ---- the truth ------------------------------------------------------------------ */

static float clamp01(float v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

int sdnn_batch_truth(const sdnn_label_box *boxes, int count, int ow, int oh, sdnn_crop c,
                     int flip, int w, int h, int num_boxes, float *truth)
{
    memset(truth, 0, (size_t)num_boxes * 5 * sizeof *truth);
    /* The fork's correct_boxes arguments: dx = (pleft/ow)/sx with
     * sx = swidth/ow, and the scale 1/sx. */
    float sx = (float)c.swidth / (float)ow, sy = (float)c.sheight / (float)oh;
    float dx = ((float)c.pleft / (float)ow) / sx, dy = ((float)c.ptop / (float)oh) / sy;
    float isx = 1.0f / sx, isy = 1.0f / sy;
    float lowest_w = 1.0f / (float)w, lowest_h = 1.0f / (float)h;
    if (count > num_boxes) count = num_boxes;
    int out = 0;
    for (int i = 0; i < count; ++i) {
        const sdnn_label_box *b = &boxes[i];
        /* The fork marks x = y = 0 invalid (and stops); dropped here. */
        if (b->x == 0 && b->y == 0) continue;
        float left = clamp01(b->x - b->w / 2), right = clamp01(b->x + b->w / 2);
        float top = clamp01(b->y - b->h / 2), bot = clamp01(b->y + b->h / 2);
        left = left * isx - dx;
        right = right * isx - dx;
        top = top * isy - dy;
        bot = bot * isy - dy;
        if (flip) {
            float t = left;
            left = 1.0f - right;
            right = 1.0f - t;
        }
        left = clamp01(left);
        right = clamp01(right);
        top = clamp01(top);
        bot = clamp01(bot);
        float x = (left + right) / 2, y = (top + bot) / 2;
        float bw = clamp01(right - left), bh = clamp01(bot - top);
        if (bw < lowest_w || bh < lowest_h) continue; /* left the image, or under a pixel */
        if (x == 0) x += lowest_w;
        if (y == 0) y += lowest_h;
        if (x <= 0 || x > 1 || y <= 0 || y > 1) continue;
        float *t = truth + (size_t)out * 5;
        t[0] = x;
        t[1] = y;
        t[2] = bw;
        t[3] = bh;
        t[4] = (float)b->id;
        ++out;
    }
    return out;
}

/* libdarknet's label path: the first of each of its replacements. */
static int label_path(const char *img, char *out, size_t cap)
{
    static const char *const from[] = {"images", "JPEGImages", "raw", ".jpg", ".png", ".JPG",
                                       ".JPEG"};
    static const char *const to[] = {"labels", "labels", "labels", ".txt", ".txt", ".txt",
                                     ".txt"};
    if (strlen(img) + 1 > cap) return -1;
    strcpy(out, img);
    for (size_t k = 0; k < sizeof from / sizeof from[0]; ++k) {
        char *p = strstr(out, from[k]);
        if (!p) continue;
        size_t lf = strlen(from[k]), lt = strlen(to[k]), ls = strlen(out);
        if (ls - lf + lt + 1 > cap) return -1;
        memmove(p + lt, p + lf, ls - (size_t)(p - out) - lf + 1);
        memcpy(p, to[k], lt);
    }
    return 0;
}

sdnn_status sdnn_batch_read_labels(const char *path, sdnn_label_box **boxes, int *count)
{
    char lbl[4096];
    *boxes = NULL;
    *count = 0;
    if (label_path(path, lbl, sizeof lbl) != 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: the label path is too long", path);
    FILE *f = fopen(lbl, "r");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s (the label file of %s): cannot be read", lbl, path);
    int cap = 0, n = 0, id;
    float x, y, w, h;
    sdnn_label_box *b = NULL;
    while (fscanf(f, "%d %f %f %f %f", &id, &x, &y, &w, &h) == 5) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            sdnn_label_box *g = realloc(b, (size_t)cap * sizeof *g);
            if (!g) {
                free(b);
                fclose(f);
                return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the boxes of %s", lbl);
            }
            b = g;
        }
        b[n++] = (sdnn_label_box){id, clamp01(x), clamp01(y), clamp01(w), clamp01(h)};
    }
    fclose(f);
    *boxes = b;
    *count = n;
    return SDNN_OK;
}

/* ---- the batch ------------------------------------------------------------------ */

typedef struct job {
    const sdnn_batch_opts *o;
    data *d;
    const int *index;       /* the image of each row */
    const uint64_t *key;    /* each row's stream */
    int first, step;        /* rows first, first + step, ... */
    sdnn_status status;
} job;

static sdnn_status one_image(const sdnn_batch_opts *o, const char *path, uint64_t key, float *x,
                             float *truth)
{
    sdnn_label_box *boxes;
    int count;
    SDNN_CHECK(sdnn_batch_read_labels(path, &boxes, &count));
    image im = load_image_color((char *)path, 0, 0);
    if (!im.data || im.w < 1 || im.h < 1) {
        free(boxes);
        free_image(im);
        return SDNN_ERROR(SDNN_ERR_IO, "image %s could not be decoded", path);
    }
    uint64_t s = key;
    sdnn_batch_draw d;
    sdnn_batch_draws(&s, o, &d);
    for (int i = count - 1; i > 0; --i) { /* the fork shuffles the boxes */
        int j = below(&s, i + 1);
        sdnn_label_box t = boxes[i];
        boxes[i] = boxes[j];
        boxes[j] = t;
    }
    sdnn_crop c = sdnn_batch_crop(im.w, im.h, o->jitter, o->resize, &d);
    sdnn_batch_truth(boxes, count, im.w, im.h, c, d.flip, o->w, o->h, o->num_boxes, truth);
    sdnn_batch_pixels(im, c, d.flip, d.dhue, d.dsat, d.dexp, o->w, o->h, x);
    free(boxes);
    free_image(im);
    return SDNN_OK;
}

static void *run_job(void *arg)
{
    job *j = arg;
    for (int r = j->first; r < j->o->n && j->status == SDNN_OK; r += j->step)
        j->status = one_image(j->o, j->o->paths[j->index[r]], j->key[r], j->d->X.vals[r],
                              j->d->y.vals[r]);
    return NULL;
}

sdnn_status sdnn_batch_build(const sdnn_batch_opts *o, uint64_t index, data *out)
{
    memset(out, 0, sizeof *out);
    if (o->n < 1 || o->m < 1 || o->w < 1 || o->h < 1 || o->num_boxes < 1 || !(o->resize > 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "batch builder: n=%d m=%d %dx%d boxes=%d resize=%g",
                          o->n, o->m, o->w, o->h, o->num_boxes, (double)o->resize);
    int *rows = malloc((size_t)o->n * sizeof *rows);
    uint64_t *keys = malloc((size_t)o->n * sizeof *keys);
    if (!rows || !keys) {
        free(rows);
        free(keys);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a batch of %d images", o->n);
    }
    /* The batch's stream: which images, then one stream per image. */
    uint64_t s = sdnn_splitmix64_mix(o->seed) ^ sdnn_splitmix64_mix(index * SDNN_SPLITMIX_GOLDEN + 1);
    for (int i = 0; i < o->n; ++i) rows[i] = below(&s, o->m);
    for (int i = 0; i < o->n; ++i) keys[i] = sdnn_splitmix64_next(&s);
    data d = {0};
    d.X = make_matrix(o->n, o->w * o->h * 3);
    d.y = make_matrix(o->n, o->num_boxes * 5);
    int T = o->threads < 1 ? 1 : o->threads > o->n ? o->n : o->threads;
    job jobs[16];
    pthread_t th[16];
    int started[16] = {0};
    if (T > 16) T = 16;
    for (int t = 0; t < T; ++t) {
        jobs[t] = (job){o, &d, rows, keys, t, T, SDNN_OK};
        if (t > 0) started[t] = pthread_create(&th[t], NULL, run_job, &jobs[t]) == 0;
    }
    /* A helper that did not start: its rows run here. */
    for (int t = 0; t < T; ++t)
        if (t == 0 || !started[t]) run_job(&jobs[t]);
    sdnn_status st = SDNN_OK;
    for (int t = 0; t < T; ++t) {
        if (started[t]) pthread_join(th[t], NULL);
        if (st == SDNN_OK) st = jobs[t].status;
    }
    free(rows);
    free(keys);
    if (st != SDNN_OK) {
        free_data(d);
        return st;
    }
    *out = d;
    return SDNN_OK;
}
