/* test_gpu_dnn.c: the cudnn backend's cuDNN kernels (src/gpu/gpu_dnn.cu)
 * against the exact oracle (reference/oracle.h): convolution and its two
 * backward ops on PredNet's layer shapes under each --cudnn-algo mode, the
 * repeatability of the deterministic mode, the nondeterminism of
 * BWD_FILTER_ALGO_0 (counted and printed, not required), and the pooling,
 * bias and activation kernels; the deterministic mode's engines (cuDNN's
 * backend API) built again from the names a trace records; data gradients
 * of several pairs (one call of their stacked shape) against a host sum of
 * their own, in every mode. Skips (77) without a GPU.
 * Dimension letters: N batch, C input channels, K output channels, H x W
 * image, R x S kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "oracle.h"
#include "pairs_testutil.h"
#include "test_util.h"
#include "util.h"

#define GD_MAX_LEAVES 48
#define GD_MAX_OPS 32
#define GD_RUNS 20   /* runs of the nondeterministic algorithms */

static uint32_t gd_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- a graph of input leaves and op nodes, with the oracle's answers -------- */

struct gd {
    struct graph g;
    int nleaf, leaf[GD_MAX_LEAVES];
    float *val[GD_MAX_LEAVES];
    int nop, op[GD_MAX_OPS];
    float *exact[GD_MAX_OPS];     /* the oracle's value of each op */
    double *bound[GD_MAX_OPS];    /* its bound for direct float32 summation */
    uint64_t rng;
};

static void gd_init(struct gd *t, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    graph_init(&t->g);
    t->rng = seed;
}

static void gd_free(struct gd *t)
{
    for (int k = 0; k < t->nleaf; k++)
        free(t->val[k]);
    for (int k = 0; k < t->nop; k++) {
        free(t->exact[k]);
        free(t->bound[k]);
    }
    graph_free(&t->g);
    memset(t, 0, sizeof *t);
}

/* An input leaf (N,C,H,W) with values uniform in [lo, hi]. */
static int gd_leaf(struct gd *t, const char *name, int ndim, uint32_t a, uint32_t b, uint32_t c,
                   uint32_t d, double lo, double hi)
{
    assert_true(t->nleaf < GD_MAX_LEAVES);
    uint32_t shape[4] = {a, b, c, d};
    int i = graph_input(&t->g, name, ndim, shape);
    size_t n = t->g.nodes[i].count;
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t j = 0; j < n; j++)
        v[j] = (float)tu_rand_uniform(&t->rng, lo, hi);
    t->leaf[t->nleaf] = i;
    t->val[t->nleaf++] = v;
    return i;
}

static int gd_add_op(struct gd *t, int i)
{
    assert_true(t->nop < GD_MAX_OPS);
    t->op[t->nop] = i;
    return t->nop++;
}

/* An op node graph.h has no constructor for (the backward ops): a leaf
 * turned into the op, as graph_backward would have made it. */
static int gd_raw_op(struct gd *t, const char *name, enum op_type ty, int ndim, uint32_t a,
                     uint32_t b, uint32_t c, uint32_t d, int x0, int x1, const union op_params *p)
{
    uint32_t shape[4] = {a, b, c, d};
    int i = graph_input(&t->g, name, ndim, shape);
    struct node *nd = &t->g.nodes[i];
    nd->type = ty;
    nd->kind = TRACE_KIND_BACKWARD;
    nd->ninputs = x1 >= 0 ? 2 : 1;
    nd->inputs[0] = x0;
    nd->inputs[1] = x1;
    if (p)
        nd->p = *p;
    return gd_add_op(t, i);
}

static const float *gd_val(const struct gd *t, int node)
{
    for (int k = 0; k < t->nleaf; k++)
        if (t->leaf[k] == node)
            return t->val[k];
    fail_msg("node %d is not a leaf", node);
    return NULL;
}

/* The oracle's value and bound of every op. */
static void gd_oracle(struct gd *t)
{
    struct backend_step st = {.step = 0};
    for (int k = 0; k < t->nop; k++) {
        const struct node *nd = &t->g.nodes[t->op[k]];
        const float *in[OP_MAX_INPUTS];
        for (int j = 0; j < nd->ninputs; j++)
            in[j] = gd_val(t, nd->inputs[j]);
        t->exact[k] = malloc(nd->count * sizeof(float));
        t->bound[k] = malloc(nd->count * sizeof(double));
        assert_non_null(t->exact[k]);
        assert_non_null(t->bound[k]);
        if (oracle_op(&t->g, nd, t->exact[k], in, &st) < 0 ||
            oracle_bound(&t->g, nd, t->bound[k], in, &st) < 0)
            fail_msg("oracle: %s", dt_error());
    }
}

/* ---- runs on a backend ------------------------------------------------------------ */

struct gd_run {
    const struct backend_ops *be;
    void *ctx;
    struct exec e;
    int started;
};

/* A context for the graph with --cudnn-algo algo: 0, or -1 with dt_error set
 * (the context is gone then). */
