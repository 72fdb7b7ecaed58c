/*
 * detector: `./darknet detector train|test|map|valid|recall|calc_anchors`,
 * CLI-compatible with stock Darknet and the maintained fork's flags.  `test` never opens a window: it prints the detections and writes
 * the image with boxes (-out NAME, default "predictions").  `map` is in
 * evaluate.c.
 */
#include "dialect.h"
#include "commands.h"
#include "config.h"
#include "evaluate.h"
#include "saveio.h"
#include "options.h"
#include "train.h"
#include "detector_cmd.h"
#include "flags.h"

#include <darknet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "replicas.h"
#include "datacheck.h"

/* detector/classifier train DATA CFG [WEIGHTS] flags...: one flag table for
 * both (train.c runs them). */
int sdnn_train_command(sdnn_task task, int argc, char **argv)
{
    sdnn_train_job job = {.task = task, .gpus = "0", .seed = -1, .iou_thresh = .5f,
                          .conf_thresh = .25f};
    const char *csv = NULL;
    int map = 0, dont_show = 0, show_imgs = 0;
    /* Flags that only feed the evaluation of -map: refused without it. */
    static const char eval_why[] = "nothing is evaluated without it";
    long every = 100;
    double target = 0;
    const int detector = task == SDNN_TASK_DETECTOR;
    const sdnn_flag flags[] = {
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &job.gpus,
         .parse = sdnn_flag_parse_gpus_ids, .meta = "LIST",
         .help = "replicas, one per id: devices 0,1,2,3 (engine=gpu), else CPU replicas (0)"},
        {.name = "-clear", .kind = SDNN_FLAG_SWITCH, .dst = &job.clear,
         .help = "start from iteration 0 with the WEIGHTS given"},
        {.name = "-max_batches", .kind = SDNN_FLAG_INT, .dst = &job.max_batches, .lo = 1,
         .hi = 2147483647.0, .meta = "N", .help = "iterations (the cfg's max_batches)"},
        {.name = "-csv", .kind = SDNN_FLAG_STR, .dst = &csv, .meta = "FILE",
         .help = "per-iteration CSV (the cfg's csv=, else BACKUP/CFG.csv)"},
        {.name = "-seed", .kind = SDNN_FLAG_LONG, .dst = &job.seed, .lo = 0, .hi = 4294967295.0,
         .meta = "S", .help = "random seed (time-based, as Darknet)"},
        {.name = "-threads", .kind = SDNN_FLAG_INT, .dst = &job.loader_threads, .lo = 1,
         .hi = 1024, .meta = "N", .help = "loader threads"},
        {.name = "-skip_bad_labels", .kind = SDNN_FLAG_SWITCH, .dst = &job.skip_bad_labels,
         .help = "drop bad boxes (counted) instead of stopping"},
        {.name = "-map", .kind = SDNN_FLAG_SWITCH, .dst = &map,
         .help = detector ? "mAP@0.5 on valid= every -map_every iterations; a new best is saved "
                            "as NAME_best.weights"
                          : "top-1 on valid= every -map_every iterations"},
        {.name = "-map_every", .kind = SDNN_FLAG_LONG, .dst = &every, .lo = 1, .hi = 2147483647.0,
         .meta = "N", .help = "with -map: iterations between evaluations (100)",
         .needs = "-map", .needs_why = eval_why},
        {.name = "-target", .kind = SDNN_FLAG_DOUBLE, .dst = &target, .lo = 0, .lo_open = 1,
         .hi = 1, .meta = detector ? "MAP" : "TOP1", .help = "with -map: stop once reached",
         .needs = "-map", .needs_why = "the accuracy is measured on valid= only with it"},
        {.name = "-time_limit_sec", .kind = SDNN_FLAG_LONG, .dst = &job.time_limit_s, .lo = 1,
         .hi = 2147483647.0, .meta = "S",
         .help = "stop after S seconds of training (evaluations not counted), saving _final"},
        {.name = "-benchmark_layers", .kind = SDNN_FLAG_SWITCH, .dst = &job.benchmark_layers,
         .help = "first print each layer's forward/backward time (the planner's profile)"},
        SDNN_FLAGS_NO_WINDOW(&dont_show, &show_imgs),
        SDNN_FLAGS_FORK_REFUSED,
        /* Detector only (the table below is cut before them for a classifier). */
        {.name = "-points", .kind = SDNN_FLAG_CUSTOM, .dst = &job.points,
         .parse = sdnn_flag_parse_points, .meta = "0|11|101",
         .help = "with -map: all-point (0, the default), 11-point or 101-point AP",
         .needs = "-map", .needs_why = eval_why},
        {.name = "-iou_thresh", .kind = SDNN_FLAG_FLOAT, .dst = &job.iou_thresh, .lo = 0,
         .lo_open = 1, .hi = 1, .meta = "X", .help = "with -map: match at IoU >= X (0.5)",
         .needs = "-map", .needs_why = eval_why},
        {.name = "-thresh", .kind = SDNN_FLAG_FLOAT, .dst = &job.conf_thresh, .lo = 0, .hi = 1,
         .hi_open = 1, .meta = "T",
         .help = "with -map: precision and recall of the boxes above T (0.25)",
         .needs = "-map", .needs_why = eval_why},
        {.name = "-chart", .kind = SDNN_FLAG_STR, .dst = &job.chart, .meta = "FILE",
         .help = "the loss (and -map) chart redrawn while training (chart.png)"},
        {.name = "-letter_box", .kind = SDNN_FLAG_SWITCH, .dst = &job.letter_box,
         .help = "train on letterboxed images (as [net] letter_box=1)"},
    };
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    const sdnn_command cmd = {
        .name = detector ? "detector train" : "classifier train", .args = "DATA CFG [WEIGHTS]",
        .min_pos = 2, .max_pos = 3, .flags = flags, .nflags = detector ? nflags : nflags - 5,
    };
    const char *pos[3] = {0};
    int np;
    int st = sdnn_detector_args(&cmd, argc, argv, pos, &np, &dont_show, &show_imgs);
    if (st >= 0) return st;
    job.datacfg = pos[0];
    job.cfgfile = pos[1];
    job.weights = np == 3 ? pos[2] : NULL;
    int ids[SDNN_GPUS_MAX];
    job.nreplicas = sdnn_flag_gpus_ids(job.gpus, ids, SDNN_GPUS_MAX);
    job.devices = ids;
    job.csv = csv;
    job.map_every = map ? (int)every : 0;
    job.target = target;
    return sdnn_train(&job);
}

