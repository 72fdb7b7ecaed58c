/*
 * test_save: atomic weights saves (plugin/saveio.c).
 *
 *  - round trip: a conv+BN / conv / connected+BN / connected network with
 *    seeded random parameters is saved and loaded back by Darknet's
 *    load_weights into a freshly parsed network, bit for bit;
 *  - error paths: missing directory, unwritable place, target that is a
 *    directory, disk full (a file size limit in a child): SDNN_ERR_IO naming
 *    the path, no temporary file left, an existing target unchanged;
 *  - crash safety: a child saves alternating versions over a 32 MiB file and
 *    is SIGKILLed at various moments; the file must always be one complete
 *    version, the right one given how many saves the child reported.
 * Every file lives in a mkdtemp directory under /tmp that is removed after.
 */
#include "splitmix.h"
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <darknet.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "saveio.h"
#include "replicas.h"

/* ---- seeded PRNG (splitmix64) -------------------------------------------- */

static uint64_t g_rng = 0x0dd5eed5a11ce5ULL;

static uint64_t rng_next(void)
{
    return sdnn_splitmix64_next(&g_rng);
}

/* Uniform in [lo, hi). */
static float rng_uniform(float lo, float hi)
{
    double u = (double)(rng_next() >> 40) / (double)(1ULL << 24);
    return (float)(lo + (hi - lo) * u);
}

static void fill_random(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; ++i) x[i] = rng_uniform(lo, hi);
}

/* ---- temp directory per test ---------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static int setup_dir(void **state)
{
    char *dir = strdup("/tmp/sdnn_test_save_XXXXXX");
    if (!dir || !mkdtemp(dir)) {
        free(dir);
        return -1;
    }
    *state = dir;
    return 0;
}

static int teardown_dir(void **state)
{
    char *dir = *state, ro[512];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    chmod(ro, 0755); /* test_save_errors makes it read-only for a while */
    int rc = nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
    return rc;
}

/* dir + "/" + name, in buf. */
static const char *join(char *buf, size_t size, const char *dir, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < size);
    return buf;
}

/* Entries of dir whose name contains ".tmp.". */
static int count_tmp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) ++n;
    closedir(d);
    return n;
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

/* Whole file into a malloc'd buffer; *len gets its size. */
static char *slurp_file(const char *path, size_t *len)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    char *buf = malloc((size_t)sb.st_size + 1);
    assert_non_null(buf);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

static off_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

static network *parse_cfg_text(const char *dir, const char *text)
{
    char path[512];
    join(path, sizeof path, dir, "net.cfg");
    write_file(path, text, strlen(text));
    network *net = parse_network_cfg(path);
    unlink(path);
    assert_non_null(net);
    return net;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- a network's parameters ------------------------------------------------ */

typedef struct param {
    float *p;
    size_t n;
    int positive; /* rolling variance: keep it > 0 */
} param;

#define MAX_PARAMS 512

/* Every array Darknet saves for the conv and connected layers of net. */
static int net_params(network *net, param *out)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        size_t units, nw;
        if (l->type == CONVOLUTIONAL) {
            units = (size_t)l->n;
            nw = (size_t)l->nweights;
        } else if (l->type == CONNECTED) {
            units = (size_t)l->outputs;
            nw = (size_t)l->outputs * l->inputs;
        } else {
            continue;
        }
        assert_true(k + 5 <= MAX_PARAMS);
        out[k++] = (param){l->biases, units, 0};
        out[k++] = (param){l->weights, nw, 0};
        if (l->batch_normalize) {
            out[k++] = (param){l->scales, units, 0};
            out[k++] = (param){l->rolling_mean, units, 0};
            out[k++] = (param){l->rolling_variance, units, 1};
        }
    }
    return k;
}

static size_t total_floats(const param *ps, int np)
{
    size_t n = 0;
    for (int i = 0; i < np; ++i) n += ps[i].n;
    return n;
}

/* The file size save_weights should produce: header (3 ints, size_t seen)
 * plus every parameter as float32. */
