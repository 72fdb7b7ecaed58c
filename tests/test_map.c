/*
 * Tests of the evaluation: the AP arithmetic of plugin/evalmap.c on
 * hand-made cases whose values are worked out in the comments, the path
 * conventions, sdnn_detector_map_eval on a loaded network, and the two
 * commands through the ./darknet binary (SDNN_DARKNET_BIN) on a tiny
 * generated set with random-init weights: the summary line, and bad input
 * ending with a non-zero exit and a message naming the file.
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
#include <sys/wait.h>
#include <unistd.h>

#include "evalmap.h"
#include "evaluate.h"
#include "replicas.h"
#include "saveio.h"

#define EPS 1e-9

/* A box by its centre and size. */
static sdnn_rect R(float x, float y, float w, float h)
{
    return (sdnn_rect){x, y, w, h};
}

static sdnn_map *new_map(int classes, float iou)
{
    sdnn_map *m = NULL;
    assert_int_equal(sdnn_map_create(classes, iou, &m), SDNN_OK);
    assert_non_null(m);
    return m;
}

/* ---- IoU ------------------------------------------------------------------ */

static void test_iou(void **state)
{
    (void)state;
    assert_true(fabs(sdnn_rect_iou(R(1, 1, 2, 2), R(1, 1, 2, 2)) - 1) < EPS);
    /* [0,4]x[0,1] and [0,2]x[0,1]: 2 / 4. */
    assert_true(sdnn_rect_iou(R(2, .5f, 4, 1), R(1, .5f, 2, 1)) == 0.5);
    /* [0,2] and [1,3] (height 1): 1 / 3. */
    assert_true(fabs(sdnn_rect_iou(R(1, .5f, 2, 1), R(2, .5f, 2, 1)) - 1.0 / 3) < EPS);
    /* Touching edges and disjoint boxes: 0; an empty box: 0. */
    assert_true(sdnn_rect_iou(R(1, .5f, 2, 1), R(3, .5f, 2, 1)) == 0);
    assert_true(sdnn_rect_iou(R(1, .5f, 2, 1), R(9, 9, 2, 1)) == 0);
    assert_true(sdnn_rect_iou(R(1, .5f, 0, 1), R(1, .5f, 0, 1)) == 0);
}

/* ---- sdnn_ap_ranked: both interpolations by hand ---------------------------- */

static void expect_ranked(const char *tp_str, int npos, double all, double eleven)
{
    unsigned char tp[32];
    int n = (int)strlen(tp_str);
    for (int i = 0; i < n; ++i) tp[i] = tp_str[i] == 'T';
    double a = -1, e = -1;
    assert_int_equal(sdnn_ap_ranked(tp, n, npos, &a, &e), SDNN_OK);
    if (fabs(a - all) > EPS || fabs(e - eleven) > EPS)
        printf("%s / %d: all-point %.9f (want %.9f), 11-point %.9f (want %.9f)\n", tp_str, npos, a,
               all, e, eleven);
    assert_true(fabs(a - all) < EPS);
    assert_true(fabs(e - eleven) < EPS);
}

