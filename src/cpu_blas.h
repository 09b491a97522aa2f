/* cpu_blas.h: OpenBLAS set-up for the cpu backend: thread count, and the
 * kernel (core type), which OpenBLAS fixes when it is loaded, so choosing one
 * means setting OPENBLAS_CORETYPE and re-executing the program. */
#ifndef DT_CPU_BLAS_H
#define DT_CPU_BLAS_H

/* The canonical spelling of a kernel name (any case), or NULL with dt_error
 * set listing the known kernels. */
const char *cpu_blas_kernel_name(const char *name);

/* If this process does not run kernel NAME yet, check that the CPU can
 * execute it, then re-execute argv (the whole command line) with
 * OPENBLAS_CORETYPE=NAME. Returns only when no re-execution is needed (0) or
 * NAME cannot be used (-1, dt_error set). Call before any OpenBLAS work. */
int cpu_blas_reexec(const char *name, char **argv);

/* 0 if NAME is an OpenBLAS x86-64 kernel that this CPU can run, else -1 with
 * dt_error set (unknown name: lists the known ones; missing features: names
 * them). DIVTRACE_CPU_FEATURES, a comma-separated feature list, replaces the
 * detected features (for testing a CPU one does not have). */
int cpu_blas_check_kernel(const char *name);

/* After start-up: 0 if OpenBLAS runs NAME (case-insensitive), else -1. */
int cpu_blas_verify_kernel(const char *name);

void cpu_blas_set_threads(int n);
const char *cpu_blas_corename(void);
const char *cpu_blas_config(void);

#endif
