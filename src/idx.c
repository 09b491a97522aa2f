/* idx.c: reads MNIST-format IDX image files, plain or gzip (see idx.h), and
 * refuses anything it cannot vouch for with one line naming file and fault:
 * a dataset read wrongly would silently change every trace recorded from it. */
#include "idx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "hash.h"
#include "util.h"

#define IDX_HEADER_BYTES 16u
/* Far above any image set this tool trains on; rejects absurd headers before
 * they turn into absurd allocations. */
#define IDX_MAX_PAYLOAD ((uint64_t)1 << 31)
/* The payload buffer's first size; it doubles as the data arrives. */
#define IDX_FIRST_READ ((size_t)1 << 20)
/* gzread takes an unsigned and returns an int: read in slices below INT_MAX. */
#define IDX_READ_SLICE ((size_t)1 << 30)

static uint32_t idx_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to n bytes; *got tells how many arrived. A short count is a clean
 * end of data unless *midstream is set: the file ended inside a gzip stream.
 * Returns -1 (error set) on read errors and corrupt gzip data. */
static int idx_read(gzFile f, const char *path, void *buf, size_t n, size_t *got,
                    int *midstream)
{
    unsigned char *p = buf;
    *got = 0;
    *midstream = 0;
    while (*got < n) {
        size_t want = n - *got < IDX_READ_SLICE ? n - *got : IDX_READ_SLICE;
        int r = gzread(f, p + *got, (unsigned)want);
        if (r < 0) {
            int errnum;
            const char *msg = gzerror(f, &errnum);
            size_t plen = strlen(path);
            /* zlib prefixes its message with the path, which we already print. */
            if (strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
                msg += plen + 2;
            if (errnum == Z_ERRNO)
                dt_error_set("%s: read error: %s", path, strerror(errno));
            else
                dt_error_set("%s: corrupt gzip stream: %s", path, msg);
            return -1;
        }
        *got += (size_t)r;
        if ((size_t)r < want) {
            int errnum;
            gzerror(f, &errnum);
            *midstream = errnum == Z_BUF_ERROR;
            break;
        }
    }
    return 0;
}

/* The part after the header: dimensions, payload, and nothing after it. */
static int idx_read_body(gzFile f, const char *path, struct idx_images *out)
{
    unsigned char hdr[IDX_HEADER_BYTES];
    size_t got;
    int mid;

    if (idx_read(f, path, hdr, 4, &got, &mid) < 0)
        return -1;
    if (got == 0 && !mid) {
        dt_error_set("%s: empty file", path);
        return -1;
    }
    if (got < 4) {
        dt_error_set("%s: truncated%s header: %zu of %u bytes", path, mid ? " gzip stream in the" : "",
                     got, IDX_HEADER_BYTES);
        return -1;
    }
    uint32_t magic = idx_be32(hdr);
    if (magic >> 16 != 0) {
        dt_error_set("%s: bad magic 0x%08x: not an IDX file (expected 0x00000803)", path, magic);
        return -1;
    }
    if ((magic >> 8 & 0xff) != 0x08) {
        dt_error_set("%s: element type 0x%02x is not unsigned byte (0x08)", path,
                     magic >> 8 & 0xff);
        return -1;
    }
    if ((magic & 0xff) != 3) {
        dt_error_set("%s: %u dimensions, expected 3 (images x rows x cols)", path, magic & 0xff);
        return -1;
    }
    if (idx_read(f, path, hdr + 4, IDX_HEADER_BYTES - 4, &got, &mid) < 0)
        return -1;
    if (got < IDX_HEADER_BYTES - 4) {
        dt_error_set("%s: truncated%s header: %zu of %u bytes", path,
                     mid ? " gzip stream in the" : "", got + 4, IDX_HEADER_BYTES);
        return -1;
    }

    uint32_t n = idx_be32(hdr + 4), rows = idx_be32(hdr + 8), cols = idx_be32(hdr + 12);
    if (n == 0 || rows == 0 || cols == 0) {
        dt_error_set("%s: zero dimension: header says %u images of %ux%u", path, n, rows, cols);
        return -1;
    }
    uint64_t image = (uint64_t)rows * cols; /* < 2^64: no overflow */
    if (image > IDX_MAX_PAYLOAD / n) {
        dt_error_set("%s: absurd dimensions: %u images of %ux%u exceed %llu bytes", path, n,
                     rows, cols, (unsigned long long)IDX_MAX_PAYLOAD);
        return -1;
    }
    size_t payload = (size_t)(image * n);

    /* Header and payload in one buffer so the hash covers the file's bytes as
     * they are; the payload then moves to the front to become pix. The
     * buffer grows as the data arrives, never ahead of it: a header that
     * claims 2 GB costs no 2 GB when the file holds a few bytes. */
    size_t cap = IDX_HEADER_BYTES + (payload < IDX_FIRST_READ ? payload : IDX_FIRST_READ);
    size_t have = 0;
    unsigned char *buf = dt_malloc(cap);
    memcpy(buf, hdr, IDX_HEADER_BYTES);
    while (have < payload) {
        if (IDX_HEADER_BYTES + have == cap) {
            cap = payload - have > cap ? 2 * cap : IDX_HEADER_BYTES + payload;
            buf = dt_realloc(buf, cap);
        }
        size_t want = cap - IDX_HEADER_BYTES - have;
        if (idx_read(f, path, buf + IDX_HEADER_BYTES + have, want, &got, &mid) < 0)
            goto fail;
        have += got;
        if (got < want)
            break;
    }
    if (have < payload) {
        dt_error_set("%s: truncated%s: header says %u images of %ux%u (%zu bytes) but the %s "
                     "holds %zu", path, mid ? " gzip stream" : "", n, rows, cols, payload,
                     mid ? "stream" : "file", have);
        goto fail;
    }

    /* Reading past the payload also makes zlib check the gzip trailer (CRC
     * and length), so corruption there is caught too. */
    size_t extra = 0;
    for (;;) {
        unsigned char scratch[4096];
        if (idx_read(f, path, scratch, sizeof scratch, &got, &mid) < 0)
            goto fail;
        extra += got;
        if (got < sizeof scratch)
            break;
    }
    if (extra > 0) {
        dt_error_set("%s: %zu bytes of trailing garbage after the %u images of %ux%u", path,
                     extra, n, rows, cols);
        goto fail;
    }
    if (mid) {
        dt_error_set("%s: truncated gzip stream: the data is complete but the gzip trailer "
                     "(checksum) is missing", path);
        goto fail;
    }

    out->hash = hash_bytes(buf, IDX_HEADER_BYTES + payload);
    memmove(buf, buf + IDX_HEADER_BYTES, payload);
    out->n = n;
    out->rows = rows;
    out->cols = cols;
    out->pix = buf;
    return 0;

fail:
    free(buf);
    return -1;
}

int idx_read_images(const char *path, struct idx_images *out)
{
    memset(out, 0, sizeof *out);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        dt_error_set("%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        return -1;
    }
    gzbuffer(f, 1u << 17); /* fewer, larger reads; the default is 8 KiB */
    int rc = idx_read_body(f, path, out);
    gzclose_r(f);
    return rc;
}

void idx_free(struct idx_images *im)
{
    if (!im)
        return;
    free(im->pix);
    memset(im, 0, sizeof *im);
}

int idx_find_images(const char *dir, const char *which, char *path, size_t pathlen)
{
    /* The names used by the MNIST and Fashion-MNIST distributions and by the
     * common mirrors that rename the dot; plain first, it reads fastest. */
    static const char *const suffixes[] = {
        "-images-idx3-ubyte", "-images-idx3-ubyte.gz",
        "-images.idx3-ubyte", "-images.idx3-ubyte.gz",
    };
    enum { IDX_NSUFFIXES = sizeof suffixes / sizeof suffixes[0] };
    struct stat st;

    if (strcmp(which, "train") != 0 && strcmp(which, "t10k") != 0) {
        dt_error_set("%s: unknown image set '%s' (expected train or t10k)", dir, which);
        return -1;
    }
    if (stat(dir, &st) != 0) {
        dt_error_set("%s: cannot open dataset directory: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        dt_error_set("%s: not a directory", dir);
        return -1;
    }
    for (size_t i = 0; i < IDX_NSUFFIXES; i++) {
        char cand[PATH_MAX];
        int len = snprintf(cand, sizeof cand, "%s/%s%s", dir, which, suffixes[i]);
        if (len < 0 || (size_t)len >= sizeof cand)
            continue;
        if (stat(cand, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if ((size_t)len >= pathlen) {
            dt_error_set("%s: path longer than %zu bytes", cand, pathlen);
            return -1;
        }
        memcpy(path, cand, (size_t)len + 1);
        return 0;
    }
    char tried[256] = "";
    for (size_t i = 0; i < IDX_NSUFFIXES; i++) {
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s%s", i ? ", " : "", which, suffixes[i]);
    }
    dt_error_set("%s: no %s image file (tried %s)", dir, which, tried);
    return -1;
}