/* -save_labels: the fork writes IMAGE's name with .txt beside the image;
 * a file already there (a label file of the user's?) is never replaced. */
static int saved_labels_path(const char *img, char *out, size_t len)
{
    const char *dot = strrchr(img, '.'), *slash = strrchr(img, '/');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - img) : strlen(img);
    if (stem + 5 > len) {
        fprintf(stderr, "error: -save_labels: the image path is too long\n");
        return -1;
    }
    memcpy(out, img, stem);
    memcpy(out + stem, ".txt", 5);
    struct stat sb;
    if (stat(out, &sb) == 0) {
        fprintf(stderr, "error: -save_labels: %s exists: it is not replaced (move it away, or "
                "leave out -save_labels)\n", out);
        return -1;
    }
    return 0;
}

/* The boxes above thresh drawn on im, each in its best class's colour, as
 * Darknet's draw_detections does but at least a pixel wide: Darknet's width
 * is im.h * 0.006 rounded down, nothing at all below 167 pixels (the shapes
 * set's 64x64 images); the fork also keeps a pixel.  No text (Darknet's
 * label alphabet is not installed). */
static void draw_boxes(image im, const detection *dets, int n, float thresh, int classes)
{
    static const float colors[6][3] = {{1, 0, 1}, {0, 0, 1}, {0, 1, 1},
                                       {0, 1, 0}, {1, 1, 0}, {1, 0, 0}};
    int width = (int)(im.h * .006f);
    if (width < 1) width = 1;
    for (int i = 0; i < n; ++i) {
        int best = -1;
        for (int j = 0; j < classes; ++j)
            if (dets[i].prob[j] > thresh && (best < 0 || dets[i].prob[j] > dets[i].prob[best]))
                best = j;
        if (best < 0) continue;
        const float *c = colors[best % 6];
        box b = dets[i].bbox;
        int left = (int)((b.x - b.w / 2) * im.w), right = (int)((b.x + b.w / 2) * im.w);
        int top = (int)((b.y - b.h / 2) * im.h), bot = (int)((b.y + b.h / 2) * im.h);
        if (left < 0) left = 0;
        if (top < 0) top = 0;
        if (right > im.w - 1) right = im.w - 1;
        if (bot > im.h - 1) bot = im.h - 1;
        draw_box_width(im, left, top, right, bot, width, c[0], c[1], c[2]);
    }
}

