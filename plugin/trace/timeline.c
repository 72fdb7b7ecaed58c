/*
 * timeline: see timeline.h.  One single-producer ring per track, drained
 * by one writer thread.  The producer publishes a record by storing the
 * ring's head with release order after filling the slot; the writer reads
 * the head with acquire order, formats the records, and hands the slots
 * back by storing the tail.  Head and tail sit on cache lines of their own
 * so replica threads do not slow each other down.
 */
#include "timeline.h"
#include "saveio.h"
#include "clock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct rec {
    int64_t ts;            /* ns since the open */
    int64_t dur;           /* ns, spans only */
    double a[3];
    const char *s;
    int kind;
} rec;

typedef struct track {
    alignas(64) _Atomic uint64_t head;     /* written by the track's thread */
    _Atomic uint64_t dropped;
    alignas(64) _Atomic uint64_t tail;     /* written by the writer */
    uint64_t dropped_noted;
    rec *ring;
} track;

struct sdnn_timeline {
    FILE *f;
    char *iobuf;
    char path[1024];
    char tmp[1100];        /* where the trace is written until the close; "" in place */
    int guarded;           /* tmp is g_live_tmp's file (the signal handler knows it) */
    double t0;
    int pid;
    int ntracks;
    track *tracks;
    uint64_t mask;         /* capacity - 1 */
    int period_ms;

    pthread_t writer;
    int writer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    _Atomic int wake;

    int write_errno;       /* first failed write, 0 if none */
    size_t written;        /* records formatted */
    size_t dropped_total;
};

/* The open trace's files, for sdnn_timeline_interrupted (one per process
 * in a run). */
static sdnn_timeline *g_live;
static sdnn_temp_guard g_live_tmp;
static char g_live_path[1024];
static volatile sig_atomic_t g_recorded;

void sdnn_timeline_interrupted(void)
{
    /* A trace without its end is still read by Perfetto and
     * chrome://tracing: kept where it was asked for if it holds records. */
    const char *t = sdnn_temp_guard_owned(&g_live_tmp);
    if (t && g_recorded) rename(t, g_live_path);
    else if (t) unlink(t);
}

typedef struct kind_info {
    const char *name;
    const char *cat;
    char ph;               /* 'X' span, 'C' counter */
    const char *arg[3];    /* names of a[0..2]; NULL: unused */
    const char *sarg;      /* name of the string argument; NULL: unused */
} kind_info;

static const kind_info g_kinds[SDNN_TL_NKINDS] = {
    [SDNN_TL_STEP] = {"step", "step", 'X', {"iteration"}, NULL},
    [SDNN_TL_STOCK_SYNC] = {"weight average", "comm", 'X', {"iteration", "bytes"}, NULL},
    [SDNN_TL_SAVE] = {"save", "io", 'X', {"iteration"}, NULL},
    [SDNN_TL_DATA_WAIT] = {"data wait", "data", 'X', {"batch"}, NULL},
    [SDNN_TL_LOAD] = {"load_data", "data", 'X', {"batch", "images"}, NULL},
    [SDNN_TL_TRAIN] = {"train_network", "compute", 'X', {"iteration"}, NULL},
    [SDNN_TL_SNAPSHOT] = {"snapshot", "exchange", 'X', {"iteration"}, NULL},
    [SDNN_TL_FORWARD] = {"forward", "compute", 'X', {"iteration", "layer", "sub"}, "type"},
    [SDNN_TL_BACKWARD] = {"backward", "compute", 'X', {"iteration", "layer", "sub"}, "type"},
    [SDNN_TL_PACK] = {"pack", "exchange", 'X', {"iteration", "layer", "bucket"}, NULL},
    [SDNN_TL_ENCODE] = {"encode", "exchange", 'X', {"iteration", "bucket", "floats"}, "codec"},
    [SDNN_TL_UPDATE] = {"update", "compute", 'X', {"iteration", "layer"}, NULL},
    [SDNN_TL_SYNC_WAIT] = {"sync wait", "wait", 'X', {"iteration", "layer", "bucket"}, NULL},
    [SDNN_TL_EXCHANGE_WAIT] = {"exchange wait", "wait", 'X', {"iteration", "layer", "bucket"},
                               NULL},
    [SDNN_TL_UNPACK] = {"unpack", "exchange", 'X', {"iteration", "layer", "bucket"}, NULL},
    [SDNN_TL_ALLREDUCE] = {"allreduce", "comm", 'X', {"iteration", "bucket", "bytes"}, "codec"},
    [SDNN_TL_C_BYTES] = {"bytes exchanged", "counter", 'C', {"bytes"}, NULL},
    [SDNN_TL_C_ITERATION] = {"iteration", "counter", 'C', {"iteration"}, NULL},
    [SDNN_TL_C_LOSS] = {"loss", "counter", 'C', {"loss"}, NULL},
    [SDNN_TL_C_IMAGES_S] = {"images/s", "counter", 'C', {"images_per_s"}, NULL},
};

