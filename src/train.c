/* train.c: the training loop behind `divtrace record`: data -> graph ->
 * executor on a backend, the tracer hook after every op, per-step summaries,
 * checkpoints and the non-finite watch. */
#include "train.h"

#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "data.h"
#include "exec.h"
#include "graph.h"
#include "hash.h"
#include "fault.h"
#include "progress.h"
#include "run.h"
#include "tracer.h"
#include "util.h"

void train_config_defaults(struct train_config *tc)
{
    memset(tc, 0, sizeof *tc);
    tc->model.name = "autoencoder";
    tc->layers = "784,128,32,128,784";
    tc->model.act = MODEL_ACT_SIGMOID;
    tc->model.batch = 100;
    tc->optimizer = "sgd";
    tc->lr = NAN;
    tc->momentum = 0.0;
    tc->b1 = 0.9;
    tc->b2 = 0.999;
    tc->eps = 1e-8;
    tc->steps = 5000;
    tc->seed = 1;
    tc->init_scale = 1.0;
    tc->backend = "cpu";
    tc->threads = 1;
    /* DIVTRACE_DATA, when set, replaces the default directory of --data */
    const char *data = getenv("DIVTRACE_DATA");
    tc->data_dir = data && *data ? data : "/usr/share/datasets/fashion-mnist";
    tc->level = TRACE_LEVEL_OP;
}

/* The presets: the two regimes the study is about (see divtrace-record(1)). */
static const struct {
    const char *name, *optimizer;
    double lr;
} train_presets[] = {
    {"sgd-plateau", "sgd", 3.0},     /* long mean-image plateau, one escape */
    {"adam-shoulder", "adam", 3e-4}, /* short plateau, then a second shoulder */
};

int train_apply_preset(struct train_config *tc, const char *name)
{
    for (size_t i = 0; i < sizeof train_presets / sizeof train_presets[0]; i++)
        if (strcmp(name, train_presets[i].name) == 0) {
            tc->optimizer = train_presets[i].optimizer;
            tc->optimizer_given = 1;
            tc->lr = train_presets[i].lr;
            return DT_OK;
        }
    dt_error_set("--preset '%s': expected sgd-plateau or adam-shoulder", name);
    return DT_ERR;
}

/* prednet's options into tc->model, with its defaults */
static int train_finish_prednet(struct train_config *tc)
{
    struct model_spec *m = &tc->model;
    if (tc->protocol) {
        /* the 2021 study: 5000 frames as 250 batches of one 20-frame sequence */
        if ((tc->steps_given && tc->steps != 250) || (tc->batch_given && m->batch != 1) ||
            (m->nt && m->nt != 20)) {
            dt_error_set("--protocol paper fixes --steps 250, --batch 1 and --nt 20");
            return DT_ERR;
        }
        tc->steps = 250;
        m->batch = 1;
        m->nt = 20;
    }
    if (!tc->optimizer_given)
        tc->optimizer = "adam";
    if (isnan(tc->lr) && strcmp(tc->optimizer, "adam") == 0)
        tc->lr = 1e-3;
    if (!tc->batch_given && !tc->protocol)
        m->batch = 4;
    if (!tc->steps_given && !tc->protocol)
        tc->steps = 1000;
    if (m->nt == 0)
        m->nt = 20;
    if (!tc->stack)
        tc->stack = "1,16,32,64";
    if (model_parse_u32_list("--stack", tc->stack, m->stack, &m->nstack) < 0)
        return DT_ERR;
    int n;
    if (!tc->r_stack)
        tc->r_stack = tc->stack;
    if (model_parse_u32_list("--r-stack", tc->r_stack, m->rstack, &n) < 0)
        return DT_ERR;
    if (n != m->nstack) {
        dt_error_set("--r-stack '%s' has %d entries, --stack '%s' %d", tc->r_stack, n, tc->stack,
                     m->nstack);
        return DT_ERR;
    }
    if (!tc->layer_weights) {
        static char lw[2 * MODEL_MAX_LAYERS + 1];
        size_t len = 0;
        for (int l = 0; l < m->nstack; l++)
            len += (size_t)snprintf(lw + len, sizeof lw - len, "%s%d", l ? "," : "", l == 0);
        tc->layer_weights = lw;
    }
    if (model_parse_weights("--layer-weights", tc->layer_weights, m->layer_weights, &n) < 0)
        return DT_ERR;
    if (n != m->nstack) {
        dt_error_set("--layer-weights '%s' has %d entries for %d layers", tc->layer_weights, n,
                     m->nstack);
        return DT_ERR;
    }
    if (!tc->size)
        tc->size = "64x64";
    if (model_parse_size(tc->size, &m->height, &m->width) < 0)
        return DT_ERR;
    m->pixel_max = 1.0f;
    if (!tc->npy_layout)
        tc->npy_layout = "tnhw";
    if (strcmp(tc->npy_layout, "tnhw") != 0 && strcmp(tc->npy_layout, "nthw") != 0) {
        dt_error_set("--npy-layout '%s': expected tnhw or nthw", tc->npy_layout);
        return DT_ERR;
    }
    return prednet_check(m);
}

