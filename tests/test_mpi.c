/*
 * The mpi backend across processes: runs the programs of tests/mpi/ (and
 * ./darknet scalednn bench-comm -d mpi) under mpirun through
 * tests/mpi/run.sh and checks what every rank printed.
 *
 *  - mpi_check: every codec's result bit-identical on every rank and equal
 *    to the references each rank computes itself (the fixed-order ring for
 *    the plain path, the local backend over P ranks holding the process
 *    means for the coded one), broadcast, barrier; 1, 2 and 3 processes
 *    with 1 or 2 buffers each, tiny and default segments;
 *  - mismatched buffer counts refused on every process;
 *  - one process stops answering: the others fail with SDNN_ERR_COMM
 *    within the timeout, naming it, and refuse later calls;
 *  - outside mpirun the backend is unavailable with a message saying so;
 *  - bench-comm -d mpi checks its own rows (#wrong 0), rank 0 alone prints
 *    and writes the JSON;
 *  - training (tests/mpi/mpi_train): 2 processes x 1 replica == 1 x 2 bit
 *    for bit (both modes), 2 x 2 and 3 x 1 within a stated tolerance, a
 *    SIGKILLed rank ends the run non-zero within 60 s with the previous
 *    weights file intact.
 * Built without MPI (MPI=0) or without mpirun, the cases are skipped.
 * Programs come from $SDNN_TEST_BUILD/tests/mpi (build), the script from
 * $SDNN_REPO (.), ./darknet from $SDNN_DARKNET_BIN.
 *
 * tier: full (runs in `make test`, not in `make check`: minutes of mpirun).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm.h"
#include "scalednn.h"
#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_build[512], g_repo[512];
static char g_abs_build[1024], g_abs_repo[1024];   /* for commands run elsewhere */

/* Runs `cmd` through sh, returns its exit status (-1: not run) and its
 * output (stdout and stderr) in *out (malloc'd, NUL-terminated). */
static int capture(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    strcat(cmd, " 2>&1");
    FILE *p = popen(cmd, "r");
    if (!p) {
        buf[0] = '\0';
        *out = buf;
        return -1;
    }
    for (size_t got; (got = fread(buf + len, 1, cap - len - 1, p)) > 0;) {
        len += got;
        if (cap - len < 4096) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) ++n;
    return n;
}

static int have_mpi(void)
{
#if SDNN_MPI
    return system("command -v mpirun >/dev/null 2>&1") == 0;
#else
    return 0;
#endif
}

#define NEED_MPI()                                                          \
    do {                                                                    \
        if (!have_mpi()) {                                                  \
            print_message("built without MPI or no mpirun: skipped\n");    \
            skip();                                                         \
        }                                                                   \
    } while (0)

/* mpi_check on NP processes: every rank PASS, exit 0. */
static void run_check(int np, const char *env, const char *args)
{
    char *out;
    int rc = capture(&out, "%s sh %s/tests/mpi/run.sh %d %s/tests/mpi/mpi_check %s", env, g_repo,
                     np, g_build, args);
    int pass = count(out, ": PASS (");
    if (rc != 0 || pass != np || count(out, "FAIL")) {
        print_error("mpi_check %s on %d processes (%s): exit %d, %d of %d ranks passed:\n%s\n",
                    args, np, env, rc, pass, np, out);
        free(out);
        fail();
    }
    free(out);
}

static void test_world_of_one(void **state)
{
    (void)state;
    NEED_MPI();
    run_check(1, "", "-g 2");
}

static void test_two_processes_small_segments(void **state)
{
    (void)state;
    NEED_MPI();
    /* 4 KiB segments: up to 38 segments per chunk through the 8-deep window */
    run_check(2, "SDNN_MPI_SEGMENT_KB=4", "-g 1");
    run_check(2, "SDNN_MPI_SEGMENT_KB=4", "-g 2");
}

