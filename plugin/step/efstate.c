/*
 * efstate: the `.ef` file format (see efstate.h).
 */
#include "efstate.h"
#include "saveio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EF_MAGIC "SDNNEF01"

typedef struct ef_header {
    char magic[8];
    uint32_t nrep;
    uint32_t nbuckets;
    uint32_t velocity;     /* 1 when velocities follow each residual */
    uint32_t reserved;
    uint64_t seen;
    char codec[16];
} ef_header;

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The file's size for this view, and the header it must carry. */
static size_t ef_layout(const sdnn_ef_view *v, uint64_t seen, ef_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, EF_MAGIC, 8);
    h->nrep = (uint32_t)v->nrep;
    h->nbuckets = (uint32_t)v->nbuckets;
    h->velocity = v->velocity ? 1u : 0u;
    h->seen = seen;
    snprintf(h->codec, sizeof h->codec, "%s", v->codec ? v->codec : "none");
    size_t floats = 0;
    for (int k = 0; k < v->nbuckets; ++k) floats += v->count[k] * (h->velocity ? 2u : 1u);
    return sizeof *h + (size_t)v->nbuckets * sizeof(uint64_t) +
           floats * (size_t)v->nrep * sizeof(float) + sizeof(uint64_t);
}

sdnn_status sdnn_ef_save(const sdnn_ef_view *v, const char *path, uint64_t seen)
{
    ef_header h;
    size_t size = ef_layout(v, seen, &h);
    unsigned char *buf = malloc(size), *p = buf;
    if (!buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to save %s (%zu bytes)", path, size);
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int k = 0; k < v->nbuckets; ++k) {
        uint64_t n = v->count[k];
        memcpy(p, &n, sizeof n);
        p += sizeof n;
    }
    sdnn_status st = SDNN_OK;
    for (int r = 0; r < v->nrep && st == SDNN_OK; ++r)
        for (int k = 0; k < v->nbuckets && st == SDNN_OK; ++k) {
            size_t n = v->count[k];
            if (!n) continue;
            /* Through a float buffer: the file's bytes need not be
             * aligned for floats. */
            for (int w = 0; w <= (int)h.velocity && st == SDNN_OK; ++w) {
                float *tmp = malloc(n * sizeof *tmp);
                if (!tmp) {
                    st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to save %s", path);
                    break;
                }
                st = v->read(v->user, r, k, w ? SDNN_EF_VELOCITY : SDNN_EF_RESIDUAL, tmp, n);
                if (st == SDNN_OK) memcpy(p, tmp, n * sizeof(float));
                free(tmp);
                p += n * sizeof(float);
            }
        }
    if (st == SDNN_OK) {
        uint64_t sum = fnv1a(buf, (size_t)(p - buf));
        memcpy(p, &sum, sizeof sum);
        st = sdnn_write_file_atomic(path, buf, size);
    }
    free(buf);
    return st;
}

sdnn_status sdnn_ef_load(const sdnn_ef_view *v, const char *path, uint64_t seen)
{
    SDNN_CHECK(sdnn_check_readable(path)); /* a FIFO or a device: refused unopened */
    FILE *f = fopen(path, "rb");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ef_header want;
    size_t size = ef_layout(v, seen, &want);
    unsigned char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read %s", path);
    }
    size_t got = fread(buf, 1, size + 1, f);
    fclose(f);
    sdnn_status st = SDNN_OK;
    ef_header h;
    if (got < sizeof h) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: %zu bytes, too short for an error-feedback file",
                        path, got);
        goto out;
    }
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, EF_MAGIC, 8) != 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: not a scalednn error-feedback file", path);
        goto out;
    }
    if (h.nrep != want.nrep || h.nbuckets != want.nbuckets || h.velocity != want.velocity ||
        strncmp(h.codec, want.codec, sizeof h.codec) != 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: saved for %u replicas, %u buckets, compress=%.16s%s; this run has "
                        "%u replicas, %u buckets, compress=%.16s%s",
                        path, h.nrep, h.nbuckets, h.codec, h.velocity ? " with momentum" : "",
                        want.nrep, want.nbuckets, want.codec, want.velocity ? " with momentum" : "");
        goto out;
    }
    if (h.seen != seen) {
        st = SDNN_ERROR(SDNN_ERR_INVALID,
                        "%s: saved at %llu images seen, the weights are at %llu (saved by "
                        "another run, or the save was interrupted between the two files)",
                        path, (unsigned long long)h.seen, (unsigned long long)seen);
        goto out;
    }
    const unsigned char *p = buf + sizeof h;
    for (int k = 0; k < v->nbuckets; ++k) {
        uint64_t n;
        memcpy(&n, p, sizeof n);
        p += sizeof n;
        uint64_t expect = v->count[k];
        if (n != expect) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: bucket %d holds %llu values, this run's has %llu "
                            "(different cfg or bucket_mb)", path, k, (unsigned long long)n,
                            (unsigned long long)expect);
            goto out;
        }
    }
    if (got != size) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: %zu bytes, expected %zu", path, got, size);
        goto out;
    }
    uint64_t sum;
    memcpy(&sum, buf + size - sizeof sum, sizeof sum);
    if (sum != fnv1a(buf, size - sizeof sum)) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: checksum mismatch (the file is damaged)", path);
        goto out;
    }
    for (int r = 0; r < v->nrep && st == SDNN_OK; ++r)
        for (int k = 0; k < v->nbuckets && st == SDNN_OK; ++k) {
            size_t n = v->count[k];
            if (!n) continue;
            for (int w = 0; w <= (int)want.velocity && st == SDNN_OK; ++w) {
                float *tmp = malloc(n * sizeof *tmp);
                if (!tmp) {
                    st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read %s", path);
                    break;
                }
                memcpy(tmp, p, n * sizeof(float));
                st = v->write(v->user, r, k, w ? SDNN_EF_VELOCITY : SDNN_EF_RESIDUAL, tmp, n);
                free(tmp);
                p += n * sizeof(float);
            }
        }
out:
    free(buf);
    return st;
}
