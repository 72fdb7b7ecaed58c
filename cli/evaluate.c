/*
 * evaluate: see evaluate.h.  The AP arithmetic lives in plugin/evalmap.c;
 * here are the files (lists, label files, images, weights), the network
 * runs and the printed tables.  Every file is checked before Darknet reads
 * it, because Darknet's readers end the process on a file they cannot open
 * or decode.
 */
#include "detector_cmd.h"
#include "dialect.h"
#include "evaluate.h"
#include "flags.h"
#include "datacheck.h"
#include "config.h"
#include "replicas.h"
#include "saveio.h"
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- paths and files ----------------------------------------------------- */

int sdnn_label_of_path(const char *path, char *const *labels, int n)
{
    int best = -1;
    size_t best_end = 0, best_len = 0;
    for (int i = 0; i < n; ++i) {
        size_t len = strlen(labels[i]);
        if (len == 0) continue;
        const char *hit = NULL;
        for (const char *p = strstr(path, labels[i]); p; p = strstr(p + 1, labels[i])) hit = p;
        if (!hit) continue;
        size_t end = (size_t)(hit - path) + len;
        if (best < 0 || end > best_end || (end == best_end && len > best_len)) {
            best = i;
            best_end = end;
            best_len = len;
        }
    }
    return best;
}

/* Replace the first `from` in s (in place, capacity cap) by `to`. */
static int replace_first(char *s, size_t cap, const char *from, const char *to)
{
    char *p = strstr(s, from);
    if (!p) return 0;
    size_t lf = strlen(from), lt = strlen(to), ls = strlen(s);
    if (ls - lf + lt + 1 > cap) return -1;
    memmove(p + lt, p + lf, ls - (size_t)(p - s) - lf + 1);
    memcpy(p, to, lt);
    return 0;
}

int sdnn_label_path(const char *img, char *out, size_t len)
{
    static const char *const from[] = {"images", "JPEGImages", "raw", ".jpg", ".png", ".JPG",
                                       ".JPEG"};
    static const char *const to[] = {"labels", "labels", "labels", ".txt", ".txt", ".txt",
                                     ".txt"};
    if (strlen(img) + 1 > len) return -1;
    strcpy(out, img);
    for (size_t k = 0; k < sizeof from / sizeof from[0]; ++k)
        if (replace_first(out, len, from[k], to[k]) != 0) return -1;
    return 0;
}

const char *sdnn_image_kind(const char *path)
{
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return "png";
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpeg";
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "bmp";
    if (n >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') return "pnm";
    return NULL;
}

static sdnn_status check_image(const char *path)
{
    if (access(path, R_OK) != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "image %s: %s", path, strerror(errno));
    return sdnn_image_check(path); /* signature and structure (datacheck.h) */
}

typedef struct truth_set {
    sdnn_map_truth *t;
    int n, cap;
} truth_set;

static sdnn_status push_truth(truth_set *s, sdnn_map_truth t)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        sdnn_map_truth *p = realloc(s->t, (size_t)cap * sizeof *p);
        if (!p) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d truth boxes", cap);
        s->t = p;
        s->cap = cap;
    }
    s->t[s->n++] = t;
    return SDNN_OK;
}

/* Appends the boxes of a Darknet label file ("class x y w h" per line, the
 * box relative to the image; blank lines allowed). */
static sdnn_status read_truths(const char *path, int classes, truth_set *s)
{
    SDNN_CHECK(sdnn_check_readable(path)); /* a FIFO or a device: refused unopened */
    FILE *f = fopen(path, "r");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "label file %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    sdnn_status st = SDNN_OK;
    while (st == SDNN_OK && getline(&line, &cap, f) >= 0) {
        ++lineno;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        int cls, used = 0;
        float x, y, w, h;
        if (sscanf(line, "%d %f %f %f %f %n", &cls, &x, &y, &w, &h, &used) != 5 ||
            line[used] != '\0' || !isfinite(x) || !isfinite(y) || !(w > 0) || !(h > 0) ||
            !isfinite(w) || !isfinite(h)) {
            line[strcspn(line, "\r\n")] = '\0';
            st = SDNN_ERROR(SDNN_ERR_INVALID,
                            "%s:%d: \"%.60s\": expected \"class x y w h\" with w, h > 0", path,
                            lineno, line);
        } else if (cls < 0 || cls >= classes) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: class %d is not in 0..%d (the network's classes)",
                            path, lineno, cls, classes - 1);
        } else {
            st = push_truth(s, (sdnn_map_truth){cls, {x, y, w, h}});
        }
    }
    free(line);
    fclose(f);
    return st;
}

/* ---- detection ------------------------------------------------------------ */

int sdnn_detector_classes(const network *net)
{
    int classes = -1;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        if (l->type != YOLO && l->type != REGION && l->type != DETECTION) continue;
        if (classes >= 0 && l->classes != classes) return -1;
        classes = l->classes;
    }
    return classes > 0 ? classes : -1;
}

/* Precision, recall and F1 of the matches accumulated in m. */
static sdnn_status pr_of(const sdnn_map *m, int classes, sdnn_map_pr *pr)
{
    sdnn_ap *ap = calloc((size_t)classes, sizeof *ap);
    if (!ap) return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory for %d classes", classes);
    sdnn_map_result r;
    sdnn_status st = sdnn_map_compute(m, ap, &r);
    int tp = 0, dets = 0, truths = 0;
    for (int c = 0; c < classes; ++c) {
        tp += ap[c].tp;
        dets += ap[c].dets;
        truths += ap[c].truths;
    }
    free(ap);
    pr->tp = tp;
    pr->fp = dets - tp;
    pr->fn = truths - tp;
    pr->precision = dets ? (double)tp / dets : 0;
    pr->recall = truths ? (double)tp / truths : 0;
    pr->f1 = pr->precision + pr->recall > 0
                 ? 2 * pr->precision * pr->recall / (pr->precision + pr->recall)
                 : 0;
    return st;
}