static void test_three_processes(void **state)
{
    (void)state;
    NEED_MPI();
    run_check(3, "", "-g 2");
    run_check(3, "SDNN_MPI_SEGMENT_KB=16", "-g 1");
}

static void test_buffer_count_mismatch(void **state)
{
    (void)state;
    NEED_MPI();
    run_check(3, "", "-mismatch");
}

/* One line per rank that stayed: "rank R: status=S elapsed=T peer=P then=S2 msg=...". */
static void run_timeout(int np, const char *op)
{
    const double timeout = 0.5;
    char *out;
    int rc = capture(&out,
                     "SDNN_MPI_RUN_TIMEOUT=30 sh %s/tests/mpi/run.sh %d %s/tests/mpi/mpi_timeout %s %g",
                     g_repo, np, g_build, op, timeout);
    const int sleeper = np - 1;
    int lines = 0, bad = 0;
    for (const char *p = out; (p = strstr(p, "rank ")); ++p) {
        int r, peer;
        char status[32], then[32];
        double elapsed;
        if (sscanf(p, "rank %d: status=%31s elapsed=%lf peer=%d then=%31s", &r, status, &elapsed,
                   &peer, then) != 5)
            continue;
        ++lines;
        /* A broadcast can reach a rank straight from rank 0 before the
         * sleeper is missed: then that rank succeeds and fails next time. */
        if (strcmp(op, "bcast") == 0 && r != 0 && strcmp(status, "success") == 0) continue;
        if (strcmp(status, "comm") != 0 || strcmp(then, "aborted") != 0) ++bad;
        if (elapsed < 0.9 * timeout || elapsed > timeout + 3.0) ++bad;
        /* The sleeper's right neighbour waits for it directly. */
        const int point_to_point = strcmp(op, "allreduce") == 0 || strcmp(op, "coded") == 0;
        if (point_to_point && r == (sleeper + 1) % np && peer != sleeper) ++bad;
    }
    if (strstr(out, "FAILED")) ++bad;   /* the program's own expectations */
    if (lines != np - 1 || bad) {
        print_error("mpi_timeout %s on %d processes: exit %d, %d result lines (want %d), %d "
                    "wrong:\n%s\n",
                    op, np, rc, lines, np - 1, bad, out);
        free(out);
        fail();
    }
    free(out);
}

static void test_timeout_two(void **state)
{
    (void)state;
    NEED_MPI();
    run_timeout(2, "allreduce");
    run_timeout(2, "coded");
    run_timeout(2, "barrier");
    run_timeout(2, "bcast");
}

static void test_timeout_three(void **state)
{
    (void)state;
    NEED_MPI();
    run_timeout(3, "allreduce");
    run_timeout(3, "coded");
}

static void test_not_launched(void **state)
{
    (void)state;
#if !SDNN_MPI
    sdnn_comm *c = NULL;
    assert_int_equal(sdnn_comm_open("mpi", &c), SDNN_ERR_UNSUPPORTED);
    assert_non_null(strstr(sdnn_last_error(), "without MPI"));
#else
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK")) {
        print_message("this test itself runs under mpirun: skipped\n");
        skip();
    }
    sdnn_comm *c = NULL;
    assert_int_equal(sdnn_comm_open("mpi", &c), SDNN_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(sdnn_last_error(), "not started by mpirun"));
    assert_string_equal(sdnn_comm_available_names(), "local");
    /* and a program run directly says so */
    char *out;
    int rc = capture(&out, "%s/tests/mpi/mpi_check", g_build);
    if (rc == 0 || !strstr(out, "not started by mpirun")) {
        print_error("mpi_check outside mpirun: exit %d:\n%s\n", rc, out);
        free(out);
        fail();
    }
    free(out);
#endif
}

