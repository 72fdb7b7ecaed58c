/*
 * saveio: crash-safe weights files on top of Darknet's save_weights.
 *
 * save_weights(net, name) fopen()s `name`, writes the header and every
 * layer's parameters with fwrite, ignores write errors, and ends the process
 * when fopen fails.  So:
 *   1. we create the temporary file ourselves (O_CREAT|O_EXCL) to prove the
 *      directory is writable before Darknet gets a chance to exit;
 *   2. save_weights writes it (it reopens and truncates the same inode);
 *   3. through our own descriptor we check that the file has exactly the size
 *      the network's parameters take (a full disk or a file-size limit shows up
 *      as a short file, since Darknet does not report failed writes) and fsync;
 *   4. rename() replaces the target in one step, and the directory is fsynced
 *      so that the rename itself survives a power loss.
 * Until step 4 the target is untouched; after it the target is the complete
 * new file.  Every error path before the rename removes the temporary file.
 */
#include "saveio.h"

#include <stdint.h>

#include <signal.h>

#include <dirent.h>

#include <sys/file.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* One save at a time per process (the signal handler knows one temporary
 * file). */
static pthread_mutex_t g_save_lock = PTHREAD_MUTEX_INITIALIZER;

/* The temporary file of the save in progress, for sdnn_save_interrupted. */
static sdnn_temp_guard g_save_tmp;

int sdnn_save_interrupted(int sig)
{
    if (sdnn_temp_guard_forward(&g_save_tmp, sig)) return 1;
    const char *t = sdnn_temp_guard_owned(&g_save_tmp);
    if (t) unlink(t);
    return 0;
}

/* ---- size of a Darknet weights file ---------------------------------------
 * The header is three ints (major 0, minor 2, revision 0) and `seen` as a
 * size_t.  Per layer, in this Darknet, as float32:
 *   conv / deconv:  biases[n], (scales, rolling_mean, rolling_variance)[n]
 *                   if batch_normalize, weights[nweights]
 *   connected:      biases[outputs], weights[outputs*inputs], the three
 *                   batch-norm arrays [outputs] if batch_normalize
 *   batchnorm:      scales, rolling_mean, rolling_variance [c]
 *   local:          biases[outputs], weights[size*size*c*n*out_w*out_h]
 *   rnn, gru, lstm: their inner connected layers; crnn: its inner convs.
 * Layers marked dontsave and all other types write nothing. */

static long long conv_floats(const layer *l)
{
    long long n = (long long)l->n + l->nweights;
    if (l->batch_normalize) n += 3LL * l->n;
    return n;
}

static long long connected_floats(const layer *l)
{
    long long n = (long long)l->outputs + (long long)l->outputs * l->inputs;
    if (l->batch_normalize) n += 3LL * l->outputs;
    return n;
}

/* Sum of connected_floats over `count` inner layers; -1 if one is missing. */
static long long inner_connected(layer *const *inner, int count)
{
    long long n = 0;
    for (int i = 0; i < count; ++i) {
        if (!inner[i]) return -1;
        n += connected_floats(inner[i]);
    }
    return n;
}

/* Floats save_weights writes for one layer; -1 when a recurrent layer lacks
 * an inner layer. */
static long long layer_file_floats(const layer *l)
{
    if (l->dontsave) return 0;
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL:
        return conv_floats(l);
    case CONNECTED:
        return connected_floats(l);
    case BATCHNORM:
        return 3LL * l->c;
    case LOCAL:
        return (long long)l->outputs +
               (long long)l->size * l->size * l->c * l->n * l->out_w * l->out_h;
    case RNN: {
        layer *const inner[] = {l->input_layer, l->self_layer, l->output_layer};
        return inner_connected(inner, 3);
    }
    case GRU: {
        layer *const inner[] = {l->wz, l->wr, l->wh, l->uz, l->ur, l->uh};
        return inner_connected(inner, 6);
    }
    case LSTM: {
        layer *const inner[] = {l->wi, l->wf, l->wo, l->wg, l->ui, l->uf, l->uo, l->ug};
        return inner_connected(inner, 8);
    }
    case CRNN:
        if (!l->input_layer || !l->self_layer || !l->output_layer) return -1;
        return conv_floats(l->input_layer) + conv_floats(l->self_layer) +
               conv_floats(l->output_layer);
    default:
        return 0;
    }
}