static void test_ap_ranked(void **state)
{
    (void)state;
    /* Every truth found before any mistake: precision 1 at every recall. */
    expect_ranked("TTT", 3, 1, 1);
    expect_ranked("TTTFF", 3, 1, 1);
    /* Nothing detected, or nothing right: 0. */
    expect_ranked("", 3, 0, 0);
    expect_ranked("FFF", 3, 0, 0);
    /* 2 truths, ranks T F T: precision 1, 1/2, 2/3 at recall 1/2, 1/2, 1.
     * Envelope 1, 2/3, 2/3.  All-point: 1/2 * 1 + 1/2 * 2/3 = 5/6.
     * 11-point: r = 0..0.5 (6 points) max precision 1; r = 0.6..1 (5
     * points) 2/3; (6 + 10/3) / 11 = 28/33. */
    expect_ranked("TFT", 2, 5.0 / 6, 28.0 / 33);
    /* 1 truth found second: precision 1/2 at recall 1, 1/2 everywhere. */
    expect_ranked("FT", 1, 0.5, 0.5);
    /* 3 truths, T F F T T: precision 1, 1/2, 1/3, 1/2, 3/5 at recall
     * 1/3, 1/3, 1/3, 2/3, 1.  The envelope lifts rank 3 from 1/2 to 3/5:
     * all-point 1/3 * (1 + 3/5 + 3/5) = 11/15.  11-point: r = 0..0.3
     * (recall 1/3 reaches them) 1 each, r = 0.4..1.0 (7 points) 3/5:
     * (4 + 21/5) / 11 = 41/55. */
    expect_ranked("TFFTT", 3, 11.0 / 15, 41.0 / 55);
    /* Recall never reaches 1: 1 of 2 truths found first.  All-point 1/2;
     * 11-point r = 0..0.5 give 1, the rest 0: 6/11. */
    expect_ranked("TF", 2, 0.5, 6.0 / 11);
    /* No truths: 0 (left out of the mean by the caller). */
    expect_ranked("FF", 0, 0, 0);
    /* More hits than truths is a caller's bug. */
    unsigned char tp[2] = {1, 1};
    double a, e;
    assert_int_equal(sdnn_ap_ranked(tp, 2, 1, &a, &e), SDNN_ERR_INVALID);
}

/* ---- the accumulator ------------------------------------------------------- */

static void test_perfect(void **state)
{
    (void)state;
    sdnn_map *m = new_map(2, .5f);
    sdnn_map_truth t1[] = {{0, R(.2f, .2f, .1f, .1f)}, {1, R(.7f, .7f, .2f, .2f)}};
    sdnn_map_det d1[] = {{1, .8f, R(.7f, .7f, .2f, .2f)}, {0, .9f, R(.2f, .2f, .1f, .1f)}};
    sdnn_map_truth t2[] = {{0, R(.5f, .5f, .3f, .3f)}};
    sdnn_map_det d2[] = {{0, .6f, R(.51f, .5f, .3f, .3f)}};
    assert_int_equal(sdnn_map_add_image(m, t1, 2, d1, 2), SDNN_OK);
    assert_int_equal(sdnn_map_add_image(m, t2, 1, d2, 1), SDNN_OK);
    sdnn_ap ap[2];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(r.images, 2);
    assert_int_equal(r.classes_scored, 2);
    assert_int_equal(ap[0].truths, 2);
    assert_int_equal(ap[0].dets, 2);
    assert_int_equal(ap[0].tp, 2);
    assert_true(fabs(r.map_all - 1) < EPS && fabs(r.map11 - 1) < EPS);
    sdnn_map_destroy(m);
}

static void test_no_detections(void **state)
{
    (void)state;
    sdnn_map *m = new_map(1, .5f);
    sdnn_map_truth t[] = {{0, R(.5f, .5f, .2f, .2f)}, {0, R(.2f, .2f, .2f, .2f)}};
    assert_int_equal(sdnn_map_add_image(m, t, 2, NULL, 0), SDNN_OK);
    sdnn_ap ap[1];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(r.classes_scored, 1);
    assert_int_equal(ap[0].truths, 2);
    assert_int_equal(ap[0].dets, 0);
    assert_true(r.map_all == 0 && r.map11 == 0);
    sdnn_map_destroy(m);
}

/* 2 truths in two images; ranked T (0.9), F (0.8, wrong place), T (0.7):
 * the T F T case above, 5/6 and 28/33. */
