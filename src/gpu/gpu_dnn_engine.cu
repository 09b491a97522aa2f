/* gpu_dnn_engine.cu: the cudnn backend's convolutions through cuDNN's
 * backend (graph) API: an operation graph of one convolution, the engine
 * configurations cuDNN's heuristics rank for it (modes A, then FALLBACK),
 * and an execution plan of the one chosen (gpu_dnn.cu, dnn_conv_choose:
 * --cudnn-algo deterministic-fast). The first deterministic engine of that
 * ranking is, for the filter gradients, a Winograd one about four times as
 * fast as the legacy calls' first deterministic direct algorithm
 * (tests/bench/bench_cudnn_engines).
 * An engine configuration is named by its global index and its knobs'
 * choices ("ENGINE17.K3=2.K12=0"), which is what a trace records and what a
 * replay builds again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_dnn.h"

#define ENG_MAX_KNOBS CUDNN_KNOB_TYPE_COUNTS /* a choice for each knob type at most */
#define ENG_MAX_CFGS 64 /* configurations taken from each heuristics mode */

/* The descriptors of one convolution's operation graph, shared by the
 * engines built on it (refs: how many). */
struct dnn_egraph {
    cudnnBackendDescriptor_t t[3], conv, op, graph; /* t: x, w, y */
    int refs;
};

struct dnn_engine {
    struct dnn_egraph *g;
    cudnnBackendDescriptor_t plan;
    size_t ws;
    int nondet;
    char name[DNN_ENGINE_NAME];
};

enum { ENG_UID_X = 'x', ENG_UID_W = 'w', ENG_UID_Y = 'y' };
static const cudnnBackendAttributeType_t ENG_DESC = CUDNN_TYPE_BACKEND_DESCRIPTOR;

static void eng_free_desc(cudnnBackendDescriptor_t d)
{
    if (d)
        cudnnBackendDestroyDescriptor(d);
}

static void eng_graph_release(struct dnn_egraph *g)
{
    if (!g || --g->refs > 0)
        return;
    eng_free_desc(g->graph);
    eng_free_desc(g->op);
    eng_free_desc(g->conv);
    for (int i = 0; i < 3; i++)
        eng_free_desc(g->t[i]);
    free(g);
}

/* cuDNN's status of the first call that failed, through the whole build of
 * a descriptor: set attributes, finalize. */
#define ENG_TRY(call)                                                                              \
    do {                                                                                           \
        cudnnStatus_t eng_s_ = (call);                                                             \
        if (eng_s_ != CUDNN_STATUS_SUCCESS)                                                        \
            return eng_s_;                                                                         \
    } while (0)

static cudnnStatus_t eng_tensor(cudnnBackendDescriptor_t *t, int64_t uid, int64_t n, int64_t c, int64_t h,
                                int64_t w)
{
    ENG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    int64_t dim[4] = {n, c, h, w}, str[4] = {c * h * w, h * w, w, 1}, align = 16;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    ENG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    ENG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim));
    ENG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    ENG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    ENG_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    return cudnnBackendFinalize(*t);
}

/* The graph of direction d of cv: the same convolution as the legacy
 * descriptors (gpu_dnn.cu, dnn_conv_find_grouped): stride 1, padding R/2
 * and S/2, dilation 1, cross-correlation, float32 data and arithmetic. */