/* Bytes save_weights writes for net, or -1 when a recurrent layer lacks an
 * inner layer (then only a non-empty file is required). */
static long long weights_file_bytes(const network *net)
{
    long long floats = 0;
    for (int i = 0; i < net->n; ++i) {
        long long n = layer_file_floats(&net->layers[i]);
        if (n < 0) return -1;
        floats += n;
    }
    return 3LL * (long long)sizeof(int) + (long long)sizeof(size_t) +
           floats * (long long)sizeof(float);
}

sdnn_status sdnn_check_weights_file(const network *net, const char *path, int require_full,
                                    int *layers_out)
{
    if (layers_out) *layers_out = 0;
    SDNN_CHECK(sdnn_check_readable(path));
    FILE *f = fopen(path, "rb");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    int hdr[3] = {0, 0, 0};
    size_t got = fread(hdr, sizeof(int), 3, f);
    long long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    fclose(f);
    if (got != 3 || size < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "weights file '%s' is too short for a Darknet header",
                          path);
    /* Darknet writes `seen` as a size_t from format 0.2 on, as an int before. */
    int major = hdr[0], minor = hdr[1];
    long long header = 3LL * (long long)sizeof(int) +
                       ((major * 10 + minor >= 2 && major < 1000 && minor < 1000)
                            ? (long long)sizeof(size_t)
                            : (long long)sizeof(int));
    long long body = size - header, cum = 0, full = weights_file_bytes(net);
    if (full < 0) return SDNN_OK;   /* recurrent layer without inner layers: cannot tell */
    full = full - 3LL * (long long)sizeof(int) - (long long)sizeof(size_t) + header;
    int layers = 0, matched = body == 0 ? 0 : -1;
    for (int i = 0; i < net->n && cum < body; ++i) {
        cum += layer_file_floats(&net->layers[i]) * (long long)sizeof(float);
        layers = i + 1;
        if (cum == body) matched = layers;
    }
    if (matched <= 0 || (require_full && size != full))
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "weights file '%s' has %lld bytes, which does not fit this cfg: the "
                          "whole network is %lld bytes%s (truncated file, or weights of another "
                          "network?)",
                          path, size, full,
                          require_full ? "" : " and a partial file must end at a layer boundary");
    if (layers_out) *layers_out = matched;
    return SDNN_OK;
}

/* ---- helpers ---------------------------------------------------------------- */

/* The directory part of path ("." or "/" when there is none); NULL on ENOMEM. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    size_t len = (size_t)(slash - path);
    char *dir = malloc(len + 1);
    if (!dir) return NULL;
    memcpy(dir, path, len);
    dir[len] = '\0';
    return dir;
}

/* sdnn_temp_create's work: 0, or the errno of the last try (ENAMETOOLONG
 * when the name does not fit out). */