static void test_half_right(void **state)
{
    (void)state;
    sdnn_map *m = new_map(1, .5f);
    sdnn_map_truth a[] = {{0, R(.3f, .3f, .2f, .2f)}};
    sdnn_map_det da[] = {{0, .9f, R(.3f, .3f, .2f, .2f)}, {0, .8f, R(.8f, .8f, .1f, .1f)}};
    sdnn_map_truth b[] = {{0, R(.5f, .5f, .4f, .4f)}};
    sdnn_map_det db[] = {{0, .7f, R(.5f, .52f, .4f, .4f)}};
    assert_int_equal(sdnn_map_add_image(m, a, 1, da, 2), SDNN_OK);
    assert_int_equal(sdnn_map_add_image(m, b, 1, db, 1), SDNN_OK);
    sdnn_ap ap[1];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(ap[0].tp, 2);
    assert_int_equal(ap[0].dets, 3);
    assert_true(fabs(ap[0].ap_all - 5.0 / 6) < EPS);
    assert_true(fabs(ap[0].ap11 - 28.0 / 33) < EPS);
    assert_true(fabs(r.map_all - 5.0 / 6) < EPS);
    sdnn_map_destroy(m);
}

/* Two truths far apart; truth A detected twice (0.9, 0.8), truth B once
 * (0.7).  The second detection of A is a false positive: T F T, 5/6 and
 * 28/33, one detection unmatched. */
static void test_duplicates(void **state)
{
    (void)state;
    sdnn_map *m = new_map(1, .5f);
    sdnn_map_truth t[] = {{0, R(.2f, .2f, .2f, .2f)}, {0, R(.8f, .8f, .2f, .2f)}};
    sdnn_map_det d[] = {{0, .8f, R(.2f, .21f, .2f, .2f)},
                        {0, .9f, R(.2f, .2f, .2f, .2f)},
                        {0, .7f, R(.8f, .8f, .2f, .2f)}};
    assert_int_equal(sdnn_map_add_image(m, t, 2, d, 3), SDNN_OK);
    sdnn_ap ap[1];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(ap[0].tp, 2);
    assert_true(fabs(ap[0].ap_all - 5.0 / 6) < EPS);
    assert_true(fabs(ap[0].ap11 - 28.0 / 33) < EPS);
    sdnn_map_destroy(m);

    /* A detection is matched to the best truth not yet taken: truths
     * [0,4]x[0,1] and [1,5]x[0,1] overlap (IoU 3/5).  The first detection
     * is exactly the first truth; the second, the same box, has IoU 3/5
     * >= 0.5 with the second truth, still free: both true positives. */
    m = new_map(1, .5f);
    sdnn_map_truth o[] = {{0, R(2, .5f, 4, 1)}, {0, R(3, .5f, 4, 1)}};
    sdnn_map_det od[] = {{0, .9f, R(2, .5f, 4, 1)}, {0, .8f, R(2, .5f, 4, 1)}};
    assert_int_equal(sdnn_map_add_image(m, o, 2, od, 2), SDNN_OK);
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(ap[0].tp, 2);
    assert_true(fabs(ap[0].ap_all - 1) < EPS);
    sdnn_map_destroy(m);
}

/* Class 0 perfect (1, 1), class 1 the T F T case (5/6, 28/33), class 2 has
 * a detection but no truth: reported, left out.  mAP all-point
 * (1 + 5/6) / 2 = 11/12, 11-point (1 + 28/33) / 2 = 61/66.  A detection of
 * class 0 never matches a truth of class 1. */
