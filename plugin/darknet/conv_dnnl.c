/*
 * conv_dnnl: see conv_dnnl.h.  The primitives are created with format
 * `any` so oneDNN picks its fast (blocked) layouts; a reorder moves each
 * argument between Darknet's plain buffer and the primitive's layout only
 * where the two differ.
 */
#include "conv_dnnl.h"
#include "blas.h"
#include "dialect.h"
#include "fastlayers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libdarknet's own functions around its convolution (exported, not
 * declared in darknet.h). */
void forward_convolutional_layer(layer l, network net);
void backward_convolutional_layer(layer l, network net);

/* Why layer i of `net` stays on libdarknet's convolution (CONV_OK: it can
 * run on oneDNN); the one test of eligibility, and the banner's reasons. */
typedef enum conv_why {
    CONV_OK = 0, CONV_NOT_CONV, CONV_MISH, CONV_SWISH, CONV_BINARY, CONV_GROUPS, CONV_DIALECT,
    CONV_OWN, CONV_NO_STATE, CONV_NWHY
} conv_why;

static conv_why why_not(const network *net, int i)
{
    const layer *l = &net->layers[i];
    if (l->type != CONVOLUTIONAL || !l->weights) return CONV_NOT_CONV;
    /* The dialect's activations wrap libdarknet's layer (dialect.h): its
     * forward keeps the pre-activation the wrapper's backward needs. */
    sdnn_dialect_kind k = sdnn_dialect_layer(net, i, &(sdnn_dialect_layer_info){0});
    if (k == SDNN_DIALECT_MISH) return CONV_MISH;
    if (k == SDNN_DIALECT_SWISH) return CONV_SWISH;
    if (l->xnor || l->binary) return CONV_BINARY;
    if (l->groups < 1 || l->c % l->groups || l->n % l->groups) return CONV_GROUPS;
    if (l->forward == forward_convolutional_layer && l->backward == backward_convolutional_layer)
        return CONV_OK;
    /* The dialect gives every layer of a type that has one of its
     * activations its wrapper (one function per type, dialect.c). */
    for (int j = 0; j < net->n; ++j) {
        if (net->layers[j].type != CONVOLUTIONAL) continue;
        k = sdnn_dialect_layer(net, j, &(sdnn_dialect_layer_info){0});
        if (k == SDNN_DIALECT_MISH || k == SDNN_DIALECT_SWISH) return CONV_DIALECT;
    }
    return CONV_OWN;
}

int sdnn_conv_dnnl_eligible(const network *net, int i)
{
    return i >= 0 && i < net->n && why_not(net, i) == CONV_OK;
}