static int temp_create(const char *dest, char *out, size_t len, int *fd_out)
{
    *fd_out = -1;
    static _Atomic unsigned long counter;
    int e = EEXIST;
    /* DEST.tmp.PID first (what a reader of an interrupted save looks for),
     * then DEST.tmp.PID.HEX with a counter and the clock mixed in. */
    for (int attempt = 0; attempt < 64 && e == EEXIST; ++attempt) {
        int n;
        if (attempt == 0) {
            n = snprintf(out, len, "%s.tmp.%ld", dest, (long)getpid());
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t x = (uint64_t)++counter * 0x9E3779B97F4A7C15ull ^
                         (uint64_t)ts.tv_nsec * 0xBF58476D1CE4E5B9ull ^ (uint64_t)ts.tv_sec;
            x ^= x >> 31;
            n = snprintf(out, len, "%s.tmp.%ld.%016llx", dest, (long)getpid(),
                         (unsigned long long)x);
        }
        if (n < 0 || (size_t)n >= len) return ENAMETOOLONG;
        int fd = open(out, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
        if (fd >= 0) {
            *fd_out = fd;
            return 0;
        }
        e = errno;
    }
    return e;
}

static sdnn_status temp_status(int e, const char *dest, const char *out)
{
    if (e == ENAMETOOLONG)
        return SDNN_ERROR(SDNN_ERR_INVALID, "cannot create a temporary file for '%s': name too "
                          "long", dest);
    if (e)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot create a temporary file '%s' beside it: %s", out,
                          strerror(e));
    return SDNN_OK;
}

sdnn_status sdnn_temp_create(const char *dest, char *out, size_t len, int *fd_out)
{
    return temp_status(temp_create(dest, out, len, fd_out), dest, out);
}

/* A handler that runs while the file is being made is in another thread
 * (the maker blocks the two signals), so the maker goes on and the wait
 * ends within one open(). */
static int guarded_create(sdnn_temp_guard *g, const char *dest, char *out, size_t len, int *fd)
{
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    atomic_store(&g->state, 2);
    int e = temp_create(dest, g->path, sizeof g->path, fd);
    if (!e && strlen(g->path) >= len) {
        close(*fd);
        unlink(g->path);
        *fd = -1;
        e = ENAMETOOLONG;
    }
    if (!e) memcpy(out, g->path, strlen(g->path) + 1);
    else snprintf(out, len, "%s", g->path);
    atomic_store(&g->state, e ? 0 : 1);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return e;
}

sdnn_status sdnn_temp_create_guarded(sdnn_temp_guard *g, const char *dest, char *out, size_t len,
                                     int *fd)
{
    return temp_status(guarded_create(g, dest, out, len, fd), dest, out);
}

void sdnn_temp_guard_by_name(sdnn_temp_guard *g, int on)
{
    atomic_store(&g->opener, (long)syscall(SYS_gettid));
    atomic_store(&g->state, on ? 3 : 1);
}

int sdnn_temp_guard_forward(sdnn_temp_guard *g, int sig)
{
    long me = (long)syscall(SYS_gettid);
    long opener = atomic_load(&g->opener);
    if (atomic_load(&g->state) != 3 || opener == me) return 0;
    /* The opener's handler runs once the signal reaches it: inside the
     * open it runs after the open returns, so the file it removes is not
     * made again. */
    return syscall(SYS_tgkill, (long)getpid(), opener, sig) == 0;
}

void sdnn_temp_guard_release(sdnn_temp_guard *g)
{
    atomic_store(&g->state, 0);
}

const char *sdnn_temp_guard_owned(sdnn_temp_guard *g)
{
    int s;
    while ((s = atomic_load(&g->state)) == 2) {
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
    }
    return s == 1 || s == 3 ? g->path : NULL;
}

