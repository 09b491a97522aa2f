/* test_autoencoder.c: the autoencoder's whole training step: its parameter
 * gradients against finite differences of an independent double-precision
 * model, bitwise determinism of repeated runs, model_init_param's
 * distribution and reproducibility, and autoencoder_build's shape checks.
 * Dimension letters: R batch rows, F features, I/O a layer's in/out width. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "exec.h"
#include "graph.h"
#include "model.h"
#include "stats.h"
#include "test_util.h"
#include "util.h"

#define AE_FEATURES 6
#define AE_BATCH 3
#define AE_MAPS 4
static const uint32_t ae_layers[AE_MAPS + 1] = {AE_FEATURES, 4, 3, 4, AE_FEATURES};

/* The parameter prefix of linear map l, as autoencoder.c names them. */
static void ae_prefix(int l, char *buf, size_t n)
{
    int nenc = AE_MAPS / 2;
    if (l < nenc)
        snprintf(buf, n, "enc%d", l + 1);
    else
        snprintf(buf, n, "dec%d", l - nenc + 1);
}

struct ae {
    struct model_spec spec;
    struct graph g;
    void *ctx;
    struct exec e;
    int loss, x;
    int w[AE_MAPS], b[AE_MAPS];   /* parameter nodes */
};

/* Build the autoencoder with `act`, its backward pass and, if oc, the
 * optimizer; start a cpu backend (one thread) and an executor. */
static void ae_init(struct ae *a, enum model_act act, const struct graph_opt_config *oc)
{
    memset(a, 0, sizeof *a);
    a->spec.name = "autoencoder";
    a->spec.nlayers = AE_MAPS + 1;
    memcpy(a->spec.layers, ae_layers, sizeof ae_layers);
    a->spec.act = act;
    a->spec.batch = AE_BATCH;
    graph_init(&a->g);
    a->loss = autoencoder_build(&a->g, &a->spec, AE_FEATURES);
    if (a->loss < 0)
        fail_msg("autoencoder_build: %s", dt_error());
    graph_backward(&a->g, a->loss);
    if (oc)
        graph_optimizer(&a->g, oc);
    a->x = graph_find(&a->g, "data.x");
    assert_true(a->x >= 0);
    for (int l = 0; l < AE_MAPS; l++) {
        char pre[16], name[32];
        ae_prefix(l, pre, sizeof pre);
        snprintf(name, sizeof name, "%s.W", pre);
        a->w[l] = graph_find(&a->g, name);
        snprintf(name, sizeof name, "%s.b", pre);
        a->b[l] = graph_find(&a->g, name);
        assert_true(a->w[l] >= 0 && a->b[l] >= 0);
        assert_int_equal(a->g.nodes[a->w[l]].shape[0], ae_layers[l + 1]);
        assert_int_equal(a->g.nodes[a->w[l]].shape[1], ae_layers[l]);
        assert_int_equal(a->g.nodes[a->b[l]].count, ae_layers[l + 1]);
    }
    struct backend_options bo = {.threads = 1};
    assert_int_equal(backend_cpu.init(&a->ctx, &bo), 0);
    assert_int_equal(exec_init(&a->e, &a->g, &backend_cpu, a->ctx), 0);
}

static void ae_free(struct ae *a)
{
    exec_free(&a->e);
    backend_cpu.free(a->ctx);
    graph_free(&a->g);
}

/* ---- (a) gradients against finite differences ----------------------------- */

/* The independent model: values of map l's W (O,I) and b (O) in double. */
struct ae_ref {
    enum model_act act;
    double w[AE_MAPS][AE_FEATURES * AE_FEATURES];
    double b[AE_MAPS][AE_FEATURES];
    double x[AE_BATCH * AE_FEATURES];
    double y[AE_BATCH * AE_FEATURES];  /* output of the last forward */
    double min_pre;                    /* smallest |pre-activation| seen (relu's kink) */
};

/* h_{l+1} = act(h_l W_l^T + b_l), sigmoid on the output;
 * loss = mean((y - x)^2). */
