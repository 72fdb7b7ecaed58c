/* batch: see batch.h.  The geometry follows the fork's load_data_detection,
 * fill_truth_detection, correct_boxes, blend_truth_mosaic and
 * image_data_augmentation (its
 * OpenCV build) at the commit named in bench/RESULTS.md, written here in C
 * on libdarknet's float images. */
#include "batch.h"
#include "splitmix.h"
#include "readable.h"

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

/* ---- letter_box ------------------------------------------------------------------ */

void sdnn_batch_letter_box(sdnn_crop *c, int ow, int oh, int w, int h)
{
    /* The fork's float arithmetic, each side truncated back to an int. */
    float img_ar = (float)ow / (float)oh, net_ar = (float)w / (float)h;
    if (img_ar / net_ar > 1) { /* wider than the input: taller crop */
        float delta_h = ((float)ow / net_ar - (float)oh) / 2;
        c->ptop = (int)((float)c->ptop - delta_h);
        c->pbot = (int)((float)c->pbot - delta_h);
    } else {
        float delta_w = ((float)oh * net_ar - (float)ow) / 2;
        c->pleft = (int)((float)c->pleft - delta_w);
        c->pright = (int)((float)c->pright - delta_w);
    }
    c->swidth = ow - c->pleft - c->pright;
    c->sheight = oh - c->ptop - c->pbot;
    if (c->swidth < 1) c->swidth = 1;
    if (c->sheight < 1) c->sheight = 1;
}

/* ---- mosaic ------------------------------------------------------------------------ */

