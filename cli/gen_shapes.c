/*
 * ./darknet scalednn gen-shapes OUTDIR [-n N] [-valid N] [-seed S] [-size PX]
 *                                  [-style textured|plain]
 *
 * Writes a small synthetic detection dataset in Darknet's YOLO layout:
 * coloured circles, squares, triangles and crosses (1-4 per image, varied
 * size, position and colour, a few overlapping slightly) on textured
 * backgrounds (gradients, stripes, blotches, checks, all with pixel noise).
 * -style plain (the main job's set) is the easy variant: 1-2 larger objects
 * (a quarter to nearly half the side) in strongly contrasting colours on a
 * flat background with light pixel noise, so that a tiny net learns a
 * detector that finds the objects at Darknet's threshold in a few minutes.
 *
 *   OUTDIR/images/{train,valid}/000001.png   images (PNG via libdarknet)
 *   OUTDIR/labels/{train,valid}/000001.txt   "class cx cy w h", normalised
 *   OUTDIR/train.txt, OUTDIR/valid.txt       one image path per line
 *   OUTDIR/shapes.names                      class names, one per line
 *
 * Everything comes from our own PRNG (splitmix64), one stream per image
 * derived from (seed, split, index): the same seed gives byte-identical
 * files, and image k does not depend on how many images were asked for.
 */
#include "commands.h"
#include "saveio.h"

#include "flags.h"

#include <darknet.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define GS_NCLASS 4
#define GS_MAX_OBJ 4
#define GS_MAX_COUNT 999999
#define GS_MIN_SIZE 16
#define GS_MAX_SIZE 1024

static const char *const gs_names[GS_NCLASS] = {
    "circle", "square", "triangle", "cross"
};

/* ---- PRNG -------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} gs_rng;

static uint64_t gs_next(gs_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static float gs_unif(gs_rng *r)
{
    return (float)(gs_next(r) >> 40) * (1.0f / 16777216.0f);
}

static float gs_range(gs_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * gs_unif(r);
}

/* Uniform integer in [0, n). */
static int gs_int(gs_rng *r, int n)
{
    return (int)((gs_next(r) >> 33) % (uint64_t)n);
}

static gs_rng gs_stream(uint64_t seed, int split, int index)
{
    gs_rng r = { seed ^ 0x5DEECE66Dull };
    uint64_t a = gs_next(&r);
    r.s = a ^ ((uint64_t)(split + 1) * 0xD1B54A32D192ED03ull)
            ^ ((uint64_t)(index + 1) * 0x8CB92BA72F3D8DD7ull);
    (void)gs_next(&r);
    return r;
}

/* ---- small helpers ---------------------------------------------------- */

static float gs_clamp01(float v)
{
    return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}

/* A random colour: random hue, fairly saturated, value in [0.35, 1]. */
static void gs_color(gs_rng *r, float rgb[3])
{
    float h = gs_unif(r) * 6.0f;
    float s = gs_range(r, 0.55f, 1.0f);
    float v = gs_range(r, 0.35f, 1.0f);
    int i = (int)h;
    float f = h - (float)i;
    float p = v * (1.0f - s), q = v * (1.0f - s * f), t = v * (1.0f - s * (1.0f - f));
    switch (i % 6) {
    case 0: rgb[0] = v; rgb[1] = t; rgb[2] = p; break;
    case 1: rgb[0] = q; rgb[1] = v; rgb[2] = p; break;
    case 2: rgb[0] = p; rgb[1] = v; rgb[2] = t; break;
    case 3: rgb[0] = p; rgb[1] = q; rgb[2] = v; break;
    case 4: rgb[0] = t; rgb[1] = p; rgb[2] = v; break;
    default: rgb[0] = v; rgb[1] = p; rgb[2] = q; break;
    }
}

/* A background colour: anything, less saturated. */
static void gs_bg_color(gs_rng *r, float rgb[3])
{
    float grey = gs_unif(r);
    for (int c = 0; c < 3; ++c)
        rgb[c] = gs_clamp01(grey + gs_range(r, -0.3f, 0.3f));
}

/* ---- backgrounds ------------------------------------------------------ */

/* The image styles (-style): the textured set (the default, the tests' set)
 * and the plain one. */
typedef enum { GS_TEXTURED = 0, GS_PLAIN = 1 } gs_style;

