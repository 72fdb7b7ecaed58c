/*
 * anchors: `./darknet detector calc_anchors DATA -num_of_clusters N -width W
 * -height H`, the fork's command: k-means on the sizes of the train list's
 * label boxes (in network pixels, W x H) with 1 - IoU as the distance (two
 * boxes compared as if they shared a centre), the anchors printed in the
 * cfg's format (whole pixels rounded to the nearest above a width of 32, as
 * the fork's "%3.0f" did before its 2025 rewrite cut them down with (int);
 * 4 decimals otherwise) and the mean IoU of every box with its nearest
 * anchor.  A cluster that would print as 0 (sub-pixel boxes) is printed as
 * the smallest printable value, with a warning: the cfg check refuses an
 * anchor of 0, and so would a net trained with it never match a box.
 *
 * Deterministic, unlike the fork's random start: the clusters start at the
 * boxes at the quantiles (2k+1)/(2N) of the box areas, then alternate
 * assignment (highest IoU, the lower index on a tie) and means until no box
 * changes cluster (at most 1000 rounds); an empty cluster keeps its centre.
 */
#include "commands.h"
#include "evaluate.h"
#include "detector_cmd.h"
#include "flags.h"
#include "options.h"
#include "saveio.h"

#include <darknet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wh {
    double w, h;
} wh;

/* IoU of two boxes with the same centre. */
static double iou_wh(wh a, wh b)
{
    double i = fmin(a.w, b.w) * fmin(a.h, b.h);
    double u = a.w * a.h + b.w * b.h - i;
    return u > 0 ? i / u : 0;
}

static int nearest(const wh *c, int k, wh b, double *best_iou)
{
    int best = 0;
    double bi = -1;
    for (int j = 0; j < k; ++j) {
        double v = iou_wh(b, c[j]);
        if (v > bi) {
            bi = v;
            best = j;
        }
    }
    if (best_iou) *best_iou = bi;
    return best;
}

/* Whether v prints as 0 at the anchors line's precision: whole pixels
 * (rounded to the nearest, ties to even as printf's "%.0f") or 4 decimals. */
static int printed_zero(double v, int whole)
{
    return (whole ? rint(v) : rint(v * 1e4)) <= 0;
}

/* The value the anchors line prints for v: v itself (printf rounds it),
 * or the smallest positive value at that precision where v would print
 * as 0. */
static double printed_anchor(double v, int whole)
{
    if (!printed_zero(v, whole)) return whole ? rint(v) : v;
    return whole ? 1 : 1e-4;
}

/* 4 decimals, or 4 digits where that would show 0 (this line may be
 * pasted into a cfg as well). */
static void print_unrounded(double v)
{
    if (v >= 5e-5) printf("%.4f", v);
    else printf("%.4g", v);
}

static int by_area(const void *x, const void *y)
{
    const wh *a = x, *b = y;
    double d = a->w * a->h - b->w * b->h;
    return d < 0 ? -1 : d > 0;
}