static void test_classes_mean(void **state)
{
    (void)state;
    sdnn_map *m = new_map(3, .5f);
    sdnn_map_truth t[] = {{0, R(.2f, .2f, .2f, .2f)},
                          {1, R(.5f, .5f, .2f, .2f)},
                          {1, R(.8f, .8f, .2f, .2f)}};
    sdnn_map_det d[] = {{0, .95f, R(.2f, .2f, .2f, .2f)},
                        {1, .9f, R(.5f, .5f, .2f, .2f)},
                        {0, .85f, R(.8f, .8f, .2f, .2f)}, /* class 0 on a class-1 box: FP */
                        {1, .8f, R(.1f, .9f, .1f, .1f)},
                        {2, .75f, R(.5f, .5f, .2f, .2f)},
                        {1, .7f, R(.8f, .8f, .2f, .2f)}};
    assert_int_equal(sdnn_map_add_image(m, t, 3, d, 6), SDNN_OK);
    sdnn_ap ap[3];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(r.classes_scored, 2);
    /* class 0: T F with 1 truth: recall 1 at precision 1. */
    assert_int_equal(ap[0].dets, 2);
    assert_true(fabs(ap[0].ap_all - 1) < EPS && fabs(ap[0].ap11 - 1) < EPS);
    assert_true(fabs(ap[1].ap_all - 5.0 / 6) < EPS && fabs(ap[1].ap11 - 28.0 / 33) < EPS);
    assert_int_equal(ap[2].truths, 0);
    assert_int_equal(ap[2].dets, 1);
    assert_true(ap[2].ap_all == 0 && ap[2].ap11 == 0);
    assert_true(fabs(r.map_all - 11.0 / 12) < EPS);
    assert_true(fabs(r.map11 - 61.0 / 66) < EPS);
    sdnn_map_destroy(m);
}

/* Truth [0,4]x[0,1], detection [0,2]x[0,1]: IoU exactly 1/2.  A match at
 * -iou 0.5 (>=), not at 0.50001 or 0.75. */
static double boundary_ap(float iou)
{
    sdnn_map *m = new_map(1, iou);
    sdnn_map_truth t[] = {{0, R(2, .5f, 4, 1)}};
    sdnn_map_det d[] = {{0, .5f, R(1, .5f, 2, 1)}};
    assert_int_equal(sdnn_map_add_image(m, t, 1, d, 1), SDNN_OK);
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, NULL, &r), SDNN_OK);
    sdnn_map_destroy(m);
    return r.map_all;
}

static void test_iou_boundary(void **state)
{
    (void)state;
    assert_true(boundary_ap(.5f) == 1);
    assert_true(boundary_ap(.50001f) == 0);
    assert_true(boundary_ap(.75f) == 0);
    assert_true(boundary_ap(.25f) == 1);
}

/* Equal scores keep the order they were added in: a false positive in the
 * first image and a true positive in the second, both 0.5, rank F T
 * (AP 1/2); the other image order ranks T F (AP 1). */
static double tie_ap(int fp_first)
{
    sdnn_map *m = new_map(1, .5f);
    sdnn_map_truth t[] = {{0, R(.5f, .5f, .2f, .2f)}};
    sdnn_map_det hit[] = {{0, .5f, R(.5f, .5f, .2f, .2f)}};
    sdnn_map_det miss[] = {{0, .5f, R(.1f, .1f, .1f, .1f)}};
    for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (fp_first != 0))
            assert_int_equal(sdnn_map_add_image(m, NULL, 0, miss, 1), SDNN_OK);
        else
            assert_int_equal(sdnn_map_add_image(m, t, 1, hit, 1), SDNN_OK);
    }
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, NULL, &r), SDNN_OK);
    sdnn_map_destroy(m);
    return r.map_all;
}

static void test_ties_stable(void **state)
{
    (void)state;
    assert_true(fabs(tie_ap(1) - 0.5) < EPS);
    assert_true(fabs(tie_ap(0) - 1) < EPS);
}