static off_t expected_size(network *net)
{
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    return (off_t)(3 * sizeof(int) + sizeof(size_t) + total_floats(ps, np) * sizeof(float));
}

/* One set of parameter values, flattened, plus `seen`. */
typedef struct version {
    float *data;
    size_t n;
    size_t seen;
} version;

static void version_random(version *v, size_t n, size_t seen, const param *ps, int np)
{
    v->data = malloc(n * sizeof(float));
    assert_non_null(v->data);
    v->n = n;
    v->seen = seen;
    size_t off = 0;
    for (int i = 0; i < np; ++i) {
        fill_random(v->data + off, ps[i].n, ps[i].positive ? 0.01f : -2.0f, 2.0f);
        off += ps[i].n;
    }
}

static void version_apply(network *net, const version *v)
{
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    size_t off = 0;
    for (int i = 0; i < np; ++i) {
        memcpy(ps[i].p, v->data + off, ps[i].n * sizeof(float));
        off += ps[i].n;
    }
    assert_int_equal(off, v->n);
    *net->seen = v->seen;
}

/* Copy net's parameters into v (v->data already sized). */
static void version_take(network *net, version *v)
{
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    size_t off = 0;
    for (int i = 0; i < np; ++i) {
        memcpy(v->data + off, ps[i].p, ps[i].n * sizeof(float));
        off += ps[i].n;
    }
    assert_int_equal(off, v->n);
    v->seen = *net->seen;
}

/* Overwrite every parameter of net with a NaN pattern no version has. */
static void poison(network *net)
{
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    for (int i = 0; i < np; ++i) memset(ps[i].p, 0xff, ps[i].n * sizeof(float));
    *net->seen = (size_t)-1;
}

static void load_into(network *net, const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    /* load_weights exit()s on a missing file: check first. */
    assert_int_equal(sdnn_check_readable(buf), SDNN_OK);
    load_weights(net, buf);
}

/* ---- round trip ---------------------------------------------------------------- */

static const char g_small_cfg[] =
    "[net]\nbatch=2\nheight=8\nwidth=8\nchannels=3\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[convolutional]\nfilters=4\nsize=1\nstride=1\npad=0\nactivation=linear\n\n"
    "[connected]\nbatch_normalize=1\noutput=12\nactivation=relu\n\n"
    "[connected]\noutput=10\nactivation=linear\n";

/* Every array of a and b equal bit for bit; prints the first difference. */
static int nets_equal(network *a, network *b)
{
    param pa[MAX_PARAMS], pb[MAX_PARAMS];
    int na = net_params(a, pa), nb = net_params(b, pb);
    if (na != nb) return 0;
    for (int i = 0; i < na; ++i) {
        if (pa[i].n != pb[i].n || memcmp(pa[i].p, pb[i].p, pa[i].n * sizeof(float)) != 0) {
            print_error("parameter array %d (%zu floats) differs\n", i, pa[i].n);
            return 0;
        }
    }
    if (*a->seen != *b->seen) {
        print_error("seen differs: %zu vs %zu\n", *a->seen, *b->seen);
        return 0;
    }
    return 1;
}

static void randomise(network *net)
{
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    for (int i = 0; i < np; ++i)
        fill_random(ps[i].p, ps[i].n, ps[i].positive ? 0.01f : -3.0f, 3.0f);
    /* a few values whose bits a lossy path would change */
    ps[1].p[0] = -0.0f;
    ps[1].p[1] = 1e-42f; /* subnormal */
    ps[1].p[2] = 3.4028235e38f;
    *net->seen = ((size_t)rng_next()) >> 8;
}

