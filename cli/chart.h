/*
 * chart: the fork's chart.png while `detector train` runs: the average
 * loss and, with -map, the mAP per iteration, drawn by gnuplot from the
 * CSV the run already writes.  gnuplot runs as a child in the background
 * (at most one at a time, a new one only once the last has ended and a
 * few seconds have passed), so a step never waits for it; the picture is
 * written beside and renamed over FILE, so a reader never sees half of it.
 */
#ifndef SDNN_CHART_H
#define SDNN_CHART_H

#include <sys/types.h>

typedef struct sdnn_chart {
    int on;
    char png[1024];
    char tmp[1100];
    char script[1100];
    pid_t pid;          /* the gnuplot running, or 0 */
    double last_start;
    double period_s;
} sdnn_chart;

/* Prepare a chart of `csv` into `png`.  0: ready, or no chart (gnuplot
 * missing: said once on stderr, c->on stays 0); -1 after a message when
 * `png` exists and is not a PNG (it is never overwritten). */
int sdnn_chart_start(sdnn_chart *c, const char *png, const char *csv, const char *title);

/* Redraw in the background if none runs and period_s has passed. */
void sdnn_chart_tick(sdnn_chart *c, double now);

/* Wait for a redraw in flight, draw the final picture, remove the script. */
void sdnn_chart_finish(sdnn_chart *c);

#endif
