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
    tc->data_dir = "/usr/share/datasets/fashion-mnist";
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
            tc->lr = train_presets[i].lr;
            return DT_OK;
        }
    dt_error_set("--preset '%s': expected sgd-plateau or adam-shoulder", name);
    return DT_ERR;
}

int train_finish_config(struct train_config *tc)
{
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
    /* The smallest round interval whose checkpoints take at most 150 MB. */
    static const uint64_t nice[] = {1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000,
                                    2000, 2500, 5000, 10000, 20000, 50000, 100000};
    const double budget = 150e6;
    for (size_t i = 0; i < sizeof nice / sizeof nice[0]; i++)
        if ((double)(steps / nice[i] + 2) * (double)ckpt_bytes <= budget)
            return nice[i];
    return steps ? steps : 1;
}

/* ---- helpers of train_run ---- */

struct train_state {
    const struct train_config *tc;
    struct data data;
    struct graph g;
    const struct backend_ops *be;
    void *ctx;
    struct exec e;
    struct tracer *tr;
    struct trace_writer *w;
    struct trace_config cfg;
    int *leaves;               /* nodes with a next value: parameters and state */
    int nleaves;
    float *host;               /* staging for the largest node */
    uint64_t ckpt_every;
};

static void train_describe(struct train_state *s)
{
    const struct train_config *tc = s->tc;
    struct trace_config *c = &s->cfg;
    trace_config_set(c, "model", tc->model.name);
    trace_config_set(c, "layers", tc->layers);
    trace_config_set(c, "act", model_act_name(tc->model.act));
    trace_config_setf(c, "batch", "%u", tc->model.batch);
    trace_config_set(c, "preset", train_preset_name(tc));
    trace_config_set(c, "optimizer", tc->optimizer);
    trace_config_setf(c, "lr", "%.9g", tc->lr);
    if (strcmp(tc->optimizer, "sgd") == 0) {
        trace_config_setf(c, "momentum", "%.9g", tc->momentum);
    } else {
        trace_config_setf(c, "adam_b1", "%.9g", tc->b1);
        trace_config_setf(c, "adam_b2", "%.9g", tc->b2);
        trace_config_setf(c, "adam_eps", "%.9g", tc->eps);
    }
    trace_config_setf(c, "steps", "%" PRIu64, tc->steps);
    trace_config_setf(c, "seed", "%" PRIu64, tc->seed);
    trace_config_setf(c, "init_seed", "%" PRIu64, tc->init_seed_set ? tc->init_seed : tc->seed);
    trace_config_setf(c, "init_scale", "%.9g", tc->init_scale);
    trace_config_set(c, "backend", tc->backend);
    s->be->describe(s->ctx, c);
    trace_config_set(c, "data", s->data.path);
    trace_config_setf(c, "data_hash", "%016" PRIx64, s->data.im.hash);
    trace_config_setf(c, "data_images", "%ux%ux%u", s->data.im.n, s->data.im.rows, s->data.im.cols);
    trace_config_set(c, "trace_level", trace_level_name(tc->level));
    trace_config_setf(c, "checkpoint_every", "%" PRIu64, s->ckpt_every);
    trace_config_set(c, "stop_on_nonfinite", tc->stop_on_nonfinite ? "yes" : "no");
    trace_config_setf(c, "hash", "xxh3-64 tree, %u-byte chunks", HASH_CHUNK_BYTES);
    if (tc->flip_set)
        trace_config_setf(c, "flip_bit", "step %" PRIu64 " %s[%" PRIu64 "] bit %d", tc->flip_step,
                          tc->flip_tensor, tc->flip_index, tc->flip_bit);
    char host[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                char *p = strchr(line, ':');
                if (p) {
                    p += 1 + (p[1] == ' ');
                    p[strcspn(p, "\n")] = 0;
                    snprintf(host, sizeof host, "%s", p);
                }
                break;
            }
        fclose(f);
    }
    trace_config_set(c, "host_cpu", host);
    trace_config_setf(c, "host_cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
}

