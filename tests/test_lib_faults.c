/* test_lib_faults.c: libdivtrace never takes down the training it records
 * (divtrace_record(3), FAULTS). A small MLP trains by SGD on the host and
 * records every tensor of its steps, parameters as one group, a checkpoint
 * every few steps; each case runs it in a child process under one fault:
 * the disk full (RLIMIT_FSIZE, SIGXFSZ ignored) under a step's write and
 * under a checkpoint's; paths that cannot be created (/proc, a file as a
 * folder, a read-only folder, /dev/full); every allocation of the
 * recording path failing in turn (DIVTRACE_TEST_FAIL_ALLOC); the trace file
 * deleted, or its folder removed, while it is written (and renamed, which
 * is no fault). Each case checks: the losses and parameters bit for bit
 * those of the run that records nothing; exactly one "libdivtrace:" line on
 * stderr (none without a fault); the status the calls return, and
 * divtrace_status, from the fault on; every later call a no-op (the same
 * status, the message kept, a large tensor not even read); divtrace_close
 * returning the fault; the file a readable prefix of the run, never
 * complete, every step's root that of the clean recording's step. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "divtrace.h"
#include "test_util.h"
#include "trace.h"

/* ---- the model: B batch, D inputs, H hidden units ---- */

#define TF_B 8
#define TF_D 3
#define TF_H 6
#define TF_STEPS 12
#define TF_CKPT_EVERY 4
#define TF_BIG 16384 /* floats of optimizer state in each checkpoint (64 KiB) */
#define TF_OPS 19    /* tensors a step records */
#define TF_LR 0.05f

struct tf_model {
    float W1[TF_D * TF_H], b1[TF_H], W2[TF_H], b2[1];
};

/* What a child reports (shared memory). */
struct tf_out {
    struct tf_model m;
    float loss[TF_STEPS];
    int open_rc, first_rc, fails, status, noop_bad, close_rc, exited;
    double noop_s;
    char msg[512], close_msg[512];
};

enum tf_kind { TF_CLEAN, TF_FSIZE_STEP, TF_FSIZE_CKPT, TF_ALLOC, TF_UNLINK, TF_RMDIR, TF_RENAME };

struct tf_case {
    enum tf_kind kind;
    const char *path, *other; /* the trace; a folder to remove, or the rename's target */
    unsigned long n;          /* TF_ALLOC: the allocation that fails */
};

static float tf_state[TF_BIG];

static float tf_rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1u << 23) - 1.0);
}

static void tf_init(struct tf_model *m)
{
    uint64_t r = 42;
    for (int i = 0; i < TF_D * TF_H; i++)
        m->W1[i] = 0.5f * tf_rnd(&r);
    for (int i = 0; i < TF_H; i++) {
        m->b1[i] = 0.1f * tf_rnd(&r);
        m->W2[i] = 0.5f * tf_rnd(&r);
    }
    m->b2[0] = 0;
    for (int i = 0; i < TF_BIG; i++)
        tf_state[i] = (float)i;
}

/* A record whose status goes into o (the first failure kept). */
static void tf_rec(divtrace *t, struct tf_out *o, const char *name, const char *type, enum divtrace_kind kind,
                   const float *x, int64_t rows, int64_t cols, const char *in0, const char *in1, const char *in2)
{
    if (!t)
        return;
    const char *in[3] = {in0, in1, in2};
    int nin = in2 ? 3 : in1 ? 2 : in0 ? 1 : 0;
    int64_t shape[2] = {rows, cols};
    int rc = divtrace_record(t, name, type, kind, x, DIVTRACE_HOST, NULL, 2, shape, nin ? in : NULL, nin);
    if (rc != DIVTRACE_OK && o->fails++ == 0)
        o->first_rc = rc;
}

static void tf_note(struct tf_out *o, int rc)
{
    if (rc != DIVTRACE_OK && o->fails++ == 0)
        o->first_rc = rc;
}