static double ae_ref_loss(struct ae_ref *r)
{
    double h[AE_BATCH * AE_FEATURES], nh[AE_BATCH * AE_FEATURES];
    memcpy(h, r->x, sizeof h);
    r->min_pre = INFINITY;
    for (int l = 0; l < AE_MAPS; l++) {
        int in = (int)ae_layers[l], out = (int)ae_layers[l + 1];
        for (int i = 0; i < AE_BATCH; i++)
            for (int o = 0; o < out; o++) {
                double z = r->b[l][o];
                for (int k = 0; k < in; k++)
                    z += h[i * in + k] * r->w[l][o * in + k];
                r->min_pre = fmin(r->min_pre, fabs(z));
                double v;
                if (l == AE_MAPS - 1 || r->act == MODEL_ACT_SIGMOID)
                    v = 1.0 / (1.0 + exp(-z));
                else if (r->act == MODEL_ACT_TANH)
                    v = tanh(z);
                else
                    v = z > 0 ? z : 0;
                nh[i * out + o] = v;
            }
        memcpy(h, nh, sizeof h);
    }
    double s = 0;
    for (int i = 0; i < AE_BATCH * AE_FEATURES; i++) {
        r->y[i] = h[i];
        s += (h[i] - r->x[i]) * (h[i] - r->x[i]);
    }
    return s / (AE_BATCH * AE_FEATURES);
}

/* Central differences of the model over the n values at v, against the
 * float32 gradient got (1e-3 relative, floor 5% of the tensor's largest). */
static void ae_check_grad(struct ae_ref *r, double *v, size_t n, const float *got,
                          const char *what)
{
    double fd[AE_FEATURES * AE_FEATURES], scale = 0;
    assert_true(n <= AE_FEATURES * AE_FEATURES);
    for (size_t j = 0; j < n; j++) {
        double v0 = v[j], h = 1e-6 * fmax(1.0, fabs(v0));
        v[j] = v0 + h;
        double lp = ae_ref_loss(r);
        v[j] = v0 - h;
        double lm = ae_ref_loss(r);
        v[j] = v0;
        fd[j] = (lp - lm) / (2 * h);
        scale = fmax(scale, fabs(fd[j]));
    }
    if (!(scale > 1e-6))
        fail_msg("%s: gradient vanishes (%g): the check tests nothing", what, scale);
    for (size_t j = 0; j < n; j++)
        if (!(fabs(got[j] - fd[j]) <= 1e-3 * fmax(fabs(fd[j]), 0.05 * scale)))
            fail_msg("%s[%zu] = %.9g, finite differences %.9g", what, j, (double)got[j], fd[j]);
}