static void test_roundtrip_bit_exact(void **state)
{
    const char *dir = *state;
    char path[512];
    join(path, sizeof path, dir, "rt.weights");

    network *net = parse_cfg_text(dir, g_small_cfg);
    assert_int_equal(net->n, 4);
    assert_true(net->layers[0].batch_normalize && !net->layers[1].batch_normalize);
    param ps[MAX_PARAMS];
    assert_int_equal(net_params(net, ps), 5 + 2 + 5 + 2);

    for (int round = 0; round < 2; ++round) { /* second round replaces the file */
        randomise(net);
        sdnn_clear_error();
        assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
        assert_string_equal(sdnn_last_error(), "");
        assert_int_equal(file_size(path), expected_size(net));
        assert_int_equal(count_tmp_files(dir), 0);

        network *back = parse_cfg_text(dir, g_small_cfg);
        poison(back);
        load_into(back, path);
        assert_true(nets_equal(net, back));
        sdnn_network_free(back);
    }
    sdnn_network_free(net);
}

/* A file already under the temporary name (a crashed process's with our
 * pid, or a user's) is kept as it was: the save takes another name. */
static void test_stale_tmp_replaced(void **state)
{
    const char *dir = *state;
    char path[512], tmp[600];
    join(path, sizeof path, dir, "stale.weights");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    write_file(tmp, "junk", 4);

    network *net = parse_cfg_text(dir, g_small_cfg);
    randomise(net);
    assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
    assert_int_equal(count_tmp_files(dir), 1);
    size_t klen = 0;
    char *kept = slurp_file(tmp, &klen);
    assert_int_equal(klen, 4);
    assert_memory_equal(kept, "junk", 4);
    free(kept);
    assert_int_equal(unlink(tmp), 0);
    network *back = parse_cfg_text(dir, g_small_cfg);
    poison(back);
    load_into(back, path);
    assert_true(nets_equal(net, back));
    sdnn_network_free(back);
    sdnn_network_free(net);
}

/* Every other layer type save_weights writes: the save succeeds only when
 * saveio's size formula matches what Darknet wrote, and the file loads back
 * (except deconvolutional: this Darknet's load divides by its groups, which
 * is 0, so that file is only saved). */
