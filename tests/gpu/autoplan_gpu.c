/*
 * autoplan_gpu: bucket_mb=auto on the gpu engine.  The planner's
 * profile comes from the engine's per-layer device events (forward and
 * backward of every layer, read after the step's sync into the replica
 * thread's accumulator, as the cpu engine's hooks fill it):
 *
 *   during the profiling steps the accumulator of every replica is
 *   non-empty: the parameter layers' forward and backward times are > 0;
 *   the plan made from it predicts compute > 0 (an empty profile predicts
 *   0), and its buckets are the exchange's, layer for layer, after the
 *   trainer switches to it.
 *
 * The codec models the step measures for the planner carry the collectives
 * the exchange's comm offers: over NCCL (backend=nccl) fp16's and bf16's
 * include NCCL's native half / bfloat16 allreduce, so bucket_mb=auto prices
 * what the engine runs (a comm table without the offers op gives none:
 * tests/test_autoplan.c).
 *
 * On simulated devices the times are those of the kernels on the host executor:
 * this checks where the profile comes from and where the plan goes, not a
 * GPU's speed.
 */
#include "autoplan.h"
#include "config.h"
#include "dev.h"
#include "exchange.h"
#include "gpu_test.h"
#include "measure.h"
#include "replicas.h"
#include "trainer.h"

#define ROWS 8
#define MAX_STEPS 12

/* The planner's models as the step measures them on a trainer of nets
 * (gpu engine, backend `be`): how many of fp16's and bf16's carry the
 * native allreduce (-1: no trainer). */
