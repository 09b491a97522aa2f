/* oracle_conv.c: the convolutions' sums in double through matrix products.
 *
 * Every output element of conv2d, conv2d_bwd_data and conv2d_bwd_filter is a
 * sum of products of two floats, each exact in double. Written as matrix
 * products of double matrices (im2col: one row per filter tap, one column
 * per pixel, zeros outside the image), OpenBLAS's dgemm sums them in some
 * order, with or without FMA: any order of L additions errs by at most
 * gamma_{L-1} (u = 2^-53) times the sum of the magnitudes, and the padding's
 * exact zeros add no error. A second product of the magnitudes gives that
 * sum (A, within a factor 1 + gamma_L of the true one). So
 *   s, with |s - exact| <= A (L + 2) 2^-51 / 2,
 * decides the correctly rounded float wherever every real within that
 * radius rounds alike (oracle_cert32), and A is what oracle_bound's bound of
 * a sum of products needs. Both products run on oracle_threads() threads:
 * replay's oracle is where a step's time goes, and the convolutions are
 * most of it. A sum whose terms are all zeros takes its sign from a third
 * product, of the terms' signs. Elements left undecided (a cancellation
 * close to a rounding boundary, a term not finite) go to oracle_ops.c's
 * exact path. conv2d_bwd_data's m pairs (dy_j, w_j) are one product: the
 * filters side by side along the inner dimension and the pairs' im2col rows
 * stacked to match (L = m K R S), as one convolution of the filters stacked
 * along K, so that every bound above covers the sum over all pairs. */
#include "oracle_conv.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "op.h"
#include "oracle.h"
#include "util.h"

/* at most this many doubles in one im2col block (two of them: values and
 * magnitudes), so that a large model's convolution stays in tens of MB */
#define CONV_BLOCK_DOUBLES ((size_t)2 << 20)

