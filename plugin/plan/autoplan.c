/*
 * autoplan: see autoplan.h.  The accumulators are written by the replica
 * threads during a step and read here between steps, when the replicas
 * wait for the next one.
 *
 * Between processes every process must switch to the same buckets at the
 * same step, so every input of the planner is made the same everywhere
 * before it runs: the profile is averaged over the processes
 * (the agreement's mean, bit-identical on every rank), the measured link and
 * the codecs' rates are process 0's (agreed by the step before they reach
 * here, plugin/step/measure.c), and the drift check takes process 0's
 * verdict.  Nothing here calls a comm: the agreement is the step's
 * callbacks (sdnn_plan_agree).  The
 * planner is deterministic, so every process computes the same plan; process
 * 0's buckets are broadcast once more and compared, and a difference is an
 * error rather than a mismatched exchange.
 */
#include "autoplan.h"
#include "replicas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DRIFT_WINDOW = 10, MIN_STEPS_BETWEEN_PLANS = 20, MAX_CODECS = SDNN_PLAN_MAX_CODECS };

/* A re-plan replaces the running plan only when the new one's predicted
 * time to accuracy is below the running plan's, predicted from the same
 * new profile, by this fraction.  Both predictions share the profile's
 * errors; what is left is the model's error between two plans, and a
 * switch also costs a rebuilt exchange.  Issue 29's lab: at 100 Mbit/s
 * a re-plan moved from the mixed int8/top-k plan (measured 974-1194 ms a
 * step) to int8 on every bucket (1507-1672 ms) on a predicted difference
 * of a few percent, twice.  The same 5% as codec_gain_min. */
#define REPLAN_GAIN_MIN 0.05

struct sdnn_autoplan {
    sdnn_plan_agree agree;                  /* procs > 1: decisions are agreed through it */
    int procs;
    int nrep;
    int nlayers;
    int world;
    int overlap;
    double drift;
    int profile_iters;
    double compress_min_bytes;
    int fixed_codec;                        /* not compress=auto: one codec for all */
    double *prof;                           /* [nrep][3 x nlayers] */
    double *bytes;                          /* [nlayers] exchanged fp32 bytes */
    char (*types)[16];                      /* [nlayers] */
    sdnn_cm_env env;
    sdnn_codec_model models[MAX_CODECS];
    const sdnn_codec_ops *ops[MAX_CODECS];
    double factors[MAX_CODECS];             /* iteration factors (iter_factor=) */
    int state;                              /* 0 warm-up, 1 profiling, 2 planned */
    int steps;                              /* steps counted in this state */
    int since_plan;
    double window[DRIFT_WINDOW];
    int nwindow;
    sdnn_plan plan;
    int have_plan;
    int plans;
    int backoff;                            /* steps to wait before the next drift check */
    int settle;                             /* 1: the next step is the new plan's first */
    sdnn_bucket_spec *spec;
    sdnn_bucket_spec *prev;                 /* the plan before, to notice a repeat */
    int nprev;
    char note[320];                         /* the last re-plan that kept the running plan */
    int notes;                              /* such re-plans so far */
};

static void reset_prof(sdnn_autoplan *a)
{
    memset(a->prof, 0, (size_t)a->nrep * 3 * (size_t)a->nlayers * sizeof(double));
}

/* v[0..n) on every process = process 0's, through floats (process 0 keeps
 * the rounded values too, so every process holds the same numbers). */
static sdnn_status agree_rank0(sdnn_autoplan *a, double *v, size_t n)
{
    if (a->procs < 2 || n == 0) return SDNN_OK;
    float *f = malloc(n * sizeof *f);
    if (!f) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the planner's agreement");
    for (size_t i = 0; i < n; ++i) f[i] = (float)v[i];
    sdnn_status st = a->agree.broadcast(a->agree.ctx, f, n);
    if (st == SDNN_OK)
        for (size_t i = 0; i < n; ++i) v[i] = (double)f[i];
    free(f);
    return st;
}

