/* fuzz_npy.c: libFuzzer harness of the NPY reader of user frames
 * (video_read_npy in video.c): the input is the file, read in both rank-4
 * layouts. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "video.h"

static char path[64];
static int fd = -1;

static void fuzz_npy_read(enum video_layout layout)
{
    struct video v;
    if (video_read_npy(path, layout, &v) == 0) {
        if (!v.pix || (uint64_t)v.n * v.t * v.h * v.w * v.c == 0)
            abort();
        video_free(&v);
    } else if (v.pix) {
        abort(); /* video.h: pix is NULL after a failure */
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd = fuzz_memfile("frames.npy", path, sizeof path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_memfile_set(fd, data, size);
    fuzz_npy_read(VIDEO_LAYOUT_TNHW);
    fuzz_npy_read(VIDEO_LAYOUT_NTHW);
    return 0;
}