void sdnn_conv_dnnl_describe(const network *net, const char *setting, int onednn,
                             const char *prefix, char *buf, size_t len)
{
    static const char *const said[CONV_NWHY] = {
        [CONV_MISH] = "mish: oneDNN has no mish here (the dialect's activation wraps "
                      "libdarknet's convolution)",
        [CONV_SWISH] = "swish: oneDNN has no swish here (the dialect's activation wraps "
                       "libdarknet's convolution)",
        [CONV_BINARY] = "binary/xnor: oneDNN runs float weights only",
        [CONV_GROUPS] = "groups: the groups do not divide its channels",
        [CONV_DIALECT] = "linear/leaky beside mish or swish ones: the dialect wraps every "
                         "convolution of such a network, and its wrapper is not libdarknet's "
                         "convolution",
        [CONV_OWN] = "wrapped: its forward or backward is not libdarknet's convolution",
        [CONV_NO_STATE] = "without a oneDNN state: no primitive was made for it",
    };
    int nconv = 0, ndnnl = 0, count[CONV_NWHY] = {0};
    for (int i = 0; i < net->n; ++i) {
        if (net->layers[i].type != CONVOLUTIONAL) continue;
        ++nconv;
        if (!onednn) continue;
        if (sdnn_conv_dnnl_owns(&net->layers[i])) {
            ++ndnnl;
            continue;
        }
        conv_why w = why_not(net, i);
        ++count[w == CONV_OK || w == CONV_NOT_CONV ? CONV_NO_STATE : w];
    }
    size_t at = 0;
#define PUT(...) (at += at < len ? (size_t)snprintf(buf + at, len - at, __VA_ARGS__) : 0)
    if (len) buf[0] = '\0';
    if (!onednn) {
        PUT("%scpu_conv=%s: libdarknet's convolutions on all %d convolutional layer%s%s\n",
            prefix, setting, nconv, nconv == 1 ? "" : "s",
            strcmp(setting, "darknet") == 0 ? ""
                : " because this build has no oneDNN (install libdnnl-dev, scripts/setup.sh, "
                  "and rebuild for oneDNN's)");
        goto out;
    }
    PUT("%scpu_conv=%s: %d of %d convolutional layer%s on %s, %d on libdarknet's%s\n", prefix,
        setting,
        ndnnl, nconv, nconv == 1 ? "" : "s", sdnn_conv_dnnl_name(), nconv - ndnnl,
        ndnnl < nconv ? ":" : "");
    for (int w = CONV_MISH; w < CONV_NWHY; ++w) {
        if (!count[w]) continue;
        PUT("%s  layer%s", prefix, count[w] == 1 ? "" : "s");
        int k = 0;
        for (int i = 0; i < net->n; ++i) {
            if (net->layers[i].type != CONVOLUTIONAL || sdnn_conv_dnnl_owns(&net->layers[i]))
                continue;
            conv_why v = why_not(net, i);
            if ((v == CONV_OK || v == CONV_NOT_CONV ? CONV_NO_STATE : v) != (conv_why)w) continue;
            PUT("%s %d", k++ ? "," : "", i);
        }
        PUT(" conv %s\n", said[w]);
    }
#undef PUT
out:
    if (at >= len && len >= 5) memcpy(buf + len - 5, "...\n", 5);   /* cut short */
}

#ifndef SDNN_ONEDNN

int sdnn_conv_dnnl_built(void) { return 0; }
const char *sdnn_conv_dnnl_name(void) { return "not built (no libdnnl-dev)"; }

static sdnn_status not_built(void)
{
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "cpu_conv=onednn: this build has no oneDNN "
                      "(install libdnnl-dev, scripts/setup.sh, and rebuild)");
}

sdnn_status sdnn_conv_dnnl_attach(network *net, int *count)
{
    (void)net;
    if (count) *count = 0;
    return not_built();
}
void sdnn_conv_dnnl_detach(network *net) { (void)net; }
int sdnn_conv_dnnl_owns(const layer *l) { (void)l; return 0; }
sdnn_status sdnn_conv_dnnl_ready(const layer *l) { (void)l; return not_built(); }
sdnn_status sdnn_conv_dnnl_forward(layer l, network net) { (void)l; (void)net; return not_built(); }
sdnn_status sdnn_conv_dnnl_backward(layer l, network net) { (void)l; (void)net; return not_built(); }
sdnn_status sdnn_conv_dnnl_backward_ex(layer l, network net, int bn_exact)
{
    (void)l;
    (void)net;
    (void)bn_exact;
    return not_built();
}

#else

#include <dnnl.h>
#include <omp.h>

int sdnn_conv_dnnl_built(void) { return 1; }

/* One argument of a primitive: Darknet's plain buffer (set per call) and,
 * when the primitive wants another layout, its own buffer and the reorder
 * in the direction the argument flows. */
typedef struct arg_slot {
    dnnl_memory_t user;      /* plain layout, handle set per call */
    dnnl_memory_t prim;      /* the primitive's layout (== user when the same);
                              * its buffer is the thread's arena's, set per call */
    size_t bytes;            /* prim's size when it is not user, else 0 */
    dnnl_primitive_t reorder;   /* user -> prim (inputs) or prim -> user (outputs) */
} arg_slot;