static void run_bench(int np, const char *g)
{
    const char *bin = getenv("SDNN_DARKNET_BIN");
    if (!bin) {
        print_message("SDNN_DARKNET_BIN is not set (make test sets it): skipped\n");
        skip();
    }
    char json[] = "/tmp/sdnn-test-mpi-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    char *out;
    int rc = capture(&out,
                     "sh %s/tests/mpi/run.sh %d %s scalednn bench-comm -d mpi -g %s -b 4 -e 256K "
                     "-f 8 -n 2 -w 1 -z none,none-ring,fp16,bf16,int8,topk -J %s",
                     g_repo, np, bin, g, json);
    FILE *f = fopen(json, "r");
    char text[4096] = "";
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = '\0';
        fclose(f);
    }
    unlink(json);
    char procs[64];
    snprintf(procs, sizeof procs, "\"processes\": %d", np);
    if (rc != 0 || !strstr(out, "# Out of bounds values : 0 OK") ||
        count(out, "# scalednn bench-comm") != 1 || !strstr(text, procs)) {
        print_error("bench-comm -d mpi on %d processes x %s: exit %d (want 0, one header, "
                    "0 out of bounds, JSON with %s):\n%s\nJSON: %.300s\n",
                    np, g, rc, procs, out, text);
        free(out);
        fail();
    }
    free(out);
}

static void test_bench_comm(void **state)
{
    (void)state;
    NEED_MPI();
    run_bench(2, "1");
    run_bench(3, "2");
}

/* ---- training across processes (tests/mpi/mpi_train) ------------------- */

/* mpi_train on NP processes (NP = 0: alone, without mpirun) in DIR with
 * ARGS (ENV: variable settings before the command, or ""); returns the
 * exit status, *secs the wall time and *out the output (malloc'd). */
static int run_train_out(int np, const char *dir, const char *env, const char *args,
                         double *secs, char **out)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = np > 0 ? capture(out, "cd %s && %s sh %s/tests/mpi/run.sh %d %s/tests/mpi/mpi_train %s",
                              dir, env, g_abs_repo, np, g_abs_build, args)
                    : capture(out, "cd %s && %s %s/tests/mpi/mpi_train %s", dir, env, g_abs_build,
                              args);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (secs) *secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    return rc;
}

/* The same, the output printed on failure when want_ok, then dropped. */
static int run_train(int np, const char *dir, const char *args, int want_ok, double *secs)
{
    char *out;
    int rc = run_train_out(np, dir, "", args, secs, &out);
    if (want_ok && rc != 0) print_error("mpi_train %s on %d processes: exit %d\n%s\n", args, np, rc, out);
    free(out);
    return rc;
}

/* The floats of a Darknet weights file after its 20-byte header (major,
 * minor, revision, seen); *hdr gets the header. */
static float *read_weights(const char *dir, const char *name, size_t *n, unsigned char hdr[20])
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = len > 20 ? malloc((size_t)len) : NULL;
    if (!v || fread(hdr, 1, 20, f) != 20 || fread(v, 1, (size_t)len - 20, f) != (size_t)len - 20) {
        free(v);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = ((size_t)len - 20) / sizeof(float);
    return v;
}

/* Relative Frobenius difference of two weights files (-1: unreadable or a
 * different header or size); 0 means bit for bit when exact. */
static double weights_diff(const char *dir, const char *x, const char *y, int *exact)
{
    size_t nx = 0, ny = 0;
    unsigned char hx[20], hy[20];
    float *a = read_weights(dir, x, &nx, hx), *b = read_weights(dir, y, &ny, hy);
    double d = -1;
    if (a && b && nx == ny && memcmp(hx, hy, 20) == 0) {
        double num = 0, den = 0;
        for (size_t i = 0; i < nx; ++i) {
            double e = (double)a[i] - (double)b[i];
            num += e * e;
            den += (double)a[i] * (double)a[i];
        }
        d = den > 0 ? sqrt(num / den) : sqrt(num);
        *exact = memcmp(a, b, nx * sizeof(float)) == 0;
    }
    free(a);
    free(b);
    return d;
}

static char *make_dir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/sdnn-mpi-train-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) print_message("could not remove %s\n", dir);
}

