/* pairs_testutil.c: the host's data gradient of m pairs (pairs_testutil.h). */
#include "pairs_testutil.h"

#include <math.h>

void pt_bwd_data(const float *const *dy, const float *const *w, int m, const struct pt_shape *sh, float *exact,
                 double *bound)
{
    const size_t hw = (size_t)sh->h * sh->w, rs = (size_t)sh->r * sh->s;
    const int hr = (int)sh->r / 2, hs = (int)sh->s / 2;
    size_t i = 0;
    for (uint32_t n = 0; n < sh->n; n++)
        for (uint32_t c = 0; c < sh->c; c++)
            for (int y = 0; y < (int)sh->h; y++)
                for (int x = 0; x < (int)sh->w; x++, i++) {
                    /* products of two floats are exact in long double (64-bit
                     * significands); only the additions round */
                    long double sum = 0, mag = 0;
                    double terms = 0;
                    for (int j = 0; j < m; j++)
                        for (uint32_t k = 0; k < sh->k; k++) {
                            const float *dyk = dy[j] + ((size_t)n * sh->k + k) * hw;
                            const float *wk = w[j] + ((size_t)k * sh->c + c) * rs;
                            for (int r = 0; r < (int)sh->r; r++) {
                                int sy = y - r + hr;
                                if (sy < 0 || sy >= (int)sh->h)
                                    continue;
                                for (int s = 0; s < (int)sh->s; s++) {
                                    int sx = x - s + hs;
                                    if (sx < 0 || sx >= (int)sh->w)
                                        continue;
                                    long double t = (long double)dyk[(size_t)sy * sh->w + (size_t)sx] *
                                                    wk[(size_t)r * sh->s + (size_t)s];
                                    sum += t;
                                    mag += fabsl(t);
                                    terms += 1;
                                }
                            }
                        }
                    double u = 0x1p-24, lu = terms * u;
                    double gamma = lu < 0.5 ? lu / (1 - lu) : INFINITY;
                    /* the long double sum's error: at most terms * 2^-64 * mag */
                    double own = terms * 0x1p-63 * (double)mag;
                    exact[i] = (float)sum;
                    bound[i] = gamma * (double)mag * (1 + 0x1p-40) + terms * 0x1p-149 + own;
                }
}
