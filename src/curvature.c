/* curvature.c: the Hessian's extreme eigenvalues at a checkpoint (see
 * curvature.h): Lanczos with full reorthogonalization over a finite-difference
 * Hessian-vector product through the run's own step graph.
 * Dimension letters: N parameters (the operator's dimension), K Krylov
 * dimension (Lanczos steps), M the tridiagonal's order (M <= K). */
#include "curvature.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "rng.h"
#include "run.h"
#include "util.h"

/* rng streams of this module (rng.h: any stream a pure function of the seed) */
#define CURV_STREAM_START 0x6375727601ull   /* Lanczos start vector */
#define CURV_STREAM_INVIT 0x6375727602ull   /* inverse iteration start */

void curvature_params_defaults(struct curvature_params *p)
{
    *p = (struct curvature_params){.iterations = 30, .eps = 1e-3, .seed = 1};
}

static double curv_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- the tridiagonal T (M): diagonal a, off-diagonal b (M - 1) ---- */

/* Eigenvalues of T below x (Sturm sequence of the LDL^T pivots; a pivot
 * that vanishes is taken as -pivmin, as LAPACK's dlaebz does). */
static int curv_sturm_count(const double *a, const double *b, int m, double x, double pivmin)
{
    int count = 0;
    double q = 1;
    for (int i = 0; i < m; i++) {
        q = a[i] - x - (i ? b[i - 1] * b[i - 1] / q : 0);
        if (fabs(q) <= pivmin)
            q = -pivmin;
        if (q < 0)
            count++;
    }
    return count;
}

/* The j-th smallest eigenvalue of T (1 <= j <= m) by bisection in the
 * Gerschgorin interval [gl, gu], to a few ulps of |T|. */
static double curv_tri_eigenvalue(const double *a, const double *b, int m, int j, double gl,
                                  double gu, double pivmin)
{
    double lo = gl, hi = gu; /* count(lo) < j <= count(hi) */
    double tol = 2 * DBL_EPSILON * fmax(fabs(gl), fabs(gu)) + pivmin;
    while (hi - lo > tol) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if (curv_sturm_count(a, b, m, mid, pivmin) >= j)
            hi = mid;
        else
            lo = mid;
    }
    return 0.5 * (lo + hi);
}

/* The unit eigenvector y (M) of T for its eigenvalue lambda by inverse
 * iteration: (T - lambda I) factored by Gaussian elimination with partial
 * pivoting (LAPACK dgttrf's scheme: U has two superdiagonals), pivots below
 * eps |T| replaced by eps |T|. Scratch: 5 M doubles and M ints. */
static void curv_tri_vector(double *y, const double *a, const double *b, int m, double lambda,
                            double tnorm, double *work, int *swap)
{
    if (m == 1) {
        y[0] = 1;
        return;
    }
    double *d = work, *dl = work + m, *du = work + 2 * m, *du2 = work + 3 * m;
    for (int i = 0; i < m; i++)
        d[i] = a[i] - lambda;
    for (int i = 0; i < m - 1; i++)
        dl[i] = du[i] = b[i];
    for (int i = 0; i < m - 1; i++) {
        du2[i] = 0;
        swap[i] = 0;
        if (fabs(d[i]) >= fabs(dl[i])) {
            if (d[i] != 0) {
                double f = dl[i] / d[i];
                dl[i] = f;
                d[i + 1] -= f * du[i];
            } else {
                dl[i] = 0; /* the column is zero below the pivot too */
            }
        } else {
            /* rows i and i+1 change places */
            double f = d[i] / dl[i];
            d[i] = dl[i];
            dl[i] = f;
            double t = du[i];
            du[i] = d[i + 1];
            d[i + 1] = t - f * d[i + 1];
            if (i < m - 2) {
                du2[i] = du[i + 1];
                du[i + 1] = -f * du[i + 1];
            }
            swap[i] = 1;
        }
    }
    double tiny = DBL_EPSILON * (tnorm > 0 ? tnorm : 1);
    for (int i = 0; i < m; i++)
        if (fabs(d[i]) < tiny)
            d[i] = d[i] < 0 ? -tiny : tiny;
    for (int i = 0; i < m; i++)
        y[i] = 1 + rng_uniform(0, CURV_STREAM_INVIT, (uint64_t)i);
    /* lambda is an eigenvalue to a few ulps: two solves converge; a third
     * settles a vector of a cluster */
    for (int it = 0; it < 3; it++) {
        for (int i = 0; i < m - 1; i++) {
            if (swap[i]) {
                double t = y[i] - dl[i] * y[i + 1];
                y[i] = y[i + 1];
                y[i + 1] = t;
            } else {
                y[i + 1] -= dl[i] * y[i];
            }
        }
        y[m - 1] /= d[m - 1];
        y[m - 2] = (y[m - 2] - du[m - 2] * y[m - 1]) / d[m - 2];
        for (int i = m - 3; i >= 0; i--)
            y[i] = (y[i] - du[i] * y[i + 1] - du2[i] * y[i + 2]) / d[i];
        double s = sqrt(curv_dot(y, y, (size_t)m));
        for (int i = 0; i < m; i++)
            y[i] /= s;
    }
}