static int gd_start_with(struct gd_run *r, struct gd *t, const struct backend_ops *be, const char *algo,
                         const char *algos)
{
    memset(r, 0, sizeof *r);
    struct backend_options bo = {.threads = 1, .cudnn_algo = algo, .cudnn_algos = algos, .device = 0};
    r->be = be;
    if (be->init(&r->ctx, &bo) < 0)
        fail_msg("%s init: %s", be->name, dt_error());
    if (exec_init(&r->e, &t->g, be, r->ctx) < 0) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dt_error());
        exec_free(&r->e);
        be->free(r->ctx);
        dt_error_set("%s", why);
        return -1;
    }
    r->started = 1;
    for (int k = 0; k < t->nleaf; k++)
        exec_set(&r->e, t->leaf[k], t->val[k]);
    return 0;
}

static int gd_start(struct gd_run *r, struct gd *t, const struct backend_ops *be, const char *algo)
{
    return gd_start_with(r, t, be, algo, NULL);
}

static void gd_stop(struct gd_run *r)
{
    if (!r->started)
        return;
    exec_free(&r->e);
    r->be->free(r->ctx);
    r->started = 0;
}

/* Op k's values after the last step (malloc'd). */
static float *gd_get(struct gd_run *r, const struct gd *t, int k)
{
    const struct node *nd = &t->g.nodes[t->op[k]];
    float *v = malloc(nd->count * sizeof *v);
    assert_non_null(v);
    exec_get(&r->e, t->op[k], v);
    return v;
}

/* The backend's description of itself, key `key` (static copy). */
static const char *gd_config(struct gd_run *r, const char *key)
{
    static char out[4096];
    struct trace_config cfg;
    memset(&cfg, 0, sizeof cfg);
    r->be->describe(r->ctx, &cfg);
    const char *v = trace_config_get(&cfg, key);
    snprintf(out, sizeof out, "%s", v ? v : "(absent)");
    trace_config_free(&cfg);
    return out;
}

/* ---- comparisons -------------------------------------------------------------------- */

struct gd_err {
    double worst;        /* largest error / bound */
    size_t over, n;      /* elements over the bound, of n with a finite bound */
    size_t first;        /* the first over */
};

/* Op k's values got against the oracle: |got - exact| <= bound; bound 0
 * (ops that select or move values) means bit for bit; NaN wants NaN. */
static struct gd_err gd_measure(const struct gd *t, int k, const float *got)
{
    const struct node *nd = &t->g.nodes[t->op[k]];
    struct gd_err e = {0, 0, 0, 0};
    for (size_t i = 0; i < nd->count; i++) {
        double b = t->bound[k][i];
        float x = t->exact[k][i];
        if (isinf(b))
            continue;
        e.n++;
        int bad;
        double err = 0;
        if (isnan(x))
            bad = !isnan(got[i]);
        else if (b == 0)
            bad = gd_bits(got[i]) != gd_bits(x);
        else
            err = fabs((double)got[i] - (double)x), bad = !(err <= b);
        if (bad && e.over++ == 0)
            e.first = i;
        if (b > 0 && err / b > e.worst)
            e.worst = err / b;
    }
    return e;
}

static void gd_expect(const struct gd *t, int k, const float *got, const char *how)
{
    const struct node *nd = &t->g.nodes[t->op[k]];
    struct gd_err e = gd_measure(t, k, got);
    if (e.over)
        fail_msg("%s %s: %zu of %zu elements out of bounds; first [%zu] = %.9g (0x%08x), exact %.9g "
                 "(0x%08x), bound %.3g", how, nd->name, e.over, e.n, e.first, (double)got[e.first],
                 gd_bits(got[e.first]), (double)t->exact[k][e.first], gd_bits(t->exact[k][e.first]),
                 t->bound[k][e.first]);
}

/* ---- the convolution graph: PredNet's layer shapes ---------------------------------- */

struct gd_case {
    uint32_t n, c, h, w, k, r, s;
};

static const struct gd_case gd_cases[] = {
    {1, 19, 64, 64, 1, 3, 3},  {4, 19, 64, 64, 1, 3, 3},   /* layer 0: the image's prediction */
    {1, 80, 32, 32, 16, 3, 3}, {4, 80, 32, 32, 16, 3, 3},  /* layer 1 */
    {1, 192, 8, 8, 64, 3, 3},  {4, 192, 8, 8, 64, 3, 3},   /* a deep layer */
};
#define GD_NCASE ((int)(sizeof gd_cases / sizeof gd_cases[0]))

enum { GD_FWD, GD_BWD_DATA, GD_BWD_FILTER, GD_NDIR };
static const char *const gd_dir_name[GD_NDIR] = {"fwd", "bwd_data", "bwd_filter"};

static struct gd gd_conv;          /* every case's x, w, dy and three ops */
static int gd_conv_op[GD_NCASE][GD_NDIR];

