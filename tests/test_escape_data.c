/* test_escape_data.c: the plateau detector (escape_analyze with its default
 * parameters) against the labelled loss curves of tests/escape-data:
 * synthetic curves made from the parameters in synthetic.csv, and real
 * curves recorded by `divtrace record` (real/NAME.csv, labelled by hand in
 * real.csv). Prints the precision and recall of plateaus and of escapes and
 * fails when any of the four is below 0.95. tests/escape-data/README.md
 * states the curve model, the labelling rule and the matching rule.
 *
 * Run by hand from the build directory: tests/test_escape_data prints the
 * table; TEST_ESCAPE_DATA_VERBOSE=1 adds every curve that does not match
 * its labels; TEST_ESCAPE_DATA_DUMP=NAME prints curve NAME as "step loss"
 * lines (for plotting) and exits. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "escape.h"

#ifndef DT_ESCAPE_DATA_DIR
#define DT_ESCAPE_DATA_DIR "tests/escape-data"
#endif
#define TD_MAX_LABELS 16
#define TD_MIN_SCORE 0.95

enum { TD_SYNTH, TD_REAL, TD_ALL, TD_NSRC };
static const char *const td_src_name[TD_NSRC] = {"synthetic", "real", "all"};

struct td_curve {
    char name[64];
    int src;                 /* TD_SYNTH or TD_REAL */
    size_t n;
    double *loss;            /* (N) */
    size_t np, pa[TD_MAX_LABELS], pb[TD_MAX_LABELS]; /* labelled plateaus [pa, pb] */
    int popt[TD_MAX_LABELS];                         /* "A-B?": optional (ambiguous) */
    size_t ne, esc[TD_MAX_LABELS];                   /* labelled escapes */
};

struct td_count {
    size_t labelled, detected, matched;
};

struct td_score {
    struct td_count plat[TD_NSRC], esc[TD_NSRC];
    size_t optional[TD_NSRC], optional_found[TD_NSRC];
    size_t none_curves[TD_NSRC], none_said[TD_NSRC];
};

static const char *td_dir(void)
{
    static char buf[4096];
    const char *top = getenv("top_srcdir");
    if (top && *top) {
        snprintf(buf, sizeof buf, "%s/tests/escape-data", top);
        return buf;
    }
    return DT_ESCAPE_DATA_DIR;
}

/* ---- the synthetic curves (README.md: "Synthetic curves") ---- */

static uint64_t td_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static double td_uniform(uint64_t *s)
{
    return (double)(td_splitmix(s) >> 11) * 0x1p-53;
}

