/* bench_util.h: what the benchmark programs share. */
#ifndef DT_BENCH_UTIL_H
#define DT_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1] (sorts v in place). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[n / 2];
}

/* A random uint8 NPY of (N, T, H, W, C), from a 64-bit LCG seeded with seed. */
static inline int bench_write_npy(const char *path, uint32_t n, uint32_t t, uint32_t h, uint32_t w, uint32_t c,
                                  uint64_t seed)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '|u1', 'fortran_order': False, 'shape': (%u, %u, %u, %u, %u), }",
                       n, t, h, w, c);
    int total = len + 1;
    while ((10 + total) % 64)
        total++;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned char hl[2] = {(unsigned char)(total & 255), (unsigned char)(total >> 8)};
    fwrite(hl, 1, 2, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int k = len; k < total - 1; k++)
        fputc(' ', f);
    fputc('\n', f);
    uint64_t s = seed;
    for (size_t k = 0; k < (size_t)n * t * h * w * c; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        fputc((int)(s >> 56), f);
    }
    return fclose(f);
}

#endif