static int gd_conv_setup(void **state)
{
    struct gd *t = &gd_conv;
    gd_init(t, 0x5eed0d0e);
    for (int i = 0; i < GD_NCASE; i++) {
        const struct gd_case *s = &gd_cases[i];
        char name[64];
        snprintf(name, sizeof name, "c%d.x", i);
        int x = gd_leaf(t, name, 4, s->n, s->c, s->h, s->w, -1, 1);
        snprintf(name, sizeof name, "c%d.w", i);
        int w = gd_leaf(t, name, 4, s->k, s->c, s->r, s->s, -1, 1);
        snprintf(name, sizeof name, "c%d.dy", i);
        int dy = gd_leaf(t, name, 4, s->n, s->k, s->h, s->w, -1, 1);
        snprintf(name, sizeof name, "c%d.fwd", i);
        gd_conv_op[i][GD_FWD] = gd_add_op(t, graph_conv2d(&t->g, name, x, w));
        snprintf(name, sizeof name, "c%d.bwd_data", i);
        gd_conv_op[i][GD_BWD_DATA] = gd_raw_op(t, name, OP_CONV2D_BWD_DATA, 4, s->n, s->c, s->h, s->w,
                                               dy, w, NULL);
        union op_params p;
        memset(&p, 0, sizeof p);
        p.conv.r = s->r;
        p.conv.s = s->s;
        snprintf(name, sizeof name, "c%d.bwd_filter", i);
        gd_conv_op[i][GD_BWD_FILTER] = gd_raw_op(t, name, OP_CONV2D_BWD_FILTER, 4, s->k, s->c, s->r,
                                                 s->s, x, dy, &p);
    }
    gd_oracle(t);
    *state = t;
    return 0;
}

static int gd_conv_teardown(void **state)
{
    gd_free(&gd_conv);
    return 0;
}

static void gd_case_str(char *buf, size_t size, int i)
{
    const struct gd_case *s = &gd_cases[i];
    snprintf(buf, size, "%ux%ux%ux%u k%u %ux%u", s->n, s->c, s->h, s->w, s->k, s->r, s->s);
}

/* The algorithm the description names for direction d of the shape
 * ("NxCxHxW kK RxS"), or "?" if none. */
static const char *gd_algo_of(const char *algos, int d, const char *shape)
{
    static char name[192];
    char pat[160];
    snprintf(pat, sizeof pat, "%s %s ", gd_dir_name[d], shape);
    const char *p = algos;
    /* the key must start an entry: at the string's start or after "; " */
    while ((p = strstr(p, pat)) && p != algos && !(p >= algos + 2 && p[-2] == ';' && p[-1] == ' '))
        p++;
    if (!p || sscanf(p + strlen(pat), "%191s", name) != 1)
        snprintf(name, sizeof name, "?");
    return name;
}

/* The same for case i. */
static const char *gd_algo(const char *algos, int i, int d)
{
    char key[128];
    gd_case_str(key, sizeof key, i);
    return gd_algo_of(algos, d, key);
}

/* FFT and Winograd algorithms multiply transformed inputs: the oracle's
 * bound for direct summation does not cover them (divtrace-replay(1)). */
static int gd_is_transform(const char *algo) { return strstr(algo, "FFT") || strstr(algo, "WINOGRAD"); }

/* Check every conv op of a finished run: within the bound for direct
 * algorithms; for transform algorithms the error is printed in bounds. */
static void gd_conv_check(struct gd_run *r, const char *mode, float *out[GD_NCASE][GD_NDIR])
{
    char algos[16384];
    snprintf(algos, sizeof algos, "%s", gd_config(r, "cudnn_algos"));
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++) {
            int k = gd_conv_op[i][d];
            const char *algo = gd_algo(algos, i, d);
            char how[160], shape[96];
            gd_case_str(shape, sizeof shape, i);
            snprintf(how, sizeof how, "--cudnn-algo %s, %s %s", mode, gd_dir_name[d], algo);
            if (strcmp(algo, "?") == 0)
                fail_msg("%s: cudnn_algos does not name %s %s: %s", how, gd_dir_name[d], shape, algos);
            struct gd_err e = gd_measure(&gd_conv, k, out[i][d]);
            printf("  %-10s %-22s %-22s worst error %.3f bounds%s\n", gd_dir_name[d], shape, algo,
                   e.worst, gd_is_transform(algo) ? " (transform: bound not applicable)" : "");
            if (!gd_is_transform(algo))
                gd_expect(&gd_conv, k, out[i][d], how);
            else if (e.over)
                printf("    %zu of %zu elements over the direct-summation bound\n", e.over, e.n);
        }
}

/* One step with --cudnn-algo mode; out[i][d] malloc'd. */
static void gd_conv_run(const char *mode, float *out[GD_NCASE][GD_NDIR], int check)
{
    struct gd_run r;
    if (gd_start(&r, &gd_conv, &backend_cudnn, mode) < 0)
        fail_msg("--cudnn-algo %s: %s", mode, dt_error());
    exec_step(&r.e, 0);
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++)
            out[i][d] = gd_get(&r, &gd_conv, gd_conv_op[i][d]);
    printf("--cudnn-algo %s: cudnn_algos = %s\n", mode, gd_config(&r, "cudnn_algos"));
    if (check)
        gd_conv_check(&r, mode, out);
    gd_stop(&r);
}

static void gd_conv_out_free(float *out[GD_NCASE][GD_NDIR])
{
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++)
            free(out[i][d]);
}

/* The cpu backend itself within the bound: the oracle and the test agree. */
static void test_conv_cpu(void **state)
{
    struct gd_run r;
    assert_int_equal(gd_start(&r, &gd_conv, &backend_cpu, NULL), 0);
    exec_step(&r.e, 0);
    for (int k = 0; k < gd_conv.nop; k++) {
        float *v = gd_get(&r, &gd_conv, k);
        gd_expect(&gd_conv, k, v, "cpu");
        free(v);
    }
    gd_stop(&r);
}