/* The boxes of every label file of list (W x H pixels); -1 after a message. */
static int read_label_sizes(const char *list_name, double W, double H, wh **out, int *n)
{
    list *pl = get_paths((char *)list_name);
    char **paths = (char **)list_to_array(pl);
    int cap = 0, rc = 0;
    *out = NULL;
    *n = 0;
    char lbl[4096];
    for (int i = 0; i < pl->size && rc == 0; ++i) {
        if (sdnn_label_path(paths[i], lbl, sizeof lbl) != 0) {
            fprintf(stderr, "error: %s:%d: path too long\n", list_name, i + 1);
            rc = -1;
            break;
        }
        FILE *f = sdnn_check_readable(lbl) == SDNN_OK ? fopen(lbl, "r") : NULL;
        if (!f) {
            fprintf(stderr, "error: %s (the label file of %s): cannot be read\n", lbl, paths[i]);
            rc = -1;
            break;
        }
        char line[512];
        int lineno = 0;
        while (rc == 0 && fgets(line, sizeof line, f)) {
            ++lineno;
            if (strspn(line, " \t\r\n") == strlen(line)) continue;
            int cls, used = 0;
            float x, y, w, h;
            if (sscanf(line, "%d %f %f %f %f %n", &cls, &x, &y, &w, &h, &used) != 5 ||
                line[used] != '\0' || !(w > 0 && w <= 1) || !(h > 0 && h <= 1)) {
                line[strcspn(line, "\r\n")] = '\0';
                fprintf(stderr, "error: %s:%d: \"%.60s\": expected \"class x y w h\" with w, h "
                        "in (0, 1]\n", lbl, lineno, line);
                rc = -1;
                break;
            }
            if (*n == cap) {
                cap = cap ? 2 * cap : 1024;
                wh *p = realloc(*out, (size_t)cap * sizeof *p);
                if (!p) {
                    fprintf(stderr, "error: calc_anchors: out of memory\n");
                    rc = -1;
                    break;
                }
                *out = p;
            }
            (*out)[(*n)++] = (wh){w * W, h * H};
        }
        fclose(f);
    }
    free_ptrs((void **)paths, pl->size);
    free_list(pl);
    return rc;
}

