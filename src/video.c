/* video.c: video data for PredNet (see video.h): Moving-MNIST sequences that
 * are a pure function of (seed, sequence), and strict readers for user frames
 * that name the file and the fault rather than train on misread pixels. */
#include "video.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rng.h"
#include "util.h"

#define VIDEO_PI 3.14159265358979323846
/* Step per frame as a fraction of the free range. */
#define VIDEO_STEP 0.1
#define VIDEO_NPY_MAGIC "\x93NUMPY"
#define VIDEO_NPY_MAGIC_LEN 6u
/* Larger headers than this are not written by numpy (it pads to 64 bytes). */
#define VIDEO_NPY_MAX_HEADER ((uint32_t)1 << 20)
#define VIDEO_NPY_MAX_RANK 5

void video_free(struct video *v)
{
    free(v->pix);
    memset(v, 0, sizeof *v);
}

/* ---- Moving-MNIST ------------------------------------------------------- */

/* One axis of the bounce: advance by *vel and reflect at 0 and r. The step is
 * at most 0.1 r, so one reflection is enough. */
static void video_bounce(double *pos, double *vel, double r)
{
    *pos += *vel;
    if (*pos < 0) {
        *pos = -*pos;
        *vel = -*vel;
    } else if (*pos > r) {
        *pos = 2 * r - *pos;
        *vel = -*vel;
    }
}

int video_moving_mnist(const struct idx_images *digits, uint64_t seed, uint64_t sequence,
                       uint32_t frames, uint32_t size, uint32_t ndigits,
                       uint8_t *out /* (frames, size, size) */)
{
    if (!digits || !digits->pix || digits->n == 0 || digits->rows == 0 || digits->cols == 0) {
        dt_error_set("moving mnist: no digit images");
        return -1;
    }
    if (frames == 0 || ndigits == 0) {
        dt_error_set("moving mnist: %s is 0", frames == 0 ? "frame count" : "digit count");
        return -1;
    }
    if (size < digits->rows || size < digits->cols) {
        dt_error_set("moving mnist: canvas %u is smaller than the %ux%u digits", size,
                     digits->rows, digits->cols);
        return -1;
    }
    if (sequence & VIDEO_STREAM_BIT) {
        dt_error_set("moving mnist: sequence number %llu is 2^63 or more",
                     (unsigned long long)sequence);
        return -1;
    }
    DT_ASSERT(out, "moving mnist: no output buffer");
    const uint64_t stream = VIDEO_STREAM_BIT | sequence;
    const uint32_t rows = digits->rows, cols = digits->cols;
    const double rx = (double)(size - cols), ry = (double)(size - rows);
    const size_t plane = (size_t)size * size;
    memset(out, 0, plane * frames);

    for (uint32_t d = 0; d < ndigits; d++) {
        const uint64_t w = 4 * (uint64_t)d;
        uint32_t image = (uint32_t)(((uint64_t)rng_u32(seed, stream, w) * digits->n) >> 32);
        double x = (double)rng_uniform(seed, stream, w + 1) * rx;
        double y = (double)rng_uniform(seed, stream, w + 2) * ry;
        double theta = (double)rng_uniform(seed, stream, w + 3) * 2 * VIDEO_PI;
        double vx = VIDEO_STEP * rx * cos(theta), vy = VIDEO_STEP * ry * sin(theta);
        const uint8_t *src = digits->pix + (size_t)image * rows * cols;
        for (uint32_t f = 0; f < frames; f++) {
            if (f > 0) {
                video_bounce(&x, &vx, rx);
                video_bounce(&y, &vy, ry);
            }
            uint32_t c0 = (uint32_t)floor(x + 0.5), r0 = (uint32_t)floor(y + 0.5);
            DT_ASSERT(c0 + cols <= size && r0 + rows <= size,
                      "moving mnist: digit at (%u, %u) leaves the canvas", c0, r0);
            uint8_t *dst = out + (size_t)f * plane;
            for (uint32_t i = 0; i < rows; i++)
                for (uint32_t j = 0; j < cols; j++) {
                    uint8_t p = src[(size_t)i * cols + j];
                    uint8_t *q = &dst[(size_t)(r0 + i) * size + c0 + j];
                    if (p > *q)
                        *q = p;
                }
        }
    }
    return 0;
}

