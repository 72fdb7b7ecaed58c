/*
 * Tests of the dataset commands: `scalednn gen-shapes` (synthetic detection
 * set) and `scalednn fmnist` (Fashion-MNIST to Darknet's classifier layout).
 * The files are checked directly (determinism, label format, list files,
 * image sizes) and through libdarknet's own loaders (load_image_color, the
 * DETECTION_DATA batch loader, load_data_old with its strstr labelling).
 * Everything is written under one mkdtemp directory, removed at the end.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <darknet.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"

#define FMNIST_SRC "/usr/share/datasets/fashion-mnist"
#define MAX_ARGS 32

/* Under AddressSanitizer: Darknet's label-path code calls strcpy on
 * overlapping buffers (its find_replace writes in place, also inlined into
 * fill_truth_detection); that is Darknet's, not ours, so only reports from
 * those two functions are suppressed.  Only read by the ASan runtime;
 * unused in a normal build. */
const char *__asan_default_suppressions(void);
const char *__asan_default_suppressions(void)
{
    return "interceptor_via_fun:find_replace\ninterceptor_via_fun:fill_truth_detection\n";
}

static char g_root[PATH_MAX];

static const char *const fm_classes[10] = {
    "top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "boot"
};

/* ---- helpers ------------------------------------------------------------ */

typedef int (*cmd_fn)(int, char **);

/* Calls a command with a NULL-terminated list of arguments. */
static int call(cmd_fn fn, const char *first, ...)
{
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < MAX_ARGS; a = va_arg(ap, const char *))
        argv[argc++] = strdup(a);
    va_end(ap);
    argv[argc] = NULL;
    fflush(stdout);
    int rc = fn(argc, argv);
    fflush(stdout);
    for (int i = 0; i < argc; ++i)
        free(argv[i]);
    return rc;
}