/* The extreme eigenvalues of T and the last components of their unit
 * eigenvectors. */
static void curv_tri_extremes(const double *a, const double *b, int m, double *lo, double *hi,
                              double *ylo, double *yhi)
{
    if (m == 1) {
        *lo = *hi = a[0];
        *ylo = *yhi = 1;
        return;
    }
    double gl = INFINITY, gu = -INFINITY, b2max = 0;
    for (int i = 0; i < m; i++) {
        double r = (i ? fabs(b[i - 1]) : 0) + (i < m - 1 ? fabs(b[i]) : 0);
        gl = fmin(gl, a[i] - r);
        gu = fmax(gu, a[i] + r);
        if (i < m - 1)
            b2max = fmax(b2max, b[i] * b[i]);
    }
    double tnorm = fmax(fabs(gl), fabs(gu));
    double pivmin = DBL_MIN * fmax(1, b2max);
    gl -= 4 * DBL_EPSILON * tnorm + 2 * pivmin;
    gu += 4 * DBL_EPSILON * tnorm + 2 * pivmin;
    *lo = curv_tri_eigenvalue(a, b, m, 1, gl, gu, pivmin);
    *hi = curv_tri_eigenvalue(a, b, m, m, gl, gu, pivmin);
    double *work = dt_malloc(5 * (size_t)m * sizeof *work);
    int *swap = dt_malloc((size_t)m * sizeof *swap);
    double *y = work + 4 * m;
    curv_tri_vector(y, a, b, m, *lo, tnorm, work, swap);
    *ylo = y[m - 1];
    curv_tri_vector(y, a, b, m, *hi, tnorm, work, swap);
    *yhi = y[m - 1];
    free(work);
    free(swap);
}

/* ---- Lanczos ---- */

int curvature_lanczos(curvature_matvec_fn f, void *arg, size_t n, const struct curvature_params *p,
                      struct curvature_result *r)
{
    memset(r, 0, sizeof *r);
    r->loss = r->grad_norm = NAN;
    r->dim = n;
    if (n == 0) {
        dt_error_set("Lanczos: the operator has dimension 0");
        return DT_ERR;
    }
    if (p->iterations < 1) {
        dt_error_set("Lanczos: %d iterations: at least 1 is needed", p->iterations);
        return DT_ERR;
    }
    int k = p->iterations;
    if ((size_t)k > n)
        k = (int)n; /* no more than n orthonormal vectors */
    /* Memory: the K Lanczos vectors (K N doubles) and one more; for
     * K = 30 and N = 1e6, 248 MB. */
    if (n > SIZE_MAX / sizeof(double) / ((size_t)k + 1)) {
        dt_error_set("Lanczos: %d vectors of %zu doubles do not fit in memory", k + 1, n);
        return DT_ERR;
    }
    double *q = malloc((size_t)k * n * sizeof *q);    /* (K, N) */
    double *w = malloc(n * sizeof *w);                 /* (N) */
    if (!q || !w) {
        free(q);
        free(w);
        dt_error_set("Lanczos: out of memory for %d vectors of %zu doubles (%.0f MB): use fewer "
                     "iterations", k + 1, n, (double)(k + 1) * (double)n * 8 / 1e6);
        return DT_ERR;
    }
    double *alpha = dt_malloc((size_t)k * sizeof *alpha), *beta = dt_malloc((size_t)k * sizeof *beta);
    int rc = DT_ERR;

