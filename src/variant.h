/* variant.h: valid float32 rewrites of ops, the other side of fault.h's
 * wrong formulas: each one computes its op as a real framework could (a
 * different summation order, an FMA, another formula for the same
 * function), so replay against the oracle must find it within bounds
 * (never SEMANTIC). Same kernel form as the cpu backend's (backend.h);
 * cpu buffers only (float32 host memory). */
#ifndef DT_VARIANT_H
#define DT_VARIANT_H

#include "backend.h"

/* The valid rewrite of op type t, or NULL if there is none. */
backend_op_fn variant_formula_for(enum op_type t);

/* "sigmoid: 0.5 tanh(x/2) + 0.5; ..." one entry per op type that has a
 * rewrite (for --help and the man pages). */
const char *variant_formulas(void);

#endif