static void gs_background(gs_rng *r, image im, gs_style style)
{
    const int w = im.w, h = im.h, plane = w * h;
    float a[3], b[3];
    gs_bg_color(r, a);
    gs_bg_color(r, b);
    if (style == GS_PLAIN) {
        /* Flat colour plus light noise. */
        float amp = gs_range(r, 0.01f, 0.04f);
        for (int c = 0; c < 3; ++c)
            for (int i = 0; i < plane; ++i)
                im.data[c * plane + i] = a[c] + amp * (gs_unif(r) + gs_unif(r) - 1.0f);
        return;
    }
    int kind = gs_int(r, 4);
    float ang = gs_unif(r) * 6.2831853f;
    float dx = cosf(ang), dy = sinf(ang);

    if (kind == 2) {
        /* Blotches: a coarse random grid bilinearly upsampled. */
        enum { G = 5 };
        float grid[G][G][3];
        for (int gy = 0; gy < G; ++gy)
            for (int gx = 0; gx < G; ++gx) {
                float t = gs_unif(r);
                for (int c = 0; c < 3; ++c)
                    grid[gy][gx][c] = a[c] + (b[c] - a[c]) * t;
            }
        for (int y = 0; y < h; ++y) {
            float fy = (float)y / (float)(h - 1) * (G - 1);
            int y0 = (int)fy < G - 1 ? (int)fy : G - 2;
            float ty = fy - (float)y0;
            for (int x = 0; x < w; ++x) {
                float fx = (float)x / (float)(w - 1) * (G - 1);
                int x0 = (int)fx < G - 1 ? (int)fx : G - 2;
                float tx = fx - (float)x0;
                for (int c = 0; c < 3; ++c) {
                    float top = grid[y0][x0][c] * (1 - tx) + grid[y0][x0 + 1][c] * tx;
                    float bot = grid[y0 + 1][x0][c] * (1 - tx) + grid[y0 + 1][x0 + 1][c] * tx;
                    im.data[c * plane + y * w + x] = top * (1 - ty) + bot * ty;
                }
            }
        }
    } else {
        float period = gs_range(r, 4.0f, 14.0f) * (float)w / 64.0f;
        float cell = gs_range(r, 4.0f, 12.0f) * (float)w / 64.0f;
        float contrast = gs_range(r, 0.3f, 0.8f);
        for (int y = 0; y < h; ++y)
            for (int x = 0; x < w; ++x) {
                float u = ((float)x + 0.5f) / (float)w - 0.5f;
                float v = ((float)y + 0.5f) / (float)h - 0.5f;
                float t;
                if (kind == 0) {            /* linear gradient */
                    t = 0.5f + (u * dx + v * dy);
                } else if (kind == 1) {     /* sinusoidal stripes */
                    float s = ((float)x * dx + (float)y * dy) / period;
                    t = 0.5f + 0.5f * contrast * sinf(6.2831853f * s);
                } else {                    /* soft checks */
                    int cx = (int)floorf((float)x / cell), cy = (int)floorf((float)y / cell);
                    t = ((cx + cy) & 1) ? 0.5f + 0.5f * contrast : 0.5f - 0.5f * contrast;
                }
                t = gs_clamp01(t);
                for (int c = 0; c < 3; ++c)
                    im.data[c * plane + y * w + x] = a[c] + (b[c] - a[c]) * t;
            }
    }
    /* Per-pixel noise, per channel. */
    float amp = gs_range(r, 0.02f, 0.10f);
    for (int i = 0; i < 3 * plane; ++i)
        im.data[i] += amp * (gs_unif(r) + gs_unif(r) - 1.0f);
}

/* ---- shapes ----------------------------------------------------------- */

typedef struct {
    int cls;
    float x0, y0, bw, bh;   /* box in pixels, continuous coordinates */
} gs_obj;

/* Whether the point (u, v), in box-normalised coordinates, is inside. */
static int gs_inside(int cls, float u, float v)
{
    switch (cls) {
    case 0: return (u - 0.5f) * (u - 0.5f) + (v - 0.5f) * (v - 0.5f) <= 0.25f;
    case 1: return 1;
    case 2: return fabsf(u - 0.5f) <= 0.5f * v;
    default: return fabsf(u - 0.5f) <= 0.17f || fabsf(v - 0.5f) <= 0.17f;
    }
}

