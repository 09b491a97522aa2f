/* plot.c: the PNG plots of `divtrace escape --plot DIR`, drawn by gnuplot
 * through a pipe with the data inline (why gnuplot: see plot.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diff.h"
#include "plot.h"
#include "util.h"

int plot_check(void)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        if (n > 0 && n + sizeof "/gnuplot" <= sizeof buf) {
            memcpy(buf, p, n);
            memcpy(buf + n, "/gnuplot", sizeof "/gnuplot");
            if (access(buf, X_OK) == 0)
                return 0;
        }
        p += n + (p[n] == ':');
    }
    dt_error_set("--plot needs gnuplot, which is not on PATH (install gnuplot-nox)");
    return -1;
}

void plot_str(FILE *g, const char *s)
{
    fputc('\'', g);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', g);
        fputc(*s, g);
    }
    fputc('\'', g);
}

static const char *plot_base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

FILE *plot_open(const char *path, const char *title, const char *xlabel, const char *ylabel,
                FILE **err)
{
    fflush(NULL);
    int saved = -1;
    if ((*err = tmpfile()) != NULL && (saved = dup(2)) >= 0)
        dup2(fileno(*err), 2);
    FILE *g = popen("gnuplot", "w");
    int e = errno;
    if (saved >= 0) {   /* the child has fd 2 already; ours comes back */
        dup2(saved, 2);
        close(saved);
    }
    if (!g) {
        if (*err)
            fclose(*err);
        *err = NULL;
        dt_error_set("cannot start gnuplot: %s", strerror(e));
        return NULL;
    }
    fputs("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
          "  set terminal pngcairo noenhanced size 1000,600\n"
          "} else {\n"
          "  set terminal png noenhanced size 1000,600\n"
          "}\nset output ", g);
    plot_str(g, path);
    fputs("\nset title ", g);
    plot_str(g, title);
    fputs("\nset xlabel ", g);
    plot_str(g, xlabel);
    fputs("\nset ylabel ", g);
    plot_str(g, ylabel);
    fputs("\nset key outside right top\nset grid\n", g);
    return g;
}

int plot_finish(FILE *g, FILE *err, int *st, char last[PLOT_LAST])
{
    fputs("unset output\n", g);
    int werr = fflush(g) != 0 || ferror(g);
    *st = pclose(g);
    char line[PLOT_LAST];
    last[0] = 0;
    if (err) {
        rewind(err);
        while (fgets(line, sizeof line, err)) {
            line[strcspn(line, "\n")] = 0;
            const char *p = line + strspn(line, " \t");
            if (*p)
                snprintf(last, PLOT_LAST, "%s", p);
        }
        fclose(err);
    }
    return *st == -1 || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0 || werr ? -1 : 0;
}

/* plot_finish: 0, or -1 with dt_error set. */
static int plot_close(FILE *g, FILE *err, const char *path)
{
    int st;
    char last[PLOT_LAST];
    if (plot_finish(g, err, &st, last) < 0) {
        dt_error_set("gnuplot failed to write %s (%s %d)%s%s", path,
                     st != -1 && WIFSIGNALED(st) ? "signal" : "exit status",
                     st == -1 ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                     *last ? ": " : "", last);
        return -1;
    }
    return 0;
}

/* A dashed vertical line at each escape step of run k, in its colour. */
static void plot_escape_lines(FILE *g, const struct plot_run *run, int k)
{
    const struct escape_result *r = run->r;
    for (size_t i = 0; i < r->nplateaus; i++)
        if (r->plateaus[i].escaped)
            fprintf(g, "set arrow from %" PRIu64 ", graph 0 to %" PRIu64
                       ", graph 1 nohead dt 2 lw 2 lc %d front\n",
                    run->tf->steps[r->plateaus[i].escape].step,
                    run->tf->steps[r->plateaus[i].escape].step, k + 1);
}

/* The legend entry of run k's escape lines (arrows have none). */
static void plot_escape_key(FILE *g, const struct plot_run *run, int k)
{
    if (run->r->nescapes == 0)
        return;
    fputs(", NaN with lines dt 2 lw 2 lc ", g);
    fprintf(g, "%d title ", k + 1);
    char t[300];
    snprintf(t, sizeof t, "%s escapes", plot_base(run->tf->path));
    plot_str(g, t);
}

