/*
 * train: see train.h.  This is front-end code: it prints, and it turns
 * library statuses into an exit code.  Everything that can fail is checked
 * before the first image is trained, so bad input never costs a run.
 */
#include "train.h"
#include "evaluate.h"
#include "options.h"
#include "config.h"
#include "loader.h"
#include "replicas.h"
#include "saveio.h"
#include "trace.h"
#include "trainer.h"
#include "autoplan.h"
#include "timeline.h"
#include "blas.h"
#include "clock.h"
#include "datacheck.h"
#include "engine.h"
#include "dialect.h"
#include "splitmix.h"
#include "chart.h"
#include "profile.h"
#include "conv_dnnl.h"
#include "outputs.h"
#include "flags.h"
#include "readable.h"

#include <darknet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what)
{
    fprintf(stderr, "error: %s\n", what);
    return 1;
}

static int fail_status(void)
{
    fprintf(stderr, "error: %s\n", sdnn_last_error());
    return 1;
}

static int readable(const char *what, const char *path)
{
    if (sdnn_check_readable(path) == SDNN_OK) return 1;
    fprintf(stderr, "error: %s: %s\n", what, sdnn_last_error());
    return 0;
}

/* Every image of the train list must be an image that decodes (its
 * structure walked by sdnn_image_check: libdarknet would train on a blank
 * image in its place), and for detection its label file must exist:
 * Darknet's loader threads exit() on a missing label file while the
 * replicas train, which crashes the process.  Each bad file is named (the
 * first 20), then the count. */
#define SHOWN_BAD 20
static int check_train_list(const sdnn_train_job *job, const char *list, char **paths, int n)
{
    if (n == 0) {
        fprintf(stderr, "error: %s: train=%s: the list is empty\n", job->datacfg, list);
        return -1;
    }
    int bad = 0;
    char lbl[4096];
    for (int i = 0; i < n; ++i) {
        if (!paths[i][0]) {
            fprintf(stderr, "error: %s: line %d is empty (one image path per line)\n", list, i + 1);
            return -1;
        }
        const char *why = NULL;
        if (sdnn_image_check(paths[i]) != SDNN_OK) {
            why = sdnn_last_error();
        } else if (job->task == SDNN_TASK_DETECTOR) {
            sdnn_label_path(paths[i], lbl, sizeof lbl);
            struct stat sb;
            errno = 0;
            if (access(lbl, R_OK) != 0 || stat(lbl, &sb) != 0 || !S_ISREG(sb.st_mode)) {
                char kind[96];
                snprintf(kind, sizeof kind, "it is %s, and a regular file is needed",
                         sdnn_file_kind((unsigned)sb.st_mode));
                snprintf(lbl + strlen(lbl), sizeof lbl - strlen(lbl), " (the label file of %s): %s",
                         paths[i], errno ? strerror(errno) : kind);
                why = lbl;
            }
        }
        if (why && bad++ < SHOWN_BAD) fprintf(stderr, "error: %s:%d: %s\n", list, i + 1, why);
    }
    if (bad) {
        fprintf(stderr, "error: %s: %d of %d images or label files cannot be used%s\n", list, bad,
                n, bad > SHOWN_BAD ? " (the first 20 are listed)" : "");
        return -1;
    }
    return 0;
}

typedef struct label_report {
    int shown;
    int lines;
} label_report;

static void on_bad_label(void *ctx, const char *name, int line, const char *text, const char *why)
{
    label_report *r = ctx;
    ++r->lines;
    if (r->shown++ < SHOWN_BAD) fprintf(stderr, "error: %s:%d: \"%s\": %s\n", name, line, text, why);
}

/* -skip_bad_labels: the image is given to Darknet under DIR/images/N.EXT
 * (a symbolic link) with the good boxes in DIR/labels/N.txt, where
 * Darknet's label path leads; the user's files are never changed. */
typedef struct shadow {
    char dir[512];
    int made;
} shadow;