image sdnn_detector_input(const network *net, image im, int letter_box)
{
    return letter_box ? letterbox_image(im, net->w, net->h) : resize_image(im, net->w, net->h);
}

detection *sdnn_detector_boxes(network *net, image im, int letter_box, float thresh, float hier,
                               int *nboxes)
{
    /* Darknet's correct_*_boxes undo a letterbox of a w x h image; given the
     * network's own size they leave the boxes as they are, relative to the
     * stretched input and so to the image. */
    int w = letter_box ? im.w : net->w, h = letter_box ? im.h : net->h;
    return get_network_boxes(net, w, h, thresh, hier, 0, 1, nboxes);
}

/* Detections of one image: every class with probability > thresh of every
 * box left after NMS. */
static sdnn_status detect(network *net, const char *path, const sdnn_map_eval_opts *o,
                          int classes, sdnn_map_det **dets, int *ndets, int *cap)
{
    image im = load_image((char *)path, 0, 0, net->c);
    image sized = sdnn_detector_input(net, im, o->letter_box);
    network_predict(net, sized.data);
    int nboxes = 0;
    detection *d = sdnn_detector_boxes(net, im, o->letter_box, o->thresh, .5f, &nboxes);
    sdnn_dialect_nms(net, d, nboxes, classes, o->nms);
    sdnn_status st = SDNN_OK;
    *ndets = 0;
    for (int i = 0; i < nboxes && st == SDNN_OK; ++i)
        for (int j = 0; j < classes; ++j) {
            if (!(d[i].prob[j] > o->thresh)) continue;
            if (*ndets == *cap) {
                int c2 = *cap ? 2 * *cap : 256;
                sdnn_map_det *p = realloc(*dets, (size_t)c2 * sizeof *p);
                if (!p) {
                    st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for %d detections", c2);
                    break;
                }
                *dets = p;
                *cap = c2;
            }
            box b = d[i].bbox;
            (*dets)[(*ndets)++] = (sdnn_map_det){j, d[i].prob[j], {b.x, b.y, b.w, b.h}};
        }
    free_detections(d, nboxes);
    free_image(sized);
    free_image(im);
    return st;
}

sdnn_status sdnn_detector_map_eval(network *net, char **paths, int n,
                                   const sdnn_map_eval_opts *opts, sdnn_ap *per_class,
                                   sdnn_map_result *result)
{
    return sdnn_detector_map_eval_pr(net, paths, n, opts, per_class, result, NULL);
}

double sdnn_map_at_points(const sdnn_map_result *r, int points)
{
    return points == 11 ? r->map11 : points == 101 ? r->map101 : r->map_all;
}

sdnn_status sdnn_check_net_finite(const network *net, const char *weights)
{
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        float *mean, *var;
        size_t nbn = sdnn_layer_bn_stats(l, &mean, &var);
        for (size_t e = 0; e < nbn; ++e)
            if (!isfinite(mean[e]) || !isfinite(var[e]))
                return SDNN_ERROR(SDNN_ERR_NONFINITE,
                                  "%s: layer %d (%s) %s[%zu] is %f: the weights are not finite "
                                  "(a run that diverged?); nothing was evaluated",
                                  weights, i, sdnn_layer_type_name(l->type),
                                  isfinite(mean[e]) ? "rolling_variance" : "rolling_mean", e,
                                  isfinite(mean[e]) ? var[e] : mean[e]);
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(l, p);
        for (int j = 0; j < k; ++j)
            for (size_t e = 0; e < p[j].n; ++e)
                if (!isfinite(p[j].val[e]))
                    return SDNN_ERROR(SDNN_ERR_NONFINITE,
                                      "%s: layer %d (%s) %s[%zu] is %f: the weights are not "
                                      "finite (a run that diverged?); nothing was evaluated",
                                      weights, i, sdnn_layer_type_name(l->type), p[j].what, e,
                                      p[j].val[e]);
    }
    return SDNN_OK;
}

sdnn_status sdnn_detector_map_eval_pr(network *net, char **paths, int n,
                                      const sdnn_map_eval_opts *opts, sdnn_ap *per_class,
                                      sdnn_map_result *result, sdnn_map_pr *pr)
{
    sdnn_map_eval_opts o = SDNN_MAP_EVAL_OPTS_INIT;
    if (opts) o = *opts;
    memset(result, 0, sizeof *result);
    if (!net || n < 1 || !paths)
        return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: no network or no images (%d)", n);
    if (!(o.thresh >= 0 && o.thresh < 1) || !(o.nms > 0 && o.nms <= 1))
        return SDNN_ERROR(SDNN_ERR_INVALID, "mAP: thresh %g must be in [0, 1), nms %g in (0, 1]",
                          (double)o.thresh, (double)o.nms);
    int classes = sdnn_detector_classes(net);
    if (classes < 1)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "mAP: the network has no [yolo], [region] or [detection] layer "
                          "(or they disagree on classes)");

    /* Everything read first: first[i] .. first[i+1] are image i's truths. */
    truth_set truths = {0};
    int *first = malloc((size_t)(n + 1) * sizeof *first);
    sdnn_map *m = NULL, *mpr = NULL;
    sdnn_map_det *dets = NULL;
    int ndets = 0, cap = 0;
    sdnn_status st = SDNN_OK;
    if (!first) return SDNN_ERROR(SDNN_ERR_NOMEM, "mAP: no memory for %d images", n);
    char lbl[4096];
    for (int i = 0; i < n && st == SDNN_OK; ++i) {
        first[i] = truths.n;
        st = check_image(paths[i]);
        if (st == SDNN_OK && sdnn_label_path(paths[i], lbl, sizeof lbl) != 0)
            st = SDNN_ERROR(SDNN_ERR_INVALID, "image %.80s...: path too long", paths[i]);
        if (st == SDNN_OK) st = read_truths(lbl, classes, &truths);
    }
    first[n] = truths.n;
    if (st == SDNN_OK) st = sdnn_map_create(classes, o.iou, &m);
    if (st == SDNN_OK && pr) st = sdnn_map_create(classes, o.iou, &mpr);
    if (st != SDNN_OK) goto out;

    int batch = net->batch;
    set_batch_network(net, 1);
    for (int i = 0; i < n && st == SDNN_OK; ++i) {
        st = detect(net, paths[i], &o, classes, &dets, &ndets, &cap);
        if (st == SDNN_OK)
            st = sdnn_map_add_image(m, truths.t + first[i], first[i + 1] - first[i], dets, ndets);
        if (st == SDNN_OK && pr) {
            /* The same matching on the detections above pr->conf only. */
            int kept = 0;
            for (int d = 0; d < ndets; ++d)
                if (dets[d].score > pr->conf) dets[kept++] = dets[d];
            st = sdnn_map_add_image(mpr, truths.t + first[i], first[i + 1] - first[i], dets, kept);
        }
    }
    set_batch_network(net, batch);
    if (st == SDNN_OK) st = sdnn_map_compute(m, per_class, result);
    if (st == SDNN_OK && pr) st = pr_of(mpr, classes, pr);
