/* build.c: the build's identity as trace header keys (see build.h). The
 * revision comes from src/build_info.h, which make writes into the build
 * tree (Makefile.am) and rewrites only when its text changes. */
#include "build.h"

#include <stdio.h>
#include <xxhash.h>

/* generated in the build tree, found there through automake's -I. */
#include "src/build_info.h"

#define BUILD_STR_(x) #x
#define BUILD_STR(x) BUILD_STR_(x)

/* The compiler that compiled this file, which compiles all of the C code. */
#if defined(__clang__)
#define BUILD_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BUILD_COMPILER \
    "gcc " BUILD_STR(__GNUC__) "." BUILD_STR(__GNUC_MINOR__) "." BUILD_STR(__GNUC_PATCHLEVEL__)
#else
#define BUILD_COMPILER "unknown"
#endif

static void build_set(struct trace_config *c, const char *key, const char *val)
{
    if (!trace_config_get(c, key))
        trace_config_set(c, key, val);
}

/* "0.8.1" from xxHash's version number (major * 10000 + minor * 100 + release). */
static void build_xxh_version(char *out, size_t n, unsigned v)
{
    snprintf(out, n, "%u.%u.%u", v / 10000, v / 100 % 100, v % 100);
}

void build_describe(struct trace_config *c)
{
    build_set(c, "build_revision", BUILD_REVISION);
    build_set(c, "build_modified", BUILD_MODIFIED);
    if (BUILD_DIFF[0])
        build_set(c, "build_diff", BUILD_DIFF);
    /* __clang_version__ may end in a space */
    char comp[128];
    size_t len = (size_t)snprintf(comp, sizeof comp, "%s", BUILD_COMPILER);
    while (len > 0 && len < sizeof comp && comp[len - 1] == ' ')
        comp[--len] = 0;
    build_set(c, "build_compiler", comp);
    build_set(c, "build_cflags", BUILD_CFLAGS);
    build_set(c, "build_nvcc", BUILD_NVCC);
    /* The tensor hash inlines the xxHash of the headers it was compiled
     * with (hash_impl.h); the library's own version is the one the rest
     * links to. They are named apart when they differ. */
    char hdr[32], lib[32], both[100];
    build_xxh_version(hdr, sizeof hdr, XXH_VERSION_NUMBER);
    build_xxh_version(lib, sizeof lib, XXH_versionNumber());
    if (XXH_VERSION_NUMBER == XXH_versionNumber()) {
        build_set(c, "xxhash_version", hdr);
    } else {
        snprintf(both, sizeof both, "%s (headers; library %s)", hdr, lib);
        build_set(c, "xxhash_version", both);
    }
}
