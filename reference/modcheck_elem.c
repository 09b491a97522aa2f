/* modcheck_elem.c: (being written) */
#include "modcheck_impl.h"
#include <stdio.h>
#define MC_STUB(f) int f(const struct mc_spec *sp, const struct modcheck_tensor *t, int nt, \
    struct modcheck_result *res, char *why, size_t nwhy) { (void)t; (void)nt; (void)res; \
    snprintf(why, nwhy, "%s (not yet)", sp->type); return 1; }
MC_STUB(mc_elementwise)
MC_STUB(mc_sgd)
MC_STUB(mc_adam)
