/* fuzz_util.h: what the libFuzzer harnesses share: their entry points, a
 * private scratch directory for readers that take a path, and writing an
 * input to a file in it. */
#ifndef DT_FUZZ_UTIL_H
#define DT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* libFuzzer's entry points (declared here for -Wmissing-prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A memory file (memfd) named name: its descriptor, and in path (n bytes)
 * the name by which open(2) finds it (/proc/self/fd/N). Readers that take a
 * path read inputs from these without touching a file system. */
int fuzz_memfile(const char *name, char *path, size_t n);
/* Make the memory file fd hold exactly data[0..n). */
void fuzz_memfile_set(int fd, const void *data, size_t n);

/* The process's scratch directory, made under $TMPDIR (else /tmp) on first
 * use and removed with everything in it when the process exits normally. */
const char *fuzz_dir(void);
/* fuzz_dir()/name into out (n bytes). */
void fuzz_path(char *out, size_t n, const char *name);
/* Replace the file at path with data[0..n). A failure here, or in any
 * function of this file, aborts: the harness could not test anything. */
void fuzz_write(const char *path, const void *data, size_t n);
/* Remove every entry of directory dir (files only), keeping dir. */
void fuzz_clear(const char *dir);
/* Send standard output to /dev/null (the commands print a lot). */
void fuzz_quiet_stdout(void);

#endif
