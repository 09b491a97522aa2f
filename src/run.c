/* run.c: a training run in memory (see run.h). */
#include "run.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <mpfr.h>

#include "build.h"
#include "fault.h"
#include "config.h"
#include "hash.h"
#include "model.h"
#include "util.h"

static int run_check(const struct train_config *tc)
{
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
    return DT_OK;
}

/* n floats of host memory the backend copies from and to fastest (its
 * host_alloc), else malloc's; bit `which` of r->pinned says which; NULL
 * when the memory is exhausted. */
static float *run_host_buf(struct run *r, int which, size_t n)
{
    float *p = r->be->host_alloc && r->be->host_free ? r->be->host_alloc(r->ctx, n * sizeof(float)) : NULL;
    if (p) {
        r->pinned |= 1 << which;
        return p;
    }
    return malloc(n ? n * sizeof(float) : 1); /* NULL: exhausted, reported by run_open */
}

int run_open(struct run *r, const struct train_config *tc, long precision, int traced)
{
    memset(r, 0, sizeof *r);
    r->tc = tc;
    graph_init(&r->g);
    if (run_check(tc) < 0)
        return DT_ERR;
    r->be = backend_find(tc->backend);
    if (!r->be)
        return DT_ERR;
    int prednet = strcmp(tc->model.name, "prednet") == 0;
    if (prednet) {
        const struct model_spec *m = &tc->model;
        struct data_video_spec vs = {
            .digits_dir = tc->data_dir, .path = tc->video,
            .layout = strcmp(tc->npy_layout, "nthw") == 0 ? VIDEO_LAYOUT_NTHW : VIDEO_LAYOUT_TNHW,
            .nt = m->nt, .h = m->height, .w = m->width, .c = m->stack[0],
        };
        if (data_open_video(&r->data, &vs, tc->seed) < 0)
            return DT_ERR;
    } else if (data_open(&r->data, tc->data_dir, tc->seed) < 0) {
        return DT_ERR;
    }
    int loss = model_build(&r->g, &tc->model, prednet ? 0 : data_features(&r->data));
    if (loss < 0)
        return DT_ERR;
    graph_backward(&r->g, loss);
    struct graph_opt_config oc = {
        .kind = strcmp(tc->optimizer, "adam") == 0 ? GRAPH_OPT_ADAM : GRAPH_OPT_SGD,
        .lr = (float)tc->lr, .momentum = (float)tc->momentum,
        .b1 = (float)tc->b1, .b2 = (float)tc->b2, .eps = (float)tc->eps,
    };
    graph_optimizer(&r->g, &oc);
    struct backend_options bo = {
        .threads = tc->threads,
        .cpu_kernel = tc->cpu_kernel,
        .cpu_gemm = tc->cpu_gemm,
        .precision = precision ? precision : tc->precision,
        .reduce = tc->reduce,
        .cudnn_algo = tc->cudnn_algo,
        .cudnn_algos = tc->cudnn_algos,
        .device = tc->device,
        .no_graph = tc->no_graph,
        .streams = tc->streams,
    };
    if (r->be->init(&r->ctx, &bo) < 0) {
        r->ctx = NULL;
        return DT_ERR;
    }
    if (exec_init(&r->e, &r->g, r->be, r->ctx) < 0)
        return DT_ERR;

    size_t maxcount = 1;
    r->leaves = dt_calloc((size_t)r->g.n, sizeof *r->leaves);
    for (int i = 0; i < r->g.n; i++) {
        const struct node *nd = &r->g.nodes[i];
        if (nd->count > maxcount)
            maxcount = nd->count;
        if (nd->next >= 0)
            r->leaves[r->nleaves++] = i;
    }
    if (!(r->host = malloc(maxcount * sizeof(float)))) {
        dt_error_set("out of memory: %zu floats of host staging for the largest tensor", maxcount);
        return DT_ERR;
    }
    uint64_t iseed = tc->init_seed_set ? tc->init_seed : tc->seed;
    for (int i = 0; i < r->g.n; i++) {
        const struct node *nd = &r->g.nodes[i];
        if (nd->type == OP_PARAM) {
            model_init_param(nd, iseed, tc->init_scale, r->host);
            exec_set(&r->e, i, r->host);
        }
        /* optimizer state starts at zero: alloc zero-fills */
    }
    size_t nbatch = 0;
    r->inputs = dt_calloc((size_t)r->g.n, sizeof *r->inputs);
    for (int i = 0; i < r->g.n; i++)
        if (r->g.nodes[i].type == OP_INPUT) {
            r->inputs[r->ninputs++] = i;
            nbatch += r->g.nodes[i].count;
        }
    DT_ASSERT(r->ninputs >= 1, "model without data inputs");
    r->nbatch = nbatch;
    if (r->data.video && nbatch > maxcount) { /* run_prefetch makes a video batch in r->host */
        float *h = realloc(r->host, nbatch * sizeof(float));
        if (!h) {
            dt_error_set("out of memory: %zu floats of host staging for a step's batch", nbatch);
            return DT_ERR;
        }
        r->host = h;
    }
    for (int k = 0; k < 2; k++) {
        if (!(r->bbuf[k] = run_host_buf(r, k, nbatch))) {
            dt_error_set("out of memory: %zu floats of host memory for a step's batch", nbatch);
            return DT_ERR;
        }
        r->bstep[k] = UINT64_MAX;
    }
    for (int k = 0; k < 2; k++) {
        if (!(r->loss_host[k] = run_host_buf(r, 2 + k, 1))) {
            dt_error_set("out of memory");
            return DT_ERR;
        }
        r->fstep[k] = UINT64_MAX;
    }

    /* Trace off the training's thread when this process may run on a
     * second core. */
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    r->tr = tracer_new(&r->g, r->be, r->ctx, ncpu);
    if (traced) {
        r->e.hook = tracer_hook;
        r->e.hook_arg = r->tr;
        r->e.before_end = tracer_before_end;
        r->e.before_end_arg = r->tr;
    }
    return DT_OK;
}

