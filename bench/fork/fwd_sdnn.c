/*
 * fwd_sdnn: this project's side of the forward comparison with the maintained
 * Darknet fork.  Built by bench/fork/forward.sh against
 * libscalednn.a and Debian's libdarknet, like the project's own programs.
 *
 *   fwd_sdnn random CFG SEED OUT.weights [VARSCALE]
 *                                            random weights for CFG, Darknet format;
 *                                            batch-norm variances times VARSCALE (and
 *                                            scales times its square root: the same
 *                                            outputs, the epsilon's share divided by it)
 *   fwd_sdnn input CFG SEED OUT.bin          a random input image (w*h*c floats)
 *   fwd_sdnn run CFG WEIGHTS INPUT.bin OUT.dump [RESAVE.weights]
 *                                            every layer's output, batch 1, and
 *                                            optionally the weights saved again
 *   fwd_sdnn compare A.dump B.dump TOL       per layer: max |a-b| / max |b|;
 *                                            exit 1 when a layer is over TOL
 *
 * CFG goes through the same path as `detector test`: sdnn_config_load (the
 * structure and dialect checks), sdnn_parse_network, sdnn_check_weights_file,
 * Darknet's load_weights.  The dump is "SDFWDMP1", the layer count, then per
 * layer a 16-byte type name, the output count and the floats (the same layout
 * fwd_fork.cpp writes for the fork).
 *
 * A [yolo] layer with new_coords=1 keeps w and h in its output as log(4 v^2)
 * (so that libdarknet's exp-based box decoding gives the fork's (2v)^2
 * coding, box_ops.h); the dump holds v = exp(s/2)/2 there, the value the
 * fork's layer outputs, so the two compare entry by entry.
 */
#include "config.h"
#include "dialect.h"
#include "replicas.h"
#include "saveio.h"
#include "splitmix.h"

#include <darknet.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMP_MAGIC "SDFWDMP1"

static network *open_net(const char *cfgpath)
{
    sdnn_config cfg;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(cfgpath, &cfg, &stripped) != SDNN_OK) {
        fprintf(stderr, "fwd_sdnn: %s\n", sdnn_last_error());
        return NULL;
    }
    network *net = sdnn_parse_network(stripped.path);
    sdnn_stripped_cfg_close(&stripped);
    if (!net) fprintf(stderr, "fwd_sdnn: %s: %s\n", cfgpath, sdnn_last_error());
    return net;
}

/* Uniform in [lo, hi) from the stream. */
static float uni(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((sdnn_splitmix64_next(s) >> 40) / 16777216.0);
}

static int cmd_random(const char *cfgpath, const char *seed_s, const char *out, double vscale)
{
    network *net = open_net(cfgpath);
    if (!net) return 1;
    uint64_t s = strtoull(seed_s, NULL, 10);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != CONVOLUTIONAL || l->nweights <= 0) continue;
        /* He-like scale so activations keep their size through the net. */
        int fan_in = l->nweights / l->n;
        float a = sqrtf(3.0f / (float)fan_in);
        for (int k = 0; k < l->nweights; ++k) l->weights[k] = uni(&s, -a, a);
        for (int k = 0; k < l->n; ++k) l->biases[k] = uni(&s, -0.2f, 0.2f);
        if (l->batch_normalize) {
            for (int k = 0; k < l->n; ++k) {
                l->scales[k] = uni(&s, 0.5f, 1.5f) * (float)sqrt(vscale);
                l->rolling_mean[k] = uni(&s, -0.1f, 0.1f);
                l->rolling_variance[k] = uni(&s, 0.5f, 2.0f) * (float)vscale;
            }
        }
    }
    save_weights(net, (char *)out);
    sdnn_network_free(net);
    return 0;
}