static void test_other_layer_types(void **state)
{
    const char *dir = *state;
    static const struct { const char *cfg; int loadable; } cases[] = {
        {"[net]\nbatch=4\ntime_steps=2\ninputs=10\n\n"
         "[rnn]\nbatch_normalize=1\noutput=8\nactivation=leaky\n\n"
         "[gru]\noutput=7\n\n"
         "[lstm]\noutput=5\n\n"
         "[connected]\noutput=3\nactivation=linear\n", 1},
        {"[net]\nbatch=2\ntime_steps=2\nheight=6\nwidth=6\nchannels=2\n\n"
         "[crnn]\nbatch_normalize=1\nactivation=leaky\n\n"
         "[local]\nsize=3\nstride=1\npad=1\nfilters=2\nactivation=linear\n\n"
         "[batchnorm]\n\n"
         "[maxpool]\nsize=2\nstride=2\n", 1},
        {"[net]\nbatch=1\nheight=4\nwidth=4\nchannels=3\n\n"
         "[deconvolutional]\nbatch_normalize=1\nfilters=2\nsize=2\nstride=2\n"
         "activation=linear\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char path[512];
        snprintf(path, sizeof path, "%s/types%zu.weights", dir, i);
        network *net = parse_cfg_text(dir, cases[i].cfg);
        sdnn_status st = sdnn_save_weights_atomic(net, path);
        if (st != SDNN_OK) print_error("cfg %zu: %s\n", i, sdnn_last_error());
        assert_int_equal(st, SDNN_OK);
        assert_true(file_size(path) > 20);
        assert_int_equal(count_tmp_files(dir), 0);
        if (cases[i].loadable) load_into(net, path);
        sdnn_network_free(net);
    }
}

/* ---- error paths ------------------------------------------------------------- */

static void expect_io_naming(sdnn_status st, const char *path)
{
    assert_int_equal(st, SDNN_ERR_IO);
    const char *msg = sdnn_last_error();
    if (!strstr(msg, path)) print_error("message does not name '%s': %s\n", path, msg);
    assert_non_null(strstr(msg, path));
}

static void test_save_errors(void **state)
{
    const char *dir = *state;
    char path[512], sub[512], inner[600];
    network *net = parse_cfg_text(dir, g_small_cfg);
    randomise(net);

    /* directory missing */
    join(sub, sizeof sub, dir, "missing");
    join(path, sizeof path, sub, "w.weights");
    expect_io_naming(sdnn_save_weights_atomic(net, path), path);
    assert_int_equal(file_size(sub), -1);
    assert_int_equal(count_tmp_files(dir), 0);

    /* a place nobody may create files in (sysfs refuses even root) */
    expect_io_naming(sdnn_save_weights_atomic(net, "/sys/sdnn_test_save.weights"),
                     "/sys/sdnn_test_save.weights");

    /* read-only directory holding an existing file (permissions bind non-root only) */
    join(sub, sizeof sub, dir, "ro");
    assert_int_equal(mkdir(sub, 0755), 0);
    join(path, sizeof path, sub, "w.weights");
    write_file(path, "old contents", 12);
    assert_int_equal(chmod(sub, 0555), 0);
    if (access(sub, W_OK) != 0) {
        expect_io_naming(sdnn_save_weights_atomic(net, path), path);
        size_t len;
        char *got = slurp_file(path, &len);
        assert_int_equal(len, 12);
        assert_memory_equal(got, "old contents", 12);
        free(got);
        assert_int_equal(count_tmp_files(sub), 0);
    } else {
        print_message("read-only directory case skipped: permissions do not bind "
                      "this user (root)\n");
    }
    assert_int_equal(chmod(sub, 0755), 0);

    /* the target is a directory: fails at the rename, after the file was written */
    join(path, sizeof path, dir, "isdir.weights");
    assert_int_equal(mkdir(path, 0755), 0);
    join(inner, sizeof inner, path, "keep");
    write_file(inner, "keep", 4);
    expect_io_naming(sdnn_save_weights_atomic(net, path), path);
    assert_int_equal(count_tmp_files(dir), 0);
    assert_int_equal(file_size(inner), 4);

    /* trailing slash */
    snprintf(inner, sizeof inner, "%s/", path);
    expect_io_naming(sdnn_save_weights_atomic(net, inner), inner);

    /* bad arguments */
    assert_int_equal(sdnn_save_weights_atomic(NULL, path), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_save_weights_atomic(net, ""), SDNN_ERR_INVALID);
    assert_int_equal(sdnn_save_weights_atomic(net, NULL), SDNN_ERR_INVALID);
    sdnn_network_free(net);
}

/* Disk full: a child under a 4 KiB file size limit saves over a good file.
 * Darknet's fwrite fails silently; the short file must be caught. */
static void test_save_disk_full(void **state)
{
    const char *dir = *state;
    char path[512];
    join(path, sizeof path, dir, "full.weights");
    network *net = parse_cfg_text(dir, g_small_cfg);
    assert_true(expected_size(net) > 3 * 4096);
    randomise(net);
    assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
    size_t len0;
    char *before = slurp_file(path, &len0);
    randomise(net);

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(20);
        sdnn_status st = sdnn_save_weights_atomic(net, path);
        const char *msg = sdnn_last_error();
        fprintf(stderr, "child under RLIMIT_FSIZE=4096: status %d: %s\n", (int)st, msg);
        if (st != SDNN_ERR_IO) _exit(21);
        if (!strstr(msg, path)) _exit(22);
        _exit(0);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);

    size_t len1;
    char *after = slurp_file(path, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    assert_int_equal(count_tmp_files(dir), 0);
    free(before);
    free(after);
    sdnn_network_free(net);
}

static void test_check_readable(void **state)
{
    const char *dir = *state;
    char path[512];
    join(path, sizeof path, dir, "nope.weights");
    expect_io_naming(sdnn_check_readable(path), path);
    expect_io_naming(sdnn_check_readable(dir), dir);
    write_file(path, "x", 1);
    assert_int_equal(sdnn_check_readable(path), SDNN_OK);
    assert_int_equal(sdnn_check_readable(""), SDNN_ERR_IO);
}

static void test_mkdirs(void **state)
{
    const char *dir = *state;
    char path[512], file[512], below[600];
    struct stat sb;
    join(path, sizeof path, dir, "a/b//c/");
    assert_int_equal(sdnn_mkdirs(path), SDNN_OK);
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sdnn_mkdirs(path), SDNN_OK); /* exists: fine */
    assert_int_equal(sdnn_mkdirs(dir), SDNN_OK);

    join(file, sizeof file, dir, "plain");
    write_file(file, "x", 1);
    expect_io_naming(sdnn_mkdirs(file), file);
    snprintf(below, sizeof below, "%s/x/y", file);
    expect_io_naming(sdnn_mkdirs(below), below);
    assert_int_equal(sdnn_mkdirs(""), SDNN_ERR_IO);
}