static int plot_loss(const char *path, const struct plot_run *runs, size_t nruns)
{
    FILE *err, *g = plot_open(path, "loss, plateaus (thick) and escapes (dashed)", "step",
                              "loss (log scale)", &err);
    if (!g)
        return -1;
    fputs("set logscale y\n", g);
    for (size_t k = 0; k < nruns; k++) {
        const struct trace_file *tf = runs[k].tf;
        const struct escape_result *r = runs[k].r;
        fprintf(g, "$loss%zu << EOD\n", k);
        int any = 0;
        for (uint64_t s = 0; s < tf->nsteps; s++)
            if (isfinite(tf->steps[s].loss) && tf->steps[s].loss > 0) {
                fprintf(g, "%" PRIu64 " %.9g\n", tf->steps[s].step, tf->steps[s].loss);
                any = 1;
            }
        if (!any)   /* keeps the plot command valid for a run with no positive loss */
            fputs("0 NaN\n", g);
        fprintf(g, "EOD\n$plat%zu << EOD\n", k);
        for (size_t i = 0; i < r->nplateaus; i++)
            fprintf(g, "%" PRIu64 " %.9g\n%" PRIu64 " %.9g\n\n", tf->steps[r->plateaus[i].start].step,
                    r->plateaus[i].level, tf->steps[r->plateaus[i].end].step, r->plateaus[i].level);
        if (r->nplateaus == 0)
            fputs("0 NaN\n", g);
        fputs("EOD\n", g);
        plot_escape_lines(g, &runs[k], (int)k);
    }
    /* the curves first, then the plateaus outlined in black over them (a
     * plateau in its run's colour alone vanishes into the noisy curve) */
    fputs("plot ", g);
    for (size_t k = 0; k < nruns; k++) {
        fprintf(g, "%s$loss%zu using 1:2 with lines lw 1 lc %zu title ", k ? ", " : "", k, k + 1);
        plot_str(g, plot_base(runs[k].tf->path));
    }
    for (size_t k = 0; k < nruns; k++) {
        const char *name = plot_base(runs[k].tf->path);
        char t[300];
        fprintf(g, ", $plat%zu using 1:2 with lines lw 7 lc rgb 'black' notitle", k);
        fprintf(g, ", $plat%zu using 1:2 with lines lw 4 lc %zu ", k, k + 1);
        if (runs[k].r->nplateaus) {
            snprintf(t, sizeof t, "%s plateaus", name);
            fputs("title ", g);
            plot_str(g, t);
        } else {
            fputs("notitle", g);
        }
        plot_escape_key(g, &runs[k], (int)k);
    }
    fputc('\n', g);
    return plot_close(g, err, path);
}

/* 1 written, 0 skipped (why in note), -1 error. */
static int plot_distance(const char *path, const struct plot_run *runs, const struct diff_result *d,
                         char *note, size_t n)
{
    int npos = 0;
    for (int i = 0; i < d->npoints; i++)
        npos += d->points[i].dist > 0 && isfinite(d->points[i].dist);
    if (d->npoints == 0) {
        snprintf(note, n, "the runs have no common checkpoints");
        return 0;
    }
    if (npos == 0) {
        snprintf(note, n, "the parameters are equal at every common checkpoint");
        return 0;
    }
    char title[700];
    snprintf(title, sizeof title, "relative parameter distance, %s vs %s", plot_base(runs[0].tf->path),
             plot_base(runs[1].tf->path));
    FILE *err, *g = plot_open(path, title, "step", "log10 |pA - pB| / |pA|", &err);
    if (!g)
        return -1;
    uint64_t xmax = d->points[d->npoints - 1].step;
    for (int k = 0; k < 2; k++) {
        const struct trace_file *tf = runs[k].tf;
        if (tf->nsteps && tf->steps[tf->nsteps - 1].step > xmax)
            xmax = tf->steps[tf->nsteps - 1].step;
        plot_escape_lines(g, &runs[k], k);
    }
    fprintf(g, "set xrange [0:%" PRIu64 "]\n$dist << EOD\n", xmax ? xmax : 1);
    for (int i = 0; i < d->npoints; i++)
        if (d->points[i].dist > 0 && isfinite(d->points[i].dist))
            fprintf(g, "%" PRIu64 " %.9g\n", d->points[i].step, log10(d->points[i].dist));
    fputs("EOD\nplot $dist using 1:2 with linespoints lw 2 pt 7 lc rgb 'black' "
          "title 'distance at checkpoints'", g);
    for (int k = 0; k < 2; k++)
        plot_escape_key(g, &runs[k], k);
    fputc('\n', g);
    return plot_close(g, err, path) == 0 ? 1 : -1;
}

/* The layer number of "L<l>...", or -1. */
static int plot_layer(const char *name)
{
    if (name[0] != 'L' || name[1] < '0' || name[1] > '9')
        return -1;
    return atoi(name + 1);
}