static int train_ckpt(struct train_state *s, uint64_t step)
{
    struct trace_ckpt c = {
        .step = step,
        .data_cursor = step,
        .rng_seed = s->tc->seed,
        .rng_counter = step * s->tc->model.batch,
        .ntensors = (uint32_t)s->nleaves,
        .t = dt_calloc((size_t)s->nleaves, sizeof(struct trace_tensor)),
    };
    for (int k = 0; k < s->nleaves; k++) {
        const struct node *nd = &s->g.nodes[s->leaves[k]];
        struct trace_tensor *t = &c.t[k];
        t->name = nd->name;
        t->ndim = (uint8_t)nd->ndim;
        memcpy(t->shape, nd->shape, sizeof t->shape);
        t->count = nd->count;
        t->data = dt_malloc(nd->count * sizeof(float));
        exec_get(&s->e, s->leaves[k], t->data);
    }
    int rc = trace_writer_ckpt(s->w, &c);
    for (int k = 0; k < s->nleaves; k++)
        free(c.t[k].data);
    free(c.t);
    return rc;
}

static void train_flip(struct train_state *s)
{
    const struct train_config *tc = s->tc;
    int i = graph_find(&s->g, tc->flip_tensor);
    exec_get(&s->e, i, s->host);
    uint32_t u;
    memcpy(&u, &s->host[tc->flip_index], sizeof u);
    u ^= 1u << tc->flip_bit;
    memcpy(&s->host[tc->flip_index], &u, sizeof u);
    exec_set(&s->e, i, s->host);
    tracer_mark_dirty(s->tr, i);
}