sdnn_status sdnn_check_output_file(const char *path)
{
    struct stat sb;
    if (path && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return SDNN_ERROR(SDNN_ERR_IO, "%s is %s, and a regular file (or a new name) is needed",
                          path, sdnn_file_kind((unsigned)sb.st_mode));
    return sdnn_check_dir_writable(path);
}

sdnn_status sdnn_check_dir_writable(const char *path)
{
    char *dir = dir_of(path ? path : "");
    if (!dir) return SDNN_ERROR(SDNN_ERR_NOMEM, "out of memory");
    struct stat sb;
    int rc = stat(dir, &sb);
    if (rc != 0 || !S_ISDIR(sb.st_mode)) {
        sdnn_status st = SDNN_ERROR(SDNN_ERR_IO, "its folder %s: %s", dir,
                                    rc != 0 ? strerror(errno) : "not a folder");
        free(dir);
        return st;
    }
    /* access(W_OK) says yes to root on a read-only folder; a file made and
     * removed says what a save will meet. */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.scalednn-probe", dir);
    char tmp[4300];
    int fd = -1;
    sdnn_status st = SDNN_OK;
    int e = temp_create(probe, tmp, sizeof tmp, &fd);
    if (e) {
        st = SDNN_ERROR(SDNN_ERR_IO, "its folder %s does not take a new file: %s", dir,
                        strerror(e));
    } else {
        close(fd);
        unlink(tmp);
    }
    free(dir);
    return st;
}

/* Make the directory entry of a completed rename durable.  Filesystems that
 * cannot sync directories answer EINVAL; the rename stands there anyway. */
static sdnn_status sync_dir(const char *dir, const char *path)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return SDNN_ERROR(SDNN_ERR_IO,
                          "saved weights to '%s' but cannot open its directory '%s' "
                          "to sync it: %s", path, dir, strerror(errno));
    if (fsync(dfd) != 0 && errno != EINVAL) {
        int e = errno;
        close(dfd);
        return SDNN_ERROR(SDNN_ERR_IO,
                          "saved weights to '%s' but cannot sync its directory '%s': %s",
                          path, dir, strerror(e));
    }
    close(dfd);
    return SDNN_OK;
}

/* ---- API ---------------------------------------------------------------------- */

/* One atomic replacement of `path`: a temporary file next to it, filled by
 * fill(), checked to hold `want` bytes (when want >= 0), synced, renamed
 * over `path`, and the directory synced.  `what` names the content in
 * messages ("weights", ...). */
typedef sdnn_status (*fill_fn)(int fd, const char *tmp, void *ctx);

static sdnn_status replace_atomic(const char *path, const char *what, long long want,
                                  fill_fn fill, void *ctx)
{
    if (!path || !*path)
        return SDNN_ERROR(SDNN_ERR_INVALID, "cannot save %s: empty file name", what);
    size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': it names a directory", what,
                          path);

    sdnn_status st = SDNN_OK;
    size_t tlen = plen + 48;
    char *tmp = malloc(tlen);
    char *dir = dir_of(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "cannot save %s to '%s': out of memory", what, path);
    }

    pthread_mutex_lock(&g_save_lock);
    int created = 0;
    /* A file already under the name is never opened, replaced or removed
     * (it may be a user's): another name is taken. */
    int fd = -1;
    int e = guarded_create(&g_save_tmp, path, tmp, tlen, &fd);
    if (e) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': cannot create '%s': %s", what,
                        path, tmp, strerror(e));
        goto out;
    }
    created = 1;

    sdnn_temp_guard_by_name(&g_save_tmp, 1);
    st = fill(fd, tmp, ctx);
    sdnn_temp_guard_by_name(&g_save_tmp, 0);
    if (st != SDNN_OK) goto out;

    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': cannot stat '%s': %s", what,
                        path, tmp, strerror(errno));
        goto out;
    }
    if ((want >= 0 && (long long)sb.st_size != want) || sb.st_size <= 0) {
        st = SDNN_ERROR(SDNN_ERR_IO,
                        "cannot save %s to '%s': wrote %lld of %lld bytes to '%s' "
                        "(disk full or file size limit?)",
                        what, path, (long long)sb.st_size, want, tmp);
        goto out;
    }
    if (fsync(fd) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': fsync of '%s': %s", what, path,
                        tmp, strerror(errno));
        goto out;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': close of '%s': %s", what, path,
                        tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save %s to '%s': rename from '%s': %s", what,
                        path, tmp, strerror(errno));
        goto out;
    }
    created = 0;
    sdnn_temp_guard_release(&g_save_tmp);
    st = sync_dir(dir, path);

out:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    sdnn_temp_guard_release(&g_save_tmp);
    pthread_mutex_unlock(&g_save_lock);
    free(tmp);
    free(dir);
    return st;
}

