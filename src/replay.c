/* replay.c: re-execution of recorded steps (see replay.h). */
#include "replay.h"

#include <errno.h>
#include <inttypes.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cpu_blas.h"
#include "diff.h"
#include "fault.h"
#include "hash.h"
#include "json.h"
#include "oracle.h"
#include "progress.h"
#include "run.h"
#include "util.h"

const char *replay_class_name(enum replay_class c)
{
    static const char *const names[] = {"exact", "rounding", "SEMANTIC"};
    return names[c];
}

int replay_op_matters(const struct replay_opcheck *c, double threshold)
{
    return c->cls == REPLAY_SEMANTIC || c->max_ratio > threshold || c->max_ulp == UINT64_MAX ||
           (c->bitwise == 0 && c->inputs_recorded == 1) || c->recorded_ok == 0;
}

uint64_t replay_default_from(uint64_t step)
{
    return step ? step - 1 : 0;
}

struct replay_state {
    struct run r;
    struct train_config tc;
    struct replay_result *res;
    const struct trace_file *tf;
    char *want;                /* per node: checked against the oracle (NULL: all) */
    int checking;              /* oracle checks on for the current step */
    uint64_t step;
    float **in;                /* host copies of an op's inputs */
    float *out, *exact;
    double *bound;
    struct progress prog;
    const struct replay_options *opt;
    uint64_t first;            /* the checkpoint's step, where the replay began */
};

double replay_normwise_floor(const float *a, size_t na, const float *b, size_t nb)
{
    const float *in[2] = {a, b};
    size_t count[2] = {na, nb};
    return replay_normwise_floor_pairs(in, count, 1);
}

double replay_normwise_floor_pairs(const float *const *in, const size_t *count, int m)
{
    double sa = 0, sb = 0;
    size_t na = 0, nb = 0;
    for (int j = 0; j < m; j++) {
        const float *a = in[2 * j], *b = in[2 * j + 1];
        for (size_t k = 0; k < count[2 * j]; k++)
            sa += (double)a[k] * a[k];
        for (size_t k = 0; k < count[2 * j + 1]; k++)
            sb += (double)b[k] * b[k];
        na += count[2 * j];
        nb += count[2 * j + 1];
    }
    double n = (double)(na > nb ? na : nb);
    double c = n > 2 ? ceil(log2(n)) : 1;
    return c * 0x1p-24 * sqrt(sa) * sqrt(sb);
}

void replay_classify(const float *out, const float *exact, const double *bound, size_t n,
                     double least, struct replay_opcheck *c)
{
    c->cls = REPLAY_EXACT;
    c->worst = 0;
    c->max_ulp = 0;
    c->max_ratio = 0;
    for (size_t k = 0; k < n; k++) {
        float v = out[k], x = exact[k];
        if (memcmp(&v, &x, sizeof v) == 0 || (isnan(v) && isnan(x)))
            continue;
        uint64_t ulp = diff_ulp(v, x);
        double err = fabs((double)v - (double)x);
        double b = bound[k] > least ? bound[k] : least; /* an infinite bound stays infinite */
        double allowed = b + 0.5 * oracle_ulp32(x);
        double ratio;
        if (isinf(allowed))
            /* no claim on the value (an input was NaN or Inf, or an
             * intermediate could overflow): only a NaN against a number,
             * or an infinity of the other sign, is wrong */
            ratio = (isnan(v) != isnan(x) || (isinf(v) && isinf(x) && v != x)) ? INFINITY : 0;
        else if (isnan(err))
            ratio = INFINITY;
        else
            ratio = allowed > 0 ? err / allowed : INFINITY;
        if (ulp > c->max_ulp)
            c->max_ulp = ulp;
        if (c->cls == REPLAY_EXACT || ratio > c->max_ratio) {
            c->max_ratio = ratio;
            c->worst = k;
            c->worst_value = v;
            c->worst_exact = x;
            c->worst_bound = b;
        }
        c->cls = REPLAY_ROUNDING;
    }
    if (c->max_ratio > 1.0)
        c->cls = REPLAY_SEMANTIC;
}

/* The recording's record of node i at the step being checked, or NULL. */
static const struct trace_oprec *replay_recorded(const struct replay_state *s, int i)
{
    if (s->step >= s->tf->nsteps)
        return NULL;
    const struct trace_step *ts = &s->tf->steps[s->step];
    for (uint32_t k = 0; k < ts->nrec; k++)
        if (ts->rec[k].op == (uint32_t)i)
            return &ts->rec[k];
    return NULL;
}