/* 2 processes x 1 replica == 1 process x 2 replicas, bit for bit, after 10
 * steps (batch norm, a rate schedule, several buckets), in both modes.
 * Why exact: with one replica per process the local mean is the buffer
 * itself, and the ring over two processes adds the two buffers (a + b or
 * b + a: fp addition is commutative) and halves the sum, which is what the
 * local backend does with two replicas; the same holds for the running
 * statistics at the save, the loss, and stock mode's weight average
 * (1/2 is exact).  The learning rate (x world) and seen advance the same. */
static void test_train_two_processes_exact(void **state)
{
    (void)state;
    NEED_MPI();
    char *dir = make_dir();
    int exact = 0;
    assert_int_equal(run_train(2, dir, "-n 1 -s 10 -o p2.weights", 1, NULL), 0);
    assert_int_equal(run_train(0, dir, "-n 2 -s 10 -o p1.weights", 1, NULL), 0);
    double d = weights_diff(dir, "p2.weights", "p1.weights", &exact);
    print_message("scalednn 2x1 vs 1x2: relative difference %g, bitwise %s\n", d,
                  exact ? "equal" : "DIFFERENT");
    assert_true(d == 0 && exact);
    assert_int_equal(run_train(2, dir, "-m stock -i 2 -n 1 -s 10 -o s2.weights", 1, NULL), 0);
    assert_int_equal(run_train(0, dir, "-m stock -i 2 -n 2 -s 10 -o s1.weights", 1, NULL), 0);
    d = weights_diff(dir, "s2.weights", "s1.weights", &exact);
    print_message("stock 2x1 vs 1x2: relative difference %g, bitwise %s\n", d,
                  exact ? "equal" : "DIFFERENT");
    assert_true(d == 0 && exact);
    /* 2 processes x 2 replicas == 1 x 4 within rounding (the local means
     * come first: ((a+b)/2 + (c+d)/2)/2 vs (a+b+c+d)/4). */
    assert_int_equal(run_train(2, dir, "-n 2 -s 10 -o q2.weights", 1, NULL), 0);
    assert_int_equal(run_train(0, dir, "-n 4 -s 10 -o q1.weights", 1, NULL), 0);
    d = weights_diff(dir, "q2.weights", "q1.weights", &exact);
    print_message("scalednn 2x2 vs 1x4: relative difference %g\n", d);
    assert_true(d >= 0 && d < 1e-5);
    remove_dir(dir);
}

/* 3 processes: the ring adds chunk c in the order c, c+1, c+2, so sums
 * are associated differently from the local backend's in-order sum and
 * differ in the last bits; after 10 steps the weights agree to a relative
 * (Frobenius) difference below 1e-5 (measured: 6e-8). */
static void test_train_three_processes_close(void **state)
{
    (void)state;
    NEED_MPI();
    char *dir = make_dir();
    int exact = 0;
    assert_int_equal(run_train(3, dir, "-n 1 -s 10 -o p3.weights", 1, NULL), 0);
    assert_int_equal(run_train(0, dir, "-n 3 -s 10 -o p1.weights", 1, NULL), 0);
    double d = weights_diff(dir, "p3.weights", "p1.weights", &exact);
    print_message("scalednn 3x1 vs 1x3: relative difference %g (bound 1e-5)\n", d);
    assert_true(d >= 0 && d < 1e-5);
    /* Stock mode's central host: process 0 adds the processes in rank
     * order and scales once, Darknet's sync_nets over 3 devices, so with
     * one replica per process it is the local run bit for bit. */
    assert_int_equal(run_train(3, dir, "-m stock -i 2 -n 1 -s 10 -o s3.weights", 1, NULL), 0);
    assert_int_equal(run_train(0, dir, "-m stock -i 2 -n 3 -s 10 -o s1.weights", 1, NULL), 0);
    d = weights_diff(dir, "s3.weights", "s1.weights", &exact);
    print_message("stock 3x1 vs 1x3: relative difference %g, bitwise %s\n", d,
                  exact ? "equal" : "DIFFERENT");
    assert_true(d == 0 && exact);
    remove_dir(dir);
}

