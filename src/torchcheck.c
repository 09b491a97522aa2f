/* torchcheck.c: reading the adapter's check data back (torchcheck.h) and
 * holding it to reference/modcheck's oracle; a custom module's float64
 * re-evaluations across two runs; re-running a `divtrace run` command to
 * record a step's check data. */
#include "torchcheck.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

const char *tcheck_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t && strlen(t) < 4000 ? t : "/tmp";
}

int tcheck_is_torch(const struct trace_file *tf)
{
    const char *fw = trace_config_get(&tf->cfg, "framework");
    return fw && strcmp(fw, "pytorch") == 0;
}

static struct tcheck_item *tcheck_item_at(struct tcheck_data *d, const char *name, size_t len)
{
    for (int k = 0; k < d->n; k++)
        if (strlen(d->items[k].name) == len && memcmp(d->items[k].name, name, len) == 0)
            return &d->items[k];
    d->items = dt_realloc(d->items, (size_t)(d->n + 1) * sizeof *d->items);
    struct tcheck_item *it = &d->items[d->n++];
    memset(it, 0, sizeof *it);
    it->name = dt_malloc(len + 1);
    memcpy(it->name, name, len);
    it->name[len] = 0;
    return it;
}

static void tcheck_add(struct tcheck_item *it, const char *role, const struct trace_tensor *t)
{
    if (it->nt == TCHECK_MAX_T)
        return;
    struct modcheck_tensor *m = &it->t[it->nt++];
    m->role = role;
    m->ndim = t->ndim;
    for (int k = 0; k < t->ndim && k < 8; k++)
        m->shape[k] = t->shape[k];
    m->count = t->count;
    m->data = t->data;
}

/* An update's outputs are the checkpoint's own tensors: the parameter
 * after the step (out) and its state (state_out.KEY). */
static void tcheck_update_outputs(struct tcheck_data *d, struct tcheck_item *it)
{
    size_t len = strlen(it->name);
    if (len < 8 || strcmp(it->name + len - 7, ".update") != 0)
        return;
    char pname[512];
    snprintf(pname, sizeof pname, "%.*s", (int)(len - 7), it->name);
    static const char *const keys[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
    static const char *const roles[] = {"state_out.exp_avg", "state_out.exp_avg_sq",
                                        "state_out.max_exp_avg_sq", "state_out.momentum_buffer"};
    const struct trace_tensor *p = trace_ckpt_find(&d->ck, pname);
    if (p)
        tcheck_add(it, "out", p);
    for (int k = 0; k < 4; k++) {
        char n[600];
        snprintf(n, sizeof n, "%s.%s", pname, keys[k]);
        if ((p = trace_ckpt_find(&d->ck, n)))
            tcheck_add(it, roles[k], p);
    }
}

int tcheck_load(struct trace_file *tf, uint64_t step, struct tcheck_data *d)
{
    memset(d, 0, sizeof *d);
    d->step = step;
    char prefix[64];
    int plen = snprintf(prefix, sizeof prefix, "check/%" PRIu64 "/", step);
    /* the data of step s are in the checkpoint before step s + 1 */
    for (uint32_t i = 0; i < tf->nckpt; i++) {
        if (tf->ckpt[i].step != step + 1)
            continue;
        if (trace_read_ckpt(tf, i, &d->ck) < 0)
            return DT_ERR;
        for (uint32_t k = 0; k < d->ck.ntensors; k++) {
            const struct trace_tensor *t = &d->ck.t[k];
            if (strncmp(t->name, prefix, (size_t)plen) != 0)
                continue;
            const char *rest = t->name + plen;
            /* RECORD/ROLE, the record's name holding no '/' */
            const char *slash = strchr(rest, '/');
            if (!slash || slash == rest)
                continue;
            struct tcheck_item *it = tcheck_item_at(d, rest, (size_t)(slash - rest));
            const char *role = slash + 1;
            if (strncmp(role, "spec=", 5) == 0) {
                it->spec = (char *)role + 5;
                modcheck_type(it->spec, it->type, sizeof it->type);
            } else {
                tcheck_add(it, role, t);
            }
        }
        if (d->n == 0) {
            trace_ckpt_free(&d->ck);
            continue;
        }
        for (int k = 0; k < d->n; k++)
            tcheck_update_outputs(d, &d->items[k]);
        return 0;
    }
    return 1;
}

void tcheck_free(struct tcheck_data *d)
{
    for (int k = 0; k < d->n; k++)
        free(d->items[k].name);
    free(d->items);
    trace_ckpt_free(&d->ck);
    memset(d, 0, sizeof *d);
}

const struct tcheck_item *tcheck_find(const struct tcheck_data *d, const char *name)
{
    for (int k = 0; k < d->n; k++)
        if (strcmp(d->items[k].name, name) == 0)
            return &d->items[k];
    return NULL;
}

/* A key of a spec ("grad", "skipped", ...): its value into out, or 0. */
static int tcheck_spec_key(const char *spec, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    for (const char *p = spec; (p = strstr(p, key)); p += kl) {
        if ((p == spec || p[-1] == ' ') && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t len = strcspn(v, " ");
            snprintf(out, n, "%.*s", (int)len, v);
            return 1;
        }
    }
    return 0;
}

const char *tcheck_class(const struct tcheck_item *it)
{
    static __thread char buf[64];
    const char *c = it->spec ? strstr(it->spec, "class=") : NULL;
    if (!c)
        return it->type;
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(c + 6, " "), c + 6);
    return buf;
}