static cudnnStatus_t eng_graph_build(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                     struct dnn_egraph *g)
{
    ENG_TRY(eng_tensor(&g->t[0], ENG_UID_X, cv->n, cv->c, cv->h, cv->w));
    ENG_TRY(eng_tensor(&g->t[1], ENG_UID_W, cv->k, cv->c, cv->r, cv->s));
    ENG_TRY(eng_tensor(&g->t[2], ENG_UID_Y, cv->n, cv->k, cv->h, cv->w));
    ENG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv));
    int64_t dims = 2, pad[2] = {cv->r / 2, cv->s / 2}, one[2] = {1, 1};
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
                                     &mode));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one));
    ENG_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one));
    ENG_TRY(cudnnBackendFinalize(g->conv));
    static const cudnnBackendDescriptorType_t type[DNN_NDIR] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* per direction: the attributes of x, w, y, the convolution, alpha, beta */
    static const cudnnBackendAttributeName_t at[DNN_NDIR][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    ENG_TRY(cudnnBackendCreateDescriptor(type[d], &g->op));
    float alpha = 1.0f, beta = 0.0f;
    for (int i = 0; i < 3; i++)
        ENG_TRY(cudnnBackendSetAttribute(g->op, at[d][i], ENG_DESC, 1, &g->t[i]));
    ENG_TRY(cudnnBackendSetAttribute(g->op, at[d][3], ENG_DESC, 1, &g->conv));
    ENG_TRY(cudnnBackendSetAttribute(g->op, at[d][4], CUDNN_TYPE_FLOAT, 1, &alpha));
    ENG_TRY(cudnnBackendSetAttribute(g->op, at[d][5], CUDNN_TYPE_FLOAT, 1, &beta));
    ENG_TRY(cudnnBackendFinalize(g->op));
    ENG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph));
    ENG_TRY(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, ENG_DESC, 1, &g->op));
    ENG_TRY(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &c->dnn_handle));
    return cudnnBackendFinalize(g->graph);
}

/* A new graph for direction d of cv, or NULL with dt_error set. Grouped
 * convolutions stay with the legacy calls. */
static struct dnn_egraph *eng_graph_new(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d)
{
    struct dnn_egraph *g = (struct dnn_egraph *)dt_calloc(1, sizeof *g);
    g->refs = 1;
    cudnnStatus_t s = cv->groups == 1 ? eng_graph_build(c, cv, d, g) : CUDNN_STATUS_NOT_SUPPORTED;
    if (s != CUDNN_STATUS_SUCCESS) {
        char shape[96];
        dnn_shape_str(shape, sizeof shape, cv);
        dt_error_set("cudnn: no operation graph for %s %s: %s", dnn_dir_name[d], shape, cudnnGetErrorString(s));
        eng_graph_release(g);
        return NULL;
    }
    return g;
}

/* Whether engine descriptor e carries numerical note n. */
static int eng_note(cudnnBackendDescriptor_t e, cudnnBackendNumericalNote_t n)
{
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t k = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &k, notes) != CUDNN_STATUS_SUCCESS)
        return 0;
    for (int64_t i = 0; i < k; i++)
        if (notes[i] == n)
            return 1;
    return 0;
}

/* The engine of configuration cfg on graph g, its plan finalized, or NULL
 * (an engine that uses tensor cores or converts its inputs down, a plan
 * cuDNN does not finalize, a workspace over ws_max). */
