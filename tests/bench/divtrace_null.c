/* divtrace_null.c: a libdivtrace that records nothing (every call succeeds
 * at once), built from the real header so that its functions keep the real
 * signatures. Loaded by the PyTorch adapter in place of the library
 * (DIVTRACE_LIB=.../libdivtrace_null.so), it leaves the adapter's own
 * Python cost: tests/bench/torch_adapter_bench.py --null-library, and
 * tests/gpu/pack.sh builds it for the GPU machine. */
#include <stdlib.h>

#include "divtrace.h"

struct divtrace {
    int unused;
};

int divtrace_api_version(void) { return DIVTRACE_API_VERSION; }
const char *divtrace_strerror(int status) { (void)status; return "the null library records nothing"; }
const char *divtrace_errmsg(const divtrace *t) { (void)t; return ""; }

int divtrace_open(divtrace **t, const char *path, const char *const *config, const char *level)
{
    (void)path, (void)config, (void)level;
    *t = calloc(1, sizeof **t);
    return *t ? DIVTRACE_OK : DIVTRACE_ENOMEM;
}

int divtrace_close(divtrace *t, int status, const char *why)
{
    (void)status, (void)why;
    free(t);
    return DIVTRACE_OK;
}

int divtrace_step_begin(divtrace *t, uint64_t step) { (void)t, (void)step; return DIVTRACE_OK; }

int divtrace_record(divtrace *t, const char *name, const char *type, enum divtrace_kind kind,
                    const float *data, enum divtrace_where where, void *stream, int ndim,
                    const int64_t *shape, const char *const *inputs, int ninputs)
{
    (void)t, (void)name, (void)type, (void)kind, (void)data, (void)where, (void)stream, (void)ndim;
    (void)shape, (void)inputs, (void)ninputs;
    return DIVTRACE_OK;
}

int divtrace_record_many(divtrace *t, int n, const struct divtrace_tensor *ts, const float *const *data,
                         enum divtrace_where where, void *stream)
{
    (void)t, (void)n, (void)ts, (void)data, (void)where, (void)stream;
    return DIVTRACE_OK;
}

int divtrace_flush(divtrace *t) { (void)t; return DIVTRACE_OK; }
int divtrace_step_end(divtrace *t, double loss) { (void)t, (void)loss; return DIVTRACE_OK; }
int divtrace_step_end_device(divtrace *t, const float *loss, void *stream)
{
    (void)t, (void)loss, (void)stream;
    return DIVTRACE_OK;
}
int divtrace_step_end_async(divtrace *t, const float *loss, void *stream)
{
    (void)t, (void)loss, (void)stream;
    return DIVTRACE_OK;
}
int divtrace_sync(divtrace *t) { (void)t; return DIVTRACE_OK; }
int divtrace_checkpoint_begin(divtrace *t, uint64_t step) { (void)t, (void)step; return DIVTRACE_OK; }

int divtrace_checkpoint_add(divtrace *t, const char *name, const float *data, enum divtrace_where where,
                            int ndim, const int64_t *shape)
{
    (void)t, (void)name, (void)data, (void)where, (void)ndim, (void)shape;
    return DIVTRACE_OK;
}

int divtrace_checkpoint_end(divtrace *t) { (void)t; return DIVTRACE_OK; }
