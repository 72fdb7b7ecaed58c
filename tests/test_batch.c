/*
 * test_batch: the project's own detection batch builder (plugin/data/batch.c,
 * the fork's `[yolo] resize`) against references written here, the loader's
 * choice between it and libdarknet's load_data, and training through the
 * binary: a cfg with resize repeats bit for bit under one -seed, and the
 * cfgs without resize still get libdarknet's batches unchanged.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "batch.h"
#include "cfgcheck.h"
#include "dialect.h"
#include "loader.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_bin;
static char g_dir[64];
static char **g_paths;
static int g_m;

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-batch-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 24 -valid 6 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    if (tu_run("printf 'classes=4\\ntrain=%s/shapes/train.txt\\nvalid=%s/shapes/valid.txt\\n"
               "names=%s/shapes/shapes.names\\nbackup=%s/backup/\\n' > %s/s.data && "
               "mkdir -p %s/backup",
               g_dir, g_dir, g_dir, g_dir, g_dir, g_dir) != 0)
        return -1;
    char lst[128];
    snprintf(lst, sizeof lst, "%s/shapes/train.txt", g_dir);
    list *pl = get_paths(lst);
    g_paths = (char **)list_to_array(pl);
    g_m = pl->size;
    free_list(pl);
    return g_m == 24 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_paths) free_ptrs((void **)g_paths, g_m);
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

static sdnn_batch_opts opts(int n, int w, int h)
{
    return (sdnn_batch_opts){.paths = g_paths, .m = g_m, .n = n, .w = w, .h = h,
                             .num_boxes = 90, .jitter = 0.3f, .resize = 1.5f, .hue = 0.1f,
                             .saturation = 1.5f, .exposure = 1.5f, .flip = 1, .seed = 11,
                             .threads = 1};
}

static int data_equal(data a, data b)
{
    if (a.X.rows != b.X.rows || a.X.cols != b.X.cols || a.y.cols != b.y.cols) return 0;
    for (int i = 0; i < a.X.rows; ++i)
        if (memcmp(a.X.vals[i], b.X.vals[i], (size_t)a.X.cols * sizeof(float)) ||
            memcmp(a.y.vals[i], b.y.vals[i], (size_t)a.y.cols * sizeof(float)))
            return 0;
    return 1;
}

#define NET "[net]\nbatch=2\nwidth=16\nheight=16\nchannels=3\n"              /* lines 1-5 */
#define CONV "[convolutional]\nfilters=27\nsize=1\nactivation=linear\n"     /* +4 lines */
#define YOLO "[yolo]\nmask=0,1,2\nanchors=4,4,8,8,12,12\nclasses=4\nnum=3\n" /* +5 lines */

/* ---- the builder against references ------------------------------------------ */

/* A fixed (seed, batch) gives the same X and y twice, whatever the threads;
 * another batch index or seed gives another batch; the shape is
 * load_data_detection's. */
static void test_pure_function(void **state)
{
    (void)state;
    sdnn_batch_opts o = opts(6, 48, 40);
    data a, b, c, d;
    assert_int_equal(sdnn_batch_build(&o, 7, &a), SDNN_OK);
    o.threads = 3;
    assert_int_equal(sdnn_batch_build(&o, 7, &b), SDNN_OK);
    assert_int_equal(a.X.rows, 6);
    assert_int_equal(a.X.cols, 48 * 40 * 3);
    assert_int_equal(a.y.rows, 6);
    assert_int_equal(a.y.cols, 90 * 5);
    assert_true(data_equal(a, b));
    assert_int_equal(sdnn_batch_build(&o, 8, &c), SDNN_OK);
    assert_false(data_equal(a, c));
    o.seed = 12;
    assert_int_equal(sdnn_batch_build(&o, 7, &d), SDNN_OK);
    assert_false(data_equal(a, d));
    /* Every row has a box (the shapes images hold 1-4 objects and most
     * survive the crop), pixels in [0, 1], classes in [0, 4). */
    int boxes = 0;
    for (int i = 0; i < a.X.rows; ++i) {
        for (int j = 0; j < a.X.cols; ++j)
            assert_true(a.X.vals[i][j] >= 0.0f && a.X.vals[i][j] <= 1.0f);
        for (int t = 0; t < 90 && a.y.vals[i][5 * t]; ++t) {
            const float *q = a.y.vals[i] + 5 * t;
            assert_true(q[0] > 0 && q[0] <= 1 && q[1] > 0 && q[1] <= 1);
            assert_true(q[2] >= 1.0f / 48 && q[2] <= 1 && q[3] >= 1.0f / 40 && q[3] <= 1);
            assert_true(q[4] >= 0 && q[4] < 4 && q[4] == floorf(q[4]));
            ++boxes;
        }
    }
    assert_true(boxes >= 6);
    free_data(a);
    free_data(b);
    free_data(c);
    free_data(d);
}

/* The reference resize: OpenCV's INTER_LINEAR convention (centres at
 * +0.5, edges clamped) in double precision. */
static double ref_at(image im, int k, double x, double y)
{
    x = x < 0 ? 0 : x;
    y = y < 0 ? 0 : y;
    int x0 = (int)floor(x), y0 = (int)floor(y);
    if (x0 >= im.w - 1) x0 = im.w - 1, x = x0;
    if (y0 >= im.h - 1) y0 = im.h - 1, y = y0;
    int x1 = x0 + 1 < im.w ? x0 + 1 : x0, y1 = y0 + 1 < im.h ? y0 + 1 : y0;
    double fx = x - x0, fy = y - y0;
    const float *p = im.data + (size_t)k * im.w * im.h;
    double a = p[y0 * im.w + x0], b = p[y0 * im.w + x1], c = p[y1 * im.w + x0],
           d = p[y1 * im.w + x1];
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy;
}

/* resize=1, jitter=0, no flip, no HSV: each row is the plain resize of the
 * decoded image (load_image_color), within 1e-5 (float against double
 * arithmetic on values in [0, 1]), up and down in size. */
