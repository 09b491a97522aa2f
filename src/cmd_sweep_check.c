/* cmd_sweep_check.c: a sweep's record options checked before any trial
 * starts: a typo in the common line would otherwise start every trial and
 * fail every one. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_sweep.h"
#include "util.h"

int sweep_check_trials(const struct sweep_spec *s, const char *spec, const char *const *only,
                       int nonly)
{
    for (int i = 0; i < s->ncond; i++) {
        const struct sweep_cond *c = &s->cond[i];
        int picked = nonly == 0;
        for (int k = 0; k < nonly && !picked; k++)
            picked = sweep_cond_matches(c, only[k]);
        if (!picked)
            continue;
        /* {trial} can make a value bad in some trials only */
        int per_trial = 0;
        for (int a = 0; a < c->nargs && !per_trial; a++)
            per_trial = strstr(c->args[a], "{trial}") != NULL;
        for (int t = 1; t <= (per_trial ? c->trials : 1); t++) {
            char **args = sweep_trial_args(s, c, t);
            int na = 0;
            while (args[na])
                na++;
            char **argv = dt_calloc((size_t)na + 2, sizeof *argv);
            argv[0] = "record";
            for (int k = 0; k < na; k++)
                argv[1 + k] = args[k];
            int bad = record_check_options(na + 1, argv) < 0;
            free(argv);
            sweep_args_free(args);
            if (!bad)
                continue;
            if (t > 1) /* trial 1 passed: it is this trial's number */
                cli_error("sweep", "%s: condition '%s', trial %d: %s", spec, c->name, t, dt_error());
            else
                cli_error("sweep", "%s: condition '%s': %s", spec, c->name, dt_error());
            return DT_ERR;
        }
    }
    return DT_OK;
}
