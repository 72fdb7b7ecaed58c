/*
 * ./darknet scalednn fmnist OUTDIR [-n N] [-valid N] [-src DIR]
 *
 * Converts Fashion-MNIST (gzipped IDX files, as Debian's
 * dataset-fashion-mnist ships them) into Darknet's classifier layout:
 *
 *   OUTDIR/train/00001_<class>.png   the first N training images
 *   OUTDIR/valid/00001_<class>.png   the first N test images
 *   OUTDIR/train.txt, OUTDIR/valid.txt, OUTDIR/fmnist.names
 *
 * Darknet's classifier loader gives an image the class whose name is a
 * substring of its path (and wants exactly one), so the class names are
 * chosen so that none contains another, and OUTDIR must contain none.
 * The files are decompressed by a `gzip -dc` child (zlib is not always
 * there); magic numbers, dimensions, label values and the exact length of
 * every stream are checked.
 */
#include "commands.h"
#include "saveio.h"

#include "flags.h"

#include <darknet.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define FM_NCLASS 10
#define FM_DEFAULT_SRC "/usr/share/datasets/fashion-mnist"
#define FM_IDX_IMAGES 0x00000803u
#define FM_IDX_LABELS 0x00000801u
#define FM_MAX_SIDE 1024

extern char **environ;

/* Fashion-MNIST's classes in label order (T-shirt/top, Trouser, Pullover,
 * Dress, Coat, Sandal, Shirt, Sneaker, Bag, Ankle boot). */
static const char *const fm_names[FM_NCLASS] = {
    "top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "boot"
};

/* ---- a gzip -dc child ------------------------------------------------- */

typedef struct {
    FILE *f;
    pid_t pid;
    const char *path;
    uint64_t got;       /* decompressed bytes read so far */
} fm_gz;

static int fm_gz_open(fm_gz *g, const char *path)
{
    struct stat st;
    g->f = NULL;
    g->pid = -1;
    g->path = path;
    g->got = 0;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fmnist: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) || access(path, R_OK) != 0) {
        fprintf(stderr, "fmnist: %s is not a readable file\n", path);
        return -1;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "fmnist: pipe: %s\n", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char *args[] = { "gzip", "-dc", "--", (char *)path, NULL };
    int rc = posix_spawnp(&g->pid, "gzip", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        fprintf(stderr, "fmnist: cannot run gzip to read %s: %s\n", path, strerror(rc));
        g->pid = -1;
        return -1;
    }
    g->f = fdopen(fds[0], "rb");
    if (!g->f) {
        fprintf(stderr, "fmnist: fdopen: %s\n", strerror(errno));
        close(fds[0]);
        kill(g->pid, SIGTERM);
        waitpid(g->pid, NULL, 0);
        g->pid = -1;
        return -1;
    }
    return 0;
}

static int fm_gz_read(fm_gz *g, void *buf, size_t n)
{
    size_t r = fread(buf, 1, n, g->f);
    g->got += r;
    if (r != n) {
        fprintf(stderr, "fmnist: %s: file is truncated or not gzip data (%llu bytes "
                        "decompressed, more expected)\n",
                g->path, (unsigned long long)g->got);
        return -1;
    }
    return 0;
}

/* Reads the rest of the stream, closes it and reaps gzip.  With check set,
 * the stream must end exactly at `expect` bytes and gzip must succeed. */
static int fm_gz_close(fm_gz *g, int check, uint64_t expect)
{
    int ok = 0;
    if (g->f) {
        char buf[65536];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, g->f)) > 0)
            g->got += r;
        fclose(g->f);
        g->f = NULL;
    }
    if (g->pid > 0) {
        int status = 0;
        while (waitpid(g->pid, &status, 0) < 0 && errno == EINTR)
            ;
        g->pid = -1;
        if (check && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
            fprintf(stderr, "fmnist: %s: gzip failed (not a valid gzip file?)\n", g->path);
            ok = -1;
        }
    }
    if (check && ok == 0 && g->got != expect) {
        fprintf(stderr, "fmnist: %s: %llu bytes of data, the IDX header implies %llu\n",
                g->path, (unsigned long long)g->got, (unsigned long long)expect);
        ok = -1;
    }
    return ok;
}

static uint32_t fm_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- one split --------------------------------------------------------- */