static void test_plain_resize(void **state)
{
    (void)state;
    const int sizes[][2] = {{96, 80}, {40, 48}, {64, 64}};
    for (int s = 0; s < 3; ++s) {
        int w = sizes[s][0], h = sizes[s][1];
        sdnn_batch_opts o = opts(3, w, h);
        o.paths = g_paths + 4;
        o.m = 1; /* every row is this image */
        o.resize = 1;
        o.jitter = 0;
        o.flip = 0;
        o.hue = 0;
        o.saturation = 1;
        o.exposure = 1;
        data d;
        assert_int_equal(sdnn_batch_build(&o, 3, &d), SDNN_OK);
        image im = load_image_color(g_paths[4], 0, 0);
        assert_int_equal(im.w, 64);
        double worst = 0;
        for (int r = 0; r < 3; ++r)
            for (int k = 0; k < 3; ++k)
                for (int y = 0; y < h; ++y)
                    for (int x = 0; x < w; ++x) {
                        double sx = (x + 0.5) * im.w / w - 0.5, sy = (y + 0.5) * im.h / h - 0.5;
                        double e = fabs(d.X.vals[r][(k * h + y) * w + x] - ref_at(im, k, sx, sy));
                        if (e > worst) worst = e;
                    }
        if (worst > 1e-5) fail_msg("%dx%d: largest difference %g", w, h, worst);
        if (w == 64 && h == 64) /* the same size: the decoded image itself */
            assert_memory_equal(d.X.vals[0], im.data, sizeof(float) * 64 * 64 * 3);
        free_image(im);
        free_data(d);
    }
}

/* A forced draw on a 100x80 image with jitter 0.2 and resize 1.5: the
 * crop by hand (the fork's arithmetic, truncation toward zero), the
 * box's truth from the crop's geometry, and the pixels agreeing with it. */
static void test_forced_geometry(void **state)
{
    (void)state;
    sdnn_batch_draw dr = {.resize_r1 = 0.5f, .resize_r2 = 0.0f, .r1 = 0.75f, .r2 = 0.25f,
                          .r3 = 0.5f, .r4 = 0.875f, .flip = 0, .dhue = 0, .dsat = 1, .dexp = 1};
    /* dw = 20, dh = 16: jitter terms 10, -10, 0, 12.  resize 1.5: widths
     * from (int)(100 * -0.5 / 2) = -25 to (int)(100 * (1/3) / 2) = 16,
     * heights from -20 to 13: terms -4.5 / -25 (left, right), -3.5 / -20
     * (top, bottom); (int)(10 - 4.5) = 5, (int)(-10 - 25) = -35,
     * (int)(0 - 3.5) = -3, (int)(12 - 20) = -8. */
    sdnn_crop c = sdnn_batch_crop(100, 80, 0.2f, 1.5f, &dr);
    assert_int_equal(c.pleft, 5);
    assert_int_equal(c.pright, -35);
    assert_int_equal(c.ptop, -3);
    assert_int_equal(c.pbot, -8);
    assert_int_equal(c.swidth, 130);
    assert_int_equal(c.sheight, 91);
    /* resize 0.5 (shrink only): widths from (int)(100 * -1 / 2) = -50 to 0. */
    sdnn_crop c2 = sdnn_batch_crop(100, 80, 0.0f, 0.5f, &dr);
    assert_int_equal(c2.pleft, -25);
    assert_int_equal(c2.pright, -50);
    assert_int_equal(c2.ptop, -20);
    assert_int_equal(c2.pbot, -40);

    /* A box of pixels x 40..60, y 30..50 (class 2). */
    sdnn_label_box b = {2, 0.5f, 0.5f, 0.2f, 0.25f};
    float truth[5 * 4];
    assert_int_equal(sdnn_batch_truth(&b, 1, 100, 80, c, 0, 65, 65, 4, truth), 1);
    const double want[5] = {45.0 / 130, 43.0 / 91, 20.0 / 130, 20.0 / 91, 2};
    for (int k = 0; k < 5; ++k)
        if (fabs(truth[k] - want[k]) > 1e-6) fail_msg("truth[%d] %g, want %g", k, truth[k], want[k]);
    for (int k = 5; k < 20; ++k) assert_true(truth[k] == 0.0f);
    assert_int_equal(sdnn_batch_truth(&b, 1, 100, 80, c, 1, 65, 65, 4, truth), 1);
    if (fabs(truth[0] - (1 - 45.0 / 130)) > 1e-6 || fabs(truth[2] - 20.0 / 130) > 1e-6)
        fail_msg("flipped truth %g %g", truth[0], truth[2]);

    /* The same box painted white on black: in the output it covers the
     * truth (interior 1, outside 0 away from the edges), and the area the
     * crop adds beyond the image has the image's mean colour. */
    image src = make_image(100, 80, 3);
    for (int k = 0; k < 3; ++k)
        for (int y = 30; y < 50; ++y)
            for (int x = 40; x < 60; ++x) src.data[(k * 80 + y) * 100 + x] = 1;
    const float mean = 400.0f / 8000.0f;
    for (int flip = 0; flip < 2; ++flip) {
        float *out = malloc(sizeof(float) * 65 * 65 * 3);
        sdnn_batch_pixels(src, c, flip, 0, 1, 1, 65, 65, out);
        assert_int_equal(sdnn_batch_truth(&b, 1, 100, 80, c, flip, 65, 65, 4, truth), 1);
        float l = (truth[0] - truth[2] / 2) * 65, r = (truth[0] + truth[2] / 2) * 65;
        float t = (truth[1] - truth[3] / 2) * 65, bo = (truth[1] + truth[3] / 2) * 65;
        for (int y = 0; y < 65; ++y)
            for (int x = 0; x < 65; ++x) {
                float v = out[y * 65 + x], px = x + 0.5f, py = y + 0.5f;
                if (px > l + 1 && px < r - 1 && py > t + 1 && py < bo - 1)
                    assert_float_equal(v, 1.0f, 1e-6);
                else if (px < l - 1 || px > r + 1 || py < t - 1 || py > bo + 1) {
                    /* Rows above the image (canvas y < 3) and columns past
                     * its right edge (canvas x >= 95) are the mean. */
                    int cx = (int)floorf(px * 130 / 65 - 0.5f), cy = (int)floorf(py * 91 / 65 - 0.5f);
                    if (flip) cx = (int)floorf((65 - px) * 130 / 65 - 0.5f);
                    if (cy + 1 < 3 || cx >= 95) assert_float_equal(v, mean, 1e-6);
                    else if (cy > 0 && cy + 1 < 83 && cx > 0 && cx + 1 < 95)
                        assert_float_equal(v, 0.0f, 1e-6);
                }
            }
        free(out);
    }
    free_image(src);
}

/* Boxes that leave the crop are dropped; those cut by it clipped as the
 * fork clips them; num_boxes counts before the drop, as in the fork. */
