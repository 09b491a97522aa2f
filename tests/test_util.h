/* test_util.h: helpers shared by the CMocka unit tests. */
#ifndef DT_TEST_UTIL_H
#define DT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A float's bits, and the float of some bits. */
static inline uint32_t tu_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tu_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A fresh private directory for this test program (created on first use,
 * under $TMPDIR or /tmp); tu_path joins a name to it (static buffer ring). */
const char *tu_tmpdir(void);
const char *tu_path(const char *name);

/* Write n bytes to path, aborting the test on failure. */
void tu_write_file(const char *path, const void *data, size_t n);
/* Read a whole file (malloc'd, *n set); aborts the test on failure. */
void *tu_read_file(const char *path, size_t *n);

/* A small deterministic PRNG for test inputs (splitmix64). */
uint64_t tu_rand_u64(uint64_t *state);
double tu_rand_uniform(uint64_t *state, double lo, double hi);

/* Distance in units in the last place between two floats (0 if bitwise
 * equal, also counts across zero; UINT32_MAX if either is NaN). */
uint32_t tu_ulp_distance(float a, float b);

/* The training images of Debian's dataset-fashion-mnist into *im; skips
 * the calling CMocka test when the data set is not installed, fails it when
 * it cannot be read. */
struct idx_images;
void tu_real_digits(struct idx_images *im);

/* A small autoencoder run (784,16,784, batch 10, `steps` steps) on the cpu
 * backend over those images, configured in *tc (which the run keeps
 * pointing at), for tests that drive its graph themselves; skips as
 * tu_real_digits does, fails the test when the run cannot open. */
struct run;
struct train_config;
void tu_small_run(struct run *r, struct train_config *tc, uint64_t steps);
/* The same on `threads` threads. */
void tu_small_run_threads(struct run *r, struct train_config *tc, uint64_t steps, int threads);
/* A second executor *e of r's graph on backend be (with r's context),
 * holding r's initial parameters and optimizer state. */
struct exec;
struct backend_ops;
void tu_exec_like(struct exec *e, struct run *r, const struct backend_ops *be);
/* Step `step`'s batch of r's data (into batch, r->nbatch floats) set as
 * the inputs of e. */
void tu_exec_inputs(struct exec *e, struct run *r, uint64_t step, float *batch);

#endif