static void path_of(char *out, size_t size, const char *fmt, ...)
{
    char rel[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    int n = snprintf(out, size, "%s/%s", g_root, rel);
    assert_true(n > 0 && (size_t)n < size);
}

/* Reads a whole file; returns its size, or -1 if it cannot be read. */
static long slurp(const char *path, char **buf)
{
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    assert_non_null(*buf);
    if (n > 0 && fread(*buf, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    fclose(f);
    if (n >= 0)
        (*buf)[n] = '\0';
    return n;
}

/* 1 if the files are byte-identical, 0 if not; fails if either is missing. */
static int same_file(const char *a, const char *b)
{
    char *x, *y;
    long nx = slurp(a, &x), ny = slurp(b, &y);
    if (nx < 0)
        fail_msg("cannot read %s", a);
    if (ny < 0)
        fail_msg("cannot read %s", b);
    int same = nx == ny && memcmp(x, y, (size_t)nx) == 0;
    free(x);
    free(y);
    return same;
}

/* Lines of a text file (without newlines); returns the count. */
static int read_lines(const char *path, char ***lines)
{
    char *buf;
    long n = slurp(path, &buf);
    if (n < 0)
        fail_msg("cannot read %s", path);
    int count = 0, cap = 16;
    *lines = malloc(sizeof(char *) * (size_t)cap);
    for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (count == cap) {
            cap *= 2;
            *lines = realloc(*lines, sizeof(char *) * (size_t)cap);
        }
        (*lines)[count++] = strdup(l);
    }
    free(buf);
    return count;
}

static void free_lines(char **lines, int n)
{
    for (int i = 0; i < n; ++i)
        free(lines[i]);
    free(lines);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

typedef struct {
    int cls;
    float x, y, w, h;
} lbox;

/* Parses a YOLO label file strictly; returns the number of boxes. */
static int read_label_file(const char *path, lbox *boxes, int max)
{
    char **lines;
    int n = read_lines(path, &lines);
    if (n > max)
        fail_msg("%s: %d boxes, at most %d expected", path, n, max);
    for (int i = 0; i < n; ++i) {
        int used = 0;
        lbox *b = &boxes[i];
        if (sscanf(lines[i], "%d %f %f %f %f%n", &b->cls, &b->x, &b->y, &b->w, &b->h, &used) != 5
            || lines[i][used] != '\0')
            fail_msg("%s: bad label line '%s'", path, lines[i]);
    }
    free_lines(lines, n);
    return n;
}

static float iou(const lbox *a, const lbox *b)
{
    float ix = fminf(a->x + a->w / 2, b->x + b->w / 2) - fmaxf(a->x - a->w / 2, b->x - b->w / 2);
    float iy = fminf(a->y + a->h / 2, b->y + b->h / 2) - fmaxf(a->y - a->h / 2, b->y - b->h / 2);
    if (ix <= 0 || iy <= 0)
        return 0;
    return ix * iy / (a->w * a->h + b->w * b->h - ix * iy);
}

/* Whether (u, v), in box-normalised coordinates, is inside a shape of the
 * class: circle, square, triangle (apex up), cross (arms 0.34 wide). */
static int in_shape(int cls, float u, float v)
{
    if (u < 0 || u > 1 || v < 0 || v > 1)
        return 0;
    switch (cls) {
    case 0: return (u - 0.5f) * (u - 0.5f) + (v - 0.5f) * (v - 0.5f) <= 0.25f;
    case 1: return 1;
    case 2: return fabsf(u - 0.5f) <= 0.5f * v;
    default: return fabsf(u - 0.5f) <= 0.17f || fabsf(v - 0.5f) <= 0.17f;
    }
}

/* The label must say where the shape is: pixels surely inside the shape
 * (all of the pixel, grown by a margin) carry one flat colour, and pixels
 * surely outside (nine points of the grown pixel outside) almost never do.
 * Only for objects whose neighbourhood no other object touches. */
static int check_drawn(const image *im, const lbox *boxes, int nb, const char *path)
{
    const float S = (float)im->w, m = 0.25f;
    int checked = 0;
    for (int k = 0; k < nb; ++k) {
        const lbox *b = &boxes[k];
        float x0 = (b->x - b->w / 2) * S, y0 = (b->y - b->h / 2) * S;
        float bw = b->w * S, bh = b->h * S;
        int alone = 1;
        for (int j = 0; j < nb; ++j) {
            if (j == k)
                continue;
            lbox g = boxes[j], me = *b;
            me.w += 6 / S;
            me.h += 6 / S;
            alone &= iou(&g, &me) == 0;
        }
        if (!alone)
            continue;
        checked++;
        float col[3] = { -1, -1, -1 };
        int inside = 0, outside = 0, outside_same = 0;
        for (int y = (int)y0 - 2; y <= (int)(y0 + bh) + 2; ++y)
            for (int x = (int)x0 - 2; x <= (int)(x0 + bw) + 2; ++x) {
                if (x < 0 || y < 0 || x >= im->w || y >= im->h)
                    continue;
                int n_in = 0;
                for (int sy = 0; sy < 3; ++sy)
                    for (int sx = 0; sx < 3; ++sx) {
                        float px = (float)x - m + (1 + 2 * m) * 0.5f * (float)sx;
                        float py = (float)y - m + (1 + 2 * m) * 0.5f * (float)sy;
                        n_in += in_shape(b->cls, (px - x0) / bw, (py - y0) / bh);
                    }
                const float *d = im->data;
                float v[3] = { d[y * im->w + x], d[im->w * im->h + y * im->w + x],
                               d[2 * im->w * im->h + y * im->w + x] };
                if (n_in == 9) {
                    if (col[0] < 0)
                        memcpy(col, v, sizeof col);
                    for (int c = 0; c < 3; ++c)
                        if (fabsf(v[c] - col[c]) > 1e-6f)
                            fail_msg("%s: object %d (class %d) is not flat at pixel %d,%d",
                                     path, k, b->cls, x, y);
                    inside++;
                } else if (n_in == 0) {
                    outside++;
                }
            }
        if (inside == 0)
            fail_msg("%s: object %d has no inner pixel", path, k);
        for (int y = (int)y0 - 2; y <= (int)(y0 + bh) + 2; ++y)
            for (int x = (int)x0 - 2; x <= (int)(x0 + bw) + 2; ++x) {
                if (x < 0 || y < 0 || x >= im->w || y >= im->h)
                    continue;
                int n_in = 0;
                for (int sy = 0; sy < 3; ++sy)
                    for (int sx = 0; sx < 3; ++sx) {
                        float px = (float)x - m + (1 + 2 * m) * 0.5f * (float)sx;
                        float py = (float)y - m + (1 + 2 * m) * 0.5f * (float)sy;
                        n_in += in_shape(b->cls, (px - x0) / bw, (py - y0) / bh);
                    }
                if (n_in)
                    continue;
                const float *d = im->data;
                int same = 1;
                for (int c = 0; c < 3; ++c)
                    same &= fabsf(d[c * im->w * im->h + y * im->w + x] - col[c]) <= 1e-6f;
                outside_same += same;
            }
        if (outside == 0 || outside_same * 20 > outside)
            fail_msg("%s: object %d (class %d): %d of %d pixels outside it have its colour",
                     path, k, b->cls, outside_same, outside);
    }
    return checked;
}

/* Label path of an image path, the way Darknet derives it. */
static void label_path_of(const char *img, char *out, size_t size)
{
    const char *p = strstr(img, "images");
    assert_non_null(p);
    int n = snprintf(out, size, "%.*slabels%s", (int)(p - img), img, p + 6);
    assert_true(n > 0 && (size_t)n < size);
    char *ext = strstr(out, ".png");
    assert_non_null(ext);
    strcpy(ext, ".txt");
}

/* ---- fixtures ----------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    /* The directory name must not contain words that Darknet's loaders look
     * for in paths ("images", "raw", the Fashion-MNIST class names). */
    for (int tries = 0; tries < 20; ++tries) {
        strcpy(g_root, "/tmp/sdnn_dg_XXXXXX");
        if (!mkdtemp(g_root))
            return -1;
        int bad = strstr(g_root, "raw") != NULL;
        for (int c = 0; c < 10; ++c)
            bad |= strstr(g_root, fm_classes[c]) != NULL;
        if (!bad)
            return 0;
        rmdir(g_root);
    }
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (g_root[0] && !getenv("SDNN_KEEP_TMP"))
        nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- gen-shapes ---------------------------------------------------------- */

static void test_shapes_deterministic(void **state)
{
    (void)state;
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], d[PATH_MAX];
    path_of(a, sizeof a, "det_a");
    path_of(b, sizeof b, "det_b");
    path_of(c, sizeof c, "det_c");
    path_of(d, sizeof d, "det_d");
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", a, "-n", "6", "-valid", "3",
                          "-seed", "7", NULL), 0);
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", b, "-seed", "7", "-valid", "3",
                          "-n", "6", NULL), 0);
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", c, "-n", "6", "-valid", "3",
                          "-seed", "8", NULL), 0);
    /* Fewer images, same seed: the common images are the same. */
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", d, "-n", "2", "-valid", "1",
                          "-seed", "7", NULL), 0);

    static const struct { const char *split; int n; } splits[] = { { "train", 6 }, { "valid", 3 } };
    int differ_img = 0, differ_lab = 0;
    for (size_t s = 0; s < 2; ++s)
        for (int i = 1; i <= splits[s].n; ++i) {
            char pa[PATH_MAX + 64], pb[PATH_MAX + 64], pc[PATH_MAX + 64], pd[PATH_MAX + 64];
            const char *sp = splits[s].split;
            snprintf(pa, sizeof pa, "%s/images/%s/%06d.png", a, sp, i);
            snprintf(pb, sizeof pb, "%s/images/%s/%06d.png", b, sp, i);
            snprintf(pc, sizeof pc, "%s/images/%s/%06d.png", c, sp, i);
            assert_true(same_file(pa, pb));
            differ_img += !same_file(pa, pc);
            if (i <= (s == 0 ? 2 : 1)) {
                snprintf(pd, sizeof pd, "%s/images/%s/%06d.png", d, sp, i);
                assert_true(same_file(pa, pd));
            }
            snprintf(pa, sizeof pa, "%s/labels/%s/%06d.txt", a, sp, i);
            snprintf(pb, sizeof pb, "%s/labels/%s/%06d.txt", b, sp, i);
            snprintf(pc, sizeof pc, "%s/labels/%s/%06d.txt", c, sp, i);
            assert_true(same_file(pa, pb));
            differ_lab += !same_file(pa, pc);
        }
    /* Every image of another seed differs; labels almost surely too. */
    assert_int_equal(differ_img, 9);
    assert_true(differ_lab >= 7);

    char na[PATH_MAX + 32], nb[PATH_MAX + 32];
    snprintf(na, sizeof na, "%s/shapes.names", a);
    snprintf(nb, sizeof nb, "%s/shapes.names", b);
    assert_true(same_file(na, nb));
    char **names;
    int nn = read_lines(na, &names);
    assert_int_equal(nn, 4);
    assert_string_equal(names[0], "circle");
    assert_string_equal(names[3], "cross");
    free_lines(names, nn);
}

