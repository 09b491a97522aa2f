/* fuzz_sweep.c: libFuzzer harness of the sweep file parser (sweep.c): the
 * input is the file. What a file that parses expands to is used as
 * `divtrace sweep` and `divtrace report` use it: every condition's trial
 * arguments and paths, its selectors and its pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "sweep.h"

static char path[64];
static int fd = -1;

static void fuzz_sweep_use(const struct sweep_spec *s)
{
    /* by name: the first and the last (a lookup is linear) */
    if (sweep_cond_find(s, s->cond[0].name) != &s->cond[0] ||
        sweep_cond_find(s, s->cond[s->ncond - 1].name) != &s->cond[s->ncond - 1] ||
        sweep_cond_find(s, "no/such/condition"))
        abort();
    for (int i = 0; i < s->ncond; i++) {
        const struct sweep_cond *c = &s->cond[i];
        if (c->trials < 1 || !sweep_cond_matches(c, "*"))
            abort();
        int trials = c->trials < 3 ? c->trials : 3;
        for (int t = 1; t <= trials; t++) {
            char **args = sweep_trial_args(s, c, t), out[512];
            sweep_args_free(args);
            sweep_trial_path(c, t, t == 1 ? "dtr" : ".log", out, sizeof out);
        }
    }
    for (int i = 0; i < s->ncompare; i++)
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < s->ncond; j++)
                sweep_cond_matches(&s->cond[j], s->compare[i].sel[k]);
    for (int i = 0; i < s->npair; i++) {
        int (*m)[2];
        int n = sweep_pair_conditions(s, &s->pair[i], &m);
        for (int k = 0; k < n; k++)
            if (m[k][0] < 0 || m[k][0] >= s->ncond || m[k][1] < 0 || m[k][1] >= s->ncond)
                abort();
        free(m);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd = fuzz_memfile("study.sweep", path, sizeof path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_memfile_set(fd, data, size);
    struct sweep_spec s;
    if (sweep_spec_load(&s, path) == 0) {
        if (strlen(s.text) != size)
            abort();
        fuzz_sweep_use(&s);
        sweep_spec_free(&s);
    }
    return 0;
}