static struct dnn_engine *eng_from_cfg(struct gpu_ctx *c, struct dnn_egraph *g, cudnnBackendDescriptor_t cfg,
                                       size_t ws_max)
{
    cudnnBackendDescriptor_t e = NULL, plan = NULL, knob[ENG_MAX_KNOBS] = {NULL};
    int64_t n = 0, gidx = -1, wsb = 0;
    struct dnn_engine *out = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, ENG_DESC, 1, &n, &e) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &gidx) !=
            CUDNN_STATUS_SUCCESS)
        goto done;
    if (eng_note(e, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) || eng_note(e, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
        eng_note(e, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
        goto done;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->dnn_handle) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, ENG_DESC, 1, &cfg) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &wsb) !=
            CUDNN_STATUS_SUCCESS ||
        wsb < 0 || (size_t)wsb > ws_max)
        goto done;
    out = (struct dnn_engine *)dt_calloc(1, sizeof *out);
    out->plan = plan;
    plan = NULL;
    out->g = g;
    g->refs++;
    out->ws = (size_t)wsb;
    out->nondet = eng_note(e, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
    {
        int len = snprintf(out->name, sizeof out->name, "ENGINE%lld", (long long)gidx);
        /* cuDNN fills knob choices only into descriptors made beforehand; a
         * query with no array does not give their count. So ask for as many
         * as there are knob types and take the count it returns. */
        int64_t got = 0;
        int made = 1;
        for (int i = 0; i < ENG_MAX_KNOBS; i++)
            made = made && cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knob[i]) ==
                               CUDNN_STATUS_SUCCESS;
        if (!made || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, ENG_DESC, ENG_MAX_KNOBS, &got,
                                              knob) != CUDNN_STATUS_SUCCESS)
            len = -1; /* knobs that cannot be read make a name that may not build the same engine */
        for (int64_t i = 0; len >= 0 && i < got && i < ENG_MAX_KNOBS; i++) {
            cudnnBackendKnobType_t type;
            int64_t val = 0;
            if (cudnnBackendGetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &n,
                                         &type) != CUDNN_STATUS_SUCCESS ||
                cudnnBackendGetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &n,
                                         &val) != CUDNN_STATUS_SUCCESS) {
                len = -1;
                break;
            }
            if ((size_t)len < sizeof out->name)
                len += snprintf(out->name + len, sizeof out->name - (size_t)len, ".K%d=%lld", (int)type,
                                (long long)val);
        }
        if (got > ENG_MAX_KNOBS)
            len = -1;
        if (len < 0 || (size_t)len >= sizeof out->name) { /* a name cut short or unread could not be built again */
            dnn_engine_free(out);
            out = NULL;
        }
    }
done:
    for (int i = 0; i < ENG_MAX_KNOBS; i++)
        eng_free_desc(knob[i]);
    eng_free_desc(plan);
    eng_free_desc(e);
    return out;
}

int dnn_engine_rank(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d, size_t ws_max,
                    struct dnn_engine **out, int max)
{
    struct dnn_egraph *g = eng_graph_new(c, cv, d);
    if (!g)
        return DT_ERR;
    int n = 0;
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2 && n < max; m++) {
        cudnnBackendDescriptor_t heur = NULL, cfg[ENG_MAX_CFGS] = {NULL};
        int64_t k = 0, got = 0;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, ENG_DESC, 1, &g->graph) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, ENG_DESC, 0, &k, NULL) ==
                CUDNN_STATUS_SUCCESS) {
            if (k > ENG_MAX_CFGS)
                k = ENG_MAX_CFGS;
            for (int64_t i = 0; i < k; i++)
                GPU_DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
            if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, ENG_DESC, k, &got, cfg) !=
                CUDNN_STATUS_SUCCESS)
                got = 0;
            for (int64_t i = 0; i < got && n < max; i++) {
                struct dnn_engine *e = eng_from_cfg(c, g, cfg[i], ws_max);
                int dup = 0;
                for (int j = 0; e && j < n && !dup; j++)
                    dup = strcmp(out[j]->name, e->name) == 0;
                if (e && dup)
                    dnn_engine_free(e);
                else if (e)
                    out[n++] = e;
            }
            for (int64_t i = 0; i < k; i++)
                eng_free_desc(cfg[i]);
        }
        eng_free_desc(heur);
    }
    eng_graph_release(g);
    return n;
}