static void test_boxes_clipped_dropped(void **state)
{
    (void)state;
    /* The crop starts 20 px into a 100 x 100 image, 60 px wide and high. */
    sdnn_crop c = {.pleft = 20, .pright = 20, .ptop = 20, .pbot = 20, .swidth = 60, .sheight = 60};
    sdnn_label_box in[4] = {
        {0, 0.05f, 0.5f, 0.1f, 0.1f},  /* x 0..10: left of the crop: dropped */
        {1, 0.2f, 0.5f, 0.2f, 0.2f},   /* x 10..30: clipped to 20..30 */
        {2, 0.5f, 0.5f, 0.1f, 0.1f},   /* inside */
        {3, 0.5f, 0.85f, 0.1f, 0.1f}}; /* y 80..90: below the crop: dropped */
    float truth[5 * 8];
    assert_int_equal(sdnn_batch_truth(in, 4, 100, 100, c, 0, 64, 64, 8, truth), 2);
    const double want[2][5] = {{5.0 / 60, 0.5, 10.0 / 60, 20.0 / 60, 1}, {0.5, 0.5, 10.0 / 60, 10.0 / 60, 2}};
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 5; ++k)
            if (fabs(truth[i * 5 + k] - want[i][k]) > 1e-6)
                fail_msg("box %d [%d] %g, want %g", i, k, truth[i * 5 + k], want[i][k]);
    for (int k = 10; k < 40; ++k) assert_true(truth[k] == 0.0f);
    /* num_boxes 2: the first two are kept, then the first dropped. */
    assert_int_equal(sdnn_batch_truth(in, 4, 100, 100, c, 0, 64, 64, 2, truth), 1);
    assert_true(truth[4] == 1.0f && truth[5] == 0.0f);
    /* Narrower than one input pixel after the crop: dropped. */
    sdnn_label_box thin = {0, 0.5f, 0.5f, 0.005f, 0.2f};
    assert_int_equal(sdnn_batch_truth(&thin, 1, 100, 100, c, 0, 64, 64, 2, truth), 0);
    /* x = y = 0 (the fork's "invalid annotation"): dropped. */
    sdnn_label_box zero = {0, 0, 0, 0.2f, 0.2f};
    assert_int_equal(sdnn_batch_truth(&zero, 1, 100, 100, c, 0, 64, 64, 2, truth), 0);
}

/* The fork's draws: rand_scale's range both ways, the hue range, flips
 * about half the time, off when flip is off. */
static void test_draws(void **state)
{
    (void)state;
    sdnn_batch_opts o = opts(1, 8, 8);
    uint64_t s = 99;
    int flips = 0, inverted = 0;
    for (int i = 0; i < 2000; ++i) {
        sdnn_batch_draw d;
        sdnn_batch_draws(&s, &o, &d);
        assert_true(d.resize_r1 >= 0 && d.resize_r1 < 1 && d.r4 >= 0 && d.r4 < 1);
        assert_true(d.dhue >= -0.1f && d.dhue <= 0.1f);
        assert_true(d.dsat >= 1 / 1.5f - 1e-6f && d.dsat <= 1.5f);
        flips += d.flip;
        inverted += d.dexp < 1;
    }
    assert_true(flips > 900 && flips < 1100);
    assert_true(inverted > 900 && inverted < 1100);
    o.flip = 0;
    for (int i = 0; i < 100; ++i) {
        sdnn_batch_draw d;
        sdnn_batch_draws(&s, &o, &d);
        assert_int_equal(d.flip, 0);
    }
}