static void gs_draw(image im, const gs_obj *o, const float rgb[3])
{
    const int w = im.w, plane = im.w * im.h;
    int px0 = (int)floorf(o->x0), py0 = (int)floorf(o->y0);
    int px1 = (int)ceilf(o->x0 + o->bw), py1 = (int)ceilf(o->y0 + o->bh);
    if (px0 < 0) px0 = 0;
    if (py0 < 0) py0 = 0;
    if (px1 > im.w) px1 = im.w;
    if (py1 > im.h) py1 = im.h;
    for (int y = py0; y < py1; ++y)
        for (int x = px0; x < px1; ++x) {
            /* 4x4 supersampling gives anti-aliased edges. */
            int hits = 0;
            for (int sy = 0; sy < 4; ++sy)
                for (int sx = 0; sx < 4; ++sx) {
                    float u = ((float)x + 0.125f + 0.25f * (float)sx - o->x0) / o->bw;
                    float v = ((float)y + 0.125f + 0.25f * (float)sy - o->y0) / o->bh;
                    if (u >= 0 && u <= 1 && v >= 0 && v <= 1 && gs_inside(o->cls, u, v))
                        ++hits;
                }
            if (!hits)
                continue;
            float a = (float)hits / 16.0f;
            for (int c = 0; c < 3; ++c) {
                float *p = &im.data[c * plane + y * w + x];
                *p = *p * (1 - a) + rgb[c] * a;
            }
        }
}

static float gs_iou(const gs_obj *a, const gs_obj *b)
{
    float ix = fminf(a->x0 + a->bw, b->x0 + b->bw) - fmaxf(a->x0, b->x0);
    float iy = fminf(a->y0 + a->bh, b->y0 + b->bh) - fmaxf(a->y0, b->y0);
    if (ix <= 0 || iy <= 0)
        return 0;
    float inter = ix * iy;
    return inter / (a->bw * a->bh + b->bw * b->bh - inter);
}

/* Mean colour of the image over a box (before the shape is drawn). */
static void gs_mean(image im, const gs_obj *o, float out[3])
{
    const int plane = im.w * im.h;
    int x0 = (int)o->x0, y0 = (int)o->y0;
    int x1 = (int)(o->x0 + o->bw), y1 = (int)(o->y0 + o->bh);
    int n = 0;
    out[0] = out[1] = out[2] = 0;
    for (int y = y0; y < y1 && y < im.h; ++y)
        for (int x = x0; x < x1 && x < im.w; ++x, ++n)
            for (int c = 0; c < 3; ++c)
                out[c] += im.data[c * plane + y * im.w + x];
    for (int c = 0; c < 3; ++c)
        out[c] = n ? out[c] / (float)n : 0.5f;
}

/* Draws one image; returns the number of objects written to objs. */
static int gs_make(gs_rng *r, image im, gs_obj objs[GS_MAX_OBJ], gs_style style)
{
    const float S = (float)im.w;
    const int plain = style == GS_PLAIN;
    gs_background(r, im, style);
    int want = 1 + gs_int(r, plain ? 2 : GS_MAX_OBJ);
    int n = 0;
    for (int k = 0; k < want; ++k) {
        gs_obj o;
        int placed = 0;
        for (int tries = 0; tries < 30 && !placed; ++tries) {
            o.cls = gs_int(r, GS_NCLASS);
            float side = gs_range(r, plain ? 0.25f : 0.17f, 0.45f) * S;
            float ar = gs_range(r, 0.8f, 1.25f);
            if (o.cls == 0 || o.cls == 3)   /* circles and crosses stay round-ish */
                ar = gs_range(r, 0.9f, 1.1f);
            o.bw = side * sqrtf(ar);
            o.bh = side / sqrtf(ar);
            if (o.bw > S * 0.48f) o.bw = S * 0.48f;
            if (o.bh > S * 0.48f) o.bh = S * 0.48f;
            /* Keep whole pixels from the border so the box is exact. */
            o.x0 = gs_range(r, 0.5f, S - o.bw - 0.5f);
            o.y0 = gs_range(r, 0.5f, S - o.bh - 0.5f);
            placed = 1;
            for (int j = 0; j < n; ++j)
                if (gs_iou(&o, &objs[j]) > (plain ? 0.0f : 0.05f)) {
                    placed = 0;
                    break;
                }
        }
        if (!placed)
            continue;
        /* A colour that stands out from what is under the box. */
        float under[3], rgb[3];
        float best = -1, best_rgb[3] = { 1, 1, 1 };
        gs_mean(im, &o, under);
        for (int tries = 0; tries < (plain ? 16 : 8); ++tries) {
            gs_color(r, rgb);
            float d = fabsf(rgb[0] - under[0]) + fabsf(rgb[1] - under[1])
                    + fabsf(rgb[2] - under[2]);
            if (d > best) {
                best = d;
                memcpy(best_rgb, rgb, sizeof rgb);
            }
            if (d > (plain ? 1.2f : 0.9f))
                break;
        }
        gs_draw(im, &o, best_rgb);
        objs[n++] = o;
    }
    for (int i = 0; i < 3 * im.w * im.h; ++i)
        im.data[i] = gs_clamp01(im.data[i]);
    return n;
}

