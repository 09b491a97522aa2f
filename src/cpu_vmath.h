/* cpu_vmath.h: the cpu backend's exponential and sigmoid, many elements at a
 * time. divtrace's expf is one fixed sequence of double operations (the
 * steps and constants of glibc's expf from 2.28 on, as it runs on a CPU
 * with FMA), so its bits are those that the cpu backend always had on such
 * a CPU, now the same on every CPU and C library, and its AVX-512 and AVX2
 * forms give them 16 and 8 elements at a time. */
#ifndef DT_CPU_VMATH_H
#define DT_CPU_VMATH_H

#include <stddef.h>
#include <stdint.h>

/* e^x rounded to float: the scalar form, which every vector form equals
 * bit for bit (tests/test_cpu_vmath.c). */
float cpu_expf(float x);

/* out[i] = e^in[i] for i < n, by the form named (see cpu_vmath_form). */
void cpu_expf_span(int form, float *out, const float *in, size_t n);

/* out[i] = 1 / (1 + e^-in[i]) in float (each of the three steps rounded),
 * for i < n. out may be in. */
void cpu_sigmoid_span(int form, float *out, const float *in, size_t n);

/* The forms: CPU_VMATH_BEST is the widest this CPU runs. */
enum { CPU_VMATH_BEST = -1, CPU_VMATH_SCALAR = 0, CPU_VMATH_AVX2 = 1, CPU_VMATH_AVX512 = 2 };

/* Whether this CPU runs the form. */
int cpu_vmath_has(int form);

/* The table of the exponential: 2^(i/32) rounded to the nearest double,
 * with i << 47 taken off its bits (so that adding k << 47 for k = i mod 32
 * scales it by 2^(k div 32)). For the tests. */
extern const uint64_t cpu_exp_tab[32];

#endif
