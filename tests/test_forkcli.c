/*
 * Tests of the maintained fork's command line, through the ./darknet
 * binary (SDNN_DARKNET_BIN) on a small generated shapes set: the fork's
 * README commands run verbatim (the
 * shapes files in place of cars.*), the files they write (_last, _best,
 * .backup, _final, chart.png), every flag's effect and its bad values (exit
 * 2 naming the flag), the new commands (calc_anchors against a hand-worked
 * k-means, valid, recall), and NaN/inf weights refused by map and test.
 * The 101-point AP is checked against a hand-worked ranked list.
 *
 * tier: full (runs in `make test`, not in `make check`: many trainings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <darknet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evaluate.h"
#include "evalmap.h"
#include "replicas.h"
#include "saveio.h"

static char g_dir[256];
static const char *g_bin;

/* Runs the binary with args (printf-style), stdout and stderr into
 * g_dir/out.log; the exit code, and the output in *out (caller frees). */
static int run_bin(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_bin(char **out, const char *fmt, ...)
{
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = tu_run("%s %s >%s/out.log 2>&1", g_bin, args, g_dir);
    char path[512];
    snprintf(path, sizeof path, "%s/out.log", g_dir);
    *out = tu_slurp(path);
    assert_non_null(*out);
    if (getenv("SDNN_VERBOSE")) printf("$ darknet %s\n%s\n", args, *out);
    return rc;
}

static void assert_has(const char *out, const char *what)
{
    if (!strstr(out, what)) printf("expected \"%s\" in:\n%s\n", what, out);
    assert_non_null(strstr(out, what));
}

static int count_of(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) ++n;
    return n;
}

static int is_png(const char *path)
{
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, 8, f);
    fclose(f);
    return n == 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0;
}