int oracle_threads(void)
{
    const char *e = getenv("DIVTRACE_ORACLE_THREADS");
    if (e && *e) {
        char *end;
        errno = 0;
        long v = strtol(e, &end, 10);
        if (!errno && !*end && v >= 1 && v <= 1024)
            return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 && n <= 1024 ? (int)n : 1;
}

/* Scratch that grows and is kept, one per thread: a step's convolutions
 * would otherwise map and fault in fresh pages for every op. */
enum { WS_VAL, WS_MAG, WS_D, WS_DA, WS_F, WS_FA, WS_S, WS_A, WS_M, WS_Z, WS_N };
static _Thread_local struct {
    void *p[WS_N];
    size_t n[WS_N];
} conv_ws;

/* n doubles (n uint32s for WS_M) */
static void *conv_scratch(int k, size_t n)
{
    size_t bytes = n * (k == WS_M ? sizeof(uint32_t) : sizeof(double));
    if (conv_ws.n[k] < bytes) {
        free(conv_ws.p[k]);
        conv_ws.p[k] = dt_malloc(bytes);
        conv_ws.n[k] = bytes;
    }
    return conv_ws.p[k];
}

/* The shift of kernel row r of R from the centre (op.h's "same" padding). */
static long conv_d(size_t r, size_t R) { return (long)r - (long)(R / 2); }

/* What a block holds of each term t: its value in val and |t| in mag
 * (FORM_VALUE), or its sign, +1 or -1 by the sign bit, in val (FORM_SIGN:
 * for sums whose terms are all zeros, whose sign IEEE sets by the signs of
 * the products). Outside the image: 0 in both forms. */
enum conv_form { FORM_VALUE, FORM_SIGN };

static double conv_term(double t, enum conv_form form)
{
    return form == FORM_SIGN ? copysign(1.0, t) : t;
}

/* Rows (c, r, s) of the im2col block of one image's planes src (C,H,W), for
 * image rows h0 .. h0 + P / W - 1 (P pixels): src[c, h + sg dr, v + sg ds],
 * 0 outside the image. */
static void conv_im2col(double *val, double *mag, const float *src, size_t C, size_t H, size_t W,
                        size_t R, size_t S, long sg, size_t h0, size_t P, enum conv_form form)
{
    size_t hw = H * W, nh = P / W;
    for (size_t c = 0; c < C; c++)
        for (size_t r = 0; r < R; r++)
            for (size_t s = 0; s < S; s++) {
                size_t row = (c * R + r) * S + s;
                long dr = sg * conv_d(r, R), ds = sg * conv_d(s, S);
                /* columns v with v + ds in the image */
                long lo = ds < 0 ? -ds : 0, hi = (long)W - (ds > 0 ? ds : 0);
                lo = lo > (long)W ? (long)W : lo;
                hi = hi < lo ? lo : hi;
                size_t v0 = (size_t)lo, v1 = (size_t)hi;
                for (size_t j = 0; j < nh; j++) {
                    double *vr = val + row * P + j * W, *mr = mag + row * P + j * W;
                    long y = (long)(h0 + j) + dr;
                    if (y < 0 || y >= (long)H) {
                        memset(vr, 0, W * sizeof *vr);
                        if (form == FORM_VALUE)
                            memset(mr, 0, W * sizeof *mr);
                        continue;
                    }
                    const float *sr = src + c * hw + (size_t)y * W;
                    for (size_t v = 0; v < v0; v++)
                        vr[v] = 0;
                    for (size_t v = v1; v < W; v++)
                        vr[v] = 0;
                    if (form == FORM_SIGN) {
                        for (size_t v = v0; v < v1; v++)
                            vr[v] = copysign(1.0, sr[(long)v + ds]);
                        continue;
                    }
                    for (size_t v = 0; v < v0; v++)
                        mr[v] = 0;
                    for (size_t v = v1; v < W; v++)
                        mr[v] = 0;
                    for (size_t v = v0; v < v1; v++) {
                        double t = sr[(long)v + ds];
                        vr[v] = t;
                        mr[v] = fabs(t);
                    }
                }
            }
}

/* How many of the R x S taps at pixel (h, v) lie in the image (sign sg). */
static uint32_t conv_taps_in(size_t h, size_t v, size_t H, size_t W, size_t R, size_t S, long sg)
{
    uint32_t n = 0;
    for (size_t r = 0; r < R; r++)
        for (size_t s = 0; s < S; s++) {
            long y = (long)h + sg * conv_d(r, R), x = (long)v + sg * conv_d(s, S);
            n += y >= 0 && y < (long)H && x >= 0 && x < (long)W;
        }
    return n;
}

/* Pixels per block: whole image rows of W pixels, at least one. */
static size_t conv_block(size_t rows, size_t H, size_t W)
{
    size_t nh = CONV_BLOCK_DOUBLES / (rows ? rows : 1) / W;
    return (nh < 1 ? 1 : nh > H ? H : nh) * W;
}

/* Where a pass writes: out1 = F1 B1 (the values' product) and out2 = F2 B2
 * (the magnitudes'), each unless NULL. */
struct conv_pass {
    double *out1, *out2;
    const double *F1, *F2; /* the filter side (conv2d, conv2d_bwd_data) */
    enum conv_form form;
};

/* conv2d: out (N,K,H,W) = W (K x CRS) times im2col(x[n]) (CRS x HW);
 * conv2d_bwd_data: out (N,C,H,W) = W' (C x mKRS, W'[c][j,k,r,s] = w_j[k,c,r,s])
 * times the m pairs' im2col(dy_j[n]) stacked, taps mirrored (mKRS x HW).
 * src: the m images (m = 1 for conv2d). */
static void conv_fwd_like(const struct conv_pass *ps, const float *const *src, size_t m,
                          size_t N, size_t Ci, size_t H, size_t W, size_t R, size_t S, size_t Co,
                          long sg)
{
    size_t hw = H * W, rows = Ci * R * S, inner = m * rows, P = conv_block(inner, H, W);
    double *val = conv_scratch(WS_VAL, inner * P), *mag = conv_scratch(WS_MAG, inner * P);
    for (size_t n = 0; n < N; n++)
        for (size_t p0 = 0; p0 < hw; p0 += P) {
            size_t np = hw - p0 < P ? hw - p0 : P, off = n * Co * hw + p0;
            for (size_t j = 0; j < m; j++) /* pair j's rows below the j pairs' before it */
                conv_im2col(val + j * rows * np, mag + j * rows * np, src[j] + n * Ci * hw, Ci,
                            H, W, R, S, sg, p0 / W, np, ps->form);
            if (ps->out1)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Co, (int)np,
                            (int)inner, 1.0, ps->F1, (int)inner, val, (int)np, 0.0,
                            ps->out1 + off, (int)hw);
            if (ps->out2)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Co, (int)np,
                            (int)inner, 1.0, ps->F2, (int)inner, mag, (int)np, 0.0,
                            ps->out2 + off, (int)hw);
        }
}