    for (size_t i = 0; i < n; i++)
        q[i] = rng_uniform(p->seed, CURV_STREAM_START, i) - 0.5;
    double s = sqrt(curv_dot(q, q, n));
    if (!(s > 0)) { /* every draw exactly 0.5: take e_1 */
        memset(q, 0, n * sizeof *q);
        q[0] = s = 1;
    }
    for (size_t i = 0; i < n; i++)
        q[i] /= s;

    int m = 0;
    double scale = 0; /* estimate of |T|: breakdown is relative to it */
    for (int j = 0; j < k; j++) {
        double *qj = q + (size_t)j * n;
        if (f(arg, qj, w) < 0)
            goto out;
        double a = curv_dot(qj, w, n);
        if (!isfinite(a) || !isfinite(curv_dot(w, w, n))) {
            dt_error_set("Lanczos step %d: the operator gave a value that is not finite", j + 1);
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            w[i] -= a * qj[i];
        if (j > 0)
            for (size_t i = 0; i < n; i++)
                w[i] -= beta[j - 1] * qj[(ptrdiff_t)i - (ptrdiff_t)n];
        /* Full reorthogonalization, twice ("twice is enough", Parlett):
         * without it the Ritz values of a long run repeat ("ghosts"). */
        for (int pass = 0; pass < 2; pass++)
            for (int l = 0; l <= j; l++) {
                const double *ql = q + (size_t)l * n;
                double c = curv_dot(ql, w, n);
                for (size_t i = 0; i < n; i++)
                    w[i] -= c * ql[i];
            }
        alpha[j] = a;
        beta[j] = sqrt(curv_dot(w, w, n));
        m = j + 1;
        scale = fmax(scale, fabs(a) + beta[j] + (j ? beta[j - 1] : 0));
        /* breakdown: the Krylov space is invariant and T's eigenvalues are
         * eigenvalues of the operator */
        if (beta[j] <= 1e-12 * scale || j + 1 == k)
            break;
        double *qn = qj + n;
        for (size_t i = 0; i < n; i++)
            qn[i] = w[i] / beta[j];
    }
    double ylo, yhi;
    curv_tri_extremes(alpha, beta, m, &r->lo, &r->hi, &ylo, &yhi);
    r->iterations = m;
    /* |A Q y - theta Q y| for the operator as applied, in exact arithmetic:
     * it leaves out the operator's own error (a finite-difference Hv is
     * good to about 1e-4 |H|) and rounding (about 1e-16 |T|) */
    r->lo_resid = fabs(beta[m - 1] * ylo);
    r->hi_resid = fabs(beta[m - 1] * yhi);
    rc = DT_OK;
out:
    free(q);
    free(w);
    free(alpha);
    free(beta);
    return rc;
}

/* ---- the Hessian of a recorded run ---- */

struct curv_op {
    struct run r;
    struct train_config tc;
    uint64_t step;
    int *param;                /* parameter nodes with a gradient, graph order */
    int nparam;
    size_t n;                  /* their elements, all together */
    float *theta;              /* (N) the checkpoint's parameters */
    float *x;                  /* (N) staging: perturbed parameters, then a gradient */
    double *gp;                /* (N) g(theta + h v) */
    double h;                  /* the absolute step along a unit v */
};

/* g(th) into out: every parameter set to th, one step's ops run (the
 * optimizer's updates write their own buffers: the parameter leaves keep
 * th, since exec_advance is not called), every parameter's gradient read. */
static void curv_grad(struct curv_op *o, const float *th, double *out)
{
    struct run *r = &o->r;
    size_t off = 0;
    for (int k = 0; k < o->nparam; k++) {
        exec_set(&r->e, o->param[k], th + off);
        off += r->g.nodes[o->param[k]].count;
    }
    run_step_exec(r, o->step, UINT64_MAX);
    off = 0;
    for (int k = 0; k < o->nparam; k++) {
        exec_get(&r->e, graph_grad_of(&r->g, o->param[k]), o->x + off);
        off += r->g.nodes[o->param[k]].count;
    }
    for (size_t i = 0; i < o->n; i++)
        out[i] = o->x[i];
}

/* y = H x ~ |x| (g(theta + h v) - g(theta - h v)) / (2 h), v = x / |x|. */
static int curv_matvec(void *arg, const double *x, double *y)
{
    struct curv_op *o = arg;
    double nx = sqrt(curv_dot(x, x, o->n));
    if (nx == 0) {
        memset(y, 0, o->n * sizeof *y);
        return DT_OK;
    }
    double c = o->h / nx;
    for (size_t i = 0; i < o->n; i++)
        o->x[i] = (float)(o->theta[i] + c * x[i]);
    curv_grad(o, o->x, o->gp);
    for (size_t i = 0; i < o->n; i++)
        o->x[i] = (float)(o->theta[i] - c * x[i]);
    curv_grad(o, o->x, y);
    double f = nx / (2 * o->h);
    for (size_t i = 0; i < o->n; i++)
        y[i] = (o->gp[i] - y[i]) * f;
    return DT_OK;
}

static int curv_find_ckpt(const struct trace_file *tf, uint64_t step)
{
    for (uint32_t i = 0; i < tf->nckpt; i++)
        if (tf->ckpt[i].step == step)
            return (int)i;
    char list[256] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < tf->nckpt && len < sizeof list; i++) {
        if (i == 8 && tf->nckpt > 10) {
            len += (size_t)snprintf(list + len, sizeof list - len, ", ..., %" PRIu64,
                                    tf->ckpt[tf->nckpt - 1].step);
            break;
        }
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%" PRIu64, i ? ", " : "",
                                tf->ckpt[i].step);
    }
    dt_error_set("%s has no checkpoint at step %" PRIu64 " (checkpoints: %s)", tf->path, step,
                 tf->nckpt ? list : "none");
    return -1;
}

