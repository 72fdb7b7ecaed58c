/*
 * outputs: see outputs.h.
 */
#include "outputs.h"
#include "readable.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "a/b" + "c" */
static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    size_t at = la;
    if (!la || a[la - 1] != '/') s[at++] = '/';
    memcpy(s + at, b, lb + 1);
    return s;
}

/* The absolute path with "", "." and ".." folded by its text alone. */
static char *lexical(const char *path)
{
    char cwd[PATH_MAX];
    char *abs = path[0] == '/' ? strdup(path) : getcwd(cwd, sizeof cwd) ? join(cwd, path) : NULL;
    if (!abs) return NULL;
    char *out = malloc(strlen(abs) + 2);
    if (!out) {
        free(abs);
        return NULL;
    }
    size_t n = 0;
    for (char *p = abs; *p;) {
        while (*p == '/') ++p;
        char *e = p;
        while (*e && *e != '/') ++e;
        size_t len = (size_t)(e - p);
        if (len == 0 || (len == 1 && p[0] == '.')) {
        } else if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n > 0 && out[n - 1] != '/') --n;
            if (n > 0) --n;
        } else {
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p = e;
    }
    if (n == 0) out[n++] = '/';
    out[n] = '\0';
    free(abs);
    return out;
}

/* The file's path with symbolic links resolved as far as things exist:
 * the file itself, else its folder and its name, else the text folded.  A
 * link to a file not made yet is followed to the name it gives (a write
 * through it lands there). */
static char *normalise_at(const char *path, int hops)
{
    char *r = realpath(path, NULL);
    if (r) return r;
    char link[PATH_MAX];
    ssize_t ln = hops < 16 ? readlink(path, link, sizeof link - 1) : -1;
    if (ln > 0) {
        link[ln] = '\0';
        char *target = NULL;
        const char *slash = strrchr(path, '/');
        if (link[0] == '/' || !slash) {
            target = strdup(link);
        } else {
            char *dir = strndup(path, (size_t)(slash - path));
            target = dir ? join(dir, link) : NULL;
            free(dir);
        }
        char *n = target ? normalise_at(target, hops + 1) : NULL;
        free(target);
        if (n) return n;
    }
    char *lx = lexical(path);
    if (!lx) return NULL;
    char *slash = strrchr(lx, '/');
    if (slash && slash[1]) {
        *slash = '\0';
        char *dir = realpath(lx[0] ? lx : "/", NULL);
        *slash = '/';
        if (dir) {
            char *s = join(dir, slash + 1);
            free(dir);
            if (s) {
                free(lx);
                return s;
            }
        }
    }
    return lx;
}

static char *normalise(const char *path)
{
    return normalise_at(path, 0);
}

int sdnn_outputs_init(sdnn_outputs *o, const char *backup, const char *base)
{
    memset(o, 0, sizeof *o);
    o->backup = normalise(backup);
    o->base = strdup(base);
    if (!o->backup || !o->base) {
        fprintf(stderr, "error: out of memory\n");
        return -1;
    }
    return 0;
}

int sdnn_outputs_add(sdnn_outputs *o, const char *what, const char *path, int weights)
{
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 16;
        sdnn_outfile *f = realloc(o->f, (size_t)cap * sizeof *f);
        if (!f) {
            fprintf(stderr, "error: out of memory\n");
            return -1;
        }
        o->f = f;
        o->cap = cap;
    }
    sdnn_outfile *f = &o->f[o->n];
    memset(f, 0, sizeof *f);
    f->what = strdup(what);
    f->path = strdup(path);
    f->norm = normalise(path);
    f->weights = weights;
    if (!f->what || !f->path || !f->norm) {
        free(f->what);
        free(f->path);
        free(f->norm);
        fprintf(stderr, "error: out of memory\n");
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0) {
        f->exists = 1;
        f->dev = sb.st_dev;
        f->ino = sb.st_ino;
        f->device = S_ISCHR(sb.st_mode);
        f->mode = (unsigned)sb.st_mode;
    }
    ++o->n;
    return 0;
}