static void ae_run_gradcheck(enum model_act act, uint64_t seed)
{
    struct ae a;
    ae_init(&a, act, NULL);
    struct ae_ref *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->act = act;
    uint64_t rng = seed;
    float buf[AE_FEATURES * AE_FEATURES];

    for (int i = 0; i < AE_BATCH * AE_FEATURES; i++) {
        buf[i] = (float)tu_rand_uniform(&rng, 0, 1);
        r->x[i] = buf[i];
    }
    exec_set(&a.e, a.x, buf);
    for (int l = 0; l < AE_MAPS; l++) {
        const struct node *wn = &a.g.nodes[a.w[l]], *bn = &a.g.nodes[a.b[l]];
        model_init_param(wn, seed, 1.0, buf);
        exec_set(&a.e, a.w[l], buf);
        for (size_t j = 0; j < wn->count; j++)
            r->w[l][j] = buf[j];
        /* model_init_param zeroes biases; nonzero ones exercise add_bias. */
        for (size_t j = 0; j < bn->count; j++) {
            buf[j] = (float)tu_rand_uniform(&rng, -0.3, 0.3);
            r->b[l][j] = buf[j];
        }
        exec_set(&a.e, a.b[l], buf);
    }
    exec_step(&a.e, 0);

    double lw = ae_ref_loss(r);
    if (act == MODEL_ACT_RELU && !(r->min_pre > 1e-3))
        fail_msg("relu: a pre-activation is %g from the kink; pick another seed", r->min_pre);
    float lf, y[AE_BATCH * AE_FEATURES];
    exec_get(&a.e, a.loss, &lf);
    if (!(fabs(lf - lw) <= 1e-5 * lw))
        fail_msg("%s: loss %.9g, double model %.9g", model_act_name(act), (double)lf, lw);
    int yn = graph_find(&a.g, "dec2.sigmoid");
    assert_true(yn >= 0);
    exec_get(&a.e, yn, y);
    for (int i = 0; i < AE_BATCH * AE_FEATURES; i++)
        if (!(fabs(y[i] - r->y[i]) <= 1e-5 * r->y[i]))
            fail_msg("%s: output[%d] = %.9g, double model %.9g", model_act_name(act), i,
                     (double)y[i], r->y[i]);

    for (int l = 0; l < AE_MAPS; l++) {
        for (int t = 0; t < 2; t++) {
            int p = t ? a.b[l] : a.w[l];
            char name[64], what[96];
            snprintf(name, sizeof name, "%s.grad", a.g.nodes[p].name);
            int gi = graph_find(&a.g, name);
            if (gi < 0 || gi != graph_grad_of(&a.g, p))
                fail_msg("%s: no node %s, or it is not graph_grad_of(%s)", model_act_name(act),
                         name, a.g.nodes[p].name);
            assert_int_equal(a.g.nodes[gi].kind, TRACE_KIND_GRAD);
            assert_int_equal(a.g.nodes[gi].count, a.g.nodes[p].count);
            exec_get(&a.e, gi, buf);
            snprintf(what, sizeof what, "%s: %s", model_act_name(act), name);
            ae_check_grad(r, t ? r->b[l] : r->w[l], a.g.nodes[p].count, buf, what);
        }
    }
    free(r);
    ae_free(&a);
}

static void test_gradients_sigmoid(void **state)
{
    (void)state;
    ae_run_gradcheck(MODEL_ACT_SIGMOID, 5);
}

static void test_gradients_tanh(void **state)
{
    (void)state;
    ae_run_gradcheck(MODEL_ACT_TANH, 6);
}

static void test_gradients_relu(void **state)
{
    (void)state;
    ae_run_gradcheck(MODEL_ACT_RELU, 7);
}

/* ---- (b) determinism ------------------------------------------------------- */

#define AE_STEPS 5

struct ae_hashes {
    int n;             /* nodes */
    uint64_t *h;       /* (steps, n): stats_compute hash of every node */
    uint64_t step;
    const struct graph *g;
};

static void ae_hash_hook(void *arg, int i, const backend_buf *buf)
{
    struct ae_hashes *hs = arg;
    struct trace_oprec rec;
    stats_compute(buf, hs->g->nodes[i].count, &rec);
    hs->h[hs->step * (uint64_t)hs->n + (uint64_t)i] = rec.hash;
}

/* AE_STEPS steps of SGD (lr 0.5) from a fresh graph and backend; records
 * every node's hash at every step and the parameters after every step
 * (params: (steps, total parameter count)). */
static void ae_train(struct ae_hashes *hs, float **params, size_t *nparam)
{
    struct graph_opt_config oc = {.kind = GRAPH_OPT_SGD, .lr = 0.5f};
    struct ae a;
    ae_init(&a, MODEL_ACT_TANH, &oc);
    hs->n = a.g.n;
    hs->g = &a.g;
    hs->h = calloc((size_t)AE_STEPS * (size_t)a.g.n, sizeof *hs->h);
    assert_non_null(hs->h);
    a.e.hook = ae_hash_hook;
    a.e.hook_arg = hs;
    size_t np = 0;
    for (int i = 0; i < a.g.n; i++)
        if (a.g.nodes[i].type == OP_PARAM)
            np += a.g.nodes[i].count;
    *nparam = np;
    *params = malloc((size_t)AE_STEPS * np * sizeof **params);
    float buf[AE_FEATURES * AE_FEATURES];
    assert_non_null(*params);
    for (int i = 0; i < a.g.n; i++)
        if (a.g.nodes[i].type == OP_PARAM) {
            model_init_param(&a.g.nodes[i], 42, 1.0, buf);
            exec_set(&a.e, i, buf);
        }
    uint64_t rng = 99;
    for (uint64_t s = 0; s < AE_STEPS; s++) {
        for (int i = 0; i < AE_BATCH * AE_FEATURES; i++)
            buf[i] = (float)tu_rand_uniform(&rng, 0, 1);
        exec_set(&a.e, a.x, buf);
        hs->step = s;
        exec_step(&a.e, s);
        exec_advance(&a.e);
        float *out = *params + s * np;
        for (int i = 0; i < a.g.n; i++)
            if (a.g.nodes[i].type == OP_PARAM) {
                exec_get(&a.e, i, out);
                out += a.g.nodes[i].count;
            }
    }
    hs->g = NULL;
    ae_free(&a);
}