static void test_bad_input(void **state)
{
    (void)state;
    sdnn_map *m = NULL;
    assert_int_equal(sdnn_map_create(0, .5f, &m), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_map_create(2, 0, &m), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_map_create(2, 1.5f, &m), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_map_create(2, NAN, &m), SDNN_ERR_INVALID);
    assert_null(m);
    m = new_map(2, .5f);
    sdnn_map_truth t[] = {{2, R(.5f, .5f, .2f, .2f)}};
    sdnn_map_truth ok[] = {{1, R(.5f, .5f, .2f, .2f)}};
    sdnn_map_det d[] = {{-1, .5f, R(.5f, .5f, .2f, .2f)}};
    sdnn_map_det nan[] = {{0, NAN, R(.5f, .5f, .2f, .2f)}};
    assert_int_equal(sdnn_map_add_image(m, t, 1, NULL, 0), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "class 2"));
    assert_int_equal(sdnn_map_add_image(m, ok, 1, d, 1), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_map_add_image(m, ok, 1, nan, 1), SDNN_ERR_INVALID);
    /* Nothing of the refused images was kept. */
    sdnn_ap ap[2];
    sdnn_map_result r;
    assert_int_equal(sdnn_map_compute(m, ap, &r), SDNN_OK);
    assert_int_equal(r.images, 0);
    assert_int_equal(ap[1].truths, 0);
    assert_int_equal(r.classes_scored, 0);
    sdnn_map_destroy(m);
}

/* ---- path conventions ------------------------------------------------------- */

static void test_paths(void **state)
{
    (void)state;
    char *fm[] = {"top", "trouser", "pullover", "dress", "coat",
                  "sandal", "shirt", "sneaker", "bag", "boot"};
    assert_int_equal(sdnn_label_of_path("data/fmnist/valid/00001_boot.png", fm, 10), 9);
    assert_int_equal(sdnn_label_of_path("data/fmnist/valid/00002_top.png", fm, 10), 0);
    assert_int_equal(sdnn_label_of_path("data/fmnist/valid/00003.png", fm, 10), -1);
    /* The occurrence ending last wins over a directory name... */
    assert_int_equal(sdnn_label_of_path("data/bag_set/x_coat.png", fm, 10), 4);
    /* ...and the longer name over its suffix. */
    char *sh[] = {"shirt", "t-shirt", ""};
    assert_int_equal(sdnn_label_of_path("a/1_t-shirt.png", sh, 3), 1);
    assert_int_equal(sdnn_label_of_path("a/1_shirt.png", sh, 3), 0);
    assert_int_equal(sdnn_label_of_path("a/1.png", sh, 3), -1);

    char out[64];
    assert_int_equal(sdnn_label_path("d/images/valid/000001.png", out, sizeof out), 0);
    assert_string_equal(out, "d/labels/valid/000001.txt");
    assert_int_equal(sdnn_label_path("VOC/JPEGImages/a.jpg", out, sizeof out), 0);
    assert_string_equal(out, "VOC/labels/a.txt");
    assert_int_equal(sdnn_label_path("d/images/a.JPEG", out, 12), -1);
}

/* ---- through the network and the binary -------------------------------------- */

static char g_dir[256];
static const char *g_bin;