/* Whether a recorded output's statistics are those of some output within
 * bounds (1), of none (0), or cannot tell (-1: an infinite bound): with
 * every element within a_k = max(bound_k, least) + ulp(exact_k)/2 of the
 * exact e_k, its L2 norm is within ||a||_2 of ||e||_2 (the triangle
 * inequality), its least element lies in [min(e - a), min(e + a)] and its
 * largest in [max(e - a), max(e + a)], and it holds no NaN or Inf where the
 * exact result holds none. Necessary, not sufficient: what can be said of
 * recorded values that re-execution does not give again (a nondeterministic
 * kernel), of which the trace keeps only the record. */
int replay_stats_admissible(const struct trace_oprec *rec, const float *exact, const double *bound,
                            size_t n, double least)
{
    /* four lanes, merged at the end: a hot loop of the oracle's replay */
    double e2[4] = {0, 0, 0, 0}, a2[4] = {0, 0, 0, 0};
    double lo_lo[4], lo_hi[4], hi_lo[4], hi_hi[4];
    int finite = 1;
    for (int j = 0; j < 4; j++) {
        lo_lo[j] = lo_hi[j] = INFINITY;
        hi_lo[j] = hi_hi[j] = -INFINITY;
    }
    for (size_t k0 = 0; k0 < n; k0 += 4) {
        for (int j = 0; j < 4; j++) {
            if (k0 + (size_t)j >= n)
                break;
            double e = exact[k0 + j], b = bound[k0 + j] > least ? bound[k0 + j] : least;
            finite &= fabs(e) <= DBL_MAX && b <= DBL_MAX;
            double a = b + 0.5 * oracle_ulp32(e), lo = e - a, hi = e + a;
            e2[j] += e * e;
            a2[j] += a * a;
            lo_lo[j] = lo < lo_lo[j] ? lo : lo_lo[j];
            lo_hi[j] = hi < lo_hi[j] ? hi : lo_hi[j];
            hi_lo[j] = lo > hi_lo[j] ? lo : hi_lo[j];
            hi_hi[j] = hi > hi_hi[j] ? hi : hi_hi[j];
        }
    }
    if (!finite)
        return -1;
    for (int j = 1; j < 4; j++) {
        e2[0] += e2[j];
        a2[0] += a2[j];
        lo_lo[0] = fmin(lo_lo[0], lo_lo[j]);
        lo_hi[0] = fmin(lo_hi[0], lo_hi[j]);
        hi_lo[0] = fmax(hi_lo[0], hi_lo[j]);
        hi_hi[0] = fmax(hi_hi[0], hi_hi[j]);
    }
    if (n == 0)
        return 1;
    if (rec->nan || rec->inf)
        return 0;
    /* the statistics are sums in double: a relative slack for their rounding */
    double slack = 1e-9 * (sqrt(e2[0]) + sqrt(a2[0])) + 1e-300;
    if (fabs(rec->l2 - sqrt(e2[0])) > sqrt(a2[0]) + slack)
        return 0;
    double ms = 1e-12 * fmax(fabs(lo_lo[0]), fabs(hi_hi[0]));
    if (rec->min < lo_lo[0] - ms || rec->min > lo_hi[0] + ms || rec->max < hi_lo[0] - ms ||
        rec->max > hi_hi[0] + ms)
        return 0;
    return 1;
}

/* Compare op i's output with the oracle's, element by element: against the
 * op's elementwise bound, or, for an op the backend ran with a transform
 * algorithm, against the larger of that and the normwise floor. */
