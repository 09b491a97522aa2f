/* mlp_example.c: a training program that records itself with libdivtrace,
 * using nothing of divtrace but <divtrace.h>. A two-layer MLP (ReLU, then
 * a sigmoid output with binary cross-entropy) learns a synthetic data set
 * (y = 1 where x0 * x1 + x2 > 0) by Adam in plain C; every tensor of a
 * step is recorded with its inputs, the loss ends the step, and the state
 * is checkpointed every few steps.
 *
 *   mlp_example -o run.dtr [--steps N] [--ckpt-every K] [--reverse-sum] [--stop-after S]
 *
 * --reverse-sum sums b1's gradient over the batch in reverse order: the
 * same mathematics, other roundings, so `divtrace diff` finds op b1.grad
 * as the first divergence and its origin. --stop-after S ends the run
 * after step S as a program that gives up would: the trace is closed with
 * a nonzero status and the reason.
 *
 * A fault of the recording (the disk full, the trace unwritable or
 * deleted, no memory: divtrace_record(3), FAULTS) does not end the run:
 * the library says so in one line on stderr and records nothing more, and
 * the training goes on to the same result. Any other error is this
 * program's mistake, and ends it (exit 2).
 *
 * Dimension letters: B batch, D inputs, H hidden units. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <divtrace.h>

#define N 512   /* samples */
#define B 32
#define D 4
#define H 16
#define LR 0.01f
#define BETA1 0.9f
#define BETA2 0.999f
#define EPS 1e-8f

struct param {
    const char *name, *mname, *vname, *gname, *newname, *mnew, *vnew;
    int ndim;
    int64_t shape[2];
    int n;
    float *w, *m, *v, *g;
    float *wn, *mn, *vn; /* this step's updates */
};

static float data_x[N][D], data_y[N];
static float W1[D * H], b1[H], W2[H], b2[1];
static float W1m[D * H], W1v[D * H], b1m[H], b1v[H], W2m[H], W2v[H], b2m[1], b2v[1];
static float W1g[D * H], b1g[H], W2g[H], b2g[1];
static float W1n[D * H], W1mn[D * H], W1vn[D * H], b1n[H], b1mn[H], b1vn[H];
static float W2n[H], W2mn[H], W2vn[H], b2n[1], b2mn[1], b2vn[1];

static struct param params[4] = {
    {"W1", "W1.m", "W1.v", "W1.grad", "W1.new", "W1.m.new", "W1.v.new", 2, {D, H}, D * H,
     W1, W1m, W1v, W1g, W1n, W1mn, W1vn},
    {"b1", "b1.m", "b1.v", "b1.grad", "b1.new", "b1.m.new", "b1.v.new", 1, {H, 0}, H,
     b1, b1m, b1v, b1g, b1n, b1mn, b1vn},
    {"W2", "W2.m", "W2.v", "W2.grad", "W2.new", "W2.m.new", "W2.v.new", 2, {H, 1}, H,
     W2, W2m, W2v, W2g, W2n, W2mn, W2vn},
    {"b2", "b2.m", "b2.v", "b2.grad", "b2.new", "b2.m.new", "b2.v.new", 1, {1, 0}, 1,
     b2, b2m, b2v, b2g, b2n, b2mn, b2vn},
};

static divtrace *tr; /* NULL: recording nothing (the open met a fault) */

static int is_fault(int status)
{
    return status == DIVTRACE_EIO || status == DIVTRACE_ENOMEM || status == DIVTRACE_ECUDA;
}

/* A call that failed: a fault has stopped the recording (the library said
 * so; the training goes on, every later call a no-op); else the end. */
static void die(int status, const char *what)
{
    if (is_fault(status) && divtrace_status(tr) == status)
        return;
    fprintf(stderr, "mlp_example: %s: %s (%s)\n", what, divtrace_errmsg(tr),
            divtrace_strerror(status));
    if (tr)
        divtrace_close(tr, 1, what);
    exit(2);
}

/* A counter-based generator: uniform in [-1, 1). */
static float rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1u << 23) - 1.0);
}

static void init(uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < N; i++) {
        for (int d = 0; d < D; d++)
            data_x[i][d] = rnd(&s);
        data_y[i] = data_x[i][0] * data_x[i][1] + data_x[i][2] > 0 ? 1.0f : 0.0f;
    }
    for (int i = 0; i < D * H; i++)
        W1[i] = rnd(&s) * 0.5f;
    for (int i = 0; i < H; i++)
        W2[i] = rnd(&s) * 0.25f;
}

