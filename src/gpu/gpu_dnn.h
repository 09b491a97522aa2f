/* gpu_dnn.h: the cudnn backend's plan, shared by gpu_dnn.cu (descriptors,
 * the plan, the op kernels), gpu_dnn_choose.cu (each convolution's
 * algorithm), gpu_dnn_fuse.cu (convolutions that share an input, run as
 * one), gpu_dnn_engine.cu (the backend API's engines) and gpu_dnn_names.cu
 * (the choices as text). Only .cu files include it. */
#ifndef DT_GPU_DNN_H
#define DT_GPU_DNN_H

#include "gpu.h"

enum dnn_dir { DNN_FWD, DNN_BWD_DATA, DNN_BWD_FILTER, DNN_NDIR };

/* The largest convolution workspace an algorithm may ask for. A constant,
 * not a share of the free memory, so that which algorithms qualify does not
 * depend on what else holds memory on the GPU. */
#define DNN_WORKSPACE_MAX ((size_t)1 << 30)
#define DNN_MAX_CANDIDATES 64

static const float dnn_one = 1.0f, dnn_zero = 0.0f;

/* gpu_dnn_names.cu: the legacy algorithms' names and what cuDNN's
 * documentation says of them. */
extern const char *const dnn_dir_name[DNN_NDIR];
extern const int dnn_algo_count[DNN_NDIR];
const char *dnn_algo_name(enum dnn_dir d, int algo);
/* Documented as not bitwise reproducible run to run (atomics). */
int dnn_algo_documented_nondet(enum dnn_dir d, int algo);
/* An FFT or Winograd transform, not a summation of the products. */
int dnn_algo_transform(enum dnn_dir d, int algo);

/* An engine configuration of cuDNN's backend API with its execution plan
 * (gpu_dnn_engine.cu). */
struct dnn_engine;
#define DNN_ENGINE_NAME 192 /* "ENGINE<global index>.K<knob>=<choice>..." */
/* cv->algo[d] of a direction that runs cv->eng[d] */
#define DNN_ALGO_ENGINE 1000

/* One convolution shape and the algorithm chosen for each direction the
 * graph uses. */
struct gpu_dnn_conv {
    uint32_t n, c, h, w, k, r, s;
    uint32_t groups;                    /* 1, or cuDNN's group count: C and K split in as many parts */
    cudnnTensorDescriptor_t x, y;       /* (N,C,H,W), (N,K,H,W): owned by the tensor list */
    cudnnFilterDescriptor_t f;          /* (K,C,R,S) */
    cudnnConvolutionDescriptor_t conv;
    int used[DNN_NDIR];
    int algo[DNN_NDIR];                 /* a legacy algorithm, or DNN_ALGO_ENGINE */
    struct dnn_engine *eng[DNN_NDIR];   /* DNN_ALGO_ENGINE: the engine (owned) */
    size_t ws[DNN_NDIR];                /* workspace bytes of the chosen algorithm */
    int det[DNN_NDIR];                  /* cuDNN reports the choice deterministic */
    float time[DNN_NDIR];               /* fastest: cuDNN's measured ms of the choice; else 0 */
};

/* A 4-d NCHW float tensor descriptor, shared by every node of its shape. */
struct gpu_dnn_tensor {
    uint32_t d[4];
    cudnnTensorDescriptor_t desc;
};

/* Per node: its convolution (index into conv[], or -1), its group (index
 * into group[], or -1) and the descriptors its kernel uses (NULL for nodes
 * that do not go to cuDNN). */
struct gpu_dnn_node {
    int conv;
    int group;
    cudnnTensorDescriptor_t a, b;
};

/* Convolutions of one direction (forward, or filter gradient) that share
 * their input x and their shapes, each of K output channels, made one
 * convolution of nmem * K output channels over their filters (forward) or
 * output gradients (filter gradient) stacked in member order
 * (gpu_dnn_fuse.cu). Every input of every member is made before the first
 * member, so the first member's kernel can compute them all. */
#define DNN_GROUP_MAX 8
struct gpu_dnn_group {
    enum dnn_dir d;
    int nmem;                           /* 0: a set dissolved by dnn_fuse_prune */
    int mem[DNN_GROUP_MAX];             /* node indices in graph order */
    uint64_t dist[DNN_GROUP_MAX];       /* op nodes after mem[0] up to mem[k] */
    int conv;                           /* the stacked convolution */
    /* the last pass: c->enters when member `from` computed members from..nmem-1 */
    uint64_t stamp;
    int from;                           /* -1: none yet */
};

enum { DNN_ACT_RELU, DNN_ACT_TANH, DNN_ACT_SIGMOID, DNN_NACT };

struct gpu_dnn_plan {
    const struct graph *g;              /* the graph prepared, to catch a stray one */
    int n;
    struct gpu_dnn_node *node;          /* n entries */
    struct gpu_dnn_conv *conv;
    int nconv, capconv;
    struct gpu_dnn_tensor *tensor;
    int ntensor, captensor;
    struct gpu_dnn_group *group;
    int ngroup;
    size_t fuse_max;                    /* bytes of stacked data the largest group or pair sum needs */
    cudnnActivationDescriptor_t act[DNN_NACT];
    cudnnPoolingDescriptor_t pool_fwd;  /* CUDNN_POOLING_MAX_DETERMINISTIC */
    cudnnPoolingDescriptor_t pool_bwd;  /* CUDNN_POOLING_MAX: fastest mode's backward */
    size_t ws_max;
};

