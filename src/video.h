/* video.h: video data for PredNet: a deterministic Moving-MNIST generator over
 * IDX digits, and readers for user frames (NPY uint8 arrays, directories of
 * PGM images). Dimensions: N sequences, T frames, H x W pixels, C channels. */
#ifndef DT_VIDEO_H
#define DT_VIDEO_H

#include <stdint.h>

#include "idx.h"

struct video {
    uint32_t n, t, h, w, c;
    uint8_t *pix; /* (N, T, H, W, C), row-major */
};

/* Which dimension comes first in a rank-4 NPY array. The standard
 * mnist_test_seq.npy is (T, N, H, W) = (20, 10000, 64, 64). */
enum video_layout {
    VIDEO_LAYOUT_TNHW,
    VIDEO_LAYOUT_NTHW,
};

/* Sequence number `sequence` of the Moving-MNIST set under `seed`: `ndigits`
 * digit images of `digits` (rows x cols each, 28 x 28 for MNIST) bouncing in
 * a size x size canvas, combined by per-pixel maximum, frames 0..frames-1.
 * The output is a pure function of (digits, seed, sequence, frames, size,
 * ndigits); the first frames of a longer sequence equal a shorter one.
 *
 * Draws, all from the counter-based RNG of rng.h with stream
 * s = VIDEO_STREAM_BIT | sequence (2^63 keeps it apart from the small stream
 * numbers of data.h), for digit d = 0..ndigits-1:
 *   word 4d:     image   = (rng_u32(seed, s, 4d) * n) >> 32 (64-bit product)
 *   word 4d + 1: x0      = rng_uniform(seed, s, 4d + 1) * rx, rx = size - cols
 *   word 4d + 2: y0      = rng_uniform(seed, s, 4d + 2) * ry, ry = size - rows
 *   word 4d + 3: theta   = rng_uniform(seed, s, 4d + 3) * 2 pi
 * all in double. Velocity (vx, vy) = (0.1 rx cos theta, 0.1 ry sin theta).
 * Frame 0 shows the digit at (x0, y0); before each later frame, per axis
 * (x with rx, y with ry): p += v; if p < 0 then p = -p, v = -v; else if
 * p > r then p = 2r - p, v = -v. The digit's top-left pixel is drawn at
 * column floor(x + 0.5), row floor(y + 0.5).
 * Returns 0, or -1 with dt_error set for bad arguments (no digits, frames 0,
 * ndigits 0, size smaller than a digit, sequence >= 2^63). */
#define VIDEO_STREAM_BIT ((uint64_t)1 << 63)
int video_moving_mnist(const struct idx_images *digits, uint64_t seed, uint64_t sequence,
                       uint32_t frames, uint32_t size, uint32_t ndigits,
                       uint8_t *out /* (frames, size, size) */);

/* Read a uint8 NPY array (format 1.0, 2.0 or 3.0; descr '|u1' or '<u1';
 * fortran_order False). Rank 4 is (T, N, H, W) or (N, T, H, W) as `layout`
 * says, with C = 1; rank 5 is always (N, T, H, W, C). The result is (N, T, H,
 * W, C) either way. Returns 0, or -1 with dt_error set to one line naming the
 * file and the fault; v->pix is NULL after a failure. */
int video_read_npy(const char *path, enum video_layout layout, struct video *v);

/* Read every *.pgm file of dir, in lexical (strcmp) order of their names, as
 * the frames of one sequence: n = 1, t = number of files, c = 1. Binary P5,
 * maxval 1..255 (below 255 scaled to 0..255 by round(p * 255 / maxval)),
 * comments allowed in the header, all frames the same size. Returns 0, or -1
 * with dt_error set (naming the directory or file and the fault). */
int video_read_pgm_dir(const char *dir, struct video *v);

void video_free(struct video *v);

#endif