static int cmd_input(const char *cfgpath, const char *seed_s, const char *out)
{
    network *net = open_net(cfgpath);
    if (!net) return 1;
    int n = net->w * net->h * net->c;
    float *x = malloc(sizeof *x * (size_t)n);
    uint64_t s = strtoull(seed_s, NULL, 10) ^ 0x5eedu;
    for (int k = 0; k < n; ++k) x[k] = uni(&s, 0.0f, 1.0f);
    FILE *f = fopen(out, "wb");
    int ok = f && fwrite(x, sizeof *x, (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "fwd_sdnn: %s: cannot write\n", out);
    free(x);
    sdnn_network_free(net);
    return ok ? 0 : 1;
}

static const char *type_name(LAYER_TYPE t)
{
    switch (t) {
    case CONVOLUTIONAL: return "convolutional";
    case MAXPOOL: return "maxpool";
    case ROUTE: return "route";
    case UPSAMPLE: return "upsample";
    case YOLO: return "yolo";
    case SHORTCUT: return "shortcut";
    case CONNECTED: return "connected";
    case AVGPOOL: return "avgpool";
    default: return "other";
    }
}

/* Which layers of the cfg at `path` are [yolo] sections with new_coords=1:
 * flags[i] for layer i (sections after [net], [scalednn] not counted). */
static void new_coords_layers(const char *path, int *flags, int n)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    int idx = -2, yolo = 0; /* -2: before [net] */
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') ++p;
        if (*p == '[') {
            int skip = !strncmp(p, "[scalednn]", 10);
            if (!skip) ++idx;
            yolo = !skip && !strncmp(p, "[yolo]", 6);
            continue;
        }
        if (!yolo || idx < 0 || idx >= n) continue;
        char key[64];
        int v = 0;
        if (sscanf(p, " %63[a-z_] = %d", key, &v) == 2 && !strcmp(key, "new_coords")) flags[idx] = v;
    }
    fclose(f);
}

static int cmd_run(const char *cfgpath, const char *weights, const char *input, const char *out,
                   const char *resave)
{
    network *net = open_net(cfgpath);
    if (!net) return 1;
    if (sdnn_check_weights_file(net, weights, 1, NULL) != SDNN_OK) {
        fprintf(stderr, "fwd_sdnn: %s: %s\n", cfgpath, sdnn_last_error());
        sdnn_network_free(net);
        return 1;
    }
    load_weights(net, (char *)weights);
    set_batch_network(net, 1);
    int n = net->w * net->h * net->c;
    float *x = malloc(sizeof *x * (size_t)n);
    FILE *f = fopen(input, "rb");
    int ok = f && fread(x, sizeof *x, (size_t)n, f) == (size_t)n;
    if (f) fclose(f);
    if (!ok) {
        fprintf(stderr, "fwd_sdnn: %s: expected %d floats\n", input, n);
        free(x);
        sdnn_network_free(net);
        return 1;
    }
    network_predict(net, x);
    int *nc = calloc((size_t)net->n, sizeof *nc);
    new_coords_layers(cfgpath, nc, net->n);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (!nc[i] || l->type != YOLO) continue;
        int stride = l->w * l->h;
        for (int a = 0; a < l->n; ++a) {
            float *wh = l->output + (size_t)a * stride * (4 + l->classes + 1) + 2 * stride;
            for (int k = 0; k < 2 * stride; ++k) wh[k] = expf(wh[k] / 2) / 2;
        }
    }
    free(nc);
    f = fopen(out, "wb");
    ok = f != NULL;
    int32_t nl = net->n;
    ok = ok && fwrite(DUMP_MAGIC, 1, 8, f) == 8 && fwrite(&nl, sizeof nl, 1, f) == 1;
    for (int i = 0; ok && i < net->n; ++i) {
        char name[16] = {0};
        strncpy(name, type_name(net->layers[i].type), sizeof name - 1);
        int32_t m = net->layers[i].outputs;
        ok = fwrite(name, 1, 16, f) == 16 && fwrite(&m, sizeof m, 1, f) == 1 &&
             fwrite(net->layers[i].output, sizeof(float), (size_t)m, f) == (size_t)m;
    }
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "fwd_sdnn: %s: cannot write\n", out);
    if (ok && resave) save_weights(net, (char *)resave);
    free(x);
    sdnn_network_free(net);
    return ok ? 0 : 1;
}

typedef struct {
    int n;
    char (*names)[16];
    int32_t *count;
    float **data;
} dump;