static double td_logistic(double x)
{
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

struct td_synth {
    size_t n;
    uint64_t seed;
    double level, init, tau, tilt, noise, ar, spikes;
    int ndrops;
    double de[TD_MAX_LABELS], dw[TD_MAX_LABELS], dd[TD_MAX_LABELS];
    char tail[4];            /* "fla", "pow", "exp" */
    double ta, tc;
};

static void td_synth_curve(const struct td_synth *p, double *loss /* (N) */)
{
    double ts = 0;
    for (int i = 0; i < p->ndrops; i++)
        ts = fmax(ts, p->de[i]);
    uint64_t st = p->seed;
    double x = 0;
    for (size_t t = 0; t < p->n; t++) {
        double tt = (double)t;
        double y = log(p->level) - p->tilt * tt;
        if (p->init > 0)
            y += log1p(p->init * exp(-tt / p->tau));
        for (int i = 0; i < p->ndrops; i++)
            y += log1p(-p->dd[i]) * td_logistic((tt - p->de[i]) / p->dw[i]);
        double u = fmax(0.0, tt - ts);
        if (strcmp(p->tail, "pow") == 0)
            y -= p->ta * log1p(u / p->tc);
        else if (strcmp(p->tail, "exp") == 0)
            y -= p->ta * u;
        double u1 = td_uniform(&st), u2 = td_uniform(&st);
        double g = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        x = t == 0 || p->ar == 0 ? g : p->ar * x + sqrt(1.0 - p->ar * p->ar) * g;
        y += p->noise * x;
        if (td_uniform(&st) < p->spikes)
            y += log1p(2.0 * td_uniform(&st));
        loss[t] = exp(y);
    }
}

/* ---- reading ---- */

/* "A-B A-B? ..." or "none" into c's plateaus (a '?' marks an optional
 * one); 0 or -1. */
static int td_parse_plateaus(const char *s, struct td_curve *c)
{
    c->np = 0;
    if (strcmp(s, "none") == 0)
        return 0;
    const char *q = s;
    while (*q) {
        char *e;
        unsigned long a = strtoul(q, &e, 10);
        if (e == q || *e != '-' || c->np == TD_MAX_LABELS)
            return -1;
        q = e + 1;
        unsigned long b = strtoul(q, &e, 10);
        if (e == q || b < a || b >= c->n || (c->np && a <= c->pb[c->np - 1]))
            return -1;
        c->popt[c->np] = *e == '?';
        c->pa[c->np] = a;
        c->pb[c->np++] = b;
        q = e + (*e == '?');
        while (*q == ' ')
            q++;
    }
    return 0;
}

/* "E E ..." or "none" into c's escapes; 0 or -1. */
static int td_parse_escapes(const char *s, struct td_curve *c)
{
    c->ne = 0;
    if (strcmp(s, "none") == 0)
        return 0;
    const char *q = s;
    while (*q) {
        char *e;
        unsigned long v = strtoul(q, &e, 10);
        if (e == q || v >= c->n || c->ne == TD_MAX_LABELS)
            return -1;
        c->esc[c->ne++] = v;
        q = e;
        while (*q == ' ')
            q++;
    }
    return 0;
}

/* Split line at commas into at most max fields, the last running to the
 * end of the line; returns the count. */
static int td_split(char *line, char **f, int max)
{
    line[strcspn(line, "\r\n")] = 0;
    int n = 0;
    f[n++] = line;
    for (char *q = line; *q && n < max; q++)
        if (*q == ',') {
            *q = 0;
            f[n++] = q + 1;
        }
    return n;
}

static FILE *td_open(const char *name)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", td_dir(), name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s: %s (set top_srcdir to the source tree)", path, strerror(errno));
    return f;
}

static void td_push(struct td_curve **v, size_t *n, const struct td_curve *c)
{
    *v = realloc(*v, (*n + 1) * sizeof **v);
    assert_non_null(*v);
    (*v)[(*n)++] = *c;
}

/* synthetic.csv: name,steps,seed,level,init,tau,tilt,drops,tail,noise,ar,
 * spikes,plateaus,escapes */
static void td_read_synthetic(struct td_curve **v, size_t *nv)
{
    FILE *f = td_open("synthetic.csv");
    char line[2048];
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        if (++ln == 1)
            continue;
        char *fl[14];
        if (td_split(line, fl, 14) != 14)
            fail_msg("synthetic.csv:%d: expected 14 fields", ln);
        struct td_curve c = {0};
        struct td_synth p = {0};
        snprintf(c.name, sizeof c.name, "%s", fl[0]);
        c.src = TD_SYNTH;
        c.n = p.n = strtoul(fl[1], NULL, 10);
        p.seed = strtoull(fl[2], NULL, 10);
        p.level = strtod(fl[3], NULL);
        p.init = strtod(fl[4], NULL);
        p.tau = strtod(fl[5], NULL);
        p.tilt = strtod(fl[6], NULL);
        if (strcmp(fl[7], "none") != 0)
            for (char *q = fl[7]; *q;) {
                char *e;
                if (p.ndrops == TD_MAX_LABELS)
                    fail_msg("synthetic.csv:%d: too many drops", ln);
                p.de[p.ndrops] = strtod(q, &e);
                p.dw[p.ndrops] = strtod(e + 1, &e);
                p.dd[p.ndrops++] = strtod(e + 1, &e);
                q = e;
                while (*q == ' ')
                    q++;
            }
        snprintf(p.tail, sizeof p.tail, "%.3s", fl[8]);
        if (strcmp(p.tail, "fla") != 0) {
            char *e;
            p.ta = strtod(fl[8] + 4, &e);
            if (strcmp(p.tail, "pow") == 0)
                p.tc = strtod(e + 1, NULL);
        }
        p.noise = strtod(fl[9], NULL);
        p.ar = strtod(fl[10], NULL);
        p.spikes = strtod(fl[11], NULL);
        if (c.n < 3 || td_parse_plateaus(fl[12], &c) < 0 || td_parse_escapes(fl[13], &c) < 0)
            fail_msg("synthetic.csv:%d: bad steps or labels", ln);
        c.loss = malloc(c.n * sizeof *c.loss);
        assert_non_null(c.loss);
        td_synth_curve(&p, c.loss);
        td_push(v, nv, &c);
    }
    fclose(f);
}