int sdnn_cmd_detector_calc_anchors(int argc, char **argv)
{
    int k = 5, W = 0, H = 0, dont_show = 0, show_imgs = 0;
    const sdnn_flag flags[] = {
        {.name = "-num_of_clusters", .kind = SDNN_FLAG_INT, .dst = &k, .lo = 1, .hi = 1000,
         .meta = "N", .help = "anchors to find (5)"},
        {.name = "-width", .kind = SDNN_FLAG_INT, .dst = &W, .lo = 1, .hi = 65536, .meta = "W",
         .help = "the network's width (required)"},
        {.name = "-height", .kind = SDNN_FLAG_INT, .dst = &H, .lo = 1, .hi = 65536, .meta = "H",
         .help = "the network's height (required)"},
        SDNN_DETECTOR_FLAGS_TAIL(&dont_show, &show_imgs),
    };
    const sdnn_command cmd = {
        .name = "detector calc_anchors", .args = "DATA", .min_pos = 1, .max_pos = 1,
        SDNN_CMD_FLAGS(flags),
        .notes = "k-means with 1 - IoU as the distance on the train= list's label boxes,\n"
                 "started at area quantiles (deterministic); prints anchors = w,h, ... as the fork\n"
                 "(whole pixels rounded above -width 32, else 4 decimals; never 0), the unrounded\n"
                 "anchors and the mean IoU of each box with its nearest anchor.\n",
    };
    const char *pos[1] = {0};
    int np;
    int st = sdnn_detector_args(&cmd, argc, argv, pos, &np, &dont_show, &show_imgs);
    if (st >= 0) return st;
    if (!W || !H) {
        fprintf(stderr, "error: darknet detector calc_anchors: -width and -height are required "
                "(the network's input size, e.g. -width 416 -height 416)\n");
        return 2;
    }
    if (sdnn_check_readable(pos[0]) != SDNN_OK) {
        fprintf(stderr, "error: data file: %s\n", sdnn_last_error());
        return 1;
    }
    list *options = read_data_cfg((char *)pos[0]);
    const char *train = NULL;
    for (node *n = options ? options->front : NULL; n; n = n->next)
        if (strcmp(((kvp_ *)n->val)->key, "train") == 0) train = ((kvp_ *)n->val)->val;
    int rc = 1, n = 0;
    wh *boxes = NULL, *c = NULL;
    int *assign = NULL;
    if (!train) {
        fprintf(stderr, "error: %s: no train= key (the images whose boxes are clustered)\n", pos[0]);
        goto out;
    }
    if (sdnn_check_readable(train) != SDNN_OK) {
        fprintf(stderr, "error: %s: train=%s: %s\n", pos[0], train, sdnn_last_error());
        goto out;
    }
    if (read_label_sizes(train, W, H, &boxes, &n) != 0) goto out;
    if (n < k) {
        fprintf(stderr, "error: %s: %d label boxes for -num_of_clusters %d: need at least as many "
                "boxes as clusters\n", train, n, k);
        goto out;
    }
    c = malloc((size_t)k * sizeof *c);
    assign = malloc((size_t)n * sizeof *assign);
    wh *sorted = malloc((size_t)n * sizeof *sorted);
    if (!c || !assign || !sorted) {
        free(sorted);
        fprintf(stderr, "error: calc_anchors: out of memory\n");
        goto out;
    }
    memcpy(sorted, boxes, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_area);
    for (int j = 0; j < k; ++j) c[j] = sorted[(int)(((2.0 * j + 1) * n) / (2.0 * k))];
    free(sorted);
    for (int i = 0; i < n; ++i) assign[i] = -1;
    int rounds = 0;
    for (; rounds < 1000; ++rounds) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            int a = nearest(c, k, boxes[i], NULL);
            changed += a != assign[i];
            assign[i] = a;
        }
        if (!changed) break;
        for (int j = 0; j < k; ++j) {
            double sw = 0, sh = 0;
            int m = 0;
            for (int i = 0; i < n; ++i)
                if (assign[i] == j) {
                    sw += boxes[i].w;
                    sh += boxes[i].h;
                    ++m;
                }
            if (m) c[j] = (wh){sw / m, sh / m};
        }
    }
    qsort(c, (size_t)k, sizeof *c, by_area);
    double sum = 0;
    for (int j = 0; j < k; ++j) assign[j] = 0; /* now: boxes per sorted cluster */
    for (int i = 0; i < n; ++i) {
        double v;
        assign[nearest(c, k, boxes[i], &v)]++;
        sum += v;
    }
    printf("calc_anchors: %d boxes of %s at %dx%d, %d clusters, %d rounds\n", n, train, W, H, k,
           rounds);
    const int whole = W > 32;
    wh *shown = malloc((size_t)k * sizeof *shown);
    if (!shown) {
        fprintf(stderr, "error: calc_anchors: out of memory\n");
        goto out;
    }
    for (int j = 0; j < k; ++j) {
        shown[j].w = printed_anchor(c[j].w, whole);
        shown[j].h = printed_anchor(c[j].h, whole);
        if (printed_zero(c[j].w, whole) || printed_zero(c[j].h, whole))
            fprintf(stderr, "warning: calc_anchors: cluster %d of %d (%d box%s) is %.4g x %.4g "
                    "at -width %d -height %d, below the printed precision (%s): printed as %s, "
                    "since an anchor of 0 never matches a box (the cfg check refuses it); boxes "
                    "this small want a larger -width/-height (the network's input) or fewer "
                    "-num_of_clusters\n", j + 1, k, assign[j], assign[j] == 1 ? "" : "es",
                    c[j].w, c[j].h, W, H, whole ? "whole pixels" : "4 decimals",
                    whole ? "1" : "0.0001");
    }
    printf("anchors = ");
    for (int j = 0; j < k; ++j) {
        if (whole) printf("%s%.0f,%.0f", j ? ", " : "", shown[j].w, shown[j].h);
        else printf("%s%.4f,%.4f", j ? ", " : "", shown[j].w, shown[j].h);
    }
    printf("\n");
    free(shown);
    printf("anchors (unrounded) = ");
    for (int j = 0; j < k; ++j) {
        printf("%s", j ? ", " : "");
        print_unrounded(c[j].w);
        printf(",");
        print_unrounded(c[j].h);
    }
    printf("\n");
    printf("mean IoU = %.6f (avg IoU = %.2f %%)\n", sum / n, 100 * sum / n);
    rc = 0;
out:
    free(c);
    free(assign);
    free(boxes);
    sdnn_free_options(options);
    return rc;
}