/* A missing label file is an error naming it, not an exit. */
static void test_missing_label(void **state)
{
    (void)state;
    char img[160], cmd[400];
    snprintf(img, sizeof img, "%s/images/lonely.png", g_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/images && cp %s %s", g_dir, g_paths[0], img);
    assert_int_equal(tu_run("%s", cmd), 0);
    char *paths[1] = {img};
    sdnn_batch_opts o = opts(2, 16, 16);
    o.paths = paths;
    o.m = 1;
    data d;
    assert_int_equal(sdnn_batch_build(&o, 0, &d), SDNN_ERR_IO);
    assert_non_null(strstr(sdnn_last_error(), "labels/lonely.txt"));
    assert_null(d.X.vals);
}

/* ---- mosaic, letter_box, flip=0 ------------------------------------------------ */

/* A pixel's own code: quarter q's image, channel k, row y, column x (exact
 * in a float). */
static float code(int q, int k, int y, int x) { return (float)(q * 1000000 + k * 10000 + y * 100 + x); }

/* The fork's mosaic at a forced cut (40, 60) of a 100 x 100 input: each
 * quarter's pixels are the corner of its own image opposite to where the
 * quarter goes, moved inwards past that image's padding (the shifts); the
 * boxes land in their quarter, clipped at the cut with mosaic_bound=1 and
 * only at the border without; num_boxes stops the appending. */
static void test_mosaic_reference(void **state)
{
    (void)state;
    const int W = 100, H = 100, CX = 40, CY = 60;
    /* The shifts by hand from crops of a 200 x 100 image (shift =
     * -side * input / image, at most the quarter's room). */
    sdnn_crop c = {.pleft = -50, .pright = 30, .ptop = -20, .pbot = -80, .swidth = 220, .sheight = 200};
    sdnn_mosaic_shift sh = sdnn_batch_mosaic_shift(c, 0, 200, 100, W, H, CX, CY);
    assert_int_equal(sh.left, 25);  /* 50 * 100 / 200 */
    assert_int_equal(sh.right, 0);  /* pright > 0: no padding */
    assert_int_equal(sh.top, 20);   /* 20 * 100 / 100 */
    assert_int_equal(sh.bot, 40);   /* 80, at most H - CY = 40 */
    sh = sdnn_batch_mosaic_shift(c, 1, 200, 100, W, H, CX, CY); /* flipped: left <-> right */
    assert_int_equal(sh.left, 0);
    assert_int_equal(sh.right, 25);
    c.pleft = -200;
    assert_int_equal(sdnn_batch_mosaic_shift(c, 0, 200, 100, W, H, CX, CY).left, CX);

    /* The corner moves: the slack goes away from the cut. */
    sdnn_crop m = {.pleft = 5, .pright = 7, .ptop = 3, .pbot = 11, .swidth = 88, .sheight = 86};
    const int want_lr[2][4][2] = {{{0, 12}, {12, 0}, {0, 12}, {12, 0}},  /* not flipped */
                                  {{12, 0}, {0, 12}, {12, 0}, {0, 12}}}; /* flipped */
    for (int f = 0; f < 2; ++f)
        for (int q = 0; q < 4; ++q) {
            sdnn_crop t = m;
            sdnn_batch_mosaic_corner(&t, f, q);
            assert_int_equal(t.pleft, want_lr[f][q][0]);
            assert_int_equal(t.pright, want_lr[f][q][1]);
            assert_int_equal(t.ptop, q < 2 ? 0 : 14);
            assert_int_equal(t.pbot, q < 2 ? 14 : 0);
            assert_int_equal(t.swidth, 88);
            assert_int_equal(t.sheight, 86);
        }

    /* The pixels, with shifts on every quarter. */
    const sdnn_mosaic_shift shifts[4] = {{0, 10, 0, 5}, {7, 0, 0, 3}, {0, 4, 9, 0}, {10, 0, 6, 0}};
    size_t px = (size_t)W * H * 3;
    float *ai = malloc(px * sizeof *ai), *out = malloc(px * sizeof *out);
    for (size_t i = 0; i < px; ++i) out[i] = -1;
    for (int q = 0; q < 4; ++q) {
        for (int k = 0; k < 3; ++k)
            for (int y = 0; y < H; ++y)
                for (int x = 0; x < W; ++x) ai[(k * H + y) * W + x] = code(q, k, y, x);
        sdnn_batch_mosaic_pixels(ai, W, H, CX, CY, q, shifts[q], out);
    }
    for (int k = 0; k < 3; ++k)
        for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x) {
                int right = x >= CX, below = y >= CY, q = below * 2 + right;
                const sdnn_mosaic_shift *s = &shifts[q];
                /* Left quarters end at the image's right edge less its
                 * right padding; right quarters start after the left
                 * padding; the same vertically. */
                int sx = right ? s->left + (x - CX) : (W - s->right) - (CX - x);
                int sy = below ? s->top + (y - CY) : (H - s->bot) - (CY - y);
                float v = out[(k * H + y) * W + x];
                if (v != code(q, k, sy, sx))
                    fail_msg("(%d,%d,%d): %g, want quarter %d's (%d,%d)", k, y, x, v, q, sy, sx);
            }
    free(ai);
    free(out);

    /* The boxes, on a 128 x 128 input cut at (48, 64) so every fraction
     * is exact in a float; each given by its pixels in its quarter's
     * augmented image (left, right, top, bottom, class). */
    const int BW = 128, BCX = 48, BCY = 64;
    const sdnn_mosaic_shift bs[4] = {{0, 16, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {16, 0, 0, 0}};
    const int qpix[4][2][5] = {{{80, 120, 70, 90, 0}, {116, 124, 70, 90, 1}},
                               {{16, 48, 80, 120, 2}, {0}},
                               {{96, 120, 40, 80, 3}, {0}},
                               {{8, 40, 16, 32, 1}, {0}}};
    /* Each quarter's pixels move by (-64, -64), (+48, -64), (-80, +64),
     * (+32, +64) (the window's offsets with those shifts), so in the
     * input the boxes are: A x 16..56 y 6..26 (over the cut at 48), B x
     * 52..60 (wholly in quarter 1's pixels), C x 64..96 y 16..56 (inside),
     * D x 16..40 y 104..144 (past the bottom border), E x 40..72 y 80..96
     * (over the cut). */
#define PX(l, r, t, b, cls) {((l) + (r)) / 2.0 / 128, ((t) + (b)) / 2.0 / 128, ((r) - (l)) / 128.0, ((b) - (t)) / 128.0, cls}
    const double bound[4][5] = {PX(16, 48, 6, 26, 0), PX(64, 96, 16, 56, 2),
                                PX(16, 40, 104, 128, 3), PX(48, 72, 80, 96, 1)};
    const double free_[5][5] = {PX(16, 56, 6, 26, 0), PX(52, 60, 6, 26, 1), PX(64, 96, 16, 56, 2),
                                PX(16, 40, 104, 128, 3), PX(40, 72, 80, 96, 1)};
#undef PX
    for (int b = 0; b < 2; ++b)
        for (int nb = 8; nb >= 3; nb -= 5) {
            float truth[5 * 8], qt[5 * 8];
            memset(truth, 0, sizeof truth);
            int count = 0;
            for (int q = 0; q < 4; ++q) {
                memset(qt, 0, sizeof qt);
                for (int i = 0; i < 2 && qpix[q][i][1]; ++i) {
                    const int *p = qpix[q][i];
                    float *t = qt + 5 * i;
                    t[0] = (float)(p[0] + p[1]) / 2 / (float)BW;
                    t[1] = (float)(p[2] + p[3]) / 2 / (float)BW;
                    t[2] = (float)(p[1] - p[0]) / (float)BW;
                    t[3] = (float)(p[3] - p[2]) / (float)BW;
                    t[4] = (float)p[4];
                }
                count = sdnn_batch_mosaic_truth(truth, count, qt, BW, BW, BCX, BCY, q, bs[q], b, nb);
            }
            const double(*want)[5] = b ? bound : free_;
            /* num_boxes 3: the quarters add nothing after the third box. */
            int n = nb == 3 ? 3 : b ? 4 : 5;
            assert_int_equal(count, n);
            for (int i = 0; i < n; ++i)
                for (int k = 0; k < 5; ++k)
                    if (fabs(truth[i * 5 + k] - want[i][k]) > 1e-6)
                        fail_msg("bound=%d num_boxes=%d box %d [%d]: %g, want %g", b, nb, i, k,
                                 truth[i * 5 + k], want[i][k]);
            for (int k = n * 5; k < 40; ++k) assert_true(truth[k] == 0.0f);
        }
}

/* Every side and size of crop c is want's. */
static void expect_crop(sdnn_crop c, sdnn_crop want)
{
    assert_int_equal(c.pleft, want.pleft);
    assert_int_equal(c.pright, want.pright);
    assert_int_equal(c.ptop, want.ptop);
    assert_int_equal(c.pbot, want.pbot);
    assert_int_equal(c.swidth, want.swidth);
    assert_int_equal(c.sheight, want.sheight);
}

/* letter_box: a wide image in a square input gets equal bands of the mean
 * colour above and below (the aspect kept), a tall one bands left and
 * right, a square one in a 2:1 input bands left and right; the boxes map
 * into the band-free part; the jitter terms stay, each side then moved by
 * the same band (truncated as the fork's ints). */
static void test_letter_box(void **state)
{
    (void)state;
    sdnn_crop c = {0, 0, 0, 0, 100, 50};
    sdnn_batch_letter_box(&c, 100, 50, 64, 64);
    expect_crop(c, (sdnn_crop){0, 0, -25, -25, 100, 100});
    /* A box at the centre, 20 x 20 px of the 100 x 50 image: in the input
     * it is 0.2 wide and 0.2 high (the aspect kept), centred. */
    sdnn_label_box b = {1, 0.5f, 0.5f, 0.2f, 0.4f};
    float truth[5 * 2];
    assert_int_equal(sdnn_batch_truth(&b, 1, 100, 50, c, 0, 64, 64, 2, truth), 1);
    const double want[5] = {0.5, 0.5, 0.2, 0.2, 1};
    for (int k = 0; k < 5; ++k)
        if (fabs(truth[k] - want[k]) > 1e-6) fail_msg("truth[%d] %g, want %g", k, truth[k], want[k]);
    /* The pixels: left half white, right half black (mean 0.5). */
    image src = make_image(100, 50, 3);
    for (int k = 0; k < 3; ++k)
        for (int y = 0; y < 50; ++y)
            for (int x = 0; x < 50; ++x) src.data[(k * 50 + y) * 100 + x] = 1;
    float *out = malloc(sizeof(float) * 64 * 64 * 3);
    sdnn_batch_pixels(src, c, 0, 0, 1, 1, 64, 64, out);
    for (int y = 0; y < 64; ++y) {
        /* Rows 0..15 and 48..63 are the bands (25/100 of 64 = 16). */
        int band = y < 15 || y > 48, image_row = y > 16 && y < 47;
        for (int x = 0; x < 64; ++x) {
            float v = out[y * 64 + x];
            if (band) assert_float_equal(v, 0.5f, 1e-6);
            else if (image_row && (x < 30 || x > 33)) assert_float_equal(v, x < 32 ? 1.0f : 0.0f, 1e-6);
        }
    }
    free(out);
    free_image(src);
    /* Tall image, square input: bands left and right. */
    sdnn_crop t = {0, 0, 0, 0, 50, 100};
    sdnn_batch_letter_box(&t, 50, 100, 64, 64);
    expect_crop(t, (sdnn_crop){-25, -25, 0, 0, 100, 100});
    /* Square image, 64 x 32 input: width 200, bands of 50 left and right. */
    sdnn_crop s = {0, 0, 0, 0, 100, 100};
    sdnn_batch_letter_box(&s, 100, 100, 64, 32);
    expect_crop(s, (sdnn_crop){-50, -50, 0, 0, 200, 100});
    /* With jitter terms (left 5, right -3, top 2, bottom 4) on 100 x 50:
     * delta 25, (int)(5 - 25) ... */
    sdnn_crop j = {5, -3, 2, 4, 98, 44};
    sdnn_batch_letter_box(&j, 100, 50, 64, 64);
    expect_crop(j, (sdnn_crop){5, -3, -23, -21, 98, 94});
    /* An odd band: 100 x 51 -> delta 24.5, (int)(0 - 24.5) = -24. */
    sdnn_crop o = {0, 0, 0, 0, 100, 51};
    sdnn_batch_letter_box(&o, 100, 51, 64, 64);
    expect_crop(o, (sdnn_crop){0, 0, -24, -24, 100, 99});
}

/* Write a w x h image of one colour (channel `ch` 1, the others 0) with
 * one box of class `cls` covering it all but a margin. */
static void solid_image(const char *base, int ch, int cls)
{
    image im = make_image(32, 32, 3);
    for (int i = 0; i < 32 * 32; ++i) im.data[ch * 32 * 32 + i] = 1;
    char p[200];
    snprintf(p, sizeof p, "%s/images/%s", g_dir, base);
    assert_int_equal(tu_run("mkdir -p %s/images %s/labels", g_dir, g_dir), 0);
    save_image_options(im, p, PNG, 0); /* adds .png */
    free_image(im);
    snprintf(p, sizeof p, "%s/labels/%s.txt", g_dir, base);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%d 0.5 0.5 0.5 0.5\n", cls);
    fclose(f);
}

/* Which of red, blue a row shows (bit 0: some red pixel, bit 1: blue). */
static int colours(const float *x, int w, int h)
{
    int seen = 0;
    for (int i = 0; i < w * h; ++i) {
        if (x[i] > 0.5f && x[2 * w * h + i] < 0.5f) seen |= 1;
        if (x[2 * w * h + i] > 0.5f && x[i] < 0.5f) seen |= 2;
    }
    return seen;
}

/* mosaic=1 through sdnn_batch_build on a list of a red and a blue image:
 * about half the rows are mosaics (both colours, and more than one box),
 * the others one image; mosaic=0 never mixes; the same (seed, batch)
 * gives the same batch whatever the threads, another batch another. */
static void test_mosaic_batches(void **state)
{
    (void)state;
    solid_image("red", 0, 0);
    solid_image("blue", 2, 1);
    char red[200], blue[200];
    snprintf(red, sizeof red, "%s/images/red.png", g_dir);
    snprintf(blue, sizeof blue, "%s/images/blue.png", g_dir);
    char *paths[2] = {red, blue};
    sdnn_batch_opts o = opts(32, 48, 48);
    o.paths = paths;
    o.m = 2;
    o.hue = 0;
    o.saturation = o.exposure = 1;
    o.jitter = 0.1f;
    o.resize = 1;
    o.mosaic = 1;
    o.mosaic_bound = 1;
    data a, b, c;
    assert_int_equal(sdnn_batch_build(&o, 5, &a), SDNN_OK);
    o.threads = 4;
    assert_int_equal(sdnn_batch_build(&o, 5, &b), SDNN_OK);
    assert_true(data_equal(a, b));
    assert_int_equal(sdnn_batch_build(&o, 6, &c), SDNN_OK);
    assert_false(data_equal(a, c));
    int mixed = 0, multi = 0;
    for (int r = 0; r < 32; ++r) {
        int seen = colours(a.X.vals[r], 48, 48), boxes = 0;
        mixed += seen == 3;
        for (int t = 0; t < 90 && a.y.vals[r][5 * t]; ++t) ++boxes;
        multi += boxes > 1;
        /* Every box's class is the colour under its centre. */
        for (int t = 0; t < boxes; ++t) {
            const float *q = a.y.vals[r] + 5 * t;
            int x = (int)(q[0] * 48), y = (int)(q[1] * 48);
            float red_v = a.X.vals[r][y * 48 + x], blue_v = a.X.vals[r][2 * 48 * 48 + y * 48 + x];
            if (q[4] == 0) assert_true(red_v > 0.5f);
            else assert_true(blue_v > 0.5f);
        }
    }
    /* Half the rows are mosaics, of which 7/8 hold both colours. */
    if (mixed < 6 || mixed > 26) fail_msg("%d of 32 rows mix the images", mixed);
    assert_true(multi > 0); /* some mosaics keep boxes of two images */
    free_data(a);
    free_data(b);
    free_data(c);
    o.mosaic = 0;
    assert_int_equal(sdnn_batch_build(&o, 5, &a), SDNN_OK);
    for (int r = 0; r < 32; ++r) assert_int_not_equal(colours(a.X.vals[r], 48, 48), 3);
    free_data(a);
    /* mosaic with letter_box: refused, as by the fork. */
    o.mosaic = 1;
    o.letter_box = 1;
    assert_int_equal(sdnn_batch_build(&o, 5, &a), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "letter_box"));
}