static void replay_check_op(struct replay_state *s, int i)
{
    struct run *r = &s->r;
    const struct node *nd = &r->g.nodes[i];
    for (int k = 0; k < nd->ninputs; k++)
        exec_get(&r->e, nd->inputs[k], s->in[k]);
    exec_get(&r->e, i, s->out);
    struct backend_step st = {.step = s->step};
    const float *const *in = (const float *const *)s->in;
    DT_ASSERT(oracle_op_bound(&r->g, nd, s->exact, s->bound, in, &st) == 0, "oracle: %s",
              dt_error());
    struct replay_opcheck c = {.step = s->step, .op = i};
    int transform = 0;
    const char *alg = r->be->op_algorithm ? r->be->op_algorithm(r->ctx, &r->g, i, &transform) : NULL;
    snprintf(c.algorithm, sizeof c.algorithm, "%s", alg ? alg : "");
    double least = 0; /* the normwise floor, or none */
    if (transform && nd->ninputs >= 2 && nd->ninputs % 2 == 0 &&
        (nd->ninputs == 2 || nd->type == OP_CONV2D_BWD_DATA)) {
        /* a sum of pairs ran as one convolution of the stacked tensors */
        size_t count[OP_MAX_INPUTS];
        for (int k = 0; k < nd->ninputs; k++)
            count[k] = r->g.nodes[nd->inputs[k]].count;
        c.normwise = 1;
        least = replay_normwise_floor_pairs(in, count, nd->ninputs / 2);
    }
    replay_classify(s->out, s->exact, s->bound, nd->count, least, &c);
    /* the recording's side: its record of this op, and of its inputs */
    c.bitwise = c.inputs_recorded = c.recorded_ok = -1;
    const struct trace_oprec *rec = replay_recorded(s, i);
    if (rec) {
        c.bitwise = rec->hash == hash_tensor(s->out, nd->count * sizeof(float));
        c.recorded_ok = replay_stats_admissible(rec, s->exact, s->bound, nd->count, least);
    }
    c.inputs_recorded = 1;
    for (int k = 0; k < nd->ninputs && c.inputs_recorded == 1; k++) {
        const struct trace_oprec *ir = replay_recorded(s, nd->inputs[k]);
        if (!ir)
            c.inputs_recorded = -1;
        else if (ir->hash != hash_tensor(s->in[k], r->g.nodes[nd->inputs[k]].count * sizeof(float)))
            c.inputs_recorded = 0;
    }
    struct replay_result *res = s->res;
    if (res->ncheck == res->capcheck) {
        res->capcheck = res->capcheck ? 2 * res->capcheck : 64;
        res->check = dt_realloc(res->check, (size_t)res->capcheck * sizeof *res->check);
    }
    res->check[res->ncheck++] = c;
    if (c.cls == REPLAY_EXACT)
        res->nexact++;
    else if (c.cls == REPLAY_ROUNDING)
        res->nrounding++;
    else
        res->nsemantic++;
}

/* Where the replay is: the step, and against the oracle the op (a step of
 * a large model can take minutes there). */
static void replay_progress(struct replay_state *s, int op)
{
    if (!progress_due(&s->prog))
        return;
    const struct replay_options *opt = s->opt;
    char at[96] = "";
    if (op >= 0)
        snprintf(at, sizeof at, ", op %d of %d", op + 1, s->r.g.n);
    progress_show(&s->prog, "%s%sstep %" PRIu64 "%s (steps %" PRIu64 " to %" PRIu64 "), %.0f s",
                  opt->label ? opt->label : "", opt->label ? ": " : "", s->step, at, s->first,
                  s->res->last, progress_elapsed(&s->prog));
}

static void replay_hook(void *arg, int i, const backend_buf *buf)
{
    struct replay_state *s = arg;
    tracer_hook(s->r.tr, i, buf);
    enum op_type t = s->r.g.nodes[i].type;
    if (s->checking && t != OP_INPUT && t != OP_PARAM && t != OP_STATE && (!s->want || s->want[i]))
        replay_check_op(s, i);
    replay_progress(s, i);
}

/* Compare the step just replayed with its recording: the root, then op by
 * op where the recording kept records. Returns 1 if they match. */
static int replay_compare(struct replay_state *s, const struct trace_step *rec,
                          enum trace_level level, struct trace_oprec *keep, uint64_t *hashes,
                          double loss)
{
    struct trace_step now;
    run_summarize(&s->r, rec->step, loss, level, keep, hashes, &now);
    if (now.root == rec->root)
        return 1;
    s->res->mismatch_step = (int64_t)rec->step;
    s->res->mismatch_op = -1;
    const struct trace_oprec *ops = tracer_records(s->r.tr);
    for (uint32_t k = 0; k < rec->nrec; k++)
        if (ops[rec->rec[k].op].hash != rec->rec[k].hash) {
            s->res->mismatch_op = (int)rec->rec[k].op;
            break;
        }
    return 0;
}

static int replay_find_ckpt(const struct trace_file *tf, uint64_t step)
{
    int best = -1;
    for (uint32_t i = 0; i < tf->nckpt; i++)
        if (tf->ckpt[i].step <= step && (best < 0 || tf->ckpt[i].step > tf->ckpt[best].step))
            best = (int)i;
    return best;
}

