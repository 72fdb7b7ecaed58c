/*
 * saveio: crash-safe weights files on top of Darknet's save_weights.
 *
 * save_weights(net, name) fopen()s `name`, writes the header and every
 * layer's parameters with fwrite, ignores write errors, and exit()s when
 * fopen fails.  So:
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

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* One save at a time per process: the temporary name carries only the pid. */
static pthread_mutex_t g_save_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* Bytes save_weights writes for net, or -1 when a recurrent layer lacks an
 * inner layer (then only a non-empty file is required). */
static long long weights_file_bytes(const network *net)
{
    long long floats = 0;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        long long n = 0;
        if (l->dontsave) continue;
        switch (l->type) {
        case CONVOLUTIONAL:
        case DECONVOLUTIONAL:
            n = conv_floats(l);
            break;
        case CONNECTED:
            n = connected_floats(l);
            break;
        case BATCHNORM:
            n = 3LL * l->c;
            break;
        case LOCAL:
            n = (long long)l->outputs +
                (long long)l->size * l->size * l->c * l->n * l->out_w * l->out_h;
            break;
        case RNN: {
            layer *const inner[] = {l->input_layer, l->self_layer, l->output_layer};
            n = inner_connected(inner, 3);
            break;
        }
        case GRU: {
            layer *const inner[] = {l->wz, l->wr, l->wh, l->uz, l->ur, l->uh};
            n = inner_connected(inner, 6);
            break;
        }
        case LSTM: {
            layer *const inner[] = {l->wi, l->wf, l->wo, l->wg,
                                    l->ui, l->uf, l->uo, l->ug};
            n = inner_connected(inner, 8);
            break;
        }
        case CRNN:
            if (!l->input_layer || !l->self_layer || !l->output_layer) return -1;
            n = conv_floats(l->input_layer) + conv_floats(l->self_layer) +
                conv_floats(l->output_layer);
            break;
        default:
            break;
        }
        if (n < 0) return -1;
        floats += n;
    }
    return 3LL * (long long)sizeof(int) + (long long)sizeof(size_t) +
           floats * (long long)sizeof(float);
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

sdnn_status sdnn_save_weights_atomic(network *net, const char *path)
{
    if (!net || !net->seen || (net->n > 0 && !net->layers))
        return SDNN_ERROR(SDNN_ERR_INVALID, "cannot save weights: no network");
    if (!path || !*path)
        return SDNN_ERROR(SDNN_ERR_INVALID, "cannot save weights: empty file name");
    size_t plen = strlen(path);
    if (path[plen - 1] == '/')
        return SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': it names a directory",
                          path);

    sdnn_status st = SDNN_OK;
    size_t tlen = plen + 32;
    char *tmp = malloc(tlen);
    char *dir = dir_of(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "cannot save weights to '%s': out of memory",
                          path);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    long long want = weights_file_bytes(net);

    pthread_mutex_lock(&g_save_lock);
    int created = 0;
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        /* Saves in this process are serialised, so a file with our pid is the
         * leftover of a crashed process that had the same pid. */
        if (unlink(tmp) == 0 || errno == ENOENT)
            fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': cannot create '%s': %s",
                        path, tmp, strerror(errno));
        goto out;
    }
    created = 1;

    save_weights(net, tmp);

    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': cannot stat '%s': %s",
                        path, tmp, strerror(errno));
        goto out;
    }
    if ((want >= 0 && (long long)sb.st_size != want) || sb.st_size <= 0) {
        st = SDNN_ERROR(SDNN_ERR_IO,
                        "cannot save weights to '%s': wrote %lld of %lld bytes to '%s' "
                        "(disk full or file size limit?)",
                        path, (long long)sb.st_size, want, tmp);
        goto out;
    }
    if (fsync(fd) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': fsync of '%s': %s",
                        path, tmp, strerror(errno));
        goto out;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': close of '%s': %s",
                        path, tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        st = SDNN_ERROR(SDNN_ERR_IO, "cannot save weights to '%s': rename from '%s': %s",
                        path, tmp, strerror(errno));
        goto out;
    }
    created = 0;
    st = sync_dir(dir, path);

out:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    pthread_mutex_unlock(&g_save_lock);
    free(tmp);
    free(dir);
    return st;
}

sdnn_status sdnn_check_readable(const char *path)
{
    if (!path || !*path)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read weights: empty file name");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path,
                          strerror(errno));
    struct stat sb;
    int rc = fstat(fd, &sb);
    int e = errno;
    close(fd);
    if (rc != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path,
                          strerror(e));
    if (S_ISDIR(sb.st_mode))
        return SDNN_ERROR(SDNN_ERR_IO, "cannot read '%s': %s", path,
                          strerror(EISDIR));
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