static void curv_op_close(struct curv_op *o)
{
    free(o->param);
    free(o->theta);
    free(o->x);
    free(o->gp);
    run_close(&o->r);
}

/* The run of tf at its checkpoint ci with that step's batch uploaded. */
static int curv_op_open(struct curv_op *o, struct trace_file *tf, int ci,
                        const struct curvature_params *p)
{
    memset(o, 0, sizeof *o);
    if (run_config_from_trace(&o->tc, &tf->cfg) < 0)
        return DT_ERR;
    /* no tracing: nothing is hashed or written */
    if (run_open(&o->r, &o->tc, 0, 0) < 0)
        return DT_ERR;
    struct run *r = &o->r;
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, r->data.hash);
    const char *have = trace_config_get(&tf->cfg, "data_hash");
    if (!have || strcmp(have, want) != 0) {
        dt_error_set("the data at %s is not the data %s was recorded with (hash %s, recorded %s)",
                     r->data.path, tf->path, want, have ? have : "none");
        return DT_ERR;
    }
    /* the run's own loss: a fault it was recorded with stays in */
    if (o->tc.inject && fault_install(r, o->tc.inject) < 0)
        return DT_ERR;
    struct trace_ckpt ck;
    memset(&ck, 0, sizeof ck);
    /* a --flip-bit of this step is in the checkpoint already (taken after it) */
    int rc = trace_read_ckpt(tf, (uint32_t)ci, &ck) < 0 || run_ckpt_load(r, &ck) < 0 ? DT_ERR : DT_OK;
    o->step = ck.step;
    trace_ckpt_free(&ck);
    if (rc < 0)
        return DT_ERR;
    run_step_begin(r, o->step);

    o->param = dt_calloc((size_t)r->g.n, sizeof *o->param);
    for (int i = 0; i < r->g.n; i++)
        if (r->g.nodes[i].type == OP_PARAM && graph_grad_of(&r->g, i) >= 0) {
            o->param[o->nparam++] = i;
            o->n += r->g.nodes[i].count;
        }
    if (o->n == 0) {
        dt_error_set("%s: the model has no parameters with a gradient", tf->path);
        return DT_ERR;
    }
    o->theta = dt_malloc(o->n * sizeof *o->theta);
    o->x = dt_malloc(o->n * sizeof *o->x);
    o->gp = dt_malloc(o->n * sizeof *o->gp);
    size_t off = 0;
    for (int k = 0; k < o->nparam; k++) {
        exec_get(&r->e, o->param[k], o->theta + off);
        off += r->g.nodes[o->param[k]].count;
    }
    /* The step h = eps max(|theta|, 1): theta +- h v is rounded to float32,
     * an error of at most 2^-24 |theta| in all, so the direction taken is
     * v to 2^-24 / eps relative (6e-5 at the default), whatever N; and h
     * stays a fixed fraction of the parameters' scale, so the truncation
     * error O(h^2) does not depend on N either. */
    double t2 = 0;
    for (size_t i = 0; i < o->n; i++)
        t2 += (double)o->theta[i] * o->theta[i];
    o->h = p->eps * fmax(sqrt(t2), 1.0);
    return DT_OK;
}

