/* cpu_conv.c: the cpu backend's convolution kernels (see cpu_conv.h): im2col
 * by whole-block copies, OpenBLAS sgemm, and a col2im with one fixed float32
 * summation order. Dimension letters as in cpu_conv.h. */
#include "cpu_conv.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* GCC turns short zeroing loops into memset calls, which cost more than the
 * stores for the one-row runs of im2col's padding (cpu_conv_zero). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

void cpu_conv_scratch_free(struct cpu_conv_scratch *sc)
{
    free(sc->col);
    sc->col = NULL;
    sc->cap = 0;
    free(sc->dwt);
    sc->dwt = NULL;
    sc->dwt_cap = 0;
    free(sc->dyt);
    sc->dyt = NULL;
    sc->dyt_cap = 0;
    free(sc->wflip);
    sc->wflip = NULL;
    sc->wflip_cap = 0;
}

/* The col buffer for this shape, (C*R*S, H*W). Its old contents are lost. */
static float *cpu_conv_col(struct cpu_conv_scratch *sc, const struct cpu_conv_shape *sh)
{
    size_t need = (size_t)sh->c * (size_t)sh->r * (size_t)sh->s * (size_t)sh->h * (size_t)sh->w;
    if (need > sc->cap) {
        free(sc->col);
        sc->col = dt_malloc(need * sizeof *sc->col);
        sc->cap = need;
    }
    return sc->col;
}

/* The forward runs im2col and sgemm on bands of image rows: a band's col,
 * (C*R*S, rows*W), is kept near CPU_CONV_BAND_FLOATS so that sgemm reads it
 * from cache right after im2col wrote it, but no narrower than
 * CPU_CONV_BAND_COLS columns (narrow sgemm panels are slow). Each element is
 * still one dot product over C*R*S, yet OpenBLAS's order inside it can depend
 * on the width of the product (its edge kernels differ), so the band split, a
 * function of the shape and these constants only, is part of the float32
 * result: changing a constant changes bits. */
#define CPU_CONV_BAND_FLOATS (96 * 1024)
#define CPU_CONV_BAND_COLS 512

/* n floats of +0: a short run (a padding row) as plain stores, a long one
 * by memset. */
static void cpu_conv_zero(float *d, size_t n)
{
    if (n >= 256) {
        memset(d, 0, n * sizeof *d);
        return;
    }
    for (size_t j = 0; j < n; j++)
        d[j] = 0.0f;
}

/* One row of col for image rows [h0, h1): the channel plane xc shifted by
 * (dr, ds), zero outside. Rows h in [h_lo, h_hi) read source rows h + dr; a
 * shift along w is one copy of the whole block offset by ds, after which the
 * |ds| columns that wrapped into the neighbouring row are zeroed. */
static void cpu_conv_im2col_plane(float *restrict dst, /* (h1-h0, W) */
                                  const float *restrict xc, /* (H,W) */
                                  int h, int w, int h0, int h1, int dr, int ds)
{
    size_t W = (size_t)w;
    int h_lo = dr < 0 && -dr > h0 ? -dr : h0, h_hi = h - dr < h1 ? h - dr : h1;
    int ads = ds < 0 ? -ds : ds;
    if (h_lo >= h_hi || ads >= w) {
        cpu_conv_zero(dst, (size_t)(h1 - h0) * W);
        return;
    }
    cpu_conv_zero(dst, (size_t)(h_lo - h0) * W);
    cpu_conv_zero(dst + (size_t)(h_hi - h0) * W, (size_t)(h1 - h_hi) * W);
    float *db = dst + (size_t)(h_lo - h0) * W;
    const float *sr = xc + (size_t)(h_lo + dr) * W; /* source row of db */
    size_t len = (size_t)(h_hi - h_lo) * W - (size_t)ads;
    if (ds >= 0) {
        /* reads end at the last element of source row h_hi - 1 + dr */
        memcpy(db, sr + ds, len * sizeof *db);
        for (int r = 0; r < h_hi - h_lo; r++)
            for (int j = w - ds; j < w; j++)
                db[(size_t)r * W + (size_t)j] = 0.0f;
    } else {
        /* reads start at the first element of source row h_lo + dr */
        memcpy(db + ads, sr, len * sizeof *db);
        for (int r = 0; r < h_hi - h_lo; r++)
            for (int j = 0; j < ads; j++)
                db[(size_t)r * W + (size_t)j] = 0.0f;
    }
}

/* Rows (c, r, s) of col (C*R*S, (h1-h0)*W), c in [c0, c1): cpu_conv_im2col
 * for the image rows [h0, h1). */
