/* bench_gpu_profile.c: where a GPU training step's time goes, for the
 * configurations of bench_gpu_step.
 *
 * 1. Per op type, eager (no CUDA graph): the stream is synchronized after
 *    every op and the wall time between consecutive synchronizations is
 *    charged to the op, less the time of an empty synchronization measured
 *    the same way. Printed: op types by share of the step, and the costliest
 *    single ops.
 * 2. The step's phases as `divtrace record` runs them with the graph on:
 *    the batch upload, the step itself (launch and wait), the loss read
 *    back, and the trace summary; and the step alone replayed back to back
 *    with no host work between (the way the PyTorch script times its graph),
 *    tracing off and on.
 * Exits 77 without a GPU. Usage:
 *   bench_gpu_profile [--quick] [--phases] [--streams N] [CONF...]
 * where CONF is ae, pn1, pn4 or kitti; --phases: part 2 only; --streams:
 * the backends' --streams. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec.h"
#include "run.h"
#include "train.h"
#include "util.h"
#include "bench_util.h"
#include "bench_gpu_confs.h"

struct prof {
    const struct backend_ops *be;
    void *ctx;
    double last;
    double *t;      /* per node, seconds summed over the profiled steps */
    int on;
};

static void prof_hook(void *arg, int i, const backend_buf *buf)
{
    (void)buf;
    struct prof *p = arg;
    p->be->sync(p->ctx);
    double now = dt_now();
    if (p->on)
        p->t[i] += now - p->last;
    p->last = now;
}

static int streams; /* --streams N: given to the backend (0: its default) */

static int setup(struct train_config *tc, const struct bench_gpu_conf *cf, const char *backend, const char *npy,
                 int no_graph, int traced)
{
    if (bench_gpu_conf_setup(tc, cf, backend, npy) < 0)
        return -1;
    tc->steps = 100;
    tc->steps_given = 1;
    tc->quiet = 1;
    tc->out = "/dev/null";
    tc->notrace = !traced;
    tc->no_graph = no_graph;
    tc->streams = streams;
    return train_finish_config(tc);
}

struct agg {
    const char *name;
    double t;
    int n;
};

static int agg_cmp(const void *a, const void *b)
{
    double x = ((const struct agg *)a)->t, y = ((const struct agg *)b)->t;
    return (x < y) - (x > y);
}

static int profile_ops(const struct bench_gpu_conf *cf, const char *backend, const char *npy, int steps)
{
    struct train_config tc;
    struct run r;
    if (setup(&tc, cf, backend, npy, 1, 0) < 0 || run_open(&r, &tc, 0, 0) < 0) {
        fprintf(stderr, "bench_gpu_profile: %s\n", dt_error());
        return -1;
    }
    struct prof p = {r.be, r.ctx, 0, dt_calloc((size_t)r.g.n, sizeof(double)), 0};
    /* an empty synchronization, timed as the hook times an op */
    double e0 = dt_now();
    for (int k = 0; k < 200; k++)
        r.be->sync(r.ctx);
    double empty = (dt_now() - e0) / 200;
    r.e.hook = prof_hook;
    r.e.hook_arg = &p;
    double wall = 0;
    for (int s = 0; s < steps + 2; s++) {
        run_step_begin(&r, (uint64_t)s);
        p.on = s >= 2;
        r.be->sync(r.ctx);
        p.last = dt_now();
        double w0 = p.last;
        exec_step(&r.e, (uint64_t)s);
        r.be->sync(r.ctx);
        if (p.on)
            wall += dt_now() - w0;
        exec_advance(&r.e);
    }
    struct agg a[OP_COUNT];
    memset(a, 0, sizeof a);
    int nops = 0;
    double sum = 0;
    for (int i = 0; i < r.g.n; i++) {
        const struct node *nd = &r.g.nodes[i];
        if (nd->type == OP_INPUT || nd->type == OP_PARAM || nd->type == OP_STATE) {
            p.t[i] = 0; /* no kernel: what the hook saw is the last op's wait */
            continue;
        }
        double t = p.t[i] / steps - empty;
        if (t < 0)
            t = 0;
        p.t[i] = t;
        a[nd->type].name = op_type_name(nd->type);
        a[nd->type].t += t;
        a[nd->type].n++;
        sum += t;
        nops++;
    }
    printf("\n### %s, %s: eager, synchronized after each op\n\n", cf->what, backend);
    printf("%d ops a step; step %.3f ms with a synchronization after each op; empty "
           "synchronization %.1f us (subtracted); ops sum to %.3f ms\n\n", nops, 1e3 * wall / steps,
           1e6 * empty, 1e3 * sum);
    qsort(a, OP_COUNT, sizeof a[0], agg_cmp);
    printf("| op type | ops | ms/step | share |\n| --- | ---: | ---: | ---: |\n");
    for (int k = 0; k < OP_COUNT && a[k].n; k++)
        if (a[k].t > 0.005 * sum || k < 8)
            printf("| %s | %d | %.3f | %.1f%% |\n", a[k].name, a[k].n, 1e3 * a[k].t, 100 * a[k].t / sum);
    /* the costliest ops */
    printf("\n| costliest op | type | shape | ms/step |\n| --- | --- | --- | ---: |\n");
    for (int k = 0; k < 12; k++) {
        int best = -1;
        for (int i = 0; i < r.g.n; i++)
            if (p.t[i] > 0 && (best < 0 || p.t[i] > p.t[best]))
                best = i;
        if (best < 0)
            break;
        const struct node *nd = &r.g.nodes[best];
        char shp[64];
        int o = 0;
        for (int d = 0; d < nd->ndim && o < 60; d++)
            o += snprintf(shp + o, sizeof shp - (size_t)o, d ? "x%u" : "%u", nd->shape[d]);
        if (!nd->ndim)
            snprintf(shp, sizeof shp, "scalar");
        printf("| %s | %s | %s | %.4f |\n", nd->name, op_type_name(nd->type), shp, 1e3 * p.t[best]);
        p.t[best] = -1;
    }
    free(p.t);
    run_close(&r);
    return 0;
}