typedef struct prim_set {
    dnnl_primitive_t p;
    dnnl_memory_t scratch;   /* buffer from the thread's arena, set per call */
    size_t scratch_bytes;
    arg_slot a[3];           /* fwd: src, weights, dst; bwd data: diff_dst, weights,
                              * diff_src; bwd weights: src, diff_dst, diff_weights */
} prim_set;

typedef struct shape {
    int batch, c, h, w, n, size, stride, pad, groups, out_h, out_w;
} shape;

typedef struct conv_state {
    const float *key;        /* l.weights */
    shape s;
    int built;
    /* The OpenMP team size the primitives were made under: oneDNN's kernels
     * fix their thread count when made (a primitive made on the main
     * thread, whose team is every core, ran every replica's convolutions
     * on a team of 2 on 2 cores, the workers spinning between them) */
    int nthr;
    dnnl_stream_t stream;
    prim_set fwd, bwd_data, bwd_w;
    size_t ndw, ndx;         /* floats of the weight and input gradients, made in
                              * the arena before they are added */
    struct conv_state *next;
} conv_state;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static conv_state *g_states;
static dnnl_engine_t g_engine;
static _Thread_local int tl_threads;   /* the calling thread's OpenMP team size set */
static void bound_threads(void);

static char g_name[64];
static pthread_once_t g_name_once = PTHREAD_ONCE_INIT;