static int exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int exists(const char *fmt, ...)
{
    char p[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    struct stat sb;
    return stat(p, &sb) == 0 && sb.st_size > 0;
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-forkcli-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 16 -valid 4 -seed 7 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    /* The fork's README names cars.data and cars.cfg: here shapes.data and
     * a copy of cfg/shapes.cfg that trains 100 iterations. */
    return tu_run("printf 'classes=4\\ntrain=%s/shapes/train.txt\\nvalid=%s/shapes/valid.txt\\n"
                  "names=%s/shapes/shapes.names\\nbackup=%s/backup\\nresults=%s/results\\n' "
                  "> %s/shapes.data && sed 's/^max_batches=.*/max_batches=100/' cfg/shapes.cfg "
                  "> %s/shapes.cfg",
                  g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

/* ---- the fork's README commands, verbatim ---------------------------------- */

static void test_readme_commands(void **state)
{
    (void)state;
    char *out;
    /* darknet detector train -map -dont_show cars.data cars.cfg */
    int rc = run_bin(&out, "detector train -map -dont_show %s/shapes.data %s/shapes.cfg -seed 3",
                     g_dir, g_dir);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_int_equal(count_of(out, "this build never opens a window"), 1);
    assert_has(out, "mAP@0.50 at iteration 100: all-point ");
    assert_has(out, " for conf_thresh = 0.25, precision = ");
    assert_has(out, "new best mAP");
    static const char *const files[] = {"shapes_last.weights", "shapes_best.weights",
                                        "shapes.backup", "shapes_final.weights", "shapes_100.weights"};
    for (int i = 0; i < 5; ++i) {
        if (!exists("%s/backup/%s", g_dir, files[i])) printf("missing %s\n", files[i]);
        assert_true(exists("%s/backup/%s", g_dir, files[i]));
    }
    char png[512];
    snprintf(png, sizeof png, "%s/backup/chart.png", g_dir);
    assert_true(is_png(png));
    assert_has(out, "chart written to ");
    /* No temporary file is left beside them. */
    assert_int_equal(tu_run("ls -a %s/backup | grep -q 'tmp\\|drawing'", g_dir), 1);
    free(out);

    /* darknet detector train -map -dont_show cars.data cars.cfg cars_last.weights -gpus 0,1
     * (the cfg trained on to 150: the run resumes at 100 with 2 replicas). */
    assert_int_equal(tu_run("sed -i 's/^max_batches=.*/max_batches=150/' %s/shapes.cfg", g_dir), 0);
    rc = run_bin(&out, "detector train -map -dont_show %s/shapes.data %s/shapes.cfg "
                 "%s/backup/shapes_last.weights -gpus 0,1", g_dir, g_dir, g_dir);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "2 replicas");
    assert_has(out, "mAP@0.50 at iteration 150: all-point ");
    free(out);
    assert_int_equal(tu_run("sed -i 's/^max_batches=.*/max_batches=100/' %s/shapes.cfg", g_dir), 0);

    /* darknet detector map cars.data cars.cfg cars_best.weights -points 101 */
    rc = run_bin(&out, "detector map %s/shapes.data %s/shapes.cfg %s/backup/shapes_best.weights "
                 "-points 101", g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    const char *line = strstr(out, "mAP@0.50: all-point ");
    assert_non_null(line);
    double all, m11, m101, fork = -1;
    assert_int_equal(sscanf(line, "mAP@0.50: all-point %lf, 11-point %lf, 101-point %lf", &all,
                            &m11, &m101), 3);
    line = strstr(out, "mean average precision (mAP@0.50) = ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "mean average precision (mAP@0.50) = %lf", &fork), 1);
    assert_true(fabs(fork - m101) < 5e-5);   /* printed to 4 and 6 decimals */
    assert_has(out, "(-points 101: COCO 101-point)");
    free(out);
    rc = run_bin(&out, "detector map %s/shapes.data %s/shapes.cfg %s/backup/shapes_best.weights "
                 "-points 11", g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    line = strstr(out, "mean average precision (mAP@0.50) = ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "mean average precision (mAP@0.50) = %lf", &fork), 1);
    assert_true(fabs(fork - m11) < 5e-5);
    free(out);
    rc = run_bin(&out, "detector map %s/shapes.data %s/shapes.cfg %s/backup/shapes_best.weights "
                 "-points 0", g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    line = strstr(out, "mean average precision (mAP@0.50) = ");
    assert_int_equal(sscanf(line, "mean average precision (mAP@0.50) = %lf", &fork), 1);
    assert_true(fabs(fork - all) < 5e-5);
    free(out);

    /* darknet detector calc_anchors cars.data -num_of_clusters 6 -width 416 -height 416 */
    rc = run_bin(&out, "detector calc_anchors %s/shapes.data -num_of_clusters 6 -width 416 "
                 "-height 416", g_dir);
    assert_int_equal(rc, 0);
    line = strstr(out, "anchors = ");
    assert_non_null(line);
    int v[12];
    assert_int_equal(sscanf(line, "anchors = %d,%d, %d,%d, %d,%d, %d,%d, %d,%d, %d,%d", &v[0],
                            &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                            &v[11]), 12);
    /* Ordered by area; shapes are 11-29 px of 64, so 71-189 px of 416. */
    for (int j = 0; j < 6; ++j) {
        assert_true(v[2 * j] >= 60 && v[2 * j] <= 200 && v[2 * j + 1] >= 60 && v[2 * j + 1] <= 200);
        if (j) assert_true(v[2 * j] * v[2 * j + 1] >= v[2 * j - 2] * v[2 * j - 1]);
    }
    assert_has(out, "mean IoU = ");
    free(out);
}

/* ---- flags: the fork's spellings, and bad usage named (exit 2) --------------- */

static void expect_usage(const char *args, const char *what)
{
    char *out;
    int rc = run_bin(&out, "%s", args);
    if (rc != 2) printf("rc %d for %s:\n%s\n", rc, args, out);
    assert_int_equal(rc, 2);
    assert_has(out, what);
    free(out);
}

static void test_bad_usage(void **state)
{
    (void)state;
    char a[1024];
    const char *d = g_dir;
#define TRAIN(flags) (snprintf(a, sizeof a, "detector train %s/shapes.data %s/shapes.cfg " flags, d, d), a)
#define MAP(flags) (snprintf(a, sizeof a, "detector map %s/shapes.data %s/shapes.cfg " \
                             "%s/backup/shapes_best.weights " flags, d, d, d), a)
    /* 28.4: a flag given twice, under either spelling: both named. */
    expect_usage(TRAIN("-gpus 0 -gpus 0,1"), "-gpus is given twice (-gpus 0, then -gpus 0,1)");
    expect_usage(TRAIN("-dontshow -map -dont_show"), "-dont_show is given twice (-dontshow, then "
                                                    "-dont_show)");
    expect_usage(MAP("-iou 0.5 -iou_thresh 0.6"), "-iou_thresh is given twice (-iou 0.5, then "
                                                 "-iou_thresh 0.6)");
    /* 28.5: -map_every without -map, as -target. */
    expect_usage(TRAIN("-map_every 5"), "-map_every 5 needs -map");
    /* Flags that cannot mean anything here. */
    expect_usage(TRAIN("-map -mjpeg_port 8090"), "-mjpeg_port cannot be used here: this build "
                                                "serves no MJPEG stream");
    expect_usage(MAP("-http_post_host example.org"), "-http_post_host cannot be used here");
    /* Bad values, named. */
    expect_usage(TRAIN("-map -points 12"), "-points 12: expected 0 (all-point AP), 11");
    expect_usage(MAP("-points 5"), "-points 5: expected 0");
    expect_usage(MAP("-iou_thresh 1.5"), "-iou_thresh 1.5: expected a number > 0 and <= 1");
    expect_usage(MAP("-iou 0"), "-iou 0: expected a number > 0 and <= 1");
    expect_usage(TRAIN("-time_limit_sec abc"), "-time_limit_sec abc: expected an integer >= 1");
    expect_usage(TRAIN("-time_limit_sec 0"), "-time_limit_sec 0: expected an integer >= 1");
    expect_usage(TRAIN("-chart"), "-chart needs a value (FILE)");
    expect_usage(TRAIN("-map -thresh 1"), "-thresh 1: expected a number >= 0 and < 1");
    snprintf(a, sizeof a, "detector calc_anchors %s/shapes.data -num_of_clusters 6", d);
    expect_usage(a, "-width and -height are required");
    snprintf(a, sizeof a, "detector calc_anchors %s/shapes.data -width 64 -height 64 "
             "-num_of_clusters 0", d);
    expect_usage(a, "-num_of_clusters 0: expected an integer >= 1");
    snprintf(a, sizeof a, "detector test %s/shapes.data %s/shapes.cfg w i -thresh 0.2 -thresh 0.3",
             d, d);
    expect_usage(a, "-thresh is given twice (-thresh 0.2, then -thresh 0.3)");
    snprintf(a, sizeof a, "detector recall %s/shapes.data %s/shapes.cfg w -iou_thresh 2", d, d);
    expect_usage(a, "-iou_thresh 2: expected a number > 0 and <= 1");
    snprintf(a, sizeof a, "detector valid %s/shapes.data %s/shapes.cfg w -out a/b", d, d);
    expect_usage(a, "-out a/b: expected a file name prefix without '/'");
    /* The usage lists the fork's flags and the refused ones with why. */
    char *out;
    assert_int_equal(run_bin(&out, "detector train -h"), 0);
    assert_has(out, "-dont_show");
    assert_has(out, "(also -dontshow)");
    assert_has(out, "-points 0|11|101");
    assert_has(out, "refused: this build serves no MJPEG stream");
    free(out);
#undef TRAIN
#undef MAP
}

/* ---- training flags ----------------------------------------------------------- */

static void test_train_flags(void **state)
{
    (void)state;
    char *out;
    /* -time_limit_sec: a 100000-iteration run stops after 2 s with _final. */
    assert_int_equal(tu_run("mkdir -p %s/tl && sed 's|^backup=.*|backup=%s/tl|' %s/shapes.data > "
                            "%s/tl.data", g_dir, g_dir, g_dir, g_dir), 0);
    int rc = run_bin(&out, "detector train %s/tl.data %s/shapes.cfg -max_batches 100000 "
                     "-time_limit_sec 2 -chart %s/tl/mychart.png -benchmark_layers -letter_box",
                     g_dir, g_dir, g_dir);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "-time_limit_sec 2 reached at iteration ");
    assert_true(exists("%s/tl/shapes_final.weights", g_dir));
    char png[512];
    snprintf(png, sizeof png, "%s/tl/mychart.png", g_dir);
    assert_true(is_png(png));
    /* -benchmark_layers: one row per layer (20 in shapes.cfg), then the total. */
    assert_has(out, "-benchmark_layers: median of 3 passes");
    assert_has(out, "   19  yolo");
    assert_has(out, "total");
    /* -letter_box: the project's batch builder with letter_box=1. */
    assert_has(out, "letter_box=1");
    free(out);
    /* -chart over a file that is not a PNG: refused, the file kept. */
    assert_int_equal(tu_run("printf 'my notes' > %s/notes.png", g_dir), 0);
    rc = run_bin(&out, "detector train %s/tl.data %s/shapes.cfg -max_batches 1 -chart %s/notes.png",
                 g_dir, g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "notes.png");
    free(out);
    snprintf(png, sizeof png, "%s/notes.png", g_dir);
    char *kept = tu_slurp(png);
    assert_string_equal(kept, "my notes");
    free(kept);
}

/* ---- detector test, valid, recall ------------------------------------------- */

/* The lines of detector test's output that print a box (class, percent, the
 * coordinates), in order, as one string (caller frees). */
static char *box_lines(const char *out)
{
    char *res = calloc(strlen(out) + 1, 1);
    assert_non_null(res);
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
        if (memmem(p, n, "% (", 3) || memmem(p, n, "(left_x: ", 9))
            strncat(res, p, n);
        p += n;
    }
    return res;
}

static void test_test_valid_recall(void **state)
{
    (void)state;
    char *out;
    const char *w = "backup/shapes_best.weights";
    char img[512];
    snprintf(img, sizeof img, "%s/shapes/images/valid/000001.png", g_dir);
    /* -thresh 0: every box left after NMS prints (a logistic objectness is
     * never 0), whatever the short training learnt. */
    int rc = run_bin(&out, "detector test %s/shapes.data %s/shapes.cfg %s/%s %s -thresh 0 "
                     "-ext_output -save_labels -dont_show -show_imgs -out %s/pred", g_dir, g_dir,
                     g_dir, w, img, g_dir);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_int_equal(count_of(out, "this build never opens a window"), 1);
    int boxes = count_of(out, "% (x=");
    assert_true(boxes > 0);
    assert_int_equal(count_of(out, "(left_x: "), boxes);
    char saved[512];
    snprintf(saved, sizeof saved, "%s/shapes/images/valid/000001.txt", g_dir);
    char *labels = tu_slurp(saved);
    assert_non_null(labels);
    assert_int_equal(count_of(labels, "\n"), boxes);
    int cls;
    float x, y, bw, bh;
    assert_int_equal(sscanf(labels, "%d %f %f %f %f", &cls, &x, &y, &bw, &bh), 5);
    assert_true(cls >= 0 && cls < 4 && bw > 0 && bh > 0);
    free(labels);
    /* On a square image of the network's size letterboxing and stretching
     * feed the same pixels: -letter_box gives the same boxes. */
    char *plain = box_lines(out);
    free(out);
    rc = run_bin(&out, "detector test %s/shapes.data %s/shapes.cfg %s/%s %s -thresh 0 "
                 "-ext_output -letter_box -out %s/pred_lb", g_dir, g_dir, g_dir, w, img, g_dir);
    assert_int_equal(rc, 0);
    assert_int_equal(count_of(out, "% (x="), boxes);
    char *lb = box_lines(out);
    assert_string_equal(lb, plain);
    free(lb);
    free(plain);
    free(out);
    /* A second -save_labels never replaces that file. */
    rc = run_bin(&out, "detector test %s/shapes.data %s/shapes.cfg %s/%s %s -save_labels -out "
                 "%s/pred", g_dir, g_dir, g_dir, w, img, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "000001.txt exists: it is not replaced");
    free(out);

    /* valid: one file per class in results=, Darknet's VOC lines. */
    rc = run_bin(&out, "detector valid %s/shapes.data %s/shapes.cfg %s/%s", g_dir, g_dir, g_dir, w);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    static const char *const names[] = {"circle", "square", "triangle", "cross"};
    int lines = 0;
    for (int c = 0; c < 4; ++c) {
        char path[512];
        snprintf(path, sizeof path, "%s/results/comp4_det_test_%s.txt", g_dir, names[c]);
        char *t = tu_slurp(path);
        assert_non_null(t);
        for (char *p = t; *p;) {
            char id[64];
            double pr, x0, y0, x1, y1;
            assert_int_equal(sscanf(p, "%63s %lf %lf %lf %lf %lf", id, &pr, &x0, &y0, &x1, &y1), 6);
            assert_true(strlen(id) == 6 && pr >= 0.001 && pr <= 1); /* printed to 6 decimals */
            /* Darknet's clamp: corners at least 1 and at most the image's
             * size (a box past the border may have xmin > xmax, as Darknet's). */
            assert_true(x0 >= 1 && y0 >= 1 && x1 <= 64 && y1 <= 64);
            ++lines;
            p = strchr(p, '\n');
            if (!p) break;
            ++p;
        }
        free(t);
    }
    char summary[96];
    /* The fork's defaults: probability above 0.001 after NMS 0.6. */
    snprintf(summary, sizeof summary, "detector valid: 4 images, %d boxes above 0.001", lines);
    assert_has(out, summary);
    free(out);

    /* recall: the truths counted are the valid labels' lines. */
    /* -thresh 0: every box is a proposal (a logistic objectness is never 0),
     * whatever the short training learnt, so NMS has neighbours to remove. */
    rc = run_bin(&out, "detector recall %s/shapes.data %s/shapes.cfg %s/%s -thresh 0", g_dir, g_dir,
                 g_dir, w);
    assert_int_equal(rc, 0);
    assert_int_equal(tu_run("cat %s/shapes/labels/valid/*.txt | grep -c . > %s/ntruth", g_dir,
                            g_dir), 0);
    char np[512];
    snprintf(np, sizeof np, "%s/ntruth", g_dir);
    char *nt = tu_slurp(np);
    int truths = atoi(nt);
    free(nt);
    const char *line = strstr(out, "recall: ");
    assert_non_null(line);
    int found = -1, total = -1;
    assert_int_equal(sscanf(line, "recall: %d of %d truths", &found, &total), 2);
    assert_int_equal(total, truths);
    assert_true(found >= 0 && found <= total);
    assert_int_equal(count_of(out, "RPs/Img: "), 4);
    /* The first image's proposals are Darknet's and the fork's: boxes with
     * objectness > T (0 here) left by do_nms_obj at 0.4 (ranked by objectness; a
     * box overlapping a better one by more than 0.4 loses its objectness).
     * The per-class NMS of map and valid leaves objectness alone: more. */
    char cfgp[512], wp[512];
    snprintf(cfgp, sizeof cfgp, "%s/shapes.cfg", g_dir);
    snprintf(wp, sizeof wp, "%s/%s", g_dir, w);
    network *net = parse_network_cfg(cfgp);
    assert_non_null(net);
    load_weights(net, wp);
    set_batch_network(net, 1);
    image im = load_image_color(img, 0, 0);
    image sized = resize_image(im, net->w, net->h);
    network_predict(net, sized.data);
    int nb = 0;
    detection *d = get_network_boxes(net, net->w, net->h, 0, .5f, 0, 1, &nb);
    int before = 0, after = 0;
    for (int b = 0; b < nb; ++b) before += d[b].objectness > 0;
    do_nms_obj(d, nb, 4, .4f);
    for (int b = 0; b < nb; ++b) after += d[b].objectness > 0;
    free_detections(d, nb);
    free_image(sized);
    free_image(im);
    sdnn_network_free(net);
    assert_true(after < before);   /* the set tells the two NMS kinds apart */
    char first[64];
    snprintf(first, sizeof first, "\tRPs/Img: %d.00\t", after);
    const char *l0 = strstr(out, "RPs/Img: ");
    assert_non_null(l0);
    if (strncmp(l0 - 1, first, strlen(first)) != 0) printf("want %s in:\n%s\n", first, out);
    assert_int_equal(strncmp(l0 - 1, first, strlen(first)), 0);
    free(out);
}

/* ---- -letter_box on map, test and valid ------------------------------------------- */

/* sdnn_detector_input/boxes against the geometry worked by hand: a 128x64
 * image letterboxed into the 64x64 input fills rows 16..47 at scale 1/2 (the
 * rest grey 0.5), so a box the network finds at (x, y, w, h) relative to its
 * input is (x, (y - 0.25) * 2, w, h * 2) relative to the image; stretched
 * (the fork's default) the input is resize_image's and the boxes stay
 * relative to it, so to the image.  Random weights, every box (thresh 0):
 * float rounding of the mapping only, 1e-5. */
static void test_letter_box_geometry(void **state)
{
    (void)state;
    network *net = parse_network_cfg("cfg/shapes.cfg");
    assert_non_null(net);
    set_batch_network(net, 1);
    /* Darknet starts the running variances at 0: inference would divide by
     * sqrt(1e-6) layer after layer into inf and NaN boxes.  1 keeps the
     * random net's outputs finite. */
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].batch_normalize)
            for (int k = 0; k < net->layers[i].out_c; ++k)
                net->layers[i].rolling_variance[k] = 1;
    image im = make_image(128, 64, 3);
    for (int i = 0; i < im.w * im.h * im.c; ++i)
        im.data[i] = (float)((i * 37) % 101) / 100.0f;

    image L = sdnn_detector_input(net, im, 1);
    image S = sdnn_detector_input(net, im, 0);
    image R = resize_image(im, 64, 64);
    assert_int_equal(L.w, 64);
    assert_int_equal(L.h, 64);
    assert_int_equal(S.w, 64);
    assert_int_equal(S.h, 64);
    int bars = 0, differ = 0;
    for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 64; ++y)
            for (int x = 0; x < 64; ++x) {
                int k = c * 64 * 64 + y * 64 + x;
                assert_true(S.data[k] == R.data[k]);
                if (y < 16 || y >= 48) {
                    assert_true(L.data[k] == 0.5f);
                    ++bars;
                }
                differ += L.data[k] != S.data[k];
            }
    assert_int_equal(bars, 3 * 64 * 32);
    assert_true(differ > 3 * 64 * 32);

    network_predict(net, L.data);
    int nraw = 0, nmap = 0;
    detection *raw = get_network_boxes(net, 64, 64, 0, .5f, 0, 1, &nraw);
    detection *map = sdnn_detector_boxes(net, im, 1, 0, .5f, &nmap);
    assert_int_equal(nraw, nmap);
    assert_true(nraw > 0);
    for (int i = 0; i < nraw; ++i) {
        box r = raw[i].bbox, m = map[i].bbox;
        assert_true(isfinite(r.x) && isfinite(r.y) && isfinite(r.w) && isfinite(r.h));
        assert_true(fabsf(m.x - r.x) < 1e-5f);
        assert_true(fabsf(m.w - r.w) < 1e-5f);
        assert_true(fabsf(m.y - (r.y - 0.25f) * 2) < 1e-5f);
        assert_true(fabsf(m.h - r.h * 2) < 1e-5f);
    }
    network_predict(net, S.data);
    int nst = 0, nsraw = 0;
    detection *st = sdnn_detector_boxes(net, im, 0, 0, .5f, &nst);
    detection *sraw = get_network_boxes(net, 64, 64, 0, .5f, 0, 1, &nsraw);
    assert_int_equal(nst, nmap);
    assert_int_equal(nsraw, nst);
    for (int i = 0; i < nst; ++i) {   /* stretched: the network's boxes as they are */
        box r = sraw[i].bbox, m = st[i].bbox;
        assert_true(fabsf(m.x - r.x) < 1e-5f && fabsf(m.y - r.y) < 1e-5f);
        assert_true(fabsf(m.w - r.w) < 1e-5f && fabsf(m.h - r.h) < 1e-5f);
    }
    free_detections(sraw, nsraw);
    int moved = 0;
    for (int i = 0; i < nst; ++i)
        moved += fabsf(st[i].bbox.y - map[i].bbox.y) > 1e-3f;
    assert_true(moved > 0);   /* the flag changes what the network sees */
    free_detections(raw, nraw);
    free_detections(map, nmap);
    free_detections(st, nst);
    free_image(L);
    free_image(S);
    free_image(R);
    free_image(im);
    sdnn_network_free(net);
}