/* 1 written, 0 skipped (why in note), -1 error. */
static int plot_first_divergence(const char *path, const struct plot_run *runs,
                                 const struct diff_result *d, char *note, size_t n)
{
    const struct trace_file *a = runs[0].tf;
    int nl = 0, nt = 0;
    for (uint32_t i = 0; i < a->nops; i++) {
        int t = diff_time_step(a->ops[i].name, NULL), l = plot_layer(a->ops[i].name);
        if (t >= 0 && l >= 0) {
            nl = l + 1 > nl ? l + 1 : nl;
            nt = t + 1 > nt ? t + 1 : nt;
        }
    }
    if (nl == 0) {
        snprintf(note, n, "not PredNet runs (no op names L<l>.t<NN>.<op>)");
        return 0;
    }
    if (!d->diverged || d->norigins == 0) {
        snprintf(note, n, "%s", d->diverged ? "no origin ops of the first divergent step are known"
                                           : "the runs do not diverge");
        return 0;
    }
    if ((size_t)nl * (size_t)nt > 1000000) {
        snprintf(note, n, "%d layers x %d time steps is too many cells", nl, nt);
        return 0;
    }
    int *cell = dt_calloc((size_t)nl * (size_t)nt, sizeof *cell); /* (nl, nt) */
    int placed = 0;
    for (int k = 0; k < d->norigins; k++) {
        const char *name = a->ops[d->origins[k]].name;
        int t = diff_time_step(name, NULL), l = plot_layer(name);
        if (t >= 0 && l >= 0 && l < nl && t < nt) {
            cell[(size_t)l * (size_t)nt + (size_t)t]++;
            placed++;
        }
    }
    if (placed == 0) {
        free(cell);
        snprintf(note, n, "no origin op of the first divergent step has a layer and time step");
        return 0;
    }
    char title[800];
    snprintf(title, sizeof title, "first divergence (step %" PRIu64 "): origin ops per layer and time step, %s vs %s%s",
             d->first_step, plot_base(a->path), plot_base(runs[1].tf->path),
             d->origins_partial ? " (partial)" : "");
    FILE *err, *g = plot_open(path, title, "time step", "layer", &err);
    if (!g) {
        free(cell);
        return -1;
    }
    fprintf(g, "unset grid\nunset key\nset xtics 1\nset ytics 1\nset xrange [-0.5:%d.5]\nset yrange [-0.5:%d.5]\n"
               "set palette defined (0 'white', 1 'orange', 2 'red')\nset cblabel 'origin ops'\n"
               "set cbrange [0:*]\n$cells << EOD\n", nt - 1, nl - 1);
    for (int l = 0; l < nl; l++) {
        for (int t = 0; t < nt; t++)
            fprintf(g, "%d %d %d\n", t, l, cell[(size_t)l * (size_t)nt + (size_t)t]);
        fputc('\n', g);
    }
    free(cell);
    fputs("EOD\nplot $cells using 1:2:3 with image notitle, "
          "$cells using 1:2:($3 > 0 ? sprintf('%d', $3) : '') with labels notitle\n", g);
    return plot_close(g, err, path) == 0 ? 1 : -1;
}

/* dir exists (created if missing) and is writable: 0, or -1 with dt_error set. */
static int plot_dir_ready(const char *dir)
{
    struct stat sb;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        dt_error_set("--plot %s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) < 0) {
        dt_error_set("--plot %s: not a writable directory", dir);
        return -1;
    }
    return 0;
}

int plot_escape(const char *dir, struct plot_run *runs, size_t nruns, FILE *log)
{
    if (plot_dir_ready(dir) < 0)
        return -1;
    /* a gnuplot that dies early must not kill us with SIGPIPE */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    size_t plen = strlen(dir) + sizeof "/first-divergence.png";
    char *path = dt_malloc(plen), note[200];
    int rc = 0;
    snprintf(path, plen, "%s/loss.png", dir);
    if ((rc = plot_loss(path, runs, nruns)) == 0)
        fprintf(log, "plot: %s\n", path);
    if (rc == 0 && nruns == 2) {
        struct diff_result d;
        if (diff_traces(runs[0].tf, runs[1].tf, &d) < 0) {
            rc = -1;
        } else {
            snprintf(path, plen, "%s/distance.png", dir);
            int w = plot_distance(path, runs, &d, note, sizeof note);
            if (w > 0)
                fprintf(log, "plot: %s\n", path);
            else if (w == 0)
                fprintf(log, "plot: %s skipped: %s\n", path, note);
            snprintf(path, plen, "%s/first-divergence.png", dir);
            int w2 = w < 0 ? -1 : plot_first_divergence(path, runs, &d, note, sizeof note);
            if (w2 > 0)
                fprintf(log, "plot: %s\n", path);
            else if (w2 == 0)
                fprintf(log, "plot: %s skipped: %s\n", path, note);
            rc = w < 0 || w2 < 0 ? -1 : 0;
            diff_result_free(&d);
        }
    }
    free(path);
    sigaction(SIGPIPE, &old, NULL);
    return rc;
}