static void name_fill(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(g_name, sizeof g_name, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
}

const char *sdnn_conv_dnnl_name(void)
{
    pthread_once(&g_name_once, name_fill);
    return g_name;
}

static sdnn_status dn(dnnl_status_t s, const char *what)
{
    if (s == dnnl_success) return SDNN_OK;
    return SDNN_ERROR(s == dnnl_unimplemented ? SDNN_ERR_UNSUPPORTED : SDNN_ERR_INTERNAL,
                      "oneDNN: %s failed (status %d)", what, (int)s);
}
#define DN(call, what, st, label)                    \
    do {                                             \
        (st) = dn((call), (what));                   \
        if ((st) != SDNN_OK) goto label;             \
    } while (0)

static sdnn_status engine_get(void)
{
    sdnn_status st = SDNN_OK;
    pthread_mutex_lock(&g_lock);
    if (!g_engine) st = dn(dnnl_engine_create(&g_engine, dnnl_cpu, 0), "engine create");
    pthread_mutex_unlock(&g_lock);
    return st;
}

static shape shape_of(const layer *l)
{
    shape s = {l->batch, l->c, l->h, l->w, l->n, l->size, l->stride, l->pad,
               l->groups, l->out_h, l->out_w};
    return s;
}

static void slot_free(arg_slot *a)
{
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
    if (a->prim && a->prim != a->user) dnnl_memory_destroy(a->prim);
    if (a->user) dnnl_memory_destroy(a->user);
    memset(a, 0, sizeof *a);
}

static void set_free(prim_set *p)
{
    if (p->p) dnnl_primitive_destroy(p->p);
    if (p->scratch) dnnl_memory_destroy(p->scratch);
    for (int k = 0; k < 3; ++k) slot_free(&p->a[k]);
    memset(p, 0, sizeof *p);
}

static void state_clear(conv_state *c)
{
    set_free(&c->fwd);
    set_free(&c->bwd_data);
    set_free(&c->bwd_w);
    c->built = 0;
}

static void state_free(conv_state *c)
{
    state_clear(c);
    if (c->stream) dnnl_stream_destroy(c->stream);
    free(c);
}

/* Every buffer a primitive needs only while it runs (the arguments in
 * oneDNN's layouts, the scratchpad, the gradients before they are added)
 * comes from one arena per thread, grown to the largest call: the layers
 * of a network run one after another in their replica's thread, so a
 * replica holds one arena, not one set of buffers per layer. */
typedef struct arena {
    char *p;
    size_t cap;
} arena;
static pthread_key_t g_arena_key;
static pthread_once_t g_arena_once = PTHREAD_ONCE_INIT;
static int g_arena_ok;

static void arena_free(void *v)
{
    arena *a = v;
    if (a) free(a->p);
    free(a);
}

static void arena_init(void) { g_arena_ok = pthread_key_create(&g_arena_key, arena_free) == 0; }

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* The calling thread's arena with at least n bytes, or NULL. */
static char *arena_get(size_t n)
{
    if (n < 64) n = 64;   /* a call that needs nothing still gets a valid pointer */
    pthread_once(&g_arena_once, arena_init);
    if (!g_arena_ok) return NULL;
    arena *a = pthread_getspecific(g_arena_key);
    if (!a) {
        a = calloc(1, sizeof *a);
        if (!a || pthread_setspecific(g_arena_key, a) != 0) {
            free(a);
            return NULL;
        }
    }
    if (a->cap < n) {
        char *p = aligned_alloc(64, round64(n));
        if (!p) return NULL;
        free(a->p);
        a->p = p;
        a->cap = round64(n);
    }
    return a->p;
}

/* Slot k of `ps` for the primitive's argument described by `want`, the
 * user's side plain `plain`; `in`: the argument is read by the primitive
 * (reorder user -> prim), else written (prim -> user). */
static sdnn_status slot_make(arg_slot *a, const dnnl_memory_desc_t *plain,
                             const dnnl_memory_desc_t *want, int in)
{
    sdnn_status st;
    DN(dnnl_memory_create(&a->user, plain, g_engine, DNNL_MEMORY_NONE), "memory create", st,
       fail);
    if (dnnl_memory_desc_equal(plain, want)) {
        a->prim = a->user;
        return SDNN_OK;
    }
    DN(dnnl_memory_create(&a->prim, want, g_engine, DNNL_MEMORY_NONE), "memory create", st,
       fail);
    a->bytes = dnnl_memory_desc_get_size(want);
    dnnl_primitive_desc_t rpd = NULL;
    DN(in ? dnnl_reorder_primitive_desc_create(&rpd, plain, g_engine, want, g_engine, NULL)
          : dnnl_reorder_primitive_desc_create(&rpd, want, g_engine, plain, g_engine, NULL),
       "reorder descriptor", st, fail);
    st = dn(dnnl_primitive_create(&a->reorder, rpd), "reorder create");
    dnnl_primitive_desc_destroy(rpd);
    if (st != SDNN_OK) goto fail;
    return SDNN_OK;
fail:
    return st;
}

/* The primitive of `pd` with a user scratchpad, and its three slots. */
static sdnn_status set_make(prim_set *ps, dnnl_primitive_desc_t pd,
                            const dnnl_memory_desc_t *plain[3], const dnnl_query_t q[3],
                            const int in[3])
{
    sdnn_status st;
    for (int k = 0; k < 3; ++k) {
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, q[k], 0);
        if (!want) return SDNN_ERROR(SDNN_ERR_INTERNAL, "oneDNN: no memory descriptor (query %d)",
                                     (int)q[k]);
        if ((st = slot_make(&ps->a[k], plain[k], want, in[k])) != SDNN_OK) return st;
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && dnnl_memory_desc_get_size(sp) > 0) {
        ps->scratch_bytes = dnnl_memory_desc_get_size(sp);
        if ((st = dn(dnnl_memory_create(&ps->scratch, sp, g_engine, DNNL_MEMORY_NONE),
                     "memory create")) != SDNN_OK)
            return st;
    }
    return dn(dnnl_primitive_create(&ps->p, pd), "primitive create");
}