static void replay_free_state(struct replay_state *s)
{
    if (s->in)
        for (int k = 0; k < OP_MAX_INPUTS; k++)
            free(s->in[k]);
    free(s->in);
    free(s->out);
    free(s->exact);
    free(s->bound);
    free(s->want);
    run_close(&s->r);
}

/* The ops --ops names, as a flag per node. */
static int replay_want(struct replay_state *s, const char *list)
{
    s->want = dt_calloc((size_t)s->r.g.n, 1);
    char *copy = dt_strdup(list);
    int rc = DT_OK;
    for (char *save = NULL, *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int i = graph_find(&s->r.g, p);
        if (i < 0) {
            dt_error_set("--ops: '%s' is not an op of this model (see divtrace show --ops)", p);
            rc = DT_ERR;
            break;
        }
        s->want[i] = 1;
    }
    free(copy);
    return rc;
}

/* Keys whose values change no bit of a run's results. */
static int replay_key_inert(const char *key)
{
    static const char *const inert[] = {"steps", "checkpoint_every", "trace_level", "stop_on_nonfinite",
                                        "data", "host_cores", "gpu_streams", "cuda_graph",
                                        "trace_overlap", NULL};
    for (int k = 0; inert[k]; k++)
        if (strcmp(key, inert[k]) == 0)
            return 1;
    return 0;
}

/* What this replay runs with that the recording did not, key by key. */
static void replay_config_diff(struct replay_state *s, const struct trace_file *tf, char *out, size_t n)
{
    struct trace_config now = {0};
    uint64_t every = 0;
    const char *v = trace_config_get(&tf->cfg, "checkpoint_every");
    if (v)
        every = strtoull(v, NULL, 10);
    run_describe(&s->r, &now, every);
    size_t len = 0;
    out[0] = 0;
    for (size_t k = 0; k < tf->cfg.n && len < n; k++) {
        const char *key = tf->cfg.key[k], *was = tf->cfg.val[k], *is = trace_config_get(&now, key);
        if (replay_key_inert(key) || (is && strcmp(is, was) == 0))
            continue;
        len += (size_t)snprintf(out + len, n - len, "%s%s %s -> %s", len ? "; " : "", key, was,
                                is ? is : "(absent)");
    }
    for (size_t k = 0; k < now.n && len < n; k++)
        if (!trace_config_get(&tf->cfg, now.key[k]) && !replay_key_inert(now.key[k]))
            len += (size_t)snprintf(out + len, n - len, "%s%s (absent) -> %s", len ? "; " : "",
                                    now.key[k], now.val[k]);
    trace_config_free(&now);
}