/* The checkpoint before step s: parameters and the optimizer state. */
static void tf_ckpt(divtrace *t, struct tf_out *o, const struct tf_model *m, uint64_t s)
{
    static const int64_t sw1[2] = {TF_D, TF_H}, sh[1] = {TF_H}, s1[1] = {1}, sbig[1] = {TF_BIG};
    tf_note(o, divtrace_checkpoint_begin(t, s));
    tf_note(o, divtrace_checkpoint_add(t, "W1", m->W1, DIVTRACE_HOST, 2, sw1));
    tf_note(o, divtrace_checkpoint_add(t, "b1", m->b1, DIVTRACE_HOST, 1, sh));
    tf_note(o, divtrace_checkpoint_add(t, "W2", m->W2, DIVTRACE_HOST, 1, sh));
    tf_note(o, divtrace_checkpoint_add(t, "b2", m->b2, DIVTRACE_HOST, 1, s1));
    tf_note(o, divtrace_checkpoint_add(t, "opt.state", tf_state, DIVTRACE_HOST, 1, sbig));
    tf_note(o, divtrace_checkpoint_end(t));
}

/* One SGD step of the MLP (tanh hidden layer, MSE), every tensor recorded
 * where t is not NULL; the loss. */
static float tf_step(divtrace *t, struct tf_out *o, struct tf_model *m, uint64_t s)
{
    float x[TF_B * TF_D], y[TF_B], h[TF_B * TF_H], yh[TF_B], dy[TF_B], dh[TF_B * TF_H];
    float gW1[TF_D * TF_H], gb1[TF_H], gW2[TF_H], gb2[1];
    uint64_t r = 1000 + s;
    for (int b = 0; b < TF_B; b++) {
        for (int d = 0; d < TF_D; d++)
            x[b * TF_D + d] = tf_rnd(&r);
        y[b] = x[b * TF_D] * x[b * TF_D + 1] + 0.5f * x[b * TF_D + 2];
    }
    if (t)
        tf_note(o, divtrace_step_begin(t, s));
    tf_rec(t, o, "x", "data", DIVTRACE_INPUT, x, TF_B, TF_D, NULL, NULL, NULL);
    tf_rec(t, o, "y", "data", DIVTRACE_INPUT, y, TF_B, 1, NULL, NULL, NULL);
    if (t) {
        static const int64_t sw1[2] = {TF_D, TF_H}, sh[2] = {TF_H, 1}, s1[2] = {1, 1};
        static const char *const i0[] = {"W1.new"}, *i1[] = {"b1.new"}, *i2[] = {"W2.new"}, *i3[] = {"b2.new"};
        const struct divtrace_tensor ps[4] = {
            {"W1", "param", DIVTRACE_PARAM, 2, sw1, i0, 1}, {"b1", "param", DIVTRACE_PARAM, 2, sh, i1, 1},
            {"W2", "param", DIVTRACE_PARAM, 2, sh, i2, 1}, {"b2", "param", DIVTRACE_PARAM, 2, s1, i3, 1}};
        const float *pd[4] = {m->W1, m->b1, m->W2, m->b2};
        tf_note(o, divtrace_record_many(t, 4, ps, pd, DIVTRACE_HOST, NULL));
    }
    for (int b = 0; b < TF_B; b++)
        for (int j = 0; j < TF_H; j++) {
            float a = m->b1[j];
            for (int d = 0; d < TF_D; d++)
                a += x[b * TF_D + d] * m->W1[d * TF_H + j];
            h[b * TF_H + j] = tanhf(a);
        }
    tf_rec(t, o, "h", "linear_tanh", DIVTRACE_FORWARD, h, TF_B, TF_H, "x", "W1", "b1");
    float loss = 0;
    for (int b = 0; b < TF_B; b++) {
        float a = m->b2[0];
        for (int j = 0; j < TF_H; j++)
            a += h[b * TF_H + j] * m->W2[j];
        yh[b] = a;
        loss += (a - y[b]) * (a - y[b]) / TF_B;
        dy[b] = 2 * (a - y[b]) / TF_B;
    }
    tf_rec(t, o, "yhat", "linear", DIVTRACE_FORWARD, yh, TF_B, 1, "h", "W2", "b2");
    tf_rec(t, o, "dy", "mse_bwd", DIVTRACE_BACKWARD, dy, TF_B, 1, "yhat", "y", NULL);
    gb2[0] = 0;
    for (int j = 0; j < TF_H; j++)
        gW2[j] = 0;
    for (int b = 0; b < TF_B; b++) {
        gb2[0] += dy[b];
        for (int j = 0; j < TF_H; j++) {
            gW2[j] += h[b * TF_H + j] * dy[b];
            dh[b * TF_H + j] = dy[b] * m->W2[j] * (1 - h[b * TF_H + j] * h[b * TF_H + j]);
        }
    }
    tf_rec(t, o, "W2.grad", "linear_bwd", DIVTRACE_GRAD, gW2, TF_H, 1, "h", "dy", NULL);
    tf_rec(t, o, "b2.grad", "sum", DIVTRACE_GRAD, gb2, 1, 1, "dy", NULL, NULL);
    tf_rec(t, o, "dh", "tanh_bwd", DIVTRACE_BACKWARD, dh, TF_B, TF_H, "dy", "W2", "h");
    for (int j = 0; j < TF_H; j++) {
        gb1[j] = 0;
        for (int d = 0; d < TF_D; d++)
            gW1[d * TF_H + j] = 0;
    }
    for (int b = 0; b < TF_B; b++)
        for (int j = 0; j < TF_H; j++) {
            gb1[j] += dh[b * TF_H + j];
            for (int d = 0; d < TF_D; d++)
                gW1[d * TF_H + j] += x[b * TF_D + d] * dh[b * TF_H + j];
        }
    tf_rec(t, o, "W1.grad", "linear_bwd", DIVTRACE_GRAD, gW1, TF_D, TF_H, "x", "dh", NULL);
    tf_rec(t, o, "b1.grad", "sum", DIVTRACE_GRAD, gb1, TF_H, 1, "dh", NULL, NULL);
    /* updates in place: the records are made before the calls return */
    for (int i = 0; i < TF_D * TF_H; i++)
        m->W1[i] -= TF_LR * gW1[i];
    for (int j = 0; j < TF_H; j++) {
        m->b1[j] -= TF_LR * gb1[j];
        m->W2[j] -= TF_LR * gW2[j];
    }
    m->b2[0] -= TF_LR * gb2[0];
    tf_rec(t, o, "W1.new", "sgd", DIVTRACE_OPTIMIZER, m->W1, TF_D, TF_H, "W1", "W1.grad", NULL);
    tf_rec(t, o, "b1.new", "sgd", DIVTRACE_OPTIMIZER, m->b1, TF_H, 1, "b1", "b1.grad", NULL);
    tf_rec(t, o, "W2.new", "sgd", DIVTRACE_OPTIMIZER, m->W2, TF_H, 1, "W2", "W2.grad", NULL);
    tf_rec(t, o, "b2.new", "sgd", DIVTRACE_OPTIMIZER, m->b2, 1, 1, "b2", "b2.grad", NULL);
    tf_rec(t, o, "loss", "mse", DIVTRACE_FORWARD, &loss, 1, 1, "yhat", "y", NULL);
    if (t)
        tf_note(o, divtrace_step_end(t, loss));
    return loss;
}