/* NAME is BASE_N.weights or BASE_N.weights.ef. */
static int periodic_name(const char *base, const char *name)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || name[bl] != '_') return 0;
    const char *p = name + bl + 1;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') ++p;
    return strcmp(p, ".weights") == 0 || strcmp(p, ".weights.ef") == 0;
}

int sdnn_outputs_add_periodic(sdnn_outputs *o)
{
    DIR *d = opendir(o->backup);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!periodic_name(o->base, e->d_name)) continue;
        char *p = join(o->backup, e->d_name);
        rc = p ? sdnn_outputs_add(o, "a periodic save", p, 1) : -1;
        free(p);
    }
    closedir(d);
    return rc;
}

static int same(const sdnn_outfile *a, const sdnn_outfile *b)
{
    if (a->device && b->device) return 0;
    if (strcmp(a->norm, b->norm) == 0) return 1;
    return a->exists && b->exists && a->dev == b->dev && a->ino == b->ino;
}

/* The output's normalised path names a periodic save of the backup folder. */
static int is_periodic(const sdnn_outputs *o, const sdnn_outfile *f)
{
    const char *slash = strrchr(f->norm, '/');
    if (!slash) return 0;
    size_t dl = (size_t)(slash - f->norm);
    if (dl == 0) dl = 1;   /* "/" */
    return strlen(o->backup) == dl && strncmp(o->backup, f->norm, dl) == 0 &&
           periodic_name(o->base, slash + 1);
}

int sdnn_outputs_check(const sdnn_outputs *o)
{
    for (int i = 0; i < o->n; ++i) {
        const sdnn_outfile *a = &o->f[i];
        if (a->exists && !S_ISREG(a->mode) && (a->weights || !a->device)) {
            fprintf(stderr, "error: %s %s is %s: an output of a run is a regular file%s; remove "
                    "it or name another file\n", a->what, a->path, sdnn_file_kind(a->mode),
                    a->weights ? "" : " (or a character device such as /dev/null)");
            return -1;
        }
        if (!a->weights && is_periodic(o, a)) {
            fprintf(stderr, "error: %s %s is the name of the weights saved during training "
                    "(%s/%s_N.weights): no output of a run may be another; name another file\n",
                    a->what, a->path, o->backup, o->base);
            return -1;
        }
        for (int j = i + 1; j < o->n; ++j) {
            const sdnn_outfile *b = &o->f[j];
            if ((a->weights && b->weights) || !same(a, b)) continue;
            fprintf(stderr, "error: %s %s and %s %s are the same file (%s): no output of a run "
                    "may be another; name another file\n", b->what, b->path, a->what, a->path,
                    a->norm);
            return -1;
        }
    }
    return 0;
}

int sdnn_outputs_any_exist(const sdnn_outputs *o)
{
    for (int i = 0; i < o->n; ++i)
        if (o->f[i].exists) return 1;
    return 0;
}

int sdnn_outputs_check_input(const sdnn_outputs *o, const char *what, const char *path,
                             int weights_ok)
{
    struct stat sb;
    if (!path || stat(path, &sb) != 0) return 0;   /* its own check names it */
    for (int i = 0; i < o->n; ++i) {
        const sdnn_outfile *f = &o->f[i];
        if (!f->exists || f->device || f->dev != sb.st_dev || f->ino != sb.st_ino) continue;
        if (weights_ok && f->weights) continue;
        fprintf(stderr, "error: %s %s is %s %s: a run never writes over its inputs; name "
                "another file\n", f->what, f->path, what, path);
        return -1;
    }
    return 0;
}

void sdnn_outputs_free(sdnn_outputs *o)
{
    for (int i = 0; i < o->n; ++i) {
        free(o->f[i].what);
        free(o->f[i].path);
        free(o->f[i].norm);
    }
    free(o->f);
    free(o->backup);
    free(o->base);
    memset(o, 0, sizeof *o);
}