int sdnn_autoplan_needs_link(const sdnn_config *cfg, int world)
{
    return !cfg->link[0] && !(cfg->link_gbps > 0) && world >= 2;
}

sdnn_status sdnn_autoplan_codec_names(const sdnn_config *cfg, char *buf, size_t len,
                                      const char **names, int *ef, int max, int *n)
{
    *n = 0;
    int any = strcmp(cfg->compress, "auto") == 0;
    snprintf(buf, len, "%s", any ? cfg->compress_allow : cfg->compress);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n >= max) return SDNN_ERROR(SDNN_ERR_INVALID, "too many codecs (at most %d)", max);
        names[*n] = tok;
        ef[*n] = any ? strcmp(tok, "topk") == 0 : cfg->error_feedback > 0;
        ++*n;
    }
    return SDNN_OK;
}

sdnn_status sdnn_autoplan_cfg_link(const sdnn_config *cfg, sdnn_link *out, int *named)
{
    *named = 0;
    if (cfg->link[0]) {
        SDNN_CHECK(sdnn_link_find(cfg->link, out));
    } else if (cfg->link_gbps > 0) {
        SDNN_CHECK(sdnn_link_custom(cfg->link_gbps / 8.0, cfg->link_us, out));
    } else {
        return SDNN_OK;
    }
    *named = 1;
    return SDNN_OK;
}

void sdnn_autoplan_describe_factors(const sdnn_config *cfg, char *buf, size_t len)
{
    char names[sizeof cfg->compress_allow + sizeof cfg->compress];
    const char *name[MAX_CODECS];
    int ef[MAX_CODECS], n = 0;
    if (len) buf[0] = '\0';
    if (sdnn_autoplan_codec_names(cfg, names, sizeof names, name, ef, MAX_CODECS, &n) != SDNN_OK)
        sdnn_clear_error();
    size_t at = 0;
    for (int i = 0; i < n && at < len; ++i) {
        int w = snprintf(buf + at, len - at, "%s%s %.3g", i ? ", " : "", name[i],
                         sdnn_iter_factor(cfg->iter_factor, name[i]));
        if (w < 0) break;
        at += (size_t)w;
    }
}

static sdnn_status setup_link(sdnn_autoplan *a, const sdnn_config *cfg,
                              const sdnn_plan_measured *m)
{
    int named = 0;
    SDNN_CHECK(sdnn_autoplan_cfg_link(cfg, &a->env.link, &named));
    if (named) return SDNN_OK;
    if (a->world < 2) {
        /* Nothing crosses a link: any link gives the same plan. */
        return sdnn_link_custom(1000.0, 0.0, &a->env.link);
    }
    if (!m || !m->have_link)
        return SDNN_ERROR(SDNN_ERR_INVALID, "planner: a world of %d ranks and no link= in the "
                          "cfg needs the step's measured link", a->world);
    a->env.link = m->link;
    return SDNN_OK;
}

