/* fast.h: what the files of divtrace._fast share (fast.c: the Core type
 * and the module; fast_hooks.c: the Hook and Wrap types; fast_paths.c: the
 * tensor queries and the paths of a step after the first). The C core does what _core.py's PyCore does,
 * line for line: read that first, it is the specification.
 *
 * Reference counts: every PyObject * field of Core owns its reference;
 * slot.name/type/shape and group.shapes/owners too. Functions that return
 * int return PYERR with a Python exception set, else what PyCore returns
 * (1 or 0, or a library status: -1 to -7). */
#ifndef DT_FAST_H
#define DT_FAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "divtrace.h"

#define HOST_RUN (-1LL)
/* the tensor queries (qname): attributes, then methods */
enum { Q_DTYPE, Q_LAYOUT, Q_SHAPE, Q_IS_CUDA, Q_IS_CPU, Q_VERSION, Q_GRAD, Q_REQUIRES_GRAD, Q_CDATA,
       Q_IS_CONTIGUOUS, Q_GET_DEVICE, Q_DATA_PTR, NQ };
#define Q_FIRST_METHOD Q_IS_CONTIGUOUS
#define NTYPES 4
#define NGROUPS 3
enum { GROUP_PARAM, GROUP_GRAD, GROUP_UPDATE }; /* the Recorder's _PARAM, _GRAD, _UPDATE */
#define PYERR (-1000) /* a Python exception is set (library statuses are -1 .. -7) */

/* Py_XSETREF is not in the limited API */
#define SETREF(dst, src)                                                                           \
    do {                                                                                           \
        PyObject *old_ = (PyObject *)(dst);                                                        \
        (dst) = (src);                                                                             \
        Py_XDECREF(old_);                                                                          \
    } while (0)

typedef int (*record_many_fn)(void *, int, const struct divtrace_tensor *, const float *const *,
                              enum divtrace_where, void *);
typedef int (*flush_fn)(void *);

struct slot {
    PyObject *name, *type, *shape; /* str, bytes, torch.Size */
    int kind, deferrable;
};

struct group {
    Py_ssize_t k0, n;
    PyObject *shapes, *owners; /* tuples; NULL: no such group */
    int deferrable;
};

/* PyTorch's C shim: functions libtorch exports with C linkage (for
 * AOTInductor's compiled models), each taking an AtenTensorHandle (an
 * at::Tensor *; an at::Tensor is one pointer, its TensorImpl's, which a
 * tensor's _cdata gives) and returning 0 or an error code. Core.use_shim
 * sets them after checking them against the Python queries. */
typedef int32_t (*shim_i32_fn)(void *, int32_t *);
typedef int32_t (*shim_i64_fn)(void *, int64_t *);
typedef int32_t (*shim_sizes_fn)(void *, int64_t **);
typedef int32_t (*shim_bool_fn)(void *, _Bool *);
typedef int32_t (*shim_ptr_fn)(void *, void **);
typedef int32_t (*shim_stream_fn)(int32_t, void **);

struct shim {
    shim_i32_fn dtype, layout, device_type, device_index;
    shim_bool_fn is_contiguous;
    shim_i64_fn dim;
    shim_sizes_fn sizes;
    shim_ptr_fn data_ptr;
    shim_stream_fn stream; /* the current stream of a cuda device; NULL: torch.cuda's, from Python */
    int32_t f32, strided, cpu, cuda;
    int cuda_ok; /* a cuda sample agreed: cuda tensors through the shim too */
};

/* What a record needs of a tensor: fits (float32, strided, contiguous,
 * on the cpu or a cuda device); then where it is, its shape (sizes from
 * the shim, or shape, a torch.Size, from Python) and its data. */
struct tinfo {
    int fits, cuda;
    int32_t dev;
    int64_t ndim;
    const int64_t *sizes;
    PyObject *shape; /* owned; NULL when sizes are given */
    void *data;
};

/* fast_step.c's paths: the Recorder's slow paths and what the fast ones
 * need (Core.paths at the hooks' install; Core.arm after the first step) */
struct arm {
    int on, end;        /* armed; step() may end a step here (an optimizer, or level step) */
    uint64_t steps;     /* steps ended: the next step's index (the Recorder's steps) */
    long ckpt_every;
    int (*step_begin)(void *, uint64_t);
    int (*step_end)(void *, double);
    int (*step_end_async)(void *, const float *, void *);
    /* the Recorder's: fail(status), flush_failed(r), _root_pre_hook,
     * _begin_params(), record_input(name, t), _opt_pre_hook, _opt_post_hook */
    PyObject *fail, *flush_failed, *root_slow, *begin_params, *record_input, *opt_pre_slow, *opt_post_slow;
    /* the parameters (tuple), their reserved names, the optimizer's
     * parameters; the root's inputs: their places in its arguments and
     * names; b"input", "", "item" */
    PyObject *params, *param_names, *updates, *input_idx, *input_names, *input_type, *root_key, *s_item;
    PyObject *param_set; /* param_names as a frozenset */
};