static void test_determinism(void **state)
{
    (void)state;
    struct ae_hashes h1 = {0}, h2 = {0};
    float *p1, *p2;
    size_t n1, n2;
    ae_train(&h1, &p1, &n1);
    ae_train(&h2, &p2, &n2);
    assert_int_equal(h1.n, h2.n);
    assert_int_equal(n1, n2);
    for (int s = 0; s < AE_STEPS; s++) {
        for (int i = 0; i < h1.n; i++) {
            size_t k = (size_t)s * (size_t)h1.n + (size_t)i;
            if (h1.h[k] != h2.h[k])
                fail_msg("step %d node %d: hash %016llx vs %016llx", s, i,
                         (unsigned long long)h1.h[k], (unsigned long long)h2.h[k]);
        }
        if (memcmp(p1 + (size_t)s * n1, p2 + (size_t)s * n1, n1 * sizeof *p1) != 0)
            fail_msg("step %d: parameters differ between two identical runs", s);
    }
    /* Not vacuous: training moved the parameters at every step. */
    for (int s = 1; s < AE_STEPS; s++)
        if (memcmp(p1 + (size_t)(s - 1) * n1, p1 + (size_t)s * n1, n1 * sizeof *p1) == 0)
            fail_msg("step %d left the parameters unchanged", s);
    free(h1.h);
    free(h2.h);
    free(p1);
    free(p2);
}

/* ---- (c) model_init_param -------------------------------------------------- */

#define AE_WO 32
#define AE_WI 48

/* enc1.W, enc2.W, dec2.W (all (O,I)) and enc1.b (O) in a graph; order 0
 * puts enc1.W first, order 1 puts it last. */
static void ae_init_graph(struct graph *g, int order)
{
    uint32_t ws[2] = {AE_WO, AE_WI}, bs[1] = {AE_WO};
    graph_init(g);
    if (order == 0) {
        graph_param(g, "enc1.W", 2, ws);
        graph_param(g, "enc2.W", 2, ws);
        graph_param(g, "dec2.W", 2, ws);
        graph_param(g, "enc1.b", 1, bs);
    } else {
        graph_param(g, "enc1.b", 1, bs);
        graph_param(g, "dec2.W", 2, ws);
        graph_param(g, "enc2.W", 2, ws);
        graph_param(g, "enc1.W", 2, ws);
    }
}

static void ae_init_values(const struct graph *g, const char *name, uint64_t seed,
                           double scale, float *out)
{
    int i = graph_find(g, name);
    assert_true(i >= 0);
    model_init_param(&g->nodes[i], seed, scale, out);
}

