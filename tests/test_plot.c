/*
 * scripts/plot.sh: charts of training CSVs.  Each test writes CSVs into its
 * own mkdtemp directory, runs `sh REPO/scripts/plot.sh ...` (REPO: $SDNN_REPO,
 * else the current directory, which is the repository root under `make
 * test`) with TMPDIR pointing into that directory, and checks the exit
 * status, the PNGs, the messages, and that the script left no temporary
 * files behind.  gnuplot is required: without it every test fails saying so.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEADER "iteration,images,loss,avg_loss,learning_rate,seconds,elapsed_s," \
               "images_per_s,bytes_exchanged,exposed_comm_s,comm_s,data_wait_s,"   \
               "sync_wait_s,map"

#define MAX_ARGS 16
#define OUT_MAX 16384

typedef struct {
    char dir[64];          /* the test's mkdtemp directory */
    char tmpdir[PATH_MAX]; /* TMPDIR given to the script: must end up empty */
    char script[PATH_MAX];
    char out[OUT_MAX];     /* the script's stdout of the last run */
    char err[OUT_MAX];     /* its stderr */
} plot_state;

static const char *const charts[] = {"loss_vs_time", "loss_vs_iteration", "images_per_s",
                                     "exposed_comm"};

static void path_in(char *buf, size_t size, const char *dir, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

/* Deterministic noise in [-1, 1) (no libm, no rand()). */
static double noise(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (double)((*seed >> 8) & 0xffff) / 32768.0 - 1.0;
}

/* Writes a run of `rows` steps: loss falling from about 40 towards 2 with
 * some noise; map every `map_every` rows (0: never); an optional leading
 * "# label:" line. */
static void write_run(const char *path, const char *label, int rows, int map_every)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    if (label) fprintf(f, "# label: %s\n", label);
    fprintf(f, "%s\n", HEADER);
    unsigned seed = 12345u + (unsigned)rows + (unsigned)map_every;
    double avg = 0.0, elapsed = 0.0;
    for (int i = 1; i <= rows; i++) {
        double loss = 2.0 + 38.0 * 8.0 / (8.0 + (double)i * i / 4.0) + 0.4 * noise(&seed);
        avg = i == 1 ? loss : 0.9 * avg + 0.1 * loss;
        double seconds = 0.05 + 0.004 * noise(&seed);
        elapsed += seconds;
        double exposed = i % 4 == 0 ? 0.0003 : 0.0001;
        fprintf(f, "%d,%d,%.6f,%.6f,%.8g,%.6f,%.6f,%.3f,%d,%.6f,%.6f,%.6f,%.6f,", i, 8 * i, loss,
                avg, 0.001, seconds, elapsed, 8.0 / seconds, 3670752, exposed, 2.0 * exposed,
                0.00006, 0.002);
        if (map_every > 0 && i % map_every == 0) fprintf(f, "%.4f", 0.6 * i / (i + 15.0));
        fprintf(f, "\n");
    }
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void read_text(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void require_gnuplot(void)
{
    if (system("command -v gnuplot >/dev/null 2>&1") != 0)
        fail_msg("gnuplot is not installed: scripts/plot.sh needs it "
                 "(sh scripts/setup.sh installs gnuplot-nox)");
}

/* Runs `sh SCRIPT ARG...` (NULL-terminated) with stdout/stderr captured into
 * st->out/st->err; returns the exit status (128+signal if killed). */
static int run_plot(plot_state *st, ...)
{
    const char *argv[MAX_ARGS + 3];
    int argc = 0;
    argv[argc++] = "sh";
    argv[argc++] = st->script;
    va_list ap;
    va_start(ap, st);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(argc < MAX_ARGS + 2);
        argv[argc++] = a;
    }
    va_end(ap);
    argv[argc] = NULL;

    char out_path[PATH_MAX], err_path[PATH_MAX];
    path_in(out_path, sizeof out_path, st->dir, "stdout.txt");
    path_in(err_path, sizeof err_path, st->dir, "stderr.txt");

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
        close(fo);
        close(fe);
        setenv("TMPDIR", st->tmpdir, 1);
        execvp("sh", (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) assert_int_equal(errno, EINTR);
    read_text(out_path, st->out, sizeof st->out);
    read_text(err_path, st->err, sizeof st->err);
    print_message("plot.sh exit %d\n--- stdout\n%s--- stderr\n%s",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1, st->out, st->err);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The PNG exists, is not empty and starts with the PNG signature. */
static void check_png(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    struct stat sb;
    if (stat(path, &sb) != 0) fail_msg("%s: not written (%s)", path, strerror(errno));
    if (sb.st_size <= (off_t)sizeof sig) fail_msg("%s: empty (%lld bytes)", path,
                                                  (long long)sb.st_size);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[8];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    assert_int_equal(n, sizeof head);
    if (memcmp(head, sig, sizeof sig) != 0) fail_msg("%s: not a PNG file", path);
}

/* The script's temporary directory was removed again. */
static void check_no_temp_left(const plot_state *st)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", st->tmpdir);
    if (system(cmd) != 0) fail_msg("plot.sh left temporary files in %s", st->tmpdir);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    plot_state *st = calloc(1, sizeof *st);
    if (!st) return -1;
    const char *repo = getenv("SDNN_REPO");
    if (!repo || !*repo) repo = ".";
    snprintf(st->script, sizeof st->script, "%s/scripts/plot.sh", repo);
    snprintf(st->dir, sizeof st->dir, "/tmp/sdnn-test-plot-XXXXXX");
    if (!mkdtemp(st->dir)) {
        free(st);
        return -1;
    }
    snprintf(st->tmpdir, sizeof st->tmpdir, "%s/tmp", st->dir);
    if (mkdir(st->tmpdir, 0700) != 0) {
        rmdir(st->dir);
        free(st);
        return -1;
    }
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    plot_state *st = *state;
    int rc = nftw(st->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(st);
    return rc == 0 ? 0 : -1;
}

static void require_script(const plot_state *st)
{
    if (access(st->script, R_OK) != 0)
        fail_msg("%s: not found (run from the repository root or set SDNN_REPO)", st->script);
    require_gnuplot();
}

/* Two runs, one labelled, one with mAP on some rows: all five charts. */
static void test_two_runs(void **state)
{
    plot_state *st = *state;
    require_script(st);
    char a[PATH_MAX], b[PATH_MAX], out[PATH_MAX], png[PATH_MAX + 32];
    path_in(a, sizeof a, st->dir, "a.csv");
    path_in(b, sizeof b, st->dir, "b.csv");
    path_in(out, sizeof out, st->dir, "charts");
    write_run(a, "stock 2 replicas", 60, 0);
    write_run(b, NULL, 60, 10);

    assert_int_equal(run_plot(st, "-o", out, "-t", "shapes, 2 replicas", a, b, NULL), 0);
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        snprintf(png, sizeof png, "%s/%s.png", out, charts[i]);
        check_png(png);
        if (!strstr(st->out, png)) fail_msg("stdout does not list %s", png);
    }
    snprintf(png, sizeof png, "%s/map_vs_time.png", out);
    check_png(png);
    if (!strstr(st->out, png)) fail_msg("stdout does not list %s", png);
    check_no_temp_left(st);
}

/* No map values anywhere: no map chart; default OUTDIR is the CSV's directory. */
static void test_no_map_default_outdir(void **state)
{
    plot_state *st = *state;
    require_script(st);
    char a[PATH_MAX], png[PATH_MAX + 32];
    path_in(a, sizeof a, st->dir, "only.csv");
    write_run(a, NULL, 1, 0); /* a single row still gives charts */

    assert_int_equal(run_plot(st, a, NULL), 0);
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        snprintf(png, sizeof png, "%s/%s.png", st->dir, charts[i]);
        check_png(png);
    }
    snprintf(png, sizeof png, "%s/map_vs_time.png", st->dir);
    assert_int_not_equal(access(png, F_OK), 0);
    check_no_temp_left(st);
}

static void test_missing_file(void **state)
{
    plot_state *st = *state;
    require_script(st);
    char a[PATH_MAX], missing[PATH_MAX];
    path_in(a, sizeof a, st->dir, "a.csv");
    path_in(missing, sizeof missing, st->dir, "no-such-run.csv");
    write_run(a, NULL, 10, 0);

    assert_int_equal(run_plot(st, "-o", st->dir, a, missing, NULL), 2);
    if (!strstr(st->err, "no-such-run.csv")) fail_msg("stderr does not name the missing file");
    check_no_temp_left(st);
}

static void test_header_only(void **state)
{
    plot_state *st = *state;
    require_script(st);
    char a[PATH_MAX], h[PATH_MAX];
    path_in(a, sizeof a, st->dir, "a.csv");
    path_in(h, sizeof h, st->dir, "header-only.csv");
    write_run(a, NULL, 10, 0);
    write_text(h, "# label: not started\n" HEADER "\n");

    assert_int_not_equal(run_plot(st, "-o", st->dir, a, h, NULL), 0);
    if (!strstr(st->err, "header-only.csv")) fail_msg("stderr does not name the header-only file");
    check_no_temp_left(st);
}

static void test_missing_column(void **state)
{
    plot_state *st = *state;
    require_script(st);
    char bad[PATH_MAX], text[PATH_MAX];
    path_in(bad, sizeof bad, st->dir, "nocolumn.csv");
    path_in(text, sizeof text, st->dir, "notes.csv");
    write_text(bad, "iteration,images,avg_loss,learning_rate,seconds,elapsed_s,images_per_s,"
                    "bytes_exchanged,exposed_comm_s,comm_s,data_wait_s,sync_wait_s,map\n"
                    "1,8,40.5,0.001,0.05,0.05,160,0,0,0,0,0,\n");
    write_text(text, "this is not a training log\nat all\n");

    assert_int_not_equal(run_plot(st, "-o", st->dir, bad, NULL), 0);
    if (!strstr(st->err, "nocolumn.csv")) fail_msg("stderr does not name the file");
    /* "loss" as a column of its own, not as part of avg_loss */
    const char *p = st->err;
    int named = 0;
    while ((p = strstr(p, "loss")) != NULL) {
        if (p == st->err || (p[-1] != '_')) named = 1;
        p += 4;
    }
    if (!named) fail_msg("stderr does not name the missing column loss");

    assert_int_not_equal(run_plot(st, "-o", st->dir, text, NULL), 0);
    if (!strstr(st->err, "notes.csv")) fail_msg("stderr does not name the non-CSV file");
    if (!strstr(st->err, "iteration")) fail_msg("stderr does not name a missing column");
    check_no_temp_left(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_map_default_outdir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_column, setup, teardown),
    };
    return cmocka_run_group_tests_name("plot", tests, NULL, NULL);
}