/* Labels: format, ranges, boxes inside the image, little overlap; lists and
 * images through Darknet's image loader.  Uses -size 48. */
static void test_shapes_labels_lists_images(void **state)
{
    (void)state;
    char out[PATH_MAX];
    path_of(out, sizeof out, "lab");
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "40", "-valid", "5",
                          "-size", "48", "-seed", "3", NULL), 0);

    static const struct { const char *split; int n; } splits[] = { { "train", 40 }, { "valid", 5 } };
    int per_class[4] = { 0 }, total = 0, checked = 0, drawn = 0;
    for (size_t s = 0; s < 2; ++s) {
        char list[PATH_MAX + 32];
        snprintf(list, sizeof list, "%s/%s.txt", out, splits[s].split);
        char **paths;
        int n = read_lines(list, &paths);
        assert_int_equal(n, splits[s].n);
        for (int i = 0; i < n; ++i) {
            char want[PATH_MAX + 64];
            snprintf(want, sizeof want, "%s/images/%s/%06d.png", out, splits[s].split, i + 1);
            assert_string_equal(paths[i], want);

            image im = load_image_color(paths[i], 0, 0);
            assert_int_equal(im.w, 48);
            assert_int_equal(im.h, 48);
            assert_int_equal(im.c, 3);
            float lo = 1, hi = 0;
            for (int k = 0; k < im.w * im.h * im.c; ++k) {
                lo = fminf(lo, im.data[k]);
                hi = fmaxf(hi, im.data[k]);
            }
            assert_true(lo >= 0 && hi <= 1 && hi - lo > 0.2f);

            char lab[PATH_MAX + 64];
            label_path_of(paths[i], lab, sizeof lab);
            lbox boxes[8];
            int nb = read_label_file(lab, boxes, 8);
            assert_in_range(nb, 1, 4);
            for (int k = 0; k < nb; ++k) {
                const lbox *b = &boxes[k];
                assert_in_range(b->cls, 0, 3);
                per_class[b->cls]++;
                total++;
                assert_true(b->w > 0.05f && b->w < 0.5f);
                assert_true(b->h > 0.05f && b->h < 0.5f);
                assert_true(b->x - b->w / 2 >= -1e-5f && b->x + b->w / 2 <= 1 + 1e-5f);
                assert_true(b->y - b->h / 2 >= -1e-5f && b->y + b->h / 2 <= 1 + 1e-5f);
                for (int j = 0; j < k; ++j)
                    assert_true(iou(b, &boxes[j]) <= 0.06f);
            }
            drawn += check_drawn(&im, boxes, nb, paths[i]);
            checked++;
            free_image(im);
        }
        free_lines(paths, n);
    }
    /* 45 images of 1-4 objects: every class shows up. */
    assert_int_equal(checked, 45);
    /* Enough objects stand alone and had their pixels checked. */
    if (drawn * 4 < total)
        fail_msg("only %d of %d objects could be checked pixel by pixel", drawn, total);
    print_message("%d of %d objects checked pixel by pixel\n", drawn, total);
    assert_true(total >= 45);
    for (int c = 0; c < 4; ++c)
        assert_true(per_class[c] > 0);
}

