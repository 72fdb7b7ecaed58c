/*
 * datacheck: see datacheck.h.  The image walks read the file once,
 * sequentially; nothing is decoded, so a broken file cannot crash this
 * process (the decoders that could live in libdarknet's OpenCV/stb).
 */
#include "datacheck.h"
#include "readable.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMG_MAX_BYTES (1LL << 31) /* larger files are refused (stb's limit too) */

/* ---- whole file ---------------------------------------------------------------- */

static sdnn_status read_image(const char *path, unsigned char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    /* stat before open: a FIFO would block the open, a device never ends;
     * the descriptor is opened non-blocking and checked again (the path may
     * change in between). */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return SDNN_ERROR(SDNN_ERR_IO, "image %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: is %s, not an image (a regular file is "
                          "needed)", path, sdnn_file_kind((unsigned)sb.st_mode));
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return SDNN_ERROR(SDNN_ERR_IO, "image %s: %s", path, strerror(errno));
    FILE *f = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !(f = fdopen(fd, "rb"))) {
        close(fd);
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: changed while being opened; a regular "
                          "file is needed", path);
    }
    if (sb.st_size == 0 || (long long)sb.st_size > IMG_MAX_BYTES) {
        fclose(f);
        if (sb.st_size == 0)
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: empty file (0 bytes)", path);
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: %lld bytes, more than an image may have",
                          path, (long long)sb.st_size);
    }
    unsigned char *b = malloc((size_t)sb.st_size);
    if (!b) {
        fclose(f);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "image %s: no memory to read it", path);
    }
    size_t n = fread(b, 1, (size_t)sb.st_size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n == 0) {
        free(b);
        return SDNN_ERROR(SDNN_ERR_IO, "image %s: read error", path);
    }
    *buf = b;
    *len = n;
    return SDNN_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* ---- PNG ---------------------------------------------------------------------------- */

static uint32_t g_crc_table[256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

/* The reflected CRC-32 of PNG (polynomial 0xedb88320), a byte at a time. */
static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        g_crc_table[i] = c;
    }
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    pthread_once(&g_crc_once, crc_table_init);
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = g_crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static sdnn_status check_png(const char *path, const unsigned char *b, size_t n)
{
    size_t at = 8;
    int chunks = 0, idat = 0;
    while (at + 12 <= n) {
        uint32_t len = be32(b + at);
        char type[5];
        memcpy(type, b + at + 4, 4);
        type[4] = '\0';
        for (int i = 0; i < 4; ++i)
            if (!isalpha((unsigned char)type[i]))
                return SDNN_ERROR(SDNN_ERR_INVALID,
                                  "image %s: PNG chunk %d at byte %zu has no valid type (corrupt file)",
                                  path, chunks + 1, at);
        if (len > 0x7fffffffu || (size_t)len > n - at - 12)
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "image %s: truncated PNG: chunk %s at byte %zu needs %u bytes, the "
                              "file ends %zu bytes later",
                              path, type, at, len + 12, n - at);
        uint32_t crc = crc32_update(0, b + at + 4, (size_t)len + 4);
        if (crc != be32(b + at + 8 + len))
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNG chunk %s at byte %zu: CRC mismatch "
                              "(corrupt file)", path, type, at);
        if (chunks == 0) {
            if (strcmp(type, "IHDR") != 0 || len != 13)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNG without an IHDR first", path);
            if (be32(b + at + 8) == 0 || be32(b + at + 12) == 0 || be32(b + at + 8) > 1u << 24 ||
                be32(b + at + 12) > 1u << 24)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNG of %ux%u pixels", path,
                                  be32(b + at + 8), be32(b + at + 12));
        }
        ++chunks;
        idat += strcmp(type, "IDAT") == 0;
        if (strcmp(type, "IEND") == 0) {
            if (!idat)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNG without image data (no IDAT)",
                                  path);
            return SDNN_OK;
        }
        at += 12 + (size_t)len;
    }
    return SDNN_ERROR(SDNN_ERR_INVALID,
                      "image %s: truncated PNG: %zu bytes, no IEND chunk after %d chunk%s", path,
                      n, chunks, chunks == 1 ? "" : "s");
}

/* ---- JPEG ----------------------------------------------------------------------------- */