struct dnn_engine *dnn_engine_named(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                    const char *name, size_t len, size_t ws_max)
{
    char buf[DNN_ENGINE_NAME];
    if (len >= sizeof buf || strncmp(name, "ENGINE", 6) != 0) {
        dt_error_set("cudnn: '%.*s' is not an engine's name", (int)len, name);
        return NULL;
    }
    memcpy(buf, name, len);
    buf[len] = 0;
    char *p = buf + 6, *end;
    long long gidx = strtoll(p, &end, 10);
    int64_t type[ENG_MAX_KNOBS], val[ENG_MAX_KNOBS];
    int nk = 0, bad = end == p || gidx < 0;
    for (p = end; !bad && *p;) {
        if (p[0] != '.' || p[1] != 'K' || nk == ENG_MAX_KNOBS) {
            bad = 1;
            break;
        }
        type[nk] = strtoll(p + 2, &end, 10);
        if (end == p + 2 || *end != '=') {
            bad = 1;
            break;
        }
        p = end + 1;
        val[nk] = strtoll(p, &end, 10);
        bad = end == p;
        p = end;
        nk++;
    }
    if (bad) {
        dt_error_set("cudnn: the engine name '%s' does not parse", buf);
        return NULL;
    }
    struct dnn_egraph *g = eng_graph_new(c, cv, d);
    if (!g)
        return NULL;
    cudnnBackendDescriptor_t e = NULL, cfg = NULL, knob[ENG_MAX_KNOBS] = {NULL};
    struct dnn_engine *out = NULL;
    int64_t gi = gidx;
    int ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) == CUDNN_STATUS_SUCCESS &&
             cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, ENG_DESC, 1, &g->graph) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &gi) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnBackendFinalize(e) == CUDNN_STATUS_SUCCESS;
    for (int i = 0; ok && i < nk; i++) {
        cudnnBackendKnobType_t kt = (cudnnBackendKnobType_t)type[i];
        ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knob[i]) == CUDNN_STATUS_SUCCESS &&
             cudnnBackendSetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &kt) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnBackendSetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &val[i]) ==
                 CUDNN_STATUS_SUCCESS &&
             cudnnBackendFinalize(knob[i]) == CUDNN_STATUS_SUCCESS;
    }
    ok = ok && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) == CUDNN_STATUS_SUCCESS &&
         cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, ENG_DESC, 1, &e) == CUDNN_STATUS_SUCCESS &&
         (nk == 0 || cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, ENG_DESC, nk, knob) ==
                         CUDNN_STATUS_SUCCESS) &&
         cudnnBackendFinalize(cfg) == CUDNN_STATUS_SUCCESS;
    if (ok)
        out = eng_from_cfg(c, g, cfg, ws_max);
    if (out) /* the recorded name, whatever knobs cuDNN lists besides */
        snprintf(out->name, sizeof out->name, "%s", buf);
    if (!out) {
        char shape[96];
        dnn_shape_str(shape, sizeof shape, cv);
        dt_error_set("cudnn: the recorded engine %s does not build for %s %s here", buf, dnn_dir_name[d], shape);
    }
    for (int i = 0; i < ENG_MAX_KNOBS; i++)
        eng_free_desc(knob[i]);
    eng_free_desc(cfg);
    eng_free_desc(e);
    eng_graph_release(g);
    return out;
}

cudnnStatus_t dnn_engine_exec(struct gpu_ctx *c, const struct dnn_engine *e, void *ws, const void *x,
                              const void *w, const void *y)
{
    cudnnBackendDescriptor_t pack;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (s != CUDNN_STATUS_SUCCESS)
        return s;
    void *ptr[3] = {(void *)x, (void *)w, (void *)y};
    int64_t uid[3] = {ENG_UID_X, ENG_UID_W, ENG_UID_Y};
    if ((s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uid)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = cudnnBackendFinalize(pack)) == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendExecute(c->dnn_handle, e->plan, pack);
    cudnnBackendDestroyDescriptor(pack);
    return s;
}

const char *dnn_engine_name(const struct dnn_engine *e) { return e->name; }
size_t dnn_engine_ws(const struct dnn_engine *e) { return e->ws; }
int dnn_engine_nondet(const struct dnn_engine *e) { return e->nondet; }

void dnn_engine_free(struct dnn_engine *e)
{
    if (!e)
        return;
    eng_free_desc(e->plan);
    eng_graph_release(e->g);
    free(e);
}
