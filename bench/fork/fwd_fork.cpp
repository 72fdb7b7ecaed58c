/*
 * fwd_fork: the maintained fork's side of the forward comparison.
 * Not part of the project's build: bench/fork/forward.sh compiles it against
 * the fork's headers and links the fork's libdarknet.so (built by
 * bench/fork/build.sh, outside the repository).  It uses the fork's own
 * parser, weights loader and forward pass, nothing of this project.
 *
 *   fwd_fork CFG WEIGHTS INPUT.bin OUT.dump [RESAVE.weights]
 *
 * Batch 1, no batch-norm fusing (each layer's output as the fork's CPU
 * forward computes it).  The dump has the layout fwd_sdnn.c reads: "SDFWDMP1",
 * the layer count, then per layer a 16-byte type name, the output count and
 * the floats.  RESAVE gets the fork's save_weights of the loaded network.
 *
 * The layers run in the loop of the fork's forward_network (as its
 * network_predict calls it: no truth, no delta, train 0).  After every
 * [maxpool] that takes the fork's inference path (its AVX function) the
 * output is checked against the maximum over each padded window of the
 * layer's own input, computed here; the count of entries that differ is
 * printed ("fork maxpool defect: ...").  With -plain-maxpool those entries
 * are replaced by the window maximum before the next layer runs, so the
 * rest of the network can still be compared.
 */
#include "darknet_internal.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static const char *type_name(Darknet::ELayerType t)
{
    switch (t) {
    case Darknet::ELayerType::CONVOLUTIONAL: return "convolutional";
    case Darknet::ELayerType::MAXPOOL: return "maxpool";
    case Darknet::ELayerType::ROUTE: return "route";
    case Darknet::ELayerType::UPSAMPLE: return "upsample";
    case Darknet::ELayerType::YOLO: return "yolo";
    case Darknet::ELayerType::SHORTCUT: return "shortcut";
    case Darknet::ELayerType::CONNECTED: return "connected";
    case Darknet::ELayerType::AVGPOOL: return "avgpool";
    default: return "other";
    }
}

/* Entries of l.output that differ from the window maximum of `in`; replaced when `fix`. */
static long check_maxpool(Darknet::Layer &l, const float *in, bool fix)
{
    const int off = -l.pad / 2;
    long bad = 0;
    for (int b = 0; b < l.batch; ++b)
        for (int k = 0; k < l.c; ++k)
            for (int i = 0; i < l.out_h; ++i)
                for (int j = 0; j < l.out_w; ++j) {
                    float mx = -FLT_MAX;
                    for (int n = 0; n < l.size; ++n)
                        for (int m = 0; m < l.size; ++m) {
                            const int y = off + i * l.stride + n, x = off + j * l.stride + m;
                            if (y < 0 || y >= l.h || x < 0 || x >= l.w) continue;
                            const float v = in[x + l.w * (y + l.h * (k + b * l.c))];
                            if (v > mx) mx = v;
                        }
                    float &o = l.output[j + l.out_w * (i + l.out_h * (k + b * l.c))];
                    if (o != mx) {
                        ++bad;
                        if (fix) o = mx;
                    }
                }
    return bad;
}

int main(int argc, char **argv)
{
    bool plain = argc > 1 && std::strcmp(argv[1], "-plain-maxpool") == 0;
    if (plain) {
        --argc;
        ++argv;
    }
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: fwd_fork [-plain-maxpool] CFG WEIGHTS INPUT.bin OUT.dump "
                             "[RESAVE.weights]\n");
        return 2;
    }
    Darknet::Network net = parse_network_cfg_custom(argv[1], 1, 1);
    load_weights(&net, argv[2]);
    const size_t n = (size_t)net.w * net.h * net.c;
    std::vector<float> x(n);
    FILE *f = std::fopen(argv[3], "rb");
    bool ok = f && std::fread(x.data(), sizeof(float), n, f) == n;
    if (f) std::fclose(f);
    if (!ok) {
        std::fprintf(stderr, "fwd_fork: %s: expected %zu floats\n", argv[3], n);
        return 1;
    }
    Darknet::NetworkState state = {};
    state.net = net;
    state.input = x.data();
    state.train = 0;
    state.workspace = net.workspace;
    for (int i = 0; i < net.n; ++i) {
        state.index = i;
        Darknet::Layer &l = net.layers[i];
        l.forward(l, state);
        if (l.type == Darknet::ELayerType::MAXPOOL && !l.maxpool_depth && l.stride_x == l.stride_y) {
            long bad = check_maxpool(l, state.input, plain);
            if (bad)
                std::printf("fork maxpool defect: layer %d (size %d, stride %d, %dx%d): %ld of %d "
                            "entries below the window maximum%s\n",
                            i, l.size, l.stride, l.w, l.h, bad, l.outputs,
                            plain ? " (replaced)" : "");
        }
        state.input = l.output;
    }
    f = std::fopen(argv[4], "wb");
    ok = f != nullptr;
    int32_t nl = net.n;
    ok = ok && std::fwrite("SDFWDMP1", 1, 8, f) == 8 && std::fwrite(&nl, sizeof nl, 1, f) == 1;
    for (int i = 0; ok && i < net.n; ++i) {
        char name[16] = {0};
        std::strncpy(name, type_name(net.layers[i].type), sizeof name - 1);
        int32_t m = net.layers[i].outputs;
        ok = std::fwrite(name, 1, 16, f) == 16 && std::fwrite(&m, sizeof m, 1, f) == 1 &&
             std::fwrite(net.layers[i].output, sizeof(float), (size_t)m, f) == (size_t)m;
    }
    if (f && std::fclose(f) != 0) ok = false;
    if (!ok) {
        std::fprintf(stderr, "fwd_fork: %s: cannot write\n", argv[4]);
        return 1;
    }
    if (argc == 6) save_weights(net, argv[5]);
    free_network(net);
    return 0;
}