int train_finish_config(struct train_config *tc)
{
    int prednet = strcmp(tc->model.name, "prednet") == 0;
    if (!prednet && (tc->stack || tc->r_stack || tc->size || tc->layer_weights || tc->video ||
                     tc->protocol || tc->model.nt || tc->npy_layout)) {
        dt_error_set("--stack, --r-stack, --size, --nt, --layer-weights, --video, --npy-layout "
                     "and --protocol apply to --model prednet only");
        return DT_ERR;
    }
    if (prednet && tc->layers_given) {
        dt_error_set("--layers and --act apply to --model autoencoder only");
        return DT_ERR;
    }
    if (prednet && train_finish_prednet(tc) < 0)
        return DT_ERR;
    int gpu = strcmp(tc->backend, "cuda") == 0 || strcmp(tc->backend, "cudnn") == 0;
    if (!gpu && (tc->reduce || tc->device || tc->graph_given || tc->streams)) {
        dt_error_set("--reduce, --device, --cuda-graph and --streams apply to --backend cuda and cudnn only");
        return DT_ERR;
    }
    if (tc->cudnn_algo && strcmp(tc->backend, "cudnn") != 0) {
        dt_error_set("--cudnn-algo applies to --backend cudnn only");
        return DT_ERR;
    }
    int adam = strcmp(tc->optimizer, "adam") == 0;
    if (isnan(tc->lr))
        tc->lr = adam ? 3e-4 : 3.0;
    if (adam && tc->momentum != 0.0) {
        dt_error_set("--momentum applies to --optimizer sgd only");
        return DT_ERR;
    }
    return DT_OK;
}

const char *train_preset_name(const struct train_config *tc)
{
    for (size_t i = 0; i < sizeof train_presets / sizeof train_presets[0]; i++)
        if (strcmp(tc->optimizer, train_presets[i].optimizer) == 0 && tc->lr == train_presets[i].lr &&
            tc->momentum == 0.0)
            return train_presets[i].name;
    return "none";
}

uint64_t train_default_ckpt_every(uint64_t steps, uint64_t ckpt_bytes)
{
    /* The smallest round interval of at least 10 steps (a replay redoes at
     * most that many; a checkpoint per step costs a model a step), with at
     * most 100 intervals in the run, whose checkpoints take at most 150 MB
     * before compression (divtrace-record(1), Checkpoints). */
    static const uint64_t nice[] = {10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500,
                                    5000, 10000, 20000, 25000, 50000, 100000, 200000, 250000,
                                    500000, 1000000};
    const double budget = 150e6;
    for (size_t i = 0; i < sizeof nice / sizeof nice[0]; i++)
        if (steps / nice[i] <= 100 && (double)(steps / nice[i] + 2) * (double)ckpt_bytes <= budget)
            return nice[i];
    return steps > 10 ? steps : 10;
}