/* ---- NPY ---------------------------------------------------------------- */

struct video_npy_header {
    int have_descr, have_fortran, have_shape;
    int fortran;
    int rank;
    uint64_t shape[VIDEO_NPY_MAX_RANK];
    char descr[16];
};

static const char *video_skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A quoted Python string literal without escapes into buf (truncated to
 * bufsize - 1; the caller compares the whole). NULL when malformed. */
static const char *video_parse_str(const char *p, const char *end, char *buf, size_t bufsize)
{
    if (p >= end || (*p != '\'' && *p != '"'))
        return NULL;
    char q = *p++;
    size_t n = 0;
    int toolong = 0;
    while (p < end && *p != q) {
        if (*p == '\\')
            return NULL;
        if (n + 1 < bufsize)
            buf[n++] = *p;
        else
            toolong = 1;
        p++;
    }
    if (p >= end)
        return NULL;
    buf[n] = '\0';
    if (toolong) /* matches no key or dtype, and says so */
        snprintf(buf, bufsize, "%s", "(too long)");
    return p + 1;
}

/* Parse the header dict; on failure set *why and return -1. */
static int video_parse_npy_dict(const char *p, const char *end, struct video_npy_header *h,
                                const char **why)
{
    memset(h, 0, sizeof *h);
    p = video_skip_space(p, end);
    if (p >= end || *p != '{') {
        *why = "header is not a dict";
        return -1;
    }
    p = video_skip_space(p + 1, end);
    while (p < end && *p != '}') {
        char key[32];
        p = video_parse_str(p, end, key, sizeof key);
        if (!p) {
            *why = "malformed key in header";
            return -1;
        }
        p = video_skip_space(p, end);
        if (p >= end || *p != ':') {
            *why = "missing ':' in header";
            return -1;
        }
        p = video_skip_space(p + 1, end);
        if (strcmp(key, "descr") == 0) {
            if (h->have_descr++) {
                *why = "duplicate key 'descr'";
                return -1;
            }
            p = video_parse_str(p, end, h->descr, sizeof h->descr);
            if (!p) {
                *why = "malformed 'descr' value";
                return -1;
            }
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->have_fortran++) {
                *why = "duplicate key 'fortran_order'";
                return -1;
            }
            if (end - p >= 4 && memcmp(p, "True", 4) == 0) {
                h->fortran = 1;
                p += 4;
            } else if (end - p >= 5 && memcmp(p, "False", 5) == 0) {
                h->fortran = 0;
                p += 5;
            } else {
                *why = "malformed 'fortran_order' value";
                return -1;
            }
        } else if (strcmp(key, "shape") == 0) {
            if (h->have_shape++) {
                *why = "duplicate key 'shape'";
                return -1;
            }
            if (p >= end || *p != '(') {
                *why = "malformed 'shape' value";
                return -1;
            }
            p = video_skip_space(p + 1, end);
            while (p < end && *p != ')') {
                if (*p < '0' || *p > '9') {
                    *why = "malformed 'shape' value";
                    return -1;
                }
                uint64_t x = 0;
                while (p < end && *p >= '0' && *p <= '9') {
                    if (x > (UINT64_MAX - 9) / 10) {
                        *why = "shape entry overflows";
                        return -1;
                    }
                    x = x * 10 + (uint64_t)(*p++ - '0');
                }
                if (h->rank == VIDEO_NPY_MAX_RANK) {
                    *why = "shape has more than 5 dimensions";
                    return -1;
                }
                h->shape[h->rank++] = x;
                p = video_skip_space(p, end);
                if (p < end && *p == ',')
                    p = video_skip_space(p + 1, end);
                else if (p < end && *p != ')') {
                    *why = "malformed 'shape' value";
                    return -1;
                }
            }
            if (p >= end) {
                *why = "malformed 'shape' value";
                return -1;
            }
            p++;
        } else {
            *why = "unknown key in header";
            return -1;
        }
        p = video_skip_space(p, end);
        if (p < end && *p == ',')
            p = video_skip_space(p + 1, end);
        else if (p < end && *p != '}') {
            *why = "missing ',' between header entries";
            return -1;
        }
    }
    if (p >= end) {
        *why = "header dict is not closed";
        return -1;
    }
    p = video_skip_space(p + 1, end);
    if (p != end) {
        *why = "junk after the header dict";
        return -1;
    }
    if (!h->have_descr || !h->have_fortran || !h->have_shape) {
        *why = !h->have_descr ? "missing key 'descr'"
             : !h->have_fortran ? "missing key 'fortran_order'" : "missing key 'shape'";
        return -1;
    }
    return 0;
}

