/* stats.h: what a trace keeps of one tensor: its hash (hash.h) and float64
 * statistics over its finite elements (L2 norm, min, max), NaN and Inf
 * counts, and a sketch: TRACE_SKETCH_LEN signed sums
 *   sketch[j] = sum over finite x_i with i mod 16 = j of sign(i) * x_i,
 *   sign(i) = f(i mod 4096) * f(4096 + i div 4096),
 *   f(k) = -1 if the top bit of fmix32(k) (MurmurHash3's 32-bit finalizer)
 *   is set, else +1,
 * accumulated in double, stored as float. For two tensors of the same shape,
 * sum_j (sa_j - sb_j)^2 estimates |a - b|^2 as a random projection would:
 * the signs change from element to element, so a difference that is the
 * same everywhere (a shift, a scaling) does not line up with them. */
#ifndef DT_STATS_H
#define DT_STATS_H

#include <stddef.h>

#include "trace.h"

/* Fill every field of rec except rec->op. Deterministic: a fixed order of
 * accumulation, independent of threads. */
void stats_compute(const float *x, size_t n, struct trace_oprec *rec);
/* Which implementation of the statistics runs: "avx512", "avx2" or
 * "generic" (all give the same bits; the best the CPU runs by default).
 * stats_use(NULL) picks the best; 0, or -1 when the CPU cannot run the one
 * named (tests run each). */
int stats_use(const char *name);
const char *stats_impl(void);

/* The sign applied to element i in the sketch (+1 or -1). */
float stats_sketch_sign(size_t i);

/* Estimated |a - b|_2 from two records' sketches. */
double stats_sketch_distance(const struct trace_oprec *a, const struct trace_oprec *b);

#endif