/* -style plain (the main job's set): 1-2 objects of 0.22-0.48 of the side
 * that never overlap, on a flat background (the pixels outside every box
 * within the noise amplitude, 0.04 each way, plus PNG's 1/255 rounding), and
 * other images than the textured style from the same seed. */
static void test_shapes_plain_style(void **state)
{
    (void)state;
    char out[PATH_MAX], tex[PATH_MAX];
    path_of(out, sizeof out, "plain");
    path_of(tex, sizeof tex, "plain_tex");
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "30", "-valid", "2",
                          "-seed", "5", "-style", "plain", NULL), 0);
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", tex, "-n", "30", "-valid", "2",
                          "-seed", "5", NULL), 0);
    int total = 0, two = 0, differ = 0;
    for (int i = 1; i <= 30; ++i) {
        char img[PATH_MAX + 64], timg[PATH_MAX + 64], lab[PATH_MAX + 64];
        snprintf(img, sizeof img, "%s/images/train/%06d.png", out, i);
        snprintf(timg, sizeof timg, "%s/images/train/%06d.png", tex, i);
        differ += !same_file(img, timg);
        label_path_of(img, lab, sizeof lab);
        lbox boxes[8];
        int nb = read_label_file(lab, boxes, 8);
        assert_in_range(nb, 1, 2);
        two += nb == 2;
        total += nb;
        for (int k = 0; k < nb; ++k) {
            assert_true(boxes[k].w >= 0.22f && boxes[k].w <= 0.48f + 1e-5f);
            assert_true(boxes[k].h >= 0.22f && boxes[k].h <= 0.48f + 1e-5f);
            for (int j = 0; j < k; ++j)
                assert_true(iou(&boxes[k], &boxes[j]) <= 1e-4f);
        }
        image im = load_image_color(img, 0, 0);
        assert_int_equal(im.w, 64);
        for (int c = 0; c < 3; ++c) {
            float lo = 1, hi = 0;
            for (int y = 0; y < im.h; ++y)
                for (int x = 0; x < im.w; ++x) {
                    float u = ((float)x + 0.5f) / (float)im.w, v = ((float)y + 0.5f) / (float)im.h;
                    int inside = 0;
                    for (int k = 0; k < nb; ++k)   /* a pixel's margin around each box */
                        inside |= fabsf(u - boxes[k].x) <= boxes[k].w / 2 + 1.5f / im.w
                               && fabsf(v - boxes[k].y) <= boxes[k].h / 2 + 1.5f / im.h;
                    if (inside) continue;
                    float p = im.data[c * im.w * im.h + y * im.w + x];
                    lo = fminf(lo, p);
                    hi = fmaxf(hi, p);
                }
            if (hi - lo > 0.08f + 2.0f / 255.0f)
                fail_msg("%s: channel %d outside the boxes spans %.3f: not flat", img, c,
                         (double)(hi - lo));
        }
        free_image(im);
    }
    assert_int_equal(differ, 30);
    assert_true(two > 0 && two < 30);   /* both counts occur */
    assert_true(total >= 31);
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-style", "flat", NULL), 2);
}