static double tf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a fault: every call returns it at once and changes nothing. */
static void tf_noop(divtrace *t, struct tf_out *o)
{
    int f = o->status, bad = 0;
    char before[512];
    snprintf(before, sizeof before, "%s", divtrace_errmsg(t));
    float v[4] = {1, 2, 3, 4};
    int64_t sh[1] = {4};
    const struct divtrace_tensor ts[1] = {{"v", "x", DIVTRACE_FORWARD, 1, sh, NULL, 0}};
    const float *pv[1] = {v};
    bad += divtrace_step_begin(t, 1000) != f;
    bad += divtrace_record(t, "v", "x", DIVTRACE_FORWARD, v, DIVTRACE_HOST, NULL, 1, sh, NULL, 0) != f;
    bad += divtrace_record_many(t, 1, ts, pv, DIVTRACE_HOST, NULL) != f;
    bad += divtrace_flush(t) != f;
    bad += divtrace_step_end(t, 1.0) != f;
    bad += divtrace_step_end_device(t, v, NULL) != f;
    bad += divtrace_step_end_async(t, v, NULL) != f;
    bad += divtrace_sync(t) != f;
    bad += divtrace_checkpoint_begin(t, 1001) != f;
    bad += divtrace_checkpoint_add(t, "v", v, DIVTRACE_HOST, 1, sh) != f;
    bad += divtrace_checkpoint_end(t) != f;
    bad += divtrace_status(t) != f;
    bad += strcmp(divtrace_errmsg(t), before) != 0;
    /* a no-op reads no data: 10000 records of 4 MiB in well under the
     * time of hashing them (about a millisecond each) */
    enum { NBIG = 1 << 20 };
    float *big = calloc(NBIG, sizeof *big);
    int64_t sbig[1] = {NBIG};
    double t0 = tf_now();
    for (int i = 0; i < 10000 && big; i++)
        bad += divtrace_record(t, "big", "x", DIVTRACE_FORWARD, big, DIVTRACE_HOST, NULL, 1, sbig, NULL, 0) != f;
    o->noop_s = tf_now() - t0;
    free(big);
    o->noop_bad = bad + !big;
}

