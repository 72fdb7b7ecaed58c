/*
 * detector: `./darknet detector train|test|map`, CLI-compatible with stock
 * Darknet.  `test` never opens a window: it prints the detections and writes
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
#include "flags.h"

#include <darknet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "replicas.h"
#include "datacheck.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: darknet detector train DATA CFG [WEIGHTS] [-gpus 0,1,...] [-clear]\n"
            "                              [-max_batches N] [-csv FILE] [-seed S]\n"
            "                              [-skip_bad_labels] (drop bad boxes, counted)\n"
            "                              [-map [-map_every N] [-target MAP]] (mAP on valid=\n"
            "                              every N iterations, default 100; stop at MAP)\n"
            "       darknet detector test DATA CFG WEIGHTS IMAGE [-thresh T] [-out NAME]\n"
            "       darknet detector map DATA CFG WEIGHTS [-iou 0.5] [-thresh 0.005] [-nms 0.45]\n");
    return 1;
}

/* Arguments that are not flags or flag values, in order. */
static int positional(int argc, char **argv, char **out, int max)
{
    static const char *with_value[] = {"-gpus", "-max_batches", "-csv", "-seed", "-thresh",
                                       "-hier", "-out", "-threads", "-map_every", "-target",
                                       "-iou", "-nms"};
    int n = 0;
    for (int i = 0; i < argc; ++i) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; ++k)
                if (strcmp(argv[i], with_value[k]) == 0) {
                    ++i;
                    break;
                }
            continue;
        }
        if (n < max) out[n] = argv[i];
        ++n;
    }
    return n;
}

int sdnn_train_command(sdnn_task task, int argc, char **argv)
{
    /* argv: train DATA CFG [WEIGHTS] flags... */
    char *pos[4] = {0};
    int np = positional(argc - 1, argv + 1, pos, 4);
    if (np < 2 || np > 3) return usage();
    sdnn_train_job job = {0};
    job.task = task;
    job.datacfg = pos[0];
    job.cfgfile = pos[1];
    job.weights = np == 3 ? pos[2] : NULL;
    job.clear = find_arg(argc, argv, "-clear");
    job.skip_bad_labels = find_arg(argc, argv, "-skip_bad_labels");
    /* Strict values (flags.h): nothing is silently coerced. */
    const char *gpus = NULL, *csv = NULL;
    long max_batches, seed, threads, every;
    double target;
    if (sdnn_flag_str(argc, argv, "-gpus", &gpus) || sdnn_flag_str(argc, argv, "-csv", &csv) ||
        sdnn_flag_long(argc, argv, "-max_batches", 0, 1, 2147483647L, &max_batches) ||
        sdnn_flag_long(argc, argv, "-seed", -1, 0, 4294967295L, &seed) ||
        sdnn_flag_long(argc, argv, "-threads", 0, 1, 1024, &threads) ||
        sdnn_flag_long(argc, argv, "-map_every", 100, 1, 2147483647L, &every) ||
        sdnn_flag_double(argc, argv, "-target", 0, 0, 1, 1, &target))
        return 1;
    job.gpus = gpus ? gpus : "0";
    job.nreplicas = sdnn_flag_gpus(job.gpus);
    if (job.nreplicas < 1) return 1;
    job.max_batches = (int)max_batches;
    job.csv = csv;
    job.seed = seed;
    job.loader_threads = (int)threads;
    int map = find_arg(argc, argv, "-map");
    job.map_every = map ? (int)every : 0;
    job.target = target;
    return sdnn_train(&job);
}

static int test_detector(int argc, char **argv)
{
    char *pos[5] = {0};
    int np = positional(argc - 1, argv + 1, pos, 5);
    if (np != 4) return usage();
    const char *datacfg = pos[0], *cfgfile = pos[1], *weights = pos[2], *imgpath = pos[3];
    double thresh_d, hier_d;
    const char *out_s = NULL;
    if (sdnn_flag_double(argc, argv, "-thresh", .5, 0, 0, 1, &thresh_d) ||
        sdnn_flag_double(argc, argv, "-hier", .5, 0, 0, 1, &hier_d) ||
        sdnn_flag_str(argc, argv, "-out", &out_s))
        return 1;
    float thresh = (float)thresh_d, hier = (float)hier_d;
    const char *outname = out_s ? out_s : "predictions";
    /* Darknet formats NAME.jpg into a 256-byte buffer. */
    if (strlen(outname) > 240) {
        fprintf(stderr, "error: -out %.40s...: name too long (at most 240 characters)\n", outname);
        return 1;
    }
    const char *files[][2] = {{"data file", datacfg}, {"cfg file", cfgfile},
                              {"weights file", weights}, {"image", imgpath}};
    for (int i = 0; i < 4; ++i)
        if (sdnn_check_readable(files[i][1]) != SDNN_OK) {
            fprintf(stderr, "error: %s: %s\n", files[i][0], sdnn_last_error());
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
    list *nlist = get_paths(name_list);
    char **names = (char **)list_to_array(nlist);
    set_batch_network(net, 1);
    image im = load_image_color((char *)imgpath, 0, 0);
    image sized = letterbox_image(im, net->w, net->h);
    double t0 = what_time_is_it_now();
    network_predict(net, sized.data);
    printf("%s: Predicted in %f seconds.\n", imgpath, what_time_is_it_now() - t0);
    int nboxes = 0;
    layer l = net->layers[net->n - 1];
    detection *dets = get_network_boxes(net, im.w, im.h, thresh, hier, 0, 1, &nboxes);
    do_nms_sort(dets, nboxes, l.classes, .45f);
    for (int i = 0; i < nboxes; ++i)
        for (int j = 0; j < l.classes; ++j)
            if (dets[i].prob[j] > thresh) {
                box b = dets[i].bbox;
                printf("%s: %.0f%% (x=%.1f y=%.1f w=%.1f h=%.1f)\n", names[j],
                       dets[i].prob[j] * 100, b.x * im.w, b.y * im.h, b.w * im.w, b.h * im.h);
            }
    draw_detections(im, dets, nboxes, thresh, names, NULL, l.classes);
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
    return ok ? 0 : 1;
}

int sdnn_cmd_detector(int argc, char **argv)
{
    /* argv[0] == "train" | "test" | "map" */
    if (argc < 1) return usage();
    if (strcmp(argv[0], "train") == 0) return sdnn_train_command(SDNN_TASK_DETECTOR, argc, argv);
    if (strcmp(argv[0], "test") == 0) return test_detector(argc, argv);
    if (strcmp(argv[0], "map") == 0) return sdnn_cmd_detector_map(argc, argv);
    return usage();
}
