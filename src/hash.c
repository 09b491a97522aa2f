/* hash.c: picks the fastest tree-hash variant the CPU supports (see hash.h)
 * and lets tests and benchmarks force one. All variants compute the same
 * digest; only their speed differs. */
#include "hash.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "hash_impl.h"
#include "util.h"

struct hash_variant {
    const char *name;
    uint64_t (*tensor)(const void *data, size_t nbytes);
    uint64_t (*bytes)(const void *data, size_t nbytes);
};

/* Best first: hash_pick_best takes the first one the CPU supports. */
static const struct hash_variant hash_variants[] = {
    { .name = "avx512", .tensor = hash_avx512_tensor, .bytes = hash_avx512_bytes },
    { .name = "avx2", .tensor = hash_avx2_tensor, .bytes = hash_avx2_bytes },
    { .name = "sse2", .tensor = hash_sse2_tensor, .bytes = hash_sse2_bytes },
};
#define HASH_NVARIANTS (sizeof hash_variants / sizeof hash_variants[0])

/* Atomic so that threads hashing concurrently may all race to the first
 * selection: they store the same value, and a forced choice is seen whole. */
static _Atomic(const struct hash_variant *) hash_cur;

static bool hash_cpu_has(const struct hash_variant *v)
{
    __builtin_cpu_init();
    if (strcmp(v->name, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    if (strcmp(v->name, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
    return true; /* SSE2 is part of x86-64 */
}

static const struct hash_variant *hash_pick_best(void)
{
    for (size_t i = 0; i < HASH_NVARIANTS; i++)
        if (hash_cpu_has(&hash_variants[i]))
            return &hash_variants[i];
    DT_ASSERT(0, "no hash variant runs on this CPU");
}

static const struct hash_variant *hash_get(void)
{
    const struct hash_variant *v = atomic_load_explicit(&hash_cur, memory_order_acquire);
    if (!v) {
        v = hash_pick_best();
        atomic_store_explicit(&hash_cur, v, memory_order_release);
    }
    return v;
}

uint64_t hash_tensor(const void *data, size_t nbytes)
{
    return hash_get()->tensor(data, nbytes);
}

uint64_t hash_bytes(const void *data, size_t nbytes)
{
    return hash_get()->bytes(data, nbytes);
}

const char *hash_impl(void)
{
    return hash_get()->name;
}

int hash_set_impl(const char *name)
{
    if (strcmp(name, "auto") == 0) {
        atomic_store_explicit(&hash_cur, hash_pick_best(), memory_order_release);
        return 0;
    }
    for (size_t i = 0; i < HASH_NVARIANTS; i++) {
        const struct hash_variant *v = &hash_variants[i];
        if (strcmp(v->name, name) != 0)
            continue;
        if (!hash_cpu_has(v)) {
            dt_error_set("hash implementation '%s' is not supported by this CPU", name);
            return -1;
        }
        atomic_store_explicit(&hash_cur, v, memory_order_release);
        return 0;
    }
    dt_error_set("unknown hash implementation '%s' (expected avx512, avx2, sse2 or auto)", name);
    return -1;
}