/* ---- training's -map: letterboxed as the cfg / -letter_box say ------------------- */

/* "all-point A, 11-point B, 101-point C over N (TP t, FP f, FN n)" after
 * `after` in out (training's "mAP@0.50 at iteration I: " or detector map's
 * "mAP@0.50: "), with the counts at 0.25, into buf; 0 when absent. */
static int map_numbers(const char *out, const char *after, char *buf, size_t len)
{
    const char *p = strstr(out, after);
    if (!p) return 0;
    p = strstr(p, "all-point ");
    const char *e = p ? strstr(p, " images") : NULL;
    if (!e || (size_t)(e - p) >= len) return 0;
    memcpy(buf, p, (size_t)(e - p));
    buf[e - p] = '\0';
    /* and the counts at 0.25, "(TP t, FP f, FN n)" (one evaluation each) */
    const char *c = strstr(out, "(TP ");
    const char *ce = c ? strchr(c, ')') : NULL;
    size_t have = strlen(buf);
    if (!ce || have + (size_t)(ce - c) + 3 > len) return 0;
    buf[have++] = ' ';
    memcpy(buf + have, c, (size_t)(ce - c) + 1);
    buf[have + (size_t)(ce - c) + 1] = '\0';
    return 1;
}

/* The 4 validation images side by side with themselves (128x64, the boxes
 * halved in x on each side): letterboxing and stretching feed the network
 * other pixels, so the mAP of one weights file differs between the two and
 * training's -map must give the one the cfg and flags ask for: stretched
 * by default, letterboxed with -letter_box or [net] letter_box=1 (the fork
 * hands its net's letter_box to the mAP of a training run). */