out:
    sdnn_map_destroy(mpr);
    sdnn_map_destroy(m);
    free(dets);
    free(truths.t);
    free(first);
    return st;
}

/* ---- classification ------------------------------------------------------- */

/* Position of class t when the scores are sorted, highest first, ties by
 * class index; a non-finite score of t ranks last. */
static int rank_of(const float *p, int classes, int t)
{
    if (!isfinite(p[t])) return classes;
    int r = 0;
    for (int j = 0; j < classes; ++j)
        if (p[j] > p[t] || (p[j] == p[t] && j < t)) ++r;
    return r;
}

sdnn_status sdnn_classifier_eval(network *net, char **paths, int n, char **labels, int classes,
                                 int k, int *class_total, int *class_top1,
                                 sdnn_cls_result *result)
{
    memset(result, 0, sizeof *result);
    if (!net || n < 1 || !paths || !labels || classes < 1)
        return SDNN_ERROR(SDNN_ERR_INVALID, "classifier: no network, images (%d) or labels (%d)",
                          n, classes);
    if (k < 1 || k > classes)
        return SDNN_ERROR(SDNN_ERR_INVALID, "classifier: top-%d with %d classes", k, classes);
    if (net->outputs < classes)
        return SDNN_ERROR(SDNN_ERR_INVALID, "classifier: the network has %d outputs for %d classes",
                          net->outputs, classes);
    int *truth = malloc((size_t)n * sizeof *truth);
    if (!truth) return SDNN_ERROR(SDNN_ERR_NOMEM, "classifier: no memory for %d images", n);
    sdnn_status st = SDNN_OK;
    for (int i = 0; i < n && st == SDNN_OK; ++i) {
        st = check_image(paths[i]);
        truth[i] = sdnn_label_of_path(paths[i], labels, classes);
        if (st == SDNN_OK && truth[i] < 0)
            st = SDNN_ERROR(SDNN_ERR_INVALID, "image %s: none of the %d label names appears in its path",
                            paths[i], classes);
    }
    if (st != SDNN_OK) {
        free(truth);
        return st;
    }
    if (class_total) memset(class_total, 0, (size_t)classes * sizeof *class_total);
    if (class_top1) memset(class_top1, 0, (size_t)classes * sizeof *class_top1);
    int batch = net->batch, hit1 = 0, hitk = 0;
    set_batch_network(net, 1);
    for (int i = 0; i < n; ++i) {
        image im = load_image(paths[i], 0, 0, net->c);
        image resized = resize_min(im, net->w);
        image crop = crop_image(resized, (resized.w - net->w) / 2, (resized.h - net->h) / 2, net->w,
                                net->h);
        float *pred = network_predict(net, crop.data);
        if (net->hierarchy) hierarchy_predictions(pred, net->outputs, net->hierarchy, 1, 1);
        int r = rank_of(pred, classes, truth[i]);
        hit1 += r == 0;
        hitk += r < k;
        if (class_total) class_total[truth[i]]++;
        if (class_top1 && r == 0) class_top1[truth[i]]++;
        free_image(crop);
        if (resized.data != im.data) free_image(resized); /* resize_min may return im itself */
        free_image(im);
    }
    set_batch_network(net, batch);
    free(truth);
    result->images = n;
    result->k = k;
    result->top1 = (double)hit1 / n;
    result->topk = (double)hitk / n;
    return SDNN_OK;
}

/* ---- the commands --------------------------------------------------------- */

typedef struct eval_args {
    const char *pos[3];
    int npos;
    float iou, thresh, nms;
    float conf;         /* -thresh: the precision/recall line (the fork's) */
    int points;         /* -points 0|11|101 */
    int dont_show, show_imgs, letter_box;
    const char *gpus;
} eval_args;

/* What the two commands share: files checked, the [scalednn] section
 * stripped, the network parsed and the weights loaded, the valid list
 * read.  On success the caller owns *net, *options, *plist. */
typedef struct loaded {
    network *net;
    list *options;
    list *plist;
    char **paths;
} loaded;

static void unload(loaded *L)
{
    if (L->plist) {
        free_ptrs((void **)L->paths, L->plist->size);
        free_list(L->plist);
    }
    sdnn_free_options(L->options);
    if (L->net) sdnn_network_free(L->net);
    memset(L, 0, sizeof *L);
}