static int64_t to_ns(const sdnn_timeline *tl, double t)
{
    return (int64_t)llround((t - tl->t0) * 1e9);
}

static void push(sdnn_timeline *tl, int tr, const rec *r)
{
    if (tr < 0 || tr >= tl->ntracks) return;
    track *k = &tl->tracks[tr];
    uint64_t h = atomic_load_explicit(&k->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&k->tail, memory_order_acquire);
    uint64_t used = h - t;
    if (used > tl->mask) {
        atomic_fetch_add_explicit(&k->dropped, 1, memory_order_relaxed);
        return;
    }
    k->ring[h & tl->mask] = *r;
    atomic_store_explicit(&k->head, h + 1, memory_order_release);
    /* Half full: wake the writer early.  Signalling without the mutex may
     * lose the wake-up; the writer's period bounds the delay. */
    if (used + 1 == (tl->mask + 1) / 2 && !atomic_exchange(&tl->wake, 1))
        pthread_cond_signal(&tl->cv);
}

void sdnn_timeline_span(sdnn_timeline *tl, int track, sdnn_tl_kind kind, double t0, double t1,
                        double a0, double a1, double a2, const char *s)
{
    rec r;
    r.ts = to_ns(tl, t0);
    r.dur = to_ns(tl, t1) - r.ts;
    if (r.dur < 0) r.dur = 0;
    r.a[0] = a0;
    r.a[1] = a1;
    r.a[2] = a2;
    r.s = s;
    r.kind = (int)kind;
    push(tl, track, &r);
}

void sdnn_timeline_counter(sdnn_timeline *tl, sdnn_tl_kind kind, double t, double value)
{
    rec r = {to_ns(tl, t), 0, {value, 0, 0}, NULL, (int)kind};
    push(tl, SDNN_TL_TRACK_MAIN, &r);
}

size_t sdnn_timeline_dropped(sdnn_timeline *tl)
{
    size_t n = 0;
    for (int i = 0; i < tl->ntracks; ++i)
        n += (size_t)atomic_load_explicit(&tl->tracks[i].dropped, memory_order_relaxed);
    return n;
}

const char *sdnn_timeline_path(const sdnn_timeline *tl) { return tl->path; }

/* ---- the writer -------------------------------------------------------- */

/* Records are formatted into a line buffer by hand and written with one
 * fwrite: printf's parsing of formats would cost the writer (which shares
 * the cores with the replicas) several times more. */
typedef struct line {
    size_t n;
    char b[1024];
} line;

static void lmem(line *L, const char *s, size_t k)
{
    if (k > sizeof L->b - L->n) k = sizeof L->b - L->n;
    memcpy(L->b + L->n, s, k);
    L->n += k;
}

static void lput(line *L, const char *s) { lmem(L, s, strlen(s)); }

static void lchar(line *L, char c) { lmem(L, &c, 1); }

static void luint(line *L, unsigned long long v, int min_digits)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || k < min_digits);
    while (k) lchar(L, d[--k]);
}

static void lint(line *L, long long v)
{
    if (v < 0) {
        lchar(L, '-');
        luint(L, 0ull - (unsigned long long)v, 1);
    } else {
        luint(L, (unsigned long long)v, 1);
    }
}

/* ns as microseconds with three decimals: exact. */
static void lus(line *L, int64_t ns)
{
    unsigned long long u = ns < 0 ? 0ull - (unsigned long long)ns : (unsigned long long)ns;
    if (ns < 0) lchar(L, '-');
    luint(L, u / 1000, 1);
    lchar(L, '.');
    luint(L, u % 1000, 3);
}

static void lnum(line *L, double v)
{
    if (!isfinite(v)) {
        lput(L, "null");   /* JSON has no NaN */
    } else if (v == trunc(v) && fabs(v) < 9e15) {
        lint(L, (long long)v);
    } else {
        char t[32];
        int k = snprintf(t, sizeof t, "%.9g", v);
        lmem(L, t, (size_t)k);
    }
}

static void lstr(line *L, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    lchar(L, '"');
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            lchar(L, '\\');
            lchar(L, (char)c);
        } else if (c < 0x20) {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            lmem(L, u, sizeof u);
        } else {
            lchar(L, (char)c);
        }
    }
    lchar(L, '"');
}

