/*
 * chart: see chart.h.
 */
#include "chart.h"
#include "saveio.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* s as the inside of a single-quoted gnuplot string. */
static void gq(FILE *f, const char *s)
{
    for (; *s; ++s) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
}

static int have_gnuplot(void)
{
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

int sdnn_chart_start(sdnn_chart *c, const char *png, const char *csv, const char *title)
{
    memset(c, 0, sizeof *c);
    c->period_s = 5;
    static const char *const ours[] = {"\x89PNG", NULL};
    if (sdnn_check_overwrite(png, "-chart", ours) != 0) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return -1;
    }
    if (!have_gnuplot()) {
        fprintf(stderr, "warning: no chart %s: gnuplot is not installed (scripts/setup.sh "
                "names the package)\n", png);
        return 0;
    }
    snprintf(c->png, sizeof c->png, "%s", png);
    snprintf(c->tmp, sizeof c->tmp, "%s.drawing.png", png);
    const char *td = getenv("TMPDIR");
    snprintf(c->script, sizeof c->script, "%s/sdnn-chart-XXXXXX", td && *td ? td : P_tmpdir);
    int fd = mkstemp(c->script);
    if (fd < 0) {
        fprintf(stderr, "warning: no chart %s: cannot create its gnuplot script\n", png);
        return 0;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(c->script);
        return 0;
    }
    /* map is column 14 of the CSV (SDNN_CSV_HEADER), empty where not measured. */
    fprintf(f, "set terminal pngcairo size 1000,600 noenhanced\nset output '");
    gq(f, c->tmp);
    fprintf(f, "'\nset datafile separator ','\nset title '");
    gq(f, title);
    fprintf(f, "'\nset key top right\nset grid\nset xlabel 'iteration'\n"
               "set ylabel 'average loss'\nset ytics nomirror\nset y2label 'mAP'\n"
               "set y2range [0:1]\nset y2tics\nplot '");
    gq(f, csv);
    fprintf(f, "' using 1:4 with lines lw 2 title 'avg loss', '' using 1:14 axes x1y2 "
               "with linespoints lw 2 pt 7 title 'mAP'\n");
    if (fclose(f) != 0) {
        unlink(c->script);
        return 0;
    }
    c->on = 1;
    return 0;
}

/* gnuplot SCRIPT, then the picture renamed over png; quiet (a CSV without
 * rows yet is no error worth a line per redraw). */
static pid_t draw(sdnn_chart *c)
{
    pid_t pid = fork();
    if (pid == 0) {
        const char *av[] = {"gnuplot", c->script, NULL};
        pid_t g = fork();
        if (g == 0) {
            /* Only async-signal-safe calls between fork and exec: the
             * trainer's threads may hold stdio's locks. */
            int nul = open("/dev/null", O_WRONLY);
            if (nul < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0) _exit(1);
            execvp("gnuplot", (char *const *)av);
            _exit(127);
        }
        int st = 0;
        if (g < 0 || waitpid(g, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) _exit(1);
        _exit(rename(c->tmp, c->png) == 0 ? 0 : 1);
    }
    return pid > 0 ? pid : 0;
}

void sdnn_chart_tick(sdnn_chart *c, double now)
{
    if (!c->on) return;
    if (c->pid) {
        if (waitpid(c->pid, NULL, WNOHANG) == 0) return;
        c->pid = 0;
    }
    if (c->last_start > 0 && now - c->last_start < c->period_s) return;
    c->last_start = now;
    c->pid = draw(c);
}

void sdnn_chart_finish(sdnn_chart *c)
{
    if (!c->on) return;
    if (c->pid) waitpid(c->pid, NULL, 0);
    pid_t p = draw(c);
    int st = 0;
    if (p && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        printf("scalednn: chart written to %s\n", c->png);
    else
        fprintf(stderr, "warning: the chart %s could not be drawn (gnuplot failed)\n", c->png);
    unlink(c->tmp);
    unlink(c->script);
    c->on = 0;
}