static sdnn_status check_jpeg(const char *path, const unsigned char *b, size_t n)
{
    size_t at = 2;
    int frame = 0, scans = 0;
    while (at < n) {
        if (b[at] != 0xff)
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: JPEG: no marker at byte %zu (corrupt)",
                              path, at);
        while (at < n && b[at] == 0xff) ++at; /* fill bytes */
        if (at >= n) break;
        unsigned m = b[at++];
        if (m == 0xd9) {
            if (!frame || !scans)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: JPEG ends before its %s", path,
                                  frame ? "image data (no scan)" : "frame header");
            return SDNN_OK;
        }
        if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) continue;
        if (m == 0x00 || m == 0xd8)
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: JPEG: marker 0x%02x at byte %zu "
                              "(corrupt)", path, m, at - 1);
        if (at + 2 > n) break;
        size_t len = (size_t)b[at] << 8 | b[at + 1];
        if (len < 2 || at + len > n) break;
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (len < 8)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: JPEG frame header too short", path);
            unsigned h = (unsigned)b[at + 3] << 8 | b[at + 4];
            unsigned w = (unsigned)b[at + 5] << 8 | b[at + 6];
            if (!w || !h)
                return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: JPEG of %ux%u pixels", path, w, h);
            frame = 1;
        }
        at += len;
        if (m == 0xda) {
            /* Entropy-coded data: up to the next marker that is neither a
             * stuffed 0xff00 nor a restart marker. */
            ++scans;
            while (at + 1 < n) {
                if (b[at] == 0xff && b[at + 1] != 0x00 && !(b[at + 1] >= 0xd0 && b[at + 1] <= 0xd7) &&
                    b[at + 1] != 0xff)
                    break;
                ++at;
            }
            if (at + 1 >= n) break;
        }
    }
    return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: truncated JPEG: %zu bytes, no end-of-image "
                      "marker", path, n);
}

/* ---- BMP, PNM ------------------------------------------------------------------------------ */

static sdnn_status check_bmp(const char *path, const unsigned char *b, size_t n)
{
    if (n < 54)
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: truncated BMP: %zu bytes, headers need 54",
                          path, n);
    uint32_t off = le32(b + 10);
    int32_t w = (int32_t)le32(b + 18), h = (int32_t)le32(b + 22);
    unsigned bpp = (unsigned)b[28] | (unsigned)b[29] << 8;
    uint32_t comp = le32(b + 30);
    if (w <= 0 || h == 0 || h == INT32_MIN || bpp == 0 || bpp > 32)
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: BMP of %dx%d pixels, %u bits", path, w, h,
                          bpp);
    if (off >= n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: truncated BMP: pixel data at byte %u, the "
                          "file has %zu", path, off, n);
    if (comp == 0 || comp == 3) {
        unsigned long long row = ((unsigned long long)w * bpp + 31) / 32 * 4;
        unsigned long long need = (unsigned long long)off + row * (unsigned long long)(h < 0 ? -(long long)h : h);
        if (need > n)
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: truncated BMP: %zu of %llu bytes", path,
                              n, need);
    }
    return SDNN_OK;
}

static sdnn_status check_pnm(const char *path, const unsigned char *b, size_t n)
{
    int kind = b[1] - '0';
    long v[3] = {0, 0, 1};
    int want = (kind == 1 || kind == 4) ? 2 : 3;
    size_t at = 2;
    for (int k = 0; k < want; ++k) {
        for (;;) {
            while (at < n && isspace(b[at])) ++at;
            if (at < n && b[at] == '#') {
                while (at < n && b[at] != '\n') ++at;
                continue;
            }
            break;
        }
        if (at >= n || !isdigit(b[at]))
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNM header incomplete", path);
        long x = 0;
        while (at < n && isdigit(b[at]) && x < 1000000000L) x = x * 10 + (b[at++] - '0');
        v[k] = x;
    }
    if (v[0] <= 0 || v[1] <= 0 || v[2] <= 0 || v[2] > 65535)
        return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: PNM of %ldx%ld pixels, maximum %ld", path,
                          v[0], v[1], v[2]);
    if (kind >= 4) {
        ++at; /* the one whitespace byte before the raster */
        unsigned long long px = (unsigned long long)v[0] * (unsigned long long)v[1];
        unsigned long long need = kind == 4 ? (unsigned long long)(v[0] + 7) / 8 * (unsigned long long)v[1]
                                            : px * (kind == 6 ? 3u : 1u) * (v[2] > 255 ? 2u : 1u);
        if (at + need > n)
            return SDNN_ERROR(SDNN_ERR_INVALID, "image %s: truncated PNM: %zu bytes of raster, "
                              "%llu needed", path, n > at ? n - at : 0, need);
    }
    return SDNN_OK;
}

sdnn_status sdnn_image_check(const char *path)
{
    if (!path || !*path) return SDNN_ERROR(SDNN_ERR_INVALID, "image: empty path");
    unsigned char *b;
    size_t n;
    SDNN_CHECK(read_image(path, &b, &n));
    sdnn_status st;
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) st = check_png(path, b, n);
    else if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) st = check_jpeg(path, b, n);
    else if (n >= 2 && b[0] == 'B' && b[1] == 'M') st = check_bmp(path, b, n);
    else if (n >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' && isspace(b[2]))
        st = check_pnm(path, b, n);
    else
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "image %s: not a PNG, JPEG, BMP or PPM/PGM file (it starts with "
                        "%02x %02x %02x %02x)",
                        path, b[0], n > 1 ? b[1] : 0, n > 2 ? b[2] : 0, n > 3 ? b[3] : 0);
    free(b);
    return st;
}

/* ---- labels ------------------------------------------------------------------------------------- */

static int number(const char *tok, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(tok, &end);
    return end != tok && *end == '\0';
}