static int load_all(const eval_args *a, loaded *L)
{
    const char *datacfg = a->pos[0], *cfgfile = a->pos[1], *weights = a->pos[2];
    memset(L, 0, sizeof *L);
    const char *files[][2] = {{"data file", datacfg}, {"cfg file", cfgfile},
                              {"weights file", weights}};
    for (int i = 0; i < 3; ++i)
        if (sdnn_check_readable(files[i][1]) != SDNN_OK) {
            fprintf(stderr, "error: %s: %s\n", files[i][0], sdnn_last_error());
            return -1;
        }
    L->options = read_data_cfg((char *)datacfg);
    char *valid = option_find_str(L->options, "valid", NULL);
    if (!valid) {
        fprintf(stderr, "error: %s: no valid= key (the list of images to evaluate)\n", datacfg);
        goto fail;
    }
    if (sdnn_check_readable(valid) != SDNN_OK) {
        fprintf(stderr, "error: %s: valid=%s: %s\n", datacfg, valid, sdnn_last_error());
        goto fail;
    }
    L->plist = get_paths(valid);
    L->paths = (char **)list_to_array(L->plist);
    if (L->plist->size == 0) {
        fprintf(stderr, "error: %s: valid=%s: the list is empty\n", datacfg, valid);
        goto fail;
    }
    for (int i = 0; i < L->plist->size; ++i)
        if (!L->paths[i][0]) {
            fprintf(stderr, "error: %s: line %d is empty (one image path per line)\n", valid, i + 1);
            goto fail;
        }

    sdnn_config cfg;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(cfgfile, &cfg, &stripped) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        goto fail;
    }
    L->net = sdnn_parse_network(stripped.path);
    sdnn_stripped_cfg_close(&stripped);
    if (sdnn_check_weights_file(L->net, weights, 1, NULL) != SDNN_OK) {
        fprintf(stderr, "error: %s: %s\n", cfgfile, sdnn_last_error());
        goto fail;
    }
    load_weights(L->net, (char *)weights);
    /* NaN or inf weights would give mAP 0 and exit 0: stop as training does. */
    if (sdnn_check_net_finite(L->net, weights) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        goto fail;
    }
    return 0;
fail:
    unload(L);
    return -1;
}

static const char *const *g_sorted_names; /* by_name's array (qsort has no context) */

static int by_name(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    int d = strcmp(g_sorted_names[a], g_sorted_names[b]);
    return d ? d : (a > b) - (a < b);
}

/* Two classes of one name are one name in every per-class output: the
 * second's result file replaces the first's, the per-class table shows
 * two rows nobody can tell apart, a classifier's path match never picks
 * the second.  The first pair by name, as line numbers; 0 when none. */
static int first_duplicate(char *const *names, int n, int *line_a, int *line_b)
{
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (!idx) return -1;
    for (int i = 0; i < n; ++i) idx[i] = i;
    g_sorted_names = (const char *const *)names;
    qsort(idx, (size_t)n, sizeof *idx, by_name);
    int found = 0;
    for (int i = 1; i < n && !found; ++i)
        if (strcmp(names[idx[i - 1]], names[idx[i]]) == 0) {
            *line_a = idx[i - 1] + 1;
            *line_b = idx[i] + 1;
            found = 1;
        }
    free(idx);
    return found;
}

char **sdnn_read_class_names(const char *datacfg, const char *key, const char *file,
                             const char *file_prefix, list **out)
{
    *out = NULL;
    if (sdnn_check_readable(file) != SDNN_OK) {
        fprintf(stderr, "error: %s: %s=%s: %s\n", datacfg, key, file, sdnn_last_error());
        return NULL;
    }
    list *l = get_paths((char *)file);
    char **names = (char **)list_to_array(l);
    /* A CRLF file: libdarknet's line reader keeps the '\r' in the name. */
    for (int i = 0; i < l->size; ++i) {
        size_t len = strlen(names[i]);
        if (len && names[i][len - 1] == '\r') names[i][len - 1] = '\0';
    }
    int bad = 0;
    for (int i = 0; i < l->size && !bad; ++i) {
        const char *nm = names[i];
        bad = 1;
        if (strspn(nm, " \t") == strlen(nm))
            fprintf(stderr, "error: %s:%d: the name is empty (one class name per line)\n", file,
                    i + 1);
        else if (file_prefix && strchr(nm, '/'))
            fprintf(stderr, "error: %s:%d: class name \"%.80s\" contains '/': it names a result "
                    "file (%sNAME.txt), so a '/' would put it in another folder; rename the "
                    "class\n", file, i + 1, nm, file_prefix);
        else if (file_prefix && strlen(file_prefix) + strlen(nm) + 4 > 255)
            fprintf(stderr, "error: %s:%d: class name \"%.40s...\" is %zu characters: its result "
                    "file %sNAME.txt would pass the 255-byte file name limit; shorten it (or "
                    "-out)\n", file, i + 1, nm, strlen(nm), file_prefix);
        else
            bad = 0;
    }
    int a = 0, b = 0, dup = bad ? 0 : first_duplicate(names, l->size, &a, &b);
    if (dup < 0) fprintf(stderr, "error: %s: out of memory\n", file);
    if (dup > 0)
        fprintf(stderr, "error: %s:%d and line %d: class name \"%.80s\" twice: each class needs "
                "its own name (%s); rename one\n", file, a, b, names[a - 1],
                file_prefix ? "it names the class's result file: the second would replace the "
                              "first's"
                            : "two equal names are one class in every per-class result");
    if (bad || dup) {
        free_ptrs((void **)names, l->size);
        free_list(l);
        return NULL;
    }
    *out = l;
    return names;
}

int sdnn_detector_args(const sdnn_command *cmd, int argc, char **argv, const char **pos, int *npos,
                       const int *dont_show, const int *show_imgs)
{
    int st = sdnn_args_parse(cmd, argc, argv, 1, pos, npos);
    if (st != SDNN_ARGS_OK)
        return st == SDNN_ARGS_HELP ? 0 : 2;
    sdnn_note_no_window(cmd->name, *dont_show, *show_imgs);
    return -1;
}

