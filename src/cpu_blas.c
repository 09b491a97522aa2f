/* cpu_blas.c: choosing OpenBLAS's kernel and thread count (see cpu_blas.h). */
#include "cpu_blas.h"

#include <cblas.h>
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util.h"

/* The x86-64 kernels of a DYNAMIC_ARCH OpenBLAS and the CPU features their
 * code uses: a kernel whose features are missing dies with SIGILL. */
static const struct {
    const char *name;
    const char *needs; /* comma-separated __builtin_cpu_supports names */
} cpu_kernels[] = {
    {"Prescott", "sse3"},
    {"Core2", "ssse3"},
    {"Penryn", "sse4.1"},
    {"Dunnington", "sse4.1"},
    {"Nehalem", "sse4.2"},
    {"Atom", "ssse3"},
    {"Nano", "ssse3"},
    {"Opteron", "sse2"},
    {"Opteron_SSE3", "sse3"},
    {"Barcelona", "sse4a"},
    {"Bobcat", "sse4a,ssse3"},
    {"Bulldozer", "avx,fma4,xop"},
    {"Piledriver", "avx,fma4,xop,fma"},
    {"Steamroller", "avx,fma4,xop,fma"},
    {"Excavator", "avx2,fma4,xop,fma"},
    {"Sandybridge", "avx"},
    {"Haswell", "avx2,fma"},
    {"Zen", "avx2,fma"},
    {"SkylakeX", "avx512f,avx512cd,avx512bw,avx512dq,avx512vl"},
    {"Cooperlake", "avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512bf16"},
    {"SapphireRapids", "avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512bf16,avx512fp16"},
};
#define CPU_NKERNELS (sizeof cpu_kernels / sizeof cpu_kernels[0])

static int cpu_has_feature(const char *f)
{
    const char *override = getenv("DIVTRACE_CPU_FEATURES");
    if (override) {
        size_t n = strlen(f);
        for (const char *p = override; *p;) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len == n && strncasecmp(p, f, n) == 0)
                return 1;
            p += len + (e != NULL);
        }
        return 0;
    }
    __builtin_cpu_init();
#define CPU_F(s) if (strcmp(f, s) == 0) return __builtin_cpu_supports(s) != 0
    CPU_F("sse2"); CPU_F("sse3"); CPU_F("ssse3"); CPU_F("sse4.1"); CPU_F("sse4.2");
    CPU_F("sse4a"); CPU_F("avx"); CPU_F("avx2"); CPU_F("fma"); CPU_F("fma4"); CPU_F("xop");
    CPU_F("avx512f"); CPU_F("avx512cd"); CPU_F("avx512bw"); CPU_F("avx512dq");
    CPU_F("avx512vl"); CPU_F("avx512bf16");
#undef CPU_F
    /* clang 14 has no "avx512fp16" for __builtin_cpu_supports: read CPUID
     * leaf 7 (EDX bit 23) directly; avx512f covers the OS's register state. */
    if (strcmp(f, "avx512fp16") == 0) {
        unsigned a, b, c, d;
        return __builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
               (d >> 23 & 1u);
    }
    DT_ASSERT(0, "unknown CPU feature '%s'", f);
}

const char *cpu_blas_kernel_name(const char *name)
{
    for (size_t i = 0; i < CPU_NKERNELS; i++)
        if (strcasecmp(cpu_kernels[i].name, name) == 0)
            return cpu_kernels[i].name;
    char list[512] = "";
    for (size_t i = 0; i < CPU_NKERNELS; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? " " : "", cpu_kernels[i].name);
    }
    dt_error_set("--cpu-kernel %s: unknown OpenBLAS kernel (known: %s)", name, list);
    return NULL;
}

int cpu_blas_check_kernel(const char *name)
{
    const char *canon = cpu_blas_kernel_name(name);
    if (!canon)
        return DT_ERR;
    size_t i = 0;
    while (strcmp(cpu_kernels[i].name, canon) != 0)
        i++;
    char missing[256] = "";
    char needs[128];
    snprintf(needs, sizeof needs, "%s", cpu_kernels[i].needs);
    for (char *save = NULL, *f = strtok_r(needs, ",", &save); f; f = strtok_r(NULL, ",", &save))
        if (!cpu_has_feature(f)) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", l ? " " : "", f);
        }
    if (missing[0]) {
        dt_error_set("--cpu-kernel %s: this CPU lacks %s, which that OpenBLAS kernel needs "
                     "(it would die with an illegal instruction)", canon, missing);
        return DT_ERR;
    }
    return DT_OK;
}

int cpu_blas_reexec(const char *name, char **argv)
{
    const char *done = getenv("DIVTRACE_CPU_KERNEL_SET");
    if (done && strcasecmp(done, name) == 0)
        return DT_OK;
    if (cpu_blas_check_kernel(name) < 0)
        return DT_ERR;
    setenv("OPENBLAS_CORETYPE", name, 1);
    setenv("DIVTRACE_CPU_KERNEL_SET", name, 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    dt_error_set("--cpu-kernel %s: cannot re-execute /proc/self/exe to load OpenBLAS with it", name);
    return DT_ERR;
}

int cpu_blas_verify_kernel(const char *name)
{
    const char *have = cpu_blas_corename();
    if (strcasecmp(have, name) != 0) {
        dt_error_set("--cpu-kernel %s: OpenBLAS runs its '%s' kernel instead (is it built "
                     "with DYNAMIC_ARCH?)", name, have);
        return DT_ERR;
    }
    return DT_OK;
}

void cpu_blas_set_threads(int n)
{
    openblas_set_num_threads(n);
}

const char *cpu_blas_corename(void)
{
    return openblas_get_corename();
}

const char *cpu_blas_config(void)
{
    return openblas_get_config();
}