/* Reads the whole label file of a split into *labels (count entries). */
static int fm_read_labels(const char *path, unsigned char **labels, uint32_t *count)
{
    fm_gz g;
    unsigned char hdr[8];
    *labels = NULL;
    if (fm_gz_open(&g, path) != 0)
        return -1;
    if (fm_gz_read(&g, hdr, sizeof hdr) != 0)
        goto fail;
    if (fm_be32(hdr) != FM_IDX_LABELS) {
        fprintf(stderr, "fmnist: %s: bad magic 0x%08x (IDX labels are 0x%08x)\n", path,
                fm_be32(hdr), FM_IDX_LABELS);
        goto fail;
    }
    *count = fm_be32(hdr + 4);
    if (*count == 0 || *count > 10000000u) {
        fprintf(stderr, "fmnist: %s: implausible item count %u\n", path, *count);
        goto fail;
    }
    *labels = malloc(*count);
    if (!*labels) {
        fprintf(stderr, "fmnist: out of memory\n");
        goto fail;
    }
    if (fm_gz_read(&g, *labels, *count) != 0)
        goto fail;
    for (uint32_t i = 0; i < *count; ++i)
        if ((*labels)[i] >= FM_NCLASS) {
            fprintf(stderr, "fmnist: %s: label %u of item %u is not in 0..%d\n", path,
                    (*labels)[i], i, FM_NCLASS - 1);
            goto fail;
        }
    if (fm_gz_close(&g, 1, 8 + (uint64_t)*count) != 0) {
        free(*labels);
        *labels = NULL;
        return -1;
    }
    return 0;
fail:
    fm_gz_close(&g, 0, 0);
    free(*labels);
    *labels = NULL;
    return -1;
}

/* Converts the first `want` images of a split (0: all). */
static int fm_split(const char *src, const char *img_file, const char *lab_file,
                    const char *out, const char *split, long want, long *written)
{
    char img_path[PATH_MAX], lab_path[PATH_MAX], dir[PATH_MAX], list_path[PATH_MAX];
    char base[PATH_MAX + 64], png[PATH_MAX + 96];
    unsigned char *labels = NULL, *pix = NULL;
    uint32_t nlab = 0;
    FILE *list = NULL;
    image im = { 0, 0, 0, NULL };
    int rc = -1;
    fm_gz g = { NULL, -1, NULL, 0 };

    snprintf(img_path, sizeof img_path, "%s/%s", src, img_file);
    snprintf(lab_path, sizeof lab_path, "%s/%s", src, lab_file);
    snprintf(dir, sizeof dir, "%s/%s", out, split);
    snprintf(list_path, sizeof list_path, "%s/%s.txt", out, split);

    if (fm_read_labels(lab_path, &labels, &nlab) != 0)
        return -1;
    if (fm_gz_open(&g, img_path) != 0)
        goto done;
    unsigned char hdr[16];
    if (fm_gz_read(&g, hdr, sizeof hdr) != 0)
        goto done;
    if (fm_be32(hdr) != FM_IDX_IMAGES) {
        fprintf(stderr, "fmnist: %s: bad magic 0x%08x (IDX images are 0x%08x)\n", img_path,
                fm_be32(hdr), FM_IDX_IMAGES);
        goto done;
    }
    uint32_t nimg = fm_be32(hdr + 4), rows = fm_be32(hdr + 8), cols = fm_be32(hdr + 12);
    if (nimg != nlab) {
        fprintf(stderr, "fmnist: %s has %u images but %s has %u labels\n", img_path, nimg,
                lab_path, nlab);
        goto done;
    }
    if (rows == 0 || cols == 0 || rows > FM_MAX_SIDE || cols > FM_MAX_SIDE) {
        fprintf(stderr, "fmnist: %s: implausible image size %ux%u\n", img_path, cols, rows);
        goto done;
    }
    if (want > (long)nimg) {
        fprintf(stderr, "fmnist: %ld %s images asked for, %s has only %u\n", want, split,
                img_path, nimg);
        goto done;
    }
    long n = want ? want : (long)nimg;

    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "fmnist: cannot create %s: %s\n", dir, strerror(errno));
        goto done;
    }
    list = fopen(list_path, "w");
    if (!list) {
        fprintf(stderr, "fmnist: cannot write %s: %s\n", list_path, strerror(errno));
        goto done;
    }
    const size_t plane = (size_t)rows * cols;
    pix = malloc(plane);
    if (!pix) {
        fprintf(stderr, "fmnist: out of memory\n");
        goto done;
    }
    im = make_image((int)cols, (int)rows, 3);
    for (long i = 0; i < n; ++i) {
        if (fm_gz_read(&g, pix, plane) != 0)
            goto done;
        for (size_t p = 0; p < plane; ++p) {
            /* Darknet writes (unsigned char)(255 * v): exact for b / 255. */
            float v = (float)pix[p] / 255.0f;
            im.data[p] = im.data[plane + p] = im.data[2 * plane + p] = v;
        }
        const char *cls = fm_names[labels[i]];
        snprintf(base, sizeof base, "%s/%05ld_%s", dir, i + 1, cls);
        save_image_options(im, base, PNG, 0);
        snprintf(png, sizeof png, "%s.png", base);
        struct stat st;
        if (stat(png, &st) != 0 || st.st_size == 0) {
            fprintf(stderr, "fmnist: failed to write image %s\n", png);
            goto done;
        }
        fprintf(list, "%s\n", png);
    }
    if (fm_gz_close(&g, 1, 16 + (uint64_t)nimg * plane) != 0)
        goto done;
    if (fclose(list) != 0) {
        list = NULL;
        fprintf(stderr, "fmnist: error writing %s\n", list_path);
        goto done;
    }
    list = NULL;
    *written = n;
    rc = 0;