/* Darknet's own detection loader (DETECTION_DATA) builds a batch. */
static void test_shapes_darknet_detection_loader(void **state)
{
    (void)state;
    char out[PATH_MAX], list_path[PATH_MAX + 32];
    path_of(out, sizeof out, "ld");
    assert_int_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "8", "-valid", "0",
                          NULL), 0);
    snprintf(list_path, sizeof list_path, "%s/train.txt", out);
    list *pl = get_paths(list_path);
    assert_int_equal(pl->size, 8);
    char **paths = (char **)list_to_array(pl);

    /* One image, no jitter or colour change: each row of the batch is the
     * image or its mirror, and the truth its labels (mirrored alike). */
    for (int img = 0; img < 3; ++img) {
        data d;
        memset(&d, 0, sizeof d);
        load_args args;
        memset(&args, 0, sizeof args);
        args.threads = 1;
        args.paths = &paths[img];
        args.n = 6;
        args.m = 1;
        args.w = 64;
        args.h = 64;
        args.num_boxes = 90;
        args.classes = 4;
        args.jitter = 0;
        args.hue = 0;
        args.saturation = 1;
        args.exposure = 1;
        args.d = &d;
        args.type = DETECTION_DATA;
        load_data_blocking(args);
        assert_int_equal(d.X.rows, 6);
        assert_int_equal(d.X.cols, 64 * 64 * 3);
        assert_int_equal(d.y.rows, 6);
        assert_int_equal(d.y.cols, 90 * 5);

        image im = load_image_color(paths[img], 0, 0);
        char lab[PATH_MAX + 64];
        label_path_of(paths[img], lab, sizeof lab);
        lbox boxes[8];
        int nb = read_label_file(lab, boxes, 8);
        for (int r = 0; r < 6; ++r) {
            const float *x = d.X.vals[r];
            float err_same = 0, err_flip = 0;
            for (int c = 0; c < 3; ++c)
                for (int yy = 0; yy < 64; ++yy)
                    for (int xx = 0; xx < 64; ++xx) {
                        float v = x[c * 4096 + yy * 64 + xx];
                        err_same = fmaxf(err_same, fabsf(v - im.data[c * 4096 + yy * 64 + xx]));
                        err_flip = fmaxf(err_flip, fabsf(v - im.data[c * 4096 + yy * 64 + 63 - xx]));
                    }
            int flipped = err_flip < err_same;
            assert_true(fminf(err_same, err_flip) < 1e-3f);

            int found = 0;
            for (int k = 0; k < 90; ++k) {
                const float *t = &d.y.vals[r][k * 5];
                if (t[2] == 0 && t[3] == 0)
                    continue;
                found++;
                int match = 0;
                for (int j = 0; j < nb && !match; ++j) {
                    float bx = flipped ? 1 - boxes[j].x : boxes[j].x;
                    match = (int)t[4] == boxes[j].cls && fabsf(t[0] - bx) < 1e-4f
                            && fabsf(t[1] - boxes[j].y) < 1e-4f && fabsf(t[2] - boxes[j].w) < 1e-4f
                            && fabsf(t[3] - boxes[j].h) < 1e-4f;
                }
                if (!match)
                    fail_msg("%s row %d: truth box %g %g %g %g class %g not in the labels",
                             paths[img], r, t[0], t[1], t[2], t[3], t[4]);
            }
            assert_int_equal(found, nb);
        }
        free_image(im);
        free_data(d);
    }

    /* A random batch over all images, with Darknet's usual jitter. */
    data d;
    memset(&d, 0, sizeof d);
    load_args args;
    memset(&args, 0, sizeof args);
    args.threads = 1;
    args.paths = paths;
    args.n = 8;
    args.m = 8;
    args.w = 64;
    args.h = 64;
    args.num_boxes = 90;
    args.classes = 4;
    args.jitter = 0.2f;
    args.hue = 0.1f;
    args.saturation = 1.5f;
    args.exposure = 1.5f;
    args.d = &d;
    args.type = DETECTION_DATA;
    load_data_blocking(args);
    assert_int_equal(d.X.rows, 8);
    for (int r = 0; r < 8; ++r) {
        int found = 0;
        for (int k = 0; k < 90; ++k) {
            const float *t = &d.y.vals[r][k * 5];
            if (t[2] == 0 && t[3] == 0)
                continue;
            found++;
            assert_true(t[0] >= 0 && t[0] <= 1 && t[1] >= 0 && t[1] <= 1);
            assert_true(t[2] > 0 && t[2] <= 1 && t[3] > 0 && t[3] <= 1);
            assert_in_range((int)t[4], 0, 3);
        }
        assert_in_range(found, 1, 4);
    }
    free_data(d);
    for (int i = 0; i < 8; ++i)
        free(paths[i]);
    free(paths);
    free_list(pl);
}