/* The case's fault, at the start of step s (before its checkpoint). */
static void tf_fault(const struct tf_case *c, divtrace *t, uint64_t s)
{
    struct stat st;
    struct rlimit lim;
    if ((c->kind == TF_FSIZE_STEP && s == 5) || (c->kind == TF_FSIZE_CKPT && s == 4)) {
        /* the file may grow no further (step 5's write fails), or by
         * 16 KiB: room for steps, not for the 64 KiB checkpoint of step 4 */
        divtrace_sync(t);
        if (stat(c->path, &st) == 0 && getrlimit(RLIMIT_FSIZE, &lim) == 0) {
            lim.rlim_cur = (rlim_t)st.st_size + (c->kind == TF_FSIZE_CKPT ? 16384 : 0);
            setrlimit(RLIMIT_FSIZE, &lim);
        }
        /* state that changed wholesale, to random values: the checkpoint
         * takes its 64 KiB however the trace compresses it (format 2 stores
         * it as its difference from the one before) */
        uint64_t r = 7;
        for (int i = 0; c->kind == TF_FSIZE_CKPT && i < TF_BIG; i++)
            tf_state[i] = tf_rnd(&r);
    } else if ((c->kind == TF_UNLINK && s == 5) || (c->kind == TF_RMDIR && s == 9)) {
        unlink(c->path);
        if (c->kind == TF_RMDIR)
            rmdir(c->other);
    } else if (c->kind == TF_RENAME && s == 5) {
        rename(c->path, c->other);
    }
}

/* The training loop of a child: recording to c->path under the case's
 * fault (or nothing, path NULL). */
static void tf_train(const struct tf_case *c, struct tf_out *o)
{
    divtrace *t = NULL;
    static const char *const cfg[] = {"model", "tf-mlp", "seed", "42", NULL};
    if (c->kind == TF_ALLOC) {
        char n[32];
        snprintf(n, sizeof n, "%lu", c->n);
        setenv("DIVTRACE_TEST_FAIL_ALLOC", n, 1);
    }
    if (c->path) {
        o->open_rc = divtrace_open(&t, c->path, cfg, "op");
        if (o->open_rc != DIVTRACE_OK)
            snprintf(o->msg, sizeof o->msg, "%s", divtrace_errmsg(NULL));
    }
    tf_init(&o->m);
    for (uint64_t s = 0; s < TF_STEPS; s++) {
        if (t)
            tf_fault(c, t, s);
        if (t && s % TF_CKPT_EVERY == 0)
            tf_ckpt(t, o, &o->m, s);
        o->loss[s] = tf_step(t, o, &o->m, s);
    }
    if (!t)
        return;
    o->status = divtrace_status(t);
    snprintf(o->msg, sizeof o->msg, "%s", divtrace_errmsg(t));
    if (o->status != DIVTRACE_OK)
        tf_noop(t, o);
    o->close_rc = divtrace_close(t, 0, NULL);
    snprintf(o->close_msg, sizeof o->close_msg, "%s", divtrace_errmsg(NULL));
}