static sdnn_status build(conv_state *c, const layer *l)
{
    sdnn_status st = engine_get();
    if (st != SDNN_OK) return st;
    state_clear(c);
    c->s = shape_of(l);
    c->nthr = omp_get_max_threads();
    shape s = c->s;
    int g = s.groups;
    dnnl_dims_t src_d = {s.batch, s.c, s.h, s.w};
    dnnl_dims_t dst_d = {s.batch, s.n, s.out_h, s.out_w};
    dnnl_dims_t wei_d = {g, s.n / g, s.c / g, s.size, s.size};
    dnnl_dims_t wei1_d = {s.n, s.c, s.size, s.size};
    dnnl_dims_t strides = {s.stride, s.stride}, dil = {0, 0}, pad = {s.pad, s.pad};
    /* Darknet's out = (h + 2 pad - size) / stride + 1: the right padding is
     * the left one (oneDNN floors the same division). */
    dnnl_memory_desc_t src_p, dst_p, wei_p, src_a, dst_a, wei_a;
    int wn = g > 1 ? 5 : 4;
    DN(dnnl_memory_desc_init_by_tag(&src_p, 4, src_d, dnnl_f32, dnnl_nchw), "md", st, fail);
    DN(dnnl_memory_desc_init_by_tag(&dst_p, 4, dst_d, dnnl_f32, dnnl_nchw), "md", st, fail);
    DN(dnnl_memory_desc_init_by_tag(&wei_p, wn, g > 1 ? wei_d : wei1_d, dnnl_f32,
                                    g > 1 ? dnnl_goihw : dnnl_oihw), "md", st, fail);
    DN(dnnl_memory_desc_init_by_tag(&src_a, 4, src_d, dnnl_f32, dnnl_format_tag_any), "md", st,
       fail);
    DN(dnnl_memory_desc_init_by_tag(&dst_a, 4, dst_d, dnnl_f32, dnnl_format_tag_any), "md", st,
       fail);
    DN(dnnl_memory_desc_init_by_tag(&wei_a, wn, g > 1 ? wei_d : wei1_d, dnnl_f32,
                                    dnnl_format_tag_any), "md", st, fail);

    dnnl_primitive_attr_t attr = NULL;
    DN(dnnl_primitive_attr_create(&attr), "attr", st, fail);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);

    dnnl_convolution_desc_t fd, bd, wd;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL;
    DN(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                  dnnl_convolution_direct, &src_a, &wei_a, NULL,
                                                  &dst_a, strides, dil, pad, pad),
       "forward descriptor", st, out);
    DN(dnnl_primitive_desc_create(&fpd, &fd, attr, g_engine, NULL), "forward", st, out);
    DN(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src_a,
                                                        &wei_a, &dst_a, strides, dil, pad, pad),
       "backward-data descriptor", st, out);
    DN(dnnl_primitive_desc_create(&bpd, &bd, attr, g_engine, fpd), "backward data", st, out);
    DN(dnnl_dilated_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &src_a,
                                                           &wei_a, NULL, &dst_a, strides, dil,
                                                           pad, pad),
       "backward-weights descriptor", st, out);
    DN(dnnl_primitive_desc_create(&wpd, &wd, attr, g_engine, fpd), "backward weights", st, out);
    {
        const dnnl_memory_desc_t *fp[3] = {&src_p, &wei_p, &dst_p};
        const dnnl_query_t fq[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
        const int fin[3] = {1, 1, 0};
        if ((st = set_make(&c->fwd, fpd, fp, fq, fin)) != SDNN_OK) goto out;
        const dnnl_memory_desc_t *bp[3] = {&dst_p, &wei_p, &src_p};
        const dnnl_query_t bq[3] = {dnnl_query_diff_dst_md, dnnl_query_weights_md,
                                    dnnl_query_diff_src_md};
        if ((st = set_make(&c->bwd_data, bpd, bp, bq, fin)) != SDNN_OK) goto out;
        const dnnl_memory_desc_t *wp[3] = {&src_p, &dst_p, &wei_p};
        const dnnl_query_t wq[3] = {dnnl_query_src_md, dnnl_query_diff_dst_md,
                                    dnnl_query_diff_weights_md};
        if ((st = set_make(&c->bwd_w, wpd, wp, wq, fin)) != SDNN_OK) goto out;
    }
    c->ndw = (size_t)l->nweights;
    c->ndx = (size_t)s.batch * (size_t)s.c * (size_t)s.h * (size_t)s.w;
    if (!c->stream)
        DN(dnnl_stream_create(&c->stream, g_engine, dnnl_stream_default_flags), "stream", st, out);
    c->built = 1;
out:
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bpd) dnnl_primitive_desc_destroy(bpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    dnnl_primitive_attr_destroy(attr);
fail:
    if (st != SDNN_OK) state_clear(c);
    return st;
}

