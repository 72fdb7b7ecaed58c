/*
 * devices: `-gpus` ids through the engine table on the gpu
 * engine, with no ./darknet in between (tests/gpu/cli_devices.sh drives the
 * command line):
 *
 *   available_on  every id below the device count runs; an id past it is
 *                 refused naming the id and the count; every replica on
 *                 one device runs (virtual=1), some shared but not all is
 *                 refused naming why
 *   resolve_on    engine=gpu refuses an id past the count with that reason;
 *                 engine=auto falls back to cpu saying it
 *   describe      describe_device(d) names device d ("simulated device d"
 *                 on GPU=sim) with no engine made; past the count it says so
 *   placement     the engine made with devices {1} or {1, 1} (and the
 *                 trainer with virtual=1 and ids {1, 1}) puts its copies on
 *                 device 1 and nothing on device 0 (simulated devices: the
 *                 memory in use; CUDA keeps no such count: not checked)
 *
 * On simulated devices (make GPU=sim) this is host logic, never kernels.
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

/* Device memory in use on dev, or -1 where the runtime keeps no count. */
static long long mem_live(int dev)
{
    sdnn_dev_stats s;
    if (sdnn_dev_stats_get(dev, &s) != SDNN_OK) return -1;
    return (long long)s.mem_live;
}

static void availability(const sdnn_engine_ops *gpu, int ndev)
{
    char why[320] = "";
    int all[64];
    for (int d = 0; d < ndev && d < 64; ++d) all[d] = ndev - 1 - d;
    SOFT_ASSERT(gpu->available_on(all, ndev < 64 ? ndev : 64, why, sizeof why) && !why[0],
                "ids %d..0 on %d devices run (%s)", ndev - 1, ndev, why);
    const int past[2] = {0, ndev};
    why[0] = '\0';
    char want[96], want_count[64];
    snprintf(want, sizeof want, "replica 1 names device id %d", ndev);
    snprintf(want_count, sizeof want_count, "%d devices (ids 0..%d)", ndev, ndev - 1);
    SOFT_ASSERT(!gpu->available_on(past, 2, why, sizeof why) && strstr(why, want) &&
                strstr(why, want_count), "ids 0,%d refused naming the id and the count (%s)",
                ndev, why);
    const int one[3] = {1, 1, 1};
    why[0] = '\0';
    SOFT_ASSERT(gpu->available_on(one, 3, why, sizeof why), "3 replicas on device 1 run (%s)",
                why);
    const int mixed[3] = {0, 0, 1};
    why[0] = '\0';
    SOFT_ASSERT(!gpu->available_on(mixed, 3, why, sizeof why) &&
                strstr(why, "share some devices but not all"),
                "ids 0,0,1 refused naming why (%s)", why);
    SOFT_ASSERT(gpu->available_on(NULL, ndev, why, sizeof why) &&
                !gpu->available_on(NULL, ndev + 1, why, sizeof why),
                "NULL ids: 0..n-1, %d run and %d do not", ndev, ndev + 1);

    const sdnn_engine_ops *got = NULL;
    const int far[1] = {ndev + 3};
    sdnn_status s = sdnn_engine_resolve_on("gpu", far, 1, &got, NULL, 0);
    snprintf(want, sizeof want, "engine gpu cannot run 1 replica here: %d devices", ndev);
    SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && got == NULL && strstr(sdnn_last_error(), want) &&
                strstr(sdnn_last_error(), "replica 0 names device id"),
                "engine=gpu with id %d refused (%s)", ndev + 3, sdnn_last_error());
    s = sdnn_engine_resolve_on("auto", past, 2, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_OK && got == sdnn_engine_find("cpu") &&
                strstr(why, "engine=auto: cpu (gpu: "), "engine=auto with id %d: cpu (%s)",
                ndev, why);
    s = sdnn_engine_resolve_on("auto", one, 2, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_OK && got == gpu && strstr(why, "engine=auto: gpu (devices 1,1)"),
                "engine=auto with ids 1,1: gpu (%s)", why);
}

static void descriptions(const sdnn_engine_ops *gpu, int ndev, int simulated)
{
    char line[320];
    for (int d = 0; d < ndev; ++d) {
        sdnn_engine_describe_device(gpu, d, line, sizeof line);
        char want[48];
        snprintf(want, sizeof want, "simulated device %d (", d);
        SOFT_ASSERT(simulated ? strstr(line, want) == line && strstr(line, "MiB in use")
                              : strstr(line, "GiB") != NULL,
                    "device %d described: %s", d, line);
    }
    sdnn_engine_describe_device(gpu, ndev, line, sizeof line);
    SOFT_ASSERT(strstr(line, "does not exist"), "device %d (past the count): %s", ndev, line);
}