sdnn_status sdnn_autoplan_create(const network *net, int nrep, int world, const sdnn_config *cfg,
                                 const sdnn_plan_measured *m, const sdnn_plan_agree *ag,
                                 sdnn_autoplan **out)
{
    *out = NULL;
    if (!m || m->ncodecs < 1 || m->ncodecs > MAX_CODECS)
        return SDNN_ERROR(SDNN_ERR_INVALID, "planner: the step measured %d codecs (1 to %d)",
                          m ? m->ncodecs : 0, MAX_CODECS);
    if (ag && ag->procs > 1 && (!ag->broadcast || !ag->mean))
        return SDNN_ERROR(SDNN_ERR_INVALID, "planner: %d processes and no agreement", ag->procs);
    sdnn_autoplan *a = calloc(1, sizeof *a);
    if (!a) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the planner");
    if (ag) a->agree = *ag;
    a->procs = ag && ag->procs > 1 ? ag->procs : 1;
    a->nrep = nrep;
    a->nlayers = net->n;
    a->world = world;
    a->overlap = cfg->overlap;
    a->drift = cfg->replan_drift;
    a->profile_iters = cfg->profile_iters;
    a->compress_min_bytes = cfg->compress_min_kb * 1024.0;
    a->prof = calloc((size_t)nrep * 3 * (size_t)net->n, sizeof *a->prof);
    a->bytes = calloc((size_t)net->n, sizeof *a->bytes);
    a->types = calloc((size_t)net->n, sizeof *a->types);
    a->spec = calloc((size_t)net->n + 1, sizeof *a->spec);
    a->prev = calloc((size_t)net->n + 1, sizeof *a->prev);
    a->backoff = MIN_STEPS_BETWEEN_PLANS;
    sdnn_status st = SDNN_OK;
    if (!a->prof || !a->bytes || !a->types || !a->spec || !a->prev) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the planner");
        goto fail;
    }
    int first = 0;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        size_t floats = 0;
        for (int j = 0; j < np; ++j) floats += p[j].n;
        a->bytes[i] = i < first ? 0.0 : 4.0 * (double)floats;
        snprintf(a->types[i], sizeof a->types[i], "%s", sdnn_layer_type_name(net->layers[i].type));
    }
    a->env.world = a->world;
    a->env.overlap = cfg->overlap;
    a->env.codecs = a->models;
    SDNN_CHECKGOTO(setup_link(a, cfg, m), st, fail);
    a->fixed_codec = strcmp(cfg->compress, "auto") != 0;
    for (int i = 0; i < m->ncodecs; ++i) {
        a->ops[i] = m->ops[i];
        a->models[i] = m->models[i];
        a->factors[i] = sdnn_iter_factor(cfg->iter_factor, m->models[i].name);
    }
    a->env.ncodecs = m->ncodecs;
    *out = a;
    return SDNN_OK;
fail:
    sdnn_autoplan_destroy(a);
    return st;
}

void sdnn_autoplan_destroy(sdnn_autoplan *a)
{
    if (!a) return;
    if (a->have_plan) sdnn_plan_free(&a->plan);
    free(a->prof);
    free(a->bytes);
    free(a->types);
    free(a->spec);
    free(a->prev);
    free(a);
}

double *sdnn_autoplan_prof(sdnn_autoplan *a, int r)
{
    return a->prof + (size_t)r * 3 * (size_t)a->nlayers;
}

const sdnn_plan *sdnn_autoplan_current(const sdnn_autoplan *a)
{
    return a->have_plan ? &a->plan : NULL;
}

int sdnn_autoplan_count(const sdnn_autoplan *a) { return a->plans; }

int sdnn_autoplan_profiling(const sdnn_autoplan *a) { return a->state != 2; }

/* The per-layer costs of one replica and one mini-batch, averaged over the
 * replicas and the profiled steps, then scaled so that they add up to the
 * slowest replica's: a step waits for the last replica (on shared cores the
 * replicas do not run at the same speed). */
