/* fuzz_util.c: the harnesses' scratch directory and file writing (see
 * fuzz_util.h). */
#include "fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir_path[4096];

int fuzz_memfile(const char *name, char *path, size_t n)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "fuzz: memfd_create: %s\n", strerror(errno));
        abort();
    }
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return fd;
}

void fuzz_memfile_set(int fd, const void *data, size_t n)
{
    const char *p = data;
    off_t at = 0;
    if (ftruncate(fd, 0) != 0)
        abort();
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            abort();
        p += k;
        at += k;
        n -= (size_t)k;
    }
}

static int fuzz_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void fuzz_dir_remove(void)
{
    if (fuzz_dir_path[0])
        nftw(fuzz_dir_path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0])
        return fuzz_dir_path;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/divtrace-fuzz-XXXXXX", tmp);
    if (!mkdtemp(fuzz_dir_path)) {
        fprintf(stderr, "fuzz: cannot make a scratch directory in %s: %s\n", tmp, strerror(errno));
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

void fuzz_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", fuzz_dir(), name);
}

void fuzz_write(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const char *p = data;
    while (fd >= 0 && n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        p += k;
        n -= (size_t)k;
    }
    if (fd < 0 || n > 0 || close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
}

void fuzz_clear(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[8192];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

void fuzz_quiet_stdout(void)
{
    if (!freopen("/dev/null", "w", stdout))
        abort();
}
