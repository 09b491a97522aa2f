/* escape_pairs.h: `divtrace escape --pairs DIR`: the traces under a
 * directory, paired run with run (same seed, another backend...), each pair's
 * divergence onset beside the difference of the two runs' first escapes, and
 * how the two correlate.
 *
 * Pairing rule: two runs pair when their trace headers agree on every key of
 * the pairing key set (default model,seed,init_seed; a key absent from both
 * headers agrees) and differ in at least one other key; a group of k runs
 * that agree on the keys gives all k(k-1)/2 pairs of runs whose headers
 * differ (two recordings of one configuration are a rerun, not a pair).
 * Legend: R = traces found, Q = pairs, K = pairing keys. */
#ifndef DT_ESCAPE_PAIRS_H
#define DT_ESCAPE_PAIRS_H

#include <stddef.h>
#include <stdint.h>

#include "diff.h"
#include "escape.h"
#include "trace.h"

#define ESCAPE_PAIRS_DEFAULT_KEYS "model,seed,init_seed"

struct escape_pairs_run {
    char *path;                 /* as found: DIR/... */
    const char *rel;            /* path relative to DIR (points into path) */
    struct trace_config cfg;    /* the header's configuration */
    uint64_t nsteps;
    int complete;
    int64_t escape;             /* first escape step (escape.h on the loss curve), or -1 */
    int paired;                 /* in at least one pair */
};

struct escape_pair {
    size_t a, b;                /* run indices, a < b (paths in byte order) */
    int diverged;
    uint64_t first_step;        /* first divergent step (valid when diverged) */
    int64_t cross[DIFF_NTHRESH]; /* first step with distance > 1e-6, 1e-3, 1e-1, or -1 */
    int cross_sketch[DIFF_NTHRESH]; /* 1: that step is the per-step sketch estimate */
    int have_escdiff;
    int64_t escdiff;            /* escape of b - escape of a */
};

/* Divergence onset against |escape difference| over the pairs where both
 * are defined. */
struct escape_pairs_corr {
    size_t n;
    double pearson, spearman;   /* NaN when n < 3 or a variable has no spread */
};

struct escape_pairs {
    size_t nkeys;
    char **keys;                /* (K) */
    size_t nruns;
    struct escape_pairs_run *runs; /* (R) sorted by path */
    size_t npairs;
    struct escape_pair *pairs;  /* (Q) group by group, then by a, b */
    size_t ngroups;             /* groups that hold at least one pair */
    struct escape_pairs_corr corr_first;  /* x: first divergence step */
    struct escape_pairs_corr corr_cross;  /* x: step of the 1e-3 crossing */
};

/* Split "K1,K2,..." into keys; 0, or -1 with dt_error set (an empty key). */
int escape_pairs_keys(const char *list, char ***keys, size_t *nkeys);

/* Find the traces (*.dtr) under dir, recursively (a sweep's DIR/runs/COND/
 * tNN.dtr included), analyze each run's loss curve with p, pair them by
 * keys and compare each pair (diff.h). 0, or -1 with dt_error set to one
 * line: dir missing or not a directory, no trace under it, a trace that
 * cannot be read or has a corrupt block. */
int escape_pairs_build(const char *dir, char **keys, size_t nkeys, const struct escape_params *p,
                       struct escape_pairs *out);
void escape_pairs_free(struct escape_pairs *ps);

/* Each header key whose value differs between runs a and b (or is present in
 * one only, va or vb NULL), in a's key order then b's. */
void escape_pairs_for_each_change(const struct escape_pairs *ps, const struct escape_pair *q,
                                  void (*fn)(void *arg, const char *key, const char *va,
                                             const char *vb),
                                  void *arg);

#endif