static int test_detector(int argc, char **argv)
{
    double thresh_d = .5, hier_d = .5;
    const char *out_s = NULL, *gpus = "0";
    int dont_show = 0, show_imgs = 0, ext_output = 0, save_labels = 0, letter_box = 0;
    const sdnn_flag flags[] = {
        {.name = "-thresh", .kind = SDNN_FLAG_DOUBLE, .dst = &thresh_d, .lo = 0, .hi = 1,
         .meta = "T", .help = "score threshold (0.5)"},
        {.name = "-hier", .kind = SDNN_FLAG_DOUBLE, .dst = &hier_d, .lo = 0, .hi = 1,
         .meta = "T", .help = "hierarchy threshold (0.5)"},
        {.name = "-out", .kind = SDNN_FLAG_STR, .dst = &out_s, .meta = "NAME",
         .help = "the image with boxes, NAME.jpg (predictions)"},
        {.name = "-ext_output", .kind = SDNN_FLAG_SWITCH, .dst = &ext_output,
         .help = "each box also as left_x, top_y, width, height in pixels (the fork's line)"},
        {.name = "-save_labels", .kind = SDNN_FLAG_SWITCH, .dst = &save_labels,
         .help = "write the boxes as a label file beside IMAGE (IMAGE with .txt; never over an "
                 "existing file)"},
        SDNN_DETECTOR_FLAG_LETTER_BOX(&letter_box),
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &gpus, .parse = sdnn_flag_parse_gpus,
         .meta = "LIST", .help = "accepted: the prediction runs on the CPU"},
        SDNN_DETECTOR_FLAGS_TAIL(&dont_show, &show_imgs),
    };
    const sdnn_command cmd = {
        .name = "detector test", .args = "DATA CFG WEIGHTS IMAGE", .min_pos = 4, .max_pos = 4,
        SDNN_CMD_FLAGS(flags),
    };
    const char *pos[4] = {0};
    int np;
    int st = sdnn_detector_args(&cmd, argc, argv, pos, &np, &dont_show, &show_imgs);
    if (st >= 0) return st;
    const char *datacfg = pos[0], *cfgfile = pos[1], *weights = pos[2], *imgpath = pos[3];
    char label_out[4096] = "";
    if (save_labels && saved_labels_path(imgpath, label_out, sizeof label_out) != 0) return 1;
    float thresh = (float)thresh_d, hier = (float)hier_d;
    const char *outname = out_s ? out_s : "predictions";
    /* Darknet formats NAME.jpg into a 256-byte buffer. */
    if (strlen(outname) > 240) {
        char shown[48];
        snprintf(shown, sizeof shown, "%.40s...", outname);
        return sdnn_args_bad(&cmd, "-out", shown, "a name of at most 240 characters");
    }
    const char *files[][2] = {{"data file", datacfg}, {"cfg file", cfgfile},
                              {"weights file", weights}, {"image", imgpath}};
    for (int i = 0; i < 4; ++i)
        if (sdnn_check_readable(files[i][1]) != SDNN_OK) {
            fprintf(stderr, "error: %s: %s\n", files[i][0], sdnn_last_error());
            return 1;
        }
    /* What it writes, before the network runs: libdarknet's save_image
     * would block on a FIFO named NAME.jpg. */
    char picture[300];
    snprintf(picture, sizeof picture, "%s.jpg", outname);
    if (sdnn_check_output_file(picture) != SDNN_OK) {
        fprintf(stderr, "error: -out %s: %s\n", outname, sdnn_last_error());
        return 1;
    }
    if (label_out[0] && sdnn_check_output_file(label_out) != SDNN_OK) {
        fprintf(stderr, "error: -save_labels: %s\n", sdnn_last_error());
        return 1;
    }
    sdnn_config cfg;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(cfgfile, &cfg, &stripped) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 1;
    }
    list *options = read_data_cfg((char *)datacfg);
    char *name_list = option_find_str(options, "names", "data/names.list");
    if (sdnn_check_readable(name_list) != SDNN_OK) {
        fprintf(stderr, "error: %s: names=%s: %s\n", datacfg, name_list, sdnn_last_error());
        sdnn_stripped_cfg_close(&stripped);
        sdnn_free_options(options);
        return 1;
    }
    /* The structure walked (datacheck.h): libdarknet would predict on a
     * blank image in place of one it cannot decode. */
    if (sdnn_image_check(imgpath) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        sdnn_stripped_cfg_close(&stripped);
        sdnn_free_options(options);
        return 1;
    }
    network *net = sdnn_parse_network(stripped.path);
    sdnn_stripped_cfg_close(&stripped);
    if (sdnn_check_weights_file(net, weights, 1, NULL) != SDNN_OK) {
        fprintf(stderr, "error: %s: %s\n", cfgfile, sdnn_last_error());
        sdnn_network_free(net);
        sdnn_free_options(options);
        return 1;
    }
    load_weights(net, (char *)weights);
    if (sdnn_check_net_finite(net, weights) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        sdnn_network_free(net);
        sdnn_free_options(options);
        return 1;
    }
    /* The names label each box: one per class (names[j] for every class j
     * is read below), each once. */
    list *nlist = NULL;
    char **names = sdnn_read_class_names(datacfg, "names", name_list, NULL, &nlist);
    int classes = sdnn_detector_classes(net);
    if (names && classes > nlist->size)
        fprintf(stderr, "error: %s: names=%s has %d names for %d classes\n", datacfg, name_list,
                nlist->size, classes);
    if (!names || classes < 1 || classes > nlist->size) {
        if (classes < 1)
            fprintf(stderr, "error: %s: no [yolo], [region] or [detection] layer (or they "
                    "disagree on classes=): not a detector\n", cfgfile);
        if (names) {
            free_ptrs((void **)names, nlist->size);
            free_list(nlist);
        }
        sdnn_network_free(net);
        sdnn_free_options(options);
        return 1;
    }
    set_batch_network(net, 1);
    image im = load_image_color((char *)imgpath, 0, 0);
    image sized = sdnn_detector_input(net, im, letter_box);
    double t0 = what_time_is_it_now();
    network_predict(net, sized.data);
    printf("%s: Predicted in %f seconds.\n", imgpath, what_time_is_it_now() - t0);
    int nboxes = 0;
    detection *dets = sdnn_detector_boxes(net, im, letter_box, thresh, hier, &nboxes);
    sdnn_dialect_nms(net, dets, nboxes, classes, .45f);
    char *labels_text = save_labels ? malloc((size_t)nboxes * (size_t)classes * 64 + 1) : NULL;
    size_t labels_len = 0;
    if (labels_text) labels_text[0] = '\0';
    for (int i = 0; i < nboxes; ++i)
        for (int j = 0; j < classes; ++j)
            if (dets[i].prob[j] > thresh) {
                box b = dets[i].bbox;
                printf("%s: %.0f%% (x=%.1f y=%.1f w=%.1f h=%.1f)\n", names[j],
                       dets[i].prob[j] * 100, b.x * im.w, b.y * im.h, b.w * im.w, b.h * im.h);
                if (ext_output)
                    printf("%s: %.0f%%\t(left_x: %4.0f   top_y: %4.0f   width: %4.0f   height: "
                           "%4.0f)\n", names[j], dets[i].prob[j] * 100, (b.x - b.w / 2) * im.w,
                           (b.y - b.h / 2) * im.h, b.w * im.w, b.h * im.h);
                if (labels_text)
                    labels_len += (size_t)snprintf(labels_text + labels_len, 64, "%d %.6f %.6f %.6f "
                                                   "%.6f\n", j, b.x, b.y, b.w, b.h);
            }
    int labels_ok = 1;
    if (labels_text) {
        if (labels_len == 0) {
            /* No box: an empty label file (the atomic writer takes at least a byte). */
            FILE *f = fopen(label_out, "wx");
            labels_ok = f && fclose(f) == 0;
            if (!labels_ok) fprintf(stderr, "error: -save_labels: cannot create %s\n", label_out);
        } else {
            labels_ok = sdnn_write_file_atomic(label_out, labels_text, labels_len) == SDNN_OK;
            if (!labels_ok) fprintf(stderr, "error: -save_labels: %s\n", sdnn_last_error());
        }
        if (labels_ok) printf("wrote %s\n", label_out);
        free(labels_text);
    }
    draw_boxes(im, dets, nboxes, thresh, classes);
    save_image(im, outname);
    char written[300];
    snprintf(written, sizeof written, "%s.jpg", outname);
    struct stat sb;
    int ok = stat(written, &sb) == 0 && sb.st_size > 0;
    if (ok) printf("wrote %s\n", written);
    else fprintf(stderr, "error: -out %s: could not write %s\n", outname, written);
    free_detections(dets, nboxes);
    free_ptrs((void **)names, nlist->size);
    free_list(nlist);
    sdnn_free_options(options);
    free_image(im);
    free_image(sized);
    sdnn_network_free(net);
    return ok && labels_ok ? 0 : 1;
}

int sdnn_cmd_detector(int argc, char **argv)
{
    /* argv[0] == "train" | "test" | "map" */
    if (argc >= 1 && strcmp(argv[0], "train") == 0)
        return sdnn_train_command(SDNN_TASK_DETECTOR, argc, argv);
    if (argc >= 1 && strcmp(argv[0], "test") == 0) return test_detector(argc, argv);
    if (argc >= 1 && strcmp(argv[0], "map") == 0) return sdnn_cmd_detector_map(argc, argv);
    if (argc >= 1 && strcmp(argv[0], "valid") == 0) return sdnn_cmd_detector_valid(argc, argv);
    if (argc >= 1 && strcmp(argv[0], "recall") == 0) return sdnn_cmd_detector_recall(argc, argv);
    if (argc >= 1 && strcmp(argv[0], "calc_anchors") == 0)
        return sdnn_cmd_detector_calc_anchors(argc, argv);
    fprintf(stderr, "usage: darknet detector train|test|map|valid|recall|calc_anchors ... (-h "
                    "after the command lists its flags)\n");
    return 2;
}