/* flip=0: over 64 rows of one image (no jitter, resize 1, no HSV) every
 * row is the unflipped resize; with flip=1 some rows are mirrored (the
 * check can fail). */
static void test_flip_off(void **state)
{
    (void)state;
    for (int flip = 0; flip < 2; ++flip) {
        sdnn_batch_opts o = opts(64, 64, 64);
        o.paths = g_paths + 4;
        o.m = 1;
        o.resize = 1;
        o.jitter = 0;
        o.hue = 0;
        o.saturation = o.exposure = 1;
        o.flip = flip;
        data d;
        assert_int_equal(sdnn_batch_build(&o, 2, &d), SDNN_OK);
        image im = load_image_color(g_paths[4], 0, 0);
        int same = 0;
        for (int r = 0; r < 64; ++r)
            same += memcmp(d.X.vals[r], im.data, sizeof(float) * 64 * 64 * 3) == 0;
        if (flip == 0) assert_int_equal(same, 64);
        else if (same < 16 || same > 48) fail_msg("flip=1: %d of 64 rows unflipped", same);
        free_image(im);
        free_data(d);
    }
}

/* The [net] keys: 0/1 accepted, anything else named by file:line:key
 * with what is allowed; mosaic with letter_box named; the keys still
 * refused (ema_alpha, cutmix=1, mixup=1) stay refused; the reader gives
 * the fork's defaults and values. */