/* real.csv: name,steps,plateaus,escapes,command (the command runs to the
 * end of the line); the curve in real/NAME.csv, "step,loss". */
static void td_read_real(struct td_curve **v, size_t *nv)
{
    FILE *f = td_open("real.csv");
    char line[2048];
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        if (++ln == 1)
            continue;
        char *fl[5];
        if (td_split(line, fl, 5) != 5)
            fail_msg("real.csv:%d: expected 5 fields", ln);
        struct td_curve c = {0};
        snprintf(c.name, sizeof c.name, "%s", fl[0]);
        c.src = TD_REAL;
        c.n = strtoul(fl[1], NULL, 10);
        if (c.n < 3 || td_parse_plateaus(fl[2], &c) < 0 || td_parse_escapes(fl[3], &c) < 0)
            fail_msg("real.csv:%d: bad steps or labels", ln);
        c.loss = malloc(c.n * sizeof *c.loss);
        assert_non_null(c.loss);
        char name[128];
        snprintf(name, sizeof name, "real/%s.csv", c.name);
        FILE *g = td_open(name);
        char l2[256];
        size_t k = 0;
        int ln2 = 0;
        while (fgets(l2, sizeof l2, g)) {
            if (++ln2 == 1)
                continue;
            char *f2[2];
            if (td_split(l2, f2, 2) != 2 || k >= c.n || strtoul(f2[0], NULL, 10) != k)
                fail_msg("real/%s.csv:%d: expected step %zu,loss", c.name, ln2, k);
            c.loss[k++] = strtod(f2[1], NULL);
        }
        fclose(g);
        if (k != c.n)
            fail_msg("real/%s.csv: %zu steps, real.csv says %zu", c.name, k, c.n);
        td_push(v, nv, &c);
    }
    fclose(f);
}

/* ---- matching (README.md: "Matching rule") ---- */

/* Escapes match within max(10 steps, 5% of the curve). */
static double td_escape_tol(size_t n)
{
    return fmax(10.0, 0.05 * (double)n);
}

static size_t td_overlap(size_t a, size_t b, size_t c, size_t d)
{
    size_t lo = a > c ? a : c, hi = b < d ? b : d;
    return hi >= lo ? hi - lo + 1 : 0;
}

/* The unused detection of largest overlap with label i among those that
 * overlap at least half of both, or SIZE_MAX. */
static size_t td_best_plateau(const struct td_curve *c, size_t i, const struct escape_result *r,
                              const int *used)
{
    size_t best = SIZE_MAX, bov = 0, ll = c->pb[i] - c->pa[i] + 1;
    for (size_t j = 0; j < r->nplateaus; j++) {
        const struct escape_plateau *p = &r->plateaus[j];
        size_t ov = td_overlap(c->pa[i], c->pb[i], p->start, p->end);
        size_t dl = p->end - p->start + 1;
        if (!used[j] && 2 * ov >= ll && 2 * ov >= dl && ov > bov) {
            best = j;
            bov = ov;
        }
    }
    return best;
}

/* Score one curve's result against its labels; with verbose, print the
 * curve when anything does not match. */
