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
 *   OP:rewire:INPUT:TENSOR    OP's input number INPUT is TENSOR instead (a
 *                             change of the graph's wiring; cpu backend only)
 * and faults of state, acting between steps (fault_between) or on a
 * recurrent model's initial state; TENSOR may be a pattern:
 *   TENSOR:roundtrip:FMT      after each update, the parameter or optimizer
 *                             state goes through FMT and back: bf16 (round
 *                             to nearest even), half (binary16, the same) or
 *                             trunc (the low 16 bits dropped); a recurrent
 *                             state (prednet's L<l>.t<k>.r, .c, .e) as its
 *                             time step hands it on
 *   TENSOR:drop               the same, with zeros coming back (optimizer
 *                             state reset, a recurrent state reset)
 *   TENSOR:stale              the updates never reach the tensor the model
 *                             reads: it keeps its value from the run's start
 *   STATE:carry               an initial state (prednet's L<l>.init.r, .c,
 *                             .e) takes the last sequence's final state
 *                             where it should start at zero
 * Any spec may end in @BACKEND (cpu, mpfr, cuda, cudnn): the fault of one
 * code path, planted only when the run's backend is BACKEND (checked all
 * the same).
 */
#ifndef DT_FAULT_H
#define DT_FAULT_H

#include "run.h"

/* Parse spec and install it into r's executor. 0, or -1 with dt_error set
 * (unknown op or kind, bad arguments, formula without one for that op). */
int fault_install(struct run *r, const char *spec);
/* Whether spec is planted on backend `backend`: 1, 0 (restricted to
 * another), or -1 with dt_error set (an unknown backend after '@'). */
int fault_planted(const char *spec, const char *backend);

/* A state fault's work at the start of step `step` (before its checkpoint
 * and its ops; every step, the first of a run or replay included): 1 when
 * r has a fault that acts there, else 0. */
int fault_between(struct run *r, uint64_t step);
/* For fault_install: the state faults and the rewiring. */
int fault_state_install(struct run *r, const char *spec, const char *pattern, const char *kind,
                        const char *arg);
/* Undo fault_state_install for r (a spec for another backend, checked). */
void fault_state_forget(struct run *r);
int fault_rewire(struct run *r, const char *spec, const char *op, const char *which, const char *to);

/* "sigmoid: 0.5 (1 + tanh x), the halving of x forgotten; ..." one line per
 * op type that has a wrong formula. */
const char *fault_formulas(void);

#endif