static void test_net_key_values(void **state)
{
    (void)state;
    static const char *const keys[] = {"mosaic", "mosaic_bound", "letter_box", "flip"};
    static const char *const bad[] = {"2", "-1", "yes", "0.5"};
    for (int k = 0; k < 4; ++k) {
        for (int v = 0; v < 4; ++v) {
            char text[512], kv[40];
            snprintf(text, sizeof text, "[net]\nbatch=2\nwidth=16\nheight=16\nchannels=3\n%s=%s\n"
                     CONV YOLO, keys[k], bad[v]);
            snprintf(kv, sizeof kv, "[net] %s=%s", keys[k], bad[v]);
            if (sdnn_cfg_check_text("n.cfg", text) == SDNN_OK) fail_msg("%s accepted", kv);
            const char *msg = sdnn_last_error();
            if (!strstr(msg, "n.cfg:6:") || !strstr(msg, kv) || !strstr(msg, "expected 0 or 1"))
                fail_msg("%s: %s", kv, msg);
        }
        for (int v = 0; v < 2; ++v) {
            char text[512];
            snprintf(text, sizeof text, "[net]\nbatch=2\nwidth=16\nheight=16\nchannels=3\n%s=%d\n"
                     CONV YOLO, keys[k], v);
            if (sdnn_cfg_check_text("n.cfg", text) != SDNN_OK)
                fail_msg("%s=%d refused: %s", keys[k], v, sdnn_last_error());
        }
    }
    if (sdnn_cfg_check_text("n.cfg", NET "mosaic=1\nletter_box=1\n" CONV YOLO) == SDNN_OK)
        fail_msg("mosaic=1 with letter_box=1 accepted");
    assert_non_null(strstr(sdnn_last_error(), "n.cfg:7: [net] letter_box=1: cannot be combined "
                           "with mosaic=1 (line 6"));
    assert_int_equal(sdnn_cfg_check_text("n.cfg", NET "mosaic=1\nletter_box=0\n" CONV YOLO), SDNN_OK);
    static const char *const refused[] = {"ema_alpha=0.9998", "cutmix=1", "mixup=1", "blur=1"};
    for (int i = 0; i < 4; ++i) {
        char text[512];
        snprintf(text, sizeof text, NET "%s\n" CONV YOLO, refused[i]);
        if (sdnn_cfg_check_text("n.cfg", text) == SDNN_OK) fail_msg("%s accepted", refused[i]);
        assert_non_null(strstr(sdnn_last_error(), "n.cfg:6:"));
        assert_non_null(strstr(sdnn_last_error(), "not built here"));
    }
    /* The reader: defaults, then the values (spaces as Darknet allows). */
    char path[128];
    snprintf(path, sizeof path, "%s/k.cfg", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(NET CONV YOLO, f);
    fclose(f);
    sdnn_batch_net_keys nk;
    assert_int_equal(sdnn_batch_read_net_keys(path, &nk), SDNN_OK);
    assert_true(nk.mosaic == 0 && nk.mosaic_bound == 0 && nk.letter_box == 0 && nk.flip == 1);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("[net]\nbatch=2\nmosaic = 1\n#flip=1\nflip=0\nmosaic_bound=1\n" CONV "flip=1\n" YOLO, f);
    fclose(f);
    assert_int_equal(sdnn_batch_read_net_keys(path, &nk), SDNN_OK);
    assert_true(nk.mosaic == 1 && nk.mosaic_bound == 1 && nk.letter_box == 0 && nk.flip == 0);
}

/* ---- the loader ---------------------------------------------------------------- */

/* Without resize the loader hands over libdarknet's load_data batches
 * unchanged: with one loader thread (so rand() is drawn in one order) the
 * loader's batch equals load_data's own from the same srand. */
static void test_loader_darknet_unchanged(void **state)
{
    (void)state;
    load_args a = {0};
    a.w = a.h = 64;
    a.paths = g_paths;
    a.m = g_m;
    a.n = 8;
    a.classes = 4;
    a.jitter = 0.2f;
    a.num_boxes = 90;
    a.hue = 0.1f;
    a.saturation = a.exposure = 1.5f;
    a.type = DETECTION_DATA;
    a.threads = 1;
    sdnn_loader L;
    memset(&L, 0, sizeof L);
    srand(42);
    assert_int_equal(sdnn_loader_start(&L, a), SDNN_OK);
    data vialoader;
    assert_int_equal(sdnn_loader_next(&L, &vialoader), SDNN_OK);
    sdnn_loader_stop(&L);
    data direct = {0};
    a.d = &direct;
    srand(42);
    pthread_t th = load_data(a);
    pthread_join(th, NULL);
    assert_true(data_equal(vialoader, direct));
    free_data(vialoader);
    free_data(direct);
    /* With own set the same args give the builder's batch (a pure
     * function: twice the same, and not libdarknet's). */
    data own[2];
    for (int k = 0; k < 2; ++k) {
        memset(&L, 0, sizeof L);
        L.own = 1;
        L.resize = 1.5f;
        L.flip = 1;
        L.seed = 3;
        L.first_batch = 10;
        srand((unsigned)k); /* changes nothing */
        assert_int_equal(sdnn_loader_start(&L, a), SDNN_OK);
        assert_int_equal(sdnn_loader_next(&L, &own[k]), SDNN_OK);
        sdnn_loader_stop(&L);
    }
    assert_true(data_equal(own[0], own[1]));
    sdnn_batch_opts o = opts(8, 64, 64);
    o.jitter = 0.2f;
    o.seed = 3;
    data ref;
    assert_int_equal(sdnn_batch_build(&o, 10, &ref), SDNN_OK); /* first_batch 10 */
    assert_true(data_equal(own[0], ref));
    free_data(own[0]);
    free_data(own[1]);
    free_data(ref);
}

/* ---- the cfg key ------------------------------------------------------------------ */


static void test_resize_values(void **state)
{
    (void)state;
    static const char *const bad[] = {"0", "-1", "-0.5", "abc", "1.5x", "nan", "1e9", "1e30", "1e-30", "0.001", "101"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char text[512], kv[32];
        snprintf(text, sizeof text, NET CONV YOLO "resize=%s\n", bad[i]);
        snprintf(kv, sizeof kv, "resize=%s", bad[i]);
        if (sdnn_cfg_check_text("d.cfg", text) == SDNN_OK) fail_msg("resize=%s accepted", bad[i]);
        const char *msg = sdnn_last_error();
        const char *want[] = {"d.cfg:15:", "[yolo]", kv, "expected a number >= 0.01 and <= 100"};
        for (int k = 0; k < 4; ++k)
            if (!strstr(msg, want[k])) fail_msg("resize=%s: message lacks \"%s\": %s", bad[i], want[k], msg);
    }
    /* No value at all: named too (cfgcheck's key=value rule). */
    if (sdnn_cfg_check_text("d.cfg", NET CONV YOLO "resize=\n") == SDNN_OK) fail_msg("resize= accepted");
    assert_non_null(strstr(sdnn_last_error(), "d.cfg:15: [yolo] resize="));
    static const char *const good[] = {"1", "1.5", "0.75", "2", "0.01", "100"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; ++i) {
        char text[512];
        snprintf(text, sizeof text, NET CONV YOLO "resize=%s\n", good[i]);
        if (sdnn_cfg_check_text("d.cfg", text) != SDNN_OK)
            fail_msg("resize=%s refused: %s", good[i], sdnn_last_error());
    }
    /* The head keeps the value (dialect.c), the fork's default is 1. */
    char path[128];
    snprintf(path, sizeof path, "%s/r.cfg", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(NET CONV YOLO "resize=1.25\n", f);
    fclose(f);
    network *net = sdnn_parse_network(path);
    assert_non_null(net);
    const sdnn_yolo_opts *yo = sdnn_dialect_yolo(net, net->n - 1);
    assert_non_null(yo);
    assert_float_equal(yo->resize, 1.25f, 0);
    sdnn_network_free(net);
}

/* ---- through the binary ------------------------------------------------------------ */

/* The losses printed per iteration ("N: loss, ..."), comma-joined. */
static void losses(const char *log, char *out, size_t cap)
{
    char *t = tu_slurp(log);
    assert_non_null(t);
    out[0] = '\0';
    for (char *p = t; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        int it;
        char loss[32];
        if (sscanf(p, "%d: %31[^,],", &it, loss) == 2 && strstr(p, "avg")) {
            strncat(out, loss, cap - strlen(out) - 2);
            strncat(out, ",", cap - strlen(out) - 1);
        }
        p = nl ? nl + 1 : NULL;
    }
    free(t);
}

static int files_equal(const char *a, const char *b)
{
    return tu_run("cmp -s %s %s", a, b) == 0;
}

/* Train `cfg` (-max_batches 3) into backup folder `tag` with `flags`; the
 * losses into out. */
static void train_with(const char *bin, const char *cfg, const char *tag, const char *flags,
                       char *out, size_t cap)
{
    int rc = tu_run("mkdir -p %s/%s && sed 's|backup=.*|backup=%s/%s/|' %s/s.data > %s/%s.data && "
                    "%s detector train %s/%s.data %s -max_batches 3 %s >%s/%s.log 2>&1",
                    g_dir, tag, g_dir, tag, g_dir, g_dir, tag, bin, g_dir, tag, cfg, flags, g_dir,
                    tag);
    if (rc != 0) fail_msg("%s: detector train exit %d (see %s/%s.log)", tag, rc, g_dir, tag);
    char log[160];
    snprintf(log, sizeof log, "%s/%s.log", g_dir, tag);
    losses(log, out, cap);
    if (strlen(out) < 6) fail_msg("%s: no losses in %s", tag, log);
}

static void train(const char *cfg, const char *tag, const char *flags, char *out, size_t cap)
{
    train_with(g_bin, cfg, tag, flags, out, cap);
}

/* cfg/shapes-v4tiny.cfg carries the fork's resize=1.5: its batches are
 * built here; two runs with one -seed give the same loss at every
 * iteration and the same weights byte for byte (each step's batch and
 * update equal), another seed another run; the weights reload. */
static void test_resize_cfg_repeats(void **state)
{
    (void)state;
    const char *cfg = "cfg/shapes-v4tiny.cfg";
    network *n = sdnn_parse_network((char *)cfg);
    assert_non_null(n);
    const sdnn_yolo_opts *yo = sdnn_dialect_yolo(n, n->n - 1);
    assert_non_null(yo);
    assert_float_equal(yo->resize, 1.5f, 0);
    sdnn_network_free(n);
    char a[256], b[256], c[256];
    train(cfg, "r1a", "-seed 1", a, sizeof a);
    train(cfg, "r1b", "-seed 1", b, sizeof b);
    train(cfg, "r2", "-seed 2", c, sizeof c);
    char log[160];
    snprintf(log, sizeof log, "%s/r1a.log", g_dir);
    char *t = tu_slurp(log);
    assert_non_null(strstr(t, "batches built here ([yolo] resize=1.5"));
    free(t);
    assert_string_equal(a, b);
    if (strcmp(a, c) == 0) fail_msg("seeds 1 and 2 gave the same losses %s", a);
    char wa[160], wb[160], wc[160];
    snprintf(wa, sizeof wa, "%s/r1a/shapes-v4tiny_final.weights", g_dir);
    snprintf(wb, sizeof wb, "%s/r1b/shapes-v4tiny_final.weights", g_dir);
    snprintf(wc, sizeof wc, "%s/r2/shapes-v4tiny_final.weights", g_dir);
    assert_true(files_equal(wa, wb));
    assert_false(files_equal(wa, wc));
    /* Reloaded: the same outputs as a second load, all finite. */
    network *x = sdnn_parse_network((char *)cfg), *y = sdnn_parse_network((char *)cfg);
    load_weights(x, wa);
    load_weights(y, wa);
    set_batch_network(x, 1);
    set_batch_network(y, 1);
    static float in[64 * 64 * 3];
    uint64_t s = 5;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) in[i] = tu_uniform(&s, 0, 1);
    network_predict(x, in);
    network_predict(y, in);
    const layer *lx = &x->layers[x->n - 1], *ly = &y->layers[y->n - 1];
    for (int i = 0; i < lx->outputs; ++i)
        if (!(lx->output[i] == ly->output[i]) || !isfinite(lx->output[i]))
            fail_msg("output %d: %g / %g", i, lx->output[i], ly->output[i]);
    sdnn_network_free(x);
    sdnn_network_free(y);
    /* Data-parallel (scalednn mode, 2 replicas): also repeatable. */
    train("cfg/shapes-v4tiny-scalednn.cfg", "p1a", "-seed 3 -gpus 0,1", a, sizeof a);
    train("cfg/shapes-v4tiny-scalednn.cfg", "p1b", "-seed 3 -gpus 0,1", b, sizeof b);
    assert_string_equal(a, b);
}

/* cfg/shapes.cfg with the fork's [net] keys added: mosaic=1 (with
 * mosaic_bound=1) trains through the builder and repeats bit for bit under
 * one -seed; letter_box=1 and flip=0 train through it too (the banner says
 * which keys it follows). */
static void test_aug_cfgs_train(void **state)
{
    (void)state;
    static const char *const keys[][2] = {{"mos", "mosaic=1\\nmosaic_bound=1"},
                                          {"lb", "letter_box=1"},
                                          {"nf", "flip=0"}};
    static const char *const banner[] = {"[net] mosaic=1 mosaic_bound=1 letter_box=0 flip=1",
                                         "[net] mosaic=0 mosaic_bound=0 letter_box=1 flip=1",
                                         "[net] mosaic=0 mosaic_bound=0 letter_box=0 flip=0"};
    for (int i = 0; i < 3; ++i) {
        char cfg[160], tag[16], log[160], a[256], b[256];
        snprintf(cfg, sizeof cfg, "%s/%s.cfg", g_dir, keys[i][0]);
        assert_int_equal(tu_run("sed 's/^\\[net\\]/[net]\\n%s/' cfg/shapes.cfg > %s", keys[i][1], cfg), 0);
        snprintf(tag, sizeof tag, "%sa", keys[i][0]);
        train(cfg, tag, "-seed 1", a, sizeof a);
        snprintf(log, sizeof log, "%s/%s.log", g_dir, tag);
        char *t = tu_slurp(log);
        assert_non_null(t);
        if (!strstr(t, banner[i])) fail_msg("%s: no \"%s\" in %s", keys[i][0], banner[i], log);
        free(t);
        if (i > 0) continue;
        snprintf(tag, sizeof tag, "%sb", keys[i][0]);
        train(cfg, tag, "-seed 1", b, sizeof b);
        assert_string_equal(a, b);
        char wa[160], wb[160];
        snprintf(wa, sizeof wa, "%s/mosa/mos_final.weights", g_dir);
        snprintf(wb, sizeof wb, "%s/mosb/mos_final.weights", g_dir);
        assert_true(files_equal(wa, wb));
    }
}

/* cfg/shapes.cfg has no resize: libdarknet's loader as before (no
 * "batches built here"), and with one loader thread and one -seed two
 * runs are equal (libdarknet's loader draws rand() from its threads: only
 * one thread gives one order).  With SDNN_REF_DARKNET_BIN (a binary built
 * from another commit, e.g. main's) the same run there must give the same
 * losses and weights byte for byte. */
static void test_plain_cfg_darknet_loader(void **state)
{
    (void)state;
    char a[256], b[256];
    train("cfg/shapes.cfg", "s1a", "-seed 1 -threads 1", a, sizeof a);
    train("cfg/shapes.cfg", "s1b", "-seed 1 -threads 1", b, sizeof b);
    assert_string_equal(a, b);
    char log[160];
    snprintf(log, sizeof log, "%s/s1a.log", g_dir);
    char *t = tu_slurp(log);
    assert_null(strstr(t, "batches built here"));
    free(t);
    char wa[160], wb[160];
    snprintf(wa, sizeof wa, "%s/s1a/shapes_final.weights", g_dir);
    snprintf(wb, sizeof wb, "%s/s1b/shapes_final.weights", g_dir);
    assert_true(files_equal(wa, wb));
    const char *ref = getenv("SDNN_REF_DARKNET_BIN");
    if (ref && *ref) {
        char r[256], wr[160];
        train_with(ref, "cfg/shapes.cfg", "s1ref", "-seed 1 -threads 1", r, sizeof r);
        assert_string_equal(a, r);
        snprintf(wr, sizeof wr, "%s/s1ref/shapes_final.weights", g_dir);
        assert_true(files_equal(wa, wr));
        printf("shapes.cfg: losses %s equal to %s's, weights byte for byte\n", a, ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pure_function),
        cmocka_unit_test(test_plain_resize),
        cmocka_unit_test(test_forced_geometry),
        cmocka_unit_test(test_boxes_clipped_dropped),
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_missing_label),
        cmocka_unit_test(test_mosaic_reference),
        cmocka_unit_test(test_letter_box),
        cmocka_unit_test(test_mosaic_batches),
        cmocka_unit_test(test_flip_off),
        cmocka_unit_test(test_net_key_values),
        cmocka_unit_test(test_loader_darknet_unchanged),
        cmocka_unit_test(test_resize_values),
        cmocka_unit_test(test_resize_cfg_repeats),
        cmocka_unit_test(test_plain_cfg_darknet_loader),
        cmocka_unit_test(test_aug_cfgs_train),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