/* Direct algorithms chosen by number: IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1,
 * BWD_FILTER_ALGO_1 (all deterministic). */
static void test_conv_algo1(void **state)
{
    float *out[GD_NCASE][GD_NDIR];
    gd_conv_run("1", out, 1);
    gd_conv_out_free(out);
}

/* The default mode: bitwise the same in two runs (fresh contexts, so the
 * algorithm choice is made twice too) and in two steps of one run. */
static void test_conv_deterministic(void **state)
{
    float *a[GD_NCASE][GD_NDIR], *b[GD_NCASE][GD_NDIR];
    gd_conv_run("deterministic", a, 1);
    gd_conv_run("deterministic", b, 0);
    struct gd_run r;
    assert_int_equal(gd_start(&r, &gd_conv, &backend_cudnn, "deterministic"), 0);
    exec_step(&r.e, 0);
    exec_step(&r.e, 1);
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++) {
            int k = gd_conv_op[i][d];
            size_t n = gd_conv.g.nodes[gd_conv.op[k]].count;
            float *c = gd_get(&r, &gd_conv, k);
            for (size_t j = 0; j < n; j++)
                if (gd_bits(a[i][d][j]) != gd_bits(b[i][d][j]) || gd_bits(a[i][d][j]) != gd_bits(c[j]))
                    fail_msg("deterministic %s: runs differ at [%zu]: 0x%08x, 0x%08x, 0x%08x",
                             gd_conv.g.nodes[gd_conv.op[k]].name, j, gd_bits(a[i][d][j]),
                             gd_bits(b[i][d][j]), gd_bits(c[j]));
            free(c);
        }
    gd_stop(&r);
    gd_conv_out_free(a);
    gd_conv_out_free(b);
}

/* The fastest mode: the algorithms cuDNN's timing picked, twice (the choice
 * may change between runs: printed, not required either way). */
static void test_conv_fastest(void **state)
{
    float *a[GD_NCASE][GD_NDIR], *b[GD_NCASE][GD_NDIR];
    gd_conv_run("fastest", a, 1);
    gd_conv_run("fastest", b, 1);
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++) {
            size_t n = gd_conv.g.nodes[gd_conv.op[gd_conv_op[i][d]]].count;
            char shape[96];
            gd_case_str(shape, sizeof shape, i);
            printf("  fastest, two runs: %s %s %s\n", gd_dir_name[d], shape,
                   memcmp(a[i][d], b[i][d], n * sizeof(float)) ? "DIFFER" : "same");
        }
    gd_conv_out_free(a);
    gd_conv_out_free(b);
}

static uint64_t gd_hash(const float *v, size_t n)
{
    const unsigned char *p = (const unsigned char *)v;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n * sizeof *v; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* --cudnn-algo 0: BWD_FILTER_ALGO_0 and BWD_DATA_ALGO_0 sum with atomics
 * (cuDNN: not reproducible). GD_RUNS steps of one run, each result within
 * the bound; the number of distinct results is what the study measures,
 * printed (1 is possible and not a failure). */
static void test_conv_algo0(void **state)
{
    struct gd_run r;
    if (gd_start(&r, &gd_conv, &backend_cudnn, "0") < 0)
        fail_msg("--cudnn-algo 0: %s", dt_error());
    char algos[16384];
    snprintf(algos, sizeof algos, "%s", gd_config(&r, "cudnn_algos"));
    printf("--cudnn-algo 0: cudnn_algos = %s\n", algos);
    uint64_t h[GD_NCASE][GD_NDIR][GD_RUNS];
    for (int run = 0; run < GD_RUNS; run++) {
        exec_step(&r.e, (uint64_t)run);
        for (int i = 0; i < GD_NCASE; i++)
            for (int d = 0; d < GD_NDIR; d++) {
                int k = gd_conv_op[i][d];
                float *v = gd_get(&r, &gd_conv, k);
                if (run == 0 || d != GD_FWD)
                    gd_expect(&gd_conv, k, v, "--cudnn-algo 0");
                h[i][d][run] = gd_hash(v, gd_conv.g.nodes[gd_conv.op[k]].count);
                free(v);
            }
    }
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++) {
            int distinct = 0;
            for (int a = 0; a < GD_RUNS; a++) {
                int seen = 0;
                for (int b = 0; b < a && !seen; b++)
                    seen = h[i][d][b] == h[i][d][a];
                distinct += !seen;
            }
            char shape[96];
            gd_case_str(shape, sizeof shape, i);
            printf("  %-10s %-22s %-14s %2d distinct results in %d runs\n", gd_dir_name[d], shape,
                   gd_algo(algos, i, d), distinct, GD_RUNS);
        }
    gd_stop(&r);
}

/* An algorithm number a direction does not have, or that does not run for
 * a shape, is refused at prepare with a message naming it: 8 is past every
 * direction's last (fwd has 0 to 7); 6 is past bwd_data's (0 to 5), unless
 * fwd's WINOGRAD (6) is refused for a shape first. */