done:
    if (g.f || g.pid > 0)
        fm_gz_close(&g, 0, 0);
    if (list)
        fclose(list);
    if (im.data)
        free_image(im);
    free(pix);
    free(labels);
    return rc;
}

/* ---- the command -------------------------------------------------------- */

int sdnn_cmd_fmnist(int argc, char **argv)
{
    const char *src = FM_DEFAULT_SRC;
    long n_train = 2000, n_valid = 500;
    const sdnn_flag flags[] = {
        {.name = "-n", .kind = SDNN_FLAG_LONG, .dst = &n_train, .lo = 0, .hi = 100000000,
         .meta = "N", .help = "training images, the first N (2000, 0 = all)"},
        {.name = "-valid", .kind = SDNN_FLAG_LONG, .dst = &n_valid, .lo = 0, .hi = 100000000,
         .meta = "N", .help = "validation images, the first N of the test set (500, 0 = all)"},
        {.name = "-src", .kind = SDNN_FLAG_STR, .dst = &src, .meta = "DIR",
         .help = "the gzipped IDX files (" FM_DEFAULT_SRC ")"},
    };
    const sdnn_command cmd = {
        .name = "scalednn fmnist", .args = "OUTDIR", .min_pos = 1, .max_pos = 1, .flags = flags,
        .nflags = (int)(sizeof flags / sizeof flags[0]),
    };
    const char *pos[1] = {0};
    int np;
    int parsed = sdnn_args_parse(&cmd, argc, argv, 1, pos, &np);
    if (parsed != SDNN_ARGS_OK) return parsed == SDNN_ARGS_HELP ? 0 : 2;
    const char *outdir = pos[0];
    if (!outdir[0]) return sdnn_args_bad(&cmd, "OUTDIR", "", "a directory");
    char out[PATH_MAX];
    size_t len = strlen(outdir);
    if (len + 64 >= sizeof out) {
        fprintf(stderr, "fmnist: OUTDIR too long: %s\n", outdir);
        return 2;
    }
    memcpy(out, outdir, len + 1);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    for (int c = 0; c < FM_NCLASS; ++c)
        if (strstr(out, fm_names[c])) {
            fprintf(stderr, "fmnist: OUTDIR '%s' contains the class name \"%s\"; Darknet "
                            "finds an image's class by the names in its path: choose "
                            "another directory\n", outdir, fm_names[c]);
            return 2;
        }
    struct stat st;
    if (stat(src, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "fmnist: source directory %s not found (apt-get install "
                        "dataset-fashion-mnist, or give -src DIR)\n", src);
        return 1;
    }
    if (strlen(src) + 64 >= PATH_MAX) {
        fprintf(stderr, "fmnist: -src path too long: %s\n", src);
        return 2;
    }
    if (sdnn_mkdirs(out) != SDNN_OK) {
        fprintf(stderr, "fmnist: %s\n", sdnn_last_error());
        return 1;
    }

    char names[PATH_MAX + 16];
    snprintf(names, sizeof names, "%s/fmnist.names", out);
    FILE *nf = fopen(names, "w");
    if (!nf) {
        fprintf(stderr, "fmnist: cannot write %s: %s\n", names, strerror(errno));
        return 1;
    }
    for (int c = 0; c < FM_NCLASS; ++c)
        fprintf(nf, "%s\n", fm_names[c]);
    if (fclose(nf) != 0) {
        fprintf(stderr, "fmnist: error writing %s\n", names);
        return 1;
    }

    long got_train = 0, got_valid = 0;
    if (fm_split(src, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", out,
                 "train", n_train, &got_train) != 0)
        return 1;
    if (fm_split(src, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", out,
                 "valid", n_valid, &got_valid) != 0)
        return 1;
    printf("fmnist: %ld train + %ld valid images (%d classes) from %s in %s\n", got_train,
           got_valid, FM_NCLASS, src, outdir);
    return 0;
}
