/* data.h: training batches. Images (the autoencoder): from an IDX image set
 * in a seeded order: sample s (counting from the start of training) is
 * image perm_e[s mod n] of epoch e = s / n, perm_e = rng_permutation(seed,
 * stream e + 1). Video (PredNet): clips of nt frames, either sequence s of
 * the Moving-MNIST generator over the IDX digits (video.h; an endless set,
 * a pure function of the seed), or clips cut from user frames (each
 * sequence of T frames gives floor(T / nt) clips, frames k nt .. k nt + nt - 1)
 * in the same seeded epoch order as images. Pixels / 255 either way. */
#ifndef DT_DATA_H
#define DT_DATA_H

#include <stdint.h>

#include "idx.h"
#include "video.h"

struct data {
    struct idx_images im;
    char *path;
    uint64_t seed;
    uint32_t *perm;            /* permutation of the cached epoch */
    uint64_t perm_epoch;       /* which epoch perm holds, UINT64_MAX if none */
    /* video */
    int video;                 /* clips of frames rather than images */
    int generated;             /* Moving-MNIST over im's digits, not user frames */
    struct video v;            /* user frames */
    uint32_t nt, h, w, c;      /* clip length, frame size and channels */
    uint64_t nclips;           /* user frames: how many clips they hold */
    uint64_t hash;             /* of the pixels (user frames) or the digits */
    uint8_t *clip;             /* scratch: one clip, (nt, h, w, c) */
};

/* Where PredNet's frames come from. */
struct data_video_spec {
    const char *digits_dir;    /* IDX digits for the generator */
    const char *path;          /* user frames: an .npy file or a directory of .pgm; NULL: generate */
    enum video_layout layout;  /* of a rank-4 .npy */
    uint32_t nt, h, w, c;
};

/* Open the training images of dir (idx_find_images). 0 or -1 (dt_error). */
int data_open(struct data *d, const char *dir, uint64_t seed);
void data_free(struct data *d);
/* Pixels per image. */
uint32_t data_features(const struct data *d);
/* Fill out (batch, rows*cols) with batch number `cursor`. */
void data_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out);
/* out[j] = px[j] / 255 in float32, each the correctly rounded quotient
 * (bitwise what (float)px[j] / 255.0f gives), four at a time where SSE2 is
 * there. */
void data_pixels_to_float(const uint8_t *px, float *out, size_t n);

/* Open video for clips of vs->nt frames of vs->h x vs->w pixels with vs->c
 * channels. 0, or -1 with dt_error set (unreadable or malformed file, frames
 * of another size, fewer frames than nt, a non-square generator canvas). */
int data_open_video(struct data *d, const struct data_video_spec *vs, uint64_t seed);
/* Fill out (batch, nt, c, h, w) with batch number `cursor`. */
void data_video_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out);
/* A one-line description of the video source, for trace headers. */
const char *data_video_source(const struct data *d);

#endif