int tcheck_custom_backward(const struct tcheck_item *it, char *err, size_t n)
{
    char v[32];
    if (!it->spec || !tcheck_spec_key(it->spec, "grad", v, sizeof v))
        return -1;
    if (!tcheck_spec_key(it->spec, "grad_err", err, n))
        snprintf(err, n, "?");
    return strcmp(v, "fail") == 0;
}

int tcheck_item(const struct tcheck_item *it, struct replay_opcheck *c, char *why, size_t n)
{
    memset(c, 0, sizeof *c);
    c->bitwise = -1;
    c->inputs_recorded = 1;
    c->recorded_ok = -1;
    char v[64];
    if (!it->spec) {
        dt_error_set("check data of %s: no spec", it->name);
        return DT_ERR;
    }
    if (tcheck_spec_key(it->spec, "skipped", v, sizeof v)) {
        snprintf(why, n, "%s (%s): its tensors did not fit the check budget (check_bytes)", it->type,
                 it->name);
        return 1;
    }
    if (tcheck_spec_key(it->spec, "output", v, sizeof v)) {
        snprintf(why, n, "%s (%s): its output is a %s, not a tensor", it->type, it->name, v);
        return 1;
    }
    if (tcheck_spec_key(it->spec, "kwargs", v, sizeof v)) {
        snprintf(why, n, "%s (%s): called with tensor keyword arguments", it->type, it->name);
        return 1;
    }
    if (strcmp(it->type, "custom") == 0) {
        char err[32];
        int b = tcheck_custom_backward(it, err, sizeof err);
        snprintf(why, n, "custom %s (%s): no oracle for a module of your own%s%s%s", tcheck_class(it),
                 it->name, b == 1 ? "; its backward is NOT the derivative of its forward (relative "
                 "disagreement " : b == 0 ? "; its backward agrees with central differences of its "
                 "forward" : "", b == 1 ? err : "", b == 1 ? ")" : "");
        return 1;
    }
    struct modcheck_result res;
    char reason[256];
    int rc = modcheck_run(it->spec, it->t, it->nt, &res, reason, sizeof reason);
    if (rc < 0) {
        dt_error_set("check data of %s: %s", it->name, dt_error());
        return DT_ERR;
    }
    if (rc == 1) {
        snprintf(why, n, "%s (%s)", reason, it->name);
        return 1;
    }
    c->cls = REPLAY_EXACT;
    for (int k = 0; k < res.nout; k++) {
        const struct modcheck_output *o = &res.out[k];
        struct replay_opcheck one;
        memset(&one, 0, sizeof one);
        replay_classify(o->got, o->exact, o->bound, (size_t)o->count, o->least, &one);
        if (one.max_ulp > c->max_ulp)
            c->max_ulp = one.max_ulp;
        if (one.cls > c->cls || (one.cls == c->cls && one.max_ratio > c->max_ratio)) {
            uint64_t mu = c->max_ulp;
            c->cls = one.cls;
            c->max_ratio = one.max_ratio;
            c->worst = one.worst;
            c->worst_value = one.worst_value;
            c->worst_exact = one.worst_exact;
            c->worst_bound = one.worst_bound;
            c->max_ulp = mu;
            c->normwise = o->least > 0;
            if (strcmp(o->role, "out") != 0)
                snprintf(c->algorithm, sizeof c->algorithm, "%s", o->role);
            else
                c->algorithm[0] = 0;
        }
    }
    modcheck_result_free(&res);
    return 0;
}

static const struct modcheck_tensor *tcheck_role(const struct tcheck_item *it, const char *role)
{
    for (int k = 0; k < it->nt; k++)
        if (strcmp(it->t[k].role, role) == 0)
            return &it->t[k];
    return NULL;
}

