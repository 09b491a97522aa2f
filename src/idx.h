/* idx.h: reader for MNIST-format IDX image files (plain or gzip). */
#ifndef DT_IDX_H
#define DT_IDX_H

#include <stddef.h>
#include <stdint.h>

struct idx_images {
    uint32_t n, rows, cols; /* n images of rows x cols */
    uint8_t *pix;           /* (n, rows, cols), row-major */
    uint64_t hash;          /* XXH3-64 of the decompressed file bytes */
};

/* Read an unsigned-byte, 3-dimensional IDX file (magic 0x00000803), plain or
 * gzip-compressed (detected by content, not by name). Validates the magic,
 * the dimensions and that the payload is exactly n*rows*cols bytes.
 * Returns 0, or -1 with dt_error set to one line naming the file and fault. */
int idx_read_images(const char *path, struct idx_images *out);
void idx_free(struct idx_images *im);

/* Find the training (which = "train") or test ("t10k") image file of a
 * dataset directory by its standard names, e.g. train-images-idx3-ubyte,
 * train-images-idx3-ubyte.gz, train-images.idx3-ubyte. Returns 0 and writes
 * the path, or -1 with dt_error set (naming the directory and the names tried). */
int idx_find_images(const char *dir, const char *which, char *path, size_t pathlen);

#endif
