/* dialect: see dialect.h. */
#include "dialect.h"
#include "act_ops.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { ACT_MISH = 1, ACT_SWISH = 2 };

/* One layer with a dialect activation.  Keyed by the layer's address in
 * its network's layers array (stable for the network's life; resize_network
 * reallocates outputs, not the array). */
typedef struct act_layer {
    const layer *key;
    int act;
    float *x;   /* the activation's input, batch x outputs */
    size_t n;
    void (*forward)(layer, network);
    void (*backward)(layer, network);
} act_layer;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static act_layer **g_layers;
static int g_n, g_cap;

static act_layer *lookup(const layer *key)
{
    act_layer *a = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n && !a; ++i)
        if (g_layers[i]->key == key) a = g_layers[i];
    pthread_mutex_unlock(&g_mu);
    return a;
}

static void act_forward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    a->forward(l, net);
    size_t n = (size_t)l.outputs * (size_t)l.batch;
    if (a->n < n) {
        float *g = realloc(a->x, n * sizeof *g);
        if (!g) abort(); /* no way to report from inside Darknet's forward */
        a->x = g;
        a->n = n;
    }
    memcpy(a->x, l.output, n * sizeof *a->x);
    if (a->act == ACT_MISH)
        for (size_t i = 0; i < n; ++i) l.output[i] = sdnn_mishf(a->x[i]);
    else
        for (size_t i = 0; i < n; ++i) l.output[i] = sdnn_swishf(a->x[i]);
}

static void act_backward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    size_t n = (size_t)l.outputs * (size_t)l.batch;
    if (a->act == ACT_MISH)
        for (size_t i = 0; i < n; ++i) l.delta[i] *= sdnn_mish_gradf(a->x[i]);
    else
        for (size_t i = 0; i < n; ++i) l.delta[i] *= sdnn_swish_gradf(a->x[i]);
    a->backward(l, net);
}

int sdnn_dialect_layers(const network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) k += lookup(net->layers + i) != NULL;
    return k;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - len < 2) {
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        if (r == 0) break;
        len += r;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* `text` with mish/swish written as linear into *out; acts[k] = the
 * dialect activation of layer k (0: none).  Lines are classified as
 * Darknet's read_cfg does after removing spaces and tabs. */
static sdnn_status rewrite(const char *text, char **out, int **acts, int *nlayers)
{
    int cap = 64, layer_no = -2; /* -2: before [net], -1: in [net] */
    int in_ours = 0;
    size_t len = strlen(text), o = 0;
    *out = malloc(len + 1 + len / 2 + 16); /* "mish" -> "linear": +2 per 15-byte line at most */
    *acts = calloc((size_t)cap, sizeof **acts);
    if (!*out || !*acts) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read the cfg");
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        char line[64];
        size_t k = 0;
        for (const char *q = p; q < end && k + 1 < sizeof line; ++q)
            if (*q != ' ' && *q != '\t' && *q != '\r') line[k++] = *q;
        line[k] = '\0';
        int act = 0;
        if (line[0] == '[') {
            in_ours = strcmp(line, "[scalednn]") == 0;
            if (!in_ours) ++layer_no;
            if (layer_no >= cap) {
                int *g = realloc(*acts, (size_t)cap * 2 * sizeof *g);
                if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read the cfg");
                memset(g + cap, 0, (size_t)cap * sizeof *g);
                *acts = g;
                cap *= 2;
            }
        } else if (!in_ours && layer_no >= 0) {
            act = strcmp(line, "activation=mish") == 0    ? ACT_MISH
                  : strcmp(line, "activation=swish") == 0 ? ACT_SWISH
                                                          : 0;
        }
        if (act) {
            (*acts)[layer_no] = act;
            memcpy(*out + o, "activation=linear\n", 18);
            o += 18;
        } else {
            size_t n = (size_t)(end - p);
            memcpy(*out + o, p, n);
            o += n;
            (*out)[o++] = '\n';
        }
        p = nl ? nl + 1 : end;
    }
    (*out)[o] = '\0';
    *nlayers = layer_no + 1;
    return SDNN_OK;
}

/* Register layer `l`; an entry left by a freed network at the same
 * address is replaced. */
static sdnn_status add_layer(layer *l, int act)
{
    act_layer *a = calloc(1, sizeof *a);
    size_t n = (size_t)l->outputs * (size_t)l->batch;
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!a || !x) {
        free(a);
        free(x);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a dialect layer");
    }
    *a = (act_layer){l, act, x, n, l->forward, l->backward};
    pthread_mutex_lock(&g_mu);
    int at = g_n;
    for (int i = 0; i < g_n; ++i)
        if (g_layers[i]->key == l) at = i;
    if (at == g_n && g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 16;
        act_layer **g = realloc(g_layers, (size_t)cap * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&g_mu);
            free(a);
            free(x);
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a dialect layer");
        }
        g_layers = g;
        g_cap = cap;
    }
    if (at < g_n) {
        free(g_layers[at]->x);
        free(g_layers[at]);
    } else {
        ++g_n;
    }
    g_layers[at] = a;
    pthread_mutex_unlock(&g_mu);
    l->forward = act_forward;
    l->backward = act_backward;
    return SDNN_OK;
}

network *sdnn_parse_network(const char *path)
{
    char *text = read_text(path);
    if (!text) {
        SDNN_ERROR(SDNN_ERR_IO, "%s: cannot read the cfg: %s", path, strerror(errno));
        return NULL;
    }
    char *out = NULL;
    int *acts = NULL, nl = 0;
    sdnn_status st = rewrite(text, &out, &acts, &nl);
    free(text);
    int any = 0;
    for (int i = 0; st == SDNN_OK && i < nl; ++i) any |= acts[i] != 0;
    network *net = NULL;
    if (st == SDNN_OK && !any) {
        net = parse_network_cfg((char *)path); /* Debian's dialect: untouched */
    } else if (st == SDNN_OK) {
        int fd = memfd_create("sdnn-dialect", MFD_CLOEXEC);
        size_t len = strlen(out);
        if (fd >= 0 && write(fd, out, len) == (ssize_t)len) {
            char p[64];
            snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
            net = parse_network_cfg(p);
        } else {
            SDNN_ERROR(SDNN_ERR_SYSTEM, "%s: writing the rewritten cfg: %s", path,
                       strerror(errno));
        }
        if (fd >= 0) close(fd);
    }
    free(out);
    for (int i = 0; net && i < nl && i < net->n; ++i) {
        if (!acts[i]) continue;
        if (add_layer(&net->layers[i], acts[i]) != SDNN_OK) {
            free_network(net); /* the error is recorded */
            net = NULL;
        }
    }
    free(acts);
    return net;
}