int sdnn_cmd_detector_map(int argc, char **argv)
{
    eval_args a = {.iou = .5f, .thresh = .005f, .nms = .45f, .conf = .25f, .gpus = "0"};
    const sdnn_flag flags[] = {
        {.name = "-iou_thresh", .alias = "-iou", .kind = SDNN_FLAG_FLOAT, .dst = &a.iou, .lo = 0,
         .lo_open = 1, .hi = 1, .meta = "X", .help = "a detection matches a truth at IoU >= X (0.5)"},
        {.name = "-points", .kind = SDNN_FLAG_CUSTOM, .dst = &a.points,
         .parse = sdnn_flag_parse_points, .meta = "0|11|101",
         .help = "the mAP printed last: all-point (0, default), VOC 11-point, COCO 101-point"},
        {.name = "-thresh", .kind = SDNN_FLAG_FLOAT, .dst = &a.conf, .lo = 0, .hi = 1,
         .hi_open = 1, .meta = "T",
         .help = "precision/recall/F1 of the boxes above T (0.25); AP ranks every box > 0.005"},
        SDNN_DETECTOR_FLAG_NMS(&a.nms),
        SDNN_DETECTOR_FLAG_LETTER_BOX(&a.letter_box),
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &a.gpus, .parse = sdnn_flag_parse_gpus,
         .meta = "LIST", .help = "accepted: the evaluation runs on one CPU replica"},
        SDNN_DETECTOR_FLAGS_TAIL(&a.dont_show, &a.show_imgs),
    };
    const sdnn_command cmd = {
        .name = "detector map", .args = "DATA CFG WEIGHTS", .min_pos = 3, .max_pos = 3,
        SDNN_CMD_FLAGS(flags),
    };
    int st = sdnn_detector_args(&cmd, argc, argv, a.pos, &a.npos, &a.dont_show, &a.show_imgs);
    if (st >= 0) return st;
    loaded L;
    if (load_all(&a, &L) != 0) return 1;
    const char *datacfg = a.pos[0], *cfgfile = a.pos[1];
    int rc = 1;
    list *nlist = NULL;
    char **cnames = NULL;
    sdnn_ap *ap = NULL;
    int classes = sdnn_detector_classes(L.net);
    if (classes < 1) {
        fprintf(stderr, "error: %s: no [yolo], [region] or [detection] layer (or they disagree "
                        "on classes=): not a detector\n", cfgfile);
        goto out;
    }
    int data_classes = option_find_int_quiet(L.options, "classes", classes);
    if (data_classes != classes) {
        fprintf(stderr, "error: %s: classes=%d but %s detects %d classes\n", datacfg, data_classes,
                cfgfile, classes);
        goto out;
    }
    char *names_file = option_find_str(L.options, "names", NULL);
    if (names_file) {
        cnames = sdnn_read_class_names(datacfg, "names", names_file, NULL, &nlist);
        if (!cnames) goto out;
        if (nlist->size < classes) {
            fprintf(stderr, "error: %s: names=%s has %d names for %d classes\n", datacfg,
                    names_file, nlist->size, classes);
            goto out;
        }
    }
    ap = calloc((size_t)classes, sizeof *ap);
    if (!ap) {
        fprintf(stderr, "error: detector map: out of memory\n");
        goto out;
    }
    sdnn_map_eval_opts o = {a.iou, a.thresh, a.nms, a.letter_box};
    sdnn_map_result res;
    sdnn_map_pr pr = {.conf = a.conf};
    double t0 = what_time_is_it_now();
    if (sdnn_detector_map_eval_pr(L.net, L.paths, L.plist->size, &o, ap, &res, &pr) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        goto out;
    }
    double secs = what_time_is_it_now() - t0;
    /* Thresholds as given (sdnn_fmt_float): %.2f showed -iou_thresh 0.999 as 1.00. */
    char iou_s[SDNN_FMT_FLOAT_LEN], thr_s[SDNN_FMT_FLOAT_LEN], nms_s[SDNN_FMT_FLOAT_LEN];
    char conf_s[SDNN_FMT_FLOAT_LEN];
    sdnn_fmt_float(iou_s, a.iou, 2);
    printf("detector map: %d images, IoU >= %s, detections: probability > %s after NMS %s "
           "(%.1f s)\n",
           res.images, iou_s, sdnn_fmt_float(thr_s, a.thresh, 0), sdnn_fmt_float(nms_s, a.nms, 2),
           secs);
    printf("%4s  %-16s %7s %7s %8s %8s %8s\n", "id", "class", "truths", "dets", "AP11", "AP-all",
           "AP101");
    int unscored = 0;
    for (int c = 0; c < classes; ++c) {
        char num[16];
        snprintf(num, sizeof num, "%d", c);
        const char *name = cnames ? cnames[c] : num;
        if (ap[c].truths > 0) {
            printf("%4d  %-16.40s %7d %7d %8.4f %8.4f %8.4f\n", c, name, ap[c].truths, ap[c].dets,
                   ap[c].ap11, ap[c].ap_all, ap[c].ap101);
        } else {
            printf("%4d  %-16.40s %7d %7d %8s %8s %8s\n", c, name, 0, ap[c].dets, "-", "-", "-");
            ++unscored;
        }
    }
    if (unscored)
        printf("%d class%s without truths (AP '-') left out of the mean\n", unscored,
               unscored == 1 ? "" : "es");
    if (res.classes_scored == 0) {
        fprintf(stderr, "error: %s: no truth boxes in any label file: mAP is undefined\n",
                option_find_str(L.options, "valid", NULL));
        goto out;
    }
    printf(" for conf_thresh = %s, precision = %.4f, recall = %.4f, F1-score = %.4f "
           "(TP %d, FP %d, FN %d)\n", sdnn_fmt_float(conf_s, pr.conf, 2), pr.precision, pr.recall,
           pr.f1, pr.tp, pr.fp, pr.fn);
    printf("mAP@%s: all-point %.4f, 11-point %.4f, 101-point %.4f over %d images\n", iou_s,
           res.map_all, res.map11, res.map101, res.images);
    double m = sdnn_map_at_points(&res, a.points);
    printf(" mean average precision (mAP@%s) = %.6f, or %.2f %% (-points %d: %s)\n", iou_s, m,
           m * 100, a.points,
           a.points == 11 ? "VOC 2007 11-point" : a.points == 101 ? "COCO 101-point" : "all-point");
    rc = 0;