/* Run the case in a child; its stderr into err (n bytes). */
static void tf_run(const struct tf_case *c, struct tf_out *out, char *err, size_t n)
{
    struct tf_out *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(o != MAP_FAILED);
    memset(o, 0, sizeof *o);
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        signal(SIGXFSZ, SIG_IGN); /* over RLIMIT_FSIZE a write fails with EFBIG */
        tf_train(c, o);
        o->exited = 1;
        _exit(0);
    }
    close(p[1]);
    size_t k = 0;
    for (;;) {
        ssize_t r = read(p[0], err + k, n - 1 - k);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        k += (size_t)r;
        if (k == n - 1)
            k = 0; /* keep reading: the child must not block */
    }
    err[k] = 0;
    close(p[0]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    *out = *o;
    munmap(o, sizeof *o);
    assert_true(out->exited);
}

/* "libdivtrace:" lines on stderr. */
static int tf_reports(const char *err)
{
    int k = 0;
    for (const char *p = err; (p = strstr(p, "libdivtrace: ")); p++)
        k += p == err || p[-1] == '\n';
    return k;
}

static struct tf_out tf_clean;                 /* the run that records nothing */
static uint64_t tf_roots[TF_STEPS];            /* the clean recording's step roots */

/* The training went as if nothing was recorded. */
static void tf_same_training(const struct tf_out *o)
{
    assert_memory_equal(&o->m, &tf_clean.m, sizeof o->m);
    assert_memory_equal(o->loss, tf_clean.loss, sizeof o->loss);
}

/* The file: a readable trace of steps 0 .. nsteps-1 of the run (at most
 * max, at least min), incomplete. */
static uint64_t tf_prefix(const char *path, uint64_t min, uint64_t max)
{
    struct trace_file *tf;
    if (trace_open(&tf, path) != 0)
        fail_msg("%s", path);
    assert_false(tf->complete);
    assert_true(tf->nsteps >= min && tf->nsteps <= max);
    assert_true(tf->nsteps == 0 || tf->nops == TF_OPS);
    for (uint64_t s = 0; s < tf->nsteps; s++) {
        assert_int_equal(tf->steps[s].step, s);
        assert_true(tf->steps[s].loss == (double)tf_clean.loss[s]);
        assert_true(tf->steps[s].root == tf_roots[s]);
    }
    uint64_t n = tf->nsteps;
    trace_close(tf);
    return n;
}

/* After a fault of status f: the call's status, one report naming the
 * path and the message, every later call a no-op, the close's status. */
static void tf_faulted(const struct tf_out *o, const char *err, int f, const char *path, const char *what)
{
    if (!strstr(path, "/alloc-"))
        printf("  stderr: %s", err);
    tf_same_training(o);
    if (tf_reports(err) != 1)
        fail_msg("%d report lines, want 1: %s", tf_reports(err), err);
    assert_int_equal(o->open_rc, DIVTRACE_OK);
    assert_int_equal(o->first_rc, f);
    assert_int_equal(o->status, f);
    assert_int_equal(o->noop_bad, 0);
    assert_true(o->noop_s < 0.5);
    assert_int_equal(o->close_rc, f);
    assert_string_equal(o->close_msg, o->msg);
    if (!strstr(o->msg, what) || !strstr(err, o->msg) || !strstr(err, path))
        fail_msg("message '%s' (want '%s'), stderr '%s'", o->msg, what, err);
}

static int tf_setup(void **state)
{
    (void)state;
    char err[4096];
    struct tf_case c = {TF_CLEAN, NULL, NULL, 0};
    tf_run(&c, &tf_clean, err, sizeof err);
    struct tf_out o;
    c.path = tu_path("clean.dtr");
    tf_run(&c, &o, err, sizeof err);
    tf_same_training(&o);
    assert_int_equal(o.fails + o.status + o.close_rc + tf_reports(err), 0);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, c.path), 0);
    assert_true(tf->complete);
    assert_int_equal(tf->nsteps, TF_STEPS);
    assert_int_equal(tf->nckpt, TF_STEPS / TF_CKPT_EVERY);
    for (int s = 0; s < TF_STEPS; s++)
        tf_roots[s] = tf->steps[s].root;
    trace_close(tf);
    return 0;
}