static void gd_expect_refused(const char *algo, const char *want)
{
    struct gd_run r;
    if (gd_start(&r, &gd_conv, &backend_cudnn, algo) == 0) {
        gd_stop(&r);
        fail_msg("--cudnn-algo %s was accepted", algo);
    }
    char flag[64];
    snprintf(flag, sizeof flag, "--cudnn-algo %s", algo);
    printf("%s: refused: %s\n", flag, dt_error());
    if (!strstr(dt_error(), flag) || (want && !strstr(dt_error(), want)))
        fail_msg("--cudnn-algo %s: the message does not say '%s'%s%s", algo, flag,
                 want ? " and " : "", want ? want : "");
}

static void test_conv_algo_invalid(void **state)
{
    gd_expect_refused("8", "fwd convolution has algorithms 0 to 7");
    gd_expect_refused("6", NULL);
}

/* A recording's algorithms (backend_options' cudnn_algos, as a replay
 * gives them) are used as they are: those of --cudnn-algo 0 (ALGO_0, which
 * the deterministic mode never picks) with the deterministic mode asked
 * for; each convolution reports its own; results within bounds. A list
 * without an entry for some convolution is refused, naming it. */
static void test_conv_recorded(void **state)
{
    struct gd_run r;
    if (gd_start(&r, &gd_conv, &backend_cudnn, "0") < 0)
        fail_msg("--cudnn-algo 0: %s", dt_error());
    static char rec[16384];
    snprintf(rec, sizeof rec, "%s", gd_config(&r, "cudnn_algos"));
    gd_stop(&r);
    assert_non_null(strstr(rec, "ALGO_0 nondet"));
    if (gd_start_with(&r, &gd_conv, &backend_cudnn, "deterministic", rec) < 0)
        fail_msg("recorded algorithms: %s", dt_error());
    assert_string_equal(gd_config(&r, "cudnn_algos"), rec);
    exec_step(&r.e, 0);
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++) {
            int k = gd_conv_op[i][d], transform = -1;
            const char *name = r.be->op_algorithm(r.ctx, &gd_conv.g, gd_conv.op[k], &transform);
            assert_non_null(name);
            assert_string_equal(name, gd_algo(rec, i, d));
            assert_int_equal(transform, 0);
            float *v = gd_get(&r, &gd_conv, k);
            gd_expect(&gd_conv, k, v, "recorded algorithms");
            free(v);
        }
    gd_stop(&r);
    /* the first entry dropped */
    const char *rest = strchr(rec, ';');
    assert_non_null(rest);
    if (gd_start_with(&r, &gd_conv, &backend_cudnn, "deterministic", rest + 1) == 0) {
        gd_stop(&r);
        fail_msg("a list without %.*s was accepted", (int)(rest - rec), rec);
    }
    printf("recorded algorithms, one missing: refused: %s\n", dt_error());
    assert_non_null(strstr(dt_error(), "name none of"));
}

/* --cudnn-algo deterministic-fast (cuDNN's backend API engines): twice the
 * same choice and bitwise the same outputs; the recorded names (global
 * index and knobs) build the same engines again in a context whose own
 * mode (deterministic) would choose legacy algorithms, with the same
 * outputs; every engine is reported for the normwise bound, and the default
 * mode runs no engine. */
static void test_conv_recorded_engines(void **state)
{
    struct gd_run r;
    float *a[GD_NCASE][GD_NDIR];
    static char rec[16384];
    assert_int_equal(gd_start(&r, &gd_conv, &backend_cudnn, "deterministic-fast"), 0);
    snprintf(rec, sizeof rec, "%s", gd_config(&r, "cudnn_algos"));
    printf("deterministic-fast: cudnn_algos = %s\n", rec);
    assert_non_null(strstr(rec, "ENGINE"));
    assert_null(strstr(rec, "nondet"));
    /* cuDNN 9.14's engines for these shapes have knobs (ENGINE70.K2=12.K18=0
     * on the H200): a name without any has lost them, and a replay would
     * build the engine with cuDNN's default choices */
    assert_non_null(strstr(rec, ".K"));
    exec_step(&r.e, 0);
    for (int i = 0; i < GD_NCASE; i++)
        for (int d = 0; d < GD_NDIR; d++)
            a[i][d] = gd_get(&r, &gd_conv, gd_conv_op[i][d]);
    gd_stop(&r);
    assert_int_equal(gd_start(&r, &gd_conv, &backend_cudnn, "deterministic"), 0);
    assert_null(strstr(gd_config(&r, "cudnn_algos"), "ENGINE"));
    gd_stop(&r);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: a fresh choice; pass 1: the recorded names */
        if (pass == 0 ? gd_start(&r, &gd_conv, &backend_cudnn, "deterministic-fast") < 0
                      : gd_start_with(&r, &gd_conv, &backend_cudnn, "deterministic", rec) < 0)
            fail_msg("deterministic-fast, pass %d: %s", pass, dt_error());
        assert_string_equal(gd_config(&r, "cudnn_algos"), rec);
        exec_step(&r.e, 0);
        for (int i = 0; i < GD_NCASE; i++)
            for (int d = 0; d < GD_NDIR; d++) {
                int k = gd_conv_op[i][d], transform = -1;
                size_t n = gd_conv.g.nodes[gd_conv.op[k]].count;
                const char *name = r.be->op_algorithm(r.ctx, &gd_conv.g, gd_conv.op[k], &transform);
                assert_non_null(name);
                if (strncmp(name, "ENGINE", 6) == 0)
                    assert_int_equal(transform, 1);
                float *c = gd_get(&r, &gd_conv, k);
                for (size_t j = 0; j < n; j++)
                    if (gd_bits(a[i][d][j]) != gd_bits(c[j]))
                        fail_msg("deterministic-fast, pass %d: %s differs at [%zu]: 0x%08x, 0x%08x", pass,
                                 gd_conv.g.nodes[gd_conv.op[k]].name, j, gd_bits(a[i][d][j]), gd_bits(c[j]));
                free(c);
            }
        gd_stop(&r);
    }
    gd_conv_out_free(a);
}