static sdnn_status make_profile(sdnn_autoplan *a, const network *net, sdnn_cost_profile *p)
{
    SDNN_CHECK(sdnn_cost_profile_alloc(a->nlayers, p));
    p->batch = net->batch;
    p->subdivisions = net->subdivisions > 0 ? net->subdivisions : 1;
    double sum = 0, slowest = 0;
    for (int r = 0; r < a->nrep; ++r) {
        const double *x = sdnn_autoplan_prof(a, r);
        double tr = 0;
        for (int i = 0; i < 3 * a->nlayers; ++i) tr += x[i];
        sum += tr;
        if (tr > slowest) slowest = tr;
    }
    double imbalance = sum > 0 ? slowest * a->nrep / sum : 1.0;
    double per_fb = imbalance / ((double)a->nrep * a->steps * p->subdivisions);
    double per_u = imbalance / ((double)a->nrep * a->steps);
    for (int i = 0; i < a->nlayers; ++i) {
        sdnn_layer_cost *l = &p->layer[i];
        double f = 0, b = 0, u = 0;
        for (int r = 0; r < a->nrep; ++r) {
            const double *x = sdnn_autoplan_prof(a, r) + 3 * i;
            f += x[0];
            b += x[1];
            u += x[2];
        }
        l->fwd_s = f * per_fb;
        l->bwd_s = b * per_fb;
        l->upd_s = u * per_u;
        l->bytes = a->bytes[i];
        l->tensors = a->bytes[i] > 0;
        snprintf(l->type, sizeof l->type, "%s", a->types[i]);
    }
    if (a->procs < 2) return SDNN_OK;
    /* The world's profile: the mean over the processes, the same bits on
     * every one. */
    const size_t n = 3 * (size_t)a->nlayers;
    float *v = malloc(n * sizeof *v);
    if (!v) {
        sdnn_cost_profile_free(p);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the planner's agreement");
    }
    for (int i = 0; i < a->nlayers; ++i) {
        v[3 * i] = (float)p->layer[i].fwd_s;
        v[3 * i + 1] = (float)p->layer[i].bwd_s;
        v[3 * i + 2] = (float)p->layer[i].upd_s;
    }
    sdnn_status st = a->agree.mean(a->agree.ctx, v, n);
    for (int i = 0; st == SDNN_OK && i < a->nlayers; ++i) {
        p->layer[i].fwd_s = v[3 * i];
        p->layer[i].bwd_s = v[3 * i + 1];
        p->layer[i].upd_s = v[3 * i + 2];
    }
    free(v);
    if (st != SDNN_OK) sdnn_cost_profile_free(p);
    return st;
}

/* Process 0's buckets against ours: the same inputs must give the same
 * plan; anything else would exchange mismatched buffers. */
static sdnn_status check_same_plan(sdnn_autoplan *a, const sdnn_plan *pl)
{
    if (a->procs < 2) return SDNN_OK;
    const size_t n = 1 + 3 * ((size_t)a->nlayers + 1);
    double *v = calloc(n, sizeof *v), *mine = calloc(n, sizeof *mine);
    if (!v || !mine) {
        free(v);
        free(mine);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the planner's agreement");
    }
    mine[0] = pl->nb;
    for (int k = 0; k < pl->nb && k <= a->nlayers; ++k) {
        mine[1 + 3 * k] = pl->b[k].lo;
        mine[2 + 3 * k] = pl->b[k].hi;
        mine[3 + 3 * k] = pl->b[k].codec;
    }
    memcpy(v, mine, n * sizeof *v);
    sdnn_status st = agree_rank0(a, v, n);
    if (st == SDNN_OK && memcmp(v, mine, n * sizeof *v) != 0)
        st = SDNN_ERROR(SDNN_ERR_COMM,
                        "rank %d planned other buckets than rank 0 from the same profile, link "
                        "and codec rates (%d buckets, rank 0: %d); the exchange would mismatch",
                        a->agree.rank, pl->nb, (int)v[0]);
    free(v);
    free(mine);
    return st;
}

/* A re-plan: the running plan's buckets predicted from the new profile
 * replace *pl unless *pl's time to accuracy is REPLAN_GAIN_MIN below
 * theirs (then the caller sees the same buckets again and backs off);
 * a->note says so. */
static sdnn_status keep_unless_better(sdnn_autoplan *a, const sdnn_cost_profile *p,
                                      sdnn_plan *pl)
{
    int nb = a->plan.nb;
    sdnn_cm_bucket *b = calloc((size_t)(nb ? nb : 1), sizeof *b);
    if (!b) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the running plan's buckets");
    for (int k = 0; k < nb; ++k) {
        b[k].lo = a->plan.b[k].lo;
        b[k].hi = a->plan.b[k].hi;
        b[k].codec = a->plan.b[k].codec;
    }
    sdnn_plan cur;
    SDNN_CHECK(sdnn_plan_from_buckets(p, &a->env, b, nb, &cur));
    sdnn_plan_set_factor(&cur, a->factors);
    double t_new = pl->pred.step_s * pl->iter_factor, t_cur = cur.pred.step_s * cur.iter_factor;
    if (sdnn_plan_worth_switching(&cur, pl, REPLAN_GAIN_MIN)) {
        sdnn_plan_free(&cur);
        return SDNN_OK;
    }
    int same = pl->nb == cur.nb;
    for (int k = 0; same && k < nb; ++k)
        same = pl->b[k].lo == cur.b[k].lo && pl->b[k].hi == cur.b[k].hi &&
               pl->b[k].codec == cur.b[k].codec;
    if (!same) {
        a->notes++;
        snprintf(a->note, sizeof a->note,
                 "scalednn: re-plan %d kept the running plan: the new plan's predicted time to "
                 "accuracy N x %.3f ms is not %.0f%% below the running plan's N x %.3f ms "
                 "(step %.3f ms, factor %.3g), both from the new profile\n",
                 a->plans, t_new * 1e3, REPLAN_GAIN_MIN * 100, t_cur * 1e3,
                 cur.pred.step_s * 1e3, cur.iter_factor);
    }
    sdnn_plan_free(pl);
    *pl = cur;
    return SDNN_OK;
}