static int shadow_image(shadow *sh, char **path, int i, const char *clean)
{
    if (!sh->made) {
        const char *tmp = getenv("TMPDIR");
        snprintf(sh->dir, sizeof sh->dir, "%s/sdnn-labels-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
        if (!mkdtemp(sh->dir)) return -1;
        char sub[600];
        snprintf(sub, sizeof sub, "%s/images", sh->dir);
        if (mkdir(sub, 0700) != 0) return -1;
        snprintf(sub, sizeof sub, "%s/labels", sh->dir);
        if (mkdir(sub, 0700) != 0) return -1;
        sh->made = 1;
    }
    const char *dot = strrchr(*path, '.');
    const char *slash = strrchr(*path, '/');
    if (!dot || (slash && dot < slash)) return -1;
    char img[700], lbl[700], want[700];
    snprintf(img, sizeof img, "%s/images/%d%s", sh->dir, i, dot);
    snprintf(want, sizeof want, "%s/labels/%d.txt", sh->dir, i);
    if (sdnn_label_path(img, lbl, sizeof lbl) != 0 || strcmp(lbl, want) != 0) return -1;
    char *real = realpath(*path, NULL);
    if (!real) return -1;
    int rc = symlink(real, img);
    free(real);
    if (rc != 0) return -1;
    FILE *f = fopen(lbl, "w");
    if (!f) return -1;
    int ok = fputs(clean, f) >= 0;
    if (fclose(f) != 0 || !ok) return -1;
    char *copy = strdup(img);
    if (!copy) return -1;
    free(*path);
    *path = copy;
    return 0;
}

static void shadow_remove(shadow *sh)
{
    if (!sh->made) return;
    static const char *const subs[] = {"images", "labels"};
    for (int k = 0; k < 2; ++k) {
        char d[600], p[1000];
        snprintf(d, sizeof d, "%s/%s", sh->dir, subs[k]);
        DIR *dir = opendir(d);
        for (struct dirent *e; dir && (e = readdir(dir));) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
        if (dir) closedir(dir);
        rmdir(d);
    }
    rmdir(sh->dir);
    sh->made = 0;
}

/* A label file, whole (they are small; 16 MiB at most). */
static char *read_small(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    if (!S_ISREG(sb.st_mode) || sb.st_size > (16 << 20)) {
        errno = S_ISREG(sb.st_mode) ? EFBIG : EISDIR;
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = malloc((size_t)sb.st_size + 1);
    size_t n = s ? fread(s, 1, (size_t)sb.st_size, f) : 0;
    fclose(f);
    if (!s) return NULL;
    s[n] = '\0';
    for (size_t i = 0; i < n; ++i)
        if (s[i] == '\0') s[i] = ' '; /* a NUL would hide the rest from the scan */
    return s;
}

/* Every label file of the train list, read at start: each bad box named
 * (file, line, why); with -skip_bad_labels those boxes are dropped and
 * counted, otherwise the run stops. */
static int check_labels(const sdnn_train_job *job, char **paths, int n, int classes, shadow *sh)
{
    label_report rep = {0};
    int files_bad = 0, dropped = 0;
    long boxes = 0;
    char lbl[4096];
    for (int i = 0; i < n; ++i) {
        sdnn_label_path(paths[i], lbl, sizeof lbl);
        char *text = read_small(lbl);
        if (!text) {
            fprintf(stderr, "error: %s (the label file of %s): %s\n", lbl, paths[i], strerror(errno));
            return -1;
        }
        char *clean = job->skip_bad_labels ? malloc(strlen(text) + 2) : NULL;
        int good = 0;
        int bad = sdnn_label_scan(lbl, text, classes, clean, &good, on_bad_label, &rep);
        boxes += good;
        if (bad) {
            ++files_bad;
            dropped += bad;
            if (clean && shadow_image(sh, &paths[i], i, clean) != 0) {
                fprintf(stderr, "error: -skip_bad_labels: cannot stage the good boxes of %s under "
                        "%s: %s\n", lbl, sh->dir, strerror(errno));
                free(clean);
                free(text);
                return -1;
            }
        }
        free(clean);
        free(text);
    }
    if (!files_bad) return 0;
    if (job->skip_bad_labels) {
        fprintf(stderr, "warning: -skip_bad_labels: dropped %d bad box%s in %d of %d label files; "
                "training on the other %ld\n", dropped, dropped == 1 ? "" : "es", files_bad, n, boxes);
        return 0;
    }
    fprintf(stderr, "error: %d bad box%s in %d of %d label files%s; fix them, or pass "
            "-skip_bad_labels to train without those boxes\n", dropped, dropped == 1 ? "" : "es",
            files_bad, n, rep.shown > SHOWN_BAD ? " (the first 20 are listed)" : "");
    return -1;
}

typedef struct run {
    const sdnn_train_job *job;
    char **valid;            /* -map: the valid list */
    int nvalid;
    char **labels;           /* classifier: label names */
    int classes;
    sdnn_config cfg;
    sdnn_trainer *t;
    sdnn_loader loader;
    sdnn_csv csv;
    char backup[1024];
    int rank;                /* this process (backend=mpi); 0 alone */
    char *base;
    int train_count;
    double last_eval_s;
    int replan_notes;          /* sdnn_autoplan_print_note's count, printed so far */
    double best_map;         /* -map: the best so far (NAME_best.weights), -1 before */
    int map_letter_box;      /* -map letterboxes: [net] letter_box=1 or -letter_box, as the fork */
    sdnn_chart chart;        /* chart.png (detector) */
    char png[2048];          /* the chart's file; "" for none */
    sdnn_batch_net_keys nk;  /* the loader's [net] keys, -letter_box applied */
} run;

static int save_to(run *R, const char *fmt, long v)
{
    char path[2048];
    if (v >= 0) snprintf(path, sizeof path, fmt, R->backup, R->base, v);
    else snprintf(path, sizeof path, fmt, R->backup, R->base);
    /* Every process takes part (the averages are collective); rank 0
     * alone writes. */
    if (sdnn_trainer_save(R->t, path) != SDNN_OK) {
        fprintf(stderr, "error: rank %d: %s\n", R->rank, sdnn_last_error());
        return -1;
    }
    if (R->rank == 0) fprintf(stderr, "Saving weights to %s\n", path);
    return 0;
}

/* Darknet's schedule, made robust to iteration counters that advance by N:
 * a multiple of the period that was crossed in this step counts. */
static int crossed(size_t before, size_t after, size_t period)
{
    return after / period != before / period;
}

static int detector_saves(run *R, size_t before, size_t i)
{
    if (crossed(before, i, 100) && save_to(R, "%s/%s.backup", -1)) return -1;
    if (crossed(before, i, 100) && save_to(R, "%s/%s_last.weights", -1)) return -1;
    if ((crossed(before, i, 10000) || (i < 1000 && crossed(before, i, 100))) &&
        save_to(R, "%s/%s_%ld.weights", (long)i))
        return -1;
    return 0;
}

static int classifier_saves(run *R, size_t before, size_t i, size_t seen_before, size_t seen)
{
    size_t m = (size_t)R->train_count;
    if (seen / m > seen_before / m && save_to(R, "%s/%s_%ld.weights", (long)(seen / m))) return -1;
    if (crossed(before, i, 1000) && save_to(R, "%s/%s.backup", -1)) return -1;
    return 0;
}

/* "ETA 1h02m" from the pace so far: the time left to max_batches. */
static void format_eta(char *out, size_t len, double elapsed, size_t done, size_t left)
{
    if (done == 0 || elapsed <= 0) {
        snprintf(out, len, "ETA -");
        return;
    }
    double s = elapsed / (double)done * (double)left;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, len, "ETA %ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(out, len, "ETA %ldm%02lds", t / 60, t % 60);
    else snprintf(out, len, "ETA %lds", t);
}

/* -map: replica 0 on the valid list, between steps (the replicas wait only
 * for the evaluation itself): mAP@0.5 for a detector, top-1 accuracy for a
 * classifier.  Replica 0's batch-norm running statistics are averaged with
 * the others' first, as a save would. */
static int evaluate_map(run *R, double *map)
{
    double t0 = what_time_is_it_now();
    sdnn_trainer_average_bn(R->t);
    network *net = sdnn_trainer_net(R->t, 0);
    size_t it = sdnn_trainer_iteration(R->t);
    if (R->rank != 0) {
        /* Process 0 evaluates and every process takes its figure: what
         * follows (the best weights' save, -target's stop) is collective,
         * and in stock mode each process's weights and running statistics
         * differ between averages (a process deciding on its own figure
         * saved where process 0 did not, and both waited on each other). */
        *map = 0;
        if (sdnn_trainer_broadcast_double(R->t, map) != SDNN_OK) {
            fprintf(stderr, "error: rank %d: -map: %s\n", R->rank, sdnn_last_error());
            return 1;
        }
        R->last_eval_s = what_time_is_it_now() - t0;
        return 0;
    }
    if (R->job->task == SDNN_TASK_DETECTOR) {
        sdnn_map_eval_opts o = SDNN_MAP_EVAL_OPTS_INIT;
        o.iou = R->job->iou_thresh > 0 ? R->job->iou_thresh : o.iou;
        o.letter_box = R->map_letter_box;
        sdnn_map_result res;
        sdnn_map_pr pr = {.conf = R->job->conf_thresh};
        if (sdnn_detector_map_eval_pr(net, R->valid, R->nvalid, &o, NULL, &res, &pr) != SDNN_OK) {
            fprintf(stderr, "error: -map: %s\n", sdnn_last_error());
            return 1;
        }
        R->last_eval_s = what_time_is_it_now() - t0;
        *map = sdnn_map_at_points(&res, R->job->points);
        char iou[SDNN_FMT_FLOAT_LEN], conf[SDNN_FMT_FLOAT_LEN];
        printf("mAP@%s at iteration %zu: all-point %.4f, 11-point %.4f, 101-point %.4f over %d "
               "images (%.1f s)\n",
               sdnn_fmt_float(iou, o.iou, 2), it, res.map_all, res.map11, res.map101, res.images,
               R->last_eval_s);
        printf(" for conf_thresh = %s, precision = %.2f, recall = %.2f, F1-score = %.2f "
               "(TP %d, FP %d, FN %d)\n", sdnn_fmt_float(conf, pr.conf, 2), pr.precision,
               pr.recall, pr.f1, pr.tp, pr.fp, pr.fn);
    } else {
        sdnn_cls_result res;
        int k = R->classes < 5 ? R->classes : 5;
        if (sdnn_classifier_eval(net, R->valid, R->nvalid, R->labels, R->classes, k, NULL, NULL,
                                 &res) != SDNN_OK) {
            fprintf(stderr, "error: -map: %s\n", sdnn_last_error());
            return 1;
        }
        R->last_eval_s = what_time_is_it_now() - t0;
        *map = res.top1;
        printf("accuracy at iteration %zu: top-1 %.4f, top-%d %.4f over %d images (%.1f s)\n", it,
               res.top1, res.k, res.topk, res.images, R->last_eval_s);
    }
    fflush(stdout);
    if (sdnn_trainer_broadcast_double(R->t, map) != SDNN_OK) {
        fprintf(stderr, "error: rank 0: -map: %s\n", sdnn_last_error());
        return 1;
    }
    R->last_eval_s = what_time_is_it_now() - t0;
    return 0;
}

static load_args make_args(run *R, network *net, char **paths, char **labels, int classes)
{
    load_args args = {0};
    int imgs = net->batch * net->subdivisions * R->job->nreplicas;
    if (R->job->task == SDNN_TASK_DETECTOR) {
        layer l = net->layers[net->n - 1];
        args = get_base_args(net);
        args.coords = l.coords;
        args.classes = l.classes;
        args.jitter = l.jitter;
        args.num_boxes = l.max_boxes;
        args.type = DETECTION_DATA;
        args.threads = 16;
    } else {
        args.w = net->w;
        args.h = net->h;
        args.hierarchy = net->hierarchy;
        args.min = (int)(net->min_ratio * (float)net->w);
        args.max = (int)(net->max_ratio * (float)net->w);
        args.angle = net->angle;
        args.aspect = net->aspect;
        args.exposure = net->exposure;
        args.saturation = net->saturation;
        args.hue = net->hue;
        args.size = net->w;
        args.classes = classes;
        args.labels = labels;
        args.type = CLASSIFICATION_DATA;
        args.threads = 8;
    }
    if (R->job->loader_threads > 0) args.threads = R->job->loader_threads;
    args.paths = paths;
    args.n = imgs;
    args.m = R->train_count;
    return args;
}

/* The fork's NAME_best.weights: whenever -map finds a new best (the
 * mAP at -points), saved atomically as every other file. */
static int save_if_best(run *R, double map)
{
    if (!(map > R->best_map)) return 0;
    R->best_map = map;
    if (R->rank == 0)
        printf("scalednn: new best mAP %.4f: saving %s_best.weights\n", map, R->base);
    return save_to(R, "%s/%s_best.weights", -1);
}

static int train_loop(run *R, char **paths, char **labels, int classes)
{
    network *net = sdnn_trainer_net(R->t, 0);
    load_args args = make_args(R, net, paths, labels, classes);
    int imgs = args.n * sdnn_trainer_processes(R->t);   /* the world's, for rates */
    layer last = net->layers[net->n - 1];
    int multiscale = R->job->task == SDNN_TASK_DETECTOR && last.random;
    sdnn_timeline *tl = sdnn_trainer_timeline(R->t);
    R->loader.tl = tl;   /* load_data spans and the waits for data */
    /* The fork's per-image resize ([yolo] resize != 1 on the last head, as
     * the fork reads it) and its [net] mosaic=1, letter_box=1 and flip=0
     * need the project's own batch builder; every other cfg keeps
     * Darknet's load_data.  Its batches are a pure function of (seed,
     * rank, batch index); a resumed run continues the sequence. */
    const sdnn_yolo_opts *yo =
        R->job->task == SDNN_TASK_DETECTOR ? sdnn_dialect_yolo(net, net->n - 1) : NULL;
    sdnn_batch_net_keys nk = R->nk;
    /* -map sees the images as training does: letterboxed with [net]
     * letter_box=1 or -letter_box, stretched otherwise (the fork passes its
     * net's letter_box to the mAP of a training run). */
    R->map_letter_box = nk.letter_box != 0;
    if (R->job->map_every > 0 && R->rank == 0 && R->job->task == SDNN_TASK_DETECTOR)
        printf("scalednn: -map evaluates %s images (%s)\n",
               R->map_letter_box ? "letterboxed" : "stretched",
               R->map_letter_box ? "[net] letter_box=1 or -letter_box"
                                 : "no letter_box=1 in [net], no -letter_box");
    int aug = nk.mosaic || nk.letter_box || !nk.flip;
    float resize = yo ? yo->resize : 1.0f;
    if (R->job->task == SDNN_TASK_DETECTOR && (resize != 1.0f || aug)) {
        uint64_t seed = R->job->seed >= 0 ? (uint64_t)R->job->seed : (uint64_t)time(0);
        R->loader.own = 1;
        R->loader.resize = resize;
        R->loader.flip = nk.flip != 0;
        R->loader.mosaic = nk.mosaic != 0;
        R->loader.mosaic_bound = nk.mosaic_bound != 0;
        R->loader.letter_box = nk.letter_box != 0;
        R->loader.seed = sdnn_splitmix64_mix(seed) ^ (uint64_t)R->rank;
        R->loader.first_batch = sdnn_trainer_iteration(R->t);
        printf("scalednn: batches built here ([yolo] resize=%g, jitter=%g; [net] mosaic=%d "
               "mosaic_bound=%d letter_box=%d flip=%d; seed %llu)\n",
               (double)resize, (double)args.jitter, R->loader.mosaic, R->loader.mosaic_bound,
               R->loader.letter_box, R->loader.flip, (unsigned long long)seed);
    }
    sdnn_loader_start(&R->loader, args);
    float avg_loss = -1;
    int count = 0;
    double run_t0 = what_time_is_it_now();
    size_t images_done = 0;
    const size_t first_iter = sdnn_trainer_iteration(R->t);
    while (sdnn_trainer_iteration(R->t) < (size_t)net->max_batches) {
        if (multiscale && count++ % 10 == 0) {
            /* One size for every replica, drawn once, as Darknet does;
             * between processes rank 0 draws and the others follow.  The
             * batch in flight is dropped first (the resize below would drop
             * it anyway), so Darknet's loader threads do not call rand()
             * while this draw does: with -threads 1 a run repeats. */
            sdnn_loader_stop(&R->loader);
            int dim = R->rank == 0 ? (rand() % 10 + 10) * 32 : 0;
            if (sdnn_trainer_broadcast_int(R->t, &dim) != SDNN_OK) return fail_status();
            if (sdnn_trainer_iteration(R->t) + 200 > (size_t)net->max_batches) dim = 608;
            printf("Resizing to %d\n", dim);
            sdnn_loader_resize(&R->loader, dim, dim);
            long dropped = sdnn_trainer_dropped(R->t);
            if (sdnn_trainer_resize(R->t, dim, dim) != SDNN_OK) return fail_status();
            dropped = sdnn_trainer_dropped(R->t) - dropped;
            if (dropped > 0)
                printf("scalednn: %ld preloaded batch%s at the old size dropped (%ld so far)\n",
                       dropped, dropped == 1 ? "" : "es", sdnn_trainer_dropped(R->t));
            net = sdnn_trainer_net(R->t, 0);
        }
        /* The engine holds up to preload batches: the loader's batches go
         * to the devices ahead of the step that trains them. */
        double wait = 0;
        while (sdnn_trainer_queued(R->t) < sdnn_trainer_preload(R->t)) {
            data train;
            if (sdnn_loader_next(&R->loader, &train) != SDNN_OK) return fail_status();
            wait += R->loader.wait_s;
            if (sdnn_trainer_feed(R->t, train) != SDNN_OK) {
                free_data(train);
                return fail_status();
            }
        }
        size_t before = sdnn_trainer_iteration(R->t);
        size_t seen_before = *net->seen;
        sdnn_step_stats st;
        sdnn_status s = sdnn_trainer_step_fed(R->t, &st);
        if (s != SDNN_OK) {
            /* Between processes the message names the rank that went
             * silent; exiting non-zero makes mpirun end the others. */
            fprintf(stderr, "error: rank %d: %s\n", R->rank, sdnn_last_error());
            fprintf(stderr, "error: rank %d: training stopped in the step after iteration %zu; "
                            "nothing was saved\n",
                    R->rank, before);
            return 1;
        }
        if (!isfinite(st.loss)) {
            fprintf(stderr, "error: rank %d: iteration %zu: the loss is %f (not finite); training "
                    "stopped, nothing was saved\n", R->rank, sdnn_trainer_iteration(R->t), st.loss);
            return 1;
        }
        if (avg_loss < 0) avg_loss = st.loss;
        avg_loss = avg_loss * .9f + st.loss * .1f;
        size_t i = sdnn_trainer_iteration(R->t);
        images_done += (size_t)imgs;
        double step_t = st.seconds + wait;
        double ips = step_t > 0 ? imgs / step_t : 0;
        if (tl) {
            double now = sdnn_now_s();
            sdnn_timeline_counter(tl, SDNN_TL_C_ITERATION, now, (double)i);
            sdnn_timeline_counter(tl, SDNN_TL_C_LOSS, now, st.loss);
            sdnn_timeline_counter(tl, SDNN_TL_C_IMAGES_S, now, ips);
        }
        if (R->job->task == SDNN_TASK_DETECTOR)
            printf("%zu: %f, %f avg, %f rate, %f seconds, %zu images", i, st.loss, avg_loss,
                   get_current_rate(net), step_t, *net->seen);
        else
            printf("%zu, %.3f: %f, %f avg, %f rate, %f seconds, %zu images", i,
                   (double)*net->seen / R->train_count, st.loss, avg_loss, get_current_rate(net),
                   step_t, *net->seen);
        double elapsed = what_time_is_it_now() - run_t0;
        char eta[64];
        /* Stock mode's catch-up can overshoot max_batches. */
        size_t left = i < (size_t)net->max_batches ? (size_t)net->max_batches - i : 0;
        format_eta(eta, sizeof eta, elapsed, i - first_iter, left);
        printf(" | %.1f img/s, %.2f MB exchanged, %.4f s exposed comm%s | %s\n", ips,
               (double)st.bytes / 1e6, st.exposed_s, st.synced ? " (weights averaged)" : "", eta);
        fflush(stdout);
        if (st.replanned) {
            sdnn_autoplan_print(sdnn_trainer_autoplan(R->t), stdout);
            fflush(stdout);
        }
        sdnn_autoplan_print_note(sdnn_trainer_autoplan(R->t), &R->replan_notes, stdout);
        double map = -1;
        if (R->valid && (crossed(before, i, (size_t)R->job->map_every) ||
                         i >= (size_t)net->max_batches)) {
            if (evaluate_map(R, &map) != 0) return 1;
            run_t0 += R->last_eval_s;   /* evaluation time is not training time */
            if (R->job->task == SDNN_TASK_DETECTOR && save_if_best(R, map) != 0) return 1;
        }
        sdnn_csv_row row = {i, *net->seen, st.loss, avg_loss, get_current_rate(net), step_t,
                            elapsed, ips, st.bytes, st.exposed_s, st.comm_s, wait,
                            st.sync_wait_s, map, st.host_loss_bytes, st.host_loss_wait_s};
        if (sdnn_csv_write(&R->csv, &row) != SDNN_OK) {
            /* A full disk must not cost the weights: keep training without
             * the CSV (the saves will report their own errors). */
            fprintf(stderr, "warning: %s; no more CSV rows are written\n", sdnn_last_error());
            sdnn_csv_close(&R->csv);
        }
        int bad = R->job->task == SDNN_TASK_DETECTOR
                      ? detector_saves(R, before, i)
                      : classifier_saves(R, before, i, seen_before, *net->seen);
        if (bad) return 1;
        sdnn_chart_tick(&R->chart, what_time_is_it_now());
        if (R->job->time_limit_s > 0 && elapsed >= (double)R->job->time_limit_s) {
            printf("scalednn: -time_limit_sec %ld reached at iteration %zu (%.2f s of training)\n",
                   R->job->time_limit_s, i, elapsed);
            break;
        }
        if (R->job->target > 0 && map >= R->job->target) {
            printf("scalednn: target %.4f reached at iteration %zu after %.2f s of training "
                   "(%.4f)\n", R->job->target, i, elapsed, map);
            break;
        }
    }
    double total = what_time_is_it_now() - run_t0;
    printf("scalednn: %zu images in %.2f s (%.1f img/s), %d replicas, mode=%s\n", images_done, total,
           total > 0 ? images_done / total : 0.0, sdnn_trainer_world(R->t),
           R->cfg.mode == SDNN_MODE_SCALEDNN ? "scalednn" : "stock");
    if (R->job->task == SDNN_TASK_DETECTOR) return save_to(R, "%s/%s_final.weights", -1) ? 1 : 0;
    return save_to(R, "%s/%s.weights", -1) ? 1 : 0;
}

/* SIGINT/SIGTERM (Ctrl-C, mpirun ending the other ranks): the save, the
 * new CSV and the chart in progress leave no temporary file (a trace with
 * records goes to its path), then the signal ends the process as it
 * would have. */
static void on_stop_signal(int sig)
{
    if (sdnn_save_interrupted(sig)) return;   /* handed to the saving thread */
    sdnn_csv_interrupted();
    sdnn_timeline_interrupted();
    sdnn_chart_interrupted();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_signal_handlers(void)
{
    /* A file-size limit makes a write fail (EFBIG) instead of killing the
     * process: the save then reports its short file and removes it. */
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The start banner's engine and devices: which engine trains, then each
 * replica's -gpus id and what the engine says of that device (name and
 * memory; the cpu engine: a CPU replica and its gemm).  Consecutive
 * replicas the engine describes alike share one line. */
static void print_devices(run *R)
{
    const sdnn_engine_ops *e = sdnn_trainer_engine(R->t);
    int n = sdnn_trainer_replicas(R->t);
    printf("scalednn: engine %s, %d replica%s (-gpus %s)\n", e->name, n, n == 1 ? "" : "s",
           R->job->gpus ? R->job->gpus : "0");
    char cur[320], next[320];
    int first = 0;
    sdnn_engine_describe_device(e, sdnn_trainer_device(R->t, 0), cur, sizeof cur);
    for (int r = 1; r <= n; ++r) {
        if (r < n) sdnn_engine_describe_device(e, sdnn_trainer_device(R->t, r), next, sizeof next);
        if (r < n && strcmp(cur, next) == 0) continue;
        if (r - first == 1) {
            printf("scalednn:   replica %d (-gpus id %d): %s\n", first,
                   sdnn_trainer_device(R->t, first), cur);
        } else {
            char ids[256];
            size_t at = 0;
            ids[0] = '\0';
            for (int q = first; q < r && at < sizeof ids - 16; ++q)
                at += (size_t)snprintf(ids + at, sizeof ids - at, "%s%d", q > first ? "," : "",
                                       sdnn_trainer_device(R->t, q));
            printf("scalednn:   replicas %d..%d (-gpus ids %s): %s\n", first, r - 1, ids, cur);
        }
        first = r;
        if (r < n) memcpy(cur, next, sizeof cur);
    }
    if (e == sdnn_engine_host()) {
        /* cpu_conv=: which convolutions run on oneDNN, which stay on libdarknet's and why. */
        char conv[4096];
        sdnn_conv_dnnl_describe(sdnn_trainer_net(R->t, 0), R->cfg.cpu_conv,
                                sdnn_config_cpu_conv_onednn(&R->cfg), "scalednn: ", conv,
                                sizeof conv);
        fputs(conv, stdout);
    }
}

/* -benchmark_layers: each layer's forward and backward time on a network
 * of its own (the planner's profile, plugin/plan/profile.c), before
 * training starts. */
static int benchmark_layers(const char *cfgpath, const char *cpu_conv)
{
    /* The times do not depend on the weights: random-init ones are timed. */
    network *net = sdnn_parse_network(cfgpath);
    sdnn_profile_opts po = SDNN_PROFILE_OPTS_INIT;
    po.iters = 3;
    po.cpu_conv = cpu_conv;
    sdnn_cost_profile prof;
    sdnn_status st = sdnn_profile_network(net, &po, &prof);
    sdnn_network_free(net);
    if (st != SDNN_OK) {
        fprintf(stderr, "error: -benchmark_layers: %s\n", sdnn_last_error());
        return -1;
    }
    printf("-benchmark_layers: median of %d passes, batch %d, one CPU replica\n", po.iters,
           prof.batch);
    printf("%5s  %-14s %10s %10s %10s\n", "layer", "type", "fwd_ms", "bwd_ms", "upd_ms");
    double f = 0, b = 0, u = 0;
    for (int i = 0; i < prof.n; ++i) {
        const sdnn_layer_cost *c = &prof.layer[i];
        printf("%5d  %-14s %10.3f %10.3f %10.3f\n", i, c->type, c->fwd_s * 1e3, c->bwd_s * 1e3,
               c->upd_s * 1e3);
        f += c->fwd_s;
        b += c->bwd_s;
        u += c->upd_s;
    }
    printf("%5s  %-14s %10.3f %10.3f %10.3f\n", "total", "", f * 1e3, b * 1e3, u * 1e3);
    fflush(stdout);
    sdnn_cost_profile_free(&prof);
    return 0;
}

/* The fork's chart.png (detector train): -chart FILE, else chart.png in
 * the backup folder (not under mpirun without -chart: Open MPI warns
 * against fork() in its processes, memory registered with RDMA
 * transports). */
static void chart_path(run *R)
{
    R->png[0] = '\0';
    if (R->job->task != SDNN_TASK_DETECTOR) return;
    if (!R->job->chart && getenv("OMPI_COMM_WORLD_SIZE")) return;
    if (R->job->chart) snprintf(R->png, sizeof R->png, "%s", R->job->chart);
    else snprintf(R->png, sizeof R->png, "%s/chart.png", R->backup);
}

static int start_chart(run *R, const char *csv)
{
    if (!R->png[0]) return 0;
    char title[256];
    snprintf(title, sizeof title, "%s: average loss%s", R->base,
             R->job->map_every > 0 ? " and mAP (-map)" : "");
    return sdnn_chart_start(&R->chart, R->png, csv, title);
}

/* The loader's [net] keys with -letter_box, refused here (before anything
 * is written) where the batch builder would refuse its first batch. */
static int read_loader_keys(run *R)
{
    const sdnn_train_job *job = R->job;
    if (sdnn_batch_read_net_keys(job->cfgfile, &R->nk) != SDNN_OK) return fail_status();
    if (R->nk.mosaic && (R->nk.letter_box || job->letter_box)) {
        fprintf(stderr, "error: %s: [net] mosaic=1 with %s: mosaic and letter_box cannot be "
                "combined (the fork refuses it too); drop one of them\n", job->cfgfile,
                job->letter_box ? "-letter_box" : "letter_box=1");
        return 1;
    }
    if (job->letter_box) R->nk.letter_box = 1;   /* the fork's -letter_box */
    if ((R->nk.mosaic || R->nk.letter_box || !R->nk.flip) && job->task != SDNN_TASK_DETECTOR) {
        fprintf(stderr, "error: %s: [net] mosaic, letter_box and flip=0 are built for detector "
                "training only (the fork's detection loader); remove them for a classifier\n",
                job->cfgfile);
        return 1;
    }
    return 0;
}

/* Every file the run writes, collected (outputs.h) and checked against
 * each other and against every input, then the ones the user named
 * checked as files to write (never over a file that is not ours; the
 * folder takes a new file).  rank and np: the process's (mpirun's
 * environment; 0 and 1 alone): rank 0 writes everything but the other
 * ranks' traces. */
static int check_outputs(run *R, const char *csv, const char *csv_what, const char *train_list,
                         const char *valid, const char *label_file, char **paths, int npaths,
                         int rank, int np)
{
    const sdnn_train_job *job = R->job;
    const int det = job->task == SDNN_TASK_DETECTOR;
    static const char *const det_saves[][2] = {{"the final weights", "_final.weights"},
                                               {"the .backup weights", ".backup"},
                                               {"the _last weights", "_last.weights"},
                                               {"the _best weights (-map)", "_best.weights"}};
    static const char *const cls_saves[][2] = {{"the final weights", ".weights"},
                                               {"the .backup weights", ".backup"}};
    sdnn_outputs o;
    int rc = -1;
    char p[2400], what[160];
    if (sdnn_outputs_init(&o, R->backup, R->base) != 0) goto out;
    int nsaves = det ? (job->map_every > 0 ? 4 : 3) : 2;
    for (int k = 0; k < nsaves; ++k) {
        const char *const *sv = det ? det_saves[k] : cls_saves[k];
        snprintf(p, sizeof p, "%s/%s%s", R->backup, R->base, sv[1]);
        if (sdnn_outputs_add(&o, sv[0], p, 1) != 0) goto out;
        snprintf(what, sizeof what, "%s' error-feedback state", sv[0]);
        snprintf(p, sizeof p, "%s/%s%s.ef", R->backup, R->base, sv[1]);
        if (sdnn_outputs_add(&o, what, p, 1) != 0) goto out;
    }
    if (sdnn_outputs_add_periodic(&o) != 0) goto out;
    snprintf(p, sizeof p, "%s/%s", R->backup, SDNN_LOCK_NAME);
    if (sdnn_outputs_add(&o, "the backup folder's lock file", p, 0) != 0) goto out;
    if (sdnn_outputs_add(&o, csv_what, csv, 0) != 0) goto out;
    const char *png_what = job->chart ? "-chart" : "the chart";
    if (R->png[0] && sdnn_outputs_add(&o, png_what, R->png, 0) != 0) goto out;
    const char *tl = R->cfg.timeline;
    if (tl[0]) {
        if (sdnn_outputs_add(&o, "[scalednn] timeline=", tl, 0) != 0) goto out;
        for (int r = 1; r < np && r < 4096; ++r) {
            snprintf(p, sizeof p, "%s.rank%d", tl, r);
            snprintf(what, sizeof what, "[scalednn] timeline= (rank %d's)", r);
            if (sdnn_outputs_add(&o, what, p, 0) != 0) goto out;
        }
    }
    if (sdnn_outputs_check(&o) != 0) goto out;
    /* The inputs: the weights to start from may be a weights save. */
    const char *const inputs[][2] = {{"the data file", job->datacfg},
                                     {"the cfg file", job->cfgfile},
                                     {"the train list", train_list},
                                     {"the valid list", valid},
                                     {"the labels file", det ? NULL : label_file}};
    for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; ++k)
        if (sdnn_outputs_check_input(&o, inputs[k][0], inputs[k][1], 0) != 0) goto out;
    if (sdnn_outputs_check_input(&o, "the weights file to start from", job->weights, 1) != 0)
        goto out;
    if (sdnn_outputs_any_exist(&o)) {
        char lbl[4096];
        for (int i = 0; i < npaths; ++i) {
            if (sdnn_outputs_check_input(&o, "an image of the train list", paths[i], 0) != 0)
                goto out;
            if (det && sdnn_label_path(paths[i], lbl, sizeof lbl) == 0 &&
                sdnn_outputs_check_input(&o, "a label file of the train list", lbl, 0) != 0)
                goto out;
        }
        for (int i = 0; i < R->nvalid; ++i) {
            if (sdnn_outputs_check_input(&o, "an image of the valid list", R->valid[i], 0) != 0)
                goto out;
            if (det && sdnn_label_path(R->valid[i], lbl, sizeof lbl) == 0 &&
                sdnn_outputs_check_input(&o, "a label file of the valid list", lbl, 0) != 0)
                goto out;
        }
    }
    /* The backup folder takes the saves now, not at the first one after
     * hours of training (a new file written, synced and removed); then the
     * files the user may have named, as files to write. */
    if (rank == 0) {
        if (sdnn_prepare_dir(R->backup) != SDNN_OK) {
            fprintf(stderr, "error: %s: backup=%s: %s\n", job->datacfg, R->backup,
                    sdnn_last_error());
            goto out;
        }
        if (sdnn_check_overwrite(csv, csv_what, sdnn_csv_prefixes) != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            goto out;
        }
        /* A new CSV is made beside its path; a resumed one is appended to. */
        struct stat sb;
        int exists = stat(csv, &sb) == 0;
        int append = job->weights && !job->clear && exists && sb.st_size > 0;
        if ((!exists || S_ISREG(sb.st_mode)) && !append && sdnn_check_dir_writable(csv) != SDNN_OK) {
            fprintf(stderr, "error: %s %s: %s\n", csv_what, csv, sdnn_last_error());
            goto out;
        }
        if (R->png[0] && sdnn_chart_check(R->png, png_what) != 0) goto out;
    }
    if (tl[0]) {
        if (rank > 0) snprintf(p, sizeof p, "%s.rank%d", tl, rank);
        else snprintf(p, sizeof p, "%s", tl);
        if (sdnn_timeline_check(p) != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            goto out;
        }
    }
    rc = 0;
out:
    sdnn_outputs_free(&o);
    return rc;
}

int sdnn_train(const sdnn_train_job *job)
{
    install_signal_handlers();
    if (!readable("data file", job->datacfg) || !readable("cfg file", job->cfgfile)) return 1;
    if (job->weights && !readable("weights file", job->weights)) return 1;
    if (job->nreplicas < 1) return fail("-gpus must list at least one id (e.g. -gpus 0,1)");

    run R;
    memset(&R, 0, sizeof R);
    shadow sh = {"", 0};
    int lock_fd = -1;
    R.job = job;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(job->cfgfile, &R.cfg, &stripped) != SDNN_OK) return fail_status();
    {
        /* The ids against virtual= (bad usage of -gpus: exit 2, as the
         * parser's), then the engine for them: an id past the device count
         * or engine=gpu in a CPU build stops here, before any image is read. */
        const char *gl = job->gpus ? job->gpus : "0";
        if (sdnn_config_check_devices(&R.cfg, job->devices, job->nreplicas) != SDNN_OK) {
            fprintf(stderr, "error: -gpus %s: %s (cfg: %s)\n", gl, sdnn_last_error(), job->cfgfile);
            sdnn_stripped_cfg_close(&stripped);
            return 2;
        }
        const sdnn_engine_ops *eops = NULL;
        if (sdnn_engine_resolve_on(R.cfg.engine, job->devices, job->nreplicas, &eops, NULL, 0) !=
            SDNN_OK) {
            fprintf(stderr, "error: %s: [scalednn] engine=%s with -gpus %s: %s\n", job->cfgfile,
                    R.cfg.engine, gl, sdnn_last_error());
            sdnn_stripped_cfg_close(&stripped);
            return 1;
        }
    }
    {
        /* Under mpirun every process runs this.  A local backend would make
         * each of them an independent run on the same files; a cfg without
         * a [scalednn] section trains with Darknet's protocol across the
         * processes (its central host), as mode=stock backend=mpi does. */
        const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
        int np = ws ? atoi(ws) : 1;
        if (np > 1 && !R.cfg.present) {
            snprintf(R.cfg.backend, sizeof R.cfg.backend, "mpi");
        } else if (np > 1 && strcmp(R.cfg.backend, "local") == 0) {
            fprintf(stderr,
                    "error: %s: [scalednn] backend=local, "
                    "but this process is one of %d started by mpirun: each would train alone on "
                    "the same files. Set backend=mpi (or auto, the default) to train across the processes, or "
                    "start a single process without mpirun\n",
                    job->cfgfile, np);
            sdnn_stripped_cfg_close(&stripped);
            return 1;
        }
    }

    list *options = read_data_cfg((char *)job->datacfg);
    char *train_list = option_find_str(options, "train", "data/train.list");
    char *backup = NULL;
    for (node *n = options ? options->front : NULL; n && !backup; n = n->next)
        if (strcmp(((kvp_ *)n->val)->key, "backup") == 0) backup = ((kvp_ *)n->val)->val;
    char *label_file = option_find_str(options, "labels", "data/labels.list");
    int classes = option_find_int(options, "classes", 2);
    int rc = 1;
    char **paths = NULL, **labels = NULL;
    list *plist = NULL, *llist = NULL, *vlist = NULL;
    network **nets = NULL;

    if (sdnn_check_readable(train_list) != SDNN_OK) {
        fprintf(stderr, "error: %s: train=%s: %s\n", job->datacfg, train_list, sdnn_last_error());
        goto out;
    }
    plist = get_paths(train_list);
    paths = (char **)list_to_array(plist);
    R.train_count = plist->size;
    double check_t0 = what_time_is_it_now();
    if (check_train_list(job, train_list, paths, plist->size) != 0) goto out;
    double check_s = what_time_is_it_now() - check_t0;
    if (job->task == SDNN_TASK_CLASSIFIER && !readable("labels file", label_file)) goto out;
    /* Darknet's default, /backup/, is a folder of the root of the file
     * system; a cut name would be another folder. */
    if (!backup || !*backup) {
        fprintf(stderr, "error: %s: no backup= key: name the folder for the weights, e.g. "
                "backup=backup/ (Darknet would write to /backup/)\n", job->datacfg);
        goto out;
    }
    if (strlen(backup) >= sizeof R.backup - 64) {
        fprintf(stderr, "error: %s: backup=%.60s...: %zu characters, at most %zu\n", job->datacfg,
                backup, strlen(backup), sizeof R.backup - 65);
        goto out;
    }
    snprintf(R.backup, sizeof R.backup, "%s", backup);
    /* Every run writes its CSV: -csv, csv=, or BACKUP/CFGBASE.csv. */
    R.base = basecfg((char *)job->cfgfile);
    char csv_default[2048];
    snprintf(csv_default, sizeof csv_default, "%s/%s.csv", R.backup, R.base);
    const char *csv = job->csv ? job->csv : (R.cfg.csv[0] ? R.cfg.csv : csv_default);
    const char *csv_what = job->csv ? "-csv" : R.cfg.csv[0] ? "[scalednn] csv=" : "the CSV";
    char label[128];
    snprintf(label, sizeof label, "%s%s%s, %d replica%s",
             R.cfg.mode == SDNN_MODE_STOCK ? "stock" : "scalednn",
             R.cfg.mode == SDNN_MODE_STOCK || strcmp(R.cfg.compress, "none") == 0 ? "" : " ",
             R.cfg.mode == SDNN_MODE_STOCK || strcmp(R.cfg.compress, "none") == 0 ? "" : R.cfg.compress,
             job->nreplicas, job->nreplicas > 1 ? "s" : "");
    if (job->target > 0 && job->map_every <= 0) {
        fprintf(stderr, "error: -target %g needs -map (the accuracy is measured on valid=)\n",
                job->target);
        goto out;
    }
    char *valid = NULL;
    if (job->map_every > 0) {
        valid = option_find_str(options, "valid", NULL);
        if (!valid || sdnn_check_readable(valid) != SDNN_OK) {
            fprintf(stderr, "error: %s: -map needs a readable valid= list%s%s\n", job->datacfg,
                    valid ? ": " : " (the key is missing)", valid ? sdnn_last_error() : "");
            goto out;
        }
        vlist = get_paths(valid);
        R.valid = (char **)list_to_array(vlist);
        R.nvalid = vlist->size;
        if (R.nvalid == 0) {
            fprintf(stderr, "error: %s: valid=%s lists no images\n", job->datacfg, valid);
            goto out;
        }
    }
    if (read_loader_keys(&R) != 0) goto out;
    /* mpirun tells each process its rank and the world's size; the
     * trainer's comm is opened only once every check has passed. */
    const char *wr = getenv("OMPI_COMM_WORLD_RANK"), *ws = getenv("OMPI_COMM_WORLD_SIZE");
    const int env_rank = wr ? atoi(wr) : 0, env_np = ws && atoi(ws) > 1 ? atoi(ws) : 1;
    /* The folder (no file yet) so that the outputs' paths resolve. */
    if (sdnn_mkdirs(R.backup) != SDNN_OK) {
        fprintf(stderr, "error: %s: backup=%s: %s\n", job->datacfg, backup, sdnn_last_error());
        goto out;
    }
    chart_path(&R);
    if (check_outputs(&R, csv, csv_what, train_list, valid, label_file, paths, R.train_count,
                      env_rank, env_np) != 0)
        goto out;
    if (job->benchmark_layers && benchmark_layers(stripped.path, R.cfg.cpu_conv) != 0) goto out;
    srand(job->seed >= 0 ? (unsigned)job->seed : (unsigned)time(0));
    if (sdnn_replicas_create(stripped.path, job->weights, job->clear, job->nreplicas, &nets) !=
        SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        goto out;
    }
    if (job->max_batches > 0)
        for (int r = 0; r < job->nreplicas; ++r) nets[r]->max_batches = job->max_batches;
    network *n0 = nets[0];
    if (job->task == SDNN_TASK_DETECTOR) {
        /* The classes a box may have are the network's (its [yolo]/[region]). */
        int net_classes = sdnn_detector_classes(n0);
        check_t0 = what_time_is_it_now();
        if (net_classes >= 1 && check_labels(job, paths, R.train_count, net_classes, &sh) != 0)
            goto out;
        check_s += what_time_is_it_now() - check_t0;
    }
    {
        /* Degenerate runs would save an untrained (or unchanged) network
         * over the existing final weights: say so and stop. */
        size_t it0 = (size_t)get_current_batch(n0);
        int has_cost = 0;
        for (int i = 0; i < n0->n; ++i) has_cost |= n0->layers[i].cost != NULL;
        if (!has_cost) {
            fprintf(stderr, "error: %s: no layer computes a loss ([cost], [softmax], [yolo], "
                    "[region] or [detection]): the loss would be nan and nothing would train\n",
                    job->cfgfile);
            goto out;
        }
        if (n0->max_batches <= 0) {
            fprintf(stderr, "error: %s: max_batches=%d: nothing to train (set [net] max_batches= "
                    "or pass -max_batches N); the existing weights are kept\n", job->cfgfile,
                    n0->max_batches);
            goto out;
        }
        if (it0 >= (size_t)n0->max_batches) {
            const char *w = job->weights ? job->weights : "the network";
            /* -max_batches takes an int (the flag's bound, and [net]'s). */
            if (it0 < (size_t)INT_MAX)
                fprintf(stderr, "error: %s is at iteration %zu, and max_batches is %d: nothing to "
                        "train; pass -max_batches N with N from %zu to %d to continue (or -clear "
                        "to start again from iteration 0); the existing weights are kept\n", w,
                        it0, n0->max_batches, it0 + 1, INT_MAX);
            else
                fprintf(stderr, "error: %s is at iteration %zu, and max_batches is %d: nothing to "
                        "train, and no -max_batches reaches past it (at most %d); pass -clear "
                        "to train these weights from iteration 0; the existing weights are "
                        "kept\n", w, it0, n0->max_batches, INT_MAX);
            goto out;
        }
        if (job->task == SDNN_TASK_CLASSIFIER) {
            /* Darknet's loader reads labels[0 .. classes) and gives an image
             * the label whose name is in its path; the network's output must
             * hold one value per class. */
            labels = sdnn_read_class_names(job->datacfg, "labels", label_file, NULL, &llist);
            if (!labels) goto out;
            int outputs = n0->layers[n0->n - 1].outputs;
            if (llist->size < classes) {
                fprintf(stderr, "error: %s: classes=%d but labels=%s names %d\n", job->datacfg,
                        classes, label_file, llist->size);
                goto out;
            }
            if (outputs != classes) {
                fprintf(stderr, "error: %s: classes=%d, but the network (%s) gives %d outputs "
                        "(its last layer)\n", job->datacfg, classes, job->cfgfile, outputs);
                goto out;
            }
            int bad = 0;
            for (int i = 0; i < R.train_count; ++i)
                if (sdnn_label_of_path(paths[i], labels, classes) < 0 && bad++ < SHOWN_BAD)
                    fprintf(stderr, "error: %s:%d: %s: no label of %s in its path\n", train_list,
                            i + 1, paths[i], label_file);
            if (bad) {
                fprintf(stderr, "error: %d of %d images have no label in their path (Darknet "
                        "would train them with an all-zero truth)\n", bad, R.train_count);
                goto out;
            }
        }
    }
    /* One run per backup folder.  Past every check: the lock file is the
     * first file written.  Between processes rank 0 alone writes there. */
    if (env_rank == 0 && sdnn_lock_dir(R.backup, &lock_fd) != SDNN_OK) {
        fprintf(stderr, "error: %s: backup=%s: %s\n", job->datacfg, R.backup, sdnn_last_error());
        goto out;
    }
    printf("scalednn: checked %d images%s in %.3f s\n", R.train_count,
           job->task == SDNN_TASK_DETECTOR ? " and their label files" : "", check_s);
    sdnn_trainer_opts topts = SDNN_TRAINER_OPTS_INIT;
    topts.devices = job->devices;
    if (sdnn_trainer_create_opts(nets, job->nreplicas, &R.cfg, &topts, 1, &R.t) != SDNN_OK) {
        /* The engine's copies are made here: a layer it does not run is
         * named (layer, type, what it runs).  The timeline it may have
         * started recorded nothing: the previous one stays. */
        fprintf(stderr, "error: %s (engine=%s, -gpus %s): %s\n", job->cfgfile, R.cfg.engine,
                job->gpus ? job->gpus : "0", sdnn_last_error());
        goto out;
    }
    /* Between processes: rank 0 alone prints the progress on stdout and
     * writes the CSV (errors still go to stderr on every rank), and each
     * rank draws its own images (Darknet's loader uses rand()). */
    R.rank = sdnn_trainer_rank(R.t);
    if (R.rank == 0) {
        /* Past every refusal: the temp files of this cfg's saves whose
         * process died, recognised by name and first bytes (saveio.h). */
        int cleaned = 0;
        sdnn_clean_temps(R.backup, R.base, &cleaned);
        if (cleaned)
            fprintf(stderr, "warning: removed %d stale temporary file%s of interrupted saves in %s\n",
                    cleaned, cleaned == 1 ? "" : "s", R.backup);
    }
    if (R.rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "error: rank %d: cannot silence stdout\n", R.rank);
        goto out;
    }
    if (sdnn_trainer_processes(R.t) > 1)
        srand((job->seed >= 0 ? (unsigned)job->seed : (unsigned)time(0)) + (unsigned)R.rank);
    {
        /* Only where the process was confined to fewer cores than the
         * host has (a binding): more replicas than cores by choice is the
         * user's call. */
        int cores = sdnn_usable_cores();
        if (job->nreplicas > cores && cores < sysconf(_SC_NPROCESSORS_ONLN))
            fprintf(stderr,
                    "warning: rank %d: %d replicas share the %d core%s this process may run on "
                    "(its CPU affinity; mpirun binds each process to one core when -np is 1 or "
                    "2): start it with mpirun --bind-to none, or --map-by slot:PE=%d\n",
                    R.rank, job->nreplicas, cores, cores > 1 ? "s" : "", job->nreplicas);
    }
    if (R.rank == 0) {
        /* A resumed run appends to the previous run's CSV; a new one takes
         * the path with its first row (trace.h). */
        sdnn_status cs = job->weights && !job->clear ? sdnn_csv_open_append(&R.csv, csv, label)
                                                     : sdnn_csv_open(&R.csv, csv, label);
        if (cs != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            goto out;
        }

        char desc[1024];
        sdnn_config_describe(&R.cfg, desc, sizeof desc);
        printf("scalednn: %s [scalednn] %s\n", R.cfg.present ? "using" : "no section, stock Darknet protocol;",
               desc);
        if (R.cfg.present && strcmp(R.cfg.backend, "auto") == 0) {
            /* What the default became (stock mode in one process opens none). */
            char why[160];
            const char *b = sdnn_config_backend_why(&R.cfg, why, sizeof why);
            if (R.cfg.mode == SDNN_MODE_SCALEDNN || strcmp(b, "local") != 0)
                printf("scalednn: backend=auto is %s (%s)\n", b, why);
        }
        if (R.cfg.mode == SDNN_MODE_SCALEDNN && !(R.cfg.bucket_mb > 0) &&
            strcmp(R.cfg.compress, "auto") == 0) {
            char fl[256];
            sdnn_autoplan_describe_factors(&R.cfg, fl, sizeof fl);
            printf("scalednn: compress=auto plans for time to accuracy = step x iteration "
                   "factor (iterations to the target against none's; %s): %s\n",
                   R.cfg.iter_factor[0] ? "iter_factor= over the codecs' own"
                                        : "the codecs' own, iter_factor= overrides",
                   fl);
        }
        print_devices(&R);
        fflush(stdout);
    }
    /* The trainer gives OpenBLAS one thread per replica, or every core to a
     * single replica; small networks run faster with one (bench/RESULTS.md). */
    const char *bt = getenv("SDNN_BLAS_THREADS");
    if (bt && atoi(bt) > 0) sdnn_blas_set_threads(atoi(bt));
    network *net = sdnn_trainer_net(R.t, 0);
    printf("%s\nLearning Rate: %g, Momentum: %g, Decay: %g\n", R.base, net->learning_rate,
           net->momentum, net->decay);
    if (R.t && sdnn_trainer_exchange(R.t)) {
        const sdnn_exchange *ex = sdnn_trainer_exchange(R.t);
        printf("scalednn: %zu parameters in %d bucket%s, world of %d (%d process%s)\n",
               sdnn_network_param_count(net), sdnn_exchange_nbuckets(ex),
               sdnn_exchange_nbuckets(ex) == 1 ? "" : "s", sdnn_exchange_world(ex),
               sdnn_trainer_processes(R.t), sdnn_trainer_processes(R.t) == 1 ? "" : "es");
    }
    if (job->weights && !job->clear && sdnn_trainer_has_ef(R.t)) {
        /* Resuming: the error-feedback residuals saved with these weights.
         * Without them training is still correct, it only re-accumulates. */
        if (sdnn_trainer_load_ef(R.t, job->weights) == SDNN_OK)
            printf("scalednn: error-feedback residuals restored from %s.ef\n", job->weights);
        else
            fprintf(stderr, "warning: error-feedback residuals not restored, starting from zero: %s\n",
                    sdnn_last_error());
    }
    R.labels = labels;
    R.classes = classes;
    R.best_map = -1;
    if (R.rank == 0 && start_chart(&R, csv) != 0) goto out;
    rc = train_loop(&R, paths, labels, classes);
    sdnn_chart_finish(&R.chart);
    sdnn_loader_stop(&R.loader);
    if (R.cfg.timeline[0]) {
        /* Like the CSV, a trace that cannot be written costs no weights:
         * a warning, and the exit code stays the training's. */
        size_t dropped = sdnn_timeline_dropped(sdnn_trainer_timeline(R.t));
        if (sdnn_trainer_close_timeline(R.t) != SDNN_OK)
            fprintf(stderr, "warning: %s\n", sdnn_last_error());
        else
            printf("scalednn: timeline written to %s%s\n", R.cfg.timeline,
                   dropped ? " (some records were dropped, see otherData)" : "");
    }

out:
    shadow_remove(&sh);
    if (lock_fd >= 0) close(lock_fd);
    sdnn_csv_close(&R.csv);
    if (R.t) sdnn_trainer_destroy(R.t);
    else if (nets) sdnn_replicas_free(nets, job->nreplicas);
    free(R.base);
    if (llist) {
        free_ptrs((void **)labels, llist->size);
        free_list(llist);
    }
    if (plist) {
        free_ptrs((void **)paths, plist->size);
        free_list(plist);
    }
    if (vlist) {
        free_ptrs((void **)R.valid, vlist->size);
        free_list(vlist);
    }
    sdnn_free_options(options);
    sdnn_stripped_cfg_close(&stripped);
    return rc;
}
