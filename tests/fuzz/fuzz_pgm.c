/* fuzz_pgm.c: libFuzzer harness of the PGM frame reader (video_read_pgm_dir
 * in video.c). The input is split at each "--pgm--" into frames written as
 * f000.pgm, f001.pgm, ... (a part that starts with "txt" as f00N.txt, which
 * the reader skips) in a directory of their own; an empty input leaves the
 * directory empty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "video.h"

#define FUZZ_SEP "--pgm--"
enum { FUZZ_MAX_FRAMES = 16 };

static char dir[4200];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_path(dir, sizeof dir, "frames");
    if (mkdir(dir, 0700) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_clear(dir);
    size_t sep = strlen(FUZZ_SEP);
    const uint8_t *p = data, *end = data + size;
    for (int k = 0; size > 0 && k < FUZZ_MAX_FRAMES; k++) {
        const uint8_t *q = memmem(p, (size_t)(end - p), FUZZ_SEP, sep);
        if (!q || k == FUZZ_MAX_FRAMES - 1)
            q = end;
        char path[4300];
        int txt = q - p >= 3 && memcmp(p, "txt", 3) == 0;
        snprintf(path, sizeof path, "%s/f%03d.%s", dir, k, txt ? "txt" : "pgm");
        fuzz_write(path, p, (size_t)(q - p));
        if (q == end)
            break;
        p = q + sep;
    }
    struct video v;
    if (video_read_pgm_dir(dir, &v) == 0) {
        if (!v.pix || v.n != 1 || (uint64_t)v.t * v.h * v.w == 0)
            abort();
        video_free(&v);
    }
    return 0;
}