static int video_npy_fail(FILE *f, struct video *v, const char *path, const char *why)
{
    dt_error_set("%s: %s", path, why);
    if (f)
        fclose(f);
    video_free(v);
    return -1;
}

int video_read_npy(const char *path, enum video_layout layout, struct video *v)
{
    memset(v, 0, sizeof *v);
    FILE *f = fopen(path, "rb");
    if (!f) {
        dt_error_set("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return video_npy_fail(f, v, path, "read error: not a regular file");

    unsigned char pre[12];
    size_t got = fread(pre, 1, 8, f);
    if (got < 8 || memcmp(pre, VIDEO_NPY_MAGIC, VIDEO_NPY_MAGIC_LEN) != 0) {
        if (got >= VIDEO_NPY_MAGIC_LEN && memcmp(pre, VIDEO_NPY_MAGIC, VIDEO_NPY_MAGIC_LEN) == 0)
            return video_npy_fail(f, v, path, "truncated header");
        return video_npy_fail(f, v, path, "bad magic: not an NPY file");
    }
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        char why[96];
        snprintf(why, sizeof why, "unsupported NPY format version %u.%u (reads 1.0, 2.0, 3.0)",
                 major, minor);
        return video_npy_fail(f, v, path, why);
    }
    size_t lenbytes = major == 1 ? 2 : 4;
    if (fread(pre + 8, 1, lenbytes, f) != lenbytes)
        return video_npy_fail(f, v, path, "truncated header");
    uint32_t hlen = major == 1 ? (uint32_t)pre[8] | (uint32_t)pre[9] << 8
                               : (uint32_t)pre[8] | (uint32_t)pre[9] << 8 |
                                 (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    uint64_t offset = 8 + lenbytes + (uint64_t)hlen;
    if (hlen == 0 || hlen > VIDEO_NPY_MAX_HEADER)
        return video_npy_fail(f, v, path, "bad header length");
    if (offset > (uint64_t)st.st_size)
        return video_npy_fail(f, v, path, "truncated header");
    char *hdr = dt_malloc(hlen);
    if (fread(hdr, 1, hlen, f) != hlen) {
        free(hdr);
        return video_npy_fail(f, v, path, "truncated header");
    }
    struct video_npy_header h;
    const char *why = NULL;
    int rc = video_parse_npy_dict(hdr, hdr + hlen, &h, &why);
    free(hdr);
    if (rc != 0)
        return video_npy_fail(f, v, path, why);
    if (strcmp(h.descr, "|u1") != 0 && strcmp(h.descr, "<u1") != 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "dtype '%s' is not uint8 ('|u1')", h.descr);
        return video_npy_fail(f, v, path, msg);
    }
    if (h.fortran)
        return video_npy_fail(f, v, path, "fortran_order True is not supported");
    if (h.rank != 4 && h.rank != 5) {
        char msg[64];
        snprintf(msg, sizeof msg, "shape has rank %d, not 4 or 5", h.rank);
        return video_npy_fail(f, v, path, msg);
    }
    uint64_t total = 1;
    for (int i = 0; i < h.rank; i++) {
        if (h.shape[i] == 0 || h.shape[i] > UINT32_MAX)
            return video_npy_fail(f, v, path, h.shape[i] == 0 ? "zero shape entry"
                                                               : "shape entry too large");
        if (__builtin_mul_overflow(total, h.shape[i], &total) || total > SIZE_MAX)
            return video_npy_fail(f, v, path, "shape product overflows");
    }
    uint64_t payload = (uint64_t)st.st_size - offset;
    if (payload != total) {
        char msg[128];
        snprintf(msg, sizeof msg, "payload is %llu bytes but the shape needs %llu",
                 (unsigned long long)payload, (unsigned long long)total);
        return video_npy_fail(f, v, path, msg);
    }
    int tnhw = h.rank == 4 && layout == VIDEO_LAYOUT_TNHW;
    v->n = (uint32_t)h.shape[tnhw ? 1 : 0];
    v->t = (uint32_t)h.shape[tnhw ? 0 : 1];
    v->h = (uint32_t)h.shape[2];
    v->w = (uint32_t)h.shape[3];
    v->c = h.rank == 5 ? (uint32_t)h.shape[4] : 1;
    v->pix = dt_malloc((size_t)total);
    if (!tnhw) {
        if (fread(v->pix, 1, (size_t)total, f) != (size_t)total)
            return video_npy_fail(f, v, path, "read error in the payload");
    } else {
        /* The file holds frame t of every sequence, then frame t + 1. */
        size_t frame = (size_t)v->h * v->w;
        for (uint32_t t = 0; t < v->t; t++)
            for (uint32_t n = 0; n < v->n; n++)
                if (fread(v->pix + ((size_t)n * v->t + t) * frame, 1, frame, f) != frame)
                    return video_npy_fail(f, v, path, "read error in the payload");
    }
    fclose(f);
    return 0;
}

/* ---- PGM directories ---------------------------------------------------- */

/* Skip whitespace and '#' comments (to the end of the line). */
static size_t video_pgm_skip(const unsigned char *b, size_t n, size_t i)
{
    for (;;) {
        while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' ||
                         b[i] == '\v' || b[i] == '\f'))
            i++;
        if (i < n && b[i] == '#') {
            while (i < n && b[i] != '\n')
                i++;
            continue;
        }
        return i;
    }
}