typedef struct {
    PyObject_HEAD
    /* torch: float32, strided, torch.Tensor, the raw current stream of a
     * device, torch.is_grad_enabled */
    PyObject *f32, *strided, *tensor_type, *raw_stream, *grad_on;
    /* flags and counters (PyCore's attributes) */
    int paused, in_step, deferring, record_no_grad;
    Py_ssize_t nrec, ndef, pend0;
    long long pend_stream;
    PyObject *used, *calls, *keep, *watch; /* set, dict, list, list */
    /* after a step ended without a wait (divtrace_step_end_async): its kept
     * tensors, until the next step's begin has read its records, and its
     * loss, until the next step's end has read it */
    PyObject *keep_prev, *prev_loss;
    /* the parameters' names are used this step but not yet in used (the
     * step's start sets it; fast_used and the attribute used see them) */
    int params_reserved;
    /* after fix() */
    void *h;
    record_many_fn many;
    flush_fn flush;
    PyObject *lib_refs; /* the ctypes objects behind h, many, flush, ts, ptrs */
    const char *ts;
    Py_ssize_t ts_size;
    void **ptrs;
    struct slot *slots;
    Py_ssize_t nslots;
    struct group groups[NGROUPS];
    /* the tensor queries: torch.Tensor's descriptor of each, its getter
     * (NULL: a method), and the types known to resolve every query to
     * those descriptors (ok) or not (bad) */
    PyObject *qd[NQ];
    descrgetfunc qget[NQ];
    PyObject *ok_types[NTYPES], *bad_types[NTYPES];
    /* the shim, when Core.use_shim found it agrees with the queries */
    struct shim shim;
    int use_shim;
    struct arm arm;
    Py_ssize_t last_nrec, last_ndef; /* the last step's records, deferred ones */
} Core;

/* the query names, interned by fast_paths_init */
extern PyObject *fast_qstr[NQ];
int fast_paths_init(void);

/* getattr(o, the query's name), called when it is a method: a new reference */
PyObject *fast_q(Core *c, PyObject *o, int k);
int fast_push(Core *c);
int fast_buffer(Core *c, Py_ssize_t k, PyObject *t);
int fast_try_defer(Core *c, PyObject *name, PyObject *type, int kind, PyObject *t);
/* watch 0: the group's deferred tensors are not watched (the caller's flush
 * point follows at once, with nothing run in between) */
int fast_group(Core *c, int gid, PyObject *tensors, PyObject *owners, int watch);
int fast_grads(Core *c, int gid, PyObject *params, int watch);
/* what a record needs of t: through the shim when the core uses it and t's
 * type is plain, else through the Python queries (which stop at the first
 * that does not fit). 0 or PYERR; tinfo_done releases ti. */
int fast_tinfo(Core *c, PyObject *t, struct tinfo *ti);
void fast_tinfo_done(struct tinfo *ti);
/* a fitting tensor's current stream (HOST_RUN on the host), its elements: 0 or PYERR */
int fast_tinfo_stream(Core *c, const struct tinfo *ti, long long *out);
int fast_tinfo_numel(const struct tinfo *ti, long long *out);
/* 1 when the shim's answers for t are the Python queries', 0 when not, PYERR */
int fast_shim_agrees(Core *c, PyObject *t);

/* fast.c: a step's state begun (PyCore.reset); PyCore.flush_point; a
 * group (params given: the gradients) and a flush point after it */
/* whether name is used this step (the reserved parameter names too):
 * 1, 0, or -1 with an exception set */
int fast_used(Core *c, PyObject *name);
int fast_reset_state(Core *c);
PyObject *fast_flush_point(Core *c, int flush);
PyObject *fast_group_then_flush(Core *c, int gid, PyObject *tensors, PyObject *owners, PyObject *params);
/* fast_step.c: the paths of Core.root_pre, opt_pre, opt_post, end_step */
PyObject *fast_root_pre(Core *c, PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *fast_opt_pre(Core *c, PyObject *opt, PyObject *args, PyObject *kwargs);
PyObject *fast_opt_post(Core *c, PyObject *opt, PyObject *args, PyObject *kwargs);
PyObject *fast_end_step(Core *c, PyObject *loss);

/* fast.c: the dealloc of an object of one of the module's (heap, GC) types */
void fast_gc_dealloc(PyObject *self, inquiry clear);
/* fast_hooks.c: Core.hook(fallback, fail, mname, mtype) -> a new Hook; the
 * Hook and Wrap types made and added to the module */
PyObject *fast_hook_new(Core *c, PyObject *args);
int fast_hooks_init(PyObject *m);

#endif