/* Darknet's save_weights opens the temporary file by name itself. */
static sdnn_status fill_weights(int fd, const char *tmp, void *ctx)
{
    (void)fd;
    save_weights((network *)ctx, (char *)tmp);
    return SDNN_OK;
}

sdnn_status sdnn_save_weights_atomic(network *net, const char *path)
{
    if (!net || !net->seen || (net->n > 0 && !net->layers))
        return SDNN_ERROR(SDNN_ERR_INVALID, "cannot save weights: no network");
    return replace_atomic(path, "weights", weights_file_bytes(net), fill_weights, net);
}

typedef struct bytes_ctx {
    const unsigned char *buf;
    size_t len;
} bytes_ctx;

static sdnn_status fill_bytes(int fd, const char *tmp, void *ctx)
{
    const bytes_ctx *b = ctx;
    size_t done = 0;
    while (done < b->len) {
        ssize_t n = write(fd, b->buf + done, b->len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return SDNN_ERROR(SDNN_ERR_IO, "writing '%s': %s", tmp,
                              n < 0 ? strerror(errno) : "wrote nothing");
        done += (size_t)n;
    }
    return SDNN_OK;
}

sdnn_status sdnn_write_file_atomic(const char *path, const void *buf, size_t len)
{
    bytes_ctx b = {buf, len};
    return replace_atomic(path, "state", (long long)len, fill_bytes, &b);
}

const char *sdnn_file_kind(unsigned mode)
{
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

static sdnn_status not_regular(const char *path, unsigned mode)
{
    return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': it is %s, and a regular file is needed",
                      path, sdnn_file_kind(mode));
}

/* stat() first, so that a FIFO, a device or a socket is refused before any
 * open() (opening a FIFO blocks until a writer comes; a device streams
 * forever).  The open that follows proves the file readable; O_NONBLOCK
 * keeps it from blocking should the path be swapped for a FIFO in between,
 * and fstat on the descriptor checks what was actually opened. */
sdnn_status sdnn_check_readable(const char *path)
{
    if (!path || !*path)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read a file: empty file name");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return not_regular(path, (unsigned)sb.st_mode);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    int rc = fstat(fd, &sb);
    int e = errno;
    close(fd);
    if (rc != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    if (!S_ISREG(sb.st_mode)) return not_regular(path, (unsigned)sb.st_mode);
    return SDNN_OK;
}

sdnn_status sdnn_mkdirs(const char *dir)
{
    if (!dir || !*dir)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot create directory: empty name");
    char *buf = strdup(dir);
    if (!buf)
        return SDNN_ERROR(SDNN_ERR_NOMEM, "cannot create directory '%s': out of memory",
                          dir);
    sdnn_status st = SDNN_OK;
    /* Create each prefix that ends at a '/' (skipping a leading one), then the
     * whole path. */
    for (char *p = buf + 1;; ++p) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            st = SDNN_ERROR(SDNN_ERR_IO, "cannot create directory '%s' (for '%s'): %s",
                            buf, dir, strerror(errno));
            break;
        }
        *p = saved;
        if (saved == '\0') break;
    }
    if (st == SDNN_OK) {
        struct stat sb;
        if (stat(dir, &sb) != 0)
            st = SDNN_ERROR(SDNN_ERR_IO, "cannot create directory '%s': %s", dir,
                            strerror(errno));
        else if (!S_ISDIR(sb.st_mode))
            st = SDNN_ERROR(SDNN_ERR_IO, "cannot create directory '%s': %s", dir,
                            strerror(ENOTDIR));
    }
    free(buf);
    return st;
}

