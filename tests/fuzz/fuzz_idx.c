/* fuzz_idx.c: libFuzzer harness of the IDX image reader (idx.c). The input
 * is read as a file as it is, then gzip-compressed whole, then compressed
 * and cut short, so that both of the reader's paths (plain and gzip) and a
 * gzip stream that ends early see every header the fuzzer makes. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_util.h"
#include "idx.h"

static char path[64];
static int fd = -1;

static void fuzz_idx_read(void)
{
    struct idx_images im;
    if (idx_read_images(path, &im) == 0) {
        if (!im.pix || (uint64_t)im.n * im.rows * im.cols == 0)
            abort();
        idx_free(&im);
    }
}

/* data as one gzip member (windowBits 16 + 15); *n in, compressed size out. */
static unsigned char *fuzz_gzip(const uint8_t *data, size_t size, size_t *n)
{
    z_stream z = {0};
    if (deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    size_t cap = deflateBound(&z, (uLong)size);
    unsigned char *out = malloc(cap);
    if (!out)
        abort();
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    *n = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd = fuzz_memfile("images-idx3-ubyte", path, sizeof path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_memfile_set(fd, data, size);
    fuzz_idx_read();
    size_t n;
    unsigned char *gz = fuzz_gzip(data, size, &n);
    fuzz_memfile_set(fd, gz, n);
    fuzz_idx_read();
    /* cut into the deflate data or the 8-byte trailer */
    size_t cut = 1 + (size ? data[size - 1] % 12 : 0);
    fuzz_memfile_set(fd, gz, n > cut ? n - cut : 0);
    fuzz_idx_read();
    free(gz);
    return 0;
}
