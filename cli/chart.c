/*
 * chart: see chart.h.
 */
#include "chart.h"
#include "saveio.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int sdnn_chart_check(const char *png, const char *what)
{
    static const char *const ours[] = {"\x89PNG", NULL};
    if (sdnn_check_overwrite(png, what, ours) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return -1;
    }
    struct stat sb;
    if (stat(png, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* Each picture is renamed over it: a device would be replaced. */
        fprintf(stderr, "error: %s %s: not a regular file (the chart is renamed over it); name "
                "a .png file\n", what, png);
        return -1;
    }
    if (sdnn_check_dir_writable(png) != SDNN_OK) {
        fprintf(stderr, "error: %s %s: %s\n", what, png, sdnn_last_error());
        return -1;
    }
    return 0;
}

int sdnn_chart_start(sdnn_chart *c, const char *png, const char *csv, const char *title)
{
    memset(c, 0, sizeof *c);
    c->period_s = 5;
    if (!have_gnuplot()) {
        fprintf(stderr, "warning: no chart %s: gnuplot is not installed (scripts/setup.sh "
                "names the package)\n", png);
        return 0;
    }
    snprintf(c->png, sizeof c->png, "%s", png);
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
    /* The output is each draw's own file (gnuplot -e "set output ..."). map
     * is column 14 of the CSV (SDNN_CSV_HEADER), empty where not measured. */
    fprintf(f, "set terminal pngcairo size 1000,600 noenhanced\n"
               "set datafile separator ','\nset title '");
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

/* "set output 'TMP'" for gnuplot -e, quoted as gq does; 0 when it fits. */
static int output_command(sdnn_chart *c)
{
    size_t at = (size_t)snprintf(c->output, sizeof c->output, "set output '");
    for (const char *s = c->tmp; *s; ++s) {
        if (at + 4 >= sizeof c->output) return -1;
        if (*s == '\'') c->output[at++] = '\'';
        c->output[at++] = *s;
    }
    c->output[at++] = '\'';
    c->output[at] = '\0';
    return 0;
}

/* The draw in flight, for sdnn_chart_interrupted (one chart per run). */
static sdnn_temp_guard g_tmp;
static volatile pid_t g_pid;

void sdnn_chart_interrupted(void)
{
    if (g_pid > 0) kill(g_pid, SIGKILL);
    const char *t = sdnn_temp_guard_owned(&g_tmp);
    if (t) unlink(t);
}

/* A new temporary picture and gnuplot SCRIPT drawing into it; quiet (a
 * CSV without rows yet is no error worth a line per redraw). */
static pid_t draw(sdnn_chart *c)
{
    int fd = -1;
    if (sdnn_temp_create_guarded(&g_tmp, c->png, c->tmp, sizeof c->tmp, &fd) != SDNN_OK) {
        c->tmp[0] = '\0';
        return 0;
    }
    close(fd);
    if (output_command(c) != 0) {
        unlink(c->tmp);
        sdnn_temp_guard_release(&g_tmp);
        c->tmp[0] = '\0';
        return 0;
    }
    const char *av[] = {"gnuplot", "-e", c->output, c->script, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec: the
         * trainer's threads may hold stdio's and malloc's locks. */
        int nul = open("/dev/null", O_WRONLY);
        if (nul < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0) _exit(1);
        execvp("gnuplot", (char *const *)av);
        _exit(127);
    }
    if (pid < 0) {
        unlink(c->tmp);
        sdnn_temp_guard_release(&g_tmp);
        c->tmp[0] = '\0';
        return 0;
    }
    g_pid = pid;
    return pid;
}

/* gnuplot ended with status st: its picture renamed over png, or removed. */
static int reaped(sdnn_chart *c, int st)
{
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && rename(c->tmp, c->png) == 0;
    if (!ok) unlink(c->tmp);
    sdnn_temp_guard_release(&g_tmp);
    g_pid = 0;
    c->tmp[0] = '\0';
    c->pid = 0;
    return ok;
}

void sdnn_chart_tick(sdnn_chart *c, double now)
{
    if (!c->on) return;
    if (c->pid) {
        int st = 0;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == 0) return;
        reaped(c, r == c->pid ? st : 1 << 8);
    }
    if (c->last_start > 0 && now - c->last_start < c->period_s) return;
    c->last_start = now;
    c->pid = draw(c);
}

void sdnn_chart_finish(sdnn_chart *c)
{
    if (!c->on) return;
    int st = 0;
    if (c->pid) reaped(c, waitpid(c->pid, &st, 0) == c->pid ? st : 1 << 8);
    c->pid = draw(c);
    int ok = c->pid && reaped(c, waitpid(c->pid, &st, 0) == c->pid ? st : 1 << 8);
    if (ok)
        printf("scalednn: chart written to %s\n", c->png);
    else
        fprintf(stderr, "warning: the chart %s could not be drawn (gnuplot failed)\n", c->png);
    unlink(c->script);
    c->on = 0;
}
