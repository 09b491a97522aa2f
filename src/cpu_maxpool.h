/* cpu_maxpool.h: the cpu backend's 2x2 max pooling (op.h's MAXPOOL2: each
 * window's first NaN, else its first element equal to the maximum, copied
 * bit for bit) and its gradient, over whole planes of (H, W) = (2 OH, 2 OW).
 * The forms (cpu_vmath.h's CPU_VMATH_*: BEST, SCALAR, AVX2) choose the same
 * element of every window, so they give the same bits. */
#ifndef DT_CPU_MAXPOOL_H
#define DT_CPU_MAXPOOL_H

#include <stddef.h>

/* The chosen element of the window at x (row stride w): 0 .. 3 in
 * row-major window order. */
int cpu_maxpool2_pick(const float *x, size_t w);

/* out (planes, OH, OW) = the windows' chosen elements of x (planes, 2 OH, 2 OW). */
void cpu_maxpool2_planes(int form, float *out, const float *x, size_t planes, size_t oh, size_t ow);

/* dx (planes, 2 OH, 2 OW) = dy (planes, OH, OW) at each window's chosen
 * element of x, +0 elsewhere. */
void cpu_maxpool2_bwd_planes(int form, float *dx, const float *x, const float *dy, size_t planes, size_t oh,
                             size_t ow);

#endif