int replay_run(struct trace_file *tf, const struct replay_options *opt, char **argv,
               struct replay_result *res)
{
    memset(res, 0, sizeof *res);
    res->mismatch_step = -1;
    res->mismatch_op = -1;
    if (opt->steps == 0) {
        dt_error_set("--steps must be at least 1");
        return DT_ERR;
    }
    if (opt->step + opt->steps > tf->nsteps) {
        dt_error_set("%s holds steps 0 to %" PRIu64 ": cannot replay up to step %" PRIu64, tf->path,
                     tf->nsteps ? tf->nsteps - 1 : 0, opt->step + opt->steps - 1);
        return DT_ERR;
    }
    uint64_t from = opt->from < opt->step ? opt->from : opt->step;
    int ci = replay_find_ckpt(tf, from);
    if (ci < 0) {
        dt_error_set("%s has no checkpoint at or before step %" PRIu64, tf->path, from);
        return DT_ERR;
    }
    struct replay_state s;
    memset(&s, 0, sizeof s);
    s.res = res;
    s.tf = tf;
    s.opt = opt;
    if (run_config_from_trace(&s.tc, &tf->cfg) < 0)
        return DT_ERR;
    if (opt->inject)
        s.tc.inject = opt->inject;
    /* the oracle reads each op's inputs and output as the op is run: every
     * op launched on its own, not a captured step (the same bits) */
    if (opt->against == REPLAY_ORACLE)
        s.tc.no_graph = 1;
    /* OpenBLAS chose its kernel when it was loaded: run again with the
     * trace's, the one it asked for or else the one it ran, if this machine
     * has it (if not, the replay says so when it does not reproduce) */
    if (s.tc.cpu_kernel && cpu_blas_reexec(s.tc.cpu_kernel, argv) < 0)
        return DT_ERR;
    const char *core = trace_config_get(&tf->cfg, "openblas_core");
    if (!s.tc.cpu_kernel && core && strcmp(s.tc.backend, "cpu") == 0 &&
        strcasecmp(core, cpu_blas_corename()) != 0 && cpu_blas_check_kernel(core) == 0 &&
        cpu_blas_reexec(core, argv) < 0)
        return DT_ERR;
    if (run_open(&s.r, &s.tc, 0, 1) < 0) {
        run_close(&s.r);
        return DT_ERR;
    }
    int rc = DT_ERR;
    struct trace_ckpt ck;
    memset(&ck, 0, sizeof ck);
    struct trace_oprec *keep = dt_calloc((size_t)s.r.g.n, sizeof *keep);
    uint64_t *hashes = dt_calloc((size_t)s.r.g.n, sizeof *hashes);
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, s.r.data.hash);
    const char *have = trace_config_get(&tf->cfg, "data_hash");
    if (!have || strcmp(have, want) != 0) {
        dt_error_set("the data at %s is not the data %s was recorded with (hash %s, recorded %s)",
                     s.r.data.path, tf->path, want, have ? have : "none");
        goto out;
    }
    if (s.tc.inject && fault_install(&s.r, s.tc.inject) < 0)
        goto out;
    if (opt->ops && replay_want(&s, opt->ops) < 0)
        goto out;
    if (trace_read_ckpt(tf, (uint32_t)ci, &ck) < 0 || run_ckpt_load(&s.r, &ck) < 0)
        goto out;
    size_t maxn = 1;
    for (int i = 0; i < s.r.g.n; i++)
        if (s.r.g.nodes[i].count > maxn)
            maxn = s.r.g.nodes[i].count;
    s.in = dt_calloc(OP_MAX_INPUTS, sizeof *s.in);
    for (int k = 0; k < OP_MAX_INPUTS; k++)
        s.in[k] = dt_malloc(maxn * sizeof(float));
    s.out = dt_malloc(maxn * sizeof(float));
    s.exact = dt_malloc(maxn * sizeof(float));
    s.bound = dt_malloc(maxn * sizeof(double));
    s.r.e.hook = replay_hook;
    s.r.e.hook_arg = &s;

    res->from_ckpt = ck.step;
    res->first = opt->step;
    res->last = opt->step + opt->steps - 1;
    res->reproduced = 1;
    double t0 = dt_now();
    s.first = ck.step;
    progress_init(&s.prog, (enum progress_mode)opt->progress, "divtrace replay");
    for (uint64_t step = ck.step; step <= res->last; step++) {
        s.step = step;
        replay_progress(&s, -1);
        run_step_begin(&s.r, step);
        fault_between(&s.r, step);
        /* the recording flipped the bit before it took that step's
         * checkpoint: a replay from that very checkpoint has it already */
        if (s.tc.flip_set && step == s.tc.flip_step && step > ck.step) {
            int i = graph_find(&s.r.g, s.tc.flip_tensor);
            exec_get(&s.r.e, i, s.r.host);
            uint32_t u;
            memcpy(&u, &s.r.host[s.tc.flip_index], sizeof u);
            u ^= 1u << s.tc.flip_bit;
            memcpy(&s.r.host[s.tc.flip_index], &u, sizeof u);
            exec_set(&s.r.e, i, s.r.host);
        }
        s.step = step;
        s.checking = opt->against == REPLAY_ORACLE && step >= opt->step;
        run_step_exec(&s.r, step, UINT64_MAX);
        double loss = run_loss(&s.r, step);
        if (res->reproduced &&
            !replay_compare(&s, &tf->steps[step], tf->level, keep, hashes, loss)) {
            res->reproduced = 0;
            if (opt->against == REPLAY_SAME)
                break; /* stop at the first mismatch */
        }
        exec_advance(&s.r.e);
    }
    res->seconds = dt_now() - t0;
    progress_end(&s.prog, "%s%ssteps %" PRIu64 " to %" PRIu64 " in %.1f s", opt->label ? opt->label : "",
                 opt->label ? ": " : "", ck.step, s.step, res->seconds);
    if (!res->reproduced)
        replay_config_diff(&s, tf, res->config_diff, sizeof res->config_diff);
    rc = DT_OK;
out:
    trace_ckpt_free(&ck);
    free(keep);
    free(hashes);
    replay_free_state(&s);
    return rc;
}