out:
    free(ap);
    if (nlist) {
        free_ptrs((void **)cnames, nlist->size);
        free_list(nlist);
    }
    unload(&L);
    return rc;
}

int sdnn_cmd_classifier_valid(int argc, char **argv)
{
    eval_args a = {0};
    const sdnn_command cmd = {
        .name = "classifier valid", .args = "DATA CFG WEIGHTS", .min_pos = 3, .max_pos = 3,
    };
    int st = sdnn_args_parse(&cmd, argc, argv, 1, a.pos, &a.npos);
    if (st != SDNN_ARGS_OK) return st == SDNN_ARGS_HELP ? 0 : 2;
    const char *datacfg = a.pos[0], *cfgfile = a.pos[1];
    loaded L;
    if (load_all(&a, &L) != 0) return 1;
    int rc = 1;
    list *llist = NULL;
    char **labels = NULL;
    int *total = NULL, *top1 = NULL;
    const char *key = "labels";
    char *labels_file = option_find_str(L.options, "labels", NULL);
    if (!labels_file) {
        key = "names";
        labels_file = option_find_str(L.options, "names", NULL);
    }
    if (!labels_file) {
        fprintf(stderr, "error: %s: no labels= (or names=) key: the class names, one a line\n",
                datacfg);
        goto out;
    }
    labels = sdnn_read_class_names(datacfg, key, labels_file, NULL, &llist);
    if (!labels) goto out;
    int classes = llist->size;
    if (classes < 1) {
        fprintf(stderr, "error: %s: %s=%s: the file is empty\n", datacfg, key, labels_file);
        goto out;
    }
    int data_classes = option_find_int_quiet(L.options, "classes", classes);
    if (data_classes != classes) {
        fprintf(stderr, "error: %s: classes=%d but %s=%s has %d names\n", datacfg, data_classes,
                key, labels_file, classes);
        goto out;
    }
    if (L.net->outputs != classes) {
        fprintf(stderr, "error: %s: the network has %d outputs but %s=%s has %d names\n", cfgfile,
                L.net->outputs, key, labels_file, classes);
        goto out;
    }
    int top = option_find_int_quiet(L.options, "top", 5);
    if (top < 1) {
        fprintf(stderr, "error: %s: top=%d: must be at least 1\n", datacfg, top);
        goto out;
    }
    int k = top < classes ? top : classes;
    total = calloc((size_t)classes, sizeof *total);
    top1 = calloc((size_t)classes, sizeof *top1);
    if (!total || !top1) {
        fprintf(stderr, "error: classifier valid: out of memory\n");
        goto out;
    }
    sdnn_cls_result res;
    double t0 = what_time_is_it_now();
    if (sdnn_classifier_eval(L.net, L.paths, L.plist->size, labels, classes, k, total, top1, &res) !=
        SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        goto out;
    }
    printf("classifier valid: %d images, %d classes (%.1f s)\n", res.images, classes,
           what_time_is_it_now() - t0);
    printf("%4s  %-16s %7s %8s\n", "id", "class", "images", "top-1");
    for (int c = 0; c < classes; ++c) {
        if (total[c])
            printf("%4d  %-16.40s %7d %8.4f\n", c, labels[c], total[c], (double)top1[c] / total[c]);
        else
            printf("%4d  %-16.40s %7d %8s\n", c, labels[c], 0, "-");
    }
    printf("top-1 %.4f, top-%d %.4f over %d images\n", res.top1, res.k, res.topk, res.images);
    rc = 0;
out:
    free(total);
    free(top1);
    if (llist) {
        free_ptrs((void **)labels, llist->size);
        free_list(llist);
    }
    unload(&L);
    return rc;
}

/* ---- detector valid and recall (Darknet's commands) ----------------------- */

/* The boxes of one image after NMS (caller frees with free_detections):
 * by_objectness 0 is the detector's (sdnn_dialect_nms: per class, the last
 * [yolo]'s nms_kind), 1 is Darknet's do_nms_obj, which recall uses in both
 * Debian's darknet and the fork: boxes ranked by objectness, a box
 * overlapping a better one by more than nms loses its objectness. */
static detection *predict(network *net, const char *path, int letter_box, float thresh, float nms,
                          int by_objectness, int classes, int *nboxes, int *w, int *h)
{
    image im = load_image((char *)path, 0, 0, net->c);
    image sized = sdnn_detector_input(net, im, letter_box);
    network_predict(net, sized.data);
    *w = im.w;
    *h = im.h;
    detection *d = sdnn_detector_boxes(net, im, letter_box, thresh, .5f, nboxes);
    if (nms > 0 && by_objectness) do_nms_obj(d, *nboxes, classes, nms);
    else if (nms > 0) sdnn_dialect_nms(net, d, *nboxes, classes, nms);
    free_image(sized);
    free_image(im);
    return d;
}

/* A growing text buffer per class file. */
typedef struct textbuf {
    char *s;
    size_t n, cap;
} textbuf;

static int tb_printf(textbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tb_printf(textbuf *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return -1;
        if (t->s && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return 0;
        }
        size_t cap = t->cap ? 2 * t->cap : 4096;
        while (cap < t->n + (size_t)k + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) return -1;
        t->s = p;
        t->cap = cap;
    }
}

/* Checks every image of the valid list decodes (Darknet's loader would
 * end the process on one that does not). */
static int check_images(char **paths, int n)
{
    for (int i = 0; i < n; ++i)
        if (check_image(paths[i]) != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            return -1;
        }
    return 0;
}