static int profile_phases(const struct bench_gpu_conf *cf, const char *backend, const char *npy, int steps,
                          int traced)
{
    struct train_config tc;
    struct run r;
    if (setup(&tc, cf, backend, npy, 0, traced) < 0 || run_open(&r, &tc, 0, traced) < 0) {
        fprintf(stderr, "bench_gpu_profile: %s\n", dt_error());
        return -1;
    }
    struct trace_oprec *keep = dt_calloc((size_t)r.g.n, sizeof *keep);
    uint64_t *hashes = dt_calloc((size_t)r.g.n, sizeof *hashes);
    double ph[4] = {0, 0, 0, 0};
    uint64_t s = 0;
    for (; s < (uint64_t)steps + 3; s++) {
        int on = s >= 3;
        double t0 = dt_now();
        run_step_begin(&r, s);
        double t1 = dt_now();
        run_step_exec(&r, s, s + 1);
        double loss = run_loss(&r, s);
        double t2 = dt_now();
        if (traced) {
            struct trace_step ts;
            run_summarize(&r, s, loss, TRACE_LEVEL_OP, keep, hashes, &ts);
        }
        double t3 = dt_now();
        exec_advance(&r.e);
        if (on) {
            ph[0] += t1 - t0;
            ph[1] += t2 - t1;
            ph[2] += t3 - t2;
        }
    }
    /* the step alone, back to back: no upload, no read-back between */
    r.be->sync(r.ctx);
    double b0 = dt_now();
    for (int k = 0; k < steps; k++, s++) {
        exec_step(&r.e, s);
        if (traced)
            tracer_sync(r.tr);
        exec_advance(&r.e);
    }
    r.be->sync(r.ctx);
    ph[3] = dt_now() - b0;
    printf("| %s | %s | %s | %.4f | %.4f | %.4f | %.4f | %.4f |\n", cf->key, backend, traced ? "op" : "off",
           1e3 * ph[0] / steps, 1e3 * ph[1] / steps, 1e3 * ph[2] / steps,
           1e3 * (ph[0] + ph[1] + ph[2]) / steps, 1e3 * ph[3] / steps);
    fflush(stdout);
    free(keep);
    free(hashes);
    run_close(&r);
    return 0;
}

int main(int argc, char **argv)
{
    int quick = 0, want[BENCH_GPU_NCONF] = {0}, any = 0, phases_only = 0;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--quick") == 0) {
            quick = 1;
            continue;
        }
        if (strcmp(argv[k], "--phases") == 0) {
            phases_only = 1;
            continue;
        }
        if (strcmp(argv[k], "--streams") == 0 && k + 1 < argc) {
            streams = atoi(argv[++k]);
            continue;
        }
        int c = bench_gpu_conf_find(argv[k]);
        if (c >= 0)
            want[c] = any = 1;
        else {
            fprintf(stderr, "bench_gpu_profile: unknown configuration '%s' (ae, pn1, pn4, kitti)\n", argv[k]);
            return 2;
        }
    }
    if (!any)
        for (int c = 0; c < BENCH_GPU_NCONF; c++)
            want[c] = 1;
    if (bench_gpu_probe("bench_gpu_profile") != 0)
        return 77;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char npy[512];
    snprintf(npy, sizeof npy, "%s/bench_gpu_profile.npy", dir);
    if (want[3] && bench_write_npy(npy, 8, 10, 128, 160, 3, 777) < 0) {
        fprintf(stderr, "bench_gpu_profile: cannot write %s\n", npy);
        return 2;
    }
    static const char *const backends[] = {"cuda", "cudnn"};
    printf("## Step phases, CUDA graph on (ms/step), streams %d (0: default)\n\n", streams);
    printf("| conf | backend | tracing | upload | step + loss | summary | total | step alone, back to back |\n");
    printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int c = 0; c < BENCH_GPU_NCONF; c++)
        for (int b = 0; b < 2 && want[c]; b++)
            for (int tr = 0; tr < 2; tr++) {
                int steps = c == 0 ? (quick ? 200 : 1000) : (quick ? 5 : 15);
                if (profile_phases(bench_gpu_conf(c), backends[b], npy, steps, tr) < 0)
                    return 2;
            }
    for (int c = 0; c < BENCH_GPU_NCONF && !phases_only; c++)
        for (int b = 0; b < 2 && want[c]; b++)
            if (profile_ops(bench_gpu_conf(c), backends[b], npy, c == 0 ? 50 : (quick ? 2 : 4)) < 0)
                return 2;
    if (want[3])
        remove(npy);
    return 0;
}