static void test_shapes_relative_outdir(void **state)
{
    (void)state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(g_root), 0);
    int rc = call(sdnn_cmd_gen_shapes, "gen-shapes", "rel/deep/set/", "-n", "2", "-valid", "1",
                  "-size", "32", NULL);
    char **lines = NULL;
    int n = rc == 0 ? read_lines("rel/deep/set/train.txt", &lines) : 0;
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 2);
    assert_string_equal(lines[0], "rel/deep/set/images/train/000001.png");
    assert_string_equal(lines[1], "rel/deep/set/images/train/000002.png");
    free_lines(lines, n);
}

/* ---- fmnist --------------------------------------------------------------- */

/* The first `n` bytes after an IDX header of `hdr` bytes, read with gzip. */
static unsigned char *idx_bytes(const char *file, int hdr, int n)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/%s'", FMNIST_SRC, file);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    unsigned char *buf = malloc((size_t)(hdr + n));
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)(hdr + n), p), (size_t)(hdr + n));
    char sink[65536];
    while (fread(sink, 1, sizeof sink, p) > 0)
        ;
    pclose(p);
    memmove(buf, buf + hdr, (size_t)n);
    return buf;
}

static void test_fmnist_convert(void **state)
{
    (void)state;
    struct stat st;
    if (stat(FMNIST_SRC, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "skipping: %s is absent (apt-get install dataset-fashion-mnist)\n",
                FMNIST_SRC);
        skip();
    }
    char out[PATH_MAX];
    path_of(out, sizeof out, "fm");
    assert_int_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-n", "20", "-valid", "10", NULL), 0);

    char names_path[PATH_MAX + 32];
    snprintf(names_path, sizeof names_path, "%s/fmnist.names", out);
    char **labels = get_labels(names_path);
    char **name_lines;
    assert_int_equal(read_lines(names_path, &name_lines), 10);
    free_lines(name_lines, 10);

    static const struct {
        const char *split, *img, *lab;
        int n;
    } splits[] = {
        { "train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 20 },
        { "valid", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10 },
    };
    for (size_t s = 0; s < 2; ++s) {
        char list[PATH_MAX + 32];
        snprintf(list, sizeof list, "%s/%s.txt", out, splits[s].split);
        char **paths;
        int n = read_lines(list, &paths);
        assert_int_equal(n, splits[s].n);
        unsigned char *truth = idx_bytes(splits[s].lab, 8, n);
        unsigned char *pix = idx_bytes(splits[s].img, 16, n * 784);
        for (int i = 0; i < n; ++i) {
            /* Exactly one class name in the path, and it is the right one. */
            int matches = 0, cls = -1;
            for (int c = 0; c < 10; ++c)
                if (strstr(paths[i], labels[c])) {
                    matches++;
                    cls = c;
                }
            assert_int_equal(matches, 1);
            assert_int_equal(cls, truth[i]);
            char want[PATH_MAX + 64];
            snprintf(want, sizeof want, "%s/%s/%05d_%s.png", out, splits[s].split, i + 1,
                     fm_classes[truth[i]]);
            assert_string_equal(paths[i], want);

            image im = load_image_color(paths[i], 0, 0);
            assert_int_equal(im.w, 28);
            assert_int_equal(im.h, 28);
            assert_int_equal(im.c, 3);
            for (int p = 0; p < 784; ++p)
                for (int c = 0; c < 3; ++c)
                    assert_int_equal((int)lroundf(im.data[c * 784 + p] * 255.0f),
                                     pix[i * 784 + p]);
            free_image(im);
        }
        free(truth);
        free(pix);

        /* Darknet's classifier loader labels every image with one class. */
        data d = load_data_old(paths, n, n, labels, 10, 28, 28);
        assert_int_equal(d.y.rows, n);
        assert_int_equal(d.y.cols, 10);
        for (int r = 0; r < n; ++r) {
            float sum = 0;
            for (int c = 0; c < 10; ++c)
                sum += d.y.vals[r][c];
            assert_true(sum == 1.0f);
        }
        free_data(d);
        free_lines(paths, n);
    }
    for (int c = 0; c < 10; ++c)
        free(labels[c]);
    free(labels);
}

/* Writes `len` bytes through gzip into dir/name. */
static void write_gz(const char *dir, const char *name, const unsigned char *bytes, size_t len)
{
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "gzip -c > '%s/%s'", dir, name);
    FILE *p = popen(cmd, "w");
    assert_non_null(p);
    assert_int_equal(fwrite(bytes, 1, len, p), len);
    assert_int_equal(pclose(p), 0);
}