/* ---- helpers of train_run ---- */

struct train_state {
    const struct train_config *tc;
    struct run r;
    struct run r2;             /* mpfr self-check: the same run at twice the precision */
    int twin;
    int pipe;                  /* a step's records are made while the next step runs */
    int overlap;               /* step s + 1 is queued before step s's loss is read (run_overlap) */
    double ring[50];           /* the last 50 losses */
    struct trace_writer *w;
    struct trace_config cfg;
    uint64_t ckpt_every;
    struct progress prog;      /* tc->progress: the step, the loss, the rate */
};

static int train_ckpt(struct train_state *s, uint64_t step)
{
    struct trace_ckpt c;
    run_ckpt_take(&s->r, step, &c);
    int rc = trace_writer_ckpt(s->w, &c);
    run_ckpt_release(&c);
    return rc;
}

static void train_flip(struct train_state *s, struct run *r)
{
    const struct train_config *tc = s->tc;
    int i = graph_find(&r->g, tc->flip_tensor);
    exec_get(&r->e, i, r->host);
    uint32_t u;
    memcpy(&u, &r->host[tc->flip_index], sizeof u);
    u ^= 1u << tc->flip_bit;
    memcpy(&r->host[tc->flip_index], &u, sizeof u);
    exec_set(&r->e, i, r->host);
}

static int train_check_flip(const struct train_state *s)
{
    const struct train_config *tc = s->tc;
    const struct graph *g = &s->r.g;
    int i = graph_find(g, tc->flip_tensor);
    if (i < 0 || g->nodes[i].next < 0) {
        dt_error_set("--flip-bit: '%s' is not a parameter or optimizer state of this model",
                     tc->flip_tensor);
        return DT_ERR;
    }
    if (tc->flip_index >= g->nodes[i].count || tc->flip_bit < 0 || tc->flip_bit > 31) {
        dt_error_set("--flip-bit: element %" PRIu64 " bit %d is outside %s (%zu elements, bits 0-31)",
                     tc->flip_index, tc->flip_bit, tc->flip_tensor, g->nodes[i].count);
        return DT_ERR;
    }
    if (tc->flip_step >= tc->steps) {
        dt_error_set("--flip-bit: step %" PRIu64 " is past the last step %" PRIu64, tc->flip_step,
                     tc->steps ? tc->steps - 1 : 0);
        return DT_ERR;
    }
    return DT_OK;
}

