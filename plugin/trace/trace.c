/*
 * trace: see trace.h.  Rows are flushed as they are written so a run that is
 * stopped still leaves a readable CSV; a new CSV takes its path only with
 * its first row.
 */
#include "trace.h"
#include "saveio.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const sdnn_csv_prefixes[] = {"# label: ", SDNN_CSV_HEADER, NULL};

/* The new CSV not yet renamed into place, for sdnn_csv_interrupted. */
static sdnn_temp_guard g_pending;

void sdnn_csv_interrupted(void)
{
    const char *t = sdnn_temp_guard_owned(&g_pending);
    if (t) unlink(t);
}

static sdnn_status csv_open(sdnn_csv *c, const char *path, const char *label, int append)
{
    c->f = NULL;
    c->tmp[0] = '\0';
    snprintf(c->path, sizeof c->path, "%s", path);
    SDNN_CHECK(sdnn_check_overwrite(path, "csv", sdnn_csv_prefixes));
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    int keep = append && exists && S_ISREG(sb.st_mode) && sb.st_size > 0;
    if (keep || (exists && !S_ISREG(sb.st_mode))) {
        /* Appended to, or a device or pipe (/dev/null): written in place,
         * never renamed over. */
        c->f = fopen(path, keep ? "a" : "w");
        if (!c->f)
            return SDNN_ERROR(SDNN_ERR_IO, "cannot write csv %s: %s", path, strerror(errno));
    } else {
        /* A new CSV is written beside and takes the path at its first row:
         * a run that stops before it leaves the previous run's file.  A
         * link is followed (the file it names is replaced, not the link). */
        char *real = NULL;
        if (exists && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) real = realpath(path, NULL);
        if (real && strlen(real) < sizeof c->path) snprintf(c->path, sizeof c->path, "%s", real);
        free(real);
        int fd = -1;
        if (sdnn_temp_create_guarded(&g_pending, c->path, c->tmp, sizeof c->tmp, &fd) != SDNN_OK)
            return SDNN_ERROR(SDNN_ERR_IO, "cannot write csv %s: %s", path, sdnn_last_error());
        c->f = fdopen(fd, "w");
        if (!c->f) {
            int e = errno;
            close(fd);
            unlink(c->tmp);
            sdnn_temp_guard_release(&g_pending);
            c->tmp[0] = '\0';
            return SDNN_ERROR(SDNN_ERR_IO, "cannot write csv %s: %s", path, strerror(e));
        }
    }
    if (!keep) {
        if (label && *label) fprintf(c->f, "# label: %s\n", label);
        fprintf(c->f, SDNN_CSV_HEADER "\n");
    }
    if (fflush(c->f) != 0) {
        int e = errno;
        sdnn_csv_close(c);
        return SDNN_ERROR(SDNN_ERR_IO, "cannot write csv %s: %s", path, strerror(e));
    }
    return SDNN_OK;
}

sdnn_status sdnn_csv_open(sdnn_csv *c, const char *path, const char *label)
{
    return csv_open(c, path, label, 0);
}

sdnn_status sdnn_csv_open_append(sdnn_csv *c, const char *path, const char *label)
{
    return csv_open(c, path, label, 1);
}

sdnn_status sdnn_csv_write(sdnn_csv *c, const sdnn_csv_row *w)
{
    if (!c->f) return SDNN_OK;
    char map[32] = "";
    if (w->map >= 0) snprintf(map, sizeof map, "%.6f", w->map);
    int n = fprintf(c->f,
                    "%zu,%zu,%.6f,%.6f,%.8g,%.6f,%.3f,%.3f,%zu,%.6f,%.6f,%.6f,%.6f,%s,%zu,%.6f\n",
                    w->iteration, w->images, w->loss, w->avg_loss, w->rate, w->seconds,
                    w->elapsed_s, w->images_per_s, w->bytes, w->exposed_s, w->comm_s,
                    w->data_wait_s, w->sync_wait_s, map, w->host_loss_bytes, w->host_loss_wait_s);
    if (n < 0 || fflush(c->f) != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "cannot write a row to csv %s: %s", c->path, strerror(errno));
    if (c->tmp[0]) {
        if (rename(c->tmp, c->path) != 0)
            return SDNN_ERROR(SDNN_ERR_IO, "cannot move csv %s into place from %s: %s", c->path,
                              c->tmp, strerror(errno));
        sdnn_temp_guard_release(&g_pending);
        c->tmp[0] = '\0';
    }
    return SDNN_OK;
}

void sdnn_csv_close(sdnn_csv *c)
{
    if (c->f) fclose(c->f);
    c->f = NULL;
    if (c->tmp[0]) {
        /* No row was written: the previous file stays. */
        unlink(c->tmp);
        sdnn_temp_guard_release(&g_pending);
        c->tmp[0] = '\0';
    }
}