/* The PLAN line every rank printed (mpi_train -a): 1 when all np ranks
 * printed one, all alike after "rank R: ". */
static int same_plans(const char *out, int np)
{
    char first[4096] = "";
    int seen = 0;
    for (int r = 0; r < np; ++r) {
        char key[32];
        snprintf(key, sizeof key, "rank %d: PLAN ", r);
        const char *p = strstr(out, key);
        if (!p) return 0;
        p += strlen(key) - strlen("PLAN ");
        size_t len = strcspn(p, "\n");
        if (len >= sizeof first) return 0;
        if (!seen++) {
            memcpy(first, p, len);
            first[len] = 0;
        } else if (strlen(first) != len || strncmp(first, p, len) != 0) {
            return 0;
        }
    }
    return seen == np;
}

/* bucket_mb=auto between processes: every process plans from the same
 * (agreed) profile, link and codec rates, and switches to the same buckets
 * at the same step.  2 x 1 with no codec: the weights equal the run with
 * fixed buckets bit for bit (a + b needs no order); 3 x 2 with
 * compress=auto: every rank prints the same plan. */
static void test_train_autoplan(void **state)
{
    (void)state;
    NEED_MPI();
    char *dir = make_dir();
    char *out;
    int rc = run_train_out(2, dir, "", "-n 1 -s 8 -a none -o a.weights", NULL, &out);
    int same = same_plans(out, 2);
    if (rc != 0 || !same) print_error("2x1 bucket_mb=auto: exit %d, same plans %d:\n%s\n", rc, same, out);
    free(out);
    assert_int_equal(rc, 0);
    assert_true(same);
    assert_int_equal(run_train(2, dir, "-n 1 -s 8 -o f.weights", 1, NULL), 0);
    int exact = 0;
    double d = weights_diff(dir, "a.weights", "f.weights", &exact);
    print_message("2x1 bucket_mb=auto vs fixed buckets: relative difference %g, bitwise %s\n", d,
                  exact ? "equal" : "DIFFERENT");
    assert_true(d == 0 && exact);
    rc = run_train_out(3, dir, "", "-n 2 -s 8 -a auto -o b.weights", NULL, &out);
    same = same_plans(out, 3);
    if (rc != 0 || !same) print_error("3x2 compress=auto: exit %d, same plans %d:\n%s\n", rc, same, out);
    free(out);
    assert_int_equal(rc, 0);
    assert_true(same);
    remove_dir(dir);
}

/* Occurrences of `needle` in `hay`. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) ++n;
    return n;
}

/* timeline= across 2 processes: rank 0 writes PATH (pid 1), rank 1
 * PATH.rank1 (pid 2, "scalednn rank 1"); scripts/timeline_merge.sh puts
 * every event of both into one trace whose footer counts both files'
 * records, and refuses an unfinished input without writing its output. */