static size_t idx_header(unsigned char *b, uint32_t magic, uint32_t count, int dims)
{
    uint32_t v[4] = { magic, count, 28, 28 };
    for (int k = 0; k < dims + 1; ++k) {
        b[4 * k] = (unsigned char)(v[k] >> 24);
        b[4 * k + 1] = (unsigned char)(v[k] >> 16);
        b[4 * k + 2] = (unsigned char)(v[k] >> 8);
        b[4 * k + 3] = (unsigned char)v[k];
    }
    return 4 * (size_t)(dims + 1);
}

/* A hand-made source directory: conversion of "all" (0), and each kind of
 * broken file is refused.  Needs no installed dataset. */
static void test_fmnist_synthetic_and_broken_src(void **state)
{
    (void)state;
    char src[PATH_MAX], out[PATH_MAX];
    path_of(src, sizeof src, "src");
    path_of(out, sizeof out, "fm_syn");
    assert_int_equal(mkdir(src, 0777), 0);

    static unsigned char img[16 + 3 * 784], lab[8 + 3];
    size_t hi = idx_header(img, 0x803, 3, 3), hl = idx_header(lab, 0x801, 3, 1);
    for (int i = 0; i < 3 * 784; ++i)
        img[hi + (size_t)i] = (unsigned char)(i * 7 % 256);
    lab[hl] = 9;
    lab[hl + 1] = 0;
    lab[hl + 2] = 4;
    const char *names[4] = { "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz" };
    write_gz(src, names[0], img, sizeof img);
    write_gz(src, names[1], lab, sizeof lab);
    write_gz(src, names[2], img, sizeof img);
    write_gz(src, names[3], lab, sizeof lab);
    assert_int_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "0", "-valid", "0",
                          NULL), 0);
    char list[PATH_MAX + 32];
    snprintf(list, sizeof list, "%s/valid.txt", out);
    char **paths;
    int n = read_lines(list, &paths);
    assert_int_equal(n, 3);
    assert_non_null(strstr(paths[0], "/valid/00001_boot.png"));
    assert_non_null(strstr(paths[1], "/valid/00002_top.png"));
    assert_non_null(strstr(paths[2], "/valid/00003_coat.png"));
    image im = load_image_color(paths[1], 0, 0);
    for (int p = 0; p < 784; ++p)
        assert_int_equal((int)lroundf(im.data[p] * 255.0f), img[hi + 784 + (size_t)p]);
    free_image(im);
    free_lines(paths, n);

    /* More images than the set has. */
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "4", NULL), 0);
    /* Truncated: the header says 3 images, the file holds 2. */
    write_gz(src, names[2], img, sizeof img - 784);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
    /* Wrong magic (labels where images belong). */
    write_gz(src, names[2], lab, sizeof lab);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
    /* A label out of range. */
    write_gz(src, names[2], img, sizeof img);
    lab[hl + 1] = 10;
    write_gz(src, names[3], lab, sizeof lab);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
    /* Images and labels disagree on the count. */
    idx_header(lab, 0x801, 2, 1);
    lab[hl + 1] = 0;
    write_gz(src, names[3], lab, sizeof lab - 1);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
    /* Not gzip at all. */
    char bad[PATH_MAX + 64];
    snprintf(bad, sizeof bad, "%s/%s", src, names[3]);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fputs("this is not gzip\n", f);
    fclose(f);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
    /* A missing file. */
    assert_int_equal(unlink(bad), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src", src, "-n", "1",
                              "-valid", "1", NULL), 0);
}