static void test_train_map_letter_box(void **state)
{
    (void)state;
    assert_int_equal(tu_run("mkdir -p %s/wide/images %s/wide/labels %s/wb", g_dir, g_dir, g_dir), 0);
    char list[2048] = "";
    for (int i = 1; i <= 4; ++i) {
        char src[512], dst[512], lsrc[512], ldst[512];
        snprintf(src, sizeof src, "%s/shapes/images/valid/%06d.png", g_dir, i);
        snprintf(dst, sizeof dst, "%s/wide/images/w%d", g_dir, i);
        image im = load_image_color(src, 0, 0);
        image w2 = make_image(2 * im.w, im.h, im.c);
        for (int c = 0; c < im.c; ++c)
            for (int y = 0; y < im.h; ++y)
                for (int x = 0; x < 2 * im.w; ++x)
                    w2.data[(c * im.h + y) * 2 * im.w + x] = im.data[(c * im.h + y) * im.w + x % im.w];
        save_image_options(w2, dst, PNG, 0);
        free_image(im);
        free_image(w2);
        snprintf(lsrc, sizeof lsrc, "%s/shapes/labels/valid/%06d.txt", g_dir, i);
        snprintf(ldst, sizeof ldst, "%s/wide/labels/w%d.txt", g_dir, i);
        assert_int_equal(tu_run("awk 'NF == 5 { printf \"%%d %%f %%f %%f %%f\\n%%d %%f %%f %%f "
                                "%%f\\n\", $1, $2 / 2, $3, $4 / 2, $5, $1, $2 / 2 + 0.5, $3, $4 / 2, "
                                "$5 }' %s > %s", lsrc, ldst), 0);
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s.png\\n", dst);
    }
    assert_int_equal(tu_run("printf '%s' > %s/wide/valid.txt && printf 'classes=4\\ntrain=%s/shapes/"
                            "train.txt\\nvalid=%s/wide/valid.txt\\nnames=%s/shapes/shapes.names\\n"
                            "backup=%s/wb\\n' > %s/wide.data && "
                            "sed 's/^\\[net\\]/[net]\\nletter_box=1/' %s/shapes.cfg > %s/shapes-lb.cfg",
                            list, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir),
                     0);
    /* The README test's weights with every head's objectness bias raised to
     * 5 (objectness ~0.99): boxes everywhere above the map's 0.005 whatever
     * the short training learnt (on another machine's BLAS kernels it may
     * find nothing on this set), so the two inputs give other mAPs. */
    char cfgp[512], wp[512];
    snprintf(cfgp, sizeof cfgp, "%s/shapes.cfg", g_dir);
    snprintf(wp, sizeof wp, "%s/backup/shapes_final.weights", g_dir);
    network *net = parse_network_cfg(cfgp);
    assert_non_null(net);
    load_weights(net, wp);
    int heads = 0;
    for (int i = 1; i < net->n; ++i) {
        layer *y = &net->layers[i], *c = &net->layers[i - 1];
        if (y->type != YOLO) continue;
        assert_int_equal(c->type, CONVOLUTIONAL);
        for (int a = 0; a < y->n; ++a) c->biases[a * (5 + y->classes) + 4] = 5;
        ++heads;
    }
    assert_true(heads > 0);
    snprintf(wp, sizeof wp, "%s/forced.weights", g_dir);
    assert_int_equal(sdnn_save_weights_atomic(net, wp), SDNN_OK);
    sdnn_network_free(net);
    static const struct {
        const char *cfg, *flag;
        int lb;
    } runs[] = {{"shapes", "", 0}, {"shapes", "-letter_box", 1}, {"shapes-lb", "", 1}};
    for (int r = 0; r < 3; ++r) {
        char *out;
        /* One step on from those weights (burn-in: a tiny rate), evaluated at
         * iteration 1 and saved as _best there. */
        int rc = run_bin(&out, "detector train %s/wide.data %s/%s.cfg %s/forced.weights "
                         "-clear -max_batches 1 -map -map_every 1 -seed 3 %s", g_dir, g_dir,
                         runs[r].cfg, g_dir, runs[r].flag);
        if (rc) printf("%s\n", out);
        assert_int_equal(rc, 0);
        assert_has(out, runs[r].lb ? "-map evaluates letterboxed images"
                                   : "-map evaluates stretched images");
        char trained[256], lb[256], st[256];
        assert_true(map_numbers(out, "mAP@0.50 at iteration 1: ", trained, sizeof trained));
        free(out);
        rc = run_bin(&out, "detector map %s/wide.data %s/%s.cfg %s/wb/%s_best.weights -letter_box",
                     g_dir, g_dir, runs[r].cfg, g_dir, runs[r].cfg);
        assert_int_equal(rc, 0);
        assert_true(map_numbers(out, "mAP@0.50: ", lb, sizeof lb));
        free(out);
        rc = run_bin(&out, "detector map %s/wide.data %s/%s.cfg %s/wb/%s_best.weights", g_dir, g_dir,
                     runs[r].cfg, g_dir, runs[r].cfg);
        assert_int_equal(rc, 0);
        assert_true(map_numbers(out, "mAP@0.50: ", st, sizeof st));
        free(out);
        if (strcmp(lb, st) == 0) printf("letterboxed and stretched alike: %s\n", lb);
        assert_string_not_equal(lb, st);   /* the set tells the two apart */
        assert_string_equal(trained, runs[r].lb ? lb : st);
    }
}