int sdnn_cmd_detector_valid(int argc, char **argv)
{
    /* The fork's validate_detector: probability > 0.001, NMS 0.6 (Debian's
     * darknet: 0.005 and 0.45, -thresh 0.005 -nms 0.45 here). */
    eval_args a = {.thresh = .001f, .nms = .6f, .gpus = "0"};
    const char *prefix = "comp4_det_test_";
    const sdnn_flag flags[] = {
        {.name = "-out", .kind = SDNN_FLAG_STR, .dst = &prefix, .meta = "PREFIX",
         .help = "the files are RESULTS/PREFIXCLASS.txt (comp4_det_test_)"},
        {.name = "-thresh", .kind = SDNN_FLAG_FLOAT, .dst = &a.thresh, .lo = 0, .hi = 1,
         .hi_open = 1, .meta = "T",
         .help = "boxes with probability above T (0.001, the fork's; Debian's darknet: 0.005)"},
        {.name = "-nms", .kind = SDNN_FLAG_FLOAT, .dst = &a.nms, .lo = 0, .lo_open = 1, .hi = 1,
         .meta = "X", .help = "non-maximum suppression threshold (0.6, the fork's; Debian's: 0.45)"},
        SDNN_DETECTOR_FLAG_LETTER_BOX(&a.letter_box),
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &a.gpus, .parse = sdnn_flag_parse_gpus,
         .meta = "LIST", .help = "accepted: the prediction runs on the CPU"},
        SDNN_DETECTOR_FLAGS_TAIL(&a.dont_show, &a.show_imgs),
    };
    const sdnn_command cmd = {
        .name = "detector valid", .args = "DATA CFG WEIGHTS", .min_pos = 3, .max_pos = 3,
        SDNN_CMD_FLAGS(flags),
        .notes = "Writes one file per class in the data file's results= folder (results), a line\n"
                 "per box: IMAGE_ID PROB XMIN YMIN XMAX YMAX in pixels, 1-based, as Darknet's\n"
                 "VOC output (eval=coco and eval=imagenet are not written here).\n",
    };
    int st = sdnn_detector_args(&cmd, argc, argv, a.pos, &a.npos, &a.dont_show, &a.show_imgs);
    if (st >= 0) return st;
    if (strchr(prefix, '/') || !*prefix)
        return sdnn_args_bad(&cmd, "-out", prefix, "a file name prefix without '/'") == 0 ? 0 : 2;
    loaded L;
    if (load_all(&a, &L) != 0) return 1;
    const char *datacfg = a.pos[0], *cfgfile = a.pos[1];
    int rc = 1, classes = sdnn_detector_classes(L.net);
    list *nlist = NULL;
    char **cnames = NULL;
    textbuf *files = NULL;
    if (classes < 1) {
        fprintf(stderr, "error: %s: no [yolo], [region] or [detection] layer: not a detector\n",
                cfgfile);
        goto out;
    }
    char *names_file = option_find_str(L.options, "names", NULL);
    if (!names_file) {
        fprintf(stderr, "error: %s: no names= key (the class names name the result files)\n",
                datacfg);
        goto out;
    }
    cnames = sdnn_read_class_names(datacfg, "names", names_file, prefix, &nlist);
    if (!cnames) goto out;
    if (nlist->size < classes) {
        fprintf(stderr, "error: %s: names=%s has %d names for %d classes\n", datacfg, names_file,
                nlist->size, classes);
        goto out;
    }
    if (check_images(L.paths, L.plist->size) != 0) goto out;
    const char *dir = "results";
    for (node *n = L.options ? L.options->front : NULL; n; n = n->next)
        if (strcmp(((kvp_ *)n->val)->key, "results") == 0) dir = ((kvp_ *)n->val)->val;
    for (int j = 0; j < classes; ++j) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s%s.txt", dir, prefix, cnames[j]) >=
            (int)sizeof path) {
            fprintf(stderr, "error: %s: results=%s: the result file of class %d (%s) would be a "
                    "path over %zu bytes\n", datacfg, dir, j, cnames[j], sizeof path - 1);
            goto out;
        }
    }
    if (sdnn_mkdirs(dir) != SDNN_OK) {
        fprintf(stderr, "error: %s: results=%s: %s\n", datacfg, dir, sdnn_last_error());
        goto out;
    }
    files = calloc((size_t)classes, sizeof *files);
    if (!files) goto out;
    /* Every result file before the first prediction: one that is a FIFO
     * would block its write, a directory fail it after the whole set ran. */
    for (int j = 0; j < classes; ++j) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s%s.txt", dir, prefix, cnames[j]);
        if (sdnn_check_output_file(path) != SDNN_OK) {
            fprintf(stderr, "error: detector valid: the result file of class %d: %s\n", j,
                    sdnn_last_error());
            goto out;
        }
    }
    set_batch_network(L.net, 1);
    double t0 = what_time_is_it_now();
    long written = 0;
    for (int i = 0; i < L.plist->size; ++i) {
        int nboxes = 0, w, h;
        detection *d = predict(L.net, L.paths[i], a.letter_box, a.thresh, a.nms, 0, classes,
                               &nboxes, &w, &h);
        char *id = basecfg(L.paths[i]);
        for (int b = 0; b < nboxes; ++b) {
            box bb = d[b].bbox;
            double xmin = (bb.x - bb.w / 2.) * w + 1, xmax = (bb.x + bb.w / 2.) * w + 1;
            double ymin = (bb.y - bb.h / 2.) * h + 1, ymax = (bb.y + bb.h / 2.) * h + 1;
            if (xmin < 1) xmin = 1;
            if (ymin < 1) ymin = 1;
            if (xmax > w) xmax = w;
            if (ymax > h) ymax = h;
            for (int j = 0; j < classes; ++j)
                if (d[b].prob[j] > a.thresh) {
                    if (tb_printf(&files[j], "%s %f %f %f %f %f\n", id, d[b].prob[j], xmin, ymin,
                                  xmax, ymax) != 0) {
                        fprintf(stderr, "error: detector valid: out of memory\n");
                        free(id);
                        free_detections(d, nboxes);
                        goto out;
                    }
                    ++written;
                }
        }
        free(id);
        free_detections(d, nboxes);
    }
    int nfiles = 0; /* the files written, for the summary */
    for (int j = 0; j < classes; ++j) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s%s.txt", dir, prefix, cnames[j]);
        /* A class without boxes gets an empty file, as Darknet's (the
         * atomic writer takes at least one byte). */
        if (files[j].n == 0) {
            FILE *f = fopen(path, "w");
            if (!f || fclose(f) != 0) {
                fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
                goto out;
            }
        } else if (sdnn_write_file_atomic(path, files[j].s, files[j].n) != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            goto out;
        }
        ++nfiles;
    }
    char thr[SDNN_FMT_FLOAT_LEN];
    printf("detector valid: %d images, %ld boxes above %s into %d files %s/%s*.txt (%.1f s)\n",
           L.plist->size, written, sdnn_fmt_float(thr, a.thresh, 0), nfiles, dir, prefix,
           what_time_is_it_now() - t0);
    rc = 0;