static int read_dump(const char *path, dump *d)
{
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "rb");
    char magic[8];
    int32_t n = 0;
    if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, DUMP_MAGIC, 8) != 0 ||
        fread(&n, sizeof n, 1, f) != 1 || n <= 0 || n > 100000) {
        fprintf(stderr, "fwd_sdnn: %s: not a layer dump\n", path);
        if (f) fclose(f);
        return 1;
    }
    d->n = n;
    d->names = calloc((size_t)n, sizeof *d->names);
    d->count = calloc((size_t)n, sizeof *d->count);
    d->data = calloc((size_t)n, sizeof *d->data);
    for (int i = 0; i < n; ++i) {
        if (fread(d->names[i], 1, 16, f) != 16 || fread(&d->count[i], 4, 1, f) != 1 ||
            d->count[i] < 0 || d->count[i] > (1 << 28)) {
            fprintf(stderr, "fwd_sdnn: %s: layer %d: truncated\n", path, i);
            fclose(f);
            return 1;
        }
        d->names[i][15] = 0;
        d->data[i] = malloc(sizeof(float) * ((size_t)d->count[i] + 1));
        if (fread(d->data[i], sizeof(float), (size_t)d->count[i], f) != (size_t)d->count[i]) {
            fprintf(stderr, "fwd_sdnn: %s: layer %d: truncated\n", path, i);
            fclose(f);
            return 1;
        }
    }
    fclose(f);
    return 0;
}

static void free_dump(dump *d)
{
    for (int i = 0; i < d->n; ++i) free(d->data ? d->data[i] : NULL);
    free(d->names);
    free(d->count);
    free(d->data);
}

static int cmd_compare(const char *pa, const char *pb, const char *tol_s)
{
    double tol = atof(tol_s);
    dump a, b;
    if (read_dump(pa, &a) || read_dump(pb, &b)) return 1;
    int bad = 0;
    if (a.n != b.n) {
        printf("layer count differs: %d (%s) vs %d (%s)\n", a.n, pa, b.n, pb);
        bad = 1;
    }
    double worst = 0;
    printf("| layer | type | outputs | max abs | max rel (norm) | max rel (elem, |b|>1e-3) |\n");
    printf("|---:|---|---:|---:|---:|---:|\n");
    for (int i = 0; !bad && i < a.n; ++i) {
        if (a.count[i] != b.count[i]) {
            printf("| %d | %s / %s | %d vs %d | | | size differs |\n", i, a.names[i], b.names[i],
                   a.count[i], b.count[i]);
            bad = 1;
            break;
        }
        double maxabs = 0, maxb = 0, maxel = 0;
        int nonfinite = 0;
        for (int k = 0; k < a.count[i]; ++k) {
            double x = a.data[i][k], y = b.data[i][k];
            if (!isfinite(x) || !isfinite(y)) nonfinite = 1;
            double d = fabs(x - y);
            if (d > maxabs) maxabs = d;
            if (fabs(y) > maxb) maxb = fabs(y);
            if (fabs(y) > 1e-3 && d / fabs(y) > maxel) maxel = d / fabs(y);
        }
        double rel = maxb > 0 ? maxabs / maxb : maxabs;
        if (nonfinite) rel = INFINITY;
        if (rel > worst) worst = rel;
        char tname[40];
        if (strcmp(a.names[i], b.names[i]) == 0)
            snprintf(tname, sizeof tname, "%s", a.names[i]);
        else
            snprintf(tname, sizeof tname, "%s / %s", a.names[i], b.names[i]);
        printf("| %d | %s | %d | %.3g | %.3g | %.3g |%s\n", i, tname, a.count[i], maxabs, rel,
               maxel, rel > tol ? " OVER" : "");
        if (rel > tol) bad = 1;
    }
    printf("worst max rel (norm) %.3g, tolerance %.3g: %s\n", worst, tol, bad ? "FAIL" : "ok");
    free_dump(&a);
    free_dump(&b);
    return bad;
}

int main(int argc, char **argv)
{
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "random"))
        return cmd_random(argv[2], argv[3], argv[4], argc == 6 ? atof(argv[5]) : 1.0);
    if (argc == 5 && !strcmp(argv[1], "input")) return cmd_input(argv[2], argv[3], argv[4]);
    if ((argc == 6 || argc == 7) && !strcmp(argv[1], "run"))
        return cmd_run(argv[2], argv[3], argv[4], argv[5], argc == 7 ? argv[6] : NULL);
    if (argc == 5 && !strcmp(argv[1], "compare")) return cmd_compare(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: fwd_sdnn random CFG SEED OUT.weights [VARSCALE] | input CFG SEED OUT.bin |\n"
                    "       run CFG WEIGHTS INPUT.bin OUT.dump [RESAVE.weights] |\n"
                    "       compare A.dump B.dump TOL\n");
    return 2;
}