int tcheck_custom_compare(const struct tcheck_item *a, const struct tcheck_item *b, char *text, size_t n)
{
    const struct modcheck_tensor *ra = tcheck_role(a, "ref64"), *rb = tcheck_role(b, "ref64");
    if (!ra || !rb) {
        snprintf(text, n, "%s has no float64 re-evaluation of %s", !ra ? "A" : "B", a->name);
        return -1;
    }
    if (ra->count != rb->count) {
        snprintf(text, n, "%s's output has %" PRIu64 " elements in A, %" PRIu64 " in B", a->name,
                 ra->count, rb->count);
        return 1;
    }
    /* the same code in float64 from the same float32 inputs: the results
     * agree to float64's rounding of their terms, so the float32 values
     * stored agree to within a rounding, an ulp either way, plus float64
     * cancellation against the largest value */
    double big = 0;
    for (uint64_t k = 0; k < ra->count; k++) {
        double x = fabs((double)ra->data[k]), y = fabs((double)rb->data[k]);
        big = fmax(big, fmax(isfinite(x) ? x : 0, isfinite(y) ? y : 0));
    }
    uint64_t worst = 0;
    double wr = 0;
    for (uint64_t k = 0; k < ra->count; k++) {
        double x = ra->data[k], y = rb->data[k];
        if (x == y || (isnan(x) && isnan(y)))
            continue;
        double tol = 0x1p-22 * (fabs(x) + fabs(y)) + 0x1p-40 * big;
        double r = isnan(x - y) ? INFINITY : fabs(x - y) / tol;
        if (r > wr) {
            wr = r;
            worst = k;
        }
    }
    if (wr <= 1)
        return 0;
    snprintf(text, n, "from the same inputs and parameters its float64 re-evaluations differ: element %"
             PRIu64 " is %.9g in A and %.9g in B", worst, (double)ra->data[worst], (double)rb->data[worst]);
    return 1;
}

int tcheck_rerun(const struct trace_file *tf, uint64_t step, const char *self, const char *out_path,
                 int quiet)
{
    const char *argv_text = trace_config_get(&tf->cfg, "run_argv");
    const char *cwd = trace_config_get(&tf->cfg, "run_cwd");
    if (!argv_text || !cwd) {
        dt_error_set("%s was not recorded by divtrace run (its header has no run_argv): it cannot be "
                     "re-run to record step %" PRIu64 "'s module data", tf->path, step);
        return DT_ERR;
    }
    char steps[32], nstep[32];
    snprintf(steps, sizeof steps, "%" PRIu64, step);
    snprintf(nstep, sizeof nstep, "%" PRIu64, step + 1);
    size_t len = strlen(argv_text) + 256;
    /* run_argv is the command as divtrace run quoted it for a shell */
    /* the options that shaped the records (--modules, --level, ...),
     * then this re-run's: later options win */
    const char *shaping = trace_config_get(&tf->cfg, "run_options");
    len += shaping ? strlen(shaping) : 0;
    char *script = dt_malloc(len);
    snprintf(script, len, "cd \"$1\" || exit 2; exec \"$2\" run -q %s --check-steps \"$3\" --steps \"$4\" "
             "--exit-after \"$4\" -o \"$5\" -- %s", shaping ? shaping : "", argv_text);
    /* in the shell, /proc/self/exe would be the shell */
    char exe[4096];
    ssize_t el = readlink(self, exe, sizeof exe - 1);
    if (el > 0) {
        exe[el] = 0;
        self = exe;
    }
    pid_t pid = fork();
    if (pid < 0) {
        free(script);
        dt_error_set("fork: %s", strerror(errno));
        return DT_ERR;
    }
    if (pid == 0) {
        if (quiet) {
            FILE *f = freopen("/dev/null", "w", stdout);
            (void)f;
        } else if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
            _exit(2);
        }
        execl("/bin/sh", "sh", "-c", script, "sh", cwd, self, steps, nstep, out_path, (char *)NULL);
        _exit(127);
    }
    free(script);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        dt_error_set("re-running %s's command (in %s) to record step %" PRIu64 "'s module data failed "
                     "(exit %d)", tf->path, cwd, step, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return DT_ERR;
    }
    return DT_OK;
}

int tcheck_same_steps(const struct trace_file *a, const struct trace_file *b, uint64_t upto, uint64_t *step)
{
    if (a->nops != b->nops) {
        *step = 0;
        return 0;
    }
    for (uint64_t s = 0; s <= upto; s++) {
        if (s >= a->nsteps || s >= b->nsteps) {
            *step = s;
            return 0;
        }
        const struct trace_step *x = &a->steps[s], *y = &b->steps[s];
        if (x->root != y->root || x->nrec != y->nrec || memcmp(&x->loss, &y->loss, sizeof x->loss) != 0) {
            *step = s;
            return 0;
        }
    }
    return 1;
}
