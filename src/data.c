/* data.c: seeded batches over an IDX image set (see data.h). */
#include "data.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "hash.h"
#include "rng.h"
#include "util.h"

int data_open(struct data *d, const char *dir, uint64_t seed)
{
    char path[PATH_MAX];
    if (idx_find_images(dir, "train", path, sizeof path) < 0)
        return DT_ERR;
    if (idx_read_images(path, &d->im) < 0)
        return DT_ERR;
    d->path = dt_strdup(path);
    d->hash = d->im.hash;
    d->seed = seed;
    d->perm = dt_malloc(sizeof *d->perm * d->im.n);
    d->perm_epoch = UINT64_MAX;
    return DT_OK;
}

void data_free(struct data *d)
{
    idx_free(&d->im);
    video_free(&d->v);
    free(d->perm);
    free(d->path);
    free(d->clip);
    d->perm = NULL;
    d->path = NULL;
    d->clip = NULL;
}

uint32_t data_features(const struct data *d)
{
    return d->im.rows * d->im.cols;
}

void data_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out)
{
    uint32_t f = data_features(d);
    for (uint32_t b = 0; b < batch; b++) {
        uint64_t s = cursor * batch + b;
        uint64_t epoch = s / d->im.n;
        if (epoch != d->perm_epoch) {
            rng_permutation(d->perm, d->im.n, d->seed, epoch + 1);
            d->perm_epoch = epoch;
        }
        data_pixels_to_float(d->im.pix + (size_t)d->perm[s % d->im.n] * f, out + (size_t)b * f, f);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* With AVX-512, 16 at a time through double: v * (1/255) in double, rounded
 * to float, is the correctly rounded v / 255 for each of the 256 values
 * (test_idx checks every one), and needs no division. */
__attribute__((target("avx512f"))) static size_t data_pixels_avx512(const uint8_t *px, float *out, size_t n)
{
    const __m512d r = _mm512_set1_pd(1.0 / 255.0);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(px + j)));
        __m256i lo = _mm512_castsi512_si256(v);
        __m256i hi = _mm256_castpd_si256(_mm512_extractf64x4_pd(_mm512_castsi512_pd(v), 1));
        _mm256_storeu_ps(out + j, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(lo), r)));
        _mm256_storeu_ps(out + j + 8, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi32_pd(hi), r)));
    }
    return j;
}
#endif

/* The autoencoder's step on the H200 is 0.08 ms of GPU time; one division
 * at a time, its batch of 78400 pixels took the host 0.09 ms, so the host
 * set the pace of training (and of its tracing). divps is IEEE division,
 * rounded as divss: the same floats, four at a time. */
void data_pixels_to_float(const uint8_t *px, float *out, size_t n)
{
    size_t j = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
        j = data_pixels_avx512(px, out, n);
#endif
#ifdef __SSE2__
    const __m128 d = _mm_set1_ps(255.0f);
    const __m128i z = _mm_setzero_si128();
    for (; j + 16 <= n; j += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(px + j));
        __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
        _mm_storeu_ps(out + j, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), d));
        _mm_storeu_ps(out + j + 4, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), d));
        _mm_storeu_ps(out + j + 8, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), d));
        _mm_storeu_ps(out + j + 12, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), d));
    }
#endif
    for (; j < n; j++)
        out[j] = (float)px[j] / 255.0f;
}

/* ---- video ---- */