/* ---- tests ---- */

/* The disk full under a step's write (on the writer's thread): reported by
 * the next call that writes; the file keeps the steps before. */
static void test_disk_full_step(void **state)
{
    (void)state;
    char err[4096];
    struct tf_case c = {TF_FSIZE_STEP, tu_path("full-step.dtr"), NULL, 0};
    struct tf_out o;
    tf_run(&c, &o, err, sizeof err);
    tf_faulted(&o, err, DIVTRACE_EIO, c.path, "write failed");
    assert_int_equal(tf_prefix(c.path, 5, 5), 5);
}

/* ... and under a checkpoint's: the steps before it stay. */
static void test_disk_full_checkpoint(void **state)
{
    (void)state;
    char err[4096];
    struct tf_case c = {TF_FSIZE_CKPT, tu_path("full-ckpt.dtr"), NULL, 0};
    struct tf_out o;
    tf_run(&c, &o, err, sizeof err);
    tf_faulted(&o, err, DIVTRACE_EIO, c.path, "divtrace_checkpoint_end");
    assert_int_equal(tf_prefix(c.path, 4, 4), 4);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, c.path), 0);
    assert_int_equal(tf->nckpt, 1); /* the one before step 0 */
    trace_close(tf);
}

/* A path that cannot be created: divtrace_open fails (EIO, its message
 * naming the path, one line on stderr), and the program trains on. */
static void test_unwritable_path(void **state)
{
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tu_path("readonly"));
    assert_int_equal(mkdir(dir, 0555), 0);
    char ro[1100];
    snprintf(ro, sizeof ro, "%s/x.dtr", dir);
    const char *paths[] = {"/proc/divtrace-faults.dtr", "/dev/null/x.dtr", "/dev/full", ro};
    for (int i = 0; i < 4; i++) {
        if (i == 2 && access("/dev/full", W_OK) != 0)
            continue;
        if (i == 3 && access(dir, W_OK) == 0)
            continue; /* root writes anywhere */
        char err[4096];
        struct tf_case c = {TF_CLEAN, paths[i], NULL, 0};
        struct tf_out o;
        tf_run(&c, &o, err, sizeof err);
        printf("  %s: %s", paths[i], err);
        tf_same_training(&o);
        assert_int_equal(o.open_rc, DIVTRACE_EIO);
        assert_int_equal(tf_reports(err), 1);
        if (!strstr(o.msg, paths[i]) || !strstr(err, o.msg))
            fail_msg("message '%s', stderr '%s'", o.msg, err);
    }
    chmod(dir, 0755);
}

/* Every allocation of the recording path failing in turn, until a run
 * makes no more than the failing one: ENOMEM, the file a readable prefix
 * whose last block says why (a STOPPED event). */
static void test_alloc_faults(void **state)
{
    (void)state;
    int fired = 0, quiet = 0;
    for (unsigned long n = 1; n < 2000 && quiet < 8; n++) {
        char err[4096], name[64];
        snprintf(name, sizeof name, "alloc-%lu.dtr", n);
        struct tf_case c = {TF_ALLOC, tu_path(name), NULL, n};
        struct tf_out o;
        tf_run(&c, &o, err, sizeof err);
        if (o.open_rc == DIVTRACE_ENOMEM) { /* the path's copy at the open */
            tf_same_training(&o);
            assert_int_equal(tf_reports(err), 1);
            fired++;
            continue;
        }
        if (o.status == DIVTRACE_OK) {
            tf_same_training(&o);
            assert_int_equal(o.fails + o.close_rc + tf_reports(err), 0);
            quiet++;
            unlink(c.path);
            continue;
        }
        quiet = 0;
        fired++;
        tf_faulted(&o, err, DIVTRACE_ENOMEM, c.path, "out of memory");
        tf_prefix(c.path, 0, TF_STEPS - 1);
        struct trace_file *tf;
        assert_int_equal(trace_open(&tf, c.path), 0);
        assert_true(tf->nevents >= 1);
        assert_int_equal(tf->events[tf->nevents - 1].code, TRACE_EVENT_STOPPED);
        assert_non_null(strstr(tf->events[tf->nevents - 1].text, "recording stopped"));
        trace_close(tf);
        unlink(c.path);
    }
    printf("  %d allocations of the recording path failed in turn, each stopped the recording\n", fired);
    assert_int_equal(quiet, 8);
    assert_true(fired > 20);
}