static void cpu_conv_im2col_rows(float *col, const float *x, /* (C,H,W) */
                                 const struct cpu_conv_shape *sh, int h0, int h1, int c0, int c1)
{
    size_t HW = (size_t)sh->h * (size_t)sh->w, BW = (size_t)(h1 - h0) * (size_t)sh->w;
    for (int c = c0; c < c1; c++)
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++) {
                size_t row = ((size_t)c * (size_t)sh->r + (size_t)r) * (size_t)sh->s + (size_t)s;
                cpu_conv_im2col_plane(col + row * BW, x + (size_t)c * HW, sh->h, sh->w, h0, h1,
                                      r - sh->r / 2, s - sh->s / 2);
            }
}

/* col (C*R*S, (h1-h0)*W): cpu_conv_im2col for the image rows [h0, h1). */
static void cpu_conv_im2col_band(float *col, const float *x, /* (C,H,W) */
                                 const struct cpu_conv_shape *sh, int h0, int h1)
{
    cpu_conv_im2col_rows(col, x, sh, h0, h1, 0, sh->c);
}

void cpu_conv_im2col(float *col, const float *x, /* (C,H,W) */ const struct cpu_conv_shape *sh)
{
    cpu_conv_im2col_band(col, x, sh, 0, sh->h);
}

/* dx[c] += col row (c, r, s) shifted back by (dr, ds), for c = c0 .. c1-1
 * and every r, s in that order: each dx element gets its taps in row-major
 * (r, s) order, and only from its own channel's rows (so channels may run
 * on different threads). */
static void cpu_conv_col2im_channels(float *restrict dx, /* (C,H,W) */ const float *restrict col,
                                     /* (C*R*S, H*W) */ const struct cpu_conv_shape *sh, int c0, int c1)
{
    size_t W = (size_t)sh->w, HW = (size_t)sh->h * W;
    memset(dx + (size_t)c0 * HW, 0, (size_t)(c1 - c0) * HW * sizeof *dx);
    for (int c = c0; c < c1; c++) {
        float *restrict dc = dx + (size_t)c * HW;
        for (int r = 0; r < sh->r; r++)
            for (int s = 0; s < sh->s; s++) {
                size_t row = ((size_t)c * (size_t)sh->r + (size_t)r) * (size_t)sh->s + (size_t)s;
                const float *restrict rs = col + row * HW;
                int dr = r - sh->r / 2, ds = s - sh->s / 2;
                int h_lo = dr < 0 ? -dr : 0, h_hi = dr > 0 ? sh->h - dr : sh->h;
                int w_lo = ds < 0 ? -ds : 0, w_hi = ds > 0 ? sh->w - ds : sh->w;
                for (int h = h_lo; h < h_hi; h++) {
                    float *restrict d = dc + (size_t)(h + dr) * W + (size_t)(w_lo + ds);
                    const float *restrict t = rs + (size_t)h * W + (size_t)w_lo;
                    for (int j = 0; j < w_hi - w_lo; j++)
                        d[j] += t[j];
                }
            }
    }
}

/* A data gradient's col2im in parts of channels. */
struct cpu_channels_job {
    float *dx;
    const float *col;
    const struct cpu_conv_shape *sh;
    int parts;
};

static void cpu_conv_channels_part(void *arg, int p, int thread)
{
    const struct cpu_channels_job *j = arg;
    (void)thread;
    size_t c0, c1;
    cpu_pool_part((size_t)j->sh->c, j->parts, p, 1, &c0, &c1);
    cpu_conv_col2im_channels(j->dx, j->col, j->sh, (int)c0, (int)c1);
}

/* col2im on up to `threads` threads, split by channels when there is work
 * enough (64K taps' adds a part, at most CPU_POOL_PARTS parts a thread) */
static void cpu_conv_col2im(float *dx, const float *col, const struct cpu_conv_shape *sh, int threads)
{
    long work = (long)sh->c * sh->r * sh->s * sh->h * sh->w;
    int parts = threads > 1 ? threads * CPU_POOL_PARTS : 1;
    if (parts > sh->c)
        parts = sh->c;
    if (parts > work / 65536)
        parts = (int)(work / 65536);
    if (parts <= 1) {
        cpu_conv_col2im_channels(dx, col, sh, 0, sh->c);
        return;
    }
    struct cpu_channels_job j = {dx, col, sh, parts};
    cpu_pool_run(threads, parts, cpu_conv_channels_part, &j);
}

/* *p with room for n floats (*cap of them allocated); -1 when there is
 * no room, *p as it was. */
