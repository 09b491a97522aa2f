/* build.h: the identity of this build (source revision, local changes,
 * compiler, flags, library versions) as trace header keys, so that traces
 * written by two builds say how the builds differ. */
#ifndef DT_BUILD_H
#define DT_BUILD_H

#include "trace.h"

/* Set build_revision, build_modified, build_diff (when modified),
 * build_compiler, build_cflags, build_nvcc and xxhash_version in c, each
 * unless c has it already (a libdivtrace caller's own keys win). What links
 * only into the program (MPFR, OpenBLAS) its callers add themselves. */
void build_describe(struct trace_config *c);

#endif
