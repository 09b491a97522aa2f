/* prednet.c: PredNet (Lotter, Kreiman and Cox, 2016) with the semantics of
 * the reference Keras code, unrolled over nt time steps so that the tape
 * gives back-propagation through time.
 *
 * Per layer l and time step t (all convolutions 3x3, "same", with a bias):
 *   R_l(t), c_l(t): a ConvLSTM over X = [R_l(t-1), E_l(t-1), up2(R_{l+1}(t))]
 *     (the last part only below the top layer):
 *     i = hsig(conv_i X), f = hsig(conv_f X), o = hsig(conv_o X),
 *     g = tanh(conv_c X), c = f * c(t-1) + i * g, R = o * tanh(c)
 *   Ahat_l = relu(conv_ahat R_l), and on layer 0 satlu(., pixel_max)
 *   E_l = [relu(A_l - Ahat_l), relu(Ahat_l - A_l)]
 *   A_{l+1} = maxpool2(relu(conv_a E_l)), A_0 = the frame.
 * At each time step R is updated top-down, then Ahat, E, A bottom-up;
 * R, c and E start at zero. The loss is the sum over t and l of
 * tw_t lw_l mean(E_l(t)), tw_0 = 0 and tw_t = 1 / (nt - 1) after; terms of
 * weight 0 are left out (their E still feeds the next time step).
 *
 * Names: parameters "L<l>.conv_<g>.W" and ".b" (g one of i, f, o, c, ahat,
 * a; "L<l>.conv_a" makes A_{l+1}, as Keras numbers it); ops
 * "L<l>.t<NN>.<what>" (e.g. "L2.t07.conv_i"); inputs "data.t<NN>"; the
 * initial states "L<l>.init.r", ".c", ".e"; the loss terms
 * "L<l>.t<NN>.loss", their running sums "loss.t<NN>.L<l>", the last of
 * which is renamed "loss". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"

void prednet_tname(const struct model_spec *spec, uint32_t t, char *buf, size_t n)
{
    int digits = 2;
    for (uint32_t m = spec->nt > 0 ? spec->nt - 1 : 0; m >= 100; m /= 10)
        digits++;
    if (snprintf(buf, n, "t%0*u", digits & 15, t) >= (int)n)
        buf[n - 1] = 0;
}

int prednet_check(const struct model_spec *spec)
{
    int nl = spec->nstack;
    if (nl < 1) {
        dt_error_set("--stack: at least one layer");
        return DT_ERR;
    }
    if (spec->nt < 2) {
        dt_error_set("--nt %u: PredNet needs at least 2 time steps (the loss weighs t = 0 by 0)",
                     spec->nt);
        return DT_ERR;
    }
    uint32_t div = 1u << (nl - 1);
    if (spec->height % div || spec->width % div) {
        dt_error_set("--size %ux%u: with %d layers height and width must be multiples of %u",
                     spec->height, spec->width, nl, div);
        return DT_ERR;
    }
    int nonzero = 0;
    for (int l = 0; l < nl; l++)
        nonzero |= spec->layer_weights[l] != 0;
    if (!nonzero) {
        dt_error_set("--layer-weights: all zero, there is nothing to train");
        return DT_ERR;
    }
    return DT_OK;
}

struct pn {
    struct graph *g;
    const struct model_spec *s;
    char tn[16];
};

/* printf into a name buffer */
static const char *pn_name(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *pn_name(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return buf;
}

struct pn_conv {
    int w, b;
};

static struct pn_conv pn_conv_param(struct graph *g, int l, const char *what, uint32_t k, uint32_t c)
{
    char name[64];
    uint32_t ws[4] = {k, c, 3, 3};
    struct pn_conv cv;
    cv.w = graph_param(g, pn_name(name, sizeof name, "L%d.conv_%s.W", l, what), 4, ws);
    cv.b = graph_param(g, pn_name(name, sizeof name, "L%d.conv_%s.b", l, what), 1, &k);
    return cv;
}

/* the convolution "L<l>.<t>.conv_<what>" */
static int pn_conv_only(struct pn *p, int l, const char *what, int x, struct pn_conv cv)
{
    char name[96];
    return graph_conv2d(p->g, pn_name(name, sizeof name, "L%d.%s.conv_%s", l, p->tn, what), x, cv.w);
}

/* its bias, "...add_bias" */
static int pn_bias(struct pn *p, int l, const char *what, int y, struct pn_conv cv)
{
    char name[96];
    return graph_add_bias(p->g, pn_name(name, sizeof name, "L%d.%s.conv_%s.add_bias", l, p->tn, what),
                          y, cv.b);
}

/* conv + bias */
static int pn_conv(struct pn *p, int l, const char *what, int x, struct pn_conv cv)
{
    return pn_bias(p, l, what, pn_conv_only(p, l, what, x, cv), cv);
}

int prednet_build(struct graph *g, const struct model_spec *s)
{
    if (prednet_check(s) < 0)
        return DT_ERR;
    int nl = s->nstack;
    uint32_t n = s->batch;
    struct pn p = {g, s, ""};
    char name[96];

    /* parameters */
    struct pn_conv cv_i[MODEL_MAX_LAYERS], cv_f[MODEL_MAX_LAYERS], cv_o[MODEL_MAX_LAYERS];
    struct pn_conv cv_c[MODEL_MAX_LAYERS], cv_ahat[MODEL_MAX_LAYERS], cv_a[MODEL_MAX_LAYERS];
    uint32_t hh[MODEL_MAX_LAYERS], ww[MODEL_MAX_LAYERS];
    for (int l = 0; l < nl; l++) {
        hh[l] = s->height >> l;
        ww[l] = s->width >> l;
        uint32_t cin = s->rstack[l] + 2 * s->stack[l] + (l + 1 < nl ? s->rstack[l + 1] : 0);
        cv_i[l] = pn_conv_param(g, l, "i", s->rstack[l], cin);
        cv_f[l] = pn_conv_param(g, l, "f", s->rstack[l], cin);
        cv_o[l] = pn_conv_param(g, l, "o", s->rstack[l], cin);
        cv_c[l] = pn_conv_param(g, l, "c", s->rstack[l], cin);
        cv_ahat[l] = pn_conv_param(g, l, "ahat", s->stack[l], s->rstack[l]);
        if (l + 1 < nl)
            cv_a[l] = pn_conv_param(g, l, "a", s->stack[l + 1], 2 * s->stack[l]);
    }

    /* initial states */
    int r_prev[MODEL_MAX_LAYERS], c_prev[MODEL_MAX_LAYERS], e_prev[MODEL_MAX_LAYERS];
    for (int l = 0; l < nl; l++) {
        uint32_t rs[4] = {n, s->rstack[l], hh[l], ww[l]};
        uint32_t es[4] = {n, 2 * s->stack[l], hh[l], ww[l]};
        r_prev[l] = graph_fill(g, pn_name(name, sizeof name, "L%d.init.r", l), 4, rs, 0.0f);
        c_prev[l] = graph_fill(g, pn_name(name, sizeof name, "L%d.init.c", l), 4, rs, 0.0f);
        e_prev[l] = graph_fill(g, pn_name(name, sizeof name, "L%d.init.e", l), 4, es, 0.0f);
    }

    int loss = -1;
    char last_sum[96] = "";
    for (uint32_t t = 0; t < s->nt; t++) {
        prednet_tname(s, t, p.tn, sizeof p.tn);
        const char *tn = p.tn;
        uint32_t fs[4] = {n, s->stack[0], s->height, s->width};
        int frame = graph_input(g, pn_name(name, sizeof name, "data.%s", tn), 4, fs);

        /* R top-down */
        int r[MODEL_MAX_LAYERS], c[MODEL_MAX_LAYERS];
        int up = -1;
        for (int l = nl - 1; l >= 0; l--) {
            int parts[3] = {r_prev[l], e_prev[l], up};
            int x = graph_concat(g, pn_name(name, sizeof name, "L%d.%s.in", l, tn), up >= 0 ? 3 : 2, parts);
            /* the four gate convolutions first, next to each other: they
             * share x, and so do their filter gradients, which the reverse
             * sweep then makes after every gate's output gradient (a
             * backend may run each set as one convolution; the values are
             * those of the four) */
            int yi = pn_conv_only(&p, l, "i", x, cv_i[l]);
            int yf = pn_conv_only(&p, l, "f", x, cv_f[l]);
            int yo = pn_conv_only(&p, l, "o", x, cv_o[l]);
            int yc = pn_conv_only(&p, l, "c", x, cv_c[l]);
            int gi = graph_hard_sigmoid(g, pn_name(name, sizeof name, "L%d.%s.i", l, tn),
                                        pn_bias(&p, l, "i", yi, cv_i[l]));
            int gf = graph_hard_sigmoid(g, pn_name(name, sizeof name, "L%d.%s.f", l, tn),
                                        pn_bias(&p, l, "f", yf, cv_f[l]));
            int go = graph_hard_sigmoid(g, pn_name(name, sizeof name, "L%d.%s.o", l, tn),
                                        pn_bias(&p, l, "o", yo, cv_o[l]));
            int gg = graph_tanh(g, pn_name(name, sizeof name, "L%d.%s.g", l, tn),
                                pn_bias(&p, l, "c", yc, cv_c[l]));
            int fc = graph_mul(g, pn_name(name, sizeof name, "L%d.%s.f*c", l, tn), gf, c_prev[l]);
            int ig = graph_mul(g, pn_name(name, sizeof name, "L%d.%s.i*g", l, tn), gi, gg);
            c[l] = graph_add(g, pn_name(name, sizeof name, "L%d.%s.c", l, tn), fc, ig);
            int th = graph_tanh(g, pn_name(name, sizeof name, "L%d.%s.tanh_c", l, tn), c[l]);
            r[l] = graph_mul(g, pn_name(name, sizeof name, "L%d.%s.r", l, tn), go, th);
            up = l > 0 ? graph_upsample2(g, pn_name(name, sizeof name, "L%d.%s.up", l, tn), r[l]) : -1;
        }

        /* Ahat, E, A bottom-up */
        int a = frame;
        for (int l = 0; l < nl; l++) {
            int ah = graph_relu(g, pn_name(name, sizeof name, l == 0 ? "L%d.%s.ahat_relu" : "L%d.%s.ahat",
                                           l, tn),
                                pn_conv(&p, l, "ahat", r[l], cv_ahat[l]));
            if (l == 0)
                ah = graph_satlu(g, pn_name(name, sizeof name, "L%d.%s.ahat", l, tn), ah, s->pixel_max);
            int d1 = graph_sub(g, pn_name(name, sizeof name, "L%d.%s.a-ahat", l, tn), a, ah);
            int d2 = graph_sub(g, pn_name(name, sizeof name, "L%d.%s.ahat-a", l, tn), ah, a);
            int parts[2] = {graph_relu(g, pn_name(name, sizeof name, "L%d.%s.e_pos", l, tn), d1),
                            graph_relu(g, pn_name(name, sizeof name, "L%d.%s.e_neg", l, tn), d2)};
            int e = graph_concat(g, pn_name(name, sizeof name, "L%d.%s.e", l, tn), 2, parts);
            double wt = (t == 0 ? 0.0 : 1.0 / (double)(s->nt - 1)) * s->layer_weights[l];
            if (wt != 0) {
                int term = graph_mean(g, pn_name(name, sizeof name, "L%d.%s.loss", l, tn), e, (float)wt);
                if (loss < 0) {
                    loss = term;
                } else {
                    loss = graph_add(g, pn_name(last_sum, sizeof last_sum, "loss.%s.L%d", tn, l), loss, term);
                }
            }
            if (l + 1 < nl) {
                int ar = graph_relu(g, pn_name(name, sizeof name, "L%d.%s.a_relu", l, tn),
                                    pn_conv(&p, l, "a", e, cv_a[l]));
                a = graph_maxpool2(g, pn_name(name, sizeof name, "L%d.%s.a", l + 1, tn), ar);
            }
            e_prev[l] = e;
        }
        for (int l = 0; l < nl; l++) {
            r_prev[l] = r[l];
            c_prev[l] = c[l];
        }
    }
    DT_ASSERT(loss >= 0, "prednet: no loss term");
    /* the final sum is the loss: give it the name every model's loss has */
    if (last_sum[0])
        graph_rename(g, loss, "loss");
    return loss;
}
