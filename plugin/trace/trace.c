/*
 * trace: see trace.h.  Rows are flushed as they are written so a run that is
 * stopped still leaves a readable CSV.
 */
#include "trace.h"
#include "saveio.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

const char *const sdnn_csv_prefixes[] = {"# label: ", SDNN_CSV_HEADER, NULL};

static sdnn_status csv_open(sdnn_csv *c, const char *path, const char *label, int append)
{
    c->f = NULL;
    snprintf(c->path, sizeof c->path, "%s", path);
    SDNN_CHECK(sdnn_check_overwrite(path, "csv", sdnn_csv_prefixes));
    struct stat sb;
    int keep = append && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
    c->f = fopen(path, keep ? "a" : "w");
    if (!c->f) return SDNN_ERROR(SDNN_ERR_IO, "cannot write csv %s: %s", path, strerror(errno));
    if (!keep && label && *label) fprintf(c->f, "# label: %s\n", label);
    if (!keep) fprintf(c->f, SDNN_CSV_HEADER "\n");
    if (fflush(c->f) != 0) {
        int e = errno;
        fclose(c->f);
        c->f = NULL;
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
    return SDNN_OK;
}

void sdnn_csv_close(sdnn_csv *c)
{
    if (c->f) fclose(c->f);
    c->f = NULL;
}
