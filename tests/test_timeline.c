/*
 * timeline= (Chrome trace JSON): the file a run leaves is parsed here by a
 * strict JSON parser of our own and checked against what the trainer
 * reported: every layer's forward and backward for every replica and step,
 * one collective per bucket per step, spans that nest on every thread, and
 * per-step sums of the wait spans and of the bytes that equal the step's
 * exposed_s, sync_wait_s, comm_s and bytes.  Also: a file that cannot be
 * created stops the trainer with SDNN_ERR_IO naming it; full rings drop
 * records and say so, never block; strings are escaped; stock mode is
 * traced; and ./darknet writes a valid trace whose data waits, bytes and
 * exposed communication match its CSV row for row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "replicas.h"
#include "timeline.h"
#include "trace.h"
#include "trainer.h"
#include "testutil.h"

#include <sys/stat.h>
#include <sys/wait.h>

/* ---- a strict JSON parser (RFC 8259) ------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    double num;            /* J_NUM, J_BOOL */
    char *str;             /* J_STR (decoded) */
    struct jval **items;   /* J_ARR, J_OBJ values */
    char **keys;           /* J_OBJ */
    size_t n, cap;
} jval;

typedef struct jparser {
    const char *p, *end;
    int depth;
    const char *err;
    long err_at;
    const char *start;
} jparser;