/* ---- data gradients of several pairs: one call of the stacked shape -------------- */

/* Case c's leaves are GD_PAIR_MAX pairs dy_j (N,K,H,W), w_j (K,C,R,S); op
 * q sums the first m of them (op.h's conv2d_bwd_data of 2 m inputs, as
 * graph_backward makes it for a set of gate convolutions). Case 3 has two
 * one-pair ops, which DIVTRACE_CUDNN_FUSE=all groups, and case 0 two ops
 * of two pairs, which it must not (a group runs one pair a member). */
#define GD_PAIR_MAX 4
#define GD_NPAIRCASE 4
static const struct pt_shape gd_pair_cases[GD_NPAIRCASE] = {
    {1, 80, 32, 32, 16, 3, 3}, {4, 80, 32, 32, 16, 3, 3}, {4, 19, 64, 64, 1, 3, 3}, {3, 8, 9, 6, 5, 5, 5},
};
static const int gd_pair_ops[][2] = {/* case, m */
                                     {0, 1}, {0, 2}, {0, 2}, {0, 4}, {1, 1}, {1, 2}, {1, 4},
                                     {2, 1}, {2, 2}, {2, 4}, {3, 1}, {3, 1}, {3, 2}, {3, 4}};
#define GD_NPAIROP ((int)(sizeof gd_pair_ops / sizeof gd_pair_ops[0]))

static struct gd gd_pairs;

/* Every op's exact value and bound from the host's sum (pairs_testutil.h),
 * not the oracle; gd_measure wants the half ulp of the rounding in the bound. */
static int gd_pairs_setup(void **state)
{
    struct gd *t = &gd_pairs;
    gd_init(t, 0x9a125eed);
    int dy[GD_NPAIRCASE][GD_PAIR_MAX], w[GD_NPAIRCASE][GD_PAIR_MAX];
    for (int c = 0; c < GD_NPAIRCASE; c++)
        for (int j = 0; j < GD_PAIR_MAX; j++) {
            const struct pt_shape *s = &gd_pair_cases[c];
            char name[64];
            snprintf(name, sizeof name, "p%d.dy%d", c, j);
            dy[c][j] = gd_leaf(t, name, 4, s->n, s->k, s->h, s->w, -1, 1);
            snprintf(name, sizeof name, "p%d.w%d", c, j);
            w[c][j] = gd_leaf(t, name, 4, s->k, s->c, s->r, s->s, -1, 1);
        }
    for (int q = 0; q < GD_NPAIROP; q++) {
        int c = gd_pair_ops[q][0], m = gd_pair_ops[q][1];
        const struct pt_shape *s = &gd_pair_cases[c];
        char name[64];
        snprintf(name, sizeof name, "p%d.bwd_data%d.%d", c, m, q);
        int k = gd_raw_op(t, name, OP_CONV2D_BWD_DATA, 4, s->n, s->c, s->h, s->w, dy[c][0], w[c][0], NULL);
        struct node *nd = &t->g.nodes[t->op[k]];
        const float *vdy[GD_PAIR_MAX], *vw[GD_PAIR_MAX];
        nd->ninputs = 2 * m;
        for (int j = 0; j < m; j++) {
            nd->inputs[2 * j] = dy[c][j];
            nd->inputs[2 * j + 1] = w[c][j];
            vdy[j] = gd_val(t, dy[c][j]);
            vw[j] = gd_val(t, w[c][j]);
        }
        t->exact[k] = malloc(nd->count * sizeof(float));
        t->bound[k] = malloc(nd->count * sizeof(double));
        assert_true(t->exact[k] && t->bound[k]);
        pt_bwd_data(vdy, vw, m, s, t->exact[k], t->bound[k]);
        for (size_t i = 0; i < nd->count; i++)
            t->bound[k][i] += 0.5 * oracle_ulp32(t->exact[k][i]);
    }
    *state = t;
    return 0;
}

static int gd_pairs_teardown(void **state) { gd_free(&gd_pairs); return 0; }

/* One step of gd_pairs with --cudnn-algo mode (or the recorded list algos):
 * out[q] op q's values (malloc'd), rec (if not NULL, 16384 bytes) the
 * description's cudnn_algos. Each op runs the algorithm cudnn_algos lists
 * for its stacked shape (K = m times a pair's) and is within the host's
 * bound, unless that is a transform or an engine (which may be one:
 * the error is printed). */