/* " (n N, Pearson P, Spearman S)" or " (n N, too few pairs)". */
static void plot_corr_text(char *buf, size_t n, const struct escape_pairs_corr *c)
{
    if (c->n < 3)
        snprintf(buf, n, " (n %zu, too few pairs)", c->n);
    else if (!isfinite(c->pearson))
        snprintf(buf, n, " (n %zu, no spread)", c->n);
    else
        snprintf(buf, n, " (n %zu, Pearson %.2f, Spearman %.2f)", c->n, c->pearson, c->spearman);
}

/* The onset of pair q (first divergent step, or the 1e-3 crossing), or -1. */
static int64_t plot_pair_onset(const struct escape_pair *q, int cross)
{
    if (!q->have_escdiff)
        return -1;
    return cross ? q->cross[1] : q->diverged ? (int64_t)q->first_step : -1;
}

/* Datablock name of "x y label" lines, one per distinct point; the label
 * lists the pairs at that point ("1,3,6", five at most, then "+N"). */
static void plot_pair_points(FILE *g, const char *name, const struct escape_pairs *ps, int cross)
{
    fprintf(g, "%s << EOD\n", name);
    int any = 0;
    for (size_t i = 0; i < ps->npairs; i++) {
        const struct escape_pair *q = &ps->pairs[i];
        int64_t x = plot_pair_onset(q, cross);
        if (x < 0)
            continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = plot_pair_onset(&ps->pairs[j], cross) == x &&
                   llabs(ps->pairs[j].escdiff) == llabs(q->escdiff);
        if (seen)
            continue;
        fprintf(g, "%" PRId64 " %.0f ", x, fabs((double)q->escdiff));
        int n = 0;
        for (size_t j = i; j < ps->npairs; j++)
            if (plot_pair_onset(&ps->pairs[j], cross) == x &&
                llabs(ps->pairs[j].escdiff) == llabs(q->escdiff)) {
                if (n < 5)
                    fprintf(g, "%s%zu", n ? "," : "", j + 1);
                n++;
            }
        if (n > 5)
            fprintf(g, ",+%d", n - 5);
        fputc('\n', g);
        any = 1;
    }
    if (!any)
        fputs("NaN NaN x\n", g);
    fputs("EOD\n", g);
}

int plot_pairs(const char *dir, const struct escape_pairs *ps, FILE *log)
{
    if (plot_dir_ready(dir) < 0)
        return -1;
    size_t plen = strlen(dir) + sizeof "/pairs.png";
    char *path = dt_malloc(plen);
    snprintf(path, plen, "%s/pairs.png", dir);
    size_t npts = 0;
    for (size_t i = 0; i < ps->npairs; i++)
        npts += ps->pairs[i].have_escdiff && (ps->pairs[i].diverged || ps->pairs[i].cross[1] >= 0);
    if (npts == 0) {
        fprintf(log, "plot: %s skipped: no pair has a divergence onset and an escape in both runs\n",
                path);
        free(path);
        return 0;
    }
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    FILE *err, *g = plot_open(path, "divergence onset against escape difference, one point per pair "
                              "(labels: pair numbers)",
                              "divergence onset (step)",
                              "|escape step of B - escape step of A| (steps)", &err);
    int rc = -1;
    if (g) {
        /* both series in one block: pair, first divergence, 1e-3 crossing, |difference| */
        /* steps and differences are >= 0: the axes start at 0 */
        fputs("set xrange [0:*]\nset yrange [0:*]\nset offsets 0, graph 0.05, graph 0.1, 0\n", g);
        plot_pair_points(g, "$first", ps, 0);
        plot_pair_points(g, "$cross", ps, 1);
        char t1[120], t2[120], c[80];
        plot_corr_text(c, sizeof c, &ps->corr_first);
        snprintf(t1, sizeof t1, "first divergent step%s", c);
        plot_corr_text(c, sizeof c, &ps->corr_cross);
        snprintf(t2, sizeof t2, "distance crosses 1e-3%s", c);
        fputs("set key outside bottom center horizontal\n"
              "plot $first using 1:2 with points pt 7 ps 2.6 lc 1 title ", g);
        plot_str(g, t1);
        fputs(", $cross using 1:2 with points pt 5 ps 1.4 lc 2 title ", g);
        plot_str(g, t2);
        fputs(", $first using 1:2:3 with labels left offset 1,0.9 tc lt 1 notitle"
              ", $cross using 1:2:3 with labels right offset -1,0.9 tc lt 2 notitle\n", g);
        rc = plot_close(g, err, path);
        if (rc == 0)
            fprintf(log, "plot: %s\n", path);
    }
    free(path);
    sigaction(SIGPIPE, &old, NULL);
    return rc;
}