sdnn_status sdnn_check_overwrite(const char *path, const char *what, const char *const *ours)
{
    struct stat sb;
    if (!path || !*path) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: empty file name", what);
    if (stat(path, &sb) != 0) return SDNN_OK; /* a new file (or unwritable: open says) */
    if (S_ISDIR(sb.st_mode))
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s %s: is a directory, not a file", what, path);
    if (!S_ISREG(sb.st_mode) || sb.st_size == 0) return SDNN_OK; /* /dev/null, empty */
    unsigned char head[64] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_IO, "%s %s: exists and cannot be read (%s); refusing to "
                          "overwrite it", what, path, strerror(errno));
    ssize_t n = read(fd, head, sizeof head - 1);
    close(fd);
    if (n < 0) n = 0;
    for (; ours && *ours; ++ours)
        if ((size_t)n >= strlen(*ours) && memcmp(head, *ours, strlen(*ours)) == 0) return SDNN_OK;
    /* Darknet weights: int32 major, minor, revision (0.1.x / 0.2.x), then seen. */
    int32_t v[3];
    memcpy(v, head, sizeof v);
    if (n >= 12 && v[0] == 0 && (v[1] == 1 || v[1] == 2) && v[2] >= 0 && v[2] < 100)
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s %s: refusing to overwrite a Darknet weights file "
                          "(%lld bytes); name another file", what, path, (long long)sb.st_size);
    char shown[40];
    int k = 0;
    for (ssize_t i = 0; i < n && k < 24; ++i)
        shown[k++] = head[i] >= 0x20 && head[i] < 0x7f ? (char)head[i] : '.';
    shown[k] = '\0';
    return SDNN_ERROR(SDNN_ERR_INVALID, "%s %s: refusing to overwrite a file that is not one of "
                      "ours (%lld bytes, it starts with \"%s\"); name another file or remove it",
                      what, path, (long long)sb.st_size, shown);
}

/* The command line of this process, arguments joined by spaces. */
static void own_cmdline(char *out, size_t len)
{
    out[0] = '\0';
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    for (ssize_t i = 0; i < n; ++i)
        if (out[i] == '\0') out[i] = ' ';
    while (n > 0 && out[n - 1] == ' ') --n;
    out[n] = '\0';
}

sdnn_status sdnn_lock_dir(const char *dir, int *fd_out)
{
    *fd_out = -1;
    char path[4200];
    if (snprintf(path, sizeof path, "%s/%s", dir, SDNN_LOCK_NAME) >= (int)sizeof path)
        return SDNN_ERROR(SDNN_ERR_INVALID, "backup folder %s: name too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_IO, "backup folder %s: cannot create the lock file %s: %s", dir,
                          path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[600] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        close(fd);
        if (n > 0) who[n] = '\0';
        for (char *p = who; *p; ++p)
            if (*p == '\n') *p = *(p + 1) ? ' ' : '\0';
        if (e != EWOULDBLOCK)
            return SDNN_ERROR(SDNN_ERR_IO, "backup folder %s: cannot lock %s: %s", dir, path,
                              strerror(e));
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "backup folder %s is in use by another run (%s): one run per backup "
                          "folder; wait for it to end, or give this run another backup= in its "
                          ".data file",
                          dir, who[0] ? who : "a process that did not say who it is");
    }
    char cmd[512], text[600];
    own_cmdline(cmd, sizeof cmd);
    int len = snprintf(text, sizeof text, "pid %ld, command: %s\n", (long)getpid(), cmd);
    if (len > (int)sizeof text - 1) len = (int)sizeof text - 1;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return SDNN_ERROR(SDNN_ERR_IO, "backup folder %s: cannot write the lock file %s: %s", dir,
                          path, strerror(e));
    }
    *fd_out = fd;
    return SDNN_OK;
}

/* NAME.tmp.PID or NAME.tmp.PID.HEX (sdnn_temp_create): the pid, or -1
 * when the name has no such tail; *stem_len gets the length of NAME. */
static long temp_pid(const char *name, size_t *stem_len)
{
    const char *t = strstr(name, ".tmp.");
    if (!t) return -1;
    const char *last;
    while ((last = strstr(t + 1, ".tmp.")) != NULL) t = last;
    char *end;
    errno = 0;
    long pid = strtol(t + 5, &end, 10);
    if (*end == '.' && strlen(end + 1) == 16 && strspn(end + 1, "0123456789abcdef") == 16)
        end += 17;
    if (end == t + 5 || *end != '\0' || errno || pid <= 0 || t[5] < '0' || t[5] > '9') return -1;
    *stem_len = (size_t)(t - name);
    return pid;
}