static void jfree(jval *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; ++i) {
        jfree(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static int jfail(jparser *P, const char *why)
{
    if (!P->err) {
        P->err = why;
        P->err_at = (long)(P->p - P->start);
    }
    return -1;
}

static void jws(jparser *P)
{
    while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r'))
        P->p++;
}

static int jpush(jval *v, jval *item, char *key)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 8;
        v->items = realloc(v->items, v->cap * sizeof *v->items);
        if (v->t == J_OBJ) v->keys = realloc(v->keys, v->cap * sizeof *v->keys);
    }
    v->items[v->n] = item;
    if (v->t == J_OBJ) v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void put_utf8(char **o, unsigned cp)
{
    unsigned char *q = (unsigned char *)*o;
    if (cp < 0x80) {
        *q++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *q++ = (unsigned char)(0xc0 | (cp >> 6));
        *q++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *q++ = (unsigned char)(0xe0 | (cp >> 12));
        *q++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *q++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else {
        *q++ = (unsigned char)(0xf0 | (cp >> 18));
        *q++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        *q++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *q++ = (unsigned char)(0x80 | (cp & 0x3f));
    }
    *o = (char *)q;
}

static int jhex4(jparser *P, unsigned *cp)
{
    if (P->end - P->p < 4) return jfail(P, "short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
        int h = hexval(P->p[i]);
        if (h < 0) return jfail(P, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    P->p += 4;
    *cp = v;
    return 0;
}

/* At the opening quote; a malloc'd decoded string. */
static char *jstring(jparser *P)
{
    P->p++;
    const char *s = P->p;
    char *out = malloc((size_t)(P->end - s) + 1), *o = out;
    while (P->p < P->end && *P->p != '"') {
        unsigned char c = (unsigned char)*P->p;
        if (c < 0x20) {
            jfail(P, "control character in a string");
            free(out);
            return NULL;
        }
        if (c != '\\') {
            *o++ = (char)c;
            P->p++;
            continue;
        }
        if (++P->p >= P->end) break;
        char e = *P->p++;
        unsigned cp;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u':
            if (jhex4(P, &cp) != 0) {
                free(out);
                return NULL;
            }
            if (cp >= 0xd800 && cp < 0xdc00) {
                unsigned lo;
                if (P->end - P->p < 2 || P->p[0] != '\\' || P->p[1] != 'u') {
                    jfail(P, "lone high surrogate");
                    free(out);
                    return NULL;
                }
                P->p += 2;
                if (jhex4(P, &lo) != 0 || lo < 0xdc00 || lo >= 0xe000) {
                    jfail(P, "bad low surrogate");
                    free(out);
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                jfail(P, "lone low surrogate");
                free(out);
                return NULL;
            }
            put_utf8(&o, cp);
            break;
        default:
            jfail(P, "unknown escape");
            free(out);
            return NULL;
        }
    }
    if (P->p >= P->end) {
        jfail(P, "unterminated string");
        free(out);
        return NULL;
    }
    P->p++;
    *o = '\0';
    return out;
}

static int isdig(char c) { return c >= '0' && c <= '9'; }

static int jnumber(jparser *P, double *out)
{
    const char *s = P->p;
    if (P->p < P->end && *P->p == '-') P->p++;
    if (P->p >= P->end) return jfail(P, "bad number");
    if (*P->p == '0') {
        P->p++;
    } else if (isdig(*P->p)) {
        while (P->p < P->end && isdig(*P->p)) P->p++;
    } else {
        return jfail(P, "bad number");
    }
    if (P->p < P->end && *P->p == '.') {
        P->p++;
        if (P->p >= P->end || !isdig(*P->p)) return jfail(P, "no digits after '.'");
        while (P->p < P->end && isdig(*P->p)) P->p++;
    }
    if (P->p < P->end && (*P->p == 'e' || *P->p == 'E')) {
        P->p++;
        if (P->p < P->end && (*P->p == '+' || *P->p == '-')) P->p++;
        if (P->p >= P->end || !isdig(*P->p)) return jfail(P, "no digits in exponent");
        while (P->p < P->end && isdig(*P->p)) P->p++;
    }
    char buf[64];
    size_t n = (size_t)(P->p - s);
    if (n >= sizeof buf) return jfail(P, "number too long");
    memcpy(buf, s, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return 0;
}

static jval *jvalue(jparser *P);

static jval *jnew(jtype t)
{
    jval *v = calloc(1, sizeof *v);
    v->t = t;
    return v;
}

static jval *jcontainer(jparser *P, int obj)
{
    if (++P->depth > 64) {
        jfail(P, "nested too deep");
        return NULL;
    }
    jval *v = jnew(obj ? J_OBJ : J_ARR);
    P->p++;
    jws(P);
    if (P->p < P->end && *P->p == (obj ? '}' : ']')) {
        P->p++;
        P->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (obj) {
            jws(P);
            if (P->p >= P->end || *P->p != '"') {
                jfail(P, "expected a key");
                goto bad;
            }
            if (!(key = jstring(P))) goto bad;
            jws(P);
            if (P->p >= P->end || *P->p != ':') {
                free(key);
                jfail(P, "expected ':'");
                goto bad;
            }
            P->p++;
        }
        jval *item = jvalue(P);
        if (!item) {
            free(key);
            goto bad;
        }
        jpush(v, item, key);
        jws(P);
        if (P->p < P->end && *P->p == ',') {
            P->p++;
            continue;
        }
        if (P->p < P->end && *P->p == (obj ? '}' : ']')) {
            P->p++;
            P->depth--;
            return v;
        }
        jfail(P, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        goto bad;
    }
bad:
    jfree(v);
    return NULL;
}

static int jliteral(jparser *P, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, lit, n) != 0) return jfail(P, "bad literal");
    P->p += n;
    return 0;
}

static jval *jvalue(jparser *P)
{
    jws(P);
    if (P->p >= P->end) {
        jfail(P, "unexpected end");
        return NULL;
    }
    char c = *P->p;
    if (c == '{') return jcontainer(P, 1);
    if (c == '[') return jcontainer(P, 0);
    if (c == '"') {
        char *s = jstring(P);
        if (!s) return NULL;
        jval *v = jnew(J_STR);
        v->str = s;
        return v;
    }
    if (c == 't' || c == 'f' || c == 'n') {
        const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (jliteral(P, lit) != 0) return NULL;
        jval *v = jnew(c == 'n' ? J_NULL : J_BOOL);
        v->num = c == 't';
        return v;
    }
    double d;
    if (jnumber(P, &d) != 0) return NULL;
    jval *v = jnew(J_NUM);
    v->num = d;
    return v;
}

/* The document in text, or NULL with the reason printed unless quiet. */
static jval *jparse_q(const char *text, size_t len, int quiet)
{
    jparser P = {text, text + len, 0, NULL, 0, text};
    jval *v = jvalue(&P);
    if (v) {
        jws(&P);
        if (P.p != P.end) {
            jfail(&P, "text after the document");
            jfree(v);
            v = NULL;
        }
    }
    if (!v && !quiet) print_error("JSON: %s at byte %ld\n", P.err ? P.err : "?", P.err_at);
    return v;
}

static jval *jparse(const char *text, size_t len) { return jparse_q(text, len, 0); }

static jval *jget(const jval *o, const char *key)
{
    if (!o || o->t != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; ++i)
        if (strcmp(o->keys[i], key) == 0) return o->items[i];
    return NULL;
}

static double jnum_or(const jval *o, const char *key, double dflt)
{
    const jval *v = jget(o, key);
    return v && v->t == J_NUM ? v->num : dflt;
}

static const char *jstr_or(const jval *o, const char *key, const char *dflt)
{
    const jval *v = jget(o, key);
    return v && v->t == J_STR ? v->str : dflt;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    if (len) *len = got;
    return s;
}

static void test_json_parser_is_strict(void **state)
{
    (void)state;
    static const char *good[] = {"{}", "[]",
                                 " [1, -0.5e+3, \"a\\u00e9\\ud83d\\ude00\", true, null] ",
                                 "{\"a\":{\"b\":[{}]}}"};
    static const char *bad[] = {"", "[1,]", "{\"a\":1,}", "[01]", "[1.]", "[.5]", "{a:1}",
                                "[\"\t\"]", "[\"\\x\"]", "[1] 2", "[nul]", "{\"a\" 1}",
                                "[\"\\ud800\"]",
                                "[1", "[NaN]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; ++i) {
        jval *v = jparse(good[i], strlen(good[i]));
        if (!v) fail_msg("rejected valid JSON: %s", good[i]);
        jfree(v);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        jval *v = jparse_q(bad[i], strlen(bad[i]), 1);
        if (v) fail_msg("accepted invalid JSON: %s", bad[i]);
    }
    const char *emoji = "[\"a\\u00e9\\ud83d\\ude00\"]";
    jval *v = jparse(emoji, strlen(emoji));
    assert_non_null(v);
    assert_string_equal(v->items[0]->str, "a\xc3\xa9\xf0\x9f\x98\x80");
    jfree(v);
}

/* ---- the trace as records ------------------------------------------------- */

typedef struct ev {
    char ph;
    const char *name;
    int tid;
    double ts, dur;        /* microseconds */
    const jval *args;
} ev;

typedef struct trace {
    jval *doc;
    ev *e;
    size_t n;
    double records, dropped;   /* otherData */
} trace;

static int is_name(const ev *e, const char *name) { return strcmp(e->name, name) == 0; }
static double arg(const ev *e, const char *key) { return jnum_or(e->args, key, -1); }

/* Parse `path` and check the envelope: traceEvents, the fields of every
 * event, X durations >= 0, the end of the document. */
static trace load_trace(const char *path)
{
    trace T = {0};
    size_t len = 0;
    char *text = slurp(path, &len);
    if (!text) fail_msg("%s: cannot read", path);
    T.doc = jparse(text, len);
    free(text);
    if (!T.doc) fail_msg("%s: not valid JSON", path);
    jval *list = jget(T.doc, "traceEvents");
    assert_non_null(list);
    assert_int_equal(list->t, J_ARR);
    jval *other = jget(T.doc, "otherData");
    assert_non_null(other);
    T.records = jnum_or(other, "records", -1);
    T.dropped = jnum_or(other, "dropped_records", -1);
    T.e = calloc(list->n, sizeof *T.e);
    size_t counted = 0;
    for (size_t i = 0; i < list->n; ++i) {
        const jval *o = list->items[i];
        assert_int_equal(o->t, J_OBJ);
        ev *e = &T.e[T.n++];
        const char *ph = jstr_or(o, "ph", "");
        assert_int_equal(strlen(ph), 1);
        e->ph = ph[0];
        e->name = jstr_or(o, "name", NULL);
        assert_non_null(e->name);
        assert_true(jnum_or(o, "pid", -1) == 1);
        e->tid = (int)jnum_or(o, "tid", -1);
        assert_true(e->tid >= 1);
        e->args = jget(o, "args");
        assert_non_null(e->args);
        if (e->ph == 'M') continue;
        e->ts = jnum_or(o, "ts", -1);
        assert_true(e->ts >= 0);
        if (e->ph == 'X') {
            e->dur = jnum_or(o, "dur", -1);
            if (e->dur < 0) fail_msg("%s: X event %s without a duration >= 0", path, e->name);
            counted++;
        } else if (e->ph == 'C') {
            counted++;
        } else {
            assert_int_equal(e->ph, 'i');
        }
    }
    assert_true(T.records == (double)counted);
    return T;
}

static void free_trace(trace *T)
{
    jfree(T->doc);
    free(T->e);
}

static const char *thread_name(const trace *T, int tid)
{
    for (size_t i = 0; i < T->n; ++i)
        if (T->e[i].ph == 'M' && is_name(&T->e[i], "thread_name") && T->e[i].tid == tid)
            return jstr_or(T->e[i].args, "name", NULL);
    return NULL;
}

static int by_start(const void *a, const void *b)
{
    const ev *x = *(const ev *const *)a, *y = *(const ev *const *)b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;   /* parents first */
    return 0;
}

static long long end_ns(const ev *e) { return llround(e->ts * 1e3) + llround(e->dur * 1e3); }

/* On every thread the spans nest or are disjoint (what Perfetto draws as
 * a stack of slices). */
static void check_nesting(const trace *T)
{
    const ev **v = calloc(T->n, sizeof *v);
    const ev **stack = calloc(T->n, sizeof *stack);
    for (int tid = 1; tid < 64; ++tid) {
        size_t m = 0;
        for (size_t i = 0; i < T->n; ++i)
            if (T->e[i].ph == 'X' && T->e[i].tid == tid) v[m++] = &T->e[i];
        qsort(v, m, sizeof *v, by_start);
        size_t depth = 0;
        for (size_t i = 0; i < m; ++i) {
            /* Times are whole nanoseconds written with three decimals. */
            while (depth && end_ns(stack[depth - 1]) <= llround(v[i]->ts * 1e3)) depth--;
            if (depth) {
                const ev *p = stack[depth - 1];
                if (end_ns(v[i]) > end_ns(p))
                    fail_msg("tid %d: %s [%.3f +%.3f] overlaps %s [%.3f +%.3f]", tid, v[i]->name,
                             v[i]->ts, v[i]->dur, p->name, p->ts, p->dur);
            }
            stack[depth++] = v[i];
        }
    }
    free(v);
    free(stack);
}

/* ---- trainers --------------------------------------------------------- */

static const char *CFG =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=16\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

#define INPUTS (8 * 8 * 3)
#define NLAYERS 6
#define MAXSTEPS 8

static network **replicas(int n)
{
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    srand(1234);
    for (int r = 0; r < n; ++r) {
        nets[r] = tu_parse(CFG);
        assert_non_null(nets[r]);
    }
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    return nets;
}

static sdnn_config section(const char *keys, const char *timeline)
{
    char text[2048];
    snprintf(text, sizeof text, "[scalednn]\n%stimeline=%s\n", keys, timeline);
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", text, &cfg, NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    return cfg;
}

static void tmpdir(char *dir)
{
    strcpy(dir, "/tmp/sdnn-timeline-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

typedef struct step_rec {
    int iteration;
    sdnn_step_stats st;
} step_rec;

/* Train `count` steps of 2 replicas with `keys` and a timeline; the trace
 * is closed and the stats of every step returned. */
static void traced_run(const char *keys, const char *path, int count, step_rec *steps,
                       int *nbuckets, int *coded_ef)
{
    const int n = 2;
    network **nets = replicas(n);
    sdnn_config cfg = section(keys, path);
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create(nets, n, &cfg, 1, &t) != SDNN_OK) fail_msg("%s", sdnn_last_error());
    assert_non_null(sdnn_trainer_timeline(t));
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    *nbuckets = ex ? sdnn_exchange_nbuckets(ex) : 0;
    *coded_ef = ex && sdnn_exchange_has_ef(ex);
    uint64_t seed = 7;
    for (int s = 0; s < count; ++s) {
        data d = tu_batch(&seed, 4 * n, INPUTS, 5);
        if (sdnn_trainer_step(t, d, &steps[s].st) != SDNN_OK) fail_msg("%s", sdnn_last_error());
        steps[s].iteration = (int)sdnn_trainer_iteration(t);
        free_data(d);
    }
    assert_int_equal(sdnn_trainer_close_timeline(t), SDNN_OK);
    assert_null(sdnn_trainer_timeline(t));
    /* Steps after the close are not recorded and do not crash. */
    uint64_t s2 = 99;
    data d = tu_batch(&s2, 4 * n, INPUTS, 5);
    sdnn_step_stats st;
    assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
    free_data(d);
    sdnn_trainer_destroy(t);
}

static int step_of(const step_rec *steps, int count, double iteration)
{
    for (int s = 0; s < count; ++s)
        if ((double)steps[s].iteration == iteration) return s;
    return -1;
}

#define TID_MAIN (SDNN_TL_TRACK_MAIN + 1)
#define TID_COMM (SDNN_TL_TRACK_COMM + 1)
#define TID_REPLICA(r) (SDNN_TL_TRACK_REPLICA0 + 1 + (r))

/* Sums of the per-step durations, seconds; tolerance: each span's two
 * endpoints are rounded to the nanosecond. */
static void assert_sum(const char *what, int iteration, double trace_s, int spans, double want)
{
    double tol = 2e-9 * (spans + 1);
    if (fabs(trace_s - want) > tol)
        fail_msg("step to iteration %d: %s: trace %.9f s over %d spans, stats %.9f s", iteration,
                 what, trace_s, spans, want);
}

static void check_scalednn_trace(const char *keys, const char *codec)
{
    char dir[64], path[128];
    tmpdir(dir);
    snprintf(path, sizeof path, "%s/t.json", dir);
    const int count = 5, n = 2;
    step_rec steps[MAXSTEPS];
    int nb, coded_ef;
    traced_run(keys, path, count, steps, &nb, &coded_ef);
    assert_true(nb >= 2);
    trace T = load_trace(path);
    assert_true(T.dropped == 0);
    assert_string_equal(thread_name(&T, TID_MAIN), "main");
    assert_string_equal(thread_name(&T, TID_COMM), "comm");
    assert_string_equal(thread_name(&T, SDNN_TL_TRACK_LOADER + 1), "loader");
    assert_string_equal(thread_name(&T, TID_REPLICA(0)), "replica 0");
    assert_string_equal(thread_name(&T, TID_REPLICA(1)), "replica 1");
    check_nesting(&T);

    int fwd[MAXSTEPS][2][NLAYERS] = {{{0}}}, bwd[MAXSTEPS][2][NLAYERS] = {{{0}}};
    int allreduce[MAXSTEPS][16] = {{0}}, encode[MAXSTEPS][2][16] = {{{0}}};
    int updates[MAXSTEPS][2] = {{0}}, step_spans[MAXSTEPS] = {0};
    double wait_s[MAXSTEPS][2] = {{0}}, sync_s[MAXSTEPS][2] = {{0}}, comm_s[MAXSTEPS] = {0};
    int wait_n[MAXSTEPS][2] = {{0}}, sync_n[MAXSTEPS][2] = {{0}};
    double bytes[MAXSTEPS] = {0};
    double counters[MAXSTEPS];
    int ncounters = 0;
    for (size_t i = 0; i < T.n; ++i) {
        const ev *e = &T.e[i];
        if (e->ph == 'C') {
            assert_int_equal(e->tid, TID_MAIN);
            if (is_name(e, "bytes exchanged")) {
                assert_true(ncounters < count);
                counters[ncounters++] = arg(e, "bytes");
            }
            continue;
        }
        if (e->ph != 'X') continue;
        int s = step_of(steps, count, arg(e, "iteration"));
        if (s < 0 && !is_name(e, "data wait") && !is_name(e, "load_data") && !is_name(e, "save"))
            fail_msg("%s span with iteration %g, not a step of this run", e->name,
                     arg(e, "iteration"));
        int r = e->tid - TID_REPLICA(0);
        int layer = (int)arg(e, "layer");
        if (is_name(e, "forward") || is_name(e, "backward")) {
            assert_true(r >= 0 && r < n);
            assert_true(layer >= 0 && layer < NLAYERS);
            assert_true(arg(e, "sub") == 0);
            assert_non_null(jstr_or(e->args, "type", NULL));
            (is_name(e, "forward") ? fwd : bwd)[s][r][layer]++;
        } else if (is_name(e, "allreduce")) {
            assert_int_equal(e->tid, TID_COMM);
            int b = (int)arg(e, "bucket");
            assert_true(b >= 0 && b < nb && b < 16);
            allreduce[s][b]++;
            bytes[s] += arg(e, "bytes");
            comm_s[s] += e->dur * 1e-6;
            assert_string_equal(jstr_or(e->args, "codec", ""), codec);
        } else if (is_name(e, "encode")) {
            assert_true(r >= 0 && r < n);
            int b = (int)arg(e, "bucket");
            assert_true(b >= 0 && b < nb && b < 16);
            encode[s][r][b]++;
            assert_string_equal(jstr_or(e->args, "codec", ""), codec);
        } else if (is_name(e, "exchange wait")) {
            wait_s[s][r] += e->dur * 1e-6;
            wait_n[s][r]++;
        } else if (is_name(e, "sync wait")) {
            sync_s[s][r] += e->dur * 1e-6;
            sync_n[s][r]++;
        } else if (is_name(e, "update")) {
            updates[s][r]++;
        } else if (is_name(e, "step")) {
            assert_int_equal(e->tid, TID_MAIN);
            step_spans[s]++;
        }
    }
    assert_int_equal(ncounters, count);
    for (int s = 0; s < count; ++s) {
        const sdnn_step_stats *st = &steps[s].st;
        int it = steps[s].iteration;
        assert_int_equal(step_spans[s], 1);
        for (int r = 0; r < n; ++r) {
            for (int l = 0; l < NLAYERS; ++l)
                if (fwd[s][r][l] != 1 || bwd[s][r][l] != 1)
                    fail_msg("step %d replica %d layer %d: %d forward, %d backward spans", it, r,
                             l, fwd[s][r][l], bwd[s][r][l]);
            assert_int_equal(updates[s][r], 4);       /* two conv, two connected */
            assert_int_equal(wait_n[s][r], 4);
            for (int b = 0; b < nb; ++b) assert_int_equal(encode[s][r][b], coded_ef);
        }
        for (int b = 0; b < nb; ++b)
            if (allreduce[s][b] != 1)
                fail_msg("step %d bucket %d: %d allreduce spans", it, b, allreduce[s][b]);
        /* The CSV's figures from the trace. */
        int w = wait_s[s][0] >= wait_s[s][1] ? 0 : 1, y = sync_s[s][0] >= sync_s[s][1] ? 0 : 1;
        assert_sum("exposed_s (max over replicas of exchange waits)", it, wait_s[s][w],
                   wait_n[s][w], st->exposed_s);
        assert_sum("sync_wait_s (max over replicas of sync waits)", it, sync_s[s][y],
                   sync_n[s][y], st->sync_wait_s);
        assert_sum("comm_s (allreduce spans)", it, comm_s[s], nb, st->comm_s);
        assert_true(st->bytes > 0);
        assert_true(bytes[s] == (double)st->bytes);
        assert_true(counters[s] == (double)st->bytes);
    }
    free_trace(&T);
    unlink(path);
    rmdir(dir);
}

static void test_scalednn_trace_matches_stats(void **state)
{
    (void)state;
    check_scalednn_trace("bucket_mb=0.002\n", "none");
}

static void test_topk_trace_has_encode_spans(void **state)
{
    (void)state;
    check_scalednn_trace("bucket_mb=0.002\ncompress=topk\ntopk_ratio=0.05\n", "topk");
}

static void test_overlap_off(void **state)
{
    (void)state;
    check_scalednn_trace("bucket_mb=0.002\noverlap=0\n", "none");
}

static void test_stock_mode_trace(void **state)
{
    (void)state;
    char dir[64], path[128];
    tmpdir(dir);
    snprintf(path, sizeof path, "%s/s.json", dir);
    const int count = 4;
    step_rec steps[MAXSTEPS];
    int nb, ef;
    traced_run("mode=stock\ninterval=2\n", path, count, steps, &nb, &ef);
    assert_int_equal(nb, 0);
    trace T = load_trace(path);
    check_nesting(&T);
    int fwd = 0, bwd = 0, syncs = 0, counters = 0;
    double bytes = 0, sync_bytes = 0;
    for (size_t i = 0; i < T.n; ++i) {
        const ev *e = &T.e[i];
        fwd += e->ph == 'X' && is_name(e, "forward");
        bwd += e->ph == 'X' && is_name(e, "backward");
        if (e->ph == 'X' && is_name(e, "weight average")) {
            syncs++;
            sync_bytes += arg(e, "bytes");
        }
        if (e->ph == 'C' && is_name(e, "bytes exchanged")) {
            counters++;
            bytes += arg(e, "bytes");
        }
        assert_false(is_name(e, "allreduce"));
    }
    int want_syncs = 0;
    double want_bytes = 0;
    for (int s = 0; s < count; ++s) {
        want_syncs += steps[s].st.synced;
        want_bytes += (double)steps[s].st.bytes;
    }
    assert_int_equal(fwd, count * 2 * NLAYERS);
    assert_int_equal(bwd, count * 2 * NLAYERS);
    assert_true(want_syncs > 0);
    assert_int_equal(syncs, want_syncs);
    assert_int_equal(counters, count);
    assert_true(bytes == want_bytes);
    assert_true(sync_bytes == want_bytes);
    free_trace(&T);
    unlink(path);
    rmdir(dir);
}

static void test_unwritable_path_fails_create(void **state)
{
    (void)state;
    network **nets = replicas(2);
    const char *path = "/nonexistent-sdnn-dir/trace.json";
    sdnn_config cfg = section("", path);
    sdnn_trainer *t = NULL;
    sdnn_clear_error();
    assert_int_equal(sdnn_trainer_create(nets, 2, &cfg, 1, &t), SDNN_ERR_IO);
    assert_null(t);
    assert_non_null(strstr(sdnn_last_error(), path));
    assert_non_null(strstr(sdnn_last_error(), "timeline="));
    /* The caller keeps its networks, untouched. */
    assert_true(nets[0]->learning_rate == 0.02f);
    sdnn_replicas_free(nets, 2);
}

/* A ring that is full drops records and counts them; the file says how
 * many, both where it happened and in otherData. */
static void test_full_ring_drops_and_reports(void **state)
{
    (void)state;
    char dir[64], path[128];
    tmpdir(dir);
    snprintf(path, sizeof path, "%s/d.json", dir);
    sdnn_timeline_opts o = {16, 1000, 0};
    sdnn_timeline *tl = NULL;
    assert_int_equal(sdnn_timeline_open(path, 1, &o, &tl), SDNN_OK);
    const int total = 20000;
    double t = sdnn_now_s();
    const char *odd = "q\"b\\s\x01/\xc3\xa9";
    for (int i = 0; i < total; ++i)
        sdnn_timeline_span(tl, SDNN_TL_TRACK_REPLICA0, SDNN_TL_FORWARD, t, t + 1e-6, i, 0, 0, odd);
    /* Records for a track that does not exist are ignored. */
    sdnn_timeline_span(tl, SDNN_TL_TRACK_REPLICA0 + 1, SDNN_TL_FORWARD, t, t, 0, 0, 0, NULL);
    size_t dropped = sdnn_timeline_dropped(tl);
    assert_string_equal(sdnn_timeline_path(tl), path);
    assert_int_equal(sdnn_timeline_close(tl), SDNN_OK);
    trace T = load_trace(path);
    size_t spans = 0;
    double noted = 0;
    for (size_t i = 0; i < T.n; ++i) {
        const ev *e = &T.e[i];
        if (e->ph == 'X') {
            spans++;
            assert_string_equal(jstr_or(e->args, "type", ""), odd);
            assert_true(fabs(e->dur - 1.0) <= 1.5e-3);
        }
        if (e->ph == 'i') {
            assert_int_equal(e->tid, TID_REPLICA(0));
            noted += arg(e, "dropped");
        }
    }
    print_message("%zu of %d records written, %zu dropped\n", spans, total, dropped);
    assert_true(spans + dropped == (size_t)total);
    assert_true(T.dropped == (double)dropped);
    assert_true(noted == (double)dropped);
    free_trace(&T);
    unlink(path);
    rmdir(dir);
}

/* ---- through ./darknet --------------------------------------------------- */


typedef struct csv_row {
    int iteration;
    double bytes, exposed, data_wait;
} csv_row;

static int read_csv(const char *path, csv_row *rows, int max)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        if (line[0] < '0' || line[0] > '9') continue;
        double v[14];
        char *p = line;
        for (int k = 0; k < 13; ++k) {
            v[k] = strtod(p, &p);
            assert_int_equal(*p, ',');
            p++;
        }
        rows[n].iteration = (int)v[0];
        rows[n].bytes = v[8];
        rows[n].exposed = v[9];
        rows[n].data_wait = v[11];
        n++;
    }
    fclose(f);
    return n;
}

static void test_darknet_writes_valid_trace(void **state)
{
    (void)state;
    const char *bin = getenv("SDNN_DARKNET_BIN");
    if (!bin) bin = "./darknet";
    char dir[64];
    tmpdir(dir);
    assert_int_equal(tu_run("%s scalednn gen-shapes %s/shapes -n 48 -valid 2 -seed 5 >%s/gen.log 2>&1",
                         bin, dir, dir), 0);
    assert_int_equal(tu_run("printf 'classes=4\\ntrain=%s/shapes/train.txt\\n"
                         "valid=%s/shapes/valid.txt\\n"
                         "names=%s/shapes/shapes.names\\nbackup=%s/backup/\\n' > %s/s.data && "
                         "(cat cfg/shapes-scalednn.cfg; echo; echo 'timeline=%s/run.json') "
                         "> %s/s.cfg",
                         dir, dir, dir, dir, dir, dir, dir), 0);
    int rc = tu_run("%s detector train %s/s.data %s/s.cfg -gpus 0,1 -max_batches 16 -seed 1 -csv "
                 "%s/run.csv >%s/train.log 2>&1", bin, dir, dir, dir, dir);
    if (rc != 0) tu_run("tail -20 %s/train.log", dir);
    assert_int_equal(rc, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/train.log", dir);
    char *log = slurp(path, NULL);
    assert_non_null(strstr(log, "timeline written to"));
    free(log);

    csv_row rows[64];
    snprintf(path, sizeof path, "%s/run.csv", dir);
    int nrows = read_csv(path, rows, 64);
    assert_int_equal(nrows, 8);
    snprintf(path, sizeof path, "%s/run.json", dir);
    trace T = load_trace(path);
    check_nesting(&T);
    int loads = 0, waits = 0, nbytes = 0, niter = 0, saves = 0;
    double wait_sum = 0, csv_wait = 0;
    double exposed[64][2] = {{0}};
    int exposed_n[64][2] = {{0}};
    for (size_t i = 0; i < T.n; ++i) {
        const ev *e = &T.e[i];
        if (e->ph == 'X' && is_name(e, "load_data")) {
            assert_int_equal(e->tid, SDNN_TL_TRACK_LOADER + 1);
            assert_true(arg(e, "images") == 16);
            loads++;
        } else if (e->ph == 'X' && is_name(e, "data wait")) {
            assert_int_equal(e->tid, TID_MAIN);
            waits++;
            wait_sum += e->dur * 1e-6;
        } else if (e->ph == 'X' && is_name(e, "save")) {
            saves++;
        } else if (e->ph == 'X' && is_name(e, "exchange wait")) {
            int r = e->tid - TID_REPLICA(0);
            int k = -1;
            for (int j = 0; j < nrows; ++j)
                if (rows[j].iteration == (int)arg(e, "iteration")) k = j;
            assert_true(k >= 0 && r >= 0 && r < 2);
            exposed[k][r] += e->dur * 1e-6;
            exposed_n[k][r]++;
        } else if (e->ph == 'C' && is_name(e, "bytes exchanged")) {
            assert_true(nbytes < nrows);
            assert_true(arg(e, "bytes") == rows[nbytes].bytes);
            nbytes++;
        } else if (e->ph == 'C' && is_name(e, "iteration")) {
            assert_true(niter < nrows);
            assert_true(arg(e, "iteration") == rows[niter].iteration);
            niter++;
        }
    }
    for (int j = 0; j < nrows; ++j) {
        csv_wait += rows[j].data_wait;
        double m = exposed[j][0] > exposed[j][1] ? exposed[j][0] : exposed[j][1];
        /* The CSV keeps 6 decimals. */
        if (fabs(m - rows[j].exposed) > 5e-7 + 2e-9 * (exposed_n[j][0] + exposed_n[j][1] + 1))
            fail_msg("iteration %d: exposed comm %.9f in the trace, %.6f in the CSV",
                     rows[j].iteration, m, rows[j].exposed);
    }
    /* One load per step plus the one in flight at the end. */
    assert_int_equal(loads, nrows + 1);
    assert_int_equal(waits, nrows);
    assert_int_equal(nbytes, nrows);
    assert_int_equal(niter, nrows);
    assert_true(saves >= 1);
    assert_true(fabs(wait_sum - csv_wait) <= 5e-7 * nrows + 1e-8);
    free_trace(&T);
    if (!getenv("SDNN_KEEP")) tu_run("rm -rf %s", dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_parser_is_strict),
        cmocka_unit_test(test_scalednn_trace_matches_stats),
        cmocka_unit_test(test_topk_trace_has_encode_spans),
        cmocka_unit_test(test_overlap_off),
        cmocka_unit_test(test_stock_mode_trace),
        cmocka_unit_test(test_unwritable_path_fails_create),
        cmocka_unit_test(test_full_ring_drops_and_reports),
        cmocka_unit_test(test_darknet_writes_valid_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