/* Build everything that can fail on bad input before the output is touched. */
static int train_setup(struct train_state *s)
{
    const struct train_config *tc = s->tc;
    if (run_open(&s->r, tc, 0, !tc->notrace) < 0)
        return DT_ERR;
    if (tc->flip_set && train_check_flip(s) < 0)
        return DT_ERR;
    if (tc->inject && fault_install(&s->r, tc->inject) < 0)
        return DT_ERR;
    if (strcmp(tc->backend, "mpfr") == 0 && !tc->no_self_check) {
        long p = tc->precision ? tc->precision : 128;
        if (run_open(&s->r2, tc, 2 * p, 1) < 0)
            return DT_ERR;
        if (tc->inject && fault_install(&s->r2, tc->inject) < 0)
            return DT_ERR;
        s->twin = 1;
    }
    /* Pipelined (a GPU backend running the step as a graph, or the cpu
     * backend's tracer with a core beside the training thread and op
     * outputs of at most 256 MiB): a step's records are made while the
     * next step runs, and its summary is written once the next step is
     * under way. Not with the mpfr self-check, nor with
     * --stop-on-nonfinite (the step after the one that made a NaN would
     * already have run). Before run_describe: a GPU backend's header says
     * so. */
    s->pipe = !tc->notrace && !s->twin && !tc->stop_on_nonfinite && tracer_defer(s->r.tr);
    if (s->pipe && exec_double(&s->r.e) < 0)
        return DT_ERR;
#ifdef DT_PROFILE_STEP
    else if (getenv("DT_PROFILE_DOUBLE")) /* two arrangements, untraced: what they cost alone */
        exec_double(&s->r.e);
#endif
    /* Step s + 1 is queued before step s's loss is waited for, so that a
     * GPU does not wait for the host between the steps (the cpu's steps
     * run the same loop, its fences empty). Not where
     * the host acts on a step before the next one may run: the self-check,
     * faults, --stop-on-nonfinite, a tracer that waits for each step's
     * records; nor before a checkpoint or a flip (train_run). */
    s->overlap = !s->twin && !tc->inject && !tc->stop_on_nonfinite && !tc->step_wait &&
                 (tc->notrace || s->pipe);
    if (s->overlap)
        s->overlap = run_overlap(&s->r);
    s->ckpt_every = tc->ckpt_every ? tc->ckpt_every
                                   : train_default_ckpt_every(tc->steps, run_ckpt_bytes(&s->r));
    run_describe(&s->r, &s->cfg, s->ckpt_every);
    const char *fixed = trace_config_get(&s->cfg, "reduce_fixed");
    if (fixed && !tc->quiet) { /* "N: names" */
        const char *names = strstr(fixed, ": ");
        fprintf(stderr,
                "divtrace record: --reduce atomic cannot vary %.*s sum%s of at most two terms (%s): "
                "any order gives the same bits\n",
                names ? (int)(names - fixed) : 0, fixed, strncmp(fixed, "1:", 2) == 0 ? "" : "s",
                names ? names + 2 : fixed);
    }
    return DT_OK;
}

static void train_teardown(struct train_state *s)
{
    run_close(&s->r);
    if (s->twin)
        run_close(&s->r2);
    trace_config_free(&s->cfg);
}

/* Steps done (step + 1) of tc->steps, the loss and the rate; final: the
 * last line, whether due or not. */
static void train_progress(struct train_state *s, uint64_t step, double loss, int final)
{
    struct progress *p = &s->prog;
    if (!final && !progress_due(p))
        return;
    double el = progress_elapsed(p);
    double rate = (double)(step + 1) / (el > 1e-9 ? el : 1e-9);
    if (final)
        progress_end(p, "%" PRIu64 " steps in %.1f s, loss %.6f, %.0f steps/s", step + 1, el, loss, rate);
    else
        progress_show(p, "step %" PRIu64 "/%" PRIu64 ", loss %.6f, %.0f steps/s, %.0f s", step + 1,
                      s->tc->steps, loss, rate, el);
}

/* At most this many carry events go into a trace (one a step): a state
 * fault repeated every step would otherwise add one for each. The records
 * of the leaves and updates still show every one (divtrace-trace(5)). */
#define TRAIN_CARRY_EVENTS 64

/* The carry faults of step `step`: leaves that began the step with other
 * bits than their update wrote in the step before. The first such step is
 * reported on stderr; each is an event in the trace, up to
 * TRAIN_CARRY_EVENTS. */
static int train_carry(struct train_state *s, struct train_result *res, uint64_t step)
{
    struct run *r = &s->r;
    const int *leaves;
    int n = tracer_carry(r->tr, step, &leaves);
    if (n == 0)
        return DT_OK;
    if (res->carry_steps++ == 0)
        res->carry_first = step;
    if (res->carry_steps > TRAIN_CARRY_EVENTS)
        return DT_OK;
    const struct node *nd = &r->g.nodes[leaves[0]];
    char text[512];
    size_t len = (size_t)snprintf(text, sizeof text, "step %" PRIu64 ": carry fault: %s is not what %s "
                                  "wrote in step %" PRIu64, step, nd->name,
                                  r->g.nodes[nd->next].name, step - 1);
    for (int k = 1; k < n && k < 4 && len < sizeof text; k++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s", k == 1 ? "; also " : ", ",
                                r->g.nodes[leaves[k]].name);
    if (n > 4 && len < sizeof text)
        snprintf(text + len, sizeof text - len, " and %d more", n - 4);
    if (res->carry_steps == 1) {
        progress_clear(&s->prog);
        fprintf(stderr, "divtrace record: %s (changed between the steps)\n", text);
    }
    if (res->carry_steps == TRAIN_CARRY_EVENTS)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 " (the last carry event stored; the records show any later ones)");
    struct trace_event ev = {TRACE_EVENT_CARRY, step, (uint32_t)leaves[0], text};
    if (s->w && trace_writer_event(s->w, &ev) < 0)
        return DT_ERR;
    return DT_OK;
}