static conv_state *find(const float *key)
{
    pthread_mutex_lock(&g_lock);
    conv_state *c = g_states;
    while (c && c->key != key) c = c->next;
    pthread_mutex_unlock(&g_lock);
    return c;
}

int sdnn_conv_dnnl_owns(const layer *l) { return l->weights && find(l->weights) != NULL; }

sdnn_status sdnn_conv_dnnl_ready(const layer *l)
{
    conv_state *c = find(l->weights);
    if (!c) return SDNN_ERROR(SDNN_ERR_INTERNAL, "oneDNN: a layer without a state");
    shape s = shape_of(l);
    /* made for this shape under the team the caller runs them with (the
     * first step on a replica's thread remakes what attach made on the
     * main thread) */
    bound_threads();
    if (c->built && memcmp(&s, &c->s, sizeof s) == 0 && c->nthr == omp_get_max_threads())
        return SDNN_OK;
    return build(c, l);
}

sdnn_status sdnn_conv_dnnl_attach(network *net, int *count)
{
    int k = 0;
    sdnn_status st = engine_get();
    for (int i = 0; st == SDNN_OK && i < net->n; ++i) {
        if (!sdnn_conv_dnnl_eligible(net, i)) continue;
        const layer *l = &net->layers[i];
        if (find(l->weights)) {
            ++k;
            continue;
        }
        conv_state *c = calloc(1, sizeof *c);
        if (!c) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "oneDNN: no memory for layer %d's state", i);
            break;
        }
        c->key = l->weights;
        if ((st = build(c, l)) != SDNN_OK) {
            SDNN_ERROR(st, "cpu_conv=onednn: layer %d (convolutional %dx%d/%d, %d groups) cannot "
                       "run on oneDNN", i, l->size, l->size, l->stride, l->groups);
            state_free(c);
            break;
        }
        pthread_mutex_lock(&g_lock);
        c->next = g_states;
        g_states = c;
        pthread_mutex_unlock(&g_lock);
        ++k;
    }
    if (st != SDNN_OK) {
        sdnn_conv_dnnl_detach(net);
        k = 0;
    }
    if (count) *count = k;
    return st;
}

void sdnn_conv_dnnl_detach(network *net)
{
    for (int i = 0; i < net->n; ++i) {
        const float *key = net->layers[i].weights;
        if (!key || net->layers[i].type != CONVOLUTIONAL) continue;
        pthread_mutex_lock(&g_lock);
        conv_state *c = NULL;
        for (conv_state **p = &g_states; *p; p = &(*p)->next)
            if ((*p)->key == key) {
                c = *p;
                *p = c->next;
                break;
            }
        pthread_mutex_unlock(&g_lock);
        if (c) state_free(c);
    }
}

/* The calling thread's OpenMP team: as many threads as OpenBLAS has. */
static void bound_threads(void)
{
    int n = sdnn_blas_get_threads();
    if (n < 1) n = 1;
    if (n != tl_threads) {
        omp_set_num_threads(n);
        tl_threads = n;
    }
}

/* Run ps on the buffers b[3] (plain layout): reorders in, the primitive,
 * reorders out. */
