/* test_util.c: helpers shared by the CMocka unit tests (see test_util.h). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "data.h"
#include "exec.h"
#include "idx.h"
#include "run.h"
#include "train.h"
#include "util.h"

#define TU_REAL_DIR "/usr/share/datasets/fashion-mnist"

static char tu_dir[512];

const char *tu_tmpdir(void)
{
    if (!tu_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tu_dir, sizeof tu_dir, "%s/divtrace-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tu_dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return tu_dir;
}

const char *tu_path(const char *name)
{
    static char ring[8][1024];
    static unsigned k;
    char *p = ring[k++ % 8];
    snprintf(p, 1024, "%s/%s", tu_tmpdir(), name);
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        abort();
    }
}

void *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "cannot read %s\n", path);
        abort();
    }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

uint64_t tu_rand_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_rand_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(tu_rand_u64(s) >> 11) * 0x1p-53);
}

/* Map a float to an integer line where adjacent floats are adjacent. */
static int64_t tu_ordered(float x)
{
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i >= 0 ? (int64_t)i : -(int64_t)(i & 0x7fffffff);
}

uint32_t tu_ulp_distance(float a, float b)
{
    if (isnan(a) || isnan(b))
        return UINT32_MAX;
    int64_t d = tu_ordered(a) - tu_ordered(b);
    if (d < 0)
        d = -d;
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

void tu_real_digits(struct idx_images *im)
{
    char path[4096];
    struct stat st;
    /* where divtrace record looks too (the GPU machine has no Debian package) */
    const char *dir = getenv("DIVTRACE_DATA");
    if (!dir || !*dir)
        dir = TU_REAL_DIR;
    if (stat(dir, &st) != 0) {
        print_message("skipping: %s not present\n", dir);
        skip();
    }
    assert_int_equal(idx_find_images(dir, "train", path, sizeof path), 0);
    if (idx_read_images(path, im) != 0)
        fail_msg("%s", dt_error());
}

void tu_small_run(struct run *r, struct train_config *tc, uint64_t steps)
{
    tu_small_run_threads(r, tc, steps, 1);
}

void tu_small_run_threads(struct run *r, struct train_config *tc, uint64_t steps, int threads)
{
    struct idx_images im;
    tu_real_digits(&im);
    idx_free(&im);
    train_config_defaults(tc);
    tc->layers = "784,16,784";
    tc->layers_given = 1;
    assert_int_equal(model_parse_layers(tc->layers, &tc->model), 0);
    tc->model.batch = 10;
    tc->threads = threads;
    tc->steps = steps;
    tc->quiet = 1;
    tc->out = "/dev/null";
    assert_int_equal(train_finish_config(tc), 0);
    if (run_open(r, tc, 0, 0) != 0)
        fail_msg("run_open: %s", dt_error());
}

void tu_exec_like(struct exec *e, struct run *r, const struct backend_ops *be)
{
    assert_int_equal(exec_init(e, &r->g, be, r->ctx), 0);
    for (int i = 0; i < r->g.n; i++) {
        const struct node *nd = &r->g.nodes[i];
        if (nd->type != OP_PARAM && nd->type != OP_STATE)
            continue;
        float *h = dt_malloc(nd->count * sizeof *h);
        exec_get(&r->e, i, h);
        exec_set(e, i, h);
        free(h);
    }
}

void tu_exec_inputs(struct exec *e, struct run *r, uint64_t step, float *batch)
{
    data_batch(&r->data, step, r->tc->model.batch, batch);
    const float *src = batch;
    for (int k = 0; k < r->ninputs; k++) {
        exec_set(e, r->inputs[k], src);
        src += r->g.nodes[r->inputs[k]].count;
    }
}