/* ---- files ------------------------------------------------------------ */

/* -seed: an unsigned 64-bit integer (decimal, or 0x... as strtoull reads it). */
static int gs_parse_seed(const char *flag, const char *v, void *dst)
{
    char *end;
    errno = 0;
    unsigned long long s = strtoull(v, &end, 0);
    if (errno || end == v || *end != '\0' || v[0] == '-') {
        fprintf(stderr, "error: %s %s: expected an unsigned integer\n", flag, v);
        return -1;
    }
    *(uint64_t *)dst = (uint64_t)s;
    return 0;
}

/* Writes one split; returns the number of objects, or -1 on error. */
static long gs_split(const char *out, const char *split, int split_id, int count,
                     int size, uint64_t seed, gs_style style)
{
    char img_dir[PATH_MAX], lab_dir[PATH_MAX], list_path[PATH_MAX];
    char base[PATH_MAX + 32], path[PATH_MAX + 48];
    if (snprintf(img_dir, sizeof img_dir, "%s/images/%s", out, split) >= (int)sizeof img_dir
        || snprintf(lab_dir, sizeof lab_dir, "%s/labels/%s", out, split) >= (int)sizeof lab_dir
        || snprintf(list_path, sizeof list_path, "%s/%s.txt", out, split) >= (int)sizeof list_path) {
        fprintf(stderr, "gen-shapes: output path too long: %s\n", out);
        return -1;
    }
    if (sdnn_mkdirs(img_dir) != SDNN_OK || sdnn_mkdirs(lab_dir) != SDNN_OK) {
        fprintf(stderr, "gen-shapes: %s\n", sdnn_last_error());
        return -1;
    }
    FILE *list = fopen(list_path, "w");
    if (!list) {
        fprintf(stderr, "gen-shapes: cannot write %s: %s\n", list_path, strerror(errno));
        return -1;
    }
    long objects = 0;
    image im = make_image(size, size, 3);
    for (int i = 0; i < count; ++i) {
        gs_rng r = gs_stream(seed, split_id, i);
        gs_obj objs[GS_MAX_OBJ];
        int n = gs_make(&r, im, objs, style);
        objects += n;

        snprintf(base, sizeof base, "%s/%06d", img_dir, i + 1);
        save_image_options(im, base, PNG, 0);
        snprintf(path, sizeof path, "%s.png", base);
        struct stat st;
        if (stat(path, &st) != 0 || st.st_size == 0) {
            fprintf(stderr, "gen-shapes: failed to write image %s\n", path);
            objects = -1;
            break;
        }
        fprintf(list, "%s\n", path);

        snprintf(path, sizeof path, "%s/%06d.txt", lab_dir, i + 1);
        FILE *lf = fopen(path, "w");
        if (!lf) {
            fprintf(stderr, "gen-shapes: cannot write %s: %s\n", path, strerror(errno));
            objects = -1;
            break;
        }
        for (int k = 0; k < n; ++k) {
            const gs_obj *o = &objs[k];
            fprintf(lf, "%d %.6f %.6f %.6f %.6f\n", o->cls,
                    (o->x0 + 0.5f * o->bw) / (float)size, (o->y0 + 0.5f * o->bh) / (float)size,
                    o->bw / (float)size, o->bh / (float)size);
        }
        if (fclose(lf) != 0) {
            fprintf(stderr, "gen-shapes: error writing %s\n", path);
            objects = -1;
            break;
        }
    }
    free_image(im);
    if (fclose(list) != 0 && objects >= 0) {
        fprintf(stderr, "gen-shapes: error writing %s\n", list_path);
        objects = -1;
    }
    return objects;
}