/* The trace file deleted while it is written: the next checkpoint notices
 * (no checkpoint goes into a file that is gone) and the recording stops. */
static void test_file_deleted(void **state)
{
    (void)state;
    char err[4096];
    struct tf_case c = {TF_UNLINK, tu_path("deleted.dtr"), NULL, 0};
    struct tf_out o;
    tf_run(&c, &o, err, sizeof err);
    tf_faulted(&o, err, DIVTRACE_EIO, c.path, "was deleted");
    assert_non_null(strstr(o.msg, "divtrace_checkpoint_begin"));
    assert_int_equal(access(c.path, F_OK), -1);
}

/* Its folder removed after the last checkpoint: the close notices. */
static void test_folder_removed(void **state)
{
    (void)state;
    char dir[1024], path[1100], err[4096];
    snprintf(dir, sizeof dir, "%s", tu_path("gone"));
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/run.dtr", dir);
    struct tf_case c = {TF_RMDIR, path, dir, 0};
    struct tf_out o;
    tf_run(&c, &o, err, sizeof err);
    printf("  stderr: %s", err);
    tf_same_training(&o);
    assert_int_equal(o.fails + o.status, 0); /* nothing noticed before the close */
    assert_int_equal(o.close_rc, DIVTRACE_EIO);
    assert_int_equal(tf_reports(err), 1);
    if (!strstr(o.close_msg, "was deleted") || !strstr(err, o.close_msg))
        fail_msg("message '%s', stderr '%s'", o.close_msg, err);
    assert_int_equal(access(dir, F_OK), -1);
}

/* Renamed (or moved) while written: no fault, the trace whole where it went. */
static void test_file_renamed(void **state)
{
    (void)state;
    char err[4096], to[1100];
    snprintf(to, sizeof to, "%s", tu_path("renamed-to.dtr"));
    struct tf_case c = {TF_RENAME, tu_path("renamed.dtr"), to, 0};
    struct tf_out o;
    tf_run(&c, &o, err, sizeof err);
    tf_same_training(&o);
    assert_int_equal(o.fails + o.status + o.close_rc + tf_reports(err), 0);
    struct trace_file *tf;
    assert_int_equal(trace_open(&tf, to), 0);
    assert_true(tf->complete);
    assert_int_equal(tf->nsteps, TF_STEPS);
    trace_close(tf);
}

/* divtrace_status and divtrace_report_faults. */
static void test_status_api(void **state)
{
    (void)state;
    divtrace *t;
    assert_int_equal(divtrace_status(NULL), DIVTRACE_EINVAL);
    assert_int_equal(divtrace_open(&t, tu_path("status.dtr"), NULL, NULL), DIVTRACE_OK);
    assert_int_equal(divtrace_status(t), DIVTRACE_OK);
    assert_int_equal(divtrace_close(t, 0, NULL), DIVTRACE_OK);
    assert_int_equal(divtrace_report_faults(0), 1);
    assert_int_equal(divtrace_report_faults(1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_api),
        cmocka_unit_test(test_disk_full_step),
        cmocka_unit_test(test_disk_full_checkpoint),
        cmocka_unit_test(test_unwritable_path),
        cmocka_unit_test(test_alloc_faults),
        cmocka_unit_test(test_file_deleted),
        cmocka_unit_test(test_folder_removed),
        cmocka_unit_test(test_file_renamed),
    };
    return cmocka_run_group_tests(tests, tf_setup, NULL);
}