static int train_check_flip(const struct train_state *s)
{
    const struct train_config *tc = s->tc;
    int i = graph_find(&s->g, tc->flip_tensor);
    if (i < 0 || s->g.nodes[i].next < 0) {
        dt_error_set("--flip-bit: '%s' is not a parameter or optimizer state of this model",
                     tc->flip_tensor);
        return DT_ERR;
    }
    if (tc->flip_index >= s->g.nodes[i].count || tc->flip_bit < 0 || tc->flip_bit > 31) {
        dt_error_set("--flip-bit: element %" PRIu64 " bit %d is outside %s (%zu elements, bits 0-31)",
                     tc->flip_index, tc->flip_bit, tc->flip_tensor, s->g.nodes[i].count);
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
    if (tc->steps == 0) {
        dt_error_set("--steps must be at least 1");
        return DT_ERR;
    }
    if (tc->model.batch == 0) {
        dt_error_set("--batch must be at least 1");
        return DT_ERR;
    }
    if (!(tc->lr > 0) || !isfinite(tc->lr)) {
        dt_error_set("--lr must be a positive number");
        return DT_ERR;
    }
    s->be = backend_find(tc->backend);
    if (!s->be)
        return DT_ERR;
    if (data_open(&s->data, tc->data_dir, tc->seed) < 0)
        return DT_ERR;
    graph_init(&s->g);
    int loss = model_build(&s->g, &tc->model, data_features(&s->data));
    if (loss < 0)
        return DT_ERR;
    graph_backward(&s->g, loss);
    struct graph_opt_config oc = {
        .kind = strcmp(tc->optimizer, "adam") == 0 ? GRAPH_OPT_ADAM : GRAPH_OPT_SGD,
        .lr = (float)tc->lr, .momentum = (float)tc->momentum,
        .b1 = (float)tc->b1, .b2 = (float)tc->b2, .eps = (float)tc->eps,
    };
    graph_optimizer(&s->g, &oc);
    if (tc->flip_set && train_check_flip(s) < 0)
        return DT_ERR;
    struct backend_options bo = {.threads = tc->threads, .cpu_kernel = tc->cpu_kernel};
    if (s->be->init(&s->ctx, &bo) < 0)
        return DT_ERR;
    if (exec_init(&s->e, &s->g, s->be, s->ctx) < 0)
        return DT_ERR;

    size_t maxcount = 1;
    uint64_t ckpt_bytes = 0;
    s->leaves = dt_calloc((size_t)s->g.n, sizeof *s->leaves);
    for (int i = 0; i < s->g.n; i++) {
        const struct node *nd = &s->g.nodes[i];
        if (nd->count > maxcount)
            maxcount = nd->count;
        if (nd->next >= 0) {
            s->leaves[s->nleaves++] = i;
            ckpt_bytes += nd->count * sizeof(float) + 64;
        }
    }
    s->host = dt_malloc(maxcount * sizeof(float));
    uint64_t iseed = tc->init_seed_set ? tc->init_seed : tc->seed;
    for (int i = 0; i < s->g.n; i++) {
        const struct node *nd = &s->g.nodes[i];
        if (nd->type == OP_PARAM) {
            model_init_param(nd, iseed, tc->init_scale, s->host);
            exec_set(&s->e, i, s->host);
        }
        /* optimizer state starts at zero: alloc zero-fills */
    }
    s->ckpt_every = tc->ckpt_every ? tc->ckpt_every : train_default_ckpt_every(tc->steps, ckpt_bytes);

    /* Trace on a second thread when this process may run on a second core. */
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    s->tr = tracer_new(&s->g, s->be, s->ctx, ncpu > 1);
    if (!tc->notrace) {
        s->e.hook = tracer_hook;
        s->e.hook_arg = s->tr;
    }
    trace_config_set(&s->cfg, "tool_version", PACKAGE_VERSION);
    train_describe(s);
    return DT_OK;
}

static void train_teardown(struct train_state *s)
{
    exec_free(&s->e);
    if (s->ctx)
        s->be->free(s->ctx);
    graph_free(&s->g);
    data_free(&s->data);
    trace_config_free(&s->cfg);
    free(s->leaves);
    free(s->host);
    tracer_free(s->tr);
}

static void train_progress(const struct train_config *tc, uint64_t step, double loss,
                           double t0, double *last, int final)
{
    double now = dt_now();
    if (!final && now - *last < 0.2)
        return;
    *last = now;
    double rate = (double)(step + 1) / (now - t0 > 1e-9 ? now - t0 : 1e-9);
    fprintf(stderr, "\rstep %" PRIu64 "/%" PRIu64 "  loss %.6f  %.0f steps/s ", step + 1,
            tc->steps, loss, rate);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

/* Write step `step`: the records the trace level keeps, the root hash over
 * all op hashes, the loss and the gradient norm. */
static int train_write_step(struct train_state *s, uint64_t step, double loss,
                            struct trace_oprec *keep, uint64_t *hashes)
{
    uint32_t nrec = 0;
    double g2 = 0;
    int gfinite = 1;
    const struct trace_oprec *rec = tracer_records(s->tr);
    for (int i = 0; i < s->g.n; i++) {
        const struct trace_oprec *r = &rec[i];
        /* the root hashes the op hashes as little-endian u64 on any host */
        uint8_t *le = (uint8_t *)&hashes[i];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(r->hash >> (8 * b));
        if (s->g.nodes[i].type == OP_PARAM && s->g.nodes[i].grad >= 0) {
            const struct trace_oprec *gr = &rec[s->g.nodes[i].grad];
            g2 += gr->l2 * gr->l2;
            gfinite &= tracer_finite(gr);
        }
        if (trace_level_keeps(s->tc->level, s->g.nodes[i].kind))
            keep[nrec++] = *r;
    }
    struct trace_step ts = {
        .step = step,
        .loss = loss,
        .grad_norm = gfinite ? sqrt(g2) : NAN,
        .root = hash_bytes(hashes, (size_t)s->g.n * sizeof *hashes),
        .nrec = nrec,
        .rec = keep,
    };
    return trace_writer_step(s->w, &ts);
}

int train_run(const struct train_config *tc, struct train_result *res)
{
    struct train_state s;
    memset(&s, 0, sizeof s);
    s.tc = tc;
    memset(res, 0, sizeof *res);
    int rc = DT_ERR;
    if (train_setup(&s) < 0)
        goto out;

    struct trace_oprec *keep = dt_calloc((size_t)s.g.n, sizeof *keep);
    uint64_t *hashes = dt_calloc((size_t)s.g.n, sizeof *hashes);
    struct trace_opdef *ops = NULL;
    if (!tc->notrace) {
        if (trace_writer_open(&s.w, tc->out, &s.cfg, tc->level) < 0)
            goto out_free;
        ops = graph_opdefs(&s.g);
        if (trace_writer_ops(s.w, ops, (uint32_t)s.g.n) < 0)
            goto out_free;
    }

    int xnode = graph_find(&s.g, "data.x");
    float *batch = dt_malloc(s.g.nodes[xnode].count * sizeof(float));
    double ring[50];
    double t0 = dt_now(), c0 = dt_cpu_now(), last = 0;
    int stopped = 0;
    uint64_t step;
    for (step = 0; step < tc->steps; step++) {
        tracer_begin(s.tr, step);
        /* A fault lands before the checkpoint: it is the state this step runs on. */
        if (tc->flip_set && step == tc->flip_step)
            train_flip(&s);
        if (s.w && step % s.ckpt_every == 0 && train_ckpt(&s, step) < 0)
            goto out_batch;
        data_batch(&s.data, step, tc->model.batch, batch);
        exec_set(&s.e, xnode, batch);
        exec_step(&s.e, step);
        tracer_sync(s.tr);
        float lossf;
        exec_get(&s.e, s.g.loss, &lossf);
        double loss = lossf;
        ring[step % 50] = loss;
        res->final_loss = loss;
        if (!isfinite(loss))
            res->nonfinite = 1;
        if (s.w && train_write_step(&s, step, loss, keep, hashes) < 0)
            goto out_batch;
        uint64_t nf_step;
        int nf = tracer_nonfinite(s.tr, &nf_step);
        if (nf >= 0 && nf_step == step) {
            const struct node *nd = &s.g.nodes[nf];
            const struct trace_oprec *r = &tracer_records(s.tr)[nf];
            char text[512];
            snprintf(text, sizeof text,
                     "step %" PRIu64 ": op %d %s (%s) produced %" PRIu64 " NaN and %" PRIu64
                     " Inf from finite inputs", step, nf, nd->name,
                     op_type_name(nd->type), r->nan, r->inf);
            if (tc->progress)
                fputc('\n', stderr);
            fprintf(stderr, "divtrace record: non-finite values: %s\n", text);
            res->nonfinite = 1;
            struct trace_event ev = {TRACE_EVENT_NONFINITE, step, (uint32_t)nf, text};
            if (s.w && trace_writer_event(s.w, &ev) < 0)
                goto out_batch;
            if (tc->stop_on_nonfinite) {
                snprintf(text, sizeof text, "stopped after step %" PRIu64 " (--stop-on-nonfinite)", step);
                struct trace_event st = {TRACE_EVENT_STOPPED, step, UINT32_MAX, text};
                if (s.w && trace_writer_event(s.w, &st) < 0)
                    goto out_batch;
                stopped = 1;
                step++;
                break;
            }
        }
        exec_advance(&s.e);
        if (tc->progress)
            train_progress(tc, step, loss, t0, &last, 0);
    }
    if (tc->progress && !stopped)
        train_progress(tc, step - 1, res->final_loss, t0, &last, 1);
    if (stopped)
        exec_advance(&s.e);
    res->steps = step;
    res->seconds = dt_now() - t0;
    res->cpu_seconds = dt_cpu_now() - c0;
    uint64_t nlast = step < 50 ? step : 50;
    double sum = 0;
    for (uint64_t k = 0; k < nlast; k++)
        sum += ring[(step - 1 - k) % 50];
    res->mean_last50 = nlast ? sum / (double)nlast : NAN;
    if (s.w) {
        if (train_ckpt(&s, step) < 0)
            goto out_batch;
        struct trace_writer *w = s.w;
        s.w = NULL;
        if (trace_writer_close(w, stopped ? 1 : 0) < 0)
            goto out_batch;
    }
    rc = DT_OK;
out_batch:
    free(batch);
out_free:
    if (s.w)
        trace_writer_abandon(s.w);
    graph_opdefs_free(ops, s.g.n);
    free(keep);
    free(hashes);
out:
    train_teardown(&s);
    return rc;
}