static const char *replay_json_tri(int v)
{
    return v < 0 ? "null" : v ? "true" : "false";
}

void replay_check_json(FILE *f, const struct trace_file *tf, const struct replay_opcheck *c)
{
    fprintf(f, "{\"step\": %" PRIu64 ", \"op\": %d, \"name\": ", c->step, c->op);
    json_put_str(f, tf->ops[c->op].name);
    fprintf(f, ", \"class\": \"%s\", \"max_ulp\": ", replay_class_name(c->cls));
    if (c->max_ulp == UINT64_MAX)
        fputs("null", f);
    else
        fprintf(f, "%" PRIu64, c->max_ulp);
    fprintf(f, ", \"max_error_over_bound\": ");
    json_put_num(f, c->max_ratio);
    fprintf(f, ", \"algorithm\": ");
    if (c->algorithm[0])
        json_put_str(f, c->algorithm);
    else
        fputs("null", f);
    fprintf(f, ", \"bound\": \"%s\", \"bitwise_own\": %s, \"inputs_as_recorded\": %s, "
            "\"recorded_statistics_admissible\": %s", c->normwise ? "normwise" : "elementwise",
            replay_json_tri(c->bitwise), replay_json_tri(c->inputs_recorded), replay_json_tri(c->recorded_ok));
    if (c->cls != REPLAY_EXACT) {
        fprintf(f, ", \"worst\": {\"index\": %" PRIu64 ", \"value\": ", c->worst);
        json_put_num(f, c->worst_value);
        fprintf(f, ", \"exact\": ");
        json_put_num(f, c->worst_exact);
        fprintf(f, ", \"bound\": ");
        json_put_num(f, c->worst_bound);
        fputc('}', f);
    }
    fputc('}', f);
}

void replay_result_free(struct replay_result *res)
{
    free(res->check);
    memset(res, 0, sizeof *res);
}

static int replay_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            dt_error_set("writing a replay's result: %s", strerror(errno));
            return DT_ERR;
        }
        c += k;
        n -= (size_t)k;
    }
    return DT_OK;
}

static int replay_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            dt_error_set("reading a replay's result: %s", k ? strerror(errno) : "it ended early");
            return DT_ERR;
        }
        c += k;
        n -= (size_t)k;
    }
    return DT_OK;
}

/* A status word (0: a result follows, 1: an error message of
 * REPLAY_MSG bytes does), then the struct as it is and its checks: both
 * ends are one program. */
#define REPLAY_MSG 512

int replay_result_send(int fd, const struct replay_result *res)
{
    uint32_t ok = 0;
    struct replay_result h = *res;
    h.check = NULL;
    if (replay_write_all(fd, &ok, sizeof ok) < 0 || replay_write_all(fd, &h, sizeof h) < 0)
        return DT_ERR;
    return replay_write_all(fd, res->check, (size_t)res->ncheck * sizeof *res->check);
}

int replay_error_send(int fd, const char *msg)
{
    uint32_t bad = 1;
    char text[REPLAY_MSG] = "";
    snprintf(text, sizeof text, "%s", msg);
    if (replay_write_all(fd, &bad, sizeof bad) < 0)
        return DT_ERR;
    return replay_write_all(fd, text, sizeof text);
}

int replay_result_recv(int fd, struct replay_result *res)
{
    memset(res, 0, sizeof *res);
    uint32_t status;
    if (replay_read_all(fd, &status, sizeof status) < 0)
        return DT_ERR;
    if (status != 0) {
        char text[REPLAY_MSG];
        if (replay_read_all(fd, text, sizeof text) < 0)
            return DT_ERR;
        text[sizeof text - 1] = 0;
        dt_error_set("%s", text);
        return DT_ERR;
    }
    if (replay_read_all(fd, res, sizeof *res) < 0)
        return DT_ERR;
    res->check = NULL;
    if (res->ncheck < 0 || res->ncheck > (1 << 24)) {
        dt_error_set("reading a replay's result: %d checks", res->ncheck);
        return DT_ERR;
    }
    res->capcheck = res->ncheck;
    res->check = dt_calloc((size_t)res->ncheck + 1, sizeof *res->check);
    if (replay_read_all(fd, res->check, (size_t)res->ncheck * sizeof *res->check) < 0) {
        replay_result_free(res);
        return DT_ERR;
    }
    return DT_OK;
}