/* A positive decimal number below 2^31 at b[*i]; -1 when malformed. */
static int64_t video_pgm_number(const unsigned char *b, size_t n, size_t *i)
{
    size_t k = video_pgm_skip(b, n, *i);
    if (k >= n || b[k] < '0' || b[k] > '9')
        return -1;
    int64_t x = 0;
    while (k < n && b[k] >= '0' && b[k] <= '9') {
        x = x * 10 + (b[k++] - '0');
        if (x >= ((int64_t)1 << 31))
            return -1;
    }
    if (k < n && !(b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r' ||
                   b[k] == '\v' || b[k] == '\f' || b[k] == '#'))
        return -1;
    *i = k;
    return x;
}

/* Read one P5 frame file into a malloc'd buffer (*w, *h set). */
static int video_read_pgm(const char *path, uint8_t **pix, uint32_t *w, uint32_t *h)
{
    *pix = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        dt_error_set("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        dt_error_set("%s: read error: not a regular file", path);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = dt_malloc(n ? n : 1);
    size_t got = fread(b, 1, n, f);
    fclose(f);
    if (got != n) {
        free(b);
        dt_error_set("%s: read error", path);
        return -1;
    }
    if (n < 2 || b[0] != 'P' || b[1] != '5') {
        dt_error_set("%s: bad magic: not a binary (P5) PGM file", path);
        free(b);
        return -1;
    }
    size_t i = 2;
    int64_t width = video_pgm_number(b, n, &i);
    int64_t height = width > 0 ? video_pgm_number(b, n, &i) : -1;
    int64_t maxval = height > 0 ? video_pgm_number(b, n, &i) : -1;
    if (width <= 0 || height <= 0 || maxval <= 0) {
        const char *what = width <= 0 ? "width" : height <= 0 ? "height" : "maxval";
        dt_error_set("%s: bad number in the header (%s)", path, what);
        free(b);
        return -1;
    }
    if (maxval > 255) {
        dt_error_set("%s: maxval %lld means 16-bit samples; only 8-bit PGM (maxval <= 255) "
                     "is read", path, (long long)maxval);
        free(b);
        return -1;
    }
    if (i >= n) {
        dt_error_set("%s: truncated pixel data: 0 of %llu bytes", path,
                     (unsigned long long)(width * height));
        free(b);
        return -1;
    }
    if (b[i] == '#') {
        dt_error_set("%s: bad number in the header (maxval)", path);
        free(b);
        return -1;
    }
    i++; /* the single whitespace character after maxval */
    uint64_t need = (uint64_t)width * (uint64_t)height;
    if (n - i != need) {
        dt_error_set("%s: %s pixel data: %llu bytes for %lldx%lld", path,
                     n - i < need ? "truncated" : "extra bytes after the",
                     (unsigned long long)(n - i), (long long)width, (long long)height);
        free(b);
        return -1;
    }
    uint8_t *out = dt_malloc((size_t)need);
    for (size_t k = 0; k < need; k++) {
        uint32_t p = b[i + k];
        if (p > (uint32_t)maxval) {
            dt_error_set("%s: pixel value %u exceeds maxval %lld", path, p, (long long)maxval);
            free(out);
            free(b);
            return -1;
        }
        out[k] = (uint8_t)((p * 255 * 2 + (uint32_t)maxval) / (2 * (uint32_t)maxval));
    }
    free(b);
    *pix = out;
    *w = (uint32_t)width;
    *h = (uint32_t)height;
    return 0;
}

static int video_cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int video_read_pgm_dir(const char *dir, struct video *v)
{
    memset(v, 0, sizeof *v);
    DIR *d = opendir(dir);
    if (!d) {
        dt_error_set("%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t count = 0, cap = 0, entries = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        entries++;
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".pgm") != 0)
            continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            names = dt_realloc(names, cap * sizeof *names);
        }
        names[count++] = dt_strdup(e->d_name);
    }
    closedir(d);
    int rc = 0;
    if (entries == 0) {
        dt_error_set("%s: empty directory: no .pgm frames", dir);
        rc = -1;
    } else if (count == 0) {
        dt_error_set("%s: no .pgm files among %zu entries", dir, entries);
        rc = -1;
    } else if (count > UINT32_MAX) {
        dt_error_set("%s: too many frames", dir);
        rc = -1;
    }
    if (rc == 0)
        qsort(names, count, sizeof *names, video_cmp_names);
    for (size_t k = 0; rc == 0 && k < count; k++) {
        size_t plen = strlen(dir) + strlen(names[k]) + 2;
        char *path = dt_malloc(plen);
        snprintf(path, plen, "%s/%s", dir, names[k]);
        uint8_t *frame;
        uint32_t w, h;
        if (video_read_pgm(path, &frame, &w, &h) != 0) {
            rc = -1;
        } else if (k == 0) {
            size_t fsize = (size_t)w * h;
            if (fsize > SIZE_MAX / count) {
                dt_error_set("%s: %zu frames of %ux%u are too large", dir, count, w, h);
                rc = -1;
            } else {
                v->n = 1;
                v->t = (uint32_t)count;
                v->h = h;
                v->w = w;
                v->c = 1;
                v->pix = dt_malloc(fsize * count);
                memcpy(v->pix, frame, fsize);
            }
        } else if (w != v->w || h != v->h) {
            dt_error_set("%s: frame is %ux%u but %s is %ux%u", path, w, h, names[0], v->w, v->h);
            rc = -1;
        } else {
            memcpy(v->pix + k * (size_t)w * h, frame, (size_t)w * h);
        }
        free(frame);
        free(path);
    }
    for (size_t k = 0; k < count; k++)
        free(names[k]);
    free(names);
    if (rc != 0)
        video_free(v);
    return rc;
}
