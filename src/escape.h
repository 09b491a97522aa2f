/* escape.h: plateaus and escapes of a loss curve (the saddle-point picture
 * of training: the loss sits on a plateau near a saddle, then escapes with a
 * drop). Pure functions, no I/O; the method is described in escape.c and in
 * divtrace-escape(1).
 * Legend: N = steps of the curve, P = plateaus found, n = pairs of values
 * correlated. */
#ifndef DT_ESCAPE_H
#define DT_ESCAPE_H

#include <stddef.h>

/* The method's parameters; 0 in window, min_len, max_gap or horizon means
 * "derived from N" (see escape_params_resolve). */
struct escape_params {
    int window;     /* smoothing and slope window, odd, >= 3 (0: odd(max(5, N/25))) */
    int min_len;    /* shortest plateau, steps (0: 2 * window) */
    int max_gap;    /* longest wiggle that merges two plateaus (0: window) */
    int horizon;    /* steps after a plateau's end within which the drop must come (0: 3 * window) */
    double flat;    /* plateau: slope <= flat * the power-law rate E/(t+t0), t0 = N/10 (default 0.25) */
    double noise_k; /* noise allowance in standard deviations: of the slope (a flat step), of a
                     * plateau's fall (level as a whole), of a drop (default 3) */
    double drop;    /* escape: relative fall of the smoothed loss (default 0.05) */
};

struct escape_plateau {
    size_t start, end;   /* steps (indices into the curve), inclusive */
    double level;        /* median loss over [start, end] */
    double grad_norm;    /* mean of the finite gradient norms over it (NaN if none) */
    int escaped;         /* the plateau ends in an escape */
    size_t escape;       /* the escape step (valid if escaped) */
    double drop;         /* relative fall after the end: to the foot of the drop when escaped,
                          * else within the horizon */
};

/* No plateau is unambiguous: nplateaus == 0 and plateaus == NULL, and then
 * nescapes == 0 and phases == 1 (0 for an empty curve). Callers that print
 * a plateau section (divtrace diff) test nplateaus. */
struct escape_result {
    struct escape_params used; /* the parameters after resolve */
    size_t n;            /* steps analyzed */
    size_t nplateaus;    /* P */
    struct escape_plateau *plateaus; /* (P) in order; NULL if none; free with escape_result_free */
    size_t nescapes;     /* plateaus that end in an escape */
    int phases;          /* 1 + nescapes (0 for an empty curve) */
    double rate;         /* E: ln(z[0] / z[N-1]) / ln((N-1+t0) / t0) of the smoothed loss, >= 0 */
    double noise;        /* robust standard deviation of log loss around its moving median */
};

void escape_params_defaults(struct escape_params *p);
/* The parameters as applied to a curve of n steps: zeros replaced by the
 * derived values, the window made odd and no longer than n (at least 3
 * when n >= 3). */
void escape_params_resolve(const struct escape_params *p, size_t n, struct escape_params *out);
/* Check user values: window 0 or 3..1000000, min_len/max_gap/horizon 0 or
 * 1..100000000, flat in (0, 100], noise_k in [0, 100], drop in (0, 1).
 * 0, or -1 with a reason in msg (one line). */
int escape_params_check(const struct escape_params *p, char *msg, size_t msglen);

/* Segment loss[0..n) (gnorm may be NULL) into plateaus and escapes. Losses
 * that are not finite and positive take the previous valid value (the first
 * valid one at the start). Returns 0, or -1 if out of memory. */
int escape_analyze(const double *loss,  /* (N) */
                   const double *gnorm, /* (N) or NULL */
                   size_t n, const struct escape_params *p, struct escape_result *r);
void escape_result_free(struct escape_result *r);

/* "monophasic", "biphasic", "triphasic", "tetraphasic", "pentaphasic",
 * else "multiphasic"; "empty" for 0. */
const char *escape_phase_name(int phases);

/* Correlation of x[i] and y[i] over n pairs (`escape --pairs`: divergence
 * onset against the escape difference). Pearson's r; Spearman's rho is
 * Pearson's r of the ranks, tied values sharing the mean of the ranks they
 * span. NaN when n < 2 or either variable is constant (no spread). */
double escape_corr_pearson(const double *x, /* (n) */
                           const double *y, /* (n) */
                           size_t n);
double escape_corr_spearman(const double *x, /* (n) */
                            const double *y, /* (n) */
                            size_t n);

#endif
