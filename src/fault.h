/* fault.h: faults injected on purpose into one op, to check that divtrace
 * finds them (replay must classify a wrong computation as SEMANTIC at
 * exactly that op). A spec is OP:KIND[:ARGS]:
 *   OP:bitflip[:INDEX[:BIT]]  flip bit BIT (default 22) of element INDEX
 *                             (default 0) of OP's output, every step
 *   OP:scale[:FACTOR]         multiply OP's output by FACTOR (default 1.001)
 *   OP:formula                compute OP with a plausible wrong formula
 *                             (fault_formulas() lists them; cpu backend only);
 *                             OP may be an fnmatch(3) pattern: every op it
 *                             matches (a systematic bug, as in a framework's
 *                             code path)
 */
#ifndef DT_FAULT_H
#define DT_FAULT_H

#include "run.h"

/* Parse spec and install it into r's executor. 0, or -1 with dt_error set
 * (unknown op or kind, bad arguments, formula without one for that op). */
int fault_install(struct run *r, const char *spec);

/* "sigmoid: 0.5 (1 + tanh x), the halving of x forgotten; ..." one line per
 * op type that has a wrong formula. */
const char *fault_formulas(void);

#endif