void cpu_conv_forward(struct cpu_conv_scratch *sc, float *out, /* (N,K,H,W) */
                      const float *x, /* (N,C,H,W) */ const float *wt, /* (K,C,R,S) */
                      const struct cpu_conv_shape *sh)
{
    int hw = sh->h * sh->w, crs = sh->c * sh->r * sh->s;
    if (sh->r == 1 && sh->s == 1) {
        /* a 1x1 kernel's col is x[n] itself */
        for (int n = 0; n < sh->n; n++)
            cpu_gemm(sc->gemm, 0, 0, sh->k, hw, crs, wt, crs,
                     x + (size_t)n * (size_t)sh->c * (size_t)hw, hw, 0,
                     out + (size_t)n * (size_t)sh->k * (size_t)hw, hw);
        return;
    }
    if (sc->gemm && sc->gemm->fixed) { /* one product per batch item, the col never written */
        for (int n = 0; n < sh->n; n++) {
            const float *plane = x + (size_t)n * (size_t)sh->c * (size_t)hw;
            struct cpu_gemm_im2col src = {&plane, 1, sh->c, sh->h, sh->w, sh->r, sh->s};
            cpu_gemm_fixed_im2col(sc->gemm->threads, sh->k, wt, crs, &src,
                                  out + (size_t)n * (size_t)sh->k * (size_t)hw, hw);
        }
        return;
    }
    size_t nband = ((size_t)crs * (size_t)hw + CPU_CONV_BAND_FLOATS - 1) / CPU_CONV_BAND_FLOATS;
    size_t max_band = (size_t)hw / CPU_CONV_BAND_COLS;
    if (nband > max_band)
        nband = max_band;
    if (nband < 1)
        nband = 1;
    int band = (int)(((size_t)sh->h + nband - 1) / nband);
    float *col = cpu_conv_col(sc, sh);
    for (int n = 0; n < sh->n; n++) {
        const float *xn = x + (size_t)n * (size_t)sh->c * (size_t)hw;
        float *on = out + (size_t)n * (size_t)sh->k * (size_t)hw;
        for (int h0 = 0; h0 < sh->h; h0 += band) {
            int h1 = h0 + band < sh->h ? h0 + band : sh->h, bw = (h1 - h0) * sh->w;
            cpu_conv_im2col_band(col, xn, sh, h0, h1);
            cpu_gemm(sc->gemm, 0, 0, sh->k, bw, crs, wt, crs, col, bw, 0,
                     on + (size_t)h0 * (size_t)sh->w, hw);
        }
    }
}

/* The fixed data gradient's filters, wf[c][q,k,r,s] = wt[q][k][c][R-1-r][S-1-s]
 * (a copy), in parts of channels: each part writes rows of its own. */
#define CPU_FLIP_PART 32768 /* floats a part, at least */
struct cpu_flip_job {
    float *wf;
    const float *const *wt;
    int m;
    const struct cpu_conv_shape *sh;
    int parts;
};

static void cpu_conv_flip_part(void *arg, int p, int thread)
{
    const struct cpu_flip_job *j = arg;
    const struct cpu_conv_shape *sh = j->sh;
    (void)thread;
    size_t c0, c1, rs = (size_t)sh->r * (size_t)sh->s, crs = (size_t)sh->c * rs;
    size_t inner = (size_t)j->m * (size_t)sh->k * rs;
    cpu_pool_part((size_t)sh->c, j->parts, p, 1, &c0, &c1);
    /* blocks of 16 channels: each filter's taps of a block read in one run,
     * written to 16 rows */
    for (size_t b0 = c0; b0 < c1; b0 += 16) {
        size_t b1 = c1 - b0 < 16 ? c1 : b0 + 16;
        for (int q = 0; q < j->m; q++)
            for (int k = 0; k < sh->k; k++) {
                size_t qk = (size_t)q * (size_t)sh->k + (size_t)k;
                const float *src = j->wt[q] + (size_t)k * crs + b0 * rs;
                for (size_t c = b0; c < b1; c++, src += rs) {
                    float *dst = j->wf + c * inner + qk * rs;
                    for (size_t t = 0; t < rs; t++)
                        dst[t] = src[rs - 1 - t]; /* (r, s) -> (R-1-r, S-1-s) */
                }
            }
    }
}