int data_open_video(struct data *d, const struct data_video_spec *vs, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->video = 1;
    d->seed = seed;
    d->nt = vs->nt;
    d->h = vs->h;
    d->w = vs->w;
    d->c = vs->c;
    d->perm_epoch = UINT64_MAX;
    if (!vs->path) {
        d->generated = 1;
        if (vs->h != vs->w) {
            dt_error_set("--size %ux%u: the Moving-MNIST generator makes square frames", vs->h, vs->w);
            return DT_ERR;
        }
        if (vs->c != 1) {
            dt_error_set("--stack starts with %u channels: the Moving-MNIST generator makes "
                         "gray frames (1 channel)", vs->c);
            return DT_ERR;
        }
        if (data_open(d, vs->digits_dir, seed) < 0)
            return DT_ERR;
        d->video = 1;
        d->generated = 1;
        if (d->im.rows > vs->h || d->im.cols > vs->w) {
            dt_error_set("--size %ux%u: smaller than the %ux%u digits of %s", vs->h, vs->w,
                         d->im.rows, d->im.cols, d->path);
            return DT_ERR;
        }
        d->hash = d->im.hash;
        d->clip = dt_malloc((size_t)vs->nt * vs->h * vs->w);
        return DT_OK;
    }
    struct stat st;
    if (stat(vs->path, &st) < 0) {
        dt_error_set("%s: %s", vs->path, strerror(errno));
        return DT_ERR;
    }
    int rc = S_ISDIR(st.st_mode) ? video_read_pgm_dir(vs->path, &d->v)
                                 : video_read_npy(vs->path, vs->layout, &d->v);
    if (rc < 0)
        return DT_ERR;
    d->path = dt_strdup(vs->path);
    const struct video *v = &d->v;
    if (v->h != vs->h || v->w != vs->w || v->c != vs->c) {
        dt_error_set("%s: frames are %ux%u with %u channel%s; the model expects %ux%u (--size) "
                     "with %u (the first --stack entry)", vs->path, v->h, v->w, v->c,
                     v->c == 1 ? "" : "s", vs->h, vs->w, vs->c);
        return DT_ERR;
    }
    if (v->t < vs->nt) {
        dt_error_set("%s: sequences of %u frames are shorter than --nt %u", vs->path, v->t, vs->nt);
        return DT_ERR;
    }
    d->nclips = (uint64_t)v->n * (v->t / vs->nt);
    if (d->nclips > UINT32_MAX) {
        dt_error_set("%s: more than 2^32 clips", vs->path);
        return DT_ERR;
    }
    d->perm = dt_malloc(sizeof *d->perm * d->nclips);
    d->hash = hash_bytes(v->pix, (size_t)v->n * v->t * v->h * v->w * v->c);
    return DT_OK;
}

const char *data_video_source(const struct data *d)
{
    static __thread char buf[64];
    if (d->generated)
        return "moving-mnist";
    snprintf(buf, sizeof buf, "%" PRIu64 " clips", d->nclips);
    return buf;
}

void data_video_batch(struct data *d, uint64_t cursor, uint32_t batch, float *out)
{
    size_t hw = (size_t)d->h * d->w, frame = hw * d->c;
    for (uint32_t b = 0; b < batch; b++) {
        uint64_t s = cursor * batch + b;
        float *o = out + (size_t)b * d->nt * frame;
        if (d->generated) {
            int rc = video_moving_mnist(&d->im, d->seed, s, d->nt, d->h, 2, d->clip);
            DT_ASSERT(rc == 0, "moving-mnist: %s", dt_error());
            data_pixels_to_float(d->clip, o, (size_t)d->nt * hw);
            continue;
        }
        uint64_t epoch = s / d->nclips;
        if (epoch != d->perm_epoch) {
            rng_permutation(d->perm, (uint32_t)d->nclips, d->seed, epoch + 1);
            d->perm_epoch = epoch;
        }
        uint64_t k = d->perm[s % d->nclips];
        uint32_t per = d->v.t / d->nt;
        uint64_t seq = k / per, first = (k % per) * d->nt;
        const uint8_t *src = d->v.pix + (seq * d->v.t + first) * frame;
        /* (T, H, W, C) -> (T, C, H, W) */
        if (d->c == 1) {
            data_pixels_to_float(src, o, (size_t)d->nt * hw);
            continue;
        }
        for (uint32_t t = 0; t < d->nt; t++)
            for (uint32_t ch = 0; ch < d->c; ch++)
                for (size_t i = 0; i < hw; i++)
                    o[(size_t)t * frame + ch * hw + i] = (float)src[(size_t)t * frame + i * d->c + ch] / 255.0f;
    }
}