static void gd_pairs_run(const char *mode, const char *algos, float *out[GD_NPAIROP], char *rec)
{
    struct gd_run r;
    if (gd_start_with(&r, &gd_pairs, &backend_cudnn, mode, algos) < 0)
        fail_msg("pairs, --cudnn-algo %s%s: %s", mode, algos ? " (recorded)" : "", dt_error());
    exec_step(&r.e, 0);
    static char list[16384];
    snprintf(list, sizeof list, "%s", gd_config(&r, "cudnn_algos"));
    if (rec)
        snprintf(rec, 16384, "%s", list);
    for (int q = 0; q < GD_NPAIROP; q++) {
        const struct pt_shape *s = &gd_pair_cases[gd_pair_ops[q][0]];
        char shape[96];
        snprintf(shape, sizeof shape, "%ux%ux%ux%u k%u %ux%u", s->n, s->c, s->h, s->w,
                 s->k * (uint32_t)gd_pair_ops[q][1], s->r, s->s);
        int transform = -1;
        const char *name = r.be->op_algorithm(r.ctx, &gd_pairs.g, gd_pairs.op[q], &transform);
        char listed[192];
        snprintf(listed, sizeof listed, "%s", gd_algo_of(list, GD_BWD_DATA, shape));
        if (name && strcmp(name, listed) != 0 && gd_pair_ops[q][1] == 1) {
            /* a one-pair op may run in a group of two (fastest mode, or DIVTRACE_CUDNN_FUSE=all) */
            char grouped[128];
            snprintf(grouped, sizeof grouped, "%ux%ux%ux%u k%u %ux%u g2", s->n, 2 * s->c, s->h, s->w, 2 * s->k,
                     s->r, s->s);
            snprintf(listed, sizeof listed, "%s", gd_algo_of(list, GD_BWD_DATA, grouped));
        }
        if (!name || strcmp(name, listed) != 0)
            fail_msg("pairs, --cudnn-algo %s: op %d runs %s, cudnn_algos lists %s for bwd_data %s: %s", mode, q,
                     name ? name : "(none)", listed, shape, list);
        out[q] = gd_get(&r, &gd_pairs, q);
        struct gd_err e = gd_measure(&gd_pairs, q, out[q]);
        int loose = gd_is_transform(name) || strncmp(name, "ENGINE", 6) == 0;
        printf("  %-18s %d pairs, bwd_data %-22s %-22s worst error %.3f bounds%s\n", mode, gd_pair_ops[q][1], shape,
               name, e.worst, loose && e.over ? " (over, not required)" : "");
        if (!loose)
            gd_expect(&gd_pairs, q, out[q], mode);
    }
    gd_stop(&r);
}

static void gd_pairs_free(float *out[GD_NPAIROP])
{
    for (int q = 0; q < GD_NPAIROP; q++)
        free(out[q]);
}

/* Two sets of outputs bit for bit equal; b freed. */
static void gd_pairs_same(float *a[GD_NPAIROP], float *b[GD_NPAIROP], const char *what)
{
    for (int q = 0; q < GD_NPAIROP; q++) {
        const struct node *nd = &gd_pairs.g.nodes[gd_pairs.op[q]];
        for (size_t i = 0; i < nd->count; i++)
            if (gd_bits(a[q][i]) != gd_bits(b[q][i]))
                fail_msg("pairs, %s: %s differs at [%zu]: 0x%08x, 0x%08x", what, nd->name, i, gd_bits(a[q][i]),
                         gd_bits(b[q][i]));
    }
    gd_pairs_free(b);
}

/* Every mode: within the bound; the deterministic modes bit for bit the
 * same in two runs, and a replay of deterministic-fast's recorded engines
 * (in a context whose own mode would choose legacy algorithms) the same
 * as its run. */
static void test_pairs_modes(void **state)
{
    float *a[GD_NPAIROP], *b[GD_NPAIROP];
    static char rec[16384];
    static const char *const det[] = {"deterministic", "deterministic-fast"};
    for (int k = 0; k < 2; k++) {
        gd_pairs_run(det[k], NULL, a, rec);
        gd_pairs_run(det[k], NULL, b, NULL);
        gd_pairs_same(a, b, det[k]);
        if (k == 1) {
            gd_pairs_run("deterministic", rec, b, NULL);
            gd_pairs_same(a, b, "deterministic-fast's engines recorded");
        }
        gd_pairs_free(a);
    }
    gd_pairs_run("1", NULL, a, NULL);
    gd_pairs_free(a);
    gd_pairs_run("fastest", NULL, a, NULL);
    gd_pairs_free(a);
}

/* DIVTRACE_CUDNN_FUSE=all groups data gradients of one pair in every mode:
 * case 3's two, not case 0's two ops of two pairs each. */
static void test_pairs_grouped(void **state)
{
    float *a[GD_NPAIROP];
    setenv("DIVTRACE_CUDNN_FUSE", "all", 1);
    struct gd_run r;
    if (gd_start(&r, &gd_pairs, &backend_cudnn, "deterministic") < 0)
        fail_msg("pairs, DIVTRACE_CUDNN_FUSE=all: %s", dt_error());
    char grouped[4096];
    snprintf(grouped, sizeof grouped, "%s", gd_config(&r, "cudnn_grouped"));
    gd_stop(&r);
    gd_pairs_run("deterministic", NULL, a, NULL);
    unsetenv("DIVTRACE_CUDNN_FUSE");
    gd_pairs_free(a);
    printf("DIVTRACE_CUDNN_FUSE=all: cudnn_grouped = %s\n", grouped);
    if (!strstr(grouped, "and 1 data-gradient sets"))
        fail_msg("pairs, DIVTRACE_CUDNN_FUSE=all: want one data-gradient set: %s", grouped);
}