static void rec(const char *name, const char *type, enum divtrace_kind kind, const float *x,
                int ndim, int64_t d0, int64_t d1, const char *const *in, int nin)
{
    int64_t shape[2] = {d0, d1};
    if (!tr)
        return;
    int st = divtrace_record(tr, name, type, kind, x, DIVTRACE_HOST, NULL, ndim, shape, in, nin);
    if (st != DIVTRACE_OK)
        die(st, "divtrace_record");
}
#define IN(...) (const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static void checkpoint(uint64_t step)
{
    if (!tr)
        return;
    int st = divtrace_checkpoint_begin(tr, step);
    for (int p = 0; p < 4 && st == DIVTRACE_OK; p++) {
        const struct param *q = &params[p];
        st = divtrace_checkpoint_add(tr, q->name, q->w, DIVTRACE_HOST, q->ndim, q->shape);
        if (st == DIVTRACE_OK)
            st = divtrace_checkpoint_add(tr, q->mname, q->m, DIVTRACE_HOST, q->ndim, q->shape);
        if (st == DIVTRACE_OK)
            st = divtrace_checkpoint_add(tr, q->vname, q->v, DIVTRACE_HOST, q->ndim, q->shape);
    }
    if (st == DIVTRACE_OK)
        st = divtrace_checkpoint_end(tr);
    if (st != DIVTRACE_OK)
        die(st, "checkpoint");
}

