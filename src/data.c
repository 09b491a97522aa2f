/* data.c: seeded batches over an IDX image set (see data.h). */
#include "data.h"

#include <limits.h>
#include <stdlib.h>

#include "rng.h"
#include "util.h"

int data_open(struct data *d, const char *dir, uint64_t seed)
{
    char path[PATH_MAX];
    if (idx_find_images(dir, "train", path, sizeof path) < 0)
        return DT_ERR;
    if (idx_read_images(path, &d->im) < 0)
        return DT_ERR;
    d->path = dt_strdup(path);
    d->seed = seed;
    d->perm = dt_malloc(sizeof *d->perm * d->im.n);
    d->perm_epoch = UINT64_MAX;
    return DT_OK;
}

void data_free(struct data *d)
{
    idx_free(&d->im);
    free(d->perm);
    free(d->path);
    d->perm = NULL;
    d->path = NULL;
}

uint32_t data_features(const struct data *d)
{
    return d->im.rows * d->im.cols;
}

void data_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out)
{
    uint32_t f = data_features(d);
    for (uint32_t b = 0; b < batch; b++) {
        uint64_t s = cursor * batch + b;
        uint64_t epoch = s / d->im.n;
        if (epoch != d->perm_epoch) {
            rng_permutation(d->perm, d->im.n, d->seed, epoch + 1);
            d->perm_epoch = epoch;
        }
        const uint8_t *px = d->im.pix + (size_t)d->perm[s % d->im.n] * f;
        for (uint32_t j = 0; j < f; j++)
            out[(size_t)b * f + j] = (float)px[j] / 255.0f;
    }
}