static void td_score_curve(const struct td_curve *c, const struct escape_result *r,
                           struct td_score *s, int verbose)
{
    /* used[j]: 1 matched to a required label, 2 to an optional one */
    int *used = calloc(r->nplateaus + 1, sizeof *used);
    int *eused = calloc(r->nplateaus + 1, sizeof *eused);
    assert_true(used && eused);
    size_t pm = 0, em = 0, nreq = 0, nopt = 0, optfound = 0, ndp = 0, nde = 0;
    /* plateaus: one to one, each required label to the unused detection of
     * largest overlap among those that overlap at least half of both; then
     * the optional labels: a detection at least half inside one counts
     * neither way */
    for (size_t i = 0; i < c->np; i++) {
        if (c->popt[i])
            continue;
        nreq++;
        size_t j = td_best_plateau(c, i, r, used);
        if (j != SIZE_MAX) {
            used[j] = 1;
            pm++;
        }
    }
    for (size_t i = 0; i < c->np; i++) {
        if (!c->popt[i])
            continue;
        nopt++;
        int found = 0;
        for (size_t j = 0; j < r->nplateaus; j++) {
            const struct escape_plateau *p = &r->plateaus[j];
            size_t ov = td_overlap(c->pa[i], c->pb[i], p->start, p->end);
            if (!used[j] && 2 * ov >= p->end - p->start + 1) {
                used[j] = 2;
                found = 1;
            }
        }
        optfound += found;
    }
    for (size_t j = 0; j < r->nplateaus; j++) {
        ndp += used[j] != 2;
        nde += used[j] != 2 && r->plateaus[j].escaped;
    }
    /* escapes: one to one, each label to the nearest detected escape within
     * the tolerance (an optional plateau's escape is not one) */
    double tol = td_escape_tol(c->n);
    for (size_t i = 0; i < c->ne; i++) {
        size_t best = SIZE_MAX;
        double bd = INFINITY;
        for (size_t j = 0; j < r->nplateaus; j++) {
            const struct escape_plateau *p = &r->plateaus[j];
            double d = fabs((double)p->escape - (double)c->esc[i]);
            if (p->escaped && used[j] != 2 && !eused[j] && d <= tol && d < bd) {
                best = j;
                bd = d;
            }
        }
        if (best != SIZE_MAX) {
            eused[best] = 1;
            em++;
        }
    }
    for (int k = 0; k < TD_NSRC; k++) {
        if (k != c->src && k != TD_ALL)
            continue;
        s->plat[k].labelled += nreq;
        s->plat[k].detected += ndp;
        s->plat[k].matched += pm;
        s->esc[k].labelled += c->ne;
        s->esc[k].detected += nde;
        s->esc[k].matched += em;
        s->optional[k] += nopt;
        s->optional_found[k] += optfound;
        if (nreq == 0 && c->ne == 0) {
            s->none_curves[k]++;
            s->none_said[k] += ndp == 0 && nde == 0;
        }
    }
    int ok = pm == nreq && pm == ndp && em == c->ne && em == nde;
    if (verbose && !ok) {
        printf("%s (%zu steps): labels", c->name, c->n);
        for (size_t i = 0; i < c->np; i++)
            printf(" %zu-%zu%s", c->pa[i], c->pb[i], c->popt[i] ? "?" : "");
        printf(c->np ? "" : " none");
        printf(", escapes");
        for (size_t i = 0; i < c->ne; i++)
            printf(" %zu", c->esc[i]);
        printf(c->ne ? "" : " none");
        printf("\n    detected");
        for (size_t j = 0; j < r->nplateaus; j++) {
            const struct escape_plateau *p = &r->plateaus[j];
            printf(" %zu-%zu", p->start, p->end);
            if (p->escaped)
                printf("(escape %zu)", p->escape);
        }
        printf(r->nplateaus ? "\n" : " none\n");
    }
    free(used);
    free(eused);
}

static double td_ratio(size_t a, size_t b)
{
    return b ? (double)a / (double)b : 1.0;
}