/* The convolution of shape (N,C,H,W) * (K,C,R,S) in p's list, made on first use. */
int dnn_conv_find(struct gpu_dnn_plan *p, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                  uint32_t k, uint32_t r, uint32_t s);
/* The same with cuDNN's group count: C and K are the totals, each group
 * sums over C / groups input channels into K / groups output channels. */
int dnn_conv_find_grouped(struct gpu_dnn_plan *p, uint32_t n, uint32_t c, uint32_t h, uint32_t w,
                          uint32_t k, uint32_t r, uint32_t s, uint32_t groups);
/* gpu_dnn.cu's policy, which the description reports: cuDNN's bias
 * gradient and its max-pooling gradient run (the fastest mode), or the
 * cuda backend's kernels. */
int dnn_bias_grad_is_cudnn(const struct gpu_ctx *c);
int dnn_pool_bwd_is_cudnn(const struct gpu_ctx *c);
/* "NxCxHxW kK RxS" (gpu_dnn_names.cu) */
void dnn_shape_str(char *buf, size_t size, const struct gpu_dnn_conv *cv);
/* gpu_dnn_choose.cu: choose cv's algorithm in each direction (--cudnn-algo,
 * or a replay's recorded ones) and size its workspace; 0, or -1 with
 * dt_error set. */
int dnn_conv_plan(struct gpu_ctx *c, struct gpu_dnn_conv *cv);
/* One convolution with algorithm algo (see gpu_dnn_choose.cu); the status. */
cudnnStatus_t dnn_conv_call(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d, int algo,
                            void *ws, size_t ws_bytes, const void *a, const void *b, void *out);
/* The algorithm a cudnn_algos list names for direction d of shape, or -1. */
int dnn_algos_find(const char *list, enum dnn_dir d, const char *shape, int *det);

/* The name of direction d's choice: the legacy algorithm's or the engine's. */
const char *dnn_cv_algo_name(const struct gpu_dnn_conv *cv, enum dnn_dir d);
/* The recorded name of direction d of shape in a cudnn_algos list: 1 with
 * *name, *len and *det set, or 0 (no entry). */
int dnn_algos_entry(const char *list, enum dnn_dir d, const char *shape, const char **name, size_t *len,
                    int *det);

/* gpu_dnn_engine.cu. The engine configurations cuDNN's heuristics rank for
 * direction d of cv (mode A, then FALLBACK; the first ENG_MAX_CFGS of
 * each), best first, without those that use tensor cores or convert their
 * inputs down, those whose plan does not finalize and those whose
 * workspace is over ws_max: at most max into out, owned by the caller;
 * the count, or -1 with dt_error set. */
int dnn_engine_rank(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d, size_t ws_max,
                    struct dnn_engine **out, int max);
/* The engine configuration a trace named, built again, or NULL with
 * dt_error set. */
struct dnn_engine *dnn_engine_named(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, enum dnn_dir d,
                                    const char *name, size_t len, size_t ws_max);
/* One call on c's current handle: x, w, y as the direction has them (the
 * output among them); the status. */
cudnnStatus_t dnn_engine_exec(struct gpu_ctx *c, const struct dnn_engine *e, void *ws, const void *x,
                              const void *w, const void *y);
const char *dnn_engine_name(const struct dnn_engine *e);
size_t dnn_engine_ws(const struct dnn_engine *e);
int dnn_engine_nondet(const struct dnn_engine *e); /* cuDNN's NONDETERMINISTIC note */
void dnn_engine_free(struct dnn_engine *e);

/* gpu_dnn_fuse.cu. Group the convolutions of p's graph that can run as one
 * (not with DIVTRACE_CUDNN_FUSE=0, nor in a replay whose recorded
 * algorithms have no entry for the stacked shape), marking the stacked
 * shapes used; members keep their own shapes for a pass in which they must
 * run alone. */
void dnn_fuse_plan(struct gpu_ctx *c, struct gpu_dnn_plan *p, const struct graph *g);
/* Fastest mode, after every algorithm is chosen: the sets whose stacked
 * call cuDNN timed no faster than its members' calls run as separate
 * calls again. */
void dnn_fuse_prune(struct gpu_ctx *c, struct gpu_dnn_plan *p);
/* Node nd (member k of group gr) in the current pass: 1 when its output is
 * computed (by this call, with the members after it, or by an earlier
 * member's), 0 when it must run alone (st->bufs missing). */
int dnn_fuse_member(struct gpu_ctx *c, struct gpu_dnn_group *gr, int k, const struct backend_step *st);
/* A data gradient of m > 1 pairs (dy_j, w_j) is one backward-data call of
 * cv, their stacked shape (K = m times a pair's): dnn_pairs_plan sizes the
 * lanes' stacking buffer for it at prepare; dnn_pairs_run, its kernel,
 * stacks the pairs there (filters along K, dy along channels) and makes
 * the call into out. */
void dnn_pairs_plan(struct gpu_dnn_plan *p, const struct gpu_dnn_conv *cv);
void dnn_pairs_run(struct gpu_ctx *c, const struct gpu_dnn_conv *cv, int m, backend_buf *out,
                   const backend_buf *const *in);

#endif