/* conv2d_bwd_filter: out (K, CRS) = sum over n and pixel blocks of
 * dy[n] (K x P) times im2col(x[n])^T (P x CRS), accumulated. */
static void conv_bwd_filter(const struct conv_pass *ps, const float *x, const float *dy, size_t N,
                            size_t C, size_t H, size_t W, size_t K, size_t R, size_t S)
{
    size_t hw = H * W, crs = C * R * S, P = conv_block(crs + K, H, W);
    double *val = conv_scratch(WS_VAL, crs * P), *mag = conv_scratch(WS_MAG, crs * P);
    double *D = conv_scratch(WS_D, K * P), *Da = conv_scratch(WS_DA, K * P);
    double beta = 0.0;
    for (size_t n = 0; n < N; n++)
        for (size_t p0 = 0; p0 < hw; p0 += P) {
            size_t np = hw - p0 < P ? hw - p0 : P;
            conv_im2col(val, mag, x + n * C * hw, C, H, W, R, S, 1, p0 / W, np, ps->form);
            for (size_t k = 0; k < K; k++)
                for (size_t j = 0; j < np; j++) {
                    double t = dy[(n * K + k) * hw + p0 + j];
                    D[k * np + j] = conv_term(t, ps->form);
                    Da[k * np + j] = fabs(t);
                }
            if (ps->out1)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)crs, (int)np,
                            1.0, D, (int)np, val, (int)np, beta, ps->out1, (int)crs);
            if (ps->out2)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)crs, (int)np,
                            1.0, Da, (int)np, mag, (int)np, beta, ps->out2, (int)crs);
            beta = 1.0;
        }
}

/* The in-image term counts of every element. */
static void conv_counts(const struct graph *g, const struct node *nd, uint32_t *m)
{
    size_t H = nd->shape[2], W = nd->shape[3], hw = H * W;
    if (nd->type == OP_CONV2D_BWD_FILTER) {
        const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
        size_t N = xs[0], Hx = xs[2], Wx = xs[3], R = H, S = W, kc = (size_t)nd->shape[0] * nd->shape[1];
        for (size_t r = 0; r < R; r++)
            for (size_t s = 0; s < S; s++) {
                size_t dr = (size_t)labs(conv_d(r, R)), ds = (size_t)labs(conv_d(s, S));
                uint32_t t = (uint32_t)(N * (dr < Hx ? Hx - dr : 0) * (ds < Wx ? Wx - ds : 0));
                for (size_t j = 0; j < kc; j++)
                    m[j * R * S + r * S + s] = t;
            }
        return;
    }
    const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
    int fwd = nd->type == OP_CONV2D;
    size_t Ci = fwd ? ws[1] : ws[0], planes = (size_t)nd->shape[0] * nd->shape[1];
    size_t mc = oracle_conv_pairs(nd) * Ci; /* every pair has the same taps in the image */
    for (size_t h = 0; h < H; h++)
        for (size_t v = 0; v < W; v++) {
            uint32_t t = (uint32_t)mc * conv_taps_in(h, v, H, W, ws[2], ws[3], fwd ? 1 : -1);
            for (size_t j = 0; j < planes; j++)
                m[j * hw + h * W + v] = t;
        }
}

size_t oracle_conv_pairs(const struct node *nd)
{
    return nd->type == OP_CONV2D_BWD_DATA ? (size_t)nd->ninputs / 2 : 1;
}