out:
    if (files)
        for (int j = 0; j < classes; ++j) free(files[j].s);
    free(files);
    if (nlist) {
        free_ptrs((void **)cnames, nlist->size);
        free_list(nlist);
    }
    unload(&L);
    return rc;
}

int sdnn_cmd_detector_recall(int argc, char **argv)
{
    eval_args a = {.thresh = .001f, .iou = .5f, .nms = .4f, .gpus = "0"};
    const sdnn_flag flags[] = {
        {.name = "-thresh", .kind = SDNN_FLAG_FLOAT, .dst = &a.thresh, .lo = 0, .hi = 1,
         .hi_open = 1, .meta = "T", .help = "a proposal is a box with objectness above T (0.001)"},
        {.name = "-iou_thresh", .alias = "-iou", .kind = SDNN_FLAG_FLOAT, .dst = &a.iou, .lo = 0,
         .lo_open = 1, .hi = 1, .meta = "X",
         .help = "a truth is found when a proposal overlaps it at IoU > X (0.5)"},
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &a.gpus, .parse = sdnn_flag_parse_gpus,
         .meta = "LIST", .help = "accepted: the prediction runs on the CPU"},
        SDNN_DETECTOR_FLAGS_TAIL(&a.dont_show, &a.show_imgs),
    };
    const sdnn_command cmd = {
        .name = "detector recall", .args = "DATA CFG WEIGHTS", .min_pos = 3, .max_pos = 3,
        SDNN_CMD_FLAGS(flags),
        .notes = "As Darknet's and the fork's validate_detector_recall: the image stretched to the\n"
                 "network's size, boxes with objectness above -thresh after NMS by objectness at\n"
                 "0.4 (do_nms_obj); per image, the truths found by any proposal (class not\n"
                 "compared), proposals per image, mean best IoU, recall.\n",
    };
    int st = sdnn_detector_args(&cmd, argc, argv, a.pos, &a.npos, &a.dont_show, &a.show_imgs);
    if (st >= 0) return st;
    loaded L;
    if (load_all(&a, &L) != 0) return 1;
    int rc = 1, classes = sdnn_detector_classes(L.net);
    truth_set truths = {0};
    if (classes < 1) {
        fprintf(stderr, "error: %s: no [yolo], [region] or [detection] layer: not a detector\n",
                a.pos[1]);
        goto out;
    }
    if (check_images(L.paths, L.plist->size) != 0) goto out;
    set_batch_network(L.net, 1);
    int total = 0, correct = 0;
    long proposals = 0;
    double avg_iou = 0;
    char lbl[4096];
    for (int i = 0; i < L.plist->size; ++i) {
        truths.n = 0;
        if (sdnn_label_path(L.paths[i], lbl, sizeof lbl) != 0 ||
            read_truths(lbl, classes, &truths) != SDNN_OK) {
            fprintf(stderr, "error: %s\n", sdnn_last_error());
            goto out;
        }
        int nboxes = 0, w, h;
        detection *d = predict(L.net, L.paths[i], 0, a.thresh, a.nms, 1, classes, &nboxes, &w, &h);
        for (int b = 0; b < nboxes; ++b) proposals += d[b].objectness > a.thresh;
        for (int t = 0; t < truths.n; ++t) {
            ++total;
            double best = 0;
            sdnn_rect tr = truths.t[t].box;
            for (int b = 0; b < nboxes; ++b) {
                sdnn_rect r = {d[b].bbox.x, d[b].bbox.y, d[b].bbox.w, d[b].bbox.h};
                double iou = sdnn_rect_iou(r, tr);
                if (d[b].objectness > a.thresh && iou > best) best = iou;
            }
            avg_iou += best;
            correct += best > a.iou;
        }
        free_detections(d, nboxes);
        printf("%5d %5d %5d\tRPs/Img: %.2f\tIOU: %.2f%%\tRecall:%.2f%%\n", i, correct, total,
               (double)proposals / (i + 1), total ? avg_iou * 100 / total : 0,
               total ? 100. * correct / total : 0);
    }
    if (total == 0) {
        fprintf(stderr, "error: no truth boxes in any label file: recall is undefined\n");
        goto out;
    }
    char iou_s[SDNN_FMT_FLOAT_LEN], thr_s[SDNN_FMT_FLOAT_LEN];
    printf("recall: %d of %d truths found (IoU > %s, objectness > %s): %.4f, mean best IoU "
           "%.4f\n", correct, total, sdnn_fmt_float(iou_s, a.iou, 2),
           sdnn_fmt_float(thr_s, a.thresh, 0), (double)correct / total, avg_iou / total);
    rc = 0;
out:
    free(truths.t);
    unload(&L);
    return rc;
}
