/* backend.c: the registry of backends compiled into this build. */
#include "backend.h"

#include <string.h>

#include "config.h"
#include "util.h"

static const struct backend_ops *const backend_all[] = {
    &backend_cpu,
    &backend_mpfr,
#ifdef HAVE_CUDA
    &backend_cuda,
    &backend_cudnn,
#endif
};

const struct backend_ops *backend_find(const char *name)
{
    for (size_t i = 0; i < sizeof backend_all / sizeof backend_all[0]; i++)
        if (strcmp(backend_all[i]->name, name) == 0) {
            DT_ASSERT(backend_all[i]->api_version == BACKEND_API_VERSION,
                      "backend %s has API version %d, expected %d", name,
                      backend_all[i]->api_version, BACKEND_API_VERSION);
            return backend_all[i];
        }
    dt_error_set("unknown backend '%s' (this build has: %s)", name, backend_list());
    return NULL;
}

const char *backend_list(void)
{
#ifdef HAVE_CUDA
    return "cpu, mpfr, cuda, cudnn";
#else
    return "cpu, mpfr";
#endif
}