/* ---- pooling, bias and activations on (N,C,H,W) ---------------------------------- */

/* Each op once on random data (no ties: ties are where cuDNN's pooling rule
 * is undocumented), against the oracle. In the deterministic mode bias_grad
 * and maxpool2_bwd run the cuda backend's kernels; in the fastest mode
 * cuDNN's. */
static void gd_image_ops(const char *mode)
{
    struct gd t;
    gd_init(&t, 0x1a2b3c4d);
    enum { N = 2, C = 8, H = 16, W = 16 };
    int x = gd_leaf(&t, "x", 4, N, C, H, W, -3, 3);
    int b = gd_leaf(&t, "b", 1, C, 0, 0, 0, -1, 1);
    int dy = gd_leaf(&t, "dy", 4, N, C, H, W, -1, 1);
    int yt = gd_leaf(&t, "y.tanh", 4, N, C, H, W, -1, 1);
    int ys = gd_leaf(&t, "y.sigmoid", 4, N, C, H, W, 0, 1);
    int dyp = gd_leaf(&t, "dy.pool", 4, N, C, H / 2, W / 2, -1, 1);
    gd_add_op(&t, graph_add_bias(&t.g, "add_bias", x, b));
    gd_raw_op(&t, "bias_grad", OP_BIAS_GRAD, 1, C, 0, 0, 0, dy, -1, NULL);
    gd_add_op(&t, graph_relu(&t.g, "relu", x));
    gd_add_op(&t, graph_tanh(&t.g, "tanh", x));
    gd_add_op(&t, graph_sigmoid(&t.g, "sigmoid", x));
    gd_raw_op(&t, "tanh_bwd", OP_TANH_BWD, 4, N, C, H, W, yt, dy, NULL);
    gd_raw_op(&t, "sigmoid_bwd", OP_SIGMOID_BWD, 4, N, C, H, W, ys, dy, NULL);
    gd_add_op(&t, graph_maxpool2(&t.g, "maxpool2", x));
    gd_raw_op(&t, "maxpool2_bwd", OP_MAXPOOL2_BWD, 4, N, C, H, W, x, dyp, NULL);
    gd_oracle(&t);
    struct gd_run r;
    if (gd_start(&r, &t, &backend_cudnn, mode) < 0)
        fail_msg("--cudnn-algo %s: %s", mode, dt_error());
    exec_step(&r.e, 0);
    printf("--cudnn-algo %s: bias_grad %s; maxpool2_bwd %s\n", mode, gd_config(&r, "cudnn_bias_grad"),
           gd_config(&r, "cudnn_pool_bwd"));
    int failed = 0;
    for (int k = 0; k < t.nop; k++) {
        float *v = gd_get(&r, &t, k);
        struct gd_err e = gd_measure(&t, k, v);
        printf("  %-12s worst error %.3f bounds, %zu of %zu over\n", t.g.nodes[t.op[k]].name, e.worst,
               e.over, e.n);
        if (e.over && !failed) {
            printf("    first [%zu] = %.9g (0x%08x), exact %.9g (0x%08x), bound %.3g\n", e.first,
                   (double)v[e.first], gd_bits(v[e.first]), (double)t.exact[k][e.first],
                   gd_bits(t.exact[k][e.first]), t.bound[k][e.first]);
            failed = 1;
        }
        free(v);
    }
    gd_stop(&r);
    gd_free(&t);
    if (failed)
        fail_msg("--cudnn-algo %s: an image op is out of its bound (above)", mode);
}

static void test_image_ops_deterministic(void **state) { gd_image_ops("deterministic"); }
static void test_image_ops_fastest(void **state) { gd_image_ops("fastest"); }

int main(void)
{
    void *ctx;
    struct backend_options bo = {.threads = 1};
    if (backend_cudnn.init(&ctx, &bo) < 0) {
        printf("test_gpu_dnn: skipped: %s\n", dt_error());
        return 77;
    }
    backend_cudnn.free(ctx);
    const struct CMUnitTest conv[] = {
        cmocka_unit_test(test_conv_cpu),
        cmocka_unit_test(test_conv_algo1),
        cmocka_unit_test(test_conv_deterministic),
        cmocka_unit_test(test_conv_fastest),
        cmocka_unit_test(test_conv_algo0),
        cmocka_unit_test(test_conv_algo_invalid),
        cmocka_unit_test(test_conv_recorded),
        cmocka_unit_test(test_conv_recorded_engines),
    };
    const struct CMUnitTest pairs[] = {
        cmocka_unit_test(test_pairs_modes),
        cmocka_unit_test(test_pairs_grouped),
    };
    const struct CMUnitTest image[] = {
        cmocka_unit_test(test_image_ops_deterministic),
        cmocka_unit_test(test_image_ops_fastest),
    };
    int rc = cmocka_run_group_tests_name("conv", conv, gd_conv_setup, gd_conv_teardown);
    rc |= cmocka_run_group_tests_name("pairs", pairs, gd_pairs_setup, gd_pairs_teardown);
    rc |= cmocka_run_group_tests_name("image ops", image, NULL, NULL);
    return rc ? 1 : 0;
}