/* ---- bad arguments -------------------------------------------------------- */

static void test_bad_arguments(void **state)
{
    (void)state;
    char out[PATH_MAX], images_dir[PATH_MAX], bag_dir[PATH_MAX];
    path_of(out, sizeof out, "bad");
    path_of(images_dir, sizeof images_dir, "my_images");
    path_of(bag_dir, sizeof bag_dir, "handbag");

    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "-5", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "0", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", "12x", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-valid", "-1", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-size", "3", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-seed", "-2", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-n", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "-bogus", "1", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", out, "extra", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_gen_shapes, "gen-shapes", images_dir, NULL), 0);
    /* None of these may have written anything. */
    struct stat st;
    assert_int_not_equal(stat(out, &st), 0);
    assert_int_not_equal(stat(images_dir, &st), 0);

    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-n", "-5", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-valid", "x", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-src",
                              "/nonexistent/fashion-mnist", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", bag_dir, "-n", "1", NULL), 0);
    assert_int_not_equal(call(sdnn_cmd_fmnist, "fmnist", out, "-bogus", "1", NULL), 0);
    assert_int_not_equal(stat(out, &st), 0);
    assert_int_not_equal(stat(bag_dir, &st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_deterministic),
        cmocka_unit_test(test_shapes_labels_lists_images),
        cmocka_unit_test(test_shapes_darknet_detection_loader),
        cmocka_unit_test(test_shapes_relative_outdir),
        cmocka_unit_test(test_shapes_plain_style),
        cmocka_unit_test(test_fmnist_convert),
        cmocka_unit_test(test_fmnist_synthetic_and_broken_src),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
