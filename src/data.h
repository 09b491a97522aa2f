/* data.h: training batches from an IDX image set in a seeded order: sample
 * s (counting from the start of training) is image perm_e[s mod n] of epoch
 * e = s / n, perm_e = rng_permutation(seed, stream e + 1). Pixels / 255. */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stdint.h>

#include "idx.h"

struct data {
    struct idx_images im;
    char *path;
    uint64_t seed;
    uint32_t *perm;            /* permutation of the cached epoch */
    uint64_t perm_epoch;       /* which epoch perm holds, UINT64_MAX if none */
};

/* Open the training images of dir (idx_find_images). 0 or -1 (dt_error). */
int data_open(struct data *d, const char *dir, uint64_t seed);
void data_free(struct data *d);
/* Pixels per image. */
uint32_t data_features(const struct data *d);
/* Fill out (batch, rows*cols) with batch number `cursor`. */
void data_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out);

#endif