void run_close(struct run *r)
{
    tracer_free(r->tr);
    exec_free(&r->e);
    float *hosts[4] = {r->bbuf[0], r->bbuf[1], r->loss_host[0], r->loss_host[1]};
    for (int k = 0; k < 4; k++)
        if (r->pinned >> k & 1)
            r->be->host_free(r->ctx, hosts[k]);
        else
            free(hosts[k]);
    if (r->ctx)
        r->be->free(r->ctx);
    graph_free(&r->g);
    data_free(&r->data);
    free(r->leaves);
    free(r->inputs);
    free(r->host);
    memset(r, 0, sizeof *r);
}

static void run_host_cpu(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    fclose(f);
}

void run_describe(struct run *r, struct trace_config *c, uint64_t ckpt_every)
{
    const struct train_config *tc = r->tc;
    trace_config_set(c, "tool_version", PACKAGE_VERSION);
    build_describe(c);
    /* the reference backend's and replay's oracle's arithmetic, whichever
     * backend ran (the mpfr backend sets the same key) */
    trace_config_set(c, "mpfr_version", mpfr_get_version());
    int prednet = strcmp(tc->model.name, "prednet") == 0;
    trace_config_set(c, "model", tc->model.name);
    if (prednet) {
        trace_config_set(c, "stack", tc->stack);
        trace_config_set(c, "r_stack", tc->r_stack);
        trace_config_set(c, "size", tc->size);
        trace_config_setf(c, "nt", "%u", tc->model.nt);
        trace_config_set(c, "layer_weights", tc->layer_weights);
        if (tc->protocol)
            trace_config_set(c, "protocol", tc->protocol);
    } else {
        trace_config_set(c, "layers", tc->layers);
        trace_config_set(c, "act", model_act_name(tc->model.act));
    }
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
    r->be->describe(r->ctx, c);
    trace_config_set(c, "data", r->data.path);
    if (prednet) {
        trace_config_set(c, "video", tc->video ? "file" : "moving-mnist");
        if (tc->video)
            trace_config_set(c, "npy_layout", tc->npy_layout);
        trace_config_set(c, "video_source", data_video_source(&r->data));
        trace_config_setf(c, "data_hash", "%016" PRIx64, r->data.hash);
    } else {
        trace_config_setf(c, "data_hash", "%016" PRIx64, r->data.hash);
        trace_config_setf(c, "data_images", "%ux%ux%u", r->data.im.n, r->data.im.rows, r->data.im.cols);
    }
    trace_config_set(c, "trace_level", trace_level_name(tc->level));
    trace_config_setf(c, "checkpoint_every", "%" PRIu64, ckpt_every);
    trace_config_set(c, "stop_on_nonfinite", tc->stop_on_nonfinite ? "yes" : "no");
    trace_config_setf(c, "hash", "xxh3-64 tree, %u-byte chunks", HASH_CHUNK_BYTES);
    if (tc->flip_set)
        trace_config_setf(c, "flip_bit", "step %" PRIu64 " %s[%" PRIu64 "] bit %d", tc->flip_step,
                          tc->flip_tensor, tc->flip_index, tc->flip_bit);
    if (tc->inject) {
        trace_config_set(c, "inject", tc->inject);
        /* a fault meant for another backend (SPEC@cuda on cpu) plants nothing */
        trace_config_set(c, "inject_planted", fault_planted(tc->inject, tc->backend) == 1 ? "yes" : "no");
    }
    if (tc->reduce && strcmp(tc->reduce, "atomic") == 0) {
        char names[200];
        int nshort = graph_short_sums(&r->g, names, sizeof names);
        if (nshort > 0) /* sums whose atomic order cannot change a bit */
            trace_config_setf(c, "reduce_fixed", "%d: %s", nshort, names);
    }
    char host[256];
    run_host_cpu(host, sizeof host);
    struct utsname un;
    if (uname(&un) == 0)
        trace_config_set(c, "host", un.nodename);
    trace_config_set(c, "host_cpu", host);
    trace_config_setf(c, "host_cores", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
}

uint64_t run_ckpt_bytes(const struct run *r)
{
    uint64_t bytes = 0;
    for (int k = 0; k < r->nleaves; k++)
        bytes += r->g.nodes[r->leaves[k]].count * sizeof(float) + 64;
    return bytes;
}

void run_ckpt_take(struct run *r, uint64_t step, struct trace_ckpt *c)
{
    *c = (struct trace_ckpt){
        .step = step,
        .data_cursor = step,
        .rng_seed = r->tc->seed,
        .rng_counter = step * r->tc->model.batch,
        .ntensors = (uint32_t)r->nleaves,
        .t = dt_calloc((size_t)r->nleaves, sizeof(struct trace_tensor)),
    };
    for (int k = 0; k < r->nleaves; k++) {
        const struct node *nd = &r->g.nodes[r->leaves[k]];
        struct trace_tensor *t = &c->t[k];
        t->name = nd->name;
        t->ndim = (uint8_t)nd->ndim;
        memcpy(t->shape, nd->shape, sizeof t->shape);
        t->count = nd->count;
        t->data = dt_malloc(nd->count * sizeof(float));
        exec_get(&r->e, r->leaves[k], t->data);
    }
}

void run_ckpt_release(struct trace_ckpt *c)
{
    for (uint32_t k = 0; k < c->ntensors; k++)
        free(c->t[k].data);
    free(c->t);
    c->t = NULL;
    c->ntensors = 0;
}

int run_ckpt_load(struct run *r, const struct trace_ckpt *c)
{
    for (int k = 0; k < r->nleaves; k++) {
        const struct node *nd = &r->g.nodes[r->leaves[k]];
        const struct trace_tensor *t = trace_ckpt_find(c, nd->name);
        if (!t) {
            dt_error_set("checkpoint at step %" PRIu64 " has no tensor %s", c->step, nd->name);
            return DT_ERR;
        }
        if (t->count != nd->count) {
            dt_error_set("checkpoint at step %" PRIu64 ": %s has %" PRIu64 " elements, the model %zu",
                         c->step, nd->name, t->count, nd->count);
            return DT_ERR;
        }
        exec_set(&r->e, r->leaves[k], t->data);
    }
    return DT_OK;
}

void run_prefetch(struct run *r, uint64_t step)
{
    float *out = r->bbuf[step & 1];
    r->bstep[step & 1] = step;
    if (!r->data.video) {
        data_batch(&r->data, step, r->tc->model.batch, out);
        return;
    }
    /* (batch, nt, C, H, W) -> frame t of every sequence, input t */
    const struct model_spec *m = &r->tc->model;
    data_video_batch(&r->data, step, m->batch, r->host);
    size_t frame = (size_t)m->stack[0] * m->height * m->width;
    DT_ASSERT(r->ninputs == (int)m->nt, "prednet: %d inputs for %u frames", r->ninputs, m->nt);
    for (uint32_t t = 0; t < m->nt; t++)
        for (uint32_t b = 0; b < m->batch; b++)
            memcpy(out + ((size_t)t * m->batch + b) * frame, r->host + ((size_t)b * m->nt + t) * frame,
                   frame * sizeof(float));
}

void run_step_begin(struct run *r, uint64_t step)
{
    tracer_begin(r->tr, step);
    if (r->bstep[step & 1] != step) {
        if (r->be->sync)
            r->be->sync(r->ctx); /* no queued copy still reads the buffer */
        run_prefetch(r, step);
    }
    /* Queued, not waited for: nothing writes bbuf[step & 1] before the
     * caller's next sync (run_step_exec makes the next step's batch in the
     * other buffer). */
    const float *src = r->bbuf[step & 1];
    for (int k = 0; k < r->ninputs; k++) {
        exec_set_async(&r->e, r->inputs[k], src);
        src += r->g.nodes[r->inputs[k]].count;
    }
}

int run_overlap(struct run *r)
{
    r->overlap = r->be->fence && r->be->fence_wait;
    return r->overlap;
}

/* Wait for step `step`, when it is the one its fence slot marked and not
 * waited for yet; 1 when it was, 0 when not (nothing done). */
static int run_wait(struct run *r, uint64_t step)
{
    int p = (int)(step & 1);
    if (!r->overlap || r->fstep[p] != step)
        return 0;
    if (!r->fwait[p]) {
        r->be->fence_wait(r->ctx, p);
        r->fwait[p] = 1;
    }
    return 1;
}

void run_step_exec(struct run *r, uint64_t step, uint64_t next)
{
    DT_PROF_MARK(t0);
    int p = (int)(step & 1);
    exec_step(&r->e, step);
    /* the loss comes back with the step's records (the tracer's wait, or
     * run_loss's sync or fence), not in a round trip of its own */
    r->loss_pending[p] = exec_get_async(&r->e, r->g.loss, r->loss_host[p]);
    if (r->overlap) {
        DT_ASSERT(r->fstep[p] == UINT64_MAX || r->fwait[p], "step %" PRIu64 " queued before step %" PRIu64
                  " was waited for", step, r->fstep[p]);
        r->be->fence(r->ctx, p);
        r->fstep[p] = step;
        r->fwait[p] = 0;
    }
    DT_PROF_ADD(DT_PROF_EXEC, t0);
    DT_PROF_MARK(t1);
    if (next != UINT64_MAX && r->bstep[next & 1] != next && (next & 1) != (step & 1)) {
        /* bbuf[next & 1] was the upload of step next - 2: done with it */
        if (step > 0)
            run_wait(r, step - 1);
        run_prefetch(r, next);
    }
    DT_PROF_ADD(DT_PROF_PREFETCH, t1);
    tracer_sync(r->tr);
}

double run_loss(struct run *r, uint64_t step)
{
    int p = (int)(step & 1);
    /* the fence is waited for even when the copy was synchronous: the
     * step's slot is then free for step + 2 */
    int waited = run_wait(r, step);
    if (r->loss_pending[p]) { /* an asynchronous copy: the backend has sync */
        if (!waited)
            r->be->sync(r->ctx);
        r->loss_pending[p] = 0;
    }
    return *r->loss_host[p];
}

void run_summarize(struct run *r, uint64_t step, double loss, enum trace_level level,
                   struct trace_oprec *keep, uint64_t *hashes, struct trace_step *ts)
{
    uint32_t nrec = 0;
    double g2 = 0;
    int gfinite = 1;
    const struct trace_oprec *rec = tracer_records_of(r->tr, step);
    for (int i = 0; i < r->g.n; i++) {
        const struct trace_oprec *o = &rec[i];
        /* the root hashes the op hashes as little-endian u64 on any host */
        uint8_t *le = (uint8_t *)&hashes[i];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(o->hash >> (8 * b));
        if (r->g.nodes[i].type == OP_PARAM && r->g.nodes[i].grad >= 0) {
            const struct trace_oprec *gr = &rec[r->g.nodes[i].grad];
            g2 += gr->l2 * gr->l2;
            gfinite &= tracer_finite(gr);
        }
        if (trace_level_keeps(level, r->g.nodes[i].kind))
            keep[nrec++] = *o;
    }
    *ts = (struct trace_step){
        .step = step,
        .loss = loss,
        .grad_norm = gfinite ? sqrt(g2) : NAN,
        .root = hash_bytes(hashes, (size_t)r->g.n * sizeof *hashes),
        .nrec = nrec,
        .rec = keep,
    };
}

/* ---- configuration from a trace header ---- */

static const char *run_key(const struct trace_config *cfg, const char *key)
{
    const char *v = trace_config_get(cfg, key);
    if (!v)
        dt_error_set("the trace header has no '%s': it cannot be re-run", key);
    return v;
}

/* A number of the header: an unsigned integer when u is given, else a
 * double into d. */
static int run_key_number(const struct trace_config *cfg, const char *key, double *d, uint64_t *u)
{
    const char *v = run_key(cfg, key);
    if (!v)
        return DT_ERR;
    char *end;
    errno = 0;
    if (u)
        *u = strtoull(v, &end, 10);
    else
        *d = strtod(v, &end);
    if (errno || *end || end == v) {
        dt_error_set("the trace header's %s '%s' is not %s", key, v, u ? "an integer" : "a number");
        return DT_ERR;
    }
    return DT_OK;
}

static int run_key_double(const struct trace_config *cfg, const char *key, double *out)
{
    return run_key_number(cfg, key, out, NULL);
}

static int run_key_u64(const struct trace_config *cfg, const char *key, uint64_t *out)
{
    return run_key_number(cfg, key, NULL, out);
}

int run_config_from_trace(struct train_config *tc, const struct trace_config *cfg)
{
    train_config_defaults(tc);
    const char *v;
    uint64_t u;
    if (!(v = run_key(cfg, "model")))
        return DT_ERR;
    tc->model.name = v;
    int prednet = strcmp(v, "prednet") == 0;
    if (prednet) {
        if (!(tc->stack = run_key(cfg, "stack")) || !(tc->r_stack = run_key(cfg, "r_stack")) ||
            !(tc->size = run_key(cfg, "size")) || !(tc->layer_weights = run_key(cfg, "layer_weights")) ||
            run_key_u64(cfg, "nt", &u) < 0)
            return DT_ERR;
        tc->model.nt = (uint32_t)u;
        tc->protocol = trace_config_get(cfg, "protocol");
        tc->optimizer_given = tc->batch_given = tc->steps_given = 1;
    } else {
        if (!(tc->layers = run_key(cfg, "layers")) || model_parse_layers(tc->layers, &tc->model) < 0)
            return DT_ERR;
        if (!(v = run_key(cfg, "act")) || model_parse_act(v, &tc->model.act) < 0)
            return DT_ERR;
    }
    if (run_key_u64(cfg, "batch", &u) < 0)
        return DT_ERR;
    tc->model.batch = (uint32_t)u;
    if (!(tc->optimizer = run_key(cfg, "optimizer")) || run_key_double(cfg, "lr", &tc->lr) < 0)
        return DT_ERR;
    if (strcmp(tc->optimizer, "sgd") == 0) {
        if (run_key_double(cfg, "momentum", &tc->momentum) < 0)
            return DT_ERR;
    } else if (run_key_double(cfg, "adam_b1", &tc->b1) < 0 ||
               run_key_double(cfg, "adam_b2", &tc->b2) < 0 ||
               run_key_double(cfg, "adam_eps", &tc->eps) < 0) {
        return DT_ERR;
    }
    if (run_key_u64(cfg, "steps", &tc->steps) < 0 || run_key_u64(cfg, "seed", &tc->seed) < 0 ||
        run_key_u64(cfg, "init_seed", &tc->init_seed) < 0 ||
        run_key_double(cfg, "init_scale", &tc->init_scale) < 0)
        return DT_ERR;
    tc->init_seed_set = 1;
    if (!(tc->backend = run_key(cfg, "backend")))
        return DT_ERR;
    if ((v = trace_config_get(cfg, "threads"))) {
        if (run_key_u64(cfg, "threads", &u) < 0)
            return DT_ERR;
        tc->threads = (int)u;
    }
    v = trace_config_get(cfg, "cpu_kernel");
    tc->cpu_kernel = v && strcmp(v, "default") != 0 ? v : NULL;
    v = trace_config_get(cfg, "cpu_gemm");
    tc->cpu_gemm = v && strcmp(v, "fixed") == 0 ? v : NULL;
    tc->reduce = trace_config_get(cfg, "reduce");
    tc->no_graph = (v = trace_config_get(cfg, "cuda_graph")) && strcmp(v, "off") == 0;
    /* "4 (3 used by the schedule)"; the results do not depend on it */
    tc->streams = (v = trace_config_get(cfg, "gpu_streams")) ? atoi(v) : 0;
    if (tc->streams < 1 || tc->streams > 8)
        tc->streams = 0;
    if ((v = trace_config_get(cfg, "cudnn_algo")) && strcmp(v, "number") == 0)
        v = trace_config_get(cfg, "cudnn_algo_number");
    tc->cudnn_algo = v;
    /* the algorithms the recording ran, not a new search (whose choice may
     * differ from run to run) */
    v = trace_config_get(cfg, "cudnn_algos");
    tc->cudnn_algos = v && strncmp(v, "none", 4) != 0 ? v : NULL;
    if (trace_config_get(cfg, "device_index")) {
        if (run_key_u64(cfg, "device_index", &u) < 0)
            return DT_ERR;
        tc->device = (int)u;
    }
    if (trace_config_get(cfg, "precision")) {
        if (run_key_u64(cfg, "precision", &u) < 0)
            return DT_ERR;
        tc->precision = (long)u;
    }
    tc->inject = trace_config_get(cfg, "inject");
    if ((v = trace_config_get(cfg, "flip_bit"))) {
        unsigned long long fs, fi;
        int bit;
        if (sscanf(v, "step %llu %127[^[][%llu] bit %d", &fs, tc->flip_tensor, &fi, &bit) != 4) {
            dt_error_set("the trace header's flip_bit '%s' is malformed", v);
            return DT_ERR;
        }
        tc->flip_set = 1;
        tc->flip_step = fs;
        tc->flip_index = fi;
        tc->flip_bit = bit;
    }
    /* the data directory: that of the recorded file */
    if (!(v = run_key(cfg, "data")))
        return DT_ERR;
    snprintf(tc->data_dir_buf, sizeof tc->data_dir_buf, "%s", v);
    if (prednet && (v = trace_config_get(cfg, "video")) && strcmp(v, "file") == 0) {
        /* user frames: the recorded path itself */
        tc->video = tc->data_dir_buf;
        tc->npy_layout = trace_config_get(cfg, "npy_layout");
    } else {
        tc->data_dir = dirname(tc->data_dir_buf);
    }
    if (train_finish_config(tc) < 0)
        return DT_ERR;
    return DT_OK;
}