/* ---- crash during save ---------------------------------------------------------- */

/* Two 2048 x 2048 connected layers: 8 Mi weights, a 32 MiB file. */
static const char g_big_cfg[] =
    "[net]\nbatch=1\nheight=1\nwidth=1\nchannels=2048\n\n"
    "[connected]\noutput=2048\nactivation=linear\n\n"
    "[connected]\noutput=2048\nactivation=linear\n";

enum { V_MISSING = -3, V_SIZE = -2, V_NOMATCH = -1 };

/* Index of the version the file at path holds, or V_*. */
static int identify(const char *path, network *vnet, version *scratch,
                    const version *vers, int nvers, off_t want)
{
    off_t size = file_size(path);
    if (size < 0) return V_MISSING;
    if (size != want) return V_SIZE; /* load_weights would leave params unset */
    poison(vnet);
    load_into(vnet, path);
    version_take(vnet, scratch);
    for (int v = 0; v < nvers; ++v)
        if (scratch->seen == vers[v].seen &&
            memcmp(scratch->data, vers[v].data, vers[v].n * sizeof(float)) == 0)
            return v;
    return V_NOMATCH;
}

/* The child: save B, C, B, C, ... over path, one byte to `report` after each. */
static void saver_child(network *net, const version *b, const version *c,
                        const char *path, int report)
{
    alarm(60); /* never outlive a broken parent */
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2); /* Darknet prints each save */
    for (unsigned i = 0;; ++i) {
        version_apply(net, (i & 1) ? c : b);
        if (sdnn_save_weights_atomic(net, path) != SDNN_OK) _exit(3);
        char x = 1;
        if (write(report, &x, 1) != 1) _exit(4);
    }
}

static void copy_file(const char *from, const char *to)
{
    size_t len;
    char *data = slurp_file(from, &len);
    write_file(to, data, len);
    free(data);
}

