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
enum { Q_DTYPE, Q_LAYOUT, Q_SHAPE, Q_IS_CUDA, Q_IS_CPU, Q_VERSION, Q_GRAD, Q_REQUIRES_GRAD, Q_IS_CONTIGUOUS,
       Q_GET_DEVICE, Q_DATA_PTR, NQ };
#define Q_FIRST_METHOD Q_IS_CONTIGUOUS
#define NTYPES 4
#define NGROUPS 3
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

/* fast.c: the dealloc of an object of one of the module's (heap, GC) types */
void fast_gc_dealloc(PyObject *self, inquiry clear);
/* fast_hooks.c: Core.hook(fallback, fail, mname, mtype) -> a new Hook; the
 * Hook and Wrap types made and added to the module */
PyObject *fast_hook_new(Core *c, PyObject *args);
int fast_hooks_init(PyObject *m);

#endif