/* ,\n{"name":...,"pid":P,"tid":T,"ts":TS */
static void lhead(line *L, const sdnn_timeline *tl, const char *name, const char *cat, char ph,
                  int tid, int64_t ts)
{
    lput(L, ",\n{\"name\":");
    lstr(L, name);
    lput(L, ",\"cat\":");
    lstr(L, cat);
    lput(L, ",\"ph\":\"");
    lchar(L, ph);
    lput(L, "\",\"pid\":");
    lint(L, tl->pid);
    lput(L, ",\"tid\":");
    lint(L, tid);
    lput(L, ",\"ts\":");
    lus(L, ts);
}

static void lwrite(sdnn_timeline *tl, line *L)
{
    fwrite(L->b, 1, L->n, tl->f);
    L->n = 0;
}

static void put_record(sdnn_timeline *tl, int tr, const rec *r)
{
    if (r->kind < 0 || r->kind >= SDNN_TL_NKINDS) return;
    const kind_info *k = &g_kinds[r->kind];
    line L;
    L.n = 0;
    lhead(&L, tl, k->name, k->cat, k->ph, tr + 1, r->ts);
    if (k->ph == 'X') {
        lput(&L, ",\"dur\":");
        lus(&L, r->dur);
    }
    lput(&L, ",\"args\":{");
    int n = 0;
    for (int i = 0; i < 3; ++i) {
        if (!k->arg[i]) continue;
        if (n++) lchar(&L, ',');
        lstr(&L, k->arg[i]);
        lchar(&L, ':');
        lnum(&L, r->a[i]);
    }
    if (k->sarg && r->s) {
        if (n++) lchar(&L, ',');
        lstr(&L, k->sarg);
        lchar(&L, ':');
        lstr(&L, r->s);
    }
    lput(&L, "}}");
    lwrite(tl, &L);
    tl->written++;
    if (g_live == tl) g_recorded = 1;
}

static void drain(sdnn_timeline *tl)
{
    int any = 0;
    for (int i = 0; i < tl->ntracks; ++i) {
        track *k = &tl->tracks[i];
        uint64_t h = atomic_load_explicit(&k->head, memory_order_acquire);
        uint64_t t = atomic_load_explicit(&k->tail, memory_order_relaxed);
        if (t != h) any = 1;
        for (; t != h; ++t) put_record(tl, i, &k->ring[t & tl->mask]);
        atomic_store_explicit(&k->tail, h, memory_order_release);
        uint64_t d = atomic_load_explicit(&k->dropped, memory_order_relaxed);
        if (d != k->dropped_noted) {
            /* An instant on the track where records were lost, so the gap
             * in the picture is explained where it is. */
            line L;
            L.n = 0;
            lhead(&L, tl, "timeline: records dropped (ring full)", "timeline", 'i', i + 1,
                  to_ns(tl, sdnn_now_s()));
            lput(&L, ",\"s\":\"t\",\"args\":{\"dropped\":");
            luint(&L, (unsigned long long)(d - k->dropped_noted), 1);
            lput(&L, "}}");
            lwrite(tl, &L);
            tl->dropped_total += (size_t)(d - k->dropped_noted);
            k->dropped_noted = d;
            any = 1;
        }
    }
    if (any && fflush(tl->f) != 0 && !tl->write_errno) tl->write_errno = errno ? errno : EIO;
    if (ferror(tl->f) && !tl->write_errno) tl->write_errno = EIO;
}

static void *writer_main(void *arg)
{
    sdnn_timeline *tl = arg;
    /* The replicas keep every core busy: the writer takes what they leave.
     * Its rings hold seconds of records, so it never falls behind for
     * long.  (Failure only leaves the default priority.) */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    pthread_mutex_lock(&tl->mu);
    while (!tl->stop) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        long ns = dl.tv_nsec + (long)tl->period_ms * 1000000L;
        dl.tv_sec += ns / 1000000000L;
        dl.tv_nsec = ns % 1000000000L;
        while (!tl->stop && !atomic_load(&tl->wake))
            if (pthread_cond_timedwait(&tl->cv, &tl->mu, &dl) == ETIMEDOUT) break;
        atomic_store(&tl->wake, 0);
        pthread_mutex_unlock(&tl->mu);
        drain(tl);
        pthread_mutex_lock(&tl->mu);
    }
    pthread_mutex_unlock(&tl->mu);
    return NULL;
}

/* ---- open / close ------------------------------------------------------ */