void sdnn_batch_mosaic_corner(sdnn_crop *c, int flip, int q)
{
    /* The fork's moves: one side's slack joins the opposite side's (which
     * side: the quarter's and, horizontally, the flip's); the sums, and so
     * swidth and sheight, are unchanged. */
    int left_to_right = (q == 0 || q == 2) ? !flip : flip;
    if (left_to_right) c->pright += c->pleft, c->pleft = 0;
    else c->pleft += c->pright, c->pright = 0;
    if (q < 2) c->pbot += c->ptop, c->ptop = 0;
    else c->ptop += c->pbot, c->pbot = 0;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

sdnn_mosaic_shift sdnn_batch_mosaic_shift(sdnn_crop c, int flip, int ow, int oh, int w, int h,
                                          int cut_x, int cut_y)
{
    int pleft = flip ? c.pright : c.pleft, pright = flip ? c.pleft : c.pright;
    sdnn_mosaic_shift s;
    s.left = imin(cut_x, imax(0, -pleft * w / ow));
    s.top = imin(cut_y, imax(0, -c.ptop * h / oh));
    s.right = imin(w - cut_x, imax(0, -pright * w / ow));
    s.bot = imin(h - cut_y, imax(0, -c.pbot * h / oh));
    return s;
}

void sdnn_batch_mosaic_pixels(const float *ai, int w, int h, int cut_x, int cut_y, int q,
                              sdnn_mosaic_shift s, float *out)
{
    int x0 = (q & 1) ? cut_x : 0, nx = (q & 1) ? w - cut_x : cut_x;
    int y0 = q < 2 ? 0 : cut_y, y1 = q < 2 ? cut_y : h;
    int sx = (q & 1) ? s.left : w - cut_x - s.right;
    for (int k = 0; k < 3; ++k)
        for (int y = y0; y < y1; ++y) {
            int sy = q < 2 ? y + h - cut_y - s.bot : s.top + y - cut_y;
            memcpy(out + (size_t)k * w * h + (size_t)y * w + x0,
                   ai + (size_t)k * w * h + (size_t)sy * w + sx, (size_t)nx * sizeof *out);
        }
}

/* One axis of a mosaic box clipped to the input's border: lo and hi are the
 * box's edges in pixels, size the input's extent on that axis, *c and *s the
 * box's centre and size (relative) moved so that it ends at the border. */
static void clip_border(int lo, int hi, int size, float *c, float *s)
{
    const float f = (float)size;
    if (lo < 0) {
        float d = (float)lo / f;
        *c -= d / 2;
        *s += d;
    }
    if (hi > size) {
        float d = (float)(hi - size) / f;
        *c -= d / 2;
        *s -= d;
    }
}

int sdnn_batch_mosaic_truth(float *truth, int count, const float *qtruth, int w, int h,
                            int cut_x, int cut_y, int q, sdnn_mosaic_shift s, int bound,
                            int num_boxes)
{
    const float lowest_w = 1.0f / (float)w, lowest_h = 1.0f / (float)h;
    const float fw = (float)w, fh = (float)h, cx = (float)cut_x, cy = (float)cut_y;
    float sx = (q & 1) ? (cx - (float)s.left) / fw : -((fw - cx - (float)s.right) / fw);
    float sy = q < 2 ? -((fh - cy - (float)s.bot) / fh) : (cy - (float)s.top) / fh;
    /* The fork reads num_boxes - count of the quarter's boxes. */
    for (int t = 0, n = num_boxes - count; t < n; ++t) {
        const float *o = qtruth + (size_t)t * 5;
        if (!o[0]) break;
        float xb = o[0] + sx, yb = o[1] + sy, wb = o[2], hb = o[3];
        int left = (int)((xb - wb / 2) * fw), right = (int)((xb + wb / 2) * fw);
        int top = (int)((yb - hb / 2) * fh), bot = (int)((yb + hb / 2) * fh);
        if (bound) { /* the quarter's own rectangle */
            int lb = (q & 1) ? cut_x : 0, rb = (q & 1) ? w : cut_x;
            int tb = q < 2 ? 0 : cut_y, bb = q < 2 ? cut_y : h;
            if (left < lb) left = lb;
            if (right > rb) right = rb;
            if (top < tb) top = tb;
            if (bot > bb) bot = bb;
            xb = ((float)(right + left) / 2) / fw;
            wb = (float)(right - left) / fw;
            yb = ((float)(bot + top) / 2) / fh;
            hb = (float)(bot - top) / fh;
        } else { /* the input's border only */
            clip_border(left, right, w, &xb, &wb);
            clip_border(top, bot, h, &yb, &hb);
            left = (int)((xb - wb / 2) * fw);
            right = (int)((xb + wb / 2) * fw);
            top = (int)((yb - hb / 2) * fh);
            bot = (int)((yb + hb / 2) * fh);
        }
        if (left >= 0 && right <= w && top >= 0 && bot <= h && wb > 0 && wb < 1 && hb > 0 &&
            hb < 1 && xb > 0 && xb < 1 && yb > 0 && yb < 1 && wb > lowest_w && hb > lowest_h) {
            float *n = truth + (size_t)count * 5;
            n[0] = xb;
            n[1] = yb;
            n[2] = wb;
            n[3] = hb;
            n[4] = o[4];
            ++count;
        }
    }
    return count;
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
    if (sdnn_check_readable(lbl) != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_IO, "the label file of %s: %s", path, sdnn_last_error());
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

sdnn_status sdnn_batch_read_net_keys(const char *cfg, sdnn_batch_net_keys *k)
{
    *k = (sdnn_batch_net_keys){.mosaic = 0, .mosaic_bound = 0, .letter_box = 0, .flip = 1};
    SDNN_CHECK(sdnn_check_readable(cfg)); /* a FIFO or a device: refused unopened */
    FILE *f = fopen(cfg, "r");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot be read", cfg);
    char raw[4096];
    int in_net = 0, seen = 0;
    while (fgets(raw, sizeof raw, f)) {
        char line[4096];
        size_t n = 0;
        for (const char *p = raw; *p; ++p) /* as Darknet's read_cfg: no blanks */
            if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') line[n++] = *p;
        line[n] = '\0';
        if (line[0] == '[') {
            in_net = strcmp(line, "[net]") == 0 || strcmp(line, "[network]") == 0;
            continue;
        }
        if (!in_net || line[0] == '#' || line[0] == ';') continue;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        static const char *const keys[4] = {"mosaic", "mosaic_bound", "letter_box", "flip"};
        int *dst[4] = {&k->mosaic, &k->mosaic_bound, &k->letter_box, &k->flip};
        for (int i = 0; i < 4; ++i)
            if (strcmp(line, keys[i]) == 0 && !(seen & (1 << i))) { /* the first, as option_find */
                *dst[i] = atoi(eq + 1);
                seen |= 1 << i;
            }
    }
    fclose(f);
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

/* One decoded image with its boxes. */
typedef struct source {
    image im;
    sdnn_label_box *boxes;
    int count;
} source;

static sdnn_status load_source(const char *path, source *src)
{
    memset(src, 0, sizeof *src);
    SDNN_CHECK(sdnn_check_readable(path)); /* load_image would block on a FIFO */
    SDNN_CHECK(sdnn_batch_read_labels(path, &src->boxes, &src->count));
    src->im = load_image_color((char *)path, 0, 0);
    if (!src->im.data || src->im.w < 1 || src->im.h < 1) {
        free(src->boxes);
        free_image(src->im);
        return SDNN_ERROR(SDNN_ERR_IO, "image %s could not be decoded", path);
    }
    return SDNN_OK;
}

static void free_source(source *src)
{
    free(src->boxes);
    free_image(src->im);
}

/* One augmented image from stream *s: its draws, (mosaic quarter q >= 0:
 * the corner move), the box shuffle, the crop, the truth and the pixels.
 * *c and *flip: the crop and flip used. */
static void augment(const sdnn_batch_opts *o, source *src, uint64_t *s, int q, float *x,
                    float *truth, sdnn_crop *c, int *flip)
{
    sdnn_batch_draw d;
    sdnn_batch_draws(s, o, &d);
    *c = sdnn_batch_crop(src->im.w, src->im.h, o->jitter, o->resize, &d);
    if (o->letter_box) sdnn_batch_letter_box(c, src->im.w, src->im.h, o->w, o->h);
    if (q >= 0 && coin(s)) sdnn_batch_mosaic_corner(c, d.flip, q);
    for (int i = src->count - 1; i > 0; --i) { /* the fork shuffles the boxes */
        int j = below(s, i + 1);
        sdnn_label_box t = src->boxes[i];
        src->boxes[i] = src->boxes[j];
        src->boxes[j] = t;
    }
    sdnn_batch_truth(src->boxes, src->count, src->im.w, src->im.h, *c, d.flip, o->w, o->h,
                     o->num_boxes, truth);
    sdnn_batch_pixels(src->im, *c, d.flip, d.dhue, d.dsat, d.dexp, o->w, o->h, x);
    *flip = d.flip;
}

/* The fork's rand_int(lo, hi): uniform over [lo, hi], both included. */
static int between(uint64_t *s, int lo, int hi)
{
    if (hi < lo) {
        int t = lo;
        lo = hi;
        hi = t;
    }
    return lo + below(s, hi - lo + 1);
}

/* A mosaic of the row's image (quarter 0) and three drawn from the list. */
static sdnn_status mosaic_image(const sdnn_batch_opts *o, const char *path, uint64_t *s,
                                float *x, float *truth)
{
    const float min_offset = 0.2f;
    int cut_x = between(s, (int)((float)o->w * min_offset), (int)((float)o->w * (1 - min_offset)));
    int cut_y = between(s, (int)((float)o->h * min_offset), (int)((float)o->h * (1 - min_offset)));
    size_t px = (size_t)o->w * o->h * 3, tb = (size_t)o->num_boxes * 5;
    float *ai = malloc(px * sizeof *ai), *qt = malloc(tb * sizeof *qt);
    if (!ai || !qt) {
        free(ai);
        free(qt);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a mosaic of %dx%d", o->w, o->h);
    }
    memset(truth, 0, tb * sizeof *truth);
    int count = 0;
    sdnn_status st = SDNN_OK;
    for (int q = 0; q < 4 && st == SDNN_OK; ++q) {
        int which = below(s, o->m);
        uint64_t qs = sdnn_splitmix64_next(s);
        source src;
        st = load_source(q == 0 ? path : o->paths[which], &src);
        if (st != SDNN_OK) break;
        sdnn_crop c;
        int flip;
        augment(o, &src, &qs, q, ai, qt, &c, &flip);
        sdnn_mosaic_shift sh =
            sdnn_batch_mosaic_shift(c, flip, src.im.w, src.im.h, o->w, o->h, cut_x, cut_y);
        sdnn_batch_mosaic_pixels(ai, o->w, o->h, cut_x, cut_y, q, sh, x);
        count = sdnn_batch_mosaic_truth(truth, count, qt, o->w, o->h, cut_x, cut_y, q, sh,
                                        o->mosaic_bound, o->num_boxes);
        free_source(&src);
    }
    free(ai);
    free(qt);
    return st;
}

static sdnn_status one_image(const sdnn_batch_opts *o, const char *path, uint64_t key, float *x,
                             float *truth)
{
    uint64_t s = key;
    /* mosaic=1: half of the images are mosaics (the fork draws this once
     * per loader thread's share of the batch; here once per image, so a
     * batch does not depend on the threads). */
    if (o->mosaic && coin(&s)) return mosaic_image(o, path, &s, x, truth);
    source src;
    SDNN_CHECK(load_source(path, &src));
    sdnn_crop c;
    int flip;
    augment(o, &src, &s, -1, x, truth, &c, &flip);
    free_source(&src);
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
    if (o->n < 1 || o->m < 1 || o->w < 1 || o->h < 1 || o->num_boxes < 1 || !(o->resize >= 0.01f) ||
        !(o->resize <= 100.0f)) /* beyond, the crop's int conversions overflow */
        return SDNN_ERROR(SDNN_ERR_INVALID, "batch builder: n=%d m=%d %dx%d boxes=%d resize=%g "
                          "(resize: 0.01 .. 100)",
                          o->n, o->m, o->w, o->h, o->num_boxes, (double)o->resize);
    if (o->mosaic && o->letter_box)
        return SDNN_ERROR(SDNN_ERR_INVALID, "batch builder: mosaic and letter_box cannot be "
                          "combined (the fork refuses it too)");
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
