/*
 * chart: the fork's chart.png while `detector train` runs: the average
 * loss and, with -map, the mAP per iteration, drawn by gnuplot from the
 * CSV the run already writes.  gnuplot runs as a child in the background
 * (at most one at a time, a new one only once the last has ended and a
 * few seconds have passed), so a step never waits for it; each picture is
 * drawn into a new temporary file beside FILE (sdnn_temp_create: O_EXCL,
 * the pid and a counter in its name, so never a user's file) and renamed
 * over FILE when gnuplot has ended (at the next tick), so a reader never
 * sees half of it; a draw that fails, or is interrupted, removes its
 * temporary file.
 */
#ifndef SDNN_CHART_H
#define SDNN_CHART_H

#include <sys/types.h>

typedef struct sdnn_chart {
    int on;
    char png[1024];
    char tmp[1100];     /* the picture of the draw in flight (ours, O_EXCL) */
    char script[1100];
    char output[2300];  /* gnuplot -e: "set output 'TMP'" */
    pid_t pid;          /* the draw in flight, or 0 */
    double last_start;
    double period_s;
} sdnn_chart;

/* Before anything of the run is written: `png` may be written (it does not
 * exist, is empty or is a PNG) and its folder takes a new file.  0, or -1
 * after a message naming `what` (the flag) and the file or folder. */
int sdnn_chart_check(const char *png, const char *what);

/* Prepare a chart of `csv` into `png` (checked with sdnn_chart_check
 * first).  0: ready, or no chart (gnuplot missing: said once on stderr,
 * c->on stays 0). */
int sdnn_chart_start(sdnn_chart *c, const char *png, const char *csv, const char *title);

/* Redraw in the background if none runs and period_s has passed. */
void sdnn_chart_tick(sdnn_chart *c, double now);

/* Wait for a redraw in flight, draw the final picture, remove the script. */
void sdnn_chart_finish(sdnn_chart *c);

/* Async-signal-safe, for a SIGINT/SIGTERM handler: end the draw in flight
 * and remove its temporary file. */
void sdnn_chart_interrupted(void);

#endif