static void test_init_param(void **state)
{
    (void)state;
    const size_t n = AE_WO * AE_WI;
    struct graph g, g2;
    ae_init_graph(&g, 0);
    ae_init_graph(&g2, 1);
    static float w[AE_WO * AE_WI], w2[AE_WO * AE_WI], b[AE_WO];

    for (int sc = 0; sc < 2; sc++) {
        double scale = sc ? 0.5 : 1.0;
        double bound = scale * sqrt(6.0 / (AE_WO + AE_WI));
        ae_init_values(&g, "enc1.W", 3, scale, w);
        double sum = 0, sum2 = 0, lo = INFINITY, hi = -INFINITY;
        for (size_t j = 0; j < n; j++) {
            if (!(fabs(w[j]) <= bound * (1 + FLT_EPSILON)))
                fail_msg("scale %g: w[%zu] = %g outside +-%g", scale, j, (double)w[j], bound);
            sum += w[j];
            sum2 += (double)w[j] * w[j];
            lo = fmin(lo, w[j]);
            hi = fmax(hi, w[j]);
        }
        /* Uniform on (-a, a): mean 0 (standard error a / sqrt(3n) = 0.015a),
         * variance a^2/3, and both ends reached. Inputs are fixed. */
        double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
        if (!(fabs(mean) < 0.06 * bound))
            fail_msg("scale %g: mean %g, expected about 0 (bound %g)", scale, mean, bound);
        if (!(fabs(var / (bound * bound / 3) - 1) < 0.1))
            fail_msg("scale %g: variance %g, expected %g", scale, var, bound * bound / 3);
        if (!(lo < -0.98 * bound && hi > 0.98 * bound))
            fail_msg("scale %g: range [%g, %g] does not fill +-%g", scale, lo, hi, bound);
    }

    /* Not all equal; reproducible; independent of op order; seed- and
     * name-dependent. */
    ae_init_values(&g, "enc1.W", 3, 1.0, w);
    size_t same = 0;
    for (size_t j = 1; j < n; j++)
        same += w[j] == w[0];
    if (same > 2)
        fail_msg("%zu values equal the first", same);
    ae_init_values(&g, "enc1.W", 3, 1.0, w2);
    assert_memory_equal(w, w2, sizeof w);
    ae_init_values(&g2, "enc1.W", 3, 1.0, w2);
    if (memcmp(w, w2, sizeof w) != 0)
        fail_msg("enc1.W depends on the parameter's position in the graph");
    size_t differ = 0;
    ae_init_values(&g, "enc1.W", 4, 1.0, w2);
    for (size_t j = 0; j < n; j++)
        differ += w[j] != w2[j];
    if (differ < n - 8)
        fail_msg("seeds 3 and 4 give %zu equal values of %zu", n - differ, n);
    static const char *const others[] = {"dec2.W", "enc2.W"};
    for (int k = 0; k < 2; k++) {
        differ = 0;
        ae_init_values(&g, others[k], 3, 1.0, w2);
        for (size_t j = 0; j < n; j++)
            differ += w[j] != w2[j];
        if (differ < n - 8)
            fail_msg("enc1.W and %s share %zu of %zu values", others[k], n - differ, n);
    }

    /* Biases: exactly +0.0, whatever the buffer held. */
    for (size_t j = 0; j < AE_WO; j++)
        b[j] = 1.5f;
    ae_init_values(&g, "enc1.b", 3, 1.0, b);
    static const float zeros[AE_WO];
    assert_memory_equal(b, zeros, sizeof b);
    graph_free(&g);
    graph_free(&g2);
}

/* ---- names: graph_find and graph_rename over the name index ------------ */

static void test_graph_names(void **state)
{
    (void)state;
    struct graph g;
    graph_init(&g);
    const uint32_t shape[] = {2};
    char name[32];
    enum { N = 5000 }; /* the index grows several times */
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "x%d", i);
        assert_int_equal(graph_input(&g, name, 1, shape), i);
    }
    /* every name found by a linear scan is found by the index, and the
     * other way round */
    for (int i = 0; i < N; i += 7) {
        snprintf(name, sizeof name, "x%d", i);
        int linear = -1;
        for (int j = 0; j < g.n && linear < 0; j++)
            if (strcmp(g.nodes[j].name, name) == 0)
                linear = j;
        assert_int_equal(graph_find(&g, name), linear);
    }
    assert_int_equal(graph_find(&g, "nobody"), -1);
    /* renames: the old name is gone, the new one found, the others intact */
    for (int i = 0; i < N; i += 3) {
        snprintf(name, sizeof name, "y%d", i);
        graph_rename(&g, i, name);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "x%d", i);
        assert_int_equal(graph_find(&g, name), i % 3 ? i : -1);
        snprintf(name, sizeof name, "y%d", i);
        assert_int_equal(graph_find(&g, name), i % 3 ? -1 : i);
        snprintf(name, sizeof name, "%c%d", i % 3 ? 'x' : 'y', i);
        assert_string_equal(g.nodes[i].name, name);
    }
    graph_free(&g);
    assert_int_equal(graph_find(&g, "x1"), -1);
}