/* NAME (stem_len bytes) is an output of a run of the cfg BASE in its backup
 * folder; *ef says whether it is the .ef beside the weights. */
static int our_output(const char *name, size_t stem_len, const char *base, int *ef)
{
    size_t bl = strlen(base);
    if (!bl || stem_len <= bl || strncmp(name, base, bl) != 0) return 0;
    char rest[256];
    size_t rl = stem_len - bl;
    if (rl >= sizeof rest) return 0;
    memcpy(rest, name + bl, rl);
    rest[rl] = '\0';
    *ef = rl > 3 && strcmp(rest + rl - 3, ".ef") == 0;
    if (*ef) rest[rl - 3] = '\0';
    if (!strcmp(rest, ".backup") || !strcmp(rest, "_final.weights") ||
        !strcmp(rest, "_last.weights") || !strcmp(rest, "_best.weights"))
        return 1;
    /* _N.weights, the periodic saves */
    const char *p = rest;
    if (*p++ != '_' || *p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') ++p;
    return strcmp(p, ".weights") == 0;
}

/* The file's first bytes are what a save writes first: nothing, or the
 * beginning of Darknet's weights header (major 0, minor 2, revision 0) or
 * of the .ef magic. */
static int starts_like_ours(const char *path, int ef)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    struct stat sb;
    unsigned char head[12];
    ssize_t n = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? read(fd, head, sizeof head) : -1;
    close(fd);
    if (n < 0) return 0;
    unsigned char want[12];
    if (ef) {
        memcpy(want, "SDNNEF01", 8);
        if (n > 8) n = 8;
    } else {
        const int32_t v[3] = {0, 2, 0};
        memcpy(want, v, sizeof v);
    }
    return memcmp(head, want, (size_t)n) == 0;
}

sdnn_status sdnn_prepare_dir(const char *dir)
{
    char stem[4200], path[4300];
    snprintf(stem, sizeof stem, "%s/.scalednn-write-test", dir);
    int fd = -1;
    if (sdnn_temp_create(stem, path, sizeof path, &fd) != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_IO, "backup folder %s is not writable: %s (checked at start, "
                          "before training)", dir, sdnn_last_error());
    static const char probe[4096];
    ssize_t n = write(fd, probe, sizeof probe);
    int e = n < 0 ? errno : ENOSPC;
    int synced = n == (ssize_t)sizeof probe && fsync(fd) == 0;
    if (!synced && n == (ssize_t)sizeof probe) e = errno;
    close(fd);
    unlink(path);
    if (!synced)
        return SDNN_ERROR(SDNN_ERR_IO, "backup folder %s: a 4 KiB test write failed: %s (checked "
                          "at start, before training)", dir, strerror(e));
    return SDNN_OK;
}

sdnn_status sdnn_clean_temps(const char *dir, const char *base, int *cleaned)
{
    if (cleaned) *cleaned = 0;
    if (!dir || !base) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_clean_temps: no folder or cfg");
    DIR *d = opendir(dir);
    if (!d) return SDNN_OK;
    char path[4200];
    for (struct dirent *ent; (ent = readdir(d));) {
        size_t stem = 0;
        int ef = 0;
        long pid = temp_pid(ent->d_name, &stem);
        if (pid < 0 || pid == (long)getpid() || !our_output(ent->d_name, stem, base, &ef)) continue;
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM) continue; /* its owner lives */
        if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= (int)sizeof path) continue;
        if (!starts_like_ours(path, ef)) continue;
        if (unlink(path) == 0 && cleaned) ++*cleaned;
    }
    closedir(d);
    return SDNN_OK;
}