static void test_timeline_merge(void **state)
{
    (void)state;
    NEED_MPI();
    char *dir = make_dir();
    assert_int_equal(run_train(2, dir, "-n 1 -s 4 -l t.json -o w.weights", 1, NULL), 0);
    char *out;
    int rc = capture(&out, "cd %s && sh %s/scripts/timeline_merge.sh all.json t.json", dir,
                     g_abs_repo);
    if (rc != 0) print_error("timeline_merge: exit %d\n%s\n", rc, out);
    free(out);
    assert_int_equal(rc, 0);
    char p0[1024], p1[1024], pa[1024];
    snprintf(p0, sizeof p0, "%s/t.json", dir);
    snprintf(p1, sizeof p1, "%s/t.json.rank1", dir);
    snprintf(pa, sizeof pa, "%s/all.json", dir);
    char *a = tu_slurp(p0), *b = tu_slurp(p1), *m = tu_slurp(pa);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(m);
    const int ea = count_of(a, "\"ph\":"), eb = count_of(b, "\"ph\":");
    print_message("rank 0: %d events, rank 1: %d, merged: %d\n", ea, eb, count_of(m, "\"ph\":"));
    assert_true(ea > 20 && eb > 20);
    assert_int_equal(count_of(a, "\"pid\":2,"), 0);
    assert_int_equal(count_of(b, "\"pid\":1,"), 0);
    assert_int_equal(count_of(b, "\"pid\":2,"), eb);
    assert_non_null(strstr(b, "\"scalednn rank 1\""));
    assert_int_equal(count_of(m, "\"ph\":"), ea + eb);
    assert_int_equal(count_of(m, "\"pid\":1,"), ea);
    assert_int_equal(count_of(m, "\"pid\":2,"), eb);
    long ra = -1, rb = -1, rm = -1;
    const char *k = "\"records\":";
    if (strstr(a, k)) ra = strtol(strstr(a, k) + strlen(k), NULL, 10);
    if (strstr(b, k)) rb = strtol(strstr(b, k) + strlen(k), NULL, 10);
    if (strstr(m, k)) rm = strtol(strstr(m, k) + strlen(k), NULL, 10);
    assert_true(ra > 0 && rb > 0);
    assert_int_equal(rm, ra + rb);
    /* A JSON parser agrees, where python3 is installed. */
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        rc = capture(&out, "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                     "print(len(d[\"traceEvents\"]))' %s", pa);
        assert_int_equal(rc, 0);
        assert_int_equal(atoi(out), ea + eb);
        free(out);
    }
    /* An unfinished input: exit 1, no output file. */
    FILE *f = fopen(p1, "w");
    assert_non_null(f);
    fwrite(b, 1, strlen(b) / 2, f);
    fclose(f);
    rc = capture(&out, "cd %s && sh %s/scripts/timeline_merge.sh bad.json t.json", dir, g_abs_repo);
    int named = strstr(out, "t.json.rank1 ends before its footer") != NULL;
    free(out);
    assert_int_not_equal(rc, 0);
    assert_true(named);
    snprintf(pa, sizeof pa, "%s/bad.json", dir);
    assert_int_not_equal(access(pa, F_OK), 0);
    free(a);
    free(b);
    free(m);
    remove_dir(dir);
}

/* A rank SIGKILLed before step 5: the run ends non-zero within 60 s and
 * the weights file is the one saved after step 4, bit for bit (saves are
 * atomic, and a rank passes step 4 only after rank 0 wrote it). */
static void kill_case(const char *who)
{
    char *dir = make_dir();
    char args[128];
    double secs = 0;
    int exact = 0;
    snprintf(args, sizeof args, "-n 1 -s 10 -t 5 -k %s:5 -o k.weights", who);
    char *out;
    int rc = run_train_out(3, dir, "", args, &secs, &out);
    /* The lost rank is named: by mpirun ("process rank R ... exited on
     * signal 9"), or by a survivor's timeout ("for rank R, which did not
     * answer") when that comes first. */
    char byname[64], bypeer[64];
    snprintf(byname, sizeof byname, "process rank %s ", who);
    snprintf(bypeer, sizeof bypeer, "for rank %s, which did not answer", who);
    const int named = strstr(out, byname) != NULL || strstr(out, bypeer) != NULL;
    print_message("rank %s killed: exit %d after %.1f s, named %d\n", who, rc, secs, named);
    if (rc == 0 || !named) print_error("%s\n", out);
    free(out);
    assert_int_not_equal(rc, 0);
    assert_true(named);
    assert_true(secs < 60);
    assert_int_equal(run_train(3, dir, "-n 1 -s 5 -o ref.weights", 1, NULL), 0);
    double d = weights_diff(dir, "k.weights", "ref.weights", &exact);
    assert_true(d == 0 && exact);
    remove_dir(dir);
}

/* A rank that stops (SIGSTOP: mpirun sees nothing) before step 5, in the
 * run MODE ("" or stock mode's options): the run ends non-zero within 30 s
 * (comm_timeout_s=3) with every one of NEEDLES in its output, and the
 * weights file is the one saved after step 4. */
static void hung_case(const char *mode, int rank, const char *const *needles)
{
    char *dir = make_dir();
    char args[160], *out;
    double secs = 0;
    snprintf(args, sizeof args, "%s -n 1 -s 10 -t 3 -p %d:5 -o h.weights", mode, rank);
    int rc = run_train_out(3, dir, "SDNN_MPI_RUN_TIMEOUT=50", args, &secs, &out);
    int named = 1;
    for (const char *const *n = needles; *n; ++n) named = named && strstr(out, *n) != NULL;
    if (rc == 0 || !named || secs >= 30)
        print_error("hung rank %d (%s): exit %d after %.0f s, named %d:\n%s\n", rank, mode, rc,
                    secs, named, out);
    free(out);
    assert_int_not_equal(rc, 0);
    assert_true(named);
    assert_true(secs < 30);
    int exact = 0;
    snprintf(args, sizeof args, "%s -n 1 -s 5 -o ref.weights", mode);
    assert_int_equal(run_train(3, dir, args, 1, NULL), 0);
    assert_true(weights_diff(dir, "h.weights", "ref.weights", &exact) == 0 && exact);
    remove_dir(dir);
}

/* Its neighbour names the stopped rank. */
static void test_train_rank_hung(void **state)
{
    (void)state;
    NEED_MPI();
    static const char *const needles[] = {"for rank 1, which did not answer", NULL};
    hung_case("", 1, needles);
}

/* Stock mode: process 0, the central host, waits for rank 2's weights at
 * the next average and names it. */
static void test_train_stock_rank_hung(void **state)
{
    (void)state;
    NEED_MPI();
    static const char *const needles[] = {"mpi rank 0: waited", "for rank 2, which did not answer",
                                          "central average", NULL};
    hung_case("-m stock -i 2", 2, needles);
}

static void test_train_rank_killed(void **state)
{
    (void)state;
    NEED_MPI();
    kill_case("1");
    kill_case("0");
}

/* The same 10 steps on 2 hosts in network namespaces joined by 100 Mbit/s
 * links (scripts/netlab.sh, root only): the weights equal the run on
 * shared memory bit for bit.  On libdarknet's convolutions: oneDNN's sums
 * depend on the OpenMP team, which is each process's cores, and mpirun
 * binds the processes on shared memory to one core each, not the ones in
 * the namespaces. */
static void test_train_netlab(void **state)
{
    (void)state;
    NEED_MPI();
    char *out;
    if (getuid() != 0 ||
        capture(&out, "cd /tmp && sh %s/scripts/netlab.sh -k 2 -rate 100mbit -- true", g_abs_repo) != 0) {
        if (getuid() == 0) free(out);
        print_message("netlab needs root and network namespaces: skipped\n");
        skip();
    }
    free(out);
    char *dir = make_dir();
    int exact = 0;
    int rc = capture(&out, "cd %s && sh %s/scripts/netlab.sh -k 2 -rate 100mbit -- "
                     "%s/tests/mpi/mpi_train -n 1 -s 10 -c darknet -o %s/lab.weights", dir, g_abs_repo,
                     g_abs_build, dir);
    if (rc != 0) print_error("netlab run: exit %d\n%s\n", rc, out);
    free(out);
    assert_int_equal(rc, 0);
    assert_int_equal(run_train(2, dir, "-n 1 -s 10 -c darknet -o shm.weights", 1, NULL), 0);
    double d = weights_diff(dir, "lab.weights", "shm.weights", &exact);
    assert_true(d == 0 && exact);
    remove_dir(dir);
}

/* ./darknet detector train under mpirun, 2 processes x 1 replica with
 * backend=auto: exit 0, rank 0 alone prints the progress and writes the
 * CSV, the final weights exist; a resume from them continues at their
 * iteration on both ranks. */
static void test_darknet_train(void **state)
{
    (void)state;
    NEED_MPI();
    const char *bin = getenv("SDNN_DARKNET_BIN");
    char abs_bin[PATH_MAX];
    if (!bin || !realpath(bin, abs_bin)) {
        print_message("SDNN_DARKNET_BIN is not set (make test sets it): skipped\n");
        skip();
    }
    char *dir = make_dir();
    char *out;
    int rc = capture(&out,
                     "cd %s && %s scalednn gen-shapes shapes -n 48 -valid 4 -seed 3 >/dev/null && "
                     "printf 'classes=4\\ntrain=%s/shapes/train.txt\\nvalid=%s/shapes/valid.txt\\n"
                     "names=%s/shapes/shapes.names\\nbackup=%s/backup/\\n' > s.data && "
                     "sed 's/^backend=local/backend=auto\\ncomm_timeout_s=20/' %s/cfg/shapes-scalednn.cfg > s.cfg",
                     dir, abs_bin, dir, dir, dir, dir, g_abs_repo);
    free(out);
    assert_int_equal(rc, 0);
    rc = capture(&out, "cd %s && sh %s/tests/mpi/run.sh 2 %s detector train s.data s.cfg -gpus 0 "
                 "-max_batches 10 -seed 1", dir, g_abs_repo, abs_bin);
    int worlds = count(out, "world of 2 (2 processes)"), lines = count(out, " img/s, ");
    if (rc != 0 || worlds != 1 || lines != 5 || !strstr(out, "Learning Rate: 0.004,"))
        print_error("darknet under mpirun: exit %d, %d banners, %d progress lines (want 1, 5):\n%s\n",
                    rc, worlds, lines, out);
    free(out);
    assert_int_equal(rc, 0);
    assert_int_equal(worlds, 1);
    assert_int_equal(lines, 5);
    rc = capture(&out, "cd %s && test -s backup/s_final.weights && test $(grep -c '^[0-9]' backup/s.csv) -eq 5",
                 dir);
    free(out);
    assert_int_equal(rc, 0);
    rc = capture(&out, "cd %s && sh %s/tests/mpi/run.sh 2 %s detector train s.data s.cfg "
                 "backup/s_final.weights -gpus 0 -max_batches 14 -seed 2", dir, g_abs_repo, abs_bin);
    if (rc != 0 || !strstr(out, "\n12: ") || !strstr(out, "\n14: ") || strstr(out, "\n2: "))
        print_error("resume under mpirun: exit %d\n%s\n", rc, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\n12: "));
    assert_null(strstr(out, "\n2: "));
    free(out);
    remove_dir(dir);
}

int main(void)
{
    const char *b = getenv("SDNN_TEST_BUILD"), *r = getenv("SDNN_REPO");
    snprintf(g_build, sizeof g_build, "%s", b && *b ? b : "build");
    snprintf(g_repo, sizeof g_repo, "%s", r && *r ? r : ".");
    if (!realpath(g_build, g_abs_build)) snprintf(g_abs_build, sizeof g_abs_build, "%s", g_build);
    if (!realpath(g_repo, g_abs_repo)) snprintf(g_abs_repo, sizeof g_abs_repo, "%s", g_repo);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_launched),
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_two_processes_small_segments),
        cmocka_unit_test(test_three_processes),
        cmocka_unit_test(test_buffer_count_mismatch),
        cmocka_unit_test(test_timeout_two),
        cmocka_unit_test(test_timeout_three),
        cmocka_unit_test(test_bench_comm),
        cmocka_unit_test(test_train_two_processes_exact),
        cmocka_unit_test(test_train_three_processes_close),
        cmocka_unit_test(test_train_autoplan),
        cmocka_unit_test(test_timeline_merge),
        cmocka_unit_test(test_train_rank_killed),
        cmocka_unit_test(test_train_rank_hung),
        cmocka_unit_test(test_train_stock_rank_hung),
        cmocka_unit_test(test_train_netlab),
        cmocka_unit_test(test_darknet_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