/* One pass over op nd in ps's form. */
static void conv_run(const struct graph *g, const struct node *nd, const float *const *in,
                     struct conv_pass *ps)
{
    if (nd->type == OP_CONV2D_BWD_FILTER) {
        const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
        conv_bwd_filter(ps, in[0], in[1], xs[0], xs[1], xs[2], xs[3], nd->shape[0],
                        nd->p.conv.r, nd->p.conv.s);
        return;
    }
    const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
    size_t K = ws[0], C = ws[1], R = ws[2], S = ws[3], rs = R * S;
    int fwd = nd->type == OP_CONV2D;
    size_t m = oracle_conv_pairs(nd), Co = fwd ? K : C, Ci = fwd ? C : K, rows = Ci * rs;
    size_t inner = m * rows;
    double *F = conv_scratch(WS_F, Co * inner), *Fa = conv_scratch(WS_FA, Co * inner);
    const float *img[OP_MAX_INPUTS / 2];
    for (size_t j = 0; j < m; j++) {
        const float *w = in[2 * j + 1];
        img[j] = in[2 * j];
        for (size_t o = 0; o < Co; o++)
            for (size_t i = 0; i < Ci; i++)
                for (size_t t = 0; t < rs; t++) {
                    double v = fwd ? w[(o * C + i) * rs + t] : w[(i * C + o) * rs + t];
                    F[o * inner + j * rows + i * rs + t] = conv_term(v, ps->form);
                    Fa[o * inner + j * rows + i * rs + t] = fabs(v);
                }
    }
    ps->F1 = F;
    ps->F2 = Fa;
    const uint32_t *xs = fwd ? g->nodes[nd->inputs[0]].shape : nd->shape;
    conv_fwd_like(ps, img, m, xs[0], Ci, xs[2], xs[3], R, S, Co, fwd ? 1 : -1);
}

int oracle_conv_sums(const struct graph *g, const struct node *nd, const float *const *in,
                     int want_s, struct oracle_conv *cs)
{
    memset(cs, 0, sizeof *cs);
    size_t cnt = nd->count;
    if (cnt == 0 || (size_t)INT32_MAX < cnt)
        return -1;
    /* (dgemm with beta 0 never reads its output: scratch as it is will do) */
    cs->s = want_s ? conv_scratch(WS_S, cnt) : NULL;
    cs->a = conv_scratch(WS_A, cnt);
    cs->m = conv_scratch(WS_M, cnt);
    const uint32_t *xs = g->nodes[nd->inputs[0]].shape;
    const uint32_t *ws = g->nodes[nd->inputs[1]].shape;
    cs->inner = nd->type == OP_CONV2D_BWD_FILTER
                    ? (size_t)xs[0] * xs[2] * xs[3]
                    : oracle_conv_pairs(nd) * ws[nd->type == OP_CONV2D ? 1 : 0] * ws[2] * ws[3];
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(oracle_threads());
    struct conv_pass ps = {.out1 = cs->s, .out2 = cs->a, .form = FORM_VALUE};
    conv_run(g, nd, in, &ps);
    conv_counts(g, nd, cs->m);
    /* sums of zeros only: the sign of each product, summed exactly (small
     * integers); the zero is -0 when every in-image product is -0 */
    size_t zeros = 0;
    for (size_t i = 0; i < cnt && want_s; i++)
        zeros += cs->a[i] == 0;
    if (zeros) {
        cs->z = conv_scratch(WS_Z, cnt);
        struct conv_pass pz = {.out1 = cs->z, .form = FORM_SIGN};
        conv_run(g, nd, in, &pz);
    }
    openblas_set_num_threads(saved);
    return 0;
}

void oracle_conv_free(struct oracle_conv *cs)
{
    memset(cs, 0, sizeof *cs); /* (the arrays are the thread's scratch, kept for the next op) */
}

int oracle_conv_cert(const struct oracle_conv *cs, size_t i, float *out)
{
    double a = cs->a[i];
    if (a == 0 && cs->z && cs->m[i] > 0) { /* every product a zero: -0 only if all are */
        *out = cs->z[i] == -(double)cs->m[i] ? -0.0f : 0.0f;
        return 1;
    }
    if (!(a > 0) || !(a < 0x1p1000))
        return 0; /* a term not finite */
    return oracle_cert32(cs->s[i], a * ((double)cs->inner + 2) * 0x1p-51, out);
}