/* Random-init weights of a cfg, as Darknet's parser makes them. */
static void random_weights(const char *cfg, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    network *net = parse_network_cfg((char *)cfg);
    assert_non_null(net);
    assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
    sdnn_network_free(net);
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-map-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 8 -valid 4 -seed 5 >%s/gen.log 2>&1", g_bin,
            g_dir, g_dir) != 0)
        return -1;
    return tu_run("printf 'classes=4\\nvalid=%s/shapes/valid.txt\\nnames=%s/shapes/shapes.names\\n' "
               "> %s/shapes.data && "
               /* A classifier set: shapes images named after Fashion-MNIST labels. */
               "mkdir -p %s/cls && printf 'top\\ntrouser\\npullover\\ndress\\ncoat\\nsandal\\n"
               "shirt\\nsneaker\\nbag\\nboot\\n' > %s/cls/names && "
               "for l in top bag boot coat; do cp %s/shapes/images/valid/000001.png "
               "%s/cls/1_$l.png && echo %s/cls/1_$l.png; done > %s/cls/valid.txt && "
               "printf 'classes=10\\nvalid=%s/cls/valid.txt\\nlabels=%s/cls/names\\ntop=2\\n' "
               "> %s/cls.data",
               g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

/* sdnn_detector_map_eval on a network held by the caller: it runs, gives a
 * number in [0, 1], puts the batch size back, and reports a missing label
 * file as an error naming it. */
static void test_map_eval_function(void **state)
{
    (void)state;
    network *net = parse_network_cfg("cfg/shapes.cfg");
    assert_non_null(net);
    int batch = net->batch;
    assert_int_equal(sdnn_detector_classes(net), 4);
    char *paths[4];
    char buf[4][512];
    for (int i = 0; i < 4; ++i) {
        snprintf(buf[i], sizeof buf[i], "%s/shapes/images/valid/%06d.png", g_dir, i + 1);
        paths[i] = buf[i];
    }
    sdnn_map_eval_opts o = SDNN_MAP_EVAL_OPTS_INIT;
    sdnn_ap ap[4];
    sdnn_map_result r;
    assert_int_equal(sdnn_detector_map_eval(net, paths, 4, &o, ap, &r), SDNN_OK);
    assert_int_equal(net->batch, batch);
    assert_int_equal(net->layers[0].batch, batch);
    assert_int_equal(r.images, 4);
    assert_true(r.map_all >= 0 && r.map_all <= 1 && r.map11 >= 0 && r.map11 <= 1);
    int truths = 0;
    for (int c = 0; c < 4; ++c) truths += ap[c].truths;
    assert_true(truths > 0);

    char missing[512];
    snprintf(missing, sizeof missing, "%s/shapes/images/nothere/000001.png", g_dir);
    assert_int_equal(tu_run("mkdir -p %s/shapes/images/nothere && cp %s %s", g_dir, paths[0], missing),
                     0);
    paths[1] = missing;
    assert_int_equal(sdnn_detector_map_eval(net, paths, 2, &o, NULL, &r), SDNN_ERR_IO);
    assert_non_null(strstr(sdnn_last_error(), "labels/nothere/000001.txt"));
    assert_int_equal(net->batch, batch);
    sdnn_network_free(net);
}

/* Runs `cmd`, its output into g_dir/out.log; returns the exit code and the
 * output in *out (caller frees). */
static int run_logged(char **out, const char *args)
{
    int rc = tu_run("%s %s >%s/out.log 2>&1", g_bin, args, g_dir);
    char path[512];
    snprintf(path, sizeof path, "%s/out.log", g_dir);
    *out = tu_slurp(path);
    assert_non_null(*out);
    return rc;
}

static void test_detector_map_command(void **state)
{
    (void)state;
    random_weights("cfg/shapes.cfg", "shapes.weights");
    char args[2048], *out;
    snprintf(args, sizeof args, "detector map %s/shapes.data cfg/shapes.cfg %s/shapes.weights",
             g_dir, g_dir);
    int rc = run_logged(&out, args);
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    const char *line = strstr(out, "mAP@0.50: all-point ");
    assert_non_null(line);
    double all = -1, eleven = -1, p101 = -1;
    int images = 0;
    assert_int_equal(sscanf(line, "mAP@0.50: all-point %lf, 11-point %lf, 101-point %lf over %d "
                            "images", &all, &eleven, &p101, &images), 4);
    assert_true(all >= 0 && all <= 1 && eleven >= 0 && eleven <= 1 && p101 >= 0 && p101 <= 1);
    assert_int_equal(images, 4);
    /* The table names the classes from the names file. */
    assert_non_null(strstr(out, "triangle"));
    free(out);

    snprintf(args, sizeof args,
             "detector map %s/shapes.data cfg/shapes.cfg %s/shapes.weights -iou 0.75 -thresh 0.1",
             g_dir, g_dir);
    assert_int_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "mAP@0.75: all-point "));
    free(out);

    /* Bad input: a non-zero exit and a message naming what was wrong. */
    snprintf(args, sizeof args, "detector map %s/shapes.data cfg/shapes.cfg %s/nothere.weights",
             g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "nothere.weights"));
    free(out);
    snprintf(args, sizeof args,
             "head -c 1000 %s/shapes.weights > %s/trunc.weights && %s detector map %s/shapes.data "
             "cfg/shapes.cfg %s/trunc.weights",
             g_dir, g_dir, g_bin, g_dir, g_dir);
    assert_int_not_equal(tu_run("%s >%s/out.log 2>&1", args, g_dir), 0);
    snprintf(args, sizeof args, "%s/out.log", g_dir);
    out = tu_slurp(args);
    assert_non_null(strstr(out, "trunc.weights"));
    free(out);
    snprintf(args, sizeof args,
             "detector map %s/shapes.data cfg/shapes.cfg %s/shapes.weights -iou 1.5", g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "-iou 1.5"));
    free(out);
    /* An image whose label file is missing. */
    assert_int_equal(tu_run("mkdir -p %s/nl/images && cp %s/shapes/images/valid/000001.png "
                         "%s/nl/images/a.png && echo %s/nl/images/a.png > %s/nl/valid.txt && "
                         "printf 'classes=4\\nvalid=%s/nl/valid.txt\\n' > %s/nl.data",
                         g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir),
                     0);
    snprintf(args, sizeof args, "detector map %s/nl.data cfg/shapes.cfg %s/shapes.weights", g_dir,
             g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "nl/labels/a.txt"));
    free(out);
    /* A classifier cfg is not a detector. */
    random_weights("cfg/fmnist.cfg", "fmnist.weights");
    snprintf(args, sizeof args, "detector map %s/shapes.data cfg/fmnist.cfg %s/fmnist.weights",
             g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "not a detector"));
    free(out);
}