static sdnn_status make_plan(sdnn_autoplan *a, const network *net)
{
    sdnn_cost_profile p;
    SDNN_CHECK(make_profile(a, net, &p));
    sdnn_plan_opts o = SDNN_PLAN_OPTS_INIT;
    if (!a->fixed_codec) o.compress_min_bytes = a->compress_min_bytes;
    /* time to accuracy: step x the plan's iteration factor (plan.h) */
    o.iter_factor = a->factors;
    sdnn_plan pl;
    sdnn_status st = sdnn_plan_auto(&p, &a->env, &o, &pl);
    if (st == SDNN_OK && a->have_plan) {
        st = keep_unless_better(a, &p, &pl);
        if (st != SDNN_OK) sdnn_plan_free(&pl);
    }
    sdnn_cost_profile_free(&p);
    if (st != SDNN_OK) return st;
    st = check_same_plan(a, &pl);
    if (st != SDNN_OK) {
        sdnn_plan_free(&pl);
        return st;
    }
    if (a->have_plan) {
        a->nprev = a->plan.nb;
        memcpy(a->prev, a->spec, (size_t)a->nprev * sizeof *a->prev);
        sdnn_plan_free(&a->plan);
    }
    a->plan = pl;
    a->have_plan = 1;
    a->plans++;
    for (int k = 0; k < pl.nb; ++k) {
        a->spec[k].lo = pl.b[k].lo;
        a->spec[k].hi = pl.b[k].hi;
        a->spec[k].codec = a->ops[pl.b[k].codec];
        /* A codec the user chose applies from compress_min_kb up, as with
         * fixed buckets. */
        if (a->fixed_codec && pl.b[k].bytes < a->compress_min_bytes)
            a->spec[k].codec = &sdnn_codec_none;
    }
    return SDNN_OK;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

sdnn_status sdnn_autoplan_after_step(sdnn_autoplan *a, const network *net, double step_s,
                                     int ok, const sdnn_bucket_spec **spec, int *n, int *ready)
{
    *ready = 0;
    if (!ok) return SDNN_OK;
    a->steps++;
    if (a->state == 0) {            /* warm-up: caches, first allocations */
        reset_prof(a);
        a->state = 1;
        a->steps = 0;
        return SDNN_OK;
    }
    if (a->state == 1) {
        if (a->steps < a->profile_iters) return SDNN_OK;
        sdnn_status st = make_plan(a, net);
        reset_prof(a);
        a->state = 2;
        a->steps = 0;
        a->since_plan = 0;
        a->nwindow = 0;
        /* A failed collective ends training; a plan the model could not
         * make keeps the buckets in force (the same on every process: the
         * inputs were agreed). */
        if (st == SDNN_ERR_COMM || st == SDNN_ERR_ABORTED || st == SDNN_ERR_NOMEM) return st;
        if (st != SDNN_OK) return SDNN_OK;
        /* The model cannot explain the drift (e.g. more replicas than
         * cores): the same plan again means wait longer before the next
         * check. */
        if (a->plans > 1 && a->nprev == a->plan.nb &&
            memcmp(a->prev, a->spec, (size_t)a->nprev * sizeof *a->prev) == 0) {
            a->backoff *= 2;
            return SDNN_OK;
        }
        *spec = a->spec;
        *n = a->plan.nb;
        *ready = 1;
        a->settle = 1;
        return SDNN_OK;
    }
    /* Planned: watch the drift.  The accumulators keep running, so a
     * re-plan profiles the next profile_iters steps afresh. */
    reset_prof(a);
    a->steps = 0;
    if (a->settle) {
        /* The new exchange's first step (its buffers' first touch, the
         * switch from no overlap) is no steady state: not in the window. */
        a->settle = 0;
        return SDNN_OK;
    }
    a->since_plan++;
    a->window[a->nwindow++ % DRIFT_WINDOW] = step_s;
    if (a->nwindow < DRIFT_WINDOW || a->since_plan < a->backoff) return SDNN_OK;
    /* Between processes the check runs once per window, on process 0's
     * verdict (every process counts the same steps, so all get here at
     * the same one). */
    if (a->procs > 1 && a->nwindow % DRIFT_WINDOW != 0) return SDNN_OK;
    double w[DRIFT_WINDOW];
    memcpy(w, a->window, sizeof w);
    qsort(w, DRIFT_WINDOW, sizeof w[0], cmp_double);
    double med = 0.5 * (w[DRIFT_WINDOW / 2 - 1] + w[DRIFT_WINDOW / 2]);
    double pred = a->plan.pred.step_s;
    double drifted = pred > 0 && fabs(med - pred) / pred > a->drift;
    SDNN_CHECK(agree_rank0(a, &drifted, 1));
    if (drifted != 0) {
        a->state = 1;                /* profile again, then plan */
        a->steps = 0;
    }
    return SDNN_OK;
}

void sdnn_autoplan_print_note(const sdnn_autoplan *a, int *seen, FILE *f)
{
    if (!a || a->notes == *seen) return;
    fputs(a->note, f);
    *seen = a->notes;
}

void sdnn_autoplan_print(const sdnn_autoplan *a, FILE *f)
{
    if (!a->have_plan) return;
    fprintf(f, "scalednn: plan %d (bucket_mb=auto), link %s: alpha %.1f us, beta %.2f GB/s, "
               "world %d\n", a->plans, a->env.link.name, a->env.link.alpha_s * 1e6,
            a->env.link.beta_Bps / 1e9, a->env.world);
    sdnn_plan_print(f, &a->plan, &a->env);
    sdnn_plan_print_prediction(f, "predicted", &a->plan);
    sdnn_plan_print_wire(f, "predicted", &a->plan, &a->env);
    char fl[256];
    sdnn_plan_describe_factors(&a->env, a->factors, fl, sizeof fl);
    fprintf(f, "scalednn: iteration factors (iterations to the target against none's; "
               "iter_factor= overrides): %s\n", fl);
    sdnn_plan_print_tta(f, "predicted", &a->plan, &a->env, a->factors);
    if (a->fixed_codec) return;
    /* What compress=auto became: each chosen codec with its buckets and
     * bytes, in the order of compress_allow. */
    char chose[256];
    size_t at = 0;
    chose[0] = '\0';
    for (int c = 0; c < a->env.ncodecs && at + 1 < sizeof chose; ++c) {
        int nb = 0;
        double bytes = 0;
        for (int k = 0; k < a->plan.nb; ++k)
            if (a->plan.b[k].codec == c) {
                nb++;
                bytes += a->plan.b[k].bytes;
            }
        if (!nb) continue;
        int w = snprintf(chose + at, sizeof chose - at, "%s%s for %d bucket%s (%.1f MB)",
                         at ? ", " : "", a->env.codecs[c].name, nb, nb == 1 ? "" : "s",
                         bytes / 1e6);
        if (w < 0) break;
        at += (size_t)w < sizeof chose - at ? (size_t)w : sizeof chose - at - 1;
    }
    fprintf(f, "scalednn: compress=auto chose %s\n", at ? chose : "nothing (no buckets)");
}