/* Any backend the build has, as the header names it: cpu, cuda, cudnn, or
 * mpfr (exact to its precision and slow: about 2.5 s for 30 steps of the
 * 784-4-784 autoencoder, batch 20). The cpu backend runs with OpenBLAS's
 * kernel of this process, not the trace's (replay re-executes for that;
 * a library function cannot): the gradients differ by rounding only.
 * Memory: K N doubles of Lanczos, N doubles and 2 N floats here, and the
 * run itself. */
int curvature_at_step(const char *path, uint64_t step, const struct curvature_params *p,
                      struct curvature_result *r)
{
    memset(r, 0, sizeof *r);
    if (!(p->eps > 0) || !(p->eps < 1)) {
        dt_error_set("the finite-difference step %g must lie in (0, 1) (relative to |theta|)",
                     p->eps);
        return DT_ERR;
    }
    if (p->iterations < 1) {
        dt_error_set("%d Lanczos iterations: at least 1 is needed", p->iterations);
        return DT_ERR;
    }
    struct trace_file *tf;
    if (trace_open(&tf, path) < 0)
        return DT_ERR;
    int rc = DT_ERR;
    int ci = curv_find_ckpt(tf, step);
    struct curv_op o;
    memset(&o, 0, sizeof o);
    if (ci < 0)
        goto out;
    if (curv_op_open(&o, tf, ci, p) < 0)
        goto out;
    /* loss and gradient at theta itself */
    curv_grad(&o, o.theta, o.gp);
    double loss = run_loss(&o.r, o.step);
    double gnorm = sqrt(curv_dot(o.gp, o.gp, o.n));
    if (curvature_lanczos(curv_matvec, &o, o.n, p, r) < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dt_error());
        dt_error_set("%s at step %" PRIu64 ": %s", path, step, msg);
        goto out;
    }
    r->step = step;
    r->loss = loss;
    r->grad_norm = gnorm;
    rc = DT_OK;
out:
    curv_op_close(&o);
    trace_close(tf);
    return rc;
}
