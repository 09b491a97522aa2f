/* stats.c: tensor statistics and sketch for trace records (see stats.h). */
#include "stats.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hash.h"

#define SK TRACE_SKETCH_LEN

static inline uint32_t stats_fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

float stats_sketch_sign(size_t i)
{
    return (stats_fmix32((uint32_t)(i / SK)) >> 31) ? -1.0f : 1.0f;
}

static inline int stats_finite_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

void stats_compute(const float *x, size_t n, struct trace_oprec *rec)
{
    double sq[SK] = {0}, sk[SK] = {0};
    float mn[SK], mx[SK];
    int any = 0;
    uint64_t nan = 0, inf = 0;
    for (int k = 0; k < SK; k++) {
        mn[k] = INFINITY;
        mx[k] = -INFINITY;
    }
    size_t nb = n / SK;
    for (size_t b = 0; b < nb; b++) {
        const float *xb = x + b * SK;
        int fin = 1;
        for (int k = 0; k < SK; k++)
            fin &= stats_finite_bits(xb[k]);
        double s = (stats_fmix32((uint32_t)b) >> 31) ? -1.0 : 1.0;
        if (fin) {
            /* Lanes are independent, so this vectorizes without reassociation. */
            for (int k = 0; k < SK; k++) {
                double d = xb[k];
                sq[k] += d * d;
                sk[k] += s * d;
                mn[k] = xb[k] < mn[k] ? xb[k] : mn[k];
                mx[k] = xb[k] > mx[k] ? xb[k] : mx[k];
            }
            any = 1;
            continue;
        }
        for (int k = 0; k < SK; k++) {
            float v = xb[k];
            if (isnan(v)) {
                nan++;
            } else if (isinf(v)) {
                inf++;
            } else {
                double d = v;
                sq[k] += d * d;
                sk[k] += s * d;
                mn[k] = v < mn[k] ? v : mn[k];
                mx[k] = v > mx[k] ? v : mx[k];
                any = 1;
            }
        }
    }
    for (size_t i = nb * SK; i < n; i++) {
        float v = x[i];
        int k = (int)(i % SK);
        if (isnan(v)) {
            nan++;
        } else if (isinf(v)) {
            inf++;
        } else {
            double d = v;
            sq[k] += d * d;
            sk[k] += stats_sketch_sign(i) * d;
            mn[k] = v < mn[k] ? v : mn[k];
            mx[k] = v > mx[k] ? v : mx[k];
            any = 1;
        }
    }
    double l2 = 0, lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < SK; k++) {
        l2 += sq[k];
        lo = mn[k] < lo ? mn[k] : lo;
        hi = mx[k] > hi ? mx[k] : hi;
        rec->sketch[k] = (float)sk[k];
    }
    rec->l2 = sqrt(l2);
    rec->min = any ? lo : 0.0;
    rec->max = any ? hi : 0.0;
    rec->nan = nan;
    rec->inf = inf;
    rec->hash = hash_tensor(x, n * sizeof(float));
}

double stats_sketch_distance(const struct trace_oprec *a, const struct trace_oprec *b)
{
    double s = 0;
    for (int k = 0; k < SK; k++) {
        double d = (double)a->sketch[k] - (double)b->sketch[k];
        s += d * d;
    }
    return sqrt(s);
}