/* ---- 28.7: NaN / inf weights stop map and test ---------------------------------- */

static void test_nonfinite_weights(void **state)
{
    (void)state;
    char path[512];
    network *net = parse_network_cfg("cfg/shapes.cfg");
    assert_non_null(net);
    net->layers[0].weights[3] = NAN;
    snprintf(path, sizeof path, "%s/nan.weights", g_dir);
    assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
    net->layers[0].weights[3] = 0.1f;
    net->layers[17].biases[2] = INFINITY;
    snprintf(path, sizeof path, "%s/inf.weights", g_dir);
    assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
    sdnn_network_free(net);
    char *out;
    int rc = run_bin(&out, "detector map %s/shapes.data cfg/shapes.cfg %s/nan.weights", g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "nan.weights: layer 0 (convolutional) weights[3] is nan");
    assert_true(strstr(out, "mAP@") == NULL);
    free(out);
    rc = run_bin(&out, "detector test %s/shapes.data cfg/shapes.cfg %s/inf.weights "
                 "%s/shapes/images/valid/000002.png -out %s/p2", g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "inf.weights: layer 17 (convolutional) biases[2] is inf");
    free(out);
    rc = run_bin(&out, "detector map %s/shapes.data cfg/shapes.cfg %s/inf.weights -points 101",
                 g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "layer 17 (convolutional) biases[2]");
    free(out);
}