static void test_crash_during_save(void **state)
{
    const char *dir = *state;
    char path[512], tmp[600], copy[512];
    join(path, sizeof path, dir, "crash.weights");
    double t_start = now_ms();

    network *net = parse_cfg_text(dir, g_big_cfg);
    network *vnet = parse_cfg_text(dir, g_big_cfg);
    param ps[MAX_PARAMS];
    int np = net_params(net, ps);
    size_t n = total_floats(ps, np);
    assert_true(n >= 8u * 1024 * 1024);
    off_t want = expected_size(net);

    version vers[3], scratch;
    for (int v = 0; v < 3; ++v) version_random(&vers[v], n, 1000u * (unsigned)(v + 1), ps, np);
    scratch.data = malloc(n * sizeof(float));
    assert_non_null(scratch.data);
    scratch.n = n;

    /* version A, timed */
    version_apply(net, &vers[0]);
    double best = 1e9, worst = 0;
    for (int i = 0; i < 3; ++i) {
        double t0 = now_ms();
        assert_int_equal(sdnn_save_weights_atomic(net, path), SDNN_OK);
        double dt = now_ms() - t0;
        best = dt < best ? dt : best;
        worst = dt > worst ? dt : worst;
    }
    print_message("crash test: one save of %lld bytes takes %.1f ms (best of 3; worst %.1f)\n",
                  (long long)want, best, worst);
    assert_int_equal(identify(path, vnet, &scratch, vers, 3, want), 0);

    /* Rounds: kill after `wait_saves` reported saves plus `delay` ms. */
    static const struct { int wait_saves; double delay_ms; } rounds[] = {
        {0, 1}, {0, 9}, {0, 23}, {0, 37}, {0, 52}, {0, 80},
        {1, 3}, {1, 17}, {2, 29}, {1, 61}, {2, 11}, {3, 41},
    };
    const char *names = "ABC";
    int current = 0, mid_save = 0, seen_v[3] = {1, 0, 0};
    char log[256] = "";
    for (size_t r = 0; r < sizeof rounds / sizeof rounds[0]; ++r) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            saver_child(net, &vers[1], &vers[2], path, fds[1]);
        }
        close(fds[1]);
        int reported = 0;
        while (reported < rounds[r].wait_saves) {
            struct pollfd pfd = {fds[0], POLLIN, 0};
            assert_int_equal(poll(&pfd, 1, 10000), 1);
            char x;
            assert_int_equal(read(fds[0], &x, 1), 1);
            ++reported;
        }
        sleep_ms(rounds[r].delay_ms);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        if (!(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL))
            print_error("round %zu: the saver ended by itself (status 0x%x)\n", r, ws);
        assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
        char buf[64];
        ssize_t got;
        while ((got = read(fds[0], buf, sizeof buf)) > 0) reported += (int)got;
        close(fds[0]);

        /* a SIGKILL mid-save leaves the child's temporary file: allowed */
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
        if (file_size(tmp) >= 0) {
            ++mid_save;
            assert_int_equal(unlink(tmp), 0);
        }
        assert_int_equal(count_tmp_files(dir), 0);

        /* The file is one whole version: after k reported saves, the k-th
         * save's version or the next one's (renamed but not yet reported). */
        int found = identify(path, vnet, &scratch, vers, 3, want);
        int v_k = reported == 0 ? current : (reported % 2 == 1 ? 1 : 2);
        int v_k1 = reported % 2 == 0 ? 1 : 2;
        if (found != v_k && found != v_k1)
            print_error("round %zu (delay %.0f ms, %d saves reported): file holds %d, "
                        "expected version %c or %c\n", r, rounds[r].delay_ms, reported,
                        found, names[v_k], names[v_k1]);
        assert_true(found == v_k || found == v_k1);
        current = found;
        seen_v[found] = 1;
        size_t used = strlen(log);
        snprintf(log + used, sizeof log - used, " %.0fms/%d:%c", rounds[r].delay_ms,
                 reported, names[found]);
    }
    print_message("crash test: rounds (delay/saves reported:file holds)%s; %d kills "
                  "left a temporary file behind\n", log, mid_save);
    assert_true(seen_v[1] || seen_v[2]); /* the child's saves did land */

    /* The checks are real: a truncated copy fails the size check, a copy with
     * one flipped bit fails the comparison, an exact copy passes. */
    join(copy, sizeof copy, dir, "copy.weights");
    copy_file(path, copy);
    assert_int_equal(identify(copy, vnet, &scratch, vers, 3, want), current);
    assert_int_equal(truncate(copy, want / 2), 0);
    assert_int_equal(identify(copy, vnet, &scratch, vers, 3, want), V_SIZE);
    copy_file(path, copy);
    {
        int fd = open(copy, O_RDWR);
        assert_true(fd >= 0);
        unsigned char byte;
        off_t at = want / 2 + 1;
        assert_int_equal(pread(fd, &byte, 1, at), 1);
        byte ^= 0x10;
        assert_int_equal(pwrite(fd, &byte, 1, at), 1);
        close(fd);
    }
    assert_int_equal(identify(copy, vnet, &scratch, vers, 3, want), V_NOMATCH);
    unlink(copy);

    for (int v = 0; v < 3; ++v) free(vers[v].data);
    free(scratch.data);
    sdnn_network_free(net);
    sdnn_network_free(vnet);
    print_message("crash test: %.1f s in all\n", (now_ms() - t_start) / 1e3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_bit_exact, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stale_tmp_replaced, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_other_layer_types, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_save_errors, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_save_disk_full, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_check_readable, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_mkdirs, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_crash_during_save, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