static void test_classifier_valid_command(void **state)
{
    (void)state;
    random_weights("cfg/fmnist.cfg", "fmnist.weights");
    char args[2048], *out;
    snprintf(args, sizeof args, "classifier valid %s/cls.data cfg/fmnist.cfg %s/fmnist.weights",
             g_dir, g_dir);
    int rc = run_logged(&out, args);
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    const char *line = strstr(out, "top-1 ");
    assert_non_null(line);
    double t1 = -1, t2 = -1;
    int images = 0;
    assert_int_equal(sscanf(line, "top-1 %lf, top-2 %lf over %d images", &t1, &t2, &images), 3);
    assert_int_equal(images, 4);
    assert_true(t1 >= 0 && t1 <= t2 && t2 <= 1);
    free(out);

    snprintf(args, sizeof args, "classifier valid %s/cls.data cfg/fmnist.cfg %s/none.weights",
             g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "none.weights"));
    free(out);
    /* An image whose path names no label. */
    assert_int_equal(tu_run("cp %s/cls/1_top.png %s/cls/2.png && echo %s/cls/2.png >> %s/cls/valid.txt",
                         g_dir, g_dir, g_dir, g_dir),
                     0);
    snprintf(args, sizeof args, "classifier valid %s/cls.data cfg/fmnist.cfg %s/fmnist.weights",
             g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "cls/2.png"));
    free(out);
    /* A detector cfg has the wrong number of outputs. */
    random_weights("cfg/shapes.cfg", "shapes.weights");
    snprintf(args, sizeof args, "classifier valid %s/cls.data cfg/shapes.cfg %s/shapes.weights",
             g_dir, g_dir);
    assert_int_not_equal(run_logged(&out, args), 0);
    assert_non_null(strstr(out, "outputs"));
    free(out);
}

int main(void)
{
    /* One group (tests/run.sh counts the last PASSED line); the setup makes
     * the tiny data set the last three need. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iou),
        cmocka_unit_test(test_ap_ranked),
        cmocka_unit_test(test_perfect),
        cmocka_unit_test(test_no_detections),
        cmocka_unit_test(test_half_right),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_classes_mean),
        cmocka_unit_test(test_iou_boundary),
        cmocka_unit_test(test_ties_stable),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_map_eval_function),
        cmocka_unit_test(test_detector_map_command),
        cmocka_unit_test(test_classifier_valid_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