static int native_offered(network **nets, int n, const char *be)
{
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = SDNN_MODE_SCALEDNN;
    c.bucket_mb = 1;
    snprintf(c.engine, sizeof c.engine, "gpu");
    snprintf(c.backend, sizeof c.backend, "%s", be);
    snprintf(c.compress, sizeof c.compress, "fp16");
    sdnn_trainer *T = NULL;
    sdnn_status s = sdnn_trainer_create(nets, n, &c, 0, &T);
    /* What the step measures under compress=auto over fp16 and bf16, the
     * link named (nothing probed). */
    snprintf(c.compress, sizeof c.compress, "auto");
    snprintf(c.compress_allow, sizeof c.compress_allow, "none,fp16,bf16");
    c.link_gbps = 10;
    SOFT_ASSERT(s == SDNN_OK, "backend=%s trainer: %s", be, s == SDNN_OK ? "" : sdnn_last_error());
    if (s != SDNN_OK) return -1;
    sdnn_plan_measured pm;
    s = sdnn_measure_for_plan(sdnn_trainer_engine_instance(T),
                              sdnn_exchange_comm(sdnn_trainer_exchange(T)), NULL, n, n, &c, &pm);
    SOFT_ASSERT(s == SDNN_OK, "backend=%s: measure: %s", be, s == SDNN_OK ? "" : sdnn_last_error());
    int half = 0, lossy = 0;
    for (int i = 0; s == SDNN_OK && i < pm.ncodecs; ++i) {
        if (!pm.ops[i]->lossy) continue;
        lossy++;
        half += (pm.models[i].colls & SDNN_CM_OFFERS(SDNN_CM_NATIVE)) != 0;
        printf("    backend=%s: %s model offers 0x%x\n", be, pm.ops[i]->name, pm.models[i].colls);
    }
    sdnn_trainer_destroy(T);
    SOFT_ASSERT(lossy == 2, "backend=%s: fp16 and bf16 measured (%d lossy)", be, lossy);
    return half;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "autoplan_gpu";
    setenv("SDNN_SIM_DEVICES", "2", 0);   /* read by the simulated runtime only */
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK && ndev > 0) sdnn_dev_describe(0, desc, sizeof desc);
    printf("    device 0: %s%s\n", desc,
           strstr(desc, "simulated") ? " (host logic and the kernels on the host executor: no GPU timings)"
                                     : "");
    if (ndev < 2) {
        printf("    fewer than 2 devices: not run\n");
        return gt_summary("autoplan_gpu");
    }
    const int n = 2;
    char set[64];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=2\n", ROWS / n);
    network *nets[2];
    for (int r = 0; r < n; ++r) {
        nets[r] = gt_parse_file("cfg/shapes.cfg", set);
        GT_OK(nets[r] ? SDNN_OK : SDNN_ERR_INVALID);
    }
    gt_randomize(nets[0], 7);
    gt_copy_net(nets[1], nets[0]);
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = SDNN_MODE_SCALEDNN;
    c.bucket_mb = 0;          /* auto */
    c.profile_iters = 3;
    snprintf(c.engine, sizeof c.engine, "gpu");
    sdnn_trainer *T = NULL;
    GT_OK(sdnn_trainer_create(nets, n, &c, 0, &T));
    int classes = 4;
    for (int i = 0; i < nets[0]->n; ++i)
        if (nets[0]->layers[i].type == YOLO) classes = nets[0]->layers[i].classes;
    const sdnn_autoplan *ap = sdnn_trainer_autoplan(T);
    SOFT_ASSERT(ap != NULL, "bucket_mb=auto makes an autoplan on the gpu engine");
    int planned_at = -1, nonempty_steps = 0;
    for (int step = 0; ap && step < MAX_STEPS && planned_at < 0; ++step) {
        data d = gt_detection_data(ROWS, nets[0]->w, nets[0]->h, nets[0]->c, nets[0]->truths,
                                   classes, 300 + (uint64_t)step);
        sdnn_step_stats st;
        sdnn_status s = sdnn_trainer_step(T, d, &st);
        free_data(d);
        SOFT_ASSERT(s == SDNN_OK, "step %d: %s", step, s == SDNN_OK ? "" : sdnn_last_error());
        if (s != SDNN_OK) break;
        if (sdnn_autoplan_count(ap) > 0) {
            planned_at = step;
            break;
        }
        /* between profiling steps the accumulators hold the steps so far */
        int all = 1;
        for (int r = 0; r < n; ++r) {
            const double *p = sdnn_autoplan_prof((sdnn_autoplan *)ap, r);
            for (int i = 0; i < nets[0]->n; ++i) {
                layer *l = &nets[0]->layers[i];
                if (l->type != CONVOLUTIONAL) continue;
                if (!(p[3 * i] > 0) || !(p[3 * i + 1] > 0)) all = 0;
            }
        }
        nonempty_steps += all;
    }
    SOFT_ASSERT(nonempty_steps > 0,
                "the profile holds every convolution's forward and backward time on every "
                "replica (%d step(s) seen)", nonempty_steps);
    SOFT_ASSERT(planned_at >= 0, "a plan is made within %d steps", MAX_STEPS);
    const sdnn_plan *p = ap ? sdnn_autoplan_current(ap) : NULL;
    if (p) {
        printf("    plan after step %d: %d bucket(s), predicted compute %.3g s, step %.3g s "
               "(simulated devices)\n", planned_at, p->nb, p->pred.compute_s, p->pred.step_s);
        SOFT_ASSERT(p->pred.compute_s > 0, "the plan rests on a measured profile (compute %.3g s)",
                    p->pred.compute_s);
        /* one more step: the exchange now runs the plan's buckets */
        data d = gt_detection_data(ROWS, nets[0]->w, nets[0]->h, nets[0]->c, nets[0]->truths,
                                   classes, 999);
        sdnn_step_stats st;
        GT_OK(sdnn_trainer_step(T, d, &st));
        free_data(d);
        const sdnn_exchange *x = sdnn_trainer_exchange(T);
        SOFT_ASSERT(x && sdnn_exchange_nbuckets(x) == p->nb, "the exchange has the plan's %d "
                    "buckets (%d)", p->nb, x ? sdnn_exchange_nbuckets(x) : -1);
        for (int b = 0; x && b < p->nb && b < sdnn_exchange_nbuckets(x); ++b) {
            int lo = -1, hi = -1;
            sdnn_exchange_bucket(x, b, &lo, &hi);
            SOFT_ASSERT(lo == p->b[b].lo && hi == p->b[b].hi,
                        "bucket %d: layers %d..%d in the exchange, %d..%d in the plan", b, lo, hi,
                        p->b[b].lo, p->b[b].hi);
        }
    }
    sdnn_trainer_destroy(T);
    int nccl = native_offered(nets, n, "nccl");
    SOFT_ASSERT(nccl == 2, "backend=nccl: fp16's and bf16's models carry the native allreduce "
                "(%d of 2): bucket_mb=auto would price the coded ring the engine does not run", nccl);
    for (int r = 0; r < n; ++r) sdnn_network_free(nets[r]);
    return gt_summary("autoplan_gpu");
}