static float step(uint64_t t, int reverse)
{
    float x[B * D], y[B], fc1[B * H], relu1[B * H], fc2[B], prob[B], loss[1];
    float fc2g[B], relu1g[B * H], fc1g[B * H];
    for (int b = 0; b < B; b++) {
        int i = (int)((t * B + (uint64_t)b) % N);
        memcpy(x + b * D, data_x[i], sizeof data_x[i]);
        y[b] = data_y[i];
    }
    int st = tr ? divtrace_step_begin(tr, t) : DIVTRACE_OK;
    if (st != DIVTRACE_OK)
        die(st, "divtrace_step_begin");
    rec("x", "data", DIVTRACE_INPUT, x, 2, B, D, NULL, 0);
    rec("y", "data", DIVTRACE_INPUT, y, 2, B, 1, NULL, 0);
    for (int p = 0; p < 4; p++) {
        const struct param *q = &params[p];
        /* each names the update of the previous step that made it */
        rec(q->name, "param", DIVTRACE_PARAM, q->w, q->ndim, q->shape[0], q->shape[1], IN(q->newname));
        rec(q->mname, "adam_m", DIVTRACE_STATE, q->m, q->ndim, q->shape[0], q->shape[1], IN(q->mnew));
        rec(q->vname, "adam_v", DIVTRACE_STATE, q->v, q->ndim, q->shape[0], q->shape[1], IN(q->vnew));
    }

    /* forward */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            float s = b1[h];
            for (int d = 0; d < D; d++)
                s += x[b * D + d] * W1[d * H + h];
            fc1[b * H + h] = s;
            relu1[b * H + h] = s > 0 ? s : 0;
        }
    rec("fc1", "linear", DIVTRACE_FORWARD, fc1, 2, B, H, IN("x", "W1", "b1"));
    rec("relu1", "relu", DIVTRACE_FORWARD, relu1, 2, B, H, IN("fc1"));
    double l = 0;
    for (int b = 0; b < B; b++) {
        float s = b2[0];
        for (int h = 0; h < H; h++)
            s += relu1[b * H + h] * W2[h];
        fc2[b] = s;
        prob[b] = 1.0f / (1.0f + expf(-s));
        float p = fminf(fmaxf(prob[b], 1e-7f), 1 - 1e-7f);
        l -= y[b] * logf(p) + (1 - y[b]) * logf(1 - p);
    }
    loss[0] = (float)(l / B);
    rec("fc2", "linear", DIVTRACE_FORWARD, fc2, 2, B, 1, IN("relu1", "W2", "b2"));
    rec("prob", "sigmoid", DIVTRACE_FORWARD, prob, 2, B, 1, IN("fc2"));
    rec("loss", "bce", DIVTRACE_FORWARD, loss, 1, 1, 0, IN("prob", "y"));

    /* backward */
    for (int b = 0; b < B; b++)
        fc2g[b] = (prob[b] - y[b]) / B;
    rec("fc2.grad", "bce_sigmoid_bwd", DIVTRACE_BACKWARD, fc2g, 2, B, 1, IN("prob", "y"));
    for (int h = 0; h < H; h++) {
        float s = 0;
        for (int b = 0; b < B; b++)
            s += relu1[b * H + h] * fc2g[b];
        W2g[h] = s;
    }
    b2g[0] = 0;
    for (int b = 0; b < B; b++)
        b2g[0] += fc2g[b];
    rec("W2.grad", "matmul", DIVTRACE_GRAD, W2g, 2, H, 1, IN("relu1", "fc2.grad"));
    rec("b2.grad", "sum", DIVTRACE_GRAD, b2g, 1, 1, 0, IN("fc2.grad"));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            relu1g[b * H + h] = fc2g[b] * W2[h];
            fc1g[b * H + h] = fc1[b * H + h] > 0 ? relu1g[b * H + h] : 0;
        }
    rec("relu1.grad", "matmul", DIVTRACE_BACKWARD, relu1g, 2, B, H, IN("fc2.grad", "W2"));
    rec("fc1.grad", "relu_bwd", DIVTRACE_BACKWARD, fc1g, 2, B, H, IN("relu1.grad", "fc1"));
    for (int d = 0; d < D; d++)
        for (int h = 0; h < H; h++) {
            float s = 0;
            for (int b = 0; b < B; b++)
                s += x[b * D + d] * fc1g[b * H + h];
            W1g[d * H + h] = s;
        }
    for (int h = 0; h < H; h++) {
        float s = 0;
        if (reverse)
            for (int b = B - 1; b >= 0; b--)
                s += fc1g[b * H + h];
        else
            for (int b = 0; b < B; b++)
                s += fc1g[b * H + h];
        b1g[h] = s;
    }
    rec("W1.grad", "matmul", DIVTRACE_GRAD, W1g, 2, D, H, IN("x", "fc1.grad"));
    rec("b1.grad", "sum", DIVTRACE_GRAD, b1g, 1, H, 0, IN("fc1.grad"));

    /* Adam */
    float c1 = 1 - powf(BETA1, (float)(t + 1)), c2 = 1 - powf(BETA2, (float)(t + 1));
    for (int p = 0; p < 4; p++) {
        struct param *q = &params[p];
        for (int i = 0; i < q->n; i++) {
            q->mn[i] = BETA1 * q->m[i] + (1 - BETA1) * q->g[i];
            q->vn[i] = BETA2 * q->v[i] + (1 - BETA2) * q->g[i] * q->g[i];
            q->wn[i] = q->w[i] - LR * (q->mn[i] / c1) / (sqrtf(q->vn[i] / c2) + EPS);
        }
        rec(q->mnew, "adam_m", DIVTRACE_OPTIMIZER, q->mn, q->ndim, q->shape[0], q->shape[1],
            IN(q->mname, q->gname));
        rec(q->vnew, "adam_v", DIVTRACE_OPTIMIZER, q->vn, q->ndim, q->shape[0], q->shape[1],
            IN(q->vname, q->gname));
        rec(q->newname, "adam", DIVTRACE_OPTIMIZER, q->wn, q->ndim, q->shape[0], q->shape[1],
            IN(q->name, q->mnew, q->vnew));
    }
    if (tr && (st = divtrace_step_end(tr, loss[0])) != DIVTRACE_OK)
        die(st, "divtrace_step_end");
    for (int p = 0; p < 4; p++) {
        struct param *q = &params[p];
        size_t bytes = (size_t)q->n * sizeof(float);
        memcpy(q->w, q->wn, bytes);
        memcpy(q->m, q->mn, bytes);
        memcpy(q->v, q->vn, bytes);
    }
    return loss[0];
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    uint64_t steps = 50, every = 10;
    int reverse = 0, stop = 0;
    uint64_t stop_after = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--ckpt-every") == 0 && i + 1 < argc)
            every = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reverse-sum") == 0)
            reverse = 1;
        else if (strcmp(argv[i], "--stop-after") == 0 && i + 1 < argc)
            stop = 1, stop_after = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: mlp_example -o TRACE [--steps N] [--ckpt-every K] [--reverse-sum] "
                    "[--stop-after S]\n");
            return 2;
        }
    }
    if (!out || every == 0) {
        fprintf(stderr, "usage: mlp_example -o TRACE [--steps N] [--ckpt-every K] [--reverse-sum] "
                    "[--stop-after S]\n");
        return 2;
    }
    if (divtrace_api_version() != DIVTRACE_API_VERSION) {
        fprintf(stderr, "mlp_example: libdivtrace API %d, built for %d\n", divtrace_api_version(),
                DIVTRACE_API_VERSION);
        return 2;
    }
    const char *config[] = {"model", "mlp-example", "layers", "4-16-1", "backend", "c",
                            "optimizer", "adam", "lr", "0.01", "seed", "1",
                            "b1_grad_sum", reverse ? "reverse" : "forward", NULL};
    int st = divtrace_open(&tr, out, config, "op");
    if (st != DIVTRACE_OK && !is_fault(st)) {
        fprintf(stderr, "mlp_example: %s\n", divtrace_errmsg(NULL));
        return 2;
    }
    init(1);
    float loss = 0;
    for (uint64_t t = 0; t < steps; t++) {
        if (t % every == 0)
            checkpoint(t);
        loss = step(t, reverse);
        if (stop && t == stop_after) {
            char why[64];
            snprintf(why, sizeof why, "stopped after step %llu (--stop-after)", (unsigned long long)t);
            steps = t + 1;
            if (tr && (st = divtrace_close(tr, 1, why)) != DIVTRACE_OK && !is_fault(st)) {
                fprintf(stderr, "mlp_example: %s\n", divtrace_errmsg(NULL));
                return 2;
            }
            printf("stopped after step %llu, loss %.6f\n", (unsigned long long)t, loss);
            return 0;
        }
    }
    checkpoint(steps);
    if (tr && (st = divtrace_close(tr, 0, NULL)) != DIVTRACE_OK && !is_fault(st)) {
        fprintf(stderr, "mlp_example: %s\n", divtrace_errmsg(NULL));
        return 2;
    }
    printf("%llu steps, final loss %.6f\n", (unsigned long long)steps, loss);
    return 0;
}