/* ---- (d) shape checks ------------------------------------------------------ */

static void ae_expect_reject(const uint32_t *layers, int nlayers, uint32_t features)
{
    struct model_spec spec = {.name = "autoencoder", .nlayers = nlayers, .batch = 2,
                              .act = MODEL_ACT_SIGMOID};
    memcpy(spec.layers, layers, (size_t)nlayers * sizeof *layers);
    struct graph g;
    graph_init(&g);
    dt_error_set("%s", "");
    int r = autoencoder_build(&g, &spec, features);
    if (r != -1)
        fail_msg("layers %u..%u with %u features: returned %d, expected -1", layers[0],
                 layers[nlayers - 1], features, r);
    const char *msg = dt_error();
    if (strcmp(msg, "unknown error") == 0 || !msg[0])
        fail_msg("layers %u..%u with %u features: no error message", layers[0],
                 layers[nlayers - 1], features);
    assert_int_equal(g.n, 0);
    graph_free(&g);
}

static void test_build_rejects(void **state)
{
    (void)state;
    const uint32_t first[] = {5, 3, 6}, last[] = {6, 3, 5}, both[] = {6, 3, 6};
    ae_expect_reject(first, 3, 6);
    ae_expect_reject(last, 3, 6);
    ae_expect_reject(both, 3, 7);

    /* The matching shape builds, also through model_build. */
    struct model_spec spec = {.name = "autoencoder", .nlayers = 3, .batch = 2,
                              .act = MODEL_ACT_TANH};
    memcpy(spec.layers, both, sizeof both);
    struct graph g;
    graph_init(&g);
    int loss = model_build(&g, &spec, 6);
    assert_true(loss >= 0);
    assert_int_equal(g.nodes[loss].count, 1);
    graph_free(&g);
    spec.name = "transformer";
    graph_init(&g);
    assert_int_equal(model_build(&g, &spec, 6), -1);
    graph_free(&g);
}

/* The sums --reduce atomic cannot make vary: bias gradients over at most
 * two rows (the mse of batch x features terms is long enough). */
static void test_short_sums(void **state)
{
    (void)state;
    const uint32_t layers[] = {6, 3, 6};
    char names[64];
    for (uint32_t batch = 1; batch <= 3; batch++) {
        struct model_spec spec = {.name = "autoencoder", .nlayers = 3, .batch = batch,
                                  .act = MODEL_ACT_SIGMOID};
        memcpy(spec.layers, layers, sizeof layers);
        struct graph g;
        graph_init(&g);
        int loss = model_build(&g, &spec, 6);
        assert_true(loss >= 0);
        graph_backward(&g, loss);
        int n = graph_short_sums(&g, names, sizeof names);
        if (batch <= 2) {
            assert_int_equal(n, 2);
            assert_non_null(strstr(names, "enc1.b.grad"));
            assert_non_null(strstr(names, "dec1.b.grad"));
            assert_non_null(strchr(names, ','));
        } else {
            assert_int_equal(n, 0);
            assert_string_equal(names, "");
        }
        /* a buffer too small is cut with "..." and stays terminated */
        char small[8];
        if (batch <= 2) {
            assert_int_equal(graph_short_sums(&g, small, sizeof small), 2);
            assert_string_equal(small + strlen(small) - 3, "...");
        }
        graph_free(&g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_sigmoid),
        cmocka_unit_test(test_gradients_tanh),
        cmocka_unit_test(test_gradients_relu),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_init_param),
        cmocka_unit_test(test_build_rejects),
        cmocka_unit_test(test_graph_names),
        cmocka_unit_test(test_short_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