static void put_meta(sdnn_timeline *tl, const char *what, int tid, const char *key,
                     const char *sval, int ival, int first)
{
    line L;
    L.n = 0;
    if (!first) lput(&L, ",\n");
    lput(&L, "{\"name\":");
    lstr(&L, what);
    lput(&L, ",\"ph\":\"M\",\"pid\":");
    lint(&L, tl->pid);
    lput(&L, ",\"tid\":");
    lint(&L, tid);
    lput(&L, ",\"args\":{");
    lstr(&L, key);
    lchar(&L, ':');
    if (sval) lstr(&L, sval);
    else lint(&L, ival);
    lput(&L, "}}");
    lwrite(tl, &L);
}

static void free_timeline(sdnn_timeline *tl)
{
    if (tl->tracks)
        for (int i = 0; i < tl->ntracks; ++i) free(tl->tracks[i].ring);
    free(tl->tracks);
    if (tl->f) {
        fclose(tl->f);   /* an open that failed after the file was made */
        if (tl->tmp[0]) unlink(tl->tmp);
    }
    if (tl->guarded) {
        sdnn_temp_guard_release(&g_live_tmp);
        g_live = NULL;
    }
    pthread_mutex_destroy(&tl->mu);
    pthread_cond_destroy(&tl->cv);
    free(tl->iobuf);
    free(tl);
}

sdnn_status sdnn_timeline_check(const char *path)
{
    /* Never over a file that is not a trace of ours (a weights file...). */
    static const char *const ours[] = {"{\"traceEvents\":[", NULL};
    SDNN_CHECK(sdnn_check_overwrite(path, "[scalednn] timeline=", ours));
    struct stat sb;
    if ((stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) && sdnn_check_dir_writable(path) != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_IO, "[scalednn] timeline=%s: %s", path, sdnn_last_error());
    return SDNN_OK;
}

sdnn_status sdnn_timeline_open(const char *path, int nreplicas, const sdnn_timeline_opts *opts,
                               sdnn_timeline **out)
{
    *out = NULL;
    sdnn_timeline_opts o = SDNN_TIMELINE_OPTS_INIT;
    if (opts) o = *opts;
    if (nreplicas < 1 || o.capacity < 2 || o.period_ms < 1)
        return SDNN_ERROR(SDNN_ERR_INVALID, "timeline: bad options (%d replicas, capacity %zu, "
                          "period %d ms)", nreplicas, o.capacity, o.period_ms);
    if (strlen(path) >= sizeof ((sdnn_timeline *)0)->path)
        return SDNN_ERROR(SDNN_ERR_INVALID, "[scalednn] timeline=%s: path too long", path);
    SDNN_CHECK(sdnn_timeline_check(path));
    uint64_t cap = 2;
    while (cap < o.capacity) cap <<= 1;

    sdnn_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the timeline");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&tl->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&tl->mu, NULL);
    snprintf(tl->path, sizeof tl->path, "%s", path);
    tl->pid = o.rank + 1;
    tl->mask = cap - 1;
    tl->period_ms = o.period_ms;
    tl->ntracks = SDNN_TL_TRACK_REPLICA0 + nreplicas;

    size_t tbytes = (size_t)tl->ntracks * sizeof(track);
    tl->tracks = aligned_alloc(alignof(track), (tbytes + 63) / 64 * 64);
    if (!tl->tracks) goto nomem;
    memset(tl->tracks, 0, tbytes);
    for (int i = 0; i < tl->ntracks; ++i)
        if (!(tl->tracks[i].ring = malloc((size_t)cap * sizeof(rec)))) goto nomem;
    tl->iobuf = malloc(1u << 20);
    if (!tl->iobuf) goto nomem;

    struct stat sb;
    char why[1200] = "";
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        tl->f = fopen(path, "w");   /* a device or a pipe: in place */
        if (!tl->f) snprintf(why, sizeof why, "%s", strerror(errno));
    } else {
        /* Beside the file until the close: a run that records nothing (one
         * refused while it starts) leaves the previous trace. */
        int fd = -1;
        char *real = NULL;   /* a link: the file it names is replaced, not the link */
        if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) real = realpath(path, NULL);
        if (real && strlen(real) < sizeof tl->path) snprintf(tl->path, sizeof tl->path, "%s", real);
        free(real);
        /* The first timeline of the process is the one the signal
         * handler keeps or removes. */
        sdnn_status made;
        if (!g_live) {
            memcpy(g_live_path, tl->path, sizeof g_live_path);
            g_recorded = 0;
            made = sdnn_temp_create_guarded(&g_live_tmp, tl->path, tl->tmp, sizeof tl->tmp, &fd);
            if (made == SDNN_OK) {
                tl->guarded = 1;
                g_live = tl;
            }
        } else {
            made = sdnn_temp_create(tl->path, tl->tmp, sizeof tl->tmp, &fd);
        }
        if (made != SDNN_OK) {
            snprintf(why, sizeof why, "%s", sdnn_last_error());
            tl->tmp[0] = '\0';
        } else if (!(tl->f = fdopen(fd, "w"))) {
            snprintf(why, sizeof why, "%s", strerror(errno));
            close(fd);
            unlink(tl->tmp);
            tl->tmp[0] = '\0';
        }
    }
    if (!tl->f) {
        free_timeline(tl);
        return SDNN_ERROR(SDNN_ERR_IO, "[scalednn] timeline=%s: cannot open the trace file for "
                          "writing: %s (the directory must exist and be writable)",
                          path, why);
    }
    setvbuf(tl->f, tl->iobuf, _IOFBF, 1u << 20);
    tl->t0 = sdnn_now_s();

    fputs("{\"traceEvents\":[\n", tl->f);
    char pname[32] = "scalednn";
    if (o.rank > 0) snprintf(pname, sizeof pname, "scalednn rank %d", o.rank);
    put_meta(tl, "process_name", 1, "name", pname, 0, 1);
    static const char *fixed[] = {"main", "loader", "comm"};
    for (int i = 0; i < tl->ntracks; ++i) {
        char name[32];
        if (i < SDNN_TL_TRACK_REPLICA0) snprintf(name, sizeof name, "%s", fixed[i]);
        else snprintf(name, sizeof name, "replica %d", i - SDNN_TL_TRACK_REPLICA0);
        put_meta(tl, "thread_name", i + 1, "name", name, 0, 0);
        /* Replicas first, then comm, loader, main. */
        int order = i >= SDNN_TL_TRACK_REPLICA0 ? i - SDNN_TL_TRACK_REPLICA0
                                                : nreplicas + (SDNN_TL_TRACK_REPLICA0 - 1 - i);
        put_meta(tl, "thread_sort_index", i + 1, "sort_index", NULL, order, 0);
    }
    if (fflush(tl->f) != 0) {
        int e = errno;
        free_timeline(tl);
        return SDNN_ERROR(SDNN_ERR_IO, "[scalednn] timeline=%s: cannot write: %s", path,
                          strerror(e));
    }
    if (pthread_create(&tl->writer, NULL, writer_main, tl) != 0) {
        free_timeline(tl);
        return SDNN_ERROR(SDNN_ERR_SYSTEM, "timeline %s: cannot start the writer thread", path);
    }
    tl->writer_started = 1;
    *out = tl;
    return SDNN_OK;