int sdnn_cmd_gen_shapes(int argc, char **argv)
{
    long n_train = 512, n_valid = 64, size = 64;
    uint64_t seed = 1;
    const char *style_name = "textured";
    const sdnn_flag flags[] = {
        {.name = "-n", .kind = SDNN_FLAG_LONG, .dst = &n_train, .lo = 1, .hi = GS_MAX_COUNT,
         .meta = "N", .help = "training images (512)"},
        {.name = "-valid", .kind = SDNN_FLAG_LONG, .dst = &n_valid, .lo = 0, .hi = GS_MAX_COUNT,
         .meta = "N", .help = "validation images (64)"},
        {.name = "-seed", .kind = SDNN_FLAG_CUSTOM, .dst = &seed, .parse = gs_parse_seed,
         .meta = "S", .help = "PRNG seed, unsigned integer (1)"},
        {.name = "-size", .kind = SDNN_FLAG_LONG, .dst = &size, .lo = GS_MIN_SIZE,
         .hi = GS_MAX_SIZE, .meta = "PX", .help = "image width and height (64)"},
        {.name = "-style", .kind = SDNN_FLAG_STR, .dst = &style_name, .meta = "textured|plain",
         .help = "textured backgrounds, 1-4 objects (textured); flat backgrounds, 1-2 larger "
                 "high-contrast objects (plain)"},
    };
    const sdnn_command cmd = {
        .name = "scalednn gen-shapes", .args = "OUTDIR", .min_pos = 1, .max_pos = 1,
        .flags = flags, .nflags = (int)(sizeof flags / sizeof flags[0]),
    };
    const char *pos[1] = {0};
    int np;
    int parsed = sdnn_args_parse(&cmd, argc, argv, 1, pos, &np);
    if (parsed != SDNN_ARGS_OK) return parsed == SDNN_ARGS_HELP ? 0 : 2;
    const char *outdir = pos[0];
    if (!outdir[0]) return sdnn_args_bad(&cmd, "OUTDIR", "", "a directory");
    gs_style style;
    if (strcmp(style_name, "textured") == 0)
        style = GS_TEXTURED;
    else if (strcmp(style_name, "plain") == 0)
        style = GS_PLAIN;
    else
        return sdnn_args_bad(&cmd, "-style", style_name, "textured or plain");

    /* OUTDIR as given, less trailing slashes ("/" stays "/"). */
    char out[PATH_MAX];
    size_t len = strlen(outdir);
    if (len + 32 >= sizeof out) {
        fprintf(stderr, "gen-shapes: OUTDIR too long: %s\n", outdir);
        return 2;
    }
    memcpy(out, outdir, len + 1);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    if (len == 1 && out[0] == '/')
        out[0] = '\0';   /* paths become "/images/..." */

    /* Darknet turns an image path into its label path by replacing the first
     * "images" (and "JPEGImages", "raw") with "labels": OUTDIR must not
     * contain those words or the labels would not be found. */
    static const char *const bad[] = { "images", "JPEGImages", "raw" };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k)
        if (strstr(out, bad[k])) {
            fprintf(stderr, "gen-shapes: OUTDIR '%s' contains \"%s\"; Darknet would look for "
                            "the labels in the wrong place: choose another directory\n",
                    outdir, bad[k]);
            return 2;
        }

    if (out[0] && sdnn_mkdirs(out) != SDNN_OK) {
        fprintf(stderr, "gen-shapes: %s\n", sdnn_last_error());
        return 1;
    }
    char names[PATH_MAX + 16];
    snprintf(names, sizeof names, "%s/shapes.names", out);
    FILE *nf = fopen(names, "w");
    if (!nf) {
        fprintf(stderr, "gen-shapes: cannot write %s: %s\n", names, strerror(errno));
        return 1;
    }
    for (int c = 0; c < GS_NCLASS; ++c)
        fprintf(nf, "%s\n", gs_names[c]);
    if (fclose(nf) != 0) {
        fprintf(stderr, "gen-shapes: error writing %s\n", names);
        return 1;
    }

    long obj_train = gs_split(out, "train", 0, (int)n_train, (int)size, seed, style);
    if (obj_train < 0)
        return 1;
    long obj_valid = gs_split(out, "valid", 1, (int)n_valid, (int)size, seed, style);
    if (obj_valid < 0)
        return 1;

    printf("gen-shapes: %ld train + %ld valid images (%ldx%ld, %d classes, %ld objects, "
           "seed %" PRIu64 ", %s) in %s\n",
           n_train, n_valid, size, size, GS_NCLASS, obj_train + obj_valid, seed, style_name,
           outdir);
    return 0;
}