/* Step `step`'s summary into the trace, once its records are final, and
 * the watch for the first op that made a non-finite value: its message
 * and event; *stop set when --stop-on-nonfinite ends the run there. */
static int train_out(struct train_state *s, struct train_result *res, uint64_t step, double loss,
                     struct trace_oprec *keep, uint64_t *hashes, int *stop)
{
    const struct train_config *tc = s->tc;
    struct run *r = &s->r;
    if (s->w) {
        struct trace_step ts;
        run_summarize(r, step, loss, tc->level, keep, hashes, &ts);
        if (trace_writer_step_async(s->w, &ts) < 0)
            return DT_ERR;
    }
    if (train_carry(s, res, step) < 0)
        return DT_ERR;
    uint64_t nf_step;
    int nf = tracer_nonfinite(r->tr, &nf_step);
    if (nf < 0 || nf_step != step)
        return DT_OK;
    const struct node *nd = &r->g.nodes[nf];
    const struct trace_oprec *rec = &tracer_records_of(r->tr, step)[nf];
    char text[512];
    snprintf(text, sizeof text,
             "step %" PRIu64 ": op %d %s (%s) produced %" PRIu64 " NaN and %" PRIu64 " Inf from finite inputs",
             step, nf, nd->name, op_type_name(nd->type), rec->nan, rec->inf);
    progress_clear(&s->prog);
    fprintf(stderr, "divtrace record: non-finite values: %s\n", text);
    res->nonfinite = 1;
    struct trace_event ev = {TRACE_EVENT_NONFINITE, step, (uint32_t)nf, text};
    if (s->w && trace_writer_event(s->w, &ev) < 0)
        return DT_ERR;
    if (tc->stop_on_nonfinite) {
        snprintf(text, sizeof text, "stopped after step %" PRIu64 " (--stop-on-nonfinite)", step);
        struct trace_event st = {TRACE_EVENT_STOPPED, step, UINT32_MAX, text};
        if (s->w && trace_writer_event(s->w, &st) < 0)
            return DT_ERR;
        *stop = 1;
    }
    return DT_OK;
}

/* Step `step`'s loss, once read: the last 50, the final one, the watch. */
static void train_account(struct train_state *s, struct train_result *res, uint64_t step, double loss)
{
    s->ring[step % 50] = loss;
    res->final_loss = loss;
    if (!isfinite(loss))
        res->nonfinite = 1;
}