nomem:
    free_timeline(tl);
    return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the timeline (%d tracks of %llu records)",
                      SDNN_TL_TRACK_REPLICA0 + nreplicas, (unsigned long long)cap);
}

sdnn_status sdnn_timeline_close(sdnn_timeline *tl)
{
    if (!tl) return SDNN_OK;
    if (tl->writer_started) {
        pthread_mutex_lock(&tl->mu);
        tl->stop = 1;
        pthread_cond_signal(&tl->cv);
        pthread_mutex_unlock(&tl->mu);
        pthread_join(tl->writer, NULL);
    }
    drain(tl);   /* the producers have stopped: this empties every ring */
    fprintf(tl->f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"scalednn "
                   "timeline\",\"records\":%zu,\"dropped_records\":%zu}}\n",
            tl->written, tl->dropped_total);
    int e = tl->write_errno;
    if (fflush(tl->f) != 0 && !e) e = errno ? errno : EIO;
    if (ferror(tl->f) && !e) e = EIO;
    if (fclose(tl->f) != 0 && !e) e = errno ? errno : EIO;
    tl->f = NULL;
    char path[sizeof tl->path];
    memcpy(path, tl->path, sizeof path);
    if (tl->tmp[0]) {
        struct stat sb;
        if (tl->written == 0 && tl->dropped_total == 0 && stat(path, &sb) == 0) {
            unlink(tl->tmp);   /* nothing recorded: the previous trace stays */
        } else if (rename(tl->tmp, path) != 0) {
            if (!e) e = errno;
            unlink(tl->tmp);
        }
    }
    free_timeline(tl);
    if (e)
        return SDNN_ERROR(SDNN_ERR_IO, "[scalednn] timeline=%s: writing the trace failed: %s; "
                          "the file is incomplete", path, strerror(e));
    return SDNN_OK;
}