/* ---- calc_anchors against a hand-worked k-means -------------------------------- */

static void test_calc_anchors_reference(void **state)
{
    (void)state;
    /* Boxes in 100 x 100 pixels: 10x10, 13x13 (one image), 50x40, 50x60
     * (the other).  Start (area quantiles 1/4, 3/4 of 4 boxes: indices 1
     * and 3): 13x13 and 50x60.  10x10 and 13x13 go to the first (IoU
     * 100/169 vs 100/3000), 50x40 to the second (2000/3000 vs 169/2000):
     * means 11.5x11.5 and 50x50, and no box moves again.  Mean IoU =
     * (100/132.25 + 132.25/169 + 2000/2500 + 2500/3000) / 4.  The anchors
     * line rounds to the nearest whole pixel: the mean is 11.4999998 (0.1
     * and 0.13 as floats), so 11 (test_evalflags has a case where rounding
     * and cutting down differ). */
    assert_int_equal(tu_run("mkdir -p %s/ka/images %s/ka/labels && "
                            "cp %s/shapes/images/valid/000001.png %s/ka/images/a.png && "
                            "cp %s/shapes/images/valid/000002.png %s/ka/images/b.png && "
                            "printf '0 0.5 0.5 0.1 0.1\\n1 0.5 0.5 0.13 0.13\\n' > %s/ka/labels/a.txt && "
                            "printf '2 0.5 0.5 0.5 0.4\\n\\n0 0.3 0.6 0.5 0.6\\n' > %s/ka/labels/b.txt && "
                            "printf '%s/ka/images/a.png\\n%s/ka/images/b.png\\n' > %s/ka/train.txt && "
                            "printf 'classes=4\\ntrain=%s/ka/train.txt\\n' > %s/ka.data",
                            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir,
                            g_dir, g_dir, g_dir),
                     0);
    char *out;
    int rc = run_bin(&out, "detector calc_anchors %s/ka.data -num_of_clusters 2 -width 100 "
                     "-height 100", g_dir);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "anchors = 11,11, 50,50\n");
    assert_has(out, "anchors (unrounded) = 11.5000,11.5000, 50.0000,50.0000\n");
    const char *line = strstr(out, "mean IoU = ");
    assert_non_null(line);
    double iou = -1;
    assert_int_equal(sscanf(line, "mean IoU = %lf", &iou), 1);
    double want = (100.0 / 132.25 + 132.25 / 169 + 2000.0 / 2500 + 2500.0 / 3000) / 4;
    /* Printed to 6 decimals (5e-7), box sizes from floats (relative 1e-7). */
    assert_true(fabs(iou - want) < 2e-6);
    free(out);
    /* At -width 32 and below the fork prints 4 decimals: 11.5 x 32/100. */
    rc = run_bin(&out, "detector calc_anchors %s/ka.data -num_of_clusters 2 -width 32 -height 32",
                 g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "anchors = 3.6800,3.6800, 16.0000,16.0000\n");
    free(out);
    /* More clusters than boxes: named. */
    rc = run_bin(&out, "detector calc_anchors %s/ka.data -num_of_clusters 5 -width 100 -height 100",
                 g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "4 label boxes for -num_of_clusters 5");
    free(out);
    /* A bad label line is named with its file and line. */
    assert_int_equal(tu_run("printf '0 0.5 0.5 0 0.1\\n' > %s/ka/labels/a.txt", g_dir), 0);
    rc = run_bin(&out, "detector calc_anchors %s/ka.data -num_of_clusters 2 -width 100 -height 100",
                 g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "ka/labels/a.txt:1: ");
    free(out);
}