/* Engine copies made with `ids` land on device 1 only. */
static void placement(const sdnn_engine_ops *gpu, const int *ids, int n)
{
    network *nets[2] = {NULL, NULL};
    for (int r = 0; r < n; ++r) nets[r] = gt_parse_file("cfg/shapes.cfg", "batch=2\nsubdivisions=1\n");
    if (!nets[0] || (n > 1 && !nets[1])) {
        SOFT_ASSERT(0, "cfg/shapes.cfg parses (run from the repository root)");
        return;
    }
    long long before0 = mem_live(0), before1 = mem_live(1);
    sdnn_engine_opts o = SDNN_ENGINE_OPTS_INIT;
    o.devices = ids;
    sdnn_engine *e = NULL;
    sdnn_status s = sdnn_engine_create(gpu, nets, n, &o, &e);
    SOFT_ASSERT(s == SDNN_OK, "engine made on ids %d%s (%s)", ids[0], n > 1 ? ",1" : "",
                s == SDNN_OK ? "" : sdnn_last_error());
    if (s == SDNN_OK && before0 >= 0) {
        long long d0 = mem_live(0) - before0, d1 = mem_live(1) - before1;
        SOFT_ASSERT(d0 == 0 && d1 > 0, "%d replica(s) on device 1: %lld bytes there, %lld on "
                    "device 0", n, d1, d0);
    } else if (s == SDNN_OK) {
        printf("    placement of %d replica(s) on device 1: not checked (no memory count here)\n", n);
    }
    sdnn_engine_destroy(e);

    if (n == 2) {
        /* The trainer: virtual=1, engine=gpu, ids 1,1. */
        sdnn_config cfg = SDNN_CONFIG_INIT;
        cfg.present = 1;
        cfg.bucket_mb = 1.0;
        snprintf(cfg.engine, sizeof cfg.engine, "gpu");
        sdnn_trainer_opts to = SDNN_TRAINER_OPTS_INIT;
        to.devices = ids;
        sdnn_trainer *t = NULL;
        s = sdnn_trainer_create_opts(nets, n, &cfg, &to, 0, &t);
        SOFT_ASSERT(s == SDNN_ERR_INVALID && strstr(sdnn_last_error(), "listed twice"),
                    "trainer: ids 1,1 without virtual=1 refused (%s)", sdnn_last_error());
        cfg.virtual_devices = 1;
        before0 = mem_live(0);
        before1 = mem_live(1);
        s = sdnn_trainer_create_opts(nets, n, &cfg, &to, 0, &t);
        SOFT_ASSERT(s == SDNN_OK && t && sdnn_trainer_engine(t) == gpu &&
                    sdnn_trainer_device(t, 0) == 1 && sdnn_trainer_device(t, 1) == 1,
                    "trainer: ids 1,1 with virtual=1 on the gpu engine (%s)",
                    s == SDNN_OK ? "" : sdnn_last_error());
        if (s == SDNN_OK && before0 >= 0)
            SOFT_ASSERT(mem_live(0) == before0 && mem_live(1) > before1,
                        "trainer: both replicas' copies on device 1, none on device 0");
        sdnn_trainer_destroy(t);
    }
    for (int r = 0; r < n; ++r) sdnn_network_free(nets[r]);
}

int main(void)
{
    argv0_ = "devices";
    setenv("SDNN_SIM_DEVICES", "4", 0);   /* read by the simulated runtime only */
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK) sdnn_dev_describe(0, desc, sizeof desc);
    int simulated = strstr(desc, "simulated") != NULL;
    printf("    device 0: %s%s\n", desc, simulated ? " (host logic and kernels on the host executor; no GPU)" : "");
    if (ndev < 2) {
        printf("    %d device(s): these checks need 2 (not run)\n", ndev);
        return gt_summary(argv0_);
    }
    const sdnn_engine_ops *gpu = sdnn_engine_find("gpu");
    SOFT_ASSERT(gpu && gpu->available_on && gpu->describe_device,
                "the gpu engine has available_on and describe_device");
    if (!gpu || !gpu->available_on || !gpu->describe_device) return gt_summary(argv0_);
    availability(gpu, ndev);
    descriptions(gpu, ndev, simulated);
    const int one[1] = {1}, two[2] = {1, 1};
    placement(gpu, one, 1);
    placement(gpu, two, 2);
    return gt_summary(argv0_);
}