static void cpu_conv_bwd_data_fixed(struct cpu_conv_scratch *sc, float *dx, const float *const *dy,
                                    const float *const *wt, int m, const struct cpu_conv_shape *sh)
{
    size_t hw = (size_t)sh->h * (size_t)sh->w, rs = (size_t)sh->r * (size_t)sh->s;
    size_t inner = (size_t)m * (size_t)sh->k * rs;
    if (sc->wflip_cap < (size_t)sh->c * inner) {
        free(sc->wflip);
        sc->wflip_cap = (size_t)sh->c * inner;
        sc->wflip = dt_malloc(sc->wflip_cap * sizeof *sc->wflip);
    }
    struct cpu_flip_job fj = {.wf = sc->wflip, .wt = wt, .m = m, .sh = sh};
    int threads = sc->gemm->threads > 1 ? sc->gemm->threads : 1;
    long most = (long)((size_t)sh->c * inner / CPU_FLIP_PART);
    if (most > (long)threads)
        most = threads;
    fj.parts = most < 1 ? 1 : most > sh->c ? sh->c : (int)most;
    cpu_pool_run(threads, fj.parts, cpu_conv_flip_part, &fj);
    /* the pairs' output gradients are the input (m K channels), their col never written */
    const float *dyn[CPU_CONV_MAX_PAIRS];
    struct cpu_gemm_im2col xs = {dyn, m, sh->k, sh->h, sh->w, sh->r, sh->s};
    for (int n = 0; n < sh->n; n++) {
        for (int q = 0; q < m; q++)
            dyn[q] = dy[q] + (size_t)n * (size_t)sh->k * hw;
        cpu_gemm_fixed_im2col(sc->gemm->threads, sh->c, sc->wflip, (int)inner, &xs,
                              dx + (size_t)n * (size_t)sh->c * hw, (int)hw);
    }
}

void cpu_conv_bwd_data(struct cpu_conv_scratch *sc, float *dx, /* (N,C,H,W) */
                       const float *const *dy, /* m of (N,K,H,W) */ const float *const *wt, /* m of (K,C,R,S) */
                       int m, const struct cpu_conv_shape *sh)
{
    int hw = sh->h * sh->w, crs = sh->c * sh->r * sh->s;
    size_t dyn = (size_t)sh->k * (size_t)hw; /* a batch item of dy */
    DT_ASSERT(m >= 1 && m <= CPU_CONV_MAX_PAIRS, "conv2d_bwd_data: %d pairs", m);
    if (sc->gemm && sc->gemm->fixed) {
        cpu_conv_bwd_data_fixed(sc, dx, dy, wt, m, sh);
        return;
    }
    float *col = cpu_conv_col(sc, sh);
    for (int n = 0; n < sh->n; n++) {
        for (int q = 0; q < m; q++)
            cpu_gemm(sc->gemm, 1, 0, crs, hw, sh->k, wt[q], crs, dy[q] + (size_t)n * dyn, hw, q > 0, col, hw);
        cpu_conv_col2im(dx + (size_t)n * (size_t)sh->c * (size_t)hw, col, sh, sc->gemm ? sc->gemm->threads : 1);
    }
}

/* The fixed filter gradient of one batch item in parts of the col's rows
 * (c, r, s): each part makes its rows of the col in a buffer of its thread
 * and multiplies them on that thread, so no part reads a col another core
 * wrote. The bits are the ones of the whole product: each element is one
 * chain over the pixels whichever part makes it. */
#define CPU_DW_PART 32768 /* floats of col a part, about */
#define CPU_DW_ALIGN(swap) ((swap) ? 24 : 32)
struct cpu_dw_job {
    const float *x, *dy; /* this batch item's (C,H,W), and (K,H,W) or, where swap, dy^T packed */
    float *dw;           /* (K, C*R*S), or (C*R*S, K) where swap */
    const struct cpu_conv_shape *sh;
    int swap, beta, parts;
};

static _Thread_local float *dw_col;
static _Thread_local size_t dw_col_n;