/*
 * What libdarknet does with a box it has read, before any augmentation
 * (src/data.c: read_boxes, correct_boxes, fill_truth_detection), in its
 * float arithmetic:
 *   - x == 0 and y == 0 is its mark of an empty slot: correct_boxes sets
 *     the box to 999999 and fill_truth_detection keeps it, so the yolo and
 *     region layers index far outside their output (a crash);
 *   - left/right/top/bottom = x -+ w/2, y -+ h/2 are clamped to [0, 1] and
 *     the box is dropped when the clamped width or height is under 0.001.
 * With jitter the crop moves the box further; that is augmentation.  A box
 * libdarknet would crash on or drop without a word is refused here.
 */
static const char *darknet_box(const float f[4], char *buf, size_t len)
{
    if (f[0] == 0 && f[1] == 0) {
        snprintf(buf, len, "x=0 and y=0 together: libdarknet takes a box centred at the corner "
                 "(0,0) for an empty slot and crashes on it; allowed: x or y > 0 (a centre "
                 "inside the image)");
        return buf;
    }
    static const char *const axis[2] = {"w", "h"};
    for (int k = 0; k < 2; ++k) {
        float lo = f[k] - f[k + 2] / 2, hi = f[k] + f[k + 2] / 2;
        lo = lo < 0 ? 0 : (lo > 1 ? 1 : lo);
        hi = hi < 0 ? 0 : (hi > 1 ? 1 : hi);
        float in = hi - lo;
        if ((double)in < .001) {
            snprintf(buf, len, "%s=%g at %s=%g: %g of it is inside the image, and libdarknet "
                     "drops a box under 0.001 without a word; allowed: >= 0.001 inside the "
                     "image", axis[k], (double)f[k + 2],
                     k ? "y" : "x", (double)f[k], (double)in);
            return buf;
        }
    }
    return NULL;
}

/* NULL when the box is good, else why not (in buf). */
static const char *check_box(char *line, int classes, char *buf, size_t len)
{
    char *tok[6];
    int nt = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\v\f", &save); t;
         t = strtok_r(NULL, " \t\r\v\f", &save)) {
        if (nt < 6) tok[nt] = t;
        ++nt;
    }
    if (nt != 5) {
        snprintf(buf, len, "%d column%s, expected 5 (class x y w h)", nt, nt == 1 ? "" : "s");
        return buf;
    }
    char *end;
    errno = 0;
    long c = strtol(tok[0], &end, 10);
    if (end == tok[0] || *end != '\0' || errno == ERANGE) {
        snprintf(buf, len, "class %.40s is not an integer", tok[0]);
        return buf;
    }
    if (c < 0 || c >= classes) {
        snprintf(buf, len, "class %ld is outside 0 .. %d (classes=%d)", c, classes - 1, classes);
        return buf;
    }
    static const char *const names[4] = {"x", "y", "w", "h"};
    float f[4]; /* as libdarknet's fscanf("%f") reads them */
    for (int k = 0; k < 4; ++k) {
        double v;
        if (!number(tok[k + 1], &v)) {
            snprintf(buf, len, "%s=%.40s is not a number", names[k], tok[k + 1]);
            return buf;
        }
        if (!isfinite(v)) {
            snprintf(buf, len, "%s=%.40s is not finite", names[k], tok[k + 1]);
            return buf;
        }
        if (k < 2 && (v < 0 || v > 1)) {
            snprintf(buf, len, "%s=%g is outside [0, 1] (coordinates are relative)", names[k], v);
            return buf;
        }
        if (k >= 2 && v <= 0) {
            snprintf(buf, len, "%s=%g: a box needs a size > 0", names[k], v);
            return buf;
        }
        if (k >= 2 && v > 1) {
            snprintf(buf, len, "%s=%g is > 1 (sizes are relative to the image)", names[k], v);
            return buf;
        }
        f[k] = strtof(tok[k + 1], NULL);
    }
    return darknet_box(f, buf, len);
}

int sdnn_label_scan(const char *name, const char *text, int classes, char *clean, int *boxes,
                    sdnn_label_issue_fn issue, void *ctx)
{
    int bad = 0, good = 0, lineno = 0;
    size_t out = 0;
    const char *p = text;
    char line[512], why[320];
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        size_t full = nl ? len + 1 : len;
        ++lineno;
        int blank = 1;
        for (size_t i = 0; i < len; ++i) blank &= isspace((unsigned char)p[i]) != 0;
        const char *r = NULL;
        if (!blank) {
            if (len >= sizeof line) {
                snprintf(why, sizeof why, "a line of %zu characters, not a box", len);
                r = why;
            } else {
                memcpy(line, p, len);
                line[len] = '\0';
                r = check_box(line, classes, why, sizeof why);
            }
            if (r) {
                ++bad;
                if (issue) {
                    char shown[96];
                    snprintf(shown, sizeof shown, "%.*s", (int)(len < 80 ? len : 80), p);
                    issue(ctx, name, lineno, shown, r);
                }
            } else {
                ++good;
            }
        }
        if (clean && !r && !blank) {
            memcpy(clean + out, p, full);
            out += full;
            if (!nl) clean[out++] = '\n';
        }
        p += full;
    }
    if (clean) clean[out] = '\0';
    if (boxes) *boxes = good;
    return bad;
}