int train_run(const struct train_config *tc, struct train_result *res)
{
    struct train_state s;
    memset(&s, 0, sizeof s);
    s.tc = tc;
    memset(res, 0, sizeof *res);
    int rc = DT_ERR;
    struct run *r = &s.r;
    struct trace_oprec *keeps[2] = {NULL, NULL}, *keep = NULL;
    uint64_t *hashes = NULL;
    struct trace_opdef *ops = NULL;
    if (train_setup(&s) < 0)
        goto out;
    /* two: the writer's thread may still read last step's while this
     * step's is made */
    for (int k = 0; k < 2; k++)
        keeps[k] = dt_calloc((size_t)r->g.n, sizeof *keeps[k]);
    keep = keeps[0];
    hashes = dt_calloc((size_t)r->g.n, sizeof *hashes);
    if (!tc->notrace) {
        if (trace_writer_open(&s.w, tc->out, &s.cfg, tc->level) < 0)
            goto out;
        ops = graph_opdefs(&r->g);
        if (trace_writer_ops(s.w, ops, (uint32_t)r->g.n) < 0)
            goto out;
    }

    /* a step whose summary waits for its records, or for its loss too
     * (pend_read 0: overlapped, read once the next step is queued) */
    uint64_t pend = UINT64_MAX;
    double pend_loss = 0;
    int pend_read = 1;

    double t0 = dt_now(), c0 = dt_cpu_now();
    progress_init(&s.prog, (enum progress_mode)tc->progress, "divtrace record");
    int stopped = 0;
    uint64_t step;
    double t2 = NAN;
    for (step = 0; step < tc->steps; step++) {
        if (step == 3) {
            if (r->be->sync)
                r->be->sync(r->ctx);
            t2 = dt_now();
        }
        keep = keeps[step & 1];
#ifdef DT_PROFILE_STEP
        dt_prof_on = step >= 3;
#endif
        DT_PROF_MARK(tb);
        run_step_begin(r, step);
        DT_PROF_ADD(DT_PROF_BEGIN, tb);
        /* A fault lands before the checkpoint: it is the state this step runs on. */
        fault_between(r, step);
        if (s.twin)
            fault_between(&s.r2, step);
        if (tc->flip_set && step == tc->flip_step) {
            tracer_flush(r->tr); /* last step's records may still read the leaf */
            train_flip(&s, r);
            if (s.twin)
                train_flip(&s, &s.r2);
        }
        if (s.w && step % s.ckpt_every == 0) {
            if (pend != UINT64_MAX) { /* the trace keeps its order: step, then checkpoint */
                DT_ASSERT(pend_read, "step %" PRIu64 " overlapped before a checkpoint", pend);
                tracer_flush(r->tr);
                if (train_out(&s, res, pend, pend_loss, keeps[pend & 1], hashes, &stopped) < 0)
                    goto out;
                pend = UINT64_MAX;
            }
            if (train_ckpt(&s, step) < 0)
                goto out;
        }
        uint64_t next = step + 1 < tc->steps ? step + 1 : UINT64_MAX;
        run_step_exec(r, step, next);
        if (pend != UINT64_MAX) {
            if (!pend_read) {
                DT_PROF_MARK(tp);
                pend_loss = run_loss(r, pend);
                DT_PROF_ADD(DT_PROF_LOSS, tp);
                train_account(&s, res, pend, pend_loss);
            }
            DT_PROF_MARK(to);
            /* its records were taken before this step asked for its own */
            if (tracer_done(r->tr) < (int64_t)pend)
                tracer_flush(r->tr);
            if (train_out(&s, res, pend, pend_loss, keeps[pend & 1], hashes, &stopped) < 0)
                goto out;
            DT_PROF_ADD(DT_PROF_OUT, to);
            if (!pend_read)
                train_progress(&s, pend, pend_loss, 0);
            pend = UINT64_MAX;
            pend_read = 1;
        }
        if (s.overlap && next != UINT64_MAX && !(s.w && next % s.ckpt_every == 0) &&
            !(tc->flip_set && next == tc->flip_step)) {
            /* this step's loss and summary come once the next one is queued */
            pend = step;
            pend_read = 0;
            exec_advance(&r->e);
            continue;
        }
        DT_PROF_MARK(tl);
        double loss = run_loss(r, step);
        DT_PROF_ADD(DT_PROF_LOSS, tl);
        DT_PROF_MARK(tz);
        if (s.twin) {
            /* the same step at twice the precision: equal float32 results? */
            run_step_begin(&s.r2, step);
            run_step_exec(&s.r2, step, next);
            struct trace_step a, b;
            run_summarize(r, step, loss, TRACE_LEVEL_STEP, keep, hashes, &a);
            run_summarize(&s.r2, step, run_loss(&s.r2, step), TRACE_LEVEL_STEP, keep, hashes, &b);
            if (a.root == b.root && res->self_agree == step)
                res->self_agree = step + 1;
            exec_advance(&s.r2.e);
        }
        train_account(&s, res, step, loss);
        if (s.pipe && tracer_done(r->tr) < (int64_t)step) {
            pend = step;
            pend_loss = loss;
        } else {
            if (train_out(&s, res, step, loss, keep, hashes, &stopped) < 0)
                goto out;
            if (stopped) {
                step++;
                break;
            }
        }
        exec_advance(&r->e);
        DT_PROF_ADD(DT_PROF_REST, tz);
        train_progress(&s, step, loss, 0);
    }
#ifdef DT_PROFILE_STEP
    if (step > 3) {
        static const char *const names[DT_PROF_N] = {"begin", "exec", "(flush)", "(launch)", "prefetch",
                                                     "out", "loss", "rest"};
        fprintf(stderr, "profile-step %s%s steps=%" PRIu64 " us/step:", tc->backend, tc->notrace ? " off" : " op",
                step - 3);
        for (int k = 0; k < DT_PROF_N; k++) {
            fprintf(stderr, " %s=%.2f", names[k], 1e6 * dt_prof[k] / (double)(step - 3));
            dt_prof[k] = 0;
        }
        fprintf(stderr, "\n");
    }
#endif
    if (pend != UINT64_MAX) {
        DT_ASSERT(pend_read, "the last step %" PRIu64 " overlapped", pend);
        tracer_flush(r->tr);
        if (train_out(&s, res, pend, pend_loss, keeps[pend & 1], hashes, &stopped) < 0)
            goto out;
    }
    if (step > 0)
        train_progress(&s, step - 1, res->final_loss, 1);
    if (stopped)
        exec_advance(&r->e);
    res->steps = step;
    if (r->be->sync)
        r->be->sync(r->ctx);
    res->seconds = dt_now() - t0;
    res->warm_seconds = step > 3 ? dt_now() - t2 : NAN;
    res->cpu_seconds = dt_cpu_now() - c0;
    uint64_t nlast = step < 50 ? step : 50;
    double sum = 0;
    for (uint64_t k = 0; k < nlast; k++)
        sum += s.ring[(step - 1 - k) % 50];
    res->mean_last50 = nlast ? sum / (double)nlast : NAN;
    if (s.twin) {
        res->self_checked = 1;
        char text[512];
        long p = tc->precision ? tc->precision : 128;
        if (res->self_agree == step)
            snprintf(text, sizeof text, "self-check: precision %ld and %ld bits give the same float32 "
                     "results in all %" PRIu64 " steps", p, 2 * p, step);
        else
            snprintf(text, sizeof text, "self-check: precision %ld and %ld bits agree in float32 for "
                     "the first %" PRIu64 " of %" PRIu64 " steps only: %ld bits are too few for %"
                     PRIu64 " steps (use --precision %ld)", p, 2 * p, res->self_agree, step, p, step,
                     2 * p);
        if (res->self_agree != step)
            fprintf(stderr, "divtrace record: warning: %s\n", text);
        struct trace_event ev = {TRACE_EVENT_SELFCHECK, step ? step - 1 : 0, UINT32_MAX, text};
        if (s.w && trace_writer_event(s.w, &ev) < 0)
            goto out;
    }
    if (s.w) {
        if (train_ckpt(&s, step) < 0)
            goto out;
        struct trace_writer *w = s.w;
        s.w = NULL;
        if (trace_writer_close(w, stopped ? 1 : 0) < 0)
            goto out;
    }
    rc = DT_OK;
out:
    if (s.w)
        trace_writer_abandon(s.w);
    graph_opdefs_free(ops, r->g.n);
    free(keeps[0]);
    free(keeps[1]);
    free(hashes);
    train_teardown(&s);
    return rc;
}