static void td_print_row(const char *what, const char *src, const struct td_count *c)
{
    printf("%-9s %-9s %8zu %8zu %7zu %9.3f %6.3f\n", what, src, c->labelled, c->detected, c->matched,
           td_ratio(c->matched, c->detected), td_ratio(c->matched, c->labelled));
}

static void td_free(struct td_curve *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].loss);
    free(v);
}

static void test_labelled_curves(void **state)
{
    (void)state;
    struct td_curve *v = NULL;
    size_t nv = 0;
    td_read_synthetic(&v, &nv);
    size_t nsyn = nv;
    td_read_real(&v, &nv);
    assert_true(nsyn >= 100 && nv - nsyn >= 10);
    const char *verb = getenv("TEST_ESCAPE_DATA_VERBOSE");
    int verbose = verb && *verb && strcmp(verb, "0") != 0;
    struct td_score s = {0};
    struct escape_params p;
    escape_params_defaults(&p);
    for (size_t i = 0; i < nv; i++) {
        struct escape_result r;
        assert_int_equal(escape_analyze(v[i].loss, NULL, v[i].n, &p, &r), 0);
        /* "no plateau" is unambiguous: no plateau, no escape, one phase */
        if (r.nplateaus == 0) {
            assert_null(r.plateaus);
            assert_int_equal(r.nescapes, 0);
            assert_int_equal(r.phases, 1);
        }
        td_score_curve(&v[i], &r, &s, verbose);
        escape_result_free(&r);
    }
    printf("escape_analyze, default parameters, on %zu labelled curves (%zu synthetic, %zu "
           "real) of %s\n", nv, nsyn, nv - nsyn, td_dir());
    printf("%-9s %-9s %8s %8s %7s %9s %6s\n", "", "curves", "labelled", "detected", "matched",
           "precision", "recall");
    for (int k = 0; k < TD_NSRC; k++)
        td_print_row("plateaus", td_src_name[k], &s.plat[k]);
    for (int k = 0; k < TD_NSRC; k++)
        td_print_row("escapes", td_src_name[k], &s.esc[k]);
    printf("curves labelled none: %zu synthetic, %zu real; reported none on %zu and %zu\n",
           s.none_curves[TD_SYNTH], s.none_curves[TD_REAL], s.none_said[TD_SYNTH],
           s.none_said[TD_REAL]);
    printf("optional (ambiguous) plateaus, not scored: %zu, of which detected %zu\n",
           s.optional[TD_ALL], s.optional_found[TD_ALL]);
    fflush(stdout);
    td_free(v, nv);
    const struct td_count *cs[4] = {&s.plat[TD_ALL], &s.plat[TD_ALL], &s.esc[TD_ALL], &s.esc[TD_ALL]};
    static const char *what[4] = {"plateau precision", "plateau recall", "escape precision",
                                  "escape recall"};
    for (int k = 0; k < 4; k++) {
        double x = k % 2 ? td_ratio(cs[k]->matched, cs[k]->labelled)
                         : td_ratio(cs[k]->matched, cs[k]->detected);
        if (x < TD_MIN_SCORE)
            fail_msg("%s %.3f, below %.2f", what[k], x, TD_MIN_SCORE);
    }
}

/* TEST_ESCAPE_DATA_DUMP=NAME: print that curve, "step loss" per line. */
static int td_dump(const char *name)
{
    struct td_curve *v = NULL;
    size_t nv = 0;
    td_read_synthetic(&v, &nv);
    td_read_real(&v, &nv);
    int found = 0;
    for (size_t i = 0; i < nv && !found; i++)
        if (strcmp(v[i].name, name) == 0) {
            for (size_t t = 0; t < v[i].n; t++)
                printf("%zu %.9g\n", t, v[i].loss[t]);
            found = 1;
        }
    td_free(v, nv);
    if (!found)
        fprintf(stderr, "test_escape_data: no curve named %s\n", name);
    return found ? 0 : 2;
}

int main(void)
{
    const char *dump = getenv("TEST_ESCAPE_DATA_DUMP");
    if (dump && *dump)
        return td_dump(dump);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labelled_curves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