static void cpu_conv_dw_part(void *arg, int p, int thread)
{
    const struct cpu_dw_job *j = arg;
    const struct cpu_conv_shape *sh = j->sh;
    (void)thread;
    size_t i0, i1, hw = (size_t)sh->h * (size_t)sh->w, rs = (size_t)sh->r * (size_t)sh->s;
    size_t crs = (size_t)sh->c * rs;
    /* the rows of the product in whole tiles (6 rows with AVX2, 8 with
     * AVX-512), or its columns in whole strips (16 or 32) */
    cpu_pool_part(crs, j->parts, p, CPU_DW_ALIGN(j->swap), &i0, &i1);
    if (i0 >= i1)
        return;
    if (dw_col_n < (i1 - i0) * hw) {
        free(dw_col);
        dw_col_n = (i1 - i0) * hw;
        dw_col = dt_malloc(dw_col_n * sizeof *dw_col);
    }
    for (size_t i = i0; i < i1; i++) {
        int c = (int)(i / rs), r = (int)(i % rs) / sh->s, s = (int)(i % rs) % sh->s;
        cpu_conv_im2col_plane(dw_col + (i - i0) * hw, j->x + (size_t)c * hw, sh->h, sh->w, 0, sh->h,
                              r - sh->r / 2, s - sh->s / 2);
    }
    int rows = (int)(i1 - i0);
    if (j->swap) /* dwt rows i0 .. i1 - 1 = col rows x dy^T */
        cpu_gemm_fixed_packed(1, rows, sh->k, (int)hw, dw_col, (int)hw, 0, j->dy, j->beta,
                              j->dw + i0 * (size_t)sh->k, sh->k);
    else /* dw columns i0 .. i1 - 1 = dy x col rows^T */
        cpu_gemm_fixed(1, 0, 1, sh->k, rows, (int)hw, j->dy, (int)hw, dw_col, (int)hw, j->beta, j->dw + i0,
                       (int)crs);
}

void cpu_conv_bwd_filter(struct cpu_conv_scratch *sc, float *dw, /* (K,C,R,S) */
                         const float *x, /* (N,C,H,W) */ const float *dy, /* (N,K,H,W) */
                         const struct cpu_conv_shape *sh)
{
    int hw = sh->h * sh->w, crs = sh->c * sh->r * sh->s;
    int one = sh->r == 1 && sh->s == 1, fixed = sc->gemm && sc->gemm->fixed;
    float *col = one || fixed ? NULL : cpu_conv_col(sc, sh);
    /* the transposed product where it moves less: its kernel copies dy[n]
     * (K x HW) transposed instead of the col (CRS x HW), and the sum (CRS x
     * K) is copied once more at the end; PredNet's layer 1 and 2 gate
     * filter gradients (HW 1024 and 256) took 40% and 25% less time, its
     * layer 3 (HW 64 = K) 20% more */
    int swap = fixed && sh->k >= 16 && hw > 2 * sh->k;
    if (swap && sc->dwt_cap < (size_t)crs * (size_t)sh->k) {
        free(sc->dwt);
        sc->dwt_cap = (size_t)crs * (size_t)sh->k;
        sc->dwt = dt_malloc(sc->dwt_cap * sizeof *sc->dwt);
    }
    if (swap && sc->dyt_cap < cpu_gemm_packed_floats(sh->k, hw)) {
        free(sc->dyt);
        sc->dyt_cap = cpu_gemm_packed_floats(sh->k, hw);
        sc->dyt = dt_malloc(sc->dyt_cap * sizeof *sc->dyt);
    }
    for (int n = 0; n < sh->n; n++) {
        const float *xn = x + (size_t)n * (size_t)sh->c * (size_t)hw;
        const float *b = xn, *dyn = dy + (size_t)n * (size_t)sh->k * (size_t)hw;
        if (fixed && !one) {
            struct cpu_dw_job j = {.x = xn, .dy = dyn, .dw = swap ? sc->dwt : dw, .sh = sh, .swap = swap,
                                   .beta = n != 0};
            if (swap) { /* dy[n] transposed into the kernels' strips once, not by every part */
                cpu_gemm_pack_b(sc->dyt, dyn, hw, 1, sh->k, hw);
                j.dy = sc->dyt;
            }
            int threads = sc->gemm->threads > 1 ? sc->gemm->threads : 1;
            long parts = (long)((size_t)crs * (size_t)hw / CPU_DW_PART), most = (crs + CPU_DW_ALIGN(swap) - 1) / CPU_DW_ALIGN(swap);
            if (parts < (long)threads * CPU_POOL_PARTS)
                parts = (long)threads * CPU_POOL_PARTS;
            j.parts = parts > most ? (int)most : (int)parts;
            cpu_pool_run(threads, j.parts, cpu_conv_dw_part, &j);
            continue;
        }
        if (col) {
            cpu_conv_im2col(col, xn, sh);
            b = col;
        }
        if (swap)
            cpu_gemm(sc->gemm, 0, 1, crs, sh->k, hw, b, hw, dyn, hw, n != 0, sc->dwt, sh->k);
        else
            cpu_gemm(sc->gemm, 0, 1, sh->k, crs, hw, dyn, hw, b, hw, n != 0, dw, crs);
    }
    if (swap && sh->n > 0)
        for (int j = 0; j < crs; j++)
            for (int m = 0; m < sh->k; m++)
                dw[(size_t)m * (size_t)crs + (size_t)j] = sc->dwt[(size_t)j * (size_t)sh->k + (size_t)m];
}