/* ---- -points 101 arithmetic by hand --------------------------------------------- */

static void test_points_by_hand(void **state)
{
    (void)state;
    /* T F T F with 2 truths: precision envelope 1, 2/3, 2/3, 1/2; recall
     * 1/2 at rank 1, 1 at rank 3.  all-point: (1 + 2/3) / 2.  11-point: r
     * = 0..0.5 (6 points) at 1, 0.6..1 (5) at 2/3.  101-point: r = 0..0.50
     * (51 points) at 1, 0.51..1 (50) at 2/3. */
    unsigned char tp[] = {1, 0, 1, 0};
    double all, p11, p101;
    assert_int_equal(sdnn_ap_ranked3(tp, 4, 2, &all, &p11, &p101), SDNN_OK);
    assert_true(fabs(all - (1 + 2.0 / 3) / 2) < 1e-12);
    assert_true(fabs(p11 - (6 + 5 * 2.0 / 3) / 11) < 1e-12);
    assert_true(fabs(p101 - (51 + 50 * 2.0 / 3) / 101) < 1e-12);
    /* One truth of 3 found at rank 2 (F T): recall 1/3 reached only at
     * rank 2 with precision 1/2: 101-point: r = 0..0.33 (34 points) at 1/2. */
    unsigned char tp2[] = {0, 1};
    assert_int_equal(sdnn_ap_ranked3(tp2, 2, 3, &all, &p11, &p101), SDNN_OK);
    assert_true(fabs(p101 - 34 * 0.5 / 101) < 1e-12);
    assert_true(fabs(p11 - 4 * 0.5 / 11) < 1e-12);
    assert_true(fabs(all - 0.5 / 3) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_points_by_hand),
        cmocka_unit_test(test_readme_commands),
        cmocka_unit_test(test_bad_usage),
        cmocka_unit_test(test_train_flags),
        cmocka_unit_test(test_test_valid_recall),
        cmocka_unit_test(test_nonfinite_weights),
        cmocka_unit_test(test_letter_box_geometry),
        cmocka_unit_test(test_train_map_letter_box),
        cmocka_unit_test(test_calc_anchors_reference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