static sdnn_status run(conv_state *c, prim_set *ps, float *b[3], const int in[3],
                       const int argk[3], size_t grad_floats)
{
    sdnn_status st;
    size_t need = round64(grad_floats * sizeof(float)) + round64(ps->scratch_bytes);
    for (int k = 0; k < 3; ++k) need += round64(ps->a[k].bytes);
    char *ar = arena_get(need);
    if (!ar) return SDNN_ERROR(SDNN_ERR_NOMEM, "oneDNN: no memory for %zu bytes", need);
    size_t off = round64(grad_floats * sizeof(float));
    for (int k = 0; k < 3; ++k) {
        if (b[k] == NULL) b[k] = (float *)ar;   /* the gradient, at the arena's start */
        if (!ps->a[k].bytes) continue;
        DN(dnnl_memory_set_data_handle(ps->a[k].prim, ar + off), "set handle", st, fail);
        off += round64(ps->a[k].bytes);
    }
    if (ps->scratch)
        DN(dnnl_memory_set_data_handle(ps->scratch, ar + off), "set handle", st, fail);
    for (int k = 0; k < 3; ++k) {
        arg_slot *a = &ps->a[k];
        DN(dnnl_memory_set_data_handle(a->user, b[k]), "set handle", st, fail);
        if (in[k] && a->reorder) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->prim}};
            DN(dnnl_primitive_execute(a->reorder, c->stream, 2, ra), "reorder", st, fail);
        }
    }
    dnnl_exec_arg_t args[4];
    int na = 0;
    for (int k = 0; k < 3; ++k) args[na++] = (dnnl_exec_arg_t){argk[k], ps->a[k].prim};
    if (ps->scratch) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ps->scratch};
    DN(dnnl_primitive_execute(ps->p, c->stream, na, args), "convolution", st, fail);
    for (int k = 0; k < 3; ++k) {
        arg_slot *a = &ps->a[k];
        if (!in[k] && a->reorder) {
            dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, a->prim}, {DNNL_ARG_TO, a->user}};
            DN(dnnl_primitive_execute(a->reorder, c->stream, 2, ra), "reorder", st, fail);
        }
    }
    DN(dnnl_stream_wait(c->stream), "stream wait", st, fail);
    return SDNN_OK;
fail:
    return st;
}

static const int k_io[3] = {1, 1, 0};

sdnn_status sdnn_conv_dnnl_forward(layer l, network net)
{
    conv_state *c = find(l.weights);
    if (!c || !c->built) return SDNN_ERROR(SDNN_ERR_INTERNAL, "oneDNN: forward before ready");
    bound_threads();
    /* Darknet: output = 0, then += W * im2col(input): the convolution
     * writes the output whole. */
    float *b[3] = {net.input, l.weights, l.output};
    static const int argk[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    sdnn_status st = run(c, &c->fwd, b, k_io, argk, 0);
    if (st != SDNN_OK) return st;
    sdnn_fast_conv_forward_tail(&l, &net);
    return SDNN_OK;
}

sdnn_status sdnn_conv_dnnl_backward(layer l, network net)
{
    return sdnn_conv_dnnl_backward_ex(l, net, 0);
}

sdnn_status sdnn_conv_dnnl_backward_ex(layer l, network net, int bn_exact)
{
    conv_state *c = find(l.weights);
    if (!c || !c->built) return SDNN_ERROR(SDNN_ERR_INTERNAL, "oneDNN: backward before ready");
    bound_threads();
    sdnn_fast_conv_backward_head(&l, &net, bn_exact);

    /* the gradients are made at the arena's start (NULL: run() sets it) */
    float *bw[3] = {net.input, l.delta, NULL};
    static const int wk[3] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    sdnn_status st = run(c, &c->bwd_w, bw, k_io, wk, c->ndw);
    if (st != SDNN_OK) return st;
    /* Darknet adds the batch's weight gradient into the updates. */
    {
        float *restrict u = l.weight_updates;
        const float *restrict g = bw[2];
        for (size_t k = 0; k < c->ndw; ++k) u[k] += g[k];
    }
    if (!net.delta) return SDNN_OK;
    float *bd[3] = {l.delta, l.weights, NULL};
    static const int dk[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    st = run(c, &c->bwd_data, bd, k_io, dk, c->ndx);
    if (st != SDNN_OK) return st;
    /* ... and the input gradient into the previous layer's delta (col2im
     * adds; every consumer's share stays, as with the 1x1 fix). */
    float *restrict d = net.delta;
    const float *restrict g = bd[2];
    for (size_t k = 0; k < c->ndx; ++k) d[k] += g[k];
    return SDNN_OK;
}

#endif
